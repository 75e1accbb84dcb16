"""Joint placement and scheduling with OR-Tools CP-SAT: the best plan, and a proven bound.

The model, read like an OR-Tools sample (data, variables, constraints, objective, solve,
extract):

**Data.** Every vertex's candidates (device, precision) with their compute time; every
edge's delay for each pair of its ends' candidates (the conversion and transfer times of
the scheduler's policy, ``placewise.search.space.Comm``); each candidate's release (graph
inputs arriving from the host) and tail (graph outputs travelling back). Times are integer
*ticks* of ``tick_s`` = the best known objective / 100,000 (or a serial upper bound / 100,000
when none is known); every duration is rounded *down*, so the model never overstates a
time and its proven bound stays a bound (a path of ``k`` tasks loses less than ``k``
ticks).

**Latency.** Variables: ``start[v]``, ``end[v]``; a presence literal ``x[v,k]`` and an
optional interval of candidate ``k``'s length at ``start[v]`` for each candidate. Exactly
one ``x[v,k]`` per vertex; ``end[v] = start[v] + sum dur[v,k] x[v,k]``. Device lanes:
``NoOverlap`` of a one-lane device's intervals, ``Cumulative`` (demand 1, capacity = lanes)
otherwise. Devices sharing a CPU core (``Device.cores``; the scheduler lets one of them
hold it at a time): per such core, ``NoOverlap`` of the intervals of every device on it
when they all have one lane, else ``Cumulative`` with demand ``L / lanes`` and capacity
``L`` (the lanes' least common multiple: a relaxation of the one-device-at-a-time rule).
Precedence with crossing delays, linear in the producer's literals: for each
edge ``u -> v`` and consumer candidate ``kv``, ``start[v] >= end[u] + sum_ku
delay[ku,kv] x[u,ku]`` enforced when ``x[v,kv]``. Releases and tails likewise; the
makespan is at least every ``end[v] + tail``. Minimize the makespan.

**Throughput.** No times: each resource's occupancy (device lanes, link directions,
shared memory controllers' bytes / bandwidth) is a linear sum of the candidates' own parts
and, per edge, of ``z = x[u,ku] AND x[v,kv]`` times the crossing's parts; the period is at
least each occupancy over its lanes. Minimize the period. A tensor sent to several
consumers on one device is counted once per consumer (the scheduler sends it once).

**Memory** (both objectives), per device tier or pool of tiers that are one memory: a
literal per (weight, device, precision) says the weight is resident there (implied by any
vertex using it there); the resident weights, plus the inputs, outputs and scratch of any
vertex running there, must fit the capacity — a necessary condition of the scheduler's
memory model (its peaks also hold other live activations), bytes rounded down to KiB.

**What it leaves to the scheduler.** Link exclusivity, conversions occupying lanes,
memory-controller contention, the other live activations: the CP-SAT latency model is a
*relaxation* of the scheduler's (its proven bound is a lower bound of every placement's
makespan over the same candidates), but it optimizes the task order, which list
scheduling does not. Every solution found is checked independently against the model
(``check_solution``) before it is trusted and then re-evaluated by the scheduler, which
alone scores plans.

**Determinism.** One search worker, the given seed, and a *deterministic* time limit
(CP-SAT's work units, about seconds): the same inputs give the same plan. A wall-clock
limit of four times that (plus two seconds), or the search's deadline when it comes first
(``wall_limit_s``), stops a run on a loaded machine; the outcome then says so.

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
>>> cm = ToyCostModel(m, {(f"o{i}", d): 1.0 for i in range(2) for d in ("cpu", "gpu")})
>>> out = cpsat_search(Model(SearchSpace(Problem(g, None, m, cm), [DType.FP32])),
...                    time_limit_s=5.0, seed=0)
>>> out.status, sorted(a.device for a in out.placement.values()), out.checked
('OPTIMAL', ['cpu', 'gpu'], True)
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ortools.sat.python import cp_model

from placewise.errors import UnsupportedError
from placewise.schedule.placement import Placement, held_dtype
from placewise.search.space import Model

__all__ = ["CPSAT_MAX_VERTICES", "CpsatOutcome", "check_solution", "cpsat_search"]

CPSAT_MAX_VERTICES = 5000  # beyond this the model is refused (use ``local`` or ``auto``)
_TICKS = 20_000  # ticks in the reference objective
_KIB = 1024
# CP-SAT's deterministic time per second of budget: one deterministic unit took 2.7 to 7
# CPU seconds (depending on the model) on the 2-core development machine
DETERMINISTIC_PER_S = 0.15
BUILD_TERM_S = 2e-5  # building the model, per (edge x candidate pair) and per candidate


@dataclass(frozen=True, slots=True)
class Solution:
    """One solution of the model, as CP-SAT reported it (ticks)."""

    choice: tuple[int, ...]
    starts: tuple[int, ...]
    objective: int


@dataclass(frozen=True, slots=True)
class CpsatOutcome:
    """What CP-SAT found.

    ``status``: CP-SAT's (``OPTIMAL``, ``FEASIBLE``, ``INFEASIBLE``, ``UNKNOWN``);
    ``placement``/``choice``: the best solution that passed ``check_solution`` (``None``
    if none); ``objective_s``: its objective in the model; ``bound_s``: the proven lower
    bound of the model's optimum (seconds; never above the optimum thanks to rounding
    down); ``solutions``: every checked solution's candidate indexes, in the order found;
    ``rejected``: solutions that failed the check; ``tick_s``; ``wall_s``;
    ``wall_stopped``: the wall-clock guard ended the run (not reproducible).
    """

    placement: Placement | None
    choice: tuple[int, ...] | None
    status: str
    objective_s: float | None
    bound_s: float
    tick_s: float
    solutions: tuple[tuple[int, ...], ...]
    rejected: int
    wall_s: float
    deterministic_s: float
    wall_stopped: bool
    checked: bool
    notes: tuple[str, ...] = ()

    @property
    def optimal(self) -> bool:
        return self.status == "OPTIMAL"


class _Collect(cp_model.CpSolverSolutionCallback):
    def __init__(self, sel: list[cp_model.LinearExpr], starts: list[cp_model.IntVar],
                 obj: cp_model.IntVar) -> None:
        super().__init__()
        self._sel = sel
        self._starts = starts
        self._obj = obj
        self.found: list[Solution] = []

    def on_solution_callback(self) -> None:
        choice = tuple(int(self.value(e)) for e in self._sel)
        starts = tuple(self.value(s) for s in self._starts)
        self.found.append(Solution(choice, starts, self.value(self._obj)))


@dataclass(frozen=True, slots=True)
class _Data:
    """The model's data in ticks (see the module docstring)."""

    tick_s: float
    dur: list[list[int]]
    delay: list[list[list[int]]]  # per edge [ku][kv]
    release: list[list[int]]
    tail: list[list[int]]
    horizon: int


def _ticks(seconds: float, tick_s: float) -> int:
    return math.floor(seconds / tick_s + 1e-9)


def _data(model: Model, tick_s: float, horizon_s: float | None) -> _Data:
    sp = model.space
    ed = model.edges
    dur = [[_ticks(c, tick_s) for c in costs] for costs in sp.cost_s]
    delay: list[list[list[int]]] = []
    for e in range(len(ed.src)):
        u, v = ed.src[e], ed.dst[e]
        delay.append([[_ticks(model.delay(e, ku, kv), tick_s) for kv in range(len(sp.cands[v]))]
                      for ku in range(len(sp.cands[u]))])
    release = [[_ticks(model.release(i, k), tick_s) for k in range(len(sp.cands[i]))]
               for i in range(sp.n)]
    tail = [[_ticks(model.tail(i, k), tick_s) for k in range(len(sp.cands[i]))]
            for i in range(sp.n)]
    if horizon_s is not None:
        horizon = _ticks(horizon_s, tick_s) + sp.n + 2
    else:
        horizon = (sum(max(d) for d in dur) + sum(max(max(r) for r in d) for d in delay)
                   + max((max(r) for r in release), default=0)
                   + max((max(t) for t in tail), default=0) + 1)
    return _Data(tick_s, dur, delay, release, tail, max(1, horizon))


def _serial_upper_s(model: Model) -> float:
    """A makespan every placement's best schedule stays under: all work one after another."""
    sp = model.space
    ed = model.edges
    s = sum(max(c) for c in sp.cost_s)
    for e in range(len(ed.src)):
        u, v = ed.src[e], ed.dst[e]
        s += max(model.delay(e, ku, kv) for ku in range(len(sp.cands[u]))
                 for kv in range(len(sp.cands[v])))
    s += max((model.release(i, k) for i in range(sp.n) for k in range(len(sp.cands[i]))),
             default=0.0)
    s += max((model.tail(i, k) for i in range(sp.n) for k in range(len(sp.cands[i]))),
             default=0.0)
    return s


def _path_bounds(model: Model, data: _Data) -> tuple[list[int], list[int]]:
    """Per vertex: the earliest start any placement allows (cheapest costs and releases
    before it, crossings free) and the least time from its start to the end of the run
    (its cheapest cost and the cheapest path after it, tails included), in ticks."""
    p = model.problem
    n = model.space.n
    head = [0] * n
    for i in range(n):
        h = min(data.release[i])
        for u in p.preds[i]:
            h = max(h, head[u] + min(data.dur[u]))
        head[i] = h
    tail = [0] * n
    for i in range(n - 1, -1, -1):
        after = min(data.tail[i])
        for s in p.succs[i]:
            after = max(after, tail[s])
        tail[i] = min(data.dur[i]) + after
    return head, tail


def _pools(model: Model) -> list[tuple[int, tuple[int, ...]]]:
    """(capacity, device indexes) of every memory the model constrains (main tiers; tiers
    sharing a resource and a capacity are one pool)."""
    m = model.problem.machine
    groups: dict[tuple[str, int], list[int]] = {}
    out: list[tuple[int, tuple[int, ...]]] = []
    for di, d in enumerate(m.devices):
        t = d.main_memory
        if t.shared_with is not None:
            groups.setdefault((t.shared_with, t.capacity_bytes), []).append(di)
        else:
            out.append((t.capacity_bytes, (di,)))
    for (_, cap), devs in groups.items():
        out.append((cap, tuple(devs)))
    return out


def _add_memory(cp: cp_model.CpModel, model: Model, x: list[list[cp_model.IntVar]]) -> int:
    """Add the memory constraints that could bind; returns how many pools were constrained."""
    sp = model.space
    p = model.problem
    g = p.graph
    n_pools = 0
    for cap, devs in _pools(model):
        devset = set(devs)
        # could it bind? all weights at their largest, plus the largest vertex footprint
        max_w = 0
        max_act = 0
        for i in range(sp.n):
            for k, a in enumerate(sp.cands[i]):
                if sp.cand_dev[i][k] in devset:
                    nd = sp.need(i, a.dtype)
                    max_act = max(max_act, nd.activations_bytes + nd.scratch_bytes)
        params = {t for v in p.vertices for t in v.params}
        for t in params:
            tensor = g.tensor(t)
            max_w += max(held_dtype(tensor.dtype, dt).nbytes(tensor.numel) * len(devs)
                         for dt in sp.dtypes)
        if max_w + max_act <= cap:
            continue
        n_pools += 1
        resident: dict[tuple[str, int, int], cp_model.IntVar] = {}
        terms: list[tuple[int, cp_model.IntVar]] = []
        for i, v in enumerate(p.vertices):
            for k, a in enumerate(sp.cands[i]):
                di = sp.cand_dev[i][k]
                if di not in devset:
                    continue
                for t in v.params:
                    tensor = g.tensor(t)
                    dt = held_dtype(tensor.dtype, a.dtype)
                    key = (t, di, sp.dtypes.index(a.dtype) if dt is not tensor.dtype else -1)
                    lit = resident.get(key)
                    if lit is None:
                        lit = cp.new_bool_var(f"w[{t},{di},{dt.value}]")
                        resident[key] = lit
                        terms.append((dt.nbytes(tensor.numel) // _KIB, lit))
                    cp.add_implication(x[i][k], lit)
        weights = sum(c * lit for c, lit in terms)
        cap_k = cap // _KIB
        cp.add(weights <= cap_k)
        for i in range(sp.n):
            for k, a in enumerate(sp.cands[i]):
                if sp.cand_dev[i][k] not in devset or sp.cost_s[i][k] <= 0.0:
                    continue
                nd = sp.need(i, a.dtype)
                act = (nd.activations_bytes + nd.scratch_bytes) // _KIB
                if act > 0 and terms:
                    cp.add(weights + act <= cap_k).only_enforce_if(x[i][k])
    return n_pools


def cpsat_search(model: Model, *, throughput: bool = False, time_limit_s: float = 10.0,
                 seed: int = 0, hint: Sequence[int] | None = None,
                 hint_starts_s: Sequence[float] | None = None,
                 upper_bound_s: float | None = None, workers: int = 1,
                 memory: bool = True, wall_limit_s: float | None = None) -> CpsatOutcome:
    """Solve the model (see the module docstring).

    ``hint``: candidate indexes of a known good placement (e.g. HEFT's) and
    ``hint_starts_s`` its compute tasks' start times from the scheduler; ``upper_bound_s``
    its objective (sets the tick and the horizon). ``wall_limit_s``: the most wall-clock
    seconds the solver may run (the search's deadline; default the guard
    ``4 * time_limit_s + 2``). Raises ``UnsupportedError`` for graphs over
    ``CPSAT_MAX_VERTICES`` vertices.
    """
    sp = model.space
    n = sp.n
    if n > CPSAT_MAX_VERTICES:
        raise UnsupportedError(f"cpsat: {n} vertices is beyond what the model solves in "
                               f"useful time (limit {CPSAT_MAX_VERTICES}); use 'local' or "
                               f"'auto'")
    t0 = time.perf_counter()
    # ---- data --------------------------------------------------------------------------
    ref_s = upper_bound_s if upper_bound_s and upper_bound_s > 0 and math.isfinite(
        upper_bound_s) else (model.period_s(sp.best_k) if throughput else _serial_upper_s(model))
    tick_s = max(ref_s, 1e-12) / _TICKS
    data = _data(model, tick_s, upper_bound_s if not throughput else None)
    cp = cp_model.CpModel()
    # ---- variables ---------------------------------------------------------------------
    x = [[cp.new_bool_var(f"x[{i},{k}]") for k in range(len(sp.cands[i]))] for i in range(n)]
    for i in range(n):
        cp.add_exactly_one(x[i])
    starts: list[cp_model.IntVar] = []
    notes: list[str] = []
    if not throughput:
        obj, starts = _makespan_model(cp, model, data, x)
    else:
        obj = _throughput_model(cp, model, x, tick_s)
    if memory:
        pools = _add_memory(cp, model, x)
        if pools:
            notes.append(f"cpsat: memory constrained on {pools} tier(s)")
    # ---- objective and hints ------------------------------------------------------------
    cp.minimize(obj)
    if hint is not None:
        _add_hints(cp, x, starts, hint, hint_starts_s, tick_s)
    # ---- solve ---------------------------------------------------------------------------
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = max(1, workers)
    solver.parameters.interleave_search = True
    solver.parameters.random_seed = int(seed) & 0x7FFFFFFF
    solver.parameters.max_deterministic_time = max(0.005, time_limit_s * DETERMINISTIC_PER_S)
    wall_cap = 4.0 * time_limit_s + 2.0
    if wall_limit_s is not None:
        wall_cap = max(0.01, min(wall_cap, wall_limit_s - (time.perf_counter() - t0)))
    solver.parameters.max_time_in_seconds = wall_cap
    sel = [cp_model.LinearExpr.weighted_sum(xs, list(range(len(xs)))) for xs in x]
    collect = _Collect(sel, starts, obj)
    status = solver.solve(cp, collect)
    wall = time.perf_counter() - t0
    return _extract(model, data, solver, status, collect, throughput, tick_s, wall, wall_cap,
                    notes)


def _add_hints(cp: cp_model.CpModel, x: list[list[cp_model.IntVar]],
               starts: list[cp_model.IntVar], hint: Sequence[int],
               hint_starts_s: Sequence[float] | None, tick_s: float) -> None:
    """The known placement (and its start times) as the solver's first guess."""
    for i in range(len(x)):
        for k in range(len(x[i])):
            cp.add_hint(x[i][k], k == hint[i])
    if hint_starts_s is not None and starts:
        for i in range(len(x)):
            cp.add_hint(starts[i], _ticks(hint_starts_s[i], tick_s))


def _extract(model: Model, data: _Data, solver: cp_model.CpSolver, status: Any,
             collect: _Collect, throughput: bool, tick_s: float, wall: float,
             wall_cap: float, notes: list[str]) -> CpsatOutcome:
    """The outcome: every solution found that passes the independent check, the best."""
    sp = model.space
    name = solver.status_name(status)
    bound_s = max(0.0, solver.best_objective_bound) * tick_s if name in (
        "OPTIMAL", "FEASIBLE") else 0.0
    good: list[Solution] = []
    rejected = 0
    for sol in collect.found:
        problem = check_solution(model, data, sol, throughput=throughput)
        if problem:
            rejected += 1
            notes.append(f"cpsat: a solution failed the independent check: {problem}")
        else:
            good.append(sol)
    best = min(good, key=lambda s: s.objective) if good else None
    stopped = solver.wall_time >= wall_cap * 0.99 and name != "OPTIMAL"
    if stopped:
        notes.append("cpsat: stopped by the wall-clock guard; the result may differ between "
                     "runs")
    return CpsatOutcome(
        sp.placement(best.choice) if best else None, best.choice if best else None, name,
        best.objective * tick_s if best else None, bound_s, tick_s,
        tuple(s.choice for s in good), rejected, wall,
        solver.deterministic_time / DETERMINISTIC_PER_S, stopped,
        best is not None,
        tuple(notes))


def _makespan_model(cp: cp_model.CpModel, model: Model, data: _Data,
                    x: list[list[cp_model.IntVar]]
                    ) -> tuple[cp_model.IntVar, list[cp_model.IntVar]]:
    """Start and end times, device intervals, the makespan (and its redundant bounds);
    returns the makespan and the start times."""
    sp = model.space
    h = data.horizon
    head, tail = _path_bounds(model, data)
    starts: list[cp_model.IntVar] = []
    ends: list[cp_model.IntVar] = []
    by_dev: list[list[cp_model.IntervalVar]] = [[] for _ in sp.devices]
    load: list[list[tuple[int, cp_model.IntVar]]] = [[] for _ in sp.devices]
    for i in range(sp.n):
        lo = min(head[i], h)
        s = cp.new_int_var(lo, max(lo, h - tail[i] + min(data.dur[i])), f"start[{i}]")
        end_v = cp.new_int_var(0, h, f"end[{i}]")
        cp.add(end_v == s + sum(d * lit for d, lit in zip(data.dur[i], x[i], strict=True)))
        for k, d in enumerate(data.dur[i]):
            if d > 0:
                di = sp.cand_dev[i][k]
                by_dev[di].append(
                    cp.new_optional_fixed_size_interval_var(s, d, x[i][k], f"iv[{i},{k}]"))
                load[di].append((d, x[i][k]))
        starts.append(s)
        ends.append(end_v)
    obj = cp.new_int_var(0, h, "makespan")
    # redundant: each vertex's cheapest remaining path, each device's work
    for i in range(sp.n):
        cp.add(obj >= starts[i] + tail[i])
    for di, terms in enumerate(load):
        if terms:
            cp.add(obj * sp.lanes[di] >= sum(d * lit for d, lit in terms))
    for _, devs, demand, cap in _core_groups(model):
        terms = [(d * demand[di], lit) for di in devs for d, lit in load[di]]
        if terms:
            cp.add(obj * cap >= sum(d * lit for d, lit in terms))
    _makespan_constraints(cp, model, data, x, starts, ends, by_dev, obj)
    return obj, starts


def _makespan_constraints(cp: cp_model.CpModel, model: Model, data: _Data,
                          x: list[list[cp_model.IntVar]], starts: list[cp_model.IntVar],
                          ends: list[cp_model.IntVar],
                          by_dev: list[list[cp_model.IntervalVar]], obj: cp_model.IntVar
                          ) -> None:
    """No overlap on a device (cumulative over its lanes) and on shared cores; precedence
    with the transfer delay of the chosen candidates; release times; the makespan."""
    sp, ed = model.space, model.edges
    for di, ivs in enumerate(by_dev):
        if len(ivs) < 2:
            continue
        if sp.lanes[di] == 1:
            cp.add_no_overlap(ivs)
        else:
            cp.add_cumulative(ivs, [1] * len(ivs), sp.lanes[di])
    for _, devs, demand, cap in _core_groups(model):
        ivs = [iv for di in devs for iv in by_dev[di]]
        if len(ivs) < 2:
            continue
        if cap == 1:
            cp.add_no_overlap(ivs)
        else:
            cp.add_cumulative(ivs, [demand[di] for di in devs for _ in by_dev[di]], cap)
    for e in range(len(ed.src)):
        u, v = ed.src[e], ed.dst[e]
        cp.add(starts[v] >= ends[u])
        tab = data.delay[e]
        for kv in range(len(sp.cands[v])):
            col = [tab[ku][kv] for ku in range(len(sp.cands[u]))]
            if max(col) > 0:
                cp.add(starts[v] >= ends[u] + sum(c * lit for c, lit in zip(col, x[u],
                                                                           strict=True))
                       ).only_enforce_if(x[v][kv])
    for i in range(sp.n):
        if max(data.release[i]) > 0:
            cp.add(starts[i] >= sum(r * lit for r, lit in zip(data.release[i], x[i],
                                                               strict=True)))
        cp.add(obj >= ends[i] + sum(t * lit for t, lit in zip(data.tail[i], x[i],
                                                              strict=True)))


def _core_groups(model: Model) -> list[tuple[int, tuple[int, ...], dict[int, int], int]]:
    """Per CPU core that two or more devices are pinned to: (core, the device indexes on
    it, each device's demand, the capacity), demand ``L / lanes`` and capacity ``L`` =
    the least common multiple of those devices' lanes."""
    sp = model.space
    on: dict[int, list[int]] = {}
    for di, d in enumerate(model.problem.machine.devices):
        for c in sorted(set(d.cores or ())):
            on.setdefault(c, []).append(di)
    out = []
    for c, devs in sorted(on.items()):
        if len(devs) > 1:
            cap = math.lcm(*(sp.lanes[di] for di in devs))
            out.append((c, tuple(devs), {di: cap // sp.lanes[di] for di in devs}, cap))
    return out


def _throughput_model(cp: cp_model.CpModel, model: Model, x: list[list[cp_model.IntVar]],
                      tick_s: float) -> cp_model.IntVar:
    sp = model.space
    comm = model.comm
    ed = model.edges
    terms: list[list[tuple[int, cp_model.IntVar]]] = [[] for _ in range(comm.n_resources)]
    for i in range(sp.n):
        for k in range(len(sp.cands[i])):
            for r, s in model.io_parts(i, k):
                c = _ticks(s, tick_s)
                if c > 0:
                    terms[r].append((c, x[i][k]))
    for e in range(len(ed.src)):
        u, v = ed.src[e], ed.dst[e]
        for ku in range(len(sp.cands[u])):
            for kv in range(len(sp.cands[v])):
                parts = [(r, _ticks(s, tick_s)) for r, s in model.delay_parts(e, ku, kv)]
                parts = [(r, c) for r, c in parts if c > 0]
                if not parts:
                    continue
                z = cp.new_bool_var(f"z[{e},{ku},{kv}]")
                cp.add(z >= x[u][ku] + x[v][kv] - 1)
                for r, c in parts:
                    terms[r].append((c, z))
    total = sum(c for ts in terms for c, _ in ts)
    period = cp.new_int_var(0, max(1, total), "period")
    for r, ts in enumerate(terms):
        if ts:
            cp.add(period * comm.res_lanes[r] >= sum(c * lit for c, lit in ts))
    return period


def check_solution(model: Model, data: _Data, sol: Solution, *, throughput: bool) -> str:
    """Check a solution against the model independently of CP-SAT; '' if it holds, else
    the first violation found."""
    sp = model.space
    ed = model.edges
    n = sp.n
    if len(sol.choice) != n or any(not 0 <= k < len(sp.cands[i])
                                   for i, k in enumerate(sol.choice)):
        return "a vertex has no candidate chosen"
    if throughput:
        load = [0] * model.comm.n_resources
        for i, k in enumerate(sol.choice):
            for r, s in model.io_parts(i, k):
                load[r] += _ticks(s, data.tick_s)
        for e in range(len(ed.src)):
            for r, s in model.delay_parts(e, sol.choice[ed.src[e]], sol.choice[ed.dst[e]]):
                load[r] += _ticks(s, data.tick_s)
        for r, lv in enumerate(load):
            if lv > sol.objective * model.comm.res_lanes[r]:
                return f"resource {model.comm.res_names[r]} is busier than the period"
        return ""
    st = sol.starts
    end = [st[i] + data.dur[i][sol.choice[i]] for i in range(n)]
    for e in range(len(ed.src)):
        u, v = ed.src[e], ed.dst[e]
        need = end[u] + data.delay[e][sol.choice[u]][sol.choice[v]]
        if st[v] < need:
            return (f"vertex {model.problem.vertices[v].name!r} starts before its input from "
                    f"{model.problem.vertices[u].name!r} arrives")
    for i in range(n):
        k = sol.choice[i]
        if st[i] < data.release[i][k]:
            return f"vertex {model.problem.vertices[i].name!r} starts before its inputs exist"
        if end[i] + data.tail[i][k] > sol.objective:
            return f"vertex {model.problem.vertices[i].name!r} ends after the makespan"
    for di in range(len(sp.devices)):
        events: list[tuple[int, int]] = []
        for i in range(n):
            k = sol.choice[i]
            if sp.cand_dev[i][k] == di and data.dur[i][k] > 0:
                events.append((st[i], 1))
                events.append((end[i], -1))
        level = 0
        for _, dl in sorted(events):
            level += dl
            if level > sp.lanes[di]:
                return f"device {sp.devices[di]} runs more tasks at once than it has lanes"
    for core, _, demand, cap in _core_groups(model):
        events = []
        for i in range(n):
            k = sol.choice[i]
            di = sp.cand_dev[i][k]
            if di in demand and data.dur[i][k] > 0:
                events.append((st[i], demand[di]))
                events.append((end[i], -demand[di]))
        level = 0
        for _, dl in sorted(events):
            level += dl
            if level > cap:
                return f"devices sharing core {core} compute at the same time"
    return ""
