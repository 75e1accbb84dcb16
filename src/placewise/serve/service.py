"""What a batch costs: the plan's schedule at batch ``b``, from the one evaluator.

``PlanService(plan, ...)`` answers ``service(b)`` with the ``StageTimes`` the simulator
(``serve.sim``) runs: the latency of a batch of ``b`` through an idle pipeline
(``Evaluation.latency_s``: makespan plus the request hand-off), and for every resource the
pipelined throughput counts (``Evaluation.pipeline.occupancy_s``: devices, links, shared
cores, with the executor's own per-request work) its occupancy per batch and the time its
first task starts in the schedule (0 for the all-cores pseudo-resource). At saturation the
simulated service therefore runs at exactly the plan's throughput, and an isolated batch
takes exactly the plan's latency.

Two ways to price batch ``b`` (``--per-batch``):

- ``same``: the plan's placement re-evaluated on the model bound to batch ``b`` (the graph
  reloaded at ``b``, fused as the plan was, the same device and dtype per vertex);
- ``replan``: a new placement searched at batch ``b`` with the plan's strategy and
  objective (``time_limit_s`` each).

At the plan's own batch both must give the plan's own numbers; a model, machine or cost
model that differs from the plan's is refused (``InputError`` naming the fingerprint), and so
is a re-evaluation that does not reproduce the plan's latency.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from placewise.errors import InputError
from placewise.graph.fuse import fuse
from placewise.graph.load import load_model
from placewise.plan import check_fingerprints
from placewise.plan_workload import (
    member_placement,
    member_problem,
    plan_levels,
    prioritize,
)
from placewise.schedule.evaluate import evaluate
from placewise.schedule.pipeline import ALL_CORES
from placewise.schedule.placement import Problem
from placewise.search.api import plan_search
from placewise.serve.sim import StageTimes

if TYPE_CHECKING:
    from placewise.cost.model import CostModel
    from placewise.hardware.spec import Machine
    from placewise.plan import Plan
    from placewise.schedule.evaluate import Evaluation

__all__ = ["PER_BATCH", "MemberService", "PlanService", "predicted_compute_s",
           "service_interval", "stage_times"]

PER_BATCH = ("same", "replan")


def stage_times(ev: Evaluation) -> StageTimes:
    """The ``StageTimes`` of one evaluated batch (module docstring), resources in the
    order the schedule first uses them."""
    first: dict[str, float] = {}
    for t in ev.schedule.tasks:
        if t.start_s < first.get(t.resource, math.inf):
            first[t.resource] = t.start_s
        for c in t.cores:
            key = f"core:{c}"
            if t.start_s < first.get(key, math.inf):
                first[key] = t.start_s
    occ = [(name, w) for name, w in ev.pipeline.occupancy_s if w > 0]
    occ.sort(key=lambda kv: (0.0 if kv[0] == ALL_CORES else first.get(kv[0], 0.0), kv[0]))
    return StageTimes(float(ev.latency_s),
                      tuple(0.0 if n == ALL_CORES else float(first.get(n, 0.0)) for n, _ in occ),
                      tuple(float(w) for _, w in occ), tuple(n for n, _ in occ))


def service_interval(plan: Plan, *, tuned: bool) -> dict[str, tuple[float, float]]:
    """The service model's interval as factors on a batch's service, for p50 and for p99:
    for a ``tuned`` plan, how much its measurements moved when repeated
    (``ServiceRecord.spread`` and ``tail_spread``, half of each on either side); else the
    cost model's, the critical path's tasks (and the request hand-off) at their interval's
    ends over their predicted durations, for both.

    A plan with no interval recorded gives ``(1.0, 1.0)``."""
    if tuned and plan.service is not None:
        out = {}
        for q, s in (("p50", plan.service.spread), ("p99", plan.service.tail_spread)):
            out[q] = (max(0.0, 1.0 - s / 2), 1.0 + s / 2)
        return out
    return dict.fromkeys(("p50", "p99"), _cost_interval(plan))


def predicted_compute_s(plan: Plan) -> float:
    """The partition runs of one request on the plan's critical path (its compute tasks)."""
    tasks = plan.task_index()
    return float(sum(tasks[n].duration_s for n in plan.schedule.critical_path
                     if n in tasks and tasks[n].kind.value == "compute"))


def _cost_interval(plan: Plan) -> tuple[float, float]:
    """The cost model's interval of the plan's latency (``service_interval``)."""
    tasks = plan.task_index()
    path = [tasks[n] for n in plan.schedule.critical_path if n in tasks]
    mid = sum(t.duration_s for t in path)
    low = sum(t.low_s for t in path)
    high = sum(t.high_s for t in path)
    if plan.request is not None:
        mid += plan.request.latency_s
        low += plan.request.low_s
        high += plan.request.high_s
    if not (mid > 0 and high > 0):
        return (1.0, 1.0)
    return (min(1.0, low / mid), max(1.0, high / mid))


@dataclass
class PlanService:
    """The per-batch service of ``plan`` (module docstring). ``model``: the model
    reference (default: the plan's); ``machine``, ``cost_model``: what the plan was made
    for (checked by fingerprint); ``shapes``: the input bindings the plan was made with
    (``--shape``)."""

    plan: Plan
    machine: Machine
    cost_model: CostModel
    mode: str = "same"
    model: str | None = None
    shapes: Mapping[str, Sequence[int]] | None = None
    time_limit_s: float = 5.0
    file: str | None = None
    _cache: dict[int, Evaluation] = field(default_factory=dict, repr=False)
    _fused: bool | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.mode not in PER_BATCH:
            raise InputError(f"unknown per-batch mode {self.mode!r} (same or replan)",
                             place="--per-batch")
        check_fingerprints(self.plan, machine=self.machine,
                           calibration_fp=self.cost_model.fingerprint(), file=self.file)

    def __call__(self, b: int) -> StageTimes:
        return stage_times(self.evaluation(b))

    def problem(self, b: int) -> Problem:
        """The plan's problem with the model bound to batch ``b``."""
        ref = self.model or self.plan.model
        values = self.plan.values or None  # the inputs given a value when it was planned
        try:
            graph = load_model(ref, shapes=self.shapes, batch=b, values=values)
        except InputError as exc:
            if b != self.plan.batch or exc.place != "--batch":
                raise InputError(f"the plan cannot be priced at batch {b}: {exc.problem}",
                                 file=exc.file or ref, place="--per-batch") from None
            graph = load_model(ref, shapes=self.shapes, values=values)  # its own batch
        if b == self.plan.batch:
            check_fingerprints(self.plan, graph=graph, file=self.file)
        names = set(self.plan.regions)
        if self._fused is None:
            part = fuse(graph)
            self._fused = {r.name for r in part.regions} == names
            if not self._fused and {o.name for o in graph.ops} != names:
                raise InputError("the plan's vertices are neither the model's fused regions "
                                 "nor its ops", file=self.file, place="regions")
        partition = fuse(graph) if self._fused else None
        problem = Problem(graph, partition, self.machine, self.cost_model, batch=b)
        return prioritize(problem, plan_levels(self.plan))  # a workload's priorities

    def evaluation(self, b: int) -> Evaluation:
        """The evaluation of batch ``b`` (cached per batch size)."""
        if isinstance(b, bool) or not isinstance(b, int) or b < 1:
            raise InputError(f"a batch must be a positive integer, got {b!r}", place="batch")
        got = self._cache.get(b)
        if got is not None:
            return got

        problem = self.problem(b)
        if self.mode == "replan" and b != self.plan.batch:
            result = plan_search(problem, strategy=self.plan.strategy,
                                 objective=self.plan.objective.value,
                                 time_limit_s=self.time_limit_s, seed=self.plan.seed or 0)
            ev = result.best
        else:
            ev = evaluate(problem, self.plan.placement_obj())
            if b == self.plan.batch:
                want = self.plan.predicted_latency_s
                if not math.isclose(ev.latency_s, want, rel_tol=1e-6, abs_tol=1e-12):
                    raise InputError(
                        f"re-evaluating the plan at its own batch gives {ev.latency_s:.6g} s, "
                        f"the plan says {want:.6g} s: the model or cost model is not the one "
                        f"it was made with", file=self.file, place="latency_s")
        self._cache[b] = ev
        return ev

    def describe(self, b: int) -> dict[str, Any]:
        """A batch's figures for a report: latency, period, bottleneck, devices."""
        ev = self.evaluation(b)
        return {"batch": b, "latency_s": ev.latency_s, "period_s": ev.pipeline.period_s,
                "throughput_rps": ev.throughput_rps,
                "bottleneck": ev.pipeline.bottleneck_resource,
                "devices": sorted({a.device for a in ev.placement.values()}),
                "feasible": ev.feasible}


@dataclass
class MemberService:
    """The per-batch service of one model of a workload plan on its own (``serve.workload``):
    the workload's problem at batch ``b`` (``PlanService.problem``) restricted to the
    model's vertices (``plan_workload.member_problem``) under the plan's placement; its
    resources are the devices, links and cores by name, which the simulator shares between
    the models (``serve.sim``, ``shared``)."""

    whole: PlanService
    member: str
    _cache: dict[int, Evaluation] = field(default_factory=dict, repr=False)

    def __call__(self, b: int) -> StageTimes:
        return stage_times(self.evaluation(b))

    def evaluation(self, b: int) -> Evaluation:
        got = self._cache.get(b)
        if got is None:
            if b == self.whole.plan.batch:
                self.whole.evaluation(b)  # the workload's own batch: checked against the plan
            prob = member_problem(self.whole.problem(b), self.member)
            got = self._cache[b] = evaluate(prob, member_placement(
                self.whole.plan.placement_obj(), prob))
        return got
