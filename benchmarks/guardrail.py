"""How often the promotion guardrail promotes or refuses, for real on this machine.

Three kinds of trial, each one ``placewise.adapt.promote.promote`` call (two resident
services opened, warm-up, quality check, 20 block pairs of generated traffic, by
default as many requests as make each block last about 50 ms), on ``zoo:mlp?layers=4&hidden=256``:

- **worse**: incumbent = the model on one core (``placewise plan --strategy single:cpu0``),
  candidate = a deliberately worse plan, every vertex placed by hand alternately on
  ``cpu0`` and ``cpu1`` (each layer's output crosses between two worker processes). The
  issue asks that it be refused in 20 of 20 trials;
- **better**: the same two the other way round (the candidate is the single-core plan,
  measured in each trial to be far more than 20% faster); it must be promoted in at least
  18 of 20;
- **same**: the single-core plan against a copy of itself: how often a candidate that is
  no better is promoted (the threshold is 5%, so it should be never).

    flock /tmp/placewise-bench.lock .venv/bin/python benchmarks/guardrail.py
    # writes benchmarks/results/guardrail.json; --trials N, --requests N, --blocks N,
    # --rounds N (rounds of fresh instances; default: promote's, 2 for 20 blocks)
    # --rounds 1 --out benchmarks/results/guardrail-one-round.json: one pair of instances

The figures per kind: the decisions, the median improvement and its 95% CI per trial
(the median over trials of each), the p99 ratio, and the wall time per trial.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MODEL = "zoo:mlp?layers=4&hidden=256"
OUT = Path(__file__).parent / "results" / "guardrail.json"


def _pingpong(path: Path, model: str) -> None:
    """The deliberately worse plan: vertices alternately on cpu0 and cpu1, evaluated and
    written by the planning core."""
    from placewise.hardware.probe import load_local
    from placewise.plan import build_plan, save_plan
    from placewise.planning import build_problem
    from placewise.schedule import Placement, evaluate
    from placewise.schedule.placement import Assignment
    from placewise.units import DType

    prob = build_problem(model, load_local())
    devs = ("cpu0", "cpu1")
    pl = Placement.of({n: Assignment(devs[i % 2], DType.FP32)
                       for i, n in enumerate(prob.vertex_names)})
    save_plan(build_plan(prob, evaluate(prob, pl), model_ref=model,
                         strategy="by hand: cpu0,cpu1 alternately"), path)


def _plans(work: Path, model: str) -> dict[str, Path]:
    single = work / "single.json"
    subprocess.run([sys.executable, "-m", "placewise.cli", "plan", model, "--hw", "local",
                    "--strategy", "single:cpu0", "--out", str(single)], check=True,
                   capture_output=True)
    copy = work / "single-copy.json"
    shutil.copyfile(single, copy)
    pingpong = work / "pingpong.json"
    _pingpong(pingpong, model)
    return {"single": single, "copy": copy, "pingpong": pingpong}


def _trial(inc: Path, cand: Path, requests: int | None, blocks: int, rounds: int | None,
           seed: int) -> dict[str, Any]:
    from placewise.adapt.promote import promote

    t0 = time.monotonic()
    rec = promote(inc, cand, requests=requests, blocks=blocks, rounds=rounds, seed=seed)
    s = rec.guardrail.stats
    return {"decision": rec.decision, "reason": rec.reason, "improvement": s.improvement,
            "ci_low": s.ci_low, "ci_high": s.ci_high, "pairs": s.pairs,
            "p50_a_s": rec.incumbent.p50_s, "p50_b_s": rec.candidate.p50_s,
            "p99_ratio": s.p99_ratio, "quality_holds": rec.quality.holds,
            "rounds": rec.traffic["rounds"], "requests": rec.traffic["requests"], "interval_s": rec.traffic.get("interval_s"),
            "load_average_1m": rec.candidate.tags.get("load_average_1m"),
            "trial_s": time.monotonic() - t0}


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def med(key: str) -> float:
        return statistics.median(float(r[key]) for r in rows)

    times = [float(r["trial_s"]) for r in rows]
    return {"trials": len(rows), "promoted": sum(r["decision"] == "promote" for r in rows),
            "kept": sum(r["decision"] == "keep" for r in rows),
            "median_improvement": med("improvement"), "median_ci_low": med("ci_low"),
            "median_ci_high": med("ci_high"),
            "min_improvement": min(float(r["improvement"]) for r in rows),
            "max_improvement": max(float(r["improvement"]) for r in rows),
            "median_p99_ratio": med("p99_ratio"), "median_trial_s": statistics.median(times),
            "min_trial_s": min(times), "max_trial_s": max(times)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--requests", type=int, default=None)
    ap.add_argument("--blocks", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    kinds = {"worse": ("single", "pingpong"), "better": ("pingpong", "single"),
             "same": ("single", "copy")}
    t_all = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="placewise-guardrail-") as tmp:
        plans = _plans(Path(tmp), args.model)
        rows: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
        for i in range(args.trials):  # the kinds interleaved: the machine's load hits each
            for kind, (a, b) in kinds.items():
                r = _trial(plans[a], plans[b], args.requests, args.blocks, args.rounds, seed=i)
                rows[kind].append(r)
                print(f"{kind:>6} trial {i + 1:>2}: {r['decision']:<7} improvement "
                      f"{100 * r['improvement']:7.1f}% CI [{100 * r['ci_low']:7.1f}%, "
                      f"{100 * r['ci_high']:7.1f}%] p99 ratio {r['p99_ratio']:.2f} "
                      f"({r['trial_s']:.1f} s)", flush=True)
    doc = {"benchmark": "guardrail", "model": args.model, "requests": args.requests,
           "blocks": args.blocks, "rounds": args.rounds, "kinds": {k: {"incumbent": a, "candidate": b}
                                            for k, (a, b) in kinds.items()},
           "summary": {k: _summary(v) for k, v in rows.items()}, "trials": rows,
           "machine": {"cpu": platform.processor() or _cpu(), "cores": os.cpu_count(),
                       "python": platform.python_version()},
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "wall_s": time.monotonic() - t_all,
           "command": "flock /tmp/placewise-bench.lock .venv/bin/python benchmarks/guardrail.py"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    for k, s in doc["summary"].items():
        print(f"{k:>6}: promoted {s['promoted']} of {s['trials']}, median improvement "
              f"{100 * s['median_improvement']:.1f}% (CI median [{100 * s['median_ci_low']:.1f}%,"
              f" {100 * s['median_ci_high']:.1f}%]), {s['median_trial_s']:.1f} s per trial")


def _cpu() -> str:
    from placewise.runtime.telemetry import collect_tags

    return collect_tags()["cpu_model"]


if __name__ == "__main__":
    main()
