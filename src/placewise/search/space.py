"""The search space every strategy shares: candidates, pruning, crossing costs, budget.

- ``SearchSpace``: for every vertex of a ``Problem``, the assignments (device, precision)
  search may give it, with their compute costs, and a count of the assignments left out
  with the reason (the device does not run one of its op kinds, does not compute in that
  precision, the cost model refuses, the vertex alone overflows the device's memory, or
  precision screening of a large graph did not explore it). Precisions are limited to a
  sensible set (``DEFAULT_DTYPES``: fp32, bf16, fp16, int8) intersected with what each
  device supports. Ties between candidates go to the device listed first and then to the
  higher precision (same time, better accuracy).
- ``Comm``: what it costs to get a tensor from the copy its producer wrote to the copy a
  consumer reads, following *exactly* the scheduler's policy (a representation change runs
  on the producer's device before sending when it makes the tensor smaller, else on the
  consumer's device after receiving; one transfer per hop of ``machine.route``). It answers
  the time (the delay a consumer sees in a contention-free run) and the occupancy of every
  resource (what pipelined throughput counts). Strategies use it to *estimate*; only the
  scheduler (``placewise.schedule.evaluate``) scores.
- ``Budget``: a deterministic work clock with a wall-clock deadline. Strategies charge it
  with estimated seconds of work (cost queries, evaluations, moves) so that the same inputs
  and seed always stop at the same point — wall-clock stops would make plans differ run to
  run. The time limit is also a hard wall-clock deadline: every loop checks it
  (``exhausted``), and a step that cannot be interrupted (costing, a scheduler evaluation,
  HEFT, the DP) first asks whether its estimated wall time still fits (``fits``). When the
  wall clock is what stopped a step, ``wall_stopped`` says so (the result may then differ
  between runs).

>>> from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
>>> from placewise.schedule.placement import Problem
>>> from placewise.schedule.testing import ToyCostModel, toy_machine
>>> x = Tensor("x", (1000,), DType.FP32, role=Role.INPUT)
>>> y = Tensor("y", (1000,), DType.FP32, role=Role.OUTPUT)
>>> g = Graph.build("g", [x, y], [Op("a", OpKind.RELU, ("x",), ("y",))])
>>> m = toy_machine()
>>> space = SearchSpace(Problem(g, None, m, ToyCostModel(m)))
>>> [str(a) for a in space.cands[0]]
['cpu/fp32', 'gpu/fp32', 'gpu/fp16']
>>> space.pruned_counts()
{'dtype': 5}
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from placewise.cost.model import Representation
from placewise.errors import Infeasible, MemoryInfeasible, UnsupportedError
from placewise.graph.ir import OpKind
from placewise.schedule.placement import Assignment, Placement, Problem, held_dtype
from placewise.units import DType, format_bytes

__all__ = [
    "DEFAULT_DTYPES",
    "PRUNE_REASONS",
    "Budget",
    "Comm",
    "SearchSpace",
    "SearchStopped",
    "screen_dtypes",
]

DEFAULT_DTYPES: tuple[DType, ...] = (DType.FP32, DType.BF16, DType.FP16, DType.INT8)

# why an assignment was left out, in reporting order
PRUNE_REASONS = ("kind", "dtype", "precision policy", "cost model", "memory", "screened")

# estimated seconds of work on the 2-core development machine (they drive the work clock;
# they need not be accurate, only deterministic and roughly proportional)
COST_QUERY_S = 6e-5  # one cost-model answer (op x device x dtype)
EVAL_BASE_S = 4e-4  # one full scheduler evaluation, fixed part
EVAL_VERTEX_S = 2.5e-5  # one full scheduler evaluation, per vertex (12-30 us measured)
MOVE_VERTEX_S = 2.5e-6  # one incremental estimate, per vertex or edge read (with revert)
MOVE_BASE_S = 2e-5  # one incremental estimate, fixed part
HEFT_UNIT_S = 2.4e-5  # HEFT, per candidate and per edge (crossings charged apart)
# one crossing HEFT computed (``Comm.copy``), charged after HEFT ran: HEFT sizes itself with
# COST_QUERY_S per crossing (an upper estimate), but charged at it HEFT used 2-2.6 times its
# wall time of the work budget (10,000-op layered and fork-join DAGs on h100-sxm-server,
# 59-63k crossings: 1.9-2.4 s wall, charged 4.7-5.0 s), leaving local search a fraction
HEFT_QUERY_S = 1.2e-5
DP_STATE_S = 2e-6  # one DP table entry
# Wall seconds per second of the work estimates above, for sizing steps that cannot be
# interrupted (``Budget.speed``, see ``Budget.fits``) before costing has measured it. Measured
# on the 2-core development machine under the load of other work (10,000 and 200,000-vertex
# layered graphs on h100-sxm-server): costing 1.07-1.56, HEFT 0.5-0.95 of its (upper)
# estimate; a scheduler evaluation 2.0-4.6 (2.5-2.7 for one device; it grows with the
# crossings), hence its own factor until the first evaluation is timed.
PRIOR_SPEED = 1.3
EVAL_WALL_FACTOR = 2.5  # at PRIOR_SPEED; scaled by speed / PRIOR_SPEED


class SearchStopped(Exception):
    """A step ran into the time limit's wall-clock deadline and was abandoned, after
    ``done`` of its ``total`` units of work. Internal: the search catches it, keeps what was
    scored before and notes the step."""

    def __init__(self, message: str, *, done: int = 0, total: int = 0) -> None:
        super().__init__(message)
        self.done = done
        self.total = total


class Budget:
    """A deterministic work clock with a wall-clock deadline (see the module docstring).

    ``limit_s``: the work budget, in estimated seconds of work that strategies ``charge``;
    ``deadline_s``: the wall-clock seconds the search may take from the budget's creation
    (default ``limit_s``), measured with ``clock`` (``time.perf_counter`` unless injected).
    ``exhausted()`` is true once the work reaches ``limit_s`` or the wall clock reaches the
    deadline less ``reserve_s`` (what finishing the search needs); ``wall_stopped`` then
    says the wall clock decided, so the result may differ between runs. With
    ``deterministic=False`` the wall clock alone decides (``limit_s`` is then wall seconds).

    ``fits(work_s, wall_s=None)``: whether a step that cannot be interrupted, estimated at
    ``work_s`` seconds of work and ``wall_s`` wall seconds (default ``work_s * speed``), can
    still start: within the work left and before the deadline (less the reserve).
    ``speed`` is wall seconds per second of estimated work, measured on the costing step
    (``calibrate``), ``PRIOR_SPEED`` before it. ``stop_at(s)`` is a check for long steps
    that turns true ``s`` seconds (and the reserve) before the deadline.

    >>> b = Budget(1.0)
    >>> b.charge(0.4); b.left_s(), b.exhausted()
    (0.6, False)
    >>> b.fits(0.5), b.fits(0.7)
    (True, False)
    >>> b.charge(0.7); b.exhausted(), b.wall_stopped
    (True, False)
    >>> t = [0.0]
    >>> late = Budget(5.0, deadline_s=10.0, clock=lambda: t[0])
    >>> t[0] = 10.5
    >>> late.exhausted(), late.wall_stopped, late.fits(0.0, 0.1), late.stop_at(0.0)()
    (True, True, False, True)
    """

    __slots__ = ("clock", "deadline_s", "deterministic", "limit_s", "reserve_s", "speed",
                 "start", "used_s", "wall_stopped")

    def __init__(self, limit_s: float, *, deadline_s: float | None = None,
                 deterministic: bool = True, clock: Callable[[], float] = time.perf_counter
                 ) -> None:
        self.limit_s = max(0.0, float(limit_s))
        self.deadline_s = self.limit_s if deadline_s is None else max(0.0, float(deadline_s))
        self.deterministic = deterministic
        self.used_s = 0.0
        self.clock = clock
        self.start = clock()
        self.wall_stopped = False
        self.speed = PRIOR_SPEED
        self.reserve_s = 0.0

    def charge(self, seconds: float) -> None:
        self.used_s += seconds

    def wall_s(self) -> float:
        return self.clock() - self.start

    def wall_left_s(self) -> float:
        """Wall-clock seconds left before the deadline (less the reserve)."""
        return max(0.0, self.deadline_s - self.reserve_s - self.wall_s())

    def spent_s(self) -> float:
        """Work done so far: the estimate (deterministic) or the wall clock."""
        return self.used_s if self.deterministic else self.wall_s()

    def left_s(self) -> float:
        return round(max(0.0, self.limit_s - self.spent_s()), 9)

    def calibrate(self, wall_s: float, work_s: float) -> None:
        """Set ``speed`` from a step that took ``wall_s`` for ``work_s`` of estimated work
        (kept within 0.1..10: one noisy step must not make later sizing absurd)."""
        if work_s > 0.0 and wall_s > 0.0:
            self.speed = min(10.0, max(0.1, wall_s / work_s))

    def _late(self, wall_s: float) -> bool:
        """Whether ``wall_s`` more seconds would pass the deadline (less the reserve);
        notes a wall-clock stop."""
        if self.wall_s() + wall_s + self.reserve_s < self.deadline_s:
            return False
        if self.deterministic:
            self.wall_stopped = True
        return True

    def exhausted(self) -> bool:
        return self.spent_s() >= self.limit_s or self._late(0.0)

    def fits(self, work_s: float, wall_s: float | None = None) -> bool:
        if self.deterministic and self.used_s + work_s > self.limit_s:
            return False
        return not self._late(work_s * self.speed if wall_s is None else wall_s)

    def stop_at(self, wall_s: float) -> Callable[[], bool]:
        """A check for a long step: true once fewer than ``wall_s`` seconds (what must
        still run after the step) and the reserve are left before the deadline."""
        return lambda: self._late(wall_s)


@dataclass(frozen=True, slots=True)
class _Need:
    """Bytes a vertex needs on its device while it runs (a necessary condition to fit)."""

    weights_bytes: int
    activations_bytes: int
    scratch_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.activations_bytes + self.scratch_bytes


class SearchSpace:
    """Candidate assignments of every vertex, their costs, and what was pruned (see the
    module docstring).

    ``dtypes``: the precisions search may choose (default ``DEFAULT_DTYPES``), each
    intersected with every device's supported ones. ``explore``: device -> the subset of
    ``dtypes`` to cost on it (precision screening of large graphs, see ``screen_dtypes``);
    a vertex left with no candidate by screening gets the unscreened ones back. ``stop``:
    called every 256 vertices with the number of cost-model queries made so far; when it
    returns true, costing is abandoned with ``SearchStopped`` (the time limit's deadline).

    Raises ``MemoryInfeasible`` when a vertex fits on no device (naming the tier and the
    bytes) and ``Infeasible`` when it can run nowhere for another reason.

    Attributes (indexed by vertex index, candidates in order): ``cands`` (assignments),
    ``cand_dev`` (device indexes), ``cost_s`` (compute seconds), ``mem_bytes`` (bytes the
    compute task moves through memory), ``best_k`` (the locally fastest candidate).
    """

    __slots__ = ("_examples", "_need", "_pruned", "best_k", "cand_dev", "cands", "cost_s",
                 "dev_dtypes", "devices", "dtypes", "lanes", "mem_bytes", "n", "problem",
                 "queries")

    def __init__(self, problem: Problem, dtypes: Sequence[DType] | None = None, *,
                 explore: Mapping[str, Sequence[DType]] | None = None,
                 stop: Callable[[int], bool] | None = None) -> None:
        self.problem = problem
        self.dtypes: tuple[DType, ...] = tuple(dict.fromkeys(dtypes or DEFAULT_DTYPES))
        if not self.dtypes:
            raise Infeasible("no precision to search: the dtype list is empty")
        m = problem.machine
        self.devices: tuple[str, ...] = problem.devices
        self.lanes: tuple[int, ...] = tuple(d.lanes for d in m.devices)
        self.dev_dtypes: tuple[tuple[DType, ...], ...] = tuple(
            tuple(dt for dt in self.dtypes if dt in d.dtypes) for d in m.devices)
        self.n = len(problem.vertices)
        self.queries = 0
        self._pruned: dict[str, int] = dict.fromkeys(PRUNE_REASONS, 0)
        self._examples: dict[str, list[str]] = {r: [] for r in PRUNE_REASONS}
        self._need: dict[tuple[int, DType], _Need] = {}
        self.cands: list[tuple[Assignment, ...]] = []
        self.cand_dev: list[tuple[int, ...]] = []
        self.cost_s: list[tuple[float, ...]] = []
        self.mem_bytes: list[tuple[int, ...]] = []
        self.best_k: list[int] = []
        kind_ok: list[dict[OpKind, bool]] = [{} for _ in m.devices]
        for v in problem.vertices:
            if stop is not None and not v.index % 256 and stop(self.queries):
                raise SearchStopped(f"costing stopped after {v.index} of {self.n} vertices "
                                    f"({self.queries} cost-model queries)", done=v.index,
                                    total=self.n)
            got = self._vertex(v.index, v.kinds, kind_ok, explore)
            if not got[0] and explore is not None:
                got = self._vertex(v.index, v.kinds, kind_ok, None)
            if not got[0]:
                self._fail(v.index)
            cands, devs, costs, mems = got
            self.cands.append(tuple(cands))
            self.cand_dev.append(tuple(devs))
            self.cost_s.append(tuple(costs))
            self.mem_bytes.append(tuple(mems))
            self.best_k.append(min(range(len(costs)), key=lambda k: (costs[k], k)))

    # ---- construction ----------------------------------------------------------------
    def _prune(self, reason: str, message: str) -> None:
        if self._count(reason):
            self._examples[reason].append(message)

    def _count(self, reason: str) -> bool:
        """Count a left-out assignment; whether its message is still wanted (the first
        three are kept): hot paths make the message only then."""
        self._pruned[reason] += 1
        return len(self._examples[reason]) < 3

    def need(self, vi: int, dtype: DType) -> _Need:
        """Bytes vertex ``vi`` computing in ``dtype`` holds on its device while it runs:
        its weights, its input and output copies, its declared scratch."""
        key = (vi, dtype)
        got = self._need.get(key)
        if got is None:
            p = self.problem
            v = p.vertices[vi]
            g = p.graph
            w = sum(held_dtype(g.tensor(t).dtype, dtype).nbytes(p.numel[t]) for t in v.params)
            a = sum(held_dtype(g.tensor(t).dtype, dtype).nbytes(p.numel[t])
                    for t in (*v.inputs, *v.outputs))
            got = _Need(w, a, v.scratch_bytes)
            self._need[key] = got
        return got

    def _vertex(self, vi: int, kinds: frozenset[OpKind], kind_ok: list[dict[OpKind, bool]],
                explore: Mapping[str, Sequence[DType]] | None
                ) -> tuple[list[Assignment], list[int], list[float], list[int]]:
        p = self.problem
        m = p.machine
        name = p.vertices[vi].name
        cands: list[Assignment] = []
        devs: list[int] = []
        costs: list[float] = []
        mems: list[int] = []
        for di, dev in enumerate(m.devices):
            ok = kind_ok[di]
            bad = None
            for k in kinds:
                s = ok.get(k)
                if s is None:
                    s = ok[k] = dev.supports(k)
                if not s:
                    bad = k
                    break
            if bad is not None:
                for _ in self.dtypes:
                    if self._count("kind"):
                        self._examples["kind"].append(f"vertex {name!r}: device {dev.name!r} "
                                                      f"does not run op kind {bad.value!r}")
                continue
            allowed = explore.get(dev.name) if explore is not None else None
            tier = dev.main_memory
            for dt in self.dtypes:
                if dt not in dev.dtypes:
                    if self._count("dtype"):
                        self._examples["dtype"].append(f"device {dev.name!r} does not compute "
                                                       f"in {dt.value}")
                    continue
                if not p.allows(vi, dt):
                    if self._count("precision policy"):
                        self._examples["precision policy"].append(
                            f"vertex {name!r}: the precision policy keeps it out of {dt.value}")
                    continue
                if allowed is not None and dt not in allowed:
                    if self._count("screened"):
                        self._examples["screened"].append(
                            f"vertex {name!r}: {dev.name}/{dt.value} not explored (precision "
                            f"screening)")
                    continue
                self.queries += 1
                try:
                    c = p.cost(vi, dev.name, dt)
                except UnsupportedError as exc:
                    self._prune("cost model", str(exc))
                    continue
                nd = self.need(vi, dt)
                need = nd.weights_bytes
                if c.total_s > 0.0:
                    need += nd.activations_bytes + max(nd.scratch_bytes, c.buffer_bytes)
                if need > tier.capacity_bytes:
                    self._prune("memory", f"vertex {name!r} on {dev.name}/{dt.value} needs "
                                          f"{format_bytes(need)} but {dev.name}/{tier.name} "
                                          f"holds {format_bytes(tier.capacity_bytes)}")
                    continue
                cands.append(Assignment(dev.name, dt))
                devs.append(di)
                costs.append(c.total_s)
                mems.append(c.memory_bytes)
        return cands, devs, costs, mems

    def _fail(self, vi: int) -> None:
        p = self.problem
        v = p.vertices[vi]
        # smallest overflow among the (device, dtype) pairs that run it: memory is the reason
        worst: tuple[int, int, str, str] | None = None
        for dev in p.machine.devices:
            if not all(dev.supports(k) for k in v.kinds):
                continue
            for dt in self.dtypes:
                if dt not in dev.dtypes or not p.allows(vi, dt):
                    continue
                try:
                    c = p.cost(vi, dev.name, dt)
                except UnsupportedError:
                    continue
                nd = self.need(vi, dt)
                need = nd.weights_bytes
                if c.total_s > 0.0:
                    need += nd.activations_bytes + max(nd.scratch_bytes, c.buffer_bytes)
                cap = dev.main_memory.capacity_bytes
                if worst is None or need - cap < worst[0] - worst[1]:
                    worst = (need, cap, dev.name, dev.main_memory.name)
        if worst is not None and worst[0] > worst[1]:
            need, cap, dname, tier = worst
            raise MemoryInfeasible(
                f"vertex {v.name!r} fits on no device: it needs at least {format_bytes(need)} "
                f"(weights, inputs, outputs and scratch) even on {dname}/{tier}, which holds "
                f"{format_bytes(cap)}", device=dname, tier=tier, need_bytes=need,
                capacity_bytes=cap)
        reasons = [ex for r in ("kind", "dtype", "precision policy", "cost model")
                   for ex in self._examples[r]
                   if v.name in ex or "does not compute" in ex][:3]
        raise Infeasible(f"vertex {v.name!r} can run on no device in "
                         f"{', '.join(d.value for d in self.dtypes)}"
                         + (": " + "; ".join(reasons) if reasons else ""))

    # ---- queries ---------------------------------------------------------------------
    def pruned_counts(self) -> dict[str, int]:
        """Reason -> assignments left out (only reasons that occurred)."""
        return {r: c for r, c in self._pruned.items() if c}

    def pruned_examples(self) -> dict[str, tuple[str, ...]]:
        """Reason -> up to three messages."""
        return {r: tuple(e) for r, e in self._examples.items() if e}

    def placement(self, choice: Sequence[int]) -> Placement:
        """The placement that gives vertex ``i`` its candidate ``choice[i]``."""
        names = self.problem.vertices
        return Placement.of((names[i].name, self.cands[i][k]) for i, k in enumerate(choice))

    def cheapest_s(self, vi: int) -> float:
        return self.cost_s[vi][self.best_k[vi]]

    def size(self) -> float:
        """The number of placements (product of the candidate counts), as a float."""
        return math.prod(float(len(c)) for c in self.cands)

    def lower_bound_s(self, *, throughput: bool = False) -> float:
        """A bound on every placement of the space: latency — the longest path with each
        vertex at its cheapest candidate (crossings free), the cheapest total work over
        every lane, and the work of vertices bound to one device over its lanes;
        throughput (the pipeline period) — the last two."""
        p = self.problem
        n = self.n
        cheap = [self.cheapest_s(i) for i in range(n)]
        total_lanes = sum(self.lanes)
        forced = [0.0] * len(self.devices)
        for i in range(n):
            devs = set(self.cand_dev[i])
            if len(devs) == 1:
                forced[next(iter(devs))] += cheap[i]
        work = max([sum(cheap) / total_lanes] +
                   [f / self.lanes[d] for d, f in enumerate(forced)])
        if throughput:
            return work
        fin = [0.0] * n
        for i in range(n):
            best = 0.0
            for q in p.preds[i]:
                if fin[q] > best:
                    best = fin[q]
            fin[i] = best + cheap[i]
        return max(work, max(fin, default=0.0))


def screen_dtypes(problem: Problem, dtypes: Sequence[DType], keep: int, *,
                  sample: int = 48) -> dict[str, tuple[DType, ...]]:
    """For each device, the ``keep`` precisions (of ``dtypes`` it supports) with the least
    total cost over an evenly spaced sample of vertices (unsupported vertices count as the
    sample's worst cost); ties go to the order of ``dtypes``. Used to keep the cost table
    of a very large graph within budget; deterministic."""
    n = len(problem.vertices)
    step = max(1, n // sample)
    picks = list(range(0, n, step))[:sample]
    out: dict[str, tuple[DType, ...]] = {}
    for dev in problem.machine.devices:
        options = [dt for dt in dtypes if dt in dev.dtypes]
        if len(options) <= keep:
            out[dev.name] = tuple(options)
            continue
        totals: list[tuple[int, float, int]] = []
        for pos, dt in enumerate(options):
            s = 0.0
            misses = 0
            for vi in picks:
                try:
                    s += problem.cost(vi, dev.name, dt).total_s
                except UnsupportedError:
                    misses += 1
            totals.append((misses, s, pos))
        totals.sort()
        out[dev.name] = tuple(options[t[2]] for t in totals[:keep])
    return out


class Comm:
    """Crossing costs under the scheduler's policy (see the module docstring).

    Resources are numbered: devices first (in machine order, ``lanes`` each), then link
    resources (one per direction of a duplex link, one for a simplex link), then shared
    resources (bandwidth; a task's occupancy is min(bytes / bandwidth, its duration), as in
    ``placewise.schedule.pipeline``). ``copy(t, d0, r0, d1, r1)``
    returns ``(seconds, parts)`` to obtain tensor ``t`` on device ``d1`` in rep id ``r1``
    from its producer's copy on ``d0`` in ``r0``; ``parts`` are ``(resource, occupancy_s)``.
    """

    __slots__ = ("_bw", "_copy", "_rid", "dev_ctrl", "dev_index", "host", "link_res", "problem",
                 "queries", "res_exclusive", "res_lanes", "res_names")

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        m = problem.machine
        self.host = problem.host
        self.dev_index = problem.device_index
        self.res_names: list[str] = [d.name for d in m.devices]
        self.res_lanes: list[int] = [d.lanes for d in m.devices]
        self.res_exclusive: list[bool] = [True] * len(m.devices)
        index = {n: i for i, n in enumerate(self.res_names)}
        shared_bw = {r.name: r.bandwidth_bytes_per_s for r in m.shared_resources}
        self.link_res: dict[tuple[str, str], tuple[int, bool]] = {}

        def add(name: str, exclusive: bool) -> int:
            if name not in index:
                index[name] = len(self.res_names)
                self.res_names.append(name)
                self.res_lanes.append(1)
                self.res_exclusive.append(exclusive)
            return index[name]

        for link in m.links:
            a, b = link.endpoints
            if link.resource is not None and link.resource in shared_bw:
                continue
            base = link.resource_name
            if link.duplex:
                self.link_res[(link.name, a)] = (add(base + ":fwd", True), True)
                self.link_res[(link.name, b)] = (add(base + ":rev", True), True)
            else:
                ri = add(base, True)
                self.link_res[(link.name, a)] = (ri, True)
                self.link_res[(link.name, b)] = (ri, True)
        for r in m.shared_resources:
            add(r.name, False)
        self._bw: list[float] = [0.0] * len(self.res_names)
        for r in m.shared_resources:
            self._bw[index[r.name]] = r.bandwidth_bytes_per_s
        for link in m.links:
            if link.resource is not None and link.resource in shared_bw:
                ri = index[link.resource]
                self.link_res[(link.name, link.endpoints[0])] = (ri, False)
                self.link_res[(link.name, link.endpoints[1])] = (ri, False)
        self.dev_ctrl: dict[str, tuple[int, ...]] = {}
        for d in m.devices:
            names = [*d.resources]
            if d.main_memory.shared_with:
                names.append(d.main_memory.shared_with)
            self.dev_ctrl[d.name] = tuple(index[n] for n in dict.fromkeys(names)
                                          if n in shared_bw)
        self.queries = 0  # crossings computed (each a few cost-model questions)
        self._rid: dict[tuple[str, DType], int] = {}
        self._copy: dict[tuple[str, str, int, str, int], tuple[float, tuple[tuple[int, float],
                                                                             ...]]] = {}

    @property
    def n_resources(self) -> int:
        return len(self.res_names)

    def rid(self, tensor: str, dtype: DType) -> int:
        """The rep id a vertex computing in ``dtype`` holds ``tensor`` in."""
        key = (tensor, dtype)
        r = self._rid.get(key)
        if r is None:
            p = self.problem
            nat = p.reps[p.natural_rid[tensor]]
            dt = held_dtype(nat.dtype, dtype)
            r = p.natural_rid[tensor] if dt is nat.dtype else p.rep_id(
                Representation(dt, nat.layout))
            self._rid[key] = r
        return r

    def vertex_parts(self, device: str, cost_s: float, mem_bytes: int
                      ) -> tuple[tuple[int, float], ...]:
        """Occupancy of a compute task: its lanes' time and its bytes on shared controllers."""
        di = self.dev_index[device]
        parts: list[tuple[int, float]] = [(di, cost_s)]
        if mem_bytes > 0:
            for c in self.dev_ctrl[device]:
                # a task occupies a controller at most while it runs (as the scheduler's
                # pipeline counts it)
                parts.append((c, min(mem_bytes / self._bw[c], cost_s)))
        return tuple(parts)

    def copy(self, tensor: str, d0: str, r0: int, d1: str, r1: int
             ) -> tuple[float, tuple[tuple[int, float], ...]]:
        key = (tensor, d0, r0, d1, r1)
        got = self._copy.get(key)
        if got is not None:
            return got
        p = self.problem
        steps: list[tuple[int, float]] = []
        total = 0.0
        self.queries += 1
        if d0 == d1 and r0 == r1:
            got = (0.0, ())
            self._copy[key] = got
            return got

        def conv(a: int, b: int, dev: str) -> float:
            c = p.conversion(tensor, a, b, dev)
            steps.append((self.dev_index[dev], c.total_s))
            if c.memory_bytes > 0:
                for ctrl in self.dev_ctrl[dev]:
                    steps.append((ctrl, min(c.memory_bytes / self._bw[ctrl], c.total_s)))
            return c.total_s

        def walk(rid: int) -> float:
            s = 0.0
            a = d0
            nbytes = p.copy_bytes(tensor, rid)
            for link in p.route(d0, d1):
                b = link.endpoints[1] if link.endpoints[0] == a else link.endpoints[0]
                c = p.transfer(tensor, rid, a, b)
                ri, exclusive = self.link_res[(link.name, a)]
                if exclusive:
                    steps.append((ri, c.total_s))
                if nbytes > 0:
                    ctrls = dict.fromkeys(((ri,) if not exclusive else ())
                                          + self.dev_ctrl[a] + self.dev_ctrl[b])
                    for ctrl in ctrls:
                        steps.append((ctrl, min(nbytes / self._bw[ctrl], c.total_s)))
                s += c.total_s
                a = b
            return s

        if r1 == r0:
            total = walk(r0)
        elif d1 == d0 or p.copy_bytes(tensor, r1) < p.copy_bytes(tensor, r0):
            total = conv(r0, r1, d0) + walk(r1)
        else:
            total = walk(r0) + conv(r0, r1, d1)
        got = (total, tuple(steps))
        self._copy[key] = got
        return got

    def copy_s(self, tensor: str, d0: str, r0: int, d1: str, r1: int) -> float:
        return self.copy(tensor, d0, r0, d1, r1)[0]


class Edges:
    """The region DAG as flat arrays for the strategies: for every edge its source and
    destination vertex indexes and tensor; for every vertex the graph inputs it reads (from
    the host) and the graph outputs it delivers (to the host)."""

    __slots__ = ("delivers", "dst", "e_in", "e_out", "reads", "src", "tensor")

    def __init__(self, problem: Problem) -> None:
        vi = problem.vertex_index
        self.src = [vi[e.src] for e in problem.edges]
        self.dst = [vi[e.dst] for e in problem.edges]
        self.tensor = [e.tensor for e in problem.edges]
        self.e_in = problem.in_edges
        self.e_out = problem.out_edges
        produced = problem.tensor_producer
        outs = set(problem.graph.outputs) if problem.outputs_to_host else set()
        self.reads: list[tuple[str, ...]] = [
            tuple(t for t in v.inputs if t not in produced) for v in problem.vertices]
        self.delivers: list[tuple[str, ...]] = [
            tuple(t for t in v.outputs if t in outs) for v in problem.vertices]


class Model:
    """Estimates for candidate choices (``choice[i]`` = candidate index of vertex ``i``)
    in the contention-free, unbounded-lane model: the delay of each edge, the release of a
    vertex (its graph inputs arriving from the host) and its tail (its graph outputs
    reaching the host), and per-resource occupancy for throughput."""

    __slots__ = ("_rel", "_tail", "comm", "edges", "problem", "space")

    def __init__(self, space: SearchSpace, comm: Comm | None = None) -> None:
        self.space = space
        self.problem = space.problem
        self.comm = comm or Comm(space.problem)
        self.edges = Edges(space.problem)
        self._rel: dict[tuple[int, int], float] = {}
        self._tail: dict[tuple[int, int], float] = {}

    def _src(self, vi: int, k: int, t: str) -> tuple[str, int]:
        a = self.space.cands[vi][k]
        return a.device, self.comm.rid(t, a.dtype)

    def delay(self, e: int, ku: int, kv: int) -> float:
        ed = self.edges
        t = ed.tensor[e]
        d0, r0 = self._src(ed.src[e], ku, t)
        d1, r1 = self._src(ed.dst[e], kv, t)
        return self.comm.copy_s(t, d0, r0, d1, r1)

    def delay_parts(self, e: int, ku: int, kv: int) -> tuple[tuple[int, float], ...]:
        ed = self.edges
        t = ed.tensor[e]
        d0, r0 = self._src(ed.src[e], ku, t)
        d1, r1 = self._src(ed.dst[e], kv, t)
        return self.comm.copy(t, d0, r0, d1, r1)[1]

    def release(self, vi: int, k: int) -> float:
        key = (vi, k)
        r = self._rel.get(key)
        if r is None:
            p = self.problem
            r = 0.0
            for t in self.edges.reads[vi]:
                d1, r1 = self._src(vi, k, t)
                r = max(r, self.comm.copy_s(t, p.host, p.natural_rid[t], d1, r1))
            self._rel[key] = r
        return r

    def tail(self, vi: int, k: int) -> float:
        key = (vi, k)
        r = self._tail.get(key)
        if r is None:
            p = self.problem
            r = 0.0
            for t in self.edges.delivers[vi]:
                d0, r0 = self._src(vi, k, t)
                r = max(r, self.comm.copy_s(t, d0, r0, p.host, p.natural_rid[t]))
            self._tail[key] = r
        return r

    def io_parts(self, vi: int, k: int) -> list[tuple[int, float]]:
        """Occupancy of the vertex's own task and of its graph inputs' and outputs' trips."""
        p = self.problem
        sp = self.space
        a = sp.cands[vi][k]
        parts = list(self.comm.vertex_parts(a.device, sp.cost_s[vi][k], sp.mem_bytes[vi][k]))
        for t in self.edges.reads[vi]:
            d1, r1 = self._src(vi, k, t)
            parts.extend(self.comm.copy(t, p.host, p.natural_rid[t], d1, r1)[1])
        for t in self.edges.delivers[vi]:
            d0, r0 = self._src(vi, k, t)
            parts.extend(self.comm.copy(t, d0, r0, p.host, p.natural_rid[t])[1])
        return parts

    def makespan_s(self, choice: Sequence[int]) -> float:
        """The longest path (compute + crossing delays, graph inputs from the host at 0,
        outputs back to the host): the makespan with unbounded lanes and no contention."""
        sp = self.space
        ed = self.edges
        n = sp.n
        fin = [0.0] * n
        span = 0.0
        for i in range(n):
            k = choice[i]
            s = self.release(i, k)
            for e in ed.e_in[i]:
                u = ed.src[e]
                t = fin[u] + self.delay(e, choice[u], k)
                if t > s:
                    s = t
            f = s + sp.cost_s[i][k]
            fin[i] = f
            end = f + self.tail(i, k)
            if end > span:
                span = end
        return span

    def loads(self, choice: Sequence[int]) -> list[float]:
        """Occupancy per resource (``Comm`` numbering), lanes and bandwidth applied."""
        comm = self.comm
        out = [0.0] * comm.n_resources
        ed = self.edges
        for i in range(self.space.n):
            for r, s in self.io_parts(i, choice[i]):
                out[r] += s
        for e in range(len(ed.src)):
            for r, s in self.delay_parts(e, choice[ed.src[e]], choice[ed.dst[e]]):
                out[r] += s
        return [x / comm.res_lanes[r] for r, x in enumerate(out)]

    def period_s(self, choice: Sequence[int]) -> float:
        """The busiest resource's occupancy (the pipeline period; a tensor sent to several
        consumers on one device is counted once per consumer, which the scheduler does not)."""
        return max(self.loads(choice), default=0.0)
