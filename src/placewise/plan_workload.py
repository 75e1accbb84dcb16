"""What a workload plan's schedule says of each of its models (``graph.workload``).

A workload plan schedules one request of every model arriving at once, their engines side by
side on the shared machine (the evaluator's contention rules apply between them as within one
model). ``workload_json`` splits that schedule by model: each task belongs to the model whose
tensors it computes, converts or moves (``vertex_members``, ``task_member``); a model's
latency is the end of its last task; its busy seconds per device are its compute and
conversion tasks' durations; its contention is what shared bandwidth added to them. With a
rate for every model, each device's utilization at those rates is the sum over models of
``rate x busy / batch``: the device is saturated at 1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from placewise.graph.workload import Member, Stream, member_of, members_by_name, workload_models
from placewise.schedule.placement import Problem
from placewise.schedule.simulate import Schedule, TaskKind

__all__ = ["task_member", "vertex_members", "workload_json"]


def vertex_members(problem: Problem) -> dict[str, str]:
    """Vertex name -> the model it belongs to ({} for a plan of one model)."""
    by_op = members_by_name(problem.graph)
    if not by_op:
        return {}
    out: dict[str, str] = {}
    for v in problem.vertices:
        for op in v.ops:
            m = by_op.get(op.name)
            if m is not None:
                out[v.name] = m
                break
    return out


def task_member(kind: TaskKind, name: str, vertex: str | None, tensor: str | None,
                vertices: Mapping[str, str]) -> str | None:
    """The model a scheduled task belongs to: a compute task its vertex's, a transfer or
    conversion its tensor's."""
    if kind is TaskKind.COMPUTE:
        return vertices.get(vertex or name)
    return member_of(tensor) if tensor else None


def workload_json(problem: Problem, schedule: Schedule, members: Sequence[Member],
                  streams: Mapping[str, Stream] | None = None) -> dict[str, Any]:
    """The plan's ``workload`` record (``plan_records.WorkloadRecord``) of ``schedule``."""
    streams = streams or {}
    vertices = vertex_members(problem)
    io = workload_models(problem.graph)
    ends: dict[str, float] = {}
    busy: dict[str, dict[str, float]] = {m.name: {} for m in members}
    contention: dict[str, float] = {m.name: 0.0 for m in members}
    for t in schedule.tasks:
        m = task_member(t.kind, t.name, t.vertex, t.tensor, vertices)
        if m is None or m not in busy:
            continue
        ends[m] = max(ends.get(m, 0.0), t.end_s)
        contention[m] += t.contention_s
        if t.kind is not TaskKind.TRANSFER:
            busy[m][t.device] = busy[m].get(t.device, 0.0) + t.duration_s
    ops = {m.name: 0 for m in members}
    devices: dict[str, set[str]] = {m.name: set() for m in members}
    assign = {v.name: v for v in problem.vertices}
    for t in schedule.tasks:
        if t.kind is TaskKind.COMPUTE:
            m = vertices.get(t.vertex or t.name)
            if m in devices:
                devices[m].add(t.device)
                ops[m] += len(assign[t.vertex or t.name].ops)
    models = []
    for mem in members:
        st = streams.get(mem.name, Stream())
        models.append({
            "name": mem.name, "ref": mem.ref, "inputs": io[mem.name]["inputs"],
            "outputs": io[mem.name]["outputs"], "ops": ops[mem.name],
            "rate_per_s": st.rate_per_s, "slo_p99_s": st.slo_p99_s, "priority": st.priority,
            "latency_s": ends.get(mem.name, 0.0),
            "busy_s": dict(sorted(busy[mem.name].items())),
            "contention_s": contention[mem.name],
            "devices": sorted(devices[mem.name])})
    util: dict[str, float] | None = None
    if members and all(streams.get(m.name, Stream()).rate_per_s for m in members):
        per: dict[str, float] = {}
        for mem in members:
            rate = streams[mem.name].rate_per_s or 0.0
            for d, b in busy[mem.name].items():
                per[d] = per.get(d, 0.0) + rate * b / max(problem.batch, 1)
        util = dict(sorted(per.items()))
    return {"models": models, "utilization": util}
