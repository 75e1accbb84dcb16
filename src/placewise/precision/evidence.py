"""The quality evidence of a plan, end to end: the model's source, the inputs, the emulator,
the policy's search (``placewise.precision.policy.plan_with_policy``) and the plan's
``precision`` record. The CLI's ``plan`` calls ``plan_precision``.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from placewise.errors import InputError
from placewise.graph.count import count_graph
from placewise.precision.emulate import Emulator, scheme
from placewise.precision.inputs import describe_generated, load_inputs
from placewise.precision.metrics import quality_of
from placewise.precision.policy import (
    EVIDENCE_REQUESTS,
    EvidenceBudget,
    Outcome,
    Policy,
    QualityBudget,
    plan_with_policy,
    precision_json,
)
from placewise.schedule.placement import Problem
from placewise.units import DType

__all__ = ["EVIDENCE_SEED", "EVIDENCE_SHARE", "evidence_budget", "evidence_requests",
           "nominal_run_s", "plan_precision"]

#: the first seed of generated evidence inputs (validation times requests from seed 0 too)
EVIDENCE_SEED = 1000
#: the share of a plan's nominal time (``--time-limit``) the quality evidence may take
EVIDENCE_SHARE = 0.5
#: nominal speed of one emulated run on one CPU thread (onnxruntime, graph optimizations
#: off: what ``precision.emulate`` runs), FLOP/s: a zoo ResNet (13.8 GFLOP a request) ran
#: at 4.8 GFLOP/s on a 2-core machine under a load of 14, about 30 on a quiet one; taken
#: lower, so that the work budget rather than the clock ends the evidence
EMULATION_FLOPS_PER_S = 2e10
#: nominal seconds per op of one emulated run (its session built, its nodes launched)
EMULATION_OP_S = 2e-3
#: nominal setup (the model loaded for emulation and taken apart,
#: ``precision.emulate.Emulator``): once, per op, and in emulated runs of the whole model
SETUP_BASE_S = 1.0
SETUP_OP_S = 0.02
SETUP_RUNS = 2.0

Progress = Callable[[str, float], None]


def evidence_requests(source: Any, graph: Any, inputs: str | os.PathLike[str] | None,
                      n: int = EVIDENCE_REQUESTS, seed: int = EVIDENCE_SEED
                      ) -> tuple[list[list[Any]], str]:
    """The requests quality is measured on and the plan's line saying what they are:
    ``inputs`` (a ``.npz`` file, see ``placewise.precision.inputs``) or ``n`` generated
    ones from ``seed``."""
    # lazy: torch (runtime.opexec imports it) is heavy to import, loaded only when this runs
    from placewise.runtime.opexec import request_inputs

    like = request_inputs(source, graph, 1, seed)[0]
    if inputs is not None:
        reqs = load_inputs(inputs, list(graph.inputs), like)
        return reqs, f"file {os.fspath(inputs)}: {len(reqs)} requests"
    return request_inputs(source, graph, n, seed), describe_generated(n, seed)


def nominal_run_s(problem: Problem, requests: int = EVIDENCE_REQUESTS) -> tuple[float, float]:
    """``(setup_s, run_s)``: the nominal seconds to set the evidence up and of one emulated
    run of ``requests`` requests of ``problem``'s graph (from its FLOPs and ops, never the
    clock: the evidence budget is deterministic).

    >>> from placewise.planning import build_problem
    >>> from placewise.hardware.load import load_machine
    >>> setup, run = nominal_run_s(build_problem("zoo:mlp", load_machine("jetson-agx-orin")))
    >>> round(setup, 3), round(run, 4)  # 7 small ops: the per-op term
    (1.364, 0.1121)
    """
    ops = len(problem.graph.ops)
    flops = count_graph(problem.graph).flops
    run_s = requests * (flops / EMULATION_FLOPS_PER_S + EMULATION_OP_S * ops)
    return SETUP_BASE_S + SETUP_OP_S * ops + SETUP_RUNS * run_s, run_s


def evidence_budget(problem: Problem, work_s: float, *, deadline: float | None = None,
                    clock: Callable[[], float] | None = None) -> EvidenceBudget:
    """The evidence budget of ``work_s`` nominal seconds (``CommandBudget.evidence_limits``):
    the emulated runs that fit after the setup (``nominal_run_s``), none started after
    ``deadline`` (a ``clock()`` reading).

    >>> from placewise.planning import build_problem
    >>> from placewise.hardware.load import load_machine
    >>> prob = build_problem("zoo:mlp", load_machine("jetson-agx-orin"))
    >>> evidence_budget(prob, 0.5).evaluations, evidence_budget(prob, 60.0).evaluations > 100
    (0, True)
    """
    setup_s, run_s = nominal_run_s(problem)
    n = max(0, math.floor((work_s - setup_s) / max(run_s, 1e-9)))
    why = (f"{work_s:.3g} s of the time limit's nominal work: {setup_s:.3g} s to set up, "
           f"{run_s:.3g} s a run")
    return EvidenceBudget(n, deadline, clock or time.perf_counter, why, setup_s, run_s)


def plan_precision(problem: Problem, model_ref: str, policy: Policy, budget: QualityBudget,
                   search: Callable[[Problem], Any], *,
                   shapes: Mapping[str, Sequence[int]] | None = None,
                   batch: int | None = None, inputs: str | os.PathLike[str] | None = None,
                   progress: Progress | None = None,
                   values: Mapping[str, Sequence[float]] | None = None,
                   evidence: EvidenceBudget | None = None) -> tuple[Outcome, dict[str, Any]]:
    """Search ``problem`` under ``policy`` and ``budget`` with quality evidence from the
    model ``model_ref`` (loaded with ``shapes`` / ``batch`` as the problem's graph was),
    and return the outcome and the plan's ``precision`` record.

    The source, the inputs and the emulator are only loaded when some vertex may be lowered
    (``keep`` never loads them, unless ``inputs`` is given: then the file is checked).
    ``evidence``: its budget (``evidence_budget``; default none). Raises ``InputError``
    for an inputs file that does not match the model, and for a policy that needs evidence
    on a model without an executable source (a task graph).
    """
    state: dict[str, Any] = {}

    def source() -> Any:
        if "source" not in state:
            # lazy: torch (runtime.opexec imports it) is heavy to import, loaded only when this runs
            from placewise.runtime.opexec import load_source

            if model_ref.strip().lower().endswith(".json"):
                raise InputError(f"precision {policy.value} needs quality evidence, and a task "
                                 f"graph has no outputs to measure: use --precision KEEP",
                                 file=model_ref, place="--precision")
            state["source"] = load_source(model_ref, shapes=shapes, batch=batch,
                                          values=values)
            reqs, text = evidence_requests(state["source"], problem.graph, inputs)
            state["requests"], state["inputs"] = reqs, text
        return state["source"]

    if inputs is not None:
        source()

    def emulator() -> Any:
        return Emulator(source(), problem.graph)

    def quality(got: Any, ref: Any) -> dict[str, float]:
        return quality_of(got, ref, problem.graph)

    class _Lazy(Sequence[Any]):
        """The requests, loaded on first use (only when evidence is needed)."""

        def _reqs(self) -> list[Any]:
            source()
            return state["requests"]

        def __len__(self) -> int:
            return len(self._reqs())

        def __getitem__(self, k: Any) -> Any:
            return self._reqs()[k]

        def __iter__(self) -> Any:
            return iter(self._reqs())

    outcome = plan_with_policy(problem, policy, budget, search, emulator=emulator,
                               requests=_Lazy(), quality=quality, progress=progress,
                               evidence=evidence)
    used = "requests" in state
    schemes: dict[str, str] = {}
    if used:
        schemes = {d.value: scheme(d) for d in (DType.INT8, DType.FP16, DType.BF16)
                   if d in policy.dtypes}
    record = precision_json(outcome, inputs=state.get("inputs", ""),
                            input_requests=len(state["requests"]) if used else 0,
                            schemes=schemes)
    return outcome, record
