"""The calibrated model, its fits and its file format (no real profiling here)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from placewise.cost.calibrated import (
    CalibratedModel,
    Calibration,
    Failure,
    Measurement,
    StepOverhead,
    conversion_features,
    conversion_key,
    device_record,
    fit_measurements,
    load_calibration,
    merge_calibrations,
    op_features,
    op_key,
    op_series,
)
from placewise.cost.load import load_cost_model
from placewise.cost.model import Representation, Source, Term
from placewise.cost.roofline import DEFAULT_PARTITION_S, RooflineModel
from placewise.errors import SpecError, UnsupportedError
from placewise.graph.ir import Attrs, Graph, Op, OpKind, Provenance, Role, Tensor
from placewise.hardware.load import load_machine
from placewise.hardware.spec import DeviceKind, Machine
from placewise.units import DType


def _dev(name: str, cores: list[int], dtypes: list[str], backend: str) -> dict[str, Any]:
    return {"name": name, "kind": "cpu", "model": f"Test CPU, {name}",
            "peak_flops_per_s": {d: 5e10 for d in dtypes}, "peak_source": "test",
            "memory": [{"name": "dram", "capacity_bytes": 2**33,
                        "bandwidth_bytes_per_s": 1e10, "source": "test"}],
            "launch_overhead_s": 3e-6, "launch_source": "test",
            "compute_units": len(cores), "cores": cores, "backend": backend}


def local_machine(**changes: Any) -> Machine:
    devs = [_dev("cpu0", [0], ["fp32"], "torch"),
            _dev("cpu1", [1], ["fp32", "int8"], "onnxruntime")]
    for d in devs:
        d.update(changes.get(d["name"], {}))
    return Machine.model_validate({
        "name": "local", "tags": {"cpu_model": changes.get("cpu_model", "Test CPU")},
        "devices": devs,
        "links": [{"name": "shm", "endpoints": ["cpu0", "cpu1"],
                   "bandwidth_bytes_per_s": 5e9, "latency_s": 1e-5, "source": "test"}]})


def linear_graph(rows: list[int], hidden: int = 64) -> Graph:
    """A chain of linear ops (torch provenance), one per row count, then a relu."""
    tensors = []
    ops = []
    for i, m in enumerate(rows):
        tensors += [Tensor(f"x{i}", (m, hidden), DType.FP32, role=Role.INPUT),
                    Tensor(f"w{i}", (hidden, hidden), DType.FP32, role=Role.PARAM),
                    Tensor(f"y{i}", (m, hidden), DType.FP32, role=Role.OUTPUT)]
        ops.append(Op(f"lin{i}", OpKind.LINEAR, (f"x{i}", f"w{i}"), (f"y{i}",),
                      provenance=Provenance(source=f"lin{i}", source_op="aten.linear.default")))
    tensors.append(Tensor("r", (rows[0], hidden), DType.FP32, role=Role.OUTPUT))
    ops.append(Op("relu", OpKind.RELU, ("y0",), ("r",),
                  provenance=Provenance(source="relu", source_op="aten.relu.default")))
    return Graph.build("lin", tensors, ops)


def law(features: dict[str, float]) -> float:
    """A synthetic device: 5 us per call + 1e10 flop/s + 5e9 B/s."""
    return 5e-6 + features["flops"] / 1e10 + features["bytes"] / 5e9


def synthetic_calibration(machine: Machine, rows: list[int], noise: float = 0.0,
                          seed: int = 0) -> tuple[Calibration, Graph]:
    g = linear_graph(rows)
    rng = np.random.default_rng(seed)
    meas = []
    for dev in machine.devices:
        for op in g.ops:
            if op.kind is not OpKind.LINEAR:
                continue
            key, sig = op_key(g, op, DType.FP32)
            f = op_features(g, op, DType.FP32, dev)
            t = law(f) * math.exp(rng.normal(0, noise)) if noise else law(f)
            meas.append(Measurement(device=dev.name, key=key, kind="linear", dtype="fp32",
                                    signature=sig, median_s=t, p10_s=0.9 * t, p90_s=1.2 * t,
                                    n=20, family="torch", source_node=op.name, features=f))
    recs = [device_record(d) for d in machine.devices]
    recs[1] = recs[1].model_copy(update={"dtype_kinds": {"int8": ["linear", "matmul"]}})
    cal = Calibration(machine="local", tags={"cpu_model": "Test CPU"}, devices=recs,
                      measurements=meas, fits=fit_measurements(meas))
    return cal, g


def test_profiled_shape_returns_its_measurement() -> None:
    m = local_machine()
    cal, g = synthetic_calibration(m, [1, 4, 16, 64, 256])
    model = CalibratedModel(m, cal)
    op = g.op("lin2")
    c = model.op_cost(g, op, "cpu0", DType.FP32)
    want = law(op_features(g, op, DType.FP32, m.device("cpu0")))
    assert c.source is Source.PROFILED
    assert c.total_s == pytest.approx(want)
    assert (c.low_s, c.high_s) == pytest.approx((0.9 * want, 1.2 * want))
    assert set(dict(c.terms)) <= {Term.LAUNCH, Term.COMPUTE, Term.MEMORY}
    assert dict(c.assumptions)["model"] == "profiled"


def test_unseen_shape_gets_a_fitted_estimate_with_an_interval() -> None:
    m = local_machine()
    cal, _ = synthetic_calibration(m, [1, 4, 16, 64, 256, 1024], noise=0.05)
    model = CalibratedModel(m, cal)
    g2 = linear_graph([32, 128])  # shapes never measured
    for op in g2.ops[:2]:
        c = model.op_cost(g2, op, "cpu0", DType.FP32)
        want = law(op_features(g2, op, DType.FP32, m.device("cpu0")))
        assert c.source is Source.CALIBRATED
        assert c.low_s < c.total_s < c.high_s
        assert c.total_s == pytest.approx(want, rel=0.15)
        assert c.low_s <= want * 1.05 and want * 0.95 <= c.high_s
        a = dict(c.assumptions)
        assert a["fit"] == "kind:linear" and a["model"] == "calibrated"


def test_kind_without_measurements_falls_back_and_says_so() -> None:
    m = local_machine()
    cal, g = synthetic_calibration(m, [1, 4, 16])
    # only linear measured: relu gets the device-level fit (pooled), a kind never seen on
    # a device with no fit at all gets the roofline
    model = CalibratedModel(m, cal)
    c = model.op_cost(g, g.op("relu"), "cpu0", DType.FP32)
    assert c.source is Source.CALIBRATED and dict(c.assumptions)["fit"].startswith("device:")
    empty = CalibratedModel(m, cal.model_copy(update={"fits": [], "measurements": []}))
    c = empty.op_cost(g, g.op("relu"), "cpu0", DType.FP32)
    assert c.source is Source.ROOFLINE
    assert "roofline" in str(dict(c.assumptions)["calibration"])


def test_uncalibrated_device_uses_the_roofline() -> None:
    m = local_machine()
    cal, g = synthetic_calibration(m, [1, 4, 16])
    cal = cal.model_copy(update={
        "devices": [d for d in cal.devices if d.name == "cpu0"],
        "measurements": [x for x in cal.measurements if x.device == "cpu0"],
        "fits": [f for f in cal.fits if f.device == "cpu0"]})
    model = CalibratedModel(m, cal)
    c = model.op_cost(g, g.op("lin0"), "cpu1", DType.FP32)
    roof = RooflineModel(m).op_cost(g, g.op("lin0"), "cpu1", DType.FP32)
    assert c.source is Source.ROOFLINE and c.total_s == roof.total_s
    assert "none for device 'cpu1'" in str(dict(c.assumptions)["calibration"])


def test_int8_of_a_kind_without_an_int8_kernel_is_refused() -> None:
    m = local_machine()
    cal, g = synthetic_calibration(m, [1, 4, 16])
    model = CalibratedModel(m, cal)
    with pytest.raises(UnsupportedError, match=r"cpu1.*relu.*int8"):
        model.op_cost(g, g.op("relu"), "cpu1", DType.INT8)
    # a key the profiler found unsupported is refused too
    key, _ = op_key(g, g.op("lin0"), DType.INT8)
    cal2 = cal.model_copy(update={"failures": [Failure(
        device="cpu1", key=key, kind="linear", dtype="int8", reason="no int8 kernel")]})
    with pytest.raises(UnsupportedError, match="no int8 kernel"):
        CalibratedModel(m, cal2).op_cost(g, g.op("lin0"), "cpu1", DType.INT8)


def test_region_on_a_local_device_is_the_sum_of_its_ops() -> None:
    m = local_machine()
    cal, g = synthetic_calibration(m, [1, 4, 16])
    model = CalibratedModel(m, cal)
    ops = [g.op("lin0"), g.op("relu")]
    region = model.region_cost(g, ops, "cpu0", DType.FP32)
    parts = [model.op_cost(g, op, "cpu0", DType.FP32) for op in ops]
    assert region.total_s == pytest.approx(sum(p.total_s for p in parts))
    assert region.low_s <= region.total_s <= region.high_s


def test_conversion_measured_fitted_and_transfer_from_links() -> None:
    m = local_machine()
    src, dst = Representation(DType.FP32), Representation(DType.INT8)
    meas = []
    for numel in (1024, 8192, 65536, 524288):
        key, kind = conversion_key(numel, src, dst)
        f = conversion_features(numel, src, dst)
        t = 4e-6 + f["bytes"] / 4e9
        meas.append(Measurement(device="cpu0", key=key, kind=kind, dtype="int8", median_s=t,
                                p10_s=t * 0.95, p90_s=t * 1.1, n=10, features=f))
    cal = Calibration(devices=[device_record(d) for d in m.devices], measurements=meas,
                      fits=fit_measurements(meas))
    model = CalibratedModel(m, cal)
    measured = model.conversion_cost(Tensor("a", (8192,), DType.FP32), src, dst, "cpu0")
    assert measured.source is Source.PROFILED and measured.buffer_bytes == 8192
    fitted = model.conversion_cost(Tensor("a", (100_000,), DType.FP32), src, dst, "cpu0")
    assert fitted.source is Source.CALIBRATED
    assert fitted.total_s == pytest.approx(4e-6 + 500_000 / 4e9, rel=0.05)
    assert fitted.term(Term.LAUNCH) > 0 and fitted.term(Term.CONVERSION) > 0
    assert fitted.low_s <= fitted.total_s <= fitted.high_s
    assert model.conversion_cost(Tensor("a", (8,), DType.FP32), src, src, "cpu0").total_s == 0
    t = Tensor("a", (1000,), DType.FP32)
    tr = model.transfer_cost(t, src, "cpu0", "cpu1")
    assert tr.term(Term.TRANSFER) == pytest.approx(4000 / 5e9 + 1e-5)


def test_op_key_separates_what_costs_differently() -> None:
    g = linear_graph([4, 4, 8])
    k0 = op_key(g, g.op("lin0"), DType.FP32)[0]
    assert k0 == op_key(g, g.op("lin1"), DType.FP32)[0]  # same shapes: one measurement
    assert k0 != op_key(g, g.op("lin2"), DType.FP32)[0]  # other shape
    assert k0 != op_key(g, g.op("lin0"), DType.INT8)[0]  # other precision
    onnx_op = Op("lin0", OpKind.LINEAR, ("x0", "w0"), ("y0",),
                 provenance=Provenance(source="n", source_op="onnx::Gemm"))
    assert k0 != op_key(g, onnx_op, DType.FP32)[0]  # other backend family
    attr_op = Op("lin0", OpKind.LINEAR, ("x0", "w0"), ("y0",), Attrs.of(alpha=2.0),
                 provenance=g.op("lin0").provenance)
    assert k0 != op_key(g, attr_op, DType.FP32)[0]


def test_fit_recovers_a_linear_law() -> None:
    m = local_machine()
    cal, _ = synthetic_calibration(m, [1, 2, 4, 8, 16, 32, 64, 128, 256])
    fit = next(f for f in cal.fits if f.device == "cpu0" and f.kind == "linear")
    assert fit.level == "kind" and fit.loo_median_abs_pct < 2.0
    assert fit.resid_q10 <= 0 <= fit.resid_q90


def test_calibration_round_trips_through_json(tmp_path: Path) -> None:
    m = local_machine()
    cal, _ = synthetic_calibration(m, [1, 4, 16, 64], noise=0.1)
    path = cal.save(tmp_path / "cal.json")
    back = load_calibration(path)
    assert back == cal
    assert back.fingerprint() == cal.fingerprint()
    assert json.loads(path.read_text())["format"] == "placewise-calibration"


def test_merge_refits_over_all_measurements() -> None:
    m = local_machine()
    a, _ = synthetic_calibration(m, [1, 4, 16])
    b, _ = synthetic_calibration(m, [64, 256, 1024])
    merged = merge_calibrations([a, b])
    assert len(merged.measurements) == len(a.measurements) + len(b.measurements)
    fit = next(f for f in merged.fits if f.device == "cpu0" and f.kind == "linear")
    assert fit.n == 6


def test_load_cost_model_matches_the_machine(tmp_path: Path) -> None:
    m = local_machine()
    cal, _ = synthetic_calibration(m, [1, 4, 16])
    path = cal.save(tmp_path / "cal.json")
    assert isinstance(load_cost_model(m, None), RooflineModel)
    model = load_cost_model(m, path)
    assert isinstance(model, CalibratedModel) and model.fingerprint() == cal.fingerprint()
    # other cores on this machine: refused
    moved = local_machine(cpu1={"cores": [2]})
    with pytest.raises(SpecError, match=r"cal.json: devices\[1\] \(cpu1\): calibrated with cores"):
        load_cost_model(moved, path)
    other_backend = local_machine(cpu0={"backend": "onnxruntime"})
    with pytest.raises(SpecError, match="backend"):
        load_cost_model(other_backend, path)
    with pytest.raises(SpecError, match="not a device of machine 'h100-sxm-server'"):
        load_cost_model(load_machine("h100-sxm-server"), path)
    other_cpu = local_machine(cpu_model="Other CPU")
    with pytest.raises(SpecError, match=r"tags\.cpu_model"):
        load_cost_model(other_cpu, path)


def _good(tmp_path: Path) -> dict[str, Any]:
    cal, _ = synthetic_calibration(local_machine(), [1, 4, 16])
    return json.loads(cal.save(tmp_path / "good.json").read_text())


@pytest.mark.parametrize("mutate, place, problem", [
    (lambda d: d["measurements"][0].update(median_s=-1.0), "measurements[0].median_s",
     "finite number >= 0"),
    (lambda d: d["measurements"][0].update(p10_s=1.0), "measurements[0]", "p10_s <= median_s"),
    (lambda d: d["measurements"][0].update(device="gpu7"), "top level", "gpu7"),
    (lambda d: d["measurements"][0]["features"].update(magic=1.0),
     "measurements[0].features", "unknown feature"),
    (lambda d: d["fits"][0].update(coef=[1.0]), "fits[0]", "coefficients"),
    (lambda d: d["fits"][0].update(resid_q10=1e30), "fits[0]", "log-ratio"),
    (lambda d: d["fits"][0].update(resid_q10=1e300), "fits[0].resid_q10", "too large"),
    (lambda d: d.update(version=99), "version", "not supported"),
    (lambda d: d.update(format="something-else"), "format", "not a placewise calibration"),
    (lambda d: d.update(surprise=1), "surprise", "Extra inputs"),
    (lambda d: d["devices"].append(d["devices"][0]), "top level", "repeat"),
])
def test_bad_calibration_files_name_file_place_problem(tmp_path: Path, mutate: Any,
                                                       place: str, problem: str) -> None:
    data = _good(tmp_path)
    mutate(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(SpecError) as info:
        load_calibration(path)
    err = info.value
    assert err.file == str(path)
    assert err.place == place
    assert problem in err.problem


@pytest.mark.parametrize("content, problem", [
    (b"{not json", "not valid JSON"),
    (b'{"median_s": NaN}', "NaN"),
    (b"[1, 2]", "expected a JSON object"),
    (b"\xff\xfe\x00garbage", "not UTF-8"),
    (b"[" * 100_000 + b"]" * 100_000, "nested more than"),
])
def test_corrupt_calibration_files(tmp_path: Path, content: bytes, problem: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(SpecError, match=problem) as info:
        load_calibration(path)
    assert info.value.file == str(path)


def test_missing_calibration_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such calibration file"):
        load_cost_model(local_machine(), tmp_path / "nope.json")


def _two_variant_graph(batch: int) -> Graph:
    tensors = [Tensor("x", (batch, 256), DType.FP32, role=Role.INPUT),
               Tensor("a", (batch, 256), DType.FP32, role=Role.OUTPUT),
               Tensor("b", (batch, 256), DType.FP32, role=Role.OUTPUT)]
    prov = Provenance(source_op="aten.transpose.int")
    ops = [Op("fast", OpKind.TRANSPOSE, ("x",), ("a",), Attrs.of(perm=(0, 1)), prov),
           Op("slow", OpKind.TRANSPOSE, ("x",), ("b",), Attrs.of(perm=(1, 0)), prov)]
    return Graph.build("t", tensors, ops)


def test_series_fit_follows_the_same_op_across_batch_sizes() -> None:
    """Two transposes with identical shape features but different permutations (one twice
    as slow): the kind fit cannot tell them apart, each op's own series can."""
    m = local_machine()
    dev = m.device("cpu0")
    meas = []
    for batch in (1, 2, 4, 8):
        g = _two_variant_graph(batch)
        for op, scale in ((g.op("fast"), 1.0), (g.op("slow"), 2.0)):
            f = op_features(g, op, DType.FP32, dev)
            t = scale * (3e-6 + f["io_bytes"] / 2e9)
            key, _ = op_key(g, op, DType.FP32)
            meas.append(Measurement(device="cpu0", key=key, kind="transpose", dtype="fp32",
                                    median_s=t, p10_s=t, p90_s=t, n=9, family="torch",
                                    series=op_series(g, op, DType.FP32), features=f))
    cal = Calibration(devices=[device_record(dev)], measurements=meas,
                      fits=fit_measurements(meas))
    model = CalibratedModel(m, cal)
    g16 = _two_variant_graph(16)
    for name, scale in (("fast", 1.0), ("slow", 2.0)):
        op = g16.op(name)
        c = model.op_cost(g16, op, "cpu0", DType.FP32)
        want = scale * (3e-6 + op_features(g16, op, DType.FP32, dev)["io_bytes"] / 2e9)
        assert c.source is Source.CALIBRATED
        assert str(dict(c.assumptions)["fit"]).startswith("series:transpose")
        assert c.total_s == pytest.approx(want, rel=0.02)
        assert c.low_s <= c.total_s <= c.high_s
    assert op_series(g16, g16.op("fast"), DType.FP32) != op_series(g16, g16.op("slow"),
                                                                  DType.FP32)


def test_flagged_measurements_are_neither_used_nor_fitted() -> None:
    m = local_machine()
    cal, g = synthetic_calibration(m, [1, 4, 16, 64])
    op = g.op("lin1")
    key, _ = op_key(g, op, DType.FP32)
    meas = [x.model_copy(update={"flags": ["contention"], "median_s": 1.0, "p90_s": 1.0})
            if x.device == "cpu0" and x.key == key else x for x in cal.measurements]
    cal2 = cal.model_copy(update={"measurements": meas, "fits": fit_measurements(meas)})
    c = CalibratedModel(m, cal2).op_cost(g, op, "cpu0", DType.FP32)
    assert c.source is Source.CALIBRATED and c.total_s < 1e-3
    assert "contention" in str(dict(c.assumptions)["measurement_ignored"])


def _with_dispatch(cal: Calibration, median_s: float) -> Calibration:
    d = StepOverhead(median_s=median_s, p10_s=0.8 * median_s, p90_s=1.5 * median_s, n=800,
                     method="test")
    return cal.model_copy(update={"devices": [r.model_copy(update={"dispatch": d})
                                              for r in cal.devices]})


def test_measured_dispatch_is_one_launch_term_per_executor_step() -> None:
    m = local_machine()
    cal, g = synthetic_calibration(m, [1, 4, 16])
    plain = CalibratedModel(m, cal)
    model = CalibratedModel(m, _with_dispatch(cal, 7e-6))
    assert model.step_overhead("cpu0") == model.calibration.devices[0].dispatch
    op = g.op("lin1")
    base = plain.op_cost(g, op, "cpu0", DType.FP32)
    c = model.op_cost(g, op, "cpu0", DType.FP32)
    assert c.term(Term.LAUNCH) == pytest.approx(base.term(Term.LAUNCH) + 7e-6)
    assert c.total_s == pytest.approx(base.total_s + 7e-6)
    assert (c.low_s, c.high_s) == pytest.approx((base.low_s + 5.6e-6, base.high_s + 10.5e-6))
    assert dict(c.assumptions)["dispatch_s"] == pytest.approx(7e-6)
    # a region is one task: one dispatch, not one per op
    ops = [g.op("lin0"), g.op("relu")]
    region = model.region_cost(g, ops, "cpu0", DType.FP32)
    assert region.total_s == pytest.approx(
        plain.region_cost(g, ops, "cpu0", DType.FP32).total_s + 7e-6)
    assert region.low_s <= region.total_s <= region.high_s
    # conversions are a step; a transfer is a send step and a receive step
    t = Tensor("a", (1000,), DType.FP32)
    fp, i8 = Representation(DType.FP32), Representation(DType.INT8)
    conv = model.conversion_cost(t, fp, i8, "cpu0")
    assert conv.total_s == pytest.approx(plain.conversion_cost(t, fp, i8, "cpu0").total_s
                                         + 7e-6)
    tr = model.transfer_cost(t, fp, "cpu0", "cpu1")
    # no run call measured: the partition cut is the roofline's (its stated CPU default)
    cut = plain.transfer_cost(t, fp, "cpu0", "cpu1").term(Term.LAUNCH)
    assert cut == pytest.approx(DEFAULT_PARTITION_S[DeviceKind.CPU][0])
    assert tr.term(Term.LAUNCH) == pytest.approx(14e-6 + cut)
    assert tr.total_s == pytest.approx(plain.transfer_cost(t, fp, "cpu0", "cpu1").total_s
                                       + 14e-6)
    assert model.transfer_cost(t, fp, "cpu0", "cpu0").total_s == 0
    assert model.fingerprint() != plain.fingerprint()


def test_calibration_without_dispatch_loads_and_says_not_measured(tmp_path: Path) -> None:
    m = local_machine()
    cal, g = synthetic_calibration(m, [1, 4, 16])
    data = _with_dispatch(cal, 7e-6).to_json()
    for rec in data["devices"]:
        del rec["dispatch"]  # a file written before the field existed
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    old = load_calibration(path)
    assert all(d.dispatch.n == 0 and d.dispatch.median_s == 0 for d in old.devices)
    model = CalibratedModel(m, old)
    c = model.op_cost(g, g.op("lin1"), "cpu0", DType.FP32)
    assert c.total_s == pytest.approx(CalibratedModel(m, cal).op_cost(
        g, g.op("lin1"), "cpu0", DType.FP32).total_s)
    assert "dispatch not measured" in str(dict(c.assumptions)["dispatch"])


def test_dispatch_spread_must_be_ordered(tmp_path: Path) -> None:
    m = local_machine()
    cal, _ = synthetic_calibration(m, [1, 4, 16])
    data = cal.to_json()
    data["devices"][0]["dispatch"] = {"median_s": 1e-5, "p10_s": 2e-5, "p90_s": 3e-5, "n": 5}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(SpecError, match=r"p10_s <= median_s"):
        load_calibration(path)
