"""Control flow in ONNX models: input values, the ``If`` branches they pick, subgraph weights.

``graph.onnx_shapes.prepare_onnx`` calls these on the working copy of a model, so the graph's
ops and the nodes the runtime and export cut partitions from stay the same:

- ``bind_values``: a graph input given a value (``--value NAME=...``) becomes an initializer
  of that value (its dtype, its declared shape), so shape arithmetic and conditions that read
  it fold into constants like any other;
- ``inline_known_ifs``: an ``If`` whose condition is a constant is replaced by the nodes of
  the branch it takes, as ordinary top-level nodes (the placement can cut inside it): its
  initializers and ``Constant`` nodes become the model's initializers, its outputs are passed on by
  ``Identity`` nodes under the ``If``'s output names; initializers only the branch not
  taken read are dropped. Nested ``If`` nodes are inlined in later rounds, once their
  conditions fold;
- ``hoist_subgraph_weights``: what is left of control flow (an ``If`` whose condition stays
  unknown, ``Loop``, ``Scan``) keeps one node; its subgraphs' initializers and ``Constant``
  nodes move to the top graph, so that weights are the model's parameters, counted once
  whichever exporter wrote them inside or outside the subgraph.

>>> import numpy as np
>>> from onnx import TensorProto, helper, numpy_helper
>>> then = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [],
...     [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])])
>>> other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
...     [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])])
>>> nodes = [helper.make_node("Equal", ["sr", "k"], ["c"]),
...          helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
>>> g = helper.make_graph(nodes, "g",
...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
...      helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
...     [numpy_helper.from_array(np.array(16000, np.int64), "k")])
>>> m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
>>> bind_values(m, "m.onnx", {"sr": (8000,)})
['sr']
>>> [vi.name for vi in m.graph.input]
['x']
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from placewise.errors import InputError

if TYPE_CHECKING:
    from onnx import GraphProto, ModelProto, NodeProto, TensorProto

__all__ = [
    "CONTROL_FLOW_OPS",
    "MAX_INLINE_ROUNDS",
    "bind_values",
    "constant_tensor",
    "drop_dead_nodes",
    "drop_unread",
    "hoist_subgraph_weights",
    "inline_known_ifs",
    "parse_value",
    "read_names",
    "subgraph_refs",
]

#: ONNX op types that hold subgraphs placewise costs (default domain)
CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan"})
#: rounds of inlining (each after shapes are resolved and constants folded again): the
#: depth of nested ``If`` nodes placewise inlines
MAX_INLINE_ROUNDS = 16

Value = Sequence[float | int | bool]


def parse_value(text: str, *, place: str = "--value") -> tuple[float | int, ...]:
    """The numbers of ``NAME=...``'s right-hand side: one number or a comma list.

    >>> parse_value("16000"), parse_value("1,0.5,-2")
    ((16000,), (1, 0.5, -2))
    """
    items = [p.strip() for p in text.split(",")]
    out: list[float | int] = []
    for item in items:
        try:
            out.append(int(item))
        except ValueError:
            try:
                v = float(item)
            except ValueError:
                raise InputError(f"expected a number or a comma list of numbers, got "
                                 f"{text!r}", place=place) from None
            if not math.isfinite(v):
                raise InputError(f"values must be finite numbers, got {item!r}",
                                 place=place) from None
            out.append(v)
    return tuple(out)


# ---- values ---------------------------------------------------------------------------------


def _value_array(vi: Any, value: Value, file: str) -> Any:
    """``value`` as an array of input ``vi``'s element type and declared shape."""
    import numpy as np
    from onnx import helper

    place = f"input {vi.name!r}"
    if vi.type.WhichOneof("value") != "tensor_type" or not vi.type.tensor_type.elem_type:
        raise InputError("not a tensor input of known element type; cannot take a value",
                         file=file, place=place)
    tt = vi.type.tensor_type
    try:
        np_type = helper.tensor_dtype_to_np_dtype(tt.elem_type)
    except Exception:
        np_type = None
    if np_type is None or np_type.kind not in "biuf":
        raise InputError("a value can only be given to a numeric or bool input", file=file,
                         place=place)
    raw = np.asarray(list(value), dtype=np.float64)
    arr = raw.astype(np_type)
    if np_type.kind in "iu" and not np.array_equal(arr.astype(np.float64), raw):
        raise InputError(f"the input holds {np_type.name} but {list(value)} is not integral "
                         f"or out of its range", file=file, place=place)
    if tt.HasField("shape"):
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        if not dims:
            if arr.size != 1:
                raise InputError(f"the input is a scalar but {arr.size} values were given",
                                 file=file, place=place)
            return arr.reshape(())
        if all(d is not None for d in dims):
            if math.prod(dims) != arr.size:  # type: ignore[arg-type]
                raise InputError(f"the input has shape {dims} ({math.prod(dims)} values; "  # type: ignore[arg-type]
                                 f"bind it with --shape) but {arr.size} were given",
                                 file=file, place=place)
            return arr.reshape(dims)
        if len(dims) == 1:
            return arr
        known = math.prod(d for d in dims if d is not None)
        if sum(d is None for d in dims) == 1 and known and arr.size % known == 0:
            return arr.reshape([arr.size // known if d is None else d for d in dims])
        raise InputError(f"the input's shape {['?' if d is None else d for d in dims]} is not "
                         f"known: bind it with --shape {vi.name}=DIMS", file=file,
                         place=place)
    return arr


def bind_values(model: ModelProto, file: str, values: Mapping[str, Value] | None
                ) -> list[str]:
    """Turn each graph input named in ``values`` into an initializer of that value (in
    place); the names bound, in order. Raises ``InputError`` naming the input for an unknown
    name, a value of the wrong size or type, or a non-numeric input."""
    from onnx import numpy_helper

    if not values:
        return []
    g = model.graph
    inits = {t.name for t in g.initializer}
    real = {vi.name: vi for vi in g.input if vi.name not in inits}
    bound: list[str] = []
    for name, value in values.items():
        vi = real.get(name)
        if vi is None:
            known = ", ".join(repr(n) for n in real) or "none"
            raise InputError(f"the model has no input {name!r} (inputs: {known})", file=file,
                             place="--value")
        g.initializer.append(numpy_helper.from_array(_value_array(vi, value, file), name))
        bound.append(name)
    kept = [vi for vi in g.input if vi.name not in bound]
    del g.input[:]
    g.input.extend(kept)
    return bound


# ---- names ----------------------------------------------------------------------------------


def _graphs_of(node: NodeProto) -> Iterable[GraphProto]:
    for attr in node.attribute:
        if attr.HasField("g"):
            yield attr.g
        yield from attr.graphs


def _all_names(graph: GraphProto, into: set[str], defs: Counter[str]) -> None:
    """Every value name ``graph`` and its subgraphs define or read (``into``), and how
    many times each is defined over all scopes (``defs``)."""
    into.update(vi.name for vi in [*graph.input, *graph.output, *graph.value_info])
    defined = [vi.name for vi in graph.input]
    defined.extend(t.name for t in graph.initializer)
    defined.extend(sp.values.name for sp in graph.sparse_initializer)
    for node in graph.node:
        into.update(node.input)
        defined.extend(o for o in node.output if o)
        for sub in _graphs_of(node):
            _all_names(sub, into, defs)
    into.update(defined)
    defs.update(set(defined))


def _rename(graph: GraphProto, names: Mapping[str, str]) -> None:
    """Rename values of ``graph`` (and what its subgraphs read of them), in place."""
    if not names:
        return
    for vi in [*graph.input, *graph.output, *graph.value_info]:
        vi.name = names.get(vi.name, vi.name)
    for t in graph.initializer:
        t.name = names.get(t.name, t.name)
    for node in graph.node:
        for i, x in enumerate(node.input):
            if x in names:
                node.input[i] = names[x]
        for i, x in enumerate(node.output):
            if x in names:
                node.output[i] = names[x]
        for sub in _graphs_of(node):
            _rename(sub, names)


class _Names:
    """Names for values that move to the top graph: a name defined once in the whole model
    keeps it; another gets a fresh one (``base_1``...) never used anywhere."""

    def __init__(self, graph: GraphProto) -> None:
        self.taken: set[str] = {""}
        self.defs: Counter[str] = Counter()
        _all_names(graph, self.taken, self.defs)
        self.claimed: set[str] = set()

    def top(self, name: str) -> str:
        if self.defs[name] <= 1 and name not in self.claimed:
            self.claimed.add(name)
            return name
        base, k = name, 1
        while name in self.taken:
            name = f"{base}_{k}"
            k += 1
        self.taken.add(name)
        self.claimed.add(name)
        return name


def _local_names(graph: GraphProto) -> list[str]:
    """Values a subgraph defines at its own level: initializers and node outputs."""
    out = [t.name for t in graph.initializer]
    out.extend(o for n in graph.node for o in n.output if o)
    return out


# ---- inlining If ----------------------------------------------------------------------------


def _constant_values(graph: GraphProto) -> dict[str, TensorProto]:
    out = {t.name: t for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and \
                len(node.output) == 1:
            t = constant_tensor(node)
            if t is not None:
                out[node.output[0]] = t
    return out


def _const_bool(name: str, consts: Mapping[str, TensorProto]) -> bool | None:
    """The truth of a one-element constant ``name``, else None."""
    from onnx import numpy_helper

    if not name or name not in consts:
        return None
    try:
        arr = numpy_helper.to_array(consts[name])
    except Exception:
        return None
    if arr.size != 1 or arr.dtype.kind not in "biuf":
        return None
    return bool(arr.reshape(-1)[0])


def _condition(node: NodeProto, consts: Mapping[str, TensorProto]) -> bool | None:
    """The value of an ``If``'s condition when it is a one-element constant, else None."""
    return _const_bool(node.input[0] if node.input else "", consts)


def _branch(node: NodeProto, taken: bool) -> GraphProto | None:
    want = "then_branch" if taken else "else_branch"
    for attr in node.attribute:
        if attr.name == want and attr.HasField("g"):
            return attr.g
    return None


def _splice(node: NodeProto, branch: GraphProto, names: _Names, model: ModelProto
            ) -> list[NodeProto] | None:
    """The nodes that replace ``node`` by ``branch`` (renamed apart from the model's
    values); its initializers and value_info join the model. None when the branch does not
    fit the node (a different number of outputs, or inputs of its own)."""
    from onnx import GraphProto as _GraphProto
    from onnx import helper

    outs = [o for o in node.output]
    if len(branch.output) != len(outs) or len(branch.input):
        return None
    work = _GraphProto()
    work.CopyFrom(branch)
    inits: list[TensorProto] = []
    _hoist_from(work, names, inits)  # its weights become initializers (int8 kernels need that)
    renames: dict[str, str] = {}
    for local in _local_names(work):
        if local not in renames:
            renames[local] = names.top(local)
    _rename(work, renames)
    g = model.graph
    g.initializer.extend(inits)
    g.sparse_initializer.extend(work.sparse_initializer)
    g.value_info.extend(vi for vi in work.value_info if vi.name in set(renames.values()))
    label = node.name or "If"
    nodes = list(work.node)
    for i, (vi, out) in enumerate(zip(work.output, outs, strict=True)):
        if out:
            nodes.append(helper.make_node("Identity", [vi.name], [out],
                                          name=f"{label}/output_{i}"))
    return nodes


def inline_known_ifs(model: ModelProto) -> int:
    """Replace every top-level ``If`` whose condition is a constant by the nodes of the
    branch it takes (module docstring), in place; how many were inlined."""
    g = model.graph
    if not any(n.op_type == "If" for n in g.node):
        return 0  # (large graphs without control flow pay one pass)
    consts = _constant_values(g)
    names = _Names(g)
    was_read = read_names(model)
    kept: list[NodeProto] = []
    done = 0
    for node in g.node:
        if node.op_type == "If" and node.domain in ("", "ai.onnx"):
            taken = _condition(node, consts)
            branch = _branch(node, taken) if taken is not None else None
            spliced = _splice(node, branch, names, model) if branch is not None else None
            if spliced is not None:
                kept.extend(spliced)
                done += 1
                continue
        kept.append(node)
    if done:
        del g.node[:]
        g.node.extend(kept)
        drop_dead_nodes(model)  # what only the branches not taken read
        drop_unread(model, was_read)  # weights only they read
    return done


def drop_dead_nodes(model: ModelProto) -> int:
    """Drop nodes none of whose outputs is read (by a later node, a subgraph or as a graph
    output), in place, in one backward pass; how many. What folding or a dropped branch
    left behind (a value only a folded ``Shape`` read) computes nothing observable, and a
    partition of only such nodes would have no outputs."""

    g = model.graph
    live = {o.name for o in g.output}
    keep: list[bool] = []
    for node in reversed(g.node):
        alive = any(o in live for o in node.output if o)
        keep.append(alive)
        if alive:
            live.update(node.input)
            if any(a.HasField("g") or len(a.graphs) for a in node.attribute):
                live.update(subgraph_refs(node))
    keep.reverse()
    dead = [i for i, k in enumerate(keep) if not k]
    for i in reversed(dead):
        del g.node[i]
    return len(dead)


# ---- weights inside subgraphs -----------------------------------------------------------


def _hoist_from(graph: GraphProto, names: _Names, inits: list[TensorProto]) -> int:
    """Move ``graph``'s initializers and ``Constant`` nodes (and those of its subgraphs)
    into ``inits`` under fresh names; how many moved."""
    from onnx import TensorProto as _TensorProto

    renames: dict[str, str] = {}
    moved = 0
    for t in graph.initializer:
        new = _TensorProto()
        new.CopyFrom(t)
        renames[t.name] = new.name = names.top(t.name)
        inits.append(new)
        moved += 1
    kept = []
    for node in graph.node:
        t = constant_tensor(node) if node.op_type == "Constant" and \
            node.domain in ("", "ai.onnx") and len(node.output) == 1 else None
        if t is None:
            kept.append(node)
            continue
        new = _TensorProto()
        new.CopyFrom(t)
        renames[node.output[0]] = new.name = names.top(node.output[0])
        inits.append(new)
        moved += 1
    del graph.initializer[:]
    del graph.node[:]
    graph.node.extend(kept)
    graph_outputs = {vi.name for vi in graph.output}
    _rename(graph, {k: v for k, v in renames.items()})
    for vi in graph.output:  # a subgraph output that was a constant: keep its name
        if vi.name not in graph_outputs:
            old = next(k for k, v in renames.items() if v == vi.name)
            from onnx import helper

            graph.node.append(helper.make_node("Identity", [vi.name], [old]))
            vi.name = old
    for node in graph.node:
        for sub in _graphs_of(node):
            moved += _hoist_from(sub, names, inits)
    return moved


def hoist_subgraph_weights(model: ModelProto) -> int:
    """Move the initializers and ``Constant`` nodes of every top-level control-flow node's
    subgraphs to the top graph's initializers (module docstring), in place; how many
    moved. The subgraphs read them as outer-scope values."""
    g = model.graph
    if not any(a.HasField("g") or len(a.graphs) for n in g.node for a in n.attribute):
        return 0
    names = _Names(g)
    inits: list[TensorProto] = []
    moved = 0
    for node in g.node:
        for sub in _graphs_of(node):
            moved += _hoist_from(sub, names, inits)
    g.initializer.extend(inits)
    return moved


# ---- the work of a kept control-flow node ----------------------------------------------


def _outer_refs(graph: GraphProto) -> list[str]:
    """Values ``graph`` (and its subgraphs) read from outer scopes, in first-read order."""
    refs: list[str] = []

    def walk(g: GraphProto, outer_defined: set[str]) -> None:
        defined = set(outer_defined)
        defined.update(vi.name for vi in g.input)
        defined.update(t.name for t in g.initializer)
        for n in g.node:
            for name in n.input:
                if name and name not in defined and name not in refs:
                    refs.append(name)
            for sub in _graphs_of(n):
                walk(sub, defined)
            defined.update(n.output)

    walk(graph, set())
    return refs


def subgraph_refs(node: NodeProto) -> list[str]:
    """Outer-scope values a node's subgraphs (If/Loop/Scan bodies) read, in first-read
    order (what a partition holding the node must also be given)."""
    refs: list[str] = []
    for g in _graphs_of(node):
        refs.extend(r for r in _outer_refs(g) if r not in refs)
    return refs


def constant_tensor(node: NodeProto) -> TensorProto | None:
    """The tensor a Constant node holds (any of its value attributes), or None."""
    from onnx import TensorProto, helper

    for attr in node.attribute:
        if attr.name == "value":
            return attr.t
        if attr.name == "value_int":
            return helper.make_tensor("v", TensorProto.INT64, (), [attr.i])
        if attr.name == "value_ints":
            return helper.make_tensor("v", TensorProto.INT64, (len(attr.ints),),
                                      list(attr.ints))
        if attr.name == "value_float":
            return helper.make_tensor("v", TensorProto.FLOAT, (), [attr.f])
        if attr.name == "value_floats":
            return helper.make_tensor("v", TensorProto.FLOAT, (len(attr.floats),),
                                      list(attr.floats))
    return None


def read_names(model: ModelProto) -> set[str]:
    """Every value name a node (subgraphs included) or a graph output reads."""
    g = model.graph
    names = {o.name for o in g.output}
    for node in g.node:
        names.update(i for i in node.input if i)
        names.update(subgraph_refs(node))
    return names


def drop_unread(out: ModelProto, was_read: set[str]) -> None:
    """Drop initializers and ``Constant`` nodes of ``out`` whose names are in ``was_read``
    (what was read before a rewrite) and that nothing reads any more, in place."""
    read = read_names(out)
    gone = was_read - read
    g = out.graph
    dropped = {t.name for t in g.initializer if t.name in gone}
    inits = [t for t in g.initializer if t.name not in gone]
    del g.initializer[:]
    g.initializer.extend(inits)
    nodes = [n for n in g.node
             if not (n.op_type == "Constant" and n.domain in ("", "ai.onnx")
                     and all(o in gone for o in n.output))]
    del g.node[:]
    g.node.extend(nodes)
    ins = [vi for vi in g.input if vi.name not in dropped]  # initializers listed as inputs
    del g.input[:]
    g.input.extend(ins)
