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

**Time.** ``time_limit_s`` bounds the search's wall-clock time. Within it the search spends
a deterministic *work budget* (``work_limit_s``, by default ``WORK_SHARE`` of the limit):
estimated seconds of work that every step charges, so that the same problem, arguments and
seed give the same result (all but ``search_time_s``) whenever the work budget ends the
search first. The limit is also a hard deadline: every loop checks it, and a step that
cannot be interrupted (costing the candidates, a scheduler evaluation, HEFT, the DP,
building CP-SAT's model) starts only if its estimated wall time fits before it. When the
deadline is what stopped the search, the result says so (``wall_stopped`` and a note) and
may differ between runs. ``deterministic=False`` lets the wall clock alone decide. A limit
too short for even the least search — costing every vertex on every device in one
precision and scoring one plan — is refused up front with ``InputError`` naming the time
it needs (``minimum_time_s``), and so is a costing step that the deadline cuts short.
``search_time_s`` records the time really spent.

**Memory.** ``check_scale`` refuses, with ``InputError``, a graph whose planning would not
fit in the memory available (``psutil.virtual_memory().available``); ``plan_search`` checks
what the search needs (``SEARCH_BYTES_PER_VERTEX``), the command line checks what the
whole ``plan`` command needs (``PLAN_BYTES_PER_OP``) right after loading the graph, before
anything large is built.

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
>>> check_scale(1_000_000, available_bytes=8 << 30)
Traceback (most recent call last):
...
placewise.errors.InputError: graph size: 1000000 ops is more than this machine can plan in memory: about 128.00 KiB per op (measured), 122.07 GiB in all, and 8.00 GiB is available; the most it can plan now is about 65536 ops
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import psutil

from placewise.errors import InputError, MemoryInfeasible, UnsupportedError
from placewise.schedule.evaluate import Evaluation, Objective, request_floor_s
from placewise.schedule.placement import Problem
from placewise.search.auto import Context, auto
from placewise.search.result import Progress, SearchResult, Tracker
from placewise.search.space import (
    COST_QUERY_S,
    DEFAULT_DTYPES,
    EVAL_BASE_S,
    EVAL_VERTEX_S,
    EVAL_WALL_FACTOR,
    HEFT_UNIT_S,
    PRIOR_SPEED,
    Budget,
    Model,
    SearchSpace,
    SearchStopped,
    screen_dtypes,
)
from placewise.units import DType, format_bytes

__all__ = [
    "DEFAULT_LIMIT_BASE_S",
    "DEFAULT_LIMIT_OP_S",
    "FINISH_BASE_S",
    "FINISH_OP_S",
    "LOAD_OP_S",
    "PLAN_BYTES_PER_OP",
    "SEARCH_BYTES_PER_VERTEX",
    "STRATEGIES",
    "WORK_SHARE",
    "CommandBudget",
    "Strategy",
    "check_scale",
    "default_time_limit_s",
    "finish_reserve_s",
    "minimum_time_s",
    "parse_strategy",
    "plan_search",
]

STRATEGIES = ("single:DEVICE", "greedy", "heft", "dp", "cpsat", "local", "auto", "exhaustive")
_NAMES = {s for s in STRATEGIES if s != "single:DEVICE"}
_EXHAUSTIVE_REFUSE = 1e7  # placements
_SCREEN_SHARE = 0.6  # of the work budget that the work before searching may take
# The deterministic work budget, as a share of the wall-clock limit: the work estimates ran
# 1.0-2.3 times slower than estimated on the (loaded) 2-core development machine (auto and
# local search on 18..1,000-vertex graphs) when it was set to half; with HEFT's crossings and
# the estimator's reads priced as measured (10,000-op layered and fork-join DAGs: costing,
# baselines, HEFT and local search at 0.7-1.0 wall seconds per second of work), half the
# limit ended a 20 s search after 7-10 s. 0.7 usually still ends first (reproducible); the
# deadline bounds the rest.
WORK_SHARE = 0.7
_FINISH_ITEM_S = 1e-6  # wall seconds per vertex and edge to finish (bound, result); 0.5 measured
# Memory the ``plan`` command needs per op of a task graph, beyond the loaded graph (peak RSS
# minus RSS after loading, over ops), measured with /usr/bin/time -v and psutil on layered
# task graphs (``generate("layered", n)``, 3 edges per task at most) on h100-sxm-server:
# 10,000 ops 1.38 GB peak, 50,000 ops 6.46 GB: 127 KiB per op, most of it building and
# writing the plan (the search alone: about 19 KiB per vertex).
PLAN_BYTES_PER_OP = 128 * 1024
SEARCH_BYTES_PER_VERTEX = 20 * 1024
# The ``plan`` command's wall-clock budget (``CommandBudget``). Without ``--time-limit`` the
# whole command gets ``DEFAULT_LIMIT_BASE_S + DEFAULT_LIMIT_OP_S * ops`` (1,000 ops 4.4 s,
# 10,000 ops 8 s, 100,000 ops 44 s), raised where the least search would not fit in it.
DEFAULT_LIMIT_BASE_S = 4.0
DEFAULT_LIMIT_OP_S = 4e-4
# Wall seconds to build the plan and write it after the search (``build_plan`` +
# ``save_plan``), at ``PRIOR_SPEED``: kept out of the search's deadline. Calibrated by
# ``benchmarks/search.py --suite cli``, which reports the estimate beside the time taken
# (build + write on generated task graphs, 1k-100k ops, on the 2-core development machine,
# plan file v2: 0.07-0.33 s at 1k, 1.1-2.7 s at 10k, 16-22 s at 100k; re-check it there
# whenever build_plan or save_plan change).
FINISH_BASE_S = 0.25
FINISH_OP_S = 2.2e-4
# Nominal wall seconds per op of loading the model and building the problem, for the
# deterministic work budget only (the deadline counts the time really spent).
LOAD_OP_S = 1.5e-4


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


def check_scale(ops: int, *, bytes_per_op: int = PLAN_BYTES_PER_OP,
                available_bytes: int | None = None, what: str = "plan",
                file: str | None = None) -> None:
    """Raise ``InputError`` (place ``graph size``) when ``ops`` ops (or vertices) times
    ``bytes_per_op`` exceeds the memory available (``available_bytes``, default
    ``psutil.virtual_memory().available``): the message gives the estimate, what is
    available and the most ops this machine can ``what`` (``plan``, ``search``) now."""
    avail = int(psutil.virtual_memory().available if available_bytes is None
                else available_bytes)
    need = ops * bytes_per_op
    if need <= avail:
        return
    raise InputError(
        f"{ops} ops is more than this machine can {what} in memory: about "
        f"{format_bytes(bytes_per_op)} per op (measured), {format_bytes(need)} in all, and "
        f"{format_bytes(avail)} is available; the most it can {what} now is about "
        f"{avail // bytes_per_op} ops", file=file, place="graph size")


def minimum_time_s(problem: Problem, dtypes: Sequence[DType | str] | None = None) -> float:
    """Estimated wall seconds of the least search of ``problem``: costing every vertex on
    every device in one precision and scoring one plan (at the reference speed,
    ``PRIOR_SPEED``); a time limit below it is refused."""
    dts = _dtypes(dtypes)
    n = len(problem.vertices)
    devs = sum(1 for dev in problem.machine.devices if any(d in dev.dtypes for d in dts))
    costing = n * max(1, devs) * COST_QUERY_S * PRIOR_SPEED
    return costing + _eval_wall_s(n) + _finish_s(problem)


def default_time_limit_s(ops: int) -> float:
    """The ``plan`` command's wall-clock limit when none is given: it grows with the graph.

    >>> default_time_limit_s(1_000), default_time_limit_s(10_000), default_time_limit_s(100_000)
    (4.4, 8.0, 44.0)
    """
    return round(DEFAULT_LIMIT_BASE_S + DEFAULT_LIMIT_OP_S * max(0, ops), 3)


def finish_reserve_s(ops: int, speed: float = PRIOR_SPEED) -> float:
    """Estimated wall seconds to build and write the plan of an ``ops``-op graph after the
    search, at ``speed`` (wall seconds per second of estimated work; the reference speed
    ``PRIOR_SPEED`` until costing has measured this machine's).

    >>> finish_reserve_s(10_000)
    2.45
    >>> finish_reserve_s(10_000, speed=2 * PRIOR_SPEED)
    4.9
    """
    return round((FINISH_BASE_S + FINISH_OP_S * max(0, ops)) * speed / PRIOR_SPEED, 6)


class CommandBudget:
    """The wall-clock budget of a whole command (load, search, build, write): ``limit_s``
    seconds from ``start`` (a ``clock`` reading; the command's start), of which
    ``reserve_s = finish_reserve_s(ops)`` is kept for building and writing the plan.
    ``least_s`` is what the least search needs (``minimum_time_s``). ``default`` says the
    limit is the size-scaled default (``default_time_limit_s``, ``raised`` where the least
    search would not fit in it), not the user's.

    ``too_short()``: the refusal (``InputError``) of a limit that cannot hold the least
    search and the reserve even with no time spent loading (it depends on the graph, not
    on how long loading happened to take), else ``None``.

    ``search_limits(share)`` gives a search its ``(time_limit_s, work_limit_s, reserve_s)``
    for ``plan_search``: ``share`` of the wall time left now (a command that searches
    several times gives each a share), but never less than its work budget nor 1.5 times
    the least search — when loading took what the search needed, the command overruns and
    says so (``overrun()``) rather than throw the loading away — with the reserve inside;
    and the deterministic work budget: ``WORK_SHARE`` of the *nominal* search time, the
    limit less the nominal load (``LOAD_OP_S`` per op) and the reserve, so that the same
    command gives the same plan whatever loading really took. ``text()`` is the line the
    command prints before searching.

    >>> t = [100.0]
    >>> b = CommandBudget(10.0, ops=10_000, start=99.0, clock=lambda: t[0], least_s=0.5)
    >>> b.spent_s(), b.reserve_s, b.too_short(), b.overrun()
    (1.0, 2.45, None, '')
    >>> b.search_limits()
    (9.0, 4.235, 2.45)
    >>> b.text()
    'time limit 10 s for the whole command: 1 s spent loading, up to 6.55 s searching, 2.45 s kept to build and write the plan'
    >>> t[0] = 108.0  # loading took 9 s
    >>> b.search_limits()[0], b.overrun()
    (6.685, 'loading took 9 s of the 10 s time limit: the search still gets 4.23 s (its work budget), so the command overruns')
    >>> CommandBudget.make(None, ops=1_000, start=0.0, clock=lambda: 0.0).text()[:54]
    'time limit 4.4 s (the default for 1000 ops: 4 s + 0.4 '
    >>> print(CommandBudget(1.0, ops=10_000, start=0.0, clock=lambda: 0.0, least_s=0.5).too_short())
    --time-limit: 1 s is too short for 10000 ops: the least search (costing every vertex on every device and scoring one plan) takes about 0.5 s and building and writing the plan about 2.45 s: give --time-limit 3 or more
    """

    __slots__ = ("aside", "clock", "default", "grown", "least_s", "limit_s", "ops", "raised",
                 "reserve_s", "start")

    def __init__(self, limit_s: float, *, ops: int, start: float, default: bool = False,
                 clock: Callable[[], float] = time.perf_counter, least_s: float = 0.0
                 ) -> None:
        self.limit_s = float(limit_s)
        self.ops = int(ops)
        self.start = float(start)
        self.default = default
        self.raised = False
        self.grown = False  # raised again after a search proved it too short (``grant``)
        self.clock = clock
        self.least_s = max(0.0, float(least_s))
        self.reserve_s = finish_reserve_s(ops)
        self.aside = 0.0  # the share of the nominal time set aside (``evidence_limits``)

    @classmethod
    def make(cls, limit_s: float | None, *, ops: int, start: float,
             clock: Callable[[], float] = time.perf_counter, least_s: float = 0.0
             ) -> CommandBudget:
        """The budget for ``limit_s`` (``None``: the default for ``ops``, raised so that
        1.5 times the least search fits after what was spent and the reserve)."""
        if limit_s is not None:
            return cls(_seconds(limit_s, "time limit", "--time-limit"), ops=ops, start=start,
                       clock=clock, least_s=least_s)
        b = cls(default_time_limit_s(ops), ops=ops, start=start, default=True, clock=clock,
                least_s=least_s)
        need = b.spent_s() + 1.5 * b.least_s + b.reserve_s
        if need > b.limit_s:
            b.limit_s = float(math.ceil(need))
            b.raised = True
        return b

    def spent_s(self) -> float:
        return self.clock() - self.start

    def left_s(self) -> float:
        """Wall seconds left of the limit (the reserve included)."""
        return self.limit_s - self.spent_s()

    def _nominal_s(self) -> float:
        return max(0.0, self.limit_s - LOAD_OP_S * self.ops - self.reserve_s)

    def _work_s(self, share: float) -> float:
        nominal = self._nominal_s() * (1.0 - self.aside) * share
        return WORK_SHARE * max(nominal, 1.5 * self.least_s, 1e-3)

    def evidence_limits(self, share: float) -> tuple[float, float]:
        """``(wall_s, work_s)`` for the quality evidence that comes before the searches:
        ``share`` of the wall time left now less the reserve, and ``share`` of the nominal
        search time (its deterministic work budget, in nominal seconds). The searches'
        work budgets then come out of the rest of the nominal time.

        >>> b = CommandBudget(10.0, ops=1_000, start=0.0, clock=lambda: 1.0)
        >>> b.evidence_limits(0.5), b.search_limits(0.5)[1]
        ((4.265, 4.69), 1.6415)
        """
        self.aside = min(max(share, 0.0), 1.0)
        wall = max(0.0, self.left_s() - self.reserve_s) * self.aside
        return round(wall, 6), round(self._nominal_s() * self.aside, 6)

    def raise_nominal(self, nominal_s: float) -> float:
        """Raise the *default* limit so that its nominal time (the limit less the nominal
        load and the reserve) holds ``nominal_s``; returns the limit. An explicit limit is
        the user's and is never raised."""
        assert self.default, "only the default limit is raised"
        need = math.ceil(nominal_s + LOAD_OP_S * self.ops + self.reserve_s)
        if need > self.limit_s:
            self.limit_s = float(need)
            self.raised = True
        return self.limit_s

    def _floor_s(self, share: float) -> float:
        return max(1.5 * self.least_s, self._work_s(share))

    def _search_s(self, share: float) -> float:
        return max(max(0.0, self.left_s() - self.reserve_s) * share, self._floor_s(share))

    def search_limits(self, share: float = 1.0) -> tuple[float, float, float]:
        return (round(self._search_s(share) + self.reserve_s, 6),
                round(self._work_s(share), 6), self.reserve_s)

    def too_short(self) -> InputError | None:
        need = self.least_s + self.reserve_s
        if need <= self.limit_s:
            return None
        return InputError(
            f"{self.limit_s:.3g} s is too short for {self.ops} ops: the least search "
            f"(costing every vertex on every device and scoring one plan) takes about "
            f"{self.least_s:.3g} s and building and writing the plan about "
            f"{self.reserve_s:.3g} s: give --time-limit {math.ceil(need)} or more",
            place="--time-limit")

    def grant(self, need_s: float) -> tuple[float, float, float]:
        """The limits for a search that a default limit proved too short for (it needs
        ``need_s`` seconds and the reserve): the default is raised to fit it (``raised``,
        noted by ``overrun()``); an explicit limit is the user's and is never raised."""
        assert self.default, "only the default limit is raised"
        limit = need_s * 1.25 + self.reserve_s
        self.limit_s = max(self.limit_s, math.ceil(self.spent_s() + limit))
        self.raised = True
        self.grown = True
        return (round(limit, 6), round(self._work_s(1.0), 6), self.reserve_s)

    def overrun(self) -> str:
        """A note when what is left cannot hold the least search and the reserve, else
        ``""``."""
        if self.grown:
            return (f"the default limit was raised to {self.limit_s:.3g} s: costing the "
                    f"candidates needed more than estimated")
        floor = self._floor_s(1.0)
        if self.left_s() - self.reserve_s >= floor:
            return ""
        return (f"loading took {self.spent_s():.3g} s of the {self.limit_s:.3g} s time "
                f"limit: the search still gets {floor:.3g} s (its work budget), so the "
                f"command overruns")

    def text(self) -> str:
        head = f"time limit {self.limit_s:.3g} s"
        if self.default:
            head += (f" (the default for {self.ops} ops: {DEFAULT_LIMIT_BASE_S:g} s + "
                     f"{DEFAULT_LIMIT_OP_S * 1e3:g} ms per op"
                     + (", raised to fit the least search" if self.raised else "")
                     + "; --time-limit to change)")
        line = (f"{head} for the whole command: {self.spent_s():.3g} s spent loading, up to "
                f"{self._search_s(1.0):.3g} s searching, {self.reserve_s:.3g} s kept to "
                f"build and write the plan")
        note = self.overrun()
        return f"{line}; {note}" if note else line


def _eval_wall_s(n: int) -> float:
    return (EVAL_BASE_S + EVAL_VERTEX_S * n) * EVAL_WALL_FACTOR


def _finish_s(problem: Problem) -> float:
    return 0.005 + _FINISH_ITEM_S * (len(problem.vertices) + len(problem.edges))


def _too_short(limit_s: float, n: int, why: str, need_s: float) -> InputError:
    """The refusal of a time limit too short; ``need_s`` (seconds the search needs) rides
    along on the error (a caller that chose the limit itself may grant it)."""
    err = InputError(f"{limit_s:.3g} s is too short for {n} vertices{why} about "
                     f"{need_s:.3g} s: give --time-limit {math.ceil(need_s)} or more",
                     place="--time-limit")
    err.need_s = need_s  # type: ignore[attr-defined]
    return err


def _costed(problem: Problem, dts: tuple[DType, ...], explore: dict[str, tuple[DType, ...]]
            | None, budget: Budget, limit_s: float) -> SearchSpace:
    """The search space, costed under the deadline, leaving time for one evaluation (its
    estimate scaled by the speed costing shows so far); calibrates the budget's speed."""
    n = len(problem.vertices)
    clock = budget.clock
    t0 = clock()
    slow = [1.0]  # this machine's speed relative to PRIOR_SPEED, as costing measures it

    def stop(queries: int) -> bool:
        work = queries * COST_QUERY_S
        if work >= 0.05:
            slow[0] = max(1.0, (clock() - t0) / work / PRIOR_SPEED)
        return budget.stop_at(_eval_wall_s(n) * slow[0])()

    try:
        space = SearchSpace(problem, dts, explore=explore, stop=stop)
    except SearchStopped as exc:
        took = clock() - t0
        need = took * max(1, exc.total) / max(1, exc.done) + _eval_wall_s(n) * slow[0] + \
            _finish_s(problem) + budget.reserve_s + (t0 - budget.start)
        raise _too_short(limit_s, n, f" on this machine now: costing the candidates reached "
                         f"the deadline after {exc.done} of {exc.total} vertices "
                         f"({took:.3g} s); costing them all and scoring one plan needs",
                         need) from None
    work = space.queries * COST_QUERY_S
    budget.charge(work)
    if work >= 0.05:
        budget.calibrate(clock() - t0, work)
    return space


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
    stays under ``_SCREEN_SHARE`` of the work budget ``time_limit_s`` (estimated,
    deterministic)."""
    n = len(problem.vertices)
    ne = len(problem.edges)
    devices = problem.machine.devices
    # a precision restriction on every vertex (the policy KEEP: the model's own) leaves
    # only the precisions it names to cost
    limits = problem.precision
    if len(limits) == n and n:
        allowed = frozenset().union(*limits.values())
        dtypes = tuple(d for d in dtypes if d in allowed)
    per_dev = [sum(1 for d in dtypes if d in dev.dtypes) for dev in devices]
    # the baselines and HEFT's plan, scored
    fixed = (len(devices) + 2) * (EVAL_BASE_S + n * EVAL_VERTEX_S)

    def estimate(keep: int) -> float:
        per_vertex = sum(min(keep, c) for c in per_dev)  # candidates, at most
        cands = n * per_vertex
        heft = HEFT_UNIT_S * (cands + ne) + COST_QUERY_S * (ne + n) * per_vertex
        return cands * COST_QUERY_S + heft + fixed  # as Context.heft sizes HEFT

    allowance = _SCREEN_SHARE * time_limit_s
    full = max(per_dev, default=1)
    if full <= 1 or estimate(full) <= allowance:  # one precision a device: nothing to screen
        return None, ""
    keep = next((k for k in range(full - 1, 0, -1) if estimate(k) <= allowance), 1)
    explore = screen_dtypes(problem, dtypes, keep)
    kept = ", ".join(f"{d}: {'/'.join(x.value for x in dts)}" for d, dts in explore.items())
    return explore, (f"precision screening: costing every precision of {n} vertices, the "
                     f"baselines and HEFT would take about {estimate(full):.3g} s of the "
                     f"{time_limit_s:.3g} s work budget; explored the best {keep} per device "
                     f"on a sample ({kept})")


def plan_search(problem: Problem, *, strategy: str = "auto",
                objective: Objective | str = Objective.LATENCY, time_limit_s: float = 10.0,
                seed: int = 0, progress: Progress | None = None,
                dtypes: Sequence[DType | str] | None = None, deterministic: bool = True,
                work_limit_s: float | None = None,
                clock: Callable[[], float] = time.perf_counter, reserve_s: float = 0.0,
                on_best: Callable[[str, float], None] | None = None) -> SearchResult:
    """Search placements of ``problem`` with ``strategy`` for ``objective`` (see the module
    docstring). ``progress(message, fraction)`` is called as the search advances.
    ``time_limit_s`` bounds the wall-clock time; ``work_limit_s`` is the deterministic work
    budget (default ``WORK_SHARE * time_limit_s``); ``clock`` measures wall time.
    ``reserve_s``: wall seconds of ``time_limit_s`` the caller keeps for after the search
    (building and writing the plan; scaled by the speed costing measures), so that the
    search ends that much before the limit. ``on_best(label, objective_s)`` is called each
    time the search scores a better plan (the command line's progress bar shows it).

    Raises ``InputError`` (place ``--strategy``, ``--objective``, ``--time-limit``,
    ``--dtypes``) for bad arguments or a time limit too short for the least search of this
    graph, and (place ``graph size``) for a graph too large for the memory available;
    ``UnsupportedError`` when ``dp`` (or ``exhaustive``, ``cpsat``) cannot handle the graph;
    ``MemoryInfeasible`` naming the tier and the bytes when the plan (or every plan tried)
    does not fit; ``Infeasible`` when a vertex can run nowhere.
    """
    strat = parse_strategy(strategy, problem.devices)
    obj = _objective(objective)
    limit = _seconds(time_limit_s, "time limit", "--time-limit")
    work_limit = WORK_SHARE * limit if work_limit_s is None else _seconds(
        work_limit_s, "work limit", "work_limit_s")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InputError(f"the seed must be an integer, got {seed!r}", place="--seed")
    dts = _dtypes(dtypes)
    check_scale(len(problem.vertices), bytes_per_op=SEARCH_BYTES_PER_VERTEX, what="search")
    budget = (Budget(work_limit, deadline_s=limit, clock=clock) if deterministic else
              Budget(limit, deadline_s=limit, deterministic=False, clock=clock))
    keep = max(0.0, float(reserve_s))
    budget.reserve_s = keep
    _check_time(problem, dts, limit, keep)
    if progress is not None:
        progress("costing candidates", 0.0)
    explore, screen_note = _screening(problem, dts, budget.limit_s)
    space = _costed(problem, dts, explore, budget, limit)
    budget.reserve_s = (_finish_s(problem) + keep) * budget.speed / PRIOR_SPEED
    tracker = Tracker(problem, obj, budget, progress, on_best=on_best)
    if screen_note:
        tracker.note(screen_note)
    ctx = Context(space, Model(space), tracker, seed=seed, keep=str(strat))
    label = _run(ctx, strat.name, str(strat))
    chosen, ev = _chosen(ctx, strat.name, label)
    if budget.wall_stopped:
        tracker.note(f"the {limit:.3g} s time limit (the wall clock), not the work budget, "
                     f"stopped or cut short a step: the result may differ between runs")
    objective_s = ev.score(obj)
    lb = max([space.lower_bound_s(throughput=obj is Objective.THROUGHPUT), *ctx.bounds])
    if obj is Objective.LATENCY:  # the bounds are of the makespan; latency adds the hand-off
        lb += request_floor_s(problem)
    lb = min(lb, objective_s)
    gap = None
    if ctx.cpsat_bound_s is not None and objective_s > 0 and math.isfinite(objective_s):
        gap = max(0.0, (objective_s - ctx.cpsat_bound_s) / objective_s)
    tracker.progress("done", 1.0)
    return SearchResult(
        best=ev, strategy=str(strat), chosen=chosen, objective=obj,
        search_time_s=budget.wall_s(), candidates_evaluated=tracker.evaluated,
        estimates=tracker.estimates, pruned=tuple(space.pruned_counts().items()),
        pruned_examples=tuple(space.pruned_examples().items()),
        alternatives=tuple(tracker.alternatives), baselines=tuple(tracker.baselines),
        lower_bound_s=lb, dtypes=tuple(d.value for d in space.dtypes), seed=seed,
        machine_devices=tuple(problem.devices), cpsat_bound_s=ctx.cpsat_bound_s,
        cpsat_status=ctx.cpsat_status, gap=gap, notes=tuple(tracker.notes),
        time_limit_s=limit, work_budget_s=budget.limit_s if deterministic else None,
        wall_stopped=budget.wall_stopped)


def _check_time(problem: Problem, dts: tuple[DType, ...] | None, limit: float, keep: float
                ) -> None:
    """``InputError`` when the time limit cannot hold the least search (and what is kept)."""
    need = minimum_time_s(problem, dts)
    if need + keep > limit:
        why = ": costing every vertex on every device (one precision each) and scoring one " \
            "plan takes (estimated)"
        if keep:
            why += f" {need:.3g} s, and {keep:.3g} s are kept for after the search:"
        raise _too_short(limit, len(problem.vertices), why, need + keep)


def _run(ctx: Context, name: str, label: str) -> str:
    """Run strategy ``name`` (after the baselines and, where it helps, HEFT); the label of
    the plan it stands for (``heft`` when CP-SAT found none)."""
    tracker, budget, space = ctx.tracker, ctx.tracker.budget, ctx.space
    tracker.progress("baselines", budget.spent_s() / budget.limit_s)
    ctx.baselines(first=label if name in ("single", "greedy") else None)
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
        ctx.exhaustive()
    elif name == "local":
        ctx.local()
    elif name == "auto":
        auto(ctx)
    return label


def _chosen(ctx: Context, name: str, label: str) -> tuple[str, Evaluation]:
    """The plan the search returns (its label and evaluation): the strategy's, or the best
    scored for ``local``/``auto`` or when the strategy found none; ``MemoryInfeasible``
    when it does not fit."""
    tracker = ctx.tracker
    best = tracker.best
    assert best is not None  # the first baseline is always scored
    if name in ("local", "auto") or label not in ctx.labelled:
        if name not in ("local", "auto"):
            tracker.note(f"{label}: no plan within the time limit: the plan is the best "
                         f"scored ({tracker.best_label})")
        chosen = tracker.best_label
        ev = best
    else:
        chosen = label
        ev = ctx.evaluation_of(ctx.labelled[label][1])
    if not ev.feasible:
        if best.feasible:
            v = ev.memory.violations[0]
            raise MemoryInfeasible(
                f"the {chosen} plan does not fit in memory: {v.describe()} (overflow "
                f"{format_bytes(v.need_bytes - v.capacity_bytes)}); the {tracker.best_label} "
                f"plan fits: try --strategy auto", device="+".join(v.devices), tier=v.tier,
                need_bytes=v.need_bytes, capacity_bytes=v.capacity_bytes)
        tracker.raise_if_nothing_fits()
    return chosen, ev


def _seconds(value: float, what: str, place: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or \
            not math.isfinite(value) or value <= 0:
        raise InputError(f"the {what} must be a positive number of seconds, got {value!r}",
                         place=place)
    return float(value)
