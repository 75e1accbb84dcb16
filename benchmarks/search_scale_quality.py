"""Search at scale: how fast local search scores candidates, and how much ``auto`` gains on
HEFT, on generated DAGs of 1,000 and 10,000 ops.

**Graphs.** ``placewise.graph.taskgraph.generate(kind, n, seed=0, mean_edge_bytes=B)``:
``layered`` (its default width, about sqrt(n)) and ``fork-join`` with ``width`` = sqrt(n)
(stages of one fork fanning out to sqrt(n) tasks that join in the next fork), on two
multi-device presets, ``h100-sxm-server`` (cpu, gpu0, gpu1; PCIe and NVLink) and
``a100-pcie-server`` (cpu, gpu over PCIe), with the roofline cost model.

**CCR** (communication-to-computation ratio) is measured on the problem as built: the mean,
over 300 sampled edges and every ordered pair of candidates on different devices (fp32), of
the edge's crossing time (``Model.delay``: link latency + bytes / bandwidth per hop, as the
scheduler charges it), divided by the mean over 300 sampled vertices of their mean fp32
compute time over the devices. It is nearly affine in ``mean_edge_bytes`` (latency is the
constant part), so ``B`` for a target CCR is solved from two 1,000-op probes (1e6 and 1e7
bytes) per kind and preset; the CCR measured on each graph is reported.

**Runs.** ``plan_search(strategy="auto", time_limit_s=T, seed=0)`` (``T`` = 10 s at 1k ops,
20 s at 10k, so that textbook HEFT fits in the budget at 10k). Reported: ``auto`` objective
(makespan), HEFT's (the ``heft`` alternative auto scored), auto / HEFT, auto / best start
(the best of the baselines and HEFT that local search started from: what search added),
auto / lower bound, the plan chosen, and local search's moves. Summary: geometric mean of
auto / HEFT over 1k-10k layered and fork-join at CCR >= 1 (target <= 0.95) and the worst
(target <= 1).

**Evaluations per second.** For layered and fork-join at 1k and 10k ops (CCR 1,
``h100-sxm-server``, int8 only as precision screening leaves it at 10k), local search runs
alone from HEFT's plan for ``--rate-work`` seconds of work; reported: moves scored per wall
second of the walk (all of it), per second of the estimator alone (scheduler checkpoints
taken out), the share of moves that needed a re-timing (moves on the longest path; batches
of deferred ones), and the largest relative error of a deferred score found when its batch
was re-timed (``Estimator.drift``).

Run: ``nice -n 10 .venv/bin/python benchmarks/search_scale_quality.py [--sizes 1000 10000]
[--out benchmarks/results/search_scale_quality.json]``; ``--table FILE`` prints the tables.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import re
import sys
import time
from datetime import date
from pathlib import Path
from typing import Any

from placewise.cost.roofline import RooflineModel
from placewise.graph.taskgraph import generate, parse_taskgraph
from placewise.hardware.load import load_machine
from placewise.hardware.spec import Machine
from placewise.schedule import Objective, Problem
from placewise.search import plan_search
from placewise.search.heft import heft_choice
from placewise.search.local import Estimator, local_search
from placewise.search.result import Tracker
from placewise.search.space import Budget, Model, SearchSpace
from placewise.units import DType

PRESETS = ("h100-sxm-server", "a100-pcie-server")
KINDS = ("layered", "fork-join")
CCRS = (0.1, 1.0, 5.0)
LIMIT_S = {1000: 10.0, 10000: 20.0}


def _graph_dict(kind: str, n: int, edge_bytes: float) -> dict[str, Any]:
    width = None if kind == "layered" else max(1, round(math.sqrt(n)))
    return generate(kind, n, seed=0, mean_edge_bytes=edge_bytes, width=width)


def measure_ccr(prob: Problem, sample: int = 300) -> float:
    """The problem's CCR (see the module docstring)."""
    sp = SearchSpace(prob, [DType.FP32])
    model = Model(sp)
    ed = model.edges
    rng = random.Random(0)
    vs = rng.sample(range(sp.n), min(sample, sp.n))
    comp = sum(sum(sp.cost_s[i]) / len(sp.cost_s[i]) for i in vs) / len(vs)
    es = rng.sample(range(len(ed.src)), min(sample, len(ed.src)))
    tot, cnt = 0.0, 0
    for e in es:
        u, v = ed.src[e], ed.dst[e]
        for ku, du in enumerate(sp.cand_dev[u]):
            for kv, dv in enumerate(sp.cand_dev[v]):
                if du != dv:
                    tot += model.delay(e, ku, kv)
                    cnt += 1
    return (tot / max(1, cnt)) / comp


def edge_bytes_for(kind: str, m: Machine, target: float) -> float:
    """``mean_edge_bytes`` giving CCR ``target`` (affine fit on two 1,000-op probes)."""
    def probe(b: float) -> float:
        return measure_ccr(Problem(parse_taskgraph(_graph_dict(kind, 1000, b)), None, m,
                                   RooflineModel(m)))
    c0, c1 = probe(1e6), probe(1e7)
    slope = (c1 - c0) / 9e6
    return max(1.0, 1e6 + (target - c0) / slope)


_MOVES = re.compile(r"(\d+) moves, (\d+) accepted, (\d+) scored by the scheduler")


def run_case(kind: str, n: int, hw: str, target: float, edge_bytes: float) -> dict[str, Any]:
    m = load_machine(hw)
    g = parse_taskgraph(_graph_dict(kind, n, edge_bytes))
    prob = Problem(g, None, m, RooflineModel(m))
    ccr = measure_ccr(prob)
    limit = LIMIT_S.get(n, 10.0)
    w0, c0 = time.perf_counter(), time.process_time()
    r = plan_search(prob, strategy="auto", time_limit_s=limit, seed=0)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    alts: dict[str, float] = {}
    local_note = ""
    for a in r.alternatives:
        alts[a.label] = min(alts.get(a.label, math.inf), a.objective_s)
        if a.label == "local":
            local_note = a.note
    obj = r.objective_s
    heft = alts.get("heft")
    starts = {k: v for k, v in alts.items() if k != "local"}
    best_start = min(starts.values()) if starts else None
    moves = _MOVES.search(local_note)
    return {
        "id": f"{kind}|{n}|{hw}|{target:g}", "kind": kind, "ops": n, "machine": hw,
        "ccr_target": target, "ccr": ccr, "mean_edge_bytes": edge_bytes,
        "time_limit_s": limit, "wall_s": wall, "cpu_s": cpu, "objective_s": obj,
        "heft_s": heft, "auto_over_heft": obj / heft if heft else None,
        "best_start_s": best_start,
        "auto_over_best_start": obj / best_start if best_start else None,
        "lower_bound_s": r.lower_bound_s,
        "auto_over_lb": obj / r.lower_bound_s if r.lower_bound_s > 0 else None,
        "chosen": r.chosen, "evaluated": r.candidates_evaluated,
        "local_moves": int(moves.group(1)) if moves else None,
        "local_accepted": int(moves.group(2)) if moves else None,
        "local_scored": int(moves.group(3)) if moves else None,
        "heft_skipped": heft is None, "notes": list(r.notes),
        "load_before": os.getloadavg()[0]}


def rate_case(kind: str, n: int, hw: str, edge_bytes: float, work_s: float
              ) -> dict[str, Any]:
    """Local search alone from HEFT's plan: moves scored per second (module docstring)."""
    m = load_machine(hw)
    prob = Problem(parse_taskgraph(_graph_dict(kind, n, edge_bytes)), None, m,
                   RooflineModel(m))
    sp = SearchSpace(prob, [DType.INT8])
    model = Model(sp)
    start = heft_choice(model, throughput=False)
    tr = Tracker(prob, Objective.LATENCY, Budget(work_s, deadline_s=10 * work_s))
    start_key, _ = tr.evaluate(sp.placement(start))
    spent = [0.0]
    inner = tr.evaluate

    def timed(*args: Any, **kw: Any) -> Any:
        t = time.perf_counter()
        try:
            return inner(*args, **kw)
        finally:
            spent[0] += time.perf_counter() - t

    tr.evaluate = timed  # type: ignore[method-assign]
    made: list[Estimator] = []
    import placewise.search.local as local_mod

    class Counting(Estimator):
        def __init__(self, *a: Any, **kw: Any) -> None:
            super().__init__(*a, **kw)
            made.append(self)

    local_mod.Estimator = Counting  # type: ignore[misc]
    try:
        w0 = time.perf_counter()
        out = local_search(model, tr, [("heft", start, start_key)], seed=0)
        wall = time.perf_counter() - w0
    finally:
        local_mod.Estimator = Estimator  # type: ignore[misc]
    est_wall = max(1e-9, wall - spent[0])
    full = made[0].full_scores if made else 0
    return {"kind": kind, "ops": n, "machine": hw, "work_s": work_s, "wall_s": wall,
            "checkpoint_wall_s": spent[0], "proposed": out.proposed,
            "accepted": out.accepted, "scored": out.scored,
            "evals_per_s": out.proposed / wall, "estimator_evals_per_s": out.proposed / est_wall,
            "retimed_share": full / max(1, out.proposed),
            "deferred_drift": made[0].drift if made else None,
            "gain_over_heft": out.key[1] / start_key[1]}


def _gmean(xs: list[float]) -> float | None:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for hw in (*PRESETS, "all"):
        sel = [r for r in runs if (hw == "all" or r["machine"] == hw)
               and r["ccr_target"] >= 1 and r["auto_over_heft"]]
        xs = [r["auto_over_heft"] for r in sel]
        ys = [r["auto_over_best_start"] for r in sel if r["auto_over_best_start"]]
        out[hw] = {"runs": len(sel), "gmean_auto_over_heft": _gmean(xs),
                   "worst_auto_over_heft": max(xs) if xs else None,
                   "gmean_auto_over_best_start": _gmean(ys)}
    return out


def by_kind_ccr(runs: list[dict[str, Any]]) -> list[tuple[str, float, dict[str, Any]]]:
    """Geometric means of auto / HEFT, auto / best start and auto / lower bound per graph
    kind and target CCR (over presets and sizes)."""
    out = []
    for kind in dict.fromkeys(r["kind"] for r in runs):
        for c in sorted({r["ccr_target"] for r in runs if r["kind"] == kind}):
            sel = [r for r in runs if r["kind"] == kind and r["ccr_target"] == c]
            out.append((kind, c, {"runs": len(sel), **{
                k: _gmean([r[k] for r in sel if r[k]])
                for k in ("auto_over_heft", "auto_over_best_start", "auto_over_lb")}}))
    return out


def _f(x: float | None, fmt: str = ".3f") -> str:
    return "—" if x is None else format(x, fmt)


def table(doc: dict[str, Any]) -> str:
    lines = ["| kind | ops | machine | CCR (measured) | auto / HEFT | auto / best start | "
             "auto / lower bound | chosen | local moves (scored) | wall s |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |"]
    for r in doc["runs"]:
        lines.append(
            f"| {r['kind']} | {r['ops']} | {r['machine']} | {r['ccr_target']:g} "
            f"({r['ccr']:.2f}) | {_f(r['auto_over_heft'])} | "
            f"{_f(r['auto_over_best_start'])} | {_f(r['auto_over_lb'])} | {r['chosen']} | "
            f"{r['local_moves'] if r['local_moves'] is not None else '—'} "
            f"({r['local_scored'] if r['local_scored'] is not None else '—'}) | "
            f"{r['wall_s']:.1f} |")
    lines += ["", "| machine | runs (CCR >= 1) | geomean auto / HEFT | worst | "
              "geomean auto / best start |", "| --- | ---: | ---: | ---: | ---: |"]
    for hw, s in doc["summary"].items():
        lines.append(f"| {hw} | {s['runs']} | {_f(s['gmean_auto_over_heft'])} | "
                     f"{_f(s['worst_auto_over_heft'])} | "
                     f"{_f(s['gmean_auto_over_best_start'])} |")
    lines += ["", "| kind | CCR | runs | geomean auto / HEFT | geomean auto / best start | "
              "geomean auto / lower bound |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for kind, c, s in by_kind_ccr(doc["runs"]):
        lines.append(f"| {kind} | {c:g} | {s['runs']} | {_f(s['auto_over_heft'])} | "
                     f"{_f(s['auto_over_best_start'])} | {_f(s['auto_over_lb'])} |")
    lines += ["", "| kind | ops | moves/s (walk) | moves/s (estimator) | re-timed share | "
              "deferred-score error (max) | local / HEFT |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in doc["rates"]:
        lines.append(f"| {r['kind']} | {r['ops']} | {r['evals_per_s']:.0f} | "
                     f"{r['estimator_evals_per_s']:.0f} | {r['retimed_share']:.2f} | "
                     f"{_f(r.get('deferred_drift'), '.2%')} | {r['gain_over_heft']:.3f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--presets", nargs="+", default=list(PRESETS))
    ap.add_argument("--kinds", nargs="+", default=list(KINDS))
    ap.add_argument("--ccrs", type=float, nargs="+", default=list(CCRS))
    ap.add_argument("--rate-work", type=float, default=4.0)
    ap.add_argument("--out", default="benchmarks/results/search_scale_quality.json")
    ap.add_argument("--table")
    args = ap.parse_args()
    if args.table:
        print(table(json.loads(Path(args.table).read_text())))
        return
    runs: list[dict[str, Any]] = []
    rates: list[dict[str, Any]] = []
    bytes_for: dict[tuple[str, str, float], float] = {}
    for hw in args.presets:
        m = load_machine(hw)
        for kind in args.kinds:
            for c in args.ccrs:
                bytes_for[(hw, kind, c)] = edge_bytes_for(kind, m, c)
    for kind in args.kinds:
        for n in args.sizes:
            b = bytes_for.get((args.presets[0], kind, 1.0)) or edge_bytes_for(
                kind, load_machine(args.presets[0]), 1.0)
            rates.append(rate_case(kind, n, args.presets[0], b, args.rate_work))
            r = rates[-1]
            print(f"rate {kind} {n}: {r['evals_per_s']:.0f}/s walk, "
                  f"{r['estimator_evals_per_s']:.0f}/s estimator", file=sys.stderr, flush=True)
    for hw in args.presets:
        for kind in args.kinds:
            for n in args.sizes:
                for c in args.ccrs:
                    r = run_case(kind, n, hw, c, bytes_for[(hw, kind, c)])
                    runs.append(r)
                    print(f"{r['id']}: ccr {r['ccr']:.2f} auto/heft "
                          f"{_f(r['auto_over_heft'])} auto/best start "
                          f"{_f(r['auto_over_best_start'])} ({r['chosen']}, "
                          f"{r['wall_s']:.1f} s)", file=sys.stderr, flush=True)
    doc = {"meta": {"date": date.today().isoformat(), "python": platform.python_version(),
                    "cpus": os.cpu_count(), "note": "provisional: shared 2-core machine"},
           "runs": runs, "rates": rates, "summary": summary(runs)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1, allow_nan=False, default=str) + "\n")
    print(table(doc))


if __name__ == "__main__":
    main()
