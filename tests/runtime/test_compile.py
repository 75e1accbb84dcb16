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


def test_partitions_from_the_cache_still_chain_to_the_whole_model() -> None:
    """Two programs that share partitions, compiled with one cache: each chains to the
    whole model's outputs (helper fx nodes follow their ops over all partitions)."""
    import torch

    from placewise.runtime.compile import compile_partitions
    from placewise.runtime.opexec import request_inputs
    from placewise.runtime.profiler import chain
    from placewise.runtime.program import program_from_schedule
    from placewise.schedule import Assignment, Placement, evaluate
    from placewise.units import DType
    from tests.runtime.helpers import problem_of, tiny_source

    src = tiny_source()
    g = src.graph
    assert g is not None
    prob = problem_of(src)
    names = prob.vertex_names
    cache: dict[tuple[object, ...], object] = {}
    req = request_inputs(src, g, 1, 3)[0]
    with torch.no_grad():
        ref = src.exported_program.module()(*[torch.from_numpy(x) for x in req]).numpy()
    for cut in (2, 3):
        where = {v: Assignment("cpu0" if i < cut else "cpu1", DType.FP32)
                 for i, v in enumerate(names)}
        prog = program_from_schedule(prob, evaluate(prob, Placement.of(where)).schedule)
        models = compile_partitions(src, prog.partitions, g, cache=cache)
        vals = chain(models, prog.partitions, dict(zip(g.inputs, req, strict=True)))
        out = vals[g.outputs[0]]
        assert np.linalg.norm(out - ref) <= 1e-5 * np.linalg.norm(ref)
    assert len(cache) >= 3
