"""Replicas that are not alike: one model, several plans, each on devices of its own,
behind one router; checked (``check_replicas``), and served for real (``serve_replicas``).

**Routers** (as ``serve.sim`` simulates them; the router decides when a request arrives):
``round-robin``; ``least-outstanding`` (fewest requests queued or in the replica's
executor); ``weighted`` (smooth weighted round-robin by each replica's capacity at its
plan's batch, ``1 / period``); ``least-delay`` (the replica where the request would finish
first: ``outstanding x period + latency``); ``by-class`` (replica ``c`` for a request of
class ``c``: a workload's models, ``serve.workload``). Ties go to the lowest index.

**For real.** Each replica is an executor of its own whose every device runs in a worker
process (``inline_host=False``): the client's thread only admits, routes and dispatches, so
the replicas compute at the same time. Each replica has its own queue (the same admission
and batcher) and its own window (default: its plan's, ``tune.plan_window``). The loop is
``serve.real.OpenLoop``'s, with the queue chosen per request.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from placewise.errors import InputError
from placewise.runtime.executor import Executor
from placewise.runtime.planned import planned_program
from placewise.serve.policies import Batcher
from placewise.serve.queue import Admission, RequestQueue
from placewise.serve.real import (
    SERVE,
    SERVE_WARMUP,
    Lane,
    Lateness,
    OpenLoop,
    Progress,
    RealServe,
    busy_s,
)
from placewise.serve.sim import ROUTERS, Workload
from placewise.serve.tune import plan_window

if TYPE_CHECKING:
    from placewise.hardware.spec import Machine
    from placewise.plan import Plan

__all__ = ["ReplicaLoop", "check_replicas", "serve_replicas"]


def check_replicas(plans: Sequence[Plan], files: Sequence[str]) -> None:
    """Refuse replicas that are not one model on one machine (``InputError`` naming the
    file of the first plan that is not). Replicas may share a device (a DLA replica whose
    fallback layers run on the GPU beside a GPU replica): the simulator shares it between
    them by name, first come first served (``serve.sim``, ``shared``), and for real their
    executors share its cores."""
    first = plans[0]
    for plan, f in zip(plans, files, strict=True):
        if plan.fingerprints.graph != first.fingerprints.graph:
            raise InputError(f"a plan of another model than {files[0]} ({plan.model!r})",
                             file=f, place="fingerprints.graph")
        if plan.fingerprints.machine != first.fingerprints.machine:
            raise InputError(f"a plan for another machine than {files[0]}'s", file=f,
                             place="fingerprints.machine")


class ReplicaLoop(OpenLoop):
    """``OpenLoop`` over replicas (module docstring): lane ``k`` is replica ``k`` with its
    own queue ``queues[k]`` and window ``windows[k]``; ``router`` names the rule, with
    each replica's ``(period, latency)`` at its batch."""

    def __init__(self, lanes: Sequence[Lane], times: np.ndarray, classes: np.ndarray,
                 queues: Sequence[RequestQueue], n_classes: int, windows: Sequence[int],
                 limit_s: float, report: Progress, progress_s: float, router: str,
                 delays: Sequence[tuple[float, float]]) -> None:
        self.qs = list(queues)
        self.windows = list(windows)
        self.router = router
        self.delays = list(delays)
        self.weights = [1.0 / p if p > 0 else 1.0 for p, _ in delays]
        self.credit = [0.0] * len(lanes)
        self.rr = 0
        super().__init__(lanes, times, classes, self.qs[0], n_classes, sum(self.windows),
                         limit_s, report, progress_s)

    def _check(self, queue: RequestQueue) -> None:
        """Each replica batches its own requests: nothing to refuse here."""

    def served(self, names: Sequence[str], programs: Sequence[Any], tels: Sequence[Any],
               tags: dict[str, str]) -> RealServe:
        """The finished run as a ``RealServe``: resources ``{name}/{device}`` per lane (its
        program's devices, busy from its telemetry ``tels``), requests completed per lane
        (``by_replica``), the lateness and the calls."""
        resources: list[str] = []
        busy: list[float] = []
        for name, program, tel in zip(names, programs, tels, strict=True):
            devices = tuple(d.name for d in program.devices)
            resources += [f"{name}/{d}" for d in devices]
            busy += busy_s(tel, devices, self.t0_ns, self.span_s, phase=SERVE)
        result = self.result(tuple(resources), tuple(busy))
        done = self.completed()
        by = np.bincount(self.lane_of[done], minlength=len(names)) if len(done) else \
            np.zeros(len(names), dtype=np.int64)
        result = replace(result, by_replica=tuple(int(x) for x in by))
        n = len(self.times_l)
        return RealServe(result, tags, tuple(self.notes(n)), Lateness.of(self.late_s()),
                         None, tuple(self.calls), self.late_s().copy())

    def queues(self) -> list[RequestQueue]:
        return self.qs

    def _load(self, k: int) -> int:
        return len(self.qs[k]) + self.lanes[k].ex.outstanding

    def _route(self) -> int:
        n = len(self.lanes)
        if self.router == "round-robin":
            self.rr += 1
            return (self.rr - 1) % n
        if self.router == "weighted":
            total = sum(self.weights)
            for k, w in enumerate(self.weights):
                self.credit[k] += w
            best = max(range(n), key=lambda k: self.credit[k])
            self.credit[best] -= total
            return best
        if self.router == "least-delay":
            return min(range(n), key=lambda k: self._load(k) * self.delays[k][0]
                       + self.delays[k][1])
        return min(range(n), key=self._load)

    def _offer(self, i: int, now: float) -> None:
        k = int(self.classes_l[i]) if self.router == "by-class" else self._route()
        self.lane_of[i] = k
        self.lane_l[i] = k
        self._reject(self.qs[k].offer(i, self.times_l[i], self.classes_l[i]))

    def _free(self, k: int) -> bool:
        ex = self.lanes[k].ex
        return ex.outstanding < self.windows[k] and ex.can_submit

    def _dispatch(self, now: float) -> bool:
        for k in range(len(self.lanes)):
            q = self.qs[k]
            while self._free(k) and len(q):
                t = max(now, self.clock())
                ids, dropped = q.take(t)
                self._time_out(dropped)
                if not ids:
                    break
                self._submit(k, ids, t)
        return any(self._free(k) for k in range(len(self.lanes)))

    def _next_time(self, now: float) -> float:
        return min((q.next_time(now) for k, q in enumerate(self.qs) if self._free(k)),
                   default=math.inf)


def serve_replicas(plans: Sequence[Plan], workload: Workload, batcher: Batcher, *,
                   router: str = "weighted", admission: Admission | None = None,
                   priorities: Sequence[int] = (1,), windows: Sequence[int] | None = None,
                   limit_s: float = 60.0, warmup: int = 5, inputs: int = 4, seed: int = 0,
                   machine: Machine | None = None, files: Sequence[str] | None = None,
                   timeout_s: float = 120.0, progress: Progress | None = None,
                   progress_s: float = 0.5) -> RealServe:
    """Serve ``workload`` with one replica per plan on this machine, for real (module
    docstring). The result's resources are ``r{k}/{device}``; ``by_replica`` counts each
    replica's completed requests. ``InputError`` for plans that are not replicas
    (``check_replicas``) or cannot run here; nothing is left running either way."""
    # lazy: torch (runtime.opexec imports it) is heavy to import, loaded only when this runs
    from placewise.runtime.opexec import request_inputs

    report: Progress = progress or (lambda _m, _f: None)
    if router not in ROUTERS:
        raise InputError(f"unknown router {router!r} (known: {', '.join(ROUTERS)})",
                         place="--router")
    names = list(files) if files is not None else [p.model for p in plans]
    check_replicas(plans, names)
    wins = list(windows) if windows is not None else [plan_window(p) for p in plans]
    admission = admission or Admission()
    times = np.asarray(workload.times_s, dtype=float)
    n = len(times)
    classes = (np.zeros(n, dtype=np.int64) if workload.classes is None
               else np.asarray(workload.classes, dtype=np.int64))
    with contextlib.ExitStack() as stack:
        lanes: list[Lane] = []
        programs = []
        for k, plan in enumerate(plans):
            report(f"starting replica {k + 1} of {len(plans)}", 0.1 * k / len(plans))
            _, src, program = planned_program(plan, machine, None, None, names[k])
            pool = request_inputs(src, program.graph, inputs, seed)
            ex = stack.enter_context(Executor(
                program, src, reference_inputs=pool[0], slots=wins[k], inline_host=False,
                timeout_s=max(timeout_s, 100.0 * float(plan.makespan_s))))
            ex.start()
            if warmup:
                ex.run([pool[i % len(pool)] for i in range(warmup)], phase=SERVE_WARMUP)
            lanes.append(Lane(ex, pool, max(1, int(plan.batch)), name=f"r{k}"))
            programs.append(program)
        report(f"serving {n} requests over {len(plans)} replicas", 0.15)
        run = ReplicaLoop(lanes, times, classes,
                          [RequestQueue(batcher, admission, priorities) for _ in plans],
                          len(priorities), wins, limit_s, report, progress_s, router,
                          [(float(p.throughput.period_s), float(p.predicted_latency_s))
                           for p in plans])
        run.loop()
        run.drain()
        tels = [ln.ex.telemetry() for ln in lanes]
    tags = {"phase": SERVE, "router": router, "replicas": str(len(plans)),
            "batching": batcher.describe(), "admission": admission.text(),
            "windows": ",".join(map(str, wins)), "arrivals": str(n)}
    return run.served([f"r{k}" for k in range(len(plans))], programs, tels, tags)


