"""The service simulator against closed forms, the batcher's rule, conservation and
determinism (issue 14)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placewise.errors import InputError
from placewise.serve import gamma_arrivals, parse_batching, poisson_arrivals, simulate

N = 200_000  # requests per closed-form check: the Monte-Carlo error is a few per cent


def _mean_and_error(x: np.ndarray, batches: int = 20) -> tuple[float, float]:
    """The mean and 3 standard errors from batch means (the samples are correlated)."""
    means = np.array([b.mean() for b in np.array_split(x, batches)])
    return float(x.mean()), 3.0 * float(means.std(ddof=1) / np.sqrt(batches))


def test_md1_mean_wait() -> None:
    d, rho = 1e-3, 0.7
    lam = rho / d
    r = simulate(poisson_arrivals(lam, N, seed=1), lambda b: (d,), parse_batching("none"))
    mean, err = _mean_and_error(r.wait_s)
    assert mean == pytest.approx(lam * d * d / (2 * (1 - rho)), abs=err)


def test_mm1_mean_sojourn() -> None:
    mu, lam = 1000.0, 600.0
    rng = np.random.default_rng(2)
    r = simulate(poisson_arrivals(lam, N, seed=3), lambda b: (rng.exponential(1 / mu),),
                 parse_batching("none"), deterministic=False)
    mean, err = _mean_and_error(r.latency_s)
    assert mean == pytest.approx(1 / (mu - lam), abs=err)


def test_distserve_two_stage_forms() -> None:
    """One device taking D against the same work split over two pipelined devices taking
    D/2 each: D + RD^2/(2(1-RD)) against D + RD^2/(4(2-RD))."""
    d, rate = 1e-3, 800.0
    arr = poisson_arrivals(rate, N, seed=4)
    one = simulate(arr, lambda b: (d,), parse_batching("none"))
    two = simulate(arr, lambda b: (d / 2, d / 2), parse_batching("none"))
    m1, e1 = _mean_and_error(one.latency_s)
    m2, e2 = _mean_and_error(two.latency_s)
    rd = rate * d
    assert m1 == pytest.approx(d + rate * d * d / (2 * (1 - rd)), abs=e1)
    assert m2 == pytest.approx(d + rate * d * d / (4 * (2 - rd)), abs=e2)
    assert two.utilization()[0] == pytest.approx(rd / 2, rel=0.02)


def test_dynamic_batcher_decisions_on_hand_made_arrivals() -> None:
    b = parse_batching("dynamic:max_batch=4,max_delay=10ms,preferred=2")
    # a burst of 5 at t=0 while the stage is free: 4 go at once (max_batch), the fifth
    # waits for the stage (busy 50 ms), then alone: it waited past 10 ms already
    r = simulate(np.zeros(5), lambda k: (0.05,), b)
    assert r.batch_sizes.tolist() == [4, 1]
    assert r.wait_s.tolist() == pytest.approx([0, 0, 0, 0, 0.05])
    # one request, then a second 5 ms later: a preferred batch of 2 forms at 5 ms
    r = simulate(np.array([0.0, 0.005]), lambda k: (0.001,), b)
    assert r.batch_sizes.tolist() == [2]
    assert r.wait_s.tolist() == pytest.approx([0.005, 0.0])
    # one request, the next 20 ms later: the first goes alone at its 10 ms deadline
    r = simulate(np.array([0.0, 0.02]), lambda k: (0.001,), b)
    assert r.batch_sizes.tolist() == [1, 1]
    assert r.wait_s.tolist() == pytest.approx([0.01, 0.01])
    # static:3 never sends the last two of five: they stay in flight
    r = simulate(np.arange(5) * 1e-3, lambda k: (1e-4,), parse_batching("static:3"))
    assert r.batch_sizes.tolist() == [3] and r.in_flight == 2 and r.conserved()


def test_admission_rejects_and_times_out() -> None:
    arr = np.zeros(10)
    r = simulate(arr, lambda k: (1.0,), parse_batching("none"), queue_limit=3)
    assert (r.completed, r.rejected) == (3, 7) and r.conserved()
    r = simulate(arr, lambda k: (1.0,), parse_batching("none"), timeout_s=1.5)
    # the first at 0, the second at 1 (waited 1 s), the rest waited more than 1.5 s
    assert (r.completed, r.timed_out) == (2, 8) and r.conserved()


@settings(max_examples=40, deadline=None)
@given(policy=st.sampled_from(["none", "static:3", "dynamic:max_batch=4,max_delay=1ms",
                               "dynamic:max_batch=8,max_delay=0.5ms,preferred=2/4"]),
       n=st.integers(1, 300), rate=st.floats(100.0, 1e5), cv=st.floats(0.3, 4.0),
       limit=st.one_of(st.none(), st.integers(1, 20)),
       timeout=st.one_of(st.none(), st.floats(1e-4, 1e-2)), seed=st.integers(0, 2**16))
def test_conservation_under_every_policy(policy: str, n: int, rate: float, cv: float,
                                         limit: int | None, timeout: float | None,
                                         seed: int) -> None:
    arr = gamma_arrivals(rate, cv, n, seed=seed)
    r = simulate(arr, lambda k: (2e-4 + 1e-4 * k, 1e-4 * k), parse_batching(policy),
                 queue_limit=limit, timeout_s=timeout)
    assert r.conserved()
    assert r.batch_sizes.sum() == r.completed
    assert bool((r.latency_s >= r.wait_s).all()) and bool((r.wait_s >= -1e-12).all())
    assert all(0 <= u <= 1 + 1e-9 for u in r.utilization())


def test_seeded_runs_are_identical() -> None:
    b = parse_batching("dynamic:max_batch=8,max_delay=1ms")
    a = simulate(gamma_arrivals(5000.0, 2.0, 10_000, seed=7), lambda k: (1e-4 * k,), b)
    c = simulate(gamma_arrivals(5000.0, 2.0, 10_000, seed=7), lambda k: (1e-4 * k,), b)
    assert np.array_equal(a.latency_s, c.latency_s)
    assert np.array_equal(a.batch_sizes, c.batch_sizes)


@pytest.mark.parametrize(("text", "place"), [
    ("fifo", "--batching"), ("static:0", "static"), ("dynamic:max_delay=1ms", "dynamic"),
    ("dynamic:max_batch=4,preferred=8", "preferred"), ("dynamic:max_batch=4,when=now", "dynamic"),
])
def test_bad_policies_name_the_problem(text: str, place: str) -> None:
    with pytest.raises(InputError, match=place):
        parse_batching(text)


def test_bad_rates_are_refused() -> None:
    for rate in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(InputError, match="--rate"):
            poisson_arrivals(rate, 10)
