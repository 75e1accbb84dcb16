"""MFU and the memory-bound fraction (placewise.utilization) against hand computations, on a
real preset plan, and measured from a real validation run."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest

from placewise.errors import InputError
from placewise.graph.fuse import fuse
from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
from placewise.plan import Plan, build_plan, save_plan
from placewise.schedule import Assignment, Placement, Problem, evaluate
from placewise.schedule.simulate import TaskKind
from placewise.schedule.testing import ToyCostModel, toy_machine
from placewise.units import DType
from placewise.utilization import (
    check_validation,
    load_validation,
    measured_vertex_s,
    plan_graph,
    plan_utilization,
)

# x (64x128) @ w1 (128x256) -> h; relu(h) -> r; r @ w2 (256x32) -> y
M, K, N, P = 64, 128, 256, 32
F_MM1 = 2 * M * K * N  # 2 FLOPs per multiply-accumulate
F_RELU = M * N  # 1 per element
F_MM2 = 2 * M * N * P
F_ALL = F_MM1 + F_RELU + F_MM2


def mlp_graph() -> Graph:
    T = lambda n, s, r=Role.ACTIVATION: Tensor(n, s, DType.FP32, role=r)  # noqa: E731
    return Graph.build("hand", [T("x", (M, K), Role.INPUT), T("w1", (K, N), Role.PARAM),
                                T("h", (M, N)), T("r", (M, N)), T("w2", (N, P), Role.PARAM),
                                T("y", (M, P), Role.OUTPUT)],
                       [Op("mm1", OpKind.MATMUL, ("x", "w1"), ("h",)),
                        Op("relu", OpKind.RELU, ("h",), ("r",)),
                        Op("mm2", OpKind.MATMUL, ("r", "w2"), ("y",))])


def hand_plan(placement: dict[str, Assignment], *, fused: bool = False,
              times: dict[tuple[str, str], float] | None = None) -> tuple[Plan, Problem]:
    g = mlp_graph()
    m = toy_machine()
    prob = Problem(g, fuse(g) if fused else None, m, ToyCostModel(m, times))
    plan = build_plan(prob, evaluate(prob, Placement.of(placement)), model_ref="hand.json",
                      strategy="manual")
    return plan, prob


def test_mfu_and_memory_bound_fraction_by_hand_on_one_device() -> None:
    # everything on the host cpu (1 GFLOP/s fp32, 1 GB/s, 1 us launch): no transfers.
    # mm1 is given 0.5 ms (a compute-bound task); relu and mm2 take the toy roofline,
    # launch + max(2 x output elements / peak, bytes / bandwidth): both memory-bound
    cpu = Assignment("cpu", DType.FP32)
    plan, prob = hand_plan({"mm1": cpu, "relu": cpu, "mm2": cpu},
                           times={("mm1", "cpu"): 5e-4})
    t_mm1 = 5e-4
    t_relu = 1e-6 + (M * N + M * N) * 4 / 1e9
    t_mm2 = 1e-6 + (M * N + N * P + M * P) * 4 / 1e9
    total = t_mm1 + t_relu + t_mm2
    assert plan.predicted_latency_s == pytest.approx(total)
    u = plan_utilization(plan, graph=prob.graph, machine=prob.machine)
    assert u.flops == F_ALL
    assert u.uncounted == ()
    assert [(p.device, p.dtype, p.peak_flops_per_s) for p in u.peaks] == [("cpu", "fp32", 1e9)]
    assert u.peak_flops_per_s == 1e9
    assert u.time_s == pytest.approx(total)
    assert u.mfu == pytest.approx(F_ALL / (total * 1e9))
    # one device, one chain: the pipeline period is the device's busy time, the same
    assert u.period_s == pytest.approx(total)
    assert u.mfu_throughput == pytest.approx(F_ALL / (total * 1e9))
    assert u.busy_s == pytest.approx(total) and u.movement_s == 0.0
    assert u.memory_bound_s == pytest.approx(t_relu + t_mm2)
    assert u.memory_bound_fraction == pytest.approx((t_relu + t_mm2) / total)
    assert u.bottleneck_s == pytest.approx({"compute": t_mm1, "memory": t_relu + t_mm2})
    rows = {r.layer_type: r for r in u.by_layer_type}
    assert [r.layer_type for r in u.by_layer_type] == ["matmul", "relu"]  # by FLOPs
    mm, relu = rows["matmul"], rows["relu"]
    assert (mm.ops, mm.vertices, mm.flops) == (2, 2, F_MM1 + F_MM2)
    assert mm.time_s == pytest.approx(t_mm1 + t_mm2)
    assert mm.mfu == pytest.approx((F_MM1 + F_MM2) / ((t_mm1 + t_mm2) * 1e9))
    assert mm.memory_bound_fraction == pytest.approx(t_mm2 / (t_mm1 + t_mm2))
    assert relu.mfu == pytest.approx(F_RELU / (t_relu * 1e9))
    assert relu.memory_bound_fraction == 1.0
    json.dumps(u.to_json(), allow_nan=False)


def test_peak_sums_the_used_devices_at_the_precision_of_most_flops() -> None:
    # mm1 (most FLOPs) in fp16 and relu in fp32 on the gpu: the gpu counts at its fp16
    # peak (2e10); mm2 on the cpu at fp32 (1e9)
    plan, prob = hand_plan({"mm1": Assignment("gpu", DType.FP16),
                            "relu": Assignment("gpu", DType.FP32),
                            "mm2": Assignment("cpu", DType.FP32)})
    u = plan_utilization(plan, graph=prob.graph, machine=prob.machine)
    assert [(p.device, p.dtype, p.peak_flops_per_s, p.flops) for p in u.peaks] == [
        ("cpu", "fp32", 1e9, F_MM2), ("gpu", "fp16", 2e10, F_MM1)]  # FLOPs in that dtype
    assert u.peak_flops_per_s == 2.1e10
    assert u.mfu == pytest.approx(F_ALL / (plan.predicted_latency_s * 2.1e10))
    tasks = {t.name: t for t in plan.schedule.tasks}
    # a layer type's capacity: each task's duration at its own device's peak and precision
    cap = tasks["mm1"].duration_s * 2e10 + tasks["mm2"].duration_s * 1e9
    mm = next(r for r in u.by_layer_type if r.layer_type == "matmul")
    assert mm.capacity_flops == pytest.approx(cap)
    assert mm.mfu == pytest.approx((F_MM1 + F_MM2) / cap)
    relu = next(r for r in u.by_layer_type if r.layer_type == "relu")
    assert relu.capacity_flops == pytest.approx(tasks["relu"].duration_s * 1e10)
    # movement: the transfers (and conversions) the crossings need, in no layer type
    moves = [t for t in plan.schedule.tasks if t.kind is not TaskKind.COMPUTE]
    assert moves and u.movement_s == pytest.approx(sum(t.duration_s for t in moves))
    assert sum(r.flops for r in u.by_layer_type) == u.flops
    assert sum(r.time_s or 0.0 for r in u.by_layer_type) == pytest.approx(u.busy_s)


def test_a_fused_region_goes_whole_to_the_kind_with_most_flops() -> None:
    gpu = Assignment("gpu", DType.FP32)
    plan, prob = hand_plan({"mm1": gpu, "mm2": gpu}, fused=True)
    assert plan.regions["mm1"].ops == ("mm1", "relu")
    u = plan_utilization(plan, graph=prob.graph, machine=prob.machine)
    assert [(r.layer_type, r.ops, r.vertices, r.flops) for r in u.by_layer_type] == [
        ("matmul", 3, 2, F_ALL)]
    assert u.by_layer_type[0].time_s == pytest.approx(u.busy_s)


def test_a_real_preset_plan_counts_what_the_cost_model_counted() -> None:
    from placewise.graph.count import count_graph
    from tests.plan_fixtures import mlp_setup

    prob, plan = mlp_setup()  # zoo:mlp on h100-sxm-server, cpu + gpu0 in bf16, roofline
    u = plan_utilization(plan, graph=prob.graph)  # the preset loaded from the plan
    assert u.flops == count_graph(prob.graph).flops
    assert u.flops == sum(float(t.assumptions["flops"]) for t in plan.schedule.tasks
                          if t.kind is TaskKind.COMPUTE)
    peaks = {p.device: (p.dtype, p.peak_flops_per_s) for p in u.peaks}
    assert peaks == {"cpu": ("fp32", prob.machine.device("cpu").peak(DType.FP32)),
                     "gpu0": ("bf16", prob.machine.device("gpu0").peak(DType.BF16))}
    assert u.peak_flops_per_s == sum(p for _, p in peaks.values())
    assert u.mfu == pytest.approx(u.flops / (plan.predicted_latency_s * u.peak_flops_per_s))
    assert 0.0 < u.mfu < 1.0
    assert sum(r.flops for r in u.by_layer_type) == u.flops
    assert sum(r.time_s or 0.0 for r in u.by_layer_type) == pytest.approx(u.busy_s)
    assert sum(r.memory_bound_s or 0.0 for r in u.by_layer_type) == pytest.approx(
        u.memory_bound_s)
    assert {r.layer_type for r in u.by_layer_type} == {"linear"}
    json.dumps(u.to_json(), allow_nan=False)


def test_a_graph_of_another_model_is_refused() -> None:
    plan, prob = hand_plan({o: Assignment("cpu", DType.FP32) for o in ("mm1", "relu", "mm2")})
    other = Graph.build("other", [Tensor("x", (4,), DType.FP32, role=Role.INPUT),
                                  Tensor("y", (4,), DType.FP32, role=Role.OUTPUT)],
                        [Op("a", OpKind.RELU, ("x",), ("y",))])
    with pytest.raises(InputError, match="another graph"):
        plan_utilization(plan, graph=other, machine=prob.machine)


# ---- measured --------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def validated_tiny(folder: str) -> tuple[Plan, Any, dict[str, Any], Path]:
    """The runtime tests' tiny plan (zoo MLP across the test cores, an int8 vertex), saved
    under ``folder`` and validated once for real, with per-node profiles; its validation
    JSON written beside it (``v.json``). Shared with tests/report/test_sheet.py."""
    from placewise.validate import validate_plan
    from tests.runtime.helpers import local_machine, tiny_plan, tiny_source

    plan, prob = tiny_plan()
    path = Path(folder) / "plan.json"
    save_plan(plan, path)
    report = validate_plan(path, source=tiny_source(), machine=local_machine(), requests=3,
                           stream_s=0.1, solo_repeats=1, warmup=1, baseline=False,
                           profile_nodes=True)
    data = json.loads(json.dumps(report.to_json()))
    vfile = Path(folder) / "v.json"
    vfile.write_text(json.dumps(data))
    return plan, prob, data, vfile


@pytest.fixture(scope="module")
def validated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Plan, Any, dict[str, Any], Path]:
    return validated_tiny(str(tmp_path_factory.getbasetemp()))


def test_measured_figures_follow_the_validation(
        validated: tuple[Plan, Any, dict[str, Any], Path]) -> None:
    plan, prob, data, vfile = validated
    assert load_validation(vfile) == data
    u = plan_utilization(plan, validation=data, graph=prob.graph, machine=prob.machine)
    meas = u.measured
    assert meas is not None and meas.per_node
    p50 = data["measured"]["latency"]["p50_s"]
    assert meas.time_s == p50
    assert meas.mfu == pytest.approx(u.flops / (p50 * u.peak_flops_per_s))
    period = plan.batch / data["measured"]["throughput_rps"]
    assert meas.period_s == pytest.approx(period)
    assert meas.mfu_throughput == pytest.approx(u.flops / (period * u.peak_flops_per_s))
    # per vertex: the sum of its ops' node times, over every partition profiled
    op_s = {op: s for p in data["nodes"]["partitions"] for op, s in p["op_s"].items()}
    assert set(op_s) == set(plan.ops)
    for v, reg in plan.regions.items():
        assert meas.vertex_s[v] == pytest.approx(sum(op_s[o] for o in reg.ops))
    total = sum(meas.vertex_s[x.vertex] for x in u.vertices)
    mem = sum(meas.vertex_s[x.vertex] for x in u.vertices if x.bottleneck == "memory")
    assert meas.memory_bound_fraction == pytest.approx(mem / total)
    assert sum(r.time_s or 0.0 for r in meas.by_layer_type) == pytest.approx(total)
    for r in meas.by_layer_type:
        assert r.time_s is not None and r.flops == next(
            x.flops for x in u.by_layer_type if x.layer_type == r.layer_type)
    json.dumps(u.to_json(), allow_nan=False)


def test_without_node_profiles_only_lone_vertices_are_measured(
        validated: tuple[Plan, Any, dict[str, Any], Path]) -> None:
    plan, prob, data, _ = validated
    bare = dict(data, nodes=None)
    times, per_node = measured_vertex_s(plan, bare)
    assert not per_node
    expect = {}
    for t in data["attribution"]["latency"]["tasks"]:
        verts = {plan.ops[o].vertex for o in t["ops"]} if t["kind"] == "compute" else set()
        if len(verts) == 1:
            expect[verts.pop()] = t["measured_s"]
    assert times == expect
    u = plan_utilization(plan, validation=bare, graph=prob.graph, machine=prob.machine)
    assert u.measured is not None and not u.measured.per_node
    if len(expect) < len(u.vertices):  # some partition holds several vertices
        assert u.measured.memory_bound_fraction is None


def test_a_validation_of_another_plan_or_a_malformed_one_is_refused(
        validated: tuple[Plan, Any, dict[str, Any], Path], tmp_path: Path) -> None:
    plan, prob, data, _ = validated
    other, _ = hand_plan({o: Assignment("cpu", DType.FP32) for o in ("mm1", "relu", "mm2")})
    with pytest.raises(InputError, match="another plan") as e:
        check_validation(other, data, file="v.json")
    assert e.value.file == "v.json"
    no_fp = json.loads(json.dumps(data))
    no_fp["plan"]["fingerprint"] = None
    with pytest.raises(InputError, match="no plan fingerprint"):
        plan_utilization(plan, validation=no_fp, graph=prob.graph, machine=prob.machine)
    broken = json.loads(json.dumps(data))
    del broken["attribution"]
    with pytest.raises(InputError, match="not a validation report"):
        check_validation(plan, broken)
    bad = tmp_path / "bad.json"
    bad.write_text('{"plan": ')
    with pytest.raises(InputError) as e2:
        load_validation(bad)
    assert e2.value.file == str(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(InputError, match="not a validation report"):
        load_validation(bad)


def test_plan_graph_loads_the_model_as_planned(
        validated: tuple[Plan, Any, dict[str, Any], Path]) -> None:
    plan, prob, _, _ = validated
    assert plan_graph(plan).fingerprint() == prob.graph.fingerprint()
