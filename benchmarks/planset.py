"""Plan sets for two zoo models on this machine (``--hw local``): the buckets chosen, the
expected cost against one plan for all shapes and one plan per grid point, the planning
time, and the export's bytes with the weights shared against without.

For each case: ``build_plan_set`` (every grid point planned through ``placewise.planning``
under ``--time-limit`` seconds each) ``--repeats`` times (the planning time's median and
spread; the choice must be the same every time, else the script says so), then
``export_plan_set`` once into a temporary folder (bytes written, distinct inodes, against
the sum of each bucket's own export).

Cases:

- ``mlp``: ``zoo:mlp`` (3 layers, hidden 256), ``batch=1,2,4,8,16,32``, a mix mostly at
  batch 1 (70 %), some 4 (20 %), rare 32 (10 %);
- ``bert``: ``zoo:bert`` (2 layers, hidden 128), ``batch=1,2,4`` x ``seq=32..256:pow2``, a
  mix of short sequences mostly at batch 1 with a tail of long ones.

    flock /tmp/placewise-bench.lock .venv/bin/python benchmarks/planset.py
    # writes benchmarks/results/planset.json

The expected costs are the planner's predictions; ``--requests N`` (default 40) also runs
every bucket plan for real (``validate_plan``: N isolated requests, median) and weighs the
measured medians by the mix, against the plan at the envelope's largest shape serving
everything.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from placewise.adapt.planset import Mix, build_plan_set, save_plan_set  # noqa: E402
from placewise.adapt.planset.export import export_plan_set  # noqa: E402
from placewise.hardware.probe import load_local  # noqa: E402

CASES: dict[str, dict[str, Any]] = {
    "mlp": {"model": "zoo:mlp", "envelope": ["batch=1,2,4,8,16,32"],
            "mix": {(("batch", 1),): 70.0, (("batch", 4),): 20.0, (("batch", 32),): 10.0}},
    "bert": {"model": "zoo:bert", "envelope": ["batch=1,2,4", "seq=32..256:pow2"],
             "mix": {(("batch", 1), ("seq", 32)): 50.0, (("batch", 1), ("seq", 64)): 20.0,
                     (("batch", 2), ("seq", 64)): 10.0, (("batch", 1), ("seq", 256)): 10.0,
                     (("batch", 4), ("seq", 256)): 10.0}},
}


def _cpu() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    except OSError:
        return platform.processor()
    return next((ln.split(":", 1)[1].strip() for ln in out.splitlines()
                 if ln.startswith("Model name")), platform.processor())


def _costs(rec: dict[str, Any]) -> dict[str, Any]:
    keys = ("buckets", "edges", "expected_latency_s", "compile_term_s", "memory_term_s",
            "total_cost_s", "resident_bytes")
    return {k: rec[k] for k in keys}


def _measure(ps: Any, machine: Any, requests: int) -> dict[str, Any]:
    """Each bucket plan run for real (``validate_plan``: isolated requests, median), and
    the expected latency over the mix from those medians, against the top bucket's plan
    (the plan at the envelope's largest shape: one plan for all) serving everything."""
    from placewise.validate import validate_plan

    rows = []
    for b in ps.buckets:
        rep = validate_plan(ps.plan_of(b), requests=requests, machine=machine,
                            baseline=False, stream_s=0.2)
        rows.append({"bucket": b.name, "probability": b.probability,
                     "predicted_s": b.predicted_latency_s, "measured_p50_s": rep.latency.p50_s,
                     "measured_p90_s": rep.latency.p90_s, "n": rep.latency.n})
    top = next(r for r, b in zip(rows, ps.buckets, strict=True)
               if all(b.upper[a] == ps.envelope[a][-1] for a in ps.axes))
    return {"requests": requests, "buckets": rows,
            "expected_latency_s": sum(r["probability"] * r["measured_p50_s"] for r in rows),
            "one_plan_for_all_s": top["measured_p50_s"],
            "predicted_expected_latency_s": sum(r["probability"] * r["predicted_s"]
                                                for r in rows)}


def run_case(name: str, case: dict[str, Any], machine: Any, *, time_limit_s: float,
             repeats: int, requests: int) -> dict[str, Any]:
    mix = Mix.from_weights(case["mix"], kind="distribution", source=f"benchmarks:{name}")
    times: list[float] = []
    choices: list[str] = []
    ps = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        ps = build_plan_set(case["model"], machine, case["envelope"], mix,
                            time_limit_s=time_limit_s)
        times.append(time.perf_counter() - t0)
        choices.append(json.dumps(ps.choice["edges"], sort_keys=True))
    assert ps is not None
    with tempfile.TemporaryDirectory() as tmp:
        save_plan_set(ps, Path(tmp) / "ps.json")
        file_bytes = (Path(tmp) / "ps.json").stat().st_size
        t0 = time.perf_counter()
        exp = export_plan_set(ps, Path(tmp) / "export", machine=machine)
        export_s = time.perf_counter() - t0
    measured = _measure(ps, machine, requests) if requests else None
    ch = ps.choice
    return {
        "measured": measured,
        "model": case["model"], "envelope": ps.envelope, "mix": ps.mix.to_json()["items"],
        "grid_points": len(ps.grid), "time_limit_s_per_point": time_limit_s,
        "buckets": [{"name": b.name, "lower": b.lower, "upper": b.upper,
                     "plan_index": b.plan_index, "predicted_latency_s": b.predicted_latency_s,
                     "probability": b.probability, "expected_padding_s": b.expected_padding_s,
                     "devices": ps.plan_of(b).devices_used()} for b in ps.buckets],
        "plan_entries": len(ps.plans),
        "chosen": _costs(ch["chosen"]), "one_plan_for_all": _costs(ch["one_bucket"]),
        "one_plan_per_grid_point": _costs(ch["per_grid_point"]), "why": ch["why"],
        "choice_stable_over_repeats": len(set(choices)) == 1,
        "planning_s": {"first": times[0], "median": statistics.median(times),
                       "min": min(times), "max": max(times), "runs": times,
                       "note": "the first run loads and exports each grid point's model "
                               "(torch.export); later runs find it cached in the process"},
        "residency": {k: ps.residency[k] for k in ("weights_bytes",
                                                   "weights_without_sharing_bytes",
                                                   "resident_bytes", "fits")},
        "planset_file_bytes": file_bytes,
        "export": {"bytes_written": exp["bytes_written"],
                   "bytes_without_sharing": exp["bytes_without_sharing"],
                   "shared_bytes": exp["shared_bytes"], "initializers": exp["initializers"],
                   "references": exp["references"], "linked": exp["linked"],
                   "export_s": export_s,
                   "export_s_per_bucket": export_s / len(ps.buckets)},
        "costs": ch["costs"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--time-limit", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cases", nargs="*", default=list(CASES))
    ap.add_argument("--requests", type=int, default=40,
                    help="isolated requests per bucket plan run for real (0: none)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/planset.json")
    args = ap.parse_args()
    machine = load_local()
    results = {name: run_case(name, CASES[name], machine, time_limit_s=args.time_limit,
                              repeats=args.repeats, requests=args.requests)
               for name in args.cases}
    doc = {"benchmark": "planset", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "cpu": _cpu(), "machine": machine.name,
           "machine_fingerprint": machine.fingerprint(), "cases": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    for name, r in results.items():
        c, one, every = r["chosen"], r["one_plan_for_all"], r["one_plan_per_grid_point"]
        print(f"{name}: {c['buckets']} buckets {c['edges']} ({r['plan_entries']} plan entries)"
              f"; expected cost {c['total_cost_s'] * 1e6:.2f} us vs one plan "
              f"{one['total_cost_s'] * 1e6:.2f} us vs per point {every['total_cost_s'] * 1e6:.2f}"
              f" us; planning {r['planning_s']['median']:.2f} s (median of {args.repeats}); "
              f"export {r['export']['bytes_written']} B vs {r['export']['bytes_without_sharing']}"
              f" B without sharing")
        if r["measured"]:
            m = r["measured"]
            print(f"  measured: expected {m['expected_latency_s'] * 1e6:.1f} us over the mix "
                  f"(predicted {m['predicted_expected_latency_s'] * 1e6:.1f}) vs one plan "
                  f"{m['one_plan_for_all_s'] * 1e6:.1f} us")


if __name__ == "__main__":
    main()
