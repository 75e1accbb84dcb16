"""IR invariants: Graph.build checks, symbolic shapes and binding, fingerprints, random DAGs."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings

from placewise.errors import GraphError
from placewise.graph.ir import (
    Attrs,
    Graph,
    Op,
    OpCategory,
    OpKind,
    Provenance,
    Role,
    Tensor,
    bind_shapes,
    eval_dim,
)
from placewise.units import DType
from tests.strategies import random_graphs

F32 = DType.FP32


def t(name: str, shape: tuple[int | str, ...], role: Role = Role.ACTIVATION) -> Tensor:
    return Tensor(name, shape, F32, role=role)


def test_cycle_message_names_the_ops() -> None:
    ts = [t("x", (2,), Role.INPUT), t("a_out", (2,)), t("b_out", (2,)), t("c_out", (2,))]
    ops = [Op("start", OpKind.RELU, ("x",), ("c_out",)),
           Op("a", OpKind.ADD, ("x", "b_out"), ("a_out",)),
           Op("b", OpKind.NEG, ("a_out",), ("b_out",))]
    with pytest.raises(GraphError, match="cycle") as e:
        Graph.build("g", ts, ops, file="m.onnx")
    msg = str(e.value)
    assert msg.startswith("m.onnx: op ")
    assert "cycle: a -> b -> a" in msg or "cycle: b -> a -> b" in msg
    assert "start" not in msg  # only ops on the cycle are named


def test_self_loop_is_a_cycle() -> None:
    ts = [t("y", (2,))]
    with pytest.raises(GraphError, match="cycle: loop -> loop"):
        Graph.build("g", ts, [Op("loop", OpKind.RELU, ("y",), ("y",))])


def test_duplicate_producer_names_both_ops() -> None:
    ts = [t("x", (2,), Role.INPUT), t("y", (2,))]
    ops = [Op("p1", OpKind.RELU, ("x",), ("y",)), Op("p2", OpKind.NEG, ("x",), ("y",))]
    with pytest.raises(GraphError, match="produced by both 'p1' and 'p2'"):
        Graph.build("g", ts, ops)


def test_dangling_and_undefined_inputs() -> None:
    ts = [t("x", (2,), Role.INPUT), t("orphan", (2,)), t("y", (2,))]
    with pytest.raises(GraphError, match="no producer") as e:
        Graph.build("g", ts, [Op("use", OpKind.ADD, ("x", "orphan"), ("y",))])
    assert "'use'" in str(e.value)
    with pytest.raises(GraphError, match="'ghost' is not defined"):
        Graph.build("g", ts, [Op("use", OpKind.ADD, ("x", "ghost"), ("y",))])
    with pytest.raises(GraphError, match="has no shape"):
        Graph.build("g", ts[:1], [Op("use", OpKind.RELU, ("x",), ("nowhere",))])


def test_duplicate_names_and_input_produced() -> None:
    with pytest.raises(GraphError, match="tensor defined twice"):
        Graph.build("g", [t("x", (2,)), t("x", (3,))], [])
    ts = [t("x", (2,), Role.INPUT), t("y", (2,))]
    with pytest.raises(GraphError, match="op name used twice"):
        Graph.build("g", ts, [Op("o", OpKind.RELU, ("x",), ("y",)),
                              Op("o", OpKind.RELU, ("y",), ())])
    with pytest.raises(GraphError, match="graph input but is also produced"):
        Graph.build("g", ts, [Op("o", OpKind.RELU, ("y",), ("x",))])
    with pytest.raises(GraphError, match="negative dimension"):
        Graph.build("g", [t("x", (2, -1))], [])


def test_optional_empty_inputs_are_skipped() -> None:
    ts = [t("a", (2, 2), Role.INPUT), t("b", (2, 2), Role.PARAM), t("y", (2, 2), Role.OUTPUT)]
    g = Graph.build("g", ts, [Op("gemm", OpKind.GEMM, ("a", "b", ""), ("y",))])
    assert [x.name for x in g.in_tensors(g.op("gemm"))] == ["a", "b"]


def symbolic_graph() -> Graph:
    ts = [t("x", ("batch", "seq", 8), Role.INPUT), t("w", (8, 4), Role.PARAM),
          t("y", ("batch", "seq", 4)), t("z", ("batch*seq", 4), Role.OUTPUT)]
    ops = [Op("mm", OpKind.MATMUL, ("x", "w"), ("y",)),
           Op("flat", OpKind.RESHAPE, ("y",), ("z",))]
    return Graph.build("g", ts, ops)


def test_symbolic_shapes_require_binding() -> None:
    g = symbolic_graph()
    assert not g.tensor("x").is_concrete
    with pytest.raises(GraphError, match="symbolic") as e:
        _ = g.tensor("x").numel
    assert "tensor 'x'" in str(e.value)
    with pytest.raises(GraphError, match="--shape"):
        g.check_concrete()
    with pytest.raises(GraphError, match="symbolic"):
        Graph.build("g", g.tensors, g.ops, require_concrete=True)


def test_bind_shapes() -> None:
    g = bind_shapes(symbolic_graph(), {"batch": 2, "seq": 3})
    assert g.tensor("x").shape == (2, 3, 8)
    assert g.tensor("z").shape == (6, 4)
    assert g.tensor("z").nbytes == 6 * 4 * 4
    with pytest.raises(GraphError, match="symbolic"):
        bind_shapes(symbolic_graph(), {"batch": 2})
    partial = bind_shapes(symbolic_graph(), {"batch": 2}, require_concrete=False)
    assert partial.tensor("x").shape == (2, "seq", 8)


def test_eval_dim() -> None:
    assert eval_dim("b*s+1", {"b": 2, "s": 5}) == 11
    assert eval_dim("b//2", {"b": 7}) == 3
    assert eval_dim("__import__('os')", {}) == "__import__('os')"  # never evaluated
    assert eval_dim(4, {}) == 4


def test_fingerprint_stable_and_sensitive() -> None:
    a = bind_shapes(symbolic_graph(), {"batch": 2, "seq": 3})
    b = bind_shapes(symbolic_graph(), {"batch": 2, "seq": 3})
    c = bind_shapes(symbolic_graph(), {"batch": 2, "seq": 4})
    assert a.fingerprint() == b.fingerprint()
    assert a.fingerprint().startswith("sha256:")
    assert a.fingerprint() != c.fingerprint()
    d = Graph.build("g", [replace(x, dtype=DType.FP16) if x.name == "w" else x
                          for x in a.tensors], a.ops)
    assert d.fingerprint() != a.fingerprint()
    e = Graph.build("g", a.tensors, [replace(o, attrs=Attrs.of(note=1)) if o.name == "mm" else o
                                     for o in a.ops])
    assert e.fingerprint() != a.fingerprint()


def test_ops_are_ordered_topologically_and_stably() -> None:
    ts = [t("x", (2,), Role.INPUT), t("a", (2,)), t("b", (2,)), t("c", (2,), Role.OUTPUT)]
    ops = [Op("last", OpKind.ADD, ("a", "b"), ("c",)), Op("second", OpKind.NEG, ("x",), ("b",)),
           Op("first", OpKind.RELU, ("x",), ("a",))]
    g = Graph.build("g", ts, ops)
    assert [o.name for o in g.ops] == ["second", "first", "last"]
    assert g.inputs == ("x",) and g.outputs == ("c",)
    assert {o.name for o in g.predecessors(g.op("last"))} == {"first", "second"}
    assert [o.name for o in g.successors(g.op("first"))] == ["last"]


def test_where_and_categories() -> None:
    op = Op("conv1", OpKind.CONV, (), (), provenance=Provenance("n", "onnx::Conv", "enc.conv"))
    assert op.where() == "op 'conv1' (from onnx::Conv at enc.conv)"
    assert OpKind.MATMUL.category is OpCategory.CONTRACTION
    assert OpKind.RESHAPE.category is OpCategory.VIEW
    assert OpKind.TASK.category is OpCategory.OTHER


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs())
def test_random_graphs_hold_the_invariants(g: Graph) -> None:
    seen: set[str] = set(g.inputs) | {p.name for p in g.params}
    for op in g.ops:
        for name in op.inputs:
            if name:
                assert name in seen, f"{op.name} reads {name} before it is produced"
        seen.update(op.outputs)
        for name in op.outputs:
            assert g.producer(name) is op
        for name in op.inputs:
            if name:
                assert op in g.consumers(name)
    for name in g.outputs:
        assert g.producer(name) is not None
    assert all(x.is_concrete for x in g.tensors)
    again = Graph.build(g.name, g.tensors, reversed(g.ops))
    assert {o.name for o in again.ops} == {o.name for o in g.ops}
    assert Graph.build(g.name, g.tensors, g.ops).fingerprint() == g.fingerprint()
    first = g.tensors[0]
    bigger = [replace(x, shape=(*x.shape, 1)) if x is first else x for x in g.tensors]
    assert Graph.build(g.name, bigger, g.ops).fingerprint() != g.fingerprint()
