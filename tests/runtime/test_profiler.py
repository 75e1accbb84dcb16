"""Node profiles of a partition are attributed whole to the plan's ops (issue 24): a small
CNN whose convolutions onnxruntime rewrites into NCHWc nodes, with and without node names."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")


def _cnn(path: Path, named: bool, blocks: int = 3, ch: int = 16, img: int = 24) -> Path:
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits = [], []
    x, cin = "x", 3

    def arr(a: np.ndarray, name: str) -> None:
        inits.append(numpy_helper.from_array(a.astype(np.float32), name))

    for b in range(blocks):
        arr(rng.standard_normal((ch, cin, 3, 3)) * 0.1, f"w{b}")
        arr(1 + 0.1 * rng.standard_normal(ch), f"s{b}")
        arr(0.1 * rng.standard_normal(ch), f"bb{b}")
        arr(0.1 * rng.standard_normal(ch), f"m{b}")
        arr(1 + 0.1 * rng.random(ch), f"v{b}")
        nodes += [
            helper.make_node("Conv", [x, f"w{b}"], [f"c{b}"], name=f"conv{b}" * named,
                             pads=[1, 1, 1, 1]),
            helper.make_node("BatchNormalization", [f"c{b}", f"s{b}", f"bb{b}", f"m{b}",
                                                    f"v{b}"], [f"n{b}"], name=f"bn{b}" * named),
            helper.make_node("Relu", [f"n{b}"], [f"r{b}"], name=f"relu{b}" * named)]
        x, cin = f"r{b}", ch
    arr(rng.standard_normal((ch, 10)), "fcw")
    nodes += [helper.make_node("GlobalAveragePool", [x], ["gap"], name="gap" * named),
              helper.make_node("Flatten", ["gap"], ["flat"], name="flat" * named),
              helper.make_node("MatMul", ["flat", "fcw"], ["y"], name="fc" * named)]
    g = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, img, img])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize("named", [False, True])
def test_every_kernel_is_attributed(tmp_path: Path, named: bool) -> None:
    from placewise.runtime.compile import compile_partitions
    from placewise.runtime.opexec import load_source, request_inputs
    from placewise.runtime.profiler import chain, profile_partition
    from placewise.runtime.program import program_from_schedule
    from placewise.schedule import Assignment, Placement, evaluate
    from placewise.units import DType
    from tests.runtime.helpers import problem_of

    src = load_source(str(_cnn(tmp_path / "cnn.onnx", named)))
    g = src.graph
    assert g is not None
    prob = problem_of(src)
    where = {v: Assignment("cpu1", DType.FP32) for v in prob.vertex_names}
    prog = program_from_schedule(prob, evaluate(prob, Placement.of(where)).schedule)
    models = compile_partitions(src, prog.partitions, g, cache={})
    vals = chain(models, prog.partitions,
                 dict(zip(g.inputs, request_inputs(src, g, 1, 1)[0], strict=True)))
    for p in prog.partitions:
        before = [n.name for n in models[p.name].graph.node]
        prof = profile_partition(models[p.name], p, vals, cores=[], repeats=3, warmup=1)
        assert [n.name for n in models[p.name].graph.node] == before  # left as it was
        assert prof.nodes_s > 0
        # nothing dropped: the ops' times and the remainder are the measured node time
        assert sum(prof.op_s.values()) + prof.unowned_s == pytest.approx(prof.nodes_s,
                                                                         rel=1e-9)
        assert prof.unowned_s <= 0.01 * prof.nodes_s
        kernels = {k for ks in prof.op_kernels.values() for k in ks}
        assert any("nchwc" in k for k in kernels)  # the rewrite this test is about
        convs = [op for op in p.ops if op.kind.value == "conv"]
        assert convs
        for op in convs:  # a conv fused into an NCHWc node still gets its time
            assert prof.op_s[op.name] > 0.01 * prof.nodes_s / len(convs)


def test_node_owners_follows_reorders_and_fusions() -> None:
    from placewise.graph.ir import Op, OpKind
    from placewise.runtime.profiler import node_owners

    class P:
        ops = (Op("conv", OpKind.CONV, ("x", "w"), ("c",)),
               Op("relu", OpKind.RELU, ("c",), ("r",)),
               Op("add", OpKind.ADD, ("r", "x"), ("a",)),
               Op("mm", OpKind.MATMUL, ("a", "w2"), ("y",)))

    nodes = [("in", ["x"], ["x_b"]),  # ReorderInput: serves its consumers
             ("r_nchwc", ["x_b", "w_b"], ["t0"]),  # Conv+Relu fused, blocked layout
             ("a_nchwc", ["t0", "x_b"], ["t1"]),
             ("out", ["t1"], ["a"]),  # ReorderOutput: serves the add
             ("gemm", ["a", "w2"], ["t2"]),  # internal name, reshaped after
             ("shape", ["t2"], ["y"])]
    got = node_owners(nodes, P.ops)
    assert got == {"in": ["add", "conv", "relu"], "r_nchwc": ["conv", "relu"], "a_nchwc": ["add"],
                   "out": ["add"], "gemm": ["mm"], "shape": ["mm"]}
