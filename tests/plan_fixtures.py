"""Shared builders for the plan, explain, trace and check tests (not a test module).

- ``toy_problem()``: a small graph with a weight, a branch and a join on the toy machine
  (hand-checkable numbers), and ``toy_plan()``: it placed across cpu and gpu with an fp16
  vertex, so the plan has transfers, conversions and crossings;
- ``mlp_plan()``: ``zoo:mlp`` on the ``h100-sxm-server`` preset with the roofline model and
  a fixed placement (first vertex on the cpu, the rest on gpu0 in bf16): the golden files'
  plan, independent of any search;
- ``golden(path, text)``: compare with a file under tests/golden, or rewrite it when
  ``UPDATE_GOLDEN=1``.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
from placewise.hardware.spec import Machine
from placewise.plan import Plan, build_plan
from placewise.schedule import Assignment, Placement, Problem, evaluate
from placewise.schedule.testing import ToyCostModel, toy_machine
from placewise.units import DType

GOLDEN = Path(__file__).parent / "golden"


def toy_graph() -> Graph:
    """x -> a (relu) -> h; h -> b (mul by weight w) -> y1 (output); h -> c (exp) -> k;
    (y1, k) -> d (add) -> y2 (output)."""
    ts = [Tensor("x", (1000,), DType.FP32, role=Role.INPUT),
          Tensor("w", (1000,), DType.FP32, role=Role.PARAM),
          Tensor("h", (1000,), DType.FP32),
          Tensor("y1", (1000,), DType.FP32, role=Role.OUTPUT),
          Tensor("k", (1000,), DType.FP32),
          Tensor("y2", (1000,), DType.FP32, role=Role.OUTPUT)]
    ops = [Op("a", OpKind.RELU, ("x",), ("h",)),
           Op("b", OpKind.MUL, ("h", "w"), ("y1",)),
           Op("c", OpKind.EXP, ("h",), ("k",)),
           Op("d", OpKind.ADD, ("y1", "k"), ("y2",))]
    return Graph.build("toy", ts, ops)


def toy_problem(machine: Machine | None = None) -> Problem:
    m = machine or toy_machine()
    return Problem(toy_graph(), None, m, ToyCostModel(m))


TOY_PLACEMENT = {"a": Assignment("cpu", DType.FP32), "b": Assignment("gpu", DType.FP16),
                 "c": Assignment("gpu", DType.FP32), "d": Assignment("cpu", DType.FP32)}


def toy_plan(machine: Machine | None = None, **kw: Any) -> tuple[Problem, Plan]:
    prob = toy_problem(machine)
    ev = evaluate(prob, Placement.of(TOY_PLACEMENT))
    kw.setdefault("strategy", "manual")
    return prob, build_plan(prob, ev, model_ref="toy.json", **kw)


@lru_cache(maxsize=1)
def mlp_setup() -> tuple[Problem, Plan]:
    from placewise.cost.load import load_cost_model
    from placewise.graph.fuse import fuse
    from placewise.graph.zoo import load_zoo
    from placewise.hardware.load import load_machine

    g = load_zoo("zoo:mlp")
    m = load_machine("h100-sxm-server")
    prob = Problem(g, fuse(g), m, load_cost_model(m, None))
    names = prob.vertex_names
    placement = Placement.of({v: Assignment("cpu", DType.FP32) if i == 0
                              else Assignment("gpu0", DType.BF16) for i, v in enumerate(names)})
    plan = build_plan(prob, evaluate(prob, placement), model_ref="zoo:mlp", strategy="manual")
    return prob, plan


def golden(name: str, text: str) -> None:
    """Assert ``text`` equals tests/golden/``name``; with ``UPDATE_GOLDEN=1``, write it."""
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"{path} is missing: run the tests with UPDATE_GOLDEN=1 to create it"
    want = path.read_text(encoding="utf-8")
    assert text == want, (f"{name} differs from the golden file; if the change is intended, "
                          f"rerun with UPDATE_GOLDEN=1 and review the diff")
