"""Concrete shapes for a bound ONNX model, and its shape arithmetic folded into constants.

``prepare_onnx`` is the one step between reading an ``.onnx`` file and using it: the graph
importer (``load_onnx``) and the runtime's model source both take its model, so the ops of
the graph and the nodes partitions are cut from are the same. It

1. binds the requested input dims (``--shape``, ``--batch``);
2. resolves every value's shape. ONNX shape inference comes first; exporters leave dims it
   cannot follow (``Expand`` to a shape computed at run time, ``unk__0``). When it leaves
   any although every graph input is concrete, onnxruntime's symbolic shape inference
   runs, and if that fails or leaves some too, one real onnxruntime run on inputs of the
   bound shapes (zeros) that fetches every intermediate value reads them. Which one gave
   the shapes is recorded (``SHAPES_ONNX``, ``SHAPES_SYMBOLIC``, ``SHAPES_RUN``);
3. folds what is computable before any input arrives: a ``Shape``/``Size`` of a value of
   known shape, and every node whose inputs are all constants (``Gather``, ``Unsqueeze``,
   ``Concat``, ``Slice``, ``ConstantOfShape``, ``Range``, ``Equal``, ``Where``, ``Cast``,
   arithmetic...), evaluated with ``onnx.reference``. A folded node becomes an initializer
   of its output's name, so its consumers keep their inputs, and initializers and
   ``Constant`` nodes only folded nodes read are dropped. Only small values fold (at most
   ``FOLD_MAX_BYTES`` out, ``FOLD_MAX_INPUT_BYTES`` in): a large computation on weights
   stays an op rather than a giant initializer. Random and control-flow nodes never fold.

>>> import numpy as np
>>> from onnx import TensorProto, helper, numpy_helper
>>> nodes = [helper.make_node("Shape", ["x"], ["s"]),
...          helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
...          helper.make_node("Unsqueeze", ["n", "zero1"], ["n1"]),
...          helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
...          helper.make_node("Reshape", ["x", "target"], ["y"])]
>>> inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
...          numpy_helper.from_array(np.array([0], np.int64), "zero1"),
...          numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
>>> g = helper.make_graph(nodes, "g",
...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 2])],
...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
>>> m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
>>> prepared, info = prepare_onnx(m, "m.onnx", batch=3)
>>> [n.op_type for n in prepared.graph.node], info.shape_source, info.folded_nodes
(['Reshape'], 'onnx inference', 4)
>>> numpy_helper.to_array(next(t for t in prepared.graph.initializer if t.name == "target"))
array([ 3, -1])
"""

from __future__ import annotations

import contextlib
import logging
import math
import tempfile
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from placewise.errors import GraphError, InputError
from placewise.graph.count_table import window_count
from placewise.graph.onnx_control import (
    MAX_INLINE_ROUNDS,
    bind_values,
    constant_tensor,
    drop_dead_nodes,
    drop_unread,
    hoist_subgraph_weights,
    inline_known_ifs,
    read_names,
)
from placewise.graph.onnx_data import ort_session
from placewise.io import quiet, shorten

if TYPE_CHECKING:
    import numpy as np
    from onnx import ModelProto, NodeProto, TensorProto

__all__ = [
    "FOLD_MAX_BYTES",
    "FOLD_MAX_INPUT_BYTES",
    "RUN_MAX_INPUT_BYTES",
    "SHAPES_ONNX",
    "SHAPES_RUN",
    "SHAPES_SYMBOLIC",
    "PrepareInfo",
    "fold_constants",
    "prepare_onnx",
    "resolve_shapes",
    "symbolic_values",
]

SHAPES_ONNX = "onnx inference"
SHAPES_SYMBOLIC = "onnxruntime symbolic inference"
SHAPES_RUN = "onnxruntime run"

#: the most bytes a folded value may hold (a shape, an index table, a small mask)
FOLD_MAX_BYTES = 1 << 16
#: the most bytes a folded node may read (keeps weight-sized work an op)
FOLD_MAX_INPUT_BYTES = 4 << 20
#: the most bytes of graph inputs the onnxruntime run that reads shapes may be fed (it
#: keeps every intermediate value alive, so its memory grows with them)
RUN_MAX_INPUT_BYTES = 256 << 20

# nodes whose value is not a function of their inputs, or that hold subgraphs
_NEVER_FOLD = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform",
                         "RandomUniformLike", "Multinomial", "Bernoulli", "Dropout",
                         "If", "Loop", "Scan", "Constant"})


@dataclass(frozen=True, slots=True)
class PrepareInfo:
    """What ``prepare_onnx`` did: the bound symbols, where the shapes came from, the
    model's node count before folding (``Constant`` nodes included), how many folded and
    which (node names, ``Type#index`` for unnamed ones: the provenance of the constants,
    which keep their output names).
    ``problem`` says why an earlier way of resolving shapes fell short ("" when none)."""

    env: Mapping[str, int]
    shape_source: str
    source_nodes: int
    folded_nodes: int
    problem: str = ""
    folded: tuple[str, ...] = ()
    values: tuple[str, ...] = ()  # inputs given a value (now initializers)
    inlined_ifs: int = 0  # If nodes replaced by the branch their constant condition takes
    hoisted_weights: int = 0  # subgraph initializers/Constants moved to the top graph


def _quiet() -> Any:
    """onnxruntime's symbolic inference logs warnings and prints; the library never prints."""
    return quiet("onnxruntime.tools.symbolic_shape_infer", level=logging.CRITICAL)


def prepare_onnx(model: ModelProto, file: str, *,
                 shapes: Mapping[str, Sequence[int]] | None = None,
                 batch: int | None = None,
                 values: Mapping[str, Sequence[float]] | None = None
                 ) -> tuple[ModelProto, PrepareInfo]:
    """A copy of ``model`` with ``shapes``/``batch`` bound, the inputs in ``values`` made
    constants, every value's shape resolved where the inputs are concrete, shape
    arithmetic folded into constants, ``If`` nodes whose condition folded replaced by the
    branch taken and the weights of the remaining subgraphs moved to the top graph
    (``graph.onnx_control``).

    Raises ``InputError`` for a binding that conflicts with the model. Shapes that no way
    resolves stay symbolic, with the reason in ``PrepareInfo.problem``.
    """
    import onnx

    work = onnx.ModelProto()
    work.CopyFrom(model)
    env = _bind_inputs(work, file, shapes, batch)
    bound = bind_values(work, file, values)
    before = _node_count(work.graph)
    resolved, source, problem = resolve_shapes(work)
    folded, names = fold_constants(resolved)
    inlined = 0
    for _ in range(MAX_INLINE_ROUNDS):  # nested If nodes fold once their parent is inlined
        n = inline_known_ifs(folded)
        if not n:
            break
        inlined += n
        resolved, source, problem = resolve_shapes(folded)
        folded, more = fold_constants(resolved)
        names.extend(more)
    hoisted = hoist_subgraph_weights(folded)
    if names or inlined:  # values only folded nodes or dropped branches read
        drop_dead_nodes(folded)
        drop_unread(folded, read_names(model))
    return folded, PrepareInfo(dict(env), source, before, len(names), problem, tuple(names),
                               tuple(bound), inlined, hoisted)


def _node_count(graph: Any) -> int:
    """Nodes of ``graph`` and of its subgraphs."""
    n = 0
    stack = [graph]
    while stack:
        g = stack.pop()
        n += len(g.node)
        for node in g.node:
            for attr in node.attribute:
                if attr.HasField("g"):
                    stack.append(attr.g)
                stack.extend(attr.graphs)
    return n


# ---- shapes ---------------------------------------------------------------------------------


def _concrete_dims(tp: Any) -> tuple[int, ...] | None:
    """The dims of a tensor TypeProto when all are known numbers, else None."""
    if tp.WhichOneof("value") != "tensor_type":
        return None
    tt = tp.tensor_type
    if not tt.elem_type or not tt.HasField("shape"):
        return None
    dims: list[int] = []
    for d in tt.shape.dim:  # one pass: asked for every value, several times per import
        if not d.HasField("dim_value"):
            return None
        dims.append(int(d.dim_value))
    return tuple(dims)


def _inputs_concrete(model: ModelProto) -> bool:
    inits = {t.name for t in model.graph.initializer}
    return all(_concrete_dims(vi.type) is not None for vi in model.graph.input
               if vi.name not in inits and vi.type.WhichOneof("value") == "tensor_type")


def symbolic_values(model: ModelProto) -> list[str]:
    """Node outputs (top level, ``Constant`` nodes aside) whose shape or type is not known
    as concrete numbers, in node order."""
    g = model.graph
    known: dict[str, Any] = {}
    for vi in [*g.value_info, *g.output]:
        known.setdefault(vi.name, vi.type)
    inits = {t.name for t in g.initializer}
    out = []
    for node in g.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            continue
        for o in node.output:
            if not o or o in inits:
                continue
            tp = known.get(o)
            if tp is not None and tp.WhichOneof("value") in ("sequence_type",
                                                             "optional_type"):
                continue  # not a tensor: a sequence's length is never a bound dim
            if tp is None or _concrete_dims(tp) is None:
                out.append(o)
    return out


def _untyped_values(model: ModelProto) -> list[str]:
    """Node outputs (top level) that inference gave no element type (a contrib op's)."""
    typed = {vi.name for vi in [*model.graph.value_info, *model.graph.output]
             if vi.type.WhichOneof("value") != "tensor_type" or vi.type.tensor_type.elem_type}
    typed.update(t.name for t in model.graph.initializer)
    return [o for n in model.graph.node for o in n.output if o and o not in typed]


def resolve_shapes(model: ModelProto) -> tuple[ModelProto, str, str]:
    """``model`` with shapes inferred, the way they were found, and why earlier ways fell
    short: ONNX inference; then, when every graph input is concrete but values stay
    symbolic, onnxruntime's symbolic inference; then one onnxruntime run."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception as e:  # non-strict inference rarely raises; keep the annotations
        inferred = model
        problems = [f"ONNX shape inference failed: {shorten(str(e), 160)}"]
    else:
        problems = []
    left = symbolic_values(inferred)
    wrong = _ceil_pools_misread(inferred)
    if wrong and _inputs_concrete(inferred):
        # symbolic inference reads these pools as ONNX does: only a run gives their size
        problems.append(f"ONNX shape inference sizes ceil_mode pooling {wrong[0]!r} with "
                        f"a last window that starts in the padding")
        return _run_or_keep(inferred, problems)
    if left and not _inputs_concrete(inferred) and _untyped_values(inferred):
        # contrib ops ONNX does not know: onnxruntime's inference types them, symbolically
        with contextlib.suppress(Exception):
            sym = _ort_symbolic(model)
            if not _untyped_values(sym):
                return sym, SHAPES_SYMBOLIC, "; ".join(problems)
    if not left or not _inputs_concrete(inferred):
        return inferred, SHAPES_ONNX, "; ".join(problems)
    problems.append(f"ONNX shape inference left {len(left)} values symbolic ({left[0]!r}...)")
    try:
        sym = _ort_symbolic(model)
    except Exception as e:
        problems.append(f"onnxruntime symbolic inference failed: {type(e).__name__}: "
                        f"{shorten(str(e), 160)}")
    else:
        left = symbolic_values(sym)
        if not left:
            return sym, SHAPES_SYMBOLIC, "; ".join(problems)
        problems.append(f"onnxruntime symbolic inference left {len(left)} values symbolic "
                        f"({left[0]!r}...)")
    return _run_or_keep(inferred, problems)


def _run_or_keep(inferred: ModelProto, problems: list[str]) -> tuple[ModelProto, str, str]:
    """The shapes of one onnxruntime run, or (when it fails) ``inferred`` as it is."""
    try:
        return _ort_run(inferred), SHAPES_RUN, "; ".join(problems)
    except Exception as e:  # a model onnxruntime cannot run: its dims stay symbolic
        problems.append(f"an onnxruntime run failed ({type(e).__name__}: {shorten(str(e), 160)})")
        return inferred, SHAPES_ONNX, "; ".join(problems)


def _ceil_pools_misread(model: ModelProto) -> list[str]:
    """Outputs of ``ceil_mode`` MaxPool/AveragePool nodes whose inferred spatial size is
    not the one onnxruntime computes (``count_table.window_count``: ONNX inference keeps a last
    window that starts in the end padding)."""
    from onnx import helper

    dims: dict[str, tuple[int, ...]] = {}
    for vi in [*model.graph.input, *model.graph.value_info, *model.graph.output]:
        d = _concrete_dims(vi.type)
        if d is not None:
            dims.setdefault(vi.name, d)
    wrong = []
    for node in model.graph.node:
        if node.op_type not in ("MaxPool", "AveragePool") or \
                node.domain not in ("", "ai.onnx") or not node.input or not node.output:
            continue
        a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
        x, y = dims.get(node.input[0]), dims.get(node.output[0])
        if not a.get("ceil_mode") or x is None or y is None or "kernel_shape" not in a:
            continue
        k = list(a["kernel_shape"])
        n = len(k)
        s = list(a.get("strides", [1] * n))
        dil = list(a.get("dilations", [1] * n))
        p = list(a.get("pads", [0] * 2 * n))
        if len(x) != n + 2 or len(y) != n + 2 or a.get("auto_pad", b"NOTSET") not in \
                (b"NOTSET", "NOTSET"):
            continue
        want = [window_count(x[2 + i], k[i], s[i], p[i], p[n + i], dil[i], ceil_mode=True)
                for i in range(n)]
        if list(y[2:]) != want:
            wrong.append(node.output[0])
    return wrong


def _ort_symbolic(model: ModelProto) -> ModelProto:
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    # placewise.onnxrt imports onnxruntime (about 0.5 s): only where a session is made
    from placewise.onnxrt import quiet_logs

    quiet_logs()

    # when it cannot finish, the tool saves its partial model into the working directory:
    # run it in a folder of its own
    with _quiet(), tempfile.TemporaryDirectory(prefix="placewise-ssi-") as tmp, \
            contextlib.chdir(tmp):
        out = SymbolicShapeInference.infer_shapes(model, auto_merge=False,
                                                  guess_output_rank=False, verbose=0)
    if out is None:
        raise RuntimeError("it returned no model")
    return out


def _zeros_feeds(model: ModelProto) -> dict[str, np.ndarray]:
    import numpy as np
    from onnx import helper

    inits = {t.name for t in model.graph.initializer}
    shapes = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        dims = _concrete_dims(vi.type)
        if dims is None:  # pragma: no cover - resolve_shapes checks first
            raise GraphError("input shape is not concrete", place=f"input {vi.name!r}")
        dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        shapes[vi.name] = (dims, dtype)
    total = sum(math.prod(d) * t.itemsize for d, t in shapes.values())
    if total > RUN_MAX_INPUT_BYTES:
        raise GraphError(f"the inputs hold {total} bytes, more than the run that reads shapes "
                         f"takes ({RUN_MAX_INPUT_BYTES})")
    return {name: np.zeros(d, dtype=t) for name, (d, t) in shapes.items()}


def _ort_run(model: ModelProto) -> ModelProto:
    """``model`` with the value_info of every node output read from one onnxruntime run
    on zero inputs of the bound shapes (ORT's graph optimizations off, so every value
    exists as the file names it)."""
    import onnx
    from onnx import helper

    feeds = _zeros_feeds(model)
    sess = plain_session(every_value_an_output(model))
    names = [o.name for o in sess.get_outputs()]
    values = sess.run(names, feeds)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    outputs = {o.name for o in out.graph.output}
    by_name = dict(zip(names, values, strict=True))
    kept = [vi for vi in out.graph.value_info if vi.name not in by_name]
    del out.graph.value_info[:]
    out.graph.value_info.extend(kept)
    for name, value in by_name.items():
        if name in outputs or not hasattr(value, "shape"):
            continue
        elem = helper.np_dtype_to_tensor_dtype(value.dtype)
        out.graph.value_info.append(helper.make_tensor_value_info(name, elem, value.shape))
    for vi in out.graph.output:
        value = by_name.get(vi.name)
        if value is not None and hasattr(value, "shape") and \
                _concrete_dims(vi.type) != tuple(value.shape):  # missing, or misread
            elem = helper.np_dtype_to_tensor_dtype(value.dtype)
            vi.CopyFrom(helper.make_tensor_value_info(vi.name, elem, value.shape))
    return out


# ---- folding --------------------------------------------------------------------------------


class _Types:
    """Value name -> (element type, dims) where both are known: a constant's from its
    tensor, else the first concrete annotation (graph input, value_info, output). Read on
    first ask: most nodes of a large model read an activation and never need one."""

    def __init__(self, graph: Any, protos: Mapping[str, TensorProto]) -> None:
        self._graph = graph
        self._protos = protos
        self._annotations: dict[str, list[Any]] | None = None
        self._known: dict[str, tuple[int, tuple[int, ...]] | None] = {}

    def get(self, name: str) -> tuple[int, tuple[int, ...]] | None:
        if name in self._known:
            return self._known[name]
        got: tuple[int, tuple[int, ...]] | None = None
        t = self._protos.get(name)
        if t is not None:
            got = (t.data_type, tuple(int(d) for d in t.dims))
        else:
            if self._annotations is None:
                g = self._graph
                self._annotations = {}
                for vi in [*g.input, *g.value_info, *g.output]:
                    self._annotations.setdefault(vi.name, []).append(vi.type)
            for tp in self._annotations.get(name, ()):
                dims = _concrete_dims(tp)
                if dims is not None:
                    got = (tp.tensor_type.elem_type, dims)
                    break
        self._known[name] = got
        return got

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __getitem__(self, name: str) -> tuple[int, tuple[int, ...]]:
        got = self.get(name)
        if got is None:
            raise KeyError(name)
        return got


class _Values:
    """Constant values of a graph, read from their protos only when a fold needs them."""

    def __init__(self, model: ModelProto) -> None:
        g = model.graph
        self.protos: dict[str, TensorProto] = {t.name: t for t in g.initializer}
        for node in g.node:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and \
                    len(node.output) == 1:
                t = constant_tensor(node)
                if t is not None:
                    self.protos[node.output[0]] = t
        self.arrays: dict[str, np.ndarray] = {}
        self.types = _Types(g, self.protos)

    def has(self, name: str) -> bool:
        return name in self.arrays or name in self.protos

    def get(self, name: str) -> np.ndarray:
        if name not in self.arrays:
            from onnx import numpy_helper

            self.arrays[name] = numpy_helper.to_array(self.protos[name])
        return self.arrays[name]

    def nbytes(self, name: str) -> int | None:
        """Bytes of a value of known type and shape (None when unknown or unsized)."""
        from onnx import helper

        info = self.types.get(name)
        if info is None:
            return None
        try:
            itemsize = helper.tensor_dtype_to_np_dtype(info[0]).itemsize
        except Exception:
            return None
        return itemsize * math.prod(info[1])


def every_value_an_output(model: ModelProto) -> ModelProto:
    """A copy of ``model`` whose outputs also hold every value a node makes (to read
    intermediate shapes and values in one run)."""
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    have = {o.name for o in out.graph.output}
    for node in out.graph.node:
        for o in node.output:
            if o and o not in have:
                out.graph.output.append(onnx.ValueInfoProto(name=o))
                have.add(o)
    return out


def plain_session(model: ModelProto) -> Any:
    """A CPU onnxruntime session of ``model`` exactly as written: no graph optimizations,
    one thread, quiet (external weights read where they are: ``graph.onnx_data``)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 4  # fatal only: a failing run is reported, never logged
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return ort_session(model, opts)


def _foldable(node: NodeProto, values: _Values, outputs: set[str], pending: set[str]
              ) -> bool:
    """Whether ``node`` computes small values only from constants, values about to be
    folded (``pending``), or (``Shape``/``Size``) a known shape."""
    # the cheapest tests first: most nodes of a large model read an activation
    if node.domain not in ("", "ai.onnx") or node.op_type in _NEVER_FOLD:
        return False
    outs = [o for o in node.output if o]
    if not outs or any(o in outputs for o in outs):
        return False
    ins = [i for i in node.input if i]
    shape_of = node.op_type in ("Shape", "Size")
    if shape_of:
        if not (len(ins) == 1 and ins[0] in values.types):
            return False
    elif not all(values.has(i) or i in pending for i in ins):
        return False
    if any(a.HasField("g") or len(a.graphs) for a in node.attribute):
        return False
    for o in outs:
        size = values.nbytes(o)
        if size is None or size > FOLD_MAX_BYTES:
            return False
    if shape_of:
        return True
    read = sum(values.nbytes(i) or 0 for i in ins)
    return read <= FOLD_MAX_INPUT_BYTES


def _shape_value(node: NodeProto, dims: tuple[int, ...]) -> np.ndarray:
    import numpy as np

    if node.op_type == "Size":
        return np.array(math.prod(dims), dtype=np.int64)
    attrs = {a.name: int(a.i) for a in node.attribute}
    start, end = attrs.get("start", 0), attrs.get("end", len(dims))
    return np.array(dims[slice(start, end)], dtype=np.int64)


def _fold_model(nodes: Sequence[NodeProto], values: _Values, model: ModelProto) -> ModelProto:
    """A model of ``nodes`` alone: the constants they read as initializers, their outputs
    as the graph's outputs."""
    from onnx import helper, numpy_helper

    made = {o for n in nodes for o in n.output if o}
    needed = sorted({i for n in nodes for i in n.input if i and i not in made})
    inits = [numpy_helper.from_array(values.get(i), i) for i in needed]
    outs = [helper.make_tensor_value_info(o, values.types[o][0], values.types[o][1])
            for n in nodes for o in n.output if o]
    graph = helper.make_graph(list(nodes), "fold", [], outs, inits)
    return helper.make_model(graph, opset_imports=list(model.opset_import),
                             ir_version=model.ir_version)


def _run_fold(nodes: Sequence[NodeProto], values: _Values, model: ModelProto
              ) -> dict[str, np.ndarray]:
    """The outputs of ``nodes`` (constant inputs only) by onnxruntime."""
    import numpy as np

    sess = plain_session(_fold_model(nodes, values, model))
    names = [o.name for o in sess.get_outputs()]
    with np.errstate(all="ignore"):
        return dict(zip(names, (np.asarray(v) for v in sess.run(names, {})), strict=True))


def _reference_fold(nodes: Sequence[NodeProto], values: _Values, model: ModelProto
                    ) -> dict[str, np.ndarray]:
    """The outputs of ``nodes`` (constant inputs only) by ``onnx.reference``."""
    import numpy as np
    from onnx.reference import ReferenceEvaluator

    sub = _fold_model(nodes, values, model)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outs = ReferenceEvaluator(sub).run(None, {})
    names = [o.name for o in sub.graph.output]
    return dict(zip(names, (np.asarray(v) for v in outs), strict=True))


def _evaluate(nodes: Sequence[NodeProto], values: _Values, model: ModelProto
              ) -> dict[str, np.ndarray]:
    """Values of the outputs of ``nodes`` (in order, each reading constants or earlier
    ones): one onnxruntime session for all; if that fails, node by node (onnxruntime,
    then ``onnx.reference``), skipping a node that fails and what depends on it."""
    try:
        return _run_fold(nodes, values, model)
    except Exception:
        pass
    got: dict[str, np.ndarray] = {}
    for node in nodes:
        if not all(values.has(i) for i in node.input if i):
            continue  # an input failed to fold
        for way in (_run_fold, _reference_fold):
            try:
                res = way([node], values, model)
            except Exception:
                continue
            got.update(res)
            values.arrays.update(res)
            break
    return got


def _fits(name: str, value: np.ndarray, values: _Values) -> bool:
    """Whether a folded value has the shape and element type inference gave it."""
    from onnx import helper

    try:
        elem = helper.np_dtype_to_tensor_dtype(value.dtype)
    except Exception:
        return False
    return (elem, tuple(value.shape)) == values.types[name]


def fold_constants(model: ModelProto) -> tuple[ModelProto, list[str]]:
    """``model`` with every foldable node (see the module docstring) replaced by an
    initializer of its output's name, and the folded nodes' names. Needs the value_info
    of the outputs (resolved shapes); a node whose evaluation fails or disagrees with its
    inferred shape or type is kept."""
    import onnx
    from onnx import numpy_helper

    values = _Values(model)
    outputs = {o.name for o in model.graph.output}
    pending: list[NodeProto] = []
    pending_names: set[str] = set()
    for node in model.graph.node:
        if not _foldable(node, values, outputs, pending_names):
            continue
        if node.op_type in ("Shape", "Size"):
            values.arrays[node.output[0]] = _shape_value(node, values.types[node.input[0]][1])
        else:
            pending.append(node)
            pending_names.update(o for o in node.output if o)
    if pending:
        values.arrays.update(_evaluate(pending, values, model))
    kept: list[NodeProto] = []
    new_inits: list[TensorProto] = []
    folded: list[str] = []
    for i, node in enumerate(model.graph.node):
        names = [o for o in node.output if o]
        if node.op_type in _NEVER_FOLD or not names or not all(
                o in values.arrays and o not in values.protos and
                _fits(o, values.arrays[o], values) for o in names):
            kept.append(node)
            continue
        new_inits.extend(numpy_helper.from_array(values.arrays[o], o) for o in names)
        folded.append(node.name or f"{node.op_type}#{i}")
    if not new_inits:
        return model, []
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    del g.node[:]
    g.node.extend(kept)
    done = {t.name for t in new_inits}
    g.initializer.extend(new_inits)
    infos = [vi for vi in g.value_info if vi.name not in done]
    del g.value_info[:]
    g.value_info.extend(infos)
    _drop_unread(out, model)
    return out, folded


def _drop_unread(out: ModelProto, before: ModelProto) -> None:
    """Drop initializers and ``Constant`` nodes that were read in ``before`` and are not
    read in ``out`` any more (values only folded nodes used)."""
    drop_unread(out, read_names(before))


# ---- binding input dims ----------------------------------------------------------------------


def _bind_inputs(model: ModelProto, path: str, shapes: Mapping[str, Sequence[int]] | None,
                 batch: int | None) -> dict[str, int]:
    """Write the requested input dims into the graph inputs; return symbol -> size.

    A symbol bound on one input is bound everywhere it appears (other inputs, outputs,
    value_info), so that inference and the exporter's annotations agree.
    """
    graph = model.graph
    init_names = {t.name for t in graph.initializer}
    real_inputs = [vi for vi in graph.input if vi.name not in init_names]
    by_name = {vi.name: vi for vi in real_inputs}
    env: dict[str, int] = {}

    def bind_symbol(symbol: str, value: int, place: str) -> None:
        if env.get(symbol, value) != value:
            raise InputError(f"symbol {symbol!r} bound to both {env[symbol]} and {value}",
                             file=path, place=place)
        env[symbol] = value

    for name, dims in (shapes or {}).items():
        if name not in by_name:
            known = ", ".join(repr(n) for n in by_name) or "none"
            raise InputError(f"the model has no input {name!r} (inputs: {known})",
                             file=path, place="--shape")
        place = f"input {name!r}"
        req = tuple(int(d) for d in dims)
        if any(d < 0 for d in req):
            raise InputError(f"negative dimension in {list(req)}", file=path, place=place)
        ttype = by_name[name].type.tensor_type
        if not by_name[name].type.HasField("tensor_type"):
            raise InputError("not a tensor input; cannot bind a shape", file=path, place=place)
        if ttype.HasField("shape"):
            have = ttype.shape.dim
            if len(have) != len(req):
                raise InputError(f"shape {list(req)} has rank {len(req)} but the input has "
                                 f"rank {len(have)} ({_dims_text(have)})", file=path,
                                 place=place)
            for i, (d, want) in enumerate(zip(have, req, strict=True)):
                if d.HasField("dim_value") and d.dim_value != want:
                    raise InputError(f"dimension {i} is {d.dim_value} in the model but "
                                     f"{want} was requested", file=path, place=place)
                if d.HasField("dim_param"):
                    bind_symbol(d.dim_param, want, place)
                d.dim_value = want
        else:
            for want in req:
                ttype.shape.dim.add().dim_value = want
    if batch is not None:
        if batch <= 0:
            raise InputError(f"batch must be a positive integer, got {batch}", file=path,
                             place="--batch")
        bound_any = False
        fixed: list[str] = []
        for vi in real_inputs:
            if vi.name in (shapes or {}) or not vi.type.HasField("tensor_type"):
                continue
            ttype = vi.type.tensor_type
            if not ttype.HasField("shape") or not ttype.shape.dim:
                continue
            d0 = ttype.shape.dim[0]
            if d0.HasField("dim_value"):
                if d0.dim_value != batch:
                    fixed.append(f"{vi.name!r} {_dims_text(ttype.shape.dim)}")
                continue
            if d0.HasField("dim_param"):
                bind_symbol(d0.dim_param, batch, f"input {vi.name!r}")
            d0.dim_value = batch
            bound_any = True
        if not bound_any and fixed:
            raise InputError(f"batch {batch} cannot be applied: the model's inputs have a "
                             f"fixed leading dim ({', '.join(fixed)}); export it with a "
                             f"dynamic batch", file=path, place="--batch")
    if env:
        for vi in [*graph.input, *graph.output, *graph.value_info]:
            if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
                for d in vi.type.tensor_type.shape.dim:
                    if d.HasField("dim_param") and d.dim_param in env:
                        d.dim_value = env[d.dim_param]
    return env


def _dims_text(dims: Iterable[Any]) -> str:
    parts = []
    for d in dims:
        if d.HasField("dim_value"):
            parts.append(str(d.dim_value))
        else:
            parts.append(d.dim_param or "?")
    return "[" + ",".join(parts) + "]"
