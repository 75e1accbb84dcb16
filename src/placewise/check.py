"""An independent plan checker: re-derive from the plan file (and, when given, the graph and
the machine) that the schedule it records is possible, without trusting the scheduler.

``check_plan(plan, graph=None, machine=None)`` returns a list of ``Finding`` (empty: the
plan passes). What it checks (``Check``):

- ``timing``: every task starts at or after 0 and ends after it starts, its predicted terms
  add up to its duration, its duration lies in its interval (a warning otherwise), the
  makespan is the last end, the lower bound does not exceed the makespan, and the critical
  path is a chain in time;
- ``precedence``: every dependency of a task ends before the task starts;
- ``data``: every input a vertex reads is on its device, in the representation it computes
  with, before it starts (produced there, or brought by a transfer or a conversion that
  ended in time); every transfer and conversion has its source copy in time, transfers use
  a link that joins their two devices, and graph outputs reach the host by the end;
- ``overlap``: no two tasks at once on one lane of an exclusive resource (a device's compute
  lanes, a link direction), and no lane beyond the resource's lanes; no two devices that
  share a CPU core computing at once (``Device.cores`` from the machine when given, else
  the cores the plan records on its tasks), and recorded cores that match the machine's;
- ``memory``: every checked tier's peak is within its capacity, the recorded peak, timeline,
  breakdown and feasibility agree, the accounting balances to zero at the end, and (with the
  graph) the weights each device must hold fit and are not more than its recorded peak;
- ``support`` (needs the machine): every vertex is on a device of the machine that computes
  in its dtype and runs every op kind of the vertex, in that dtype (a local device has int8
  kernels only for ``graph.ir.INT8_KINDS``);
- ``coverage``: every vertex has exactly one compute task, on its device; with the graph,
  every op of the graph is placed exactly once and nothing else is;
- ``precision``: a vertex computes at another precision than the model's own (a lowering)
  only where the plan's precision record names it, never under ``keep``, and the record's
  estimated error is within its budget (plans without a record are not held to one).

A graph or machine whose fingerprint differs from the plan's is an ``InputError`` (the
plan is not about them), raised before any check.

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
>>> check_plan(plan, g, m)
[]
>>> tasks = list(plan.schedule.tasks)
>>> tasks[1] = tasks[1].model_copy(update={"start_s": 1e-6, "end_s": 2.8e-6})
>>> bad = plan.model_copy(update={"schedule": plan.schedule.model_copy(
...     update={"tasks": tuple(tasks)})})
>>> sorted({f.check.value for f in check_plan(bad) if f.severity is Severity.ERROR})
['data', 'precedence', 'timing']
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from placewise.cost.roofline import local_kernel_gap
from placewise.graph.ir import Graph, Role
from placewise.hardware.spec import Machine
from placewise.plan import Plan, TaskRecord, TierRecord, check_fingerprints
from placewise.schedule.placement import held_dtype, natural_dtype
from placewise.schedule.simulate import ResourceKind, TaskKind
from placewise.units import DType, Layout, format_bytes, format_seconds

__all__ = [
    "Check",
    "Finding",
    "Severity",
    "check_plan",
    "checks_run",
    "findings_json",
    "render_findings",
]


class Check(Enum):
    TIMING = "timing"
    PRECEDENCE = "precedence"
    DATA = "data"
    OVERLAP = "overlap"
    MEMORY = "memory"
    SUPPORT = "support"
    COVERAGE = "coverage"
    PRECISION = "precision"


class Severity(Enum):
    ERROR = "error"  # the schedule is impossible or the file contradicts itself
    WARNING = "warning"  # suspicious but possible (e.g. a duration outside its interval)


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem: which check found it, how bad, what it is about (a task, op, vertex,
    tensor, resource lane or tier) and a message naming the numbers."""

    check: Check
    severity: Severity
    subject: str
    message: str

    def line(self) -> str:
        return f"{self.severity.value} [{self.check.value}] {self.subject}: {self.message}"


def checks_run(*, graph: bool, machine: bool) -> tuple[Check, ...]:
    """The checks ``check_plan`` runs given a graph and/or a machine (``support`` needs the
    machine; ``coverage`` of ops needs the graph, that of vertices always runs)."""
    out = [Check.TIMING, Check.PRECEDENCE, Check.DATA, Check.OVERLAP, Check.MEMORY]
    if machine:
        out.append(Check.SUPPORT)
    out.append(Check.COVERAGE)
    out.append(Check.PRECISION)
    return tuple(out)


class _Out:
    def __init__(self) -> None:
        self.items: list[Finding] = []

    def error(self, check: Check, subject: str, message: str) -> None:
        self.items.append(Finding(check, Severity.ERROR, subject, message))

    def warn(self, check: Check, subject: str, message: str) -> None:
        self.items.append(Finding(check, Severity.WARNING, subject, message))


def _fmt(t: float) -> str:
    return format_seconds(t)


# ---- timing and precedence -------------------------------------------------------------------
def _timing(plan: Plan, out: _Out, tol: float) -> None:
    last_end = 0.0
    for t in plan.schedule.tasks:
        subject = f"task {t.name}"
        if t.start_s < -tol:
            out.error(Check.TIMING, subject, f"starts before 0 ({_fmt(t.start_s)})")
        if t.end_s < t.start_s - tol:
            out.error(Check.TIMING, subject,
                      f"ends ({_fmt(t.end_s)}) before it starts ({_fmt(t.start_s)})")
        dur = t.end_s - t.start_s
        total = sum(t.terms_s.values())
        if abs(total - dur) > 1e-6 * max(abs(dur), abs(total)) + tol:
            out.error(Check.TIMING, subject, f"its terms add up to {_fmt(total)} but it lasts "
                                             f"{_fmt(dur)}")
        if t.low_s > t.high_s + tol:
            out.error(Check.TIMING, subject,
                      f"its interval is empty ({_fmt(t.low_s)} > {_fmt(t.high_s)})")
        elif dur < t.low_s - tol - 1e-9 * dur or dur > t.high_s + tol + 1e-9 * dur:
            out.warn(Check.TIMING, subject, f"lasts {_fmt(dur)}, outside its interval "
                                            f"{_fmt(t.low_s)} .. {_fmt(t.high_s)}")
        last_end = max(last_end, t.end_s)
    if abs(plan.makespan_s - last_end) > tol:
        out.error(Check.TIMING, "makespan", f"the plan says {_fmt(plan.makespan_s)} but the "
                                            f"last task ends at {_fmt(last_end)}")
    if plan.lower_bound_s > plan.makespan_s + tol:
        out.error(Check.TIMING, "lower bound", f"{_fmt(plan.lower_bound_s)} exceeds the "
                                               f"makespan {_fmt(plan.makespan_s)}")
    idx = plan.task_index()
    chain = [idx[n] for n in plan.schedule.critical_path if n in idx]
    for a, b in itertools.pairwise(chain):
        if a.end_s > b.start_s + tol:
            out.error(Check.TIMING, "critical path", f"{a.name} ends at {_fmt(a.end_s)}, after "
                                                     f"the next task {b.name} starts "
                                                     f"({_fmt(b.start_s)})")


def _precedence(plan: Plan, idx: Mapping[str, TaskRecord], out: _Out, tol: float) -> None:
    for t in plan.schedule.tasks:
        for d in t.deps:
            dep = idx.get(d)
            if dep is None:
                out.error(Check.PRECEDENCE, f"task {t.name}", f"depends on unknown task {d!r}")
            elif dep.end_s > t.start_s + tol:
                out.error(Check.PRECEDENCE, f"task {t.name}",
                          f"starts at {_fmt(t.start_s)} before its dependency {d} ends "
                          f"({_fmt(dep.end_s)})")


# ---- data availability ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _TensorInfo:
    dtype: DType
    layout: Layout
    role: Role


def _tensor_info(plan: Plan, graph: Graph | None) -> dict[str, _TensorInfo]:
    if graph is not None:
        return {t.name: _TensorInfo(t.dtype, t.layout, t.role) for t in graph.tensors}
    return {n: _TensorInfo(r.dtype, r.layout, r.role) for n, r in plan.tensors.items()}


def _vertex_io(plan: Plan, graph: Graph | None) -> dict[str, tuple[list[str], list[str]]]:
    """Vertex -> (tensors it reads from outside, tensors it produces), from the graph's ops
    when given (the vertex composition is the plan's), else from the plan's regions."""
    out: dict[str, tuple[list[str], list[str]]] = {}
    for v, r in plan.regions.items():
        if graph is None or not all(graph.has_op(o) for o in r.ops):
            out[v] = (list(r.inputs), list(r.outputs) + list(r.internal))
            continue
        ops = [graph.op(o) for o in r.ops]
        produced = {t for o in ops for t in o.outputs}
        ins: dict[str, None] = {}
        for o in ops:
            for t in o.inputs:
                if t and t not in produced and graph.tensor(t).role is not Role.PARAM:
                    ins[t] = None
        out[v] = (list(ins), list(produced))
    return out


def _rep(info: _TensorInfo, dtype: DType | None = None) -> str:
    dt = info.dtype if dtype is None else held_dtype(info.dtype, dtype)
    return f"{dt.value}/{info.layout.value}"


def _data(plan: Plan, graph: Graph | None, machine: Machine | None, out: _Out,
          tol: float) -> None:
    tensors = _tensor_info(plan, graph)
    io = _vertex_io(plan, graph)
    inputs = list(graph.inputs) if graph is not None else list(plan.graph_inputs)
    outputs = list(graph.outputs) if graph is not None else list(plan.graph_outputs)
    avail: dict[tuple[str, str, str], float] = {}

    def provide(key: tuple[str, str, str], t: float) -> None:
        if t < avail.get(key, math.inf):
            avail[key] = t

    for name in inputs:
        if name in tensors:
            provide((name, plan.host, _rep(tensors[name])), 0.0)
    tasks = plan.schedule.tasks
    for t in tasks:
        if t.kind is TaskKind.COMPUTE and t.vertex is not None and t.vertex in io:
            dt = DType.parse(plan.placement[t.vertex]["dtype"])
            for name in io[t.vertex][1]:
                if name in tensors:
                    provide((name, t.device, _rep(tensors[name], dt)), t.end_s)
        elif t.kind is TaskKind.TRANSFER and t.tensor is not None and t.dst_device is not None:
            provide((t.tensor, t.dst_device, t.src_rep or ""), t.end_s)
        elif t.kind is TaskKind.CONVERSION and t.tensor is not None:
            provide((t.tensor, t.device, t.dst_rep or ""), t.end_s)

    def need(subject: str, key: tuple[str, str, str], by: float, what: str) -> None:
        got = avail.get(key)
        if got is None:
            out.error(Check.DATA, subject, f"{what}: {key[0]} is never held on {key[1]} as "
                                           f"{key[2]}")
        elif got > by + tol:
            out.error(Check.DATA, subject, f"{what}: {key[0]} is on {key[1]} as {key[2]} only "
                                           f"at {_fmt(got)}, after {_fmt(by)}")

    links = _links(plan, machine)
    for t in tasks:
        subject = f"task {t.name}"
        if t.kind is TaskKind.COMPUTE:
            if t.vertex is None or t.vertex not in io:
                out.error(Check.DATA, subject, "a compute task that names no known vertex")
                continue
            dt = DType.parse(plan.placement[t.vertex]["dtype"])
            for name in io[t.vertex][0]:
                if name not in tensors:
                    out.error(Check.DATA, subject, f"reads unknown tensor {name!r}")
                    continue
                need(subject, (name, t.device, _rep(tensors[name], dt)), t.start_s, "input")
        elif t.tensor is None:
            out.error(Check.DATA, subject, f"a {t.kind.value} task that names no tensor")
        elif t.kind is TaskKind.TRANSFER:
            if t.dst_device is None or t.src_rep is None:
                out.error(Check.DATA, subject, "a transfer without destination or representation")
                continue
            need(subject, (t.tensor, t.device, t.src_rep), t.start_s, "source copy")
            joined = links.get(t.link or "")
            if joined is None:
                out.error(Check.DATA, subject, f"uses unknown link {t.link!r}")
            elif set(joined) != {t.device, t.dst_device}:
                out.error(Check.DATA, subject, f"link {t.link} joins {' and '.join(joined)}, not "
                                               f"{t.device} and {t.dst_device}")
        else:
            if t.src_rep is None or t.dst_rep is None:
                out.error(Check.DATA, subject, "a conversion without representations")
                continue
            need(subject, (t.tensor, t.device, t.src_rep), t.start_s, "source copy")
    if plan.outputs_to_host:
        for name in outputs:
            if name in tensors:
                need(f"output {name}", (name, plan.host, _rep(tensors[name])), plan.makespan_s,
                     "delivery to the host")


def _links(plan: Plan, machine: Machine | None) -> dict[str, tuple[str, str]]:
    if machine is not None:
        return {ln.name: ln.endpoints for ln in machine.links}
    return {ln.name: ln.endpoints for ln in plan.machine.links}


# ---- exclusive resources ----------------------------------------------------------------------
def _exclusive(plan: Plan, machine: Machine | None, out: _Out) -> dict[str, int]:
    """Exclusive resource -> lanes, from the plan, cross-checked with the machine."""
    lanes: dict[str, int] = {}
    shared: set[str] = set()
    for r in plan.schedule.resources:
        if r.kind is ResourceKind.SHARED:
            shared.add(r.name)
        else:
            lanes[r.name] = r.lanes
    if machine is not None:
        machine_shared = {s.name for s in machine.shared_resources}
        for name in sorted(shared - machine_shared):
            out.error(Check.OVERLAP, f"resource {name}", "the plan treats it as shared "
                                                         "bandwidth, the machine has no such "
                                                         "shared resource")
        for d in machine.devices:
            if d.name in lanes and lanes[d.name] != d.lanes:
                out.warn(Check.OVERLAP, f"resource {d.name}",
                         f"the plan uses {lanes[d.name]} lanes, the machine spec gives "
                         f"{d.lanes} (a lanes override?)")
    return lanes


def _overlap(plan: Plan, machine: Machine | None, out: _Out, tol: float) -> None:
    lanes = _exclusive(plan, machine, out)
    shared = {r.name for r in plan.schedule.resources if r.kind is ResourceKind.SHARED}
    on_lane: dict[tuple[str, int], list[TaskRecord]] = {}
    for t in plan.schedule.tasks:
        if t.kind is not TaskKind.TRANSFER and t.resource != t.device:
            out.error(Check.OVERLAP, f"task {t.name}", f"runs on resource {t.resource}, not on "
                                                       f"its device {t.device}'s lanes")
        if t.resource in shared:
            continue
        if t.resource not in lanes:
            out.error(Check.OVERLAP, f"task {t.name}", f"uses resource {t.resource!r}, which "
                                                       f"the plan does not list")
            continue
        if not 0 <= t.lane < lanes[t.resource]:
            out.error(Check.OVERLAP, f"task {t.name}", f"uses lane {t.lane} of {t.resource}, "
                                                       f"which has {lanes[t.resource]}")
        on_lane.setdefault((t.resource, t.lane), []).append(t)
    for (res, lane), ts in sorted(on_lane.items()):
        ts.sort(key=lambda t: (t.start_s, t.end_s, t.name))
        busy_until: TaskRecord | None = None
        for t in ts:
            if busy_until is not None and t.start_s < busy_until.end_s - tol:
                out.error(Check.OVERLAP, f"{res} lane {lane}",
                          f"{t.name} starts at {_fmt(t.start_s)} while {busy_until.name} "
                          f"runs until {_fmt(busy_until.end_s)}")
            if busy_until is None or t.end_s > busy_until.end_s:
                busy_until = t
    _core_overlap(plan, machine, out, tol)


def _core_overlap(plan: Plan, machine: Machine | None, out: _Out, tol: float) -> None:
    """Devices that share a CPU core never run compute or conversion tasks at once."""
    dev_cores: dict[str, tuple[int, ...]] = {}
    if machine is not None:
        dev_cores = {d.name: tuple(sorted(set(d.cores))) for d in machine.devices if d.cores}
    on_core: dict[int, list[TaskRecord]] = {}
    for t in plan.schedule.tasks:
        if t.kind is TaskKind.TRANSFER:
            if t.cores:
                out.error(Check.OVERLAP, f"task {t.name}", "a transfer that records cores")
            continue
        recorded = tuple(sorted(set(t.cores or ())))
        if machine is not None:
            cores = dev_cores.get(t.device, ())
            if t.cores is not None and recorded != cores:
                out.error(Check.OVERLAP, f"task {t.name}",
                          f"records cores {list(recorded)}, but {t.device} runs on "
                          f"{list(cores) if cores else 'no pinned cores'}")
        else:
            cores = recorded
        for c in cores:
            on_core.setdefault(c, []).append(t)
    for c, ts in sorted(on_core.items()):
        if len({t.device for t in ts}) < 2:
            continue
        ts.sort(key=lambda t: (t.start_s, t.end_s, t.name))
        last: dict[str, TaskRecord] = {}  # device -> its task that ends last so far
        for t in ts:
            for dev, other in sorted(last.items()):
                if dev != t.device and t.start_s < other.end_s - tol:
                    out.error(Check.OVERLAP, f"core {c}",
                              f"{t.name} on {t.device} starts at {_fmt(t.start_s)} while "
                              f"{other.name} on {dev} holds the core until "
                              f"{_fmt(other.end_s)}")
            prev = last.get(t.device)
            if prev is None or t.end_s > prev.end_s:
                last[t.device] = t


# ---- memory -----------------------------------------------------------------------------------
def _tier(subject: str, u: TierRecord, out: _Out, capacity: int | None) -> None:
    if u.checked and u.peak_bytes > u.capacity_bytes:
        out.error(Check.MEMORY, subject, f"peaks at {format_bytes(u.peak_bytes)} at "
                                         f"{_fmt(u.peak_time_s)}, over its capacity "
                                         f"{format_bytes(u.capacity_bytes)}")
    if capacity is not None and u.capacity_bytes != capacity:
        out.error(Check.MEMORY, subject, f"the plan gives a capacity of "
                                         f"{format_bytes(u.capacity_bytes)}, the machine "
                                         f"{format_bytes(capacity)}")
    top = max((b for _, b in u.timeline), default=0)
    if top != u.peak_bytes:
        out.error(Check.MEMORY, subject, f"the timeline reaches {format_bytes(top)} but the "
                                         f"recorded peak is {format_bytes(u.peak_bytes)}")
    if u.peak_bytes > 0 and u.breakdown.total != u.peak_bytes:
        out.error(Check.MEMORY, subject, f"the breakdown at the peak adds up to "
                                         f"{format_bytes(u.breakdown.total)}, not the peak "
                                         f"{format_bytes(u.peak_bytes)}")
    if u.final_bytes != 0 or (u.timeline and u.timeline[-1][1] != 0):
        left = u.final_bytes or u.timeline[-1][1]
        out.error(Check.MEMORY, subject, f"the accounting does not balance: "
                                         f"{format_bytes(left)} are still held at the end")
    if any(b < 0 for _, b in u.timeline):
        out.error(Check.MEMORY, subject, "the timeline goes below zero bytes")
    times = [t for t, _ in u.timeline]
    if any(b < a for a, b in itertools.pairwise(times)):
        out.error(Check.MEMORY, subject, "the timeline is not in time order")


def _weights(plan: Plan, graph: Graph) -> dict[str, int]:
    """Bytes of weights each device must hold: every parameter its vertices read, in their
    held dtype, one copy per (parameter, representation) per device."""
    seen: dict[tuple[str, str, DType], int] = {}
    for v, r in plan.regions.items():
        a = plan.placement[v]
        dt = DType.parse(a["dtype"])
        for op in r.ops:
            if not graph.has_op(op):
                continue
            for name in graph.op(op).inputs:
                if not name:
                    continue
                t = graph.tensor(name)
                if t.role is Role.PARAM:
                    held = held_dtype(t.dtype, dt)
                    seen[(name, a["device"], held)] = held.nbytes(t.numel)
    out: dict[str, int] = {}
    for (_, dev, _), n in seen.items():
        out[dev] = out.get(dev, 0) + n
    return out


def _memory(plan: Plan, graph: Graph | None, machine: Machine | None, out: _Out) -> None:
    mem = plan.memory
    any_over = False
    for dev, tiers in sorted(mem.devices.items()):
        for tier, u in sorted(tiers.items()):
            cap = None
            if machine is not None:
                try:
                    cap = machine.device(dev).tier(tier).capacity_bytes
                except KeyError:
                    out.error(Check.MEMORY, f"{dev}/{tier}", "the machine has no such tier")
            _tier(f"{dev}/{tier}", u, out, cap)
            any_over |= u.checked and not u.fits
    for p in mem.pools:
        _tier(f"pool {p.resource}", p, out, None)
        any_over |= p.checked and not p.fits
    if mem.feasible and any_over:
        out.error(Check.MEMORY, "memory", "the plan says it fits, but a tier overflows")
    if not mem.feasible and not any_over:
        out.error(Check.MEMORY, "memory", "the plan says it does not fit, but every tier does")
    if graph is not None:
        for dev, need in sorted(_weights(plan, graph).items()):
            tiers = mem.devices.get(dev, {})
            if not tiers:
                out.error(Check.MEMORY, dev, f"holds {format_bytes(need)} of weights but the "
                                             f"plan records no memory for it")
                continue
            u = next(iter(tiers.values())) if len(tiers) == 1 else max(
                tiers.values(), key=lambda x: x.peak_bytes)
            if need > u.peak_bytes:
                out.error(Check.MEMORY, dev, f"its weights alone take {format_bytes(need)}, "
                                             f"more than its recorded peak "
                                             f"{format_bytes(u.peak_bytes)}")
            if need > u.capacity_bytes:
                out.error(Check.MEMORY, dev, f"its weights alone take {format_bytes(need)}, "
                                             f"more than its capacity "
                                             f"{format_bytes(u.capacity_bytes)}")


# ---- support and coverage ---------------------------------------------------------------------
def _support(plan: Plan, graph: Graph | None, machine: Machine, out: _Out) -> None:
    names = set(machine.device_names)
    for v, a in sorted(plan.placement.items()):
        subject = f"vertex {v}"
        dev_name, dt = a["device"], DType.parse(a["dtype"])
        if dev_name not in names:
            out.error(Check.SUPPORT, subject, f"is on {dev_name!r}, which machine "
                                              f"{machine.name!r} does not have")
            continue
        dev = machine.device(dev_name)
        if dt not in dev.dtypes:
            out.error(Check.SUPPORT, subject, f"computes in {dt.value}, which {dev_name} does "
                                              f"not (it has {', '.join(d.value for d in dev.dtypes)})")
        for op in plan.regions[v].ops:
            kind = graph.op(op).kind if graph is not None and graph.has_op(op) \
                else plan.ops[op].kind
            if not dev.supports(kind):
                out.error(Check.SUPPORT, f"op {op}", f"is a {kind.value} op on {dev_name}, "
                                                     f"which does not run that kind")
            elif (gap := local_kernel_gap(dev, kind, dt)) is not None:
                out.error(Check.SUPPORT, f"op {op}", f"is a {kind.value} op computing in "
                                                     f"{dt.value} on {dev_name} (vertex {v}), "
                                                     f"which has no such kernel: {gap}")


def _coverage(plan: Plan, graph: Graph | None, out: _Out) -> None:
    compute: dict[str, list[TaskRecord]] = {}
    for t in plan.schedule.tasks:
        if t.kind is TaskKind.COMPUTE and t.vertex is not None:
            compute.setdefault(t.vertex, []).append(t)
    for v, a in sorted(plan.placement.items()):
        ts = compute.get(v, [])
        if not ts:
            out.error(Check.COVERAGE, f"vertex {v}", "is placed but never computed")
        elif len(ts) > 1:
            out.error(Check.COVERAGE, f"vertex {v}", f"is computed {len(ts)} times")
        else:
            for t in ts:
                if t.device != a["device"]:
                    out.error(Check.COVERAGE, f"vertex {v}", f"is placed on {a['device']} but "
                                                             f"computed on {t.device}")
    if graph is None:
        return
    placed: dict[str, str] = {}
    for v, r in plan.regions.items():
        for name in r.ops:
            if name in placed:
                out.error(Check.COVERAGE, f"op {name}", f"is in vertices {placed[name]} and {v}")
            placed[name] = v
    for op in graph.ops:
        if op.name not in placed:
            out.error(Check.COVERAGE, f"op {op.name}", f"is not placed ({op.where()})")
        elif op.name in plan.ops and plan.ops[op.name].kind is not op.kind:
            out.error(Check.COVERAGE, f"op {op.name}", f"the plan records kind "
                                                       f"{plan.ops[op.name].kind.value}, the "
                                                       f"graph {op.kind.value}")
    for name in sorted(set(placed) - {op.name for op in graph.ops}):
        out.error(Check.COVERAGE, f"op {name}", "is placed but the graph has no such op")


def _precision(plan: Plan, out: _Out) -> None:
    """Every vertex computing at another precision than the model's own is a lowering the
    precision record names (with evidence within the budget), and nothing else is."""
    pr = plan.precision
    if pr is None:
        return  # a plan from before precision policies: nothing to hold it to
    for v, r in sorted(plan.regions.items()):
        dt = DType.parse(plan.placement[v]["dtype"])
        nat = natural_dtype(plan.tensors[t].dtype for t in (*r.inputs, *r.params,
                                                            *r.outputs, *r.internal)
                            if t in plan.tensors)
        lowering = dt is not nat and not (dt.is_float and dt.bits > nat.bits)
        named = pr.lowered.get(v)
        if lowering and named != dt.value:
            out.error(Check.PRECISION, f"vertex {v}", f"computes in {dt.value}, not the "
                                                      f"model's {nat.value}, and the precision "
                                                      f"record does not name it (policy "
                                                      f"{pr.policy})")
        elif not lowering and named is not None:
            out.error(Check.PRECISION, f"vertex {v}", f"the precision record says it is lowered "
                                                      f"to {named}; it computes in {dt.value}")
    if pr.policy == "keep" and pr.lowered:
        out.error(Check.PRECISION, "precision", f"policy keep, yet {len(pr.lowered)} vertices "
                                                f"are lowered")
    if pr.lowered and pr.estimated_error > pr.budget_limit * (1 + 1e-9):
        out.error(Check.PRECISION, "precision", f"the estimated {pr.budget_metric} error "
                                                f"{pr.estimated_error:.4g} breaks the budget "
                                                f"{pr.budget_metric}={pr.budget_value:g}")


# ---- entry points -----------------------------------------------------------------------------
def check_plan(plan: Plan, graph: Graph | None = None, machine: Machine | None = None, *,
               rel_tol: float = 1e-9, file: str | None = None) -> list[Finding]:
    """Check ``plan`` (see the module docstring); an empty list means it passes.

    ``rel_tol``: times closer than ``rel_tol x makespan`` are equal (float noise).
    ``InputError`` when ``graph`` or ``machine`` is not the one the plan was made for.
    """
    check_fingerprints(plan, graph, machine, file=file)
    scale = max([plan.makespan_s, *(t.end_s for t in plan.schedule.tasks)], default=0.0)
    tol = rel_tol * scale if scale > 0 else 0.0
    out = _Out()
    idx = plan.task_index()
    _timing(plan, out, tol)
    _precedence(plan, idx, out, tol)
    _data(plan, graph, machine, out, tol)
    _overlap(plan, machine, out, tol)
    _memory(plan, graph, machine, out)
    if machine is not None:
        _support(plan, graph, machine, out)
    _coverage(plan, graph, out)
    _precision(plan, out)
    return out.items


def findings_json(findings: Sequence[Finding], *,
                  checks: Iterable[Check] | None = None) -> dict[str, Any]:
    """The findings as a JSON object (``ok`` is False when there is an error)."""
    errors = sum(1 for f in findings if f.severity is Severity.ERROR)
    return {
        "ok": errors == 0,
        "errors": errors,
        "warnings": len(findings) - errors,
        "checks": [c.value for c in (checks or ())],
        "findings": [{"check": f.check.value, "severity": f.severity.value,
                      "subject": f.subject, "message": f.message} for f in findings],
    }


def render_findings(findings: Sequence[Finding], *, checks: Iterable[Check] | None = None,
                    max_lines: int = 50) -> str:
    """Plain text: a verdict line, then one line per finding (errors first, at most
    ``max_lines``)."""
    errors = [f for f in findings if f.severity is Severity.ERROR]
    warnings = [f for f in findings if f.severity is Severity.WARNING]
    ran = ", ".join(c.value for c in checks) if checks is not None else None
    if errors:
        head = f"plan FAILS: {len(errors)} error{'s' if len(errors) != 1 else ''}"
    else:
        head = "plan OK"
    if warnings:
        head += f", {len(warnings)} warning{'s' if len(warnings) != 1 else ''}"
    if ran:
        head += f" (checked: {ran})"
    lines = [head]
    shown = [*errors, *warnings]
    lines += ["  " + f.line() for f in shown[:max_lines]]
    if len(shown) > max_lines:
        lines.append(f"  ... {len(shown) - max_lines} more")
    return "\n".join(lines) + "\n"
