"""Naming a torch partition's ONNX outputs as the plan names them, in the shapes the
dynamo exporter leaves on real transformer programs (tests/realmodels.py): outputs it
folded into constants, outputs named one off from the plan's, an input copied onto its
own name."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from placewise.graph.ir import Op, OpKind, Role, Tensor
from placewise.graph.torch_import import _live
from placewise.runtime.compile import _name_outputs
from placewise.units import DType


def _model(nodes: list[onnx.NodeProto], inputs: list[str], outputs: list[str],
           inits: dict[str, np.ndarray]) -> onnx.ModelProto:
    g = helper.make_graph(
        nodes, "p", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in outputs],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    onnx.checker.check_model(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds), strict=True))


def test_outputs_folded_into_constants_and_named_one_off() -> None:
    """T5's position buckets: the exporter names its constants zeros, zeros_1, zeros_2
    where the plan has zeros_1, zeros_2, zeros_3 (and arange where it has arange_8)."""
    vals = {n: np.full(2, i, np.float32) for i, n in enumerate(["arange", "zeros", "zeros_1",
                                                                 "zeros_2"])}
    m = _model([], [], list(vals), vals)
    _name_outputs(m, ["arange_8", "zeros_1", "zeros_2", "zeros_3"])
    got = _run(m, {})
    assert list(got) == ["arange_8", "zeros_1", "zeros_2", "zeros_3"]
    for want, have in zip(got, vals, strict=True):
        np.testing.assert_array_equal(got[want], vals[have])


def test_an_output_that_is_a_constant_of_its_own_name() -> None:
    inits = {"expand": np.arange(2, dtype=np.float32)}
    m = _model([helper.make_node("Add", ["x", "expand"], ["y"])], ["x"], ["expand", "y"], inits)
    _name_outputs(m, ["expand", "out"])
    got = _run(m, {"x": np.ones(2, np.float32)})
    np.testing.assert_array_equal(got["expand"], [0, 1])
    np.testing.assert_array_equal(got["out"], [1, 2])


def test_an_input_copied_onto_its_own_name_is_dropped() -> None:
    m = _model([helper.make_node("Identity", ["emb"], ["emb"])], ["emb"], ["emb"], {})
    _name_outputs(m, ["to"])
    got = _run(m, {"emb": np.array([3, 4], np.float32)})
    np.testing.assert_array_equal(got["to"], [3, 4])


def test_calls_nobody_reads_are_not_ops() -> None:
    """GPT-2's program keeps an arange -> unsqueeze chain whose end no node reads."""
    t = [Tensor(n, (4,), DType.FP32) for n in ("a", "u1", "u2", "y")]
    ops = [Op("arange", OpKind.RANGE, (), ("a",)), Op("u1", OpKind.UNSQUEEZE, ("a",), ("u1",)),
           Op("u2", OpKind.UNSQUEEZE, ("u1",), ("u2",)),
           Op("relu", OpKind.RELU, ("x",), ("y",))]
    x = Tensor("x", (4,), DType.FP32, role=Role.INPUT)
    kept, tensors = _live(ops, [x, *t], ["y"])
    assert [o.name for o in kept] == ["relu"]
    assert [t.name for t in tensors] == ["x", "y"]
