"""The operator-to-kernel mapping sheet: one row per op of a plan, saying where it came from,
where and how it runs, what the cost model assumed and predicted, and what was measured.

Columns (``SHEET_COLUMNS``):

- ``op``, ``kind`` (placewise's op kind), ``module_path`` (the torch module path, or the
  source node name for ONNX models), ``source_op`` (the framework op it was imported from:
  ``aten.linear.default``, ``onnx::Gemm``);
- ``region`` (the vertex: a fusion group, named after its first op) and its ``pattern``;
  ``partition``: the compiled unit that ``export`` writes and the executor runs, named
  ``p{k}.{device}`` (``runtime.program.partitions_of``, the executor's own rule, derived
  from the plan without running anything);
- ``device``, ``precision``; ``provider``: the backend that runs the partition (partitions
  always run in onnxruntime: ``runtime.backends.onnxruntime.provider_for``); ``kernel``: the
  op's source op, and where the validation report has per-node times (``validate
  --profile-nodes``) the onnxruntime nodes that ran it, as ``OpType(node name)``;
- ``assumption``: the cost model's assumptions for the region's task (``model``,
  ``efficiency``, ``parallel_efficiency``, ``memory_fraction``, ``kernels``, ``interval``,
  the calibration ``fit``...), as ``key=value`` pairs;
- ``bottleneck``: the expected bottleneck class of the region's task;
- ``flops`` and ``bytes`` (``graph.count``: the op alone, its compulsory traffic);
- ``region_predicted_s``: the predicted duration of the region's task; ``share`` and
  ``share_basis``: the op's share of it, by FLOPs when the task is compute or parallelism
  bound, else by bytes moved, equal among the region's non-view ops when that measure is 0
  (a single-op region: 1); ``predicted_s`` = ``region_predicted_s`` x ``share`` (an
  apportioning, not a separate prediction: the cost model prices regions);
- ``measured_s``: the op's own measured time (per-node profiles: 0 for an op onnxruntime
  fused into another node, whose time is in that node's owner; or the region's measured
  time when the region is this op alone and its partition holds only it);
  ``region_measured_s``: the region's measured time where known; ``partition_measured_s``:
  the measured median time of the whole partition over the isolated requests (validate);
  ``measured_from``: which of these the measured columns come from.

>>> from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
>>> from placewise.schedule import Problem, Placement, evaluate
>>> from placewise.schedule.testing import ToyCostModel, toy_machine
>>> from placewise.plan import build_plan
>>> from placewise.units import DType
>>> x = Tensor("x", (1000,), DType.FP32, role=Role.INPUT)
>>> y = Tensor("y", (1000,), DType.FP32, role=Role.OUTPUT)
>>> g = Graph.build("g", [x, y], [Op("a", OpKind.RELU, ("x",), ("y",))])
>>> m = toy_machine()
>>> prob = Problem(g, None, m, ToyCostModel(m))
>>> plan = build_plan(prob, evaluate(prob, Placement.uniform(["a"], "gpu", DType.FP32)),
...                   model_ref="g.json", strategy="single:gpu")
>>> [(r.op, r.region, r.partition, r.device, r.share) for r in mapping_sheet(plan, graph=g,
...                                                                        machine=m)]
[('a', 'a', 'p0.gpu', 'gpu', 1.0)]
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import astuple, dataclass, fields
from typing import TYPE_CHECKING, Any

from placewise.errors import PlacewiseError
from placewise.graph.count import count_op
from placewise.io import atomic_write_text, check_output_path
from placewise.plan import check_fingerprints
from placewise.runtime.backends.onnxruntime import provider_for
from placewise.runtime.program import plan_partitions
from placewise.schedule.simulate import TaskKind
from placewise.units import DType
from placewise.utilization import (
    check_validation,
    measured_op_s,
    measured_vertex_s,
    plan_graph,
    plan_machine,
)

if TYPE_CHECKING:
    from placewise.graph.ir import Graph
    from placewise.hardware.spec import Machine
    from placewise.plan import Plan

__all__ = ["ASSUMPTION_KEYS", "SHEET_COLUMNS", "SheetRow", "mapping_sheet", "sheet_summary",
           "vertex_partitions", "write_sheet_csv"]

#: the task assumptions the ``assumption`` column shows, in this order (others are left out)
ASSUMPTION_KEYS = ("model", "fit", "efficiency", "parallel_efficiency", "memory_fraction",
                   "kernels", "fused_ops", "ops", "peak_flops_per_s", "bandwidth_bytes_per_s",
                   "interval", "note", "calibration_note", "measurement_ignored")


@dataclass(frozen=True, slots=True)
class SheetRow:
    """One op of the sheet (see the module docstring for each column)."""

    op: str
    kind: str
    module_path: str
    source_op: str
    region: str
    pattern: str
    partition: str
    device: str
    precision: str
    provider: str
    kernel: str
    assumption: str
    bottleneck: str
    flops: float
    bytes: int
    region_predicted_s: float
    share: float
    share_basis: str
    predicted_s: float
    measured_s: float | None = None
    region_measured_s: float | None = None
    partition_measured_s: float | None = None
    measured_from: str = ""

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


#: the sheet's columns, in order (the CSV header)
SHEET_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(SheetRow))


# ---- partitions, providers, assumptions ----------------------------------------------------
def vertex_partitions(plan: Plan, graph: Graph, machine: Machine) -> dict[str, str]:
    """Vertex -> the name of its partition, by the executor's rule
    (``runtime.program.plan_partitions``: what ``export`` writes and the executor runs,
    named the same also for plans neither would run, such as a preset's bf16 vertices)."""
    return {v: p.name for p in plan_partitions(plan, graph, machine) for v in p.tasks}


def _provider(machine: Machine, device: str, dtype: Any) -> str:
    try:
        prov = provider_for(machine.device(device), dtype)
    except PlacewiseError as exc:
        return f"none known ({exc})"
    opts = ",".join(f"{k}={v}" for k, v in sorted(prov.options.items()))
    return f"onnxruntime {prov.name}" + (f" [{opts}]" if opts else "")


def _fmt(v: float | str) -> str:
    if isinstance(v, str):
        return v
    return f"{v:.4g}"


def _assumption(assumptions: Mapping[str, float | str]) -> str:
    return "; ".join(f"{k}={_fmt(assumptions[k])}" for k in ASSUMPTION_KEYS if k in assumptions)


def _shares(ops: Sequence[Any], counts: Mapping[str, Any], bottleneck: str
            ) -> tuple[dict[str, float], str]:
    """Each op's share of its region's predicted time, and the basis."""
    if len(ops) == 1:
        return {ops[0].name: 1.0}, "single op"
    by_flops = bottleneck in ("compute", "parallelism")
    weight = {o.name: float(counts[o.name].flops if by_flops else counts[o.name].bytes_moved)
              for o in ops}
    total = sum(weight.values())
    if total > 0:
        return {k: w / total for k, w in weight.items()}, "flops" if by_flops else "bytes"
    real = [o.name for o in ops if not counts[o.name].is_view] or [o.name for o in ops]
    return {o.name: (1.0 / len(real) if o.name in real else 0.0) for o in ops}, "equal"


# ---- measured ------------------------------------------------------------------------------
def _node_kernels(validation: Mapping[str, Any] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    if validation is None or not isinstance(validation.get("nodes"), Mapping):
        return out
    for p in validation["nodes"].get("partitions", []):
        for op, names in (p.get("op_kernels") or {}).items():
            out[str(op)] = ", ".join(str(n) for n in names)
    return out


def _partition_s(validation: Mapping[str, Any] | None) -> dict[str, float]:
    if validation is None:
        return {}
    return {str(t["task"]): float(t["measured_s"])
            for t in validation["attribution"]["latency"]["tasks"]
            if t.get("kind", "compute") == "compute"}


# ---- the sheet -----------------------------------------------------------------------------
def mapping_sheet(plan: Plan, validation: Mapping[str, Any] | None = None, *,
                  graph: Graph | None = None, machine: Machine | None = None,
                  validation_file: str | None = None) -> list[SheetRow]:
    """One ``SheetRow`` per op of ``plan``, in schedule order (ops of a region in its
    order). ``validation``: the parsed JSON of ``placewise validate PLAN --json`` of this
    plan (another plan's is an ``InputError`` naming ``validation_file``); ``graph`` and
    ``machine``: the plan's (default: loaded and fingerprint-checked, as
    ``placewise.utilization.plan_graph`` / ``plan_machine``)."""
    if graph is None:
        graph = plan_graph(plan)
    else:
        check_fingerprints(plan, graph=graph)
    if machine is None:
        machine = plan_machine(plan)
    else:
        check_fingerprints(plan, machine=machine)
    op_s: dict[str, float] = {}
    vertex_s: dict[str, float] = {}
    if validation is not None:
        check_validation(plan, validation, file=validation_file)
        op_s = measured_op_s(validation)
        vertex_s, _ = measured_vertex_s(plan, validation)
    part_s = _partition_s(validation)
    kernels = _node_kernels(validation)
    parts = vertex_partitions(plan, graph, machine)
    rows: list[SheetRow] = []
    for t in plan.schedule.tasks:
        if t.kind is not TaskKind.COMPUTE or t.vertex is None:
            continue
        reg = plan.regions[t.vertex]
        a = plan.placement[t.vertex]
        dtype = DType.parse(a["dtype"])
        ops = [graph.op(o) for o in reg.ops]
        counts = {o.name: count_op(graph, o) for o in ops}
        shares, basis = _shares(ops, counts, t.bottleneck.value)
        part = parts.get(t.vertex, "")
        provider = _provider(machine, a["device"], dtype)
        assumption = _assumption(t.assumptions)
        for o in ops:
            prov = o.provenance
            kernel = prov.source_op or o.kind.value
            if o.name in kernels:
                kernel += f" -> {kernels[o.name]}"
            elif o.name in op_s:
                kernel += " -> (no node of its own: fused into another node, or eliminated)"
            measured, source = None, ""
            if o.name in op_s:
                measured, source = op_s[o.name], "node profile"
            elif len(ops) == 1 and t.vertex in vertex_s:
                measured, source = vertex_s[t.vertex], "partition of this op alone"
            elif part in part_s:
                source = "partition only"
            rows.append(SheetRow(
                o.name, o.kind.value, prov.module_path or prov.source, prov.source_op,
                t.vertex, reg.pattern, part, a["device"], dtype.value, provider, kernel,
                assumption, t.bottleneck.value, float(counts[o.name].flops),
                int(counts[o.name].bytes_moved), float(t.duration_s), shares[o.name], basis,
                float(t.duration_s) * shares[o.name], measured, vertex_s.get(t.vertex),
                part_s.get(part), source if validation is not None else ""))
    return rows


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ""
    return str(v)


def write_sheet_csv(rows: Iterable[SheetRow], path: str | os.PathLike[str]) -> None:
    """Write the sheet as CSV (header ``SHEET_COLUMNS``; floats in Python's round-trip
    form, missing values empty), atomically (``placewise.io``): a failure leaves no file."""
    check_output_path(path)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(SHEET_COLUMNS)
    for r in rows:
        w.writerow([_cell(v) for v in astuple(r)])
    atomic_write_text(path, buf.getvalue())


def sheet_summary(rows: Sequence[SheetRow]) -> dict[str, Any]:
    """Counts and totals of a sheet: rows, regions, partitions, devices, predicted and
    measured seconds (the measured total only over rows that have one)."""
    measured = [r.measured_s for r in rows if r.measured_s is not None]
    return {"rows": len(rows), "regions": len({r.region for r in rows}),
            "partitions": sorted({r.partition for r in rows if r.partition}),
            "devices": sorted({r.device for r in rows}),
            "predicted_s": sum(r.predicted_s for r in rows),
            "measured_rows": len(measured), "measured_s": sum(measured) if measured else None}
