"""Compile a program's partitions into ONNX models, one per partition.

Every partition becomes one ONNX model whose inputs and outputs are exactly the partition's
boundary tensors (``Partition.inputs`` / ``outputs``, named as the plan names them), with the
initializers it uses, the source's opset and shape information, checked with
``onnx.checker``. Both kinds of source take one path:

- **ONNX sources**: the partition's nodes are extracted from the source model
  (``onnx.utils.Extractor``: every node needed to make the outputs from the inputs, with
  the initializers and constants they read).
- **torch.export sources** (``.pt2`` files and zoo models): the program's graph is cut
  with ``torch.fx`` into one ``GraphModule`` per partition (the fx nodes of its ops, the
  parameters they read; nodes the importer does not count as ops, such as ``getitem`` and
  assertions, follow their inputs), and each is exported to ONNX by ``torch.onnx.export``
  (the dynamo exporter, opset 18). Torch never runs a partition.

int8 partitions are the fp32 partition quantized by ``onnxruntime.quantization``'s dynamic
quantization (int8 weights, activations quantized per call) of its MatMul / Gemm / Conv
nodes only (``INT8_ONNX_OP_TYPES``); its float inputs and outputs
stay fp32, and the plan's conversion tasks at its boundary run beside it. Where this
machine's onnxruntime integer GEMM saturates (``int8_weights_reduced``: x86 CPUs without
VNNI, whose uint8 x int8 kernel sums pairs of products into int16), the weights are
quantized to 7 bits (onnxruntime's ``reduce_range``), the remedy onnxruntime documents:
the products then cannot overflow and the kernel is exact.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Mapping, Sequence
from typing import Any

from placewise.errors import UnsupportedError
from placewise.graph.ir import Graph
from placewise.graph.onnx_control import subgraph_refs
from placewise.graph.onnx_data import (
    EXTERNAL_DATA_BYTES,
    WeightsFile,
    check_model,
    has_external_data,
    save_model,
)
from placewise.io import quiet
from placewise.runtime.program import Partition
from placewise.runtime.quantize import int8_weights_reduced, quantize_dynamic_model
from placewise.units import DType

__all__ = ["ONNX_OPSET", "compile_partition", "compile_partitions",
           "int8_weights_reduced", "quantize_dynamic_model", "save_partitions",
           "write_partitions"]

#: the opset torch sources are exported at (ONNX sources keep their own)
ONNX_OPSET = 18


def _quiet() -> Any:
    """Silence the exporters' progress lines and warnings (the library never prints)."""
    return quiet("torch.onnx", "torch.export", "onnxscript")


def compile_partitions(source: Any, partitions: Sequence[Partition], graph: Graph, *,
                       cache: dict[tuple[Any, ...], Any] | None = None) -> dict[str, Any]:
    """ONNX ``ModelProto`` of every partition (by partition name) of ``source`` (a
    ``runtime.opexec.ModelSource``) whose graph (concrete shapes) is ``graph``. int8
    partitions come quantized. ``cache`` (kept by the caller across calls on the same
    source) reuses the model of a partition with the same ops, precision and boundary."""
    from placewise.runtime.opexec import SourceFormat  # opexec loads torch (1-2 s)

    out: dict[str, Any] = {}
    memo = cache if cache is not None else {}
    todo = []
    for p in partitions:
        key = (tuple(o.name for o in p.ops), p.dtype, p.inputs, p.outputs)
        if key in memo:
            out[p.name] = memo[key]
        else:
            todo.append((key, p))
    if not todo:
        return out
    if source.format is SourceFormat.ONNX:
        for key, p in todo:
            out[p.name] = memo[key] = _finish(_onnx_partition(source.onnx_model, p), p)
        return out
    gm = _unlifted(source.exported_program)
    assign = _fx_assignment(gm, partitions)  # over all: helper nodes follow their ops
    for key, p in todo:
        out[p.name] = memo[key] = _finish(_torch_partition(graph, gm, assign, p), p)
    return out


def compile_partition(source: Any, p: Partition, graph: Graph) -> Any:
    """The ONNX model of one partition of ``source``."""

    return compile_partitions(source, [p], graph)[p.name]


def _finish(model: Any, p: Partition) -> Any:
    import onnx

    _check_boundary(model, p)
    try:
        check_model(model)
    except onnx.checker.ValidationError as exc:
        raise UnsupportedError(f"partition {p.name!r} does not pass onnx.checker: "
                               f"{checker_text(exc)}") from None
    if p.dtype is DType.INT8:
        model = quantize_dynamic_model(model, p.name)
    elif p.dtype is not DType.FP32:
        raise UnsupportedError(f"partition {p.name!r} computes in {p.dtype.value}: "
                               f"partitions compile to fp32 or int8")
    return model


def checker_text(exc: BaseException, limit: int = 400) -> str:
    r"""An ``onnx.checker`` message on one line, whole: the checker breaks its sentences
    across lines (a node's text inside), so the first line alone stops mid-sentence. The
    node's fields are joined with spaces; past ``limit`` characters it ends with "...".

    >>> checker_text(ValueError("input 'a' of node: \nname: If_0 OpType: If\n is not output"))
    "input 'a' of node: name: If_0 OpType: If is not output"
    """
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check_boundary(model: Any, p: Partition) -> None:
    ins = [i.name for i in model.graph.input]
    inits = {i.name for i in model.graph.initializer}
    ins = [n for n in ins if n not in inits]
    outs = [o.name for o in model.graph.output]
    if sorted(ins) != sorted(p.inputs) or list(outs) != list(p.outputs):
        raise UnsupportedError(
            f"partition {p.name!r} compiled with boundary inputs {ins} and outputs {outs}; "
            f"the plan expects inputs {list(p.inputs)} and outputs {list(p.outputs)}")


# ---- ONNX sources -----------------------------------------------------------------------------


@functools.cache
def _extractor_class() -> type:
    """``onnx.utils.Extractor`` that follows what subgraphs (If/Loop/Scan bodies) read from
    outer scopes: the nodes that make those values are kept (or the values become
    partition inputs), and the initializers they read come along."""
    from onnx.utils import Extractor

    class SubgraphExtractor(Extractor):
        def __init__(self, model: Any) -> None:
            super().__init__(model)
            self.refs = {i: subgraph_refs(n) for i, n in enumerate(self.graph.node)
                         if any(a.HasField("g") or len(a.graphs) for a in n.attribute)}

        def _reads(self, index: int) -> list[str]:
            node = self.graph.node[index]
            return [x for x in (*node.input, *self.refs.get(index, ())) if x]

        def _dfs_search_reachable_nodes(self, node_output_name: str,
                                        graph_input_names: set[str],
                                        reachable: set[int]) -> None:
            stack = [node_output_name]
            while stack:
                name = stack.pop()
                if name in graph_input_names or name not in self.outmap:
                    continue
                index = self.outmap[name]
                if index not in reachable:
                    reachable.add(index)
                    stack.extend(self._reads(index))

        def _collect_reachable_tensors(self, nodes: list[Any]) -> tuple[list[Any], list[Any]]:
            init, infos = super()._collect_reachable_tensors(nodes)
            have = {t.name for t in init}
            for node in nodes:
                for name in subgraph_refs(node):
                    if name in self.initializers and name not in have:
                        init.append(self.initializers[name])
                        have.add(name)
            return init, infos

    return SubgraphExtractor


def _onnx_partition(model: Any, p: Partition) -> Any:
    import onnx

    try:
        sub = _extractor_class()(model).extract_model(list(p.inputs), list(p.outputs))
    except Exception as exc:
        raise UnsupportedError(f"partition {p.name!r} cannot be cut from the ONNX model: "
                               f"{type(exc).__name__}: {exc}") from None
    sub.graph.name = p.name
    del sub.opset_import[:]
    sub.opset_import.extend(model.opset_import)
    sub.ir_version = model.ir_version
    with contextlib.suppress(Exception):
        sub = onnx.shape_inference.infer_shapes(sub)
    return sub


# ---- torch.export sources --------------------------------------------------------------------


def _unlifted(ep: Any) -> Any:
    """The program as a ``GraphModule`` whose parameters are attributes."""
    try:
        return ep.module(check_guards=False)
    except TypeError:  # an older torch without the keyword
        return ep.module()


def _fx_assignment(gm: Any, partitions: Sequence[Partition]) -> dict[str, int]:
    """fx node name -> partition index for every call node: the partition of its op, or
    (nodes that are not ops: getitem, assertions, scalar arithmetic) the latest partition
    of its inputs, else the earliest of its users; nodes with neither are dropped."""
    owner: dict[str, int] = {}
    for p in partitions:
        for op in p.ops:
            owner[op.provenance.source or op.name] = p.index
    calls = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method",
                                                    "call_module")]
    assign: dict[str, int] = {}
    for n in calls:
        if n.name in owner:
            assign[n.name] = owner[n.name]
            continue
        ins = [assign[a.name] for a in n.all_input_nodes if a.name in assign]
        if ins:
            assign[n.name] = max(ins)
    for n in reversed(calls):
        if n.name in assign:
            continue
        users = [assign[u.name] for u in n.users if u.name in assign]
        if users:
            assign[n.name] = min(users)
    return assign


def _torch_partition(g: Graph, gm: Any, assign: dict[str, int], p: Partition) -> Any:
    import torch
    from torch import fx

    graph = fx.Graph()
    env: dict[str, Any] = {}
    root = torch.nn.Module()
    wanted = set(p.inputs)
    # the unlifted module names its placeholders after the forward's arguments: the
    # graph's inputs are the program's user inputs in the same order
    user = [n for n in gm.graph.nodes if n.op == "placeholder"]
    g_inputs = list(g.inputs)
    alias = {n.name: g_inputs[i] for i, n in enumerate(user) if i < len(g_inputs)}

    def value(n: Any) -> Any:
        if n.name in alias:
            return value_of(alias[n.name], n)
        if n.name in env:
            return env[n.name]
        if n.op == "get_attr":
            _copy_attr(gm, root, str(n.target))
            env[n.name] = graph.get_attr(str(n.target))
            return env[n.name]
        if n.name in wanted or n.op == "placeholder":
            if n.name not in wanted:
                raise UnsupportedError(f"partition {p.name!r} reads graph input {n.name!r} "
                                       f"that the plan does not give it")
            env[n.name] = graph.placeholder(n.name)
            env[n.name].meta = dict(n.meta)
            return env[n.name]
        # a value the importer does not count as a tensor (a size, a scalar): recompute it
        return copy(n)

    def value_of(name: str, n: Any) -> Any:
        if name not in wanted:
            raise UnsupportedError(f"partition {p.name!r} reads graph input {name!r} that "
                                   f"the plan does not give it")
        env[name].meta = dict(n.meta)
        return env[name]

    def copy(n: Any) -> Any:
        new = graph.node_copy(n, value)
        new.meta = dict(n.meta)
        env[n.name] = new
        return new

    for name in p.inputs:  # placeholders in the plan's order
        env[name] = graph.placeholder(name)
    for n in gm.graph.nodes:
        if assign.get(n.name) == p.index:
            copy(n)
    missing = [o for o in p.outputs if o not in env]
    if missing:
        raise UnsupportedError(f"partition {p.name!r}: the program has no node for "
                               f"{missing[0]!r}")
    outs = [env[o] for o in p.outputs]
    graph.output(outs[0] if len(outs) == 1 else tuple(outs))
    graph.eliminate_dead_code()
    sub = fx.GraphModule(root, graph, class_name=p.name.replace(".", "_"))
    args = _example_args(g, p)
    try:
        with torch.no_grad(), _quiet():
            # no output_names: the exporter's renaming can give a boundary name to a
            # second value (a decomposition's own node of that name); _name_outputs does
            # it on the SSA graph instead
            prog = torch.onnx.export(sub, args, dynamo=True, opset_version=ONNX_OPSET,
                                     external_data=False, verbose=False, optimize=True,
                                     input_names=list(p.inputs))
    except Exception as exc:
        raise UnsupportedError(f"partition {p.name!r} could not be exported to ONNX: "
                               f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
                               ) from None
    if prog is None:  # pragma: no cover - only the legacy exporter returns None
        raise UnsupportedError("torch.onnx.export returned no program")
    model = prog.model_proto
    model.graph.name = p.name
    _name_outputs(model, list(p.outputs))
    return model


def _name_outputs(model: Any, want: Sequence[str]) -> None:
    """Give the graph's outputs the names ``want`` (in order), renaming any other value that
    already has one of those names first, so the graph stays in SSA form."""
    g = model.graph
    if len(g.output) != len(want):
        return  # _check_boundary reports it
    for n in [n for n in g.node if n.op_type == "Identity" and list(n.output) == list(n.input)]:
        g.node.remove(n)  # the exporter can copy a graph input onto its own name: a no-op
    taken = {o for n in g.node for o in n.output} | {i.name for i in g.input} | \
        {i.name for i in g.initializer}

    def rename(old: str, new: str) -> None:
        for n in g.node:
            for k, x in enumerate(n.input):
                if x == old:
                    n.input[k] = new
            for k, x in enumerate(n.output):
                if x == old:
                    n.output[k] = new
        for vi in (*g.output, *g.value_info):
            if vi.name == old:
                vi.name = new
        for t in g.initializer:
            if t.name == old:
                t.name = new
        taken.discard(old)
        taken.add(new)

    for i, w in enumerate(want):
        have = g.output[i].name
        if any(t.name == have for t in g.initializer):
            # the exporter folded the value into a constant: a node must produce it
            if w in taken:  # the constant itself, or another value, holds the name
                k = 0
                while f"{w}__{k}" in taken:
                    k += 1
                rename(w, f"{w}__{k}")
                have = g.output[i].name
            g.node.add(op_type="Identity", input=[have], output=[w], name=f"pass_{w}")
            g.output[i].name = w
            taken.add(w)
            continue
        if have == w:
            continue
        if w in taken:  # another value holds the name: move it aside
            k = 0
            while f"{w}__{k}" in taken:
                k += 1
            rename(w, f"{w}__{k}")
            have = g.output[i].name
        if any(i2.name == have for i2 in g.input):  # an input passed straight through
            g.node.add(op_type="Identity", input=[have], output=[w], name=f"pass_{w}")
            g.output[i].name = w
            taken.add(w)
        else:
            rename(have, w)


def _copy_attr(src: Any, dst: Any, target: str) -> None:
    import torch

    *path, last = target.split(".")
    s, d = src, dst
    for part in path:
        s = getattr(s, part)
        if not hasattr(d, part):
            d.add_module(part, torch.nn.Module())
        d = getattr(d, part)
    val = getattr(s, last)
    if isinstance(val, torch.nn.Parameter):
        d.register_parameter(last, val)
    elif isinstance(val, torch.Tensor):
        d.register_buffer(last, val)
    else:
        setattr(d, last, val)


def _example_args(g: Graph, p: Partition) -> tuple[Any, ...]:
    """Example inputs of the partition's boundary, at their real shapes and dtypes (values
    do not matter to the exporter: the shapes are static)."""
    import torch  # heavy (1-2 s): torch sources only

    from placewise.runtime.opexec import torch_dtype

    args = []
    for name in p.inputs:
        t = g.tensor(name)
        shape = tuple(int(d) for d in t.shape)
        args.append(torch.zeros(shape, dtype=torch_dtype(t.dtype)))
    return tuple(args)


def write_partitions(source: Any, partitions: Sequence[Partition], graph: Graph, folder: str,
                     *, external_data_bytes: int = EXTERNAL_DATA_BYTES) -> dict[str, str]:
    """Compile every partition and write it as ``{folder}/{name}.onnx``, the weights of each
    device's partitions in one file beside them when they are large (``save_partitions``
    with the partitions' devices). Returns partition name -> file path."""
    return save_partitions(compile_partitions(source, partitions, graph), folder,
                           external_data_bytes=external_data_bytes,
                           devices={p.name: p.device for p in partitions})


def save_partitions(models: Mapping[str, Any], folder: str, *,
                    external_data_bytes: int = EXTERNAL_DATA_BYTES,
                    devices: Mapping[str, str] | None = None) -> dict[str, str]:
    """Write compiled partitions (name -> ModelProto) as ``{folder}/{name}.onnx``; name ->
    path. The models are not changed (``graph.onnx_data.save_model``). A partition that
    holds external data or is larger than ``external_data_bytes`` has its weights beside it:
    in ``{name}.onnx.data``, or, given ``devices`` (partition -> device), every partition of
    a device with such a partition in ``weights.{device}.bin``, each distinct tensor once."""
    def large(model: Any) -> bool:
        return has_external_data(model) or model.ByteSize() > external_data_bytes

    shared: dict[str, WeightsFile] = {}
    if devices is not None:
        for dev in sorted({devices[n] for n in models if large(models[n])}):
            shared[dev] = WeightsFile(os.path.join(folder, f"weights.{dev}.bin"))
    paths: dict[str, str] = {}
    try:
        for name, model in models.items():
            path = os.path.join(folder, f"{name}.onnx")
            save_model(model, path, external_data_bytes=external_data_bytes,
                       weights=shared.get(devices[name]) if devices is not None else None)
            paths[name] = path
    finally:
        for w in shared.values():
            w.close()
    return paths
