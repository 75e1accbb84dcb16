"""FLOP and byte rules against hand-derived formulas, one small graph per rule."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from placewise.errors import GraphError
from placewise.graph import count as count_mod
from placewise.graph.count import (
    ELEMENTWISE_FLOPS,
    GRU_ELEMENTWISE_FLOPS_PER_HIDDEN,
    LSTM_ELEMENTWISE_FLOPS_PER_HIDDEN,
    SOFTMAX_FLOPS_PER_ELEMENT,
    TRANSCENDENTAL_FLOPS,
    OpCount,
    count_graph,
    count_op,
    has_rule,
)
from placewise.graph.ir import Attrs, Graph, Op, OpKind, Provenance, Role, TaskHint, Tensor
from placewise.units import DType
from tests.strategies import random_graphs

F32, F16, I64 = DType.FP32, DType.FP16, DType.INT64
T = TRANSCENDENTAL_FLOPS

Spec = tuple[str, tuple[Any, ...]] | tuple[str, tuple[Any, ...], DType]


def _tensors(specs: list[Spec], role: Role) -> list[Tensor]:
    out = []
    for s in specs:
        dtype = s[2] if len(s) == 3 else F32
        out.append(Tensor(s[0], tuple(s[1]), dtype, role=role))
    return out


def one(kind: OpKind, ins: list[Spec], outs: list[Spec], attrs: dict[str, Any] | None = None,
        *, op_inputs: tuple[str, ...] | None = None, hint: TaskHint | None = None) -> OpCount:
    """Count a graph holding a single op of ``kind`` (inputs are graph inputs)."""
    tensors = _tensors(ins, Role.INPUT) + _tensors(outs, Role.OUTPUT)
    op = Op("the_op", kind, op_inputs if op_inputs is not None else tuple(s[0] for s in ins),
            tuple(s[0] for s in outs), Attrs.of(attrs or {}),
            Provenance(source="n1", source_op="test::Op"), hint=hint)
    g = Graph.build("g", tensors, [op])
    return count_op(g, g.op("the_op"))


def nbytes(*shapes_and_dtypes: tuple[tuple[int, ...], DType]) -> int:
    return sum(d.nbytes(math.prod(s)) for s, d in shapes_and_dtypes)


# ---- contractions ------------------------------------------------------------------------


def test_matmul_2d() -> None:
    c = one(OpKind.MATMUL, [("a", (8, 16)), ("b", (16, 4))], [("y", (8, 4))])
    assert c.flops == 2 * 8 * 4 * 16
    assert c.bytes_read == (8 * 16 + 16 * 4) * 4
    assert c.bytes_written == 8 * 4 * 4
    assert c.bytes_moved == c.bytes_read + c.bytes_written
    assert c.bytes_by_dtype == ((F32, c.bytes_moved),)
    assert c.counted and not c.is_view


def test_matmul_batched_broadcast() -> None:
    c = one(OpKind.MATMUL, [("a", (2, 1, 8, 16)), ("b", (3, 16, 4))], [("y", (2, 3, 8, 4))])
    assert c.flops == 2 * (2 * 3) * 8 * 4 * 16
    assert c.bytes_read == (2 * 8 * 16 + 3 * 16 * 4) * 4
    assert c.bytes_written == 2 * 3 * 8 * 4 * 4


@pytest.mark.parametrize(("sa", "sb", "sy", "flops"), [
    ((16,), (16, 4), (4,), 2 * 4 * 16),
    ((2, 8, 16), (16,), (2, 8), 2 * 2 * 8 * 16),
    ((16,), (16,), (), 2 * 16),
    ((5, 16), (3, 1, 16, 2), (3, 1, 5, 2), 2 * 3 * 5 * 2 * 16),
])
def test_matmul_1d_and_broadcast_cases(sa: tuple[int, ...], sb: tuple[int, ...],
                                       sy: tuple[int, ...], flops: int) -> None:
    c = one(OpKind.MATMUL, [("a", sa), ("b", sb)], [("y", sy)])
    assert c.flops == flops


def test_matmul_inconsistent_shapes_name_the_op() -> None:
    with pytest.raises(GraphError, match="inner dimensions") as e:
        one(OpKind.MATMUL, [("a", (8, 16)), ("b", (15, 4))], [("y", (8, 4))])
    assert "the_op" in str(e.value) and "test::Op" in str(e.value)
    with pytest.raises(GraphError, match="expected \\[8,4\\]"):
        one(OpKind.MATMUL, [("a", (8, 16)), ("b", (16, 4))], [("y", (8, 5))])
    with pytest.raises(GraphError, match="do not broadcast"):
        one(OpKind.MATMUL, [("a", (2, 8, 16)), ("b", (3, 16, 4))], [("y", (2, 8, 4))])


def test_symbolic_shape_raises_naming_op() -> None:
    with pytest.raises(GraphError, match="symbolic") as e:
        one(OpKind.MATMUL, [("a", ("batch", 16)), ("b", (16, 4))], [("y", ("batch", 4))])
    assert "the_op" in str(e.value)


@pytest.mark.parametrize(("ta", "tb"), [(False, False), (True, False), (False, True), (True, True)])
def test_gemm_transposes(ta: bool, tb: bool) -> None:
    m, k, n = 6, 10, 4
    sa = (k, m) if ta else (m, k)
    sb = (n, k) if tb else (k, n)
    c = one(OpKind.GEMM, [("a", sa), ("b", sb)], [("y", (m, n))], {"trans_a": ta, "trans_b": tb})
    assert c.flops == 2 * m * n * k
    with_bias = one(OpKind.GEMM, [("a", sa), ("b", sb), ("c", (n,))], [("y", (m, n))],
                    {"trans_a": ta, "trans_b": tb})
    assert with_bias.flops == 2 * m * n * k + m * n
    assert with_bias.bytes_read == (m * k + k * n + n) * 4


def test_gemm_wrong_transpose_is_inconsistent() -> None:
    with pytest.raises(GraphError, match="inner dimensions"):
        one(OpKind.GEMM, [("a", (6, 10)), ("b", (4, 10))], [("y", (6, 4))])


def test_linear() -> None:
    c = one(OpKind.LINEAR, [("x", (2, 5, 16)), ("w", (32, 16)), ("b", (32,))],
            [("y", (2, 5, 32))])
    assert c.flops == 2 * 10 * 16 * 32 + 10 * 32
    c = one(OpKind.LINEAR, [("x", (2, 5, 16)), ("w", (32, 16))], [("y", (2, 5, 32))])
    assert c.flops == 2 * 10 * 16 * 32
    with pytest.raises(GraphError):
        one(OpKind.LINEAR, [("x", (2, 5, 16)), ("w", (16, 32))], [("y", (2, 5, 32))])


def test_conv_groups_strides_dilations() -> None:
    # X [2,8,16,16], W [12, 8/2, 3, 3], stride 2, dilation 2, pad 2:
    # out = (16 + 4 - 2*(3-1) - 1) // 2 + 1 = 8
    attrs = {"group": 2, "strides": (2, 2), "dilations": (2, 2), "pads": (2, 2, 2, 2),
             "kernel_shape": (3, 3)}
    c = one(OpKind.CONV, [("x", (2, 8, 16, 16)), ("w", (12, 4, 3, 3)), ("b", (12,))],
            [("y", (2, 12, 8, 8))], attrs)
    assert c.flops == 2 * 2 * 12 * 64 * 4 * 9 + 2 * 12 * 64
    assert c.bytes_read == (2 * 8 * 256 + 12 * 4 * 9 + 12) * 4
    assert c.bytes_written == 2 * 12 * 64 * 4
    with pytest.raises(GraphError, match="does not follow"):
        one(OpKind.CONV, [("x", (2, 8, 16, 16)), ("w", (12, 4, 3, 3))],
            [("y", (2, 12, 7, 7))], attrs)
    with pytest.raises(GraphError, match="channels"):
        one(OpKind.CONV, [("x", (2, 8, 16, 16)), ("w", (12, 4, 3, 3))],
            [("y", (2, 12, 8, 8))], {**attrs, "group": 3})


def test_conv_depthwise_1d() -> None:
    c = one(OpKind.CONV, [("x", (1, 6, 20)), ("w", (6, 1, 5))], [("y", (1, 6, 16))],
            {"group": 6, "pads": (0, 0)})
    assert c.flops == 2 * 1 * 6 * 16 * 1 * 5


def test_conv_transpose_is_symmetric_with_conv() -> None:
    # transpose: X [1,4,5,5], W [4,3,3,3], stride 2, pad 1, output_padding 1
    # out = 2*(5-1) + 1 + (3-1) + 1 - 2 = 10
    attrs = {"strides": (2, 2), "pads": (1, 1, 1, 1), "output_padding": (1, 1)}
    ct = one(OpKind.CONV_TRANSPOSE, [("x", (1, 4, 5, 5)), ("w", (4, 3, 3, 3))],
             [("y", (1, 3, 10, 10))], attrs)
    assert ct.flops == 2 * 1 * 4 * 25 * 3 * 9
    # the forward conv mapping [1,3,10,10] back to [1,4,5,5] does the same work
    fwd = one(OpKind.CONV, [("x", (1, 3, 10, 10)), ("w", (4, 3, 3, 3))],
              [("y", (1, 4, 5, 5))], {"strides": (2, 2), "pads": (1, 1, 1, 1)})
    assert fwd.flops == ct.flops
    biased = one(OpKind.CONV_TRANSPOSE, [("x", (1, 4, 5, 5)), ("w", (4, 3, 3, 3)),
                                         ("b", (3,))], [("y", (1, 3, 10, 10))], attrs)
    assert biased.flops == ct.flops + 3 * 100
    with pytest.raises(GraphError, match="does not follow"):
        one(OpKind.CONV_TRANSPOSE, [("x", (1, 4, 5, 5)), ("w", (4, 3, 3, 3))],
            [("y", (1, 3, 9, 9))], attrs)


def test_conv_transpose_groups() -> None:
    c = one(OpKind.CONV_TRANSPOSE, [("x", (2, 4, 3, 3)), ("w", (4, 2, 2, 2))],
            [("y", (2, 4, 6, 6))], {"group": 2, "strides": (2, 2), "pads": (0, 0, 0, 0)})
    assert c.flops == 2 * 2 * 4 * 9 * 2 * 4


def test_attention_with_mask_and_causal() -> None:
    b, lq, s, e, ev = 2 * 4, 8, 10, 16, 32
    ins: list[Spec] = [("q", (2, 4, 8, 16)), ("k", (2, 4, 10, 16)), ("v", (2, 4, 10, 32))]
    scores = b * lq * s
    base = 2 * scores * e + scores + scores * (T + 4) + 2 * scores * ev
    plain = one(OpKind.ATTENTION, ins, [("y", (2, 4, 8, 32))])
    assert plain.flops == base
    masked = one(OpKind.ATTENTION, [*ins, ("m", (8, 10))], [("y", (2, 4, 8, 32))])
    assert masked.flops == base + scores
    assert masked.bytes_read == (8 * 8 * 16 + 8 * 10 * 16 + 8 * 10 * 32 + 80) * 4
    assert masked.bytes_written == 8 * 8 * 32 * 4
    causal = one(OpKind.ATTENTION, ins, [("y", (2, 4, 8, 32))], {"is_causal": True})
    assert causal.flops == masked.flops  # full matrix counted
    with pytest.raises(GraphError, match="disagree"):
        one(OpKind.ATTENTION, [("q", (8, 16)), ("k", (10, 8)), ("v", (10, 4))],
            [("y", (8, 4))])


def test_recurrent_constants_are_the_documented_ones() -> None:
    assert T == 4.0
    sig = T + 2
    assert LSTM_ELEMENTWISE_FLOPS_PER_HIDDEN == 4 + 3 * sig + 2 * T + 4 == 34.0
    assert GRU_ELEMENTWISE_FLOPS_PER_HIDDEN == 4 + T + 2 * sig + 4 == 24.0
    assert SOFTMAX_FLOPS_PER_ELEMENT == T + 4


def test_lstm_formula() -> None:
    seq, batch, isz, h = 5, 2, 10, 8
    c = one(OpKind.LSTM, [("x", (seq, batch, isz)), ("w", (1, 4 * h, isz)),
                          ("r", (1, 4 * h, h)), ("b", (1, 8 * h))],
            [("y", (seq, 1, batch, h))], {"hidden_size": h})
    assert c.flops == seq * batch * 1 * (4 * 2 * h * (isz + h) + h * (34 + 8))
    assert c.bytes_read == (seq * batch * isz + 4 * h * isz + 4 * h * h + 8 * h) * 4


def test_lstm_bidirectional_layout1_no_bias() -> None:
    seq, batch, isz, h = 5, 3, 10, 8
    c = one(OpKind.LSTM, [("x", (batch, seq, isz)), ("w", (2, 4 * h, isz)),
                          ("r", (2, 4 * h, h))],
            [("y", (batch, seq, 2, h))], {"direction": "bidirectional", "layout": 1})
    assert c.flops == seq * batch * 2 * (4 * 2 * h * (isz + h) + h * 34)
    with pytest.raises(GraphError, match="direction"):
        one(OpKind.LSTM, [("x", (batch, seq, isz)), ("w", (2, 4 * h, isz)),
                          ("r", (2, 4 * h, h))],
            [("y", (batch, seq, 2, h))], {"layout": 1})


def test_gru_formula() -> None:
    seq, batch, isz, h = 5, 2, 10, 8
    c = one(OpKind.GRU, [("x", (seq, batch, isz)), ("w", (1, 3 * h, isz)),
                         ("r", (1, 3 * h, h)), ("b", (1, 6 * h))],
            [("y", (seq, 1, batch, h))])
    assert c.flops == seq * batch * (3 * 2 * h * (isz + h) + h * (24 + 6))


# ---- normalization, softmax, elementwise ---------------------------------------------------


def test_norms() -> None:
    ln = one(OpKind.LAYER_NORM, [("x", (4, 10)), ("s", (10,)), ("b", (10,))], [("y", (4, 10))])
    assert ln.flops == 40 * (5 + 2)
    assert ln.bytes_read == (40 + 20) * 4 and ln.bytes_written == 160
    ln_no_bias = one(OpKind.LAYER_NORM, [("x", (4, 10)), ("s", (10,))], [("y", (4, 10))])
    assert ln_no_bias.flops == 40 * 6
    rms = one(OpKind.RMS_NORM, [("x", (4, 10)), ("s", (10,))], [("y", (4, 10))])
    assert rms.flops == 40 * 4
    bn = one(OpKind.BATCH_NORM, [("x", (2, 3, 4, 4)), ("s", (3,)), ("b", (3,)), ("m", (3,)),
                                 ("v", (3,))], [("y", (2, 3, 4, 4))])
    assert bn.flops == 96 * 2
    for kind in (OpKind.GROUP_NORM, OpKind.INSTANCE_NORM):
        c = one(kind, [("x", (2, 4, 3, 3)), ("s", (4,)), ("b", (4,))], [("y", (2, 4, 3, 3))])
        assert c.flops == 72 * 7


@pytest.mark.parametrize("kind", [OpKind.SOFTMAX, OpKind.LOG_SOFTMAX])
def test_softmax(kind: OpKind) -> None:
    c = one(kind, [("x", (3, 7))], [("y", (3, 7))], {"axis": -1})
    assert c.flops == 21 * (T + 4)
    assert c.bytes_moved == 2 * 21 * 4


def test_elementwise_binary_broadcasting() -> None:
    c = one(OpKind.ADD, [("x", (4, 1, 5)), ("y", (3, 1))], [("z", (4, 3, 5))])
    assert c.flops == 60
    assert c.bytes_read == (20 + 3) * 4  # each input once at its own size
    assert c.bytes_written == 60 * 4
    with pytest.raises(GraphError, match="broadcast"):
        one(OpKind.ADD, [("x", (4, 2, 5)), ("y", (3, 1))], [("z", (4, 3, 5))])
    with pytest.raises(GraphError, match="broadcast"):
        one(OpKind.ADD, [("x", (4, 1, 5)), ("y", (3, 1))], [("z", (4, 3, 6))])


def test_elementwise_ternary_where_with_bool_and_scalar() -> None:
    c = one(OpKind.WHERE, [("c", (4, 5), DType.BOOL), ("x", (4, 5)), ("y", ())],
            [("z", (4, 5))])
    assert c.flops == 20
    assert c.bytes_read == 20 + 80 + 4
    assert dict(c.bytes_by_dtype) == {DType.BOOL: 20, F32: 80 + 4 + 80}
    values = [d.value for d, _ in c.bytes_by_dtype]
    assert values == sorted(values)


@pytest.mark.parametrize("kind", [k for k in OpKind if k in ELEMENTWISE_FLOPS])
def test_every_elementwise_kind_uses_its_constant(kind: OpKind) -> None:
    c = one(kind, [("x", (3, 5))], [("y", (3, 5))])
    assert c.flops == 15 * ELEMENTWISE_FLOPS[kind]
    assert c.bytes_moved == 2 * 15 * 4


def test_elementwise_constants() -> None:
    assert ELEMENTWISE_FLOPS[OpKind.RELU] == 1
    assert ELEMENTWISE_FLOPS[OpKind.EXP] == T
    assert ELEMENTWISE_FLOPS[OpKind.SIGMOID] == T + 2
    assert ELEMENTWISE_FLOPS[OpKind.SILU] == T + 3
    assert ELEMENTWISE_FLOPS[OpKind.GELU] == T + 4


# ---- reductions, pooling -----------------------------------------------------------------------


def test_reductions() -> None:
    c = one(OpKind.REDUCE_SUM, [("x", (6, 5))], [("y", (6, 1))], {"axes": (1,)})
    assert c.flops == 30 and c.bytes_read == 120 and c.bytes_written == 24
    am = one(OpKind.ARGMAX, [("x", (6, 5))], [("y", (6,), I64)])
    assert am.flops == 30 and am.bytes_written == 48
    assert dict(am.bytes_by_dtype) == {F32: 120, I64: 48}
    cs = one(OpKind.CUMSUM, [("x", (6, 5)), ("axis", (), I64)], [("y", (6, 5))])
    assert cs.flops == 30 and cs.bytes_read == 120 + 8
    tk = one(OpKind.TOPK, [("x", (6, 5)), ("k", (1,), I64)],
             [("v", (6, 2)), ("i", (6, 2), I64)])
    assert tk.flops == 30 and tk.bytes_written == 12 * 4 + 12 * 8


def test_pooling() -> None:
    # (8 + 2 - 3) // 2 + 1 = 4
    c = one(OpKind.MAX_POOL, [("x", (1, 2, 8, 8))], [("y", (1, 2, 4, 4))],
            {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)})
    assert c.flops == 32 * 9
    a = one(OpKind.AVG_POOL, [("x", (1, 2, 8, 8))], [("y", (1, 2, 4, 4))],
            {"kernel_shape": (2, 2), "strides": (2, 2)})
    assert a.flops == 32 * 4
    g = one(OpKind.GLOBAL_AVG_POOL, [("x", (1, 2, 8, 8))], [("y", (1, 2, 1, 1))])
    assert g.flops == 128 and g.bytes_written == 8
    with pytest.raises(GraphError, match="kernel_shape"):
        one(OpKind.MAX_POOL, [("x", (1, 2, 8, 8))], [("y", (1, 2, 4, 4))])
    with pytest.raises(GraphError, match="does not follow"):
        one(OpKind.MAX_POOL, [("x", (1, 2, 8, 8))], [("y", (1, 2, 5, 5))],
            {"kernel_shape": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)})


# ---- data movement ----------------------------------------------------------------------


def test_gather_reads_only_gathered_rows() -> None:
    c = one(OpKind.GATHER, [("data", (100, 16)), ("idx", (5,), I64)], [("y", (5, 16))],
            {"axis": 0})
    assert c.flops == 0
    assert c.bytes_read == 5 * 8 + 80 * 4
    assert c.bytes_written == 80 * 4
    c1 = one(OpKind.GATHER, [("data", (4, 100)), ("idx", (3,), I64)], [("y", (4, 3))],
             {"axis": 1})
    assert c1.bytes_read == 3 * 8 + 12 * 4
    with pytest.raises(GraphError, match="gathered"):
        one(OpKind.GATHER, [("data", (100, 16)), ("idx", (5,), I64)], [("y", (5, 15))])


def test_embedding() -> None:
    c = one(OpKind.EMBEDDING, [("w", (1000, 64), F16), ("idx", (2, 7), I64)],
            [("y", (2, 7, 64), F16)])
    assert c.flops == 0
    assert c.bytes_read == 14 * 8 + 14 * 64 * 2
    assert c.bytes_written == 14 * 64 * 2
    assert dict(c.bytes_by_dtype) == {F16: 2 * 14 * 64 * 2, I64: 14 * 8}


def test_concat_split_slice_transpose_copies() -> None:
    cc = one(OpKind.CONCAT, [("a", (2, 3)), ("b", (4, 3))], [("y", (6, 3))], {"axis": 0})
    assert cc.flops == 0 and cc.bytes_read == 72 and cc.bytes_written == 72
    sp = one(OpKind.SPLIT, [("x", (6, 3))], [("a", (2, 3)), ("b", (4, 3))], {"axis": 0})
    assert sp.bytes_read == 72 and sp.bytes_written == 72
    sl = one(OpKind.SLICE, [("x", (10, 10)), ("st", (1,), I64), ("en", (1,), I64)],
             [("y", (2, 10))])
    assert sl.bytes_read == 20 * 4 + 8 + 8 and sl.bytes_written == 80
    tr = one(OpKind.TRANSPOSE, [("x", (3, 4))], [("y", (4, 3))], {"perm": (1, 0)})
    assert tr.bytes_moved == 2 * 48
    ex = one(OpKind.EXPAND, [("x", (1, 4)), ("shape", (2,), I64)], [("y", (3, 4))])
    assert ex.bytes_read == 16 + 16 and ex.bytes_written == 48
    with pytest.raises(GraphError, match="concat"):
        one(OpKind.CONCAT, [("a", (2, 3)), ("b", (4, 3))], [("y", (5, 3))])
    with pytest.raises(GraphError, match="split"):
        one(OpKind.SPLIT, [("x", (6, 3))], [("a", (2, 3)), ("b", (3, 3))])


@pytest.mark.parametrize("kind", [OpKind.RESHAPE, OpKind.FLATTEN, OpKind.SQUEEZE,
                                  OpKind.UNSQUEEZE, OpKind.IDENTITY, OpKind.DROPOUT])
def test_views_are_free(kind: OpKind) -> None:
    c = one(kind, [("x", ("n", 6))], [("y", ("n", 2, 3))])  # symbolic is fine: no data moves
    assert c == OpCount(0.0, 0, 0, (), counted=True, is_view=True)


# ---- conversions, plumbing, tasks ---------------------------------------------------------


def test_quantize_to_int4_packs_two_per_byte() -> None:
    c = one(OpKind.QUANTIZE, [("x", (10, 33)), ("s", ()), ("zp", (), DType.INT4)],
            [("y", (10, 33), DType.INT4)])
    assert c.flops == 330 * 2
    assert c.bytes_written == 165  # ceil(330 / 2)
    assert c.bytes_read == 330 * 4 + 4 + 1
    assert dict(c.bytes_by_dtype) == {F32: 1324, DType.INT4: 166}


def test_int4_weight_bytes_round_up_per_tensor() -> None:
    c = one(OpKind.DEQUANTIZE, [("w", (7, 3), DType.INT4), ("s", (7, 1))],
            [("y", (7, 3), F16)])
    assert c.bytes_read == 11 + 28  # 21 nibbles -> 11 bytes
    assert c.bytes_written == 42
    assert c.flops == 21 * 2


def test_cast_and_layout_convert() -> None:
    c = one(OpKind.CAST, [("x", (8, 8))], [("y", (8, 8), DType.BF16)], {"to": "bf16"})
    assert c.flops == 64
    assert c.bytes_by_dtype == ((DType.BF16, 128), (F32, 256))
    lc = one(OpKind.LAYOUT_CONVERT, [("x", (1, 3, 4, 4))], [("y", (1, 3, 4, 4))],
             {"src": "nchw", "dst": "nhwc"})
    assert lc.flops == 0 and lc.bytes_moved == 2 * 48 * 4
    with pytest.raises(GraphError, match="same number of elements"):
        one(OpKind.CAST, [("x", (8, 8))], [("y", (8, 7), DType.BF16)])


def test_shape_constant_range_are_counted_tiny() -> None:
    s = one(OpKind.SHAPE, [("x", (8, 8))], [("y", (2,), I64)])
    assert s.counted and s.flops == 0 and s.bytes_read == 0 and s.bytes_written == 16
    k = one(OpKind.CONSTANT, [], [("y", (3,), I64)])
    assert k.counted and k.bytes_moved == 24
    r = one(OpKind.RANGE, [("a", (), I64), ("b", (), I64), ("d", (), I64)], [("y", (5,), I64)])
    assert r.flops == 0 and r.bytes_moved == 24 + 40


def test_task_uses_hint() -> None:
    c = one(OpKind.TASK, [("in", (100,), DType.UINT8)], [("out", (30,), DType.UINT8)],
            {"dtype": "fp16"}, hint=TaskHint(flops=5e9, bytes_moved=1000))
    assert c.flops == 5e9 and c.bytes_moved == 1000
    assert c.bytes_written == 30 and c.bytes_read == 970
    assert c.bytes_by_dtype == ((F16, 1000),)
    with pytest.raises(GraphError, match="TaskHint"):
        one(OpKind.TASK, [], [("out", (0,), DType.UINT8)])


# ---- coverage --------------------------------------------------------------------------------


def test_every_kind_but_unknown_has_a_rule() -> None:
    assert [k for k in OpKind if not has_rule(k)] == [OpKind.UNKNOWN]


def _graph_with_unknown() -> Graph:
    ts = [Tensor("x", (4, 4), F32, role=Role.INPUT), Tensor("y", (4, 4), F32),
          Tensor("z", (3,), F32, role=Role.OUTPUT)]
    ops = [Op("r", OpKind.RELU, ("x",), ("y",)),
           Op("nms", OpKind.UNKNOWN, ("y",), ("z",),
              provenance=Provenance("NMS_1", "onnx::NonMaxSuppression"))]
    return Graph.build("g", ts, ops)


def test_unknown_is_listed_never_silently_zero() -> None:
    g = _graph_with_unknown()
    c = count_op(g, g.op("nms"))
    assert not c.counted and c.flops == 0 and c.bytes_moved == 0
    gc = count_graph(g)
    assert gc.uncounted == ["unknown(onnx::NonMaxSuppression)"]
    assert gc.coverage == 0.5
    assert gc.flops == 16 and gc.bytes_moved == 128
    assert gc.by_kind[OpKind.UNKNOWN].count == 1
    assert list(gc.by_kind) == [OpKind.RELU, OpKind.UNKNOWN]  # sorted by kind name


def test_kind_without_rule_is_listed_by_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(count_mod._RULES, OpKind.RELU)
    assert not has_rule(OpKind.RELU)
    gc = count_graph(_graph_with_unknown())
    assert gc.uncounted == ["relu", "unknown(onnx::NonMaxSuppression)"]
    assert gc.coverage == 0.0


def test_rule_registered_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="already registered"):
        count_mod.rule(OpKind.RELU)(lambda c: count_mod._VIEW)


def test_count_graph_totals_and_by_kind() -> None:
    ts = [Tensor("x", (8, 16), F32, role=Role.INPUT), Tensor("w", (16, 4), F32, role=Role.PARAM),
          Tensor("h", (8, 4), F32), Tensor("h2", (32,), F32), Tensor("y", (32,), F32,
                                                                     role=Role.OUTPUT)]
    ops = [Op("mm", OpKind.MATMUL, ("x", "w"), ("h",)),
           Op("flat", OpKind.RESHAPE, ("h",), ("h2",)),
           Op("act", OpKind.RELU, ("h2",), ("y",))]
    gc = count_graph(Graph.build("g", ts, ops))
    assert gc.flops == 1024 + 32
    assert gc.bytes_moved == (768 + 128) + 0 + 256
    assert gc.coverage == 1.0 and gc.uncounted == []
    assert gc.by_kind[OpKind.RESHAPE].bytes_moved == 0
    assert gc.per_op["flat"].is_view
    assert count_graph(Graph.build("empty", [], [])).coverage == 1.0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs())
def test_random_graphs_count_consistently(g: Graph) -> None:
    gc = count_graph(g)
    assert set(gc.per_op) == {o.name for o in g.ops}
    assert gc.flops == pytest.approx(sum(c.flops for c in gc.per_op.values()))
    assert gc.bytes_moved == sum(c.bytes_moved for c in gc.per_op.values())
    assert sum(k.count for k in gc.by_kind.values()) == len(g.ops)
    for c in gc.per_op.values():
        assert sum(b for _, b in c.bytes_by_dtype) == c.bytes_moved
        assert c.flops >= 0
    unknown = [o for o in g.ops if o.kind is OpKind.UNKNOWN]
    assert gc.coverage == pytest.approx(1 - len(unknown) / len(g.ops))
    assert bool(gc.uncounted) == bool(unknown)
