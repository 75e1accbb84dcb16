"""Shared sweeps of tests/sweep: each is run once per session (planning costs seconds)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from placewise.hardware.load import load_machine
from placewise.sweep import SweepConfig, run_sweep

#: the fit-matrix golden case: zoo:mlp on two presets at batch 1 and 4
GOLDEN_CFG = dict(models=("zoo:mlp",), platforms=("jetson-agx-orin", "a100-pcie-server"),
                  batches=(1, 4), slo_s=1e-4, time_limit_s=2.0)


def tiny_machine(path: Path, capacity_bytes: int = 1_500_000) -> Path:
    """The Jetson AGX Orin preset with its unified memory cut to ``capacity_bytes``."""
    spec = load_machine("jetson-agx-orin").model_dump(mode="json")
    spec["name"] = "tiny-orin"
    for dev in spec["devices"]:
        for tier in dev["memory"]:
            tier["capacity_bytes"] = capacity_bytes
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def golden_sweep() -> dict[str, Any]:
    return run_sweep(SweepConfig(**GOLDEN_CFG))  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def regret_sweep() -> dict[str, Any]:
    """zoo:mlp on the Orin at batch 1, 64, 1024 with the exhaustive search: the plan
    moves from the CPU to the GPU as the batch grows."""
    return run_sweep(SweepConfig(models=("zoo:mlp",), platforms=("jetson-agx-orin",),
                                 batches=(1, 64, 1024), strategy="exhaustive",
                                 time_limit_s=2.0))


@pytest.fixture(scope="session")
def tiny_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """zoo:mlp on a 1.5 MB Orin at batch 1, 64, 1024 (1024 does not fit), plans kept."""
    folder = tmp_path_factory.mktemp("tiny")
    hw = tiny_machine(folder / "tiny.yaml")
    plans = folder / "plans"
    plans.mkdir()
    doc = run_sweep(SweepConfig(models=("zoo:mlp",), platforms=(str(hw),),
                                batches=(1, 64, 1024), time_limit_s=2.0,
                                plans_dir=str(plans)))
    return doc, hw
