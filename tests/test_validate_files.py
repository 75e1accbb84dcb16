"""validate runs plans of model *files* that plan writes (issue 11): a fixed-batch ONNX
export planned without ``--batch``, and a ``.pt2`` program planned with ``--batch``. Both
used to be refused (a re-bound batch; "graph fingerprints differ")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_validate_refuses import _run, xdg  # noqa: F401  (the seeded local machine)

SMALL = {"layers": 2, "hidden": 32, "in_features": 16, "out_features": 8}


def _plan_and_validate(xdg: Path, model: Path, out: Path,  # noqa: F811
                       *extra: str) -> dict[str, object]:
    plan = out / "plan.json"
    got = _run(xdg, "plan", str(model), "--hw", "local", "--strategy", "single:cpu0",
               "--out", str(plan), *extra)
    assert got.returncode == 0, got.stderr
    got = _run(xdg, "validate", str(plan), "--requests", "4", "--json")
    assert got.returncode == 0, got.stderr
    return json.loads(got.stdout)


def test_a_fixed_batch_onnx_file_validates(xdg: Path, tmp_path: Path) -> None:  # noqa: F811
    from placewise.graph import zoo

    model = tmp_path / "mlp2.onnx"
    zoo.export_onnx("mlp", {**SMALL, "batch": 2}, model, dynamic_batch=False)
    rep = _plan_and_validate(xdg, model, tmp_path)
    # a single-device plan is also compared with a plain session on exactly its cores
    same = [b for b in rep["baseline"]  # type: ignore[attr-defined]
            if b["name"] == "onnxruntime on the plan's cores"]
    assert len(same) == 1 and same[0]["available"] and len(same[0]["cores"]) == 1
    assert same[0]["plan_latency_speedup"] > 0
    assert rep["quality"] and all(q["rel_l2_max"] <= 1e-5 for q in rep["quality"])  # type: ignore[index, union-attr]


@pytest.mark.parametrize("batch", [4])
def test_a_pt2_program_planned_with_batch_validates(xdg: Path, tmp_path: Path,  # noqa: F811
                                                    batch: int) -> None:
    model = tmp_path / "mlp.pt2"
    opts = "&".join(f"{k}={v}" for k, v in SMALL.items())
    got = _run(xdg, "zoo", "export", f"mlp?{opts}", "--format", "pt2", "--out", str(model))
    assert got.returncode == 0, got.stderr
    rep = _plan_and_validate(xdg, model, tmp_path, "--batch", str(batch))
    assert rep["plan"]["batch"] == batch  # type: ignore[index]
    assert all(q["rel_l2_max"] <= 1e-5 for q in rep["quality"])  # type: ignore[union-attr]
