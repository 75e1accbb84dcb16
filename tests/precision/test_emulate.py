"""precision.emulate: the fp32 reference, int8 against the runtime's real int8 partitions,
fp16/bf16 rounding, torch sources mapped op by op, and what cannot be lowered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from placewise.errors import InputError, UnsupportedError
from placewise.graph.ir import INT8_KINDS, Graph
from placewise.precision.emulate import CACHE_MAX_BYTES, SCHEMES, Emulator, scheme
from placewise.precision.metrics import quality_of
from placewise.precision.rewrite import chain, round_bf16
from placewise.runtime.compile import compile_partitions, quantize_dynamic_model
from placewise.runtime.opexec import (
    ModelSource,
    dequantize_int8,
    load_source,
    quantize_int8,
    request_inputs,
)
from placewise.runtime.program import Partition
from placewise.units import DType

_RNG = np.random.default_rng(0)
_W1 = _RNG.standard_normal((16, 8)).astype(np.float32)
_B1 = _RNG.standard_normal(8).astype(np.float32)
_W2 = _RNG.standard_normal((8, 8)).astype(np.float32)
_B2 = _RNG.standard_normal(8).astype(np.float32)


def _save(tmp: Path, name: str, nodes: list[Any], inputs: list[Any], outputs: list[Any],
          inits: list[Any]) -> str:
    model = helper.make_model(helper.make_graph(nodes, name, inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    path = str(tmp / f"{name}.onnx")
    onnx.save(onnx.shape_inference.infer_shapes(model), path)
    return path


@pytest.fixture(scope="module")
def onnx_src(tmp_path_factory: pytest.TempPathFactory) -> ModelSource:
    """relu -> matmul(W1) -> add(b1) -> gemm(W2^T, b2) -> tanh = y; relu -> matmul(W1) = z
    (W1 shared); relu x relu^T = s (two activations); ids + ids = k (int64)."""
    f32, i64 = TensorProto.FLOAT, TensorProto.INT64
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "W1"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "b1"], ["a"], name="add"),
             helper.make_node("Gemm", ["a", "W2", "b2"], ["gm"], name="gemm", transB=1),
             helper.make_node("Tanh", ["gm"], ["y"], name="tanh"),
             helper.make_node("MatMul", ["r", "W1"], ["z"], name="mm2"),
             helper.make_node("Transpose", ["r"], ["rt"], name="tr"),
             helper.make_node("MatMul", ["r", "rt"], ["s"], name="scores"),
             helper.make_node("Add", ["ids", "ids"], ["k"], name="iadd")]
    path = _save(tmp_path_factory.mktemp("emu"), "small", nodes,
                 [helper.make_tensor_value_info("x", f32, [4, 16]),
                  helper.make_tensor_value_info("ids", i64, [4])],
                 [helper.make_tensor_value_info(n, f32, None) for n in ("y", "z", "s")]
                 + [helper.make_tensor_value_info("k", i64, None)],
                 [numpy_helper.from_array(a, n) for a, n in
                  ((_W1, "W1"), (_B1, "b1"), (_W2, "W2"), (_B2, "b2"))])
    return load_source(path)


@pytest.fixture(scope="module")
def onnx_emu(onnx_src: ModelSource) -> Emulator:
    assert onnx_src.graph is not None
    return Emulator(onnx_src, onnx_src.graph)


def _op(g: Graph, output: str) -> str:
    op = g.producer(output)
    assert op is not None
    return op.name


def _reqs(src: ModelSource, n: int = 4) -> list[list[np.ndarray[Any, Any]]]:
    assert src.graph is not None
    return request_inputs(src, src.graph, n, 0)


def _around(g: Graph, name: str, dtype: DType) -> list[Partition]:
    """The graph cut into the ops before ``name``, ``name`` alone at ``dtype``, the rest."""
    k = [o.name for o in g.ops].index(name)
    groups = [g.ops[:k], g.ops[k:k + 1], g.ops[k + 1:]]
    parts = []
    for idx, ops in enumerate(groups):
        if not ops:
            continue
        mine = {o.name for o in ops}
        made = {t for o in ops for t in o.outputs}
        ins = list(dict.fromkeys(
            t for o in ops for t in o.inputs
            if t and t not in made and (t in g.inputs or g.producer(t) is not None)))
        later = {t for o in g.ops if o.name not in mine for t in o.inputs} | set(g.outputs)
        outs = [t for o in ops for t in o.outputs if t in later]
        parts.append(Partition(f"p{idx}", idx, "cpu", dtype if idx == 1 else DType.FP32,
                               tuple(mine), tuple(ops), tuple(ins), tuple(outs)))
    return parts


def _held(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """A float tensor through the executor's int8 representation (quantize, dequantize)."""
    if x.dtype != np.float32:
        return x
    q, scale = quantize_int8(torch.from_numpy(x))
    return dequantize_int8(q, scale).numpy()


def _run_partitions(models: dict[str, Any], parts: list[Partition], g: Graph,
                    req: list[np.ndarray[Any, Any]]) -> list[np.ndarray[Any, Any]]:
    """What the executor does: the partitions in order, boundary tensors handed over; an
    int8 partition's float inputs and outputs held in int8 (conversion tasks before it,
    its outputs quantized)."""
    env = dict(zip(g.inputs, req, strict=True))
    for p in parts:
        sess = ort.InferenceSession(models[p.name].SerializeToString(),
                                    providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        held = _held if p.dtype is DType.INT8 else (lambda x: x)
        outs = sess.run(names, {i.name: held(env[i.name]) for i in sess.get_inputs()})
        env.update(zip(names, (held(o) for o in outs), strict=True))
    return [env[o] for o in g.outputs]


def _int8_against_runtime(src: ModelSource, emu: Emulator, name: str) -> None:
    g = src.graph
    assert g is not None
    parts = _around(g, name, DType.INT8)
    models = compile_partitions(src, parts, g)
    assert any(n.op_type in ("MatMulInteger", "ConvInteger") for n in models["p1"].graph.node)
    reqs = _reqs(src)
    real = [_run_partitions(models, parts, g, r) for r in reqs]
    emulated = emu.outputs(reqs, {name: DType.INT8})
    ref = emu.outputs(reqs, {})
    assert quality_of(emulated, real, g)["rel_l2"] < 1e-5
    assert quality_of(emulated, ref, g)["rel_l2"] > 1e-4  # int8 is visible


# ---- ONNX sources --------------------------------------------------------------------------


def test_reference_is_onnxruntime_on_the_source(onnx_src: ModelSource,
                                                onnx_emu: Emulator) -> None:
    g = onnx_src.graph
    assert g is not None
    reqs = _reqs(onnx_src)
    sess = ort.InferenceSession(onnx_src.onnx_model.SerializeToString(),
                                providers=["CPUExecutionProvider"])
    plain = [sess.run(list(g.outputs), dict(zip(g.inputs, r, strict=True))) for r in reqs]
    got = onnx_emu.outputs(reqs, {})
    q = quality_of(got, plain, g)
    assert q["rel_l2"] < 1e-6 and q["max_abs"] < 1e-5
    same = onnx_emu.outputs(reqs, {_op(g, "r"): DType.FP32})  # fp32: unchanged
    assert all(np.array_equal(a, b) for ra, rb in zip(got, same, strict=True)
               for a, b in zip(ra, rb, strict=True))


@pytest.mark.parametrize("output", ["m", "gm"])
def test_int8_matmul_and_gemm_match_the_runtime_partition(onnx_src: ModelSource,
                                                          onnx_emu: Emulator,
                                                          output: str) -> None:
    assert onnx_src.graph is not None
    _int8_against_runtime(onnx_src, onnx_emu, _op(onnx_src.graph, output))


@pytest.mark.parametrize("output", ["m", "gm"])
def test_7bit_weights_where_the_integer_gemm_saturates(onnx_src: ModelSource,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       output: str) -> None:
    """Where ``int8_weights_reduced()`` (x86 without VNNI: the uint8 x int8 kernel adds
    product pairs in saturating int16), the runtime quantizes weights at 7 bits and the
    emulator models the same: they still agree, and the weights fit 7 bits."""
    import placewise.precision.rewrite as rewrite_mod
    import placewise.runtime.compile as compile_mod
    import placewise.runtime.quantize as quantize_mod

    monkeypatch.setattr(compile_mod, "int8_weights_reduced", lambda: True)  # the emulator's
    monkeypatch.setattr(quantize_mod, "int8_weights_reduced", lambda: True)  # the runtime's
    monkeypatch.setattr(rewrite_mod, "int8_weights_reduced", lambda: True)
    g = onnx_src.graph
    assert g is not None
    _int8_against_runtime(onnx_src, Emulator(onnx_src, g), _op(g, output))
    q = quantize_dynamic_model(onnx_src.onnx_model, "the test model")
    w8 = [numpy_helper.to_array(t) for t in q.graph.initializer
          if t.data_type == TensorProto.INT8 and t.dims]
    assert w8 and max(int(np.abs(w.astype(np.int32)).max()) for w in w8) <= 64


def test_the_integer_gemm_is_exact_unless_weights_are_reduced() -> None:
    """``int8_weights_reduced()`` is False only where onnxruntime's MatMulInteger adds
    full-range uint8 x int8 operands exactly; where it is True, 7-bit weights are exact."""
    from placewise.runtime.compile import int8_weights_reduced

    lo = -64 if int8_weights_reduced() else -128
    rng = np.random.default_rng(3)
    a = rng.integers(0, 256, (8, 256), dtype=np.uint8)
    b = rng.integers(lo, -lo, (256, 24)).astype(np.int8)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "B"], ["Y"])], "exact",
        [helper.make_tensor_value_info("A", TensorProto.UINT8, [8, 256]),
         helper.make_tensor_value_info("B", TensorProto.INT8, [256, 24])],
        [helper.make_tensor_value_info("Y", TensorProto.INT32, [8, 24])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"A": a, "B": b})[0]
    np.testing.assert_array_equal(got, a.astype(np.int32) @ b.astype(np.int32))


def test_fp16_rounds_inputs_and_outputs_only(onnx_src: ModelSource, onnx_emu: Emulator) -> None:
    g = onnx_src.graph
    assert g is not None
    reqs = _reqs(onnx_src)
    ref = onnx_emu.outputs(reqs, {})
    got = onnx_emu.outputs(reqs, {_op(g, "r"): DType.FP16})
    z = g.outputs.index("z")
    for req, r, y in zip(reqs, ref, got, strict=True):
        r16 = np.maximum(req[0].astype(np.float16).astype(np.float32), 0)
        np.testing.assert_allclose(y[z], r16 @ _W1, rtol=1e-5, atol=1e-5)
        assert not np.array_equal(y[z], r[z])
    q = quality_of(got, ref, g)
    assert 1e-6 < q["rel_l2"] < 1e-3
    bf = quality_of(onnx_emu.outputs(reqs, {_op(g, "r"): DType.BF16}), ref, g)
    assert q["rel_l2"] < bf["rel_l2"] < 1e-2  # bf16 keeps 8 bits, fp16 11


def test_a_shared_weight_is_lowered_for_its_op_only(onnx_src: ModelSource,
                                                    onnx_emu: Emulator) -> None:
    g = onnx_src.graph
    assert g is not None
    reqs = _reqs(onnx_src)
    ref = onnx_emu.outputs(reqs, {})
    for dtype in (DType.INT8, DType.FP16, DType.BF16):
        got = onnx_emu.outputs(reqs, {_op(g, "m"): dtype})
        for r, y in zip(ref, got, strict=True):
            assert np.array_equal(r[g.outputs.index("z")], y[g.outputs.index("z")])
            assert not np.array_equal(r[g.outputs.index("y")], y[g.outputs.index("y")])


def test_everything_lowered_at_once_runs(onnx_src: ModelSource, onnx_emu: Emulator) -> None:
    g = onnx_src.graph
    assert g is not None
    reqs = _reqs(onnx_src, 2)
    ref = onnx_emu.outputs(reqs, {})
    for dtype in (DType.INT8, DType.FP16, DType.BF16):
        lowered = {o.name: dtype for o in g.ops if onnx_emu.lowerable(o.name, dtype)}
        assert len(lowered) == (len(g.ops) - 2 if dtype is DType.INT8 else len(g.ops) - 1)
        first = onnx_emu.outputs(reqs, lowered)
        assert 0 < quality_of(first, ref, g)["rel_l2"] < 0.1
        again = onnx_emu.outputs(reqs, lowered)  # deterministic
        assert all(np.array_equal(a, b) for x, y in zip(first, again, strict=True)
                   for a, b in zip(x, y, strict=True))


def test_what_cannot_be_lowered_says_which_op(onnx_src: ModelSource,
                                              onnx_emu: Emulator) -> None:
    g = onnx_src.graph
    assert g is not None
    reqs = _reqs(onnx_src, 1)
    iadd, scores = _op(g, "k"), _op(g, "s")
    assert not onnx_emu.lowerable(iadd, DType.FP16)
    with pytest.raises(UnsupportedError, match=f"op {iadd!r}.*no fp32"):
        onnx_emu.outputs(reqs, {iadd: DType.FP16})
    assert onnx_emu.lowerable(scores, DType.FP16)
    assert not onnx_emu.lowerable(scores, DType.INT8)
    with pytest.raises(UnsupportedError, match=f"op {scores!r}.*two activations"):
        onnx_emu.outputs(reqs, {scores: DType.INT8})
    with pytest.raises(UnsupportedError, match="fp8_e4m3"):
        onnx_emu.outputs(reqs, {scores: DType.FP8_E4M3})
    with pytest.raises(InputError, match="no op named 'nope'"):
        onnx_emu.lowerable("nope", DType.FP16)
    with pytest.raises(InputError, match="no op named 'nope'"):
        onnx_emu.outputs(reqs, {"nope": DType.FP32})
    with pytest.raises(InputError, match="1 arrays"):
        onnx_emu.outputs([reqs[0][:1]], {})


def test_held_int8_is_the_executors_quantize_int8() -> None:
    xs = [_RNG.standard_normal((3, 50)).astype(np.float32) * 3, np.zeros((4,), np.float32),
          np.array([0.5, -2.5, 1e-30, 7.0], np.float32)]
    model = helper.make_model(helper.make_graph(
        chain("x", "y", "s8", "held"), "h",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]),
        opset_imports=[helper.make_opsetid("", 17)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for x in xs:
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], _held(x))


def test_bf16_rounding_is_onnxruntime_cast() -> None:
    x = np.concatenate([_RNG.standard_normal(4000) * 10.0 ** _RNG.integers(-30, 30, 4000),
                        [0.0, -0.0, np.inf, -np.inf, 3.4e38, 1e-40]]).astype(np.float32)
    nodes = [helper.make_node("Cast", ["x"], ["h"], to=TensorProto.BFLOAT16),
             helper.make_node("Cast", ["h"], ["y"], to=TensorProto.FLOAT)]
    model = helper.make_model(helper.make_graph(
        nodes, "c", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [x.size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [x.size])]),
        opset_imports=[helper.make_opsetid("", 17)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(round_bf16(x), sess.run(None, {"x": x})[0])
    assert np.isnan(round_bf16(np.array([np.nan], np.float32))).all()


def test_int8_partitions_quantize_contractions_only(tmp_path: Path) -> None:
    table = _RNG.standard_normal((10, 16)).astype(np.float32)
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], name="emb"),
             helper.make_node("MatMul", ["e", "W1"], ["y"], name="mm")]
    model = onnx.load(_save(tmp_path, "gm", nodes,
                            [helper.make_tensor_value_info("ids", TensorProto.INT64, [4])],
                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
                            [numpy_helper.from_array(table, "table"),
                             numpy_helper.from_array(_W1, "W1")]))
    q = quantize_dynamic_model(model, "test")
    kinds = [n.op_type for n in q.graph.node]
    assert "MatMulInteger" in kinds and "Gather" in kinds
    gather = next(n for n in q.graph.node if n.op_type == "Gather")
    assert gather.input[0] == "table"  # the table stays float


def test_schemes_are_described() -> None:
    assert set(SCHEMES) == {DType.INT8, DType.FP16, DType.BF16}
    assert "symmetric per tensor" in scheme(DType.INT8)
    assert "bf16" in scheme(DType.BF16) and "fp16" in scheme(DType.FP16)
    assert Emulator.SCHEMES is SCHEMES
    with pytest.raises(UnsupportedError, match="int4"):
        scheme(DType.INT4)


# ---- torch sources -------------------------------------------------------------------------

_ZOO = ["zoo:mlp?layers=2&hidden=16&in_features=8",
        "zoo:bert?layers=1&hidden=32&heads=2&seq=8&vocab=50",
        "zoo:resnet?blocks=2&width=4&image=8"]


@pytest.fixture(scope="module")
def zoo() -> dict[str, tuple[ModelSource, Emulator]]:
    out = {}
    for ref in _ZOO:
        src = load_source(ref)
        assert src.graph is not None
        out[ref] = (src, Emulator(src, src.graph))
    return out


@pytest.mark.parametrize("ref", _ZOO)
def test_torch_sources_map_every_op(zoo: dict[str, tuple[ModelSource, Emulator]],
                                    ref: str) -> None:
    src, emu = zoo[ref]
    g = src.graph
    assert g is not None
    for op in g.ops:
        floats = any(g.tensor(t).dtype is DType.FP32 for t in (*op.inputs, *op.outputs) if t)
        assert emu.lowerable(op.name, DType.FP16) == floats, emu.why_not(op.name, DType.FP16)
        if op.kind in INT8_KINDS:
            assert emu.lowerable(op.name, DType.INT8), emu.why_not(op.name, DType.INT8)
    reqs = _reqs(src, 2)
    ref_out = emu.outputs(reqs, {})
    module = src.exported_program.module()
    with torch.no_grad():
        own = [module(*[torch.from_numpy(a) for a in r]) for r in reqs]
    own_np = [[o.numpy()] if isinstance(o, torch.Tensor) else [t.numpy() for t in o]
              for o in own]
    assert quality_of(ref_out, own_np, g)["rel_l2"] < 5e-6
    for dtype in (DType.INT8, DType.BF16):
        lowered = {o.name: dtype for o in g.ops if emu.lowerable(o.name, dtype)}
        assert 0 < quality_of(emu.outputs(reqs, lowered), ref_out, g)["rel_l2"] < 0.2


def test_torch_conv_int8_matches_the_runtime_partition(
        zoo: dict[str, tuple[ModelSource, Emulator]]) -> None:
    src, emu = zoo[_ZOO[2]]
    assert src.graph is not None
    conv = [o.name for o in src.graph.ops if o.kind.value == "conv"][1]
    _int8_against_runtime(src, emu, conv)


def test_running_only_what_changed_equals_whole_runs(
        onnx_src: ModelSource, onnx_emu: Emulator,
        zoo: dict[str, tuple[ModelSource, Emulator]]) -> None:
    for src, emu in ((onnx_src, onnx_emu), zoo[_ZOO[1]]):
        g = src.graph
        assert g is not None
        reqs = _reqs(src, 2)
        cases = [{o.name: d} for d in (DType.INT8, DType.FP16) for o in g.ops
                 if emu.lowerable(o.name, d)]
        cases.append({o.name: DType.BF16 for o in g.ops[::3] if emu.lowerable(o.name, DType.BF16)})
        try:
            for lowered in cases:
                emu.cache_bytes = CACHE_MAX_BYTES
                part = emu.outputs(reqs, lowered)
                emu.cache_bytes = 0
                whole = emu.outputs(reqs, lowered)
                assert all(np.array_equal(a, b) for x, y in zip(part, whole, strict=True)
                           for a, b in zip(x, y, strict=True)), lowered
        finally:
            emu.cache_bytes = CACHE_MAX_BYTES
