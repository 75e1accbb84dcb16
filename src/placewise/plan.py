"""The plan file: a placement, its schedule, memory, bounds and search record, as versioned JSON.

A ``Plan`` is everything the scheduler said about one placement, written down so that
``explain``, ``trace`` and ``check`` need nothing but the file:

- identity: ``schema_version``, ``created_by``, the ``model`` reference, the machine, and
  the ``fingerprints`` of graph, machine and calibration (cost model): a plan refuses to be
  used with a graph or machine whose fingerprint differs (``check_fingerprints``);
- the request: ``objective``, ``batch``, ``strategy`` (and ``seed``);
- ``placement``: vertex -> device and dtype (the ``Placement.to_json`` format), ``regions``:
  vertex -> its ops, fusion pattern, tensors and the cheapest cost on every other device;
  ``ops``: op -> vertex and kind (so an op of a fused region can be looked up); ``tensors``;
- ``schedule``: every compute, transfer and conversion task with its resource, lane,
  interval, dependencies and predicted terms (``sum(terms_s) == end_s - start_s``), the
  cost interval, source, bottleneck and assumptions; the resources and the critical path;
- ``makespan_s``, ``exact`` (False: the makespan is a lower bound of the model's, and
  ``notes`` says why), ``throughput_rps``, ``bottleneck_resource``, ``lower_bound_s`` with
  its parts (``bounds``);
- ``request`` (when the cost model measured it: ``CalibratedModel.request_cost``): a
  request's hand-off between the client and the host's worker, outside the schedule, with
  its terms and interval; ``latency_s`` = ``makespan_s`` + that hand-off, what one request
  is predicted to take end to end (``predicted_latency_s`` falls back to the makespan);
  when the cost model measured the executor's own work per pipelined request (each
  worker's, the client's), the throughput's occupancy includes it. Every one of these
  figures is the evaluator's (``placewise.schedule.evaluate.Evaluation``), serialised:
  the plan derives none of them, so it reports exactly what the search ranked by;
- ``memory``: device -> tier -> peak, capacity, breakdown at the peak, the largest occupants
  and a timeline decimated to at most ``MAX_TIMELINE_POINTS`` points (an upper envelope:
  each kept point holds the highest level of the points it replaces, so the peak survives);
  pools of tiers that are one physical memory; violations and suggestions;
- ``crossings``: every tensor that changes device or representation between its producer
  and a consumer (graph inputs leaving the host and outputs returning to it included), the
  tasks that move it, their transfer/conversion/sync time, and what keeping it on one
  device would have cost (computed when the plan is built);
- ``cuts``: per cut between partitions on different devices, the objective value without
  it (the receiving partition on the sender's device, evaluated when the plan is built:
  ``placewise.plan_partitions``);
- ``search``: the strategy, candidates, pruned counts, alternatives and baselines with their
  objective values, and the CP-SAT bound/gap when there is one;
- ``precision``: the precision policy, quality budget, the inputs and emulation schemes of
  the quality evidence, the per-vertex sensitivity table, the chosen assignment's
  estimated output quality and the fallback list (``PrecisionRecord``).

**The file** (``placewise.plan_file``, schema version 2): the small records as JSON
objects, the bulk tables (placement, regions, ops, tensors, tasks, critical path,
crossings) column by column with their strings interned (``placewise.plan_columns``):
about 250 bytes per task. Version-1 files (every record an object) still load.

**Determinism.** The same inputs (and seed) give a byte-identical file: keys are sorted,
columns are packed at a fixed compression level, and nothing wall-clock is stored.
In particular the search's wall-clock ``search_time_s`` is *not* in the file: callers that
want to report it (the CLI's ``--json``) take it from the search result.

Loading never unpickles or evaluates anything: the file is parsed as JSON and validated
field by field (column by column for the tables); a corrupt file, an unknown
``schema_version`` or a wrong type is a ``SpecError`` naming the file, the place in it and
the problem.

>>> from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
>>> from placewise.schedule import Problem, Placement, evaluate
>>> from placewise.schedule.testing import ToyCostModel, toy_machine
>>> from placewise.units import DType
>>> x = Tensor("x", (1000,), DType.FP32, role=Role.INPUT)
>>> y = Tensor("y", (1000,), DType.FP32, role=Role.OUTPUT)
>>> g = Graph.build("g", [x, y], [Op("a", OpKind.RELU, ("x",), ("y",))])
>>> m = toy_machine()
>>> prob = Problem(g, None, m, ToyCostModel(m))
>>> ev = evaluate(prob, Placement.uniform(["a"], "gpu", DType.FP32))
>>> plan = build_plan(prob, ev, model_ref="g.json", strategy="single:gpu")
>>> [t.name for t in plan.schedule.tasks]
['xfer:x:cpu->gpu', 'a', 'xfer:y:gpu->cpu']
>>> plan_from_json(plan_to_json(plan)) == plan
True
>>> [(c.tensor, c.src_device, c.dst_device) for c in plan.crossings]
[('x', 'cpu', 'gpu'), ('y', 'gpu', 'cpu')]
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from placewise import __version__
from placewise.cost.model import Cost, Representation, Term
from placewise.errors import Infeasible, InputError, UnsupportedError
from placewise.graph.ir import CONTROL_FLOW_KINDS
from placewise.graph.summary import control_flow_note
from placewise.graph.workload import parse_workload_ref
from placewise.plan_columns import gc_paused, make_record
from placewise.plan_file import (  # the file, re-exported
    SCHEMA_VERSION,
    dumps_plan,
    load_plan,
    plan_from_json,
    plan_json_schema,
    plan_records_json,
    plan_to_json,
    save_plan,
)
from placewise.plan_partitions import plan_cuts
from placewise.plan_records import (  # the records, re-exported
    AlternativeRecord,
    Breakdown,
    CandidateRecord,
    CrossingRecord,
    CutRecord,
    DeviceInfo,
    Fingerprints,
    KeptRecord,
    LinkInfo,
    MachineInfo,
    MemoryRecord,
    OccupantRecord,
    OpRecord,
    Plan,
    PoolRecord,
    PrecisionDecisionRecord,
    PrecisionRecord,
    RegionRecord,
    ScheduleRecord,
    SearchRecord,
    SharedInfo,
    TaskRecord,
    TensorRecord,
    ThroughputRecord,
    TierInfo,
    TierRecord,
    ViolationRecord,
)
from placewise.plan_workload import workload_json
from placewise.schedule.bounds import problem_lower_bound
from placewise.schedule.evaluate import Evaluation, Objective
from placewise.schedule.memory import Category, MemoryReport, TierUsage
from placewise.schedule.placement import (
    Assignment,
    Problem,
    feasible_assignments,
    pruned_assignments,
)
from placewise.schedule.simulate import Schedule, Task, TaskKind
from placewise.units import DType, Layout

__all__ = [
    "MAX_TIMELINE_POINTS",
    "SCHEMA_VERSION",
    "AlternativeRecord",
    "Breakdown",
    "CandidateRecord",
    "CrossingRecord",
    "CutRecord",
    "DeviceInfo",
    "Fingerprints",
    "KeptRecord",
    "LinkInfo",
    "MachineInfo",
    "MemoryRecord",
    "OccupantRecord",
    "OpRecord",
    "Plan",
    "PoolRecord",
    "PrecisionDecisionRecord",
    "PrecisionRecord",
    "RegionRecord",
    "ScheduleRecord",
    "SearchLike",
    "SearchRecord",
    "SharedInfo",
    "TaskRecord",
    "TensorRecord",
    "ThroughputRecord",
    "TierInfo",
    "TierRecord",
    "ViolationRecord",
    "build_plan",
    "check_fingerprints",
    "dumps_plan",
    "load_plan",
    "parse_rep",
    "plan_from_json",
    "plan_json_schema",
    "plan_records_json",
    "plan_to_json",
    "save_plan",
]

#: memory timelines are decimated to at most this many points per tier
MAX_TIMELINE_POINTS = 200


# ---- what a search result looks like to the plan --------------------------------------------
class SearchLike(Protocol):
    """What ``build_plan`` reads from a search result (``placewise.search.result.
    SearchResult``): ``best`` (an ``Evaluation``) and ``strategy``; and, when present,
    ``chosen``, ``candidates_evaluated``, ``estimates``, ``pruned`` ((reason, count) pairs
    or a mapping), ``pruned_examples``, ``alternatives`` (objects with ``label``,
    ``objective_s``, ``feasible``...), ``baselines`` ((label, objective_s) pairs, or a
    mapping label -> ``Evaluation`` or number), ``lower_bound_s``, ``dtypes``, ``seed``,
    ``cpsat_bound_s``, ``cpsat_status``, ``gap`` and ``notes``. ``search_time_s`` is
    deliberately not read."""

    @property
    def best(self) -> Evaluation: ...

    @property
    def strategy(self) -> str: ...


# ---- building -------------------------------------------------------------------------------
def _finite(x: float | None) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _rep_str(rep: Representation | None) -> str | None:
    return None if rep is None else str(rep)


def parse_rep(text: str) -> Representation:
    """``"fp16/row_major"`` -> ``Representation`` (the inverse of ``str(rep)``).

    >>> parse_rep("bf16/nhwc")
    Representation(dtype=<DType.BF16: 'bf16'>, layout=<Layout.NHWC: 'nhwc'>)
    """
    dt, _, lay = text.partition("/")
    return Representation(DType.parse(dt), Layout(lay) if lay else Layout.ROW_MAJOR)


def _machine_info(problem: Problem) -> dict[str, Any]:
    m = problem.machine
    return {
        "name": m.name,
        "devices": [{
            "name": d.name, "kind": str(d.kind.value), "model": d.model, "lanes": d.lanes,
            "dtypes": [dt.value for dt in d.dtypes],
            "tiers": [{"name": t.name, "capacity_bytes": t.capacity_bytes,
                       "bandwidth_bytes_per_s": t.bandwidth_bytes_per_s,
                       "shared_with": t.shared_with} for t in d.memory],
        } for d in m.devices],
        "links": [{"name": ln.name, "endpoints": list(ln.endpoints),
                   "bandwidth_bytes_per_s": ln.bandwidth_bytes_per_s, "latency_s": ln.latency_s,
                   "duplex": ln.duplex, "resource": ln.resource_name} for ln in m.links],
        "shared_resources": [{"name": r.name, "kind": r.kind,
                              "bandwidth_bytes_per_s": r.bandwidth_bytes_per_s}
                             for r in m.shared_resources],
    }


def _alternatives(problem: Problem, vi: int) -> tuple[AlternativeRecord, ...]:
    feasible = feasible_assignments(problem, vi)
    out: list[AlternativeRecord] = []
    for dev in problem.devices:
        best: tuple[float, Assignment, Cost] | None = None
        for a in feasible:
            if a.device != dev:
                continue
            c = problem.cost(vi, a.device, a.dtype)
            if best is None or c.total_s < best[0]:
                best = (c.total_s, a, c)
        if best is None:
            reasons = [p.reason for p in pruned_assignments(problem, vi)
                       if p.assignment.device == dev]
            out.append(make_record(AlternativeRecord, {
                "device": dev, "reason": reasons[0] if reasons else "not feasible"}))
        else:
            _, a, c = best
            out.append(make_record(AlternativeRecord, {
                "device": dev, "dtype": a.dtype, "total_s": float(c.total_s),
                "low_s": float(c.low_s), "high_s": float(c.high_s)}))
    return tuple(out)


def _regions(problem: Problem, alternatives: bool) -> dict[str, RegionRecord]:
    """vertex -> its record (built as records: the plan's records are trusted, typed)."""
    patterns: dict[str, str] = {}
    if problem.partition is not None:
        for r in problem.partition.regions:
            patterns[r.name] = str(getattr(r, "pattern", "") or "")
    out: dict[str, RegionRecord] = {}
    for v in problem.vertices:
        pattern = patterns.get(v.name) or ("single" if len(v.ops) == 1 else "region")
        out[v.name] = make_record(RegionRecord, {
            "ops": tuple(o.name for o in v.ops), "pattern": pattern, "inputs": tuple(v.inputs),
            "params": tuple(v.params), "outputs": tuple(v.outputs),
            "internal": tuple(v.internal), "scratch_bytes": int(v.scratch_bytes),
            "alternatives": _alternatives(problem, v.index) if alternatives else ()})
    return out


def _task_record(t: Task) -> TaskRecord:
    """The scheduler's task, serialised as the plan records it (its cost's interval with
    the contention added, the terms summed per kind)."""
    c = t.cost
    terms: dict[Term, float] = {}
    for k, v in t.terms:
        terms[k] = terms.get(k, 0.0) + v
    return make_record(TaskRecord, {
        "name": t.name, "kind": t.kind, "resource": t.resource, "lane": t.lane,
        "device": t.device, "dst_device": t.dst_device, "vertex": t.vertex,
        "tensor": t.tensor, "link": t.link, "src_rep": _rep_str(t.src_rep),
        "dst_rep": _rep_str(t.dst_rep), "nbytes": t.nbytes, "start_s": float(t.start_s),
        "end_s": float(t.end_s), "deps": tuple(t.deps), "terms_s": terms,
        "contention_s": float(t.contention_s), "low_s": float(c.low_s + t.contention_s),
        "high_s": float(c.high_s + t.contention_s), "source": c.source,
        "bottleneck": c.bottleneck,
        "assumptions": {k: v if isinstance(v, str) else float(v)  # a number is a float
                        for k, v in c.assumptions},
        "memory_bytes": c.memory_bytes, "buffer_bytes": c.buffer_bytes,
        "cores": tuple(t.cores) if t.cores else None})


def _throughput_json(problem: Problem, ev: Evaluation) -> dict[str, Any]:
    """``throughput_rps``, ``bottleneck_resource`` and ``throughput``: the evaluator's
    pipelined occupancy (the executor's per-request work included, see
    ``placewise.schedule.pipeline``), serialised."""
    tp = ev.pipeline
    rps = tp.requests_per_s if tp.period_s > 0 else None
    return {"throughput_rps": _finite(rps), "bottleneck_resource": tp.bottleneck_resource,
            "throughput": {"requests_per_s": _finite(rps), "period_s": tp.period_s,
                           "bottleneck_resource": tp.bottleneck_resource,
                           "occupancy_s": [list(x) for x in tp.occupancy_s]}}


def _request_json(problem: Problem, ev: Evaluation) -> dict[str, Any]:
    """``request`` and ``latency_s`` when the evaluator has a request hand-off."""
    cost = ev.request
    if cost is None:
        return {}
    busy = dict(ev.work.busy_s).get(problem.host, 0.0) if ev.work is not None else 0.0
    return {"request": {"device": problem.host, "latency_s": cost.total_s,
                        "low_s": cost.low_s, "high_s": cost.high_s, "busy_s": busy,
                        "terms_s": {k.value: v for k, v in cost.terms},
                        "source": cost.source.value, "assumptions": dict(cost.assumptions)},
            "latency_s": ev.latency_s}


def _decimate(points: Sequence[tuple[float, int]], limit: int) -> list[tuple[float, int]]:
    """An upper envelope of a step function with at most ``limit`` points: consecutive
    points are grouped, each group keeps its first time and its highest level; the last
    point (the final level) is kept as is."""
    pts = list(points)
    if len(pts) <= limit:
        return pts
    body, last = pts[:-1], pts[-1]
    groups = limit - 1
    out: list[tuple[float, int]] = []
    n = len(body)
    for g in range(groups):
        lo, hi = g * n // groups, (g + 1) * n // groups
        if lo >= hi:
            continue
        out.append((body[lo][0], max(b for _, b in body[lo:hi])))
    out.append(last)
    return out


_BREAKDOWN_KEY = {Category.WEIGHTS: "weights", Category.ACTIVATIONS: "activations",
                  Category.SCRATCH: "scratch", Category.TRANSFER: "transfer_buffers",
                  Category.CONVERSION: "conversion_buffers"}


def _tier_json(u: TierUsage) -> dict[str, Any]:
    return {
        "capacity_bytes": u.capacity_bytes, "peak_bytes": u.peak_bytes,
        "peak_time_s": u.peak_time_s,
        "breakdown": {_BREAKDOWN_KEY[c]: b for c, b in u.breakdown},
        "occupants": [{"label": o.label, "category": o.category.value, "device": o.device,
                       "nbytes": o.nbytes} for o in u.occupants],
        "timeline": [[t, b] for t, b in _decimate(u.timeline, MAX_TIMELINE_POINTS)],
        "timeline_points": len(u.timeline), "checked": u.checked, "final_bytes": u.final_bytes,
    }


def _memory_json(mem: MemoryReport) -> dict[str, Any]:
    devices: dict[str, dict[str, Any]] = {}
    pools: list[dict[str, Any]] = []
    for u in mem.usages:
        if len(u.members) == 1:
            d, t = u.members[0]
            devices.setdefault(d, {})[t] = _tier_json(u)
        else:
            rec = _tier_json(u)
            rec["resource"] = u.pool or ""
            rec["members"] = [list(m) for m in u.members]
            pools.append(rec)
    return {
        "feasible": mem.feasible, "devices": devices, "pools": pools,
        "violations": [{"devices": list(v.devices), "tier": v.tier, "time_s": v.time_s,
                        "need_bytes": v.need_bytes, "capacity_bytes": v.capacity_bytes,
                        "description": v.describe()} for v in mem.violations],
        "suggestions": mem.suggestions,
    }


def _kept(problem: Problem, vertex: str, device: str, prefer: Sequence[DType],
          own_cost_s: float) -> dict[str, Any]:
    """The cost of running ``vertex`` on ``device``: in the first dtype of ``prefer`` it
    can run in there (the first one makes the crossing vanish), else in its cheapest
    feasible dtype there."""
    rec: dict[str, Any] = {"vertex": vertex, "device": device, "own_cost_s": own_cost_s}
    tried: list[str] = []
    for dt in prefer:
        try:
            c = problem.cost(vertex, device, dt)
        except UnsupportedError as exc:
            tried.append(str(exc))
            continue
        rec.update(dtype=dt.value, cost_s=c.total_s, delta_s=c.total_s - own_cost_s)
        return rec
    options = [a for a in feasible_assignments(problem, vertex) if a.device == device]
    if options:
        best = min(options, key=lambda a: problem.cost(vertex, a.device, a.dtype).total_s)
        c = problem.cost(vertex, device, best.dtype)
        rec.update(dtype=best.dtype.value, cost_s=c.total_s, delta_s=c.total_s - own_cost_s)
        return rec
    rec["reason"] = tried[0] if tried else f"vertex {vertex!r} cannot run on {device!r}"
    return rec


def _crossing_record(rec: dict[str, Any]) -> CrossingRecord:
    kept = dict(rec["kept"])
    if "dtype" in kept:
        kept["dtype"] = DType(kept["dtype"])
    return make_record(CrossingRecord, {
        **rec, "links": tuple(rec["links"]), "tasks": tuple(rec["tasks"]),
        "shared_with": tuple(rec["shared_with"]), "kept": make_record(KeptRecord, kept)})


def _crossings(problem: Problem, ev: Evaluation) -> list[CrossingRecord]:
    s: Schedule = ev.schedule
    placement = ev.placement
    tasks = {t.name: t for t in s.tasks}
    copies = {(c.tensor, c.device, c.rep): c for c in s.copies}
    host = problem.host
    g = problem.graph

    def chain(copy_key: tuple[str, str, Representation]) -> list[Task]:
        out: list[Task] = []
        c = copies.get(copy_key)
        name = c.made_by if c is not None else None
        while name is not None:
            t = tasks[name]
            if t.kind is TaskKind.COMPUTE:
                break
            out.append(t)
            name = t.deps[0] if t.deps else None
        out.reverse()
        return out

    found: list[tuple[dict[str, Any], list[Task]]] = []

    def add(tensor: str, src_v: str | None, src_dev: str, src_rep: Representation,
            dst_v: str | None, dst_dev: str, dst_rep: Representation, moved: str,
            move_to: str, prefer: list[DType]) -> None:
        ch = chain((tensor, dst_dev, dst_rep))
        terms: dict[Term, float] = {}
        for t in ch:
            for k, v in t.terms:
                terms[k] = terms.get(k, 0.0) + v
        own = tasks[moved].duration_s - tasks[moved].contention_s
        rec: dict[str, Any] = {
            "tensor": tensor, "src_vertex": src_v, "src_device": src_dev,
            "src_rep": str(src_rep), "dst_vertex": dst_v, "dst_device": dst_dev,
            "dst_rep": str(dst_rep), "nbytes": g.tensor(tensor).nbytes,
            "links": list(dict.fromkeys(t.link for t in ch if t.link is not None)),
            "tasks": [t.name for t in ch], "transfer_s": terms.get(Term.TRANSFER, 0.0),
            "conversion_s": terms.get(Term.CONVERSION, 0.0), "sync_s": terms.get(Term.SYNC, 0.0),
            "launch_s": terms.get(Term.LAUNCH, 0.0),
            "contention_s": terms.get(Term.CONTENTION, 0.0),
            "total_s": (ch[-1].end_s - ch[0].start_s) if ch else 0.0,
            "kept": _kept(problem, moved, move_to, prefer, own),
        }
        found.append((rec, ch))

    out_pos: dict[str, int] = {}  # tensor -> its place in its producer's outputs

    def out_index(pv: Any, t: str) -> int:
        if t not in out_pos:
            out_pos.update((o, k) for k, o in enumerate(pv.outputs))
        return out_pos[t]

    for v in problem.vertices:
        a = placement[v.name]
        in_rids, _ = problem.io_reps(v.index, a.dtype)
        for t, rid in zip(v.inputs, in_rids, strict=True):
            dst_rep = problem.reps[rid]
            p = problem.tensor_producer.get(t)
            if p is None:
                src_v, src_dev, src_rep = None, host, problem.reps[problem.natural_rid[t]]
                prefer = [src_rep.dtype, a.dtype]
            else:
                pv = problem.vertices[p]
                pa = placement[pv.name]
                _, out_rids = problem.io_reps(p, pa.dtype)
                src_v, src_dev = pv.name, pa.device
                src_rep = problem.reps[out_rids[out_index(pv, t)]]
                prefer = [pa.dtype, a.dtype]
            if src_dev == a.device and src_rep == dst_rep:
                continue
            add(t, src_v, src_dev, src_rep, v.name, a.device, dst_rep, v.name, src_dev,
                list(dict.fromkeys(prefer)))
    if problem.outputs_to_host:
        for t in g.outputs:
            p = problem.tensor_producer.get(t)
            if p is None:
                continue  # a graph input that is also an output: never moves
            pv = problem.vertices[p]
            pa = placement[pv.name]
            _, out_rids = problem.io_reps(p, pa.dtype)
            src_rep = problem.reps[out_rids[out_index(pv, t)]]
            dst_rep = problem.reps[problem.natural_rid[t]]
            if pa.device == host and src_rep == dst_rep:
                continue
            add(t, pv.name, pa.device, src_rep, None, host, dst_rep, pv.name, host,
                list(dict.fromkeys([dst_rep.dtype, pa.dtype])))
    users: dict[str, list[str]] = {}
    for rec, ch in found:
        for task in ch:
            users.setdefault(task.name, []).append(rec["dst_vertex"] or "output")
    for rec, ch in found:
        me = rec["dst_vertex"] or "output"
        others: dict[str, None] = {}
        for task in ch:
            for u in users[task.name]:
                if u != me:
                    others[u] = None
        rec["shared_with"] = list(others)
    return [_crossing_record(rec) for rec, _ in found]


def _candidate(label: Any, value: Any, objective: Objective) -> dict[str, Any]:
    """One alternative or baseline from what a search records: an ``Evaluation``, a number
    (the objective), a tuple ``(objective, feasible)``, or an object with ``objective_s``
    (or ``objective``), ``feasible`` and optionally ``makespan_s``, ``period_s``,
    ``throughput_rps`` and ``note``."""
    rec: dict[str, Any] = {"label": str(label)}
    if isinstance(value, Evaluation):
        rec.update(objective_s=_finite(value.score(objective)), feasible=bool(value.feasible),
                   makespan_s=_finite(value.makespan_s),
                   period_s=_finite(value.pipeline.period_s),
                   throughput_rps=_finite(value.throughput_rps))
    elif value is None or isinstance(value, int | float):
        obj = _finite(value)
        rec.update(objective_s=obj, feasible=obj is not None)
    elif isinstance(value, tuple | list):
        obj = _finite(value[0]) if value else None
        rec.update(objective_s=obj,
                   feasible=bool(value[1]) if len(value) > 1 else obj is not None)
    else:
        obj = _finite(getattr(value, "objective_s", getattr(value, "objective", None)))
        rec.update(objective_s=obj, feasible=bool(getattr(value, "feasible", obj is not None)),
                   note=str(getattr(value, "note", "") or ""))
        for k in ("makespan_s", "period_s", "throughput_rps"):
            rec[k] = _finite(getattr(value, k, None))
    return rec


def _candidates(items: Any, objective: Objective) -> list[dict[str, Any]]:
    """Alternatives or baselines: a mapping label -> value, or a sequence of objects with a
    ``label``, or of tuples ``(label, value...)`` (see ``_candidate``)."""
    if items is None:
        return []
    if isinstance(items, Mapping):
        return [_candidate(k, v, objective) for k, v in items.items()]
    out: list[dict[str, Any]] = []
    for it in items:
        if isinstance(it, tuple | list):
            rest = it[1] if len(it) == 2 else tuple(it[1:])
            out.append(_candidate(it[0], rest, objective))
        else:
            out.append(_candidate(getattr(it, "label", str(it)), it, objective))
    return out


def _count(x: Any) -> int | None:
    if x is None:
        return None
    return x if isinstance(x, int) else len(x)


def _search_json(result: Any, strategy: str, objective: Objective) -> dict[str, Any]:
    pruned_raw = getattr(result, "pruned", None)
    pruned: dict[str, int]
    if pruned_raw is None:
        pruned = {}
    elif isinstance(pruned_raw, int):
        pruned = {"total": pruned_raw}
    else:
        pruned = {str(k): int(v) for k, v in dict(pruned_raw).items()}
    examples = {str(k): [str(x) for x in v]
                for k, v in dict(getattr(result, "pruned_examples", None) or {}).items()}
    evaluated = getattr(result, "candidates_evaluated", getattr(result, "candidates", None))
    chosen = getattr(result, "chosen", None)
    return {
        "strategy": str(getattr(result, "strategy", strategy) or strategy),
        "chosen": None if chosen is None else str(chosen),
        "candidates_evaluated": _count(evaluated),
        "estimates": _count(getattr(result, "estimates", None)),
        "pruned": pruned, "pruned_examples": examples,
        "alternatives": _candidates(getattr(result, "alternatives", None), objective),
        "baselines": _candidates(getattr(result, "baselines", None), objective),
        "lower_bound_s": _finite(getattr(result, "lower_bound_s", None)),
        "dtypes": [str(getattr(d, "value", d)) for d in getattr(result, "dtypes", ()) or ()],
        "cpsat_bound_s": _finite(getattr(result, "cpsat_bound_s", None)),
        "cpsat_status": getattr(result, "cpsat_status", None),
        "gap": _finite(getattr(result, "gap", None)),
        "notes": [str(n) for n in getattr(result, "notes", ()) or ()],
    }


@gc_paused()  # a million records at 100k ops: no collection passes over them meanwhile
def build_plan(problem: Problem, result: SearchLike | Evaluation, *, model_ref: str,
               objective: Objective | str | None = None, strategy: str | None = None,
               seed: int | None = None, alternatives: bool = True,
               any_placement_bound: bool = True,
               precision: Mapping[str, Any] | None = None,
               values: Mapping[str, Sequence[float]] | None = None,
               sources: Mapping[str, Any] | None = None,
               streams: Mapping[str, Any] | None = None) -> Plan:
    """The plan of ``result`` (an ``Evaluation``, or a search result whose ``best`` is one)
    for ``problem`` (the problem ``result`` was evaluated on).

    ``model_ref``: how the user named the model (``zoo:bert?layers=2``, a path);
    ``objective``, ``strategy`` and ``seed``: default to the search result's (else latency,
    ``given`` and none); ``alternatives``: record, for every vertex, its cheapest cost on
    every device (used by ``explain --op``; it asks the cost model about every feasible
    assignment, which a search has usually done already); ``any_placement_bound``: also
    record the bound of any placement (``problem_lower_bound``); ``precision``: the
    precision record (``placewise.precision.policy.precision_json``); ``values``: the inputs
    given a value when the model was loaded (reloading it needs them); ``sources``: the
    files the machine and calibration came from (``placewise.plan_sources.sources_json``);
    ``streams``: a workload's request streams by model (``graph.workload.Stream``).
    Nothing wall-clock is recorded.
    """
    if isinstance(result, Evaluation):
        ev, search = result, None
    else:
        ev, search = result.best, result
    if objective is None:
        objective = getattr(search, "objective", None) or Objective.LATENCY
    obj = Objective(objective)
    strat = strategy or (str(getattr(search, "strategy", "")) if search is not None else "") \
        or "given"
    s = ev.schedule
    g = problem.graph
    any_bound = None
    if any_placement_bound:
        try:
            any_bound = problem_lower_bound(problem)
        except Infeasible:
            any_bound = None
    data: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "created_by": f"placewise {__version__}",
        "model": model_ref,
        "graph_name": g.name,
        "fingerprints": {"graph": g.fingerprint(), "machine": problem.machine.fingerprint(),
                         "calibration": problem.cost_model.fingerprint()},
        "objective": obj.value,
        "objective_value": _finite(ev.score(obj)),
        "batch": problem.batch,
        "strategy": strat,
        "seed": seed if seed is not None else getattr(search, "seed", None),
        "host": problem.host,
        "outputs_to_host": problem.outputs_to_host,
        "machine": _machine_info(problem),
        "placement": ev.placement.to_json(),
        "regions": _regions(problem, alternatives),
        "ops": {op.name: make_record(OpRecord, {"vertex": v.name, "kind": op.kind,
                                                "where": op.where()})
                for v in problem.vertices for op in v.ops},
        "tensors": {t.name: make_record(TensorRecord, {
            "shape": tuple(t.concrete_shape), "dtype": t.dtype, "layout": t.layout,
            "role": t.role, "nbytes": t.nbytes}) for t in g.tensors},
        "graph_inputs": list(g.inputs),
        "graph_outputs": list(g.outputs),
        "schedule": {
            "tasks": tuple(_task_record(t) for t in s.tasks),
            "resources": s.resources,
            "critical_path": [t.name for t in s.critical_path()],
        },
        "makespan_s": s.makespan_s,
        **_request_json(problem, ev),
        "exact": s.exact,
        "notes": list(s.notes),
        **_throughput_json(problem, ev),
        "lower_bound_s": ev.lower_bound_s,
        "bounds": ev.bound,
        "any_placement_bound": any_bound,
        "memory": _memory_json(ev.memory),
        "crossings": _crossings(problem, ev),
        "search": _search_json(search, strat, obj) if search is not None else None,
        "precision": dict(precision) if precision is not None else None,
        "values": {k: tuple(float(x) for x in v) for k, v in values.items()} if values
        else None,
        "control_flow": _control_flow_notes(g),
        "sources": dict(sources) if sources else None,
        "workload": workload_json(problem, s, parse_workload_ref(model_ref), streams)
        if g.record.members else None,
    }
    plan = Plan.model_validate(data)
    return plan.model_copy(update={"cuts": plan_cuts(problem, plan)})


def _control_flow_notes(graph: Any) -> tuple[str, ...]:
    return tuple(control_flow_note(op) for op in graph.ops if op.kind in CONTROL_FLOW_KINDS)


# ---- fingerprints --------------------------------------------------------------------------
def _fp(x: Any) -> str:
    return x if isinstance(x, str) else str(x.fingerprint())


def _short(fp: str) -> str:
    return fp if len(fp) <= 23 else fp[:23] + "..."


def check_fingerprints(plan: Plan, graph: Any = None, machine: Any = None,
                       calibration_fp: str | None = None, *, file: str | None = None) -> None:
    """Raise ``InputError`` naming the fingerprint that differs when ``graph`` (a ``Graph``
    or its fingerprint), ``machine`` (a ``Machine`` or its fingerprint) or the cost model's
    ``calibration_fp`` is not the one the plan was made for."""
    fps = plan.fingerprints
    for what, given, recorded, hint in (
            ("graph", graph, fps.graph, f"model {plan.model!r}"),
            ("machine", machine, fps.machine, f"machine {plan.machine.name!r}"),
            ("calibration", calibration_fp, fps.calibration, "its calibration")):
        if given is None:
            continue
        got = _fp(given)
        if got != recorded:
            raise InputError(
                f"the plan was made for another {what} (fingerprint {_short(recorded)} in the "
                f"plan, {_short(got)} given): plan again for this {what}, or use {hint}",
                file=file, place=f"fingerprints.{what}")
