"""FLOPs and bytes moved per op, by rules registered in a table keyed by ``OpKind``.

Every rule reads the op's real tensor shapes from the graph and returns an ``OpCount``. A rule
is registered beside its kinds with ``@rule(OpKind.X, ...)``; a kind with no rule (and
``OpKind.UNKNOWN``) is reported as *uncounted* — zero FLOPs and bytes with ``counted=False``
and listed by ``count_graph`` — never silently zero.

Conventions:

- FLOPs: 2 per multiply-accumulate; 1 per elementwise arithmetic operation (add, mul,
  compare, select, divide, square root...); a transcendental function (exp, log, erf, tanh,
  sin, cos, pow) counts ``TRANSCENDENTAL_FLOPS`` per element. Composite per-element costs
  are in ``ELEMENTWISE_FLOPS`` and the ``*_FLOPS*`` constants below.
- Bytes: every input is read once at its own size and every output written once (the
  roofline "compulsory traffic"), at the tensor's dtype (sub-byte types packed, rounded up
  per tensor). Gathers and slices read only what they take. Views move nothing.

>>> from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
>>> from placewise.units import DType
>>> g = Graph.build("mm", [Tensor("a", (8, 16), DType.FP32, role=Role.INPUT),
...                        Tensor("b", (16, 4), DType.FP32, role=Role.PARAM),
...                        Tensor("c", (8, 4), DType.FP32, role=Role.OUTPUT)],
...                 [Op("mm", OpKind.MATMUL, ("a", "b"), ("c",))])
>>> c = count_op(g, g.op("mm"))
>>> c.flops, c.bytes_read, c.bytes_written, c.bytes_moved
(1024.0, 768, 128, 896)
>>> count_graph(g).coverage
1.0
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from placewise.graph.count_fused import fused_norm, packed_attention
from placewise.graph.count_table import (
    _CAST_FLOPS,
    _DEQUANTIZE_FLOPS,
    _QUANTIZE_FLOPS,
    _RULES,
    _UNCOUNTED,
    _VIEW,
    DYNAMIC_QUANTIZE_FLOPS,
    ELEMENTWISE_FLOPS,
    GRU_ELEMENTWISE_FLOPS_PER_HIDDEN,
    LSTM_ELEMENTWISE_FLOPS_PER_HIDDEN,
    NORM_FLOPS_PER_ELEMENT,
    REQUANTIZE_FLOPS,
    SOFTMAX_FLOPS_PER_ELEMENT,
    TRANSCENDENTAL_FLOPS,
    OpCount,
    _broadcast,
    _Ctx,
    _expect_same_numel,
    _expect_shape,
    _fmt,
    attention_flops,
    einsum_indices,
    has_rule,
    rule,
    window_count,
)
from placewise.graph.ir import Graph, Op, OpKind, Tensor
from placewise.units import DType

__all__ = [
    "DYNAMIC_QUANTIZE_FLOPS",
    "ELEMENTWISE_FLOPS",
    "GRU_ELEMENTWISE_FLOPS_PER_HIDDEN",
    "LSTM_ELEMENTWISE_FLOPS_PER_HIDDEN",
    "NORM_FLOPS_PER_ELEMENT",
    "REQUANTIZE_FLOPS",
    "SOFTMAX_FLOPS_PER_ELEMENT",
    "TRANSCENDENTAL_FLOPS",
    "GraphCount",
    "KindCount",
    "OpCount",
    "attention_flops",
    "count_graph",
    "count_op",
    "einsum_indices",
    "has_rule",
    "rule",
    "window_count",
]

@dataclass(frozen=True, slots=True)
class KindCount:
    """Totals of one op kind over a graph."""

    count: int
    flops: float
    bytes_moved: int


@dataclass(frozen=True)
class GraphCount:
    """Totals over a graph. ``uncounted`` lists (sorted, once each) the kinds with no rule,
    an unknown op as ``unknown(SOURCE_OP)``; ``coverage`` is the share of ops counted."""

    per_op: dict[str, OpCount]
    flops: float
    bytes_moved: int
    by_kind: dict[OpKind, KindCount]
    uncounted: list[str]
    coverage: float


def count_op(graph: Graph, op: Op) -> OpCount:
    """FLOPs and bytes of ``op`` at its real shapes in ``graph``.

    Raises ``GraphError`` naming the op when a shape it needs is symbolic or inconsistent.
    The count of an op of ``graph`` is kept with the graph (``Graph.analysis``): costing
    asks for it once per device and precision.
    """
    fn = _RULES.get(op.kind)
    if fn is None:
        return _UNCOUNTED
    if not graph.owns(op):
        return fn(_Ctx(graph, op))  # an op the graph does not hold: not its to keep
    memo = graph.analysis("count_op")
    got: OpCount | None = memo.get(op.name)
    if got is None:
        got = memo[op.name] = fn(_Ctx(graph, op))
    return got


def _uncounted_name(op: Op) -> str:
    if op.kind is OpKind.UNKNOWN:
        src = op.provenance.source_op
        return f"unknown({src})" if src else "unknown"
    return op.kind.value


def count_graph(graph: Graph) -> GraphCount:
    """Count every op; totals, per kind (sorted by kind name), uncounted kinds, coverage."""
    per_op: dict[str, OpCount] = {}
    acc: dict[OpKind, list[float]] = {}
    uncounted: set[str] = set()
    flops = 0.0
    moved = 0
    n_counted = 0
    for op in graph.ops:
        c = count_op(graph, op)
        per_op[op.name] = c
        a = acc.setdefault(op.kind, [0, 0.0, 0])
        a[0] += 1
        a[1] += c.flops
        a[2] += c.bytes_moved
        flops += c.flops
        moved += c.bytes_moved
        if c.counted:
            n_counted += 1
        else:
            uncounted.add(_uncounted_name(op))
    by_kind = {k: KindCount(int(v[0]), float(v[1]), int(v[2]))
               for k, v in sorted(acc.items(), key=lambda kv: kv[0].value)}
    coverage = n_counted / len(graph.ops) if graph.ops else 1.0
    return GraphCount(per_op, flops, moved, by_kind, sorted(uncounted), coverage)


# ---- contractions ------------------------------------------------------------------------


@rule(OpKind.MATMUL)
def _matmul(c: _Ctx) -> OpCount:
    """numpy ``matmul``: broadcast batch dims; a 1-D operand gets a 1 prepended (A) or
    appended (B) that is dropped from the result. FLOPs = 2 * batch * M * N * K, with A's or
    B's last two dims swapped first under ``trans_a`` / ``trans_b``. Integer matmuls
    (``quant``) count the same multiply-accumulates at their int8 operands' bytes (zero
    points read, their row-sum corrections not counted); ``qlinear`` adds the
    requantization of each output."""
    a, b = c.inp(0, "A"), c.inp(1, "B")
    sa, sb = c.shape(a), c.shape(b)
    if not sa or not sb:
        raise c.fail("matmul operands must have at least one dimension")
    if c.op.attrs.get("trans_a", False) and len(sa) >= 2:
        sa = (*sa[:-2], sa[-1], sa[-2])
    if c.op.attrs.get("trans_b", False) and len(sb) >= 2:
        sb = (*sb[:-2], sb[-1], sb[-2])
    a2 = (1, *sa) if len(sa) == 1 else sa
    b2 = (*sb, 1) if len(sb) == 1 else sb
    m, k = a2[-2], a2[-1]
    k2, n = b2[-2], b2[-1]
    if k != k2:
        raise c.fail(f"inner dimensions differ: {_fmt(sa)} @ {_fmt(sb)}")
    batch = _broadcast([a2[:-2], b2[:-2]])
    if batch is None:
        raise c.fail(f"batch dimensions do not broadcast: {_fmt(sa)} @ {_fmt(sb)}")
    expected = (*batch, *(() if len(sa) == 1 else (m,)), *(() if len(sb) == 1 else (n,)))
    _expect_shape(c, c.out(), expected)
    return c.count(2 * math.prod(batch) * m * n * k + _requantized(c, math.prod(expected)))


def _requantized(c: _Ctx, outputs: int) -> float:
    """The requantization of a ``quant="qlinear"`` op's int32 results to the output's
    scale and zero point (REQUANTIZE_FLOPS per output element); 0 otherwise."""
    return outputs * REQUANTIZE_FLOPS if c.op.attrs.get("quant") == "qlinear" else 0.0


@rule(OpKind.GEMM)
def _gemm(c: _Ctx) -> OpCount:
    """ONNX Gemm: ``alpha * op(A) @ op(B) + beta * C``. FLOPs = 2MNK, plus M*N for the
    bias add when C is present (alpha/beta scaling is folded into the epilogue)."""
    a, b, bias = c.inp(0, "A"), c.inp(1, "B"), c.opt(2)
    sa, sb = c.shape(a), c.shape(b)
    if len(sa) != 2 or len(sb) != 2:
        raise c.fail(f"gemm needs 2-D operands, got {_fmt(sa)} and {_fmt(sb)}")
    m, k = (sa[1], sa[0]) if c.op.attrs.get("trans_a", False) else sa
    k2, n = (sb[1], sb[0]) if c.op.attrs.get("trans_b", False) else sb
    if k != k2:
        raise c.fail(f"inner dimensions differ: {_fmt(sa)} and {_fmt(sb)} "
                     f"(trans_a={bool(c.op.attrs.get('trans_a', False))}, "
                     f"trans_b={bool(c.op.attrs.get('trans_b', False))})")
    if bias is not None and _broadcast([c.shape(bias), (m, n)]) != (m, n):
        raise c.fail(f"bias C {bias.shape_str()} does not broadcast to [{m},{n}]")
    _expect_shape(c, c.out(), (m, n))
    return c.count(2 * m * n * k + (m * n if bias is not None else 0))


@rule(OpKind.LINEAR)
def _linear(c: _Ctx) -> OpCount:
    """torch ``linear``: ``x @ W^T + b`` with x [..., in], W [out, in], b [out]."""
    x, w, bias = c.inp(0, "x"), c.inp(1, "weight"), c.opt(2)
    sx, sw = c.shape(x), c.shape(w)
    if not sx or len(sw) != 2 or sw[1] != sx[-1]:
        raise c.fail(f"linear needs x [..., in] and weight [out, in], got {_fmt(sx)} and "
                     f"{_fmt(sw)}")
    if bias is not None and c.numel(bias) != sw[0]:
        raise c.fail(f"bias {bias.shape_str()} does not match {sw[0]} output features")
    _expect_shape(c, c.out(), (*sx[:-1], sw[0]))
    rows = math.prod(sx[:-1])
    return c.count(2 * rows * sw[1] * sw[0] + (rows * sw[0] if bias is not None else 0))


def _conv_spatial_check(c: _Ctx, in_sp: Sequence[int], k_sp: Sequence[int],
                        out_sp: Sequence[int], *, transpose: bool) -> None:
    """Check the output spatial size against strides/pads/dilations when ``pads`` is given
    (an op imported with ``auto_pad`` and no explicit pads is trusted as is)."""
    nd = len(in_sp)
    if "pads" not in c.op.attrs:
        return
    strides = c.attr_ints("strides", [1] * nd)
    dil = c.attr_ints("dilations", [1] * nd)
    pads = c.attr_ints("pads", [0] * 2 * nd)
    if len(strides) != nd or len(dil) != nd or len(pads) != 2 * nd:
        raise c.fail(f"strides/dilations/pads do not match {nd} spatial dimensions")
    if transpose:
        opad = c.attr_ints("output_padding", [0] * nd)
        exp = [strides[i] * (in_sp[i] - 1) + opad[i] + (k_sp[i] - 1) * dil[i] + 1
               - pads[i] - pads[nd + i] for i in range(nd)]
    else:
        ceil = bool(c.op.attrs.get("ceil_mode", False))
        exp = [window_count(in_sp[i], k_sp[i], strides[i], pads[i], pads[nd + i], dil[i],
                            ceil_mode=ceil) for i in range(nd)]
    if list(out_sp) != exp:
        raise c.fail(f"output spatial size {_fmt(out_sp)} does not follow from input "
                     f"{_fmt(in_sp)}, kernel {_fmt(k_sp)}, strides {_fmt(strides)}, pads "
                     f"{_fmt(pads)}, dilations {_fmt(dil)} (expected {_fmt(exp)})")


@rule(OpKind.CONV)
def _conv(c: _Ctx) -> OpCount:
    """Convolution, X [N, Cin, *sp], W [Cout, Cin/group, *k], B [Cout], Y [N, Cout, *out]:
    FLOPs = 2 * N * Cout * prod(out) * (Cin/group) * prod(k) + N * Cout * prod(out) (bias).
    Strides and dilations enter through the output size. ``quant="integer"`` (ConvInteger):
    inputs 2 and 3 are zero points, not a bias; ``"qlinear"`` (QLinearConv) adds the
    requantization of each output."""
    x, w = c.inp(0, "X"), c.inp(1, "W")
    bias = None if c.op.attrs.get("quant") == "integer" else c.opt(2)  # zero points there
    y = c.out()
    sx, sw, sy = c.shape(x), c.shape(w), c.shape(y)
    group = c.attr_int("group", 1)
    if len(sx) < 3 or len(sw) != len(sx) or len(sy) != len(sx):
        raise c.fail(f"conv needs X [N,C,...], W [Cout,Cin/group,...], Y [N,Cout,...] of "
                     f"equal rank, got {_fmt(sx)}, {_fmt(sw)}, {_fmt(sy)}")
    n, cin = sx[0], sx[1]
    cout, cin_g = sw[0], sw[1]
    if group < 1 or cin_g * group != cin or cout % group or sy[0] != n or sy[1] != cout:
        raise c.fail(f"channels do not agree: X {_fmt(sx)}, W {_fmt(sw)}, Y {_fmt(sy)}, "
                     f"group={group}")
    k_sp = sw[2:]
    if "kernel_shape" in c.op.attrs and c.attr_ints("kernel_shape", k_sp) != tuple(k_sp):
        raise c.fail(f"kernel_shape {c.op.attrs['kernel_shape']} disagrees with W {_fmt(sw)}")
    _conv_spatial_check(c, sx[2:], k_sp, sy[2:], transpose=False)
    outs = n * cout * math.prod(sy[2:])
    if bias is not None and c.numel(bias) != cout:
        raise c.fail(f"bias {bias.shape_str()} does not match {cout} output channels")
    return c.count(2 * outs * cin_g * math.prod(k_sp) + (outs if bias is not None else 0)
                   + _requantized(c, outs))


@rule(OpKind.CONV_TRANSPOSE)
def _conv_transpose(c: _Ctx) -> OpCount:
    """Transposed convolution, X [N, Cin, *sp], W [Cin, Cout/group, *k], Y [N, Cout, *out],
    counted from the input side (each input pixel scatters a kernel into the output):
    FLOPs = 2 * N * Cin * prod(sp) * (Cout/group) * prod(k) + N * Cout * prod(out) (bias)."""
    x, w, bias = c.inp(0, "X"), c.inp(1, "W"), c.opt(2)
    y = c.out()
    sx, sw, sy = c.shape(x), c.shape(w), c.shape(y)
    group = c.attr_int("group", 1)
    if len(sx) < 3 or len(sw) != len(sx) or len(sy) != len(sx):
        raise c.fail(f"conv_transpose needs X [N,Cin,...], W [Cin,Cout/group,...], "
                     f"Y [N,Cout,...] of equal rank, got {_fmt(sx)}, {_fmt(sw)}, {_fmt(sy)}")
    n, cin = sx[0], sx[1]
    cout_g = sw[1]
    cout = cout_g * group
    if group < 1 or sw[0] != cin or cin % group or sy[0] != n or sy[1] != cout:
        raise c.fail(f"channels do not agree: X {_fmt(sx)}, W {_fmt(sw)}, Y {_fmt(sy)}, "
                     f"group={group}")
    k_sp = sw[2:]
    _conv_spatial_check(c, sx[2:], k_sp, sy[2:], transpose=True)
    if bias is not None and c.numel(bias) != cout:
        raise c.fail(f"bias {bias.shape_str()} does not match {cout} output channels")
    flops = 2 * n * cin * math.prod(sx[2:]) * cout_g * math.prod(k_sp)
    flops += n * cout * math.prod(sy[2:]) if bias is not None else 0
    return c.count(flops)


@rule(OpKind.ATTENTION)
def _attention(c: _Ctx) -> OpCount:
    """Scaled dot-product attention, q [..., L, E], k [..., S, E], v [..., S, Ev]:
    QK^T (2*B*L*S*E) + scale (B*L*S) + mask (B*L*S, when a mask input is given or
    ``is_causal``) + softmax (B*L*S*SOFTMAX_FLOPS_PER_ELEMENT) + PV (2*B*L*S*Ev), with B the
    product of q's leading dims (grouped k/v heads are shared, not repeated). With
    ``num_heads`` N (heads in the last dim, [B, L, N*H]) the scores are B*N*L*S and the
    head dims E/N and Ev/N; ``variant="packed"`` is ``count_fused.packed_attention``.

    A causal op is counted over the *full* L x S matrix, as a dense kernel computes it
    (a kernel that skips masked blocks does about half the work). Bytes assume the score
    matrix stays on chip (flash-style): q, k, v, mask read once, the output written once.
    """
    if c.op.attrs.get("variant") == "packed":
        return packed_attention(c)
    q, k, v, mask = c.inp(0, "q"), c.inp(1, "k"), c.inp(2, "v"), c.opt(3)
    sq, sk, sv = c.shape(q), c.shape(k), c.shape(v)
    if min(len(sq), len(sk), len(sv)) < 2:
        raise c.fail(f"attention needs q, k, v of rank >= 2, got {_fmt(sq)}, {_fmt(sk)}, "
                     f"{_fmt(sv)}")
    lq, e = sq[-2], sq[-1]
    sk_len, ek = sk[-2], sk[-1]
    if ek != e or sv[-2] != sk_len:
        raise c.fail(f"q {_fmt(sq)}, k {_fmt(sk)}, v {_fmt(sv)} disagree on the head "
                     f"dimension or the key length")
    ev = sv[-1]
    b = math.prod(sq[:-2])
    _expect_shape(c, c.out(), (*sq[:-1], ev))
    heads = c.attr_int("num_heads", 1)  # heads in the last dim: [B, L, N*H]
    if heads < 1 or e % heads or ev % heads:
        raise c.fail(f"num_heads {heads} does not divide the head dims of q {_fmt(sq)} and "
                     f"v {_fmt(sv)}")
    return c.count(attention_flops(b * heads, lq, sk_len, e // heads, ev // heads,
                                   masked=mask is not None or
                                   bool(c.op.attrs.get("is_causal", False))))


@rule(OpKind.EINSUM)
def _einsum(c: _Ctx) -> OpCount:
    """Einsum (``equation``): each term of the full index space costs one multiply per
    operand beyond the first and one accumulate, FLOPs = prod(every index size) *
    operands (2 * M * N * K for a two-operand matmul); inputs read once, output written."""
    eq = c.op.attrs.get("equation")
    if not isinstance(eq, str) or not eq:
        raise c.fail("einsum needs its equation attribute")
    shapes = [c.shape(t) for t in c.ins()]
    try:
        _, out, sizes = einsum_indices(eq, shapes)
    except ValueError as e:
        raise c.fail(f"einsum {eq!r} does not fit the input shapes "
                     f"{', '.join(_fmt(s) for s in shapes)}: {e}") from None
    _expect_shape(c, c.out(), [sizes[x] for x in out])
    return c.count(math.prod(sizes.values()) * max(1, len(shapes)))


def _recurrent(c: _Ctx, gates: int, per_hidden: float, bias_per_hidden: float) -> OpCount:
    x, w, r = c.inp(0, "X"), c.inp(1, "W"), c.inp(2, "R")
    sx, sw, sr = c.shape(x), c.shape(w), c.shape(r)
    if len(sx) != 3 or len(sw) != 3 or len(sr) != 3:
        raise c.fail(f"{c.op.kind.value} needs X, W, R of rank 3, got {_fmt(sx)}, {_fmt(sw)}, "
                     f"{_fmt(sr)}")
    layout = c.attr_int("layout", 0)
    seq, batch, isz = (sx[1], sx[0], sx[2]) if layout == 1 else sx
    direction = c.op.attrs.get("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise c.fail(f"direction must be forward, reverse or bidirectional, got {direction!r}")
    dirs = 2 if direction == "bidirectional" else 1
    h = c.attr_int("hidden_size", sr[-1] if c.op.attrs.get("quant") != "integer"
                   else sr[1])
    if c.op.attrs.get("quant") == "integer":  # DynamicQuantizeLSTM: W, R transposed
        sw, sr = (sw[0], sw[2], sw[1]), (sr[0], sr[2], sr[1])
    if sw != (dirs, gates * h, isz) or sr != (dirs, gates * h, h):
        raise c.fail(f"W {_fmt(sw)} / R {_fmt(sr)} do not match {dirs} direction(s), "
                     f"{gates} gates, hidden {h}, input {isz} (expected W "
                     f"{_fmt((dirs, gates * h, isz))}, R {_fmt((dirs, gates * h, h))})")
    elementwise = per_hidden + (bias_per_hidden if c.opt(3) is not None else 0.0)
    if c.op.kind is OpKind.LSTM and c.opt(7) is not None:
        elementwise += 6.0  # peepholes: 3 multiplies + 3 adds
    steps = seq * batch * dirs
    return c.count(steps * (gates * 2 * h * (isz + h) + h * elementwise))


@rule(OpKind.LSTM)
def _lstm(c: _Ctx) -> OpCount:
    """ONNX LSTM over the whole sequence (X [seq,batch,in], or [batch,seq,in] with
    layout=1; W [dirs,4H,in], R [dirs,4H,H]): FLOPs = seq*batch*dirs*(4*2*H*(in+H) +
    H*LSTM_ELEMENTWISE_FLOPS_PER_HIDDEN (+8H with biases, +6H with peepholes)).
    Weights are read once (kept on chip across steps)."""
    return _recurrent(c, 4, LSTM_ELEMENTWISE_FLOPS_PER_HIDDEN, 8.0)


@rule(OpKind.GRU)
def _gru(c: _Ctx) -> OpCount:
    """ONNX GRU, as LSTM with 3 gates and GRU_ELEMENTWISE_FLOPS_PER_HIDDEN (+6H biases)."""
    return _recurrent(c, 3, GRU_ELEMENTWISE_FLOPS_PER_HIDDEN, 6.0)


# ---- normalization -----------------------------------------------------------------------


@rule(*NORM_FLOPS_PER_ELEMENT)
def _norm(c: _Ctx) -> OpCount:
    """Norms: input elements x NORM_FLOPS_PER_ELEMENT[kind], + 1 per element for each present
    affine input (scale, bias) except for batch norm, whose affine is folded in. The skip
    and embed variants are ``count_fused.fused_norm``."""
    if c.op.attrs.get("variant") in ("skip", "embed"):
        return fused_norm(c)
    x = c.inp(0, "X")
    n = c.numel(x)
    per = NORM_FLOPS_PER_ELEMENT[c.op.kind]
    if c.op.kind is not OpKind.BATCH_NORM:
        per += sum(1.0 for i in (1, 2) if c.opt(i) is not None)
    _expect_same_numel(c, x, c.out())
    return c.count(n * per)


@rule(OpKind.SOFTMAX, OpKind.LOG_SOFTMAX)
def _softmax(c: _Ctx) -> OpCount:
    """Elements x SOFTMAX_FLOPS_PER_ELEMENT (+ dequantize and quantize for QLinearSoftmax)."""
    x = c.inp(0, "X")
    n = _expect_same_numel(c, x, c.out())
    return c.count(n * (SOFTMAX_FLOPS_PER_ELEMENT + _qlinear_per_element(c, 1)))


def _qlinear_per_element(c: _Ctx, operands: int) -> float:
    """Per-element FLOPs a ``quant="qlinear"`` op adds around its float computation:
    dequantize each operand, quantize the result."""
    if c.op.attrs.get("quant") != "qlinear":
        return 0.0
    return operands * _DEQUANTIZE_FLOPS + _QUANTIZE_FLOPS


# ---- elementwise -------------------------------------------------------------------------


@rule(*ELEMENTWISE_FLOPS)
def _elementwise(c: _Ctx) -> OpCount:
    """Output elements x ELEMENTWISE_FLOPS[kind]; inputs broadcast numpy-style to the
    output, each read once at its own size. A ``bias`` input (BiasGelu) adds 1 per element,
    SILU's ``alpha`` (QuickGelu) 1, ``quant="qlinear"`` (QLinearAdd, QLinearSigmoid...)
    the dequantization of each operand and the quantization of the result."""
    ins = c.ins()
    if not ins:
        raise c.fail(f"{c.op.kind.value} needs at least one input")
    y = c.out()
    sy = c.shape(y)
    operands = ins
    if c.op.attrs.get("quant") == "qlinear":  # operands first, then scales, zero points
        operands = [t for t in (c.opt(0), c.opt(1)) if t is not None] \
            if c.op.kind in _BINARY_QLINEAR else ins[:1]
    shapes = [c.shape(t) for t in operands]
    if _broadcast(shapes) != sy:
        raise c.fail("input shapes " + ", ".join(_fmt(s) for s in shapes) +
                     f" do not broadcast to the output shape {_fmt(sy)}")
    per = ELEMENTWISE_FLOPS[c.op.kind] + _qlinear_per_element(c, len(operands))
    per += 1.0 if c.op.attrs.get("bias", False) else 0.0  # BiasGelu: add the bias first
    per += 1.0 if c.op.kind is OpKind.SILU and "alpha" in c.op.attrs else 0.0  # alpha * x
    return c.count(math.prod(sy) * per)


_BINARY_QLINEAR = frozenset({OpKind.ADD, OpKind.MUL})


# ---- reductions and pooling --------------------------------------------------------------


@rule(OpKind.REDUCE_SUM, OpKind.REDUCE_MEAN, OpKind.REDUCE_MAX, OpKind.REDUCE_MIN,
      OpKind.REDUCE_PROD, OpKind.ARGMAX, OpKind.CUMSUM, OpKind.TOPK)
def _reduction(c: _Ctx) -> OpCount:
    """One FLOP per input element (mean's final division and top-k's selection network
    are not counted beyond that)."""
    x = c.inp(0, "X")
    return c.count(c.numel(x))


@rule(OpKind.MAX_POOL, OpKind.AVG_POOL)
def _pool(c: _Ctx) -> OpCount:
    """Kernel volume per output element (``kernel_shape`` attribute required)."""
    x, y = c.inp(0, "X"), c.out()
    sx, sy = c.shape(x), c.shape(y)
    if "kernel_shape" not in c.op.attrs:
        raise c.fail("pooling needs the kernel_shape attribute")
    k_sp = c.attr_ints("kernel_shape", ())
    if len(sx) != len(sy) or len(sx) != len(k_sp) + 2 or sx[:2] != sy[:2]:
        raise c.fail(f"pooling shapes disagree: X {_fmt(sx)}, Y {_fmt(sy)}, kernel "
                     f"{_fmt(k_sp)}")
    _conv_spatial_check(c, sx[2:], k_sp, sy[2:], transpose=False)
    return c.count(math.prod(sy) * math.prod(k_sp))


@rule(OpKind.GLOBAL_AVG_POOL, OpKind.GLOBAL_MAX_POOL)
def _global_pool(c: _Ctx) -> OpCount:
    """One FLOP per input element."""
    return c.count(c.numel(c.inp(0, "X")))


# ---- data movement -----------------------------------------------------------------------


def _gather_like(c: _Ctx, data: Tensor, indices: Tensor, rows_numel: int) -> OpCount:
    y = c.out()
    if c.numel(y) != rows_numel:
        raise c.fail(f"output {y.name!r} {y.shape_str()} does not hold the "
                     f"{rows_numel} gathered elements")
    return c.count(0, reads=[(indices, c.numel(indices)), (data, rows_numel)],
                   writes=[(y, rows_numel)])


@rule(OpKind.GATHER)
def _gather(c: _Ctx) -> OpCount:
    """Reads the indices and only the gathered elements; writes them. Zero FLOPs.

    By ``variant``: plain (ONNX Gather, torch index_select) takes whole slices along
    ``axis``; ``elements`` (GatherElements, torch gather) one element per index, the
    output shaped as the indices; ``nd`` (GatherND) one slice of
    ``data.shape[batch_dims + q:]`` per index tuple of length q (the indices' last dim);
    ``index`` (torch advanced indexing, several index tensors) what the output holds."""
    data, idx = c.inp(0, "data"), c.inp(1, "indices")
    sd, si = c.shape(data), c.shape(idx)
    variant = c.op.attrs.get("variant", "")
    if variant == "elements":
        if len(si) != len(sd):
            raise c.fail(f"gather elements needs indices {_fmt(si)} of the rank of data "
                         f"{_fmt(sd)}")
        return _gather_like(c, data, idx, math.prod(si))
    if variant == "nd":
        b = c.attr_int("batch_dims", 0)
        q = si[-1] if si else 0
        if not si or b < 0 or b + q > len(sd) or tuple(si[:b]) != tuple(sd[:b]):
            raise c.fail(f"gather nd: indices {_fmt(si)} (batch_dims={b}) do not index data "
                         f"{_fmt(sd)}")
        return _gather_like(c, data, idx, math.prod(si[:-1]) * math.prod(sd[b + q:]))
    if variant == "index":
        n = c.numel(c.out())
        reads = [(data, min(n, c.numel(data)))] + [(t, c.numel(t)) for t in c.ins()[1:]]
        return c.count(0, reads=reads, writes=[(c.out(), n)])
    axis = c.attr_int("axis", 0)
    if not sd or not -len(sd) <= axis < len(sd):
        raise c.fail(f"axis {axis} out of range for data {_fmt(sd)}")
    axis %= len(sd)
    rows = math.prod(sd) // sd[axis] * c.numel(idx) if sd[axis] else 0
    return _gather_like(c, data, idx, rows)


@rule(OpKind.EMBEDDING)
def _embedding(c: _Ctx) -> OpCount:
    """Embedding lookup (weight [V, D], indices): indices + gathered rows + output."""
    w, idx = c.inp(0, "weight"), c.inp(1, "indices")
    sw = c.shape(w)
    if len(sw) != 2:
        raise c.fail(f"embedding weight must be [vocab, dim], got {_fmt(sw)}")
    return _gather_like(c, w, idx, c.numel(idx) * sw[1])


@rule(OpKind.SCATTER)
def _scatter(c: _Ctx) -> OpCount:
    """Copies data, reads indices and updates, writes the output; a ``reduction``
    (add, mul, max, min) adds one FLOP per update."""
    reduction = c.op.attrs.get("reduction", "none")
    upd = c.opt(2)
    flops = c.numel(upd) if upd is not None and reduction not in ("none", "") else 0
    return c.count(flops)


@rule(OpKind.CONCAT, OpKind.SPLIT, OpKind.TRANSPOSE, OpKind.PAD, OpKind.EXPAND, OpKind.TILE)
def _copy(c: _Ctx) -> OpCount:
    """A copy: inputs read once, outputs written. Zero FLOPs."""
    kind = c.op.kind
    if kind is OpKind.CONCAT:
        total = sum(c.numel(t) for t in c.ins())
        if total != c.numel(c.out()):
            raise c.fail(f"concat output {c.out().shape_str()} does not hold its inputs' "
                         f"{total} elements")
    elif kind is OpKind.SPLIT:
        total = sum(c.numel(t) for t in c.outs())
        if total != c.numel(c.inp(0, "input")):
            raise c.fail(f"split outputs hold {total} elements, input "
                         f"{c.inp(0, 'input').shape_str()} holds {c.numel(c.inp(0, 'input'))}")
    elif kind is OpKind.TRANSPOSE:
        _expect_same_numel(c, c.inp(0, "input"), c.out())
    return c.count(0)


@rule(OpKind.SLICE)
def _slice(c: _Ctx) -> OpCount:
    """Reads only the slice (output elements of the data) plus any index inputs; writes it."""
    data, y = c.inp(0, "data"), c.out()
    n = c.numel(y)
    if n > c.numel(data):
        raise c.fail(f"slice {y.shape_str()} is larger than its data {data.shape_str()}")
    reads = [(data, n)] + [(t, c.numel(t)) for t in c.ins()[1:]]
    return c.count(0, reads=reads)


@rule(OpKind.RESHAPE, OpKind.FLATTEN, OpKind.SQUEEZE, OpKind.UNSQUEEZE, OpKind.IDENTITY,
      OpKind.DROPOUT)
def _view(c: _Ctx) -> OpCount:
    """A view (dropout is the identity at inference): zero bytes, zero FLOPs."""
    return _VIEW


# ---- conversions and plumbing --------------------------------------------------------------


@rule(OpKind.QUANTIZE, OpKind.DEQUANTIZE, OpKind.CAST, OpKind.LAYOUT_CONVERT)
def _convert(c: _Ctx) -> OpCount:
    """Elements x (2 quantize, 2 dequantize, 1 cast, 0 layout change: a pure permuting
    copy; DYNAMIC_QUANTIZE_FLOPS for DynamicQuantizeLinear, which finds the range first);
    bytes at each tensor's own dtype (int4 packed two per byte), the scale and zero point
    included."""
    x, y = c.inp(0, "input"), c.out()
    n = _expect_same_numel(c, x, y)
    per = {OpKind.QUANTIZE: _QUANTIZE_FLOPS, OpKind.DEQUANTIZE: _DEQUANTIZE_FLOPS,
           OpKind.CAST: _CAST_FLOPS, OpKind.LAYOUT_CONVERT: 0.0}[c.op.kind]
    if c.op.attrs.get("variant") == "dynamic":
        per = DYNAMIC_QUANTIZE_FLOPS
    return c.count(n * per)


@rule(OpKind.SHAPE, OpKind.CONSTANT, OpKind.RANGE)
def _plumbing(c: _Ctx) -> OpCount:
    """Zero FLOPs; writes its (small) output. SHAPE reads only metadata, so no input bytes."""
    if c.op.kind is OpKind.SHAPE:
        return c.count(0, reads=[])
    return c.count(0)


@rule(OpKind.TASK)
def _task(c: _Ctx) -> OpCount:
    """Abstract task: FLOPs and bytes from ``Op.hint``. The hint gives only the total bytes;
    the written part is the task's output tensors (capped by the total), the rest is read.
    ``bytes_by_dtype`` puts all of it under the task's ``dtype`` attribute (default fp32)."""
    hint = c.op.hint
    if hint is None:
        raise c.fail("a task needs a TaskHint with its flops and bytes")
    if hint.flops < 0 or hint.bytes_moved < 0:
        raise c.fail("task flops and bytes must be >= 0")
    written = min(sum(t.nbytes for t in c.outs()), hint.bytes_moved)
    dt_name = c.op.attrs.get("dtype", DType.FP32.value)
    try:
        dtype = DType.parse(str(dt_name))
    except ValueError as e:
        raise c.fail(str(e)) from None
    split = ((dtype, hint.bytes_moved),) if hint.bytes_moved else ()
    return OpCount(float(hint.flops), hint.bytes_moved - written, written, split,
                   counted=True, is_view=False)


@rule(OpKind.IF, OpKind.LOOP, OpKind.SCAN)
def _control_flow(c: _Ctx) -> OpCount:
    """Control flow kept as one op: the work of its subgraph, counted with these same rules
    when the model was imported (``graph.onnx_control``), times the iterations costed
    (``trips``; an ``If`` counts its costlier branch). A subgraph with an uncounted op
    leaves the op uncounted."""
    a = c.op.attrs
    if not a.get("body_counted", False):
        return _UNCOUNTED
    trips = c.attr_int("trips", 1)
    if trips < 0:
        raise c.fail(f"trips must be >= 0, got {trips}")
    try:
        split = tuple(sorted(((DType.parse(str(d)), int(b) * trips) for d, b in zip(
            c.attr_strs("body_dtypes"), c.attr_ints("body_dtype_bytes", ()), strict=True)
            if int(b)), key=lambda x: x[0].value))
    except ValueError as e:
        raise c.fail(f"body_dtypes/body_dtype_bytes: {e}") from None
    flops = float(a.get("body_flops", 0.0)) * trips  # type: ignore[arg-type]
    return OpCount(flops, c.attr_int("body_bytes_read", 0) * trips,
                   c.attr_int("body_bytes_written", 0) * trips, split, counted=True,
                   is_view=False)

