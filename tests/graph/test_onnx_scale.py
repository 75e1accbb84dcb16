"""Import scaling (issue 24, item 5): a generated mid-size ONNX DAG imports, counts, fuses
and costs exactly as it did before the import path was made to scale (the figures below
were taken from the importer before those changes), and the caches that made it scale
give the answers an uncached computation gives. No timing is asserted here:
``benchmarks/onnx_scale.py`` measures the wall time against ``--time-limit``."""

from __future__ import annotations

import collections
import dataclasses
from pathlib import Path

import onnx
import pytest

from placewise.cost.load import load_cost_model
from placewise.cost.roofline import RooflineModel, gemm_dims, op_work
from placewise.graph.count import count_graph, count_op
from placewise.graph.fuse import fuse
from placewise.graph.ir import Graph, Op, OpKind, Role, TaskHint, Tensor
from placewise.graph.load import load_model
from placewise.hardware.load import load_machine
from placewise.schedule.placement import Problem
from placewise.units import DType
from tests.onnx_dag import onnx_dag

# onnx_dag(2000, seed=3) at batch 2, as the importer made it before the scaling work
KINDS = {"add": 282, "concat": 58, "conv": 402, "matmul": 288, "mul": 49, "relu": 748,
         "sigmoid": 97, "transpose": 76}
FINGERPRINT = "sha256:be391f7b55eeb02936abe95230ca8d29f89acd6bffac837b2e95965dc3492c33"
# gpu figures: the h100 preset's fitted efficiency block (issue 25), costs the same graph
COST_S = {"cpu": 0.005707747222222217, "gpu0": 0.013541651875851697,
          "gpu1": 0.013541651875851697}


@pytest.fixture(scope="module")
def dag(tmp_path_factory: pytest.TempPathFactory) -> Graph:
    path = Path(tmp_path_factory.mktemp("dag")) / "dag.onnx"
    onnx.save(onnx_dag(2000, seed=3), str(path))
    return load_model(str(path), batch=2)


def test_the_generator_is_seeded_and_exact() -> None:
    for n in (1, 2, 7, 150):
        m = onnx_dag(n, seed=5)
        assert len(m.graph.node) == n
        onnx.checker.check_model(m, full_check=True)  # shapes consistent, names defined
    assert onnx_dag(300, seed=1).SerializeToString() == \
        onnx_dag(300, seed=1).SerializeToString()
    assert onnx_dag(300, seed=1).SerializeToString() != \
        onnx_dag(300, seed=2).SerializeToString()


def test_a_2000_node_dag_imports_as_before(dag: Graph) -> None:
    assert len(dag.ops) == 2000
    assert len(dag.tensors) == 3209
    assert dict(collections.Counter(o.kind.value for o in dag.ops)) == KINDS
    assert dag.param_bytes == 912_576
    assert dag.fingerprint() == FINGERPRINT
    c = count_graph(dag)
    assert c.flops == 59_397_120.0
    assert c.bytes_moved == 18_652_352
    assert c.coverage == 1.0


def test_a_2000_node_dag_fuses_and_costs_as_before(dag: Graph) -> None:
    m = load_machine("h100-sxm-server")
    prob = Problem(dag, fuse(dag), m, load_cost_model(m, None), batch=2)
    assert (len(prob.vertices), len(prob.edges)) == (1118, 1299)
    for dev, want in COST_S.items():
        got = sum(prob.cost(v.index, dev, DType.FP32).total_s for v in prob.vertices)
        assert got == pytest.approx(want, rel=1e-12), dev


def test_kept_answers_equal_fresh_ones(dag: Graph) -> None:
    """``count_op``, ``gemm_dims`` and ``op_work`` keep their answers with the graph; an
    equal op the graph does not hold (a copy) is computed afresh, and agrees."""
    for op in dag.ops[:300]:
        twin = dataclasses.replace(op)
        assert twin is not op and not dag.owns(twin) and dag.owns(op)
        assert count_op(dag, op) is count_op(dag, op)  # kept
        assert count_op(dag, twin) == count_op(dag, op)
        assert gemm_dims(dag, twin) == gemm_dims(dag, op)
        for dt in (DType.FP32, DType.FP16):
            assert op_work(dag, twin, dt) == op_work(dag, op, dt)
    other = Graph.build(dag.name, dag.tensors, dag.ops, dag.inputs, dag.outputs)
    assert other.analysis("count_op") == {}  # a new graph keeps its own


class _Unshared(RooflineModel):
    device_class = None  # type: ignore[assignment]  # no classes: every device costed


def test_devices_of_one_class_share_costs(dag: Graph) -> None:
    """gpu0 and gpu1 of h100-sxm-server are one class for the roofline: gpu1 keeps gpu0's
    answer, which is what costing gpu1 on its own gives."""
    m = load_machine("h100-sxm-server")
    shared = Problem(dag, fuse(dag), m, load_cost_model(m, None), batch=2)
    fresh = Problem(dag, fuse(dag), m, _Unshared(m), batch=2)
    for v in shared.vertices[:300]:
        a = shared.cost(v.index, "gpu0", DType.FP32)
        b = shared.cost(v.index, "gpu1", DType.FP32)
        assert b is a
        assert fresh.cost(v.index, "gpu1", DType.FP32) == b
        assert shared.cost(v.index, "cpu", DType.FP32) == fresh.cost(v.index, "cpu",
                                                                     DType.FP32)


def test_a_task_keeps_its_time_per_device() -> None:
    """A task's given time is per device name: devices of one class do not share it."""
    m = load_machine("h100-sxm-server")
    t = [Tensor("x", (4,), DType.FP32, role=Role.INPUT),
         Tensor("y", (4,), DType.FP32, role=Role.OUTPUT)]
    hint = TaskHint(1e9, 1000, (("gpu0", 1.0), ("gpu1", 2.0)))
    g = Graph.build("t", t, [Op("t", OpKind.TASK, ("x",), ("y",), hint=hint)])
    prob = Problem(g, None, m, load_cost_model(m, None))
    assert prob.cost(0, "gpu0", DType.FP32).total_s == 1.0
    assert prob.cost(0, "gpu1", DType.FP32).total_s == 2.0
