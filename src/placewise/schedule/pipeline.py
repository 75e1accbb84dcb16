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

**Per-request work** (``RequestWork``: what a calibrated cost model measured of the
executor's own work per pipelined request, outside the schedule's tasks) adds to the
occupancy: each used device's worker time (the host's always) to that device and to the
``core:N`` resources of its cores; and since the client process is not pinned, its time
counts against every core of the used devices together (``ALL_CORES``: the devices' work
on their cores plus the client's, over the number of cores), which binds when every core
is busy. The evaluator (``placewise.schedule.evaluate``) builds it from the cost model, so
the search ranks by the period the plan reports.

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

__all__ = ["ALL_CORES", "RequestWork", "Throughput", "throughput"]

#: the pseudo-resource of every core of the used devices together (see the module docstring)
ALL_CORES = "cores (all)"


@dataclass(frozen=True, slots=True)
class RequestWork:
    """The executor's own work per pipelined request beyond the schedule's tasks:
    ``busy_s``, device -> its worker's seconds per request (devices with none left out);
    ``client_s``, the client process's seconds per request (0: not measured);
    ``cores``, every used device (the host included) -> the CPU cores it runs on."""

    busy_s: tuple[tuple[str, float], ...] = ()
    client_s: float = 0.0
    cores: tuple[tuple[str, tuple[int, ...]], ...] = ()

    @property
    def empty(self) -> bool:
        return not self.busy_s and not self.client_s


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


def throughput(schedule: Schedule, *, batch: int = 1, work: RequestWork | None = None
               ) -> Throughput:
    """The pipelined throughput of ``schedule``'s placement, with the per-request ``work``
    when given (see the module docstring)."""
    occ: dict[str, float] = {}
    for r in schedule.resources:
        occ[r.name] = r.work_s / r.lanes if r.exclusive else min(r.work_s, schedule.makespan_s)
    occ.update(schedule.core_occupancy_s())
    if work is not None and not work.empty:
        cores = dict(work.cores)
        for d, b in work.busy_s:
            occ[d] = occ.get(d, 0.0) + b
            for c in cores.get(d, ()):
                if f"core:{c}" in occ:
                    occ[f"core:{c}"] += b
        every = sorted({c for cs in cores.values() for c in cs})
        if every:
            total = sum(occ.get(d, 0.0) * len(cs) for d, cs in cores.items())
            occ[ALL_CORES] = (total + work.client_s) / len(every)
    ranked = tuple(sorted(occ.items(), key=lambda kv: (-kv[1], kv[0])))
    if not ranked or ranked[0][1] <= 0.0:
        return Throughput(math.inf, math.inf, 0.0, "", ranked, batch)
    name, period = ranked[0]
    return Throughput(batch / period, 1.0 / period, period, name, ranked, batch)
