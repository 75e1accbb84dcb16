"""The plan file: contents, determinism, round trips, load errors, fingerprints, search record,
the published JSON Schema, and properties on random graphs and machines."""

from __future__ import annotations

import base64
import json
import math
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placewise.check import Severity, check_plan
from placewise.cost.model import Term
from placewise.errors import InputError, SpecError
from placewise.explain import explain, render_explain
from placewise.graph.fuse import fuse
from placewise.graph.ir import Graph
from placewise.hardware.spec import Machine
from placewise.plan import (
    MAX_TIMELINE_POINTS,
    OpRecord,
    Plan,
    RegionRecord,
    TaskRecord,
    _decimate,
    build_plan,
    check_fingerprints,
    dumps_plan,
    load_plan,
    parse_rep,
    plan_from_json,
    plan_json_schema,
    plan_records_json,
    plan_to_json,
    save_plan,
)
from placewise.plan_columns import (
    Strings,
    column_values,
    decode_column_values,
    encode_values,
    unpack_strings,
)
from placewise.plan_file import _Assignment, _Step
from placewise.schedule import Assignment, Evaluation, Placement, Problem, evaluate
from placewise.schedule.simulate import TaskKind
from placewise.schedule.testing import ToyCostModel, toy_machine
from placewise.trace import to_chrome_trace
from placewise.units import DType, Layout
from tests.plan_fixtures import TOY_PLACEMENT, toy_plan, toy_problem
from tests.strategies import random_graphs

SCHEMA_FILE = Path(__file__).parents[1] / "src" / "placewise" / "schemas" / "plan.schema.json"


# ---- contents --------------------------------------------------------------------------------
def test_plan_records_the_evaluation() -> None:
    prob, plan = toy_plan()
    ev = evaluate(prob, Placement.of(TOY_PLACEMENT))
    assert plan.schema_version == 2
    assert plan.created_by.startswith("placewise ")
    assert plan.model == "toy.json" and plan.graph_name == "toy"
    assert plan.fingerprints.graph == prob.graph.fingerprint()
    assert plan.fingerprints.machine == prob.machine.fingerprint()
    assert plan.fingerprints.calibration == "toy/v1"
    assert plan.objective.value == "latency" and plan.objective_value == ev.makespan_s
    assert plan.makespan_s == ev.makespan_s and plan.exact
    assert plan.lower_bound_s == ev.lower_bound_s <= plan.makespan_s
    assert plan.throughput_rps == pytest.approx(ev.throughput_rps)
    assert plan.bottleneck_resource == ev.bottleneck_resource
    assert plan.placement == Placement.of(TOY_PLACEMENT).to_json()
    assert plan.placement_obj() == Placement.of(TOY_PLACEMENT)
    assert plan.assignment("b") == Assignment("gpu", DType.FP16)
    assert [t.name for t in plan.schedule.tasks] == [t.name for t in ev.schedule.tasks]
    assert list(plan.schedule.critical_path) == [t.name for t in ev.schedule.critical_path()]
    assert plan.devices_used() == ["cpu", "gpu"]
    # every task's terms add up to its duration, its interval holds it
    for t in plan.schedule.tasks:
        assert sum(t.terms_s.values()) == pytest.approx(t.duration_s, rel=1e-9, abs=1e-18)
        assert t.low_s <= t.duration_s * (1 + 1e-9) and t.duration_s <= t.high_s * (1 + 1e-9)
    # ops map to vertices; regions carry tensors and per-device alternatives
    assert plan.vertex_of("a") == "a" and plan.vertex_of("nope") is None
    assert plan.regions["b"].params == ("w",)
    assert {a.device for a in plan.regions["a"].alternatives} == {"cpu", "gpu"}
    assert plan.tensors["w"].nbytes == 4000 and plan.tensors["w"].role.value == "param"


def test_memory_breakdown_and_timeline() -> None:
    _, plan = toy_plan()
    gpu = plan.memory.devices["gpu"]["vram"]
    assert gpu.breakdown.weights == 2000  # w in fp16 for vertex b
    assert gpu.breakdown.total == gpu.peak_bytes
    assert max(b for _, b in gpu.timeline) == gpu.peak_bytes
    assert gpu.final_bytes == 0 and gpu.timeline[-1][1] == 0
    assert plan.memory.feasible and gpu.fits and gpu.headroom_bytes == (1 << 30) - gpu.peak_bytes


def test_crossings_have_their_tasks_and_counterfactual() -> None:
    _, plan = toy_plan()
    keys = [c.key for c in plan.crossings]
    assert keys == ["h: a -> b", "h: a -> c", "y1: b -> d", "k: c -> d", "y1: b -> output"]
    idx = plan.task_index()
    for c in plan.crossings:
        assert c.tasks, c.key
        kinds = [idx[n].kind for n in c.tasks]
        assert TaskKind.TRANSFER in kinds
        assert c.links == ("pcie",)
        assert c.transfer_s == pytest.approx(sum(idx[n].term(Term.TRANSFER) for n in c.tasks))
        assert c.total_s == pytest.approx(idx[c.tasks[-1]].end_s - idx[c.tasks[0]].start_s)
    hb = plan.crossings[0]
    # h leaves the cpu as fp32 and b computes in fp16: converted before sending (smaller)
    assert hb.src_rep == "fp32/row_major" and hb.dst_rep == "fp16/row_major"
    assert idx[hb.tasks[0]].kind is TaskKind.CONVERSION and hb.conversion_s > 0
    # keeping b on the cpu: b in the producer's fp32 there, against its own cost on the gpu
    assert hb.kept is not None and hb.kept.vertex == "b" and hb.kept.device == "cpu"
    assert hb.kept.dtype is DType.FP32
    assert hb.kept.own_cost_s == pytest.approx(idx["b"].duration_s)
    assert hb.kept.cost_s is not None
    assert hb.kept.delta_s == pytest.approx(hb.kept.cost_s - hb.kept.own_cost_s)
    # y1 is sent once and serves both d and the graph output
    assert plan.crossings[2].shared_with == ("output",)
    assert plan.crossings[4].shared_with == ("d",)
    assert plan.crossings[4].kept is not None and plan.crossings[4].kept.vertex == "b"


def test_kept_records_why_it_cannot_run_there() -> None:
    data = toy_machine().model_dump(mode="json")
    data["devices"][0]["unsupported_kinds"] = ["mul"]  # the cpu cannot run b
    _, plan = toy_plan(Machine.model_validate(data))
    hb = plan.crossings[0]
    assert hb.kept is not None and hb.kept.cost_s is None and hb.kept.reason
    assert "mul" in hb.kept.reason or "does not run" in hb.kept.reason
    alt = {a.device: a for a in plan.regions["b"].alternatives}
    assert alt["cpu"].total_s is None and alt["cpu"].reason


# ---- determinism and round trips ---------------------------------------------------------------
def test_same_inputs_give_byte_identical_files(tmp_path: Path) -> None:
    _, p1 = toy_plan()
    _, p2 = toy_plan()  # fresh problem, fresh memo tables
    save_plan(p1, tmp_path / "a.json")
    save_plan(p2, tmp_path / "b.json")
    a = (tmp_path / "a.json").read_bytes()
    assert a == (tmp_path / "b.json").read_bytes()
    assert a.decode() == dumps_plan(p1)
    assert load_plan(tmp_path / "a.json") == p1
    # keys are sorted, floats are repr-stable, nothing wall-clock
    text = a.decode()
    assert json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n" == text
    assert "search_time" not in text and "created_at" not in text


def test_round_trip_and_schema(tmp_path: Path) -> None:
    _, plan = toy_plan()
    path = tmp_path / "plan.json"
    save_plan(plan, path)
    back = load_plan(path)
    assert back == plan
    assert dumps_plan(back) == dumps_plan(plan)
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(json.loads(path.read_text()), schema,
                        cls=jsonschema.Draft202012Validator)
    readable = json.loads(json.dumps(plan_to_json(plan, packed=False)))
    jsonschema.validate(readable, schema, cls=jsonschema.Draft202012Validator)


def test_published_schema_is_up_to_date() -> None:
    text = json.dumps(plan_json_schema(), indent=2, sort_keys=True) + "\n"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        SCHEMA_FILE.write_text(text)
    assert SCHEMA_FILE.read_text() == text, \
        "plan.schema.json is stale: rerun with UPDATE_GOLDEN=1"


def test_parse_rep() -> None:
    assert parse_rep("fp16/nchw").layout is Layout.NCHW
    assert str(parse_rep("int8/row_major")) == "int8/row_major"


def test_decimate_is_an_upper_envelope() -> None:
    pts = [(float(i), (i * 37) % 101) for i in range(1000)] + [(1000.0, 0)]
    d = _decimate(pts, MAX_TIMELINE_POINTS)
    assert len(d) <= MAX_TIMELINE_POINTS
    assert max(b for _, b in d) == max(b for _, b in pts)
    assert d[0][0] == 0.0 and d[-1] == (1000.0, 0)

    def level(series: list[tuple[float, int]], t: float) -> int:
        return [b for s, b in series if s <= t][-1]

    for t in [p[0] for p in pts]:
        assert level(d, t) >= level(pts, t)
    assert _decimate(pts[:10], MAX_TIMELINE_POINTS) == pts[:10]


def test_long_timelines_are_decimated() -> None:
    import random

    from placewise.graph.ir import Op, OpKind, Role, Tensor

    rnd = random.Random(1)
    tensors = [Tensor("t0", (64,), DType.FP32, role=Role.INPUT)]
    ops = []
    for i in range(300):
        tensors.append(Tensor(f"t{i + 1}", (rnd.randint(1, 64),), DType.FP32,
                              role=Role.OUTPUT if i == 299 else Role.ACTIVATION))
        ops.append(Op(f"o{i}", OpKind.TASK, (f"t{i}",), (f"t{i + 1}",)))
    g = Graph.build("long", tensors, ops)
    m = toy_machine()
    prob = Problem(g, None, m, ToyCostModel(m, {(f"o{i}", "cpu"): 1e-3 for i in range(300)}))
    plan = build_plan(prob, evaluate(prob, Placement.uniform(prob.vertex_names, "cpu",
                                                              DType.FP32)),
                      model_ref="long", alternatives=False, any_placement_bound=False)
    u = plan.memory.devices["cpu"]["ram"]
    assert u.timeline_points > MAX_TIMELINE_POINTS >= len(u.timeline)
    assert max(b for _, b in u.timeline) == u.peak_bytes
    assert plan.regions["o0"].alternatives == () and plan.any_placement_bound is None
    assert not [f for f in check_plan(plan, g, m) if f.severity is Severity.ERROR]


# ---- load errors -------------------------------------------------------------------------------
def _write(tmp_path: Path, obj: Any) -> Path:
    p = tmp_path / "plan.json"
    p.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return p


#: the tables of a plan file (by column) and their records
_TABLES = {"schedule.tasks": TaskRecord, "schedule.critical_path": _Step,
           "placement": _Assignment, "regions": RegionRecord, "ops": OpRecord}


def _mutated(path: str, value: Any) -> dict[str, Any]:
    """The toy plan's JSON with ``path`` set to ``value``; in a table, ``table.row.field``
    (``row``: an index or a key): the column is rewritten in its readable form."""
    _, plan = toy_plan()
    data = plan_to_json(plan)
    for prefix, cls in _TABLES.items():
        if path.startswith(prefix + "."):
            row, name = path[len(prefix) + 1:].split(".")
            table: Any = data
            for k in prefix.split("."):
                table = table[k]
            items = unpack_strings(data["strings"], file="f")
            strings = Strings()
            strings.of(items)
            if row.isdigit():
                i = int(row)
            else:
                keys = decode_column_values(table["cols"]["_key"], table["rows"],
                                            items, file="f", place="_key")
                i = keys.index(row)
            vals = column_values(cls, name, table, items)
            vals[i] = value
            table["cols"][name] = encode_values(cls, name, vals, strings, packed=False)
            data["strings"] = strings.items
            return data
    keys = path.split(".")
    cur: Any = data
    for k in keys[:-1]:
        cur = cur[int(k)] if isinstance(cur, list) else cur[k]
    last = keys[-1]
    if value is _DELETE:
        del cur[last]
    elif isinstance(cur, list):
        cur[int(last)] = value
    else:
        cur[last] = value
    return data


_DELETE = object()


@pytest.mark.parametrize(("path", "value", "place", "words"), [
    ("schema_version", 3, "schema_version", "version 3 is not supported"),
    ("schema_version", _DELETE, "schema_version", "missing"),
    ("schedule.tasks.0.start_s", "soon", "schedule.tasks[0].start_s", "finite number"),
    ("schedule.tasks.0.lane", 0.5, "schedule.tasks[0].lane", "integer"),
    ("makespan_s", None, "makespan_s", "number"),
    ("batch", "1", "batch", "integer"),
    ("objective", "fastest", "objective", "latency"),
    ("schedule.tasks.0.kind", "teleport", "schedule.tasks[0].kind", "compute"),
    ("memory.devices.cpu.ram.peak_bytes", 1.5, "memory.devices.cpu.ram.peak_bytes", "integer"),
    ("surprise", 1, "surprise", "Extra inputs"),
    ("schedule.tasks.1.deps", ["ghost"], "schedule.tasks[1]", "unknown task 'ghost'"),
    ("schedule.critical_path.0.task", "ghost", "schedule.critical_path", "ghost"),
    ("schedule.tasks.0.name", 3, "schedule.tasks[0].name", "a string"),
    ("schedule.tasks.0.src_rep", None, "", ""),  # null is allowed: loads
    ("regions.a.alternatives", (), "", ""),
    ("placement.a.dtype", "fp7", "placement.a.dtype", "fp7"),
    ("ops.a.vertex", "zz", "regions.a.ops", "not recorded"),
])
def test_load_errors_name_file_place_problem(tmp_path: Path, path: str, value: Any,
                                            place: str, words: str) -> None:
    p = _write(tmp_path, _mutated(path, value))
    if not place:
        load_plan(p)
        return
    with pytest.raises(SpecError) as exc:
        load_plan(p)
    assert exc.value.file == str(p)
    assert exc.value.place is not None and exc.value.place.startswith(place), exc.value.place
    assert words in exc.value.problem, exc.value.problem


def test_load_rejects_bad_json_nan_and_non_objects(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as exc:
        load_plan(_write(tmp_path, '{"schema_version": 1,\n "model": }'))
    assert exc.value.place == "line 2 column 11" and "not valid JSON" in exc.value.problem
    text = dumps_plan(toy_plan()[1]).replace('"makespan_s": ', '"makespan_s": NaN, "x": ', 1)
    with pytest.raises(SpecError, match="NaN"):
        load_plan(_write(tmp_path, text))
    with pytest.raises(SpecError, match="JSON object"):
        load_plan(_write(tmp_path, "[1, 2]"))
    with pytest.raises(InputError, match="cannot read"):
        load_plan(tmp_path / "missing.json")


# ---- the compact layout and old files ----------------------------------------------------------
GOLDEN_V1 = Path(__file__).parent / "golden" / "plan_v1_toy.json"


def test_a_version_1_file_loads_converted(tmp_path: Path) -> None:
    old = json.loads(GOLDEN_V1.read_text())
    assert old["schema_version"] == 1 and isinstance(old["schedule"]["tasks"], list)
    plan = load_plan(GOLDEN_V1)
    assert plan.schema_version == 2
    assert [t.name for t in plan.schedule.tasks] == [t["name"] for t in old["schedule"]["tasks"]]
    assert set(plan.regions) == set(old["regions"]) and plan.makespan_s == old["makespan_s"]
    save_plan(plan, tmp_path / "new.json")
    assert load_plan(tmp_path / "new.json") == plan
    # the records layout is what plan_records_json writes (for hand edits)
    assert plan_from_json(plan_records_json(plan)) == plan
    assert plan_from_json(plan_to_json(plan, packed=False)) == plan  # readable columns


def test_a_version_1_file_that_does_not_convert_says_replan(tmp_path: Path) -> None:
    old = json.loads(GOLDEN_V1.read_text())
    del old["schedule"]["tasks"][0]["start_s"]
    p = _write(tmp_path, old)
    with pytest.raises(SpecError) as exc:
        load_plan(p)
    assert exc.value.file == str(p) and exc.value.place == "schema_version"
    assert "re-plan with this version" in exc.value.problem
    assert "schedule.tasks[0].start_s" in exc.value.problem
    with pytest.raises(SpecError, match="re-plan with this version"):
        load_plan(_write(tmp_path, {**old, "schema_version": 9}))


def _packed(change: Any) -> dict[str, Any]:
    data = plan_to_json(toy_plan()[1])
    change(data)
    return data


@pytest.mark.parametrize(("change", "place", "words"), [
    (lambda d: d["schedule"]["tasks"]["cols"].update(start_s={"f8": "%%%"}),
     "schedule.tasks.start_s.f8", "base64"),
    (lambda d: d["schedule"]["tasks"]["cols"].update(
        start_s={"f8": base64.b64encode(zlib.compress(b"\0" * 8)).decode()}),
     "schedule.tasks.start_s.f8", "the table has"),
    (lambda d: d["schedule"]["tasks"]["cols"].update(lane={"f8": "AA=="}),
     "schedule.tasks.lane", "unknown column form"),
    (lambda d: d["schedule"]["tasks"]["cols"].pop("lane"), "schedule.tasks", "'lane'"),
    (lambda d: d["schedule"]["tasks"]["cols"].update(color={"values": []}), "schedule.tasks",
     "unknown column 'color'"),
    (lambda d: d["schedule"]["tasks"].update(rows=-1), "schedule.tasks.rows", "count"),
    (lambda d: d["ops"]["cols"].update(vertex={"values": [9, 9, 9, 9]}), "ops[0].vertex",
     "a string"),
    (lambda d: d["ops"]["cols"].update(vertex={"i8": _ints([0, 1, 2, 10 ** 6])}),
     "ops[3].vertex", "not in strings"),
    (lambda d: d["ops"]["cols"].update(kind={"values": ["relu", "add", "x", "mul"]}),
     "ops[2].kind", "'x' is not one of"),
    (lambda d: d["ops"]["cols"].update(_key={"values": ["a", "a", "c", "d"]}), "ops[1]._key",
     "repeats"),
    (lambda d: d.update(strings={"zjson": "AAAA"}), "strings", "packed string table"),
    (lambda d: d.update(strings=[1, 2]), "strings", "list of strings"),
    (lambda d: d["schedule"]["tasks"]["cols"]["terms_s"].update(warp={"values": [0.0] * 9}),
     "schedule.tasks.terms_s", "'warp' is not one of"),
])
def test_packed_columns_are_validated(tmp_path: Path, change: Any, place: str,
                                      words: str) -> None:
    p = _write(tmp_path, _packed(change))
    with pytest.raises(SpecError) as exc:
        load_plan(p)
    assert exc.value.file == str(p)
    assert exc.value.place is not None and exc.value.place.startswith(place), exc.value.place
    assert words in exc.value.problem, exc.value.problem


def _ints(values: list[int]) -> str:
    import struct

    return base64.b64encode(zlib.compress(struct.pack(f"<{len(values)}q", *values))).decode()


def test_the_file_is_compact_and_columnar() -> None:
    """A 300-op layered graph on a preset: a few hundred bytes per task (was ~3.3 KB)."""
    from placewise.cost.load import load_cost_model
    from placewise.graph.taskgraph import generate, parse_taskgraph
    from placewise.hardware.load import load_machine

    g = parse_taskgraph(generate("layered", 300, seed=0))
    m = load_machine("h100-sxm-server")
    prob = Problem(g, None, m, load_cost_model(m, None))
    ev = evaluate(prob, Placement.uniform(prob.vertex_names, "gpu0", DType.FP32))
    plan = build_plan(prob, ev, model_ref="layered")
    text = dumps_plan(plan)
    assert len(text) / len(plan.schedule.tasks) < 400
    data = json.loads(text)
    assert set(data["schedule"]["tasks"]["cols"]["start_s"]) == {"f8"}
    assert plan_from_json(text) == plan


# ---- fingerprints ------------------------------------------------------------------------------
def test_check_fingerprints() -> None:
    prob, plan = toy_plan()
    check_fingerprints(plan, prob.graph, prob.machine, "toy/v1")
    check_fingerprints(plan, prob.graph.fingerprint(), prob.machine.fingerprint())
    other_graph = Graph.build("toy", prob.graph.tensors[:1] + prob.graph.tensors[2:3],
                              [prob.graph.ops[0]])
    with pytest.raises(InputError) as exc:
        check_fingerprints(plan, other_graph, file="p.json")
    assert exc.value.place == "fingerprints.graph" and exc.value.file == "p.json"
    assert "another graph" in exc.value.problem
    with pytest.raises(InputError) as exc:
        check_fingerprints(plan, machine=toy_machine(gpu_lanes=2))
    assert exc.value.place == "fingerprints.machine"
    with pytest.raises(InputError) as exc:
        check_fingerprints(plan, calibration_fp="calibrated:abc")
    assert exc.value.place == "fingerprints.calibration"
    with pytest.raises(InputError, match="another machine"):
        check_plan(plan, machine=toy_machine(shared_controller=True))


# ---- the search record -------------------------------------------------------------------------
def _search_result(prob: Problem) -> Any:
    """A real ``SearchResult`` of a hand-driven search (the contract the plan reads)."""
    from placewise.schedule import Objective
    from placewise.search.result import SearchResult, Tracker
    from placewise.search.space import Budget

    tr = Tracker(prob, Objective.LATENCY, Budget(10.0))
    for label, pl in (("single:cpu", Placement.uniform(prob.vertex_names, "cpu", DType.FP32)),
                      ("mixed", Placement.of(TOY_PLACEMENT)),
                      ("all gpu fp16", Placement.uniform(prob.vertex_names, "gpu", DType.FP16))):
        tr.evaluate(pl, label=label)
    assert tr.best is not None
    return SearchResult(
        best=tr.best, strategy="test", chosen=tr.best_label, objective=Objective.LATENCY,
        search_time_s=1.234567, candidates_evaluated=tr.evaluated, estimates=5,
        pruned=(("unsupported dtype", 3),), pruned_examples=(("unsupported dtype", ("a",)),),
        alternatives=tuple(tr.alternatives), baselines=(("single:cpu", 5e-5),
                                                       ("single:gpu", math.inf)),
        lower_bound_s=1e-6, dtypes=("fp32", "fp16"), seed=3, machine_devices=("cpu", "gpu"),
        cpsat_bound_s=2e-6, cpsat_status="FEASIBLE", gap=0.25, notes=("a note",))


def test_search_record_without_wall_clock() -> None:
    prob = toy_problem()
    res = _search_result(prob)
    plan = build_plan(prob, res, model_ref="toy.json")
    s = plan.search
    assert s is not None and plan.strategy == "test" and plan.seed == 3
    assert plan.placement_obj() == res.best.placement
    assert s.chosen == res.chosen and s.candidates_evaluated == 3 and s.estimates == 5
    assert s.pruned == {"unsupported dtype": 3}
    assert s.pruned_examples == {"unsupported dtype": ("a",)}
    assert [a.label for a in s.alternatives] == ["single:cpu", "mixed", "all gpu fp16"]
    for rec, alt in zip(s.alternatives, res.alternatives, strict=True):
        assert rec.objective_s == (alt.objective_s if math.isfinite(alt.objective_s) else None)
        assert rec.makespan_s == alt.makespan_s and rec.feasible == alt.feasible
    assert [(b.label, b.objective_s, b.feasible) for b in s.baselines] == [
        ("single:cpu", 5e-5, True), ("single:gpu", None, False)]
    assert s.lower_bound_s == 1e-6 and s.dtypes == ("fp32", "fp16")
    assert (s.cpsat_bound_s, s.cpsat_status, s.gap) == (2e-6, "FEASIBLE", 0.25)
    assert s.notes == ("a note",)
    text = dumps_plan(plan)
    assert "1.234567" not in text and "search_time" not in text
    assert plan_from_json(text) == plan
    assert dumps_plan(build_plan(toy_problem(), _search_result(toy_problem()),
                                 model_ref="toy.json")) == text
    out = render_explain(explain(plan))
    assert f"search: strategy test (chose {res.chosen}), 3 candidates evaluated, 5 " \
           "estimates; dtypes fp32, fp16" in out
    assert "pruned before evaluation: unsupported dtype 3" in out
    assert "CP-SAT: bound 2 us (FEASIBLE), gap 25.00%" in out
    assert "single:gpu  does not fit" in out and "note: a note" in out


def test_objective_defaults_to_the_search_objective() -> None:
    import dataclasses

    from placewise.schedule import Objective

    prob = toy_problem()
    res = dataclasses.replace(_search_result(prob), objective=Objective.THROUGHPUT)
    plan = build_plan(prob, res, model_ref="toy.json")
    assert plan.objective is Objective.THROUGHPUT
    assert plan.objective_value == pytest.approx(res.best.pipeline.period_s)
    assert build_plan(prob, res, model_ref="toy.json", objective="latency").objective \
        is Objective.LATENCY


def test_search_record_from_duck_typed_results() -> None:
    prob = toy_problem()
    ev = evaluate(prob, Placement.of(TOY_PLACEMENT))
    cpu = evaluate(prob, Placement.uniform(prob.vertex_names, "cpu", DType.FP32))

    @dataclass
    class Found:
        best: Evaluation
        strategy: str = "greedy"
        candidates: list[int] = field(default_factory=lambda: [1, 2])
        pruned: int = 4
        alternatives: list[tuple[str, float, bool]] = field(default_factory=list)
        baselines: dict[str, Any] = field(default_factory=dict)

    res = Found(ev, alternatives=[("x", 3e-5, True)], baselines={"single:cpu": cpu})
    s = build_plan(prob, res, model_ref="toy.json", seed=7).search
    assert s is not None and s.candidates_evaluated == 2 and s.pruned == {"total": 4}
    assert [(a.label, a.objective_s, a.feasible) for a in s.alternatives] == [("x", 3e-5, True)]
    assert s.baselines[0].objective_s == cpu.makespan_s
    assert s.baselines[0].period_s == cpu.pipeline.period_s


def test_throughput_objective_and_explicit_strategy() -> None:
    prob = toy_problem()
    ev = evaluate(prob, Placement.of(TOY_PLACEMENT))
    plan = build_plan(prob, ev, model_ref="toy.json", objective="throughput",
                      strategy="single:x")
    assert plan.objective.value == "throughput"
    assert plan.objective_value == pytest.approx(ev.pipeline.period_s)
    assert plan.strategy == "single:x" and plan.search is None


# ---- properties on random graphs and machines --------------------------------------------------
@st.composite
def _cases(draw: st.DrawFn) -> tuple[Problem, Placement]:
    g = draw(random_graphs(max_ops=8))
    m = toy_machine(shared_controller=draw(st.booleans()), gpu_lanes=draw(st.integers(1, 2)))
    prob = Problem(g, fuse(g) if draw(st.booleans()) else None, m, ToyCostModel(m))
    choices = [Assignment("cpu", DType.FP32), Assignment("gpu", DType.FP32),
               Assignment("gpu", DType.FP16)]
    pl = Placement.of({v: draw(st.sampled_from(choices)) for v in prob.vertex_names})
    return prob, pl


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_cases())
def test_random_plans_round_trip_pass_the_checker_and_respect_bounds(
        case: tuple[Problem, Placement]) -> None:
    prob, pl = case
    ev = evaluate(prob, pl)
    plan = build_plan(prob, ev, model_ref="random")
    text = dumps_plan(plan)
    back = plan_from_json(text)
    assert back == plan and dumps_plan(back) == text
    findings = check_plan(back, prob.graph, prob.machine)
    assert findings == [], [f.line() for f in findings]
    assert plan.lower_bound_s <= plan.makespan_s * (1 + 1e-9)
    assert plan.bounds.critical_path_s <= plan.makespan_s * (1 + 1e-9)
    if plan.any_placement_bound is not None:
        assert plan.any_placement_bound.value_s <= plan.makespan_s * (1 + 1e-9)
    for tiers in plan.memory.devices.values():
        for u in tiers.values():
            assert u.final_bytes == 0
    # explain and trace read nothing but the plan
    render_explain(explain(back))
    json.dumps(to_chrome_trace(back))


def test_plan_model_is_frozen() -> None:
    _, plan = toy_plan()
    with pytest.raises(Exception, match="frozen"):
        plan.makespan_s = 0.0
    assert isinstance(plan, Plan)
