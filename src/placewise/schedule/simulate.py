"""The list scheduler: a placement becomes compute, transfer and conversion tasks on resources.

``schedule(problem, placement)`` is the one evaluator of *when* things happen. It is an
event-driven simulation that is exact for the model below (no approximation is made unless
``contention=False`` is asked for, and then the result says ``exact=False``).

**Tasks.** Every vertex is one *compute* task named after the vertex. A tensor consumed on
another device, or in another representation, is obtained through *conversion* and
*transfer* tasks, each created once and reused by every consumer that needs the same copy:

- transfers: one task per hop of ``machine.route(src, dst)``, named
  ``xfer:{tensor}:{a}->{b}`` (``a``/``b`` are the hop's ends; ``Task.link`` names the
  link), with ``:{dtype}`` appended when the tensor travels in another representation than
  the one it was produced in. A copy that reached a device (including an intermediate hop)
  is reused by every later need on that device; so a tensor sent once is never sent twice.
- conversions: ``conv:{tensor}:{from}->{to}@{device}``. Policy: a conversion runs on the
  producer's device *before* sending when the target representation is smaller (fewer bytes
  on the link), else on the consumer's device *after* receiving; same-device consumers
  convert locally. One conversion per (tensor, target representation, device).
- graph inputs are on the host at time 0 (no task); graph outputs are delivered to the host
  in their declared representation (``Problem.outputs_to_host``), weights are resident.

**Resources.** Each device's compute lanes (``Device.lanes``, or ``lanes=`` override) run
compute and conversion tasks, one task per lane at a time. Each link is an exclusive
resource (``Link.resource_name``; a duplex link has one resource per direction, suffixed
``:fwd`` for ``endpoints[0] -> endpoints[1]`` and ``:rev``). A link whose ``resource`` names
a *shared resource* (unified memory, e.g. Jetson) is not exclusive: its transfers run
concurrently and share that resource's bandwidth.

**Cores.** Devices pinned to CPU cores (``Device.cores``, e.g. the probed ``local``
machine's ``cpu0`` on core 0, ``cpu1`` on core 1 and ``cpu01`` on both) run on those cores
only. A core that belongs to two or more devices is an exclusive resource ``core:N`` held
by *one device at a time*: a compute or conversion task starts only when its device has a
free lane and every shared core of its device is free or already held by that device; it
holds them until it ends (the core is released when the device's last task on it ends).
So ``cpu01`` never computes while ``cpu0`` or ``cpu1`` does, while ``cpu0`` and ``cpu1``
run side by side. ``Task.cores`` records the cores a task ran on (every core of its device,
for devices that have ``cores``; empty otherwise). Devices without ``cores`` (every preset)
are scheduled exactly as before: each its own lanes, nothing else.

**Shared resources** (``Machine.shared_resources``, e.g. a memory controller) are
bandwidth shared by processor sharing. A task draws memory bandwidth uniformly over its
uncontended duration ``T``: demand ``d = bytes / T`` on every shared resource it touches
(compute and conversion tasks: ``Cost.memory_bytes`` on the shared resources of their
device — ``Device.resources`` and the main tier's ``shared_with``; transfers: the bytes
moved, on the link's shared resource and on those of both ends). ``T`` already includes
the task's own bandwidth limit, so a task is never slowed by its own traffic: a task alone
on a shared resource runs at full speed even when ``d`` exceeds the bandwidth ``C`` (its
bytes then come partly from caches: weights that stay in L2/L3, small activations).
Whenever the set of active tasks on a shared resource changes, the capacity
``C_eff = max(C, largest demand among the active tasks)`` (a task that draws ``d > C``
alone shows the resource delivers at least ``d``) is divided max-min fairly among them
(water-filling, each task capped at its demand); a task then progresses at
``min over its shared resources (allocation / demand)`` of its full speed. The added time
is the task's ``Term.CONTENTION``. Two memory-bound tasks demanding ``b <= C`` each on a
controller of bandwidth ``C < 2b`` thus each slow down by ``2b / C``; two tasks demanding
``2C`` each share ``C_eff = 2C`` and each slow down by 2; a lone task never slows down.

**Co-run slowdown.** A compute task on device ``D`` may run slower while another device of
the plan computes on other cores (calibrated: ``CostModel.corun_slowdown``, e.g. the
measured ratios of ``placewise.calibrate.corun``; 1.0 from the roofline model). The
devices that can co-run with ``D`` are the plan's other devices whose cores are disjoint
from ``D``'s (devices sharing a core never compute at once, see **Cores**). Whenever the
set ``B`` of those devices with a compute or conversion task running changes, a running
compute task of ``D`` progresses at ``1 / s`` of its full speed, ``s =
corun_slowdown(its region, D, its dtype, B) >= 1`` (``s = 1`` for an empty ``B``). So
only the part of a task that overlaps compute elsewhere is stretched: a task of duration
``T`` that another device keeps busy throughout takes ``s T``; one overlapped for its first
``u`` seconds (``u < s T``) takes ``T + u (1 - 1 / s)``. With shared-bandwidth contention
too, a task runs at the *slower* of the two speeds, never their product (a measured co-run
slowdown already includes the memory traffic of the two). The added time is the task's
``Term.CONTENTION``. Conversions and transfers are not slowed (they keep devices busy).
Without any slowdown above 1 the schedule is exactly the one without this rule.

**Wake-ups.** The executor (``runtime.executor``) runs the host's worker, and those of
the CPU devices sharing a core with the host, on the client's own thread, and every other
device's worker in a process of its own (``worker_threads``). A worker may poll for
messages only where no device of another thread uses one of its cores, and a thread polls
when one of its workers may; otherwise it sleeps while it has nothing to run
(``sleeping_threads``: on the probed ``local`` machine, ``cpu1``'s worker in a plan that
also uses ``cpu01``). A hand-off to a sleeping thread from another thread costs a wake-up
(``CostModel.wake_s`` of the receiving device: measured, 0.0 from the roofline model;
``transfer_cost`` answers for a polling receiver). A transfer to it whose data arrives
while none of the thread's devices has a compute or conversion task running holds its link
lane ``wake_s`` longer, added to its cost's ``Term.SYNC`` (so ``sum(terms) == end_s -
start_s`` still holds); one that arrives while the thread computes finds it awake and pays
nothing. Devices without cores (every preset) never sleep here.

**Policy.** Dynamic list scheduling: when a lane frees or a task becomes ready, the ready
task with the highest upward rank (its duration plus the longest chain of durations after
it, transfers included) starts on the lowest free lane; ties go to the task created first.
Tasks of devices that share cores are taken together, highest rank first: a task whose
cores are held by another device *reserves* its cores until they are expected to be free
(the holders' current expected ends), and a lower-ranked task may take a reserved core only
if it is expected to end by then (backfilling). A task takes all its cores at once (no
hold-and-wait, so no deadlock), and lower-ranked tasks never keep a waiting task from its
cores once the holders end (no starvation of a task on many cores by tasks on few: only
higher-ranked tasks go first). The same inputs always give the same schedule.

**Release times.** A problem with release times (``Problem.released``: vertex -> seconds)
holds each named vertex's compute task until its release time even when its inputs are
there and a lane is free; everything else is scheduled as above. Giving the start times
of a schedule made elsewhere (HEFT's insertion schedule, ``placewise.search.heft``)
replays it: where that schedule is valid under this model, every task starts exactly at
its given time; where it is not (a link or lane it did not account for is busy), tasks
start later, never earlier, and the result is still a valid schedule of this model. The
schedule's ``notes`` say that release times were applied.

**Output.** A ``Schedule``: ``makespan_s``, ``exact``, per-resource use, and the tasks
(``Task``: name, kind, resource, lane, device, start/end, cost terms plus contention,
dependencies, cores) and tensor copies (``TensorCopy``: where each tensor lives, in which
representation, written and read by which tasks) — both built on first access from the
``Timeline``, the parallel arrays the simulation fills and that memory, bounds and
throughput read directly (search never pays for the records). ``Schedule.from_records``
rebuilds a schedule from its records (a plan file).

Cost: one pass to build the task graph (memoized costs), one heap-driven event loop;
about 0.2-0.3 s of CPU for a 10,000-op graph (see BENCHMARKS.md).

>>> from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
>>> from placewise.schedule.placement import Assignment, Placement, Problem
>>> from placewise.schedule.testing import ToyCostModel, toy_machine
>>> from placewise.units import DType
>>> x = Tensor("x", (1000,), DType.FP32, role=Role.INPUT)
>>> h = Tensor("h", (1000,), DType.FP32)
>>> y = Tensor("y", (1000,), DType.FP32, role=Role.OUTPUT)
>>> g = Graph.build("g", [x, h, y], [Op("a", OpKind.RELU, ("x",), ("h",)),
...                                  Op("b", OpKind.RELU, ("h",), ("y",))])
>>> m = toy_machine()
>>> prob = Problem(g, None, m, ToyCostModel(m))
>>> s = schedule(prob, Placement.of({"a": Assignment("cpu", DType.FP32),
...                                  "b": Assignment("gpu", DType.FP32)}))
>>> [t.name for t in s.tasks]
['a', 'xfer:h:cpu->gpu', 'b', 'xfer:y:gpu->cpu']
>>> s.exact, s.makespan_s > 0
(True, True)
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from placewise.cost.model import Cost, Representation, Term
from placewise.errors import InputError
from placewise.hardware.spec import Device, DeviceKind
from placewise.schedule.placement import Assignment, Placement, Problem
from placewise.units import DType

__all__ = [
    "HasDevices",
    "ResourceKind",
    "ResourceUse",
    "Schedule",
    "Task",
    "TaskKind",
    "TensorCopy",
    "Timeline",
    "core_name",
    "core_occupancy_s",
    "may_poll",
    "schedule",
    "sleeping_threads",
    "worker_threads",
]

# relative tolerance under which a time difference is float noise, not contention
_REL_TOL = 1e-9


class TaskKind(Enum):
    COMPUTE = "compute"
    TRANSFER = "transfer"
    CONVERSION = "conversion"


class ResourceKind(Enum):
    """``COMPUTE`` and ``LINK`` are exclusive (one task per lane at a time); ``SHARED`` is
    bandwidth divided among concurrent tasks (its lanes only keep trace tracks apart)."""

    COMPUTE = "compute"
    LINK = "link"
    SHARED = "shared"


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
class ResourceUse:
    """A resource the schedule used.

    ``busy_s``: summed task durations on it (contention included); ``work_s``: summed
    uncontended durations. For a ``SHARED`` resource (``lanes`` 0: unbounded) they are
    what its bandwidth ``C`` implies: ``work_s`` is its *occupancy* per run, the sum over
    its tasks of ``min(bytes / C, T)`` (each task's bytes at the full bandwidth, never
    longer than the task's uncontended duration ``T``: a task cannot occupy the resource
    longer than it runs); ``busy_s`` is the least time in which it can serve the bytes of
    its tasks of positive duration under the model, ``bytes / max(C, largest demand)``
    (see the module docstring: the active tasks never share more than that), a valid lower
    bound of the makespan.
    """

    name: str
    kind: ResourceKind
    lanes: int
    busy_s: float
    work_s: float
    tasks: int
    device: str | None = None
    link: str | None = None
    bandwidth_bytes_per_s: float = 0.0
    bytes: int = 0

    @property
    def exclusive(self) -> bool:
        return self.kind is not ResourceKind.SHARED


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
        if extra <= _REL_TOL * d or extra <= 0.0:
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
        by_name = {t.name: t for t in tasks}
        if len(by_name) != len(tasks):
            raise InputError("two tasks have the same name", place="schedule")
        # task ids in a topological order: by start time, then as given, dependencies first
        pos = {t.name: i for i, t in enumerate(tasks)}
        order: list[str] = []
        state: dict[str, int] = {}
        for root in sorted(by_name, key=lambda n: (by_name[n].start_s, pos[n])):
            stack = [(root, False)]
            while stack:
                name, done = stack.pop()
                if done:
                    state[name] = 2
                    order.append(name)
                    continue
                if state.get(name) == 2:
                    continue
                if state.get(name) == 1:
                    raise InputError("the tasks' dependencies form a cycle",
                                     place=f"task {name!r}")
                state[name] = 1
                stack.append((name, True))
                for d in reversed(by_name[name].deps):
                    if d not in by_name:
                        raise InputError(f"depends on unknown task {d!r}",
                                         place=f"task {name!r}")
                    if state.get(d) != 2:
                        stack.append((d, False))
        tid = {n: i for i, n in enumerate(order)}
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
        for n in order:
            t = by_name[n]
            if t.resource not in res_id:
                raise InputError(f"runs on unknown resource {t.resource!r}", place=f"task {n!r}")
            tl.name.append(n)
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


def core_name(core: int) -> str:
    """The resource name of CPU core ``core`` (``core:N``).

    >>> core_name(3)
    'core:3'
    """
    return f"core:{core}"


def core_occupancy_s(tl: Timeline) -> dict[str, float]:
    """See ``Schedule.core_occupancy_s``; from a timeline (also one rebuilt from records)."""
    devs: dict[int, dict[str, None]] = {}
    work: dict[int, float] = {}
    cores, res, lanes, dur, device = tl.cores, tl.res, tl.res_lanes, tl.dur, tl.device
    for i, cs in enumerate(cores):
        if not cs:
            continue
        share = dur[i] / max(1, lanes[res[i]])
        for c in cs:
            devs.setdefault(c, {})[device[i]] = None
            work[c] = work.get(c, 0.0) + share
    return {core_name(c): work[c] for c in sorted(work) if len(devs[c]) > 1}


class HasDevices(Protocol):
    """A machine, or an executable program: anything that names its devices."""

    def device(self, name: str) -> Device: ...


def worker_threads(machine: HasDevices, devices: Iterable[str], host: str) -> dict[str, str]:
    """Device -> the thread its worker runs on when the executor runs a partitioned plan
    of ``devices`` (``runtime.executor``): the host, and the CPU devices sharing a core
    with it, on the client's own thread (named after the host); every other device on its
    own (named after itself).

    >>> from placewise.hardware.load import load_machine
    >>> worker_threads(load_machine("h100-sxm-server"), ["gpu0"], "cpu")
    {'cpu': 'cpu', 'gpu0': 'gpu0'}
    """
    names = list(dict.fromkeys([host, *devices]))
    home = set(machine.device(host).cores or ())
    out: dict[str, str] = {}
    for d in names:
        dev = machine.device(d)
        together = d == host or (
            dev.kind is DeviceKind.CPU and (dev.backend or "").lower() != "cuda"
            and bool(home & set(dev.cores or ())))
        out[d] = host if together else d
    return out


def may_poll(machine: HasDevices, threads: Mapping[str, str], device: str) -> bool:
    """Whether ``device``'s worker may poll (spin) instead of sleeping when it has nothing
    to run: only where no device of another thread (``threads``: device -> thread,
    ``worker_threads``) uses one of its cores."""
    mine = set(machine.device(device).cores or ())
    th = threads[device]
    return not any(mine & set(machine.device(e).cores or ())
                   for e in threads if threads[e] != th)


def sleeping_threads(machine: HasDevices, threads: Mapping[str, str]) -> frozenset[str]:
    """The threads of ``threads`` (device -> thread, ``worker_threads``) that sleep when
    they have nothing to run: a thread polls when one of its workers may (``may_poll``)."""
    by: dict[str, list[str]] = {}
    for d, th in threads.items():
        by.setdefault(th, []).append(d)
    return frozenset(th for th, ds in by.items()
                     if not any(may_poll(machine, threads, d) for d in ds))


# ---- building the task graph ----------------------------------------------------------------
class _Build:
    """Builds the task graph of one placement into a ``Timeline`` (tasks in creation order,
    which is topological)."""

    def __init__(self, problem: Problem, placement: Placement,
                 lanes: Mapping[str, int] | None) -> None:
        self.p = problem
        self.pl = placement
        m = problem.machine
        self.tl = Timeline(problem.reps)
        self.res_index: dict[str, int] = {}
        for d in m.devices:
            n = d.lanes
            if lanes is not None and d.name in lanes:
                n = int(lanes[d.name])
                if n < 1:
                    raise InputError(f"lanes must be >= 1, got {n}", place=f"device {d.name!r}")
            self._add_res(d.name, ResourceKind.COMPUTE, n, device=d.name)
        shared = {r.name for r in m.shared_resources}
        for r in m.shared_resources:
            self._add_res(r.name, ResourceKind.SHARED, 0, bw=r.bandwidth_bytes_per_s)
        self.dev_res = {d.name: self.res_index[d.name] for d in m.devices}
        # cores: what each device's tasks hold, and which of them another device shares
        self.dev_cores: dict[str, tuple[int, ...]] = {
            d.name: tuple(sorted(set(d.cores))) for d in m.devices if d.cores}
        users: dict[int, int] = {}
        for cs in self.dev_cores.values():
            for c in cs:
                users[c] = users.get(c, 0) + 1
        # resource id -> the shared cores its tasks must hold (empty: not gated)
        self.res_gate: list[tuple[int, ...]] = [() for _ in self.tl.res_name]
        for dn, cs in self.dev_cores.items():
            self.res_gate[self.dev_res[dn]] = tuple(c for c in cs if users[c] > 1)
        self.dev_ctrl: dict[str, tuple[int, ...]] = {}
        for d in m.devices:
            names = [*d.resources]
            if d.main_memory.shared_with:
                names.append(d.main_memory.shared_with)
            self.dev_ctrl[d.name] = tuple(self.res_index[n] for n in dict.fromkeys(names)
                                          if n in shared)
        # (link, sending end) -> (resource id, shared resources the link itself occupies)
        self.link_res: dict[tuple[str, str], tuple[int, tuple[int, ...]]] = {}
        for link in m.links:
            a, b = link.endpoints
            if link.resource is not None and link.resource in shared:
                ri = self.res_index[link.resource]
                self.link_res[(link.name, a)] = (ri, (ri,))
                self.link_res[(link.name, b)] = (ri, (ri,))
                continue
            base = link.resource_name
            if link.duplex:
                for src, suffix in ((a, ":fwd"), (b, ":rev")):
                    self.link_res[(link.name, src)] = (
                        self._get_res(base + suffix, link.name), ())
            else:
                ri = self._get_res(base, link.name)
                self.link_res[(link.name, a)] = (ri, ())
                self.link_res[(link.name, b)] = (ri, ())
        self.copy_key: dict[tuple[str, str, int], int] = {}
        self.src_copy: dict[str, int] = {}
        self.bits = problem.rep_bits
        self.numel = problem.numel

    def _add_res(self, name: str, kind: ResourceKind, lanes: int, *, device: str | None = None,
                 link: str | None = None, bw: float = 0.0) -> int:
        tl = self.tl
        if name in self.res_index:
            raise InputError(f"resource name {name!r} is used twice (device, link or shared "
                             f"resource names collide)", place=f"resource {name!r}")
        ri = len(tl.res_name)
        self.res_index[name] = ri
        tl.res_name.append(name)
        tl.res_kind.append(kind)
        tl.res_lanes.append(lanes)
        tl.res_device.append(device)
        tl.res_link.append(link)
        tl.res_bw.append(bw)
        return ri

    def _get_res(self, name: str, link: str) -> int:
        ri = self.res_index.get(name)
        if ri is None:
            return self._add_res(name, ResourceKind.LINK, 1, link=link)
        if self.tl.res_kind[ri] is not ResourceKind.LINK:
            raise InputError(f"resource name {name!r} is used by a link and by a device",
                             place=f"link {link!r}")
        return ri

    def _task(self, name: str, kind: TaskKind, res: int, cost: Cost, preds: list[int],
              device: str, part: tuple[tuple[int, float], ...], vertex: str | None,
              tensor: str | None, dst_device: str | None, link: str | None, src_rid: int,
              dst_rid: int, nbytes: int) -> int:
        tl = self.tl
        ti = len(tl.name)
        tl.name.append(name)
        tl.kind.append(kind)
        tl.res.append(res)
        tl.dur.append(cost.total_s)
        tl.cost.append(cost)
        tl.preds.append(preds)
        tl.part.append(part)
        tl.vertex.append(vertex)
        tl.tensor.append(tensor)
        tl.device.append(device)
        tl.dst_device.append(dst_device)
        tl.link.append(link)
        tl.src_rid.append(src_rid)
        tl.dst_rid.append(dst_rid)
        tl.nbytes.append(nbytes)
        tl.cores.append(self.dev_cores.get(device, ()) if kind is not TaskKind.TRANSFER
                        else ())
        return ti

    def _copy(self, tensor: str, device: str, rid: int, made_by: int) -> int:
        tl = self.tl
        ci = len(tl.c_tensor)
        self.copy_key[(tensor, device, rid)] = ci
        tl.c_tensor.append(tensor)
        tl.c_rid.append(rid)
        tl.c_device.append(device)
        tl.c_bytes.append((self.numel[tensor] * self.bits[rid] + 7) // 8)
        tl.c_made.append(made_by)
        tl.c_final.append(False)
        return ci

    def _label(self, tensor: str, rid: int) -> str:
        rep = self.p.reps[rid]
        natural = self.p.reps[self.p.natural_rid[tensor]]
        return rep.dtype.value if rep.layout is natural.layout else str(rep)

    # -- obtaining a copy of a tensor on a device, in a representation --
    def _source(self, tensor: str) -> int:
        ci = self.src_copy.get(tensor)
        if ci is None:  # a graph input: on the host from time 0
            ci = self._copy(tensor, self.p.host, self.p.natural_rid[tensor], -1)
            self.src_copy[tensor] = ci
        return ci

    def get_copy(self, tensor: str, device: str, rid: int) -> int:
        ci = self.copy_key.get((tensor, device, rid))
        if ci is not None:
            return ci
        tl = self.tl
        src = self._source(tensor)
        d0, r0 = tl.c_device[src], tl.c_rid[src]
        if rid == r0:
            return self._walk(tensor, src, device, rid)
        if device == d0 or (self.numel[tensor] * self.bits[rid] + 7) // 8 < tl.c_bytes[src]:
            return self._walk(tensor, self._convert(tensor, src, rid, d0), device, rid)
        return self._convert(tensor, self.get_copy(tensor, device, r0), rid, device)

    def _convert(self, tensor: str, from_ci: int, rid: int, device: str) -> int:
        ci = self.copy_key.get((tensor, device, rid))
        if ci is not None:
            return ci
        tl = self.tl
        r_from = tl.c_rid[from_ci]
        cost = self.p.conversion(tensor, r_from, rid, device)
        made = tl.c_made[from_ci]
        mem = cost.memory_bytes
        part = tuple((c, float(mem)) for c in self.dev_ctrl[device]) if mem > 0 else ()
        ti = self._task(
            f"conv:{tensor}:{self._label(tensor, r_from)}->{self._label(tensor, rid)}@{device}",
            TaskKind.CONVERSION, self.dev_res[device], cost, [made] if made >= 0 else [],
            device, part, None, tensor, None, None, r_from, rid,
            (self.numel[tensor] * self.bits[rid] + 7) // 8)
        tl.read_copy.append(from_ci)
        tl.read_task.append(ti)
        return self._copy(tensor, device, rid, ti)

    def _walk(self, tensor: str, from_ci: int, dst: str, rid: int) -> int:
        tl = self.tl
        cur = from_ci
        a = tl.c_device[from_ci]
        if a == dst:
            return cur
        suffix = "" if rid == tl.c_rid[self.src_copy[tensor]] else ":" + self._label(tensor, rid)
        for link in self.p.route(a, dst):
            b = link.endpoints[1] if link.endpoints[0] == a else link.endpoints[0]
            nxt = self.copy_key.get((tensor, b, rid))
            if nxt is None:
                cost = self.p.transfer(tensor, rid, a, b)
                ri, link_ctrl = self.link_res[(link.name, a)]
                nbytes = tl.c_bytes[cur]
                if nbytes > 0 and (link_ctrl or self.dev_ctrl[a] or self.dev_ctrl[b]):
                    ctrls = dict.fromkeys((*link_ctrl, *self.dev_ctrl[a], *self.dev_ctrl[b]))
                    part = tuple((c, float(nbytes)) for c in ctrls)
                else:
                    part = ()
                made = tl.c_made[cur]
                ti = self._task(f"xfer:{tensor}:{a}->{b}{suffix}", TaskKind.TRANSFER, ri, cost,
                                [made] if made >= 0 else [], a, part, None, tensor, b,
                                link.name, rid, -1, nbytes)
                tl.read_copy.append(cur)
                tl.read_task.append(ti)
                nxt = self._copy(tensor, b, rid, ti)
            cur = nxt
            a = b
        return cur

    def build(self) -> None:
        p, pl, tl = self.p, self.pl, self.tl
        get_copy = self.get_copy
        copy_key = self.copy_key
        src_copy = self.src_copy
        numel, bits = self.numel, self.bits
        c_made = tl.c_made
        read_copy, read_task = tl.read_copy, tl.read_task
        no_part: tuple[tuple[int, float], ...] = ()
        compute = TaskKind.COMPUTE
        cost_of = p.cost
        io_reps = p.io_reps
        dev_res, dev_ctrl = self.dev_res, self.dev_ctrl
        t_name, t_kind, t_res, t_dur, t_cost = tl.name, tl.kind, tl.res, tl.dur, tl.cost
        t_preds, t_part, t_vertex, t_tensor = tl.preds, tl.part, tl.vertex, tl.tensor
        t_device, t_dst, t_link = tl.device, tl.dst_device, tl.link
        t_src_rid, t_dst_rid, t_nbytes = tl.src_rid, tl.dst_rid, tl.nbytes
        t_cores, dev_cores = tl.cores, self.dev_cores
        c_tensor, c_rid, c_device, c_bytes = tl.c_tensor, tl.c_rid, tl.c_device, tl.c_bytes
        c_final = tl.c_final
        for v in p.vertices:
            a: Assignment = pl[v.name]
            dev, dt = a.device, a.dtype
            vi = v.index
            cost = cost_of(vi, dev, dt)
            in_rids, out_rids = io_reps(vi, dt)
            preds: list[int] = []
            reads: list[int] = []
            for t, rid in zip(v.inputs, in_rids, strict=True):
                ci = copy_key.get((t, dev, rid))
                if ci is None:
                    ci = get_copy(t, dev, rid)
                made = c_made[ci]
                if made >= 0:
                    preds.append(made)
                reads.append(ci)
            if len(preds) > 1:  # each once, first seen first (a set: joins of 100k inputs)
                preds = list(dict.fromkeys(preds))
            ti = len(t_name)
            read_copy.extend(reads)
            read_task.extend([ti] * len(reads))
            mem = cost.memory_bytes
            ctrl = dev_ctrl[dev]
            # a compute task (appended inline: this loop is the scheduler's hot path)
            t_name.append(v.name)
            t_kind.append(compute)
            t_res.append(dev_res[dev])
            t_dur.append(cost.total_s)
            t_cost.append(cost)
            t_preds.append(preds)
            t_part.append(tuple((c, float(mem)) for c in ctrl) if mem > 0 and ctrl else no_part)
            t_vertex.append(v.name)
            t_tensor.append(None)
            t_device.append(dev)
            t_dst.append(None)
            t_link.append(None)
            t_src_rid.append(-1)
            t_dst_rid.append(-1)
            t_nbytes.append(mem)
            t_cores.append(dev_cores.get(dev, ()))
            for t, rid in zip(v.outputs, out_rids, strict=True):
                ci = len(c_tensor)
                copy_key[(t, dev, rid)] = ci
                src_copy[t] = ci
                c_tensor.append(t)
                c_rid.append(rid)
                c_device.append(dev)
                c_bytes.append((numel[t] * bits[rid] + 7) // 8)
                c_made.append(ti)
                c_final.append(False)
        for t in p.graph.outputs:
            home = get_copy(t, p.host, p.natural_rid[t]) if p.outputs_to_host \
                else self._source(t)
            c_final[home] = True
        if len(set(t_name)) != len(t_name):
            seen: set[str] = set()
            dup = next(x for x in t_name if x in seen or seen.add(x))  # type: ignore[func-returns-value]
            raise InputError(f"two tasks would be named {dup!r}: rename the vertex",
                             place=f"vertex {dup!r}")


# ---- the simulation ----------------------------------------------------------------------------
def _waterfill(capacity: float, demands: dict[int, float]) -> dict[int, float]:
    """Max-min fair shares among ``demands`` (each capped at its demand) of
    ``max(capacity, largest demand)``: a task is never slowed by its own traffic (see the
    module docstring), so a lone task always gets its demand.

    >>> _waterfill(10.0, {0: 8.0, 1: 8.0})
    {0: 5.0, 1: 5.0}
    >>> _waterfill(10.0, {0: 30.0})
    {0: 30.0}
    >>> _waterfill(10.0, {0: 20.0, 1: 20.0})
    {0: 10.0, 1: 10.0}
    """
    order = sorted(demands.items(), key=lambda kv: (kv[1], kv[0]))
    n = len(order)
    left = capacity
    if n and order[-1][1] > left:
        left = order[-1][1]
    out: dict[int, float] = {}
    for k, (i, d) in enumerate(order):
        share = left / (n - k)
        alloc = d if d <= share else share
        out[i] = alloc
        left -= alloc
    return out


class _CoRun:
    """What co-run slowdowns and wake-ups need during one simulation (see the module
    docstring), by task id: ``busy_dev``, the plan device (index into ``names``) a compute
    or conversion task keeps busy (-1: a transfer); ``sens``, whether a co-run can slow a
    compute task, ``cand`` / ``cand_order`` the devices that can (other plan devices on
    disjoint cores); ``wake`` / ``dst`` / ``dst_thread``, a transfer's wake-up, receiving
    device and the devices of the receiver's thread when that thread sleeps (0.0: it
    polls, or the sender runs on it). ``woken`` is filled by the simulation."""

    __slots__ = ("any_wake", "busy_dev", "cand", "cand_order", "dst", "dst_thread", "dtypes",
                 "memo", "names", "problem", "sens", "vertex", "wake", "woken")

    def __init__(self, problem: Problem, names: list[str], n: int) -> None:
        self.problem = problem
        self.names = names
        self.busy_dev = [-1] * n
        self.sens = [False] * n
        self.cand: list[frozenset[int]] = [frozenset()] * n
        self.cand_order: list[tuple[int, ...]] = [()] * n
        self.wake = [0.0] * n
        self.dst = [-1] * n
        self.dst_thread: list[tuple[int, ...]] = [()] * n
        self.any_wake = False
        self.vertex: list[int] = [-1] * n
        self.dtypes: list[DType | None] = [None] * n
        self.memo: dict[tuple[int, tuple[int, ...]], float] = {}
        self.woken: list[bool] = [False] * n

    def factor(self, i: int, busy: tuple[int, ...]) -> float:
        """Task ``i``'s slowdown while the plan devices ``busy`` compute."""
        if not busy:
            return 1.0
        key = (i, busy)
        f = self.memo.get(key)
        if f is None:
            dt = self.dtypes[i]
            assert dt is not None
            f = self.problem.corun(self.vertex[i], self.names[self.busy_dev[i]], dt,
                                   frozenset(self.names[x] for x in busy))
            self.memo[key] = f
        return f

    def settle(self, tl: Timeline) -> None:
        """A transfer whose receiver was woken: its cost gains the wake-up as
        ``Term.SYNC`` (so the task's terms still sum to its duration)."""
        for i, w in enumerate(self.woken):
            if w:
                c = tl.cost[i]
                d = self.names[self.dst[i]]
                a = dict(c.assumptions)
                a["wake_s"] = self.wake[i]
                a["wake"] = (f"the receiver's worker on {d} sleeps (its cores are shared with "
                             f"a device of another thread) and was idle when the data came")
                terms: dict[Term, float] = {}
                for k, v in (*c.terms, (Term.SYNC, self.wake[i])):
                    terms[k] = terms.get(k, 0.0) + v
                tl.cost[i] = Cost(tuple(terms.items()),
                                  c.low_s + self.wake[i], c.high_s + self.wake[i],
                                  c.bottleneck, c.source, tuple(sorted(a.items())),
                                  c.memory_bytes, c.buffer_bytes)
                tl.dur[i] = tl.cost[i].total_s


def _corun_of(problem: Problem, placement: Placement, tl: Timeline) -> _CoRun | None:
    """The co-run and wake-up tables of a built timeline; None when neither applies (one
    plan device, or the cost model knows no slowdown and no wake-up for this plan)."""
    n = len(tl.name)
    used = dict.fromkeys([problem.host, *tl.device,
                          *(d for d in tl.dst_device if d is not None)])
    if len(used) < 2:
        return None
    names = list(used)
    idx = {d: k for k, d in enumerate(names)}
    m = problem.machine
    cores = {d: frozenset(m.device(d).cores or ()) for d in names}
    threads = worker_threads(m, names, problem.host)
    sleeps = sleeping_threads(m, threads)
    members = {th: tuple(idx[d] for d in names if threads[d] == th) for th in sleeps}
    cand_of = {d: frozenset(idx[e] for e in names if e != d and not cores[d] & cores[e])
               for d in names}
    cand_names = {d: frozenset(names[x] for x in cand_of[d]) for d in names}
    co = _CoRun(problem, names, n)
    found = False
    kinds, devs, vtx = tl.kind, tl.device, tl.vertex
    for i in range(n):
        k = kinds[i]
        if k is TaskKind.TRANSFER:
            dst = tl.dst_device[i]
            if dst is not None and threads[dst] in sleeps and threads[dst] != threads[devs[i]]:
                w = problem.wake(dst)
                if w > 0.0:
                    co.wake[i] = w
                    co.dst[i] = idx[dst]
                    co.dst_thread[i] = members[threads[dst]]
                    co.any_wake = found = True
            continue
        dev = devs[i]
        co.busy_dev[i] = idx[dev]
        v = vtx[i]
        if k is TaskKind.COMPUTE and v is not None and cand_of[dev]:
            dt = placement[v].dtype
            vi = problem.vertex_index[v]
            if problem.corun(vi, dev, dt, cand_names[dev]) > 1.0:
                co.sens[i] = found = True
                co.cand[i] = cand_of[dev]
                co.cand_order[i] = tuple(sorted(cand_of[dev]))
                co.vertex[i] = vi
                co.dtypes[i] = dt
    return co if found else None


def schedule(problem: Problem, placement: Placement, *, lanes: Mapping[str, int] | None = None,
             contention: bool = True) -> Schedule:
    """Schedule one run of ``problem.graph`` under ``placement`` (see the module docstring).

    ``lanes`` overrides ``Device.lanes`` per device name. ``contention=False`` ignores
    shared-bandwidth slowdowns (faster to reason about, never faster to run): the result is
    then labelled ``exact=False`` when any task draws on a shared resource.

    Raises ``InputError`` if the placement does not assign exactly the problem's vertices,
    ``UnsupportedError`` if a vertex is assigned to a (device, dtype) that cannot run it.
    """
    problem.check(placement)
    b = _Build(problem, placement, lanes)
    b.build()
    tl = b.tl
    gate = b.res_gate + [()] * (len(tl.res_name) - len(b.res_gate))
    co = _corun_of(problem, placement, tl)
    release: list[float] | None = None
    notes: tuple[str, ...] = ()
    if problem.release_s:
        given = problem.release_s
        release = [given.get(v, 0.0) if v is not None and k is TaskKind.COMPUTE else 0.0
                   for v, k in zip(tl.vertex, tl.kind, strict=True)]
        notes = (f"release times held {sum(1 for r in release if r > 0.0)} compute tasks "
                 f"until their given start (a given schedule replayed)",)
    _simulate(tl, contention, gate if any(gate) else None,
              co if co is not None and (contention or co.any_wake) else None, release)
    if co is not None:
        co.settle(tl)
    return _assemble(problem, placement, tl, contention,
                     corun_off=co is not None and not contention and any(co.sens),
                     extra_notes=notes)


def _simulate(tl: Timeline, contention: bool,
              gate: Sequence[tuple[int, ...]] | None = None,
              co: _CoRun | None = None, release: Sequence[float] | None = None) -> None:
    """Run the event-driven list scheduler; fills ``tl.start``, ``tl.end``, ``tl.lane``.

    ``gate``: per resource, the shared cores its tasks must hold (``None``: no core is
    shared, every resource is scheduled on its own lanes). ``co``: co-run slowdowns and
    wake-ups (``None``: neither applies; see the module docstring); co-run slowdowns only
    with ``contention``. ``release``: per task, the time before which it may not start
    (``None``: none; see **Release times**).
    """
    n = len(tl.name)
    nres = len(tl.res_name)
    preds = tl.preds
    succs: list[list[int]] = [[] for _ in range(n)]
    for i in range(n):
        for q in preds[i]:
            succs[q].append(i)
    dur = tl.dur
    # upward rank; creation order is topological
    rank = [0.0] * n
    for i in range(n - 1, -1, -1):
        best = 0.0
        for s in succs[i]:
            if rank[s] > best:
                best = rank[s]
        rank[i] = dur[i] + best
    res = tl.res
    is_shared = [k is ResourceKind.SHARED for k in tl.res_kind]
    free: list[list[int]] = [[] if is_shared[r] else list(range(tl.res_lanes[r]))
                             for r in range(nres)]
    next_lane = [0] * nres
    ready: list[list[tuple[float, int]]] = [[] for _ in range(nres)]
    indeg = [len(p) for p in preds]
    start = [0.0] * n
    end = [0.0] * n
    lane = [0] * n
    done = [False] * n
    events: list[tuple[float, int, int, int]] = []
    seq = 0
    part = tl.part
    fluid = [False] * n
    rem = [0.0] * n  # fraction of the task's work left
    fac = [1.0] * n  # current speed as a fraction of full speed
    last = [0.0] * n  # time rem was last brought up to date
    ver = [0] * n  # version of the task's pending completion event
    cfac: dict[int, dict[int, float]] = {}  # task -> shared resource -> speed it allows
    active: list[dict[int, float]] = [{} for _ in range(nres)]  # resource -> task -> demand
    cap = tl.res_bw
    dirty: dict[int, None] = {}
    touched: dict[int, None] = {}
    push = heapq.heappush
    pop = heapq.heappop
    # cores shared by devices: which resource holds each, and its running tasks there
    gated: list[int] = [r for r in range(nres) if gate[r]] if gate is not None else []
    is_gated = [False] * nres
    for r in gated:
        is_gated[r] = True
    owner: dict[int, int] = {}  # core -> resource (device) holding it
    holders: dict[int, dict[int, None]] = {}  # core -> running tasks on it
    if gate is not None:
        for r in gated:
            for c in gate[r]:
                holders[c] = {}
    exp_end = [0.0] * n  # expected end of a running task (its pending completion event)
    gate_due = False
    # co-run slowdowns and wake-ups: per plan device, its running compute and conversion
    # tasks; the running tasks a co-run slows; tasks whose co-run factor needs a new look
    sens: list[bool] | None = None
    busy_dev: list[int] | None = None
    cand: list[frozenset[int]] = []
    wake: list[float] | None = None
    cnt: list[int] = []
    running_sens: dict[int, None] = {}
    cdirty: dict[int, None] = {}
    woken = [False] * n
    if co is not None:
        busy_dev = co.busy_dev
        cnt = [0] * len(co.names)
        if contention and any(co.sens):
            sens = co.sens
            cand = co.cand
        if co.any_wake:
            wake = co.wake
        co.woken = woken

    def advance(c: int, t: float) -> None:
        for j in active[c]:
            lj = last[j]
            if lj != t:
                rem[j] -= (t - lj) * fac[j] / dur[j]
                last[j] = t

    def make_ready(s: int, t: float) -> None:
        """Task ``s`` has its inputs at ``t``: ready now, or at its release time."""
        nonlocal seq
        if release is not None and release[s] > t:
            seq += 1
            push(events, (release[s], seq, s, -1))  # version -1: a release, not an end
            return
        rs = res[s]
        push(ready[rs], (-rank[s], s))
        touched[rs] = None

    def busy_changed(x: int, t: float) -> None:
        """Device ``x`` started or stopped computing: the co-run factor of every running
        task it may slow needs a new look (its progress brought up to ``t`` first)."""
        for j in running_sens:
            if x in cand[j]:
                lj = last[j]
                if lj != t:
                    rem[j] -= (t - lj) * fac[j] / dur[j]
                    last[j] = t
                cdirty[j] = None

    def begin(i: int, t: float) -> None:
        nonlocal seq
        start[i] = t
        d = dur[i]
        shared_part = contention and part[i]
        slowed = sens is not None and sens[i]
        if (shared_part or slowed) and d > 0.0:
            fluid[i] = True
            rem[i] = 1.0
            last[i] = t
            cfac[i] = {}
            if shared_part:
                for c, by in part[i]:
                    advance(c, t)
                    active[c][i] = by / d
                    dirty[c] = None
            if slowed:
                running_sens[i] = None
                cdirty[i] = None
        seq += 1
        exp_end[i] = t + d
        push(events, (t + d, seq, i, 0))  # superseded (version) if the task slows down
        if busy_dev is not None:
            x = busy_dev[i]
            if x >= 0:
                cnt[x] += 1
                if cnt[x] == 1 and running_sens:
                    busy_changed(x, t)

    def dispatch_gated(t: float) -> None:
        """Start ready tasks of devices that share cores, highest rank first, with
        reservations for tasks waiting on another device's cores and backfilling (see the
        module docstring)."""
        assert gate is not None
        heads = [(ready[r][0], r) for r in gated if ready[r] and free[r]]
        if not heads:
            return
        heapq.heapify(heads)
        reserve: dict[int, float] = {}  # core -> when a higher-ranked waiting task needs it
        while heads:
            (_, i), r = pop(heads)
            g = gate[r]
            blocked = False
            est = t
            for c in g:
                o = owner.get(c, -1)
                if o != -1 and o != r:
                    blocked = True
                    for j in holders[c]:
                        if exp_end[j] > est:
                            est = exp_end[j]
            if blocked:  # the device waits: its best task reserves the cores
                for c in g:
                    reserve.setdefault(c, est)
                continue
            rq = ready[r]
            lim = min((reserve[c] for c in g if c in reserve), default=math.inf) \
                if reserve else math.inf
            if t + dur[i] - lim > _REL_TOL * lim:
                # backfill: the device's best task that ends before the reservation
                fit = [x for x in rq if t + dur[x[1]] - lim <= _REL_TOL * lim]
                if not fit:
                    continue
                best = min(fit)
                i = best[1]
                rq.remove(best)
                heapq.heapify(rq)
            else:
                pop(rq)
            fr = free[r]
            lane[i] = pop(fr)
            for c in g:
                owner[c] = r
                holders[c][i] = None
            begin(i, t)
            if rq and fr:
                push(heads, (rq[0], r))

    def dispatch(t: float) -> None:
        nonlocal gate_due
        for r in sorted(touched):
            if is_gated[r]:
                gate_due = True
                continue
            rq = ready[r]
            fr = free[r]
            if is_shared[r]:
                while rq:
                    _, i = pop(rq)
                    if fr:
                        lane[i] = pop(fr)
                    else:
                        lane[i] = next_lane[r]
                        next_lane[r] += 1
                    begin(i, t)
            else:
                while rq and fr:
                    _, i = pop(rq)
                    lane[i] = pop(fr)
                    begin(i, t)
        touched.clear()
        if gate_due:
            gate_due = False
            dispatch_gated(t)

    def unfluid(i: int, t: float) -> None:
        """Task ``i`` stops drawing on its shared resources at ``t``."""
        if contention:
            for c, _ in part[i]:
                advance(c, t)
                del active[c][i]
                dirty[c] = None
        del cfac[i]
        fluid[i] = False

    def finish(i: int, t: float) -> None:
        end[i] = t
        done[i] = True
        r = res[i]
        push(free[r], lane[i])
        touched[r] = None
        if is_gated[r]:
            assert gate is not None
            for c in gate[r]:
                hc = holders[c]
                del hc[i]
                if not hc:
                    del owner[c]
        if fluid[i]:
            unfluid(i, t)
        if running_sens and i in running_sens:
            del running_sens[i]
            cdirty.pop(i, None)
        if busy_dev is not None:
            x = busy_dev[i]
            if x >= 0:
                cnt[x] -= 1
                if cnt[x] == 0 and running_sens:
                    busy_changed(x, t)
        for s in succs[i]:
            indeg[s] -= 1
            if indeg[s] == 0:
                make_ready(s, t)

    def rebalance(t: float) -> None:
        nonlocal seq
        affected: dict[int, None] = {}
        for c in dirty:
            act = active[c]
            if not act:
                continue
            shares = _waterfill(cap[c], act)
            for j, dj in act.items():
                f = shares[j] / dj
                cfac[j][c] = f if f < 1.0 else 1.0
                affected[j] = None
        dirty.clear()
        if cdirty:
            assert co is not None
            for j in cdirty:
                busy = tuple(x for x in co.cand_order[j] if cnt[x] > 0)
                cfac[j][-1] = 1.0 / co.factor(j, busy)
                affected[j] = None
            cdirty.clear()
        for j in affected:
            f = min(cfac[j].values())
            if f != fac[j]:
                # every task on a changed resource was advanced to t before the change
                fac[j] = f
                ver[j] += 1
                left = rem[j] if rem[j] > 0.0 else 0.0
                seq += 1
                exp_end[j] = t + left * dur[j] / f
                push(events, (exp_end[j], seq, j, ver[j]))

    for i in range(n):
        if indeg[i] == 0:
            make_ready(i, 0.0)
    dispatch(0.0)
    if dirty or cdirty:
        rebalance(0.0)
    while events:
        t, _, i, vv = pop(events)
        if vv == -1:  # a release: the task joins its resource's ready tasks
            make_ready(i, t)
            batch = []
        elif vv != ver[i] or done[i]:
            continue
        else:
            batch = [i]
        while events and events[0][0] <= t:
            _, _, j, vj = pop(events)
            if vj == -1:
                make_ready(j, t)
            elif vj == ver[j] and not done[j]:
                batch.append(j)
        for j in batch:
            if wake is not None and wake[j] > 0.0 and not woken[j]:
                assert co is not None
                if not any(cnt[x] for x in co.dst_thread[j]):
                    # the data is there; the receiver sleeps: it resumes ``wake[j]`` later
                    woken[j] = True
                    if fluid[j]:
                        unfluid(j, t)
                    ver[j] += 1
                    seq += 1
                    exp_end[j] = t + wake[j]
                    push(events, (exp_end[j], seq, j, ver[j]))
                    continue
            finish(j, t)
        dispatch(t)
        if dirty or cdirty:
            rebalance(t)
    if not all(done):  # pragma: no cover - a bug, not an input problem
        stuck = next(tl.name[i] for i in range(n) if not done[i])
        raise AssertionError(f"scheduler stalled before task {stuck!r}")
    tl.start = start
    tl.end = end
    tl.lane = lane


def _assemble(problem: Problem, placement: Placement, tl: Timeline,
              contention: bool, *, corun_off: bool = False,
              extra_notes: Sequence[str] = ()) -> Schedule:
    n = len(tl.name)
    start, end, dur = tl.start, tl.end, tl.dur
    nres = len(tl.res_name)
    busy = [0.0] * nres
    work = [0.0] * nres
    count = [0] * nres
    shared_bytes = [0.0] * nres
    served = [0.0] * nres  # bytes of tasks of positive duration (they take time to serve)
    peak = [0.0] * nres  # largest demand
    occupied = [0.0] * nres  # sum of min(bytes / bandwidth, uncontended duration)
    res = tl.res
    part = tl.part
    bw = tl.res_bw
    for i in range(n):
        r = res[i]
        d = dur[i]
        busy[r] += end[i] - start[i]
        work[r] += d
        count[r] += 1
        for c, by in part[i]:
            shared_bytes[c] += by
            if d > 0.0:
                served[c] += by
                if by > peak[c] * d:
                    peak[c] = by / d
                sat = by / bw[c]
                occupied[c] += sat if sat < d else d
    makespan = max(end, default=0.0)
    # copy lifetimes
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
            free[c] = makespan
    tl.c_alloc, tl.c_ready, tl.c_free = alloc, ready, free
    resources: list[ResourceUse] = []
    for r in range(nres):
        kind = tl.res_kind[r]
        if kind is ResourceKind.SHARED:
            if count[r] == 0 and shared_bytes[r] == 0.0:
                continue
            least = served[r] / max(bw[r], peak[r])
            resources.append(ResourceUse(tl.res_name[r], kind, 0, least, occupied[r], count[r],
                                         bandwidth_bytes_per_s=tl.res_bw[r],
                                         bytes=int(shared_bytes[r])))
        elif count[r]:
            resources.append(ResourceUse(tl.res_name[r], kind, tl.res_lanes[r], busy[r],
                                         work[r], count[r], device=tl.res_device[r],
                                         link=tl.res_link[r]))
    notes: list[str] = list(extra_notes)
    exact = True
    if not contention and any(shared_bytes):
        exact = False
        notes.append("contention on shared resources was not modelled: the makespan is a "
                     "lower bound of the model's")
    if corun_off:
        exact = False
        notes.append("co-run slowdowns were not modelled: the makespan is a lower bound of "
                     "the model's")
    return Schedule(placement, makespan, exact, tuple(resources), problem.host, tl,
                    tuple(notes))
