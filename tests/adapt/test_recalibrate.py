"""Recalibration (``adapt.recalibrate``, ``runtime.windows``, ``cost.calibrated``
adjustments): a key changes only after k consecutive windows outside its interval, only
the keys outside change (never a global factor: an untouched key predicts exactly as
before), each new calibration is a new revision whose parent is the old one, a replan with
it predicts differently, bad telemetry files exit 2; and one real chain on this machine:
validate --telemetry-out -> recalibrate --init -> recalibrate -> plan --calibration."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from placewise.adapt.recalibrate import empty_calibration, recalibrate
from placewise.cost.calibrated import CalibratedModel, Calibration, region_key
from placewise.cost.model import Term
from placewise.errors import InputError, SpecError
from placewise.graph.fuse import fuse
from placewise.runtime.windows import (
    TelemetryRun,
    TermWindow,
    Window,
    load_telemetry_run,
    save_telemetry_run,
)
from placewise.schedule import evaluate
from placewise.schedule.placement import Assignment, Placement, Problem
from placewise.units import DType
from placewise.validate.compare import machine_tags
from tests.runtime.helpers import local_machine, tiny_source
from tests.test_cli import run

PRED = 1e-5


def _problem(cal: Calibration, fused: bool = False) -> Problem:
    src = tiny_source()
    assert src.graph is not None
    m = local_machine()
    return Problem(src.graph, fuse(src.graph) if fused else None, m, CalibratedModel(m, cal))


def _cal0() -> Calibration:
    return empty_calibration(local_machine(), machine_tags())


def _keys() -> list[tuple[str, str]]:
    """(vertex, region key) of the tiny MLP's vertices (one op each)."""
    p = _problem(_cal0())
    return [(v.name, region_key(p.graph, list(v.ops), DType.FP32)) for v in p.vertices]


def _term(kind: str, key: str, measured: float, *, regions: tuple[str, ...] = (),
          device: str = "cpu0") -> TermWindow:
    return TermWindow(kind, key, device, "", PRED, 0.8 * PRED, 1.2 * PRED, measured,
                      0.05 * measured, 20, regions)


def _run(cal: Calibration, series: dict[str, list[float]], regions: dict[str, str]
         ) -> TelemetryRun:
    """One window per position of the series: key -> measured seconds per window."""
    n = len(next(iter(series.values())))
    windows = []
    for i in range(n):
        terms = tuple(
            _term("compute", f"compute:cpu0:{name}", xs[i], regions=(regions[name],))
            if name in regions else _term("launch", "launch:cpu0", xs[i])
            for name, xs in series.items())
        windows.append(Window(i, 20, terms))
    return TelemetryRun(dict(machine_tags()), "sha256:plan", cal.fingerprint(), tuple(windows))


def _cost(cal: Calibration, vertex: str) -> tuple[tuple[tuple[Term, float], ...], float, float]:
    p = _problem(cal)
    v = p.vertex(vertex)
    c = p.cost_model.op_cost(p.graph, v.ops[0], "cpu0", DType.FP32)
    return c.terms, c.low_s, c.high_s


def test_k_minus_one_windows_outside_then_one_inside_changes_nothing() -> None:
    cal = _cal0()
    (a, ka), _ = _keys()[:2]
    slow = 3 * PRED
    rec = recalibrate(cal, [_run(cal, {a: [slow, slow, PRED]}, {a: ka})], k=3)
    (ch,) = rec.changes
    assert not ch.changed and "inside" in ch.reason
    assert rec.calibration.adjustments == []
    rec = recalibrate(cal, [_run(cal, {a: [PRED, slow, slow]}, {a: ka})], k=3)
    assert not rec.changes[0].changed and "fewer than k=3" in rec.changes[0].reason
    rec = recalibrate(cal, [_run(cal, {a: [PRED, slow, slow, slow]}, {a: ka})], k=3)
    assert rec.changes[0].changed and rec.changes[0].factor_after == pytest.approx(3.0)
    # windows of two runs count in a row, in the order given
    two = [_run(cal, {a: [PRED, slow]}, {a: ka}), _run(cal, {a: [slow, slow]}, {a: ka})]
    assert recalibrate(cal, two, k=3).changes[0].changed
    # outside on both sides is no streak
    rec = recalibrate(cal, [_run(cal, {a: [0.1 * PRED, slow, slow]}, {a: ka})], k=3)
    assert not rec.changes[0].changed


def test_only_the_keys_outside_change_never_a_global_factor() -> None:
    cal = _cal0()
    (a, ka), (b, kb) = _keys()[:2]
    run_ = _run(cal, {a: [4 * PRED] * 3, b: [PRED] * 3, "launch": [PRED] * 3},
                {a: ka, b: kb})
    rec = recalibrate(cal, [run_], k=3)
    assert [c.key for c in rec.changed()] == [f"compute:cpu0:{a}"]
    new = rec.calibration
    (adj,) = new.adjustments
    assert adj.kind == "compute" and adj.regions == [ka] and adj.factor == pytest.approx(4.0)
    # the adjusted region: non-launch terms x4, launch as before, interval widened
    before, after = _cost(cal, a), _cost(new, a)
    tb, ta = dict(before[0]), dict(after[0])
    assert ta[Term.LAUNCH] == tb[Term.LAUNCH]
    for t in (Term.COMPUTE, Term.MEMORY):
        if t in tb:
            assert ta[t] == pytest.approx(4 * tb[t])
    assert after[1] <= sum(ta.values()) <= after[2]
    # an untouched key predicts exactly what it did
    assert _cost(new, b) == _cost(cal, b)
    for name, _ in _keys()[2:]:
        assert _cost(new, name) == _cost(cal, name)
    # and the fused problem (region_cost) too: only regions holding the key differ
    pf0, pf1 = _problem(cal, fused=True), _problem(new, fused=True)
    for v0 in pf0.vertices:
        c0 = pf0.cost_model.region_cost(pf0.graph, list(v0.ops), "cpu0", DType.FP32)
        c1 = pf1.cost_model.region_cost(pf1.graph, list(v0.ops), "cpu0", DType.FP32)
        hit = region_key(pf0.graph, list(v0.ops), DType.FP32) == ka
        assert (c0.total_s != c1.total_s) == hit


def _placement(p: Problem) -> Placement:
    return Placement.of({v: Assignment("cpu0", DType.FP32) for v in p.vertex_names})


def test_parent_revision_chain_and_the_replan_predicts_differently(tmp_path: Path) -> None:
    cal0 = _cal0()
    (a, ka), _ = _keys()[:2]
    r1 = recalibrate(cal0, [_run(cal0, {a: [2 * PRED] * 3}, {a: ka})], k=3)
    cal1 = r1.calibration
    assert (cal1.revision, cal1.parent) == (1, cal0.fingerprint())
    r2 = recalibrate(cal1, [_run(cal1, {a: [3 * PRED] * 3}, {a: ka})], k=3)
    cal2 = r2.calibration
    assert (cal2.revision, cal2.parent) == (2, cal1.fingerprint())
    assert cal2.adjustments[0].factor == pytest.approx(6.0)  # 2 x 3: per key, cumulative
    assert cal2.adjustments[0].revision == 2
    # the old objects are untouched; files round-trip; an older file stays as it was
    assert cal0.adjustments == [] and cal1.adjustments[0].factor == pytest.approx(2.0)
    path = cal2.save(tmp_path / "cal2.json")
    assert Calibration.from_json(json.loads(path.read_text()), file="x") == cal2
    assert not {"parent", "revision", "adjustments"} & set(cal0.to_json())
    with pytest.raises(SpecError, match="names no parent"):
        Calibration.from_json({**cal0.to_json(), "revision": 3}, file="x")
    # the replan (the evaluator, which search ranks by) predicts differently with CAL2
    p0, p2 = _problem(cal0), _problem(cal2)
    s0, s2 = evaluate(p0, _placement(p0)), evaluate(p2, _placement(p2))
    assert s2.latency_s > s0.latency_s
    t0 = {t.name: t for t in s0.schedule.tasks}
    for t in s2.schedule.tasks:
        if t.vertex == a:
            assert t.duration_s > t0[t.name].duration_s
        elif t.kind.value == "compute":
            assert t.duration_s == pytest.approx(t0[t.name].duration_s)


def test_mismatched_tags_and_another_calibrations_telemetry_are_refused() -> None:
    cal = _cal0()
    (a, ka), _ = _keys()[:2]
    good = _run(cal, {a: [3 * PRED] * 3}, {a: ka})
    other_torch = TelemetryRun({**good.tags, "torch": "0.0-other"}, good.plan_fingerprint,
                               good.calibration_fingerprint, good.windows)
    with pytest.raises(InputError, match=r"torch: '.*' vs '0.0-other'"):
        recalibrate(cal, [other_torch])
    got = recalibrate(cal, [other_torch], allow_mismatch=True)
    assert any("torch" in m for m in got.mismatches) and got.changed()
    bare = _without_cpu(cal)
    mine = TelemetryRun(good.tags, good.plan_fingerprint, bare.fingerprint(), good.windows)
    other_cpu = TelemetryRun({**good.tags, "cpu_model": "another"}, good.plan_fingerprint,
                             bare.fingerprint(), good.windows)
    with pytest.raises(InputError, match=r"telemetry 2 against telemetry 1.*cpu_model"):
        recalibrate(bare, [mine, other_cpu])
    other_plan = TelemetryRun({**good.tags, "threads": "cpu0=1,cpu1=1"}, "sha256:other",
                              good.calibration_fingerprint, good.windows)
    assert recalibrate(cal, [good, other_plan]).runs == 2  # buckets of other plans combine
    foreign = TelemetryRun(good.tags, good.plan_fingerprint, "calibration:sha256:else",
                           good.windows)
    with pytest.raises(InputError, match="another calibration"):
        recalibrate(cal, [foreign])
    roofline = TelemetryRun(good.tags, good.plan_fingerprint, "roofline/v1", good.windows)
    assert recalibrate(cal, [roofline]).changed()  # an empty calibration is the roofline


def _without_cpu(cal: Calibration) -> Calibration:
    """``cal`` recording no ``cpu_model`` (so that only the runs disagree about it)."""
    return cal.model_copy(update={"tags": {k: v for k, v in cal.tags.items()
                                           if k != "cpu_model"}})


def _cli(*args: str) -> tuple[int, str, str]:
    import contextlib
    import io

    from placewise.cli import main

    o, e = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
        try:
            main(list(args))
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, o.getvalue(), e.getvalue()


def _bad_files(tmp: Path, good: dict[str, Any]) -> dict[str, str]:
    term = good["windows"][0]["terms"][0]
    cases: dict[str, Any] = {
        "notjson": "{not json",
        "format": {**good, "format": "something-else"},
        "negative": {**good, "windows": [{**good["windows"][0], "terms": [
            {**term, "measured_s": -1.0}]}]},
        "interval": {**good, "windows": [{**good["windows"][0], "terms": [
            {**term, "lo_s": 1.0, "hi_s": 0.5}]}]},
        "regions": {**good, "windows": [{**good["windows"][0], "terms": [
            {**term, "regions": []}]}]},
        "kind": {**good, "windows": [{**good["windows"][0], "terms": [
            {**term, "kind": "global"}]}]},
    }
    out = {}
    for name, doc in cases.items():
        p = tmp / f"{name}.json"
        p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
        out[name] = str(p)
    return out


def test_cli_bad_telemetry_and_in_place_writes_exit_2(tmp_path: Path) -> None:
    cal = _cal0()
    cal_file = cal.save(tmp_path / "cal0.json")
    (a, ka), _ = _keys()[:2]
    run_file = tmp_path / "run.json"
    save_telemetry_run(_run(cal, {a: [3 * PRED] * 3}, {a: ka}), run_file)
    assert load_telemetry_run(run_file).keys() == [f"compute:cpu0:{a}"]
    good = json.loads(run_file.read_text())
    outs = tmp_path / "cal1.json"
    for name, path in _bad_files(tmp_path, good).items():
        code, out, err = _cli("recalibrate", "--calibration", str(cal_file), "--telemetry",
                              path, "--out", str(outs))
        assert code == 2, (name, err)
        assert path in err and len(err.strip().splitlines()) == 1 and not out
        assert not outs.exists()
    code, _, err = _cli("recalibrate", "--calibration", str(cal_file), "--telemetry",
                        str(run_file), "--out", str(cal_file))
    assert code == 2 and "never edited" in err
    before = cal_file.read_bytes()
    code, _, err = _cli("recalibrate", "--init", "--hw", "local", "--out", str(cal_file))
    assert code == 2 and "never edited or replaced" in err and cal_file.read_bytes() == before
    code, out, err = _cli("recalibrate", "--calibration", str(cal_file), "--telemetry",
                          str(run_file), "--k", "3", "--out", str(outs), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["revision"] == 1 and doc["parent"] == cal.fingerprint()
    assert [k["key"] for k in doc["keys"] if k["changed"]] == [f"compute:cpu0:{a}"]


# ---- one real chain on this machine ------------------------------------------------------


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("chain")
    model = "zoo:mlp?layers=2&hidden=64"
    files = {k: str(d / f"{k}.json") for k in ("plan", "run", "cal0", "cal1", "plan1")}
    steps = [
        ("plan", model, "--hw", "local", "--strategy", "single:cpu0", "--out", files["plan"]),
        ("validate", files["plan"], "--requests", "5", "--no-baseline", "--telemetry-out",
         files["run"], "--window-requests", "40", "--json"),
        ("recalibrate", "--init", "--hw", "local", "--out", files["cal0"]),
        ("recalibrate", "--calibration", files["cal0"], "--telemetry", files["run"], "--k",
         "2", "--out", files["cal1"], "--json"),
        ("plan", model, "--hw", "local", "--strategy", "single:cpu0", "--calibration",
         files["cal1"], "--out", files["plan1"]),
    ]
    got = []
    for s in steps:
        r = run(*s)
        assert r.returncode == 0, (s, r.stderr)
        got.append(r)
    return {"files": files, "validate": json.loads(got[1].stdout),
            "recalibrate": json.loads(got[3].stdout)}


def test_real_validate_telemetry_out_recalibrate_replan(chain: dict[str, Any]) -> None:
    from placewise.plan import load_plan
    from placewise.runtime.telemetry import STABLE_TAG_KEYS

    files = chain["files"]
    v = chain["validate"]
    assert tuple(v["stable_tags"]) == tuple(sorted(STABLE_TAG_KEYS)) or \
        set(v["stable_tags"]) == set(STABLE_TAG_KEYS)
    run_ = load_telemetry_run(files["run"])
    assert run_.tags == v["stable_tags"] and len(run_.windows) >= 2
    kinds = {t.kind for w in run_.windows for t in w.terms}
    assert {"compute", "launch"} <= kinds
    for w in run_.windows:
        for t in w.terms:
            assert t.samples >= 1 and t.lo_s <= t.predicted_s <= t.hi_s
    rec = chain["recalibrate"]
    cal1 = Calibration.from_json(json.loads(Path(files["cal1"]).read_text()), file="cal1")
    assert cal1.revision == 1 and cal1.parent == rec["parent"]
    changed = {k["key"] for k in rec["keys"] if k["changed"]}
    assert {a.key for a in cal1.adjustments} == changed
    # each key changed exactly when its latest 2 windows fell outside on one side
    for k in rec["keys"]:
        last = [t for w in run_.windows for t in w.terms if t.key == k["key"]][-2:]
        sides = {t.side for t in last}
        assert k["changed"] == (len(last) == 2 and len(sides) == 1 and 0 not in sides)
    assert changed, "the roofline's tiny-MLP times are far from measured ones"
    p0, p1 = load_plan(files["plan"]), load_plan(files["plan1"])
    assert p1.fingerprints.calibration == cal1.fingerprint()
    assert p1.predicted_latency_s != p0.predicted_latency_s


def test_a_request_hand_off_the_roofline_lacks_is_added_on_its_host() -> None:
    cal = _cal0()
    tw = TermWindow("launch", "request:cpu0", "cpu0", "", 0.0, 0.0, 0.0, 1.2e-5, 1e-6, 6)
    run_ = TelemetryRun(dict(machine_tags()), "p", cal.fingerprint(),
                        tuple(Window(i, 6, (tw,)) for i in range(3)))
    rec = recalibrate(cal, [run_], k=3)
    (ch,) = rec.changed()
    assert ch.added_s == pytest.approx(1.2e-5) and ch.factor_after == 1.0
    m0 = CalibratedModel(local_machine(), cal)
    m1 = CalibratedModel(local_machine(), rec.calibration)
    assert m0.request_cost("cpu0") is None and m1.request_cost("cpu1") is None
    got = m1.request_cost("cpu0")
    assert got is not None and got.term(Term.SYNC) == pytest.approx(1.2e-5)
    p0, p1 = _problem(cal), _problem(rec.calibration)
    e0, e1 = evaluate(p0, _placement(p0)), evaluate(p1, _placement(p1))
    assert e1.latency_s == pytest.approx(e0.latency_s + 1.2e-5)
    assert e1.schedule.makespan_s == e0.schedule.makespan_s  # the tasks are untouched


# ---- windows from an executor's telemetry (synthetic records of a 4-partition plan) -------


def _split_plan() -> tuple[Any, Any]:
    from placewise.plan import build_plan
    from placewise.runtime.program import program_from_plan
    from tests.runtime.helpers import TINY_MLP, problem_of, split_placement

    src = tiny_source()
    prob = problem_of(src)
    plan = build_plan(prob, evaluate(prob, split_placement(prob, int8=False)),
                      model_ref=TINY_MLP, strategy="test")
    assert src.graph is not None
    return plan, program_from_plan(plan, src.graph, local_machine())


def _telemetry(program: Any) -> Any:
    """Six requests 1 ms apart, steps back to back (us): requests 3-5 run p2.cpu0 while
    p1.cpu1 still computes (overlap: contention for both)."""
    from placewise.runtime.telemetry import RequestRecord, SoloRecord, TaskRecord, Telemetry

    us = 1000
    tasks, reqs = [], []
    for r in range(6):
        b = 1_000_000 * (r + 1)
        late = r >= 3
        steps = [("p0.cpu0", "compute", "cpu0", None, 0, 10, 6),
                 ("xfer:relu:cpu0->cpu1", "transfer", "cpu0", "cpu1", 10, 15, 0),
                 ("p1.cpu1", "compute", "cpu1", None, 15, 25, 8),
                 ("xfer:linear_1:cpu1->cpu0", "transfer", "cpu1", "cpu0", 25, 30, 0),
                 ("p2.cpu0", "compute", "cpu0", None, 20 if late else 30,
                  29 if late else 35, 7 if late else 3),
                 ("xfer:relu_1:cpu0->cpu01", "transfer", "cpu0", "cpu01", 35, 40, 0),
                 ("p3.cpu01", "compute", "cpu01", None, 40, 50, 9),
                 ("xfer:linear_2:cpu01->cpu0", "transfer", "cpu01", "cpu0", 50, 55, 0)]
        for name, kind, dev, dst, a, z, kern in steps:
            tasks.append(TaskRecord(r, name, kind, dev, b + a * us, b + z * us,
                                    kernel_ns=kern * us, dst_device=dst, phase="isolated"))
        reqs.append(RequestRecord(r, "isolated", b - 3 * us, b + 58 * us, b + 58 * us))
    solo = (SoloRecord("p2.cpu0", "cpu0", 4e-6, 3e-6, 0.0, 3),)
    return Telemetry({}, (), tuple(reqs), tuple(tasks), (), (), solo)


def test_windows_line_measured_tasks_up_with_the_plan_per_key() -> None:
    from placewise.runtime.windows import windows_from_telemetry

    plan, program = _split_plan()
    run_ = windows_from_telemetry(plan, _telemetry(program), window_requests=3,
                                  tags={"t": "1"}, program=program)
    assert len(run_.windows) == 2 and run_.tags == {"t": "1"}
    w0 = {t.key: t for t in run_.windows[0].terms}
    w1 = {t.key: t for t in run_.windows[1].terms}
    assert w0["transfer:cpu0->cpu1"].measured_s == pytest.approx(5e-6)
    assert w0["transfer:cpu01->cpu0"].measured_s == pytest.approx(5e-6)
    assert w0["request:cpu0"].measured_s == pytest.approx(6e-6)  # 3 us in, 3 us out
    assert w0["request:cpu0"].predicted_s == 0.0  # the roofline has no hand-off
    # launch per device: p0 (10 - 6) + p2 (5 - 3) us on cpu0
    assert w0["launch:cpu0"].measured_s == pytest.approx(6e-6)
    comp = {t.key: t for t in w0.values() if t.kind == "compute"}
    assert len(comp) == 4  # one per partition, keyed by its regions
    assert {len(t.regions) for t in comp.values()} == {1, 2}
    # requests 3-5: p1 and p2 overlapped -> their kernel time is contention, not compute
    cont = {t.key: t for t in w1.values() if t.kind == "contention"}
    assert {t.device for t in cont.values()} == {"cpu0", "cpu1"}
    (c2,) = [t for t in cont.values() if t.device == "cpu0"]
    assert c2.base_s == pytest.approx(3e-6) and c2.measured_s == pytest.approx(4e-6)
    assert len([t for t in w1.values() if t.kind == "compute"]) == 2
    pt = plan.task_index()["xfer:relu:cpu0->cpu1"]
    assert w0["transfer:cpu0->cpu1"].predicted_s == pytest.approx(pt.duration_s)
    # every term's interval holds its prediction
    for w in run_.windows:
        for t in w.terms:
            assert t.lo_s <= t.predicted_s <= t.hi_s


def test_an_added_hand_off_is_scaled_in_the_next_round_not_dropped() -> None:
    cal = _cal0()

    def run(c: Calibration, pred: float, meas: float) -> TelemetryRun:
        tw = TermWindow("launch", "request:cpu0", "cpu0", "", pred, 0.9 * pred, 1.1 * pred,
                        meas, 1e-7, 6)
        return TelemetryRun(dict(machine_tags()), "p", c.fingerprint(),
                            tuple(Window(i, 6, (tw,)) for i in range(3)))

    cal1 = recalibrate(cal, [run(cal, 0.0, 1e-5)]).calibration
    cal2 = recalibrate(cal1, [run(cal1, 1e-5, 1.5e-5)]).calibration
    (adj,) = cal2.adjustments
    assert adj.add_s == pytest.approx(1.5e-5) and adj.factor == 1.0
    got = CalibratedModel(local_machine(), cal2).request_cost("cpu0")
    assert got is not None and got.total_s == pytest.approx(1.5e-5)
