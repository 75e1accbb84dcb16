"""Validate the shared-memory-controller contention model on this machine.

Two memory-bound ops on the two cores run slower together than alone, because they share
one memory controller. This script measures that slowdown and compares it with what the
scheduler predicts from two independent measurements.

1. **alone**: one process pinned to core 0 (``os.sched_setaffinity``,
   ``torch.set_num_threads(1)``) runs ``c = a + b`` on float32 tensors much larger than the
   last-level cache, many times; its per-op time gives the single-core bandwidth ``b1``
   (bytes = 3 x tensor bytes: two reads, one write).
2. **aggregate**: two processes pinned to cores 0 and 1 run a *different* memory-bound op,
   ``c.copy_(a)`` (one read, one write), at the same moment; the sum of their bandwidths is
   what both cores reach together, ``C``: the model's ``SharedResource`` bandwidth. (A
   different op, so that predicting the ``add`` slowdown from it is not circular; when two
   cores cannot saturate the memory system, ``C`` is only a lower bound of the controller's
   capacity and the model then predicts at most ``2 b1 / C``.)
3. **together**: two processes, pinned to cores 0 and 1, start the same loop at the same
   moment (a barrier); the per-op times of the middle iterations (both surely running)
   give the measured slowdown versus *alone*.
4. **prediction**: a two-device machine (``core0``, ``core1``; main-tier bandwidth ``b1``)
   sharing a controller of bandwidth ``C`` runs the two loops as chains of tasks of the
   measured single-core duration, each moving its bytes; ``placewise.schedule.schedule``
   gives the per-op time under contention. With ``2 b1 > C`` the model predicts a slowdown
   of ``2 b1 / C``.
5. **control**: a compute-bound op (a cache-resident 192x192 matmul) alone and on both
   cores: the model predicts no slowdown (its memory demand is far below ``C``).

Per-op times are taken with ``time.thread_time`` (CPU time of the running thread), which
does not count time the OS gave to other processes; wall times are recorded too. Medians
over repeats and their spread (min..max of the per-repeat medians) are reported.

Run: ``.venv/bin/python benchmarks/contention.py [--mib 256] [--iters 30] [--repeats 5]
[--out results.json]``
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import time
from datetime import datetime
from typing import Any

_CTX = mp.get_context("spawn")


def _loop(kind: str, mib: int, iters: int, threads: int, cores: set[int],
          barrier: Any, out: Any, tag: int) -> None:
    import torch

    os.sched_setaffinity(0, cores)
    torch.set_num_threads(threads)
    if kind == "add":
        n = mib * 2**20 // 4
        a = torch.rand(n)
        b = torch.rand(n)
        c = torch.empty(n)

        def op() -> None:
            torch.add(a, b, out=c)
    elif kind == "copy":
        n = mib * 2**20 // 4
        a = torch.rand(n)
        c = torch.empty(n)

        def op() -> None:
            c.copy_(a)
    else:
        a = torch.rand(192, 192)
        b = torch.rand(192, 192)
        c = torch.empty(192, 192)

        def op() -> None:
            for _ in range(20):
                torch.mm(a, b, out=c)
    for _ in range(3):
        op()
    if barrier is not None:
        barrier.wait()
    cpu: list[float] = []
    wall: list[float] = []
    for _ in range(iters):
        c0, w0 = time.thread_time(), time.perf_counter()
        op()
        cpu.append(time.thread_time() - c0)
        wall.append(time.perf_counter() - w0)
    out.put((tag, cpu, wall))


def _run(kind: str, mib: int, iters: int, layout: str) -> list[tuple[list[float], list[float]]]:
    """``alone``: one process on core 0; ``threads2``: one process, two threads on cores 0,1;
    ``together``: two processes on cores 0 and 1 started by a barrier."""
    q = _CTX.Queue()
    if layout == "together":
        barrier = _CTX.Barrier(2)
        procs = [_CTX.Process(target=_loop, args=(kind, mib, iters, 1, {k}, barrier, q, k))
                 for k in (0, 1)]
    elif layout == "threads2":
        procs = [_CTX.Process(target=_loop, args=(kind, mib, iters, 2, {0, 1}, None, q, 0))]
    else:
        procs = [_CTX.Process(target=_loop, args=(kind, mib, iters, 1, {0}, None, q, 0))]
    for p in procs:
        p.start()
    got = sorted(q.get() for _ in procs)
    for p in procs:
        p.join()
    return [(cpu, wall) for _, cpu, wall in got]


def _mid(xs: list[float]) -> list[float]:
    k = len(xs) // 5
    return xs[k:len(xs) - k] if len(xs) > 4 else xs


def _summary(per_repeat: list[float]) -> dict[str, float]:
    return {"median": statistics.median(per_repeat), "min": min(per_repeat),
            "max": max(per_repeat)}


def predict(b1: float, capacity: float, op_s: float, nbytes: int, iters: int) -> float:
    """Per-op time the scheduler predicts for two chains of ``iters`` ops (one per core)
    sharing a controller of ``capacity`` bytes/s, each op ``op_s`` alone moving ``nbytes``."""
    from placewise.graph.ir import Graph, Op, OpKind, Role, TaskHint, Tensor
    from placewise.hardware.spec import Machine
    from placewise.schedule import Assignment, Placement, Problem, schedule
    from placewise.schedule.testing import ToyCostModel
    from placewise.units import DType

    src = "measured by benchmarks/contention.py"

    def dev(name: str) -> dict[str, Any]:
        return {"name": name, "kind": "cpu", "peak_flops_per_s": {"fp32": 1e10},
                "peak_source": src, "launch_overhead_s": 0.0, "launch_source": src,
                "memory": [{"name": "dram", "capacity_bytes": 1 << 40,
                            "bandwidth_bytes_per_s": b1, "source": src}],
                "resources": ["mc"]}

    m = Machine.model_validate({
        "name": "this-machine-2-cores", "devices": [dev("core0"), dev("core1")],
        "shared_resources": [{"name": "mc", "bandwidth_bytes_per_s": capacity,
                              "source": src}],
        "links": [{"name": "l", "endpoints": ["core0", "core1"],
                   "bandwidth_bytes_per_s": 1e12, "latency_s": 0.0, "source": src}]})
    tensors, ops, times, mem, place = [], [], {}, {}, {}
    for core in ("core0", "core1"):
        prev: tuple[str, ...] = ()
        for i in range(iters):
            out = f"{core}_{i}"
            tensors.append(Tensor(out, (1,), DType.FP32,
                                  role=Role.OUTPUT if i == iters - 1 else Role.ACTIVATION))
            ops.append(Op(f"op_{out}", OpKind.TASK, prev, (out,), hint=TaskHint()))
            times[(f"op_{out}", core)] = op_s
            mem[(f"op_{out}", core)] = nbytes
            place[f"op_{out}"] = Assignment(core, DType.FP32)
            prev = (out,)
    g = Graph.build("two-loops", tensors, ops)
    prob = Problem(g, None, m, ToyCostModel(m, times, mem), outputs_to_host=False)
    s = schedule(prob, Placement.of(place))
    return s.makespan_s / iters


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=int, default=256, help="size of each tensor (MiB)")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("needs two cores")
    nbytes = 3 * args.mib * 2**20
    res: dict[str, Any] = {
        "date": datetime.now().isoformat(timespec="seconds"), "machine": platform.node(),
        "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
        "loadavg_before": os.getloadavg(), "mib": args.mib, "iters": args.iters,
        "repeats": args.repeats, "op": "torch.add(a, b, out=c), float32",
        "bytes_per_op": nbytes}
    alone, alone_wall, tog, tog_wall, agg, c_alone, c_tog = [], [], [], [], [], [], []
    copy_alone: list[float] = []
    copy_tog: list[float] = []
    copy_bytes = 2 * args.mib * 2**20
    for _ in range(args.repeats):  # phases interleaved, so that drifting load hits all
        (cpu, wall), = _run("add", args.mib, args.iters, "alone")
        alone.append(statistics.median(_mid(cpu)))
        alone_wall.append(statistics.median(_mid(wall)))
        (c0, w0), (c1, w1) = _run("add", args.mib, args.iters, "together")
        tog.append(statistics.median(_mid(c0) + _mid(c1)))
        tog_wall.append(statistics.median(_mid(w0) + _mid(w1)))
        (k0, _), (k1, _) = _run("copy", args.mib, args.iters, "together")
        agg.append(copy_bytes / statistics.median(_mid(k0)) +
                   copy_bytes / statistics.median(_mid(k1)))
        copy_tog.append(statistics.median(_mid(k0) + _mid(k1)))
        (cpu, _w), = _run("copy", args.mib, args.iters, "alone")
        copy_alone.append(statistics.median(_mid(cpu)))
        (cpu, _w), = _run("mm", args.mib, args.iters, "alone")
        c_alone.append(statistics.median(_mid(cpu)))
        (a0, _), (a1, _) = _run("mm", args.mib, args.iters, "together")
        c_tog.append(statistics.median(_mid(a0) + _mid(a1)))
    t1 = statistics.median(alone)
    b1 = nbytes / t1
    cap = statistics.median(agg)
    t_tog = statistics.median(tog)
    measured = t_tog / t1
    pred_op = predict(b1, cap, t1, nbytes, 8)
    predicted = pred_op / t1
    mm_bytes = 3 * 192 * 192 * 4 * 20
    t_mm = statistics.median(c_alone)
    mm_pred = predict(b1, cap, t_mm, mm_bytes, 8) / t_mm
    res.update({
        "alone_op_s": _summary(alone), "alone_wall_op_s": _summary(alone_wall),
        "single_core_bandwidth_bytes_per_s": b1,
        "aggregate_bandwidth_bytes_per_s": _summary(agg),
        "together_op_s": _summary(tog), "together_wall_op_s": _summary(tog_wall),
        "measured_slowdown": measured,
        "measured_slowdown_per_repeat": [x / y for x, y in zip(tog, alone, strict=True)],
        "measured_wall_slowdown": statistics.median(tog_wall) / statistics.median(alone_wall),
        "predicted_slowdown": predicted,
        "model_2b1_over_C": 2 * b1 / cap,
        "relative_error": (predicted - measured) / measured,
        "copy_alone_op_s": _summary(copy_alone), "copy_together_op_s": _summary(copy_tog),
        "copy_measured_slowdown": statistics.median(copy_tog) / statistics.median(copy_alone),
        "control_mm_alone_s": _summary(c_alone), "control_mm_together_s": _summary(c_tog),
        "control_measured_slowdown": statistics.median(c_tog) / t_mm,
        "control_predicted_slowdown": mm_pred,
        "loadavg_after": os.getloadavg(),
    })
    per = res["measured_slowdown_per_repeat"]
    print(f"memory-bound op: {args.mib} MiB float32 add, {nbytes / 1e6:.0f} MB moved per op")
    print(f"  alone (core 0):       {t1 * 1e3:8.2f} ms/op  -> b1 = {b1 / 1e9:.2f} GB/s  "
          f"(repeats {min(alone) * 1e3:.2f}..{max(alone) * 1e3:.2f} ms)")
    print(f"  aggregate (2 x copy): C = {cap / 1e9:.2f} GB/s  (repeats "
          f"{min(agg) / 1e9:.2f}..{max(agg) / 1e9:.2f}); copy alone "
          f"{copy_bytes / statistics.median(copy_alone) / 1e9:.2f} GB/s, copy slowdown "
          f"together {res['copy_measured_slowdown']:.3f}")
    print(f"  together (2 x add):   {t_tog * 1e3:8.2f} ms/op  (repeats "
          f"{min(tog) * 1e3:.2f}..{max(tog) * 1e3:.2f} ms)")
    print(f"  slowdown measured {measured:.3f} (per repeat {min(per):.3f}..{max(per):.3f}; "
          f"wall {res['measured_wall_slowdown']:.3f})  predicted {predicted:.3f}  "
          f"(2*b1/C = {2 * b1 / cap:.3f}; error {res['relative_error']:+.1%})")
    print(f"control (cache-resident matmul): measured {res['control_measured_slowdown']:.3f}"
          f"  predicted {mm_pred:.3f}")
    print(f"load average before/after: {res['loadavg_before']} / {res['loadavg_after']}")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
