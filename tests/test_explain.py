"""explain: data and text of a plan, zooms on an op and on a tensor, golden files."""

from __future__ import annotations

import json

import pytest

from placewise.errors import InputError
from placewise.explain import explain, render_explain
from placewise.plan import Plan, plan_from_json, plan_to_json
from placewise.schedule import Problem
from tests.plan_fixtures import golden, mlp_setup, toy_plan


@pytest.fixture(scope="module")
def toy() -> tuple[Problem, Plan]:
    return toy_plan()


def test_full_explanation_data(toy: tuple[Problem, Plan]) -> None:
    _, plan = toy
    data = explain(plan)
    assert set(data) == {"summary", "critical_path", "crossings", "partitions", "memory",
                         "bound", "search", "precision", "workload"}
    assert data["workload"] is None  # one model
    json.dumps(data)  # JSON-ready for --json
    s = data["summary"]
    assert s["makespan_s"] == plan.makespan_s and s["label"] == "exact schedule"
    assert [d["device"] for d in s["devices_used"]] == ["cpu", "gpu"]
    assert s["devices_used"][1]["dtypes"] == {"fp16": 1, "fp32": 1}
    cp = data["critical_path"]
    assert [t["name"] for t in cp["tasks"]] == list(plan.schedule.critical_path)
    assert sum(cp["totals_s"].values()) == pytest.approx(cp["busy_s"])
    assert cp["busy_s"] + cp["waiting_s"] == pytest.approx(plan.makespan_s)
    assert [c["key"] for c in data["crossings"]] == [c.key for c in plan.crossings]
    b = data["bound"]
    assert b["ratio"] == pytest.approx(plan.makespan_s / plan.lower_bound_s)
    assert b["headroom_s"] == pytest.approx(plan.makespan_s - plan.lower_bound_s)
    assert "over this placement's bound" in b["verdict"]
    mem = {(u["device"], u["tier"]): u for u in data["memory"]["tiers"]}
    assert mem[("gpu", "vram")]["breakdown"]["weights"] == 2000
    assert data["search"] is None


def test_explanation_needs_only_the_file(toy: tuple[Problem, Plan]) -> None:
    _, plan = toy
    again = plan_from_json(json.dumps(plan_to_json(plan)))
    assert render_explain(explain(again)) == render_explain(explain(plan))


def test_text_sections(toy: tuple[Problem, Plan]) -> None:
    _, plan = toy
    text = render_explain(explain(plan))
    for needle in ("plan for toy.json (graph toy) on toy", "makespan 43.8 us (exact schedule)",
                   "critical path: 7 tasks", "crossing edges: 5",
                   "h: a (cpu, fp32/row_major) -> b (gpu, fp16/row_major), 3.91 KiB",
                   "kept on cpu: b in fp32 would cost 13 us instead of 1.6 us (+11.4 us)",
                   "the same copy also serves output", "memory peaks: every tier fits",
                   "bound: makespan 43.8 us = 1.005 x the lower bound 43.6 us",
                   "any placement needs at least", "search: none recorded"):
        assert needle in text, needle
    header = next(line for line in text.splitlines() if line.strip().startswith("task "))
    for term in ("compute", "memory", "launch", "transfer", "conversion"):
        assert term in header
    short = render_explain(explain(plan), max_rows=2)
    assert "... 5 more tasks (totals include them)" in short
    assert "... 3 more (explain --edge TENSOR for one)" in short


def test_lower_bound_only_is_said() -> None:
    _, plan = toy_plan()
    plan = plan.model_copy(update={"exact": False, "notes": ("contention was not modelled",)})
    text = render_explain(explain(plan))
    assert "(lower bound only: contention was not modelled)" in text


def test_op_zoom(toy: tuple[Problem, Plan]) -> None:
    _, plan = toy
    data = explain(plan, op="b")
    assert set(data) == {"header", "op"}
    o = data["op"]
    assert o["vertex"] == "b" and o["device"] == "gpu" and o["dtype"] == "fp16"
    assert o["task"]["terms_s"] and o["task"]["deps"]
    assert {a["device"] for a in o["alternatives"]} == {"cpu", "gpu"}
    assert [c["tensor"] for c in o["crossings_in"]] == ["h"]
    assert [c["tensor"] for c in o["crossings_out"]] == ["y1", "y1"]
    text = render_explain(data)
    assert "vertex b: gpu/fp16, pattern single" in text
    assert "alternatives (cheapest dtype per device, uncontended):" in text
    assert "started when conv:h:fp32->fp16@cpu ended" in text or "started when xfer:" in text


def test_edge_zoom(toy: tuple[Problem, Plan]) -> None:
    _, plan = toy
    e = explain(plan, edge="h")["edge"]
    assert e["producer"] == "a" and e["produced_on"] == "cpu"
    assert e["consumers"] == ["b", "c"] and e["status"] == "crosses 2 times"
    w = explain(plan, edge="w")["edge"]
    assert w["status"] == "a weight, resident on gpu (no transfer)"
    x = explain(plan, edge="x")["edge"]
    assert x["produced_on"] == "cpu" and x["crossings"] == []
    both = explain(plan, op="a", edge="k")
    assert set(both) == {"header", "op", "edge"}


def test_unknown_names_are_input_errors(toy: tuple[Problem, Plan]) -> None:
    _, plan = toy
    with pytest.raises(InputError) as exc:
        explain(plan, op="bb")
    assert exc.value.place == "--op" and "'bb'" in exc.value.problem
    assert "did you mean b" in exc.value.problem
    with pytest.raises(InputError) as exc:
        explain(plan, edge="zz")
    assert exc.value.place == "--edge" and "no tensor named 'zz'" in exc.value.problem


# ---- golden files: zoo:mlp on h100-sxm-server, a fixed placement, roofline costs ----------------
def test_golden_explain_mlp() -> None:
    _, plan = mlp_setup()
    golden("explain_mlp_h100.txt", render_explain(explain(plan)))


def test_golden_explain_mlp_zoom() -> None:
    _, plan = mlp_setup()
    # a vertex on gpu0, the tensor crossing into it, and an op inside a fused region
    text = "\n".join([render_explain(explain(plan, op="linear_1")),
                      render_explain(explain(plan, edge="relu")),
                      render_explain(explain(plan, op="relu_2"))])
    golden("explain_mlp_h100_zoom.txt", text)


def test_partitions_are_the_executors_and_each_cut_is_priced(
        toy: tuple[Problem, Plan]) -> None:
    """The count is the executor's rule on the same plan (``plan_partitions``, which needs
    the graph and machine; explain needs only the file); a cut's ``added_s`` is its
    crossings' tasks, each once, and ``saved_s`` the receiving partition's recorded
    alternative on the sender's device less its own time."""
    from placewise.runtime.program import plan_partitions
    from placewise.schedule import Placement, evaluate
    from placewise.schedule.placement import feasible_assignments

    prob, plan = toy
    data = explain(plan)["partitions"]
    parts = plan_partitions(plan, prob.graph, prob.machine)
    assert data["count"] == len(parts)
    assert [p["name"] for p in data["partitions"]] == [p.name for p in parts]
    assert sum(data["per_device"].values()) == len(parts)
    assert data["cuts"], "the toy plan crosses between cpu and gpu"
    idx = plan.task_index()
    owner = {v: p for p in parts for v in p.tasks}
    for cut in data["cuts"]:
        src = next(p for p in parts if p.name == cut["from"])
        dst = next(p for p in parts if p.name == cut["to"])
        assert src.device != dst.device
        tasks = {n for c in plan.crossings if c.src_vertex and c.dst_vertex
                 and owner[c.src_vertex] is src and owner[c.dst_vertex] is dst
                 for n in c.tasks}
        assert cut["added_s"] == pytest.approx(sum(idx[n].duration_s for n in tasks))
        own = sum(idx[v].duration_s - idx[v].contention_s for v in dst.tasks)
        alt = sum(next(a.total_s for a in plan.regions[v].alternatives
                       if a.device == src.device) for v in dst.tasks)
        assert cut["saved_s"] == pytest.approx(alt - own)
        assert cut["net_s"] == pytest.approx(cut["saved_s"] - cut["added_s"])
        # what the cut buys: the plan re-evaluated with the receiving partition on the
        # sender's device (its vertices keep their dtype where that device runs it)
        moved = dict(plan.placement_obj().items())
        for v in dst.tasks:
            there = [a for a in feasible_assignments(prob, v) if a.device == src.device]
            moved[v] = next((a for a in there if a.dtype is moved[v].dtype), None) or min(
                there, key=lambda a: prob.cost(v, a.device, a.dtype).total_s)
        value = evaluate(prob, Placement.of(moved)).latency_s
        assert cut["merged_value_s"] == pytest.approx(value)
        assert cut["buys_s"] == pytest.approx(value - plan.predicted_latency_s)
    text = render_explain(explain(plan))
    assert f"partitions: {len(parts)} (" in text
    assert "buys: how much worse the plan's objective is" in text


def test_one_device_plan_has_one_partition_and_no_cut() -> None:
    from placewise.plan import build_plan
    from placewise.schedule import Placement, evaluate
    from placewise.units import DType
    from tests.plan_fixtures import toy_problem

    prob = toy_problem()
    ev = evaluate(prob, Placement.uniform(prob.vertex_names, "cpu", DType.FP32))
    data = explain(build_plan(prob, ev, model_ref="toy.json", strategy="manual"))
    assert data["partitions"]["count"] == 1 and data["partitions"]["cuts"] == []
