"""The search space: candidates, pruning with reasons, and the crossing model."""

from __future__ import annotations

import random

import pytest

from placewise.errors import Infeasible, MemoryInfeasible
from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
from placewise.schedule import Problem, evaluate
from placewise.schedule.testing import ToyCostModel, toy_machine
from placewise.search.space import Budget, Model, SearchSpace, screen_dtypes
from placewise.units import DType
from tests.schedule.helpers import chain, device, link, machine
from tests.search.helpers import task_problem, three_devices


def test_candidates_are_devices_times_supported_precisions_with_reasons() -> None:
    m = machine([device("cpu"), device("npu", kind="npu", dtypes={"int8": 1e10},
                                       unsupported=["relu"])],
                [link("l", "cpu", "npu")])
    prob = Problem(chain(2), None, m, ToyCostModel(m))
    sp = SearchSpace(prob)
    assert [str(a) for a in sp.cands[0]] == ["cpu/fp32"]
    counts = sp.pruned_counts()
    assert counts["kind"] == 2 * 4  # npu does not run relu: every precision, both vertices
    assert counts["dtype"] == 2 * 3  # cpu has no bf16/fp16/int8
    assert any("does not run op kind 'relu'" in e for e in sp.pruned_examples()["kind"])


def test_a_vertex_too_big_for_a_device_is_pruned_and_nothing_fits_names_the_tier() -> None:
    m = toy_machine(memory_bytes=6000)
    x = Tensor("x", (1000,), DType.FP32, role=Role.INPUT)
    y = Tensor("y", (1000,), DType.FP32, role=Role.OUTPUT)
    g = Graph.build("g", [x, y], [Op("a", OpKind.RELU, ("x",), ("y",))])
    sp = SearchSpace(Problem(g, None, m, ToyCostModel(m)))  # fp32 needs 8000 B, fp16 4000 B
    assert [str(a) for a in sp.cands[0]] == ["gpu/fp16"]
    assert sp.pruned_counts()["memory"] == 2
    assert "needs 7.81 KiB but cpu/ram holds 5.86 KiB" in sp.pruned_examples()["memory"][0]
    with pytest.raises(MemoryInfeasible) as exc:
        SearchSpace(Problem(g, None, toy_machine(memory_bytes=3000),
                            ToyCostModel(toy_machine(memory_bytes=3000))))
    assert exc.value.need_bytes == 4000 and exc.value.capacity_bytes == 3000
    assert exc.value.tier == "vram" and "gpu/vram" in str(exc.value)


def test_no_runnable_precision_raises_infeasible() -> None:
    m = toy_machine()
    with pytest.raises(Infeasible, match="can run on no device in int8"):
        SearchSpace(Problem(chain(1), None, m, ToyCostModel(m)), [DType.INT8])


def test_the_model_matches_the_scheduler_exactly_on_chains() -> None:
    rng = random.Random(0)
    for m in (toy_machine(), three_devices()):
        prob = Problem(chain(5), None, m, ToyCostModel(m))  # real ops: conversions happen
        sp = SearchSpace(prob)
        model = Model(sp)
        for _ in range(20):
            ch = [rng.randrange(len(c)) for c in sp.cands]
            ev = evaluate(prob, sp.placement(ch))
            assert model.makespan_s(ch) == pytest.approx(ev.makespan_s, rel=1e-12)
            assert model.period_s(ch) == pytest.approx(ev.pipeline.period_s, rel=1e-12)


def test_the_contention_free_makespan_never_exceeds_the_scheduler() -> None:
    rng = random.Random(1)
    for kind in ("fork-join", "layered", "transformer"):
        prob = task_problem(kind, 12, 3, toy_machine(shared_controller=True, gpu_lanes=2))
        sp = SearchSpace(prob)
        model = Model(sp)
        for _ in range(10):
            ch = [rng.randrange(len(c)) for c in sp.cands]
            ev = evaluate(prob, sp.placement(ch))
            assert model.makespan_s(ch) <= ev.makespan_s * (1 + 1e-12)
        assert sp.lower_bound_s() <= min(
            evaluate(prob, sp.placement(ch)).makespan_s
            for ch in ([0] * sp.n, list(sp.best_k)))


def test_screening_keeps_the_fastest_precisions_per_device() -> None:
    m = toy_machine()
    prob = Problem(chain(3, size=100_000), None, m, ToyCostModel(m))
    kept = screen_dtypes(prob, [DType.FP32, DType.FP16], 1)
    assert kept == {"cpu": (DType.FP32,), "gpu": (DType.FP16,)}
    sp = SearchSpace(prob, explore=kept)
    assert [str(a) for a in sp.cands[0]] == ["cpu/fp32", "gpu/fp16"]
    assert sp.pruned_counts()["screened"] == 3


def test_budget_is_a_deterministic_work_clock() -> None:
    b = Budget(1.0)
    b.charge(0.25)
    assert b.left_s() == 0.75 and not b.exhausted()
    b.charge(1.0)
    assert b.exhausted() and not b.wall_stopped
