"""Valid ONNX files the importer used to refuse or misread (issue 24): old opsets upgraded on
import, ceil_mode pooling, quantized and contrib ops counted as what they compute, free and
unnamed dims, and first-contact errors that name what to do. Shapes are checked against
onnxruntime, FLOPs against hand formulas."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from placewise.errors import ModelFormatError
from placewise.graph.count import count_graph, count_op
from placewise.graph.onnx_import import load_onnx
from tests.test_cli import assert_bad_input, run

F = TensorProto.FLOAT


def _vi(name: str, dims: Sequence[int | str] | None, elem: int = F) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, dims)


def _save(path: Path, nodes: Sequence[onnx.NodeProto], inputs: Sequence[onnx.ValueInfoProto],
          outputs: Sequence[onnx.ValueInfoProto], inits: Sequence[onnx.TensorProto] = (), *,
          opset: int = 17, extra: Sequence[onnx.OperatorSetIdProto] = (),
          ir_version: int = 8) -> str:
    graph = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), *extra])
    model.ir_version = ir_version
    onnx.save(model, str(path))
    return str(path)


def _ort_outputs(path: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    from placewise.onnxrt import new_session

    sess = new_session(path)
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds), strict=True))


# ---- 1. opsets below 13 are upgraded --------------------------------------------------------


def _opset11(tmp_path: Path) -> str:
    nodes = [helper.make_node("Squeeze", ["x"], ["s"], axes=[0], name="sq"),
             helper.make_node("ReduceSum", ["s"], ["r"], axes=[1], keepdims=1, name="rs"),
             helper.make_node("Softmax", ["r"], ["y"], axis=1, name="sm")]
    return _save(tmp_path / "o11.onnx", nodes, [_vi("x", [1, 3, 4, 5])], [_vi("y", None)],
                 opset=11, ir_version=6)


def test_old_opset_is_upgraded_and_recorded(tmp_path: Path) -> None:
    path = _opset11(tmp_path)
    g = load_onnx(path)
    assert g.record.upgraded_from_opset == 11
    want = _ort_outputs(path, {"x": np.ones((1, 3, 4, 5), np.float32)})["y"]
    assert g.tensor("y").shape == want.shape == (3, 1, 5)
    names = {o.name for o in g.ops}
    assert {"sq", "rs", "sm"} <= names  # the converter's rewritten nodes keep their names
    assert count_graph(g).coverage == 1.0
    proc = run("inspect", path)
    assert proc.returncode == 0, proc.stderr
    assert "upgraded from opset 11" in proc.stdout
    data = json.loads(run("inspect", path, "--json").stdout)
    assert data["upgraded_from_opset"] == 11


def test_current_opset_is_not_upgraded(tmp_path: Path) -> None:
    path = _save(tmp_path / "r.onnx", [helper.make_node("Relu", ["x"], ["y"])],
                 [_vi("x", [2])], [_vi("y", [2])], opset=13)
    assert load_onnx(path).record.upgraded_from_opset == 0


def test_failed_upgrade_names_file_and_node(tmp_path: Path) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r0"),
             helper.make_node("NoSuchOp", ["a"], ["y"], name="mystery")]
    path = _save(tmp_path / "bad.onnx", nodes, [_vi("x", [2])], [_vi("y", None)], opset=11,
                 ir_version=6)
    with pytest.raises(ModelFormatError, match="could not be upgraded") as e:
        load_onnx(path)
    assert e.value.file == path and "'mystery'" in str(e.value.place)
    assert_bad_input(run("inspect", path), path, "mystery", "opset 11")


# ---- 2. ceil_mode pooling ------------------------------------------------------------------


@pytest.mark.parametrize("op_type", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize(("size", "k", "s", "pad"), [(5, 2, 2, 0), (5, 2, 2, 1), (6, 3, 2, 1),
                                                      (7, 3, 2, 0), (112, 3, 2, 0)])
def test_ceil_mode_pool_shapes_match_onnxruntime(tmp_path: Path, op_type: str, size: int,
                                                  k: int, s: int, pad: int) -> None:
    node = helper.make_node(op_type, ["x"], ["p"], kernel_shape=[k, k], strides=[s, s],
                            pads=[pad] * 4, ceil_mode=1, name="pool")
    relu = helper.make_node("Relu", ["p"], ["y"], name="after")
    path = _save(tmp_path / "pool.onnx", [node, relu], [_vi("x", [1, 2, size, size])],
                 [_vi("y", None)])
    want = _ort_outputs(path, {"x": np.zeros((1, 2, size, size), np.float32)})["y"].shape
    g = load_onnx(path)
    assert g.tensor("p").shape == g.tensor("y").shape == want
    c = count_op(g, g.op("pool"))
    assert c.flops == np.prod(want) * k * k  # kernel volume per output element
    assert count_graph(g).coverage == 1.0


# ---- 7. onnxruntime's own log lines never reach stderr --------------------------------------


def test_onnxruntime_log_lines_never_leak(tmp_path: Path) -> None:
    # folding the constant Reshape fails inside onnxruntime, which logs an error in colour
    nodes = [helper.make_node("Reshape", ["c", "s"], ["r"], name="bad_reshape"),
             helper.make_node("Add", ["r", "x"], ["y"], name="add")]
    inits = [numpy_helper.from_array(np.ones((2, 4), np.float32), "c"),
             numpy_helper.from_array(np.array([3, 3], np.int64), "s")]
    path = _save(tmp_path / "noisy.onnx", nodes, [_vi("x", [3, 3])], [_vi("y", None)], inits)
    proc = run("inspect", path)
    assert "\x1b" not in proc.stderr and "onnxruntime" not in proc.stderr, proc.stderr
    # and a session made directly through the helper stays quiet while running the same
    # failing kernel
    import subprocess
    import sys

    code = ("import numpy as np, onnx\n"
            "from placewise.onnxrt import new_session\n"
            f"m = onnx.load({path!r})\n"
            "del m.graph.initializer[:]\n"
            "m.graph.input.extend([onnx.helper.make_tensor_value_info('c', 1, [2, 4]),"
            " onnx.helper.make_tensor_value_info('s', 7, [2])])\n"
            "s = new_session(m.SerializeToString())\n"
            "try:\n"
            "    s.run(None, {'c': np.ones((2, 4), np.float32), 's': np.array([3, 3]),"
            " 'x': np.ones((3, 3), np.float32)})\n"
            "except Exception:\n"
            "    print('raised')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.stdout.strip() == "raised" and "\x1b" not in done.stderr, done.stderr


def test_every_session_is_made_by_the_helper() -> None:
    src = Path(__file__).resolve().parents[2] / "src" / "placewise"
    makers = [str(p.relative_to(src)) for p in src.rglob("*.py")
              if "ort.InferenceSession(" in p.read_text() or
              "onnxruntime.InferenceSession(" in p.read_text()]
    assert makers == ["onnxrt.py"], makers
    assert ort.get_available_providers()


# ---- 4. free dims: paddle2onnx's -1, anonymous '?' -------------------------------------------


def _anonymous_dims(tmp_path: Path) -> str:
    return _save(tmp_path / "anon.onnx", [helper.make_node("Relu", ["x"], ["y"])],
                 [_vi("x", [-1, 3, "?", "?"])], [_vi("y", [-1, 3, "?", "?"])])


def test_minus_one_and_question_mark_dims_are_distinct_free_dims(tmp_path: Path) -> None:
    path = _anonymous_dims(tmp_path)
    g = load_onnx(path, shapes={"x": (1, 3, 8, 6)})  # two '?' bound to two sizes
    want = _ort_outputs(path, {"x": np.zeros((1, 3, 8, 6), np.float32)})["y"].shape
    assert g.tensor("x").shape == g.tensor("y").shape == want
    free = load_onnx(path, batch=2).tensor("x").shape
    assert free[:2] == (2, 3) and isinstance(free[2], str) and isinstance(free[3], str)
    assert free[2] != free[3]  # never one symbol
    assert run("inspect", path, "--shape", "x=1x3x8x6").returncode == 0


# ---- 5. a model whose dims stay unbound names the input dims to bind ------------------------


def _dynamic_detector(tmp_path: Path) -> str:
    """A YOLO-like export: dynamic height and width, value_info annotated with the
    exporter's nested size expressions."""
    nodes, prev, size = [], "images", "height"
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32) * 0.1, "w0")
    inits = [w]
    vis = []
    for i in range(6):
        cin = 3 if i == 0 else 4
        if i:
            inits.append(numpy_helper.from_array(np.ones((4, cin, 3, 3), np.float32), f"w{i}"))
        out = f"c{i}"
        nodes.append(helper.make_node("Conv", [prev, f"w{i}"], [out], kernel_shape=[3, 3],
                                      strides=[2, 2], pads=[1, 1, 1, 1], name=f"conv{i}"))
        size = f"floor(floor(({size} - 1)/2) + 1)"
        vis.append(_vi(out, [1, 4, size, size.replace("height", "width")]))
        prev = out
    path = tmp_path / "det.onnx"
    graph = helper.make_graph(nodes, "det", [_vi("images", [1, 3, "height", "width"])],
                              [_vi(prev, None)], inits, value_info=vis)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return str(path)


def test_unbound_dims_name_the_input_and_dims(tmp_path: Path) -> None:
    path = _dynamic_detector(tmp_path)
    proc = run("inspect", path)
    assert_bad_input(proc, path, "input 'images'", "dims 2 (height) and 3 (width)",
                     "--shape images=1x3x?x?")
    assert len(proc.stderr) < 300 and "floor" not in proc.stderr
    g = load_onnx(path, shapes={"images": (1, 3, 64, 48)})
    want = _ort_outputs(path, {"images": np.zeros((1, 3, 64, 48), np.float32)})["c5"].shape
    assert g.tensor("c5").shape == want == (1, 4, 1, 1)


# ---- 6. an input placewise cannot place ------------------------------------------------------


def test_string_input_is_refused_naming_it(tmp_path: Path) -> None:
    nodes = [helper.make_node("StringNormalizer", ["text"], ["norm"],
                              case_change_action="LOWER"),
             helper.make_node("Relu", ["x"], ["y"])]
    path = _save(tmp_path / "str.onnx", nodes,
                 [_vi("text", [1], TensorProto.STRING), _vi("x", [2])],
                 [_vi("norm", None, TensorProto.STRING), _vi("y", [2])])
    assert_bad_input(run("inspect", path), path, "input 'text'", "STRING")


def test_sequence_input_is_refused_naming_it(tmp_path: Path) -> None:
    seq = helper.make_value_info("seq", helper.make_sequence_type_proto(
        helper.make_tensor_type_proto(F, [2])))
    path = _save(tmp_path / "seq.onnx", [helper.make_node("Relu", ["x"], ["y"])],
                 [_vi("x", [2]), seq], [_vi("y", [2])])
    assert_bad_input(run("inspect", path, "--batch", "1"), path, "input 'seq'", "sequence")


# ---- 3. quantized, contrib and resampling ops counted as what they compute -------------------

MS = helper.make_opsetid("com.microsoft", 1)
U8, I8, I32 = TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32


def _init(name: str, arr: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(arr, name)


def _check_against_ort(path: str, feeds: dict[str, np.ndarray], op: str,
                       flops: float) -> None:
    """The graph's output shapes are onnxruntime's; ``op`` is counted with ``flops``."""
    got = _ort_outputs(path, feeds)
    g = load_onnx(path)
    for name, value in got.items():
        assert g.tensor(name).shape == value.shape, name
    assert count_graph(g).coverage == 1.0
    assert count_op(g, g.op(op)).flops == pytest.approx(flops)


def test_conv_integer_zero_points_are_not_a_bias(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], name="ci",
                            kernel_shape=[3, 3])
    inits = [_init("w", rng.integers(-5, 5, (4, 3, 3, 3)).astype(np.int8)),
             _init("xz", np.array(3, np.uint8)), _init("wz", np.array(0, np.int8))]
    path = _save(tmp_path / "ci.onnx", [node], [_vi("x", [1, 3, 8, 8], U8)],
                 [_vi("y", None, I32)], inits)
    _check_against_ort(path, {"x": np.ones((1, 3, 8, 8), np.uint8)}, "ci",
                       2 * (4 * 6 * 6) * (3 * 9))  # MACs only: no bias term
    g = load_onnx(path)
    c = count_op(g, g.op("ci"))
    assert c.bytes_read == 192 + 108 + 1 + 1 and c.bytes_written == 4 * 36 * 4


def test_matmul_integer_and_dynamic_quantize(tmp_path: Path) -> None:
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"], name="dq"),
             helper.make_node("MatMulInteger", ["q", "w", "z", "wz"], ["y"], name="mmi")]
    inits = [_init("w", np.ones((16, 8), np.int8)), _init("wz", np.array(0, np.int8))]
    path = _save(tmp_path / "mmi.onnx", nodes, [_vi("x", [4, 16])], [_vi("y", None, I32)],
                 inits)
    _check_against_ort(path, {"x": np.ones((4, 16), np.float32)}, "mmi", 2 * 4 * 8 * 16)
    g = load_onnx(path)
    assert count_op(g, g.op("dq")).flops == 64 * 4  # min, max, then quantize
    assert g.op("mmi").attrs["quant"] == "integer"


def test_qlinear_conv_and_matmul(tmp_path: Path) -> None:
    sc = [_init(f"{n}_s", np.array(0.1, np.float32)) for n in ("x", "w", "y", "b", "c")]
    zp = [_init(f"{n}_z", np.array(0, np.uint8 if n != "w" else np.int8))
          for n in ("x", "w", "y", "b", "c")]
    conv = helper.make_node("QLinearConv", ["x", "x_s", "x_z", "w", "w_s", "w_z", "y_s",
                                            "y_z", "bias"], ["y"], name="qc",
                            kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    flat = helper.make_node("Flatten", ["y"], ["f"], axis=1)
    mm = helper.make_node("QLinearMatMul", ["f", "y_s", "y_z", "b", "b_s", "w_z", "c_s",
                                            "c_z"], ["out"], name="qm")
    inits = [*sc, *zp, _init("w", np.ones((4, 2, 3, 3), np.int8)),
             _init("bias", np.zeros(4, np.int32)), _init("b", np.ones((4 * 25, 6), np.int8))]
    path = _save(tmp_path / "ql.onnx", [conv, flat, mm], [_vi("x", [1, 2, 5, 5], U8)],
                 [_vi("out", None, U8)], inits)
    outs = 4 * 25
    _check_against_ort(path, {"x": np.ones((1, 2, 5, 5), np.uint8)}, "qc",
                       2 * outs * 2 * 9 + outs + 2 * outs)  # MACs, bias, requantize
    g = load_onnx(path)
    assert count_op(g, g.op("qm")).flops == 2 * 1 * 6 * 100 + 2 * 6
    assert g.op("qc").inputs[:3] == ("x", "w", "bias")  # operands first


def test_resize_counted_by_mode(tmp_path: Path) -> None:
    for mode, per in (("nearest", 1), ("linear", 2 * 4), ("cubic", 2 * 16)):
        node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode=mode, name="rz")
        path = _save(tmp_path / f"rz_{mode}.onnx", [node], [_vi("x", [1, 3, 5, 7])],
                     [_vi("y", None)], [_init("scales", np.array([1, 1, 2, 2], np.float32))])
        _check_against_ort(path, {"x": np.ones((1, 3, 5, 7), np.float32)}, "rz",
                           1 * 3 * 10 * 14 * per)


def test_transformer_fused_ops(tmp_path: Path) -> None:
    from placewise.graph.count import ELEMENTWISE_FLOPS, SOFTMAX_FLOPS_PER_ELEMENT
    from placewise.graph.ir import OpKind

    b, s, d, heads = 2, 8, 16, 4
    rng = np.random.default_rng(1)
    f32 = np.float32
    nodes = [
        helper.make_node("Attention", ["x", "qkv_w", "qkv_b", "mask"], ["att"],
                         domain="com.microsoft", num_heads=heads, name="attn"),
        helper.make_node("SkipLayerNormalization", ["att", "x", "gamma", "beta"], ["ln"],
                         domain="com.microsoft", epsilon=1e-5, name="skipln"),
        helper.make_node("FusedMatMul", ["ln", "w1"], ["h"], domain="com.microsoft",
                         transB=1, name="fmm"),
        helper.make_node("BiasGelu", ["h", "b1"], ["g"], domain="com.microsoft", name="bg"),
        helper.make_node("MultiHeadAttention", ["g", "g", "g"], ["y"],
                         domain="com.microsoft", num_heads=heads, name="mha"),
    ]
    inits = [_init("qkv_w", rng.standard_normal((d, 3 * d)).astype(f32)),
             _init("qkv_b", np.zeros(3 * d, f32)), _init("gamma", np.ones(d, f32)),
             _init("beta", np.zeros(d, f32)),
             _init("w1", rng.standard_normal((32, d)).astype(f32)),
             _init("b1", np.zeros(32, f32))]
    path = _save(tmp_path / "bert.onnx", nodes,
                 [_vi("x", [b, s, d]), _vi("mask", [b, s], I32)], [_vi("y", None)], inits,
                 extra=[MS])
    feeds = {"x": rng.standard_normal((b, s, d)).astype(f32),
             "mask": np.ones((b, s), np.int32)}
    scores = b * heads * s * s
    att = (2 * b * s * d * 3 * d + b * s * 3 * d  # packed projection and bias
           + 2 * scores * (d // heads) + scores + scores  # QK^T, scale, mask
           + scores * SOFTMAX_FLOPS_PER_ELEMENT + 2 * scores * (d // heads))
    _check_against_ort(path, feeds, "attn", att)
    g = load_onnx(path)
    n = b * s * d
    assert count_op(g, g.op("skipln")).flops == n * (5 + 1 + 2)  # skip, norm, gamma, beta
    assert count_op(g, g.op("fmm")).flops == 2 * b * s * 32 * d  # B transposed
    assert count_op(g, g.op("bg")).flops == b * s * 32 * (ELEMENTWISE_FLOPS[OpKind.GELU] + 1)
    scores = b * heads * s * s
    mha = 2 * scores * 8 + scores + scores * SOFTMAX_FLOPS_PER_ELEMENT + 2 * scores * 8
    assert count_op(g, g.op("mha")).flops == mha


def test_embed_and_simplified_norms_and_gelu_variants(tmp_path: Path) -> None:
    from placewise.graph.count import ELEMENTWISE_FLOPS
    from placewise.graph.ir import OpKind

    b, s, h, vocab = 2, 6, 8, 20
    rng = np.random.default_rng(2)
    f32 = np.float32
    nodes = [
        helper.make_node("EmbedLayerNormalization",
                         ["ids", "seg", "word", "pos", "segtab", "gamma", "beta", "mask"],
                         ["emb", "mask_index"], domain="com.microsoft", epsilon=1e-5,
                         name="embed"),
        helper.make_node("FastGelu", ["emb", "fb"], ["fg"], domain="com.microsoft",
                         name="fastgelu"),
        helper.make_node("QuickGelu", ["fg"], ["qg"], domain="com.microsoft", alpha=1.702,
                         name="quickgelu"),
        helper.make_node("SkipSimplifiedLayerNormalization", ["qg", "emb", "gamma"], ["y"],
                         domain="com.microsoft", epsilon=1e-5, name="skiprms"),
    ]
    inits = [_init("word", rng.standard_normal((vocab, h)).astype(f32)),
             _init("pos", rng.standard_normal((16, h)).astype(f32)),
             _init("segtab", rng.standard_normal((2, h)).astype(f32)),
             _init("gamma", np.ones(h, f32)), _init("beta", np.zeros(h, f32)),
             _init("fb", np.zeros(h, f32))]
    i32 = TensorProto.INT32
    path = _save(tmp_path / "embed.onnx", nodes,
                 [_vi("ids", [b, s], i32), _vi("seg", [b, s], i32), _vi("mask", [b, s], i32)],
                 [_vi("y", None), _vi("mask_index", None, i32)], inits, extra=[MS])
    feeds = {"ids": rng.integers(0, vocab, (b, s)).astype(np.int32),
             "seg": np.zeros((b, s), np.int32), "mask": np.ones((b, s), np.int32)}
    n = b * s * h
    _check_against_ort(path, feeds, "embed", n * (2 + 5 + 2))  # sum 3 rows, norm, affine
    g = load_onnx(path)
    gelu = ELEMENTWISE_FLOPS[OpKind.GELU]
    assert count_op(g, g.op("fastgelu")).flops == n * (gelu + 1)  # + the bias
    assert count_op(g, g.op("quickgelu")).flops == n * (ELEMENTWISE_FLOPS[OpKind.SILU] + 1)
    assert count_op(g, g.op("skiprms")).flops == n * (3 + 1 + 1)  # norm, skip, gamma
    embed = count_op(g, g.op("embed"))
    # the gathered rows of the 3 tables (not the whole tables), 3 id tensors, gamma, beta
    assert embed.bytes_read == 3 * n * 4 + 3 * b * s * 4 + 2 * h * 4


def test_contrib_op_with_unbound_input_names_the_input(tmp_path: Path) -> None:
    nodes = [helper.make_node("SkipLayerNormalization", ["x", "x", "gamma", "beta"], ["ln"],
                              domain="com.microsoft", epsilon=1e-5, name="skipln"),
             helper.make_node("Relu", ["ln"], ["y"])]
    inits = [_init("gamma", np.ones(16, np.float32)), _init("beta", np.zeros(16, np.float32))]
    path = _save(tmp_path / "skip.onnx", nodes, [_vi("x", ["batch", "seq", 16])],
                 [_vi("y", None)], inits, extra=[MS])
    # ONNX inference cannot type the contrib op's output; onnxruntime's does, symbolically
    assert_bad_input(run("inspect", path, "--batch", "1"), path, "input 'x'",
                     "dim 1 (seq)", "--shape x=1x?x16")
    g = load_onnx(path, shapes={"x": (2, 8, 16)})
    assert g.tensor("y").shape == (2, 8, 16) and count_graph(g).coverage == 1.0


def test_qattention_counts_the_int8_projection_and_attention(tmp_path: Path) -> None:
    from placewise.graph.count import SOFTMAX_FLOPS_PER_ELEMENT

    b, s, d, heads = 2, 8, 16, 4
    rng = np.random.default_rng(3)
    node = helper.make_node("QAttention", ["x", "w", "bias", "xs", "ws", "mask", "xz", "wz"],
                            ["y"], domain="com.microsoft", num_heads=heads, name="qattn")
    inits = [_init("w", rng.integers(-3, 3, (d, 3 * d)).astype(np.int8)),
             _init("bias", np.zeros(3 * d, np.float32)),
             _init("xs", np.array(0.1, np.float32)), _init("ws", np.array(0.1, np.float32)),
             _init("xz", np.array(128, np.uint8)), _init("wz", np.array(0, np.int8))]
    path = _save(tmp_path / "qattn.onnx", [node],
                 [_vi("x", [b, s, d], U8), _vi("mask", [b, s], I32)], [_vi("y", None)], inits,
                 extra=[MS])
    scores = b * heads * s * s
    hd = d // heads
    want = (2 * b * s * d * 3 * d + b * s * 3 * d + 2 * scores * hd + 2 * scores
            + scores * SOFTMAX_FLOPS_PER_ELEMENT + 2 * scores * hd)
    _check_against_ort(path, {"x": np.full((b, s, d), 128, np.uint8),
                              "mask": np.ones((b, s), np.int32)}, "qattn", want)


def test_qdq_pair_counts_its_arithmetic_and_int8_bytes(tmp_path: Path) -> None:
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="quant"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dequant")]
    inits = [_init("s", np.array(0.05, np.float32)), _init("z", np.array(3, np.int8))]
    path = _save(tmp_path / "qdq.onnx", nodes, [_vi("x", [4, 16])], [_vi("y", None)], inits)
    _check_against_ort(path, {"x": np.ones((4, 16), np.float32)}, "quant", 2 * 64)
    g = load_onnx(path)
    q, dq = count_op(g, g.op("quant")), count_op(g, g.op("dequant"))
    assert (q.bytes_read, q.bytes_written) == (64 * 4 + 4 + 1, 64)  # int8 out
    assert (dq.flops, dq.bytes_read, dq.bytes_written) == (2 * 64, 64 + 4 + 1, 64 * 4)
