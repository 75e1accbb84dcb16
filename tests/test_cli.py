"""The command line end to end: reporting commands, golden output, bad input -> exit 2."""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.cli_runner import run_cli, start_cli

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="120", TERM="dumb", PYTHONHASHSEED="0")
    return run_cli(args, env=env, cwd=cwd, timeout=600)


def run_together(*commands: list[str], env: dict[str, str] | None = None,
                 timeout: float = 600) -> list[subprocess.CompletedProcess[str]]:
    """``run`` of each command (``env``: the environment, ``run``'s by default), all
    started at once: for commands that measure nothing, so that one computes while another
    waits for its interpreter. Every process is gone when this returns or raises."""
    if env is None:
        env = dict(os.environ, COLUMNS="120", TERM="dumb", PYTHONHASHSEED="0")
    procs: list[Any] = []
    try:
        for c in commands:
            procs.append(start_cli(c, env=env, shown=c))
        return [p.wait(timeout) for p in procs]
    finally:
        for p in procs:
            p.kill()


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if not UPDATE:
            pytest.fail(f"golden file {path} was missing and has been written; rerun")
    assert text == path.read_text(), f"output differs from {path} (UPDATE_GOLDEN=1 to accept)"


def assert_bad_input(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])


# ---- golden inspect ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def zoo_runs(tmp_path_factory: pytest.TempPathFactory
             ) -> tuple[dict[str, subprocess.CompletedProcess[str]], Path]:
    """This module's CLI runs that load zoo models (the inspects below and ``zoo export mlp
    --format onnx``), side by side: each only reads, counts or writes its own file.
    Returns the finished processes by name and the exported file."""
    f = tmp_path_factory.mktemp("zoo") / "mlp.onnx"
    commands = {"zoo:mlp": ["inspect", "zoo:mlp"], "zoo:bert": ["inspect", "zoo:bert"],
                "zoo:resnet --json": ["inspect", "zoo:resnet", "--json"],
                "export": ["zoo", "export", "mlp", "--format", "onnx", "--out", str(f)]}
    procs = run_together(*commands.values())
    return dict(zip(commands, procs, strict=True)), f


@pytest.mark.parametrize("model,golden", [
    ("zoo:mlp", "inspect_mlp.txt"),
    ("zoo:bert", "inspect_bert.txt"),
])
def test_inspect_golden(zoo_runs: tuple[dict[str, subprocess.CompletedProcess[str]], Path],
                        model: str, golden: str) -> None:
    proc = zoo_runs[0][model]
    assert proc.args == ["inspect", model]
    assert proc.returncode == 0, proc.stderr
    check_golden(golden, proc.stdout)


def test_inspect_json_keys(zoo_runs: tuple[dict[str, subprocess.CompletedProcess[str]], Path]
                           ) -> None:
    proc = zoo_runs[0]["zoo:resnet --json"]
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    for key in ("ops", "tensors", "flops", "param_bytes", "activation_bytes", "by_kind",
                "uncounted"):
        assert key in data
    assert data["flops"] > 0 and data["ops"] > 10
    assert all({"count", "flops"} <= set(v) for v in data["by_kind"].values())
    assert data["by_kind"]["conv"]["count"] >= 3


@pytest.fixture(scope="module")
def exported_mlp(zoo_runs: tuple[dict[str, subprocess.CompletedProcess[str]], Path]) -> Path:
    """``placewise zoo export mlp --format onnx``, run once for the tests that read it."""
    proc, f = zoo_runs[0]["export"], zoo_runs[1]
    assert proc.returncode == 0, proc.stderr
    assert f.is_file() and f.stat().st_size > 0
    return f


def test_inspect_onnx_with_batch(exported_mlp: Path, tmp_path: Path) -> None:
    f = tmp_path / "mlp.onnx"
    f.write_bytes(exported_mlp.read_bytes())
    guess, batch1, proc = run_together(["inspect", str(f)],
                                       ["inspect", str(f), "--batch", "1", "--json"],
                                       ["inspect", str(f), "--shape", "input=4x64", "--json"])
    # the exported batch dimension is symbolic: inspect refuses to guess it
    assert_bad_input(guess, str(f), "symbolic", "--batch")
    assert batch1.returncode == 0, batch1.stderr
    one = json.loads(batch1.stdout)
    assert proc.returncode == 0, proc.stderr
    four = json.loads(proc.stdout)
    assert four["inputs"][0]["shape"] == [4, 64]
    # every op here is per-row, so FLOPs scale exactly with the batch
    assert four["flops"] == pytest.approx(one["flops"] * 4, rel=1e-9)


def test_hw_list_and_show_json() -> None:
    proc = run("hw", "list", "--json")
    assert proc.returncode == 0, proc.stderr
    names = [p["name"] for p in json.loads(proc.stdout)["presets"]]
    assert len(names) >= 5
    proc = run("hw", "show", names[0], "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["devices"]


def test_zoo_list_json() -> None:
    data = json.loads(run("zoo", "list", "--json").stdout)
    assert {"mlp", "resnet", "bert", "gpt", "inception"} <= {m["name"] for m in data["models"]}


# ---- bad input ---------------------------------------------------------------------------------
def test_missing_file() -> None:
    assert_bad_input(run("inspect", "nope.onnx"), "nope.onnx")


def test_truncated_onnx(exported_mlp: Path, tmp_path: Path) -> None:
    f = tmp_path / "m.onnx"
    data = exported_mlp.read_bytes()
    f.write_bytes(data[: len(data) // 3])
    assert_bad_input(run("inspect", str(f)), str(f))


def test_random_bytes_onnx(tmp_path: Path) -> None:
    f = tmp_path / "r.onnx"
    f.write_bytes(random.Random(0).randbytes(4096))
    assert_bad_input(run("inspect", str(f)), str(f))


def test_random_bytes_pt2(tmp_path: Path) -> None:
    f = tmp_path / "r.pt2"
    f.write_bytes(random.Random(1).randbytes(4096))
    assert_bad_input(run("inspect", str(f)), str(f))


def test_cyclic_taskgraph(tmp_path: Path) -> None:
    f = tmp_path / "cyc.json"
    f.write_text(json.dumps({
        "schema_version": 1, "name": "cyc",
        "tasks": [{"name": "a", "flops": 1e6}, {"name": "b", "flops": 1e6}],
        "edges": [{"src": "a", "dst": "b", "bytes": 8}, {"src": "b", "dst": "a", "bytes": 8}],
    }))
    assert_bad_input(run("inspect", str(f)), str(f), "cycle")


def test_bad_yaml_spec_wrong_type(tmp_path: Path) -> None:
    f = tmp_path / "m.yaml"
    f.write_text("""name: bad
devices:
  - name: gpu0
    kind: gpu
    peak_flops_per_s: {fp32: "fast"}
    peak_source: me
    launch_overhead_s: 1.0e-6
    launch_source: me
    memory: [{name: hbm, capacity_bytes: 100, bandwidth_bytes_per_s: 1.0e+9, source: me}]
""")
    assert_bad_input(run("hw", "show", str(f)), str(f), "peak_flops_per_s")


def test_bad_yaml_spec_negative_capacity(tmp_path: Path) -> None:
    f = tmp_path / "m.yaml"
    f.write_text("""name: bad
devices:
  - name: gpu0
    kind: gpu
    peak_flops_per_s: {fp32: 1.0e+12}
    peak_source: me
    launch_overhead_s: 1.0e-6
    launch_source: me
    memory: [{name: hbm, capacity_bytes: -5, bandwidth_bytes_per_s: 1.0e+9, source: me}]
""")
    assert_bad_input(run("hw", "show", str(f)), str(f), "capacity_bytes")


def test_yaml_syntax_error(tmp_path: Path) -> None:
    f = tmp_path / "m.yaml"
    f.write_text("name: [unclosed\n  devices: {\n")
    assert_bad_input(run("hw", "show", str(f)), str(f), "line")


def test_unknown_zoo_model() -> None:
    assert_bad_input(run("inspect", "zoo:nosuch"), "nosuch")


def test_bad_shape_flag() -> None:
    assert_bad_input(run("inspect", "zoo:mlp", "--shape", "x=1xA"), "--shape")


def test_export_failure_leaves_no_file(tmp_path: Path) -> None:
    f = tmp_path / "x.onnx"
    proc = run("zoo", "export", "nosuch", "--format", "onnx", "--out", str(f))
    assert proc.returncode == 2
    assert not f.exists()
    assert list(tmp_path.iterdir()) == []
