"""Control flow in ONNX models: input values, If branches, Loop and Scan trip counts,
subgraph weights, and export of partitions that cut around subgraphs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from placewise.cost.roofline import RooflineModel
from placewise.errors import InputError
from placewise.export import export_plan
from placewise.graph.count import count_graph
from placewise.graph.ir import Graph, OpKind
from placewise.graph.load import load_model
from placewise.graph.onnx_import import load_onnx
from placewise.graph.summary import summarize
from placewise.hardware.load import load_machine
from placewise.runtime.compile import checker_text
from placewise.runtime.opexec import load_source
from placewise.units import DType
from tests.runtime.helpers import local_machine
from tests.test_cli import assert_bad_input, run
from tests.test_export import chain, plan_on, rel_l2

F = TensorProto.FLOAT


def _vi(name: str, dims: Sequence[int | str] | None, elem: int = F) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, dims)


def _save(path: Path, nodes: Sequence[onnx.NodeProto], inputs: Sequence[onnx.ValueInfoProto],
          outputs: Sequence[onnx.ValueInfoProto], inits: Sequence[onnx.TensorProto] = ()
          ) -> str:
    graph = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), list(inits))
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
              str(path))
    return str(path)


def _weight(name: str, n: int = 64, seed: int = 0) -> onnx.TensorProto:
    w = np.random.default_rng(seed).standard_normal((n, n)).astype(np.float32) * 0.1
    return numpy_helper.from_array(w, name)


def if_model(path: Path, *, weights: str = "branch") -> str:
    """x -> Relu -> a; If(c): then a @ W, else -a; -> Sigmoid. ``weights``: where W is
    written: ``branch`` (a then-branch initializer), ``constant`` (a Constant node in the
    branch), ``outer`` (a top-level initializer the branch reads)."""
    w = _weight("W")
    then_nodes = [helper.make_node("MatMul", ["a", "W"], ["t"])]
    then_inits: list[onnx.TensorProto] = []
    outer: list[onnx.TensorProto] = []
    if weights == "branch":
        then_inits.append(w)
    elif weights == "constant":
        then_nodes.insert(0, helper.make_node("Constant", [], ["W"], value=w))
    else:
        outer.append(w)
    then = helper.make_graph(then_nodes, "then", [], [_vi("t", [8, 64])], then_inits)
    other = helper.make_graph([helper.make_node("Neg", ["a"], ["e"])], "else", [],
                              [_vi("e", [8, 64])])
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other,
                              name="branch"),
             helper.make_node("Sigmoid", ["y"], ["z"], name="sigmoid")]
    return _save(path, nodes, [_vi("x", [8, 64]), _vi("c", [], TensorProto.BOOL)],
                 [_vi("z", [8, 64])], outer)


def loop_model(path: Path, *, trips: int | None, dynamic_cond: bool = False) -> str:
    """acc = x; repeat M times: acc = acc @ W + x. ``trips`` None: M is a graph input;
    ``dynamic_cond``: the body computes its own condition (the loop may end early)."""
    cond_node = (helper.make_node("Less", ["i", "limit"], ["cond_out"]) if dynamic_cond
                 else helper.make_node("Identity", ["cond_in"], ["cond_out"]))
    body = helper.make_graph(
        [cond_node, helper.make_node("MatMul", ["acc_in", "W"], ["mm"]),
         helper.make_node("Add", ["mm", "x"], ["acc_out"])], "body",
        [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL),
         _vi("acc_in", None)],
        [_vi("cond_out", [], TensorProto.BOOL), _vi("acc_out", None)])
    inits = [_weight("W", 32), numpy_helper.from_array(np.array(2, np.int64), "limit")]
    inputs = [_vi("x", [4, 32])]
    if trips is None:
        inputs.append(_vi("M", [], TensorProto.INT64))
    else:
        inits.append(numpy_helper.from_array(np.array(trips, np.int64), "M"))
    return _save(path, [helper.make_node("Loop", ["M", "", "x"], ["y"], body=body)],
                 inputs, [_vi("y", [4, 32])], inits)


def scan_model(path: Path) -> str:
    """A running sum over a [T, 4, 16] sequence, tanh of each step."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "xs"], ["s_out"]),
         helper.make_node("Tanh", ["s_out"], ["ys"])], "body",
        [_vi("s_in", [4, 16]), _vi("xs", [4, 16])], [_vi("s_out", [4, 16]), _vi("ys", [4, 16])])
    node = helper.make_node("Scan", ["s0", "seq"], ["sN", "ys_all"], body=body,
                            num_scan_inputs=1)
    return _save(path, [node], [_vi("s0", [4, 16]), _vi("seq", ["T", 4, 16])],
                 [_vi("sN", [4, 16]), _vi("ys_all", ["T", 4, 16])])


def _only(g: Graph, kind: OpKind) -> object:
    ops = [o for o in g.ops if o.kind is kind]
    assert len(ops) == 1, [o.kind for o in g.ops]
    return ops[0]


# ---- If -----------------------------------------------------------------------------------


def test_an_if_of_unknown_condition_costs_its_costlier_branch(tmp_path: Path) -> None:
    g = load_onnx(if_model(tmp_path / "if.onnx"))
    op = g.op("branch")
    assert op.kind is OpKind.IF and op.attrs["branch"] == "then"
    assert "W" in op.inputs and g.tensor("W").role.value == "param"  # weights once, as params
    counts = count_graph(g)
    assert counts.coverage == 1.0
    then_g = load_onnx(if_model(tmp_path / "if1.onnx"), values={"c": (1,)})
    else_g = load_onnx(if_model(tmp_path / "if0.onnx"), values={"c": (0,)})

    def branch_flops(gr: Graph) -> float:
        c = count_graph(gr)
        return sum(c.per_op[o.name].flops for o in gr.ops if o.name not in ("relu", "sigmoid"))

    assert counts.per_op["branch"].flops == branch_flops(then_g) == 2 * 8 * 64 * 64
    assert branch_flops(else_g) == 8 * 64
    m = load_machine("jetson-agx-orin")
    cost = RooflineModel(m).op_cost(g, op, "gpu", DType.FP32)
    # the interval covers both branches: down to the cheaper one's work
    assert cost.low_s < cost.total_s * op.attrs["low_share"] * 1.01
    assert op.attrs["low_share"] == pytest.approx(1 / 128)
    assert "costlier (then) branch" in dict(cost.assumptions)["control_flow"]
    notes = summarize(g)["control_flow"]
    assert len(notes) == 1 and "condition unknown" in notes[0]


def test_a_value_picks_the_branch_and_drops_the_other(tmp_path: Path) -> None:
    g = load_onnx(if_model(tmp_path / "if.onnx"), values={"c": (0,)})
    assert [o.kind for o in g.ops] == [OpKind.RELU, OpKind.NEG, OpKind.IDENTITY,
                                       OpKind.SIGMOID]
    assert g.inputs == ("x",) and "W" not in {t.name for t in g.tensors}
    assert g.record.values == ("c",) and g.record.inlined_ifs == 1
    g1 = load_onnx(if_model(tmp_path / "if1.onnx"), values={"c": (1,)})
    assert OpKind.MATMUL in {o.kind for o in g1.ops} and g1.param_bytes >= 64 * 64 * 4


@pytest.mark.parametrize("weights", ["constant", "outer"])
def test_subgraph_weights_count_once_however_they_are_written(tmp_path: Path,
                                                              weights: str) -> None:
    base = load_onnx(if_model(tmp_path / "b.onnx", weights="branch"))
    other = load_onnx(if_model(tmp_path / "o.onnx", weights=weights))
    assert other.param_bytes == base.param_bytes == 64 * 64 * 4
    assert count_graph(other).flops == count_graph(base).flops
    for value in (0, 1):  # the branch taken: the same whichever way the weights were written
        a = load_onnx(if_model(tmp_path / "b.onnx", weights="branch"), values={"c": (value,)})
        b = load_onnx(if_model(tmp_path / "o.onnx", weights=weights), values={"c": (value,)})
        assert a.param_bytes == b.param_bytes
        assert count_graph(a).flops == count_graph(b).flops


def test_nested_ifs_fold_once_the_outer_branch_is_inlined(tmp_path: Path) -> None:
    """The inner If tests the rank of a value only the outer branch makes: it folds after
    the outer one is inlined and its shapes are resolved."""
    inner_then = helper.make_graph([helper.make_node("Relu", ["a"], ["r"])], "it", [],
                                   [_vi("r", [8, 64])])
    inner_else = helper.make_graph([helper.make_node("Neg", ["a"], ["n"])], "ie", [],
                                   [_vi("n", [8, 64])])
    outer_then = helper.make_graph([
        helper.make_node("Shape", ["a"], ["s"]), helper.make_node("Size", ["s"], ["rank"]),
        helper.make_node("Equal", ["rank", "two"], ["is2"]),
        helper.make_node("If", ["is2"], ["t"], then_branch=inner_then, else_branch=inner_else)],
        "ot", [], [_vi("t", [8, 64])], [numpy_helper.from_array(np.array(2, np.int64), "two")])
    outer_else = helper.make_graph([helper.make_node("Identity", ["a"], ["e"])], "oe", [],
                                   [_vi("e", [8, 64])])
    path = _save(tmp_path / "nested.onnx",
                 [helper.make_node("Relu", ["x"], ["a"]),
                  helper.make_node("If", ["c"], ["y"], then_branch=outer_then,
                                   else_branch=outer_else)],
                 [_vi("x", [8, 64]), _vi("c", [], TensorProto.BOOL)], [_vi("y", [8, 64])])
    g = load_onnx(path, values={"c": (1,)})
    assert g.record.inlined_ifs == 2
    assert not any(o.kind is OpKind.IF for o in g.ops)
    assert [o.kind for o in g.ops].count(OpKind.RELU) == 2


# ---- Loop and Scan ------------------------------------------------------------------------


def test_loop_trip_counts_known_unknown_and_given(tmp_path: Path) -> None:
    body_flops = 2 * 4 * 32 * 32 + 4 * 32
    known = load_onnx(loop_model(tmp_path / "k.onnx", trips=5))
    op = _only(known, OpKind.LOOP)
    assert op.attrs["trips"] == 5 and op.attrs["trips_bound"] == "exact"  # type: ignore[attr-defined]
    assert count_graph(known).flops == 5 * body_flops
    unknown = load_onnx(loop_model(tmp_path / "u.onnx", trips=None))
    op = _only(unknown, OpKind.LOOP)
    assert op.attrs["trips_bound"] == "at least"  # type: ignore[attr-defined]
    assert count_graph(unknown).flops == body_flops
    assert "lower bound" in summarize(unknown)["control_flow"][0]
    given = load_onnx(loop_model(tmp_path / "u.onnx", trips=None), values={"M": (3,)})
    assert count_graph(given).flops == 3 * body_flops
    early = load_onnx(loop_model(tmp_path / "e.onnx", trips=7, dynamic_cond=True))
    op = _only(early, OpKind.LOOP)
    assert op.attrs["trips_bound"] == "at most"  # type: ignore[attr-defined]
    assert "upper bound" in summarize(early)["control_flow"][0]
    # launches: every kernel of the body, every iteration
    m = load_machine("jetson-agx-orin")
    k5 = dict(RooflineModel(m).op_cost(known, known.ops[0], "gpu", DType.FP32).assumptions)
    assert k5["kernels"] == 5 * 2


def test_scan_runs_once_per_step_of_its_axis(tmp_path: Path) -> None:
    path = scan_model(tmp_path / "scan.onnx")
    g = load_onnx(path, shapes={"seq": (10, 4, 16)})
    op = _only(g, OpKind.SCAN)
    assert op.attrs["trips"] == 10 and op.attrs["trips_bound"] == "exact"  # type: ignore[attr-defined]
    per_step = 4 * 16 * (1 + 4)  # add, tanh
    assert count_graph(g).flops == 10 * per_step


# ---- values: refusals ---------------------------------------------------------------------


def test_values_that_do_not_fit_are_refused(tmp_path: Path) -> None:
    path = if_model(tmp_path / "if.onnx")
    with pytest.raises(InputError, match="scalar but 2 values"):
        load_onnx(path, values={"c": (1, 0)})
    with pytest.raises(InputError, match="no input 'q'"):
        load_onnx(path, values={"q": (1,)})
    with pytest.raises(InputError, match=r"\.onnx models only"):
        load_model("zoo:mlp?layers=1", values={"x": (1,)})
    loop = loop_model(tmp_path / "u.onnx", trips=None)
    with pytest.raises(InputError, match="not integral"):
        load_onnx(loop, values={"M": (2.5,)})
    bad = run("inspect", path, "--value", "c=yes")
    assert_bad_input(bad, "--value c", "number")
    bad = run("inspect", path, "--value", "c")
    assert_bad_input(bad, "--value", "NAME=VALUE")


# ---- export -------------------------------------------------------------------------------


def test_export_cuts_around_an_if_that_reads_outer_values(tmp_path: Path) -> None:
    """The If reads ``a`` (made by Relu in another partition) and ``W`` (an outer
    initializer) only from inside its branch: both must reach its partition."""
    path = if_model(tmp_path / "if.onnx", weights="outer")
    src = load_source(path)
    assert src.graph is not None
    plan = plan_on(local_machine(), src, {"branch": ("cpu1", DType.FP32)},
                   ("cpu0", DType.FP32), path)
    out = tmp_path / "export"
    manifest = export_plan(plan, out, machine=local_machine())
    assert len(manifest.partitions) == 3
    whole = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal((8, 64)).astype(np.float32)
    for c in (True, False):
        cond = np.array(c)
        want = whole.run(None, {"x": x, "c": cond})[0]
        got = chain(out, {"x": x, "c": cond})["z"]
        assert rel_l2(got, want) <= 1e-6


def test_checker_messages_are_whole() -> None:
    node = helper.make_node("Relu", ["missing"], ["y"], name="r")
    graph = helper.make_graph([node], "g", [], [_vi("y", [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(onnx.checker.ValidationError) as info:
        onnx.checker.check_model(model, full_check=False)
    raw = str(info.value)
    text = checker_text(info.value)
    assert "\n" not in text and len(raw.splitlines()) > 1
    assert text.split()[-1] == raw.split()[-1]  # the sentence's end is kept


def test_plan_records_values_and_later_commands_reuse_them(tmp_path: Path) -> None:
    path = if_model(tmp_path / "if.onnx", weights="outer")
    plan_file = tmp_path / "plan.json"
    made = run("plan", path, "--hw", "jetson-agx-orin", "--value", "c=1", "--out",
               str(plan_file), "--time-limit", "30")
    assert made.returncode == 0, made.stderr
    import json

    assert json.loads(plan_file.read_text())["values"] == {"c": [1.0]}
    exported = run("export", str(plan_file), "--out", str(tmp_path / "ex"))
    assert exported.returncode == 0, exported.stderr
    x = np.random.default_rng(2).standard_normal((8, 64)).astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"x": x, "c": np.array(True)})[0]
    assert rel_l2(chain(tmp_path / "ex", {"x": x})["z"], want) <= 1e-6


def test_the_prepared_model_computes_what_the_file_does(tmp_path: Path) -> None:
    """Hoisting subgraph weights (an If branch's initializer, a Loop body's Constant) to the
    top graph keeps the model's outputs: the runtime runs the prepared model."""
    from placewise.graph.onnx_shapes import plain_session

    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Constant", [], ["k"], value=_weight("kv", 32, seed=3)),
         helper.make_node("MatMul", ["acc_in", "k"], ["mm"]),
         helper.make_node("Add", ["mm", "x"], ["acc_out"])], "body",
        [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL),
         _vi("acc_in", None)], [_vi("cond_out", [], TensorProto.BOOL), _vi("acc_out", None)])
    path = _save(tmp_path / "loop_const.onnx",
                 [helper.make_node("Loop", ["M", "", "x"], ["y"], body=body)],
                 [_vi("x", [4, 32]), _vi("M", [], TensorProto.INT64)], [_vi("y", [4, 32])])
    for file, feeds_extra in ((path, {"M": np.array(3, np.int64)}),
                              (if_model(tmp_path / "if.onnx"), {"c": np.array(True)})):
        src = load_source(file)
        x = np.random.default_rng(4).standard_normal(
            (8, 64) if "if" in file else (4, 32)).astype(np.float32)
        feeds = {"x": x, **feeds_extra}
        want = ort.InferenceSession(file, providers=["CPUExecutionProvider"]).run(None, feeds)
        prepared = src.onnx_model
        assert not any(n.op_type == "Constant" for sub in _subgraphs_of(prepared)
                       for n in sub.node)
        assert all(len(sub.initializer) == 0 for sub in _subgraphs_of(prepared))
        got = plain_session(prepared).run(None, feeds)
        assert rel_l2(got[0], want[0]) <= 1e-6


def _subgraphs_of(model: onnx.ModelProto) -> list[onnx.GraphProto]:
    return [a.g for n in model.graph.node for a in n.attribute if a.HasField("g")]
