"""``placewise validate PLAN --measured PROFILE``: a plan compared with a profile taken by
plain onnxruntime (as a user takes one on the target), running nothing: plans for this
machine and for a preset placewise cannot run on; every refusal is exit 2, one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from placewise.graph.zoo import export_onnx
from placewise.plan import load_plan
from placewise.plan_records import Plan
from placewise.schedule.simulate import TaskKind
from tests.calibrate.ortprofile import take_profile
from tests.test_cli import assert_bad_input, run, run_together

_PLANS = {"local": ["--hw", "local"],
          "orin": ["--hw", "jetson-agx-orin", "--strategy", "single:cpu"],
          "orin-gpu": ["--hw", "jetson-agx-orin", "--strategy", "single:gpu"]}


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(folder, model, profile): the zoo ResNet as ONNX, profiled by plain onnxruntime
    (5 runs), planned at batch 1 for each of ``_PLANS`` (plan-NAME.json)."""
    folder = tmp_path_factory.mktemp("validate-measured")
    model = export_onnx("resnet", {}, folder / "resnet.onnx")
    prof = take_profile(model, folder, runs=5)
    cmds = [["plan", str(model), "--batch", "1", *args, "--out", str(folder / f"plan-{n}.json")]
            for n, args in _PLANS.items()]
    for proc in run_together(*cmds):
        assert proc.returncode == 0, proc.stderr
    return folder, model, prof


@pytest.fixture(scope="module")
def docs(made: tuple[Path, Path, Path]) -> dict[str, dict[str, object]]:
    folder, _m, prof = made
    cmds = [["validate", str(folder / f"plan-{n}.json"), "--measured", str(prof), "--json"]
            for n in _PLANS]
    got = {}
    for n, proc in zip(_PLANS, run_together(*cmds), strict=True):
        assert proc.returncode == 0, proc.stderr
        got[n] = json.loads(proc.stdout)
    return got


def _plan(folder: Path, name: str) -> Plan:
    return load_plan(folder / f"plan-{name}.json")


@pytest.mark.parametrize("name", list(_PLANS))
def test_partitions_sum_to_the_measured_total(docs: dict[str, dict[str, object]],
                                              made: tuple[Path, Path, Path], name: str) -> None:
    folder, _m, prof = made
    doc = docs[name]
    plan = _plan(folder, name)
    assert {"plan", "machine", "profiles", "tools", "profile_device", "profile_device_kind",
            "engines", "plan_devices", "partitions", "copies", "end_to_end",
            "measured_total_s", "misses", "unattributed", "unmatched", "other_engine",
            "notes"} <= set(doc)
    assert doc["profiles"] == [str(prof)] and doc["tools"] == ["onnxruntime"]
    assert doc["profile_device_kind"] == "cpu"
    parts = doc["partitions"]
    assert isinstance(parts, list) and parts
    total = doc["measured_total_s"]
    assert isinstance(total, float) and total > 0
    assert sum(p["measured_s"] for p in parts) == pytest.approx(total, rel=1e-9)
    computed = sum(t.duration_s for t in plan.schedule.tasks if t.kind is TaskKind.COMPUTE)
    assert sum(p["predicted_s"] for p in parts) == pytest.approx(computed, rel=1e-9)
    for p in parts:
        assert {"name", "device", "device_kind", "ops", "ops_measured", "coverage",
                "predicted_s", "terms_s", "measured_s", "error", "flagged"} <= set(p)
        assert set(p["terms_s"]) == {"compute", "memory", "launch", "other"}
        assert sum(p["terms_s"].values()) == pytest.approx(p["predicted_s"], rel=1e-6)
        assert 0 < p["ops_measured"] <= p["ops"] and 0 < p["coverage"] <= 1
    # every op of the profiled model that a plain CPU session runs was measured
    assert sum(p["ops_measured"] for p in parts) >= 0.9 * sum(p["ops"] for p in parts)
    e2e = doc["end_to_end"]
    assert isinstance(e2e, dict)
    assert e2e["predicted_s"] == pytest.approx(plan.predicted_latency_s)
    # 5 runs, the warm-up dropped: the first always, the second too when it was still slow
    # (``warmup_runs`` decides by time, at most half of the runs)
    assert e2e["runs"] in (3, 4)
    assert 0 < e2e["measured_p10_s"] <= e2e["measured_median_s"] <= e2e["measured_p90_s"]
    assert e2e["error"] == pytest.approx(e2e["predicted_s"] / e2e["measured_median_s"] - 1)
    misses = doc["misses"]
    assert isinstance(misses, list) and 0 < len(misses) <= 10
    gaps = [abs(m["miss_s"]) for m in misses]
    assert gaps == sorted(gaps, reverse=True)
    assert all(m["kind"] and m["vertex"] in plan.regions for m in misses)
    assert doc["copies"] == []  # a CPU session copies nothing


def test_another_kind_of_device_is_flagged(docs: dict[str, dict[str, object]]) -> None:
    gpu, cpu = docs["orin-gpu"], docs["orin"]
    assert gpu["machine"] == "jetson-agx-orin" and gpu["profile_device"] == "cpu"
    assert all(p["flagged"] and p["device_kind"] == "gpu"
               for p in gpu["partitions"])  # type: ignore[union-attr]
    assert any("the profile measured the ops on cpu (cpu)" in n
               for n in gpu["notes"])  # type: ignore[union-attr]
    assert all(m["flagged"] for m in gpu["misses"])  # type: ignore[union-attr]
    assert not any(p["flagged"] for p in cpu["partitions"])  # type: ignore[union-attr]
    assert not any(m["flagged"] for m in cpu["misses"])  # type: ignore[union-attr]
    # the same profile, the same ops: the same measured total whatever the plan
    assert gpu["measured_total_s"] == pytest.approx(cpu["measured_total_s"], rel=0.05)


def test_prints_a_table(made: tuple[Path, Path, Path]) -> None:
    folder, _m, prof = made
    proc = run("validate", str(folder / "plan-orin.json"), "--measured", str(prof))
    assert proc.returncode == 0, proc.stderr
    for needle in ("nothing was run", "per partition", "end to end: predicted",
                   "largest misses", "jetson-agx-orin"):
        assert needle in proc.stdout, needle


def test_refusals(made: tuple[Path, Path, Path], tmp_path: Path) -> None:
    folder, model, prof = made
    other = export_onnx("mlp", {"layers": 2}, tmp_path / "mlp.onnx")
    trunc = tmp_path / "trunc.json"
    trunc.write_text(prof.read_text()[: prof.stat().st_size // 3])
    plan = str(folder / "plan-local.json")
    plans = [["plan", str(other), "--batch", "1", "--hw", "local", "--out",
              str(tmp_path / "plan-mlp.json")],
             ["plan", str(model), "--batch", "2", "--hw", "local", "--out",
              str(tmp_path / "plan-b2.json")]]
    for proc in run_together(*plans):
        assert proc.returncode == 0, proc.stderr
    cases = [
        (["validate", str(tmp_path / "plan-mlp.json"), "--measured", str(prof)],
         [str(prof), "a profile of another model"]),
        (["validate", str(tmp_path / "plan-b2.json"), "--measured", str(prof)],
         [str(prof), "profiled at batch 1, asked batch 2"]),
        (["validate", plan, "--measured", str(trunc)], [str(trunc), "not valid JSON"]),
        (["validate", plan, "--measured", str(tmp_path / "absent.json")],
         ["absent.json", "no such file"]),
        (["validate", plan, "--measured", str(prof), "--telemetry-out",
          str(tmp_path / "t.json")], ["--telemetry-out", "--measured runs nothing"]),
        (["validate", plan, "--measured", str(prof), "--layer-info", str(prof)],
         ["--layer-info", "for trtexec profiles"]),
        (["validate", plan, "--layer-info", str(prof)], ["--layer-info", "with --measured"]),
    ]
    for (_cmd, needles), proc in zip(cases, run_together(*(c for c, _n in cases)),
                                     strict=True):
        assert_bad_input(proc, *needles)
        assert proc.stdout == ""  # nothing ran, nothing was printed
    assert not (tmp_path / "t.json").exists()


def test_one_matching_for_import_and_validation(made: tuple[Path, Path, Path]) -> None:
    """``measure_ops`` (what validation compares) and ``import_calibration`` (what plans
    use) give an op measured alone under its key the same seconds."""
    from placewise.calibrate.imports.build import import_calibration, measure_ops
    from placewise.calibrate.imports.read import read_profile
    from placewise.graph.onnx_import import read_onnx_as_is
    from placewise.hardware.load import load_machine
    from placewise.runtime.planned import load_planned_source

    folder, model, prof = made
    graph = load_planned_source(str(model), _plan(folder, "orin"), None).graph
    assert graph is not None
    machine = load_machine("jetson-agx-orin")
    profile = read_profile(prof)
    kw = {"batch": 1, "onnx_model": read_onnx_as_is(model), "model_ref": str(model)}
    got = measure_ops([profile], graph, machine, **kw)  # type: ignore[arg-type]
    cal, report = import_calibration([profile], graph, machine, **kw)  # type: ignore[arg-type]
    assert got.device == report.device == "cpu"
    kept = len(got.runs_s)  # 5 runs less the warm-up (``warmup_runs``: 1 or 2, by time)
    assert kept in (3, 4) and got.run_overhead_s == report.run_overhead_s
    assert report.ops_covered <= len(got.op_s) <= len(graph.ops)
    by_source = {op.provenance.source or op.name: op.name for op in graph.ops}
    alone = [m for m in cal.measurements if m.n == kept and m.source_node in by_source]
    assert alone
    for m in alone:
        med, p10, p90 = got.op_s[by_source[m.source_node]]
        assert (med, p10, p90) == pytest.approx((m.median_s, m.p10_s, m.p90_s))
