"""Tails you can trust (issue 27): what an idle gap costs, measured by ``placewise tune``
with the one run recipe and recorded in the plan; the simulator pricing each batch by the
idle time before it; the per-request terms of a real run against the simulation of the
same arrivals; the service model's interval around p50 and p99."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from placewise.plan import Plan, load_plan, save_plan
from placewise.plan_records import IdlePoint, ServiceRecord
from placewise.serve import Workload, parse_batching, simulate
from placewise.serve.real import serve_real
from placewise.serve.report import TERMS, inside, summarize, terms
from placewise.serve.run import ServeSetup, capacity_rps, run_interval, run_once
from placewise.serve.service import predicted_compute_s, service_interval
from placewise.serve.tune import SETTINGS, plan_window, tune_service
from tests.runtime.helpers import local_machine
from tests.serve.test_real import _serve, setup  # noqa: F401  (the module's plan fixture)


def _record(p50: tuple[float, float], p90: tuple[float, float] | None = None, *,
            capacity: float = 1000.0) -> ServiceRecord:
    p90 = p90 or p50
    return ServiceRecord(
        session_spinning=True, client_spin_s=3e-4, predicted_latency_s=1e-3,
        predicted_capacity_rps=1000.0, capacity_rps=capacity, window=1,
        points=(IdlePoint(gap_s=1e-4, service_p50_s=p50[0], service_p90_s=p90[0], n=10),
                IdlePoint(gap_s=1e-2, service_p50_s=p50[1], service_p90_s=p90[1], n=10)))


def test_the_idle_curve_interpolates_in_log_gap_and_is_flat_outside() -> None:
    r = _record((1e-3, 3e-3))
    assert r.service_s(0.0) == r.service_s(1e-4) == 1e-3
    assert r.service_s(1.0) == r.service_s(1e-2) == 3e-3
    assert r.service_s(1e-3) == pytest.approx(2e-3)  # half-way in log(gap)
    gaps = np.geomspace(1e-5, 1.0, 50)
    assert np.all(np.diff([r.service_s(g) for g in gaps]) >= 0)
    assert r.latency_factor(1e-2) == pytest.approx(3.0)
    assert r.occupancy_factor(0.0) == pytest.approx(1.0)
    assert _record((1e-3, 1e-3), capacity=500.0).occupancy_factor(0.0) == pytest.approx(2.0)
    assert r.sigma(1e-4) == 0.0
    wide = _record((1e-3, 1e-3), (1e-3 * math.exp(1.2816), 1e-3))
    assert wide.sigma(1e-4) == pytest.approx(1.0) and wide.sigma(1e-2) == 0.0


def test_a_batch_after_an_idle_gap_costs_what_the_curve_says() -> None:
    """Requests far apart each follow a long gap and pay the cold service; a burst queues
    and every request after the first runs warm (gap 0); the first of a run has no
    completion before it (gap inf: the curve's last point)."""
    idle = _record((1e-3, 3e-3))
    far = simulate(Workload(np.arange(5) * 0.1), lambda b: (1e-3,), parse_batching("none"),
                   idle=idle)
    assert math.isinf(far.idle_s[0])
    np.testing.assert_allclose(far.idle_s[1:], 0.1 - 3e-3)
    np.testing.assert_allclose(far.latency_s, 3e-3)
    burst = simulate(Workload(np.zeros(4)), lambda b: (1e-3,), parse_batching("none"),
                     idle=idle)
    np.testing.assert_allclose(burst.idle_s[1:], 0.0)
    np.testing.assert_allclose(np.diff(burst.latency_s), 1e-3)  # warm, back to back
    plain = simulate(Workload(np.arange(5) * 0.1), lambda b: (1e-3,), parse_batching("none"))
    np.testing.assert_allclose(plain.latency_s, 1e-3)


def test_the_services_spread_is_drawn_per_batch_and_seeded() -> None:
    idle = _record((1e-3, 1e-3), (2e-3, 2e-3))
    wl = Workload(np.arange(2000) * 0.01)
    a = simulate(wl, lambda b: (1e-3,), parse_batching("none"), idle=idle)
    b = simulate(wl, lambda b: (1e-3,), parse_batching("none"), idle=idle)
    np.testing.assert_array_equal(a.latency_s, b.latency_s)
    assert np.median(a.latency_s) == pytest.approx(1e-3, rel=0.05)
    assert np.quantile(a.latency_s, 0.9) == pytest.approx(2e-3, rel=0.1)


def test_capacity_and_interval_follow_the_service_model() -> None:
    setup_ = ServeSetup(parse_batching("none"), rate=300.0, requests=3000, seed=3)
    svc = lambda b: (1e-3,)  # noqa: E731
    assert capacity_rps(svc, setup_) == pytest.approx(1000.0)
    slow = ServeSetup(parse_batching("none"), idle=_record((1e-3, 1e-3), capacity=500.0))
    assert capacity_rps(svc, slow) == pytest.approx(500.0)
    iv = run_interval(svc, setup_, {"p50": (0.8, 1.3), "p99": (0.8, 1.3)})
    _, mid = run_once(svc, setup_)
    for q in ("p50", "p99"):
        lo, hi = iv[q]["low_s"], iv[q]["high_s"]
        assert lo is not None and hi is not None and lo < mid[f"{q}_s"] < hi
    assert inside(mid, iv)["p50"]["inside"] and inside(mid, iv)["p99"]["inside"]
    assert not inside({"p50_s": 10.0, "p99_s": 10.0}, iv)["p50"]["inside"]


def test_tune_measures_the_plan_and_serve_real_uses_its_settings(
        setup: dict[str, Any], tmp_path: Path) -> None:  # noqa: F811
    plan: Plan = setup["plan"]
    rec = tune_service(plan, machine=local_machine(), source=setup["source"], per_gap=6,
                       probe=4, repeats=1, rounds=1, capacity_s=0.01,
                       executor_options={"partition_files": setup["files"]})
    assert {(t.session_spinning, t.client_spin_s) for t in rec.trials} == set(SETTINGS)
    best = min(rec.trials, key=lambda t: (t.latency_p90_s, t.latency_p50_s))
    assert (rec.session_spinning, rec.client_spin_s) == (best.session_spinning,
                                                         best.client_spin_s)
    gaps = [p.gap_s for p in rec.points]
    assert gaps == sorted(gaps) and len(rec.points) >= 2
    assert all(p.n >= 1 and 0 < p.service_p50_s <= p.service_p90_s for p in rec.points)
    assert rec.capacity_rps > 0 and rec.window == plan_window(plan) >= 1
    assert rec.predicted_latency_s == plan.predicted_latency_s
    tuned = plan.model_copy(update={"service": rec})
    save_plan(tuned, tmp_path / "tuned.json")
    back = load_plan(tmp_path / "tuned.json")
    assert back.service == rec
    for tuned_ in (True, False):
        for lo, hi in service_interval(back, tuned=tuned_).values():
            assert lo <= 1.0 <= hi
    # a tuned plan's settings reach the executor; the terms line up with a simulation
    got = serve_real_of(setup, back)
    assert got.tags["session_spinning"] == str(rec.session_spinning)
    assert float(got.tags["client_spin_s"]) == pytest.approx(rec.client_spin_s)


def serve_real_of(fixture: dict[str, Any], plan: Plan) -> Any:
    return serve_real(plan, np.arange(20) * 2e-3, parse_batching("none"),
                      source=fixture["source"], machine=local_machine(), warmup=1,
                      executor_options={"partition_files": fixture["files"]})


def test_real_terms_against_the_simulation_of_the_same_arrivals(
        setup: dict[str, Any]) -> None:  # noqa: F811
    times = np.concatenate([np.arange(20) * 3e-3, 0.07 + np.zeros(10)])
    got = _serve(setup, times, "none")
    sim = simulate(Workload(times), lambda b: (setup["plan"].predicted_latency_s,),
                   parse_batching("none"))
    t = terms(sim, got.result, got.late, compute_s=got.compute_s,
              predicted_compute_s=predicted_compute_s(setup["plan"]))
    assert set(t["terms"]) == set(TERMS)
    # every completed request's partition runs, from the telemetry, inside its service
    svc = got.result.latency_s - got.result.wait_s
    assert len(got.compute_s) == 30 and (got.compute_s > 0).all()
    assert (got.compute_s <= svc).all()
    assert t["terms"]["compute"]["measured"]["n"] == t["terms"]["handoff"]["measured"]["n"] == 30
    assert 0 < predicted_compute_s(setup["plan"]) <= setup["plan"].predicted_latency_s
    r = got.result
    assert len(r.idle_s) == r.completed == 30
    assert math.isinf(r.idle_s[0]) and (r.idle_s[1:] >= 0).all()
    # the burst's queue is served back to back: a request that arrived before the one ahead
    # of it completed idles no longer than it waited (whatever the machine's speed)
    assert (r.idle_s[22:] <= r.wait_s[22:] + 1e-9).all()
    assert t["terms"]["late"]["measured"]["n"] == 30 and t["terms"]["late"]["simulated"]["n"] == 0
    mm = t["mean_miss"]
    assert mm["latency_s"] == pytest.approx(mm["wait_s"] + mm["service_s"], abs=1e-12)
    by = t["service_by_idle"]["measured"]
    assert by["after_idle"]["n"] + by["warm"]["n"] == 30
    assert summarize(r)["conserved"]
