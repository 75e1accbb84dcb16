"""The plan as a loaded service, simulated: arrivals, per-replica queues with the
admission and batching policy (``serve.queue``), a router, and each replica's pipeline of
resources (the plan's devices and links).

**Model.** Requests arrive open loop (given times: Poisson, gamma, a trace) or from
``clients`` closed-loop clients (each sends a request, waits for its answer, thinks for an
exponential time of mean ``think_s`` and sends the next; a client whose request was
rejected sends again, after a think time, once a replica next takes a batch off its queue). A router sends each arrival to a
replica: ``round-robin``; ``least-outstanding`` (fewest requests queued or in service;
ties to the lowest index); ``weighted``, for replicas that are not alike (each its own plan
on its own devices: ``service_s`` a sequence), the stream split by each replica's
capacity at batch 1 (``1 / max_j w_j``) by smooth weighted round-robin (nginx's: each
replica's credit grows by its weight, the richest takes the request and pays the total);
or ``least-delay``, the replica where the request would finish first if it joined now
(``outstanding x period + latency`` at batch 1; ties to the lowest index); or ``by-class``,
replica ``c`` for a request of class ``c`` (a workload of several models: each model's
requests go to its own server). A replica's queue admits it or not (queue limit, preemption) and,
whenever fewer than ``in_flight`` of its batches are in service, the batcher decides how
many queued requests to send as one batch (asked again at every arrival, completion and
batcher deadline). ``in_flight`` is the executor's window (its request slots; default: one
per stage of the service): ``1`` forms the next batch when the previous one is done; as
many as the pipeline's stages lets a batch enter while earlier ones are further down.

**Service.** A batch of ``b`` requests costs what the plan's schedule costs at batch ``b``
(``StageTimes``: see ``serve.service``): its latency ``L`` through an idle pipeline, and for
each resource ``j`` (in the order the schedule first uses them) the offset ``a_j`` at which
it starts work on the batch and its occupancy ``w_j``. Each resource serves one batch at a
time, first come first served: with the batch dispatched at ``t`` and ``shift`` the delay
so far, resource ``j`` starts at ``s_j = max(t + a_j + shift, free_j)``, ``shift += s_j -
(t + a_j + shift)``, holds until ``free_j = s_j + w_j``, and the batch completes at ``t + L +
shift``. For a chain of stages (``a_j`` the sum of the earlier stages' times, ``L`` their
sum) this is the exact tandem-queue recurrence; for a plan whose resources overlap within a
request it keeps the single-request latency ``L`` and the evaluator's throughput ``1 /
max_j w_j`` at saturation, with the delay between approximated by the shift. A request's
latency is its batch's completion minus its arrival; its wait, the dispatch minus its arrival.

**Shared resources.** With ``shared``, replicas whose resources have the same name (the
models of a workload on one machine, ``serve.workload``; replicas that are not alike on one
machine) share them (unnamed stages stay each replica's own): one batch at a time
on each, first come first served across the replicas, so that a model waits while another
model's batch holds a device they both use.

**Idle gaps.** A real executor serves a request more slowly after it has idled (caches
and cores gone cold, pool threads asleep). Given ``idle`` (a plan's measured
``ServiceRecord``), a batch dispatched while none of its replica's batches is in service,
``g`` seconds after the replica's last completion, has its latency and offsets scaled by
``idle.latency_factor(g)`` and its occupancies by ``idle.occupancy_factor(g)``, both times
a log-normal draw of median 1 and log-spread ``idle.sigma(g)`` (the measured service's
spread: a real service time is not a constant; seeded); a batch dispatched behind another
runs warm (``g = 0``). Each request's ``g`` is in ``ServeResult.idle_s``.

**Conservation**: ``arrived = completed + rejected + timed_out + in_flight`` (in flight:
queued when arrivals ended and never sent, e.g. fewer than ``B`` left for ``static:B``).

Events are taken in time order (arrivals before dispatches at the same instant, so a batch
formed at ``t`` holds the requests that arrived at ``t``); every replica's next dispatch
time is kept until its state changes, so a run costs a few dictionary and deque operations
per request.

>>> import numpy as np
>>> from placewise.serve.policies import parse_batching
>>> r = simulate(Workload(np.array([0.0, 0.1, 0.2])), lambda b: (0.5,), parse_batching("none"))
>>> r.latency_s.round(3).tolist(), r.completed, r.conserved()
([0.5, 0.9, 1.3], 3, True)
>>> r = simulate(Workload(np.array([0.0, 0.1, 0.2])), lambda b: (0.5,),
...              parse_batching("dynamic:max_batch=2,max_delay=0.05"))
>>> r.batch_sizes.tolist(), r.latency_s.round(3).tolist()
([1, 2], [0.55, 0.95, 0.85])
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from placewise.errors import InputError
from placewise.serve.policies import Batcher
from placewise.serve.queue import Admission, RequestQueue

__all__ = ["ROUTERS", "ClosedLoop", "IdleCost", "ServeResult", "StageTimes", "Workload", "as_stages", "chain",
           "quantile_ci", "simulate"]

ROUTERS = ("round-robin", "least-outstanding", "weighted", "least-delay", "by-class")


@dataclass(frozen=True, slots=True)
class StageTimes:
    """What one batch costs (module docstring): ``latency_s`` through an idle pipeline;
    per resource (``resources`` names them) its start ``offsets_s`` and ``occupancy_s``."""

    latency_s: float
    offsets_s: tuple[float, ...]
    occupancy_s: tuple[float, ...]
    resources: tuple[str, ...] = ()


def chain(times: Sequence[float], names: Sequence[str] = ()) -> StageTimes:
    """Stages one after another, each taking its time.

    >>> chain([1.0, 2.0])
    StageTimes(latency_s=3.0, offsets_s=(0.0, 1.0), occupancy_s=(1.0, 2.0), resources=())
    """
    t = [float(x) for x in times]
    offsets = tuple(float(x) for x in np.concatenate([[0.0], np.cumsum(t)[:-1]])) if t else ()
    return StageTimes(float(sum(t)), offsets, tuple(t), tuple(names))


ServiceFn = Callable[..., "StageTimes | Sequence[float]"]


@dataclass(frozen=True)
class Workload:
    """Open-loop arrivals: ``times_s`` (non-decreasing), each request's class index
    (``classes``; None: all class 0) and shape index (``shapes``; None: one shape, the
    service is called as ``service(b)``; else ``service(b, shape)`` with a batch priced at
    its largest member's shape index, as a padded batch runs)."""

    times_s: np.ndarray
    classes: np.ndarray | None = None
    shapes: np.ndarray | None = None

    def __post_init__(self) -> None:
        t = np.asarray(self.times_s, dtype=float)
        if t.ndim != 1 or (len(t) > 1 and bool((np.diff(t) < 0).any())) or (
                len(t) and not bool(np.isfinite(t).all())):
            raise InputError("arrival times must be a finite, non-decreasing sequence",
                             place="arrivals")
        for name in ("classes", "shapes"):
            a = getattr(self, name)
            if a is not None and np.shape(a) != t.shape:
                raise InputError(f"{name} must give one value per arrival", place="arrivals")


@dataclass(frozen=True)
class ClosedLoop:
    """``clients`` closed-loop clients with exponential think times of mean ``think_s``,
    for ``requests`` requests in all or until ``duration_s`` (whichever first; at least
    one given). ``shares``: the class mix (a request's class is drawn from it)."""

    clients: int
    think_s: float = 0.0
    requests: int | None = None
    duration_s: float | None = None
    shares: tuple[float, ...] = (1.0,)
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.clients, bool) or not isinstance(self.clients, int) or self.clients < 1:
            raise InputError(f"the concurrency must be a positive integer, got "
                             f"{self.clients!r}", place="--concurrency")
        if not (math.isfinite(self.think_s) and self.think_s >= 0):
            raise InputError(f"the think time must be >= 0, got {self.think_s}",
                             place="--think")
        if self.requests is None and self.duration_s is None:
            raise InputError("a closed loop needs --requests or --duration", place="--requests")


@dataclass(frozen=True)
class ServeResult:
    """One run, simulated or measured. Per completed request (arrival order):
    ``latency_s``, ``wait_s``, ``classes``; per batch (dispatch order): ``batch_sizes``;
    per resource (``resources``): ``busy_s``; ``span_s`` from the first arrival to the last
    completion. ``preempted`` (part of ``rejected``) and ``delayed`` count what the queue
    policy did; ``padded``: request slots sent empty (batches padded up to the size that
    runs); ``arrived_by_class`` etc.: the counts per class index."""

    arrived: int
    completed: int
    rejected: int
    timed_out: int
    in_flight: int
    latency_s: np.ndarray
    wait_s: np.ndarray
    batch_sizes: np.ndarray
    busy_s: tuple[float, ...]
    span_s: float
    classes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    resources: tuple[str, ...] = ()
    preempted: int = 0
    delayed: int = 0
    padded: int = 0
    arrived_by_class: tuple[int, ...] = ()
    rejected_by_class: tuple[int, ...] = ()
    timed_out_by_class: tuple[int, ...] = ()
    #: per completed request (arrival order): the idle time of its replica before its
    #: batch was dispatched (0 when another batch was in service; ``inf`` for the first)
    idle_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: requests completed per replica (simulated runs)
    by_replica: tuple[int, ...] = ()

    @property
    def throughput_rps(self) -> float:
        return self.completed / self.span_s if self.span_s > 0 else 0.0

    def utilization(self) -> tuple[float, ...]:
        return tuple(b / self.span_s if self.span_s > 0 else 0.0 for b in self.busy_s)

    def conserved(self) -> bool:
        return self.arrived == self.completed + self.rejected + self.timed_out + self.in_flight


def quantile_ci(samples: np.ndarray, q: float, *, z: float = 1.96
                ) -> tuple[float, float, float]:
    """The ``q`` quantile of ``samples`` with a non-parametric ~95 % confidence interval:
    the order statistics at ranks ``n q -/+ z sqrt(n q (1 - q))`` (the normal
    approximation of the binomial count of samples below the quantile), clipped to the
    sample. With fewer than ``1 / (1 - q)`` samples (p99: 100) the interval is open at the
    top (``inf``).

    >>> quantile_ci(np.arange(1000.0), 0.5)
    (499.5, 469.0, 531.0)
    """
    x = np.sort(np.asarray(samples, dtype=float))
    n = len(x)
    if n == 0:
        return (math.nan, math.nan, math.nan)
    mid = float(np.quantile(x, q))
    half = z * math.sqrt(n * q * (1 - q))
    lo = math.floor(n * q - half)
    hi = math.ceil(n * q + half)
    low = float(x[max(0, lo)])
    high = float(x[hi]) if hi < n else math.inf
    return (mid, low, high)


class IdleCost(Protocol):
    """What an idle gap before a batch costs (``plan_records.ServiceRecord``): the factors
    on the batch's latency (and offsets) and on its occupancies after ``gap_s`` idle, and
    the spread of a batch's service about them (``sigma``: of its logarithm)."""

    def latency_factor(self, gap_s: float) -> float: ...

    def occupancy_factor(self, gap_s: float) -> float: ...

    def sigma(self, gap_s: float) -> float: ...


class _Replica:
    """One copy of the plan: its queue, resources and batches in service."""

    __slots__ = ("busy", "cache", "credit", "free", "idle", "last_fin", "names", "next_t",
                 "order", "out", "outstanding", "queue", "served", "svc")

    def __init__(self, queue: RequestQueue, svc: ServiceFn) -> None:
        self.queue = queue
        self.svc = svc
        self.cache: dict[tuple[int, int], StageTimes] = {}
        self.names: tuple[str, ...] = ()
        self.credit = 0.0  # the weighted router's
        self.served = 0  # requests completed
        self.free: list[float] = []
        self.busy: list[float] = []
        self.out: list[float] = []  # completion times of the batches in service (heap)
        self.outstanding: list[tuple[float, int]] = []  # (completion, requests) heap
        self.next_t = math.inf
        self.order: tuple[int, ...] = ()
        self.last_fin = -math.inf  # the latest completion so far
        self.idle: IdleCost | None = None  # what an idle gap costs it (None: nothing)

    def load(self, now: float) -> int:
        """Requests queued or in service at ``now``."""
        o = self.outstanding
        while o and o[0][0] <= now:
            heapq.heappop(o)
        return len(self.queue) + sum(k for _, k in o)


def as_stages(x: StageTimes | Sequence[float]) -> StageTimes:
    """A service's answer as ``StageTimes`` (a sequence of stage times is a ``chain``)."""
    return x if isinstance(x, StageTimes) else chain(x)


def simulate(workload: Workload | ClosedLoop | np.ndarray,
             service_s: ServiceFn | Sequence[ServiceFn], batcher: Batcher, *,
             admission: Admission | None = None, priorities: Sequence[int] = (1,),
             replicas: int = 1, router: str = "round-robin", in_flight: int | None = None,
             pad_to: int | None = None, deterministic: bool = True,
             queue_limit: int | None = None, timeout_s: float | None = None,
             idle: IdleCost | Sequence[IdleCost | None] | None = None,
             shared: bool = False) -> ServeResult:
    """Simulate the service (module docstring). ``service_s(b)`` (``service_s(b, shape)``
    for a workload with shapes) gives a batch's ``StageTimes`` or, for a chain, its stage
    times; a sequence of them: one replica each, not alike (``replicas`` then 1 or their
    number). ``priorities[c]``: class ``c``'s priority (1 = highest). ``pad_to``: batches run
    padded to that size (a fixed-shape executor; ``padded`` counts the empty slots).
    ``deterministic``: a batch of ``b`` always costs ``service_s(b)`` (asked once per size);
    else it is asked for every batch. ``queue_limit``/``timeout_s``: shorthands for an
    ``Admission``. ``idle``: what an idle gap costs (module docstring: a batch dispatched
    when nothing of its replica is in service, ``g`` after the replica's last completion,
    runs with its latency and offsets scaled by ``idle.latency_factor(g)`` and its
    occupancies by ``idle.occupancy_factor(g)``); None: every batch costs the same.
    A sequence: one per replica (replicas not alike, each measured on its own).
    ``shared``: resources of the same name are one across replicas (module docstring)."""
    if admission is None:
        admission = Admission(queue_limit, timeout_s)
    if router not in ROUTERS:
        raise InputError(f"unknown router {router!r} (known: {', '.join(ROUTERS)})",
                         place="--router")
    for name, v in (("--replicas", replicas), ("--in-flight", in_flight or 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InputError(f"must be a positive integer, got {v!r}", place=name)
    if pad_to is not None and pad_to < 1:
        raise InputError(f"the padded batch must be >= 1, got {pad_to}", place="pad_to")
    if not isinstance(workload, Workload | ClosedLoop):
        workload = Workload(np.asarray(workload, dtype=float))
    if isinstance(service_s, list | tuple):
        if not service_s or replicas not in (1, len(service_s)):
            raise InputError(f"{len(service_s)} replica services for {replicas} replicas",
                             place="--replicas")
        services = list(service_s)
    else:
        services = [service_s] * replicas
    reps = [_Replica(RequestQueue(batcher, admission, priorities), s) for s in services]
    if router == "by-class" and len(priorities) != len(reps):
        raise InputError(f"routing by class needs one replica per class: {len(reps)} "
                         f"replicas, {len(priorities)} classes", place="--router")
    sim = _Service(workload, reps, len(priorities), router, pad_to, deterministic)
    costs: list[IdleCost | None] = list(idle) if isinstance(idle, list | tuple) else \
        [idle] * len(reps)  # type: ignore[list-item]
    if len(costs) != len(reps):
        raise InputError(f"{len(costs)} idle costs for {len(reps)} replicas", place="idle")
    for rep, cost in zip(reps, costs, strict=True):
        rep.idle = cost
    sim.shared = {} if shared else None
    sim.in_service_max = in_flight if in_flight is not None else max(
        max(1, len(sim.price(r, 1, 0).offsets_s)) for r in reps)
    if router in ("weighted", "least-delay"):
        sim.weigh()
    sim.run()
    return sim.result()


class _Service:
    """One simulation's state: the arrivals (a list grown as closed-loop clients send;
    open loop: given up front), the replicas, the priced batch sizes and what happened to
    every request."""

    def __init__(self, workload: Workload | ClosedLoop, reps: list[_Replica], n_classes: int,
                 router: str, pad_to: int | None, deterministic: bool) -> None:
        self.reps, self.n_classes = reps, n_classes
        self.router, self.pad_to, self.deterministic = router, pad_to, deterministic
        closed = self.closed = workload if isinstance(workload, ClosedLoop) else None
        self.shapes: list[int] | None = None
        if closed is None:
            assert isinstance(workload, Workload)
            self.times: list[float] = np.asarray(workload.times_s, dtype=float).tolist()
            self.classes: list[int] = (
                np.zeros(len(self.times), dtype=np.int64) if workload.classes is None
                else np.asarray(workload.classes, dtype=np.int64)).tolist()
            if workload.shapes is not None:
                self.shapes = np.asarray(workload.shapes, dtype=np.int64).tolist()
            self.limit_n = len(self.times)
            self.horizon = math.inf
        else:
            self.times, self.classes = [], []
            self.limit_n = closed.requests if closed.requests is not None else 2**62
            self.horizon = closed.duration_s if closed.duration_s is not None else math.inf
        classes = self.classes
        if classes and (min(classes) < 0 or max(classes) >= n_classes):
            bad = min(classes) if min(classes) < 0 else max(classes)
            raise InputError(f"a request names class {bad}, but {n_classes} classes are "
                             f"given", place="classes")
        self.rng = np.random.default_rng(closed.seed if closed else 0)
        shares = np.asarray(closed.shares if closed else (1.0,), dtype=float)
        self.shares = shares / shares.sum()
        self.pending: list[tuple[float, int]] = []  # closed loop: (send time, client) heap
        if closed is not None:
            for c in range(closed.clients):
                self.client_sends(0.0, c)
        self.owner: list[int] = []  # closed loop: request -> its client
        self.parked: list[int] = []  # closed loop: clients whose request was rejected
        self.weights: list[float] = []  # per replica: capacity at batch 1
        self.delays: list[tuple[float, float]] = []  # per replica: (period, latency), batch 1
        self.latency: list[float] = []
        self.wait: list[float] = []
        self.gaps: list[float] = []
        self.jitter = np.random.default_rng(7)  # the service's spread about its median
        self.done_ids: list[int] = []
        self.sizes: list[int] = []
        self.rejected_ids: list[int] = []
        self.dropped_ids: list[int] = []
        self.padded = 0
        self.end = 0.0
        self.rr = 0
        self.in_service_max = 1
        self.track_load = router in ("least-outstanding", "least-delay") and len(reps) > 1
        #: resource name -> [free at, busy] when replicas share resources by name
        self.shared: dict[str, list[float]] | None = None

    def client_sends(self, t: float, client: int) -> None:
        closed = self.closed
        think = float(self.rng.exponential(closed.think_s)) \
            if closed and closed.think_s > 0 else 0.0
        heapq.heappush(self.pending, (t + think, client))

    def price(self, rep: _Replica, k: int, shape: int) -> StageTimes:
        """The stage times on ``rep`` of a batch of ``k`` requests of (largest) shape
        ``shape``."""
        key = (k, shape)
        st = rep.cache.get(key) if self.deterministic else None
        if st is None:
            raw = rep.svc(k) if self.shapes is None else rep.svc(k, shape)
            st = as_stages(raw)
            if len(st.offsets_s) != len(st.occupancy_s):
                raise InputError("a batch's offsets and occupancies differ in length",
                                 place="service")
            rep.cache[key] = st
            if not rep.names:
                rep.names = st.resources or tuple(f"stage{j}"
                                                  for j in range(len(st.offsets_s)))
        return st

    def weigh(self) -> None:
        """Each replica's capacity, period and latency at batch 1 (the weighted and
        least-delay routers')."""
        for rep in self.reps:
            st = self.price(rep, 1, 0)
            period = max(st.occupancy_s, default=0.0)
            self.weights.append(1.0 / period if period > 0 else 1.0)
            self.delays.append((period, st.latency_s))

    def plan_next(self, rep: _Replica, now: float) -> None:
        """When ``rep`` next dispatches if nothing else happens."""
        if not len(rep.queue):
            rep.next_t = math.inf
            return
        gate = now
        if len(rep.out) >= self.in_service_max:
            # the in_flight-th earliest completion frees a place
            gate = max(now, heapq.nsmallest(len(rep.out) - self.in_service_max + 1,
                                            rep.out)[-1])
        rep.next_t = rep.queue.next_time(gate)

    def dispatch(self, rep: _Replica, t: float) -> None:
        """``rep`` takes a batch off its queue at ``t`` (and drops the requests that timed
        out); rejected clients try again when a queue has room."""
        out = rep.out
        while out and out[0] <= t:
            heapq.heappop(out)
        batch, dropped = rep.queue.take(t)
        for r in dropped:
            self.dropped_ids.append(r)
            if self.closed is not None:
                self.client_sends(t, self.owner[r])
        if self.parked and (batch or dropped):  # room in a queue: rejected clients retry
            for c in self.parked:
                self.client_sends(t, c)
            self.parked.clear()
        if batch:
            self.serve(rep, batch, t)
        self.plan_next(rep, t)

    def serve(self, rep: _Replica, batch: list[int], t: float) -> None:
        """Run ``batch``, dispatched at ``t``, through ``rep``'s pipeline of resources."""
        k = len(batch)
        shapes = self.shapes
        shape = max(shapes[r] for r in batch) if shapes is not None else 0
        run = k if self.pad_to is None else max(k, self.pad_to)
        self.padded += run - k
        st = self.price(rep, run, shape)
        if not rep.free:
            rep.free = [0.0] * len(st.offsets_s)
            rep.busy = [0.0] * len(st.offsets_s)
        free, busy = rep.free, rep.busy
        gap = 0.0 if rep.out else t - rep.last_fin  # dispatch popped what ended by t
        fl = fo = 1.0
        idle = rep.idle
        if idle is not None:
            jitter = math.exp(idle.sigma(gap) * float(self.jitter.standard_normal()))
            fl = idle.latency_factor(gap) * jitter
            fo = idle.occupancy_factor(gap) * jitter
        shift = 0.0
        shared = self.shared
        for j, (a, w) in enumerate(zip(st.offsets_s, st.occupancy_s, strict=True)):
            s = t + a * fl + shift
            slot = free if shared is None else shared.setdefault(
                rep.names[j] if st.resources else f"{id(rep)}/{j}", [0.0, 0.0])
            ix = j if shared is None else 0
            if slot[ix] > s:
                shift += slot[ix] - s
                s = slot[ix]
            slot[ix] = s + w * fo
            busy[j] += w * fo
            if shared is not None:
                slot[1] += w * fo
        fin = t + st.latency_s * fl + shift
        if fin > rep.last_fin:
            rep.last_fin = fin
        heapq.heappush(rep.out, fin)
        if self.track_load:
            heapq.heappush(rep.outstanding, (fin, k))
        self.sizes.append(k)
        rep.served += k
        if fin > self.end:
            self.end = fin
        times = self.times
        for r in batch:
            self.done_ids.append(r)
            self.latency.append(fin - times[r])
            self.wait.append(t - times[r])
            self.gaps.append(gap)
            if self.closed is not None:
                self.client_sends(fin, self.owner[r])

    def arrive(self, rid: int, t: float, cls: int) -> None:
        reps = self.reps
        if self.router == "by-class":
            rep = reps[cls]
        elif self.router == "round-robin" or len(reps) == 1:
            rep = reps[self.rr % len(reps)]
            self.rr += 1
        elif self.router == "weighted":
            total = 0.0
            for p, w in zip(reps, self.weights, strict=True):
                p.credit += w
                total += w
            rep = max(reps, key=lambda p: p.credit)
            rep.credit -= total
        elif self.router == "least-delay":
            delays = self.delays
            best = min(range(len(reps)), key=lambda i: reps[i].load(t) * delays[i][0]
                       + delays[i][1])
            rep = reps[best]
        else:
            rep = min(reps, key=lambda p: p.load(t))
        lost = rep.queue.offer(rid, t, cls)
        for r in lost:
            self.rejected_ids.append(r)
            if self.closed is not None:
                self.parked.append(self.owner[r])
        self.plan_next(rep, t)

    def run(self) -> None:
        """Take events in time order until none is left (module docstring)."""
        closed, reps, pending = self.closed, self.reps, self.pending
        issued = nxt = 0  # nxt: the next open-loop arrival
        while True:
            if closed is None:
                ta = self.times[nxt] if nxt < self.limit_n else math.inf
            else:
                ta = pending[0][0] if pending and issued < self.limit_n else math.inf
                if ta > self.horizon:
                    ta = math.inf
            rep = reps[0] if len(reps) == 1 else min(reps, key=lambda p: p.next_t)
            if ta <= rep.next_t and ta < math.inf:
                if closed is None:
                    self.arrive(nxt, ta, self.classes[nxt])
                    nxt += 1
                else:
                    _, client = heapq.heappop(pending)
                    shares = self.shares
                    cls = int(self.rng.choice(len(shares), p=shares)) if len(shares) > 1 else 0
                    self.times.append(ta)
                    self.classes.append(cls)
                    self.owner.append(client)
                    self.arrive(len(self.owner) - 1, ta, cls)
                issued += 1
            elif rep.next_t < math.inf:
                self.dispatch(rep, rep.next_t)
            else:
                break

    def result(self) -> ServeResult:
        reps, n_classes, times, done_ids = self.reps, self.n_classes, self.times, self.done_ids
        in_flight_n = sum(len(r.queue.drain()) for r in reps)
        n = len(times)
        order = np.argsort(np.asarray(done_ids, dtype=np.int64), kind="stable")
        cls_arr = np.asarray(self.classes, dtype=np.int64)
        done_cls = cls_arr[np.asarray(done_ids, dtype=np.int64)[order]] if done_ids else \
            np.zeros(0, dtype=np.int64)

        def by_class(ids: list[int]) -> tuple[int, ...]:
            return tuple(int(x) for x in np.bincount(cls_arr[np.asarray(ids, dtype=np.int64)],
                                                     minlength=n_classes)) if ids else \
                (0,) * n_classes

        first = min(times) if times else 0.0
        busy_all: list[float] = []
        res_names: list[str] = []
        if self.shared is not None:  # one resource per name, whoever used it
            ids = {f"{id(r)}/": f"r{i}/stage" for i, r in enumerate(reps)}
            for name, (_, b) in sorted(self.shared.items()):
                for raw, shown in ids.items():
                    name = name.replace(raw, shown)
                res_names.append(name)
                busy_all.append(b)
        for i, r in enumerate(reps if self.shared is None else ()):
            names = r.names or reps[0].names
            width = len(names) or len(r.busy)
            busy_all.extend(r.busy or [0.0] * width)
            res_names.extend(names if len(reps) == 1 else [f"r{i}/{x}" for x in names])
        return ServeResult(
            n, len(done_ids), len(self.rejected_ids), len(self.dropped_ids), in_flight_n,
            np.asarray(self.latency)[order], np.asarray(self.wait)[order],
            np.asarray(self.sizes, dtype=np.int64), tuple(busy_all),
            max(0.0, self.end - first), done_cls, tuple(res_names),
            sum(r.queue.preempted for r in reps), sum(r.queue.delayed for r in reps),
            self.padded,
            tuple(int(x) for x in np.bincount(cls_arr, minlength=n_classes)) if n else
            (0,) * n_classes,
            by_class(self.rejected_ids), by_class(self.dropped_ids),
            np.asarray(self.gaps)[order], tuple(r.served for r in reps))
