"""Emulated lower precision: the whole model on this CPU, with chosen ops at int8, fp16, bf16.

``Emulator(source, graph)`` is built once per model source (``runtime.opexec.ModelSource``)
and its bound ``graph``; ``emulator.outputs(requests, lowered)`` runs every request through
onnxruntime with the ops named in ``lowered`` (IR op name -> ``DType``) emulated at that
precision, and returns the graph's outputs per request. ``lowered={}`` is the fp32
reference. Each call builds one rewritten copy of the fp32 whole model and one session.

The schemes (``SCHEMES``, ``scheme(dtype)``; the plan file records them):

- **int8 on linear / matmul / gemm / conv** (``graph.ir.INT8_KINDS``): exactly what the
  runtime runs for an int8 partition (``runtime.compile.quantize_dynamic_model``:
  onnxruntime dynamic quantization of MatMul / Gemm / Conv, ``MatMulConstBOnly``): the
  weight (an initializer) int8 symmetric per tensor, quantized by onnxruntime.quantization's
  own ``quantize_data`` and dequantized here; the activation quantized per call to uint8
  (asymmetric, per tensor) by a ``DynamicQuantizeLinear -> DequantizeLinear`` pair in front
  of the node. A MatMul whose B is not an initializer, or a Gemm with ``transA``, ``alpha``
  or ``beta`` set, stays float in the runtime: such an op is not lowerable to int8 here.
- **int8 on any other float op**: the scheme assumed for devices that compute elementwise
  ops in int8: its float activations in and out pass through the same dynamic per-tensor
  uint8 quantize -> dequantize; its parameters (norm scales, biases) stay float.
- **fp16 / bf16**: the op's float inputs (parameters rounded once in numpy, activations by
  ``Cast -> Cast``) and outputs rounded to that type (round to nearest even), computed in
  fp32 between (fp32 accumulate, as tensor cores do).

How ops map to ONNX nodes:

- **ONNX sources**: a copy of ``source.onnx_model``; an op is the node of its first output
  (else of its ``Provenance.source`` name), as ``runtime.opexec.OnnxProgram.node_for``.
- **torch sources** (``.pt2``, ``zoo:``): one whole-model ONNX through
  ``runtime.compile.compile_partition`` (a single fp32 ``Partition`` holding every op) whose
  outputs are every tensor an op makes, so the exporter gives each value its IR name (then
  only the graph's outputs stay outputs). An op's nodes are those between its tensors: a
  walk back from its outputs that stops at IR tensors, graph inputs and initializers (a
  linear is MatMul + Add, an attention a dozen nodes). The exporter's node metadata
  (``pkg.torch.onnx.name_scopes``) is not used: its decompositions rename fx nodes
  (``reshape_1`` comes back as ``view_7``). Inside such an op, constants of the
  decomposition (the attention scale, a causal mask) are not rounded; its parameters
  (initializers with an IR name or the size of one of its IR parameters: a transposed
  weight) are.

Sessions use ``ORT_ENABLE_BASIC`` (constant folding and redundant-node removal; no
fusions that could absorb or reorder the inserted casts and quantize pairs, verified to be
kept). The fp32 model is taken apart once: its nodes serialized one by one, its weights
serialized once; a call re-encodes only the nodes it changes and new weights, and the
session is made from the concatenated bytes (protobuf merges repeated fields).

>>> import os, tempfile, onnx
>>> from onnx import TensorProto, helper, numpy_helper
>>> from placewise.runtime.opexec import load_source, request_inputs
>>> w = numpy_helper.from_array(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3), "w")
>>> g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [w])
>>> path = os.path.join(tempfile.mkdtemp(), "mm.onnx")
>>> onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
>>> src = load_source(path)
>>> emu = Emulator(src, src.graph)
>>> reqs = request_inputs(src, src.graph, 2, 0)
>>> ref = emu.outputs(reqs, {})
>>> bool(np.allclose(ref[0][0], reqs[0][0] @ numpy_helper.to_array(w), atol=1e-6))
True
>>> op = src.graph.ops[0].name
>>> emu.lowerable(op, DType.INT8), emu.lowerable(op, DType.FP16)
(True, True)
>>> y8 = emu.outputs(reqs, {op: DType.INT8})
>>> 0 < float(np.abs(y8[0][0] - ref[0][0]).max()) < 0.05
True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from placewise.errors import InputError, UnsupportedError
from placewise.graph.ir import INT8_KINDS, Graph, Op
from placewise.units import DType

__all__ = ["SCHEMES", "Emulator", "scheme"]

#: one line per emulated precision: what the emulation assumes the device does
SCHEMES: Mapping[DType, str] = MappingProxyType({
    DType.INT8: ("linear/matmul/gemm/conv: onnxruntime dynamic quantization as the runtime "
                 "runs it (weights int8 symmetric per tensor, activations uint8 asymmetric "
                 "per tensor per call, int32 accumulate), emulated by quantize->dequantize; "
                 "other float ops: float activations in and out quantize->dequantized uint8 "
                 "per tensor per call, parameters kept float"),
    DType.FP16: ("float inputs (parameters included) and outputs rounded to fp16 (nearest "
                 "even), computed in fp32 (fp32 accumulate)"),
    DType.BF16: ("float inputs (parameters included) and outputs rounded to bf16 (nearest "
                 "even), computed in fp32 (fp32 accumulate)"),
})

_FLOAT = 1  # onnx.TensorProto.FLOAT
_FLOAT16 = 10
_BFLOAT16 = 16
_CONTRACTION_TYPES = ("MatMul", "Gemm", "Conv")
_OPT_LEVEL = "ORT_DISABLE_ALL"


def scheme(dtype: DType) -> str:
    """The one-line description of how ``dtype`` is emulated (``SCHEMES``).

    >>> scheme(DType.FP16).split(" (")[0]
    'float inputs'
    >>> scheme(DType.FP32)
    'unchanged'
    """
    if dtype is DType.FP32:
        return "unchanged"
    if dtype not in SCHEMES:
        raise UnsupportedError(f"no emulation of {dtype.value} (emulated: "
                               f"{', '.join(d.value for d in SCHEMES)})")
    return SCHEMES[dtype]


@dataclass(frozen=True, slots=True)
class _Region:
    """The ONNX nodes of one IR op and the float values at its boundary.

    ``acts``: float activations it reads from outside; ``params``: float parameters it
    reads (initializers; Constant outputs in ONNX sources); ``outputs``: float values it
    makes; ``quant``: (node, input slot, "act" | "weight") that dynamic quantization
    quantizes; ``why_int8``: why the runtime cannot run it in int8 ('' when it can, or
    when it is not a contraction)."""

    nodes: tuple[int, ...]
    acts: tuple[str, ...]
    params: tuple[str, ...]
    outputs: tuple[str, ...]
    quant: tuple[tuple[int, int, str], ...]
    why_int8: str


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    from google.protobuf.internal.encoder import _VarintBytes

    return _VarintBytes(number << 3 | 2) + _VarintBytes(len(payload)) + payload


def _node_bytes(node: Any) -> bytes:
    """``node`` encoded as one ``GraphProto.node`` entry."""
    return _field(1, node.SerializeToString())


class _Base:
    """The fp32 whole model, taken apart once for cheap rewriting."""

    def __init__(self, model: Any, outputs: Sequence[str], graph: Graph) -> None:
        import onnx

        g = model.graph
        self.nodes = list(g.node)
        self.fields = [_node_bytes(n) for n in self.nodes]
        self.producer = {o: i for i, n in enumerate(self.nodes) for o in n.output if o}
        self.inits = {t.name: t for t in g.initializer}
        self.consts = {o for n in self.nodes if n.op_type == "Constant" for o in n.output}
        self.inputs = {i.name for i in g.input if i.name not in self.inits}
        self.types = _elem_types(model, graph)
        head = onnx.ModelProto(ir_version=model.ir_version, producer_name="placewise",
                               domain=model.domain, model_version=model.model_version)
        head.opset_import.extend(model.opset_import)
        head.functions.extend(model.functions)
        self.head = head.SerializeToString()
        by_name = {o.name: o for o in g.output}
        io = onnx.GraphProto(name=g.name or "emulated")
        io.input.extend(i for i in g.input if i.name not in self.inits)
        for name in outputs:
            if name not in by_name:
                raise UnsupportedError(f"graph output {name!r} is not an output of the "
                                       f"ONNX model")
            io.output.append(by_name[name])
        self.io = io.SerializeToString()
        weights = onnx.GraphProto()
        weights.initializer.extend(g.initializer)
        weights.sparse_initializer.extend(g.sparse_initializer)
        self.weights = _field(7, weights.SerializeToString())
        self._arrays: dict[str, np.ndarray[Any, Any]] = {}

    def is_f32(self, name: str) -> bool:
        return self.types.get(name) == _FLOAT

    def array(self, name: str) -> np.ndarray[Any, Any]:
        """An initializer's values (kept)."""
        if name not in self._arrays:
            from onnx import numpy_helper

            self._arrays[name] = numpy_helper.to_array(self.inits[name])
        return self._arrays[name]


def _elem_types(model: Any, graph: Graph) -> dict[str, int]:
    """ONNX element type of every value: declared, inferred, or the IR tensor's."""
    import onnx

    g = model.graph
    types: dict[str, int] = {t.name: int(t.data_type) for t in g.initializer}
    for vi in (*g.input, *g.output, *g.value_info):
        if vi.type.HasField("tensor_type"):
            types.setdefault(vi.name, int(vi.type.tensor_type.elem_type))
    for n in g.node:
        if n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value":
                    types.setdefault(n.output[0], int(a.t.data_type))
                elif a.name in ("value_float", "value_floats"):
                    types.setdefault(n.output[0], _FLOAT)
    missing = [o for n in g.node for o in n.output if o and o not in types]
    if missing:
        try:
            inferred = onnx.shape_inference.infer_shapes(model).graph.value_info
        except Exception:  # pragma: no cover - models over 2 GiB; IR types below
            inferred = []
        for vi in inferred:
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
                types.setdefault(vi.name, int(vi.type.tensor_type.elem_type))
    by_dtype = {DType.FP32: _FLOAT, DType.FP16: _FLOAT16, DType.BF16: _BFLOAT16}
    for t in graph.tensors:
        if t.name not in types and t.dtype in by_dtype:
            types[t.name] = by_dtype[t.dtype]
    return types


# ---- ops -> ONNX nodes ---------------------------------------------------------------------


def _onnx_regions(base: _Base, graph: Graph) -> dict[str, _Region | str]:
    """Each op's node in an ONNX source: the node of its first output, else of its name;
    everything the node reads is the op's input."""
    by_name = {n.name: i for i, n in enumerate(base.nodes) if n.name}
    out: dict[str, _Region | str] = {}
    for op in graph.ops:
        idx = next((base.producer[o] for o in op.outputs if o in base.producer), None)
        if idx is None:
            idx = by_name.get(op.provenance.source)
        out[op.name] = (f"no ONNX node for {op.where()}" if idx is None
                        else _region(base, op, (idx,), lambda x: True))
    return out


def _torch_regions(base: _Base, graph: Graph) -> dict[str, _Region | str]:
    """Each op's nodes in the whole-model export of a torch source: those that make its
    outputs from values outside it (IR tensors, graph inputs, initializers). Its
    parameters are the initializers it reads that have an IR name or as many elements as
    one of its IR parameters (a weight the exporter transposed); other initializers are
    constants of the exporter's decomposition (an attention's scale or causal mask)."""
    ir = {t.name for t in graph.tensors}
    stop = ir | set(base.inits) | base.inputs
    out: dict[str, _Region | str] = {}
    for op in graph.ops:
        todo = [base.producer[t] for t in op.outputs if t in base.producer]
        seen: set[int] = set()
        while todo:
            i = todo.pop()
            if i in seen:
                continue
            seen.add(i)
            todo.extend(base.producer[x] for x in base.nodes[i].input
                        if x and x not in stop and x in base.producer)
        sizes = {graph.tensor(t).numel for t in op.inputs
                 if t and graph.producer(t) is None and t not in graph.inputs
                 and graph.tensor(t).is_concrete}

        def is_param(x: str, sizes: set[int] = sizes) -> bool:
            return x in ir or _numel(base.inits.get(x)) in sizes

        out[op.name] = (f"no ONNX node for {op.where()}" if not seen
                        else _region(base, op, tuple(sorted(seen)), is_param))
    return out


def _region(base: _Base, op: Op, nodes: tuple[int, ...],
            is_param: Callable[[str], bool]) -> _Region:
    """The float boundary of ``op``'s ``nodes``; ``is_param`` tells a parameter among the
    initializers and constants they read from a constant of a decomposition."""
    made = {o for i in nodes for o in base.nodes[i].output if o}
    acts: list[str] = []
    params: list[str] = []
    for i in nodes:
        for x in base.nodes[i].input:
            if not x or x in made or x in acts or x in params or not base.is_f32(x):
                continue
            if x in base.inits or x in base.consts:
                if is_param(x):
                    params.append(x)
            else:
                acts.append(x)
    outputs = tuple(o for o in op.outputs if o in made and base.is_f32(o))
    quant, why = _int8_slots(base, op, nodes)
    return _Region(nodes, tuple(acts), tuple(params), outputs, quant, why)


def _numel(t: Any) -> int:
    if t is None:
        return 0
    n = 1
    for d in t.dims:
        n *= int(d)
    return n


def _int8_slots(base: _Base, op: Op, nodes: tuple[int, ...]
                ) -> tuple[tuple[tuple[int, int, str], ...], str]:
    """The inputs onnxruntime's dynamic quantization quantizes in ``op``'s nodes (as
    ``runtime.compile.quantize_dynamic_model`` runs it), and why there are none."""
    from onnx import helper

    if op.kind not in INT8_KINDS:
        return (), ""
    slots: list[tuple[int, int, str]] = []
    why = "it has no MatMul, Gemm or Conv node"
    for i in nodes:
        n = base.nodes[i]
        if n.op_type not in _CONTRACTION_TYPES or n.domain not in ("", "ai.onnx") \
                or len(n.input) < 2:
            continue
        if n.op_type == "Gemm":
            a = {x.name: helper.get_attribute_value(x) for x in n.attribute}
            if a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0 or a.get("transA", 0):
                why = f"its Gemm node {n.name!r} has alpha, beta or transA set"
                continue
        w = n.input[1]
        if n.op_type != "Conv" and w not in base.inits:
            why = (f"its {n.op_type} node {n.name!r} multiplies two activations (B is not "
                   f"an initializer)")
            continue
        if not base.is_f32(n.input[0]):
            why = f"its {n.op_type} node {n.name!r} does not read fp32"
            continue
        slots.append((i, 0, "act"))
        if base.is_f32(w):
            slots.append((i, 1, "weight" if w in base.inits else "act"))
    if slots:
        return tuple(slots), ""
    return (), f"onnxruntime dynamic quantization leaves {op.where()} in float: {why}"


# ---- value conversions ----------------------------------------------------------------------


def _round_bf16(a: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """fp32 values rounded to bf16 (nearest even; NaN stays NaN), held in fp32.

    >>> _round_bf16(np.array([1.0 + 2**-8, 1.0 + 3 * 2**-9], np.float32)).tolist()
    [1.0, 1.0078125]
    """
    a = np.ascontiguousarray(a, dtype=np.float32)
    b = a.view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    nan = np.isnan(a)
    if nan.any():
        r[nan] = (a.view(np.uint32)[nan] & 0xFFFF0000) | 0x00400000
    return r.view(np.float32)


def _fake_quant(a: np.ndarray[Any, Any], signed: bool) -> np.ndarray[Any, Any]:
    """Quantize -> dequantize ``a`` per tensor as onnxruntime's dynamic quantization does
    an initializer: int8 symmetric (``signed``: weights) or uint8 asymmetric (an
    activation slot that is a constant), with onnxruntime.quantization's ``quantize_data``."""
    from onnx import TensorProto
    from onnxruntime.quantization.quant_utils import quantize_data

    qtype = TensorProto.INT8 if signed else TensorProto.UINT8
    zp, scale, q = quantize_data(np.ascontiguousarray(a, dtype=np.float32).ravel(), qtype,
                                 signed, reduce_range=False)
    deq = (q.astype(np.int32) - np.int32(zp)).astype(np.float32) * np.float32(scale)
    return deq.reshape(a.shape)


def _convert(a: np.ndarray[Any, Any], tag: str) -> np.ndarray[Any, Any]:
    if tag == "fp16":
        with np.errstate(over="ignore"):  # beyond fp16's range: inf, as Cast makes it
            return a.astype(np.float16).astype(np.float32)
    if tag == "bf16":
        return _round_bf16(a)
    return _fake_quant(a, signed=(tag == "w8"))


def _chain(src: str, dst: str, tag: str, name: str) -> list[Any]:
    """Nodes that make ``dst`` from ``src`` rounded as ``tag`` (fp16 / bf16: Cast there and
    back; q8: DynamicQuantizeLinear -> DequantizeLinear)."""
    from onnx import helper

    if tag in ("fp16", "bf16"):
        mid = f"{dst}__{tag}"
        return [helper.make_node("Cast", [src], [mid], name=f"{name}_to",
                                 to=_FLOAT16 if tag == "fp16" else _BFLOAT16),
                helper.make_node("Cast", [mid], [dst], name=f"{name}_back", to=_FLOAT)]
    q, s, z = f"{dst}__q", f"{dst}__scale", f"{dst}__zero_point"
    return [helper.make_node("DynamicQuantizeLinear", [src], [q, s, z], name=f"{name}_q"),
            helper.make_node("DequantizeLinear", [q, s, z], [dst], name=f"{name}_dq")]


class _Edit:
    """One rewrite of the base model: rounded copies of values, rewired node inputs,
    renamed outputs, the nodes to insert, new initializers."""

    def __init__(self, base: _Base, weights: dict[tuple[str, str], bytes]) -> None:
        self.base = base
        self.weights = weights  # (initializer, tag) -> encoded GraphProto.initializer entry
        self.inputs: dict[int, dict[int, str]] = {}
        self.outputs: dict[int, dict[int, str]] = {}
        self.after: dict[int, list[Any]] = {}
        self.pending: dict[str, tuple[str, str, int]] = {}  # copy -> (value, tag, 1st use)
        self.inits: dict[str, bytes] = {}
        self.rounded: set[str] = set()

    def feed(self, i: int, slot: int, x: str, tag: str) -> None:
        """Node ``i`` reads ``x`` rounded as ``tag`` at input ``slot``."""
        new = f"{x}__pw_{tag}"
        if x in self.base.inits:
            if new not in self.inits:
                key = (x, tag)
                if key not in self.weights:
                    from onnx import numpy_helper

                    arr = _convert(self.base.array(x), tag)
                    self.weights[key] = _field(5, numpy_helper.from_array(
                        arr, new).SerializeToString())
                self.inits[new] = self.weights[key]
        else:
            first = self.pending[new][2] if new in self.pending else i
            self.pending[new] = (x, tag, min(first, i))
        self.inputs.setdefault(i, {})[slot] = new

    def feed_all(self, region: _Region, names: Sequence[str], tag: str) -> None:
        """Every node of ``region`` reads ``names`` rounded as ``tag``."""
        want = set(names)
        for i in region.nodes:
            for k, x in enumerate(self.base.nodes[i].input):
                if x in want:
                    self.feed(i, k, x, tag)

    def round_output(self, y: str, tag: str) -> None:
        """Whatever reads ``y`` reads it rounded as ``tag``."""
        if y in self.rounded:
            return
        self.rounded.add(y)
        i = self.base.producer[y]
        raw = f"{y}__pw_raw"
        self.outputs.setdefault(i, {})[list(self.base.nodes[i].output).index(y)] = raw
        self.after.setdefault(i, []).extend(_chain(raw, y, tag, f"pw_out_{len(self.rounded)}"))

    def encode(self) -> bytes:
        """The rewritten model, serialized."""
        import onnx

        base = self.base
        before: dict[int, list[Any]] = {}
        for k, (new, (x, tag, first)) in enumerate(sorted(self.pending.items())):
            before.setdefault(first, []).extend(_chain(x, new, tag, f"pw_in_{k}"))
        parts = [base.io, *self.inits.values()]
        for i, enc in enumerate(base.fields):
            parts.extend(_node_bytes(n) for n in before.get(i, ()))
            if i in self.inputs or i in self.outputs:
                node = onnx.NodeProto()
                node.CopyFrom(base.nodes[i])
                for slot, name in self.inputs.get(i, {}).items():
                    node.input[slot] = name
                for slot, name in self.outputs.get(i, {}).items():
                    node.output[slot] = name
                enc = _node_bytes(node)
            parts.append(enc)
            parts.extend(_node_bytes(n) for n in self.after.get(i, ()))
        return base.head + _field(7, b"".join(parts)) + base.weights


# ---- the emulator ---------------------------------------------------------------------------


def _whole_model(source: Any, graph: Graph) -> Any:
    """One fp32 ONNX model of every op of a torch source, each op's tensors named as the IR
    names them (``runtime.compile``: one ``Partition`` whose outputs are all of them)."""
    from placewise.runtime.compile import compile_partition
    from placewise.runtime.program import Partition

    seen = set(graph.inputs)
    outs: list[str] = []
    for t in (*(t for op in graph.ops for t in op.outputs), *graph.outputs):
        if t and t not in seen:
            seen.add(t)
            outs.append(t)
    part = Partition("emulated", 0, "cpu", DType.FP32, tuple(o.name for o in graph.ops),
                     graph.ops, tuple(graph.inputs), tuple(outs))
    try:
        return compile_partition(source, part, graph)
    except UnsupportedError as exc:
        raise UnsupportedError(f"no whole-model ONNX of {graph.name!r} to emulate on: "
                               f"{exc}") from None


class Emulator:
    """The model on this CPU with chosen ops emulated at lower precision (module doc).

    ``threads``: onnxruntime intra-op threads of each session (default 1: a session is
    built per call, and on models this size a thread pool costs more to start than it
    saves).
    """

    SCHEMES = SCHEMES

    def __init__(self, source: Any, graph: Graph, *, threads: int | None = None) -> None:
        from placewise.runtime.opexec import SourceFormat

        self.graph = graph
        self.threads = threads or 1
        if source.format is SourceFormat.ONNX:
            model = source.onnx_model
            self._base = _Base(model, graph.outputs, graph)
            self._regions = _onnx_regions(self._base, graph)
        else:
            model = _whole_model(source, graph)
            self._base = _Base(model, graph.outputs, graph)
            self._regions = _torch_regions(self._base, graph)
        self._weights: dict[tuple[str, str], bytes] = {}
        self._reference: Any = None

    def why_not(self, op_name: str, dtype: DType) -> str:
        """Why op ``op_name`` cannot be emulated at ``dtype`` ('' when it can)."""
        op = self._op(op_name)
        if dtype is DType.FP32:
            return ""
        if dtype not in SCHEMES:
            return f"{op.where()}: no emulation of {dtype.value}"
        region = self._regions[op.name]
        if isinstance(region, str):
            return region
        if dtype is DType.INT8 and op.kind in INT8_KINDS:
            return region.why_int8
        if dtype is DType.INT8 and not (region.acts or region.outputs):
            return f"{op.where()} has no fp32 activation to quantize"
        if not (region.acts or region.params or region.outputs):
            return f"{op.where()} has no fp32 input or output"
        return ""

    def lowerable(self, op_name: str, dtype: DType) -> bool:
        """Whether op ``op_name`` can be emulated at ``dtype``."""
        return not self.why_not(op_name, dtype)

    def rewritten(self, lowered: Mapping[str, DType]) -> bytes:
        """The serialized ONNX model with ``lowered`` emulated (``UnsupportedError`` naming
        the first op that cannot be)."""
        for name in lowered:
            self._op(name)
        edit = _Edit(self._base, self._weights)
        for op in self.graph.ops:
            dtype = lowered.get(op.name, DType.FP32)
            if dtype is DType.FP32:
                continue
            why = self.why_not(op.name, dtype)
            if why:
                raise UnsupportedError(f"cannot emulate op {op.name!r} in {dtype.value}: "
                                       f"{why}")
            region = self._regions[op.name]
            assert isinstance(region, _Region)
            _lower(edit, self._base, op, region, dtype)
        return edit.encode()

    def outputs(self, requests: Sequence[Sequence[np.ndarray[Any, Any]]],
                lowered: Mapping[str, DType]) -> list[list[np.ndarray[Any, Any]]]:
        """The graph's outputs (``graph.outputs`` order) of every request (arrays in
        ``graph.inputs`` order) with the ops of ``lowered`` emulated at their dtype."""
        if any(d is not DType.FP32 for d in lowered.values()):
            sess = self._session(self.rewritten(lowered))
        else:
            for name in lowered:
                self._op(name)
            if self._reference is None:
                self._reference = self._session(self.rewritten({}))
            sess = self._reference
        wanted = {i.name for i in sess.get_inputs()}
        names = list(self.graph.outputs)
        out: list[list[np.ndarray[Any, Any]]] = []
        for k, req in enumerate(requests):
            if len(req) != len(self.graph.inputs):
                raise InputError(f"request {k} has {len(req)} arrays; the model has "
                                 f"{len(self.graph.inputs)} inputs")
            feeds = {n: np.asarray(a) for n, a in zip(self.graph.inputs, req, strict=True)
                     if n in wanted}
            out.append([np.asarray(v) for v in sess.run(names, feeds)])
        return out

    def _op(self, name: str) -> Op:
        if not self.graph.has_op(name):
            raise InputError(f"no op named {name!r} in graph {self.graph.name!r}")
        return self.graph.op(name)

    def _session(self, data: bytes) -> Any:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _OPT_LEVEL)
        opts.intra_op_num_threads = self.threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.log_severity_level = 3
        return ort.InferenceSession(data, sess_options=opts,
                                    providers=["CPUExecutionProvider"])


def _lower(edit: _Edit, base: _Base, op: Op, region: _Region, dtype: DType) -> None:
    """Record in ``edit`` the emulation of ``op`` at ``dtype`` (see the module doc)."""
    if dtype is DType.INT8 and op.kind in INT8_KINDS:
        for i, slot, role in region.quant:
            x = base.nodes[i].input[slot]
            tag = "w8" if role == "weight" else ("u8" if x in base.inits else "q8")
            edit.feed(i, slot, x, tag)
    elif dtype is DType.INT8:
        edit.feed_all(region, region.acts, "q8")
        for y in region.outputs:
            edit.round_output(y, "q8")
    else:
        tag = "fp16" if dtype is DType.FP16 else "bf16"
        edit.feed_all(region, (*region.acts, *region.params), tag)
        for y in region.outputs:
            edit.round_output(y, tag)
