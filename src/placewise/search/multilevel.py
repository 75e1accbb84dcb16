"""Multilevel coarsening for local search, in the manner of graph partitioners.

``coarsen(model)`` builds a few levels of clusters over the region DAG. Level 0 is the
vertices themselves; each further level merges pairs of clusters of the level below by
*heavy-edge matching*: clusters are visited in a seeded random order, and an unmatched one
is merged with the unmatched neighbour it exchanges the most bytes with (the tensors on
the edges between them) or, when none is free, with an unmatched *sibling* (a cluster fed
by the same producer: a fork's children), so long as the merged cluster stays within
``max_size`` vertices. Every level is a partition: it covers every vertex exactly once.

Local search (``placewise.search.local``) draws *cluster moves* from these levels: a whole
cluster to one device, its members' precisions kept where the device offers them. The walk
moves the coarsest clusters first and finer ones as it goes (``Levels.level_at``): moving a
fork's children, or a run of a layer, together avoids the crossings that make every
single-vertex step out of a placement look worse, which single-vertex moves cannot escape.

>>> from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
>>> from placewise.schedule.placement import Problem
>>> from placewise.schedule.testing import ToyCostModel, toy_machine
>>> from placewise.search.space import Model, SearchSpace
>>> from placewise.units import DType
>>> ts = [Tensor("x", (10,), DType.FP32, role=Role.INPUT)] + [
...     Tensor(f"t{i}", (10,), DType.FP32) for i in range(5)] + [
...     Tensor("y", (10,), DType.FP32, role=Role.OUTPUT)]
>>> ops = [Op("f", OpKind.RELU, ("x",), ("t0",))] + [
...     Op(f"c{i}", OpKind.RELU, ("t0",), (f"t{i}",)) for i in range(1, 5)] + [
...     Op("j", OpKind.ADD, ("t1", "t2", "t3", "t4"), ("y",))]
>>> m = toy_machine()
>>> lv = coarsen(Model(SearchSpace(Problem(Graph.build("g", ts, ops), None, m,
...                                        ToyCostModel(m)), [DType.FP32])), levels=2)
>>> [sorted(len(c) for c in level) for level in lv.clusters]
[[1, 1, 1, 1, 1, 1], [2, 2, 2], [2, 4]]
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from placewise.search.space import Model

__all__ = ["LEVELS", "MAX_SIZE", "Levels", "coarsen"]

LEVELS = 4  # levels above the vertices (clusters of up to 2, 4, 8, 16 vertices)
MAX_SIZE = 32  # vertices in a cluster, at most


@dataclass(frozen=True, slots=True)
class Levels:
    """Clusters per level (``clusters[0]``: one per vertex) and, per level, each vertex's
    cluster index (``of[level][vertex]``); ``reads``: vertices and edges read to build them
    (what the walk charges)."""

    clusters: tuple[tuple[tuple[int, ...], ...], ...]
    of: tuple[tuple[int, ...], ...]
    reads: int

    @property
    def depth(self) -> int:
        """The number of levels above the vertices."""
        return len(self.clusters) - 1

    def level_at(self, frac: float) -> int:
        """The level a walk ``frac`` (0..1) through its budget moves: the coarsest first,
        then finer ones, the vertices' own level (0) in the last share.

        >>> Levels(((), (), ()), ((), (), ()), 0).level_at(0.0), Levels(
        ...     ((), (), ()), ((), (), ()), 0).level_at(0.5)
        (2, 1)
        """
        d = self.depth
        return max(0, min(d, d - int(frac * (d + 1))))

    def cluster_of(self, level: int, v: int) -> tuple[int, ...]:
        """The vertices of ``v``'s cluster at ``level``."""
        return self.clusters[level][self.of[level][v]]


def coarsen(model: Model, *, levels: int = LEVELS, max_size: int = MAX_SIZE,
            seed: int = 0) -> Levels:
    """Build the levels (see the module docstring); deterministic for a seed."""
    p = model.problem
    ed = model.edges
    n = model.space.n
    rng = random.Random(seed)
    weight = [float(p.numel.get(t, 1)) for t in ed.tensor]
    clusters: list[tuple[tuple[int, ...], ...]] = [tuple((i,) for i in range(n))]
    ofs: list[tuple[int, ...]] = [tuple(range(n))]
    reads = n
    for _ in range(levels):
        cur = clusters[-1]
        of = ofs[-1]
        nc = len(cur)
        # the cluster graph: bytes between clusters, and each cluster's producers
        nbr: list[dict[int, float]] = [{} for _ in range(nc)]
        preds: list[dict[int, float]] = [{} for _ in range(nc)]
        succs: list[list[int]] = [[] for _ in range(nc)]
        for e in range(len(ed.src)):
            a, b = of[ed.src[e]], of[ed.dst[e]]
            if a == b:
                continue
            w = weight[e]
            nbr[a][b] = nbr[a].get(b, 0.0) + w
            nbr[b][a] = nbr[b].get(a, 0.0) + w
            if a not in preds[b]:
                succs[a].append(b)
            preds[b][a] = preds[b].get(a, 0.0) + w
        reads += nc + len(ed.src)
        order = list(range(nc))
        rng.shuffle(order)
        mate = [-1] * nc
        for c in order:
            if mate[c] >= 0:
                continue
            size = len(cur[c])
            best, best_w = -1, 0.0
            for d, w in nbr[c].items():
                if mate[d] < 0 and d != c and size + len(cur[d]) <= max_size and (
                        w > best_w or (w == best_w and 0 <= d < best)):
                    best, best_w = d, w
            if best < 0:  # a sibling: fed by one of c's producers (a fork's children)
                for q, w in preds[c].items():
                    for d in succs[q][:64]:
                        if d != c and mate[d] < 0 and size + len(cur[d]) <= max_size and (
                                w > best_w):
                            best, best_w = d, w
                    reads += min(64, len(succs[q]))
            if best >= 0:
                mate[c], mate[best] = best, c
            else:
                mate[c] = c
        new: list[tuple[int, ...]] = []
        index = [-1] * nc
        for c in range(nc):
            if index[c] >= 0:
                continue
            d = mate[c]
            index[c] = len(new)
            members = cur[c]
            if d != c:
                index[d] = len(new)
                members = members + cur[d]
            new.append(tuple(sorted(members)))
        if len(new) == nc:
            break  # nothing merged: no coarser level
        clusters.append(tuple(new))
        ofs.append(tuple(index[of[v]] for v in range(n)))
        reads += n
    return Levels(tuple(clusters), tuple(ofs), reads)
