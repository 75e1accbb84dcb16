"""The corpus benchmark: every real third-party ONNX file of ``tests/corpus.py`` through the
command line, as a user who brings one runs it.

For each file (fetched by exact version, sha256 checked), in a fresh subprocess each
(``python -m placewise.cli``), with the file's ``--shape`` bindings from the manifest:

- ``inspect --json``: counted coverage, uncounted kinds, op count, flops;
- ``plan --hw jetson-agx-orin --time-limit T``: status, the device split (ops per device)
  and predicted latency, read from the plan file;
- ``export`` of that preset plan: the partition count (each a separate engine on the
  device) and their devices; the partitions chained by plain onnxruntime (CPU);
- ``plan --hw local`` and ``export`` of it, chained the same way.

Each chain's outputs are compared with the file's own onnxruntime session on the same
seeded inputs (``tests.corpus.example_inputs``): relative L2 per output, the worst kept
(fp32: 1e-5 is the bar). A failing command records its exit status, the first line of its
stderr (onnxruntime/torch log lines skipped), whether a Python traceback showed, and how many
onnxruntime log lines leaked onto stderr. A command after a failed one it depends on is
recorded as not run.

    .venv/bin/python benchmarks/corpus.py                  # all files
    .venv/bin/python benchmarks/corpus.py --files silero-vad-spox,nudenet-320n --jobs 1

Writes ``benchmarks/results/corpus.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import datetime as dt
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from tests.corpus import ENTRIES, NAMES, example_inputs, fetch  # noqa: E402

from export_roundtrip import _chain  # noqa: E402
from real_models import CliRun, is_ort_log, run_cli, stderr_lines  # noqa: E402

PRESET = "jetson-agx-orin"


def _record(run: CliRun, timeout: float) -> dict[str, Any]:
    """What a command did: ok, or its exit status and first stderr line."""
    rec: dict[str, Any] = {"rc": run.rc, "seconds": round(run.seconds, 2),
                           "ort_log_lines": sum(is_ort_log(x) for x in run.stderr.splitlines()),
                           "traceback": "Traceback (most recent call last)" in run.stderr}
    if run.rc is None:
        rec["status"] = f"timeout after {timeout:.0f} s"
    elif run.rc == 0:
        rec["status"] = "ok"
    else:
        lines = stderr_lines(run.stderr)
        rec["status"] = f"exit {run.rc}"
        rec["first_line"] = (lines[0] if lines else "")[:400]
        if rec["traceback"] and lines:
            rec["last_line"] = lines[-1][:300]
    return rec


def _reference(name: str, path: Path, feeds: dict[str, Any]) -> dict[str, Any]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds), strict=True))


def _compare(folder: Path, feeds: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    """Chain the export in ``folder`` and compare its outputs with the reference's."""
    manifest = json.loads((folder / "manifest.json").read_text())
    inputs = [t["name"] for t in manifest["graph_inputs"]]
    missing = [n for n in inputs if n not in feeds]
    if missing:
        return {"status": f"the export reads inputs the file does not have: {missing}"}
    try:
        got = _chain(folder, {n: feeds[n] for n in inputs})
    except Exception as exc:  # the chain is what is measured: record, never stop
        return {"status": f"chain failed: {type(exc).__name__}: {str(exc)[:300]}"}
    errs: dict[str, float] = {}
    for n, g in got.items():
        if n not in ref:
            return {"status": f"the export's output {n!r} is not an output of the file"}
        r = np.asarray(ref[n], dtype=np.float64)
        a = np.asarray(g, dtype=np.float64)
        if a.shape != r.shape:
            return {"status": f"output {n!r} has shape {list(a.shape)}, the file's session "
                              f"gives {list(r.shape)}"}
        errs[n] = float(np.linalg.norm(a - r) / max(float(np.linalg.norm(r)), 1e-30))
    worst = max(errs.values(), default=0.0)
    return {"status": "ok" if worst <= 1e-5 else "over 1e-5", "rel_l2": worst,
            "outputs_compared": len(errs), "outputs_of_file": len(ref),
            "partitions": len(manifest["partitions"]),
            "devices": [p["device"] for p in manifest["partitions"]]}


def _plan_facts(path: Path) -> dict[str, Any]:
    from placewise.plan_file import load_plan

    plan = load_plan(path)
    split: dict[str, int] = {}
    for rec in plan.ops.values():
        dev = plan.placement[rec.vertex]["device"]
        split[dev] = split.get(dev, 0) + 1
    return {"ops_per_device": dict(sorted(split.items())),
            "predicted_latency_s": plan.predicted_latency_s}


def _place(label: str, hw: str, model: Path, shapes: list[str], work: Path,
           feeds: dict[str, Any] | None, ref: dict[str, Any] | None,
           args: argparse.Namespace, cmds: dict[str, Any]) -> dict[str, Any] | None:
    """plan on ``hw``, export it, chain the export: the result of the chain, or None."""
    plan_file = work / f"plan-{label}.json"
    run = run_cli("plan", str(model), "--hw", hw, "--time-limit", str(args.time_limit),
                  *shapes, "--out", str(plan_file), timeout=args.timeout)
    cmds[f"plan {label}"] = rec = _record(run, args.timeout)
    if rec["status"] != "ok":
        return None
    rec.update(_plan_facts(plan_file))
    folder = work / f"export-{label}"
    run = run_cli("export", str(plan_file), "--out", str(folder), "--force",
                  timeout=args.timeout)
    cmds[f"export {label}"] = rec = _record(run, args.timeout)
    if rec["status"] != "ok":
        return None
    if feeds is None or ref is None:
        return {"status": "no reference session"}
    try:
        return _compare(folder, feeds, ref)
    except Exception as exc:  # e.g. a non-tensor output: record, never stop the run
        return {"status": f"compare failed: {type(exc).__name__}: {str(exc)[:200]}"}


def _one(name: str, args: argparse.Namespace) -> dict[str, Any]:
    e = ENTRIES[name]
    path = fetch(name)
    row: dict[str, Any] = {"file": name, "package": f"{e.package}=={e.version}",
                           "producer": e.producer, "opset": e.opset,
                           "mb": round(e.bytes / 1e6, 2), "features": list(e.features),
                           "shapes": list(e.shapes), "commands": {}}
    cmds = row["commands"]
    shapes = [x for b in e.shapes for x in ("--shape", b)]
    # an input whose value the model's shapes or branches depend on (silero's sample rate)
    # is given as a user gives it: --value NAME=V
    shapes += [x for f in e.feeds if "=value:" in f
               for x in ("--value", f.replace("=value:", "=", 1))]
    feeds = ref = None
    try:
        feeds = example_inputs(name)
        ref = _reference(name, path, feeds)
    except Exception as exc:  # a file onnxruntime itself cannot run: say so
        row["reference"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    run = run_cli("inspect", str(path), "--json", *shapes, timeout=args.timeout)
    cmds["inspect"] = rec = _record(run, args.timeout)
    if rec["status"] == "ok":
        s = json.loads(run.stdout)
        row.update({"ops": s["ops"], "coverage": s["coverage"], "uncounted": s["uncounted"],
                    "flops": s["flops"], "shape_source": s.get("shape_source")})
    with tempfile.TemporaryDirectory(prefix="placewise-corpus-") as tmp:
        for label, hw in (("orin", PRESET), ("local", "local")):
            if rec["status"] != "ok":
                cmds[f"plan {label}"] = {"status": "not run: inspect failed"}
                continue
            row[f"chain {label}"] = _place(label, hw, path, shapes, Path(tmp), feeds, ref,
                                           args, cmds)
    return row


def _cell(row: dict[str, Any], key: str) -> str:
    c = row["commands"].get(key)
    if c is None:
        return "-"
    return "ok" if c["status"] == "ok" else ("n/r" if c["status"].startswith("not run")
                                             else c["status"].replace("exit ", "x"))


def _table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'file':<20} {'cov':>6} {'inspect':>7} {'plan':>5} {'parts':>5} "
             f"{'split (orin)':<22} {'chain orin':>10} {'local':>5} {'chain local':>11}  "
             f"first failure"]
    for r in rows:
        po = r["commands"].get("plan orin", {})
        co, cl = r.get("chain orin") or {}, r.get("chain local") or {}
        split = ",".join(f"{d}:{n}" for d, n in (po.get("ops_per_device") or {}).items())
        first = next((f"{k}: {c.get('first_line', c['status'])}"
                      for k, c in r["commands"].items()
                      if c["status"] != "ok" and not c["status"].startswith("not run")), "")
        cov = r.get("coverage")
        lines.append(
            f"{r['file']:<20} {'-' if cov is None else f'{100 * cov:.1f}%':>6} "
            f"{_cell(r, 'inspect'):>7} {_cell(r, 'plan orin'):>5} "
            f"{co.get('partitions', '-')!s:>5} {split[:22]:<22} "
            f"{_rel(co):>10} {_cell(r, 'plan local'):>5} {_rel(cl):>11}  {first[:110]}")
    return "\n".join(lines)


def _rel(c: dict[str, Any]) -> str:
    if "rel_l2" in c:
        return f"{c['rel_l2']:.1e}"
    return "FAIL" if c else "-"


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def ok(r: dict[str, Any], k: str) -> bool:
        return r["commands"].get(k, {}).get("status") == "ok"

    chained = [r for r in rows if (r.get("chain orin") or {}).get("rel_l2") is not None]
    return {
        "files": len(rows),
        "inspect_ok": sum(ok(r, "inspect") for r in rows),
        "full_coverage": sum(r.get("coverage") == 1.0 for r in rows),
        "plan_orin_ok": sum(ok(r, "plan orin") for r in rows),
        "export_orin_ok": sum(ok(r, "export orin") for r in rows),
        "plan_local_ok": sum(ok(r, "plan local") for r in rows),
        "export_local_ok": sum(ok(r, "export local") for r in rows),
        "chain_orin_within_1e-5": sum((r.get("chain orin") or {}).get("status") == "ok"
                                      for r in rows),
        "chain_local_within_1e-5": sum((r.get("chain local") or {}).get("status") == "ok"
                                       for r in rows),
        "orin_partitions": {r["file"]: r["chain orin"]["partitions"] for r in chained},
        "tracebacks": sorted(f"{r['file']}: {k}" for r in rows
                             for k, c in r["commands"].items() if c.get("traceback")),
        "ort_log_leaks": sorted(f"{r['file']}: {k}" for r in rows
                                for k, c in r["commands"].items() if c.get("ort_log_lines")),
        "failures": {r["file"]: {k: c.get("first_line", c["status"])
                                 for k, c in r["commands"].items()
                                 if c["status"] != "ok" and not c["status"].startswith("not")}
                     for r in rows},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--files", default=",".join(NAMES), help="corpus names, comma-separated")
    p.add_argument("--time-limit", type=float, default=10.0, help="plan --time-limit")
    p.add_argument("--timeout", type=float, default=240.0, help="per command, seconds")
    p.add_argument("--jobs", type=int, default=2, help="files run at once")
    p.add_argument("--out", default=str(ROOT / "benchmarks/results/corpus.json"))
    args = p.parse_args(argv)

    names = [n for n in args.files.split(",") if n]
    for n in names:
        fetch(n)  # all downloads first, so that timings are the commands'
    t_all = time.perf_counter()
    load0 = os.getloadavg()[0]
    rows: dict[str, dict[str, Any]] = {}
    with cf.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {pool.submit(_one, n, args): n for n in names}
        for fut in cf.as_completed(futures):
            r = fut.result()
            rows[r["file"]] = r
            print(_table([r]).splitlines()[1], flush=True)
    ordered = [rows[n] for n in names]
    summary = _summary(ordered)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": "python " + " ".join([sys.argv[0], *(argv if argv is not None
                                                        else sys.argv[1:])]),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "load_average_1m_start": round(load0, 2),
                    "load_average_1m_end": round(os.getloadavg()[0], 2)},
        "settings": {"preset": PRESET, "time_limit_s": args.time_limit,
                     "timeout_s": args.timeout, "jobs": args.jobs},
        "wall_s": round(time.perf_counter() - t_all, 1), "summary": summary,
        "rows": ordered}, indent=1) + "\n")
    print(_table(ordered))
    print(json.dumps({k: v for k, v in summary.items() if k != "failures"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
