"""plan_search: strategies by name, errors, determinism, and auto never losing to a baseline."""

from __future__ import annotations

import difflib
import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placewise.errors import InputError, MemoryInfeasible, UnsupportedError
from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
from placewise.hardware.spec import Machine
from placewise.schedule import Objective, Problem
from placewise.schedule.testing import ToyCostModel, toy_machine
from placewise.search import STRATEGIES, parse_strategy, plan_search
from placewise.units import DType
from tests.schedule.helpers import chain, random_machines
from tests.search.helpers import task_graph, task_problem, three_devices


def test_every_strategy_runs_by_name_and_reports_baselines() -> None:
    prob = task_problem("chain", 6, 0, three_devices())
    names = ["single:gpu", "greedy", "heft", "dp", "cpsat", "local", "auto", "exhaustive"]
    assert {n.split(":")[0] for n in names} >= {s.split(":")[0] for s in STRATEGIES}
    for name in names:
        # a work budget of 0.5 s; the wall-clock limit only keeps a loaded machine from
        # cutting CP-SAT short
        r = plan_search(prob, strategy=name, time_limit_s=30.0, work_limit_s=0.5, seed=1)
        assert r.strategy == name and r.feasible
        assert [b for b, _ in r.baselines] == ["single:cpu", "single:gpu", "single:npu",
                                               "greedy"]
        assert r.lower_bound_s <= r.objective_s
        assert r.candidates_evaluated >= 1 and len(r.alternatives) >= 4
        json.dumps(r.to_json())
        if name in ("greedy", "heft", "dp", "cpsat", "single:gpu"):
            assert r.chosen == name and name in r.labels()
    r = plan_search(prob, strategy="single:npu", time_limit_s=0.5)
    assert r.devices_used == ["npu"]


def test_bad_arguments_name_the_flag() -> None:
    prob = task_problem("chain", 3, 0)
    with pytest.raises(InputError, match="--strategy: unknown strategy 'best'"):
        plan_search(prob, strategy="best")
    with pytest.raises(InputError, match="--strategy: single:tpu: the machine has no device"):
        plan_search(prob, strategy="single:tpu")
    with pytest.raises(InputError, match="--objective"):
        plan_search(prob, objective="speed")
    with pytest.raises(InputError, match="--time-limit"):
        plan_search(prob, time_limit_s=0)
    with pytest.raises(InputError, match="--dtypes"):
        plan_search(prob, dtypes=["fp33"])
    assert parse_strategy(" heft ").name == "heft"


def test_dp_on_a_graph_it_cannot_handle_says_why() -> None:
    prob = task_problem("layered", 12, 1)
    with pytest.raises(UnsupportedError, match="dp: graph is not a chain/series-parallel"):
        plan_search(prob, strategy="dp")


def test_nothing_fits_raises_memory_infeasible_naming_the_tier() -> None:
    # fp32 weights of 12 KB per vertex on devices of 16 KB: each vertex fits alone, never
    # two together
    m = toy_machine(memory_bytes=16_000)
    x = Tensor("x", (10,), DType.FP32, role=Role.INPUT)
    h = Tensor("h", (10,), DType.FP32)
    y = Tensor("y", (10,), DType.FP32, role=Role.OUTPUT)
    ws = [Tensor(f"w{i}", (3000,), DType.FP32, role=Role.PARAM) for i in range(4)]
    ops = [Op("a", OpKind.ADD, ("x", "w0"), ("h",)), Op("b", OpKind.ADD, ("h", "w1"), ("y",))]
    g = Graph.build("g", [x, h, y, *ws], ops)
    prob = Problem(g, None, m, ToyCostModel(m))
    r = plan_search(prob, strategy="auto", time_limit_s=0.5, dtypes=["fp32"])
    assert r.feasible and len(r.devices_used) == 2  # split across devices: fits
    with pytest.raises(MemoryInfeasible) as exc:
        plan_search(prob, strategy="single:cpu", time_limit_s=0.5, dtypes=["fp32"])
    assert exc.value.tier == "ram" and exc.value.need_bytes > exc.value.capacity_bytes
    assert "cpu/ram by 7.89 KiB" in str(exc.value)
    # fp32 only, and a third weight: nothing fits anywhere
    ops3 = [*ops, Op("c", OpKind.ADD, ("y", "w2"), ("h2",))]
    g3 = Graph.build("g3", [x, h, Tensor("y", (10,), DType.FP32),
                            Tensor("h2", (10,), DType.FP32, role=Role.OUTPUT), *ws], ops3)
    m3 = toy_machine(memory_bytes=13_000)
    with pytest.raises(MemoryInfeasible, match=r"overflows \w+/\w+ by") as exc:
        plan_search(Problem(g3, None, m3, ToyCostModel(m3)), time_limit_s=0.5,
                    dtypes=["fp32"])
    assert exc.value.tier in ("ram", "vram")


def test_same_inputs_and_seed_give_the_same_result() -> None:
    for strategy, n in (("auto", 18), ("local", 320)):
        outs = []
        for _ in range(2):
            prob = task_problem("layered", n, 5, three_devices(), edge_bytes=1e5)
            # the work budget decides; a generous wall-clock limit keeps a loaded machine's
            # deadline out of it
            r = plan_search(prob, strategy=strategy, time_limit_s=60.0, work_limit_s=0.8,
                            seed=7)
            outs.append(json.dumps(r.to_json(include_time=False), sort_keys=True, indent=1))
            assert r.feasible
        assert outs[0] == outs[1], "\n".join(difflib.unified_diff(
            outs[0].splitlines(), outs[1].splitlines(), lineterm=""))


def test_throughput_objective_and_progress() -> None:
    prob = task_problem("fork-join", 10, 2, three_devices())
    seen: list[tuple[str, float]] = []
    r = plan_search(prob, strategy="auto", objective="throughput", time_limit_s=0.5,
                    progress=lambda msg, f: seen.append((msg, f)))
    assert r.objective is Objective.THROUGHPUT
    assert r.objective_s == pytest.approx(1.0 / r.best.pipeline.runs_per_s)
    assert seen[0][0] == "costing candidates" and seen[-1] == ("done", 1.0)
    assert all(0.0 <= f <= 1.0 for _, f in seen)
    assert r.objective_s <= min(v for _, v in r.baselines)


def test_the_lower_bound_holds_for_every_alternative() -> None:
    m = toy_machine()
    prob = Problem(chain(4, size=100_000), None, m, ToyCostModel(m))
    r = plan_search(prob, strategy="auto", time_limit_s=0.5)
    assert all(a.objective_s >= r.lower_bound_s * (1 - 1e-12) for a in r.alternatives)
    assert r.chosen in r.labels()


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=random_machines(), kind=st.sampled_from(["chain", "fork-join", "layered",
                                                   "transformer"]),
       n=st.integers(2, 14), seed=st.integers(0, 1000),
       objective=st.sampled_from(["latency", "throughput"]))
def test_auto_is_never_worse_than_the_best_baseline(m: Machine, kind: str, n: int, seed: int,
                                                    objective: str) -> None:
    prob = Problem(task_graph(kind, n, seed, m, edge_bytes=1e3), None, m, ToyCostModel(m))
    try:
        r = plan_search(prob, strategy="auto", objective=objective, time_limit_s=0.3,
                        seed=seed)
    except MemoryInfeasible:
        return  # tiny random capacities: nothing fits, and the error says where
    best_baseline = min(v for _, v in r.baselines)
    assert r.objective_s <= best_baseline
    assert math.isfinite(r.objective_s) and r.feasible
