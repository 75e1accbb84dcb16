"""Task-graph JSON: loading, errors with places, agreement with the published schema,
and the synthetic generators."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from placewise.errors import GraphError, InputError, SpecError
from placewise.graph.count import count_graph
from placewise.graph.fuse import check_partition, fuse
from placewise.graph.ir import OpKind, Role
from placewise.graph.taskgraph import (
    GENERATORS,
    generate,
    load_taskgraph,
    parse_taskgraph,
    schema_path,
)
from placewise.units import DType
from tests.strategies import task_graph_dicts

GOOD: dict[str, Any] = {
    "schema_version": 1,
    "name": "demo",
    "tasks": [
        {"name": "load", "flops": 0, "bytes": 4096},
        {"name": "a", "flops": 2e9, "bytes": 1_000_000, "dtype": "fp16",
         "times_s": {"gpu0": 0.001, "cpu": 0.02}, "scratch_bytes": 512},
        {"name": "b", "flops": 1e9},
        {"name": "join", "flops": 5}
    ],
    "edges": [
        {"src": "load", "dst": "a", "bytes": 4096},
        {"src": "load", "dst": "b", "bytes": 2048, "name": "half"},
        {"src": "a", "dst": "join", "bytes": 100},
        {"src": "b", "dst": "join", "bytes": 1e2},
    ],
    "inputs": [{"dst": "load", "bytes": 4096}],
    "outputs": [{"src": "a", "bytes": 16, "name": "a_result"}],
}


def test_good_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "demo.json"
    path.write_text(json.dumps(GOOD))
    g = load_taskgraph(path)
    assert g.name == "demo"
    assert [o.name for o in g.ops] == ["load", "a", "b", "join"]
    assert all(o.kind is OpKind.TASK for o in g.ops)
    a = g.op("a")
    assert a.hint is not None
    assert a.hint.flops == 2e9 and a.hint.bytes_moved == 1_000_000
    assert a.hint.time_on("gpu0") == 0.001 and a.hint.time_on("tpu") is None
    assert a.hint.device_times_s == (("cpu", 0.02), ("gpu0", 0.001))
    assert a.scratch_bytes == 512 and a.attrs["dtype"] == "fp16"
    assert g.op("b").attrs["dtype"] == "fp32"
    assert "tasks[1]" in a.where()
    # one uint8 tensor per edge, produced by src and consumed by dst
    e = g.tensor("load->a")
    assert e.shape == (4096,) and e.dtype is DType.UINT8 and e.nbytes == 4096
    assert g.producer("half") is g.op("load") and g.consumers("half") == (g.op("b"),)
    assert g.tensor("b->join").nbytes == 100
    # inputs, listed outputs, automatic 0-byte output of the sink
    assert g.inputs == ("in:load",) and g.tensor("in:load").role is Role.INPUT
    assert g.outputs == ("a_result", "join:out")
    assert g.tensor("join:out").nbytes == 0
    assert count_graph(g).flops == 2e9 + 1e9 + 5
    check_partition(g, fuse(g))


def test_defaults(tmp_path: Path) -> None:
    path = tmp_path / "mini.json"
    path.write_text('{"schema_version": 1, "tasks": [{"name": "only"}]}')
    g = load_taskgraph(path)
    assert g.name == "mini"
    op = g.op("only")
    assert op.hint is not None and op.hint.flops == 0 and op.hint.bytes_moved == 0
    assert g.outputs == ("only:out",) and g.inputs == ()


def mutate(path: str, value: Any) -> dict[str, Any]:
    """GOOD with the value at a dotted path ('edges.1.src') replaced (or deleted: ...)."""
    doc = copy.deepcopy(GOOD)
    keys = path.split(".")
    node: Any = doc
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node[k]
    last: Any = int(keys[-1]) if isinstance(node, list) else keys[-1]
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return doc


# (document, error type, place, words in the message, does the schema reject it too?)
BAD: list[tuple[str, dict[str, Any] | Any, type[InputError], str, str, bool]] = [
    ("unknown task", mutate("edges.3.src", "nope"), GraphError, "edges[3].src",
     "unknown task 'nope'", False),
    ("duplicate task", mutate("tasks.2.name", "a"), GraphError, "tasks[2].name",
     "used twice", False),
    ("duplicate edge", mutate("edges.1.name", "load->a"), GraphError, "edges[1].name",
     "used twice", False),
    ("self edge", mutate("edges.2.dst", "a"), GraphError, "edges[2]", "itself", False),
    ("negative flops", mutate("tasks.1.flops", -1), SpecError, "tasks[1].flops", ">= 0", True),
    ("negative bytes", mutate("edges.0.bytes", -5), SpecError, "edges[0].bytes", ">= 0", True),
    ("fractional bytes", mutate("edges.0.bytes", 1.5), SpecError, "edges[0].bytes",
     "integer", True),
    ("bytes as string", mutate("tasks.0.bytes", "4k"), SpecError, "tasks[0].bytes",
     "integer", True),
    ("bool flops", mutate("tasks.0.flops", True), SpecError, "tasks[0].flops", "number", True),
    ("negative time", mutate("tasks.1.times_s.cpu", -0.1), SpecError, "tasks[1].times_s.cpu",
     ">= 0", True),
    ("times not object", mutate("tasks.1.times_s", [1]), SpecError, "tasks[1].times_s",
     "object", True),
    ("bad dtype", mutate("tasks.1.dtype", "fp12"), SpecError, "tasks[1].dtype",
     "unknown dtype", True),
    ("unknown key", mutate("tasks.0.flop", 3), SpecError, "tasks[0].flop", "unknown key", True),
    ("unknown top key", mutate("task", []), SpecError, "task", "unknown key", True),
    ("missing edge bytes", mutate("edges.2.bytes", ...), SpecError, "edges[2]",
     "missing required key 'bytes'", True),
    ("missing tasks", mutate("tasks", ...), SpecError, "", "missing required key 'tasks'",
     True),
    ("empty tasks", {"schema_version": 1, "tasks": []}, SpecError, "tasks", "at least 1",
     True),
    ("tasks not array", mutate("tasks", {"a": 1}), SpecError, "tasks", "array", True),
    ("task not object", mutate("tasks.0", "load"), SpecError, "tasks[0]", "object", True),
    ("empty name", mutate("tasks.0.name", ""), SpecError, "tasks[0].name", "empty", True),
    ("name not string", mutate("tasks.0.name", 3), SpecError, "tasks[0].name", "string", True),
    ("version", mutate("schema_version", 2), SpecError, "schema_version", "version", True),
    ("not an object", [1, 2], SpecError, "", "object", True),
    ("input to unknown", mutate("inputs.0.dst", "zz"), GraphError, "inputs[0].dst",
     "unknown task", False),
    ("output from unknown", mutate("outputs.0.src", "zz"), GraphError, "outputs[0].src",
     "unknown task", False),
]


def with_cycle() -> dict[str, Any]:
    doc = copy.deepcopy(GOOD)
    doc["edges"].append({"src": "join", "dst": "load", "bytes": 1})
    return doc


BAD.append(("cycle", with_cycle(), GraphError, "op '", "cycle", False))


@pytest.mark.parametrize(("doc", "exc", "place", "words"),
                         [pytest.param(d, e, p, w, id=i) for i, d, e, p, w, _ in BAD])
def test_bad_documents_name_file_and_place(tmp_path: Path, doc: Any, exc: type[InputError],
                                           place: str, words: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(exc) as e:
        load_taskgraph(path)
    err = e.value
    assert err.file == str(path)
    assert (err.place or "").startswith(place) if place else not err.place
    assert words in err.problem
    assert str(err).startswith(str(path) + ":")


def test_invalid_json_and_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"schema_version": 1,\n "tasks": [}')
    with pytest.raises(SpecError, match="not valid JSON") as e:
        load_taskgraph(path)
    assert e.value.place == "line 2 column 12"
    path.write_text('{"schema_version": 1, "tasks": [{"name": "a", "flops": NaN}]}')
    with pytest.raises(SpecError, match="NaN"):
        load_taskgraph(path)
    with pytest.raises(InputError, match="cannot read"):
        load_taskgraph(tmp_path / "missing.json")
    with pytest.raises(SpecError, match="finite"):
        parse_taskgraph({"schema_version": 1, "tasks": [{"name": "a", "flops": float("inf")}]})


def test_auto_output_name_clash_is_reported() -> None:
    doc = {"schema_version": 1, "tasks": [{"name": "a"}, {"name": "b"}],
           "edges": [{"src": "a", "dst": "b", "bytes": 1, "name": "b:out"}]}
    with pytest.raises(GraphError, match="automatic 0-byte output") as e:
        parse_taskgraph(doc, file="x.json")
    assert e.value.place == "edges[0]"


# ---- the published schema agrees --------------------------------------------------------------


@pytest.fixture(scope="module")
def validator() -> Any:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(schema_path().read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_schema_accepts_the_good_document(validator: Any) -> None:
    assert list(validator.iter_errors(GOOD)) == []


@pytest.mark.parametrize(("doc", "schema_rejects"),
                         [pytest.param(d, s, id=i) for i, d, _, _, _, s in BAD])
def test_schema_agrees_on_bad_documents(validator: Any, doc: Any, schema_rejects: bool) -> None:
    # structural errors: both reject; graph errors (names, references, cycles): only placewise
    assert (not validator.is_valid(doc)) == schema_rejects
    with pytest.raises(InputError):
        parse_taskgraph(doc)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(task_graph_dicts())
def test_random_documents_load_and_validate(doc: dict[str, Any]) -> None:
    g = parse_taskgraph(doc)
    assert len(g.ops) == len(doc["tasks"])
    assert sum(1 for x in g.tensors if x.role is Role.ACTIVATION) == len(doc["edges"])
    try:
        import jsonschema
    except ImportError:
        return
    jsonschema.validate(doc, json.loads(schema_path().read_text()),
                        cls=jsonschema.Draft202012Validator)


# ---- generators ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", GENERATORS)
@pytest.mark.parametrize("n", [1, 2, 13, 200])
def test_generators_sizes_and_validity(kind: str, n: int) -> None:
    doc = generate(kind, n, seed=3)
    assert len(doc["tasks"]) == n
    json.dumps(doc)  # plain JSON types only
    g = parse_taskgraph(doc)
    assert len(g.ops) == n
    gc = count_graph(g)
    assert (gc.coverage == 1.0 and gc.flops > 0) or (kind == "transformer" and n == 1)


@pytest.mark.parametrize("kind", GENERATORS)
def test_generators_are_deterministic(kind: str) -> None:
    assert generate(kind, 300, seed=7) == generate(kind, 300, seed=7)
    assert generate(kind, 300, seed=7) != generate(kind, 300, seed=8)


def test_generated_documents_match_the_schema(validator: Any) -> None:
    for kind in GENERATORS:
        doc = generate(kind, 60, seed=1, device_flops_per_s={"cpu": 1e11, "gpu": 1e13})
        assert list(validator.iter_errors(doc)) == []


def test_chain_and_fork_join_shapes() -> None:
    chain = generate("chain", 5)
    assert [(e["src"], e["dst"]) for e in chain["edges"]] == [
        ("t0", "t1"), ("t1", "t2"), ("t2", "t3"), ("t3", "t4")]
    assert [i["dst"] for i in chain["inputs"]] == ["t0"]
    fj = generate("fork-join", 7)  # default: one fork, 5 parallel, one join
    edges = {(e["src"], e["dst"]) for e in fj["edges"]}
    assert edges == {("t0", f"t{i}") for i in range(1, 6)} | {(f"t{i}", "t6") for i in range(1, 6)}


def test_layered_in_degrees() -> None:
    doc = generate("layered", 400, seed=2, width=20, max_in_degree=3)
    preds: dict[int, set[int]] = {}
    for e in doc["edges"]:
        s, d = int(e["src"][1:]), int(e["dst"][1:])
        assert d // 20 == s // 20 + 1  # from the previous layer only
        preds.setdefault(d, set()).add(s)
    assert set(preds) == set(range(20, 400))
    assert all(1 <= len(p) <= 3 for p in preds.values())
    assert len(doc["inputs"]) == 20


def test_transformer_blocks() -> None:
    doc = generate("transformer", 1 + 12 * 2, seed=0, sigma=0.0, hidden=64, seq=16)
    names = [t["name"] for t in doc["tasks"]]
    assert names[:4] == ["embed", "L0.ln1", "L0.q", "L0.k"]
    assert names[-1] == "L1.add2"
    flops = {t["name"]: t["flops"] for t in doc["tasks"]}
    assert flops["L0.fc1"] == 8 * 16 * 64 * 64 == flops["L1.fc2"]
    assert flops["L0.q"] == 2 * 16 * 64 * 64
    g = parse_taskgraph(doc)
    assert g.outputs == ("L1.add2:out",)
    assert {o.name for o in g.predecessors(g.op("L1.add1"))} == {"L1.proj", "L0.add2"}


def test_device_times_and_bad_arguments() -> None:
    doc = generate("chain", 4, seed=0, sigma=0.0, mean_flops=1e9,
                   device_flops_per_s={"gpu": 1e12})
    for t in doc["tasks"]:
        assert 0 < t["times_s"]["gpu"] < 1e-2
    with pytest.raises(InputError, match="unknown task-graph kind"):
        generate("star", 3)
    with pytest.raises(InputError, match="positive"):
        generate("chain", 0)
    with pytest.raises(InputError, match="flops_per_s"):
        generate("chain", 3, device_flops_per_s={"gpu": 0})


def test_generators_scale_to_100k_tasks() -> None:
    for kind in GENERATORS:
        doc = generate(kind, 100_000, seed=1)
        assert len(doc["tasks"]) == 100_000
        assert len(doc["edges"]) >= 99_999


def test_large_generated_graph_loads() -> None:
    g = parse_taskgraph(generate("layered", 5_000, seed=4))
    assert len(g.ops) == 5_000
    assert len(fuse(g).regions) == 5_000
