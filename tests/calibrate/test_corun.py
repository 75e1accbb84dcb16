"""Co-run slowdowns and wake-ups measured for real on this machine's cores (a tiny MLP)."""

from __future__ import annotations

import math
import multiprocessing as mp
import os
from pathlib import Path

import pytest

from placewise.calibrate.corun import (
    CORUN_METHOD,
    _Job,
    _records,
    corun_pairs,
    measure_wake,
    profile_corun,
)
from placewise.cost.calibrated import (
    CalibratedModel,
    Calibration,
    LinkMeasurement,
    device_record,
    load_calibration,
    region_key,
)
from placewise.errors import ExecutionError, InputError
from placewise.graph.fuse import fuse
from placewise.hardware.spec import Device
from placewise.units import DType
from tests.runtime.helpers import local_machine, tiny_source

TWO_CORES = len(os.sched_getaffinity(0)) > 1


def _base() -> Calibration:
    m = local_machine()
    links = [LinkMeasurement(src=a, dst=b, latency_s=4e-5, seconds_per_byte=1e-10, n=5)
             for a, b in (("cpu0", "cpu1"), ("cpu1", "cpu0"))]
    if "cpu01" in m.device_names:
        links += [LinkMeasurement(src=a, dst=b, latency_s=5e-5, seconds_per_byte=1e-10, n=5)
                  for a, b in (("cpu1", "cpu01"), ("cpu01", "cpu1"))]
    return Calibration(machine=m.name, machine_fingerprint=m.fingerprint(),
                       devices=[device_record(d) for d in m.devices], links=links)


@pytest.fixture(scope="module")
def measured() -> Calibration:
    src = tiny_source()
    assert src.graph is not None
    return profile_corun(src.graph, src, local_machine(), _base(), rounds=2, repeats=3,
                         wake_samples=6, max_time_s=60.0)


def test_every_device_gets_both_wake_ups(measured: Calibration) -> None:
    for d in measured.devices:
        for rec in (d.wake_sleep, d.wake_poll):
            assert rec.n == 6 and math.isfinite(rec.median_s) and rec.median_s > 0
            assert rec.p10_s <= rec.median_s <= rec.p90_s
        assert "resuming from a blocking wait" in d.wake_sleep.method
        assert CalibratedModel(local_machine(), measured).wake_s(d.name) >= 0.0


@pytest.mark.skipif(not TWO_CORES, reason="needs two usable cores")
def test_every_region_is_measured_beside_the_other_core(measured: Calibration) -> None:
    src = tiny_source()
    g = src.graph
    assert g is not None
    got = {(c.device, c.busy, c.key): c for c in measured.corun if c.level == "region"}
    assert got
    # cpu01 shares both cores: it never computes beside another device
    assert not any("cpu01" in (c.device, c.busy) for c in measured.corun)
    keys = {region_key(g, [g.op(n) for n in r.ops], DType.FP32) for r in fuse(g).regions}
    for dev, busy in (("cpu0", "cpu1"), ("cpu1", "cpu0")):
        mine = {k for (d, b, k) in got if (d, b) == (dev, busy)}
        # the contractions always take time (other regions may be fused into them)
        assert mine and mine <= keys | {c.key for c in measured.corun if c.dtype == "int8"}
    for c in measured.corun:
        assert c.n >= 1 and c.method == CORUN_METHOD
        assert c.slowdown_p10 <= c.slowdown_median <= c.slowdown_p90
    classes = {(c.device, c.busy, c.key, c.dtype) for c in measured.corun if c.level == "class"}
    assert ("cpu0", "cpu1", "contraction", "fp32") in classes
    assert ("cpu1", "cpu0", "contraction", "int8") in classes  # cpu1 runs int8 too
    # the model answers from them, never below 1
    model = CalibratedModel(local_machine(), measured)
    lin = next(r for r in fuse(g).regions if g.op(r.ops[0]).kind.value == "linear")
    f = model.corun_slowdown(g, [g.op(n) for n in lin.ops], "cpu0", DType.FP32,
                             frozenset({"cpu1"}))
    assert f >= 1.0 and model.corun_measurement(
        g, [g.op(n) for n in lin.ops], "cpu0", DType.FP32, "cpu1") is not None


def test_links_say_whether_their_receiver_slept(measured: Calibration) -> None:
    flags = {(lk.src, lk.dst): lk.receiver_sleeps for lk in measured.links}
    assert flags[("cpu0", "cpu1")] is False and flags[("cpu1", "cpu0")] is False
    if ("cpu01", "cpu1") in flags:
        # beside cpu01 (on the host's thread, sharing core 1) cpu1's worker sleeps; the
        # host's thread polls (cpu0's core is its own)
        assert flags[("cpu01", "cpu1")] is True and flags[("cpu1", "cpu01")] is False
    assert measured.settings["corun_rounds"] == 2


def test_the_file_round_trips_and_no_helper_process_is_left(measured: Calibration,
                                                            tmp_path: Path) -> None:
    back = load_calibration(measured.save(tmp_path / "cal.json"))
    assert back == measured
    assert mp.active_children() == []


def test_a_receiver_that_cannot_start_fails_loudly_naming_the_device() -> None:
    dev = local_machine().device("cpu0").model_copy(update={"cores": [4095]})
    with pytest.raises(ExecutionError, match="cpu0"):
        measure_wake(dev, samples=2, timeout_s=30.0)


def test_bad_settings_and_devices_are_refused() -> None:
    src = tiny_source()
    assert src.graph is not None
    m = local_machine()
    with pytest.raises(InputError, match="rounds"):
        profile_corun(src.graph, src, m, _base(), rounds=0)
    with pytest.raises(InputError, match="gpu7"):
        profile_corun(src.graph, src, m, _base(), devices=["gpu7"])
    with pytest.raises(InputError, match="samples"):
        measure_wake(m.device("cpu0"), samples=0)


def test_pairs_are_devices_on_disjoint_cores() -> None:
    m = local_machine()
    pairs = {(a.name, b.name) for a, b in corun_pairs(m.devices)}
    assert pairs == ({("cpu0", "cpu1"), ("cpu1", "cpu0")} if TWO_CORES else set())


def _job(rounds: list[tuple[float, dict[str, tuple[float, float]]]]) -> _Job:
    dev = Device.model_validate(local_machine().device("cpu0").model_dump())
    return _Job(dev, DType.FP32, [], {}, {}, {"a": ("a",), "b": ("b",), "r": ("r",)},
                {"a": ("region:a", "contraction", "fp32"),
                 "b": ("region:b", "contraction", "fp32"),
                 "r": ("region:r", "elementwise", "fp32")}, {"cpu1": rounds})


def test_records_keep_the_quieter_half_and_weight_classes_by_time() -> None:
    rounds = [
        (2.0, {"a": (1.0, 1.5), "b": (1.0, 1.1), "r": (0.0, 0.1)}),  # quiet
        (9.0, {"a": (5.0, 50.0), "b": (4.0, 40.0), "r": (1.0, 1.0)}),  # noisy: dropped
        (3.0, {"a": (1.0, 1.3), "b": (3.0, 3.0), "r": (0.5, 0.6)}),  # quiet
    ]
    out = {(c.level, c.key): c for c in _records([_job(rounds)])}
    a = out[("region", "region:a")]
    assert (a.device, a.busy, a.n) == ("cpu0", "cpu1", 2)
    assert a.slowdown_median == pytest.approx(1.4)
    # r took no time alone in the first kept round (fused away): one sample only
    assert out[("region", "region:r")].n == 1
    # contraction per kept round: (1.5 + 1.1) / 2 = 1.3 and (1.3 + 3.0) / 4 = 1.075
    c = out[("class", "contraction")]
    assert c.n == 2 and c.slowdown_median == pytest.approx((1.3 + 1.075) / 2)
    assert c.slowdown_p10 <= c.slowdown_median <= c.slowdown_p90
