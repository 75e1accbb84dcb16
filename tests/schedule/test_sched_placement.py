"""Placements, problems (vertices, region DAG, memoized costs), feasibility."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from placewise.cost.model import Representation
from placewise.errors import GraphError, InputError
from placewise.graph.ir import Graph, Op, OpKind, Role
from placewise.schedule import (
    Assignment,
    Placement,
    Problem,
    feasible_assignments,
    held_rep,
    pruned_assignments,
    schedule,
)
from placewise.schedule.testing import ToyCostModel, toy_machine
from placewise.units import DType
from tests.schedule.helpers import device, link, machine, t


@dataclass(frozen=True)
class _Region:
    name: str
    ops: tuple[str, ...]


@dataclass(frozen=True)
class _Partition:
    regions: tuple[_Region, ...]


def _graph() -> Graph:
    tensors = [t("x", role=Role.INPUT), t("w", role=Role.PARAM), t("h1"), t("h2"), t("h3"),
               t("y", role=Role.OUTPUT)]
    ops = [Op("mm", OpKind.MATMUL, ("x", "w"), ("h1",)),
           Op("act", OpKind.RELU, ("h1",), ("h2",)),
           Op("side", OpKind.NEG, ("h1",), ("h3",)),
           Op("out", OpKind.ADD, ("h2", "h3"), ("y",))]
    return Graph.build("g", tensors, ops)


class _Counting(ToyCostModel):
    def __init__(self, *a: object, **kw: object) -> None:
        super().__init__(*a, **kw)  # type: ignore[arg-type]
        self.calls = 0

    def op_cost(self, *a, **kw):  # type: ignore[no-untyped-def]
        self.calls += 1
        return super().op_cost(*a, **kw)


def test_placement_is_an_immutable_hashable_mapping() -> None:
    a = Placement.of({"b": Assignment("gpu", DType.FP16), "a": Assignment("cpu", DType.FP32)})
    assert list(a) == ["a", "b"] and len(a) == 2 and "a" in a
    b = a.moved("b", Assignment("cpu", DType.FP32))
    assert a["b"].device == "gpu" and b["b"].device == "cpu"
    assert a == Placement.of(dict(a)) and hash(a) == hash(Placement.of(dict(a)))
    assert {a: 1}[Placement.of(dict(a))] == 1
    assert Placement.from_json(a.to_json()) == a
    assert str(a["b"]) == "gpu/fp16" and b.devices_used() == ["cpu"]
    with pytest.raises(InputError, match="placement of 'v'"):
        Placement.from_json({"v": {"device": "cpu", "dtype": "fp99"}})
    with pytest.raises(AttributeError):
        a.items_ = ()  # type: ignore[misc]


def test_singleton_vertices_and_the_region_dag() -> None:
    m = toy_machine()
    prob = Problem(_graph(), None, m, ToyCostModel(m))
    assert prob.vertex_names == ["mm", "act", "side", "out"]
    mm = prob.vertex("mm")
    assert mm.inputs == ("x",) and mm.params == ("w",) and mm.outputs == ("h1",)
    assert [(e.src, e.dst, e.tensor, e.nbytes) for e in prob.edges] == [
        ("mm", "act", "h1", 4000), ("mm", "side", "h1", 4000), ("act", "out", "h2", 4000),
        ("side", "out", "h3", 4000)]
    assert prob.preds[3] == (1, 2) and prob.succs[0] == (1, 2)
    assert prob.host == "cpu"


def test_fused_regions_become_vertices() -> None:
    m = toy_machine()
    part = _Partition((_Region("r_side", ("side",)), _Region("r_main", ("mm", "act", "out"))))
    # r_main reads h3 from r_side which reads h1 from r_main: a cycle
    with pytest.raises(GraphError, match="cycle"):
        Problem(_graph(), part, m, ToyCostModel(m))
    part = _Partition((_Region("r_out", ("out",)), _Region("r_mm", ("mm", "act", "side"))))
    prob = Problem(_graph(), part, m, ToyCostModel(m))
    assert prob.vertex_names == ["r_mm", "r_out"]  # topological, not listing, order
    r = prob.vertex("r_mm")
    assert r.internal == ("h1",) and r.outputs == ("h2", "h3") and r.params == ("w",)
    s = schedule(prob, Placement.of({"r_mm": Assignment("gpu", DType.FP32),
                                     "r_out": Assignment("cpu", DType.FP32)}))
    assert [x.name for x in s.tasks] == ["xfer:x:cpu->gpu", "r_mm", "xfer:h2:gpu->cpu",
                                         "xfer:h3:gpu->cpu", "r_out"]
    with pytest.raises(GraphError, match="does not cover"):
        Problem(_graph(), _Partition((_Region("r", ("mm",)),)), m, ToyCostModel(m))
    with pytest.raises(GraphError, match="both regions"):
        Problem(_graph(), _Partition((_Region("r", ("mm", "act", "side", "out")),
                                      _Region("q", ("mm",)))), m, ToyCostModel(m))


def test_feasible_assignments_and_their_pruned_reasons() -> None:
    m = machine([device("cpu", dtypes={"fp32": 1e9}),
                 device("npu", kind="npu", dtypes={"int8": 1e12, "fp16": 1e11},
                        unsupported=["matmul"])],
                [link("l", "cpu", "npu")])
    prob = Problem(_graph(), None, m, ToyCostModel(m))
    assert feasible_assignments(prob, "mm") == [Assignment("cpu", DType.FP32)]
    reasons = {(p.assignment.device, p.assignment.dtype): p.reason
               for p in pruned_assignments(prob, "mm")}
    assert set(reasons) == {("npu", DType.INT8), ("npu", DType.FP16)}
    assert "does not run op 'mm'" in reasons[("npu", DType.INT8)]
    assert feasible_assignments(prob, "act") == [
        Assignment("cpu", DType.FP32), Assignment("npu", DType.INT8),
        Assignment("npu", DType.FP16)]
    assert prob.min_cost_s("act") <= prob.mean_cost_s("act")


def test_costs_are_memoized_so_moving_one_vertex_queries_only_its_costs() -> None:
    m = toy_machine()
    cm = _Counting(m)
    prob = Problem(_graph(), None, m, cm)
    base = Placement.uniform(prob.vertex_names, "cpu", DType.FP32)
    schedule(prob, base)
    assert cm.calls == 4
    schedule(prob, base)
    assert cm.calls == 4
    schedule(prob, base.moved("act", Assignment("gpu", DType.FP16)))
    assert cm.calls == 5


def test_held_representations() -> None:
    assert held_rep(t("a"), DType.FP16) == Representation(DType.FP16)
    assert held_rep(t("i", dtype=DType.INT64), DType.FP16) == Representation(DType.INT64)
    m = toy_machine()
    prob = Problem(_graph(), None, m, ToyCostModel(m))
    ins, outs = prob.io_reps(0, DType.FP16)
    assert [prob.reps[r] for r in ins] == [Representation(DType.FP16)]
    assert prob.copy_bytes("h1", outs[0]) == 2000


def test_problem_checks_its_inputs() -> None:
    m = toy_machine()
    with pytest.raises(InputError, match="batch"):
        Problem(_graph(), None, m, ToyCostModel(m), batch=0)
    with pytest.raises(InputError, match="no device 'tpu'"):
        Problem(_graph(), None, m, ToyCostModel(m), host="tpu")
    other = toy_machine(gpu_lanes=2)
    with pytest.raises(InputError, match="cost model"):
        Problem(_graph(), None, m, ToyCostModel(other.model_copy(update={"name": "x"})))
    with pytest.raises(InputError, match="no such vertex"):
        Problem(_graph(), None, m, ToyCostModel(m)).vertex("nope")
