"""Validate a plan: run it for real on this machine and put every prediction next to reality.

``validate_plan(plan)`` loads the plan's model source, checks that the plan was made for this
graph and for this machine's local devices (``--hw local``), and runs it with the executor
(``placewise.runtime.executor``) through the measurement campaign calibration runs too
(``placewise.runtime.campaign``: warm-up, then phases 1-3):

1. **isolated requests**: ``requests`` requests one at a time (after a short warm-up), each
   on its own seeded inputs: end-to-end latency as the client sees it (inputs written to
   shared memory -> outputs copied back), p50/p90/p99 with the sample count;
2. **a pipelined stream**: requests kept in flight (``in_flight``, default
   ``max(8, 2 x devices + 2)``, so that the client's own scheduling delays do not starve
   the workers; workers sleep rather than poll when idle in this phase) for at least
   ``stream_s`` seconds: sustained throughput (requests/s = batch / the campaign's stream
   period, ``campaign.stream_period``: completions after the pipeline has filled);
3. **solo replay**: each device alone replays one request's steps (medians): the
   uncontended cost of exactly what the executor runs;
4. **memory**: live tensor bytes per device (weights + activations + received copies,
   storages counted once) over the isolated requests, against the plan's per-device peak;
   process RSS is reported beside it (it includes the Python and library footprint, which
   the plan does not model), and the shared-memory block of transfer slots in the tags
   (``shared_memory_bytes``: allocated once for the run, not counted per device);
5. **quality**: outputs against a single-device fp32 reference on the same inputs
   (relative L2, max abs, cosine; top-1 agreement for outputs that look like logits: a
   float output of a contraction op with a last dimension of at least 2);
6. **baseline**: a whole-model onnxruntime session using all usable cores on the same
   requests (fp32; also int8 dynamic quantization when the plan computes in int8),
   isolated latency and back-to-back throughput, reported whichever wins.

**Attribution** (no global correction factor). The measured timeline of the median-latency
isolated request is walked back from the outputs along the chain that bound it (each step's
latest-finishing data dependency or the step before it on its worker): the *measured
critical path*. Every step on it is split into terms against the plan's own task:

- ``compute``: solo kernel time minus the plan's compute + memory + launch terms (a
  profiled op's time includes its own kernel dispatch);
- ``contention``: in-run kernel/copy time minus solo time, minus the plan's contention term
  (the solo replay runs each kernel back to back with every other worker idle: other
  devices' memory traffic, other processes on the cores and caches gone cold between
  requests all land here);
- ``conversion``: conversion kernels against the plan's conversion tasks, plus conversions
  the plan does not name (int8 kernels taking fp32 activations);
- ``transfer``: shared-memory write + notify + read (solo) against the plan's transfer task
  (counted once, where the data path goes from the send to its receive);
- ``launch/dispatch``: executor time around kernels (step bookkeeping, per-op Python, the
  worker's loop between two of its steps), the io steps and the client hand-off (inputs
  in), none of which the plan models;
- ``waiting``: time between another device's step and the step that waited for it (a
  message in flight, a worker woken late, OS scheduling);
- ``path``: minus the part of the predicted makespan that is not on the measured critical
  path (the plan's critical path differs from the one that really bound the request).

The terms add up exactly to measured minus predicted latency. Per task (all tasks, medians
over the isolated requests) the same split is reported, and the op kinds and edges
(transfers, conversions) with the largest share of the miss are named. Throughput is
attributed the same way on the measured bottleneck device (its busy time per request by
term, its idle time, and the shift from the plan's bottleneck resource).

The library never prints: ``render_validation(report)`` returns the text the CLI shows and
``report.to_json()`` the object of ``--json``.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing as mp
import os
import statistics
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

import numpy as np

from placewise.cost.model import Term
from placewise.errors import InputError, PlacewiseError, UnsupportedError
from placewise.graph.ir import Graph, OpKind
from placewise.hardware.spec import Machine
from placewise.runtime.campaign import (
    CAPTURE,
    ISOLATED,
    STREAM,
    WARMUP,
    CampaignSettings,
    default_in_flight,
    run_campaign,
)
from placewise.runtime.executor import Executor
from placewise.runtime.program import ExecProgram, StepKind, program_from_plan
from placewise.runtime.telemetry import SoloRecord, TaskRecord, Telemetry
from placewise.schedule.simulate import TaskKind
from placewise.units import DType

if TYPE_CHECKING:
    from placewise.plan import Plan
    from placewise.plan import TaskRecord as PlanTask
    from placewise.runtime.opexec import ModelSource

__all__ = [
    "TERMS",
    "Attribution",
    "BaselineReport",
    "LatencyStats",
    "MemoryComparison",
    "OutputQuality",
    "StepShare",
    "TaskShare",
    "ThroughputAttribution",
    "ValidationReport",
    "latency_stats",
    "output_quality",
    "render_validation",
    "validate_plan",
]

#: the attribution terms, in report order
TERMS = ("compute", "launch/dispatch", "transfer", "conversion", "contention", "waiting",
         "path")

Progress = Callable[[str, float], None]

_CONTRACTIONS = frozenset({OpKind.LINEAR, OpKind.GEMM, OpKind.MATMUL, OpKind.CONV,
                           OpKind.CONV_TRANSPOSE})


# ---- statistics ----------------------------------------------------------------------------


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
        return {"n": self.n, "p50_s": self.p50_s, "p90_s": self.p90_s, "p99_s": self.p99_s,
                "mean_s": self.mean_s, "min_s": self.min_s, "max_s": self.max_s}


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


def _rel(measured: float, predicted: float) -> float | None:
    if predicted is None or not math.isfinite(predicted) or predicted <= 0:
        return None
    return (measured - predicted) / predicted


# ---- quality -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OutputQuality:
    """One graph output against the fp32 reference, over every request.

    ``rel_l2``: median and worst ``||y - ref|| / ||ref||`` per request; ``max_abs``: the
    largest absolute difference; ``cosine_min``: the lowest cosine similarity;
    ``top1_agreement``: share of rows whose argmax over the last axis agrees (None when
    the output does not look like logits)."""

    output: str
    n: int
    rel_l2_median: float
    rel_l2_max: float
    max_abs: float
    cosine_min: float
    top1_agreement: float | None

    def to_json(self) -> dict[str, Any]:
        return {"output": self.output, "n": self.n, "rel_l2_median": self.rel_l2_median,
                "rel_l2_max": self.rel_l2_max, "max_abs": self.max_abs,
                "cosine_min": self.cosine_min, "top1_agreement": self.top1_agreement}


def output_quality(name: str, got: Sequence[np.ndarray[Any, Any]],
                   ref: Sequence[np.ndarray[Any, Any]], *, logits: bool) -> OutputQuality:
    """Compare one output's values over requests with the reference.

    >>> a = [np.array([[1.0, 2.0, 3.0]])]
    >>> q = output_quality("y", a, a, logits=True)
    >>> q.rel_l2_max, q.max_abs, q.cosine_min, q.top1_agreement
    (0.0, 0.0, 1.0, 1.0)
    """
    rels: list[float] = []
    max_abs = 0.0
    cos_min = 1.0
    agree = 0
    rows = 0
    for y, r in zip(got, ref, strict=True):
        yf = np.asarray(y, dtype=np.float64).ravel()
        rf = np.asarray(r, dtype=np.float64).ravel()
        if yf.shape != rf.shape:
            raise PlacewiseError(f"output {name!r}: shape {np.shape(y)} differs from the "
                                 f"reference's {np.shape(r)}")
        diff = yf - rf
        nr = float(np.linalg.norm(rf))
        nd = float(np.linalg.norm(diff))
        rels.append(nd / nr if nr > 0 else (0.0 if nd == 0 else math.inf))
        if diff.size:
            max_abs = max(max_abs, float(np.max(np.abs(diff))))
        ny = float(np.linalg.norm(yf))
        cos = float(np.dot(yf, rf) / (ny * nr)) if ny > 0 and nr > 0 else (
            1.0 if ny == nr else 0.0)
        cos_min = min(cos_min, cos)
        if logits:
            a = np.asarray(y)
            b = np.asarray(r)
            ya = a.reshape(-1, a.shape[-1]).argmax(axis=1)
            ra = b.reshape(-1, b.shape[-1]).argmax(axis=1)
            agree += int(np.sum(ya == ra))
            rows += int(ya.size)
    return OutputQuality(name, len(rels), float(statistics.median(rels)) if rels else 0.0,
                         max(rels) if rels else 0.0, max_abs, cos_min,
                         (agree / rows) if logits and rows else None)


# ---- attribution records -------------------------------------------------------------------


def _terms0() -> dict[str, float]:
    return {t: 0.0 for t in TERMS}


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
        return {"step": self.step, "task": self.task, "kind": self.kind,
                "device": self.device, "label": self.label, "measured_s": self.measured_s,
                "predicted_s": self.predicted_s, "gap_s": self.gap_s,
                "terms_s": dict(self.terms_s), "off_cpu_s": self.off_cpu_s}


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
        return _rel(self.measured_bytes, self.predicted_bytes)

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
class ValidationReport:
    """Predicted next to measured for one plan (see the module docstring).

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

    @property
    def latency_error(self) -> float | None:
        """(measured p50 - predicted) / predicted."""
        return _rel(self.latency.p50_s, self.predicted_latency_s)

    @property
    def latency_on_cpu_error(self) -> float | None:
        """Like ``latency_error`` for ``latency_on_cpu`` (a diagnostic: how far off the
        prediction is once the time other processes held our cores is taken out)."""
        if self.latency_on_cpu is None:
            return None
        return _rel(self.latency_on_cpu.p50_s, self.predicted_latency_s)

    @property
    def throughput_error(self) -> float | None:
        if self.predicted_throughput_rps is None:
            return None
        return _rel(self.throughput_rps, self.predicted_throughput_rps)

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
                     "devices": list(self.devices)},
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
                      else _rel(self.latency_on_cpu.p50_s, self.predicted_latency_s),
                      "latency_p90": _rel(self.latency.p90_s, self.predicted_latency_s),
                      "throughput": self.throughput_error, "memory": mem_err,
                      "memory_worst": self.memory_error},
            "attribution": {
                "latency": self.attribution.to_json(),
                "throughput": None if self.throughput_attribution is None
                else self.throughput_attribution.to_json()},
            "quality": [q.to_json() for q in self.quality],
            "baseline": [b.to_json() for b in self.baselines],
            "tags": dict(self.tags),
            "notes": list(self.notes),
        }


# ---- inputs and references -----------------------------------------------------------------


def _reference_outputs(source: ModelSource, graph: Graph,
                       requests: Sequence[Sequence[np.ndarray[Any, Any]]]
                       ) -> list[list[np.ndarray[Any, Any]]]:
    """The single-device fp32 outputs (graph-output order) of every request."""
    from placewise.runtime.opexec import SourceFormat

    if source.format is SourceFormat.TORCH_EXPORT:
        return _fx_reference(source, graph, requests)
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(source.onnx_model.SerializeToString(), sess_options=opts,
                                providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    outs = list(graph.outputs)
    res = []
    for req in requests:
        feeds = dict(zip(graph.inputs, req, strict=True))
        vals = sess.run(outs, {k: feeds[k] for k in names})
        res.append([np.asarray(v) for v in vals])
    return res


def _fx_reference(source: ModelSource, graph: Graph,
                  requests: Sequence[Sequence[np.ndarray[Any, Any]]]
                  ) -> list[list[np.ndarray[Any, Any]]]:
    import torch
    from torch.export.graph_signature import OutputKind

    from placewise.graph.torch_import import _Builder
    from placewise.runtime.opexec import FxProgram

    ep = source.exported_program
    prog = FxProgram(ep)
    b = _Builder(ep, "reference", None)
    b.build()
    node_tensor = {n.name: t for n, t in b.node_tensor.items()}
    out_node = next(n for n in ep.graph.nodes if n.op == "output")

    def flat(v: Any) -> list[Any]:
        if isinstance(v, list | tuple):
            return [x for e in v for x in flat(e)]
        return [v]

    user: dict[str, str] = {}
    for spec, value in zip(ep.graph_signature.output_specs, flat(out_node.args[0]),
                           strict=False):
        if spec.kind is OutputKind.USER_OUTPUT and hasattr(value, "name"):
            t = node_tensor.get(value.name)
            if t is not None:
                user.setdefault(t, value.name)
    res = []
    with torch.inference_mode():
        for req in requests:
            env: dict[str, Any] = dict(prog.params)
            for name, arr in zip(prog.user_inputs, req, strict=True):
                env[name] = torch.from_numpy(np.array(arr))
            for n in ep.graph.nodes:
                if n.op == "call_function":
                    env[n.name] = prog.run_node(n, env)
                elif n.op == "get_attr":
                    env[n.name] = getattr(ep.graph_module, str(n.target))
            outs = []
            for t in graph.outputs:
                node = user.get(t)
                if node is None:
                    node = next((k for k, v in node_tensor.items() if v == t), t)
                v = env[node]
                outs.append(v.detach().numpy().copy() if isinstance(v, torch.Tensor)
                            else np.asarray(v))
            res.append(outs)
    return res


def _looks_like_logits(graph: Graph, name: str) -> bool:
    t = graph.tensor(name)
    if not t.dtype.is_float or len(t.shape) < 2:
        return False
    last = t.shape[-1]
    if not isinstance(last, int) or last < 2:
        return False
    prod = graph.producer(name)
    return prod is not None and prod.kind in _CONTRACTIONS


# ---- the baseline --------------------------------------------------------------------------


def _baseline_worker(conn: Connection, path: str, cores: list[int], quantize: bool,
                     inputs: list[list[np.ndarray[Any, Any]]], names: list[str],
                     outputs: list[str], min_time_s: float) -> None:
    try:
        os.sched_setaffinity(0, cores)
        import onnxruntime as ort

        model_path = path
        if quantize:
            from onnxruntime.quantization import quantize_dynamic

            q = os.path.join(os.path.dirname(path), "model.int8.onnx")
            quantize_dynamic(path, q)
            model_path = q
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = len(cores)
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        sess = ort.InferenceSession(model_path, sess_options=opts,
                                    providers=["CPUExecutionProvider"])
        in_names = [i.name for i in sess.get_inputs()]
        if set(in_names) != set(names):  # exported names may differ: match by position
            names = in_names
        feeds = [dict(zip(names, req, strict=True)) for req in inputs]
        out_names = [o.name for o in sess.get_outputs()]
        if set(outputs) <= set(out_names):
            out_names = outputs
        for f in feeds[:3]:
            sess.run(out_names, f)
        lat = []
        results = []
        for f in feeds:
            t0 = time.perf_counter()
            res = sess.run(out_names, f)
            lat.append(time.perf_counter() - t0)
            results.append([np.asarray(r) for r in res])
        done = 0
        t0 = time.perf_counter()
        while True:
            for f in feeds:
                sess.run(out_names, f)
                done += 1
            if time.perf_counter() - t0 >= min_time_s:
                break
        rate = done / (time.perf_counter() - t0)
        conn.send(("ok", lat, rate, results))
    except BaseException as exc:
        with contextlib.suppress(Exception):
            conn.send(("error", f"{type(exc).__name__}: {exc}", traceback.format_exc()[-2000:]))
    finally:
        conn.close()


def _export_baseline(source: ModelSource, tmp: str) -> str:
    """An ONNX file of the whole model at the plan's shapes."""
    from placewise.runtime.opexec import SourceFormat

    if source.format is SourceFormat.ONNX:
        if source.path is not None and source.path.is_file():
            return str(source.path)
        import onnx

        path = os.path.join(tmp, "model.onnx")
        onnx.save(source.onnx_model, path)
        return path
    path = os.path.join(tmp, "model.onnx")
    ref = source.ref.strip()
    if ref.startswith("zoo:"):
        from placewise.graph import zoo

        name, options = zoo.parse_zoo_ref(ref)
        if source.batch is not None:
            options["batch"] = source.batch
        zoo.export_onnx(name, options, path, dynamic_batch=False)
        return path
    import io
    import warnings

    import torch

    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        ep = source.exported_program
        prog = torch.onnx.export(ep, (), dynamo=True, opset_version=18, verbose=False)
        if prog is None:
            raise UnsupportedError("torch.onnx.export returned no program")
        prog.save(path)
    return path


def _run_baselines(source: ModelSource, graph: Graph,
                   requests: list[list[np.ndarray[Any, Any]]],
                   reference: list[list[np.ndarray[Any, Any]]], int8: bool,
                   min_time_s: float, timeout_s: float,
                   plan_cores: Sequence[int] = ()) -> list[BaselineReport]:
    """Whole-model sessions on all usable cores (fp32, and int8 when the plan uses int8);
    and, when the plan runs on one device whose cores are fewer, fp32 on exactly those cores
    with as many threads: the plan against it is the executor's own overhead."""
    all_cores = sorted(os.sched_getaffinity(0))
    runs: list[tuple[list[int], bool, str]] = [(all_cores, False, "onnxruntime")]
    if int8:
        runs.append((all_cores, True, "onnxruntime"))
    if plan_cores and sorted(plan_cores) != all_cores:
        runs.append((sorted(plan_cores), False, "onnxruntime on the plan's cores"))
    out: list[BaselineReport] = []
    logits = [_looks_like_logits(graph, o) for o in graph.outputs]
    with tempfile.TemporaryDirectory(prefix="placewise-baseline-") as tmp:
        try:
            path = _export_baseline(source, tmp)
        except Exception as exc:  # an exporter failure leaves the report without a baseline
            reason = f"could not export the model to ONNX: {type(exc).__name__}: {exc}"
            return [BaselineReport("onnxruntime", "fp32", False, reason[:500])]
        for cores, quant, label in runs:
            precision = "int8 (dynamic quantization)" if quant else "fp32"
            ctx = mp.get_context("spawn")
            parent, child = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_baseline_worker, daemon=True, args=(
                child, path, cores, quant, requests, list(graph.inputs), list(graph.outputs),
                min_time_s), name="placewise-baseline")
            proc.start()
            child.close()
            try:
                if not parent.poll(timeout_s):
                    raise PlacewiseError(f"the baseline made no progress for {timeout_s:.0f} s")
                msg = parent.recv()
            except (EOFError, PlacewiseError) as exc:
                msg = ("error", str(exc) or f"the baseline process died (exit code "
                       f"{proc.exitcode})", "")
            finally:
                parent.close()
                proc.join(timeout=5)
                if proc.is_alive():
                    proc.kill()
                    proc.join()
            if msg[0] != "ok":
                out.append(BaselineReport(label, precision, False, str(msg[1])[:500],
                                          tuple(cores)))
                continue
            _, lat, rate, results = msg
            quality: list[OutputQuality] = []
            with contextlib.suppress(Exception):
                for j, name in enumerate(graph.outputs):
                    quality.append(output_quality(name, [r[j] for r in results],
                                                  [r[j] for r in reference],
                                                  logits=logits[j]))
            out.append(BaselineReport(label, precision, True, "", tuple(cores),
                                      latency_stats(lat), float(rate), tuple(quality)))
    return out


# ---- attribution ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Step:
    name: str  # display name
    task: int  # plan task index (-1: io)
    kind: StepKind
    device: str
    start: int
    end: int
    kernel: int  # ns in kernels (send: write; recv: read)
    hidden: int
    extra: int = 0  # send: notify ns (counted as transfer)
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    off_cpu: int = 0  # ns the worker was off its cores during the step (estimated)


def _label(program: ExecProgram, ti: int) -> str:
    if ti < 0:
        return "io"
    t = program.tasks[ti]
    if t.vertex is not None and t.vertex in program.vertices:
        v = program.vertices[t.vertex]
        kinds = list(dict.fromkeys(o.kind.value for o in v.ops))
        return "+".join(kinds) + ("/int8" if v.dtype is DType.INT8 else "")
    if t.kind.value == "transfer":
        rep = t.src_rep.dtype.value if t.src_rep is not None else ""
        return f"{t.device}->{t.dst_device} {rep}".strip()
    src = t.src_rep.dtype.value if t.src_rep is not None else "?"
    dst = t.dst_rep.dtype.value if t.dst_rep is not None else "?"
    return f"{src}->{dst}@{t.device}"


def _steps_of_request(program: ExecProgram, records: Sequence[TaskRecord]
                      ) -> dict[str, list[_Step]]:
    """The measured steps of one request per device, in the device's program order."""
    by_name: dict[tuple[str, str], TaskRecord] = {}
    rec: TaskRecord | None
    for rec in records:
        if rec.kind == "transfer":
            by_name[(rec.task, "transfer")] = rec
        else:
            by_name[(rec.task, rec.device)] = rec
    out: dict[str, list[_Step]] = {}
    threads = {d.name: max(1, len(d.cores or ())) for d in program.devices}

    def off(dur: int, cpu: int, dev: str) -> int:
        return max(0, dur - cpu // threads[dev]) if cpu > 0 else 0

    for dev, steps in program.steps.items():
        lst: list[_Step] = []
        for st in steps:
            if st.kind is StepKind.IO_IN or st.kind is StepKind.IO_OUT:
                name = "io:in" if st.kind is StepKind.IO_IN else "io:out"
                rec = by_name.get((name, dev))
                if rec is None:
                    continue
                lst.append(_Step(name, -1, st.kind, dev, rec.start_ns, rec.end_ns,
                                 rec.kernel_ns, 0, 0, st.reads, st.writes,
                                 off(rec.duration_ns, rec.cpu_ns, dev)))
                continue
            t = program.tasks[st.task]
            if st.kind in (StepKind.SEND, StepKind.RECV):
                rec = by_name.get((t.name, "transfer"))
                if rec is None:
                    continue
                marks = dict(rec.marks)
                if st.kind is StepKind.SEND:
                    # the data is on its way once the notification is issued (the
                    # receiver may have it before the sender's write call returns)
                    w1 = marks.get("write_end", rec.start_ns)
                    nt = marks.get("notified", w1)
                    lst.append(_Step(f"{t.name} (send)", st.task, st.kind, dev, rec.start_ns,
                                     nt, w1 - rec.start_ns, 0, nt - w1, st.reads, st.writes,
                                     off(nt - rec.start_ns, marks.get("send_cpu_ns", 0), dev)))
                else:
                    r0 = marks.get("read_start", rec.end_ns)
                    lst.append(_Step(f"{t.name} (receive)", st.task, st.kind, dev, r0,
                                     rec.end_ns, rec.end_ns - r0, 0, 0, st.reads, st.writes,
                                     off(rec.end_ns - r0, marks.get("receive_cpu_ns", 0),
                                         dev)))
                continue
            rec = by_name.get((t.name, dev))
            if rec is None:
                continue
            lst.append(_Step(t.name, st.task, st.kind, dev, rec.start_ns, rec.end_ns,
                             rec.kernel_ns, rec.hidden_conversion_ns, 0, st.reads, st.writes,
                             off(rec.duration_ns, rec.cpu_ns, dev)))
        out[dev] = lst
    return out


def _solo_index(program: ExecProgram, solo: Sequence[SoloRecord]
                ) -> dict[tuple[str, str], SoloRecord]:
    return {(s.task, s.device): s for s in solo}


def predicted_tasks(plan: Plan, program: ExecProgram) -> dict[str, PlanTask]:
    """The plan's tasks by name, and one for each partition of ``program``: its member
    tasks back to back (start of the first; duration, terms, interval and contention
    summed), so that a partition's step lines up with what the plan predicted for it."""
    out = plan.task_index()
    for p in program.partitions:
        members = [out[n] for n in p.tasks if n in out]
        if not members:
            continue
        terms: dict[Term, float] = {}
        for m in members:
            for k, v in m.terms_s.items():
                terms[k] = terms.get(k, 0.0) + v
        first = min(members, key=lambda m: m.start_s)
        dur = sum(m.duration_s for m in members)
        out[p.name] = first.model_copy(update={
            "name": p.name, "vertex": p.name, "start_s": first.start_s,
            "end_s": first.start_s + dur, "terms_s": terms,
            "contention_s": sum(m.contention_s for m in members),
            "low_s": sum(m.low_s for m in members), "high_s": sum(m.high_s for m in members),
            "deps": (), "assumptions": {"partition_of": float(len(members))}})
    return out


def _pred_parts(trec: PlanTask) -> tuple[float, float, float, float]:
    """(total, contention, launch, hidden-conversion) seconds of a plan task: the launch
    term is the executor's dispatch (compared with the measured time around kernels), the
    conversion term of a compute task is conversion inside its step (int8 kernels)."""
    conv = trec.term(Term.CONVERSION) if trec.kind is TaskKind.COMPUTE else 0.0
    return trec.duration_s, trec.contention_s, trec.term(Term.LAUNCH), conv


def _split_step(st: _Step, solo: SoloRecord | None,
                pred: tuple[float, float, float, float], counted: bool) -> dict[str, float]:
    """The measured-minus-predicted seconds of one step, by term (excluding its gap): each
    measured part against the plan's own term for it."""
    pred_total, pred_cont, pred_launch, pred_conv = pred
    d = _terms0()
    dur = (st.end - st.start) / 1e9
    k = st.kernel / 1e9
    h = st.hidden / 1e9
    extra = st.extra / 1e9
    sk = solo.kernel_s if solo is not None else k
    if st.kind is StepKind.COMPUTE:
        d["compute"] = sk - (pred_total - pred_cont - pred_launch - pred_conv)
        d["contention"] = (k - sk) - pred_cont
        d["conversion"] = h - pred_conv
        d["launch/dispatch"] = dur - k - h - pred_launch
    elif st.kind is StepKind.CONVERT:
        d["conversion"] = sk - (pred_total - pred_cont - pred_launch)
        d["contention"] = (k - sk) - pred_cont
        d["launch/dispatch"] = dur - k - pred_launch
    elif st.kind is StepKind.SEND:
        p_total, p_cont, p_launch = (pred_total, pred_cont, pred_launch) if counted else \
            (0.0, 0.0, 0.0)
        d["transfer"] = sk + extra - (p_total - p_cont - p_launch)
        d["contention"] = (k - sk) - p_cont
        d["launch/dispatch"] = dur - k - extra - p_launch
    elif st.kind is StepKind.RECV:
        d["transfer"] = sk
        d["contention"] = k - sk
        d["launch/dispatch"] = dur - k
    else:
        d["launch/dispatch"] = dur
    return d


def _critical_path(program: ExecProgram, plan: Plan, steps: dict[str, list[_Step]],
                   solo: dict[tuple[str, str], SoloRecord], submit_ns: int, outputs_ns: int
                   ) -> tuple[list[StepShare], dict[str, float], float, float]:
    """Walk back from io:out; returns the path (first to last), the terms and the client
    hand-off at the head and the tail."""
    pos: dict[tuple[str, int], int] = {}
    writer: dict[tuple[str, str], _Step] = {}
    send_of: dict[int, _Step] = {}
    step_of: dict[int, _Step] = {}  # compute/convert steps by task
    for dev, lst in steps.items():
        for i, st in enumerate(lst):
            pos[(dev, id(st))] = i
            for k in st.writes:
                writer.setdefault((dev, k), st)
            if st.kind is StepKind.SEND:
                send_of[st.task] = st
            elif st.kind in (StepKind.COMPUTE, StepKind.CONVERT):
                step_of[st.task] = st
    # core gates: a step waits for the step the plan runs before it on a shared core
    gated: dict[int, list[int]] = {}
    for gt in getattr(program, "gates", ()):
        gated.setdefault(gt.after, []).append(gt.before)
    host = program.host
    last = next((s for s in steps.get(host, []) if s.kind is StepKind.IO_OUT), None)
    if last is None:
        raise PlacewiseError("the measured request has no io:out step")
    pred = predicted_tasks(plan, program)
    chain: list[tuple[_Step, int, bool]] = []  # (step, gap before it in ns, cross-device)
    cur = last
    head = 0
    while True:
        cands: list[_Step] = []
        for k in cur.reads:
            w = writer.get((cur.device, k))
            if w is not None and w is not cur:
                cands.append(w)
        if cur.kind is StepKind.RECV and cur.task in send_of:
            cands.append(send_of[cur.task])
        for before in gated.get(cur.task, ()) if cur.task >= 0 else ():
            if before in step_of:
                cands.append(step_of[before])
        i = pos[(cur.device, id(cur))]
        if i > 0:
            cands.append(steps[cur.device][i - 1])
        if not cands:
            chain.append((cur, 0, False))
            head = cur.start - submit_ns
            break
        best = max(cands, key=lambda s: s.end)
        # never clamped: the path's durations and gaps telescope to outputs - submit
        chain.append((cur, cur.start - best.end, best.device != cur.device))
        cur = best
    chain.reverse()
    tail = outputs_ns - last.end
    terms = _terms0()
    shares: list[StepShare] = []
    counted_pred = 0.0
    for idx, (st, gap, cross) in enumerate(chain):
        nxt = chain[idx + 1][0] if idx + 1 < len(chain) else None
        parts = (0.0, 0.0, 0.0, 0.0)
        counted = False
        task_name = program.tasks[st.task].name if st.task >= 0 else st.name
        if st.task >= 0:
            trec = pred.get(task_name)
            if trec is not None:
                parts = _pred_parts(trec)
        p_total = parts[0]
        if st.kind is StepKind.SEND:
            counted = nxt is not None and nxt.kind is StepKind.RECV and nxt.task == st.task
        elif st.kind in (StepKind.COMPUTE, StepKind.CONVERT):
            counted = True
        s = solo.get((task_name, st.device))
        d = _split_step(st, s, parts, counted)
        # a wait for another device's data is waiting; a gap after the previous step of
        # the same worker is the worker's own loop (bookkeeping between steps)
        d["waiting" if cross else "launch/dispatch"] += gap / 1e9
        predicted = p_total if counted else 0.0
        counted_pred += predicted
        for k, v in d.items():
            terms[k] += v
        shares.append(StepShare(st.name, task_name, st.kind.value, st.device,
                                _label(program, st.task), (st.end - st.start) / 1e9,
                                predicted, gap / 1e9, d, st.off_cpu / 1e9))
    # the client hand-off at both ends, against the plan's request term (if any)
    terms["launch/dispatch"] += (head + tail) / 1e9 - (plan.predicted_latency_s -
                                                       float(plan.makespan_s))
    terms["path"] = -(float(plan.makespan_s) - counted_pred)
    return shares, terms, head / 1e9, tail / 1e9


def _task_shares(program: ExecProgram, plan: Plan, tel: Telemetry, phase: str,
                 solo: dict[tuple[str, str], SoloRecord]) -> list[TaskShare]:
    pred = predicted_tasks(plan, program)
    recs: dict[str, list[TaskRecord]] = {}
    for r in tel.tasks:
        if r.phase == phase and r.kind != "io":
            recs.setdefault(r.task, []).append(r)
    out: list[TaskShare] = []
    for t in program.tasks:
        rs = recs.get(t.name)
        trec = pred.get(t.name)
        if not rs or trec is None:
            continue
        p_total, p_cont, p_launch, p_conv = _pred_parts(trec)
        med = statistics.median(r.duration_ns for r in rs) / 1e9
        kern = statistics.median(r.kernel_ns for r in rs) / 1e9
        hid = statistics.median(r.hidden_conversion_ns for r in rs) / 1e9
        d = _terms0()
        if t.kind.value == "transfer":
            sk = sum(s.kernel_s for (name, _dev), s in solo.items() if name == t.name) or kern
            d["transfer"] = sk - (p_total - p_cont - p_launch)
            d["contention"] = (kern - sk) - p_cont
            d["waiting"] = med - kern - p_launch
            solo_s: float | None = sk
        else:
            s = solo.get((t.name, t.device))
            sk = s.kernel_s if s is not None else kern
            main = "compute" if t.kind.value == "compute" else "conversion"
            d[main] = sk - (p_total - p_cont - p_launch - p_conv)
            d["contention"] = (kern - sk) - p_cont
            d["conversion"] += hid - p_conv
            d["launch/dispatch"] = med - kern - hid - p_launch
            solo_s = s.total_s if s is not None else None
        ops = tuple(o.name for o in program.vertices[t.name].ops) if t.name in \
            program.vertices else ()
        out.append(TaskShare(t.name, t.kind.value, t.device, _label(program, t.index), ops,
                             p_total, med, solo_s, d))
    out.sort(key=lambda x: -abs(x.delta_s))
    return out


def _rank_labels(shares: Sequence[StepShare]) -> tuple[list[tuple[str, float]],
                                                       list[tuple[str, float]]]:
    kinds: dict[str, float] = {}
    edges: dict[str, float] = {}
    for s in shares:
        miss = sum(v for k, v in s.terms_s.items() if k not in ("waiting", "path"))
        if s.kind == "compute":
            kinds[s.label] = kinds.get(s.label, 0.0) + miss
        elif s.kind in ("send", "recv", "convert"):
            key = s.task
            edges[key] = edges.get(key, 0.0) + miss
    rk = sorted(kinds.items(), key=lambda kv: -abs(kv[1]))
    re_ = sorted(edges.items(), key=lambda kv: -abs(kv[1]))
    return rk, re_


def _explain(terms: Mapping[str, float], delta: float, kinds: Sequence[tuple[str, float]],
             edges: Sequence[tuple[str, float]]) -> str:
    if not terms:
        return ""
    top = sorted(terms.items(), key=lambda kv: -abs(kv[1]))[:3]
    parts = [f"{k} {_fmt_s(v, signed=True)}" for k, v in top if abs(v) > 0]
    text = (f"measured {'over' if delta >= 0 else 'under'} the prediction by "
            f"{_fmt_s(abs(delta))}; largest terms: " + ", ".join(parts))
    if kinds:
        text += "; op kinds: " + ", ".join(f"{k} {_fmt_s(v, signed=True)}"
                                          for k, v in kinds[:3])
    if edges:
        text += "; edges: " + ", ".join(f"{k} {_fmt_s(v, signed=True)}" for k, v in edges[:2])
    return text


def _throughput_attribution(program: ExecProgram, plan: Plan, tel: Telemetry, phase: str,
                            solo: dict[tuple[str, str], SoloRecord], measured_rps: float
                            ) -> ThroughputAttribution | None:
    if measured_rps <= 0 or plan.throughput.period_s <= 0:
        return None
    batch = max(1, int(plan.batch))
    measured_period = batch / measured_rps
    reqs = sorted({r.request for r in tel.requests if r.phase == phase})
    if len(reqs) < 3:
        return None
    steady = set(reqs[len(reqs) // 4:])
    busy: dict[str, list[float]] = {}
    per_req: dict[tuple[str, int], float] = {}
    cpu_req: dict[tuple[str, int], float] = {}
    kern: dict[tuple[str, int, str], float] = {}
    for r in tel.tasks:
        if r.phase != phase or r.request not in steady:
            continue
        if r.kind == "transfer":
            marks = dict(r.marks)
            w = (marks.get("sent", r.start_ns) - r.start_ns) / 1e9
            rd = (r.end_ns - marks.get("read_start", r.end_ns)) / 1e9
            per_req[(r.device, r.request)] = per_req.get((r.device, r.request), 0.0) + w
            dst = r.dst_device or r.device
            per_req[(dst, r.request)] = per_req.get((dst, r.request), 0.0) + rd
            cpu_req[(r.device, r.request)] = cpu_req.get((r.device, r.request), 0.0) + \
                marks.get("send_cpu_ns", 0) / 1e9
            cpu_req[(dst, r.request)] = cpu_req.get((dst, r.request), 0.0) + \
                marks.get("receive_cpu_ns", 0) / 1e9
            kern[(r.device, r.request, "transfer")] = kern.get(
                (r.device, r.request, "transfer"), 0.0) + w
            kern[(dst, r.request, "transfer")] = kern.get((dst, r.request, "transfer"),
                                                          0.0) + rd
            continue
        dur = r.duration_ns / 1e9
        per_req[(r.device, r.request)] = per_req.get((r.device, r.request), 0.0) + dur
        cpu_req[(r.device, r.request)] = cpu_req.get((r.device, r.request), 0.0) + \
            r.cpu_ns / 1e9
        cat = {"compute": "compute", "conversion": "conversion"}.get(r.kind, "io")
        kern[(r.device, r.request, cat)] = kern.get((r.device, r.request, cat), 0.0) + \
            r.kernel_ns / 1e9
        kern[(r.device, r.request, "hidden")] = kern.get((r.device, r.request, "hidden"),
                                                         0.0) + r.hidden_conversion_ns / 1e9
    for (dev, _r), v in per_req.items():
        busy.setdefault(dev, []).append(v)
    med_busy = {d: statistics.median(v) for d, v in busy.items()}
    if not med_busy:
        return None
    threads = {d.name: max(1, len(d.cores or ())) for d in program.devices}
    share: dict[str, float] = {}
    for dev in med_busy:
        wall = sum(v for (d, _r), v in per_req.items() if d == dev)
        cpu = sum(v for (d, _r), v in cpu_req.items() if d == dev)
        if wall > 0 and cpu > 0:
            share[dev] = min(1.0, cpu / threads.get(dev, 1) / wall)
    occ = {name: float(v) for name, v in plan.throughput.occupancy_s}
    bneck = max(med_busy, key=lambda d: med_busy[d])
    pred_period = float(plan.throughput.period_s)
    pred_dev = occ.get(bneck, 0.0)

    def med(dev: str, cat: str) -> float:
        vals = [kern.get((dev, r, cat), 0.0) for r in steady]
        return statistics.median(vals) if vals else 0.0

    # predicted uncontended work of the bottleneck device, split compute / conversion
    pred_compute = sum(t.end_s - t.start_s - t.contention_s for t in plan.schedule.tasks
                       if t.device == bneck and t.kind.value == "compute")
    pred_conv = sum(t.end_s - t.start_s - t.contention_s for t in plan.schedule.tasks
                    if t.device == bneck and t.kind.value == "conversion")
    solo_compute = sum(s.kernel_s for (name, dev), s in solo.items()
                       if dev == bneck and name in program.vertices
                       and program.task(name).device == bneck)
    solo_conv = sum(s.kernel_s for (name, dev), s in solo.items() if dev == bneck and
                    name.startswith("conv:"))
    k_comp = med(bneck, "compute")
    k_conv = med(bneck, "conversion")
    terms = _terms0()
    b = med_busy[bneck]
    terms["compute"] = (solo_compute or k_comp) - pred_compute
    terms["conversion"] = (solo_conv or k_conv) - pred_conv + med(bneck, "hidden")
    terms["contention"] = (k_comp - (solo_compute or k_comp)) + (k_conv - (solo_conv or k_conv))
    terms["transfer"] = med(bneck, "transfer")
    # whatever the occupancy model counted beyond compute+conversion of the device
    other_pred = pred_dev - pred_compute - pred_conv
    terms["launch/dispatch"] = b - k_comp - k_conv - med(bneck, "hidden") - \
        med(bneck, "transfer") - other_pred
    terms["waiting"] = measured_period - b
    terms["path"] = pred_dev - pred_period
    delta = measured_period - pred_period
    top = sorted(terms.items(), key=lambda kv: -abs(kv[1]))[:3]
    text = (f"measured period {_fmt_s(measured_period)} vs predicted {_fmt_s(pred_period)} "
            f"(bottleneck {bneck} measured, {plan.throughput.bottleneck_resource} predicted); "
            f"{'+' if delta >= 0 else '-'}{_fmt_s(abs(delta))}: " +
            ", ".join(f"{k} {_fmt_s(v, signed=True)}" for k, v in top))
    if bneck in share and share[bneck] < 0.9:
        text += (f"; its worker got {share[bneck]:.0%} of its cores while busy (other "
                 f"processes held them the rest of the time)")
    return ThroughputAttribution(pred_period, measured_period,
                                 plan.throughput.bottleneck_resource, bneck, med_busy,
                                 {d: occ.get(d, 0.0) for d in med_busy}, terms, text, share)


# ---- formatting ----------------------------------------------------------------------------


def _fmt_s(v: float, *, signed: bool = False) -> str:
    sign = ("+" if v >= 0 else "-") if signed else ("-" if v < 0 else "")
    a = abs(v)
    if a >= 1:
        return f"{sign}{a:.3g} s"
    if a >= 1e-3:
        return f"{sign}{a * 1e3:.3g} ms"
    return f"{sign}{a * 1e6:.3g} us"


def _fmt_pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v * 100:+.1f}%"


def _fmt_b(n: int) -> str:
    from placewise.units import format_bytes

    return format_bytes(n)


def _ratio(r: float | None) -> str:
    """'x2.00 faster' / 'x1.50 slower' for a speed ratio (> 1: faster)."""
    if r is None or r <= 0 or not math.isfinite(r):
        return "n/a"
    return f"x{r:.2f} faster" if r >= 1 else f"x{1 / r:.2f} slower"


def render_validation(report: ValidationReport) -> str:
    """The text report ``placewise validate`` prints."""
    r = report
    lines = [f"validate {r.model}  strategy {r.strategy}  objective {r.objective}  "
             f"batch {r.batch}  devices {', '.join(r.devices)}",
             "",
             f"{'':24}{'predicted':>14}{'measured':>14}{'error':>10}"]
    lines.append(f"{'latency p50':24}{_fmt_s(r.predicted_latency_s):>14}"
                 f"{_fmt_s(r.latency.p50_s):>14}{_fmt_pct(r.latency_error):>10}")
    if r.latency_on_cpu is not None:
        lines.append(f"{'  on our cores (p50)':24}{'':>14}{_fmt_s(r.latency_on_cpu.p50_s):>14}"
                     f"{_fmt_pct(r.latency_on_cpu_error):>10}   (less time other processes "
                     f"held the cores)")
    lines.append(f"{'latency p90 / p99':24}{'':>14}"
                 f"{_fmt_s(r.latency.p90_s) + ' / ' + _fmt_s(r.latency.p99_s):>14}"
                 f"   (n={r.latency.n})")
    pt = "n/a" if r.predicted_throughput_rps is None else f"{r.predicted_throughput_rps:.1f}/s"
    lines.append(f"{'throughput (pipelined)':24}{pt:>14}{f'{r.throughput_rps:.1f}/s':>14}"
                 f"{_fmt_pct(r.throughput_error):>10}   ({r.stream_requests} requests, "
                 f"{r.in_flight} in flight)")
    for m in r.memory:
        lines.append(f"{'memory ' + m.device:24}{_fmt_b(m.predicted_bytes):>14}"
                     f"{_fmt_b(m.measured_bytes):>14}{_fmt_pct(m.error):>10}   (RSS peak "
                     f"{_fmt_b(m.rss_peak_bytes)})")
    a = r.attribution
    lines += ["", f"latency attribution (request {a.request}: measured {_fmt_s(a.measured_s)}, "
                  f"predicted {_fmt_s(a.predicted_s)}):"]
    for k in TERMS:
        v = a.terms_s.get(k, 0.0)
        lines.append(f"  {k:18}{_fmt_s(v, signed=True):>12}")
    lines.append(f"  {'total':18}{_fmt_s(a.delta_s, signed=True):>12}")
    if a.by_kind:
        lines.append("  op kinds: " + ", ".join(f"{k} {_fmt_s(v, signed=True)}"
                                                for k, v in a.by_kind[:4]))
    if a.by_edge:
        lines.append("  edges:    " + ", ".join(f"{k} {_fmt_s(v, signed=True)}"
                                                for k, v in a.by_edge[:4]))
    lines.append("  tasks with the largest miss (median over requests):")
    for t in a.tasks[:6]:
        main = max(t.terms_s.items(), key=lambda kv: abs(kv[1]))
        lines.append(f"    {t.task:36} {t.label:20} pred {_fmt_s(t.predicted_s):>9} "
                     f"meas {_fmt_s(t.measured_s):>9}  ({main[0]} "
                     f"{_fmt_s(main[1], signed=True)})")
    if r.throughput_attribution is not None:
        lines += ["", "throughput attribution: " + r.throughput_attribution.explanation]
    if r.quality:
        lines += ["", "quality vs fp32 reference:"]
        for q in r.quality:
            top1 = "" if q.top1_agreement is None else f"  top-1 {q.top1_agreement:.1%}"
            lines.append(f"  {q.output}: rel L2 {q.rel_l2_median:.2e} (max "
                         f"{q.rel_l2_max:.2e})  max abs {q.max_abs:.2e}  cosine >= "
                         f"{q.cosine_min:.6f}{top1}")
    if r.baselines:
        lines += ["", "baseline (whole-model onnxruntime sessions, same requests):"]
        for b in r.baselines:
            where = "all cores" if b.name == "onnxruntime" else "the plan's cores"
            cores = ",".join(str(c) for c in b.cores)
            if not b.available:
                lines.append(f"  {b.precision} on {where}: unavailable ({b.reason})")
                continue
            assert b.latency is not None and b.throughput_rps is not None
            lines.append(f"  {b.precision} on {where} ({cores}): p50 {_fmt_s(b.latency.p50_s)}, "
                         f"{b.throughput_rps:.1f}/s; the plan is "
                         f"{_ratio(b.plan_latency_speedup)} on latency and "
                         f"{_ratio(b.plan_throughput_ratio)} on throughput")
    for n in r.notes:
        lines.append(f"note: {n}")
    return "\n".join(lines) + "\n"


# ---- the entry point -----------------------------------------------------------------------


def _check_machine(plan: Plan, machine: Machine | None, file: str | None) -> Machine:
    from placewise.hardware.spec import list_presets
    from placewise.plan import check_fingerprints

    name = plan.machine.name
    if machine is None:
        if name in list_presets():
            raise InputError(f"the plan was made for the preset machine {name!r}, which is not "
                             f"here: validate runs plans on this machine's devices (plan with "
                             f"--hw local)", file=file, place="machine")
        from placewise.hardware.probe import load_local

        machine = load_local()
    check_fingerprints(plan, machine=machine, file=file)
    return machine


def _check_plan(plan: Plan, machine: Machine, file: str | None) -> None:
    """Refuse, before anything is loaded or run, a plan the independent checker
    (``placewise.check``) finds broken on ``machine``: a device the machine lacks, a kernel
    its backends do not have (int8 outside ``graph.ir.INT8_KINDS``), an impossible
    schedule. The first error is the message, support errors first."""
    from placewise.check import Check, Severity, check_plan

    errors = [f for f in check_plan(plan, machine=machine, file=file)
              if f.severity is Severity.ERROR]
    if not errors:
        return
    order = {Check.SUPPORT: 0, Check.COVERAGE: 1}
    errors.sort(key=lambda f: order.get(f.check, 2))
    first = errors[0]
    more = (f" ({len(errors) - 1} more error{'s' if len(errors) > 2 else ''}: placewise "
            f"check {file or 'PLAN'} --hw local lists them)" if len(errors) > 1 else "")
    raise InputError(f"the plan cannot run here: {first.subject} {first.message}{more}",
                     file=file, place=f"check {first.check.value}")


def _load_planned_source(ref: str, plan: Plan, shapes: Any) -> ModelSource:
    """The plan's model as it was planned: bound to the plan's batch, or (a model whose
    inputs have a fixed leading dim, or a zoo reference that names its own batch, planned
    without ``--batch``) as it is; the graph fingerprint decides which."""
    from placewise.runtime.opexec import load_source

    try:
        src = load_source(ref, batch=plan.batch, shapes=shapes)
    except InputError as exc:
        if exc.place != "--batch":
            raise
        return load_source(ref, shapes=shapes)  # the fingerprint check follows
    if src.graph is not None and src.graph.fingerprint() != plan.fingerprints.graph:
        own = load_source(ref, shapes=shapes)
        if own.graph is not None and own.graph.fingerprint() == plan.fingerprints.graph:
            return own
    return src


def validate_plan(plan: Plan | str | os.PathLike[str], *, requests: int = 30,
                  source: ModelSource | str | None = None, machine: Machine | None = None,
                  progress: Progress | None = None, baseline: bool = True,
                  stream_s: float = 1.0, in_flight: int | None = None,
                  solo_repeats: int = 7, warmup: int = 10, timeout_s: float = 120.0,
                  seed: int = 0, keep_telemetry: bool = True,
                  shapes: Mapping[str, Sequence[int]] | None = None) -> ValidationReport:
    """Run ``plan`` on this machine and compare it with its prediction (module docstring).

    ``plan``: a ``Plan`` or a plan file; ``source``: the model (default: the plan's
    ``model`` reference at its ``batch``, inputs bound with ``shapes`` when the plan was
    made with ``--shape``); ``machine``: this machine (default:
    ``load_local()``; a plan for another machine, or for a preset, is an ``InputError``
    naming the fingerprint). ``requests``: isolated requests (>= 1); the stream runs for
    about ``stream_s`` seconds (at least ``requests`` requests). ``progress(message,
    fraction)`` is called between phases. Raises ``ExecutionError`` when the run fails
    (naming the device and op).
    """
    from placewise.plan import Plan as _Plan
    from placewise.plan import check_fingerprints, load_plan

    report: Progress = progress or (lambda _m, _f: None)
    if requests < 1:
        raise InputError(f"requests must be >= 1, got {requests}", place="--requests")
    file: str | None = None
    if not isinstance(plan, _Plan):
        file = os.fspath(plan)
        plan = load_plan(file)
    report("checking the plan against this machine and the model", 0.0)
    machine = _check_machine(plan, machine, file)
    # the plan first: nothing of the model is loaded for a plan that cannot run here
    _check_plan(plan, machine, file)
    # model files are read by the checked loaders (a .pt2 archive is checked entry by entry
    # before torch sees it, with weights-only unpickling forced); nothing of the model runs
    # before its graph's fingerprint is the plan's
    if source is None or isinstance(source, str):
        src = _load_planned_source(source or plan.model, plan, shapes)
    else:
        src = source
    if src.graph is None:
        raise InputError("the model source has no graph", file=src.ref)
    graph = src.graph
    check_fingerprints(plan, graph=graph, file=file)
    program = program_from_plan(plan, graph, machine)
    from placewise.runtime.opexec import request_inputs

    inputs = request_inputs(src, graph, requests, seed)
    report("computing the fp32 reference outputs", 0.05)
    reference = _reference_outputs(src, graph, inputs)
    k = max(1, in_flight if in_flight is not None else
            default_in_flight(len(program.devices)))
    settings = CampaignSettings(warmup=warmup, in_flight=k, stream_s=max(stream_s, 0.0),
                                solo_repeats=solo_repeats)
    notes: list[str] = []
    timeout = max(timeout_s, 100.0 * float(plan.makespan_s))
    fraction = {WARMUP: 0.3, ISOLATED: 0.35, STREAM: 0.55, CAPTURE: 0.7}
    with Executor(program, src, reference_inputs=inputs[0], slots=k,
                  timeout_s=timeout) as ex:
        ex.start(lambda m: report(m, 0.1))
        got = run_campaign(ex, inputs, settings,
                           progress=lambda phase, m: report(m, fraction[phase]))
        peaks = ex.peak_live_bytes(ISOLATED)
    outputs, tel, solo = got.outputs, got.telemetry, list(got.solo)
    assert got.stream is not None
    # -- measured --
    iso = tel.requests_of(ISOLATED)
    lat = latency_stats([r.latency_ns / 1e9 for r in iso])
    batch = max(1, int(plan.batch))
    period = got.stream.period_s
    rps = batch / period if period else 0.0
    # -- memory --
    mem: list[MemoryComparison] = []
    for d in program.devices:
        tiers = plan.memory.devices.get(d.name, {})
        tier = tiers.get(d.main_memory.name) or (next(iter(tiers.values())) if tiers else None)
        pred_b = int(tier.peak_bytes) if tier is not None else 0
        rec = tel.device(d.name)
        mem.append(MemoryComparison(d.name, pred_b, int(peaks.get(d.name, 0)),
                                    rec.weights_bytes, rec.rss_ready_bytes, rec.rss_peak_bytes))
    # -- quality --
    quality: list[OutputQuality] = []
    for j, name in enumerate(graph.outputs):
        quality.append(output_quality(name, [o[j] for o in outputs],
                                      [rf[j] for rf in reference],
                                      logits=_looks_like_logits(graph, name)))
    # -- attribution --
    report("attributing the difference", 0.8)
    solo_idx = _solo_index(program, solo)
    ordered = sorted(iso, key=lambda r: r.latency_ns)
    med_req = ordered[(len(ordered) - 1) // 2]
    # every request's latency less the time its critical path's workers were off their
    # cores: what the same run measured while our workers held their cores
    on_cpu: list[float] = []
    for r in iso:
        with contextlib.suppress(PlacewiseError, KeyError):
            st_r = _steps_of_request(program, tel.tasks_of(r.request))
            sh_r, _, _, _ = _critical_path(program, plan, st_r, solo_idx, r.submit_ns,
                                           r.outputs_ns)
            on_cpu.append(r.latency_ns / 1e9 - sum(x.off_cpu_s for x in sh_r))
    lat_on_cpu = latency_stats(on_cpu) if on_cpu else None
    steps = _steps_of_request(program, tel.tasks_of(med_req.request))
    shares, terms, head, tail = _critical_path(program, plan, steps, solo_idx,
                                               med_req.submit_ns, med_req.outputs_ns)
    tasks = _task_shares(program, plan, tel, ISOLATED, solo_idx)
    kinds, edges = _rank_labels(shares)
    delta = med_req.latency_ns / 1e9 - plan.predicted_latency_s
    off_cpu = sum(s.off_cpu_s for s in shares)
    explanation = _explain(terms, delta, kinds, edges)
    if off_cpu > 0.1 * abs(delta) and off_cpu > 0:
        explanation += (f"; the critical path's workers were off their cores for "
                        f"{_fmt_s(off_cpu)} (other processes ran on them)")
    attribution = Attribution(med_req.request, med_req.latency_ns / 1e9, plan.predicted_latency_s,
                              terms, tuple(shares), tuple(tasks), tuple(kinds), tuple(edges),
                              head, tail, explanation, off_cpu)
    tp_attr = _throughput_attribution(program, plan, tel, STREAM, solo_idx, rps)
    # -- baseline --
    baselines: list[BaselineReport] = []
    if baseline:
        report("running the onnxruntime baseline", 0.85)
        int8 = any(v.dtype is DType.INT8 for v in program.vertices.values())
        compute_devs = {t.device for t in program.tasks if t.kind is TaskKind.COMPUTE}
        plan_cores = tuple(program.device(next(iter(compute_devs))).cores or ()) \
            if len(compute_devs) == 1 else ()
        for b in _run_baselines(src, graph, inputs, reference, int8,
                                min_time_s=max(0.3, stream_s / 2), timeout_s=600.0,
                                plan_cores=plan_cores):
            if b.available and b.latency is not None and b.throughput_rps:
                b = BaselineReport(b.name, b.precision, True, b.reason, b.cores, b.latency,
                                   b.throughput_rps * batch, b.quality,
                                   b.latency.p50_s / lat.p50_s if lat.p50_s > 0 else None,
                                   rps / (b.throughput_rps * batch))
            baselines.append(b)
    tags = dict(tel.tags)
    tags["requests"] = str(requests)
    tags["stream_requests"] = str(got.stream.requests)
    tags["calibration"] = plan.fingerprints.calibration
    if load_note := _load_note(tags):
        notes.append(load_note)
    report("done", 1.0)
    return ValidationReport(
        plan.model, plan.strategy, plan.objective.value, int(plan.batch),
        tuple(d.name for d in program.devices), plan.predicted_latency_s,
        plan.throughput_rps, plan.throughput.bottleneck_resource, lat, lat_on_cpu, rps,
        got.stream.requests, got.in_flight,
        tuple(mem), attribution, tp_attr, tuple(quality), tuple(baselines), tuple(solo), tags,
        tuple(notes), tel if keep_telemetry else None)


def _load_note(tags: Mapping[str, str]) -> str:
    try:
        load = float(tags.get("load_average_1m", "nan"))
        cpus = int(tags.get("logical_cpus", "0"))
    except ValueError:
        return ""
    if cpus and load > 0.5 * cpus:
        return (f"the host was busy (1-minute load {load:.2f} on {cpus} logical CPUs): other "
                f"processes shared the cores, which inflates measured times")
    return ""
