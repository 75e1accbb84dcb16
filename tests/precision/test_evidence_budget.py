"""The quality evidence's budget (``precision.policy.EvidenceBudget``): a count of emulated
runs, spent on the probes with the largest time gain first; what it does not reach is not
probed and keeps the model's own precision (never lowered without evidence)."""

from __future__ import annotations

from typing import Any

import pytest

from placewise.precision.policy import (
    NOT_PROBED,
    EvidenceBudget,
    Policy,
    QualityBudget,
    lowered_of,
    natural_dtype,
    plan_with_policy,
)
from placewise.schedule.placement import Problem
from tests.test_precision_policy import _Emulator, _mlp_problem, _rel, _search

BUDGET = QualityBudget.parse("rel_l2=0.05")


def _plan(problem: Problem, emu: Any, evidence: EvidenceBudget | None,
          policy: Policy = Policy.INT8) -> Any:
    return plan_with_policy(problem, policy, BUDGET, _search, emulator=lambda: emu,
                            requests=[[0]] * 2, quality=_rel, evidence=evidence)


def _unprobed_keep_their_precision(problem: Problem, out: Any) -> None:
    placement = out.result.best.placement
    lowered = lowered_of(out.problem, placement)
    probed = {(r.vertex, r.dtype) for r in out.decisions if r.quality}
    for v, dt in lowered.items():
        assert (v, dt) in probed, f"{v} lowered to {dt.value} without evidence"
    for r in out.decisions:
        if r.reason == NOT_PROBED:
            assert not r.admitted and not r.chosen and r.error is None
            vi = next(x.index for x in problem.vertices if x.name == r.vertex)
            if (r.vertex, placement[r.vertex].dtype) not in probed:
                assert placement[r.vertex].dtype is natural_dtype(problem, vi)


def test_unlimited_probes_every_candidate() -> None:
    problem = _mlp_problem()
    emu = _Emulator({o.name: 0.001 for o in problem.graph.ops})
    out = _plan(problem, emu, None)
    need = [r for r in out.decisions if r.ops and r.gain_s and r.gain_s > 0]
    assert need and all(r.quality for r in need)
    assert out.notes[0].startswith(f"quality evidence: {len(need)} of {len(need)} candidates")
    assert lowered_of(out.problem, out.result.best.placement)


@pytest.mark.parametrize("runs", [3, 4, 6])
def test_a_tiny_work_budget_probes_the_largest_gains_only(runs: int) -> None:
    problem = _mlp_problem()
    emu = _Emulator({o.name: 0.001 for o in problem.graph.ops})
    out = _plan(problem, emu, EvidenceBudget(runs))
    assert len(emu.calls) <= runs  # the reference, the probes, the re-checks
    probed = [r for r in out.decisions if r.quality]
    skipped = [r for r in out.decisions if r.reason == NOT_PROBED]
    assert len(probed) == runs - 2  # one run kept for the re-check
    assert skipped and len(probed) + len(skipped) == sum(
        1 for r in out.decisions if r.ops and r.gain_s and r.gain_s > 0)
    assert min(r.gain_s or 0.0 for r in probed) >= max(r.gain_s or 0.0 for r in skipped)
    _unprobed_keep_their_precision(problem, out)
    note = out.notes[0]
    assert f"{len(probed)} of" in note and f"{len(skipped)} not probed" in note
    assert "the work budget was spent" in note and f"of a budget of {runs}" in note


def test_no_budget_for_the_least_evidence_builds_no_emulator() -> None:
    problem = _mlp_problem()

    def never() -> Any:
        raise AssertionError("the emulator was built without a budget for it")

    out = plan_with_policy(problem, Policy.MIXED, BUDGET, _search, emulator=never,
                           requests=[[0]], quality=_rel, evidence=EvidenceBudget(2))
    assert lowered_of(out.problem, out.result.best.placement) == {}
    assert all(not r.quality for r in out.decisions)
    assert any(r.reason == NOT_PROBED for r in out.decisions)
    _unprobed_keep_their_precision(problem, out)


def test_a_passed_deadline_stops_the_probes() -> None:
    problem = _mlp_problem()
    emu = _Emulator({o.name: 0.001 for o in problem.graph.ops})
    out = _plan(problem, emu, EvidenceBudget(None, deadline=0.0, clock=lambda: 1.0))
    assert emu.calls == [] and lowered_of(out.problem, out.result.best.placement) == {}
    assert "its share of the wall time ran out" in out.notes[0]


def test_spent_before_the_recheck_keeps_everything() -> None:
    """A re-check that fails, with no run left for the next: every vertex falls back."""
    problem = _mlp_problem()
    # each alone within the budget, together over it
    emu = _Emulator({o.name: 0.03 for o in problem.graph.ops})
    out = _plan(problem, emu, EvidenceBudget(5))
    _unprobed_keep_their_precision(problem, out)
    lowered = lowered_of(out.problem, out.result.best.placement)
    if lowered:  # what stays lowered was re-checked as a whole and holds
        assert BUDGET.holds(out.estimated)
    assert len(emu.calls) <= 5


def test_the_command_budget_sizes_the_evidence_deterministically() -> None:
    """``plan_model``'s evidence budget comes from the limit's nominal time and the graph
    (never the clock): a frozen clock gives the same count; a *default* limit too short for
    the least evidence is raised to hold it, an explicit one is not."""
    from placewise.hardware.load import load_machine
    from placewise.planning import _evidence_budget, build_problem
    from placewise.precision.evidence import EVIDENCE_SHARE, nominal_run_s
    from placewise.precision.policy import LEAST_EVALUATIONS
    from placewise.search.api import CommandBudget

    prob = build_problem("zoo:mlp?layers=3&hidden=1024&batch=4096",
                         load_machine("jetson-agx-orin"))
    setup_s, run_s = nominal_run_s(prob)
    assert run_s > 5.0  # 26 GFLOP a request, 8 requests

    def budget(limit: float | None) -> Any:
        clock = CommandBudget.make(limit, ops=len(prob.graph.ops), start=0.0,
                                   clock=lambda: 0.0)
        return _evidence_budget(prob, clock), clock

    (a, _), (b, _) = budget(200.0), budget(200.0)
    assert a.evaluations == b.evaluations > LEAST_EVALUATIONS
    # the share of the limit (less the nominal load and the reserve) after the setup
    assert 0 <= (200.0 * EVIDENCE_SHARE - setup_s) / run_s - a.evaluations < 1.5
    short, clock = budget(10.0)
    assert short.evaluations == 0 and clock.limit_s == 10.0  # the user's: never raised
    default, clock = budget(None)
    assert default.evaluations >= LEAST_EVALUATIONS and clock.raised
    assert "raised" in default.why


def test_a_slow_setup_forecasts_the_reference_past_the_deadline() -> None:
    """The setup took 10x its nominal time: the reference and a probe at that pace would end
    past the deadline, so no run starts (none is wasted) and nothing is lowered."""
    problem = _mlp_problem()
    emu = _Emulator({o.name: 0.001 for o in problem.graph.ops})
    now = [0.0]

    def build() -> Any:
        now[0] += 10.0  # nominal 1 s
        return emu

    ev = EvidenceBudget(50, deadline=25.0, clock=lambda: now[0], setup_s=1.0, run_s=1.0)
    out = plan_with_policy(problem, Policy.INT8, BUDGET, _search, emulator=build,
                           requests=[[0]], quality=_rel, evidence=ev)
    assert emu.calls == [] and lowered_of(out.problem, out.result.best.placement) == {}
    assert "its share of the wall time ran out" in out.notes[0]
    now[0] = 0.0
    fast = EvidenceBudget(50, deadline=25.0, clock=lambda: now[0], setup_s=20.0, run_s=1.0)
    out = plan_with_policy(problem, Policy.INT8, BUDGET, _search, emulator=build,
                           requests=[[0]], quality=_rel, evidence=fast)
    assert emu.calls and any(r.quality for r in out.decisions)
