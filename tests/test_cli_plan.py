"""plan / explain / trace / check from the command line, end to end on a preset."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from placewise.plan import load_plan, plan_records_json
from tests.test_cli import assert_bad_input, run, run_together

PLAN = ["plan", "zoo:mlp", "--hw", "jetson-agx-orin", "--strategy", "heft", "--time-limit",
        "5"]


Runs = dict[str, tuple[subprocess.CompletedProcess[str], Path]]


@pytest.fixture(scope="module")
def plan_runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """This module's plan runs of zoo models, in processes side by side (name -> process,
    its --out): the plan the tests read (with --json), the same command again for the
    determinism test, and zoo:bert for throughput."""
    folder = tmp_path_factory.mktemp("plan")
    commands = {
        "plan": ([*PLAN, "--json"], folder / "plan.json"),
        "again": (PLAN, folder / "again.json"),
        "throughput": (["plan", "zoo:bert", "--hw", "h100-sxm-server", "--objective",
                        "throughput", "--strategy", "greedy", "--json"],
                       folder / "throughput.json"),
    }
    procs = run_together(*[[*c, "--out", str(out)] for c, out in commands.values()])
    return {name: (proc, out) for (name, (_, out)), proc in
            zip(commands.items(), procs, strict=True)}


@pytest.fixture(scope="module")
def plan_file(plan_runs: Runs) -> Path:
    proc, f = plan_runs["plan"]
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    for key in ("makespan_s", "throughput_rps", "lower_bound_s", "strategy", "search_time_s",
                "feasible", "devices_used", "baselines"):
        assert key in summary, key
    assert summary["feasible"] is True
    assert 0 < summary["lower_bound_s"] <= summary["makespan_s"]
    assert {"greedy", "single:gpu"} <= set(summary["baselines"])
    return f


def test_plan_file_contents(plan_file: Path) -> None:
    data = json.loads(plan_file.read_text())
    assert data["schema_version"] == 2
    assert data["makespan_s"] > 0 and data["throughput_rps"] > 0
    assert data["placement"]["rows"] > 0 and data["schedule"]["tasks"]["rows"] > 0


def test_plan_is_deterministic(plan_file: Path, plan_runs: Runs) -> None:
    proc, again = plan_runs["again"]
    assert proc.returncode == 0, proc.stderr
    assert again.read_bytes() == plan_file.read_bytes()


def test_explain_text_and_json(plan_file: Path) -> None:
    proc = run("explain", str(plan_file))
    assert proc.returncode == 0, proc.stderr
    assert "critical path" in proc.stdout
    proc = run("explain", str(plan_file), "--json")
    assert proc.returncode == 0, proc.stderr
    assert isinstance(json.loads(proc.stdout), dict)


def test_explain_unknown_op(plan_file: Path) -> None:
    assert_bad_input(run("explain", str(plan_file), "--op", "no_such_op"), "--op", "no_such_op")


def test_trace(plan_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "trace.json"
    proc = run("trace", str(plan_file), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    events = json.loads(out.read_text())["traceEvents"]
    assert any(e.get("ph") == "X" for e in events)


def test_check_passes_and_catches_corruption(plan_file: Path, tmp_path: Path) -> None:
    proc = run("check", str(plan_file), "--hw", "jetson-agx-orin", "--model", "zoo:mlp", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["ok"] is True
    data = plan_records_json(load_plan(plan_file))  # records as objects: editable
    # start every task at time zero: precedence and overlap must break
    for task in data["schedule"]["tasks"]:
        dur = task["end_s"] - task["start_s"]
        task["start_s"], task["end_s"] = 0.0, dur
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    proc = run("check", str(bad), "--json")
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["ok"] is False


def test_plan_against_wrong_machine(plan_file: Path) -> None:
    assert_bad_input(run("check", str(plan_file), "--hw", "h100-sxm-server"), "fingerprint")


def test_corrupt_plan_file(tmp_path: Path) -> None:
    f = tmp_path / "p.json"
    f.write_text('{"schema_version": 1, "placement": ')
    assert_bad_input(run("explain", str(f)), str(f))


def test_bad_strategy_and_objective(tmp_path: Path) -> None:
    # an abstract two-task graph: the flags are the subject, not the model (no torch load)
    model = tmp_path / "two.json"
    model.write_text(json.dumps({
        "schema_version": 1, "name": "two",
        "tasks": [{"name": "a", "flops": 1e6}, {"name": "b", "flops": 1e6}],
        "edges": [{"src": "a", "dst": "b", "bytes": 8}]}))
    out = tmp_path / "p.json"
    assert_bad_input(run("plan", str(model), "--hw", "jetson-agx-orin", "--strategy",
                         "fastest", "--out", str(out)), "--strategy")
    assert_bad_input(run("plan", str(model), "--hw", "jetson-agx-orin", "--objective", "speed",
                         "--out", str(out)), "--objective")
    assert not out.exists()
    # the same model plans with good flags: the refusals were the flags'
    assert run("plan", str(model), "--hw", "jetson-agx-orin", "--strategy", "greedy",
               "--out", str(out)).returncode == 0 and out.exists()


def test_throughput_objective(plan_runs: Runs) -> None:
    proc, out = plan_runs["throughput"]
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["objective"] == "throughput"
