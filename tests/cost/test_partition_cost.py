"""The per-partition cost: every preset device states it with a source, a crossing pays
half of each side's, and plans cut a graph only where a cut pays for it."""

from __future__ import annotations

from typing import Any

import pytest

from placewise.cost.model import Representation, Term
from placewise.cost.roofline import DEFAULT_PARTITION_S, RooflineModel, partition_overhead
from placewise.errors import SpecError
from placewise.graph.ir import Role, Tensor
from placewise.graph.taskgraph import parse_taskgraph
from placewise.hardware.load import load_machine
from placewise.hardware.spec import Machine, list_presets
from placewise.plan import build_plan
from placewise.plan_partitions import plan_file_partitions
from placewise.schedule import Problem
from placewise.search import plan_search
from placewise.units import DType


@pytest.mark.parametrize("preset", list_presets())
def test_every_preset_device_states_its_partition_cost(preset: str) -> None:
    for d in load_machine(preset).devices:
        assert d.partition_overhead_s is not None and d.partition_overhead_s > 0
        src = str(d.partition_source)
        assert "measured" in src or "estimate" in src, (preset, d.name, src)


def test_a_crossing_pays_half_of_each_sides_partition() -> None:
    m = load_machine("jetson-agx-orin")
    t = Tensor("t", (1000,), DType.FP32, role=Role.ACTIVATION)
    c = RooflineModel(m).transfer_cost(t, Representation(DType.FP32), "cpu", "gpu")
    cpu, gpu = m.device("cpu").partition_overhead_s, m.device("gpu").partition_overhead_s
    assert cpu is not None and gpu is not None
    a = dict(c.assumptions)
    assert a["partition_cut_s"] == pytest.approx((cpu + gpu) / 2)
    assert c.term(Term.LAUNCH) == pytest.approx((cpu + gpu) / 2)
    assert "half of one partition on cpu" in str(a["partition"])
    # a chain cpu -> gpu -> cpu enters and leaves the gpu partition once: it pays gpu's
    # figure in full, and half of the host's on each side
    back = RooflineModel(m).transfer_cost(t, Representation(DType.FP32), "gpu", "cpu")
    assert c.term(Term.LAUNCH) + back.term(Term.LAUNCH) == pytest.approx(cpu + gpu)
    off = RooflineModel(m).transfer_cost(t, Representation(DType.FP32), "cpu", "gpu",
                                         partition_cut=False)
    assert off.term(Term.LAUNCH) == 0 and c.total_s - off.total_s == pytest.approx(
        (cpu + gpu) / 2)


def _machine(partition_s: float | None) -> Machine:
    def dev(name: str, kind: str) -> dict[str, Any]:
        d: dict[str, Any] = {
            "name": name, "kind": kind, "peak_flops_per_s": {"fp32": 1e9},
            "peak_source": "test", "launch_overhead_s": 0.0, "launch_source": "test",
            "memory": [{"name": "mem", "capacity_bytes": 1 << 40,
                        "bandwidth_bytes_per_s": 1e12, "source": "test"}]}
        if partition_s is not None:
            d.update(partition_overhead_s=partition_s, partition_source="test")
        return d
    return Machine.model_validate({
        "name": "two", "devices": [dev("cpu", "cpu"), dev("gpu", "gpu")],
        "links": [{"name": "l", "endpoints": ["cpu", "gpu"], "bandwidth_bytes_per_s": 1e12,
                   "latency_s": 0.0, "source": "test"}]})


def test_a_device_without_a_figure_gets_its_kinds_stated_default() -> None:
    m = _machine(None)
    assert partition_overhead(m.device("gpu")) == DEFAULT_PARTITION_S[m.device("gpu").kind]
    assert "default" in partition_overhead(m.device("cpu"))[1]
    with pytest.raises((SpecError, ValueError), match="partition_source"):
        Machine.model_validate({**_machine(None).model_dump(mode="json"), "devices": [
            {**_machine(None).devices[0].model_dump(mode="json"),
             "partition_overhead_s": 1e-5}]})


def _alternating(partition_s: float | None) -> Problem:
    """A chain of six tasks that alternate which device is 10 us faster: cutting after
    every task saves 10 us per task, and costs a partition per cut."""
    fast, slow = 10e-6, 20e-6
    tasks = [{"name": f"t{i}", "times_s": {"cpu": fast if i % 2 else slow,
                                           "gpu": slow if i % 2 else fast}}
             for i in range(6)]
    edges = [{"src": f"t{i}", "dst": f"t{i + 1}", "bytes": 8} for i in range(5)]
    g = parse_taskgraph({"schema_version": 1, "name": "alt", "tasks": tasks, "edges": edges})
    m = _machine(partition_s)
    return Problem(g, None, m, RooflineModel(m))


@pytest.mark.parametrize(("partition_s", "cut"), [(0.0, True), (40e-6, False)])
def test_plans_are_cut_only_where_a_cut_pays(partition_s: float, cut: bool) -> None:
    """Free partitions: the optimum alternates devices (6 partitions); at 40 us a
    partition, a cut (20 us: half of each side's) costs more than the 10 us it saves, so
    the optimum keeps one device. Every cut of the plan buys a non-negative amount."""
    prob = _alternating(partition_s)
    r = plan_search(prob, strategy="exhaustive", time_limit_s=60.0, work_limit_s=30.0)
    plan = build_plan(prob, r, model_ref="alt.json")
    parts = plan_file_partitions(plan)
    assert (len(parts) == 6) if cut else (len(parts) == 1), [p.name for p in parts]
    assert len(plan.cuts) == (5 if cut else 0)
    assert all(c.buys_s is not None and c.buys_s >= -1e-12 for c in plan.cuts)


def test_cut_values_past_the_work_budget_are_not_evaluated_and_say_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import placewise.plan_partitions as pp

    prob = _alternating(0.0)
    r = plan_search(prob, strategy="exhaustive", time_limit_s=60.0, work_limit_s=30.0)
    monkeypatch.setattr(pp, "CUT_WORK", 1)
    plan = build_plan(prob, r, model_ref="alt.json")
    assert len(plan.cuts) == 5
    assert all(c.buys_s is None and "not evaluated" in str(c.reason) for c in plan.cuts)
