"""Telemetry of a real run: what every task did, when, on which device, and what it held.

Records carry the plan's own task names (compute tasks are vertex names, transfers
``xfer:{tensor}:{src}->{dst}[:{dtype}]``, conversions ``conv:{tensor}:{from}->{to}@{device}``)
so that validation lines them up one to one with the schedule. Executor-only steps are named
``io:in`` (the host worker copying a request's inputs in) and ``io:out`` (copying the
outputs back to the client).

Times are integers in nanoseconds of ``CLOCK_MONOTONIC`` (``time.monotonic_ns``), which is
one clock for every process on a Linux host, so records of different workers compare
directly. Durations in ``*_ns`` fields are measured inside one process.

- ``TaskRecord``: one task of one request. For a transfer, ``device`` is the sender,
  ``start_ns`` when it began writing into shared memory and ``end_ns`` when the receiver
  finished copying out; ``marks`` keeps the steps in between (``write_end``, ``notified``,
  ``sent``, ``received``, ``read_start``: the sender issues the notification at
  ``notified`` and is done at ``sent``; the receiver has it at ``received``). ``kernel_ns``
  is the time inside kernels (compute: the ops' kernels; conversion: the conversion
  kernel; transfer: the write plus the read copy);
  ``hidden_conversion_ns`` is conversion work the plan did not name (an int8 kernel that
  takes fp32 activations needs its int8 inputs dequantized and its outputs quantized).
  ``cpu_ns`` is the CPU time the worker process used during the task (all its threads;
  for a transfer, both halves): a single-threaded worker whose ``cpu_ns`` falls short of
  the task's duration was off its core (another process held it) for the difference.
  ``live_bytes`` is the device's live tensor bytes right after the task (before the task's
  dead inputs were freed), weights included.
- ``OpRecord``: one op inside a compute task.
- ``WaitRecord``: a worker blocked with nothing ready to run (``for_task`` is what it
  waited for, usually a transfer).
- ``RequestRecord``: one request: submitted by the client (``submit_ns``: before it writes
  the inputs to shared memory), outputs ready in shared memory (``outputs_ns``: the host
  worker's time after writing them, which is what latency is measured to), every worker
  done with it (``done_ns``) and the client holding the outputs (``client_ns``: this adds
  the client process's own wake-up, a property of the client, not of the plan).
- ``DeviceRecord``: the worker process of a device: pid, pinning, threads, memory.
- ``SoloRecord``: a task replayed alone (no other worker busy), medians over repeats: the
  uncontended cost of exactly what the executor runs.

>>> t = Telemetry(tags={"cpu_model": "x"}, devices=(), requests=(RequestRecord(0, "isolated",
...               10, 250, 260),), tasks=(), ops=(), waits=(), solo=())
>>> t.requests[0].latency_ns, Telemetry.from_json(t.to_json()) == t
(240, True)
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import platform
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from placewise.errors import InputError
from placewise.hardware.probe import cpu_model as _cpu_model
from placewise.hardware.probe import package_version as _version
from placewise.records import to_json

if TYPE_CHECKING:
    from placewise.cost.calibrated import Calibration

__all__ = [
    "MACHINE_TAG_KEYS",
    "STABLE_TAG_KEYS",
    "DeviceRecord",
    "OpRecord",
    "RequestRecord",
    "SoloRecord",
    "TaskRecord",
    "Telemetry",
    "WaitRecord",
    "calibration_tag_keys",
    "collect_tags",
    "memory_timeline",
    "model_fingerprint",
    "require_comparable",
    "stable_tags",
    "tag_differences",
]


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """One task of one request (see the module docstring)."""

    request: int
    task: str
    kind: str  # "compute" | "transfer" | "conversion" | "io"
    device: str
    start_ns: int
    end_ns: int
    kernel_ns: int = 0
    hidden_conversion_ns: int = 0
    live_bytes: int = 0
    dst_device: str | None = None
    marks: tuple[tuple[str, int], ...] = ()
    phase: str = ""
    cpu_ns: int = 0

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    def mark(self, name: str) -> int | None:
        for k, v in self.marks:
            if k == name:
                return v
        return None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"request": self.request, "task": self.task, "kind": self.kind,
                             "device": self.device, "start_ns": self.start_ns,
                             "end_ns": self.end_ns, "kernel_ns": self.kernel_ns,
                             "hidden_conversion_ns": self.hidden_conversion_ns,
                             "live_bytes": self.live_bytes, "phase": self.phase,
                             "cpu_ns": self.cpu_ns}
        if self.dst_device is not None:
            d["dst_device"] = self.dst_device
        if self.marks:
            d["marks"] = dict(self.marks)
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TaskRecord:
        return cls(int(d["request"]), str(d["task"]), str(d["kind"]), str(d["device"]),
                   int(d["start_ns"]), int(d["end_ns"]), int(d.get("kernel_ns", 0)),
                   int(d.get("hidden_conversion_ns", 0)), int(d.get("live_bytes", 0)),
                   d.get("dst_device"), tuple((str(k), int(v)) for k, v in
                                              dict(d.get("marks", {})).items()),
                   str(d.get("phase", "")), int(d.get("cpu_ns", 0)))


@dataclass(frozen=True, slots=True)
class OpRecord:
    """One op inside a compute task of one request."""

    request: int
    op: str
    vertex: str
    device: str
    start_ns: int
    end_ns: int
    phase: str = ""

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    def to_json(self) -> dict[str, Any]:
        return to_json(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> OpRecord:
        return cls(int(d["request"]), str(d["op"]), str(d["vertex"]), str(d["device"]),
                   int(d["start_ns"]), int(d["end_ns"]), str(d.get("phase", "")))


@dataclass(frozen=True, slots=True)
class WaitRecord:
    """A worker blocked with nothing ready, waiting (usually) for ``for_task``."""

    request: int
    device: str
    for_task: str
    start_ns: int
    end_ns: int
    phase: str = ""

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    def to_json(self) -> dict[str, Any]:
        return to_json(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> WaitRecord:
        return cls(int(d["request"]), str(d["device"]), str(d["for_task"]),
                   int(d["start_ns"]), int(d["end_ns"]), str(d.get("phase", "")))


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request (see the module docstring); ``latency_ns``: submitted -> outputs ready."""

    request: int
    phase: str  # "warmup" | "isolated" | "stream" | ...
    submit_ns: int
    outputs_ns: int
    done_ns: int
    client_ns: int = 0

    @property
    def latency_ns(self) -> int:
        return self.outputs_ns - self.submit_ns

    @property
    def client_latency_ns(self) -> int:
        return max(self.client_ns, self.outputs_ns) - self.submit_ns

    def to_json(self) -> dict[str, Any]:
        return to_json(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RequestRecord:
        return cls(int(d["request"]), str(d["phase"]), int(d["submit_ns"]),
                   int(d["outputs_ns"]), int(d["done_ns"]), int(d.get("client_ns", 0)))


@dataclass(frozen=True, slots=True)
class DeviceRecord:
    """A device's worker (a process, or the client's own for in-process devices): identity,
    pinning and memory.

    ``weights_bytes``: weights the worker holds for the ops it runs (int8 weights inside
    onnxruntime sessions counted as one byte per element plus fp32 biases);
    ``peak_live_bytes``: the most live tensor bytes (weights + activations + received
    copies) seen after any task; ``rss_*``: the process resident set (psutil) after start-up
    imports, once ready (weights loaded, kernels built), and its high-water mark
    (``getrusage`` ``ru_maxrss``).
    """

    device: str
    pid: int
    cores: tuple[int, ...]
    threads: int
    backend: str
    weights_bytes: int
    peak_live_bytes: int
    rss_start_bytes: int
    rss_ready_bytes: int
    rss_peak_bytes: int

    def to_json(self) -> dict[str, Any]:
        return to_json(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> DeviceRecord:
        return cls(str(d["device"]), int(d["pid"]), tuple(int(c) for c in d["cores"]),
                   int(d["threads"]), str(d["backend"]), int(d["weights_bytes"]),
                   int(d["peak_live_bytes"]), int(d["rss_start_bytes"]),
                   int(d["rss_ready_bytes"]), int(d["rss_peak_bytes"]))


@dataclass(frozen=True, slots=True)
class SoloRecord:
    """A task replayed alone on its device: medians over ``repeats`` runs (seconds).

    ``total_s``: the whole step as the executor runs it; ``kernel_s``: inside kernels;
    ``hidden_conversion_s``: unnamed conversions (see ``TaskRecord``). For a transfer,
    ``kernel_s`` is the write into shared memory plus the read out of it.
    """

    task: str
    device: str
    total_s: float
    kernel_s: float
    hidden_conversion_s: float
    repeats: int

    def to_json(self) -> dict[str, Any]:
        return to_json(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> SoloRecord:
        return cls(str(d["task"]), str(d["device"]), float(d["total_s"]),
                   float(d["kernel_s"]), float(d["hidden_conversion_s"]), int(d["repeats"]))


@dataclass(frozen=True, slots=True)
class Telemetry:
    """Everything one executor session measured."""

    tags: Mapping[str, str]
    devices: tuple[DeviceRecord, ...]
    requests: tuple[RequestRecord, ...]
    tasks: tuple[TaskRecord, ...]
    ops: tuple[OpRecord, ...]
    waits: tuple[WaitRecord, ...]
    solo: tuple[SoloRecord, ...]
    notes: tuple[str, ...] = field(default=())

    def requests_of(self, phase: str) -> list[RequestRecord]:
        return [r for r in self.requests if r.phase == phase]

    def tasks_of(self, request: int) -> list[TaskRecord]:
        return [t for t in self.tasks if t.request == request]

    def device(self, name: str) -> DeviceRecord:
        for d in self.devices:
            if d.device == name:
                return d
        raise KeyError(f"no telemetry for device {name!r}")

    def to_json(self) -> dict[str, Any]:
        return {"tags": dict(self.tags), "devices": [d.to_json() for d in self.devices],
                "requests": [r.to_json() for r in self.requests],
                "tasks": [t.to_json() for t in self.tasks],
                "ops": [o.to_json() for o in self.ops],
                "waits": [w.to_json() for w in self.waits],
                "solo": [s.to_json() for s in self.solo], "notes": list(self.notes)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Telemetry:
        return cls({str(k): str(v) for k, v in dict(d.get("tags", {})).items()},
                   tuple(DeviceRecord.from_json(x) for x in d.get("devices", [])),
                   tuple(RequestRecord.from_json(x) for x in d.get("requests", [])),
                   tuple(TaskRecord.from_json(x) for x in d.get("tasks", [])),
                   tuple(OpRecord.from_json(x) for x in d.get("ops", [])),
                   tuple(WaitRecord.from_json(x) for x in d.get("waits", [])),
                   tuple(SoloRecord.from_json(x) for x in d.get("solo", [])),
                   tuple(str(n) for n in d.get("notes", [])))


def memory_timeline(tasks: Iterable[TaskRecord], device: str) -> list[tuple[int, int]]:
    """(time_ns, live bytes) of ``device`` after each of its tasks, in time order.

    >>> recs = [TaskRecord(0, "b", "compute", "d", 5, 9, live_bytes=30),
    ...         TaskRecord(0, "a", "compute", "d", 1, 4, live_bytes=20)]
    >>> memory_timeline(recs, "d")
    [(4, 20), (9, 30)]
    """
    pts: list[tuple[int, int]] = []
    for t in tasks:
        if t.kind == "transfer":
            if t.dst_device == device:
                pts.append((t.end_ns, t.live_bytes))
        elif t.device == device:
            pts.append((t.end_ns, t.live_bytes))
    pts.sort()
    return pts


def collect_tags(devices: Sequence[tuple[str, Sequence[int], int, str]] = ()) -> dict[str, str]:
    """Tags that make runs comparable: library versions, CPU model, load, and per device
    (name, cores, threads, backend) its pinning and thread count.

    >>> tags = collect_tags([("cpu0", [0], 1, "torch")])
    >>> tags["pinning"], tags["threads"]
    ('cpu0=0', 'cpu0=1')
    """
    try:
        load = f"{os.getloadavg()[0]:.2f}"
    except OSError:
        load = "unknown"
    tags = {
        "cpu_model": _cpu_model(),
        "logical_cpus": str(os.cpu_count() or 0),
        "python": platform.python_version(),
        "torch": _version("torch"),
        "onnxruntime": _version("onnxruntime"),
        "numpy": _version("numpy"),
        "placewise": _version("placewise"),
        "host": platform.node(),
        "clock": "CLOCK_MONOTONIC (time.monotonic_ns), shared by all processes",
        "load_average_1m": load,
        "date": _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
        "pinning": ";".join(f"{n}={','.join(str(c) for c in cores)}"
                            for n, cores, _, _ in devices),
        "threads": ",".join(f"{n}={t}" for n, _, t, _ in devices),
        "backends": ",".join(f"{n}={b}" for n, _, _, b in devices),
    }
    return tags


#: the tags that make two runs comparable: what ran (model, graph, plan and calibration
#: fingerprints), with what (library versions), where (CPU model, usable cores, threads per
#: device) and under which load (arrival process and seed). Everything else a run records
#: (``date``, ``load_average_1m``, ``host``, ...) is volatile: kept, never compared.
STABLE_TAG_KEYS: tuple[str, ...] = (
    "model_fingerprint", "graph_fingerprint", "plan_fingerprint", "calibration_fingerprint",
    "placewise", "onnxruntime", "torch", "python", "cpu_model", "cores", "threads",
    "arrival", "seed")
#: the stable tags of the machine and software alone (what a calibration was measured
#: under): comparable between a calibration and a run of any plan on that machine
MACHINE_TAG_KEYS: tuple[str, ...] = ("placewise", "onnxruntime", "torch", "python",
                                     "cpu_model", "cores")


def calibration_tag_keys(cal: Calibration) -> tuple[str, ...]:
    """The stable machine tags (``MACHINE_TAG_KEYS``) ``cal`` records, to compare a run
    with: ``placewise profile`` records ``cores`` as each device's pinning, not as the
    usable core count, so it is compared only when it is a count.

    >>> from placewise.cost.calibrated import Calibration
    >>> calibration_tag_keys(Calibration(tags={"torch": "2", "cores": "cpu0=0"}))
    ('torch',)
    """
    return tuple(k for k in MACHINE_TAG_KEYS if k in cal.tags
                 and (k != "cores" or cal.tags[k].isdigit()))


def _affinity() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 0  # pragma: no cover - Linux has sched_getaffinity


#: the cores this process may use, read when placewise is imported: an executor's
#: in-process devices later pin the calling thread to their own cores, which must not
#: change what a run's tags say of the machine
_PROCESS_CORES = _affinity()


def _usable_cores() -> int:
    return _PROCESS_CORES


def model_fingerprint(ref: str) -> str:
    """The model a run used: ``sha256:`` of the file's bytes when ``ref`` is a file, else of
    the reference itself (a ``zoo:`` name with its options).

    >>> model_fingerprint("zoo:mlp?layers=2") == model_fingerprint("zoo:mlp?layers=2")
    True
    """
    h = hashlib.sha256()
    path = ref.split("?", 1)[0]
    if os.path.isfile(path):
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        h.update(ref[len(path):].encode())
    else:
        h.update(ref.encode())
    return "sha256:" + h.hexdigest()[:32]


def stable_tags(*, model_fingerprint: str, graph_fingerprint: str, plan_fingerprint: str,
                calibration_fingerprint: str, arrival: str, seed: int | None,
                devices: Sequence[tuple[str, Sequence[int], int, str]] = ()
                ) -> dict[str, str]:
    """The ``STABLE_TAG_KEYS`` of a run: the fingerprints, arrival process and seed given
    here, and this process's library versions, CPU model, usable cores and (per device of
    ``devices``: name, cores, threads, backend, as ``collect_tags`` takes them) threads.

    >>> t = stable_tags(model_fingerprint="m", graph_fingerprint="g", plan_fingerprint="p",
    ...                 calibration_fingerprint="roofline/v1", arrival="poisson:100/s",
    ...                 seed=0, devices=[("cpu0", [0], 1, "torch")])
    >>> tuple(t) == STABLE_TAG_KEYS, t["threads"], t["seed"]
    (True, 'cpu0=1', '0')
    """
    base = collect_tags(devices)
    got = {
        "model_fingerprint": model_fingerprint, "graph_fingerprint": graph_fingerprint,
        "plan_fingerprint": plan_fingerprint, "calibration_fingerprint": calibration_fingerprint,
        "placewise": base["placewise"], "onnxruntime": base["onnxruntime"],
        "torch": base["torch"], "python": base["python"], "cpu_model": base["cpu_model"],
        "cores": str(_usable_cores()), "threads": base["threads"], "arrival": arrival,
        "seed": "none" if seed is None else str(seed)}
    return {k: got[k] for k in STABLE_TAG_KEYS}


def tag_differences(a: Mapping[str, str], b: Mapping[str, str], *,
                    keys: Sequence[str] = STABLE_TAG_KEYS
                    ) -> dict[str, tuple[str | None, str | None]]:
    """The stable tags (``keys``) whose values differ between ``a`` and ``b``: key ->
    (a's value, b's value), None where one side does not record it. Volatile tags are never
    compared.

    >>> tag_differences({"torch": "2.1", "date": "x"}, {"torch": "2.2", "date": "y"})
    {'torch': ('2.1', '2.2')}
    """
    out: dict[str, tuple[str | None, str | None]] = {}
    for k in keys:
        va, vb = a.get(k), b.get(k)
        va = None if va is None else str(va)
        vb = None if vb is None else str(vb)
        if va != vb:
            out[k] = (va, vb)
    return out


def require_comparable(a: Mapping[str, str], b: Mapping[str, str], *, what: str,
                       allow_mismatch: bool = False,
                       keys: Sequence[str] = STABLE_TAG_KEYS) -> list[str]:
    """Refuse to compare two runs whose stable tags differ: ``InputError`` naming ``what``
    is compared and every differing tag with both values, unless ``allow_mismatch``; the
    differences as lines (``"torch: '2.1' vs '2.2'"``; empty when comparable).

    >>> require_comparable({"seed": "0"}, {"seed": "1"}, what="a vs b", allow_mismatch=True)
    ["seed: '0' vs '1'"]
    """
    diffs = tag_differences(a, b, keys=keys)
    lines = [f"{k}: {_shown(va)} vs {_shown(vb)}" for k, (va, vb) in diffs.items()]
    if lines and not allow_mismatch:
        raise InputError(f"{what}: refusing to compare runs whose stable tags differ "
                         f"({'; '.join(lines)}); pass --allow-mismatch to compare anyway",
                         place="tags")
    return lines


def _shown(v: str | None) -> str:
    return "(not recorded)" if v is None else repr(v)
