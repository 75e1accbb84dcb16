"""The steps every strategy is made of, and ``auto``, which chooses among them.

A ``Context`` holds one search: the space, the estimate model, the tracker (which scores
with the scheduler) and the budget. The steps score their plans through the tracker under
a label: ``baselines`` (``single:DEVICE`` for every device, then ``greedy``), ``heft``,
``dp``, ``cpsat``, ``exhaustive``, ``local``.

``auto`` (by graph size and time budget):

1. the baselines and HEFT — so the answer is never worse than the best baseline scored
   (when the budget cannot take them all, the best single devices by compute time come
   first; one baseline is always scored);
2. a space of at most ``EXHAUSTIVE_MAX`` placements is enumerated: its optimum under the
   scheduler;
3. otherwise the DP where it applies (latency: series-parallel graphs up to ``DP_MAX``
   vertices — its value is also a lower bound; throughput: chains up to ``DP_CHAIN_MAX``),
   and CP-SAT on graphs up to ``CPSAT_AUTO_MAX`` vertices, hinted with the best plan so
   far and given half of the budget left (three quarters when the graph has at most 40
   vertices), its solutions scored by the scheduler;
4. local search from the best plans so far with what is left of the budget.

Every step checks the budget first: a step that cannot be interrupted (an evaluation,
building CP-SAT's model, the estimator local search starts from) starts only if its
estimated work fits in the work budget and its estimated wall time before the deadline
(``Budget.fits``); HEFT, the DP, CP-SAT and local search also watch the deadline while they
run, and a step the deadline cuts short leaves the plans scored before it. The search stops
as soon as the best plan meets a proven lower bound (the DP's, or CP-SAT's up to its
rounding): it is then optimal. What was skipped and why goes into the notes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from placewise.errors import UnsupportedError
from placewise.schedule.evaluate import Evaluation, Objective, evaluate, request_floor_s
from placewise.schedule.placement import Placement, Problem
from placewise.search.baselines import greedy_choice, single_choice
from placewise.search.cpsat import BUILD_TERM_S, cpsat_search
from placewise.search.dp import dp_search, graph_shape
from placewise.search.exhaustive import ExhaustiveOutcome, exhaustive_search
from placewise.search.heft import heft_schedule, replay_late
from placewise.search.local import EXACT_MAX, local_search
from placewise.search.result import RankKey, Tracker
from placewise.search.space import (
    COST_QUERY_S,
    DP_STATE_S,
    HEFT_QUERY_S,
    HEFT_UNIT_S,
    MOVE_VERTEX_S,
    Budget,
    Model,
    SearchSpace,
    SearchStopped,
)

__all__ = ["CPSAT_AUTO_MAX", "DP_CHAIN_MAX", "DP_MAX", "EXHAUSTIVE_MAX", "Context", "auto"]

EXHAUSTIVE_MAX = 4096  # placements
DP_MAX = 50_000  # vertices (series-parallel latency DP)
DP_CHAIN_MAX = 2_000  # vertices (chain throughput DP)
CPSAT_AUTO_MAX = 150  # vertices
_CPSAT_SCORED = 30  # CP-SAT solutions re-scored by the scheduler (the last ones found)


class Context:
    """One search in progress (see the module docstring).

    ``keep``: the label whose scheduler evaluation is kept when it is scored (the plan a
    named strategy returns), so that it need not be evaluated again at the end.
    """

    def __init__(self, space: SearchSpace, model: Model, tracker: Tracker, *, seed: int,
                 keep: str | None = None) -> None:
        self.space = space
        self.model = model
        self.tracker = tracker
        self.budget: Budget = tracker.budget
        self.seed = seed
        self.throughput = tracker.objective is Objective.THROUGHPUT
        self.labelled: dict[str, tuple[RankKey, tuple[int, ...]]] = {}
        self.bounds: list[float] = []
        self.cpsat_bound_s: float | None = None
        self.cpsat_status: str | None = None
        self.slack_s = 0.0  # rounding below which a bound counts as met
        self.keep = keep
        self.kept: Evaluation | None = None
        self._queries = 0

    # -- helpers ---------------------------------------------------------------------------
    def score(self, label: str, choice: Sequence[int], note: str = "",
              problem: Problem | None = None) -> tuple[RankKey, Evaluation | None]:
        """Score a plan under ``label`` (on ``problem``, a variant of the search's, if
        given: see ``Tracker.evaluate``); its rank key and evaluation (None: memoized)."""
        self.tracker.phase = label
        key, ev = self.tracker.evaluate(self.space.placement(choice), label=label, note=note,
                                        problem=problem)
        old = self.labelled.get(label)
        if old is None or key < old[0]:
            self.labelled[label] = (key, tuple(choice))
            if label == self.keep and ev is not None:
                self.kept = ev
        return key, ev

    def starts(self) -> list[tuple[str, tuple[int, ...], RankKey]]:
        """Labelled plans so far with their rank keys, best first (ties: label order)."""
        items = sorted(self.labelled.items(), key=lambda kv: (kv[1][0], kv[0]))
        seen: set[tuple[int, ...]] = set()
        out: list[tuple[str, tuple[int, ...], RankKey]] = []
        for label, (key, ch) in items:
            if ch not in seen:
                seen.add(ch)
                out.append((label, ch, key))
        return out

    def best_choice(self) -> tuple[int, ...]:
        return self.starts()[0][1]

    def evaluation_of(self, choice: Sequence[int]) -> Evaluation:
        """The scheduler's evaluation of a placement (the tracker's best or the kept one if
        it is one of those, else evaluated again)."""
        pl: Placement = self.space.placement(choice)
        for ev in (self.tracker.best, self.kept):
            if ev is not None and ev.placement == pl:
                return ev
        return evaluate(self.space.problem, pl)

    def skip(self, step: str, work_s: float) -> None:
        """Note that ``step`` (estimated at ``work_s`` of work) did not fit in the budget."""
        b = self.budget
        if b.deterministic and b.used_s + work_s > b.limit_s:
            why = (f"its estimated {work_s:.3g} s of work does not fit in the "
                   f"{b.left_s():.3g} s left of the {b.limit_s:.3g} s work budget")
        else:
            why = (f"it would not finish before the time limit ({b.wall_left_s():.3g} s "
                   f"left of {b.deadline_s:.3g} s)")
        self.tracker.note(f"{step}: skipped: {why}")

    def stopped(self, step: str, exc: SearchStopped) -> None:
        self.tracker.note(f"{step}: {exc}: the time limit ran out (the plan is the best "
                          f"scored before it)")

    # -- steps -------------------------------------------------------------------------------
    def baselines(self, first: str | None = None) -> None:
        """Score ``single:DEVICE`` for every device, then ``greedy`` (``first``, if given,
        before them). When the budget cannot take them all, the best single devices by
        their compute time go first and the rest are skipped (noted); the first is always
        scored: a search returns at least one plan."""
        tr = self.tracker
        sp = self.space
        todo: list[tuple[str, list[int], str, float]] = []
        for di, d in enumerate(sp.devices):
            choice, note = single_choice(sp, d)
            work = sum(sp.cost_s[i][k] for i, k in enumerate(choice)) / max(1, sp.lanes[di])
            todo.append((f"single:{d}", choice, note, work))
        todo.append(("greedy", greedy_choice(sp), "", math.inf))
        order = [item[0] for item in todo]
        if not tr.can_evaluate(len(todo)):
            todo.sort(key=lambda item: (item[0] != first, item[3]))
        elif first is not None:
            todo.sort(key=lambda item: item[0] != first)
        scored: dict[str, float] = {}
        skipped: list[str] = []
        for label, choice, note, _ in todo:
            if scored and not tr.can_evaluate():
                skipped.append(label)
                continue
            key, _ = self.score(label, choice, note)
            scored[label] = tr.score_of(key)
            if note:
                tr.note(f"{label}: {note}")
        tr.baselines.extend((label, scored[label]) for label in order if label in scored)
        if skipped:
            self.skip(f"baselines {', '.join(sorted(skipped, key=order.index))}",
                      tr.eval_work_s)

    def charge_queries(self, price_s: float = COST_QUERY_S) -> None:
        """Charge the budget for the crossings computed since the last call, at
        ``price_s`` each."""
        q = self.model.comm.queries
        self.budget.charge(price_s * (q - self._queries))
        self._queries = q

    def heft(self) -> tuple[int, ...] | None:
        """HEFT's plan, scored on HEFT's own schedule (replayed with its start times as
        release times) when that schedule is valid under the scheduler's resource model,
        else also rescheduled by the list scheduler, the better kept (noted; see
        ``placewise.search.heft``); ``None`` (noted) when it does not fit in the budget."""
        sp = self.space
        ed = self.model.edges
        tr = self.tracker
        work = sum(len(c) for c in sp.cands) + len(ed.src)
        # at most one crossing per (in-edge, candidate) and per (vertex, candidate)
        queries = sum(len(sp.cands[v]) for v in ed.dst) + sum(len(c) for c in sp.cands)
        est = HEFT_UNIT_S * work + COST_QUERY_S * queries
        if not self.budget.fits(est + tr.eval_work_s,
                                est * self.budget.speed + tr.eval_wall_s()):
            self.skip("heft", est + tr.eval_work_s)
            return None
        try:
            out = heft_schedule(self.model, throughput=self.throughput,
                                stop=self.budget.stop_at(tr.eval_wall_s()))
        except SearchStopped as exc:
            self.charge_queries(HEFT_QUERY_S)
            self.stopped("heft", exc)
            return None
        self.budget.charge(HEFT_UNIT_S * work)
        self.charge_queries(HEFT_QUERY_S)
        tr.estimates += work
        prob = sp.problem
        replay = prob.released(out.release_s(prob.vertex_names))
        key, ev = self.score("heft", out.choice, "HEFT's own insertion schedule", replay)
        assert ev is not None  # a variant problem is never memoized
        late, over = replay_late(out, ev.schedule, prob.vertex_index)
        if not late and not over:
            tr.note(f"heft: HEFT's own insertion schedule kept (makespan "
                    f"{ev.makespan_s:.6g} s, every task at HEFT's start time)")
            return tuple(out.choice)
        why = (f"{late} of {sp.n} compute tasks start later than HEFT says" if late else
               "graph outputs reach the host later than HEFT says")
        if not tr.can_evaluate():
            tr.note(f"heft: HEFT's own schedule is not valid under the machine's resource "
                    f"model ({why}); kept as the scheduler replays it: no time left to "
                    f"reschedule")
        else:
            key2, _ = self.score("heft", out.choice, "rescheduled by the list scheduler",
                                 prob)
            which = ("the rescheduled one" if key2 < key else
                     "HEFT's, as the scheduler replays it")
            tr.note(f"heft: HEFT's own schedule is not valid under the machine's resource "
                    f"model ({why}: exclusive links, conversions on compute lanes or shared "
                    f"bandwidth); rescheduled by the list scheduler: kept {which} (replayed "
                    f"{tr.score_of(key):.6g} s, rescheduled {tr.score_of(key2):.6g} s)")
        return tuple(out.choice)

    def dp(self) -> tuple[int, ...] | None:
        """The DP's plan, scored; ``None`` (noted) when it does not fit in the budget.
        Raises ``UnsupportedError`` for a graph the DP does not handle."""
        sp = self.space
        ed = self.model.edges
        tr = self.tracker
        pairs = sum(len(sp.cands[u]) * len(sp.cands[v]) for u, v in zip(ed.src, ed.dst,
                                                                         strict=True))
        cube = sum(len(c) ** 3 for c in sp.cands)
        est = COST_QUERY_S * pairs + DP_STATE_S * (pairs + cube) * (
            len(sp.devices) if self.throughput else 1)
        if not self.budget.fits(est + tr.eval_work_s,
                                est * self.budget.speed + tr.eval_wall_s()):
            self.skip("dp", est + tr.eval_work_s)
            return None
        try:
            out = dp_search(self.model, throughput=self.throughput,
                            stop=self.budget.stop_at(tr.eval_wall_s()))
        except SearchStopped as exc:
            self.charge_queries()
            self.stopped("dp", exc)
            return None
        tr.estimates += out.states
        self.budget.charge(DP_STATE_S * out.states)
        self.charge_queries()
        for n in out.notes:
            tr.note(n)
        if not self.throughput and out.exact:
            self.bounds.append(out.value_s)
            tr.note(f"dp: {out.kind} graph; the contention-free optimum "
                    f"{out.value_s:.6g} s bounds every placement's makespan")
        self.score("dp", out.choice)
        return out.choice

    def cpsat(self, time_limit_s: float) -> tuple[int, ...] | None:
        sp = self.space
        tr = self.tracker
        ed = self.model.edges
        terms = sum(len(sp.cands[ed.src[e]]) * len(sp.cands[ed.dst[e]])
                    for e in range(len(ed.src))) + sum(len(c) for c in sp.cands)
        build = BUILD_TERM_S * terms
        # the hint's evaluation (if it is not the best's) and scoring a few solutions
        scoring_s = 4 * tr.eval_wall_s()
        if not self.budget.fits(build, build * self.budget.speed + 0.05 + scoring_s):
            self.skip("cpsat", build)
            return None
        hint = self.best_choice()
        ev = self.evaluation_of(hint)
        starts_s = None
        if not self.throughput:
            sched = ev.schedule
            starts_s = [sched.task(v.name).start_s for v in sp.problem.vertices]
        ub = ev.score(tr.objective) if ev.feasible else None
        if ub is not None and not math.isfinite(ub):
            ub = None
        tr.progress("cpsat", self.budget.spent_s() / max(self.budget.limit_s, 1e-9))
        wall = self.budget.wall_left_s() - 3 * tr.eval_wall_s()  # score a few solutions
        out = cpsat_search(self.model, throughput=self.throughput, time_limit_s=time_limit_s,
                           seed=self.seed, hint=hint, hint_starts_s=starts_s,
                           upper_bound_s=ub, wall_limit_s=max(0.01, wall))
        self.budget.charge(out.deterministic_s + build)
        self.charge_queries()
        for n in out.notes:
            tr.note(n)
        self.cpsat_status = out.status
        if out.status in ("OPTIMAL", "FEASIBLE"):
            self.cpsat_bound_s = out.bound_s
            if not self.throughput:
                self.bounds.append(out.bound_s)
                self.slack_s = (sp.n + len(self.model.edges.src) + 2) * out.tick_s
        if not out.solutions:
            tr.note(f"cpsat: no solution ({out.status}) within "
                    f"{time_limit_s:.3g} s of search")
            return None
        best: tuple[RankKey, tuple[int, ...]] | None = None
        distinct = list(dict.fromkeys(out.solutions))[-_CPSAT_SCORED:]
        if not tr.can_evaluate(len(distinct)):
            distinct.reverse()  # the last found first: the best in the model
        scored = 0
        for ch in distinct:
            if scored and not tr.can_evaluate():
                tr.note(f"cpsat: {len(distinct) - scored} of its solutions not scored: the "
                        f"time limit ran out")
                break
            scored += 1
            tr.phase = "cpsat"
            key, _ = tr.evaluate(sp.placement(ch))
            if best is None or key < best[0]:
                best = (key, ch)
        assert best is not None
        note = (f"{out.status.lower()} in the CP-SAT model (objective {out.objective_s:.6g} s, "
                f"bound {out.bound_s:.6g} s); best of {scored} solutions as scheduled")
        self.score("cpsat", best[1], note)
        return best[1]

    def exhaustive(self) -> ExhaustiveOutcome:
        self.tracker.phase = "exhaustive"
        out = exhaustive_search(self.model, self.tracker)
        if out.choice is None:
            return out
        note = ("every placement enumerated: the optimum under the scheduler" if out.complete
                else f"stopped after {out.enumerated} placements (budget)")
        self.score("exhaustive", out.choice, note)
        self.tracker.note(f"exhaustive: {note}")
        return out

    def local(self) -> tuple[int, ...] | None:
        """Local search from the plans so far; ``None`` (noted) when even its start (the
        estimator, one scheduler checkpoint) does not fit in the budget."""
        sp = self.space
        tr = self.tracker
        ne = len(self.model.edges.src)
        if sp.n > EXACT_MAX:
            est = MOVE_VERTEX_S * (sp.n + ne) + COST_QUERY_S * ne
            if not self.budget.fits(est + tr.eval_work_s,
                                    est * self.budget.speed + tr.eval_wall_s()):
                self.skip("local", est + tr.eval_work_s)
                return None
        tr.phase = "local"
        out = local_search(self.model, tr, self.starts(), seed=self.seed)
        note = (f"{out.proposed} moves, {out.accepted} accepted, {out.scored} scored by the "
                f"scheduler, {out.restarts} restarts"
                + (", stopped early (no better plan in the last restarts)" if out.converged
                   else ""))
        self.score("local", out.choice, note)
        return out.choice


def auto(ctx: Context) -> None:
    """Run the ``auto`` policy (see the module docstring) on a context whose baselines and
    HEFT plan are already scored."""
    sp = ctx.space
    tr = ctx.tracker
    budget = ctx.budget
    n = sp.n
    size = sp.size()
    ctx.bounds.append(sp.lower_bound_s(throughput=ctx.throughput))
    if _bound_met(ctx):
        return
    if size <= EXHAUSTIVE_MAX and not budget.exhausted():
        tr.progress("exhaustive", budget.spent_s() / max(budget.limit_s, 1e-9))
        if ctx.exhaustive().complete:
            return
    shape = graph_shape(ctx.model) if n <= DP_MAX else "other"
    dp_ok = (shape == "chain" and n <= DP_CHAIN_MAX) if ctx.throughput else \
        (shape in ("chain", "series-parallel") and n <= DP_MAX)
    if dp_ok and not budget.exhausted():
        tr.progress("dp", budget.spent_s() / max(budget.limit_s, 1e-9))
        try:
            ctx.dp()
        except UnsupportedError as exc:  # pragma: no cover - shape was checked
            tr.note(str(exc))
        if _bound_met(ctx):
            return
    if n <= CPSAT_AUTO_MAX and not budget.exhausted():
        share = 0.75 if n <= 40 else 0.5
        ctx.cpsat(max(0.05, share * budget.left_s()))
    elif n > CPSAT_AUTO_MAX:
        tr.note(f"auto: {n} vertices: CP-SAT skipped (over {CPSAT_AUTO_MAX}), local search "
                f"instead")
    if budget.exhausted():
        tr.note("auto: the time budget was spent before local search")
        return
    if _bound_met(ctx):
        return
    tr.progress("local search", budget.spent_s() / max(budget.limit_s, 1e-9))
    ctx.local()


def _bound_met(ctx: Context) -> bool:
    """Whether the best plan already meets a proven lower bound (then it is optimal and
    searching on is pointless); notes it."""
    tr = ctx.tracker
    if not ctx.bounds or tr.best_key[0] != 0:
        return False
    # the bounds are of the makespan; the score (latency) adds the request hand-off
    bound = max(ctx.bounds) + request_floor_s(ctx.space.problem)
    if tr.best_key[1] > bound * (1 + 1e-9) + ctx.slack_s:
        return False
    tr.note(f"auto: the best plan meets a proven lower bound ({bound:.6g} s"
            + (f", up to {ctx.slack_s:.3g} s of rounding" if ctx.slack_s else "")
            + "): it is optimal, the search stops")
    return True
