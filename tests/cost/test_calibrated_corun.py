"""Co-run slowdowns and wake-ups in the calibration file and the calibrated model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from placewise.cost.calibrated import (
    CalibratedModel,
    Calibration,
    CorunMeasurement,
    LinkMeasurement,
    StepOverhead,
    device_record,
    load_calibration,
    region_class,
    region_key,
)
from placewise.cost.model import Representation, Term
from placewise.cost.roofline import RooflineModel
from placewise.errors import SpecError
from placewise.hardware.spec import Machine
from placewise.schedule import Assignment, Placement, Problem, schedule
from placewise.units import DType
from tests.cost.test_calibrated import (
    _dev,
    linear_graph,
    local_machine,
    synthetic_calibration,
)

FP32 = DType.FP32


def _corun(device: str, busy: str, key: str, median: float, *, level: str = "region",
           dtype: str = "fp32", n: int = 6) -> CorunMeasurement:
    return CorunMeasurement(device=device, busy=busy, level=level, key=key, dtype=dtype,
                            slowdown_median=median, slowdown_p10=min(median, 1.0) * 0.95,
                            slowdown_p90=median * 1.1, n=n)


def _wake(sleep_s: float, poll_s: float) -> dict[str, StepOverhead]:
    return {"wake_sleep": StepOverhead(median_s=sleep_s, p10_s=sleep_s * 0.8,
                                       p90_s=sleep_s * 1.5, n=50, method="test"),
            "wake_poll": StepOverhead(median_s=poll_s, p10_s=poll_s * 0.8, p90_s=poll_s * 1.5,
                                      n=50, method="test")}


def _with(cal: Calibration, **upd: Any) -> Calibration:
    return cal.model_copy(update=upd)


def test_an_older_file_without_the_fields_loads_and_changes_nothing(tmp_path: Path) -> None:
    m = local_machine()
    cal, g = synthetic_calibration(m, [1, 4, 16])
    data = json.loads(cal.save(tmp_path / "cal.json").read_text())
    data.pop("corun")
    for d in data["devices"]:
        d.pop("wake_sleep")
        d.pop("wake_poll")
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    back = load_calibration(path)
    assert back.corun == [] and back == cal
    model = CalibratedModel(m, back)
    ops = [g.op("lin0")]
    assert model.corun_slowdown(g, ops, "cpu0", FP32, frozenset({"cpu1"})) == 1.0
    assert model.wake_s("cpu1") == 0.0


def test_the_roofline_answers_no_slowdown_and_no_wake_up() -> None:
    m = local_machine()
    g = linear_graph([4])
    rf = RooflineModel(m)
    assert rf.corun_slowdown(g, [g.op("lin0")], "cpu0", FP32, frozenset({"cpu1"})) == 1.0
    assert rf.wake_s("cpu0") == 0.0


def test_region_then_class_then_fp32_class_then_one() -> None:
    m = local_machine()
    cal, g = synthetic_calibration(m, [1, 4, 16])
    lin0, lin1, relu = [g.op("lin0")], [g.op("lin1")], [g.op("relu")]
    cal = _with(cal, corun=[
        _corun("cpu0", "cpu1", region_key(g, lin0, FP32), 1.4),
        _corun("cpu0", "cpu1", "contraction", 1.2, level="class"),
        _corun("cpu1", "cpu0", "contraction", 1.1, level="class"),
        _corun("cpu1", "cpu0", "contraction", 1.3, level="class", dtype="int8"),
        _corun("cpu1", "cpu0", region_key(g, relu, FP32), 0.9),  # noise: below 1
    ])
    model = CalibratedModel(m, cal)
    busy1, busy0 = frozenset({"cpu1"}), frozenset({"cpu0"})
    assert model.corun_slowdown(g, lin0, "cpu0", FP32, busy1) == 1.4  # its own region
    assert model.corun_slowdown(g, lin1, "cpu0", FP32, busy1) == 1.2  # its class
    assert model.corun_slowdown(g, relu, "cpu0", FP32, busy1) == 1.0  # class not measured
    assert model.corun_slowdown(g, lin1, "cpu1", DType.INT8, busy0) == 1.3  # int8 class
    assert model.corun_slowdown(g, lin1, "cpu1", FP32, busy0) == 1.1
    assert model.corun_slowdown(g, relu, "cpu1", FP32, busy0) == 1.0  # never below 1
    assert model.corun_slowdown(g, lin0, "cpu0", FP32, frozenset()) == 1.0
    m_in = model.corun_measurement(g, lin1, "cpu0", FP32, "cpu1")
    assert m_in is not None and m_in.level == "class"
    assert region_class(lin0) == "contraction" and region_class(relu) == "elementwise"


def test_wake_up_is_sleeping_less_polling_and_comes_off_a_link_measured_sleeping() -> None:
    m = local_machine()
    cal, g = synthetic_calibration(m, [4])
    recs = [r.model_copy(update=_wake(1.2e-4, 2e-5)) if r.name == "cpu1" else r
            for r in cal.devices]
    link = LinkMeasurement(src="cpu0", dst="cpu1", latency_s=1.5e-4, seconds_per_byte=1e-10,
                           n=20, resid_q10=-0.1, resid_q90=0.2, min_bytes=64,
                           max_bytes=65536, receiver_sleeps=True)
    t = g.tensor("x0")
    rep = Representation(FP32)
    slept = CalibratedModel(m, _with(cal, devices=recs, links=[link]))
    assert slept.wake_s("cpu1") == pytest.approx(1e-4)
    assert slept.wake_s("cpu0") == 0.0  # not measured there
    c = slept.transfer_cost(t, rep, "cpu0", "cpu1")
    assert c.term(Term.SYNC) == pytest.approx(5e-5)  # 150 us measured, 100 us of wake-up
    assert "receiver" in dict(c.assumptions)
    polled = CalibratedModel(m, _with(cal, devices=recs, links=[
        link.model_copy(update={"receiver_sleeps": False})]))
    assert polled.transfer_cost(t, rep, "cpu0", "cpu1").term(Term.SYNC) == \
        pytest.approx(1.5e-4)
    # a wake-up larger than the link's latency leaves none (never negative)
    big = [r.model_copy(update=_wake(1e-3, 1e-5)) if r.name == "cpu1" else r
           for r in cal.devices]
    c2 = CalibratedModel(m, _with(cal, devices=big, links=[link])).transfer_cost(
        t, rep, "cpu0", "cpu1")
    assert c2.term(Term.SYNC) == 0.0 and c2.total_s > 0


def test_the_new_fields_round_trip(tmp_path: Path) -> None:
    m = local_machine()
    cal, g = synthetic_calibration(m, [1, 4, 16])
    cal = _with(cal, corun=[_corun("cpu0", "cpu1", region_key(g, [g.op("lin0")], FP32), 1.3)],
                devices=[r.model_copy(update=_wake(1e-4, 1e-5)) for r in cal.devices])
    back = load_calibration(cal.save(tmp_path / "c.json"))
    assert back == cal and back.fingerprint() == cal.fingerprint()


@pytest.mark.parametrize("mutate, place, problem", [
    (lambda c: c.update(slowdown_median=5000.0), "corun[0].slowdown_median",
     "finite ratio"),
    (lambda c: c.update(slowdown_p10=0.0), "corun[0].slowdown_p10", "finite ratio"),
    (lambda c: c.update(slowdown_p90=1.0), "corun[0]", "slowdown_p10 <= slowdown_median"),
    (lambda c: c.update(busy="cpu0"), "corun[0]", "busy beside itself"),
    (lambda c: c.update(busy="gpu9"), "top level", "gpu9"),
    (lambda c: c.update(level="op"), "corun[0].level", "level must be"),
])
def test_bad_corun_records_name_file_place_problem(tmp_path: Path, mutate: Any, place: str,
                                                   problem: str) -> None:
    m = local_machine()
    cal, _ = synthetic_calibration(m, [4])
    cal = _with(cal, corun=[_corun("cpu0", "cpu1", "contraction", 1.3, level="class")])
    data = json.loads(cal.save(tmp_path / "c.json").read_text())
    mutate(data["corun"][0])
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(SpecError) as info:
        load_calibration(path)
    assert info.value.file == str(path)
    assert info.value.place == place and problem in info.value.problem


def test_a_schedule_with_a_calibrated_slowdown_shows_it_as_contention() -> None:
    m = local_machine()
    cal, g = synthetic_calibration(m, [64, 64])
    lin0, lin1 = [g.op("lin0")], [g.op("lin1")]
    slowed = _with(cal, corun=[_corun("cpu0", "cpu1", region_key(g, lin0, FP32), 1.5),
                               _corun("cpu1", "cpu0", region_key(g, lin1, FP32), 1.5)])
    where = Placement.of({"lin0": Assignment("cpu0", FP32), "lin1": Assignment("cpu1", FP32),
                          "relu": Assignment("cpu0", FP32)})
    plain = schedule(Problem(g, None, m, CalibratedModel(m, cal)), where)
    s = schedule(Problem(g, None, m, CalibratedModel(m, slowed)), where)
    a, b = s.task("lin0"), s.task("lin1")
    assert a.start_s < b.end_s and b.start_s < a.end_s  # they overlap
    assert a.term(Term.CONTENTION) > 0 and b.term(Term.CONTENTION) > 0
    assert plain.task("lin0").term(Term.CONTENTION) == 0.0
    assert s.makespan_s > plain.makespan_s
    # relu overlaps lin1 too, but neither it nor its class was measured: not slowed
    r = s.task("relu")
    assert r.start_s < b.end_s and r.term(Term.CONTENTION) == 0.0


def test_a_sleeping_receiver_pays_a_wake_up_once() -> None:
    devs = [_dev("cpu0", [0], ["fp32"], "torch"), _dev("cpu1", [1], ["fp32"], "onnxruntime"),
            _dev("cpu01", [0, 1], ["fp32"], "torch")]
    m = Machine.model_validate({
        "name": "local", "tags": {"cpu_model": "Test CPU"}, "devices": devs,
        "links": [{"name": f"shm-{a}-{b}", "endpoints": [a, b], "bandwidth_bytes_per_s": 5e9,
                   "latency_s": 1e-5, "source": "test"}
                  for a, b in (("cpu0", "cpu1"), ("cpu0", "cpu01"), ("cpu1", "cpu01"))]})
    g = linear_graph([64, 64])
    recs = [device_record(d).model_copy(update=_wake(1.2e-4, 2e-5)) for d in m.devices]

    def link(dst: str, sleeps: bool) -> LinkMeasurement:
        return LinkMeasurement(src="cpu0", dst=dst, latency_s=1.5e-4, seconds_per_byte=0.0,
                               n=20, receiver_sleeps=sleeps)

    cal = Calibration(machine="local", tags={"cpu_model": "Test CPU"}, devices=recs,
                      links=[link("cpu01", False), link("cpu1", False)])
    prob = Problem(g, None, m, CalibratedModel(m, cal))
    where = {"lin0": Assignment("cpu01", FP32), "lin1": Assignment("cpu1", FP32),
             "relu": Assignment("cpu0", FP32)}
    s = schedule(prob, Placement.of(where))
    # cpu01 runs on the host's thread: the hand-over pays no wake-up
    x = s.task("xfer:x0:cpu0->cpu01")
    assert x.term(Term.SYNC) == pytest.approx(1.5e-4)
    # cpu1 was measured polling (cpu0 <-> cpu1 alone); beside cpu01 its worker sleeps: the
    # wake-up on top, in the one sync term (the data arrives while cpu1 is idle)
    y = s.task("xfer:x1:cpu0->cpu1")
    assert [k for k, _ in y.cost.terms].count(Term.SYNC) == 1
    assert y.term(Term.SYNC) == pytest.approx(1.5e-4 + 1e-4)
    # measured sleeping: the plan predicts the measured latency, no more
    slept = cal.model_copy(update={"links": [link("cpu01", False), link("cpu1", True)]})
    s2 = schedule(Problem(g, None, m, CalibratedModel(m, slept)), Placement.of(where))
    assert s2.task("xfer:x1:cpu0->cpu1").term(Term.SYNC) == pytest.approx(1.5e-4)
