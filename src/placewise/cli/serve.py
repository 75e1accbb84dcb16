"""``placewise serve``: the plan as a loaded service, simulated and measured; rendered here
(the library is ``placewise.serve``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from placewise.cli import (
    JsonOpt,
    _parse_shapes,
    _print_json,
    _progress,
    _table,
    app,
    err,
    machine_of_plan,
    out,
)
from placewise.errors import InputError
from placewise.serve.policies import max_batch
from placewise.units import format_seconds, parse_seconds

__all__ = ["demo_serve", "serve", "tune"]

_SHAPE_PEEK_BYTES = 1 << 16


# ---- serve ---------------------------------------------------------------------------------------
@app.command()
def serve(
    plan_file: Annotated[Path, typer.Argument(metavar="PLAN", help="Plan JSON")],
    rate: Annotated[float | None, typer.Option(help="Open-loop arrivals per second (Poisson; with --cv, gamma)")] = None,
    cv: Annotated[float | None, typer.Option(help="Coefficient of variation of inter-arrival times (1: Poisson; >1: bursty)")] = None,
    concurrency: Annotated[int | None, typer.Option(help="Closed-loop clients (each waits for its answer, thinks, sends again)")] = None,
    think: Annotated[str, typer.Option(help="Mean think time of a closed-loop client (e.g. 2ms)")] = "0",
    trace_file: Annotated[Path | None, typer.Option("--trace", help="Replay arrivals: JSON lines {\"t\": s, \"class\": NAME, \"shape\": {INPUT: DIMS}}")] = None,
    requests: Annotated[int | None, typer.Option(help="Run length in requests (default 10000 unless --duration)")] = None,
    duration: Annotated[str | None, typer.Option(help="Run length in seconds of arrivals (e.g. 30s)")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the arrival process")] = 0,
    request_class: Annotated[list[str] | None, typer.Option("--class", help="NAME:share=0.2,priority=1,slo_p99=5ms (repeat; priority 1 is the highest)")] = None,
    batching: Annotated[str, typer.Option(help="none, static:B, or dynamic:max_batch=B,max_delay=D,preferred=P1/P2")] = "none",
    queue_limit: Annotated[int | None, typer.Option("--queue-limit", help="Queued requests at most; more are rejected")] = None,
    timeout: Annotated[str | None, typer.Option(help="Per-request queue timeout (e.g. 20ms)")] = None,
    timeout_action: Annotated[str, typer.Option("--timeout-action", help="reject or delay (Triton's queue policy)")] = "reject",
    preempt: Annotated[bool, typer.Option("--preempt", help="A full queue evicts its newest lowest-priority request for a higher-priority arrival")] = False,
    per_batch: Annotated[str, typer.Option("--per-batch", help="same (the plan's placement re-evaluated at batch b) or replan (searched at b)")] = "same",
    replicas: Annotated[int, typer.Option(help="Copies of the plan behind a router")] = 1,
    replica_plan: Annotated[list[Path] | None, typer.Option("--replica-plan", help="Another plan of the same model on other devices: one more replica, not alike (repeat; simulated)")] = None,
    router: Annotated[str, typer.Option(help="round-robin, least-outstanding, weighted (by each replica's capacity) or least-delay (where a request finishes first)")] = "round-robin",
    in_flight: Annotated[int | None, typer.Option("--in-flight", help="Batches in the pipeline at once per replica (default: as many as it holds at saturation, ceil(latency / period))")] = None,
    slo_p99: Annotated[str | None, typer.Option("--slo-p99", help="p99 objective of requests without a class objective (e.g. 5ms)")] = None,
    find_max_rate: Annotated[bool, typer.Option("--find-max-rate", help="Search the highest Poisson rate whose p99 meets --slo-p99")] = False,
    sweep_values: Annotated[str | None, typer.Option("--sweep", help="Rates (120, or 60% of capacity) or, with --concurrency, client counts: 30%,60%,80%")] = None,
    real: Annotated[bool, typer.Option("--real", help="Also serve it for real on this machine (open loop, same arrivals and policy) and print both")] = False,
    limit: Annotated[str, typer.Option(help="Wall-time bound of a --real run")] = "60s",
    hw: Annotated[str | None, typer.Option("--hw", help="The plan's machine (default: its preset, 'local', or the spec file the plan recorded); checked against the plan's fingerprint")] = None,
    calibration: Annotated[Path | None, typer.Option(help="The calibration the plan was made with (default: the file the plan recorded)")] = None,
    model: Annotated[str | None, typer.Option(help="The plan's model, if moved")] = None,
    shape: Annotated[list[str] | None, typer.Option("--shape", help="Input bindings the plan was made with: NAME=DIMS")] = None,
    telemetry_out: Annotated[Path | None, typer.Option("--telemetry-out", help="With a plan set or shape trace and --real: write each bucket's telemetry windows (RUN.json; RUN.BUCKET.json per bucket when there are several)")] = None,
    window_requests: Annotated[int, typer.Option("--window-requests", help="Executor requests per telemetry window (--telemetry-out)")] = 20,
    against: Annotated[Path | None, typer.Option("--against", help="An earlier serve --json (or telemetry file) to compare with: refused unless the stable tags agree")] = None,
    allow_mismatch: Annotated[bool, typer.Option("--allow-mismatch", help="Compare runs whose stable tags differ, naming the tags that differ")] = False,
    untuned: Annotated[bool, typer.Option("--untuned", help="Simulate with the plan's predicted costs even when 'placewise tune' measured its service")] = False,
    scale: Annotated[float, typer.Option("--scale", help="A workload plan (plan --model A --model B): each model's recorded rate times this")] = 1.0,
    as_json: JsonOpt = False,
) -> None:
    """The plan as a loaded service: tails, queues, batches, utilisation; simulated, and
    with --real measured. A tuned plan (placewise tune) is simulated with its measured
    service (idle-gap cost, spread, capacity). A plan set (or a shape trace, SHAPES.jsonl)
    serves each request in its bucket, padded (--real); a workload plan, each model's stream."""
    if _served_elsewhere(dict(locals())):
        return
    from placewise.runtime.planned import plan_fingerprint
    from placewise.serve.run import ServeSetup, default_window
    from placewise.validate.compare import serve_arrival, serve_stable_tags

    dur, classes, batcher, admission, slo = _serve_options(
        rate=rate, cv=cv, concurrency=concurrency, trace_file=trace_file, requests=requests,
        duration=duration, request_class=request_class, batching=batching,
        queue_limit=queue_limit, timeout=timeout, timeout_action=timeout_action,
        preempt=preempt, slo_p99=slo_p99, find_max_rate=find_max_rate)
    wall = parse_seconds(limit, "--limit")
    trace, shapes_list = _trace_workload(trace_file, classes)
    plan, machine, services = _plan_services(plan_file, against, allow_mismatch, hw,
                                             calibration, per_batch, model, shape, shapes_list)
    service: Any = services[0] if len(services) == 1 else (lambda b, k: services[k](b))
    plans = [plan]
    if replica_plan:
        service, plans = _replica_services(plan, plan_file, services, replica_plan, replicas,
                                           hw, calibration, per_batch, model, shape)
        replicas = len(service)
    tuned = plan.service is not None and not untuned
    setup = ServeSetup(
        batcher, classes, admission, rate=rate, cv=cv, concurrency=concurrency,
        think_s=parse_seconds(think, "--think"), trace=trace,
        requests=requests if requests is not None else (None if dur else 10_000),
        duration_s=dur, seed=seed, replicas=replicas, router=router,
        in_flight=in_flight or default_window(service if replica_plan else services[0], batcher),
        pad_to=plan.batch if real else None,
        slo_p99_s=slo, idle=plan.service if tuned else None)
    result: dict[str, Any] = {
        "plan": str(plan_file), "plan_fingerprint": plan_fingerprint(plan),
        "machine": machine.name, "batching": batcher.describe(), "admission": admission.text(),
        "per_batch": per_batch, "replicas": replicas, "router": router,
        "window": setup.in_flight, "classes": [c.text() for c in classes],
        "service": [services[0].describe(b) for b in sorted({1, plan.batch, max_batch(batcher)})],
        "service_model": "tuned" if tuned else "predicted",
        "replica_plans": [str(plan_file), *map(str, replica_plan or ())]}
    sim_run, fig, interval = _simulated(result, plan, services, service, setup, tuned,
                                        slo if find_max_rate else None, sweep_values)
    result["by_replica"] = list(sim_run.by_replica)
    if real and replica_plan:
        result.update(_serve_replicas_for_real(plans, result["replica_plans"], setup, batcher,
                                               admission, wall, seed, machine, classes, slo,
                                               fig))
    elif real:
        result.update(_serve_for_real(plan, plan_file, setup, batcher, admission, wall,
                                      seed, machine, classes, slo, fig, sim_run, interval))
    result["stable_tags"] = serve_stable_tags(
        plan, arrival=serve_arrival(rate=rate, cv=cv, concurrency=concurrency, think=think,
                                    trace=trace_file), seed=seed,
        threads=str(result["tags"].get("threads", "")) if real else None)
    if against is not None:
        _compare_against(result, against, allow_mismatch)
    if as_json:
        _print_json(result)
        return
    _render_serve(result, real)


def _served_elsewhere(given: dict[str, Any]) -> bool:
    """Serve a plan set or a shape trace (``_serve_shapes``) or a workload plan
    (``cli.workload``) from ``serve``'s arguments ``given``; False for a plain plan."""
    from placewise.cli.workload import is_workload_plan, serve_workload_cli

    plan_file, trace_file = given["plan_file"], given["trace_file"]
    if _shape_path(plan_file, trace_file):
        names = ("real", "seed", "calibration", "batching", "queue_limit", "timeout",
                 "timeout_action", "preempt", "in_flight", "limit", "hw", "model", "shape",
                 "telemetry_out", "window_requests", "as_json", "against", "allow_mismatch")
        _serve_shapes(plan_file, trace_file, classes=given["request_class"],
                      **{k: given[k] for k in names})
        return True
    if is_workload_plan(plan_file):
        keys = ("duration", "scale", "seed", "batching", "real", "limit", "hw",
                "calibration", "as_json")
        serve_workload_cli(plan_file, given, **{k: given[k] for k in keys})
        return True
    if given["scale"] != 1.0:
        raise InputError("--scale applies to a workload plan (plan --model A --model B)",
                         place="--scale")
    return False


def _simulated(result: dict[str, Any], plan: Any, services: list[Any], service: Any,
               setup: Any, tuned: bool, find_max_rate_slo: float | None,
               sweep_values: str | None) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """The simulated part of ``serve``: the highest rate and the sweep when asked, one run
    and the service model's interval (into ``result``); the run, its figures, the
    interval."""
    from placewise.serve.run import find_max_rate, run_interval, run_once, sweep
    from placewise.serve.service import service_interval

    with _progress("serving (simulated)") as cb:
        if find_max_rate_slo is not None:
            result["find_max_rate"] = find_max_rate(
                service if isinstance(service, list) else services[0], setup,
                find_max_rate_slo, progress=cb)
        if sweep_values:
            result["sweep"] = sweep(service, setup, sweep_values.split(","), progress=cb)
        cb("one run", 0.8)
        sim_run, fig = run_once(service, setup)
        cb("the service model's interval", 0.9)
        interval = run_interval(service, setup, service_interval(plan, tuned=tuned))
    result.update(fig)
    result["interval"] = interval
    return sim_run, fig, interval


def _compare_against(result: dict[str, Any], against: Path, allow_mismatch: bool) -> None:
    from placewise.validate.compare import compare_tags_with

    result["against"] = compare_tags_with(result["stable_tags"], against,
                                          allow_mismatch=allow_mismatch)
    for line in result["against"]["tag_differences"]:
        err.print(f"tags differ (--allow-mismatch): {line}", markup=False)


def _replica_services(plan: Any, plan_file: Path, services: list[Any], files: list[Path],
                      replicas: int, hw: str | None, calibration: Path | None,
                      per_batch: str, model: str | None, shape: list[str] | None
                      ) -> tuple[list[Any], list[Any]]:
    """One service and plan per replica: the plan's and each ``--replica-plan``'s, checked
    to be plans of the same model on devices no other replica uses."""
    from placewise.serve.replicas import check_replicas

    if replicas != 1 or len(services) != 1:
        raise InputError("--replica-plan gives one replica per plan: drop --replicas and "
                         "a shape trace", place="--replica-plan")
    svcs, plans = [services[0]], [plan]
    for f in files:
        other, _, svc = _plan_services(f, None, False, hw, calibration, per_batch, model,
                                       shape, [{}])
        svcs.append(svc[0])
        plans.append(other)
    check_replicas(plans, [str(plan_file), *map(str, files)])
    return svcs, plans


def _serve_replicas_for_real(plans: list[Any], files: list[str], setup: Any, batcher: Any,
                             admission: Any, wall: float, seed: int, machine: Any,
                             classes: Any, slo: float | None, simulated: dict[str, Any]
                             ) -> dict[str, Any]:
    """``serve --real --replica-plan``: the same arrivals served by one executor per
    replica on this machine (``serve.replicas``); measured figures beside the simulated
    ones, and each replica's share."""
    from placewise.serve.replicas import serve_replicas
    from placewise.serve.report import summarize

    with _progress("serving (real)") as cb:
        got = serve_replicas(plans, _workload_of(setup), batcher, router=setup.router,
                             admission=admission, priorities=setup.priorities,
                             limit_s=wall, seed=seed, machine=machine, files=files,
                             progress=cb)
    measured = summarize(got.result, classes, slo_p99_s=slo)
    return {**measured, "simulated": simulated, "measured": measured,
            "late_s": {k: getattr(got.late_s, k) for k in got.late_s.__slots__},
            "tags": got.tags, "real_notes": list(got.notes),
            "by_replica_measured": list(got.result.by_replica)}


def _plan_services(plan_file: Path, against: Path | None, allow_mismatch: bool, hw: str | None,
                   calibration: Path | None, per_batch: str, model: str | None,
                   shape: list[str] | None,
                   shapes_list: list[dict[str, tuple[int, ...]]]) -> tuple[Any, Any, list[Any]]:
    """The plan, its machine, and one service model per request shape (checked against
    ``--against``'s tags and the plan's calibration before anything runs)."""
    from placewise.cost.load import load_cost_model
    from placewise.plan import load_plan
    from placewise.plan_sources import plan_calibration
    from placewise.serve.service import PlanService
    from placewise.validate.compare import compare_tags_with, plan_tags

    plan = load_plan(plan_file)
    if against is not None:  # before anything runs: the fingerprints and machine tags
        known = plan_tags(plan)
        compare_tags_with(known, against, keys=tuple(known), allow_mismatch=allow_mismatch)
    machine = machine_of_plan(plan, hw, file=str(plan_file))
    calibration = plan_calibration(plan, calibration, file=str(plan_file))  # else recorded
    cost_model = load_cost_model(machine, calibration)
    if cost_model.fingerprint() != plan.fingerprints.calibration and calibration is None:
        raise InputError("the plan was made with a calibration: pass it with --calibration",
                         file=str(plan_file), place="fingerprints.calibration")
    base_shapes = _parse_shapes(shape) or {}
    services = [PlanService(plan, machine, cost_model, per_batch, model,
                            {**base_shapes, **s} or None, file=str(plan_file))
                for s in shapes_list]
    return plan, machine, services


def _trace_workload(trace_file: Path | None,
                    classes: Any) -> tuple[Any, list[dict[str, tuple[int, ...]]]]:
    """``--trace``'s arrivals as a workload (None without it) and the request shapes in it."""
    from placewise.serve.arrivals import load_trace
    from placewise.serve.sim import Workload

    trace = None
    shapes_list: list[dict[str, tuple[int, ...]]] = [{}]
    if trace_file is not None:
        t, cls, shp, shapes_list = load_trace(trace_file, [c.name for c in classes])
        trace = Workload(t, cls if len(classes) > 1 else None,
                         shp if len(shapes_list) > 1 else None)
    return trace, shapes_list


def _serve_options(*, rate: float | None, cv: float | None, concurrency: int | None,
                   trace_file: Path | None, requests: int | None, duration: str | None,
                   request_class: list[str] | None, batching: str, queue_limit: int | None,
                   timeout: str | None, timeout_action: str, preempt: bool,
                   slo_p99: str | None, find_max_rate: bool) -> tuple[Any, ...]:
    """``serve``'s options checked and parsed: (duration, classes, batcher, admission, slo)."""
    from placewise.serve.policies import parse_batching
    from placewise.serve.queue import Admission, RequestClass, parse_class

    given = [x for x in (rate is not None, concurrency is not None, trace_file is not None) if x]
    if len(given) != 1:
        raise InputError("give one arrival process: --rate, --concurrency or --trace",
                         place="--rate")
    if rate is not None and not (rate > 0 and rate < float("inf")):
        raise InputError(f"the arrival rate must be > 0, got {rate}", place="--rate")
    if cv is not None and not (cv > 0 and cv < float("inf")):
        raise InputError(f"the coefficient of variation must be > 0, got {cv}", place="--cv")
    if requests is not None and requests < 1:
        raise InputError(f"requests must be a positive integer, got {requests}",
                         place="--requests")
    dur = parse_seconds(duration, "--duration") if duration is not None else None
    if dur is not None and not dur > 0:
        raise InputError("the duration must be > 0", place="--duration")
    classes = tuple(parse_class(c) for c in request_class or ()) or (RequestClass("default"),)
    if len({c.name for c in classes}) != len(classes):
        raise InputError("a class is declared twice", place="--class")
    batcher = parse_batching(batching)
    admission = Admission(queue_limit, parse_seconds(timeout, "--timeout") if timeout else None,
                          timeout_action, preempt)
    slo = parse_seconds(slo_p99, "--slo-p99") if slo_p99 else None
    if find_max_rate and slo is None:
        raise InputError("--find-max-rate needs --slo-p99", place="--slo-p99")
    return dur, classes, batcher, admission, slo


def _serve_for_real(plan: Any, plan_file: Path, setup: Any, batcher: Any, admission: Any,
                    wall: float, seed: int, machine: Any, classes: Any,
                    slo: float | None, simulated: dict[str, Any], sim_run: Any,
                    interval: dict[str, Any]) -> dict[str, Any]:
    """``serve --real``: the same arrivals and policy served on this machine; the measured
    figures (also at the top level), the simulated ones beside them, the run's lateness,
    tags and notes; the per-request terms on both sides and whether the measured p50 and
    p99 fall inside the predicted interval."""
    from placewise.serve.real import serve_real
    from placewise.serve.report import inside, summarize, terms
    from placewise.serve.service import predicted_compute_s

    wl = _workload_of(setup)
    with _progress("serving (real)") as cb:
        try:
            got = serve_real(plan, wl, batcher, admission=admission,
                             priorities=setup.priorities, in_flight=setup.in_flight,
                             limit_s=wall, seed=seed, machine=machine, progress=cb)
        except InputError as exc:  # the plan file is what cannot run here
            raise exc.at(file=str(plan_file)) from None
    measured = summarize(got.result, classes, slo_p99_s=slo)
    return {**measured, "simulated": simulated, "measured": measured,
            "late_s": {k: getattr(got.late_s, k) for k in got.late_s.__slots__},
            "tags": got.tags, "real_notes": list(got.notes),
            "terms": terms(sim_run, got.result, got.late, compute_s=got.compute_s,
                           predicted_compute_s=predicted_compute_s(plan)),
            "inside": inside(measured, interval)}


def _workload_of(setup: Any) -> Any:
    from placewise.serve.run import workload
    from placewise.serve.sim import ClosedLoop

    wl = workload(setup)
    if isinstance(wl, ClosedLoop):
        raise InputError("--real drives the executor open loop: use --rate or --trace",
                         place="--concurrency")
    return wl


def _render_serve(r: dict[str, Any], real: bool) -> None:
    def fs(x: Any) -> str:
        return format_seconds(x) if isinstance(x, int | float) else "-"

    out.print(f"[bold]serve[/bold] {r['plan']} on {r['machine']}: {r['batching']}; "
              f"{r['admission']}; {r['replicas']} replica(s), {r['router']}; "
              f"{r['window']} batch(es) in flight; per batch: {r['per_batch']}")
    out.print(_table("service per batch (the plan evaluated at b)",
                     ["batch", "latency", "period", "throughput/s", "bottleneck"],
                     [[s["batch"], fs(s["latency_s"]), fs(s["period_s"]),
                       f"{s['throughput_rps']:.4g}", s["bottleneck"]] for s in r["service"]]))
    runs = [("simulated", r["simulated"]), ("measured", r["measured"])] if real else [
        ("simulated", r)]
    out.print(_table("requests", ["", "arrived", "completed", "rejected", "timed out",
                                  "in flight", "conserved"],
                     [[k, f["arrived"], f["completed"], f["rejected"], f["timed_out"],
                       f["in_flight"], f["conserved"]] for k, f in runs]))
    out.print(_table("latency", ["", "n", "p50", "p90", "p95", "p99", "p99.9", "mean wait"], [
        [k, f["n"], fs(f["p50_s"]), fs(f["p90_s"]), fs(f["p95_s"]),
         fs(f["p99_s"]) + ("" if f["p99_reliable"] else " (n<299)"), fs(f["p999_s"]),
         fs(f["mean_wait_s"])] for k, f in runs]))
    out.print(_table("rates", ["", "req/s", "goodput/s", "mean batch", "padded", "preempted"], [
        [k, f"{f['throughput_rps']:.4g}", f"{f['goodput_rps']:.4g}",
         f"{f['mean_batch']:.3g}" if f["mean_batch"] else "-", f["padded"], f["preempted"]]
        for k, f in runs]))
    if len(r["per_class"]) > 1:
        rows = []
        for k, f in runs:
            for name, c in f["per_class"].items():
                rows.append([f"{k} {name}", c["priority"], c["arrived"], c["completed"],
                             c["rejected"] + c["timed_out"], fs(c["p50_s"]), fs(c["p99_s"]),
                             fs(c["slo_p99_s"]), c["slo_met"], f"{c['goodput_rps']:.4g}"])
        out.print(_table("per class", ["", "priority", "arrived", "completed", "lost", "p50",
                                       "p99", "p99 objective", "met", "goodput/s"], rows))
        out.print(f"fairness (Jain, {r['fairness']['over']}): {r['fairness']['jain']}")
    if len(r.get("by_replica", [])) > 1:
        out.print("requests per replica (simulated): " + ", ".join(
            f"{p} {n}" for p, n in zip(r["replica_plans"], r["by_replica"], strict=True)))
    if "by_replica_measured" in r:
        out.print("requests per replica (measured): " + ", ".join(
            f"{p} {n}" for p, n in zip(r["replica_plans"], r["by_replica_measured"],
                                       strict=True)))
    for k, f in runs:
        util = ", ".join(f"{n} {u:.0%}" for n, u in f["utilization"].items())
        sizes = ", ".join(f"{b}: {c}" for b, c in f["batch_sizes"].items())
        out.print(f"{k}: utilisation {util or '-'}; batch sizes {sizes or '-'}")
    if "find_max_rate" in r:
        m = r["find_max_rate"]
        out.print(f"highest Poisson rate with p99 <= {fs(m['slo_p99_s'])}: "
                  f"{m['max_rate_rps']:.4g}/s (capacity {m['capacity_rps']:.4g}/s; "
                  f"{len(m['trials'])} trials; {m['rule']})")
    if "sweep" in r:
        key = "concurrency" if r["sweep"] and "concurrency" in r["sweep"][0] else "rate_rps"
        out.print(_table("sweep", [key, "req/s", "p50", "p95", "p99", "mean wait",
                                   "mean batch", "lost"],
                         [[f"{p[key]:.4g}", f"{p['throughput_rps']:.4g}", fs(p["p50_s"]),
                           fs(p["p95_s"]), fs(p["p99_s"]), fs(p["mean_wait_s"]),
                           f"{p['mean_batch']:.3g}" if p["mean_batch"] else "-",
                           p["rejected"] + p["timed_out"]] for p in r["sweep"]]))
    _render_model(r, real)
    for note in r.get("notes", []):
        out.print(f"note: {note}")


def _render_model(r: dict[str, Any], real: bool) -> None:
    """The service model's interval and, measured, where each request's time went."""
    def fs(x: Any) -> str:
        return format_seconds(x) if isinstance(x, int | float) else "-"

    iv = r.get("interval")
    if iv:
        line = (f"service model: {r.get('service_model', 'predicted')}; p50 interval "
                f"{fs(iv['p50']['low_s'])} .. {fs(iv['p50']['high_s'])}, p99 interval "
                f"{fs(iv['p99']['low_s'])} .. {fs(iv['p99']['high_s'])}")
        if real and "inside" in r:
            ins = r["inside"]
            line += (f"; measured p50 {'inside' if ins['p50']['inside'] else 'OUTSIDE'}, "
                     f"p99 {'inside' if ins['p99']['inside'] else 'OUTSIDE'}")
        out.print(line)
    if real and "terms" in r:
        t = r["terms"]
        rows = [[name, fs(v["simulated"]["p50_s"]), fs(v["measured"]["p50_s"]),
                 fs(v["simulated"]["p99_s"]), fs(v["measured"]["p99_s"]),
                 fs(v["simulated"]["mean_s"]), fs(v["measured"]["mean_s"])]
                for name, v in t["terms"].items()]
        for side in ("after_idle", "warm"):
            s, m = t["service_by_idle"]["simulated"][side], t["service_by_idle"]["measured"][side]
            rows.append([f"service, {side.replace('_', ' ')} ({s['n']}/{m['n']})",
                         fs(s["p50_s"]), fs(m["p50_s"]), fs(s["p99_s"]), fs(m["p99_s"]),
                         fs(s["mean_s"]), fs(m["mean_s"])])
        out.print(_table("per request, simulated against measured",
                         ["term", "sim p50", "real p50", "sim p99", "real p99", "sim mean",
                          "real mean"], rows))
        mm = t["mean_miss"]
        out.print(f"mean latency missed by {fs(mm['latency_s'])}: wait {fs(mm['wait_s'])}, "
                  f"service {fs(mm['service_s'])}")


def demo_serve(plan: Any, plan_file: Path, cal_file: Path, machine: Any) -> dict[str, Any]:
    """Serve the demo's local plan at half its predicted capacity, simulated and real; the
    result as ``serve --real --json`` prints it."""
    from placewise.cost.load import load_cost_model
    from placewise.runtime.planned import plan_fingerprint
    from placewise.serve.policies import parse_batching
    from placewise.serve.real import serve_real
    from placewise.serve.report import summarize
    from placewise.serve.run import ServeSetup, capacity_rps, default_window, run_once
    from placewise.serve.service import PlanService

    service = PlanService(plan, machine, load_cost_model(machine, cal_file))
    batcher = parse_batching("none")
    base = ServeSetup(batcher, in_flight=default_window(service, batcher), pad_to=plan.batch)
    rate = 0.5 * capacity_rps(service, base)
    out.print(f"$ placewise serve {plan_file} --calibration {cal_file} --rate {rate:.4g} "
              f"--requests 1000 --real")
    setup = ServeSetup(batcher, rate=rate, requests=1000, in_flight=base.in_flight,
                       pad_to=plan.batch)
    _, sim = run_once(service, setup)
    with _progress("serving (real)") as cb:
        got = serve_real(plan, _workload_of(setup), batcher, in_flight=setup.in_flight,
                         machine=machine, limit_s=60, progress=cb)
    real = summarize(got.result)
    result: dict[str, Any] = {
        "plan": str(plan_file), "plan_fingerprint": plan_fingerprint(plan),
        "machine": machine.name,
                   "batching": batcher.describe(), "admission": "unbounded", "replicas": 1,
                   "router": "round-robin", "window": setup.in_flight, "per_batch": "same",
                   "service": [service.describe(plan.batch)], "simulated": sim,
                   "measured": real, **real}
    _render_serve(result, True)
    return result


# ---- tune --------------------------------------------------------------------------------------
@app.command()
def tune(
    plan_file: Annotated[Path, typer.Argument(metavar="PLAN", help="Plan JSON (made with --hw local)")],
    output: Annotated[Path | None, typer.Option("-o", "--out", help="Write the tuned plan here (default: PLAN itself)")] = None,
    requests: Annotated[int, typer.Option(help="Requests per idle gap measured")] = 60,
    repeats: Annotated[int, typer.Option(help="Times the idle-gap ladder is measured")] = 2,
    seed: Annotated[int, typer.Option(help="Seed of the request inputs")] = 0,
    model: Annotated[str | None, typer.Option(help="The plan's model, if moved")] = None,
    shape: Annotated[list[str] | None, typer.Option("--shape", help="Input bindings the plan was made with: NAME=DIMS")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Serve the plan for real on this machine to choose its runtime settings (onnxruntime
    pool spinning, the client's idle wait) and measure what an idle gap before a request
    costs; record both in the plan (its 'service' section), which serve, serve --real and
    export then use."""
    from placewise.io import check_output_path
    from placewise.plan import load_plan, save_plan
    from placewise.runtime.planned import check_machine, plan_fingerprint
    from placewise.serve.tune import tune_service

    for name, v in (("--requests", requests), ("--repeats", repeats)):
        if v < 1:
            raise InputError(f"must be a positive integer, got {v}", place=name)
    target = output if output is not None else plan_file
    check_output_path(target, place="--out")
    plan = load_plan(plan_file)
    machine = check_machine(plan, None, str(plan_file))
    if plan.workload is not None:
        _tune_workload(plan, plan_file, target, machine, requests, repeats, seed, as_json)
        return
    with _progress("tuning") as cb:
        try:
            rec = tune_service(plan, machine=machine, source=model,
                               shapes=_parse_shapes(shape), per_gap=requests, probe=requests,
                               repeats=repeats, seed=seed, progress=cb)
        except InputError as exc:
            raise exc.at(file=str(plan_file)) from None
    tuned = plan.model_copy(update={"service": rec})
    save_plan(tuned, target)
    result = {"plan": str(target), "from": str(plan_file),
              "plan_fingerprint": plan_fingerprint(tuned), "service": rec.to_json()}
    if as_json:
        _print_json(result)
        return
    _render_tune(result)


def _tune_workload(plan: Any, plan_file: Path, target: Path, machine: Any, requests: int,
                   repeats: int, seed: int, as_json: bool) -> None:
    """``tune`` of a workload plan: each model's part tuned on its own (the other models
    idle), its service recorded in its model record (``ModelRecord.service``)."""
    from placewise.plan import save_plan
    from placewise.plan_workload import member_plan
    from placewise.runtime.planned import plan_fingerprint
    from placewise.serve.tune import tune_service

    assert plan.workload is not None
    models = []
    for m in plan.workload.models:
        with _progress(f"tuning {m.name}") as cb:
            try:
                rec = tune_service(member_plan(plan, m.name), machine=machine,
                                   per_gap=requests, probe=requests, repeats=repeats,
                                   seed=seed, progress=cb)
            except InputError as exc:
                raise exc.at(file=str(plan_file)) from None
        models.append(m.model_copy(update={"service": rec}))
    tuned = plan.model_copy(update={"workload": plan.workload.model_copy(
        update={"models": tuple(models)})})
    save_plan(tuned, target)
    services = {m.name: m.service.to_json() for m in models if m.service}
    result = {"plan": str(target), "from": str(plan_file),
              "plan_fingerprint": plan_fingerprint(tuned), "models": services}
    if as_json:
        _print_json(result)
        return
    for name, svc in services.items():
        out.print(f"[bold]{name}[/bold]")
        _render_tune({"plan": str(target), "from": str(plan_file),
                      "plan_fingerprint": result["plan_fingerprint"], "service": svc})


def _render_tune(r: dict[str, Any]) -> None:
    s = r["service"]
    out.print(f"[bold]tune[/bold] {r['from']} -> {r['plan']}")
    out.print(_table("runtime settings tried (latency of a Poisson stream at 30% of the predicted capacity)",
                     ["pool spinning", "client spins", "p50", "p90", "chosen"],
                     [["on" if t["session_spinning"] else "off",
                       format_seconds(t["client_spin_s"]), format_seconds(t["latency_p50_s"]),
                       format_seconds(t["latency_p90_s"]),
                       "yes" if (t["session_spinning"], t["client_spin_s"]) == (
                           s["session_spinning"], s["client_spin_s"]) else ""]
                      for t in s["trials"]]))
    out.print(_table(f"service after an idle gap (predicted {format_seconds(s['predicted_latency_s'])})",
                     ["idle gap", "p50", "p90", "p50 / predicted", "requests"],
                     [[format_seconds(p["gap_s"]), format_seconds(p["service_p50_s"]),
                       format_seconds(p["service_p90_s"]),
                       f"{p['service_p50_s'] / s['predicted_latency_s']:.2f}", p["n"]]
                      for p in s["points"]]))
    out.print(f"capacity back to back ({s['window']} in flight): {s['capacity_rps']:.4g}/s, "
              f"predicted {s['predicted_capacity_rps']:.4g}/s; repeats moved by "
              f"{s['spread']:.1%} (p50), {s['tail_spread']:.1%} (p90); load generator late by "
              f"{format_seconds(s['late_p50_s'])} (p50), {format_seconds(s['late_p99_s'])} (p99)")


# ---- serve a plan set (or a plan) on a shape trace ------------------------------------------
def _shape_path(plan_file: Path, trace_file: Path | None) -> bool:
    """Whether ``serve`` takes the bucketed path: a plan set, or a shape trace
    (``adapt.trace``: its first record has ``t_s``)."""
    from placewise.adapt.planset import is_plan_set

    if is_plan_set(plan_file):
        return True
    if trace_file is None or not trace_file.is_file():
        return False
    import json

    try:
        with open(trace_file, "rb") as fh:
            head = fh.read(_SHAPE_PEEK_BYTES)
        first = next((ln for ln in head.splitlines() if ln.strip()), b"")
        rec = json.loads(first)
    except (OSError, ValueError):
        return False
    return isinstance(rec, dict) and "t_s" in rec


def _serve_shapes(plan_file: Path, trace_file: Path, *, real: bool, seed: int,
                  classes: list[str] | None, calibration: Path | None, batching: str,
                  queue_limit: int | None, timeout: str | None, timeout_action: str, preempt: bool,
                  in_flight: int | None, limit: str, hw: str | None, model: str | None,
                  shape: list[str] | None, telemetry_out: Path | None, window_requests: int,
                  as_json: bool, against: Path | None = None,
                  allow_mismatch: bool = False) -> None:
    """``serve PLANSET.json --trace SHAPES.jsonl [--real]``: every request in its bucket,
    padded; per bucket requests, latency, padding waste (simulated from each bucket's
    predicted service; with --real also measured, with telemetry); the tags."""
    from placewise.adapt.serving import bucket_rows, open_service
    from placewise.adapt.serving_sim import simulate_trace
    from placewise.adapt.trace import load_shape_trace
    from placewise.io import check_output_path
    from placewise.plan_sources import plan_calibration
    from placewise.serve.policies import parse_batching
    from placewise.serve.queue import Admission, RequestClass, parse_class

    trace = load_shape_trace(trace_file)  # refused before anything is loaded
    if parse_batching(batching).describe() != "none":
        raise InputError("requests of a shape trace carry their own rows and are sent one "
                         "at a time: use --batching none", place="--batching")
    if window_requests < 1:
        raise InputError(f"must be >= 1, got {window_requests}", place="--window-requests")
    if (telemetry_out is not None or against is not None) and not real:
        raise InputError("telemetry and its tags come from a real run: add --real",
                         place="--telemetry-out" if telemetry_out is not None else "--against")
    cls = tuple(parse_class(c) for c in classes or ()) or (RequestClass("default"),)
    prio = tuple(c.priority for c in cls)
    admission = Admission(queue_limit, parse_seconds(timeout, "--timeout") if timeout else None,
                          timeout_action, preempt)
    wall = parse_seconds(limit, "--limit")
    if telemetry_out is not None:
        check_output_path(telemetry_out, place="--telemetry-out")
    plan_set, rows, _ = bucket_rows(plan_file)
    machine = machine_of_plan(rows[0][4], hw, file=str(plan_file))
    calibration = plan_calibration(rows[0][4], calibration, file=str(plan_file))
    with _progress("serving (simulated)") as cb:
        cb("simulating", 0.5)
        sim = simulate_trace(plan_file, trace, machine=machine, calibration=calibration,
                             priorities=prio, admission=admission, in_flight=in_flight or 1)
    result: dict[str, Any] = {"plan": str(plan_file), "plan_set": plan_set is not None,
                              "trace": str(trace_file), "machine": machine.name,
                              "requests": len(trace), "real": real,
                              **sim.to_json(), "simulated": sim.to_json()}
    if real:
        with _progress("serving (real)") as cb, open_service(
                plan_file, priorities=prio, seed=seed, admission=admission,
                in_flight=in_flight or 1, machine=machine, source=model,
                shapes=_parse_shapes(shape), progress=cb) as svc:
            block = svc.serve(trace, limit_s=wall, progress=cb,
                              window_requests=window_requests if telemetry_out else None)
            names = svc.bucket_names
        result.update(_shapes_result(block, cls))
        from placewise.runtime.telemetry import STABLE_TAG_KEYS

        result["stable_tags"] = {k: str(block.tags[k]) for k in STABLE_TAG_KEYS
                                 if k in block.tags}
        if against is not None:
            from placewise.validate.compare import compare_tags_with

            result["against"] = compare_tags_with(result["stable_tags"], against,
                                                  allow_mismatch=allow_mismatch)
            for line in result["against"]["tag_differences"]:
                err.print(f"tags differ (--allow-mismatch): {line}", markup=False)
        if telemetry_out is not None:
            result["telemetry_files"] = _write_runs(block, telemetry_out, names)
    if as_json:
        _print_json(result)
        return
    _render_shapes(result)


def _shapes_result(block: Any, classes: Any) -> dict[str, Any]:
    """The measured figures of a served block (``serve --json`` keys)."""
    from placewise.serve.report import summarize

    measured = summarize(block.result, classes)
    tel: dict[str, Any] = {}
    for b in block.buckets:
        t = b.telemetry
        tel[b.name] = None if t is None else {
            "executor_requests": len(t.requests), "task_records": len(t.tasks),
            "devices": [d.device for d in t.devices],
            "tags": {k: t.tags[k] for k in ("bucket", "plan_fingerprint", "graph_fingerprint")
                     if k in t.tags}}
    per_bucket = [b.to_json() for b in block.buckets]
    return {**measured, "buckets": per_bucket, "padding": block.padding.to_json(),
            "measured": {**measured, "buckets": per_bucket,
                         "padding": block.padding.to_json()},
            "telemetry": tel, "tags": dict(block.tags), "real_notes": list(block.notes),
            "late_s": block.to_json()["late_s"]}


def _write_runs(block: Any, path: Path, names: tuple[str, ...]) -> list[str]:
    """Each bucket's telemetry run (buckets that ran nothing have none)."""
    from placewise.runtime.windows import save_telemetry_run

    runs = block.runs
    out: list[str] = []
    for name in names:
        if name not in runs:
            continue
        target = path if len(names) == 1 else path.with_name(
            f"{path.stem}.{name}{path.suffix or '.json'}")
        save_telemetry_run(runs[name], target)
        out.append(str(target))
    return out


def _render_shapes(r: dict[str, Any]) -> None:
    def fs(x: Any) -> str:
        return format_seconds(x) if isinstance(x, int | float) else "-"

    kind = "plan set" if r["plan_set"] else "plan"
    out.print(f"[bold]serve[/bold] {kind} {r['plan']} on {r['machine']}, trace {r['trace']} "
              f"({r['requests']} requests)")
    runs = [("simulated", r["simulated"])] + ([("measured", r["measured"])] if r["real"]
                                              else [])
    for what, f in runs:
        out.print(_table(f"{what}, per bucket", [
            "bucket", "requests", "p50", "p99", "padded rows", "padded", "padding time"],
            [[b["name"], f"{b['completed']}/{b['arrived']}", fs(b["p50_s"]), fs(b["p99_s"]),
              f"{b['padding']['padded_rows']}/{b['padding']['rows_run']}",
              f"{b['padding']['padded_fraction']:.1%}", fs(b["padding"]["padding_time_s"])]
             for b in f["buckets"]]))
        p = f["padding"]
        out.print(f"{what}: {f['completed']} of {f['arrived']} completed (conserved: "
                  f"{f['conserved']}); p50 {fs(f['p50_s'])}, p99 {fs(f['p99_s'])}; padding "
                  f"{p['padded_fraction']:.1%} of the elements run, "
                  f"{fs(p['padding_time_s'])} of {fs(p['busy_s'])} service time")
    if r["real"]:
        from placewise.runtime.telemetry import STABLE_TAG_KEYS

        tel = ", ".join(f"{n} {t['executor_requests']}" for n, t in r["telemetry"].items()
                        if t)
        out.print(f"telemetry (executor requests per bucket): {tel or '-'}")
        out.print("tags: " + ", ".join(f"{k}={r['tags'][k]}" for k in STABLE_TAG_KEYS
                                       if k in r["tags"]))
    for f in r.get("telemetry_files", []):
        out.print(f"wrote {f}")
    for note in r.get("real_notes", []):
        out.print(f"note: {note}")
