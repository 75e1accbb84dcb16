"""The sweep library: fit-matrix golden, the cell records, the regret matrix, working-set
sensitivity with micro-batching applied, the sequence-length axis."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from placewise.hardware.load import load_machine
from placewise.plan import load_plan
from placewise.serve.service import PlanService
from placewise.sweep import SweepConfig, run_sweep, sweep_csv
from placewise.sweep.cells import tier_bytes
from tests.plan_fixtures import golden
from tests.sweep.conftest import tiny_machine

CELL_KEYS = {"model", "platform", "batch", "shape", "objective", "precision", "fits", "reason",
             "latency_s", "throughput_rps", "lower_bound_s", "devices_used",
             "bottleneck_resource", "peak_bytes", "capacity_bytes", "headroom_bytes",
             "energy", "mfu", "memory_bound_fraction", "by_layer_type", "plan_file"}


def _rounded(obj: Any) -> Any:
    if isinstance(obj, float):
        return float(f"{obj:.6g}")
    if isinstance(obj, dict):
        return {k: _rounded(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_rounded(v) for v in obj]
    return obj


def test_fit_matrix_golden(golden_sweep: dict[str, Any]) -> None:
    cells = [{k: c[k] for k in ("model", "platform", "batch", "fits", "chosen", "devices_used",
                                "bottleneck_resource", "latency_s", "throughput_rps",
                                "peak_bytes")} for c in golden_sweep["cells"]]
    text = json.dumps(_rounded({"fit_matrix": golden_sweep["fit_matrix"], "cells": cells}),
                      indent=2, sort_keys=True) + "\n"
    golden("sweep_fit_matrix_mlp.json", text)


def test_cells_carry_the_contract(golden_sweep: dict[str, Any]) -> None:
    doc = golden_sweep
    assert doc["schema"] == "placewise-sweep/1"
    assert [c["batch"] for c in doc["cells"]] == [1, 4, 1, 4]
    for c in doc["cells"]:
        assert set(c) >= CELL_KEYS
        assert c["fits"] and c["reason"] is None
        assert c["lower_bound_s"] <= c["latency_s"]
        assert all(c["headroom_bytes"][k] == c["capacity_bytes"][k] - c["peak_bytes"][k]
                   for k in c["peak_bytes"])
        assert c["energy"]["available"] and c["energy"]["batch"] == c["batch"]
        assert 0 < c["mfu"] <= 1 and 0 <= c["memory_bound_fraction"] <= 1
        assert c["by_layer_type"]
    # the SLO of 100 us: the A100 server's lowest latency is above it
    fm = {c["platform"]: c for c in doc["fit_matrix"]["cells"]}
    a100 = [c for c in doc["cells"] if c["platform"] == "a100-pcie-server"]
    assert min(c["latency_s"] for c in a100) > 1e-4
    assert not fm["a100-pcie-server"]["fits"]
    assert fm["a100-pcie-server"]["reason"].startswith("misses the SLO")
    orin = [c for c in doc["cells"] if c["platform"] == "jetson-agx-orin"]
    best = max((c for c in orin if c["latency_s"] <= 1e-4), key=lambda c: c["throughput_rps"])
    assert fm["jetson-agx-orin"]["best_batch"] == best["batch"]
    assert fm["jetson-agx-orin"]["requests_per_j"] == best["energy"]["requests_per_j"]
    rows = sweep_csv(doc).splitlines()
    assert len(rows) == 5 and rows[0].startswith("model,platform,batch")


def test_regret_matrix(regret_sweep: dict[str, Any]) -> None:
    """Diagonal 0 and each plan re-evaluated at its own batch reproduces its cell; with the
    exhaustive search the plan chosen at b2 is the best of the space, so no plan chosen
    elsewhere beats it at b2 (regret >= 0); the CPU plan of batch 1 costs more at 1024."""
    doc = regret_sweep
    (r,) = doc["regret"]
    cells = doc["cells"]
    assert r["batches"] == [1, 64, 1024] and r["score"] == "latency_s"
    n = len(r["batches"])
    for i in range(n):
        assert r["regret"][i][i] == 0.0
        assert r["latency_s"][i][i] == cells[i]["latency_s"]
        for j in range(n):
            assert r["regret"][i][j] is not None and r["regret"][i][j] >= 0.0
            own = r["score_s"][j][j]
            assert math.isclose(r["regret"][i][j], (r["score_s"][i][j] - own) / own)
    assert r["negative"] == 0
    assert cells[0]["devices_used"] != cells[2]["devices_used"]
    assert r["regret"][0][2] > 0.5  # the batch-1 plan at 1024 is much slower


def test_sensitivity_edge_and_micro_batching(tiny_sweep: tuple[dict[str, Any], Path]) -> None:
    doc, hw = tiny_sweep
    cells = {c["batch"]: c for c in doc["cells"]}
    assert cells[1]["fits"] and cells[64]["fits"] and not cells[1024]["fits"]
    assert "1.43 MiB" in cells[1024]["reason"]
    (s,) = [s for s in doc["sensitivity"] if s["axis"] == "batch"]
    assert (s["plan_batch"], s["edge"], s["first_unfit"]) == (64, 64, 1024)
    peaks = [p["peak_bytes"]["pool:lpddr5-mc"] for p in s["points"]]
    assert peaks == sorted(peaks) and peaks[-1] > 1_500_000 >= peaks[1]
    past = s["points"][-1]
    applied = past["applied"]
    assert not past["fits"] and applied["kind"] == "micro_batch" and applied["fits"]
    k, size = applied["micro_batches"], applied["micro_batch_size"]
    assert k >= 2 and k * size >= 1024 > (k - 1) * size
    # the same placement at the micro-batch, evaluated independently from the plan file
    plan = load_plan(cells[64]["plan_file"])
    machine = load_machine(str(hw))
    from placewise.cost.load import load_cost_model

    svc = PlanService(plan, machine, load_cost_model(machine, None), mode="same")
    ev = svc.evaluation(size)
    assert ev.feasible
    assert applied["peak_bytes"] == tier_bytes(ev)[0]
    assert math.isclose(applied["latency_s"], ev.latency_s + (k - 1) * ev.pipeline.period_s)
    assert math.isclose(applied["extra_s"], applied["latency_s"] - past["latency_s"])
    assert applied["latency_s"] > past["latency_s"]  # splitting costs time
    fm = doc["fit_matrix"]["cells"][0]
    assert fm["fits"] and fm["best_batch"] == 64


def test_sequence_length_axis(tmp_path: Path) -> None:
    """bert (one layer) at batch 1 on a 2 MB Orin: the attention grows with the sequence
    until the plan stops fitting; at batch 1 micro-batching cannot help, and the record
    says so."""
    hw = tiny_machine(tmp_path / "tiny.yaml", capacity_bytes=2_000_000)
    doc = run_sweep(SweepConfig(models=("zoo:bert?layers=1",), platforms=(str(hw),),
                                batches=(1,), seqs=(16, 64, 512), time_limit_s=2.0))
    (s,) = [s for s in doc["sensitivity"] if s["axis"] == "seq"]
    assert [p["value"] for p in s["points"]] == [16, 64, 512]
    peaks = [max(p["peak_bytes"].values()) for p in s["points"]]
    assert peaks == sorted(peaks)
    assert s["points"][0]["fits"] and not s["points"][-1]["fits"]
    assert (s["edge"], s["first_unfit"]) == (64, 512)
    applied = s["points"][-1]["applied"]
    assert applied["kind"] == "micro_batch" and applied["latency_s"] is None
    assert not applied["modelled"] and "not possible" in applied["note"]
