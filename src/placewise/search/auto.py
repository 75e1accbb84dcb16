"""The steps every strategy is made of, and ``auto``, which chooses among them.

A ``Context`` holds one search: the space, the estimate model, the tracker (which scores
with the scheduler) and the budget. The steps score their plans through the tracker under
a label: ``baselines`` (``single:DEVICE`` for every device, then ``greedy``), ``heft``,
``dp``, ``cpsat``, ``exhaustive``, ``local``.

``auto`` (by graph size and time budget):

1. the baselines and HEFT, always — so the answer is never worse than the best baseline;
2. a space of at most ``EXHAUSTIVE_MAX`` placements is enumerated: its optimum under the
   scheduler;
3. otherwise the DP where it applies (latency: series-parallel graphs up to ``DP_MAX``
   vertices — its value is also a lower bound; throughput: chains up to ``DP_CHAIN_MAX``),
   and CP-SAT on graphs up to ``CPSAT_AUTO_MAX`` vertices, hinted with the best plan so
   far and given half of the budget left (three quarters when the graph has at most 40
   vertices), its solutions scored by the scheduler;
4. local search from the best plans so far with what is left of the budget.

Every step checks the budget first; the search stops as soon as the best plan meets a
proven lower bound (the DP's, or CP-SAT's up to its rounding): it is then optimal. What
was skipped and why goes into the notes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from placewise.errors import UnsupportedError
from placewise.schedule.evaluate import Evaluation, Objective
from placewise.schedule.placement import Placement
from placewise.search.baselines import greedy_choice, single_choice
from placewise.search.cpsat import BUILD_TERM_S, cpsat_search
from placewise.search.dp import dp_search, graph_shape
from placewise.search.exhaustive import ExhaustiveOutcome, exhaustive_search
from placewise.search.heft import heft_choice
from placewise.search.local import local_search
from placewise.search.result import RankKey, Tracker
from placewise.search.space import (
    COST_QUERY_S,
    DP_STATE_S,
    HEFT_UNIT_S,
    Budget,
    Model,
    SearchSpace,
)

__all__ = ["CPSAT_AUTO_MAX", "DP_CHAIN_MAX", "DP_MAX", "EXHAUSTIVE_MAX", "Context", "auto"]

EXHAUSTIVE_MAX = 4096  # placements
DP_MAX = 50_000  # vertices (series-parallel latency DP)
DP_CHAIN_MAX = 2_000  # vertices (chain throughput DP)
CPSAT_AUTO_MAX = 150  # vertices
_CPSAT_SCORED = 30  # CP-SAT solutions re-scored by the scheduler (the last ones found)


class Context:
    """One search in progress (see the module docstring)."""

    def __init__(self, space: SearchSpace, model: Model, tracker: Tracker, *, seed: int
                 ) -> None:
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
        self._queries = 0

    # -- helpers ---------------------------------------------------------------------------
    def score(self, label: str, choice: Sequence[int], note: str = "") -> RankKey:
        self.tracker.phase = label
        key, _ = self.tracker.evaluate(self.space.placement(choice), label=label, note=note)
        old = self.labelled.get(label)
        if old is None or key < old[0]:
            self.labelled[label] = (key, tuple(choice))
        return key

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
        """The scheduler's evaluation of a placement (the tracker's best if it is that)."""
        pl: Placement = self.space.placement(choice)
        best = self.tracker.best
        if best is not None and best.placement == pl:
            return best
        from placewise.schedule.evaluate import evaluate

        return evaluate(self.space.problem, pl)

    # -- steps -------------------------------------------------------------------------------
    def baselines(self) -> None:
        tr = self.tracker
        for d in self.space.devices:
            choice, note = single_choice(self.space, d)
            key = self.score(f"single:{d}", choice, note)
            tr.baselines.append((f"single:{d}", tr.score_of(key)))
            if note:
                tr.note(f"single:{d}: {note}")
        key = self.score("greedy", greedy_choice(self.space))
        tr.baselines.append(("greedy", tr.score_of(key)))

    def charge_queries(self) -> None:
        """Charge the budget for the crossings computed since the last call."""
        q = self.model.comm.queries
        self.budget.charge(COST_QUERY_S * (q - self._queries))
        self._queries = q

    def heft(self) -> tuple[int, ...]:
        sp = self.space
        choice = heft_choice(self.model, throughput=self.throughput)
        work = sum(len(c) for c in sp.cands) + len(self.model.edges.src)
        self.budget.charge(HEFT_UNIT_S * work)
        self.charge_queries()
        self.tracker.estimates += work
        self.score("heft", choice)
        return tuple(choice)

    def dp(self) -> tuple[int, ...]:
        out = dp_search(self.model, throughput=self.throughput)
        self.tracker.estimates += out.states
        self.budget.charge(DP_STATE_S * out.states)
        for n in out.notes:
            self.tracker.note(n)
        if not self.throughput and out.exact:
            self.bounds.append(out.value_s)
            self.tracker.note(f"dp: {out.kind} graph; the contention-free optimum "
                              f"{out.value_s:.6g} s bounds every placement's makespan")
        self.score("dp", out.choice)
        return out.choice

    def cpsat(self, time_limit_s: float) -> tuple[int, ...] | None:
        sp = self.space
        hint = self.best_choice()
        ev = self.evaluation_of(hint)
        starts_s = None
        if not self.throughput:
            sched = ev.schedule
            starts_s = [sched.task(v.name).start_s for v in sp.problem.vertices]
        ub = ev.score(self.tracker.objective) if ev.feasible else None
        if ub is not None and not math.isfinite(ub):
            ub = None
        self.tracker.progress("cpsat", self.budget.spent_s() / max(self.budget.limit_s, 1e-9))
        out = cpsat_search(self.model, throughput=self.throughput, time_limit_s=time_limit_s,
                           seed=self.seed, hint=hint, hint_starts_s=starts_s,
                           upper_bound_s=ub)
        ed = self.model.edges
        terms = sum(len(sp.cands[ed.src[e]]) * len(sp.cands[ed.dst[e]])
                    for e in range(len(ed.src))) + sum(len(c) for c in sp.cands)
        self.budget.charge(out.deterministic_s + BUILD_TERM_S * terms)
        self.charge_queries()
        for n in out.notes:
            self.tracker.note(n)
        self.cpsat_status = out.status
        if out.status in ("OPTIMAL", "FEASIBLE"):
            self.cpsat_bound_s = out.bound_s
            if not self.throughput:
                self.bounds.append(out.bound_s)
                self.slack_s = (sp.n + len(self.model.edges.src) + 2) * out.tick_s
        if not out.solutions:
            self.tracker.note(f"cpsat: no solution ({out.status}) within "
                              f"{time_limit_s:.3g} s of search")
            return None
        best: tuple[RankKey, tuple[int, ...]] | None = None
        distinct = list(dict.fromkeys(out.solutions))
        for ch in distinct[-_CPSAT_SCORED:]:
            self.tracker.phase = "cpsat"
            key, _ = self.tracker.evaluate(sp.placement(ch))
            if best is None or key < best[0]:
                best = (key, ch)
        assert best is not None
        note = (f"{out.status.lower()} in the CP-SAT model (objective {out.objective_s:.6g} s, "
                f"bound {out.bound_s:.6g} s); best of {min(len(distinct), _CPSAT_SCORED)} "
                f"solutions as scheduled")
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

    def local(self) -> tuple[int, ...]:
        self.tracker.phase = "local"
        out = local_search(self.model, self.tracker, self.starts(), seed=self.seed)
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
    bound = max(ctx.bounds)
    if tr.best_key[1] > bound * (1 + 1e-9) + ctx.slack_s:
        return False
    tr.note(f"auto: the best plan meets a proven lower bound ({bound:.6g} s"
            + (f", up to {ctx.slack_s:.3g} s of rounding" if ctx.slack_s else "")
            + "): it is optimal, the search stops")
    return True
