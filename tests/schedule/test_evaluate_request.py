"""The one evaluator: the request hand-off and the executor's per-request work are the
evaluator's, the search ranks by them, and the plan stores them as evaluated (issue 13)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from placewise.cost.model import Bottleneck, Cost, Source, Term
from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
from placewise.hardware.spec import Machine
from placewise.plan import build_plan, plan_from_json, plan_to_json
from placewise.schedule import Placement, Problem, evaluate
from placewise.schedule.evaluate import Objective, request_floor_s
from placewise.schedule.pipeline import ALL_CORES
from placewise.schedule.testing import ToyCostModel, toy_machine
from placewise.search import plan_search
from placewise.units import DType


def _machine() -> Machine:
    data = toy_machine().model_dump(mode="json")
    data["devices"][0]["cores"] = [0, 1]
    data["devices"][1]["cores"] = [1]  # the "gpu" shares core 1 with the host
    return Machine.model_validate(data)


class _Measured(ToyCostModel):
    """A toy model that also 'measured' the runtime's request terms: a hand-off that costs
    more when a device sharing the host's cores is used, worker and client time."""

    def request_cost(self, host: str, devices: Sequence[str] = ()) -> Cost | None:
        shared = any(d != host for d in devices)
        return Cost.of({Term.SYNC: 5.0 if shared else 0.5}, bottleneck=Bottleneck.LAUNCH,
                       source=Source.PROFILED)

    def request_busy_s(self, device: str) -> float | None:
        return {"cpu": 0.25, "gpu": 0.5}.get(device)

    def client_busy_s(self) -> float | None:
        return 3.0


def _graph() -> Graph:
    x = Tensor("x", (10,), DType.FP32, role=Role.INPUT)
    h = Tensor("h", (10,), DType.FP32)
    y = Tensor("y", (10,), DType.FP32, role=Role.OUTPUT)
    return Graph.build("g", [x, h, y], [Op("a", OpKind.RELU, ("x",), ("h",)),
                                        Op("b", OpKind.RELU, ("h",), ("y",))])


def _problem() -> Problem:
    m = _machine()
    cm = _Measured(m, {("a", "cpu"): 2.0, ("b", "cpu"): 2.0, ("a", "gpu"): 1.0,
                       ("b", "gpu"): 1.0})
    return Problem(_graph(), None, m, cm)


def test_latency_and_throughput_include_the_runtime_terms() -> None:
    prob = _problem()
    ev = evaluate(prob, Placement.uniform(["a", "b"], "cpu", DType.FP32))
    assert ev.makespan_s == pytest.approx(4.0)
    assert ev.latency_s == pytest.approx(4.5)  # the plain hand-off: only the host is used
    assert ev.score(Objective.LATENCY) == ev.latency_s
    occ = dict(ev.pipeline.occupancy_s)
    assert occ["cpu"] == pytest.approx(4.25)  # the schedule's 4 s + the worker's 0.25 s
    # every core of the used devices together: cpu's work on its 2 cores + the client's
    assert occ[ALL_CORES] == pytest.approx((4.25 * 2 + 3.0) / 2)
    assert ev.pipeline.bottleneck_resource == ALL_CORES
    assert ev.throughput_rps == pytest.approx(1 / 5.75)
    assert ev.score(Objective.THROUGHPUT) == pytest.approx(5.75)
    assert request_floor_s(prob) == pytest.approx(0.5)


def test_search_ranks_by_the_latency_the_plan_reports() -> None:
    """The gpu is twice as fast (makespan 2 s against 4 s) but using it costs a 5 s
    hand-off: the makespan alone would pick it, the latency picks the cpu."""
    prob = _problem()
    gpu = evaluate(prob, Placement.uniform(["a", "b"], "gpu", DType.FP32))
    assert gpu.makespan_s < 4.0 and gpu.latency_s > 4.5
    res = plan_search(prob, strategy="auto", time_limit_s=5.0)
    best = res.best
    assert {a.device for a in best.placement.values()} == {"cpu"}
    plan = build_plan(prob, res, model_ref="g")
    assert plan.objective_value == best.score(Objective.LATENCY) == plan.latency_s
    assert plan.makespan_s == best.makespan_s
    assert plan.throughput.period_s == best.pipeline.period_s
    assert plan.bottleneck_resource == best.bottleneck_resource
    assert [tuple(x) for x in plan.throughput.occupancy_s] == list(best.pipeline.occupancy_s)
    assert plan.request is not None and plan.request.busy_s == pytest.approx(0.25)
    assert res.lower_bound_s <= plan.objective_value
    assert plan_from_json(plan_to_json(plan)) == plan
