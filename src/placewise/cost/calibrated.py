"""The calibrated cost model: measured op times at real shapes, fits for unseen shapes.

A ``Calibration`` (a versioned JSON file, never pickle; its schema is
``placewise.cost.calibration``, re-exported here) holds what ``placewise profile``
measured on the devices of one machine: for each distinct (op kind, precision, input and
output shapes/dtypes, attributes) a median time with its p10..p90 spread, and per (device,
op kind, precision) a fit of time against shape features, with the quantiles of its
leave-one-out residuals.

``CalibratedModel`` answers the ``CostModel`` questions from it:

- an op whose exact key was measured on that device: the measurement (``Source.PROFILED``),
  interval = the measured p10..p90;
- an op measured on that device at other batch sizes (same ``op_series``): that op's own
  fit (``Source.CALIBRATED``, level ``series``), time linear in its work;
- an op of a kind fitted on that device: the kind's fit (``Source.CALIBRATED``), else its
  category's, else the device's pooled fit;
- anything else (another device, nothing measured there): the roofline model
  (``Source.ROOFLINE``) with an assumption saying why.

Fitted intervals are the fit's central estimate times ``exp`` of leave-one-out residual
quantiles (p10, p90; widened by ``1 + 1.5/sqrt(n)`` for small samples, never narrower than
±5%): what the fit achieved on shapes it had not seen.

Fits (``fit_measurements``): time = sum_i c_i * feature_i with c_i >= 0, least squares on
*relative* error, over a few candidate feature sets per op category (``one`` is the
per-call overhead; ``flops``; ``eff_flops`` = flops over the shape's parallel/tile
efficiency; ``bytes`` moved at the precision; ``io_bytes`` of every input and output,
views included; ``elems`` written); the set with the lowest leave-one-out error wins. A
kind with fewer than ``MIN_FIT_POINTS`` distinct shapes on a device is fitted together with
its category, then with every op of the device. Ops of different source formats (torch
fx vs onnxruntime, ``op_family``) are measured and fitted apart.

Measured times are what the op costs when run alone by the local backend (op by op, one
dispatch each), so a fused region costs the sum of its ops here: local backends do not fuse.

The executor adds its own cost per executed step (task): profiling measures it per device
(``DeviceRecord.dispatch``, see ``placewise.calibrate.profile``) and the model adds it as
``Term.LAUNCH`` once per op or region (a task), once per conversion and once on each side
of a transfer (send and receive steps), the interval widened by its p10..p90. A calibration
without it adds nothing and says "dispatch not measured".

**In model order** (``placewise.calibrate.context``, the default of ``placewise profile``): the
executor itself runs the whole model on each local device (and precision) for a few
requests, and every region and conversion is timed as it ran there: inputs as the
previous step left them (from DRAM, not hot in cache), the executor's step and loop time
included. A region or conversion measured so (``Calibration.context``, keyed by
``region_key`` / ``conversion_key``) is answered from that measurement before anything
else: kernels as compute/memory, the executor's time as ``Term.LAUNCH``, conversions done
inside an int8 kernel's step as ``Term.CONVERSION``. The same run measures the request
hand-off on the host (``request_cost``; the plan adds it to the latency).

**Co-run and wake-up** (``placewise.calibrate.corun``): ``Calibration.corun`` holds, per
(device, busy device, region key or op class), how many times longer a region takes while
the other device computes the same model's work on its own cores (``CorunMeasurement``);
``corun_slowdown`` answers from the region's own ratio, else its class's, else 1.0, and the
scheduler stretches the overlapping part of a task by it. ``DeviceRecord.wake_sleep`` /
``wake_poll`` time a pipe notification to a sleeping and to a polling worker on the
device's cores; ``wake_s`` is the difference, which the scheduler adds to a hand-off whose
receiver sleeps. Files without them load and plan as before (1.0, 0.0).

>>> cal = Calibration.empty("local")
>>> Calibration.from_json(cal.to_json(), file="<mem>").version
1
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from placewise.cost.calibration import (
    ADJUSTMENT_KINDS,
    CALIBRATION_FORMAT,
    CALIBRATION_VERSION,
    FEATURES,
    MIN_FIT_POINTS,
    Adjustment,
    Calibration,
    ContextMeasurement,
    CorunMeasurement,
    DeviceRecord,
    Failure,
    Fit,
    ImportRecord,
    LinkMeasurement,
    Measurement,
    StepOverhead,
    load_calibration,
)
from placewise.cost.fit import fit_estimate, fit_measurements, predict
from placewise.cost.model import Bottleneck, Cost, Representation, Source, Term
from placewise.cost.roofline import (
    GemmDims,
    RooflineModel,
    contraction_efficiency,
    gemm_dims,
    op_efficiency,
    op_work,
)
from placewise.errors import SpecError, UnsupportedError
from placewise.graph.ir import Graph, Op, OpCategory, OpKind, Role, Tensor
from placewise.hardware.spec import Device, Machine
from placewise.units import DType

__all__ = [
    "ADJUSTMENT_KINDS",
    "CALIBRATION_FORMAT",
    "CALIBRATION_VERSION",
    "FEATURES",
    "MIN_FIT_POINTS",
    "Adjustment",
    "CalibratedModel",
    "Calibration",
    "ContextMeasurement",
    "CorunMeasurement",
    "DeviceRecord",
    "Failure",
    "Fit",
    "ImportRecord",
    "LinkMeasurement",
    "Measurement",
    "StepOverhead",
    "conversion_features",
    "conversion_key",
    "device_identity",
    "device_record",
    "fit_estimate",
    "fit_measurements",
    "load_calibration",
    "merge_calibrations",
    "op_family",
    "op_features",
    "op_key",
    "op_series",
    "predict",
    "region_class",
    "region_key",
]

# residual quantile floor: a fit never claims to be tighter than this (log-ratio)
def _tensor_sig(t: Tensor) -> list[Any]:
    return [list(t.concrete_shape), t.dtype.value, t.layout.value,
            1 if t.role is Role.PARAM else 0]


def op_key(graph: Graph, op: Op, dtype: DType) -> tuple[str, str]:
    """(key, signature): the identity of an op measurement. Ops with the same kind,
    precision, input/output shapes, dtypes, layouts, parameter-ness and attributes share
    a key.

    >>> from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
    >>> g = Graph.build("r", [Tensor("x", (2, 3), DType.FP32, role=Role.INPUT),
    ...                       Tensor("y", (2, 3), DType.FP32, role=Role.OUTPUT)],
    ...                 [Op("r", OpKind.RELU, ("x",), ("y",))])
    >>> key, sig = op_key(g, g.op("r"), DType.FP32)
    >>> key.startswith("relu:fp32:"), sig
    (True, '{"attrs":{},"family":"","in":[[[2,3],"fp32","row_major",0]],"out":[[[2,3],"fp32","row_major",0]]}')
    """
    payload = {
        "family": op_family(op),
        "in": [_tensor_sig(graph.tensor(t)) if t else None for t in op.inputs],
        "out": [_tensor_sig(graph.tensor(t)) for t in op.outputs],
        "attrs": op.attrs.to_json(),
    }
    sig = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(f"{op.kind.value}|{dtype.value}|{sig}".encode()).hexdigest()[:20]
    return f"{op.kind.value}:{dtype.value}:{digest}", sig


def region_key(graph: Graph, ops: Sequence[Op], dtype: DType) -> str:
    """The identity of a region (a fused vertex) measured in model order: its ops' keys in
    order. Identical layers of a model share it.

    >>> from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
    >>> g = Graph.build("r", [Tensor("x", (2, 3), DType.FP32, role=Role.INPUT),
    ...                       Tensor("y", (2, 3), DType.FP32, role=Role.OUTPUT)],
    ...                 [Op("r", OpKind.RELU, ("x",), ("y",))])
    >>> region_key(g, [g.op("r")], DType.FP32).startswith("region:fp32:1:")
    True
    """
    keys = "\n".join(op_key(graph, op, dtype)[0] for op in ops)
    digest = hashlib.sha256(keys.encode()).hexdigest()[:20]
    return f"region:{dtype.value}:{len(ops)}:{digest}"


def region_class(ops: Sequence[Op]) -> str:
    """The op class of a region for co-run slowdowns (``CorunMeasurement`` of level
    ``"class"``): ``contraction`` when one of its ops is a contraction (matmul, conv, ...),
    else the category of its first op that is not a view, else ``view``.

    >>> region_class([Op("r", OpKind.RELU, ("x",), ("y",)),
    ...               Op("m", OpKind.MATMUL, ("y", "w"), ("z",))])
    'contraction'
    >>> region_class([Op("r", OpKind.RESHAPE, ("x",), ("y",)), Op("s", OpKind.SOFTMAX, ("y",), ("z",))])
    'normalization'
    """
    cats = [op.kind.category for op in ops]
    if OpCategory.CONTRACTION in cats:
        return OpCategory.CONTRACTION.value
    for c in cats:
        if c is not OpCategory.VIEW:
            return c.value
    return OpCategory.VIEW.value


def op_series(graph: Graph, op: Op, dtype: DType) -> str:
    """The key an op shares with *itself at other batch sizes*: like ``op_key`` but each
    activation's leading dim (the batch, for every layout the importers produce) is left
    out; parameters keep their exact shapes. A series of measurements of one op at several
    batch sizes is fitted on its own (``Fit.level == "series"``), which captures what
    shape features cannot (a transpose's permutation, a convolution's algorithm).

    >>> from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
    >>> def g(b):
    ...     return Graph.build("r", [Tensor("x", (b, 3), DType.FP32, role=Role.INPUT),
    ...                              Tensor("y", (b, 3), DType.FP32, role=Role.OUTPUT)],
    ...                        [Op("r", OpKind.RELU, ("x",), ("y",))])
    >>> op_series(g(1), g(1).op("r"), DType.FP32) == op_series(g(8), g(8).op("r"), DType.FP32)
    True
    """
    def sig(name: str) -> list[Any] | None:
        if not name:
            return None
        t = graph.tensor(name)
        shape = list(t.concrete_shape)
        if t.role is Role.PARAM:
            return ["param", shape, t.dtype.value]
        return [len(shape), shape[1:], t.dtype.value, t.layout.value]

    payload = {"family": op_family(op), "in": [sig(t) for t in op.inputs],
               "out": [sig(t) for t in op.outputs], "attrs": op.attrs.to_json()}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(f"{op.kind.value}|{dtype.value}|{text}".encode()).hexdigest()[:20]
    return f"{op.kind.value}:{dtype.value}:s{digest}"


def op_family(op: Op) -> str:
    """Which source format an op comes from, as its provenance says: ``"onnx"`` (run by
    onnxruntime), ``"torch"`` (an fx/aten node, run by torch) or ``""``. The same kind and
    shape costs differently in each, so keys and fits keep them apart.

    >>> from placewise.graph.ir import Provenance
    >>> op_family(Op("r", OpKind.RELU, ("x",), ("y",), provenance=Provenance(source_op="onnx::Relu")))
    'onnx'
    """
    src = op.provenance.source_op
    if src.startswith("onnx::"):
        return "onnx"
    if src.startswith(("aten.", "aten::", "quantized", "torch.")) or src == "getitem":
        return "torch"
    return ""


def conversion_key(numel: int, src: Representation, dst: Representation) -> tuple[str, str]:
    """(key, group kind) of a conversion measurement.

    >>> conversion_key(8, Representation(DType.FP32), Representation(DType.INT8))
    ('convert:fp32/row_major>int8/row_major:8', 'convert:fp32/row_major>int8/row_major')
    """
    kind = f"convert:{src}>{dst}"
    return f"{kind}:{numel}", kind


def op_features(graph: Graph, op: Op, dtype: DType, device: Device) -> dict[str, float]:
    """Shape features of ``op`` at ``dtype`` on ``device`` (see ``FEATURES``). They depend
    on the device only through its number of compute units, never on measured peaks."""
    try:
        work = op_work(graph, op, dtype)
        flops, nbytes = work.flops, work.bytes
    except Exception:  # a kind the counter rejects still has tensor bytes
        flops, nbytes = 0.0, 0
    io = 0
    for t in [*graph.in_tensors(op), *graph.out_tensors(op)]:
        io += dtype.nbytes(t.numel) if t.dtype.is_float else t.nbytes
    elems = sum(t.numel for t in graph.out_tensors(op))
    eff_flops = flops
    if gemm_dims(graph, op) is not None and flops > 0:
        eff, _, _ = op_efficiency(device, graph, op, dtype)
        base = contraction_efficiency(device, GemmDims(1, 4096, 4096, 4096), dtype)[0]
        eff_flops = flops * base / max(eff, 1e-9)
    return {"one": 1.0, "flops": float(flops), "eff_flops": float(eff_flops),
            "bytes": float(nbytes), "io_bytes": float(io), "elems": float(elems)}


def conversion_features(numel: int, src: Representation, dst: Representation) -> dict[str, float]:
    nbytes = src.dtype.nbytes(numel) + dst.dtype.nbytes(numel)
    return {"one": 1.0, "flops": float(numel), "eff_flops": float(numel),
            "bytes": float(nbytes), "io_bytes": float(nbytes), "elems": float(numel)}


def device_identity(dev: Device) -> str:
    """What must not change for a calibration to stay valid on ``dev``."""
    payload = json.dumps({"name": dev.name, "kind": str(dev.kind.value), "model": dev.model,
                          "cores": dev.cores, "backend": dev.backend,
                          "compute_units": dev.compute_units}, sort_keys=True)
    return "sha256:" + hashlib.sha256(payload.encode()).hexdigest()[:24]


def device_record(dev: Device) -> DeviceRecord:
    return DeviceRecord(name=dev.name, kind=str(dev.kind.value), model=dev.model,
                        cores=list(dev.cores) if dev.cores is not None else None,
                        backend=dev.backend, threads=len(dev.cores or [0]),
                        identity=device_identity(dev))


# ---- fitting --------------------------------------------------------------------------------


class CalibratedModel:
    """``CostModel`` from a ``Calibration`` (see the module docstring), roofline elsewhere."""

    def __init__(self, machine: Machine, calibration: Calibration) -> None:
        self.machine = machine
        self.calibration = calibration
        self.roofline = RooflineModel(machine)
        self._devices = {d.name for d in calibration.devices}
        self._meas: dict[tuple[str, str], Measurement] = {
            (m.device, m.key): m for m in calibration.measurements if not m.flags}
        self._flagged: dict[tuple[str, str], Measurement] = {
            (m.device, m.key): m for m in calibration.measurements if m.flags}
        self._fits: dict[tuple[str, str, str, str], Fit] = {
            (f.device, f.family, f.kind, f.dtype): f for f in calibration.fits
            if f.level != "series"}
        self._series: dict[tuple[str, str], Fit] = {
            (f.device, f.series): f for f in calibration.fits if f.level == "series"}
        self._families = sorted({f.family for f in calibration.fits})
        self._refused: dict[tuple[str, str], str] = {
            (f.device, f.key): f.reason for f in calibration.failures if f.unsupported}
        self._dtype_kinds: dict[tuple[str, str], set[str]] = {
            (d.name, dt): set(kinds) for d in calibration.devices
            for dt, kinds in d.dtype_kinds.items()}
        self._dispatch: dict[str, StepOverhead] = {
            d.name: d.dispatch for d in calibration.devices}
        self._records: dict[str, DeviceRecord] = {d.name: d for d in calibration.devices}
        self._context: dict[tuple[str, str], ContextMeasurement] = {
            (c.device, c.key): c for c in calibration.context}
        self._links: dict[tuple[str, str], LinkMeasurement] = {
            (lk.src, lk.dst): lk for lk in calibration.links}
        self._corun_region: dict[tuple[str, str, str], CorunMeasurement] = {}
        self._corun_class: dict[tuple[str, str, str, str], CorunMeasurement] = {}
        for cr in calibration.corun:
            if cr.level == "region":
                self._corun_region[(cr.device, cr.busy, cr.key)] = cr
            else:
                self._corun_class[(cr.device, cr.busy, cr.key, cr.dtype)] = cr
        self._corun_pairs = {(cr.device, cr.busy) for cr in calibration.corun}
        self._fp = calibration.fingerprint()
        # a calibration imported from on-target profiles: its devices were measured by
        # their own runtime (no executor step), and what nobody measured keeps the
        # roofline, regions included
        native = {m.device for m in calibration.measurements
                  if not m.backend.startswith("import:")} | {c.device for c in calibration.context}
        self._imported = {d.name for d in calibration.devices if d.name not in native} \
            if calibration.imports else set()
        self._adj_region: dict[tuple[str, str, str], Adjustment] = {}
        self._adj_launch: dict[str, Adjustment] = {}
        self._adj_request: dict[str, Adjustment] = {}
        self._adj_link: dict[tuple[str, str], Adjustment] = {}
        for adj in calibration.adjustments:
            if adj.kind in ("compute", "contention"):
                for rk in adj.regions:
                    self._adj_region[(adj.kind, adj.device, rk)] = adj
            elif adj.kind == "launch" and adj.key.startswith("request:"):
                self._adj_request[adj.device] = adj
            elif adj.kind == "launch":
                self._adj_launch[adj.device] = adj
            else:
                src, _, dst = adj.link.partition("->")
                self._adj_link[(src, dst)] = adj

    # ---- per-key adjustments from telemetry (``Adjustment``) ----------------------------

    def _region_adj(self, kind: str, graph: Graph, ops: Sequence[Op], device: str,
                    dtype: DType) -> Adjustment | None:
        if not self._adj_region:
            return None
        try:
            rk = region_key(graph, ops, dtype)
        except Exception:  # an op without a key (abstract task graphs) has no adjustment
            return None
        return self._adj_region.get((kind, device, rk))

    def _adjusted(self, cost: Cost, kernel: Adjustment | None, launch: Adjustment | None
                  ) -> Cost:
        """``cost`` with its launch term scaled by ``launch`` and every other term by
        ``kernel``, the interval scaled with the total and widened by their spread."""
        if kernel is None and launch is None:
            return cost
        fk = kernel.factor if kernel is not None else 1.0
        fl = launch.factor if launch is not None else 1.0
        terms = tuple((k, v * (fl if k is Term.LAUNCH else fk)) for k, v in cost.terms)
        old, new = cost.total_s, sum(v for _, v in terms)
        scale = new / old if old > 0 else 1.0
        widen = max(a.widen for a in (kernel, launch) if a is not None)
        low = min(cost.low_s * scale, new * max(1.0 - widen, 0.0))
        high = max(cost.high_s * scale, new * (1.0 + widen))
        a = dict(cost.assumptions)
        for adj in (kernel, launch):
            if adj is not None:
                a[f"recalibrated_{adj.kind}"] = (f"x{adj.factor:.4g} ({adj.key}, revision "
                                                 f"{adj.revision}): {adj.reason}")
        return Cost(terms, low, high, cost.bottleneck, cost.source, tuple(sorted(a.items())),
                    cost.memory_bytes, cost.buffer_bytes)

    def op_cost(self, graph: Graph, op: Op, device: str, dtype: DType) -> Cost:
        """The op's cost (``_raw_op_cost``) with the telemetry adjustments of its region
        (a one-op region) and device."""
        return self._adjusted(self._raw_op_cost(graph, op, device, dtype),
                              self._region_adj("compute", graph, [op], device, dtype),
                              self._adj_launch.get(device))

    def region_cost(self, graph: Graph, ops: list[Op], device: str, dtype: DType) -> Cost:
        """The region's cost (``_raw_region_cost``) with the telemetry adjustments of its
        ``region_key`` and device."""
        return self._adjusted(self._raw_region_cost(graph, ops, device, dtype),
                              self._region_adj("compute", graph, ops, device, dtype),
                              self._adj_launch.get(device))

    def transfer_cost(self, tensor: Tensor, rep: Representation, src: str, dst: str) -> Cost:
        """The transfer's cost (``_raw_transfer_cost``) with its link's adjustment."""
        cost = self._raw_transfer_cost(tensor, rep, src, dst)
        adj = self._adj_link.get((src, dst)) if src != dst else None
        return self._adjusted(cost, adj, adj)

    def conversion_cost(self, tensor: Tensor, src: Representation, dst: Representation,
                        device: str) -> Cost:
        """The conversion's cost (``_raw_conversion_cost``), its launch term adjusted for
        ``device``."""
        cost = self._raw_conversion_cost(tensor, src, dst, device)
        return self._adjusted(cost, None, self._adj_launch.get(device)) if cost.terms else cost

    def request_cost(self, host: str, devices: Sequence[str] = ()) -> Cost | None:
        """The request hand-off (``_raw_request_cost``) with the telemetry adjustment of the
        host's hand-off (``request:{host}``; where the model has none, its ``add_s`` as
        ``Term.SYNC``), else its run call (launch) adjusted for ``host``."""
        cost = self._raw_request_cost(host, devices)
        adj = self._adj_request.get(host)
        if adj is None:
            return None if cost is None else self._adjusted(cost, None,
                                                            self._adj_launch.get(host))
        if cost is not None and cost.total_s > 0:
            return self._adjusted(cost, adj, adj)
        if adj.add_s <= 0:
            return cost
        add = adj.add_s
        return Cost(((Term.SYNC, add),), add * max(1.0 - adj.widen, 0.0),
                    add * (1.0 + adj.widen), Bottleneck.LAUNCH, Source.CALIBRATED,
                    (("model", "request hand-off measured by telemetry"),
                     ("recalibrated_launch", f"+{add:.4g} s ({adj.key}, revision "
                                             f"{adj.revision}): {adj.reason}"),
                     ("calibration", self._fp)))

    def corun_slowdown(self, graph: Graph, ops: Sequence[Op], device: str, dtype: DType,
                       busy: frozenset[str]) -> float:
        """The co-run slowdown (``_raw_corun_slowdown``) times the region's contention
        adjustment (never below 1; 1.0 with nothing busy)."""
        s = self._raw_corun_slowdown(graph, ops, device, dtype, busy)
        if not busy:
            return s
        adj = self._region_adj("contention", graph, ops, device, dtype)
        return s if adj is None else max(1.0, s * adj.factor)

    def corun_measurement(self, graph: Graph, ops: Sequence[Op], device: str, dtype: DType,
                          busy: str) -> CorunMeasurement | None:
        """The co-run measurement that answers for region ``ops`` on ``device`` in
        ``dtype`` while ``busy`` computes: the region's own (same ``region_key``), else its
        class's (``region_class``) in ``dtype``, else its class's in fp32; None when none
        was measured."""
        if (device, busy) not in self._corun_pairs:
            return None
        m = self._corun_region.get((device, busy, region_key(graph, ops, dtype)))
        if m is not None:
            return m
        cls = region_class(ops)
        return self._corun_class.get((device, busy, cls, dtype.value)) or \
            self._corun_class.get((device, busy, cls, DType.FP32.value))

    def _raw_corun_slowdown(self, graph: Graph, ops: Sequence[Op], device: str, dtype: DType,
                       busy: frozenset[str]) -> float:
        """The measured median slowdown of region ``ops`` on ``device`` with one of the
        devices ``busy`` computing (``corun_measurement``); with several busy, the largest
        (each was measured with one other device busy); never below 1 (a co-running
        device does not speed a region up: a ratio under 1 is measurement noise); where
        none of them was measured, what the machine spec says (``Device.corun_slowdown``,
        1.0 when nothing)."""
        worst = 1.0
        if not any((device, b) in self._corun_pairs for b in busy):
            return self.roofline.corun_slowdown(graph, ops, device, dtype, busy)
        for b in sorted(busy):
            m = self.corun_measurement(graph, ops, device, dtype, b)
            if m is not None and m.slowdown_median > worst:
                worst = m.slowdown_median
        return worst

    def wake_s(self, device: str) -> float:
        """How much longer a hand-off to a sleeping worker on ``device`` takes than to a
        polling one: median wake-up of the sleeping worker less the polling one's, never
        below 0; 0.0 when not measured."""
        rec = self._records.get(device)
        if rec is None or not rec.wake_sleep.n or not rec.wake_poll.n:
            return 0.0
        return max(rec.wake_sleep.median_s - rec.wake_poll.median_s, 0.0)

    def request_busy_s(self, device: str) -> float | None:
        """The worker's own time per pipelined request on ``device`` beyond its steps
        (None: not measured)."""
        rec = self._records.get(device)
        return rec.request_busy.median_s if rec is not None and rec.request_busy.n else None

    def client_busy_s(self) -> float | None:
        """The client process's CPU time per pipelined request (None: not measured)."""
        c = self.calibration.client
        return c.median_s if c.n else None

    def _raw_request_cost(self, host: str, devices: Sequence[str] = ()) -> Cost | None:
        """A request's hand-off between the client and the workers when ``host`` holds the
        graph's inputs and outputs (inputs written -> graph starts, graph ends -> outputs
        ready), measured in model order, as ``Term.SYNC``; when one of ``devices`` (the
        plan's) shares the host's cores, the hand-off measured so. None when not
        measured."""
        rec = self._records.get(host)
        if rec is not None and rec.request.n == 0 and host in self._imported and \
                rec.run_call.n and host in devices:
            rc = rec.run_call  # imported: the host's first partition's session.run overhead
            return Cost(((Term.LAUNCH, rc.median_s),) if rc.median_s > 0 else (), rc.p10_s,
                        rc.p90_s, Bottleneck.LAUNCH, Source.PROFILED,
                        (("calibration", self._fp), ("interval", "measured p10..p90"),
                         ("model", "the run overhead of the host's first partition, timed "
                                   "by the imported profiles"),
                         ("run_call_s", rc.median_s)))
        if rec is None or rec.request.n == 0:
            return None
        req = rec.request
        cores = {d.name: set(d.cores or ()) for d in self.machine.devices}
        if rec.request_shared.n and any(d != host and cores.get(host, set()) & cores.get(d, set())
                                        for d in devices):
            req = rec.request_shared
        a: dict[str, float | str] = {
            "model": "profiled in model order (executor)", "measured_s": req.median_s,
            "p10_s": req.p10_s, "p90_s": req.p90_s, "requests": float(req.n),
            "method": req.method, "calibration": self._fp, "interval": "measured p10..p90"}
        terms: list[tuple[Term, float]] = [(Term.SYNC, req.median_s)] if req.median_s > 0 \
            else []
        lo, hi = req.p10_s, req.p90_s
        rc = rec.run_call
        if rc.n and host in devices:  # the host's first partition starts with the request
            terms.append((Term.LAUNCH, rc.median_s))
            lo, hi = lo + rc.p10_s, hi + rc.p90_s
            a["run_call_s"] = rc.median_s
        return Cost(tuple(terms), lo, hi, Bottleneck.LAUNCH, Source.PROFILED,
                    tuple(sorted(a.items())))

    def _with_run_call(self, cost: Cost, dst: str) -> Cost:
        """``cost`` plus ``dst``'s partition run call (the partition the transfer starts)."""
        rec = self._records.get(dst)
        if rec is None or not rec.run_call.n or rec.run_call.median_s <= 0:
            return cost
        rc = rec.run_call
        return Cost((*cost.terms, (Term.LAUNCH, rc.median_s)), cost.low_s + rc.p10_s,
                    cost.high_s + rc.p90_s, cost.bottleneck, cost.source,
                    (*cost.assumptions, ("run_call_s", rc.median_s),
                     ("run_call", "the receiving partition's session.run, measured")),
                    memory_bytes=cost.memory_bytes)

    def _context_cost(self, graph: Graph, ops: Sequence[Op], device: str, dtype: DType
                      ) -> Cost | None:
        """The region as measured in model order, when it was: kernels split into compute
        and memory in the ops' own proportions, hidden conversions as ``Term.CONVERSION``,
        the executor's time as ``Term.LAUNCH``."""
        if not self._context:
            return None
        m = self._context.get((device, region_key(graph, ops, dtype)))
        if m is None:
            return None
        compute = memory = 0.0
        mem_bytes = buf = 0
        for op in ops:
            try:
                c = self._op_cost(graph, op, device, dtype)
            except UnsupportedError:
                continue
            compute += c.term(Term.COMPUTE)
            memory += c.term(Term.MEMORY)
            mem_bytes += c.memory_bytes
            buf = max(buf, c.buffer_bytes)
        share = compute / (compute + memory) if compute + memory > 0 else 0.0
        total = m.median_s
        hidden = min(m.hidden_s, total)
        launch = min(m.overhead_s, total - hidden)
        kernel = total - hidden - launch
        terms = {Term.COMPUTE: kernel * share, Term.MEMORY: kernel * (1 - share),
                 Term.CONVERSION: hidden, Term.LAUNCH: launch}
        if launch >= kernel + hidden:
            b = Bottleneck.LAUNCH
        else:
            b = Bottleneck.COMPUTE if share >= 0.5 else Bottleneck.MEMORY
        a: dict[str, float | str] = {
            "model": "profiled in model order (executor)", "measured_s": m.median_s,
            "p10_s": m.p10_s, "p90_s": m.p90_s, "samples": float(m.n),
            "kernel_s": m.kernel_s, "executor_s": m.overhead_s, "ops": float(len(ops)),
            "measured_as": m.label, "calibration": self._fp, "interval": "measured p10..p90"}
        if hidden > 0:
            a["conversion"] = ("int8 kernel takes fp32 activations: quantize/dequantize "
                               "inside the step")
        return Cost(tuple((k, v) for k, v in terms.items() if v), m.p10_s, m.p90_s, b,
                    Source.PROFILED, tuple(sorted(a.items())), memory_bytes=mem_bytes,
                    buffer_bytes=buf)

    def step_overhead(self, device: str) -> StepOverhead | None:
        """The executor's measured per-step overhead on ``device`` (None: not a calibrated
        device; ``n == 0``: the calibration did not measure it)."""
        return self._dispatch.get(device)

    def _with_dispatch(self, cost: Cost, devices: Sequence[str]) -> Cost:
        """``cost`` plus one executor step on each of ``devices`` (calibrated ones) as
        ``Term.LAUNCH``, the interval widened by the measured p10..p90."""
        add = low = high = 0.0
        notes: dict[str, float | str] = {}
        for dev in devices:
            d = self._dispatch.get(dev)
            if d is None:
                continue
            if d.n == 0:
                notes["dispatch"] = (
                    "none: measured by the target's own runtime (imported profile)"
                    if dev in self._imported else
                    "dispatch not measured (calibration predates it): 0 s")
                continue
            add += d.median_s
            low += d.p10_s
            high += d.p90_s
        if add > 0:
            notes["dispatch_s"] = add
            notes["dispatch"] = "executor per-step overhead, measured: " + ", ".join(
                f"{dev} {self._dispatch[dev].median_s:.3g} s" for dev in devices
                if dev in self._dispatch and self._dispatch[dev].n)
        if not notes:
            return cost
        terms = dict(cost.terms)
        if add > 0:
            terms[Term.LAUNCH] = terms.get(Term.LAUNCH, 0.0) + add
        rest = sum(v for k, v in terms.items() if k is not Term.LAUNCH)
        b = Bottleneck.LAUNCH if add > 0 and terms[Term.LAUNCH] >= rest else cost.bottleneck
        a = dict(cost.assumptions)
        a.update(notes)
        return Cost(tuple((k, v) for k, v in terms.items() if v), cost.low_s + low,
                    cost.high_s + high, b, cost.source, tuple(sorted(a.items())),
                    cost.memory_bytes, cost.buffer_bytes)

    def fingerprint(self) -> str:
        return self._fp

    def fit_for(self, device: str, kind: OpKind, dtype: DType, family: str = "") -> Fit | None:
        """The most specific fit for ``kind`` at ``dtype`` on ``device``: the kind's own,
        else its category's, else the device's pooled fit (None if none); fits of ops
        from the same source format (``family``) first, then of any other."""
        fams = [family] + [f for f in self._families if f != family]
        for fam in fams:
            for k in (kind.value, f"category:{kind.category.value}", "*"):
                f = self._fits.get((device, fam, k, dtype.value))
                if f is not None:
                    return f
        return None

    def estimate(self, device: str, kind: OpKind, dtype: DType, family: str,
                 features: Mapping[str, float], series: str = ""
                 ) -> tuple[float, float, float, Fit] | None:
        """(centre, low, high, fit) for an op with ``features`` that was not measured: its
        series' fit if the same op was measured at other batch sizes, else the kind's
        (category's, device's) fit; None when no fit covers it."""
        fit = self._series.get((device, series)) if series else None
        if fit is not None:
            est = fit_estimate(fit, features)
            if est is not None:
                return (*est, fit)
        fit = self.fit_for(device, kind, dtype, family)
        if fit is None:
            return None
        est = fit_estimate(fit, features)
        return None if est is None else (*est, fit)

    def _split(self, graph: Graph, op: Op, device: str, dtype: DType, total: float,
               overhead: float) -> tuple[dict[Term, float], Bottleneck]:
        """Split a measured/fitted time into terms in the roofline's proportions."""
        try:
            p = self.roofline.parts(graph, op, device, dtype)
            compute, memory, par = p.compute_s, max(0.0, p.memory_s - p.compute_s), \
                p.parallel_eff
        except Exception:
            compute, memory, par = 0.0, 1.0, 1.0
        launch = min(max(overhead, 0.0), total)
        rest = total - launch
        if rest <= total * 1e-9:
            launch, rest = total, 0.0
        share = compute / (compute + memory) if compute + memory > 0 else 0.0
        terms = {Term.LAUNCH: launch, Term.COMPUTE: rest * share,
                 Term.MEMORY: rest * (1 - share)}
        if launch >= rest:
            b = Bottleneck.LAUNCH
        elif share >= 0.5:
            b = Bottleneck.PARALLELISM if par < 0.5 else Bottleneck.COMPUTE
        else:
            b = Bottleneck.MEMORY
        return terms, b

    def _overhead(self, device: str, kind: OpKind, dtype: DType, family: str) -> float:
        f = self.fit_for(device, kind, dtype, family)
        if f is not None and "one" in f.features:
            return f.coef[f.features.index("one")]
        try:
            return self.machine.device(device).launch_overhead_s
        except KeyError:
            return 0.0

    def _raw_op_cost(self, graph: Graph, op: Op, device: str, dtype: DType) -> Cost:
        """The op's measured/fitted time plus, on a calibrated device, one executor step
        (an op alone is one task)."""
        if device in self._devices and op.kind is not OpKind.TASK:
            ctx = self._context_cost(graph, [op], device, dtype)
            if ctx is not None:
                self.roofline._check_supported(self.roofline._device(device, op.where()),
                                               op, dtype)
                return ctx
        cost = self._op_cost(graph, op, device, dtype)
        if device in self._devices and op.kind is not OpKind.TASK:
            cost = self._with_dispatch(cost, (device,))
        return cost

    def _op_cost(self, graph: Graph, op: Op, device: str, dtype: DType) -> Cost:
        dev = self.roofline._device(device, op.where())
        self.roofline._check_supported(dev, op, dtype)
        if device not in self._devices or op.kind is OpKind.TASK:
            return _note(self.roofline.op_cost(graph, op, device, dtype),
                         "calibration", f"none for device {device!r}: roofline")
        allowed = self._dtype_kinds.get((device, dtype.value))
        if allowed is not None and op.kind.value not in allowed:
            raise UnsupportedError(
                f"device {device!r} cannot run {op.where()} ({op.kind.value}) in "
                f"{dtype.value}: its {dtype.value} kernels cover only {', '.join(sorted(allowed))}")
        key, _ = op_key(graph, op, dtype)
        reason = self._refused.get((device, key))
        if reason is not None:
            raise UnsupportedError(f"device {device!r} cannot run {op.where()} "
                                   f"({op.kind.value}) in {dtype.value}: {reason}")
        m = self._meas.get((device, key))
        if m is not None:
            terms, b = self._split(graph, op, device, dtype, m.median_s,
                                   self._overhead(device, op.kind, dtype, op_family(op)))
            a: dict[str, float | str] = {
                "model": "profiled", "key": key, "measured_s": m.median_s, "p10_s": m.p10_s,
                "p90_s": m.p90_s, "repeats": float(m.n), "backend": m.backend,
                "calibration": self._fp, "interval": "measured p10..p90"}
            return Cost(tuple((k, v) for k, v in terms.items() if v), m.p10_s, m.p90_s, b,
                        Source.PROFILED, tuple(sorted(a.items())),
                        memory_bytes=int(m.features.get("bytes", 0)),
                        buffer_bytes=op.scratch_bytes)
        feats = op_features(graph, op, dtype, dev)
        est = self.estimate(device, op.kind, dtype, op_family(op), feats,
                            op_series(graph, op, dtype))
        if est is None:
            cost = _note(self.roofline.op_cost(graph, op, device, dtype), "calibration",
                         f"no measurement or fit for {op.kind.value} {dtype.value} on "
                         f"{device!r}: roofline")
        else:
            cost = self._fitted(graph, op, device, dtype, est, feats)
        flagged = self._flagged.get((device, key))
        if flagged is not None:
            cost = _note(cost, "measurement_ignored",
                         f"measured {flagged.median_s:.3g} s flagged {','.join(flagged.flags)}")
        return cost

    def _fitted(self, graph: Graph, op: Op, device: str, dtype: DType,
                est: tuple[float, float, float, Fit], feats: Mapping[str, float]) -> Cost:
        centre, low, high, fit = est
        overhead = fit.coef[fit.features.index("one")] if "one" in fit.features else 0.0
        terms, b = self._split(graph, op, device, dtype, centre, overhead)
        a: dict[str, float | str] = {
            "model": "calibrated", "fit": f"{fit.level}:{fit.kind}" + (
                f":{fit.series}" if fit.series else ""),
            "fit_features": ",".join(fit.features), "fit_points": float(fit.n),
            "fit_loo_median_abs_pct": fit.loo_median_abs_pct, "calibration": self._fp,
            "bytes": feats.get("bytes", 0.0), "flops": feats.get("flops", 0.0),
            "interval": "fit leave-one-out residual p10..p90"}
        return Cost(tuple((k, v) for k, v in terms.items() if v), low, high, b,
                    Source.CALIBRATED, tuple(sorted(a.items())),
                    memory_bytes=int(feats.get("bytes", 0)), buffer_bytes=op.scratch_bytes)

    def _raw_region_cost(self, graph: Graph, ops: list[Op], device: str, dtype: DType) -> Cost:
        """Local backends run a region op by op: the sum of its ops (no launch saved), plus
        one executor step for the region (one task). Devices without calibration use the
        roofline's fused region."""
        if device not in self._devices:
            return _note(self.roofline.region_cost(graph, ops, device, dtype), "calibration",
                         f"none for device {device!r}: roofline")
        if device in self._imported and not any(
                (device, op_key(graph, op, dtype)[0]) in self._meas for op in ops
                if op.kind is not OpKind.TASK):
            return _note(self.roofline.region_cost(graph, ops, device, dtype), "calibration",
                         f"imported profiles measured none of these ops on {device!r}: "
                         f"roofline")
        costs = [self._op_cost(graph, op, device, dtype) for op in ops]
        if not costs:
            return Cost.zero()
        ctx = self._context_cost(graph, ops, device, dtype)
        if ctx is not None:
            return ctx
        terms: dict[Term, float] = {}
        for c in costs:
            for k, v in c.terms:
                terms[k] = terms.get(k, 0.0) + v
        sources = {c.source for c in costs}
        source = Source.ROOFLINE if Source.ROOFLINE in sources else (
            Source.CALIBRATED if Source.CALIBRATED in sources else Source.PROFILED)
        total = sum(terms.values())
        worst = max(costs, key=lambda c: c.total_s)
        notes: list[tuple[str, float | str]] = [
            ("model", "sum of ops (local backends run a region op by op)"),
            ("ops", float(len(ops))), ("calibration", self._fp)]
        if len(sources) > 1 and total > 0:  # which share of the region's time is measured
            for src, key in ((Source.PROFILED, "share_profiled"),
                             (Source.CALIBRATED, "share_calibrated")):
                notes.append((key, sum(c.total_s for c in costs if c.source is src) / total))
        return self._with_dispatch(Cost(
            tuple((k, v) for k, v in terms.items() if v),
            min(sum(c.low_s for c in costs), total),
            max(sum(c.high_s for c in costs), total), worst.bottleneck, source,
            tuple(sorted(notes)),
            memory_bytes=sum(c.memory_bytes for c in costs),
            buffer_bytes=max(c.buffer_bytes for c in costs)), (device,))

    def _raw_transfer_cost(self, tensor: Tensor, rep: Representation, src: str, dst: str) -> Cost:
        """Transfers use the machine's links (measured by the probe for local machines),
        plus the executor's send step on ``src`` and receive step on ``dst`` (calibrated
        devices). The hand-off of a request to the first worker is not modelled. The
        answer is for a polling receiver: a link measured with a sleeping one
        (``LinkMeasurement.receiver_sleeps``) has ``wake_s(dst)`` taken off its latency
        (the scheduler adds it back where the receiver sleeps)."""
        # over a measured link into a device whose run call was measured, the partition
        # the transfer starts is that run call (``_with_run_call``); elsewhere the
        # roofline's per-partition figure (the spec's, or its stated default)
        # (an imported device's run call is the per-run overhead its profiles timed, paid
        # by every partition there whatever the link)
        rec = self._records.get(dst)
        measured = ((src, dst) in self._links or dst in self._imported) and rec is not None \
            and rec.run_call.n > 0 and rec.run_call.median_s > 0
        cost = self.roofline.transfer_cost(tensor, rep, src, dst, partition_cut=not measured)
        if src == dst:
            return cost
        lk = self._links.get((src, dst))
        if lk is not None:
            nbytes = rep.dtype.nbytes(tensor.numel)
            wire = nbytes * lk.seconds_per_byte
            how = "measured"
            if lk.seconds_per_byte == 0 or nbytes > 4 * max(lk.max_bytes, 1):
                # sizes too alike to fit a bandwidth (or far beyond the measured ones):
                # the link's bandwidth for the bytes
                bw = min(link.bandwidth_bytes_per_s for link in self.machine.route(src, dst))
                wire = max(wire, nbytes / bw)
                how = "link bandwidth (not resolved by the measured sizes)"
            latency = lk.latency_s
            wake = self.wake_s(dst) if lk.receiver_sleeps else 0.0
            if wake > 0:  # measured with a sleeping receiver: the polling one's latency
                latency = max(latency - wake, 0.0)
            total = latency + wire
            a: dict[str, float | str] = {
                "model": "profiled in model order (executor)", "bytes": float(nbytes),
                "representation": str(rep), "latency_s": latency,
                "seconds_per_byte": lk.seconds_per_byte, "samples": float(lk.n),
                "measured_bytes": f"{lk.min_bytes}..{lk.max_bytes}", "method": lk.method,
                "bandwidth": how,
                "calibration": self._fp, "interval": "fit residual p10..p90"}
            if wake > 0:
                a["receiver"] = (f"measured sleeping: its wake-up ({wake:.3g} s) left out, "
                                 f"the scheduler adds it where the receiver sleeps")
            return self._with_run_call(Cost(
                tuple((k, v) for k, v in ((Term.TRANSFER, wire), (Term.SYNC, latency))
                      if v),
                total * math.exp(lk.resid_q10), total * math.exp(lk.resid_q90),
                Bottleneck.LINK, Source.CALIBRATED, tuple(sorted(a.items())),
                memory_bytes=nbytes), dst)
        if measured:  # into an imported device over a link nobody measured
            cost = self._with_run_call(cost, dst)
        return self._with_dispatch(cost, (src, dst))

    def _raw_conversion_cost(self, tensor: Tensor, src: Representation, dst: Representation,
                        device: str) -> Cost:
        if src == dst:
            return Cost.zero()
        base = self.roofline.conversion_cost(tensor, src, dst, device)
        if device not in self._devices:
            return base
        numel = tensor.numel
        key, kind = conversion_key(numel, src, dst)
        ctx = self._context.get((device, key))
        if ctx is not None:
            launch = min(ctx.overhead_s, ctx.median_s)
            return Cost(((Term.CONVERSION, ctx.median_s - launch), (Term.LAUNCH, launch)),
                        ctx.p10_s, ctx.p90_s,
                        Bottleneck.LAUNCH if launch > ctx.median_s - launch else
                        Bottleneck.MEMORY, Source.PROFILED,
                        (("model", "profiled in model order (executor)"),
                         ("interval", "measured p10..p90"), ("from", str(src)),
                         ("to", str(dst)), ("samples", float(ctx.n)),
                         ("calibration", self._fp)),
                        memory_bytes=src.dtype.nbytes(numel) + dst.dtype.nbytes(numel),
                        buffer_bytes=dst.dtype.nbytes(numel))
        m = self._meas.get((device, key))
        out_bytes = dst.dtype.nbytes(numel)
        feats = conversion_features(numel, src, dst)
        fit = self._fits.get((device, "", kind, dst.dtype.value))
        if m is not None:
            centre, low, high, source = m.median_s, m.p10_s, m.p90_s, Source.PROFILED
            how = "measured p10..p90"
        elif fit is not None and (est := fit_estimate(fit, feats)) is not None:
            centre, low, high = est
            source, how = Source.CALIBRATED, "fit leave-one-out residual p10..p90"
        else:
            return self._with_dispatch(
                _note(base, "calibration", f"no measurement of {kind} on {device!r}: "
                                           f"roofline"), (device,))
        launch = min(self._fits_overhead(fit), centre) if fit is not None else min(
            base.term(Term.LAUNCH), centre)
        return self._with_dispatch(Cost(
            ((Term.CONVERSION, centre - launch), (Term.LAUNCH, launch)), low, high,
            Bottleneck.LAUNCH if launch > centre - launch else Bottleneck.MEMORY,
            source, (("model", source.value), ("interval", how),
                     ("from", str(src)), ("to", str(dst)),
                     ("calibration", self._fp)),
            memory_bytes=int(feats["bytes"]), buffer_bytes=out_bytes), (device,))

    @staticmethod
    def _fits_overhead(fit: Fit) -> float:
        return fit.coef[fit.features.index("one")] if "one" in fit.features else 0.0


def _note(cost: Cost, key: str, value: str) -> Cost:
    a = dict(cost.assumptions)
    a[key] = value
    return Cost(cost.terms, cost.low_s, cost.high_s, cost.bottleneck, cost.source,
                tuple(sorted(a.items())), cost.memory_bytes, cost.buffer_bytes)


def merge_calibrations(cals: Sequence[Calibration], *, refit: bool = True) -> Calibration:
    """One calibration from several (e.g. several models or batch sizes on one machine):
    devices must agree; later measurements of the same key replace earlier ones; fits are
    made again from all measurements."""
    if not cals:
        raise ValueError("nothing to merge")
    devices: dict[str, DeviceRecord] = {}
    meas: dict[tuple[str, str], Measurement] = {}
    fails: dict[tuple[str, str], Failure] = {}
    for c in cals:
        for d in c.devices:
            if d.name in devices and devices[d.name].identity != d.identity:
                raise SpecError(f"device {d.name!r} differs between the calibrations "
                                f"(identity {devices[d.name].identity} vs {d.identity})")
            devices[d.name] = d
        for m in c.measurements:
            meas[(m.device, m.key)] = m
        for f in c.failures:
            fails[(f.device, f.key)] = f
    first = cals[0]
    models = sorted({c.model for c in cals if c.model})
    merged = first.model_copy(update={
        "model": " + ".join(models), "devices": list(devices.values()),
        "measurements": list(meas.values()), "failures": list(fails.values()),
        "created": now_iso()})
    return merged.with_fits(fit_measurements(merged.measurements)) if refit else merged


def now_iso() -> str:
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()
