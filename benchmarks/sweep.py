"""Sweeps (issue 15): the fit matrix of the zoo on the presets and this machine, its wall
time in process and on Ray, Ray's start-up cost, the cell count where Ray starts to pay,
and the regret matrix of two models.

Suites (``--suite``, default all):

- ``fit``: ``placewise.sweep.run_sweep`` over ``--models`` (default the 5 zoo models) x
  ``--platforms`` (default the 5 presets and ``local``) x ``--batches`` (default
  1,2,4,8,16,32,64), latency objective, ``--time-limit`` per cell, SLO ``--slo``; once with
  ``--engine local`` and once with ``--engine ray`` (a local cluster with this machine's
  CPUs as workers, its start included); the two documents compared minus ``timing``. The
  ``local`` platform is probed (or read from the cache) before either is timed.
- ``startup``: Ray's start-up: ``ray.init()`` of a local cluster, the first no-op task
  (a worker process started), the first task that imports placewise and plans one cell
  (zoo:mlp on a preset at batch 1), and ``ray.shutdown()``; ``--repeats`` times.
- ``crossover``: the first N cells of the fit suite's cells (presets only), for N in
  ``--counts``, run in process and on Ray (each run starts its own cluster): the smallest
  N where Ray's wall time is below the in-process one.
- ``regret``: the regret matrix of ``--regret-models`` (default bert, resnet) on
  ``--regret-platform`` over the batches.

    .venv/bin/python benchmarks/sweep.py                      # everything (long)
    .venv/bin/python benchmarks/sweep.py --suite fit --models zoo:mlp --platforms a100-pcie-server,local --batches 1,2

Writes ``benchmarks/results/sweep.json`` (``--out``) and prints markdown tables
(``--table FILE`` prints those of a results file).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ZOO = ("zoo:mlp", "zoo:resnet", "zoo:bert", "zoo:gpt", "zoo:inception")
PRESETS = ("a100-pcie-server", "grace-hopper-gh200", "h100-sxm-server", "jetson-agx-orin",
           "laptop-soc")
BATCHES = (1, 2, 4, 8, 16, 32, 64)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _strip(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in ("timing", "engine")}


def _config(args: argparse.Namespace, models: tuple[str, ...], platforms: tuple[str, ...]
            ) -> Any:
    from placewise.sweep import SweepConfig

    return SweepConfig(models=models, platforms=platforms, batches=args.batches,
                       slo_s=args.slo, time_limit_s=args.time_limit)


def suite_fit(args: argparse.Namespace) -> dict[str, Any]:
    from placewise.hardware.probe import load_local
    from placewise.sweep import run_sweep

    if "local" in args.platforms:
        load_local()  # probed (or read from the cache) before anything is timed
    out: dict[str, Any] = {}
    docs = {}
    for engine in ("local", "ray"):
        _log(f"fit: {engine} engine, {len(args.models)} x {len(args.platforms)} x "
             f"{len(args.batches)} cells")
        t0 = time.perf_counter()
        doc = run_sweep(_config(args, args.models, args.platforms), engine=engine,
                        ray_num_cpus=args.workers if engine == "ray" else None)
        wall = time.perf_counter() - t0
        docs[engine] = doc
        out[engine] = {"wall_s": round(wall, 3), "engine_start_s": doc["timing"]["engine_start_s"],
                       "cells": doc["timing"]["cells"],
                       "cell_wall_s_median": statistics.median(doc["timing"]["cell_wall_s"]),
                       "wall_stopped": sum(1 for c in doc["cells"] if c["wall_stopped"])}
    out["identical"] = _strip(docs["local"]) == _strip(docs["ray"])
    out["speedup"] = round(out["local"]["wall_s"] / out["ray"]["wall_s"], 3)
    out["workers"] = args.workers
    out["fit_matrix"] = docs["local"]["fit_matrix"]
    out["fits"] = sum(1 for c in docs["local"]["cells"] if c["fits"])
    if args.sweep_out:
        from placewise.io import atomic_write_json

        atomic_write_json(args.sweep_out, docs["local"])
        out["sweep_file"] = str(args.sweep_out)
    return out


def _noop() -> int:
    return os.getpid()


def _one_cell() -> dict[str, Any]:
    from placewise.sweep.cells import CellSpec, run_cell

    return run_cell(CellSpec("zoo:mlp", "a100-pcie-server", 1, batches=(1,)))


def suite_startup(args: argparse.Namespace) -> dict[str, Any]:
    import ray

    runs = []
    for i in range(args.repeats):
        _log(f"startup: run {i + 1} of {args.repeats}")
        t0 = time.perf_counter()
        ray.init(num_cpus=args.workers, include_dashboard=False, logging_level=logging.ERROR,
                 log_to_driver=False)
        t1 = time.perf_counter()
        ray.get(ray.remote(_noop).remote())
        t2 = time.perf_counter()
        ray.get(ray.remote(_one_cell).remote())
        t3 = time.perf_counter()
        ray.shutdown()
        t4 = time.perf_counter()
        runs.append({"init_s": t1 - t0, "first_task_s": t2 - t1, "first_cell_s": t3 - t2,
                     "shutdown_s": t4 - t3})
    t0 = time.perf_counter()
    _one_cell()  # the same cell in this process (imports already done: a warm cell)
    warm = time.perf_counter() - t0
    med = {k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0]}
    return {"runs": runs, "median": med, "warm_cell_in_process_s": round(warm, 3),
            "workers": args.workers}


def suite_crossover(args: argparse.Namespace) -> dict[str, Any]:
    from placewise.sweep import cell_specs
    from placewise.sweep.engines import run_local, run_ray

    specs = cell_specs(_config(args, args.models, tuple(p for p in args.platforms
                                                        if p != "local")))
    rows = []
    for n in args.counts:
        if n > len(specs):
            break
        part = specs[:n]
        _log(f"crossover: {n} cells")
        t0 = time.perf_counter()
        run_local(part)
        local = time.perf_counter() - t0
        t0 = time.perf_counter()
        _, start = run_ray(part, num_cpus=args.workers)
        ray_s = time.perf_counter() - t0
        rows.append({"cells": n, "local_s": round(local, 3), "ray_s": round(ray_s, 3),
                     "ray_start_s": round(start, 3)})
    pays = next((r["cells"] for r in rows if r["ray_s"] < r["local_s"]), None)
    return {"rows": rows, "ray_pays_from_cells": pays, "workers": args.workers,
            "note": "each run in a fresh process state for Ray (its own cluster); the "
                    "in-process runs share this process's imports (warm after the first)"}


def suite_regret(args: argparse.Namespace) -> dict[str, Any]:
    from placewise.sweep import run_sweep

    _log(f"regret: {', '.join(args.regret_models)} on {args.regret_platform}")
    doc = run_sweep(_config(args, args.regret_models, (args.regret_platform,)))
    return {"platform": args.regret_platform, "regret": doc["regret"],
            "devices": {f"{c['model']}@{c['batch']}": c["devices_used"] for c in doc["cells"]}}


SUITES = {"fit": suite_fit, "startup": suite_startup, "crossover": suite_crossover,
          "regret": suite_regret}


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _us(v: float | None) -> str:
    return "-" if v is None else f"{v * 1e6:.1f} us"


def tables(res: dict[str, Any]) -> str:
    lines: list[str] = []
    fit = res.get("fit")
    if fit:
        fm = fit["fit_matrix"]
        by = {(c["model"], c["platform"]): c for c in fm["cells"]}
        lines += [f"### Fit matrix (SLO {_us(fm['slo_s'])}): best batch, throughput, latency",
                  "", "| model | " + " | ".join(fm["platforms"]) + " |",
                  "|---" * (len(fm["platforms"]) + 1) + "|"]
        for m in fm["models"]:
            cells = []
            for p in fm["platforms"]:
                c = by[(m, p)]
                cells.append(f"b{c['best_batch']} {c['throughput_rps']:.3g}/s "
                             f"{_us(c['latency_s'])}" if c["fits"] else "no")
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
        lines += ["", "| engine | cells | wall s | engine start s | median cell s | wall-stopped |",
                  "|---|---|---|---|---|---|"]
        for e in ("local", "ray"):
            r = fit[e]
            lines.append(f"| {e} | {r['cells']} | {r['wall_s']} | {r['engine_start_s']} | "
                         f"{r['cell_wall_s_median']:.3f} | {r['wall_stopped']} |")
        lines += ["", f"speed-up {fit['speedup']} with {fit['workers']} workers; identical "
                      f"documents: {fit['identical']}", ""]
    st = res.get("startup")
    if st:
        m = st["median"]
        lines += ["### Ray start-up (median)", "", "| init s | first task s | first cell s | "
                  "shutdown s | warm cell in process s |", "|---|---|---|---|---|",
                  f"| {m['init_s']} | {m['first_task_s']} | {m['first_cell_s']} | "
                  f"{m['shutdown_s']} | {st['warm_cell_in_process_s']} |", ""]
    cr = res.get("crossover")
    if cr:
        lines += ["### Where Ray pays", "", "| cells | local s | ray s | ray start s |",
                  "|---|---|---|---|"]
        lines += [f"| {r['cells']} | {r['local_s']} | {r['ray_s']} | {r['ray_start_s']} |"
                  for r in cr["rows"]]
        lines += ["", f"Ray pays from {cr['ray_pays_from_cells']} cells "
                      f"({cr['workers']} workers)", ""]
    rg = res.get("regret")
    if rg:
        for r in rg["regret"]:
            lines += [f"### Regret: {r['model']} on {r['platform']} ({r['objective']}; row: "
                      f"plan chosen at b1, column: evaluated at b2)", "",
                      "| b1 \\ b2 | " + " | ".join(map(str, r["batches"])) + " |",
                      "|---" * (len(r["batches"]) + 1) + "|"]
            for b, row in zip(r["batches"], r["regret"], strict=True):
                lines.append(f"| {b} | " + " | ".join(_pct(v) for v in row) + " |")
            lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--suite", default="fit,startup,crossover,regret")
    ap.add_argument("--models", default=",".join(ZOO))
    ap.add_argument("--platforms", default=",".join((*PRESETS, "local")))
    ap.add_argument("--batches", default=",".join(map(str, BATCHES)))
    ap.add_argument("--slo", type=float, default=0.01, help="latency SLO (s)")
    ap.add_argument("--time-limit", type=float, default=1.0, help="per cell (s)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--counts", default="1,2,4,8,16,32")
    ap.add_argument("--regret-models", default="zoo:bert,zoo:resnet")
    ap.add_argument("--regret-platform", default="jetson-agx-orin")
    ap.add_argument("--sweep-out", type=Path, default=None,
                    help="also keep the fit suite's sweep document here")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/sweep.json"))
    ap.add_argument("--table", type=Path, help="Print the markdown tables of a results file")
    args = ap.parse_args()
    if args.table:
        print(tables(json.loads(args.table.read_text())))
        return
    args.models = tuple(m if m.startswith("zoo:") or "." in m else f"zoo:{m}"
                        for m in args.models.split(","))
    args.platforms = tuple(args.platforms.split(","))
    args.batches = tuple(int(b) for b in args.batches.split(","))
    args.counts = tuple(int(n) for n in args.counts.split(","))
    args.regret_models = tuple(m if m.startswith("zoo:") else f"zoo:{m}"
                               for m in args.regret_models.split(","))
    res: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version()},
        "args": {k: (list(v) if isinstance(v, tuple) else str(v) if isinstance(v, Path) else v)
                 for k, v in vars(args).items()},
        "command": " ".join(sys.argv)}
    for name in args.suite.split(","):
        if name not in SUITES:
            raise SystemExit(f"unknown suite {name!r} (known: {', '.join(SUITES)})")
        res[name] = SUITES[name](args)
    from placewise.io import atomic_write_json

    atomic_write_json(args.out, res)
    print(tables(res))
    _log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
