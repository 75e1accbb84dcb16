"""The plan as a loaded service (issue 14): simulator speed, simulated against measured on
this machine, and the latency-optimal against the throughput-optimal plan under load.

Suites (``--suite``, default all):

- ``speed``: ``placewise.serve.sim.simulate`` on 10^4, 10^5 and 10^6 Poisson requests with
  dynamic batching (max_batch 8, 1 ms, preferred 4/8) through a 2-device pipeline whose
  stage times grow with the batch; median of ``--speed-repeats`` runs, events (arrivals and
  dispatches) per second.
- ``accuracy``: for each zoo model (``--models``), two plans on ``local`` with the
  calibrated cost model: ``latency`` (auto, latency objective) and ``throughput`` (auto,
  throughput objective: pipelined over devices where that pays). Batching ``none`` serves
  the batch-1 plans; ``dynamic`` serves the batch-4 plans (max_batch 4, max_delay 2 ms,
  batches padded to 4, as the executor runs them). The measured capacity of each
  (plan, batching) is the completion rate of a real run offered three times the plan's
  predicted capacity (queue limit 32); then loads of 30/60/80 % of it are served for real
  (``--repeats`` runs, same seeded arrivals) and simulated on the same arrivals with the
  same policy and window. Errors: simulated / measured - 1, of p50, p99 and throughput;
  the spread is max - min of the real repeats over their median. A second simulation
  feeds the simulator the *measured* service: the plan's latency scaled to the p50 service time
  (latency minus queue wait) of batches measured at 10 % load, and its occupancies scaled to the measured
  capacity. It separates the queueing model's error from the cost model's.
- ``gaps``: the service time of one request against the idle time before it
  (``--gap-model``'s batch-1 latency plan on ``local``, requests one at a time), with the
  client's idle wait sleeping or spinning.
- ``preset``: the latency- and throughput-optimal plans of ``--preset-model`` on
  ``--preset``, simulated at rising Poisson load (fractions of the throughput plan's
  capacity), p50/p99 side by side.

    .venv/bin/python benchmarks/serve.py --suite speed
    .venv/bin/python benchmarks/serve.py --suite accuracy --models resnet,bert,gpt

Writes ``benchmarks/results/serve.json`` (``--out``) and prints tables.
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
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from validation import CACHE_DIR, _calibrations

LOADS = (0.3, 0.6, 0.8)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def speed(repeats: int) -> list[dict[str, Any]]:
    from placewise.serve import parse_batching, poisson_arrivals, simulate

    b = parse_batching("dynamic:max_batch=8,max_delay=1ms,preferred=4/8")

    def svc(k: int) -> tuple[float, float]:
        return (5e-5 + 2e-5 * k, 4e-5 + 2e-5 * k)

    rows = []
    for n in (10_000, 100_000, 1_000_000):
        arr = poisson_arrivals(8000.0, n, seed=1)
        times = []
        r = None
        for _ in range(repeats):
            t0 = time.perf_counter()
            r = simulate(arr, svc, b, in_flight=2)
            times.append(time.perf_counter() - t0)
        assert r is not None and r.conserved()
        events = n + len(r.batch_sizes)
        med = statistics.median(times)
        rows.append({"requests": n, "median_s": med, "min_s": min(times), "max_s": max(times),
                     "events": events, "events_per_s": events / med,
                     "mean_batch": float(r.batch_sizes.mean())})
        _log(f"speed {n}: {med:.3f} s ({min(times):.3f}-{max(times):.3f}), "
             f"{events / med:.3g} events/s")
    return rows


def _plan(name: str, batch: int, objective: str, machine: Any, cal: Any) -> Any:
    from placewise.cost.load import load_cost_model
    from placewise.graph.fuse import fuse
    from placewise.graph.zoo import load_zoo
    from placewise.plan import build_plan
    from placewise.schedule.placement import Problem
    from placewise.search.api import plan_search

    graph = load_zoo(f"zoo:{name}", batch=batch)
    problem = Problem(graph, fuse(graph), machine, load_cost_model(machine, cal), batch=batch)
    res = plan_search(problem, strategy="auto", objective=objective, time_limit_s=10.0)
    return build_plan(problem, res, model_ref=f"zoo:{name}", strategy="auto",
                      objective=objective)


def _err(sim: float | None, real: float | None) -> float | None:
    return None if not sim or not real else sim / real - 1


def accuracy(models: list[str], repeats: int, requests: int, cache: Path
             ) -> list[dict[str, Any]]:
    from placewise.cost.load import load_cost_model
    from placewise.hardware.probe import load_local
    from placewise.serve import Admission, StageTimes, Workload, parse_batching
    from placewise.serve.real import serve_real
    from placewise.serve.report import summarize
    from placewise.serve.run import ServeSetup, capacity_rps, default_window, run_once, workload
    from placewise.serve.service import PlanService

    machine = load_local()
    rows: list[dict[str, Any]] = []
    for name in models:
        cals = _calibrations(name, [1, 4], machine, cache, 0.5, _log)
        for objective in ("latency", "throughput"):
            for policy, batch in (("none", 1), ("dynamic:max_batch=4,max_delay=2ms", 4)):
                plan = _plan(name, batch, objective, machine, cals[batch])
                devices = plan.devices_used()
                svc = PlanService(plan, machine, load_cost_model(machine, cals[batch]))
                batcher = parse_batching(policy)
                window = default_window(svc, batcher)
                base = ServeSetup(batcher, in_flight=window, pad_to=batch, seed=11)
                pred_cap = capacity_rps(svc, base)
                # the measured capacity: offered 3x the predicted, a bounded queue
                t0 = time.perf_counter()
                over = Workload(np.cumsum(np.random.default_rng(5).exponential(
                    1 / (3 * pred_cap), requests)))
                sat = serve_real(plan, over, batcher, admission=Admission(32),
                                 in_flight=window, machine=machine, limit_s=60)
                cap = sat.result.throughput_rps
                _log(f"{name} {objective} {policy}: devices {devices}, predicted capacity "
                     f"{pred_cap:.4g}/s, measured {cap:.4g}/s "
                     f"({time.perf_counter() - t0:.1f} s)")
                # the measured service: an isolated batch's latency (p50 at 10 % load)
                # and the capacity; the simulator fed with them (labelled as such)
                low = replace(base, rate=0.1 * cap, requests=min(300, requests))
                iso = serve_real(plan, workload(low), batcher, in_flight=window,
                                 machine=machine, limit_s=60)
                iso_p50 = float(np.median(iso.result.latency_s - iso.result.wait_s))
                scale_l = iso_p50 / svc(batch).latency_s
                scale_w = pred_cap / cap

                def scaled(b: int, sl: float = scale_l, sw: float = scale_w,
                           svc: Any = svc) -> StageTimes:
                    st = svc(b)
                    return StageTimes(st.latency_s * sl, tuple(x * sl for x in st.offsets_s),
                                      tuple(x * sw for x in st.occupancy_s), st.resources)

                for load in LOADS:
                    setup = replace(base, rate=load * cap, requests=requests)
                    wl = workload(setup)
                    assert isinstance(wl, Workload)
                    reals = []
                    for _ in range(repeats):
                        got = serve_real(plan, wl, batcher, in_flight=window,
                                         machine=machine, limit_s=120)
                        reals.append(summarize(got.result))
                    _, sim = run_once(svc, setup)
                    med = {k: statistics.median([r[k] for r in reals if r[k] is not None])
                           for k in ("p50_s", "p99_s", "throughput_rps", "mean_wait_s")}
                    _, sim_m = run_once(scaled, setup)
                    spread = {k: (max(r[k] for r in reals) - min(r[k] for r in reals))
                              / med[k] if med[k] else None
                              for k in ("p50_s", "p99_s", "throughput_rps")}
                    row = {
                        "model": name, "plan": objective, "devices": devices,
                        "batching": policy, "batch": batch, "load": load,
                        "rate_rps": load * cap, "capacity_measured_rps": cap,
                        "capacity_predicted_rps": pred_cap, "requests": requests,
                        "real": med, "real_runs": reals and [
                            {k: r[k] for k in ("p50_s", "p99_s", "throughput_rps",
                                               "mean_batch", "rejected")} for r in reals],
                        "spread": spread,
                        "sim": {k: sim[k] for k in ("p50_s", "p99_s", "throughput_rps",
                                                    "mean_wait_s", "mean_batch")},
                        "sim_measured_service": {k: sim_m[k] for k in (
                            "p50_s", "p99_s", "throughput_rps", "mean_batch")},
                        "isolated_p50_s": iso_p50, "scale_latency": scale_l,
                        "scale_occupancy": scale_w, "window": window,
                        "err": {k: _err(sim[k], med[k]) for k in
                                ("p50_s", "p99_s", "throughput_rps")},
                        "err_measured_service": {k: _err(sim_m[k], med[k]) for k in
                                                 ("p50_s", "p99_s", "throughput_rps")},
                        "late_p99_s": got.late_s.p99_s,
                    }
                    rows.append(row)
                    e, em = row["err"], row["err_measured_service"]
                    _log(f"  load {load:.0%} ({load * cap:.4g}/s): real p50 "
                         f"{med['p50_s'] * 1e3:.3f} ms p99 {med['p99_s'] * 1e3:.3f} ms; "
                         f"sim err p50 {e['p50_s']:+.1%} p99 {e['p99_s']:+.1%} tput "
                         f"{e['throughput_rps']:+.1%}; with measured service p50 "
                         f"{em['p50_s']:+.1%} p99 {em['p99_s']:+.1%}; spread p50 "
                         f"{spread['p50_s']:.1%} p99 {spread['p99_s']:.1%}")
    return rows


def gaps(model: str, cache: Path, requests: int) -> list[dict[str, Any]]:
    """Service time against the idle gap before each request: the batch-1 latency plan of
    ``model`` on ``local``, one request at a time (deterministic arrivals, the gap after
    the previous one's expected end), no batching; the client's idle wait sleeping (then
    spinning its last 300 us, the default) or spinning throughout."""
    from placewise.hardware.probe import load_local
    from placewise.runtime.executor import CLIENT_SPIN_S
    from placewise.serve import Workload, parse_batching
    from placewise.serve.real import serve_real

    machine = load_local()
    cal = _calibrations(model, [1], machine, cache, 0.5, _log)[1]
    plan = _plan(model, 1, "latency", machine, cal)
    rows = []
    for gap_ms in (0.0, 0.5, 2.0, 10.0):
        period = 2.2 * plan.predicted_latency_s + gap_ms * 1e-3
        t = np.arange(requests) * period
        for mode, spin in (("sleep", CLIENT_SPIN_S), ("spin", 10.0)):
            got = serve_real(plan, Workload(t), parse_batching("none"), in_flight=1,
                             machine=machine, limit_s=120,
                             executor_options={"client_spin_s": spin})
            r = got.result
            svc = r.latency_s - r.wait_s
            rows.append({"model": model, "gap_ms": gap_ms, "idle_wait": mode,
                         "predicted_s": plan.predicted_latency_s,
                         "service_p50_s": float(np.median(svc)),
                         "service_p90_s": float(np.quantile(svc, 0.9)),
                         "n": len(svc)})
            _log(f"gap {gap_ms} ms, {mode}: service p50 {np.median(svc) * 1e3:.3f} ms "
                 f"(predicted {plan.predicted_latency_s * 1e3:.3f} ms)")
    return rows


def preset_table(model: str, preset: str) -> list[dict[str, Any]]:
    from placewise.cost.load import load_cost_model
    from placewise.graph.fuse import fuse
    from placewise.graph.load import load_model
    from placewise.hardware.load import load_machine
    from placewise.plan import build_plan
    from placewise.schedule.placement import Problem
    from placewise.search.api import plan_search
    from placewise.serve import parse_batching
    from placewise.serve.run import ServeSetup, capacity_rps, default_window, run_once
    from placewise.serve.service import PlanService

    machine = load_machine(preset)
    graph = load_model(model)
    cm = load_cost_model(machine, None)
    problem = Problem(graph, fuse(graph), machine, cm)
    plans = {}
    for objective in ("latency", "throughput"):
        res = plan_search(problem, strategy="auto", objective=objective, time_limit_s=10.0)
        plans[objective] = build_plan(problem, res, model_ref=model, strategy="auto",
                                      objective=objective)
    svcs = {k: PlanService(p, machine, cm) for k, p in plans.items()}
    none = parse_batching("none")
    setups = {k: ServeSetup(none, in_flight=default_window(svcs[k], none), requests=100_000,
                            seed=3) for k in plans}
    cap = capacity_rps(svcs["throughput"], setups["throughput"])
    rows = []
    for frac in (0.1, 0.2, 0.3, 0.35, 0.4, 0.45, 0.5, 0.7, 0.8, 0.9, 0.95):
        row: dict[str, Any] = {"load_of_throughput_plan_capacity": frac, "rate_rps": frac * cap}
        for k in plans:
            s = replace(setups[k], rate=frac * cap)
            if frac * cap >= capacity_rps(svcs[k], s):
                row[k] = None  # beyond this plan's capacity: the queue grows without bound
                continue
            _, fig = run_once(svcs[k], s)
            row[k] = {"p50_s": fig["p50_s"], "p99_s": fig["p99_s"],
                      "devices": plans[k].devices_used()}
        rows.append(row)
    return [{"model": model, "preset": preset,
             "latency_plan": {"latency_s": plans["latency"].predicted_latency_s,
                              "throughput_rps": plans["latency"].throughput_rps,
                              "devices": plans["latency"].devices_used()},
             "throughput_plan": {"latency_s": plans["throughput"].predicted_latency_s,
                                 "throughput_rps": plans["throughput"].throughput_rps,
                                 "devices": plans["throughput"].devices_used()},
             "rows": rows}]


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.0%}"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.3g}"


def tables(result: dict[str, Any]) -> str:
    """Markdown tables of a results file."""
    out: list[str] = []
    if result.get("speed"):
        out += ["| requests | median s | min-max s | events/s | mean batch |",
                "| ---: | ---: | ---: | ---: | ---: |"]
        out += [f"| {r['requests']:,} | {r['median_s']:.3f} | {r['min_s']:.3f}-"
                f"{r['max_s']:.3f} | {r['events_per_s']:.3g} | {r['mean_batch']:.2f} |"
                for r in result["speed"]]
        out.append("")
    if result.get("accuracy"):
        out += ["| model | plan (devices) | batching | load | rate/s | real p50 ms | p50 err "
                "| real p99 ms | p99 err | tput err | spread p50/p99 | measured-service "
                "p50/p99 err |",
                "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
                "| ---: |"]
        for r in result["accuracy"]:
            e, m, sp = r["err"], r["err_measured_service"], r["spread"]
            out.append(
                f"| {r['model']} | {r['plan']} ({'+'.join(r['devices'])}) | "
                f"{r['batching'].split(':')[0]} | {r['load']:.0%} | {r['rate_rps']:.4g} | "
                f"{_ms(r['real']['p50_s'])} | {_pct(e['p50_s'])} | {_ms(r['real']['p99_s'])} "
                f"| {_pct(e['p99_s'])} | {_pct(e['throughput_rps'])} | "
                f"{sp['p50_s']:.0%}/{sp['p99_s']:.0%} | {_pct(m['p50_s'])}/{_pct(m['p99_s'])} |")
        out.append("")
    if result.get("gaps"):
        out += ["| model | idle gap before each request | client waits by | service p50 ms | "
                "p90 ms | predicted ms |", "| --- | ---: | --- | ---: | ---: | ---: |"]
        out += [f"| {r['model']} | {r['gap_ms']:g} ms | {r['idle_wait']} | "
                f"{_ms(r['service_p50_s'])} | {_ms(r['service_p90_s'])} | "
                f"{_ms(r['predicted_s'])} |" for r in result["gaps"]]
        out.append("")
    for t in result.get("preset", []):
        out += [f"{t['model']} on {t['preset']}: latency plan "
                f"{_ms(t['latency_plan']['latency_s'])} ms, "
                f"{t['latency_plan']['throughput_rps']:.4g}/s on "
                f"{'+'.join(t['latency_plan']['devices'])}; throughput plan "
                f"{_ms(t['throughput_plan']['latency_s'])} ms, "
                f"{t['throughput_plan']['throughput_rps']:.4g}/s on "
                f"{'+'.join(t['throughput_plan']['devices'])}", "",
                "| load (of the throughput plan's capacity) | rate/s | latency plan p50 / p99 "
                "ms | throughput plan p50 / p99 ms |", "| ---: | ---: | ---: | ---: |"]
        for r in t["rows"]:
            cells = [f"{_ms(r[k]['p50_s'])} / {_ms(r[k]['p99_s'])}" if r[k] else "saturated"
                     for k in ("latency", "throughput")]
            out.append(f"| {r['load_of_throughput_plan_capacity']:.0%} | {r['rate_rps']:.4g} "
                       f"| {cells[0]} | {cells[1]} |")
        out.append("")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--suite", default="speed,accuracy,preset")
    ap.add_argument("--models", default="resnet,bert,gpt")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--speed-repeats", type=int, default=3)
    ap.add_argument("--gap-model", default="bert")
    ap.add_argument("--preset", default="jetson-agx-orin")
    ap.add_argument("--preset-model", default="zoo:bert")
    ap.add_argument("--cache", type=Path, default=Path(CACHE_DIR))
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/serve.json"))
    ap.add_argument("--table", type=Path, help="Print the markdown tables of a results file")
    a = ap.parse_args()
    if a.table:
        print(tables(json.loads(a.table.read_text())))
        return
    suites = a.suite.split(",")
    result: dict[str, Any] = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                              "machine": platform.processor() or platform.machine(),
                              "cpus": os.cpu_count(), "command": " ".join(sys.argv)}
    if a.out.is_file():
        result = {**json.loads(a.out.read_text()), **result}
    if "speed" in suites:
        result["speed"] = speed(a.speed_repeats)
    if "preset" in suites:
        result["preset"] = preset_table(a.preset_model, a.preset)
        for r in result["preset"][0]["rows"]:
            _log(json.dumps(r))
    if "gaps" in suites:
        a.cache.mkdir(parents=True, exist_ok=True)
        result["gaps"] = gaps(a.gap_model, a.cache, 300)
    if "accuracy" in suites:
        a.cache.mkdir(parents=True, exist_ok=True)
        result["accuracy"] = accuracy(a.models.split(","), a.repeats, a.requests, a.cache)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    _log(f"wrote {a.out}")


if __name__ == "__main__":
    main()
