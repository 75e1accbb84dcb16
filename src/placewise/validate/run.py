"""``validate_plan``: check a plan against this machine and its model, run it through the
measurement campaign (``placewise.runtime.campaign``), and build the report.

The plan is checked before anything of the model is loaded (the machine's fingerprint, then
the independent checker: ``placewise.check``); the model is loaded as it was planned and
its graph's fingerprint must be the plan's before anything of it runs. Then the executor
runs the campaign (warm-up, isolated requests, the pipelined stream, the solo replay), and
the parts of ``placewise.validate`` turn its telemetry into the report: memory here,
``quality``, ``attribution``, ``baseline``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from placewise.errors import InputError
from placewise.graph.workload import member_of
from placewise.hardware.spec import Machine
from placewise.plan import Plan, load_plan
from placewise.precision.inputs import load_inputs
from placewise.precision.metrics import OutputQuality, worst_quality
from placewise.precision.policy import QualityBudget
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
from placewise.runtime.planned import plan_fingerprint, planned_program
from placewise.runtime.program import ExecProgram
from placewise.runtime.telemetry import Telemetry, model_fingerprint, stable_tags
from placewise.runtime.windows import concat_runs, windows_from_telemetry
from placewise.validate.attribution import attribute_latency, attribute_throughput
from placewise.validate.baseline import plan_baselines
from placewise.validate.nodes import profile_nodes as _profile_nodes
from placewise.validate.power import EnergyMeter, energy_comparison
from placewise.validate.quality import looks_like_logits, output_quality, reference_outputs
from placewise.validate.records import (
    BaselineReport,
    MemoryComparison,
    ModelComparison,
    QualityCheck,
    ValidationReport,
    latency_stats,
)

if TYPE_CHECKING:
    from placewise.graph.ir import Graph
    from placewise.runtime.opexec import ModelSource

__all__ = ["validate_plan", "validation_stable_tags"]

Progress = Callable[[str, float], None]


def validate_plan(plan: Plan | str | os.PathLike[str], *, requests: int = 30,
                  source: ModelSource | str | None = None, machine: Machine | None = None,
                  progress: Progress | None = None, baseline: bool = True,
                  stream_s: float = 1.0, in_flight: int | None = None,
                  solo_repeats: int = 7, warmup: int = 10, timeout_s: float = 120.0,
                  seed: int = 0, keep_telemetry: bool = True,
                  shapes: Mapping[str, Sequence[int]] | None = None,
                  inputs: str | os.PathLike[str] | None = None,
                  profile_nodes: bool = False,
                  window_requests: int | None = None) -> ValidationReport:
    """Run ``plan`` on this machine and compare it with its prediction (``placewise.validate``).

    ``plan``: a ``Plan`` or a plan file; ``source``: the model (default: the plan's
    ``model`` reference at its ``batch``, inputs bound with ``shapes`` when the plan was
    made with ``--shape``); ``machine``: this machine (default:
    ``load_local()``; a plan for another machine, or for a preset, is an ``InputError``
    naming the fingerprint). ``requests``: isolated requests (>= 1); the stream runs for
    about ``stream_s`` seconds (at least ``requests`` requests). ``progress(message,
    fraction)`` is called between phases. ``inputs``: a ``.npz`` file of requests
    (``placewise.precision.inputs``) to run and measure quality on (cycled up to
    ``requests``); quality is then checked against the plan's precision budget
    (``ValidationReport.quality_check``). Raises ``ExecutionError`` when the run fails
    (naming the device and op), ``InputError`` for an inputs file that does not match the
    model. ``profile_nodes``: after the timed runs, profile each partition's nodes with
    onnxruntime's profiler (``placewise.validate.nodes``; ``ValidationReport.nodes``).
    ``window_requests``: also cut the telemetry into windows of that many requests per
    cost key (``placewise.runtime.windows``; ``ValidationReport.telemetry_run``, 0: about
    ten windows).
    """
    report: Progress = progress or (lambda _m, _f: None)
    if requests < 1:
        raise InputError(f"requests must be >= 1, got {requests}", place="--requests")
    file: str | None = None
    if not isinstance(plan, Plan):
        file = os.fspath(plan)
        plan = load_plan(file)
    report("checking the plan against this machine and the model", 0.0)
    machine, src, program = planned_program(plan, machine, source, shapes, file)
    graph = program.graph
    reqs, inputs_text = _requests(src, graph, inputs, requests, seed)
    requests = len(reqs)
    report("computing the fp32 reference outputs", 0.05)
    reference = reference_outputs(src, graph, reqs)
    k = max(1, in_flight if in_flight is not None else
            default_in_flight(len(program.devices)))
    settings = CampaignSettings(warmup=warmup, in_flight=k, stream_s=max(stream_s, 0.0),
                                solo_repeats=solo_repeats)
    notes: list[str] = []
    meter = EnergyMeter()  # measured energy over the stream: RAPL / NVML where they exist
    got, peaks = _run(program, src, reqs, settings, max(timeout_s, 100.0 * float(plan.makespan_s)),
                      report, meter)
    outputs, tel, solo = got.outputs, got.telemetry, list(got.solo)
    assert got.stream is not None
    # -- measured --
    iso = tel.requests_of(ISOLATED)
    lat = latency_stats([r.latency_ns / 1e9 for r in iso])
    batch = max(1, int(plan.batch))
    period = got.stream.period_s
    rps = batch / period if period else 0.0
    mem = _memory(plan, program, tel, peaks)
    quality = [output_quality(name, [o[j] for o in outputs], [rf[j] for rf in reference],
                              logits=looks_like_logits(graph, name))
               for j, name in enumerate(graph.outputs)]
    # -- attribution --
    report("attributing the difference", 0.8)
    attribution, lat_on_cpu = attribute_latency(program, plan, tel, solo, ISOLATED)
    tp_attr = attribute_throughput(program, plan, tel, solo, STREAM, rps)
    # -- baseline --
    baselines: list[BaselineReport] = []
    if baseline:
        report("running the onnxruntime baseline", 0.85)
        baselines = plan_baselines(program, src, graph, reqs, reference,
                                   latency_p50_s=lat.p50_s, throughput_rps=rps, batch=batch,
                                   stream_s=stream_s)
    nodes = None
    if profile_nodes:
        report("profiling each partition's nodes (onnxruntime profiler)", 0.9)
        nodes = _profile_nodes(program, src, reqs[0], machine)
    tags = dict(tel.tags)
    tags["requests"] = str(requests)
    tags["stream_requests"] = str(got.stream.requests)
    tags["calibration"] = plan.fingerprints.calibration
    if load_note := _load_note(tags):
        notes.append(load_note)
    stable = validation_stable_tags(plan, tel, seed=seed, in_flight=got.in_flight)
    run = _telemetry_run(plan, tel, program, stable, window_requests)
    report("done", 1.0)
    return ValidationReport(
        plan.model, plan.strategy, plan.objective.value, int(plan.batch),
        tuple(d.name for d in program.devices), plan.predicted_latency_s,
        plan.throughput_rps, plan.throughput.bottleneck_resource, lat, lat_on_cpu, rps,
        got.stream.requests, got.in_flight,
        tuple(mem), attribution, tp_attr, tuple(quality), tuple(baselines), tuple(solo), tags,
        tuple(notes), tel if keep_telemetry else None,
        quality_check=_quality_check(plan, quality, inputs_text),
        plan_fingerprint=plan_fingerprint(plan),
        energy=energy_comparison(plan, machine, meter, runs=got.stream.requests, batch=batch),
        nodes=nodes, stable_tags=stable, telemetry_run=run,
        models=_models(plan, program, tel, iso))


def _models(plan: Plan, program: ExecProgram, tel: Telemetry, iso: Sequence[Any]
            ) -> tuple[ModelComparison, ...]:
    """Each model of a workload plan: predicted against measured latency (``ModelComparison``;
    a task is the model's whose tensors it computes or moves); () for one model."""
    if plan.workload is None:
        return ()
    owner: dict[str, str | None] = {}
    for p in program.partitions:
        owner[p.name] = member_of(next(iter((*p.outputs, *p.inputs)), ""))
    for rec in plan.schedule.tasks:
        if rec.tensor:
            owner.setdefault(rec.name, member_of(rec.tensor))
    handoff = plan.predicted_latency_s - plan.makespan_s
    ends: dict[str, list[float]] = {m.name: [] for m in plan.workload.models}
    for r in iso:
        last: dict[str, int] = {}
        for t in tel.tasks_of(r.request):
            m = owner.get(t.task)
            if m in ends:
                last[m] = max(last.get(m, t.end_ns), t.end_ns)
        for m, end in last.items():
            ends[m].append((end - r.submit_ns) / 1e9)
    return tuple(ModelComparison(m.name, m.latency_s + handoff, latency_stats(ends[m.name]))
                 for m in plan.workload.models if ends[m.name])


def _requests(src: ModelSource, graph: Graph, inputs: str | os.PathLike[str] | None,
              requests: int, seed: int) -> tuple[list[Any], str]:
    """The requests to run (the inputs file's, cycled up to ``requests``, or ``requests``
    generated from ``seed``) and how they were made, as the report says it."""
    # lazy: torch (runtime.opexec imports it) is heavy to import, loaded only when this runs
    from placewise.runtime.opexec import request_inputs

    if inputs is None:
        return (request_inputs(src, graph, requests, seed),
                f"generated: {requests} requests from seed {seed}")
    given = load_inputs(inputs, list(graph.inputs), request_inputs(src, graph, 1, seed)[0])
    return ([given[k % len(given)] for k in range(max(requests, len(given)))],
            f"file {os.fspath(inputs)}: {len(given)} requests")


def _run(program: ExecProgram, src: ModelSource, reqs: Sequence[Any],
         settings: CampaignSettings, timeout_s: float, report: Progress, meter: EnergyMeter
         ) -> tuple[Any, Mapping[str, int]]:
    """The campaign on the executor (the energy meter over the stream), and the peak live
    bytes per device over the isolated requests."""
    fraction = {WARMUP: 0.3, ISOLATED: 0.35, STREAM: 0.55, CAPTURE: 0.7}

    def on_phase(phase: str, m: str) -> None:
        if phase == STREAM:
            meter.start()
        elif phase == CAPTURE:
            meter.mark()
        report(m, fraction[phase])

    with Executor(program, src, reference_inputs=reqs[0], slots=settings.in_flight or 1,
                  timeout_s=timeout_s) as ex:
        ex.start(lambda m: report(m, 0.1))
        got = run_campaign(ex, reqs, settings, progress=on_phase)
        return got, ex.peak_live_bytes(ISOLATED)


def _memory(plan: Plan, program: ExecProgram, tel: Telemetry, peaks: Mapping[str, int]
            ) -> list[MemoryComparison]:
    """Per device: the plan's peak bytes in its main memory against the live bytes measured."""
    mem: list[MemoryComparison] = []
    for d in program.devices:
        tiers = plan.memory.devices.get(d.name, {})
        tier = tiers.get(d.main_memory.name) or (next(iter(tiers.values())) if tiers else None)
        pred_b = int(tier.peak_bytes) if tier is not None else 0
        rec = tel.device(d.name)
        mem.append(MemoryComparison(d.name, pred_b, int(peaks.get(d.name, 0)),
                                    rec.weights_bytes, rec.rss_ready_bytes, rec.rss_peak_bytes))
    return mem


def validation_stable_tags(plan: Plan, tel: Telemetry, *, seed: int, in_flight: int
                           ) -> dict[str, str]:
    """The stable tags of a validation run (``runtime.telemetry.stable_tags``): the plan's
    fingerprints, this process's versions and CPU, the devices' threads as they ran, and the
    campaign as the arrival process (isolated requests, then a closed-loop stream of
    ``in_flight``), with the seed of the generated inputs."""
    return stable_tags(
        model_fingerprint=model_fingerprint(plan.model),
        graph_fingerprint=plan.fingerprints.graph, plan_fingerprint=plan_fingerprint(plan),
        calibration_fingerprint=plan.fingerprints.calibration,
        arrival=f"validate:isolated+closed-loop stream,in_flight={in_flight}", seed=seed,
        devices=[(d.device, d.cores, d.threads, d.backend) for d in tel.devices])


def _telemetry_run(plan: Plan, tel: Telemetry, program: ExecProgram,
                   tags: Mapping[str, str], window_requests: int | None) -> Any:
    """The run's telemetry windows (``runtime.windows``): ``window_requests`` requests each
    over the isolated requests and the stream in order; 0: per phase, five windows of the
    isolated requests (where the request hand-off is measured) then ten of the stream."""
    if window_requests is None:
        return None

    if window_requests:
        return windows_from_telemetry(plan, tel, window_requests=window_requests, tags=tags,
                                      program=program, phases=(ISOLATED, STREAM))
    runs = []
    for phase, n in ((ISOLATED, 5), (STREAM, 10)):
        got = len(tel.requests_of(phase))
        if got:
            runs.append(windows_from_telemetry(plan, tel, window_requests=max(1, got // n),
                                               tags=tags, program=program, phases=(phase,)))
    return concat_runs(runs)


def _quality_check(plan: Plan, quality: Sequence[OutputQuality], inputs: str
                   ) -> QualityCheck | None:
    """The measured quality against the plan's precision budget (None: the plan records
    no precision policy)."""
    pr = plan.precision
    if pr is None:
        return None
    budget = QualityBudget(pr.budget_metric, pr.budget_value)
    measured = _worst(quality)
    if budget.metric not in measured:
        return None
    err = budget.error(measured)
    return QualityCheck(pr.policy, budget.metric, budget.value, budget.limit, measured,
                        dict(pr.estimated), err, pr.estimated_error, budget.holds(measured),
                        inputs)


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


def _worst(quality: Sequence[OutputQuality]) -> dict[str, float]:
    """The worst output's figures, named as quality budgets name them."""
    if not quality:
        return {}
    return worst_quality((q.rel_l2_max, q.cosine_min, q.max_abs, q.top1_agreement)
                         for q in quality)
