"""The analytic cost model: roofline over per-dtype peaks and memory bandwidth, with
shape-dependent efficiency, launch overhead, transfers and conversions.

This is the model for machines that are not here (the presets). Every number it returns
is derived from the machine spec and the op's real shape; the assumptions it used (peak,
efficiency, bytes, bandwidth, launches) travel with each ``Cost``.

How an op's time is built (one kernel unless said otherwise):

- **compute** = flops / (peak[dtype] x efficiency). Contractions (matmul, linear, gemm,
  conv, attention, recurrent) get a shape-dependent efficiency: on GPUs tile and wave
  quantization over ``compute_units`` (128x128 output tiles; 133 tiles on 132 SMs take two
  waves), padding of partial tiles, and a small-K penalty; on CPUs the output is split in
  64x64 blocks over the cores (too few blocks leave cores idle), the contiguous dim is padded
  to the SIMD width, and small M / K pay a fixed per-block overhead. A grouped or
  depthwise convolution (``group > 1``) is a small contraction per channel group: it gets
  the better of that per-group GEMM's efficiency and the *assumed* efficiency of a direct
  per-channel kernel (``_DIRECT_CONV_EFF``: a quarter of peak on GPUs, a third on CPUs), so
  a depthwise conv is memory-bound on its input, weight and output bytes instead of being
  priced as 128x128 tiles holding one output channel each. Other ops run their
  flops at a fixed fraction of peak (vector units, not matrix units).
- **memory** = bytes / (bandwidth x achievable fraction), counting only the part that does
  not overlap with compute (``max(0, memory - compute)``). Bytes are those of the
  representation the op uses: floating-point params and activations held in the op's
  precision (int8 moves a quarter of fp32's bytes, int4 an eighth), integer index tensors
  unchanged. Irregular ops (gather, embedding, scatter, topk, argmax, cumsum) have their
  own, lower, fraction. Too few elements to occupy the device lowers it too.
- **launch** = the device's launch overhead per kernel (recurrent ops launch one kernel
  per time step). Views (reshape-like ops that move no bytes) cost nothing, not even a
  launch. A fused region pays one launch and skips its internal tensors' traffic.

- **partition** (on transfers) = half of the sender's and half of the receiver's
  per-partition cost (``partition_overhead``: the spec's ``partition_overhead_s``, else the
  stated default of the device kind, ``DEFAULT_PARTITION_S``): a crossing ends one compiled
  engine/session and starts another, so a partition entered and left once pays its own
  launch and synchronisation in full, and a plan is cut only where the cut pays for it.
  It is charged per crossing tensor and per hop: a cut crossed by k tensors pays k halves
  on each side (an upper side where a runtime batches them into one synchronisation).

A device whose spec has an ``efficiency`` block (``placewise.hardware.efficiency``: fitted
to published kernel measurements, each number with its source) is costed by it instead of
the constants above: a contraction covered by one of its curves runs at
``peak_fraction x W / (W + half_work_flops)`` of the peak (W the flops of one kernel step;
the curve's half-work is the kernel's fixed time, so that kernel pays no separate launch),
every other kernel pays the block's ``kernel_s`` instead of ``launch_overhead_s``, and
memory-bound kernels reach its ``memory_fraction`` of the bandwidth. What the block leaves
out keeps the built-in rule; a spec without it (``local`` included) is costed as before.

A local device (one with a runtime ``backend``) has int8 kernels only for
``graph.ir.INT8_KINDS``: an int8 question about any other kind there is ``UnsupportedError``
(``local_kernel_gap``), so search never plans a kernel the executor lacks.

Intervals are an *assumption*, not a measurement: ``[0.6x, 1.7x]`` the central estimate
for counted ops (the typical spread of achieved vs. modelled kernel time for tuned
libraries; the upper side is wider because real kernels miss the roofline more often than
they beat it) and ``[0.3x, 3x]`` for ops whose kind has no counting rule. Each ``Cost``
names its interval in ``assumptions``.

>>> from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
>>> from placewise.hardware.load import load_machine
>>> x = Tensor("x", (4096, 4096), DType.FP32, role=Role.INPUT)
>>> w = Tensor("w", (4096, 4096), DType.FP32, role=Role.PARAM)
>>> y = Tensor("y", (4096, 4096), DType.FP32, role=Role.OUTPUT)
>>> g = Graph.build("mm", [x, w, y], [Op("mm", OpKind.MATMUL, ("x", "w"), ("y",))])
>>> model = RooflineModel(load_machine("h100-sxm-server"))
>>> c = model.op_cost(g, g.op("mm"), "gpu0", DType.BF16)
>>> c.bottleneck.value, c.source.value, c.low_s < c.total_s < c.high_s
('compute', 'roofline', True)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import replace as dc_replace
from typing import Any

from placewise.cost.model import (
    Bottleneck,
    Cost,
    NoRuntimeTerms,
    Representation,
    Source,
    Term,
)
from placewise.errors import UnsupportedError
from placewise.graph.count import count_op, einsum_indices
from placewise.graph.ir import (
    CONTRACTION_KINDS,
    CONTROL_FLOW_KINDS,
    INT8_KINDS,
    Graph,
    Op,
    OpKind,
    Tensor,
)
from placewise.hardware.efficiency import ContractionCurve
from placewise.hardware.spec import Device, DeviceKind, Machine
from placewise.units import DType

__all__ = [
    "DEFAULT_PARTITION_S",
    "INTERVAL_COUNTED",
    "INTERVAL_UNCOUNTED",
    "IRREGULAR_KINDS",
    "GemmDims",
    "OpWork",
    "RooflineModel",
    "contraction_efficiency",
    "fitted_curve",
    "gemm_dims",
    "kernel_time_s",
    "local_kernel_gap",
    "op_efficiency",
    "op_work",
    "partition_overhead",
    "region_internal_tensors",
    "scaled_bytes",
]

#: assumed relative interval of a roofline estimate for ops with a counting rule
INTERVAL_COUNTED = (0.6, 1.7)
#: assumed relative interval for ops whose kind has no counting rule (bytes-only guess)
INTERVAL_UNCOUNTED = (0.3, 3.0)
#: transfers and conversions are simple streams; the interval is narrower
INTERVAL_STREAM = (0.8, 1.5)

#: ops whose memory access is data-dependent: they reach a lower fraction of bandwidth
IRREGULAR_KINDS = frozenset({OpKind.GATHER, OpKind.EMBEDDING, OpKind.SCATTER, OpKind.TOPK,
                             OpKind.ARGMAX, OpKind.CUMSUM})
# kinds whose ``group`` attribute splits them into per-channel-group contractions
_GROUPED_KINDS = frozenset({OpKind.CONV, OpKind.CONV_TRANSPOSE})
# kinds that never launch a kernel: pure metadata
_FREE_KINDS = frozenset({OpKind.SHAPE, OpKind.CONSTANT})

# ---- efficiency constants (documented in the module docstring) ---------------------------
_GPU_TILE = 128  # output tile edge of a tensor-core GEMM kernel
_GPU_BASE_EFF = 0.80  # best achieved fraction of peak on large GEMMs
_GPU_K_HALF = 64  # K at which the prologue/epilogue halves the efficiency
_CPU_BLOCK = 64  # output block edge each core works on
_CPU_BASE_EFF = 0.70
_CPU_K_HALF = 16
_CPU_M_HALF = 4
_CPU_SIMD_LANES = 8  # fp32 lanes of one AVX2 register (a conservative common width)
_VECTOR_EFF = 0.5  # non-contraction flops: vector units at half of peak
_MEM_FRACTION = {True: 0.80, False: 0.60}  # achievable bandwidth fraction: GPU-like, CPU
_IRREGULAR_FRACTION = 0.30  # fraction of the regular fraction reached by irregular ops
_LAYOUT_FRACTION = 0.5  # strided (transposing) copies reach half of a plain copy
_GPU_ELEMS_PER_UNIT = 2048  # elements per SM needed to saturate bandwidth
_CPU_ELEMS_PER_CORE = 16384  # elements per core below which splitting does not pay


@dataclass(frozen=True, slots=True)
class GemmDims:
    """A contraction seen as ``batch`` independent ``[M, K] x [K, N]`` products, run as
    ``steps`` dependent kernels (recurrent ops) of that size each."""

    batch: int
    m: int
    n: int
    k: int
    steps: int = 1


@dataclass(frozen=True, slots=True)
class OpWork:
    """What an op does, in the representation of the precision it runs at."""

    flops: float
    bytes: int  # bytes read + written, at the op's precision
    counted: bool
    is_view: bool
    kernels: int


def _pairs(obj: Any) -> Iterable[tuple[Any, Any]]:
    if isinstance(obj, Mapping):
        return obj.items()
    return tuple(obj or ())


def _as_dtype(x: Any) -> DType:
    return x if isinstance(x, DType) else DType.parse(str(x))


def scaled_bytes(bytes_by_dtype: Any, dtype: DType, fallback_bytes: int = 0) -> int:
    """Bytes of the same traffic held at precision ``dtype``: floating-point bytes scale by
    width (int4 packed), integer/bool bytes (indices, masks) are unchanged.

    >>> scaled_bytes({DType.FP32: 400, DType.INT64: 80}, DType.INT8)
    180
    >>> scaled_bytes({DType.FP32: 400}, DType.INT4)
    50
    """
    total = 0.0
    seen = False
    for key, b in _pairs(bytes_by_dtype):
        seen = True
        src = _as_dtype(key)
        if src.is_float:
            total += b * dtype.bits / src.bits
        else:
            total += b
    return math.ceil(total) if seen else int(fallback_bytes)


def _numel(shape: Iterable[int]) -> int:
    return math.prod(int(d) for d in shape)


def _attr_int(op: Op, name: str, default: int) -> int:
    v = op.attrs.get(name, default)
    return int(v) if isinstance(v, int | float) else default


def gemm_dims(graph: Graph, op: Op) -> GemmDims | None:
    """The GEMM view of a contraction (None for other kinds or unusable shapes).

    >>> from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
    >>> t = [Tensor("x", (8, 16, 32), DType.FP32, role=Role.INPUT),
    ...      Tensor("w", (64, 32), DType.FP32, role=Role.PARAM),
    ...      Tensor("y", (8, 16, 64), DType.FP32, role=Role.OUTPUT)]
    >>> g = Graph.build("l", t, [Op("l", OpKind.LINEAR, ("x", "w"), ("y",))])
    >>> gemm_dims(g, g.op("l"))
    GemmDims(batch=1, m=128, n=64, k=32, steps=1)
    """
    if op.kind not in CONTRACTION_KINDS:
        return None
    if not graph.owns(op):
        return _gemm_dims(graph, op)
    memo = graph.analysis("gemm_dims")  # asked per device and precision costed
    if op.name not in memo:
        memo[op.name] = _gemm_dims(graph, op)
    got: GemmDims | None = memo[op.name]
    return got


def _gemm_dims(graph: Graph, op: Op) -> GemmDims | None:
    ins = graph.in_tensors(op)
    outs = graph.out_tensors(op)
    try:
        if op.kind is OpKind.LINEAR and len(ins) >= 2:
            x, w = ins[0].concrete_shape, ins[1].concrete_shape
            n = w[0] if len(w) == 2 else 1
            return GemmDims(1, _numel(x[:-1]) if len(x) > 1 else 1, n, x[-1] if x else 1)
        if op.kind is OpKind.GEMM and len(ins) >= 2:
            a, b = ins[0].concrete_shape, ins[1].concrete_shape
            m, k = (a[1], a[0]) if op.attrs.get("trans_a", False) else (a[0], a[-1])
            n = b[0] if op.attrs.get("trans_b", False) else b[-1]
            return GemmDims(1, m, n, k)
        if op.kind is OpKind.MATMUL and len(ins) >= 2:
            a, b = ins[0].concrete_shape, ins[1].concrete_shape
            m = a[-2] if len(a) >= 2 else 1
            k = a[-1] if a else 1
            n = b[-1] if len(b) >= 2 else 1
            y = outs[0].concrete_shape if outs else ()
            core = (1 if len(a) < 2 else m) * (1 if len(b) < 2 else n)
            batch = max(1, _numel(y) // max(1, core)) if y else 1
            return GemmDims(batch, m, n, k)
        if op.kind in (OpKind.CONV, OpKind.CONV_TRANSPOSE) and len(ins) >= 2 and outs:
            x, w = ins[0].concrete_shape, ins[1].concrete_shape
            y = outs[0].concrete_shape
            group = _attr_int(op, "group", 1)
            spatial_k = _numel(w[2:])
            if op.kind is OpKind.CONV:
                # implicit GEMM per group: [N*out_spatial, Cin/g*k] x [Cin/g*k, Cout/g]
                return GemmDims(group, y[0] * _numel(y[2:]), max(1, y[1] // group),
                                max(1, w[1] * spatial_k))
            # transposed: [N*in_spatial, Cin/g] x [Cin/g, Cout/g*k]
            return GemmDims(group, x[0] * _numel(x[2:]), max(1, w[1] * spatial_k),
                            max(1, x[1] // group))
        if op.kind is OpKind.ATTENTION and len(ins) >= 3:
            q, k_, v = (t.concrete_shape for t in ins[:3])
            return GemmDims(_numel(q[:-2]), q[-2], k_[-2], q[-1] + v[-1])
        if op.kind is OpKind.EINSUM and len(ins) == 2:
            return _einsum_dims(str(op.attrs.get("equation", "")),
                                [t.concrete_shape for t in ins])
        if op.kind in (OpKind.LSTM, OpKind.GRU) and len(ins) >= 3:
            x = ins[0].concrete_shape
            hidden = _attr_int(op, "hidden_size", 0) or ins[2].concrete_shape[-1]
            layout = _attr_int(op, "layout", 0)
            seq, batch = (x[1], x[0]) if layout == 1 else (x[0], x[1])
            gates = 4 if op.kind is OpKind.LSTM else 3
            dirs = 2 if op.attrs.get("direction", "forward") == "bidirectional" else 1
            return GemmDims(dirs, batch, gates * hidden, x[-1] + hidden, steps=seq)
    except (IndexError, TypeError, ValueError):
        return None
    return None


def _einsum_dims(equation: str, shapes: list[tuple[int, ...]]) -> GemmDims:
    """A two-operand einsum as a batched GEMM: indices in both operands and the output
    are the batch, in one operand and the output M (first) or N (second), the rest
    (contracted, or summed out of one operand) K.

    >>> _einsum_dims("bhqd,bhkd->bhqk", [(2, 4, 8, 16), (2, 4, 8, 16)])
    GemmDims(batch=8, m=8, n=8, k=16, steps=1)
    """
    (a, b), out, sizes = einsum_indices(equation, shapes)
    dims = {"batch": 1, "m": 1, "n": 1, "k": 1}
    for x, size in sizes.items():
        where = ("batch" if x in a and x in b else "m" if x in a else "n") if x in out \
            else "k"
        dims[where] *= size
    return GemmDims(dims["batch"], dims["m"], dims["n"], dims["k"])


def _fallback_bytes(graph: Graph, op: Op) -> dict[DType, int]:
    out: dict[DType, int] = {}
    for t in [*graph.in_tensors(op), *graph.out_tensors(op)]:
        out[t.dtype] = out.get(t.dtype, 0) + t.nbytes
    return out


def op_work(graph: Graph, op: Op, dtype: DType) -> OpWork:
    """FLOPs and bytes of ``op`` at precision ``dtype`` (from ``graph.count``); kept with
    the graph (``Graph.analysis``): costing asks for it once per device."""
    if not graph.owns(op):
        return _op_work(graph, op, dtype)
    memo = graph.analysis("op_work")
    key = (op.name, dtype)
    got: OpWork | None = memo.get(key)
    if got is None:
        got = memo[key] = _op_work(graph, op, dtype)
    return got


def _op_work(graph: Graph, op: Op, dtype: DType) -> OpWork:
    c = count_op(graph, op)
    if c.is_view:
        return OpWork(0.0, 0, bool(c.counted), True, 0)
    bbd: Any = getattr(c, "bytes_by_dtype", None)
    moved = int(getattr(c, "bytes_moved", 0) or (c.bytes_read + c.bytes_written))
    if not c.counted and not list(_pairs(bbd)):
        bbd = _fallback_bytes(graph, op)
    nbytes = scaled_bytes(bbd, dtype, moved)
    dims = gemm_dims(graph, op)
    kernels = dims.steps * (dims.batch if op.kind in (OpKind.LSTM, OpKind.GRU) else 1) \
        if dims is not None else 1
    if op.kind in _FREE_KINDS:
        kernels = 0
    if op.kind in CONTROL_FLOW_KINDS:  # every kernel of its subgraph, every iteration
        kernels = _attr_int(op, "body_kernels", 1) * _attr_int(op, "trips", 1)
    return OpWork(float(c.flops), nbytes, bool(c.counted), False, max(0, kernels))


def control_flow_interval(op: Op, cost: Cost) -> Cost:
    """The cost of a kept control-flow op (``OpKind.IF``/``LOOP``/``SCAN``) with its interval
    and what it assumed: an ``If`` of unknown condition is costed as its costlier branch
    (the central estimate) and its interval reaches down to the other (``low_share`` of
    the work); a trip count that is a bound is said so."""
    share = op.attrs.get("low_share", 1.0)
    low = cost.low_s * float(share) if isinstance(share, int | float) else cost.low_s
    notes = dict(cost.assumptions)
    if op.kind is OpKind.IF and "branch" in op.attrs:
        notes["control_flow"] = (f"condition unknown: costed as the costlier "
                                 f"({op.attrs['branch']}) branch; the interval covers both")
    else:
        notes["control_flow"] = (f"{op.attrs.get('trips', 1)} iterations "
                                 f"({op.attrs.get('trips_bound', 'exact')})")
    return dc_replace(cost, low_s=low, assumptions=tuple(sorted(notes.items())))


def _is_gpu_like(dev: Device) -> bool:
    return dev.kind is not DeviceKind.CPU


def fitted_curve(dev: Device, kind: OpKind, dtype: DType) -> ContractionCurve | None:
    """The device's fitted contraction curve for ``kind`` at ``dtype`` (its spec's
    ``efficiency`` block), or None: the built-in tile rule applies."""
    if dev.efficiency is None:
        return None
    return dev.efficiency.curve_for(kind, dtype)


def kernel_time_s(dev: Device) -> tuple[float, str]:
    """(seconds, source) of one kernel's fixed time on ``dev`` inside an op or fused
    region: the efficiency block's ``kernel_s`` where given, else ``launch_overhead_s``.

    >>> from placewise.hardware.load import load_machine
    >>> kernel_time_s(load_machine("a100-pcie-server").device("cpu"))[0]
    2e-06
    """
    eff = dev.efficiency
    if eff is not None and eff.kernel_s is not None:
        return eff.kernel_s, str(eff.kernel_source)
    return dev.launch_overhead_s, dev.launch_source


def contraction_efficiency(dev: Device, dims: GemmDims, dtype: DType,
                           kind: OpKind = OpKind.MATMUL) -> tuple[float, float]:
    """(efficiency, parallel efficiency) of a GEMM of ``dims`` on ``dev``: the device's
    fitted curve for ``kind`` at ``dtype`` when its spec has one (efficiency against the
    flops of one kernel step), else the built-in tile rule."""
    units = max(1, dev.compute_units)
    curve = fitted_curve(dev, kind, dtype)
    if curve is not None:
        work = 2.0 * dims.batch * dims.m * dims.n * dims.k
        par = 1.0
        if _is_gpu_like(dev):  # the share of units a tiled kernel fills (bottleneck class)
            tiles = dims.batch * math.ceil(dims.m / _GPU_TILE) * math.ceil(dims.n / _GPU_TILE)
            par = tiles / (math.ceil(tiles / units) * units)
        return curve.efficiency(work), par
    if _is_gpu_like(dev):
        tile = _GPU_TILE
        tm, tn = math.ceil(dims.m / tile), math.ceil(dims.n / tile)
        tiles = dims.batch * tm * tn
        waves = math.ceil(tiles / units)
        wave_eff = tiles / (waves * units)
        pad_eff = (dims.m * dims.n) / (tm * tile * tn * tile)
        k_eff = dims.k / (dims.k + _GPU_K_HALF)
        return _GPU_BASE_EFF * wave_eff * pad_eff * k_eff, wave_eff
    block = _CPU_BLOCK
    blocks = dims.batch * math.ceil(dims.m / block) * math.ceil(dims.n / block)
    rounds = math.ceil(blocks / units)
    thread_eff = blocks / (rounds * units)
    lanes = max(1, _CPU_SIMD_LANES * 32 // max(8, dtype.bits))
    simd_eff = dims.n / (math.ceil(dims.n / lanes) * lanes)
    small = (dims.k / (dims.k + _CPU_K_HALF)) * (dims.m / (dims.m + _CPU_M_HALF))
    return _CPU_BASE_EFF * thread_eff * simd_eff * small, thread_eff


#: grouped convolution (``group > 1``): the efficiency (fraction of the dtype's peak) the
#: direct per-channel-group kernel reaches, by device class (GPU-like, CPU). An *assumption*,
#: not a measurement: a depthwise or narrow-group conv has a per-group K of ``Cin/g x kh x
#: kw`` (9 for a 3x3 depthwise) and an N of ``Cout/g`` (1), far too small for tensor-core or
#: register-blocked GEMM tiles; libraries (cuDNN/TensorRT depthwise kernels, MLAS
#: ``MlasConvDepthwise``, oneDNN) run it as a direct convolution over the channels on the
#: vector units, so its flops are cheap and its time is the bytes of input, weights and
#: output at the memory bandwidth. A quarter of peak on GPUs (the CUDA-core rate, no tensor
#: cores: a quarter of Orin's fp16 tensor peak is its fp16 CUDA-core rate) and a third on
#: CPUs (FMA lanes busy, loads and the K=9 reduction not hidden).
_DIRECT_CONV_EFF = {True: 0.25, False: 1 / 3}


#: the rule of a contraction costed by its device's fitted curve (``op_efficiency``)
_CURVE_RULE = "fitted curve"


def _launches(dev: Device, kernels: int, rule: str) -> int:
    """Kernels that pay the fixed per-kernel time: none for a contraction costed by a
    fitted curve (the curve's half-work is that kernel's fixed time)."""
    return 0 if rule == _CURVE_RULE else kernels


def _efficiency_notes(dev: Device, kind: OpKind, dtype: DType, rule: str,
                      kernel_src: str) -> dict[str, float | str]:
    """What ``op_cost`` states of where its efficiency and kernel time came from."""
    notes: dict[str, float | str] = dict(_RULE_NOTES.get(rule, {}))
    if dev.efficiency is None:  # the built-in assumptions, as every cost stated them
        return notes
    curve = fitted_curve(dev, kind, dtype) if rule == _CURVE_RULE else None
    if curve is not None:
        notes["efficiency_rule"] = (f"fitted curve: {curve.peak_fraction:.3g} x W / (W + "
                                    f"{curve.half_work_flops:.3g}) of peak; {curve.source}")
    else:
        notes["kernel_time"] = kernel_src
    if dev.efficiency.memory_fraction is not None:
        notes["memory_fraction_source"] = str(dev.efficiency.memory_source)
    return notes


#: what ``op_cost`` states beside an efficiency rule that is an assumption of its own
_RULE_NOTES: dict[str, dict[str, float | str]] = {
    "direct grouped conv": {
        "efficiency_rule": "grouped/depthwise conv as a direct kernel per channel group: "
                           f"assumed efficiency {_DIRECT_CONV_EFF[True]:.2g} of peak on "
                           f"GPU-like devices, {_DIRECT_CONV_EFF[False]:.2g} on CPUs (tiny "
                           "per-group K and N: no GEMM tiles); memory-bound on its input, "
                           "weight and output bytes"},
}


def op_efficiency(dev: Device, graph: Graph, op: Op, dtype: DType
                  ) -> tuple[float, float, str]:
    """(efficiency, parallel efficiency, rule) of ``op``'s flops on ``dev``: the tiled GEMM
    efficiency of a contraction (``contraction_efficiency``), for a grouped convolution the
    better of its per-group GEMM and the direct per-channel-group kernel
    (``_DIRECT_CONV_EFF``), and ``_VECTOR_EFF`` for every other op.

    >>> from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
    >>> from placewise.hardware.load import load_machine
    >>> t = [Tensor("x", (1, 96, 112, 112), DType.FP32, role=Role.INPUT),
    ...      Tensor("w", (96, 1, 3, 3), DType.FP32, role=Role.PARAM),
    ...      Tensor("y", (1, 96, 112, 112), DType.FP32, role=Role.OUTPUT)]
    >>> g = Graph.build("dw", t, [Op("dw", OpKind.CONV, ("x", "w"), ("y",),
    ...                              attrs={"group": 96})])
    >>> gpu = load_machine("jetson-agx-orin").device("gpu")
    >>> op_efficiency(gpu, g, g.op("dw"), DType.FP32)
    (0.25, 1.0, 'direct grouped conv')
    """
    dims = gemm_dims(graph, op) if op.kind in CONTRACTION_KINDS else None
    if dims is None:
        return _VECTOR_EFF, 1.0, "vector"
    eff, par = contraction_efficiency(dev, dims, dtype, op.kind)
    rule = _CURVE_RULE if fitted_curve(dev, op.kind, dtype) is not None else "tiled gemm"
    if op.kind in _GROUPED_KINDS and dims.batch > 1:
        direct = _DIRECT_CONV_EFF[_is_gpu_like(dev)]
        if direct > eff:
            return direct, 1.0, "direct grouped conv"
    return eff, par, rule


def _memory_fraction(dev: Device, kind: OpKind | None, elems: int) -> float:
    gpu = _is_gpu_like(dev)
    fitted = dev.efficiency.memory_fraction if dev.efficiency is not None else None
    frac = _MEM_FRACTION[gpu] if fitted is None else fitted
    if kind in IRREGULAR_KINDS:
        frac *= _IRREGULAR_FRACTION
    units = max(1, dev.compute_units)
    need = units * (_GPU_ELEMS_PER_UNIT if gpu else _CPU_ELEMS_PER_CORE)
    if units > 1 and elems < need:
        # not enough elements to occupy every unit; a single unit still streams
        frac *= max(1.0 / units, elems / need)
    return frac


@dataclass(frozen=True, slots=True)
class _Parts:
    compute_s: float
    memory_s: float
    launch_s: float
    efficiency: float
    parallel_eff: float
    peak: float
    bandwidth: float
    mem_fraction: float
    nbytes: int
    flops: float
    kernels: int
    counted: bool
    rule: str = "vector"  # how the efficiency was found (``op_efficiency``)


def local_kernel_gap(dev: Device, kind: OpKind, dtype: DType) -> str | None:
    """Why local device ``dev`` has no kernel for op kind ``kind`` in ``dtype`` (None when
    it has one, or when ``dev`` is not a local device: presets describe their own hardware).

    >>> from placewise.schedule.testing import toy_machine
    >>> gpu = toy_machine().device("gpu")
    >>> local_kernel_gap(gpu.model_copy(update={"backend": "onnxruntime"}), OpKind.RELU,
    ...                  DType.INT8)
    'local backends have int8 kernels only for conv, gemm, linear, matmul (onnxruntime dynamic quantization)'
    >>> local_kernel_gap(gpu, OpKind.RELU, DType.INT8) is None
    True
    """
    if dtype is DType.INT8 and dev.backend is not None and kind not in INT8_KINDS \
            and kind is not OpKind.TASK:
        kinds = ", ".join(sorted(k.value for k in INT8_KINDS))
        return f"local backends have int8 kernels only for {kinds} (onnxruntime dynamic " \
               f"quantization)"
    return None


#: per-partition cost (one compiled engine/session launched and synchronised) of a device
#: whose spec gives none (``Device.partition_overhead_s``), by device kind: (seconds, why).
#: Stated defaults, not datasheet figures.
DEFAULT_PARTITION_S: dict[DeviceKind, tuple[float, str]] = {
    DeviceKind.CPU: (14e-6, "default: onnxruntime's per-session.run overhead measured by "
                     "placewise (one-op model, 1 thread, onnxruntime 1.32, x86 guest: "
                     "13.8 us median, benchmarks/results/partition_cost.json)"),
    DeviceKind.GPU: (30e-6, "default, an estimate: a TensorRT engine's enqueue (host time, "
                     "tens of us for a small engine) plus a CUDA stream/event "
                     "synchronisation (5-10 us)"),
    DeviceKind.DLA: (100e-6, "default, an estimate: a DLA loadable's submission (cuDLA / "
                     "TensorRT on DLA) plus its fence synchronisation"),
    DeviceKind.NPU: (50e-6, "default, an estimate: an NPU graph's submission and "
                     "completion wait through its driver"),
    DeviceKind.ACCELERATOR: (50e-6, "default, an estimate: an accelerator graph's "
                             "submission and completion wait"),
}


def partition_overhead(dev: Device) -> tuple[float, str]:
    """(seconds, source) of one partition on ``dev``: its spec's figure, else the stated
    default of its kind (``DEFAULT_PARTITION_S``).

    >>> from placewise.hardware.load import load_machine
    >>> partition_overhead(load_machine("jetson-agx-orin").device("gpu"))[0]
    4e-05
    """
    if dev.partition_overhead_s is not None:
        return dev.partition_overhead_s, str(dev.partition_source)
    return DEFAULT_PARTITION_S[dev.kind]


class RooflineModel(NoRuntimeTerms):
    """The analytic cost model of ``machine`` (see the module docstring for the terms).

    Implements ``placewise.cost.model.CostModel``.
    """

    def __init__(self, machine: Machine) -> None:
        self.machine = machine

    # ---- helpers ---------------------------------------------------------------------
    def _device(self, name: str, what: str) -> Device:
        try:
            return self.machine.device(name)
        except KeyError:
            raise UnsupportedError(f"machine {self.machine.name!r} has no device {name!r} "
                                   f"(asked for {what})") from None

    def _check_supported(self, dev: Device, op: Op, dtype: DType) -> None:
        if not dev.supports(op.kind):
            raise UnsupportedError(f"device {dev.name!r} cannot run {op.where()}: op kind "
                                   f"{op.kind.value!r} is not supported there")
        if dtype not in dev.dtypes:
            raise UnsupportedError(
                f"device {dev.name!r} cannot run {op.where()} ({op.kind.value}) in "
                f"{dtype.value}: supported dtypes are "
                f"{', '.join(d.value for d in dev.dtypes)}")
        gap = local_kernel_gap(dev, op.kind, dtype)
        if gap is not None:
            raise UnsupportedError(f"device {dev.name!r} cannot run {op.where()} "
                                   f"({op.kind.value}) in {dtype.value}: {gap}")

    def parts(self, graph: Graph, op: Op, device: str, dtype: DType) -> _Parts:
        """The roofline components of ``op`` (no launch for views)."""
        dev = self._device(device, op.where())
        work = op_work(graph, op, dtype)
        peak = dev.peak(dtype)
        bw = dev.main_memory.bandwidth_bytes_per_s
        if work.is_view:
            return _Parts(0.0, 0.0, 0.0, 1.0, 1.0, peak, bw, 1.0, 0, 0.0, 0, work.counted)
        eff, par, rule = op_efficiency(dev, graph, op, dtype)
        eff = max(eff, 1e-6)
        # every element read or written is work to spread over the units (a GEMV streams
        # its whole weight even though its output is small)
        elems = sum(t.numel for t in [*graph.in_tensors(op), *graph.out_tensors(op)])
        frac = _memory_fraction(dev, op.kind, elems)
        compute_s = work.flops / (peak * eff) if work.flops > 0 else 0.0
        memory_s = work.bytes / (bw * frac) if work.bytes > 0 else 0.0
        launch_s = _launches(dev, work.kernels, rule) * kernel_time_s(dev)[0]
        return _Parts(compute_s, memory_s, launch_s, eff, par, peak, bw, frac, work.bytes,
                      work.flops, work.kernels, work.counted, rule)

    @staticmethod
    def _cost_from(parts: Iterable[_Parts], *, launches: int, launch_s: float,
                   assumptions: dict[str, float | str], memory_bytes: int,
                   scratch_bytes: int = 0) -> Cost:
        plist = list(parts)
        compute = sum(p.compute_s for p in plist)
        memory = sum(p.memory_s for p in plist)
        launch = launch_s * launches
        counted = all(p.counted for p in plist)
        lo, hi = INTERVAL_COUNTED if counted else INTERVAL_UNCOUNTED
        exposed_memory = max(0.0, memory - compute)
        par = min((p.parallel_eff for p in plist), default=1.0)
        if launch >= max(compute, memory) and launch > 0:
            bottleneck = Bottleneck.LAUNCH
        elif compute >= memory and compute > 0:
            bottleneck = Bottleneck.PARALLELISM if par < 0.5 else Bottleneck.COMPUTE
        elif memory > 0:
            bottleneck = Bottleneck.MEMORY
        else:
            bottleneck = Bottleneck.NONE
        a = dict(assumptions)
        a.update({
            "model": "roofline",
            "interval": f"assumed [{lo}x, {hi}x] of the estimate"
                        + ("" if counted else " (op kind has no counting rule: bytes only)"),
            "interval_rel_low": lo,
            "interval_rel_high": hi,
            "launch_s": launch_s,
            "kernels": float(launches),
            "compute_s": compute,
            "memory_s": memory,
        })
        return Cost.of({Term.COMPUTE: compute, Term.MEMORY: exposed_memory,
                        Term.LAUNCH: launch}, bottleneck=bottleneck, source=Source.ROOFLINE,
                       rel_low=lo, rel_high=hi, assumptions=a, memory_bytes=memory_bytes,
                       buffer_bytes=scratch_bytes)

    # ---- the CostModel protocol ---------------------------------------------------------
    def op_cost(self, graph: Graph, op: Op, device: str, dtype: DType) -> Cost:
        """The cost of ``op`` on ``device`` at precision ``dtype``.

        Raises ``UnsupportedError`` when the device does not run the kind or dtype.
        """
        dev = self._device(device, op.where())
        self._check_supported(dev, op, dtype)
        if op.kind is OpKind.TASK:
            return self._task_cost(graph, op, dev, dtype)
        p = self.parts(graph, op, device, dtype)
        if p.kernels == 0 and p.nbytes == 0 and p.flops == 0:
            return Cost.of({}, bottleneck=Bottleneck.NONE, source=Source.ROOFLINE,
                           assumptions={"model": "roofline",
                                        "note": "view or metadata op: no kernel, no bytes"})
        kernel_s, kernel_src = kernel_time_s(dev)
        cost = self._cost_from(
            [p], launches=_launches(dev, p.kernels, p.rule), launch_s=kernel_s,
            assumptions={"peak_flops_per_s": p.peak, "efficiency": p.efficiency,
                         "parallel_efficiency": p.parallel_eff, "bytes": float(p.nbytes),
                         "flops": p.flops, "bandwidth_bytes_per_s": p.bandwidth,
                         "memory_fraction": p.mem_fraction, "dtype": dtype.value,
                         **_efficiency_notes(dev, op.kind, dtype, p.rule, kernel_src)},
            memory_bytes=p.nbytes, scratch_bytes=op.scratch_bytes)
        return control_flow_interval(op, cost) if op.kind in CONTROL_FLOW_KINDS else cost

    def _task_cost(self, graph: Graph, op: Op, dev: Device, dtype: DType) -> Cost:
        hint = op.hint
        given = hint.time_on(dev.name) if hint is not None else None
        if given is not None:
            return Cost.of({Term.COMPUTE: given}, bottleneck=Bottleneck.COMPUTE,
                           source=Source.GIVEN,
                           assumptions={"model": "given", "given_s": given,
                                        "interval": "given time, taken as exact"},
                           memory_bytes=hint.bytes_moved if hint else 0,
                           buffer_bytes=op.scratch_bytes)
        flops = hint.flops if hint is not None else 0.0
        nbytes = hint.bytes_moved if hint is not None else 0
        peak = dev.peak(dtype)
        bw = dev.main_memory.bandwidth_bytes_per_s
        frac = _MEM_FRACTION[_is_gpu_like(dev)]
        part = _Parts(flops / (peak * _VECTOR_EFF) if flops else 0.0,
                      nbytes / (bw * frac) if nbytes else 0.0, dev.launch_overhead_s,
                      _VECTOR_EFF, 1.0, peak, bw, frac, nbytes, flops, 1, True)
        return self._cost_from([part], launches=1, launch_s=dev.launch_overhead_s,
                               assumptions={"peak_flops_per_s": peak, "efficiency": _VECTOR_EFF,
                                            "bytes": float(nbytes), "flops": flops,
                                            "bandwidth_bytes_per_s": bw,
                                            "memory_fraction": frac, "dtype": dtype.value,
                                            "note": "task without a given time on this "
                                                    "device: roofline of its hint"},
                               memory_bytes=nbytes, scratch_bytes=op.scratch_bytes)

    def region_cost(self, graph: Graph, ops: list[Op], device: str, dtype: DType) -> Cost:
        """A fused region: one launch, and tensors produced and consumed only inside the
        region (and not graph outputs) never touch memory."""
        if not ops:
            return Cost.zero()
        if len(ops) == 1:
            return self.op_cost(graph, ops[0], device, dtype)
        dev = self._device(device, "a fused region")
        for op in ops:
            self._check_supported(dev, op, dtype)
        given = [self._task_cost(graph, op, dev, dtype) for op in ops
                 if op.kind is OpKind.TASK and op.hint is not None
                 and op.hint.time_on(dev.name) is not None]
        if len(given) == len(ops):  # given times are exact and hold their own launches
            return Cost.of({Term.COMPUTE: sum(c.total_s for c in given)},
                           bottleneck=Bottleneck.COMPUTE, source=Source.GIVEN,
                           assumptions={"model": "given", "tasks": float(len(ops)),
                                        "interval": "given times, taken as exact"},
                           memory_bytes=sum(c.memory_bytes for c in given),
                           buffer_bytes=max(c.buffer_bytes for c in given))
        internal = region_internal_tensors(graph, ops)
        scaled: list[_Parts] = []
        total_bytes = 0
        any_kernel = False
        for op in ops:
            if op.kind is OpKind.TASK:
                c = self._task_cost(graph, op, dev, dtype)
                # the region pays one launch: a task's own launch term is taken out (a given
                # time has none to take out: it is kept whole)
                part = _Parts(c.total_s - c.term(Term.LAUNCH), 0.0, 0.0, 1.0, 1.0,
                              dev.peak(dtype), dev.main_memory.bandwidth_bytes_per_s, 1.0,
                              c.memory_bytes, 0.0, 1, True)
                scaled.append(part)
                total_bytes += c.memory_bytes
                any_kernel = True
                continue
            p = self.parts(graph, op, device, dtype)
            if p.kernels == 0 and p.nbytes == 0:
                continue
            any_kernel = True
            share = _external_share(graph, op, internal)
            nbytes = round(p.nbytes * share)
            total_bytes += nbytes
            scaled.append(_Parts(p.compute_s, p.memory_s * share, 0.0, p.efficiency,
                                 p.parallel_eff, p.peak, p.bandwidth, p.mem_fraction, nbytes,
                                 p.flops, p.kernels, p.counted, p.rule))
        if not any_kernel:
            return Cost.of({}, bottleneck=Bottleneck.NONE, source=Source.ROOFLINE,
                           assumptions={"model": "roofline", "note": "region of views"})
        # recurrent ops keep their per-step launches even inside a region; a region led by
        # a contraction costed by a fitted curve has its fixed time in that curve
        launches = max(1, max((p.kernels for p in scaled), default=1))
        if any(p.rule == _CURVE_RULE for p in scaled):
            launches = 0
        return self._cost_from(
            scaled, launches=launches, launch_s=kernel_time_s(dev)[0],
            assumptions={"peak_flops_per_s": dev.peak(dtype), "bytes": float(total_bytes),
                         "flops": sum(p.flops for p in scaled),
                         "bandwidth_bytes_per_s": dev.main_memory.bandwidth_bytes_per_s,
                         "dtype": dtype.value, "fused_ops": float(len(ops)),
                         "internal_tensors": float(len(internal))},
            memory_bytes=total_bytes, scratch_bytes=max(o.scratch_bytes for o in ops))

    def transfer_cost(self, tensor: Tensor, rep: Representation, src: str, dst: str, *,
                      partition_cut: bool = True) -> Cost:
        """Bytes of ``rep`` over each link of the route: bytes / bandwidth + latency per
        hop, plus one synchronization (the sender's launch overhead), plus the partition
        cut it makes (``Term.LAUNCH``): a crossing ends a partition on ``src`` and starts
        one on ``dst``, so it pays half of each side's per-partition cost
        (``partition_overhead``) and a partition entered and left once pays its own in
        full (``partition_cut=False`` leaves it out: a calibrated model charges what it
        measured instead). Zero if same device."""
        if src == dst:
            return Cost.zero()
        sdev = self._device(src, f"transfer of {tensor.name!r}")
        ddev = self._device(dst, f"transfer of {tensor.name!r}")
        (p_src, why_src), (p_dst, why_dst) = partition_overhead(sdev), partition_overhead(ddev)
        cut = (p_src + p_dst) / 2 if partition_cut else 0.0
        route = self.machine.route(src, dst)
        if not route:
            raise UnsupportedError(f"no route from device {src!r} to {dst!r} for tensor "
                                   f"{tensor.name!r}")
        nbytes = rep.dtype.nbytes(tensor.numel)
        wire = sum(nbytes / link.bandwidth_bytes_per_s for link in route)
        latency = sum(link.latency_s for link in route)
        sync = sdev.launch_overhead_s
        lo, hi = INTERVAL_STREAM
        return Cost.of({Term.TRANSFER: wire + latency, Term.SYNC: sync, Term.LAUNCH: cut},
                       bottleneck=Bottleneck.LINK, source=Source.ROOFLINE, rel_low=lo,
                       rel_high=hi,
                       assumptions={"model": "roofline", "bytes": float(nbytes),
                                    "partition_cut_s": cut,
                                    "partition": f"half of one partition on {src} "
                                                 f"({p_src:.3g} s: {why_src}) and on {dst} "
                                                 f"({p_dst:.3g} s: {why_dst})" if cut else
                                                 "left to the calibrated model",
                                    "representation": str(rep),
                                    "route": " > ".join(link.name for link in route),
                                    "bandwidth_bytes_per_s": min(
                                        link.bandwidth_bytes_per_s for link in route),
                                    "latency_s": latency, "sync_s": sync,
                                    "hops": float(len(route)),
                                    "interval": f"assumed [{lo}x, {hi}x] of the estimate",
                                    "interval_rel_low": lo, "interval_rel_high": hi},
                       memory_bytes=nbytes)

    def conversion_cost(self, tensor: Tensor, src: Representation, dst: Representation,
                        device: str) -> Cost:
        """A conversion kernel on ``device``: one launch, read the source representation,
        write the destination one (quantizing reads twice: a pass for the scale), with the
        destination held as a temporary buffer. Zero if the representations are equal."""
        if src == dst:
            return Cost.zero()
        dev = self._device(device, f"conversion of {tensor.name!r}")
        numel = tensor.numel
        read_b = src.dtype.nbytes(numel)
        write_b = dst.dtype.nbytes(numel)
        quantizing = (src.dtype.is_float and not dst.dtype.is_float) or \
            (src.dtype.is_float and dst.dtype.bits < 16)
        passes = 2 if quantizing else 1
        nbytes = read_b * passes + write_b
        bw = dev.main_memory.bandwidth_bytes_per_s
        frac = _memory_fraction(dev, None, numel)
        if src.layout is not dst.layout:
            frac *= _LAYOUT_FRACTION
        kernel_s = nbytes / (bw * frac)
        launch = kernel_time_s(dev)[0]
        lo, hi = INTERVAL_STREAM
        return Cost.of({Term.CONVERSION: kernel_s, Term.LAUNCH: launch},
                       bottleneck=Bottleneck.LAUNCH if launch > kernel_s else Bottleneck.MEMORY,
                       source=Source.ROOFLINE, rel_low=lo, rel_high=hi,
                       assumptions={"model": "roofline", "bytes": float(nbytes),
                                    "from": str(src), "to": str(dst), "passes": float(passes),
                                    "bandwidth_bytes_per_s": bw, "memory_fraction": frac,
                                    "launch_s": launch,
                                    "interval": f"assumed [{lo}x, {hi}x] of the estimate",
                                    "interval_rel_low": lo, "interval_rel_high": hi},
                       memory_bytes=nbytes, buffer_bytes=write_b)

    def corun_slowdown(self, graph: Graph, ops: Sequence[Op], device: str, dtype: DType,
                       busy: frozenset[str]) -> float:
        """What the machine spec says of ``device`` beside the ``busy`` devices
        (``Device.corun_slowdown``: published co-run figures, e.g. the Jetson preset's); 1.0
        where it says nothing. What devices sharing a memory controller cost each other in
        bandwidth is the scheduler's shared-bandwidth model (``Cost.memory_bytes`` on
        ``Machine.shared_resources``); the scheduler applies the slower of the two."""
        return self._device(device, "its co-run slowdown").corun_slowdown(busy)

    def wake_s(self, device: str) -> float:
        """0.0: wake-up latency is a property of the runtime that runs a plan, measured by
        calibration (``placewise.calibrate.corun``), not of the hardware spec."""
        return 0.0

    def device_class(self, device: str) -> str:
        """What this model reads of ``device`` to cost ops other than tasks: its spec, not
        its name. Two devices of one class (the GPUs of a server) get equal op and region
        costs, so a caller may keep one answer for both (``Problem.cost``); a task's given
        time is per device name, so tasks are not covered.

        >>> from placewise.hardware.load import load_machine
        >>> m = RooflineModel(load_machine("h100-sxm-server"))
        >>> m.device_class("gpu0") == m.device_class("gpu1") != m.device_class("cpu")
        True
        """
        return self._device(device, "its class").model_dump_json(exclude={"name"})

    def fingerprint(self) -> str:
        return "roofline/v1"


def region_internal_tensors(graph: Graph, ops: list[Op]) -> set[str]:
    """Tensors produced inside the region whose every consumer is inside it and that are
    not graph outputs: a fused kernel never writes them to memory."""
    names = {o.name for o in ops}
    outputs = set(graph.outputs)
    internal: set[str] = set()
    for op in ops:
        for t in op.outputs:
            if t in outputs:
                continue
            cons = graph.consumers(t)
            if cons and all(c.name in names for c in cons):
                internal.add(t)
    return internal


def _external_share(graph: Graph, op: Op, internal: set[str]) -> float:
    """Share of ``op``'s tensor bytes that cross the region boundary."""
    total = 0
    ext = 0
    for name in [*op.inputs, *op.outputs]:
        if not name:
            continue
        b = graph.tensor(name).nbytes
        total += b
        if name not in internal:
            ext += b
    return ext / total if total else 1.0

