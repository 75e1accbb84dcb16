"""Imported profiles -> a calibration: measured regions matched to a graph's ops.

``import_calibration(profiles, graph, machine, device=...)`` takes what readers made of
on-target profiles (``ImportedProfile``) and writes a ``Calibration`` for one device of
``machine``:

- **matching**: a region names source nodes (``MeasuredRegion.nodes``). A node the
  model's optimized graph holds (onnxruntime's CPU optimization, built here the way a
  default session does, ``runtime.ort_profile.optimized_nodes``) gets the ops whose work
  it does (``node_owners``: fused and NCHWc nodes, their layout reorders); any other node
  the op of that name (``Op.provenance.source`` or ``Op.name``); a region that names no
  node but a module path (a torch trace) the ops of that module its framework op names
  (else all of them); a region that names neither (a ``TRTKernel_graph_*`` subgraph, a
  DLA ``{ForeignNode[...]}``) is unattributed unless ``region_nodes`` gives its nodes;
- **splitting**: a region covering several ops gives each a share of every sample in
  proportion to the op's roofline time on the device (equal shares where the roofline
  has none); the report counts such regions;
- **measurements**: each covered op becomes a ``Measurement`` keyed by ``op_key`` on the
  device in its precision (``precision``, else the widest float type of its tensors,
  else the model's); ops with the same key pool their samples (median, p10, p90, n);
  ``backend`` says ``import:<tool>``. No fits are written: ops nobody measured keep the
  roofline (``CalibratedModel`` treats a calibration with ``imports`` so);
- **overhead**: each run's time outside the framework's executor (onnxruntime's
  ``model_run`` less its ``SequentialExecutor::Execute``; where the profile does not time
  the executor, the run less its nodes' times) is the device's ``run_call``. The time
  between nodes inside the executor is reported (``node_gaps_s``), not charged: it holds
  the profiler's own per-node cost, which an unprofiled run does not pay;
- **copies** between host and device memory become a ``LinkMeasurement`` where at least
  two sizes were timed; **reformats** whose formats are representations
  (``fp32/nchw``) become conversion measurements; onnxruntime's layout reorders join the
  ops they serve (as in placewise's own profiles);
- **provenance**: one ``ImportRecord`` per file (tool, version, file, sha256, date,
  device, profiled and matched nodes, ops covered).

Refused with ``ProfileError`` (nothing is written): a device not in the machine or not of
the class the profile ran on; a profile of another model (fewer than a quarter of its
nodes name an op, covering less than a quarter of the ops: ``MIN_MATCHED_SHARE``);
another batch, input shape or precision than asked (from the profile's shapes and types
against the graph's).
"""

from __future__ import annotations

import datetime as _dt
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from placewise.calibrate.imports.records import (
    ImportedProfile,
    MeasuredRegion,
    MeasuredTransfer,
)
from placewise.cost.calibrated import (
    conversion_key,
    device_record,
    op_family,
    op_features,
    op_key,
    op_series,
)
from placewise.cost.calibration import (
    Calibration,
    DeviceRecord,
    ImportRecord,
    LinkMeasurement,
    Measurement,
    StepOverhead,
)
from placewise.cost.fit import fit_link
from placewise.cost.model import Representation
from placewise.cost.roofline import RooflineModel
from placewise.errors import ProfileError
from placewise.graph.ir import Graph, Op, OpKind
from placewise.hardware.spec import Device, Machine
from placewise.hardware.stats import quantiles
from placewise.runtime.ort_profile import node_owners, optimized_nodes, profile_names
from placewise.schedule.placement import natural_dtype
from placewise.units import DType, Layout

__all__ = [
    "MIN_MATCHED_SHARE",
    "ImportReport",
    "MeasuredOps",
    "engine_class",
    "import_calibration",
    "measure_ops",
]

#: a profile whose timed nodes name ops of the model less often than this, and cover less
#: than this share of its ops, is of another model (a profile taken under another provider
#: names some fused nodes that the CPU-optimized graph does not hold: a low bar)
MIN_MATCHED_SHARE = 0.25
_PROVIDERS = {
    "cpu": ("CPUExecutionProvider", "DnnlExecutionProvider", "XnnpackExecutionProvider",
            "ACLExecutionProvider", "ArmNNExecutionProvider"),
    "gpu": ("CUDAExecutionProvider", "TensorrtExecutionProvider", "ROCMExecutionProvider",
            "MIGraphXExecutionProvider", "DmlExecutionProvider", "WebGpuExecutionProvider",
            "JsExecutionProvider", "NvTensorRTRTXExecutionProvider"),
    "npu": ("QNNExecutionProvider", "VitisAIExecutionProvider", "NnapiExecutionProvider",
            "CoreMLExecutionProvider", "RknpuExecutionProvider"),
}


def engine_class(engine: str) -> str:
    """The device class (``cpu``, ``gpu``, ``dla``, ``npu``) of the place a tool says a
    region ran, ``""`` when it does not tell (OpenVINO's provider runs on any of them).

    >>> engine_class("CUDAExecutionProvider"), engine_class("DLA"), engine_class("cpu")
    ('gpu', 'dla', 'cpu')
    >>> engine_class("OpenVINOExecutionProvider")
    ''
    """
    for cls, names in _PROVIDERS.items():
        if engine in names:
            return cls
    e = engine.lower()
    for cls, words in (("dla", ("dla",)), ("gpu", ("gpu", "cuda")), ("npu", ("npu", "htp")),
                       ("cpu", ("cpu",))):
        if any(w in e for w in words):
            return cls
    return ""


@dataclass(frozen=True, slots=True)
class ImportReport:
    """What an import did, for the command line: the device, per profile its record, and
    over all profiles: timed nodes, those that named ops, those left out and why, the ops
    covered, the share of the model's roofline time (on the device) now measured, keys
    written, copies and reformats, the per-run overhead. ``records.to_json`` makes its
    JSON (the fields, in order)."""

    device: str
    profiles: tuple[ImportRecord, ...]
    profiled_nodes: int
    matched_nodes: int
    unattributed: tuple[str, ...]
    unmatched: tuple[str, ...]
    other_engine: tuple[str, ...]
    graph_ops: int
    ops_covered: int
    measured_share: float
    measurements: int
    split_nodes: int
    copies: int
    links: tuple[str, ...]
    reformats: int
    reformats_attributed: int
    conversions: int
    run_overhead_s: float | None
    run_overhead_n: int
    node_gaps_s: float | None
    precision: str
    notes: tuple[str, ...] = field(default_factory=tuple)


# ---- the device -----------------------------------------------------------------------------


def _choose_device(profiles: Sequence[ImportedProfile], machine: Machine,
                   device: str | None) -> Device:
    """``device`` checked against the machine and the profiles' engines, or the one
    device of the class the profiles ran on (an onnxruntime backend first)."""
    classes = Counter(engine_class(r.engine) for p in profiles for r in p.regions)
    known = [c for c, _n in classes.most_common() if c]
    main = known[0] if known else ""
    if device is not None:
        if device not in machine.device_names:
            raise ProfileError(f"device {device!r} is not a device of machine "
                               f"{machine.name!r} (devices: {', '.join(machine.device_names)})",
                               place="--device")
        dev = machine.device(device)
        if main and _kind(dev) != main and not classes.get(_kind(dev)) and \
                dev.kind.value != "accelerator":
            raise ProfileError(f"the profile ran on {_engines(profiles)} ({main}); device "
                               f"{device!r} is a {dev.kind.value}", place="--device")
        return dev
    if not main:
        raise ProfileError(f"the profile does not say which kind of device it ran on "
                           f"({_engines(profiles)}): name the device with --device",
                           place="--device")
    cands = [d for d in machine.devices if _kind(d) == main]
    tools = {p.source.tool for p in profiles}
    if len(cands) > 1 and "onnxruntime" in tools:
        ort = [d for d in cands if d.backend == "onnxruntime"]
        cands = ort or cands
    if len(cands) != 1:
        what = (f"has no {main} device" if not cands else
                f"has {len(cands)} {main} devices ({', '.join(d.name for d in cands)})")
        raise ProfileError(f"the profile ran on {_engines(profiles)} ({main}); machine "
                           f"{machine.name!r} {what}: name one with --device",
                           place="--device")
    return cands[0]


def _kind(dev: Device) -> str:
    return str(dev.kind.value)


def _engines(profiles: Sequence[ImportedProfile]) -> str:
    names = Counter(r.engine or "?" for p in profiles for r in p.regions)
    return ", ".join(n for n, _c in names.most_common(3))


# ---- matching ---------------------------------------------------------------------------------


@dataclass(slots=True)
class _Matcher:
    """Source node name (or torch module path) -> op names of ``graph``."""

    graph: Graph
    optimized: dict[str, list[str]]
    by_name: dict[str, str]
    by_module: dict[str, list[Op]] = field(default_factory=dict)

    @classmethod
    def make(cls, graph: Graph, onnx_model: Any) -> _Matcher:
        by_name: dict[str, str] = {}
        for op in graph.ops:
            by_name.setdefault(op.name, op.name)
            if op.provenance.source:
                by_name.setdefault(op.provenance.source, op.name)
        optimized: dict[str, list[str]] = {}
        if onnx_model is not None:
            # an unnamed node is "<OpType>_<index>" in profiles, another index than the
            # importer's name for it
            for i, (node, name) in enumerate(zip(onnx_model.graph.node,
                                                 profile_names(onnx_model), strict=True)):
                if not node.name and name:
                    pw = by_name.get(f"{node.op_type}_{i}")
                    if pw is not None:
                        by_name.setdefault(name, pw)
            nodes = optimized_nodes(onnx_model)
            optimized = {k: v for k, v in node_owners(nodes, graph.ops).items() if v}
        by_module: dict[str, list[Op]] = {}
        for op in graph.ops:
            if op.provenance.module_path:
                by_module.setdefault(op.provenance.module_path, []).append(op)
        return cls(graph, optimized, by_name, by_module)

    def ops_of_module(self, path: str, op_type: str) -> list[str]:
        """The ops of module ``path`` (a torch graph's provenance) that the framework op
        ``op_type`` names (``aten::linear`` is ``aten.linear.default``), else all of them.

        >>> _Matcher.op_name("aten::linear"), _Matcher.op_name("aten.linear.default")
        ('linear', 'linear')
        """
        ops = self.by_module.get(path, [])
        want = self.op_name(op_type)
        same = [op.name for op in ops if want and self.op_name(op.provenance.source_op) == want]
        return same or [op.name for op in ops]

    @staticmethod
    def op_name(text: str) -> str:
        """``aten::linear`` / ``aten.linear.default`` / ``onnx::Gemm`` -> the bare name."""
        t = text.replace("::", ".")
        for prefix in ("aten.", "onnx.", "torch.", "quantized."):
            t = t.removeprefix(prefix)
        return t.split(".")[0].lower()

    def ops_of(self, nodes: Sequence[str]) -> list[str]:
        out: list[str] = []
        for n in nodes:
            got = self.optimized.get(n)
            if got is None:
                op = self.by_name.get(n)
                got = [op] if op is not None else []
            out.extend(o for o in got if o not in out)
        return out


# ---- checks: model, batch, precision -------------------------------------------------------


def _check_shapes(matched: Sequence[tuple[MeasuredRegion, list[str]]], graph: Graph,
                  batch: int | None, file: str) -> None:
    """Refuse a profile whose nodes' output shapes are not the graph's (another batch,
    other input shapes), voting over the regions that cover one op."""
    same = 0
    batch_diff: list[tuple[MeasuredRegion, tuple[int, ...], tuple[int, ...]]] = []
    other: list[tuple[MeasuredRegion, tuple[int, ...], tuple[int, ...]]] = []
    for r, ops in matched:
        if len(ops) != 1 or not r.out_shapes:
            continue
        got = r.out_shapes[0]
        shapes = [tuple(graph.tensor(t).concrete_shape) for t in graph.op(ops[0]).outputs]
        if got in shapes:
            same += 1
            continue
        peers = [w for w in shapes if len(w) == len(got)]
        if peers and len(got) > 0 and any(w[1:] == got[1:] for w in peers):
            w = next(w for w in peers if w[1:] == got[1:])
            batch_diff.append((r, got, w))
        elif peers:
            other.append((r, got, peers[0]))
    if same >= len(batch_diff) + len(other):
        return
    if len(batch_diff) > len(other):
        r, got, want = batch_diff[0]
        seen = Counter(g[0] for _r, g, _w in batch_diff).most_common(1)[0][0]
        raise ProfileError(
            f"profiled at batch {seen}, asked batch {batch if batch is not None else want[0]} "
            f"(node {r.label!r} output {list(got)}, the graph has {list(want)}; "
            f"{len(batch_diff)} of {same + len(batch_diff) + len(other)} nodes differ so): "
            f"bind batch {seen} (--batch {seen}, or in --shape)", file=file)
    r, got, want = other[0]
    raise ProfileError(
        f"profiled at other input shapes than the graph's (node {r.label!r} output "
        f"{list(got)}, the graph has {list(want)}; {len(other)} of "
        f"{same + len(batch_diff) + len(other)} nodes differ): bind the profiled shapes "
        f"with --shape", file=file)


def _model_dtype(graph: Graph) -> DType:
    floats = Counter(t.dtype for t in graph.tensors if t.dtype.is_float)
    return floats.most_common(1)[0][0] if floats else DType.FP32


def _op_dtype(graph: Graph, op: Op, default: DType) -> DType:
    ds = [graph.tensor(t).dtype for t in (*op.inputs, *op.outputs) if t]
    return natural_dtype(ds) if any(d.is_float for d in ds) else default


def _check_precision(matched: Sequence[tuple[MeasuredRegion, list[str]]], graph: Graph,
                     asked: DType | None, model: DType, file: str) -> None:
    """Refuse a profile whose nodes compute in another precision than the ops they cover
    would (``asked``, else each op's own), voting over the regions that say."""
    agree, differ = 0, Counter[tuple[str, str]]()
    for r, ops in matched:
        if not r.precision or not ops:
            continue
        want = (asked or _op_dtype(graph, graph.op(ops[0]), model)).value
        if r.precision == want:
            agree += 1
        else:
            differ[(r.precision, want)] += 1
    if sum(differ.values()) <= agree:
        return
    (got, want), n = differ.most_common(1)[0]
    how = "asked" if asked is not None else "the model's own"
    raise ProfileError(f"the profile computes in {got} ({n} of {agree + sum(differ.values())} "
                       f"nodes), {how} precision is {want}"
                       + ("" if asked is not None else f": give --precision {got}"),
                       file=file)


# ---- the import -------------------------------------------------------------------------------


@dataclass(slots=True)
class _Pool:
    """Samples gathered over every profile: per op key, per link, the run overheads."""

    keys: dict[str, tuple[Op, DType, list[float], str]] = field(default_factory=dict)
    conversions: dict[str, tuple[str, DType, list[float], str]] = field(default_factory=dict)
    copies: dict[tuple[str, str], list[tuple[int, float]]] = field(default_factory=dict)
    overhead_s: list[float] = field(default_factory=list)
    overhead_how: set[str] = field(default_factory=set)
    gaps_s: list[float] = field(default_factory=list)  # executor time between nodes
    covered: set[str] = field(default_factory=set)
    op_samples: dict[str, list[float]] = field(default_factory=dict)  # op name -> per run
    runs_s: list[float] = field(default_factory=list)  # each kept run's whole time
    copy_list: list[MeasuredTransfer] = field(default_factory=list)  # every copy timed
    split_nodes: int = 0
    reformats: int = 0
    reformats_attributed: int = 0
    copies_timed: int = 0


@dataclass(slots=True)
class _Context:
    graph: Graph
    machine: Machine
    dev: Device
    asked: DType | None
    model_dtype: DType
    matcher: _Matcher
    weights: dict[str, float] = field(default_factory=dict)
    roofline: Any = None

    def dtype(self, op: Op) -> DType:
        return self.asked or _op_dtype(self.graph, op, self.model_dtype)

    def weight(self, op: Op) -> float:
        """The op's roofline seconds on the device (0: it cannot run there)."""
        w = self.weights.get(op.name)
        if w is None:
            if self.roofline is None:
                self.roofline = RooflineModel(self.machine)
            try:
                w = self.roofline.op_cost(self.graph, op, self.dev.name,
                                          self.dtype(op)).total_s
            except Exception:  # a kind the device cannot run, an op the counter rejects
                w = 0.0
            self.weights[op.name] = w if math.isfinite(w) and w > 0 else 0.0
        return self.weights[op.name]


@dataclass(frozen=True, slots=True)
class MeasuredOps:
    """What profiles measured of a graph's ops on one device (``measure_ops``).

    ``op_s``: op name -> (median, p10, p90) seconds over the kept runs (a region covering
    several ops shared by roofline time); ``runs_s``: each kept run's whole time;
    ``run_overhead_s``: the median per-run time outside the framework's executor (None:
    not timed); ``copies``: every copy the profiles timed; ``unattributed``: regions that
    name no node; ``unmatched``: nodes that name no op; ``other_engine``: regions that ran
    on another kind of device than ``device`` (left out); ``engines``: where the regions
    ran, as the tools say, with how many regions ran there."""

    device: str
    op_s: dict[str, tuple[float, float, float]]
    runs_s: tuple[float, ...]
    run_overhead_s: float | None
    copies: tuple[MeasuredTransfer, ...]
    unattributed: tuple[str, ...]
    unmatched: tuple[str, ...]
    other_engine: tuple[str, ...]
    engines: dict[str, int]
    records: tuple[ImportRecord, ...]


def _match_all(profiles: Sequence[ImportedProfile], graph: Graph, machine: Machine, *,
               device: str | None, batch: int | None, precision: str | DType | None,
               onnx_model: Any, model_ref: str,
               region_nodes: Mapping[str, Sequence[str]] | None
               ) -> tuple[_Context, _Pool, list[ImportRecord], list[list[str]]]:
    """Every profile matched to ``graph`` on the chosen device and checked (the rules of
    the module docstring): the context, the pooled samples, a record per profile, and the
    regions left out (unattributed, unmatched, on another engine)."""
    if not profiles:
        raise ProfileError("no profile given")
    dev = _choose_device(profiles, machine, device)
    asked = precision if isinstance(precision, DType) or precision is None else \
        _parse_dtype(precision)
    ctx = _Context(graph, machine, dev, asked, _model_dtype(graph),
                   _Matcher.make(graph, onnx_model))
    pool = _Pool()
    records: list[ImportRecord] = []
    left: list[list[str]] = [[], [], []]
    for prof in profiles:
        rec, counts = _one_profile(prof, ctx, pool, region_nodes or {}, batch, model_ref)
        records.append(rec)
        for acc, got in zip(left, counts, strict=True):
            acc += got
    return ctx, pool, records, left


def measure_ops(profiles: Sequence[ImportedProfile], graph: Graph, machine: Machine, *,
                device: str | None = None, batch: int | None = None,
                precision: str | DType | None = None, onnx_model: Any = None,
                model_ref: str = "",
                region_nodes: Mapping[str, Sequence[str]] | None = None) -> MeasuredOps:
    """The seconds ``profiles`` measured for each op of ``graph`` on ``device`` (default:
    the one device of the class they ran on) of ``machine``, matched, split and checked
    as ``import_calibration`` does (its arguments); ``ProfileError`` for every refusal."""
    ctx, pool, records, left = _match_all(
        profiles, graph, machine, device=device, batch=batch, precision=precision,
        onnx_model=onnx_model, model_ref=model_ref, region_nodes=region_nodes)
    over = quantiles(pool.overhead_s)[1] if pool.overhead_s else None
    engines = Counter(r.engine or "?" for p in profiles for r in p.regions)
    return MeasuredOps(
        device=ctx.dev.name,
        op_s={o: _stats(s) for o, s in pool.op_samples.items() if s},
        runs_s=tuple(pool.runs_s), run_overhead_s=over, copies=tuple(pool.copy_list),
        unattributed=tuple(left[0]), unmatched=tuple(left[1]), other_engine=tuple(left[2]),
        engines=dict(engines.most_common()), records=tuple(records))


def import_calibration(profiles: Sequence[ImportedProfile], graph: Graph, machine: Machine, *,
                       device: str | None = None, batch: int | None = None,
                       precision: str | DType | None = None, onnx_model: Any = None,
                       model_ref: str = "",
                       region_nodes: Mapping[str, Sequence[str]] | None = None,
                       ) -> tuple[Calibration, ImportReport]:
    """The calibration of ``device`` (default: the one device of the class the profiles
    ran on) of ``machine`` from ``profiles`` matched to ``graph`` (module docstring), and
    what was done. ``onnx_model``: the model's ``ModelProto`` (onnxruntime's optimized
    node names are mapped through it); ``batch``/``precision``: what the caller asked
    (checked against the profiles); ``region_nodes``: the source nodes of regions whose
    profile does not name them (``TRTKernel_graph_*``). ``ProfileError`` for every
    refusal; nothing is written here."""
    ctx, pool, records, (unattributed, unmatched, other_engine) = _match_all(
        profiles, graph, machine, device=device, batch=batch, precision=precision,
        onnx_model=onnx_model, model_ref=model_ref, region_nodes=region_nodes)
    dev = ctx.dev
    measurements = _measurements(pool, ctx, profiles)
    if not measurements:
        raise ProfileError(
            "nothing to import: no timed node of the profiles names an op of the model on "
            f"device {dev.name!r}" + (f" ({len(unattributed)} compiled subgraphs do not name "
                                      f"their nodes)" if unattributed else ""),
            file=profiles[0].source.file)
    cal, report = _assemble(ctx, pool, profiles, records, measurements, model_ref)
    return cal, ImportReport(
        device=dev.name, profiles=tuple(records),
        profiled_nodes=sum(r.profiled_nodes for r in records),
        matched_nodes=sum(r.matched_nodes for r in records), unattributed=tuple(unattributed),
        unmatched=tuple(unmatched), other_engine=tuple(other_engine),
        graph_ops=len(graph.ops), **report)


def _parse_dtype(text: str) -> DType:
    try:
        return DType.parse(text)
    except ValueError as exc:
        raise ProfileError(str(exc), place="--precision") from None


def _one_profile(prof: ImportedProfile, ctx: _Context, pool: _Pool,
                 region_nodes: Mapping[str, Sequence[str]], batch: int | None,
                 model_ref: str) -> tuple[ImportRecord, tuple[list[str], list[str], list[str]]]:
    """Match one profile's regions, check it is of this model, batch and precision, and
    add its samples to ``pool``."""
    file = prof.source.file
    kind = _kind(ctx.dev)
    unattributed, unmatched, other = [], [], []
    matched: list[tuple[MeasuredRegion, list[str]]] = []
    named = 0
    for r in prof.regions:
        nodes = tuple(region_nodes.get(r.label, ())) or r.nodes
        if not nodes and not r.module_path:
            unattributed.append(r.label)
            continue
        named += 1
        ops = ctx.matcher.ops_of(nodes) if nodes else \
            ctx.matcher.ops_of_module(r.module_path, r.op_type)
        if not ops:
            unmatched.append(r.label)
            continue
        matched.append((r, ops))
    reached = {o for _r, ops in matched for o in ops}
    if named and len(matched) < MIN_MATCHED_SHARE * named and \
            len(reached) < MIN_MATCHED_SHARE * len(ctx.graph.ops):
        raise ProfileError(f"{len(matched)} of {named} profiled nodes name an op of "
                           f"{model_ref or ctx.graph.name}: a profile of another model?",
                           file=file)
    if prof.batch is not None and batch is not None and prof.batch != batch:
        raise ProfileError(f"profiled at batch {prof.batch} (the file says), asked batch "
                           f"{batch}", file=file)
    _check_shapes(matched, ctx.graph, batch, file)
    _check_precision(matched, ctx.graph, ctx.asked, ctx.model_dtype, file)
    parts: dict[str, list[list[float]]] = {}
    split = 0
    for r, ops in matched:
        cls = engine_class(r.engine)
        if cls and cls != kind and kind != "accelerator":
            other.append(r.label)
            continue
        split += _add_split(parts, ctx, r.samples_s, ops)
    pool.split_nodes += split
    for t in prof.transfers:
        _transfer(pool, ctx, t, parts)
    covered = set(parts)
    _flush(pool, ctx, parts, prof.source.tool)
    _add_overhead(pool, prof)
    pool.runs_s += prof.run_samples_s
    src = prof.source
    rec = ImportRecord(
        tool=src.tool, tool_version=src.tool_version, file=src.file, sha256=src.sha256,
        date=src.date, date_from=src.date_from, device=ctx.dev.name, engine=src.device,
        runs=prof.runs, warmup_dropped=prof.warmup_dropped,
        profiled_nodes=len(prof.regions), matched_nodes=len(matched),
        ops_covered=len(covered),
        extra_files=[f"{f} {h}" for f, h in src.extra_files],
        notes=[*prof.notes, *_notes(split, unattributed, unmatched, other, prof.threads,
                                    ctx.dev)][:100])
    return rec, (unattributed, unmatched, other)


def _add_overhead(pool: _Pool, prof: ImportedProfile) -> None:
    """Each run's time outside the framework's executor (else less its nodes' times) into
    ``pool``; the executor's time between nodes apart."""
    if prof.run_executor_s:  # outside the executor: the profiler's per-node cost left out
        pool.overhead_s += [max(run - ex, 0.0) for run, ex
                            in zip(prof.run_samples_s, prof.run_executor_s, strict=True)]
        pool.overhead_how.add("the run less its executor's time")
        if prof.run_nodes_s:
            pool.gaps_s += [max(ex - nodes, 0.0) for ex, nodes
                            in zip(prof.run_executor_s, prof.run_nodes_s, strict=True)]
    elif prof.run_nodes_s:
        pool.overhead_s += [max(run - nodes, 0.0) for run, nodes
                            in zip(prof.run_samples_s, prof.run_nodes_s, strict=True)]
        pool.overhead_how.add("the run less its nodes' times")


def _notes(split: int, unattributed: Sequence[str], unmatched: Sequence[str],
           other: Sequence[str], threads: int = 0, dev: Device | None = None) -> list[str]:
    notes = []
    cores = len(dev.cores) if dev is not None and dev.cores is not None else 0
    if dev is not None and threads and cores and threads != cores:
        notes.append(f"the profile ran its kernels on {threads} thread(s), device "
                     f"{dev.name!r} has {cores} core(s): its times may not hold there")
    if split:
        notes.append(f"{split} nodes covering several ops: each op got a share of their "
                     f"time in proportion to its roofline time")
    if unattributed:
        notes.append(f"{len(unattributed)} regions name no source node: unattributed")
    if unmatched:
        notes.append(f"{len(unmatched)} nodes name no op of the model: left out")
    if other:
        notes.append(f"{len(other)} nodes ran on another kind of device: left out")
    return notes


def _add_split(parts: dict[str, list[list[float]]], ctx: _Context, samples: Sequence[float],
               ops: Sequence[str]) -> bool:
    """A region's samples shared among ``ops`` in proportion to their roofline time, added
    to ``parts`` (op name -> the sample lists of the regions covering it); whether it was
    split."""
    w = [ctx.weight(ctx.graph.op(o)) for o in ops]
    total = sum(w)
    shares = [x / total for x in w] if total > 0 else [1.0 / len(ops)] * len(ops)
    for o, share in zip(ops, shares, strict=True):
        if ctx.graph.op(o).kind is not OpKind.TASK:
            parts.setdefault(o, []).append([share * s for s in samples])
    return len(ops) > 1


def _flush(pool: _Pool, ctx: _Context, parts: dict[str, list[list[float]]], tool: str
           ) -> None:
    """One profile's per-op parts into the pooled keys: the parts of an op summed run by
    run (their medians summed, when the regions ran in different numbers of runs)."""
    for o, lists in parts.items():
        op = ctx.graph.op(o)
        if len({len(x) for x in lists}) == 1:
            samples = [sum(col) for col in zip(*lists, strict=True)]
        else:
            samples = [sum(quantiles(x)[1] for x in lists)]
        pool.op_samples.setdefault(o, []).extend(samples)
        dtype = ctx.dtype(op)
        try:
            key, _sig = op_key(ctx.graph, op, dtype)
        except Exception:  # an op without a key (abstract task): not a measurement
            continue
        got = pool.keys.setdefault(key, (op, dtype, [], tool))
        got[2].extend(samples)
        pool.covered.add(o)


def _transfer(pool: _Pool, ctx: _Context, t: MeasuredTransfer,
              parts: dict[str, list[list[float]]]) -> None:
    """A copy -> link samples; a reformat -> the ops it serves (onnxruntime's reorders,
    through the optimized graph), else a conversion measurement where its formats are
    representations, else left out."""
    if t.kind == "copy":
        pool.copies_timed += 1
        pool.copy_list.append(t)
        ends = _copy_ends(ctx, t)
        if ends is not None and t.nbytes > 0:
            pool.copies.setdefault(ends, []).extend((t.nbytes, s) for s in t.samples_s)
        return
    pool.reformats += 1
    ops = ctx.matcher.ops_of(t.nodes or (t.label,))
    if ops:
        _add_split(parts, ctx, t.samples_s, ops)
        pool.reformats_attributed += 1
        return
    conv = _conversion(t)
    if conv is not None:
        key, kind, dst = conv
        got = pool.conversions.setdefault(key, (kind, dst, [], t.label))
        got[2].extend(t.samples_s)


def _conversion(t: MeasuredTransfer) -> tuple[str, str, DType] | None:
    """(key, kind, destination dtype) of a reformat between two representations
    (``fp32/nchw`` -> ``fp16/nchw``; a bare dtype is row-major), else None."""
    def rep(text: str) -> Representation | None:
        dt, _, lay = text.strip().lower().partition("/")
        try:
            return Representation(DType.parse(dt), Layout(lay) if lay else Layout.ROW_MAJOR)
        except ValueError:
            return None

    src, dst = rep(t.src), rep(t.dst)
    if src is None or dst is None or src == dst or t.nbytes <= 0:
        return None
    numel = int(t.nbytes * 8 // max(dst.dtype.bits, 1))
    key, kind = conversion_key(numel, src, dst)
    return key, kind, dst.dtype


def _copy_ends(ctx: _Context, t: MeasuredTransfer) -> tuple[str, str] | None:
    """(src, dst) device names of a copy between host and device memory (None on a CPU
    device, or on a machine without a CPU)."""
    host = _host(ctx.machine, ctx.dev)
    if host is None:
        return None
    names = {"host": host.name, "device": ctx.dev.name}
    src, dst = names.get(t.src), names.get(t.dst)
    if src is None or dst is None or src == dst:
        return None
    return src, dst


def _host(machine: Machine, dev: Device) -> Device | None:
    if _kind(dev) == "cpu":
        return None
    cpus = [d for d in machine.devices if _kind(d) == "cpu"]
    return cpus[0] if cpus else None


def _stats(samples: Sequence[float]) -> tuple[float, float, float]:
    """(median, p10, p90), the median at least 1 ns (profilers tick in microseconds: a
    node of 0 us took less than their resolution)."""
    p10, med, p90 = quantiles(samples)
    med = max(med, 1e-9)
    return med, min(p10, med), max(p90, med)


def _measurements(pool: _Pool, ctx: _Context, profiles: Sequence[ImportedProfile]
                  ) -> list[Measurement]:
    out: list[Measurement] = []
    for key, (op, dtype, samples, tool) in sorted(pool.keys.items()):
        med, p10, p90 = _stats(samples)
        _k, sig = op_key(ctx.graph, op, dtype)
        try:
            feats = op_features(ctx.graph, op, dtype, ctx.dev)
        except Exception:  # a shape the counter rejects: no features
            feats = {}
        out.append(Measurement(
            device=ctx.dev.name, key=key, kind=op.kind.value, dtype=dtype.value,
            signature=sig, median_s=med, p10_s=p10, p90_s=p90, n=len(samples),
            backend=f"import:{tool}", family=op_family(op),
            series=op_series(ctx.graph, op, dtype),
            source_node=op.provenance.source or op.name,
            features={k: v for k, v in feats.items() if math.isfinite(v) and v >= 0}))
    for key, (kind, dst, samples, label) in sorted(pool.conversions.items()):
        med, p10, p90 = _stats(samples)
        out.append(Measurement(
            device=ctx.dev.name, key=key, kind=kind, dtype=dst.value, median_s=med,
            p10_s=p10, p90_s=p90, n=len(samples),
            backend=f"import:{profiles[0].source.tool}", source_node=label))
    return out


def _links(pool: _Pool, ctx: _Context, profiles: Sequence[ImportedProfile]
           ) -> tuple[list[LinkMeasurement], list[str]]:
    """Copies fitted as latency + seconds per byte, per direction, where at least two
    sizes were timed."""
    links: list[LinkMeasurement] = []
    notes: list[str] = []
    tools = ", ".join(sorted({p.source.tool for p in profiles}))
    for (src, dst), pts in sorted(pool.copies.items()):
        sizes = {b for b, _s in pts}
        if len(sizes) < 2:
            notes.append(f"copies {src}->{dst}: one size timed ({min(sizes)} bytes), too few "
                         f"to tell latency from bandwidth: the link keeps its spec")
            continue
        lk = fit_link(src, dst, pts)
        if lk is not None:
            links.append(lk.model_copy(update={
                "method": f"copies timed by {tools} on the target (imported profile): "
                          f"{len(pts)} samples of {len(sizes)} sizes"}))
    return links, notes


def _assemble(ctx: _Context, pool: _Pool, profiles: Sequence[ImportedProfile],
              records: Sequence[ImportRecord], measurements: list[Measurement],
              model_ref: str) -> tuple[Calibration, dict[str, Any]]:
    rec = device_record(ctx.dev)
    method = (f"per kept run of the imported profiles: {' or '.join(sorted(pool.overhead_how))}"
              f" (the session's own cost per run)")
    over: StepOverhead | None = None
    if pool.overhead_s:
        p10, med, p90 = quantiles(pool.overhead_s)
        over = StepOverhead(median_s=med, p10_s=min(p10, med), p90_s=max(p90, med),
                            n=len(pool.overhead_s), method=method)
        rec = rec.model_copy(update={"run_call": over})
    links, notes = _links(pool, ctx, profiles)
    devices: list[DeviceRecord] = [rec]
    for lk in links:
        for name in (lk.src, lk.dst):
            if name not in {d.name for d in devices}:
                devices.append(device_record(ctx.machine.device(name)))
    tags = {"source": "calibrate import"}
    if ctx.machine.tags.get("cpu_model"):
        tags["cpu_model"] = ctx.machine.tags["cpu_model"]
    cal = Calibration(
        created=_dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
        model=model_ref or ctx.graph.name, machine=ctx.machine.name,
        machine_fingerprint=ctx.machine.fingerprint(), tags=tags, devices=devices,
        measurements=measurements, links=links, imports=list(records))
    total = sum(ctx.weight(op) for op in ctx.graph.ops)
    measured = sum(ctx.weight(ctx.graph.op(o)) for o in pool.covered)
    precisions = {m.dtype for m in measurements if not m.kind.startswith("convert:")}
    return cal, {
        "ops_covered": len(pool.covered),
        "measured_share": min(1.0, measured / total) if total > 0 else 0.0,
        "measurements": len(measurements), "split_nodes": pool.split_nodes,
        "copies": pool.copies_timed, "links": tuple(f"{lk.src}->{lk.dst}" for lk in links),
        "reformats": pool.reformats, "reformats_attributed": pool.reformats_attributed,
        "conversions": len(pool.conversions),
        "run_overhead_s": over.median_s if over is not None else None,
        "run_overhead_n": over.n if over is not None else 0,
        "node_gaps_s": quantiles(pool.gaps_s)[1] if pool.gaps_s else None,
        "precision": ",".join(sorted(precisions)), "notes": tuple(notes)}
