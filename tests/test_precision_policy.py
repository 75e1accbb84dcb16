"""The precision policy: parsing, KEEP never lowers (property), admission by the budget,
the whole-assignment re-check and its fallback, the plan record and explain."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placewise.cost.roofline import RooflineModel
from placewise.errors import Infeasible, InputError
from placewise.explain import explain, render_explain
from placewise.graph.fuse import fuse
from placewise.graph.ir import Graph
from placewise.hardware.load import load_machine
from placewise.hardware.spec import Machine, list_presets
from placewise.plan import build_plan, plan_from_json, plan_to_json
from placewise.precision.policy import (
    DEFAULT_BUDGET,
    Policy,
    QualityBudget,
    emulated_ops,
    is_lowering,
    lowered_of,
    natural_dtype,
    parse_policy,
    plan_with_policy,
    precision_json,
)
from placewise.schedule.placement import Problem
from placewise.search.api import plan_search
from placewise.units import DType
from tests.strategies import random_graphs


@cache
def _preset(name: str) -> Machine:
    return load_machine(name)


def _search(problem: Problem) -> Any:
    return plan_search(problem, strategy="heft", time_limit_s=30.0)


# ---- parsing ------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["KEEP", "keep", "fp32", "FP16", "bf16", "int8", "Mixed"])
def test_policies_parse(text: str) -> None:
    assert parse_policy(text).value == text.lower()


@pytest.mark.parametrize("text", ["", "fp8", "int4", "lowest"])
def test_unknown_policy_is_refused(text: str) -> None:
    with pytest.raises(InputError, match="unknown precision policy") as e:
        parse_policy(text)
    assert e.value.place == "--precision"


@pytest.mark.parametrize(("text", "problem"), [
    ("rel_l2", "expected METRIC=VALUE"), ("psnr=30", "expected METRIC=VALUE"),
    ("rel_l2=abc", "is not a number"), ("rel_l2=0", "must be in"),
    ("rel_l2=2", "must be in"), ("cosine=1.5", "must be in"), ("top1=-0.1", "must be in"),
    ("max_abs=inf", "positive and finite"), ("max_abs=nan", "positive and finite"),
])
def test_bad_budgets_are_refused(text: str, problem: str) -> None:
    with pytest.raises(InputError, match=problem) as e:
        QualityBudget.parse(text)
    assert e.value.place == "--quality-budget"


def test_budget_direction_and_default() -> None:
    assert QualityBudget.parse(None) is DEFAULT_BUDGET
    assert DEFAULT_BUDGET.text() == "rel_l2=0.01" and DEFAULT_BUDGET.default
    cos = QualityBudget.parse("cosine=0.99")
    assert cos.holds({"cosine": 0.995}) and not cos.holds({"cosine": 0.98})
    top = QualityBudget.parse("top1=0.9")
    assert top.error({"top1": 0.95}) == pytest.approx(0.05)
    mx = QualityBudget.parse("max_abs=0.1")
    assert mx.combine([0.05, 0.04]) == pytest.approx(0.09)
    rel = QualityBudget.parse("rel_l2=0.05")
    assert rel.combine([0.03, 0.04]) == pytest.approx(0.05)


def test_lowering_is_anything_but_the_own_or_a_wider_float() -> None:
    assert is_lowering(DType.INT8, DType.FP32) and is_lowering(DType.BF16, DType.FP16)
    assert not is_lowering(DType.FP32, DType.FP32)
    assert not is_lowering(DType.FP32, DType.FP16)


# ---- KEEP never lowers ----------------------------------------------------------------------
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph=random_graphs(max_ops=8), preset=st.sampled_from(sorted(list_presets())),
       fused=st.booleans())
def test_keep_never_lowers_precision(graph: Graph, preset: str, fused: bool) -> None:
    machine = _preset(preset)
    problem = Problem(graph, fuse(graph) if fused else None, machine, RooflineModel(machine))
    try:
        out = plan_with_policy(problem, Policy.KEEP, DEFAULT_BUDGET, _search)
    except Infeasible:
        return  # honest: no device computes some vertex at the model's own precision
    placement = out.result.best.placement
    for v in problem.vertices:
        assert placement[v.name].dtype is natural_dtype(problem, v.index)
    assert lowered_of(out.problem, placement) == {}
    assert out.decisions == [] and out.estimated == {}
    rec = precision_json(out)
    assert rec["policy"] == "keep" and rec["lowered"] == {} and rec["decisions"] == []


# ---- admission, re-check and fallback with a known error model -------------------------------
class _Emulator:
    """Outputs whose relative error is ``sum(err[op] for lowered ops)`` (errors add
    linearly: worse than the quadrature estimate, so the re-check has work to do)."""

    def __init__(self, err: Mapping[str, float]) -> None:
        self.err = err
        self.calls: list[dict[str, DType]] = []

    def why_not(self, op_name: str, dtype: DType) -> str:
        return ""

    def outputs(self, requests: Sequence[Sequence[Any]], lowered: Mapping[str, DType]
                ) -> list[list[Any]]:
        self.calls.append(dict(lowered))
        e = sum(self.err.get(o, 0.0) for o in lowered)
        return [[np.array([1.0 + e, 0.0])] for _ in requests]


def _rel(got: Sequence[Sequence[Any]], ref: Sequence[Sequence[Any]]) -> dict[str, float]:
    worst = 0.0
    for g, r in zip(got, ref, strict=True):
        worst = max(worst, float(np.linalg.norm(g[0] - r[0]) / np.linalg.norm(r[0])))
    return {"rel_l2": worst}


def _mlp_problem() -> Problem:
    from placewise.graph.zoo import load_zoo

    graph = load_zoo("zoo:mlp?layers=4&hidden=256&batch=64")
    machine = _preset("jetson-agx-orin")
    return Problem(graph, None, machine, RooflineModel(machine))


def test_budget_admits_rechecks_and_falls_back() -> None:
    problem = _mlp_problem()
    contractions = [o.name for v in problem.vertices
                    for o in problem.vertices[v.index].ops
                    if emulated_ops(problem, v.index, DType.INT8)]
    assert len(contractions) >= 3
    err = dict.fromkeys(contractions, 0.004)
    err[contractions[0]] = 0.02  # alone over the budget
    emu = _Emulator(err)
    budget = QualityBudget.parse("rel_l2=0.01")
    out = plan_with_policy(problem, Policy.INT8, budget, _search, emulator=lambda: emu,
                           requests=[[0]] * 2, quality=_rel)
    rows = {r.vertex: r for r in out.decisions}
    first = problem.vertices[problem.vertex_of_op[contractions[0]]].name
    assert not rows[first].admitted and "alone it breaks the budget" in rows[first].reason
    # the combined estimate admits sqrt(k) * 0.004 <= 0.01, i.e. up to 6 vertices; errors
    # really add, so at most 2 survive the re-check
    lowered = lowered_of(out.problem, out.result.best.placement)
    assert first not in lowered
    # the search may keep every admitted vertex at fp32 (partition launches can make a
    # lowered vertex on another device not pay): then there is nothing to estimate
    assert out.estimated == {} if not lowered else budget.holds(out.estimated)
    assert out.estimated_error is None or out.estimated_error <= budget.limit
    assert sum(err[o] for v in lowered for o in rows[v].ops) <= budget.limit + 1e-12
    if len([r for r in out.decisions if r.fallback]) > 0:
        assert out.rechecks >= 2
    # every lowered vertex was emulated alone before the search
    for v in lowered:
        assert dict.fromkeys(rows[v].ops, DType.INT8) in emu.calls
    # the final assignment is what was emulated last
    assert emu.calls[-1] == {o: DType.INT8 for v in lowered for o in rows[v].ops} or not lowered


def test_a_budget_nothing_meets_lowers_nothing() -> None:
    problem = _mlp_problem()
    emu = _Emulator({o.name: 0.01 for o in problem.graph.ops})
    out = plan_with_policy(problem, Policy.MIXED, QualityBudget.parse("rel_l2=1e-4"), _search,
                           emulator=lambda: emu, requests=[[0]], quality=_rel)
    assert lowered_of(out.problem, out.result.best.placement) == {}
    assert out.estimated == {} and not any(r.admitted for r in out.decisions)


def test_plan_record_round_trips_and_explains() -> None:
    problem = _mlp_problem()
    emu = _Emulator({o.name: 0.002 for o in problem.graph.ops})
    budget = QualityBudget.parse("rel_l2=0.01")
    out = plan_with_policy(problem, Policy.INT8, budget, _search, emulator=lambda: emu,
                           requests=[[0]] * 2, quality=_rel)
    rec = precision_json(out, inputs="generated: 2 requests", input_requests=2,
                         schemes={"int8": "test scheme"})
    plan = build_plan(out.problem, out.result, model_ref="zoo:mlp", precision=rec)
    assert plan_from_json(plan_to_json(plan)) == plan
    assert plan.precision is not None and plan.precision.lowered
    for v, dt in plan.precision.lowered.items():
        assert plan.placement[v]["dtype"] == dt
    data = explain(plan)
    text = render_explain(data)
    assert "precision: policy int8, budget rel_l2=0.01" in text
    assert "int8 emulated as: test scheme" in text
    assert any(d["state"] == "lowered" for d in data["precision"]["decisions"])
    v = next(iter(plan.precision.lowered))
    assert "precision decisions:" in render_explain(explain(plan, op=v))
    assert math.isfinite(plan.precision.estimated_error)


def test_check_holds_the_plan_to_its_precision_record() -> None:
    from placewise.check import Check, check_plan

    problem = _mlp_problem()
    emu = _Emulator({o.name: 0.002 for o in problem.graph.ops})
    out = plan_with_policy(problem, Policy.INT8, QualityBudget.parse("rel_l2=0.01"), _search,
                           emulator=lambda: emu, requests=[[0]] * 2, quality=_rel)
    plan = build_plan(out.problem, out.result, model_ref="zoo:mlp", precision=precision_json(out))
    assert plan.precision is not None and plan.precision.lowered
    assert [f for f in check_plan(plan) if f.check is Check.PRECISION] == []
    # a lowering the record does not name
    v = next(iter(plan.precision.lowered))
    quiet = plan.model_copy(update={"precision": plan.precision.model_copy(
        update={"lowered": {}})})
    found = [f for f in check_plan(quiet) if f.check is Check.PRECISION]
    assert any(v in f.subject and "does not name it" in f.message for f in found)
    # KEEP with lowered vertices; an estimate over the budget
    bad = plan.model_copy(update={"precision": plan.precision.model_copy(
        update={"policy": "keep", "estimated_error": 1.0})})
    msgs = [f.message for f in check_plan(bad) if f.check is Check.PRECISION]
    assert any("policy keep" in m for m in msgs) and any("breaks the budget" in m for m in msgs)


@pytest.mark.parametrize("policy", [Policy.INT8, Policy.MIXED, Policy.FP16])
def test_lowering_must_pay(policy: Policy) -> None:
    """A policy's plan never scores worse than the plan at the model's own precision: a
    lowered plan that does not beat it gives way to it (and says so)."""
    problem = _mlp_problem()
    emu = _Emulator({o.name: 0.001 for o in problem.graph.ops})
    keep = plan_with_policy(problem, Policy.KEEP, DEFAULT_BUDGET, _search).result
    out = plan_with_policy(problem, policy, QualityBudget.parse("rel_l2=0.05"), _search,
                           emulator=lambda: emu, requests=[[0]], quality=_rel)
    got = out.result.best.score(out.result.objective)
    assert got <= keep.best.score(keep.objective)
    if not lowered_of(out.problem, out.result.best.placement):
        assert got == keep.best.score(keep.objective)
