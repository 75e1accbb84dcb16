"""Grouped and depthwise convolution costs: predicted against measured on this machine, and
what they do to a depthwise-separable CNN's plan on a preset.

A MobileNetV2-like network is built in code (``build_mobilenet``: a stride-2 stem, then
inverted-residual blocks — 1x1 expand, 3x3 depthwise, 1x1 project, skip where the shape
allows — pooled into a classifier), exported to ONNX and imported. Then:

1. **Per op on ``local``**: every distinct conv is profiled on ``--devices``
   (``placewise.calibrate.profile``, medians over repeats), and its roofline prediction on the
   probed machine is set beside it: ratio predicted / measured, by kind (depthwise = group
   equals channels, pointwise/dense = group 1).
2. **The calibrated model still fits**: the fit of the conv kind over those measurements
   (``fit_measurements``: leave-one-out median absolute error).
3. **The plan on a preset** (``--hw``, default ``jetson-agx-orin``): the predicted op times
   of a depthwise conv on its CPU and GPU, and the split of the whole network between
   devices in a plan searched with ``placewise.planning``'s default strategy (ops and FLOPs
   per device, partitions, predicted latency).

Run it with this worktree's code and with another's (``PYTHONPATH=OTHER/src``) to compare
before and after; it uses no API the other lacks.

    .venv/bin/python benchmarks/depthwise_costs.py --out benchmarks/results/depthwise_costs.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any


def build_mobilenet(width: int = 16, image: int = 112, batch: int = 1) -> tuple[Any, Any]:
    """A MobileNetV2-like network: (torch module, example input)."""
    import torch
    from torch import nn

    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
            super().__init__()
            mid = cin * expand
            self.skip = stride == 1 and cin == cout
            self.body = nn.Sequential(
                nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU6(),
                nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False),
                nn.BatchNorm2d(mid), nn.ReLU6(),
                nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.body(x)
            return x + y if self.skip else y

    w = width
    cfg = [(w, w, 1, 1), (w, w * 3 // 2, 2, 6), (w * 3 // 2, w * 3 // 2, 1, 6),
           (w * 3 // 2, w * 2, 2, 6), (w * 2, w * 2, 1, 6), (w * 2, w * 4, 2, 6),
           (w * 4, w * 4, 1, 6), (w * 4, w * 6, 1, 6)]
    layers: list[nn.Module] = [nn.Conv2d(3, w, 3, 2, 1, bias=False), nn.BatchNorm2d(w),
                               nn.ReLU6()]
    layers += [Block(*c) for c in cfg]
    layers += [nn.Conv2d(w * 6, w * 20, 1, bias=False), nn.BatchNorm2d(w * 20), nn.ReLU6(),
               nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(w * 20, 100)]
    model = nn.Sequential(*layers).eval()
    return model, torch.randn(batch, 3, image, image)


def _export(path: Path, width: int, image: int) -> None:
    import torch

    model, x = build_mobilenet(width, image)
    torch.onnx.export(model, (x,), str(path), input_names=["image"], output_names=["logits"],
                      opset_version=17, dynamo=False)


def _kind(op: Any, graph: Any) -> str:
    group = int(op.attrs.get("group", 1) or 1)
    if group == 1:
        return "dense"
    cin = graph.in_tensors(op)[0].concrete_shape[1]
    return "depthwise" if group == cin else "grouped"


def _local(graph: Any, source: Any, devices: list[str], repeats: int) -> dict[str, Any]:
    from placewise.calibrate.profile import profile_models
    from placewise.cost.calibrated import fit_measurements, op_key
    from placewise.cost.roofline import RooflineModel
    from placewise.graph.ir import OpKind
    from placewise.hardware.probe import load_local
    from placewise.units import DType

    machine = load_local()
    (cal,) = profile_models([(graph, source)], machine, devices=devices, min_repeats=repeats,
                            conversions=False)
    rm = RooflineModel(machine)
    by_key = {(m.device, m.key): m for m in cal.measurements if not m.flags}
    rows = []
    seen: set[tuple[str, str]] = set()
    for op in graph.ops:
        if op.kind is not OpKind.CONV:
            continue
        key = op_key(graph, op, DType.FP32)[0]
        for dev in devices:
            m = by_key.get((dev, key))
            if m is None or (dev, key) in seen:
                continue
            seen.add((dev, key))
            c = rm.op_cost(graph, op, dev, DType.FP32)
            rows.append({"device": dev, "op": op.name, "kind": _kind(op, graph),
                         "measured_s": m.median_s, "roofline_s": c.total_s,
                         "ratio": c.total_s / m.median_s, "bottleneck": c.bottleneck.value})
    fits = [f for f in fit_measurements(cal.measurements)
            if f.kind == "conv" and f.level == "kind"]
    summary: dict[str, Any] = {}
    for dev in devices:
        for kind in ("depthwise", "dense"):
            r = [x["ratio"] for x in rows if x["device"] == dev and x["kind"] == kind]
            if r:
                summary[f"{dev}/{kind}"] = {"n": len(r), "median_ratio": statistics.median(r),
                                            "min_ratio": min(r), "max_ratio": max(r)}
    return {"machine": machine.name, "rows": rows, "ratio_summary": summary,
            "conv_fits": [{"device": f.device, "features": f.features, "coef": f.coef,
                           "n": f.n, "loo_median_abs_pct": f.loo_median_abs_pct,
                           "resid_q10": f.resid_q10, "resid_q90": f.resid_q90}
                          for f in fits]}


def _preset(graph: Any, path: Path, hw: str, budget_s: float) -> dict[str, Any]:
    import subprocess

    from placewise.cost.roofline import RooflineModel
    from placewise.errors import UnsupportedError
    from placewise.graph.ir import OpKind
    from placewise.hardware.load import load_machine
    from placewise.plan_file import load_plan
    from placewise.runtime.program import plan_partitions
    from placewise.units import DType

    machine = load_machine(hw)
    rm = RooflineModel(machine)
    dw = [op for op in graph.ops if op.kind is OpKind.CONV and _kind(op, graph) == "depthwise"]
    big = max(dw, key=lambda o: graph.out_tensors(o)[0].numel)
    per_device = {}
    for d in machine.devices:
        try:
            c = rm.op_cost(graph, big, d.name, DType.FP32)
        except UnsupportedError:  # a device that cannot run it
            continue
        per_device[d.name] = {"total_s": c.total_s, "bottleneck": c.bottleneck.value,
                              "flops": dict(c.assumptions).get("flops")}
    out = path.with_suffix(".plan.json")
    subprocess.run([sys.executable, "-m", "placewise.cli", "plan", str(path), "--hw", hw,
                    "--out", str(out), "--time-limit", str(budget_s)], check=True,
                   capture_output=True)
    plan = load_plan(out)
    ops: Counter[str] = Counter()
    flops: Counter[str] = Counter()
    tasks = plan.task_index()
    for vertex, rec in plan.regions.items():
        dev = plan.assignment(vertex).device
        ops[dev] += len(rec.ops)
        flops[dev] += float(tasks[vertex].assumptions.get("flops", 0.0) or 0.0)
    parts = plan_partitions(plan, graph, load_machine(hw))
    return {"hw": hw, "depthwise_op": big.name, "depthwise_costs": per_device,
            "plan": {"ops_per_device": dict(sorted(ops.items())),
                     "flops_per_device": dict(sorted(flops.items())),
                     "latency_s": plan.predicted_latency_s, "partitions": len(parts)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--image", type=int, default=224)
    ap.add_argument("--devices", default="cpu0")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--hw", default="jetson-agx-orin")
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--skip-local", action="store_true")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" /
                                         "depthwise_costs.json"))
    a = ap.parse_args()
    from placewise.runtime.opexec import load_source

    with tempfile.TemporaryDirectory(prefix="placewise-dw-") as tmp:
        path = Path(tmp) / "mobilenet.onnx"
        _export(path, a.width, a.image)
        source = load_source(str(path))
        graph = source.graph
        local = None if a.skip_local else _local(graph, source, a.devices.split(","),
                                                 a.repeats)
        preset = _preset(graph, path, a.hw, a.time_limit)
    out = {"date": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
           "command": " ".join(sys.argv), "cpus": os.cpu_count(),
           "model": {"width": a.width, "image": a.image, "ops": len(graph.ops)},
           "local": local, "preset": preset}
    Path(a.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({"local": local and local["ratio_summary"],
                      "fits": local and local["conv_fits"], "preset": out["preset"]}, indent=1))


if __name__ == "__main__":
    main()
