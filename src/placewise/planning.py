"""One way to plan: a model on a machine, searched under a wall-clock budget, into a ``Plan``.

``placewise plan`` and ``placewise sweep`` (every cell) both call these:

- ``load_graph(model, shapes, batch)``: the model as a concrete graph;
- ``build_problem(model, machine, ...)``: graph, fused partition, cost model -> ``Problem``
  (refusing a graph too large to plan in memory first, ``check_scale``);
- ``plan_model(problem, model, clock=CommandBudget, ...)``: the precision policy around
  ``plan_search`` (a policy that may lower precision first gathers quality evidence within
  ``EVIDENCE_SHARE`` of the limit, ``precision.evidence.evidence_budget``; each search gets
  its share of what is left of ``clock``; a search that a *default* limit proved too short
  is granted what it needs), then ``build_plan``.

The machine is resolved by the caller (the command line probes ``local`` with a progress
bar; a sweep probes it once in the driver). Nothing here prints.

>>> from placewise.hardware.load import load_machine
>>> from placewise.search.api import CommandBudget, minimum_time_s
>>> m = load_machine("a100-pcie-server")
>>> prob = build_problem("zoo:mlp?layers=2", m, batch=2)
>>> clock = CommandBudget.make(2.0, ops=len(prob.graph.ops), start=0.0, clock=lambda: 0.0,
...                            least_s=minimum_time_s(prob))
>>> done = plan_model(prob, "zoo:mlp?layers=2", clock=clock)
>>> done.plan.batch, done.result.feasible, done.plan.predicted_latency_s > 0
(2, True, True)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from placewise.cost.load import load_cost_model
from placewise.errors import InputError
from placewise.graph.fuse import fuse
from placewise.graph.load import load_model
from placewise.plan import build_plan
from placewise.plan_workload import prioritize
from placewise.precision.evidence import (
    EVIDENCE_SHARE,
    evidence_budget,
    nominal_run_s,
    plan_precision,
)
from placewise.precision.policy import DEFAULT_BUDGET, LEAST_EVALUATIONS, Policy
from placewise.schedule.placement import Problem
from placewise.search.api import check_scale, plan_search

if TYPE_CHECKING:
    from placewise.graph.ir import Graph
    from placewise.hardware.spec import Machine
    from placewise.plan import Plan
    from placewise.precision.policy import EvidenceBudget, Outcome, QualityBudget
    from placewise.search.api import CommandBudget

__all__ = ["Planned", "build_problem", "load_graph", "plan_model"]


def load_graph(model: str, shapes: Mapping[str, Sequence[int]] | None = None,
               batch: int | None = None,
               values: Mapping[str, Sequence[float]] | None = None) -> Graph:
    """``model`` loaded with ``shapes`` and ``batch`` bound and the inputs in ``values``
    given their value, checked to be concrete."""
    if batch is not None and (isinstance(batch, bool) or batch <= 0):
        raise InputError(f"batch must be a positive integer, got {batch}", place="--batch")
    graph = load_model(model, shapes=shapes, batch=batch, values=values)
    graph.check_concrete(file=model)
    return graph


def build_problem(model: str, machine: Machine, *,
                  shapes: Mapping[str, Sequence[int]] | None = None, batch: int | None = None,
                  calibration: Path | None = None, fuse_ops: bool = True,
                  cost_model: Any = None, graph: Graph | None = None,
                  values: Mapping[str, Sequence[float]] | None = None) -> Problem:
    """The planning problem of ``model`` (bound to ``shapes`` / ``batch``) on ``machine``:
    its fused partition (unless ``fuse_ops`` is False) and the cost model (``cost_model``,
    else loaded for ``machine`` with ``calibration``). ``graph``: the model already loaded
    (by ``load_graph`` with the same bindings and checked with ``check_scale``)."""
    if graph is None:
        graph = load_graph(model, shapes, batch, values)
        check_scale(len(graph.ops), file=model)  # before anything that grows with the graph
    if cost_model is None:
        if calibration is not None and not Path(calibration).is_file():
            raise InputError("no such file", file=str(calibration))
        cost_model = load_cost_model(machine, calibration)
    partition = fuse(graph) if fuse_ops else None
    return Problem(graph, partition, machine, cost_model, batch=batch or 1)


@dataclass(frozen=True, slots=True)
class Planned:
    """What ``plan_model`` made: the ``plan``, the search ``result`` (``outcome.result``),
    the policy's ``outcome`` and precision ``record``, and the wall seconds spent searching
    (``search_s``, every search of the policy), building the plan (``build_s``) and
    gathering quality evidence (``evidence_s``: loading the model for emulation, the
    probes and re-checks; 0 for KEEP), and the evidence's work budget in emulated runs
    (``evidence_runs``; None for KEEP)."""

    plan: Plan
    outcome: Outcome
    record: dict[str, Any]
    search_s: float
    build_s: float
    evidence_s: float = 0.0
    evidence_runs: int | None = None

    @property
    def result(self) -> Any:
        return self.outcome.result


def plan_model(problem: Problem, model: str, *, clock: CommandBudget, strategy: str = "auto",
               objective: str = "latency", policy: Policy | None = None,
               budget: QualityBudget | None = None, seed: int = 0,
               shapes: Mapping[str, Sequence[int]] | None = None, batch: int | None = None,
               inputs: Path | None = None, progress: Callable[[str, float], None] | None = None,
               on_best: Callable[[str, float], None] | None = None,
               values: Mapping[str, Sequence[float]] | None = None,
               sources: Mapping[str, Any] | None = None,
               streams: Mapping[str, Any] | None = None) -> Planned:
    """Search ``problem`` (made from ``model`` with ``shapes`` / ``batch`` / ``values``,
    which the plan records) under the
    precision ``policy`` (default KEEP) and quality ``budget`` with ``strategy`` for
    ``objective`` within ``clock``, and build the plan (module docstring) with the
    ``sources`` record (``placewise.plan_sources.sources_json``) and a workload's
    ``streams`` (``graph.workload``). Raises what
    ``plan_search`` and ``plan_precision`` raise (``InputError``, ``MemoryInfeasible``...).
    """
    pol = Policy.KEEP if policy is None else policy
    if streams:
        problem = prioritize(problem, {m: st.priority for m, st in streams.items()})
    # a policy that may lower precision searches more than once: each search gets half of
    # what is left, so that the last still fits
    share = 1.0 if pol is Policy.KEEP else 0.5
    searched = [0.0]

    def search(prob: Any) -> Any:
        limits = clock.search_limits(share)
        t0 = time.perf_counter()
        try:
            for retry in (False, True):
                limit_s, work_s, reserve_s = limits
                try:
                    return plan_search(prob, strategy=strategy, objective=objective,
                                       time_limit_s=limit_s, work_limit_s=work_s,
                                       reserve_s=reserve_s, seed=seed, progress=progress,
                                       on_best=on_best)
                except InputError as exc:
                    # the default limit is ours: a search it proved too short gets what it
                    # needs (costs already computed are kept by the problem)
                    need = getattr(exc, "need_s", None)
                    if retry or not clock.default or need is None:
                        raise
                    limits = clock.grant(need)
            raise AssertionError("unreachable")
        finally:
            searched[0] += time.perf_counter() - t0

    evidence = _evidence_budget(problem, clock) if pol is not Policy.KEEP else None
    t0 = time.perf_counter()
    outcome, record = plan_precision(problem, model, pol, budget or DEFAULT_BUDGET, search,
                                     shapes=shapes, batch=batch, inputs=inputs,
                                     progress=progress, evidence=evidence,
                                     values=values)
    evidence_s = time.perf_counter() - t0 - searched[0]
    t0 = time.perf_counter()
    plan = build_plan(outcome.problem, outcome.result, model_ref=model, objective=objective,
                      strategy=strategy, seed=seed, precision=record, values=values,
                      sources=sources, streams=streams)
    return Planned(plan, outcome, record, searched[0], time.perf_counter() - t0, evidence_s,
                   evidence.evaluations if evidence is not None else None)


def _evidence_budget(problem: Problem, clock: CommandBudget) -> EvidenceBudget:
    """The quality evidence's budget: ``EVIDENCE_SHARE`` of the limit's nominal time in
    emulated runs (deterministic), none started once its share of the wall time left (at
    least that nominal time, as a search gets its work budget) has passed. A *default* limit
    too short for the least evidence (``LEAST_EVALUATIONS``) is raised to fit it, and says so."""
    raised = ""
    wall_s, work_s = clock.evidence_limits(EVIDENCE_SHARE)
    got = evidence_budget(problem, work_s)
    if clock.default and (got.evaluations or 0) < LEAST_EVALUATIONS:
        setup_s, run_s = nominal_run_s(problem)
        limit_s = clock.raise_nominal((setup_s + LEAST_EVALUATIONS * run_s) / EVIDENCE_SHARE)
        raised = f"; the default time limit was raised to {limit_s:.3g} s to hold it"
        wall_s, work_s = clock.evidence_limits(EVIDENCE_SHARE)
        got = evidence_budget(problem, work_s)
    return replace(got, deadline=clock.clock() + max(wall_s, work_s), clock=clock.clock,
                   why=got.why + raised)
