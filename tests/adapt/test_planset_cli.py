"""``plan --envelope``, and ``explain``, ``check`` and ``export`` of a plan set, from the
command line; bad input exits 2 with one line and writes nothing."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from placewise.adapt.planset import load_plan_set
from tests.test_cli import assert_bad_input, run, run_together

MLP = "zoo:mlp?layers=2&hidden=64"


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    folder = tmp_path_factory.mktemp("planset")
    mix = folder / "mix.json"
    mix.write_text(json.dumps([{"batch": 1, "weight": 95}, {"batch": 16, "weight": 5}]))
    out = folder / "ps.json"
    proc = run("plan", MLP, "--hw", "local", "--envelope", "batch=1,2,4,8,16", "--mix",
               str(mix), "--time-limit", "0.5", "--out", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    return out, json.loads(proc.stdout)


def test_plan_envelope_json(made: tuple[Path, dict[str, Any]]) -> None:
    out, summary = made
    assert summary["format"] == "placewise-planset" and summary["out"] == str(out)
    assert summary["envelope"] == {"batch": [1, 2, 4, 8, 16]}
    assert [b["upper"]["batch"] for b in summary["buckets"]][-1] == 16
    ch = summary["choice"]
    assert ch["chosen"]["total_cost_s"] <= ch["one_bucket"]["total_cost_s"]
    assert summary["timing"]["grid_points"] == 5 and summary["timing"]["planning_s"] > 0
    assert summary["fingerprint"] == load_plan_set(out).fingerprint()


def _chain(folder: Path, x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Plain onnxruntime chaining the partitions of an export folder."""
    import onnxruntime as ort

    man = json.loads((folder / "manifest.json").read_text())
    env = dict(x)
    for p in man["partitions"]:
        s = ort.InferenceSession(str(folder / p["file"]), providers=["CPUExecutionProvider"])
        got = s.run([o["name"] for o in p["outputs"]], {i["name"]: env[i["name"]]
                                                          for i in p["inputs"]})
        env.update({o["name"]: v for o, v in zip(p["outputs"], got, strict=True)})
    return {o["name"]: env[o["name"]] for o in man["graph_outputs"]}


def test_explain_check_export_a_plan_set(made: tuple[Path, dict[str, Any]],
                                         tmp_path: Path) -> None:
    out, _ = made
    exp = tmp_path / "exp"
    first = load_plan_set(out).buckets[0].name
    explain_j, explain_t, check_j, export_j, zoom = run_together(
        ["explain", str(out), "--json"], ["explain", str(out)],
        ["check", str(out), "--model", MLP, "--hw", "local", "--json"],
        ["export", str(out), "--out", str(exp), "--json"],
        ["explain", str(out), "--bucket", first, "--json"])
    for p in (explain_j, explain_t, check_j, export_j, zoom):
        assert p.returncode == 0, p.stderr
    data = json.loads(explain_j.stdout)
    ps = load_plan_set(out)
    assert [b["name"] for b in data["buckets"]] == [b.name for b in ps.buckets]
    assert data["choice"]["why"] == ps.choice["why"] and data["padding"]
    assert data["residency"]["weights_bytes"] > 0
    assert "buckets:" in explain_t.stdout and "residency" in explain_t.stdout
    assert "choice" in explain_t.stdout
    assert json.loads(zoom.stdout)["summary"]["batch"] == ps.buckets[0].upper["batch"]
    chk = json.loads(check_j.stdout)
    assert chk["ok"] and chk["buckets"] == [b.name for b in ps.buckets]
    assert "residency" in chk["checks"]
    summary = json.loads(export_j.stdout)
    assert summary["bytes_written"] < summary["bytes_without_sharing"] or len(ps.buckets) == 1
    assert summary["verified_sessions"] == sum(r["partitions"] for r in summary["buckets"])
    shared = exp / summary["shared_file"]
    assert shared.stat().st_size == summary["shared_bytes"] > 0
    if summary["linked"]:
        assert shared.stat().st_nlink == 1 + len(ps.buckets)
    # each bucket's partitions load in plain onnxruntime from the shared file and compute
    # what a plain export of the same bucket plan computes
    from placewise.export import export_plan

    rng = np.random.default_rng(0)
    for b, row in zip(ps.buckets, summary["buckets"], strict=True):
        man = json.loads((exp / row["folder"] / "manifest.json").read_text())
        assert all(p["external_data"] == summary["shared_file"] for p in man["partitions"])
        plain = tmp_path / f"plain-{b.name}"
        export_plan(ps.plan_of(b), plain)
        x = {t["name"]: rng.standard_normal(t["shape"]).astype(t["dtype"])
             for t in man["graph_inputs"]}
        a, want = _chain(exp / row["folder"], x), _chain(plain, x)
        for k in want:
            np.testing.assert_array_equal(a[k], want[k])


def test_bad_input_exits_2(made: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    out, _ = made
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    edited = tmp_path / "edited.json"
    doc = json.loads(out.read_text())
    doc["buckets"][0]["probability"] = 0.5
    edited.write_text(json.dumps(doc))
    o = tmp_path / "o.json"
    base = ["plan", MLP, "--hw", "local", "--out", str(o), "--time-limit", "0.5"]
    procs = run_together(
        [*base, "--envelope", "batch=1,,2"],
        [*base, "--envelope", "batch=1,2", "--mix", str(empty)],
        [*base, "--mix", str(empty)],
        [*base, "--envelope", "seq=8,16"],
        ["explain", str(edited)],
        ["check", str(edited)],
        ["export", str(edited), "--out", str(tmp_path / "x")],
        [*base, "--envelope", "batch=1,2", "--bucket-cost", "horizon_requests=0"],
        [*base, "--envelope", "batch=1,2", "--bucket-cost", "speed=3"],
        ["explain", str(out), "--bucket", "nope"],
        ["check", str(out), "--hw", "jetson-agx-orin"],
        ["plan", MLP, "--hw", "local", "--time-limit", "0.5", "--envelope", "batch=1,16",
         "--bucket-cost", "compile_s_per_bucket=1000", "--out", str(tmp_path / "one.json"),
         "--json"])
    checks: list[tuple[subprocess.CompletedProcess[str], tuple[str, ...]]] = [
        (procs[0], ("--envelope batch=1,,2", "positive integer")),
        (procs[1], (str(empty), "empty")),
        (procs[2], ("--mix", "--envelope")),
        (procs[3], ("--envelope seq", "no 'seq' option")),
        (procs[4], (str(edited), "fingerprints.planset")),
        (procs[5], (str(edited), "fingerprints.planset")),
        (procs[6], (str(edited), "fingerprints.planset")),
        (procs[7], ("--bucket-cost", "horizon_requests must be >= 1")),
        (procs[8], ("--bucket-cost speed=3", "expected horizon_requests=N")),
        (procs[9], (str(out), "--bucket", "no bucket 'nope'")),
        (procs[10], (str(out), "fingerprints.machine", "another machine")),
    ]
    for proc, needles in checks:
        assert_bad_input(proc, *needles)
    assert not o.exists() and not (tmp_path / "x").exists()
    # a bucket that costs more to compile than its padding saves is not made
    one = procs[11]
    assert one.returncode == 0, one.stderr
    got = json.loads(one.stdout)
    assert got["choice"]["buckets"] == 1 and got["choice"]["costs"]["compile_s_per_bucket"] == 1000
