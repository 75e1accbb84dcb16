"""Replicas that are not alike (issue 28, item 2, simulated): each replica its own service,
the stream split by each one's capacity (``weighted``) or sent where it would finish first
(``least-delay``), against round-robin, which overloads the slow one."""

from __future__ import annotations

import multiprocessing as mp
from typing import Any

import numpy as np
import pytest

from placewise.errors import InputError
from placewise.plan import Plan, build_plan
from placewise.runtime.opexec import load_source
from placewise.schedule import Assignment, Placement, evaluate
from placewise.serve import StageTimes, Workload, parse_batching, poisson_arrivals, simulate
from placewise.serve.replicas import check_replicas, serve_replicas
from placewise.serve.run import ServeSetup, capacity_rps, default_window
from placewise.units import DType
from tests.runtime.helpers import TINY_MLP, local_machine, own_segments, problem_of, tiny_source


def fast(b: int) -> StageTimes:
    return StageTimes(1e-3 * b, (0.0,), (1e-3 * b,), ("cpu0",))


def slow(b: int) -> StageTimes:
    return StageTimes(3e-3 * b, (0.0,), (3e-3 * b,), ("cpu1",))


NONE = parse_batching("none")


def test_weighted_splits_the_stream_by_capacity() -> None:
    """Capacities 1000/s and 333/s: smooth weighted round-robin sends exactly 3 of every 4
    requests to the fast replica."""
    r = simulate(Workload(np.arange(1000) * 0.01), [fast, slow], NONE, router="weighted")
    assert r.by_replica == (750, 250) and r.conserved()
    assert r.resources == ("r0/cpu0", "r1/cpu1")
    assert r.busy_s == pytest.approx((0.75, 0.75))


def test_capacity_and_window_of_unlike_replicas() -> None:
    setup = ServeSetup(NONE)
    assert capacity_rps([fast, slow], setup) == pytest.approx(1000 + 1000 / 3)
    # two replicas on the one cpu0 share it: no more than one of them serves
    assert capacity_rps([fast, fast], setup) == pytest.approx(capacity_rps(fast, setup))
    assert default_window([fast, slow], NONE) == 1


def test_round_robin_overloads_the_slow_replica_the_speed_aware_routers_do_not() -> None:
    """At 80 % of the combined capacity, round-robin sends the slow replica half the
    stream, 1.6x what it can serve: its queue grows for the whole run. Weighted and
    least-delay keep both replicas below saturation."""
    rate = 0.8 * capacity_rps([fast, slow], ServeSetup(NONE))
    wl = Workload(poisson_arrivals(rate, 20_000, seed=3))
    p99 = {}
    for router in ("round-robin", "weighted", "least-delay"):
        r = simulate(wl, [fast, slow], NONE, router=router)
        assert r.conserved() and r.completed == 20_000
        p99[router] = float(np.quantile(r.latency_s, 0.99))
        if router != "round-robin":
            assert r.by_replica[0] > 2 * r.by_replica[1]
    assert p99["round-robin"] > 10 * p99["weighted"]
    assert p99["weighted"] < 0.05 and p99["least-delay"] < 0.05  # seconds: stable queues


def test_a_service_per_replica_must_match_the_replicas() -> None:
    with pytest.raises(InputError, match="2 replica services for 3 replicas"):
        simulate(Workload(np.zeros(3)), [fast, slow], NONE, replicas=3)
    with pytest.raises(InputError, match="router"):
        simulate(Workload(np.zeros(3)), [fast, slow], NONE, router="random")


def _one_device_plan(device: str, int8: bool) -> Plan:
    """The tiny MLP on ``device``, its linears in int8 when asked."""
    prob = problem_of(tiny_source())
    place = Placement.of({
        v.name: Assignment(device, DType.INT8 if int8 and v.ops[0].kind.value == "linear"
                           else DType.FP32) for v in prob.vertices})
    return build_plan(prob, evaluate(prob, place), model_ref=TINY_MLP, strategy="test")


def test_unlike_replicas_serve_for_real_each_with_its_own_queue() -> None:
    """Two plans of the tiny MLP, fp32 on cpu0 and int8 on cpu1, as two replicas on this
    machine: every request is served by the replica the router chose, the weighted
    router's split is the simulator's, and nothing is left running."""
    plans = [_one_device_plan("cpu0", False), _one_device_plan("cpu1", True)]
    times = np.arange(40) * 2e-3
    got = serve_replicas(plans, Workload(times), NONE, router="weighted", warmup=1,
                         machine=local_machine(), files=["a.json", "b.json"])
    r = got.result
    assert r.conserved() and r.completed == 40
    sim = simulate(Workload(times), [
        lambda b, p=p: StageTimes(p.predicted_latency_s, (0.0,), (p.throughput.period_s,))
        for p in plans], NONE, router="weighted")
    assert sum(r.by_replica) == 40 and r.by_replica[0] > 0 and r.by_replica[1] > 0
    caps = [1.0 / p.throughput.period_s for p in plans]
    want = np.round(40 * np.array(caps) / sum(caps))
    assert abs(r.by_replica[0] - want[0]) <= 1
    assert sim.by_replica == pytest.approx(r.by_replica, abs=1)
    assert {x.split("/")[0] for x in r.resources} == {"r0", "r1"}
    assert not mp.active_children() and not own_segments()


def test_replicas_must_be_one_model_on_one_machine() -> None:
    a = _one_device_plan("cpu0", False)
    check_replicas([a, a], ["a.json", "b.json"])  # sharing a device is allowed: time-shared
    other = build_plan(*_other_problem(), model_ref="zoo:mlp?layers=1&hidden=8",
                       strategy="test")
    with pytest.raises(InputError, match="another model"):
        check_replicas([a, other], ["a.json", "c.json"])


def _other_problem() -> tuple[Any, Any]:
    src = load_source("zoo:mlp?layers=1&hidden=8")
    prob = problem_of(src)
    place = Placement.of({v: Assignment("cpu1", DType.FP32) for v in prob.vertex_names})
    return prob, evaluate(prob, place)
