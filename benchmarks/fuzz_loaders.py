"""Fuzzing the input boundary: >= 10,000 mutated inputs per loader, every outcome counted.

Each loader of ``tests/fuzz_mutators.py`` (``onnx``, ``onnx_control``: If/Loop/Scan models
and ``--value``, ``onnx_quant``: onnxruntime-quantized models in dynamic, QDQ and QOperator
form, ``machine``, ``taskgraph``, ``plan``, ``calibration``) gets ``--cases`` seeded cases: seed ``i`` mutates the loader's valid seed
document with ``random.Random(i)`` (structure-aware edits, extreme numbers, deep nesting,
text damage; see that module), writes the file and reads it the way the CLI does, a step
further too (the machine is planned on, the plan explained, traced and checked, ...).
Outcomes: ``ok`` (loaded; for the machine also a plan that is infeasible), ``input_error``
(an ``InputError`` or other deliberate placewise error: exit 2 at the CLI) and
``internal_error`` (any other exception, a case past ``--case-timeout`` seconds, or a
crash of the worker process: a bug). The same seeds give the same cases.

Cases run in worker processes (``--chunk`` seeds each, an address-space limit of
``--memory-gib``), so that a hard crash (a segfault in a native library) is counted and the
run goes on with the next seed.

Run: ``nice -n 10 .venv/bin/python benchmarks/fuzz_loaders.py --cases 10000 --out
benchmarks/results/fuzz_loaders.json``. Prints one table row per loader and writes a JSON
object with the counts, seconds per loader, machine tags and the first internal errors
(seed, type, message, traceback tail) to reproduce with ``--reproduce LOADER SEED``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

OUTCOMES = ("ok", "input_error", "internal_error")


def _worker(loader_name: str, start: int, stop: int, log: Path, timeout_s: int,
            memory_gib: float) -> None:
    """Run seeds [start, stop) and append one JSON line per case to ``log``."""
    import random

    from tests.fuzz_mutators import LOADERS, run_case

    if memory_gib > 0:
        limit = int(memory_gib * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    loader = LOADERS[loader_name]
    folder = Path(tempfile.mkdtemp(prefix=f"fuzz-{loader_name}-"))
    with open(log, "a", encoding="utf-8") as out:
        for seed in range(start, stop):
            out.write(json.dumps({"start": seed}) + "\n")
            out.flush()
            try:
                data = loader.make(random.Random(seed))
            except Exception as exc:  # a mutator bug, not a placewise one: say so
                out.write(json.dumps({"seed": seed, "outcome": "mutator_error",
                                      "error": f"{type(exc).__name__}: {exc}"}) + "\n")
                continue
            t0 = time.perf_counter()
            outcome, exc = run_case(loader, data, folder, time_limit_s=timeout_s)
            rec: dict[str, Any] = {"seed": seed, "outcome": outcome,
                                   "s": round(time.perf_counter() - t0, 6)}
            if outcome == "internal_error" and exc is not None:
                rec["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                rec["traceback"] = "".join(traceback.format_exception(exc)[-4:])[-1500:]
            out.write(json.dumps(rec) + "\n")
            out.flush()


def _run_loader(name: str, cases: int, first_seed: int, chunk: int, timeout_s: int,
                memory_gib: float) -> dict[str, Any]:
    counts = dict.fromkeys(OUTCOMES, 0)
    errors: list[dict[str, Any]] = []
    mutator_errors = 0
    t0 = time.perf_counter()
    seed, stop = first_seed, first_seed + cases
    with tempfile.TemporaryDirectory(prefix="fuzz-log-") as tmp:
        while seed < stop:
            log = Path(tmp) / f"{name}-{seed}.jsonl"
            end = min(stop, seed + chunk)
            proc = subprocess.run(
                [sys.executable, __file__, "--worker", name, str(seed), str(end), str(log),
                 str(timeout_s), str(memory_gib)], cwd=ROOT, capture_output=True, text=True)
            started: int | None = None
            done = seed
            for line in log.read_text(encoding="utf-8").splitlines() if log.exists() else ():
                rec = json.loads(line)
                if "start" in rec:
                    started = rec["start"]
                    continue
                started = None
                done = rec["seed"] + 1
                if rec["outcome"] == "mutator_error":
                    mutator_errors += 1
                    continue
                counts[rec["outcome"]] += 1
                if rec["outcome"] == "internal_error" and len(errors) < 20:
                    errors.append({k: rec[k] for k in ("seed", "error", "traceback")
                                   if k in rec})
            if proc.returncode != 0 or done < end:
                crashed = started if started is not None else done
                counts["internal_error"] += 1
                if len(errors) < 20:
                    errors.append({"seed": crashed,
                                   "error": f"worker died (exit {proc.returncode})",
                                   "traceback": proc.stderr[-1500:]})
                seed = crashed + 1
            else:
                seed = end
            print(f"  {name}: {seed - first_seed}/{cases} cases, {counts}", file=sys.stderr,
                  flush=True)
    return {"cases": sum(counts.values()), **counts, "mutator_errors": mutator_errors,
            "seconds": round(time.perf_counter() - t0, 1), "internal_errors": errors}


def _reproduce(name: str, seed: int) -> None:
    import random

    from tests.fuzz_mutators import LOADERS, run_case

    loader = LOADERS[name]
    folder = Path(tempfile.mkdtemp(prefix="fuzz-repro-"))
    data = loader.make(random.Random(seed))
    outcome, exc = run_case(loader, data, folder)
    print(f"{name} seed {seed}: {outcome}; file {folder / ('fuzz' + loader.suffix)}")
    if exc is not None:
        traceback.print_exception(exc)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=10_000, help="cases per loader")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--loaders", nargs="*", default=None,
                    help="onnx onnx_control onnx_quant machine taskgraph plan calibration "
                         "(default: all)")
    ap.add_argument("--chunk", type=int, default=2000, help="seeds per worker process")
    ap.add_argument("--case-timeout", type=int, default=60, help="seconds per case")
    ap.add_argument("--memory-gib", type=float, default=8.0,
                    help="address-space limit of a worker (0: none)")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON result here")
    ap.add_argument("--worker", nargs=6, help=argparse.SUPPRESS)
    ap.add_argument("--reproduce", nargs=2, metavar=("LOADER", "SEED"))
    args = ap.parse_args(argv)
    if args.worker:
        name, start, stop, log, timeout_s, mem = args.worker
        _worker(name, int(start), int(stop), Path(log), int(timeout_s), float(mem))
        return
    if args.reproduce:
        _reproduce(args.reproduce[0], int(args.reproduce[1]))
        return

    from tests.fuzz_mutators import LOADERS

    names = args.loaders or list(LOADERS)
    unknown = [n for n in names if n not in LOADERS]
    if unknown:
        ap.error(f"unknown loader(s) {unknown}; known: {', '.join(LOADERS)}")
    started = dt.datetime.now(dt.UTC)
    results = {}
    for name in names:
        results[name] = _run_loader(name, args.cases, args.first_seed, args.chunk,
                                    args.case_timeout, args.memory_gib)
    total = {k: sum(r[k] for r in results.values()) for k in ("cases", *OUTCOMES)}
    import placewise

    doc = {
        "benchmark": "fuzz_loaders",
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join([Path(sys.executable).name, "benchmarks/fuzz_loaders.py",
                             *(argv if argv is not None else sys.argv[1:])]),
        "placewise": placewise.__version__,
        "machine": {"python": platform.python_version(), "platform": platform.platform(),
                    "cpus": os.cpu_count()},
        "cases_per_loader": args.cases, "first_seed": args.first_seed,
        "loaders": results, "total": total,
    }
    print("| loader | cases | ok | input_error | internal_error | seconds |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, r in results.items():
        print(f"| {name} | {r['cases']} | {r['ok']} | {r['input_error']} | "
              f"{r['internal_error']} | {r['seconds']} |")
    print(f"| total | {total['cases']} | {total['ok']} | {total['input_error']} | "
          f"{total['internal_error']} | |")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    sys.exit(1 if total["internal_error"] else 0)


if __name__ == "__main__":
    main()
