"""Steady-state throughput when requests are pipelined through a placement.

With many runs in flight, a new run can start every ``period_s`` seconds, where the period
is the busiest resource's occupancy per run: an exclusive resource (a device's lanes, a
link direction) is occupied for its tasks' uncontended work divided by its lanes; a CPU
core that several devices share (``core:N``, see ``placewise.schedule.simulate``) for the
sum of those devices' work on it over their lanes, since one device holds it at a time.
This is the classical resource bound: it is reached by an acyclic task graph given enough
runs in flight (and enough memory to hold them, which is not checked here), and no
pipelining does better under the model.

A shared resource of bandwidth ``C`` (a memory controller) is occupied, per task, for
``min(bytes / C, T)`` where ``T`` is the task's uncontended duration: a task cannot
occupy the controller longer than it runs (a task whose demand exceeds ``C`` is served
partly from caches and is never slowed by its own traffic, see
``placewise.schedule.simulate``). Its occupancy per run is the sum over its tasks
(``ResourceUse.work_s``), and never more than the makespan (runs one after another reach
one run per makespan). This is an estimate rather than a strict bound: when tasks whose
demand exceeds ``C`` overlap others, the model lets them share more than ``C``.

Latency (one run's makespan) and throughput are different objectives: pipelining raises
throughput while one request still takes the makespan.

Each run processes ``batch`` requests: ``requests_per_s = batch / period_s``.

>>> from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
>>> from placewise.schedule.placement import Assignment, Placement, Problem
>>> from placewise.schedule.simulate import schedule
>>> from placewise.schedule.testing import ToyCostModel, toy_machine
>>> from placewise.units import DType
>>> x = Tensor("x", (10,), DType.FP32, role=Role.INPUT)
>>> h = Tensor("h", (10,), DType.FP32)
>>> y = Tensor("y", (10,), DType.FP32, role=Role.OUTPUT)
>>> g = Graph.build("g", [x, h, y], [Op("a", OpKind.RELU, ("x",), ("h",)),
...                                  Op("b", OpKind.RELU, ("h",), ("y",))])
>>> m = toy_machine()
>>> cm = ToyCostModel(m, {("a", "cpu"): 2.0, ("b", "gpu"): 1.0})
>>> s = schedule(Problem(g, None, m, cm), Placement.of({"a": Assignment("cpu", DType.FP32),
...                                                     "b": Assignment("gpu", DType.FP32)}))
>>> tp = throughput(s)
>>> tp.bottleneck_resource, tp.period_s, round(s.makespan_s, 3)
('cpu', 2.0, 3.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from placewise.schedule.simulate import Schedule

__all__ = ["Throughput", "throughput"]


@dataclass(frozen=True, slots=True)
class Throughput:
    """Steady-state rate; ``occupancy_s`` lists every resource's occupancy per run,
    busiest first (``period_s`` is the first one)."""

    requests_per_s: float
    runs_per_s: float
    period_s: float
    bottleneck_resource: str
    occupancy_s: tuple[tuple[str, float], ...]
    batch: int


def throughput(schedule: Schedule, *, batch: int = 1) -> Throughput:
    """The pipelined throughput of ``schedule``'s placement (see the module docstring)."""
    occ: dict[str, float] = {}
    for r in schedule.resources:
        occ[r.name] = r.work_s / r.lanes if r.exclusive else min(r.work_s, schedule.makespan_s)
    occ.update(schedule.core_occupancy_s())
    ranked = tuple(sorted(occ.items(), key=lambda kv: (-kv[1], kv[0])))
    if not ranked or ranked[0][1] <= 0.0:
        return Throughput(math.inf, math.inf, 0.0, "", ranked, batch)
    name, period = ranked[0]
    return Throughput(batch / period, 1.0 / period, period, name, ranked, batch)
