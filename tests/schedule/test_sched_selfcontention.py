"""A task never contends with itself on a shared bandwidth resource.

The toy machine's controller ``mc`` has ``C = 10 GB/s``; a task of uncontended duration
``T`` moving ``bytes`` demands ``d = bytes / T``. Every expected number is worked out by
hand in the comments.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placewise.cost.model import Term
from placewise.graph.ir import Graph, Op, OpKind, Role, TaskHint
from placewise.schedule import (
    Assignment,
    Placement,
    Problem,
    Schedule,
    schedule,
    schedule_lower_bound,
    throughput,
)
from placewise.schedule.testing import ToyCostModel, toy_machine
from placewise.units import DType
from tests.schedule.helpers import chain, check_schedule, device, link, machine, sources, t

CPU32 = Assignment("cpu", DType.FP32)
GPU32 = Assignment("gpu", DType.FP32)
GB = 10**9


def _pair(a: tuple[float, int], b: tuple[float, int]) -> tuple[Problem, Schedule]:
    """Independent tasks ``a`` on the cpu and ``b`` on the gpu, both starting at 0, each
    given as (seconds, bytes) on the toy machine's shared 10 GB/s controller."""
    m = toy_machine(shared_controller=True)
    cm = ToyCostModel(m, {("a", "cpu"): a[0], ("b", "gpu"): b[0]},
                      {("a", "cpu"): a[1], ("b", "gpu"): b[1]})
    prob = Problem(sources(["a", "b"]), None, m, cm, outputs_to_host=False)
    s = schedule(prob, Placement.of({"a": CPU32, "b": GPU32}))
    check_schedule(prob, s)
    return prob, s


def _valid_bounds(s: Schedule) -> None:
    slack = s.makespan_s * 1e-12
    assert schedule_lower_bound(s).value_s <= s.makespan_s + slack
    assert throughput(s).period_s <= s.makespan_s + slack


def test_a_lone_task_above_the_bandwidth_is_never_slowed() -> None:
    # 1 s moving 30 GB: d = 30 GB/s, three times C; alone it was profiled at 1 s
    m = toy_machine(shared_controller=True)
    cm = ToyCostModel(m, {("a", "cpu"): 1.0}, {("a", "cpu"): 30 * GB})
    prob = Problem(sources(["a"]), None, m, cm, outputs_to_host=False)
    s = schedule(prob, Placement.of({"a": CPU32}))
    x = s.task("a")
    assert (x.start_s, x.end_s) == (0.0, 1.0)
    assert x.contention_s == 0.0 and x.term(Term.CONTENTION) == 0.0
    assert s.makespan_s == 1.0
    mc = s.resource("mc")
    assert mc.bytes == 30 * GB
    assert mc.work_s == 1.0  # occupancy min(30 GB / C, T) = min(3 s, 1 s)
    assert mc.busy_s == 1.0  # 30 GB at max(C, d) = 30 GB/s
    assert schedule_lower_bound(s).value_s == 1.0
    assert dict(throughput(s).occupancy_s)["mc"] == 1.0
    check_schedule(prob, s)


def test_tasks_one_after_another_are_each_alone() -> None:
    # a chain o0 -> o1 on the cpu, each 1 s moving 30 GB: never two at once, no contention
    m = toy_machine(shared_controller=True)
    cm = ToyCostModel(m, {("o0", "cpu"): 1.0, ("o1", "cpu"): 1.0},
                      {("o0", "cpu"): 30 * GB, ("o1", "cpu"): 30 * GB})
    prob = Problem(chain(2), None, m, cm)
    s = schedule(prob, Placement.uniform(["o0", "o1"], "cpu", DType.FP32))
    assert s.makespan_s == 2.0
    assert all(x.contention_s == 0.0 for x in s.tasks)
    _valid_bounds(s)


def test_two_tasks_at_twice_the_bandwidth_share_their_own_rate() -> None:
    # d = 20 GB/s each: C_eff = max(C, 20 GB/s) = 20 GB/s, 10 GB/s each, half speed: 2 s
    _, s = _pair((1.0, 20 * GB), (1.0, 20 * GB))
    for n in ("a", "b"):
        x = s.task(n)
        assert x.start_s == 0.0 and x.end_s == pytest.approx(2.0)
        assert x.contention_s == pytest.approx(1.0)
    mc = s.resource("mc")
    assert mc.work_s == 2.0  # 1 s + 1 s
    assert mc.busy_s == pytest.approx(2.0)  # 40 GB at 20 GB/s: the bound is tight
    assert schedule_lower_bound(s).value_s == pytest.approx(2.0)
    _valid_bounds(s)


def test_two_tasks_within_the_bandwidth_slow_down_by_2b_over_c() -> None:
    # b = 8 GB/s each, C = 10 GB/s < 2b: 5 GB/s each, slowdown 2b / C = 1.6
    _, s = _pair((1.0, 8 * GB), (1.0, 8 * GB))
    assert s.task("a").end_s == pytest.approx(1.6) and s.task("b").end_s == pytest.approx(1.6)
    # b = C = 10 GB/s each: slowdown 2b / C = 2
    _, s = _pair((1.0, 10 * GB), (1.0, 10 * GB))
    assert s.task("a").end_s == pytest.approx(2.0) and s.task("b").end_s == pytest.approx(2.0)
    assert s.resource("mc").busy_s == pytest.approx(2.0)
    _valid_bounds(s)


def test_a_task_above_the_bandwidth_next_to_one_within_it() -> None:
    # a: 1 s moving 40 GB (d = 40 GB/s); b: 1 s moving 10 GB (d = C). C_eff = 40 GB/s:
    # b gets its 10 GB/s (full speed, ends at 1 s), a gets 30 GB/s (3/4 speed); at 1 s a
    # has 1/4 of its work left, alone at full speed: it ends at 1.25 s
    _, s = _pair((1.0, 40 * GB), (1.0, 10 * GB))
    assert s.task("b").end_s == pytest.approx(1.0) and s.task("b").contention_s == 0.0
    assert s.task("a").end_s == pytest.approx(1.25)
    assert s.task("a").contention_s == pytest.approx(0.25)
    mc = s.resource("mc")
    assert mc.busy_s == pytest.approx(1.25)  # 50 GB at 40 GB/s: still a valid bound, tight
    assert mc.work_s == 2.0  # min(4 s, 1 s) + min(1 s, 1 s)
    # the occupancy never exceeds a run: one run after another gives one per 1.25 s
    assert dict(throughput(s).occupancy_s)["mc"] == pytest.approx(1.25)
    _valid_bounds(s)


def test_a_lone_transfer_on_a_shared_link_is_not_slowed_two_are() -> None:
    # a 10 GB/s link on a 1 GB/s shared resource: a 4 MB transfer takes 0.4 ms and
    # demands 10 GB/s; alone it is not slowed
    m = machine([device("cpu", resources=["mc"]), device("gpu", kind="gpu", resources=["mc"])],
                [link("um", "cpu", "gpu", bw=1e10, latency=0.0, duplex=False, resource="mc")],
                [{"name": "mc", "bandwidth_bytes_per_s": 1e9, "source": "t"}])
    one = Graph.build("one", [t("y_p", 10**6), t("z", 10**6, role=Role.OUTPUT)],
                      [Op("p", OpKind.TASK, (), ("y_p",), hint=TaskHint()),
                       Op("join", OpKind.RELU, ("y_p",), ("z",))])
    zero = {(n, d): 0.0 for n in ("p", "q", "join") for d in ("cpu", "gpu")}
    prob = Problem(one, None, m, ToyCostModel(m, zero), outputs_to_host=False)
    s = schedule(prob, Placement.of({"p": CPU32, "join": GPU32}))
    x = s.task("xfer:y_p:cpu->gpu")
    assert x.end_s - x.start_s == pytest.approx(4e-4) and x.contention_s == 0.0
    _valid_bounds(s)
    # two such transfers at once: C_eff = 10 GB/s, 5 GB/s each, both end at 0.8 ms
    names = ["p", "q"]
    tensors = [t(f"y_{n}", 10**6) for n in names] + [t("z", role=Role.OUTPUT)]
    ops = [Op(n, OpKind.TASK, (), (f"y_{n}",), hint=TaskHint()) for n in names]
    ops.append(Op("join", OpKind.ADD, ("y_p", "y_q"), ("z",)))
    prob = Problem(Graph.build("two", tensors, ops), None, m, ToyCostModel(m, zero),
                   outputs_to_host=False)
    s = schedule(prob, Placement.of({"p": CPU32, "q": CPU32, "join": GPU32}))
    for n in names:
        x = s.task(f"xfer:y_{n}:cpu->gpu")
        assert x.start_s == 0.0 and x.end_s == pytest.approx(8e-4)
        assert x.contention_s == pytest.approx(4e-4)
    check_schedule(prob, s)
    _valid_bounds(s)


def test_pipeline_occupancy_of_a_shared_resource_is_capped_at_each_task_duration() -> None:
    # one device runs o0 (1 s, 30 GB) then o1 (1 s, 5 GB): the controller is occupied
    # min(3 s, 1 s) + min(0.5 s, 1 s) = 1.5 s per run, not 35 GB / C = 3.5 s; the cpu's
    # 2 s of work sets the period
    m = toy_machine(shared_controller=True)
    cm = ToyCostModel(m, {("o0", "cpu"): 1.0, ("o1", "cpu"): 1.0},
                      {("o0", "cpu"): 30 * GB, ("o1", "cpu"): 5 * GB})
    prob = Problem(chain(2), None, m, cm)
    s = schedule(prob, Placement.uniform(["o0", "o1"], "cpu", DType.FP32))
    tp = throughput(s)
    occ = dict(tp.occupancy_s)
    assert occ["mc"] == pytest.approx(1.5) and occ["cpu"] == 2.0
    assert tp.bottleneck_resource == "cpu" and tp.period_s == 2.0
    b = schedule_lower_bound(s)
    assert dict(b.per_resource_s)["mc"] == pytest.approx(35 / 30)  # 35 GB at 30 GB/s
    assert b.value_s == 2.0 == s.makespan_s


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.5, 1.0, 2.0]),
                          st.sampled_from([0, 2 * GB, 10 * GB, 40 * GB]),
                          st.sampled_from(["cpu", "gpu"])), min_size=1, max_size=5))
def test_bounds_hold_and_lone_tasks_run_at_full_speed(
        tasks: list[tuple[float, int, str]]) -> None:
    names = [f"k{i}" for i in range(len(tasks))]
    m = toy_machine(shared_controller=True, gpu_lanes=4)
    cm = ToyCostModel(m, {(n, dev): d for n, (d, _, dev) in zip(names, tasks, strict=True)},
                      {(n, dev): b for n, (_, b, dev) in zip(names, tasks, strict=True)})
    prob = Problem(sources(names), None, m, cm, outputs_to_host=False)
    s = schedule(prob, Placement.of({n: Assignment(dev, DType.FP32)
                                     for n, (_, _, dev) in zip(names, tasks, strict=True)}))
    check_schedule(prob, s)
    _valid_bounds(s)
    for x in s.tasks:  # a task that overlaps no other one on the controller is not slowed
        others = [y for y in s.tasks if y.name != x.name and y.nbytes > 0
                  and y.start_s < x.end_s and x.start_s < y.end_s]
        if not others:
            assert x.contention_s == 0.0
