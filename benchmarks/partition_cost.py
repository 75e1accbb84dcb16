"""The per-partition cost: measured here for a CPU partition, and what charging it does to
plans on a preset.

1. **onnxruntime's fixed cost of one session.run** on this machine: a one-op model (Relu of
   8 floats), one thread, the CPU provider, timed through the Python API (``--rounds``
   rounds of ``--runs`` runs after as many warm-up runs; the median of the rounds' medians).
   This is the figure the presets give a CPU partition (``partition_overhead_s``). On
   ``local`` the calibrated model charges what calibration measured instead (``run_call``
   per device, ``placewise.calibrate.context``: a partition step's time less its nodes').
2. **Partition counts of plans on ``--hw``** (default ``jetson-agx-orin``): each model of
   ``--models`` (zoo references or ONNX files) planned by ``placewise plan`` with
   ``--time-limit`` (``detector``: a small YOLO-like detector built in code,
   ``export_detector``), its partitions counted as the executor and ``export`` cut them
   (``runtime.program.plan_partitions``), with the predicted latency and the ops per device.

Run it with this worktree's code and with another's (``PYTHONPATH=OTHER/src``) to compare
before and after; it uses no API the other lacks.

    .venv/bin/python benchmarks/partition_cost.py --out benchmarks/results/partition_cost.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any


def session_run_overhead(rounds: int, runs: int) -> dict[str, Any]:
    """Median time of one ``session.run`` of a one-op model (seconds), per round."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import helper as h

    x = h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 8])
    y = h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 8])
    g = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    a = np.ones((1, 8), np.float32)
    for _ in range(runs):
        s.run(["y"], {"x": a})
    medians = []
    for _ in range(rounds):
        ts = []
        for _ in range(runs):
            t0 = time.perf_counter_ns()
            s.run(["y"], {"x": a})
            ts.append(time.perf_counter_ns() - t0)
        medians.append(statistics.median(ts) / 1e9)
    return {"median_s": statistics.median(medians), "rounds_s": medians, "runs": runs,
            "onnxruntime": ort.__version__, "threads": 1}


def export_detector(path: Path, image: int = 160, width: int = 16) -> None:
    """A small single-stage detector (YOLO-like), built in code: a strided conv backbone,
    a top-down feature pyramid with upsampling, and at three scales a head whose boxes are
    decoded in the graph (sigmoid, grid offsets, anchor scaling, reshape, concat) — the
    many small elementwise and shape ops of a real detector's export."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    def cbr(cin: int, cout: int, k: int = 3, s: int = 1) -> nn.Module:
        return nn.Sequential(nn.Conv2d(cin, cout, k, s, k // 2, bias=False),
                             nn.BatchNorm2d(cout), nn.SiLU())

    w = width

    class Detector(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(cbr(3, w, 3, 2), cbr(w, 2 * w, 3, 2))
            self.c3 = nn.Sequential(cbr(2 * w, 4 * w, 3, 2), cbr(4 * w, 4 * w))
            self.c4 = nn.Sequential(cbr(4 * w, 8 * w, 3, 2), cbr(8 * w, 8 * w))
            self.c5 = nn.Sequential(cbr(8 * w, 16 * w, 3, 2), cbr(16 * w, 16 * w, 1))
            self.lat5 = cbr(16 * w, 8 * w, 1)
            self.lat4 = cbr(16 * w, 4 * w, 1)
            self.heads = nn.ModuleList([nn.Conv2d(c, 3 * 6, 1) for c in (8 * w, 16 * w, 16 * w)])
            self.up = nn.Upsample(scale_factor=2, mode="nearest")
            self.anchors = [torch.tensor([[10., 13.], [16., 30.], [33., 23.]]) * (2 ** i)
                            for i in range(3)]

        def decode(self, p: torch.Tensor, i: int) -> torch.Tensor:
            n, _, h, ww = p.shape
            p = p.view(n, 3, 6, h, ww).permute(0, 1, 3, 4, 2).sigmoid()
            ys, xs = torch.meshgrid(torch.arange(h), torch.arange(ww), indexing="ij")
            grid = torch.stack((xs, ys), 2).view(1, 1, h, ww, 2).float()
            stride = image / h
            xy = (p[..., :2] * 2 - 0.5 + grid) * stride
            wh = (p[..., 2:4] * 2) ** 2 * self.anchors[i].view(1, 3, 1, 1, 2)
            return torch.cat((xy, wh, p[..., 4:]), -1).view(n, -1, 6)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            c3 = self.c3(self.stem(x))
            c4 = self.c4(c3)
            c5 = self.c5(c4)
            p5 = self.lat5(c5)
            p4 = torch.cat((self.up(p5), c4), 1)
            p3 = torch.cat((self.up(self.lat4(p4)), c3), 1)
            outs = [self.heads[0](p3), self.heads[1](p4), self.heads[2](torch.cat(
                (p5, p5), 1))]
            return torch.cat([self.decode(o, i) for i, o in enumerate(outs)], 1)

    model = Detector().eval()
    torch.onnx.export(model, (torch.randn(1, 3, image, image),), str(path),
                      input_names=["image"], output_names=["boxes"], opset_version=17,
                      dynamo=False)


def plan_partitions_of(model: str, hw: str, time_limit_s: float, tmp: Path) -> dict[str, Any]:
    from placewise.graph.load import load_model
    from placewise.hardware.load import load_machine
    from placewise.plan_file import load_plan
    from placewise.runtime.program import plan_partitions

    out = tmp / (model.replace("/", "_").replace(":", "_").replace("?", "_") + ".json")
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "placewise.cli", "plan", model, "--hw", hw,
                    "--out", str(out), "--time-limit", str(time_limit_s)], check=True,
                   capture_output=True)
    wall = time.perf_counter() - t0
    plan = load_plan(out)
    graph = load_model(model)
    parts = plan_partitions(plan, graph, load_machine(hw))
    ops: Counter[str] = Counter()
    for vertex, rec in plan.regions.items():
        ops[plan.assignment(vertex).device] += len(rec.ops)
    return {"model": model, "ops": len(plan.ops), "partitions": len(parts),
            "partitions_per_device": dict(sorted(Counter(p.device for p in parts).items())),
            "ops_per_device": dict(sorted(ops.items())),
            "latency_s": plan.predicted_latency_s, "plan_wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="zoo:mlp,zoo:resnet,zoo:bert,zoo:gpt,zoo:inception,"
                                        "detector")
    ap.add_argument("--hw", default="jetson-agx-orin")
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--skip-measure", action="store_true")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" /
                                         "partition_cost.json"))
    a = ap.parse_args()
    measured = None if a.skip_measure else session_run_overhead(a.rounds, a.runs)
    rows = []
    with tempfile.TemporaryDirectory(prefix="placewise-parts-") as tmp:
        for model in a.models.split(","):
            if model == "detector":  # built in code (export_detector)
                model = str(Path(tmp) / "detector.onnx")
                export_detector(Path(model))
            r = plan_partitions_of(model, a.hw, a.time_limit, Path(tmp))
            rows.append(r)
            print(f"{model:40s} {r['ops']:5d} ops  {r['partitions']:4d} partitions "
                  f"{r['partitions_per_device']}  latency {r['latency_s'] * 1e3:.3f} ms",
                  flush=True)
    out = {"date": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
           "command": " ".join(sys.argv), "cpus": os.cpu_count(),
           "session_run": measured, "hw": a.hw, "plans": rows}
    if measured is not None:
        print(f"onnxruntime session.run: {measured['median_s'] * 1e6:.1f} us median")
    Path(a.out).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
