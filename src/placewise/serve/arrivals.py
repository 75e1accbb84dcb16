"""Arrival processes: open-loop Poisson, and bursty gamma inter-arrivals.

Both return the arrival times (seconds from 0, increasing) of ``n`` requests, drawn from
``numpy.random.default_rng(seed)``: the same arguments give the same times.

>>> t = poisson_arrivals(1000.0, 5, seed=1)
>>> len(t), bool((t[1:] > t[:-1]).all())
(5, True)
>>> g = gamma_arrivals(1000.0, 3.0, 100_000, seed=1)
>>> round(float(g[-1] / len(g)) * 1000, 1)  # mean inter-arrival: 1 ms
1.0
"""

from __future__ import annotations

import math

import numpy as np

from placewise.errors import InputError

__all__ = ["gamma_arrivals", "poisson_arrivals"]


def _check(rate_per_s: float, n: int) -> None:
    if not (isinstance(rate_per_s, int | float) and math.isfinite(rate_per_s)
            and rate_per_s > 0):
        raise InputError(f"the arrival rate must be a finite number > 0, got {rate_per_s!r}",
                         place="--rate")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InputError(f"the number of requests must be a positive integer, got {n!r}",
                         place="--requests")


def poisson_arrivals(rate_per_s: float, n: int, *, seed: int = 0) -> np.ndarray:
    """``n`` Poisson arrivals at ``rate_per_s`` (exponential inter-arrival times)."""
    _check(rate_per_s, n)
    rng = np.random.default_rng(seed)
    return np.cumsum(rng.exponential(1.0 / rate_per_s, n))


def gamma_arrivals(rate_per_s: float, cv: float, n: int, *, seed: int = 0) -> np.ndarray:
    """``n`` arrivals whose inter-arrival times are gamma distributed with mean
    ``1 / rate_per_s`` and coefficient of variation ``cv`` (``cv = 1``: Poisson; larger:
    burstier). Shape ``1 / cv**2``, scale ``cv**2 / rate_per_s``."""
    _check(rate_per_s, n)
    if not (isinstance(cv, int | float) and math.isfinite(cv) and cv > 0):
        raise InputError(f"the coefficient of variation must be a finite number > 0, got "
                         f"{cv!r}", place="--cv")
    rng = np.random.default_rng(seed)
    shape = 1.0 / (cv * cv)
    return np.cumsum(rng.gamma(shape, 1.0 / (shape * rate_per_s), n))
