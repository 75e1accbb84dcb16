"""The plan as a loaded service, for real: an open-loop load generator driving the
partitioned executor (``runtime.executor``) through the same queue, admission and batching
code as the simulator (``serve.queue``), so that a measured run and a simulated one mean
the same policy.

**Model.** Requests arrive at given times (``Workload``: seconds from the start of the
timed run, and a class index each); arrivals never wait for completions. One loop on
``time.monotonic``: it admits into the queue (``RequestQueue.offer``) every arrival whose
time has come, then, while fewer than ``in_flight`` batches are in the executor, asks the
queue for a batch (``RequestQueue.take``: the batcher's decision, requests dropped for
their timeout) and submits it, then waits for the next event: the next arrival, the
queue's next decision time (``RequestQueue.next_time``, with a slot free) or a completion
(``Executor.poll``). Arrivals come before dispatches at the same instant, as in the
simulator.

**Batches.** The executor runs the plan at its own batch ``B`` (``plan.batch``): a batch of
``k <= B`` requests is one executor request whose inputs are a batch-``B`` input
(pre-generated with ``request_inputs`` and cycled), so ``B - k`` slots run empty
(``padded``; the simulator prices the same padded batch with ``pad_to=B``). A batcher that
could send more than ``B`` is refused.

**Times.** A request's arrival is its scheduled time on the run's clock (the generator
may admit it late: ``RealServe.late_s``); its dispatch, when its batch was submitted; its
completion, when the host wrote its batch's outputs (the worker's ``CLOCK_MONOTONIC``
stamp). ``latency_s = completion - arrival``, ``wait_s = dispatch - arrival``. ``busy_s``
per device: the union of the intervals its worker spent in the timed run's steps
(compute, conversion, io, its halves of transfers), clipped to the span.

**Bounds.** A warm-up of a few batches first (untimed, phase ``serve-warmup``), then the
timed run (phase ``serve``), which ends when every arrival is handled or at ``limit_s`` on
its clock, whichever first. At the limit, arrivals not yet due never arrived; requests
still queued or in the executor are in flight (the executor's batches are drained, not
counted). ``arrived = completed + rejected + timed_out + in_flight`` always.

**Faults.** The executor is a context manager: a worker fault (``ExecutionError``) or
Ctrl-C (``KeyboardInterrupt``, propagated) closes it, which stops every worker process and
unlinks its shared memory. The library never prints: ``progress(message, fraction)`` is
called between phases and about every ``progress_s`` seconds of the timed run.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from placewise.errors import InputError
from placewise.plan import Plan, load_plan
from placewise.runtime.executor import Completion, Executor
from placewise.runtime.planned import planned_program
from placewise.serve.policies import Batcher, max_batch
from placewise.serve.queue import Admission, RequestQueue
from placewise.serve.sim import ServeResult, Workload

if TYPE_CHECKING:
    from placewise.hardware.spec import Machine
    from placewise.runtime.opexec import ModelSource
    from placewise.runtime.telemetry import Telemetry

__all__ = ["SERVE", "SERVE_WARMUP", "Call", "Lane", "Lateness", "OpenLoop", "RealServe", "busy_s",
           "serve_real"]

#: telemetry phase of the timed run, and of its warm-up
SERVE = "serve"
SERVE_WARMUP = "serve-warmup"

Progress = Callable[[str, float], None]

# request states
_WAITING, _DONE, _REJECTED, _TIMED_OUT, _IN_FLIGHT = 0, 1, 2, 3, 4


@dataclass(frozen=True, slots=True)
class Lateness:
    """How late the generator admitted the arrivals, in seconds after their scheduled
    time (``n`` arrivals; ``nan`` when none arrived)."""

    n: int
    mean_s: float
    p50_s: float
    p99_s: float
    max_s: float

    @classmethod
    def of(cls, late_s: np.ndarray) -> Lateness:
        x = np.asarray(late_s, dtype=float)
        if not len(x):
            return cls(0, math.nan, math.nan, math.nan, math.nan)
        return cls(len(x), float(x.mean()), float(np.quantile(x, 0.5)),
                   float(np.quantile(x, 0.99)), float(x.max()))


@dataclass(frozen=True)
class RealServe:
    """A measured run (module docstring): the figures, as the simulator reports them;
    the run's telemetry tags; notes on what may colour the figures; the generator's
    lateness; the executor's telemetry (``None`` unless kept); every executor request
    (``calls``, in completion order); each arrival's lateness (``late``, arrival order); per
    completed request (as ``result``), the seconds its executor request spent in partition
    runs (``compute_s``: the telemetry's compute tasks, summed over devices)."""

    result: ServeResult
    tags: dict[str, str]
    notes: tuple[str, ...]
    late_s: Lateness
    telemetry: Telemetry | None = None
    calls: tuple[Call, ...] = ()
    late: np.ndarray = field(default_factory=lambda: np.zeros(0))
    compute_s: np.ndarray = field(default_factory=lambda: np.zeros(0))


def serve_real(plan: Plan | str | os.PathLike[str], workload: Workload | np.ndarray,
               batcher: Batcher, *, admission: Admission | None = None,
               priorities: Sequence[int] = (1,), in_flight: int = 1,
               limit_s: float = 60.0, warmup: int = 5, inputs: int = 4, seed: int = 0,
               source: ModelSource | str | None = None, machine: Machine | None = None,
               shapes: Mapping[str, Sequence[int]] | None = None,
               timeout_s: float = 120.0, progress: Progress | None = None,
               progress_s: float = 0.5, keep_telemetry: bool = False,
               executor_options: Mapping[str, Any] | None = None) -> RealServe:
    """Serve ``workload`` with ``plan`` on this machine, for real (module docstring).

    ``plan``: a ``Plan`` or a plan file, checked and loaded as ``validate`` does (``source``,
    ``machine``, ``shapes`` as there). ``workload``: the arrival times (seconds from the
    start of the timed run, non-decreasing) and each request's class index (into
    ``priorities``: class ``c``'s priority, 1 = highest). ``batcher`` and ``admission``
    (default: unbounded queue, no timeout): the policy, as for ``simulate``.
    ``in_flight``: batches in the executor at once. ``limit_s``: the timed run's wall
    limit. ``warmup``: untimed batches first. ``inputs``: distinct batch inputs generated
    from ``seed`` and cycled. ``timeout_s``: how long the executor may make no progress
    before the run is declared hung. ``executor_options``: more ``Executor`` arguments
    (tests: ``fault``, ``partition_files``); a tuned plan's runtime settings
    (``Plan.service``: ``session_spinning``, ``client_spin_s``) are used unless these give
    them.

    Raises ``InputError`` for bad arguments or a plan that cannot run here,
    ``ExecutionError`` when a worker fails; ``KeyboardInterrupt`` propagates. Nothing is
    left running either way.
    """
    # lazy: torch (runtime.opexec imports it) is heavy to import, loaded only when this runs
    from placewise.runtime.opexec import request_inputs

    report: Progress = progress or (lambda _m, _f: None)
    wl = workload if isinstance(workload, Workload) else Workload(np.asarray(workload,
                                                                              dtype=float))
    times = np.asarray(wl.times_s, dtype=float)
    n = len(times)
    classes = (np.zeros(n, dtype=np.int64) if wl.classes is None
               else np.asarray(wl.classes, dtype=np.int64))
    _check_args(wl, classes, priorities, in_flight, limit_s, warmup, inputs)
    admission = admission or Admission()
    file: str | None = None
    if not isinstance(plan, Plan):
        file = os.fspath(plan)
        plan = load_plan(file)
    batch = max(1, int(plan.batch))
    biggest = max_batch(batcher)
    if biggest > batch:
        raise InputError(f"{batcher.describe()} sends batches of up to {biggest} requests, "
                         f"the plan runs batches of {batch} (plan with --batch {biggest}, or "
                         f"batch at most {batch})", place="--batching")
    report("checking the plan against this machine and the model", 0.0)
    machine, src, program = planned_program(plan, machine, source, shapes, file)
    graph = program.graph
    pool = request_inputs(src, graph, inputs, seed)
    timeout = max(timeout_s, 100.0 * float(plan.makespan_s))
    opts = dict(executor_options or {})
    if plan.service is not None:
        opts.setdefault("session_spinning", plan.service.session_spinning)
        opts.setdefault("client_spin_s", plan.service.client_spin_s)
    with Executor(program, src, reference_inputs=pool[0], slots=in_flight, timeout_s=timeout,
                  **opts) as ex:
        ex.start(lambda m: report(m, 0.05))
        if warmup:
            report(f"warming up ({warmup} batches)", 0.1)
            ex.run([pool[i % len(pool)] for i in range(warmup)], phase=SERVE_WARMUP)
        report(f"serving {n} requests (at most {limit_s:g} s)", 0.15)
        run = OpenLoop([Lane(ex, pool, batch)], times, classes,
                       RequestQueue(batcher, admission, priorities), len(priorities),
                       in_flight, limit_s, report, progress_s)
        run.loop()
        run.drain()
        tel = ex.telemetry()
    report("done", 1.0)
    devices = tuple(d.name for d in program.devices)
    result = run.result(devices, busy_s(tel, devices, run.t0_ns, run.span_s))
    tags = dict(tel.tags)
    tags.update({"phase": SERVE, "batching": batcher.describe(), "admission": admission.text(),
                 "in_flight": str(in_flight), "plan_batch": str(batch),
                 "arrivals": str(n), "limit_s": f"{limit_s:g}",
                 "calibration": plan.fingerprints.calibration,
                 "session_spinning": str(ex.session_spinning),
                 "client_spin_s": f"{ex.client_spin_s:g}"})
    return RealServe(result, tags, tuple(run.notes(n)), Lateness.of(run.late_s()),
                     tel if keep_telemetry else None, tuple(run.calls), run.late_s().copy(),
                     run.compute_s(tel))


def _check_args(wl: Workload, classes: np.ndarray, priorities: Sequence[int], in_flight: int,
                limit_s: float, warmup: int, inputs: int) -> None:
    """Refuse bad arguments before anything is loaded."""
    for name, v in (("--in-flight", in_flight), ("inputs", inputs)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InputError(f"must be a positive integer, got {v!r}", place=name)
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise InputError(f"the warm-up must be an integer >= 0, got {warmup!r}",
                         place="warmup")
    if not (limit_s > 0 and math.isfinite(limit_s)):
        raise InputError(f"the wall limit must be > 0 seconds, got {limit_s}",
                         place="--duration")
    if len(classes) and (int(classes.min()) < 0 or int(classes.max()) >= len(priorities)):
        raise InputError(f"class indices must lie in 0..{len(priorities) - 1}",
                         place="arrivals")
    if wl.shapes is not None and len(np.unique(np.asarray(wl.shapes))) > 1:
        raise InputError("the real service runs one input shape (the plan's); this "
                         "workload has several", place="arrivals")


@dataclass(slots=True)
class Lane:
    """One executor the open loop dispatches to (a plan, or one bucket of a plan set): the
    started executor, the inputs it cycles (one executor request each, at the lane's own
    shape), the rows (``batch``) and sequence positions (``seq``; ``None``: no sequence
    axis) one executor request holds, and a name. ``pin``: the cores the calling thread
    had when the lane's executor started (its in-process devices pinned it there; ``None``:
    leave the thread as it is); with several lanes the loop puts it back before each lane's
    work. ``sent`` counts its executor requests (which input of the pool the next one
    takes)."""

    ex: Executor
    pool: Sequence[Sequence[Any]]
    batch: int
    seq: int | None = None
    name: str = ""
    pin: frozenset[int] | None = None
    sent: int = 0


@dataclass(frozen=True, slots=True)
class Call:
    """One executor request of the timed run, done: its lane, the requests it carried, the
    rows they filled (``rows``) of the lane's ``batch`` and the elements (rows x sequence
    positions) they filled (``used``) of the lane's (``size``); when it was submitted
    (``dispatch_s``, on the run's clock), how long the executor took (``service_s``: submit
    to outputs) and how long the executor had been idle before it (``idle_s``: since its
    last completion, 0 when another was in flight, ``inf`` for the first)."""

    lane: int
    ids: tuple[int, ...]
    rows: int
    used: int
    size: int
    dispatch_s: float
    service_s: float
    idle_s: float = 0.0

    @property
    def padded_fraction(self) -> float:
        """The share of the executor request that was padding."""
        return 1.0 - self.used / self.size if self.size else 0.0


@dataclass(slots=True)
class _Batch:
    lane: int
    ids: list[int]
    dispatch_s: float
    submit_ns: int
    idle_s: float


class OpenLoop:
    """The timed run's state and loop (module docstring), over one or more ``lanes``.

    Every request goes through one ``queue`` (admission, priorities, the batcher) and,
    when taken, to its lane (``lane_of``; default: lane 0) as one executor request of
    that lane's shape. ``rows`` (default 1 each) and ``seqs`` (default: the lane's) are
    what each request fills of it; the rest is padding (``padded``: rows that ran empty;
    ``calls``: every executor request done, with its padded share). ``in_flight`` bounds
    the executor requests of all lanes together. With several lanes, or requests of more
    than one row, the batcher must send one request at a time (requests of different
    shapes are never merged)."""

    def __init__(self, lanes: Sequence[Lane], times: np.ndarray, classes: np.ndarray,
                 queue: RequestQueue, n_classes: int, in_flight: int, limit_s: float,
                 report: Progress, progress_s: float, *, lane_of: np.ndarray | None = None,
                 rows: np.ndarray | None = None, seqs: np.ndarray | None = None,
                 phase: str = SERVE) -> None:
        n = len(times)
        self.lanes = list(lanes)
        self.times = times
        self.times_l: list[float] = times.tolist()
        self.classes = classes
        self.classes_l: list[int] = classes.tolist()
        self.lane_of = np.zeros(n, np.int64) if lane_of is None else np.asarray(lane_of)
        self.rows = np.ones(n, np.int64) if rows is None else np.asarray(rows, np.int64)
        self.seqs = seqs
        self._check(queue)
        self.lane_l: list[int] = self.lane_of.tolist()
        self.rows_l: list[int] = self.rows.tolist()
        self.q = queue
        self.n_classes = n_classes
        self.in_flight = in_flight
        self.limit_s = limit_s
        self.report = report
        self.progress_s = max(0.0, progress_s)
        self.phase = phase
        self.state = np.full(n, _WAITING, dtype=np.int8)
        self.latency = np.full(n, math.nan)
        self.wait = np.full(n, math.nan)
        self.late = np.full(n, math.nan)
        self.idle = np.full(n, math.nan)
        self.exec_of = np.full(n, -1, dtype=np.int64)  # request -> its executor request
        self.last_done_s = -math.inf  # the latest completion so far, on the run's clock
        self.sizes: list[int] = []
        self.padded = 0
        self.calls: list[Call] = []
        self.nxt = 0  # the next arrival not yet offered to the queue
        self.batches: dict[tuple[int, int], _Batch] = {}  # (lane, executor request) -> batch
        self.end_s = times[0] if n else 0.0  # the last completion so far
        self.hit_limit = False
        self.t0_ns = 0
        self._pinned: frozenset[int] | None = None

    def _pin(self, lane: Lane) -> None:
        """Put the calling thread on the lane's cores (its in-process devices run here)."""
        if lane.pin is not None and lane.pin != self._pinned:
            os.sched_setaffinity(0, lane.pin)
            self._pinned = lane.pin

    def _check(self, queue: RequestQueue) -> None:
        n = len(self.times)
        if len(self.lane_of) != n or len(self.rows) != n or (
                self.seqs is not None and len(self.seqs) != n):
            raise InputError("one lane, row count and sequence length per request",
                             place="arrivals")
        if n and (int(self.lane_of.min()) < 0 or int(self.lane_of.max()) >= len(self.lanes)):
            raise InputError("a request's lane is not one of the lanes", place="arrivals")
        cap = np.array([ln.batch for ln in self.lanes])[self.lane_of]
        if n and bool((self.rows > cap).any()):
            i = int(np.flatnonzero(self.rows > cap)[0])
            raise InputError(f"request {i} carries {int(self.rows[i])} rows, its lane runs "
                             f"{int(cap[i])}", place="arrivals")
        if (len(self.lanes) > 1 or bool((self.rows > 1).any())) and max_batch(
                queue.batcher) > 1:
            raise InputError(f"{queue.batcher.describe()} merges requests; requests of "
                             f"their own shapes are sent one at a time (--batching none)",
                             place="--batching")

    def clock(self) -> float:
        """Seconds on the run's clock."""
        return (time.monotonic_ns() - self.t0_ns) / 1e9

    def outstanding(self) -> int:
        """Executor requests in flight, all lanes together."""
        return sum(ln.ex.outstanding for ln in self.lanes)

    def loop(self) -> None:
        n = len(self.times_l)
        times = self.times_l
        done: list[tuple[int, Completion]] = []
        self.t0_ns = time.monotonic_ns()
        next_report = self.progress_s
        while True:
            self._complete(done)
            now = self.clock()
            if now >= self.limit_s:
                self.hit_limit = True
                break
            if now >= next_report:
                self.report(f"{self.nxt} of {n} arrived, {int((self.state == _DONE).sum())} "
                            f"done", 0.15 + 0.8 * min(1.0, max(self.nxt / max(n, 1),
                                                                now / self.limit_s)))
                next_report = now + self.progress_s
            while self.nxt < n and times[self.nxt] <= now:  # arrivals first
                i = self.nxt
                self.late[i] = now - times[i]
                self._offer(i, now)
                self.nxt += 1
            free = self._dispatch(now)
            if self.nxt >= n and not self.outstanding() and all(
                    not len(q) or q.next_time(self.clock()) == math.inf
                    for q in self.queues()):
                break  # every arrival handled (what stays queued is in flight)
            event = min(times[self.nxt] if self.nxt < n else math.inf,
                        self._next_time(now) if free else math.inf, self.limit_s,
                        next_report)
            done = self._poll(max(0.0, event - self.clock()))

    def queues(self) -> list[RequestQueue]:
        """The run's queues (one, shared by the lanes)."""
        return [self.q]

    def _offer(self, i: int, now: float) -> None:
        """Admit arrival ``i`` into the queue (or count it rejected)."""
        self._reject(self.q.offer(i, self.times_l[i], self.classes_l[i]))

    def _next_time(self, now: float) -> float:
        """When the queue next decides, a slot being free."""
        return self.q.next_time(now)

    def _poll(self, timeout_s: float) -> list[tuple[int, Completion]]:
        """Completions of every lane, waiting up to ``timeout_s`` for one."""
        if len(self.lanes) == 1:
            return [(0, c) for c in self.lanes[0].ex.poll(timeout_s)]
        busy = [k for k, ln in enumerate(self.lanes) if ln.ex.outstanding]
        if not busy:  # the executor's idle wait (it sleeps, then spins its last moments)
            return [(0, c) for c in self.lanes[0].ex.poll(timeout_s)]
        got: list[tuple[int, Completion]] = []
        for k in busy[1:]:
            self._pin(self.lanes[k])
            got += [(k, c) for c in self.lanes[k].ex.poll(0.0)]
        wait = 0.0 if got else (timeout_s if len(busy) == 1 else min(timeout_s, 2e-4))
        self._pin(self.lanes[busy[0]])
        return got + [(busy[0], c) for c in self.lanes[busy[0]].ex.poll(wait)]

    def _dispatch(self, now: float) -> bool:
        """Send batches while a slot is free; whether one still is."""
        q = self.q
        while self.outstanding() < self.in_flight and all(ln.ex.can_submit
                                                          for ln in self.lanes):
            if not len(q):
                return True
            # the batch is decided at its dispatch time: a request whose timeout passes
            # between the decision and the submission must not be sent
            t = max(now, self.clock())
            ids, dropped = q.take(t)
            self._time_out(dropped)
            if not ids:
                return True
            self._submit(self.lane_l[ids[0]], ids, t)
        return False

    def _submit(self, li: int, ids: list[int], t: float) -> None:
        """Send ``ids`` (taken off a queue at ``t``) to lane ``li`` as one executor
        request."""
        lane = self.lanes[li]
        arrays = lane.pool[lane.sent % len(lane.pool)]
        gap = t - self.last_done_s if not self.outstanding() else 0.0
        self._pin(lane)
        r = lane.ex.submit(arrays)
        lane.sent += 1
        self.batches[(li, r)] = _Batch(li, ids, t, time.monotonic_ns(), gap)
        self.sizes.append(len(ids))
        self.padded += lane.batch - sum(self.rows_l[i] for i in ids)
        for i in ids:
            self.wait[i] = t - self.times_l[i]
            self.idle[i] = gap

    def _used(self, lane: Lane, ids: Sequence[int]) -> tuple[int, int, int]:
        """Rows, elements filled and elements run of one executor request."""
        rows = sum(self.rows_l[i] for i in ids)
        if lane.seq is None or self.seqs is None:
            return rows, rows, lane.batch
        used = sum(self.rows_l[i] * int(self.seqs[i]) for i in ids)
        return rows, used, lane.batch * lane.seq

    def _complete(self, done: Sequence[tuple[int, Completion]]) -> None:
        for li, c in done:
            b = self.batches.pop((li, c.request))
            t = (c.outputs_ns - self.t0_ns) / 1e9
            self.end_s = max(self.end_s, t)
            self.last_done_s = max(self.last_done_s, t)
            for i in b.ids:
                self.state[i] = _DONE
                self.latency[i] = t - self.times_l[i]
                self.exec_of[i] = c.request
            rows, used, size = self._used(self.lanes[li], b.ids)
            self.calls.append(Call(li, tuple(b.ids), rows, used, size, b.dispatch_s,
                                   (c.outputs_ns - c.submit_ns) / 1e9, b.idle_s))

    def _reject(self, ids: Sequence[int]) -> None:
        for i in ids:
            self.state[i] = _REJECTED

    def _time_out(self, ids: Sequence[int]) -> None:
        for i in ids:
            self.state[i] = _TIMED_OUT

    def drain(self) -> None:
        """After the loop: what is queued is in flight; the executors' batches are waited
        for (not counted); the timed run's telemetry is recorded under ``phase``."""
        for q in self.queues():
            for i in q.drain():
                self.state[i] = _IN_FLIGHT
        for b in self.batches.values():
            for i in b.ids:
                self.state[i] = _IN_FLIGHT
        self.batches.clear()
        for ln in self.lanes:
            ln.ex.finish(self.phase)

    @property
    def span_s(self) -> float:
        return float(self.end_s - (self.times_l[0] if self.times_l else 0.0))

    def compute_s(self, tel: Telemetry) -> np.ndarray:
        """Per completed request (arrival order), the seconds of partition runs of its
        executor request in ``tel`` (one lane: executor request ids are that lane's)."""
        ns: dict[int, int] = {}
        for t in tel.tasks:
            if t.phase == self.phase and t.kind == "compute":
                ns[t.request] = ns.get(t.request, 0) + t.end_ns - t.start_ns
        return np.array([ns[r] / 1e9 if (r := int(self.exec_of[i])) in ns else math.nan
                         for i in self.completed()])

    def late_s(self) -> np.ndarray:
        return self.late[: self.nxt]

    def completed(self) -> np.ndarray:
        """The completed requests' indices, in arrival order."""
        return np.flatnonzero(self.state[: self.nxt] == _DONE)

    def result(self, resources: tuple[str, ...], busy: tuple[float, ...]) -> ServeResult:
        arrived = self.nxt
        st = self.state[:arrived]
        cls = self.classes[:arrived]
        k = max(int(cls.max()) + 1 if arrived else 1, self.n_classes)
        done = st == _DONE
        order = np.flatnonzero(done)  # arrival order

        def by_class(mask: np.ndarray) -> tuple[int, ...]:
            return tuple(int(x) for x in np.bincount(cls[mask], minlength=k))

        return ServeResult(
            arrived, int(done.sum()), int((st == _REJECTED).sum()),
            int((st == _TIMED_OUT).sum()),
            arrived - int(done.sum()) - int((st == _REJECTED).sum())
            - int((st == _TIMED_OUT).sum()),
            self.latency[order], self.wait[order], np.asarray(self.sizes, dtype=np.int64),
            busy, self.span_s, classes=cls[order].astype(np.int64), resources=resources,
            preempted=sum(q.preempted for q in self.queues()),
            delayed=sum(q.delayed for q in self.queues()), padded=self.padded,
            arrived_by_class=by_class(np.ones(arrived, dtype=bool)),
            rejected_by_class=by_class(st == _REJECTED),
            timed_out_by_class=by_class(st == _TIMED_OUT), idle_s=self.idle[order])

    def notes(self, n: int) -> list[str]:
        out: list[str] = []
        if self.hit_limit:
            out.append(f"stopped at the wall limit ({self.limit_s:g} s): {self.nxt} of {n} "
                       f"requests had arrived")
        late = self.late_s()
        if len(late) and float(np.quantile(late, 0.99)) > 1e-3:
            out.append(f"the generator admitted arrivals late (p99 "
                       f"{float(np.quantile(late, 0.99)) * 1e3:.2f} ms after their time): "
                       f"waits include that")
        if self.padded:
            what = (f"the plan's batch of {self.lanes[0].batch}" if len(self.lanes) == 1
                    else "their buckets' batches")
            out.append(f"{self.padded} request slots ran empty (batches padded to {what})")
        return out


def busy_s(tel: Telemetry, devices: Sequence[str], t0_ns: int, span_s: float, *,
           phase: str = SERVE) -> tuple[float, ...]:
    """Per device, seconds its worker spent in the timed run's steps (the union of their
    intervals, clipped to the run's first ``span_s`` seconds)."""
    lo, hi = t0_ns, t0_ns + int(span_s * 1e9)
    spans: dict[str, list[tuple[int, int]]] = {d: [] for d in devices}
    for t in tel.tasks:
        if t.phase != phase:
            continue
        if t.kind == "transfer":
            marks = dict(t.marks)
            spans.setdefault(t.device, []).append((t.start_ns, marks.get("write_end",
                                                                         t.start_ns)))
            if t.dst_device:
                spans.setdefault(t.dst_device, []).append(
                    (marks.get("read_start", t.end_ns), t.end_ns))
        else:
            spans.setdefault(t.device, []).append((t.start_ns, t.end_ns))
    return tuple(_union_s(spans[d], lo, hi) for d in devices)


def _union_s(intervals: list[tuple[int, int]], lo: int, hi: int) -> float:
    """Seconds covered by ``intervals`` (nanoseconds) within ``[lo, hi]``.

    >>> _union_s([(0, 10), (5, 20), (30, 40)], 0, 35) * 1e9
    25.0
    """
    total = 0
    end = lo
    for a, b in sorted(intervals):
        a, b = max(a, end), min(b, hi)
        if b > a:
            total += b - a
            end = b
    return total / 1e9
