"""External data (``placewise.graph.onnx_data``): written beside the file without changing the
model, read in place by sessions, shared once, and never leaving the model's folder."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from placewise.errors import ModelFormatError
from placewise.graph.onnx_data import (
    WeightsFile,
    check_model,
    external_locations,
    has_external_data,
    light_copy,
    ort_session,
    save_model,
)
from placewise.graph.onnx_import import read_onnx
from placewise.runtime.compile import compile_partitions, save_partitions
from placewise.runtime.opexec import load_source
from placewise.runtime.profiler import chain, profile_partition
from placewise.runtime.program import Partition
from placewise.units import DType

N = 160  # 160 x 160 fp32 = 100 KiB: above the importer's 64 KiB read-in size


def mlp(n: int = N, layers: int = 3, *, tied: bool = False) -> onnx.ModelProto:
    """x -> (MatMul w_i -> Relu) x layers; ``tied``: the last layer reuses w0."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(layers):
        w = "w0" if tied and i == layers - 1 else f"w{i}"
        if w != "w0" or i == 0:
            inits.append(numpy_helper.from_array(
                (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32), w))
        nodes += [helper.make_node("MatMul", [x, w], [f"h{i}"], name=f"mm{i}"),
                  helper.make_node("Relu", [f"h{i}"], [f"r{i}"], name=f"relu{i}")]
        x = f"r{i}"
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                       [2, n])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [2, n])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def with_data(folder: Path, model: onnx.ModelProto | None = None) -> Path:
    """``folder/mlp.onnx`` with its weights in ``mlp.onnx.data`` (as onnx writes them)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "mlp.onnx"
    onnx.save_model(model or mlp(), str(path), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="mlp.onnx.data", size_threshold=0)
    return path


def run(model: Any, x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort_session(model, so)
    return np.asarray(sess.run(None, {"x": x})[0])


X = np.random.default_rng(1).standard_normal((2, N)).astype(np.float32)


def test_save_model_writes_weights_beside_without_changing_the_model(tmp_path: Path) -> None:
    m = mlp()
    before = m.SerializeToString()
    assert save_model(m, tmp_path / "small.onnx") is None  # under the threshold: one file
    assert save_model(m, tmp_path / "big.onnx", external_data_bytes=1024) == "big.onnx.data"
    assert m.SerializeToString() == before  # nothing moved out of the model given
    assert sorted(os.listdir(tmp_path)) == ["big.onnx", "big.onnx.data", "small.onnx"]
    assert (tmp_path / "big.onnx").stat().st_size < 4096
    assert (tmp_path / "big.onnx.data").stat().st_size >= 3 * N * N * 4
    ref = run(m, X)
    for f in ("small.onnx", "big.onnx"):
        np.testing.assert_array_equal(run(str(tmp_path / f), X), ref)


def test_read_onnx_keeps_large_weights_outside_and_sessions_read_them_in_place(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = with_data(tmp_path / "src")
    model = read_onnx(path)
    assert has_external_data(model)
    assert list(external_locations(model)) == [str((tmp_path / "src" /
                                                     "mlp.onnx.data").resolve())]
    before = model.SerializeToString()
    monkeypatch.chdir(tmp_path)  # not the model's folder: the session must not care
    ref = run(str(path), X)
    np.testing.assert_array_equal(run(model, X), ref)
    check_model(model)
    assert model.SerializeToString() == before
    # written again: the weights follow into the new folder, nothing points back
    (tmp_path / "copy").mkdir()
    assert save_model(model, tmp_path / "copy" / "m.onnx") == "m.onnx.data"
    back = onnx.load(str(tmp_path / "copy" / "m.onnx"), load_external_data=False)
    assert list(external_locations(back)) == ["m.onnx.data"]
    np.testing.assert_array_equal(run(str(tmp_path / "copy" / "m.onnx"), X), ref)
    # an embedded copy (every external tensor read in)
    assert not has_external_data(light_copy(model))


def test_external_data_outside_the_folder_is_refused(tmp_path: Path) -> None:
    path = with_data(tmp_path / "a")
    m = onnx.load(str(path), load_external_data=False)
    for e in m.graph.initializer[1].external_data:
        if e.key == "location":
            e.value = "../b/mlp.onnx.data"
    (tmp_path / "b").mkdir()
    os.link(tmp_path / "a" / "mlp.onnx.data", tmp_path / "b" / "mlp.onnx.data")
    onnx.save_model(m, str(path))
    with pytest.raises(ModelFormatError) as e:
        read_onnx(path)
    assert e.value.file == str(path) and "w1" in str(e.value) and "escapes" in str(e.value)


def test_a_weights_file_holds_each_distinct_tensor_once(tmp_path: Path) -> None:
    a, b = mlp(tied=True), mlp(layers=2)  # b's w0, w1 are a's w0, w1
    with WeightsFile(tmp_path / "weights.bin") as w:
        onnx.save_model(light_copy(a, w.put), str(tmp_path / "a.onnx"))
        onnx.save_model(light_copy(b, w.put), str(tmp_path / "b.onnx"))
    assert w.tensors == 2 and w.references == 2 + 2  # a names w0 once (tied), b twice
    assert (tmp_path / "weights.bin").stat().st_size < 2 * N * N * 4 + 128
    np.testing.assert_array_equal(run(str(tmp_path / "a.onnx"), X), run(a, X))
    np.testing.assert_array_equal(run(str(tmp_path / "b.onnx"), X), run(b, X))


def test_saved_partitions_stay_usable(tmp_path: Path) -> None:
    """The profile bug: writing partitions with their weights outside must leave the
    compiled models whole, so that sessions are built from them afterwards."""
    path = with_data(tmp_path / "src")
    src = load_source(str(path))
    graph = src.graph
    assert graph is not None
    ops = list(graph.ops)
    half = len(ops) // 2
    mid_t = ops[half - 1].outputs[0]
    parts = [Partition("p0.cpu0", 0, "cpu0", DType.FP32, (), tuple(ops[:half]), ("x",),
                       (mid_t,)),
             Partition("p1.cpu1", 1, "cpu1", DType.FP32, (), tuple(ops[half:]), (mid_t,),
                       tuple(graph.outputs))]
    models = compile_partitions(src, parts, graph)
    before = {k: m.SerializeToString() for k, m in models.items()}
    paths = save_partitions(models, str(tmp_path), external_data_bytes=1024,
                            devices={"p0.cpu0": "cpu0", "p1.cpu1": "cpu0"})
    assert {k: m.SerializeToString() for k, m in models.items()} == before
    assert sorted(os.listdir(tmp_path)) == ["p0.cpu0.onnx", "p1.cpu1.onnx", "src",
                                            "weights.cpu0.bin"]
    vals = chain(models, parts, {"x": X})
    ref = run(str(path), X)
    np.testing.assert_array_equal(vals[graph.outputs[0]], ref)
    prof = profile_partition(models["p1.cpu1"], parts[1], vals, cores=[], repeats=2,
                             warmup=1)
    assert prof.runs == 2 and prof.nodes >= 1
    # the written files chain the same with plain onnxruntime
    so = ort.SessionOptions()
    mid = ort.InferenceSession(paths["p0.cpu0"], so).run(None, {"x": X})[0]
    out = ort.InferenceSession(paths["p1.cpu1"], so).run(
        None, {parts[1].inputs[0]: mid})[0]
    np.testing.assert_array_equal(out, ref)


def test_precision_evidence_of_a_model_with_external_data(tmp_path: Path) -> None:
    """Emulated lower precision reads the weights where they are and gives the numbers it
    gives for the same model in one file."""
    from placewise.precision.emulate import Emulator
    from placewise.runtime.opexec import request_inputs

    ext = load_source(str(with_data(tmp_path / "ext")))
    (tmp_path / "one").mkdir()
    onnx.save(mlp(), str(tmp_path / "one" / "mlp.onnx"))
    one = load_source(str(tmp_path / "one" / "mlp.onnx"))
    assert ext.graph is not None and one.graph is not None
    reqs = request_inputs(one, one.graph, 2, 0)
    lowered = {ext.graph.ops[2].name: DType.INT8, ext.graph.ops[4].name: DType.FP16}
    got = Emulator(ext, ext.graph).outputs(reqs, lowered)
    want = Emulator(one, one.graph).outputs(reqs, lowered)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g[0], w[0])
    assert not np.array_equal(got[0][0], Emulator(one, one.graph).outputs(reqs, {})[0][0])
