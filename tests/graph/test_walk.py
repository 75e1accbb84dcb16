"""graph/walk: the one stable topological order and the one last-use analysis."""

from __future__ import annotations

import random

import pytest

from placewise.graph.walk import last_use, topological_order


def _random_dag(rng: random.Random, n: int, p: float) -> list[set[int]]:
    rank = list(range(n))
    rng.shuffle(rank)
    return [{a for a in range(n) if rank[a] < rank[b] and rng.random() < p} for b in range(n)]


@pytest.mark.parametrize("seed", range(20))
def test_order_is_topological_and_greedy_by_priority(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 40)
    preds = _random_dag(rng, n, 0.1)
    priority = rng.sample(range(10 * n), n)
    order = topological_order(preds, priority)
    assert sorted(order) == list(range(n))
    at = {v: i for i, v in enumerate(order)}
    assert all(at[p] < at[v] for v in range(n) for p in preds[v])
    # each pick is the smallest-priority node whose predecessors are all placed
    placed: set[int] = set()
    for v in order:
        ready = [w for w in range(n) if w not in placed and preds[w] <= placed]
        assert priority[v] == min(priority[w] for w in ready)
        placed.add(v)
    depth = topological_order(preds, depth_first=True)
    at = {v: i for i, v in enumerate(depth)}
    assert sorted(depth) == list(range(n))
    assert all(at[p] < at[v] for v in range(n) for p in preds[v])


def test_an_ordered_graph_keeps_its_order_and_a_cycle_is_left_out() -> None:
    preds = [set(), {0}, {0, 1}, {2}]
    assert topological_order(preds) == [0, 1, 2, 3]
    # 1 -> 2 -> 1 is a cycle; 3 follows it; 0 and 4 are free
    cyc = [set(), {2}, {1}, {2}, {0}]
    for depth_first in (False, True):
        assert sorted(topological_order(cyc, depth_first=depth_first)) == [0, 4]


def test_last_use_is_the_last_reader_or_the_first_writer() -> None:
    reads = [[], ["a"], ["a", "b"], []]
    writes = [["a"], ["b", "c"], ["d"], ["a"]]
    assert last_use(reads, writes) == {"a": 2, "b": 2, "c": 1, "d": 2}
    assert last_use(reads) == {"a": 2, "b": 2}
