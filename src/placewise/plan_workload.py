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

from placewise.errors import InputError
from placewise.graph.fuse import Partition, Region
from placewise.graph.ir import Graph
from placewise.graph.workload import Member, Stream, member_of, members_by_name, workload_models
from placewise.plan_records import Plan
from placewise.schedule.evaluate import evaluate
from placewise.schedule.placement import Placement, Problem
from placewise.schedule.simulate import Schedule, TaskKind

__all__ = ["is_member_plan", "member_graph", "member_placement", "member_plan",
           "member_problem", "plan_levels",
           "prioritize", "region_members", "task_member",
           "vertex_members", "workload_json"]


def region_members(plan: Plan) -> dict[str, str]:
    """Vertex name -> the model it belongs to, from the plan file alone (a region's first
    named tensor's model); {} for a plan of one model."""
    if plan.workload is None:
        return {}
    return {name: m for name, r in plan.regions.items()
            if (m := member_of(next(iter((*r.outputs, *r.inputs)), ""))) is not None}


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
    ops = {m.name: 0 for m in members}
    devices: dict[str, set[str]] = {m.name: set() for m in members}
    for t in schedule.tasks:
        m = task_member(t.kind, t.name, t.vertex, t.tensor, vertices)
        if m is None or m not in busy:
            continue
        ends[m] = max(ends.get(m, 0.0), t.end_s)
        contention[m] += t.contention_s
        if t.kind is not TaskKind.TRANSFER:
            busy[m][t.device] = busy[m].get(t.device, 0.0) + t.duration_s
        if t.kind is TaskKind.COMPUTE:
            devices[m].add(t.device)
            ops[m] += len(problem.vertex(t.vertex or t.name).ops)

    models = []
    for mem in members:
        st = streams.get(mem.name, Stream())
        sub = member_problem(problem, mem.name)
        alone = evaluate(sub, member_placement(schedule.placement, sub))
        models.append({
            "name": mem.name, "ref": mem.ref, "inputs": io[mem.name]["inputs"],
            "outputs": io[mem.name]["outputs"], "ops": ops[mem.name],
            "rate_per_s": st.rate_per_s, "slo_p99_s": st.slo_p99_s, "priority": st.priority,
            "latency_s": ends.get(mem.name, 0.0),
            "busy_s": dict(sorted(busy[mem.name].items())),
            "contention_s": contention[mem.name],
            "devices": sorted(devices[mem.name]),
            "alone_latency_s": alone.latency_s, "alone_period_s": alone.pipeline.period_s})
    util: dict[str, float] | None = None
    if members and all(streams.get(m.name, Stream()).rate_per_s for m in members):
        per: dict[str, float] = {}
        for mem in members:
            rate = streams[mem.name].rate_per_s or 0.0
            for d, b in busy[mem.name].items():
                per[d] = per.get(d, 0.0) + rate * b / max(problem.batch, 1)
        util = dict(sorted(per.items()))
    return {"models": models, "utilization": util}


def prioritize(problem: Problem, levels: Mapping[str, int]) -> Problem:
    """``problem`` with each model's vertices at its level (model -> priority, 1 the
    highest; a model not named takes the lowest given): ``Problem.prioritized``."""
    if not levels:
        return problem
    low = max(levels.values())
    return problem.prioritized({v: levels.get(m, low)
                                for v, m in vertex_members(problem).items()})


def plan_levels(plan: Plan) -> dict[str, int]:
    """A workload plan's priority per model ({} for one model)."""
    if plan.workload is None:
        return {}
    return {m.name: m.priority for m in plan.workload.models}


def _check_member(graph: Graph, member: str) -> None:
    if member not in graph.record.members:
        known = ", ".join(graph.record.members) or "none: the plan has one model"
        raise InputError(f"no model named {member!r} (models: {known})", place="model")


def member_graph(graph: Graph, member: str) -> Graph:
    """The part of a workload graph that is ``member``'s, as a graph of its own (the same
    op objects and names)."""
    _check_member(graph, member)
    by_op = members_by_name(graph)
    ops = [op for op in graph.ops if by_op.get(op.name) == member]
    used = {t for op in ops for t in (*op.inputs, *op.outputs) if t}
    inputs = [i for i in graph.inputs if member_of(i) == member]
    outputs = [o for o in graph.outputs if member_of(o) == member]
    tensors = [t for t in graph.tensors if t.name in used or t.name in inputs]
    return Graph.build(f"{graph.name}/{member}", tensors, ops, inputs, outputs,
                       record=graph.record)


def member_problem(problem: Problem, member: str) -> Problem:
    """``problem`` restricted to ``member``'s vertices (its own graph, the same machine,
    cost model and batch): what the model costs when no other model runs beside it."""
    g = member_graph(problem.graph, member)
    partition: Any = problem.partition
    if partition is not None:
        names = {op.name for op in g.ops}
        partition = Partition(g.fingerprint(), tuple(
            r for r in partition.regions if isinstance(r, Region) and set(r.ops) <= names))
    return Problem(g, partition, problem.machine, problem.cost_model, batch=problem.batch,
                   outputs_to_host=problem.outputs_to_host)


def member_placement(placement: Placement, problem: Problem) -> Placement:
    """``placement`` restricted to ``problem``'s vertices."""
    return Placement.of({v: placement[v] for v in problem.vertex_names})


def member_plan(plan: Plan, member: str) -> Plan:
    """The plan's records of ``member`` alone (its tasks, in the plan's order, depending on
    its own tasks only; its regions, ops, tensors, inputs and outputs; a workload of that
    one model, whose tuned service is the plan's): a plan the one run recipe runs
    (``runtime.planned.planned_program`` takes the model's part of the workload's graph),
    to serve, tune or validate that model on its own (``serve.workload``). Its graph
    fingerprint stays the workload's: it is checked against the whole model loaded."""
    if plan.workload is None or member not in {m.name for m in plan.workload.models}:
        known = ", ".join(m.name for m in plan.workload.models) if plan.workload else \
            "none: the plan has one model"
        raise InputError(f"no model named {member!r} (models: {known})", place="model")
    vx = region_members(plan)
    mine = [t for t in plan.schedule.tasks
            if task_member(t.kind, t.name, t.vertex, t.tensor, vx) == member]
    names = {t.name for t in mine}
    tasks = tuple(t.model_copy(update={"deps": tuple(d for d in t.deps if d in names)})
                  for t in mine)
    regions = {k: r for k, r in plan.regions.items() if vx.get(k) == member}
    rec = plan.workload.model(member)
    return plan.model_copy(update={
        "schedule": plan.schedule.model_copy(update={
            "tasks": tasks,
            "critical_path": tuple(n for n in plan.schedule.critical_path if n in names)}),
        "regions": regions,
        "placement": {k: a for k, a in plan.placement.items() if k in regions},
        "crossings": tuple(c for c in plan.crossings if member_of(c.tensor) == member),
        "cuts": (),
        "lower_bound_s": 0.0,  # the workload's bound is not the model's; none is recorded
        "ops": {k: o for k, o in plan.ops.items() if o.vertex in regions},
        "tensors": {k: t for k, t in plan.tensors.items() if member_of(k) == member},
        "graph_inputs": rec.inputs, "graph_outputs": rec.outputs,
        "makespan_s": rec.latency_s,
        # alone, as it is served on its own: its latency and pipelined period
        **({"latency_s": rec.alone_latency_s} if rec.alone_latency_s is not None else {}),
        **({"throughput": plan.throughput.model_copy(update={
            "period_s": rec.alone_period_s,
            "requests_per_s": plan.batch / rec.alone_period_s}),
            "throughput_rps": plan.batch / rec.alone_period_s}
           if rec.alone_period_s else {}),
        "workload": plan.workload.model_copy(update={"models": (rec,), "utilization": None}),
        "service": rec.service})


def is_member_plan(plan: Plan) -> bool:
    """Whether ``plan`` is one model's part of a workload plan (``member_plan``)."""
    return plan.workload is not None and len(plan.workload.models) == 1
