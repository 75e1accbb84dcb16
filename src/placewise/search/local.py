"""Boundary local search: move vertices and regions across device boundaries, change
precisions, accept by the objective (simulated annealing with restarts, seeded).

**Moves** (drawn with a seeded ``random.Random``):

- *boundary*: pick a crossing edge (its ends on different devices) and move one end to the
  other end's device — its precision kept if the device offers it, else the other end's,
  else the fastest there;
- *region*: the same, but for a connected run of vertices on the moved end's device
  (breadth-first from it, up to a random size of 2..32);
- *precision*: give a vertex, or its run, another precision on its device;
- *random*: any vertex to any candidate (keeps the walk from getting stuck);
- *cluster* (estimated walks, a share ``cluster`` of the moves not guided): a whole cluster
  of the multilevel coarsening (``placewise.search.multilevel``) to one device, the
  coarsest level first and finer ones as the walk goes on (the vertices' own level last):
  finer by the share of the budget spent, and one level finer after each restart that
  found nothing better (those restarts do not count towards stopping early).

**Memory.** A move that would put more resident weights on a memory than it holds is
rejected without scoring (``WeightGuard``), while the current plan fits.

**Acceptance.** A move that improves is taken; a worse one with probability
``exp(-relative worsening / T)``, the temperature ``T`` falling geometrically from 2% to
0.01% over the budget (estimated walks: or over ``COOL_RESTARTS`` restarts, if sooner). A
placement that fits in memory always beats one that does not
(``placewise.search.result.rank_key``). After ``patience`` moves without a new best the
walk restarts from the next starting placement, then from the best found; after
``max_stale`` restarts in a row without a new best (and every start tried, and every
cluster level) it stops early.

**Evaluation.** Up to ``exact_max`` vertices every move is scored by the scheduler. Larger
graphs score moves *incrementally* with the contention-free estimate (``Estimator``, in
``placewise.search.estimate``): the
larger of the longest path (graph inputs from the host, outputs back to it, crossing delays
as the scheduler charges them) and the busiest exclusive resource (compute lanes, link
directions; every tensor copy counted once, as the scheduler sends it once) and the sum,
over the *barrier windows* (``_windows``: the stretches between vertices every path passes
through, such as a fork-join's forks and joins, which follow each other in every schedule),
of each window's busiest exclusive resource — without it a placement that saturates a link
within each stage looked as good as its global load. Where no copy
shares a route's first hops or a conversion with another, this is a proven lower bound of
the scheduler's makespan (``tests/search/test_incremental.py`` checks it). The estimator
keeps every vertex's finish time and bottom level (the longest path from its start to the
end), so a move of one vertex is scored from its neighbours alone: the longest path
through it is exact, and when the vertex is off the longest paths the new estimate is
exactly the larger of that path, the old span and the new occupancy — no re-timing; so is
a move on the longest path when the occupancy is at least the larger of the old span and
the path through it (the new span is at most that). Any other move on the longest path, or
of several vertices, is first bounded by its occupancy, then
re-timed downstream of it (stopping where finish times do not change). The Metropolis test
is drawn first (accept iff the relative worsening is at most ``-T ln u``), so a move whose
bound already exceeds the limit is rejected without touching the timeline. Among
placements with similar estimates the walk prefers less total busy time (``TIE`` times the
mean exclusive occupancy is added to the score, ``Estimator.score``). Accepted moves off
the longest path are re-timed in batches of up to ``defer`` (``Estimator.defer``): a move
of several vertices all off the longest paths is then scored from the region's neighbours
too (approximate where a path leaves the region and re-enters it), and scores in between
use finish times that may be stale downstream of the batch; every batch is flushed before
a move on the path and at every checkpoint, and ``Estimator.drift`` records the largest
error a flush found. The
scheduler is called at checkpoints — after at least ``check_every`` moves and at least
``check_share`` scheduler evaluations' worth of estimated work since the last (so
checkpoints take at most about half the walk's time), and at the end: a checkpoint that is worse than the best scored placement sends
the walk back to it. Only scheduler scores decide what is returned, and the walk returns
the best of its starts and of what it scored, so it never returns worse than a start.

**Guided moves** (a share ``guided`` of the estimated walk's moves): when a device is the
busiest resource above the longest path, a vertex of it moves to the candidate elsewhere
with the shortest path through it (*balance*); else a vertex of the longest path moves to
its candidate with the shortest path through it (*critical*). Graphs with many vertices
draw their other moves from crossing edges, so the work per move does not grow with the
graph.

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

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from placewise.schedule.evaluate import Objective
from placewise.search.estimate import Estimator
from placewise.search.multilevel import Levels, coarsen
from placewise.search.result import RankKey, Tracker
from placewise.search.space import HEFT_QUERY_S, MOVE_BASE_S, MOVE_VERTEX_S, Model

__all__ = ["Estimator", "LocalOutcome", "WeightGuard", "local_search"]

EXACT_MAX = 300  # vertices up to which every move is scored by the scheduler
# estimated work per vertex or edge the estimator reads (its arrays are flat: measured at
# 10,000 ops 0.23-0.32 us a read on layered and fork-join DAGs from HEFT's and single-device
# starts, about an eighth of MOVE_VERTEX_S, which priced reads through the cost tables; at a
# third of it the walk used its work budget in a third of the wall time)
READ_S = MOVE_VERTEX_S / 8
DEFER = 32  # accepted moves off the longest path re-timed together (Estimator.defer)
GUIDED = 0.3  # share of the estimated walk's moves aimed at the critical path or busiest device
CLUSTER = 0.4  # share of the estimated walk's other moves that move a cluster (multilevel)
# restarts over which the temperature falls to its end even when the budget is far from
# spent: with moves priced as measured, walks on 1,000-op graphs end by stale restarts
# after a sixth of their budget, still at nearly the starting temperature
COOL_RESTARTS = 8


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

    def cluster(self, choice: list[int], levels: Levels, level: int
                ) -> tuple[str, dict[int, int]]:
        """A whole cluster of ``level`` to one device: the cluster of an end of a crossing
        edge to the other end's device, else of a random vertex to a random other device."""
        sp = self.m.space
        rng = self.rng
        e = self._crossing(choice) if rng.random() < 0.6 else None
        if e is not None:
            ed = self.m.edges
            a, b = ed.src[e], ed.dst[e]
            if rng.random() < 0.5:
                a, b = b, a
            target = sp.cand_dev[b][choice[b]]
        else:
            a = rng.choice(self.movable)
            here = sp.cand_dev[a][choice[a]]
            devs = sorted({d for d in sp.cand_dev[a] if d != here})
            if not devs:
                return "cluster", {}
            target = rng.choice(devs)
        moves: dict[int, int] = {}
        for v in levels.cluster_of(level, a):
            k = self._to_device(v, target, -1, choice)
            if k is not None and k != choice[v]:
                moves[v] = k
        return "cluster", moves

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


def _guided(est: Estimator, rng: random.Random, path: list[int]) -> tuple[str, dict[int, int]]:
    """A move aimed at what bounds the estimate: when the busiest exclusive resource is a
    device above the longest path, a vertex off it (to the candidate elsewhere with the
    shortest path through it); else a vertex of the longest path to its candidate with the
    shortest path through it."""
    m = est.m
    sp = m.space
    ch = est.choice
    n_dev = len(sp.devices)
    worst, busiest = -1.0, -1
    for r in range(n_dev):
        x = est.load[r] / est.lanes[r]
        if x > worst:
            worst, busiest = x, r
    if worst > est.span:
        for _ in range(16):
            v = rng.randrange(sp.n)
            if sp.cand_dev[v][ch[v]] == busiest and len(sp.cands[v]) > 1:
                ks = [k for k, d in enumerate(sp.cand_dev[v]) if d != busiest]
                if ks:
                    k = min(ks, key=lambda k: (est.through(v, k), k))
                    return "balance", {v: k}
        return "none-guided", {}
    cands = [v for v in path if len(sp.cands[v]) > 1]
    if not cands:
        return "none-guided", {}
    v = rng.choice(cands)
    ks = [k for k in range(len(sp.cands[v])) if k != ch[v]]
    k = min(ks, key=lambda k: (est.through(v, k), k))
    return "critical", {v: k}


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
                 max_stale: int = 3, guided: float = GUIDED, check_share: float = 1.0,
                 defer: int = DEFER, cluster: float = CLUSTER) -> LocalOutcome:
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
    est = None if exact else Estimator(model, cur, throughput=throughput, defer=defer)
    levels = None if exact or cluster <= 0.0 else coarsen(model, seed=seed)
    # the coarsest cluster level the walk still moves: one finer after each restart that
    # found nothing better; the walk counts stale restarts (to stop early) only below it
    top = 0
    if levels is not None:
        budget.charge(READ_S * levels.reads)
        top = levels.depth
    guard = WeightGuard(model, cur)
    rejected_memory = 0
    est_val = est.score() if est else 0.0
    since_best = 0
    since_check = 0
    next_start = 1
    stale = 0
    improved = False
    converged = False
    last_touched = 0  # the estimator's construction is charged with the first move
    comm = model.comm
    last_queries = comm.queries

    def charge_reads(base: float) -> None:
        """Charge ``base`` and what the estimator read and the crossings it computed
        (each a few cost-model questions, priced as HEFT's) since the last charge."""
        nonlocal last_touched, last_queries
        assert est is not None
        budget.charge(base + READ_S * (est.touched - last_touched)
                      + HEFT_QUERY_S * (comm.queries - last_queries))
        last_touched = est.touched
        last_queries = comm.queries

    clock = budget.clock
    path: list[int] | None = None  # the estimator's critical path (None: to recompute)
    check_spent = budget.spent_s()
    move_wall = 0.0  # the slowest estimated move so far (wall seconds; it cannot be cut)
    while not budget.exhausted():
        frac = min(1.0, (budget.spent_s() - start_used) / span)
        # cooled by the budget spent, or by the restarts where the walk ends early
        temp = t_start * (t_end / t_start) ** (frac if exact else max(
            frac, min(1.0, restarts / COOL_RESTARTS)))
        if est is not None and moves.movable and rng.random() < guided:
            if path is None:
                path = est.critical_path()
            kind, mv = _guided(est, rng, path)
        elif levels is not None and levels.depth and rng.random() < cluster and (
                level := min(top, levels.level_at(frac))):
            kind, mv = moves.cluster(cur, levels, level)
        else:
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
            t_move = clock()
            # accepted iff its relative worsening w satisfies w <= -T ln u (u uniform): the
            # Metropolis rule, decided against a limit so that the estimator can stop early
            u = rng.random()
            limit = est_val * (1.0 - temp * math.log(u)) if u > 0.0 else math.inf
            val, ok = est.propose(mv, limit)
            took = clock() - t_move
            if took > move_wall:
                move_wall = took
            tracker.estimates += 1
            charge_reads(MOVE_BASE_S)
            if ok:
                accepted += 1
                est_val = val
                cur = est.choice
                if not (est.kept and path is not None and mv.keys().isdisjoint(path)):
                    path = None  # (a vertex off it moved, its path shorter: still longest)
            else:
                guard.undo(est.choice, mv)
            since_check += 1
            since_best += 1
            if since_check >= check_every and (
                    budget.spent_s() - check_spent >= check_share * tracker.eval_work_s):
                since_check = 0
                est_val = est.flush()
                key, _ = tracker.evaluate(sp.placement(est.choice))
                check_spent = budget.spent_s()
                path = None
                evals += 1
                if key < best_key:
                    best_key, best = key, tuple(est.choice)
                    since_best = 0
                elif _worse(key, best_key) > 0.0:
                    est.reset(best)
                    guard.reset(best)
                    path = None
                    est_val = est.score()
                    charge_reads(0.0)
                cur = est.choice
        if since_best == 0:
            improved = True
        if since_best >= patience:
            restarts += 1
            since_best = 0
            if not improved and top > 0:
                top -= 1  # a restart that found nothing: finer clusters from now on
            else:
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
                path = None
                est_val = est.score()
                charge_reads(0.0)
                cur = est.choice
    if est is not None and tuple(est.choice) != best and tracker.can_evaluate(work=False):
        key, _ = tracker.evaluate(sp.placement(est.choice))
        evals += 1
        if key < best_key:
            best_key, best = key, tuple(est.choice)
    return LocalOutcome(best, best_key, proposed, accepted, evals, restarts, converged,
                        rejected_memory)
