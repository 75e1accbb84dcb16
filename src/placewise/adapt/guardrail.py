"""The promotion guardrail: pure statistics on interleaved A/B latency samples.

A is the incumbent, B the candidate; both served the same replayed requests in
alternating blocks (A, B, A, B, ...; ``placewise.adapt.promote``). ``decide`` promotes B
only when **all** of these hold, and keeps A otherwise (an inconclusive result keeps A):

- **median improvement**: the lower end of the confidence interval (default 95%) of the
  median improvement clears ``threshold`` (default 5%);
- **tail**: B's p99 is not worse than A's by more than ``p99_tolerance`` (default 10%);
- **quality**: ``quality_holds`` (the candidate's precision budget, measured by the caller);
- **replication** (when the pairs come from several rounds; see below).

**The statistic.** The unit of evidence is a *block pair*: block ``i`` of A and block ``i``
of B ran the same requests one after the other. Requests within a block share the
machine's state at that moment (another process's load, the CPU's clock), so they are not
independent; block pairs are much closer to it. For every pair the ratio
``r_i = median(B_i) / median(A_i)``, and the improvement is ``1 - median_i(r_i)``.

**The interval** is the exact distribution-free (sign-test) confidence interval for the
median of the ``r_i``: with ``n`` pairs, ``[r_(k), r_(n+1-k)]`` for the largest ``k`` with
``P(Binomial(n, 1/2) <= k - 1) <= (1 - confidence) / 2``; its coverage is at least
``confidence`` for any continuous distribution of the ratios (no normality, no symmetry,
no resampling, so no seed: the same samples always give the same interval), and since it
is built from order statistics it maps through ``1 - r`` unchanged. It was chosen over a
bootstrap because the number of block pairs is small (tens), where bootstrap intervals of
a median undercover, and over a t interval because latency ratios are skewed. Fewer pairs
than the interval needs (6 at 95%) is inconclusive. With flat samples and no ``block``,
each request is its own pair (the same replayed request in A and B).

**Replication.** The pairs share one instance of each arm, and two resident instances of
the *same* plan differ by a few percent here (memory placement and the like: up to 9% in
``benchmarks/guardrail.py``), a difference no number of block pairs averages out. When
the pairs come from several rounds, each on freshly started instances (``rounds``: the
round of every pair), a fourth check asks that the interval of **every** round clear the
threshold too: an instance effect must then repeat in each round to promote.

>>> import numpy as np
>>> rng = np.random.default_rng(1)
>>> a = [rng.lognormal(np.log(1e-3), 0.1, 20) for _ in range(12)]
>>> b = [x * 0.7 for x in a]
>>> d = decide(a, b)
>>> d.decision, round(d.stats.improvement, 3), d.stats.pairs
('promote', 0.3, 12)
>>> decide(a, a).decision
'keep'
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from placewise.errors import InputError

__all__ = ["Check", "Decision", "GuardrailStats", "RoundStats", "decide", "median_ci", "min_pairs"]

Samples = (Sequence[float] | Sequence[Sequence[float]] | Sequence[np.ndarray[Any, Any]]
           | np.ndarray[Any, Any])


@dataclass(frozen=True, slots=True)
class RoundStats:
    """One round's share of the pairs: its median improvement and exact interval
    (``nan`` when it has too few pairs for one)."""

    round: int
    pairs: int
    improvement: float
    ci_low: float
    ci_high: float
    coverage: float


@dataclass(frozen=True, slots=True)
class GuardrailStats:
    """The figures behind a decision (module docstring). Improvements are fractions
    (0.2 = B takes 20% less time than A); ``p99_ratio`` is ``p99_b_s / p99_a_s``."""

    method: str
    pairs: int
    block_requests: tuple[int, ...]
    a_samples: int
    b_samples: int
    median_a_s: float
    median_b_s: float
    improvement: float
    improvement_pooled: float
    ci_low: float
    ci_high: float
    confidence: float
    coverage: float
    threshold: float
    p99_a_s: float
    p99_b_s: float
    p99_ratio: float
    p99_tolerance: float
    p99_note: str
    quality_holds: bool
    seed: int
    rounds: tuple[RoundStats, ...] = ()

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["block_requests"] = list(self.block_requests)
        d["rounds"] = [{k: _finite(v) for k, v in asdict(r).items()} for r in self.rounds]
        return {k: _finite(v) for k, v in d.items()}


def _finite(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else v


@dataclass(frozen=True, slots=True)
class Check:
    """One condition of the promotion rule: its ``name`` (``improvement``, ``p99``,
    ``quality``), whether it ``passed`` and what was found (``text``)."""

    name: str
    passed: bool
    text: str


@dataclass(frozen=True, slots=True)
class Decision:
    """``decision``: ``"promote"`` or ``"keep"``; ``reason``: one sentence (the first check
    that failed, or why all passed); ``inconclusive``: the interval could not decide
    (too few pairs, or it straddles the threshold); ``checks``: every condition."""

    decision: str
    reason: str
    inconclusive: bool
    stats: GuardrailStats
    checks: tuple[Check, ...]

    def to_json(self) -> dict[str, Any]:
        return {"decision": self.decision, "reason": self.reason,
                "inconclusive": self.inconclusive, "stats": self.stats.to_json(),
                "checks": [asdict(c) for c in self.checks]}


def min_pairs(confidence: float = 0.95) -> int:
    """The fewest pairs for which the exact interval exists at ``confidence``: the
    smallest ``n`` with ``2 * 2**-n <= 1 - confidence``.

    >>> min_pairs(0.95), min_pairs(0.99)
    (6, 8)
    """
    n = 1
    while 2.0 * 0.5 ** n > 1.0 - confidence:
        n += 1
    return n


def median_ci(x: Sequence[float] | np.ndarray[Any, Any], confidence: float = 0.95
              ) -> tuple[float, float, float] | None:
    """The exact distribution-free interval for the median of ``x`` (module docstring):
    ``(low, high, coverage)``, or ``None`` when ``len(x) < min_pairs(confidence)``.

    >>> median_ci([5.0, 1.0, 4.0, 2.0, 3.0, 6.0])
    (1.0, 6.0, 0.96875)
    """
    v = np.sort(np.asarray(x, dtype=float))
    n = len(v)
    alpha = (1.0 - confidence) / 2.0
    cdf = 0.0  # P(Binomial(n, 1/2) <= k - 1), growing with k
    k = 0
    for j in range(n // 2 + 1):
        cdf_next = cdf + math.comb(n, j) * 0.5 ** n
        if cdf_next > alpha:
            break
        cdf, k = cdf_next, j + 1
    if k < 1:
        return None
    return float(v[k - 1]), float(v[n - k]), 1.0 - 2.0 * cdf


def _blocks(x: Samples, block: int | None, what: str) -> list[np.ndarray[Any, Any]]:
    """``x`` as a list of blocks (each a 1-D float array), checked."""
    arr = None
    if (isinstance(x, np.ndarray) and x.ndim == 1) or (
            len(x) and not isinstance(x[0], Sequence | np.ndarray)):
        arr = np.asarray(x, dtype=float)
    if arr is not None:
        if block is None:
            out = [arr[i:i + 1] for i in range(len(arr))]
        elif isinstance(block, bool) or not isinstance(block, int) or block < 1:
            raise InputError(f"the block size must be a positive integer, got {block!r}",
                             place="block")
        else:
            out = [arr[i:i + block] for i in range(0, len(arr), block)]
    else:
        out = [np.asarray(b, dtype=float).reshape(-1) for b in x]
    for i, b in enumerate(out):
        if not len(b):
            raise InputError(f"block {i} of the {what} samples is empty", place=what)
        if not np.all(np.isfinite(b)) or np.any(b <= 0):
            raise InputError(f"the {what} samples must be finite latencies > 0 seconds "
                             f"(block {i})", place=what)
    return out


def _check_args(threshold: float, p99_tolerance: float, confidence: float) -> None:
    if not (math.isfinite(threshold) and -1.0 < threshold < 1.0):
        raise InputError(f"the threshold must be a fraction in (-1, 1), got {threshold}",
                         place="--threshold")
    if not (p99_tolerance >= 0.0) or math.isnan(p99_tolerance):
        raise InputError(f"the p99 tolerance must be a fraction >= 0, got {p99_tolerance}",
                         place="--p99-tolerance")
    if not (0.5 <= confidence < 1.0):
        raise InputError(f"the confidence must lie in [0.5, 1), got {confidence}",
                         place="--confidence")


def _p99_note(na: int, nb: int) -> str:
    n = min(na, nb)
    tail = max(1, round(0.01 * n))
    note = f"p99 of {na} (A) and {nb} (B) requests: the {tail} slowest of each set it"
    if n < 100:
        note += "; under 100 requests it is close to the maximum, a noisy figure"
    return note


def decide(a_s: Samples, b_s: Samples, *, threshold: float = 0.05,
           p99_tolerance: float = 0.10, quality_holds: bool = True,
           confidence: float = 0.95, seed: int = 0, block: int | None = None,
           rounds: Sequence[int] | None = None) -> Decision:
    """Promote or keep (module docstring). ``a_s`` / ``b_s``: latencies in seconds, either
    as blocks (a sequence of per-block sequences, block ``i`` of A paired with block ``i``
    of B) or flat (split into consecutive blocks of ``block`` requests; without ``block``,
    request ``i`` of A is paired with request ``i`` of B). ``rounds``: per pair, the round
    of fresh instances it ran on (module docstring; ``None``: one round). ``seed`` is
    recorded; the exact interval draws no random numbers. ``InputError`` for samples that
    are not positive finite latencies, unequal pair counts, or arguments out of range."""
    _check_args(threshold, p99_tolerance, confidence)
    a = _blocks(a_s, block, "A")
    b = _blocks(b_s, block, "B")
    if len(a) != len(b):
        raise InputError(f"A has {len(a)} blocks and B {len(b)}: the samples must be "
                         f"interleaved pairs", place="B")
    n = len(a)
    ratios = np.array([np.median(y) / np.median(x) for x, y in zip(a, b, strict=True)])
    all_a, all_b = np.concatenate(a) if a else np.zeros(0), np.concatenate(b) if b else np.zeros(0)
    med_a = float(np.median(all_a)) if len(all_a) else math.nan
    med_b = float(np.median(all_b)) if len(all_b) else math.nan
    ci = median_ci(ratios, confidence) if n else None
    improvement = 1.0 - float(np.median(ratios)) if n else math.nan
    lo, hi, coverage = (1.0 - ci[1], 1.0 - ci[0], ci[2]) if ci else (math.nan, math.nan, 0.0)
    p99_a = float(np.quantile(all_a, 0.99)) if len(all_a) else math.nan
    p99_b = float(np.quantile(all_b, 0.99)) if len(all_b) else math.nan
    p99_ratio = p99_b / p99_a if len(all_a) and len(all_b) else math.nan
    stats = GuardrailStats(
        method=("exact sign-test interval for the median of per-block-pair ratios "
                "median(B_i)/median(A_i)" if any(len(x) > 1 for x in a) else
                "exact sign-test interval for the median of per-request ratios B_i/A_i"),
        pairs=n, block_requests=tuple(len(x) for x in a), a_samples=len(all_a),
        b_samples=len(all_b), median_a_s=med_a, median_b_s=med_b, improvement=improvement,
        improvement_pooled=1.0 - med_b / med_a if n else math.nan, ci_low=lo, ci_high=hi,
        confidence=confidence, coverage=coverage, threshold=threshold, p99_a_s=p99_a,
        p99_b_s=p99_b, p99_ratio=p99_ratio, p99_tolerance=p99_tolerance,
        p99_note=_p99_note(len(all_a), len(all_b)), quality_holds=bool(quality_holds),
        seed=seed, rounds=_rounds(ratios, rounds, confidence))
    return _rule(stats)


def _rounds(ratios: np.ndarray[Any, Any], rounds: Sequence[int] | None, confidence: float
            ) -> tuple[RoundStats, ...]:
    """Per round (when there are several) its improvement and interval."""
    if rounds is None:
        return ()
    r = np.asarray(rounds)
    if len(r) != len(ratios):
        raise InputError(f"{len(r)} round labels for {len(ratios)} pairs", place="rounds")
    out = []
    for k in sorted(set(r.tolist())):
        x = ratios[r == k]
        ci = median_ci(x, confidence)
        lo, hi, cov = (1.0 - ci[1], 1.0 - ci[0], ci[2]) if ci else (math.nan, math.nan, 0.0)
        out.append(RoundStats(int(k), len(x), 1.0 - float(np.median(x)), lo, hi, cov))
    return tuple(out) if len(out) > 1 else ()


def _rule(s: GuardrailStats) -> Decision:
    """The promotion rule on the figures: every check, the first failing one the reason."""
    pct = f"{100 * s.confidence:g}%"
    if s.pairs < min_pairs(s.confidence):
        imp = Check("improvement", False,
                    f"inconclusive: {s.pairs} block pairs are too few for a {pct} interval "
                    f"(it needs at least {min_pairs(s.confidence)})")
        inconclusive = True
    else:
        ci = (f"median improvement {100 * s.improvement:.1f}%, {pct} CI "
              f"[{100 * s.ci_low:.1f}%, {100 * s.ci_high:.1f}%] over {s.pairs} block pairs")
        thr = f"the {100 * s.threshold:g}% threshold"
        inconclusive = s.ci_low <= s.threshold < s.ci_high
        if s.ci_low > s.threshold:
            imp = Check("improvement", True, f"{ci}: the lower end clears {thr}")
        elif inconclusive:
            imp = Check("improvement", False, f"inconclusive: {ci} straddles {thr}")
        elif s.ci_high <= 0.0:
            imp = Check("improvement", False, f"the candidate is not faster: {ci}")
        else:
            imp = Check("improvement", False, f"{ci}: the whole interval is below {thr}")
    checks = [imp]
    if s.rounds:
        rep, straddle = _replication(s)
        checks.append(rep)
        inconclusive = inconclusive or (imp.passed and straddle)
    p99_ok = s.p99_ratio <= 1.0 + s.p99_tolerance
    p99 = Check("p99", bool(p99_ok),
                f"p99 {s.p99_b_s * 1e3:.3f} ms (B) against {s.p99_a_s * 1e3:.3f} ms (A): "
                f"{100 * (s.p99_ratio - 1):+.1f}%, tolerance +{100 * s.p99_tolerance:g}% "
                f"({s.p99_note})")
    quality = Check("quality", s.quality_holds,
                    "the candidate's output quality holds its precision budget"
                    if s.quality_holds else
                    "the candidate's output quality breaks its precision budget")
    checks += [p99, quality]
    failed = [c for c in checks if not c.passed]
    rep_text = f"; repeated in each of {len(s.rounds)} rounds" if s.rounds else ""
    if not failed:
        return Decision("promote", f"all checks hold: {imp.text}{rep_text}; p99 within "
                                   f"tolerance; quality holds", False, s, tuple(checks))
    return Decision("keep", f"keep the incumbent: {failed[0].text}", inconclusive, s,
                    tuple(checks))


def _replication(s: GuardrailStats) -> tuple[Check, bool]:
    """Whether every round's interval clears the threshold; and whether a failing round
    straddles it (inconclusive) rather than lying below it."""
    def text(r: RoundStats) -> str:
        if not math.isfinite(r.ci_low):
            return f"round {r.round + 1}: {r.pairs} pairs, too few for an interval"
        return (f"round {r.round + 1}: {100 * r.improvement:.1f}% "
                f"[{100 * r.ci_low:.1f}%, {100 * r.ci_high:.1f}%] over {r.pairs} pairs")

    bad = [r for r in s.rounds if not (r.ci_low > s.threshold)]
    every = "; ".join(text(r) for r in s.rounds)
    if not bad:
        return Check("replication", True, f"every round on fresh instances clears the "
                                          f"threshold ({every})"), False
    straddle = any(not math.isfinite(r.ci_low) or r.ci_high > s.threshold for r in bad)
    return Check("replication", False,
                 f"{'inconclusive: ' if straddle else ''}not every round on fresh instances "
                 f"clears the {100 * s.threshold:g}% threshold ({every})"), straddle
