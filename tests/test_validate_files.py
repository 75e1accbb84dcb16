"""validate runs plans of model *files* that plan writes (issue 11): a fixed-batch ONNX
export planned without ``--batch``, and a ``.pt2`` program planned with ``--batch``. Both
used to be refused (a re-bound batch; "graph fingerprints differ")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_validate_refuses import (  # the seeded local machine
    _env,
    _run,
    _run_together,
    xdg,  # noqa: F401
)

SMALL = {"layers": 2, "hidden": 32, "in_features": 16, "out_features": 8}
PT2_BATCHES = [4]

Planned = dict[str, tuple[subprocess.CompletedProcess[str], Path]]


@pytest.fixture(scope="module")
def planned(xdg: Path, tmp_path_factory: pytest.TempPathFactory) -> Planned:  # noqa: F811
    """The model files and ``placewise plan`` of each (key -> the plan process, its plan
    file): ``onnx`` (a fixed-batch export, no --batch) and ``pt2-B`` (``zoo export --format
    pt2``, planned with ``--batch B``). The plan runs go side by side: they measure nothing
    (the validate runs, which do, run one at a time in the tests)."""
    from placewise.graph import zoo

    folder = tmp_path_factory.mktemp("files")
    pt2 = folder / "mlp.pt2"
    opts = "&".join(f"{k}={v}" for k, v in SMALL.items())
    # the CLI writes the .pt2 while this process writes the ONNX file
    export = subprocess.Popen([sys.executable, "-m", "placewise.cli", "zoo", "export",
                               f"mlp?{opts}", "--format", "pt2", "--out", str(pt2)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=_env(xdg))
    onnx = folder / "mlp2.onnx"
    zoo.export_onnx("mlp", {**SMALL, "batch": 2}, onnx, dynamic_batch=False)
    _, err = export.communicate(timeout=600)
    assert export.returncode == 0, err
    runs: dict[str, tuple[Path, list[str]]] = {"onnx": (onnx, [])}
    runs |= {f"pt2-{b}": (pt2, ["--batch", str(b)]) for b in PT2_BATCHES}
    outs = {k: folder / f"plan-{k}.json" for k in runs}
    procs = _run_together(xdg, [["plan", str(model), "--hw", "local", "--strategy",
                                 "single:cpu0", "--out", str(outs[k]), *extra]
                                for k, (model, extra) in runs.items()])
    return {k: (proc, outs[k]) for k, proc in zip(runs, procs, strict=True)}


def _validate(xdg: Path, planned: Planned, key: str) -> dict[str, object]:  # noqa: F811
    proc, plan = planned[key]
    assert proc.returncode == 0, proc.stderr
    got = _run(xdg, "validate", str(plan), "--requests", "4", "--json")
    assert got.returncode == 0, got.stderr
    return json.loads(got.stdout)


def test_a_fixed_batch_onnx_file_validates(xdg: Path, planned: Planned) -> None:  # noqa: F811
    rep = _validate(xdg, planned, "onnx")
    # a single-device plan is also compared with a plain session on exactly its cores
    same = [b for b in rep["baseline"]  # type: ignore[attr-defined]
            if b["name"] == "onnxruntime on the plan's cores"]
    assert len(same) == 1 and same[0]["available"] and len(same[0]["cores"]) == 1
    assert same[0]["plan_latency_speedup"] > 0
    assert rep["quality"] and all(q["rel_l2_max"] <= 1e-5 for q in rep["quality"])  # type: ignore[index, union-attr]


@pytest.mark.parametrize("batch", PT2_BATCHES)
def test_a_pt2_program_planned_with_batch_validates(xdg: Path, planned: Planned,  # noqa: F811
                                                    batch: int) -> None:
    rep = _validate(xdg, planned, f"pt2-{batch}")
    assert rep["plan"]["batch"] == batch  # type: ignore[index]
    assert all(q["rel_l2_max"] <= 1e-5 for q in rep["quality"])  # type: ignore[union-attr]
