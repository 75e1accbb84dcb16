"""A plan remembers the spec file and calibration it was made from (``placewise.plan_sources``):
commands find them again without flags, and a moved or changed file is one clear error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from placewise.adapt.recalibrate import empty_calibration
from placewise.errors import InputError
from placewise.hardware.load import load_machine
from placewise.io import atomic_write_json
from placewise.plan import dumps_plan, load_plan, plan_from_json, plan_records_json, save_plan
from placewise.plan_records import Plan
from placewise.plan_sources import is_spec_file, plan_calibration, plan_machine, sources_json
from placewise.planning import build_problem, plan_model
from placewise.search.api import CommandBudget

MODEL = "zoo:mlp?layers=2"


def _spec(folder: Path, name: str = "my-orin", **device0: float) -> Path:
    data = yaml.safe_load(load_machine_text())
    data["name"] = name
    data["devices"][0].update(device0)
    path = folder / "orin.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def load_machine_text() -> str:
    from importlib import resources

    return (resources.files("placewise.hardware") / "presets" / "jetson-agx-orin.yaml"
            ).read_text()


def _plan(hw: str, calibration: Path | None) -> Plan:
    machine = load_machine(hw)
    prob = build_problem(MODEL, machine, calibration=calibration)
    clock = CommandBudget.make(2.0, ops=len(prob.graph.ops), start=0.0, clock=lambda: 0.0)
    sources = sources_json(hw, machine, calibration, prob.cost_model.fingerprint()
                           if calibration is not None else None)
    return plan_model(prob, MODEL, clock=clock, strategy="greedy", sources=sources).plan


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Plan, Path, Path, Path]:
    """A plan made from a spec file (given relative to nothing: absolute) and an empty
    calibration for it; returns the plan, its file, the spec and the calibration."""
    folder = tmp_path_factory.mktemp("sources")
    spec = _spec(folder)
    cal = folder / "cal.json"
    atomic_write_json(cal, empty_calibration(load_machine(str(spec)), {}).to_json())
    plan = _plan(str(spec), cal)
    save_plan(plan, folder / "plan.json")
    return plan, folder / "plan.json", spec, cal


def test_sources_recorded_and_round_trip(made: tuple[Plan, Path, Path, Path]) -> None:
    plan, file, spec, cal = made
    src = plan.sources
    assert src is not None and src.machine is not None and src.calibration is not None
    assert src.machine.path == str(spec.resolve()) and src.machine.given == str(spec)
    assert src.machine.fingerprint == plan.fingerprints.machine
    assert src.calibration.path == str(cal.resolve())
    assert src.calibration.fingerprint == plan.fingerprints.calibration
    back = load_plan(file)
    assert back == plan and dumps_plan(back) == dumps_plan(plan)
    assert plan_machine(back, file=str(file)).fingerprint() == plan.fingerprints.machine
    assert plan_calibration(back, file=str(file)) == cal.resolve()


def test_presets_and_old_plans_record_nothing(tmp_path: Path) -> None:
    assert not is_spec_file("jetson-agx-orin") and not is_spec_file("jetson-agx-orin@30W")
    assert not is_spec_file("local")
    plan = _plan("jetson-agx-orin", None)
    assert plan.sources is None
    assert plan_machine(plan).name == "jetson-agx-orin"
    assert plan_calibration(plan) is None
    old = plan_records_json(plan)  # a file written before plans had sources
    assert "sources" not in old
    assert plan_from_json(old) == plan


def _moved_copy(made: tuple[Plan, Path, Path, Path], tmp_path: Path) -> tuple[Plan, Path, Path]:
    """The plan's spec and calibration copied to ``tmp_path`` and the plan pointed there (a
    plan whose files this test may move and change)."""
    plan, _, spec, cal = made
    assert plan.sources is not None and plan.sources.machine and plan.sources.calibration
    new_spec, new_cal = tmp_path / "orin.yaml", tmp_path / "cal.json"
    new_spec.write_bytes(spec.read_bytes())
    new_cal.write_bytes(cal.read_bytes())
    srcs = plan.sources.model_copy(update={
        "machine": plan.sources.machine.model_copy(update={"path": str(new_spec)}),
        "calibration": plan.sources.calibration.model_copy(update={"path": str(new_cal)})})
    return plan.model_copy(update={"sources": srcs}), new_spec, new_cal


def test_moved_spec_is_one_clear_error(made: tuple[Plan, Path, Path, Path],
                                       tmp_path: Path) -> None:
    plan, spec, _ = _moved_copy(made, tmp_path)
    moved = tmp_path / "elsewhere.yaml"
    spec.rename(moved)
    with pytest.raises(InputError) as exc:
        plan_machine(plan, file="p.json")
    text = str(exc.value)
    assert exc.value.place == "sources.machine" and str(spec) in text
    assert "--hw NEWPATH" in text and plan.fingerprints.machine[:20] in text
    # pointed at, it is checked against the fingerprint and taken
    assert plan_machine(plan, load_machine(str(moved))).name == "my-orin"


def test_changed_spec_names_both_fingerprints(made: tuple[Plan, Path, Path, Path],
                                              tmp_path: Path) -> None:
    plan, spec, _ = _moved_copy(made, tmp_path)
    data = yaml.safe_load(spec.read_text())
    data["description"] = "edited words only"  # not part of the fingerprint
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    assert plan_machine(plan).fingerprint() == plan.fingerprints.machine
    data["devices"][0]["launch_overhead_s"] = 9e-5
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    found = load_machine(str(spec)).fingerprint()
    with pytest.raises(InputError) as exc:
        plan_machine(plan)
    text = str(exc.value)
    assert "changed" in text and plan.fingerprints.machine[:20] in text
    assert found[:20] in text and "--hw NEWPATH" in text
    with pytest.raises(InputError, match="another machine"):
        plan_machine(plan, load_machine(str(spec)))  # --hw FILE is checked too


def test_moved_or_changed_calibration(made: tuple[Plan, Path, Path, Path],
                                      tmp_path: Path) -> None:
    plan, _, cal = _moved_copy(made, tmp_path)
    text = cal.read_text()
    cal.unlink()
    with pytest.raises(InputError, match="--calibration NEWPATH") as exc:
        plan_calibration(plan, file="p.json")
    assert exc.value.place == "sources.calibration"
    other = tmp_path / "other.json"
    other.write_text(text)
    assert plan_calibration(plan, other) == other  # given: taken (its loader checks it)
    atomic_write_json(cal, {**json.loads(text), "created": "2020-01-01T00:00:00Z"})
    with pytest.raises(InputError, match="changed") as exc:
        plan_calibration(plan)
    assert plan.fingerprints.calibration[:35] in str(exc.value)
