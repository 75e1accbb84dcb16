"""``plan --precision`` against ``--time-limit`` (issue 24): the quality evidence counts
inside the limit. For a ResNet-sized CNN (``zoo:resnet?blocks=8&width=64&image=224``: 69
ops, 13.8 GFLOP a request, exported to ONNX once) on ``jetson-agx-orin``, each policy's
``plan`` command runs ``--repeats`` times as its own process; recorded per run: the wall
time of the process against the limit, the ``timing`` record (load, evidence, search,
total), the evidence's work budget in emulated runs, what it probed and what it lowered.

    .venv/bin/python benchmarks/precision_time_limit.py
    .venv/bin/python benchmarks/precision_time_limit.py --model 'zoo:mlp?layers=3&hidden=512&batch=32' --limit 20 --repeats 1

Writes ``benchmarks/results/precision_time_limit.json``. Run it alone: it times commands.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RESNET = "zoo:resnet?blocks=8&width=64&image=224"


def _onnx(model: str, folder: Path) -> str:
    """A zoo model exported to ONNX (loading a file is what users do; the zoo builds a
    torch model each time)."""
    if not model.startswith("zoo:"):
        return model
    out = folder / "model.onnx"
    subprocess.run([sys.executable, "-m", "placewise.cli", "zoo", "export", model[4:],
                    "--format", "onnx", "--out", str(out)], check=True, capture_output=True)
    return str(out)


def _run(model: str, policy: str, limit_s: float, folder: Path) -> dict[str, Any]:
    out = folder / f"plan-{policy}.json"
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "placewise.cli", "plan", model, "--batch",
                           "1", "--hw", "jetson-agx-orin", "--precision", policy,
                           "--time-limit", f"{limit_s:g}", "--out", str(out), "--json"],
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"policy": policy, "limit_s": limit_s, "wall_s": wall, "rc": proc.returncode,
                "stderr": proc.stderr[-500:]}
    timing = json.loads(proc.stdout)["timing"]
    prec = json.loads(out.read_text())["precision"]
    return {"policy": policy, "limit_s": limit_s, "wall_s": round(wall, 2),
            "ratio": round(wall / limit_s, 3), "timing": timing,
            "lowered": len(prec.get("lowered", {})),
            "probed": sum(1 for d in prec.get("decisions", []) if d.get("quality")),
            "candidates": len(prec.get("decisions", [])),
            "evidence_note": (prec.get("notes") or [""])[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=RESNET)
    ap.add_argument("--policy", action="append", default=None)
    ap.add_argument("--limit", type=float, default=120.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"
                                         / "precision_time_limit.json"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model = _onnx(args.model, folder)
        runs = []
        for policy in args.policy or ["int8", "mixed"]:
            for k in range(args.repeats):
                r = _run(model, policy, args.limit, folder)
                runs.append(r)
                print(json.dumps({k: v for k, v in r.items() if k != "timing"}), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({
        "model": args.model, "machine": "jetson-agx-orin", "runs": runs,
        "host": {"cpus": os.cpu_count(), "load_avg": os.getloadavg(),
                 "python": platform.python_version()}}, indent=2) + "\n")


if __name__ == "__main__":
    main()
