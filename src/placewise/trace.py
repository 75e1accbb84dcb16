"""A plan's schedule as a Chrome / Perfetto JSON trace (open it at https://ui.perfetto.dev).

``to_chrome_trace(plan)`` returns the trace object (``{"traceEvents": [...], ...}``):

- one *process* per device (its compute lanes, and the memory counters of its tiers), one
  for the links and one for shared resources, named with ``process_name`` metadata;
- one *track* (thread) per resource lane, named with ``thread_name`` metadata
  (``compute lane 0``, ``link:pcie-gpu0:fwd``...);
- a complete event (``"ph": "X"``) per task, ``ts`` and ``dur`` in microseconds, rounded
  to the nanosecond in a way that never makes two events of a track overlap; its ``args``
  hold the predicted terms, the interval, the source, bottleneck, bytes and dependencies;
- a flow arrow (``"ph": "s"`` on the dependency, ``"ph": "f"`` with ``"bp": "e"`` on the
  task, sharing an ``id``) for every dependency, bound to the two slices by their start;
- a counter (``"ph": "C"``) per memory tier (and per pool of tiers that are one memory),
  from the plan's decimated timeline, in bytes.

Everything comes from the plan file; the output is deterministic.

>>> from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
>>> from placewise.plan import build_plan
>>> from placewise.schedule import Placement, Problem, evaluate
>>> from placewise.schedule.testing import ToyCostModel, toy_machine
>>> from placewise.units import DType
>>> x = Tensor("x", (1000,), DType.FP32, role=Role.INPUT)
>>> y = Tensor("y", (1000,), DType.FP32, role=Role.OUTPUT)
>>> g = Graph.build("g", [x, y], [Op("a", OpKind.RELU, ("x",), ("y",))])
>>> m = toy_machine()
>>> prob = Problem(g, None, m, ToyCostModel(m))
>>> plan = build_plan(prob, evaluate(prob, Placement.uniform(["a"], "gpu", DType.FP32)),
...                   model_ref="g.json")
>>> trace = to_chrome_trace(plan)
>>> [(e["name"], e["ts"], e["dur"]) for e in trace["traceEvents"] if e["ph"] == "X"]
[('a', 5.0, 1.8), ('xfer:x:cpu->gpu', 0.0, 5.0), ('xfer:y:gpu->cpu', 6.8, 5.0)]
"""

from __future__ import annotations

from typing import Any

from placewise.cost.model import Term
from placewise.plan import Plan, TaskRecord
from placewise.schedule.simulate import ResourceKind

__all__ = ["TRACE_CATEGORY", "to_chrome_trace"]

#: the category of every task slice and flow event (flows bind to slices of their category)
TRACE_CATEGORY = "task"


def _ns(t_s: float) -> int:
    """Seconds to integer nanoseconds (monotone, so order and non-overlap survive)."""
    return round(t_s * 1e9)


def _us(ns: int) -> float:
    """Integer nanoseconds to microseconds with at most three decimals."""
    return ns / 1000


def _args(t: TaskRecord, critical: set[str]) -> dict[str, Any]:
    args: dict[str, Any] = {
        "kind": t.kind.value, "start_s": t.start_s, "end_s": t.end_s,
        "duration_s": t.duration_s, "low_s": t.low_s, "high_s": t.high_s,
        "source": t.source.value, "bottleneck": t.bottleneck.value,
        "critical_path": t.name in critical,
    }
    for term in Term:
        v = t.terms_s.get(term)
        if v:
            args[f"{term.value}_s"] = v
    for k in ("vertex", "tensor", "link", "dst_device", "src_rep", "dst_rep"):
        v = getattr(t, k)
        if v is not None:
            args[k] = v
    if t.nbytes:
        args["bytes"] = t.nbytes
    if t.deps:
        args["deps"] = list(t.deps)
    return args


def to_chrome_trace(plan: Plan) -> dict[str, Any]:
    """The Chrome/Perfetto trace of ``plan`` (see the module docstring)."""
    devices = [d.name for d in plan.machine.devices]
    pid_of_device = {d: i + 1 for i, d in enumerate(devices)}
    links_pid = len(devices) + 1
    shared_pid = len(devices) + 2
    pools_pid = len(devices) + 3
    kinds = {d.name: d.kind for d in plan.machine.devices}
    meta: list[dict[str, Any]] = []

    def process(pid: int, name: str, sort: int) -> None:
        meta.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                     "args": {"name": name}})
        meta.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                     "args": {"sort_index": sort}})

    for d in devices:
        process(pid_of_device[d], f"{d} ({kinds[d]})", pid_of_device[d])
    # tracks: (resource, lane) -> (pid, tid)
    track: dict[tuple[str, int], tuple[int, int]] = {}
    next_tid: dict[int, int] = {}
    lanes_used: dict[str, set[int]] = {}
    for t in plan.schedule.tasks:
        lanes_used.setdefault(t.resource, set()).add(t.lane)
    have_links = have_shared = False
    for r in plan.schedule.resources:
        if r.kind is ResourceKind.COMPUTE and r.device in pid_of_device:
            pid = pid_of_device[r.device]
            label = "compute lane"
        elif r.kind is ResourceKind.LINK:
            pid, label, have_links = links_pid, r.name, True
        else:
            pid, label, have_shared = shared_pid, r.name, True
        for lane in sorted(lanes_used.get(r.name, set())):
            tid = next_tid.get(pid, 1)
            next_tid[pid] = tid + 1
            track[(r.name, lane)] = (pid, tid)
            name = f"{label} {lane}" if r.kind is ResourceKind.COMPUTE else (
                label if r.lanes == 1 and lane == 0 else f"{label} lane {lane}")
            meta.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                         "args": {"name": name}})
            meta.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                         "args": {"sort_index": tid}})
    if have_links:
        process(links_pid, "links", links_pid)
    if have_shared:
        process(shared_pid, "shared resources", shared_pid)
    critical = set(plan.schedule.critical_path)
    slices: list[dict[str, Any]] = []
    start_ns: dict[str, int] = {}
    where: dict[str, tuple[int, int]] = {}
    for t in plan.schedule.tasks:
        pid, tid = track[(t.resource, t.lane)]
        a, b = _ns(t.start_s), _ns(t.end_s)
        start_ns[t.name] = a
        where[t.name] = (pid, tid)
        slices.append({"ph": "X", "name": t.name, "cat": TRACE_CATEGORY, "pid": pid,
                       "tid": tid, "ts": _us(a), "dur": _us(max(0, b - a)),
                       "args": _args(t, critical)})
    slices.sort(key=lambda e: (e["pid"], e["tid"], e["ts"], e["name"]))
    flows: list[dict[str, Any]] = []
    flow_id = 0
    for t in plan.schedule.tasks:
        for dep in t.deps:
            flow_id += 1
            sp, st = where[dep]
            tp, tt = where[t.name]
            flows.append({"ph": "s", "name": "dependency", "cat": TRACE_CATEGORY,
                          "id": flow_id, "pid": sp, "tid": st, "ts": _us(start_ns[dep])})
            flows.append({"ph": "f", "bp": "e", "name": "dependency", "cat": TRACE_CATEGORY,
                          "id": flow_id, "pid": tp, "tid": tt, "ts": _us(start_ns[t.name])})
    counters: list[dict[str, Any]] = []
    for d in devices:
        for tier, u in sorted(plan.memory.devices.get(d, {}).items()):
            for ts, level in u.timeline:
                counters.append({"ph": "C", "name": f"memory {tier}", "pid": pid_of_device[d],
                                 "tid": 0, "ts": _us(_ns(ts)), "args": {"bytes": level}})
    if plan.memory.pools:
        process(pools_pid, "memory pools", pools_pid)
        for p in plan.memory.pools:
            label = "+".join(f"{d}/{t}" for d, t in p.members)
            for ts, level in p.timeline:
                counters.append({"ph": "C", "name": f"memory {p.resource} ({label})",
                                 "pid": pools_pid, "tid": 0, "ts": _us(_ns(ts)),
                                 "args": {"bytes": level}})
    return {
        "traceEvents": [*meta, *slices, *flows, *counters],
        "displayTimeUnit": "ns",
        "otherData": {
            "model": plan.model, "machine": plan.machine.name, "objective": plan.objective.value,
            "strategy": plan.strategy, "makespan_s": plan.makespan_s, "exact": plan.exact,
            "lower_bound_s": plan.lower_bound_s,
        },
    }
