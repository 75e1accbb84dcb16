"""Many models on one machine (issue 28): engines that slow each other down, on the Jetson
preset against TensorRT #2745, and two zoo models served together on ``local``.

**orin** (the evaluator only, deterministic). TensorRT issue #2745 (AGX Orin, int8 engines
looping in trtexec) measured model 0 on the GPU at 45 ms alone, 51.05 ms with DLA0 busy and
59 ms with both DLAs busy; model 2 on DLA0 at 17.68 ms alone, 20.78 ms with the GPU busy,
21.8 ms with the GPU and DLA1 busy (and on DLA1, 18.14 ms alone, 21.8 ms with both others).
The preset's co-run factors (``Device.corun``) were fitted to three of those figures; this
part schedules a workload that reproduces the experiment and reads the slowdowns back:
an int8 conv network (``--width``) on the GPU, and copies of it queued back to back on
each busy device (``--copies`` plus twice as many as the engine's run takes, so that they
stay busy for the whole run, as trtexec's loops do). It reports, for the preset as shipped (co-run factors + the memory controller's
bandwidth sharing) and for the bandwidth sharing alone (the model before the factors):
the GPU engine's slowdown with one and with two DLAs busy, and a DLA engine's with the GPU
(and the other DLA) busy, against #2745's ratios; which figures were fitted and which are
held out is said in each row.

**pair** (the evaluator only). Two conv networks (``--width`` and half of it) planned
together on jetson-agx-orin in fp16: the search's placements (latency and throughput
objectives) against GPU-only and the naive splits (one network whole on the GPU, the other
whole on DLA0): one request of each (latency) and sets per second (pipelined).

**local** (measured: run it alone). Two zoo models (``--models``), exported to ONNX, each with
its own Poisson stream (``--rates``, requests/s at batch 1), planned as a workload on
``local`` twice: ``auto`` (the search places them over cpu0, cpu1 and cpu01) and
``single:cpu01`` (both models time-share the two-thread device: each model's own session on
both cores, the OS sharing them). Each plan is served for real (``serve.workload``, one
executor per model, ``--duration`` seconds of arrivals, ``--repeats`` times) and simulated
on the same arrivals: per model, measured p50/p99 and throughput (medians over repeats,
spread = (max - min) / median) and the simulation's error.

**replicas** (measured: run it alone). One model (``--replica-model``) as two replicas that
are not alike: ``single:cpu0`` in fp32 and ``single:cpu1`` in int8 (quantized: another
speed); Poisson arrivals at ``--replica-load`` of their summed predicted capacity, served
for real with the stream split by capacity (``weighted``) and evenly (``round-robin``),
interleaved ``--repeats`` times: p50, p99, throughput, requests per replica.

    .venv/bin/python benchmarks/engines.py orin
    .venv/bin/python benchmarks/engines.py replicas
    .venv/bin/python benchmarks/engines.py local --models mlp,resnet --rates 150,100
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

#: TensorRT issue #2745's figures (ms): engine -> busy co-runners -> latency
PUBLISHED = {
    "gpu": {(): 45.0, ("dla0",): 51.05, ("dla0", "dla1"): 59.0},
    "dla0": {(): 17.68, ("gpu",): 20.78, ("dla1", "gpu"): 21.8},
    "dla1": {(): 18.14, ("dla0", "gpu"): 21.8},
}
#: which of them the preset's factors were fitted to
FITTED = {("gpu", ("dla0", "dla1")), ("dla0", ("gpu",)), ("dla0", ("dla1", "gpu"))}
CITE = "NVIDIA/TensorRT issue #2745, https://github.com/NVIDIA/TensorRT/issues/2745"


def _convs(path: Path, width: int, layers: int, image: int) -> None:
    """An ONNX conv network (3x3 conv + ReLU) every layer of which a DLA runs."""
    import onnx
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i in range(layers):
        cin = 16 if i == 0 else width
        inits.append(helper.make_tensor(f"w{i}", TensorProto.FLOAT, [width, cin, 3, 3],
                                        (rng.standard_normal(width * cin * 9) * 0.05)
                                        .astype(np.float32)))
        nodes += [helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        prev = f"r{i}"
    g = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["n", 16, image, image])], [helper.make_tensor_value_info(
            prev, TensorProto.FLOAT, ["n", width, image, image])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def _engines(machine: Any, file: Path, busy: tuple[str, ...], copies: dict[str, int],
             batch: int, engine: str) -> float:
    """The compute seconds of one run of the network on ``engine`` (int8) while each device
    ``d`` of ``busy`` runs ``copies[d]`` copies of it back to back (as trtexec loops, enough
    to cover the engine's run); alone when ``busy`` is empty."""
    from placewise.graph.workload import Member, workload_ref
    from placewise.plan_workload import member_placement, member_problem, vertex_members
    from placewise.planning import build_problem
    from placewise.schedule.evaluate import evaluate
    from placewise.schedule.placement import Assignment, Placement
    from placewise.units import DType

    members = [Member("e", str(file))]
    where = {"e": engine}
    for d in busy or (engine,):  # alone: a copy that is left out below
        for k in range(copies[d] if busy else 1):
            name = f"{d}_{k}"
            members.append(Member(name, str(file)))
            where[name] = d
    prob = build_problem(workload_ref(members), machine, batch=batch)
    owner = vertex_members(prob)
    placement = Placement.of({v: Assignment(where[m], DType.INT8) for v, m in owner.items()})
    if not busy:
        prob = member_problem(prob, "e")
        placement = member_placement(placement, prob)
    ev = evaluate(prob, placement)
    return float(sum(t.duration_s for t in ev.schedule.tasks
                     if t.vertex and owner.get(t.vertex) == "e"))


def orin(args: argparse.Namespace) -> dict[str, Any]:
    from placewise.hardware.load import load_machine

    shipped = load_machine("jetson-agx-orin")
    data = shipped.model_dump()
    for d in data["devices"]:
        d["corun"] = None
    bandwidth_only = type(shipped).model_validate(data)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "convs.onnx"
        _convs(f, args.width, args.layers, args.image)
        for label, machine in (("preset (co-run factors + bandwidth)", shipped),
                               ("bandwidth sharing only", bandwidth_only)):
            alone_of = {d: _engines(machine, f, (), {}, args.batch, d) for d in PUBLISHED}
            for engine, cases in PUBLISHED.items():
                alone = alone_of[engine]
                # enough back-to-back copies on each busy device to cover the engine's run
                # even when slowed, as trtexec's loops keep them busy
                copies = {d: args.copies + int(2 * alone / alone_of[d]) for d in alone_of}
                for busy, ms in cases.items():
                    if not busy:
                        continue
                    got = _engines(machine, f, busy, copies, args.batch, engine)
                    ratio = ms / cases[()]
                    rows.append({
                        "model": label, "engine": engine, "busy": list(busy),
                        "alone_s": alone, "together_s": got,
                        "predicted_slowdown": got / alone, "published_slowdown": ratio,
                        "error": (got / alone) / ratio - 1,
                        "use": "fitted" if (engine, busy) in FITTED else "held out"})
    return {"rows": rows, "source": CITE,
            "workload": {"width": args.width, "layers": args.layers, "image": args.image,
                         "batch": args.batch, "copies": args.copies, "dtype": "int8"}}


def local(args: argparse.Namespace) -> dict[str, Any]:
    """Two zoo models served together on ``local`` (module docstring)."""
    from placewise.cli import resolve_machine
    from placewise.cost.load import load_cost_model
    from placewise.graph.workload import Member, Stream, workload_ref
    from placewise.graph.zoo import export_onnx, parse_zoo_ref
    from placewise.plan import save_plan
    from placewise.plan_workload import member_plan
    from placewise.planning import build_problem, plan_model
    from placewise.search.api import CommandBudget, minimum_time_s
    from placewise.serve.policies import parse_batching
    from placewise.serve.service import PlanService
    from placewise.serve.tune import tune_service
    from placewise.serve.workload import (
        by_model,
        serve_workload,
        simulate_workload,
        workload_arrivals,
    )

    machine = resolve_machine("local")
    names = args.models.split(",")
    rates = [float(x) for x in args.rates.split(",")]
    out: dict[str, Any] = {"models": names, "rates_per_s": rates, "plans": {}}
    batcher = parse_batching("none")
    with tempfile.TemporaryDirectory() as tmp:
        members = []
        for n in names:
            name, opts = parse_zoo_ref(f"zoo:{n}")
            path = Path(tmp) / f"{name}.onnx"
            export_onnx(name, opts, path)
            members.append(Member(name, str(path)))
        ref = workload_ref(members)
        streams = {m.name: Stream(r) for m, r in zip(members, rates, strict=True)}
        for strategy in ("auto", "single:cpu01"):
            prob = build_problem(ref, machine, batch=1)
            clock = CommandBudget.make(args.time_limit, ops=len(prob.graph.ops),
                                       start=time.perf_counter(),
                                       least_s=minimum_time_s(prob))
            done = plan_model(prob, ref, clock=clock, strategy=strategy, streams=streams,
                              batch=1)
            plan = done.plan
            if args.tune_requests:  # each model's part tuned alone (placewise tune's recipe)
                assert plan.workload is not None
                plan = plan.model_copy(update={"workload": plan.workload.model_copy(update={
                    "models": tuple(m.model_copy(update={"service": tune_service(
                        member_plan(plan, m.name), machine=machine,
                        per_gap=args.tune_requests, probe=args.tune_requests, repeats=1)})
                        for m in plan.workload.models)})})
            save_plan(plan, Path(tmp) / "plan.json")
            cm = load_cost_model(machine, None)
            whole = PlanService(plan, machine, cm)
            arrivals = workload_arrivals(plan, args.duration, seed=args.seed)
            sim = by_model(simulate_workload(whole, arrivals, batcher), names)
            runs = []
            for _ in range(args.repeats):
                got = serve_workload(plan, arrivals, batcher, machine=machine)
                runs.append(by_model(got.result, names))
            per = []
            for k, n in enumerate(names):
                p50 = [r[k].p50_s for r in runs if r[k].p50_s is not None]
                p99 = [r[k].p99_s for r in runs if r[k].p99_s is not None]
                tp = [r[k].throughput_rps for r in runs]
                m50, m99 = statistics.median(p50), statistics.median(p99)
                per.append({
                    "model": n, "rate_per_s": rates[k],
                    "devices": plan.workload.model(n).devices if plan.workload else [],
                    "measured_p50_s": m50, "measured_p99_s": m99,
                    "spread_p50": (max(p50) - min(p50)) / m50,
                    "spread_p99": (max(p99) - min(p99)) / m99,
                    "measured_rps": statistics.median(tp),
                    "simulated_p50_s": sim[k].p50_s, "simulated_p99_s": sim[k].p99_s,
                    "error_p50": (sim[k].p50_s or 0) / m50 - 1,
                    "error_p99": (sim[k].p99_s or 0) / m99 - 1})
            out["plans"][strategy] = per
    return out


def pair(args: argparse.Namespace) -> dict[str, Any]:
    """Two networks on jetson-agx-orin in fp16 (module docstring): the search's placement
    (layer group by layer group over the CPU, GPU and DLAs) against GPU-only and the naive
    split (one network whole on the GPU, the other whole on DLA0), by the evaluator."""
    from placewise.graph.workload import Member, workload_ref
    from placewise.hardware.load import load_machine
    from placewise.plan_workload import vertex_members, workload_json
    from placewise.planning import build_problem
    from placewise.schedule.evaluate import evaluate
    from placewise.schedule.placement import Assignment, Placement
    from placewise.search.api import plan_search
    from placewise.units import DType

    machine = load_machine("jetson-agx-orin")
    out: dict[str, Any] = {"rows": [], "published": "HaX-CoNN (Dagli and Belviranli, PPoPP "
                           "2024, arXiv:2308.05869): layer-level GPU/DLA mapping of concurrent "
                           "DNNs on Orin, Xavier and Snapdragon 865 improves total latency by "
                           "up to 32% and throughput by up to 29% over the state of the art"}
    with tempfile.TemporaryDirectory() as tmp:
        big, small = Path(tmp) / "big.onnx", Path(tmp) / "small.onnx"
        _convs(big, args.width, args.layers, args.image)
        _convs(small, args.width // 2, max(2, args.layers // 2), args.image)
        members = [Member("big", str(big)), Member("small", str(small))]
        prob = build_problem(workload_ref(members), machine, batch=args.batch)
        owner = vertex_members(prob)
        fp16 = {v.name: frozenset({DType.FP16}) for v in prob.vertices}
        prob = prob.restricted(fp16)
        placements = {
            "gpu only": Placement.of({v: Assignment("gpu", DType.FP16) for v in owner}),
            "naive: big on gpu, small on dla0": Placement.of(
                {v: Assignment("gpu" if m == "big" else "dla0", DType.FP16)
                 for v, m in owner.items()}),
            "naive: small on gpu, big on dla0": Placement.of(
                {v: Assignment("gpu" if m == "small" else "dla0", DType.FP16)
                 for v, m in owner.items()})}
        for objective in ("latency", "throughput"):
            found = plan_search(prob, strategy="auto", objective=objective,
                                time_limit_s=args.time_limit, seed=0)
            placements[f"search ({objective})"] = found.best.placement
        for label, pl in placements.items():
            ev = evaluate(prob, pl)
            per = {w["name"]: w for w in workload_json(prob, ev.schedule, members)["models"]}
            out["rows"].append({
                "placement": label, "makespan_s": ev.makespan_s, "latency_s": ev.latency_s,
                "sets_per_s": ev.throughput_rps / args.batch,
                "devices": {m: per[m]["devices"] for m in per},
                "latency_by_model_s": {m: per[m]["latency_s"] for m in per}})
    return out


def replicas(args: argparse.Namespace) -> dict[str, Any]:
    """One model replicated over unlike replicas on ``local`` (module docstring)."""
    from placewise.cli import resolve_machine
    from placewise.planning import build_problem, plan_model
    from placewise.precision.policy import parse_policy
    from placewise.search.api import CommandBudget, minimum_time_s
    from placewise.serve.arrivals import poisson_arrivals
    from placewise.serve.policies import parse_batching
    from placewise.serve.replicas import serve_replicas
    from placewise.serve.sim import Workload

    machine = resolve_machine("local")
    ref = args.replica_model
    plans = []
    for strategy, precision in (("single:cpu0", "KEEP"), ("single:cpu1", "int8")):
        prob = build_problem(ref, machine, batch=1)
        clock = CommandBudget.make(args.time_limit, ops=len(prob.graph.ops),
                                   start=time.perf_counter(), least_s=minimum_time_s(prob))
        plans.append(plan_model(prob, ref, clock=clock, strategy=strategy,
                                policy=parse_policy(precision), batch=1).plan)
    caps = [1.0 / float(p.throughput.period_s) for p in plans]
    rate = args.replica_load * sum(caps)
    times = poisson_arrivals(rate, int(rate * args.duration), seed=args.seed)
    batcher = parse_batching("none")
    runs: dict[str, list[dict[str, Any]]] = {"weighted": [], "round-robin": []}
    for _ in range(args.repeats):
        for router in runs:  # interleaved: a drift of the machine touches both alike
            got = serve_replicas(plans, Workload(times), batcher, router=router,
                                 machine=machine, limit_s=120.0)
            lat = got.result.latency_s
            runs[router].append({"p50_s": float(np.quantile(lat, 0.5)),
                                 "p99_s": float(np.quantile(lat, 0.99)),
                                 "throughput_rps": got.result.throughput_rps,
                                 "by_replica": list(got.result.by_replica)})
    out = {"model": ref, "replicas": ["cpu0 fp32", "cpu1 int8"],
           "predicted_capacity_rps": caps, "rate_per_s": rate, "requests": len(times)}
    for router, rs in runs.items():
        p50 = [r["p50_s"] for r in rs]
        p99 = [r["p99_s"] for r in rs]
        out[router] = {"p50_s": statistics.median(p50), "p99_s": statistics.median(p99),
                       "spread_p50": (max(p50) - min(p50)) / statistics.median(p50),
                       "spread_p99": (max(p99) - min(p99)) / statistics.median(p99),
                       "throughput_rps": statistics.median(r["throughput_rps"] for r in rs),
                       "by_replica": rs[0]["by_replica"], "runs": rs}
    return out


def _print(result: dict[str, Any]) -> None:
    if "orin" in result:
        print(f"orin: {result['orin']['source']}")
        print("| model | engine | busy | alone | together | predicted | #2745 | error | use |")
        print("|---|---|---|---|---|---|---|---|---|")
        for r in result["orin"]["rows"]:
            print(f"| {r['model']} | {r['engine']} | {'+'.join(r['busy'])} | "
                  f"{r['alone_s'] * 1e3:.3f} ms | {r['together_s'] * 1e3:.3f} ms | "
                  f"x{r['predicted_slowdown']:.3f} | x{r['published_slowdown']:.3f} | "
                  f"{r['error']:+.1%} | {r['use']} |")
    if "pair" in result:
        print(f"pair on jetson-agx-orin (fp16); published: {result['pair']['published']}")
        print("| placement | one of each (latency) | sets/s | devices |")
        print("|---|---|---|---|")
        for r in result["pair"]["rows"]:
            devs = "; ".join(f"{m}: {','.join(d)}" for m, d in r["devices"].items())
            print(f"| {r['placement']} | {r['latency_s'] * 1e3:.3f} ms | "
                  f"{r['sets_per_s']:.0f} | {devs} |")
    if "replicas" in result:
        r = result["replicas"]
        print(f"replicas of {r['model']} ({', '.join(r['replicas'])}; predicted capacity "
              f"{r['predicted_capacity_rps'][0]:.0f}/s and {r['predicted_capacity_rps'][1]:.0f}/s)"
              f" at {r['rate_per_s']:.0f}/s, {r['requests']} requests")
        print("| router | p50 (spread) | p99 (spread) | throughput | requests per replica |")
        print("|---|---|---|---|---|")
        for router in ("weighted", "round-robin"):
            x = r[router]
            print(f"| {router} | {x['p50_s'] * 1e3:.2f} ms ({x['spread_p50']:.0%}) | "
                  f"{x['p99_s'] * 1e3:.2f} ms ({x['spread_p99']:.0%}) | "
                  f"{x['throughput_rps']:.0f}/s | {x['by_replica']} |")
    if "local" in result:
        print("| plan | model | rate | devices | p50 measured (spread) | p99 measured (spread) "
              "| rps | sim p50 err | sim p99 err |")
        print("|---|---|---|---|---|---|---|---|---|")
        for strategy, rows in result["local"]["plans"].items():
            for r in rows:
                print(f"| {strategy} | {r['model']} | {r['rate_per_s']:g}/s | "
                      f"{','.join(r['devices'])} | {r['measured_p50_s'] * 1e3:.2f} ms "
                      f"({r['spread_p50']:.0%}) | {r['measured_p99_s'] * 1e3:.2f} ms "
                      f"({r['spread_p99']:.0%}) | {r['measured_rps']:.1f} | "
                      f"{r['error_p50']:+.0%} | {r['error_p99']:+.0%} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("part", choices=["orin", "pair", "local", "replicas"])
    ap.add_argument("--replica-model", default="zoo:mlp?layers=4&hidden=512")
    ap.add_argument("--replica-load", type=float, default=0.7,
                    help="replicas: the offered rate as a share of the summed capacity")
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--image", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--copies", type=int, default=2)
    ap.add_argument("--models", default="mlp,resnet")
    ap.add_argument("--rates", default="150,100")
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--time-limit", type=float, default=8.0)
    ap.add_argument("--tune-requests", type=int, default=30,
                    help="local: requests per idle gap when tuning each model (0: untuned)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/engines.json")
    args = ap.parse_args()
    prev = json.loads(args.out.read_text()) if args.out.exists() else {}
    got = {"orin": orin, "pair": pair, "local": local, "replicas": replicas}[args.part](args)
    prev[args.part] = got
    prev.setdefault("runs", {})[args.part] = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": platform.processor() or platform.machine(),
        "command": " ".join(["benchmarks/engines.py", *sys.argv[1:]])}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(prev, indent=1) + "\n")
    _print(prev)


if __name__ == "__main__":
    main()
