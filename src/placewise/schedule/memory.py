"""Memory: tensor lifetimes from a schedule, per device and tier; peaks, breakdowns, fit.

Every byte a run holds is a ``Buffer`` on one device's tier (the main tier,
``Device.main_memory``, unless ``tiers=`` chooses another), live over ``[start_s, end_s)``:

- **activations**: a tensor copy is live from the start of the task that writes it to the
  end of its last reader on that device (compute consumers, outgoing transfers and
  conversions all read it); a copy nobody reads lives while its producer runs; graph inputs
  are on the host from 0; graph outputs' delivered copies live to the end of the run.
- **transfer**: a received copy is allocated when its transfer starts; while in flight it
  counts as a transfer buffer (the sender still holds its own copy), then as an activation.
  Between two *local* devices (devices with ``cores`` and a ``backend``: the executor's
  worker processes) a transfer is staged through a shared-memory slot outside both
  devices' memory, and the receiver allocates its copy when the transfer ends (when it
  reads the slot): no transfer buffer is counted on the receiver, except for a copy
  delivered at the very end of the run (a graph output returned to the host), which is
  counted while in flight so that it is counted at all.
- **conversion**: a converted copy counts as a conversion buffer while the conversion runs,
  then as an activation (the cost model's ``buffer_bytes`` of a conversion *is* that copy
  and is not added again).
- **scratch**: a compute task holds ``max(vertex scratch_bytes, Cost.buffer_bytes)`` while
  it runs (a fused region declares the sum of its ops' scratch).
- **weights**: every parameter a vertex reads is resident on that vertex's device, in the
  vertex's held dtype, for the whole run; several vertices on one device share a copy of the
  same representation; different devices each count their own (replication).

Internal tensors of a fused region are assumed to stay on chip and are not counted.
Zero-length buffers occupy nothing (intervals are half-open, so a buffer freed at ``t``
and one allocated at ``t`` never overlap).

Tiers that name the same ``shared_with`` resource with the same capacity (unified memory,
as on Jetson or an SoC) are one physical memory: besides each device's own usage, the
report has a *pool* usage summing them, and only the pool is checked against the capacity.

>>> from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
>>> from placewise.schedule.placement import Placement, Problem
>>> from placewise.schedule.simulate import schedule
>>> from placewise.schedule.testing import ToyCostModel, toy_machine
>>> from placewise.units import DType
>>> x = Tensor("x", (1000,), DType.FP32, role=Role.INPUT)
>>> w = Tensor("w", (1000,), DType.FP32, role=Role.PARAM)
>>> y = Tensor("y", (1000,), DType.FP32, role=Role.OUTPUT)
>>> g = Graph.build("g", [x, w, y], [Op("a", OpKind.MUL, ("x", "w"), ("y",))])
>>> m = toy_machine()
>>> prob = Problem(g, None, m, ToyCostModel(m))
>>> rep = memory_report(prob, schedule(prob, Placement.uniform(["a"], "cpu", DType.FP32)))
>>> u = rep.usage("cpu")
>>> u.peak_bytes, dict(u.breakdown)[Category.WEIGHTS], u.final_bytes, rep.feasible
(12000, 4000, 0, True)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from placewise.cost.model import Representation
from placewise.errors import InputError, MemoryInfeasible
from placewise.records import dataclass_record
from placewise.schedule.placement import Problem, held_rep
from placewise.schedule.simulate import Schedule, TaskKind
from placewise.units import format_bytes, format_seconds

__all__ = [
    "Buffer",
    "Category",
    "MemoryReport",
    "Occupant",
    "Suggestion",
    "TierUsage",
    "Violation",
    "memory_report",
]


class Category(Enum):
    WEIGHTS = "weights"
    ACTIVATIONS = "activations"
    SCRATCH = "scratch"
    TRANSFER = "transfer"
    CONVERSION = "conversion"


@dataclass(frozen=True, slots=True)
class Buffer:
    """Bytes held on ``device``'s ``tier`` over ``[start_s, end_s)``.

    ``label``: the tensor (weights and activations), or the task name for scratch;
    ``task``: the task that allocates it (``None`` for weights and graph inputs).
    """

    label: str
    category: Category
    device: str
    tier: str
    nbytes: int
    start_s: float
    end_s: float
    task: str | None = None


@dataclass(frozen=True, slots=True)
class Occupant:
    """A buffer live at a usage's peak."""

    label: str
    category: Category
    device: str
    nbytes: int


@dataclass(frozen=True, slots=True)
class TierUsage:
    """Occupancy of one device tier, or of a pool of tiers that are one physical memory.

    ``timeline``: (time_s, bytes in use from that time on), one point per time where the
    level changes, starting at 0.0; ``breakdown``: bytes per category at the peak (every
    category, in ``Category`` order); ``occupants``: the largest buffers live at the peak;
    ``checked``: whether feasibility is decided by this usage (False for a device's share
    of a pool: the pool usage is checked instead); ``final_bytes``: the level after the
    last event, 0 when the accounting balances.
    """

    members: tuple[tuple[str, str], ...]
    pool: str | None
    capacity_bytes: int
    peak_bytes: int
    peak_time_s: float
    breakdown: tuple[tuple[Category, int], ...]
    timeline: tuple[tuple[float, int], ...]
    occupants: tuple[Occupant, ...]
    checked: bool
    final_bytes: int

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(d for d, _ in self.members)

    @property
    def tier(self) -> str:
        return "+".join(dict.fromkeys(t for _, t in self.members))

    @property
    def name(self) -> str:
        """``gpu0/hbm3``; ``cpu/lpddr5 (in pool lpddr5-mc)`` for a device's share of a
        pool; ``pool lpddr5-mc (cpu/lpddr5, gpu/lpddr5)`` for the pool itself."""
        if len(self.members) > 1:
            return f"pool {self.pool} (" + ", ".join(f"{d}/{t}" for d, t in self.members) + ")"
        d, t = self.members[0]
        return f"{d}/{t}" + (f" (in pool {self.pool})" if self.pool else "")

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.capacity_bytes

    @property
    def headroom_bytes(self) -> int:
        return self.capacity_bytes - self.peak_bytes


@dataclass(frozen=True, slots=True)
class Violation:
    """A checked usage over capacity: where, when (the peak), how much, and what is there."""

    devices: tuple[str, ...]
    tier: str
    time_s: float
    need_bytes: int
    capacity_bytes: int
    occupants: tuple[Occupant, ...]

    def describe(self) -> str:
        top = ", ".join(f"{o.label} ({o.category.value}, {format_bytes(o.nbytes)})"
                        for o in self.occupants[:3])
        return (f"{'+'.join(self.devices)}/{self.tier} needs {format_bytes(self.need_bytes)} "
                f"at {format_seconds(self.time_s)} but holds {format_bytes(self.capacity_bytes)}"
                + (f"; largest: {top}" if top else ""))


@dataclass_record
@dataclass(frozen=True, slots=True)
class Suggestion:
    """A way an overflowing tier could fit, as data.

    ``kind="micro_batch"``: split the batch in ``micro_batches`` (activations, scratch and
    in-flight buffers scale ~linearly with the batch; weights do not); ``possible`` is
    False when that needs more micro-batches than the batch has samples, or when the
    weights alone overflow. ``kind="spill"``: move ``spill_bytes`` (weights first) to
    ``spill_tier`` of ``devices[0]``, which has room. ``extra_s`` is a rough estimate of
    the added time (extra launches per micro-batch; reading the spilled bytes once per run
    at the spill tier's bandwidth), explained in ``note``.
    """

    kind: str
    devices: tuple[str, ...]
    tier: str
    micro_batches: int = 0
    possible: bool = True
    spill_tier: str | None = None
    spill_bytes: int = 0
    extra_s: float = 0.0
    note: str = ""


class _Buffers:
    """Every buffer of a report as parallel arrays (numpy for the numbers)."""

    __slots__ = ("cat", "dev", "devices", "end", "label", "nbytes", "start", "task", "tier_of")

    def __init__(self, devices: list[str], tier_of: dict[str, str]) -> None:
        self.devices = devices
        self.tier_of = tier_of
        self.label: list[str] = []
        self.task: list[str | None] = []
        self.cat: np.ndarray = np.zeros(0, dtype=np.int64)
        self.dev: np.ndarray = np.zeros(0, dtype=np.int64)
        self.nbytes: np.ndarray = np.zeros(0, dtype=np.int64)
        self.start: np.ndarray = np.zeros(0, dtype=np.float64)
        self.end: np.ndarray = np.zeros(0, dtype=np.float64)

    def record(self, i: int) -> Buffer:
        d = self.devices[int(self.dev[i])]
        return Buffer(self.label[i], _CATS[int(self.cat[i])], d, self.tier_of[d],
                      int(self.nbytes[i]), float(self.start[i]), float(self.end[i]),
                      self.task[i])


_CATS = tuple(Category)
_W, _A, _S, _T, _C = (_CATS.index(c) for c in (Category.WEIGHTS, Category.ACTIVATIONS,
                                                Category.SCRATCH, Category.TRANSFER,
                                                Category.CONVERSION))


@dataclass(frozen=True, slots=True, eq=False)
class MemoryReport:
    """Per-device (and pooled) tier usage of one schedule; ``feasible`` iff every checked
    usage fits. ``buffers`` (every allocation) is built on first access."""

    usages: tuple[TierUsage, ...]
    feasible: bool
    violations: tuple[Violation, ...]
    suggestions: tuple[Suggestion, ...]
    _arrays: _Buffers = field(repr=False)
    _buffers: tuple[Buffer, ...] | None = field(init=False, default=None, repr=False)

    @property
    def buffers(self) -> tuple[Buffer, ...]:
        if self._buffers is None:
            a = self._arrays
            object.__setattr__(self, "_buffers",
                               tuple(a.record(i) for i in range(len(a.label))))
        assert self._buffers is not None
        return self._buffers

    def usage(self, device: str, tier: str | None = None) -> TierUsage:
        """The usage of ``device`` alone (its chosen tier; ``tier`` to insist on one)."""
        for u in self.usages:
            if len(u.members) == 1 and u.members[0][0] == device and \
                    (tier is None or u.members[0][1] == tier):
                return u
        raise KeyError(f"no memory usage for device {device!r}" +
                       (f" tier {tier!r}" if tier else ""))

    def device_usages(self) -> list[TierUsage]:
        """One usage per device (its own share, pooled or not), in machine order."""
        return [u for u in self.usages if len(u.members) == 1]

    def pools(self) -> list[TierUsage]:
        return [u for u in self.usages if len(u.members) > 1]

    def raise_if_infeasible(self) -> None:
        """Raise ``MemoryInfeasible`` naming the first violation."""
        if self.violations:
            v = self.violations[0]
            raise MemoryInfeasible(v.describe(), device="+".join(v.devices), tier=v.tier,
                                   need_bytes=v.need_bytes, capacity_bytes=v.capacity_bytes)


def _weights(problem: Problem, schedule: Schedule) -> list[tuple[str, str, int]]:
    """(param label, device, bytes) for every resident weight copy, deterministic order."""
    g = problem.graph
    seen: dict[tuple[str, str, Representation], int] = {}
    for v in problem.vertices:
        if not v.params:
            continue
        a = schedule.placement[v.name]
        for pname in v.params:
            t = g.tensor(pname)
            rep = held_rep(t, a.dtype)
            key = (pname, a.device, rep)
            if key not in seen:
                seen[key] = rep.dtype.nbytes(t.numel)
    out: list[tuple[str, str, int]] = []
    for (pname, dev, rep), nbytes in seen.items():
        same = rep.dtype is g.tensor(pname).dtype
        out.append((pname if same else f"{pname} ({rep.dtype.value})", dev, nbytes))
    return out


def _buffers(problem: Problem, schedule: Schedule, tier_of: dict[str, str]) -> _Buffers:
    tl = schedule.timeline
    makespan = schedule.makespan_s
    devices = list(problem.devices)
    dev_id = {d: i for i, d in enumerate(devices)}
    out = _Buffers(devices, tier_of)
    label, task = out.label, out.task
    cat: list[int] = []
    dev: list[int] = []
    nb: list[int] = []
    st: list[float] = []
    en: list[float] = []
    for name, d, nbytes in _weights(problem, schedule):
        label.append(name)
        task.append(None)
        cat.append(_W)
        dev.append(dev_id[d])
        nb.append(nbytes)
        st.append(0.0)
        en.append(makespan)
    names, kinds = tl.name, tl.kind
    transfer, conversion = TaskKind.TRANSFER, TaskKind.CONVERSION
    local = {d.name for d in problem.machine.devices if d.is_local}
    staged = {i for i in range(len(names)) if kinds[i] is transfer and
              tl.device[i] in local and tl.dst_device[i] in local}
    for c in range(len(tl.c_tensor)):
        b = tl.c_bytes[c]
        a0, r0, f0 = tl.c_alloc[c], tl.c_ready[c], tl.c_free[c]
        if b <= 0 or f0 <= a0:
            continue
        made = tl.c_made[c]
        mk = names[made] if made >= 0 else None
        di = dev_id[tl.c_device[c]]
        t = tl.c_tensor[c]
        k = kinds[made] if made >= 0 else None
        if k is transfer or k is conversion:
            mid = r0 if r0 < f0 else f0
            if k is transfer and made in staged and f0 > mid:
                # the receiver allocates its copy when it reads the staging slot (a copy
                # delivered at the very end, a graph output, keeps its in-flight buffer:
                # the receiver does hold it before handing it to the client)
                a0 = mid
            if mid > a0:
                label.append(t)
                task.append(mk)
                cat.append(_T if k is transfer else _C)
                dev.append(di)
                nb.append(b)
                st.append(a0)
                en.append(mid)
            a0 = mid
            if f0 <= a0:
                continue
        label.append(t)
        task.append(mk)
        cat.append(_A)
        dev.append(di)
        nb.append(b)
        st.append(a0)
        en.append(f0)
    vertex_scratch = {v.name: v.scratch_bytes for v in problem.vertices}
    compute = TaskKind.COMPUTE
    for i in range(len(names)):
        if kinds[i] is not compute:
            continue
        vx = tl.vertex[i]
        scratch = max(vertex_scratch[vx] if vx is not None else 0, tl.cost[i].buffer_bytes)
        if scratch > 0 and tl.end[i] > tl.start[i]:
            label.append(f"scratch:{names[i]}")
            task.append(names[i])
            cat.append(_S)
            dev.append(dev_id[tl.device[i]])
            nb.append(scratch)
            st.append(tl.start[i])
            en.append(tl.end[i])
    out.cat = np.asarray(cat, dtype=np.int64)
    out.dev = np.asarray(dev, dtype=np.int64)
    out.nbytes = np.asarray(nb, dtype=np.int64)
    out.start = np.asarray(st, dtype=np.float64)
    out.end = np.asarray(en, dtype=np.float64)
    return out


def _usage(members: tuple[tuple[str, str], ...], pool: str | None, capacity: int,
           bufs: _Buffers, idx: np.ndarray, checked: bool, top: int) -> TierUsage:
    st, en, by = bufs.start[idx], bufs.end[idx], bufs.nbytes[idx]
    if len(idx) == 0:
        return TierUsage(members, pool, capacity, 0, 0.0,
                         tuple((c, 0) for c in _CATS), ((0.0, 0),), (), checked, 0)
    times = np.concatenate([st, en])
    deltas = np.concatenate([by, -by])
    order = np.argsort(times, kind="stable")
    ts = times[order]
    lv = np.cumsum(deltas[order])
    group_end = np.empty(len(ts), dtype=bool)
    group_end[:-1] = ts[1:] != ts[:-1]
    group_end[-1] = True
    pts = ts[group_end]
    levels = lv[group_end]
    k = int(np.argmax(levels))
    peak = int(levels[k])
    peak_t = float(pts[k]) if peak > 0 else 0.0
    peak = max(peak, 0)
    change = np.empty(len(levels), dtype=bool)
    change[0] = True
    change[1:] = levels[1:] != levels[:-1]
    tl_t = pts[change].tolist()
    tl_l = levels[change].tolist()
    timeline: list[tuple[float, int]] = [] if tl_t and tl_t[0] == 0.0 else [(0.0, 0)]
    timeline.extend(zip(tl_t, tl_l, strict=True))
    final = int(lv[-1])
    by_cat = dict.fromkeys(_CATS, 0)
    occ: list[Occupant] = []
    if peak > 0:
        live = (st <= peak_t) & (en > peak_t)
        cats = bufs.cat[idx][live]
        lb = by[live]
        for ci, c in enumerate(_CATS):
            by_cat[c] = int(lb[cats == ci].sum())
        live_idx = idx[live]
        top_i = sorted(live_idx.tolist(),
                       key=lambda i: (-int(bufs.nbytes[i]), bufs.label[i]))[:top]
        occ = [Occupant(bufs.label[i], _CATS[int(bufs.cat[i])], bufs.devices[int(bufs.dev[i])],
                        int(bufs.nbytes[i])) for i in top_i]
    return TierUsage(members, pool, capacity, peak, peak_t, tuple(by_cat.items()),
                     tuple(timeline), tuple(occ), checked, final)


def memory_report(problem: Problem, schedule: Schedule, *,
                  tiers: Mapping[str, str] | None = None, top: int = 5) -> MemoryReport:
    """Lifetimes, per-tier timelines, peaks and fit of ``schedule`` (see the module doc).

    ``tiers`` chooses the tier each device holds its bytes in (device -> tier name; default
    the main tier). ``top``: how many occupants to name at each peak.
    """
    m = problem.machine
    tier_of: dict[str, str] = {}
    for d in m.devices:
        name = (tiers or {}).get(d.name, d.main_memory.name)
        try:
            d.tier(name)
        except KeyError as exc:
            raise InputError(str(exc).strip("'\""), place=f"device {d.name!r}") from None
        tier_of[d.name] = name
    bufs = _buffers(problem, schedule, tier_of)
    dev_id = {d: i for i, d in enumerate(bufs.devices)}
    by_dev = {d.name: np.flatnonzero(bufs.dev == dev_id[d.name]) for d in m.devices}
    # pools: all (device, tier) of the machine sharing a resource and a capacity
    pool_members: dict[tuple[str, int], list[tuple[str, str]]] = {}
    for d in m.devices:
        for t in d.memory:
            if t.shared_with is not None:
                pool_members.setdefault((t.shared_with, t.capacity_bytes), []).append(
                    (d.name, t.name))
    pooled: dict[tuple[str, str], tuple[str, int]] = {}
    for key, mem in pool_members.items():
        if len(mem) > 1:
            for dt in mem:
                pooled[dt] = key
    usages: list[TierUsage] = []
    for d in m.devices:
        t = d.tier(tier_of[d.name])
        member = (d.name, t.name)
        usages.append(_usage((member,), pooled[member][0] if member in pooled else None,
                             t.capacity_bytes, bufs, by_dev[d.name], member not in pooled, top))
    for (res, cap), mem in pool_members.items():
        if len(mem) < 2:
            continue
        chosen = [by_dev[dn] for dn, tn in mem if tier_of[dn] == tn]
        idx = np.sort(np.concatenate(chosen)) if chosen else np.zeros(0, dtype=np.int64)
        usages.append(_usage(tuple(mem), res, cap, bufs, idx, True, top))
    violations = [Violation(u.devices, u.tier, u.peak_time_s, u.peak_bytes, u.capacity_bytes,
                            u.occupants) for u in usages if u.checked and not u.fits]
    suggestions: list[Suggestion] = []
    for u in usages:
        if u.checked and not u.fits:
            suggestions.extend(_suggest(problem, schedule, u, usages, tier_of))
    return MemoryReport(tuple(usages), not violations, tuple(violations), tuple(suggestions),
                        bufs)


def _suggest(problem: Problem, schedule: Schedule, u: TierUsage, usages: list[TierUsage],
             tier_of: dict[str, str]) -> list[Suggestion]:
    out: list[Suggestion] = []
    m = problem.machine
    weights = dict(u.breakdown)[Category.WEIGHTS]
    other = u.peak_bytes - weights
    overflow = u.peak_bytes - u.capacity_bytes
    devices = u.devices
    if weights >= u.capacity_bytes:
        out.append(Suggestion("micro_batch", devices, u.tier, 0, False,
                              note=f"weights alone ({format_bytes(weights)}) exceed the "
                                   f"capacity: micro-batching cannot help"))
    else:
        k = max(2, math.ceil(other / (u.capacity_bytes - weights)))
        tl = schedule.timeline
        n_tasks = sum(1 for k, d in zip(tl.kind, tl.device, strict=True)
                      if k is TaskKind.COMPUTE and d in devices)
        launch = max(m.device(d).launch_overhead_s for d in devices)
        extra = (k - 1) * n_tasks * launch
        possible = k <= problem.batch
        out.append(Suggestion(
            "micro_batch", devices, u.tier, k, possible, extra_s=extra,
            note=(f"{k} micro-batches of the batch {problem.batch} bring activations, scratch "
                  f"and in-flight buffers from {format_bytes(other)} to about "
                  f"{format_bytes(other // k)}; each of the {n_tasks} tasks launches {k} "
                  f"times (about +{format_seconds(extra)}), the rest of the work is unchanged"
                  + ("" if possible else f"; not possible: the batch has only "
                     f"{problem.batch} sample(s)"))))
    # spill: another tier of the same device with room
    used: dict[tuple[str, str], int] = {}
    for other_u in usages:
        if other_u.checked:
            for dt in other_u.members:
                used[dt] = other_u.peak_bytes
    for dname in devices:
        dev = m.device(dname)
        for t in dev.memory:
            if t.name == tier_of[dname]:
                continue
            free = t.capacity_bytes - used.get((dname, t.name), 0)
            if free >= overflow:
                extra = overflow / t.bandwidth_bytes_per_s
                what = "weights" if weights >= overflow else "weights and activations"
                out.append(Suggestion(
                    "spill", (dname,), u.tier, spill_tier=t.name, spill_bytes=overflow,
                    extra_s=extra,
                    note=(f"move {format_bytes(overflow)} of {what} to {dname}/{t.name} "
                          f"({format_bytes(free)} free); reading them once per run at "
                          f"{t.bandwidth_bytes_per_s / 1e9:.3g} GB/s adds about "
                          f"{format_seconds(extra)}")))
    return out
