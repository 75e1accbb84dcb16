"""What one iteration of a decoder costs: the protocol the LLM serving simulator reads.

One *iteration* runs the model once over a batch of sequences; sequence ``i`` brings
``n_i`` new tokens (its whole prompt or a chunk of it in prefill, 1 in decode) and attends
over a cache of ``p_i`` tokens already there. Its cost depends on

- ``tokens``   = sum n_i: the rows of every projection and MLP GEMM (weights read once
  per iteration whatever the batch: the roofline knee between weight-bound decode and
  compute-bound prefill lies in this term);
- ``ctx_sum``  = sum (p_i + n_i): cache read by attention (bytes per token of context);
- ``pair_sum`` = sum n_i * (p_i + (n_i + 1) / 2): query-key pairs of causal attention;
- ``seqs``     = the number of sequences (per-sequence launches, sampling).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from placewise.errors import InputError
from placewise.records import dataclass_record

__all__ = ["FEATURES", "MeasuredStep", "StepSample", "StepTime", "fit_step"]


@runtime_checkable
class StepTime(Protocol):
    """Seconds of one iteration of the model over a batch (see the module docstring)."""

    def iteration_s(self, tokens: int, ctx_sum: int, pair_sum: float, seqs: int) -> float:
        ...


#: what a measured iteration's time is fitted on (``MeasuredStep``)
FEATURES = ("fixed", "tokens", "ctx_sum", "pair_sum", "seqs")


@dataclass(frozen=True, slots=True)
class StepSample:
    """One measured iteration: its batch (module docstring) and the seconds it took."""

    tokens: int
    ctx_sum: int
    pair_sum: float
    seqs: int
    seconds: float

    def features(self) -> list[float]:
        return [1.0, float(self.tokens), float(self.ctx_sum), float(self.pair_sum),
                float(self.seqs)]


@dataclass_record
@dataclass(frozen=True, slots=True)
class MeasuredStep:
    """A ``StepTime`` fitted to iterations measured on the target (``fit_step``): seconds
    = sum of ``coef_s`` x ``FEATURES``, every coefficient >= 0; ``rel_rms`` is the fit's
    relative root-mean-square residual over its ``samples``."""

    coef_s: tuple[float, float, float, float, float]
    rel_rms: float
    samples: int

    def iteration_s(self, tokens: int, ctx_sum: int, pair_sum: float, seqs: int) -> float:
        a, b, c, d, e = self.coef_s
        return a + b * tokens + c * ctx_sum + d * pair_sum + e * seqs

    def iteration_s_many(self, tokens: np.ndarray, ctx_sum: np.ndarray, pair_sum: np.ndarray,
                         seqs: np.ndarray) -> np.ndarray:
        a, b, c, d, e = self.coef_s
        return a + b * tokens + c * ctx_sum + d * pair_sum + e * seqs


def fit_step(samples: Sequence[StepSample]) -> MeasuredStep:
    """Non-negative least squares in relative error (each sample weighted by 1 / its time,
    so a 2 ms decode counts as much as a 2 s prefill), exact over every subset of the five
    features.

    >>> pts = [StepSample(t, t, t, 1, 1e-3 + 2e-5 * t) for t in (1, 8, 64, 512)]
    >>> [round(c, 6) for c in fit_step(pts).coef_s]
    [0.001, 2e-05, 0.0, 0.0, 0.0]
    """
    if len(samples) < 2:
        raise InputError(f"a step fit needs at least 2 measured iterations, got {len(samples)}")
    if any(not s.seconds > 0 for s in samples):
        raise InputError("a measured iteration took no time", place="step samples")
    x = np.asarray([s.features() for s in samples])
    y = np.asarray([s.seconds for s in samples])
    w = 1.0 / y
    best: tuple[float, np.ndarray] = (np.inf, np.zeros(5))
    for k in range(1, 6):
        for cols in itertools.combinations(range(5), k):
            sub = x[:, cols] * w[:, None]
            coef, *_ = np.linalg.lstsq(sub, y * w, rcond=None)
            if (coef < 0).any():
                continue
            full = np.zeros(5)
            full[list(cols)] = coef
            err = float(np.sum(((x @ full) - y) ** 2 * w ** 2))
            if err < best[0] - 1e-18:
                best = (err, full)
    full = best[1]
    rel = float(np.sqrt(np.mean(((x @ full) / y - 1.0) ** 2)))
    return MeasuredStep(tuple(float(c) for c in full), rel, len(samples))  # type: ignore[arg-type]
