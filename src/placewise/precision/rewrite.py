"""Cheap rewrites of one fp32 ONNX model: the machinery under ``precision.emulate``.

``BaseModel`` takes the fp32 model apart once: every node encoded on its own (a
``GraphProto.node`` entry), the small initializers encoded once, the fp32 weights (at least
``FED_MIN`` elements) kept as numpy arrays and declared as graph inputs, fed at run time
(onnxruntime reads numpy inputs in place: no session copies or parses them). ``Edit``
records one rewrite (rounded copies of values, rewired inputs, renamed outputs, inserted
nodes, converted weights) and encodes it by concatenating bytes: protobuf merges repeated
fields, so only changed nodes and new weights are serialized per call.

``Edit.affected`` gives the nodes a rewrite changes (every node downstream of a rewired
one, and what they need that is not cached): with the fp32 values of a reference run
cached, a call runs only those nodes, reading the rest from the cache.

Value conversions (``convert``): ``fp16`` / ``bf16`` rounding (nearest even), ``w8`` int8
symmetric and ``u8`` uint8 asymmetric per-tensor quantize -> dequantize with
onnxruntime.quantization's own ``quantize_data``; in the graph, ``chain`` makes the same
roundings of activations (Cast there and back; ``q8``: DynamicQuantizeLinear ->
DequantizeLinear).

>>> round_bf16(np.array([1.0 + 2**-8, 1.0 + 3 * 2**-9], np.float32)).tolist()
[1.0, 1.0078125]
>>> w = np.array([-1.0, 0.1, 0.5], np.float32)
>>> q = convert(w, "w8")  # off by at most half a step of 1/64 (7 bits) or 1/127 (8 bits)
>>> float(q[0]), bool(np.abs(q - w).max() <= 1 / 128 + 1e-7), bool(q[1] != w[1])
(-1.0, True, True)
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from placewise.errors import UnsupportedError
from placewise.graph.ir import Graph
from placewise.graph.onnx_data import embedded, to_array
from placewise.runtime.compile import int8_weights_reduced
from placewise.units import DType

__all__ = ["FED_MIN", "FLOAT", "BaseModel", "Edit", "chain", "convert", "fake_quant",
           "round_bf16"]

FLOAT = 1  # onnx.TensorProto.FLOAT
_FLOAT16 = 10
_BFLOAT16 = 16
_DOUBLE = 11
#: fp32 initializers of this many elements or more are fed as graph inputs
FED_MIN = 1024


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    # lazy: onnx's protobuf is heavy to import, loaded only when this runs
    from google.protobuf.internal.encoder import _VarintBytes

    return _VarintBytes(number << 3 | 2) + _VarintBytes(len(payload)) + payload


def _node_bytes(node: Any) -> bytes:
    """``node`` encoded as one ``GraphProto.node`` entry."""
    return _field(1, node.SerializeToString())


def _value_info(name: str, elem_type: int | None = None,
                shape: Sequence[int] | None = None) -> Any:
    # lazy: onnx is heavy to import, loaded only when this runs
    from onnx import ValueInfoProto, helper

    if elem_type is None:
        return ValueInfoProto(name=name)
    return helper.make_tensor_value_info(name, elem_type, list(shape or ()))


class BaseModel:
    """The fp32 model, taken apart once (module doc). ``outputs``: the graph's outputs."""

    def __init__(self, model: Any, outputs: Sequence[str], graph: Graph) -> None:
        # lazy: onnx is heavy to import, loaded only when this runs
        import onnx

        g = model.graph
        self.nodes = list(g.node)
        self.fields = [_node_bytes(n) for n in self.nodes]
        self.producer = {o: i for i, n in enumerate(self.nodes) for o in n.output if o}
        self.consumers: dict[str, list[int]] = {}
        for i, n in enumerate(self.nodes):
            for x in dict.fromkeys(n.input):
                if x:
                    self.consumers.setdefault(x, []).append(i)
        # a subgraph reads outer values implicitly: no partial runs then
        self.partial_ok = not any(a.type in (onnx.AttributeProto.GRAPH,
                                             onnx.AttributeProto.GRAPHS)
                                  for n in self.nodes for a in n.attribute)
        self.inits = {t.name for t in g.initializer}
        self.dims = {t.name: tuple(int(d) for d in t.dims) for t in g.initializer}
        self.fed = {t.name: to_array(t) for t in g.initializer  # external: memory-mapped
                    if t.data_type == FLOAT and math.prod(t.dims) >= FED_MIN}
        self._small: dict[str, Any] = {}
        for t in g.initializer:
            if t.name not in self.fed:
                self._small[t.name] = onnx.TensorProto()
                self._small[t.name].CopyFrom(embedded(t))
        self.consts = {o for n in self.nodes if n.op_type == "Constant" for o in n.output}
        self.inputs = {i.name for i in g.input if i.name not in self.inits}
        self.types = _elem_types(model, graph)
        head = onnx.ModelProto(ir_version=model.ir_version, producer_name="placewise",
                               domain=model.domain, model_version=model.model_version)
        head.opset_import.extend(model.opset_import)
        head.functions.extend(model.functions)
        self.head = head.SerializeToString()
        io = onnx.GraphProto(name=g.name or "emulated")
        io.input.extend(i for i in g.input if i.name not in self.inits)
        io.input.extend(_value_info(n, FLOAT, self.dims[n]) for n in self.fed)
        self.io = io.SerializeToString()
        by_name = {o.name: o for o in g.output}
        missing = [o for o in outputs if o not in by_name]
        if missing:
            raise UnsupportedError(f"graph output {missing[0]!r} is not an output of the "
                                   f"ONNX model")
        self.outputs = {o: _field(12, by_name[o].SerializeToString()) for o in outputs}
        weights = onnx.GraphProto()
        weights.initializer.extend(self._small.values())
        weights.sparse_initializer.extend(g.sparse_initializer)
        self.weights = _field(7, weights.SerializeToString())
        self._arrays: dict[str, np.ndarray[Any, Any]] = {}

    def is_f32(self, name: str) -> bool:
        return self.types.get(name) == FLOAT

    def numel(self, name: str) -> int:
        """Elements of initializer ``name`` (0 for other values)."""
        dims = self.dims.get(name)
        return 0 if dims is None else math.prod(dims)

    def array(self, name: str) -> np.ndarray[Any, Any]:
        """An initializer's values (kept)."""
        if name in self.fed:
            return self.fed[name]
        if name not in self._arrays:
            # lazy: onnx is heavy to import, loaded only when this runs
            from onnx import numpy_helper

            self._arrays[name] = numpy_helper.to_array(self._small[name])
        return self._arrays[name]

    def output_field(self, name: str) -> bytes:
        """``name`` as an encoded graph output (typed for the graph's own outputs)."""
        return self.outputs.get(name) or _field(12, _value_info(name).SerializeToString())


def _elem_types(model: Any, graph: Graph) -> dict[str, int]:
    """ONNX element type of every value: declared, inferred, or the IR tensor's."""
    # lazy: onnx is heavy to import, loaded only when this runs
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
                    types.setdefault(n.output[0], FLOAT)
    if any(o and o not in types for n in g.node for o in n.output):
        try:
            inferred = onnx.shape_inference.infer_shapes(model).graph.value_info
        except Exception:  # pragma: no cover - models over 2 GiB; IR types below
            inferred = []
        for vi in inferred:
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
                types.setdefault(vi.name, int(vi.type.tensor_type.elem_type))
    by_dtype = {DType.FP32: FLOAT, DType.FP16: _FLOAT16, DType.BF16: _BFLOAT16}
    for t in graph.tensors:
        if t.name not in types and t.dtype in by_dtype:
            types[t.name] = by_dtype[t.dtype]
    return types


# ---- value conversions ----------------------------------------------------------------------


def round_bf16(a: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """fp32 values rounded to bf16 (nearest even; NaN stays NaN), held in fp32: what
    onnxruntime's ``Cast`` to bfloat16 and back gives."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    b = a.view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    nan = np.isnan(a)
    if nan.any():
        r[nan] = (a.view(np.uint32)[nan] & 0xFFFF0000) | 0x00400000
    return r.view(np.float32)


def fake_quant(a: np.ndarray[Any, Any], signed: bool) -> np.ndarray[Any, Any]:
    """Quantize -> dequantize ``a`` per tensor as onnxruntime's dynamic quantization does
    an initializer: int8 symmetric (``signed``: weights) or uint8 asymmetric (an
    activation slot that is a constant), with onnxruntime.quantization's ``quantize_data``;
    weights at 7 bits where the runtime quantizes them so
    (``runtime.compile.int8_weights_reduced``)."""
    # lazy: onnx is heavy to import, loaded only when this runs
    from onnx import TensorProto
    from onnxruntime.quantization.quant_utils import quantize_data

    # lazy: onnxruntime (placewise.onnxrt imports it) is heavy to import, loaded only when this runs
    from placewise.onnxrt import quiet_logs

    quiet_logs()

    qtype = TensorProto.INT8 if signed else TensorProto.UINT8
    zp, scale, q = quantize_data(np.ascontiguousarray(a, dtype=np.float32).ravel(), qtype,
                                 signed, reduce_range=signed and int8_weights_reduced())
    deq = (q.astype(np.int32) - np.int32(zp)).astype(np.float32) * np.float32(scale)
    return deq.reshape(a.shape)


def convert(a: np.ndarray[Any, Any], tag: str) -> np.ndarray[Any, Any]:
    """``a`` rounded as ``tag``: ``fp16``, ``bf16``, ``w8`` (int8 symmetric) or ``u8``."""
    if tag == "fp16":
        with np.errstate(over="ignore"):  # beyond fp16's range: inf, as Cast makes it
            return a.astype(np.float16).astype(np.float32)
    if tag == "bf16":
        return round_bf16(a)
    return fake_quant(a, signed=(tag == "w8"))


def chain(src: str, dst: str, tag: str, name: str) -> list[Any]:
    """Nodes that make ``dst`` from ``src`` rounded as ``tag`` (fp16 / bf16: Cast there and
    back; q8: DynamicQuantizeLinear -> DequantizeLinear; s8: ``_held_int8``)."""
    # lazy: onnx is heavy to import, loaded only when this runs
    from onnx import helper

    if tag in ("fp16", "bf16"):
        mid = f"{dst}__{tag}"
        return [helper.make_node("Cast", [src], [mid], name=f"{name}_to",
                                 to=_FLOAT16 if tag == "fp16" else _BFLOAT16),
                helper.make_node("Cast", [mid], [dst], name=f"{name}_back", to=FLOAT)]
    if tag == "s8":
        return _held_int8(src, dst, name)
    q, s, z = f"{dst}__q", f"{dst}__scale", f"{dst}__zero_point"
    return [helper.make_node("DynamicQuantizeLinear", [src], [q, s, z], name=f"{name}_q"),
            helper.make_node("DequantizeLinear", [q, s, z], [dst], name=f"{name}_dq")]


def _held_int8(src: str, dst: str, name: str) -> list[Any]:
    """Nodes that make ``dst`` from ``src`` held in int8 as the executor holds it
    (``runtime.opexec.quantize_int8`` then ``dequantize_int8``): symmetric per tensor,
    ``scale = max|x| / 127`` in double (1 when that is 0 or not finite), ``q = clip(round(x
    * float(1 / scale)), -127, 127)``, ``q * float(scale)``."""
    # lazy: onnx is heavy to import, loaded only when this runs
    from onnx import helper

    p = f"{dst}__s8"

    def const(key: str, value: float, elem: int) -> Any:
        return helper.make_node("Constant", [], [f"{p}_{key}"], name=f"{name}_{key}",
                                value=helper.make_tensor(f"{p}_{key}", elem, [], [value]))

    def node(op: str, ins: list[str], out: str, **attrs: Any) -> Any:
        return helper.make_node(op, ins, [out], name=f"{name}_{out.rsplit('_', 1)[-1]}",
                                **attrs)

    return [const("k127", 127.0, _DOUBLE), const("one", 1.0, _DOUBLE),
            const("zero", 0.0, _DOUBLE), const("lo", -127.0, FLOAT),
            const("hi", 127.0, FLOAT),
            node("Abs", [src], f"{p}_abs"),
            node("ReduceMax", [f"{p}_abs"], f"{p}_amax", keepdims=0),
            node("Cast", [f"{p}_amax"], f"{p}_amaxd", to=_DOUBLE),
            node("Div", [f"{p}_amaxd", f"{p}_k127"], f"{p}_raw"),
            node("Greater", [f"{p}_amaxd", f"{p}_zero"], f"{p}_pos"),
            node("IsInf", [f"{p}_amaxd"], f"{p}_inf"),
            node("Not", [f"{p}_inf"], f"{p}_fin"),
            node("And", [f"{p}_pos", f"{p}_fin"], f"{p}_ok"),
            node("Where", [f"{p}_ok", f"{p}_raw", f"{p}_one"], f"{p}_sd"),
            node("Div", [f"{p}_one", f"{p}_sd"], f"{p}_invd"),
            node("Cast", [f"{p}_invd"], f"{p}_inv", to=FLOAT),
            node("Cast", [f"{p}_sd"], f"{p}_sf", to=FLOAT),
            node("Mul", [src, f"{p}_inv"], f"{p}_xs"),
            node("Round", [f"{p}_xs"], f"{p}_r"),
            node("Clip", [f"{p}_r", f"{p}_lo", f"{p}_hi"], f"{p}_q"),
            node("Mul", [f"{p}_q", f"{p}_sf"], dst)]


# ---- one rewrite ----------------------------------------------------------------------------


class Edit:
    """One rewrite of ``base``. ``weights`` / ``arrays`` are the caller's caches across
    rewrites: converted small initializers (encoded) and converted fed weights (arrays)."""

    def __init__(self, base: BaseModel, weights: dict[str, bytes],
                 arrays: dict[str, np.ndarray[Any, Any]]) -> None:
        self.base = base
        self.weights = weights
        self.arrays = arrays
        self.inputs: dict[int, dict[int, str]] = {}  # node -> input slot -> new name
        self.outputs: dict[int, dict[int, str]] = {}  # node -> output slot -> new name
        self.after: dict[int, list[Any]] = {}
        self.pending: dict[str, tuple[str, str, int]] = {}  # copy -> (value, tag, 1st use)
        self.extra: dict[str, bytes] = {}  # new initializers and fed inputs, encoded
        self.rounded: set[str] = set()
        self.held: set[str] = set()  # values held in int8 (``s8``) for every reader

    def feed(self, i: int, slot: int, x: str, tag: str) -> None:
        """Node ``i`` reads ``x`` (or what it reads there already: a rounded copy of it)
        rounded as ``tag`` at input ``slot``."""
        x = self.inputs.get(i, {}).get(slot, x)
        new = f"{x}__pw_{tag}"
        if x in self.base.inits:
            if new not in self.extra:
                self.extra[new] = self._weight(x, new, tag)
        else:
            first = self.pending[new][2] if new in self.pending else i
            self.pending[new] = (x, tag, min(first, i))
        self.inputs.setdefault(i, {})[slot] = new

    def _weight(self, x: str, new: str, tag: str) -> bytes:
        """Initializer ``x`` converted as ``tag`` under the name ``new``: a graph input fed
        at run time (large fp32 weights) or a new initializer, encoded."""
        # lazy: onnx is heavy to import, loaded only when this runs
        from onnx import numpy_helper

        if x in self.base.fed:
            if new not in self.arrays:
                self.arrays[new] = convert(self.base.fed[x], tag)
            return _field(11, _value_info(new, FLOAT, self.base.dims[x]).SerializeToString())
        if new not in self.weights:
            arr = convert(self.base.array(x), tag)
            self.weights[new] = _field(5, numpy_helper.from_array(arr, new).SerializeToString())
        return self.weights[new]

    def feed_all(self, nodes: Iterable[int], names: Collection[str], tag: str) -> None:
        """Every one of ``nodes`` reads ``names`` rounded as ``tag``."""
        for i in nodes:
            for k, x in enumerate(self.base.nodes[i].input):
                if x in names:
                    self.feed(i, k, x, tag)

    def round_output(self, y: str, tag: str) -> None:
        """Whatever reads ``y`` reads it rounded as ``tag``."""
        if y in self.rounded:
            return
        self.rounded.add(y)
        if tag == "s8":
            self.held.add(y)
        i = self.base.producer[y]
        raw = f"{y}__pw_raw"
        self.outputs.setdefault(i, {})[list(self.base.nodes[i].output).index(y)] = raw
        self.after.setdefault(i, []).extend(chain(raw, y, tag, f"pw_out_{len(self.rounded)}"))

    def affected(self, cached: Collection[str]) -> tuple[set[int], list[str]]:
        """The nodes to run when the values in ``cached`` are read from a reference run:
        those downstream of a changed node, and those making what they read that is not
        cached; and the cached values they read (the cut)."""
        base = self.base
        keep: set[int] = set()
        todo = [*self.inputs, *self.outputs]
        while todo:
            i = todo.pop()
            if i not in keep:
                keep.add(i)
                for o in base.nodes[i].output:
                    todo.extend(base.consumers.get(o, ()))
        reads = [x for i in keep for x in base.nodes[i].input]
        reads += [x for x, _, _ in self.pending.values()]
        cut: set[str] = set()
        while reads:
            x = reads.pop()
            p = base.producer.get(x)
            if p is None or p in keep or x in cut:
                continue
            if x in cached:
                cut.add(x)
            else:
                keep.add(p)
                reads.extend(base.nodes[p].input)
        return keep, sorted(cut)

    def encode(self, outputs: Sequence[str], keep: Collection[int] | None = None,
               cut: Mapping[str, tuple[int, Sequence[int]]] | None = None) -> bytes:
        """The rewritten model, serialized, with graph outputs ``outputs``; only the nodes
        ``keep`` (None: all), reading the values ``cut`` (name -> element type, shape) as
        graph inputs."""
        # lazy: onnx is heavy to import, loaded only when this runs
        import onnx

        base = self.base
        before: dict[int, list[Any]] = {}
        for k, (new, (x, tag, first)) in enumerate(sorted(self.pending.items())):
            before.setdefault(first, []).extend(chain(x, new, tag, f"pw_in_{k}"))
        parts = [base.io, *(base.output_field(o) for o in outputs), *self.extra.values()]
        parts += [_field(11, _value_info(x, t, s).SerializeToString())
                  for x, (t, s) in (cut or {}).items()]
        for i, enc in enumerate(base.fields):
            if keep is not None and i not in keep:
                continue
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
