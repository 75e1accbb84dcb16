"""Why a plan is what it is: a summary, the critical path term by term, every crossing edge,
memory peaks, what the bound says about headroom, and the search record.

``explain(plan)`` returns the explanation as data (JSON-ready: the CLI's ``--json``);
``render_explain(data)`` turns it into plain text (what ``placewise explain`` prints). Both
read nothing but the plan. ``explain(plan, op=NAME)`` zooms in on an op or vertex (its
assignment, cost terms, interval, source, assumptions, inputs and outputs, and the cheapest
alternative on every device); ``explain(plan, edge=TENSOR)`` on a tensor (producer,
consumers, and every crossing it makes). An unknown name is an ``InputError`` naming it.

>>> from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
>>> from placewise.plan import build_plan
>>> from placewise.schedule import Assignment, Placement, Problem, evaluate
>>> from placewise.schedule.testing import ToyCostModel, toy_machine
>>> from placewise.units import DType
>>> x = Tensor("x", (1000,), DType.FP32, role=Role.INPUT)
>>> h = Tensor("h", (1000,), DType.FP32)
>>> y = Tensor("y", (1000,), DType.FP32, role=Role.OUTPUT)
>>> g = Graph.build("g", [x, h, y], [Op("a", OpKind.RELU, ("x",), ("h",)),
...                                  Op("b", OpKind.RELU, ("h",), ("y",))])
>>> m = toy_machine()
>>> prob = Problem(g, None, m, ToyCostModel(m))
>>> ev = evaluate(prob, Placement.of({"a": Assignment("cpu", DType.FP32),
...                                   "b": Assignment("gpu", DType.FP32)}))
>>> plan = build_plan(prob, ev, model_ref="g.json", strategy="manual")
>>> data = explain(plan)
>>> [c["tensor"] for c in data["crossings"]]
['h', 'y']
>>> print(render_explain(explain(plan, edge="h")).splitlines()[3])
tensor h: fp32[1000] (3.91 KiB, activation), produced by a on cpu
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from placewise.cost.model import Term
from placewise.errors import InputError
from placewise.plan import CrossingRecord, Plan, TaskRecord, TierRecord
from placewise.plan_partitions import cut_pairs, plan_file_partitions
from placewise.plan_workload import region_members
from placewise.records import to_json
from placewise.units import format_bytes, format_seconds

__all__ = ["TERM_ORDER", "explain", "render_explain", "time_sources_text"]

#: the order terms are listed in (queueing only appears in served plans)
TERM_ORDER: tuple[Term, ...] = (Term.COMPUTE, Term.MEMORY, Term.LAUNCH, Term.TRANSFER,
                                Term.CONVERSION, Term.SYNC, Term.CONTENTION, Term.QUEUEING)


# ---- data -----------------------------------------------------------------------------------
def _terms(terms: Mapping[Term, float]) -> dict[str, float]:
    return {t.value: terms[t] for t in TERM_ORDER if terms.get(t, 0.0) != 0.0}


def _task_data(t: TaskRecord, *, full: bool = False) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": t.name, "kind": t.kind.value, "resource": t.resource, "lane": t.lane,
        "device": t.device, "start_s": t.start_s, "end_s": t.end_s,
        "duration_s": t.duration_s, "terms_s": _terms(t.terms_s), "low_s": t.low_s,
        "high_s": t.high_s, "source": t.source.value, "bottleneck": t.bottleneck.value,
    }
    if t.dst_device is not None:
        d["dst_device"] = t.dst_device
    if full:
        d.update(deps=list(t.deps), assumptions=dict(sorted(t.assumptions.items())),
                 memory_bytes=t.memory_bytes, buffer_bytes=t.buffer_bytes, nbytes=t.nbytes)
        for k in ("vertex", "tensor", "link", "src_rep", "dst_rep"):
            v = getattr(t, k)
            if v is not None:
                d[k] = v
    return d


def _header(plan: Plan) -> dict[str, Any]:
    return {"model": plan.model, "graph": plan.graph_name, "machine": plan.machine.name,
            "objective": plan.objective.value, "batch": plan.batch, "strategy": plan.strategy,
            "calibration": plan.fingerprints.calibration}


def _summary(plan: Plan) -> dict[str, Any]:
    per_dev: dict[str, dict[str, Any]] = {}
    for v, a in plan.placement.items():
        rec = per_dev.setdefault(a["device"], {"vertices": 0, "ops": 0, "dtypes": {}})
        rec["vertices"] += 1
        rec["ops"] += len(plan.regions[v].ops)
        rec["dtypes"][a["dtype"]] = rec["dtypes"].get(a["dtype"], 0) + 1
    busy = {r.device: r.busy_s for r in plan.schedule.resources if r.device is not None}
    devices = [{"device": d, "vertices": per_dev[d]["vertices"], "ops": per_dev[d]["ops"],
                "dtypes": dict(sorted(per_dev[d]["dtypes"].items())),
                "busy_s": busy.get(d, 0.0)} for d in plan.devices_used()]
    return {
        **_header(plan),
        "objective_value": plan.objective_value,
        "makespan_s": plan.makespan_s,
        "latency_s": plan.predicted_latency_s,
        "request": None if plan.request is None else {
            "device": plan.request.device, "latency_s": plan.request.latency_s,
            "low_s": plan.request.low_s, "high_s": plan.request.high_s,
            "busy_s": plan.request.busy_s, "source": plan.request.source.value},
        "exact": plan.exact,
        "label": "exact schedule" if plan.exact else "lower bound only",
        "notes": list(plan.notes),
        "control_flow": list(plan.control_flow),
        "throughput_rps": plan.throughput_rps,
        "period_s": plan.throughput.period_s,
        "bottleneck_resource": plan.bottleneck_resource,
        "lower_bound_s": plan.lower_bound_s,
        "memory_feasible": plan.memory.feasible,
        "devices_used": devices,
        "tasks": len(plan.schedule.tasks),
        "crossings": len(plan.crossings),
        "time_by_source": plan.time_by_source(),
    }


def _critical_path(plan: Plan) -> dict[str, Any]:
    idx = plan.task_index()
    tasks = [idx[n] for n in plan.schedule.critical_path]
    totals: dict[Term, float] = {}
    for t in tasks:
        for k, v in t.terms_s.items():
            totals[k] = totals.get(k, 0.0) + v
    busy = sum(t.duration_s for t in tasks)
    return {"tasks": [_task_data(t) for t in tasks], "totals_s": _terms(totals),
            "busy_s": busy, "waiting_s": max(0.0, plan.makespan_s - busy),
            "length_s": plan.makespan_s}


def _crossing_data(c: CrossingRecord) -> dict[str, Any]:
    d: dict[str, Any] = c.model_dump(mode="json", exclude_none=True)
    d["key"] = c.key
    return d


def _saved_s(plan: Plan, vertices: Sequence[str], other: str) -> tuple[float | None, str]:
    """What running ``vertices`` where they run saves against running them on ``other``
    (their cheapest recorded alternatives there less their own uncontended times)."""
    idx = plan.task_index()
    saved = 0.0
    for v in vertices:
        alt = next((a for a in plan.regions[v].alternatives if a.device == other), None)
        if alt is None:
            return None, "alternatives not recorded"
        if alt.total_s is None:
            return None, f"{v} cannot run on {other}"
        t = idx[v]
        saved += alt.total_s - (t.duration_s - t.contention_s)
    return saved, ""


def _partitions(plan: Plan) -> dict[str, Any]:
    """The partition count, and per cut (a partition fed by another device's partition) what
    it buys: ``buys_s``, the plan's objective without the cut (the receiving partition on the
    sender's device, evaluated when the plan was built) less its own; beside it the local
    view: the receiving partition's time saved on its device (``saved_s``) against what the
    crossings between them add (transfer, sync and the partition launch: ``added_s``, each
    task once)."""
    parts = plan_file_partitions(plan)
    idx = plan.task_index()
    values = {(c.src, c.dst): c for c in plan.cuts}
    out = []
    for src, dst in cut_pairs(plan, parts):
        tasks: dict[str, None] = {}
        tensors: dict[str, None] = {}
        for c in plan.crossings:
            if c.src_vertex in src.tasks and c.dst_vertex in dst.tasks:
                tasks.update(dict.fromkeys(c.tasks))
                tensors[c.tensor] = None
        added = sum(idx[n].duration_s for n in tasks)
        launch = sum(idx[n].term(Term.LAUNCH) for n in tasks)
        saved, why = _saved_s(plan, dst.tasks, src.device)
        rec = values.get((src.name, dst.name))
        out.append({"from": src.name, "to": dst.name, "tensors": list(tensors),
                    "added_s": added, "partition_s": launch, "saved_s": saved,
                    "net_s": None if saved is None else saved - added,
                    "buys_s": None if rec is None else rec.buys_s,
                    "merged_value_s": None if rec is None else rec.merged_value_s,
                    "reason": (rec.reason if rec is not None else "not recorded in the plan")
                    or why or None})
    per_dev: dict[str, int] = {}
    for p in parts:
        per_dev[p.device] = per_dev.get(p.device, 0) + 1
    return {"count": len(parts), "per_device": per_dev,
            "partitions": [{"name": p.name, "device": p.device, "dtype": p.dtype.value,
                            "vertices": len(p.tasks)} for p in parts],
            "cuts": out}


def _workload(plan: Plan) -> dict[str, Any] | None:
    """A workload plan's models (``plan_records.ModelRecord``) with their partitions and
    whether the predicted latency of one request (each model's with the others running
    beside it) is within the model's p99 objective: a request that waits for none, so
    meeting it is necessary, not sufficient (``serve`` answers for the tail)."""
    if plan.workload is None:
        return None
    parts = plan_file_partitions(plan)
    vx_member = region_members(plan)
    models = []
    for m in plan.workload.models:
        mine = [p.name for p in parts if p.tasks and vx_member.get(p.tasks[0]) == m.name]
        within = None if m.slo_p99_s is None else m.latency_s <= m.slo_p99_s
        models.append({**m.to_json(), "partitions": mine, "within_slo": within})
    return {"models": models, "utilization": plan.workload.utilization}


def _tier_data(device: str, tier: str, u: TierRecord) -> dict[str, Any]:
    return {"device": device, "tier": tier, "peak_bytes": u.peak_bytes,
            "capacity_bytes": u.capacity_bytes, "headroom_bytes": u.headroom_bytes,
            "peak_time_s": u.peak_time_s, "fits": u.fits, "checked": u.checked,
            "breakdown": u.breakdown.model_dump(mode="json"),
            "occupants": [o.model_dump(mode="json") for o in u.occupants]}


def _memory(plan: Plan) -> dict[str, Any]:
    mem = plan.memory
    order = [d.name for d in plan.machine.devices]
    tiers = [_tier_data(d, t, u) for d in order for t, u in sorted(mem.devices.get(d, {}).items())]
    pools = []
    for p in mem.pools:
        rec = _tier_data("+".join(d for d, _ in p.members), "+".join(
            dict.fromkeys(t for _, t in p.members)), p)
        rec["resource"] = p.resource
        pools.append(rec)
    return {"feasible": mem.feasible, "tiers": tiers, "pools": pools,
            "violations": [v.model_dump(mode="json") for v in mem.violations],
            "suggestions": [{k: v for k, v in to_json(s).items() if v is not None}
                            for s in mem.suggestions]}


def _bound(plan: Plan) -> dict[str, Any]:
    b = plan.bounds
    ms = plan.makespan_s
    lb = plan.lower_bound_s
    ratio = ms / lb if lb > 0 else None
    gap = ms - lb
    if lb <= 0:
        verdict = "the plan does no work: there is nothing to bound"
    elif gap <= 1e-3 * ms:
        verdict = ("the schedule meets its bound: this placement cannot run faster; only "
                   "another placement (or faster devices) can")
    else:
        verdict = (f"resource conflicts and contention cost {format_seconds(gap)} "
                   f"({100 * gap / ms:.1f}% of the makespan) over this placement's bound")
    per = [{"resource": r, "work_s": w, "share_of_makespan": (w / ms if ms > 0 else 0.0)}
           for r, w in b.per_resource_s]
    out: dict[str, Any] = {
        "makespan_s": ms, "lower_bound_s": lb, "ratio": ratio, "headroom_s": gap,
        "binding": b.binding, "critical_path_s": b.critical_path_s, "work_s": b.work_s,
        "per_resource": per, "verdict": verdict,
        "throughput_bottleneck": plan.throughput.bottleneck_resource,
        "period_s": plan.throughput.period_s,
    }
    ab = plan.any_placement_bound
    if ab is not None:
        out["any_placement"] = {"value_s": ab.value_s, "binding": ab.binding,
                                "critical_path_s": ab.critical_path_s, "work_s": ab.work_s,
                                "ratio": ms / ab.value_s if ab.value_s > 0 else None}
    return out


def _search(plan: Plan) -> dict[str, Any] | None:
    return None if plan.search is None else plan.search.model_dump(mode="json")


def _precision(plan: Plan) -> dict[str, Any] | None:
    """The precision policy and every precision decision: its time gain and quality cost."""
    pr = plan.precision
    if pr is None:
        return None
    rows = []
    for d in pr.decisions:
        state = ("lowered" if d.chosen else "fallback" if d.fallback else
                 "admitted" if d.admitted else "kept")
        rows.append({"vertex": d.vertex, "dtype": d.dtype.value, "natural": d.natural.value,
                     "state": state, "gain_s": d.gain_s, "error": d.error,
                     "quality": dict(d.quality), "reason": d.reason})
    return {"policy": pr.policy, "budget": f"{pr.budget_metric}={pr.budget_value:g}",
            "budget_default": pr.budget_default, "inputs": pr.inputs,
            "schemes": dict(pr.schemes), "lowered": dict(pr.lowered),
            "estimated": dict(pr.estimated), "estimated_error": pr.estimated_error,
            "combined_estimate": pr.combined_estimate, "rechecks": pr.rechecks,
            "fallback": list(pr.fallback), "notes": list(pr.notes), "decisions": rows}


def _unknown(kind: str, name: str, known: Sequence[str], flag: str) -> InputError:
    close = difflib.get_close_matches(name, list(dict.fromkeys(known)), n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    return InputError(f"the plan has no {kind} named {name!r}{hint}", place=flag)


def _op_view(plan: Plan, name: str) -> dict[str, Any]:
    vertex = plan.vertex_of(name)
    if vertex is None:
        raise _unknown("op or vertex", name, [*plan.regions, *plan.ops], "--op")
    region = plan.regions[vertex]
    a = plan.assignment(vertex)
    idx = plan.task_index()
    task = next((t for t in plan.schedule.tasks if t.vertex == vertex), None)
    own_s = task.duration_s - task.contention_s if task is not None else None
    alts = []
    for alt in region.alternatives:
        rec = alt.model_dump(mode="json", exclude_none=True)
        if alt.total_s is not None and own_s is not None:
            rec["delta_s"] = alt.total_s - own_s
        alts.append(rec)
    waited = None
    if task is not None and task.deps:
        last = max((idx[d] for d in task.deps), key=lambda t: (t.end_s, t.name))
        waited = {"task": last.name, "end_s": last.end_s}
    out: dict[str, Any] = {
        "name": name, "vertex": vertex, "is_vertex": name == vertex,
        "ops": [{"name": o, "kind": plan.ops[o].kind.value, "where": plan.ops[o].where}
                for o in region.ops],
        "pattern": region.pattern, "device": a.device, "dtype": a.dtype.value,
        "inputs": list(region.inputs), "params": list(region.params),
        "outputs": list(region.outputs), "internal": list(region.internal),
        "scratch_bytes": region.scratch_bytes,
        "task": _task_data(task, full=True) if task is not None else None,
        "waited_for": waited,
        "on_critical_path": task is not None and task.name in plan.schedule.critical_path,
        "alternatives": alts,
        "crossings_in": [_crossing_data(c) for c in plan.crossings if c.dst_vertex == vertex],
        "crossings_out": [_crossing_data(c) for c in plan.crossings if c.src_vertex == vertex],
        "precision": [d for d in (_precision(plan) or {}).get("decisions", [])
                      if d["vertex"] == vertex],
    }
    return out


def _edge_view(plan: Plan, tensor: str) -> dict[str, Any]:
    rec = plan.tensors.get(tensor)
    if rec is None:
        raise _unknown("tensor", tensor, list(plan.tensors), "--edge")
    producer = next((v for v, r in plan.regions.items() if tensor in r.outputs), None)
    inside = next((v for v, r in plan.regions.items() if tensor in r.internal), None)
    consumers = [v for v, r in plan.regions.items() if tensor in r.inputs]
    users = [v for v, r in plan.regions.items() if tensor in r.params]
    crossings = [_crossing_data(c) for c in plan.crossings if c.tensor == tensor]
    where = None
    if producer is not None:
        where = plan.placement[producer]["device"]
    elif tensor in plan.graph_inputs:
        where = plan.host
    if crossings:
        status = f"crosses {len(crossings)} time{'s' if len(crossings) > 1 else ''}"
    elif inside is not None:
        status = f"internal to region {inside}: it never leaves {plan.placement[inside]['device']}"
    elif users:
        devs = sorted({plan.placement[v]["device"] for v in users})
        status = f"a weight, resident on {', '.join(devs)} (no transfer)"
    else:
        status = "does not cross: every consumer holds it where and as it is produced"
    return {
        "tensor": tensor, "shape": list(rec.shape), "dtype": rec.dtype.value,
        "layout": rec.layout.value, "role": rec.role.value, "nbytes": rec.nbytes,
        "producer": producer, "produced_on": where, "consumers": consumers,
        "weight_of": users, "graph_output": tensor in plan.graph_outputs,
        "status": status, "crossings": crossings,
    }


def explain(plan: Plan, *, op: str | None = None, edge: str | None = None) -> dict[str, Any]:
    """The explanation of ``plan`` as data.

    Without ``op``/``edge``: ``summary``, ``critical_path``, ``crossings``,
    ``partitions`` (the count by the executor's rule, and per cut between devices what it
    saves against what it adds), ``memory``,
    ``bound``, ``search``, ``precision`` (the policy, budget, evidence and every
    precision decision with its time gain and quality cost) and ``workload`` (a plan of
    several models: each one's latency, devices, partitions, stream and objective; None
    for one model). With ``op`` (an op or vertex name) and/or ``edge`` (a tensor
    name): the ``header`` and the ``op`` / ``edge`` zoom only. ``InputError`` (naming the
    flag and the name) when the plan has no such op, vertex or tensor.
    """
    if op is None and edge is None:
        return {"summary": _summary(plan), "critical_path": _critical_path(plan),
                "crossings": [_crossing_data(c) for c in plan.crossings],
                "partitions": _partitions(plan), "memory": _memory(plan), "bound": _bound(plan), "search": _search(plan),
                "precision": _precision(plan), "workload": _workload(plan)}
    out: dict[str, Any] = {"header": _header(plan)}
    if op is not None:
        out["op"] = _op_view(plan, op)
    if edge is not None:
        out["edge"] = _edge_view(plan, edge)
    return out


# ---- text -----------------------------------------------------------------------------------
def _s(x: float | None) -> str:
    return "-" if x is None else format_seconds(x)


def _b(x: float | None) -> str:
    return "-" if x is None else format_bytes(x)


def _n(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def _rate(rps: float | None) -> str:
    if rps is None:
        return "unbounded"
    return f"{rps:.4g} requests/s"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "  ",
           left: int | Collection[int] = 1) -> list[str]:
    """Columns padded to their widest cell; the first ``left`` columns (or those whose
    indexes ``left`` lists) are left-aligned, the others right-aligned."""
    lefts = set(range(left)) if isinstance(left, int) else set(left)
    widths = [len(h) for h in headers]
    for r in rows:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))

    def line(cells: Sequence[str]) -> str:
        parts = [c.ljust(w) if i in lefts else c.rjust(w)
                 for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return (indent + "  ".join(parts)).rstrip()

    return [line(headers), *[line(r) for r in rows]]


def _header_line(h: Mapping[str, Any]) -> list[str]:
    return [f"plan for {h['model']} (graph {h['graph']}) on {h['machine']}",
            f"  objective {h['objective']}, batch {h['batch']}, strategy {h['strategy']}, "
            f"costs {h['calibration']}"]


def _render_summary(s: Mapping[str, Any]) -> list[str]:
    out = _header_line(s)
    label = s["label"] + ("" if s["exact"] else ": " + "; ".join(s["notes"]))
    out.append(f"  makespan {_s(s['makespan_s'])} ({label})")
    for note in s.get("control_flow") or []:
        out.append(f"  control flow: {note}")
    req = s.get("request")
    if req:
        out.append(f"  latency {_s(s['latency_s'])} = makespan + request hand-off "
                   f"{_s(req['latency_s'])} on {req['device']} ({req['source']}, "
                   f"{_s(req['low_s'])}..{_s(req['high_s'])})")
    out.append(f"  throughput {_rate(s['throughput_rps'])} (one run every "
               f"{_s(s['period_s'])}, bottleneck {s['bottleneck_resource'] or '-'})")
    out.append("  predicted task time: " + time_sources_text(s["time_by_source"]))
    out.append(f"  lower bound {_s(s['lower_bound_s'])}; memory "
               f"{'fits' if s['memory_feasible'] else 'DOES NOT FIT'}")
    out.append(f"  {_n(s['tasks'], 'task', 'tasks')}, "
               f"{_n(s['crossings'], 'crossing edge', 'crossing edges')}")
    out.append("  devices used:")
    for d in s["devices_used"]:
        dts = ", ".join(f"{k} x{v}" for k, v in d["dtypes"].items())
        out.append(f"    {d['device']}: {_n(d['vertices'], 'vertex', 'vertices')} "
                   f"({_n(d['ops'], 'op', 'ops')}; {dts}), "
                   f"busy {_s(d['busy_s'])}")
    return out


def time_sources_text(by: Mapping[str, float]) -> str:
    """``Plan.time_by_source`` in words: the measured share first, then what is not.

    >>> time_sources_text({"measured": 3.0, "fitted": 0.0, "roofline": 1.0, "given": 0.0,
    ...                    "total": 4.0, "measured_share": 0.75})
    '75.0% measured, 25.0% roofline'
    """
    total = by.get("total", 0.0)
    if total <= 0:
        return "none"
    parts = [f"{100 * by[k] / total:.1f}% {k}" for k in ("measured", "fitted", "roofline", "given")
             if by.get(k, 0.0) > 0 or k == "measured"]
    return ", ".join(parts)


def _term_columns(rows: Sequence[Mapping[str, float]]) -> list[str]:
    present = {k for r in rows for k in r}
    return [t.value for t in TERM_ORDER if t.value in present]


def _render_critical(cp: Mapping[str, Any], max_rows: int) -> list[str]:
    tasks = cp["tasks"]
    out = [f"critical path: {len(tasks)} tasks, {_s(cp['length_s'])} "
           f"(busy {_s(cp['busy_s'])}, waiting {_s(cp['waiting_s'])})"]
    cols = _term_columns([t["terms_s"] for t in tasks])
    rows = []
    for t in tasks[:max_rows]:
        rows.append([t["name"], t["kind"], t["resource"], _s(t["start_s"]),
                     _s(t["duration_s"]), *[_s(t["terms_s"].get(c, 0.0)) if c in t["terms_s"]
                                            else "" for c in cols]])
    totals = cp["totals_s"]
    rows.append(["total", "", "", "", _s(cp["busy_s"]),
                 *[_s(totals[c]) if c in totals else "" for c in cols]])
    out += _table(["task", "kind", "resource", "start", "duration", *cols], rows, left=3)
    if len(tasks) > max_rows:
        out.append(f"  ... {len(tasks) - max_rows} more tasks (totals include them)")
    return out


def _render_crossing(c: Mapping[str, Any], indent: str = "  ") -> list[str]:
    src = f"{c.get('src_vertex') or 'input'} ({c['src_device']}, {c['src_rep']})"
    dst = f"{c.get('dst_vertex') or 'output'} ({c['dst_device']}, {c['dst_rep']})"
    out = [f"{indent}{c['tensor']}: {src} -> {dst}, {_b(c['nbytes'])}"]
    parts = [f"{k} {_s(c[k + '_s'])}" for k in ("transfer", "conversion", "sync", "launch",
                                                 "contention") if c.get(k + "_s")]
    via = f"via {', '.join(c['links'])}" if c.get("links") else f"on {c['dst_device']}"
    out.append(f"{indent}  {via}: {', '.join(parts) or 'no cost'}; "
               f"{_s(c['total_s'])} until it is ready there")
    if c.get("shared_with"):
        out.append(f"{indent}  the same copy also serves {', '.join(c['shared_with'])}")
    k = c.get("kept")
    if k:
        same = c["src_device"] == c["dst_device"]
        what = f"kept as {c['src_rep'].split('/')[0]}" if same else f"kept on {k['device']}"
        if k.get("cost_s") is None:
            out.append(f"{indent}  {what}: impossible, {k.get('reason', '')}")
        else:
            delta = k["delta_s"]
            sign = "+" if delta >= 0 else "-"
            out.append(f"{indent}  {what}: {k['vertex']} in {k['dtype']} would cost "
                       f"{_s(k['cost_s'])} instead of {_s(k['own_cost_s'])} "
                       f"({sign}{_s(abs(delta))}) and avoid {_s(c['total_s'])} of moving")
    return out


def _render_crossings(cs: Sequence[Mapping[str, Any]], max_rows: int) -> list[str]:
    if not cs:
        return ["crossing edges: none (every tensor stays where it is produced)"]
    out = [f"crossing edges: {len(cs)}"]
    for c in cs[:max_rows]:
        out += _render_crossing(c)
    if len(cs) > max_rows:
        out.append(f"  ... {len(cs) - max_rows} more (explain --edge TENSOR for one)")
    return out


def _render_partitions(p: Mapping[str, Any], max_rows: int) -> list[str]:
    per = ", ".join(f"{d} {n}" for d, n in p["per_device"].items())
    out = [f"partitions: {p['count']} ({per}); {_n(len(p['cuts']), 'cut', 'cuts')} between "
           f"devices"]
    if not p["cuts"]:
        return out

    def signed(x: float | None) -> str:
        return "-" if x is None else ("+" if x >= 0 else "-") + _s(abs(x))

    rows = [[f"{c['from']} -> {c['to']}", str(len(c["tensors"])), signed(c["buys_s"]),
             _s(c["saved_s"]), _s(c["added_s"]), _s(c["partition_s"]),
             c["reason"] or ""] for c in p["cuts"][:max_rows]]
    out += _table(["cut", "tensors", "buys", "saves", "adds", "of which partition", ""],
                  rows)
    if len(p["cuts"]) > max_rows:
        out.append(f"  ... {len(p['cuts']) - max_rows} more (explain --json for all)")
    out.append("  buys: how much worse the plan's objective is with the receiving partition "
               "moved to the sender's device (evaluated); saves: its time there less its own; "
               "adds: its crossings' transfer, sync and partition launch")
    return out


_BREAK = (("weights", "weights"), ("activations", "activations"), ("scratch", "scratch"),
          ("transfer_buffers", "transfer"), ("conversion_buffers", "conversion"))


def _render_memory(m: Mapping[str, Any]) -> list[str]:
    out = [f"memory peaks: {'every tier fits' if m['feasible'] else 'DOES NOT FIT'}"]
    rows = []
    unused = []
    for u in [*m["tiers"], *m["pools"]]:
        if u["peak_bytes"] == 0:
            unused.append(f"{u['device']}/{u['tier']}")
            continue
        bd = u["breakdown"]
        name = f"{u['device']}/{u['tier']}" + ("" if u["checked"] else " (pooled)")
        rows.append([name, _b(u["peak_bytes"]), _b(u["capacity_bytes"]),
                     (_b(u["headroom_bytes"]) if u["headroom_bytes"] >= 0
                      else "-" + _b(-u["headroom_bytes"])),
                     _s(u["peak_time_s"]), *[_b(bd[k]) for k, _ in _BREAK]])
    out += _table(["device/tier", "peak", "capacity", "headroom", "at",
                   *[h for _, h in _BREAK]], rows)
    if unused:
        out.append(f"  unused: {', '.join(unused)}")
    for v in m["violations"]:
        out.append(f"  overflow: {v['description']}")
    for s in m["suggestions"]:
        out.append(f"  suggestion ({s['kind']}): {s.get('note', '')}")
    return out


def _render_bound(b: Mapping[str, Any]) -> list[str]:
    ratio = "-" if b["ratio"] is None else f"{b['ratio']:.3f}"
    out = [f"bound: makespan {_s(b['makespan_s'])} = {ratio} x the lower bound "
           f"{_s(b['lower_bound_s'])} (set by {b['binding'] or '-'})",
           f"  critical path at uncontended durations {_s(b['critical_path_s'])}; "
           f"busiest resource's work {_s(b['work_s'])}",
           f"  {b['verdict']}"]
    if b["per_resource"]:
        out.append("  work per resource (what pipelining is limited by; throughput "
                   f"bottleneck {b['throughput_bottleneck'] or '-'}):")
        out += _table(["resource", "work", "of makespan"],
                      [[r["resource"], _s(r["work_s"]), f"{100 * r['share_of_makespan']:.1f}%"]
                       for r in b["per_resource"]], indent="    ")
    ap = b.get("any_placement")
    if ap is not None:
        r2 = "-" if ap["ratio"] is None else f"{ap['ratio']:.3f}"
        out.append(f"  any placement needs at least {_s(ap['value_s'])} (set by "
                   f"{ap['binding']}): this plan is {r2} x that")
    return out


def _obj(x: float | None) -> str:
    return "does not fit" if x is None else format_seconds(x)


def _render_search(s: Mapping[str, Any] | None, makespan_s: float) -> list[str]:
    if s is None:
        return ["search: none recorded (the placement was given)"]
    head = f"search: strategy {s['strategy']}"
    if s.get("chosen") and s["chosen"] != s["strategy"]:
        head += f" (chose {s['chosen']})"
    if s.get("candidates_evaluated") is not None:
        head += f", {_n(s['candidates_evaluated'], 'candidate', 'candidates')} evaluated"
    if s.get("estimates"):
        head += f", {_n(s['estimates'], 'estimate', 'estimates')}"
    if s.get("dtypes"):
        head += f"; dtypes {', '.join(s['dtypes'])}"
    out = [head]
    if s.get("pruned"):
        out.append("  pruned before evaluation: "
                   + ", ".join(f"{k} {v}" for k, v in sorted(s["pruned"].items())))
    if s.get("lower_bound_s") is not None:
        lb = s["lower_bound_s"]
        ratio = f": the best plan is {makespan_s / lb:.3f} x that" if lb > 0 else ""
        out.append(f"  no placement searched beats {_s(lb)}{ratio}")
    if s.get("cpsat_bound_s") is not None or s.get("cpsat_status"):
        gap = s.get("gap")
        out.append(f"  CP-SAT: bound {_s(s.get('cpsat_bound_s'))}"
                   + (f" ({s['cpsat_status']})" if s.get("cpsat_status") else "")
                   + (f", gap {100 * gap:.2f}%" if gap is not None else ""))
    for title in ("alternatives", "baselines"):
        items = s.get(title) or []
        if items:
            out.append(f"  {title}:")
            out += _table(["label", "objective", "makespan", "fits", "note"],
                          [[c["label"], _obj(c.get("objective_s")), _s(c.get("makespan_s")),
                            "yes" if c["feasible"] else "no", c.get("note", "")]
                           for c in items], indent="    ", left=(0, 4))
    for note in s.get("notes") or []:
        out.append(f"  note: {note}")
    return out


def _decision_line(d: Mapping[str, Any]) -> list[str]:
    gain = "-" if d.get("gain_s") is None else _s(d["gain_s"])
    err = "-" if d.get("error") is None else f"{d['error']:.3g}"
    return [d["vertex"], f"{d['natural']}->{d['dtype']}", d["state"], gain, err, d["reason"]]


def _render_precision(p: Mapping[str, Any] | None, max_rows: int) -> list[str]:
    if p is None:
        return ["precision: not recorded (a plan from before precision policies)"]
    head = (f"precision: policy {p['policy']}, budget {p['budget']}"
            + (" (default)" if p["budget_default"] else ""))
    out = [head]
    if not p["decisions"]:
        out.append("  every vertex computes at the model's own precision: no evidence needed")
        return out
    out.append(f"  evidence: {p['inputs']}" if p["inputs"] else
               "  evidence: none run (no lowering was possible and faster)")
    for dt, text in sorted(p["schemes"].items()):
        out.append(f"  {dt} emulated as: {text}")
    est = p["estimated"]
    if p["lowered"]:
        out.append(f"  {_n(len(p['lowered']), 'vertex', 'vertices')} lowered; the whole "
                   f"assignment emulated: "
                   + ", ".join(f"{k} {v:.4g}" for k, v in sorted(est.items()))
                   + f" (combined estimate {p['combined_estimate']:.3g}, "
                   + f"{_n(p['rechecks'], 're-check', 're-checks')})")
    else:
        out.append("  nothing lowered: the outputs are the model's own")
    if p["fallback"]:
        out.append(f"  kept at higher precision for the budget: {', '.join(p['fallback'])}")
    rows = sorted(p["decisions"], key=lambda d: (
        {"lowered": 0, "fallback": 1, "admitted": 2, "kept": 3}[d["state"]],
        -(d.get("gain_s") or 0.0), d["vertex"]))
    out += _table(["vertex", "precision", "decision", "time gain", "error", "why"],
                  [_decision_line(d) for d in rows[:max_rows]], indent="  ", left=(0, 1, 2, 5))
    if len(rows) > max_rows:
        out.append(f"  ... and {len(rows) - max_rows} more decisions")
    for note in p["notes"]:
        out.append(f"  note: {note}")
    return out


def _render_task(t: Mapping[str, Any], indent: str) -> list[str]:
    out = [f"{indent}task {t['name']} on {t['resource']} lane {t['lane']}: "
           f"{_s(t['start_s'])} -> {_s(t['end_s'])} ({_s(t['duration_s'])}, "
           f"interval {_s(t['low_s'])} .. {_s(t['high_s'])})",
           f"{indent}  terms: " + (", ".join(f"{k} {_s(v)}" for k, v in t["terms_s"].items())
                                  or "none"),
           f"{indent}  source {t['source']}, bottleneck {t['bottleneck']}"]
    if t.get("deps"):
        out.append(f"{indent}  after: {', '.join(t['deps'])}")
    if t.get("assumptions"):
        out.append(f"{indent}  assumptions:")
        for k, v in t["assumptions"].items():
            out.append(f"{indent}    {k}: {v:.6g}" if isinstance(v, float)
                       else f"{indent}    {k}: {v}")
    return out


def _render_op(o: Mapping[str, Any]) -> list[str]:
    head = (f"vertex {o['vertex']}" if o["is_vertex"]
            else f"op {o['name']} (part of vertex {o['vertex']}; figures are the vertex's)")
    out = [f"{head}: {o['device']}/{o['dtype']}, pattern {o['pattern']}"]
    for op in o["ops"]:
        out.append(f"  {op['kind']:<14} {op['where']}")
    if o["inputs"]:
        out.append(f"  reads {', '.join(o['inputs'])}")
    if o["params"]:
        out.append(f"  weights {', '.join(o['params'])}")
    out.append(f"  writes {', '.join(o['outputs']) or '-'}"
               + (f"; internal {', '.join(o['internal'])}" if o["internal"] else ""))
    if o["scratch_bytes"]:
        out.append(f"  scratch {_b(o['scratch_bytes'])}")
    if o["task"] is not None:
        out += _render_task(o["task"], "  ")
    if o["waited_for"]:
        out.append(f"  started when {o['waited_for']['task']} ended"
                   + (" (on the critical path)" if o["on_critical_path"] else ""))
    if o["alternatives"]:
        out.append("  alternatives (cheapest dtype per device, uncontended):")
        rows = []
        for a in o["alternatives"]:
            if a.get("total_s") is None:
                rows.append([a["device"], "-", "-", "-", a.get("reason", "")])
            else:
                d = a.get("delta_s")
                rows.append([a["device"], a["dtype"], _s(a["total_s"]),
                             "-" if d is None else ("+" if d >= 0 else "-") + _s(abs(d)), ""])
        out += _table(["device", "dtype", "cost", "vs here", "why not"], rows, indent="    ",
                      left=2)
    if o.get("precision"):
        out.append("  precision decisions:")
        out += _table(["vertex", "precision", "decision", "time gain", "error", "why"],
                      [_decision_line(d) for d in o["precision"]], indent="    ",
                      left=(0, 1, 2, 5))
    for title, key in (("arrives", "crossings_in"), ("leaves", "crossings_out")):
        if o[key]:
            out.append(f"  {title}:")
            for c in o[key]:
                out += _render_crossing(c, indent="    ")
    return out


def _render_workload(w: Mapping[str, Any]) -> list[str]:
    out = [f"workload: {len(w['models'])} models, a request of each at once"]
    rows = []
    for m in w["models"]:
        slo = "-" if m["slo_p99_s"] is None else _s(m["slo_p99_s"])
        verdict = {None: "", True: "within", False: "OVER"}[m["within_slo"]]
        rows.append([m["name"], m["ref"], str(m["ops"]), ", ".join(m["devices"]) or "-",
                     str(len(m["partitions"])), _s(m["latency_s"]), _s(m["contention_s"]),
                     _rate(m["rate_per_s"]), str(m["priority"]), f"{slo} {verdict}".strip()])
    out += _table(["model", "ref", "ops", "devices", "parts", "latency", "contention",
                   "rate", "prio", "slo p99"], rows, left=(0, 1, 3))
    if w.get("utilization"):
        util = ", ".join(f"{d} {u:.1%}" for d, u in w["utilization"].items())
        out.append(f"  utilization at the models' rates: {util}")
    return out


def _render_edge(e: Mapping[str, Any]) -> list[str]:
    shape = ",".join(str(d) for d in e["shape"])
    made = (f"produced by {e['producer']} on {e['produced_on']}" if e["producer"]
            else (f"a graph input on {e['produced_on']}" if e["produced_on"] else "a weight"))
    out = [f"tensor {e['tensor']}: {e['dtype']}[{shape}] ({_b(e['nbytes'])}, {e['role']}), "
           f"{made}"]
    if e["consumers"]:
        out.append(f"  consumed by {', '.join(e['consumers'])}"
                   + ("; a graph output" if e["graph_output"] else ""))
    elif e["graph_output"]:
        out.append("  a graph output")
    out.append(f"  {e['status']}")
    for c in e["crossings"]:
        out += _render_crossing(c)
    return out


def render_explain(data: Mapping[str, Any], *, max_rows: int = 40) -> str:
    """Plain text of ``explain``'s data (deterministic). Long lists (critical path,
    crossings) show ``max_rows`` entries and say how many more there are."""
    lines: list[str] = []
    if "summary" in data:
        lines += _render_summary(data["summary"])
        lines.append("")
        if data.get("workload"):
            lines += _render_workload(data["workload"])
            lines.append("")
        lines += _render_critical(data["critical_path"], max_rows)
        lines.append("")
        lines += _render_crossings(data["crossings"], max_rows)
        lines.append("")
        lines += _render_partitions(data["partitions"], max_rows)
        lines.append("")
        lines += _render_memory(data["memory"])
        lines.append("")
        lines += _render_bound(data["bound"])
        lines.append("")
        lines += _render_search(data["search"], data["summary"]["makespan_s"])
        lines.append("")
        lines += _render_precision(data.get("precision"), max_rows)
    else:
        lines += _header_line(data["header"])
        if "op" in data:
            lines.append("")
            lines += _render_op(data["op"])
        if "edge" in data:
            lines.append("")
            lines += _render_edge(data["edge"])
    return "\n".join(lines) + "\n"
