"""Boundary local search: move vertices and regions across device boundaries, change
precisions, accept by the objective (simulated annealing with restarts, seeded).

**Moves** (drawn with a seeded ``random.Random``):

- *boundary*: pick a crossing edge (its ends on different devices) and move one end to the
  other end's device — its precision kept if the device offers it, else the other end's,
  else the fastest there;
- *region*: the same, but for a connected run of vertices on the moved end's device
  (breadth-first from it, up to a random size of 2..32);
- *precision*: give a vertex, or its run, another precision on its device;
- *random*: any vertex to any candidate (keeps the walk from getting stuck).

**Memory.** A move that would put more resident weights on a memory than it holds is
rejected without scoring (``WeightGuard``), while the current plan fits.

**Acceptance.** A move that improves is taken; a worse one with probability
``exp(-relative worsening / T)``, the temperature ``T`` falling geometrically from 2% to
0.01% over the budget. A placement that fits in memory always beats one that does not
(``placewise.search.result.rank_key``). After ``patience`` moves without a new best the
walk restarts from the next starting placement, then from the best found; after
``max_stale`` restarts in a row without a new best (and every start tried) it stops early.

**Evaluation.** Up to ``exact_max`` vertices every move is scored by the scheduler. Larger
graphs score moves *incrementally* with the contention-free estimate (``Estimator``: only
the moved vertices' loads and the finish times downstream of them are recomputed, stopping
where they do not change) and call the scheduler at checkpoints — every ``check_every``
moves, and at the end: a checkpoint that is worse than the best scored placement sends the
walk back to it. Only scheduler scores decide what is returned. Graphs with many vertices
draw their moves from crossing edges, so the work per move does not grow with the graph.

**Time.** The walk runs until the tracker's budget is exhausted (work or wall-clock
deadline); a scheduler evaluation (a move in the exact mode, a checkpoint, the final
score) starts only if its measured time still fits before the deadline, and so does an
estimated move (a move's update can run through the whole graph downstream of it: the
slowest so far is the estimate); else the walk ends with the best placement scored so far.

>>> from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
>>> from placewise.schedule import Objective
>>> from placewise.schedule.placement import Problem
>>> from placewise.schedule.testing import ToyCostModel, toy_machine
>>> from placewise.search.result import Tracker
>>> from placewise.search.space import Budget, Model, SearchSpace
>>> from placewise.units import DType
>>> x = Tensor("x", (10,), DType.FP32, role=Role.INPUT)
>>> h = Tensor("h", (10,), DType.FP32)
>>> y = Tensor("y", (10,), DType.FP32, role=Role.OUTPUT)
>>> g = Graph.build("g", [x, h, y], [Op("a", OpKind.RELU, ("x",), ("h",)),
...                                  Op("b", OpKind.RELU, ("h",), ("y",))])
>>> m = toy_machine()
>>> cm = ToyCostModel(m, {("a", "cpu"): 1.0, ("a", "gpu"): 3.0, ("b", "cpu"): 3.0,
...                       ("b", "gpu"): 1.0})
>>> prob = Problem(g, None, m, cm)
>>> space = SearchSpace(prob, [DType.FP32])
>>> tr = Tracker(prob, Objective.LATENCY, Budget(0.5))
>>> out = local_search(Model(space), tr, [("single:cpu", [0, 0])], seed=1)
>>> [str(a) for a in space.placement(out.choice).values()]
['cpu/fp32', 'gpu/fp32']
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from placewise.schedule.evaluate import Objective
from placewise.search.result import RankKey, Tracker
from placewise.search.space import MOVE_BASE_S, MOVE_VERTEX_S, Model

__all__ = ["Estimator", "LocalOutcome", "WeightGuard", "local_search"]

EXACT_MAX = 300  # vertices up to which every move is scored by the scheduler


@dataclass(frozen=True, slots=True)
class LocalOutcome:
    """The best placement the walk scored (candidate indexes) and its rank key, with
    counts of moves proposed, accepted, scored by the scheduler, restarts, and moves
    rejected because the weights they would put on a memory would not fit;
    ``converged``: it stopped before the budget because ``max_stale`` restarts in a row
    found nothing better."""

    choice: tuple[int, ...]
    key: RankKey
    proposed: int
    accepted: int
    scored: int
    restarts: int
    converged: bool = False
    rejected_memory: int = 0


class Estimator:
    """Incremental contention-free estimate of a placement (see the module docstring).

    ``value()`` is, for latency, the larger of the longest path (``Model.makespan_s``) and
    the busiest exclusive resource; for throughput, the busiest resource (``Model.loads``).
    ``apply({vertex: candidate})`` returns ``(value, undo)``; ``revert(undo)`` restores.
    """

    def __init__(self, model: Model, choice: Sequence[int], *, throughput: bool) -> None:
        self.m = model
        self.throughput = throughput
        self.touched = 0
        self.reset(choice)

    def reset(self, choice: Sequence[int]) -> None:
        m = self.m
        sp = m.space
        ed = m.edges
        self.choice = list(choice)
        n = sp.n
        self.fin = [0.0] * n
        self.endt = [0.0] * n
        for i in range(n):
            self._finish(i)
        lanes = m.comm.res_lanes
        load = [0.0] * m.comm.n_resources
        for i in range(n):
            for r, s in m.io_parts(i, self.choice[i]):
                load[r] += s
        for e in range(len(ed.src)):
            for r, s in m.delay_parts(e, self.choice[ed.src[e]], self.choice[ed.dst[e]]):
                load[r] += s
        self.load = load
        self.lanes = lanes
        self.touched += n + len(ed.src)

    def _finish(self, i: int) -> bool:
        m = self.m
        ed = m.edges
        k = self.choice[i]
        s = m.release(i, k)
        fin = self.fin
        ch = self.choice
        for e in ed.e_in[i]:
            u = ed.src[e]
            t = fin[u] + m.delay(e, ch[u], k)
            if t > s:
                s = t
        f = s + m.space.cost_s[i][k]
        changed = f != fin[i]
        fin[i] = f
        self.endt[i] = f + m.tail(i, k)
        return changed

    def value(self) -> float:
        comm = self.m.comm
        if self.throughput:
            return max(x / self.lanes[r] for r, x in enumerate(self.load))
        worst = 0.0
        for r, x in enumerate(self.load):
            if comm.res_exclusive[r]:
                v = x / self.lanes[r]
                if v > worst:
                    worst = v
        return max(worst, max(self.endt, default=0.0))

    def apply(self, moves: dict[int, int]) -> tuple[float, list[tuple[int, ...]]]:
        m = self.m
        ed = m.edges
        ch = self.choice
        load = self.load
        undo: list[tuple[int, ...]] = []
        edges: dict[int, None] = {}
        for v in moves:
            for e in ed.e_in[v]:
                edges[e] = None
            for e in ed.e_out[v]:
                edges[e] = None
        for v in moves:
            for r, s in m.io_parts(v, ch[v]):
                load[r] -= s
        for e in edges:
            for r, s in m.delay_parts(e, ch[ed.src[e]], ch[ed.dst[e]]):
                load[r] -= s
        for v, k in moves.items():
            undo.append((0, v, ch[v]))
            ch[v] = k
        for v in moves:
            for r, s in m.io_parts(v, ch[v]):
                load[r] += s
        for e in edges:
            for r, s in m.delay_parts(e, ch[ed.src[e]], ch[ed.dst[e]]):
                load[r] += s
        undo.append((1, *moves.keys()))
        # finish times downstream, in topological (index) order, cut where unchanged
        succs = m.problem.succs
        heap = list(moves)
        heapq.heapify(heap)
        seen = set(heap)
        fin, endt = self.fin, self.endt
        touched = 0
        e_in = ed.e_in
        while heap:
            i = heapq.heappop(heap)
            touched += 1 + len(e_in[i])  # the vertex and the edges its finish reads
            old_f, old_e = fin[i], endt[i]
            changed = self._finish(i)
            if changed or endt[i] != old_e:
                undo.append((2, i, old_f, old_e))  # type: ignore[arg-type]
            if changed or i in moves:
                for s in succs[i]:
                    if s not in seen:
                        seen.add(s)
                        heapq.heappush(heap, s)
        self.touched += touched + len(edges)
        return self.value(), undo

    def revert(self, undo: list[tuple[int, ...]]) -> None:
        m = self.m
        ed = m.edges
        ch = self.choice
        load = self.load
        moved: tuple[int, ...] = ()
        for item in undo:
            if item[0] == 1:
                moved = item[1:]
        edges: dict[int, None] = {}
        for v in moved:
            for e in ed.e_in[v]:
                edges[e] = None
            for e in ed.e_out[v]:
                edges[e] = None
        for v in moved:
            for r, s in m.io_parts(v, ch[v]):
                load[r] -= s
        for e in edges:
            for r, s in m.delay_parts(e, ch[ed.src[e]], ch[ed.dst[e]]):
                load[r] -= s
        for item in undo:
            if item[0] == 0:
                ch[item[1]] = item[2]
        for v in moved:
            for r, s in m.io_parts(v, ch[v]):
                load[r] += s
        for e in edges:
            for r, s in m.delay_parts(e, ch[ed.src[e]], ch[ed.dst[e]]):
                load[r] += s
        for item in reversed(undo):
            if item[0] == 2:
                self.fin[item[1]] = item[2]
                self.endt[item[1]] = item[3]


class WeightGuard:
    """Resident weight bytes per memory pool for a placement, updated move by move: a move
    that puts more weights in a pool than it holds cannot fit (weights stay resident for
    the whole run), so it is rejected without scoring. Pools are as the scheduler's memory
    report checks them: each device's main tier, or tiers sharing a resource and a capacity.
    """

    def __init__(self, model: Model, choice: Sequence[int]) -> None:
        sp = model.space
        p = model.problem
        g = p.graph
        self.sp = sp
        pool_of: dict[int, int] = {}
        self.cap: list[int] = []
        groups: dict[tuple[str, int], int] = {}
        for di, d in enumerate(p.machine.devices):
            tier = d.main_memory
            if tier.shared_with is not None:
                key = (tier.shared_with, tier.capacity_bytes)
                if key not in groups:
                    groups[key] = len(self.cap)
                    self.cap.append(tier.capacity_bytes)
                pool_of[di] = groups[key]
            else:
                pool_of[di] = len(self.cap)
                self.cap.append(tier.capacity_bytes)
        self.pool_of = pool_of
        # per vertex and candidate: ((param, device, held bits) key, bytes) of its weights
        self.items: list[list[tuple[tuple[tuple[str, int, int], int], ...]]] = []
        for v in p.vertices:
            per: list[tuple[tuple[tuple[str, int, int], int], ...]] = []
            for k, a in enumerate(sp.cands[v.index]):
                di = sp.cand_dev[v.index][k]
                its = []
                for t in v.params:
                    tensor = g.tensor(t)
                    dt = tensor.dtype if not tensor.dtype.is_float else a.dtype
                    its.append(((t, di, dt.bits), dt.nbytes(tensor.numel)))
                per.append(tuple(its))
            self.items.append(per)
        self.active = any(self.items[i][k] for i in range(sp.n) for k in range(len(sp.cands[i])))
        self.reset(choice)

    def reset(self, choice: Sequence[int]) -> None:
        self.refs: dict[tuple[str, int, int], int] = {}
        self.used = [0] * len(self.cap)
        for i, k in enumerate(choice):
            self._add(i, k, +1)

    def _add(self, v: int, k: int, sign: int) -> None:
        for key, nbytes in self.items[v][k]:
            n = self.refs.get(key, 0)
            if sign > 0:
                if n == 0:
                    self.used[self.pool_of[key[1]]] += nbytes
                self.refs[key] = n + 1
            else:
                if n == 1:
                    self.used[self.pool_of[key[1]]] -= nbytes
                    del self.refs[key]
                else:
                    self.refs[key] = n - 1

    def apply(self, choice: Sequence[int], moves: dict[int, int]) -> bool:
        """Apply ``moves`` to the placement ``choice`` (as it is before them); whether the
        weights then fit every pool."""
        if not self.active:
            return True
        for v, k in moves.items():
            self._add(v, choice[v], -1)
            self._add(v, k, +1)
        return all(u <= c for u, c in zip(self.used, self.cap, strict=True))

    def undo(self, choice: Sequence[int], moves: dict[int, int]) -> None:
        """Take back ``moves`` (applied by ``apply``) given the choice before them."""
        if not self.active:
            return
        for v, k in moves.items():
            self._add(v, k, -1)
            self._add(v, choice[v], +1)


class _Moves:
    """Draws moves (see the module docstring)."""

    def __init__(self, model: Model, rng: random.Random) -> None:
        self.m = model
        self.rng = rng
        sp = model.space
        self.multi = [len(c) > 1 for c in sp.cands]
        self.movable = [i for i in range(sp.n) if self.multi[i]]
        p = model.problem
        self.nbrs = [tuple(dict.fromkeys((*p.preds[i], *p.succs[i]))) for i in range(sp.n)]

    def _to_device(self, v: int, dev: int, like: int, choice: list[int]) -> int | None:
        """Candidate of ``v`` on device ``dev``: its precision kept, else ``like``'s
        candidate's precision, else the fastest there; None if it cannot run there."""
        sp = self.m.space
        cur = sp.cands[v][choice[v]].dtype
        want = sp.cands[like][choice[like]].dtype if like >= 0 else cur
        best = None
        for k, d in enumerate(sp.cand_dev[v]):
            if d != dev:
                continue
            dt = sp.cands[v][k].dtype
            rank = (0 if dt is cur else 1 if dt is want else 2, sp.cost_s[v][k], k)
            if best is None or rank < best:
                best = rank
        return None if best is None else best[2]

    def _run(self, v: int, choice: list[int], size: int) -> list[int]:
        sp = self.m.space
        dev = sp.cand_dev[v][choice[v]]
        out = [v]
        seen = {v}
        q = 0
        while q < len(out) and len(out) < size:
            x = out[q]
            q += 1
            for y in self.nbrs[x]:
                if y not in seen and sp.cand_dev[y][choice[y]] == dev:
                    seen.add(y)
                    out.append(y)
                    if len(out) >= size:
                        break
        return out

    def _crossing(self, choice: list[int]) -> int | None:
        ed = self.m.edges
        ne = len(ed.src)
        if ne == 0:
            return None
        sp = self.m.space
        for _ in range(24):
            e = self.rng.randrange(ne)
            u, v = ed.src[e], ed.dst[e]
            if sp.cand_dev[u][choice[u]] != sp.cand_dev[v][choice[v]]:
                return e
        return None

    def draw(self, choice: list[int]) -> tuple[str, dict[int, int]]:
        sp = self.m.space
        rng = self.rng
        r = rng.random()
        if not self.movable:
            return "none", {}
        if r < 0.65:
            e = self._crossing(choice)
            if e is not None:
                ed = self.m.edges
                a, b = ed.src[e], ed.dst[e]
                if rng.random() < 0.5:
                    a, b = b, a
                target = sp.cand_dev[b][choice[b]]
                group = [a] if r < 0.4 else self._run(a, choice, rng.randint(2, 32))
                moves: dict[int, int] = {}
                for v in group:
                    k = self._to_device(v, target, b, choice)
                    if k is not None and k != choice[v]:
                        moves[v] = k
                return ("boundary" if len(group) == 1 else "region"), moves
        if r < 0.85:
            v = rng.choice(self.movable)
            dev = sp.cand_dev[v][choice[v]]
            others = [k for k, d in enumerate(sp.cand_dev[v]) if d == dev and k != choice[v]]
            if others:
                k = rng.choice(others)
                dt = sp.cands[v][k].dtype
                group = [v] if rng.random() < 0.5 else self._run(v, choice, rng.randint(2, 16))
                moves = {}
                for x in group:
                    for kk, d in enumerate(sp.cand_dev[x]):
                        if d == dev and sp.cands[x][kk].dtype is dt and kk != choice[x]:
                            moves[x] = kk
                            break
                return "precision", moves
        v = rng.choice(self.movable)
        k = rng.randrange(len(sp.cands[v]) - 1)
        if k >= choice[v]:
            k += 1
        return "random", {v: k}


def _worse(new: RankKey, cur: RankKey) -> float:
    """Relative worsening of ``new`` against ``cur`` (<= 0: not worse)."""
    if new[0] != cur[0]:
        return math.inf if new[0] > cur[0] else -1.0
    if cur[1] <= 0.0:
        return 0.0 if new[1] <= cur[1] else math.inf
    return (new[1] - cur[1]) / cur[1]


def local_search(model: Model, tracker: Tracker,
                 starts: Sequence[tuple[str, Sequence[int]] | tuple[str, Sequence[int], RankKey]],
                 *, seed: int = 0, exact_max: int = EXACT_MAX, check_every: int = 200,
                 patience: int | None = None, t_start: float = 0.02, t_end: float = 1e-4,
                 max_stale: int = 3) -> LocalOutcome:
    """Run the walk from ``starts`` ((label, candidate indexes[, rank key if already
    scored]), best first) until the tracker's budget is spent (see the module docstring)."""
    sp = model.space
    budget = tracker.budget
    rng = random.Random(seed)
    moves = _Moves(model, rng)
    throughput = tracker.objective is Objective.THROUGHPUT
    exact = sp.n <= exact_max
    if patience is None:
        patience = max(50, min(2000, 4 * sp.n)) if exact else max(400, 4 * check_every)
    # score the starts (the tracker memoizes the ones already scored)
    scored: list[tuple[RankKey, tuple[int, ...]]] = []
    for item in starts:
        ch = item[1]
        key = item[2] if len(item) > 2 else tracker.evaluate(sp.placement(ch))[0]
        scored.append((key, tuple(ch)))
    best_key, best = min(scored, key=lambda kv: kv[0])
    order = [ch for _, ch in scored]
    proposed = accepted = evals = restarts = 0
    cur = list(best)
    cur_key = best_key
    start_used = budget.spent_s()
    span = max(budget.left_s(), 1e-9)
    est = None if exact else Estimator(model, cur, throughput=throughput)
    guard = WeightGuard(model, cur)
    rejected_memory = 0
    est_val = est.value() if est else 0.0
    since_best = 0
    since_check = 0
    next_start = 1
    stale = 0
    improved = False
    converged = False
    last_touched = 0  # the estimator's construction is charged with the first move
    clock = budget.clock
    move_wall = 0.0  # the slowest estimated move so far (wall seconds; it cannot be cut)
    while not budget.exhausted():
        frac = min(1.0, (budget.spent_s() - start_used) / span)
        temp = t_start * (t_end / t_start) ** frac
        kind, mv = moves.draw(cur)
        if not mv:
            budget.charge(MOVE_VERTEX_S)
            if kind == "none":
                break
            continue
        if (exact or since_check + 1 >= check_every) and not tracker.can_evaluate(work=False):
            break  # the deadline: no time to score another placement
        if move_wall > 0.0 and not budget.fits(0.0, move_wall):
            break  # the deadline: no time for another move as slow as the slowest so far
        proposed += 1
        if not guard.apply(cur, mv) and cur_key[0] == 0:
            guard.undo(cur, mv)
            rejected_memory += 1
            since_best += 1
            budget.charge(MOVE_BASE_S)
        elif exact:
            old = {v: cur[v] for v in mv}
            for v, k in mv.items():
                cur[v] = k
            key, _ = tracker.evaluate(sp.placement(cur))
            evals += 1
            w = _worse(key, cur_key)
            if w <= 0.0 or (math.isfinite(w) and rng.random() < math.exp(-w / temp)):
                accepted += 1
                cur_key = key
                if key < best_key:
                    best_key, best = key, tuple(cur)
                    since_best = 0
                else:
                    since_best += 1
            else:
                after = list(cur)
                for v, k in old.items():
                    cur[v] = k
                guard.undo(cur, {v: after[v] for v in old})
                since_best += 1
        else:
            assert est is not None
            before = {v: est.choice[v] for v in mv}
            t_move = clock()
            val, undo = est.apply(mv)
            took = clock() - t_move
            if took > move_wall:
                move_wall = took
            tracker.estimates += 1
            budget.charge(MOVE_BASE_S + 1e-8 * sp.n
                          + MOVE_VERTEX_S * (est.touched - last_touched))
            last_touched = est.touched
            w = (val - est_val) / est_val if est_val > 0 else (0.0 if val <= est_val else 1.0)
            if w <= 0.0 or rng.random() < math.exp(-w / temp):
                accepted += 1
                est_val = val
                cur = est.choice
            else:
                est.revert(undo)
                guard.undo(est.choice, {v: k for v, k in mv.items() if before[v] != k})
            since_check += 1
            since_best += 1
            if since_check >= check_every:
                since_check = 0
                key, _ = tracker.evaluate(sp.placement(est.choice))
                evals += 1
                if key < best_key:
                    best_key, best = key, tuple(est.choice)
                    since_best = 0
                elif _worse(key, best_key) > 0.0:
                    est.reset(best)
                    guard.reset(best)
                    est_val = est.value()
                    budget.charge(MOVE_VERTEX_S * (est.touched - last_touched))
                    last_touched = est.touched
                cur = est.choice
        if since_best == 0:
            improved = True
        if since_best >= patience:
            restarts += 1
            since_best = 0
            stale = 0 if improved else stale + 1
            improved = False
            if stale >= max_stale and next_start >= len(order):
                converged = True
                break
            if exact and not tracker.can_evaluate(work=False):
                break
            src = order[next_start] if next_start < len(order) else best
            next_start += 1
            cur = list(src)
            guard.reset(cur)
            if exact:
                cur_key, _ = tracker.evaluate(sp.placement(cur))
            else:
                assert est is not None
                est.reset(cur)
                est_val = est.value()
                budget.charge(MOVE_VERTEX_S * (est.touched - last_touched))
                last_touched = est.touched
                cur = est.choice
    if est is not None and tuple(est.choice) != best and tracker.can_evaluate(work=False):
        key, _ = tracker.evaluate(sp.placement(est.choice))
        evals += 1
        if key < best_key:
            best_key, best = key, tuple(est.choice)
    return LocalOutcome(best, best_key, proposed, accepted, evals, restarts, converged,
                        rejected_memory)
