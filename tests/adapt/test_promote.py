"""``placewise promote`` for real on a tiny zoo model: the decision record, the store it
updates, and the quality check that keeps a candidate whatever its speed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from placewise.adapt.promote import promote
from placewise.adapt.store import LastKnownGood
from tests.adapt.promote_fixtures import edit_plan, placed_plan
from tests.test_cli import run


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("plans")
    return {"single": placed_plan(d / "single.json", ("cpu0",)),
            "pingpong": placed_plan(d / "pingpong.json", ("cpu0", "cpu1"))}


def test_cli_worse_candidate_is_kept(plans: dict[str, Path], tmp_path: Path) -> None:
    """Every layer crossing between two worker processes: refused, and the record says
    why, with its statistics, both arms' tags and the traffic; the store keeps the
    incumbent as its first last-known-good and logs the decision."""
    store = tmp_path / "store"
    p = run("promote", "--incumbent", str(plans["single"]), "--candidate",
            str(plans["pingpong"]), "--requests", "60", "--blocks", "6", "--warmup", "3",
            "--store", str(store), "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["format"] == "placewise-decision" and doc["decision"] == "keep"
    assert doc["reason"].startswith("keep the incumbent")
    s = doc["stats"]
    assert s["pairs"] == 6 and s["block_requests"] == [10] * 6
    assert s["a_samples"] == s["b_samples"] == 60
    assert s["ci_low"] <= s["improvement"] <= s["ci_high"]
    assert "sign-test" in s["method"] and "60 (A) and 60 (B)" in s["p99_note"]
    assert [c["name"] for c in doc["checks"]] == ["improvement", "p99", "quality"]
    assert doc["quality"]["holds"] and doc["quality"]["requests"] == 2
    assert doc["traffic"]["source"] == "generated" and doc["traffic"]["interval_s"] > 0
    for role in ("incumbent", "candidate"):
        tags = doc["tags"][role]
        assert tags["model_fingerprint"] and tags["onnxruntime"] and tags["arrival"]
        assert doc[role]["completed"] == 60
    assert "plan_fingerprint" not in doc["tags"]["differences"]
    assert doc["incumbent"]["identity"]["graph_fingerprints"] == \
        doc["candidate"]["identity"]["graph_fingerprints"]
    assert doc["store"]["actions"] == ["kept the incumbent as the first last-known-good"]
    lkg = LastKnownGood(store)
    cur = lkg.current()
    assert cur is not None and cur.path.read_bytes() == plans["single"].read_bytes()
    assert [d["decision"] for d in lkg.decisions()] == ["keep"]


def test_failing_quality_keeps(plans: dict[str, Path], tmp_path: Path) -> None:
    """A candidate whose own precision record puts it beyond its budget is kept out, and
    the measured quality is in the record."""
    bad = edit_plan(plans["single"], tmp_path / "bad.json", estimated_error=0.5)
    pinned = os.sched_getaffinity(0)
    rec = promote(plans["pingpong"], bad, requests=48, blocks=12, warmup=2,
                  store=tmp_path / "s")
    assert os.sched_getaffinity(0) == pinned  # the caller's thread is given back
    assert rec.decision == "keep"
    quality = next(c for c in rec.guardrail.checks if c.name == "quality")
    assert not quality.passed and not rec.quality.holds
    assert "beyond its limit" in rec.quality.text
    assert rec.quality.measured["rel_l2"] < 0.01  # it computes the right thing...
    assert rec.traffic["rounds"] == 2 and len(rec.guardrail.stats.rounds) == 2
    assert [c.name for c in rec.guardrail.checks] == ["improvement", "replication", "p99",
                                                      "quality"]
    cur = LastKnownGood(tmp_path / "s").current()
    assert cur is not None and cur.path.read_bytes() == plans["pingpong"].read_bytes()


def test_plan_sets_with_a_trace(plans: dict[str, Path], tmp_path: Path) -> None:
    """Two plan sets on a replayed shape trace (every bucket's executor resident); a plan
    set without a trace, or against a plan of another model, is refused (exit 2)."""
    from placewise.adapt.trace import ShapeTrace, save_shape_trace

    ps = tmp_path / "ps.json"
    p = run("plan", "zoo:mlp?layers=2&hidden=64", "--hw", "local", "--envelope",
            "batch=1,2,4", "--out", str(ps))
    assert p.returncode == 0, p.stderr
    copy = tmp_path / "ps2.json"
    copy.write_bytes(ps.read_bytes())
    n = 36
    trace = tmp_path / "t.jsonl"
    save_shape_trace(ShapeTrace(tuple(i * 5e-4 for i in range(n)),
                                tuple({"batch": 1 + i % 4} for i in range(n)), (0,) * n,
                                (0,) * n), trace)
    rec = promote(ps, copy, trace=trace, blocks=6, warmup=2)
    assert rec.decision in ("keep", "promote")
    assert rec.incumbent.header.kind == rec.candidate.header.kind == "planset"
    assert rec.traffic["source"] == "trace" and rec.traffic["requests"] == n
    assert rec.traffic["shapes"] == {"batch=1": 9, "batch=2": 9, "batch=3": 9, "batch=4": 9}
    assert rec.guardrail.stats.a_samples == rec.guardrail.stats.b_samples == n
    p = run("promote", "--incumbent", str(ps), "--candidate", str(copy))
    assert p.returncode == 2 and "--trace" in p.stderr
    other = placed_plan(tmp_path / "o.json", ("cpu0",), model="zoo:mlp?layers=3&hidden=64")
    p = run("promote", "--incumbent", str(ps), "--candidate", str(other), "--trace",
            str(trace))
    assert p.returncode == 2 and "fingerprints.model" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
