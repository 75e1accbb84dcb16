"""Plan to program: every task of a scheduled placement becomes a step on the worker of the
device that runs it, in the plan's order per device; compute tasks are grouped into
*partitions* (``partitions_of``), each one compiled unit; devices that share cores get core
gates. The executor (``runtime.executor``) runs the program.

**Core gates.** Devices whose ``cores`` overlap (the probed ``local`` machine's ``cpu01``
shares core 0 with ``cpu0`` and core 1 with ``cpu1``) must not compute at the same time:
the scheduler holds a shared core for one device at a time, and its task times assume so.
Data dependencies alone do not keep the workers to that, so the program carries *core gates*
(``ExecProgram.gates``, ``CoreGate``): for every core shared by several devices, the
compute and conversion tasks of those devices in plan start order; where two consecutive
ones belong to different devices, the later task waits until the earlier one has finished
in the same request. Gates that the program already implies are dropped. Transfers are never
gated. A program without shared cores has no gates.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from placewise.cost.model import Representation
from placewise.errors import InputError, PlacewiseError
from placewise.graph.ir import Graph, Op
from placewise.graph.walk import last_use, topological_order
from placewise.hardware.spec import Device, Machine
from placewise.plan import parse_rep
from placewise.schedule.partitions import Partition, partitions_of
from placewise.schedule.placement import Problem, held_rep
from placewise.schedule.simulate import Schedule, TaskKind
from placewise.units import DType

__all__ = [
    "CoreGate",
    "ExecProgram",
    "ExecStep",
    "ExecTask",
    "ExecVertex",
    "Partition",
    "StepKind",
    "copy_key",
    "partitions_of",
    "plan_partitions",
    "program_from_plan",
    "program_from_schedule",
]


# ---- the program -------------------------------------------------------------------------------


class StepKind(Enum):
    IO_IN = "io_in"
    COMPUTE = "compute"
    CONVERT = "convert"
    SEND = "send"
    RECV = "recv"
    IO_OUT = "io_out"


@dataclass(frozen=True, slots=True)
class ExecTask:
    """One task of the plan's schedule (creation order, which is topological)."""

    index: int
    name: str
    kind: TaskKind
    device: str
    dst_device: str | None
    vertex: str | None
    tensor: str | None
    src_rep: Representation | None
    dst_rep: Representation | None
    deps: tuple[int, ...]
    start_s: float
    end_s: float


@dataclass(frozen=True, slots=True)
class ExecVertex:
    """A compute task's vertex: its ops in order, where and in which precision it runs."""

    name: str
    device: str
    dtype: DType
    ops: tuple[Op, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ExecStep:
    """One step of a worker: reads and writes tensor copies (``copy_key`` names), frees the
    copies whose last reader on this device it is. ``gates_in``: the tasks (on other
    devices) whose gate tokens it waits for before it starts; ``gates_out``: the devices it
    sends its own gate token to once it has run (see ``CoreGate``)."""

    kind: StepKind
    task: int  # index into ExecProgram.tasks; -1 for io steps
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    frees: tuple[str, ...] = ()
    gates_in: tuple[int, ...] = ()
    gates_out: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CoreGate:
    """Task ``after`` must not start, in a request, before task ``before`` (on another
    device that shares ``cores`` with ``after``'s device) has finished in that request: the
    plan runs them one after the other on those cores. Both are compute or conversion
    tasks (indices into ``ExecProgram.tasks``)."""

    before: int
    after: int
    cores: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ExecProgram:
    """What the workers run: tasks, vertices, and each device's steps in plan order.

    ``gates``: the core gates between devices that share cores (empty when none do; see
    ``CoreGate`` and the module docstring), already written into the steps
    (``ExecStep.gates_in`` / ``gates_out``)."""

    graph: Graph
    host: str
    tasks: tuple[ExecTask, ...]
    vertices: Mapping[str, ExecVertex]
    devices: tuple[Device, ...]
    steps: Mapping[str, tuple[ExecStep, ...]]
    makespan_s: float
    gates: tuple[CoreGate, ...] = ()
    #: the compiled units (``Partition``), in execution order
    partitions: tuple[Partition, ...] = ()
    _by_name: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {t.name: t.index for t in self.tasks})

    def task(self, name: str) -> ExecTask:
        try:
            return self.tasks[self._by_name[name]]
        except KeyError:
            raise KeyError(f"the program has no task {name!r}") from None

    def device(self, name: str) -> Device:
        for d in self.devices:
            if d.name == name:
                return d
        raise KeyError(f"the program has no device {name!r}")

    def transfers(self) -> list[ExecTask]:
        return [t for t in self.tasks if t.kind is TaskKind.TRANSFER]

    def where(self, task: int) -> str:
        """'task X' plus 'op Y (from ...)' when the task runs one op, for error messages."""
        if task < 0 or task >= len(self.tasks):
            return {-1: "an io step", -2: "start-up"}.get(task, "no task")
        t = self.tasks[task]
        text = f"task {t.name!r}"
        if t.vertex is not None and t.vertex in self.vertices:
            ops = self.vertices[t.vertex].ops
            if len(ops) == 1:
                text += f", {ops[0].where()}"
        return text


def copy_key(tensor: str, rep: Representation) -> str:
    """The name of a tensor copy held in ``rep``.

    >>> copy_key("x", Representation(DType.INT8))
    'x@int8/row_major'
    """
    return f"{tensor}@{rep}"


def program_from_schedule(problem: Problem, schedule: Schedule) -> ExecProgram:
    """The executable program of ``schedule`` (a schedule of ``problem``).

    Raises ``InputError`` when a device the schedule uses is not a local device (it needs
    ``cores`` and a ``backend``) or a vertex computes in a dtype the executor has no
    kernels for (fp32 and int8 run; int8 only on linear/matmul/gemm/conv). Devices that
    share cores get core gates (``ExecProgram.gates``) from the schedule's task times.
    """
    records = schedule.tasks  # by start time, then creation order: a topological order
    index = {t.name: i for i, t in enumerate(records)}
    tasks = [ExecTask(i, t.name, t.kind, t.device, t.dst_device, t.vertex, t.tensor,
                      t.src_rep, t.dst_rep, tuple(sorted(index[d] for d in t.deps)),
                      t.start_s, t.end_s) for i, t in enumerate(records)]
    vertices: dict[str, ExecVertex] = {}
    for t in tasks:
        if t.kind is TaskKind.COMPUTE:
            v = problem.vertex(t.name)
            a = schedule.placement[t.name]
            vertices[t.name] = ExecVertex(t.name, a.device, a.dtype, v.ops, v.inputs,
                                          v.outputs)
    return _build_program(problem.graph, problem.machine, schedule.host, tasks, vertices,
                          schedule.makespan_s)


def program_from_plan(plan: Any, graph: Graph, machine: Machine, *,
                      local_only: bool = True) -> ExecProgram:
    """The executable program of a plan file (``placewise.plan.Plan``) whose graph is
    ``graph`` and whose machine is ``machine`` (fingerprints are the caller's to check).

    ``local_only=False`` skips the check that every device is a local one (``cores`` and a
    ``backend``): the program of a preset plan, whose partitions ``placewise export``
    writes but nothing here runs."""
    tasks, vertices = _plan_tasks(plan, graph)
    return _build_program(graph, machine, plan.host, tasks, vertices, float(plan.makespan_s),
                          local_only)


def plan_partitions(plan: Any, graph: Graph, machine: Machine) -> list[Partition]:
    """The partitions of a plan file (``partitions_of``, the rule ``program_from_plan``
    uses), without building a program: for plans the executor would refuse (a vertex in
    bf16 or fp16, a preset's devices), so that reports can name the units all the same."""
    tasks, vertices = _plan_tasks(plan, graph)
    used = {plan.host} | {t.device for t in tasks} | {t.dst_device for t in tasks
                                                       if t.dst_device is not None}
    cores = {d.name: tuple(d.cores or ()) for d in machine.devices if d.name in used}
    return partitions_of(graph, tasks, vertices, cores, by_model=bool(graph.record.members))


def _plan_tasks(plan: Any, graph: Graph) -> tuple[list[ExecTask], dict[str, ExecVertex]]:
    """A plan file's tasks and compute vertices as the program's records."""
    records = list(plan.schedule.tasks)
    index = {t.name: i for i, t in enumerate(records)}
    tasks = []
    for i, t in enumerate(records):
        try:
            deps = tuple(sorted(index[d] for d in t.deps))
        except KeyError as exc:
            raise InputError(f"task {t.name!r} depends on unknown task {exc.args[0]!r}",
                             place="schedule.tasks") from None
        tasks.append(ExecTask(i, t.name, TaskKind(t.kind), t.device, t.dst_device, t.vertex,
                              t.tensor, parse_rep(t.src_rep) if t.src_rep else None,
                              parse_rep(t.dst_rep) if t.dst_rep else None, deps,
                              float(t.start_s), float(t.end_s)))
    vertices: dict[str, ExecVertex] = {}
    for t in tasks:
        if t.kind is not TaskKind.COMPUTE:
            continue
        reg = plan.regions.get(t.name)
        if reg is None:
            raise InputError("a compute task names no vertex of the plan",
                             place=f"schedule task {t.name!r}")
        a = plan.assignment(t.name)
        try:
            ops = tuple(graph.op(o) for o in reg.ops)
        except PlacewiseError:
            raise InputError(f"vertex {t.name!r} names an op the model does not have",
                             place=f"regions.{t.name}") from None
        vertices[t.name] = ExecVertex(t.name, a.device, a.dtype, ops, tuple(reg.inputs),
                                      tuple(reg.outputs))
    return tasks, vertices


def _build_program(g: Graph, m: Machine, host: str, tasks: list[ExecTask],
                   vertices: dict[str, ExecVertex], makespan_s: float,
                   local_only: bool = True) -> ExecProgram:
    """Each device's steps: its tasks in plan order (a receive at its transfer's end),
    reordered only where a step would read a copy before it is made; ``io:in`` first and
    ``io:out`` after the last output on the host; frees after each copy's last reader; and,
    when devices share cores, the core gates between their compute and conversion tasks
    (``_core_gates``: plan start order per shared core, implied gates dropped) written into
    the steps that wait (``gates_in``) and signal (``gates_out``)."""
    for v in vertices.values():
        if v.dtype not in (DType.FP32, DType.INT8):
            raise InputError(f"the executor runs fp32 and int8 kernels; vertex {v.name!r} "
                             f"computes in {v.dtype.value}", place=f"vertex {v.name!r}")
    used = {host} | {t.device for t in tasks} | {t.dst_device for t in tasks
                                                  if t.dst_device is not None}
    names = set(m.device_names)
    missing = sorted(used - names)
    if missing:
        raise InputError(f"machine {m.name!r} has no device {missing[0]!r}",
                         place=f"device {missing[0]!r}")
    devices = tuple(d for d in m.devices if d.name in used)
    for d in devices:
        if local_only and not d.is_local:
            raise InputError(f"device {d.name!r} of machine {m.name!r} is not a local device "
                             f"(it has no cores/backend): only this machine's devices run "
                             f"plans", place=f"device {d.name!r}")
    parts = tuple(partitions_of(g, tasks, vertices,
                                {d.name: tuple(d.cores or ()) for d in devices},
                                by_model=bool(g.record.members)))
    tasks, vertices = _merge(tasks, vertices, parts)
    natural = {t.name: Representation(t.dtype, t.layout) for t in g.tensors}
    events: dict[str, list[tuple[float, int, int, ExecStep]]] = {d.name: [] for d in devices}
    events[host].append((-math.inf, -1, 0, ExecStep(
        StepKind.IO_IN, -1, (), tuple(copy_key(t, natural[t]) for t in g.inputs))))
    for t in tasks:
        if t.kind is TaskKind.COMPUTE:
            vx = vertices[t.name]
            reads = tuple(copy_key(x, held_rep(g.tensor(x), vx.dtype)) for x in vx.inputs)
            writes = tuple(copy_key(x, held_rep(g.tensor(x), vx.dtype)) for x in vx.outputs)
            events[t.device].append((t.start_s, t.index, 1, ExecStep(
                StepKind.COMPUTE, t.index, reads, writes)))
        elif t.kind is TaskKind.CONVERSION:
            if t.tensor is None or t.src_rep is None or t.dst_rep is None:
                raise InputError("a conversion task needs a tensor and two representations",
                                 place=f"task {t.name!r}")
            events[t.device].append((t.start_s, t.index, 1, ExecStep(
                StepKind.CONVERT, t.index, (copy_key(t.tensor, t.src_rep),),
                (copy_key(t.tensor, t.dst_rep),))))
        else:
            if t.tensor is None or t.src_rep is None or t.dst_device is None:
                raise InputError("a transfer task needs a tensor, a representation and a "
                                 "receiving device", place=f"task {t.name!r}")
            key = copy_key(t.tensor, t.src_rep)
            events[t.device].append((t.start_s, t.index, 1, ExecStep(
                StepKind.SEND, t.index, (key,), ())))
            events[t.dst_device].append((t.end_s, t.index, 2, ExecStep(
                StepKind.RECV, t.index, (), (key,))))
    out_keys = tuple(copy_key(t, natural[t]) for t in g.outputs)
    orders: dict[str, list[ExecStep]] = {}
    for d in devices:
        evs = sorted(events[d.name], key=lambda e: (e[0], e[1], e[2]))
        order = _local_order([e[3] for e in evs], d.name, tasks)
        if d.name == host:
            order = _place_io_out(order, out_keys)
        orders[d.name] = order
    gates = _core_gates(devices, tasks, orders)
    if gates:
        orders = _with_gates(orders, gates, tasks)
    steps = {name: _with_frees(order) for name, order in orders.items()}
    return ExecProgram(g, host, tuple(tasks), vertices, devices, steps, makespan_s, gates,
                       parts)


def _core_gates(devices: Sequence[Device], tasks: Sequence[ExecTask],
                orders: Mapping[str, Sequence[ExecStep]]) -> tuple[CoreGate, ...]:
    """The core gates of a program whose devices run ``orders`` (see ``CoreGate``).

    For every core that several devices use, the compute and conversion tasks of those
    devices in plan start order fall into *runs* of one device; every task of a run gates
    the step, among the next run's tasks, that its device runs first (the rest follow it on
    that worker). A candidate gate is dropped when the later step already happens after the
    earlier one (``_StepGraph.needed``). A candidate that would close a cycle (only possible for a
    plan whose times contradict its own order) is dropped too.
    """
    users: dict[int, list[str]] = {}
    for d in devices:
        for c in dict.fromkeys(d.cores or ()):
            users.setdefault(c, []).append(d.name)
    shared = {c: set(ds) for c, ds in users.items() if len(ds) > 1}
    if not shared:
        return ()
    steps = _StepGraph(orders)
    cand: dict[tuple[int, int], set[int]] = {}  # (earlier task, later task) -> cores
    for c, devs in sorted(shared.items()):
        on_core = sorted((t for t in tasks if t.device in devs and t.index in steps.node_of),
                         key=lambda t: (t.start_s, t.index))
        runs: list[list[ExecTask]] = []
        for t in on_core:
            if runs and runs[-1][0].device == t.device:
                runs[-1].append(t)
            else:
                runs.append([t])
        for prev, nxt in itertools.pairwise(runs):
            head = min(nxt, key=lambda t: steps.node_of[t.index])
            for t in prev:
                cand.setdefault((t.index, head.index), set()).add(c)
    if not cand:
        return ()
    kept, live = steps.needed(cand)
    # one waiting step per (earlier task, device): the first in that worker's order
    first: dict[tuple[int, str], tuple[int, int]] = {}
    for b, a in kept:
        key = (b, tasks[a].device)
        if key not in first or steps.node_of[a] < steps.node_of[first[key][1]]:
            first[key] = (b, a)
    out = [CoreGate(b, a, tuple(sorted(live[(b, a)]))) for b, a in first.values()]
    out.sort(key=lambda gt: (tasks[gt.before].start_s, gt.before, gt.after))
    return tuple(out)


class _StepGraph:
    """The happens-before graph of the steps of one request: a node per step (per device,
    in ``orders``), each worker's step order and send -> receive as edges."""

    def __init__(self, orders: Mapping[str, Sequence[ExecStep]]) -> None:
        self.devices = list(orders)
        self.node_of: dict[int, int] = {}  # compute/conversion task -> node
        self.where: list[tuple[int, int]] = []  # node -> (device index, position)
        send_node: dict[int, int] = {}
        recv_node: dict[int, int] = {}
        self.fixed: list[list[int]] = []  # node -> predecessors
        for di, name in enumerate(self.devices):
            for i, st in enumerate(orders[name]):
                node = len(self.where)
                self.where.append((di, i))
                self.fixed.append([node - 1] if i else [])
                if st.kind in (StepKind.COMPUTE, StepKind.CONVERT):
                    self.node_of[st.task] = node
                elif st.kind is StepKind.SEND:
                    send_node[st.task] = node
                elif st.kind is StepKind.RECV:
                    recv_node[st.task] = node
        for ti, rn in recv_node.items():
            sn = send_node.get(ti)
            if sn is not None:
                self.fixed[rn].append(sn)

    def needed(self, cand: Mapping[tuple[int, int], set[int]]
               ) -> tuple[list[tuple[int, int]], dict[tuple[int, int], set[int]]]:
        """The candidate gates ``(earlier task, later task)`` that nothing else implies,
        and the candidates left once those closing a cycle are dropped. The graph with the
        candidates is walked in topological order with a vector clock per step (per
        device, the last step known to have run): exact and linear in the steps."""
        n = len(self.where)
        node_of = self.node_of
        live = dict(cand)
        while True:
            into: list[list[tuple[int, int]]] = [[] for _ in range(n)]  # node -> (src, task)
            for (b, a) in live:
                into[node_of[a]].append((node_of[b], b))
            topo = _topological(n, self.fixed, into)
            if len(topo) == n:
                break
            done = set(topo)
            stuck = [k for k in live if node_of[k[1]] not in done]
            if not stuck:  # pragma: no cover - the steps alone form a cycle
                return [], {}
            for k in stuck:
                del live[k]
        task_at = {node: ti for ti, node in node_of.items()}
        clock: list[list[int]] = [[] for _ in range(n)]
        kept: list[tuple[int, int]] = []
        for node in topo:
            vc = [-1] * len(self.devices)
            for p in self.fixed[node]:
                vc = [max(x, y) for x, y in zip(vc, clock[p], strict=True)]
            gins = into[node]
            for j, (src, b) in enumerate(gins):
                dev, pos = self.where[src]
                seen = vc[dev]
                for m, (other, _b) in enumerate(gins):
                    if m != j:
                        seen = max(seen, clock[other][dev])
                if seen < pos:
                    kept.append((b, task_at[node]))
            for src, _b in gins:
                vc = [max(x, y) for x, y in zip(vc, clock[src], strict=True)]
            dev, pos = self.where[node]
            vc[dev] = pos
            clock[node] = vc
        return kept, live


def _topological(n: int, fixed: Sequence[Sequence[int]],
                 into: Sequence[Sequence[tuple[int, int]]]) -> list[int]:
    """Nodes ``0..n-1`` in a topological order of the edges ``fixed[v]`` (predecessors of
    ``v``) and ``into[v]`` (``(predecessor, tag)``); shorter than ``n`` on a cycle. Depth
    first (``walk.topological_order``): the clocks built on it do not depend on the order."""
    preds = [[*fixed[v], *(p for p, _tag in into[v])] for v in range(n)]
    return topological_order(preds, depth_first=True)


def _with_gates(orders: Mapping[str, list[ExecStep]], gates: Sequence[CoreGate],
                tasks: Sequence[ExecTask]) -> dict[str, list[ExecStep]]:
    """``orders`` with every gate written into its two steps."""
    gin: dict[int, list[int]] = {}
    gout: dict[int, set[str]] = {}
    for gt in gates:
        gin.setdefault(gt.after, []).append(gt.before)
        gout.setdefault(gt.before, set()).add(tasks[gt.after].device)
    out: dict[str, list[ExecStep]] = {}
    for name, order in orders.items():
        out[name] = [replace(st, gates_in=tuple(sorted(gin.get(st.task, ()))),
                             gates_out=tuple(sorted(gout.get(st.task, ()))))
                     if st.kind in (StepKind.COMPUTE, StepKind.CONVERT) and
                     (st.task in gin or st.task in gout) else st for st in order]
    return out


def _local_order(steps: list[ExecStep], device: str, tasks: list[ExecTask]) -> list[ExecStep]:
    """``steps`` reordered (stably, as little as needed) so that every copy a step reads is
    written by an earlier step on this device; ``InputError`` if none writes it."""
    writer: dict[str, int] = {}
    for i, s in enumerate(steps):
        for k in s.writes:
            writer.setdefault(k, i)
    preds: list[set[int]] = [set() for _ in steps]
    for i, s in enumerate(steps):
        for k in s.reads:
            w = writer.get(k)
            if w is None:
                what = tasks[s.task].name if s.task >= 0 else "io"
                raise InputError(f"task {what!r} reads copy {k!r} that nothing on device "
                                 f"{device!r} makes: the schedule is inconsistent",
                                 place=f"device {device!r}")
            if w != i:
                preds[i].add(w)
    if all(max(p, default=-1) < i for i, p in enumerate(preds)):
        return steps
    order = topological_order(preds)
    if len(order) != len(steps):  # pragma: no cover - the schedule's task graph is a DAG
        raise InputError("the steps of a device form a cycle", place=f"device {device!r}")
    return [steps[i] for i in order]


def _place_io_out(steps: list[ExecStep], out_keys: tuple[str, ...]) -> list[ExecStep]:
    last = -1
    for i, s in enumerate(steps):
        if any(k in out_keys for k in s.writes):
            last = i
    io_out = ExecStep(StepKind.IO_OUT, -1, out_keys, ())
    return [*steps[:last + 1], io_out, *steps[last + 1:]]


def _with_frees(steps: list[ExecStep]) -> tuple[ExecStep, ...]:
    last = last_use([s.reads for s in steps], [s.writes for s in steps])
    frees: dict[int, list[str]] = {}
    for k, i in last.items():
        frees.setdefault(i, []).append(k)
    return tuple(ExecStep(s.kind, s.task, s.reads, s.writes, tuple(sorted(frees.get(i, []))),
                          s.gates_in, s.gates_out) for i, s in enumerate(steps))


# ---- partitions ----------------------------------------------------------------------------


def _merge(tasks: Sequence[ExecTask], vertices: Mapping[str, ExecVertex],
           parts: Sequence[Partition]) -> tuple[list[ExecTask], dict[str, ExecVertex]]:
    """Tasks and vertices with each partition's compute tasks merged into one compute task
    named after the partition (its vertex is the partition), in a topological order."""
    by_name = {t.name: t for t in tasks}
    owner: dict[int, int] = {}  # old task index -> partition index
    for p in parts:
        for name in p.tasks:
            owner[by_name[name].index] = p.index
    keys: list[tuple[str, int]] = []  # ("t", old index) or ("p", partition)
    seen: set[int] = set()
    for t in tasks:
        if t.index in owner:
            if owner[t.index] not in seen:
                seen.add(owner[t.index])
                keys.append(("p", owner[t.index]))
        else:
            keys.append(("t", t.index))
    deps_of: dict[tuple[str, int], set[tuple[str, int]]] = {}

    def key(i: int) -> tuple[str, int]:
        return ("p", owner[i]) if i in owner else ("t", i)

    for t in tasks:
        k = key(t.index)
        deps_of.setdefault(k, set()).update(key(d) for d in t.deps if key(d) != k)
    # the stable topological order: earliest original position first
    pos = {k: i for i, k in enumerate(keys)}
    at = topological_order([[pos[d] for d in deps_of.get(k, ())] for k in keys])
    if len(at) != len(keys):
        raise InputError("the plan's partitions depend on each other in a cycle",
                         place="schedule.tasks")
    order = [keys[i] for i in at]
    new_index = {k: i for i, k in enumerate(order)}
    merged: list[ExecTask] = []
    new_vertices: dict[str, ExecVertex] = {}
    for i, k in enumerate(order):
        deps = tuple(sorted(new_index[d] for d in deps_of.get(k, ())))
        if k[0] == "t":
            merged.append(replace(tasks[k[1]], index=i, deps=deps))
            continue
        p = parts[k[1]]
        members = [by_name[n] for n in p.tasks]
        merged.append(ExecTask(i, p.name, TaskKind.COMPUTE, p.device, None, p.name, None,
                               None, None, deps, min(t.start_s for t in members),
                               max(t.end_s for t in members)))
        new_vertices[p.name] = ExecVertex(p.name, p.device, p.dtype, p.ops, p.inputs,
                                          p.outputs)
    return merged, new_vertices
