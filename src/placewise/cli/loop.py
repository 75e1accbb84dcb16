"""``placewise loop``: the closed loop on a replayed drifting trace, rendered here (the library
is ``placewise.adapt.loop``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from placewise.cli import JsonOpt, _print_json, _progress, _table, app, out, resolve_machine

__all__ = ["loop"]


@app.command()
def loop(
    model: Annotated[str, typer.Argument(metavar="MODEL", help="Model: .onnx, .pt2, task graph .json or zoo:NAME")],
    trace_file: Annotated[Path, typer.Option("--trace", help="SHAPES.jsonl: one {\"t_s\", \"batch\", \"seq\"} per line, replayed in windows")],
    out_file: Annotated[Path, typer.Option("--out", help="LOOP.json to write")],
    hw: Annotated[str, typer.Option("--hw", help="The machine: local (only local runs for real)")] = "local",
    envelope: Annotated[list[str] | None, typer.Option("--envelope", help="AXIS=VALUES, e.g. batch=1,2,4,8,16 or seq=32..512:pow2 (repeat; default: the trace's shapes rounded up to powers of two)")] = None,
    budget: Annotated[str, typer.Option(help="Wall-time bound of the whole loop (e.g. 300s)")] = "300s",
    seed: Annotated[int, typer.Option(help="Seed of planning, serving and the guardrail")] = 0,
    windows: Annotated[int, typer.Option(help="Windows the trace is cut into (the first is the initial mix)")] = 6,
    k: Annotated[int, typer.Option("--k", help="Consecutive windows outside a cost's interval before recalibrating")] = 2,
    margin: Annotated[float, typer.Option(help="How much lower a candidate's predicted expected cost must be (fraction)")] = 0.05,
    mix_shift: Annotated[float, typer.Option("--mix-shift", help="Total-variation distance of a window's shape mix that triggers replanning")] = 0.25,
    threshold: Annotated[float, typer.Option(help="Guardrail: the median improvement's 95% interval must clear this fraction")] = 0.05,
    p99_tolerance: Annotated[float, typer.Option("--p99-tolerance", help="Guardrail: how much worse p99 may be (fraction)")] = 0.10,
    promote_requests: Annotated[int, typer.Option("--promote-requests", help="Requests of each guardrail trial")] = 200,
    promote_blocks: Annotated[int, typer.Option("--promote-blocks", help="A/B block pairs of each guardrail trial (at least 6)")] = 10,
    window_requests: Annotated[int, typer.Option("--window-requests", help="Executor requests per telemetry window (recalibration counts k of them)")] = 20,
    slices: Annotated[int, typer.Option(help="Slices of each window, each served by both arms in turn")] = 4,
    plan_time: Annotated[str, typer.Option("--plan-time", help="Search time of each grid point of a plan set")] = "5s",
    calibration: Annotated[Path | None, typer.Option(help="Starting calibration (default: an empty one for the machine)")] = None,
    work: Annotated[Path | None, typer.Option("--work", help="Folder for the plan sets, calibrations and telemetry (default: OUT with .d)")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Serve the trace window by window with a plan set that adapts (recalibrate, replan,
    promote behind the guardrail, roll back), beside the never-adapting incumbent on the
    same traffic; write LOOP.json for ``placewise report LOOP.json --out loop.html``."""
    from placewise.adapt.loop import LoopSettings, check_work_dir, run_loop, save_loop
    from placewise.adapt.loop_figures import split_windows
    from placewise.adapt.trace import load_shape_trace
    from placewise.errors import InputError
    from placewise.io import check_output_path
    from placewise.units import parse_seconds

    check_output_path(out_file, place="--out")
    if hw != "local":
        raise InputError(f"the loop serves for real, on this machine: --hw must be local, "
                         f"got {hw!r}", place="--hw")
    if calibration is not None and not calibration.is_file():
        raise InputError("no such file", file=str(calibration), place="--calibration")
    env = None
    if envelope:
        from placewise.adapt.planset import parse_envelope

        env = parse_envelope(envelope)
    cfg = LoopSettings(windows=windows, budget_s=parse_seconds(budget, "--budget"), seed=seed,
                       k=k, margin=margin, mix_shift=mix_shift, threshold=threshold,
                       p99_tolerance=p99_tolerance, promote_requests=promote_requests,
                       promote_blocks=promote_blocks, window_requests=window_requests,
                       slices=slices,
                       plan_time_s=parse_seconds(plan_time, "--plan-time"), envelope=env)
    cfg.check()
    work_dir = check_work_dir(work if work is not None else
                              out_file.with_name(out_file.name + ".d"))
    trace = load_shape_trace(trace_file)
    split_windows(trace, cfg.windows)  # a trace too short for the windows, before probing
    machine = resolve_machine(hw)
    with _progress("closed loop") as cb:
        doc = run_loop(model, machine, trace, work_dir=work_dir, settings=cfg,
                       calibration=calibration, progress=cb)
    save_loop(doc, out_file)
    if as_json:
        _print_json({"out": str(out_file), **_brief(doc)})
        return
    _render(doc, out_file)


def _brief(doc: dict[str, Any]) -> dict[str, Any]:
    return {"work_dir": doc["work_dir"], "summary": doc["summary"],
            "actions": [{"window": w["index"], **{k: a[k] for k in ("action", "reason")}}
                        for w in doc["windows"] for a in w["actions"]],
            "notes": doc["notes"]}


def _pct(x: Any) -> str:
    return "-" if x is None else f"{x * 100:+.1f} %"


def _err(x: Any) -> str:
    return "-" if x is None else f"{x * 100:.1f} %"


def _render(doc: dict[str, Any], out_file: Path) -> None:
    from placewise.units import format_seconds

    def sec(x: Any) -> str:
        return "-" if x is None else format_seconds(float(x))

    rows = []
    for w in doc["windows"]:
        st, ad = w["arms"]["static"], w["arms"]["adaptive"]
        rows.append([str(w["index"]), sec(st.get("latency_p50_s")), sec(ad.get("latency_p50_s")),
                     _pct(w["gain"].get("latency_p50")), _pct(w["gain"].get("throughput")),
                     _err((w.get("prediction_error") or {}).get("before")),
                     _err((w.get("prediction_error") or {}).get("after")),
                     ", ".join(a["action"] for a in w["actions"]) or "-"])
    out.print(_table(f"closed loop: {doc['model']} on {doc['machine']}",
                     ["win", "static p50", "adapt. p50", "gain p50", "gain thr",
                      "err before", "err after", "actions"], rows,
                     right=(1, 2, 3, 4, 5, 6)))
    s = doc["summary"]
    out.print(f"gain (median over windows after the first): latency p50 "
              f"{_pct(s['gain_latency_p50'])}, throughput {_pct(s['gain_throughput'])}; "
              f"prediction error before/after recalibration "
              f"{_err(s['prediction_error_before'])} / {_err(s['prediction_error_after'])}; "
              f"{s['promotions']} promoted, {s['guardrail_refusals']} refused by the "
              f"guardrail, {s['keeps'] - s['guardrail_refusals']} not predicted better, "
              f"{s['rollbacks']} rolled back")
    for w in doc["windows"]:
        for a in w["actions"]:
            out.print(f"  window {w['index']}: {a['action']}: {a['reason']}")
    for n in doc["notes"]:
        out.print(f"  note: {n}")
    out.print(f"wrote {out_file} (artifacts in {doc['work_dir']}); "
              f"placewise report {out_file} --out loop.html")
