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
    exact = model.space.n <= exact_max
    if patience is None:
        patience = max(50, min(2000, 4 * model.space.n)) if exact else max(400, 4 * check_every)
    settings = _Settings(exact, check_every, patience, t_start, t_end, max_stale, guided,
                         check_share, cluster)
    return _Walk(model, tracker, starts, settings, seed=seed, defer=defer).run()


@dataclass(frozen=True, slots=True)
class _Settings:
    exact: bool  # every move scored by the scheduler (no estimator)
    check_every: int
    patience: int
    t_start: float
    t_end: float
    max_stale: int
    guided: float
    check_share: float
    cluster: float


class _Walk:
    """The walk's state: the current and best placements, the estimator, the counters."""

    def __init__(self, model: Model, tracker: Tracker,
                 starts: Sequence[tuple[str, Sequence[int]] | tuple[str, Sequence[int], RankKey]],
                 settings: _Settings, *, seed: int, defer: int) -> None:
        self.model, self.tracker, self.cfg = model, tracker, settings
        self.sp = sp = model.space
        self.budget = budget = tracker.budget
        self.rng = random.Random(seed)
        self.moves = _Moves(model, self.rng)
        exact = settings.exact
        # score the starts (the tracker memoizes the ones already scored)
        scored: list[tuple[RankKey, tuple[int, ...]]] = []
        for item in starts:
            ch = item[1]
            key = item[2] if len(item) > 2 else tracker.evaluate(sp.placement(ch))[0]
            scored.append((key, tuple(ch)))
        self.best_key, self.best = min(scored, key=lambda kv: kv[0])
        self.order = [ch for _, ch in scored]
        self.proposed = self.accepted = self.evals = self.restarts = 0
        self.cur = list(self.best)
        self.cur_key = self.best_key
        self.start_used = budget.spent_s()
        self.span = max(budget.left_s(), 1e-9)
        throughput = tracker.objective is Objective.THROUGHPUT
        self.est = None if exact else Estimator(model, self.cur, throughput=throughput,
                                                defer=defer)
        self.levels = None if exact or settings.cluster <= 0.0 else coarsen(model, seed=seed)
        # the coarsest cluster level the walk still moves: one finer after each restart that
        # found nothing better; the walk counts stale restarts (to stop early) only below it
        self.top = 0
        if self.levels is not None:
            budget.charge(READ_S * self.levels.reads)
            self.top = self.levels.depth
        self.guard = WeightGuard(model, self.cur)
        self.rejected_memory = 0
        self.est_val = self.est.score() if self.est else 0.0
        self.since_best = self.since_check = self.stale = 0
        self.next_start = 1
        self.improved = self.converged = False
        self.last_touched = 0  # the estimator's construction is charged with the first move
        self.last_queries = model.comm.queries
        self.path: list[int] | None = None  # the estimator's critical path (None: to recompute)
        self.check_spent = budget.spent_s()
        self.move_wall = 0.0  # the slowest estimated move so far (wall seconds; cannot be cut)

    def charge_reads(self, base: float) -> None:
        """Charge ``base`` and what the estimator read and the crossings it computed
        (each a few cost-model questions, priced as HEFT's) since the last charge."""
        est, comm = self.est, self.model.comm
        assert est is not None
        self.budget.charge(base + READ_S * (est.touched - self.last_touched)
                           + HEFT_QUERY_S * (comm.queries - self.last_queries))
        self.last_touched = est.touched
        self.last_queries = comm.queries

    def run(self) -> LocalOutcome:
        budget, cfg, tracker = self.budget, self.cfg, self.tracker
        while not budget.exhausted():
            frac = min(1.0, (budget.spent_s() - self.start_used) / self.span)
            # cooled by the budget spent, or by the restarts where the walk ends early
            temp = cfg.t_start * (cfg.t_end / cfg.t_start) ** (frac if cfg.exact else max(
                frac, min(1.0, self.restarts / COOL_RESTARTS)))
            kind, mv = self._draw(frac)
            if not mv:
                budget.charge(MOVE_VERTEX_S)
                if kind == "none":
                    break
                continue
            if (cfg.exact or self.since_check + 1 >= cfg.check_every) and \
                    not tracker.can_evaluate(work=False):
                break  # the deadline: no time to score another placement
            if self.move_wall > 0.0 and not budget.fits(0.0, self.move_wall):
                break  # the deadline: no time for another move as slow as the slowest so far
            self.proposed += 1
            if not self.guard.apply(self.cur, mv) and self.cur_key[0] == 0:
                self.guard.undo(self.cur, mv)
                self.rejected_memory += 1
                self.since_best += 1
                budget.charge(MOVE_BASE_S)
            elif cfg.exact:
                self._step_exact(mv, temp)
            else:
                self._step_estimated(mv, temp)
            if self.since_best == 0:
                self.improved = True
            if self.since_best >= cfg.patience and not self._restart():
                break
        return self._finish()

    def _draw(self, frac: float) -> tuple[str, dict[int, int]]:
        est, levels, rng = self.est, self.levels, self.rng
        if est is not None and self.moves.movable and rng.random() < self.cfg.guided:
            if self.path is None:
                self.path = est.critical_path()
            return _guided(est, rng, self.path)
        if levels is not None and levels.depth and rng.random() < self.cfg.cluster and (
                level := min(self.top, levels.level_at(frac))):
            return self.moves.cluster(self.cur, levels, level)
        return self.moves.draw(self.cur)

    def _step_exact(self, mv: dict[int, int], temp: float) -> None:
        """Score the moved placement; keep it by the Metropolis rule."""
        cur = self.cur
        old = {v: cur[v] for v in mv}
        for v, k in mv.items():
            cur[v] = k
        key, _ = self.tracker.evaluate(self.sp.placement(cur))
        self.evals += 1
        w = _worse(key, self.cur_key)
        if w <= 0.0 or (math.isfinite(w) and self.rng.random() < math.exp(-w / temp)):
            self.accepted += 1
            self.cur_key = key
            if key < self.best_key:
                self.best_key, self.best = key, tuple(cur)
                self.since_best = 0
            else:
                self.since_best += 1
        else:
            after = list(cur)
            for v, k in old.items():
                cur[v] = k
            self.guard.undo(cur, {v: after[v] for v in old})
            self.since_best += 1

    def _step_estimated(self, mv: dict[int, int], temp: float) -> None:
        """Estimate the move; every ``check_every`` moves score the estimator's placement."""
        est = self.est
        assert est is not None
        t_move = self.budget.clock()
        # accepted iff its relative worsening w satisfies w <= -T ln u (u uniform): the
        # Metropolis rule, decided against a limit so that the estimator can stop early
        u = self.rng.random()
        limit = self.est_val * (1.0 - temp * math.log(u)) if u > 0.0 else math.inf
        val, ok = est.propose(mv, limit)
        took = self.budget.clock() - t_move
        if took > self.move_wall:
            self.move_wall = took
        self.tracker.estimates += 1
        self.charge_reads(MOVE_BASE_S)
        if ok:
            self.accepted += 1
            self.est_val = val
            self.cur = est.choice
            if not (est.kept and self.path is not None and mv.keys().isdisjoint(self.path)):
                self.path = None  # (a vertex off it moved, its path shorter: still longest)
        else:
            self.guard.undo(est.choice, mv)
        self.since_check += 1
        self.since_best += 1
        if self.since_check >= self.cfg.check_every and (
                self.budget.spent_s() - self.check_spent
                >= self.cfg.check_share * self.tracker.eval_work_s):
            self._check()

    def _check(self) -> None:
        """Score the estimator's placement; go back to the best when it is worse."""
        est = self.est
        assert est is not None
        self.since_check = 0
        self.est_val = est.flush()
        key, _ = self.tracker.evaluate(self.sp.placement(est.choice))
        self.check_spent = self.budget.spent_s()
        self.path = None
        self.evals += 1
        if key < self.best_key:
            self.best_key, self.best = key, tuple(est.choice)
            self.since_best = 0
        elif _worse(key, self.best_key) > 0.0:
            est.reset(self.best)
            self.guard.reset(self.best)
            self.path = None
            self.est_val = est.score()
            self.charge_reads(0.0)
        self.cur = est.choice

    def _restart(self) -> bool:
        """Restart from the next start (then the best); False when the walk ends."""
        self.restarts += 1
        self.since_best = 0
        if not self.improved and self.top > 0:
            self.top -= 1  # a restart that found nothing: finer clusters from now on
        else:
            self.stale = 0 if self.improved else self.stale + 1
        self.improved = False
        if self.stale >= self.cfg.max_stale and self.next_start >= len(self.order):
            self.converged = True
            return False
        if self.cfg.exact and not self.tracker.can_evaluate(work=False):
            return False
        src = self.order[self.next_start] if self.next_start < len(self.order) else self.best
        self.next_start += 1
        self.cur = list(src)
        self.guard.reset(self.cur)
        if self.cfg.exact:
            self.cur_key, _ = self.tracker.evaluate(self.sp.placement(self.cur))
        else:
            est = self.est
            assert est is not None
            est.reset(self.cur)
            self.path = None
            self.est_val = est.score()
            self.charge_reads(0.0)
            self.cur = est.choice
        return True

    def _finish(self) -> LocalOutcome:
        est, tracker = self.est, self.tracker
        if est is not None and tuple(est.choice) != self.best and \
                tracker.can_evaluate(work=False):
            key, _ = tracker.evaluate(self.sp.placement(est.choice))
            self.evals += 1
            if key < self.best_key:
                self.best_key, self.best = key, tuple(est.choice)
        return LocalOutcome(self.best, self.best_key, self.proposed, self.accepted, self.evals,
                            self.restarts, self.converged, self.rejected_memory)
