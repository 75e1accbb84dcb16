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
   measurements, not the ones CAL1 was made from).

Per term kind (compute, launch, transfer, contention) the error of a window is
(measured - predicted) / predicted of that key's window median; a run's figure is the
median |error| over its keys and windows, and the share of windows inside the predicted
interval. Before = RUN0 (predicted by CAL0), after = RUN1 (predicted by CAL1). The
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


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="200", TERM="dumb")
    r = subprocess.run([sys.executable, "-m", "placewise.cli", *args], capture_output=True,
                       text=True, env=env, timeout=1800)
    if r.returncode != 0:
        raise SystemExit(f"placewise {' '.join(args)} failed ({r.returncode}): {r.stderr}")
    return r


def _term_errors(run_file: Path) -> dict[str, Any]:
    from placewise.adapt.telemetry import load_telemetry_run

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


def _one(model: str, d: Path, *, k: int, requests: int, window: int, profile: bool
         ) -> dict[str, Any]:
    f = {n: d / f"{n}.json" for n in ("cal0", "plan0", "run0", "val0", "cal1", "plan1",
                                      "run1", "val1")}
    t0 = time.perf_counter()
    if profile:
        _cli("profile", model, "--hw", "local", "--out", str(f["cal0"]))
    else:
        _cli("recalibrate", "--init", "--hw", "local", "--out", str(f["cal0"]))
    val = {}
    for i in (0, 1):
        _cli("plan", model, "--hw", "local", "--calibration", str(f[f"cal{i}"]), "--out",
             str(f[f"plan{i}"]))
        r = _cli("validate", str(f[f"plan{i}"]), "--requests", str(requests),
                 "--no-baseline", "--telemetry-out", str(f[f"run{i}"]), "--window-requests",
                 str(window), "--json")
        val[i] = json.loads(r.stdout)
        if i == 0:
            rec = json.loads(_cli("recalibrate", "--calibration", str(f["cal0"]),
                                  "--telemetry", str(f["run0"]), "--k", str(k), "--out",
                                  str(f["cal1"]), "--json").stdout)
    return {
        "model": model, "k": k, "seconds": time.perf_counter() - t0,
        "before": _term_errors(f["run0"]), "after": _term_errors(f["run1"]),
        "latency_error_before": val[0]["error"]["latency"],
        "latency_error_after": val[1]["error"]["latency"],
        "predicted_latency_s": [val[0]["predicted"]["latency_s"],
                                val[1]["predicted"]["latency_s"]],
        "measured_latency_p50_s": [val[0]["measured"]["latency"]["p50_s"],
                                   val[1]["measured"]["latency"]["p50_s"]],
        "devices": [val[0]["plan"]["devices"], val[1]["plan"]["devices"]],
        "changed": [{"key": c["key"], "factor": c["factor_after"], "reason": c["reason"]}
                    for c in rec["keys"] if c["changed"]],
        "unchanged": [{"key": c["key"], "reason": c["reason"]}
                      for c in rec["keys"] if not c["changed"]],
        "load_average_1m": [val[0]["tags"].get("load_average_1m"),
                            val[1]["tags"].get("load_average_1m")],
        "stable_tags": val[0]["stable_tags"]}


def _summary(trials: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for when in ("before", "after"):
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
                f"{kind} {t['before'][kind]['median_abs_error']:.0%} -> "
                f"{t['after'][kind]['median_abs_error']:.0%}" for kind in KINDS
                if kind in t["before"] and kind in t["after"]) +
                f"; latency {t['latency_error_before']:+.0%} -> {t['latency_error_after']:+.0%}"
                f"; {len(t['changed'])} keys changed ({t['seconds']:.0f} s)", flush=True)
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
