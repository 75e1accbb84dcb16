"""HEFT (Heterogeneous Earliest Finish Time) with insertion, over devices and precisions.

Topcuoglu, Hariri and Wu (2002): rank every vertex by its *upward rank* — its mean cost
over its candidates plus the longest chain of (mean crossing cost + rank) after it — then,
highest rank first among the vertices whose predecessors are placed, give each vertex the
candidate (device, precision) where it *finishes earliest*: its inputs arrive (producer's
finish + the crossing's conversion and transfer time under the scheduler's policy, graph
inputs from the host at 0), then the earliest gap long enough on one of the device's lanes
(insertion policy). A vertex that delivers graph outputs counts their trip to the host.
Ties go to the candidate listed first.

The mean crossing cost of an edge (for ranks only) is ``(D - 1) / D`` times the mean, over
the other devices, of a linear fit (latency + bytes / bandwidth) of the cost model's
transfer times from the producer's fastest device. Finish times use the exact crossing
times; a candidate whose finish, with half the fitted crossing times and a free lane,
already loses is not costed exactly (this saves most cost-model queries on large graphs).
Lanes keep at most 64 gaps each for insertion. Links are not reserved (transfers run
whenever data is ready) and conversions are delays: HEFT *estimates*, the scheduler scores
its result. ``stop`` (a deadline check, see ``Budget.stop_at``) is called every 256
vertices; when it returns true HEFT is abandoned with ``SearchStopped``.

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
>>> pl = heft_placement(Model(SearchSpace(Problem(g, None, m, cm), [DType.FP32])))
>>> sorted(a.device for a in pl.values())
['cpu', 'gpu']
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Callable

from placewise.cost.model import Representation
from placewise.errors import UnsupportedError
from placewise.graph.ir import Tensor
from placewise.schedule.placement import Placement
from placewise.search.space import Model, SearchStopped
from placewise.units import DType

__all__ = ["heft_choice", "heft_placement", "upward_ranks"]


def _pair_fit(model: Model) -> dict[tuple[str, str], tuple[float, float]]:
    """Per ordered device pair: (seconds, seconds per byte) of a transfer, fitted to the
    cost model's answers for a 1 MiB and a 64 MiB tensor (for ranks only)."""
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


def upward_ranks(model: Model, fit: dict[tuple[str, str], tuple[float, float]] | None = None
                 ) -> list[float]:
    """HEFT's upward rank of every vertex (see the module docstring). The mean crossing
    cost of an edge is ``(D - 1) / D`` times the mean, over the other devices, of a linear
    fit of the cost model's transfer time from the producer's fastest device."""
    sp = model.space
    ed = model.edges
    p = model.problem
    n = sp.n
    fit = fit if fit is not None else _pair_fit(model)
    devs = sp.devices
    nd = len(devs)
    share = (nd - 1) / nd if nd > 1 else 0.0
    mean_fit: dict[str, tuple[float, float]] = {}
    for a in devs:
        pairs = [fit[(a, b)] for b in devs if b != a and (a, b) in fit]
        mean_fit[a] = ((sum(x for x, _ in pairs) / len(pairs), sum(y for _, y in pairs)
                        / len(pairs)) if pairs else (0.0, 0.0))
    rank = [0.0] * n
    for i in range(n - 1, -1, -1):
        costs = sp.cost_s[i]
        k_count = len(costs)
        mean = sum(costs) / k_count
        base, per_byte = mean_fit[sp.cands[i][sp.best_k[i]].device]
        best = 0.0
        for t in ed.delivers[i]:
            best = max(best, share * (base + per_byte * p.copy_bytes(t, p.natural_rid[t])))
        for e in ed.e_out[i]:
            v = ed.dst[e]
            t = ed.tensor[e]
            c = share * (base + per_byte * p.copy_bytes(t, p.natural_rid[t]))
            if c + rank[v] > best:
                best = c + rank[v]
        rank[i] = mean + best
    return rank


_SCAN = 64  # gaps examined per lane before a task is appended after the lane's last one


def _slot(starts: list[float], ends: list[float], ready: float, dur: float
          ) -> tuple[float, int]:
    """Earliest start >= ``ready`` of a ``dur``-long task on a lane whose busy intervals
    are ``starts``/``ends`` (sorted, disjoint), and the index to insert it at. At most
    ``_SCAN`` gaps are examined; past them the task goes after the lane's last interval."""
    i = bisect_right(ends, ready)
    t = ready
    n = len(starts)
    stop = min(n, i + _SCAN)
    while i < stop:
        if starts[i] - t >= dur:
            return t, i
        if ends[i] > t:
            t = ends[i]
        i += 1
    if i < n:
        return max(t, ends[-1]), n
    return t, n


def heft_choice(model: Model, *, throughput: bool = False,
                stop: Callable[[], bool] | None = None) -> list[int]:
    """Candidate indexes HEFT picks (see the module docstring)."""
    sp = model.space
    ed = model.edges
    comm = model.comm
    n = sp.n
    fit = _pair_fit(model)
    rank = upward_ranks(model, fit)
    # a conservative estimate of each edge's crossing time between two devices (half the
    # fitted time at the tensor's smallest representation): a candidate whose finish is
    # already lost with these delays is not costed exactly
    p = model.problem
    min_bits = min(dt.bits for dt in sp.dtypes)
    small = []
    for e in range(len(ed.src)):
        tname = ed.tensor[e]
        nat = p.reps[p.natural_rid[tname]]
        bits = min(min_bits, nat.dtype.bits) if nat.dtype.is_float else nat.dtype.bits
        small.append((p.numel[tname] * bits + 7) // 8)
    lanes: list[list[tuple[list[float], list[float]]]] = [
        [([], []) for _ in range(max(1, nl))] for nl in sp.lanes]
    choice = [-1] * n
    fin = [0.0] * n
    load = [0.0] * comm.n_resources
    res_lanes = comm.res_lanes
    peak = 0.0
    indeg = [len(model.problem.preds[i]) for i in range(n)]
    ready_q = [(-rank[i], i) for i in range(n) if indeg[i] == 0]
    heapq.heapify(ready_q)
    succs = model.problem.succs
    placed = 0
    while ready_q:
        if stop is not None and not placed % 256 and stop():
            raise SearchStopped(f"heft stopped after placing {placed} of {n} vertices")
        placed += 1
        _, i = heapq.heappop(ready_q)
        costs = sp.cost_s[i]
        best: tuple[float, float, int] | None = None
        best_slot: tuple[int, float, int] = (0, 0.0, 0)
        best_parts: list[tuple[int, float]] = []
        floor = 0.0
        for u in model.problem.preds[i]:
            if fin[u] > floor:
                floor = fin[u]
        cand_dev = sp.cand_dev[i]
        prev_dev = -1
        est = floor
        for k in range(len(costs)):
            if not throughput and best is not None:
                if cand_dev[k] != prev_dev:
                    prev_dev = cand_dev[k]
                    name = sp.devices[prev_dev]
                    est = floor
                    for e in ed.e_in[i]:
                        u = ed.src[e]
                        du = sp.cands[u][choice[u]].device
                        if du != name:
                            base, per_byte = fit.get((du, name), (0.0, 0.0))
                            t = fin[u] + 0.5 * (base + per_byte * small[e])
                            if t > est:
                                est = t
                if (est + costs[k], 0.0, k) >= best:
                    continue  # it would not win even with these optimistic crossings
            ready = max(floor, model.release(i, k))
            for e in ed.e_in[i]:
                u = ed.src[e]
                t = fin[u] + model.delay(e, choice[u], k)
                if t > ready:
                    ready = t
            dur = costs[k]
            di = sp.cand_dev[i][k]
            start, lane, pos = float("inf"), 0, 0
            for ln, (st, en) in enumerate(lanes[di]):
                s, at = _slot(st, en, ready, dur)
                if s < start:
                    start, lane, pos = s, ln, at
            finish = start + dur + model.tail(i, k)
            if throughput:
                parts = model.io_parts(i, k)
                for e in ed.e_in[i]:
                    parts.extend(model.delay_parts(e, choice[ed.src[e]], k))
                acc: dict[int, float] = {}
                for r, s in parts:
                    acc[r] = acc.get(r, 0.0) + s
                new_peak = peak
                for r, s in acc.items():
                    v = (load[r] + s) / res_lanes[r]
                    if v > new_peak:
                        new_peak = v
                key = (new_peak, finish, k)
            else:
                parts = []
                key = (finish, 0.0, k)
            if best is None or key < best:
                best = key
                best_slot = (lane, start, pos)
                best_parts = parts
        assert best is not None
        k = best[2]
        lane, start, pos = best_slot
        di = sp.cand_dev[i][k]
        st, en = lanes[di][lane]
        st.insert(pos, start)
        en.insert(pos, start + costs[k])
        fin[i] = start + costs[k]
        choice[i] = k
        if throughput:
            for r, s in best_parts:
                load[r] += s
                v = load[r] / res_lanes[r]
                if v > peak:
                    peak = v
        for s in succs[i]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(ready_q, (-rank[s], s))
    return choice


def heft_placement(model: Model, *, throughput: bool = False) -> Placement:
    """The placement HEFT picks (see the module docstring)."""
    return model.space.placement(heft_choice(model, throughput=throughput))
