"""Model-order profiling: the executor runs the model, every region is timed as it ran."""

from __future__ import annotations

import pytest

from placewise.calibrate.context import (
    PARTITION_METHOD,
    profile_in_context,
    samples_from_telemetry,
)
from placewise.cost.calibrated import (
    CalibratedModel,
    Calibration,
    ContextMeasurement,
    device_record,
    load_calibration,
    region_key,
)
from placewise.cost.model import Source, Term
from placewise.graph.fuse import fuse
from placewise.plan import build_plan
from placewise.runtime.telemetry import RequestRecord, TaskRecord, Telemetry, WaitRecord
from placewise.schedule import Assignment, Placement, Problem, evaluate
from placewise.units import DType
from tests.runtime.helpers import local_machine, tiny_source


def _tel() -> Telemetry:
    """One request: host d0 reads inputs 100..110 ns after submit at 0; compute a (d0)
    120..150 (kernel 20); transfer to d1 written 150..160, read 300..310; d1 waited
    170..290; compute b (d1) 330..400 (kernel 50, hidden 10); back to d0 written 400..405,
    read 420..430; io:out 440..450; outputs ready at 450."""
    t = [
        TaskRecord(0, "io:in", "io", "d0", 100, 110, phase="p"),
        TaskRecord(0, "a", "compute", "d0", 120, 150, kernel_ns=20, phase="p"),
        TaskRecord(0, "x1", "transfer", "d0", 150, 310, dst_device="d1",
                   marks=(("write_end", 160), ("sent", 160), ("read_start", 300)), phase="p"),
        TaskRecord(0, "b", "compute", "d1", 330, 400, kernel_ns=50, hidden_conversion_ns=10,
                   phase="p"),
        TaskRecord(0, "x2", "transfer", "d1", 400, 430, dst_device="d0",
                   marks=(("write_end", 405), ("sent", 405), ("read_start", 420)), phase="p"),
        TaskRecord(0, "io:out", "io", "d0", 440, 450, phase="p"),
    ]
    return Telemetry({}, (), (RequestRecord(0, "p", 0, 450, 450),), tuple(t), (),
                     (WaitRecord(0, "d1", "x1", 170, 290, "p"),), ())


def test_samples_count_the_loop_gap_and_leave_waits_out() -> None:
    steps, handoff = samples_from_telemetry(_tel(), "p", "d0")
    # a: 30 ns step + 10 ns since io:in ended; kernel 20, executor 20
    (a,) = steps[("d0", "a")]
    assert a == pytest.approx((40e-9, 20e-9, 0.0, 20e-9))
    # b on d1: its previous step is the receive (300..310); 20 ns gap, no wait inside it
    (b,) = steps[("d1", "b")]
    assert b == pytest.approx((90e-9, 50e-9, 10e-9, 30e-9))
    # hand-off: inputs 0 -> io:in end 110, last step before io:out (receive, ends 430)
    # -> outputs 450
    assert handoff == pytest.approx([(110 + 20) * 1e-9])


def test_a_wait_inside_the_gap_is_not_the_regions() -> None:
    tel = _tel()
    # d1 runs b straight after a wait that began after its last step
    tasks = list(tel.tasks)
    tasks[3] = TaskRecord(0, "b", "compute", "d1", 330, 400, kernel_ns=50, phase="p")
    waits = (WaitRecord(0, "d1", "b", 312, 325, "p"),)
    steps, _ = samples_from_telemetry(
        Telemetry({}, (), tel.requests, tuple(tasks), (), waits, ()), "p", "d0")
    (b,) = steps[("d1", "b")]
    assert b[0] == pytest.approx((70 + 20 - 13) * 1e-9)


@pytest.fixture(scope="module")
def calibrated() -> Calibration:
    m = local_machine()
    src = tiny_source()
    assert src.graph is not None
    base = Calibration(machine=m.name, machine_fingerprint=m.fingerprint(),
                       devices=[device_record(d) for d in m.devices])
    return profile_in_context(src.graph, src, m, base, devices=["cpu0", "cpu1"],
                              requests=3, warmup=1, rounds=1)


def test_every_region_is_measured_on_every_device_and_precision(
        calibrated: Calibration) -> None:
    src = tiny_source()
    g = src.graph
    assert g is not None
    part = fuse(g)
    got = {(c.device, c.key): c for c in calibrated.context}
    for r in part.regions:
        for dev in ("cpu0", "cpu1"):
            c = got[(dev, region_key(g, [g.op(n) for n in r.ops], DType.FP32))]
            assert c.n >= 3 and c.median_s > 0
            assert c.p10_s <= c.median_s <= c.p90_s
            # a region runs inside its partition's session: the step's fixed cost is the
            # device's run call, not the region's
            assert c.kernel_s > 0 and c.overhead_s == 0
    # the int8 run measured the int8 linears on cpu1, with their hidden conversions
    int8 = [c for c in calibrated.context if c.device == "cpu1" and c.dtype == "int8"
            and c.kind == "region"]
    assert int8 and all(c.hidden_s > 0 for c in int8)
    assert not any(c.device == "cpu01" for c in calibrated.context)


def test_devices_get_the_measured_dispatch_and_request(calibrated: Calibration) -> None:
    recs = {d.name: d for d in calibrated.devices}
    for dev in ("cpu0", "cpu1"):
        assert recs[dev].dispatch.method == PARTITION_METHOD and recs[dev].dispatch.n > 0
        assert recs[dev].dispatch.median_s == 0
        assert recs[dev].run_call.n > 0 and recs[dev].run_call.median_s > 0
    # the host (cpu0) saw every request: 3 per run, 3 runs (cpu0, cpu1, cpu1 int8)
    assert recs["cpu0"].request.n == 9 and recs["cpu0"].request.median_s > 0
    assert recs["cpu1"].request.n == 0
    # three model runs and one alternating between cpu0 and cpu1
    assert calibrated.settings["context_runs"] == 4
    links = {(lk.src, lk.dst): lk for lk in calibrated.links}
    assert {("cpu0", "cpu1"), ("cpu1", "cpu0")} <= set(links)
    for lk in links.values():
        assert lk.n >= 2 and lk.latency_s + lk.seconds_per_byte > 0


def test_the_file_round_trips(calibrated: Calibration, tmp_path: object) -> None:
    path = calibrated.save(f"{tmp_path}/cal.json")
    back = load_calibration(path)
    assert back == calibrated and back.fingerprint() == calibrated.fingerprint()


def test_bad_context_records_are_refused() -> None:
    with pytest.raises(ValueError, match="p10_s <= median_s"):
        ContextMeasurement(device="d", key="k", dtype="fp32", median_s=2.0, p10_s=3.0,
                           p90_s=4.0, n=1)
    with pytest.raises(ValueError, match="kind"):
        ContextMeasurement(device="d", key="k", kind="op", dtype="fp32", median_s=2.0,
                           p10_s=1.0, p90_s=4.0, n=1)
    with pytest.raises(ValueError, match="context"):
        Calibration(machine="m", context=[ContextMeasurement(
            device="nope", key="k", dtype="fp32", median_s=2.0, p10_s=1.0, p90_s=4.0, n=1)])


def test_the_model_answers_from_the_model_order_measurement(calibrated: Calibration) -> None:
    m = local_machine()
    src = tiny_source()
    g = src.graph
    assert g is not None
    model = CalibratedModel(m, calibrated)
    got = {(c.device, c.key): c for c in calibrated.context}
    for r in fuse(g).regions:
        c = model.region_cost(g, [g.op(n) for n in r.ops], "cpu0", DType.FP32)
        meas = got[("cpu0", region_key(g, [g.op(n) for n in r.ops], DType.FP32))]
        assert c.source is Source.PROFILED
        assert c.total_s == pytest.approx(meas.median_s)
        assert (c.low_s, c.high_s) == (meas.p10_s, meas.p90_s)
        assert c.term(Term.LAUNCH) == pytest.approx(min(meas.overhead_s, meas.median_s))
        assert dict(c.assumptions)["model"] == "profiled in model order (executor)"
    # an int8 region names its hidden conversions
    lin = next(r for r in fuse(g).regions if (
        "cpu1", region_key(g, [g.op(n) for n in r.ops], DType.INT8)) in got)
    c8 = model.region_cost(g, [g.op(n) for n in lin.ops], "cpu1", DType.INT8)
    assert c8.term(Term.CONVERSION) > 0


def test_transfers_use_the_measured_link(calibrated: Calibration) -> None:
    m = local_machine()
    g = tiny_source().graph
    assert g is not None
    model = CalibratedModel(m, calibrated)
    lk = next(x for x in calibrated.links if (x.src, x.dst) == ("cpu0", "cpu1"))
    t = g.tensor(g.inputs[0])
    from placewise.cost.model import Representation

    c = model.transfer_cost(t, Representation(DType.FP32, t.layout), "cpu0", "cpu1")
    assert c.source is Source.CALIBRATED
    assert c.term(Term.SYNC) == pytest.approx(lk.latency_s)
    assert c.low_s <= c.total_s <= c.high_s
    assert dict(c.assumptions)["model"] == "profiled in model order (executor)"


def test_fit_link_recovers_latency_and_bandwidth() -> None:
    from placewise.cost.fit import fit_link

    samples = [(b, 2e-5 + b / 4e9) for b in (1_000, 10_000, 100_000, 1_000_000)]
    f = fit_link("a", "b", samples)
    assert f is not None
    assert f.latency_s == pytest.approx(2e-5, rel=1e-6)
    assert 1 / f.seconds_per_byte == pytest.approx(4e9, rel=1e-6)
    one = fit_link("a", "b", [(64, 3e-5), (64, 5e-5), (64, 4e-5)])
    assert one is not None and one.seconds_per_byte == 0 and one.latency_s == 4e-5
    assert fit_link("a", "b", []) is None


def test_the_plan_adds_the_request_hand_off(calibrated: Calibration) -> None:
    m = local_machine()
    src = tiny_source()
    g = src.graph
    assert g is not None
    prob = Problem(g, fuse(g), m, CalibratedModel(m, calibrated))
    ev = evaluate(prob, Placement.uniform(prob.vertex_names, "cpu0", DType.FP32))
    plan = build_plan(prob, ev, model_ref="zoo:mlp", strategy="single:cpu0")
    rec = {d.name: d for d in calibrated.devices}["cpu0"]
    req, run_call = rec.request, rec.run_call
    # the hand-off, and the host's first partition's session.run
    assert plan.request is not None and plan.request.device == "cpu0"
    assert run_call.n > 0
    assert plan.request.latency_s == pytest.approx(req.median_s + run_call.median_s)
    assert plan.request.terms_s[Term.SYNC] == pytest.approx(req.median_s)
    assert plan.request.terms_s[Term.LAUNCH] == pytest.approx(run_call.median_s)
    assert plan.latency_s == pytest.approx(plan.makespan_s + plan.request.latency_s)
    assert plan.predicted_latency_s == plan.latency_s
    # no calibration: no request term, the latency is the makespan
    from placewise.cost.load import load_cost_model

    prob2 = Problem(g, fuse(g), m, load_cost_model(m, None))
    p2 = build_plan(prob2, evaluate(prob2, Placement.of(
        {v: Assignment("cpu0", DType.FP32) for v in prob2.vertex_names})), model_ref="x")
    assert p2.request is None and p2.predicted_latency_s == p2.makespan_s


def test_profiling_one_device_writes_a_calibration_that_loads() -> None:
    """``profile --device cpu1``: the request's tensors still come from the host, but a
    link to a device the calibration does not hold is not written (it could not load)."""
    m = local_machine()
    src = tiny_source()
    assert src.graph is not None
    base = Calibration(machine=m.name, machine_fingerprint=m.fingerprint(),
                       devices=[device_record(m.device("cpu1"))])
    cal = profile_in_context(src.graph, src, m, base, devices=["cpu1"], requests=3,
                             warmup=1, rounds=1)
    assert {c.device for c in cal.context} == {"cpu1"}
    assert all({lk.src, lk.dst} <= {"cpu1"} for lk in cal.links)
    again = Calibration.from_json(cal.to_json(), file="c.json")
    assert again.context == cal.context
