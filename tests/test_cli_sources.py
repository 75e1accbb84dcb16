"""Commands that read a plan take its machine spec and calibration without --hw /
--calibration, and refuse a moved or changed file in one line (``placewise.plan_sources``)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from placewise.hardware.spec import list_presets
from tests.test_cli import assert_bad_input, run, run_together


def _spec(folder: Path) -> Path:
    from importlib import resources

    assert "jetson-agx-orin" in list_presets()
    data = yaml.safe_load((resources.files("placewise.hardware") / "presets"
                           / "jetson-agx-orin.yaml").read_text())
    data["name"] = "my-orin"
    path = folder / "orin.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_commands_take_the_recorded_spec_and_calibration(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    init = run("recalibrate", "--init", "--hw", "orin.yaml", "--out", "cal.json", cwd=tmp_path)
    assert init.returncode == 0, init.stderr
    made = run("plan", "zoo:mlp?layers=2", "--hw", "orin.yaml", "--calibration", "cal.json",
               "--strategy", "greedy", "--time-limit", "5", "--out", "p.json", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    sources = json.loads((tmp_path / "p.json").read_text())["sources"]
    assert sources["machine"] == {"path": str(spec.resolve()), "given": "orin.yaml",
                                  "fingerprint": sources["machine"]["fingerprint"]}
    assert sources["calibration"]["path"] == str((tmp_path / "cal.json").resolve())
    plan = str(tmp_path / "p.json")
    # from another folder, no flags: the recorded absolute paths are used
    export, sheet, serve = run_together(
        ["export", plan, "--out", str(tmp_path / "ex"), "--json"],
        ["sheet", plan, "--out", str(tmp_path / "s.csv")],
        ["serve", plan, "--rate", "50", "--requests", "100", "--json"])
    for proc in (export, sheet, serve):
        assert proc.returncode == 0, (proc.args, proc.stderr)
    assert json.loads(serve.stdout)["machine"] == "my-orin"
    assert json.loads(export.stdout)["partitions"]

    spec.rename(tmp_path / "moved.yaml")
    (tmp_path / "cal.json").rename(tmp_path / "cal-moved.json")
    export, serve, pointed = run_together(
        ["export", plan, "--out", str(tmp_path / "ex2")],
        ["serve", plan, "--rate", "50", "--requests", "100", "--hw",
         str(tmp_path / "moved.yaml")],
        ["serve", plan, "--rate", "50", "--requests", "100", "--json", "--hw",
         str(tmp_path / "moved.yaml"), "--calibration", str(tmp_path / "cal-moved.json")])
    assert_bad_input(export, "sources.machine", "orin.yaml", "--hw NEWPATH", "sha256:")
    assert not (tmp_path / "ex2").exists()
    assert_bad_input(serve, "sources.calibration", "cal.json", "--calibration NEWPATH")
    assert pointed.returncode == 0, pointed.stderr
