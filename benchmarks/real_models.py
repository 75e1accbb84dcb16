"""The real-model matrix: every transformer export of ``tests/realmodels.py`` through the
command line, as a user runs it.

For each of BERT, GPT-2, ViT and T5 (random weights from a config, seeded) exported three
ways (``ts``: TorchScript ONNX exporter, opset 17; ``dynamo``: ONNX opset 18; ``pt2``:
``torch.export``), in a fresh subprocess each (``python -m placewise.cli``):

- ``inspect --json``: op count, counting coverage, where the shapes came from, how many
  nodes of the file folded into constants (ONNX);
- ``plan --hw h100-sxm-server`` and ``plan --hw jetson-agx-orin`` (presets, analytic);
- ``profile --hw local`` (short settings, below) and ``plan --hw local --calibration``;
- ``export`` of the local plan (partitions + manifest);
- ``validate --requests N`` of the local plan: the run's outputs against the fp32
  reference (worst relative L2 over outputs and requests).

Status per command is ``ok`` or the first line it printed on stderr; times are wall
seconds of the subprocess (imports included), on a 2-core machine that others share.

    .venv/bin/python benchmarks/real_models.py
    .venv/bin/python benchmarks/real_models.py --models bert --formats ts --no-profile

Writes ``benchmarks/results/real_models.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.realmodels import FORMATS, MODELS, export  # noqa: E402

PRESETS = ("h100-sxm-server", "jetson-agx-orin")


@dataclass(frozen=True)
class CliRun:
    """One ``python -m placewise.cli`` subprocess: exit status (None on timeout), output,
    wall seconds (imports included)."""

    rc: int | None
    stdout: str
    stderr: str
    seconds: float


def run_cli(*args: str, timeout: float = 900.0) -> CliRun:
    """Run one placewise command in a fresh subprocess, as a user does."""
    env = dict(os.environ, COLUMNS="120", TERM="dumb", PYTHONHASHSEED="0")
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "placewise.cli", *args],
                              capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return CliRun(None, "", "", time.perf_counter() - t0)
    return CliRun(proc.returncode, proc.stdout, proc.stderr, time.perf_counter() - t0)


def stderr_lines(stderr: str) -> list[str]:
    """stderr's lines without the torch (glog) and onnxruntime log lines, which are never
    the command's own message."""
    return [ln for ln in stderr.strip().splitlines()
            if ln.strip() and not re.match(r"[WIEF]\d{4} ", ln) and not is_ort_log(ln)]


def is_ort_log(line: str) -> bool:
    """An onnxruntime log line (``[W:onnxruntime:...]``, often in colour codes)."""
    return re.search(r"\[[VIWEF]:onnxruntime:", line) is not None


def _cli(*args: str, timeout: float = 900.0) -> tuple[str, float, Any]:
    """(status, seconds, parsed --json stdout or None) of one placewise command."""
    run = run_cli(*args, timeout=timeout)
    if run.rc is None:
        return f"timeout after {timeout:.0f} s", run.seconds, None
    if run.rc != 0:
        lines = stderr_lines(run.stderr)
        return f"exit {run.rc}: {lines[-1] if lines else ''}"[:300], run.seconds, None
    data = None
    if "--json" in args:
        try:
            data = json.loads(run.stdout)
        except json.JSONDecodeError:
            return "ok (stdout is not JSON)", run.seconds, None
    return "ok", run.seconds, data


def _file_nodes(path: Path) -> dict[str, int] | None:
    """Nodes of an ONNX file: all, and without ``Constant`` nodes (which are never ops)."""
    if path.suffix != ".onnx":
        return None
    import onnx

    nodes = onnx.load(str(path)).graph.node
    consts = sum(1 for n in nodes if n.op_type == "Constant")
    return {"nodes": len(nodes), "non_constant_nodes": len(nodes) - consts}


def _one(path: Path, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    row: dict[str, Any] = {"file": path.name, "commands": {}}
    cmds = row["commands"]

    def run(label: str, *cli: str) -> Any:
        status, seconds, data = _cli(*cli)
        cmds[label] = {"status": status, "seconds": round(seconds, 2)}
        print(f"  {label:<22} {status[:90]:<90} {seconds:6.1f} s", flush=True)
        return data if status == "ok" else None

    s = run("inspect", "inspect", str(path), "--json")
    if s is not None:
        row.update({"ops": s["ops"], "coverage": s["coverage"], "uncounted": s["uncounted"],
                    "shape_source": s.get("shape_source"),
                    "source_nodes": s.get("source_nodes"),
                    "folded_nodes": s.get("folded_nodes"),
                    "flops": s["flops"]})
    row["file_nodes"] = _file_nodes(path)
    tl = str(args.time_limit)
    for hw in PRESETS:
        run(f"plan {hw}", "plan", str(path), "--hw", hw, "--time-limit", tl,
            "--out", str(work / f"plan-{hw}.json"))
    cal: list[str] = []
    if args.profile:
        cal_file = work / "cal.json"
        if run("profile local", "profile", str(path), "--hw", "local", "--out", str(cal_file),
               "--max-time", str(args.max_time), "--context-requests", "2",
               "--context-rounds", "1", "--json") is not None:
            cal = ["--calibration", str(cal_file)]
    local = work / "plan-local.json"
    run("plan local", "plan", str(path), "--hw", "local", "--time-limit", tl, *cal,
        "--out", str(local))
    run("export", "export", str(local), "--out", str(work / "export"), "--force")
    v = run("validate", "validate", str(local), "--requests", str(args.requests), "--json")
    if v is not None:
        q = v.get("quality") or []
        row["validate_rel_l2_max"] = max((o["rel_l2_max"] for o in q), default=None)
        row["validate_latency_p50_s"] = ((v.get("measured") or {}).get("latency") or {}).get("p50_s")
    return row


def _table(rows: list[dict[str, Any]]) -> str:
    labels = ["inspect", *(f"plan {hw}" for hw in PRESETS), "profile local", "plan local",
              "export", "validate"]
    short = ["inspect", *(f"plan {hw.split('-')[0][:5]}" for hw in PRESETS), "profile",
             "plan local", "export", "validate"]
    head = (f"{'file':<18} {'ops':>4} {'nodes':>5} {'fold':>4} {'cov':>6}  {'shapes':<31}"
            f" {'rel L2':>8}  " + " ".join(f"{lab:>10}" for lab in short))
    lines = [head]
    for r in rows:
        nodes = (r.get("file_nodes") or {}).get("nodes", r.get("ops", 0))
        cells = []
        for lab in labels:
            c = r["commands"].get(lab)
            cells.append("-" if c is None else
                         (f"{c['seconds']:.1f}s" if c["status"] == "ok" else "FAIL"))
        rel = r.get("validate_rel_l2_max")
        lines.append(f"{r['file']:<18} {r.get('ops', 0):>4} {nodes:>5} "
                     f"{r.get('folded_nodes') or 0:>4} {100 * r.get('coverage', 0):>5.1f}%  "
                     f"{r.get('shape_source') or '?':<31} "
                     f"{'-' if rel is None else f'{rel:.1e}':>8}  "
                     + " ".join(f"{c:>10}" for c in cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--formats", default=",".join(FORMATS))
    p.add_argument("--folder", default="/tmp/placewise-realmodels",
                   help="where the exports are written (kept and reused)")
    p.add_argument("--requests", type=int, default=3)
    p.add_argument("--time-limit", type=float, default=3.0)
    p.add_argument("--max-time", type=float, default=0.2, help="profile --max-time")
    p.add_argument("--no-profile", dest="profile", action="store_false")
    p.add_argument("--out", default=str(ROOT / "benchmarks/results/real_models.json"))
    args = p.parse_args(argv)

    rows: list[dict[str, Any]] = []
    t_all = time.perf_counter()
    load0 = os.getloadavg()[0]
    for m in args.models.split(","):
        for f in args.formats.split(","):
            path = export(m, f, args.folder)
            print(f"{path.name}", flush=True)
            with tempfile.TemporaryDirectory(prefix="placewise-rm-") as tmp:
                rows.append(_one(path, Path(tmp), args))
    failed = [(r["file"], k) for r in rows for k, c in r["commands"].items()
              if c["status"] != "ok"]
    summary = {"exports": len(rows), "commands": sum(len(r["commands"]) for r in rows),
               "failed": [f"{f}: {k}" for f, k in failed],
               "full_coverage": sum(r.get("coverage") == 1.0 for r in rows),
               "worst_validate_rel_l2": max((r["validate_rel_l2_max"] for r in rows
                                             if r.get("validate_rel_l2_max") is not None),
                                            default=None)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": "python " + " ".join([sys.argv[0], *(argv if argv is not None
                                                        else sys.argv[1:])]),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "load_average_1m_start": round(load0, 2),
                    "load_average_1m_end": round(os.getloadavg()[0], 2)},
        "settings": {"requests": args.requests, "time_limit_s": args.time_limit,
                     "profile": args.profile, "profile_max_time_s": args.max_time,
                     "profile_context_requests": 2, "profile_context_rounds": 1},
        "wall_s": round(time.perf_counter() - t_all, 1), "summary": summary, "rows": rows},
        indent=1) + "\n")
    print(_table(rows))
    print(json.dumps(summary, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
