"""Placement search: plan quality against bounds, optima and baselines; planning time.

Suites (``--suite``):

- ``zoo``: every zoo model at two sizes (its defaults, and a larger configuration) on every
  preset and on ``local``, latency objective, fused graphs; the default sizes also with the
  throughput objective on two presets; and the large models on two machines whose memory
  was cut so that it *binds*: ``h100-tight`` (each GPU holds 40 % of the model's fp32
  weights; precisions fp32/bf16/fp16, so no single GPU fits the model) and ``a100-tight``
  (the GPU holds 20 % of the fp32 weights: even in int8 part of the model must stay on the
  CPU, which computes only in fp32).
- ``dags``: generated task graphs (chain, fork-join, layered, transformer) of 10, 30, 100
  and 1,000 ops on every preset and ``local``.
- ``cli``: the wall time of the real ``placewise plan`` command at 1k-100k ops, against its
  time limit (``benchmarks/search_cli.py``; results in ``benchmarks/results/search_cli.json``).
- ``scale``: 10,000-op graphs (all four kinds) on ``h100-sxm-server`` and ``local`` with a
  10 s limit; 100,000-op graphs (layered, transformer) on ``h100-sxm-server`` with 120 s.

Every run is ``plan_search(strategy="auto")`` with the roofline cost model (``local``: its
probed spec). Reported per run: the objective (makespan, or pipeline period), objective /
lower bound, objective / optimum where one is proven (exhaustive enumeration under the
scheduler; a proven lower bound the plan meets, "bound met"; or CP-SAT's proven optimum of
its model — a relaxation, so that ratio can exceed 1 where the scheduler's links queue
transfers the model lets overlap), and auto / greedy, auto / HEFT, auto / best single
device (below 1: auto is better); planning time (wall and process CPU; the 2-core
machine is shared with other work, so wall times are inflated: CPU times are the steadier
figure).

Run: ``.venv/bin/python benchmarks/search.py --suite zoo dags scale --out
benchmarks/results/search.json`` (``--append`` merges into an existing file, replacing runs
with the same id); ``--table FILE`` prints the markdown tables of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import time
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

from placewise.cost.roofline import RooflineModel
from placewise.errors import PlacewiseError
from placewise.graph.fuse import fuse
from placewise.graph.ir import Graph, Role
from placewise.graph.load import load_model
from placewise.graph.taskgraph import GENERATORS, generate, parse_taskgraph
from placewise.hardware.load import load_machine
from placewise.hardware.spec import Machine, list_presets
from placewise.schedule import Problem
from placewise.search import plan_search

ZOO_SIZES: dict[str, tuple[str, str]] = {
    "mlp": ("", "layers=8&hidden=2048&batch=16"),
    "resnet": ("", "blocks=8&width=48&image=64"),
    "bert": ("", "layers=6&hidden=512&heads=8&seq=128"),
    "gpt": ("", "layers=6&hidden=512&heads=8&seq=128"),
    "inception": ("", "blocks=4&width=32&image=64"),
}
DAG_SIZES = (10, 30, 100, 1000)
_ONLY: list[str] | None = None  # --only: run just the cases whose id contains one of these


def _machine(name: str) -> Machine:
    return load_machine(name)


def _weights_bytes(g: Graph) -> int:
    return sum(t.nbytes for t in g.tensors if t.role is Role.PARAM)


def _tight(name: str, g: Graph) -> Machine:
    """A preset whose memory binds for ``g`` (see the module docstring)."""
    w = _weights_bytes(g)
    if name == "h100-tight":
        data = load_machine("h100-sxm-server").model_dump(mode="json")
        for d in data["devices"]:
            if d["name"].startswith("gpu"):
                d["memory"][0]["capacity_bytes"] = max(1, int(0.4 * w))
                d["memory"][0]["source"] = "benchmark: cut to 40 % of the fp32 weights"
    else:
        data = load_machine("a100-pcie-server").model_dump(mode="json")
        for d in data["devices"]:
            if d["name"] == "gpu":
                d["memory"][0]["capacity_bytes"] = max(1, int(0.2 * w))
                d["memory"][0]["source"] = "benchmark: cut to 20 % of the fp32 weights"
    data["name"] = name
    return Machine.model_validate(data)


def _run(case: str, group: str, g: Graph, fused: bool, machine: Machine, mname: str,
         objective: str, limit_s: float, dtypes: list[str] | None = None
         ) -> dict[str, Any] | None:
    if _ONLY is not None and not any(o in f"{case}|{mname}|{objective}" for o in _ONLY):
        return None
    w0 = time.perf_counter()
    prob = Problem(g, fuse(g) if fused else None, machine, RooflineModel(machine))
    setup_s = time.perf_counter() - w0
    out: dict[str, Any] = {
        "id": f"{case}|{mname}|{objective}", "group": group, "case": case, "machine": mname,
        "objective": objective, "ops": len(g.ops), "vertices": len(prob.vertices),
        "time_limit_s": limit_s, "dtypes": dtypes, "setup_s": setup_s,
        "load_before": os.getloadavg()[0]}
    w1, c1 = time.perf_counter(), time.process_time()
    try:
        r = plan_search(prob, strategy="auto", objective=objective, time_limit_s=limit_s,
                        seed=0, dtypes=dtypes)
    except PlacewiseError as exc:
        out.update(error=f"{type(exc).__name__}: {exc}", wall_s=time.perf_counter() - w1,
                   cpu_s=time.process_time() - c1)
        return out
    out["wall_s"] = time.perf_counter() - w1
    out["cpu_s"] = time.process_time() - c1
    out["load_after"] = os.getloadavg()[0]
    obj = r.objective_s
    base = dict(r.baselines)
    singles = {k: v for k, v in base.items() if k.startswith("single:")}
    best_single = min(singles.items(), key=lambda kv: (kv[1], kv[0]))
    alts: dict[str, float] = {}
    for a in r.alternatives:
        alts[a.label] = min(alts.get(a.label, math.inf), a.objective_s)
    optimum, source = None, None
    if any(n.startswith("exhaustive: every placement enumerated") for n in r.notes):
        optimum, source = obj, "exhaustive"
    elif any("meets a proven lower bound" in n for n in r.notes):
        optimum, source = r.lower_bound_s, "bound met"
    elif r.cpsat_status == "OPTIMAL" and r.cpsat_bound_s:
        optimum, source = r.cpsat_bound_s, "cpsat"

    def ratio(x: float | None) -> float | None:
        return obj / x if x and math.isfinite(x) and x > 0 else None

    pruned = dict(r.pruned)
    out.update(
        objective_s=obj, makespan_s=r.makespan_s, throughput_rps=r.throughput_rps,
        lower_bound_s=r.lower_bound_s, obj_over_lb=ratio(r.lower_bound_s),
        optimum_s=optimum, optimum_source=source, obj_over_opt=ratio(optimum),
        cpsat_status=r.cpsat_status, cpsat_bound_s=r.cpsat_bound_s, gap=r.gap,
        greedy_s=base.get("greedy"), heft_s=alts.get("heft"),
        best_single=best_single[0], best_single_s=best_single[1],
        vs_greedy=ratio(base.get("greedy")), vs_heft=ratio(alts.get("heft")),
        vs_single=ratio(best_single[1]), chosen=r.chosen, feasible=r.feasible,
        devices_used=r.devices_used, evaluated=r.candidates_evaluated,
        estimates=r.estimates, pruned=pruned,
        infeasible_alternatives=sum(1 for a in r.alternatives if not a.feasible),
        memory_binds=bool(pruned.get("memory")) or any(not a.feasible for a in r.alternatives),
        screened="precision screening" in " ".join(r.notes),
        notes=list(r.notes))
    return out


def suite_zoo(limit_s: float) -> Iterator[dict[str, Any] | None]:
    machines = [*list_presets(), "local"]
    for model, sizes in ZOO_SIZES.items():
        for size, opts in zip(("default", "large"), sizes, strict=True):
            ref = f"zoo:{model}" + (f"?{opts}" if opts else "")
            g = load_model(ref)
            case = f"{model}/{size}"
            for mname in machines:
                yield _run(case, "zoo", g, True, _machine(mname), mname, "latency", limit_s)
            if size == "default":
                for mname in ("h100-sxm-server", "laptop-soc"):
                    yield _run(case, "zoo", g, True, _machine(mname), mname, "throughput",
                               limit_s)
            else:
                yield _run(case, "zoo-tight", g, True, _tight("h100-tight", g), "h100-tight",
                           "latency", limit_s, dtypes=["fp32", "bf16", "fp16"])
                yield _run(case, "zoo-tight", g, True, _tight("a100-tight", g),
                           "a100-tight", "latency", limit_s)


def suite_dags(limit_small_s: float, limit_s: float) -> Iterator[dict[str, Any] | None]:
    machines = [*list_presets(), "local"]
    for kind in GENERATORS:
        for n in DAG_SIZES:
            g = parse_taskgraph(generate(kind, n, seed=0))
            for mname in machines:
                yield _run(f"{kind}-{n}", "dags", g, False, _machine(mname), mname, "latency",
                           limit_small_s if n <= 30 else limit_s)


def suite_scale() -> Iterator[dict[str, Any] | None]:
    for kind in GENERATORS:
        g = parse_taskgraph(generate(kind, 10_000, seed=0))
        for mname in ("h100-sxm-server", "local"):
            yield _run(f"{kind}-10000", "scale", g, False, _machine(mname), mname, "latency",
                       10.0)
    for kind in ("layered", "transformer"):
        g = parse_taskgraph(generate(kind, 100_000, seed=0))
        yield _run(f"{kind}-100000", "scale", g, False, _machine("h100-sxm-server"),
                   "h100-sxm-server", "latency", 120.0)


def _meta() -> dict[str, Any]:
    import ortools

    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import sys

    command = " ".join([".venv/bin/python", "benchmarks/search.py", *sys.argv[1:]])
    return {"date": date.today().isoformat(), "python": platform.python_version(),
            "ortools": ortools.__version__, "cpu": cpu, "cores": os.cpu_count(),
            "command": command, "commands": [command]}


# ---- tables ------------------------------------------------------------------------------------
def _f(x: float | None, fmt: str = ".3f") -> str:
    return "" if x is None else format(x, fmt)


def _t(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return ""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if x >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x * 1e9:.3g} ns"


def table(runs: list[dict[str, Any]]) -> str:
    lines: list[str] = []
    head = ("| case | machine | obj. | ops / vertices | objective | / LB | / optimum | / greedy "
            "| / HEFT | / best single | plan wall (CPU) | chosen |")
    sep = "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- |"
    for group, title in (("zoo", "Zoo models (fused), auto"),
                         ("zoo-tight", "Zoo models, large, memory cut so that it binds"),
                         ("dags", "Generated task graphs, auto"),
                         ("scale", "Large generated graphs, auto")):
        rows = [r for r in runs if r["group"] == group]
        if not rows:
            continue
        lines += ["", f"#### {title}", "", head, sep]
        for r in rows:
            if "error" in r:
                lines.append(f"| {r['case']} | {r['machine']} | {r['objective'][:3]} | "
                             f"{r['ops']} / {r['vertices']} | {r['error'][:90]} | | | | | | "
                             f"{_f(r['wall_s'], '.2f')} s | |")
                continue
            opt = _f(r["obj_over_opt"], ".4f") + (f" ({r['optimum_source']})"
                                                  if r["optimum_source"] else "")
            if not r["optimum_source"] and r.get("cpsat_status"):
                opt = f"gap {_f(r['gap'], '.2f')}"
            greedy = _f(r["vs_greedy"]) if r["vs_greedy"] is not None else "does not fit"
            lines.append(
                f"| {r['case']} | {r['machine']} | {r['objective'][:3]} | "
                f"{r['ops']} / {r['vertices']} | {_t(r['objective_s'])} | "
                f"{_f(r['obj_over_lb'], '.2f')} | {opt} | {greedy} | "
                f"{_f(r['vs_heft'])} | {_f(r['vs_single'])} ({r['best_single'][7:]}) | "
                f"{_f(r['wall_s'], '.2f')} s ({_f(r['cpu_s'], '.2f')} s) | {r['chosen']} |")
    ok = [r for r in runs if "error" not in r]
    if ok:
        lines += ["", "#### Summary", ""]

        def gmean(key: str) -> str:
            xs = [r[key] for r in ok if r.get(key)]
            return f"{math.exp(statistics.mean(math.log(x) for x in xs)):.3f} ({len(xs)} runs)"

        worse = [r for r in ok if (r["vs_single"] or 0) > 1 + 1e-12
                 or (r["vs_greedy"] or 0) > 1 + 1e-12]
        lines.append(f"- runs: {len(ok)} ({sum(1 for r in runs if 'error' in r)} errors); "
                     f"auto worse than a baseline in {len(worse)}")
        small = [r for r in ok if r["ops"] <= 30 and r["obj_over_opt"] is not None]
        within = [r for r in small if r["obj_over_opt"] <= 1.02]
        lines.append(f"- graphs up to 30 ops with a proven optimum: {len(small)}; auto within "
                     f"2 % of it in {len(within)}")
        better = [r for r in ok if r["vs_greedy"] is not None and r["vs_greedy"] <= 0.9]
        nf = [r for r in ok if r["vs_greedy"] is None]
        lines.append(f"- auto at least 10 % better than greedy in {len(better)} of {len(ok)} "
                     f"runs (greedy does not fit in memory in {len(nf)} more)")
        lines.append(f"- geometric means: auto/greedy {gmean('vs_greedy')}, auto/HEFT "
                     f"{gmean('vs_heft')}, auto/best single device {gmean('vs_single')}, "
                     f"objective/lower bound {gmean('obj_over_lb')}")
        binds = [r for r in ok if r["memory_binds"]]
        lines.append(f"- memory binds (assignments pruned or plans rejected for memory) in "
                     f"{len(binds)} runs")
    timing = sorted({r["ops"] for r in runs if r["group"] in ("dags", "scale")})
    if timing:
        lines += ["", "#### Planning time vs op count (generated graphs, median over kinds "
                  "and machines)", "", "| ops | runs | time limit | wall | CPU | "
                  "problem setup (wall) |", "| ---: | ---: | ---: | ---: | ---: | ---: |"]
        for n in timing:
            rs = [r for r in runs if r["ops"] == n and r["group"] in ("dags", "scale")]
            lines.append(
                f"| {n:,} | {len(rs)} | {statistics.median(r['time_limit_s'] for r in rs):g} s "
                f"| {statistics.median(r['wall_s'] for r in rs):.2f} s "
                f"(max {max(r['wall_s'] for r in rs):.2f}) "
                f"| {statistics.median(r['cpu_s'] for r in rs):.2f} s "
                f"(max {max(r['cpu_s'] for r in rs):.2f}) "
                f"| {statistics.median(r['setup_s'] for r in rs):.2f} s |")
    return "\n".join(lines)


def _finite(x: Any) -> Any:
    """JSON without Infinity/NaN: non-finite numbers become null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", nargs="*", default=["zoo", "dags", "scale"],
                    choices=["zoo", "dags", "scale", "cli"],
                    help="cli: the wall time of the real plan command (benchmarks/search_cli.py)")
    ap.add_argument("--zoo-limit", type=float, default=10.0)
    ap.add_argument("--dag-limit-small", type=float, default=10.0, help="graphs up to 30 ops")
    ap.add_argument("--dag-limit", type=float, default=5.0)
    ap.add_argument("--out", default="benchmarks/results/search.json")
    ap.add_argument("--append", action="store_true")
    ap.add_argument("--only", nargs="*", default=None, metavar="TEXT",
                    help="run only the cases whose id (case|machine|objective) contains one "
                         "of these")
    ap.add_argument("--table", metavar="FILE", help="print the tables of a results file")
    args, rest = ap.parse_known_args()
    if args.suite == ["cli"]:  # its own options and results file (search_cli.json)
        from search_cli import main as cli_main

        cli_main(rest + (["--table", args.table] if args.table else []))
        return
    if rest:
        ap.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.table:
        data = json.loads(Path(args.table).read_text())
        print(table(data["runs"]))
        return
    global _ONLY
    _ONLY = args.only
    path = Path(args.out)
    runs: dict[str, dict[str, Any]] = {}
    meta = _meta()
    if args.append and path.is_file():
        old = json.loads(path.read_text())
        runs = {r["id"]: r for r in old["runs"]}
        commands = [*old.get("meta", {}).get("commands", []), meta["command"]]
        meta["commands"] = list(dict.fromkeys(commands))
    gens: list[Iterator[dict[str, Any] | None]] = []
    if "zoo" in args.suite:
        gens.append(suite_zoo(args.zoo_limit))
    if "dags" in args.suite:
        gens.append(suite_dags(args.dag_limit_small, args.dag_limit))
    if "scale" in args.suite:
        gens.append(suite_scale())
    path.parent.mkdir(parents=True, exist_ok=True)
    for gen in gens:
        for r in gen:
            if r is None:
                continue
            runs[r["id"]] = r
            print(json.dumps({k: r.get(k) for k in ("id", "vertices", "objective_s",
                                                     "obj_over_lb", "obj_over_opt",
                                                     "vs_greedy", "vs_single", "wall_s",
                                                     "cpu_s", "chosen", "error")}),
                  flush=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"meta": meta, "runs": [_finite(x) for x in runs.values()]},
                                      indent=1))
            os.replace(tmp, path)


if __name__ == "__main__":
    main()
