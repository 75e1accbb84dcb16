"""Devices that share CPU cores (``Device.cores``) never compute at the same time.

The machine mirrors ``placewise hw probe``'s ``local``: ``cpu0`` on core 0, ``cpu1`` on
core 1 and ``cpu01`` on both.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placewise.graph.fuse import fuse
from placewise.graph.ir import Graph, Op, OpKind, Role, TaskHint, Tensor
from placewise.hardware.spec import Machine
from placewise.schedule import (
    Placement,
    Problem,
    Schedule,
    TaskKind,
    problem_lower_bound,
    schedule,
    schedule_lower_bound,
    throughput,
)
from placewise.schedule.placement import Assignment, feasible_assignments
from placewise.schedule.testing import ToyCostModel
from placewise.units import DType
from tests.schedule.helpers import (
    check_schedule,
    device,
    link,
    machine,
    sources,
)
from tests.strategies import random_graphs

FP32 = DType.FP32
LOCAL_CORES = {"cpu0": [0], "cpu1": [1], "cpu01": [0, 1]}


def _dev(name: str, cores: list[int] | None, **kw: Any) -> dict[str, Any]:
    d = device(name, **kw)
    if cores is not None:
        d["cores"] = cores
    return d


def local_like(*, lanes: int = 1, mc: bool = False) -> Machine:
    """Three CPU devices on cores [0], [1], [0, 1], pairwise linked."""
    devs = [_dev(n, c, lanes=lanes, resources=["mc"] if mc else None)
            for n, c in LOCAL_CORES.items()]
    links = [link(f"l{a}{b}", a, b, resource="mc" if mc else None)
             for a, b in itertools.combinations(LOCAL_CORES, 2)]
    shared = [{"name": "mc", "bandwidth_bytes_per_s": 1e9, "source": "test"}] if mc else []
    return machine(devs, links, shared, name="local-like")


def _place(prob: Problem, where: dict[str, str]) -> Schedule:
    return schedule(prob, Placement.of({v: Assignment(d, FP32) for v, d in where.items()}))


def _sources_problem(m: Machine, names: list[str], secs: float = 1.0) -> Problem:
    g = sources(names)
    cm = ToyCostModel(m, {(o, d.name): secs for o in names for d in m.devices})
    return Problem(g, None, m, cm, host=m.devices[0].name, outputs_to_host=False)


def _overlap(a: Any, b: Any, tol: float) -> bool:
    return a.start_s < b.end_s - tol and b.start_s < a.end_s - tol


def assert_cores_exclusive(m: Machine, s: Schedule) -> None:
    """No two compute/conversion tasks of different devices sharing a core overlap, and
    every task records its device's cores."""
    cores = {d.name: set(d.cores or ()) for d in m.devices}
    tol = 1e-9 * max(s.makespan_s, 1e-12)
    held = [t for t in s.tasks if t.kind is not TaskKind.TRANSFER]
    for t in s.tasks:
        want = () if t.kind is TaskKind.TRANSFER else tuple(sorted(cores[t.device]))
        assert t.cores == want, (t.name, t.cores, want)
    for a, b in itertools.combinations(held, 2):
        if a.device != b.device and cores[a.device] & cores[b.device]:
            assert not _overlap(a, b, tol), f"{a.name} on {a.device} overlaps {b.name} " \
                                            f"on {b.device}"


# ---- hand-checked cases ---------------------------------------------------------------------
def test_ops_on_a_core_and_on_both_cores_serialize() -> None:
    m = local_like()
    prob = _sources_problem(m, ["a", "b"])
    s = _place(prob, {"a": "cpu0", "b": "cpu01"})
    a, b = s.task("a"), s.task("b")
    assert a.cores == (0,) and b.cores == (0, 1)
    assert (a.start_s, a.end_s, b.start_s, b.end_s) == (0.0, 1.0, 1.0, 2.0)
    assert s.makespan_s == 2.0
    # the lanes stay the devices' own; the cores are what they shared
    assert (a.resource, a.lane, b.resource, b.lane) == ("cpu0", 0, "cpu01", 0)
    assert s.core_occupancy_s() == {"core:0": 2.0}
    lb = schedule_lower_bound(s)
    assert lb.value_s == 2.0 and lb.binding == "core:0"
    tp = throughput(s)
    assert tp.bottleneck_resource == "core:0" and tp.period_s == 2.0
    # the chain explains the wait: b waited for a's core
    assert [t.name for t in s.critical_path()] == ["a", "b"]


def test_ops_on_the_two_single_cores_overlap() -> None:
    m = local_like()
    prob = _sources_problem(m, ["a", "b"])
    s = _place(prob, {"a": "cpu0", "b": "cpu1"})
    assert s.task("a").start_s == s.task("b").start_s == 0.0
    assert s.makespan_s == 1.0
    assert s.core_occupancy_s() == {}  # no core held by two devices
    assert schedule_lower_bound(s).value_s == 1.0


def test_both_cores_wait_for_both_single_core_devices() -> None:
    m = local_like()
    prob = _sources_problem(m, ["a", "b", "c"])
    s = _place(prob, {"a": "cpu0", "b": "cpu01", "c": "cpu1"})
    # equal ranks: a, then b (blocked by a's core 0, reserves both cores until 1 s); c fits
    # on core 1 before that, so it runs beside a
    assert s.task("a").start_s == s.task("c").start_s == 0.0
    assert s.task("b").start_s == 1.0 and s.makespan_s == 2.0
    assert s.core_occupancy_s() == {"core:0": 2.0, "core:1": 2.0}
    assert_cores_exclusive(m, s)


def test_devices_on_one_core_each_do_not_interfere_and_presets_are_unchanged() -> None:
    # cores that no other device shares gate nothing: same schedule as without cores
    with_cores = machine([_dev("p", [0]), _dev("q", [1])], [link("l", "p", "q")])
    without = machine([_dev("p", None), _dev("q", None)], [link("l", "p", "q")])
    runs = []
    for m in (with_cores, without):
        prob = _sources_problem(m, ["a", "b", "c"])
        s = _place(prob, {"a": "p", "b": "q", "c": "p"})
        runs.append([(t.name, t.resource, t.lane, t.start_s, t.end_s) for t in s.tasks])
        assert s.core_occupancy_s() == {}
    assert runs[0] == runs[1]


def test_one_core_shared_by_two_single_core_devices() -> None:
    # the probe's single-core fallback: cpu0 and cpu1 both on the same core
    m = machine([_dev("cpu0", [0]), _dev("cpu1", [0])], [link("l", "cpu0", "cpu1")])
    prob = _sources_problem(m, ["a", "b"])
    s = _place(prob, {"a": "cpu0", "b": "cpu1"})
    assert s.makespan_s == 2.0
    assert_cores_exclusive(m, s)


def _chain_graph(spec: list[tuple[str, tuple[str, ...]]]) -> Graph:
    """Task ops given as (name, predecessors); each writes one small tensor ``t_name``."""
    tensors: list[Tensor] = []
    ops: list[Op] = []
    consumed = {p for _, preds in spec for p in preds}
    for name, preds in spec:
        role = Role.ACTIVATION if name in consumed else Role.OUTPUT
        tensors.append(Tensor(f"t_{name}", (1,), FP32, role=role))
        ops.append(Op(name, OpKind.TASK, tuple(f"t_{p}" for p in preds), (f"t_{name}",),
                      hint=TaskHint()))
    return Graph.build("chains", tensors, ops)


def test_a_waiting_task_reserves_its_cores_no_starvation() -> None:
    """Ranks: a0 (6) > w (5.5) > a_tail (5) > b0 (4.5). At 0 a0 takes core 0, so w waits
    and reserves both cores until a0 ends at 1 s; b0 (1.5 s) would end later, so it must
    not take core 1 meanwhile (greedily started, it would keep w waiting behind the b
    chain and a_tail until 6 s). Once w runs, b0 fills core 1 while w2 waits for a_tail."""
    m = local_like()
    spec: list[tuple[str, tuple[str, ...]]] = [
        ("a0", ()), ("a_tail", ("a0",)), ("w", ()), ("w2", ("w",)),
        ("b0", ()), ("b1", ("b0",)), ("b2", ("b1",))]
    g = _chain_graph(spec)
    times = {("a0", "cpu0"): 1.0, ("a_tail", "cpu0"): 5.0, ("w", "cpu01"): 1.0,
             ("w2", "cpu01"): 4.5, ("b0", "cpu1"): 1.5, ("b1", "cpu1"): 1.5,
             ("b2", "cpu1"): 1.5}
    prob = Problem(g, None, m, ToyCostModel(m, times), host="cpu0", outputs_to_host=False)
    where = {"a0": "cpu0", "a_tail": "cpu0", "w": "cpu01", "w2": "cpu01", "b0": "cpu1",
             "b1": "cpu1", "b2": "cpu1"}
    s = _place(prob, where)
    starts = {t.name: t.start_s for t in s.tasks}
    assert starts == {"a0": 0.0, "w": 1.0, "a_tail": 2.0, "b0": 2.0, "b1": 3.5, "b2": 5.0,
                      "w2": 7.0}
    assert s.makespan_s == 11.5
    assert_cores_exclusive(m, s)
    check_schedule(prob, s)


def test_lanes_of_one_device_still_run_together() -> None:
    # a core is held by one *device*: a two-lane cpu01 runs two tasks at once
    m = local_like(lanes=2)
    prob = _sources_problem(m, ["a", "b", "c"])
    s = _place(prob, {"a": "cpu01", "b": "cpu01", "c": "cpu0"})
    a, b, c = s.task("a"), s.task("b"), s.task("c")
    assert a.start_s == b.start_s == 0.0 and {a.lane, b.lane} == {0, 1}
    assert c.start_s == 1.0
    assert s.makespan_s == 2.0
    # core 0: cpu01's 2 s over its 2 lanes, plus cpu0's 1 s over its 2 lanes; core 1 is
    # used by cpu01 alone in this schedule, so it is no separate bound
    assert s.core_occupancy_s() == {"core:0": 1.5}
    assert schedule_lower_bound(s).value_s == 1.5


def test_problem_bound_counts_vertices_confined_to_a_core() -> None:
    # cpu0 and cpu01 only (both on core 0): the vertices cannot spread over the two lanes
    m = machine([_dev("cpu0", [0]), _dev("cpu01", [0, 1])], [link("l", "cpu0", "cpu01")])
    prob = _sources_problem(m, ["a", "b", "c", "d"])
    lb = problem_lower_bound(prob)
    assert lb.value_s == 4.0 and lb.binding == "core:0"
    s = _place(prob, {"a": "cpu0", "b": "cpu01", "c": "cpu0", "d": "cpu01"})
    assert s.makespan_s == 4.0


# ---- random DAGs on machines whose devices share cores ---------------------------------------
@st.composite
def core_machines(draw: st.DrawFn) -> Machine:
    """2-4 devices on random non-empty subsets of cores {0, 1, 2} (some without cores),
    random lanes and dtypes, a connected set of links, sometimes a shared controller."""
    n = draw(st.integers(2, 4))
    names = [f"d{i}" for i in range(n)]
    mc = draw(st.booleans())
    devs = []
    for i, dn in enumerate(names):
        cores = draw(st.none() | st.lists(st.integers(0, 2), min_size=1, max_size=3,
                                           unique=True)) if i else \
            draw(st.lists(st.integers(0, 2), min_size=1, max_size=3, unique=True))
        dtypes = {"fp32": draw(st.sampled_from([1e9, 1e10]))}
        if draw(st.booleans()):
            dtypes["fp16"] = dtypes["fp32"] * 2
        devs.append(_dev(dn, cores, dtypes=dtypes, lanes=draw(st.integers(1, 2)),
                         resources=["mc"] if mc and draw(st.booleans()) else None,
                         launch=draw(st.sampled_from([0.0, 1e-6]))))
    links = [link(f"l{i}", names[draw(st.integers(0, i - 1))], names[i],
                  bw=draw(st.sampled_from([1e8, 1e9])), duplex=draw(st.booleans()),
                  resource="mc" if mc and draw(st.booleans()) else None)
             for i in range(1, n)]
    shared = [{"name": "mc", "bandwidth_bytes_per_s": draw(st.sampled_from([5e8, 5e9])),
               "source": "test"}] if mc else []
    return machine(devs, links, shared, name="cores")


def draw_placement(data: st.DataObject, prob: Problem) -> Placement:
    return Placement.of({v.name: data.draw(st.sampled_from(feasible_assignments(prob, v.index)))
                         for v in prob.vertices})


_SETTINGS = settings(max_examples=40, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@_SETTINGS
@given(st.data())
def test_random_dags_never_overlap_on_shared_cores(data: st.DataObject) -> None:
    g = data.draw(random_graphs(max_ops=10), label="graph")
    m = data.draw(st.just(local_like()) | core_machines(), label="machine")
    part = fuse(g) if data.draw(st.booleans(), label="fused") else None
    prob = Problem(g, part, m, ToyCostModel(m), batch=data.draw(st.integers(1, 3)),
                   outputs_to_host=data.draw(st.booleans(), label="outputs_to_host"))
    pl = draw_placement(data, prob)
    contention = data.draw(st.booleans(), label="contention")
    lanes = data.draw(st.none() | st.fixed_dictionaries(
        {d: st.integers(1, 3) for d in prob.devices}), label="lanes")
    s = schedule(prob, pl, contention=contention, lanes=lanes)
    check_schedule(prob, s)
    assert_cores_exclusive(m, s)
    slack = s.makespan_s * 1e-9 + 1e-15
    bound = schedule_lower_bound(s)
    assert bound.value_s <= s.makespan_s + slack
    for name, w in s.core_occupancy_s().items():
        assert dict(bound.per_resource_s)[name] == w <= s.makespan_s + slack
    assert problem_lower_bound(prob, lanes=lanes).value_s <= s.makespan_s + slack
    assert throughput(s).period_s <= s.makespan_s + slack
    again = schedule(prob, pl, contention=contention, lanes=lanes)
    assert again.tasks == s.tasks and again.makespan_s == s.makespan_s


def test_bound_of_an_uncontended_schedule_leaves_out_shared_bandwidth() -> None:
    """Found by the test above: two tiny ops on a two-lane d0 (core 0) drawing on a slow
    controller ``mc``. Without contention they overlap at full speed (2 ns), so the
    controller's 3.3 ns is no bound of that schedule; with contention it is the makespan."""
    f = FP32
    ts = [Tensor("t0", (1, 1), f, role=Role.INPUT), Tensor("t1", (1, 1), f, role=Role.OUTPUT),
          Tensor("p2", (1,), f, role=Role.PARAM), Tensor("t3", (1, 1), f, role=Role.OUTPUT)]
    g = Graph.build("random", ts, [Op("relu_0", OpKind.RELU, ("t0",), ("t1",)),
                                   Op("add_1", OpKind.ADD, ("t0", "p2"), ("t3",))])
    m = machine([_dev("d0", [0], dtypes={"fp32": 1e9}, lanes=2, resources=["mc"], launch=0.0),
                 _dev("d1", None, dtypes={"fp32": 1e9}, launch=0.0)],
                [link("l1", "d0", "d1", bw=1e8)],
                [{"name": "mc", "bandwidth_bytes_per_s": 5e8, "source": "test"}], name="cores")
    prob = Problem(g, None, m, ToyCostModel(m), outputs_to_host=False)
    pl = Placement.uniform(["relu_0", "add_1"], "d0", f)
    off = schedule(prob, pl, contention=False)
    assert not off.exact and off.makespan_s == 2e-9
    b = schedule_lower_bound(off)
    assert b.value_s == 2e-9 and "mc" not in dict(b.per_resource_s)
    on = schedule(prob, pl)
    assert on.exact and on.makespan_s > off.makespan_s
    b = schedule_lower_bound(on)
    assert b.binding == "mc" and b.value_s == pytest.approx(on.makespan_s, rel=1e-9)
    assert b.value_s <= on.makespan_s * (1 + 1e-9)


def test_cpsat_does_not_overlap_devices_that_share_cores() -> None:
    """Three ops, 0.5 s each on cpu01, 1 s on cpu0 or cpu1. Two on cpu01 and one on cpu0
    would take 1 s if the devices were independent; sharing the cores, the best is 1.5 s."""
    from placewise.search.cpsat import cpsat_search
    from placewise.search.space import Model, SearchSpace

    m = local_like()
    names = ["a", "b", "c"]
    times = {(o, d): (0.5 if d == "cpu01" else 1.0) for o in names for d in LOCAL_CORES}
    prob = Problem(sources(names), None, m, ToyCostModel(m, times), host="cpu0",
                   outputs_to_host=False)
    out = cpsat_search(Model(SearchSpace(prob, [FP32])), time_limit_s=5.0, seed=0)
    assert out.status == "OPTIMAL" and out.checked and out.placement is not None
    assert out.objective_s is not None and abs(out.objective_s - 1.5) < 1e-3
    assert out.bound_s <= 1.5 + 1e-9
    s = schedule(prob, out.placement)
    assert s.makespan_s == 1.5
    assert_cores_exclusive(m, s)
