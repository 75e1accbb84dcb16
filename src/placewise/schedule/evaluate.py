"""One call that scores a placement: schedule, memory, bound, latency and throughput.

``evaluate(problem, placement)`` is what search calls for every candidate. It reuses the
problem's memoized costs, so moving one vertex only queries the costs touching it.

>>> from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
>>> from placewise.schedule.placement import Placement, Problem
>>> from placewise.schedule.testing import ToyCostModel, toy_machine
>>> from placewise.units import DType
>>> x = Tensor("x", (1000,), DType.FP32, role=Role.INPUT)
>>> y = Tensor("y", (1000,), DType.FP32, role=Role.OUTPUT)
>>> g = Graph.build("g", [x, y], [Op("a", OpKind.RELU, ("x",), ("y",))])
>>> m = toy_machine()
>>> prob = Problem(g, None, m, ToyCostModel(m))
>>> ev = evaluate(prob, Placement.uniform(["a"], "cpu", DType.FP32))
>>> ev.feasible, ev.lower_bound_s <= ev.makespan_s, ev.bottleneck_resource
(True, True, 'cpu')
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from placewise.schedule.bounds import LowerBound, schedule_lower_bound
from placewise.schedule.memory import MemoryReport, memory_report
from placewise.schedule.pipeline import Throughput, throughput
from placewise.schedule.placement import Placement, Problem
from placewise.schedule.simulate import Schedule, schedule

__all__ = ["Evaluation", "Objective", "evaluate"]


class Objective(Enum):
    LATENCY = "latency"  # one request's makespan
    THROUGHPUT = "throughput"  # steady-state requests/s with runs pipelined


@dataclass(frozen=True, slots=True)
class Evaluation:
    """Everything the scheduler says about one placement.

    ``lower_bound_s`` is the placement's own bound (``schedule_lower_bound``), never above
    its makespan; ``feasible`` is the memory verdict (a schedule always exists).
    """

    placement: Placement
    schedule: Schedule
    memory: MemoryReport
    lower_bound_s: float
    throughput_rps: float
    bottleneck_resource: str
    feasible: bool
    bound: LowerBound
    pipeline: Throughput

    @property
    def makespan_s(self) -> float:
        return self.schedule.makespan_s

    @property
    def exact(self) -> bool:
        return self.schedule.exact

    def score(self, objective: Objective | str) -> float:
        """A number to minimize: the makespan (latency) or the pipeline period
        (throughput); ``inf`` when the placement does not fit in memory."""
        obj = Objective(objective)
        if not self.feasible:
            return math.inf
        if obj is Objective.LATENCY:
            return self.schedule.makespan_s
        return self.pipeline.period_s


def evaluate(problem: Problem, placement: Placement, *, lanes: Mapping[str, int] | None = None,
             contention: bool = True, tiers: Mapping[str, str] | None = None) -> Evaluation:
    """Schedule ``placement``, account its memory, bound it and compute its throughput."""
    s = schedule(problem, placement, lanes=lanes, contention=contention)
    mem = memory_report(problem, s, tiers=tiers)
    b = schedule_lower_bound(s)
    tp = throughput(s, batch=problem.batch)
    return Evaluation(placement, s, mem, min(b.value_s, s.makespan_s), tp.requests_per_s,
                      tp.bottleneck_resource, mem.feasible, b, tp)
