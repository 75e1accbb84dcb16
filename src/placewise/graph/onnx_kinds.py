"""ONNX nodes as placewise ops: element types, the op-kind table, canonical attributes.

``make_op`` turns one ONNX node into an ``Op``: its kind from a table keyed by op type
(``_KINDS``; a few non-default-domain ops in ``_DOMAIN_KINDS``; anything else
``OpKind.UNKNOWN`` with ``Provenance.source_op = "onnx::Type"``), its attributes under the
canonical names ``OpKind`` documents, read with what ``_Ctx`` knows of shapes, dtypes and
constant values. ``graph.onnx_import`` reads the file and builds the graph with it.

>>> from onnx import helper
>>> node = helper.make_node("Trilu", ["x"], ["y"], upper=0, name="tril")
>>> op = _make_op(node, "tril", ("x",), ("y",), _Ctx({}, {}))
>>> op.kind.value, dict(op.attrs), op.provenance.source_op
('trilu', {'upper': False}, 'onnx::Trilu')
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from placewise.graph.ir import Attrs, Dim, Op, OpKind, Provenance
from placewise.units import DType

if TYPE_CHECKING:
    import numpy as np
    from onnx import NodeProto, TensorProto

__all__ = ["INT8_ONNX_OP_TYPES", "onnx_dtype"]

# ---- dtypes ----------------------------------------------------------------------------------

# ONNX TensorProto.DataType -> DType. Unsigned 16/32/64-bit ints have no DType of their own;
# they map to the signed type of the same width (bytes are what placewise counts).
_DTYPES: dict[int, DType] = {
    1: DType.FP32, 2: DType.UINT8, 3: DType.INT8, 4: DType.INT16, 5: DType.INT16,
    6: DType.INT32, 7: DType.INT64, 9: DType.BOOL, 10: DType.FP16, 11: DType.FP64,
    12: DType.INT32, 13: DType.INT64, 16: DType.BF16, 17: DType.FP8_E4M3,
    18: DType.FP8_E4M3, 19: DType.FP8_E5M2, 20: DType.FP8_E5M2, 21: DType.UINT4,
    22: DType.INT4,
}


def onnx_dtype(elem_type: int) -> DType | None:
    """The placewise dtype of an ONNX element type, or None if placewise has none.

    >>> onnx_dtype(1), onnx_dtype(7), onnx_dtype(8)
    (<DType.FP32: 'fp32'>, <DType.INT64: 'int64'>, None)
    """
    return _DTYPES.get(elem_type)


def _type_name(elem_type: int) -> str:
    from onnx import TensorProto

    try:
        return str(TensorProto.DataType.Name(elem_type))
    except ValueError:
        return f"type #{elem_type}"


@dataclass(frozen=True, slots=True)
class _TypeInfo:
    shape: tuple[Dim, ...]
    dtype: DType | None
    elem_type: int  # the ONNX element type (0 when unknown)
    rank_known: bool = True  # False: ``shape`` is one symbolic dim standing for numel



# ---- op table ------------------------------------------------------------------------------

_KINDS: dict[str, OpKind] = {
    # contractions
    "Conv": OpKind.CONV, "ConvInteger": OpKind.CONV, "QLinearConv": OpKind.CONV,
    "ConvTranspose": OpKind.CONV_TRANSPOSE, "MatMul": OpKind.MATMUL,
    "MatMulInteger": OpKind.MATMUL, "QLinearMatMul": OpKind.MATMUL, "Gemm": OpKind.GEMM,
    "LSTM": OpKind.LSTM, "GRU": OpKind.GRU, "Attention": OpKind.ATTENTION,
    "Einsum": OpKind.EINSUM,
    # normalization
    "LayerNormalization": OpKind.LAYER_NORM, "RMSNormalization": OpKind.RMS_NORM,
    "BatchNormalization": OpKind.BATCH_NORM, "GroupNormalization": OpKind.GROUP_NORM,
    "InstanceNormalization": OpKind.INSTANCE_NORM, "Softmax": OpKind.SOFTMAX,
    "LogSoftmax": OpKind.LOG_SOFTMAX,
    # unary elementwise
    "Relu": OpKind.RELU, "LeakyRelu": OpKind.LEAKY_RELU, "Gelu": OpKind.GELU,
    "Sigmoid": OpKind.SIGMOID, "HardSigmoid": OpKind.HARD_SIGMOID,
    "HardSwish": OpKind.HARD_SWISH, "Tanh": OpKind.TANH, "Elu": OpKind.ELU,
    "Softplus": OpKind.SOFTPLUS, "Exp": OpKind.EXP, "Log": OpKind.LOG, "Sqrt": OpKind.SQRT,
    "Reciprocal": OpKind.RECIPROCAL, "Neg": OpKind.NEG, "Abs": OpKind.ABS, "Erf": OpKind.ERF,
    "Sin": OpKind.SIN, "Cos": OpKind.COS, "Clip": OpKind.CLIP, "Not": OpKind.NOT,
    "BitwiseNot": OpKind.NOT, "IsNaN": OpKind.ISNAN, "IsInf": OpKind.ISINF,
    "Floor": OpKind.FLOOR, "Ceil": OpKind.CEIL, "Round": OpKind.ROUND, "Sign": OpKind.SIGN,
    "Dropout": OpKind.DROPOUT,
    # binary / ternary elementwise
    "Add": OpKind.ADD, "Sum": OpKind.ADD, "Sub": OpKind.SUB, "Mul": OpKind.MUL,
    "Div": OpKind.DIV, "Pow": OpKind.POW, "Max": OpKind.MAXIMUM, "Min": OpKind.MINIMUM,
    "Equal": OpKind.EQUAL, "Less": OpKind.LESS, "LessOrEqual": OpKind.LESS,
    "Greater": OpKind.GREATER, "GreaterOrEqual": OpKind.GREATER, "And": OpKind.AND,
    "Or": OpKind.OR, "Xor": OpKind.XOR, "BitwiseAnd": OpKind.AND, "BitwiseOr": OpKind.OR,
    "BitwiseXor": OpKind.XOR, "Mod": OpKind.MOD, "Where": OpKind.WHERE,
    "Trilu": OpKind.TRILU,
    # reductions
    "ReduceSum": OpKind.REDUCE_SUM, "ReduceSumSquare": OpKind.REDUCE_SUM,
    "ReduceL1": OpKind.REDUCE_SUM, "ReduceL2": OpKind.REDUCE_SUM,
    "ReduceLogSum": OpKind.REDUCE_SUM, "ReduceLogSumExp": OpKind.REDUCE_SUM,
    "ReduceMean": OpKind.REDUCE_MEAN, "ReduceMax": OpKind.REDUCE_MAX,
    "ReduceMin": OpKind.REDUCE_MIN, "ReduceProd": OpKind.REDUCE_PROD,
    "ArgMax": OpKind.ARGMAX, "ArgMin": OpKind.ARGMAX, "CumSum": OpKind.CUMSUM,
    "TopK": OpKind.TOPK,
    # pooling
    "MaxPool": OpKind.MAX_POOL, "AveragePool": OpKind.AVG_POOL,
    "GlobalAveragePool": OpKind.GLOBAL_AVG_POOL, "GlobalMaxPool": OpKind.GLOBAL_MAX_POOL,
    # data movement
    "Gather": OpKind.GATHER, "GatherElements": OpKind.GATHER, "GatherND": OpKind.GATHER,
    "Scatter": OpKind.SCATTER, "ScatterElements": OpKind.SCATTER, "ScatterND": OpKind.SCATTER,
    "Concat": OpKind.CONCAT, "Split": OpKind.SPLIT, "Slice": OpKind.SLICE,
    "Transpose": OpKind.TRANSPOSE, "Pad": OpKind.PAD, "Expand": OpKind.EXPAND,
    "Tile": OpKind.TILE, "Resize": OpKind.RESIZE, "OneHot": OpKind.ONE_HOT,
    # views
    "Reshape": OpKind.RESHAPE, "Flatten": OpKind.FLATTEN, "Squeeze": OpKind.SQUEEZE,
    "Unsqueeze": OpKind.UNSQUEEZE, "Identity": OpKind.IDENTITY,
    # conversions
    "QuantizeLinear": OpKind.QUANTIZE, "DynamicQuantizeLinear": OpKind.QUANTIZE,
    "DequantizeLinear": OpKind.DEQUANTIZE, "Cast": OpKind.CAST, "CastLike": OpKind.CAST,
    # plumbing
    "Shape": OpKind.SHAPE, "Size": OpKind.SHAPE, "ConstantOfShape": OpKind.CONSTANT,
    "Range": OpKind.RANGE,
    # control flow kept as one op (its attributes: graph.onnx_control.control_attrs)
    "If": OpKind.IF, "Loop": OpKind.LOOP, "Scan": OpKind.SCAN,
}

#: ``graph.ir.INT8_KINDS`` as float ONNX spells them: the op types an int8 vertex quantizes
#: (onnxruntime's dynamic quantization makes them MatMulInteger / ConvInteger; a LINEAR
#: exports as MatMul or Gemm, and Gemm becomes MatMul first). The compiler quantizes these
#: (``runtime.compile``) and the emulation quantizes the same (``precision.emulate``);
#: Gather and the other types onnxruntime would quantize by default stay float.
INT8_ONNX_OP_TYPES: tuple[str, ...] = ("MatMul", "Gemm", "Conv")

# a few widely used non-default-domain ops whose meaning matches a kind exactly
_MS = "com.microsoft"
_DOMAIN_KINDS: dict[tuple[str, str], OpKind] = {
    (_MS, "Gelu"): OpKind.GELU,
    (_MS, "SimplifiedLayerNormalization"): OpKind.RMS_NORM,
    # onnxruntime's transformer optimizer
    (_MS, "FusedMatMul"): OpKind.MATMUL,
    (_MS, "BiasGelu"): OpKind.GELU,
    (_MS, "FastGelu"): OpKind.GELU,
    (_MS, "QuickGelu"): OpKind.SILU,
    (_MS, "SkipLayerNormalization"): OpKind.LAYER_NORM,
    (_MS, "SkipSimplifiedLayerNormalization"): OpKind.RMS_NORM,
    (_MS, "EmbedLayerNormalization"): OpKind.LAYER_NORM,
    (_MS, "Attention"): OpKind.ATTENTION,
    (_MS, "QAttention"): OpKind.ATTENTION,
    (_MS, "MultiHeadAttention"): OpKind.ATTENTION,
    # onnxruntime's quantizer (QOperator form, dynamic LSTM)
    (_MS, "QLinearAdd"): OpKind.ADD,
    (_MS, "QLinearMul"): OpKind.MUL,
    (_MS, "QLinearSigmoid"): OpKind.SIGMOID,
    (_MS, "QLinearLeakyRelu"): OpKind.LEAKY_RELU,
    (_MS, "QLinearSoftmax"): OpKind.SOFTMAX,
    (_MS, "QLinearGlobalAveragePool"): OpKind.GLOBAL_AVG_POOL,
    (_MS, "DynamicQuantizeLSTM"): OpKind.LSTM,
}

#: quantized ops whose operands are reordered to the float op's positions (``OpKind``'s
#: ``quant`` attribute): new position -> the node's input index (past the end: absent)
_OPERANDS_FIRST: dict[tuple[str, str], tuple[int, ...]] = {
    (_MS, "MultiHeadAttention"): (0, 1, 2, 4, 3, 5, 6, 7),  # the mask where ATTENTION's is
    (_MS, "QAttention"): (0, 1, 2, 5, 8, 3, 4, 6, 7),  # (x, w, bias, mask, past) as Attention
    ("", "QLinearConv"): (0, 3, 8, 1, 2, 4, 5, 6, 7),
    ("", "QLinearMatMul"): (0, 3, 1, 2, 4, 5, 6, 7),
    (_MS, "QLinearAdd"): (0, 3, 1, 2, 4, 5, 6, 7),
    (_MS, "QLinearMul"): (0, 3, 1, 2, 4, 5, 6, 7),
}

_QUANT: dict[tuple[str, str], str] = {
    ("", "ConvInteger"): "integer", ("", "MatMulInteger"): "integer",
    (_MS, "DynamicQuantizeLSTM"): "integer", ("", "QLinearConv"): "qlinear",
    ("", "QLinearMatMul"): "qlinear", (_MS, "QAttention"): "integer",
    **{(_MS, t): "qlinear" for t in ("QLinearAdd", "QLinearMul", "QLinearSigmoid",
                                      "QLinearLeakyRelu", "QLinearSoftmax",
                                      "QLinearGlobalAveragePool")},
}

_REDUCE_VARIANT = {"ReduceSumSquare": "sum_square", "ReduceL1": "l1", "ReduceL2": "l2",
                   "ReduceLogSum": "log_sum", "ReduceLogSumExp": "log_sum_exp"}


class _Ctx:
    """What attribute canonicalizers may look at: shapes, dtypes and constant values."""

    def __init__(self, infos: Mapping[str, _TypeInfo], consts: Mapping[str, TensorProto]):
        self.infos = infos
        self.consts = consts

    def rank(self, name: str) -> int | None:
        info = self.infos.get(name) if name else None
        return len(info.shape) if info is not None and info.rank_known else None

    def shape(self, name: str) -> tuple[Dim, ...] | None:
        info = self.infos.get(name) if name else None
        return info.shape if info is not None and info.rank_known else None

    def value(self, name: str) -> np.ndarray | None:
        from onnx import TensorProto, numpy_helper

        t = self.consts.get(name) if name else None
        if t is None or t.data_location == TensorProto.EXTERNAL:
            return None
        try:
            return numpy_helper.to_array(t)
        except Exception:
            return None

    def ints(self, name: str) -> tuple[int, ...] | None:
        v = self.value(name)
        if v is None or v.dtype.kind not in "iu":
            return None
        return tuple(int(x) for x in v.reshape(-1))


def _attr_dict(node: NodeProto) -> dict[str, Any]:
    from onnx import helper

    out: dict[str, Any] = {}
    for attr in node.attribute:
        try:
            out[attr.name] = helper.get_attribute_value(attr)
        except Exception:
            continue
    return out


def _norm_axis(axis: int, rank: int | None) -> int:
    return axis + rank if axis < 0 and rank is not None else axis


def _spatial_attrs(node: NodeProto, a: Mapping[str, Any], ctx: _Ctx, *, pool: bool
                   ) -> dict[str, Any]:
    x = node.input[0] if node.input else ""
    kernel = a.get("kernel_shape")
    if kernel is None and not pool and len(node.input) > 1:
        wshape = ctx.shape(node.input[1])
        if wshape is not None and len(wshape) > 2 and all(isinstance(d, int)
                                                          for d in wshape[2:]):
            kernel = [int(d) for d in wshape[2:]]
    xshape = ctx.shape(x)
    nsp = len(kernel) if kernel is not None else (len(xshape) - 2 if xshape else 0)
    out: dict[str, Any] = {
        "strides": tuple(a.get("strides", [1] * nsp)),
        "dilations": tuple(a.get("dilations", [1] * nsp)),
        "pads": tuple(a.get("pads", [0] * (2 * nsp))),
    }
    if kernel is not None:
        out["kernel_shape"] = tuple(int(k) for k in kernel)
    auto_pad = a.get("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER") and kernel is not None:
        spatial = xshape[2:] if xshape is not None else ()
        if len(spatial) == nsp and all(isinstance(d, int) for d in spatial):
            begin, end = [], []
            for size, k, s, dil in zip(spatial, kernel, out["strides"], out["dilations"],
                                       strict=True):
                target = -(-int(size) // int(s))
                total = max(0, (target - 1) * s + (k - 1) * dil + 1 - int(size))
                small, big = total // 2, total - total // 2
                begin.append(small if auto_pad == "SAME_UPPER" else big)
                end.append(big if auto_pad == "SAME_UPPER" else small)
            out["pads"] = (*begin, *end)
        else:
            out["auto_pad"] = auto_pad
    elif auto_pad == "VALID":
        out["pads"] = (0,) * (2 * nsp)
    if not pool:
        out["group"] = int(a.get("group", 1))
    if "output_padding" in a or node.op_type == "ConvTranspose":
        out["output_padding"] = tuple(a.get("output_padding", [0] * nsp))
    if pool:
        if a.get("ceil_mode"):
            out["ceil_mode"] = True
        if node.op_type == "AveragePool":
            out["count_include_pad"] = bool(a.get("count_include_pad", 0))
    return out


def _reduce_attrs(node: NodeProto, a: Mapping[str, Any], ctx: _Ctx) -> dict[str, Any]:
    rank = ctx.rank(node.input[0]) if node.input else None
    axes: Sequence[int] | None = a.get("axes")
    out: dict[str, Any] = {"keepdims": bool(a.get("keepdims", 1))}
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = ctx.ints(node.input[1])
        if axes is None:
            out["axes_from_input"] = True  # runtime axes; shapes tell the result
    out["axes"] = tuple(sorted(_norm_axis(int(x), rank) for x in (axes or ())))
    if a.get("noop_with_empty_axes"):
        out["noop_with_empty_axes"] = True
    if node.op_type in _REDUCE_VARIANT:
        out["variant"] = _REDUCE_VARIANT[node.op_type]
    return out


def _canonical_attrs(kind: OpKind, node: NodeProto, ctx: _Ctx) -> dict[str, Any]:
    a = _attr_dict(node)
    x = node.input[0] if node.input else ""
    rank = ctx.rank(x)
    t = node.op_type
    if kind in (OpKind.CONV, OpKind.CONV_TRANSPOSE):
        return _spatial_attrs(node, a, ctx, pool=False)
    if kind in (OpKind.MAX_POOL, OpKind.AVG_POOL):
        return _spatial_attrs(node, a, ctx, pool=True)
    if kind is OpKind.GEMM:
        return {"trans_a": bool(a.get("transA", 0)), "trans_b": bool(a.get("transB", 0)),
                "alpha": float(a.get("alpha", 1.0)), "beta": float(a.get("beta", 1.0))}
    if kind is OpKind.ATTENTION:
        out: dict[str, Any] = {"is_causal": bool(a.get("is_causal", 0))}
        if "scale" in a:
            out["scale"] = float(a["scale"])
        for key in ("q_num_heads", "kv_num_heads"):
            if key in a:
                out[key] = int(a[key])
        return out
    if kind in (OpKind.LSTM, OpKind.GRU):
        direction = a.get("direction", b"forward")
        return {"hidden_size": int(a.get("hidden_size", 0)),
                "direction": direction.decode() if isinstance(direction, bytes)
                else str(direction), "layout": int(a.get("layout", 0))}
    if kind in (OpKind.LAYER_NORM, OpKind.RMS_NORM):
        return {"axis": _norm_axis(int(a.get("axis", -1)), rank),
                "epsilon": float(a.get("epsilon", 1e-5))}
    if kind is OpKind.BATCH_NORM:
        return {"axis": 1, "epsilon": float(a.get("epsilon", 1e-5))}
    if kind is OpKind.GROUP_NORM:
        return {"axis": 1, "epsilon": float(a.get("epsilon", 1e-5)),
                "num_groups": int(a.get("num_groups", 1))}
    if kind is OpKind.INSTANCE_NORM:
        return {"axis": 2, "epsilon": float(a.get("epsilon", 1e-5))}
    if kind in (OpKind.SOFTMAX, OpKind.LOG_SOFTMAX):
        return {"axis": _norm_axis(int(a.get("axis", -1)), rank)}
    if kind in (OpKind.REDUCE_SUM, OpKind.REDUCE_MEAN, OpKind.REDUCE_MAX, OpKind.REDUCE_MIN,
                OpKind.REDUCE_PROD):
        return _reduce_attrs(node, a, ctx)
    if kind is OpKind.ARGMAX:
        out = {"axes": (_norm_axis(int(a.get("axis", 0)), rank),),
               "keepdims": bool(a.get("keepdims", 1))}
        if t == "ArgMin":
            out["variant"] = "argmin"
        return out
    if kind is OpKind.CUMSUM:
        axis = ctx.ints(node.input[1]) if len(node.input) > 1 else None
        return {} if not axis else {"axis": _norm_axis(axis[0], rank)}
    if kind is OpKind.TOPK:
        out = {"axis": _norm_axis(int(a.get("axis", -1)), rank)}
        k = ctx.ints(node.input[1]) if len(node.input) > 1 else None
        if k:
            out["k"] = k[0]
        return out
    if kind in (OpKind.GATHER, OpKind.CONCAT, OpKind.SPLIT, OpKind.FLATTEN):
        out = {"axis": _norm_axis(int(a.get("axis", 1 if kind is OpKind.FLATTEN else 0)),
                                  rank)}
        if t == "GatherND":
            out = {"batch_dims": int(a.get("batch_dims", 0))}
        if t != "Gather" and kind is OpKind.GATHER:
            out["variant"] = "elements" if t == "GatherElements" else "nd"
        return out
    if kind is OpKind.TRANSPOSE:
        perm = a.get("perm")
        if perm is None and rank is not None:
            perm = list(range(rank))[::-1]
        return {} if perm is None else {"perm": tuple(int(p) for p in perm)}
    if kind is OpKind.PAD:
        mode = a.get("mode", b"constant")
        return {"mode": mode.decode() if isinstance(mode, bytes) else str(mode)}
    if kind in (OpKind.QUANTIZE, OpKind.DEQUANTIZE):
        scale_shape = ctx.shape(node.input[1]) if len(node.input) > 1 else None
        if scale_shape is not None and len(scale_shape) >= 1 and scale_shape != (1,):
            return {"axis": _norm_axis(int(a.get("axis", 1)), rank)}
        return {}
    if kind is OpKind.CAST:
        if t == "CastLike":
            info = ctx.infos.get(node.input[1]) if len(node.input) > 1 else None
            dt = info.dtype if info is not None else None
        else:
            dt = onnx_dtype(int(a.get("to", 0)))
        return {} if dt is None else {"to": dt.value}
    return _scalar_attrs(kind, a)


def _scalar_attrs(kind: OpKind, a: dict[str, Any]) -> dict[str, Any]:
    """The attributes of kinds that keep a few scalars (einsum, trilu, mod, activations)."""
    if kind is OpKind.EINSUM:
        eq = a.get("equation", b"")
        return {"equation": eq.decode() if isinstance(eq, bytes) else str(eq)}
    if kind is OpKind.TRILU:
        return {"upper": bool(a.get("upper", 1))}
    if kind is OpKind.MOD:
        return {"fmod": bool(a.get("fmod", 0))}
    if kind is OpKind.LEAKY_RELU:
        return {"alpha": float(a.get("alpha", 0.01))}
    if kind is OpKind.ELU:
        return {"alpha": float(a.get("alpha", 1.0))}
    if kind is OpKind.GELU:
        approx = a.get("approximate", b"none")
        return {"approximate": approx.decode() if isinstance(approx, bytes) else str(approx)}
    if kind is OpKind.HARD_SIGMOID:
        return {"alpha": float(a.get("alpha", 0.2)), "beta": float(a.get("beta", 0.5))}
    return {}


def _str(v: Any, default: str) -> str:
    if v is None:
        return default
    return v.decode() if isinstance(v, bytes) else str(v)


def _extra_attrs(kind: OpKind, node: NodeProto, ctx: _Ctx) -> dict[str, Any] | None:
    """Attributes beyond ``_canonical_attrs`` for ops whose meaning a kind covers with a
    variant (contrib, quantized, resize); None when this op's form is one placewise does
    not count (it stays ``UNKNOWN``)."""
    a = _attr_dict(node)
    key = (node.domain if node.domain not in ("", "ai.onnx") else "", node.op_type)
    out: dict[str, Any] = {}
    if key in _QUANT:
        out["quant"] = _QUANT[key]
    t = node.op_type
    if kind is OpKind.RESIZE:
        out["mode"] = _str(a.get("mode"), "nearest")
    elif kind is OpKind.ONE_HOT:
        out["axis"] = int(a.get("axis", -1))
    elif kind is OpKind.QUANTIZE and t == "DynamicQuantizeLinear":
        out["variant"] = "dynamic"
    elif key == (_MS, "FusedMatMul"):
        if a.get("transBatchA") or a.get("transBatchB"):
            return None
        out.update(trans_a=bool(a.get("transA", 0)), trans_b=bool(a.get("transB", 0)))
    elif key in ((_MS, "BiasGelu"), (_MS, "FastGelu")):
        out["approximate"] = "none" if t == "BiasGelu" else "tanh"
        if len(node.input) > 1 and node.input[1]:
            out["bias"] = True
    elif key == (_MS, "QuickGelu"):
        out["alpha"] = float(a.get("alpha", 1.702))
    elif key in ((_MS, "SkipLayerNormalization"), (_MS, "SkipSimplifiedLayerNormalization"),
                 (_MS, "EmbedLayerNormalization")):
        rank = ctx.rank(node.input[0]) if node.input else None
        out["axis"] = rank - 1 if rank else -1
        out["epsilon"] = float(a.get("epsilon", 1e-12))
        out["variant"] = "embed" if t == "EmbedLayerNormalization" else "skip"
    elif key in ((_MS, "Attention"), (_MS, "QAttention")):
        out.update(variant="packed", num_heads=int(a.get("num_heads", 0)),
                   is_causal=bool(a.get("unidirectional", 0)))
        if a.get("qkv_hidden_sizes"):
            out["qkv_hidden_sizes"] = tuple(int(x) for x in a["qkv_hidden_sizes"])
        if out["num_heads"] < 1:
            return None
    elif key == (_MS, "MultiHeadAttention"):
        ranks = [ctx.rank(node.input[i]) if len(node.input) > i else None for i in range(3)]
        if ranks != [3, 3, 3] or int(a.get("num_heads", 0)) < 1:
            return None  # packed q/k/v or per-head layouts: not counted
        out.update(num_heads=int(a["num_heads"]), is_causal=bool(a.get("unidirectional", 0)))
    return out


def _operands_first(node: NodeProto) -> tuple[str, ...] | None:
    """A quantized op's inputs in the float op's order (``_OPERANDS_FIRST``), else None."""
    key = (node.domain if node.domain not in ("", "ai.onnx") else "", node.op_type)
    order = _OPERANDS_FIRST.get(key)
    if order is None:
        return None
    ins = list(node.input)
    return tuple(ins[i] if i < len(ins) else "" for i in order)


def _module_path(node: NodeProto) -> str:
    """The innermost torch module path, when the torch exporter left its name scopes."""
    for prop in node.metadata_props:
        if prop.key == "pkg.torch.onnx.name_scopes":
            try:
                scopes = ast.literal_eval(prop.value)
            except (ValueError, SyntaxError):
                return ""
            if isinstance(scopes, list) and len(scopes) >= 2:
                inner = str(scopes[-2])
                return "" if inner.startswith("_empty") else inner
    return ""



def _make_op(node: NodeProto, name: str, inputs: Sequence[str], outputs: tuple[str, ...],
             ctx: _Ctx) -> Op:
    domain = node.domain if node.domain not in ("", "ai.onnx") else ""
    source_op = f"onnx::{domain}::{node.op_type}" if domain else f"onnx::{node.op_type}"
    kind = (_DOMAIN_KINDS.get((domain, node.op_type), OpKind.UNKNOWN) if domain
            else _KINDS.get(node.op_type, OpKind.UNKNOWN))
    attrs: dict[str, Any] = {}
    if kind is not OpKind.UNKNOWN:
        try:
            attrs = _canonical_attrs(kind, node, ctx)
            extra = _extra_attrs(kind, node, ctx)
        except (TypeError, ValueError, AttributeError):
            # malformed attributes: an honest UNKNOWN beats guessed attributes
            extra = None
        if extra is None:
            kind, attrs = OpKind.UNKNOWN, {}
        else:
            attrs.update(extra)
            reordered = _operands_first(node)
            if reordered is not None:
                inputs = (*reordered, *inputs[len(node.input):])
    if kind is OpKind.GATHER and node.op_type == "Gather" and _is_embedding(node, ctx):
        kind = OpKind.EMBEDDING
        attrs = {}
    return Op(name, kind, tuple(inputs), outputs, Attrs.of(attrs),
              Provenance(source=name, source_op=source_op, module_path=_module_path(node)))


def _is_embedding(node: NodeProto, ctx: _Ctx) -> bool:
    """A Gather along axis 0 of a 2-D parameter table by run-time integer indices."""
    if len(node.input) != 2:
        return False
    axis = 0
    for attr in node.attribute:
        if attr.name == "axis":
            axis = int(attr.i)
    table, idx = node.input
    tshape = ctx.shape(table)
    return (axis == 0 and table in ctx.consts and tshape is not None and len(tshape) == 2
            and idx not in ctx.consts)
