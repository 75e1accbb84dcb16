"""The closed loop (issue 16) on ``local``: the runtime adaptation gain over the never-adapting
incumbent, the compile-time prediction error before and after recalibration, and how often
the guardrail promotes or refuses, on drifting traces of two zoo models, plus one stable
comparator run.

Workloads (each a seeded ``placewise.adapt.trace.drifting_trace`` call; ``--seeds``):

- ``failing`` -- **the reproducible failing workload**: a tiny BERT
  (``zoo:bert?layers=1&hidden=64&heads=2&seq=32&vocab=100``) whose traffic is all batch 1 in
  the first window and turns all batch 4 (``drifting_trace("batch", requests=600,
  rate_rps=100, phases=4, values=(1, 4), majority=1.0, seed=S)``), envelope
  ``batch=1,2,4,8,16``. The plan set planned for the first window has buckets ``{1}`` and
  ``{2..16}``: the static incumbent pads every batch-4 request to 16 rows.
- ``seq`` -- a tiny GPT (``zoo:gpt?layers=1&hidden=64&heads=2&vocab=100``) whose sequence
  length rises from 32 to 128 (``drifting_trace("seq", ..., values=(32, 128),
  majority=1.0)``), envelope ``seq=32..256:pow2``: the incumbent pads 128 to 256.
- ``failing-700`` -- the failing workload offered 700 requests/s instead of 100: more than
  the static incumbent's capacity once it pads batch 4 to 16 rows (about 1.7 ms each), less
  than the adaptive set's, so the gain shows in throughput as well (run with
  ``--workloads failing-700``; not in the default set).
- ``stable`` -- the comparator: the same BERT on traffic that never drifts (all batch 1,
  ``values=(1,)``); the loop should recalibrate but find nothing to promote, and the gain
  measures the noise of the interleaved arms.

Each run: ``placewise.adapt.loop.run_loop`` with 6 windows of 100 requests, an empty starting
calibration (the roofline on the probed machine), ``k=2``, plan time 2 s per grid point, a
guardrail of 10 A/B block pairs over 100 requests, budget 300 s. Recorded per run: the
summary of LOOP.json (gains are medians over the windows after the first, ``1 - adaptive /
static`` for latency and ``adaptive / static - 1`` for throughput), the gain of the last
window, prediction errors, action counts; per workload the median and spread (max - min)
over seeds.

    flock /tmp/placewise-bench.lock .venv/bin/python benchmarks/loop.py
    .venv/bin/python benchmarks/loop.py --workloads failing --seeds 0 --keep-loop DIR

Writes ``benchmarks/results/loop.json`` (``--out``) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BERT = "zoo:bert?layers=1&hidden=64&heads=2&seq=32&vocab=100"
GPT = "zoo:gpt?layers=1&hidden=64&heads=2&vocab=100"

#: name -> (model, drifting_trace keyword arguments (over ``TRACE``), envelope)
WORKLOADS: dict[str, tuple[str, dict[str, Any], dict[str, list[int]]]] = {
    "failing": (BERT, {"axis": "batch", "values": (1, 4)}, {"batch": [1, 2, 4, 8, 16]}),
    "failing-700": (BERT, {"axis": "batch", "values": (1, 4), "rate_rps": 700.0},
                    {"batch": [1, 2, 4, 8, 16]}),
    "seq": (GPT, {"axis": "seq", "values": (32, 128)}, {"seq": [32, 64, 128, 256]}),
    "stable": (BERT, {"axis": "batch", "values": (1,)}, {"batch": [1, 2, 4, 8, 16]}),
}
TRACE: dict[str, Any] = {"requests": 600, "rate_rps": 100.0, "phases": 4, "majority": 1.0}
FIGURES = ("gain_latency_p50", "gain_latency_p99", "gain_throughput", "gain_latency_p50_last",
           "prediction_error_before", "prediction_error_after",
           "prediction_error_first_window", "prediction_error_last_window")
COUNTS = ("recalibrations", "replans", "promotions", "keeps", "guardrail_refusals",
          "rollbacks", "plan_sets_planned")


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def trace_of(name: str, seed: int) -> Any:
    """The workload's trace (module docstring)."""
    from placewise.adapt.trace import drifting_trace

    _, kw, _ = WORKLOADS[name]
    kw = {**TRACE, **kw}
    return drifting_trace(kw.pop("axis"), seed=seed, **kw)


def run_one(name: str, seed: int, machine: Any, work: Path, args: argparse.Namespace
            ) -> dict[str, Any]:
    """One loop of workload ``name`` with ``seed``; the record kept in the results."""
    from placewise.adapt.loop import LoopSettings, run_loop

    model, _, env = WORKLOADS[name]
    cfg = LoopSettings(windows=6, budget_s=args.budget, seed=seed, k=2, plan_time_s=2.0,
                       window_requests=20, promote_requests=100, promote_blocks=10,
                       envelope=env)
    t0 = time.monotonic()
    doc = run_loop(model, machine, trace_of(name, seed), work_dir=work, settings=cfg,
                   progress=lambda msg, frac: _log(f"  [{name} seed {seed}] {frac:4.0%} {msg}"))
    wall = time.monotonic() - t0
    if args.keep_loop is not None:
        args.keep_loop.mkdir(parents=True, exist_ok=True)
        (args.keep_loop / f"loop-{name}-{seed}.json").write_text(json.dumps(doc))
    s = doc["summary"]
    return {"workload": name, "model": model, "seed": seed, "wall_s": wall,
            **{k: s.get(k) for k in FIGURES + COUNTS},
            "requests": s["requests"], "budget_exhausted": s["budget_exhausted"],
            "windows": [{"index": w["index"], "gain": w["gain"],
                         "static_p50_s": w["arms"]["static"]["latency_p50_s"],
                         "adaptive_p50_s": w["arms"]["adaptive"]["latency_p50_s"],
                         "static_padding": w["arms"]["static"]["padding_waste"],
                         "adaptive_padding": w["arms"]["adaptive"]["padding_waste"],
                         "prediction_error": w.get("prediction_error"),
                         "actions": [a["action"] for a in w["actions"]]}
                        for w in doc["windows"]],
            "buckets": {"static": [b["bucket"] for b in
                                   doc["windows"][-1]["arms"]["static"]["buckets"]],
                        "adaptive": [b["bucket"] for b in
                                     doc["windows"][-1]["arms"]["adaptive"]["buckets"]]}}


def _stats(xs: list[Any]) -> dict[str, Any]:
    got = [float(x) for x in xs if isinstance(x, int | float)]
    if not got:
        return {"median": None, "spread": None, "n": 0}
    return {"median": statistics.median(got), "spread": max(got) - min(got), "n": len(got),
            "min": min(got), "max": max(got)}


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per workload: median and spread of each figure, totals of each count."""
    out: dict[str, Any] = {}
    for name in dict.fromkeys(r["workload"] for r in runs):
        mine = [r for r in runs if r["workload"] == name]
        out[name] = {**{k: _stats([r[k] for r in mine]) for k in FIGURES},
                     **{k: sum(int(r[k] or 0) for r in mine) for k in COUNTS},
                     "runs": len(mine), "conserved": all(r["requests"]["conserved"]
                                                         for r in mine)}
    return out


def _pct(x: Any) -> str:
    return "-" if x is None else f"{x * 100:+.1f}%"


def table(res: dict[str, Any]) -> str:
    """The markdown table of a results document."""
    rows = ["| workload | runs | gain p50 (median, spread) | gain thr. | last-window gain p50 | "
            "pred. error before -> after recal. | first -> last window error | promoted | "
            "kept by guardrail | kept (not predicted better) | rolled back |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, a in res["aggregate"].items():
        g = a["gain_latency_p50"]
        rows.append(
            f"| {name} | {a['runs']} | {_pct(g['median'])} ({_pct(g['spread'])}) | "
            f"{_pct(a['gain_throughput']['median'])} | "
            f"{_pct(a['gain_latency_p50_last']['median'])} | "
            f"{_pct(a['prediction_error_before']['median'])} -> "
            f"{_pct(a['prediction_error_after']['median'])} | "
            f"{_pct(a['prediction_error_first_window']['median'])} -> "
            f"{_pct(a['prediction_error_last_window']['median'])} | {a['promotions']} | "
            f"{a['guardrail_refusals']} | {a['keeps'] - a['guardrail_refusals']} | "
            f"{a['rollbacks']} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", default="failing,seq,stable")
    ap.add_argument("--seeds", default="0,1,2", help="seeds of the drifting workloads")
    ap.add_argument("--stable-seeds", default="0", help="seeds of the stable comparator")
    ap.add_argument("--budget", type=float, default=300.0)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/loop.json"))
    ap.add_argument("--keep-loop", type=Path, help="Write each run's LOOP.json here")
    ap.add_argument("--table", type=Path, help="Print the markdown table of a results file")
    args = ap.parse_args()
    if args.table is not None:
        print(table(json.loads(args.table.read_text())))
        return
    from placewise.hardware.probe import load_local
    from placewise.runtime.telemetry import collect_tags

    machine = load_local()
    runs = []
    started = dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()
    load0 = os.getloadavg()[0]
    for name in args.workloads.split(","):
        seeds = args.stable_seeds if name == "stable" else args.seeds
        for seed in (int(x) for x in seeds.split(",")):
            with tempfile.TemporaryDirectory(prefix=f"loop-{name}-") as work:
                _log(f"{name} seed {seed}")
                runs.append(run_one(name, seed, machine, Path(work), args))
    tags = collect_tags()
    res = {"benchmark": "loop", "issue": 16, "started": started,
           "finished": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
           "machine": {"name": machine.name, "cpu_model": tags["cpu_model"],
                       "logical_cpus": tags["logical_cpus"], "host": platform.node(),
                       "load_average_1m_start": load0,
                       "load_average_1m_end": os.getloadavg()[0]},
           "versions": {k: tags[k] for k in ("placewise", "onnxruntime", "torch", "python")},
           "command": " ".join(["benchmarks/loop.py", *sys.argv[1:]]),
           "trace": TRACE, "workloads": {k: {"model": m, "trace": kw, "envelope": e}
                                          for k, (m, kw, e) in WORKLOADS.items()},
           "runs": runs, "aggregate": aggregate(runs)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1) + "\n")
    print(table(res))


if __name__ == "__main__":
    main()
