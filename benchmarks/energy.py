"""Energy estimates against published efficiency figures (MLPerf Inference power results).

For each preset family with a published figure, plan ResNet-50 as MLPerf runs it and put
``placewise.energy.plan_energy`` beside the published images per second per watt:

- **the model**: ResNet-50 (bottleneck blocks, depths 3-4-6-3, widths 256-2048, 1000
  classes: the MLPerf ResNet-50 v1.5 architecture, 25.5 M parameters, 8.2 GFLOP per
  224x224 image) built from ``transformers``' ``ResNetConfig`` with random weights (energy
  does not depend on them) and exported to ONNX (TorchScript exporter, opset 17, batch
  dimension dynamic);
- **the plan**: the whole model on one accelerator, int8 everywhere (what TensorRT's int8
  engine runs in MLPerf's closed division), at MLPerf's batch, evaluated by the planner's
  own evaluator (``placewise.schedule.evaluate``) on the preset; multi-GPU presets get one
  such plan per GPU, run side by side (the offline scenario keeps every GPU busy), which the
  estimate counts as one plan's energy per GPU plus the host;
- **the comparison**: the estimate at saturation (requests back to back: MLPerf Offline),
  ``saturated_requests_per_j`` = images per second per watt, against the published
  samples/s over the measured system power.

Published figures (MLPerf Inference, closed division, NVIDIA's submissions; power is the
wall power of the whole system measured by the MLPerf power harness, PTD, over the run: the
steady samples of each run's ``spl.txt``, read in this session):

- Jetson AGX Orin (MaxQ): v3.0, ``Orin_TRT_MaxQ``, ResNet-50 Offline 3463.11 samples/s at
  about 22.7 W (GPU at 624.75 MHz, DLAs at 883.2 MHz, EMC 2133 MHz, 4 CPU cores: the
  closest preset mode is ``jetson-agx-orin@30W``, same GPU clock but 4 of 8 TPCs, and MLPerf
  also ran both DLAs);
- A100 PCIe 80GB (8 GPUs, 195 W power limit each): v3.0, ``A100-PCIe-80GBx8_TRT_MaxQ``,
  256,083 samples/s at about 2,050 W;
- H100 SXM (DGX H100, 8 GPUs): v3.1, ``DGX-H100_H100-SXM-80GBx8_TRT_MaxQ``, 474,849
  samples/s at about 4,070 W.

No published efficiency figure for the GH200 or the Core Ultra 7 155H laptop SoC was found
in this session; their rows say so and still give the estimate.

    .venv/bin/python benchmarks/energy.py            # writes benchmarks/results/energy.json

It only plans (no timing claims; about a minute on two cores, most of it exporting the
model once).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from placewise.cost.load import load_cost_model  # noqa: E402
from placewise.energy import plan_energy  # noqa: E402
from placewise.graph.load import load_model  # noqa: E402
from placewise.hardware.load import load_machine  # noqa: E402
from placewise.plan import build_plan  # noqa: E402
from placewise.schedule import Placement, Problem, evaluate  # noqa: E402
from placewise.units import DType  # noqa: E402

MLPERF = "https://github.com/mlcommons/{repo}/tree/main/closed/NVIDIA/results/{system}/resnet50/Offline/performance/run_1"

#: family, preset (and mode), accelerator, batch, published figure
CASES: list[dict[str, Any]] = [
    {"family": "Jetson AGX Orin", "hw": "jetson-agx-orin@30W", "device": "gpu", "batch": 256,
     "published": {"samples_per_s": 3463.11, "system_w": 22.7, "accelerators": 1,
                   "what": "MLPerf Inference v3.0 closed, NVIDIA Orin_TRT_MaxQ, ResNet-50 "
                           "Offline (GPU + 2 DLAs, MaxQ clocks: GPU 624.75 MHz, DLA 883.2 MHz, "
                           "EMC 2133 MHz, 4 CPU cores); wall power of the developer kit",
                   "source": MLPERF.format(repo="inference_results_v3.0",
                                           system="Orin_TRT_MaxQ"),
                   "files": "mlperf_log_summary.txt (samples/s), spl.txt (power samples, "
                            "22.4-22.9 W over the run)"},
     "closeness": "preset mode 30W: same GPU clock (624.75 MHz) but 4 of 8 TPCs, DLAs idle "
                  "in our plan (MLPerf ran both), EMC 3199 MHz (MLPerf 2133)"},
    {"family": "Jetson AGX Orin", "hw": "jetson-agx-orin", "device": "gpu", "batch": 256,
     "published": None,
     "closeness": "MAXN (the preset's default mode): MLPerf publishes no power for MaxP runs; "
                  "shown for the mode's effect on the estimate"},
    {"family": "A100", "hw": "a100-pcie-server", "device": "gpu", "batch": 2048,
     "published": {"samples_per_s": 256083.0, "system_w": 2050.0, "accelerators": 8,
                   "what": "MLPerf Inference v3.0 closed, NVIDIA A100-PCIe-80GBx8_TRT_MaxQ, "
                           "ResNet-50 Offline: 8 A100 PCIe 80GB at a 195 W power limit; wall "
                           "power of the whole server",
                   "source": MLPERF.format(repo="inference_results_v3.0",
                                           system="A100-PCIe-80GBx8_TRT_MaxQ"),
                   "files": "mlperf_log_summary.txt, spl.txt (about 2,049-2,066 W)"},
     "closeness": "preset: 1 A100 PCIe 80GB at its 300 W TDP + 1 EPYC 7763; MLPerf: 8 GPUs "
                  "capped at 195 W, 2 host sockets, fans and power supplies in the figure"},
    {"family": "H100", "hw": "h100-sxm-server", "device": "gpu0", "batch": 2048,
     "published": {"samples_per_s": 474849.0, "system_w": 4070.0, "accelerators": 8,
                   "what": "MLPerf Inference v3.1 closed, NVIDIA "
                           "DGX-H100_H100-SXM-80GBx8_TRT_MaxQ, ResNet-50 Offline: 8 H100 SXM; "
                           "wall power of the DGX H100",
                   "source": MLPERF.format(repo="inference_results_v3.1",
                                           system="DGX-H100_H100-SXM-80GBx8_TRT_MaxQ"),
                   "files": "mlperf_log_summary.txt, spl.txt (about 4,061-4,076 W)"},
     "closeness": "preset: 2 H100 SXM at 700 W + 1 Xeon 8480+ socket; MLPerf: 8 GPUs in MaxQ "
                  "settings, 2 sockets, NVSwitches, fans and power supplies"},
    {"family": "GH200", "hw": "grace-hopper-gh200", "device": "gpu", "batch": 2048,
     "published": None,
     "closeness": "no published ResNet-50 efficiency figure for GH200 was found in this "
                  "session"},
    {"family": "laptop SoC", "hw": "laptop-soc", "device": "gpu", "batch": 8,
     "published": None,
     "closeness": "no published ResNet-50 efficiency figure for the Core Ultra 7 155H was "
                  "found in this session"},
]


def export_resnet50(folder: Path) -> Path:
    """ResNet-50 (transformers' ResNetConfig, 1000 classes, random weights seeded 0) as ONNX
    with a dynamic batch dimension (written once into ``folder``)."""
    path = folder / "resnet50.onnx"
    if path.exists():
        return path
    import torch
    from transformers import ResNetConfig, ResNetForImageClassification

    torch.manual_seed(0)
    model = ResNetForImageClassification(ResNetConfig(num_labels=1000)).eval()

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.model(pixel_values=x).logits

    torch.onnx.export(Logits(), (torch.randn(1, 3, 224, 224),), str(path),
                      input_names=["pixel_values"], output_names=["logits"],
                      dynamic_axes={"pixel_values": {0: "batch"}, "logits": {0: "batch"}},
                      opset_version=17, dynamo=False)
    return path


def run_case(case: dict[str, Any], onnx: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    machine = load_machine(case["hw"])
    graph = load_model(str(onnx), batch=case["batch"])
    prob = Problem(graph, None, machine, load_cost_model(machine, None), batch=case["batch"])
    placement = Placement.uniform(prob.vertex_names, case["device"], DType.INT8)
    plan = build_plan(prob, evaluate(prob, placement), model_ref=str(onnx),
                      strategy=f"single:{case['device']} int8")
    e = plan_energy(plan, machine)
    gpus = [d.name for d in machine.devices if d.kind.value == "gpu"]
    rows = {r.device: r for r in e.devices}
    # several GPUs side by side (offline): each runs its own copy of the plan; the others'
    # idle figure in the estimate becomes their own busy share
    period = plan.throughput.period_s
    extra_j = 0.0
    for g in gpus:
        if g != case["device"]:
            r = rows[g]
            extra_j += (r.active_w - r.idle_w) * rows[case["device"]].busy_s
    sat_run_j = (e.saturated_energy_per_request_j or 0.0) * e.batch + extra_j
    images_per_run = e.batch * max(1, len(gpus))
    est_eff = images_per_run / sat_run_j if sat_run_j > 0 else None
    est_w = sat_run_j / period if period > 0 else None
    out: dict[str, Any] = {
        "family": case["family"], "hw": case["hw"], "machine": machine.name,
        "mode": e.mode, "model": "ResNet-50 (transformers ResNetConfig, ONNX)",
        "batch": case["batch"], "precision": "int8", "placement": plan.strategy,
        "accelerators_used": max(1, len(gpus)),
        "bottleneck": plan.throughput.bottleneck_resource,
        "accelerator_busy_share": rows[case["device"]].busy_s / period if period > 0 else None,
        "predicted_images_per_s": images_per_run / period if period > 0 else None,
        "estimate": {"images_per_s_per_w": est_eff, "average_power_w": est_w,
                     "energy_per_image_j": 1 / est_eff if est_eff else None,
                     "isolated_energy_per_image_j": e.energy_per_request_j,
                     "notes": list(e.notes), "method": e.method,
                     "label": "estimate from the model, not a measurement"},
        "published": case["published"], "closeness": case["closeness"],
        "plan_s": round(time.perf_counter() - t0, 2),
    }
    pub = case["published"]
    if pub is not None and est_eff:
        pub_eff = pub["samples_per_s"] / pub["system_w"]
        out["published_images_per_s_per_w"] = pub_eff
        out["ratio_estimate_over_published"] = est_eff / pub_eff
        n_ours, n_pub = max(1, len(gpus)), pub["accelerators"]
        if out["predicted_images_per_s"] and est_w:
            # the efficiency ratio = throughput ratio / power ratio, per accelerator
            out["throughput_ratio_per_accelerator"] = (
                out["predicted_images_per_s"] / n_ours) / (pub["samples_per_s"] / n_pub)
            out["power_ratio_per_accelerator"] = (est_w / n_ours) / (pub["system_w"] / n_pub)
    return out


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def table(rows: list[dict[str, Any]]) -> str:
    """The comparison as text: ratio = estimated over published images/s/W; tput and
    power: the per-accelerator throughput and power ratios it is the quotient of."""
    head = (f"{'family':16} {'hw':22} {'batch':>5} {'pred img/s':>11} {'est W':>8} "
            f"{'est img/s/W':>11} {'pub img/s/W':>11} {'ratio':>6} {'tput':>5} {'power':>5}  "
            f"bottleneck")
    lines = [head, "-" * len(head)]
    for r in rows:
        pub = r.get("published_images_per_s_per_w")
        ratio = r.get("ratio_estimate_over_published")
        est = r["estimate"]
        lines.append(
            f"{r['family']:16} {r['hw']:22} {r['batch']:>5} "
            f"{r['predicted_images_per_s'] or 0:>11.0f} {est['average_power_w'] or 0:>8.1f} "
            f"{est['images_per_s_per_w'] or 0:>11.1f} "
            f"{'-' if pub is None else format(pub, '.1f'):>11} "
            f"{'-' if ratio is None else format(ratio, '.2f'):>6} "
            f"{_fmt(r.get('throughput_ratio_per_accelerator')):>5} "
            f"{_fmt(r.get('power_ratio_per_accelerator')):>5}  {r['bottleneck']} "
            f"(busy {100 * (r['accelerator_busy_share'] or 0):.0f}%)")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "energy.json")
    ap.add_argument("--model-dir", type=Path, default=None,
                    help="where to keep the exported ONNX (default: a temporary folder)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.model_dir or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        onnx = export_resnet50(folder)
        export_s = time.perf_counter() - t0
        rows = [run_case(c, onnx) for c in CASES]
    print(table(rows))
    result = {"benchmark": "energy estimate vs published efficiency (ResNet-50, int8)",
              "command": "python benchmarks/energy.py", "export_s": round(export_s, 1),
              "wall_s": round(time.perf_counter() - t0, 1), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
