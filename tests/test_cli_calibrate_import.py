"""``placewise calibrate import`` end to end: a profile taken by plain onnxruntime becomes a
calibration that ``plan --calibration`` uses, on this machine and on a preset; every
refusal is exit 2, one line, nothing written."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from placewise.graph.zoo import export_onnx
from tests.calibrate.ortprofile import take_profile
from tests.test_cli import assert_bad_input, run, run_together


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(folder, model, profile): the zoo ResNet as ONNX, profiled by plain onnxruntime."""
    folder = tmp_path_factory.mktemp("cli-import")
    model = export_onnx("resnet", {}, folder / "resnet.onnx")
    return folder, model, take_profile(model, folder, runs=5)


@pytest.fixture(scope="module")
def imported(profiled: tuple[Path, Path, Path]) -> dict[str, tuple[Path, dict[str, object]]]:
    """The profile imported for ``local`` and for ``jetson-agx-orin`` (its CPU), with
    ``--json``: hw -> (calibration file, printed JSON)."""
    folder, model, prof = profiled
    got = {}
    cmds = {hw: ["calibrate", "import", str(prof), "--model", str(model), "--batch", "1",
                 "--hw", hw, "--out", str(folder / f"cal-{hw}.json"), "--json",
                 "--tool-version", "1.32.0"] for hw in ("local", "jetson-agx-orin")}
    for hw, proc in zip(cmds, run_together(*cmds.values()), strict=True):
        assert proc.returncode == 0, proc.stderr
        got[hw] = (folder / f"cal-{hw}.json", json.loads(proc.stdout))
    return got


def test_import_json_summary_and_file(imported: dict[str, tuple[Path, dict[str, object]]],
                                      profiled: tuple[Path, Path, Path]) -> None:
    _f, _m, prof = profiled
    cal_file, doc = imported["jetson-agx-orin"]
    assert doc["device"] == "cpu" and doc["machine"] == "jetson-agx-orin"
    assert doc["matched_nodes"] == doc["profiled_nodes"]
    assert doc["ops_covered"] == doc["graph_ops"] and doc["measured_share"] > 0.99
    assert doc["run_overhead_s"] is not None and doc["run_overhead_n"] >= 1
    (p,) = doc["profiles"]  # type: ignore[misc]
    assert p["file"] == str(prof) and p["tool_version"] == "1.32.0"
    assert p["sha256"].startswith("sha256:")
    cal = json.loads(cal_file.read_text())
    assert cal["imports"][0]["sha256"] == p["sha256"]
    assert {m["backend"] for m in cal["measurements"]} == {"import:onnxruntime"}
    assert cal["devices"][0]["name"] == "cpu" and not cal["fits"]


def test_import_prints_a_summary(profiled: tuple[Path, Path, Path], tmp_path: Path) -> None:
    _f, model, prof = profiled
    proc = run("calibrate", "import", str(prof), "--model", str(model), "--batch", "1",
               "--hw", "jetson-agx-orin", "--device", "cpu", "--out", str(tmp_path / "c.json"))
    assert proc.returncode == 0, proc.stderr
    assert "profiled nodes matched" in proc.stdout and "now measured" in proc.stdout
    assert "run overhead" in proc.stdout and "wrote" in proc.stdout


def test_plan_with_the_imported_calibration(imported: dict[str, tuple[Path, dict[str, object]]],
                                            profiled: tuple[Path, Path, Path]) -> None:
    folder, model, _p = profiled
    cmds = [["plan", str(model), "--batch", "1", "--hw", hw, "--calibration", str(cal),
             "--out", str(folder / f"plan-{hw}.json"), "--json", "--strategy",
             "single:cpu1" if hw == "local" else "single:cpu"]
            for hw, (cal, _doc) in imported.items()]
    for proc in run_together(*cmds):
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["latency_s"] > 0
    plan = json.loads((folder / "plan-jetson-agx-orin.json").read_text())
    assert plan["fingerprints"]["calibration"].startswith("calibration:sha256:")


def test_refusals_write_nothing(profiled: tuple[Path, Path, Path], tmp_path: Path) -> None:
    folder, model, prof = profiled
    other = export_onnx("mlp", {"layers": 2}, tmp_path / "mlp.onnx")
    text = prof.read_text()
    trunc = tmp_path / "trunc.json"
    trunc.write_text(text[: len(text) // 3])
    nan = tmp_path / "nan.json"
    nan.write_text(re.sub(r'"dur"\s*:', '"dur": NaN, "d":', text, count=1))
    deep = tmp_path / "deep.json"
    deep.write_text('[{"cat": "Node", "name": "n", "args": ' + "[" * 200 + "]" * 200 + "}]")
    unknown = tmp_path / "unknown.json"
    unknown.write_text('{"hello": 1}')
    layers = tmp_path / "layers.json"  # the layout trtexec --exportLayerInfo writes
    layers.write_text('{"Layers": [{"Name": "conv", "LayerType": "CaskConvolution"}], '
                      '"Bindings": ["x", "y"]}')
    out = tmp_path / "never.json"
    common = ["--hw", "local", "--out", str(out)]
    cases = [
        (["calibrate", "import", str(prof), "--model", str(other), "--batch", "1", *common],
         ["profiled nodes name an op of", "a profile of another model"]),
        (["calibrate", "import", str(prof), "--model", str(model), "--batch", "2", *common],
         ["profiled at batch 1, asked batch 2"]),
        (["calibrate", "import", str(prof), "--model", str(model), "--batch", "1",
          "--precision", "fp16", *common], ["asked precision is fp16"]),
        (["calibrate", "import", str(prof), "--model", str(model), "--batch", "1",
          "--device", "gpu7", *common], ["--device", "not a device of machine"]),
        (["calibrate", "import", str(trunc), "--model", str(model), "--batch", "1", *common],
         [str(trunc), "not valid JSON"]),
        (["calibrate", "import", str(nan), "--model", str(model), "--batch", "1", *common],
         [str(nan), "NaN"]),
        (["calibrate", "import", str(deep), "--model", str(model), "--batch", "1", *common],
         [str(deep), "nested more than"]),
        (["calibrate", "import", str(unknown), "--model", str(model), "--batch", "1", *common],
         [str(unknown), "not a profile placewise reads"]),
        (["calibrate", "import", str(folder / "absent.json"), "--model", str(model),
          *common], ["absent.json", "no such file"]),
        (["calibrate", "import", str(prof), "--model", "zoo:resnet", *common],
         ["--model", "give that .onnx file"]),
        (["calibrate", "import", str(layers), "--model", str(model), *common],
         [str(layers), "give it as --layer-info"]),
    ]
    for (_cmd, needles), proc in zip(cases, run_together(*(c for c, _n in cases)),
                                     strict=True):
        assert_bad_input(proc, *needles)
    assert not out.exists()


def test_formats_without_a_reader_say_so(profiled: tuple[Path, Path, Path],
                                         tmp_path: Path) -> None:
    _f, model, _p = profiled
    if importlib.util.find_spec("placewise.calibrate.imports.trtexec") is not None:
        pytest.skip("this placewise reads trtexec profiles")
    prof = tmp_path / "trt.json"  # the layout trtexec --exportProfile writes
    prof.write_text('[{"count": 10}, {"name": "conv", "timeMs": 1.0, "averageMs": 0.1, '
                    '"medianMs": 0.1, "percentage": 100.0}]')
    proc = run("calibrate", "import", str(prof), "--model", str(model), "--hw", "local",
               "--out", str(tmp_path / "c.json"))
    assert_bad_input(proc, str(prof), "trtexec --exportProfile files are not supported yet")
