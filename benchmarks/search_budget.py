"""Does ``--time-limit`` bound the search? Search wall time against the limit on large graphs.

Generated layered task graphs (``placewise.graph.taskgraph.generate("layered", n)``) of
10,000, 100,000 and 200,000 ops on ``h100-sxm-server`` with the roofline cost model, each
searched with ``plan_search(strategy="auto", time_limit_s=LIMIT)`` ``--repeats`` times, each
time on a fresh ``Problem`` (its memo tables empty, as the command line has them). Per
(ops, limit) it reports the wall time of ``plan_search`` (median, min..max), wall / limit,
how many runs ended past the limit, the process CPU time, and what happened: a plan
(``chosen``: the step that produced it; ``wall stop``: the deadline, not the work budget,
cut a step short) or a refusal (``InputError``: the limit is too short for the least search
of this graph, which the message sizes). Problem setup (building the ``Problem``) is timed
separately: it is not part of the search.

Run: ``nice -n 10 .venv/bin/python benchmarks/search_budget.py [--cases 10000:5 10000:10
100000:45 200000:10 200000:75] [--repeats 3] [--hw h100-sxm-server]
[--out benchmarks/results/search_budget.json]``; ``--table FILE`` prints the markdown table
of a results file.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import date
from pathlib import Path
from typing import Any

from placewise.cost.roofline import RooflineModel
from placewise.errors import InputError
from placewise.graph.ir import Graph
from placewise.graph.taskgraph import generate, parse_taskgraph
from placewise.hardware.load import load_machine
from placewise.hardware.spec import Machine
from placewise.schedule import Problem
from placewise.search import plan_search

DEFAULT_CASES = ("10000:5", "10000:10", "100000:45", "200000:10", "200000:75")


def _one(g: Graph, m: Machine, limit_s: float) -> dict[str, Any]:
    w0 = time.perf_counter()
    prob = Problem(g, None, m, RooflineModel(m))
    out: dict[str, Any] = {"setup_s": time.perf_counter() - w0,
                           "load_before": os.getloadavg()[0]}
    w1, c1 = time.perf_counter(), time.process_time()
    try:
        r = plan_search(prob, strategy="auto", time_limit_s=limit_s, seed=0)
    except InputError as exc:
        out.update(wall_s=time.perf_counter() - w1, cpu_s=time.process_time() - c1,
                   refused=str(exc))
        return out
    out.update(wall_s=time.perf_counter() - w1, cpu_s=time.process_time() - c1,
               search_time_s=r.search_time_s, chosen=r.chosen, objective_s=r.objective_s,
               evaluated=r.candidates_evaluated, wall_stopped=r.wall_stopped,
               baselines=[b for b, _ in r.baselines],
               skipped=[n for n in r.notes if "skipped" in n or "time limit" in n],
               notes=list(r.notes))
    return out


def bench(n: int, limit_s: float, hw: str, repeats: int, graphs: dict[int, Graph]
          ) -> dict[str, Any]:
    if n not in graphs:
        graphs.clear()  # one large graph in memory at a time
        graphs[n] = parse_taskgraph(generate("layered", n, seed=0))
    g = graphs[n]
    m = load_machine(hw)
    runs = []
    for _ in range(repeats):
        runs.append(_one(g, m, limit_s))
        print(f"  {n} ops, limit {limit_s:g} s: search {runs[-1]['wall_s']:.2f} s"
              + (" (refused)" if "refused" in runs[-1] else f" ({runs[-1]['chosen']})"),
              file=sys.stderr, flush=True)
    walls = [r["wall_s"] for r in runs]
    return {"ops": n, "machine": hw, "time_limit_s": limit_s, "runs": runs,
            "wall_median_s": statistics.median(walls), "wall_min_s": min(walls),
            "wall_max_s": max(walls), "over_limit": sum(w > limit_s for w in walls),
            "cpu_median_s": statistics.median(r["cpu_s"] for r in runs),
            "setup_median_s": statistics.median(r["setup_s"] for r in runs)}


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| ops | limit | search wall, median (min..max) | wall / limit (max) | over the "
             "limit | CPU | outcome | setup |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
    for r in results:
        outcomes = []
        for run in r["runs"]:
            if "refused" in run:
                outcomes.append("refused (" + run["refused"].split("about ")[-1]
                                .split(":")[0] + " needed)")
            else:
                outcomes.append(run["chosen"] + (", wall stop" if run["wall_stopped"] else ""))
        outcome = "; ".join(dict.fromkeys(outcomes))
        lim = r["time_limit_s"]
        lines.append(
            f"| {r['ops']:,} | {lim:g} s | {r['wall_median_s']:.2f} s ({r['wall_min_s']:.2f}.."
            f"{r['wall_max_s']:.2f}) | {r['wall_median_s'] / lim:.2f} "
            f"({r['wall_max_s'] / lim:.2f}) | {r['over_limit']} of {len(r['runs'])} | "
            f"{r['cpu_median_s']:.2f} s | {outcome} | {r['setup_median_s']:.2f} s |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="*", default=list(DEFAULT_CASES),
                    help="OPS:LIMIT_S pairs")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--hw", default="h100-sxm-server")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--table", type=Path, default=None, help="print the table of a results file")
    args = ap.parse_args()
    if args.table is not None:
        print(table(json.loads(args.table.read_text())["results"]))
        return
    cases = [(int(c.split(":")[0]), float(c.split(":")[1])) for c in args.cases]
    graphs: dict[int, Graph] = {}
    t0 = time.perf_counter()
    results = [bench(n, lim, args.hw, args.repeats, graphs) for n, lim in cases]
    meta = {"date": date.today().isoformat(), "python": platform.python_version(),
            "cores": os.cpu_count(), "total_s": time.perf_counter() - t0,
            "command": " ".join([".venv/bin/python", "benchmarks/search_budget.py",
                                 *sys.argv[1:]])}
    print(table(results))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"meta": meta, "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
