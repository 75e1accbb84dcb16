"""Exact dynamic programming for restricted graphs: series-parallel DAGs and chains.

**Latency (series-parallel graphs, chains included).** The model is the scheduler's
without resource conflicts: each vertex takes its candidate's compute time, each edge the
conversion + transfer time of the scheduler's policy for the two ends' candidates, graph
inputs leave the host at 0 and graph outputs travel back to it; lanes are unbounded and
nothing contends. The makespan is then the longest path, and for a two-terminal
series-parallel graph (a virtual source ``S`` on the host feeds every vertex that reads a
graph input or has no predecessor; every vertex that delivers a graph output or has no
successor feeds a virtual sink ``T``) its minimum over all placements is computed exactly
by reducing the graph: an edge object between terminals ``u`` and ``w`` carries a table
``F[a_u, a_w]`` = the least longest path from ``u``'s end to ``w``'s start; a series
reduction at ``m`` gives ``min over a_m of F1[a_u, a_m] + cost(m, a_m) + F2[a_m, a_w]``, a
parallel one ``max(F1, F2)`` (the two sides' inner vertices are disjoint, so minimizing
each side minimizes the maximum). The graph is series-parallel iff the reductions end in
the single edge ``S -> T``; otherwise ``dp`` refuses, naming a vertex where they got stuck.

The optimum of this model is a *lower bound* of the scheduler's best makespan over the
same candidates (removing lane and link conflicts and contention only shortens a run),
and on a chain whose only graph input and output are at its ends, on devices with one
lane and no shared controller, the model *is* the scheduler's and the DP plan is optimal.

**Throughput (chains).** Stage partitioning for pipelined runs: the chain is cut into
contiguous stages, each on its own device (no device hosts two stages); the period is the
busiest resource's occupancy per run — a stage's compute and conversions over its
device's lanes, each crossing's transfer on its link direction (each link direction
carries one crossing when devices differ). The DP runs over (vertex, candidate, devices
already closed) with Pareto sets of (busiest closed resource, open stage load). Shared
memory controllers are not modelled, and a conversion of a graph input or output on the
host counts as its own resource; the scheduler's period of the DP plan is the judge.

>>> from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
>>> from placewise.schedule.placement import Problem
>>> from placewise.schedule.testing import ToyCostModel, toy_machine
>>> from placewise.search.space import Model, SearchSpace
>>> from placewise.units import DType
>>> x = Tensor("x", (10,), DType.FP32, role=Role.INPUT)
>>> h = Tensor("h", (10,), DType.FP32)
>>> y = Tensor("y", (10,), DType.FP32, role=Role.OUTPUT)
>>> g = Graph.build("g", [x, h, y], [Op("a", OpKind.RELU, ("x",), ("h",)),
...                                  Op("b", OpKind.RELU, ("h",), ("y",))])
>>> m = toy_machine()
>>> cm = ToyCostModel(m, {("a", "cpu"): 1.0, ("a", "gpu"): 3.0, ("b", "cpu"): 3.0,
...                       ("b", "gpu"): 1.0})
>>> out = dp_search(Model(SearchSpace(Problem(g, None, m, cm), [DType.FP32])))
>>> out.kind, [str(a) for a in out.placement.values()], round(out.value_s, 6)
('chain', ['cpu/fp32', 'gpu/fp32'], 2.000002)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from placewise.errors import UnsupportedError
from placewise.schedule.placement import Placement
from placewise.search.space import Model, SearchStopped

__all__ = ["DpOutcome", "dp_search", "graph_shape", "is_chain"]

_FRONT_MAX = 64  # Pareto entries kept per throughput DP state


@dataclass(frozen=True, slots=True)
class DpOutcome:
    """What the DP found: the placement, its value in the DP's model (the makespan of the
    contention-free model, or the stage-partition period), whether that value is proven
    optimal for the model (``exact``), the graph shape (``chain`` / ``series-parallel``),
    the number of DP states, and notes."""

    placement: Placement
    choice: tuple[int, ...]
    value_s: float
    exact: bool
    kind: str
    states: int
    notes: tuple[str, ...] = ()


def is_chain(model: Model) -> bool:
    """Whether the region DAG is one path ``v0 -> v1 -> ... -> v(n-1)``."""
    p = model.problem
    n = len(p.vertices)
    return all(p.preds[i] == ((i - 1,) if i else ()) and
               p.succs[i] == ((i + 1,) if i + 1 < n else ()) for i in range(n))


def graph_shape(model: Model) -> str:
    """``chain``, ``series-parallel`` or ``other`` (see ``dp_search``); structural only
    (no costs are computed)."""
    if is_chain(model):
        return "chain"
    return "series-parallel" if _stuck_vertex(model) is None else "other"


def _stuck_vertex(model: Model) -> int | None:
    """Run the series and parallel reductions on the two-terminal graph without tables;
    ``None`` if it reduces to ``S -> T``, else a vertex where it got stuck."""
    p = model.problem
    ed = model.edges
    n = len(p.vertices)
    s_, t_ = n, n + 1
    out: list[set[int]] = [set() for _ in range(n + 2)]
    inn: list[set[int]] = [set() for _ in range(n + 2)]
    for u in range(n):
        for v in p.succs[u]:
            out[u].add(v)
            inn[v].add(u)
        if ed.reads[u] or not p.preds[u]:
            out[s_].add(u)
            inn[u].add(s_)
        if ed.delivers[u] or not p.succs[u]:
            out[u].add(t_)
            inn[t_].add(u)
    queue = [i for i in range(n) if len(inn[i]) == 1 and len(out[i]) == 1]
    done = [False] * n
    while queue:
        m = queue.pop()
        if done[m] or len(inn[m]) != 1 or len(out[m]) != 1:
            continue
        (u,) = inn[m]
        (w,) = out[m]
        done[m] = True
        out[u].discard(m)
        inn[w].discard(m)
        out[u].add(w)  # a parallel edge merges into the existing one
        inn[w].add(u)
        for x in (u, w):
            if x < n and not done[x] and len(inn[x]) == 1 and len(out[x]) == 1:
                queue.append(x)
    return next((i for i in range(n) if not done[i]), None)


Stop = Callable[[], bool]


def _due(stop: Stop | None, step: int) -> bool:
    """Whether the deadline check ``stop`` (called every 256 steps) says to stop."""
    return stop is not None and not step % 256 and stop()


def dp_search(model: Model, *, throughput: bool = False, stop: Stop | None = None
              ) -> DpOutcome:
    """Run the DP for the latency (series-parallel graphs) or throughput (chains)
    objective; raises ``UnsupportedError`` naming the reason when the graph is not one it
    handles (see the module docstring). ``stop`` (a deadline check, see
    ``Budget.stop_at``) is called every 256 steps; when it returns true the DP is abandoned
    with ``SearchStopped``."""
    if throughput:
        if not is_chain(model):
            p = model.problem
            bad = next(v for v in p.vertices
                       if len(p.preds[v.index]) > 1 or len(p.succs[v.index]) > 1
                       or (v.index and p.preds[v.index] != (v.index - 1,)))
            raise UnsupportedError(
                f"dp: stage partitioning for throughput needs a chain: vertex {bad.name!r} "
                f"has {len(p.preds[bad.index])} predecessors and {len(p.succs[bad.index])} "
                f"successors")
        return _chain_throughput(model, stop)
    sp = _SP(model, stop)
    sp.reduce()
    choice, value, states = sp.solve()
    kind = "chain" if is_chain(model) else "series-parallel"
    return DpOutcome(model.space.placement(choice), tuple(choice), value, True, kind, states)


# ---- series-parallel reduction (latency) ---------------------------------------------------------
class _SP:
    """The two-terminal reduction with DP tables (see the module docstring)."""

    def __init__(self, model: Model, stop: Stop | None = None) -> None:
        self.model = model
        self.stop = stop
        sp = model.space
        n = sp.n
        self.n = n
        self.S, self.T = n, n + 1
        self.cost = [np.asarray(c, dtype=np.float64) for c in sp.cost_s]
        self.cost.extend([np.zeros(1), np.zeros(1)])
        # edge objects: id -> table; how each was made: series (e1, m, e2, argmin) or
        # parallel (e1, e2); raw edges are neither
        self.table: dict[int, np.ndarray] = {}
        self.series: dict[int, tuple[int, int, int, np.ndarray]] = {}
        self.parallel: dict[int, tuple[int, int]] = {}
        self.ends: dict[int, tuple[int, int]] = {}
        self.out: list[dict[int, int]] = [{} for _ in range(n + 2)]
        self.inn: list[dict[int, int]] = [{} for _ in range(n + 2)]
        self.next_id = 0
        self.states = 0

    def _new(self, u: int, w: int, table: np.ndarray,
             series: tuple[int, int, int, np.ndarray] | None = None) -> None:
        old = self.out[u].get(w)
        eid = self.next_id
        self.next_id += 1
        self.table[eid] = table
        if series is not None:
            self.series[eid] = series
        self.ends[eid] = (u, w)
        if old is not None:
            merged = np.maximum(self.table[old], table)
            pid = self.next_id
            self.next_id += 1
            self.table[pid] = merged
            self.parallel[pid] = (old, eid)
            self.ends[pid] = (u, w)
            self.out[u][w] = pid
            self.inn[w][u] = pid
            self.states += merged.size
            return
        self.out[u][w] = eid
        self.inn[w][u] = eid

    def _build(self) -> None:
        m = self.model
        sp = m.space
        ed = m.edges
        p = m.problem
        n = self.n
        for e in range(len(ed.src)):
            if _due(self.stop, e):
                raise SearchStopped(f"dp stopped costing the crossings ({e} of "
                                    f"{len(ed.src)} edges)")
            u, v = ed.src[e], ed.dst[e]
            au, av = len(sp.cands[u]), len(sp.cands[v])
            tab = np.empty((au, av))
            for ku in range(au):
                for kv in range(av):
                    tab[ku, kv] = m.delay(e, ku, kv)
            self._new(u, v, tab)
        for i in range(n):
            a = len(sp.cands[i])
            if ed.reads[i] or not p.preds[i]:
                self._new(self.S, i, np.asarray([[m.release(i, k) for k in range(a)]]))
            if ed.delivers[i] or not p.succs[i]:
                self._new(i, self.T, np.asarray([[m.tail(i, k)] for k in range(a)]))

    def reduce(self) -> None:
        self._build()
        out, inn = self.out, self.inn
        queue = [i for i in range(self.n) if len(inn[i]) == 1 and len(out[i]) == 1]
        done = [False] * self.n
        steps = 0
        while queue:
            steps += 1
            if _due(self.stop, steps):
                raise SearchStopped(f"dp stopped reducing the graph ({steps} reductions)")
            mid = queue.pop()
            if done[mid] or len(inn[mid]) != 1 or len(out[mid]) != 1:
                continue
            (u, e1), = inn[mid].items()
            (w, e2), = out[mid].items()
            if u == w:  # pragma: no cover - impossible in a DAG
                continue
            done[mid] = True
            del out[u][mid]
            del inn[w][mid]
            inn[mid].clear()
            out[mid].clear()
            f1, f2 = self.table[e1], self.table[e2]
            tot = f1[:, :, None] + self.cost[mid][None, :, None] + f2[None, :, :]
            arg = np.argmin(tot, axis=1)
            best = np.take_along_axis(tot, arg[:, None, :], axis=1)[:, 0, :]
            self.states += tot.size
            self._new(u, w, best, (e1, mid, e2, arg))
            for x in (u, w):
                if x < self.n and not done[x] and len(inn[x]) == 1 and len(out[x]) == 1:
                    queue.append(x)
        left = [i for i in range(self.n) if not done[i]]
        if left or set(out[self.S]) != {self.T}:
            names = self.model.problem.vertices
            stuck = left[0] if left else None
            if stuck is None:  # pragma: no cover - S/T always keep an edge
                raise UnsupportedError("dp: graph is not a chain/series-parallel")
            preds = [names[x].name if x < self.n else "the graph inputs" for x in inn[stuck]]
            succs = [names[x].name if x < self.n else "the graph outputs"
                     for x in out[stuck]]
            raise UnsupportedError(
                f"dp: graph is not a chain/series-parallel: vertex {names[stuck].name!r} has "
                f"{len(preds)} predecessors ({', '.join(preds[:3])}) and {len(succs)} "
                f"successors ({', '.join(succs[:3])}) left after every series and parallel "
                f"reduction")

    def solve(self) -> tuple[list[int], float, int]:
        root = self.out[self.S][self.T]
        value = float(self.table[root][0, 0])
        choice = [0] * self.n
        stack: list[tuple[int, int, int]] = [(root, 0, 0)]
        while stack:
            eid, au, aw = stack.pop()
            ser = self.series.get(eid)
            if ser is not None:
                e1, mid, e2, arg = ser
                am = int(arg[au, aw])
                choice[mid] = am
                stack.append((e1, au, am))
                stack.append((e2, am, aw))
                continue
            par = self.parallel.get(eid)
            if par is not None:
                stack.append((par[0], au, aw))
                stack.append((par[1], au, aw))
        return choice, value, self.states


# ---- chain stage partitioning (throughput) -------------------------------------------------------
def _insert(front: list[tuple[float, float, int]], item: tuple[float, float, int]) -> bool:
    """Add ``(closed, open, back)`` to a Pareto front (minimize both); False if dominated."""
    c, o, _ = item
    for fc, fo, _ in front:
        if fc <= c and fo <= o:
            return False
    front[:] = [f for f in front if not (c <= f[0] and o <= f[1])]
    front.append(item)
    return True


_Front = list[tuple[float, float, int]]  # Pareto list of (closed max, open load, back pointer)


def _chain_throughput(model: Model, stop: Stop | None = None) -> DpOutcome:
    sp = model.space
    p = model.problem
    n = sp.n
    host = p.device_index[p.host]
    lanes = sp.lanes
    notes: list[str] = []
    capped = False
    # states[i]: (k, closed mask) -> Pareto list of (closed max, open load, back pointer)
    entries: list[tuple[int, int, int]] = []
    layer: dict[tuple[int, int], _Front] = {}
    states = 0
    for k in range(len(sp.cands[0])):
        d = sp.cand_dev[0][k]
        on_d, on_host, worst = _split(model, model.io_parts(0, k), d, host if host != d else -1)
        closed = max(worst, on_host / lanes[host] if host != d else 0.0)
        entries.append((-1, k, 0))
        layer[(k, 0)] = [(closed, on_d, len(entries) - 1)]
    for i in range(1, n):
        if _due(stop, i):
            raise SearchStopped(f"dp stopped partitioning the chain ({i} of {n} vertices)")
        nxt, added = _next_layer(model, layer, i, entries)
        states += added
        for key, lst in nxt.items():
            if len(lst) > _FRONT_MAX:
                nl = lanes[sp.cand_dev[i][key[0]]]

                def rank(it: tuple[float, float, int], nl: int = nl) -> tuple[float, float]:
                    return (max(it[0], it[1] / nl), it[0])

                lst.sort(key=rank)
                del lst[_FRONT_MAX:]
                capped = True
        layer = nxt
    best: tuple[float, int] | None = None
    for (k, _mask), front in layer.items():
        d = sp.cand_dev[n - 1][k]
        for closed, opened, eid in front:
            v = max(closed, opened / lanes[d])
            if best is None or (v, eid) < best:
                best = (v, eid)
    assert best is not None
    choice = [0] * n
    eid = best[1]
    i = n - 1
    while eid >= 0:
        back, k, _ = entries[eid]
        choice[i] = k
        i -= 1
        eid = back
    if capped:
        notes.append(f"dp: Pareto sets were capped at {_FRONT_MAX} entries per state: the "
                     f"stage partition is not proven optimal")
    return DpOutcome(sp.placement(choice), tuple(choice), best[0], not capped, "chain",
                     states, tuple(notes))


def _split(model: Model, parts: list[tuple[int, float]] | tuple[tuple[int, float], ...],
           dev: int, other: int) -> tuple[float, float, float]:
    """(load on ``dev``, load on ``other`` device, worst other resource)."""
    comm = model.comm
    ndev = len(model.space.devices)
    on_dev = on_other = worst = 0.0
    for r, s in parts:
        if r == dev:
            on_dev += s
        elif r == other:
            on_other += s
        elif r >= ndev and not comm.res_exclusive[r]:
            continue  # shared controllers are not modelled
        else:
            worst = max(worst, s / comm.res_lanes[r])
    return on_dev, on_other, worst


def _next_layer(model: Model, layer: dict[tuple[int, int], _Front], i: int,
                entries: list[tuple[int, int, int]]
                ) -> tuple[dict[tuple[int, int], _Front], int]:
    """The states of vertex ``i`` from those of ``i - 1``: each candidate either stays in
    the open stage (same device) or closes it (a device not used before); the states made."""
    sp, ed, p = model.space, model.edges, model.problem
    host = p.device_index[p.host]
    lanes = sp.lanes
    states = 0
    nxt: dict[tuple[int, int], _Front] = {}
    in_e = ed.e_in[i]
    for (kp, mask), front in layer.items():
        dp_ = sp.cand_dev[i - 1][kp]
        for k in range(len(sp.cands[i])):
            d = sp.cand_dev[i][k]
            if d != dp_ and (mask >> d) & 1:
                continue
            edge_parts: list[tuple[int, float]] = []
            for e in in_e:
                edge_parts.extend(model.delay_parts(e, kp, k))
            io_d, io_host, io_worst = _split(model, model.io_parts(i, k), d,
                                             host if host != d else -1)
            host_extra = io_host / lanes[host] if host != d else 0.0
            if d == dp_:
                on_d, _, worst = _split(model, edge_parts, d, -1)
                add_open = on_d + io_d
                add_closed = max(worst, io_worst, host_extra)
                key = (k, mask)
                for closed, opened, back in front:
                    states += 1
                    item = (max(closed, add_closed), opened + add_open, -1)
                    lst = nxt.setdefault(key, [])
                    if _insert(lst, item):
                        entries.append((back, k, mask))
                        lst[-1] = (item[0], item[1], len(entries) - 1)
            else:
                on_prev, on_d, worst = _split(model, edge_parts, dp_, d)
                key = (k, mask | (1 << dp_))
                for closed, opened, back in front:
                    states += 1
                    c = max(closed, worst, io_worst, host_extra,
                            (opened + on_prev) / lanes[dp_])
                    item = (c, on_d + io_d, -1)
                    lst = nxt.setdefault(key, [])
                    if _insert(lst, item):
                        entries.append((back, k, key[1]))
                        lst[-1] = (item[0], item[1], len(entries) - 1)
    return nxt, states
