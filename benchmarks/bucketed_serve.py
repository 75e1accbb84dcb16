"""Bucketed serving on this machine: one drifting trace served by a plan set against a
single plan for the largest shape, for real (``placewise.adapt.serving``).

For each case:

1. a seeded drifting trace (``adapt.trace.drifting_trace``: Poisson arrivals at
   ``--rate``, ``--requests`` requests in 4 phases whose shape mix moves from mostly the
   smallest shape, 70 %, to mostly the largest);
2. a plan set over the envelope with the trace as its mix (``build_plan_set``, buckets
   chosen by the planner), and the single plan: the same planning core at the envelope's
   largest shape only (every request padded up to it);
3. both opened once (``open_service``: executors started, warmed and kept resident), then
   the whole trace served ``--repeats`` times by each, alternating which goes first;
4. per repeat and arm: latency p50/p99 overall and per group of requests (the plan set's
   bucket each request falls in; for the single plan the same requests), padding waste
   (padded share of the elements run, and the executor seconds attributed to it).

The figures are the median over repeats, with the spread (min..max).

    flock /tmp/placewise-bench.lock .venv/bin/python benchmarks/bucketed_serve.py
    # writes benchmarks/results/bucketed_serve.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from placewise.adapt.planset import build_plan_set, load_mix  # noqa: E402
from placewise.adapt.serving import ServedBlock, open_service  # noqa: E402
from placewise.adapt.trace import drifting_trace, save_shape_trace  # noqa: E402
from placewise.hardware.probe import cpu_model, load_local  # noqa: E402
from placewise.io import atomic_write_json  # noqa: E402

CASES: dict[str, dict[str, Any]] = {
    "mlp-batch": {"model": "zoo:mlp?layers=4&hidden=1024", "axis": "batch",
                  "values": (1, 2, 4, 8, 16), "fixed": None},
    "bert-seq": {"model": "zoo:bert?layers=2&hidden=128&heads=4&vocab=1000", "axis": "seq",
                 "values": (16, 32, 64, 128), "fixed": {"batch": 1}},
}


def _q(x: np.ndarray, q: float) -> float | None:
    x = x[np.isfinite(x)]
    return float(np.quantile(x, q)) if len(x) else None


def _figures(block: ServedBlock, groups: np.ndarray, names: Sequence[str]) -> dict[str, Any]:
    lat = np.asarray(block.latency_s, dtype=float)
    return {
        "p50_s": _q(lat, 0.5), "p99_s": _q(lat, 0.99),
        "mean_s": float(np.nanmean(lat)), "completed": int(np.isfinite(lat).sum()),
        "conserved": block.result.conserved(),
        "padded_fraction": block.padding.fraction, "padding_time_s": block.padding.time_s,
        "busy_s": block.padding.busy_s, "padded_rows": block.padding.padded_rows,
        "groups": {n: {"requests": int((groups == k).sum()),
                       "p50_s": _q(lat[groups == k], 0.5), "p99_s": _q(lat[groups == k], 0.99)}
                   for k, n in enumerate(names)},
        "buckets": [{"name": b.name, "upper": b.upper, "arrived": b.arrived,
                     "p50_s": b.p50_s, "p99_s": b.p99_s,
                     "padded_fraction": b.padding.fraction,
                     "padding_time_s": b.padding.time_s} for b in block.buckets]}


def _stat(values: Sequence[float | None]) -> dict[str, Any]:
    v = [x for x in values if x is not None]
    if not v:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(v), "min": min(v), "max": max(v), "n": len(v)}


def _summary(runs: list[dict[str, Any]], names: Sequence[str]) -> dict[str, Any]:
    keys = ("p50_s", "p99_s", "mean_s", "padded_fraction", "padding_time_s", "busy_s")
    return {**{k: _stat([r[k] for r in runs]) for k in keys},
            "groups": {n: {k: _stat([r["groups"][n][k] for r in runs])
                           for k in ("p50_s", "p99_s")}
                       | {"requests": runs[0]["groups"][n]["requests"]} for n in names}}


def run_case(name: str, case: dict[str, Any], *, requests: int, rate: float, repeats: int,
             seed: int, time_limit_s: float) -> dict[str, Any]:
    machine = load_local()
    trace = drifting_trace(case["axis"], requests=requests, rate_rps=rate, phases=4,
                           values=case["values"], majority=0.7, fixed=case["fixed"],
                           seed=seed)
    env: dict[str, list[int]] = {case["axis"]: list(case["values"])}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        trace_file = Path(tmp) / "shapes.jsonl"
        save_shape_trace(trace, trace_file)
        ps = build_plan_set(case["model"], machine, env, load_mix(trace_file),
                            time_limit_s=time_limit_s, seed=seed)
    largest = {case["axis"]: [max(case["values"])]}
    single_set = build_plan_set(case["model"], machine, largest, time_limit_s=time_limit_s,
                                seed=seed)
    plan_s = time.perf_counter() - t0
    names = [b.name for b in ps.buckets]
    groups = np.array([names.index(ps.bucket_for(s).name) for s in trace.shapes])
    out: dict[str, list[dict[str, Any]]] = {"plan_set": [], "single": []}
    t1 = time.perf_counter()
    with open_service(ps, machine=machine, seed=seed) as svc_set, \
            open_service(single_set, machine=machine, seed=seed) as svc_one:
        start_s = time.perf_counter() - t1
        arms = {"plan_set": svc_set, "single": svc_one}
        for r in range(repeats):
            order = ["plan_set", "single"] if r % 2 == 0 else ["single", "plan_set"]
            for arm in order:
                block = arms[arm].serve(trace, limit_s=120.0)
                out[arm].append(_figures(block, groups, names))
                print(f"{name} repeat {r + 1}/{repeats} {arm}: p50 "
                      f"{out[arm][-1]['p50_s'] * 1e3:.3f} ms, p99 "
                      f"{out[arm][-1]['p99_s'] * 1e3:.3f} ms, padded "
                      f"{out[arm][-1]['padded_fraction']:.1%}", file=sys.stderr)
    return {
        "model": case["model"], "axis": case["axis"], "envelope": env,
        "trace": {"generator": "drifting_trace", "requests": requests, "rate_rps": rate,
                  "phases": 4, "values": list(case["values"]), "majority": 0.7,
                  "fixed": case["fixed"], "seed": seed, "shapes": trace.shape_counts()},
        "plan_set": {"buckets": [{"name": b.name, "lower": b.lower, "upper": b.upper,
                                  "plan_index": b.plan_index} for b in ps.buckets],
                     "fingerprint": ps.fingerprint(), "choice": ps.choice.get("why")},
        "single_plan": {"upper": {case["axis"]: max(case["values"])}},
        "planning_s": plan_s, "start_s": start_s,
        "summary": {arm: _summary(runs, names) for arm, runs in out.items()},
        "runs": out}


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--rate", type=float, default=150.0)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-limit", type=float, default=2.0)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/bucketed_serve.json"))
    args = ap.parse_args(argv)
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    result: dict[str, Any] = {
        "machine": {"cpu_model": cpu_model(), "logical_cpus": os.cpu_count(),
                    "python": platform.python_version(), "load_average_1m_at_start": load},
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": "flock /tmp/placewise-bench.lock .venv/bin/python benchmarks/"
                   "bucketed_serve.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "cases": {}}
    for name in args.cases.split(","):
        result["cases"][name] = run_case(name, CASES[name], requests=args.requests,
                                         rate=args.rate, repeats=args.repeats, seed=args.seed,
                                         time_limit_s=args.time_limit)
    result["load_average_1m_at_end"] = os.getloadavg()[0]
    atomic_write_json(args.out, result)
    for name, c in result["cases"].items():
        for arm, s in c["summary"].items():
            print(f"{name} {arm}: p50 {s['p50_s']['median'] * 1e3:.3f} ms "
                  f"p99 {s['p99_s']['median'] * 1e3:.3f} ms padded "
                  f"{s['padded_fraction']['median']:.1%} padding "
                  f"{s['padding_time_s']['median'] * 1e3:.1f} ms of "
                  f"{s['busy_s']['median'] * 1e3:.1f} ms")
    print(json.dumps({"wrote": args.out}))


if __name__ == "__main__":
    main()
