"""``placewise sheet``: the operator-to-kernel mapping sheet of a plan as CSV, with the plan's
MFU and memory-bound fraction by layer type (the libraries are ``placewise.report.sheet``
and ``placewise.utilization``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from placewise.cli import JsonOpt, _print_json, _progress, _table, app, machine_of_plan, out
from placewise.units import format_flops, format_seconds

__all__ = ["sheet"]


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.3g}%"


def _flop(x: float, per_s: str = "") -> str:
    text = format_flops(x)
    return text + ("FLOP" if text.endswith(" ") or text[-1].isalpha() else " FLOP") + per_s


def _sec(x: float | None) -> str:
    return "-" if x is None else format_seconds(x)


@app.command()
def sheet(
    plan_file: Annotated[Path, typer.Argument(metavar="PLAN", help="Plan JSON")],
    out_file: Annotated[Path, typer.Option("--out", help="CSV file to write")],
    validation: Annotated[Path | None, typer.Option("--validation", help="JSON of 'placewise validate PLAN --json' for this plan: fills the measured columns")] = None,
    hw: Annotated[str | None, typer.Option("--hw", help="The plan's machine (default: its preset, 'local', or the spec file the plan recorded); checked against the plan's fingerprint")] = None,
    as_json: JsonOpt = False,
) -> None:
    """One row per op: module path, region, partition, device, precision, kernel, the cost
    model's assumption, bottleneck, predicted and measured time; and MFU by layer type."""
    from placewise.io import check_output_path
    from placewise.plan import load_plan
    from placewise.report.sheet import SHEET_COLUMNS, mapping_sheet, sheet_summary, write_sheet_csv
    from placewise.utilization import (
        check_validation,
        load_validation,
        plan_graph,
        plan_utilization,
    )

    check_output_path(out_file, place="--out")
    plan = load_plan(plan_file)
    vfile = str(validation) if validation is not None else None
    report: dict[str, Any] | None = None
    if validation is not None:
        report = load_validation(validation)
        check_validation(plan, report, file=vfile)
    with _progress("loading the plan's model and machine") as cb:
        cb("model", 0.0)
        graph = plan_graph(plan, file=str(plan_file))
        cb("machine", 0.5)
        machine = machine_of_plan(plan, hw, file=str(plan_file))
    rows = mapping_sheet(plan, report, graph=graph, machine=machine, validation_file=vfile)
    util = plan_utilization(plan, validation=report, graph=graph, machine=machine,
                            validation_file=vfile)
    write_sheet_csv(rows, out_file)
    summary = sheet_summary(rows)
    if as_json:
        _print_json({"out": str(out_file), "rows": len(rows), "columns": list(SHEET_COLUMNS),
                     "validation": vfile, "summary": summary, "utilization": util.to_json()})
        return
    meas = util.measured
    out.print(f"[bold]sheet[/bold] {plan.model} (batch {plan.batch}) on {plan.machine.name}: "
              f"{len(rows)} ops in {summary['regions']} regions, "
              f"{len(summary['partitions'])} partition(s)")
    out.print(f"  MFU {_pct(util.mfu)} at the predicted latency {_sec(util.time_s)}, "
              f"{_pct(util.mfu_throughput)} at the pipeline period {_sec(util.period_s)}; "
              f"{_flop(util.flops)} over a peak of "
              f"{_flop(util.peak_flops_per_s, '/s')} "
              f"({', '.join(f'{p.device} {p.dtype}' for p in util.peaks)})")
    out.print(f"  memory-bound: {_pct(util.memory_bound_fraction)} of compute time "
              f"(memory term {_pct(util.memory_term_fraction)})")
    if meas is not None:
        out.print(f"  measured: MFU {_pct(meas.mfu)} at p50 {_sec(meas.time_s)}, "
                  f"{_pct(meas.mfu_throughput)} at the stream period {_sec(meas.period_s)}; "
                  f"memory-bound {_pct(meas.memory_bound_fraction)} ({meas.source})")
    lt_rows = []
    for r in util.by_layer_type:
        m = next((x for x in meas.by_layer_type if x.layer_type == r.layer_type), None) \
            if meas is not None else None
        lt_rows.append([r.layer_type, r.ops, _flop(r.flops), _sec(r.time_s), _pct(r.mfu),
                        _pct(r.memory_bound_fraction),
                        _sec(m.time_s if m else None), _pct(m.mfu if m else None)])
    out.print(_table("by layer type (predicted; measured where known)",
                     ["layer type", "ops", "flops", "time", "mfu", "mem-bound",
                      "measured", "mfu meas."], lt_rows))
    out.print(f"wrote {out_file}: {len(rows)} rows, {len(SHEET_COLUMNS)} columns"
              + (f"; {summary['measured_rows']} with a measured op time" if report else ""))
