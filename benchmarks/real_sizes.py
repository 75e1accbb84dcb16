"""Models of real size end to end on ``local``: profile, plan, validate, export.

For each model of ``tests/realsizes.py`` (the pretrained 90 MB MiniLM sentence encoder,
a 102 MB ResNet-50, a 438 MB BERT-base whose weights are ONNX external data beside the
``.onnx``), in a fresh subprocess per command (``python -m placewise.cli``), as a user
runs it:

- ``profile --hw local`` with short settings (``--max-time``, ``--context-requests``,
  ``--context-rounds`` below);
- ``plan --hw local --calibration``;
- ``validate --requests N --json``: predicted against measured latency (p50), and the
  outputs' worst relative L2 against the model's own fp32 onnxruntime session;
- ``export`` of the plan, then the export folder is *moved* elsewhere and its partitions
  chained with plain onnxruntime (no placewise) on seeded inputs: the worst relative L2
  against the source file's own session (the export is self-contained).

Recorded per model and command: status (``ok`` or the last line printed on stderr), wall
seconds of the subprocess (imports included) and its peak RSS (``wait4``: the largest of
the command's process and the worker processes it waited for). The machine has 2 cores
shared with other work: the load average is recorded at the start and end of each model.

    .venv/bin/python benchmarks/real_sizes.py
    .venv/bin/python benchmarks/real_sizes.py --models minilm --folder /tmp/rs

Writes ``benchmarks/results/real_sizes.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.realsizes import MODELS, build  # noqa: E402


def _cli(*args: str, timeout_s: float) -> tuple[dict[str, Any], Any]:
    """({status, wall_s, peak_rss_bytes}, parsed --json stdout or None) of one command."""
    env = dict(os.environ, COLUMNS="120", TERM="dumb", PYTHONHASHSEED="0")
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "placewise.cli", *args], stdout=out,
                                stderr=err, env=env, start_new_session=True)
        timer = threading.Timer(timeout_s, lambda: os.killpg(proc.pid, signal.SIGKILL))
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        timer.cancel()
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    row: dict[str, Any] = {"wall_s": round(wall, 1),
                           "peak_rss_bytes": int(usage.ru_maxrss) * 1024}
    if proc.returncode != 0:
        lines = [ln for ln in stderr.strip().splitlines()
                 if ln.strip() and not re.match(r"[WIEF]\d{4} ", ln)]
        why = f"killed after {timeout_s:.0f} s" if proc.returncode == -9 else \
            f"exit {proc.returncode}: {lines[-1] if lines else ''}"
        row["status"] = why[:300]
        return row, None
    row["status"] = "ok"
    data = None
    if "--json" in args:
        try:
            data = json.loads(stdout)
        except json.JSONDecodeError:
            row["status"] = "ok (stdout is not JSON)"
    return row, data


def _feeds(manifest: dict[str, Any], seed: int) -> dict[str, np.ndarray[Any, Any]]:
    """Seeded inputs of the manifest's graph inputs (ids in [0, 1000), a 0/1 mask)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for t in manifest["graph_inputs"]:
        shape = tuple(t["shape"])
        if t["dtype"].startswith("int"):
            arr = (np.ones(shape) if "mask" in t["name"]
                   else rng.integers(0, 1000, shape)).astype(t["dtype"])
        else:
            arr = rng.standard_normal(shape).astype(t["dtype"])
        feeds[t["name"]] = arr
    return feeds


def _chain_moved(export: Path, model: Path, moved: Path) -> dict[str, Any]:
    """Move the export folder to ``moved``, chain its partitions with plain onnxruntime and
    compare with the source model's own session: {files, bytes, rel_l2_max}."""
    import onnxruntime as ort

    shutil.move(str(export), str(moved))
    manifest = json.loads((moved / "manifest.json").read_text())
    so = ort.SessionOptions()
    so.log_severity_level = 3
    feeds = _feeds(manifest, 0)
    vals = dict(feeds)
    for p in manifest["partitions"]:
        sess = ort.InferenceSession(str(moved / p["file"]), so,
                                    providers=["CPUExecutionProvider"])
        outs = [o["name"] for o in p["outputs"]]
        vals.update(zip(outs, sess.run(outs, {i["name"]: vals[i["name"]]
                                                for i in p["inputs"]}), strict=True))
        del sess
    whole = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    names = [o["name"] for o in manifest["graph_outputs"]]
    ref = whole.run(names, {i.name: feeds[i.name] for i in whole.get_inputs()})
    rel = max(float(np.linalg.norm(vals[n].astype(np.float64) - r)
                    / max(np.linalg.norm(r.astype(np.float64)), 1e-30))
              for n, r in zip(names, ref, strict=True))
    files = sorted(p.name for p in moved.iterdir())
    return {"files": files, "bytes": sum((moved / f).stat().st_size for f in files),
            "partitions": len(manifest["partitions"]), "rel_l2_max": rel}


def _one(name: str, path: Path, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    data_file = path.with_name(path.name + ".data")
    row: dict[str, Any] = {
        "model": name, "file": path.name,
        "model_bytes": path.stat().st_size + (data_file.stat().st_size
                                              if data_file.exists() else 0),
        "external_data": data_file.name if data_file.exists() else None,
        "load_average_1m_start": round(os.getloadavg()[0], 2), "commands": {}}
    cmds = row["commands"]

    def run(label: str, *cli: str) -> Any:
        cmds[label], data = _cli(*cli, timeout_s=args.timeout)
        c = cmds[label]
        print(f"  {label:<9} {c['status'][:80]:<80} {c['wall_s']:7.1f} s "
              f"{c['peak_rss_bytes'] / 2**20:7.0f} MiB", flush=True)
        return data if c["status"] == "ok" else None

    cal = work / "cal.json"
    plan = work / "plan.json"
    run("profile", "profile", str(path), "--hw", "local", "--out", str(cal),
        "--max-time", str(args.max_time), "--context-requests", str(args.context_requests),
        "--context-rounds", "1", "--json")
    run("plan", "plan", str(path), "--hw", "local", "--time-limit", str(args.time_limit),
        *(["--calibration", str(cal)] if cal.exists() else []), "--out", str(plan))
    v = run("validate", "validate", str(plan), "--requests", str(args.requests), "--json")
    if v is not None:
        lat = ((v.get("measured") or {}).get("latency") or {})
        row["validate"] = {
            "predicted_latency_s": (v.get("predicted") or {}).get("latency_s"),
            "measured_latency_p50_s": lat.get("p50_s"), "measured_n": lat.get("n"),
            "latency_error": (v.get("error") or {}).get("latency"),
            "rel_l2_max": max((o["rel_l2_max"] for o in v.get("quality") or []),
                              default=None),
            "devices": (v.get("plan") or {}).get("devices")}
    export = work / "export"
    run("export", "export", str(plan), "--out", str(export), "--force")
    if cmds["export"]["status"] == "ok":
        try:
            row["export_moved_chain"] = _chain_moved(export, path, work / "moved" / "export")
        except Exception as exc:  # recorded, not raised: the row says what failed
            row["export_moved_chain"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    row["load_average_1m_end"] = round(os.getloadavg()[0], 2)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--folder", default="/tmp/placewise-realsizes",
                   help="where the models are built (kept and reused)")
    p.add_argument("--requests", type=int, default=3)
    p.add_argument("--time-limit", type=float, default=10.0)
    p.add_argument("--max-time", type=float, default=0.2, help="profile --max-time")
    p.add_argument("--context-requests", type=int, default=2)
    p.add_argument("--timeout", type=float, default=3600.0, help="per command (s)")
    p.add_argument("--out", default=str(ROOT / "benchmarks/results/real_sizes.json"))
    args = p.parse_args(argv)

    rows: list[dict[str, Any]] = []
    t_all = time.perf_counter()
    for m in args.models.split(","):
        path = build(m, args.folder)
        print(f"{m}: {path}", flush=True)
        with tempfile.TemporaryDirectory(prefix="placewise-rs-") as tmp:
            rows.append(_one(m, path, Path(tmp), args))
    failed = [f"{r['model']}: {k}" for r in rows for k, c in r["commands"].items()
              if c["status"] != "ok"]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": "python " + " ".join([sys.argv[0], *(argv if argv is not None
                                                        else sys.argv[1:])]),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "settings": {"requests": args.requests, "time_limit_s": args.time_limit,
                     "profile_max_time_s": args.max_time,
                     "profile_context_requests": args.context_requests,
                     "profile_context_rounds": 1},
        "wall_s": round(time.perf_counter() - t_all, 1), "failed": failed, "rows": rows},
        indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
