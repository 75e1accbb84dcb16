"""Lower bounds on the makespan: of any placement of a problem, and of one schedule's.

Both are *valid* bounds of the scheduler's model: no schedule the scheduler returns is
shorter (tests check it on random DAGs and machines).

- ``problem_lower_bound``: before placing anything. The critical path of the region DAG
  with each vertex at its cheapest feasible cost (transfers ignored); the total cheapest
  work spread over every lane of the machine; per device, the cheapest work of the
  vertices that can run nowhere else, over that device's lanes; and, per CPU core that
  several devices share (``Device.cores``), the cheapest work over lanes of the vertices
  that can only run on devices holding that core (``core:N``: one device at a time).
- ``schedule_lower_bound``: for a placement, from its schedule's tasks. The critical path
  through compute, transfer and conversion tasks at their uncontended durations (no
  resource conflicts, no contention); each exclusive resource's uncontended work over its
  lanes; each shared resource's bytes over the most it can deliver under the model,
  ``max(bandwidth, largest task demand)`` (``ResourceUse.busy_s``: the active tasks never
  share more than ``max(bandwidth, largest active demand)``, see
  ``placewise.schedule.simulate``; so no task counts for longer than it runs, even one
  whose demand exceeds the bandwidth; only when contention was modelled: a schedule made
  with ``contention=False``, ``exact=False``, lets its tasks draw any bandwidth at once, so
  that term would bound the contended model, not that schedule); each CPU core that tasks
  of several devices ran on, the sum of those devices' work over their lanes (a core is
  held by one device at a time, so work on ``cpu01`` counts against both ``core:0`` and
  ``core:1``, together with that of ``cpu0`` and ``cpu1``). The gap to the makespan is
  what resource conflicts and contention cost.

>>> from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
>>> from placewise.schedule.placement import Placement, Problem
>>> from placewise.schedule.simulate import schedule
>>> from placewise.schedule.testing import ToyCostModel, toy_machine
>>> from placewise.units import DType
>>> x = Tensor("x", (1000,), DType.FP32, role=Role.INPUT)
>>> ys = [Tensor(f"y{i}", (1000,), DType.FP32, role=Role.OUTPUT) for i in range(3)]
>>> ops = [Op(f"o{i}", OpKind.RELU, ("x",), (f"y{i}",)) for i in range(3)]
>>> g = Graph.build("g", [x, *ys], ops)
>>> m = toy_machine()
>>> prob = Problem(g, None, m, ToyCostModel(m, {(f"o{i}", d): 1.0 for i in range(3)
...                                              for d in ("cpu", "gpu")}))
>>> s = schedule(prob, Placement.uniform(["o0", "o1", "o2"], "cpu", DType.FP32))
>>> b = schedule_lower_bound(s)
>>> b.value_s, b.binding, s.makespan_s
(3.0, 'cpu', 3.0)
>>> problem_lower_bound(prob).value_s
1.5
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from placewise.errors import Infeasible
from placewise.records import dataclass_record
from placewise.schedule.placement import Problem, feasible_assignments, pruned_assignments
from placewise.schedule.simulate import Schedule, core_name

__all__ = ["LowerBound", "problem_lower_bound", "schedule_lower_bound"]


@dataclass_record
@dataclass(frozen=True, slots=True)
class LowerBound:
    """``value_s = max(critical_path_s, work_s)``; ``binding`` names what sets it
    ("critical path" or a resource/device); ``per_resource_s`` lists every resource's work
    bound, largest first; ``critical_path`` the vertex/task names along that path."""

    value_s: float
    critical_path_s: float
    work_s: float
    binding: str
    per_resource_s: tuple[tuple[str, float], ...]
    critical_path: tuple[str, ...]


def _finish(cp_s: float, path: list[str], per: dict[str, float]) -> LowerBound:
    ranked = sorted(per.items(), key=lambda kv: (-kv[1], kv[0]))
    work_s, busiest = (ranked[0][1], ranked[0][0]) if ranked else (0.0, "")
    binding = "critical path" if cp_s >= work_s else busiest
    return LowerBound(max(cp_s, work_s), cp_s, work_s, binding, tuple(ranked), tuple(path))


def _longest_path(n: int, dur: list[float], preds: list[list[int]] | tuple[tuple[int, ...], ...]
                  ) -> tuple[float, list[int]]:
    """Longest path in a DAG whose nodes 0..n-1 are in topological order."""
    fin = [0.0] * n
    via = [-1] * n
    for i in range(n):
        best, arg = 0.0, -1
        for q in preds[i]:
            if fin[q] > best or arg < 0:
                best, arg = fin[q], q
        fin[i] = best + dur[i]
        via[i] = arg
    if n == 0:
        return 0.0, []
    last = max(range(n), key=lambda i: (fin[i], -i))
    path = [last]
    while via[path[-1]] >= 0:
        path.append(via[path[-1]])
    path.reverse()
    return fin[last], path


def problem_lower_bound(problem: Problem, *, lanes: Mapping[str, int] | None = None
                        ) -> LowerBound:
    """A bound on the makespan of every placement of ``problem`` (same ``lanes``).

    Raises ``Infeasible`` when a vertex has no feasible assignment at all.
    """
    m = problem.machine
    lane_of = {d.name: int((lanes or {}).get(d.name, d.lanes)) for d in m.devices}
    n = len(problem.vertices)
    cheapest = [0.0] * n
    only: dict[str, float] = {d: 0.0 for d in problem.devices}
    cores_of = {d.name: set(d.cores or ()) for d in m.devices}
    users: dict[int, int] = {}
    for cs in cores_of.values():
        for c in cs:
            users[c] = users.get(c, 0) + 1
    on_core: dict[int, float] = {c: 0.0 for c, k in users.items() if k > 1}
    for v in problem.vertices:
        fa = feasible_assignments(problem, v.index)
        if not fa:
            reasons = "; ".join(p.reason for p in pruned_assignments(problem, v.index)[:3])
            raise Infeasible(f"vertex {v.name!r} can run nowhere: {reasons}")
        cheapest[v.index] = min(problem.cost(v.index, a.device, a.dtype).total_s for a in fa)
        devs = {a.device for a in fa}
        if len(devs) == 1:
            only[next(iter(devs))] += cheapest[v.index]
        for c in on_core:
            if all(c in cores_of[d] for d in devs):
                on_core[c] += min(problem.cost(v.index, a.device, a.dtype).total_s
                                  / lane_of[a.device] for a in fa)
    cp_s, path = _longest_path(n, cheapest, problem.preds)
    per = {"all devices": sum(cheapest) / max(1, sum(lane_of.values()))}
    for d, w in only.items():
        if w > 0:
            per[d] = w / lane_of[d]
    for c, w in sorted(on_core.items()):
        if w > 0:
            per[core_name(c)] = w
    return _finish(cp_s, [problem.vertices[i].name for i in path], per)


def schedule_lower_bound(schedule: Schedule) -> LowerBound:
    """A bound on the makespan of ``schedule``'s placement, from its own tasks."""
    tl = schedule.timeline  # task ids are in topological order
    cp_s, path = _longest_path(len(tl.name), tl.dur, tl.preds)
    per: dict[str, float] = {}
    for r in schedule.resources:
        if r.exclusive:
            per[r.name] = r.work_s / r.lanes
        elif schedule.exact:  # contention switched off: sharing costs that schedule nothing
            per[r.name] = r.busy_s
    per.update(schedule.core_occupancy_s())
    return _finish(cp_s, [tl.name[i] for i in path], per)
