"""Lower bounds, pipelined throughput and the one-call evaluation."""

from __future__ import annotations

import math

import pytest

from placewise.errors import Infeasible
from placewise.graph.ir import Graph, Op, OpKind, Role
from placewise.schedule import (
    Assignment,
    Objective,
    Placement,
    Problem,
    evaluate,
    problem_lower_bound,
    schedule,
    schedule_lower_bound,
    throughput,
)
from placewise.schedule.testing import ToyCostModel, toy_machine
from placewise.units import DType
from tests.schedule.helpers import chain, device, link, machine, sources, t

CPU32 = Assignment("cpu", DType.FP32)
GPU32 = Assignment("gpu", DType.FP32)


def test_problem_bound_uses_the_cheapest_cost_and_all_lanes() -> None:
    m = toy_machine()
    times = {("o0", "cpu"): 4.0, ("o0", "gpu"): 1.0, ("o1", "cpu"): 2.0, ("o1", "gpu"): 3.0}
    prob = Problem(chain(2), None, m, ToyCostModel(m, times))
    b = problem_lower_bound(prob)
    assert b.critical_path_s == 3.0 and b.value_s == 3.0 and b.binding == "critical path"
    assert b.critical_path == ("o0", "o1")
    assert dict(b.per_resource_s)["all devices"] == 1.5
    for pl in ({"o0": CPU32, "o1": CPU32}, {"o0": GPU32, "o1": CPU32},
               {"o0": GPU32, "o1": GPU32}, {"o0": CPU32, "o1": GPU32}):
        assert schedule(prob, Placement.of(pl)).makespan_s >= b.value_s


def test_problem_bound_counts_work_pinned_to_one_device() -> None:
    names = ["p", "q", "r"]
    m = machine([device("cpu"), device("npu", kind="npu", unsupported=["task"])],
                [link("l", "cpu", "npu")])
    prob = Problem(sources(names), None, m, ToyCostModel(m, {(n, "cpu"): 1.0 for n in names}))
    b = problem_lower_bound(prob)
    assert b.value_s == 3.0 and b.binding == "cpu"
    m2 = machine([device("cpu", unsupported=["task"]), device("npu", unsupported=["task"])],
                 [link("l", "cpu", "npu")])
    with pytest.raises(Infeasible, match="can run nowhere"):
        problem_lower_bound(Problem(sources(names), None, m2, ToyCostModel(m2)))


def test_schedule_bound_gap_is_what_conflicts_cost() -> None:
    names = ["p", "q"]
    m = toy_machine()
    prob = Problem(sources(names), None, m, ToyCostModel(m, {(n, "gpu"): 1.0 for n in names}),
                   outputs_to_host=False)
    s = schedule(prob, Placement.uniform(names, "gpu", DType.FP32))
    b = schedule_lower_bound(s)
    assert b.critical_path_s == 1.0 and b.work_s == 2.0 and b.binding == "gpu"
    assert b.value_s == s.makespan_s == 2.0


def test_schedule_bound_includes_shared_bandwidth() -> None:
    m = toy_machine(shared_controller=True)
    cm = ToyCostModel(m, {("a", "cpu"): 1.0, ("b", "gpu"): 1.0},
                      {("a", "cpu"): 8 * 10**9, ("b", "gpu"): 8 * 10**9})
    prob = Problem(sources(["a", "b"]), None, m, cm, outputs_to_host=False)
    s = schedule(prob, Placement.of({"a": CPU32, "b": GPU32}))
    b = schedule_lower_bound(s)
    assert b.binding == "mc" and b.value_s == pytest.approx(1.6)
    assert b.value_s <= s.makespan_s * (1 + 1e-12)


def test_throughput_is_set_by_the_busiest_resource() -> None:
    m = toy_machine()
    times = {("o0", "cpu"): 1.0, ("o1", "gpu"): 0.25, ("o2", "gpu"): 0.25}
    prob = Problem(chain(3, size=10**6), None, m, ToyCostModel(m, times), batch=4)
    s = schedule(prob, Placement.of({"o0": CPU32, "o1": GPU32, "o2": GPU32}))
    tp = throughput(s, batch=4)
    assert tp.bottleneck_resource == "cpu" and tp.period_s == 1.0
    assert tp.runs_per_s == 1.0 and tp.requests_per_s == 4.0
    occ = dict(tp.occupancy_s)
    assert occ["gpu"] == 0.5 and occ["link:pcie:fwd"] == pytest.approx(4e6 / 1e9 + 1e-6)
    # pipelining: throughput beats 1 / latency
    assert tp.runs_per_s > 1.0 / s.makespan_s
    # links can be the bottleneck
    slow = {("o0", "cpu"): 1e-3, ("o1", "gpu"): 1e-3, ("o2", "gpu"): 1e-3}
    prob = Problem(chain(3, size=10**6), None, m, ToyCostModel(m, slow))
    s = schedule(prob, Placement.of({"o0": CPU32, "o1": GPU32, "o2": GPU32}))
    assert throughput(s).bottleneck_resource.startswith("link:pcie")
    empty = throughput(schedule(Problem(Graph.build("e", [t("x", role=Role.INPUT),
                                                         t("y", role=Role.OUTPUT)],
                                                     [Op("v", OpKind.RESHAPE, ("x",), ("y",))]),
                                        None, m, ToyCostModel(m, {("v", "cpu"): 0.0})),
                                Placement.of({"v": CPU32})))
    assert math.isinf(empty.requests_per_s) and empty.bottleneck_resource == ""


def test_evaluate_bundles_every_answer() -> None:
    m = toy_machine()
    times = {("o0", "cpu"): 1.0, ("o1", "gpu"): 0.5}
    prob = Problem(chain(2), None, m, ToyCostModel(m, times), batch=2)
    ev = evaluate(prob, Placement.of({"o0": CPU32, "o1": GPU32}))
    assert ev.feasible and ev.exact and ev.memory.feasible
    assert ev.lower_bound_s <= ev.makespan_s == ev.schedule.makespan_s
    assert ev.throughput_rps == pytest.approx(2.0) and ev.bottleneck_resource == "cpu"
    assert ev.score(Objective.LATENCY) == ev.makespan_s
    assert ev.score("throughput") == ev.pipeline.period_s == 1.0
    tiny = toy_machine(memory_bytes=100)
    ev2 = evaluate(Problem(chain(2), None, tiny, ToyCostModel(tiny)),
                   Placement.of({"o0": CPU32, "o1": CPU32}))
    assert not ev2.feasible and math.isinf(ev2.score(Objective.LATENCY))


def test_schedule_bound_counts_no_task_longer_than_it_runs() -> None:
    # a (cpu): 1 s moving 40 GB, four times the 10 GB/s controller; b (gpu): 1 s, 10 GB.
    # The controller shares at most max(C, 40 GB/s): b runs at full speed, a at 3/4 until
    # 1 s, then alone: makespan 1.25 s. 50 GB / C = 5 s would be no bound at all, and
    # neither would the occupancy min(4 s, 1 s) + min(1 s, 1 s) = 2 s; 50 GB at 40 GB/s is.
    m = toy_machine(shared_controller=True)
    cm = ToyCostModel(m, {("a", "cpu"): 1.0, ("b", "gpu"): 1.0},
                      {("a", "cpu"): 40 * 10**9, ("b", "gpu"): 10 * 10**9})
    prob = Problem(sources(["a", "b"]), None, m, cm, outputs_to_host=False)
    s = schedule(prob, Placement.of({"a": CPU32, "b": GPU32}))
    assert s.makespan_s == pytest.approx(1.25)
    b = schedule_lower_bound(s)
    assert b.binding == "mc" and b.value_s == pytest.approx(1.25)
    assert b.value_s <= s.makespan_s * (1 + 1e-12)
    tp = throughput(s)
    assert tp.bottleneck_resource == "mc" and tp.period_s == pytest.approx(1.25)
