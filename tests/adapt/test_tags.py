"""Stable tags (``runtime.telemetry``): what makes runs comparable, what is volatile, and
the refusals: ``validate --against``/``--calibration``, ``report`` and ``recalibrate``
refuse runs whose stable tags differ (exit 2, naming every differing tag), and with
``--allow-mismatch`` say exactly which tags differ."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from placewise.adapt.recalibrate import empty_calibration
from placewise.errors import InputError
from placewise.report.inputs import load_inputs
from placewise.runtime.telemetry import (
    MACHINE_TAG_KEYS,
    STABLE_TAG_KEYS,
    collect_tags,
    require_comparable,
    stable_tags,
    tag_differences,
)
from placewise.runtime.windows import TelemetryRun, TermWindow, Window, save_telemetry_run
from placewise.validate.compare import machine_tags
from tests.adapt.test_recalibrate import _cli
from tests.runtime.helpers import local_machine


def _tags(**change: str) -> dict[str, str]:
    t = stable_tags(model_fingerprint="m", graph_fingerprint="g", plan_fingerprint="p",
                    calibration_fingerprint="roofline/v1", arrival="poisson:100/s", seed=7,
                    devices=[("cpu0", [0], 1, "torch")])
    return {**t, **change}


def test_stable_tags_are_the_named_keys_and_volatile_tags_are_not_compared() -> None:
    t = _tags()
    assert tuple(t) == STABLE_TAG_KEYS
    assert set(MACHINE_TAG_KEYS) < set(STABLE_TAG_KEYS)
    vol = collect_tags()
    for k in ("placewise", "onnxruntime", "torch", "python", "cpu_model"):
        assert t[k] == vol[k]
    assert t["seed"] == "7" and t["threads"] == "cpu0=1" and int(t["cores"]) >= 1
    a = {**t, "date": "2026-01-01", "load_average_1m": "0.1", "host": "a"}
    b = {**t, "date": "2027-01-01", "load_average_1m": "9.9", "host": "b"}
    assert tag_differences(a, b) == {}
    assert require_comparable(a, b, what="x") == []


def test_every_differing_tag_is_named_and_refused_unless_allowed() -> None:
    a, b = _tags(), _tags(torch="0.0", seed="8")
    b.pop("cpu_model")
    assert set(tag_differences(a, b)) == {"torch", "seed", "cpu_model"}
    with pytest.raises(InputError) as exc:
        require_comparable(a, b, what="serve A against B")
    msg = str(exc.value)
    assert "serve A against B" in msg and "--allow-mismatch" in msg
    for k in ("torch", "seed", "cpu_model: "):
        assert k in msg
    assert "(not recorded)" in msg
    lines = require_comparable(a, b, what="x", allow_mismatch=True)
    assert sorted(line.split(":")[0] for line in lines) == ["cpu_model", "seed", "torch"]


def _result_files(tmp: Path, va: dict[str, str], sa: dict[str, str]) -> list[str]:
    v = {"plan": {}, "predicted": {}, "measured": {}, "attribution": {}, "stable_tags": va}
    s = {"batching": "none", "service": [], "quantiles": {}, "per_batch": "same",
         "stable_tags": sa}
    (tmp / "v.json").write_text(json.dumps(v))
    (tmp / "s.json").write_text(json.dumps(s))
    return [str(tmp / "v.json"), str(tmp / "s.json")]


def test_report_refuses_results_of_other_conditions(tmp_path: Path) -> None:
    same = _result_files(tmp_path, _tags(arrival="validate"), _tags(arrival="poisson:5/s"))
    assert load_inputs(same).tag_differences == []  # arrival and seed are the experiment's
    files = _result_files(tmp_path, _tags(), _tags(onnxruntime="0.1", threads="cpu0=2"))
    with pytest.raises(InputError, match=r"onnxruntime.*threads|threads.*onnxruntime"):
        load_inputs(files)
    got = load_inputs(files, allow_mismatch=True)
    assert sorted(d.split(":")[0] for d in got.tag_differences) == ["onnxruntime", "threads"]
    code, out, err = _cli("report", *files, "--out", str(tmp_path / "r.html"))
    assert code == 2 and "onnxruntime" in err and not out
    assert not (tmp_path / "r.html").exists()


def test_validate_refuses_an_earlier_run_or_calibration_of_other_tags(tmp_path: Path
                                                                     ) -> None:
    from placewise.adapt.recalibrate import recalibrate

    # a plan made for the test machine never reaches the executor here: the tags are
    # compared before anything runs
    from placewise.plan import build_plan, save_plan
    from placewise.schedule import evaluate
    from tests.adapt.test_recalibrate import _placement, _problem
    from tests.runtime.helpers import TINY_MLP

    cal = empty_calibration(local_machine(), {**machine_tags(), "torch": "0.0-old"})
    cal_file = cal.save(tmp_path / "cal.json")
    p = _problem(cal)
    plan = build_plan(p, evaluate(p, _placement(p)), model_ref=TINY_MLP, strategy="test")
    plan_file = tmp_path / "plan.json"
    save_plan(plan, plan_file)
    code, out, err = _cli("validate", str(plan_file), "--calibration", str(cal_file))
    assert code == 2 and "torch: '0.0-old' vs" in err and "--allow-mismatch" in err, err
    prev = tmp_path / "prev.json"
    prev.write_text(json.dumps({"plan": {}, "predicted": {}, "measured": {},
                                "stable_tags": {**machine_tags(), "python": "2.7"}}))
    code, out, err = _cli("validate", str(plan_file), "--against", str(prev))
    assert code == 2 and "python: '2.7' vs" in err and "plan_fingerprint" in err, err
    # a telemetry file is an earlier run too
    tw = TermWindow("launch", "launch:cpu0", "cpu0", "", 1.0, 0.5, 1.5, 1.0, 0.0, 1)
    trun = TelemetryRun({**machine_tags(), "cpu_model": "another CPU"}, "p",
                        cal.fingerprint(), (Window(0, 1, (tw,)),))
    save_telemetry_run(trun, tmp_path / "run.json")
    code, _, err = _cli("validate", str(plan_file), "--against", str(tmp_path / "run.json"))
    assert code == 2 and "cpu_model: 'another CPU' vs" in err
    # recalibrate: the calibration's machine against the telemetry's
    code, _, err = _cli("recalibrate", "--calibration", str(cal_file), "--telemetry",
                        str(tmp_path / "run.json"), "--out", str(tmp_path / "cal2.json"))
    assert code == 2 and "torch: '0.0-old' vs" in err and "cpu_model: " in err
    assert not (tmp_path / "cal2.json").exists()
    code, out, err = _cli("recalibrate", "--calibration", str(cal_file), "--telemetry",
                          str(tmp_path / "run.json"), "--out", str(tmp_path / "cal2.json"),
                          "--allow-mismatch", "--json")
    assert code == 0, err
    assert any(m.startswith("telemetry 1: torch:") for m in json.loads(out)["mismatches"])
    assert recalibrate(cal, [trun], allow_mismatch=True).calibration.revision == 1


def test_serve_json_carries_stable_tags_and_refuses_an_earlier_run_of_other_tags(
        tmp_path: Path) -> None:
    from placewise.plan import build_plan, save_plan
    from placewise.schedule import evaluate
    from tests.adapt.test_recalibrate import _placement, _problem
    from tests.runtime.helpers import TINY_MLP

    cal = empty_calibration(local_machine(), machine_tags())
    p = _problem(cal)
    plan = build_plan(p, evaluate(p, _placement(p)), model_ref=TINY_MLP, strategy="test")
    plan_file, cal_file = tmp_path / "plan.json", cal.save(tmp_path / "cal.json")
    save_plan(plan, plan_file)
    spec = tmp_path / "machine.yaml"
    import yaml

    spec.write_text(yaml.safe_dump(local_machine().model_dump(mode="json")))
    common = (str(plan_file), "--hw", str(spec), "--calibration", str(cal_file),
              "--requests", "200", "--json")
    code, out, err = _cli("serve", *common, "--rate", "1000")
    assert code == 0, err
    first = json.loads(out)
    assert set(first["stable_tags"]) == set(STABLE_TAG_KEYS)
    assert first["stable_tags"]["arrival"] == "poisson:1000/s"
    (tmp_path / "s1.json").write_text(out)
    code, out, err = _cli("serve", *common, "--rate", "1000", "--against",
                          str(tmp_path / "s1.json"))
    assert code == 0 and json.loads(out)["against"]["tag_differences"] == [], err
    code, out, err = _cli("serve", *common, "--rate", "2000", "--seed", "5", "--against",
                          str(tmp_path / "s1.json"))
    assert code == 2 and "seed: '0' vs '5'" in err and "arrival: " in err and not out
    code, out, err = _cli("serve", *common, "--rate", "2000", "--seed", "5", "--against",
                          str(tmp_path / "s1.json"), "--allow-mismatch")
    assert code == 0, err
    diffs = json.loads(out)["against"]["tag_differences"]
    assert sorted(d.split(":")[0] for d in diffs) == ["arrival", "seed"]
    assert "tags differ (--allow-mismatch): seed" in err


def test_a_profiled_calibrations_pinning_tag_is_not_the_core_count() -> None:
    from placewise.adapt.recalibrate import recalibrate
    from placewise.runtime.telemetry import calibration_tag_keys

    mine = machine_tags()
    tags = {k: v for k, v in mine.items() if k != "placewise"}
    cal = empty_calibration(local_machine(), {**tags, "cores": "cpu0=0;cpu1=1"})
    assert "cores" not in calibration_tag_keys(cal)
    assert calibration_tag_keys(empty_calibration(local_machine(), mine)) == MACHINE_TAG_KEYS
    tw = TermWindow("launch", "launch:cpu0", "cpu0", "", 1.0, 0.5, 1.5, 1.0, 0.0, 1)
    run_ = TelemetryRun(dict(mine), "p", cal.fingerprint(), (Window(0, 1, (tw,)),))
    assert recalibrate(cal, [run_]).mismatches == ()
    other = TelemetryRun({**mine, "torch": "9"}, "p", cal.fingerprint(), (Window(0, 1, (tw,)),))
    with pytest.raises(InputError, match="torch"):
        recalibrate(cal, [other])
