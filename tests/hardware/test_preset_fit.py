"""The presets' efficiency blocks are what ``benchmarks/fit_presets.py`` fits from the
published kernel measurements (no hand edits drifting from the data), and the whole-model
check data is complete enough to check them (cited rows over several presets)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from placewise.graph.ir import OpKind
from placewise.hardware.load import load_machine
from placewise.hardware.spec import list_presets
from placewise.units import DType

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "benchmarks" / "data"


def _module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def fitted() -> dict:
    fit = _module("fit_presets")
    return fit.fit(yaml.safe_load((DATA / "published_kernels.yaml").read_text()))


def test_the_h100_fit_reproduces_the_published_gemm_points_within_its_stated_error(
        fitted: dict) -> None:
    h = fitted["h100_fit"]
    assert h["points"] == 72
    assert 0.5 < h["peak_fraction"] <= 1.0 and 1e-6 < h["kernel_s"] < 20e-6
    assert h["median_abs_rel_error"] < 0.15 and h["max_abs_rel_error"] < 0.5


@pytest.mark.parametrize("preset", ["h100-sxm-server", "grace-hopper-gh200",
                                    "a100-pcie-server", "jetson-agx-orin"])
def test_each_preset_block_is_the_fit_of_the_data(fitted: dict, preset: str) -> None:
    want = fitted["devices"][preset]
    dev = load_machine(preset).device(want["device"])
    assert dev.efficiency is not None
    assert dev.efficiency.kernel_s == pytest.approx(want["kernel_s"], rel=1e-3)
    for curve in want["contraction"]:
        for name in curve["dtypes"]:
            got = dev.efficiency.curve_for(OpKind.MATMUL, DType.parse(name))
            assert got is not None
            assert got.peak_fraction == pytest.approx(curve["peak_fraction"], abs=1e-3)
            assert got.half_work_flops == pytest.approx(curve["half_work_flops"], rel=1e-2)


def test_every_published_kernel_set_is_cited() -> None:
    data = yaml.safe_load((DATA / "published_kernels.yaml").read_text())
    for s in data["gemm"] + data["bandwidth"]:
        assert "http" in s["source"]
    assert "http" in data["mamf"]["source"]


def test_the_whole_model_checks_cover_ten_rows_on_three_presets_each_cited() -> None:
    data = yaml.safe_load((DATA / "published_models.yaml").read_text())
    rows = data["rows"]
    assert len(rows) >= 10 and len({r["preset"] for r in rows}) >= 3
    presets = set(list_presets())
    for r in rows:
        assert r["preset"] in presets
        assert r["source"] and r["software"] and r["precision"] and r["batch"] >= 1
        assert ("latency_s" in r) != ("samples_per_s" in r)
        machine = load_machine(r["preset"])
        for device in r["devices"]:
            machine.device(device)  # raises KeyError for a device the preset lacks
