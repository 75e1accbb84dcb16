"""``--engine ray`` gives the same sweep as ``--engine local`` (a local Ray cluster)."""

from __future__ import annotations

from typing import Any

import pytest

from placewise.sweep import SweepConfig, run_sweep
from tests.sweep.conftest import GOLDEN_CFG

pytest.importorskip("ray")


def _strip(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in ("timing", "engine")}


def test_ray_equals_local(golden_sweep: dict[str, Any]) -> None:
    """The golden case's four cells as Ray tasks on a 2-CPU local cluster (started and shut
    down by the sweep): the document equals the in-process one but for timing and engine."""
    got = run_sweep(SweepConfig(**GOLDEN_CFG), engine="ray",  # type: ignore[arg-type]
                    ray_num_cpus=2)
    assert got["engine"] == "ray" and golden_sweep["engine"] == "local"
    assert got["timing"]["cells"] == 4 and got["timing"]["engine_start_s"] > 0
    assert not any(c["wall_stopped"] for c in got["cells"])
    assert _strip(got) == _strip(golden_sweep)
