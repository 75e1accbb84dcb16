"""Plans run for real on this machine: how well did the prediction hold, term by term?

For every zoo model at three batch sizes: profile the model's ops on the local devices
(``placewise.calibrate.profile``, one calibration per batch size, cached under ``--cache``,
default ``~/.cache/placewise/bench-calibrations``),
plan it on ``local`` with the calibrated model (fused regions, objective latency) with
three strategies:

- ``single``: the best single device (the ``single:DEVICE`` baseline of the auto search
  with the lowest makespan),
- ``auto`` and ``greedy``,
- ``throughput``: ``auto`` with the throughput objective (pipelining across devices),

then ``validate_plan`` each plan: isolated latency (p50 of ``--requests`` requests),
pipelined throughput (a stream of about ``--stream-s`` seconds), memory high-water per
device, output quality against the fp32 reference, and a whole-model onnxruntime baseline
on all cores (once per model and batch: it does not depend on the plan).

Prints a table and a summary (median and worst errors, plan vs baseline) and writes JSON
(default ``benchmarks/results/validation.json``), including each plan's attribution terms.

    .venv/bin/python benchmarks/validation.py                       # everything
    .venv/bin/python benchmarks/validation.py --models mlp --batches 1 --requests 10

Errors are signed: (measured - predicted) / predicted. The machine may be shared with
other work while this runs; the JSON records the load average of every validation.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

#: where the calibrations are cached (also read by two_stage.py and export_roundtrip.py)
CACHE_DIR = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                         "placewise", "bench-calibrations")


def context_calibration_path(cache: Path, name: str, batch: int, machine: Any) -> Path:
    """The cached model-order calibration of zoo model ``name`` at ``batch``."""
    return cache / f"ctx-{name}-b{batch}-{machine.fingerprint()[7:19]}.json"


def _now() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()


def _calibrations(name: str, batches: list[int], machine: Any, cache: Path,
                  max_time_s: float, log: Any, context: bool = True) -> dict[int, Any]:
    from placewise.calibrate.profile import profile_models
    from placewise.cost.calibrated import Calibration, load_calibration
    from placewise.runtime.opexec import load_source

    out: dict[int, Calibration] = {}
    todo = []
    for b in batches:
        path = cache / f"cal-{name}-b{b}-{machine.fingerprint()[7:19]}.json"
        if path.is_file():
            out[b] = load_calibration(path)
        else:
            src = load_source(f"zoo:{name}", batch=b)
            todo.append((b, path, src))
    if todo:
        log(f"profiling {name} at batch {[b for b, _, _ in todo]}")
        t0 = time.perf_counter()
        cals = profile_models([(src.graph, src) for _, _, src in todo], machine,
                              max_time_s=max_time_s)
        log(f"  profiled in {time.perf_counter() - t0:.0f} s")
        for (b, path, _), cal in zip(todo, cals, strict=True):
            cal.save(path)
            out[b] = cal
    if not context:
        return out
    from placewise.calibrate.context import profile_in_context

    for b in batches:
        path = context_calibration_path(cache, name, b, machine)
        if path.is_file():
            out[b] = load_calibration(path)
            continue
        src = load_source(f"zoo:{name}", batch=b)
        t0 = time.perf_counter()
        out[b] = profile_in_context(src.graph, src, machine, out[b])
        log(f"  {name} b{b} in model order: {time.perf_counter() - t0:.0f} s")
        out[b].save(path)
    return out


def _plans(name: str, batch: int, machine: Any, cal: Any, time_limit_s: float,
           throughput: bool = True) -> list[tuple[str, Any]]:
    from placewise.cost.load import load_cost_model
    from placewise.graph.fuse import fuse
    from placewise.graph.zoo import load_zoo
    from placewise.plan import build_plan
    from placewise.schedule.placement import Problem
    from placewise.search.api import plan_search

    graph = load_zoo(f"zoo:{name}", batch=batch)
    problem = Problem(graph, fuse(graph), machine, load_cost_model(machine, cal), batch=batch)
    ref = f"zoo:{name}"
    auto = plan_search(problem, strategy="auto", time_limit_s=time_limit_s)
    singles = [(obj, label) for label, obj in auto.baselines if label.startswith("single:")]
    best_single = min(singles)[1]
    plans = [("single", build_plan(problem, plan_search(problem, strategy=best_single),
                                   model_ref=ref, strategy=best_single))]
    plans.append(("auto", build_plan(problem, auto, model_ref=ref, strategy="auto")))
    plans.append(("greedy", build_plan(problem, plan_search(problem, strategy="greedy"),
                                       model_ref=ref, strategy="greedy")))
    if throughput:
        tput = plan_search(problem, strategy="auto", objective="throughput",
                           time_limit_s=time_limit_s)
        plans.append(("throughput", build_plan(problem, tput, model_ref=ref, strategy="auto",
                                               objective="throughput")))
    return plans


def _row(name: str, batch: int, kind: str, plan: Any, rep: Any) -> dict[str, Any]:
    a = rep.attribution
    top_terms = sorted(a.terms_s.items(), key=lambda kv: -abs(kv[1]))[:3]
    fp32 = next((b for b in rep.baselines if b.precision == "fp32" and b.available), None)
    q = rep.quality[0] if rep.quality else None
    tp = rep.throughput_attribution
    return {
        "model": name, "batch": batch, "plan": kind, "strategy": plan.strategy,
        "devices": sorted({v["device"] for v in plan.placement.values()}),
        "dtypes": sorted({v["dtype"] for v in plan.placement.values()}),
        "predicted_latency_s": rep.predicted_latency_s,
        "latency_p50_s": rep.latency.p50_s, "latency_p90_s": rep.latency.p90_s,
        "latency_p99_s": rep.latency.p99_s, "latency_n": rep.latency.n,
        "latency_error": rep.latency_error,
        "latency_on_cpu_p50_s": rep.latency_on_cpu.p50_s if rep.latency_on_cpu else None,
        "latency_on_cpu_error": rep.latency_on_cpu_error,
        "critical_path_off_cpu_s": a.off_cpu_s,
        "client_handoff_s": a.head_s,
        "dispatch_per_step_s": statistics.median(
            [s.terms_s["launch/dispatch"] for s in a.critical_path
             if s.kind in ("compute", "convert")] or [0.0]),
        "predicted_throughput_rps": rep.predicted_throughput_rps,
        "throughput_rps": rep.throughput_rps, "throughput_error": rep.throughput_error,
        "memory_error": rep.memory_error,
        "memory": [m.to_json() for m in rep.memory],
        "quality_rel_l2_max": q.rel_l2_max if q else None,
        "quality_top1": q.top1_agreement if q else None,
        "baseline_p50_s": fp32.latency.p50_s if fp32 and fp32.latency else None,
        "baseline_rps": fp32.throughput_rps if fp32 else None,
        "plan_latency_speedup": fp32.plan_latency_speedup if fp32 else None,
        "plan_throughput_ratio": fp32.plan_throughput_ratio if fp32 else None,
        "attribution_terms_s": dict(a.terms_s),
        "attribution_top": [[k, v] for k, v in top_terms],
        "attribution_kinds": [list(x) for x in a.by_kind[:3]],
        "attribution_edges": [list(x) for x in a.by_edge[:3]],
        "throughput_terms_s": dict(tp.terms_s) if tp else None,
        "throughput_bottleneck": [tp.predicted_bottleneck, tp.measured_bottleneck] if tp
        else None,
        "load_average_1m": rep.tags.get("load_average_1m"),
        "explanation": a.explanation,
    }


def _row_of_repeats(name: str, batch: int, kind: str, plan: Any, reps: list[Any]
                    ) -> dict[str, Any]:
    """The row of the median-latency repeat, with latency and throughput the medians
    over all repeats (and every repeat's figures listed)."""
    order = sorted(reps, key=lambda r: r.latency.p50_s)
    mid = order[(len(order) - 1) // 2]
    row = _row(name, batch, kind, plan, mid)
    base = next((r for r in reps if any(b.available for b in r.baselines)), None)
    if base is not None and base is not mid:
        fp32 = next((b for b in base.baselines if b.precision == "fp32" and b.available), None)
        if fp32 is not None and fp32.latency is not None:
            row["baseline_p50_s"] = fp32.latency.p50_s
            row["baseline_rps"] = fp32.throughput_rps
    p50s = [r.latency.p50_s for r in reps]
    rps = [r.throughput_rps for r in reps]
    pred = plan.predicted_latency_s
    row["repeats"] = len(reps)
    row["latency_p50_s"] = statistics.median(p50s)
    row["latency_p50_runs_s"] = p50s
    row["latency_error"] = row["latency_p50_s"] / pred - 1 if pred else None
    row["latency_error_runs"] = [x / pred - 1 for x in p50s] if pred else []
    row["throughput_rps"] = statistics.median(rps)
    row["throughput_runs_rps"] = rps
    ptp = plan.throughput_rps
    row["throughput_error"] = row["throughput_rps"] / ptp - 1 if ptp else None
    mem = [r.memory_error for r in reps if r.memory_error is not None]
    row["memory_error"] = statistics.median(mem) if mem else None
    if row.get("baseline_p50_s"):
        row["plan_latency_speedup"] = row["baseline_p50_s"] / row["latency_p50_s"]
        row["plan_throughput_ratio"] = row["throughput_rps"] / row["baseline_rps"]
    return row


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    def stats(key: str) -> dict[str, Any]:
        vals = [r[key] for r in rows if r.get(key) is not None]
        if not vals:
            return {}
        ab = [abs(v) for v in vals]
        worst = max(vals, key=abs)
        return {"n": len(vals), "median_abs": statistics.median(ab), "worst": worst,
                "median_signed": statistics.median(vals)}

    out = {"latency_error": stats("latency_error"),
           "latency_on_cpu_error": stats("latency_on_cpu_error"),
           "client_handoff_s": stats("client_handoff_s"),
           "dispatch_per_step_s": stats("dispatch_per_step_s"),
           "throughput_error": stats("throughput_error"),
           "memory_error": stats("memory_error")}
    lat = [abs(r["latency_error"]) for r in rows if r.get("latency_error") is not None]
    out["latency_within_10pct"] = sum(v <= 0.10 for v in lat)
    out["latency_within_25pct"] = sum(v <= 0.25 for v in lat)
    runs = [e for r in rows for e in r.get("latency_error_runs", [])]
    if runs:
        out["latency_error_every_run"] = {
            "n": len(runs), "median_abs": statistics.median(abs(e) for e in runs),
            "within_10pct": sum(abs(e) <= 0.10 for e in runs),
            "within_25pct": sum(abs(e) <= 0.25 for e in runs)}
    spread = [max(r["latency_p50_runs_s"]) / min(r["latency_p50_runs_s"]) - 1 for r in rows
              if len(r.get("latency_p50_runs_s", [])) > 1]
    if spread:
        # the same plan's p50 from one repeat to the next: the noise floor of this machine
        out["repeat_p50_spread"] = {"median": statistics.median(spread), "worst": max(spread)}
    by_kind: dict[str, list[float]] = {}
    for r in rows:
        if r.get("latency_error") is not None:
            by_kind.setdefault(r["plan"], []).append(abs(r["latency_error"]))
    out["latency_error_median_abs_by_plan"] = {k: statistics.median(v)
                                               for k, v in sorted(by_kind.items())}
    q = [r["quality_rel_l2_max"] for r in rows if r.get("quality_rel_l2_max") is not None]
    out["quality_rel_l2_worst"] = max(q) if q else None
    sp = [r["plan_latency_speedup"] for r in rows if r.get("plan_latency_speedup")]
    out["plan_beats_baseline_latency"] = sum(v >= 1 for v in sp)
    tr = [r["plan_throughput_ratio"] for r in rows if r.get("plan_throughput_ratio")]
    out["plan_beats_baseline_throughput"] = sum(v >= 1 for v in tr)
    terms: dict[str, list[float]] = {}
    for r in rows:
        d = r["predicted_latency_s"]
        for k, v in r["attribution_terms_s"].items():
            terms.setdefault(k, []).append(v / d if d else 0.0)
    out["median_term_share_of_prediction"] = {k: statistics.median(v)
                                              for k, v in terms.items()}
    return out


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v * 100:+.0f}%"


def _t(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v * 1e3:.3g} ms" if v >= 1e-3 else f"{v * 1e6:.3g} us"


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| model | batch | plan | devices | pred | p50 | lat err | lat err per run | "
            "on-CPU err | tput err | mem err | rel L2 | vs ORT (lat / tput) | largest terms |")
    lines = [head, "|" + "---|" * 14]
    for r in rows:
        sp, tr = r["plan_latency_speedup"], r["plan_throughput_ratio"]
        vs = "n/a" if not sp or not tr else f"x{sp:.2f} / x{tr:.2f}"
        top = ", ".join(f"{k} {v * 1e6:+.0f}us" for k, v in r["attribution_top"][:2])
        ql = r["quality_rel_l2_max"]
        lines.append(
            f"| {r['model']} | {r['batch']} | {r['plan']} ({r['strategy']}) | "
            f"{'+'.join(r['devices'])} {'/'.join(r['dtypes'])} | "
            f"{_t(r['predicted_latency_s'])} | {_t(r['latency_p50_s'])} | "
            f"{_pct(r['latency_error'])} | "
            f"{' '.join(_pct(e) for e in r.get('latency_error_runs', []))} | "
            f"{_pct(r.get('latency_on_cpu_error'))} | "
            f"{_pct(r['throughput_error'])} | "
            f"{_pct(r['memory_error'])} | {'n/a' if ql is None else f'{ql:.1e}'} | {vs} | "
            f"{top} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="mlp,resnet,bert,gpt,inception")
    p.add_argument("--batches", default="1,4,16")
    p.add_argument("--requests", type=int, default=20)
    p.add_argument("--stream-s", type=float, default=1.0)
    p.add_argument("--time-limit", type=float, default=10.0)
    p.add_argument("--profile-max-time-s", type=float, default=0.25)
    p.add_argument("--cache", default=CACHE_DIR)
    p.add_argument("--out", default="benchmarks/results/validation.json")
    p.add_argument("--repeats", type=int, default=3,
                   help="validations of each plan, interleaved across the plans")
    p.add_argument("--no-throughput", action="store_true",
                   help="no throughput-objective plans")
    p.add_argument("--no-context", action="store_true",
                   help="op-by-op calibration only (no model-order run)")
    p.add_argument("--table", metavar="RESULTS",
                   help="print the table and summary of a results file and exit")
    args = p.parse_args(argv)
    if args.table:
        data = json.loads(Path(args.table).read_text())
        print(table(data["rows"]))
        print()
        print(json.dumps(_summary(data["rows"]), indent=1))
        return 0

    from placewise.hardware.probe import load_local
    from placewise.validate import validate_plan

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    machine = load_local()
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    models = [m for m in args.models.split(",") if m]
    batches = [int(b) for b in args.batches.split(",") if b]
    rows: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    started = _now()
    load_before = os.getloadavg()[0]
    t_all = time.perf_counter()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for name in models:
        cals = _calibrations(name, batches, machine, cache, args.profile_max_time_s, log,
                             context=not args.no_context)
        for b in batches:
            try:
                plans = _plans(name, b, machine, cals[b], args.time_limit,
                               throughput=not args.no_throughput)
            except Exception as exc:  # a search failure is recorded, the benchmark goes on
                failures.append({"model": name, "batch": b, "stage": "plan",
                                 "error": f"{type(exc).__name__}: {exc}"})
                log(f"{name} b{b}: planning failed: {exc}")
                continue
            # each plan validated `repeats` times, interleaved (single, auto, greedy,
            # single, ...): this machine's speed drifts by tens of percent over seconds, so
            # the repeats sample different moments; the row reports the median
            reports: dict[str, list[Any]] = {kind: [] for kind, _ in plans}
            baseline_done = False
            for rep_i in range(args.repeats):
                for kind, plan in plans:
                    if rep_i == 0:
                        log(f"{name} b{b} {kind} ({plan.strategy}): predicted "
                            f"{plan.predicted_latency_s * 1e6:.0f} us")
                    try:
                        rep = validate_plan(plan, machine=machine, requests=args.requests,
                                            stream_s=args.stream_s,
                                            baseline=not baseline_done,
                                            keep_telemetry=False)
                    except Exception as exc:
                        failures.append({"model": name, "batch": b, "plan": kind,
                                         "stage": "validate",
                                         "error": f"{type(exc).__name__}: {exc}"})
                        log(f"  validation failed: {exc}")
                        continue
                    baseline_done = baseline_done or any(x.available for x in rep.baselines)
                    reports[kind].append(rep)
            first_row: dict[str, Any] | None = None
            for kind, plan in plans:
                reps = reports[kind]
                if not reps:
                    continue
                row = _row_of_repeats(name, b, kind, plan, reps)
                if first_row is None:
                    first_row = row
                else:  # the baseline does not depend on the plan: reuse it
                    for key in ("baseline_p50_s", "baseline_rps"):
                        row[key] = first_row[key]
                    if row["baseline_p50_s"]:
                        row["plan_latency_speedup"] = row["baseline_p50_s"] / row["latency_p50_s"]
                        row["plan_throughput_ratio"] = row["throughput_rps"] / row["baseline_rps"]
                rows.append(row)
                log(f"  {kind}: p50 {row['latency_p50_s'] * 1e6:.0f} us "
                    f"({_pct(row['latency_error'])}; runs "
                    f"{', '.join(_pct(e) for e in row['latency_error_runs'])}), "
                    f"{row['throughput_rps']:.0f}/s ({_pct(row['throughput_error'])}), "
                    f"memory {_pct(row['memory_error'])}, load {row['load_average_1m']}")
                out.write_text(json.dumps({"rows": rows, "failures": failures}, indent=1))
    result = {
        "command": "python " + " ".join([sys.argv[0], *(argv if argv is not None
                                                        else sys.argv[1:])]),
        "started": started, "finished": _now(),
        "wall_s": time.perf_counter() - t_all,
        "machine": {"cpu_model": machine.tags.get("cpu_model", ""),
                    "fingerprint": machine.fingerprint(), "python": platform.python_version(),
                    "devices": [d.name for d in machine.devices],
                    "load_average_1m": {"before": load_before, "after": os.getloadavg()[0]}},
        "settings": vars(args), "rows": rows, "failures": failures,
        "summary": _summary(rows) if rows else {},
    }
    out.write_text(json.dumps(result, indent=1))
    print(table(rows))
    print()
    print(json.dumps(result["summary"], indent=1))
    if failures:
        print(f"{len(failures)} failures: " + "; ".join(
            f"{f['model']} b{f['batch']} {f.get('plan', '')}: {f['error'][:120]}"
            for f in failures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
