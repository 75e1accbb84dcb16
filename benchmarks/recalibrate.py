"""Telemetry back into the cost model: prediction error per term before and after one
recalibration, on zoo models on this machine (``local``).

For every model, ``--repeats`` times, the user's own commands:

1. ``placewise recalibrate --init --hw local --out CAL0.json`` (an empty calibration: the
   roofline) - or, with ``--profile``, ``placewise profile MODEL --hw local`` as CAL0;
2. ``placewise plan MODEL --hw local --calibration CAL0.json --out PLAN0.json``;
3. ``placewise validate PLAN0.json --telemetry-out RUN0.json`` (windows per cost key);
4. ``placewise recalibrate --calibration CAL0.json --telemetry RUN0.json --k K --out CAL1.json``;
5. ``placewise plan MODEL --hw local --calibration CAL1.json --out PLAN1.json`` (the replan);
6. ``placewise validate PLAN1.json --telemetry-out RUN1.json`` (a fresh run: held-out
   measurements, not the ones CAL1 was made from);
7. the same for PLAN0's own placement priced under CAL1 (``schedule.evaluate``, the
   evaluator search ranks by): ``validate PLAN0R.json --telemetry-out RUN0R.json``. The
   replan may move work to devices CAL0 was never measured on (its keys there are new);
   this arm measures the model's own improvement on the keys it was corrected on;
8. a second round: ``recalibrate`` CAL1 with RUN1 into CAL2, replan, validate (RUN2): keys
   the replan measured for the first time are corrected now.

Per term kind (compute, launch, transfer, contention) the error of a window is
(measured - predicted) / predicted of that key's window median; a run's figure is the
median |error| over its keys and windows, and the share of windows inside the predicted
interval. Before = RUN0 (predicted by CAL0); after = RUN0R (same placement, predicted by
CAL1) and RUN1 (the replan, predicted by CAL1). The
end-to-end latency error (validate's p50 against the plan) is given beside it. Across
repeats: median and min..max.

    .venv/bin/python benchmarks/recalibrate.py                       # mlp and bert, 3 repeats
    .venv/bin/python benchmarks/recalibrate.py --models 'zoo:mlp' --repeats 1

Writes ``benchmarks/results/recalibrate.json``. Run it under ``flock
/tmp/placewise-bench.lock`` when the machine is shared: the JSON records the load average.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

KINDS = ("compute", "launch", "transfer", "contention")
ARMS = ("before", "same_placement", "replan", "round2")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="200", TERM="dumb")
    r = subprocess.run([sys.executable, "-m", "placewise.cli", *args], capture_output=True,
                       text=True, env=env, timeout=1800)
    if r.returncode != 0:
        raise SystemExit(f"placewise {' '.join(args)} failed ({r.returncode}): {r.stderr}")
    return r


def _term_errors(run_file: Path) -> dict[str, Any]:
    from placewise.runtime.windows import load_telemetry_run

    run = load_telemetry_run(run_file)
    out: dict[str, Any] = {}
    for kind in KINDS:
        ts = [t for w in run.windows for t in w.terms if t.kind == kind and t.predicted_s > 0]
        if not ts:
            continue
        errs = [(t.measured_s - t.predicted_s) / t.predicted_s for t in ts]
        out[kind] = {"median_abs_error": statistics.median(abs(e) for e in errs),
                     "median_error": statistics.median(errs),
                     "inside_interval": sum(1 for t in ts if not t.outside) / len(ts),
                     "keys": len({t.key for t in ts}), "windows": len(run.windows)}
    return out


def _reprice(plan_file: Path, cal_file: Path, out: Path) -> None:
    """``plan_file``'s placement priced under ``cal_file`` (the evaluator), written to
    ``out``."""
    from placewise.cost.load import load_cost_model
    from placewise.hardware.probe import load_local
    from placewise.plan import build_plan, load_plan, save_plan
    from placewise.planning import build_problem
    from placewise.schedule.evaluate import evaluate

    machine = load_local()
    p0 = load_plan(plan_file)
    prob = build_problem(p0.model, machine, cost_model=load_cost_model(machine, cal_file))
    plan = build_plan(prob, evaluate(prob, p0.placement_obj()), model_ref=p0.model,
                      objective=p0.objective.value, strategy=p0.strategy, seed=p0.seed,
                      alternatives=False)
    save_plan(plan, out)


def _validate(plan: Path, run: Path, requests: int, window: int) -> dict[str, Any]:
    r = _cli("validate", str(plan), "--requests", str(requests), "--no-baseline",
             "--telemetry-out", str(run), "--window-requests", str(window), "--json")
    doc: dict[str, Any] = json.loads(r.stdout)
    return doc


def _one(model: str, d: Path, *, k: int, requests: int, window: int, profile: bool
         ) -> dict[str, Any]:
    f = {n: d / f"{n}.json" for n in ("cal0", "plan0", "run0", "cal1", "plan1", "run1",
                                      "plan0r", "run0r", "cal2", "plan2", "run2")}
    t0 = time.perf_counter()
    if profile:
        _cli("profile", model, "--hw", "local", "--out", str(f["cal0"]))
    else:
        _cli("recalibrate", "--init", "--hw", "local", "--out", str(f["cal0"]))
    _cli("plan", model, "--hw", "local", "--calibration", str(f["cal0"]), "--out",
         str(f["plan0"]))
    val = {"before": _validate(f["plan0"], f["run0"], requests, window)}
    rec = json.loads(_cli("recalibrate", "--calibration", str(f["cal0"]), "--telemetry",
                          str(f["run0"]), "--k", str(k), "--out", str(f["cal1"]),
                          "--json").stdout)
    _cli("plan", model, "--hw", "local", "--calibration", str(f["cal1"]), "--out",
         str(f["plan1"]))
    _reprice(f["plan0"], f["cal1"], f["plan0r"])
    val["same_placement"] = _validate(f["plan0r"], f["run0r"], requests, window)
    val["replan"] = _validate(f["plan1"], f["run1"], requests, window)
    rec2 = json.loads(_cli("recalibrate", "--calibration", str(f["cal1"]), "--telemetry",
                           str(f["run1"]), "--k", str(k), "--out", str(f["cal2"]),
                           "--json").stdout)
    _cli("plan", model, "--hw", "local", "--calibration", str(f["cal2"]), "--out",
         str(f["plan2"]))
    val["round2"] = _validate(f["plan2"], f["run2"], requests, window)
    runs = {"before": f["run0"], "same_placement": f["run0r"], "replan": f["run1"],
            "round2": f["run2"]}
    return {
        "model": model, "k": k, "seconds": time.perf_counter() - t0,
        **{arm: _term_errors(runs[arm]) for arm in ARMS},
        **{f"latency_error_{arm}": val[arm]["error"]["latency"] for arm in ARMS},
        "predicted_latency_s": {a: val[a]["predicted"]["latency_s"] for a in ARMS},
        "measured_latency_p50_s": {a: val[a]["measured"]["latency"]["p50_s"] for a in ARMS},
        "devices": {a: val[a]["plan"]["devices"] for a in ARMS},
        "changed": [{"key": c["key"], "factor": c["factor_after"], "added_s": c["added_s"],
                     "reason": c["reason"]} for c in rec["keys"] if c["changed"]],
        "unchanged": [{"key": c["key"], "reason": c["reason"]}
                      for c in rec["keys"] if not c["changed"]],
        "changed_round2": [{"key": c["key"], "factor": c["factor_after"],
                            "added_s": c["added_s"], "reason": c["reason"]}
                           for c in rec2["keys"] if c["changed"]],
        "load_average_1m": {a: val[a]["tags"].get("load_average_1m") for a in ARMS},
        "stable_tags": val["before"]["stable_tags"]}


def _summary(trials: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for when in ARMS:
        for kind in KINDS:
            xs = [t[when][kind]["median_abs_error"] for t in trials if kind in t[when]]
            ins = [t[when][kind]["inside_interval"] for t in trials if kind in t[when]]
            if xs:
                out[f"{kind}_{when}"] = {"median": statistics.median(xs), "min": min(xs),
                                         "max": max(xs), "inside_interval": statistics.median(ins),
                                         "trials": len(xs)}
        lat = [abs(t[f"latency_error_{when}"]) for t in trials
               if t[f"latency_error_{when}"] is not None]
        if lat:
            out[f"latency_{when}"] = {"median": statistics.median(lat), "min": min(lat),
                                      "max": max(lat), "trials": len(lat)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["zoo:mlp", "zoo:bert"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--requests", type=int, default=30)
    ap.add_argument("--window-requests", type=int, default=0,
                    help="requests per window (0: about ten windows)")
    ap.add_argument("--profile", action="store_true",
                    help="start from placewise profile instead of an empty calibration")
    ap.add_argument("--out", default="benchmarks/results/recalibrate.json")
    a = ap.parse_args()
    trials: dict[str, list[dict[str, Any]]] = {}
    for model in a.models:
        for i in range(a.repeats):
            with tempfile.TemporaryDirectory(prefix="pw-recal-") as tmp:
                t = _one(model, Path(tmp), k=a.k, requests=a.requests,
                         window=a.window_requests, profile=a.profile)
            trials.setdefault(model, []).append(t)
            print(f"{model} #{i + 1}: " + ", ".join(
                f"{kind} " + " -> ".join(f"{t[a][kind]['median_abs_error']:.0%}"
                                         if kind in t[a] else "-" for a in ARMS)
                for kind in KINDS if kind in t["before"]) + "; latency " + " -> ".join(
                f"{t[f'latency_error_{a}']:+.0%}" for a in ARMS) +
                f" (before -> same placement -> replan -> round 2); {len(t['changed'])}+"
                f"{len(t['changed_round2'])} keys changed "
                f"({t['seconds']:.0f} s)", flush=True)
    from placewise.hardware.probe import cpu_model

    doc = {"date": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
           "machine": {"cpu_model": cpu_model(), "python": platform.python_version(),
                       "cores": len(os.sched_getaffinity(0))},
           "command": "python benchmarks/recalibrate.py " + " ".join(sys.argv[1:]),
           "start": "placewise profile" if a.profile else "empty calibration (roofline)",
           "k": a.k, "summary": {m: _summary(ts) for m, ts in trials.items()},
           "trials": trials}
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    for m, s in doc["summary"].items():
        print(m)
        for key, v in s.items():
            extra = f", inside interval {v['inside_interval']:.0%}" if "inside_interval" in v \
                else ""
            print(f"  {key:22s} median |error| {v['median']:.1%} "
                  f"({v['min']:.1%}..{v['max']:.1%}, {v['trials']} trials){extra}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
