"""Wall time of the real ``placewise plan`` command (load to written file), at 1k-100k ops.

The ``cli`` suite of ``benchmarks/search.py`` (``--suite cli``; also runnable alone): for
generated task graphs (chain, fork-join, layered, transformer) of 1,000, 10,000 and
100,000 ops, ``placewise plan FILE --hw HW --out PLAN --json [--time-limit S]`` runs as a
subprocess on two presets and ``local`` (100,000 ops on ``h100-sxm-server`` only, to keep
the suite near 20 minutes). Each run records the wall time the caller measured (median of
``--repeats`` runs at 1,000 ops; one run above), the time limit (the size-scaled default
the command printed, or the one asked) and whether the wall time stayed within 10 % of it,
the command's own split (loading, search, building, writing, the reserve it kept for
building and writing), its CPU time (user + system: steadier than wall time on a shared
machine), and the plan file's size. A second set of runs asks for explicit
limits (``EXPLICIT``) to check the bound where the user sets it. The growth exponent of
wall time over size is fitted (least squares in log-log) per kind and machine, and over
the medians of all default runs per size.

Run: ``.venv/bin/python benchmarks/search.py --suite cli`` (writes
``benchmarks/results/search_cli.json`` and prints a markdown table); ``--table FILE``
prints the table of a results file. The 2-core development machine is shared: wall times
are provisional.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import Any

from placewise.graph.taskgraph import GENERATORS, generate
from placewise.io import atomic_write_json

SIZES = (1_000, 10_000, 100_000)
MACHINES = ("h100-sxm-server", "jetson-agx-orin", "local")
BIG_MACHINES = ("h100-sxm-server",)  # where 100,000 ops run
# explicit limits asked (ops -> seconds), on layered graphs on h100-sxm-server
EXPLICIT = {1_000: 3.0, 10_000: 15.0, 100_000: 120.0}
TOLERANCE = 0.10
EXE = Path(sys.executable).with_name("placewise")


def _graph(folder: Path, kind: str, n: int) -> Path:
    f = folder / f"{kind}-{n}.json"
    if not f.exists():
        atomic_write_json(str(f), generate(kind, n, seed=0))
    return f


def run_plan(model: Path, hw: str, out: Path, limit_s: float | None,
             extra: Sequence[str] = ()) -> dict[str, Any]:
    """One ``placewise plan`` subprocess (``extra``: more arguments, e.g. ``--batch 1``):
    the wall time measured here, the command's own timing and the plan's size (or the
    error)."""
    cmd = [str(EXE), "plan", str(model), "--hw", hw, "--out", str(out), "--json", *extra]
    if limit_s is not None:
        cmd += ["--time-limit", f"{limit_s:g}"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800,
                          env=dict(os.environ, COLUMNS="120"))
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    rec: dict[str, Any] = {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                           "rc": proc.returncode}
    if proc.returncode != 0:
        rec["error"] = proc.stderr.strip()[-400:]
        return rec
    summary = json.loads(proc.stdout)
    rec.update({"timing": summary.get("timing"), "plan_bytes": out.stat().st_size,
                "makespan_s": summary.get("makespan_s"), "chosen": summary.get("chosen"),
                "candidates": summary.get("candidates_evaluated")})
    out.unlink()
    return rec


def _one(folder: Path, kind: str, n: int, hw: str, limit_s: float | None,
         repeats: int) -> dict[str, Any]:
    model = _graph(folder, kind, n)
    reps = [run_plan(model, hw, folder / "plan.json", limit_s) for _ in range(repeats)]
    ok = [r for r in reps if r["rc"] == 0]
    rid = f"{kind}|{n}|{hw}|{'default' if limit_s is None else f'{limit_s:g}s'}"
    if not ok:
        return {"id": rid, "kind": kind, "ops": n, "machine": hw, "error": reps[0]["error"]}
    walls = [r["wall_s"] for r in ok]
    mid = sorted(ok, key=lambda r: r["wall_s"])[len(ok) // 2]
    t = mid["timing"] or {}
    limit = float(t.get("time_limit_s") or limit_s or 0.0)
    wall = statistics.median(walls)
    return {
        "id": rid, "kind": kind, "ops": n, "machine": hw,
        "asked_s": limit_s, "time_limit_s": limit, "default_limit": limit_s is None,
        "wall_s": round(wall, 3), "walls_s": walls, "repeats": len(ok),
        "cpu_s": mid["cpu_s"],
        "wall_over_limit": round(wall / limit, 3) if limit else None,
        "within_10pct": bool(limit) and wall <= limit * (1 + TOLERANCE),
        "load_s": t.get("load_s"), "search_s": t.get("search_s"), "build_s": t.get("build_s"),
        "write_s": t.get("write_s"), "reserve_s": t.get("reserve_s"),
        "command_total_s": t.get("total_s"), "overrun": t.get("overrun"),
        "plan_bytes": mid["plan_bytes"], "bytes_per_op": round(mid["plan_bytes"] / n, 1),
        "makespan_s": mid["makespan_s"], "chosen": mid["chosen"],
        "candidates": mid["candidates"],
    }


def exponent(points: list[tuple[float, float]]) -> float | None:
    """The least-squares slope of log(wall) over log(ops).

    >>> round(exponent([(1e3, 1.0), (1e4, 10.0), (1e5, 100.0)]), 6)
    1.0
    """
    pts = [(math.log(x), math.log(y)) for x, y in points if x > 0 and y > 0]
    if len({x for x, _ in pts}) < 2:
        return None
    mx = statistics.fmean(x for x, _ in pts)
    my = statistics.fmean(y for _, y in pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sxx


def fits(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Growth exponents: per kind and machine, and over the median default run per size."""
    series: dict[str, list[tuple[float, float]]] = {}
    by_size: dict[int, list[float]] = {}
    for r in runs:
        if "error" in r or not r.get("default_limit"):
            continue
        series.setdefault(f"{r['kind']}|{r['machine']}", []).append((r["ops"], r["wall_s"]))
        by_size.setdefault(r["ops"], []).append(r["wall_s"])
    per = {k: _round(exponent(v)) for k, v in sorted(series.items()) if len(v) >= 2}
    medians = {n: statistics.median(v) for n, v in sorted(by_size.items())}
    return {"per_series": per, "median_wall_s_by_ops": medians,
            "overall": _round(exponent(list(medians.items())))}


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def table(data: dict[str, Any]) -> str:
    runs = data["runs"]
    lines = ["| graph | ops | machine | limit (s) | wall (s) | wall/limit | cpu (s) | load | "
             "search | build | write | reserve | plan MB | B/op |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        if "error" in r:
            lines.append(f"| {r['kind']} | {r['ops']} | {r['machine']} | error: "
                         f"{r['error'][:60]} |")
            continue
        lim = f"{r['time_limit_s']:g}" + ("" if r["default_limit"] else " (asked)")
        flag = "" if r["within_10pct"] else " **over**"
        lines.append(
            f"| {r['kind']} | {r['ops']} | {r['machine']} | {lim} | {r['wall_s']:.2f} | "
            f"{r['wall_over_limit']:.2f}{flag} | {_s(r.get('cpu_s'))} | {_s(r['load_s'])} | "
            f"{_s(r['search_s'])} | "
            f"{_s(r['build_s'])} | {_s(r['write_s'])} | {_s(r['reserve_s'])} | "
            f"{r['plan_bytes'] / 1e6:.2f} | {r['bytes_per_op']:.0f} |")
    f = data.get("fits", {})
    lines.append("")
    lines.append(f"Growth exponent of wall time over size (default limits, medians per size): "
                 f"{f.get('overall')}; per graph and machine: "
                 + ", ".join(f"{k} {v}" for k, v in f.get("per_series", {}).items()))
    ok = [r for r in runs if "error" not in r]
    within = sum(1 for r in ok if r["within_10pct"])
    lines.append(f"Within 10 % of the time limit: {within} of {len(ok)} runs.")
    return "\n".join(lines)


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="benchmarks/results/search_cli.json")
    ap.add_argument("--repeats", type=int, default=3, help="runs per case at 1,000 ops")
    ap.add_argument("--sizes", type=int, nargs="*", default=list(SIZES))
    ap.add_argument("--kinds", nargs="*", default=list(GENERATORS))
    ap.add_argument("--machines", nargs="*", default=list(MACHINES))
    ap.add_argument("--no-explicit", action="store_true", help="skip the explicit limits")
    ap.add_argument("--table", metavar="FILE", help="print the table of a results file")
    args = ap.parse_args(argv)
    if args.table:
        print(table(json.loads(Path(args.table).read_text())))
        return
    if "local" in args.machines:  # probed once and cached: not part of any run
        subprocess.run([str(EXE), "hw", "show", "local"], capture_output=True, check=False)
    runs: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="placewise-cli-bench-") as tmp:
        folder = Path(tmp)
        cases: list[tuple[str, int, str, float | None, int]] = []
        for n in sorted(args.sizes):
            for kind in args.kinds:
                for hw in args.machines:
                    if n >= 100_000 and hw not in BIG_MACHINES:
                        continue
                    cases.append((kind, n, hw, None, args.repeats if n <= 1_000 else 1))
            if not args.no_explicit and n in EXPLICIT:
                cases.append(("layered", n, "h100-sxm-server", EXPLICIT[n], 1))
        for kind, n, hw, limit, reps in cases:
            r = _one(folder, kind, n, hw, limit, reps)
            runs.append(r)
            print(json.dumps({k: r.get(k) for k in ("id", "wall_s", "time_limit_s",
                                                     "wall_over_limit", "load_s", "search_s",
                                                     "build_s", "write_s", "plan_bytes",
                                                     "error")}), flush=True)
    data = {"meta": {"date": date.today().isoformat(), "python": platform.python_version(),
                     "cpus": os.cpu_count(), "suite_wall_s": round(time.perf_counter() - t0, 1),
                     "command": "benchmarks/search.py --suite cli",
                     "note": "wall times on the shared 2-core development machine: provisional"},
            "runs": runs, "fits": fits(runs)}
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    print(table(data))


if __name__ == "__main__":
    main()
