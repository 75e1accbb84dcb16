"""Replicas that are not alike (issue 28, item 2, simulated): each replica its own service,
the stream split by each one's capacity (``weighted``) or sent where it would finish first
(``least-delay``), against round-robin, which overloads the slow one."""

from __future__ import annotations

import numpy as np
import pytest

from placewise.errors import InputError
from placewise.serve import StageTimes, Workload, parse_batching, poisson_arrivals, simulate
from placewise.serve.run import ServeSetup, capacity_rps, default_window


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
    assert capacity_rps([fast, fast], setup) == pytest.approx(
        capacity_rps(fast, ServeSetup(NONE, replicas=2)))
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
