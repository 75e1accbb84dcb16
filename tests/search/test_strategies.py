"""Each strategy on its own: baselines, HEFT, DP, CP-SAT, exhaustive, local search."""

from __future__ import annotations

import random

import pytest

from placewise.errors import UnsupportedError
from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
from placewise.schedule import Objective, Problem, evaluate
from placewise.schedule.testing import ToyCostModel, toy_machine
from placewise.search.baselines import greedy_placement, single_choice, single_placement
from placewise.search.cpsat import Solution, _data, check_solution, cpsat_search
from placewise.search.dp import dp_search, graph_shape
from placewise.search.exhaustive import exhaustive_search
from placewise.search.heft import heft_choice, upward_ranks
from placewise.search.local import Estimator, local_search
from placewise.search.result import Tracker
from placewise.search.space import Budget, Model, SearchSpace
from placewise.units import DType
from tests.schedule.helpers import chain, device, link, machine
from tests.search.helpers import task_problem, three_devices

F32 = [DType.FP32]


def _fork(times: dict[tuple[str, str], float]) -> Problem:
    """x -> (o0, o1, o2) -> outputs, with explicit times."""
    x = Tensor("x", (10,), DType.FP32, role=Role.INPUT)
    ys = [Tensor(f"y{i}", (10,), DType.FP32, role=Role.OUTPUT) for i in range(3)]
    ops = [Op(f"o{i}", OpKind.RELU, ("x",), (f"y{i}",)) for i in range(3)]
    m = toy_machine()
    return Problem(Graph.build("fork", [x, *ys], ops), None, m, ToyCostModel(m, times))


# ---- baselines ---------------------------------------------------------------------------------
def test_greedy_takes_each_vertex_at_its_fastest_and_single_keeps_one_device() -> None:
    times = {("o0", "cpu"): 1.0, ("o0", "gpu"): 2.0, ("o1", "cpu"): 3.0, ("o1", "gpu"): 1.0,
             ("o2", "cpu"): 1.0, ("o2", "gpu"): 1.0}
    sp = SearchSpace(_fork(times), F32)
    g = greedy_placement(sp)
    assert [g[f"o{i}"].device for i in range(3)] == ["cpu", "gpu", "cpu"]
    s, note = single_placement(sp, "gpu")
    assert {a.device for a in s.values()} == {"gpu"} and note == ""


def test_single_device_falls_back_to_the_host_for_what_it_cannot_run() -> None:
    m = machine([device("cpu"), device("npu", kind="npu", unsupported=["gelu"])],
                [link("l", "cpu", "npu")])
    x = Tensor("x", (10,), DType.FP32, role=Role.INPUT)
    h = Tensor("h", (10,), DType.FP32)
    y = Tensor("y", (10,), DType.FP32, role=Role.OUTPUT)
    g = Graph.build("g", [x, h, y], [Op("a", OpKind.RELU, ("x",), ("h",)),
                                     Op("b", OpKind.GELU, ("h",), ("y",))])
    sp = SearchSpace(Problem(g, None, m, ToyCostModel(m)))
    choice, note = single_choice(sp, "npu")
    assert [str(sp.cands[i][k]) for i, k in enumerate(choice)] == ["npu/fp32", "cpu/fp32"]
    assert "1 of 2 vertices cannot run on npu" in note


def test_single_device_uses_one_precision_the_fastest_overall() -> None:
    m = toy_machine()
    prob = Problem(chain(3, size=100_000), None, m, ToyCostModel(m))
    choice, _ = single_choice(SearchSpace(prob), "gpu")
    sp = SearchSpace(prob)
    assert {str(sp.cands[i][k]) for i, k in enumerate(choice)} == {"gpu/fp16"}


# ---- HEFT ---------------------------------------------------------------------------------------
def test_heft_spreads_independent_equal_work_and_ranks_decrease_along_edges() -> None:
    times = {(f"o{i}", d): 1.0 for i in range(3) for d in ("cpu", "gpu")}
    prob = _fork(times)
    model = Model(SearchSpace(prob, F32))
    choice = heft_choice(model)
    devs = [model.space.cands[i][k].device for i, k in enumerate(choice)]
    assert sorted(devs).count("cpu") in (1, 2)  # both devices used
    ev = evaluate(prob, model.space.placement(choice))
    assert ev.makespan_s < 3.0  # better than serial on one device
    p2 = task_problem("layered", 20, 1, three_devices())
    m2 = Model(SearchSpace(p2, F32))
    ranks = upward_ranks(m2)
    for e in range(len(m2.edges.src)):
        assert ranks[m2.edges.src[e]] >= ranks[m2.edges.dst[e]]


def test_heft_throughput_variant_balances_load() -> None:
    times = {(f"o{i}", d): 1.0 for i in range(3) for d in ("cpu", "gpu")}
    prob = _fork(times)
    model = Model(SearchSpace(prob, F32))
    ev = evaluate(prob, model.space.placement(heft_choice(model, throughput=True)))
    assert ev.pipeline.period_s == pytest.approx(2.0, rel=1e-3)


# ---- DP ------------------------------------------------------------------------------------------
def test_dp_refuses_graphs_that_are_not_series_parallel_with_the_reason() -> None:
    # the "N" graph a->c, a->d, b->d is not series-parallel
    x = Tensor("x", (10,), DType.FP32, role=Role.INPUT)
    ts = [Tensor(n, (10,), DType.FP32) for n in ("ha", "hb")]
    outs = [Tensor(n, (10,), DType.FP32, role=Role.OUTPUT) for n in ("yc", "yd")]
    ops = [Op("a", OpKind.RELU, ("x",), ("ha",)), Op("b", OpKind.RELU, ("x",), ("hb",)),
           Op("c", OpKind.RELU, ("ha",), ("yc",)), Op("d", OpKind.ADD, ("ha", "hb"), ("yd",))]
    m = toy_machine()
    model = Model(SearchSpace(Problem(Graph.build("n", [x, *ts, *outs], ops), None, m,
                                      ToyCostModel(m)), F32))
    assert graph_shape(model) == "other"
    with pytest.raises(UnsupportedError, match=r"dp: graph is not a chain/series-parallel: "
                                               r"vertex '\w' has \d predecessors"):
        dp_search(model)
    with pytest.raises(UnsupportedError, match="stage partitioning for throughput needs a "
                                               "chain"):
        dp_search(model, throughput=True)


def test_dp_throughput_is_optimal_among_stage_partitions() -> None:
    prob = task_problem("chain", 6, 2, three_devices())
    sp = SearchSpace(prob, F32)
    model = Model(sp)
    out = dp_search(model, throughput=True)
    got = evaluate(prob, out.placement).pipeline.period_s
    assert out.exact and got == pytest.approx(out.value_s, rel=1e-9)
    # every contiguous stage partition with distinct devices is no better
    tr = Tracker(prob, Objective.THROUGHPUT, Budget(100.0))
    import itertools

    for ch in itertools.product(range(3), repeat=sp.n):
        devs = [sp.cand_dev[i][k] for i, k in enumerate(ch)]
        runs = [d for j, d in enumerate(devs) if j == 0 or devs[j - 1] != d]
        if len(runs) != len(set(runs)):
            continue
        key, _ = tr.evaluate(sp.placement(ch))
        assert key[1] >= got * (1 - 1e-9)


# ---- CP-SAT -------------------------------------------------------------------------------------
def test_cpsat_solutions_pass_the_checker_and_a_broken_one_does_not() -> None:
    prob = task_problem("layered", 6, 0)
    model = Model(SearchSpace(prob, F32))
    out = cpsat_search(model, time_limit_s=2.0, seed=0)
    assert out.optimal and out.checked and out.rejected == 0 and out.choice is not None
    data = _data(model, out.tick_s, None)
    bad = Solution(out.choice, (0,) * model.space.n, 0)
    assert check_solution(model, data, bad, throughput=False) != ""


def test_cpsat_respects_memory_capacity() -> None:
    # two vertices with big weights; the gpu (fast) holds only one of them
    m = toy_machine(memory_bytes=1 << 30)
    m2 = machine([device("cpu", capacity=1 << 30),
                  device("gpu", kind="gpu", dtypes={"fp32": 1e11}, capacity=600_000)],
                 [link("l", "cpu", "gpu", bw=1e12, latency=0.0)])
    x = Tensor("x", (100,), DType.FP32, role=Role.INPUT)
    ws = [Tensor(f"w{i}", (100, 1000), DType.FP32, role=Role.PARAM) for i in range(2)]
    ys = [Tensor(f"y{i}", (1000,), DType.FP32, role=Role.OUTPUT) for i in range(2)]
    ops = [Op(f"mm{i}", OpKind.MATMUL, ("x", f"w{i}"), (f"y{i}",)) for i in range(2)]
    g = Graph.build("g", [x, *ws, *ys], ops)
    del m
    prob = Problem(g, None, m2, ToyCostModel(m2))
    model = Model(SearchSpace(prob, F32))
    out = cpsat_search(model, time_limit_s=2.0, seed=0)
    assert out.placement is not None
    assert sorted(a.device for a in out.placement.values()) == ["cpu", "gpu"]
    assert evaluate(prob, out.placement).feasible
    assert any("memory constrained" in n for n in out.notes)


# ---- exhaustive ----------------------------------------------------------------------------
def test_exhaustive_skips_only_what_cannot_win() -> None:
    prob = task_problem("fork-join", 6, 1)
    model = Model(SearchSpace(prob))
    tr = Tracker(prob, Objective.LATENCY, Budget(100.0))
    out = exhaustive_search(model, tr)
    assert out.complete and out.enumerated == 3 ** 6 and out.skipped > 0
    tr2 = Tracker(prob, Objective.LATENCY, Budget(100.0))
    import itertools

    best = min(tr2.evaluate(model.space.placement(ch))[0]
               for ch in itertools.product(range(3), repeat=6))
    assert tr.best_key == best


# ---- local search --------------------------------------------------------------------------
def test_estimator_apply_and_revert_match_a_full_recompute() -> None:
    rng = random.Random(3)
    prob = task_problem("layered", 40, 2, three_devices())
    sp = SearchSpace(prob)
    model = Model(sp)
    for throughput in (False, True):
        ch = [rng.randrange(len(c)) for c in sp.cands]
        est = Estimator(model, ch, throughput=throughput)
        for _ in range(30):
            mv = {v: rng.randrange(len(sp.cands[v])) for v in rng.sample(range(sp.n), 3)}
            val, undo = est.apply(mv)
            full = Estimator(model, est.choice, throughput=throughput)
            assert val == pytest.approx(full.value(), rel=1e-12)
            assert est.fin == pytest.approx(full.fin, rel=1e-12)
            if rng.random() < 0.5:
                before = list(est.choice)
                est.revert(undo)
                assert est.choice != before or not mv
                again = Estimator(model, est.choice, throughput=throughput)
                assert est.value() == pytest.approx(again.value(), rel=1e-12)
                assert est.load == pytest.approx(again.load, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("exact_max", [300, 0])
def test_local_search_improves_on_a_bad_start(exact_max: int) -> None:
    prob = task_problem("layered", 30, 4, three_devices())
    sp = SearchSpace(prob, F32)
    model = Model(sp)
    tr = Tracker(prob, Objective.LATENCY, Budget(0.6))
    cpu = [next(k for k, a in enumerate(c) if a.device == "cpu") for c in sp.cands]
    start_key, _ = tr.evaluate(sp.placement(cpu))
    out = local_search(model, tr, [("single:cpu", cpu)], seed=0, exact_max=exact_max,
                       check_every=20)
    assert out.key < start_key and out.proposed > 0
    assert tr.evaluate(sp.placement(out.choice))[0] == out.key


def test_weight_guard_tracks_resident_weights_and_rejects_overflows() -> None:
    m = machine([device("cpu", capacity=1 << 30),
                 device("gpu", kind="gpu", dtypes={"fp32": 1e11, "fp16": 2e11},
                        capacity=30_000)],
                [link("l", "cpu", "gpu")])
    x = Tensor("x", (10,), DType.FP32, role=Role.INPUT)
    w = Tensor("w", (5000,), DType.FP32, role=Role.PARAM)  # 20 KB fp32, 10 KB fp16
    hs = [Tensor(f"h{i}", (10,), DType.FP32) for i in range(2)]
    y = Tensor("y", (10,), DType.FP32, role=Role.OUTPUT)
    w2 = Tensor("w2", (5000,), DType.FP32, role=Role.PARAM)
    ops = [Op("a", OpKind.ADD, ("x", "w"), ("h0",)), Op("b", OpKind.ADD, ("h0", "w"), ("h1",)),
           Op("c", OpKind.ADD, ("h1", "w2"), ("y",))]
    g = Graph.build("g", [x, w, w2, *hs, y], ops)
    sp = SearchSpace(Problem(g, None, m, ToyCostModel(m)))
    model = Model(sp)
    from placewise.search.local import WeightGuard

    def k(i: int, dev: str, dt: DType) -> int:
        return next(j for j, a in enumerate(sp.cands[i]) if a.device == dev and a.dtype is dt)

    cpu = [k(i, "cpu", DType.FP32) for i in range(3)]
    guard = WeightGuard(model, cpu)
    # a and b share w on the gpu in fp32: counted once (20 KB) -> fits
    assert guard.apply(cpu, {0: k(0, "gpu", DType.FP32), 1: k(1, "gpu", DType.FP32)})
    both = [k(0, "gpu", DType.FP32), k(1, "gpu", DType.FP32), cpu[2]]
    # adding w2 in fp32 (another 20 KB) overflows 30 KB; in fp16 (10 KB) it fits exactly
    assert not guard.apply(both, {2: k(2, "gpu", DType.FP32)})
    guard.undo(both, {2: k(2, "gpu", DType.FP32)})
    assert guard.apply(both, {2: k(2, "gpu", DType.FP16)})
    guard.undo(both, {2: k(2, "gpu", DType.FP16)})
    guard.undo(cpu, {0: both[0], 1: both[1]})
    assert guard.used == WeightGuard(model, cpu).used
