"""``placewise demo``: the whole story on a built-in model and this machine, step by step.

Each step is the command a user would type, printed before it runs; the library calls below
are the ones those commands make. Imports stay inside the steps: the CLI registers this
command at start-up, and start-up must not pay for the whole library.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from placewise.cli import _load_graph, _progress, _render_summary, app, out, resolve_machine
from placewise.units import format_bytes, format_seconds

__all__ = ["demo"]


@app.command()
def demo(
    model: Annotated[str, typer.Option(help="The built-in model to tell the story on")] = "zoo:bert",
    preset: Annotated[str, typer.Option(help="The preset to plan for besides this machine")] = "jetson-agx-orin",
    workdir: Annotated[Path | None, typer.Option(help="Keep the artifacts here")] = None,
    requests: Annotated[int, typer.Option(help="Requests to time in validation")] = 20,
) -> None:
    """The whole story on a built-in model and this machine: inspect, probe, profile, plan on a
    preset and on this machine, explain, validate (predicted vs measured), and serve the plan
    under load, simulated and real."""
    import tempfile

    from placewise.graph.summary import summarize

    folder = workdir or Path(tempfile.mkdtemp(prefix="placewise-demo-"))
    folder.mkdir(parents=True, exist_ok=True)

    out.rule(f"1. the model as a graph: {model}")
    out.print(f"$ placewise inspect {model}")
    graph = _load_graph(model)
    _render_summary(summarize(graph))

    local = _this_machine()
    _plan_preset(graph, model, preset, folder)
    cal_file = _profile_here(graph, model, local, folder)
    plan_file, local_plan = _plan_here(graph, model, local, cal_file, folder)
    report = _explain_and_validate(local_plan, plan_file, local, requests)

    out.rule("8. the plan as a loaded service, simulated and for real")
    from placewise.cli.serve import demo_serve

    served = demo_serve(local_plan, plan_file, cal_file, local)
    _report(graph, local, report, served, plan_file, folder)
    out.rule("done")
    out.print(f"artifacts in {folder}")


def _this_machine() -> Any:
    """Step 2: this machine's spec (probed once, cached), cut to the devices that can run."""
    from placewise.cli.hw import render_machine
    from placewise.runtime.backends import runnable_part

    out.rule("2. this machine, measured once and cached")
    out.print("$ placewise hw show local")
    local = resolve_machine("local")
    render_machine(local)
    local, gaps = runnable_part(local)  # the rest of the story runs what it plans
    for gap in gaps:
        out.print(f"left out of the plans below: {gap}")
    return local


def _plan_preset(graph: Any, model: str, preset: str, folder: Path) -> None:
    """Step 3: a plan for a machine that is not here, on roofline costs."""
    from placewise.cost.load import load_cost_model
    from placewise.graph.fuse import fuse
    from placewise.plan import build_plan, save_plan
    from placewise.schedule.placement import Problem

    out.rule(f"3. plan for a machine that is not here: {preset} (analytic roofline costs)")
    out.print(f"$ placewise plan {model} --hw {preset} --out {folder / 'plan-preset.json'}")
    machine = resolve_machine(preset)
    problem = Problem(graph, fuse(graph), machine, load_cost_model(machine, None))
    with _progress("searching") as cb:
        res, rec = _keep_search(problem, model, cb)
    save_plan(build_plan(res.problem, res.result, model_ref=model, precision=rec),
              folder / "plan-preset.json")
    _render_search(res.result, machine.name)


def _profile_here(graph: Any, model: str, local: Any, folder: Path) -> Path:
    """Step 4: this model's ops measured on this machine's devices, alone and in model order."""
    from placewise.calibrate.context import profile_in_context
    from placewise.calibrate.profile import profile_model
    from placewise.io import atomic_write_json
    from placewise.runtime.opexec import load_source

    out.rule("4. measure this model's ops on this machine's devices")
    cal_file = folder / "calibration.json"
    out.print(f"$ placewise profile {model} --hw local --out {cal_file}")
    source = load_source(model, with_graph=False)  # the graph is loaded above
    with _progress("profiling") as cb:
        cal = profile_model(graph, source, local, max_time_s=0.5,
                            progress=lambda d, t, msg: cb(msg, d / max(t, 1)))
    with _progress("in model order") as cb:
        cal = profile_in_context(graph, source, local, cal,
                                 progress=lambda d, t, msg: cb(msg, d / max(t, 1)))
    atomic_write_json(cal_file, cal.to_json())
    out.print(f"{len(cal.measurements)} op measurements on {len(local.devices)} devices, "
              f"{len(cal.context)} regions timed in model order by the executor, "
              f"{len(cal.fits)} fitted models, {len(cal.failures)} failures")
    return cal_file


def _plan_here(graph: Any, model: str, local: Any, cal_file: Path,
               folder: Path) -> tuple[Path, Any]:
    """Step 5: a plan for this machine on the measured costs."""
    from placewise.cost.load import load_cost_model
    from placewise.graph.fuse import fuse
    from placewise.plan import build_plan, save_plan
    from placewise.schedule.placement import Problem

    out.rule("5. plan for this machine with the measured costs")
    plan_file = folder / "plan-local.json"
    out.print(f"$ placewise plan {model} --hw local --calibration {cal_file} --out {plan_file}")
    problem = Problem(graph, fuse(graph), local, load_cost_model(local, cal_file))
    with _progress("searching") as cb:
        res, rec = _keep_search(problem, model, cb)
    local_plan = build_plan(res.problem, res.result, model_ref=model, precision=rec)
    save_plan(local_plan, plan_file)
    _render_search(res.result, local.name)
    return plan_file, local_plan


def _explain_and_validate(local_plan: Any, plan_file: Path, local: Any, requests: int) -> Any:
    """Steps 6 and 7: why the plan is what it is; the plan run for real, term by term."""
    from placewise.explain import explain as explain_plan
    from placewise.explain import render_explain
    from placewise.validate import render_validation, validate_plan

    out.rule("6. why the plan is what it is")
    out.print(f"$ placewise explain {plan_file}")
    sys.stdout.write(render_explain(explain_plan(local_plan), max_rows=12))

    out.rule("7. run it for real and compare, term by term")
    out.print(f"$ placewise validate {plan_file} --requests {requests}")
    with _progress("validating") as cb:
        report = validate_plan(local_plan, requests=requests, machine=local, progress=cb)
    sys.stdout.write(render_validation(report))
    return report


def _report(graph: Any, local: Any, report: Any, served: dict[str, Any], plan_file: Path,
            folder: Path) -> None:
    """Step 9: one HTML report of the plan, its validation and its service."""
    from placewise.io import atomic_write_json, atomic_write_text
    from placewise.report import build_report, load_inputs

    out.rule("9. one report to look at: schedule, memory, roofline, MFU, measured vs predicted")
    val_file, serve_file = folder / "validation.json", folder / "serve.json"
    atomic_write_json(val_file, report.to_json())
    atomic_write_json(serve_file, served)
    report_file = folder / "report.html"
    out.print(f"$ placewise report {plan_file} {val_file} {serve_file} --out {report_file}")
    html = build_report(load_inputs([plan_file, val_file, serve_file]), graph=graph,
                        machine=local)
    atomic_write_text(report_file, html)
    out.print(f"wrote {report_file} ({format_bytes(len(html.encode()))}): open it in any "
              f"browser, offline (file://{report_file.resolve()})")


def _keep_search(problem: Any, model: str, cb: Callable[[str, float], None]) -> Any:
    """The demo's search: ``auto`` for 5 s at the model's own precision."""
    from placewise.precision.evidence import plan_precision
    from placewise.precision.policy import DEFAULT_BUDGET, Policy
    from placewise.search.api import plan_search

    def search(prob: Any) -> Any:
        return plan_search(prob, strategy="auto", time_limit_s=5.0, progress=cb)

    return plan_precision(problem, model, Policy.KEEP, DEFAULT_BUDGET, search)


def _render_search(res: Any, machine_name: str) -> None:
    out.print(f"{res.strategy} chose {res.chosen} on {machine_name}: devices "
              f"{', '.join(res.devices_used)}; latency {format_seconds(res.makespan_s)}, "
              f"throughput {res.throughput_rps:.4g} req/s, lower bound "
              f"{format_seconds(res.lower_bound_s)}")
    out.print("  baselines: " + ", ".join(f"{label} {format_seconds(v)}"
                                          for label, v in res.baselines))
