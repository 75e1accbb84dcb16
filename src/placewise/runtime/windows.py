"""Telemetry runs: what the executor measured, cut into windows of requests and lined up
with the plan's cost terms, one key per term that recalibration can correct.

``windows_from_telemetry(plan, telemetry, window_requests=..., tags=...)`` turns an
executor session's ``placewise.runtime.telemetry.Telemetry`` (task names are the plan's:
a compute task is a partition of ``runtime.program``, whose plan tasks
``runtime.planned.predicted_tasks`` sums) into a ``TelemetryRun``: per window of
``window_requests`` consecutive requests (in submission order; warm-up and capture left
out), per key, the median of the measured seconds per request next to the plan's predicted
seconds and interval. The keys (``TermWindow.kind``):

- ``compute`` per region set and device (``compute:{device}:{n}r:{digest}``; ``regions``
  are the ``cost.calibrated.region_key`` of the partition's vertices, so a replan that keeps
  the regions keeps the key): measured kernel time (``kernel_ns`` + hidden conversions) of
  the requests where no other device computed at the same time, against the task's
  duration less its launch and contention terms;
- ``launch`` per device (``launch:{device}``): the executor's time around kernels (the
  step's duration less kernel time: step bookkeeping and the partition's ``session.run``
  call), summed over the device's compute steps of a request, against the plan's launch
  terms;
- ``launch`` of the request hand-off on the host (``request:{host}``): client and host
  worker between the request's submission and its first step, and between its last step
  and its outputs (the plan's ``request`` term, zero where the cost model did not measure
  it), from the requests that ran alone (no other request's steps in between: the
  isolated ones);
- ``transfer`` per link (``transfer:{src}->{dst}``): the transfers' measured durations
  summed per request, against the plan's transfer tasks on that link, from the requests
  that ran alone (a pipelined request's transfer also waits for its busy receiver: that
  is queueing, which the scheduler models, not the link);
- ``contention`` per region set and device, where tasks overlapped: in-run kernel time of
  the requests where another device computed at the same time, less the uncontended kernel
  time (``base_s``: the solo replay's, else the median uncontended in-run one), against the
  plan's contention term.

Each term's interval is the plan task's interval carried over: for compute and launch in
proportion (``lo = predicted x low_s / duration_s``), for contention and transfer as the
task's own margins. ``spread_s`` is half the p10..p90 range of the per-request values in the
window. Terms a request lacks (no overlap, no transfer) have no sample there.

The file (``save_telemetry_run`` / ``load_telemetry_run``, JSON, ``"format":
"placewise-telemetry"``, ``"version": 1``) carries the run's stable tags
(``runtime.telemetry.stable_tags``), the plan and calibration fingerprints, the bucket
(plan sets) and the windows; a bad file is a ``SpecError`` naming the place.

>>> w = TermWindow("launch", "launch:cpu0", "cpu0", "", 1e-5, 8e-6, 1.2e-5, 2e-5, 1e-6, 10)
>>> w.outside, w.side
(True, 1)
"""

from __future__ import annotations

import bisect
import hashlib
import math
import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from placewise.cost.calibrated import region_key
from placewise.cost.model import Term
from placewise.errors import InputError, SpecError
from placewise.io import atomic_write_json, load_json
from placewise.runtime.planned import plan_fingerprint, planned_program, predicted_tasks

if TYPE_CHECKING:
    from placewise.plan import Plan
    from placewise.plan import TaskRecord as PlanTask
    from placewise.runtime.program import ExecProgram
    from placewise.runtime.telemetry import TaskRecord, Telemetry

__all__ = [
    "SKIPPED_PHASES",
    "TELEMETRY_FORMAT",
    "TELEMETRY_VERSION",
    "TERM_KINDS",
    "TelemetryRun",
    "TermWindow",
    "Window",
    "concat_runs",
    "load_telemetry_run",
    "save_telemetry_run",
    "windows_from_telemetry",
]

TELEMETRY_FORMAT = "placewise-telemetry"
TELEMETRY_VERSION = 1
TERM_KINDS = ("compute", "transfer", "launch", "contention")
#: request phases that are not measurements of the plan at work
SKIPPED_PHASES = ("warmup", "capture")
_MAX_WINDOWS = 100_000


@dataclass(frozen=True, slots=True)
class TermWindow:
    """One key in one window: measured median against the plan's prediction (seconds)."""

    kind: str
    key: str
    device: str
    link: str
    predicted_s: float
    lo_s: float
    hi_s: float
    measured_s: float
    spread_s: float
    samples: int
    regions: tuple[str, ...] = ()
    base_s: float = 0.0  # contention: the uncontended kernel time it is measured above

    @property
    def side(self) -> int:
        """+1 above the interval, -1 below it, 0 inside."""
        if self.measured_s > self.hi_s:
            return 1
        if self.measured_s < self.lo_s:
            return -1
        return 0

    @property
    def outside(self) -> bool:
        return self.side != 0

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind, "key": self.key, "device": self.device,
                             "link": self.link, "predicted_s": self.predicted_s,
                             "lo_s": self.lo_s, "hi_s": self.hi_s,
                             "measured_s": self.measured_s, "spread_s": self.spread_s,
                             "samples": self.samples}
        if self.regions:
            d["regions"] = list(self.regions)
        if self.base_s:
            d["base_s"] = self.base_s
        return d


@dataclass(frozen=True, slots=True)
class Window:
    """``requests`` consecutive requests (``index``: the window's position in the run)."""

    index: int
    requests: int
    terms: tuple[TermWindow, ...]

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "requests": self.requests,
                "terms": [t.to_json() for t in self.terms]}


@dataclass(frozen=True)
class TelemetryRun:
    """A run's windows with what makes it comparable (see the module docstring)."""

    tags: Mapping[str, str]
    plan_fingerprint: str
    calibration_fingerprint: str
    windows: tuple[Window, ...]
    bucket: str | None = None
    window_requests: int = 0
    notes: tuple[str, ...] = field(default=())

    def keys(self) -> list[str]:
        """Every key the run measured, in first-seen order."""
        return list(dict.fromkeys(t.key for w in self.windows for t in w.terms))

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "format": TELEMETRY_FORMAT, "version": TELEMETRY_VERSION, "tags": dict(self.tags),
            "plan_fingerprint": self.plan_fingerprint,
            "calibration_fingerprint": self.calibration_fingerprint,
            "window_requests": self.window_requests,
            "windows": [w.to_json() for w in self.windows], "notes": list(self.notes)}
        if self.bucket is not None:
            d["bucket"] = self.bucket
        return d

    @classmethod
    def from_json(cls, data: Any, *, file: str) -> TelemetryRun:
        """Validate a decoded telemetry run file (``SpecError`` naming the place)."""
        return _parse_run(data, file)


# ---- building windows from an executor's telemetry ------------------------------------------


def _digest(regions: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(regions).encode()).hexdigest()[:12]


def _task_regions(plan: Plan, program: ExecProgram) -> dict[str, tuple[str, ...]]:
    """Record name (a partition, or a plan compute task) -> the ``region_key`` of each of
    its plan vertices (the plan's regions at their assigned precision)."""
    def of(vertex: str) -> str | None:
        reg = plan.regions.get(vertex)
        if reg is None:
            return None
        try:
            ops = [program.graph.op(o) for o in reg.ops]
            return region_key(program.graph, ops, plan.assignment(vertex).dtype)
        except Exception:  # an op the graph lacks: no key, the term is left out
            return None

    out: dict[str, tuple[str, ...]] = {}
    for name in plan.regions:
        rk = of(name)
        if rk is not None:
            out[name] = (rk,)
    for p in program.partitions:
        out[p.name] = tuple(rk for t in p.tasks if (rk := of(t)) is not None)
    return out


def _overlaps(records: Sequence[TaskRecord]) -> set[int]:
    """Indices of compute records during which another device computed."""
    by_dev: dict[str, list[tuple[int, int]]] = {}
    for r in records:
        by_dev.setdefault(r.device, []).append((r.start_ns, r.end_ns))
    for iv in by_dev.values():
        iv.sort()
    starts = {d: [a for a, _ in iv] for d, iv in by_dev.items()}
    ends = {d: _running_max([b for _, b in iv]) for d, iv in by_dev.items()}
    hit: set[int] = set()
    for i, r in enumerate(records):
        for d in by_dev:
            if d == r.device:
                continue
            # intervals of d that start before r ends, and the latest end among them
            j = bisect.bisect_left(starts[d], r.end_ns)
            if j > 0 and ends[d][j - 1] > r.start_ns:
                hit.add(i)
                break
    return hit


def _alone(reqs: Sequence[Any]) -> set[int]:
    """Requests whose submission-to-outputs span overlaps no other request's."""
    spans = sorted((r.submit_ns, r.outputs_ns, r.request) for r in reqs)
    out: set[int] = set()
    reach = -1  # the latest end among the spans before
    for i, (a, b, rid) in enumerate(spans):
        after = i + 1 < len(spans) and spans[i + 1][0] < b
        if reach <= a and not after:
            out.add(rid)
        reach = max(reach, b)
    return out


def _request_term(plan: Plan, r: Any, recs: Sequence[TaskRecord]) -> _Acc | None:
    """The request hand-off on the host: submission -> first step, last step -> outputs."""
    steps = [t for t in recs if t.kind in ("compute", "transfer", "conversion")]
    if not steps:
        return None
    first = min(t.start_ns for t in steps)
    last = max(t.end_ns for t in steps)
    meas = max(first - r.submit_ns, 0) / 1e9 + max(r.outputs_ns - last, 0) / 1e9
    q = plan.request
    a = _Acc("launch", plan.host, "", ())
    a.measured = meas
    if q is not None:
        a.predicted, a.lo, a.hi = q.latency_s, q.low_s, q.high_s
    return a


def _running_max(xs: list[int]) -> list[int]:
    out, m = [], -1
    for x in xs:
        m = max(m, x)
        out.append(m)
    return out


@dataclass(slots=True)
class _Acc:
    """Per (request, key): sums of measured and predicted seconds."""

    kind: str
    device: str
    link: str
    regions: tuple[str, ...]
    measured: float = 0.0
    predicted: float = 0.0
    lo: float = 0.0
    hi: float = 0.0
    base: float = 0.0


def _rel(pred: float, pt: PlanTask) -> tuple[float, float]:
    d = pt.duration_s
    if d <= 0:
        return pred, pred
    return pred * pt.low_s / d, pred * pt.high_s / d


def _request_terms(recs: Sequence[TaskRecord], overlapped: set[int],
                   pred: Mapping[str, PlanTask], regions: Mapping[str, tuple[str, ...]],
                   base: Mapping[str, float]) -> dict[str, _Acc]:
    """One request's measured and predicted seconds per key."""
    acc: dict[str, _Acc] = {}

    def add(key: str, kind: str, dev: str, link: str, regs: tuple[str, ...], m: float,
            p: float, lo: float, hi: float, b: float = 0.0) -> None:
        a = acc.setdefault(key, _Acc(kind, dev, link, regs))
        a.measured += m
        a.predicted += p
        a.lo += lo
        a.hi += hi
        a.base += b

    for i, r in enumerate(recs):
        pt = pred.get(r.task)
        if pt is None:
            continue
        dur = r.duration_ns / 1e9
        if r.kind == "transfer":
            link = f"{r.device}->{r.dst_device}"
            add(f"transfer:{link}", "transfer", r.device, link, (), dur, pt.duration_s,
                pt.low_s, pt.high_s)
            continue
        if r.kind != "compute":
            continue
        kern = (r.kernel_ns + r.hidden_conversion_ns) / 1e9
        launch_p = pt.term(Term.LAUNCH)
        lo, hi = _rel(launch_p, pt)
        add(f"launch:{r.device}", "launch", r.device, "", (), max(dur - kern, 0.0),
            launch_p, lo, hi)
        regs = regions.get(r.task, ())
        if not regs:
            continue
        tail = f"{r.device}:{len(regs)}r:{_digest(regs)}"
        kern_p = max(pt.duration_s - launch_p - pt.contention_s, 0.0)
        if i in overlapped:
            b = base.get(r.task, kern)
            add(f"contention:{tail}", "contention", r.device, "", regs, max(kern - b, 0.0),
                pt.contention_s, max(pt.contention_s - (pt.duration_s - pt.low_s), 0.0),
                pt.contention_s + (pt.high_s - pt.duration_s), b)
        else:
            lo, hi = _rel(kern_p, pt)
            add(f"compute:{tail}", "compute", r.device, "", regs, kern, kern_p, lo, hi)
    return acc


def _q(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    k = (len(s) - 1) * q
    i = math.floor(k)
    j = min(i + 1, len(s) - 1)
    return s[i] + (s[j] - s[i]) * (k - i)


def _window(index: int, per_request: Sequence[Mapping[str, _Acc]]) -> Window:
    keys = list(dict.fromkeys(k for r in per_request for k in r))
    terms: list[TermWindow] = []
    for key in keys:
        got = [r[key] for r in per_request if key in r]
        first = got[0]
        meas = [a.measured for a in got]
        terms.append(TermWindow(
            first.kind, key, first.device, first.link,
            statistics.median(a.predicted for a in got), statistics.median(a.lo for a in got),
            statistics.median(a.hi for a in got), statistics.median(meas),
            (_q(meas, 0.9) - _q(meas, 0.1)) / 2, len(got), first.regions,
            statistics.median(a.base for a in got) if first.kind == "contention" else 0.0))
    return Window(index, len(per_request), tuple(terms))


def _uncontended_base(tel: Telemetry, overlapped: set[int],
                      compute: Sequence[TaskRecord]) -> dict[str, float]:
    """Per compute record name: the solo replay's kernel time, else the median in-run
    kernel time of its uncontended runs."""
    base = {s.task: s.kernel_s + s.hidden_conversion_s for s in tel.solo}
    free: dict[str, list[float]] = {}
    for i, r in enumerate(compute):
        if i not in overlapped:
            free.setdefault(r.task, []).append((r.kernel_ns + r.hidden_conversion_ns) / 1e9)
    for name, xs in free.items():
        base.setdefault(name, statistics.median(xs))
    return base


def windows_from_telemetry(plan: Plan, telemetry: Telemetry, *, window_requests: int,
                           tags: Mapping[str, str], program: ExecProgram | None = None,
                           phases: Sequence[str] | None = None, bucket: str | None = None
                           ) -> TelemetryRun:
    """Cut ``telemetry`` (of ``plan`` run by the executor) into windows of
    ``window_requests`` requests and line each key up with the plan (module docstring).

    ``program``: the program the executor ran (default: built from the plan, its model and
    this machine); ``phases``: the request phases to use (default: every phase but warm-up
    and capture); a last window of fewer than half ``window_requests`` requests joins the one
    before it. ``tags``: the run's stable tags, stored as they are. ``InputError`` for a
    window size below 1 or telemetry without a request of those phases.
    """
    if window_requests < 1:
        raise InputError(f"window_requests must be >= 1, got {window_requests}",
                         place="--window-requests")
    if program is None:
        program = _program_of(plan)
    reqs = sorted((r for r in telemetry.requests
                   if (r.phase in phases if phases is not None else
                       r.phase not in SKIPPED_PHASES)), key=lambda r: r.submit_ns)
    if not reqs:
        raise InputError("the telemetry holds no request of the measured phases "
                         f"({', '.join(phases) if phases else 'all but warm-up and capture'})",
                         place="requests")
    pred = predicted_tasks(plan, program)
    regions = _task_regions(plan, program)
    keep = {r.request for r in reqs}
    compute = [t for t in telemetry.tasks if t.kind == "compute" and t.request in keep]
    overlapped = _overlaps(compute)
    base = _uncontended_base(telemetry, overlapped, compute)
    by_req: dict[int, list[tuple[int, TaskRecord]]] = {}
    for i, t in enumerate(compute):
        by_req.setdefault(t.request, []).append((i, t))
    alone = _alone(reqs)
    for t in telemetry.tasks:  # a transfer of a pipelined request also waits for its receiver
        if t.kind == "transfer" and t.request in alone:
            by_req.setdefault(t.request, []).append((-1, t))
    per_request: list[dict[str, _Acc]] = []
    for r in reqs:
        items = by_req.get(r.request, [])
        ov = {k for k, (i, _) in enumerate(items) if i in overlapped}
        terms = _request_terms([t for _, t in items], ov, pred, regions, base)
        if r.request in alone and (rq := _request_term(plan, r, [t for _, t in items])):
            terms[f"request:{plan.host}"] = rq
        per_request.append(terms)
    chunks = [per_request[i:i + window_requests]
              for i in range(0, len(per_request), window_requests)]
    if len(chunks) > 1 and 2 * len(chunks[-1]) < window_requests:
        tail = chunks.pop()  # (popped first: with two chunks, [-2] is gone after the pop)
        chunks[-1] = chunks[-1] + tail
    windows = tuple(_window(i, c) for i, c in enumerate(chunks))
    notes = (f"{len(reqs)} requests of phases "
             f"{', '.join(sorted({r.phase for r in reqs}))} in {len(windows)} windows",)
    return TelemetryRun(dict(tags), plan_fingerprint(plan), plan.fingerprints.calibration,
                        windows, bucket, window_requests, notes)


def concat_runs(runs: Sequence[TelemetryRun]) -> TelemetryRun:
    """One run of the windows of ``runs`` (of one plan, e.g. one per phase) in order,
    renumbered; tags, fingerprints and bucket of the first."""
    if not runs:
        raise InputError("no telemetry run to join")
    first = runs[0]
    windows: list[Window] = []
    for run in runs:
        for w in run.windows:
            windows.append(Window(len(windows), w.requests, w.terms))
    return TelemetryRun(first.tags, first.plan_fingerprint, first.calibration_fingerprint,
                        tuple(windows), first.bucket, first.window_requests,
                        tuple(n for run in runs for n in run.notes))


def _program_of(plan: Plan) -> ExecProgram:
    """The program the executor runs for ``plan`` on this machine (its model loaded as
    planned)."""
    return planned_program(plan, None, None, None, None)[2]


# ---- the file --------------------------------------------------------------------------------


def save_telemetry_run(run: TelemetryRun, path: str | os.PathLike[str]) -> None:
    """Write ``run`` as JSON, atomically (the file appears only when complete)."""
    atomic_write_json(path, run.to_json())


def load_telemetry_run(path: str | os.PathLike[str]) -> TelemetryRun:
    """Read and validate a telemetry run file (``SpecError`` naming file, place, problem)."""
    file = os.fspath(path)
    return _parse_run(load_json(file, what="telemetry run", error=SpecError), file)


def _num(d: Mapping[str, Any], k: str, file: str, place: str, *, integer: bool = False
         ) -> float:
    v = d.get(k)
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not ok \
            or not math.isfinite(float(v)) or float(v) < 0:
        raise SpecError(f"{k} must be a finite {'integer' if integer else 'number'} >= 0, got "
                        f"{v!r}", file=file, place=f"{place}.{k}")
    return float(v)


def _str(d: Mapping[str, Any], k: str, file: str, place: str, default: str | None = None
         ) -> str:
    v = d.get(k, default)
    if not isinstance(v, str):
        raise SpecError(f"{k} must be a string, got {v!r}", file=file, place=f"{place}.{k}")
    return v


def _parse_term(t: Any, file: str, place: str) -> TermWindow:
    if not isinstance(t, dict):
        raise SpecError("a term must be an object", file=file, place=place)
    kind = _str(t, "kind", file, place)
    if kind not in TERM_KINDS:
        raise SpecError(f"kind must be one of {', '.join(TERM_KINDS)}, got {kind!r}",
                        file=file, place=f"{place}.kind")
    key = _str(t, "key", file, place)
    if not key:
        raise SpecError("key must not be empty", file=file, place=f"{place}.key")
    pred, lo, hi, meas, spread = (_num(t, k, file, place) for k in (
        "predicted_s", "lo_s", "hi_s", "measured_s", "spread_s"))
    if not lo <= hi:
        raise SpecError(f"need lo_s <= hi_s, got {lo!r} > {hi!r}", file=file, place=place)
    samples = int(_num(t, "samples", file, place, integer=True))
    if samples < 1:
        raise SpecError("samples must be >= 1", file=file, place=f"{place}.samples")
    regions = t.get("regions", [])
    if not isinstance(regions, list) or not all(isinstance(r, str) for r in regions):
        raise SpecError("regions must be a list of strings", file=file,
                        place=f"{place}.regions")
    if kind in ("compute", "contention") and not regions:
        raise SpecError(f"a {kind} term names its regions", file=file, place=f"{place}.regions")
    base = _num(t, "base_s", file, place) if "base_s" in t else 0.0
    return TermWindow(kind, key, _str(t, "device", file, place, ""),
                      _str(t, "link", file, place, ""), pred, lo, hi, meas, spread, samples,
                      tuple(regions), base)


def _parse_run(data: Any, file: str) -> TelemetryRun:
    if not isinstance(data, dict):
        raise SpecError("expected a JSON object at the top level", file=file, place="top level")
    if data.get("format") != TELEMETRY_FORMAT:
        raise SpecError(f"not a placewise telemetry run (format {data.get('format')!r}, "
                        f"expected {TELEMETRY_FORMAT!r})", file=file, place="format")
    if data.get("version") != TELEMETRY_VERSION:
        raise SpecError(f"telemetry run version {data.get('version')!r} is not supported (this "
                        f"placewise reads version {TELEMETRY_VERSION})", file=file,
                        place="version")
    tags = data.get("tags")
    if not isinstance(tags, dict) or not all(isinstance(v, str) for v in tags.values()):
        raise SpecError("tags must be an object of strings", file=file, place="tags")
    windows = data.get("windows")
    if not isinstance(windows, list) or not windows or len(windows) > _MAX_WINDOWS:
        raise SpecError(f"windows must be a non-empty list (at most {_MAX_WINDOWS})",
                        file=file, place="windows")
    out: list[Window] = []
    for i, w in enumerate(windows):
        place = f"windows[{i}]"
        if not isinstance(w, dict) or not isinstance(w.get("terms"), list):
            raise SpecError("a window must be an object with a list of terms", file=file,
                            place=place)
        terms = tuple(_parse_term(t, file, f"{place}.terms[{j}]")
                      for j, t in enumerate(w["terms"]))
        out.append(Window(int(_num(w, "index", file, place, integer=True)),
                          int(_num(w, "requests", file, place, integer=True)), terms))
    bucket = data.get("bucket")
    if bucket is not None and not isinstance(bucket, str):
        raise SpecError("bucket must be a string", file=file, place="bucket")
    notes = data.get("notes", [])
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise SpecError("notes must be a list of strings", file=file, place="notes")
    wr = data.get("window_requests", 0)
    if not isinstance(wr, int) or isinstance(wr, bool) or wr < 0:
        raise SpecError("window_requests must be an integer >= 0", file=file,
                        place="window_requests")
    return TelemetryRun({str(k): v for k, v in tags.items()},
                        _str(data, "plan_fingerprint", file, "top level"),
                        _str(data, "calibration_fingerprint", file, "top level"),
                        tuple(out), bucket, wr, tuple(notes))
