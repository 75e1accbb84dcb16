"""Fusion: group ops into regions, the vertices that placement and scheduling work on.

A region is one kernel launch whose internal tensors never leave the device. ``fuse`` finds
three patterns on the op graph:

- ``contraction``: a matmul / gemm / linear / conv / conv-transpose, then (optionally) a
  bias add with a parameter operand (``+bias``), then (optionally) an inference batch norm
  (``+bn``: a per-channel scale and shift, as conv-bn-relu stacks from torch export hold),
  then a chain of pointwise ops (``+act`` for a single activation, ``+elementwise-chain``
  otherwise);
- ``elementwise``: a chain of two or more pointwise ops (elementwise kinds and inference
  batch norm) (``elementwise-chain``);
- ``attention``: the decomposed attention core, MATMUL (q @ k^T) -> optional scale
  (MUL/DIV) -> optional mask (ADD/WHERE) -> SOFTMAX -> MATMUL (@ v), as ONNX exporters
  and decomposed torch graphs produce it (``attention-core``). A fused ATTENTION op is
  always a region of its own (``attention``).

Chains only follow a tensor that has exactly one consumer and is not a graph output, so a
fused kernel never has to write its intermediates. Views (reshape, squeeze, ..., dropout)
between two fused ops are absorbed. Anything else is a region of one op (``single``).

Regions are grown op by op in topological order, and an op joins a region only if that
keeps the region DAG acyclic (checked on the regions built so far), so a partition from
``fuse`` is valid by construction; ``check_partition`` verifies any partition independently.

Region names are the name of their first op (unique, stable, readable in plans).

>>> from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
>>> from placewise.units import DType
>>> T = lambda n, r=Role.ACTIVATION, s=(4, 8): Tensor(n, s, DType.FP32, role=r)
>>> g = Graph.build("mlp", [T("x", Role.INPUT, (4, 16)), T("w", Role.PARAM, (16, 8)),
...     T("b", Role.PARAM, (8,)), T("h"), T("hb"), T("y", Role.OUTPUT)],
...     [Op("mm", OpKind.MATMUL, ("x", "w"), ("h",)), Op("bias", OpKind.ADD, ("h", "b"), ("hb",)),
...      Op("act", OpKind.RELU, ("hb",), ("y",))])
>>> p = fuse(g)
>>> [(r.name, r.ops, r.pattern) for r in p.regions]
[('mm', ('mm', 'bias', 'act'), 'contraction+bias+act')]
>>> p.regions[0].inputs, p.regions[0].internal, p.regions[0].outputs
(('x', 'w', 'b'), ('h', 'hb'), ('y',))
>>> check_partition(g, p)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from placewise.errors import GraphError, InputError
from placewise.graph.ir import GEMM_KINDS, Graph, Op, OpCategory, OpKind, Role
from placewise.graph.walk import topological_order

__all__ = [
    "PATTERNS",
    "Partition",
    "Region",
    "check_partition",
    "fuse",
    "singletons",
]

PATTERNS = ("contraction", "elementwise", "attention")

_VIEWS = frozenset({OpKind.RESHAPE, OpKind.FLATTEN, OpKind.SQUEEZE, OpKind.UNSQUEEZE,
                    OpKind.IDENTITY, OpKind.DROPOUT})
_ACTIVATIONS = frozenset({OpKind.RELU, OpKind.LEAKY_RELU, OpKind.GELU, OpKind.SILU,
                          OpKind.SIGMOID, OpKind.HARD_SIGMOID, OpKind.HARD_SWISH, OpKind.TANH,
                          OpKind.ELU, OpKind.SOFTPLUS, OpKind.CLIP})


@dataclass(frozen=True, slots=True)
class Region:
    """A fused group of ops.

    ``ops`` are in topological order; ``inputs`` are the tensors read from outside the
    region (graph inputs and parameters included), in first-use order; ``outputs`` the
    tensors it produces that are visible beyond it (read by another region, graph outputs,
    or never read at all); ``internal`` the tensors produced and consumed only inside.
    """

    name: str
    ops: tuple[str, ...]
    pattern: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    internal: tuple[str, ...]


@dataclass(frozen=True)
class Partition:
    """Regions covering a graph (identified by its fingerprint), in a topological order of
    the region DAG."""

    graph_fingerprint: str
    regions: tuple[Region, ...]
    _by_op: dict[str, Region] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_op", {o: r for r in self.regions for o in r.ops})

    def region_of(self, op_name: str) -> Region:
        """The region holding ``op_name``."""
        try:
            return self._by_op[op_name]
        except KeyError:
            raise GraphError("op is in no region of the partition",
                             place=f"op {op_name!r}") from None

    def region_graph_edges(self) -> list[tuple[str, str, str]]:
        """``(src_region, dst_region, tensor)`` for every tensor a region reads from another,
        ordered by destination region, then by the destination's input order."""
        made_by = {t: r.name for r in self.regions for t in r.outputs}
        return [(made_by[t], r.name, t) for r in self.regions for t in r.inputs
                if t in made_by and made_by[t] != r.name]


# ---- building regions ----------------------------------------------------------------------


def _region(graph: Graph, name: str, ops: Sequence[Op], pattern: str,
            graph_outputs: set[str] | frozenset[str]) -> Region:
    names = {o.name for o in ops}
    produced: list[str] = []
    produced_set: set[str] = set()
    for o in ops:
        for t in o.outputs:
            produced.append(t)
            produced_set.add(t)
    inputs: dict[str, None] = {}
    for o in ops:
        for t in o.inputs:
            if t and t not in produced_set:
                inputs.setdefault(t, None)
    internal: list[str] = []
    outputs: list[str] = []
    for t in produced:
        cons = graph.consumers(t)
        if cons and t not in graph_outputs and all(c.name in names for c in cons):
            internal.append(t)
        else:
            outputs.append(t)
    return Region(name, tuple(o.name for o in ops), pattern, tuple(inputs), tuple(outputs),
                  tuple(internal))


def _pattern_of(graph: Graph, ops: Sequence[Op]) -> str:
    """Name a region after what it holds."""
    if len(ops) == 1:
        return "attention" if ops[0].kind is OpKind.ATTENTION else "single"
    work = [o for o in ops if o.kind not in _VIEWS]
    kinds = {o.kind for o in work}
    if OpKind.SOFTMAX in kinds and OpKind.MATMUL in kinds:
        return "attention-core"
    if work and work[0].kind in GEMM_KINDS:
        name = "contraction"
        rest = work[1:]
        if rest and rest[0].kind is OpKind.ADD and _has_param_operand(graph, rest[0]):
            name += "+bias"
            rest = rest[1:]
        if rest and rest[0].kind is OpKind.BATCH_NORM:
            name += "+bn"
            rest = rest[1:]
        if len(rest) == 1 and rest[0].kind in _ACTIVATIONS:
            name += "+act"
        elif rest:
            name += "+elementwise-chain"
        return name
    return "elementwise-chain"


def _has_param_operand(graph: Graph, op: Op) -> bool:
    return any(t and graph.tensor(t).role is Role.PARAM for t in op.inputs)


def _is_pointwise(op: Op) -> bool:
    """Elementwise kinds, and batch norm (a per-channel scale and shift at inference)."""
    return ((op.kind.category is OpCategory.ELEMENTWISE and op.kind not in _VIEWS)
            or op.kind is OpKind.BATCH_NORM)


def _finish(graph: Graph, groups: list[list[Op]], fingerprint: str | None = None) -> Partition:
    """Regions from op groups, ordered topologically over the region DAG (stable)."""
    gid = {o.name: i for i, grp in enumerate(groups) for o in grp}
    preds: list[set[int]] = [set() for _ in groups]
    for i, grp in enumerate(groups):
        for o in grp:
            for s in graph.successors(o):
                j = gid[s.name]
                if j != i:
                    preds[j].add(i)
    pos = {o.name: i for i, o in enumerate(graph.ops)}
    first_pos = [min(pos[o.name] for o in grp) for grp in groups]
    order = topological_order(preds, first_pos)
    if len(order) != len(groups):  # never: fuse checks every merge
        raise GraphError("internal error: fused regions form a cycle", place=graph.name)
    regions = []
    graph_outputs = set(graph.outputs)
    for i in order:
        grp = sorted(groups[i], key=lambda o: pos[o.name])
        regions.append(_region(graph, grp[0].name, grp, _pattern_of(graph, grp),
                               graph_outputs))
    return Partition(fingerprint or graph.fingerprint(), tuple(regions))


def singletons(graph: Graph) -> Partition:
    """One region per op (the unfused baseline)."""
    return _finish(graph, [[o] for o in graph.ops])


# ---- pattern proposals ---------------------------------------------------------------------


class _Matcher:
    __slots__ = ("claimed", "graph", "outputs")

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.outputs = set(graph.outputs)
        self.claimed: set[str] = set()

    def private(self, tensor: str) -> Op | None:
        """The only consumer of ``tensor`` when the tensor can stay inside a kernel."""
        if not tensor or tensor in self.outputs:
            return None
        cons = self.graph.consumers(tensor)
        return cons[0] if len(cons) == 1 else None

    def sole_next(self, op: Op) -> Op | None:
        if len(op.outputs) != 1:
            return None
        return self.private(op.outputs[0])

    def next_through_views(self, op: Op) -> tuple[list[Op], Op | None]:
        """Views on the single-consumer path after ``op`` and the first non-view op on it."""
        views: list[Op] = []
        cur = op
        while True:
            nxt = self.sole_next(cur)
            if nxt is None or nxt.name in self.claimed:
                return views, None
            if nxt.kind in _VIEWS:
                views.append(nxt)
                cur = nxt
                continue
            return views, nxt

    def chain(self, seed: Op) -> list[Op]:
        """``seed`` plus the pointwise ops (and views between) that follow it privately."""
        members = [seed]
        cur = seed
        while True:
            views, nxt = self.next_through_views(cur)
            if nxt is None or not _is_pointwise(nxt):
                return members
            members += [*views, nxt]
            cur = nxt

    def attention(self, softmax: Op) -> list[Op] | None:
        """The attention core around ``softmax``, or None."""
        if not softmax.inputs or len(softmax.outputs) != 1:
            return None
        back = self._back(softmax.inputs[0], softmax, frozenset({"scale", "mask"}))
        if back is None:
            return None
        views, pv = self.next_through_views(softmax)
        if pv is None or pv.kind is not OpKind.MATMUL:
            return None
        fed = (views[-1] if views else softmax).outputs[0]
        if not pv.inputs or pv.inputs[0] != fed:
            return None
        ops = [*back, softmax, *views, pv]
        if any(o.name in self.claimed for o in ops):
            return None
        return ops

    def _back(self, tensor: str, consumer: Op, allowed: frozenset[str]) -> list[Op] | None:
        """Ops from q@k^T up to ``tensor`` (exclusive of ``consumer``), walking back over
        views, at most one scale and one mask, to a MATMUL."""
        if self.private(tensor) is not consumer:
            return None
        p = self.graph.producer(tensor)
        if p is None or p.name in self.claimed or len(p.outputs) != 1:
            return None
        if p.kind in _VIEWS:
            r = self._back(p.inputs[0], p, allowed) if p.inputs else None
            return None if r is None else [*r, p]
        if p.kind is OpKind.MATMUL:
            return [p]
        if "mask" in allowed and p.kind in (OpKind.ADD, OpKind.WHERE):
            candidates = p.inputs[1:] if p.kind is OpKind.WHERE else p.inputs
            stage = allowed - {"mask"}
        elif "scale" in allowed and p.kind in (OpKind.MUL, OpKind.DIV):
            candidates = p.inputs[:1] if p.kind is OpKind.DIV else p.inputs
            stage = allowed - {"scale"}
        else:
            return None
        for t in candidates:
            r = self._back(t, p, stage)
            if r is not None:
                return [*r, p]
        return None


def _proposals(graph: Graph, patterns: Iterable[str]) -> list[list[Op]]:
    """Groups the patterns ask for (disjoint, each a private chain in topological order)."""
    pats = set(patterns)
    m = _Matcher(graph)
    props: list[list[Op]] = []
    if "attention" in pats:
        for op in graph.ops:
            if op.kind is OpKind.SOFTMAX and op.name not in m.claimed:
                core = m.attention(op)
                if core is not None:
                    props.append(core)
                    m.claimed.update(o.name for o in core)
    for op in graph.ops:
        if op.name in m.claimed:
            continue
        if op.kind in GEMM_KINDS and "contraction" in pats:
            grp = m.chain(op)
        elif _is_pointwise(op) and "elementwise" in pats:
            grp = m.chain(op)
            if sum(1 for o in grp if o.kind not in _VIEWS) < 2:
                continue
        else:
            continue
        if len(grp) > 1:
            props.append(grp)
            m.claimed.update(o.name for o in grp)
    return props


# ---- assembly with cycle checks ------------------------------------------------------------


def _reaches(graph: Graph, start: int, targets: set[int], members: list[list[Op]],
             region: dict[str, int]) -> bool:
    """Whether region ``start`` reaches any of ``targets`` over the region DAG built so far
    (ops not yet placed in a region are ignored: they come later in topological order)."""
    stack = [start]
    seen = {start}
    while stack:
        r = stack.pop()
        for o in members[r]:
            for s in graph.successors(o):
                j = region.get(s.name)
                if j is None or j in seen:
                    continue
                if j in targets:
                    return True
                seen.add(j)
                stack.append(j)
    return False


def fuse(graph: Graph, *, patterns: Sequence[str] = PATTERNS) -> Partition:
    """Partition ``graph`` into fused regions using ``patterns`` (a subset of ``PATTERNS``).

    ``fuse(g, patterns=())`` gives the same regions as ``singletons(g)``.
    """
    bad = [p for p in patterns if p not in PATTERNS]
    if bad:
        raise InputError(f"unknown fusion pattern(s) {', '.join(map(repr, bad))} (known: "
                         f"{', '.join(PATTERNS)})", place="fuse patterns")
    proposal_of: dict[str, int] = {}
    for i, grp in enumerate(_proposals(graph, patterns)):
        for o in grp:
            proposal_of[o.name] = i
    active: dict[int, int] = {}  # proposal -> region its latest member went to
    region: dict[str, int] = {}  # op -> region
    members: list[list[Op]] = []
    for op in graph.ops:
        p = proposal_of.get(op.name)
        target = active.get(p) if p is not None else None
        if target is not None:
            preds = {region[q.name] for q in graph.predecessors(op)} - {target}
            if preds and _reaches(graph, target, preds, members, region):
                target = None  # joining would close a cycle through another region
        if target is None:
            target = len(members)
            members.append([])
        members[target].append(op)
        region[op.name] = target
        if p is not None:
            active[p] = target
    return _finish(graph, members)


# ---- checking --------------------------------------------------------------------------------


def check_partition(graph: Graph, partition: Partition) -> None:
    """Raise ``GraphError`` unless ``partition`` is a valid partition of ``graph``: made for
    this graph, every op in exactly one region, ops listed in topological order, inputs /
    outputs / internal tensors exact (internal tensors are never read outside), and the
    region DAG acyclic with regions listed in a topological order of it."""
    fp = graph.fingerprint()
    if partition.graph_fingerprint != fp:
        raise GraphError(f"partition was made for another graph ({partition.graph_fingerprint}"
                         f", this graph is {fp})", place=f"graph {graph.name!r}")
    owner: dict[str, str] = {}
    names: set[str] = set()
    pos = {o.name: i for i, o in enumerate(graph.ops)}
    graph_outputs = set(graph.outputs)
    for r in partition.regions:
        where = f"region {r.name!r}"
        if r.name in names:
            raise GraphError("region name used twice", place=where)
        names.add(r.name)
        if not r.ops:
            raise GraphError("region holds no op", place=where)
        for o in r.ops:
            if o not in pos:
                raise GraphError(f"op {o!r} is not in the graph", place=where)
            if o in owner:
                raise GraphError(f"op {o!r} is also in region {owner[o]!r}", place=where)
            owner[o] = r.name
        if any(pos[a] > pos[b] for a, b in zip(r.ops, r.ops[1:], strict=False)):
            raise GraphError("ops are not listed in topological order", place=where)
        ops = [graph.op(o) for o in r.ops]
        expect = _region(graph, r.name, ops, r.pattern, graph_outputs)
        inside = set(r.ops)
        for t in r.internal:
            outside = [c.name for c in graph.consumers(t) if c.name not in inside]
            if outside:
                raise GraphError(f"internal tensor {t!r} is read outside the region by op "
                                 f"{outside[0]!r}", place=where)
            if t in graph_outputs:
                raise GraphError(f"internal tensor {t!r} is a graph output", place=where)
        for what in ("inputs", "outputs", "internal"):
            got, want = getattr(r, what), getattr(expect, what)
            if set(got) != set(want) or len(got) != len(want):
                missing = sorted(set(want) - set(got))
                extra = sorted(set(got) - set(want))
                raise GraphError(f"{what} are wrong (missing {missing}, unexpected {extra})",
                                 place=where)
    for op in graph.ops:
        if op.name not in owner:
            raise GraphError("op is in no region", place=op.where())
    index = {r.name: i for i, r in enumerate(partition.regions)}
    edges = partition.region_graph_edges()
    succ: dict[str, list[str]] = {r.name: [] for r in partition.regions}
    for s, d, _ in edges:
        succ[s].append(d)
    cycle = _region_cycle(succ)
    if cycle:
        raise GraphError("the region DAG has a cycle: " + " -> ".join(cycle),
                         place=f"region {cycle[0]!r}")
    for s, d, t in edges:
        if index[s] > index[d]:
            raise GraphError(f"listed before region {s!r}, which produces its input {t!r}",
                             place=f"region {d!r}")


def _region_cycle(succ: dict[str, list[str]]) -> list[str]:
    """A cycle in the region graph as [a, b, ..., a], or [] (iterative DFS)."""
    color: dict[str, int] = dict.fromkeys(succ, 0)
    for root in succ:
        if color[root]:
            continue
        path: list[str] = [root]
        its = [iter(succ[root])]
        color[root] = 1
        while its:
            nxt = next(its[-1], None)
            if nxt is None:
                color[path.pop()] = 2
                its.pop()
            elif color[nxt] == 1:
                return [*path[path.index(nxt):], nxt]
            elif color[nxt] == 0:
                color[nxt] = 1
                path.append(nxt)
                its.append(iter(succ[nxt]))
    return []
