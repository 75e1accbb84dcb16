"""Real transformer exports (``tests/realmodels.py``) import cleanly: every op counted,
every shape concrete, shape arithmetic folded, the shape source recorded, and a refusal
that names only the inputs a user can bind."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from placewise.errors import GraphError
from placewise.graph import onnx_shapes
from placewise.graph.count import count_graph
from placewise.graph.ir import Graph, OpKind
from placewise.graph.load import load_model
from placewise.graph.onnx_import import load_onnx, read_onnx

pytest.importorskip("transformers")
onnx = pytest.importorskip("onnx")

from tests.realmodels import FORMATS, MODELS, export  # noqa: E402

EXPORTS = [(m, f) for m in MODELS for f in FORMATS]


@pytest.fixture(scope="session")
def real_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder per session for the exports (tests/test_real_models_cli.py uses the
    same one: ``export`` writes each file once)."""
    return tmp_path_factory.getbasetemp() / "realmodels"


@pytest.fixture(scope="session")
def graphs(real_folder: Path) -> dict[tuple[str, str], Graph]:
    return {(m, f): load_model(str(export(m, f, real_folder))) for m, f in EXPORTS}


@pytest.mark.parametrize("model,fmt", EXPORTS, ids=[f"{m}-{f}" for m, f in EXPORTS])
def test_every_export_imports_counted_and_concrete(graphs: dict[tuple[str, str], Graph],
                                                   model: str, fmt: str) -> None:
    g = graphs[(model, fmt)]
    g.check_concrete()
    counts = count_graph(g)
    assert counts.uncounted == [] and counts.coverage == 1.0
    assert counts.flops > 0
    assert not any(op.kind in (OpKind.UNKNOWN, OpKind.SHAPE) for op in g.ops)
    if fmt == "pt2":
        assert g.record.shape_source == "torch.export"
    else:  # the dynamo exporter folds for itself; the TorchScript one leaves unk__ dims
        want = onnx_shapes.SHAPES_ONNX if fmt == "dynamo" else onnx_shapes.SHAPES_SYMBOLIC
        assert g.record.shape_source == want, g.record


@pytest.mark.parametrize("model", MODELS)
def test_torchscript_exports_fold_their_shape_arithmetic(
        graphs: dict[tuple[str, str], Graph], real_folder: Path, model: str) -> None:
    path = export(model, "ts", real_folder)
    nodes = onnx.load(str(path)).graph.node
    work = [n for n in nodes if n.op_type != "Constant"]
    g = graphs[(model, "ts")]
    assert g.record.source_nodes == len(nodes)
    assert g.record.folded_nodes > 0
    assert len(g.ops) == len(work) - g.record.folded_nodes < len(work)
    # every Shape node of the file (and what only it fed) is a constant now, not an op
    shape_nodes = [n.name for n in work if n.op_type in ("Shape", "ConstantOfShape")]
    assert shape_nodes and not any(g.has_op(n) for n in shape_nodes)
    _, info = onnx_shapes.prepare_onnx(read_onnx(path), str(path))
    assert set(shape_nodes) <= set(info.folded) and len(info.folded) == g.record.folded_nodes
    op_sources = {op.provenance.source for op in g.ops}
    assert op_sources <= {n.name for n in work}


def test_folded_model_is_what_the_runtime_runs(real_folder: Path) -> None:
    """The runtime's ONNX source holds the prepared model: its nodes are the graph's ops
    (so partitions cut from it match), and it computes what the file computes."""
    import onnxruntime as ort

    from placewise.runtime.opexec import load_source, request_inputs

    path = export("bert", "ts", real_folder)
    src = load_source(str(path))
    assert src.graph is not None
    nodes = [n for n in src.onnx_model.graph.node if n.op_type != "Constant"]
    assert [n.name for n in nodes] == [op.name for op in src.graph.ops]
    feeds = dict(zip(src.graph.inputs, request_inputs(src, src.graph, 1, 3)[0], strict=True))
    assert feeds["input_ids"].max() < 128 and set(np.unique(feeds["attention_mask"])) <= {0, 1}
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    ran = [ort.InferenceSession(m.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]
           for m in (onnx.load(str(path)), src.onnx_model)]
    assert np.isfinite(ran[0]).all()
    np.testing.assert_allclose(ran[1], ran[0], rtol=1e-5, atol=1e-6)


def test_onnxruntime_run_resolves_what_symbolic_inference_would(
        real_folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = export("gpt2", "ts", real_folder)
    sym = load_onnx(path)

    def fail(model: object) -> object:
        raise RuntimeError("unavailable")

    monkeypatch.setattr(onnx_shapes, "_ort_symbolic", fail)
    run = load_onnx(path)
    assert run.record.shape_source == onnx_shapes.SHAPES_RUN
    assert "onnxruntime symbolic inference failed: RuntimeError: unavailable" in \
        run.record.shape_problem
    assert [(t.name, t.shape, t.dtype) for t in run.tensors] == \
        [(t.name, t.shape, t.dtype) for t in sym.tensors]


def _symbolic_copy(path: Path, out: Path) -> Path:
    m = onnx.load(str(path))
    for vi in m.graph.input:
        for d, name in zip(vi.type.tensor_type.shape.dim, ("batch", "seq"), strict=False):
            d.dim_param = name
    onnx.save(m, str(out))
    return out


def test_a_symbolic_input_is_the_one_thing_asked_for(real_folder: Path,
                                                     tmp_path: Path) -> None:
    path = _symbolic_copy(export("bert", "ts", real_folder), tmp_path / "dyn.onnx")
    g = load_onnx(path)
    with pytest.raises(GraphError) as e:
        g.check_concrete(file=str(path))
    msg = str(e.value)
    assert "input 'input_ids'" in msg and "--shape input_ids=?x?" in msg
    assert "unk__" not in msg and "Expand" not in msg
    bound = load_onnx(path, shapes={"input_ids": (4, 16), "attention_mask": (4, 16)})
    bound.check_concrete()
    assert count_graph(bound).coverage == 1.0
    assert bound.record.folded_nodes > 0
    assert load_onnx(path, batch=4).tensor("input_ids").shape == (4, "seq")


def test_unresolvable_shapes_name_the_value_and_the_reason(tmp_path: Path) -> None:
    """Concrete inputs, a value nothing can size: the refusal says why, and asks for no
    --shape (no dim of it belongs to an input)."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Frob", ["x"], ["y"], domain="com.example", name="frob")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("com.example", 1)])
    path = tmp_path / "frob.onnx"
    onnx.save(m, str(path))
    graph = load_onnx(path)
    with pytest.raises(GraphError) as e:
        graph.check_concrete(file=str(path))
    msg = str(e.value)
    assert "tensor 'y'" in msg and "although every input is concrete" in msg
    assert "onnxruntime run failed" in msg and "--shape" not in msg


def _shape_chain_model() -> object:
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "axes"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     ["N", 4, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("broken", ["none", "onnxruntime"])
def test_folding_evaluates_with_onnxruntime_else_onnx_reference(
        monkeypatch: pytest.MonkeyPatch, broken: str) -> None:
    from onnx import numpy_helper

    if broken == "onnxruntime":
        def fail(*args: object) -> object:
            raise RuntimeError("no onnxruntime")

        monkeypatch.setattr(onnx_shapes, "_run_fold", fail)
    model, info = onnx_shapes.prepare_onnx(_shape_chain_model(), "m.onnx", batch=3)
    assert [n.op_type for n in model.graph.node] == ["Reshape"]
    assert info.folded == ("Shape#0", "Gather#1", "Unsqueeze#2", "Concat#3")
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    assert set(inits) == {"target"}  # the constants only folded nodes read are dropped
    assert inits["target"].tolist() == [3, -1]
    # nothing folds while the batch is unbound: the Shape has no numbers to give
    _, unbound = onnx_shapes.prepare_onnx(_shape_chain_model(), "m.onnx")
    assert unbound.folded == ()
