"""Bucketed serving: a plan or a plan set as a resident service on this machine, serving
shape traces (``adapt.trace``) block after block.

**Service.** ``open_service(plan_or_planset)`` starts one executor (``runtime.executor``)
per bucket of a plan set (a plain ``Plan`` is a plan set of one bucket, at the plan's
batch), each loading its bucket's model at the bucket's upper shape, warms each once and
keeps them resident: every ``Service.serve`` block runs on the same executors, weights
loaded once, until the service is closed (a context manager; a worker fault or Ctrl-C
closes every executor, as ``serve --real`` does). With several buckets their executors
share this machine's cores in one process: their onnxruntime sessions do not spin after a
run (an idle bucket's spinning pool threads would take the cores the next bucket's work
needs), and the calling thread is put back on each bucket's cores before its work.

**Dispatch.** A request of shape ``{batch, seq}`` goes to the smallest bucket that covers
it (``PlanSet.bucket_for``; above the envelope: ``InputError`` naming the request), and
runs as one executor request of that bucket's shape: its rows are the first ``batch`` of
the bucket's ``upper["batch"]`` and its positions the first ``seq`` of ``upper["seq"]``;
the rest is padding (the inputs are ``runtime.opexec.request_inputs`` of the bucket's
model, cycled, as ``serve --real`` makes them: dense kernels cost the same whatever the
values). Requests are never merged: a request already carries its rows.

**Order.** Every request goes through one queue (``serve.queue.RequestQueue``: admission,
then class priority, 1 the highest, first come first served within a priority) and one
open loop (``serve.real.OpenLoop``, the loop of ``serve --real``), at most ``in_flight``
executor requests in flight over all buckets together: one machine, its cores shared by
every bucket's executor.

**Padding waste.** Per executor request the padded share is ``1 - used / size`` in
elements (rows x positions; rows alone without a sequence axis); its time is that share of
the request's executor time (submit to outputs), a linear attribution (a padded row costs
what a real one costs in dense kernels). Per bucket and in all: padded rows, padded
elements, the padded share and the seconds it cost.

**Telemetry.** Each block's executor records (phase ``serve``) per bucket
(``ServedBlock.telemetry``), with the stable tags of the run (``runtime.telemetry``) and,
when ``window_requests`` is given, windowed per-term residuals in the telemetry-run format
of ``runtime.windows`` (``ServedBlock.runs``).

**Conservation**: per block ``arrived = completed + rejected + timed_out + in_flight``, in
all and per bucket.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from placewise.adapt.planset import load_plan_or_set
from placewise.adapt.trace import ShapeTrace, shape_key
from placewise.errors import InputError
from placewise.plan import Plan
from placewise.runtime.executor import Executor
from placewise.runtime.planned import plan_fingerprint as _plan_fp
from placewise.runtime.planned import planned_program
from placewise.runtime.telemetry import Telemetry, collect_tags, model_fingerprint, stable_tags
from placewise.runtime.windows import windows_from_telemetry
from placewise.serve.policies import NoBatcher
from placewise.serve.queue import Admission, RequestQueue
from placewise.serve.real import SERVE, SERVE_WARMUP, Call, Lane, Lateness, OpenLoop, busy_s
from placewise.serve.report import summarize

if TYPE_CHECKING:
    from placewise.hardware.spec import Machine
    from placewise.runtime.opexec import ModelSource
    from placewise.runtime.program import ExecProgram
    from placewise.serve.policies import Batcher
    from placewise.serve.sim import ServeResult

__all__ = ["BucketServed", "Padding", "ServedBlock", "Service", "bucket_index", "bucket_rows",
           "iter_blocks", "open_service", "padding_of", "route"]

Progress = Callable[[str, float], None]


@dataclass(frozen=True)
class Padding:
    """What padding cost: rows that ran empty (``padded_rows`` of ``rows_run``), elements
    (rows x positions) that did (``padded_elements`` of ``elements_run``), and the seconds
    of executor time attributed to them (``time_s`` of ``busy_s``)."""

    rows_run: int = 0
    padded_rows: int = 0
    elements_run: int = 0
    padded_elements: int = 0
    busy_s: float = 0.0
    time_s: float = 0.0

    @property
    def fraction(self) -> float:
        """The padded share of the elements run."""
        return self.padded_elements / self.elements_run if self.elements_run else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"rows_run": self.rows_run, "padded_rows": self.padded_rows,
                "elements_run": self.elements_run, "padded_elements": self.padded_elements,
                "padded_fraction": self.fraction, "busy_s": self.busy_s,
                "padding_time_s": self.time_s}


@dataclass(frozen=True)
class BucketServed:
    """One bucket's share of a block: its name, bounds and plan; requests ``arrived`` and
    ``completed`` (the rest rejected, timed out or in flight), executor requests
    (``calls``), latency percentiles of its completed requests, its padding, and its
    telemetry of the block (``None`` when it ran nothing)."""

    name: str
    lower: dict[str, int]
    upper: dict[str, int]
    plan_index: int
    arrived: int
    completed: int
    calls: int
    p50_s: float
    p99_s: float
    mean_s: float
    padding: Padding
    telemetry: Telemetry | None = None
    run: Any = None  # runtime.windows.TelemetryRun, when windows were asked for

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "lower": dict(self.lower), "upper": dict(self.upper),
                "plan_index": self.plan_index, "arrived": self.arrived,
                "completed": self.completed, "calls": self.calls,
                "p50_s": _num(self.p50_s), "p99_s": _num(self.p99_s),
                "mean_s": _num(self.mean_s), "padding": self.padding.to_json(),
                "telemetry_requests": 0 if self.telemetry is None
                else len(self.telemetry.requests)}


def _num(x: float) -> float | None:
    return None if not math.isfinite(x) else float(x)


@dataclass(frozen=True)
class ServedBlock:
    """One ``Service.serve`` block (module docstring): the figures as ``serve --real``
    reports them (``result``; its per-request arrays are the completed requests in
    arrival order), per request of the trace its bucket (``bucket_of``, an index into
    ``buckets``), ``latency_s`` and ``wait_s`` (``nan`` unless completed); per bucket its
    share; the padding in all; the run's stable ``tags``; notes; the generator's
    lateness."""

    result: ServeResult
    bucket_of: np.ndarray
    latency_s: np.ndarray
    wait_s: np.ndarray
    buckets: tuple[BucketServed, ...]
    padding: Padding
    tags: dict[str, str]
    notes: tuple[str, ...]
    late_s: Lateness
    index: int = 0

    @property
    def telemetry(self) -> dict[str, Telemetry]:
        """Bucket name -> its telemetry of this block (buckets that ran something)."""
        return {b.name: b.telemetry for b in self.buckets if b.telemetry is not None}

    @property
    def runs(self) -> dict[str, Any]:
        """Bucket name -> its ``TelemetryRun`` (when ``window_requests`` was given)."""
        return {b.name: b.run for b in self.buckets if b.run is not None}

    def bucket(self, name: str) -> BucketServed:
        for b in self.buckets:
            if b.name == name:
                return b
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        """Per bucket and in all (no per-request arrays; ``serve --json``)."""
        return {"block": self.index, **summarize(self.result),
                "buckets": [b.to_json() for b in self.buckets],
                "padding": self.padding.to_json(), "tags": dict(self.tags),
                "notes": list(self.notes),
                "late_s": {k: _num(getattr(self.late_s, k)) if k != "n" else self.late_s.n
                           for k in self.late_s.__slots__}}


@dataclass
class _Bucket:
    """A started bucket: its description, plan, program and lane."""

    name: str
    lower: dict[str, int]
    upper: dict[str, int]
    plan_index: int
    plan: Plan
    program: ExecProgram
    lane: Lane
    base: Any = None  # the plan set's Bucket (None for a plain plan)


@dataclass
class Service:
    """Resident executors of a plan or plan set (``open_service``; module docstring)."""

    buckets: list[_Bucket]
    plan_set: Any
    priorities: tuple[int, ...]
    admission: Admission
    in_flight: int
    seed: int
    tags: dict[str, str]
    file: str | None = None
    _stack: ExitStack = field(default_factory=ExitStack)
    _blocks: int = 0
    _closed: bool = False

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop every executor (safe to call more than once)."""
        if not self._closed:
            self._closed = True
            self._stack.close()

    @property
    def bucket_names(self) -> tuple[str, ...]:
        return tuple(b.name for b in self.buckets)

    @property
    def executors(self) -> dict[str, Executor]:
        """Bucket name -> its resident executor."""
        return {b.name: b.lane.ex for b in self.buckets}

    def worker_pids(self) -> dict[str, dict[str, int]]:
        """Bucket name -> device -> the pid of its worker process (the devices run in this
        process have none)."""
        return {b.name: b.lane.ex.worker_pids for b in self.buckets}

    def bucket_for(self, shape: Mapping[str, int]) -> int:
        """The index of the bucket that serves ``shape`` (``InputError`` when none does)."""
        return bucket_index(self.plan_set, self.bucket_names, self.buckets[0].upper, shape)

    def serve(self, trace: ShapeTrace, *, limit_s: float = 60.0,
              window_requests: int | None = None, batcher: Batcher | None = None,
              warmup: int = 0, admission: Admission | None = None,
              progress: Progress | None = None, progress_s: float = 0.5) -> ServedBlock:
        """Serve ``trace`` (its arrivals on this block's clock) on the resident executors
        (module docstring); at most ``limit_s`` seconds. ``warmup``: untimed executor
        requests per bucket first. ``window_requests``: per-bucket telemetry windows of
        that many executor requests (``runtime.windows``). ``batcher``: for a plain plan
        serving one-row requests, a batcher that merges them (default: none).
        ``admission``: this block's queue policy (default: the service's)."""
        if self._closed:
            raise InputError("the service is closed", place="serve")
        report: Progress = progress or (lambda _m, _f: None)
        if not (limit_s > 0 and math.isfinite(limit_s)):
            raise InputError(f"the wall limit must be > 0 seconds, got {limit_s}",
                             place="--limit")
        times, classes, lane_of, rows, seqs = self._requests(trace)
        if warmup:
            for b in self.buckets:
                b.lane.ex.run([b.lane.pool[i % len(b.lane.pool)] for i in range(warmup)],
                              phase=SERVE_WARMUP)
        phase = f"{SERVE}:{self._blocks}"
        run = OpenLoop([b.lane for b in self.buckets], times, classes,
                       RequestQueue(batcher or NoBatcher(), admission or self.admission,
                                    self.priorities),
                       len(self.priorities), self.in_flight, limit_s, report, progress_s,
                       lane_of=lane_of, rows=rows, seqs=seqs, phase=phase)
        held = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        try:
            run.loop()
            run.drain()
        except BaseException:
            self.close()
            raise
        finally:
            if held is not None and len(self.buckets) > 1:
                os.sched_setaffinity(0, held)
        block = self._block(run, trace, phase, window_requests)
        self._blocks += 1
        return block

    def _requests(self, trace: ShapeTrace) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                    np.ndarray, np.ndarray | None]:
        return route(trace, self.bucket_for, len(self.priorities))

    def _block(self, run: OpenLoop, trace: ShapeTrace, phase: str,
               window_requests: int | None) -> ServedBlock:
        tels = [_phase_telemetry(b.lane.ex.telemetry(), phase) for b in self.buckets]
        devices = tuple(dict.fromkeys(d.name for b in self.buckets
                                      for d in b.program.devices))
        every = Telemetry({}, (), (), tuple(t for x in tels for t in x.tasks), (), (), ())
        result = run.result(devices, busy_s(every, devices, run.t0_ns, run.span_s))
        n = len(trace)
        arrived = np.zeros(n, dtype=bool)
        arrived[: run.nxt] = True
        done = np.zeros(n, dtype=bool)
        done[run.completed()] = True
        tags = {**self.tags, "arrival": _arrival_tag(trace), "phase": SERVE,
                "block": str(self._blocks), "requests": str(n)}
        out: list[BucketServed] = []
        batches = [b.lane.batch for b in self.buckets]
        for k, b in enumerate(self.buckets):
            mine = run.lane_of == k
            lat = run.latency[mine & done]
            calls = [c for c in run.calls if c.lane == k]
            tel = tels[k] if tels[k].requests else None
            if tel is not None:
                tel = dataclasses.replace(tel, tags={
                    **tel.tags, **tags, **_tags_of(b, self.seed), "arrival": tags["arrival"],
                    "bucket": b.name})
            out.append(BucketServed(
                b.name, dict(b.lower), dict(b.upper), b.plan_index, int((mine & arrived).sum()),
                int((mine & done).sum()), len(calls), _q(lat, 0.5), _q(lat, 0.99),
                float(lat.mean()) if len(lat) else math.nan, padding_of(calls, batches),
                tel, _windows(b, tel, window_requests, tags)))
        lat_all = np.full(n, math.nan)
        lat_all[: run.nxt] = np.where(done[: run.nxt], run.latency[: run.nxt], math.nan)
        wait_all = np.full(n, math.nan)
        wait_all[: run.nxt] = np.where(done[: run.nxt], run.wait[: run.nxt], math.nan)
        notes = list(run.notes(n))
        if any(b.upper.get("seq") is None for b in self.buckets) and "seq" in trace.axes:
            notes.append("the plan has no sequence axis: sequence positions are not padded "
                         "or counted")
        return ServedBlock(result, run.lane_of.copy(), lat_all, wait_all, tuple(out),
                           padding_of(run.calls, batches), tags, tuple(notes),
                           Lateness.of(run.late_s()), self._blocks)


def bucket_index(plan_set: Any, names: Sequence[str], plain_upper: Mapping[str, int],
                 shape: Mapping[str, int]) -> int:
    """The index (into ``names``) of the bucket of ``plan_set`` that serves ``shape``; a
    plain plan (``plan_set`` None) serves every shape up to its batch (``plain_upper``).
    ``InputError`` when none does."""
    if plan_set is None:
        rows = int(shape.get("batch", 1))
        if rows > int(plain_upper["batch"]):
            raise InputError(f"a request of batch {rows} is larger than the plan's batch of "
                             f"{plain_upper['batch']}", place=shape_key(shape))
        return 0
    return list(names).index(plan_set.bucket_for(shape).name)


def route(trace: ShapeTrace, bucket_for: Callable[[Mapping[str, int]], int], n_classes: int
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """The trace as the open loop's arrays: arrival times, classes, each request's bucket
    (``bucket_for``), rows and sequence positions (``None`` without a sequence axis);
    ``InputError`` naming the request for a class without a priority or a shape no bucket
    serves."""
    n = len(trace)
    classes = np.asarray(trace.classes, dtype=np.int64)
    if n and int(classes.max()) >= n_classes:
        i = int(np.flatnonzero(classes >= n_classes)[0])
        raise InputError(f"class {int(classes[i])} of request {i} has no priority (the "
                         f"service has {n_classes} class(es))", file=trace.file,
                         place=f"request {i}: class")
    cache: dict[str, int] = {}
    lane_of = np.zeros(n, dtype=np.int64)
    for i, s in enumerate(trace.shapes):
        key = shape_key(s)
        if key not in cache:
            try:
                cache[key] = bucket_for(s)
            except InputError as exc:
                raise InputError(exc.problem, file=trace.file,
                                 place=f"request {i} ({key})") from None
        lane_of[i] = cache[key]
    rows = np.array([int(s.get("batch", 1)) for s in trace.shapes], dtype=np.int64)
    has_seq = bool(n) and "seq" in trace.shapes[0]
    seqs = (np.array([int(s["seq"]) for s in trace.shapes], dtype=np.int64)
            if has_seq else None)
    return np.asarray(trace.arrivals_s, dtype=float), classes, lane_of, rows, seqs


def _q(x: np.ndarray, q: float) -> float:
    return float(np.quantile(x, q)) if len(x) else math.nan


def padding_of(calls: Sequence[Call], batches: Sequence[int]) -> Padding:
    """The padding of ``calls`` (``batches[lane]``: the rows one executor request of that
    lane holds)."""
    return Padding(
        rows_run=sum(batches[c.lane] for c in calls),
        padded_rows=sum(batches[c.lane] - c.rows for c in calls),
        elements_run=sum(c.size for c in calls),
        padded_elements=sum(c.size - c.used for c in calls),
        busy_s=float(sum(c.service_s for c in calls)),
        time_s=float(sum(c.service_s * c.padded_fraction for c in calls)))


def _phase_telemetry(tel: Telemetry, phase: str) -> Telemetry:
    """The records of one block (``phase``), as phase ``serve``."""
    def keep(recs: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(dataclasses.replace(r, phase=SERVE) for r in recs if r.phase == phase)

    return dataclasses.replace(tel, requests=keep(tel.requests), tasks=keep(tel.tasks),
                               ops=keep(tel.ops), waits=keep(tel.waits))


def _arrival_tag(trace: ShapeTrace) -> str:
    """The arrival process: the trace (its file, or a digest of its contents)."""
    h = hashlib.sha256()
    for t, s, c in zip(trace.arrivals_s, trace.shapes, trace.classes, strict=True):
        h.update(f"{t:.9f}|{shape_key(s)}|{c};".encode())
    what = os.path.basename(trace.file) if trace.file else "generated"
    return f"trace:{what}:{h.hexdigest()[:16]}:{len(trace)} requests"


def _windows(b: _Bucket, tel: Telemetry | None, window_requests: int | None,
             tags: Mapping[str, str]) -> Any:
    """The bucket's telemetry windows (``runtime.windows``), when asked for."""
    if window_requests is None or tel is None:
        return None

    return windows_from_telemetry(b.plan, tel, window_requests=window_requests,
                                  tags=dict(tel.tags), program=b.program, phases=(SERVE,),
                                  bucket=b.name)


def _tags_of(b: _Bucket, seed: int, *, plan_fingerprint: str | None = None
             ) -> dict[str, str]:
    """The stable tags of a bucket's runs (``runtime.telemetry.stable_tags``; the arrival
    is set per block), plus the volatile ones of ``collect_tags``."""
    threads = {d.device: d.threads for d in b.lane.ex.telemetry().devices}
    devices = [(d.name, tuple(d.cores or ()), int(threads.get(d.name, 0)), str(d.backend))
               for d in b.program.devices]
    return {**collect_tags(devices), **stable_tags(
        model_fingerprint=model_fingerprint(b.plan.model),
        graph_fingerprint=b.program.graph.fingerprint(),
        plan_fingerprint=plan_fingerprint or _plan_fp(b.plan),
        calibration_fingerprint=b.plan.fingerprints.calibration, arrival="none", seed=seed,
        devices=devices)}


def _start_bucket(name: str, lower: Mapping[str, int], upper: Mapping[str, int],
                  plan_index: int, plan: Plan, model: ModelSource | str | None,
                  shapes: Any, machine: Machine | None, file: str | None, *, inputs: int,
                  seed: int, in_flight: int, timeout_s: float, warmup: int,
                  opts: Mapping[str, Any], stack: ExitStack, report: Callable[[str], None],
                  base: Any = None) -> tuple[_Bucket, Machine]:
    """Load a bucket's model, check its plan, start and warm its executor (closed with
    ``stack``)."""
    # lazy: torch (runtime.opexec imports it) is heavy to import, loaded only when this runs
    from placewise.runtime.opexec import request_inputs

    machine, src, program = planned_program(plan, machine, model, shapes, file)
    pool = request_inputs(src, program.graph, inputs, seed)
    ex = stack.enter_context(Executor(
        program, src, reference_inputs=pool[0], slots=in_flight,
        timeout_s=max(timeout_s, 100.0 * float(plan.makespan_s)), **dict(opts)))
    ex.start(report)
    if warmup:
        ex.run([pool[i % len(pool)] for i in range(warmup)], phase=SERVE_WARMUP)
    rows = int(upper.get("batch") or max(1, int(plan.batch)))
    pin = (frozenset(os.sched_getaffinity(0)) if ex.in_process
           and hasattr(os, "sched_getaffinity") else None)
    lane = Lane(ex, pool, rows, upper.get("seq"), name, pin)
    return _Bucket(name, dict(lower), dict(upper), plan_index, plan, program, lane, base), \
        machine


def bucket_rows(plan_or_set: Any) -> tuple[Any, list[tuple[Any, ...]], str | None]:
    """(the plan set or None, per bucket (name, lower, upper, plan index, plan, model,
    shapes, bucket), the file)."""
    file: str | None = None
    if isinstance(plan_or_set, str | os.PathLike):
        file = os.fspath(plan_or_set)
        plan_or_set = load_plan_or_set(file)
    if isinstance(plan_or_set, Plan):
        p = plan_or_set
        b = max(1, int(p.batch))
        return None, [("plan", {"batch": 1}, {"batch": b}, 0, p, None, None, None)], file
    ps = plan_or_set
    rows = [(bk.name, dict(bk.lower), dict(bk.upper), int(bk.plan_index), ps.plan_of(bk),
             bk.model_ref, bk.shapes, bk) for bk in ps.buckets]
    return ps, rows, file


def open_service(plan_or_planset: Any, *, priorities: Sequence[int] = (1,), seed: int = 0,
                 admission: Admission | None = None, in_flight: int = 1, warmup: int = 3,
                 inputs: int = 2, machine: Machine | None = None,
                 source: ModelSource | str | None = None,
                 shapes: Mapping[str, Sequence[int]] | None = None, timeout_s: float = 120.0,
                 progress: Progress | None = None,
                 executor_options: Mapping[str, Any] | None = None) -> Service:
    """Start the resident service of a ``Plan``, a ``PlanSet`` or either's file (module
    docstring). ``priorities[c]``: class ``c``'s priority (1 = highest); ``admission``:
    the queue policy (default: unbounded, no timeout); ``in_flight``: executor requests
    in flight at once over every bucket; ``warmup``: untimed requests per bucket at
    start-up; ``inputs``: distinct inputs per bucket generated from ``seed`` and cycled;
    ``machine``: this machine (default: probed, as ``validate`` does); ``source`` and
    ``shapes``: a plain plan's model, if moved, and its input bindings (a plan set's
    buckets name their own). Raises ``InputError`` for a plan that cannot run here,
    ``ExecutionError`` when a worker fails; nothing is left running then."""
    for name, v in (("in_flight", in_flight), ("inputs", inputs)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InputError(f"must be a positive integer, got {v!r}", place=name)
    if not priorities or any(isinstance(p, bool) or int(p) < 1 for p in priorities):
        raise InputError("priorities are integers >= 1 (1 = highest)", place="priorities")
    report: Progress = progress or (lambda _m, _f: None)
    ps, rows, file = bucket_rows(plan_or_planset)
    stack = ExitStack()
    buckets: list[_Bucket] = []
    tags: dict[str, str] = {}
    try:
        for k, (name, lower, upper, idx, plan, model, bshapes, base) in enumerate(rows):
            report(f"starting bucket {name} ({k + 1} of {len(rows)})", k / max(len(rows), 1))
            b, machine = _start_bucket(
                name, lower, upper, idx, plan, model if model is not None else source,
                bshapes if bshapes is not None else shapes, machine, file, inputs=inputs,
                seed=seed, in_flight=in_flight, timeout_s=timeout_s, warmup=warmup,
                opts={**({"session_spinning": False} if len(rows) > 1 else {}),
                      **(executor_options or {})},
                stack=stack, report=lambda m: None, base=base)
            buckets.append(b)
        tags = _tags_of(buckets[0], seed, plan_fingerprint=None if ps is None
                        else str(ps.fingerprint()))
        if ps is not None:  # a plan set is of one model, whatever shape its first bucket binds
            tags["model_fingerprint"] = model_fingerprint(ps.model)
    except BaseException:
        stack.close()
        raise
    report("ready", 1.0)
    return Service(buckets, ps, tuple(int(p) for p in priorities), admission or Admission(),
                   in_flight, seed, tags, file, stack)


def iter_blocks(service: Service, trace: ShapeTrace, block_requests: int, **kw: Any
                ) -> Iterator[ServedBlock]:
    """Serve ``trace`` in consecutive blocks of ``block_requests`` requests (each block's
    times rebased to its first arrival)."""
    for start in range(0, len(trace), block_requests):
        yield service.serve(trace.slice(start, start + block_requests), **kw)
