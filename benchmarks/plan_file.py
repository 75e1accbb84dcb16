"""Building, writing and loading a plan file at 10k and 100k ops (issue 13's compact plan).

For a generated layered task graph of N ops on ``h100-sxm-server`` (roofline costs), one
placement (every vertex on ``gpu0`` in fp32) is evaluated; then ``build_plan``,
``save_plan`` and ``load_plan`` are timed, and the file's size, bytes per task and bytes
per op recorded. The cost model's memo table is filled first (``problem_lower_bound``, as
a search would have), so that ``build_plan`` is timed as the ``plan`` command runs it.

Run: ``.venv/bin/python benchmarks/plan_file.py [--sizes 10000 100000]`` (prints one JSON
line per size). The 2-core development machine is shared: times are provisional.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from placewise.cost.load import load_cost_model
from placewise.graph.taskgraph import generate, parse_taskgraph
from placewise.hardware.load import load_machine
from placewise.plan import build_plan, load_plan, save_plan
from placewise.schedule import Placement, Problem, evaluate
from placewise.schedule.bounds import problem_lower_bound
from placewise.units import DType


def measure(n: int, folder: Path) -> dict[str, object]:
    graph = parse_taskgraph(generate("layered", n, seed=0))
    machine = load_machine("h100-sxm-server")
    prob = Problem(graph, None, machine, load_cost_model(machine, None))
    ev = evaluate(prob, Placement.uniform(prob.vertex_names, "gpu0", DType.FP32))
    problem_lower_bound(prob)  # the memo table a search leaves behind
    path = folder / f"plan{n}.json"
    t0 = time.perf_counter()
    plan = build_plan(prob, ev, model_ref=f"layered-{n}", strategy="single:gpu0")
    t1 = time.perf_counter()
    save_plan(plan, path)
    t2 = time.perf_counter()
    back = load_plan(path)
    t3 = time.perf_counter()
    assert back == plan
    size = path.stat().st_size
    tasks = len(plan.schedule.tasks)
    return {"ops": n, "tasks": tasks, "bytes": size, "bytes_per_task": round(size / tasks),
            "bytes_per_op": round(size / n), "build_s": round(t1 - t0, 2),
            "save_s": round(t2 - t1, 2), "load_s": round(t3 - t2, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            print(json.dumps(measure(n, Path(tmp))), flush=True)


if __name__ == "__main__":
    main()
