"""The evaluator: one call that scores a placement — schedule, memory, bounds, latency
with the request hand-off, throughput with the executor's per-request work, bottleneck.

``evaluate(problem, placement)`` is what search calls for every candidate, and what the
plan stores (``placewise.plan.build_plan`` serialises an ``Evaluation``; it derives
nothing): the search ranks by exactly the number the plan reports
(``Evaluation.score``). It reuses the problem's memoized costs, so moving one vertex only
queries the costs touching it.

**Latency** is the makespan plus the request hand-off outside the schedule (the client
writing the inputs and reading the outputs on the host), when the cost model measured one
(``CostModel.request_cost``; ``None`` from a roofline model: latency = makespan). The
hand-off depends on the placement (a device sharing the host's cores changes it), so it
is part of the score. **Throughput** adds the executor's own work per pipelined request
(``CostModel.request_busy_s`` per used device, ``client_busy_s``; see
``placewise.schedule.pipeline``).

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

from placewise.cost.model import Cost
from placewise.schedule.bounds import LowerBound, schedule_lower_bound
from placewise.schedule.memory import MemoryReport, memory_report
from placewise.schedule.pipeline import RequestWork, Throughput, throughput
from placewise.schedule.placement import Placement, Problem
from placewise.schedule.simulate import Schedule, schedule

__all__ = ["Evaluation", "Objective", "evaluate", "request_floor_s", "request_work"]


class Objective(Enum):
    LATENCY = "latency"  # one request's makespan
    THROUGHPUT = "throughput"  # steady-state requests/s with runs pipelined


@dataclass(frozen=True, slots=True)
class Evaluation:
    """Everything the scheduler says about one placement.

    ``lower_bound_s`` is the placement's own makespan bound (``schedule_lower_bound``),
    never above its makespan; ``feasible`` is the memory verdict (a schedule always
    exists); ``request`` the request hand-off (None: not measured); ``pipeline`` the
    throughput with the per-request work ``work``.
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
    request: Cost | None = None
    work: RequestWork | None = None

    @property
    def makespan_s(self) -> float:
        return self.schedule.makespan_s

    @property
    def latency_s(self) -> float:
        """One request end to end: the makespan plus the request hand-off, if measured."""
        return self.schedule.makespan_s + (self.request.total_s if self.request else 0.0)

    @property
    def exact(self) -> bool:
        return self.schedule.exact

    def score(self, objective: Objective | str) -> float:
        """A number to minimize: the latency (``latency_s``) or the pipeline period
        (throughput); ``inf`` when the placement does not fit in memory."""
        obj = Objective(objective)
        if not self.feasible:
            return math.inf
        if obj is Objective.LATENCY:
            return self.latency_s
        return self.pipeline.period_s


def _used(problem: Problem, placement: Placement) -> list[str]:
    return sorted({a.device for a in placement.values()})


def request_work(problem: Problem, placement: Placement) -> RequestWork:
    """What the cost model measured of the executor's own work per pipelined request for
    ``placement``: each used device's worker (the host's always) and the client."""
    cm = problem.cost_model
    used = sorted({*_used(problem, placement), problem.host})
    busy = tuple((d, float(b)) for d in used if (b := cm.request_busy_s(d)))
    client = cm.client_busy_s() or 0.0
    cores = tuple((d, tuple(problem.machine.device(d).cores or ())) for d in used)
    return RequestWork(busy, float(client), cores)


def request_floor_s(problem: Problem) -> float:
    """The smallest request hand-off any placement can have (0 when not measured): a
    latency bound adds it to a makespan bound."""
    cm = problem.cost_model
    host = problem.host
    options = [cm.request_cost(host, ())]
    options += [cm.request_cost(host, (d,)) for d in problem.devices]
    costs = [c.total_s for c in options if c is not None]
    return min(costs) if costs else 0.0


def evaluate(problem: Problem, placement: Placement, *, lanes: Mapping[str, int] | None = None,
             contention: bool = True, tiers: Mapping[str, str] | None = None) -> Evaluation:
    """Schedule ``placement``, account its memory, bound it, add the request hand-off and
    compute its throughput with the per-request work."""
    s = schedule(problem, placement, lanes=lanes, contention=contention)
    mem = memory_report(problem, s, tiers=tiers)
    b = schedule_lower_bound(s)
    work = request_work(problem, placement)
    tp = throughput(s, batch=problem.batch, work=work)
    req = problem.cost_model.request_cost(problem.host, _used(problem, placement))
    return Evaluation(placement, s, mem, min(b.value_s, s.makespan_s), tp.requests_per_s,
                      tp.bottleneck_resource, mem.feasible, b, tp, req, work)
