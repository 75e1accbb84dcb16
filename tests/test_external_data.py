"""A model whose weights are ONNX external data (``mlp.onnx`` + ``mlp.onnx.data``) through
profile, plan, validate and export, as a user runs them; the export folder is
self-contained (moved elsewhere, plain onnxruntime chains it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from placewise.cost.load import load_cost_model
from placewise.export import export_plan
from placewise.graph.onnx_data import external_locations
from placewise.plan import build_plan, save_plan
from placewise.runtime.opexec import load_source
from placewise.schedule import Assignment, Placement, Problem, evaluate
from placewise.units import DType
from tests.cli_runner import run_cli
from tests.graph.test_onnx_data import mlp, with_data
from tests.runtime.helpers import local_machine


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="120", TERM="dumb", PYTHONHASHSEED="0")
    return run_cli(args, env=env, timeout=1200)


def chain_folder(folder: Path, feeds: dict[str, np.ndarray[Any, Any]]
                 ) -> list[np.ndarray[Any, Any]]:
    """The export's graph outputs, its partitions chained by plain onnxruntime."""
    man = json.loads((folder / "manifest.json").read_text())
    vals = dict(feeds)
    for p in man["partitions"]:
        sess = ort.InferenceSession(str(folder / p["file"]), providers=["CPUExecutionProvider"])
        outs = [o["name"] for o in p["outputs"]]
        vals.update(zip(outs, sess.run(outs, {i["name"]: vals[i["name"]]
                                                for i in p["inputs"]}), strict=True))
    return [vals[t["name"]] for t in man["graph_outputs"]]


def rel_l2(a: Any, b: Any) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def self_contained(folder: Path) -> list[str]:
    """Every external-data location the partitions name: plain names of files beside."""
    locs = []
    for f in sorted(folder.glob("*.onnx")):
        for loc in external_locations(onnx.load(str(f), load_external_data=False)):
            assert os.path.basename(loc) == loc and (folder / loc).is_file(), (f, loc)
            locs.append(loc)
    return locs


def test_profile_plan_validate_export_of_a_model_with_external_data(tmp_path: Path) -> None:
    model = with_data(tmp_path / "src")
    cal, plan, out = tmp_path / "cal.json", tmp_path / "plan.json", tmp_path / "out"
    p = cli("profile", str(model), "--hw", "local", "--out", str(cal), "--max-time", "0.05",
            "--context-requests", "1", "--context-rounds", "1", "--json")
    assert p.returncode == 0, p.stderr
    p = cli("plan", str(model), "--hw", "local", "--calibration", str(cal), "--time-limit",
            "3", "--out", str(plan))
    assert p.returncode == 0, p.stderr
    p = cli("validate", str(plan), "--requests", "1", "--json")
    assert p.returncode == 0, p.stderr
    v = json.loads(p.stdout)
    assert max(q["rel_l2_max"] for q in v["quality"]) <= 1e-5
    p = cli("export", str(plan), "--out", str(out))
    assert p.returncode == 0, p.stderr
    assert self_contained(out)  # the weights went out, into the export folder
    moved = tmp_path / "elsewhere" / "export"
    shutil.move(str(out), str(moved))
    shutil.rmtree(tmp_path / "src")  # nothing refers to the source's data file
    x = np.random.default_rng(0).standard_normal((2, 160)).astype(np.float32)
    ref = ort.InferenceSession(mlp().SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = chain_folder(moved, {"x": x})
    assert rel_l2(got[0], ref[0]) <= 1e-5


def test_export_shares_a_devices_weights_once(tmp_path: Path) -> None:
    """Partitions on cpu0, cpu1 (int8, fp32), cpu0; the last reuses the first's weight (tied):
    the cpu0 partitions share one weights file, the tied weight written once in it."""
    path = with_data(tmp_path / "src", mlp(tied=True))
    src = load_source(str(path))
    assert src.graph is not None
    m = local_machine()
    prob = Problem(src.graph, None, m, load_cost_model(m, None), batch=1)
    assert prob.vertex_names == ["mm0", "relu0", "mm1", "relu1", "mm2", "relu2"]
    place = {v: Assignment("cpu0", DType.FP32) for v in prob.vertex_names}
    place["mm1"] = Assignment("cpu1", DType.INT8)  # onnxruntime quantizes it
    place["relu1"] = Assignment("cpu1", DType.FP32)
    plan = build_plan(prob, evaluate(prob, Placement.of(place)), model_ref=str(path),
                      strategy="test")
    save_plan(plan, tmp_path / "plan.json")
    out = tmp_path / "out"
    manifest = export_plan(tmp_path / "plan.json", out, machine=m)
    assert [p.device for p in manifest.partitions] == ["cpu0", "cpu1", "cpu1", "cpu0"]
    # cpu1's partitions are small (25 KiB of int8 weights, a Relu): they keep them inside
    assert [p.external_data for p in manifest.partitions] == ["weights.cpu0.bin", None, None,
                                                              "weights.cpu0.bin"]
    assert self_contained(out) == ["weights.cpu0.bin"] * 2
    # w0 (read by the first and the last partition) and nothing else: written once
    w0 = 160 * 160 * 4
    assert w0 <= (out / "weights.cpu0.bin").stat().st_size < 2 * w0
    moved = tmp_path / "moved"
    shutil.move(str(out), str(moved))
    x = np.random.default_rng(0).standard_normal((2, 160)).astype(np.float32)
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None,
                                                                                 {"x": x})
    assert rel_l2(chain_folder(moved, {"x": x})[0], ref[0]) <= 0.05  # one int8 layer


def test_external_data_outside_the_models_folder_is_bad_input(tmp_path: Path) -> None:
    from tests.test_cli import assert_bad_input

    path = with_data(tmp_path / "a")
    m = onnx.load(str(path), load_external_data=False)
    for e in m.graph.initializer[2].external_data:
        if e.key == "location":
            e.value = "../mlp.onnx.data"
    shutil.copy(tmp_path / "a" / "mlp.onnx.data", tmp_path / "mlp.onnx.data")
    onnx.save_model(m, str(path))
    assert_bad_input(cli("inspect", str(path)), str(path), "w2", "escapes")
