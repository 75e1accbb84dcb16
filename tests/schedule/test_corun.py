"""Co-run slowdowns and wake-ups in the scheduler (``placewise.schedule.simulate``).

The machine mirrors ``placewise hw probe``'s ``local``: ``cpu0`` on core 0, ``cpu1`` on core
1 and ``cpu01`` on both; the cost model is the toy one with explicit co-run factors and
wake-ups.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placewise.cost.model import Term
from placewise.graph.ir import Graph, Op, OpKind, Role, TaskHint, Tensor
from placewise.schedule import Placement, Problem, Schedule, Task, TaskKind, schedule
from placewise.schedule.placement import Assignment
from placewise.schedule.testing import ToyCostModel
from placewise.units import DType
from tests.schedule.helpers import check_schedule, sources
from tests.schedule.test_sched_cores import assert_cores_exclusive, local_like

FP32 = DType.FP32
DEVICES = ("cpu0", "cpu1", "cpu01")


def _sources(names: list[str], secs: dict[str, float], *,
             corun: dict[tuple[str, str, str], float] | None = None,
             wake: dict[str, float] | None = None, to_host: bool = False) -> Problem:
    m = local_like()
    cm = ToyCostModel(m, {(o, d): secs[o] for o in names for d in DEVICES},
                      corun=corun, wake=wake)
    return Problem(sources(names), None, m, cm, host="cpu0", outputs_to_host=to_host)


def _place(prob: Problem, where: dict[str, str]) -> Schedule:
    return schedule(prob, Placement.of({v: Assignment(d, FP32) for v, d in where.items()}))


def _same(a: Schedule, b: Schedule) -> None:
    assert a.makespan_s == b.makespan_s
    assert [(t.name, t.start_s, t.end_s, t.lane, t.terms) for t in a.tasks] == \
        [(t.name, t.start_s, t.end_s, t.lane, t.terms) for t in b.tasks]


# ---- hand-checked co-run cases -----------------------------------------------------------
def test_two_tasks_that_overlap_throughout_are_both_stretched() -> None:
    f = {("a", "cpu0", "cpu1"): 1.5, ("b", "cpu1", "cpu0"): 1.25}
    prob = _sources(["a", "b"], {"a": 1.0, "b": 1.0}, corun=f)
    s = _place(prob, {"a": "cpu0", "b": "cpu1"})
    a, b = s.task("a"), s.task("b")
    # b runs at 1/1.25 while a runs: it ends at 1.25 (a is still running then); a did
    # 1.25/1.5 of its work by 1.25, then runs alone: 1.25 + (1 - 1.25/1.5) = 1.4166...
    assert b.end_s == pytest.approx(1.25)
    assert a.end_s == pytest.approx(1.25 + (1 - 1.25 / 1.5))
    assert a.term(Term.CONTENTION) == pytest.approx(a.end_s - 1.0)
    assert b.term(Term.CONTENTION) == pytest.approx(0.25)
    check_schedule(prob, s)


def test_only_the_overlapping_part_is_stretched() -> None:
    # a (4 s) on cpu0 beside b (1 s) on cpu1: a is slowed 2x for b's 1 s only
    prob = _sources(["a", "b"], {"a": 4.0, "b": 1.0}, corun={("a", "cpu0", "cpu1"): 2.0})
    s = _place(prob, {"a": "cpu0", "b": "cpu1"})
    assert s.task("b").end_s == 1.0
    assert s.task("a").end_s == pytest.approx(4.0 + 1.0 * (1 - 1 / 2.0))
    assert s.task("a").term(Term.CONTENTION) == pytest.approx(0.5)


def test_no_overlap_no_change() -> None:
    # a chain across the two single-core devices never overlaps: the factors do nothing
    x = Tensor("x", (10,), FP32, role=Role.INPUT)
    h = Tensor("h", (10,), FP32)
    y = Tensor("y", (10,), FP32, role=Role.OUTPUT)
    g = Graph.build("c", [x, h, y], [Op("a", OpKind.RELU, ("x",), ("h",)),
                                      Op("b", OpKind.RELU, ("h",), ("y",))])
    m = local_like()
    times = {(o, d): 1.0 for o in ("a", "b") for d in DEVICES}
    where = Placement.of({"a": Assignment("cpu0", FP32), "b": Assignment("cpu1", FP32)})
    plain = schedule(Problem(g, None, m, ToyCostModel(m, times)), where)
    slowed = schedule(Problem(g, None, m, ToyCostModel(
        m, times, corun={("a", "cpu0", "cpu1"): 3.0, ("b", "cpu1", "cpu0"): 3.0})), where)
    _same(plain, slowed)


def test_devices_that_share_cores_never_slow_each_other() -> None:
    # cpu01 and cpu0 never compute at once, so a factor between them cannot apply
    f = {("a", "cpu0", "cpu01"): 3.0, ("b", "cpu01", "cpu0"): 3.0}
    prob = _sources(["a", "b"], {"a": 1.0, "b": 1.0}, corun=f)
    s = _place(prob, {"a": "cpu0", "b": "cpu01"})
    assert s.makespan_s == 2.0
    assert all(t.contention_s == 0.0 for t in s.tasks)
    _same(s, _place(_sources(["a", "b"], {"a": 1.0, "b": 1.0}), {"a": "cpu0", "b": "cpu01"}))


def test_without_contention_the_slowdown_is_off_and_the_result_says_so() -> None:
    prob = _sources(["a", "b"], {"a": 1.0, "b": 1.0}, corun={("a", "cpu0", "cpu1"): 2.0})
    where = Placement.of({"a": Assignment("cpu0", FP32), "b": Assignment("cpu1", FP32)})
    s = schedule(prob, where, contention=False)
    assert s.makespan_s == 1.0 and not s.exact
    assert any("co-run" in n for n in s.notes)
    assert schedule(prob, where).exact


# ---- wake-ups -----------------------------------------------------------------------------
def _pipe(where: dict[str, str], *, wake: dict[str, float],
          side: dict[str, tuple[str, float]] | None = None) -> tuple[Problem, Schedule]:
    """x -> a -> h -> b -> y (1 s each), and independent tasks ``side`` (name -> device,
    seconds)."""
    x = Tensor("x", (10,), FP32, role=Role.INPUT)
    h = Tensor("h", (10,), FP32)
    y = Tensor("y", (10,), FP32, role=Role.OUTPUT)
    tensors = [x, h, y]
    ops = [Op("a", OpKind.RELU, ("x",), ("h",)), Op("b", OpKind.RELU, ("h",), ("y",))]
    side = side or {}
    for n in side:
        tensors.append(Tensor(f"z_{n}", (10,), FP32, role=Role.OUTPUT))
        ops.append(Op(n, OpKind.TASK, (), (f"z_{n}",), hint=TaskHint()))
    g = Graph.build("p", tensors, ops)
    m = local_like()
    times = {(o, d): 1.0 for o in ("a", "b") for d in DEVICES}
    times.update({(n, d): secs for n, (_, secs) in side.items() for d in DEVICES})
    prob = Problem(g, None, m, ToyCostModel(m, times, wake=wake), host="cpu0",
                   outputs_to_host=False)
    pl = dict(where)
    pl.update({n: d for n, (d, _) in side.items()})
    return prob, schedule(prob, Placement.of({v: Assignment(d, FP32) for v, d in pl.items()}))


def _xfer(s: Schedule) -> Task:
    (x,) = [t for t in s.tasks if t.kind is TaskKind.TRANSFER]
    return x


def test_a_hand_off_to_a_sleeping_worker_pays_its_wake_up() -> None:
    # cpu01 runs on the host's thread and shares core 1 with cpu1, whose worker process
    # therefore sleeps; d keeps both cores first, so cpu1 is idle when h arrives
    w = 3e-4
    side = {"d": ("cpu01", 5.0)}
    prob, s = _pipe({"a": "cpu0", "b": "cpu1"}, wake={"cpu1": w, "cpu0": w, "cpu01": w},
                    side=side)
    _, plain = _pipe({"a": "cpu0", "b": "cpu1"}, wake={}, side=side)
    xfer, base = _xfer(s), _xfer(plain)
    assert s.task("a").start_s == 5.0
    assert xfer.term(Term.SYNC) == pytest.approx(base.term(Term.SYNC) + w)
    assert [k for k, _ in xfer.cost.terms].count(Term.SYNC) == 1
    assert xfer.duration_s == pytest.approx(base.duration_s + w)
    assert dict(xfer.cost.assumptions)["wake_s"] == w
    assert s.makespan_s == pytest.approx(plain.makespan_s + w)
    check_schedule(prob, s)


def test_a_polling_worker_pays_no_wake_up() -> None:
    # cpu0 and cpu1 share no core: both workers poll
    _, s = _pipe({"a": "cpu0", "b": "cpu1"}, wake={"cpu1": 1e-3, "cpu0": 1e-3})
    _, plain = _pipe({"a": "cpu0", "b": "cpu1"}, wake={})
    _same(s, plain)


def test_devices_on_the_host_thread_hand_over_without_a_wake_up() -> None:
    # cpu01 shares core 0 with the host cpu0: both run on the client's thread
    where = {"a": "cpu0", "b": "cpu01"}
    _, s = _pipe(where, wake={"cpu01": 1e-3, "cpu0": 1e-3, "cpu1": 1e-3},
                 side={"c": ("cpu1", 0.5)})
    _same(s, _pipe(where, wake={}, side={"c": ("cpu1", 0.5)})[1])


def test_a_worker_busy_computing_when_the_data_arrives_is_awake() -> None:
    # cpu1 sleeps (cpu01 is in the plan) but computes c (5 s) when h arrives at ~1 s
    side = {"c": ("cpu1", 5.0), "d": ("cpu01", 1.0)}
    prob, s = _pipe({"a": "cpu0", "b": "cpu1"}, wake={"cpu1": 1e-3}, side=side)
    _, plain = _pipe({"a": "cpu0", "b": "cpu1"}, wake={}, side=side)
    assert s.task("c").start_s == 0.0 and _xfer(s).end_s < s.task("c").end_s
    assert "wake_s" not in dict(_xfer(s).cost.assumptions)
    _same(s, plain)
    # c on cpu01 instead runs first on both cores; cpu1 is idle when h comes: woken
    _, s2 = _pipe({"a": "cpu0", "b": "cpu1"}, wake={"cpu1": 1e-3},
                  side={"c": ("cpu01", 5.0)})
    assert s2.task("a").start_s == 5.0
    assert dict(_xfer(s2).cost.assumptions)["wake_s"] == 1e-3
    check_schedule(prob, s)


def test_a_schedule_with_wake_ups_round_trips_through_its_records() -> None:
    _, s = _pipe({"a": "cpu0", "b": "cpu1"}, wake={"cpu1": 3e-4},
                 side={"d": ("cpu01", 5.0)})
    assert "wake_s" in dict(_xfer(s).cost.assumptions)
    back = Schedule.from_records(s.placement, s.tasks, s.copies, s.resources, s.host,
                                 makespan_s=s.makespan_s)
    assert [(t.name, t.terms) for t in back.tasks] == [(t.name, t.terms) for t in s.tasks]
    assert back.core_occupancy_s() == s.core_occupancy_s()


# ---- properties ------------------------------------------------------------------------------
def _random_problem(data: st.DataObject, factor: float, wake: float = 0.0,
                    to_host: bool = False) -> tuple[Problem, Placement]:
    names = [f"t{i}" for i in range(data.draw(st.integers(2, 7), label="tasks"))]
    secs = {n: data.draw(st.sampled_from([0.5, 1.0, 2.0, 3.0]), label=n) for n in names}
    pairs = [(a, b) for a, b in itertools.permutations(("cpu0", "cpu1"), 2)]
    corun = {(n, a, b): factor for n in names for a, b in pairs}
    prob = _sources(names, secs, corun=corun, wake={d: wake for d in DEVICES},
                    to_host=to_host)
    where = {n: data.draw(st.sampled_from(DEVICES), label=f"{n}@") for n in names}
    return prob, Placement.of({v: Assignment(d, FP32) for v, d in where.items()})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_slowdown_one_gives_the_identical_schedule(data: st.DataObject) -> None:
    prob, pl = _random_problem(data, 1.0)
    names = [v.name for v in prob.vertices]
    secs = {v.name: prob.cost(v.index, "cpu0", FP32).total_s for v in prob.vertices}
    _same(schedule(prob, pl), schedule(_sources(names, secs), pl))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.sampled_from([1.0, 1.2, 1.5, 2.0]), st.sampled_from([0.1, 0.3, 1.0]))
def test_schedules_stay_valid_and_stretch_only_by_the_factor(
        data: st.DataObject, factor: float, extra: float) -> None:
    prob, pl = _random_problem(data, factor)
    s = schedule(prob, pl)
    check_schedule(prob, s)
    assert_cores_exclusive(prob.machine, s)
    for t in s.tasks:
        # never faster than alone, never slower than the factor throughout
        assert t.duration_s >= t.cost.total_s * (1 - 1e-9)
        assert t.duration_s <= t.cost.total_s * factor * (1 + 1e-9)
    # a larger factor never makes a task of a fixed overlap shorter: with every task on the
    # two single cores side by side, the makespan is monotone in the factor
    sides = Placement.of({v.name: Assignment(("cpu0", "cpu1")[v.index % 2], FP32)
                          for v in prob.vertices})
    lo = schedule(prob, sides).makespan_s
    prob2, _ = _random_problem_like(prob, factor + extra)
    assert schedule(prob2, sides).makespan_s >= lo * (1 - 1e-9)


def _random_problem_like(prob: Problem, factor: float) -> tuple[Problem, None]:
    names = [v.name for v in prob.vertices]
    secs = {v.name: prob.cost(v.index, "cpu0", FP32).total_s for v in prob.vertices}
    pairs = list(itertools.permutations(("cpu0", "cpu1"), 2))
    return _sources(names, secs, corun={(n, a, b): factor for n in names
                                        for a, b in pairs}), None


def _chains(data: st.DataObject, wake: float) -> tuple[Problem, Placement]:
    """2-4 chains x_i -> a_i -> b_i -> y_i, each op on a random device."""
    k = data.draw(st.integers(2, 4), label="chains")
    tensors: list[Tensor] = []
    ops: list[Op] = []
    for i in range(k):
        tensors += [Tensor(f"x{i}", (10,), FP32, role=Role.INPUT), Tensor(f"h{i}", (10,), FP32),
                    Tensor(f"y{i}", (10,), FP32, role=Role.OUTPUT)]
        ops += [Op(f"a{i}", OpKind.RELU, (f"x{i}",), (f"h{i}",)),
                Op(f"b{i}", OpKind.RELU, (f"h{i}",), (f"y{i}",))]
    g = Graph.build("chains", tensors, ops)
    m = local_like()
    times = {(o.name, d): data.draw(st.sampled_from([0.5, 1.0, 2.0]), label=o.name)
             for o in ops for d in DEVICES}
    prob = Problem(g, None, m, ToyCostModel(m, times, wake={d: wake for d in DEVICES}),
                   host="cpu0", outputs_to_host=False)
    pl = Placement.of({o.name: Assignment(data.draw(st.sampled_from(DEVICES),
                                                     label=f"{o.name}@"), FP32) for o in ops})
    return prob, pl


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.sampled_from([1e-3, 0.2]))
def test_wake_ups_follow_the_rule_and_keep_schedules_valid(data: st.DataObject,
                                                           wake: float) -> None:
    prob, pl = _chains(data, wake)
    s = schedule(prob, pl)
    check_schedule(prob, s)
    assert_cores_exclusive(prob.machine, s)
    _same(s, schedule(prob, pl))  # deterministic
    # on this machine only cpu1's worker ever sleeps: when cpu01 (on the host's thread)
    # is in the plan; it pays a wake-up for data from another device that arrives while
    # it computes nothing
    sleeps = "cpu01" in pl.devices_used()
    busy = [t for t in s.tasks if t.device == "cpu1" and t.kind is not TaskKind.TRANSFER]
    tol = 1e-9
    for t in s.tasks:
        if t.kind is not TaskKind.TRANSFER:
            assert "wake_s" not in dict(t.cost.assumptions)
            continue
        woken = "wake_s" in dict(t.cost.assumptions)
        if t.dst_device != "cpu1" or not sleeps:
            assert not woken
            continue
        arrive = t.end_s - wake if woken else t.end_s
        if any(abs(arrive - x) <= tol for b in busy for x in (b.start_s, b.end_s)):
            continue  # a tie: which came first is the event order's
        computing = any(b.start_s < arrive < b.end_s for b in busy)
        assert woken is not computing
        if woken:
            assert t.term(Term.SYNC) >= wake


