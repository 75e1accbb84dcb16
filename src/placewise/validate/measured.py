"""A plan's prediction against a profile measured on the target, without running anything
(``placewise validate PLAN --measured PROFILE...``): for machines placewise cannot run on.

``validate_measured(plan, profiles)`` reads nothing but the plan, its model and the
profiles (already read: ``calibrate.imports.read_profile``). The profiles' regions are
matched to the planned graph's ops by the import's own rules
(``calibrate.imports.build.measure_ops``: same matching, same split of a region covering
several ops by roofline time, same refusals: another model, another batch or shapes,
another precision), on the plan machine's device of the kind the profile ran on. Then:

- **per partition** (``plan_file_partitions``): its device, the predicted time (its compute
  tasks' terms: compute, memory, launch, the rest as ``other``), the measured time (its
  ops' median seconds summed) and the share of its ops the profile covered;
- **per crossing direction** (host to device, device to host): the plan's predicted
  transfer seconds against the profile's timed copies, where the profile timed copies;
- **end to end**: the plan's latency against the profile's median (and p90) run time;
- **misses**: the vertices (one op each, or a fused group) whose predicted time differs
  most from their ops' measured time, with op kind and module path;
- **engines**: where the profile ran against the devices the plan placed ops on. A
  partition on another kind of device than the profile measured is *flagged*: its
  measured figures are the profile's device's, compared with the plan's prediction on
  its own device.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from placewise.calibrate.imports.build import MeasuredOps, engine_class, measure_ops
from placewise.calibrate.imports.records import ImportedProfile, quantiles
from placewise.calibrate.imports.torch_trace import align_torch
from placewise.cost.model import Term
from placewise.errors import InputError, ProfileError
from placewise.graph.ir import Graph
from placewise.graph.onnx_import import read_onnx_as_is
from placewise.hardware.spec import Machine
from placewise.plan import check_fingerprints
from placewise.plan_partitions import plan_file_partitions
from placewise.plan_records import Plan
from placewise.plan_sources import plan_machine
from placewise.runtime.planned import load_planned_source
from placewise.schedule.simulate import TaskKind
from placewise.units import format_seconds

__all__ = ["MeasuredValidation", "PartitionRow", "validate_measured"]

#: misses listed, largest first
TOP_MISSES = 10
_TERMS = (Term.COMPUTE, Term.MEMORY, Term.LAUNCH)


def _err(pred: float, meas: float) -> float | None:
    """(predicted - measured) / measured; None when nothing was measured."""
    return (pred - meas) / meas if meas > 0 else None


@dataclass(frozen=True, slots=True)
class PartitionRow:
    """One partition: predicted seconds by term, measured seconds, coverage, error."""

    name: str
    device: str
    device_kind: str
    ops: int
    ops_measured: int
    predicted_s: float
    terms_s: dict[str, float]
    measured_s: float
    flagged: bool

    @property
    def coverage(self) -> float:
        return self.ops_measured / self.ops if self.ops else 0.0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "coverage": self.coverage,
                "error": _err(self.predicted_s, self.measured_s)}


@dataclass(frozen=True, slots=True)
class CopyRow:
    """One direction of copies: the plan's predicted transfer seconds (its crossings'
    transfer terms) and the profile's timed copies (median per run, summed)."""

    direction: str
    crossings: int
    predicted_s: float
    copies: int
    measured_s: float

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "error": _err(self.predicted_s, self.measured_s)}


@dataclass(frozen=True, slots=True)
class Miss:
    """A vertex whose ops the profile measured: predicted vs measured seconds;
    ``flagged``: the plan placed it on another kind of device than the profile ran on."""

    vertex: str
    ops: int
    kind: str
    module_path: str
    device: str
    predicted_s: float
    measured_s: float
    flagged: bool

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "miss_s": self.predicted_s - self.measured_s,
                "error": _err(self.predicted_s, self.measured_s)}


@dataclass(frozen=True, slots=True)
class MeasuredValidation:
    """The comparison (module docstring). ``measured_total_s``: every measured op's
    median summed (the partitions' measured times sum to it); ``run_s``: the profile's
    (median, p10, p90) whole run, None where it does not time runs."""

    plan: str
    machine: str
    profiles: tuple[str, ...]
    tools: tuple[str, ...]
    profile_device: str
    profile_device_kind: str
    engines: dict[str, int]
    plan_devices: tuple[str, ...]
    partitions: tuple[PartitionRow, ...]
    copies: tuple[CopyRow, ...]
    predicted_latency_s: float
    run_s: tuple[float, float, float] | None
    runs: int
    run_overhead_s: float | None
    measured_total_s: float
    misses: tuple[Miss, ...]
    unattributed: tuple[str, ...]
    unmatched: tuple[str, ...]
    other_engine: tuple[str, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        run = self.run_s
        return {
            "plan": self.plan, "machine": self.machine, "profiles": list(self.profiles),
            "tools": list(self.tools), "profile_device": self.profile_device,
            "profile_device_kind": self.profile_device_kind, "engines": self.engines,
            "plan_devices": list(self.plan_devices),
            "partitions": [p.to_json() for p in self.partitions],
            "copies": [c.to_json() for c in self.copies],
            "end_to_end": {
                "predicted_s": self.predicted_latency_s,
                "measured_median_s": run[0] if run else None,
                "measured_p10_s": run[1] if run else None,
                "measured_p90_s": run[2] if run else None, "runs": self.runs,
                "run_overhead_s": self.run_overhead_s,
                "error": _err(self.predicted_latency_s, run[0]) if run else None},
            "measured_total_s": self.measured_total_s,
            "misses": [m.to_json() for m in self.misses],
            "unattributed": list(self.unattributed), "unmatched": list(self.unmatched),
            "other_engine": list(self.other_engine), "notes": list(self.notes)}


# ---- the graph and the device --------------------------------------------------------------


def _planned_graph(plan: Plan, file: str | None) -> tuple[Graph, Any]:
    """The plan's model as planned (its recorded shapes and values; the fingerprint
    checked) and, for an ONNX model, its ``ModelProto`` (onnxruntime's node names)."""
    src = load_planned_source(plan.model, plan, None)
    if src.graph is None:
        raise InputError("the model source has no graph", file=src.ref)
    check_fingerprints(plan, graph=src.graph, file=file)
    onnx_model = None
    if plan.model.lower().endswith(".onnx"):
        onnx_model = read_onnx_as_is(plan.model)
    return src.graph, onnx_model


def _profile_device(profiles: Sequence[ImportedProfile], machine: Machine, plan: Plan
                    ) -> str | None:
    """The plan machine's device of the kind the profiles ran on (one the plan uses
    first, then an onnxruntime one), else the plan's first device where the profiles do
    not say; refused when the machine has no device of that kind."""
    votes: dict[str, int] = {}
    for p in profiles:
        for r in p.regions:
            cls = engine_class(r.engine)
            if cls:
                votes[cls] = votes.get(cls, 0) + 1
    used = plan.devices_used()
    if not votes:
        return used[0] if used else None
    main = max(votes, key=lambda c: votes[c])
    cands = [d for d in machine.devices if d.kind.value == main]
    if not cands:
        raise ProfileError(f"the profile ran on a {main} device; the plan's machine "
                           f"{machine.name!r} has none ({', '.join(machine.device_names)})",
                           file=profiles[0].source.file)
    cands.sort(key=lambda d: (d.name not in used, d.backend != "onnxruntime"))
    return cands[0].name


# ---- the comparison ------------------------------------------------------------------------


def validate_measured(plan: Plan, profiles: Sequence[ImportedProfile], *,
                      file: str | None = None,
                      region_nodes: Mapping[str, Sequence[str]] | None = None
                      ) -> MeasuredValidation:
    """The plan's prediction against ``profiles`` (module docstring). ``file``: the plan
    file, for messages; ``region_nodes``: the ONNX nodes of compiled subgraphs the
    profiles do not name (``subgraph_nodes``). ``ProfileError``/``InputError`` for every
    refusal; nothing runs."""
    if not profiles:
        raise ProfileError("no profile given")
    machine = plan_machine(plan, file=file)
    graph, onnx_model = _planned_graph(plan, file)
    if any(p.source.tool == "torch.profiler" for p in profiles):
        profiles = [align_torch(p, graph) if p.source.tool == "torch.profiler" else p
                    for p in profiles]
    device = _profile_device(profiles, machine, plan)
    got = measure_ops(profiles, graph, machine, device=device, batch=plan.batch,
                      onnx_model=onnx_model, model_ref=plan.model, region_nodes=region_nodes)
    kind = machine.device(got.device).kind.value
    parts = _partitions(plan, got, kind)
    run = quantiles(got.runs_s) if got.runs_s else None
    notes = _notes(plan, parts, got, kind)
    return MeasuredValidation(
        plan=file or "", machine=machine.name,
        profiles=tuple(p.source.file for p in profiles),
        tools=tuple(sorted({p.source.tool for p in profiles})),
        profile_device=got.device, profile_device_kind=kind, engines=got.engines,
        plan_devices=tuple(plan.devices_used()), partitions=tuple(parts),
        copies=tuple(_copies(plan, got)), predicted_latency_s=plan.predicted_latency_s,
        run_s=(run[1], run[0], run[2]) if run else None, runs=len(got.runs_s),
        run_overhead_s=got.run_overhead_s,
        measured_total_s=sum(m[0] for m in got.op_s.values()),
        misses=tuple(_misses(plan, graph, got, kind)), unattributed=got.unattributed,
        unmatched=got.unmatched, other_engine=got.other_engine, notes=tuple(notes))


def _device_kinds(plan: Plan) -> dict[str, str]:
    return {d.name: d.kind for d in plan.machine.devices}


def _partitions(plan: Plan, got: MeasuredOps, kind: str) -> list[PartitionRow]:
    tasks = plan.task_index()
    kinds = _device_kinds(plan)
    rows = []
    for part in plan_file_partitions(plan):
        ops = [o for v in part.tasks for o in plan.regions[v].ops]
        terms = {t.value: 0.0 for t in _TERMS} | {"other": 0.0}
        for v in part.tasks:
            for term, s in tasks[v].terms_s.items():
                terms[term.value if term in _TERMS else "other"] += s
        measured = [got.op_s[o][0] for o in ops if o in got.op_s]
        dkind = kinds.get(part.device, "")
        rows.append(PartitionRow(
            name=part.name, device=part.device, device_kind=dkind, ops=len(ops),
            ops_measured=len(measured), predicted_s=sum(tasks[v].duration_s
                                                        for v in part.tasks),
            terms_s=terms, measured_s=sum(measured), flagged=dkind != kind))
    return rows


def _copies(plan: Plan, got: MeasuredOps) -> list[CopyRow]:
    """Per direction between host and device memory, where the profile timed copies."""
    if not got.copies:
        return []
    kinds = _device_kinds(plan)
    rows = []
    for src, dst in (("host", "device"), ("device", "host")):
        timed = [c for c in got.copies if c.src == src and c.dst == dst]
        cross = [c for c in plan.crossings if c.transfer_s > 0 and
                 (kinds.get(c.src_device) == "cpu") == (src == "host") and
                 (kinds.get(c.dst_device) == "cpu") == (dst == "host")]
        if not timed and not cross:
            continue
        rows.append(CopyRow(
            direction=f"{src} -> {dst}", crossings=len(cross),
            predicted_s=sum(c.transfer_s for c in cross), copies=len(timed),
            measured_s=sum(quantiles(c.samples_s)[1] for c in timed if c.samples_s)))
    return rows


def _misses(plan: Plan, graph: Graph, got: MeasuredOps, kind: str) -> list[Miss]:
    """The vertices whose every op was measured, largest |predicted - measured| first."""
    kinds = _device_kinds(plan)
    out = []
    for t in plan.schedule.tasks:
        if t.kind is not TaskKind.COMPUTE or t.name not in plan.regions:
            continue
        ops = plan.regions[t.name].ops
        if not ops or any(o not in got.op_s for o in ops):
            continue
        first = graph.op(ops[0])
        out.append(Miss(
            vertex=t.name, ops=len(ops), kind=plan.ops[ops[0]].kind.value,
            module_path=first.provenance.module_path or first.provenance.source,
            device=t.device, predicted_s=t.duration_s,
            measured_s=sum(got.op_s[o][0] for o in ops),
            flagged=kinds.get(t.device, "") != kind))
    out.sort(key=lambda m: -abs(m.predicted_s - m.measured_s))
    return out[:TOP_MISSES]


def _notes(plan: Plan, parts: Sequence[PartitionRow], got: MeasuredOps, kind: str
           ) -> list[str]:
    notes = []
    flagged = [p for p in parts if p.flagged]
    if flagged:
        where = sorted({f"{p.device} ({p.device_kind})" for p in flagged})
        notes.append(
            f"the profile measured the ops on {got.device} ({kind}); the plan placed "
            f"{len(flagged)} of {len(parts)} partitions on {', '.join(where)}: their "
            f"measured times are {kind} times against the plan's prediction on its own "
            f"device (flagged)")
    if got.unattributed:
        notes.append(f"{len(got.unattributed)} regions name no node of the model "
                     f"(compiled subgraphs): their time is in no partition")
    if got.other_engine:
        notes.append(f"{len(got.other_engine)} nodes ran on another kind of device than "
                     f"{got.device}: left out")
    if got.runs_s:
        run, ops_s = quantiles(got.runs_s)[1], sum(m[0] for m in got.op_s.values())
        if run > ops_s:
            notes.append(f"the median run is {format_seconds(run - ops_s)} longer than its measured ops "
                         f"summed: the run overhead, the executor's time between nodes (the "
                         f"profiler's own per-node cost among it) and any unattributed region")
    missing = sum(p.ops - p.ops_measured for p in parts)
    if missing:
        notes.append(f"{missing} of {sum(p.ops for p in parts)} planned ops were not "
                     f"measured (the profile's optimized graph may have folded them)")
    return notes

