"""Property tests: random DAGs on random machines under random placements."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placewise.graph.fuse import fuse
from placewise.schedule import (
    Problem,
    TaskKind,
    evaluate,
    memory_report,
    problem_lower_bound,
    schedule,
    schedule_lower_bound,
    throughput,
)
from placewise.schedule.testing import ToyCostModel
from tests.schedule.helpers import check_schedule, random_machines, random_placement
from tests.strategies import random_graphs

_SETTINGS = settings(max_examples=60, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _problem(data: st.DataObject) -> Problem:
    g = data.draw(random_graphs(max_ops=10), label="graph")
    m = data.draw(random_machines(), label="machine")
    part = fuse(g) if data.draw(st.booleans(), label="fused") else None
    return Problem(g, part, m, ToyCostModel(m), batch=data.draw(st.integers(1, 4)),
                   outputs_to_host=data.draw(st.booleans(), label="outputs_to_host"))


@_SETTINGS
@given(st.data())
def test_schedules_respect_precedence_exclusivity_and_bounds(data: st.DataObject) -> None:
    prob = _problem(data)
    pl = random_placement(data.draw, prob)
    lanes = data.draw(st.none() | st.fixed_dictionaries(
        {d: st.integers(1, 3) for d in prob.devices}), label="lanes")
    s = schedule(prob, pl, lanes=lanes)
    check_schedule(prob, s)
    assert s.exact
    slack = s.makespan_s * 1e-9 + 1e-15
    assert schedule_lower_bound(s).value_s <= s.makespan_s + slack
    assert problem_lower_bound(prob, lanes=lanes).value_s <= s.makespan_s + slack
    # deterministic
    again = schedule(prob, pl, lanes=lanes)
    assert again.tasks == s.tasks and again.makespan_s == s.makespan_s
    # throughput never below one run per makespan
    tp = throughput(s)
    assert tp.period_s <= s.makespan_s + slack
    # without contention: still a valid schedule, labelled honestly
    s0 = schedule(prob, pl, lanes=lanes, contention=False)
    check_schedule(prob, s0)
    assert all(x.contention_s == 0.0 for x in s0.tasks)
    assert s0.exact == (not any(r.bytes for r in s0.resources if not r.exclusive))


@_SETTINGS
@given(st.data())
def test_memory_accounting_balances_and_matches_the_buffers(data: st.DataObject) -> None:
    prob = _problem(data)
    pl = random_placement(data.draw, prob)
    s = schedule(prob, pl)
    rep = memory_report(prob, s)
    bufs = rep.buffers
    for u in rep.usages:
        assert u.final_bytes == 0 and u.timeline[-1][1] == 0
        assert u.peak_bytes == max(level for _, level in u.timeline)
        members = set(u.members)
        live = [b for b in bufs if (b.device, b.tier) in members
                and b.start_s <= u.peak_time_s < b.end_s]
        assert sum(b.nbytes for b in live) == u.peak_bytes
        assert sum(v for _, v in u.breakdown) == u.peak_bytes
        for (t0, _), (t1, _) in zip(u.timeline, u.timeline[1:], strict=False):
            assert t0 < t1
    assert rep.feasible == all(u.fits for u in rep.usages if u.checked)
    assert rep.feasible == (not rep.violations)
    # every buffer lies within the run, every allocation has a matching release
    for b in bufs:
        assert 0.0 <= b.start_s < b.end_s <= s.makespan_s
    ev = evaluate(prob, pl)
    assert ev.feasible == rep.feasible and ev.makespan_s == s.makespan_s


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_copies_and_conversions_follow_the_representations(data: st.DataObject) -> None:
    prob = _problem(data)
    pl = random_placement(data.draw, prob)
    s = schedule(prob, pl)
    # each compute task reads each input from a copy on its device in its held representation
    readers: dict[str, set[tuple[str, str, object]]] = {}
    for c in s.copies:
        for r in c.readers:
            readers.setdefault(r, set()).add((c.tensor, c.device, c.rep))
    for v in prob.vertices:
        a = pl[v.name]
        ins, _ = prob.io_reps(v.index, a.dtype)
        for tname, rid in zip(v.inputs, ins, strict=True):
            assert (tname, a.device, prob.reps[rid]) in readers[v.name]
    # a conversion exists only for a representation somebody needs that was not produced
    for x in s.tasks_of(TaskKind.CONVERSION):
        assert x.src_rep != x.dst_rep
        made = next(c for c in s.copies if c.made_by == x.name)
        assert made.readers or made.final


def _reference_fluid(tasks: list[tuple[float, float]], capacity: float) -> list[float]:
    """End times of independent tasks (duration, bytes) all starting at 0 and sharing
    ``max(capacity, largest active demand)`` max-min fairly (a task is never slowed by its
    own traffic): a direct, step-by-step re-derivation of the model."""
    rem = [1.0] * len(tasks)
    end = [0.0] * len(tasks)
    now = 0.0
    active = [i for i, (d, _) in enumerate(tasks) if d > 0]
    while active:
        demand = {i: tasks[i][1] / tasks[i][0] for i in active}
        left, alloc = max(capacity, *demand.values()), {}
        for k, i in enumerate(sorted(active, key=lambda i: (demand[i], i))):
            alloc[i] = min(demand[i], left / (len(active) - k))
            left -= alloc[i]
        speed = {i: min(1.0, alloc[i] / demand[i]) / tasks[i][0] if demand[i] > 0
                 else 1.0 / tasks[i][0] for i in active}
        step = min(rem[i] / speed[i] for i in active)
        now += step
        for i in list(active):
            rem[i] -= step * speed[i]
            if rem[i] <= 1e-12:
                end[i] = now
                active.remove(i)
    return end


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.5, 1.0, 2.0, 3.0]),
                          st.sampled_from([0, 10**9, 4 * 10**9, 8 * 10**9, 3 * 10**10])),
                min_size=1, max_size=6),
       st.sampled_from([2e9, 1e10]))
def test_contention_matches_a_direct_fluid_computation(tasks: list[tuple[float, int]],
                                                       capacity: float) -> None:
    from placewise.schedule import Assignment, Placement
    from placewise.units import DType
    from tests.schedule.helpers import device, machine, sources

    names = [f"k{i}" for i in range(len(tasks))]
    m = machine([device("cpu", lanes=8, resources=["mc"]),
                 device("gpu", kind="gpu", lanes=8, resources=["mc"])],
                [{"name": "l", "endpoints": ["cpu", "gpu"], "bandwidth_bytes_per_s": 1e9,
                  "latency_s": 0.0, "source": "t"}],
                [{"name": "mc", "bandwidth_bytes_per_s": capacity, "source": "t"}])
    devs = ["cpu", "gpu"]
    cm = ToyCostModel(m, {(n, devs[i % 2]): tasks[i][0] for i, n in enumerate(names)},
                      {(n, devs[i % 2]): tasks[i][1] for i, n in enumerate(names)})
    prob = Problem(sources(names), None, m, cm, outputs_to_host=False)
    s = schedule(prob, Placement.of({n: Assignment(devs[i % 2], DType.FP32)
                                     for i, n in enumerate(names)}))
    want = _reference_fluid([(float(d), float(b)) for d, b in tasks], capacity)
    for n, w in zip(names, want, strict=True):
        x = s.task(n)
        assert x.start_s == 0.0
        assert abs(x.end_s - w) <= 1e-9 * max(1.0, w), (n, x.end_s, w)
    total = sum(b for _, b in tasks)
    assert s.makespan_s >= total / max(capacity, *(b / d for d, b in tasks)) * (1 - 1e-9)
    if sum(b / d for d, b in tasks) <= capacity:
        assert all(x.contention_s == 0.0 for x in s.tasks)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_a_schedule_rebuilt_from_its_records_gives_the_same_answers(data: st.DataObject
                                                                    ) -> None:
    from placewise.schedule import Schedule

    prob = _problem(data)
    pl = random_placement(data.draw, prob)
    s = schedule(prob, pl)
    back = Schedule.from_records(pl, s.tasks, s.copies, s.resources, s.host,
                                 makespan_s=s.makespan_s, exact=s.exact, notes=s.notes)
    assert back.tasks == s.tasks and back.copies == s.copies
    shuffled = Schedule.from_records(pl, list(reversed(s.tasks)), s.copies, s.resources,
                                     s.host)
    assert set(shuffled.tasks) == set(s.tasks) and shuffled.makespan_s == s.makespan_s
    assert memory_report(prob, shuffled).usages == memory_report(prob, s).usages
    assert back.makespan_s == s.makespan_s
    m1, m2 = memory_report(prob, s), memory_report(prob, back)
    assert m1.usages == m2.usages and m1.buffers == m2.buffers
    assert schedule_lower_bound(back).value_s == schedule_lower_bound(s).value_s
    assert throughput(back) == throughput(s)
    assert [x.name for x in back.critical_path()] == [x.name for x in s.critical_path()]
