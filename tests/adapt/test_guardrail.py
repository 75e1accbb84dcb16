"""The promotion guardrail on synthetic A/B samples (pure numpy, no execution)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from placewise.adapt.guardrail import decide, median_ci, min_pairs
from placewise.errors import InputError

PAIRS, PER_BLOCK, TRIALS = 20, 10, 400


def _pair(rng: np.random.Generator, *, speedup: float = 1.0, tail: float = 0.0,
          pairs: int = PAIRS) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Interleaved blocks with a load factor shared by the two blocks of a pair (the
    machine's state drifts between pairs), B ``speedup`` times A's time, and a fraction
    ``tail`` of B's requests 5x slower."""
    load = rng.lognormal(0.0, 0.3, (pairs, 1))
    a = rng.lognormal(math.log(1e-3), 0.2, (pairs, PER_BLOCK)) * load
    b = (rng.lognormal(math.log(1e-3), 0.2, (pairs, PER_BLOCK)) * speedup
         * load * rng.lognormal(0.0, 0.05, (pairs, 1)))
    if tail:
        b = np.where(rng.random(b.shape) < tail, b * 5.0, b)
    return list(a), list(b)


def test_false_promotion_rate_is_near_its_level() -> None:
    """Same distribution, threshold 0: the lower end of a 95% interval clears 0 in about
    2.5% of trials (the exact interval's one-sided miss, at most that); with the 5%
    threshold, never."""
    at_zero = at_five = 0
    coverage = 0.0
    for seed in range(TRIALS):
        a, b = _pair(np.random.default_rng(seed))
        d0 = decide(a, b, threshold=0.0, p99_tolerance=math.inf)
        at_zero += d0.decision == "promote"
        at_five += decide(a, b).decision == "promote"
        coverage = d0.stats.coverage
    level = (1.0 - coverage) / 2.0  # the exact one-sided level: 2.07% with 20 pairs
    assert 0.02 < level <= 0.025
    slack = 3.0 * math.sqrt(level * (1.0 - level) / TRIALS)
    rate = at_zero / TRIALS
    assert rate <= level + slack
    assert rate > 0.0  # near its level, not a test that never fires
    assert at_five == 0


def test_clearly_better_promotes() -> None:
    wins = sum(decide(*_pair(np.random.default_rng(s), speedup=0.75)).decision == "promote"
               for s in range(50))
    assert wins == 50
    d = decide(*_pair(np.random.default_rng(0), speedup=0.75))
    assert d.stats.ci_low > 0.05 and d.stats.ci_low <= d.stats.improvement <= d.stats.ci_high
    assert abs(d.stats.improvement - 0.25) < 0.05
    assert all(c.passed for c in d.checks)


def test_worse_candidate_keeps() -> None:
    d = decide(*_pair(np.random.default_rng(3), speedup=1.3))
    assert d.decision == "keep" and not d.inconclusive
    assert "not faster" in d.reason


def test_worse_p99_keeps() -> None:
    """A faster median but a fat tail (5% of requests 5x slower) is kept."""
    d = decide(*_pair(np.random.default_rng(4), speedup=0.8, tail=0.05))
    imp, p99, _ = d.checks
    assert imp.passed and not p99.passed
    assert d.decision == "keep" and "p99" in d.reason
    assert d.stats.p99_ratio > 1.1
    assert "200 (A) and 200 (B) requests" in d.stats.p99_note


def test_failing_quality_keeps() -> None:
    a, b = _pair(np.random.default_rng(5), speedup=0.7)
    assert decide(a, b).decision == "promote"
    d = decide(a, b, quality_holds=False)
    assert d.decision == "keep" and "quality" in d.reason


def test_inconclusive_keeps() -> None:
    # too few pairs for a 95% interval
    a, b = _pair(np.random.default_rng(6), speedup=0.5, pairs=min_pairs() - 1)
    d = decide(a, b)
    assert d.decision == "keep" and d.inconclusive and "too few" in d.reason
    # an interval that straddles the threshold: a 5% speed-up with noisy pairs
    rng = np.random.default_rng(7)
    a = [rng.lognormal(math.log(1e-3), 0.2, PER_BLOCK) for _ in range(PAIRS)]
    b = [x * 0.95 * rng.lognormal(0.0, 0.15) for x in a]
    d = decide(a, b)
    assert d.decision == "keep" and d.inconclusive and "straddles" in d.reason
    assert d.stats.ci_low < 0.05 < d.stats.ci_high


def test_flat_samples_and_block_size() -> None:
    rng = np.random.default_rng(8)
    a = rng.lognormal(math.log(1e-3), 0.1, 200)
    per_request = decide(a, a * 0.8)
    assert per_request.stats.pairs == 200 and "per-request" in per_request.stats.method
    blocks = decide(a, a * 0.8, block=10)
    assert blocks.stats.pairs == 20 and blocks.stats.block_requests == (10,) * 20
    assert blocks.decision == "promote"


def test_median_ci_exact() -> None:
    assert median_ci([1.0, 2.0, 3.0, 4.0, 5.0]) is None  # 5 points cannot give 95%
    lo, hi, cov = median_ci(list(range(1, 21)))  # type: ignore[misc]
    assert (lo, hi) == (6.0, 15.0) and abs(cov - 0.9586) < 1e-4


@pytest.mark.parametrize(("kwargs", "place"), [
    ({"threshold": 1.5}, "--threshold"), ({"p99_tolerance": -0.1}, "--p99-tolerance"),
    ({"confidence": 1.0}, "--confidence"), ({"block": 0}, "block")])
def test_bad_arguments(kwargs: dict[str, float], place: str) -> None:
    with pytest.raises(InputError) as exc:
        decide([1e-3] * 10, [1e-3] * 10, **kwargs)  # type: ignore[arg-type]
    assert exc.value.place == place


def test_bad_samples() -> None:
    with pytest.raises(InputError, match="finite latencies"):
        decide([1e-3, -1.0], [1e-3, 1e-3])
    with pytest.raises(InputError, match="interleaved pairs"):
        decide([[1e-3]] * 6, [[1e-3]] * 5)


def test_record_is_json_ready() -> None:
    import json

    d = decide(*_pair(np.random.default_rng(9), speedup=0.7))
    doc = json.loads(json.dumps(d.to_json()))
    assert doc["decision"] == "promote" and doc["stats"]["pairs"] == PAIRS
    assert [c["name"] for c in doc["checks"]] == ["improvement", "p99", "quality"]


def test_replication_over_rounds_of_fresh_instances() -> None:
    """Two instances of the same plan differ by an instance effect no block pair averages
    out: with one round, an A/A comparison whose B instance happens to be 15% faster is
    promoted; over two rounds of fresh instances it must repeat in both, and does not."""
    rng = np.random.default_rng(11)
    assert decide(*_pair(rng, speedup=0.85)).decision == "promote"  # one round
    a1, b1 = _pair(rng, speedup=0.85, pairs=10)  # round 1: a lucky B instance
    a2, b2 = _pair(rng, speedup=1.0, pairs=10)   # round 2: fresh instances, no effect
    two = decide(a1 + a2, b1 + b2, rounds=[0] * 10 + [1] * 10)
    names = [c.name for c in two.checks]
    assert names == ["improvement", "replication", "p99", "quality"]
    assert two.decision == "keep" and not two.checks[1].passed
    assert "round 2" in two.checks[1].text and len(two.stats.rounds) == 2
    assert two.stats.rounds[0].ci_low > 0.05 >= two.stats.rounds[1].ci_low
    # a real improvement repeats in every round
    a3, b3 = _pair(rng, speedup=0.7, pairs=10)
    a4, b4 = _pair(rng, speedup=0.7, pairs=10)
    both = decide(a3 + a4, b3 + b4, rounds=[0] * 10 + [1] * 10)
    assert both.decision == "promote" and "each of 2 rounds" in both.reason
    assert [r["pairs"] for r in both.to_json()["stats"]["rounds"]] == [10, 10]
    with pytest.raises(InputError, match="round labels"):
        decide(a3, b3, rounds=[0, 1])


def test_instance_effects_false_promotion_rate() -> None:
    """A/A with a random effect per instance (sd 4% each, about what two services of one
    plan differ by here): one round of 20 pairs promotes copies now and then at the 5%
    threshold; two rounds of 10 on fresh instances far less often."""
    def effect(rng: np.random.Generator) -> float:
        return float(rng.lognormal(0.0, 0.04) / rng.lognormal(0.0, 0.04))

    one = two = 0
    for seed in range(TRIALS):
        rng = np.random.default_rng(1000 + seed)
        a, b = _pair(rng)
        e = effect(rng)
        one += decide(a, [y * e for y in b]).decision == "promote"
        a, b = _pair(rng)
        e1, e2 = effect(rng), effect(rng)
        b = [y * (e1 if i < PAIRS // 2 else e2) for i, y in enumerate(b)]
        two += decide(a, b, rounds=[i * 2 // PAIRS for i in range(PAIRS)]
                      ).decision == "promote"
    assert one > 3 * two and two <= 0.01 * TRIALS
