"""Emulated lower precision: the whole model on this CPU, with chosen ops at int8, fp16, bf16.

``Emulator(source, graph)`` is built once per model source (``runtime.opexec.ModelSource``)
and its bound ``graph``; ``emulator.outputs(requests, lowered)`` runs every request through
onnxruntime with the ops named in ``lowered`` (IR op name -> ``DType``) emulated at that
precision, and returns the graph's outputs per request. ``lowered={}`` is the fp32
reference. Each call builds one rewritten copy of the fp32 model and one session.

The schemes (``SCHEMES``, ``scheme(dtype)``; the plan file records them):

- **int8 on linear / matmul / gemm / conv** (``graph.ir.INT8_KINDS``): exactly what the
  runtime runs for an int8 vertex. Its float activations in and its float outputs are held
  in int8 as the executor holds them (the conversion tasks before it, its outputs
  quantized: ``runtime.opexec.quantize_int8`` symmetric per tensor, then dequantized;
  ``rewrite.chain`` tag ``s8``); inside, the int8 partition (``runtime.compile.
  quantize_dynamic_model``: onnxruntime dynamic quantization of MatMul / Gemm / Conv,
  ``MatMulConstBOnly``): the weight (an initializer) int8 symmetric per tensor (7-bit where
  ``runtime.compile.int8_weights_reduced``), quantized by
  onnxruntime.quantization's own ``quantize_data`` and dequantized here; the activation
  quantized per call to uint8 (asymmetric, per tensor) by a ``DynamicQuantizeLinear ->
  DequantizeLinear`` pair in front of the node. A MatMul whose B is not an initializer, or
  a Gemm with ``transA``, ``alpha`` or ``beta`` set, stays float in the runtime: such an op
  is not lowerable to int8 here. Each lowered op is taken as its own vertex: where the
  runtime runs two int8 contractions back to back in one partition, the tensor between
  them stays fp32 there, and the emulation (which holds it in int8) errs on the safe side.
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

Sessions run with graph optimizations off (``ORT_DISABLE_ALL``): nothing may fold, fuse or
reorder the inserted casts and quantize pairs (fusions only reorder fp32 rounding, at the
1e-7 level of the reference check; building a session is also half as fast with them),
one intra-op thread, no spinning. The model is taken apart once (``precision.rewrite``):
a call encodes only the nodes it changes and its converted weights; fp32 weights are
graph inputs fed from numpy, so no session copies or parses them. The fp32 values of the
graph's tensors on the last requests are kept (up to ``cache_bytes``), and a call runs
only the nodes downstream of what it changes, reading the rest from them (the same
numbers as a whole run).

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
from placewise.graph.onnx_data import ort_session
from placewise.graph.onnx_kinds import INT8_ONNX_OP_TYPES
from placewise.precision.rewrite import BaseModel, Edit
from placewise.runtime.compile import compile_partition
from placewise.runtime.program import Partition
from placewise.units import DType

__all__ = ["CACHE_MAX_BYTES", "SCHEMES", "Emulator", "scheme"]

#: one line per emulated precision: what the emulation assumes the device does
SCHEMES: Mapping[DType, str] = MappingProxyType({
    DType.INT8: ("linear/matmul/gemm/conv as the runtime runs an int8 vertex: float inputs "
                 "and outputs held in int8 (symmetric per tensor), onnxruntime dynamic "
                 "quantization inside (weights int8 symmetric per tensor, 7-bit where the "
                 "CPU's integer GEMM saturates at 8, activations uint8 "
                 "asymmetric per tensor per call, int32 accumulate), emulated by "
                 "quantize->dequantize; other float ops: float activations in and out "
                 "quantize->dequantized uint8 per tensor per call, parameters kept float"),
    DType.FP16: ("float inputs (parameters included) and outputs rounded to fp16 (nearest "
                 "even), computed in fp32 (fp32 accumulate)"),
    DType.BF16: ("float inputs (parameters included) and outputs rounded to bf16 (nearest "
                 "even), computed in fp32 (fp32 accumulate)"),
})

_OPT_LEVEL = "ORT_DISABLE_ALL"
#: the most bytes of fp32 reference values kept to run only what a rewrite changes
CACHE_MAX_BYTES = 512 * 2**20


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


# ---- ops -> ONNX nodes ---------------------------------------------------------------------


def _onnx_regions(base: BaseModel, graph: Graph) -> dict[str, _Region | str]:
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


def _torch_regions(base: BaseModel, graph: Graph) -> dict[str, _Region | str]:
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
            return x in ir or base.numel(x) in sizes

        out[op.name] = (f"no ONNX node for {op.where()}" if not seen
                        else _region(base, op, tuple(sorted(seen)), is_param))
    return out


def _region(base: BaseModel, op: Op, nodes: tuple[int, ...],
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


def _int8_slots(base: BaseModel, op: Op, nodes: tuple[int, ...]
                ) -> tuple[tuple[tuple[int, int, str], ...], str]:
    """The inputs onnxruntime's dynamic quantization quantizes in ``op``'s nodes (as
    ``runtime.compile.quantize_dynamic_model`` runs it), and why there are none."""
    # lazy: onnx is heavy to import, loaded only when this runs
    from onnx import helper

    if op.kind not in INT8_KINDS:
        return (), ""
    slots: list[tuple[int, int, str]] = []
    why = "it has no MatMul, Gemm or Conv node"
    for i in nodes:
        n = base.nodes[i]
        if n.op_type not in INT8_ONNX_OP_TYPES or n.domain not in ("", "ai.onnx") \
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


# ---- the emulator ---------------------------------------------------------------------------


def _whole_model(source: Any, graph: Graph) -> Any:
    """One fp32 ONNX model of every op of a torch source, each op's tensors named as the IR
    names them (``runtime.compile``: one ``Partition`` whose outputs are all of them)."""
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
    saves). ``cache_bytes``: the most bytes of fp32 reference values kept per set of
    requests (``CACHE_MAX_BYTES``; 0: every call runs the whole model).
    """

    SCHEMES = SCHEMES

    def __init__(self, source: Any, graph: Graph, *, threads: int | None = None,
                 cache_bytes: int = CACHE_MAX_BYTES) -> None:
        # lazy: torch (runtime.opexec imports it) is heavy to import, loaded only when this runs
        from placewise.runtime.opexec import SourceFormat

        self.graph = graph
        self.threads = threads or 1
        if source.format is SourceFormat.ONNX:
            self._base = BaseModel(source.onnx_model, graph.outputs, graph)
            self._regions = _onnx_regions(self._base, graph)
        else:
            self._base = BaseModel(_whole_model(source, graph), graph.outputs, graph)
            self._regions = _torch_regions(self._base, graph)
        self._weights: dict[str, bytes] = {}
        self._arrays: dict[str, np.ndarray[Any, Any]] = {}
        self.cache_bytes = cache_bytes
        self._cached: tuple[list[list[np.ndarray[Any, Any]]],
                            list[dict[str, np.ndarray[Any, Any]]]] | None = None

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
        """The serialized whole ONNX model with ``lowered`` emulated; its fp32 weights of
        ``rewrite.FED_MIN`` elements or more are graph inputs."""
        return self._edit(lowered).encode(self.graph.outputs)

    def outputs(self, requests: Sequence[Sequence[np.ndarray[Any, Any]]],
                lowered: Mapping[str, DType]) -> list[list[np.ndarray[Any, Any]]]:
        """The graph's outputs (``graph.outputs`` order) of every request (arrays in
        ``graph.inputs`` order) with the ops of ``lowered`` emulated at their dtype
        (``UnsupportedError`` naming the first op that cannot be)."""
        reqs = [list(r) for r in requests]
        for k, req in enumerate(reqs):
            if len(req) != len(self.graph.inputs):
                raise InputError(f"request {k} has {len(req)} arrays; the model has "
                                 f"{len(self.graph.inputs)} inputs")
        edit = self._edit(lowered)
        cache = self._reference(reqs)
        if cache is None:
            return self._run(edit.encode(self.graph.outputs), reqs, self.graph.outputs, [])
        if not edit.inputs and not edit.outputs:
            return [[c[o] for o in self.graph.outputs] for c in cache]
        keep, cut = edit.affected(cache[0])
        made = {o for i in keep for o in self._base.nodes[i].output}
        fetch = [o for o in self.graph.outputs if o in made]
        got = self._run(edit.encode(fetch, keep, {x: _spec(cache[0][x]) for x in cut}),
                        reqs, fetch, [{x: c[x] for x in cut} for c in cache]) if fetch else \
            [[] for _ in reqs]
        out = []
        for c, g in zip(cache, got, strict=True):
            new = dict(zip(fetch, g, strict=True))
            out.append([new[o] if o in new else c[o] for o in self.graph.outputs])
        return out

    def _edit(self, lowered: Mapping[str, DType]) -> Edit:
        for name in lowered:
            self._op(name)
        edit = Edit(self._base, self._weights, self._arrays)
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
        return edit

    def _reference(self, reqs: list[list[np.ndarray[Any, Any]]]
                   ) -> list[dict[str, np.ndarray[Any, Any]]] | None:
        """The fp32 values of the graph's tensors on ``reqs`` (kept for the last requests
        seen), or None when they would take more than ``cache_bytes``."""
        g = self.graph
        names = [t.name for t in g.tensors if t.name in self._base.producer]
        if not self._base.partial_ok or not all(g.tensor(t).is_concrete for t in names) or \
                sum(g.tensor(t).nbytes for t in names) * len(reqs) > self.cache_bytes:
            return None
        if self._cached is not None and _same(self._cached[0], reqs):
            return self._cached[1]
        names = list(dict.fromkeys([*g.outputs, *names]))
        vals = self._run(Edit(self._base, {}, {}).encode(names), reqs, names, [])
        self._cached = ([[a.copy() for a in r] for r in reqs],
                        [dict(zip(names, v, strict=True)) for v in vals])
        return self._cached[1]

    def _run(self, data: bytes, reqs: list[list[np.ndarray[Any, Any]]], fetch: Sequence[str],
             extra: Sequence[Mapping[str, np.ndarray[Any, Any]]]
             ) -> list[list[np.ndarray[Any, Any]]]:
        """Run the model ``data`` on every request (plus ``extra`` inputs per request)."""
        sess = self._session(data)
        wanted = {i.name for i in sess.get_inputs()}
        weights = {n: a for n, a in (*self._base.fed.items(), *self._arrays.items())
                   if n in wanted}
        out = []
        for k, req in enumerate(reqs):
            feeds = {n: np.asarray(a) for n, a in zip(self.graph.inputs, req, strict=True)
                     if n in wanted}
            feeds.update(weights)
            if extra:
                feeds.update(extra[k])
            out.append([np.asarray(v) for v in sess.run(list(fetch), feeds)])
        return out

    def _op(self, name: str) -> Op:
        if not self.graph.has_op(name):
            raise InputError(f"no op named {name!r} in graph {self.graph.name!r}")
        return self.graph.op(name)

    def _session(self, data: bytes) -> Any:
        # lazy: onnxruntime is heavy to import, loaded only when this runs
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _OPT_LEVEL)
        opts.intra_op_num_threads = self.threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.log_severity_level = 3
        return ort_session(data, opts)


def _same(a: list[list[np.ndarray[Any, Any]]], b: list[list[np.ndarray[Any, Any]]]) -> bool:
    return len(a) == len(b) and all(
        len(x) == len(y) and all(np.asarray(u).dtype == np.asarray(v).dtype
                                 and np.array_equal(u, v) for u, v in zip(x, y, strict=True))
        for x, y in zip(a, b, strict=True))


def _spec(a: np.ndarray[Any, Any]) -> tuple[int, tuple[int, ...]]:
    # lazy: onnx is heavy to import, loaded only when this runs
    from onnx import helper

    return helper.np_dtype_to_tensor_dtype(a.dtype), tuple(a.shape)


def _lower(edit: Edit, base: BaseModel, op: Op, region: _Region, dtype: DType) -> None:
    """Record in ``edit`` the emulation of ``op`` at ``dtype`` (see the module doc)."""
    if dtype is DType.INT8 and op.kind in INT8_KINDS:
        # held in int8 at the op's boundary, as the executor holds an int8 vertex's tensors
        edit.feed_all(region.nodes, set(region.acts) - edit.held, "s8")
        for y in region.outputs:
            edit.round_output(y, "s8")
        for i, slot, role in region.quant:
            x = base.nodes[i].input[slot]
            tag = "w8" if role == "weight" else ("u8" if x in base.inits else "q8")
            edit.feed(i, slot, x, tag)
    elif dtype is DType.INT8:
        edit.feed_all(region.nodes, region.acts, "q8")
        for y in region.outputs:
            edit.round_output(y, "q8")
    else:
        tag = "fp16" if dtype is DType.FP16 else "bf16"
        edit.feed_all(region.nodes, {*region.acts, *region.params}, tag)
        for y in region.outputs:
            edit.round_output(y, tag)
