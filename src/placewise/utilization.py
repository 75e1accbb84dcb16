"""Model FLOPs utilization (MFU) and the memory-bound fraction of a plan, per plan and per
layer type; predicted from the plan's schedule, and measured from a ``placewise validate``
report.

**Conventions** (``CONVENTION``, stated in every ``Utilization``):

- *FLOPs* are the model's forward FLOPs for one run of ``plan.batch``, counted by placewise
  (``placewise.graph.count``, one rule per op kind): 2 per multiply-accumulate, 1 per
  elementwise arithmetic operation, ``TRANSCENDENTAL_FLOPS`` per transcendental, views 0.
  Op kinds with no counting rule count 0 and are listed in ``uncounted``. FLOPs do not
  depend on precision. Transfers and conversions have none.
- *Time* (``time_s``) is the plan's predicted latency of one run of ``plan.batch`` end to
  end (``Plan.predicted_latency_s``: the makespan plus the request hand-off when the cost
  model measured it). ``mfu_throughput`` uses the pipeline period instead
  (``plan.throughput.period_s``: the time per run of ``plan.batch`` in steady state).
- *Peak* (``peak_flops_per_s``) is the sum over the devices that hold at least one vertex
  of the device's peak (``hardware.spec.Device.peak``) at the precision that holds most of
  its FLOPs (``peaks`` lists each device, its precision and its peak). So MFU =
  ``flops / (time_s x peak_flops_per_s)``: every used device counts for the whole time,
  idle or not.
- A *layer type* is the op kind that carries most FLOPs of a vertex (a fused region or a
  single op; ties go to the first op; a vertex without FLOPs takes the kind that moves most
  bytes, then its first op's kind). A vertex's FLOPs and predicted time go whole to its
  layer type. A layer type's ``time_s`` is the summed duration of its compute tasks
  (device time, not wall time), and its MFU is ``flops / sum(duration x peak of the task's
  device at the task's own precision)``: the FLOPs achieved over those the devices could
  have done in that time. Layer types' ``flops`` and ``time_s`` sum to the plan's
  ``flops`` and ``busy_s``.
- The *memory-bound fraction* is the share of compute-task time spent in tasks whose
  bottleneck class (``TaskRecord.bottleneck``, from the cost model's terms) is ``memory``.
  ``memory_term_fraction`` is the share of compute-task time in the ``memory`` term itself.
  Transfers and conversions (``movement_s``) belong to no layer type.

**Measured** (``Utilization.measured``, from the JSON of ``placewise validate PLAN --json``,
whose plan fingerprint must be this plan's): the same FLOPs and peak over the measured p50
latency of the isolated requests and the measured stream period (``batch /
throughput_rps``). Validate times compute tasks per *partition* (one compiled unit per
device run); a vertex is measured when its partition holds no other vertex, or when the
report has per-node times (``validate --profile-nodes``: onnxruntime's profiler, node times
mapped to the plan's ops). The memory-bound fraction measured is the measured time of the
vertices the plan predicts memory-bound over the measured time of all vertices (the class
is the model's, the time is measured); it and the layer types are None where some vertex
has no measured time.

>>> from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
>>> from placewise.schedule import Problem, Placement, evaluate
>>> from placewise.schedule.testing import ToyCostModel, toy_machine
>>> from placewise.plan import build_plan
>>> from placewise.units import DType
>>> T = lambda n, s, r=Role.ACTIVATION: Tensor(n, s, DType.FP32, role=r)
>>> g = Graph.build("mm", [T("x", (64, 64), Role.INPUT), T("w", (64, 64), Role.PARAM),
...                        T("y", (64, 64), Role.OUTPUT)],
...                 [Op("mm", OpKind.MATMUL, ("x", "w"), ("y",))])
>>> m = toy_machine()
>>> prob = Problem(g, None, m, ToyCostModel(m))
>>> plan = build_plan(prob, evaluate(prob, Placement.uniform(["mm"], "gpu", DType.FP32)),
...                   model_ref="mm.json", strategy="single:gpu")
>>> u = plan_utilization(plan, graph=g, machine=m)
>>> u.flops == 2 * 64 ** 3, [r.layer_type for r in u.by_layer_type]
(True, ['matmul'])
>>> round(u.mfu, 12) == round(u.flops / (u.time_s * m.device("gpu").peak(DType.FP32)), 12)
True
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field

from placewise.cost.model import Term
from placewise.errors import InputError, PlacewiseError
from placewise.export import plan_fingerprint
from placewise.graph.count import count_graph, count_op
from placewise.graph.load import load_model
from placewise.io import MAX_JSON_BYTES, load_json
from placewise.plan import check_fingerprints
from placewise.plan_sources import plan_machine as _plan_machine
from placewise.records import to_json
from placewise.schedule.simulate import TaskKind
from placewise.units import DType

if TYPE_CHECKING:
    from placewise.graph.ir import Graph
    from placewise.hardware.spec import Machine
    from placewise.plan import Plan

__all__ = [
    "CONVENTION",
    "DevicePeak",
    "LayerTypeRow",
    "MeasuredUtilization",
    "Utilization",
    "VertexUse",
    "check_validation",
    "load_validation",
    "measured_op_s",
    "measured_vertex_s",
    "plan_graph",
    "plan_machine",
    "plan_utilization",
    "vertex_uses",
]

#: the conventions, in words (``Utilization.convention``)
CONVENTION = {
    "flops": "model forward FLOPs of one run of plan.batch, counted by placewise.graph.count: "
             "2 per multiply-accumulate, 1 per elementwise arithmetic op, 4 per "
             "transcendental, views 0; kinds without a rule count 0 (listed in uncounted)",
    "time": "mfu: the plan's predicted latency of one run of plan.batch "
            "(Plan.predicted_latency_s); mfu_throughput: the pipeline period per run",
    "peak": "sum over devices holding a vertex of the device's peak at the precision "
            "holding most of its FLOPs",
    "layer_type": "the op kind carrying most FLOPs of a vertex (fused region or single op); "
                  "the vertex's FLOPs and time go whole to it; its mfu is flops over the sum "
                  "of task duration x the task's device peak at its own precision",
    "memory_bound_fraction": "share of compute-task time in tasks whose bottleneck class "
                             "is memory",
}


# ---- records -----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class DevicePeak:
    """A used device, the precision holding most of its FLOPs, its peak there, and the
    FLOPs it runs in that precision."""

    device: str
    dtype: str
    peak_flops_per_s: float
    flops: float

@dataclass(frozen=True, slots=True)
class VertexUse:
    """One vertex (compute task): its layer type, FLOPs, predicted duration, the peak of
    its device at its precision, and its bottleneck class; ``op_flops``: per op."""

    vertex: str
    layer_type: str
    device: str
    dtype: str
    ops: tuple[str, ...]
    op_flops: Mapping[str, float]
    flops: float
    time_s: float
    peak_flops_per_s: float
    bottleneck: str
    memory_term_s: float


@dataclass(frozen=True, slots=True)
class LayerTypeRow:
    """The vertices of one layer type: op and vertex counts, FLOPs, summed task time, the
    FLOPs the devices could have done in that time (``capacity_flops``), MFU, and the
    time and share of it in memory-bound tasks."""

    layer_type: str
    ops: int
    vertices: int
    flops: float
    time_s: float | None
    capacity_flops: float | None
    mfu: float | None
    memory_bound_s: float | None
    memory_bound_fraction: float | None
    bottleneck_s: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MeasuredUtilization:
    """The same figures from a validation report (see the module docstring).
    ``vertex_s``: measured seconds per vertex where known (``vertices_measured`` of them);
    ``source``: how they were got."""

    flops: float
    time_s: float
    period_s: float | None
    peak_flops_per_s: float
    mfu: float
    mfu_throughput: float | None
    busy_s: float
    memory_bound_fraction: float | None
    by_layer_type: tuple[LayerTypeRow, ...]
    vertex_s: Annotated[Mapping[str, float], Field(exclude=True)]
    vertices_measured: int
    source: str
    per_node: bool

@dataclass(frozen=True, slots=True)
class Utilization:
    """MFU and memory-bound fraction of a plan (see the module docstring for every
    convention; ``convention`` repeats them)."""

    model: str
    batch: int
    flops: float
    uncounted: tuple[str, ...]
    time_s: float
    period_s: float | None
    peak_flops_per_s: float
    peaks: tuple[DevicePeak, ...]
    mfu: float
    mfu_throughput: float | None
    busy_s: float
    movement_s: float
    memory_bound_s: float
    memory_bound_fraction: float
    memory_term_fraction: float
    bottleneck_s: Mapping[str, float]
    by_layer_type: tuple[LayerTypeRow, ...]
    vertices: Annotated[tuple[VertexUse, ...], Field(exclude=True)] = field(repr=False)
    measured: MeasuredUtilization | None = None
    exact: bool = True
    convention: Mapping[str, str] = field(default_factory=lambda: dict(CONVENTION))

    def to_json(self) -> dict[str, Any]:
        """JSON-ready values of every field but ``vertices`` (``records.to_json``)."""
        out: dict[str, Any] = to_json(self)
        return out


# ---- the plan's graph and machine ----------------------------------------------------------
def plan_graph(plan: Plan, *, file: str | None = None) -> Graph:
    """The plan's model graph as it was planned: ``plan.model`` loaded at the plan's batch,
    else as it stands, else with the plan's input shapes; the first whose fingerprint is the
    plan's (``InputError`` naming the fingerprint when none is)."""
    shapes = {n: tuple(plan.tensors[n].shape) for n in plan.graph_inputs if n in plan.tensors}
    attempts: list[dict[str, Any]] = [{"batch": int(plan.batch)}, {}]
    if shapes:
        attempts.append({"shapes": shapes})
    if plan.values:  # the model as it was planned: its inputs given those values
        attempts = [{**a, "values": plan.values} for a in attempts]
    first: Graph | None = None
    error: PlacewiseError | None = None
    for kwargs in attempts:
        try:
            g = load_model(plan.model, **kwargs)
        except PlacewiseError as exc:  # a fixed batch, a task graph that takes no batch
            error = error or exc
            continue
        if g.fingerprint() == plan.fingerprints.graph:
            return g
        first = first or g
    if first is None:
        assert error is not None
        raise error
    check_fingerprints(plan, graph=first, file=file)
    raise AssertionError("unreachable: the fingerprint differs")  # pragma: no cover


def plan_machine(plan: Plan, *, file: str | None = None) -> Machine:
    """The plan's machine: its preset, this machine for a ``local`` plan (probed once and
    cached), or the spec file it recorded, fingerprint checked
    (``placewise.plan_sources.plan_machine``)."""
    return _plan_machine(plan, file=file)


# ---- per vertex --------------------------------------------------------------------------
def _layer_type(ops: Sequence[Any], counts: Mapping[str, Any]) -> str:
    best = max(ops, key=lambda o: counts[o.name].flops, default=None)
    if best is not None and counts[best.name].flops > 0:
        return str(best.kind.value)
    moved = max(ops, key=lambda o: counts[o.name].bytes_moved, default=None)
    if moved is not None and counts[moved.name].bytes_moved > 0:
        return str(moved.kind.value)
    return str(ops[0].kind.value) if ops else "none"


def vertex_uses(plan: Plan, graph: Graph, machine: Machine) -> list[VertexUse]:
    """Every compute task of the plan as a ``VertexUse``, in schedule order."""
    out: list[VertexUse] = []
    for t in plan.schedule.tasks:
        if t.kind is not TaskKind.COMPUTE or t.vertex is None:
            continue
        reg = plan.regions[t.vertex]
        ops = [graph.op(o) for o in reg.ops]
        counts = {o.name: count_op(graph, o) for o in ops}
        a = plan.placement[t.vertex]
        dtype = DType.parse(a["dtype"])
        op_flops = {o.name: float(counts[o.name].flops) for o in ops}
        out.append(VertexUse(
            t.vertex, _layer_type(ops, counts), a["device"], dtype.value, tuple(reg.ops),
            op_flops, sum(op_flops.values()), float(t.duration_s),
            float(machine.device(a["device"]).peak(dtype)), t.bottleneck.value,
            float(t.term(Term.MEMORY))))
    return out


def _device_peaks(plan: Plan, uses: Sequence[VertexUse], machine: Machine) -> list[DevicePeak]:

    out = []
    for dev in plan.devices_used():
        by_dtype: dict[str, list[float]] = {}
        for a in plan.placement.values():  # every vertex, computed or not
            if a["device"] == dev:
                by_dtype.setdefault(DType.parse(a["dtype"]).value, [])
        for u in uses:
            if u.device == dev:
                by_dtype.setdefault(u.dtype, []).append(u.flops)
        # most FLOPs; without FLOPs, most vertices; ties: the first seen
        dtype = max(by_dtype, key=lambda d: (sum(by_dtype[d]), len(by_dtype[d])))
        out.append(DevicePeak(dev, dtype, float(machine.device(dev).peak(DType.parse(dtype))),
                              sum(by_dtype[dtype])))
    return out


def _ratio(num: float, den: float | None) -> float | None:
    if den is None or not math.isfinite(den) or den <= 0:
        return None
    return num / den


def _by_class(uses: Sequence[VertexUse], durations: Sequence[float]) -> dict[str, float]:
    """Seconds per bottleneck class (sorted by class name)."""
    out: dict[str, float] = {}
    for u, d in zip(uses, durations, strict=True):
        out[u.bottleneck] = out.get(u.bottleneck, 0.0) + d
    return dict(sorted(out.items()))


def _rows(uses: Sequence[VertexUse], times: Mapping[str, float] | None
          ) -> tuple[LayerTypeRow, ...]:
    """Layer-type rows, by FLOPs (largest first), then name; ``times``: measured seconds per
    vertex (None: the predicted durations)."""
    groups: dict[str, list[VertexUse]] = {}
    for u in uses:
        groups.setdefault(u.layer_type, []).append(u)
    rows = []
    for lt, us in groups.items():
        flops = sum(u.flops for u in us)
        if times is None:
            dur: list[float] | None = [u.time_s for u in us]
        else:
            dur = [times[u.vertex] for u in us] if all(u.vertex in times for u in us) else None
        if dur is None:
            rows.append(LayerTypeRow(lt, sum(len(u.ops) for u in us), len(us), flops,
                                     None, None, None, None, None, {}))
            continue
        time = sum(dur)
        cap = sum(d * u.peak_flops_per_s for d, u in zip(dur, us, strict=True))
        mem = sum((d for d, u in zip(dur, us, strict=True) if u.bottleneck == "memory"), 0.0)
        rows.append(LayerTypeRow(lt, sum(len(u.ops) for u in us), len(us), flops, time, cap,
                                 _ratio(flops, cap), mem, _ratio(mem, time),
                                 _by_class(us, dur)))
    rows.sort(key=lambda r: (-r.flops, r.layer_type))
    return tuple(rows)


# ---- the plan ----------------------------------------------------------------------------
def plan_utilization(plan: Plan, *, validation: Mapping[str, Any] | None = None,
                     graph: Graph | None = None, machine: Machine | None = None,
                     validation_file: str | None = None) -> Utilization:
    """MFU and memory-bound fraction of ``plan``, predicted and (with ``validation``, the
    parsed JSON of ``placewise validate PLAN --json``) measured.

    ``graph``/``machine``: the plan's model graph and machine (default: ``plan_graph`` and
    ``plan_machine``; given ones are fingerprint-checked). A validation of another plan is
    an ``InputError`` naming ``validation_file``.
    """
    if graph is None:
        graph = plan_graph(plan)
    else:
        check_fingerprints(plan, graph=graph)
    if machine is None:
        machine = plan_machine(plan)
    else:
        check_fingerprints(plan, machine=machine)
    if validation is not None:
        check_validation(plan, validation, file=validation_file)
    uses = vertex_uses(plan, graph, machine)
    peaks = _device_peaks(plan, uses, machine)
    peak = sum(p.peak_flops_per_s for p in peaks)
    flops = sum(u.flops for u in uses)
    time_s = float(plan.predicted_latency_s)
    period = float(plan.throughput.period_s) if plan.throughput.period_s > 0 else None
    busy = sum(u.time_s for u in uses)
    mem = sum((u.time_s for u in uses if u.bottleneck == "memory"), 0.0)
    movement = sum(t.duration_s for t in plan.schedule.tasks if t.kind is not TaskKind.COMPUTE)
    measured = None if validation is None else _measured(plan, validation, uses, flops, peak)
    return Utilization(
        plan.model, int(plan.batch), flops, tuple(count_graph(graph).uncounted), time_s, period,
        peak, tuple(peaks), _ratio(flops, time_s * peak) or 0.0,
        _ratio(flops, period * peak) if period is not None else None, busy, movement, mem,
        _ratio(mem, busy) or 0.0, _ratio(sum(u.memory_term_s for u in uses), busy) or 0.0,
        _by_class(uses, [u.time_s for u in uses]), _rows(uses, None), tuple(uses), measured, bool(plan.exact))


# ---- measured ----------------------------------------------------------------------------
def load_validation(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A validation report file (``placewise validate PLAN --json > V.json``), parsed and
    shape-checked; anything else is an ``InputError`` naming the file."""
    file = os.fspath(path)
    data = load_json(file, what="validation report", limit_bytes=MAX_JSON_BYTES)
    _shape_check(data, file)
    return dict(data)


def _shape_check(data: Any, file: str | None) -> None:
    if not isinstance(data, Mapping):
        raise InputError("not a validation report (expected a JSON object from placewise "
                         "validate --json)", file=file)
    for key in ("plan", "measured", "attribution"):
        if not isinstance(data.get(key), Mapping):
            raise InputError(f"not a validation report: no {key!r} object (expected the JSON "
                             f"of placewise validate --json)", file=file, place=key)
    lat = data["measured"].get("latency")
    if not isinstance(lat, Mapping) or not _num(lat.get("p50_s")):
        raise InputError("no measured latency p50_s", file=file, place="measured.latency")
    tasks = (data["attribution"].get("latency") or {}).get("tasks")
    if not isinstance(tasks, list):
        raise InputError("no per-task times", file=file, place="attribution.latency.tasks")
    for i, t in enumerate(tasks):
        if not (isinstance(t, Mapping) and isinstance(t.get("task"), str)
                and _num(t.get("measured_s")) and isinstance(t.get("ops", []), list)):
            raise InputError("a task needs task (text), measured_s (number) and ops (list)",
                             file=file, place=f"attribution.latency.tasks[{i}]")
    nodes = data.get("nodes")
    if nodes is not None:
        parts = nodes.get("partitions") if isinstance(nodes, Mapping) else None
        if not isinstance(parts, list):
            raise InputError("nodes needs a partitions list", file=file, place="nodes")
        for i, p in enumerate(parts):
            op_s = p.get("op_s") if isinstance(p, Mapping) else None
            if not isinstance(op_s, Mapping) or not all(_num(v) for v in op_s.values()):
                raise InputError("a partition needs op_s (op -> seconds)", file=file,
                                 place=f"nodes.partitions[{i}]")


def _num(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def check_validation(plan: Plan, validation: Mapping[str, Any], *,
                     file: str | None = None) -> None:
    """Refuse (``InputError`` naming ``file``) a validation report that is malformed or was
    made for another plan: its ``plan.fingerprint`` must be ``export.plan_fingerprint(plan)``."""
    _shape_check(validation, file)
    got = validation["plan"].get("fingerprint")
    if not isinstance(got, str) or not got:
        raise InputError("the validation report carries no plan fingerprint (run placewise "
                         "validate --json again)", file=file, place="plan.fingerprint")
    want = plan_fingerprint(plan)
    if got != want:
        raise InputError(f"the validation report is of another plan (plan fingerprint "
                         f"{got[:23]}... in it, {want[:23]}... of this plan)", file=file,
                         place="plan.fingerprint")


def measured_op_s(validation: Mapping[str, Any]) -> dict[str, float]:
    """Measured seconds per op from a report's per-node profiles (empty without them)."""
    nodes = validation.get("nodes")
    out: dict[str, float] = {}
    if not isinstance(nodes, Mapping):
        return out
    for p in nodes.get("partitions", []):
        for op, s in p.get("op_s", {}).items():
            out[str(op)] = out.get(str(op), 0.0) + float(s)
    return out


def measured_vertex_s(plan: Plan, validation: Mapping[str, Any]) -> tuple[dict[str, float], bool]:
    """Measured seconds per vertex, and whether they come from per-node profiles: the sum of
    its ops' node times when the report has them, else the partition's measured time for a
    partition that holds this vertex alone."""
    op_s = measured_op_s(validation)
    if op_s:
        out: dict[str, float] = {}
        for v, reg in plan.regions.items():
            if all(o in op_s for o in reg.ops):
                out[v] = sum(op_s[o] for o in reg.ops)
        return out, True
    out = {}
    for t in validation["attribution"]["latency"]["tasks"]:
        if t.get("kind", "compute") != "compute":
            continue
        verts = {plan.ops[o].vertex for o in t.get("ops", []) if o in plan.ops}
        if len(verts) == 1:
            out[verts.pop()] = float(t["measured_s"])
    return out, False


def _measured(plan: Plan, validation: Mapping[str, Any], uses: Sequence[VertexUse],
              flops: float, peak: float) -> MeasuredUtilization:
    lat = float(validation["measured"]["latency"]["p50_s"])
    rps = validation["measured"].get("throughput_rps")
    period = int(plan.batch) / float(rps) if _num(rps) and float(rps) > 0 else None
    times, per_node = measured_vertex_s(plan, validation)
    tasks = validation["attribution"]["latency"]["tasks"]
    busy = sum(float(t["measured_s"]) for t in tasks if t.get("kind", "compute") == "compute")
    known = all(u.vertex in times for u in uses)
    mem = None
    if known and uses:
        tot = sum(times[u.vertex] for u in uses)
        mem = _ratio(sum(times[u.vertex] for u in uses if u.bottleneck == "memory"), tot)
    source = ("per-node times (onnxruntime profiler, validate --profile-nodes), summed per "
              "vertex" if per_node else
              "per-partition medians over the isolated requests (validate); a vertex is "
              "measured only when its partition holds it alone")
    return MeasuredUtilization(
        flops, lat, period, peak, _ratio(flops, lat * peak) or 0.0,
        _ratio(flops, period * peak) if period is not None else None, busy, mem,
        _rows(uses, times), times, len(times), source, per_node)
