"""Executor overhead: a single-device plan run by the partitioned executor against a plain
whole-model onnxruntime session on the same cores and threads.

For every zoo model and batch: the plan puts every region on ``--device`` (default
``cpu01``, both cores of this machine), so the program is one partition; the executor runs
it (a worker pinned to the device's cores, inputs and outputs through shared memory, one
``session.run`` per request). The baseline is a plain ``onnxruntime.InferenceSession`` of
*the same ONNX file* (the partition), in this process, pinned to the same cores, with the
same threads and session options. The two are interleaved: ``--rounds`` rounds, each
``--requests`` isolated requests through the executor then through the plain session
(after ``--warmup`` requests of each), and the ratio of the medians of their per-request
latencies is reported with the spread over rounds (the noise floor: the same measurement
repeated).

    .venv/bin/python benchmarks/partition_overhead.py
    .venv/bin/python benchmarks/partition_overhead.py --models mlp,bert --batches 1 --rounds 3

Writes ``benchmarks/results/partition_overhead.json``.
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


def _measure(model: str, batch: int, device: str, rounds: int, requests: int,
             warmup: int) -> dict[str, Any]:
    import numpy as np

    from placewise.cost.load import load_cost_model
    from placewise.hardware.load import load_machine
    from placewise.runtime.backends.onnxruntime import Provider, make_session
    from placewise.runtime.compile import write_partitions
    from placewise.runtime.executor import Executor
    from placewise.runtime.opexec import load_source, request_inputs
    from placewise.runtime.program import program_from_schedule
    from placewise.schedule import Placement, Problem, evaluate
    from placewise.units import DType

    m = load_machine("local")
    src = load_source(f"zoo:{model}", batch=batch)
    g = src.graph
    assert g is not None
    prob = Problem(g, None, m, load_cost_model(m, None), batch=batch)
    ev = evaluate(prob, Placement.uniform(prob.vertex_names, device, DType.FP32))
    prog = program_from_schedule(prob, ev.schedule)
    reqs = request_inputs(src, g, requests + warmup, 7)
    dev = m.device(device)
    cores = list(dev.cores or ())
    import tempfile

    ex_rounds: list[float] = []
    ort_rounds: list[float] = []
    with tempfile.TemporaryDirectory(prefix="placewise-bench-") as tmp:
        files = write_partitions(src, prog.partitions, g, tmp)
        (part,) = prog.partitions
        old = os.sched_getaffinity(0)
        with Executor(prog, src, reference_inputs=reqs[0], partition_files=files,
                      slots=2) as ex:
            ex.start()
            for _ in range(rounds):
                ex.run(reqs[:warmup], phase="warmup")
                ex.run(reqs[warmup:], phase="timed")
                tel = ex.telemetry()
                lat = [r.latency_ns / 1e9 for r in tel.requests_of("timed")][-requests:]
                ex_rounds.append(statistics.median(lat))
                # the plain session, pinned to the same cores, same threads and options
                os.sched_setaffinity(0, set(cores))
                try:
                    sess = make_session(files[part.name], Provider("CPUExecutionProvider"),
                                        threads=len(cores))
                    names = [i.name for i in sess.get_inputs()]
                    feeds = [dict(zip(g.inputs, r, strict=True)) for r in reqs]
                    outs = list(g.outputs)
                    for f in feeds[:warmup]:
                        sess.run(outs, {n: f[n] for n in names})
                    xs = []
                    for f in feeds[warmup:]:
                        fd = {n: np.ascontiguousarray(f[n]) for n in names}
                        t0 = time.perf_counter_ns()
                        sess.run(outs, fd)
                        xs.append((time.perf_counter_ns() - t0) / 1e9)
                    ort_rounds.append(statistics.median(xs))
                    del sess
                finally:
                    os.sched_setaffinity(0, old)
    ratios = [a / b for a, b in zip(ex_rounds, ort_rounds, strict=True)]
    return {"model": model, "batch": batch, "device": device, "cores": cores,
            "executor_p50_s": statistics.median(ex_rounds),
            "onnxruntime_p50_s": statistics.median(ort_rounds),
            "ratio_of_medians": statistics.median(ex_rounds) / statistics.median(ort_rounds),
            "ratio_per_round": ratios,
            "executor_rounds_s": ex_rounds, "onnxruntime_rounds_s": ort_rounds,
            "executor_spread": (max(ex_rounds) - min(ex_rounds)) / statistics.median(ex_rounds),
            "onnxruntime_spread": (max(ort_rounds) - min(ort_rounds))
            / statistics.median(ort_rounds)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mlp,resnet,bert,gpt,inception")
    ap.add_argument("--batches", default="1,4")
    ap.add_argument("--device", default="cpu01")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" /
                                         "partition_overhead.json"))
    a = ap.parse_args()
    rows = []
    for model in a.models.split(","):
        for b in (int(x) for x in a.batches.split(",")):
            r = _measure(model, b, a.device, a.rounds, a.requests, a.warmup)
            rows.append(r)
            print(f"{model:10s} b{b:<3d} executor {r['executor_p50_s'] * 1e6:9.1f} us  "
                  f"onnxruntime {r['onnxruntime_p50_s'] * 1e6:9.1f} us  "
                  f"ratio {r['ratio_of_medians']:.3f}  (rounds {min(r['ratio_per_round']):.3f}"
                  f"..{max(r['ratio_per_round']):.3f}; spread ex {r['executor_spread']:.0%} "
                  f"ort {r['onnxruntime_spread']:.0%})", flush=True)
    out = {"date": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
           "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
           "command": " ".join(sys.argv), "rows": rows}
    Path(a.out).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
