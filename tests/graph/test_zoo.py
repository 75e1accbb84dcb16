"""The built-in zoo: references, seeded builds, and the round trip through ONNX and .pt2."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import onnx
import pytest
import torch
from onnx import numpy_helper

from placewise.errors import InputError, ModelFormatError
from placewise.graph import zoo
from placewise.graph.ir import Graph, OpCategory, OpKind, Role
from placewise.graph.load import load_model
from placewise.graph.onnx_import import load_onnx
from placewise.graph.torch_import import import_module, load_pt2

NAMES = ["mlp", "resnet", "bert", "gpt", "inception"]
# models whose ONNX export folds BatchNorm into the convolutions (weights change)
_HAS_BATCH_NORM = {"resnet", "inception"}


def test_list_models() -> None:
    entries = zoo.list_models()
    assert [e.name for e in entries] == NAMES
    for e in entries:
        assert e.description and e.inputs_desc and e.default_options["batch"] == 1


def test_parse_zoo_ref() -> None:
    assert zoo.parse_zoo_ref("zoo:bert?layers=4&seq=128") == ("bert", {"layers": 4, "seq": 128})
    assert zoo.parse_zoo_ref("zoo:mlp") == ("mlp", {})
    assert zoo.parse_zoo_ref(" zoo:gpt?batch=2& ") == ("gpt", {"batch": 2})


@pytest.mark.parametrize(("ref", "match"), [
    ("zoo:vgg", "unknown zoo model 'vgg'"),
    ("zoo:bert?depth=3", "unknown option 'depth'"),
    ("zoo:bert?layers=abc", "layers='abc'"),
    ("zoo:bert?layers=0", "positive integer"),
    ("zoo:bert?layers=-2", "positive integer"),
    ("zoo:bert?layers=2&layers=3", "given twice"),
    ("zoo:bert?layers", "no value"),
    ("bert", "not a zoo reference"),
    ("zoo:bert?hidden=100&heads=3", "multiple of heads"),
])
def test_bad_refs(ref: str, match: str) -> None:
    with pytest.raises(InputError, match=match):
        name, options = zoo.parse_zoo_ref(ref)
        zoo.build(name, **options)


def test_build_is_seeded_and_leaves_global_rng_alone() -> None:
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    m1, x1 = zoo.build("mlp", layers=1, hidden=8)
    after = torch.rand(1)
    m2, x2 = zoo.build("mlp", layers=1, hidden=8)
    assert torch.equal(before, after)
    assert torch.equal(x1[0], x2[0])
    for p1, p2 in zip(m1.parameters(), m2.parameters(), strict=True):
        assert torch.equal(p1, p2)
    assert not m1.training


def _state_bytes(module: torch.nn.Module) -> int:
    return sum(v.numel() * v.element_size() for v in module.state_dict().values())


def _check_roles(g: Graph) -> None:
    assert g.inputs and g.outputs
    for name in g.inputs:
        assert g.tensor(name).role is Role.INPUT
    for name in g.outputs:
        assert g.tensor(name).role is Role.OUTPUT
    for t in g.tensors:
        if t.role is Role.PARAM:
            assert g.producer(t.name) is None


def _unknown_share(g: Graph) -> float:
    return sum(o.kind is OpKind.UNKNOWN for o in g.ops) / len(g.ops)


@pytest.mark.parametrize("name", NAMES)
def test_zoo_model_round_trips(name: str, tmp_path: Path) -> None:
    module, inputs = zoo.build(name)
    direct = import_module(module, inputs, name=name)
    _check_roles(direct)
    assert 0 < len(direct.ops) <= 300
    assert _unknown_share(direct) == 0.0
    assert direct.param_bytes == _state_bytes(module)
    assert all(t.is_concrete for t in direct.tensors)
    for op in direct.ops:
        if op.kind.category is OpCategory.CONTRACTION or op.kind is OpKind.EMBEDDING:
            assert op.provenance.module_path, op.where()
    with torch.no_grad():
        expected = module(*inputs)
    assert direct.tensor(direct.outputs[0]).shape == tuple(expected.shape)

    # .pt2: same ops and weights, with a symbolic batch that binds
    pt2 = zoo.export_pt2(name, None, tmp_path / f"{name}.pt2")
    from_pt2 = load_pt2(pt2)
    _check_roles(from_pt2)
    assert Counter(o.kind for o in from_pt2.ops) == Counter(o.kind for o in direct.ops)
    assert from_pt2.param_bytes == direct.param_bytes
    assert isinstance(from_pt2.tensor(from_pt2.inputs[0]).shape[0], str)
    bound = load_model(str(pt2), batch=3)
    assert bound.tensor(bound.outputs[0]).shape[0] == 3

    # .onnx: symbolic batch, bound at import; op kinds mostly known
    path = zoo.export_onnx(name, None, tmp_path / f"{name}.onnx")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    proto = onnx.load(str(path))
    assert proto.opset_import[0].version >= 13
    g = load_onnx(path)
    _check_roles(g)
    assert g.tensor(g.outputs[0]).shape[0] == "batch"
    assert _unknown_share(g) <= 0.05, sorted(o.provenance.source_op for o in g.ops
                                             if o.kind is OpKind.UNKNOWN)
    for op in g.ops:  # the exporter's name scopes give module paths
        if op.kind.category is OpCategory.CONTRACTION:
            assert op.provenance.module_path, op.where()
    init_bytes = sum(numpy_helper.to_array(t).nbytes for t in proto.graph.initializer)
    assert g.param_bytes == init_bytes
    if name not in _HAS_BATCH_NORM:
        # the same weights, plus a few scalar/shape constants the exporter adds
        float_params = sum(t.nbytes for t in g.params if t.dtype.is_float)
        torch_params = sum(p.numel() * p.element_size() for p in module.parameters())
        assert torch_params <= float_params <= torch_params + 64
    g3 = load_onnx(path, batch=3)
    assert all(t.is_concrete for t in g3.tensors)
    assert g3.tensor(g3.outputs[0]).shape == (3, *expected.shape[1:])


def test_options_change_the_model() -> None:
    small = zoo.load_zoo("zoo:bert?layers=1&hidden=64&heads=2&seq=16")
    big = zoo.load_zoo("zoo:bert?layers=3&hidden=64&heads=2&seq=16", batch=2)
    assert len(big.ops) > len(small.ops)
    assert big.tensor(big.inputs[0]).shape == (2, 16)
    attn = [o for o in big.ops if o.kind is OpKind.ATTENTION]
    assert len(attn) == 3 and not attn[0].attrs["is_causal"]
    gpt = zoo.load_zoo("zoo:gpt?layers=1&seq=8")
    (causal,) = [o for o in gpt.ops if o.kind is OpKind.ATTENTION]
    assert causal.attrs["is_causal"]


def test_failed_export_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("exporter exploded")

    monkeypatch.setattr(torch.onnx, "export", boom)
    dest = tmp_path / "m.onnx"
    with pytest.raises(RuntimeError, match="exploded"):
        zoo.export_onnx("mlp", {"layers": 1}, dest)
    assert list(tmp_path.iterdir()) == []


def test_load_model_dispatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    g = load_model("zoo:mlp?layers=1&batch=2", batch=5)
    assert g.tensor(g.inputs[0]).shape == (5, 64)
    with pytest.raises(InputError, match="zoo:NAME\\?batch=N"):
        load_model("zoo:mlp", shapes={"input": (4, 64)})
    with pytest.raises(ModelFormatError, match="no such file"):
        load_model(str(tmp_path / "absent.onnx"))
    with pytest.raises(ModelFormatError, match="no such file"):
        load_model(str(tmp_path / "absent.pt2"))
    odd = tmp_path / "model.tflite"
    odd.write_bytes(b"x")
    with pytest.raises(ModelFormatError, match="unknown model file type"):
        load_model(str(odd))
    with pytest.raises(InputError, match="batch"):
        load_model("zoo:mlp", batch=0)

    import placewise.graph.taskgraph as taskgraph

    seen: list[str] = []

    def fake_load(path: str) -> Graph:
        seen.append(path)
        return zoo.load_zoo("zoo:mlp?layers=1")

    monkeypatch.setattr(taskgraph, "load_taskgraph", fake_load)
    task = tmp_path / "t.json"
    task.write_text("{}")
    load_model(str(task))
    assert seen == [str(task)]
    with pytest.raises(InputError, match="task graph"):
        load_model(str(task), batch=2)
