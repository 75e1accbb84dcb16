"""The plan file's records: every part of a ``Plan`` as a typed, frozen pydantic model
(``placewise.plan`` builds, writes and reads them; see its docstring for what each holds).
The scheduler's own records are held as they are (``ResourceUse``, ``LowerBound``,
``Suggestion``: frozen dataclasses marked by ``records.dataclass_record``), never mirrored.
"""

from __future__ import annotations

import itertools
import math
from typing import Literal

from pydantic import Field

from placewise.cost.model import Bottleneck, Source, Term
from placewise.graph.ir import OpKind, Role
from placewise.records import Record
from placewise.schedule.bounds import LowerBound
from placewise.schedule.evaluate import Objective
from placewise.schedule.memory import Suggestion
from placewise.schedule.placement import Assignment, Placement
from placewise.schedule.resources import ResourceUse
from placewise.schedule.timeline import TaskKind
from placewise.units import DType, Layout

__all__ = [
    "AlternativeRecord",
    "Breakdown",
    "CandidateRecord",
    "CrossingRecord",
    "CutRecord",
    "DeviceInfo",
    "Fingerprints",
    "IdlePoint",
    "KeptRecord",
    "LinkInfo",
    "MachineInfo",
    "MemoryRecord",
    "ModelRecord",
    "OccupantRecord",
    "OpRecord",
    "Plan",
    "PoolRecord",
    "PrecisionDecisionRecord",
    "PrecisionRecord",
    "RegionRecord",
    "RequestRecord",
    "RuntimeTrial",
    "ScheduleRecord",
    "SearchRecord",
    "ServiceRecord",
    "SharedInfo",
    "SourceFileRecord",
    "SourcesRecord",
    "TaskRecord",
    "TensorRecord",
    "ThroughputRecord",
    "TierInfo",
    "TierRecord",
    "ViolationRecord",
    "WorkloadRecord",
]


# ---- the records ---------------------------------------------------------------------------
class Fingerprints(Record):
    """What the plan was made for: ``Graph.fingerprint()``, ``Machine.fingerprint()`` and
    ``CostModel.fingerprint()`` (the calibration, or ``roofline/v1``)."""

    graph: str
    machine: str
    calibration: str


class SourceFileRecord(Record):
    """A file a plan was made from: its absolute ``path`` when planned, the path as the
    command line ``given`` it, and the ``fingerprint`` of what it held
    (``Machine.fingerprint()`` of a machine spec, ``Calibration.fingerprint()`` of a
    calibration): commands that read the plan load it from ``path`` and refuse a file
    whose fingerprint differs."""

    path: str
    given: str
    fingerprint: str


class SourcesRecord(Record):
    """Where the plan's machine spec (a YAML file; presets and ``local`` are named by
    ``machine.name`` and not recorded) and its calibration came from (None: not a file)."""

    machine: SourceFileRecord | None = None
    calibration: SourceFileRecord | None = None


class TierInfo(Record):
    name: str
    capacity_bytes: int
    bandwidth_bytes_per_s: float
    shared_with: str | None = None


class DeviceInfo(Record):
    name: str
    kind: str
    model: str = ""
    lanes: int
    dtypes: tuple[DType, ...]
    tiers: tuple[TierInfo, ...]


class LinkInfo(Record):
    name: str
    endpoints: tuple[str, str]
    bandwidth_bytes_per_s: float
    latency_s: float
    duplex: bool
    resource: str


class SharedInfo(Record):
    name: str
    kind: str
    bandwidth_bytes_per_s: float


class MachineInfo(Record):
    """A summary of the machine (the fingerprint identifies it; this is for reading)."""

    name: str
    devices: tuple[DeviceInfo, ...]
    links: tuple[LinkInfo, ...] = ()
    shared_resources: tuple[SharedInfo, ...] = ()


class AlternativeRecord(Record):
    """The cheapest way to run a vertex on one device: its dtype and uncontended cost,
    or why it cannot run there (``reason``)."""

    device: str
    dtype: DType | None = None
    total_s: float | None = None
    low_s: float | None = None
    high_s: float | None = None
    reason: str | None = None


class RegionRecord(Record):
    """A vertex: its ops (topological order), fusion pattern (``single`` for one op),
    the tensors it reads from other vertices or graph inputs, the weights it reads, the
    tensors it produces for others and those that never leave it; per device, the cheapest
    alternative (empty when not recorded)."""

    ops: tuple[str, ...]
    pattern: str
    inputs: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    internal: tuple[str, ...] = ()
    scratch_bytes: int = 0
    alternatives: tuple[AlternativeRecord, ...] = ()


class OpRecord(Record):
    """An op: the vertex that holds it, its kind, and where it came from."""

    vertex: str
    kind: OpKind
    where: str = ""


class TensorRecord(Record):
    shape: tuple[int, ...]
    dtype: DType
    layout: Layout = Layout.ROW_MAJOR
    role: Role
    nbytes: int


class TaskRecord(Record):
    """One scheduled task (see ``placewise.schedule.simulate.Task``).

    ``terms_s``: the predicted terms, contention included (``sum == end_s - start_s``);
    ``low_s``/``high_s``: the interval of the task's duration (the cost model's interval
    plus the contention the scheduler added); ``src_rep``/``dst_rep``: representations as
    ``dtype/layout`` (a transfer moves ``src_rep``; a conversion goes from one to the other);
    ``cores``: the CPU cores the task ran on, for devices pinned to cores (absent otherwise).
    """

    name: str
    kind: TaskKind
    resource: str
    lane: int
    device: str
    dst_device: str | None = None
    vertex: str | None = None
    tensor: str | None = None
    link: str | None = None
    src_rep: str | None = None
    dst_rep: str | None = None
    nbytes: int = 0
    start_s: float
    end_s: float
    deps: tuple[str, ...] = ()
    terms_s: dict[Term, float]
    contention_s: float = 0.0
    low_s: float
    high_s: float
    source: Source
    bottleneck: Bottleneck
    assumptions: dict[str, float | str] = Field(default={})
    memory_bytes: int = 0
    buffer_bytes: int = 0
    cores: tuple[int, ...] | None = None

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    def term(self, term: Term) -> float:
        return self.terms_s.get(term, 0.0)


class ScheduleRecord(Record):
    """Tasks sorted by start time; ``critical_path``: task names from first to last."""

    tasks: tuple[TaskRecord, ...]
    resources: tuple[ResourceUse, ...]
    critical_path: tuple[str, ...]


class ThroughputRecord(Record):
    """Steady-state pipelined rate: ``requests_per_s`` is None when unbounded (no work)."""

    requests_per_s: float | None = None
    period_s: float
    bottleneck_resource: str
    occupancy_s: tuple[tuple[str, float], ...]


class RequestRecord(Record):
    """A request's hand-off between the client and the workers, outside the schedule: the
    client writes the graph's inputs to ``device`` (the host) and reads its outputs back
    there. ``latency_s`` (interval ``low_s``..``high_s``) adds to the makespan; ``busy_s`` is
    the host's own time per request in it (its input and output steps)."""

    device: str
    latency_s: float
    low_s: float
    high_s: float
    busy_s: float = 0.0
    terms_s: dict[Term, float] = Field(default={})
    source: Source
    assumptions: dict[str, float | str] = Field(default={})


class Breakdown(Record):
    weights: int = 0
    activations: int = 0
    scratch: int = 0
    transfer_buffers: int = 0
    conversion_buffers: int = 0

    @property
    def total(self) -> int:
        return (self.weights + self.activations + self.scratch + self.transfer_buffers
                + self.conversion_buffers)


class OccupantRecord(Record):
    label: str
    category: str
    device: str
    nbytes: int


class TierRecord(Record):
    """One device's tier. ``timeline``: (time_s, bytes from then on), decimated to an upper
    envelope of at most ``MAX_TIMELINE_POINTS`` points (``timeline_points``: how many the
    full timeline had); ``checked``: whether this usage decides feasibility (False for a
    device's share of a pool); ``final_bytes``: the level at the end (0 when balanced)."""

    capacity_bytes: int
    peak_bytes: int
    peak_time_s: float
    breakdown: Breakdown
    occupants: tuple[OccupantRecord, ...] = ()
    timeline: tuple[tuple[float, int], ...]
    timeline_points: int
    checked: bool = True
    final_bytes: int = 0

    @property
    def headroom_bytes(self) -> int:
        return self.capacity_bytes - self.peak_bytes

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.capacity_bytes


class PoolRecord(TierRecord):
    """Tiers of several devices that are one physical memory (``members``: device, tier)."""

    resource: str
    members: tuple[tuple[str, str], ...]


class ViolationRecord(Record):
    devices: tuple[str, ...]
    tier: str
    time_s: float
    need_bytes: int
    capacity_bytes: int
    description: str


class MemoryRecord(Record):
    """``devices``: device -> tier -> usage; ``feasible`` iff every checked usage fits."""

    feasible: bool
    devices: dict[str, dict[str, TierRecord]]
    pools: tuple[PoolRecord, ...] = ()
    violations: tuple[ViolationRecord, ...] = ()
    suggestions: tuple[Suggestion, ...] = ()


class KeptRecord(Record):
    """What keeping a crossing on one device would have cost: ``vertex`` (the consumer, or
    the producer of a graph output) run on ``device`` in ``dtype`` costs ``cost_s`` instead
    of its own ``own_cost_s`` (``delta_s = cost_s - own_cost_s``, uncontended). ``reason``
    when it cannot run there."""

    vertex: str
    device: str
    dtype: DType | None = None
    cost_s: float | None = None
    own_cost_s: float
    delta_s: float | None = None
    reason: str | None = None


class CrossingRecord(Record):
    """A tensor going from its producer (``src_vertex``; None for a graph input, on the
    host) to a consumer (``dst_vertex``; None for a graph output delivered to the host) on
    another device or in another representation. ``tasks``: the transfer and conversion
    tasks that move it, in order; the ``*_s`` figures sum their terms (``total_s`` is the
    time from the first task's start to the last one's end); ``shared_with``: other
    consumers served by some of the same tasks (a tensor sent once is reused)."""

    tensor: str
    src_vertex: str | None = None
    src_device: str
    src_rep: str
    dst_vertex: str | None = None
    dst_device: str
    dst_rep: str
    nbytes: int
    links: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()
    transfer_s: float = 0.0
    conversion_s: float = 0.0
    sync_s: float = 0.0
    launch_s: float = 0.0
    contention_s: float = 0.0
    total_s: float = 0.0
    shared_with: tuple[str, ...] = ()
    kept: KeptRecord | None = None

    @property
    def key(self) -> str:
        """``tensor: src -> dst`` with vertex names (``input``/``output`` at the host)."""
        return (f"{self.tensor}: {self.src_vertex or 'input'} -> "
                f"{self.dst_vertex or 'output'}")


class CutRecord(Record):
    """A cut between two partitions on different devices (``src`` feeds ``dst``; names as
    ``placewise.schedule.partitions.partitions_of`` gives them): the plan's objective value
    with ``dst``'s vertices moved onto ``src``'s device instead (each in its own dtype if
    that device runs it, else its cheapest there), so without this cut
    (``merged_value_s``), and ``buys_s`` = that less the plan's own; None with ``reason``
    when they cannot run there or the counterfactual was not evaluated."""

    src: str
    dst: str
    merged_value_s: float | None = None
    buys_s: float | None = None
    reason: str | None = None


class CandidateRecord(Record):
    """A placement the search tried, or a baseline: its label, objective value in seconds
    (makespan for latency, pipeline period for throughput; None when it does not fit or
    is unbounded), memory verdict, and when known its makespan, period and throughput."""

    label: str
    objective_s: float | None = None
    feasible: bool
    makespan_s: float | None = None
    period_s: float | None = None
    throughput_rps: float | None = None
    note: str = ""


class SearchRecord(Record):
    """What the search did (``placewise.search.result.SearchResult``), never its wall-clock
    time (see the module docstring): the strategy and the step it ``chose``; how many
    candidates the scheduler evaluated and how many cheaper ``estimates`` were made; the
    assignments ``pruned`` before evaluation (reason -> count, with examples); every
    labelled ``alternatives`` tried and the ``baselines``, with their objective; the
    search's ``lower_bound_s`` for the objective; the ``dtypes`` searched; CP-SAT's proven
    bound, status and ``gap`` when it ran; and the search's ``notes``."""

    strategy: str
    chosen: str | None = None
    candidates_evaluated: int | None = None
    estimates: int | None = None
    pruned: dict[str, int] = Field(default={})
    pruned_examples: dict[str, tuple[str, ...]] = Field(default={})
    alternatives: tuple[CandidateRecord, ...] = ()
    baselines: tuple[CandidateRecord, ...] = ()
    lower_bound_s: float | None = None
    dtypes: tuple[str, ...] = ()
    cpsat_bound_s: float | None = None
    cpsat_status: str | None = None
    gap: float | None = None
    notes: tuple[str, ...] = ()


class PrecisionDecisionRecord(Record):
    """One row of the precision sensitivity table (``placewise.precision.policy.Decision``)."""

    vertex: str
    dtype: DType
    natural: DType
    ops: tuple[str, ...] = ()
    gain_s: float | None = None
    quality: dict[str, float] = Field(default={})
    error: float | None = None
    admitted: bool = False
    chosen: bool = False
    fallback: bool = False
    reason: str = ""


class PrecisionRecord(Record):
    """The precision policy of a plan and its quality evidence: the ``policy``, the
    ``budget`` (metric, value, whether it is the default), the ``inputs`` the evidence ran
    on, the emulation ``schemes``, the sensitivity table (``decisions``: every vertex a
    device computes faster at a lower precision, lowered alone), the ``estimated`` quality
    of the chosen assignment emulated as a whole (empty: nothing lowered, the outputs are
    the model's own), its error in the budget metric, the combined estimate from the table,
    the number of whole-assignment re-checks, and ``fallback``: the vertices kept at their
    own precision because the assignment broke the budget."""

    policy: str
    budget_metric: str
    budget_value: float
    budget_default: bool = False
    budget_limit: float
    inputs: str = ""
    input_requests: int = 0
    schemes: dict[str, str] = Field(default={})
    decisions: tuple[PrecisionDecisionRecord, ...] = ()
    lowered: dict[str, str] = Field(default={})
    estimated: dict[str, float] = Field(default={})
    estimated_error: float = 0.0
    combined_estimate: float = 0.0
    rechecks: int = 0
    fallback: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


class IdlePoint(Record):
    """The service time of a request that follows ``gap_s`` of idle time (the median gap
    of the ``n`` requests in this bin): its median and 90th percentile."""

    gap_s: float
    service_p50_s: float
    service_p90_s: float
    n: int


class RuntimeTrial(Record):
    """One runtime setting tried while tuning: onnxruntime's intra-op pool spinning after
    a run (``session_spinning``) and how long before a request is due the client stops
    sleeping and spins (``client_spin_s``); the latency p50 and p90 it gave on the probe
    stream (``serve.tune``)."""

    session_spinning: bool
    client_spin_s: float
    latency_p50_s: float
    latency_p90_s: float


class ServiceRecord(Record):
    """How the plan serves on the machine it was tuned on (``placewise tune``, measured
    with the one run recipe, ``serve.real``): the runtime settings chosen
    (``session_spinning``, ``client_spin_s``) among the ``trials``; the service time of a
    request against the idle time before it (``points``, gaps ascending); the capacity
    measured back to back with ``window`` batches in flight, beside the predicted one; the
    load generator's own lateness (p50/p99) in those runs. ``spread`` and ``tail_spread``:
    how much a measurement moves when it is repeated, ((max - min) / median), the larger of
    the warm service p50 between the ladder's repeats and the chosen setting's latency p50
    between the probe rounds; and of that latency's p90 between the rounds.

    The simulator prices a batch after an idle gap ``g`` at ``latency_factor(g)`` times
    the plan's latency and ``occupancy_factor(g)`` times its occupancies, so that an
    isolated request costs what was measured after such a gap and the service saturates
    at the measured capacity.

    >>> r = ServiceRecord(session_spinning=True, client_spin_s=3e-4, predicted_latency_s=1e-3,
    ...     predicted_capacity_rps=1000.0, capacity_rps=800.0, window=1,
    ...     points=(IdlePoint(gap_s=1e-4, service_p50_s=1.1e-3, service_p90_s=1.2e-3, n=50),
    ...             IdlePoint(gap_s=1e-2, service_p50_s=1.5e-3, service_p90_s=1.8e-3, n=50)))
    >>> round(r.latency_factor(0.0), 3), round(r.latency_factor(1e-3), 3), r.latency_factor(1.0)
    (1.1, 1.3, 1.5)
    >>> round(r.occupancy_factor(0.0), 3), round(r.occupancy_factor(1e-2), 3)
    (1.25, 1.705)
    """

    session_spinning: bool
    client_spin_s: float
    predicted_latency_s: float
    predicted_capacity_rps: float
    capacity_rps: float
    window: int
    points: tuple[IdlePoint, ...]
    trials: tuple[RuntimeTrial, ...] = ()
    late_p50_s: float = 0.0
    late_p99_s: float = 0.0
    spread: float = 0.0
    tail_spread: float = 0.0
    requests: int = 0

    def service_s(self, gap_s: float) -> float:
        """The median service after ``gap_s`` idle: the measured points interpolated
        linearly in ``log(gap)``, held flat outside them."""
        pts = self.points
        if not pts:
            return self.predicted_latency_s
        if gap_s <= pts[0].gap_s:
            return pts[0].service_p50_s
        for a, b in itertools.pairwise(pts):
            if gap_s <= b.gap_s:
                lo, hi = math.log(max(a.gap_s, 1e-9)), math.log(max(b.gap_s, 1e-9))
                w = 0.0 if hi <= lo else (math.log(gap_s) - lo) / (hi - lo)
                return a.service_p50_s + w * (b.service_p50_s - a.service_p50_s)
        return pts[-1].service_p50_s

    def sigma(self, gap_s: float) -> float:
        """The log-spread of one request's service after ``gap_s`` (``ln(p90 / p50) /
        1.2816``, a log-normal's; of the nearest measured gap)."""
        pts = self.points
        if not pts:
            return 0.0
        p = min(pts, key=lambda x: abs(math.log(max(x.gap_s, 1e-9))
                                       - math.log(max(gap_s, 1e-9))))
        return max(0.0, math.log(p.service_p90_s / p.service_p50_s)) / 1.2816

    def latency_factor(self, gap_s: float) -> float:
        """Measured service after ``gap_s`` over the plan's predicted latency."""
        return self.service_s(gap_s) / self.predicted_latency_s

    def occupancy_factor(self, gap_s: float) -> float:
        """The occupancies' scale after ``gap_s``: the predicted over the measured capacity
        (back to back), grown as the service grows with the gap."""
        warm = self.points[0].service_p50_s if self.points else self.predicted_latency_s
        return (self.predicted_capacity_rps / self.capacity_rps) * self.service_s(gap_s) / warm


class ModelRecord(Record):
    """One model of a workload plan (``graph.workload``): its ``name`` (the prefix of its
    tensors and ops), its MODEL reference ``ref``, its inputs and outputs, its request
    stream (``rate_per_s``, ``slo_p99_s``, ``priority``; None where not given), and what
    the plan's schedule says of it with every other model running beside it: ``latency_s``
    (the end of its last task when a request of each model arrives at once),
    ``busy_s`` (its compute and conversion seconds per device per run), ``contention_s``
    (what shared bandwidth added to its tasks), ``devices`` (where its ops run) and
    ``partitions`` (its compiled units)."""

    name: str
    ref: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    ops: int
    rate_per_s: float | None = None
    slo_p99_s: float | None = None
    priority: int = 1
    latency_s: float
    busy_s: dict[str, float]
    contention_s: float
    devices: tuple[str, ...]
    #: the model on its own under the plan's placement (no other model running): its
    #: latency (with the request hand-off) and pipelined period; ``latency_s`` less
    #: ``alone_latency_s`` is what co-location costs it
    alone_latency_s: float | None = None
    alone_period_s: float | None = None
    #: how the model's part of the plan serves on the machine it was tuned on (``placewise
    #: tune`` of a workload plan: each model alone); None: not tuned
    service: ServiceRecord | None = None


class WorkloadRecord(Record):
    """A plan of several models on one machine (``placewise plan --model A --model B``):
    each model's record, and, where every model has a rate, each device's ``utilization``
    at those rates (sum over models of rate x busy seconds per run / batch; above 1 the
    rates cannot be served)."""

    models: tuple[ModelRecord, ...]
    utilization: dict[str, float] | None = None

    def model(self, name: str) -> ModelRecord:
        for m in self.models:
            if m.name == name:
                return m
        raise KeyError(name)


class Plan(Record):
    """A plan file's content; see the module docstring. Build with ``build_plan``, write
    with ``save_plan``, read with ``load_plan``."""

    schema_version: Literal[2] = 2
    created_by: str
    model: str
    graph_name: str
    fingerprints: Fingerprints
    objective: Objective
    objective_value: float | None = None
    batch: int
    strategy: str
    seed: int | None = None
    host: str
    outputs_to_host: bool = True
    machine: MachineInfo
    placement: dict[str, dict[str, str]]
    regions: dict[str, RegionRecord]
    ops: dict[str, OpRecord]
    tensors: dict[str, TensorRecord]
    graph_inputs: tuple[str, ...]
    graph_outputs: tuple[str, ...]
    schedule: ScheduleRecord
    makespan_s: float
    latency_s: float | None = None
    request: RequestRecord | None = None
    exact: bool
    notes: tuple[str, ...] = ()
    throughput_rps: float | None = None
    bottleneck_resource: str
    throughput: ThroughputRecord
    lower_bound_s: float
    bounds: LowerBound
    any_placement_bound: LowerBound | None = None
    memory: MemoryRecord
    crossings: tuple[CrossingRecord, ...] = ()
    cuts: tuple[CutRecord, ...] = ()
    search: SearchRecord | None = None
    precision: PrecisionRecord | None = None
    #: inputs given a value when the plan was made (``--value``; ONNX): the model is
    #: reloaded with them by every command that reads the plan
    values: dict[str, tuple[float, ...]] | None = None
    #: how each control-flow op kept whole (If of unknown condition, Loop, Scan) was
    #: costed, saying when its trip count is a bound (``graph.summary.control_flow_note``)
    control_flow: tuple[str, ...] = ()
    sources: SourcesRecord | None = None
    #: how it serves on the machine it was tuned on (``placewise tune``): runtime settings
    #: and the cost of an idle gap
    service: ServiceRecord | None = None
    #: the models of a workload plan and what the schedule says of each (None: one model)
    workload: WorkloadRecord | None = None

    @property
    def predicted_latency_s(self) -> float:
        """One request end to end: ``latency_s`` when the request hand-off was measured,
        else the makespan."""
        return self.latency_s if self.latency_s is not None else self.makespan_s

    # -- lookups --
    def assignment(self, vertex: str) -> Assignment:
        """The device and dtype of a vertex."""
        a = self.placement[vertex]
        return Assignment(a["device"], DType.parse(a["dtype"]))

    def placement_obj(self) -> Placement:
        """The placement as a ``Placement`` (to re-evaluate it)."""
        return Placement.from_json(self.placement)

    def task_index(self) -> dict[str, TaskRecord]:
        """Task name -> task (built on each call)."""
        return {t.name: t for t in self.schedule.tasks}

    def vertex_of(self, name: str) -> str | None:
        """The vertex an op or vertex name belongs to, or None."""
        if name in self.regions:
            return name
        rec = self.ops.get(name)
        return rec.vertex if rec is not None else None

    def devices_used(self) -> list[str]:
        """Devices holding at least one vertex, in machine order."""
        used = {a["device"] for a in self.placement.values()}
        return [d.name for d in self.machine.devices if d.name in used]

    def time_by_source(self) -> dict[str, float]:
        """Seconds of the schedule's task time by where its numbers came from:
        ``measured`` (profiled here or imported from the target's own profiler),
        ``fitted`` (calibrated fits of other shapes), ``roofline`` and ``given`` (a task
        graph's times), with ``total`` and the ``measured_share``. A region whose ops
        come from several sources splits its time by the shares its cost recorded
        (``share_profiled`` / ``share_calibrated``)."""
        out = {"measured": 0.0, "fitted": 0.0, "roofline": 0.0, "given": 0.0}
        name = {Source.PROFILED: "measured", Source.CALIBRATED: "fitted",
                Source.ROOFLINE: "roofline", Source.GIVEN: "given"}
        for t in self.schedule.tasks:
            d = t.duration_s
            sp, sc = t.assumptions.get("share_profiled"), t.assumptions.get("share_calibrated")
            if isinstance(sp, float) and isinstance(sc, float):
                out["measured"] += d * sp
                out["fitted"] += d * sc
                out["roofline"] += d * max(0.0, 1.0 - sp - sc)
            else:
                out[name[t.source]] += d
        total = sum(out.values())
        out["total"] = total
        out["measured_share"] = out["measured"] / total if total > 0 else 0.0
        return out
