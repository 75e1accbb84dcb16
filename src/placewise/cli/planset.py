"""The plan-set halves of ``plan --envelope``, ``explain``, ``check`` and ``export``
(the library is ``placewise.adapt.planset``): the commands live in ``placewise.cli``, which
hands a plan set to these."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from placewise.cli import _print_json, _progress, _table, out, resolve_machine
from placewise.errors import InputError
from placewise.io import check_output_path
from placewise.units import format_bytes, format_seconds

__all__ = ["check_plan_set_command", "explain_plan_set_command", "export_plan_set_command",
           "plan_envelope"]


def _bucket_costs(items: list[str] | None) -> Any:
    """``--bucket-cost KEY=VALUE`` items as ``ChoiceCosts``."""
    from placewise.adapt.planset.choice import ChoiceCosts

    kw: dict[str, Any] = {}
    for item in (part for given in items or () for part in given.split(",")):
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or key not in ("horizon_requests", "compile_s_per_bucket",
                                  "memory_s_per_gib"):
            raise InputError("expected horizon_requests=N, compile_s_per_bucket=S or "
                             "memory_s_per_gib=S", place=f"--bucket-cost {item}")
        try:
            kw[key] = int(text) if key == "horizon_requests" else float(text)
        except ValueError:
            raise InputError(f"not a number: {text!r}", place=f"--bucket-cost {item}") from None
    try:
        return ChoiceCosts(**kw)
    except InputError as exc:
        raise InputError(exc.problem, place="--bucket-cost") from None


def plan_envelope(model: str, hw: str, out_file: Path, *, envelope: list[str],
                   mix: Path | None, costs: list[str] | None, batch: int | None,
                   shape: list[str] | None,
                   objective: str, strategy: str, time_limit: float | None,
                   calibration: Path | None, seed: int, precision: str, as_json: bool,
                   phase: str | None = None) -> None:
    """``plan --envelope``: a plan set (``placewise.adapt.planset``); ``phase``: a decoder
    LLM's step the seq axis sizes."""
    from placewise.adapt.planset import build_plan_set, load_mix, parse_envelope, save_plan_set

    env = parse_envelope(envelope)
    if batch is not None and "batch" in env:
        raise InputError("the envelope's batch axis sets the batch: drop --batch",
                         place="--batch")
    if batch is not None:
        raise InputError("with --envelope, give the batch as an axis (--envelope batch=N)",
                         place="--batch")
    if shape:
        raise InputError("with --envelope the axes bind the input shapes (an ONNX input's "
                         "symbolic sequence dimension for seq): --shape does not apply",
                         place="--shape")
    if objective not in ("latency", "throughput"):
        raise InputError(f"unknown objective {objective!r} (latency or throughput)",
                         place="--objective")
    if time_limit is not None and not time_limit > 0:
        raise InputError(f"time limit must be positive, got {time_limit}", place="--time-limit")
    choice_costs = _bucket_costs(costs)
    check_output_path(out_file, place="--out")
    got_mix = load_mix(mix) if mix is not None else None
    machine = resolve_machine(hw)
    with _progress("planning the envelope") as cb:
        ps = build_plan_set(model, machine, env, got_mix, calibration=calibration, phase=phase,
                            objective=objective, strategy=strategy, precision=precision,
                            time_limit_s=time_limit, seed=seed, costs=choice_costs,
                            progress=cb, hw=hw)
    save_plan_set(ps, out_file)
    ch = ps.choice
    if as_json:
        _print_json({"out": str(out_file), "format": "placewise-planset", "model": model,
                     "machine": machine.name, "axes": list(ps.axes), "envelope": ps.envelope,
                     "buckets": [b.to_json() for b in ps.buckets],
                     "plan_entries": len(ps.plans), "choice": {
                         k: ch[k] for k in ("buckets", "edges", "why", "chosen", "one_bucket",
                                            "per_grid_point", "method", "costs")},
                     "residency": ps.residency, "mix": ps.mix.to_json(),
                     "timing": ps.timing, "fingerprint": ps.fingerprint()})
        return
    out.print(f"[bold]plan set[/bold] {model} on {machine.name}: {len(ps.buckets)} bucket"
              f"{'s' if len(ps.buckets) != 1 else ''}, {len(ps.plans)} plan entr"
              f"{'ies' if len(ps.plans) != 1 else 'y'} over {ps.timing['grid_points']} grid "
              f"points")
    out.print(_table("buckets", ["bucket", "upper", "plan", "latency", "P", "padding"], [
        [b.name, " ".join(f"{a}={v}" for a, v in b.upper.items()), b.plan_index,
         format_seconds(b.predicted_latency_s), f"{b.probability:.3g}",
         format_seconds(b.expected_padding_s)] for b in ps.buckets]))
    out.print(f"choice: {ch['why']}")
    res = ps.residency
    out.print(f"residency: {format_bytes(res['resident_bytes'])} resident, weights "
              f"{format_bytes(res['weights_bytes'])} once per device (without sharing "
              f"{format_bytes(res['weights_without_sharing_bytes'])})"
              f"{'' if res['fits'] else ' - DOES NOT FIT'}")
    out.print(f"planned {ps.timing['grid_points']} grid points in "
              f"{ps.timing['planning_s']:.2f} s; wrote {out_file}")


# ---- explain / trace / check --------------------------------------------------------------------
def explain_plan_set_command(plan_file: Path, *, op: str | None, edge: str | None,
                             bucket: str | None, as_json: bool) -> None:
    """``explain`` of a plan set: its buckets, choice, padding and residency, or with
    ``--bucket`` one bucket's plan as ``explain`` shows a plan."""
    from placewise.adapt.planset import load_plan_set
    from placewise.adapt.planset.report import explain_plan_set, render_plan_set
    from placewise.explain import explain as explain_plan
    from placewise.explain import render_explain

    ps = load_plan_set(plan_file)
    if bucket is not None:  # one bucket's plan, as explain shows a plan
        try:
            one = ps.plan_of(bucket)
        except InputError as exc:
            raise InputError(exc.problem, file=str(plan_file), place="--bucket") from None
        data = explain_plan(one, op=op, edge=edge)
        if as_json:
            _print_json(data)
            return
        sys.stdout.write(render_explain(data))
        return
    if op is not None or edge is not None:
        raise InputError("--op and --edge zoom into a plan: name a bucket with --bucket "
                         f"({', '.join(b.name for b in ps.buckets)})",
                         place="--op" if op is not None else "--edge")
    pdata = explain_plan_set(ps)
    if as_json:
        _print_json(pdata)
        return
    sys.stdout.write(render_plan_set(pdata))


def check_plan_set_command(plan_file: Path, *, model: str | None, hw: str | None,
                           batch: int | None, as_json: bool) -> None:
    """``check`` of a plan set: every bucket plan, and the residency."""
    from placewise.adapt.planset import load_plan_set
    from placewise.adapt.planset.report import check_plan_set, planset_findings_json
    from placewise.check import checks_run
    from placewise.planning import load_graph

    ps = load_plan_set(plan_file)
    if batch is not None:
        raise InputError("a plan set's buckets have their own batches: drop --batch",
                         place="--batch")
    if model is not None and model != ps.model:
        raise InputError(f"the plan set was made for model {ps.model!r}, not {model!r}",
                         file=str(plan_file), place="--model")
    machine = resolve_machine(hw) if hw else None
    graph_of = ((lambda b: load_graph(b.model_ref, b.shapes, b.batch))
                if model is not None else None)
    found = check_plan_set(ps, machine=machine, graph_of=graph_of, file=str(plan_file))
    data = planset_findings_json(found, checks=checks_run(graph=model is not None,
                                                          machine=machine is not None),
                                 buckets=[b.name for b in ps.buckets])
    if as_json:
        _print_json(data)
    else:
        head = (f"plan set OK: {len(ps.buckets)} bucket plans and their residency"
                if data["ok"] else f"plan set FAILS: {data['errors']} errors")
        lines = [head] + [f"{b}: {f.line()}" for b, f in found[:50]]
        sys.stdout.write("\n".join(lines) + "\n")
    if not data["ok"]:
        raise typer.Exit(1)


# ---- validate ----------------------------------------------------------------------------------
def export_plan_set_command(plan_file: Path, out_dir: Path, *, force: bool,
                            hw: str | None, as_json: bool) -> None:
    """``export`` of a plan set: one partition set per bucket, weights shared."""
    from placewise.adapt.planset import load_plan_set
    from placewise.adapt.planset.export import export_plan_set

    ps = load_plan_set(plan_file)
    machine = resolve_machine(hw) if hw else (
        resolve_machine("local") if ps.machine == "local" else None)  # else as recorded
    with _progress("exporting") as cb:
        summary = export_plan_set(ps, out_dir, machine=machine, force=force, progress=cb)
    if as_json:
        _print_json(summary)
        return
    out.print(f"[bold]export[/bold] plan set {ps.model} for {ps.machine}: "
              f"{len(summary['buckets'])} buckets")
    out.print(_table("buckets", ["bucket", "folder", "partitions", "size"], [
        [r["name"], r["folder"], r["partitions"], format_bytes(r["bytes"])]
        for r in summary["buckets"]]))
    out.print(f"{summary['initializers']} distinct initializers in {summary['shared_file']} "
              f"({format_bytes(summary['shared_bytes'])}, "
              f"{'hard-linked into' if summary['linked'] else 'copied into'} every bucket "
              f"folder); wrote {format_bytes(summary['bytes_written'])} against "
              f"{format_bytes(summary['bytes_without_sharing'])} without sharing, to {out_dir}")


# ---- demo ------------------------------------------------------------------------------------
