"""What a decoder layer costs on a device, from the project's cost model, as a function of
an iteration's batch (``llm.steps``).

``layer_cost(spec, model, device)`` costs the fused regions of one decoder layer's step
graph (``llm.graph``) with ``model`` (the roofline of a machine or a calibration: the one
evaluator's op costs, nothing re-derived here) at a ladder of shapes, and keeps

- ``linear_s[T]``: every region but attention with ``T`` rows (``T`` = the iteration's new
  tokens; the GEMMs read the layer's weights once whatever ``T``): evaluated on a doubling
  ladder of ``T`` and interpolated linearly between rungs;
- attention as a roofline of its own: ``max(ctx_s x ctx_sum, pair_s x pair_sum)`` plus a
  fixed part, never below the smallest attention kernel (the device's kernel floor), with ``ctx_s`` the slope of decode attention over its context (reading the
  cache) and ``pair_s`` the slope of prefill attention over its causal query-key pairs;
- the head (final norm, LM head on one token per sequence) by the same ladder over sequences.

``DeviceStep`` adds the layers, the head and the device's per-iteration engine overhead:
a ``StepTime``. ``check_against_graph`` is the differential check: the fitted time against
the cost model summed over the whole step graph at one shape.

>>> from placewise.hardware.load import load_machine
>>> from placewise.cost.load import load_cost_model
>>> from placewise.llm.spec import load_spec
>>> m = load_machine("h100-sxm-server")
>>> lc = layer_cost(load_spec("llama-2-7b"), load_cost_model(m, None), "gpu0")
>>> round(lc.time_s(1, 1024, 1024.0, 1) * 1e6)  # one decode token at context 1024, us
166
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import Any

import numpy as np

from placewise.cost.model import CostModel
from placewise.cost.roofline import partition_overhead
from placewise.graph.fuse import fuse
from placewise.graph.ir import Graph, OpKind
from placewise.llm.graph import step_graph
from placewise.llm.spec import DecoderSpec
from placewise.units import DType

__all__ = ["DeviceStep", "LayerCost", "Ops", "check_against_graph", "compute_dtype",
           "layer_cost", "pairs"]

#: rows of the linear-part ladder (doubling; beyond the last rung the time is extrapolated
#: along the last segment)
_LADDER = tuple(2 ** i for i in range(15))  # 1 .. 16384
_CTX = (256, 4096)  # decode attention contexts the slope is read between
_PROMPT = (256, 2048)  # prefill attention lengths the pair slope is read between


def pairs(new: int, past: int) -> float:
    """Query-key pairs of causal attention of ``new`` tokens over ``past`` cached ones."""
    return new * (past + (new + 1) / 2)


def _interp_scalar(xs: tuple[int, ...], ys: tuple[float, ...], x: float) -> float:
    i = min(max(bisect_left(xs, x), 1), len(xs) - 1)
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def _interp_array(xs: tuple[int, ...], ys: tuple[float, ...], x: Any) -> Any:
    slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
    x = np.asarray(x)
    return np.where(x > xs[-1], ys[-1] + slope * (x - xs[-1]), np.interp(x, xs, ys))


def _where(c: Any, a: Any, b: Any) -> Any:
    return a if c else b


@dataclass(frozen=True, slots=True)
class Ops:
    """The arithmetic the step formulas use, for Python numbers (the simulator's scalar
    calls: no numpy overhead) or for arrays (searches, the simulator's fast path): one
    formula, two kinds of operand."""

    maximum: Any
    where: Any
    interp: Any

    @staticmethod
    def of(*values: Any) -> Ops:
        scalar = all(isinstance(v, int | float) for v in values)
        return _SCALAR if scalar else _ARRAY


_SCALAR = Ops(max, _where, _interp_scalar)
_ARRAY = Ops(np.maximum, np.where, _interp_array)


def _graph_cost(graph: Graph, model: CostModel, device: str, dtype: DType, *,
                attention: bool | None = None) -> float:
    """Seconds of ``graph``'s fused regions on ``device``; only the attention regions with
    ``attention=True``, only the others with ``False``."""
    total = 0.0
    for r in fuse(graph).regions:
        ops = [graph.op(n) for n in r.ops]
        has = any(o.kind is OpKind.ATTENTION for o in ops)
        if attention is None or has == attention:
            total += model.region_cost(graph, ops, device, dtype).total_s
    return total


@dataclass(frozen=True, slots=True)
class LayerCost:
    """One decoder layer on one device (see the module docstring)."""

    device: str
    ladder: tuple[int, ...]
    linear_s: tuple[float, ...]
    attn_fixed_s: float
    ctx_s: float
    pair_s: float
    attn_floor_s: float  # the smallest attention (one token over one): the kernel's floor

    def time_s(self, tokens: Any, ctx_sum: Any, pair_sum: Any, seqs: Any) -> Any:
        """Seconds of this layer in an iteration (``llm.steps`` names the arguments);
        numbers or arrays alike."""
        return self.linear_time_s(tokens) + self.attention_time_s(ctx_sum, pair_sum, seqs)

    def linear_time_s(self, tokens: Any) -> Any:
        """The layer without its attention (projections, MLP, norms) over ``tokens`` rows."""
        return Ops.of(tokens).interp(self.ladder, self.linear_s, tokens)

    def attention_time_s(self, ctx_sum: Any, pair_sum: Any, seqs: Any) -> Any:
        """The layer's attention over the iteration's cache (0 without sequences)."""
        op = Ops.of(ctx_sum, pair_sum, seqs)
        attn = op.maximum(self.attn_floor_s, self.attn_fixed_s + op.maximum(
            self.ctx_s * ctx_sum, self.pair_s * pair_sum))
        return op.where(seqs > 0, attn, 0.0)


def compute_dtype(spec: DecoderSpec, model: CostModel, device: str) -> DType:
    """The dtype ``device`` computes ``spec`` in: the model's own; else the other 16-bit
    float (a bf16 model cast to fp16 on a device without bf16, as runtimes do); else fp32
    (a CPU without 16-bit arithmetic: the cost model then reads its float tensors at fp32
    width, which a runtime converting 16-bit weights in registers does not -- pessimistic
    up to 2x there)."""
    have = model.machine.device(device).dtypes
    for dt in (spec.dtype, DType.FP16, DType.BF16):
        if dt in have and (dt is spec.dtype or spec.dtype.bits == 16):
            return dt
    return DType.FP32


def layer_cost(spec: DecoderSpec, model: CostModel, device: str) -> LayerCost:
    """Fit ``LayerCost`` for ``spec`` on ``device`` from ``model`` (about 20 graph costings)."""
    dt = compute_dtype(spec, model, device)
    one = spec.with_(layers=1)
    lin = tuple(_graph_cost(step_graph(one, batch=1, new=t, past=0), model, device, dt,
                            attention=False) for t in _LADDER)

    def attn(batch: int, new: int, past: int) -> float:
        return _graph_cost(step_graph(one, batch=batch, new=new, past=past), model, device, dt,
                           attention=True)

    b = 8  # decode slope read on a batch: one kernel for the batch, as engines run it
    d0, d1 = attn(b, 1, _CTX[0] - 1), attn(b, 1, _CTX[1] - 1)
    ctx_s = max(0.0, (d1 - d0) / (b * (_CTX[1] - _CTX[0])))
    fixed = max(0.0, d0 - ctx_s * b * _CTX[0])
    p0, p1 = attn(1, _PROMPT[0], 0), attn(1, _PROMPT[1], 0)
    pair_s = max(0.0, (p1 - p0) / (pairs(_PROMPT[1], 0) - pairs(_PROMPT[0], 0)))
    return LayerCost(device, _LADDER, lin, fixed, ctx_s, pair_s, attn(1, 1, 0))


def _head_cost(spec: DecoderSpec, model: CostModel, device: str) -> tuple[float, ...]:
    dt = compute_dtype(spec, model, device)
    out = []
    for s in _LADDER:
        g = step_graph(spec, batch=s, new=1, past=0, layers=0, head=True)
        out.append(_graph_cost(g, model, device, dt))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class DeviceStep:
    """The whole model on one device: layers x ``LayerCost`` + the head + one engine launch
    per iteration. A ``StepTime``."""

    spec: DecoderSpec
    layer: LayerCost
    head_s: tuple[float, ...]
    overhead_s: float

    @classmethod
    def fit(cls, spec: DecoderSpec, model: CostModel, device: str) -> DeviceStep:
        over, _ = partition_overhead(model.machine.device(device))
        return cls(spec, layer_cost(spec, model, device), _head_cost(spec, model, device),
                   over)

    def head_time_s(self, seqs: Any) -> Any:
        """Seconds of the final norm and LM head over ``seqs`` sequences' last tokens."""
        op = Ops.of(seqs)
        return op.interp(self.layer.ladder, self.head_s, op.maximum(1, seqs))

    def iteration_s(self, tokens: int, ctx_sum: int, pair_sum: float, seqs: int) -> float:
        return float(self.overhead_s + self.spec.layers * self.layer.time_s(
            tokens, ctx_sum, pair_sum, seqs) + self.head_time_s(seqs))


def check_against_graph(step: DeviceStep, model: CostModel, *, batch: int, new: int,
                        past: int) -> tuple[float, float]:
    """(fitted, direct) seconds of one iteration of ``batch`` sequences alike: the fit
    against the cost model summed over the whole step graph (all layers and the head)."""
    g = step_graph(step.spec, batch=batch, new=new, past=past, head=True)
    dev = step.layer.device
    direct = _graph_cost(g, model, dev, compute_dtype(step.spec, model, dev)) + step.overhead_s
    fitted = step.iteration_s(batch * new, batch * (past + new), batch * pairs(new, past),
                              batch)
    return fitted, direct
