"""Imported as good as native: plans from plain onnxruntime profiles against plans from
placewise's own profile, both validated for real on this machine.

For each zoo model (exported to ONNX once, the file both sides use):

1. **imported**: ``benchmarks/ort_user_profile.py`` (plain onnxruntime profiling, no
   placewise, as a user on a target would) profiles the file once per ``local`` device
   (cpu0: 1 thread on core 0; cpu1: 1 thread on core 1; cpu01: 2 threads on both), and
   ``placewise calibrate import`` turns each profile into that device's calibration
   (``--into`` adds the devices into one file);
2. **native**: ``placewise profile --hw local`` (placewise's own measurement, model order
   included);
3. with each calibration: ``placewise plan`` single-device (``--strategy single:D`` with
   D the device that calibration's auto search ranks best alone) and two-device (``auto``
   with the throughput objective, which pipelines across devices; its device count is
   recorded), then ``placewise validate --json`` of each plan: the predicted latency
   against the measured p50.

    .venv/bin/python benchmarks/import_vs_native.py [--models mlp resnet ...] [--requests 30]

Writes ``benchmarks/results/import_vs_native.json``. Errors are signed
(measured - predicted) / predicted. Run it alone: other load moves every figure.
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.real_models import run_cli  # noqa: E402

MODELS = ("mlp", "resnet", "bert", "gpt", "inception")
#: local device -> (threads, cores) of the user's onnxruntime session that profiles it
DEVICES = {"cpu0": (1, "0"), "cpu1": (1, "1"), "cpu01": (2, "0,1")}


def _ok(run: Any, what: str) -> str:
    if run.rc != 0:
        raise RuntimeError(f"{what} failed ({run.rc}): {run.stderr.strip()[-800:]}")
    return run.stdout


def user_profiles(model: Path, folder: Path, runs: int) -> dict[str, Path]:
    """One plain-onnxruntime profile per local device (a subprocess each)."""
    import subprocess

    out = {}
    for dev, (threads, cores) in DEVICES.items():
        d = folder / f"prof-{dev}"
        proc = subprocess.run(
            [sys.executable, str(ROOT / "benchmarks" / "ort_user_profile.py"), str(model),
             "--out", str(d), "--threads", str(threads), "--cores", cores,
             "--runs", str(runs)], capture_output=True, text=True, check=True)
        out[dev] = Path(proc.stdout.strip().splitlines()[-1])
    return out


def imported_calibration(model: Path, profiles: dict[str, Path], out: Path,
                         executor: Path | None = None) -> dict[str, Any]:
    """Each device's profile imported (``--into`` the file the previous one wrote; the
    first ``--into`` ``executor``, a calibration of another model whose executor terms the
    imported devices keep, when given)."""
    reports = {}
    for dev, prof in profiles.items():
        args = ["calibrate", "import", str(prof), "--model", str(model), "--hw", "local",
                "--device", dev, "--batch", "1", "--out", str(out), "--json"]
        if out.exists():
            args += ["--into", str(out)]
        elif executor is not None:
            args += ["--into", str(executor)]
        reports[dev] = json.loads(_ok(run_cli(*args), f"import {dev}"))
    return reports


def native_calibration(model: Path, out: Path) -> float:
    r = run_cli("profile", str(model), "--hw", "local", "--batch", "1", "--out", str(out),
                timeout=3600)
    _ok(r, "profile")
    return r.seconds


def plans(model: Path, cal: Path, folder: Path, tag: str) -> dict[str, Path]:
    auto = json.loads(_ok(run_cli("plan", str(model), "--hw", "local", "--batch", "1",
                                  "--calibration", str(cal), "--out",
                                  str(folder / f"{tag}-auto.json"), "--json",
                                  "--time-limit", "60"), "plan auto"))
    singles = {k: v for k, v in auto["baselines"].items() if k.startswith("single:")}
    best = min(singles, key=singles.__getitem__)
    out = {"single": folder / f"{tag}-single.json", "two": folder / f"{tag}-two.json"}
    _ok(run_cli("plan", str(model), "--hw", "local", "--batch", "1", "--calibration", str(cal),
                "--strategy", best, "--out", str(out["single"]), "--json"), "plan single")
    _ok(run_cli("plan", str(model), "--hw", "local", "--batch", "1", "--calibration", str(cal),
                "--objective", "throughput", "--out", str(out["two"]), "--json",
                "--time-limit", "60"), "plan two")
    return out


def validate(plan: Path, requests: int) -> dict[str, Any]:
    rep = json.loads(_ok(run_cli("validate", str(plan), "--requests", str(requests),
                                 "--no-baseline", "--json", timeout=1800), "validate"))
    pred = rep["predicted"]["latency_s"]
    p50 = rep["measured"]["latency"]["p50_s"]
    devices = rep["plan"]["devices"]
    return {"predicted_latency_s": pred, "latency_p50_s": p50,
            "latency_error": p50 / pred - 1 if pred else None, "devices": devices,
            "latency_on_cpu_error": rep["error"]["latency_on_cpu"],
            "load_average_1m": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--requests", type=int, default=30)
    ap.add_argument("--runs", type=int, default=30, help="profiled runs per user profile")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "import_vs_native.json"))
    ap.add_argument("--executor-from", default="",
                    help="a zoo model whose native calibration lends its executor terms "
                         "(dispatch, request hand-off, wake-ups, worker links) to the imports")
    ap.add_argument("--skip-native", action="store_true",
                    help="only the imported plans (the native ones measured by an earlier run)")
    ap.add_argument("--work", default="", help="keep files here (calibrations are reused)")
    a = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="pw-import-") as tmp:
        folder = Path(a.work or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for name in a.models:
            model = folder / f"{name}.onnx"
            if not model.exists():
                _ok(run_cli("zoo", "export", name, "--format", "onnx", "--out", str(model)),
                    "export")
            imp_cal = folder / f"{name}-imported.json"
            imp_cal.unlink(missing_ok=True)
            executor = None
            if a.executor_from:
                executor = folder / f"{a.executor_from}-native.json"
                if not executor.exists():
                    base_model = folder / f"{a.executor_from}.onnx"
                    if not base_model.exists():
                        _ok(run_cli("zoo", "export", a.executor_from, "--format", "onnx",
                                    "--out", str(base_model)), "export")
                    native_calibration(base_model, executor)
            imp = imported_calibration(model, user_profiles(model, folder / name, a.runs),
                                       imp_cal, executor)
            nat_cal = folder / f"{name}-native.json"
            native_s = None
            if not a.skip_native and not nat_cal.exists():
                native_s = native_calibration(model, nat_cal)
            for tag, cal in (("imported", imp_cal), ("native", nat_cal)):
                if tag == "native" and a.skip_native:
                    continue
                for kind, plan in plans(model, cal, folder, f"{name}-{tag}").items():
                    row = {"model": name, "calibration": tag, "plan": kind,
                           **validate(plan, a.requests)}
                    if tag == "imported":
                        row["executor_from"] = a.executor_from or None
                        row["measured_share"] = {d: r["measured_share"] for d, r in imp.items()}
                    else:
                        row["profile_s"] = native_s
                    rows.append(row)
                    print(json.dumps(row), flush=True)

    def med(tag: str, kind: str) -> float | None:
        xs = [abs(r["latency_error"]) for r in rows if r["calibration"] == tag
              and r["plan"] == kind and r["latency_error"] is not None]
        return statistics.median(xs) if xs else None

    summary = {f"{tag}_{kind}_median_abs_error": med(tag, kind)
               for tag in ("imported", "native") for kind in ("single", "two")}
    doc = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
           "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
           "command": "python benchmarks/import_vs_native.py " + " ".join(argv or sys.argv[1:]),
           "summary": summary, "rows": rows}
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
