"""``placewise serve`` of a workload plan (several models on one machine): each model's
stream as the plan records it, simulated and, with --real, measured; rendered here (the
library is ``placewise.serve.workload``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from placewise.cli import _print_json, _progress, _table, err, machine_of_plan, out
from placewise.errors import InputError
from placewise.units import format_seconds

__all__ = ["ONE_STREAM", "is_workload_plan", "serve_workload_cli"]


def is_workload_plan(plan_file: Path) -> bool:
    """Whether ``plan_file`` is a workload plan (read only when it is a readable plan)."""
    from placewise.plan import load_plan

    try:
        return load_plan(plan_file).workload is not None
    except Exception:
        return False


#: serve's options that name one stream (flag -> parameter, its default): a workload plan
#: records each model's stream, so none of them applies
ONE_STREAM = {"--rate": ("rate", None), "--cv": ("cv", None),
              "--concurrency": ("concurrency", None), "--trace": ("trace_file", None),
              "--requests": ("requests", None), "--class": ("request_class", None),
              "--replicas": ("replicas", 1), "--replica-plan": ("replica_plan", None),
              "--find-max-rate": ("find_max_rate", False), "--sweep": ("sweep_values", None),
              "--against": ("against", None), "--model": ("model", None),
              "--shape": ("shape", None), "--telemetry-out": ("telemetry_out", None)}


def serve_workload_cli(plan_file: Path, given: dict[str, Any], *, duration: str | None,
                       scale: float, seed: int, batching: str, real: bool, limit: str,
                       hw: str | None, calibration: Path | None, as_json: bool) -> None:
    """``serve`` of a workload plan (module docstring); ``given``: every argument of
    ``serve`` by parameter name, to refuse the options that name one stream (``ONE_STREAM``)."""
    from placewise.cost.load import load_cost_model
    from placewise.plan import load_plan
    from placewise.plan_sources import plan_calibration
    from placewise.runtime.planned import plan_fingerprint
    from placewise.serve.policies import parse_batching
    from placewise.serve.service import PlanService
    from placewise.serve.workload import (
        by_model,
        serve_workload,
        simulate_workload,
        workload_arrivals,
    )
    from placewise.units import parse_seconds

    for option, (name, default) in ONE_STREAM.items():
        if given.get(name, default) not in (default, []):
            raise InputError(f"{option} does not apply to a workload plan: each model's "
                             f"stream is the one the plan records (plan --stream "
                             f"NAME:rate=R)", file=str(plan_file), place=option)
    plan = load_plan(plan_file)
    assert plan.workload is not None
    batcher = parse_batching(batching)
    dur = parse_seconds(duration, "--duration") if duration is not None else 10.0
    wall = parse_seconds(limit, "--limit")
    machine = machine_of_plan(plan, hw, file=str(plan_file))
    cal = plan_calibration(plan, calibration, file=str(plan_file))
    cost_model = load_cost_model(machine, cal)
    whole = PlanService(plan, machine, cost_model, file=str(plan_file))
    try:
        arrivals = workload_arrivals(plan, dur, scale=scale, seed=seed)
    except InputError as exc:
        raise exc.at(file=str(plan_file)) from None
    names = [m.name for m in plan.workload.models]
    with _progress("simulating") as cb:
        cb("simulating", 0.1)
        sim = simulate_workload(whole, arrivals, batcher)
        cb("done", 1.0)
    result: dict[str, Any] = {
        "plan": str(plan_file), "plan_fingerprint": plan_fingerprint(plan),
        "machine": machine.name, "batching": batcher.describe(), "duration_s": dur,
        "scale": scale, "seed": seed,
        "models": [{"name": m.name, "rate_per_s": (m.rate_per_s or 0.0) * scale,
                    "priority": m.priority, "slo_p99_s": m.slo_p99_s}
                   for m in plan.workload.models],
        "simulated": {"by_model": [f.to_json() for f in by_model(sim, names)],
                      "utilization": dict(zip(sim.resources, sim.utilization(),
                                              strict=True)),
                      "conserved": sim.conserved()}}
    if real:
        with _progress("serving (real)") as cb:
            try:
                got = serve_workload(plan, arrivals, batcher, limit_s=wall, seed=seed,
                                     machine=machine, file=str(plan_file), progress=cb)
            except InputError as exc:
                raise exc.at(file=str(plan_file)) from None
        result["measured"] = {"by_model": [f.to_json() for f in by_model(got.result, names)],
                              "conserved": got.result.conserved(),
                              "late_p99_s": got.late_s.p99_s, "notes": list(got.notes)}
        result["tags"] = got.tags
    if as_json:
        _print_json(result)
        return
    _render(result)


def _render(r: dict[str, Any]) -> None:
    def fs(x: Any) -> str:
        return format_seconds(x) if isinstance(x, int | float) else "-"

    out.print(f"serve {r['plan']} on {r['machine']}: {len(r['models'])} models, each its own "
              f"Poisson stream for {r['duration_s']:g} s (x{r['scale']:g} the plan's rates), "
              f"batching {r['batching']}")
    measured = {m["name"]: m for m in r.get("measured", {}).get("by_model", [])}
    rows = []
    for spec, sim in zip(r["models"], r["simulated"]["by_model"], strict=True):
        mes = measured.get(spec["name"])
        slo = spec["slo_p99_s"]
        row = [spec["name"], f"{spec['rate_per_s']:.4g}/s", str(spec["priority"]),
               fs(sim["p50_s"]), fs(sim["p99_s"])]
        if measured:
            row += [fs(mes["p50_s"]) if mes else "-", fs(mes["p99_s"]) if mes else "-",
                    f"{mes['throughput_rps']:.4g}/s" if mes else "-"]
        p99 = (mes or sim)["p99_s"]
        row.append("-" if slo is None else (f"{fs(slo)} " + (
            "met" if p99 is not None and p99 <= slo else "MISSED")))
        rows.append(row)
    heads = ["model", "rate", "prio", "sim p50", "sim p99"]
    if measured:
        heads += ["real p50", "real p99", "real rps"]
    out.print(_table("by model", [*heads, "slo p99"], rows))
    util = ", ".join(f"{k} {v:.1%}" for k, v in r["simulated"]["utilization"].items())
    out.print(f"simulated utilization: {util}")
    for note in r.get("measured", {}).get("notes", []):
        err.print(f"note: {note}")
