"""Fit the presets' efficiency blocks to published kernel-level measurements.

Reads ``benchmarks/data/published_kernels.yaml`` (GEMM throughput per shape, maximum
achievable matmul FLOPS, streaming bandwidth: each set with its citation) and fits the
contraction curve of ``placewise.hardware.efficiency``:

    time(W) = (W + half_work_flops) / (peak_fraction * peak)
            = W / (peak_fraction * peak) + kernel_s

(``efficiency(W) = peak_fraction * W / (W + half_work_flops)``; ``kernel_s`` is the fixed
time of one small kernel). Two parameters, least squares on log time over every published
point of a device's size sweep (grid search, no tuning to any whole-model result):

- **H100 SXM** (``h100-sxm-server``): fitted to XLA's H100 bf16 GEMM table (72 shapes);
- **GH200** and **A100 PCIe**: no size sweep was found for them, so ``peak_fraction`` is
  solved from their published maximum achievable matmul FLOPS (MAMF, one large GEMM) with
  the H100 fit's ``kernel_s`` (the same fixed time per kernel, a transfer stated in the
  source);
- **Jetson AGX Orin** GPU: no Orin GEMM measurement was found; it takes the A100 PCIe
  (Ampere, same tensor-core generation) ``peak_fraction`` and the H100 ``kernel_s``,
  stated as a transfer.

fp16 runs on the same tensor cores at the bf16 rate and takes the bf16 curve; int8 (twice
the peak) takes the same ``peak_fraction`` and ``kernel_s`` (no int8 GEMM sweep was found):
its ``half_work_flops`` is ``peak_fraction * int8 peak * kernel_s``.

    .venv/bin/python benchmarks/fit_presets.py     # prints the blocks, writes results/fit_presets.json

Pure arithmetic on the data file: a second or two.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data" / "published_kernels.yaml"
OUT = ROOT / "benchmarks" / "results" / "fit_presets.json"

#: (preset, device) -> the dense tensor peaks (flop/s) per dtype of the preset, read from it
TARGETS = [("h100-sxm-server", "gpu0"), ("grace-hopper-gh200", "gpu"),
           ("a100-pcie-server", "gpu"), ("jetson-agx-orin", "gpu")]


def fit_floor_curve(work: np.ndarray, flops_per_s: np.ndarray, peak: float
                    ) -> tuple[float, float, dict[str, float]]:
    """(peak_fraction, kernel_s, residuals) minimising the squared log error of
    ``time = work / (peak_fraction * peak) + kernel_s`` over the points.

    >>> w = np.array([1e8, 1e9, 1e10, 1e11]); t = w / (0.8 * 1e15) + 5e-6
    >>> pf, t0, _ = fit_floor_curve(w, w / t, 1e15)
    >>> round(pf, 3), round(t0 * 1e6, 2)
    (0.8, 5.0)
    """
    t = work / flops_per_s
    pfs = np.linspace(0.30, 1.00, 701)
    t0s = np.linspace(0.0, 30e-6, 1201)
    best = (math.inf, 0.0, 0.0)
    for pf in pfs:
        pred = work[None, :] / (pf * peak) + t0s[:, None]
        err = np.sum(np.log(pred / t[None, :]) ** 2, axis=1)
        i = int(np.argmin(err))
        if err[i] < best[0]:
            best = (float(err[i]), float(pf), float(t0s[i]))
    _, pf, t0 = best
    rel = (work / (pf * peak) + t0) / t - 1.0
    return pf, t0, {"points": float(len(t)), "median_abs_rel_error": float(np.median(np.abs(rel))),
                    "max_abs_rel_error": float(np.max(np.abs(rel)))}


def _peaks(preset: str, device: str) -> dict[str, float]:
    sys.path.insert(0, str(ROOT / "src"))
    from placewise.hardware.load import load_machine

    dev = load_machine(preset).device(device)
    return {d.value: float(v) for d, v in dev.peak_flops_per_s.items()}


def _curves(pf: float, t0: float, peaks: dict[str, float], source: str) -> list[dict[str, Any]]:
    """The curve entries of one device: bf16/fp16 share the tensor rate, int8 its own."""
    out = []
    groups = [["bf16", "fp16"], ["int8"]]
    for dtypes in groups:
        have = [d for d in dtypes if d in peaks]
        if not have:
            continue
        peak = peaks[have[0]]
        out.append({"dtypes": have, "peak_fraction": round(pf, 3),
                    "half_work_flops": float(f"{pf * peak * t0:.3g}"), "source": source})
    return out


def fit(data: dict[str, Any]) -> dict[str, Any]:
    sweep = data["gemm"][0]
    pts = sweep["points"]
    work = np.array([2.0 * p["b"] * p["m"] * p["n"] * p["k"] for p in pts])
    fps = np.array([float(p["flops_per_s"]) for p in pts])
    pf_h, t0, resid = fit_floor_curve(work, fps, float(sweep["peak_flops_per_s"]))
    mamf = {p["device"]: p for p in data["mamf"]["points"]}

    def from_mamf(name: str) -> float:
        p = mamf[name]
        w = 2.0 * math.prod(p["shape_mnk"])
        return w / (p["peak_flops_per_s"] * (w / p["flops_per_s"] - t0))

    h100_check = from_mamf("NVIDIA H100 SXM")
    pf = {"h100-sxm-server": pf_h, "grace-hopper-gh200": from_mamf(
        "NVIDIA GH200 SXM (900 W, 141 GB HBM3e)"), "a100-pcie-server": from_mamf(
        "NVIDIA A100 PCIe")}
    pf["jetson-agx-orin"] = pf["a100-pcie-server"]
    xla = "XLA H100 bf16 GEMM table (benchmarks/data/published_kernels.yaml, xla-h100-bf16)"
    mamf_src = "MAMF table, ml-engineering compute/accelerator/README.md"
    why = {
        "h100-sxm-server": f"least-squares fit to the {int(resid['points'])} shapes of the {xla}",
        "grace-hopper-gh200": f"peak_fraction from the GH200 bf16 MAMF point ({mamf_src}) "
                              f"with the kernel time of the H100 fit to the {xla}",
        "a100-pcie-server": f"peak_fraction from the A100 PCIe bf16 MAMF point ({mamf_src}) "
                            f"with the kernel time of the H100 fit to the {xla}",
        "jetson-agx-orin": "transferred, no Orin GEMM measurement found: the A100 PCIe "
                           f"(Ampere) peak_fraction ({mamf_src}) and the kernel time of the "
                           f"H100 fit to the {xla}",
    }
    devices: dict[str, Any] = {}
    for preset, dev in TARGETS:
        peaks = _peaks(preset, dev)
        src = (f"fitted by benchmarks/fit_presets.py: {why[preset]}; time(W) = (W + "
               f"half_work_flops) / (peak_fraction x peak), kernel time {t0 * 1e6:.2f} us; "
               f"int8 assumed at the bf16 fraction of its own peak (no int8 GEMM sweep found)")
        devices[preset] = {"device": dev, "peak_fraction": pf[preset], "kernel_s": t0,
                           "contraction": _curves(pf[preset], t0, peaks, src)}
    return {"h100_fit": {"peak_fraction": pf_h, "kernel_s": t0, **resid,
                         "mamf_check_peak_fraction": h100_check},
            "devices": devices}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    result = fit(yaml.safe_load(args.data.read_text()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    h = result["h100_fit"]
    print(f"H100 bf16 fit over {int(h['points'])} shapes: peak_fraction {h['peak_fraction']:.3f}, "
          f"kernel_s {h['kernel_s'] * 1e6:.2f} us; |rel err| median "
          f"{h['median_abs_rel_error']:.1%}, max {h['max_abs_rel_error']:.1%}; MAMF check "
          f"peak_fraction {h['mamf_check_peak_fraction']:.3f}")
    for preset, d in result["devices"].items():
        print(f"\n# {preset} / {d['device']}")
        print(yaml.safe_dump({"contraction": d["contraction"]}, sort_keys=False, width=100))


if __name__ == "__main__":
    main()
