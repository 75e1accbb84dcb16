"""``plan_search``: one call that searches placements with a named strategy.

Strategy names (``--strategy`` on the command line): ``single:DEVICE``, ``greedy``,
``heft``, ``dp``, ``cpsat``, ``local``, ``auto`` (and ``exhaustive``, for small spaces).
Every strategy scores with the scheduler, and every search also scores the baselines
(``single:DEVICE`` for each device and ``greedy``) so that a result can be compared with
them. ``auto`` and ``local`` return the best plan the search scored; the other strategies
return their own plan.

The searched precisions are ``dtypes`` (default fp32, bf16, fp16, int8, as each device
supports them). When costing every (vertex, device, precision) would take more than about
a third of the time limit, each device's precisions are screened on a sample of vertices
and only the best two (or one) are explored; the result's notes say so.

Determinism: the same problem, arguments and seed give the same result (all but
``search_time_s``): the budget is a work estimate, not the wall clock, unless
``deterministic=False``.

>>> from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
>>> from placewise.schedule.placement import Problem
>>> from placewise.schedule.testing import ToyCostModel, toy_machine
>>> from placewise.units import DType
>>> x = Tensor("x", (1000,), DType.FP32, role=Role.INPUT)
>>> h = Tensor("h", (1000,), DType.FP32)
>>> y = Tensor("y", (1000,), DType.FP32, role=Role.OUTPUT)
>>> g = Graph.build("g", [x, h, y], [Op("a", OpKind.RELU, ("x",), ("h",)),
...                                  Op("b", OpKind.RELU, ("h",), ("y",))])
>>> m = toy_machine()
>>> prob = Problem(g, None, m, ToyCostModel(m))
>>> r = plan_search(prob, strategy="auto", time_limit_s=1.0)
>>> r.strategy, r.feasible, r.lower_bound_s <= r.objective_s, r.chosen in r.labels()
('auto', True, True, True)
>>> [label for label, _ in r.baselines]
['single:cpu', 'single:gpu', 'greedy']
>>> plan_search(prob, strategy="fastest")
Traceback (most recent call last):
...
placewise.errors.InputError: --strategy: unknown strategy 'fastest' (known: single:DEVICE, greedy, heft, dp, cpsat, local, auto, exhaustive)
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from placewise.errors import InputError, MemoryInfeasible, UnsupportedError
from placewise.schedule.evaluate import Objective
from placewise.schedule.placement import Problem
from placewise.search.auto import Context, auto
from placewise.search.result import Progress, SearchResult, Tracker
from placewise.search.space import (
    COST_QUERY_S,
    DEFAULT_DTYPES,
    EVAL_VERTEX_S,
    Budget,
    Model,
    SearchSpace,
    screen_dtypes,
)
from placewise.units import DType, format_bytes

__all__ = ["STRATEGIES", "Strategy", "parse_strategy", "plan_search"]

STRATEGIES = ("single:DEVICE", "greedy", "heft", "dp", "cpsat", "local", "auto", "exhaustive")
_NAMES = {s for s in STRATEGIES if s != "single:DEVICE"}
_EXHAUSTIVE_REFUSE = 1e7  # placements
_SCREEN_SHARE = 0.6  # of the time limit that the work before searching may take


@dataclass(frozen=True, slots=True)
class Strategy:
    """A parsed strategy name: ``name`` (``single`` for ``single:DEVICE``) and ``device``."""

    name: str
    device: str | None = None

    def __str__(self) -> str:
        return f"single:{self.device}" if self.name == "single" else self.name


def parse_strategy(text: str, devices: Sequence[str] | None = None) -> Strategy:
    """Parse a strategy name; ``devices`` (if given) checks ``single:DEVICE``.

    >>> parse_strategy("single:gpu0", ["cpu", "gpu0"])
    Strategy(name='single', device='gpu0')
    >>> parse_strategy("single:npu", ["cpu"])
    Traceback (most recent call last):
    ...
    placewise.errors.InputError: --strategy: single:npu: the machine has no device 'npu' (devices: cpu)
    """
    s = str(text).strip()
    if s.startswith("single:"):
        dev = s[len("single:"):].strip()
        if not dev:
            raise InputError("single:DEVICE needs a device name", place="--strategy")
        if devices is not None and dev not in devices:
            raise InputError(f"single:{dev}: the machine has no device {dev!r} (devices: "
                             f"{', '.join(devices)})", place="--strategy")
        return Strategy("single", dev)
    if s not in _NAMES:
        raise InputError(f"unknown strategy {s!r} (known: {', '.join(STRATEGIES)})",
                         place="--strategy")
    return Strategy(s)


def _objective(objective: Objective | str) -> Objective:
    if isinstance(objective, Objective):
        return objective
    try:
        return Objective(str(objective).strip().lower())
    except ValueError:
        raise InputError(f"unknown objective {objective!r} (known: latency, throughput)",
                         place="--objective") from None


def _dtypes(dtypes: Sequence[DType | str] | None) -> tuple[DType, ...]:
    if dtypes is None:
        return DEFAULT_DTYPES
    out: list[DType] = []
    for d in dtypes:
        if isinstance(d, DType):
            out.append(d)
            continue
        try:
            out.append(DType.parse(str(d)))
        except ValueError as exc:
            raise InputError(str(exc), place="--dtypes") from None
    if not out:
        raise InputError("the list of precisions to search is empty", place="--dtypes")
    return tuple(dict.fromkeys(out))


def _screening(problem: Problem, dtypes: tuple[DType, ...], time_limit_s: float
               ) -> tuple[dict[str, tuple[DType, ...]] | None, str]:
    """Precisions to explore per device (None: all) so that the work every strategy does
    before searching — costing the candidates, scoring the baselines, HEFT's crossings —
    stays under ``_SCREEN_SHARE`` of the limit (estimated, deterministic)."""
    n = len(problem.vertices)
    devices = problem.machine.devices
    per_dev = [sum(1 for d in dtypes if d in dev.dtypes) for dev in devices]
    fixed = (len(devices) + 2) * n * EVAL_VERTEX_S

    def estimate(keep: int) -> float:
        return 2 * n * sum(min(keep, c) for c in per_dev) * COST_QUERY_S + fixed

    allowance = _SCREEN_SHARE * time_limit_s
    full = max(per_dev, default=1)
    if estimate(full) <= allowance:
        return None, ""
    keep = next((k for k in range(full - 1, 0, -1) if estimate(k) <= allowance), 1)
    explore = screen_dtypes(problem, dtypes, keep)
    kept = ", ".join(f"{d}: {'/'.join(x.value for x in dts)}" for d, dts in explore.items())
    return explore, (f"precision screening: costing every precision of {n} vertices and the "
                     f"baselines would take about {estimate(full):.3g} s of the "
                     f"{time_limit_s:.3g} s limit; explored the best {keep} per device on a "
                     f"sample ({kept})")


def plan_search(problem: Problem, *, strategy: str = "auto",
                objective: Objective | str = Objective.LATENCY, time_limit_s: float = 10.0,
                seed: int = 0, progress: Progress | None = None,
                dtypes: Sequence[DType | str] | None = None, deterministic: bool = True
                ) -> SearchResult:
    """Search placements of ``problem`` with ``strategy`` for ``objective`` (see the module
    docstring). ``progress(message, fraction)`` is called as the search advances.

    Raises ``InputError`` (place ``--strategy``, ``--objective``, ``--time-limit``,
    ``--dtypes``) for bad arguments, ``UnsupportedError`` when ``dp`` (or ``exhaustive``,
    ``cpsat``) cannot handle the graph, ``MemoryInfeasible`` naming the tier and the bytes
    when the plan (or every plan tried) does not fit, ``Infeasible`` when a vertex can run
    nowhere.
    """
    t0 = time.perf_counter()
    strat = parse_strategy(strategy, problem.devices)
    obj = _objective(objective)
    if isinstance(time_limit_s, bool) or not isinstance(time_limit_s, int | float) or \
            not math.isfinite(time_limit_s) or time_limit_s <= 0:
        raise InputError(f"the time limit must be a positive number of seconds, got "
                         f"{time_limit_s!r}", place="--time-limit")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InputError(f"the seed must be an integer, got {seed!r}", place="--seed")
    dts = _dtypes(dtypes)
    budget = Budget(float(time_limit_s), deterministic=deterministic)
    if progress is not None:
        progress("costing candidates", 0.0)
    explore, screen_note = _screening(problem, dts, float(time_limit_s))
    space = SearchSpace(problem, dts, explore=explore)
    budget.charge(space.queries * COST_QUERY_S)
    model = Model(space)
    tracker = Tracker(problem, obj, budget, progress)
    if screen_note:
        tracker.note(screen_note)
    ctx = Context(space, model, tracker, seed=seed)
    tracker.progress("baselines", budget.spent_s() / budget.limit_s)
    ctx.baselines()
    name = strat.name
    label = str(strat)
    if name in ("heft", "cpsat", "local", "auto"):
        tracker.progress("heft", budget.spent_s() / budget.limit_s)
        ctx.heft()
    if name == "dp":
        ctx.dp()
    elif name == "cpsat":
        if ctx.cpsat(max(0.05, budget.left_s())) is None:
            label = "heft"
            tracker.note("cpsat: no solution found in time: the plan is its hint (heft)")
    elif name == "exhaustive":
        if space.size() > _EXHAUSTIVE_REFUSE:
            raise UnsupportedError(f"exhaustive: {space.size():.3g} placements is too many to "
                                   f"enumerate (limit {_EXHAUSTIVE_REFUSE:.0g}); use 'auto'")
        if ctx.exhaustive().choice is None:
            raise UnsupportedError("exhaustive: the time budget ended before any placement "
                                   "was scored")
    elif name == "local":
        ctx.local()
    elif name == "auto":
        auto(ctx)
    if name in ("local", "auto"):
        best = tracker.best
        assert best is not None
        chosen = tracker.best_label
        ev = best
    else:
        chosen = label
        ev = ctx.evaluation_of(ctx.labelled[label][1])
    if not ev.feasible:
        if tracker.best is not None and tracker.best.feasible:
            v = ev.memory.violations[0]
            raise MemoryInfeasible(
                f"the {chosen} plan does not fit in memory: {v.describe()} (overflow "
                f"{format_bytes(v.need_bytes - v.capacity_bytes)}); the {tracker.best_label} "
                f"plan fits: try --strategy auto", device="+".join(v.devices), tier=v.tier,
                need_bytes=v.need_bytes, capacity_bytes=v.capacity_bytes)
        tracker.raise_if_nothing_fits()
    if budget.wall_stopped:
        tracker.note("the wall-clock guard (three times the time limit plus two seconds) "
                     "ended the search: the result may differ between runs")
    objective_s = ev.score(obj)
    lb = max([space.lower_bound_s(throughput=obj is Objective.THROUGHPUT), *ctx.bounds])
    lb = min(lb, objective_s)
    gap = None
    if ctx.cpsat_bound_s is not None and objective_s > 0 and math.isfinite(objective_s):
        gap = max(0.0, (objective_s - ctx.cpsat_bound_s) / objective_s)
    tracker.progress("done", 1.0)
    return SearchResult(
        best=ev, strategy=str(strat), chosen=chosen, objective=obj,
        search_time_s=time.perf_counter() - t0, candidates_evaluated=tracker.evaluated,
        estimates=tracker.estimates, pruned=tuple(space.pruned_counts().items()),
        pruned_examples=tuple(space.pruned_examples().items()),
        alternatives=tuple(tracker.alternatives), baselines=tuple(tracker.baselines),
        lower_bound_s=lb, dtypes=tuple(d.value for d in space.dtypes), seed=seed,
        machine_devices=tuple(problem.devices), cpsat_bound_s=ctx.cpsat_bound_s,
        cpsat_status=ctx.cpsat_status, gap=gap, notes=tuple(tracker.notes))
