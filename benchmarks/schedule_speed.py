"""How fast the scheduler evaluates a placement: the inner loop of search.

Synthetic layered task graphs (``placewise.graph.taskgraph.generate``) of 1k, 10k and 100k
ops on a machine preset with the roofline cost model. For each size, three placements:

- ``uniform``: every op on one GPU (transfers only for the graph's inputs and outputs);
- ``random``: every op on a random device (most edges cross a link: the worst case);
- ``move-one``: ``uniform`` with one op moved to the CPU, as a local-search step does
  (its costs are memoized in the problem, so only the moved op's costs are new).

"cold" is the first evaluation of a fresh ``Problem`` (it queries the cost model for every
op); "warm" evaluations reuse the memoized costs. Times are wall-clock seconds of
``evaluate`` (schedule + memory + bound + throughput), median and min..max over repeats,
plus the process CPU time (less sensitive to other load on the machine).

Run: ``.venv/bin/python benchmarks/schedule_speed.py [--sizes 1000 10000 100000]
[--hw h100-sxm-server] [--repeats 7] [--out results.json]``
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import time
from datetime import date
from typing import Any

from placewise.cost.roofline import RooflineModel
from placewise.graph.taskgraph import generate, parse_taskgraph
from placewise.hardware.load import load_machine
from placewise.schedule import Assignment, Placement, Problem, evaluate, schedule
from placewise.units import DType


def _timed(fn: Any) -> tuple[float, float, Any]:
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - w0, time.process_time() - c0, out


def _stats(xs: list[float]) -> dict[str, float]:
    return {"median_s": statistics.median(xs), "min_s": min(xs), "max_s": max(xs)}


def bench(n: int, hw: str, repeats: int, seed: int = 0) -> dict[str, Any]:
    g = parse_taskgraph(generate("layered", n, seed=seed))
    m = load_machine(hw)
    gpus = [d.name for d in m.devices if d.kind.value == "gpu"] or [m.devices[-1].name]
    devices = [d.name for d in m.devices]
    uniform = None
    out: dict[str, Any] = {"ops": n, "machine": hw}
    rng = random.Random(seed)
    cold_prob = Problem(g, None, m, RooflineModel(m))
    uniform = Placement.uniform(cold_prob.vertex_names, gpus[0], DType.FP32)
    wall, cpu, ev = _timed(lambda: evaluate(cold_prob, uniform))
    out["tasks_uniform"] = len(ev.schedule.timeline.name)
    out["cold"] = {"wall_s": wall, "cpu_s": cpu}
    prob = cold_prob
    rand = Placement.of({v: Assignment(rng.choice(devices), DType.FP32)
                         for v in prob.vertex_names})
    evaluate(prob, rand)  # memoize its costs: the warm runs measure the scheduler
    placements = {"uniform": uniform, "random": rand}
    for name, pl in placements.items():
        walls, cpus = [], []
        tasks = 0
        for _ in range(repeats):
            w, c, ev = _timed(lambda pl=pl: evaluate(prob, pl))
            walls.append(w)
            cpus.append(c)
            tasks = len(ev.schedule.timeline.name)
        sched_walls = [_timed(lambda pl=pl: schedule(prob, pl))[0] for _ in range(repeats)]
        out[name] = {"tasks": tasks, "evaluate_wall": _stats(walls), "evaluate_cpu": _stats(cpus),
                     "schedule_only_wall": _stats(sched_walls)}
    walls = []
    victims = rng.sample(prob.vertex_names, repeats)
    for v in victims:
        moved = uniform.moved(v, Assignment(devices[0], DType.FP32))
        walls.append(_timed(lambda moved=moved: evaluate(prob, moved))[0])
    out["move-one"] = {"evaluate_wall": _stats(walls)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    ap.add_argument("--hw", default="h100-sxm-server")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    results = {"date": date.today().isoformat(), "python": platform.python_version(),
               "cpu": platform.processor() or platform.machine(), "runs": []}
    print(f"{'ops':>7} {'placement':>9} {'tasks':>7} {'evaluate median':>16} "
          f"{'(min..max)':>20} {'cpu median':>11} {'schedule only':>14}")
    for n in args.sizes:
        reps = args.repeats if n <= 10000 else max(3, args.repeats // 2)
        r = bench(n, args.hw, reps)
        results["runs"].append(r)
        print(f"{n:>7} {'cold':>9} {r['tasks_uniform']:>7} {r['cold']['wall_s']:>15.3f}s "
              f"{'':>20} {r['cold']['cpu_s']:>10.3f}s")
        for name in ("uniform", "random"):
            x = r[name]
            e, c, s = x["evaluate_wall"], x["evaluate_cpu"], x["schedule_only_wall"]
            print(f"{n:>7} {name:>9} {x['tasks']:>7} {e['median_s']:>15.3f}s "
                  f"{e['min_s']:>9.3f}..{e['max_s']:.3f}s {c['median_s']:>10.3f}s "
                  f"{s['median_s']:>13.3f}s")
        e = r["move-one"]["evaluate_wall"]
        print(f"{n:>7} {'move-one':>9} {'':>7} {e['median_s']:>15.3f}s "
              f"{e['min_s']:>9.3f}..{e['max_s']:.3f}s")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
