"""The ONNX importer: roles, kinds, canonical attributes, dim binding, and hostile files."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from placewise.errors import GraphError, InputError, ModelFormatError
from placewise.graph.ir import OpKind, Role
from placewise.graph.onnx_import import load_onnx
from placewise.units import DType

F = TensorProto.FLOAT


def _vi(name: str, dims: list[int | str] | None, elem: int = F) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, dims)


def _save(tmp_path: Path, nodes: Sequence[onnx.NodeProto],
          inputs: Sequence[onnx.ValueInfoProto], outputs: Sequence[onnx.ValueInfoProto],
          inits: Sequence[onnx.TensorProto] = (), *, opset: int = 18, name: str = "m.onnx",
          extra_opsets: Sequence[onnx.OperatorSetIdProto] = ()) -> str:
    graph = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    *extra_opsets])
    path = tmp_path / name
    onnx.save(model, str(path))
    return str(path)


def _mlp(tmp_path: Path, opset: int = 18, batch: int | str = "N") -> str:
    w = numpy_helper.from_array(np.ones((8, 4), np.float32), "W")
    b = numpy_helper.from_array(np.zeros((4,), np.float32), "B")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
             helper.make_node("Add", ["h", "B"], ["hb"]),  # no name: one is generated
             helper.make_node("Relu", ["hb"], ["y"])]
    return _save(tmp_path, nodes, [_vi("x", [batch, 8])], [_vi("y", [batch, 4])], [w, b],
                 opset=opset)


# ---- the basics --------------------------------------------------------------------------


def test_roles_kinds_names_and_params(tmp_path: Path) -> None:
    g = load_onnx(_mlp(tmp_path))
    assert [o.kind for o in g.ops] == [OpKind.MATMUL, OpKind.ADD, OpKind.RELU]
    assert [o.provenance.source_op for o in g.ops] == ["onnx::MatMul", "onnx::Add", "onnx::Relu"]
    names = [o.name for o in g.ops]
    assert names[0] == "mm" and len(set(names)) == 3 and all(names)
    assert all(o.provenance.source == o.name for o in g.ops)
    assert g.inputs == ("x",) and g.outputs == ("y",)
    assert g.tensor("x").role is Role.INPUT
    assert g.tensor("W").role is Role.PARAM and g.tensor("B").role is Role.PARAM
    assert g.tensor("h").role is Role.ACTIVATION
    assert g.tensor("y").role is Role.OUTPUT
    assert g.param_bytes == (8 * 4 + 4) * 4
    assert g.tensor("h").shape == ("N", 4) and g.tensor("h").dtype is DType.FP32


def test_batch_binding_propagates(tmp_path: Path) -> None:
    g = load_onnx(_mlp(tmp_path), batch=3)
    assert all(t.is_concrete for t in g.tensors)
    assert g.tensor("y").shape == (3, 4)


def test_shapes_binding_and_conflicts(tmp_path: Path) -> None:
    path = _mlp(tmp_path)
    assert load_onnx(path, shapes={"x": (5, 8)}).tensor("y").shape == (5, 4)
    with pytest.raises(InputError, match="dimension 1 is 8"):
        load_onnx(path, shapes={"x": (5, 9)})
    with pytest.raises(InputError, match="no input 'nope'"):
        load_onnx(path, shapes={"nope": (1,)})
    with pytest.raises(InputError, match="rank"):
        load_onnx(path, shapes={"x": (5,)})


def test_batch_on_fixed_model_is_refused(tmp_path: Path) -> None:
    path = _mlp(tmp_path, batch=1)
    assert load_onnx(path, batch=1).tensor("y").shape == (1, 4)
    with pytest.raises(InputError, match="fixed leading dim"):
        load_onnx(path, batch=4)


def test_symbol_bound_everywhere(tmp_path: Path) -> None:
    """A symbol bound through one input binds the other input that shares it."""
    nodes = [helper.make_node("Add", ["a", "b"], ["c"])]
    path = _save(tmp_path, nodes, [_vi("a", ["N", 2]), _vi("b", ["N", 2])], [_vi("c", ["N", 2])])
    g = load_onnx(path, shapes={"a": (6, 2)})
    assert g.tensor("b").shape == (6, 2) and g.tensor("c").shape == (6, 2)
    with pytest.raises(InputError, match="bound to both"):
        load_onnx(path, shapes={"a": (6, 2), "b": (7, 2)})


# ---- canonical attributes --------------------------------------------------------------------


def test_conv_kernel_from_weight_and_same_padding(tmp_path: Path) -> None:
    w = numpy_helper.from_array(np.zeros((4, 3, 3, 3), np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER", strides=[2, 2])]
    path = _save(tmp_path, nodes, [_vi("x", [1, 3, 8, 8])], [_vi("y", None)], [w])
    (op,) = load_onnx(path).ops
    assert op.kind is OpKind.CONV
    assert op.attrs["kernel_shape"] == (3, 3)
    assert op.attrs["strides"] == (2, 2) and op.attrs["dilations"] == (1, 1)
    assert op.attrs["pads"] == (0, 0, 1, 1) and op.attrs["group"] == 1


def test_misc_canonical_attrs(tmp_path: Path) -> None:
    table = numpy_helper.from_array(np.zeros((10, 4), np.float32), "table")
    axes = numpy_helper.from_array(np.array([-1], np.int64), "axes")
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["e"]),  # an embedding lookup
        helper.make_node("Softmax", ["e"], ["s"], axis=-1),
        helper.make_node("ReduceMean", ["s", "axes"], ["r"], keepdims=0),
        helper.make_node("Transpose", ["e"], ["t"]),
        helper.make_node("Gemm", ["r", "r"], ["gm"], transB=1, alpha=0.5),
        helper.make_node("Constant", [], ["k"], value_ints=[2]),
        helper.make_node("Cast", ["gm"], ["gh"], to=TensorProto.FLOAT16),
        helper.make_node("LayerNormalization", ["e", "ln_w"], ["ln"], axis=-1, epsilon=1e-6),
    ]
    ln_w = numpy_helper.from_array(np.ones((4,), np.float32), "ln_w")
    path = _save(tmp_path, nodes, [_vi("ids", [2, 3], TensorProto.INT64)],
                 [_vi("r", None), _vi("t", None), _vi("gh", None), _vi("ln", None),
                  _vi("k", None)], [table, axes, ln_w])
    g = load_onnx(path)
    by = {o.provenance.source_op: o for o in g.ops}
    assert by["onnx::Gather"].kind is OpKind.EMBEDDING
    assert by["onnx::Gather"].inputs == ("table", "ids")
    assert by["onnx::Softmax"].attrs["axis"] == 2
    assert dict(by["onnx::ReduceMean"].attrs) == {"axes": (2,), "keepdims": False}
    assert by["onnx::Transpose"].attrs["perm"] == (2, 1, 0)
    assert dict(by["onnx::Gemm"].attrs) == {"alpha": 0.5, "beta": 1.0, "trans_a": False,
                                            "trans_b": True}
    assert by["onnx::Cast"].attrs["to"] == "fp16"
    assert dict(by["onnx::LayerNormalization"].attrs) == {"axis": 2, "epsilon": pytest.approx(1e-6)}
    # a Constant node is a parameter, not an op
    assert "onnx::Constant" not in by and g.tensor("k").role is Role.PARAM
    assert g.tensor("k").shape == (1,) and g.tensor("k").dtype is DType.INT64
    assert g.tensor("r").shape == (2, 3)


def test_lstm_with_absent_outputs_and_quantize(tmp_path: Path) -> None:
    hidden = 5
    W = numpy_helper.from_array(np.zeros((1, 4 * hidden, 3), np.float32), "W")
    R = numpy_helper.from_array(np.zeros((1, 4 * hidden, hidden), np.float32), "R")
    scale = numpy_helper.from_array(np.ones((hidden,), np.float32), "scale")
    zp = numpy_helper.from_array(np.zeros((hidden,), np.int8), "zp")
    nodes = [helper.make_node("LSTM", ["x", "W", "R"], ["", "h"], hidden_size=hidden),
             helper.make_node("QuantizeLinear", ["h", "scale", "zp"], ["q"], axis=-1),
             helper.make_node("DequantizeLinear", ["q", "scale", "zp"], ["dq"], axis=2)]
    path = _save(tmp_path, nodes, [_vi("x", [7, 2, 3])], [_vi("dq", None)], [W, R, scale, zp])
    g = load_onnx(path)
    lstm, q, dq = g.ops
    assert lstm.kind is OpKind.LSTM and lstm.outputs == ("h",)
    assert dict(lstm.attrs) == {"hidden_size": 5, "direction": "forward", "layout": 0}
    assert g.tensor("h").shape == (1, 2, 5)
    assert q.kind is OpKind.QUANTIZE and q.attrs["axis"] == 2
    assert g.tensor("q").dtype is DType.INT8
    assert dq.kind is OpKind.DEQUANTIZE and g.tensor("dq").dtype is DType.FP32


def test_unknown_ops(tmp_path: Path) -> None:
    nodes = [helper.make_node("Hardmax", ["x"], ["t"]),
             helper.make_node("Frob", ["t"], ["y"], domain="com.example")]
    path = _save(tmp_path, nodes, [_vi("x", [4, 4])], [_vi("y", [4, 4])],
                 extra_opsets=[helper.make_opsetid("com.example", 1)])
    g = load_onnx(path)
    assert [o.kind for o in g.ops] == [OpKind.UNKNOWN, OpKind.UNKNOWN]
    assert [o.provenance.source_op for o in g.ops] == ["onnx::Hardmax",
                                                       "onnx::com.example::Frob"]


def test_missing_dtype_names_the_node(tmp_path: Path) -> None:
    nodes = [helper.make_node("Frob", ["x"], ["t"], domain="com.example", name="frob"),
             helper.make_node("Relu", ["t"], ["y"])]
    path = _save(tmp_path, nodes, [_vi("x", [4])], [_vi("y", None, 0)],
                 extra_opsets=[helper.make_opsetid("com.example", 1)])
    with pytest.raises(GraphError, match="frob"):
        load_onnx(path)


def test_subgraph_outer_refs_are_dependencies(tmp_path: Path) -> None:
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["a"])], "then", [],
                               [_vi("a", [3])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["b"])], "else", [],
                               [_vi("b", [3])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    zero = numpy_helper.from_array(np.array(0.0, np.float32), "zero")
    path = _save(tmp_path, nodes, [_vi("x", [3])], [_vi("y", [3])], [zero])
    g = load_onnx(path)
    if_op = g.ops[-1]
    assert if_op.kind is OpKind.IF and if_op.provenance.source_op == "onnx::If"
    assert if_op.inputs == ("c", "x")
    assert if_op.attrs["branch"] in ("then", "else")  # counted: graph.onnx_control
    assert g.ops[0].attrs["axes"] == ()


# ---- hostile and broken files ----------------------------------------------------------------


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(ModelFormatError, match="no such file") as e:
        load_onnx(tmp_path / "absent.onnx")
    assert e.value.file == str(tmp_path / "absent.onnx")
    with pytest.raises(ModelFormatError, match="directory"):
        load_onnx(tmp_path)


def test_old_opset_is_upgraded(tmp_path: Path) -> None:
    g = load_onnx(_mlp(tmp_path, opset=12), batch=2)
    assert g.record.upgraded_from_opset == 12
    assert [o.kind for o in g.ops] == [OpKind.MATMUL, OpKind.ADD, OpKind.RELU]


def test_every_truncation_is_a_model_format_error(tmp_path: Path) -> None:
    data = Path(_mlp(tmp_path)).read_bytes()
    cut = tmp_path / "cut.onnx"
    for n in range(0, len(data)):
        cut.write_bytes(data[:n])
        with pytest.raises(ModelFormatError):
            load_onnx(cut)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(min_size=0, max_size=512))
def test_random_bytes_are_refused(tmp_path: Path, blob: bytes) -> None:
    path = tmp_path / "random.onnx"
    path.write_bytes(blob)
    with pytest.raises(ModelFormatError):
        load_onnx(path)


def test_dangling_input_is_refused(tmp_path: Path) -> None:
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="add")]
    path = _save(tmp_path, nodes, [_vi("x", [2])], [_vi("y", [2])])
    with pytest.raises(ModelFormatError, match="'ghost'") as e:
        load_onnx(path)
    assert "add" in (e.value.place or "")


# ---- external data ---------------------------------------------------------------------------


def _external_model(folder: Path, location: str, *, length: int | None = None,
                    shape: tuple[int, ...] = (8, 4)) -> str:
    w = TensorProto()
    w.name = "W"
    w.data_type = F
    w.dims.extend(shape)
    w.data_location = TensorProto.EXTERNAL
    entries = {"location": location, "offset": "0"}
    if length is not None:
        entries["length"] = str(length)
    for k, v in entries.items():
        e = w.external_data.add()
        e.key, e.value = k, v
    nodes = [helper.make_node("MatMul", ["x", "W"], ["y"])]
    folder.mkdir(parents=True, exist_ok=True)
    return _save(folder, nodes, [_vi("x", [2, shape[0]])], [_vi("y", [2, shape[1]])], [w])


def test_external_data_inside_folder_loads(tmp_path: Path) -> None:
    (tmp_path / "weights.bin").write_bytes(np.ones((8, 4), np.float32).tobytes())
    g = load_onnx(_external_model(tmp_path, "weights.bin"))
    assert g.tensor("W").role is Role.PARAM and g.param_bytes == 128
    assert g.tensor("y").shape == (2, 4)


@pytest.mark.parametrize("location", ["../outside.bin", "sub/../../outside.bin",
                                      "/etc/passwd", "\\\\server\\share\\w.bin"])
def test_external_data_escaping_the_folder_is_refused(tmp_path: Path, location: str) -> None:
    (tmp_path / "outside.bin").write_bytes(np.ones((8, 4), np.float32).tobytes())
    path = _external_model(tmp_path / "model", location)
    with pytest.raises(ModelFormatError, match="initializer 'W'") as e:
        load_onnx(path)
    assert "absolute" in e.value.problem or "escapes" in e.value.problem
    # the executable-source loader (profile, validate) applies the same check
    from placewise.runtime.opexec import load_source

    with pytest.raises(ModelFormatError, match="initializer 'W'"):
        load_source(path, with_graph=False)


def test_external_data_symlink_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.ones((8, 4), np.float32).tobytes())
    folder = tmp_path / "model"
    folder.mkdir()
    os.symlink(secret, folder / "w.bin")
    with pytest.raises(ModelFormatError, match="escapes"):
        load_onnx(_external_model(folder, "w.bin"))


def test_external_data_missing_or_short(tmp_path: Path) -> None:
    with pytest.raises(ModelFormatError, match="does not exist"):
        load_onnx(_external_model(tmp_path / "a", "nothere.bin"))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "w.bin").write_bytes(b"\0" * 10)
    with pytest.raises(ModelFormatError, match="too short"):
        load_onnx(_external_model(tmp_path / "b", "w.bin"))
    with pytest.raises(ModelFormatError, match="needs 128"):
        load_onnx(_external_model(tmp_path / "b", "w.bin", length=10))


def test_reshape_sizes_inference_misses_are_recovered(tmp_path: Path) -> None:
    """A Reshape whose target is computed from Shape with Div (as legacy torch exports do)."""
    two = numpy_helper.from_array(np.array([2], np.int64), "two")
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "zero", "one"], ["n"]),
             helper.make_node("Slice", ["s", "one", "two"], ["h"]),
             helper.make_node("Div", ["h", "two"], ["half"]),
             helper.make_node("Concat", ["n", "two", "half"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["r"]),
             helper.make_node("Transpose", ["r"], ["y"], perm=[0, 2, 1])]
    zero = numpy_helper.from_array(np.array([0], np.int64), "zero")
    one = numpy_helper.from_array(np.array([1], np.int64), "one")
    path = _save(tmp_path, nodes, [_vi("x", ["N", 8])], [_vi("y", None)], [two, zero, one])
    g = load_onnx(path)
    assert g.tensor("r").shape == ("N", 2, 4)
    assert g.tensor("y").shape == ("N", 4, 2)
    assert load_onnx(path, batch=3).tensor("y").shape == (3, 4, 2)
