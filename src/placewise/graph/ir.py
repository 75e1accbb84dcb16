"""The workload graph IR: ``Tensor`` edges, ``Op`` vertices, an immutable ``Graph``.

Records are frozen, slotted dataclasses; op kinds are an ``Enum``; attributes are a small
typed, immutable mapping (``Attrs``) whose canonical names per kind are documented on
``OpKind`` so that importers and per-kind rules agree.

>>> x = Tensor("x", (2, 4), DType.FP32, role=Role.INPUT)
>>> w = Tensor("w", (4, 3), DType.FP32, role=Role.PARAM)
>>> y = Tensor("y", (2, 3), DType.FP32, role=Role.OUTPUT)
>>> g = Graph.build("tiny", [x, w, y], [Op("mm", OpKind.MATMUL, ("x", "w"), ("y",))])
>>> g.producer("y").name, [o.name for o in g.consumers("x")], y.nbytes
('mm', ['mm'], 24)
"""

from __future__ import annotations

import ast
import hashlib
import json
import operator
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from placewise.errors import GraphError
from placewise.graph.walk import topological_order
from placewise.units import DType, Layout

__all__ = [
    "CONTRACTION_KINDS",
    "CONTROL_FLOW_KINDS",
    "GEMM_KINDS",
    "INT8_KINDS",
    "AttrValue",
    "Attrs",
    "Dim",
    "Graph",
    "ImportRecord",
    "Op",
    "OpCategory",
    "OpKind",
    "Provenance",
    "Role",
    "TaskHint",
    "Tensor",
    "bind_shapes",
    "eval_dim",
]

AttrValue = int | float | str | bool | tuple[int, ...] | tuple[float, ...] | tuple[str, ...]
Dim = int | str  # an int, or a symbolic name / arithmetic expression over names ("batch*seq")


class Role(Enum):
    INPUT = "input"  # fed by the user at run time
    PARAM = "param"  # weights, biases, buffers, constants baked into the model
    ACTIVATION = "activation"  # produced by an op, consumed by another
    OUTPUT = "output"  # produced by an op, returned to the user


class OpCategory(Enum):
    """Coarse classes that cost models and fusion reason about."""

    CONTRACTION = "contraction"  # matmul, conv, attention, recurrent
    NORMALIZATION = "normalization"
    ELEMENTWISE = "elementwise"
    REDUCTION = "reduction"
    POOLING = "pooling"
    DATA_MOVEMENT = "data_movement"  # gather, concat, slice, transpose copies
    VIEW = "view"  # reshape-like, zero bytes when a view
    CONVERSION = "conversion"  # quantize, dequantize, cast, layout change
    OTHER = "other"


class OpKind(Enum):
    """Operator kinds. Canonical attribute names (set by importers, read by rules):

    - MATMUL: numpy-style batched matmul; ``trans_a``, ``trans_b`` (bool, optional: the
      last two dims of A / B transposed, com.microsoft FusedMatMul). GEMM: ``trans_a``,
      ``trans_b`` (bool), ``alpha``, ``beta``. LINEAR: inputs (x, weight[out,in], bias?)
      as torch.
    - CONV / CONV_TRANSPOSE: ``strides``, ``pads`` (begin..., end...), ``dilations``,
      ``group``, ``kernel_shape`` (spatial), ``output_padding`` (transpose only).
    - Quantized contractions (CONV, MATMUL, LSTM) and elementwise ops carry ``quant``:
      ``"integer"`` (ConvInteger, MatMulInteger: inputs (x, w, x_zero_point?,
      w_zero_point?), int32 out; DynamicQuantizeLSTM: W [dirs, in, 4H] and R [dirs, H, 4H]
      transposed, their scales and zero points after ONNX LSTM's inputs) or ``"qlinear"``
      (QLinearConv, QLinearMatMul, com.microsoft QLinearAdd/QLinearMul/QLinearSoftmax...:
      inputs reordered so that the operands come first as in the float op, (x, w, bias or
      "") for a conv and (a, b) for a matmul or binary op, then the scales and zero points
      in the node's order; the result requantized).
    - ATTENTION: inputs (q, k, v, mask?) shaped [..., L, E] / [..., S, E] / [..., S, Ev];
      ``is_causal`` (bool), ``scale`` (float, optional); ``num_heads`` when the heads sit in
      the last dim (com.microsoft MultiHeadAttention: [B, L, N*H]). ``variant`` ``"packed"``
      (com.microsoft Attention/QAttention): inputs (x [B, S, D], weights [D, Dq+Dk+Dv],
      bias [Dq+Dk+Dv], mask?, past? ...), ``num_heads``, ``qkv_hidden_sizes`` (optional).
    - LSTM / GRU: inputs as ONNX (x[seq,batch,in], W, R, B?...); ``hidden_size``,
      ``direction`` ("forward" | "reverse" | "bidirectional"), ``layout`` (0 | 1).
    - Norms: ``axis`` (first normalized axis), ``epsilon``. LAYER_NORM / RMS_NORM
      ``variant`` ``"skip"`` (com.microsoft Skip[Simplified]LayerNormalization: inputs (x,
      skip, gamma, beta?, bias?), RMS without beta); LAYER_NORM ``variant`` ``"embed"``
      (EmbedLayerNormalization: inputs (ids, segment_ids?, word_table, position_table,
      segment_table?, gamma, beta, mask?, position_ids?)).
    - Elementwise: ``bias`` (bool: a bias input added first, com.microsoft BiasGelu,
      FastGelu); SILU ``alpha`` (x * sigmoid(alpha * x), QuickGelu).
    - QUANTIZE ``variant`` ``"dynamic"``: DynamicQuantizeLinear (the scale and zero point
      from the input's range, written beside the data).
    - RESIZE: ``mode`` ("nearest" | "linear" | "cubic"). ONE_HOT: ``axis``.
    - SOFTMAX / LOG_SOFTMAX: ``axis``.
    - Reductions / ARGMAX: ``axes`` (tuple; empty = all), ``keepdims`` (bool).
    - Pooling: ``kernel_shape``, ``strides``, ``pads``, ``dilations`` (global: none).
    - EINSUM: ``equation`` (numpy/ONNX einsum notation, ``...`` allowed).
    - TRILU: ``upper`` (bool); the diagonal offset ``k`` is an optional scalar input (ONNX)
      or the ``k`` attribute (torch). MOD: ``fmod`` (bool, the sign of the dividend).
    - GATHER: ``axis``; ``variant`` ``"elements"`` (GatherElements: the output has the
      indices' shape), ``"nd"`` (GatherND, with ``batch_dims``), ``"index"`` (torch
      advanced indexing). EMBEDDING: inputs (weight, indices). CONCAT: ``axis``. SPLIT:
      ``axis``. SLICE: none (shapes tell). TRANSPOSE: ``perm``.
    - QUANTIZE / DEQUANTIZE: ``axis`` (per-channel) or none. CAST: ``to`` (a DType value).
    - LAYOUT_CONVERT: ``src`` and ``dst`` (Layout values).
    - IF / LOOP / SCAN: the work of the subgraph per iteration, counted by the graph count
      rules when the model was imported: ``body_flops``, ``body_bytes_read``,
      ``body_bytes_written``, ``body_dtypes`` with ``body_dtype_bytes`` (bytes per dtype),
      ``body_kernels`` (ops that launch a kernel), ``body_counted`` (bool) and
      ``body_uncounted`` (kinds without a rule); ``trips`` (iterations costed) and
      ``trips_bound`` ("exact", "at most", "at least": the trip count is a bound);
      IF: ``branch`` ("then", "else": the costlier branch, the central estimate) and
      ``low_share`` (the other branch's work as a share of it: the interval's low end).
    - UNKNOWN: a source op placewise has no kind for; ``Provenance.source_op`` says which.
    """

    # contractions
    MATMUL = "matmul"
    GEMM = "gemm"
    LINEAR = "linear"
    CONV = "conv"
    CONV_TRANSPOSE = "conv_transpose"
    ATTENTION = "attention"
    LSTM = "lstm"
    GRU = "gru"
    EINSUM = "einsum"
    # normalization
    LAYER_NORM = "layer_norm"
    RMS_NORM = "rms_norm"
    BATCH_NORM = "batch_norm"
    GROUP_NORM = "group_norm"
    INSTANCE_NORM = "instance_norm"
    SOFTMAX = "softmax"
    LOG_SOFTMAX = "log_softmax"
    # elementwise unary
    RELU = "relu"
    LEAKY_RELU = "leaky_relu"
    GELU = "gelu"
    SILU = "silu"
    SIGMOID = "sigmoid"
    HARD_SIGMOID = "hard_sigmoid"
    HARD_SWISH = "hard_swish"
    TANH = "tanh"
    ELU = "elu"
    SOFTPLUS = "softplus"
    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    RECIPROCAL = "reciprocal"
    NEG = "neg"
    ABS = "abs"
    ERF = "erf"
    SIN = "sin"
    COS = "cos"
    CLIP = "clip"
    NOT = "not"
    ISNAN = "isnan"
    ISINF = "isinf"
    FLOOR = "floor"
    CEIL = "ceil"
    ROUND = "round"
    SIGN = "sign"
    DROPOUT = "dropout"  # identity at inference, kept for provenance
    # elementwise binary / ternary
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    POW = "pow"
    MAXIMUM = "maximum"
    MINIMUM = "minimum"
    EQUAL = "equal"
    LESS = "less"
    GREATER = "greater"
    AND = "and"
    OR = "or"
    XOR = "xor"
    MOD = "mod"
    WHERE = "where"
    TRILU = "trilu"  # keep the upper or lower triangle of the last two dims, zero the rest
    # reductions
    REDUCE_SUM = "reduce_sum"
    REDUCE_MEAN = "reduce_mean"
    REDUCE_MAX = "reduce_max"
    REDUCE_MIN = "reduce_min"
    REDUCE_PROD = "reduce_prod"
    ARGMAX = "argmax"
    CUMSUM = "cumsum"
    TOPK = "topk"
    # pooling
    MAX_POOL = "max_pool"
    AVG_POOL = "avg_pool"
    GLOBAL_AVG_POOL = "global_avg_pool"
    GLOBAL_MAX_POOL = "global_max_pool"
    # data movement
    GATHER = "gather"
    EMBEDDING = "embedding"
    SCATTER = "scatter"
    CONCAT = "concat"
    SPLIT = "split"
    SLICE = "slice"
    TRANSPOSE = "transpose"
    PAD = "pad"
    EXPAND = "expand"
    TILE = "tile"
    RESIZE = "resize"  # interpolate to a new size (nearest, linear, cubic)
    ONE_HOT = "one_hot"
    # views
    RESHAPE = "reshape"
    FLATTEN = "flatten"
    SQUEEZE = "squeeze"
    UNSQUEEZE = "unsqueeze"
    IDENTITY = "identity"
    # conversions
    QUANTIZE = "quantize"
    DEQUANTIZE = "dequantize"
    CAST = "cast"
    LAYOUT_CONVERT = "layout_convert"
    # shape / constant plumbing (no data of note)
    SHAPE = "shape"
    CONSTANT = "constant"
    RANGE = "range"
    # control flow kept as one op (an If whose condition is unknown, Loop, Scan): its cost
    # is its subgraph's work, summed by the importer (see CONTROL_FLOW_KINDS)
    IF = "if"
    LOOP = "loop"
    SCAN = "scan"
    # abstract task from a task-graph JSON: its cost comes from ``Op.hint``
    TASK = "task"
    # anything else
    UNKNOWN = "unknown"

    @property
    def category(self) -> OpCategory:
        return _CATEGORY.get(self, OpCategory.OTHER)


#: the contractions (category ``CONTRACTION``): products summed over a shared dimension --
#: matrix products, convolutions, attention, recurrent cells, einsum. The roofline costs
#: them through their GEMM view (``cost.roofline.gemm_dims``) on the device's contraction
#: curve, which covers these kinds when it names none (``hardware.efficiency``).
CONTRACTION_KINDS: frozenset[OpKind] = frozenset({
    OpKind.MATMUL, OpKind.GEMM, OpKind.LINEAR, OpKind.CONV, OpKind.CONV_TRANSPOSE,
    OpKind.ATTENTION, OpKind.LSTM, OpKind.GRU, OpKind.EINSUM})

#: the contractions that are one GEMM-shaped kernel: a matrix product or a convolution of
#: an input with one weight-like operand. Such a kernel's epilogue absorbs a bias and an
#: activation, so fusion starts a ``contraction`` region at one (``graph.fuse``), and its
#: output is a projection, so a float output made by one may be logits
#: (``precision.metrics.looks_like_logits``). Attention, LSTM, GRU (several products with
#: their own nonlinearities inside) and einsum (a general index contraction) are not.
GEMM_KINDS: frozenset[OpKind] = frozenset({
    OpKind.MATMUL, OpKind.GEMM, OpKind.LINEAR, OpKind.CONV, OpKind.CONV_TRANSPOSE})

_CATEGORY: dict[OpKind, OpCategory] = {}
for _k in CONTRACTION_KINDS:
    _CATEGORY[_k] = OpCategory.CONTRACTION
for _k in (OpKind.LAYER_NORM, OpKind.RMS_NORM, OpKind.BATCH_NORM, OpKind.GROUP_NORM,
           OpKind.INSTANCE_NORM, OpKind.SOFTMAX, OpKind.LOG_SOFTMAX):
    _CATEGORY[_k] = OpCategory.NORMALIZATION
for _k in (OpKind.RELU, OpKind.LEAKY_RELU, OpKind.GELU, OpKind.SILU, OpKind.SIGMOID,
           OpKind.HARD_SIGMOID, OpKind.HARD_SWISH, OpKind.TANH, OpKind.ELU, OpKind.SOFTPLUS,
           OpKind.EXP, OpKind.LOG, OpKind.SQRT, OpKind.RSQRT, OpKind.RECIPROCAL, OpKind.NEG,
           OpKind.ABS, OpKind.ERF, OpKind.SIN, OpKind.COS, OpKind.CLIP, OpKind.NOT,
           OpKind.ISNAN, OpKind.ISINF, OpKind.FLOOR, OpKind.CEIL, OpKind.ROUND, OpKind.SIGN,
           OpKind.DROPOUT, OpKind.ADD, OpKind.SUB, OpKind.MUL, OpKind.DIV, OpKind.POW,
           OpKind.MAXIMUM, OpKind.MINIMUM, OpKind.EQUAL, OpKind.LESS, OpKind.GREATER,
           OpKind.AND, OpKind.OR, OpKind.XOR, OpKind.MOD, OpKind.WHERE, OpKind.TRILU):
    _CATEGORY[_k] = OpCategory.ELEMENTWISE
for _k in (OpKind.REDUCE_SUM, OpKind.REDUCE_MEAN, OpKind.REDUCE_MAX, OpKind.REDUCE_MIN,
           OpKind.REDUCE_PROD, OpKind.ARGMAX, OpKind.CUMSUM, OpKind.TOPK):
    _CATEGORY[_k] = OpCategory.REDUCTION
for _k in (OpKind.MAX_POOL, OpKind.AVG_POOL, OpKind.GLOBAL_AVG_POOL, OpKind.GLOBAL_MAX_POOL):
    _CATEGORY[_k] = OpCategory.POOLING
for _k in (OpKind.GATHER, OpKind.EMBEDDING, OpKind.SCATTER, OpKind.CONCAT, OpKind.SPLIT,
           OpKind.SLICE, OpKind.TRANSPOSE, OpKind.PAD, OpKind.EXPAND, OpKind.TILE,
           OpKind.RESIZE, OpKind.ONE_HOT):
    _CATEGORY[_k] = OpCategory.DATA_MOVEMENT
for _k in (OpKind.RESHAPE, OpKind.FLATTEN, OpKind.SQUEEZE, OpKind.UNSQUEEZE, OpKind.IDENTITY):
    _CATEGORY[_k] = OpCategory.VIEW
for _k in (OpKind.QUANTIZE, OpKind.DEQUANTIZE, OpKind.CAST, OpKind.LAYOUT_CONVERT):
    _CATEGORY[_k] = OpCategory.CONVERSION

#: control flow kept as one op: its cost is the summed work of its subgraph (attributes on
#: ``OpKind``); an ``If`` whose condition is known is inlined by the importer instead
CONTROL_FLOW_KINDS: frozenset[OpKind] = frozenset({OpKind.IF, OpKind.LOOP, OpKind.SCAN})

#: op kinds that have an int8 kernel on placewise's local backends (onnxruntime dynamic
#: quantization: ``MatMulInteger`` / ``ConvInteger``; ``graph.onnx_kinds.INT8_ONNX_OP_TYPES``
#: spells them in ONNX). A local device (one with a runtime ``backend``) computes a vertex
#: in int8 only when every op of it is one of these: the cost models, the plan checker,
#: profiling and the executor all read this set.
INT8_KINDS: frozenset[OpKind] = frozenset({OpKind.LINEAR, OpKind.MATMUL, OpKind.GEMM,
                                           OpKind.CONV})


@dataclass(frozen=True, slots=True)
class Attrs(Mapping[str, AttrValue]):
    """An immutable, hashable, typed attribute mapping.

    >>> a = Attrs.of(strides=(2, 2), group=1)
    >>> a["group"], a.get("dilations", (1, 1))
    (1, (1, 1))
    """

    items_: tuple[tuple[str, AttrValue], ...] = ()

    @classmethod
    def of(cls, mapping: Mapping[str, Any] | None = None, **kw: Any) -> Attrs:
        merged: dict[str, Any] = dict(mapping or {})
        merged.update(kw)
        out: list[tuple[str, AttrValue]] = []
        for k, v in sorted(merged.items()):
            if isinstance(v, list):
                v = tuple(v)
            if isinstance(v, Enum):
                v = v.value
            if not isinstance(v, int | float | str | bool | tuple):
                raise TypeError(f"attribute {k!r}: unsupported value type {type(v).__name__}")
            out.append((k, v))
        return cls(tuple(out))

    def __getitem__(self, key: str) -> AttrValue:
        for k, v in self.items_:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self.items_)

    def __len__(self) -> int:
        return len(self.items_)

    def to_json(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.items_}


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where an op came from: the source node, the framework op, the module path (torch)."""

    source: str = ""  # node name in the source file / fx graph
    source_op: str = ""  # e.g. "onnx::Conv", "aten.linear.default"
    module_path: str = ""  # e.g. "encoder.layers.0.attn.q_proj" (torch only)

    def describe(self) -> str:
        where = self.module_path or self.source
        return f"{self.source_op} at {where}" if where else self.source_op


@dataclass(frozen=True, slots=True)
class TaskHint:
    """Costs given by the user for an abstract task (task-graph JSON), not derived from shapes.

    ``device_times_s`` pairs (device name, seconds) override every model for that device.
    """

    flops: float = 0.0
    bytes_moved: int = 0
    device_times_s: tuple[tuple[str, float], ...] = ()

    def time_on(self, device: str) -> float | None:
        for d, s in self.device_times_s:
            if d == device:
                return s
        return None


@dataclass(frozen=True, slots=True)
class Tensor:
    """One edge: a named value with shape, dtype, layout and role."""

    name: str
    shape: tuple[Dim, ...]
    dtype: DType
    layout: Layout = Layout.ROW_MAJOR
    role: Role = Role.ACTIVATION

    @property
    def is_concrete(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:  # one pass: asked for every tensor many times
            if not isinstance(d, int):
                raise GraphError(f"shape {self.shape_str()} is symbolic; bind it with --shape",
                                 place=f"tensor {self.name!r}")
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.dtype.nbytes(self.numel)

    @property
    def concrete_shape(self) -> tuple[int, ...]:
        self.numel  # noqa: B018  (raises on symbolic dims)
        return tuple(int(d) for d in self.shape)

    def shape_str(self) -> str:
        return "[" + ",".join(str(d) for d in self.shape) + "]"


@dataclass(frozen=True, slots=True)
class Op:
    """One vertex. ``inputs``/``outputs`` are tensor names; empty-string inputs are
    absent optional inputs (as in ONNX)."""

    name: str
    kind: OpKind
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Attrs = field(default_factory=Attrs)
    provenance: Provenance = field(default_factory=Provenance)
    scratch_bytes: int = 0  # declared workspace the kernel needs while it runs
    hint: TaskHint | None = None  # only for OpKind.TASK (abstract task graphs)

    def where(self) -> str:
        """'op X (from module.path)' for error messages."""
        p = self.provenance.describe()
        return f"op {self.name!r}" + (f" (from {p})" if p else "")


@dataclass(frozen=True, slots=True)
class ImportRecord:
    """How an importer built a graph (not part of its identity or fingerprint).

    ``shape_source`` says where the shapes came from: ``"onnx inference"``,
    ``"onnxruntime symbolic inference"`` or ``"onnxruntime run"`` (ONNX files, see
    ``graph.onnx_shapes``), ``"torch.export"`` (programs), ``""`` (task graphs).
    ``source_nodes`` is the node count of the source file (ONNX: ``Constant`` nodes
    included; 0 when not counted) and ``folded_nodes`` how many of them were folded into
    constants once shapes were bound. ``upgraded_from_opset``: the default-domain opset of
    an ONNX file older than placewise reads, which was upgraded on import (0: none was).
    """

    shape_source: str = ""
    source_nodes: int = 0
    folded_nodes: int = 0
    shape_problem: str = ""  # why shapes may have stayed symbolic ("" when nothing failed)
    upgraded_from_opset: int = 0
    values: tuple[str, ...] = ()  # inputs given a value (--value), constants in the graph
    inlined_ifs: int = 0  # If nodes replaced by the branch their (constant) condition takes
    #: the models of a workload graph (``graph.workload``), in order; every tensor of model
    #: ``m`` is named ``m/...``; () for one model
    members: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Graph:
    """An immutable DAG of ops in topological order, with its tensors.

    Build with ``Graph.build`` (which checks invariants) and derive new graphs with passes.
    ``record`` (how it was imported) follows the graph through shape binding and
    ``with_ops``.
    """

    name: str
    tensors: tuple[Tensor, ...]
    ops: tuple[Op, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    record: ImportRecord = field(default_factory=ImportRecord, compare=False)
    _tensor_index: dict[str, Tensor] = field(init=False, repr=False, compare=False)
    _op_index: dict[str, Op] = field(init=False, repr=False, compare=False)
    _producer: dict[str, Op] = field(init=False, repr=False, compare=False)
    _consumers: dict[str, tuple[Op, ...]] = field(init=False, repr=False, compare=False)
    _memo: dict[str, str] = field(init=False, repr=False, compare=False)  # fingerprint
    _analyses: dict[str, dict[Any, Any]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_memo", {})
        object.__setattr__(self, "_analyses", {})
        object.__setattr__(self, "_tensor_index", {t.name: t for t in self.tensors})
        object.__setattr__(self, "_op_index", {o.name: o for o in self.ops})
        prod: dict[str, Op] = {}
        cons: dict[str, list[Op]] = {}
        for op in self.ops:
            for t in op.outputs:
                prod[t] = op
            for t in op.inputs:
                # an op reading a tensor twice is listed once: its reads are consecutive,
                # so comparing with the last consumer (by identity) suffices
                if t:
                    seen = cons.setdefault(t, [])
                    if not seen or seen[-1] is not op:
                        seen.append(op)
        object.__setattr__(self, "_producer", prod)
        object.__setattr__(self, "_consumers", {k: tuple(v) for k, v in cons.items()})

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def build(cls, name: str, tensors: Iterable[Tensor], ops: Iterable[Op],
              inputs: Iterable[str] | None = None, outputs: Iterable[str] | None = None,
              *, file: str | None = None, require_concrete: bool = False,
              record: ImportRecord | None = None) -> Graph:
        """Check invariants, order ops topologically, derive inputs/outputs if not given.

        Raises ``GraphError`` naming the op or tensor at fault: duplicate names, a tensor
        with two producers, an op reading a tensor nobody produces, a cycle, a symbolic shape
        (when ``require_concrete``).
        """
        tlist = list(tensors)
        olist = list(ops)
        index: dict[str, Tensor] = {}
        for t in tlist:
            if t.name in index:
                raise GraphError("tensor defined twice", file=file, place=f"tensor {t.name!r}")
            for d in t.shape:
                if isinstance(d, int) and d < 0:
                    raise GraphError(f"negative dimension in shape {t.shape_str()}",
                                     file=file, place=f"tensor {t.name!r}")
            index[t.name] = t
        producer: dict[str, Op] = {}
        seen_ops: set[str] = set()
        for op in olist:
            if op.name in seen_ops:
                raise GraphError("op name used twice", file=file, place=f"op {op.name!r}")
            seen_ops.add(op.name)
            for tn in op.outputs:
                if tn not in index:
                    raise GraphError(f"output tensor {tn!r} has no shape/dtype",
                                     file=file, place=op.where())
                if tn in producer:
                    raise GraphError(
                        f"tensor {tn!r} is produced by both {producer[tn].name!r} and {op.name!r}",
                        file=file, place=f"tensor {tn!r}")
                if index[tn].role in (Role.INPUT, Role.PARAM):
                    raise GraphError(f"tensor {tn!r} is a graph {index[tn].role.value} but is "
                                     f"also produced by an op", file=file, place=op.where())
                producer[tn] = op
        for op in olist:
            for tn in op.inputs:
                if not tn:
                    continue
                if tn not in index:
                    raise GraphError(f"input tensor {tn!r} is not defined", file=file,
                                     place=op.where())
                if tn not in producer and index[tn].role not in (Role.INPUT, Role.PARAM):
                    raise GraphError(f"input tensor {tn!r} has no producer and is neither a "
                                     f"graph input nor a parameter", file=file, place=op.where())
        ordered = _toposort(olist, producer, file)
        if inputs is None:
            inputs = [tn.name for tn in tlist if tn.role is Role.INPUT]
        if outputs is None:
            outputs = [tn.name for tn in tlist if tn.role is Role.OUTPUT]
        inputs, outputs = tuple(inputs), tuple(outputs)
        for tn in outputs:
            if tn not in producer and tn not in index:
                raise GraphError("graph output is not defined", file=file, place=f"tensor {tn!r}")
        g = cls(name, tuple(tlist), tuple(ordered), inputs, outputs,
                record if record is not None else ImportRecord())
        if require_concrete:
            g.check_concrete(file=file)
        return g

    def check_concrete(self, *, file: str | None = None) -> None:
        """Raise ``GraphError`` unless every shape is concrete. Only an input's dims can be
        bound, so a symbolic input is named first (with the ``--shape`` to give it); a
        symbolic value behind concrete inputs is reported as what it is, an importer's
        failure to resolve it.

        >>> x = Tensor("x", ("N", 4), DType.FP32, role=Role.INPUT)
        >>> y = Tensor("y", ("N", 4), DType.FP32, role=Role.OUTPUT)
        >>> g = Graph.build("g", [x, y], [Op("r", OpKind.RELU, ("x",), ("y",))])
        >>> g.check_concrete()
        Traceback (most recent call last):
        ...
        placewise.errors.GraphError: input 'x': dim 0 (N) of [N,4] is symbolic; bind it with --shape x=?x4 (a size for each ?) or --batch
        """
        for name in self.inputs:
            t = self.tensor(name)
            if not t.is_concrete:
                raise GraphError(_unbound_input(t), file=file, place=f"input {name!r}")
        why = f" ({self.record.shape_problem})" if self.record.shape_problem else ""
        for t in self.tensors:
            if not t.is_concrete and t.name in self._producer and \
                    self._producer[t.name].kind in CONTROL_FLOW_KINDS:
                op = self._producer[t.name]
                raise GraphError(
                    f"shape {t.shape_str()} is made by {op.kind.value} {op.name!r}, whose "
                    f"branches or iterations decide it at run time: give the inputs that "
                    f"decide it a value with --value NAME=...", file=file,
                    place=f"tensor {t.name!r}")
            if not t.is_concrete:
                raise GraphError(
                    f"shape {t.shape_str()} stays symbolic although every input is "
                    f"concrete: the importer could not resolve it{why}", file=file,
                    place=f"tensor {t.name!r}")

    # ---- queries ----------------------------------------------------------------------
    def tensor(self, name: str) -> Tensor:
        try:
            return self._tensor_index[name]
        except KeyError:
            raise GraphError("no such tensor", place=f"tensor {name!r}") from None

    def op(self, name: str) -> Op:
        try:
            return self._op_index[name]
        except KeyError:
            raise GraphError("no such op", place=f"op {name!r}") from None

    def has_tensor(self, name: str) -> bool:
        return name in self._tensor_index

    def has_op(self, name: str) -> bool:
        return name in self._op_index

    def producer(self, tensor: str) -> Op | None:
        return self._producer.get(tensor)

    def consumers(self, tensor: str) -> tuple[Op, ...]:
        return self._consumers.get(tensor, ())

    def in_tensors(self, op: Op) -> list[Tensor]:
        return [self._tensor_index[t] for t in op.inputs if t]

    def out_tensors(self, op: Op) -> list[Tensor]:
        return [self._tensor_index[t] for t in op.outputs]

    def predecessors(self, op: Op) -> list[Op]:
        seen: dict[str, Op] = {}
        for t in op.inputs:
            p = self._producer.get(t) if t else None
            if p is not None:
                seen.setdefault(p.name, p)
        return list(seen.values())

    def successors(self, op: Op) -> list[Op]:
        seen: dict[str, Op] = {}
        for t in op.outputs:
            for c in self._consumers.get(t, ()):
                seen.setdefault(c.name, c)
        return list(seen.values())

    @property
    def params(self) -> list[Tensor]:
        return [t for t in self.tensors if t.role is Role.PARAM]

    @property
    def param_bytes(self) -> int:
        return sum(t.nbytes for t in self.params)

    def fingerprint(self) -> str:
        """A stable sha256 over structure, shapes, dtypes and attributes (not weights);
        computed once per graph (it is immutable)."""
        got = self._memo.get("fingerprint")
        if got is not None:
            return got
        h = hashlib.sha256()
        payload = {
            "tensors": [[t.name, [str(d) for d in t.shape], t.dtype.value, t.layout.value,
                         t.role.value] for t in self.tensors],
            "ops": [[o.name, o.kind.value, list(o.inputs), list(o.outputs), o.attrs.to_json(),
                     o.scratch_bytes, None if o.hint is None else [o.hint.flops,
                     o.hint.bytes_moved, [list(x) for x in o.hint.device_times_s]]]
                    for o in self.ops],
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
        }
        h.update(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode())
        got = "sha256:" + h.hexdigest()
        self._memo["fingerprint"] = got
        return got

    def owns(self, op: Op) -> bool:
        """Whether ``op`` is this graph's op of that name (the very object: what is kept in
        an ``analysis`` of the graph holds for it)."""
        return self._op_index.get(op.name) is op

    def analysis(self, name: str) -> dict[Any, Any]:
        """The cache of the analysis ``name`` of this graph (empty at first): what a pass
        computes from an immutable graph holds for as long as the graph, so a pass asked
        the same question many times (``count_op`` per op, once per device costed) keeps
        its answers here, keyed as it likes.

        >>> g = Graph.build("g", [Tensor("x", (2,), DType.FP32, role=Role.INPUT)], [])
        >>> g.analysis("demo")["k"] = 1
        >>> g.analysis("demo"), g.analysis("other")
        ({'k': 1}, {})
        """
        got = self._analyses.get(name)
        if got is None:
            got = self._analyses[name] = {}
        return got

    def with_record(self, record: ImportRecord) -> Graph:
        """The same graph with another import record (not part of its identity)."""
        return Graph(self.name, self.tensors, self.ops, self.inputs, self.outputs, record)

    def with_ops(self, ops: Iterable[Op], tensors: Iterable[Tensor] | None = None) -> Graph:
        return Graph.build(self.name, self.tensors if tensors is None else tensors, ops,
                           self.inputs, self.outputs, record=self.record)


def _unbound_input(t: Tensor) -> str:
    """What to say about an input with symbolic dims: which dims, and the ``--shape`` that
    binds them (``--batch`` too when only the leading dim is unknown)."""
    free = [i for i, d in enumerate(t.shape) if not isinstance(d, int)]
    named = [f"{i} ({_short_dim(t.shape[i])})" for i in free]
    which = (f"dim {named[0]}" if len(named) == 1 else
             f"dims {', '.join(named[:-1])} and {named[-1]}")
    template = "x".join("?" if not isinstance(d, int) else str(d) for d in t.shape)
    batch = " or --batch" if free == [0] else ""
    verb = "is" if len(free) == 1 else "are"
    pronoun = "it" if len(free) == 1 else "them"
    shape = "[" + ",".join(_short_dim(d) for d in t.shape) + "]"
    return (f"{which} of {shape} {verb} symbolic; bind {pronoun} with --shape "
            f"{t.name}={template} (a size for each ?){batch}")


def _short_dim(d: Dim, limit: int = 24) -> str:
    text = str(d)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _toposort(ops: list[Op], producer: dict[str, Op], file: str | None) -> list[Op]:
    """``ops`` in the stable topological order (``walk.topological_order``); raises on a
    cycle naming an op on it."""
    position = {op.name: i for i, op in enumerate(ops)}
    preds = [{position[producer[t].name] for t in op.inputs if t and t in producer}
             for op in ops]
    order = topological_order(preds)
    if len(order) != len(ops):
        done = set(order)
        stuck = [op.name for i, op in enumerate(ops) if i not in done]
        cycle = _find_cycle(stuck, {op.name: op for op in ops}, producer)
        raise GraphError("the graph has a cycle: " + " -> ".join(cycle), file=file,
                         place=f"op {cycle[0]!r}")
    return [ops[i] for i in order]


def _find_cycle(stuck: list[str], by_name: dict[str, Op], producer: dict[str, Op]) -> list[str]:
    stuck_set = set(stuck)
    node = stuck[0]
    path: list[str] = []
    seen: dict[str, int] = {}
    while node not in seen:
        seen[node] = len(path)
        path.append(node)
        preds = [producer[t].name for t in by_name[node].inputs
                 if t and t in producer and producer[t].name in stuck_set]
        node = preds[0]
    cyc = path[seen[node]:]
    cyc.reverse()
    return [*cyc, cyc[0]]


_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}


def eval_dim(dim: Dim, env: Mapping[str, int]) -> Dim:
    """Evaluate a symbolic dim under ``env``; returns an int if fully bound, else ``dim``.

    Only names, integers and ``+ - * // %`` are accepted (never ``eval``).

    >>> eval_dim("batch*seq", {"batch": 2, "seq": 128})
    256
    >>> eval_dim("batch", {})
    'batch'
    """
    if isinstance(dim, int):
        return dim
    try:
        tree = ast.parse(dim.strip(), mode="eval")
    except SyntaxError:
        return dim

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in env:
                return int(env[node.id])
            raise KeyError(node.id)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return int(_BINOPS[type(node.op)](ev(node.left), ev(node.right)))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        raise KeyError(ast.dump(node))

    try:
        return ev(tree)
    except (KeyError, ZeroDivisionError):
        return dim


def bind_shapes(graph: Graph, env: Mapping[str, int], *, require_concrete: bool = True) -> Graph:
    """Return a graph whose symbolic dims are evaluated under ``env`` (symbol -> size)."""
    tensors = [replace(t, shape=tuple(eval_dim(d, env) for d in t.shape)) for t in graph.tensors]
    g = Graph.build(graph.name, tensors, graph.ops, graph.inputs, graph.outputs,
                    record=graph.record)
    if require_concrete:
        g.check_concrete()
    return g
