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

from typing import Protocol, runtime_checkable

__all__ = ["StepTime"]


@runtime_checkable
class StepTime(Protocol):
    """Seconds of one iteration of the model over a batch (see the module docstring)."""

    def iteration_s(self, tokens: int, ctx_sum: int, pair_sum: float, seqs: int) -> float:
        ...
