"""HEFT (Heterogeneous Earliest Finish Time) as published, over devices and precisions.

Topcuoglu, Hariri and Wu, "Performance-effective and low-complexity task scheduling for
heterogeneous computing", IEEE TPDS 13(3), 2002:

1. **Upward rank.** ``rank(i) = w(i) + max over successors j of (c(i, j) + rank(j))``
   (``w(i)`` alone for an exit vertex). ``w(i)`` is the mean, over the devices that can
   run vertex ``i``, of its computation cost there (on each device its fastest candidate
   precision). ``c(i, j) = L + bytes / B``: ``L`` is the mean latency and ``B`` the mean
   bandwidth over the ordered pairs of distinct devices (each pair's latency and
   bandwidth a linear fit of the cost model's transfer times for a 1 MiB and a 64 MiB
   tensor), ``bytes`` the tensor's bytes in its own representation. A graph output the
   vertex delivers counts as an edge of that cost to an exit of rank 0 (the host).
2. **Processor selection with insertion.** Highest rank first (among the vertices whose
   predecessors are placed: the paper's list sorted by decreasing rank, with ties in
   vertex order), each vertex takes the candidate (device, precision) where it *finishes
   earliest*: its inputs arrive (the producer's finish plus the crossing's conversion and
   transfer time under the scheduler's policy, ``Model.delay``; graph inputs from the host
   at 0), then it starts in the earliest idle gap long enough on one of the device's
   lanes, between tasks already placed or after the last one. A vertex that delivers
   graph outputs adds their trip to the host to its finish for this comparison. Ties go to
   the candidate listed first.

``heft_schedule`` returns the placement *and HEFT's own schedule*: every vertex's start,
finish and lane, and the makespan HEFT estimates. HEFT's model is the paper's: transfers
start as soon as their data is ready and never wait for a link (contention-free links),
conversions are delays. The ``heft`` strategy (``placewise.search.auto``) scores the plan
*on that schedule*: the scheduler replays it with HEFT's start times as release times
(``Problem.released``), so every task starts at HEFT's time wherever the machine's
resource model agrees. Where it does not (exclusive links queueing transfers, conversions
taking compute lanes, shared bandwidth slowing tasks), ``replay_late`` counts the tasks
that started late (and says whether the run ended after HEFT's makespan); the strategy then also reschedules the placement with the list
scheduler, keeps the better of the two and says so in its notes.

A candidate whose finish, with half the fitted crossing times and a free lane, already
loses is not costed exactly (this saves most cost-model queries on large graphs; the
fitted times are exact for the roofline model, so this never changes the choice there).
``stop`` (a deadline check, see ``Budget.stop_at``) is called every 256 vertices; when it
returns true HEFT is abandoned with ``SearchStopped``.

With ``throughput=True`` each vertex instead takes the candidate that keeps the busiest
resource's occupancy lowest (device lanes, link directions, shared controllers), finish
time breaking ties — a list-scheduling form of load balancing for pipelined runs.

>>> from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
>>> from placewise.schedule.placement import Problem
>>> from placewise.schedule.testing import ToyCostModel, toy_machine
>>> from placewise.search.space import Model, SearchSpace
>>> from placewise.units import DType
>>> x = Tensor("x", (10,), DType.FP32, role=Role.INPUT)
>>> ys = [Tensor(f"y{i}", (10,), DType.FP32, role=Role.OUTPUT) for i in range(2)]
>>> g = Graph.build("g", [x, *ys], [Op(f"o{i}", OpKind.RELU, ("x",), (f"y{i}",))
...                                  for i in range(2)])
>>> m = toy_machine()
>>> cm = ToyCostModel(m, {("o0", "cpu"): 1.0, ("o1", "cpu"): 1.0, ("o0", "gpu"): 1.0,
...                       ("o1", "gpu"): 1.0})
>>> out = heft_schedule(Model(SearchSpace(Problem(g, None, m, cm), [DType.FP32])))
>>> sorted(a.device for a in out.placement.values())
['cpu', 'gpu']
>>> [round(s, 3) for s in out.start_s], out.makespan_s > 1.0
([0.0, 0.0], True)
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right, insort
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from placewise.cost.model import Representation
from placewise.errors import UnsupportedError
from placewise.graph.ir import Tensor
from placewise.schedule.placement import Placement
from placewise.schedule.simulate import Schedule, TaskKind
from placewise.search.space import Model, SearchStopped
from placewise.units import DType

__all__ = ["HeftSchedule", "heft_choice", "heft_placement", "heft_schedule", "replay_late",
           "upward_ranks"]


@dataclass(frozen=True, slots=True)
class HeftSchedule:
    """HEFT's placement and its own schedule (see the module docstring): per vertex (in
    the problem's vertex order) the candidate index, the start and finish of its compute
    task and the lane of its device it runs on; ``makespan_s``: when the last vertex ends
    and its graph outputs reach the host, in HEFT's model."""

    choice: list[int]
    start_s: list[float]
    finish_s: list[float]
    lane: list[int]
    makespan_s: float
    placement: Placement

    def release_s(self, names: list[str]) -> dict[str, float]:
        """Vertex name -> HEFT's start time: release times that replay this schedule
        (``Problem.released``); ``names`` are the problem's vertex names in order."""
        return dict(zip(names, self.start_s, strict=True))


def _pair_fit(model: Model) -> dict[tuple[str, str], tuple[float, float]]:
    """Per ordered pair of distinct devices: (seconds, seconds per byte) of a transfer,
    fitted to the cost model's answers for a 1 MiB and a 64 MiB tensor."""
    cm = model.problem.cost_model
    rep = Representation(DType.UINT8)
    small = Tensor("heft-probe-small", (1 << 20,), DType.UINT8)
    large = Tensor("heft-probe-large", (1 << 26,), DType.UINT8)
    out: dict[tuple[str, str], tuple[float, float]] = {}
    devs = model.space.devices
    for a in devs:
        for b in devs:
            if a == b:
                continue
            try:
                t1 = cm.transfer_cost(small, rep, a, b).total_s
                t2 = cm.transfer_cost(large, rep, a, b).total_s
            except UnsupportedError:
                continue
            slope = max(0.0, (t2 - t1) / ((1 << 26) - (1 << 20)))
            out[(a, b)] = (max(0.0, t1 - slope * (1 << 20)), slope)
    return out


def _mean_link(fit: Mapping[tuple[str, str], tuple[float, float]]) -> tuple[float, float]:
    """The paper's mean link: (mean latency L, seconds per byte 1 / B) with B the mean
    bandwidth over the fitted pairs (a pair with no per-byte cost has an infinite one)."""
    if not fit:
        return 0.0, 0.0
    lat = sum(x for x, _ in fit.values()) / len(fit)
    rates = [1.0 / y if y > 0.0 else math.inf for _, y in fit.values()]
    mean_rate = sum(rates) / len(rates)
    return lat, (1.0 / mean_rate if mean_rate > 0.0 else 0.0)


def upward_ranks(model: Model, fit: Mapping[tuple[str, str], tuple[float, float]] | None = None
                 ) -> list[float]:
    """HEFT's upward rank of every vertex, as published (see the module docstring)."""
    sp = model.space
    ed = model.edges
    p = model.problem
    lat, per_byte = _mean_link(fit if fit is not None else _pair_fit(model))
    rank = [0.0] * sp.n
    for i in range(sp.n - 1, -1, -1):
        fastest: dict[int, float] = {}
        for k, c in enumerate(sp.cost_s[i]):
            d = sp.cand_dev[i][k]
            if c < fastest.get(d, math.inf):
                fastest[d] = c
        best = 0.0
        for t in ed.delivers[i]:
            best = max(best, lat + per_byte * p.copy_bytes(t, p.natural_rid[t]))
        for e in ed.e_out[i]:
            t = ed.tensor[e]
            c = lat + per_byte * p.copy_bytes(t, p.natural_rid[t]) + rank[ed.dst[e]]
            if c > best:
                best = c
        rank[i] = sum(fastest.values()) / len(fastest) + best
    return rank


class _Lane:
    """The busy intervals of one device lane, sorted and disjoint, in blocks of at most
    ``2 * _BLOCK`` with each block's longest idle gap (the gap before its first interval
    included), so that the earliest gap that fits is found without a scan of the lane."""

    __slots__ = ("blocks", "firsts", "gaps")

    def __init__(self) -> None:
        self.blocks: list[tuple[list[float], list[float]]] = []  # (starts, ends)
        self.firsts: list[float] = []  # each block's first start
        self.gaps: list[float] = []  # each block's longest gap

    def _gap_of(self, b: int) -> float:
        st, en = self.blocks[b]
        prev = self.blocks[b - 1][1][-1] if b > 0 else 0.0
        g = st[0] - prev
        for j in range(1, len(st)):
            x = st[j] - en[j - 1]
            if x > g:
                g = x
        return g

    def slot(self, ready: float, dur: float) -> float:
        """The earliest start >= ``ready`` of a ``dur``-long task on this lane."""
        blocks = self.blocks
        if not blocks:
            return ready
        gaps = self.gaps
        b = bisect_right(self.firsts, ready) - 1
        if b < 0:
            b = 0
        t = ready
        # the block holding ``ready``: scan from the first interval ending after it, unless
        # none of its gaps is long enough
        st, en = blocks[b]
        if en[-1] > t:
            if gaps[b] >= dur:
                j = bisect_right(en, t)
                while j < len(st):
                    if st[j] - t >= dur:
                        return t
                    if en[j] > t:
                        t = en[j]
                    j += 1
            else:
                t = en[-1]
        # later blocks: the first whose longest gap is long enough (a gap there starts
        # after every interval before it, so its whole length counts)
        nb = len(blocks)
        b2 = b + 1
        while b2 < nb and gaps[b2] < dur:
            b2 += 1
        if b2 > b + 1:
            last = blocks[b2 - 1][1][-1]
            if last > t:
                t = last
        if b2 == nb:
            return t
        st, en = blocks[b2]
        for j in range(len(st)):
            if st[j] - t >= dur:
                return t
            if en[j] > t:
                t = en[j]
        # the block's longest gap was its leading one, measured from an earlier end: go on
        return self.slot(t, dur) if b2 + 1 < nb else t

    def add(self, start: float, end: float) -> None:
        blocks = self.blocks
        if not blocks:
            blocks.append(([start], [end]))
            self.firsts.append(start)
            self.gaps.append(start)
            return
        b = max(0, bisect_right(self.firsts, start) - 1)
        st, en = blocks[b]
        insort(st, start)
        insort(en, end)
        self.firsts[b] = st[0]
        if len(st) > 2 * _BLOCK:
            half = len(st) // 2
            blocks.insert(b + 1, (st[half:], en[half:]))
            blocks[b] = (st[:half], en[:half])
            self.firsts.insert(b + 1, st[half])
            self.gaps.insert(b + 1, 0.0)
            self.gaps[b + 1] = self._gap_of(b + 1)
        self.gaps[b] = self._gap_of(b)
        if b + 1 < len(blocks):
            self.gaps[b + 1] = self._gap_of(b + 1)


_BLOCK = 64  # busy intervals per block of a lane (between _BLOCK and 2 * _BLOCK)


def heft_schedule(model: Model, *, throughput: bool = False,
                  stop: Callable[[], bool] | None = None,
                  ranks: Sequence[float] | None = None) -> HeftSchedule:
    """HEFT's placement and its own schedule (see the module docstring). ``ranks``: the
    priority of every vertex instead of its upward rank (e.g. another library's rank, to
    compare; among the vertices whose predecessors are placed, the highest goes first)."""
    sp = model.space
    ed = model.edges
    comm = model.comm
    p = model.problem
    n = sp.n
    fit = _pair_fit(model)
    rank = list(ranks) if ranks is not None else upward_ranks(model, fit)
    # a conservative estimate of each edge's crossing time between two devices (half the
    # fitted time at the tensor's smallest representation): a candidate whose finish is
    # already lost with these delays is not costed exactly
    small = _smallest_bytes(model)
    lanes = [[_Lane() for _ in range(max(1, nl))] for nl in sp.lanes]
    choice, lane_of = [-1] * n, [0] * n
    start_s, fin = [0.0] * n, [0.0] * n
    span = peak = 0.0
    load = [0.0] * comm.n_resources
    res_lanes = comm.res_lanes
    preds = p.preds
    indeg = [len(preds[i]) for i in range(n)]
    ready_q = [(-rank[i], i) for i in range(n) if indeg[i] == 0]
    heapq.heapify(ready_q)
    succs = p.succs
    placed = 0
    while ready_q:
        if stop is not None and not placed % 256 and stop():
            raise SearchStopped(f"heft stopped after placing {placed} of {n} vertices")
        placed += 1
        _, i = heapq.heappop(ready_q)
        costs = sp.cost_s[i]
        best: tuple[float, float, int] | None = None
        best_slot: tuple[int, float] = (0, 0.0)
        best_parts: list[tuple[int, float]] = []
        best_end = 0.0
        floor = 0.0
        for u in preds[i]:
            if fin[u] > floor:
                floor = fin[u]
        cand_dev = sp.cand_dev[i]
        prev_dev = -1
        est = floor
        for k in range(len(costs)):
            if not throughput and best is not None:
                if cand_dev[k] != prev_dev:
                    prev_dev = cand_dev[k]
                    est = _optimistic_ready(model, fit, small, i, sp.devices[prev_dev], floor,
                                            fin, choice)
                if (est + costs[k], 0.0, k) >= best:
                    continue  # it would not win even with these optimistic crossings
            ready = max(floor, model.release(i, k))
            for e in ed.e_in[i]:
                u = ed.src[e]
                t = fin[u] + model.delay(e, choice[u], k)
                if t > ready:
                    ready = t
            start, lane = _earliest_slot(lanes[cand_dev[k]], ready, costs[k])
            finish = start + costs[k] + model.tail(i, k)
            if throughput:
                parts = _resource_parts(model, i, k, choice)
                key = (_peak_with(parts, load, res_lanes, peak), finish, k)
            else:
                parts = []
                key = (finish, 0.0, k)
            if best is None or key < best:
                best = key
                best_slot = (lane, start)
                best_parts = parts
                best_end = finish
        assert best is not None
        k = best[2]
        lane, start = best_slot
        lanes[cand_dev[k]][lane].add(start, start + costs[k])
        start_s[i] = start
        fin[i] = start + costs[k]
        lane_of[i] = lane
        choice[i] = k
        if best_end > span:
            span = best_end
        if throughput:
            peak = _add_load(best_parts, load, res_lanes, peak)
        for s in succs[i]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(ready_q, (-rank[s], s))
    return HeftSchedule(choice, start_s, fin, lane_of, span, sp.placement(choice))


def _smallest_bytes(model: Model) -> list[int]:
    """Each edge's tensor at its smallest representation (bytes)."""
    sp, ed, p = model.space, model.edges, model.problem
    min_bits = min(dt.bits for dt in sp.dtypes)
    small = []
    for e in range(len(ed.src)):
        tname = ed.tensor[e]
        nat = p.reps[p.natural_rid[tname]]
        bits = min(min_bits, nat.dtype.bits) if nat.dtype.is_float else nat.dtype.bits
        small.append((p.numel[tname] * bits + 7) // 8)
    return small


def _optimistic_ready(model: Model, fit: dict[tuple[str, str], tuple[float, float]],
                      small: Sequence[int], i: int, device: str, floor: float,
                      fin: Sequence[float], choice: Sequence[int]) -> float:
    """When vertex ``i`` could start on ``device`` at the earliest, crossing each input edge
    in half its fitted time at the tensor's smallest representation."""
    sp, ed = model.space, model.edges
    est = floor
    for e in ed.e_in[i]:
        u = ed.src[e]
        du = sp.cands[u][choice[u]].device
        if du != device:
            base, per_byte = fit.get((du, device), (0.0, 0.0))
            t = fin[u] + 0.5 * (base + per_byte * small[e])
            if t > est:
                est = t
    return est


def _earliest_slot(lanes: Sequence[_Lane], ready: float, dur: float) -> tuple[float, int]:
    """The earliest start at or after ``ready`` on any of ``lanes``, and that lane."""
    start, lane = math.inf, 0
    for ln, lane_k in enumerate(lanes):
        s = lane_k.slot(ready, dur)
        if s < start:
            start, lane = s, ln
    return start, lane


def _resource_parts(model: Model, i: int, k: int, choice: Sequence[int]
                    ) -> list[tuple[int, float]]:
    """(resource, seconds) vertex ``i`` on candidate ``k`` adds: its I/O, its input edges."""
    ed = model.edges
    parts = model.io_parts(i, k)
    for e in ed.e_in[i]:
        parts.extend(model.delay_parts(e, choice[ed.src[e]], k))
    return parts


def _peak_with(parts: Sequence[tuple[int, float]], load: Sequence[float],
               res_lanes: Sequence[int], peak: float) -> float:
    """The busiest resource's load per lane once ``parts`` are added."""
    acc: dict[int, float] = {}
    for r, s in parts:
        acc[r] = acc.get(r, 0.0) + s
    new_peak = peak
    for r, s in acc.items():
        v = (load[r] + s) / res_lanes[r]
        if v > new_peak:
            new_peak = v
    return new_peak


def _add_load(parts: Sequence[tuple[int, float]], load: list[float],
              res_lanes: Sequence[int], peak: float) -> float:
    """Add ``parts`` to ``load``; the busiest resource's load per lane since."""
    for r, s in parts:
        load[r] += s
        v = load[r] / res_lanes[r]
        if v > peak:
            peak = v
    return peak


def heft_choice(model: Model, *, throughput: bool = False,
                stop: Callable[[], bool] | None = None) -> list[int]:
    """Candidate indexes HEFT picks (see the module docstring)."""
    return heft_schedule(model, throughput=throughput, stop=stop).choice


def heft_placement(model: Model, *, throughput: bool = False) -> Placement:
    """The placement HEFT picks (see the module docstring)."""
    return heft_schedule(model, throughput=throughput).placement


def replay_late(out: HeftSchedule, sched: Schedule, vertex_index: Mapping[str, int]
                ) -> tuple[int, bool]:
    """How ``sched`` (the scheduler's replay of ``out`` with HEFT's start times as release
    times) departs from HEFT's own schedule: the number of compute tasks that started later
    than HEFT says, and whether the run ended later than HEFT's makespan (graph outputs
    reaching the host late). ``(0, False)``: HEFT's schedule is valid under the scheduler's
    resource model and was kept as it is."""
    tl = sched.timeline
    tol = 1e-9 * max(out.makespan_s, sched.makespan_s, 1e-12)
    late = 0
    compute = TaskKind.COMPUTE
    for v, kind, s in zip(tl.vertex, tl.kind, tl.start, strict=True):
        if v is not None and kind is compute and s > out.start_s[vertex_index[v]] + tol:
            late += 1
    return late, sched.makespan_s > out.makespan_s + tol
