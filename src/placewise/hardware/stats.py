"""Measured figures as a probe records them: the median, the sample count, the spread, and
what was measured; ``source`` renders the "measured by placewise hw probe" text a spec
keeps beside the number.

>>> st = stat_of([1.0, 2.0, 3.0], "three samples")
>>> st.value, st.count
(2.0, 3)
>>> st.source("2026-01-01").startswith("measured by placewise hw probe 2026-01-01")
True
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["PROBE_SOURCE_PREFIX", "Stat", "fit_latency_bandwidth", "quantiles", "stat_of"]

PROBE_SOURCE_PREFIX = "measured by placewise hw probe"


@dataclass(frozen=True, slots=True)
class Stat:
    """A measured figure: the median, how many samples, their spread, what was measured."""

    value: float
    count: int
    spread: float
    what: str

    def source(self, date: str) -> str:
        return (f"{PROBE_SOURCE_PREFIX} {date} (median of {self.count}, spread "
                f"{self.spread * 100:.1f}%): {self.what}")


def quantiles(samples: Sequence[float]) -> tuple[float, float, float]:
    """(p10, median, p90) of ``samples`` (linear interpolation; one sample: itself thrice):
    the one summary of timing samples (probe figures, profiles, imported profiles).

    >>> quantiles([1.0, 2.0, 3.0, 4.0, 5.0])
    (1.4, 3.0, 4.6)
    """
    if not len(samples):
        raise ValueError("no samples")
    a = np.asarray(samples, dtype=float)
    p10, p90 = np.quantile(a, [0.1, 0.9])
    return float(p10), float(np.median(a)), float(p90)


def stat_of(values: Sequence[float], what: str) -> Stat:
    """Median and spread, (p90 - p10) / median: robust to the odd descheduled sample."""
    p10, med, p90 = quantiles(values)
    spread = (p90 - p10) / med if len(values) > 1 and med > 0 else 0.0
    return Stat(med, len(values), spread, what)


def fit_latency_bandwidth(results: Sequence[tuple[int, Sequence[float]]], what: str
                          ) -> tuple[Stat, Stat]:
    """(latency, bandwidth) of one-way copies timed at several sizes (``results``: bytes and
    seconds per copy): the latency is the time of the smallest copy, the bandwidth the slope
    of (time - that latency) against bytes, fitted through the origin over the larger sizes;
    its spread is that of the largest size's rates.

    >>> lat, bw = fit_latency_bandwidth([(4, [1e-5] * 3), (10**6, [1.1e-4] * 3),
    ...                                  (10**7, [1.01e-3] * 3)], "copies")
    >>> round(lat.value * 1e6, 3), round(bw.value / 1e9, 2)
    (10.0, 10.0)
    """
    ordered = sorted(results, key=lambda r: r[0])
    small_size, small = ordered[0]
    latency = stat_of(list(small), f"{what}: time of a {small_size}-byte copy")
    t0 = latency.value
    pts = [(size, statistics.median(s) - t0) for size, s in ordered[1:]]
    num = sum(size * max(y, 1e-12) for size, y in pts)
    den = sum(float(size) * size for size, _ in pts)
    largest, samples = ordered[-1]
    spread_st = stat_of([largest / max(s - t0, 1e-12) for s in samples], "")
    sizes = ",".join(str(size) for size, _ in pts)
    return latency, Stat(den / num, spread_st.count, spread_st.spread,
                         f"{what}: bandwidth fitted over sizes {sizes} bytes")
