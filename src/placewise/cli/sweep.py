"""``placewise sweep``: plan every cell of models x platforms x batches, the fit matrix,
curves, regret and sensitivity; rendered here (the library is ``placewise.sweep``)."""

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
    out,
    resolve_machine,
)
from placewise.errors import InputError
from placewise.io import check_output_path
from placewise.units import format_bytes, format_seconds

__all__ = ["sweep"]


def _ints(items: list[str] | None, place: str, what: str) -> tuple[int, ...]:
    values: list[int] = []
    for item in items or []:
        for part in item.split(","):
            p = part.strip()
            if not p.isdigit() or int(p) < 1:
                raise InputError(f"{p!r} is not a positive integer {what}", place=place)
            values.append(int(p))
    return tuple(values)


def _words(items: list[str] | None, default: tuple[str, ...]) -> tuple[str, ...]:
    got = tuple(w.strip() for item in items or [] for w in item.split(",") if w.strip())
    return got or default


@app.command()
def sweep(
    model: Annotated[list[str], typer.Option("--model", help="MODEL (repeat): .onnx, .pt2, task graph .json, or zoo:NAME")],
    hw: Annotated[list[str], typer.Option("--hw", help="Platform (repeat): preset, YAML path, or 'local'")],
    batch: Annotated[list[str], typer.Option("--batch", help="Batches, e.g. 1,2,4,8")],
    out_file: Annotated[Path, typer.Option("--out", help="Write the sweep here (JSON)")],
    shape: Annotated[list[str] | None, typer.Option("--shape", help="A shape point (repeat): NAME=DIMS[,NAME=DIMS]")] = None,
    objective: Annotated[list[str] | None, typer.Option("--objective", help="latency,throughput (default latency)")] = None,
    precision: Annotated[list[str] | None, typer.Option("--precision", help="Precision policies, e.g. KEEP,fp16 (default KEEP)")] = None,
    seq: Annotated[list[str] | None, typer.Option("--seq", help="Sequence lengths for the working-set sensitivity of models with a seq option, e.g. 64,256,1024")] = None,
    slo: Annotated[str | None, typer.Option("--slo", help="Latency SLO of the fit matrix, e.g. 10ms")] = None,
    time_limit: Annotated[float, typer.Option("--time-limit", help="Seconds per cell for its search and plan (loading not counted); results are reproducible while the search's work budget ends it")] = 1.0,
    strategy: Annotated[str, typer.Option(help="Search strategy of every cell")] = "auto",
    seed: Annotated[int, typer.Option(help="Seed of randomized searches")] = 0,
    engine: Annotated[str, typer.Option(help="local (this process, in order) or ray (cells as Ray tasks)")] = "local",
    ray_address: Annotated[str | None, typer.Option("--ray-address", help="An existing Ray cluster (default: start a local one)")] = None,
    plans: Annotated[Path | None, typer.Option("--plans", help="Also write every cell's plan into this folder")] = None,
    csv_file: Annotated[Path | None, typer.Option("--csv", help="Also write one row per cell (CSV)")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Plan every cell model x platform x batch (x shape x objective x precision): fit,
    headroom, latency, throughput, energy, MFU; the fit matrix at an SLO, latency-throughput
    curves, the regret matrix and the working-set sensitivity."""
    from placewise.io import atomic_write_json, atomic_write_text
    from placewise.sweep import SweepConfig, run_sweep, sweep_csv
    from placewise.units import parse_seconds

    if engine not in ("local", "ray"):
        raise InputError(f"unknown engine {engine!r} (local or ray)", place="--engine")
    if ray_address and engine != "ray":
        raise InputError("--ray-address needs --engine ray", place="--ray-address")
    check_output_path(out_file, place="--out")
    if csv_file is not None:
        check_output_path(csv_file, place="--csv")
    if plans is not None and plans.exists() and not plans.is_dir():
        raise InputError("not a folder", file=str(plans), place="--plans")
    shapes = tuple(_parse_shapes([p.strip() for p in s.split(",") if p.strip()]) for s in shape) \
        if shape else (None,)
    slo_s = parse_seconds(slo, "--slo") if slo is not None else None
    if engine == "ray":
        from placewise.sweep.engines import import_ray

        import_ray()  # before probing anything
    machines: dict[str, Any] = {}
    if "local" in hw:
        machines["local"] = resolve_machine("local")  # probed once, here, with a bar
    cfg = SweepConfig(models=tuple(model), platforms=tuple(hw),
                      batches=_ints(batch, "--batch", "batch"), shapes=shapes,
                      objectives=_words(objective, ("latency",)),
                      precisions=_words(precision, ("KEEP",)),
                      seqs=_ints(seq, "--seq", "sequence length"), slo_s=slo_s,
                      time_limit_s=time_limit, strategy=strategy, seed=seed,
                      plans_dir=str(plans) if plans is not None else None, machines=machines)
    made = plans is not None and not plans.exists()
    before = set(plans.iterdir()) if plans is not None and plans.exists() else set()
    if plans is not None:
        plans.mkdir(parents=True, exist_ok=True)
    try:
        with _progress(f"sweeping ({engine})") as cb:
            doc = run_sweep(cfg, engine=engine, ray_address=ray_address, progress=cb)
    except BaseException:
        if plans is not None:  # no partial output: the plans this run wrote go
            for f in set(plans.iterdir()) - before:
                f.unlink(missing_ok=True)
            if made:
                plans.rmdir()
        raise
    atomic_write_json(out_file, doc)
    if csv_file is not None:
        atomic_write_text(csv_file, sweep_csv(doc))
    if as_json:
        _print_json(doc)
        return
    _render(doc, out_file)


def _render(doc: dict[str, Any], out_file: Path) -> None:
    fm = doc["fit_matrix"]
    slo = fm["slo_s"]
    title = "fit matrix" + (f" (latency SLO {format_seconds(slo)})" if slo else "") + \
        ": best batch, throughput, latency"
    by = {(c["model"], c["platform"]): c for c in fm["cells"]}
    rows = []
    for m in fm["models"]:
        row: list[Any] = [m]
        for p in fm["platforms"]:
            c = by[(m, p)]
            row.append(f"b{c['best_batch']} {c['throughput_rps']:.4g}/s "
                       f"{format_seconds(c['latency_s'])}" if c["fits"] else "no")
        rows.append(row)
    out.print(_table(title, ["model", *fm["platforms"]], rows))
    for c in fm["cells"]:
        if not c["fits"]:
            out.print(f"  {c['model']} on {c['platform']}: {c['reason']}")
    edges = [s for s in doc["sensitivity"] if s["edge"] is not None]
    for s in edges:
        pt = next(p for p in s["points"] if p["value"] == s["first_unfit"])
        applied = pt.get("applied") or {}
        what = ""
        if applied.get("latency_s") is not None:
            what = (f"; {applied['kind']} x{applied['micro_batches']}: "
                    f"{format_seconds(applied['latency_s'])}")
        out.print(f"  {s['model']} on {s['platform']}: stops fitting past {s['axis']} "
                  f"{s['edge']}" + what)
    neg = sum(r["negative"] for r in doc["regret"])
    worst = [(v, r["model"], r["platform"], r["batches"][i], r["batches"][j])
             for r in doc["regret"] for i, row in enumerate(r["regret"])
             for j, v in enumerate(row) if v is not None and i != j]
    if worst and max(worst)[0] > 0:
        v, m, p, b1, b2 = max(worst)
        out.print(f"regret: worst {100 * v:.1f}% ({m} on {p}: the batch-{b1} plan at batch "
                  f"{b2})" + (f"; {neg} negative entries (the search at b2 missed a better "
                              f"plan)" if neg else ""))
    elif worst:
        out.print("regret: 0 everywhere (the plan chosen at one batch is as good at every "
                  "other" + (f"; {neg} negative entries" if neg else "") + ")")
    cells = doc["cells"]
    stopped = sum(1 for c in cells if c.get("wall_stopped"))
    peak = max((v for c in cells for v in c["peak_bytes"].values()), default=0)
    t = doc["timing"]
    out.print(f"{len(cells)} cells ({sum(c['fits'] for c in cells)} fit) on {doc['engine']} "
              f"in {t['wall_s']:.1f} s (engine start {t['engine_start_s']:.2f} s); largest "
              f"peak {format_bytes(peak)}"
              + (f"; {stopped} cells stopped by the wall clock (raise --time-limit for "
                 f"reproducible results)" if stopped else "") + f"; wrote {out_file}")
