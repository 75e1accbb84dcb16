"""Read a ``torch.export`` program (in memory, from an ``nn.Module``, or from a ``.pt2`` file)
into a placewise ``Graph``.

The graph is taken as exported, without decompositions, so that ``linear``,
``scaled_dot_product_attention`` and the norms stay whole ops. Placeholders are classified by
the program's graph signature: user inputs become ``Role.INPUT`` tensors; parameters, buffers
and lifted constants become ``Role.PARAM`` tensors named by their state-dict key; user outputs
become ``Role.OUTPUT``. Shapes and dtypes come from each node's ``meta["val"]``; symbolic
sizes become ``str`` dims (the sympy expression, e.g. ``"s0*128"``). The module path is the
innermost entry of ``meta["nn_module_stack"]``.

Multi-output ops (``split``, ``native_layer_norm``, ``lstm``...) produce one tensor per tuple
element; the ``getitem`` nodes that pick elements are folded away (the element tensor takes the
``getitem`` node's name). Nodes that compute Python scalars (``sym_size``, ``mul`` on sizes) or
nothing (assertions) are not ops.

>>> import torch
>>> g = import_module(torch.nn.Linear(4, 3), (torch.randn(2, 4),), name="lin")
>>> [(o.kind.value, o.provenance.source_op) for o in g.ops]
[('linear', 'aten.linear.default')]
>>> g.param_bytes, g.tensor(g.outputs[0]).shape
(60, (2, 3))
"""

from __future__ import annotations

import operator
import os
import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeGuard

from placewise.errors import GraphError, ModelFormatError
from placewise.graph.ir import (
    Attrs,
    Dim,
    Graph,
    ImportRecord,
    Op,
    OpKind,
    Provenance,
    Role,
    Tensor,
)
from placewise.graph.pt2 import read_pt2
from placewise.io import shorten
from placewise.units import DType

if TYPE_CHECKING:
    import torch
    from torch.export import ExportedProgram
    from torch.fx import Node

__all__ = ["import_module", "load_exported", "load_pt2", "read_pt2", "torch_dtype"]


# ---- dtypes and dims -------------------------------------------------------------------------


def torch_dtype(dtype: torch.dtype) -> DType | None:
    """The placewise dtype of a torch dtype, or None if placewise has none (complex...).

    Unsigned 16/32/64-bit ints map to the signed type of the same width.

    >>> import torch
    >>> torch_dtype(torch.bfloat16), torch_dtype(torch.complex64)
    (<DType.BF16: 'bf16'>, None)
    """
    return _dtype_table().get(dtype)


_DTYPE_TABLE: dict[Any, DType] = {}


def _dtype_table() -> dict[Any, DType]:
    if not _DTYPE_TABLE:
        import torch

        pairs: list[tuple[str, DType]] = [
            ("float32", DType.FP32), ("float16", DType.FP16), ("bfloat16", DType.BF16),
            ("float64", DType.FP64), ("int8", DType.INT8), ("uint8", DType.UINT8),
            ("int16", DType.INT16), ("int32", DType.INT32), ("int64", DType.INT64),
            ("bool", DType.BOOL), ("uint16", DType.INT16), ("uint32", DType.INT32),
            ("uint64", DType.INT64), ("float8_e4m3fn", DType.FP8_E4M3),
            ("float8_e4m3fnuz", DType.FP8_E4M3), ("float8_e5m2", DType.FP8_E5M2),
            ("float8_e5m2fnuz", DType.FP8_E5M2), ("qint8", DType.INT8),
            ("quint8", DType.UINT8), ("qint32", DType.INT32), ("int4", DType.INT4),
            ("uint4", DType.UINT4), ("quint4x2", DType.UINT4),
        ]
        for attr, dt in pairs:
            tdt = getattr(torch, attr, None)
            if tdt is not None:
                _DTYPE_TABLE[tdt] = dt
    return _DTYPE_TABLE


def _dim(d: Any) -> Dim:
    """An int, or the sympy expression of a SymInt as text ("s0", "128*s0")."""
    if isinstance(d, int):
        return int(d)
    node = getattr(d, "node", None)
    expr = getattr(node, "expr", None)
    if expr is not None:
        if getattr(expr, "is_Integer", False):
            return int(expr)
        return str(expr).replace(" ", "")
    try:
        return int(d)
    except (TypeError, ValueError):
        return str(d)


def _is_tensor(v: Any) -> TypeGuard[torch.Tensor]:
    import torch

    return isinstance(v, torch.Tensor)


# ---- op table ------------------------------------------------------------------------------

# keyed by the overload packet name (``aten.linear``), so every overload maps alike
_KINDS: dict[str, OpKind] = {
    "aten.linear": OpKind.LINEAR, "aten.addmm": OpKind.GEMM, "aten.mm": OpKind.MATMUL,
    "aten.bmm": OpKind.MATMUL, "aten.matmul": OpKind.MATMUL, "aten.conv1d": OpKind.CONV,
    "aten.conv2d": OpKind.CONV, "aten.conv3d": OpKind.CONV, "aten.convolution": OpKind.CONV,
    "aten._convolution": OpKind.CONV, "aten.conv_transpose1d": OpKind.CONV_TRANSPOSE,
    "aten.conv_transpose2d": OpKind.CONV_TRANSPOSE,
    "aten.conv_transpose3d": OpKind.CONV_TRANSPOSE,
    "aten.scaled_dot_product_attention": OpKind.ATTENTION,
    "aten._scaled_dot_product_flash_attention_for_cpu": OpKind.ATTENTION,
    "aten.lstm": OpKind.LSTM, "aten.gru": OpKind.GRU,
    # normalization
    "aten.layer_norm": OpKind.LAYER_NORM, "aten.native_layer_norm": OpKind.LAYER_NORM,
    "aten.rms_norm": OpKind.RMS_NORM, "aten._fused_rms_norm": OpKind.RMS_NORM,
    "aten.batch_norm": OpKind.BATCH_NORM,
    "aten._native_batch_norm_legit_no_training": OpKind.BATCH_NORM,
    "aten.native_batch_norm": OpKind.BATCH_NORM, "aten.group_norm": OpKind.GROUP_NORM,
    "aten.native_group_norm": OpKind.GROUP_NORM, "aten.instance_norm": OpKind.INSTANCE_NORM,
    "aten.softmax": OpKind.SOFTMAX, "aten._softmax": OpKind.SOFTMAX,
    "aten.log_softmax": OpKind.LOG_SOFTMAX, "aten._log_softmax": OpKind.LOG_SOFTMAX,
    # unary elementwise
    "aten.relu": OpKind.RELU, "aten.relu_": OpKind.RELU, "aten.leaky_relu": OpKind.LEAKY_RELU,
    "aten.gelu": OpKind.GELU, "aten.silu": OpKind.SILU, "aten.silu_": OpKind.SILU,
    "aten.sigmoid": OpKind.SIGMOID, "aten.hardsigmoid": OpKind.HARD_SIGMOID,
    "aten.hardswish": OpKind.HARD_SWISH, "aten.tanh": OpKind.TANH, "aten.elu": OpKind.ELU,
    "aten.softplus": OpKind.SOFTPLUS, "aten.exp": OpKind.EXP, "aten.log": OpKind.LOG,
    "aten.sqrt": OpKind.SQRT, "aten.rsqrt": OpKind.RSQRT, "aten.reciprocal": OpKind.RECIPROCAL,
    "aten.neg": OpKind.NEG, "aten.abs": OpKind.ABS, "aten.erf": OpKind.ERF,
    "aten.sin": OpKind.SIN, "aten.cos": OpKind.COS, "aten.clamp": OpKind.CLIP,
    "aten.clip": OpKind.CLIP, "aten.clamp_min": OpKind.CLIP, "aten.clamp_max": OpKind.CLIP,
    "aten.hardtanh": OpKind.CLIP, "aten.relu6": OpKind.CLIP, "aten.logical_not": OpKind.NOT,
    "aten.bitwise_not": OpKind.NOT, "aten.dropout": OpKind.DROPOUT,
    "aten.native_dropout": OpKind.DROPOUT, "aten.feature_dropout": OpKind.DROPOUT,
    "aten.alpha_dropout": OpKind.DROPOUT,
    # binary / ternary elementwise
    "aten.add": OpKind.ADD, "aten.add_": OpKind.ADD, "aten.sub": OpKind.SUB,
    "aten.rsub": OpKind.SUB, "aten.mul": OpKind.MUL, "aten.mul_": OpKind.MUL,
    "aten.div": OpKind.DIV, "aten.div_": OpKind.DIV, "aten.pow": OpKind.POW,
    "aten.maximum": OpKind.MAXIMUM, "aten.minimum": OpKind.MINIMUM, "aten.eq": OpKind.EQUAL,
    "aten.lt": OpKind.LESS, "aten.le": OpKind.LESS, "aten.gt": OpKind.GREATER,
    "aten.ge": OpKind.GREATER, "aten.logical_and": OpKind.AND,
    "aten.bitwise_and": OpKind.AND, "aten.logical_or": OpKind.OR,
    "aten.bitwise_or": OpKind.OR, "aten.where": OpKind.WHERE,
    "aten.__and__": OpKind.AND, "aten.__or__": OpKind.OR, "aten.__xor__": OpKind.XOR,
    "aten.bitwise_xor": OpKind.XOR, "aten.logical_xor": OpKind.XOR,
    "aten.remainder": OpKind.MOD, "aten.fmod": OpKind.MOD, "aten.tril": OpKind.TRILU,
    "aten.triu": OpKind.TRILU, "aten.isnan": OpKind.ISNAN, "aten.isinf": OpKind.ISINF,
    "aten.floor": OpKind.FLOOR, "aten.ceil": OpKind.CEIL, "aten.round": OpKind.ROUND,
    "aten.sign": OpKind.SIGN, "aten.einsum": OpKind.EINSUM,
    # reductions
    "aten.sum": OpKind.REDUCE_SUM, "aten.mean": OpKind.REDUCE_MEAN,
    "aten.amax": OpKind.REDUCE_MAX, "aten.max": OpKind.REDUCE_MAX,
    "aten.amin": OpKind.REDUCE_MIN, "aten.min": OpKind.REDUCE_MIN,
    "aten.prod": OpKind.REDUCE_PROD, "aten.argmax": OpKind.ARGMAX,
    "aten.argmin": OpKind.ARGMAX, "aten.cumsum": OpKind.CUMSUM, "aten.topk": OpKind.TOPK,
    # pooling
    "aten.max_pool1d": OpKind.MAX_POOL, "aten.max_pool2d": OpKind.MAX_POOL,
    "aten.max_pool3d": OpKind.MAX_POOL, "aten.max_pool1d_with_indices": OpKind.MAX_POOL,
    "aten.max_pool2d_with_indices": OpKind.MAX_POOL,
    "aten.max_pool3d_with_indices": OpKind.MAX_POOL,
    "aten.avg_pool1d": OpKind.AVG_POOL, "aten.avg_pool2d": OpKind.AVG_POOL,
    "aten.avg_pool3d": OpKind.AVG_POOL, "aten.adaptive_avg_pool1d": OpKind.AVG_POOL,
    "aten.adaptive_avg_pool2d": OpKind.AVG_POOL, "aten._adaptive_avg_pool2d": OpKind.AVG_POOL,
    "aten.adaptive_max_pool2d": OpKind.MAX_POOL,
    # data movement
    "aten.embedding": OpKind.EMBEDDING, "aten.index_select": OpKind.GATHER,
    "aten.gather": OpKind.GATHER, "aten.index": OpKind.GATHER, "aten.scatter": OpKind.SCATTER,
    "aten.scatter_add": OpKind.SCATTER, "aten.index_put": OpKind.SCATTER,
    "aten.cat": OpKind.CONCAT, "aten.concat": OpKind.CONCAT, "aten.stack": OpKind.CONCAT,
    "aten.split": OpKind.SPLIT, "aten.split_with_sizes": OpKind.SPLIT,
    "aten.chunk": OpKind.SPLIT, "aten.unbind": OpKind.SPLIT,
    "aten.tensor_split": OpKind.SPLIT, "aten.slice": OpKind.SLICE,
    "aten.select": OpKind.SLICE, "aten.narrow": OpKind.SLICE,
    "aten.permute": OpKind.TRANSPOSE, "aten.transpose": OpKind.TRANSPOSE,
    "aten.t": OpKind.TRANSPOSE, "aten.constant_pad_nd": OpKind.PAD, "aten.pad": OpKind.PAD,
    "aten.expand": OpKind.EXPAND, "aten.expand_as": OpKind.EXPAND, "aten.repeat": OpKind.TILE,
    # views
    "aten.view": OpKind.RESHAPE, "aten.reshape": OpKind.RESHAPE,
    "aten._unsafe_view": OpKind.RESHAPE, "aten.view_as": OpKind.RESHAPE,
    "aten.unflatten": OpKind.RESHAPE, "aten.flatten": OpKind.FLATTEN,
    "aten.squeeze": OpKind.SQUEEZE, "aten.unsqueeze": OpKind.UNSQUEEZE,
    "aten.contiguous": OpKind.IDENTITY, "aten.clone": OpKind.IDENTITY,
    "aten.alias": OpKind.IDENTITY, "aten.detach": OpKind.IDENTITY,
    "aten.lift_fresh_copy": OpKind.IDENTITY,
    # conversions (identity when the dtype does not change)
    "aten._to_copy": OpKind.CAST, "aten.to": OpKind.CAST, "aten.type_as": OpKind.CAST,
    "quantized_decomposed.quantize_per_tensor": OpKind.QUANTIZE,
    "quantized_decomposed.quantize_per_channel": OpKind.QUANTIZE,
    "quantized_decomposed.dequantize_per_tensor": OpKind.DEQUANTIZE,
    "quantized_decomposed.dequantize_per_channel": OpKind.DEQUANTIZE,
    # plumbing
    "aten.arange": OpKind.RANGE, "aten.zeros": OpKind.CONSTANT, "aten.ones": OpKind.CONSTANT,
    "aten.full": OpKind.CONSTANT, "aten.empty": OpKind.CONSTANT,
    "aten.scalar_tensor": OpKind.CONSTANT, "aten.zeros_like": OpKind.CONSTANT,
    "aten.ones_like": OpKind.CONSTANT, "aten.full_like": OpKind.CONSTANT,
    "aten.empty_like": OpKind.CONSTANT, "aten.new_zeros": OpKind.CONSTANT,
    "aten.new_ones": OpKind.CONSTANT, "aten.new_full": OpKind.CONSTANT,
    "aten.new_empty": OpKind.CONSTANT, "aten._shape_as_tensor": OpKind.SHAPE,
}

# targets that compute nothing a device runs (checks, metadata): dropped when they yield no
# tensor
_NON_OPS = re.compile(r"^aten\.(_assert_\w+|sym_\w+|_assert_tensor_metadata)\b")


def _packet(target: Any) -> str:
    """'aten.linear' for torch.ops.aten.linear.default; the qualified name for others."""
    text = _target_name(target)
    parts = text.split(".")
    return ".".join(parts[:2]) if len(parts) >= 3 else text


def _target_name(target: Any) -> str:
    if target is operator.getitem:
        return "getitem"
    name = getattr(target, "name", None)
    if callable(name):  # OpOverload.name() -> "aten::linear" / "aten::linear.out"
        text = str(target)
        if text.count(".") >= 1:
            return text
    if hasattr(target, "__module__") and hasattr(target, "__qualname__"):
        return f"{target.__module__}.{target.__qualname__}"
    return str(target)


@dataclass(frozen=True, slots=True)
class _Args:
    """A call's arguments by schema name (positional and keyword merged)."""

    values: Mapping[str, Any]

    def get(self, key: str, default: Any = None) -> Any:
        v = self.values.get(key, default)
        return default if v is None else v


def _schema_args(node: Node) -> _Args:
    schema = getattr(node.target, "_schema", None)
    merged: dict[str, Any] = {}
    if schema is not None:
        names = [a.name for a in schema.arguments]
        for name, value in zip(names, node.args, strict=False):
            merged[name] = value
    else:
        for i, value in enumerate(node.args):
            merged[f"arg{i}"] = value
    merged.update(node.kwargs)
    return _Args(merged)


def _ints(v: Any, n: int, default: int) -> tuple[int, ...]:
    """Expand a torch int-or-list argument to ``n`` ints."""
    if v is None or (isinstance(v, list | tuple) and len(v) == 0):
        return (default,) * n
    if isinstance(v, list | tuple):
        vals = tuple(int(x) for x in v)
        return vals * n if len(vals) == 1 and n > 1 else vals
    return (int(v),) * n


def _shape_of(node: Any) -> tuple[Dim, ...] | None:
    val = getattr(node, "meta", {}).get("val")
    if _is_tensor(val):
        return tuple(_dim(d) for d in val.shape)
    return None


def _norm(axis: int, rank: int | None) -> int:
    return axis + rank if axis < 0 and rank is not None else axis


def _conv_attrs(a: _Args, node: Node, transposed: bool) -> dict[str, Any]:
    wshape = _shape_of(a.get("weight")) or ()
    nsp = max(len(wshape) - 2, 1)
    kernel = tuple(int(d) if isinstance(d, int) else 0 for d in wshape[2:])
    out: dict[str, Any] = {
        "strides": _ints(a.get("stride"), nsp, 1),
        "dilations": _ints(a.get("dilation"), nsp, 1),
        "group": int(a.get("groups", 1)),
        "kernel_shape": kernel,
    }
    padding = a.get("padding", 0)
    if isinstance(padding, str):
        if padding == "same":
            total = [d * (k - 1) for d, k in zip(out["dilations"], kernel, strict=False)]
            out["pads"] = (*(t // 2 for t in total), *(t - t // 2 for t in total))
        else:
            out["pads"] = (0,) * (2 * nsp)
    else:
        p = _ints(padding, nsp, 0)
        out["pads"] = (*p, *p)
    if transposed:
        out["output_padding"] = _ints(a.get("output_padding"), nsp, 0)
    return out


def _pool_attrs(a: _Args, node: Node, kind: OpKind, packet: str) -> dict[str, Any]:
    xshape = _shape_of(a.get("self", a.get("input"))) or ()
    if packet.startswith(("aten.adaptive", "aten._adaptive")):
        osize = a.get("output_size")
        spatial = xshape[2:] if len(xshape) > 2 else xshape[1:]
        n = len(spatial)
        outs = _ints(osize, n, 1)
        if all(o == 1 for o in outs):
            return {"__kind__": OpKind.GLOBAL_AVG_POOL if kind is OpKind.AVG_POOL
                    else OpKind.GLOBAL_MAX_POOL}
        if all(isinstance(s, int) and s % o == 0 for s, o in zip(spatial, outs, strict=True)):
            k = tuple(int(s) // o for s, o in zip(spatial, outs, strict=True))
            return {"kernel_shape": k, "strides": k, "pads": (0,) * (2 * n),
                    "dilations": (1,) * n}
        return {"output_size": outs, "adaptive": True}
    kernel = tuple(int(k) for k in _ints(a.get("kernel_size"), 1, 1))
    n = len(xshape) - 2 if len(xshape) > 2 else len(kernel)
    kernel = _ints(list(kernel), n, 1)
    stride = a.get("stride")
    strides = kernel if not stride else _ints(stride, n, 1)
    p = _ints(a.get("padding", 0), n, 0)
    out: dict[str, Any] = {"kernel_shape": kernel, "strides": strides, "pads": (*p, *p),
                           "dilations": _ints(a.get("dilation", 1), n, 1)}
    if a.get("ceil_mode", False):
        out["ceil_mode"] = True
    if kind is OpKind.AVG_POOL:
        out["count_include_pad"] = bool(a.get("count_include_pad", True))
    return out


def _axes_attrs(a: _Args, rank: int | None, kind: OpKind, packet: str) -> dict[str, Any]:
    dim = a.get("dim")
    if packet in ("aten.max", "aten.min") and dim is not None and not isinstance(dim, list):
        dims: Sequence[int] = [int(dim)]
    elif isinstance(dim, int):
        dims = [dim]
    elif isinstance(dim, list | tuple):
        dims = [int(d) for d in dim]
    else:
        dims = []
    out: dict[str, Any] = {"axes": tuple(sorted(_norm(int(d), rank) for d in dims)),
                           "keepdims": bool(a.get("keepdim", False))}
    if packet == "aten.argmin":
        out["variant"] = "argmin"
    return out


def _canonical_attrs(kind: OpKind, packet: str, node: Node, a: _Args,
                     in_rank: int | None) -> dict[str, Any]:
    if kind is OpKind.CONV:
        transposed = bool(a.get("transposed", False))
        return {**_conv_attrs(a, node, transposed),
                **({"__kind__": OpKind.CONV_TRANSPOSE} if transposed else {})}
    if kind is OpKind.CONV_TRANSPOSE:
        return _conv_attrs(a, node, True)
    if kind is OpKind.GEMM:
        return {"trans_a": False, "trans_b": False, "alpha": float(a.get("alpha", 1.0)),
                "beta": float(a.get("beta", 1.0))}
    if kind is OpKind.ATTENTION:
        out: dict[str, Any] = {"is_causal": bool(a.get("is_causal", False))}
        if a.get("scale") is not None:
            out["scale"] = float(a.get("scale"))
        if a.get("enable_gqa", False):
            out["enable_gqa"] = True
        return out
    if kind in (OpKind.LSTM, OpKind.GRU):
        hx = a.get("hx")
        hshape = _shape_of(hx[0] if isinstance(hx, list | tuple) and hx else hx) or ()
        hidden = hshape[-1] if hshape and isinstance(hshape[-1], int) else 0
        return {"hidden_size": int(hidden),
                "direction": "bidirectional" if a.get("bidirectional", False) else "forward",
                "layout": 1 if a.get("batch_first", False) else 0,
                "num_layers": int(a.get("num_layers", 1)),
                "has_biases": bool(a.get("has_biases", True))}
    if kind is OpKind.LAYER_NORM or kind is OpKind.RMS_NORM:
        normalized = a.get("normalized_shape", [])
        eps = a.get("eps")
        if eps is None:
            eps = 1e-5 if kind is OpKind.LAYER_NORM else _default_rms_eps(node)
        axis = (in_rank - len(normalized)) if in_rank is not None else -len(normalized)
        return {"axis": int(axis), "epsilon": float(eps)}
    if kind is OpKind.BATCH_NORM:
        return {"axis": 1, "epsilon": float(a.get("eps", 1e-5))}
    if kind is OpKind.GROUP_NORM:
        return {"axis": 1, "epsilon": float(a.get("eps", 1e-5)),
                "num_groups": int(a.get("num_groups", a.get("group", 1)))}
    if kind is OpKind.INSTANCE_NORM:
        return {"axis": 2, "epsilon": float(a.get("eps", 1e-5))}
    if kind in (OpKind.SOFTMAX, OpKind.LOG_SOFTMAX):
        return {"axis": _norm(int(a.get("dim", -1)), in_rank)}
    if kind in (OpKind.REDUCE_SUM, OpKind.REDUCE_MEAN, OpKind.REDUCE_MAX, OpKind.REDUCE_MIN,
                OpKind.REDUCE_PROD, OpKind.ARGMAX):
        return _axes_attrs(a, in_rank, kind, packet)
    if kind is OpKind.EINSUM:
        return {"equation": str(a.get("equation", ""))}
    if kind is OpKind.TRILU:
        return {"upper": packet == "aten.triu", "k": int(a.get("diagonal", 0))}
    if kind is OpKind.MOD:
        return {"fmod": packet == "aten.fmod"}
    if kind is OpKind.CUMSUM:
        return {"axis": _norm(int(a.get("dim", 0)), in_rank)}
    if kind is OpKind.TOPK:
        return {"axis": _norm(int(a.get("dim", -1)), in_rank), "k": int(a.get("k", 1))}
    if kind in (OpKind.MAX_POOL, OpKind.AVG_POOL):
        return _pool_attrs(a, node, kind, packet)
    if kind in (OpKind.GATHER, OpKind.CONCAT, OpKind.SPLIT):
        out = {"axis": _norm(int(a.get("dim", 0)), in_rank)}
        if packet == "aten.stack":
            out["variant"] = "stack"
        elif packet == "aten.gather":
            out["variant"] = "elements"
        elif packet == "aten.index":
            out = {"variant": "index"}
        return out
    if kind is OpKind.TRANSPOSE:
        if packet == "aten.permute":
            return {"perm": tuple(_norm(int(d), in_rank) for d in a.get("dims", []))}
        if in_rank is None:
            return {}
        perm = list(range(in_rank))
        if packet == "aten.t":
            perm.reverse()
        else:
            d0, d1 = _norm(int(a.get("dim0", 0)), in_rank), _norm(int(a.get("dim1", 1)), in_rank)
            perm[d0], perm[d1] = perm[d1], perm[d0]
        return {"perm": tuple(perm)}
    if kind is OpKind.PAD:
        return {"mode": str(a.get("mode", "constant"))}
    if kind is OpKind.QUANTIZE or kind is OpKind.DEQUANTIZE:
        return {"axis": int(a.get("axis"))} if a.get("axis") is not None else {}
    if kind is OpKind.LEAKY_RELU:
        return {"alpha": float(a.get("negative_slope", 0.01))}
    if kind is OpKind.ELU:
        return {"alpha": float(a.get("alpha", 1.0))}
    if kind is OpKind.GELU:
        return {"approximate": str(a.get("approximate", "none"))}
    return {}


def _default_rms_eps(node: Node) -> float:
    import torch

    val = node.meta.get("val")
    dtype = val.dtype if _is_tensor(val) else torch.float32
    return float(torch.finfo(dtype).eps) if dtype.is_floating_point else 1e-6


# ---- the importer ---------------------------------------------------------------------------


def _module_path(node: Node) -> str:
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return ""
    last = list(stack.values())[-1]
    path = str(last[0] if isinstance(last, tuple | list) else last)
    # strict-mode paths look like "L['self'].layers[0].attn"; keep "layers.0.attn"
    path = re.sub(r"^L\['self'\]\.?", "", path)
    path = re.sub(r"\[(\d+)\]", r".\1", path)
    path = re.sub(r"\['([^']*)'\]", r".\1", path)
    return path.strip(".")


def _flatten_nodes(value: Any) -> Iterable[Any]:
    from torch.fx import Node

    if isinstance(value, Node):
        yield value
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _flatten_nodes(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _flatten_nodes(v)


class _Builder:
    def __init__(self, ep: ExportedProgram, name: str, file: str | None):
        self.ep = ep
        self.name = name
        self.file = file
        self.tensors: dict[str, Tensor] = {}
        self.node_tensor: dict[Node, str] = {}  # fx node -> tensor name (single output)
        self.node_outputs: dict[Node, list[str]] = {}  # multi-output node -> element tensors
        self.used: set[str] = set()
        self.ops: list[Op] = []

    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.used:
            name = f"{base}_{k}"
            k += 1
        self.used.add(name)
        return name

    def add_tensor(self, base: str, val: Any, role: Role, where: str) -> str:
        dtype = torch_dtype(val.dtype)
        if dtype is None:
            raise GraphError(f"dtype {val.dtype} is not supported by placewise", file=self.file,
                             place=where)
        tname = self.fresh(base)
        self.tensors[tname] = Tensor(tname, tuple(_dim(d) for d in val.shape), dtype,
                                     role=role)
        return tname

    def build(self) -> Graph:
        from torch.export.graph_signature import InputKind, OutputKind

        sig = self.ep.graph_signature
        kinds = {spec.arg.name: spec for spec in sig.input_specs
                 if hasattr(spec.arg, "name")}
        placeholders = [n for n in self.ep.graph.nodes if n.op == "placeholder"]
        # parameters first, so that they claim their state-dict names
        inputs: list[str] = []
        for node in sorted(placeholders, key=lambda n: kinds.get(n.name) is None or
                           kinds[n.name].kind is InputKind.USER_INPUT):
            val = node.meta.get("val")
            if not _is_tensor(val):
                continue  # SymInt / scalar / opaque inputs carry no tensor
            spec = kinds.get(node.name)
            if spec is None or spec.kind is InputKind.USER_INPUT:
                self.node_tensor[node] = self.add_tensor(node.name, val, Role.INPUT,
                                                         f"input {node.name!r}")
            elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER,
                               InputKind.CONSTANT_TENSOR):
                base = spec.target or node.name
                self.node_tensor[node] = self.add_tensor(base, val, Role.PARAM,
                                                         f"parameter {base!r}")
            else:  # tokens, custom objects: not data placewise places
                continue
        for node in placeholders:  # keep the user's input order
            if node in self.node_tensor and \
                    self.tensors[self.node_tensor[node]].role is Role.INPUT:
                inputs.append(self.node_tensor[node])

        for node in self.ep.graph.nodes:
            if node.op == "get_attr":
                val = getattr(self.ep.graph_module, str(node.target), None)
                if _is_tensor(val):
                    self.node_tensor[node] = self.add_tensor(str(node.target), val, Role.PARAM,
                                                             f"constant {node.target!r}")
            elif node.op == "call_function":
                self.call(node)

        user_outputs: list[str] = []
        out_node = next(n for n in self.ep.graph.nodes if n.op == "output")
        out_values = list(_flatten_outputs(out_node.args[0]))
        for spec, value in zip(sig.output_specs, out_values, strict=False):
            if spec.kind is not OutputKind.USER_OUTPUT:
                continue
            tname = self._tensor_of(value)
            if tname is not None and tname not in user_outputs:
                user_outputs.append(tname)
        for tname in user_outputs:
            t = self.tensors[tname]
            if t.role is Role.ACTIVATION:
                self.tensors[tname] = Tensor(t.name, t.shape, t.dtype, t.layout, Role.OUTPUT)
        ops, tensors = _live(self.ops, list(self.tensors.values()), user_outputs)
        return Graph.build(self.name, tensors, ops, inputs, user_outputs,
                           file=self.file, record=ImportRecord("torch.export"))

    def _tensor_of(self, value: Any) -> str | None:
        from torch.fx import Node

        if isinstance(value, Node):
            return self.node_tensor.get(value)
        return None

    def call(self, node: Node) -> None:
        target = node.target
        val = node.meta.get("val")
        if target is operator.getitem:
            src, idx = node.args[0], node.args[1]
            outs = self.node_outputs.get(src)  # type: ignore[arg-type]
            if outs is not None and isinstance(idx, int) and 0 <= idx < len(outs) and outs[idx]:
                self.node_tensor[node] = outs[idx]
            elif _is_tensor(val):  # a getitem we cannot fold: keep it as an unknown op
                self.emit(node, "getitem", OpKind.UNKNOWN, {}, [self.add_tensor(
                    node.name, val, Role.ACTIVATION, f"node {node.name!r}")])
            return
        name = _target_name(target)
        packet = _packet(target)
        if isinstance(val, list | tuple) and any(_is_tensor(v) for v in val):
            elems: list[str] = []
            for i, v in enumerate(val):
                elems.append(self.add_tensor(self._element_name(node, i), v, Role.ACTIVATION,
                                            f"node {node.name!r}") if _is_tensor(v) else "")
            self.node_outputs[node] = elems
            self.emit(node, name, _KINDS.get(packet, OpKind.UNKNOWN), {}, elems)
            return
        if not _is_tensor(val):
            return  # a Python scalar / SymInt computation, an assertion, or nothing
        if _NON_OPS.match(name):
            return
        out = self.add_tensor(node.name, val, Role.ACTIVATION, f"node {node.name!r}")
        self.node_tensor[node] = out
        self.emit(node, name, _KINDS.get(packet, OpKind.UNKNOWN), {}, [out])

    def _element_name(self, node: Node, index: int) -> str:
        for user in node.users:
            if user.target is operator.getitem and user.args[1] == index:
                return user.name
        return f"{node.name}_out{index}"

    def emit(self, node: Node, source_op: str, kind: OpKind, attrs: dict[str, Any],
             outputs: Sequence[str]) -> None:
        packet = _packet(node.target)
        a = _schema_args(node)
        inputs = self._inputs(node, kind, packet, a)
        in_rank = None
        if inputs:
            first = self.tensors.get(inputs[0])
            in_rank = len(first.shape) if first is not None else None
        if kind is not OpKind.UNKNOWN:
            try:
                attrs = _canonical_attrs(kind, packet, node, a, in_rank)
            except (TypeError, ValueError, AttributeError):
                # arguments this importer cannot read (symbolic where ints are expected...):
                # keep the op honest as UNKNOWN rather than guess its attributes
                kind, attrs = OpKind.UNKNOWN, {}
            new_kind = attrs.pop("__kind__", None)
            if new_kind is not None:
                kind = new_kind
            if kind is OpKind.CAST:
                kind, attrs = self._cast(inputs, outputs)
        # fx node names are unique within a graph: they name the ops
        self.ops.append(Op(node.name, kind, tuple(inputs), tuple(o for o in outputs if o),
                           Attrs.of(attrs),
                           Provenance(source=node.name, source_op=source_op,
                                      module_path=_module_path(node))))

    def _cast(self, inputs: Sequence[str], outputs: Sequence[str]
              ) -> tuple[OpKind, dict[str, Any]]:
        src = self.tensors.get(inputs[0]) if inputs else None
        dst = self.tensors.get(outputs[0]) if outputs else None
        if src is None or dst is None or src.dtype is dst.dtype:
            return OpKind.IDENTITY, {}
        return OpKind.CAST, {"to": dst.dtype.value}

    def _inputs(self, node: Node, kind: OpKind, packet: str, a: _Args) -> list[str]:
        names: list[str] = []
        for arg in [*node.args, *node.kwargs.values()]:
            for n in _flatten_nodes(arg):
                t = self.node_tensor.get(n)
                if t is not None:
                    names.append(t)
        if kind is OpKind.GEMM and packet == "aten.addmm" and len(names) == 3:
            names = [names[1], names[2], names[0]]  # addmm(C, A, B) -> (A, B, C)
        if kind in (OpKind.LSTM, OpKind.GRU):
            # torch order (x, hx..., weights...) -> ONNX-like (x, weights..., hx...)
            hx = {self.node_tensor.get(n) for n in _flatten_nodes(a.get("hx"))}
            x = [names[0]] if names else []
            rest = names[1:]
            names = x + [t for t in rest if t not in hx] + [t for t in rest if t in hx]
        return names


def _live(ops: Sequence[Op], tensors: Sequence[Tensor], outputs: Sequence[str]
          ) -> tuple[list[Op], list[Tensor]]:
    """The ops whose results reach a graph output, and the tensors without the dead ones'
    outputs (``torch.export`` can leave unused calls, such as an ``arange`` and its
    ``unsqueeze`` chain nobody reads: no device should run them)."""
    needed = set(outputs)
    keep: list[Op] = []
    for op in reversed(ops):  # fx order is topological
        if any(o in needed for o in op.outputs):
            keep.append(op)
            needed.update(i for i in op.inputs if i)
    keep.reverse()
    dead = {o for op in ops for o in op.outputs} - {o for op in keep for o in op.outputs}
    return keep, [t for t in tensors if t.name not in dead]


def _flatten_outputs(value: Any) -> Iterable[Any]:
    if isinstance(value, list | tuple):
        for v in value:
            yield from _flatten_outputs(v)
    else:
        yield value


def load_exported(ep: ExportedProgram, *, name: str, file: str | None = None) -> Graph:
    """Convert an ``ExportedProgram`` into a ``Graph`` named ``name`` (no decompositions)."""
    return _Builder(ep, name, file).build()


def import_module(module: torch.nn.Module, example_inputs: tuple[Any, ...], *, name: str,
                  dynamic_shapes: Any = None) -> Graph:
    """Export ``module`` with ``torch.export.export`` (non-strict) at ``example_inputs`` and
    convert the program. A module that cannot be exported raises ``ModelFormatError``."""
    import torch

    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # export's advice is for module authors
            ep = torch.export.export(module, tuple(example_inputs),
                                     dynamic_shapes=dynamic_shapes, strict=False)
    except Exception as e:
        raise ModelFormatError(f"torch.export could not export the module: "
                               f"{type(e).__name__}: {shorten(str(e), 300)}", place=name) from None
    return load_exported(ep, name=name)


# ---- .pt2 files -----------------------------------------------------------------------------
# read_pt2 (placewise.graph.pt2) is the one safe reader: it checks every archive entry before
# torch sees the file and loads with weights-only unpickling forced.


def load_pt2(path: str | os.PathLike[str]) -> Graph:
    """Load a ``.pt2`` file saved by ``torch.export.save`` (read safely by ``read_pt2``,
    see ``placewise.graph.pt2``) and convert it."""
    file = os.fspath(path)
    ep = read_pt2(file)
    stem = os.path.splitext(os.path.basename(file))[0]
    return load_exported(ep, name=stem, file=file)

