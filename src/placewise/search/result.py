"""What a search returns, and the bookkeeping that scores every candidate with the scheduler.

``Tracker`` is the only place strategies get a score from: it calls
``placewise.schedule.evaluate`` (the one evaluator), keeps the best evaluation, counts the
candidates, charges the work budget and records labelled alternatives. Candidates are
ranked by ``rank_key``: a placement that fits in memory beats one that does not; among
those that fit, the smaller objective value (makespan for latency, pipeline period for
throughput) wins; among those that do not, the smaller total overflow.

>>> from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
>>> from placewise.schedule import Objective, Placement, Problem
>>> from placewise.schedule.testing import ToyCostModel, toy_machine
>>> from placewise.search.space import Budget
>>> from placewise.units import DType
>>> x = Tensor("x", (1000,), DType.FP32, role=Role.INPUT)
>>> y = Tensor("y", (1000,), DType.FP32, role=Role.OUTPUT)
>>> g = Graph.build("g", [x, y], [Op("a", OpKind.RELU, ("x",), ("y",))])
>>> m = toy_machine()
>>> tr = Tracker(Problem(g, None, m, ToyCostModel(m)), Objective.LATENCY, Budget(1.0))
>>> key, ev = tr.evaluate(Placement.uniform(["a"], "cpu", DType.FP32), label="single:cpu")
>>> key[0], tr.evaluated, tr.best_label, [a.label for a in tr.alternatives]
(0, 1, 'single:cpu', ['single:cpu'])
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from placewise.errors import MemoryInfeasible
from placewise.schedule.evaluate import Evaluation, Objective, evaluate
from placewise.schedule.placement import Placement, Problem
from placewise.search.space import (
    EVAL_BASE_S,
    EVAL_VERTEX_S,
    EVAL_WALL_FACTOR,
    PRIOR_SPEED,
    Budget,
)
from placewise.units import format_bytes

__all__ = ["Alternative", "Progress", "SearchResult", "Tracker", "rank_key"]

Progress = Callable[[str, float], None]
RankKey = tuple[int, float]


def rank_key(ev: Evaluation, objective: Objective) -> RankKey:
    """``(0, objective value)`` if the placement fits in memory, else ``(1, overflow bytes)``
    — smaller is better."""
    if ev.feasible:
        return (0, ev.score(objective))
    over = sum(v.need_bytes - v.capacity_bytes for v in ev.memory.violations)
    return (1, float(over))


@dataclass(frozen=True, slots=True)
class Alternative:
    """One labelled plan a search tried, as the scheduler scored it. ``objective_s`` is the
    makespan (latency) or the pipeline period (throughput); ``inf`` if it does not fit."""

    label: str
    objective_s: float
    feasible: bool
    makespan_s: float
    period_s: float
    throughput_rps: float
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "objective_s": _num(self.objective_s),
                "feasible": self.feasible, "makespan_s": _num(self.makespan_s),
                "period_s": _num(self.period_s), "throughput_rps": _num(self.throughput_rps),
                "note": self.note}


def _num(x: float | None) -> float | None:
    """JSON has no infinity: ``None`` stands for 'none / does not fit'."""
    return None if x is None or not math.isfinite(x) else x


@dataclass(frozen=True, slots=True)
class SearchResult:
    """The best plan a strategy found and the record of the search.

    - ``best``: the scheduler's evaluation of the chosen placement; ``chosen``: the label of
      the strategy step that produced it (``auto`` says which one it used);
    - ``candidates_evaluated``: scheduler evaluations; ``estimates``: cheaper estimates
      (moves screened with the contention-free model, DP states, ...);
    - ``pruned``: (reason, count) of assignments left out before any evaluation, with
      ``pruned_examples``; ``dtypes``: the precisions searched;
    - ``alternatives``: every labelled plan tried, in the order tried, with its objective;
      ``baselines``: (label, objective_s) of ``single:DEVICE`` and ``greedy``;
    - ``lower_bound_s``: a bound no placement of the searched space beats, for the
      objective (makespan or period): the problem bound, or a better proven one;
    - ``cpsat_bound_s`` / ``cpsat_status`` / ``gap``: CP-SAT's proven bound on its model
      (see ``placewise.search.cpsat``) and ``(objective - bound) / objective``;
    - ``notes``: what the search decided and why (screening, refusals, stops);
    - ``search_time_s``: the wall-clock seconds the search really took; ``time_limit_s``:
      the limit it was given (a wall-clock bound); ``work_budget_s``: its deterministic
      work budget; ``wall_stopped``: the wall clock, not the work budget, ended or cut
      short a step (the result may then differ between runs).
    """

    best: Evaluation
    strategy: str
    chosen: str
    objective: Objective
    search_time_s: float
    candidates_evaluated: int
    estimates: int
    pruned: tuple[tuple[str, int], ...]
    pruned_examples: tuple[tuple[str, tuple[str, ...]], ...]
    alternatives: tuple[Alternative, ...]
    baselines: tuple[tuple[str, float], ...]
    lower_bound_s: float
    dtypes: tuple[str, ...]
    seed: int
    machine_devices: tuple[str, ...]
    cpsat_bound_s: float | None = None
    cpsat_status: str | None = None
    gap: float | None = None
    notes: tuple[str, ...] = field(default=())
    time_limit_s: float | None = None
    work_budget_s: float | None = None
    wall_stopped: bool = False

    @property
    def placement(self) -> Placement:
        return self.best.placement

    @property
    def objective_s(self) -> float:
        """The objective value of the best plan (makespan or period, seconds)."""
        return self.best.score(self.objective)

    @property
    def makespan_s(self) -> float:
        return self.best.makespan_s

    @property
    def throughput_rps(self) -> float:
        return self.best.throughput_rps

    @property
    def feasible(self) -> bool:
        return self.best.feasible

    @property
    def devices_used(self) -> list[str]:
        """Devices the plan uses, in machine order."""
        used = set(self.best.placement.devices_used())
        return [d for d in self.machine_devices if d in used]

    def labels(self) -> list[str]:
        """Labels of the alternatives tried, in order, without repeats."""
        return list(dict.fromkeys(a.label for a in self.alternatives))

    def best_baseline(self) -> tuple[str, float]:
        """The best baseline's (label, objective_s)."""
        return min(self.baselines, key=lambda kv: (kv[1], kv[0]))

    def to_json(self, *, include_time: bool = True) -> dict[str, Any]:
        """A JSON-ready summary (the ``search`` record of a plan file). Everything but
        ``search_time_s`` is a function of the inputs and the seed; ``include_time=False``
        leaves it out so that the same inputs give byte-identical output."""
        out: dict[str, Any] = {
            "strategy": self.strategy,
            "chosen": self.chosen,
            "objective": self.objective.value,
            "objective_s": _num(self.objective_s),
            "makespan_s": self.makespan_s,
            "throughput_rps": _num(self.throughput_rps),
            "lower_bound_s": self.lower_bound_s,
            "feasible": self.feasible,
            "devices_used": self.devices_used,
            "seed": self.seed,
            "dtypes": list(self.dtypes),
            "candidates_evaluated": self.candidates_evaluated,
            "estimates": self.estimates,
            "pruned": dict(self.pruned),
            "pruned_examples": {k: list(v) for k, v in self.pruned_examples},
            "baselines": {k: _num(v) for k, v in self.baselines},
            "alternatives": [a.to_json() for a in self.alternatives],
            "cpsat_bound_s": self.cpsat_bound_s,
            "cpsat_status": self.cpsat_status,
            "gap": self.gap,
            "notes": list(self.notes),
        }
        if include_time:
            out["search_time_s"] = self.search_time_s
            out["time_limit_s"] = self.time_limit_s
            out["work_budget_s"] = self.work_budget_s
            out["wall_stopped"] = self.wall_stopped
        return out


class Tracker:
    """Scores placements with the scheduler and keeps the record (see the module doc).

    ``evaluate(placement, label=None)`` returns ``(rank key, Evaluation)``; a placement
    seen before (memoized for graphs up to ``memo_max`` vertices) returns its key and
    ``None`` without evaluating again. A ``label`` records the plan as an alternative.
    ``problem`` scores it on a variant of the tracker's problem instead (e.g. with release
    times that replay HEFT's own schedule, ``Problem.released``): never memoized.

    An evaluation cannot be interrupted: ``can_evaluate()`` says whether one still fits in
    the budget (work clock and wall-clock deadline), its wall time estimated by
    ``eval_wall_s()`` — the slowest evaluation measured so far, or before the first one the
    work estimate times ``EVAL_WALL_FACTOR`` (scaled by the budget's ``speed`` relative to
    ``PRIOR_SPEED``).

    ``on_best(label, objective_s)`` is called whenever a better plan that fits is scored
    (a progress display shows the best objective so far; the library never prints).
    """

    def __init__(self, problem: Problem, objective: Objective, budget: Budget,
                 progress: Progress | None = None, *, memo_max: int = 5000,
                 on_best: Callable[[str, float], None] | None = None) -> None:
        self.problem = problem
        self._on_best = on_best
        self.objective = objective
        self.budget = budget
        self._progress = progress
        self.evaluated = 0
        self.estimates = 0
        self.best: Evaluation | None = None
        self.best_key: RankKey = (2, math.inf)
        self.best_label = ""
        self.phase = ""
        self.alternatives: list[Alternative] = []
        self.baselines: list[tuple[str, float]] = []
        self.notes: list[str] = []
        self._memo: dict[Placement, tuple[RankKey, Alternative]] | None = (
            {} if len(problem.vertices) <= memo_max else None)
        self._eval_s = EVAL_BASE_S + EVAL_VERTEX_S * len(problem.vertices)
        self._eval_wall_s = 0.0  # the slowest evaluation measured (wall seconds)

    def progress(self, message: str, fraction: float) -> None:
        if self._progress is not None:
            self._progress(message, min(1.0, max(0.0, fraction)))

    @property
    def eval_work_s(self) -> float:
        """The work one evaluation is charged."""
        return self._eval_s

    def eval_wall_s(self) -> float:
        """Estimated wall seconds of one evaluation (see the class docstring)."""
        if self._eval_wall_s > 0.0:
            return self._eval_wall_s
        return self._eval_s * EVAL_WALL_FACTOR * self.budget.speed / PRIOR_SPEED

    def can_evaluate(self, count: int = 1, *, work: bool = True) -> bool:
        """Whether ``count`` more evaluations fit in the budget: in the work left (unless
        ``work=False``, for loops that check the work budget themselves) and before the
        wall-clock deadline."""
        return self.budget.fits(count * self._eval_s if work else 0.0,
                                count * self.eval_wall_s())

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def _summary(self, label: str, ev: Evaluation, note: str = "") -> Alternative:
        return Alternative(label, ev.score(self.objective), ev.feasible, ev.makespan_s,
                           ev.pipeline.period_s, ev.throughput_rps, note)

    def evaluate(self, placement: Placement, *, label: str | None = None, note: str = "",
                 problem: Problem | None = None) -> tuple[RankKey, Evaluation | None]:
        memo = self._memo if problem is None else None
        if memo is not None:
            got = memo.get(placement)
            if got is not None:
                if label is not None:
                    a = got[1]
                    self.alternatives.append(Alternative(label, a.objective_s, a.feasible,
                                                         a.makespan_s, a.period_s,
                                                         a.throughput_rps, note))
                return got[0], None
        elif problem is None and self.best is not None and self.best.placement == placement:
            # too large to memoize, but the best so far is kept: no need to evaluate again
            if label is not None:
                self.alternatives.append(self._summary(label, self.best, note))
            return self.best_key, None
        clock = self.budget.clock
        t0 = clock()
        ev = evaluate(self.problem if problem is None else problem, placement)
        took = clock() - t0
        if took > self._eval_wall_s:
            self._eval_wall_s = took
        self.evaluated += 1
        self.budget.charge(self._eval_s)
        key = rank_key(ev, self.objective)
        summary = self._summary(label or self.phase, ev, note)
        if memo is not None:
            memo[placement] = (key, summary)
        if label is not None:
            self.alternatives.append(summary)
        if key < self.best_key:
            self.best, self.best_key = ev, key
            self.best_label = label or self.phase
            if self._on_best is not None and key[0] == 0:
                self._on_best(self.best_label, key[1])
        return key, ev

    def score_of(self, key: RankKey) -> float:
        """The objective value of a rank key (``inf`` if it does not fit)."""
        return key[1] if key[0] == 0 else math.inf

    def raise_if_nothing_fits(self) -> None:
        """Raise ``MemoryInfeasible`` (naming the tier and the bytes of the plan that came
        closest) when no placement tried fits."""
        best = self.best
        if best is None or best.feasible:
            return
        v = best.memory.violations[0]
        hint = ""
        for s in best.memory.suggestions:
            if s.possible and s.kind == "micro_batch":
                hint = f"; {s.micro_batches} micro-batches might fit ({s.note})"
                break
            if s.kind == "spill":
                hint = f"; spilling might fit ({s.note})"
                break
        raise MemoryInfeasible(
            f"no placement tried fits in memory: the closest ({self.best_label}) overflows "
            f"{'+'.join(v.devices)}/{v.tier} by {format_bytes(v.need_bytes - v.capacity_bytes)}"
            f" ({v.describe()}){hint}", device="+".join(v.devices), tier=v.tier,
            need_bytes=v.need_bytes, capacity_bytes=v.capacity_bytes)
