"""The command line. The only package that prints (``cli.serve``: the ``serve`` command).

Exit status: 0 ok; 2 bad input (one line on stderr: file, place, problem); 3 infeasible
(nothing fits: names the tier and the amount); 1 a real run failed (worker crashed or hung:
names device and op), a plan that fails `check`, or an internal error (set
PLACEWISE_DEBUG=1 for the traceback); 130 interrupted.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from placewise.errors import ExecutionError, Infeasible, InputError, PlacewiseError
from placewise.io import check_output_path

try:  # typer >= 0.29 vendors click
    from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError
    from typer.exceptions import Abort
except ImportError:  # pragma: no cover - older typer on top of click
    from click.exceptions import (  # type: ignore[no-redef, assignment, unused-ignore]
        Abort,
        ClickException,
        UsageError,
    )

    NoArgsIsHelpError = None  # type: ignore[assignment,misc]
from placewise.units import format_bytes, format_flops, format_seconds, parse_dims

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Place ML workload graphs on heterogeneous hardware and prove what "
                       "the placement will do.")
hw_app = typer.Typer(no_args_is_help=True, help="Machine specs: presets, show, probe.")
zoo_app = typer.Typer(no_args_is_help=True, help="Built-in models.")
app.add_typer(hw_app, name="hw")
app.add_typer(zoo_app, name="zoo")

out = Console(highlight=False, soft_wrap=False)
err = Console(stderr=True, highlight=False)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")]


# ---- helpers -----------------------------------------------------------------------------
def _print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, sort_keys=True, default=_json_default) + "\n")


def _json_default(o: Any) -> Any:
    if hasattr(o, "value"):
        return o.value
    if isinstance(o, tuple | set):
        return list(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def _parse_shapes(items: list[str] | None) -> dict[str, tuple[int, ...]] | None:
    if not items:
        return None
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items:
        name, sep, dims = item.partition("=")
        if not sep or not name:
            raise InputError(f"expected NAME=DIMS (e.g. input=1x3x224x224), got {item!r}",
                             place="--shape")
        try:
            shapes[name.strip()] = parse_dims(dims)
        except ValueError as exc:
            raise InputError(str(exc), place=f"--shape {name}") from None
    return shapes


def _parse_values(items: list[str] | None) -> dict[str, tuple[float | int, ...]] | None:
    """``--value NAME=...`` items: input name -> its numbers (``onnx_control.parse_value``)."""
    from placewise.graph.onnx_control import parse_value

    if not items:
        return None
    values: dict[str, tuple[float | int, ...]] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name.strip() or not text.strip():
            raise InputError(f"expected NAME=VALUE (e.g. sr=16000), got {item!r}",
                             place="--value")
        values[name.strip()] = parse_value(text, place=f"--value {name.strip()}")
    return values


def _load_graph(model: str, shape: list[str] | None = None, batch: int | None = None,
                value: list[str] | None = None) -> Any:
    from placewise.planning import load_graph

    return load_graph(model, _parse_shapes(shape), batch, _parse_values(value))


def resolve_machine(ref: str, *, refresh: bool = False) -> Any:
    """A preset name, a YAML path, or ``local`` (this machine, probed once and cached)."""
    if ref == "local":
        from placewise.hardware.probe import load_local

        with _progress("probing this machine") as cb:
            return load_local(refresh=refresh, progress=cb)
    from placewise.hardware.load import load_machine

    return load_machine(ref)


def machine_of_plan(plan: Any, hw: str | None, *, file: str | None = None) -> Any:
    """The plan's machine for a command that reads a plan: ``--hw`` when given, else
    ``local`` (probed with a progress bar) for a local plan, else its preset or the spec
    file it recorded (``placewise.plan_sources.plan_machine``); the fingerprint checked."""
    from placewise.plan_sources import plan_machine

    if hw is None and plan.machine.name == "local" and (
            plan.sources is None or plan.sources.machine is None):
        hw = "local"
    return plan_machine(plan, resolve_machine(hw) if hw is not None else None, file=file)


class _Bar:
    """Drives a rich progress bar: ``bar(label, fraction_done)``; ``bar.best(label,
    objective_s)`` shows the best objective found so far beside it."""

    def __init__(self, progress: Progress, task: Any, what: str) -> None:
        self._progress = progress
        self._task = task
        self._what = what

    def __call__(self, label: str, fraction: float) -> None:
        self._progress.update(self._task, description=f"{self._what}: {label}",
                              completed=max(0.0, min(1.0, fraction)))

    def best(self, label: str, objective_s: float) -> None:
        self._progress.update(self._task, best=f"best {format_seconds(objective_s)} ({label})")


@contextmanager
def _progress(what: str) -> Iterator[_Bar]:
    """A rich progress bar on stderr driven by ``callback(label, fraction_done)``."""
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
               TimeElapsedColumn(), TextColumn("{task.fields[best]}"))
    with Progress(*columns, console=err, transient=True, disable=not err.is_terminal) as bar:
        yield _Bar(bar, bar.add_task(what, total=1.0, best=""), what)


def _table(title: str, columns: list[str], rows: list[list[Any]], *,
           right: tuple[int, ...] | None = None) -> Table:
    """A plain table; columns listed in ``right`` (default: all but the first) align right."""
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for i, c in enumerate(columns):
        is_right = (i > 0) if right is None else (i in right)
        t.add_column(c, justify="right" if is_right else "left")
    for r in rows:
        t.add_row(*[str(x) for x in r])
    return t


# ---- inspect -------------------------------------------------------------------------------
@app.command()
def inspect(
    model: Annotated[str, typer.Argument(help="MODEL: .onnx, .pt2, task graph .json, or zoo:NAME")],
    shape: Annotated[list[str] | None, typer.Option("--shape", help="Bind an input: NAME=DIMS")] = None,
    batch: Annotated[int | None, typer.Option(help="Bind the batch dimension of every input")] = None,
    value: Annotated[list[str] | None, typer.Option("--value", help="Give an input a value: NAME=NUMBER or NAME=N1,N2,... (ONNX; shapes and If branches follow it)")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Graph summary: ops, tensors, FLOPs, bytes, params, by kind, uncounted kinds."""
    from placewise.graph.summary import summarize

    s = summarize(_load_graph(model, shape, batch, value))
    if as_json:
        _print_json(s)
        return
    _render_summary(s)


def _render_summary(s: dict[str, Any]) -> None:
    out.print(f"[bold]{s['name']}[/bold]  {s['ops']} ops, {s['tensors']} tensors, "
              f"{s['regions']} fused regions")
    out.print(f"  FLOPs {format_flops(s['flops'])}FLOP   bytes moved {format_bytes(s['bytes_moved'])}"
              f"   params {s['params']:,} ({format_bytes(s['param_bytes'])})"
              f"   activations {format_bytes(s['activation_bytes'])}")
    for io in ("inputs", "outputs"):
        for t in s[io]:
            out.print(f"  {io[:-1]:6} {t['name']}: {t['dtype']}[{','.join(map(str, t['shape']))}]")
    if s.get("shape_source"):
        folded = (f"; {s['folded_nodes']} of {s['source_nodes']} nodes folded into constants"
                  if s.get("source_nodes") else "")
        out.print(f"  shapes: {s['shape_source']}{folded}")
    if s.get("upgraded_from_opset"):
        out.print(f"  upgraded from opset {s['upgraded_from_opset']} (onnx.version_converter)")
    if s.get("values") or s.get("inlined_ifs"):
        given = ", ".join(s.get("values") or []) or "none"
        out.print(f"  values given: {given}; {s.get('inlined_ifs', 0)} If nodes inlined "
                  f"(the branch their condition takes)")
    for note in s.get("control_flow") or []:
        out.print(f"  control flow: {note}")
    rows = [[k, v["count"], format_flops(v["flops"]), format_bytes(v["bytes_moved"])]
            for k, v in sorted(s["by_kind"].items(), key=lambda kv: -kv[1]["flops"])]
    out.print(_table("by kind", ["kind", "ops", "FLOPs", "bytes moved"], rows))
    cov = f"{100 * s['coverage']:.1f}%"
    if s["uncounted"]:
        out.print(f"counting coverage {cov}; uncounted: {', '.join(s['uncounted'])}")
    else:
        out.print(f"counting coverage {cov}; every op kind counted")


# ---- zoo -------------------------------------------------------------------------------------
@zoo_app.command("list")
def zoo_list(as_json: JsonOpt = False) -> None:
    """List the built-in models and their options."""
    from placewise.graph.zoo import list_models

    entries = list_models()
    if as_json:
        _print_json({"models": [{"name": e.name, "description": e.description,
                                 "options": dict(e.default_options)} for e in entries]})
        return
    out.print(_table("zoo", ["model", "options (defaults)", "description"], [
        [e.name, " ".join(f"{k}={v}" for k, v in dict(e.default_options).items()), e.description]
        for e in entries], right=()))


@zoo_app.command("export")
def zoo_export(
    name: Annotated[str, typer.Argument(help="NAME or NAME?opt=val&...")],
    fmt: Annotated[str, typer.Option("--format", help="onnx or pt2")],
    out_file: Annotated[Path, typer.Option("--out", help="Output file")],
) -> None:
    """Export a built-in model to ONNX or a torch.export program (.pt2)."""
    from placewise.graph.zoo import export_onnx, export_pt2, parse_zoo_ref

    ref = name if name.startswith("zoo:") else f"zoo:{name}"
    model_name, options = parse_zoo_ref(ref)
    if fmt not in ("onnx", "pt2"):
        raise InputError(f"unknown format {fmt!r} (onnx or pt2)", place="--format")
    check_output_path(out_file, place="--out")
    with _progress(f"exporting {model_name}") as cb:
        cb("export", 0.1)
        (export_onnx if fmt == "onnx" else export_pt2)(model_name, options, out_file)
        cb("done", 1.0)
    out.print(f"wrote {out_file}")


# ---- profile ----------------------------------------------------------------------------------
@app.command()
def profile(
    model: Annotated[str, typer.Argument(help="MODEL: .onnx, .pt2, or zoo:NAME")],
    hw: Annotated[str, typer.Option("--hw", help="Must be 'local': ops are measured here")] = "local",
    out_file: Annotated[Path | None, typer.Option("--out", help="Write the calibration (JSON)")] = None,
    shape: Annotated[list[str] | None, typer.Option("--shape", help="Bind an input: NAME=DIMS")] = None,
    batch: Annotated[int | None, typer.Option(help="Bind the batch dimension")] = None,
    device: Annotated[list[str] | None, typer.Option("--device", help="Only these devices")] = None,
    value: Annotated[list[str] | None, typer.Option("--value", help="Give an input a value: NAME=NUMBER or NAME=N1,N2,... (ONNX; shapes and If branches follow it)")] = None,
    max_time: Annotated[float, typer.Option(help="Time cap per op and device (s)")] = 2.0,
    context: Annotated[bool, typer.Option(
        "--context/--no-context",
        help="Also run the model with the executor on each device and time every region "
             "in model order (what plans use first)")] = True,
    context_requests: Annotated[int, typer.Option(
        help="Requests per run and round in the model-order runs")] = 8,
    context_rounds: Annotated[int, typer.Option(
        help="Rounds of the model-order runs (round-robin, moments apart)")] = 5,
    as_json: JsonOpt = False,
) -> None:
    """Measure every distinct op of MODEL at its real shape on this machine's devices, then
    (by default) every region as the executor runs the whole model on each device."""
    from placewise.calibrate.context import profile_in_context
    from placewise.calibrate.profile import profile_model
    from placewise.runtime.opexec import load_source

    if hw != "local":
        raise InputError("profiling measures this machine: use --hw local", place="--hw")
    if out_file is not None:
        check_output_path(out_file, place="--out")
    machine = resolve_machine("local")
    if batch is not None and batch <= 0:
        raise InputError(f"batch must be a positive integer, got {batch}", place="--batch")
    source = load_source(model, shapes=_parse_shapes(shape), batch=batch,
                         values=_parse_values(value))
    graph = source.graph
    if graph is None:
        raise InputError("the model has no graph to profile", file=model)
    if context_requests < 1:
        raise InputError(f"context-requests must be >= 1, got {context_requests}",
                         place="--context-requests")
    if context_rounds < 1:
        raise InputError(f"context-rounds must be >= 1, got {context_rounds}",
                         place="--context-rounds")
    with _progress("profiling") as cb:
        cal = profile_model(graph, source, machine, devices=device, max_time_s=max_time,
                            progress=lambda done, total, msg: cb(msg, done / max(total, 1)))
    if context:
        with _progress("in model order") as cb:
            cal = profile_in_context(
                graph, source, machine, cal, devices=device, requests=context_requests,
                rounds=context_rounds, progress=lambda done, total, msg: cb(msg, done / max(total, 1)))
    data = cal.to_json()
    if out_file is not None:
        from placewise.io import atomic_write_json

        atomic_write_json(out_file, data)
    if as_json:
        _print_json({"measurements": len(cal.measurements), "fits": len(cal.fits),
                     "context_measurements": len(cal.context),
                     "failures": [f.model_dump(mode="json") for f in cal.failures],
                     "out": str(out_file) if out_file else None})
        return
    rows = [[m.device, f"{m.kind}/{m.dtype} {m.source_node}"[:48], f"{m.median_s * 1e6:.1f}",
             f"{m.p10_s * 1e6:.1f}", f"{m.p90_s * 1e6:.1f}", m.n] for m in cal.measurements]
    out.print(_table(f"measured on {machine.name}", ["device", "op", "median us", "p10 us",
                                                     "p90 us", "n"], rows[:60]))
    if len(rows) > 60:
        out.print(f"... and {len(rows) - 60} more measurements")
    if cal.context:
        rows = [[c.device, f"{c.kind} {c.label}"[:40], c.dtype, f"{c.median_s * 1e6:.1f}",
                 f"{c.kernel_s * 1e6:.1f}", f"{c.overhead_s * 1e6:.1f}", c.n]
                for c in cal.context]
        out.print(_table("in model order (executor)", ["device", "region", "dtype",
                                                       "median us", "kernels us",
                                                       "executor us", "n"], rows[:60]))
        if len(rows) > 60:
            out.print(f"... and {len(rows) - 60} more")
        for d in cal.devices:
            if d.request.n:
                out.print(f"request hand-off on {d.name}: {d.request.median_s * 1e6:.1f} us "
                          f"(p10 {d.request.p10_s * 1e6:.1f}, p90 {d.request.p90_s * 1e6:.1f}, "
                          f"n={d.request.n})")
    out.print(f"{len(cal.measurements)} measurements, {len(cal.context)} in model order, "
              f"{len(cal.fits)} fits, {len(cal.failures)} failures"
              + (f"; wrote {out_file}" if out_file else ""))


# ---- plan ----------------------------------------------------------------------------------
_STARTED: list[float] = []  # perf_counter() at the process's start, set by main()


def _command_start() -> float:
    """``time.perf_counter()`` when this command began: the process's start when it runs
    from ``main`` (the console entry: interpreter start-up and imports count), else now."""
    return _STARTED[0] if _STARTED else time.perf_counter()


def _build_problem(model: str, hw: str, shape: list[str] | None, batch: int | None,
                   calibration: Path | None, fuse_ops: bool,
                   value: list[str] | None = None) -> tuple[Any, Any]:
    from placewise.planning import build_problem, load_graph
    from placewise.search.api import check_scale

    graph = load_graph(model, _parse_shapes(shape), batch, _parse_values(value))
    check_scale(len(graph.ops), file=model)  # before probing or anything that grows
    machine = resolve_machine(hw)
    return build_problem(model, machine, shapes=_parse_shapes(shape), batch=batch,
                         calibration=calibration, fuse_ops=fuse_ops, graph=graph), machine


@app.command()
def plan(
    hw: Annotated[str, typer.Option("--hw", help="preset, YAML path, or 'local'")],
    out_file: Annotated[Path, typer.Option("--out", help="Write the plan here (JSON)")],
    model: Annotated[str | None, typer.Argument(help="MODEL: .onnx, .pt2, task graph .json, or zoo:NAME")] = None,
    models: Annotated[list[str] | None, typer.Option("--model", help="[NAME=]MODEL, repeatable: several models sharing the machine, planned together (a workload)")] = None,
    stream: Annotated[list[str] | None, typer.Option("--stream", help="NAME:rate=R,slo_p99=D,priority=P: a workload model's request stream")] = None,
    batch: Annotated[int | None, typer.Option(help="Bind the batch dimension")] = None,
    shape: Annotated[list[str] | None, typer.Option("--shape", help="Bind an input: NAME=DIMS")] = None,
    value: Annotated[list[str] | None, typer.Option("--value", help="Give an input a value: NAME=NUMBER or NAME=N1,N2,... (ONNX; shapes and If branches follow it)")] = None,
    objective: Annotated[str, typer.Option(help="latency or throughput")] = "latency",
    strategy: Annotated[str, typer.Option(help="single:DEVICE, greedy, heft, dp, cpsat, local, auto")] = "auto",
    time_limit: Annotated[float | None, typer.Option("--time-limit", help="Wall-clock limit of the whole command (s): loading, search, building and writing the plan; default 4 s + 0.4 ms per op. Results are reproducible while the search's work budget ends it")] = None,
    calibration: Annotated[Path | None, typer.Option(help="Calibration JSON from `profile`")] = None,
    seed: Annotated[int, typer.Option(help="Seed of randomized searches")] = 0,
    no_fuse: Annotated[bool, typer.Option("--no-fuse", help="One vertex per op")] = False,
    precision: Annotated[str, typer.Option("--precision", help="KEEP (the model's own), fp32, fp16, bf16, int8 (that dtype where the budget holds) or mixed (per vertex)")] = "KEEP",
    quality_budget: Annotated[str | None, typer.Option("--quality-budget", help="METRIC=VALUE bound on the output error of lowered precision: rel_l2, cosine, max_abs or top1 (default rel_l2=0.01)")] = None,
    inputs: Annotated[Path | None, typer.Option("--inputs", help="Representative inputs (.npz, one array per model input) for the quality evidence (default: generated)")] = None,
    envelope: Annotated[list[str] | None, typer.Option("--envelope", help="AXIS=VALUES (batch or seq; 1,2,4 or 32..512:pow2 or 8..64:+8), repeatable: write a plan set for this shape envelope (--time-limit is then per grid point)")] = None,
    mix: Annotated[Path | None, typer.Option("--mix", help="With --envelope: the shape mix the buckets are chosen for (JSON/YAML list of {batch, seq, weight}, or a SHAPES.jsonl trace); default uniform over the grid")] = None,
    bucket_cost: Annotated[list[str] | None, typer.Option("--bucket-cost", help="With --envelope: KEY=VALUE[,KEY=VALUE], a price of more buckets: horizon_requests (requests before replanning, default 1000000), compile_s_per_bucket (1.0), memory_s_per_gib (1e-05 s per request per extra GiB)")] = None,
    phase: Annotated[str | None, typer.Option("--phase", help="With --envelope and a decoder LLM (.onnx with past_key_values inputs): prefill (seq = prompt tokens) or decode (seq = context after the step)")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Search placements and write a plan (with --envelope: a plan set; with --model
    repeated: a workload of several models sharing the machine)."""
    model, streams = _workload_args(model, models, stream)
    if envelope:
        from placewise.cli.planset import plan_envelope

        if value:
            raise InputError("--value applies to a single plan, not to a plan set",
                             place="--value")
        plan_envelope(model, hw, out_file, envelope=envelope, mix=mix, costs=bucket_cost,
                       batch=batch,
                       shape=shape, objective=objective, strategy=strategy,
                       time_limit=time_limit, calibration=calibration, seed=seed,
                       precision=precision, as_json=as_json, phase=phase)
        return
    given = [f for f, v in (("--mix", mix), ("--bucket-cost", bucket_cost), ("--phase", phase)) if v]
    if given:
        raise InputError("--mix, --bucket-cost and --phase shape a plan set: give --envelope "
                         "too", place=given[0])
    from placewise.plan import save_plan
    from placewise.plan_sources import sources_json
    from placewise.planning import plan_model
    from placewise.precision.policy import QualityBudget, parse_policy
    from placewise.search.api import CommandBudget, minimum_time_s, parse_strategy

    start = _command_start()
    if _STARTED:  # a process of its own: fewer cyclic collections over the large graph
        gc.set_threshold(100_000, 50, 100)
    if objective not in ("latency", "throughput"):
        raise InputError(f"unknown objective {objective!r} (latency or throughput)",
                         place="--objective")
    if time_limit is not None and not time_limit > 0:
        raise InputError(f"time limit must be positive, got {time_limit}", place="--time-limit")
    policy = parse_policy(precision)
    budget = QualityBudget.parse(quality_budget)
    check_output_path(out_file, place="--out")
    problem, machine = _build_problem(model, hw, shape, batch, calibration, not no_fuse, value)
    if _STARTED:
        gc.freeze()  # the graph and the problem stay: later collections skip them
    parse_strategy(strategy, problem.devices)  # refused before anything is printed
    least = minimum_time_s(problem)
    clock = CommandBudget.make(time_limit, ops=len(problem.graph.ops), start=start,
                               least_s=least)
    refusal = clock.too_short()
    if refusal is not None:
        raise refusal
    loaded_s = clock.spent_s()
    overrun = clock.overrun()
    if not as_json:
        out.print(clock.text())
    sources = sources_json(hw, machine, calibration, problem.cost_model.fingerprint()
                           if calibration is not None else None)
    with _progress(f"searching ({strategy})") as cb:
        done = plan_model(problem, model, clock=clock, strategy=strategy, objective=objective,
                          policy=policy, budget=budget, seed=seed, shapes=_parse_shapes(shape),
                          batch=batch, inputs=inputs, progress=cb, on_best=cb.best,
                          values=_parse_values(value), sources=sources, streams=streams)
    p = done.plan
    t_write = time.perf_counter()
    save_plan(p, out_file)
    t_end = time.perf_counter()
    timing: dict[str, Any] = {"time_limit_s": clock.limit_s, "default_limit": clock.default,
              "ops": clock.ops, "load_s": round(loaded_s, 4),
              "evidence_s": round(done.evidence_s, 4), "evidence_runs": done.evidence_runs,
              "search_s": round(done.search_s, 4), "build_s": round(done.build_s, 4),
              "write_s": round(t_end - t_write, 4), "reserve_s": clock.reserve_s,
              "total_s": round(t_end - start, 4), "overrun": clock.overrun() if clock.grown else overrun}
    summary = _plan_summary(done, out_file, machine.name, budget, timing)
    from placewise.plan_replicas import replica_option

    summary["replication"] = replica_option(p, machine)
    if as_json:
        _print_json(summary)
        return
    _render_plan(done, model, machine.name, budget, summary, clock, out_file)


def _workload_args(model: str | None, models: list[str] | None, stream: list[str] | None
                   ) -> tuple[str, dict[str, Any]]:
    """The MODEL reference and the streams by model of ``plan``'s arguments: ``MODEL``, or
    ``--model`` twice or more (``graph.workload``) with their ``--stream``s."""
    from placewise.graph.workload import parse_member, parse_stream, workload_ref

    if models:
        if model is not None:
            raise InputError("give MODEL or --model (repeated), not both", place="--model")
        members = [parse_member(m) for m in models]
        ref = workload_ref(members)
    elif model is None:
        raise InputError("give MODEL, or --model twice or more for a workload",
                         place="MODEL")
    else:
        members, ref = [], model
    streams: dict[str, Any] = {}
    names = {m.name for m in members}
    for text in stream or ():
        name, st = parse_stream(text)
        if name not in names:
            known = ", ".join(sorted(names)) or "none: --stream needs --model"
            raise InputError(f"no model named {name!r} (models: {known})", place="--stream")
        if name in streams:
            raise InputError(f"two streams for model {name!r}", place="--stream")
        streams[name] = st
    return ref, streams


def _plan_summary(done: Any, out_file: Path, machine_name: str, budget: Any,
                  timing: dict[str, Any]) -> dict[str, Any]:
    """``plan --json``'s object: the search's result, the plan's time sources, the timing."""
    result, record, p = done.outcome.result, done.record, done.plan
    return {
        "out": str(out_file),
        "strategy": result.strategy,
        "latency_s": p.predicted_latency_s,
        "chosen": result.chosen,
        "objective": result.objective.value,
        "makespan_s": result.makespan_s,
        "throughput_rps": result.throughput_rps,
        "lower_bound_s": result.lower_bound_s,
        "search_time_s": result.search_time_s,
        "feasible": result.feasible,
        "devices_used": result.devices_used,
        "baselines": {label: value for label, value in result.baselines},
        "candidates_evaluated": result.candidates_evaluated,
        "cpsat_bound_s": result.cpsat_bound_s,
        "gap": result.gap,
        "machine": machine_name,
        "time_by_source": p.time_by_source(),
        "timing": timing,
        "precision": {"policy": record["policy"], "budget": budget.text(),
                      "lowered": record["lowered"], "estimated": record["estimated"],
                      "fallback": record["fallback"], "inputs": record["inputs"]},
    }


def _render_plan(done: Any, model: str, machine_name: str, budget: Any,
                 summary: dict[str, Any], clock: Any, out_file: Path) -> None:
    from placewise.explain import time_sources_text

    result, record, p = done.outcome.result, done.record, done.plan
    timing = summary["timing"]
    unit = "makespan" if result.objective.value == "latency" else "period"
    out.print(f"[bold]plan[/bold] {model} on {machine_name}: {result.strategy} chose "
              f"{result.chosen}; devices {', '.join(result.devices_used)}")
    out.print(f"  latency {format_seconds(result.makespan_s)}   throughput "
              f"{result.throughput_rps:.4g} req/s   lower bound ({unit}) "
              f"{format_seconds(result.lower_bound_s)}   feasible {result.feasible}")
    out.print("  predicted task time: " + time_sources_text(summary["time_by_source"]),
              markup=False)
    out.print(_table("baselines", ["baseline", f"{unit}"], [
        [label, format_seconds(v)] for label, v in result.baselines]))
    lowered = record["lowered"]
    line = (f"precision {record['policy']}: {len(lowered)} of {len(p.placement)} vertices "
            f"lowered")
    if record["decisions"]:
        est = record["estimated"]
        line += (f"; estimated {budget.metric} {est.get(budget.metric, 'exact')} within "
                 f"{budget.text()}" if lowered else f"; budget {budget.text()}")
        if record["fallback"]:
            line += f"; kept for the budget: {', '.join(record['fallback'][:5])}"
    out.print(line)
    if timing["overrun"]:
        out.print(timing["overrun"])
    rep = summary.get("replication")
    if rep is not None:
        verdict = ("replicas serve more: plan each copy and serve them with --replica-plan "
                   "--router weighted" if rep["replicate"] else "this plan serves more")
        out.print(f"replication: whole copies on {', '.join(rep['devices'])} would serve "
                  f"{rep['capacity_rps']:.4g} req/s against this plan's {rep['plan_rps']:.4g} "
                  f"req/s: {verdict}")
    if record["decisions"] and done.evidence_runs is not None:
        out.print(f"quality evidence {timing['evidence_s']:.2f} s (a budget of "
                  f"{done.evidence_runs} emulated runs): "
                  f"{next((n for n in record['notes'] if n.startswith('quality evidence')), '')}",
                  markup=False)
    out.print(f"searched {result.candidates_evaluated} placements in "
              f"{result.search_time_s:.2f} s; built and wrote the plan in "
              f"{timing['build_s'] + timing['write_s']:.2f} s ({clock.reserve_s:.3g} s kept); "
              f"{timing['total_s']:.2f} s of the {clock.limit_s:.3g} s limit; wrote {out_file}")


@app.command()
def explain(
    plan_file: Annotated[Path, typer.Argument(metavar="PLAN", help="Plan JSON")],
    op: Annotated[str | None, typer.Option("--op", help="Zoom in on an op or vertex")] = None,
    edge: Annotated[str | None, typer.Option("--edge", help="Zoom in on a tensor")] = None,
    bucket: Annotated[str | None, typer.Option("--bucket", help="A plan set: explain this bucket's plan (with --op/--edge)")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Why the plan (or plan set) is what it is."""
    from placewise.adapt.planset import is_plan_set
    from placewise.explain import explain as explain_plan
    from placewise.explain import render_explain
    from placewise.plan import load_plan

    if is_plan_set(plan_file):
        from placewise.cli.planset import explain_plan_set_command

        explain_plan_set_command(plan_file, op=op, edge=edge, bucket=bucket, as_json=as_json)
        return
    if bucket is not None:
        raise InputError("--bucket names a bucket of a plan set; this is a plan",
                         file=str(plan_file), place="--bucket")
    data = explain_plan(load_plan(plan_file), op=op, edge=edge)
    if as_json:
        _print_json(data)
        return
    sys.stdout.write(render_explain(data))


@app.command()
def trace(
    plan_file: Annotated[Path, typer.Argument(metavar="PLAN", help="Plan JSON")],
    out_file: Annotated[Path, typer.Option("--out", help="Chrome/Perfetto trace JSON")],
) -> None:
    """Write a Chrome/Perfetto trace of the plan's schedule."""
    from placewise.io import atomic_write_text
    from placewise.plan import load_plan
    from placewise.trace import to_chrome_trace

    check_output_path(out_file, place="--out")
    data = to_chrome_trace(load_plan(plan_file))
    atomic_write_text(out_file, json.dumps(data, sort_keys=True) + "\n")
    out.print(f"wrote {out_file} ({len(data.get('traceEvents', []))} events); open it in "
              f"https://ui.perfetto.dev or chrome://tracing")


@app.command()
def check(
    plan_file: Annotated[Path, typer.Argument(metavar="PLAN", help="Plan JSON")],
    model: Annotated[str | None, typer.Option(help="Also check against this MODEL")] = None,
    hw: Annotated[str | None, typer.Option("--hw", help="Also check against this machine")] = None,
    batch: Annotated[int | None, typer.Option(help="Batch the model was planned with")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Check a plan independently: precedence, exclusivity, memory, support. Exit 1 if broken."""
    from placewise.adapt.planset import is_plan_set
    from placewise.check import check_plan, checks_run, findings_json, render_findings
    from placewise.plan import load_plan

    if is_plan_set(plan_file):
        from placewise.cli.planset import check_plan_set_command

        check_plan_set_command(plan_file, model=model, hw=hw, batch=batch, as_json=as_json)
        return
    p = load_plan(plan_file)
    graph = _load_graph(model, None, batch) if model else None
    machine = resolve_machine(hw) if hw else None
    findings = check_plan(p, graph, machine, file=str(plan_file))
    checks = checks_run(graph=graph is not None, machine=machine is not None)
    data = findings_json(findings, checks=checks)
    if as_json:
        _print_json(data)
    else:
        sys.stdout.write(render_findings(findings, checks=checks) + "\n")
    if not data["ok"]:
        raise typer.Exit(1)


@app.command()
def validate(
    plan_file: Annotated[Path, typer.Argument(metavar="PLAN", help="Plan JSON (planned for --hw local)")],
    requests: Annotated[int, typer.Option(help="Isolated requests to time")] = 30,
    no_baseline: Annotated[bool, typer.Option("--no-baseline", help="Skip the onnxruntime baseline")] = False,
    inputs: Annotated[Path | None, typer.Option("--inputs", help="Requests to run and measure quality on (.npz, one array per model input)")] = None,
    profile_nodes: Annotated[bool, typer.Option("--profile-nodes", help="After the timed runs, profile each partition's nodes with onnxruntime's profiler (per-op times for placewise sheet)")] = False,
    telemetry_out: Annotated[Path | None, typer.Option("--telemetry-out", help="Write the run's telemetry windows per cost key (placewise-telemetry, for placewise recalibrate)")] = None,
    window_requests: Annotated[int, typer.Option("--window-requests", help="Requests per telemetry window (0: about ten windows)")] = 0,
    calibration: Annotated[Path | None, typer.Option(help="The calibration the plan was made with (default: the file the plan recorded): refused unless its stable machine tags are this run's")] = None,
    against: Annotated[Path | None, typer.Option("--against", help="An earlier run (validate --json, or a telemetry file) to compare with: refused unless the stable tags agree")] = None,
    allow_mismatch: Annotated[bool, typer.Option("--allow-mismatch", help="Compare runs whose stable tags differ, naming the tags that differ")] = False,
    measured: Annotated[list[Path] | None, typer.Option("--measured", help="PROFILE taken on the target (onnxruntime, trtexec --exportProfile, torch.profiler): compare the plan with it, running nothing (any machine: presets too)")] = None,
    layer_info: Annotated[Path | None, typer.Option("--layer-info", help="With --measured: trtexec --exportLayerInfo JSON beside a trtexec profile")] = None,
    trtexec_log: Annotated[Path | None, typer.Option("--trtexec-log", help="With --measured: trtexec's console log beside a trtexec profile")] = None,
    subgraphs: Annotated[Path | None, typer.Option("--subgraphs", help="With --measured: folder of the subgraphs onnxruntime's TensorRT provider dumped (trt_dump_subgraphs)")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Run the plan for real on this machine and compare it with its prediction, term by term;
    with --measured, compare it with a profile taken on the target instead (nothing runs).

    Exits 1 when the measured output quality breaks the plan's precision budget."""
    from placewise.validate import render_validation, validate_plan
    from placewise.validate.compare import check_calibration_tags, compare_with

    if measured:
        from placewise.cli.measured import validate_measured_cmd

        validate_measured_cmd(plan_file, measured, layer_info=layer_info,
                              trtexec_log=trtexec_log, subgraphs=subgraphs, as_json=as_json,
                              running={"--inputs": inputs, "--profile-nodes": profile_nodes,
                                       "--telemetry-out": telemetry_out, "--against": against})
        return
    for opt, flag in ((layer_info, "--layer-info"), (trtexec_log, "--trtexec-log"),
                      (subgraphs, "--subgraphs")):
        if opt is not None:
            raise InputError(f"{flag} goes with --measured", place=flag)

    if requests <= 0:
        raise InputError(f"requests must be a positive integer, got {requests}", place="--requests")
    if window_requests < 0:
        raise InputError(f"must be >= 0, got {window_requests}", place="--window-requests")
    if telemetry_out is not None:
        check_output_path(telemetry_out, place="--telemetry-out")
    mismatch: list[str] = []
    from placewise.plan import load_plan
    from placewise.plan_sources import plan_calibration

    plan = load_plan(plan_file)
    calibration = plan_calibration(plan, calibration, file=str(plan_file))  # else recorded
    if calibration is not None or against is not None:
        from placewise.validate.compare import precheck_against

        if calibration is not None:
            mismatch += check_calibration_tags(plan, calibration, allow_mismatch=allow_mismatch)
        if against is not None:
            precheck_against(plan, against, allow_mismatch=allow_mismatch)
    machine = resolve_machine("local")
    with _progress("validating") as cb:
        report = validate_plan(str(plan_file), requests=requests, machine=machine, progress=cb,
                               baseline=not no_baseline, inputs=inputs,
                               profile_nodes=profile_nodes,
                               window_requests=window_requests if telemetry_out else None)
    cmp = compare_with(report, against, allow_mismatch=allow_mismatch) if against else None
    mismatch += cmp["tag_differences"] if cmp else []
    if telemetry_out is not None:
        from placewise.runtime.windows import save_telemetry_run

        save_telemetry_run(report.telemetry_run, telemetry_out)
    for line in mismatch:
        err.print(f"tags differ (--allow-mismatch): {line}", markup=False)
    if as_json:
        _print_json({**report.to_json(), "against": cmp, "tag_mismatches": mismatch,
                     "telemetry_out": str(telemetry_out) if telemetry_out else None})
    else:
        sys.stdout.write(render_validation(report))
        if cmp and "latency_p50_s" in cmp:
            out.print(f"against {cmp['file']}: latency p50 {cmp['latency_p50_s']['before']} s "
                      f"before, {report.latency.p50_s:.6g} s now", markup=False)
        if telemetry_out is not None:
            out.print(f"wrote {telemetry_out}: {len(report.telemetry_run.windows)} telemetry "
                      f"windows", markup=False)
    if report.quality_check is not None and not report.quality_check.holds:
        raise typer.Exit(1)


# ---- export ------------------------------------------------------------------------------------
@app.command()
def export(
    plan_file: Annotated[Path, typer.Argument(metavar="PLAN", help="Plan JSON")],
    out_dir: Annotated[Path, typer.Option("--out", help="Folder to write (new or empty)")],
    force: Annotated[bool, typer.Option("--force", help="Replace a folder that holds files")] = False,
    hw: Annotated[str | None, typer.Option("--hw", help="The plan's machine (default: its preset, 'local', or the spec file the plan recorded); checked against the plan's fingerprint")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Write the plan's partitions as ONNX files and a manifest that plain onnxruntime chains."""
    from placewise.adapt.planset import is_plan_set
    from placewise.export import export_plan, manifest_summary
    from placewise.plan import load_plan

    if is_plan_set(plan_file):
        from placewise.cli.planset import export_plan_set_command

        export_plan_set_command(plan_file, out_dir, force=force, hw=hw, as_json=as_json)
        return
    machine = None
    plan = load_plan(plan_file)
    if hw:
        machine = resolve_machine(hw)
    elif plan.machine.name == "local":
        machine = resolve_machine("local")  # probed once and cached (with a progress bar)
    if plan.workload is not None:
        _export_workload(plan_file, out_dir, machine, force, as_json)
        return
    with _progress("exporting") as cb:
        manifest = export_plan(plan_file, out_dir, machine=machine, force=force, progress=cb)
    summary = manifest_summary(manifest, out_dir)
    if as_json:
        _print_json(summary)
        return
    n = len(summary["partitions"])
    out.print(f"[bold]export[/bold] {manifest.model} for {manifest.machine}: {n} "
              f"partition{'s' if n != 1 else ''}, in execution order")
    out.print(_table("partitions",
                     ["partition", "device", "provider", "precision", "threads", "size"],
                     [[q["name"], q["device"], q["provider"].removesuffix("ExecutionProvider"),
                       q["precision"], q["threads"], format_bytes(q["bytes"])]
                      for q in summary["partitions"]], right=(4, 5)))
    out.print(f"wrote {summary['files']} files ({format_bytes(summary['bytes'])}) to {out_dir}: "
              f"one .onnx per partition and manifest.json")


def _export_workload(plan_file: Path, out_dir: Path, machine: Any, force: bool,
                     as_json: bool) -> None:
    """``export`` of a workload plan: one folder per model (``placewise.export_workload``)."""
    from placewise.export_workload import export_workload

    with _progress("exporting") as cb:
        summary = export_workload(plan_file, out_dir, machine=machine, force=force,
                                  progress=cb)
    if as_json:
        _print_json(summary)
        return
    out.print(f"[bold]export[/bold] a workload of {len(summary['models'])} models for "
              f"{summary['machine']}: one folder per model")
    out.print(_table("models", ["model", "folder", "partitions", "files", "size"],
                     [[m["name"], f"{m['folder']}/", str(len(m["partitions"])), str(m["files"]),
                       format_bytes(m["bytes"])] for m in summary["models"]],
                     right=(2, 3, 4)))
    out.print(f"wrote {out_dir}: each folder runs by itself in plain onnxruntime "
              f"(manifest.json); workload.json lists them")


# ---- entry point -----------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> None:
    """Console entry point: maps errors to exit statuses and one-line messages."""
    debug = os.environ.get("PLACEWISE_DEBUG") == "1"
    # a real command line (no argv): the process's start counts against --time-limit, and
    # the exit skips freeing the heap (seconds for a 100k-op plan)
    _STARTED[:] = [_process_start()] if argv is None else []
    try:
        rv = app(args=argv, prog_name="placewise", standalone_mode=False)
    except UsageError as exc:
        if NoArgsIsHelpError is not None and isinstance(exc, NoArgsIsHelpError):
            sys.stdout.write(exc.format_message() + "\n")
            sys.exit(0)
        ctx = exc.ctx
        where = ctx.command_path if ctx is not None else "placewise"
        sys.stderr.write(f"{where}: {exc.format_message()}\n")
        sys.exit(2)
    except Abort:
        sys.stderr.write("placewise: interrupted\n")
        sys.exit(130)
    except KeyboardInterrupt:
        sys.stderr.write("placewise: interrupted\n")
        sys.exit(130)
    except InputError as exc:
        sys.stderr.write(_one_line(str(exc)) + "\n")
        sys.exit(2)
    except ExecutionError as exc:
        sys.stderr.write("run failed: " + _one_line(str(exc)) + "\n")
        sys.exit(1)
    except Infeasible as exc:
        sys.stderr.write("infeasible: " + _one_line(str(exc)) + "\n")
        sys.exit(3)
    except PlacewiseError as exc:
        sys.stderr.write(_one_line(str(exc)) + "\n")
        sys.exit(2)
    except ClickException as exc:
        sys.stderr.write(_one_line(exc.format_message()) + "\n")
        sys.exit(exc.exit_code)
    except Exception as exc:
        if debug:
            traceback.print_exc()
        sys.stderr.write(f"placewise: internal error: {type(exc).__name__}: "
                         f"{_one_line(str(exc))} (set PLACEWISE_DEBUG=1 for the traceback)\n")
        sys.exit(1)
    code = rv if isinstance(rv, int) else 0
    if argv is None:
        _exit_now(code)
    sys.exit(code)


def _exit_now(code: int) -> None:
    """Exit without tearing the heap down object by object: the streams are flushed and
    the ``atexit`` handlers run, as ``sys.exit`` would."""
    import atexit

    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return  # let sys.exit report it
    atexit._run_exitfuncs()
    os._exit(code)


def _process_start() -> float:
    """``time.perf_counter()`` at this process's start (now, if the system cannot say)."""
    now = time.perf_counter()
    try:
        import psutil

        age = time.time() - psutil.Process().create_time()
    except Exception:  # pragma: no cover - no process table
        return now
    return now - min(max(0.0, age), 60.0)


def _one_line(text: str) -> str:
    return " ".join(text.split())


from placewise.cli import calibrate as _calibrate  # noqa: E402, F401
from placewise.cli import demo as _demo  # noqa: E402, F401
from placewise.cli import hw as _hw  # noqa: E402, F401
from placewise.cli import llm as _llm  # noqa: E402, F401
from placewise.cli import loop as _loop  # noqa: E402, F401
from placewise.cli import promote as _promote  # noqa: E402, F401
from placewise.cli import recalibrate as _recalibrate  # noqa: E402, F401
from placewise.cli import report as _report  # noqa: E402, F401
from placewise.cli import serve as _serve  # noqa: E402, F401  (registers the command)
from placewise.cli import sheet as _sheet  # noqa: E402, F401
from placewise.cli import sweep as _sweep  # noqa: E402, F401
