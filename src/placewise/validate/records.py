"""The records of a validation report: what ``validate_plan`` returns and ``--json`` writes.

Every part of ``placewise.validate`` builds one kind of record here: quality
(``QualityCheck``; one output's ``OutputQuality`` is ``precision.metrics``'s), the baselines (``BaselineReport``), the attribution (``StepShare``,
``TaskShare``, ``Attribution``, ``ThroughputAttribution``), the run (``LatencyStats``,
``MemoryComparison``, ``ValidationReport``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from placewise.precision.metrics import OutputQuality
from placewise.records import to_json
from placewise.runtime.telemetry import SoloRecord, Telemetry
from placewise.validate.nodes import NodeTimes
from placewise.validate.power import EnergyComparison

__all__ = [
    "TERMS",
    "Attribution",
    "BaselineReport",
    "LatencyStats",
    "MemoryComparison",
    "ModelComparison",
    "QualityCheck",
    "StepShare",
    "TaskShare",
    "ThroughputAttribution",
    "ValidationReport",
    "fmt_s",
    "latency_stats",
    "rel_error",
]

#: the attribution terms, in report order
TERMS = ("compute", "launch/dispatch", "transfer", "conversion", "contention", "waiting",
         "path")


# ---- statistics and units ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LatencyStats:
    """Latency of ``n`` requests (seconds). Percentiles are nearest-rank: with fewer than
    100 samples p99 is the largest sample."""

    n: int
    p50_s: float
    p90_s: float
    p99_s: float
    mean_s: float
    min_s: float
    max_s: float

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


def _rank(sorted_x: Sequence[float], q: float) -> float:
    k = max(0, min(len(sorted_x) - 1, math.ceil(q * len(sorted_x)) - 1))
    return sorted_x[k]


def latency_stats(samples_s: Sequence[float]) -> LatencyStats:
    """Nearest-rank percentiles of latency samples.

    >>> s = latency_stats([0.003, 0.001, 0.002, 0.004])
    >>> s.n, s.p50_s, s.p90_s, s.p99_s
    (4, 0.002, 0.004, 0.004)
    """
    if not samples_s:
        raise ValueError("no latency samples")
    x = sorted(float(v) for v in samples_s)
    return LatencyStats(len(x), _rank(x, 0.5), _rank(x, 0.9), _rank(x, 0.99),
                        statistics.fmean(x), x[0], x[-1])


def rel_error(measured: float, predicted: float) -> float | None:
    """(measured - predicted) / predicted; None without a positive, finite prediction."""
    if predicted is None or not math.isfinite(predicted) or predicted <= 0:
        return None
    return (measured - predicted) / predicted


def fmt_s(v: float, *, signed: bool = False) -> str:
    """Seconds as text in s, ms or us, three significant digits.

    >>> fmt_s(0.0123), fmt_s(-2.5e-5, signed=True)
    ('12.3 ms', '-25 us')
    """
    sign = ("+" if v >= 0 else "-") if signed else ("-" if v < 0 else "")
    a = abs(v)
    if a >= 1:
        return f"{sign}{a:.3g} s"
    if a >= 1e-3:
        return f"{sign}{a * 1e3:.3g} ms"
    return f"{sign}{a * 1e6:.3g} us"


# ---- records -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QualityCheck:
    """The plan's precision budget against the quality measured on the real run.

    ``measured``/``estimated``: metric -> value over every output and request (worst
    output; the plan's estimate is the emulation of its assignment, empty when it lowers
    nothing); ``inputs``: what the requests were; ``holds``: the measured quality is within
    the budget (``validate`` exits 1 otherwise); ``ratio``: measured error over estimated
    error in the budget metric (None when either is zero)."""

    policy: str
    metric: str
    value: float
    limit: float
    measured: Mapping[str, float]
    estimated: Mapping[str, float]
    measured_error: float
    estimated_error: float
    holds: bool
    inputs: str

    @property
    def ratio(self) -> float | None:
        if self.measured_error <= 0.0 or self.estimated_error <= 0.0:
            return None
        return self.measured_error / self.estimated_error

    def to_json(self) -> dict[str, Any]:
        return {"policy": self.policy, "budget": {"metric": self.metric, "value": self.value,
                                                  "limit": self.limit},
                "measured": dict(self.measured), "estimated": dict(self.estimated),
                "measured_error": self.measured_error,
                "estimated_error": self.estimated_error, "ratio": self.ratio,
                "holds": self.holds, "inputs": self.inputs}


@dataclass(frozen=True, slots=True)
class StepShare:
    """One step on the measured critical path: its measured and predicted seconds and the
    difference by term (``gap_s``: the time before it since the step it waited for, in
    ``waiting`` when that step ran on another device, else in ``launch/dispatch``)."""

    step: str  # task name, with "(send)"/"(receive)" for the halves of a transfer
    task: str
    kind: str
    device: str
    label: str  # op kinds of a compute task, "a->b" of a transfer, "x->y" of a conversion
    measured_s: float
    predicted_s: float
    gap_s: float
    terms_s: Mapping[str, float]
    off_cpu_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


@dataclass(frozen=True, slots=True)
class TaskShare:
    """One task over the isolated requests (medians): predicted vs measured duration (a
    transfer's from the start of the write to the end of the read, waits included), its
    solo time, and the difference by term."""

    task: str
    kind: str
    device: str
    label: str
    ops: tuple[str, ...]
    predicted_s: float
    measured_s: float
    solo_s: float | None
    terms_s: Mapping[str, float]

    @property
    def delta_s(self) -> float:
        return self.measured_s - self.predicted_s

    def to_json(self) -> dict[str, Any]:
        return {"task": self.task, "kind": self.kind, "device": self.device,
                "label": self.label, "ops": list(self.ops), "predicted_s": self.predicted_s,
                "measured_s": self.measured_s, "solo_s": self.solo_s,
                "delta_s": self.delta_s, "terms_s": dict(self.terms_s)}


@dataclass(frozen=True, slots=True)
class Attribution:
    """Latency miss of the median isolated request, by term (exact), along the measured
    critical path; per task over all isolated requests; the op kinds and edges that
    explain most of it. ``off_cpu_s``: how long the critical path's workers were off their
    cores (duration minus the process's CPU time per core): time another process held
    them, which lands in whichever term the step was in (an observation, not a term)."""

    request: int
    measured_s: float
    predicted_s: float
    terms_s: Mapping[str, float]
    critical_path: tuple[StepShare, ...]
    tasks: tuple[TaskShare, ...]
    by_kind: tuple[tuple[str, float], ...]
    by_edge: tuple[tuple[str, float], ...]
    head_s: float
    tail_s: float
    explanation: str
    off_cpu_s: float = 0.0

    @property
    def delta_s(self) -> float:
        return self.measured_s - self.predicted_s

    def to_json(self) -> dict[str, Any]:
        return {"request": self.request, "off_cpu_s": self.off_cpu_s, "measured_s": self.measured_s,
                "predicted_s": self.predicted_s, "delta_s": self.delta_s,
                "terms_s": dict(self.terms_s),
                "critical_path": [s.to_json() for s in self.critical_path],
                "tasks": [t.to_json() for t in self.tasks],
                "by_kind_s": [list(x) for x in self.by_kind],
                "by_edge_s": [list(x) for x in self.by_edge],
                "client_handoff_s": {"inputs": self.head_s, "outputs": self.tail_s},
                "explanation": self.explanation}


@dataclass(frozen=True, slots=True)
class ThroughputAttribution:
    """Period per run (1 / runs per second) predicted vs measured, split on the measured
    bottleneck device: its busy time per run by term, its idle time (``waiting``), and
    ``path``: the plan's period minus its prediction for that device. ``cpu_share``: per
    device, the CPU time its worker got per core over its busy time (1: it had its cores
    to itself; 0.4: other processes held them 60% of the time)."""

    predicted_period_s: float
    measured_period_s: float
    predicted_bottleneck: str
    measured_bottleneck: str
    busy_s: Mapping[str, float]  # device -> measured busy seconds per run
    predicted_occupancy_s: Mapping[str, float]
    terms_s: Mapping[str, float]
    explanation: str
    cpu_share: Mapping[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"predicted_period_s": self.predicted_period_s,
                "measured_period_s": self.measured_period_s,
                "delta_s": self.measured_period_s - self.predicted_period_s,
                "predicted_bottleneck": self.predicted_bottleneck,
                "measured_bottleneck": self.measured_bottleneck,
                "busy_s": dict(self.busy_s),
                "predicted_occupancy_s": dict(self.predicted_occupancy_s),
                "terms_s": dict(self.terms_s), "cpu_share": dict(self.cpu_share),
                "explanation": self.explanation}


@dataclass(frozen=True, slots=True)
class MemoryComparison:
    """A device's predicted peak (the plan's tier peak) and measured peak live tensor
    bytes, with the worker's weights and process memory."""

    device: str
    predicted_bytes: int
    measured_bytes: int
    weights_bytes: int
    rss_ready_bytes: int
    rss_peak_bytes: int

    @property
    def error(self) -> float | None:
        return rel_error(self.measured_bytes, self.predicted_bytes)

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "predicted_bytes": self.predicted_bytes,
                "measured_bytes": self.measured_bytes, "error": self.error,
                "weights_bytes": self.weights_bytes, "rss_ready_bytes": self.rss_ready_bytes,
                "rss_peak_bytes": self.rss_peak_bytes}


@dataclass(frozen=True, slots=True)
class BaselineReport:
    """A whole-model onnxruntime session on all usable cores, on the same requests."""

    name: str
    precision: str
    available: bool
    reason: str = ""
    cores: tuple[int, ...] = ()
    latency: LatencyStats | None = None
    throughput_rps: float | None = None
    quality: tuple[OutputQuality, ...] = ()
    plan_latency_speedup: float | None = None  # baseline p50 / plan p50 (> 1: plan faster)
    plan_throughput_ratio: float | None = None  # plan rps / baseline rps (> 1: plan faster)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "precision": self.precision, "available": self.available,
                "reason": self.reason, "cores": list(self.cores),
                "latency": None if self.latency is None else self.latency.to_json(),
                "throughput_rps": self.throughput_rps,
                "quality": [q.to_json() for q in self.quality],
                "plan_latency_speedup": self.plan_latency_speedup,
                "plan_throughput_ratio": self.plan_throughput_ratio}


@dataclass(frozen=True, slots=True)
class ModelComparison:
    """One model of a workload plan (``graph.workload``), every model's request submitted
    at once: its predicted latency (the end of its last task in the plan's schedule, plus
    the plan's request hand-off) beside the measured one (submission to the end of its last
    task, over the isolated requests)."""

    name: str
    predicted_s: float
    latency: LatencyStats

    @property
    def error(self) -> float | None:
        return rel_error(self.latency.p50_s, self.predicted_s)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "predicted_s": self.predicted_s,
                "latency": self.latency.to_json(), "error": self.error}


@dataclass(frozen=True, slots=True)
class ValidationReport:
    """Predicted next to measured for one plan (see ``placewise.validate``).

    ``latency_on_cpu``: each isolated request's latency less the time the workers on its
    measured critical path were off their cores (CPU time per core short of wall time: other
    processes held them) - a diagnostic for busy hosts, never a correction of the headline
    ``latency``.
    """

    model: str
    strategy: str
    objective: str
    batch: int
    devices: tuple[str, ...]
    predicted_latency_s: float
    predicted_throughput_rps: float | None
    predicted_bottleneck: str
    latency: LatencyStats
    latency_on_cpu: LatencyStats | None
    throughput_rps: float
    stream_requests: int
    in_flight: int
    memory: tuple[MemoryComparison, ...]
    attribution: Attribution
    throughput_attribution: ThroughputAttribution | None
    quality: tuple[OutputQuality, ...]
    baselines: tuple[BaselineReport, ...]
    solo: tuple[SoloRecord, ...]
    tags: Mapping[str, str]
    notes: tuple[str, ...] = ()
    telemetry: Telemetry | None = field(default=None, repr=False, compare=False)
    quality_check: QualityCheck | None = None
    plan_fingerprint: str | None = None  # placewise.export.plan_fingerprint of the plan run
    energy: EnergyComparison | None = None  # estimate beside measured (validate.power)
    nodes: NodeTimes | None = None  # per-node times (validate --profile-nodes; validate.nodes)
    # what makes this run comparable with another (runtime.telemetry.stable_tags)
    stable_tags: Mapping[str, str] = field(default_factory=dict)
    # the run's windows per cost key (placewise.runtime.windows.TelemetryRun), when asked for
    telemetry_run: Any = field(default=None, repr=False, compare=False)
    models: tuple[ModelComparison, ...] = ()  # a workload plan's models, one by one

    @property
    def latency_error(self) -> float | None:
        """(measured p50 - predicted) / predicted."""
        return rel_error(self.latency.p50_s, self.predicted_latency_s)

    @property
    def latency_on_cpu_error(self) -> float | None:
        """Like ``latency_error`` for ``latency_on_cpu`` (a diagnostic: how far off the
        prediction is once the time other processes held our cores is taken out)."""
        if self.latency_on_cpu is None:
            return None
        return rel_error(self.latency_on_cpu.p50_s, self.predicted_latency_s)

    @property
    def throughput_error(self) -> float | None:
        if self.predicted_throughput_rps is None:
            return None
        return rel_error(self.throughput_rps, self.predicted_throughput_rps)

    @property
    def memory_error(self) -> float | None:
        """The memory error of largest magnitude over devices with a predicted peak."""
        errs = [m.error for m in self.memory if m.error is not None]
        return max(errs, key=abs) if errs else None

    def to_json(self) -> dict[str, Any]:
        mem_err = {m.device: m.error for m in self.memory}
        return {
            "plan": {"model": self.model, "strategy": self.strategy,
                     "objective": self.objective, "batch": self.batch,
                     "devices": list(self.devices), "fingerprint": self.plan_fingerprint},
            "predicted": {"latency_s": self.predicted_latency_s,
                          "throughput_rps": self.predicted_throughput_rps,
                          "bottleneck": self.predicted_bottleneck,
                          "memory_bytes": {m.device: m.predicted_bytes for m in self.memory}},
            "measured": {"latency": self.latency.to_json(),
                         "latency_on_cpu": None if self.latency_on_cpu is None
                         else self.latency_on_cpu.to_json(),
                         "throughput_rps": self.throughput_rps,
                         "stream_requests": self.stream_requests, "in_flight": self.in_flight,
                         "memory_bytes": {m.device: m.measured_bytes for m in self.memory},
                         "memory": [m.to_json() for m in self.memory],
                         "solo": [s.to_json() for s in self.solo]},
            "error": {"latency": self.latency_error,
                      "latency_on_cpu": None if self.latency_on_cpu is None
                      else rel_error(self.latency_on_cpu.p50_s, self.predicted_latency_s),
                      "latency_p90": rel_error(self.latency.p90_s, self.predicted_latency_s),
                      "throughput": self.throughput_error, "memory": mem_err,
                      "memory_worst": self.memory_error},
            "attribution": {
                "latency": self.attribution.to_json(),
                "throughput": None if self.throughput_attribution is None
                else self.throughput_attribution.to_json()},
            "quality": [q.to_json() for q in self.quality],
            "quality_check": None if self.quality_check is None
            else self.quality_check.to_json(),
            "baseline": [b.to_json() for b in self.baselines],
            "tags": dict(self.tags),
            "stable_tags": dict(self.stable_tags),
            "notes": list(self.notes),
            "energy": None if self.energy is None else self.energy.to_json(),
            "nodes": None if self.nodes is None else self.nodes.to_json(),
            "models": [m.to_json() for m in self.models],
        }
