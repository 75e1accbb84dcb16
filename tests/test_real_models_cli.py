"""The command line on real transformer exports (``tests/realmodels.py``): inspect, plan on
a preset and on ``local``, export and validate, one export per architecture (the full
12 x command matrix is ``benchmarks/real_models.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from placewise import cli

pytest.importorskip("transformers")

from tests.realmodels import export

# one export per architecture, every export format among them
CASES = [("bert", "ts"), ("gpt2", "dynamo"), ("vit", "pt2"), ("t5", "dynamo")]


@pytest.fixture(scope="session")
def real_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's export folder, shared with tests/graph/test_real_exports.py."""
    return tmp_path_factory.getbasetemp() / "realmodels"


def _local_strategy(fmt: str) -> str:
    """greedy (many partitions: ONNX partitions are cut cheaply) for ONNX files; one
    device for a program, whose every partition is an export of its own (seconds each)."""
    if fmt != "pt2":
        return "greedy"
    from placewise.hardware.probe import load_local

    return f"single:{load_local().devices[0].name}"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``placewise ARGS`` run in this process."""
    capsys.readouterr()
    try:
        cli.main(list(args))
    except SystemExit as e:
        code = int(e.code or 0)
    else:  # pragma: no cover - main always exits
        code = 0
    got = capsys.readouterr()
    return code, got.out, got.err


@pytest.mark.parametrize("model,fmt", CASES, ids=[f"{m}-{f}" for m, f in CASES])
def test_inspect_plan_export_validate(capsys: pytest.CaptureFixture[str], real_folder: Path,
                                      tmp_path: Path, model: str, fmt: str) -> None:
    path = str(export(model, fmt, real_folder))
    code, text, err = run(capsys, "inspect", path)
    assert code == 0, err
    assert "every op kind counted" in text
    want = "torch.export" if fmt == "pt2" else "onnx"
    assert f"shapes: {want}" in text

    preset = tmp_path / "preset.json"
    code, _, err = run(capsys, "plan", path, "--hw", "jetson-agx-orin", "--strategy", "greedy",
                       "--out", str(preset))
    assert code == 0, err
    assert json.loads(preset.read_text())["machine"]["name"] == "jetson-agx-orin"

    local = tmp_path / "local.json"
    code, _, err = run(capsys, "plan", path, "--hw", "local", "--strategy",
                       _local_strategy(fmt), "--out", str(local))
    assert code == 0, err

    code, out_json, err = run(capsys, "export", str(local), "--out", str(tmp_path / "ex"),
                              "--json")
    assert code == 0, err
    manifest = json.loads((tmp_path / "ex" / "manifest.json").read_text())
    assert manifest["partitions"] and all((tmp_path / "ex" / p["file"]).is_file()
                                          for p in manifest["partitions"])

    code, out_json, err = run(capsys, "validate", str(local), "--requests", "2",
                              "--no-baseline", "--json")
    assert code == 0, err
    report = json.loads(out_json)
    quality = report["quality"]
    assert quality and all(q["rel_l2_max"] < 1e-4 and q["cosine_min"] > 0.9999
                           for q in quality), quality


def test_inspect_json_carries_the_shape_source(capsys: pytest.CaptureFixture[str],
                                               real_folder: Path) -> None:
    code, text, err = run(capsys, "inspect", str(export("vit", "ts", real_folder)), "--json")
    assert code == 0, err
    s = json.loads(text)
    assert s["shape_source"] == "onnxruntime symbolic inference"
    assert s["coverage"] == 1.0 and s["uncounted"] == []
    assert 0 < s["folded_nodes"] < s["source_nodes"] and s["ops"] < s["source_nodes"]
