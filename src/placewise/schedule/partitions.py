"""Partitions: the compiled units a plan's schedule is cut into — the executor's rule
(``placewise.runtime.program`` compiles one session per partition, ``placewise.export`` writes
one file per partition), and what ``placewise.explain`` counts.

A partition is a maximal run of one device's compute tasks that runs to its end without
waiting on another device (``partitions_of`` says where a run is cut). The rule reads only
the schedule's tasks (their kinds, devices, times) and the vertices' precisions and tensors,
so it works on a live schedule and on a plan file's records alike.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from placewise.graph.ir import Op
from placewise.graph.workload import member_of
from placewise.schedule.simulate import TaskKind
from placewise.units import DType

__all__ = ["HasOutputs", "Partition", "TaskLike", "VertexLike", "partitions_of"]


class HasOutputs(Protocol):
    """The graph as the rule reads it: its outputs."""

    @property
    def outputs(self) -> Collection[str]: ...


class TaskLike(Protocol):
    """A scheduled task as the rule reads it (``runtime.program.ExecTask``)."""

    @property
    def index(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> TaskKind: ...
    @property
    def device(self) -> str: ...
    @property
    def dst_device(self) -> str | None: ...
    @property
    def tensor(self) -> str | None: ...
    @property
    def start_s(self) -> float: ...
    @property
    def end_s(self) -> float: ...


class VertexLike(Protocol):
    """A compute task's vertex as the rule reads it (``runtime.program.ExecVertex``)."""

    @property
    def dtype(self) -> DType: ...
    @property
    def ops(self) -> tuple[Op, ...]: ...
    @property
    def inputs(self) -> tuple[str, ...]: ...
    @property
    def outputs(self) -> tuple[str, ...]: ...


@dataclass(frozen=True, slots=True)
class Partition:
    """A compiled unit: a maximal run of one device's compute tasks (in plan order, one
    precision) that runs to its end without waiting on another device.

    ``tasks``: the plan's compute tasks it merges (their names are the plan's vertices);
    ``inputs``: the tensors it reads that it does not make (graph inputs, other partitions'
    outputs, received or converted copies); ``outputs``: the tensors it makes that anything
    outside it reads (another partition, a transfer, a conversion, the graph's outputs).
    """

    name: str
    index: int
    device: str
    dtype: DType
    tasks: tuple[str, ...]
    ops: tuple[Op, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


def _member(vx: VertexLike) -> str | None:
    """The model of a workload that a vertex belongs to (its first named tensor's)."""
    for x in (*vx.outputs, *vx.inputs):
        if x:
            return member_of(x)
    return None


def partitions_of(g: HasOutputs, tasks: Sequence[TaskLike], vertices: Mapping[str, VertexLike],
                  cores: Mapping[str, Sequence[int]] | None = None, *,
                  by_model: bool = False) -> list[Partition]:
    """Cut each device's compute tasks, in plan order, into partitions.

    A device's order is cut before a compute task that computes in another precision, that
    reads a copy which arrived (received from another device, or converted) after the
    current partition began, or that follows a task whose output left early (a transfer or
    conversion of a tensor the partition made starts before the next compute task), or where
    the plan runs a task of another device that shares the device's ``cores`` in between
    (the core gate makes the partition wait for it), and, in a workload of several models
    (``by_model``), before a task of another model than the partition's (each model keeps
    its own compiled units: ``graph.workload``).
    Partitions are numbered by the start of their first task and named ``p{k}.{device}``.
    """
    events: dict[str, list[tuple[float, int, int, TaskLike]]] = {}
    for t in tasks:
        if t.kind is TaskKind.TRANSFER:
            events.setdefault(t.device, []).append((t.start_s, t.index, 1, t))
            if t.dst_device is not None:
                events.setdefault(t.dst_device, []).append((t.end_s, t.index, 2, t))
        else:
            events.setdefault(t.device, []).append((t.start_s, t.index, 1, t))
    shared: dict[str, list[float]] = {}  # device -> starts of core-sharing devices' work
    if cores:
        for d, mine in cores.items():
            others = {o for o, theirs in cores.items() if o != d and set(mine) & set(theirs)}
            shared[d] = sorted(t.start_s for t in tasks if t.device in others
                               and t.kind is not TaskKind.TRANSFER)
    groups: list[tuple[str, DType, list[TaskLike]]] = []
    for device, evs in events.items():
        between = shared.get(device, [])
        evs.sort(key=lambda e: (e[0], e[1], e[2]))
        cur: list[TaskLike] = []
        dtype: DType | None = None
        made: set[str] = set()
        arrived: set[str] = set()
        left = False
        owner: str | None = None
        for _, _, sub, t in evs:
            if t.kind is TaskKind.COMPUTE:
                vx = vertices[t.name]
                gated = bool(cur) and _any_in(between, cur[-1].start_s, t.start_s)
                who = _member(vx) if by_model else None
                if cur and dtype is not None and (vx.dtype is not dtype or left or gated
                                                  or who != owner
                                                  or any(x in arrived for x in vx.inputs)):
                    groups.append((device, dtype, cur))
                    cur, made, arrived, left = [], set(), set(), False
                cur.append(t)
                dtype = vx.dtype
                owner = who
                made.update(vx.outputs)
            elif not cur:
                continue
            elif t.kind is TaskKind.CONVERSION:
                if t.tensor in made:
                    left = True
                if t.tensor is not None:
                    arrived.add(t.tensor)
            elif sub == 2:  # a receive on this device
                if t.tensor is not None:
                    arrived.add(t.tensor)
            elif t.tensor in made:  # a send of a tensor this partition made
                left = True
        if cur and dtype is not None:
            groups.append((device, dtype, cur))
    groups.sort(key=lambda grp: (grp[2][0].start_s, grp[2][0].index))
    outside: dict[str, set[int]] = {}  # tensor -> tasks that read it
    for t in tasks:
        if t.kind is TaskKind.COMPUTE:
            for x in vertices[t.name].inputs:
                outside.setdefault(x, set()).add(t.index)
        elif t.tensor is not None:
            outside.setdefault(t.tensor, set()).add(t.index)
    graph_out = set(g.outputs)
    out: list[Partition] = []
    for k, (device, dtype, members) in enumerate(groups):
        idx = {t.index for t in members}
        made_here: set[str] = set()
        ins: list[str] = []
        outs: list[str] = []
        ops: list[Op] = []
        for t in members:
            vx = vertices[t.name]
            ops.extend(vx.ops)
            for x in vx.inputs:
                if x not in made_here and x not in ins:
                    ins.append(x)
            made_here.update(vx.outputs)
        for t in members:
            for x in vertices[t.name].outputs:
                if x in graph_out or outside.get(x, set()) - idx:
                    outs.append(x)
        out.append(Partition(f"p{k}.{device}", k, device, dtype,
                             tuple(t.name for t in members), tuple(ops), tuple(ins),
                             tuple(outs)))
    return out


def _any_in(sorted_x: Sequence[float], lo: float, hi: float) -> bool:
    """Whether some x in ``sorted_x`` has lo <= x < hi."""
    i = bisect.bisect_left(sorted_x, lo)
    return i < len(sorted_x) and sorted_x[i] < hi
