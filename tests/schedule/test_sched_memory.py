"""Memory accounting on hand-checked cases."""

from __future__ import annotations

import pytest

from placewise.errors import InputError, MemoryInfeasible
from placewise.graph.ir import Graph, Op, OpKind, Role
from placewise.schedule import (
    Assignment,
    Category,
    Placement,
    Problem,
    memory_report,
    schedule,
)
from placewise.schedule.testing import ToyCostModel, toy_machine
from placewise.units import DType
from tests.schedule.helpers import chain, device, link, machine, t

CPU32 = Assignment("cpu", DType.FP32)
GPU32 = Assignment("gpu", DType.FP32)
GPU16 = Assignment("gpu", DType.FP16)


def _mlp() -> Graph:
    """x -> a(w1) -> h -> b(w2) -> y, plus c(w1) reading h too (weights shared by a and c)."""
    tensors = [t("x", 100, role=Role.INPUT), t("w1", 1000, role=Role.PARAM),
               t("w2", 2000, role=Role.PARAM), t("h", 100), t("y", 100, role=Role.OUTPUT),
               t("z", 100, role=Role.OUTPUT)]
    ops = [Op("a", OpKind.MUL, ("x", "w1"), ("h",), scratch_bytes=5000),
           Op("b", OpKind.MUL, ("h", "w2"), ("y",)),
           Op("c", OpKind.MUL, ("h", "w1"), ("z",))]
    return Graph.build("mlp", tensors, ops)


def _times(names: list[str]) -> dict[tuple[str, str], float]:
    return {(n, d): 1.0 for n in names for d in ("cpu", "gpu")}


def test_lifetimes_peak_and_breakdown_on_one_device() -> None:
    m = toy_machine()
    prob = Problem(_mlp(), None, m, ToyCostModel(m, _times(["a", "b", "c"])))
    s = schedule(prob, Placement.uniform(["a", "b", "c"], "cpu", DType.FP32))
    assert [(x.name, x.start_s) for x in s.tasks] == [("a", 0.0), ("b", 1.0), ("c", 2.0)]
    rep = memory_report(prob, s)
    u = rep.usage("cpu")
    # weights 12000 all run; x [0,1); h [0,3); scratch of a [0,1); y [1,3); z [2,3)
    assert u.timeline == ((0.0, 12000 + 400 + 400 + 5000), (1.0, 12000 + 400 + 400),
                          (2.0, 12000 + 1200), (3.0, 0))
    assert u.peak_bytes == 17800 and u.peak_time_s == 0.0
    bd = dict(u.breakdown)
    assert bd[Category.WEIGHTS] == 12000 and bd[Category.SCRATCH] == 5000
    assert bd[Category.ACTIVATIONS] == 800
    assert u.occupants[0].label == "w2" and u.occupants[1].label == "scratch:a"
    assert u.final_bytes == 0 and rep.feasible and not rep.violations
    assert rep.usage("gpu").peak_bytes == 0
    # every buffer is accounted: the sum of the timeline's steps returns to zero
    assert sum(b.nbytes for b in rep.buffers if b.start_s == 0.0) == 17800


def test_weights_are_replicated_on_each_device_in_its_precision() -> None:
    m = toy_machine()
    prob = Problem(_mlp(), None, m, ToyCostModel(m, _times(["a", "b", "c"])))
    s = schedule(prob, Placement.of({"a": CPU32, "b": GPU16, "c": GPU16}))
    rep = memory_report(prob, s)
    w_cpu = {b.label: b.nbytes for b in rep.buffers
             if b.category is Category.WEIGHTS and b.device == "cpu"}
    w_gpu = {b.label: b.nbytes for b in rep.buffers
             if b.category is Category.WEIGHTS and b.device == "gpu"}
    assert w_cpu == {"w1": 4000}
    assert w_gpu == {"w2 (fp16)": 4000, "w1 (fp16)": 2000}  # b and c share one w1 copy
    assert all(u.final_bytes == 0 for u in rep.usages)


def test_transfer_and_conversion_buffers_are_their_own_categories() -> None:
    m = toy_machine()
    prob = Problem(chain(2, size=1000), None, m,
                   ToyCostModel(m, {("o0", "cpu"): 1.0, ("o1", "gpu"): 1.0}))
    s = schedule(prob, Placement.of({"o0": CPU32, "o1": GPU16}))
    rep = memory_report(prob, s)
    conv = s.task("conv:h0:fp32->fp16@cpu")
    xfer = s.task("xfer:h0:cpu->gpu:fp16")
    by = {(b.label, b.category, b.device): b for b in rep.buffers}
    cb = by[("h0", Category.CONVERSION, "cpu")]
    assert (cb.start_s, cb.end_s, cb.nbytes) == (conv.start_s, conv.end_s, 2000)
    tb = by[("h0", Category.TRANSFER, "gpu")]
    assert (tb.start_s, tb.end_s, tb.nbytes) == (xfer.start_s, xfer.end_s, 2000)
    after = by[("h0", Category.ACTIVATIONS, "gpu")]
    assert (after.start_s, after.end_s) == (xfer.end_s, s.task("o1").end_s)
    # the sender keeps the fp32 original until the conversion read it, the fp16 copy until
    # the transfer ends
    on_cpu = sorted((b.nbytes, b.start_s, b.end_s) for b in rep.buffers
                    if b.label == "h0" and b.device == "cpu"
                    and b.category is Category.ACTIVATIONS)
    assert on_cpu == [(2000, conv.end_s, xfer.end_s), (4000, s.task("o0").start_s, conv.end_s)]
    assert all(u.final_bytes == 0 for u in rep.usages)


def test_overflow_is_reported_with_where_when_and_what() -> None:
    m = machine([device("cpu"), device("gpu", kind="gpu", capacity=10_000)],
                [link("l", "cpu", "gpu")])
    prob = Problem(_mlp(), None, m, ToyCostModel(m, _times(["a", "b", "c"])), batch=8)
    s = schedule(prob, Placement.uniform(["a", "b", "c"], "gpu", DType.FP32))
    rep = memory_report(prob, s)
    assert not rep.feasible
    (v,) = rep.violations
    assert v.devices == ("gpu",) and v.tier == "mem" and v.capacity_bytes == 10_000
    assert v.need_bytes == rep.usage("gpu").peak_bytes > 10_000
    assert v.occupants[0].label == "w2"
    assert "gpu/mem needs" in v.describe()
    with pytest.raises(MemoryInfeasible) as exc:
        rep.raise_if_infeasible()
    assert exc.value.device == "gpu" and exc.value.need_bytes == v.need_bytes
    # weights alone (12000) exceed the capacity: micro-batching cannot help
    (sug,) = [x for x in rep.suggestions if x.kind == "micro_batch"]
    assert not sug.possible and "weights alone" in sug.note


def test_micro_batching_is_suggested_when_activations_overflow() -> None:
    tensors = [t("x", 4000, role=Role.INPUT), t("h", 4000), t("y", 4000, role=Role.OUTPUT)]
    ops = [Op("a", OpKind.RELU, ("x",), ("h",)), Op("b", OpKind.RELU, ("h",), ("y",))]
    g = Graph.build("g", tensors, ops)
    m = machine([device("cpu", capacity=20_000)], [])
    for batch, possible in ((4, True), (1, False)):
        prob = Problem(g, None, m, ToyCostModel(m), batch=batch)
        rep = memory_report(prob, schedule(prob, Placement.uniform(["a", "b"], "cpu",
                                                                    DType.FP32)))
        assert rep.usage("cpu").peak_bytes == 32_000 and not rep.feasible
        (sug,) = rep.suggestions
        assert sug.kind == "micro_batch" and sug.micro_batches == 2
        assert sug.possible is possible and sug.extra_s > 0


def test_spill_to_another_tier_is_suggested() -> None:
    host = {"name": "host-pinned", "capacity_bytes": 1 << 30, "bandwidth_bytes_per_s": 1e9,
            "source": "t"}
    m = machine([device("cpu"), device("gpu", kind="gpu", capacity=10_000, extra_tiers=[host])],
                [link("l", "cpu", "gpu")])
    prob = Problem(_mlp(), None, m, ToyCostModel(m, _times(["a", "b", "c"])))
    s = schedule(prob, Placement.uniform(["a", "b", "c"], "gpu", DType.FP32))
    rep = memory_report(prob, s)
    (sp,) = [x for x in rep.suggestions if x.kind == "spill"]
    overflow = rep.usage("gpu").peak_bytes - 10_000
    assert sp.spill_tier == "host-pinned" and sp.spill_bytes == overflow
    assert sp.extra_s == pytest.approx(overflow / 1e9)
    # choosing that tier makes it fit
    rep2 = memory_report(prob, s, tiers={"gpu": "host-pinned"})
    assert rep2.feasible and rep2.usage("gpu").members == (("gpu", "host-pinned"),)
    with pytest.raises(InputError):
        memory_report(prob, s, tiers={"gpu": "nope"})


def test_unified_memory_is_checked_as_one_pool() -> None:
    m = toy_machine(shared_controller=True, memory_bytes=15_000)
    prob = Problem(_mlp(), None, m, ToyCostModel(m, _times(["a", "b", "c"])))
    s = schedule(prob, Placement.of({"a": CPU32, "b": GPU32, "c": CPU32}))
    rep = memory_report(prob, s)
    (pool,) = rep.pools()
    assert pool.pool == "mc" and pool.devices == ("cpu", "gpu") and pool.checked
    cpu, gpu = rep.usage("cpu"), rep.usage("gpu")
    assert not cpu.checked and not gpu.checked
    assert cpu.fits and gpu.fits  # each alone fits ...
    assert pool.peak_bytes > 15_000 and not rep.feasible  # ... together they do not
    assert rep.violations[0].devices == ("cpu", "gpu")
    assert pool.peak_bytes <= cpu.peak_bytes + gpu.peak_bytes
    assert pool.final_bytes == 0


def test_transfers_between_local_devices_are_staged() -> None:
    """The executor's transfers go through a shared-memory slot: the receiver's copy
    exists from the transfer's end, and no transfer buffer is counted on it."""
    from tests.runtime.helpers import problem_of, split_placement, tiny_source

    prob = problem_of(tiny_source())
    s = schedule(prob, split_placement(prob, int8=False))
    rep = memory_report(prob, s)
    xfers = [t for t in s.tasks if t.kind.value == "transfer"]
    assert xfers
    last = max(xfers, key=lambda x: x.end_s)
    assert last.end_s == s.makespan_s  # the graph output returning to the host
    for x in xfers:
        got = [b for b in rep.buffers if b.task == x.name]
        assert got
        if x is last:  # delivered at the very end: counted while in flight
            assert [(b.category, b.start_s, b.end_s) for b in got] == [
                (Category.TRANSFER, x.start_s, x.end_s)]
        else:
            assert all(b.start_s == x.end_s and b.category is Category.ACTIVATIONS
                       for b in got)
    assert all(u.final_bytes == 0 for u in rep.usages)
