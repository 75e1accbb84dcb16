"""Incremental evaluation in local search: the estimator's moves agree with a full
recompute, its bound holds against the scheduler, and search never returns worse than its
starts."""

from __future__ import annotations

import itertools
import math
import random

import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from placewise.errors import MemoryInfeasible
from placewise.schedule import Objective, evaluate
from placewise.search import plan_search
from placewise.search.local import Estimator, local_search
from placewise.search.result import Tracker
from placewise.search.space import Budget, Model, SearchSpace
from placewise.units import DType
from tests.search.helpers import task_problem, three_devices

F32 = [DType.FP32]
_FAST = settings(max_examples=12, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow])


def _model(kind: str, n: int, seed: int, dtypes: list[DType] | None = None) -> Model:
    try:
        return Model(SearchSpace(task_problem(kind, n, seed, three_devices()), dtypes))
    except MemoryInfeasible:
        reject()  # a generated vertex that fits on no device: not a search problem
        raise


def _same(est: Estimator, throughput: bool) -> None:
    """``est`` agrees with an estimator built from scratch on its placement."""
    full = Estimator(est.m, est.choice, throughput=throughput)
    est.flush()
    est._refresh()
    assert est.value() == pytest.approx(full.value(), rel=1e-9)
    assert est.score() == pytest.approx(full.score(), rel=1e-9)
    assert est.span == pytest.approx(full.span, rel=1e-9)
    assert est.fin == pytest.approx(full.fin, rel=1e-9)
    assert est.bl == pytest.approx(full.bl, rel=1e-9)
    assert est.load == pytest.approx(full.load, rel=1e-9, abs=1e-12)
    assert est.refs == full.refs


@_FAST
@given(kind=st.sampled_from(["layered", "fork-join", "chain"]), n=st.integers(3, 24),
       seed=st.integers(0, 10_000), throughput=st.booleans(), defer=st.sampled_from([0, 3]))
def test_proposed_moves_agree_with_a_full_recompute(kind: str, n: int, seed: int,
                                                    throughput: bool, defer: int) -> None:
    # defer=0: every score is exact; defer=3: moves off the longest path are re-timed in
    # batches, and the state agrees with a full recompute once flushed
    model = _model(kind, n, seed)
    sp = model.space
    rng = random.Random(seed)
    est = Estimator(model, [rng.randrange(len(c)) for c in sp.cands], throughput=throughput,
                    defer=defer)
    for _ in range(25):
        size = 1 if rng.random() < 0.6 else rng.randint(2, 4)
        mv = {v: rng.randrange(len(sp.cands[v]))
              for v in rng.sample(range(sp.n), min(size, sp.n))}
        mv = {v: k for v, k in mv.items() if k != est.choice[v]}
        if not mv:
            continue
        moved = list(est.choice)
        for v, k in mv.items():
            moved[v] = k
        truth = Estimator(model, moved, throughput=throughput).score()
        before = list(est.choice)
        limit = rng.choice([math.inf, est.score(), est.score() * (1 + rng.random() * 0.05),
                            est.score() * 0.97])
        exact = not est.pending
        score, applied = est.propose(mv, limit)
        if applied:
            # a deferred move that filled the batch returns the flushed (exact) score
            assert est.choice == moved and (score <= limit or (defer and not est.pending))
            if exact:
                assert est.pending or score == pytest.approx(truth, rel=1e-9)
        else:
            assert est.choice == before and score > limit
            if exact:  # a rejection is decided by the exact score or by a lower bound of it
                assert score <= truth * (1 + 1e-9)
        if not est.pending or rng.random() < 0.3:
            _same(est, throughput)
        if rng.random() < 0.3:  # the older apply/revert pair agrees too
            _val, undo = est.apply(mv) if not applied else est.apply(
                {v: before[v] for v in mv})
            _same(est, throughput)
            est.revert(undo)
            _same(est, throughput)


@_FAST
@given(kind=st.sampled_from(["layered", "fork-join"]), n=st.integers(2, 20),
       seed=st.integers(0, 10_000))
def test_the_estimate_bounds_the_scheduler(kind: str, n: int, seed: int) -> None:
    # one precision per tensor and one hop per route: every copy is counted once, so the
    # estimate (longest path, busiest exclusive resource) is a lower bound of the makespan
    model = _model(kind, n, seed, F32)
    sp = model.space
    prob = sp.problem
    rng = random.Random(seed)
    for _ in range(4):
        ch = [rng.randrange(len(c)) for c in sp.cands]
        est = Estimator(model, ch, throughput=False)
        ev = evaluate(prob, sp.placement(ch))
        assert est.value() <= ev.schedule.makespan_s * (1 + 1e-9)
        assert est.span == pytest.approx(model.makespan_s(ch), rel=1e-9)


@_FAST
@given(kind=st.sampled_from(["layered", "fork-join"]), n=st.integers(4, 30),
       seed=st.integers(0, 10_000), guided=st.sampled_from([0.0, 0.3, 1.0]))
def test_estimated_search_never_returns_worse_than_its_starts(kind: str, n: int, seed: int,
                                                              guided: float) -> None:
    model = _model(kind, n, seed)
    sp = model.space
    prob = sp.problem
    tr = Tracker(prob, Objective.LATENCY, Budget(0.05))
    rng = random.Random(seed)
    starts = [(f"s{i}", [rng.randrange(len(c)) for c in sp.cands]) for i in range(2)]
    keys = [tr.evaluate(sp.placement(ch))[0] for _, ch in starts]
    out = local_search(model, tr, starts, seed=seed, exact_max=0, check_every=5,
                       guided=guided)
    assert out.key <= min(keys)
    assert tr.evaluate(sp.placement(out.choice))[0] == out.key  # a scheduler score


def test_auto_keeps_heft_as_a_start_on_a_graph_searched_by_estimate() -> None:
    prob = task_problem("layered", 320, 1, three_devices(), edge_bytes=3e6)
    r = plan_search(prob, strategy="auto", time_limit_s=6.0, seed=0, dtypes=["fp32"])
    heft = [a.objective_s for a in r.alternatives if a.label == "heft"]
    assert heft, "HEFT was scored"
    assert r.objective_s <= min(heft)
    assert any(a.label == "local" for a in r.alternatives)


@_FAST
@given(kind=st.sampled_from(["layered", "fork-join", "chain"]), n=st.integers(2, 30),
       seed=st.integers(0, 10_000))
def test_coarsening_covers_every_vertex_once_per_level(kind: str, n: int, seed: int) -> None:
    from placewise.search.multilevel import coarsen

    model = _model(kind, n, seed, F32)
    lv = coarsen(model, levels=4, max_size=8, seed=seed)
    assert lv.clusters[0] == tuple((i,) for i in range(model.space.n))
    for level, clusters in enumerate(lv.clusters):
        members = sorted(v for c in clusters for v in c)
        assert members == list(range(model.space.n))  # a partition: each vertex once
        assert all(1 <= len(c) <= 8 for c in clusters)
        for ci, c in enumerate(clusters):
            assert all(lv.of[level][v] == ci for v in c)
        if level:  # each cluster is a union of clusters of the level below
            below = lv.of[level - 1]
            for c in clusters:
                assert {lv.cluster_of(level - 1, v) for v in c} == {
                    lv.clusters[level - 1][below[v]] for v in c}
                assert sum(len(x) for x in {lv.cluster_of(level - 1, v) for v in c}) == len(c)


@_FAST
@given(kind=st.sampled_from(["layered", "fork-join"]), n=st.integers(3, 30),
       seed=st.integers(0, 10_000))
def test_a_cluster_move_equals_its_vertex_moves_one_by_one(kind: str, n: int,
                                                          seed: int) -> None:
    import random as _random

    from placewise.search.local import _Moves
    from placewise.search.multilevel import coarsen

    model = _model(kind, n, seed)
    sp = model.space
    rng = _random.Random(seed)
    lv = coarsen(model, seed=seed)
    start = [rng.randrange(len(c)) for c in sp.cands]
    draw = _Moves(model, rng)
    for _ in range(6):
        level = rng.randint(0, lv.depth)
        _kind, mv = draw.cluster(list(start), lv, level)
        if not mv:
            continue
        whole = Estimator(model, start, throughput=False)
        score, applied = whole.propose(mv, math.inf)
        assert applied
        steps = Estimator(model, start, throughput=False)
        for v, k in mv.items():
            steps.propose({v: k}, math.inf)
        _same(whole, False)
        assert whole.choice == steps.choice
        assert score == pytest.approx(steps.score(), rel=1e-9)
        assert whole.value() == pytest.approx(steps.value(), rel=1e-9)
        # the cluster is one of the level's, moved to one device
        assert set(mv) <= set(lv.cluster_of(level, next(iter(mv))))
        assert len({sp.cand_dev[v][k] for v, k in mv.items()}) == 1
        start = whole.choice


@_FAST
@given(n=st.integers(4, 24), seed=st.integers(0, 10_000))
def test_the_window_bound_holds_on_fork_join(n: int, seed: int) -> None:
    # forks and joins are barriers: the windows between them follow each other, so their
    # busiest loads add up, and that sum still bounds the scheduler's makespan
    model = _model("fork-join", n, seed, F32)
    sp = model.space
    rng = random.Random(seed)
    for _ in range(4):
        ch = [rng.randrange(len(c)) for c in sp.cands]
        est = Estimator(model, ch, throughput=False)
        ev = evaluate(sp.problem, sp.placement(ch))
        assert est.window_value() <= ev.schedule.makespan_s * (1 + 1e-9)
        assert est.value() >= est.load_value(exclusive_only=True)


def _path_length(model: Model, ch: list[int], path: list[int]) -> float:
    """The contention-free length of ``path`` (first to last) under placement ``ch``."""
    ed = model.edges
    sp = model.space
    t = model.release(path[0], ch[path[0]])
    for a, b in itertools.pairwise(path):
        t += sp.cost_s[a][ch[a]]
        e = next(e for e in ed.e_out[a] if ed.dst[e] == b)
        t += model.delay(e, ch[a], ch[b])
    last = path[-1]
    return t + sp.cost_s[last][ch[last]] + model.tail(last, ch[last])


@_FAST
@given(kind=st.sampled_from(["layered", "fork-join", "chain"]), n=st.integers(2, 24),
       seed=st.integers(0, 10_000))
def test_the_critical_path_is_a_longest_path_while_moves_are_deferred(
        kind: str, n: int, seed: int) -> None:
    model = _model(kind, n, seed)
    sp = model.space
    rng = random.Random(seed)
    est = Estimator(model, [rng.randrange(len(c)) for c in sp.cands], throughput=False,
                    defer=8)
    for _ in range(12):
        v = rng.randrange(sp.n)
        est.propose({v: rng.randrange(len(sp.cands[v]))}, math.inf)
        path = est.critical_path()[::-1]  # last first
        succ = {(model.edges.src[e], model.edges.dst[e]) for e in range(len(model.edges.src))}
        assert all((a, b) in succ for a, b in itertools.pairwise(path))
        assert _path_length(model, est.choice, path) == pytest.approx(
            model.makespan_s(est.choice), rel=1e-9)


@_FAST
@given(n=st.integers(8, 30), width=st.integers(1, 4), seed=st.integers(0, 10_000),
       defer=st.sampled_from([0, 3]))
def test_bottom_levels_anchored_at_barriers_agree_with_a_full_recompute(
        n: int, width: int, seed: int, defer: int) -> None:
    # a fork-join of several stages: bottom levels are kept relative to the next fork or
    # join (``_anchors``), and still agree with a rebuild after every move
    from placewise.graph.taskgraph import generate, parse_taskgraph
    from placewise.schedule import Problem
    from placewise.schedule.testing import ToyCostModel
    from placewise.search.estimate import _anchors, _windows

    m = three_devices()
    rates = {d: m.device(d).peak(DType.FP32) for d in m.device_names}
    g = parse_taskgraph(generate("fork-join", n, seed=seed, device_flops_per_s=rates,
                                 mean_edge_bytes=3e7, mean_flops=1e9, width=width))
    try:
        model = Model(SearchSpace(Problem(g, None, m, ToyCostModel(m)), None))
    except MemoryInfeasible:
        reject()
    sp = model.space
    assert len(_anchors(model, _windows(model)[0])[1]) >= 2
    rng = random.Random(seed)
    est = Estimator(model, [rng.randrange(len(c)) for c in sp.cands], throughput=False,
                    defer=defer)
    for _ in range(20):
        size = 1 if rng.random() < 0.6 else rng.randint(2, 4)
        mv = {v: rng.randrange(len(sp.cands[v]))
              for v in rng.sample(range(sp.n), min(size, sp.n))}
        est.propose({v: k for v, k in mv.items() if k != est.choice[v]},
                    rng.choice([math.inf, est.score()]))
        _same(est, False)
        path = est.critical_path()[::-1]
        assert _path_length(model, est.choice, path) == pytest.approx(
            model.makespan_s(est.choice), rel=1e-9)
