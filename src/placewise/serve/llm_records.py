"""The records of LLM serving (``placewise.serve.llm``): the batching policy, every
iteration of a run, and a run's result with its tails and goodput. The real engine
(``serve.llm_real``) fills the same records, so its runs and the simulator's compare one
to one."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from placewise.errors import InputError
from placewise.serve.sim import quantile_ci

__all__ = ["LLMIterations", "LLMPolicy", "LLMServeResult"]


@dataclass(frozen=True, slots=True)
class LLMPolicy:
    """How iterations are formed (``serve.llm``'s module docstring): ``kv_capacity_tokens`` of cache in
    blocks of ``block_tokens``; at most ``max_seqs`` sequences and ``max_batch_tokens`` new
    tokens in an iteration (a batch of decodes only may exceed the latter, up to
    ``max_seqs``); Sarathi's ``chunked_prefill`` or vLLM v0's prefill-first iterations;
    ``preemption`` by recomputation. ``padded``: the engine pads every batch to its longest
    sequence, as a runtime with one dense cache tensor per batch does (vLLM's paged
    attention does not): iterations are priced at the padded batch, scheduled on the real
    one (``serve.llm``'s module docstring); not modelled with ``chunked_prefill``."""

    kv_capacity_tokens: int
    max_seqs: int = 256
    max_batch_tokens: int = 2048
    chunked_prefill: bool = True
    block_tokens: int = 16
    preemption: Literal["recompute"] = "recompute"
    padded: bool = False

    def __post_init__(self) -> None:
        for name in ("kv_capacity_tokens", "max_seqs", "max_batch_tokens", "block_tokens"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InputError(f"must be an integer >= 1, got {v!r}", place=name)
        if self.kv_capacity_tokens < self.block_tokens:
            raise InputError(f"{self.kv_capacity_tokens} tokens hold no block of "
                             f"{self.block_tokens}", place="kv_capacity_tokens")
        if self.preemption != "recompute":
            raise InputError(f"only 'recompute' is modelled, got {self.preemption!r}",
                             place="preemption")
        if not isinstance(self.padded, bool):
            raise InputError(f"must be a bool, got {self.padded!r}", place="padded")
        if self.padded and self.chunked_prefill:
            raise InputError("padding is modelled for whole prefills only (a padded batch of "
                             "decodes and prefill chunks is not): give chunked_prefill=False",
                             place="padded")

    @property
    def kv_capacity_blocks(self) -> int:
        return self.kv_capacity_tokens // self.block_tokens


@dataclass(frozen=True, slots=True)
class LLMIterations:
    """Every iteration of a run, in order: start and duration, new tokens (of which
    prefill), sequences, the step time's ``ctx_sum`` and ``pair_sum``, KV blocks in use
    during it, output tokens it produced. Under a ``padded`` policy, ``tokens``,
    ``prefill_tokens``, ``ctx_sum`` and ``pair_sum`` are the padded figures the step time was
    asked about (what the engine computes), not the real ones."""

    start_s: np.ndarray
    duration_s: np.ndarray
    tokens: np.ndarray
    prefill_tokens: np.ndarray
    seqs: np.ndarray
    ctx_sum: np.ndarray
    pair_sum: np.ndarray
    kv_blocks: np.ndarray
    emitted: np.ndarray


def _tails(x: np.ndarray) -> dict[str, Any]:
    """p50, p90 and p99 of ``x`` with their ~95% intervals (``serve.sim.quantile_ci``, as
    every serving report gives them: ``None`` for an end the samples cannot bound, as the
    top of a p99 of fewer than 100)."""
    out: dict[str, Any] = {"n": len(x), "interval_s": {}}
    for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        mid, lo, hi = quantile_ci(x, q) if len(x) else (math.nan,) * 3
        out[f"{name}_s"] = float(mid) if len(x) else None
        out["interval_s"][name] = [v if math.isfinite(v) else None for v in (lo, hi)]
    return out


@dataclass(frozen=True, slots=True)
class LLMServeResult:
    """One simulated run. Per request, in the order given: its ``arrival_s``,
    ``prompt_tokens``, ``output_tokens``; ``admitted_s`` (first admission), ``first_token_s``
    and ``finish_s`` (NaN when rejected), ``preempted`` (times), ``tokens_out`` (output
    tokens produced), ``rejected_mask``. Over the run: ``iterations``, ``busy_s`` (their
    total time), the peak KV cache in use (``peak_kv_tokens`` cached, ``peak_kv_blocks``
    allocated, of ``kv_capacity_blocks``) and, when recorded, ``trace``."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    admitted_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    preempted: np.ndarray
    tokens_out: np.ndarray
    rejected_mask: np.ndarray
    iterations: int
    busy_s: float
    peak_kv_tokens: int
    peak_kv_blocks: int
    kv_capacity_blocks: int
    trace: LLMIterations | None = None

    @property
    def submitted(self) -> int:
        return len(self.arrival_s)

    @property
    def completed_mask(self) -> np.ndarray:
        return np.isfinite(self.finish_s)

    @property
    def completed(self) -> int:
        return int(self.completed_mask.sum())

    @property
    def rejected(self) -> int:
        return int(self.rejected_mask.sum())

    @property
    def preemptions(self) -> int:
        return int(self.preempted.sum())

    def conserved(self) -> bool:
        return self.completed + self.rejected == self.submitted

    @property
    def span_s(self) -> float:
        """From the first arrival to the last finish (0 when nothing completed)."""
        if not self.completed:
            return 0.0
        return float(np.max(self.finish_s[self.completed_mask]) - np.min(self.arrival_s))

    @property
    def ttft_s(self) -> np.ndarray:
        """Time to first token of each completed request (order given)."""
        m = self.completed_mask
        return self.first_token_s[m] - self.arrival_s[m]

    @property
    def tpot_s(self) -> np.ndarray:
        """Time per output token after the first, of each completed request of 2+ tokens."""
        m = self.completed_mask & (self.output_tokens > 1)
        return (self.finish_s[m] - self.first_token_s[m]) / (self.output_tokens[m] - 1)

    @property
    def e2e_s(self) -> np.ndarray:
        m = self.completed_mask
        return self.finish_s[m] - self.arrival_s[m]

    @property
    def output_tokens_per_s(self) -> float:
        span = self.span_s
        return float(self.tokens_out.sum()) / span if span > 0 else 0.0

    @property
    def requests_per_s(self) -> float:
        span = self.span_s
        return self.completed / span if span > 0 else 0.0

    def goodput(self, ttft_slo_s: float, tpot_slo_s: float) -> float:
        """Completed requests per second of span whose TTFT is within ``ttft_slo_s`` and
        TPOT within ``tpot_slo_s`` (a one-token output has no TPOT and meets it)."""
        span = self.span_s
        if span <= 0:
            return 0.0
        m = self.completed_mask
        ttft = self.first_token_s - self.arrival_s
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = (self.finish_s - self.first_token_s) / (self.output_tokens - 1)
        ok = m & (ttft <= ttft_slo_s) & ((self.output_tokens == 1) | (tpot <= tpot_slo_s))
        return int(ok.sum()) / span

    def summary(self, *, ttft_slo_s: float | None = None, tpot_slo_s: float | None = None
                ) -> dict[str, Any]:
        """The run's figures as a JSON-ready dict (goodput when both objectives are given)."""
        out: dict[str, Any] = {
            "submitted": self.submitted, "completed": self.completed,
            "rejected": self.rejected, "preemptions": self.preemptions,
            "iterations": self.iterations, "span_s": self.span_s, "busy_s": self.busy_s,
            "output_tokens_per_s": self.output_tokens_per_s,
            "requests_per_s": self.requests_per_s, "peak_kv_tokens": self.peak_kv_tokens,
            "peak_kv_blocks": self.peak_kv_blocks,
            "kv_capacity_blocks": self.kv_capacity_blocks,
            "ttft": _tails(self.ttft_s), "tpot": _tails(self.tpot_s), "e2e": _tails(self.e2e_s),
        }
        if ttft_slo_s is not None and tpot_slo_s is not None:
            out["goodput_rps"] = self.goodput(ttft_slo_s, tpot_slo_s)
            out["ttft_slo_s"], out["tpot_slo_s"] = ttft_slo_s, tpot_slo_s
        return out
