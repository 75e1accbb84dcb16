"""A real decoder on this machine: prefill and per-token decode latency, measured against
placewise's predictions (``placewise.llm.validate``).

    .venv/bin/python benchmarks/llm_local.py [--device cpu1] [--repeats 3]

The decoder is ``llm.real.BENCH_CONFIG`` (a Llama of 17 M parameters, seeded weights,
exported once to the cache folder). Every cell of batch {1, 2, 4, 8} x context {128, 256,
512, 1024, 2048} prefills ``batch`` prompts of ``context`` tokens and decodes 8 tokens past
them in onnxruntime on the device's cores (pinned), the cache kept bound between steps.
Predictions: the decoder file scheduled by the evaluator with the roofline of the probed
machine (``graph``), and the step model fitted to the four corner cells (``fit``), read at
the 16 cells it did not see. Writes ``benchmarks/results/llm_local.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from placewise.cost.load import load_cost_model
from placewise.hardware.probe import load_local
from placewise.llm.real import BENCH_CONFIG, export_decoder
from placewise.llm.validate import validate_local
from placewise.records import to_json

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "placewise-bench"


def bench_decoder() -> Path:
    """The benchmark decoder (``BENCH_CONFIG``), exported once into the cache folder."""
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / "llm-bench-decoder.onnx"
    if not path.is_file():
        export_decoder(BENCH_CONFIG, path)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", default="cpu1")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batches", default="1,2,4,8")
    ap.add_argument("--contexts", default="128,256,512,1024,2048")
    ap.add_argument("--out", default="benchmarks/results/llm_local.json")
    args = ap.parse_args()
    path = bench_decoder()
    machine = load_local()
    dev = machine.device(args.device)
    if dev.cores:
        os.sched_setaffinity(0, set(dev.cores))
    t0 = time.perf_counter()
    check = validate_local(path, machine, load_cost_model(machine, None), device=args.device,
                           batches=[int(b) for b in args.batches.split(",")],
                           contexts=[int(c) for c in args.contexts.split(",")],
                           new_tokens=8, repeats=args.repeats, warmup=1,
                           threads=max(1, len(dev.cores or [1])))
    took = time.perf_counter() - t0
    print("| batch | context | prefill | graph | fit | decode/token | graph | fit | spread |")
    print("|---|---|---|---|---|---|---|---|---|")
    for c in check.cells:
        mark = " (fitted)" if c.fitted_here else ""
        print(f"| {c.batch} | {c.context}{mark} | {c.prefill_s * 1e3:.1f} ms | "
              f"{c.graph_prefill_s * 1e3:.1f} | {c.fit_prefill_s * 1e3:.1f} | "
              f"{c.decode_s * 1e3:.2f} ms | {c.graph_decode_s * 1e3:.2f} | "
              f"{c.fit_decode_s * 1e3:.2f} | {c.decode_spread:.2f} |")
    summary = {}
    for phase in ("prefill", "decode"):
        for which in ("graph", "fit"):
            e = check.errors(phase, which)
            summary[f"{phase}_{which}"] = {
                "median_abs_error": statistics.median(abs(x) for x in e),
                "max_abs_error": max(abs(x) for x in e), "cells": len(e)}
            print(f"{phase} by {which}: median |error| {summary[f'{phase}_{which}']['median_abs_error']:.1%}"
                  f", max {summary[f'{phase}_{which}']['max_abs_error']:.1%} over {len(e)} cells")
    out = {"date": time.strftime("%Y-%m-%d"), "machine": platform.node(),
           "cpu": machine.tags.get("cpu_model", ""), "seconds": took,
           "command": "python benchmarks/llm_local.py " + " ".join(sys.argv[1:]),
           "summary": summary, "check": to_json(check)}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
