"""Placements and the evaluation problem.

A **placement** maps every *vertex* of the workload (a fused region, or a single op when the
graph is not fused) to an ``Assignment``: the device it runs on and the precision (dtype)
it computes in. A ``Problem`` bundles what every evaluation of a placement needs: the
graph, its partition into vertices, the machine, the cost model and the batch. It
precomputes the region DAG (vertices in topological order, edges with tensor names and
bytes) and memoizes every cost-model answer, so that evaluating thousands of placements —
the inner loop of search — only pays for the costs it has not seen yet. Moving one vertex
therefore only queries the costs that touch it; rescheduling is a full (fast) pass.

Conventions fixed here and used by the scheduler and the memory model:

- **held dtype**: a vertex computing in dtype ``D`` holds its floating-point tensors
  (activations it reads or writes, the weights it uses) in ``D``; integer and bool tensors
  (indices, masks) keep their own dtype (``held_dtype``). Layout is the tensor's layout.
- **host**: graph inputs are available at time 0 on the host device (``host=`` or, by
  default, the first CPU device, else the first device), held in their declared dtype.
  When ``outputs_to_host`` (the default), graph outputs are delivered back to the host in
  their declared representation; the run ends when the last one has arrived.
- **weights** (``Role.PARAM``) are resident on every device that uses them, in the held
  dtype of each vertex using them (converted ahead of time): no transfer, counted in memory.

>>> from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
>>> x = Tensor("x", (4,), DType.FP32, role=Role.INPUT)
>>> h = Tensor("h", (4,), DType.FP32)
>>> y = Tensor("y", (4,), DType.FP32, role=Role.OUTPUT)
>>> g = Graph.build("g", [x, h, y], [Op("a", OpKind.RELU, ("x",), ("h",)),
...                                  Op("b", OpKind.RELU, ("h",), ("y",))])
>>> p = Placement.uniform(["a", "b"], "cpu", DType.FP32)
>>> p["b"], p.moved("b", Assignment("gpu", DType.FP16))["b"]
(Assignment(device='cpu', dtype=<DType.FP32: 'fp32'>), Assignment(device='gpu', dtype=<DType.FP16: 'fp16'>))
>>> held_dtype(DType.INT64, DType.FP16), held_dtype(DType.FP32, DType.FP16)
(<DType.INT64: 'int64'>, <DType.FP16: 'fp16'>)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from placewise.cost.model import Cost, CostModel, Representation
from placewise.errors import GraphError, Infeasible, InputError, UnsupportedError
from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
from placewise.graph.walk import topological_order
from placewise.hardware.spec import DeviceKind, Machine
from placewise.units import DType

__all__ = [
    "Assignment",
    "Edge",
    "PartitionLike",
    "Placement",
    "Problem",
    "Pruned",
    "RegionLike",
    "Vertex",
    "feasible_assignments",
    "held_dtype",
    "held_rep",
    "pruned_assignments",
]


def held_dtype(tensor_dtype: DType, compute_dtype: DType) -> DType:
    """The dtype a vertex computing in ``compute_dtype`` holds a tensor of ``tensor_dtype``
    in: floating-point tensors take the compute dtype, integer/bool tensors keep theirs."""
    return compute_dtype if tensor_dtype.is_float else tensor_dtype


def natural_dtype(dtypes: Iterable[DType]) -> DType:
    """The precision a vertex whose tensors have ``dtypes`` computes in as the model is:
    the widest float dtype among them (fp32 when there is none).

    >>> natural_dtype([DType.INT64, DType.FP16]), natural_dtype([DType.BOOL])
    (<DType.FP16: 'fp16'>, <DType.FP32: 'fp32'>)
    """
    best: DType | None = None
    for dt in dtypes:
        if dt.is_float and (best is None or dt.bits > best.bits):
            best = dt
    return best or DType.FP32


def held_rep(tensor: Tensor, compute_dtype: DType) -> Representation:
    """``Representation(held_dtype(...), tensor.layout)``."""
    return Representation(held_dtype(tensor.dtype, compute_dtype), tensor.layout)


@dataclass(frozen=True, slots=True)
class Assignment:
    """Where a vertex runs and in which precision it computes."""

    device: str
    dtype: DType

    def __str__(self) -> str:
        return f"{self.device}/{self.dtype.value}"


@dataclass(frozen=True, slots=True)
class Placement(Mapping[str, Assignment]):
    """An immutable, hashable mapping vertex name -> ``Assignment`` (kept sorted by name).

    Build with ``Placement.of(mapping)`` or ``Placement.uniform(vertices, device, dtype)``;
    derive a neighbour with ``moved(vertex, assignment)``.
    """

    items_: tuple[tuple[str, Assignment], ...] = ()
    _index: dict[str, Assignment] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", dict(self.items_))

    @classmethod
    def of(cls, mapping: Mapping[str, Assignment] | Iterable[tuple[str, Assignment]]
           ) -> Placement:
        items = mapping.items() if isinstance(mapping, Mapping) else mapping
        return cls(tuple(sorted(items, key=lambda kv: kv[0])))

    @classmethod
    def uniform(cls, vertices: Iterable[str], device: str, dtype: DType) -> Placement:
        """Every vertex on ``device`` in ``dtype``."""
        a = Assignment(device, dtype)
        return cls.of((v, a) for v in vertices)

    def moved(self, vertex: str, assignment: Assignment) -> Placement:
        """A copy with ``vertex`` reassigned."""
        d = dict(self._index)
        d[vertex] = assignment
        return Placement.of(d)

    def __getitem__(self, key: str) -> Assignment:
        return self._index[key]

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self.items_)

    def __len__(self) -> int:
        return len(self.items_)

    def __contains__(self, key: object) -> bool:
        return key in self._index

    def __hash__(self) -> int:
        return hash(self.items_)

    def devices_used(self) -> list[str]:
        """Device names in first-use order (by vertex name)."""
        return list(dict.fromkeys(a.device for _, a in self.items_))

    def to_json(self) -> dict[str, dict[str, str]]:
        return {v: {"device": a.device, "dtype": a.dtype.value} for v, a in self.items_}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, file: str | None = None) -> Placement:
        out: dict[str, Assignment] = {}
        for v, a in data.items():
            try:
                out[str(v)] = Assignment(str(a["device"]), DType.parse(str(a["dtype"])))
            except (KeyError, TypeError, ValueError) as exc:
                raise InputError(f"bad assignment {a!r}: {exc}", file=file,
                                 place=f"placement of {v!r}") from None
        return cls.of(out)


class RegionLike(Protocol):
    """What the problem reads from a fused region: its name and its op names."""

    @property
    def name(self) -> str: ...

    @property
    def ops(self) -> tuple[str, ...]: ...


class PartitionLike(Protocol):
    """What the problem reads from a partition (``placewise.graph.fuse.Partition``)."""

    @property
    def regions(self) -> Sequence[RegionLike]: ...


@dataclass(frozen=True, slots=True)
class Vertex:
    """One schedulable vertex: a region (or single op) of the graph.

    ``inputs``: tensors it reads that another vertex produces or that are graph inputs
    (never weights); ``params``: weights it reads; ``outputs``: tensors it produces that
    leave it (read by another vertex, graph outputs, or read by nobody);
    ``internal``: tensors produced and consumed only inside it (a fused kernel never writes
    them to memory, so they are not counted); ``scratch_bytes``: the workspace it declares
    (sum over its ops, a conservative choice for fused regions).
    """

    index: int
    name: str
    ops: tuple[Op, ...]
    inputs: tuple[str, ...]
    params: tuple[str, ...]
    outputs: tuple[str, ...]
    internal: tuple[str, ...]
    scratch_bytes: int
    kinds: frozenset[OpKind]


@dataclass(frozen=True, slots=True)
class Edge:
    """A tensor flowing from vertex ``src`` to vertex ``dst`` (bytes as declared)."""

    src: str
    dst: str
    tensor: str
    nbytes: int


@dataclass(frozen=True, slots=True)
class Pruned:
    """An assignment ``feasible_assignments`` left out, and why."""

    assignment: Assignment
    reason: str


def _twins(cost_model: Any, devices: Sequence[str]) -> dict[str, str]:
    """Device -> the first device of its class where the cost model tells classes apart
    (``device_class``: devices of one class get equal op costs), for the others only."""
    classify = getattr(cost_model, "device_class", None)
    if classify is None:
        return {}
    first: dict[Any, str] = {}
    twins: dict[str, str] = {}
    for d in devices:
        try:
            cls = classify(d)
        except Exception:  # a device the model cannot class: costed on its own
            continue
        twin = first.setdefault(cls, d)
        if twin != d:
            twins[d] = twin
    return twins


def _groups(g: Graph, partition: PartitionLike | None) -> list[tuple[str, tuple[Op, ...]]]:
    """The vertices' (name, ops) in a stable topological order, each vertex's ops in graph
    order: one per op without ``partition``, else its regions (checked: disjoint, not
    empty, covering every op)."""
    groups: list[tuple[str, tuple[Op, ...]]]
    if partition is None:
        groups = [(op.name, (op,)) for op in g.ops]
    else:
        groups = []
        seen: dict[str, str] = {}
        for r in partition.regions:
            rops: list[Op] = []
            for name in r.ops:
                if name in seen:
                    raise GraphError(f"op {name!r} is in both regions {seen[name]!r} and "
                                     f"{r.name!r}", place=f"region {r.name!r}")
                seen[name] = r.name
                rops.append(g.op(name))
            if not rops:
                raise GraphError("empty region", place=f"region {r.name!r}")
            groups.append((r.name, tuple(rops)))
        missing = [op.name for op in g.ops if op.name not in seen]
        if missing:
            raise GraphError(f"the partition does not cover op {missing[0]!r} "
                             f"({len(missing)} ops uncovered)", place=f"op {missing[0]!r}")
    # order ops inside a group topologically, then the groups (Kahn, stable)
    pos = {op.name: i for i, op in enumerate(g.ops)}
    groups = [(n, tuple(sorted(ops, key=lambda o: pos[o.name]))) for n, ops in groups]
    group_of: dict[str, int] = {}
    for gi, (_, ops) in enumerate(groups):
        for op in ops:
            group_of[op.name] = gi
    gpreds: list[set[int]] = [set() for _ in groups]
    for gi, (_, ops) in enumerate(groups):
        for op in ops:
            for t in op.inputs:
                prod = g.producer(t) if t else None
                if prod is not None and group_of[prod.name] != gi:
                    gpreds[gi].add(group_of[prod.name])
    order = _kahn([pos[ops[0].name] for _, ops in groups], gpreds, [n for n, _ in groups])
    return [groups[gi] for gi in order]


def _vertex(g: Graph, vi: int, name: str, ops: tuple[Op, ...], outputs: set[str]) -> Vertex:
    """Vertex ``vi`` holding ``ops``: the tensors it reads from outside (weights apart),
    those it produces for others (or as graph ``outputs``) and those that never leave it."""
    opset = {o.name for o in ops}
    produced: dict[str, None] = {}
    for op in ops:
        for t in op.outputs:
            produced[t] = None
    ins: dict[str, None] = {}
    params: dict[str, None] = {}
    for op in ops:
        for t in op.inputs:
            if not t or t in produced:
                continue
            if g.tensor(t).role is Role.PARAM:
                params[t] = None
            else:
                ins[t] = None
    outs: list[str] = []
    internal: list[str] = []
    for t in produced:
        cons = g.consumers(t)
        if t in outputs or not cons or any(c.name not in opset for c in cons):
            outs.append(t)
        else:
            internal.append(t)
    return Vertex(vi, name, ops, tuple(ins), tuple(params), tuple(outs), tuple(internal),
                  sum(o.scratch_bytes for o in ops), frozenset(o.kind for o in ops))


class Problem:
    """The inputs of an evaluation, with the region DAG precomputed and costs memoized.

    ``partition``: a ``Partition`` from ``placewise.graph.fuse`` (anything with
    ``regions``, each with ``name`` and ``ops``), or ``None`` for one vertex per op named
    after the op (the same vertices as ``singletons(graph)``). ``batch`` is the batch the
    graph's shapes were bound with: throughput counts ``batch`` requests per run, and
    memory suggestions split it into micro-batches.

    ``precision``: vertex name -> the dtypes it may compute in (the precision policy's
    answer, see ``placewise.precision.policy``); a vertex not listed, or ``None``, may take
    any dtype its device supports. ``restricted`` gives the same problem with another
    restriction (sharing the cost memo tables).

    The inputs are never modified; the object only grows its memo tables (not thread-safe).
    """

    __slots__ = (
        "_conv",
        "_corun",
        "_costs",
        "_feasible",
        "_io",
        "_pruned",
        "_rep_index",
        "_route",
        "_twin",
        "_wake",
        "_xfer",
        "batch",
        "cost_model",
        "device_index",
        "devices",
        "edges",
        "graph",
        "host",
        "in_edges",
        "machine",
        "natural_rid",
        "numel",
        "out_edges",
        "outputs_to_host",
        "partition",
        "precision",
        "preds",
        "priority",
        "release_s",
        "rep_bits",
        "reps",
        "succs",
        "tensor_consumers",
        "tensor_producer",
        "vertex_index",
        "vertex_of_op",
        "vertices",
    )

    def __init__(self, graph: Graph, partition: PartitionLike | None, machine: Machine,
                 cost_model: CostModel, batch: int = 1, *, host: str | None = None,
                 outputs_to_host: bool = True,
                 precision: Mapping[str, frozenset[DType]] | None = None) -> None:
        if batch < 1:
            raise InputError(f"batch must be >= 1, got {batch}", place="batch")
        self.graph = graph
        self.partition = partition
        self.machine = machine
        self.cost_model = cost_model
        self.batch = batch
        self.outputs_to_host = outputs_to_host
        cm_machine = getattr(cost_model, "machine", None)
        if cm_machine is not None and cm_machine is not machine and \
                cm_machine.fingerprint() != machine.fingerprint():
            raise InputError(f"the cost model describes machine {cm_machine.name!r}, not "
                             f"{machine.name!r}", place="cost model")
        self.devices: tuple[str, ...] = tuple(machine.device_names)
        self.device_index = {d: i for i, d in enumerate(self.devices)}
        if host is None:
            cpus = [d.name for d in machine.devices if d.kind is DeviceKind.CPU]
            host = cpus[0] if cpus else self.devices[0]
        elif host not in self.device_index:
            raise InputError(f"machine {machine.name!r} has no device {host!r}", place="host")
        self.host: str = host
        self.vertices: tuple[Vertex, ...] = ()
        self.vertex_index: dict[str, int] = {}
        self.vertex_of_op: dict[str, int] = {}
        self.tensor_producer: dict[str, int] = {}
        self.tensor_consumers: dict[str, tuple[int, ...]] = {}
        self.edges: tuple[Edge, ...] = ()
        self.in_edges: tuple[tuple[int, ...], ...] = ()
        self.out_edges: tuple[tuple[int, ...], ...] = ()
        self.preds: tuple[tuple[int, ...], ...] = ()
        self.succs: tuple[tuple[int, ...], ...] = ()
        self._build(partition)
        # representations are interned as small ints ("rid") for fast keys
        self.reps: list[Representation] = []
        self.rep_bits: list[int] = []
        self._rep_index: dict[Representation, int] = {}
        self.numel: dict[str, int] = {}
        self.natural_rid: dict[str, int] = {}
        graph.check_concrete()
        for t in graph.tensors:
            self.numel[t.name] = t.numel
            self.natural_rid[t.name] = self.rep_id(Representation(t.dtype, t.layout))
        self._io: dict[tuple[int, DType], tuple[tuple[int, ...], tuple[int, ...]]] = {}
        self._costs: dict[tuple[int, str, DType], Cost | UnsupportedError] = {}
        self._twin = _twins(cost_model, self.devices)
        self._xfer: dict[tuple[str, int, str, str], Cost] = {}
        self._conv: dict[tuple[str, int, int, str], Cost] = {}
        self._route: dict[tuple[str, str], tuple[Any, ...]] = {}
        self._feasible: dict[int, tuple[Assignment, ...]] = {}
        self._pruned: dict[int, tuple[Pruned, ...]] = {}
        self._corun: dict[tuple[int, str, DType, frozenset[str]], float] = {}
        self._wake: dict[str, float] = {}
        self.precision: dict[int, frozenset[DType]] = {}
        self.release_s: dict[str, float] = {}  # vertex -> earliest start (``released``)
        self.priority: dict[str, int] = {}  # vertex -> level, 1 the highest (``prioritized``)
        for name, dts in (precision or {}).items():
            if name not in self.vertex_index:
                raise InputError(f"the precision restriction names vertex {name!r}, which "
                                 f"the problem does not have", place="precision")
            self.precision[self.vertex_index[name]] = frozenset(dts)

    def _copy(self) -> Problem:
        """A copy sharing every table (the memo tables included)."""
        p = Problem.__new__(Problem)
        for slot in Problem.__slots__:
            if hasattr(self, slot):
                object.__setattr__(p, slot, getattr(self, slot))
        return p

    def allows(self, vi: int, dtype: DType) -> bool:
        """Whether the precision restriction lets vertex ``vi`` compute in ``dtype``."""
        got = self.precision.get(vi)
        return got is None or dtype in got

    def restricted(self, precision: Mapping[str, frozenset[DType]] | None) -> Problem:
        """This problem with another precision restriction (``None``: none). Costs are
        pure functions of (vertex, device, dtype): the memo tables are shared."""
        p = self._copy()
        p._feasible = {}
        p._pruned = {}
        p.precision = {}
        for name, dts in (precision or {}).items():
            if name not in self.vertex_index:
                raise InputError(f"the precision restriction names vertex {name!r}, which "
                                 f"the problem does not have", place="precision")
            p.precision[self.vertex_index[name]] = frozenset(dts)
        return p

    def released(self, release_s: Mapping[str, float]) -> Problem:
        """This problem with release times: vertex name -> the earliest time (seconds) its
        compute task may start (the scheduler holds it until then; see
        ``placewise.schedule.simulate``). The memo tables are shared. Raises ``InputError``
        for an unknown vertex or a time that is negative or not finite."""
        for name, t in release_s.items():
            if name not in self.vertex_index:
                raise InputError("a release time names a vertex the problem does not have",
                                 place=f"vertex {name!r}")
            if not math.isfinite(t) or t < 0:
                raise InputError(f"a release time must be finite and >= 0, got {t!r}",
                                 place=f"vertex {name!r}")
        p = self._copy()
        p.release_s = {k: float(v) for k, v in release_s.items()}
        return p

    def prioritized(self, levels: Mapping[str, int]) -> Problem:
        """This problem with priorities: vertex name -> level (1 the highest; a vertex not
        named has the lowest level given). Where tasks of different levels wait for one
        resource, the scheduler starts the higher level's first (``placewise.schedule.
        simulate``); a workload gives each model's vertices its stream's priority. The memo
        tables are shared. ``InputError`` for an unknown vertex or a level below 1."""
        for name, level in levels.items():
            if name not in self.vertex_index:
                raise InputError("a priority names a vertex the problem does not have",
                                 place=f"vertex {name!r}")
            if isinstance(level, bool) or not isinstance(level, int) or level < 1:
                raise InputError(f"a priority is an integer >= 1, got {level!r}",
                                 place=f"vertex {name!r}")
        p = self._copy()
        p.priority = dict(levels) if len(set(levels.values())) > 1 else {}
        return p

    # ---- construction ----------------------------------------------------------------
    def _build(self, partition: PartitionLike | None) -> None:
        g = self.graph
        groups = _groups(g, partition)
        names_seen: set[str] = set()
        outputs = set(g.outputs)
        vertices: list[Vertex] = []
        for vi, (name, ops) in enumerate(groups):
            if name in names_seen:
                raise GraphError("vertex name used twice", place=f"region {name!r}")
            names_seen.add(name)
            vertices.append(_vertex(g, vi, name, ops, outputs))
        self.vertices = tuple(vertices)
        self.vertex_index = {v.name: v.index for v in vertices}
        self.vertex_of_op = {op.name: v.index for v in vertices for op in v.ops}
        producer: dict[str, int] = {}
        for v in vertices:
            for t in v.outputs:
                producer[t] = v.index
        consumers: dict[str, list[int]] = {}
        for v in vertices:
            for t in v.inputs:
                consumers.setdefault(t, []).append(v.index)
        self.tensor_producer = producer
        self.tensor_consumers = {t: tuple(c) for t, c in consumers.items()}
        edges: list[Edge] = []
        in_e: list[list[int]] = [[] for _ in vertices]
        out_e: list[list[int]] = [[] for _ in vertices]
        preds: list[dict[int, None]] = [{} for _ in vertices]
        succs: list[dict[int, None]] = [{} for _ in vertices]
        for v in vertices:
            for t in v.inputs:
                p = producer.get(t)
                if p is None:
                    continue
                ei = len(edges)
                edges.append(Edge(vertices[p].name, v.name, t, g.tensor(t).nbytes))
                in_e[v.index].append(ei)
                out_e[p].append(ei)
                preds[v.index][p] = None
                succs[p][v.index] = None
        self.edges = tuple(edges)
        self.in_edges = tuple(tuple(x) for x in in_e)
        self.out_edges = tuple(tuple(x) for x in out_e)
        self.preds = tuple(tuple(x) for x in preds)
        self.succs = tuple(tuple(sorted(x)) for x in succs)

    # ---- representations ---------------------------------------------------------------
    def rep_id(self, rep: Representation) -> int:
        """The interned id of ``rep`` (``reps[rid]`` gives it back)."""
        rid = self._rep_index.get(rep)
        if rid is None:
            rid = len(self.reps)
            self._rep_index[rep] = rid
            self.reps.append(rep)
            self.rep_bits.append(rep.dtype.bits)
        return rid

    def io_reps(self, vertex: int, dtype: DType) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Rep ids in which a vertex computing in ``dtype`` holds its inputs and outputs
        (``Vertex.inputs`` / ``Vertex.outputs`` order); see ``held_rep``."""
        key = (vertex, dtype)
        got = self._io.get(key)
        if got is None:
            v = self.vertices[vertex]
            g = self.graph
            got = (tuple(self.rep_id(held_rep(g.tensor(t), dtype)) for t in v.inputs),
                   tuple(self.rep_id(held_rep(g.tensor(t), dtype)) for t in v.outputs))
            self._io[key] = got
        return got

    def copy_bytes(self, tensor: str, rid: int) -> int:
        """Bytes of ``tensor`` held in representation ``rid``."""
        return (self.numel[tensor] * self.rep_bits[rid] + 7) // 8

    # ---- lookups ---------------------------------------------------------------------
    def vertex(self, name: str) -> Vertex:
        try:
            return self.vertices[self.vertex_index[name]]
        except KeyError:
            raise InputError("no such vertex (region or op)", place=f"vertex {name!r}") from None

    @property
    def vertex_names(self) -> list[str]:
        return [v.name for v in self.vertices]

    def route(self, src: str, dst: str) -> tuple[Any, ...]:
        """``machine.route`` memoized: the links from ``src`` to ``dst``."""
        key = (src, dst)
        r = self._route.get(key)
        if r is None:
            r = tuple(self.machine.route(src, dst))
            if src != dst and not r:
                raise UnsupportedError(f"no route from device {src!r} to {dst!r}")
            self._route[key] = r
        return r

    # ---- memoized costs ----------------------------------------------------------------
    def cost(self, vertex: int | str, device: str, dtype: DType) -> Cost:
        """The cost of a vertex on (device, dtype); raises ``UnsupportedError`` (memoized)
        when the device does not run one of its kinds in that dtype or the model refuses."""
        vi = self.vertex_index[vertex] if isinstance(vertex, str) else vertex
        key = (vi, device, dtype)
        c = self._costs.get(key)
        if c is None:
            # a device of the same class as one costed before (``device_class``): its cost
            twin = self._twin.get(device)
            if twin is not None and OpKind.TASK not in self.vertices[vi].kinds:
                got = self._costs.get((vi, twin, dtype))
                if isinstance(got, Cost):
                    c = got
            if c is None:
                c = self._compute_cost(vi, device, dtype)
            self._costs[key] = c
        if isinstance(c, UnsupportedError):
            raise c
        return c

    def _compute_cost(self, vi: int, device: str, dtype: DType) -> Cost | UnsupportedError:
        v = self.vertices[vi]
        if device not in self.device_index:
            return UnsupportedError(f"vertex {v.name!r}: machine {self.machine.name!r} has no "
                                    f"device {device!r}")
        dev = self.machine.device(device)
        if dtype not in dev.dtypes:
            return UnsupportedError(
                f"vertex {v.name!r}: device {device!r} does not compute in {dtype.value} "
                f"(supported: {', '.join(d.value for d in dev.dtypes)})")
        for op in v.ops:
            if not dev.supports(op.kind):
                return UnsupportedError(f"vertex {v.name!r}: device {device!r} does not run "
                                        f"{op.where()} (kind {op.kind.value!r})")
        try:
            if len(v.ops) == 1:
                return self.cost_model.op_cost(self.graph, v.ops[0], device, dtype)
            return self.cost_model.region_cost(self.graph, list(v.ops), device, dtype)
        except UnsupportedError as exc:
            return UnsupportedError(f"vertex {v.name!r} on {device}/{dtype.value}: {exc}")

    def transfer(self, tensor: str, rep: Representation | int, src: str, dst: str) -> Cost:
        """The cost of moving ``tensor`` held as ``rep`` (or its id) from ``src`` to ``dst``
        (memoized)."""
        rid = rep if isinstance(rep, int) else self.rep_id(rep)
        key = (tensor, rid, src, dst)
        c = self._xfer.get(key)
        if c is None:
            c = self.cost_model.transfer_cost(self.graph.tensor(tensor), self.reps[rid], src,
                                              dst)
            self._xfer[key] = c
        return c

    def conversion(self, tensor: str, src: Representation | int, dst: Representation | int,
                   device: str) -> Cost:
        """The cost of converting ``tensor`` from ``src`` to ``dst`` (or their ids) on
        ``device`` (memoized)."""
        a = src if isinstance(src, int) else self.rep_id(src)
        b = dst if isinstance(dst, int) else self.rep_id(dst)
        key = (tensor, a, b, device)
        c = self._conv.get(key)
        if c is None:
            c = self.cost_model.conversion_cost(self.graph.tensor(tensor), self.reps[a],
                                                self.reps[b], device)
            self._conv[key] = c
        return c

    def corun(self, vertex: int | str, device: str, dtype: DType, busy: frozenset[str]
              ) -> float:
        """How many times longer the vertex takes on (device, dtype) while the devices
        ``busy`` compute (``CostModel.corun_slowdown``, memoized): at least 1; 1.0 for an
        empty ``busy`` and for cost models without the question."""
        if not busy:
            return 1.0
        vi = self.vertex_index[vertex] if isinstance(vertex, str) else vertex
        key = (vi, device, dtype, busy)
        f = self._corun.get(key)
        if f is None:
            fn = getattr(self.cost_model, "corun_slowdown", None)
            f = 1.0 if fn is None else float(fn(self.graph, self.vertices[vi].ops, device,
                                                dtype, busy))
            if not f >= 1.0 or not math.isfinite(f):  # NaN, inf, a speed-up: none
                f = 1.0
            self._corun[key] = f
        return f

    def wake(self, device: str) -> float:
        """Seconds a hand-off to a sleeping worker on ``device`` adds
        (``CostModel.wake_s``, memoized): 0.0 for cost models without the question."""
        w = self._wake.get(device)
        if w is None:
            fn = getattr(self.cost_model, "wake_s", None)
            w = 0.0 if fn is None else float(fn(device))
            if not w > 0.0 or not math.isfinite(w):
                w = 0.0
            self._wake[device] = w
        return w

    def min_cost_s(self, vertex: int | str) -> float:
        """The cheapest feasible cost of a vertex (raises ``Infeasible`` if none)."""
        vi = self.vertex_index[vertex] if isinstance(vertex, str) else vertex
        fa = feasible_assignments(self, vi)
        if not fa:
            raise Infeasible(f"vertex {self.vertices[vi].name!r} has no feasible assignment: "
                             + "; ".join(p.reason for p in pruned_assignments(self, vi)))
        return min(self.cost(vi, a.device, a.dtype).total_s for a in fa)

    def mean_cost_s(self, vertex: int | str) -> float:
        """The mean cost over feasible assignments (HEFT-style ranks); inf if none."""
        vi = self.vertex_index[vertex] if isinstance(vertex, str) else vertex
        fa = feasible_assignments(self, vi)
        if not fa:
            return float("inf")
        return sum(self.cost(vi, a.device, a.dtype).total_s for a in fa) / len(fa)

    def check(self, placement: Placement) -> None:
        """Raise ``InputError`` unless ``placement`` assigns exactly the problem's vertices
        to devices of the machine."""
        for name in placement:
            if name not in self.vertex_index:
                raise InputError("the placement names a vertex the graph does not have",
                                 place=f"vertex {name!r}")
        if len(placement) != len(self.vertices):
            miss = next(v.name for v in self.vertices if v.name not in placement)
            raise InputError("the placement does not assign this vertex", place=f"vertex {miss!r}")
        for name, a in placement.items():
            if a.device not in self.device_index:
                raise InputError(f"machine {self.machine.name!r} has no device {a.device!r}",
                                 place=f"vertex {name!r}")


def _kahn(position: list[int], preds: list[set[int]], names: list[str]) -> list[int]:
    """The regions in the stable topological order by ``position``; raises on a cycle."""
    out = topological_order(preds, position)
    if len(out) != len(preds):
        done = set(out)
        stuck = next(names[i] for i in range(len(preds)) if i not in done)
        raise GraphError("the partition's regions form a cycle", place=f"region {stuck!r}")
    return out


def feasible_assignments(problem: Problem, vertex: int | str) -> list[Assignment]:
    """Assignments (device, dtype) a vertex can take: the device runs every op kind of the
    vertex in that dtype, the precision restriction allows it and the cost model answers. Devices in machine order, dtypes in
    the device's order. The others are listed by ``pruned_assignments`` with the reason.

    Memoized on the problem.
    """
    vi = problem.vertex_index[vertex] if isinstance(vertex, str) else vertex
    got = problem._feasible.get(vi)
    if got is None:
        ok: list[Assignment] = []
        pruned: list[Pruned] = []
        for dev in problem.machine.devices:
            for dt in dev.dtypes:
                a = Assignment(dev.name, dt)
                if not problem.allows(vi, dt):
                    pruned.append(Pruned(a, f"the precision policy keeps this vertex out of "
                                            f"{dt.value}"))
                    continue
                try:
                    problem.cost(vi, dev.name, dt)
                except UnsupportedError as exc:
                    pruned.append(Pruned(a, str(exc)))
                else:
                    ok.append(a)
        got = tuple(ok)
        problem._feasible[vi] = got
        problem._pruned[vi] = tuple(pruned)
    return list(got)


def pruned_assignments(problem: Problem, vertex: int | str) -> list[Pruned]:
    """The assignments ``feasible_assignments`` left out, with the reason for each."""
    vi = problem.vertex_index[vertex] if isinstance(vertex, str) else vertex
    feasible_assignments(problem, vi)
    return list(problem._pruned[vi])
