"""Profile a model *in model order*: the executor runs it, and every step is timed as it ran.

Op-by-op profiling (``placewise.calibrate.profile``) times each op back to back on the same
inputs, which stay hot in cache, and without the executor around it. A real pass is
different: an op's inputs come from the previous op through DRAM, and the executor spends
time of its own on every step (bookkeeping, per-op dispatch inside a region, the worker's
loop between two steps) and on every request (the client's hand-off to the workers and
back). Measured on this machine, those made plans run 1.5-5x slower than the op-by-op
calibration predicted.

``profile_in_context(graph, source, machine, calibration)`` therefore runs the model with
the executor itself (``placewise.runtime.executor``), once per local device and precision:

- the placement puts every region of ``partition`` (default: ``graph.fuse.fuse(graph)``)
  on that device, in that precision where the device runs it there and the executor has
  kernels for it (int8: regions of linear/matmul/gemm/conv only), fp32 otherwise;
  devices that cannot run every region are skipped, and the result says so;
- the executor starts one worker for it (and the host's, which holds the graph's inputs
  and outputs) and runs the measurement campaign (``placewise.runtime.campaign``, the
  recipe validation runs too): ``warmup`` requests (a fresh executor's first requests are
  slow: measured here, mlp 445, 160, 135 ... ~110 us by the 15th; inception 1.7, 1.3 ms,
  then 1.2 ms), then ``requests`` isolated requests, each on its own seeded inputs;
- from the telemetry, every compute and conversion step of every request gives one
  sample: its duration plus the gap since the previous step of its worker in the same
  request (the loop between steps), less any time the worker spent waiting for a message
  in that gap; the kernel time, the conversions hidden in it (int8 kernels take fp32
  activations) and the rest (executor time) are kept apart;
- samples of the same region key (``calibrated.region_key``: identical layers share one)
  or conversion key on one device are pooled: median, p10, p90, count
  (``calibrated.ContextMeasurement``);
- per device, the median executor time per step becomes its ``DeviceRecord.dispatch``
  (what the calibrated model adds to regions that were *not* measured in model order);
- on the host, every request gives a hand-off sample: (inputs written -> input step ends)
  + (last step before the output step ends -> outputs ready) (``DeviceRecord.request``);
- with ``stream`` (the default), each single-device run then runs the campaign's
  pipelined stream (``campaign.default_in_flight`` requests in flight, ``3 x
  max(requests, in flight)`` requests; workers sleep when idle): the stream's period per
  request (``campaign.stream_period``) less the device's own step times is the device's
  per-request work when requests queue (messages, io steps, wake-ups:
  ``DeviceRecord.request_busy``), and the client process's CPU time per request is
  ``Calibration.client``; plans add both to the pipelined occupancy.

With ``transfers`` (the default), every pair of local devices also runs the model with
its regions alternating between the two (nearly every edge crosses):
transfers whose receiver was waiting give samples of send start -> receive end, fitted
per direction as latency + bytes x seconds per byte (``calibrated.LinkMeasurement``).
Everything runs ``rounds`` times, round-robin over the runs, so that each measurement
pools moments several seconds apart: this machine's speed drifts by tens of percent over
seconds (measured: the same single-core run of mlp took 113-240 us per request from one
round to the next), so of each run's rounds the quieter half (by the round's median
request latency) is kept and pooled. Hand-offs are kept apart for runs where a device
shares the host's cores (the host's worker then sleeps instead of polling:
``DeviceRecord.request_shared``).

The calibrated model answers a region or conversion measured here from the measurement
before anything else (``CalibratedModel`` in ``placewise.cost.calibrated``). Progress goes
through ``progress(done, total, message)``; the library never prints.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from placewise.calibrate.corun import profile_corun
from placewise.calibrate.profile import local_devices, summarize_samples
from placewise.cost.calibrated import (
    CalibratedModel,
    Calibration,
    ContextMeasurement,
    StepOverhead,
    conversion_key,
    region_key,
)
from placewise.cost.calibration import DeviceRecord
from placewise.cost.fit import fit_link
from placewise.errors import InputError, UnsupportedError
from placewise.graph.fuse import fuse
from placewise.graph.ir import INT8_KINDS
from placewise.hardware.spec import Device, Machine
from placewise.runtime.campaign import ISOLATED, CampaignSettings, default_in_flight, run_campaign
from placewise.runtime.compile import compile_partitions, save_partitions
from placewise.runtime.executor import Executor
from placewise.runtime.profiler import chain, profile_partition
from placewise.runtime.program import program_from_schedule
from placewise.schedule.placement import Assignment, Placement, Problem, feasible_assignments
from placewise.schedule.simulate import TaskKind, schedule
from placewise.units import DType

if TYPE_CHECKING:
    from placewise.graph.fuse import Partition
    from placewise.graph.ir import Graph
    from placewise.runtime.opexec import ModelSource
    from placewise.runtime.telemetry import Telemetry

__all__ = [
    "CONTEXT_METHOD",
    "ContextConfig",
    "context_configs",
    "profile_in_context",
    "samples_from_telemetry",
    "transfer_samples",
]

Progress = Callable[[int, int, str], None]

CONTEXT_METHOD = ("in model order: the executor's step time of each region less its kernels "
                  "and hidden conversions, plus the worker's loop time since its previous "
                  "step (waits excluded), over every region step of single-device runs")
STREAM_METHOD = ("in model order, pipelined: the stream's period per request "
                 "(runtime.campaign.stream_period) less the device's own step times (its "
                 "per-request work when requests queue: messages, io, wake-ups), one sample "
                 "per single-device run")
CLIENT_METHOD = ("in model order, pipelined: the client process's CPU time per request "
                 "(inputs written, messages, outputs read)")
RUN_CALL_METHOD = ("in model order, partitioned: a partition step's time less the sum of its "
                   "nodes' kernel times from onnxruntime's profiler (a separate, untimed run "
                   "on the same values and cores)")
PARTITION_METHOD = ("partitioned: a region runs inside its partition's session (no step of "
                    "its own); the partition's fixed cost is DeviceRecord.run_call")
REQUEST_METHOD = ("in model order: inputs written -> input step ends, plus last step before "
                  "the output step -> outputs ready, per isolated request")


@dataclass(frozen=True, slots=True)
class ContextConfig:
    """One run: every region on ``device``, in ``dtype`` where it runs there."""

    device: str
    dtype: DType

    @property
    def label(self) -> str:
        return f"{self.device}:{self.dtype.value}"


def context_configs(devices: Sequence[Device]) -> list[ContextConfig]:
    """fp32 on every device, and int8 on devices that run it (the local machine's int8
    kernels cover only some kinds: other regions stay fp32 in that run).

    >>> from placewise.schedule.testing import toy_machine
    >>> [c.label for c in context_configs(toy_machine().devices)]
    ['cpu:fp32', 'gpu:fp32']
    """
    out = []
    for d in devices:
        out.append(ContextConfig(d.name, DType.FP32))
        if DType.INT8 in d.dtypes:
            out.append(ContextConfig(d.name, DType.INT8))
    return out


@dataclass
class _Samples:
    """Per (device, key): totals, kernels, hidden conversions, executor time."""

    kind: str
    dtype: str
    label: str
    ops: int
    total: list[float]
    kernel: list[float]
    hidden: list[float]
    overhead: list[float]


@dataclass(frozen=True)
class _Run:
    """One model run: every region on ``device`` (``None``: alternating between two
    devices, which measures transfers only), its placement, schedule and program."""

    label: str
    device: str | None
    placement: Any
    schedule: Any
    program: Any


@dataclass
class _Round:
    """One run in one round: its median isolated latency (the round's score), step
    samples, hand-offs, stream period and client CPU per request, transfer samples."""

    score: float
    steps: dict[tuple[str, str], list[tuple[float, float, float, float]]]
    handoff: list[float]
    period: float | None
    client: float | None
    transfers: dict[tuple[str, str, str], list[float]]


def _partition_samples(graph: Graph, problem: Any, run: _Run, rd: _Round,
                       profiles: dict[str, Any],
                       pooled: dict[tuple[str, str], _Samples],
                       run_calls: dict[str, list[float]]) -> None:
    """A partitioned single-device round: each partition step's time splits into its
    run call (the step less its nodes' profiled kernel times) and its vertices' shares of
    the rest, by their ops' profiled node times. Node time that reached no plan op
    (``unowned_s``) stays in the partition's run call: a remainder of the partition,
    never dropped."""
    for p in run.program.partitions:
        xs = rd.steps.get((p.device, p.name))
        prof = profiles.get(p.name)
        if not xs or prof is None or prof.nodes_s <= 0:
            continue
        owned_s = prof.nodes_s - prof.unowned_s
        for tot, _ker, _hid, _ovh in xs:
            run_calls.setdefault(p.device, []).append(max(tot - owned_s, 0.0))
        for vname in p.tasks:
            v = problem.vertex(vname)
            dt = run.placement[v.name].dtype
            share = sum(prof.op_s.get(o.name, 0.0) for o in v.ops) / prof.nodes_s
            key = region_key(graph, list(v.ops), dt)
            smp = pooled.setdefault((p.device, key), _Samples("region", dt.value, v.name,
                                                               len(v.ops), [], [], [], []))
            for tot, _ker, hid, _ovh in xs:
                work = min(tot, prof.nodes_s) * share
                smp.total.append(work)
                smp.kernel.append(work)
                smp.hidden.append(hid * share)
                smp.overhead.append(0.0)


def _waits(tel: Telemetry, phase: str) -> dict[tuple[int, str], list[tuple[int, int]]]:
    """(request, device) -> the intervals its worker waited for a message in ``phase``."""
    out: dict[tuple[int, str], list[tuple[int, int]]] = {}
    for wr in tel.waits:
        if wr.phase == phase:
            out.setdefault((wr.request, wr.device), []).append((wr.start_ns, wr.end_ns))
    return out


def samples_from_telemetry(tel: Telemetry, phase: str, host: str
                           ) -> tuple[dict[tuple[str, str], list[tuple[float, float, float,
                                                                        float]]],
                                      list[float]]:
    """Per (device, task name): (total, kernel, hidden, executor) seconds of every compute
    and conversion step of ``phase`` (see the module docstring), and per request the
    host's hand-off."""
    steps: dict[tuple[str, str], list[tuple[float, float, float, float]]] = {}
    handoff: list[float] = []
    waits = _waits(tel, phase)
    for req in tel.requests_of(phase):
        # every step of every worker in this request, as (device, start, end, record)
        lanes: dict[str, list[tuple[int, int, Any]]] = {}
        io_in = io_out = None
        for t in tel.tasks_of(req.request):
            if t.phase != phase:
                continue
            if t.kind == "transfer":
                sent = t.mark("sent") or t.mark("write_end") or t.start_ns
                lanes.setdefault(t.device, []).append((t.start_ns, sent, None))
                if t.dst_device is not None:
                    r0 = t.mark("read_start") or t.end_ns
                    lanes.setdefault(t.dst_device, []).append((r0, t.end_ns, None))
                continue
            lanes.setdefault(t.device, []).append((t.start_ns, t.end_ns, t))
            if t.kind == "io" and t.task == "io:in":
                io_in = t
            elif t.kind == "io" and t.task == "io:out":
                io_out = t
        for dev, lane in lanes.items():
            lane.sort(key=lambda x: (x[0], x[1]))
            w = waits.get((req.request, dev), [])
            prev_end: int | None = None
            for start, end, rec in lane:
                if rec is not None and rec.kind in ("compute", "conversion"):
                    gap = 0
                    if prev_end is not None and start > prev_end:
                        gap = start - prev_end
                        for a, b in w:  # time spent blocked for a message is not ours
                            lo, hi = max(a, prev_end), min(b, start)
                            if hi > lo:
                                gap -= hi - lo
                        gap = max(gap, 0)
                    total = (end - start + gap) / 1e9
                    kernel = rec.kernel_ns / 1e9
                    hidden = rec.hidden_conversion_ns / 1e9
                    steps.setdefault((dev, rec.task), []).append(
                        (total, kernel, hidden, max(total - kernel - hidden, 0.0)))
                prev_end = end if prev_end is None else max(prev_end, end)
        if io_in is not None and io_out is not None and io_in.device == host:
            lane = lanes.get(host, [])
            before = [e for s, e, r in lane if e <= io_out.start_ns and r is not io_out]
            last = max(before) if before else io_in.end_ns
            handoff.append(((io_in.end_ns - req.submit_ns) + (req.outputs_ns - last)) / 1e9)
    return steps, handoff


def transfer_samples(tel: Telemetry, phase: str
                     ) -> dict[tuple[str, str, str], list[float]]:
    """Per (source device, destination device, transfer task): seconds from the start of
    the send step to the end of the receive step, for the transfers whose receiver was
    waiting for a message when the data was sent (so the whole interval is the
    transfer's: write, notification, wake-up, read)."""
    waits = _waits(tel, phase)
    out: dict[tuple[str, str, str], list[float]] = {}
    for t in tel.tasks:
        if t.phase != phase or t.kind != "transfer" or t.dst_device is None:
            continue
        sent = t.mark("sent")
        if sent is None:
            continue
        if any(a <= sent <= b for a, b in waits.get((t.request, t.dst_device), [])):
            out.setdefault((t.device, t.dst_device, t.task), []).append(t.duration_ns / 1e9)
    return out


def _pairs(devs: Sequence[Device]) -> list[tuple[Device, Device]]:
    """Every pair of local devices (devices sharing cores too: the executor's core gates
    keep them to the plan's order, and their transfers wake a sleeping worker)."""
    return [(a, b) for i, a in enumerate(devs) for b in devs[i + 1:]]


def _alternating(problem: Any, a: str, b: str) -> Any:
    """Vertices in topological order alternately on ``a`` and ``b`` (fp32; the other one
    when a vertex cannot run on its turn): nearly every edge crosses. None when some
    vertex runs on neither."""
    out = {}
    for i, v in enumerate(problem.vertices):
        feas = set(feasible_assignments(problem, v.name))
        first, second = (a, b) if i % 2 == 0 else (b, a)
        for d in (first, second):
            if Assignment(d, DType.FP32) in feas:
                out[v.name] = Assignment(d, DType.FP32)
                break
        else:
            return None
    return Placement.of(out)


def _placement(problem: Any, cfg: ContextConfig) -> tuple[Any, int] | None:
    """Every vertex on ``cfg.device``: in ``cfg.dtype`` where feasible, else fp32; None when
    some vertex cannot run there. Also the number of vertices in ``cfg.dtype``."""
    out = {}
    n_dtype = 0
    for v in problem.vertices:
        feas = set(feasible_assignments(problem, v.name))
        want = Assignment(cfg.device, cfg.dtype)
        runs = cfg.dtype is not DType.INT8 or all(op.kind in INT8_KINDS for op in v.ops)
        if want in feas and runs:
            out[v.name] = want
            n_dtype += 1
        elif Assignment(cfg.device, DType.FP32) in feas:
            out[v.name] = Assignment(cfg.device, DType.FP32)
        else:
            return None
    return Placement.of(out), n_dtype


def profile_in_context(graph: Graph, source: ModelSource, machine: Machine,
                       calibration: Calibration, *, partition: Partition | None = None,
                       devices: Sequence[str] | None = None, requests: int = 8,
                       rounds: int = 5, warmup: int = 10, seed: int = 1,
                       transfers: bool = True, stream: bool = True, corun: bool = True,
                       timeout_s: float = 120.0,
                       progress: Progress | None = None) -> Calibration:
    """``calibration`` with the model-order measurements of ``graph`` added (see the
    module docstring), and with ``corun`` the co-run slowdowns and wake-ups
    (``placewise.calibrate.corun.profile_corun``). ``calibration`` orders the
    single-device runs (any calibration of this machine: the op-by-op one of
    ``profile_model``); ``graph`` must be ``source``'s graph with concrete shapes.
    Raises ``InputError`` for bad settings or a machine without local devices,
    ``ExecutionError`` when a run fails."""
    # runtime.opexec imports torch: loaded only when a model is measured
    from placewise.runtime.opexec import request_inputs
    if requests < 1 or warmup < 0 or rounds < 1:
        raise InputError(f"requests and rounds must be >= 1 and warmup >= 0, got {requests}, "
                         f"{rounds} and {warmup}", place="context profile settings")
    graph.check_concrete()
    devs = local_devices(machine, devices)
    if not devs:
        raise InputError(f"machine {machine.name!r} has no local device to profile (devices "
                         f"need cores and a backend: use --hw local)", place="--hw")
    part = partition if partition is not None else fuse(graph)
    model = CalibratedModel(machine, calibration)
    problem = Problem(graph, part, machine, model)
    inputs = request_inputs(source, graph, requests + warmup, seed)
    runs: list[_Run] = []
    skipped: list[str] = []
    for cfg in context_configs(devs):
        try:
            got = _placement(problem, cfg)
        except UnsupportedError:
            got = None
        if got is None or (cfg.dtype is not DType.FP32 and got[1] == 0):
            skipped.append(cfg.label)
            continue
        sched = schedule(problem, got[0])
        runs.append(_Run(cfg.label, cfg.device, got[0], sched,
                         program_from_schedule(problem, sched)))
    if transfers:
        for da, db in _pairs(devs):
            alt = _alternating(problem, da.name, db.name)
            if alt is None:
                skipped.append(f"{da.name}<->{db.name}")
                continue
            sched = schedule(problem, alt)
            runs.append(_Run(f"{da.name}<->{db.name}", None, alt, sched,
                             program_from_schedule(problem, sched)))
    tmp = tempfile.mkdtemp(prefix="placewise-context-")
    try:
        files, profiles = _compile_and_profile(runs, source, graph, inputs[warmup], machine,
                                               tmp, progress)
        out = _profile_rounds(graph, source, machine, calibration, problem, runs, skipped,
                              inputs, files, profiles, requests=requests, rounds=rounds,
                              warmup=warmup, stream=stream, timeout_s=timeout_s,
                              progress=progress)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if not corun:
        return out
    return profile_corun(graph, source, machine, out, partition=part, devices=devices,
                         seed=seed, timeout_s=timeout_s, progress=progress)


def _compile_and_profile(runs: Sequence[_Run], source: ModelSource, graph: Graph,
                         request: Sequence[Any], machine: Machine, tmp: str,
                         progress: Progress | None
                         ) -> tuple[dict[str, dict[str, str]], dict[str, dict[str, Any]]]:
    """Each run's partitions compiled once (files under ``tmp``); the single-device runs'
    partitions profiled node by node (onnxruntime's profiler, on the request's real
    boundary values, pinned to the device's cores): run label -> partition -> profile."""
    files: dict[str, dict[str, str]] = {}
    profiles: dict[str, dict[str, Any]] = {}
    cache: dict[tuple[Any, ...], Any] = {}  # the alternating runs share most partitions
    for k, run in enumerate(runs):
        if not run.program.partitions:
            continue
        if progress is not None:
            progress(0, 1, f"compiling the partitions of {run.label}")
        models = compile_partitions(source, run.program.partitions, graph, cache=cache)
        folder = os.path.join(tmp, f"run{k}")
        os.makedirs(folder)
        files[run.label] = save_partitions(models, folder)
        if run.device is None:
            continue
        vals = chain(models, run.program.partitions,
                     dict(zip(graph.inputs, (np.asarray(x) for x in request), strict=True)))
        profiles[run.label] = {
            p.name: profile_partition(models[p.name], p, vals,
                                      cores=list(machine.device(p.device).cores or ()))
            for p in run.program.partitions}
    return files, profiles


def _profile_rounds(graph: Graph, source: ModelSource, machine: Machine,
                    calibration: Calibration, problem: Any, runs: Sequence[_Run],
                    skipped: list[str], inputs: Sequence[Any],
                    files: dict[str, dict[str, str]], profiles: dict[str, dict[str, Any]], *,
                    requests: int, rounds: int, warmup: int, stream: bool,
                    timeout_s: float, progress: Progress | None) -> Calibration:
    raw = _measure_rounds(source, problem, runs, inputs, files, requests=requests,
                          rounds=rounds, warmup=warmup, stream=stream, timeout_s=timeout_s,
                          progress=progress)
    pool = _Pool()
    host_cores = set(machine.device(problem.host).cores or ())
    keep = (rounds + 1) // 2
    for run in runs:
        # this machine's speed drifts by tens of percent over seconds (other tenants): of
        # each run's rounds, the quieter half (by the round's median latency) is kept
        kept = sorted(raw.get(run.label, []), key=lambda x: x.score)[:keep]
        pool.add_run(graph, problem, run, kept, host_cores, profiles.get(run.label, {}))
    context = []
    for (dev, key), smp in sorted(pool.pooled.items()):
        summ = summarize_samples(smp.total)
        context.append(ContextMeasurement(
            device=dev, key=key, kind=smp.kind, dtype=smp.dtype, label=smp.label,
            ops=smp.ops, median_s=summ["median_s"], p10_s=summ["p10_s"], p90_s=summ["p90_s"],
            n=summ["n"],
            kernel_s=statistics.median(smp.kernel), hidden_s=statistics.median(smp.hidden),
            overhead_s=statistics.median(smp.overhead)))
    records = [_device_record(d, pool, problem.host) for d in calibration.devices]
    settings = dict(calibration.settings)
    settings.update({"context_requests": float(requests), "context_warmup": float(warmup),
                     "context_runs": float(len(runs)), "context_rounds": float(rounds)})
    tags = dict(calibration.tags)
    if skipped:
        tags["context_skipped"] = ", ".join(skipped)
    # a link is kept only between devices the calibration holds: profiling one device
    # (``--device cpu1``) still moves the request's tensors from the host, whose record
    # the calibration does not have
    held = {d.name for d in calibration.devices}
    links = [fit_link(src_dev, dst_dev, mv)
             for (src_dev, dst_dev), mv in sorted(pool.moves.items())
             if len(mv) >= 2 and {src_dev, dst_dev} <= held]
    upd_cal: dict[str, Any] = {}
    if pool.clients:
        upd_cal["client"] = StepOverhead.of(pool.clients, CLIENT_METHOD)
    return calibration.model_copy(update={**upd_cal, "context": context, "devices": records,
                                          "settings": settings, "tags": tags,
                                          "links": [x for x in links if x is not None]})


def _measure_rounds(source: ModelSource, problem: Any, runs: Sequence[_Run],
                    inputs: Sequence[Any], files: dict[str, dict[str, str]], *,
                    requests: int, rounds: int, warmup: int, stream: bool,
                    timeout_s: float, progress: Progress | None) -> dict[str, list[_Round]]:
    """Run each run ``rounds`` times, round-robin (each run's samples come from ``rounds``
    moments): its rounds by label."""
    total = len(runs) * rounds
    done = 0
    raw: dict[str, list[_Round]] = {}
    for _rnd in range(rounds):
        for run in runs:
            if progress is not None:
                progress(done, total, f"running the model on {run.label} in model order")
            done += 1
            k = default_in_flight(len(run.program.devices))
            # the pipelined stream of single-device runs (alternating runs measure
            # transfers only)
            recipe = CampaignSettings(warmup=warmup, in_flight=k,
                                      stream=run.device is not None and stream,
                                      stream_requests=max(3 * requests, 3 * k))
            with Executor(run.program, source, reference_inputs=inputs[0], slots=k,
                          timeout_s=timeout_s,
                          partition_files=files.get(run.label)) as ex:
                ex.start()
                got = run_campaign(ex, inputs[warmup:], recipe,
                                   warmup_inputs=inputs[:warmup])
            tel = got.telemetry
            period = got.stream.period_s if got.stream is not None else None
            client = got.stream.client_cpu_s if got.stream is not None else None
            lat = [r.latency_ns / 1e9 for r in tel.requests_of(ISOLATED)]
            steps, handoff = samples_from_telemetry(tel, ISOLATED, problem.host)
            raw.setdefault(run.label, []).append(_Round(
                statistics.median(lat) if lat else 0.0, steps, handoff, period, client,
                transfer_samples(tel, ISOLATED)))
    if progress is not None:
        progress(total, total, "model-order measurements done")
    return raw


@dataclass
class _Pool:
    """The kept rounds' samples, pooled: per (device, key) steps, executor time per
    device, hand-offs (by whether a device shares the host's cores), transfers per device
    pair, stream time beyond the steps, client CPU, partition run calls."""

    pooled: dict[tuple[str, str], _Samples] = field(default_factory=dict)
    executor_s: dict[str, list[float]] = field(default_factory=dict)
    handoffs: dict[bool, list[float]] = field(
        default_factory=lambda: {False: [], True: []})
    moves: dict[tuple[str, str], list[tuple[int, float]]] = field(default_factory=dict)
    stream_extra: dict[str, list[float]] = field(default_factory=dict)
    clients: list[float] = field(default_factory=list)
    run_calls: dict[str, list[float]] = field(default_factory=dict)

    def add_run(self, graph: Graph, problem: Any, run: _Run, kept: Sequence[_Round],
                host_cores: set[int], profiles: dict[str, Any]) -> None:
        used = {t.device for t in run.program.tasks}
        shares_host = any(set(run.program.device(d).cores or ()) & host_cores
                          for d in used if d != problem.host)
        for rd in kept:
            for (src_dev, dst_dev, name), tx in rd.transfers.items():
                nbytes = run.schedule.task(name).nbytes
                self.moves.setdefault((src_dev, dst_dev), []).extend((nbytes, x) for x in tx)
            if run.device is None:
                continue  # alternating runs measure transfers only
            if rd.period is not None and rd.client is not None:
                own = sum(statistics.median(x[0] for x in xs)
                          for (d, _n), xs in rd.steps.items() if d == run.device)
                self.stream_extra.setdefault(run.device, []).append(rd.period - own)
                self.clients.append(rd.client)
            self.handoffs[shares_host].extend(rd.handoff)
            if run.program.partitions:
                _partition_samples(graph, problem, run, rd, profiles, self.pooled,
                                   self.run_calls)
                continue
            self.add_steps(graph, problem, run, rd)

    def add_steps(self, graph: Graph, problem: Any, run: _Run, rd: _Round) -> None:
        """A region-by-region round: each compute and conversion step's samples."""
        for (dev, name), xs in rd.steps.items():
            task = run.schedule.task(name)
            if task.kind is TaskKind.COMPUTE:
                v = problem.vertex(task.name)
                dt = run.placement[v.name].dtype
                key = region_key(graph, list(v.ops), dt)
                kind, label, n_ops = "region", v.name, len(v.ops)
            elif task.kind is TaskKind.CONVERSION and task.src_rep is not None and \
                    task.dst_rep is not None and task.tensor is not None:
                numel = graph.tensor(task.tensor).numel
                key, _ = conversion_key(numel, task.src_rep, task.dst_rep)
                dt = task.dst_rep.dtype
                kind, label, n_ops = "conversion", name, 0
            else:
                continue
            smp = self.pooled.setdefault((dev, key), _Samples(kind, dt.value, label, n_ops,
                                                              [], [], [], []))
            for tot, ker, hid, ovh in xs:
                smp.total.append(tot)
                smp.kernel.append(ker)
                smp.hidden.append(hid)
                smp.overhead.append(ovh)
                if kind == "region":
                    self.executor_s.setdefault(dev, []).append(ovh)


def _device_record(d: DeviceRecord, pool: _Pool, host: str) -> DeviceRecord:
    """``d`` with the overheads measured in model order."""
    upd: dict[str, StepOverhead] = {}
    if pool.executor_s.get(d.name):
        upd["dispatch"] = StepOverhead.of(pool.executor_s[d.name], CONTEXT_METHOD)
    if d.name == host and pool.handoffs[False]:
        upd["request"] = StepOverhead.of(pool.handoffs[False], REQUEST_METHOD)
    if d.name == host and pool.handoffs[True]:
        upd["request_shared"] = StepOverhead.of(
            pool.handoffs[True], REQUEST_METHOD + " (runs where a device shares the host's "
                                                  "cores: the host's worker sleeps instead "
                                                  "of polling)")
    if pool.stream_extra.get(d.name):
        upd["request_busy"] = StepOverhead.of(
            [max(x, 0.0) for x in pool.stream_extra[d.name]], STREAM_METHOD)
    if pool.run_calls.get(d.name):
        upd["run_call"] = StepOverhead.of(pool.run_calls[d.name], RUN_CALL_METHOD)
        # regions run inside one session: no per-step dispatch of their own
        upd["dispatch"] = StepOverhead(median_s=0.0, p10_s=0.0, p90_s=0.0,
                                       n=len(pool.run_calls[d.name]), method=PARTITION_METHOD)
    return d.model_copy(update=upd) if upd else d
