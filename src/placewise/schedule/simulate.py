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
higher-ranked tasks go first). The same inputs always give the same schedule. A problem
with priorities (``Problem.prioritized``: a workload's models) adds to the rank of each
compute task of a higher level more than any chain of durations, so that of the tasks
waiting for one resource, those of the higher level (and the tasks they wait for) start
first.

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

**Modules.** This module is the event loop (``schedule``); the task graph is built by
``placewise.schedule.build``, the resources and bandwidth sharing are
``placewise.schedule.resources``, the thread, co-run and wake-up tables
``placewise.schedule.wakeup``, and the records ``placewise.schedule.timeline``.

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

import math
from collections.abc import Iterable, Mapping, Sequence
from heapq import heapify, heappop, heappush

from placewise.schedule.build import Build
from placewise.schedule.placement import Placement, Problem
from placewise.schedule.resources import (
    ResourceKind,
    ResourceUse,
    core_name,
    core_occupancy_s,
    resource_uses,
    waterfill,
)
from placewise.schedule.timeline import (
    REL_TOL,
    Schedule,
    Task,
    TaskKind,
    TensorCopy,
    Timeline,
    copy_lifetimes,
)
from placewise.schedule.wakeup import (
    CoRun,
    HasDevices,
    corun_of,
    may_poll,
    sleeping_threads,
    worker_threads,
)

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


def _priority_bonus(problem: Problem, tl: Timeline) -> list[float] | None:
    """Per task, what its priority adds to its upward rank: ``(lowest - level) x (sum of
    all durations + 1)`` for a compute task of a prioritized vertex, so that every task of
    a higher level (and every task it waits for, through the rank) outranks every task of a
    lower one (``Problem.prioritized``); None without priorities."""
    levels = problem.priority
    if not levels:
        return None
    lowest = max(levels.values())
    step = sum(tl.dur) + 1.0
    return [(lowest - levels.get(v, lowest)) * step
            if v is not None and k is TaskKind.COMPUTE else 0.0
            for v, k in zip(tl.vertex, tl.kind, strict=True)]


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
    b = Build(problem, placement, lanes)
    b.build()
    tl = b.tl
    gate = b.resources.res_gate
    co = corun_of(problem, placement, tl)
    release: list[float] | None = None
    notes: list[str] = []
    if problem.release_s:
        given = problem.release_s
        release = [given.get(v, 0.0) if v is not None and k is TaskKind.COMPUTE else 0.0
                   for v, k in zip(tl.vertex, tl.kind, strict=True)]
        notes.append(f"release times held {sum(1 for r in release if r > 0.0)} compute tasks "
                     f"until their given start (a given schedule replayed)")
    _Loop(tl, contention, gate if any(gate) else None,
          co if co is not None and (contention or co.any_wake) else None, release,
          _priority_bonus(problem, tl)).run()
    if co is not None:
        co.settle(tl)
    makespan = max(tl.end, default=0.0)
    copy_lifetimes(tl, makespan)
    resources, draws_shared = resource_uses(tl)
    exact = True
    if not contention and draws_shared:
        exact = False
        notes.append("contention on shared resources was not modelled: the makespan is a "
                     "lower bound of the model's")
    if co is not None and not contention and any(co.sens):
        exact = False
        notes.append("co-run slowdowns were not modelled: the makespan is a lower bound of "
                     "the model's")
    return Schedule(placement, makespan, exact, resources, problem.host, tl, tuple(notes))


class _Loop:
    """The event-driven list scheduler over one built timeline; ``run`` fills ``tl.start``,
    ``tl.end`` and ``tl.lane``.

    ``gate``: per resource, the shared cores its tasks must hold (``None``: no core is
    shared, every resource is scheduled on its own lanes). ``co``: co-run slowdowns and
    wake-ups (``None``: neither applies; see the module docstring); co-run slowdowns only
    with ``contention``. ``release``: per task, the time before which it may not start
    (``None``: none; see **Release times**).

    The loop's state, by task id: ``rank`` (upward rank), ``indeg`` (inputs still to
    come), ``start``/``end``/``lane``, ``done``; a task slowed by shared bandwidth or a
    co-run is *fluid*: ``rem`` is the fraction of its work left, ``fac`` its current speed
    as a fraction of full speed, ``last`` when ``rem`` was brought up to date, ``ver`` the
    version of its pending completion event, ``cfac`` what each of its shared resources
    (and the co-run, key -1) allows. By resource: ``ready`` (a heap of (-rank, task)),
    ``free`` lanes, ``active`` (task -> demand on a shared resource).
    """

    __slots__ = (
        "active", "busy_dev", "cand", "cap", "cdirty", "cfac", "cnt", "co", "contention",
        "dirty", "done", "dur", "end", "events", "exp_end", "fac", "fluid", "free", "gate",
        "gate_due", "gated", "holders", "indeg", "is_gated", "is_shared", "lane", "last",
        "next_lane", "owner", "part", "rank", "ready", "release", "rem", "res",
        "running_sens", "sens", "seq", "start", "succs", "tl", "touched", "ver", "wake",
        "woken",
    )

    def __init__(self, tl: Timeline, contention: bool,
                 gate: Sequence[tuple[int, ...]] | None, co: CoRun | None,
                 release: Sequence[float] | None,
                 bonus: Sequence[float] | None = None) -> None:
        n = len(tl.name)
        nres = len(tl.res_name)
        self.tl, self.contention, self.gate, self.co, self.release = (
            tl, contention, gate, co, release)
        preds = tl.preds
        succs: list[list[int]] = [[] for _ in range(n)]
        for i in range(n):
            for q in preds[i]:
                succs[q].append(i)
        self.succs = succs
        self.dur = dur = tl.dur
        rank = [0.0] * n  # upward rank; creation order is topological
        for i in range(n - 1, -1, -1):
            best = 0.0
            for s in succs[i]:
                if rank[s] > best:
                    best = rank[s]
            rank[i] = dur[i] + best + (bonus[i] if bonus is not None else 0.0)
        self.rank = rank
        self.res, self.part, self.cap = tl.res, tl.part, tl.res_bw
        self.is_shared = [k is ResourceKind.SHARED for k in tl.res_kind]
        self.free: list[list[int]] = [[] if self.is_shared[r] else list(range(tl.res_lanes[r]))
                                      for r in range(nres)]
        self.next_lane = [0] * nres
        self.ready: list[list[tuple[float, int]]] = [[] for _ in range(nres)]
        self.indeg = [len(p) for p in preds]
        self.start, self.end, self.lane = [0.0] * n, [0.0] * n, [0] * n
        self.done = [False] * n
        self.events: list[tuple[float, int, int, int]] = []
        self.seq = 0
        self.fluid = [False] * n
        self.rem, self.fac, self.last = [0.0] * n, [1.0] * n, [0.0] * n
        self.ver = [0] * n
        self.cfac: dict[int, dict[int, float]] = {}
        self.active: list[dict[int, float]] = [{} for _ in range(nres)]
        self.dirty: dict[int, None] = {}
        self.touched: dict[int, None] = {}
        self.exp_end = [0.0] * n  # expected end of a running task (its pending completion)
        self._init_cores(nres)
        self._init_corun(n)

    def _init_cores(self, nres: int) -> None:
        """Cores shared by devices: which resource holds each, and its running tasks there."""
        gate = self.gate
        self.gated: list[int] = [r for r in range(nres) if gate[r]] if gate is not None else []
        self.is_gated = [False] * nres
        for r in self.gated:
            self.is_gated[r] = True
        self.owner: dict[int, int] = {}  # core -> resource (device) holding it
        self.holders: dict[int, dict[int, None]] = {}  # core -> running tasks on it
        if gate is not None:
            for r in self.gated:
                for c in gate[r]:
                    self.holders[c] = {}
        self.gate_due = False

    def _init_corun(self, n: int) -> None:
        """Co-run slowdowns and wake-ups: per plan device, its running compute and conversion
        tasks (``cnt``); the running tasks a co-run slows; tasks whose co-run factor needs a
        new look (``cdirty``)."""
        co = self.co
        self.sens: list[bool] | None = None
        self.busy_dev: list[int] | None = None
        self.cand: list[frozenset[int]] = []
        self.wake: list[float] | None = None
        self.cnt: list[int] = []
        self.running_sens: dict[int, None] = {}
        self.cdirty: dict[int, None] = {}
        self.woken = [False] * n
        if co is not None:
            self.busy_dev = co.busy_dev
            self.cnt = [0] * len(co.names)
            if self.contention and any(co.sens):
                self.sens = co.sens
                self.cand = co.cand
            if co.any_wake:
                self.wake = co.wake
            co.woken = self.woken

    def run(self) -> None:
        events, ver, done = self.events, self.ver, self.done
        make_ready, finish, dispatch = self._make_ready, self._finish, self._dispatch
        pop = heappop
        wake, dirty, cdirty = self.wake, self.dirty, self.cdirty
        for i in range(len(self.indeg)):
            if self.indeg[i] == 0:
                make_ready(i, 0.0)
        dispatch(0.0)
        if dirty or cdirty:
            self._rebalance(0.0)
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
                if wake is not None and wake[j] > 0.0 and self._sleeps(j, t):
                    continue
                finish(j, t)
            dispatch(t)
            if dirty or cdirty:
                self._rebalance(t)
        if not all(done):  # pragma: no cover - a bug, not an input problem
            stuck = next(self.tl.name[i] for i in range(len(done)) if not done[i])
            raise AssertionError(f"scheduler stalled before task {stuck!r}")
        tl = self.tl
        tl.start, tl.end, tl.lane = self.start, self.end, self.lane

    def _sleeps(self, j: int, t: float) -> bool:
        """Transfer ``j``'s data arrived at ``t``: if its receiver's thread sleeps (none of
        its devices computes) and was not woken for it yet, it resumes ``wake[j]`` later and
        the transfer ends then (True)."""
        co, wake = self.co, self.wake
        assert co is not None and wake is not None
        if self.woken[j] or any(self.cnt[x] for x in co.dst_thread[j]):
            return False
        self.woken[j] = True
        if self.fluid[j]:
            self._unfluid(j, t)
        self.ver[j] += 1
        self.seq += 1
        self.exp_end[j] = t + wake[j]
        heappush(self.events, (self.exp_end[j], self.seq, j, self.ver[j]))
        return True

    def _advance(self, tasks: Iterable[int], t: float) -> None:
        """Bring the progress of the running fluid ``tasks`` up to ``t``."""
        last, rem, fac, dur = self.last, self.rem, self.fac, self.dur
        for j in tasks:
            lj = last[j]
            if lj != t:
                rem[j] -= (t - lj) * fac[j] / dur[j]
                last[j] = t

    def _make_ready(self, s: int, t: float) -> None:
        """Task ``s`` has its inputs at ``t``: ready now, or at its release time."""
        release = self.release
        if release is not None and release[s] > t:
            self.seq += 1
            heappush(self.events, (release[s], self.seq, s, -1))  # -1: a release
            return
        rs = self.res[s]
        heappush(self.ready[rs], (-self.rank[s], s))
        self.touched[rs] = None

    def _busy_changed(self, x: int, t: float) -> None:
        """Device ``x`` started or stopped computing: the co-run factor of every running
        task it may slow needs a new look (its progress brought up to ``t`` first)."""
        cand, last, rem, fac, dur = self.cand, self.last, self.rem, self.fac, self.dur
        for j in self.running_sens:
            if x in cand[j]:
                lj = last[j]
                if lj != t:
                    rem[j] -= (t - lj) * fac[j] / dur[j]
                    last[j] = t
                self.cdirty[j] = None

    def _begin(self, i: int, t: float) -> None:
        self.start[i] = t
        d = self.dur[i]
        part = self.part[i]
        shared_part = self.contention and part
        sens = self.sens
        slowed = sens is not None and sens[i]
        if (shared_part or slowed) and d > 0.0:  # it may be slowed: its progress is tracked
            self.fluid[i] = True
            self.rem[i] = 1.0
            self.last[i] = t
            self.cfac[i] = {}
            if shared_part:
                active, dirty = self.active, self.dirty
                for c, by in part:
                    act = active[c]
                    if act:
                        self._advance(act, t)
                    act[i] = by / d
                    dirty[c] = None
            if slowed:
                self.running_sens[i] = None
                self.cdirty[i] = None
        seq = self.seq = self.seq + 1
        self.exp_end[i] = t + d
        heappush(self.events, (t + d, seq, i, 0))  # superseded if it slows down
        busy_dev = self.busy_dev
        if busy_dev is not None:
            x = busy_dev[i]
            if x >= 0:
                cnt = self.cnt
                cnt[x] += 1
                if cnt[x] == 1 and self.running_sens:
                    self._busy_changed(x, t)

    def _dispatch(self, t: float) -> None:
        touched, is_gated, is_shared = self.touched, self.is_gated, self.is_shared
        ready, free, lane, begin = self.ready, self.free, self.lane, self._begin
        pop = heappop
        for r in sorted(touched):
            if is_gated[r]:
                self.gate_due = True
                continue
            rq = ready[r]
            fr = free[r]
            if is_shared[r]:
                while rq:
                    _, i = pop(rq)
                    if fr:
                        lane[i] = pop(fr)
                    else:
                        lane[i] = self.next_lane[r]
                        self.next_lane[r] += 1
                    begin(i, t)
            else:
                while rq and fr:
                    _, i = pop(rq)
                    lane[i] = pop(fr)
                    begin(i, t)
        touched.clear()
        if self.gate_due:
            self.gate_due = False
            self._dispatch_gated(t)

    def _dispatch_gated(self, t: float) -> None:
        """Start ready tasks of devices that share cores, highest rank first, with
        reservations for tasks waiting on another device's cores and backfilling (see the
        module docstring)."""
        gate, ready, free, dur = self.gate, self.ready, self.free, self.dur
        owner, holders, exp_end = self.owner, self.holders, self.exp_end
        assert gate is not None
        pop, push = heappop, heappush
        heads = [(ready[r][0], r) for r in self.gated if ready[r] and free[r]]
        if not heads:
            return
        heapify(heads)
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
            if t + dur[i] - lim > REL_TOL * lim:
                # backfill: the device's best task that ends before the reservation
                fit = [x for x in rq if t + dur[x[1]] - lim <= REL_TOL * lim]
                if not fit:
                    continue
                best = min(fit)
                i = best[1]
                rq.remove(best)
                heapify(rq)
            else:
                pop(rq)
            fr = free[r]
            self.lane[i] = pop(fr)
            for c in g:
                owner[c] = r
                holders[c][i] = None
            self._begin(i, t)
            if rq and fr:
                push(heads, (rq[0], r))

    def _unfluid(self, i: int, t: float) -> None:
        """Task ``i`` stops drawing on its shared resources at ``t``."""
        if self.contention:
            active, dirty = self.active, self.dirty
            for c, _ in self.part[i]:
                act = active[c]
                self._advance(act, t)
                del act[i]
                dirty[c] = None
        del self.cfac[i]
        self.fluid[i] = False

    def _finish(self, i: int, t: float) -> None:
        self.end[i] = t
        self.done[i] = True
        r = self.res[i]
        heappush(self.free[r], self.lane[i])
        self.touched[r] = None
        if self.is_gated[r]:  # a shared core the device no longer runs anything on is free
            gate, holders, owner = self.gate, self.holders, self.owner
            assert gate is not None
            for c in gate[r]:
                hc = holders[c]
                del hc[i]
                if not hc:
                    del owner[c]
        if self.fluid[i]:
            self._unfluid(i, t)
        running_sens = self.running_sens
        if running_sens and i in running_sens:
            del running_sens[i]
            self.cdirty.pop(i, None)
        busy_dev = self.busy_dev
        if busy_dev is not None:
            x = busy_dev[i]
            if x >= 0:
                cnt = self.cnt
                cnt[x] -= 1
                if cnt[x] == 0 and running_sens:
                    self._busy_changed(x, t)
        indeg = self.indeg
        for s in self.succs[i]:
            indeg[s] -= 1
            if indeg[s] == 0:
                self._make_ready(s, t)

    def _rebalance(self, t: float) -> None:
        """Shares of every changed shared resource and co-run factors of every task whose
        co-run set changed; a task whose speed changed gets a new completion event."""
        cfac, active, cap, dirty = self.cfac, self.active, self.cap, self.dirty
        affected: dict[int, None] = {}
        for c in dirty:
            act = active[c]
            if not act:
                continue
            shares = waterfill(cap[c], act)
            for j, dj in act.items():
                f = shares[j] / dj
                cfac[j][c] = f if f < 1.0 else 1.0
                affected[j] = None
        dirty.clear()
        if self.cdirty:
            co, cnt = self.co, self.cnt
            assert co is not None
            for j in self.cdirty:
                busy = tuple(x for x in co.cand_order[j] if cnt[x] > 0)
                cfac[j][-1] = 1.0 / co.factor(j, busy)
                affected[j] = None
            self.cdirty.clear()
        fac, ver, rem, dur, exp_end = self.fac, self.ver, self.rem, self.dur, self.exp_end
        for j in affected:
            f = min(cfac[j].values())
            if f != fac[j]:
                # every task on a changed resource was advanced to t before the change
                fac[j] = f
                ver[j] += 1
                left = rem[j] if rem[j] > 0.0 else 0.0
                self.seq += 1
                exp_end[j] = t + left * dur[j] / f
                heappush(self.events, (exp_end[j], self.seq, j, ver[j]))
