"""The independent plan checker: passes real schedules, finds every kind of corruption."""

from __future__ import annotations

import json
from typing import Any

import pytest

from placewise.check import (
    Check,
    Finding,
    Severity,
    check_plan,
    checks_run,
    findings_json,
    render_findings,
)
from placewise.cost.model import Term
from placewise.graph.ir import OpKind
from placewise.hardware.spec import Machine
from placewise.plan import Plan, TaskRecord, build_plan
from placewise.schedule import Placement, Problem, evaluate
from placewise.schedule.simulate import TaskKind
from placewise.schedule.testing import ToyCostModel, toy_machine
from placewise.units import DType
from tests.plan_fixtures import toy_graph, toy_plan


def _errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity is Severity.ERROR]


def _with_tasks(plan: Plan, tasks: list[TaskRecord]) -> Plan:
    return plan.model_copy(update={"schedule": plan.schedule.model_copy(
        update={"tasks": tuple(tasks)})})


def _replace_task(plan: Plan, name: str, **update: Any) -> Plan:
    return _with_tasks(plan, [t.model_copy(update=update) if t.name == name else t
                              for t in plan.schedule.tasks])


def _shift(t: TaskRecord, start_s: float) -> dict[str, Any]:
    return {"start_s": start_s, "end_s": start_s + t.duration_s}


@pytest.fixture(scope="module")
def toy() -> tuple[Problem, Plan]:
    return toy_plan()


def test_real_plans_pass(toy: tuple[Problem, Plan]) -> None:
    prob, plan = toy
    assert check_plan(plan) == []
    assert check_plan(plan, prob.graph, prob.machine) == []
    assert render_findings([], checks=checks_run(graph=True, machine=True)).startswith(
        "plan OK (checked: timing, precedence, data, overlap, memory, support, coverage, "
        "precision)")


def test_shared_controller_and_lanes_pass() -> None:
    unified = toy_machine(shared_controller=True).model_dump(mode="json")
    unified["links"][0]["resource"] = "mc"  # transfers share the controller's bandwidth
    for m in (toy_machine(shared_controller=True), toy_machine(gpu_lanes=2),
              Machine.model_validate(unified)):
        prob, plan = toy_plan(m)
        assert check_plan(plan, prob.graph, prob.machine) == []


def test_precedence_violation(toy: tuple[Problem, Plan]) -> None:
    prob, plan = toy
    t = plan.task_index()["c"]
    bad = _replace_task(plan, "c", **_shift(t, t.start_s - 3e-6))
    errs = _errors(check_plan(bad, prob.graph, prob.machine))
    prec = [f for f in errs if f.check is Check.PRECEDENCE]
    assert prec and prec[0].subject == "task c" and "xfer:h:cpu->gpu" in prec[0].message
    # its input was not on the gpu yet either
    assert any(f.check is Check.DATA and f.subject == "task c" for f in errs)


def test_overlap_on_an_exclusive_lane(toy: tuple[Problem, Plan]) -> None:
    _, plan = toy
    idx = plan.task_index()
    # move a onto the middle of d's interval on the cpu lane
    a, d = idx["a"], idx["d"]
    bad = _replace_task(plan, "a", **_shift(a, d.start_s + d.duration_s / 2))
    errs = _errors(check_plan(bad))
    over = [f for f in errs if f.check is Check.OVERLAP]
    assert over and over[0].subject == "cpu lane 0"
    assert "a starts" in over[0].message or "d starts" in over[0].message


def test_overlap_on_a_link(toy: tuple[Problem, Plan]) -> None:
    _, plan = toy
    links = [t for t in plan.schedule.tasks if t.resource == "link:pcie:rev"]
    assert len(links) >= 2
    first, second = links[0], links[1]
    bad = _replace_task(plan, second.name, **_shift(second, first.start_s))
    over = [f for f in _errors(check_plan(bad)) if f.check is Check.OVERLAP]
    assert over and over[0].subject == "link:pcie:rev lane 0"


def test_lane_beyond_the_resource(toy: tuple[Problem, Plan]) -> None:
    _, plan = toy
    bad = _replace_task(plan, "b", lane=1)
    over = [f for f in _errors(check_plan(bad)) if f.check is Check.OVERLAP]
    assert over and "lane 1 of gpu, which has 1" in over[0].message


def test_compute_on_the_wrong_device(toy: tuple[Problem, Plan]) -> None:
    _, plan = toy
    bad = _replace_task(plan, "b", device="cpu", resource="cpu")
    errs = _errors(check_plan(bad))
    assert any(f.check is Check.COVERAGE and "placed on gpu but computed on cpu" in f.message
               for f in errs)
    # b's output y1 is then never on the gpu, where its transfer to the cpu reads it
    assert any(f.check is Check.DATA and "y1 is never held on gpu" in f.message for f in errs)


def test_missing_transfer_is_a_data_error(toy: tuple[Problem, Plan]) -> None:
    prob, plan = toy
    gone = "xfer:k:gpu->cpu"
    tasks = [t.model_copy(update={"deps": tuple(d for d in t.deps if d != gone)})
             for t in plan.schedule.tasks if t.name != gone]
    bad = _with_tasks(plan, tasks)
    bad = bad.model_copy(update={"schedule": bad.schedule.model_copy(
        update={"critical_path": tuple(n for n in bad.schedule.critical_path if n != gone)})})
    errs = _errors(check_plan(bad, prob.graph, prob.machine))
    data = [f for f in errs if f.check is Check.DATA]
    assert data and data[0].subject == "task d"
    assert "k is never held on cpu as fp32/row_major" in data[0].message


def test_transfer_on_a_link_that_does_not_join_its_devices() -> None:
    data = toy_machine().model_dump(mode="json")
    data["devices"].append({**data["devices"][1], "name": "gpu2"})
    data["links"].append({**data["links"][0], "name": "pcie2", "endpoints": ["cpu", "gpu2"]})
    m = Machine.model_validate(data)
    prob, plan = toy_plan(m)
    assert check_plan(plan, prob.graph, m) == []
    x = next(t for t in plan.schedule.tasks if t.kind is TaskKind.TRANSFER)
    bad = _replace_task(plan, x.name, link="pcie2")
    errs = [f for f in _errors(check_plan(bad, prob.graph, m)) if f.check is Check.DATA]
    assert errs and "link pcie2 joins cpu and gpu2" in errs[0].message


def test_wrong_representation_is_a_data_error(toy: tuple[Problem, Plan]) -> None:
    prob, plan = toy
    # b computes in fp16: pretend its input arrives in fp32 by dropping the conversion
    conv = next(t for t in plan.schedule.tasks if t.kind is TaskKind.CONVERSION
                and t.tensor == "h")
    bad = _replace_task(plan, conv.name, dst_rep="fp32/row_major")
    xfer = next(t for t in bad.schedule.tasks if t.deps == (conv.name,))
    bad = _replace_task(bad, xfer.name, src_rep="fp32/row_major")
    errs = [f for f in _errors(check_plan(bad, prob.graph)) if f.check is Check.DATA]
    assert any(f.subject == "task b" and "fp16/row_major" in f.message for f in errs)


def test_outputs_must_reach_the_host(toy: tuple[Problem, Plan]) -> None:
    _, plan = toy
    idx = plan.task_index()
    last = idx["d"]
    bad = _replace_task(plan, "d", end_s=last.end_s + 1.0)  # finishes after the makespan
    errs = _errors(check_plan(bad))
    assert any(f.subject == "output y2" for f in errs)
    assert any(f.check is Check.TIMING and f.subject == "makespan" for f in errs)
    assert any(f.check is Check.TIMING and "terms add up" in f.message for f in errs)


def test_timing_findings(toy: tuple[Problem, Plan]) -> None:
    _, plan = toy
    t = plan.task_index()["b"]
    terms = dict(t.terms_s)
    terms[Term.COMPUTE] = terms[Term.COMPUTE] * 3
    bad = _replace_task(plan, "b", terms_s=terms)
    errs = _errors(check_plan(bad))
    assert [f.subject for f in errs] == ["task b"] and "terms add up" in errs[0].message
    warn = check_plan(_replace_task(plan, "b", high_s=t.duration_s / 2, low_s=t.duration_s / 4))
    assert [(f.severity, f.check) for f in warn] == [(Severity.WARNING, Check.TIMING)]
    neg = _errors(check_plan(_replace_task(plan, "a", start_s=-1.0)))
    assert any("starts before 0" in f.message for f in neg)
    lb = _errors(check_plan(plan.model_copy(update={"lower_bound_s": plan.makespan_s * 2})))
    assert [f.subject for f in lb] == ["lower bound"]


def test_over_capacity_from_the_scheduler() -> None:
    m = toy_machine(memory_bytes=10_000)
    prob = Problem(toy_graph(), None, m, ToyCostModel(m))
    ev = evaluate(prob, Placement.uniform(prob.vertex_names, "cpu", DType.FP32))
    assert not ev.feasible
    plan = build_plan(prob, ev, model_ref="toy.json")
    errs = _errors(check_plan(plan, prob.graph, m))
    assert [f.check for f in errs] == [Check.MEMORY]
    assert errs[0].subject == "cpu/ram" and "over its capacity 9.77 KiB" in errs[0].message


def test_over_capacity_and_inconsistent_memory(toy: tuple[Problem, Plan]) -> None:
    prob, plan = toy
    u = plan.memory.devices["gpu"]["vram"]

    def with_tier(**update: Any) -> Plan:
        devices = {d: dict(t) for d, t in plan.memory.devices.items()}
        devices["gpu"]["vram"] = u.model_copy(update=update)
        return plan.model_copy(update={"memory": plan.memory.model_copy(
            update={"devices": devices})})

    small = with_tier(capacity_bytes=u.peak_bytes - 1)
    msgs = [f.message for f in _errors(check_plan(small)) if f.check is Check.MEMORY]
    assert any("over its capacity" in m for m in msgs)
    assert any("says it fits, but a tier overflows" in m for m in msgs)
    # against the machine, the capacity itself is wrong too
    msgs = [f.message for f in _errors(check_plan(small, machine=prob.machine))]
    assert any("the machine 1.00 GiB" in m for m in msgs)
    unbalanced = _errors(check_plan(with_tier(final_bytes=100)))
    assert any("does not balance" in f.message for f in unbalanced)
    lying_peak = _errors(check_plan(with_tier(peak_bytes=u.peak_bytes - 8)))
    assert any("timeline reaches" in f.message for f in lying_peak)
    # the weights the gpu must hold exceed what the plan says it peaks at
    tiny = with_tier(peak_bytes=1000, timeline=((0.0, 1000), (1.0, 0)),
                     breakdown=u.breakdown.model_copy(update={
                         "weights": 1000, "activations": 0, "scratch": 0,
                         "transfer_buffers": 0, "conversion_buffers": 0}))
    msgs = [f.message for f in _errors(check_plan(tiny, prob.graph))]
    assert any("weights alone take 1.95 KiB, more than its recorded peak" in m for m in msgs)


def test_unsupported_kind_and_precision() -> None:
    data = toy_machine().model_dump(mode="json")
    data["devices"][1]["unsupported_kinds"] = ["exp"]  # the gpu cannot run exp
    m = Machine.model_validate(data)
    prob = Problem(toy_graph(), None, m, ToyCostModel(m))
    ev = evaluate(prob, _assign({"a": "cpu", "b": "gpu/fp16", "c": "cpu", "d": "gpu"}))
    plan = build_plan(prob, ev, model_ref="toy.json")
    assert check_plan(plan, prob.graph, m) == []
    # the plan claims d is an exp (the graph is not given, so the plan is believed)
    ops = dict(plan.ops)
    ops["d"] = ops["d"].model_copy(update={"kind": OpKind.EXP})
    bad = plan.model_copy(update={"ops": ops})
    sup = [f for f in _errors(check_plan(bad, machine=m)) if f.check is Check.SUPPORT]
    assert sup and sup[0].subject == "op d" and "does not run that kind" in sup[0].message
    # with the graph, the graph's kind is used, and the plan's wrong kind is a coverage error
    errs = _errors(check_plan(bad, prob.graph, m))
    assert [f.check for f in errs] == [Check.COVERAGE]
    # a dtype the device does not compute in
    placement = dict(plan.placement)
    placement["a"] = {"device": "cpu", "dtype": "fp16"}
    sup = [f for f in _errors(check_plan(plan.model_copy(update={"placement": placement}),
                                         machine=m)) if f.check is Check.SUPPORT]
    assert sup and sup[0].subject == "vertex a" and "fp16" in sup[0].message
    # a device the machine does not have
    placement["a"] = {"device": "tpu", "dtype": "fp32"}
    sup = [f for f in _errors(check_plan(plan.model_copy(update={"placement": placement}),
                                         machine=m)) if f.check is Check.SUPPORT]
    assert sup and "'tpu'" in sup[0].message


def _assign(spec: dict[str, str]) -> Placement:
    from placewise.schedule import Assignment

    out = {}
    for v, s in spec.items():
        dev, _, dt = s.partition("/")
        out[v] = Assignment(dev, DType.parse(dt or "fp32"))
    return Placement.of(out)


def test_coverage_with_the_graph(toy: tuple[Problem, Plan]) -> None:
    prob, plan = toy
    regions = dict(plan.regions)
    placement = dict(plan.placement)
    ops = dict(plan.ops)
    del regions["c"], placement["c"], ops["c"]
    tasks = [t for t in plan.schedule.tasks if t.vertex != "c"]
    bad = _with_tasks(plan.model_copy(update={"regions": regions, "placement": placement,
                                              "ops": ops}), tasks)
    cov = [f for f in _errors(check_plan(bad, prob.graph)) if f.check is Check.COVERAGE]
    assert [f.subject for f in cov] == ["op c"] and "is not placed" in cov[0].message
    # a vertex placed but never computed
    dropped = _with_tasks(plan, [t for t in plan.schedule.tasks if t.name != "a"])
    cov = [f for f in _errors(check_plan(dropped)) if f.check is Check.COVERAGE]
    assert cov and cov[0].subject == "vertex a" and "never computed" in cov[0].message


def test_findings_rendering_and_json(toy: tuple[Problem, Plan]) -> None:
    _, plan = toy
    t = plan.task_index()["c"]
    bad = _replace_task(plan, "c", **_shift(t, t.start_s - 3e-6))
    findings = check_plan(bad)
    text = render_findings(findings, checks=checks_run(graph=False, machine=False))
    first = text.splitlines()[0]
    assert first.startswith("plan FAILS: ") and "support" not in first
    assert "  error [precedence] task c: starts at" in text
    data = findings_json(findings, checks=checks_run(graph=False, machine=False))
    assert data["ok"] is False and data["errors"] == len(findings)
    assert json.loads(json.dumps(data)) == data
    short = render_findings(findings, max_lines=1)
    assert short.splitlines()[-1].startswith("  ... ")
