"""Partition compilation keeps the boundary's names without breaking SSA form."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from placewise.runtime.compile import _name_outputs


def _model(nodes: list[onnx.NodeProto], inputs: list[str], outputs: list[str]) -> onnx.ModelProto:
    vi = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in inputs]
    vo = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in outputs]
    return helper.make_model(helper.make_graph(nodes, "g", vi, vo),
                             opset_imports=[helper.make_opsetid("", 18)])


def test_an_internal_value_with_a_boundary_name_is_moved_aside() -> None:
    # the exporter named a decomposition's own node "add_2" and the real output "add_3"
    m = _model([helper.make_node("Add", ["x", "x"], ["add_2"]),
                helper.make_node("Mul", ["add_2", "x"], ["add_3"])], ["x"], ["add_3"])
    _name_outputs(m, ["add_2"])
    onnx.checker.check_model(m)  # still SSA
    assert [o.name for o in m.graph.output] == ["add_2"]
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.array([1.0, 2.0], dtype=np.float32)
    (y,) = sess.run(["add_2"], {"x": x})
    assert np.allclose(y, (x + x) * x)


def test_an_input_passed_through_gets_an_identity() -> None:
    m = _model([helper.make_node("Relu", ["x"], ["r"])], ["x"], ["r", "x"])
    _name_outputs(m, ["relu", "x_out"])
    onnx.checker.check_model(m)
    assert [o.name for o in m.graph.output] == ["relu", "x_out"]
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.array([-1.0, 2.0], dtype=np.float32)
    r, same = sess.run(["relu", "x_out"], {"x": x})
    assert np.allclose(r, [0.0, 2.0]) and np.allclose(same, x)
