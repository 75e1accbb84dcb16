"""Plan sets: envelopes, mixes, bucket choice on hand tables and on real plans, residency
counted once, shared placements, padding figures, the file and its fingerprints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from placewise.adapt.planset import (
    Mix,
    PlanSet,
    build_plan_set,
    is_plan_set,
    load_mix,
    load_plan_set,
    parse_envelope,
    plan_set_to_json,
    plan_weights,
    save_plan_set,
)
from placewise.adapt.planset.choice import (
    ChoiceCosts,
    GridFacts,
    Point,
    choose,
    evaluate_edges,
    padding_table,
    resident_bytes,
)
from placewise.errors import InputError, SpecError

MLP = "zoo:mlp?layers=2&hidden=64"
MLP256 = "zoo:mlp?layers=2&hidden=256"  # batch 16 predicted ~20 % slower than batch 1 here
BERT = "zoo:bert?layers=1&hidden=32&heads=2&vocab=100"


# ---- the envelope ---------------------------------------------------------------------------
def test_parse_envelope_forms() -> None:
    assert parse_envelope(["batch=1,2,4,8,16", "seq=32..512:pow2"]) == {
        "batch": [1, 2, 4, 8, 16], "seq": [32, 64, 128, 256, 512]}
    assert parse_envelope(["seq=8..20:+4", "batch=4,1"]) == {"batch": [1, 4],
                                                             "seq": [8, 12, 16, 20]}


@pytest.mark.parametrize("items, needle", [
    (["batch"], "expected AXIS=VALUES"),
    (["width=1,2"], "unknown axis 'width'"),
    (["batch=1,x"], "positive integer"),
    (["batch=0,1"], "out of range"),
    (["batch=1", "batch=2"], "given twice"),
    (["seq=3..64:pow2"], "powers of two"),
    (["seq=64..8:pow2"], "is empty"),
    (["seq=8..64:x2"], "unknown step"),
    (["batch=1..64:+1", "seq=1..16:+1"], "more than 16 values"),
    (["batch=1..16:+1", "seq=8..128:pow2"], "grid points"),
    (["batch="], "no values"),
])
def test_parse_envelope_refuses(items: list[str], needle: str) -> None:
    with pytest.raises(InputError, match=needle) as exc:
        parse_envelope(items)
    assert (exc.value.place or "").startswith("--envelope")


# ---- the mix ----------------------------------------------------------------------------------
def test_load_mix_distribution_yaml_and_trace(tmp_path: Path) -> None:
    j = tmp_path / "m.json"
    j.write_text(json.dumps([{"batch": 1, "weight": 3}, {"batch": 16, "weight": 1},
                             {"batch": 1, "weight": 0}]))
    m = load_mix(j)
    assert m.kind == "distribution" and m.items == (({"batch": 1}, 0.75), ({"batch": 16}, 0.25))
    y = tmp_path / "m.yaml"
    y.write_text("mix:\n  - {batch: 2, seq: 64, weight: 1}\n  - {batch: 2, seq: 128, weight: 1}\n")
    assert [s for s, _ in load_mix(y).items] == [{"batch": 2, "seq": 64},
                                                 {"batch": 2, "seq": 128}]
    t = tmp_path / "t.jsonl"
    t.write_text("".join(json.dumps({"t_s": i * 0.01, "batch": 1 if i % 4 else 8}) + "\n"
                         for i in range(8)))
    tm = load_mix(t)
    assert tm.kind == "trace" and tm.requests == 8
    assert dict((s["batch"], p) for s, p in tm.items) == {1: 0.75, 8: 0.25}


@pytest.mark.parametrize("name, text, needle", [
    ("e.json", "[]", "empty"),
    ("z.json", '[{"batch": 1, "weight": 0}]', "sum to 0"),
    ("n.json", '[{"batch": 1, "weight": -1}]', "weight must be"),
    ("w.json", '[{"batch": 1}]', "weight must be"),
    ("f.json", '[{"batch": 1.5, "weight": 1}]', "batch must be"),
    ("u.json", '[{"batch": 1, "rows": 2, "weight": 1}]', "unknown field 'rows'"),
    ("o.json", '{"a": 1}', "a mix is a list"),
    ("d.json", "[" * 500 + "]" * 500, "nested"),
    ("b.json", '[{"batch": 1, "weight": 1e999}]', "finite"),
    ("x.yaml", "- !!python/object:os.system {}\n", "could not determine a constructor"),
    ("t.jsonl", '{"t_s": 0, "batch": "x"}\n', "batch"),
    ("t2.jsonl", "\n", "no request"),
])
def test_load_mix_refuses(tmp_path: Path, name: str, text: str, needle: str) -> None:
    f = tmp_path / name
    f.write_text(text)
    with pytest.raises(InputError, match=needle) as exc:
        load_mix(f)
    assert exc.value.file == str(f)


# ---- the choice on hand tables ----------------------------------------------------------------
def _facts(lat: dict[int, float], weights: dict[int, dict[str, dict[Any, int]]] | None = None,
           other: dict[int, dict[str, int]] | None = None,
           cap: dict[str, int] | None = None, keys: dict[int, str] | None = None) -> GridFacts:
    vals = tuple(sorted(lat))
    return GridFacts(("batch",), {"batch": vals}, {(b,): v for b, v in lat.items()},
                     {(b,): (keys or {}).get(b, "same") for b in vals},
                     {(b,): w for b, w in (weights or {}).items()},
                     {(b,): o for b, o in (other or {}).items()}, cap or {})


def test_mostly_batch_1_gets_its_own_bucket() -> None:
    facts = _facts({1: 1e-3, 2: 2e-3, 4: 4e-3, 8: 8e-3, 16: 16e-3})
    probs: dict[Point, float] = {(1,): 0.95, (16,): 0.05}
    edges, choice = choose(facts, probs, ChoiceCosts())
    assert edges == ((1, 16),)
    assert choice["buckets"] == 2
    assert choice["chosen"]["expected_latency_s"] == pytest.approx(0.95e-3 + 0.05 * 16e-3)
    assert choice["one_bucket"]["expected_latency_s"] == pytest.approx(16e-3)
    assert choice["per_grid_point"]["buckets"] == 5
    assert choice["chosen"]["total_cost_s"] < choice["one_bucket"]["total_cost_s"]
    assert choice["chosen"]["total_cost_s"] < choice["per_grid_point"]["total_cost_s"]
    assert choice["considered"] == 16 and "exhaustive" in choice["method"]
    assert "2 buckets" in choice["why"]


def test_uniform_mix_with_flat_latency_is_one_bucket() -> None:
    facts = _facts({1: 1e-3, 2: 1e-3, 4: 1e-3, 8: 1e-3})
    probs: dict[Point, float] = {(b,): 0.25 for b in (1, 2, 4, 8)}
    edges, choice = choose(facts, probs, ChoiceCosts())
    assert edges == ((8,),) and choice["buckets"] == 1
    assert "padding everything to the largest shape" in choice["why"]


def test_compile_cost_trades_against_padding() -> None:
    facts = _facts({1: 1e-3, 16: 2e-3})
    probs: dict[Point, float] = {(1,): 0.5, (16,): 0.5}
    # a second bucket saves 0.5 ms per request: worth it unless it costs more than that
    cheap = ChoiceCosts(horizon_requests=1000, compile_s_per_bucket=0.1)   # 0.1 ms
    dear = ChoiceCosts(horizon_requests=1000, compile_s_per_bucket=1.0)    # 1 ms
    assert choose(facts, probs, cheap)[0] == ((1, 16),)
    edges, choice = choose(facts, probs, dear)
    assert edges == ((16,),)
    assert choice["alternatives"][1]["compile_term_s"] == pytest.approx(1e-3)


def test_residency_counts_shared_weights_once() -> None:
    w = {"pool:dram": {("cpu0", "fc.weight", "fp32"): 4000, ("cpu0", "fc.bias", "fp32"): 40}}
    w2 = {"pool:dram": {("cpu0", "fc.weight", "fp32"): 4000, ("cpu1", "fc.bias", "fp32"): 40}}
    facts = _facts({1: 1.0, 16: 2.0}, weights={1: w, 16: w2},
                   other={1: {"pool:dram": 100}, 16: {"pool:dram": 1600}},
                   cap={"pool:dram": 10_000})
    res = resident_bytes(facts, [(1,), (16,)])["pool:dram"]
    # fc.weight on cpu0 in both bucket plans: once; fc.bias on two devices: twice
    assert res["weights_bytes"] == 4000 + 40 + 40
    assert res["weights_without_sharing_bytes"] == 2 * 4040
    assert res["other_peak_bytes"] == 1600  # the largest, not the sum
    assert res["resident_bytes"] == 4080 + 1600 and res["fits"]
    assert res["devices"] == ["cpu0", "cpu1"]


def test_an_edge_set_that_does_not_fit_is_not_chosen() -> None:
    w = {1: {"m": {("d", "w1", "fp32"): 600}}, 16: {"m": {("d", "w16", "fp32"): 600}}}
    facts = _facts({1: 1.0, 16: 2.0}, weights=w, other={1: {"m": 0}, 16: {"m": 0}},
                   cap={"m": 1000})
    probs: dict[Point, float] = {(1,): 0.9, (16,): 0.1}
    two = evaluate_edges(facts, ((1, 16),), probs, ChoiceCosts())
    assert not two["fits"] and two["total_cost_s"] is None
    assert choose(facts, probs, ChoiceCosts())[0] == ((16,),)


def test_padding_table_figures() -> None:
    facts = _facts({1: 1.0, 2: 2.0, 4: 4.0, 8: 8.0})
    half: dict[Point, float] = {(1,): 0.5, (8,): 0.5}
    rows = padding_table(facts, ((2, 8),), half)
    by = {r["shape"]["batch"]: r for r in rows}
    assert by[1]["upper"] == {"batch": 2} and by[1]["padding_s"] == pytest.approx(1.0)
    assert by[1]["next_bucket_up"]["batch"]["upper"] == {"batch": 8}
    assert by[1]["next_bucket_up"]["batch"]["padding_s"] == pytest.approx(7.0)
    assert by[4]["served_latency_s"] == 8.0 and by[4]["padding_s"] == pytest.approx(4.0)
    assert by[8]["padding_s"] == 0 and by[8]["next_bucket_up"] == {}
    assert by[1]["probability"] == 0.5 and by[2]["probability"] == 0.0


def test_two_axes_choice_is_exhaustive_over_the_product() -> None:
    lat: dict[Point, float] = {(b, s): b * s * 1e-6 for b in (1, 2, 4) for s in (8, 16)}
    facts = GridFacts(("batch", "seq"), {"batch": (1, 2, 4), "seq": (8, 16)}, lat,
                      dict.fromkeys(lat, "k"), {}, {}, {})
    pr: dict[Point, float] = {(1, 8): 0.9, (4, 16): 0.1}
    edges, choice = choose(facts, pr, ChoiceCosts())
    assert choice["considered"] == 4 * 2
    assert edges == ((1, 4), (8, 16))


# ---- real plan sets ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def machine() -> Any:
    from placewise.hardware.probe import load_local

    return load_local()


@pytest.fixture(scope="module")
def mlp_set(machine: Any) -> PlanSet:
    mix = Mix.from_weights({(("batch", 1),): 95.0, (("batch", 16),): 5.0},
                           kind="distribution", source=None)
    return build_plan_set(MLP256, machine, ["batch=1,2,4,8,16"], mix, time_limit_s=0.5)


def test_mlp_plan_set(mlp_set: PlanSet) -> None:
    ps = mlp_set
    assert ps.axes == ("batch",) and [g["shape"]["batch"] for g in ps.grid] == [1, 2, 4, 8, 16]
    # every bucket plan is planned at its bucket's upper corner
    for b in ps.buckets:
        assert ps.plan_of(b).batch == b.upper["batch"] == b.batch
        assert b.predicted_latency_s == ps.plan_of(b).predicted_latency_s
        assert ps.plan_of(b).placement == ps.entry_of(b).placement
    lat = {g["shape"]["batch"]: g["latency_s"] for g in ps.grid}
    if 0.95 * (lat[16] - lat[1]) > 2e-6:  # padding batch 1 to 16 costs more than a bucket
        assert ps.bucket_for({"batch": 1}).upper == {"batch": 1}  # its own small bucket
        assert ps.choice["buckets"] >= 2
    got = ps.bucket_for({"batch": 3})
    assert got.lower["batch"] <= 4 <= got.upper["batch"]
    with pytest.raises(InputError, match="above the envelope"):
        ps.bucket_for({"batch": 17})
    ch = ps.choice
    assert ch["chosen"]["total_cost_s"] <= ch["one_bucket"]["total_cost_s"]
    assert ch["chosen"]["total_cost_s"] <= ch["per_grid_point"]["total_cost_s"]
    assert sum(b.probability for b in ps.buckets) == pytest.approx(1.0)
    # the padding figures are the grid plans' own latencies
    for r in ps.padding:
        assert r["padding_s"] == pytest.approx(lat[r["upper"]["batch"]] - lat[r["shape"]["batch"]])


def test_shared_placement_and_residency_of_a_real_set(mlp_set: PlanSet) -> None:
    ps = mlp_set
    for i, p in enumerate(ps.plans):  # buckets with one placement share one entry
        sharing = [b for b in ps.buckets if b.plan_index == i]
        assert sharing and all(ps.plan_of(b).placement == p.placement for b in sharing)
    for a in ps.buckets:  # one entry per placement
        for b in ps.buckets:
            same = ps.plan_of(a).placement == ps.plan_of(b).placement
            assert same == (a.plan_index == b.plan_index)
    one = sum(sum(w.values()) for w in plan_weights(ps.plan_of(ps.buckets[0])).values())
    res = ps.residency
    if len({json.dumps(ps.plan_of(b).placement, sort_keys=True) for b in ps.buckets}) == 1:
        assert res["weights_bytes"] == one  # the same weights on the same device: once
    assert res["weights_without_sharing_bytes"] == sum(
        sum(sum(w.values()) for w in plan_weights(ps.plan_of(b)).values()) for b in ps.buckets)
    assert res["fits"]


def test_round_trip_and_fingerprints(mlp_set: PlanSet, tmp_path: Path) -> None:
    f = tmp_path / "ps.json"
    save_plan_set(mlp_set, f)
    assert is_plan_set(f) and not is_plan_set(tmp_path / "missing.json")
    back = load_plan_set(f)
    assert back.buckets == mlp_set.buckets and back.plans == mlp_set.plans
    assert back.bucket_plans == mlp_set.bucket_plans and back.choice == mlp_set.choice
    assert back.fingerprint() == mlp_set.fingerprint()
    save_plan_set(back, tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == f.read_bytes()


def test_corrupt_and_edited_files_are_refused(mlp_set: PlanSet, tmp_path: Path) -> None:
    from placewise.adapt.planset.file import plan_set_from_json
    from placewise.adapt.planset.record import _doc_fingerprint

    doc = plan_set_to_json(mlp_set)
    edited = json.loads(json.dumps(doc))
    edited["buckets"][0]["predicted_latency_s"] = 1.0
    with pytest.raises(SpecError, match="does not match its fingerprint") as exc:
        plan_set_from_json(edited, file="ps.json")
    assert exc.value.place == "fingerprints.planset" and exc.value.file == "ps.json"
    # a plan edited and the outer fingerprint recomputed: the plan's own is caught
    deep = json.loads(json.dumps(doc))
    deep["plans"][0]["batch"] = 99
    deep["fingerprints"]["planset"] = _doc_fingerprint(deep)
    with pytest.raises(SpecError, match="plan does not match its fingerprint") as exc:
        plan_set_from_json(deep, file="ps.json")
    assert exc.value.place == "plans[0]"
    # buckets that leave a grid point uncovered
    gap = json.loads(json.dumps(doc))
    gap["buckets"] = gap["buckets"][:-1]
    gap["bucket_plans"] = gap["bucket_plans"][:-1]
    gap["fingerprints"]["bucket_plans"] = gap["fingerprints"]["bucket_plans"][:-1]
    gap["fingerprints"]["planset"] = _doc_fingerprint(gap)
    with pytest.raises(SpecError, match="no bucket covers"):
        plan_set_from_json(gap, file="ps.json")
    # what explain reads is validated too
    rows = json.loads(json.dumps(doc))
    del rows["padding"][0]["served_latency_s"]
    rows["fingerprints"]["planset"] = _doc_fingerprint(rows)
    with pytest.raises(SpecError, match="Field required") as exc:
        plan_set_from_json(rows, file="ps.json")
    assert exc.value.place == "padding[0].served_latency_s"
    # a bucket name that would leave the export folder
    evil = json.loads(json.dumps(doc))
    evil["buckets"][0]["name"] = "../evil"
    evil["fingerprints"]["planset"] = _doc_fingerprint(evil)
    with pytest.raises(SpecError, match="pattern") as exc:
        plan_set_from_json(evil, file="ps.json")
    assert exc.value.place == "buckets[0].name"
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "placewise-planset", "version": 1, ')
    with pytest.raises(SpecError, match="not valid JSON") as exc:
        load_plan_set(bad)
    assert exc.value.file == str(bad)
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"format": "placewise-planset", "version": 2}')
    with pytest.raises(SpecError, match="version"):
        load_plan_set(wrong)


def test_axes_the_model_lacks_are_refused(machine: Any) -> None:
    with pytest.raises(InputError, match="no 'seq' option") as exc:
        build_plan_set(MLP, machine, ["seq=8,16"], time_limit_s=0.5)
    assert exc.value.place == "--envelope seq"
    mix = Mix.from_weights({(("batch", 32),): 1.0}, kind="distribution", source="m.json")
    with pytest.raises(InputError, match="above the envelope") as exc:
        build_plan_set(MLP, machine, ["batch=1,2"], mix, time_limit_s=0.5)
    assert exc.value.file == "m.json"


def test_seq_axis_of_a_zoo_model(machine: Any, tmp_path: Path) -> None:
    ps = build_plan_set(BERT, machine, ["batch=1,2", "seq=16,32"], time_limit_s=0.5)
    assert ps.axes == ("batch", "seq") and len(ps.grid) == 4
    for b in ps.buckets:
        assert f"seq={b.upper['seq']}" in b.model_ref
        t = ps.plan_of(b).tensors
        ids = [n for n in ps.plan_of(b).graph_inputs if n in t]
        assert any(tuple(t[n].shape[:2]) == (b.upper["batch"], b.upper["seq"]) for n in ids)
    assert ps.bucket_for({"batch": 1, "seq": 20}).upper["seq"] == 32
    with pytest.raises(InputError, match="no 'seq'"):
        ps.bucket_for({"batch": 1})
    if len(ps.buckets) == 4 and len(ps.plans) == 1:  # one placement: all on one device
        # residency: the weights once, but the position table once per sequence length
        one = plan_weights(ps.plan_of(ps.buckets[0]))
        pos = sum(v for w in one.values() for k, v in w.items() if k[1] == "pos")
        assert ps.residency["weights_bytes"] == sum(sum(w.values()) for w in one.values()) \
            + 2 * pos
    # the export writes identical weights once: every bucket's but the position tables
    from placewise.adapt.planset.export import export_plan_set

    exp = export_plan_set(ps, tmp_path / "exp", machine=machine)
    assert exp["references"] > exp["initializers"]
    # n buckets without sharing write every weight n times; with it, once, plus what is
    # not shared (position tables, graphs): under 35 % of the unshared bytes here. The
    # bucket count follows the time-limited search (4 on a quiet machine: the 0.6 bound)
    n = len(ps.buckets)
    assert exp["bytes_written"] < (1 / n + 0.35) * exp["bytes_without_sharing"], (n, exp)


def test_seq_axis_of_an_onnx_file(machine: Any, tmp_path: Path) -> None:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((32, 32), np.float32), "w")
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq_len", 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq_len", 32])], [w])
    f = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(f))
    ps = build_plan_set(str(f), machine, ["batch=1,2", "seq=4,8"], time_limit_s=0.5,
                        costs=ChoiceCosts(compile_s_per_bucket=0.0))
    top = ps.buckets[-1]
    assert top.shapes == {"x": [top.upper["batch"], top.upper["seq"], 32]}
    assert ps.plan_of(top).tensors["x"].shape == (top.upper["batch"], top.upper["seq"], 32)
    from placewise.adapt.planset.export import export_plan_set

    exp = export_plan_set(ps, tmp_path / "exp", machine=machine)  # partitions of the ONNX
    assert exp["verified_sessions"] >= len(ps.buckets)
    assert len(ps.buckets) == 4  # compile priced at 0: a bucket per grid point
    assert exp["initializers"] == 1 and exp["references"] == 4  # w, written once
    fixed = tmp_path / "fixed.onnx"
    g2 = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 32])], [w])
    onnx.save(helper.make_model(g2, opset_imports=[helper.make_opsetid("", 17)]), str(fixed))
    with pytest.raises(InputError, match="symbolic sequence dimension"):
        build_plan_set(str(fixed), machine, ["seq=4,8"], time_limit_s=0.5)


def test_export_of_a_preset_plan_set_shares_one_file_between_partitions(
        tmp_path: Path) -> None:
    from placewise.adapt.planset.export import SHARED_FILE, export_plan_set
    from placewise.export import load_manifest
    from placewise.hardware.load import load_machine

    orin = load_machine("jetson-agx-orin")
    ps = build_plan_set("zoo:mlp", orin, ["batch=1,64"], time_limit_s=1.0)
    exp = export_plan_set(ps, tmp_path / "exp")
    assert exp["verified_sessions"] == sum(r["partitions"] for r in exp["buckets"])
    many = [r for r in exp["buckets"] if r["partitions"] > 1]
    for r in many:  # partitions of one bucket name the one shared file
        man = load_manifest(tmp_path / "exp" / r["folder"])
        assert {p.external_data for p in man.partitions} <= {SHARED_FILE, None}
    assert exp["bytes_written"] < exp["bytes_without_sharing"]


def test_dynamic_programme_matches_exhaustive_search(monkeypatch: pytest.MonkeyPatch) -> None:
    import random

    import placewise.adapt.planset.choice as pc

    rng = random.Random(7)
    for _ in range(40):
        vals = tuple(sorted(rng.sample(range(1, 64), rng.randint(2, 7))))
        lat: dict[Point, float] = {(v,): x for v, x in
                                   zip(vals, sorted(rng.random() * 1e-3 for _ in vals),
                                       strict=True)}
        probs: dict[Point, float] = {(v,): rng.random() for v in vals}
        costs = ChoiceCosts(horizon_requests=1000, compile_s_per_bucket=rng.random() * 0.2)
        facts = _facts({v: lat[(v,)] for v in vals})
        monkeypatch.setattr(pc, "MAX_EXHAUSTIVE", 4096)
        exact = choose(facts, probs, costs)[1]
        monkeypatch.setattr(pc, "MAX_EXHAUSTIVE", 0)
        dp = choose(facts, probs, costs)[1]
        assert "dynamic programme" in dp["method"] and "exhaustive" in exact["method"]
        assert dp["chosen"]["total_cost_s"] == pytest.approx(exact["chosen"]["total_cost_s"],
                                                             rel=1e-12)


def test_buckets_without_mix_probability_are_dropped() -> None:
    lat: dict[Point, float] = {(b, s): b * s * 1e-6 for b in (1, 4) for s in (8, 16)}
    facts = GridFacts(("batch", "seq"), {"batch": (1, 4), "seq": (8, 16)}, lat,
                      dict.fromkeys(lat, "k"), {}, {}, {})
    pr: dict[Point, float] = {(1, 8): 0.9, (4, 16): 0.1}
    edges, choice = choose(facts, pr, ChoiceCosts())
    assert edges == ((1, 4), (8, 16))
    assert choice["chosen"]["buckets"] == 2 and choice["chosen"]["dropped"] == 2
    assert choice["per_grid_point"]["buckets"] == 4  # the reference keeps every point
    rows = {tuple(r["shape"].values()): r for r in padding_table(facts, edges, pr)}
    assert rows[(1, 16)]["upper"] == {"batch": 4, "seq": 16}  # the only cover left
    assert rows[(4, 8)]["upper"] == {"batch": 4, "seq": 16}


def test_a_dropped_bucket_is_served_in_a_covering_one(machine: Any, tmp_path: Path) -> None:
    mix = Mix.from_weights({(("batch", 1), ("seq", 16)): 0.9, (("batch", 2), ("seq", 32)): 0.1},
                           kind="distribution", source=None)
    ps = build_plan_set(BERT, machine, ["batch=1,2", "seq=16,32"], mix, time_limit_s=0.5)
    uppers = [b.upper for b in ps.buckets]
    assert {"batch": 2, "seq": 32} in uppers and {"batch": 1, "seq": 32} not in uppers
    assert ps.bucket_for({"batch": 1, "seq": 32}).upper == {"batch": 2, "seq": 32}
    assert ps.choice["chosen"]["buckets"] == len(ps.buckets)
    save_plan_set(ps, tmp_path / "ps.json")
    assert load_plan_set(tmp_path / "ps.json").buckets == ps.buckets
