"""Exhaustive enumeration: every placement of a small space, each scored by the scheduler.

The reference the other strategies are tested against, and what ``auto`` uses when the
space is small enough to finish. Placements are enumerated in lexicographic order of the
candidate indexes; one is skipped (counted as an estimate, never evaluated) only when a
valid lower bound of its objective already reaches the best one found that fits: the
contention-free longest path for latency (see ``placewise.search.dp``), the busiest
device's compute time over its lanes for throughput. Skipping never changes the result.

>>> from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
>>> from placewise.schedule import Objective
>>> from placewise.schedule.placement import Problem
>>> from placewise.schedule.testing import ToyCostModel, toy_machine
>>> from placewise.search.result import Tracker
>>> from placewise.search.space import Budget, Model, SearchSpace
>>> from placewise.units import DType
>>> x = Tensor("x", (10,), DType.FP32, role=Role.INPUT)
>>> y = Tensor("y", (10,), DType.FP32, role=Role.OUTPUT)
>>> g = Graph.build("g", [x, y], [Op("a", OpKind.RELU, ("x",), ("y",))])
>>> m = toy_machine()
>>> prob = Problem(g, None, m, ToyCostModel(m))
>>> tr = Tracker(prob, Objective.LATENCY, Budget(10.0))
>>> out = exhaustive_search(Model(SearchSpace(prob)), tr)
>>> out.complete, out.enumerated
(True, 3)
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from placewise.schedule.evaluate import Objective
from placewise.search.result import Tracker
from placewise.search.space import Model

__all__ = ["ExhaustiveOutcome", "exhaustive_search"]


@dataclass(frozen=True, slots=True)
class ExhaustiveOutcome:
    """``choice``: the best placement's candidate indexes (``None`` if nothing was
    evaluated); ``complete``: every placement was enumerated (the result is the optimum of
    the space under the scheduler); ``enumerated`` / ``skipped`` counts."""

    choice: tuple[int, ...] | None
    complete: bool
    enumerated: int
    skipped: int


def exhaustive_search(model: Model, tracker: Tracker, *, limit: int | None = None
                      ) -> ExhaustiveOutcome:
    """Enumerate the space (at most ``limit`` placements, and while the budget lasts)."""
    sp = model.space
    throughput = tracker.objective is Objective.THROUGHPUT
    best_key = (2, float("inf"))
    best: tuple[int, ...] | None = None
    enumerated = skipped = 0
    complete = True
    lanes = sp.lanes
    ndev = len(sp.devices)
    for choice in itertools.product(*(range(len(c)) for c in sp.cands)):
        if (limit is not None and enumerated >= limit) or tracker.budget.exhausted():
            complete = False
            break
        enumerated += 1
        if best_key[0] == 0:
            if throughput:
                work = [0.0] * ndev
                for i, k in enumerate(choice):
                    work[sp.cand_dev[i][k]] += sp.cost_s[i][k]
                bound = max(w / lanes[d] for d, w in enumerate(work))
            else:
                bound = model.makespan_s(choice)
            tracker.estimates += 1
            if bound >= best_key[1]:
                skipped += 1
                continue
        key, _ = tracker.evaluate(sp.placement(choice))
        if key < best_key:
            best_key, best = key, choice
    return ExhaustiveOutcome(best, complete, enumerated, skipped)
