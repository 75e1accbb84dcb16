"""How fast an on-target onnxruntime profile is imported as a calibration (issue 25:
a 10,000-event profile in <= 5 s).

The profile is real: a third-party model of the corpus (``rapidocr-cls-v2``, paddle2onnx,
566 ONNX nodes of which 308 unnamed; about 230 timed nodes per run after onnxruntime's
optimization) profiled by plain onnxruntime on this machine's CPU (``enable_profiling``,
one thread), with as many runs as it takes to write at least ``--events`` events. Then,
``--repeats`` times each:

- ``read``: ``read_onnxruntime`` (the file through the input boundary, events parsed and
  checked, runs and warm-up, regions and reformats);
- ``import``: ``import_calibration`` on the loaded graph (the model's CPU-optimized graph
  built with onnxruntime to map fused and NCHWc node names, matching, shape and precision
  checks, splitting, keys, the calibration);
- ``command``: the whole ``placewise calibrate import ... --json`` process (interpreter
  start-up, loading the model, probing nothing: a preset machine).

Wall seconds: median and min..max; process CPU seconds beside them (the machine is shared:
CPU time is the steadier figure).

Run: ``.venv/bin/python benchmarks/import_speed.py [--events 10000] [--repeats 5]
[--out results.json]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

SHAPE = {"x": (1, 3, 48, 192)}
HW = "jetson-agx-orin"


def _profile(model: Path, folder: Path, events: int) -> tuple[Path, int, int]:
    """A profile of ``model`` with at least ``events`` events: (file, events, runs)."""
    import numpy as np
    import onnxruntime as ort

    def take(runs: int) -> tuple[Path, int]:
        so = ort.SessionOptions()
        so.enable_profiling = True
        so.profile_file_prefix = str(folder / f"cls{runs}")
        so.intra_op_num_threads = 1
        so.log_severity_level = 3
        sess = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
        x = np.random.default_rng(0).random(SHAPE["x"], dtype=np.float32)
        for _ in range(runs):
            sess.run(None, {"x": x})
        path = Path(sess.end_profiling())
        return path, len(json.loads(path.read_text()))

    path, n = take(2)
    per_run = max((n - 2) / 2, 1.0)
    runs = max(2, int(events / per_run) + 2)
    path, n = take(runs)
    while n < events:
        runs += max(1, int((events - n) / per_run) + 1)
        path, n = take(runs)
    return path, n, runs


def _timed(fn: Any) -> tuple[float, float, Any]:
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - w0, time.process_time() - c0, out


def _summary(xs: list[float]) -> dict[str, float]:
    return {"median_s": statistics.median(xs), "min_s": min(xs), "max_s": max(xs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.corpus import fetch

    from placewise.calibrate.imports.build import import_calibration
    from placewise.calibrate.imports.onnxruntime import read_onnxruntime
    from placewise.graph.onnx_import import read_onnx_as_is
    from placewise.hardware.load import load_machine
    from placewise.planning import load_graph

    model = fetch("rapidocr-cls-v2")
    machine = load_machine(HW)
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="import-speed-") as tmp:
        folder = Path(tmp)
        prof, n_events, runs = _profile(model, folder, args.events)
        size = prof.stat().st_size
        graph = load_graph(str(model), SHAPE)
        proto = read_onnx_as_is(model)
        timings: dict[str, tuple[list[float], list[float]]] = {
            k: ([], []) for k in ("read", "import", "command")}
        report = None
        for _ in range(args.repeats):
            w, c, p = _timed(lambda: read_onnxruntime(prof))
            timings["read"][0].append(w)
            timings["read"][1].append(c)
            w, c, got = _timed(lambda p=p: import_calibration(  # type: ignore[misc]
                [p], graph, machine, device="cpu", onnx_model=proto, model_ref=str(model)))
            timings["import"][0].append(w)
            timings["import"][1].append(c)
            report = got[1]
            cmd = [sys.executable, "-m", "placewise.cli", "calibrate", "import", str(prof),
                   "--model", str(model), "--shape", "x=1x3x48x192", "--hw", HW,
                   "--device", "cpu", "--out", str(folder / "cal.json"), "--json"]
            t0 = time.perf_counter()
            r0 = os.times()
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            r1 = os.times()
            timings["command"][0].append(time.perf_counter() - t0)
            timings["command"][1].append((r1.children_user - r0.children_user)
                                         + (r1.children_system - r0.children_system))
            if proc.returncode != 0:
                raise SystemExit(f"calibrate import failed: {proc.stderr.strip()}")
        for k, (wall, cpu) in timings.items():
            rows[k] = {"wall": _summary(wall), "cpu": _summary(cpu)}
    assert report is not None
    doc = {"benchmark": "import_speed", "date": date.today().isoformat(),
           "machine": platform.processor() or platform.machine(), "python": platform.python_version(),
           "model": "corpus rapidocr-cls-v2 (1x3x48x192)", "hw": HW, "events": n_events,
           "runs": runs, "file_bytes": size, "repeats": args.repeats,
           "profiled_nodes": report.profiled_nodes, "matched_nodes": report.matched_nodes,
           "ops_covered": report.ops_covered, "graph_ops": report.graph_ops,
           "target_s": 5.0, "timings": rows}
    print(f"profile: {n_events} events, {runs} runs, {size / 1e6:.1f} MB; "
          f"{report.matched_nodes}/{report.profiled_nodes} nodes matched, "
          f"{report.ops_covered}/{report.graph_ops} ops covered")
    for k, r in rows.items():
        w, c = r["wall"], r["cpu"]
        print(f"  {k:8s} wall {w['median_s']:.3f} s ({w['min_s']:.3f}..{w['max_s']:.3f})   "
              f"cpu {c['median_s']:.3f} s")
    if args.out is not None:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
