"""The schedule's records: tasks, tensor copies and the ``Timeline`` of parallel arrays
they are built from, and ``Schedule``, what ``placewise.schedule.simulate.schedule``
returns (its docstring says what the tasks and copies are).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from placewise.cost.model import Cost, Representation, Term
from placewise.errors import InputError
from placewise.schedule.placement import Placement
from placewise.schedule.resources import ResourceKind, ResourceUse, core_occupancy_s

__all__ = [
    "REL_TOL",
    "Schedule",
    "Task",
    "TaskKind",
    "TensorCopy",
    "Timeline",
    "copy_lifetimes",
]

#: relative tolerance under which a time difference is float noise, not contention
REL_TOL = 1e-9


class TaskKind(Enum):
    COMPUTE = "compute"
    TRANSFER = "transfer"
    CONVERSION = "conversion"



@dataclass(frozen=True, slots=True)
class Task:
    """One scheduled task.

    ``device``: where a compute or conversion task runs, the sending end of a transfer hop
    (``dst_device`` is the receiving end). ``cost`` is the cost model's uncontended answer;
    ``terms`` are its terms plus ``Term.CONTENTION`` when shared bandwidth slowed it, so
    ``sum(terms) == end_s - start_s``. ``deps`` are the names of the tasks it waited for.
    ``nbytes``: bytes of the tensor copy a transfer moves or a conversion writes; for a
    compute task, ``Cost.memory_bytes``. ``cores``: the CPU cores a compute or conversion
    task ran on (its device's ``Device.cores``; empty for devices without cores and for
    transfers); a core shared with another device was held by this task's device alone
    from ``start_s`` to ``end_s``.
    """

    name: str
    kind: TaskKind
    resource: str
    lane: int
    device: str
    start_s: float
    end_s: float
    cost: Cost
    contention_s: float
    deps: tuple[str, ...]
    vertex: str | None = None
    tensor: str | None = None
    dst_device: str | None = None
    link: str | None = None
    src_rep: Representation | None = None
    dst_rep: Representation | None = None
    nbytes: int = 0
    cores: tuple[int, ...] = ()

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def terms(self) -> tuple[tuple[Term, float], ...]:
        if self.contention_s > 0.0:
            return (*self.cost.terms, (Term.CONTENTION, self.contention_s))
        return self.cost.terms

    def term(self, t: Term) -> float:
        return sum(v for k, v in self.terms if k is t)



@dataclass(frozen=True, slots=True)
class TensorCopy:
    """One copy of a tensor in one representation on one device, and its lifetime.

    ``made_by``: the task that writes it (``None``: a graph input, on the host from time 0);
    ``readers``: tasks that read it (compute consumers, outgoing transfers, conversions);
    ``final``: a graph output's delivered copy, kept until the end of the run.
    ``alloc_s``: when its writer starts (0 for graph inputs); ``ready_s``: when its writer
    ends; ``free_s``: the end of its last reader, the makespan if ``final``, ``ready_s``
    if nobody reads it.
    """

    tensor: str
    rep: Representation
    device: str
    nbytes: int
    made_by: str | None
    readers: tuple[str, ...]
    final: bool
    alloc_s: float
    ready_s: float
    free_s: float


class Timeline:
    """The schedule as parallel arrays: the fast view for search-time consumers (memory,
    bounds, throughput). Task ids are creation order, which is topological; copy ids index
    the ``c_*`` arrays; resource ids the ``res_*`` arrays; rep ids ``reps``. Read-only by
    convention: ``Schedule`` builds ``Task``/``TensorCopy`` records from it on demand."""

    __slots__ = (
        "c_alloc",
        "c_bytes",
        "c_device",
        "c_final",
        "c_free",
        "c_made",
        "c_ready",
        "c_rid",
        "c_tensor",
        "cores",
        "cost",
        "device",
        "dst_device",
        "dst_rid",
        "dur",
        "end",
        "kind",
        "lane",
        "link",
        "name",
        "nbytes",
        "part",
        "preds",
        "read_copy",
        "read_task",
        "reps",
        "res",
        "res_bw",
        "res_device",
        "res_kind",
        "res_lanes",
        "res_link",
        "res_name",
        "src_rid",
        "start",
        "tensor",
        "vertex",
    )

    def __init__(self, reps: list[Representation]) -> None:
        self.reps = reps
        self.res_name: list[str] = []
        self.res_kind: list[ResourceKind] = []
        self.res_lanes: list[int] = []
        self.res_device: list[str | None] = []
        self.res_link: list[str | None] = []
        self.res_bw: list[float] = []
        self.name: list[str] = []
        self.kind: list[TaskKind] = []
        self.res: list[int] = []
        self.dur: list[float] = []
        self.cost: list[Cost] = []
        self.preds: list[list[int]] = []
        self.part: list[tuple[tuple[int, float], ...]] = []  # (shared resource id, bytes)
        self.vertex: list[str | None] = []
        self.tensor: list[str | None] = []
        self.device: list[str] = []
        self.dst_device: list[str | None] = []
        self.link: list[str | None] = []
        self.src_rid: list[int] = []
        self.dst_rid: list[int] = []
        self.nbytes: list[int] = []
        self.cores: list[tuple[int, ...]] = []  # cores a task holds (its device's)
        self.start: list[float] = []
        self.end: list[float] = []
        self.lane: list[int] = []
        self.c_tensor: list[str] = []
        self.c_rid: list[int] = []
        self.c_device: list[str] = []
        self.c_bytes: list[int] = []
        self.c_made: list[int] = []
        self.read_copy: list[int] = []  # (read_copy[k], read_task[k]): task reads copy
        self.read_task: list[int] = []
        self.c_final: list[bool] = []
        self.c_alloc: list[float] = []
        self.c_ready: list[float] = []
        self.c_free: list[float] = []

    def task_record(self, i: int) -> Task:
        s, e, d = self.start[i], self.end[i], self.dur[i]
        extra = e - s - d
        if extra <= REL_TOL * d or extra <= 0.0:
            extra = 0.0
        names = self.name
        src = self.src_rid[i]
        dst = self.dst_rid[i]
        return Task(names[i], self.kind[i], self.res_name[self.res[i]], self.lane[i],
                    self.device[i], s, e, self.cost[i], extra,
                    tuple(names[q] for q in self.preds[i]), self.vertex[i], self.tensor[i],
                    self.dst_device[i], self.link[i], self.reps[src] if src >= 0 else None,
                    self.reps[dst] if dst >= 0 else None, self.nbytes[i], self.cores[i])

    def readers(self) -> list[list[int]]:
        """Copy id -> the task ids reading it, in creation order."""
        out: list[list[int]] = [[] for _ in self.c_tensor]
        for c, t in zip(self.read_copy, self.read_task, strict=True):
            out[c].append(t)
        return out

    def copy_record(self, c: int, readers: list[int]) -> TensorCopy:
        names = self.name
        made = self.c_made[c]
        return TensorCopy(self.c_tensor[c], self.reps[self.c_rid[c]], self.c_device[c],
                          self.c_bytes[c], names[made] if made >= 0 else None,
                          tuple(names[r] for r in readers), self.c_final[c],
                          self.c_alloc[c], self.c_ready[c], self.c_free[c])


@dataclass(frozen=True, slots=True, eq=False)
class Schedule:
    """The timeline of one run of the graph under a placement.

    ``tasks`` (sorted by start time, then creation order) and ``copies`` are built from
    ``timeline`` on first access. ``exact`` is False only when part of the model was
    switched off (``notes`` says what); ``makespan_s`` is then a lower bound of the model's.
    """

    placement: Placement
    makespan_s: float
    exact: bool
    resources: tuple[ResourceUse, ...]
    host: str
    timeline: Timeline = field(repr=False)
    notes: tuple[str, ...] = ()
    _tasks: tuple[Task, ...] | None = field(init=False, default=None, repr=False)
    _copies: tuple[TensorCopy, ...] | None = field(init=False, default=None, repr=False)
    _index: dict[str, int] | None = field(init=False, default=None, repr=False)

    @classmethod
    def from_records(cls, placement: Placement, tasks: Sequence[Task],
                     copies: Sequence[TensorCopy], resources: Sequence[ResourceUse],
                     host: str, *, makespan_s: float | None = None, exact: bool = True,
                     notes: Sequence[str] = ()) -> Schedule:
        """Rebuild a schedule from its records (e.g. a plan file), so that memory, bounds
        and throughput can be recomputed without rescheduling. Shared-resource participation
        is not in the records; it is only needed while simulating.

        Raises ``InputError`` when the records do not hold together (a dependency, a
        resource or a copy's task that does not exist, or a dependency cycle).
        """
        order = _task_order(tasks)
        tl = _timeline_of(order, copies, resources)
        span = makespan_s if makespan_s is not None else max(tl.end, default=0.0)
        return cls(placement, span, exact, tuple(resources), host, tl, tuple(notes))

    @property
    def tasks(self) -> tuple[Task, ...]:
        if self._tasks is None:
            tl = self.timeline
            st = tl.start
            order = sorted(range(len(tl.name)), key=lambda i: (st[i], i))
            tasks = tuple(tl.task_record(i) for i in order)
            object.__setattr__(self, "_tasks", tasks)
            object.__setattr__(self, "_index", {t.name: k for k, t in enumerate(tasks)})
            return tasks
        return self._tasks

    @property
    def copies(self) -> tuple[TensorCopy, ...]:
        if self._copies is None:
            tl = self.timeline
            rd = tl.readers()
            object.__setattr__(self, "_copies",
                               tuple(tl.copy_record(c, rd[c]) for c in range(len(tl.c_tensor))))
        assert self._copies is not None
        return self._copies

    def task(self, name: str) -> Task:
        tasks = self.tasks
        assert self._index is not None
        try:
            return tasks[self._index[name]]
        except KeyError:
            raise KeyError(f"the schedule has no task {name!r}") from None

    def has_task(self, name: str) -> bool:
        self.tasks  # noqa: B018  (builds the index)
        assert self._index is not None
        return name in self._index

    def resource(self, name: str) -> ResourceUse:
        for r in self.resources:
            if r.name == name:
                return r
        raise KeyError(f"the schedule has no resource {name!r}")

    @property
    def busy_s(self) -> dict[str, float]:
        """Resource name -> busy seconds (see ``ResourceUse``)."""
        return {r.name: r.busy_s for r in self.resources}

    def tasks_of(self, kind: TaskKind) -> list[Task]:
        return [t for t in self.tasks if t.kind is kind]

    def core_occupancy_s(self) -> dict[str, float]:
        """``core:N`` -> how long core ``N`` must be held per run, for every core that tasks
        of two or more devices ran on: the sum over those devices of their tasks'
        uncontended work on it divided by the device's lanes (the core is held by one
        device at a time; see the module docstring). Empty when no core is shared."""
        return core_occupancy_s(self.timeline)

    def critical_path(self) -> list[Task]:
        """The chain of tasks that ends last, walked back: from each task to the dependency
        that finished when it started or, if it waited for its lane, to the task that held
        the lane, or, if it waited for a core, to the other device's task that held it.
        The first task of the chain starts at 0 or after an unexplained gap."""
        tasks = self.tasks
        if not tasks:
            return []
        tol = max(self.makespan_s, 1e-30) * 1e-9
        last = max(range(len(tasks)), key=lambda i: (tasks[i].end_s, i))
        # per lane, and per (core, device), the tasks by end time: the task that held a
        # lane or core when ``cur`` started is found by bisection, not by a scan
        on_lane: dict[tuple[str, int], list[Task]] = {}
        on_core: dict[int, dict[str, list[Task]]] = {}
        for t in tasks:
            on_lane.setdefault((t.resource, t.lane), []).append(t)
            for c in t.cores:
                on_core.setdefault(c, {}).setdefault(t.device, []).append(t)
        ends: dict[int, list[float]] = {}

        def latest(group: list[Task], before: float, seen: set[str]) -> Task | None:
            """The task of ``group`` ending last at or before ``before``, not in ``seen``."""
            key = id(group)
            if key not in ends:
                group.sort(key=lambda t: t.end_s)
                ends[key] = [t.end_s for t in group]
            k = bisect_right(ends[key], before)
            best: Task | None = None
            while k > 0:  # of equal ends, the one that started first (as ``max`` picks)
                k -= 1
                t = group[k]
                if best is not None and t.end_s != best.end_s:
                    break
                if t.name not in seen:
                    best = t
            return best

        exclusive = {r.name for r in self.resources if r.exclusive}
        chain = [tasks[last]]
        seen = {tasks[last].name}
        while True:
            cur = chain[-1]
            nxt: Task | None = None
            if cur.deps:
                dep = max((self.task(d) for d in cur.deps), key=lambda t: t.end_s)
                if dep.end_s >= cur.start_s - tol:
                    nxt = dep
            if nxt is None and cur.resource in exclusive:
                cand = latest(on_lane[(cur.resource, cur.lane)], cur.start_s + tol, seen)
                if cand is not None and cand.end_s >= cur.start_s - tol and cand.end_s > 0:
                    nxt = cand
            if nxt is None and cur.cores:  # waited for a core another device held
                held = [t for c in cur.cores for dev, group in on_core[c].items()
                        if dev != cur.device
                        for t in (latest(group, cur.start_s + tol, seen),) if t is not None]
                if held:
                    cand = max(held, key=lambda t: t.end_s)
                    if cand.end_s >= cur.start_s - tol and cand.end_s > 0:
                        nxt = cand
            if nxt is None or nxt.name in seen:
                break
            chain.append(nxt)
            seen.add(nxt.name)
        chain.reverse()
        return chain



def _task_order(tasks: Sequence[Task]) -> list[Task]:
    """``tasks`` in a topological order: by start time, then as given, dependencies first.
    Raises ``InputError`` on a repeated name, an unknown dependency or a cycle."""
    by_name = {t.name: t for t in tasks}
    if len(by_name) != len(tasks):
        raise InputError("two tasks have the same name", place="schedule")
    pos = {t.name: i for i, t in enumerate(tasks)}
    order: list[Task] = []
    state: dict[str, int] = {}
    for root in sorted(by_name, key=lambda n: (by_name[n].start_s, pos[n])):
        stack = [(root, False)]
        while stack:
            name, done = stack.pop()
            if done:
                state[name] = 2
                order.append(by_name[name])
                continue
            if state.get(name) == 2:
                continue
            if state.get(name) == 1:
                raise InputError("the tasks' dependencies form a cycle", place=f"task {name!r}")
            state[name] = 1
            stack.append((name, True))
            for d in reversed(by_name[name].deps):
                if d not in by_name:
                    raise InputError(f"depends on unknown task {d!r}", place=f"task {name!r}")
                if state.get(d) != 2:
                    stack.append((d, False))
    return order


def _timeline_of(order: Sequence[Task], copies: Sequence[TensorCopy],
                 resources: Sequence[ResourceUse]) -> Timeline:
    """The timeline of tasks given in a topological order, their copies and resources."""
    tid = {t.name: i for i, t in enumerate(order)}
    reps: list[Representation] = []
    rep_index: dict[Representation, int] = {}

    def rid(rep: Representation | None) -> int:
        if rep is None:
            return -1
        if rep not in rep_index:
            rep_index[rep] = len(reps)
            reps.append(rep)
        return rep_index[rep]

    tl = Timeline(reps)
    res_id: dict[str, int] = {}
    for r in resources:
        res_id[r.name] = len(tl.res_name)
        tl.res_name.append(r.name)
        tl.res_kind.append(r.kind)
        tl.res_lanes.append(r.lanes)
        tl.res_device.append(r.device)
        tl.res_link.append(r.link)
        tl.res_bw.append(r.bandwidth_bytes_per_s)
    for t in order:
        if t.resource not in res_id:
            raise InputError(f"runs on unknown resource {t.resource!r}",
                             place=f"task {t.name!r}")
        tl.name.append(t.name)
        tl.kind.append(t.kind)
        tl.res.append(res_id[t.resource])
        tl.dur.append(t.cost.total_s)
        tl.cost.append(t.cost)
        tl.preds.append([tid[d] for d in t.deps])
        tl.part.append(())
        tl.vertex.append(t.vertex)
        tl.tensor.append(t.tensor)
        tl.device.append(t.device)
        tl.dst_device.append(t.dst_device)
        tl.link.append(t.link)
        tl.src_rid.append(rid(t.src_rep))
        tl.dst_rid.append(rid(t.dst_rep))
        tl.nbytes.append(t.nbytes)
        tl.cores.append(tuple(t.cores))
        tl.start.append(t.start_s)
        tl.end.append(t.end_s)
        tl.lane.append(t.lane)
    for ci, c in enumerate(copies):
        for ref in (c.made_by, *c.readers):
            if ref is not None and ref not in tid:
                raise InputError(f"copy of {c.tensor!r} on {c.device!r} names unknown "
                                 f"task {ref!r}", place="schedule copies")
        tl.c_tensor.append(c.tensor)
        tl.c_rid.append(rid(c.rep))
        tl.c_device.append(c.device)
        tl.c_bytes.append(c.nbytes)
        tl.c_made.append(tid[c.made_by] if c.made_by is not None else -1)
        tl.c_final.append(c.final)
        tl.c_alloc.append(c.alloc_s)
        tl.c_ready.append(c.ready_s)
        tl.c_free.append(c.free_s)
        for reader in c.readers:
            tl.read_copy.append(ci)
            tl.read_task.append(tid[reader])
    return tl


def copy_lifetimes(tl: Timeline, makespan_s: float) -> None:
    """Fill ``tl.c_alloc``, ``c_ready`` and ``c_free`` from a simulated timeline's task
    times (see ``TensorCopy``)."""
    start, end = tl.start, tl.end
    nc = len(tl.c_tensor)
    alloc = [0.0] * nc
    ready = [0.0] * nc
    c_made = tl.c_made
    for c in range(nc):
        made = c_made[c]
        if made >= 0:
            alloc[c] = start[made]
            ready[c] = end[made]
    free = ready[:]
    for c, r in zip(tl.read_copy, tl.read_task, strict=True):
        e = end[r]
        if e > free[c]:
            free[c] = e
    for c in range(nc):
        if tl.c_final[c]:
            free[c] = makespan_s
    tl.c_alloc, tl.c_ready, tl.c_free = alloc, ready, free
