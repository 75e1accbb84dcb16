"""trtexec profiles and layer information as TensorRT wrote them (real files, see
tests/data/target_profiles/SOURCES.md), and files broken on purpose from them.

The MobileNet and MobileNetV2 QAT pairs and the ResNet layer information are committed (read
from the stored index of public files); the ResNet profile and the Orin YOLO files are kept
outside the repository (tests/calibrate/target_profiles.py) and the tests that need them skip
without them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from placewise.calibrate.imports.trtexec import read_trtexec
from placewise.errors import ProfileError
from tests.calibrate.target_profiles import COMMITTED, shared_file

DATA = COMMITTED / "trtexec"
WHAT = "real trtexec files taken from repository snapshots"


def _pair(base: str) -> tuple[Path, Path]:
    """A committed profile with its layer information."""
    return DATA / f"{base}.profile.json", DATA / f"{base}.layerinfo.json"


def _resnet() -> tuple[Path, Path]:
    """The A100 ResNet profile (kept outside) with its layer information (committed)."""
    return (shared_file("trtexec/resnet_a100_fp16.profile.json", WHAT),
            DATA / "resnet_a100_fp16.layerinfo.json")


def _yolo() -> tuple[Path, Path, Path]:
    """The Orin YOLO profile, layer names and trtexec log (all kept outside)."""
    prof, info, log = (shared_file(f"trtexec/yolo_orin_int8.{ext}", WHAT)
                       for ext in ("profile.json", "layerinfo.json", "trtexec.log"))
    return prof, info, log


def _rows(path: Path) -> list[dict]:
    return json.loads(path.read_text())


def test_detailed_layer_info_fp16_resnet_with_median() -> None:
    prof, info = _resnet()
    p = read_trtexec(prof, info)
    rows = _rows(prof)
    # every profiled layer is a region or a reformat, nothing dropped, nothing invented
    assert len(p.regions) + len(p.transfers) == len(rows) - 1
    assert p.runs == rows[0]["count"] == 1
    assert not p.spread_recorded and any("spread is not recorded" in n for n in p.notes)
    conv = next(r for r in p.regions if r.label == "Conv_0 + Relu_1")
    assert conv.nodes == ("Conv_0", "Relu_1")  # a fused layer covers its ONNX nodes
    assert conv.op_type == "CaskConvolution" and conv.engine == "GPU"
    assert conv.precision == "fp16" and conv.out_shapes == ((32, 64, 112, 112),)
    row = next(r for r in rows[1:] if r["name"] == "Conv_0 + Relu_1")
    assert conv.samples_s == (row["medianMs"] * 1e-3,)  # one sample: the median
    assert conv.mean_s == pytest.approx(row["averageMs"] * 1e-3)
    assert p.precision == "fp16" and p.batch == 32
    first = p.transfers[0]
    assert first.kind == "reformat" and first.label.startswith("Reformatting CopyNode")
    assert first.src == "Row major linear FP32" and "FP16" in first.dst
    assert first.nbytes == 32 * 3 * 224 * 224 * 2  # fp16 output of the reformat
    assert first.nodes == ("Conv_0", "Relu_1")  # the layer it feeds
    assert all(t.kind == "reformat" for t in p.transfers)
    assert p.source.tool == "trtexec" and p.source.sha256.startswith("sha256:")
    assert [f for f, _ in p.source.extra_files] == [str(info)]


def test_tensorrt_8_2_profile_without_median_and_qdq_layers() -> None:
    prof, info = _pair("mobilenet_qat")
    rows = _rows(prof)
    assert all("medianMs" not in r for r in rows[1:])  # the older layout
    p = read_trtexec(prof, info)
    assert p.runs == 4216
    # profile and layer information (read at two commits) name the same layers
    assert not any("not in the layer information" in n for n in p.notes)
    q = next(r for r in p.regions if r.label == "QuantizeLinear_2")
    assert q.samples_s == (rows[1]["averageMs"] * 1e-3,) and q.mean_s is None
    assert q.op_type == "Scale" and q.precision == "int8"  # a QDQ layer computes
    conv = next(r for r in p.regions if r.label.startswith("features.0.0.weight"))
    assert conv.nodes == ("features.0.0.weight", "QuantizeLinear_8", "Conv_12", "Clip_16")
    assert conv.precision == "int8"  # int8 weights
    n_copy = sum(r["name"].startswith("Reformatting CopyNode") for r in rows[1:])
    assert len(p.transfers) == n_copy == 13
    assert {t.engine for t in p.transfers} == {"GPU"}
    assert p.precision == ""  # int8 with fp16/fp32 layers: mixed, not one precision
    pool = next(r for r in p.regions if r.label == "GlobalAveragePool_843")
    assert pool.precision == "fp32" and pool.op_type == "CaskPooling"


def test_tensorrt_8_4_layout_qdq_as_reformat_and_a_layer_missing_from_info() -> None:
    prof, info = _pair("mobilenet_v2_residuals_qat")
    rows, doc = _rows(prof), json.loads(info.read_text())
    # the TensorRT 8.4-era layout: tensors carry "Location"; no TensorRT 10 "Metadata"
    assert all("Location" in t for rec in doc["Layers"] for t in rec["Inputs"])
    assert not any("Metadata" in rec for rec in doc["Layers"])
    p = read_trtexec(prof, info)
    assert p.runs == rows[0]["count"] == 7075 and p.batch == 1
    assert len(p.regions) + len(p.transfers) == len(rows) - 1
    # QuantizeLinear is a "Reformat" layer of Origin QDQ here: it computes (a region), unlike
    # the REFORMAT-origin copy nodes, which are transfers
    q = next(r for r in p.regions if r.label == "QuantizeLinear_2")
    assert q.op_type == "Reformat" and q.precision == "int8" and q.nodes == ("QuantizeLinear_2",)
    assert q.out_shapes == ((1, 3, 224, 224),)
    assert sum(r.op_type == "Reformat" for r in p.regions) == 2  # QuantizeLinear_2 and _757
    assert [t.label.split(" to ")[1][:21] for t in p.transfers] == [
        "GlobalAveragePool_747", "classifier.1.weight +"]
    pool = p.transfers[0]
    assert pool.nbytes == 1 * 1280 * 7 * 7 * 2 and "FP16" in pool.src and "FP16" in pool.dst
    assert pool.nodes == ("GlobalAveragePool_747",)
    # profile and layer information were published at different commits: one 0 ms copy node
    # of the profile is not in this layer information; it is kept, without a shape, and said
    assert any("1 of 59 profiled layers are not in the layer information" in n for n in p.notes)
    assert p.transfers[1].nbytes == 0 and p.transfers[1].samples_s == (0.0,)


def test_layer_names_only_with_log_places_foreign_nodes_on_gpu() -> None:
    prof, info, log = _yolo()
    p = read_trtexec(prof, info, log_path=log)
    assert p.source.tool_version == "8.5.2" and p.source.device == "Orin"
    assert any("layer names only" in n for n in p.notes)
    foreign = [r for r in p.regions if r.op_type == "ForeignNode"]
    assert len(foreign) == 2
    head = next(r for r in foreign if "Unsqueeze_2" in r.label)
    assert head.span == ("/head/Constant_2_output_0", "/Unsqueeze_2")
    # the log lists these as "[GpuLayer] MYELIN": TensorRT's ForeignNode is not only DLA
    assert {r.engine for r in foreign} == {"GPU"}
    assert not any("not placed" in n for n in p.notes)
    assert next(r for r in p.regions if r.label == "[trainStation1]").nodes == ()
    assert next(r for r in p.regions if r.label == "[trainStation1]").op_type == "TRAIN_STATION"
    assert len(p.transfers) == 4 and all(t.nbytes == 0 for t in p.transfers)  # no shapes
    # without the log nothing says where the ForeignNodes ran: counted on the GPU, said so
    q = read_trtexec(prof, info)
    assert any("not placed by any file" in n for n in q.notes)


def test_dla_layers_from_the_log(tmp_path: Path) -> None:
    prof, info, log_path = _yolo()
    text = log_path.read_text()
    # the same log as if TensorRT had put the head subgraph on the DLA
    name = "{ForeignNode[/head/Constant_2_output_0.../Unsqueeze_2]}"
    text = text.replace(f"[GpuLayer] MYELIN: {name}", f"[DlaLayer] {name}")
    log = tmp_path / "dla.log"
    log.write_text(text)
    p = read_trtexec(prof, info, log_path=log)
    assert {r.label for r in p.regions if r.engine == "DLA"} == {name}


def test_profile_alone() -> None:
    prof, _ = _pair("mobilenet_qat")
    p = read_trtexec(prof)
    conv = next(r for r in p.regions if r.label.startswith("features.3.conv.2.weight"))
    # without layer information the ONNX nodes come from the fused layer's name
    assert conv.nodes == ("features.3.conv.2.weight", "QuantizeLinear_138", "Conv_142",
                          "Add_144")
    assert conv.precision == "" and conv.op_type == ""
    assert p.batch is None and p.source.extra_files == ()
    # a reformat is told by its name alone; with no info it is still a transfer
    assert len(p.transfers) == 13 and all(t.nbytes == 0 for t in p.transfers)


def test_profile_alone_resnet() -> None:
    prof, _ = _resnet()
    p = read_trtexec(prof)
    conv = next(r for r in p.regions if r.label == "Conv_5 + Add_6 + Relu_7")
    assert conv.nodes == ("Conv_5", "Add_6", "Relu_7") and conv.precision == ""
    assert p.batch is None and p.source.extra_files == ()


# ---- refusals: one line naming file and place --------------------------------------------
def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _refused(path: Path, *, info: Path | None = None) -> str:
    with pytest.raises(ProfileError) as exc:
        read_trtexec(path, info)
    line = str(exc.value)
    assert "\n" not in line and str(path if info is None else info) in line
    return line


def test_truncated_profile(tmp_path: Path) -> None:
    prof, _ = _pair("mobilenet_qat")
    text = prof.read_text()
    line = _refused(_write(tmp_path, "cut.json", text[: len(text) // 2]))
    assert "not valid JSON" in line and "line" in line


def test_hostile_numbers(tmp_path: Path) -> None:
    prof, _ = _pair("mobilenet_qat")
    rows = _rows(prof)
    text = prof.read_text()
    name = rows[2]["name"]
    nan = text.replace(f'"averageMs" : {rows[2]["averageMs"]}', '"averageMs" : NaN', 1)
    assert "not finite" in _refused(_write(tmp_path, "nan.json", nan))
    for bad, word in ((-1.5, ">= 0"), (1e30, "beyond any measurement"), ("7", "a number")):
        rows2 = json.loads(text)
        rows2[2]["averageMs"] = bad
        line = _refused(_write(tmp_path, "bad.json", json.dumps(rows2)))
        assert "[2].averageMs" in line and word in line, line
    rows3 = json.loads(text)
    rows3[0]["count"] = 0
    assert "[0].count" in _refused(_write(tmp_path, "c.json", json.dumps(rows3)))
    assert name  # the row exists


def test_wrong_top_level_and_nesting(tmp_path: Path) -> None:
    assert "expected a JSON array" in _refused(_write(tmp_path, "o.json", '{"count": 3}'))
    assert "count" in _refused(_write(tmp_path, "n.json", '[{"name": "x"}]'))
    assert "no layer" in _refused(_write(tmp_path, "h.json", '[{"count": 3}]'))
    deep = "[" * 200 + "]" * 200
    assert "nested more than" in _refused(_write(tmp_path, "d.json", deep))
    prof, info = _pair("mobilenet_qat")
    bad_info = _write(tmp_path, "i.json", '["Layers"]')
    assert "Layers" in _refused(prof, info=bad_info)
    doc = json.loads(info.read_text())
    doc["Layers"][1]["Outputs"][0]["Dimensions"] = ["1", 32]
    line = _refused(prof, info=_write(tmp_path, "dims.json", json.dumps(doc)))
    assert "Layers[1].Outputs[0].Dimensions" in line
