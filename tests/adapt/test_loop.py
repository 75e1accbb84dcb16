"""The closed loop (``adapt.loop``): windows of a drifting trace served by the static and the
adaptive arm, actions with their evidence, conserved requests, tags per phase, the loop
report; the rollback rule on a promoted set that is worse; bad input exit 2 with nothing
written."""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from placewise.adapt import loop_steps as steps
from placewise.adapt.loop import FORMAT, LoopSettings, run_loop, save_loop
from placewise.adapt.loop_figures import mix_distance, split_windows, summarize
from placewise.adapt.trace import ShapeTrace, drifting_trace, save_shape_trace
from placewise.cost.calibrated import load_calibration
from placewise.errors import InputError
from placewise.runtime.telemetry import STABLE_TAG_KEYS
from tests.runtime.helpers import local_machine
from tests.test_cli import run

MODEL = "zoo:mlp?layers=2&hidden=64"
ACTIONS = {"recalibrate", "replan", "promote", "keep", "rollback", "confirm"}


# ---- pure parts ------------------------------------------------------------------------------
def test_windows_split_the_trace_and_keep_every_request() -> None:
    tr = drifting_trace(requests=101, phases=3, seed=2)
    ws = split_windows(tr, 4)
    assert [len(w) for w in ws] == [26, 25, 25, 25]
    assert sum(len(w) for w in ws) == len(tr)
    assert all(w.arrivals_s[0] == 0.0 for w in ws)
    assert [s for w in ws for s in w.shapes] == list(tr.shapes)
    with pytest.raises(InputError, match="fewer than the 200 windows"):
        split_windows(tr, 200)


def test_mix_distance_and_envelope_of_a_trace() -> None:
    one = [{"shape": {"batch": 1}, "weight": 1.0}]
    assert mix_distance(one, one) == 0.0
    assert mix_distance(one, [{"shape": {"batch": 16}, "weight": 1.0}]) == 1.0
    tr = drifting_trace("seq", requests=40, values=(48, 200), seed=0)
    assert steps.envelope_of(tr) == {"batch": [1], "seq": [32, 64, 128, 256]}


def test_settings_are_checked_and_name_the_option() -> None:
    for bad, place in ((dict(windows=1), "--windows"), (dict(margin=1.5), "--margin"),
                       (dict(budget_s=0.0), "--budget"), (dict(k=0), "--k"),
                       (dict(promote_blocks=2), "--promote-blocks")):
        with pytest.raises(InputError) as exc:
            LoopSettings(**bad).check()
        assert exc.value.place == place


def test_summary_counts_actions_and_conservation() -> None:
    def arm(p50: float, ok: bool = True) -> dict[str, Any]:
        return {"latency_p50_s": p50, "latency_p99_s": 2 * p50, "throughput_rps": 1 / p50,
                "requests": {"offered": 10, "completed": 10, "conserved": ok}}

    ws = [{"index": 0, "arms": {"static": arm(1.0), "adaptive": arm(1.0)},
           "gain": {"latency_p50": 0.0}, "actions": [{"action": "recalibrate"}],
           "prediction_error": {"before": 0.5, "after": 0.1}},
          {"index": 1, "arms": {"static": arm(2.0), "adaptive": arm(1.0, ok=False)},
           "gain": {"latency_p50": 0.5},
           "actions": [{"action": "replan"}, {"action": "keep", "guardrail": True}]}]
    s = summarize(ws)
    assert s["gain_latency_p50"] == 0.5  # the windows after the first
    assert (s["recalibrations"], s["replans"], s["keeps"], s["guardrail_refusals"]) == (1, 1, 1, 1)
    assert s["prediction_error_before"] == 0.5 and s["prediction_error_after"] == 0.1
    assert s["requests"]["offered"] == 40 and s["requests"]["conserved"] is False


# ---- a real loop -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def loop_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """A short loop: batch 1 that turns batch 2 (the first window's plan set pads 2 to 4)."""
    work = tmp_path_factory.mktemp("loop")
    tr = drifting_trace("batch", requests=120, rate_rps=100.0, phases=3, values=(1, 2),
                        majority=1.0, seed=1)
    cfg = LoopSettings(windows=3, budget_s=150.0, k=2, plan_time_s=1.0, window_requests=8,
                       promote_requests=24, promote_blocks=6, envelope={"batch": [1, 2, 4]})
    seen: list[float] = []
    doc = run_loop(MODEL, local_machine(), tr, work_dir=work / "work", settings=cfg,
                   progress=lambda msg, frac: seen.append(frac))
    assert seen[0] == 0.0 and seen[-1] == 1.0 and seen == sorted(seen)
    path = work / "loop.json"
    save_loop(doc, path)
    return doc, path


def test_the_loop_serves_every_window_on_both_arms_and_conserves_requests(
        loop_run: tuple[dict[str, Any], Path]) -> None:
    doc, _ = loop_run
    assert doc["format"] == FORMAT and doc["version"] == 1
    assert [w["index"] for w in doc["windows"]] == [0, 1, 2]
    for w in doc["windows"]:
        assert set(w["arms"]) >= {"static", "adaptive"}
        for rec in w["arms"].values():
            r = rec["requests"]
            assert r["offered"] == w["requests"] == 40
            assert r["conserved"]
            assert r["offered"] == (r["completed"] + r["rejected"] + r["timed_out"]
                                    + r["in_flight"] + r["not_arrived"])
            assert sum(b["requests"] for b in rec["buckets"]) == r["arrived"]
            assert 0.0 <= rec["padding_waste"] < 1.0
        assert w["first"] == ("static" if w["index"] % 2 == 0 else "adaptive")
        assert w["slices"] == 4 and all(rec["blocks"] == 4 for rec in w["arms"].values())
        assert w["comparable"], w["tag_differences"]
        assert set(w["gain"]) == {"latency_p50", "latency_p99",
                                                      "throughput"}
    # the first window is all batch 1; the static arm never changes its plan set
    assert doc["windows"][0]["mix"] == [{"shape": {"batch": 1}, "weight": 1.0}]
    assert len({w["arms"]["static"]["plan_set"] for w in doc["windows"]}) == 1
    s = doc["summary"]
    assert s["requests"]["conserved"] and s["requests"]["offered"] == 2 * 120  # both arms
    assert s["windows_served"] == 3 and not s["budget_exhausted"]


def test_actions_carry_their_evidence(loop_run: tuple[dict[str, Any], Path]) -> None:
    doc, _ = loop_run
    work = Path(doc["work_dir"])
    first = [a["action"] for a in doc["windows"][0]["actions"]]
    # the empty calibration (roofline) is far from this machine: window 0 recalibrates
    # (k=2 consecutive telemetry windows outside) and the changed model asks for a candidate
    assert first[:2] == ["recalibrate", "replan"] and first[2] in ("keep", "promote")
    for w in doc["windows"]:
        for a in w["actions"]:
            assert a["action"] in ACTIONS and a["reason"] and isinstance(a["evidence"], dict)
    rec = doc["windows"][0]["actions"][0]["evidence"]
    cal = load_calibration(work / rec["file"])
    assert cal.revision == 1 and cal.parent == load_calibration(
        work / "calibration-r0.json").fingerprint() == rec["parent"]
    assert rec["changed"] and all(c["changed"] for c in rec["changed"])
    replan = doc["windows"][0]["actions"][1]["evidence"]
    assert {"incumbent_expected_s", "candidate_expected_s", "predicted_gain"} <= set(replan)
    assert (work / replan["candidate_file"]).is_file()
    decided = doc["windows"][0]["actions"][2]
    if decided.get("guardrail"):
        assert {"improvement", "ci_low", "ci_high", "pairs"} <= set(decided["evidence"])
        assert (work / decided["evidence"]["record"]).is_file()
    if decided["action"] == "promote":  # then the next window judges it
        assert doc["windows"][1]["actions"][0]["action"] in ("confirm", "rollback")


def test_prediction_error_by_term_before_and_after(loop_run: tuple[dict[str, Any], Path]
                                                   ) -> None:
    doc, _ = loop_run
    w0 = doc["windows"][0]
    kinds = {p["kind"] for p in w0["prediction"]}
    assert "compute" in kinds and kinds <= {"compute", "launch", "transfer", "contention"}
    for p in w0["prediction"]:
        assert p["measured_s"] > 0 and p["predicted_before_s"] >= 0
    # recalibrated on these very windows: the error after is lower
    assert w0["prediction_error"]["after"] < w0["prediction_error"]["before"]


def test_every_phase_records_its_stable_tags(loop_run: tuple[dict[str, Any], Path]) -> None:
    doc, _ = loop_run
    phases = doc["phases"]
    assert [p["index"] for p in phases] == list(range(len(phases)))
    served = [p for p in phases if p["name"].startswith("serve window")]
    assert len(served) >= 6
    for p in served:
        assert set(STABLE_TAG_KEYS) <= set(p["tags"])
        assert p["tags"]["plan_fingerprint"] == p["plan_set"]
        assert p["tags"]["arrival"].startswith("trace:")
    for w in doc["windows"]:
        for name, rec in w["arms"].items():
            assert phases[rec["phase"]]["arm"] == name
            assert phases[rec["phase"]]["window"] == w["index"]
    # served phases differ only in what makes them two plan sets, and in the window
    for p in served[1:]:
        assert set(p["differs_from_previous"]) <= {*steps.ALLOWED_TO_DIFFER, "arrival"}
    assert len({p["tags"]["cores"] for p in served}) == 1
    assert phases[0]["kind"] == "plan" and phases[0]["tags"]["plan_fingerprint"] == \
        doc["windows"][0]["arms"]["static"]["plan_set"]


def test_the_loop_report_renders(loop_run: tuple[dict[str, Any], Path], tmp_path: Path
                                 ) -> None:
    from placewise.report import load_inputs, report_sections

    _, path = loop_run
    rep = report_sections(load_inputs([path]))
    assert [s.key for s in rep.sections] == ["loop", "loop-prediction", "loop-drift",
                                             "loop-actions", "loop-tags"]
    # latency, throughput, prediction error over time and per bucket, mix, padding
    assert rep.figures() == 6
    html = rep.html()
    assert "Runtime adaptation gain" in html and "recalibrate" in html


# ---- the rollback rule ---------------------------------------------------------------------------
def test_a_promoted_set_worse_than_the_last_known_good_is_rolled_back(tmp_path: Path) -> None:
    """Static: its own bucket for batch 1. The "promoted" set: one bucket padding batch 1 up
    to 16 on a model where 16 rows cost far more than one; served on batch-1 traffic, the
    rule rolls back to the last-known-good and the store's current entry follows."""
    from placewise.adapt.planset import build_plan_set, save_plan_set
    from placewise.adapt.planset.mix import Mix
    from placewise.adapt.store import LastKnownGood
    from placewise.cost.calibrated import Calibration

    machine = local_machine()
    model = "zoo:bert?layers=1&hidden=64&heads=2&seq=32&vocab=100"  # 16 rows: ~4x one
    env = {"batch": [1, 16]}
    good = build_plan_set(model, machine, env, Mix((({"batch": 1}, 1.0),)), time_limit_s=2.0)
    bad = build_plan_set(model, machine, env, Mix((({"batch": 16}, 1.0),)), time_limit_s=2.0)
    assert [b.name for b in good.buckets] != [b.name for b in bad.buckets]
    files = {n: tmp_path / f"{n}.json" for n in ("good", "bad")}
    save_plan_set(good, files["good"])
    save_plan_set(bad, files["bad"])
    store = LastKnownGood(tmp_path / "lkg")
    store.keep(files["good"])
    store.keep(files["bad"])
    n = 60
    tr = ShapeTrace(tuple(i * 0.02 for i in range(n)), tuple({"batch": 1} for _ in range(n)),
                    (0,) * n, (0,) * n)
    cfg = LoopSettings(window_requests=10)
    with ExitStack() as stack:
        ph = steps.Arm("static", Path(), None, None, None)
        st = steps.LoopState(model, machine, env, Calibration.empty("local"), Path(), store,
                             stack, ph, ph)
        st.static = steps._open(st, "static", files["good"], good, good.mix)
        st.adaptive = steps._open(st, "adaptive", files["bad"], bad, bad.mix)
        st.probation = steps.Arm(steps.LKG, files["good"], good, None, good.mix)
        rec, blocks = steps.serve_window(0, tr, st, cfg, 60.0)
        act = steps._probation(0, st, blocks)
    assert act["action"] == "rollback", act["reason"]
    assert act["evidence"]["served_as"] == "static" and act["evidence"]["paired_requests"] >= 6
    assert st.adaptive.file == files["good"] and st.probation is None
    cur = store.current()
    assert cur is not None and cur.path.read_bytes() == files["good"].read_bytes()
    assert rec["gain"]["latency_p50"] is not None and rec["gain"]["latency_p50"] < 0


# ---- the command line ----------------------------------------------------------------------------
def test_bad_input_exits_2_with_one_line_and_no_file(tmp_path: Path) -> None:
    tr = tmp_path / "t.jsonl"
    save_shape_trace(drifting_trace(requests=20, seed=0), tr)
    bad_trace = tmp_path / "bad.jsonl"
    bad_trace.write_text('{"t_s": 0.0, "batch": 1}\n{"t_s": -1, "batch": 1}\n')
    out = tmp_path / "loop.json"
    used = tmp_path / "used"
    used.mkdir()
    (used / "index.json").write_text("{}")
    cases = [(["--trace", str(tr), "--work", str(used)], "--work"),(["--trace", str(tmp_path / "missing.jsonl")], "missing.jsonl"),
             (["--trace", str(bad_trace)], "line 2"),
             (["--trace", str(tr), "--windows", "1"], "--windows"),
             (["--trace", str(tr), "--windows", "50"], "--windows"),
             (["--trace", str(tr), "--hw", "h100-sxm-server"], "--hw"),
             (["--trace", str(tr), "--budget", "soon"], "--budget"),
             (["--trace", str(tr), "--envelope", "batch=0"], "--envelope")]
    for args, where in cases:
        r = run("loop", MODEL, *args, "--out", str(out))
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and where in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
        assert not out.exists() and not Path(str(out) + ".d").exists()


def test_the_report_refuses_a_loop_file_it_cannot_read(tmp_path: Path) -> None:
    from placewise.report import load_inputs

    for doc, place in (({"format": FORMAT, "version": 2, "windows": []}, "version"),
                       ({"format": FORMAT, "version": 1, "windows": {}}, "windows")):
        p = tmp_path / "loop.json"
        p.write_text(json.dumps(doc))
        with pytest.raises(InputError) as exc:
            load_inputs([p])
        assert exc.value.place == place and exc.value.file == str(p)
