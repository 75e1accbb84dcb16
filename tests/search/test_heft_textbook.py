"""HEFT as published (Topcuoglu, Hariri & Wu 2002), and the ``heft`` strategy keeping its
own insertion schedule where the scheduler's resource model agrees with it."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from placewise.check import Severity, check_plan
from placewise.cost.roofline import RooflineModel
from placewise.errors import Infeasible, InputError
from placewise.graph.taskgraph import parse_taskgraph
from placewise.hardware.spec import Machine
from placewise.plan import build_plan
from placewise.schedule import Problem, evaluate
from placewise.search import plan_search
from placewise.search.heft import _Lane, heft_schedule, replay_late, upward_ranks
from placewise.search.space import Model, SearchSpace
from placewise.units import DType
from tests.schedule.helpers import check_schedule, random_machines
from tests.search.helpers import task_problem

# the paper's Fig. 2: computation cost of each task on P1, P2, P3, and the edges' costs
W = {1: (14, 16, 9), 2: (13, 19, 18), 3: (11, 13, 19), 4: (13, 8, 17), 5: (12, 13, 10),
     6: (13, 16, 9), 7: (7, 15, 11), 8: (5, 11, 14), 9: (18, 12, 20), 10: (21, 7, 16)}
E = [(1, 2, 18), (1, 3, 12), (1, 4, 9), (1, 5, 11), (1, 6, 14), (2, 8, 19), (2, 9, 16),
     (3, 7, 23), (4, 8, 27), (4, 9, 23), (5, 9, 13), (6, 8, 15), (7, 10, 17), (8, 10, 11),
     (9, 10, 13)]
P = ("p1", "p2", "p3")
# the paper's ranks (Table 2 / Section 4.2) and its HEFT schedule (Fig. 4a): length 80
RANKS = [108.0, 77.0, 80.0, 80.0, 69.0, 63.333, 42.667, 35.667, 44.333, 14.667]
ASSIGNED = {"n1": "p3", "n2": "p1", "n3": "p3", "n4": "p2", "n5": "p3", "n6": "p2",
            "n7": "p3", "n8": "p1", "n9": "p2", "n10": "p2"}
STARTS = {"n1": 0, "n2": 27, "n3": 9, "n4": 18, "n5": 28, "n6": 26, "n7": 38, "n8": 57,
          "n9": 56, "n10": 73}


def _machine(*, contention_free: bool = True) -> Machine:
    """P1-P3 fully linked at 1 byte/s with no latency, launch or partition overhead, so an edge of
    ``c`` bytes takes ``c`` seconds between two processors and 0 on one. Contention-free
    (as the paper assumes): the links share a resource of unbounded bandwidth, so
    transfers never wait; else each link direction is exclusive."""
    def dev(name: str) -> dict[str, Any]:
        return {"name": name, "kind": "cpu", "peak_flops_per_s": {"fp32": 1e9},
                "peak_source": "test", "launch_overhead_s": 0.0, "launch_source": "test",
                "partition_overhead_s": 0.0, "partition_source": "test: the paper has none",
                "memory": [{"name": "mem", "capacity_bytes": 1 << 40,
                            "bandwidth_bytes_per_s": 1e12, "source": "test"}]}
    links: list[dict[str, Any]] = []
    for i, a in enumerate(P):
        for b in P[i + 1:]:
            link: dict[str, Any] = {"name": f"{a}-{b}", "endpoints": [a, b],
                                    "bandwidth_bytes_per_s": 1.0, "latency_s": 0.0,
                                    "source": "test"}
            if contention_free:
                link["resource"] = "net"
            links.append(link)
    shared = [{"name": "net", "kind": "network", "bandwidth_bytes_per_s": 1e30,
               "source": "test: unbounded, so links never contend"}] if contention_free else []
    return Machine.model_validate({"name": "topcuoglu", "devices": [dev(p) for p in P],
                                   "links": links, "shared_resources": shared})


def _problem(**kw: bool) -> Problem:
    tg = {"schema_version": 1, "name": "topcuoglu-fig2",
          "tasks": [{"name": f"n{i}", "times_s": dict(zip(P, map(float, w), strict=True))}
                    for i, w in W.items()],
          "edges": [{"src": f"n{a}", "dst": f"n{b}", "bytes": c} for a, b, c in E]}
    m = _machine(**kw)
    return Problem(parse_taskgraph(tg), None, m, RooflineModel(m))


def test_ranks_schedule_and_length_are_the_papers() -> None:
    prob = _problem()
    model = Model(SearchSpace(prob, [DType.FP32]))
    assert upward_ranks(model) == pytest.approx(RANKS, abs=1e-3)
    out = heft_schedule(model)
    assert out.makespan_s == pytest.approx(80.0)
    names = prob.vertex_names
    assert {n: out.placement[n].device for n in names} == ASSIGNED
    assert dict(zip(names, out.start_s, strict=True)) == pytest.approx(STARTS)


def test_the_heft_strategy_keeps_its_own_schedule_and_the_plan_checks() -> None:
    prob = _problem()
    r = plan_search(prob, strategy="heft", time_limit_s=30.0)
    assert r.chosen == "heft" and r.makespan_s == pytest.approx(80.0)
    assert {n: r.placement[n].device for n in prob.vertex_names} == ASSIGNED
    assert any(n.startswith("heft: HEFT's own insertion schedule kept") for n in r.notes)
    s = r.best.schedule
    assert any("release times" in n for n in s.notes)
    assert {n: s.task(n).start_s for n in prob.vertex_names} == pytest.approx(STARTS)
    check_schedule(prob, s)
    plan = build_plan(prob, r, model_ref="topcuoglu.json")
    errors = [f for f in check_plan(plan, prob.graph, prob.machine)
              if f.severity is Severity.ERROR]
    assert errors == []


def test_exclusive_links_make_heft_reschedule_and_say_so() -> None:
    # n1's transfers to n4 and n6 (both on P2) overlap on the exclusive link P3 -> P2
    prob = _problem(contention_free=False)
    model = Model(SearchSpace(prob, [DType.FP32]))
    out = heft_schedule(model)
    replayed = evaluate(prob.released(out.release_s(prob.vertex_names)), out.placement)
    assert replay_late(out, replayed.schedule, prob.vertex_index)[0] > 0
    check_schedule(prob, replayed.schedule)  # late, but a valid schedule of this model
    plain = evaluate(prob, out.placement)
    r = plan_search(prob, strategy="heft", time_limit_s=30.0)
    assert any("HEFT's own schedule is not valid under the machine's resource model" in n
               and "rescheduled by the list scheduler" in n for n in r.notes)
    assert r.makespan_s == pytest.approx(min(replayed.makespan_s, plain.makespan_s))
    assert r.makespan_s > 80.0
    check_schedule(prob, r.best.schedule)


def test_release_times_hold_tasks_and_refuse_bad_input() -> None:
    prob = _problem()
    pl = heft_schedule(Model(SearchSpace(prob, [DType.FP32]))).placement
    late = prob.released({"n10": 100.0})
    s = evaluate(late, pl).schedule
    assert s.task("n10").start_s == pytest.approx(100.0) and s.makespan_s == pytest.approx(107)
    check_schedule(late, s)
    assert evaluate(prob, pl).schedule.notes == ()  # the original problem has none
    with pytest.raises(InputError, match="names a vertex the problem does not have"):
        prob.released({"nope": 1.0})
    with pytest.raises(InputError, match="finite and >= 0"):
        prob.released({"n1": -1.0})


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 400))
def test_lane_insertion_finds_the_earliest_gap_like_a_full_scan(seed: int, count: int) -> None:
    rng = random.Random(seed)
    lane = _Lane()
    busy: list[tuple[float, float]] = []
    for _ in range(count):
        ready = rng.uniform(0.0, 100.0)
        dur = rng.choice([0.0, rng.uniform(0.01, 0.5), rng.uniform(0.5, 5.0)])
        t = ready  # the earliest gap by a scan of every interval
        for a, b in sorted(busy):
            if a - t >= dur:
                break
            t = max(t, b)
        got = lane.slot(ready, dur)
        assert got == t
        lane.add(got, got + dur)
        busy.append((got, got + dur))


@settings(max_examples=10, deadline=None)
@given(random_machines(), st.integers(0, 1000), st.sampled_from(["layered", "fork-join"]))
def test_the_replay_of_heft_is_a_valid_schedule_never_early(m: Machine, seed: int,
                                                            kind: str) -> None:
    prob = task_problem(kind, 12, seed, m, edge_bytes=3e3)
    try:
        model = Model(SearchSpace(prob))
    except Infeasible:  # a machine whose memory is too small for some vertex anywhere
        assume(False)
        return
    out = heft_schedule(model)
    released = prob.released(out.release_s(prob.vertex_names))
    s = evaluate(released, out.placement).schedule
    check_schedule(released, s)
    for v in prob.vertices:
        assert s.task(v.name).start_s >= out.start_s[v.index] * (1 - 1e-12)
    late, over = replay_late(out, s, prob.vertex_index)
    if not late and not over:
        assert s.makespan_s == pytest.approx(out.makespan_s, rel=1e-9)
