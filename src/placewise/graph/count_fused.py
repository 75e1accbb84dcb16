"""Counting rules of fused ops (onnxruntime's transformer optimizer writes them) and of
resampling: packed-QKV attention, skip and embed layer norms, ``Resize``, ``OneHot``.

``graph.count_table`` owns the rule table and the conventions (2 FLOPs per
multiply-accumulate, compulsory bytes); ``graph.count``'s ATTENTION and norm rules hand
their ``variant`` forms to the functions here, and the RESIZE and ONE_HOT rules are
registered here.

>>> from placewise.graph.ir import Attrs, Graph, Op, OpKind, Role, Tensor
>>> from placewise.units import DType
>>> from placewise.graph.count import count_op
>>> g = Graph.build("up", [Tensor("x", (1, 2, 4, 4), DType.FP32, role=Role.INPUT),
...                        Tensor("y", (1, 2, 8, 8), DType.FP32, role=Role.OUTPUT)],
...                 [Op("r", OpKind.RESIZE, ("x",), ("y",), Attrs.of(mode="linear"))])
>>> count_op(g, g.op("r")).flops  # 128 outputs x 4 taps x 2
1024.0
"""

from __future__ import annotations

import math

from placewise.graph.count_table import (
    NORM_FLOPS_PER_ELEMENT,
    OpCount,
    _Ctx,
    _expect_same_numel,
    _fmt,
    attention_flops,
    rule,
)
from placewise.graph.ir import OpKind

__all__ = ["RESIZE_TAPS_PER_AXIS", "fused_norm", "packed_attention"]

#: input samples one output element of ``Resize`` reads along each resized axis, by mode;
#: each tap costs a multiply-accumulate (2 FLOPs). Nearest costs one FLOP per output (the
#: source coordinate; the copy is the bytes).
RESIZE_TAPS_PER_AXIS = {"nearest": 0, "linear": 2, "cubic": 4}


def packed_attention(c: _Ctx) -> OpCount:
    """com.microsoft Attention / QAttention: x [B, S, D] times the packed weights
    [D, Dq+Dk+Dv] plus bias (2*B*S*D*(Dq+Dk+Dv) + B*S*(Dq+Dk+Dv)), then attention over
    ``num_heads`` heads (``count_table.attention_flops``; keys = S plus a ``past`` input's
    length [2, B, N, P, H]); masked when a mask input is given or ``is_causal``."""
    x, w, bias = c.inp(0, "input"), c.inp(1, "weights"), c.opt(2)
    sx, sw = c.shape(x), c.shape(w)
    heads = c.attr_int("num_heads", 1)
    if len(sx) != 3 or len(sw) != 2 or sw[0] != sx[2]:
        raise c.fail(f"attention needs input [B,S,D] and weights [D,3D], got {_fmt(sx)} and "
                     f"{_fmt(sw)}")
    sizes = c.attr_ints("qkv_hidden_sizes", (sw[1] // 3,) * 3)
    if len(sizes) != 3 or sum(sizes) != sw[1] or any(s % heads for s in sizes):
        raise c.fail(f"weights {_fmt(sw)} do not split into q, k, v sizes {_fmt(sizes)} "
                     f"of {heads} heads")
    b, s, d = sx
    past = c.opt(4)
    keys = s + (c.shape(past)[3] if past is not None and len(c.shape(past)) == 5 else 0)
    flops: float = 2 * b * s * d * sw[1] + (b * s * sw[1] if bias is not None else 0)
    masked = c.opt(3) is not None or bool(c.op.attrs.get("is_causal", False))
    flops += attention_flops(b * heads, s, keys, sizes[0] // heads, sizes[2] // heads,
                             masked=masked)
    return c.count(flops)


def fused_norm(c: _Ctx) -> OpCount:
    """``variant="skip"`` (Skip[Simplified]LayerNormalization: x + skip (+ bias), then the
    norm with gamma (and beta)): per element 1 (skip) + the kind's NORM_FLOPS_PER_ELEMENT
    + 1 for gamma, beta and bias each present. ``variant="embed"`` (EmbedLayerNormalization):
    the rows of the word, position (and segment) tables gathered and summed, then the norm
    with gamma and beta; bytes: the ids and the gathered rows, not the whole tables."""
    x = c.inp(0, "input")
    per = NORM_FLOPS_PER_ELEMENT[c.op.kind]
    if c.op.attrs.get("variant") == "skip":
        n = _expect_same_numel(c, x, c.out())
        optional = (2, 3, 4) if c.op.kind is OpKind.LAYER_NORM else (2, 3)
        per += 1.0 + sum(1.0 for i in optional if c.opt(i) is not None)
        return c.count(n * per)
    ids, y = x, c.out()
    sy = c.shape(y)
    tables = [t for t in (c.opt(2), c.opt(3), c.opt(4)) if t is not None]
    if len(sy) != 3 or c.shape(ids) != sy[:2]:
        raise c.fail(f"embed layer norm: ids {ids.shape_str()} and output {y.shape_str()} "
                     f"disagree")
    rows = math.prod(sy)
    flops = rows * (len(tables) - 1 + per + 2.0)  # sum the rows, norm, gamma and beta
    reads = [(t, rows) for t in tables]  # the gathered rows
    others = [c.opt(i) for i in range(len(c.op.inputs)) if i not in (2, 3, 4)]
    reads += [(t, c.numel(t)) for t in others if t is not None]
    return c.count(flops, reads=reads)


@rule(OpKind.RESIZE)
def _resize(c: _Ctx) -> OpCount:
    """Resize: per output element, RESIZE_TAPS_PER_AXIS[mode] taps along each axis whose
    size changes (linear: 2, cubic: 4; taps multiply), 2 FLOPs per tap; nearest 1 FLOP.
    Reads the input once (and the small roi / scales / sizes inputs), writes the output."""
    x, y = c.inp(0, "X"), c.out()
    sx, sy = c.shape(x), c.shape(y)
    if len(sx) != len(sy):
        raise c.fail(f"resize keeps the rank: input {_fmt(sx)}, output {_fmt(sy)}")
    mode = str(c.op.attrs.get("mode", "nearest"))
    if mode not in RESIZE_TAPS_PER_AXIS:
        raise c.fail(f"resize mode {mode!r} is not nearest, linear or cubic")
    axes = sum(1 for a, b in zip(sx, sy, strict=True) if a != b)
    taps = RESIZE_TAPS_PER_AXIS[mode] ** axes if RESIZE_TAPS_PER_AXIS[mode] else 0
    per = 2.0 * taps if taps else 1.0
    return c.count(math.prod(sy) * per)


@rule(OpKind.ONE_HOT)
def _one_hot(c: _Ctx) -> OpCount:
    """OneHot: one compare-and-select per output element; reads the indices, depth and
    values, writes the output."""
    y = c.out()
    idx = c.inp(0, "indices")
    if c.numel(y) % max(1, c.numel(idx)):
        raise c.fail(f"one-hot output {y.shape_str()} is not a multiple of the indices "
                     f"{idx.shape_str()}")
    return c.count(c.numel(y))

