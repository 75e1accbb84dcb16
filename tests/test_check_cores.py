"""The plan checker flags devices that share CPU cores computing at the same time."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placewise.check import Check, Finding, Severity, check_plan
from placewise.plan import Plan, build_plan, load_plan, plan_records_json, save_plan
from placewise.schedule import Placement, Problem, evaluate
from placewise.schedule.placement import Assignment
from placewise.schedule.testing import ToyCostModel
from placewise.units import DType
from tests.plan_fixtures import toy_plan
from tests.schedule.helpers import sources
from tests.schedule.test_sched_cores import core_machines, draw_placement, local_like
from tests.strategies import random_graphs

FP32 = DType.FP32


def _errors(findings: list[Finding], check: Check = Check.OVERLAP) -> list[Finding]:
    return [f for f in findings if f.severity is Severity.ERROR and f.check is check]


def _replace(plan: Plan, name: str, **update: Any) -> Plan:
    tasks = tuple(t.model_copy(update=update) if t.name == name else t
                  for t in plan.schedule.tasks)
    return plan.model_copy(update={"schedule": plan.schedule.model_copy(
        update={"tasks": tasks})})


@pytest.fixture(scope="module")
def local() -> tuple[Problem, Plan]:
    """a on cpu0, b on cpu01, c on cpu1: a and c at 0-1 s, b at 1-2 s."""
    m = local_like()
    g = sources(["a", "b", "c"])
    cm = ToyCostModel(m, {(o, d.name): 1.0 for o in "abc" for d in m.devices})
    prob = Problem(g, None, m, cm, host="cpu0", outputs_to_host=False)
    pl = Placement.of({"a": Assignment("cpu0", FP32), "b": Assignment("cpu01", FP32),
                       "c": Assignment("cpu1", FP32)})
    return prob, build_plan(prob, evaluate(prob, pl), model_ref="sources.json")


def test_a_real_plan_on_shared_cores_passes_and_records_its_cores(
        local: tuple[Problem, Plan], tmp_path: Any) -> None:
    prob, plan = local
    assert check_plan(plan) == []
    assert check_plan(plan, prob.graph, prob.machine) == []
    idx = plan.task_index()
    assert (idx["a"].cores, idx["b"].cores, idx["c"].cores) == ((0,), (0, 1), (1,))
    assert all(t.cores is None for t in plan.schedule.tasks if t.kind.value == "transfer")
    assert idx["b"].start_s >= idx["a"].end_s
    path = tmp_path / "p.json"
    save_plan(plan, path)
    assert load_plan(path) == plan
    assert dict(plan.bounds.per_resource_s)["core:0"] == 2.0


def test_presets_record_no_cores() -> None:
    _, plan = toy_plan()
    assert all(t.cores is None for t in plan.schedule.tasks)
    assert all("cores" not in t for t in plan_records_json(plan)["schedule"]["tasks"])


def test_a_task_on_both_cores_overlapping_one_on_a_core_is_an_error(
        local: tuple[Problem, Plan]) -> None:
    prob, plan = local
    b = plan.task_index()["b"]
    bad = _replace(plan, "b", start_s=0.5, end_s=0.5 + b.duration_s)
    for findings in (check_plan(bad), check_plan(bad, prob.graph, prob.machine)):
        over = _errors(findings)
        assert {f.subject for f in over} == {"core 0", "core 1"}
        assert any("b on cpu01" in f.message and "a on cpu0" in f.message for f in over)
        assert any("b on cpu01" in f.message and "c on cpu1" in f.message for f in over)


def test_the_machine_says_which_cores_even_if_the_plan_does_not(
        local: tuple[Problem, Plan]) -> None:
    prob, plan = local
    b = plan.task_index()["b"]
    bad = plan
    for t in plan.schedule.tasks:
        bad = _replace(bad, t.name, cores=None)
    bad = _replace(bad, "b", start_s=0.0, end_s=b.duration_s)
    assert _errors(check_plan(bad, prob.graph, prob.machine))
    # without the machine and without recorded cores there is nothing to go on
    assert not [f for f in _errors(check_plan(bad)) if f.subject.startswith("core")]


def test_recorded_cores_must_match_the_machine(local: tuple[Problem, Plan]) -> None:
    prob, plan = local
    bad = _replace(plan, "b", cores=(1,))
    over = _errors(check_plan(bad, prob.graph, prob.machine))
    assert len(over) == 1 and over[0].subject == "task b"
    assert "records cores [1], but cpu01 runs on [0, 1]" in over[0].message


def test_single_core_devices_may_overlap(local: tuple[Problem, Plan]) -> None:
    prob, plan = local
    a = plan.task_index()["a"]
    c = plan.task_index()["c"]
    assert a.start_s == c.start_s  # they ran side by side, and that is fine
    assert check_plan(plan, prob.graph, prob.machine) == []


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_plans_of_random_dags_on_shared_cores_pass_the_checker(data: st.DataObject) -> None:
    g = data.draw(random_graphs(max_ops=8), label="graph")
    m = data.draw(st.just(local_like()) | core_machines(), label="machine")
    prob = Problem(g, None, m, ToyCostModel(m),
                   outputs_to_host=data.draw(st.booleans(), label="outputs_to_host"))
    plan = build_plan(prob, evaluate(prob, draw_placement(data, prob)), model_ref="g")
    assert not [f for f in check_plan(plan, g, m) if f.severity is Severity.ERROR]
    assert not [f for f in check_plan(plan) if f.severity is Severity.ERROR]
