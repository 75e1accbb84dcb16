"""Differential: on tiny graphs (<= 8 vertices, 2-3 devices) exhaustive enumeration, the DP
(where it applies) and CP-SAT agree on the optimum.

What each side optimizes, and so what must hold:

- exhaustive enumeration scores every placement with the scheduler (list scheduling): its
  best is *the* optimum over placements (``opt``);
- CP-SAT optimizes placement *and* task order in a model that is a relaxation of the
  scheduler's (link exclusivity, conversions on lanes and contention left out, times
  rounded down), so its model objective and its proven bound are <= ``opt``; scoring its
  solutions with the scheduler must give back ``opt`` (the machines here have no shared
  controller and one lane per device; on these cases the best scored solution equals the
  optimum — a list schedule of CP-SAT's order can only be worse than CP-SAT's own schedule,
  never better than ``opt``);
- the DP on a chain is exact for the scheduler: its value and its plan's makespan equal
  ``opt``; on a series-parallel graph its value (contention-free) is a bound <= ``opt``.
"""

from __future__ import annotations

import pytest

from placewise.errors import UnsupportedError
from placewise.hardware.spec import Machine
from placewise.schedule import Objective, Problem, evaluate
from placewise.schedule.testing import ToyCostModel, toy_machine
from placewise.search.cpsat import cpsat_search
from placewise.search.dp import dp_search, graph_shape
from placewise.search.exhaustive import exhaustive_search
from placewise.search.result import Tracker
from placewise.search.space import Budget, Model, SearchSpace
from placewise.units import DType
from tests.schedule.helpers import chain
from tests.search.helpers import task_problem, three_devices

REL = 1e-9

CASES = [(mname, kind, seed) for mname in ("toy", "three")
         for kind in ("chain", "fork-join", "layered") for seed in (0, 1)]


def _machine(name: str) -> Machine:
    return toy_machine() if name == "toy" else three_devices()


def _check(prob: Problem, dtypes: list[DType] | None, objective: Objective) -> None:
    sp = SearchSpace(prob, dtypes)
    model = Model(sp)
    tr = Tracker(prob, objective, Budget(1000.0))
    ex = exhaustive_search(model, tr)
    assert ex.complete and tr.best_key[0] == 0
    opt = tr.best_key[1]
    throughput = objective is Objective.THROUGHPUT
    cp = cpsat_search(model, throughput=throughput, time_limit_s=4.0, seed=0)
    assert cp.optimal and cp.checked and cp.objective_s is not None
    scored = min(evaluate(prob, sp.placement(ch)).score(objective) for ch in cp.solutions)
    assert scored == pytest.approx(opt, rel=REL)
    if not throughput:  # the latency model is a relaxation: model and bound <= opt
        assert cp.bound_s <= cp.objective_s <= opt * (1 + REL)
        if graph_shape(model) == "chain":  # nothing concurrent: the model is exact but
            # for rounding every time down, less than a tick per task and edge
            loss_s = (sp.n + len(model.edges.src) + 2) * cp.tick_s
            assert cp.objective_s >= opt - loss_s
    shape = graph_shape(model)
    try:
        dp = dp_search(model, throughput=throughput)
    except UnsupportedError:
        assert shape == "other" or (throughput and shape != "chain")
        return
    got = evaluate(prob, dp.placement).score(objective)
    if throughput:
        assert got == pytest.approx(dp.value_s, rel=REL) and got >= opt * (1 - REL)
    elif shape == "chain":
        assert dp.value_s == pytest.approx(opt, rel=REL) and got == pytest.approx(opt, rel=REL)
    else:
        assert dp.value_s <= opt * (1 + REL) and got >= opt * (1 - REL)


@pytest.mark.parametrize(("mname", "kind", "seed"), CASES)
@pytest.mark.parametrize("objective", list(Objective))
def test_exhaustive_dp_and_cpsat_agree_on_task_graphs(mname: str, kind: str, seed: int,
                                                       objective: Objective) -> None:
    n = 8 if mname == "toy" else 6
    _check(task_problem(kind, n, seed, _machine(mname)), [DType.FP32], objective)


@pytest.mark.parametrize("objective", list(Objective))
def test_they_agree_with_precision_choices_and_conversions(objective: Objective) -> None:
    # real ops on fp32 tensors; the gpu computes in fp32 or fp16 (conversions when they mix)
    m = toy_machine()
    prob = Problem(chain(5, size=200_000), None, m, ToyCostModel(m))
    _check(prob, None, objective)
