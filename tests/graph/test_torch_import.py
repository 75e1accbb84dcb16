"""The torch.export importer: signature roles, op kinds, attributes, symbolic dims, .pt2 files."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from placewise.errors import InputError, ModelFormatError
from placewise.graph.ir import Graph, OpKind, Role
from placewise.graph.load import load_model
from placewise.graph.torch_import import import_module, load_exported, load_pt2
from placewise.units import DType


class _Mixed(nn.Module):
    """Exercises multi-output ops, argument reordering, buffers and an unknown op."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(8, 16, batch_first=True)
        self.conv = nn.Conv1d(4, 4, 3, padding="same")
        self.w = nn.Parameter(torch.randn(8, 8))
        self.b = nn.Parameter(torch.randn(8))
        self.register_buffer("scale", torch.ones(4), persistent=False)
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        seq, (h, _c) = self.lstm(x)
        q = torch.addmm(self.b, x[:, 0], self.w)
        c1, c2 = q.chunk(2, dim=-1)
        z = F.adaptive_avg_pool1d(self.bn(self.conv(y)), 1)
        half = q.to(torch.float16)
        up = F.interpolate(y, scale_factor=2.0)
        return seq, h, c1 * c2 * self.scale, z, half, q.float(), up


@pytest.fixture(scope="module")
def mixed() -> tuple[nn.Module, Graph]:
    torch.manual_seed(0)
    module = _Mixed().eval()
    graph = import_module(module, (torch.randn(2, 5, 8), torch.randn(2, 4, 8)), name="mixed")
    return module, graph


def test_roles_and_param_names(mixed: tuple[nn.Module, Graph]) -> None:
    module, g = mixed
    assert g.inputs == ("x", "y")
    params = {t.name for t in g.params}
    expected = set(module.state_dict()) | {"scale"}
    assert params == expected
    buffers = sum(b.numel() * b.element_size() for b in module.buffers())
    state = sum(p.numel() * p.element_size() for p in module.parameters())
    assert g.param_bytes == state + buffers
    for name in g.outputs:
        assert g.tensor(name).role is Role.OUTPUT
    assert len(g.outputs) == 7


def test_kinds_and_attrs(mixed: tuple[nn.Module, Graph]) -> None:
    _, g = mixed
    by_src = {o.provenance.source_op: o for o in g.ops}
    lstm = by_src["aten.lstm.input"]
    assert lstm.kind is OpKind.LSTM
    assert lstm.attrs["hidden_size"] == 16 and lstm.attrs["layout"] == 1
    assert lstm.attrs["direction"] == "forward"
    # x first, then weights, then the initial states
    assert lstm.inputs[0] == "x" and lstm.inputs[1] == "lstm.weight_ih_l0"
    assert len(lstm.outputs) == 3 and lstm.provenance.module_path == "lstm"
    addmm = by_src["aten.addmm.default"]
    assert addmm.kind is OpKind.GEMM and addmm.inputs[1:] == ("w", "b")
    chunk = by_src["aten.chunk.default"]
    assert chunk.kind is OpKind.SPLIT and chunk.attrs["axis"] == 1 and len(chunk.outputs) == 2
    assert not any(o.provenance.source_op == "getitem" for o in g.ops)
    conv = by_src["aten.conv1d.padding"]
    assert conv.kind is OpKind.CONV
    assert dict(conv.attrs) == {"strides": (1,), "dilations": (1,), "group": 1,
                                "kernel_shape": (3,), "pads": (1, 1)}
    assert conv.inputs == ("y", "conv.weight", "conv.bias")
    assert by_src["aten.adaptive_avg_pool1d.default"].kind is OpKind.GLOBAL_AVG_POOL
    bn = [o for o in g.ops if o.kind is OpKind.BATCH_NORM]
    assert len(bn) == 1 and bn[0].provenance.module_path == "bn"
    unknown = [o for o in g.ops if o.kind is OpKind.UNKNOWN]
    assert [o.provenance.source_op for o in unknown] == ["aten.upsample_nearest1d.vec"]
    casts = [o for o in g.ops if o.provenance.source_op.startswith("aten._to_copy")
             or o.provenance.source_op.startswith("aten.to")]
    kinds = sorted((o.kind.value, o.attrs.get("to", "")) for o in casts)
    assert kinds == [("cast", "fp16"), ("identity", "")]
    half = next(o for o in casts if o.kind is OpKind.CAST)
    assert g.tensor(half.outputs[0]).dtype is DType.FP16


def _tiny() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.GELU(), nn.LayerNorm(5), nn.Linear(5, 3)).eval()
    return model, (torch.randn(4, 6),)


def test_symbolic_dims_are_sympy_text() -> None:
    model, inputs = _tiny()
    batch = torch.export.Dim("batch", min=1, max=64)
    ep = torch.export.export(model, inputs, dynamic_shapes=({0: batch},), strict=False)
    g = load_exported(ep, name="tiny")
    sym = g.tensor(g.inputs[0]).shape[0]
    assert isinstance(sym, str) and sym.isidentifier()
    assert g.tensor(g.outputs[0]).shape == (sym, 3)
    kinds = [o.kind for o in g.ops]
    assert kinds == [OpKind.LINEAR, OpKind.GELU, OpKind.LAYER_NORM, OpKind.LINEAR]
    ln = g.ops[2]
    assert dict(ln.attrs) == {"axis": 1, "epsilon": 1e-5}
    assert [o.provenance.module_path for o in g.ops] == ["0", "1", "2", "3"]


def test_view_expressions() -> None:
    class Flat(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, s, h = x.shape
            return torch.relu(x.reshape(b * s, h))

    batch = torch.export.Dim("batch", min=2, max=64)
    ep = torch.export.export(Flat(), (torch.randn(3, 5, 4),), dynamic_shapes=({0: batch},),
                             strict=False)
    g = load_exported(ep, name="flat")
    sym = g.tensor("x").shape[0]
    out = g.tensor(g.outputs[0]).shape
    assert out[1] == 4 and isinstance(out[0], str) and sym in out[0]
    # scalar size computations are not ops
    assert [o.kind for o in g.ops] == [OpKind.RESHAPE, OpKind.RELU]


def _save_tiny_pt2(path: Path, dynamic: bool = True) -> Path:
    model, inputs = _tiny()
    shapes = ({0: torch.export.Dim("batch", min=1, max=64)},) if dynamic else None
    ep = torch.export.export(model, inputs, dynamic_shapes=shapes, strict=False)
    torch.export.save(ep, str(path))
    return path


def test_pt2_round_trip_and_batch_binding(tmp_path: Path) -> None:
    path = _save_tiny_pt2(tmp_path / "tiny.pt2")
    g = load_pt2(path)
    assert g.name == "tiny" and len(g.ops) == 4
    assert g.param_bytes == (6 * 5 + 5 + 5 + 5 + 5 * 3 + 3) * 4
    bound = load_model(str(path), batch=3)
    assert bound.tensor(bound.outputs[0]).shape == (3, 3)
    assert all(t.is_concrete for t in bound.tensors)
    by_shape = load_model(str(path), shapes={g.inputs[0]: (7, 6)})
    assert by_shape.tensor(by_shape.outputs[0]).shape == (7, 3)
    with pytest.raises(InputError, match="dimension 1 is 6"):
        load_model(str(path), shapes={g.inputs[0]: (7, 9)})


def test_pt2_fixed_batch_conflict(tmp_path: Path) -> None:
    path = _save_tiny_pt2(tmp_path / "fixed.pt2", dynamic=False)
    assert load_model(str(path), batch=4).tensor("input").shape == (4, 6)
    with pytest.raises(InputError, match="fixed leading dim"):
        load_model(str(path), batch=5)


def test_pt2_bad_files(tmp_path: Path) -> None:
    with pytest.raises(ModelFormatError, match="no such file"):
        load_pt2(tmp_path / "absent.pt2")
    junk = tmp_path / "junk.pt2"
    junk.write_bytes(b"\x00\x01 not a zip at all" * 50)
    with pytest.raises(ModelFormatError, match="not a zip"):
        load_pt2(junk)
    good = _save_tiny_pt2(tmp_path / "good.pt2").read_bytes()
    for n in (len(good) // 3, len(good) // 2, len(good) - 30):
        cut = tmp_path / f"cut{n}.pt2"
        cut.write_bytes(good[:n])
        with pytest.raises(ModelFormatError):
            load_pt2(cut)
    other = tmp_path / "other.pt2"
    with zipfile.ZipFile(other, "w") as zf:
        zf.writestr("other/archive_format", "tar")
    with pytest.raises(ModelFormatError, match="archive_format"):
        load_pt2(other)


def test_pt2_with_pickled_payload_is_refused(tmp_path: Path) -> None:
    path = _save_tiny_pt2(tmp_path / "p.pt2")
    forged = tmp_path / "forged.pt2"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(forged, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("_weights_config.json"):
                config = json.loads(data)
                first = next(iter(config["config"].values()))
                first["use_pickle"] = True
                data = json.dumps(config).encode()
            dst.writestr(info, data)
    with pytest.raises(ModelFormatError, match="pickled"):
        load_pt2(forged)
    # the executable-source loader (profile, validate) applies the same check
    from placewise.runtime.opexec import load_source

    with pytest.raises(ModelFormatError, match="pickled"):
        load_source(str(forged), with_graph=False)
    # sample inputs that need full unpickling are refused before torch.export.load runs
    forged2 = tmp_path / "forged2.pt2"
    buf = io.BytesIO()
    torch.save({"obj": _Unpicklable()}, buf)
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(forged2, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if "/data/sample_inputs/" in info.filename:
                data = buf.getvalue()
            dst.writestr(info, data)
    with pytest.raises(ModelFormatError, match="sample inputs"):
        load_pt2(forged2)


class _Unpicklable:
    """A custom class: ``torch.load(weights_only=True)`` refuses it."""


def test_export_failure_is_a_model_format_error() -> None:
    class Bad(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.sum() > 0:  # data-dependent control flow cannot be exported
                return x
            return -x

    with pytest.raises(ModelFormatError, match=r"torch\.export"):
        import_module(Bad(), (torch.randn(3),), name="bad")
