"""The list scheduler on hand-checked cases."""

from __future__ import annotations

import pytest

from placewise.cost.model import Representation, Term
from placewise.errors import InputError, UnsupportedError
from placewise.graph.ir import Graph, Op, OpKind, Role, TaskHint
from placewise.schedule import (
    Assignment,
    Placement,
    Problem,
    ResourceKind,
    TaskKind,
    schedule,
)
from placewise.schedule.testing import ToyCostModel, toy_machine
from placewise.units import DType
from tests.schedule.helpers import chain, check_schedule, device, link, machine, sources, t

CPU32 = Assignment("cpu", DType.FP32)
GPU32 = Assignment("gpu", DType.FP32)
GPU16 = Assignment("gpu", DType.FP16)


def _fan_out() -> Graph:
    """a -> h -> {b, c} -> {yb, yc}"""
    tensors = [t("x", role=Role.INPUT), t("h"), t("yb", role=Role.OUTPUT),
               t("yc", role=Role.OUTPUT)]
    ops = [Op("a", OpKind.RELU, ("x",), ("h",)), Op("b", OpKind.RELU, ("h",), ("yb",)),
           Op("c", OpKind.RELU, ("h",), ("yc",))]
    return Graph.build("fan", tensors, ops)


def test_single_device_chain_is_the_sum_of_its_ops() -> None:
    m = toy_machine()
    times = {(f"o{i}", "cpu"): 0.5 * (i + 1) for i in range(3)}
    prob = Problem(chain(3), None, m, ToyCostModel(m, times))
    s = schedule(prob, Placement.uniform(prob.vertex_names, "cpu", DType.FP32))
    assert [x.name for x in s.tasks] == ["o0", "o1", "o2"]
    assert s.makespan_s == pytest.approx(3.0)
    assert [(x.start_s, x.end_s) for x in s.tasks] == [(0.0, 0.5), (0.5, 1.5), (1.5, 3.0)]
    assert s.exact and s.tasks[1].deps == ("o0",)
    assert s.critical_path() == list(s.tasks)
    check_schedule(prob, s)


def test_crossing_edge_gets_a_transfer_and_outputs_return_to_host() -> None:
    m = toy_machine()
    prob = Problem(chain(2), None, m, ToyCostModel(m, {("o0", "cpu"): 1.0,
                                                        ("o1", "gpu"): 1.0}))
    s = schedule(prob, Placement.of({"o0": CPU32, "o1": GPU32}))
    names = [x.name for x in s.tasks]
    assert names == ["o0", "xfer:h0:cpu->gpu", "o1", "xfer:y:gpu->cpu"]
    x = s.task("xfer:h0:cpu->gpu")
    assert x.kind is TaskKind.TRANSFER and x.link == "pcie" and x.resource == "link:pcie:fwd"
    assert x.nbytes == 4000 and x.start_s == 1.0
    assert x.end_s == pytest.approx(1.0 + 4000 / 1e9 + 1e-6)
    assert s.task("o1").start_s == x.end_s and s.task("o1").deps == ("xfer:h0:cpu->gpu",)
    back = s.task("xfer:y:gpu->cpu")
    assert back.resource == "link:pcie:rev"
    assert s.makespan_s == back.end_s
    check_schedule(prob, s)


def test_outputs_can_stay_where_they_are_made() -> None:
    m = toy_machine()
    prob = Problem(chain(1), None, m, ToyCostModel(m), outputs_to_host=False)
    s = schedule(prob, Placement.of({"o0": GPU32}))
    assert [x.name for x in s.tasks] == ["xfer:x:cpu->gpu", "o0"]
    final = [c for c in s.copies if c.final]
    assert [(c.tensor, c.device) for c in final] == [("y", "gpu")]


def test_a_tensor_sent_once_is_reused_by_every_consumer_there() -> None:
    m = toy_machine()
    prob = Problem(_fan_out(), None, m, ToyCostModel(m))
    s = schedule(prob, Placement.of({"a": CPU32, "b": GPU32, "c": GPU32}))
    sends = [x.name for x in s.tasks if x.tensor == "h" and x.kind is TaskKind.TRANSFER]
    assert sends == ["xfer:h:cpu->gpu"]
    assert s.task("b").deps == ("xfer:h:cpu->gpu",) == s.task("c").deps
    copy = next(c for c in s.copies if c.tensor == "h" and c.device == "gpu")
    assert set(copy.readers) == {"b", "c"}
    check_schedule(prob, s)


def test_conversions_appear_only_when_representations_differ() -> None:
    m = toy_machine()
    prob = Problem(_fan_out(), None, m, ToyCostModel(m))
    same = schedule(prob, Placement.of({"a": GPU32, "b": GPU32, "c": GPU32}))
    assert not same.tasks_of(TaskKind.CONVERSION)
    # same device, another dtype: one conversion on that device, shared by b and c
    s = schedule(prob, Placement.of({"a": GPU32, "b": GPU16, "c": GPU16}))
    convs = [x for x in s.tasks_of(TaskKind.CONVERSION) if x.tensor == "h"]
    assert [x.name for x in convs] == ["conv:h:fp32->fp16@gpu"]
    assert convs[0].src_rep == Representation(DType.FP32)
    assert convs[0].dst_rep == Representation(DType.FP16)
    assert convs[0].nbytes == 2000
    # graph outputs go back to the host in their declared fp32: converted on the host after
    # the (smaller) fp16 copy arrives, since converting grows the tensor
    assert s.task("xfer:yb:gpu->cpu").src_rep == Representation(DType.FP16)
    assert s.task("conv:yb:fp16->fp32@cpu").deps == ("xfer:yb:gpu->cpu",)
    check_schedule(prob, s)


def test_shrinking_conversion_runs_before_sending_growing_after() -> None:
    m = toy_machine()
    prob = Problem(chain(2), None, m, ToyCostModel(m))
    # fp32 on cpu -> fp16 on gpu: convert on the cpu, send half the bytes
    s = schedule(prob, Placement.of({"o0": CPU32, "o1": GPU16}))
    assert s.has_task("conv:h0:fp32->fp16@cpu")
    x = s.task("xfer:h0:cpu->gpu:fp16")
    assert x.nbytes == 2000 and x.deps == ("conv:h0:fp32->fp16@cpu",)
    assert s.task("o1").deps == ("xfer:h0:cpu->gpu:fp16",)
    # graph input x (fp32 on the host) converted on the host too
    assert not s.has_task("conv:x:fp32->fp16@cpu")  # o0 reads x in fp32 on the cpu
    # fp16 on gpu -> fp32 on cpu: send fp16, convert on the cpu
    s2 = schedule(prob, Placement.of({"o0": GPU16, "o1": CPU32}))
    assert s2.has_task("conv:x:fp32->fp16@cpu")  # the input shrinks before it travels
    assert s2.has_task("xfer:h0:gpu->cpu") and s2.has_task("conv:h0:fp16->fp32@cpu")
    assert s2.has_task("xfer:x:cpu->gpu:fp16")
    assert s2.task("o1").deps == ("conv:h0:fp16->fp32@cpu",)
    check_schedule(prob, s)
    check_schedule(prob, s2)


def test_integer_tensors_keep_their_dtype() -> None:
    tensors = [t("ids", 100, DType.INT64, Role.INPUT), t("h", 100), t("y", 100, role=Role.OUTPUT)]
    ops = [Op("a", OpKind.CAST, ("ids",), ("h",)), Op("b", OpKind.RELU, ("h",), ("y",))]
    g = Graph.build("g", tensors, ops)
    m = toy_machine()
    prob = Problem(g, None, m, ToyCostModel(m))
    s = schedule(prob, Placement.of({"a": GPU16, "b": GPU16}))
    assert s.has_task("xfer:ids:cpu->gpu")  # int64 travels as is
    assert s.task("xfer:ids:cpu->gpu").nbytes == 800
    assert not any(x.tensor == "ids" for x in s.tasks_of(TaskKind.CONVERSION))


def test_lanes_let_independent_tasks_overlap() -> None:
    names = ["p", "q"]
    g = sources(names)
    for lanes, expect in ((1, 2.0), (2, 1.0)):
        m = toy_machine(gpu_lanes=lanes)
        prob = Problem(g, None, m, ToyCostModel(m, {(n, "gpu"): 1.0 for n in names}),
                       outputs_to_host=False)
        s = schedule(prob, Placement.uniform(names, "gpu", DType.FP32))
        assert s.makespan_s == pytest.approx(expect)
        check_schedule(prob, s)
    m = toy_machine()
    prob = Problem(g, None, m, ToyCostModel(m, {(n, "gpu"): 1.0 for n in names}),
                   outputs_to_host=False)
    s = schedule(prob, Placement.uniform(names, "gpu", DType.FP32), lanes={"gpu": 2})
    assert s.makespan_s == 1.0 and {x.lane for x in s.tasks} == {0, 1}
    with pytest.raises(InputError):
        schedule(prob, Placement.uniform(names, "gpu", DType.FP32), lanes={"gpu": 0})


def test_priority_is_the_upward_rank() -> None:
    # s1 is short but feeds a long chain; s2 is long and alone: s1 must go first
    tensors = [t("y1"), t("y2", role=Role.OUTPUT), t("z", role=Role.OUTPUT)]
    ops = [Op("s1", OpKind.TASK, (), ("y1",), hint=TaskHint()),
           Op("s2", OpKind.TASK, (), ("y2",), hint=TaskHint()),
           Op("tail", OpKind.RELU, ("y1",), ("z",))]
    g = Graph.build("g", tensors, ops)
    m = toy_machine()
    times = {("s1", "gpu"): 1.0, ("s2", "gpu"): 2.0, ("tail", "cpu"): 5.0}
    prob = Problem(g, None, m, ToyCostModel(m, times), outputs_to_host=False)
    s = schedule(prob, Placement.of({"s1": GPU32, "s2": GPU32, "tail": CPU32}))
    assert s.task("s1").start_s == 0.0 and s.task("s2").start_s == 1.0
    assert s.makespan_s == pytest.approx(1.0 + 1e-6 + 4000 / 1e9 + 5.0)


def _contention_problem(times: dict[str, float], mem: dict[str, int], shared: bool) -> Problem:
    names = list(times)
    m = toy_machine(shared_controller=shared)
    devs = ["cpu", "gpu"]
    cm = ToyCostModel(m, {(n, devs[i]): times[n] for i, n in enumerate(names)},
                      {(n, devs[i]): mem[n] for i, n in enumerate(names)})
    return Problem(sources(names), None, m, cm, outputs_to_host=False)


def _place(names: list[str]) -> Placement:
    return Placement.of({names[0]: CPU32, names[1]: GPU32})


def test_contention_slows_overlapping_memory_bound_tasks_on_a_shared_controller() -> None:
    # both demand 8 GB/s of a 10 GB/s controller: each gets 5 GB/s, runs at 5/8 speed
    prob = _contention_problem({"a": 1.0, "b": 1.0}, {"a": 8 * 10**9, "b": 8 * 10**9}, True)
    s = schedule(prob, _place(["a", "b"]))
    for n in ("a", "b"):
        x = s.task(n)
        assert x.start_s == 0.0 and x.end_s == pytest.approx(1.6)
        assert x.contention_s == pytest.approx(0.6) and x.term(Term.CONTENTION) == x.contention_s
    mc = s.resource("mc")
    assert mc.kind is ResourceKind.SHARED and mc.bytes == 16 * 10**9
    assert mc.busy_s == pytest.approx(1.6)
    check_schedule(prob, s)


def test_no_contention_on_separate_controllers() -> None:
    prob = _contention_problem({"a": 1.0, "b": 1.0}, {"a": 8 * 10**9, "b": 8 * 10**9}, False)
    s = schedule(prob, _place(["a", "b"]))
    assert s.makespan_s == 1.0 and all(x.contention_s == 0.0 for x in s.tasks)
    assert all(x.kind is not ResourceKind.SHARED for x in s.resources)


def test_contention_is_max_min_fair_and_follows_changes() -> None:
    # demands 8 and 3 GB/s of 10: the light one gets all it wants, the heavy one 7 GB/s
    prob = _contention_problem({"a": 1.0, "b": 2.0}, {"a": 8 * 10**9, "b": 6 * 10**9}, True)
    s = schedule(prob, _place(["a", "b"]))
    assert s.task("a").end_s == pytest.approx(8 / 7)
    assert s.task("b").end_s == 2.0 and s.task("b").contention_s == 0.0
    # a long and a short task: both at 5/8 speed until the short one ends at 0.8 s, when the
    # long one has done half its work; the other half runs at full speed
    prob = _contention_problem({"a": 1.0, "b": 0.5}, {"a": 8 * 10**9, "b": 4 * 10**9}, True)
    s = schedule(prob, _place(["a", "b"]))
    assert s.task("b").end_s == pytest.approx(0.8)
    assert s.task("a").end_s == pytest.approx(1.3)
    # demands within capacity: no slowdown at all, exact times
    prob = _contention_problem({"a": 1.0, "b": 1.0}, {"a": 5 * 10**9, "b": 5 * 10**9}, True)
    s = schedule(prob, _place(["a", "b"]))
    assert s.task("a").end_s == 1.0 and s.task("b").end_s == 1.0


def test_switching_contention_off_is_labelled_a_lower_bound() -> None:
    prob = _contention_problem({"a": 1.0, "b": 1.0}, {"a": 8 * 10**9, "b": 8 * 10**9}, True)
    s = schedule(prob, _place(["a", "b"]), contention=False)
    assert not s.exact and s.makespan_s == 1.0 and "lower bound" in s.notes[0]
    prob = _contention_problem({"a": 1.0, "b": 1.0}, {"a": 1, "b": 1}, False)
    assert schedule(prob, _place(["a", "b"]), contention=False).exact


def _line_machine(**kw: object) -> object:
    return machine([device("a"), device("b", kind="gpu"), device("c", kind="gpu")],
                   [link("ab", "a", "b", **kw), link("bc", "b", "c", **kw)])  # type: ignore[arg-type]


def test_multi_hop_routes_reuse_intermediate_copies() -> None:
    m = _line_machine()
    prob = Problem(_fan_out(), None, m, ToyCostModel(m), outputs_to_host=False)  # type: ignore[arg-type]
    s = schedule(prob, Placement.of({"a": Assignment("a", DType.FP32),
                                     "b": Assignment("c", DType.FP32),
                                     "c": Assignment("b", DType.FP32)}))
    hops = [x.name for x in s.tasks_of(TaskKind.TRANSFER) if x.tensor == "h"]
    assert hops == ["xfer:h:a->b", "xfer:h:b->c"]
    assert s.task("c").deps == ("xfer:h:a->b",)
    assert s.task("xfer:h:b->c").deps == ("xfer:h:a->b",)
    check_schedule(prob, s)


def test_transfers_on_one_link_direction_serialize_opposite_directions_overlap() -> None:
    m = toy_machine()
    names = ["p", "q"]
    tensors = [t(f"y_{n}", 10**6) for n in names] + [t("z", role=Role.OUTPUT)]
    ops = [Op(n, OpKind.TASK, (), (f"y_{n}",), hint=TaskHint()) for n in names]
    ops.append(Op("join", OpKind.ADD, ("y_p", "y_q"), ("z",)))
    g = Graph.build("g", tensors, ops)
    times = {("p", "cpu"): 0.0, ("q", "cpu"): 0.0, ("join", "gpu"): 0.0,
             ("p", "gpu"): 0.0, ("q", "gpu"): 0.0}
    prob = Problem(g, None, m, ToyCostModel(m, times), outputs_to_host=False)
    s = schedule(prob, Placement.of({"p": CPU32, "q": CPU32, "join": GPU32}))
    x1, x2 = s.task("xfer:y_p:cpu->gpu"), s.task("xfer:y_q:cpu->gpu")
    assert x1.resource == x2.resource == "link:pcie:fwd"
    assert min(x1.end_s, x2.end_s) <= max(x1.start_s, x2.start_s)
    s2 = schedule(prob, Placement.of({"p": CPU32, "q": GPU32, "join": GPU32}))
    assert s2.has_task("xfer:y_p:cpu->gpu") and not s2.has_task("xfer:y_q:cpu->gpu")
    check_schedule(prob, s)


def test_links_on_a_shared_resource_are_not_exclusive() -> None:
    m = machine([device("cpu", resources=["mc"]), device("gpu", kind="gpu", resources=["mc"])],
                [link("um", "cpu", "gpu", bw=1e10, latency=0.0, duplex=False, resource="mc")],
                [{"name": "mc", "bandwidth_bytes_per_s": 1e12, "source": "t"}])
    names = ["p", "q"]
    tensors = [t(f"y_{n}", 10**6) for n in names] + [t("z", role=Role.OUTPUT)]
    ops = [Op(n, OpKind.TASK, (), (f"y_{n}",), hint=TaskHint()) for n in names]
    ops.append(Op("join", OpKind.ADD, ("y_p", "y_q"), ("z",)))
    g = Graph.build("g", tensors, ops)
    times = {(n, d): 0.0 for n in ("p", "q", "join") for d in ("cpu", "gpu")}
    prob = Problem(g, None, m, ToyCostModel(m, times), outputs_to_host=False)
    s = schedule(prob, Placement.of({"p": CPU32, "q": CPU32, "join": GPU32}))
    x1, x2 = s.task("xfer:y_p:cpu->gpu"), s.task("xfer:y_q:cpu->gpu")
    assert x1.resource == "mc" and x1.start_s == x2.start_s == 0.0
    assert x1.lane != x2.lane and s.resource("mc").lanes == 0
    assert not s.resource("mc").exclusive
    check_schedule(prob, s)


def test_same_input_gives_the_same_schedule() -> None:
    m = toy_machine(shared_controller=True)
    prob = Problem(_fan_out(), None, m, ToyCostModel(m))
    pl = Placement.of({"a": CPU32, "b": GPU16, "c": GPU32})
    s1, s2 = schedule(prob, pl), schedule(prob, pl)
    assert s1.tasks == s2.tasks and s1.copies == s2.copies and s1.resources == s2.resources
    prob2 = Problem(_fan_out(), None, m, ToyCostModel(m))
    assert schedule(prob2, pl).tasks == s1.tasks


def test_bad_placements_are_refused() -> None:
    m = toy_machine()
    prob = Problem(chain(2), None, m, ToyCostModel(m))
    with pytest.raises(InputError, match="does not assign"):
        schedule(prob, Placement.of({"o0": CPU32}))
    with pytest.raises(InputError, match="vertex 'zz'"):
        schedule(prob, Placement.of({"o0": CPU32, "o1": CPU32, "zz": CPU32}))
    with pytest.raises(InputError, match="no device 'tpu'"):
        schedule(prob, Placement.of({"o0": CPU32, "o1": Assignment("tpu", DType.FP32)}))
    with pytest.raises(UnsupportedError, match="fp16"):
        schedule(prob, Placement.of({"o0": CPU32, "o1": Assignment("cpu", DType.FP16)}))


def test_unsupported_kinds_are_refused() -> None:
    m = machine([device("cpu"), device("npu", kind="npu", unsupported=["relu"])],
                [link("l", "cpu", "npu")])
    prob = Problem(chain(1), None, m, ToyCostModel(m))
    with pytest.raises(UnsupportedError, match="'npu' does not run op 'o0'"):
        schedule(prob, Placement.of({"o0": Assignment("npu", DType.FP32)}))


def test_critical_path_follows_lane_waits() -> None:
    names = ["p", "q"]
    m = toy_machine()
    prob = Problem(sources(names), None, m, ToyCostModel(m, {(n, "gpu"): 1.0 for n in names}),
                   outputs_to_host=False)
    s = schedule(prob, Placement.uniform(names, "gpu", DType.FP32))
    assert [x.name for x in s.critical_path()] == ["p", "q"]


def test_from_records_refuses_records_that_do_not_hold_together() -> None:
    from dataclasses import replace

    from placewise.schedule import Schedule

    m = toy_machine()
    prob = Problem(chain(2), None, m, ToyCostModel(m))
    s = schedule(prob, Placement.of({"o0": CPU32, "o1": GPU32}))
    tasks = list(s.tasks)
    bad = [replace(tasks[0], deps=("nope",)), *tasks[1:]]
    with pytest.raises(InputError, match="unknown task 'nope'"):
        Schedule.from_records(s.placement, bad, s.copies, s.resources, s.host)
    first, second = tasks[0], tasks[1]
    cyc = [replace(first, deps=(second.name,)), *tasks[1:]]
    with pytest.raises(InputError, match="cycle"):
        Schedule.from_records(s.placement, cyc, s.copies, s.resources, s.host)
    with pytest.raises(InputError, match="unknown resource"):
        Schedule.from_records(s.placement, tasks, s.copies, s.resources[:1], s.host)
