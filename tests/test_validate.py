"""validate: a real run of a tiny plan, predicted next to measured, attributed term by term."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from placewise.plan import build_plan, save_plan
from placewise.runtime.opexec import load_source
from placewise.schedule import Assignment, Placement, evaluate
from placewise.units import DType
from placewise.validate import (
    TERMS,
    ValidationReport,
    latency_stats,
    output_quality,
    render_validation,
    validate_plan,
)
from tests.runtime.helpers import local_machine, own_segments, problem_of, tiny_plan, tiny_source


@pytest.fixture(scope="module")
def report(tmp_path_factory: Any) -> ValidationReport:
    plan, _ = tiny_plan()
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    save_plan(plan, path)
    return validate_plan(path, source=tiny_source(), machine=local_machine(), requests=5,
                         stream_s=0.2, solo_repeats=2, warmup=1, baseline=True)


def test_the_json_has_the_contract_keys(report: ValidationReport) -> None:
    data = report.to_json()
    assert {"predicted", "measured", "error", "attribution", "quality", "baseline"} <= set(data)
    json.dumps(data, allow_nan=False)
    p50 = data["measured"]["latency"]["p50_s"]
    pred = data["predicted"]["latency_s"]
    assert data["error"]["latency"] == pytest.approx((p50 - pred) / pred)
    assert data["measured"]["latency"]["n"] == 5
    # less the time other processes held the cores: never above the raw latency
    on_cpu = report.latency_on_cpu
    assert on_cpu is not None and on_cpu.n == 5 and on_cpu.p50_s <= report.latency.p50_s
    assert data["measured"]["throughput_rps"] > 0
    assert data["error"]["throughput"] is not None


def test_latency_attribution_adds_up_exactly(report: ValidationReport) -> None:
    a = report.attribution
    assert set(a.terms_s) == set(TERMS)
    assert sum(a.terms_s.values()) == pytest.approx(a.measured_s - a.predicted_s, abs=1e-9)
    assert a.predicted_s == report.predicted_latency_s
    # the path runs from the inputs to the outputs, in time order
    assert a.critical_path[0].step == "io:in" and a.critical_path[-1].step == "io:out"
    # every step's terms are its measured + wait minus predicted seconds
    for s in a.critical_path:
        assert sum(s.terms_s.values()) == pytest.approx(s.measured_s + s.gap_s - s.predicted_s,
                                                        abs=1e-9)


def test_attribution_names_op_kinds_and_edges(report: ValidationReport) -> None:
    a = report.attribution
    kinds = dict(a.by_kind)
    assert "linear/int8" in kinds and "linear" in kinds
    assert any(e.startswith("xfer:") for e, _ in a.by_edge)
    assert any(e.startswith("conv:") for e, _ in a.by_edge)
    tasks = {t.task: t for t in a.tasks}
    int8 = next(t for t in tasks.values() if t.label == "linear/int8")
    # the int8 kernel takes fp32 activations: the executor's hidden conversions show up
    assert int8.terms_s["conversion"] > 0
    assert sum(int8.terms_s.values()) == pytest.approx(int8.delta_s, abs=1e-9)
    assert a.explanation


def test_throughput_is_attributed_on_the_bottleneck(report: ValidationReport) -> None:
    t = report.throughput_attribution
    assert t is not None
    assert t.measured_bottleneck in report.devices
    assert sum(t.terms_s.values()) == pytest.approx(t.measured_period_s - t.predicted_period_s,
                                                    abs=1e-9)


def test_memory_is_compared_per_device(report: ValidationReport) -> None:
    assert {m.device for m in report.memory} == set(report.devices)
    for m in report.memory:
        assert m.predicted_bytes > 0 and m.measured_bytes > 0
        assert m.error is not None and abs(m.error) < 0.5
        assert m.rss_peak_bytes > m.measured_bytes


def test_quality_against_the_fp32_reference(report: ValidationReport) -> None:
    (q,) = report.quality
    assert q.n == 5
    assert 0 <= q.rel_l2_median <= q.rel_l2_max < 0.05
    assert q.cosine_min > 0.99
    assert q.top1_agreement is not None and q.top1_agreement >= 0.8


def test_the_baseline_runs_the_same_requests(report: ValidationReport) -> None:
    by = {b.precision: b for b in report.baselines}
    assert set(by) == {"fp32", "int8 (dynamic quantization)"}  # the plan computes in int8
    fp32 = by["fp32"]
    assert fp32.available, fp32.reason
    assert fp32.latency is not None and fp32.latency.n == 5
    assert fp32.throughput_rps and fp32.throughput_rps > 0
    assert fp32.plan_latency_speedup and fp32.plan_throughput_ratio
    assert fp32.quality and fp32.quality[0].rel_l2_max < 1e-4


def test_render_tells_the_story(report: ValidationReport) -> None:
    text = render_validation(report)
    for needle in ("latency p50", "throughput", "memory cpu0", "latency attribution",
                   "quality", "baseline"):
        assert needle in text
    assert not own_segments()


def test_an_onnx_file_validates(tmp_path: Any) -> None:
    from placewise.graph import zoo

    path = tmp_path / "mlp.onnx"
    zoo.export_onnx("mlp", {"layers": 1, "hidden": 16, "in_features": 8, "out_features": 4},
                    path, dynamic_batch=True)
    src = load_source(str(path), batch=2)
    prob = problem_of(src, batch=2)
    names = prob.vertex_names
    pl = Placement.of({n: Assignment("cpu1" if i == len(names) - 1 else "cpu0", DType.FP32)
                       for i, n in enumerate(names)})
    plan = build_plan(prob, evaluate(prob, pl), model_ref=str(path), strategy="test")
    rep = validate_plan(plan, machine=local_machine(), requests=3, stream_s=0.1,
                        solo_repeats=1, warmup=1, baseline=True)
    assert rep.batch == 2 and rep.latency.n == 3
    assert rep.quality[0].rel_l2_max < 1e-5  # fp32 everywhere
    (b,) = rep.baselines
    assert b.available, b.reason
    assert sum(rep.attribution.terms_s.values()) == pytest.approx(
        rep.attribution.delta_s, abs=1e-9)


def test_requests_must_be_positive() -> None:
    plan, _ = tiny_plan()
    from placewise.errors import InputError

    with pytest.raises(InputError, match="requests"):
        validate_plan(plan, machine=local_machine(), requests=0)


def test_statistics_helpers() -> None:
    s = latency_stats([1.0] * 99 + [5.0])
    assert s.p50_s == 1.0 and s.p99_s == 1.0 and s.max_s == 5.0 and s.n == 100
    y = [np.array([[1.0, 0.0], [0.0, 1.0]])]
    r = [np.array([[1.0, 0.1], [0.2, 1.0]])]
    q = output_quality("y", y, r, logits=True)
    assert q.top1_agreement == 1.0 and q.max_abs == pytest.approx(0.2)
    assert math.isclose(q.rel_l2_max, np.linalg.norm([0, 0.1, 0.2, 0]) /
                        np.linalg.norm(r[0]))
