"""Is pipelining across the two cores worth it here? A two-stage pipeline against the
whole-model session on both cores, in sustained throughput.

For each model: the fused regions in topological order are cut once, where the calibrated
compute of the two halves is most even; the first half runs on ``cpu0`` (the host, in the
client's thread), the second on ``cpu1`` (a worker process), fp32. The plan is evaluated
by the calibrated cost model (the calibration of ``benchmarks/validation.py``'s cache,
model order included) and validated: the stream's sustained throughput against the
whole-model onnxruntime session on both cores (2 threads), same requests. This is the
best case of a throughput plan on this machine (one cut, two transfers per request); the
searched plans of ``benchmarks/validation.py`` cut more often.

    .venv/bin/python benchmarks/two_stage.py --models bert,gpt --batch 1

Writes ``benchmarks/results/two_stage.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from validation import CACHE_DIR, context_calibration_path


def _cut(problem: Any) -> Any:
    from placewise.schedule import Assignment, Placement, evaluate
    from placewise.units import DType

    names = problem.vertex_names
    best = None
    for k in range(1, len(names)):
        pl = Placement.of({n: Assignment("cpu0" if i < k else "cpu1", DType.FP32)
                           for i, n in enumerate(names)})
        ev = evaluate(problem, pl)
        period = ev.pipeline.period_s
        if best is None or period < best[0]:
            best = (period, k, ev)
    assert best is not None
    return best


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="mlp,resnet,bert,gpt,inception")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--requests", type=int, default=20)
    p.add_argument("--stream-s", type=float, default=2.0)
    p.add_argument("--cache", default=CACHE_DIR)
    p.add_argument("--out", default="benchmarks/results/two_stage.json")
    args = p.parse_args(argv)

    from placewise.cost.calibrated import load_calibration
    from placewise.cost.load import load_cost_model
    from placewise.graph.fuse import fuse
    from placewise.graph.zoo import load_zoo
    from placewise.hardware.probe import load_local
    from placewise.plan import build_plan
    from placewise.schedule.placement import Problem
    from placewise.validate import validate_plan

    machine = load_local()
    rows = []
    for name in args.models.split(","):
        b = args.batch
        cal = load_calibration(context_calibration_path(Path(args.cache), name, b, machine))
        graph = load_zoo(f"zoo:{name}", batch=b)
        problem = Problem(graph, fuse(graph), machine, load_cost_model(machine, cal), batch=b)
        _period, k, ev = _cut(problem)
        plan = build_plan(problem, ev, model_ref=f"zoo:{name}", strategy="two-stage")
        rep = validate_plan(plan, machine=machine, requests=args.requests,
                            stream_s=args.stream_s, keep_telemetry=False)
        base = next(x for x in rep.baselines if x.precision == "fp32" and x.available)
        row = {"model": name, "batch": b, "cut_after": k, "regions": len(problem.vertex_names),
               "predicted_rps": plan.throughput_rps, "measured_rps": rep.throughput_rps,
               "predicted_latency_s": plan.predicted_latency_s,
               "latency_p50_s": rep.latency.p50_s, "baseline_rps": base.throughput_rps,
               "baseline_cores": list(base.cores),
               "throughput_ratio": rep.throughput_rps / base.throughput_rps,
               "load_average_1m": os.getloadavg()[0]}
        rows.append(row)
        print(f"{name} b{b}: cut after {k}/{row['regions']} regions; plan {rep.throughput_rps:.0f}/s "
              f"(predicted {plan.throughput_rps:.0f}/s), 2-thread session "
              f"{base.throughput_rps:.0f}/s: x{row['throughput_ratio']:.2f}", flush=True)
    Path(args.out).write_text(json.dumps({
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": "python " + " ".join([sys.argv[0], *(argv if argv is not None else sys.argv[1:])]),
        "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
