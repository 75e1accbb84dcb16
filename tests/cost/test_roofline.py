"""The analytic cost model: each term behaves as documented."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placewise.cost.model import Bottleneck, Representation, Source, Term
from placewise.cost.roofline import (
    INTERVAL_COUNTED,
    RooflineModel,
    gemm_dims,
    region_internal_tensors,
    scaled_bytes,
)
from placewise.errors import UnsupportedError
from placewise.graph.ir import Attrs, Graph, Op, OpKind, Role, TaskHint, Tensor
from placewise.hardware.load import load_machine
from placewise.hardware.spec import Machine, list_presets
from placewise.units import DType, Layout

#: the built-in assumptions (the rules a spec without an efficiency block gets); the
#: preset's fitted block is tested in tests/cost/test_fitted_efficiency.py
H100 = load_machine("h100-sxm-server").without_efficiency()


def _t(name: str, shape: tuple[int, ...], role: Role = Role.ACTIVATION,
       dtype: DType = DType.FP32) -> Tensor:
    return Tensor(name, shape, dtype, role=role)


def matmul_graph(m: int, k: int, n: int) -> Graph:
    return Graph.build("mm", [_t("x", (m, k), Role.INPUT), _t("w", (k, n), Role.PARAM),
                              _t("y", (m, n), Role.OUTPUT)],
                       [Op("mm", OpKind.MATMUL, ("x", "w"), ("y",))])


def chain_graph() -> Graph:
    """x -> linear -> relu -> add(+x2) -> y: three kernels, two internal tensors."""
    tensors = [_t("x", (64, 256), Role.INPUT), _t("w", (512, 256), Role.PARAM),
               _t("x2", (64, 512), Role.INPUT), _t("h", (64, 512)), _t("r", (64, 512)),
               _t("y", (64, 512), Role.OUTPUT)]
    ops = [Op("lin", OpKind.LINEAR, ("x", "w"), ("h",)),
           Op("relu", OpKind.RELU, ("h",), ("r",)),
           Op("add", OpKind.ADD, ("r", "x2"), ("y",))]
    return Graph.build("chain", tensors, ops)


def test_fused_region_pays_one_launch_and_skips_internal_traffic() -> None:
    g = chain_graph()
    model = RooflineModel(H100)
    ops = list(g.ops)
    singles = [model.op_cost(g, op, "gpu0", DType.BF16) for op in ops]
    region = model.region_cost(g, ops, "gpu0", DType.BF16)
    launch = H100.device("gpu0").launch_overhead_s
    assert sum(c.term(Term.LAUNCH) for c in singles) == pytest.approx(3 * launch)
    assert region.term(Term.LAUNCH) == pytest.approx(launch)
    assert region_internal_tensors(g, ops) == {"h", "r"}
    # internal tensors h and r are neither written nor read again
    assert region.memory_bytes < sum(c.memory_bytes for c in singles)
    internal = 4 * DType.BF16.nbytes(64 * 512)  # h: write+read, r: write+read
    assert sum(c.memory_bytes for c in singles) - region.memory_bytes == \
        pytest.approx(internal, rel=0.01)
    assert region.total_s < sum(c.total_s for c in singles)


def test_int8_moves_a_quarter_of_fp32_bytes_and_int4_an_eighth() -> None:
    g = chain_graph()
    model = RooflineModel(H100)
    lin = g.op("lin")
    fp32 = model.op_cost(g, lin, "gpu0", DType.FP32)
    int8 = model.op_cost(g, lin, "gpu0", DType.INT8)
    assert fp32.memory_bytes == 4 * int8.memory_bytes
    assert dict(int8.assumptions)["peak_flops_per_s"] == H100.device("gpu0").peak(DType.INT8)
    assert scaled_bytes({DType.FP32: 800}, DType.INT4) == 100


def test_integer_index_bytes_do_not_shrink_with_precision() -> None:
    assert scaled_bytes(((DType.FP32, 400), (DType.INT64, 80)), DType.INT8) == 180


def test_conversion_is_a_kernel_with_a_buffer() -> None:
    model = RooflineModel(H100)
    t = _t("a", (1024, 1024))
    fp32, int8 = Representation(DType.FP32), Representation(DType.INT8)
    c = model.conversion_cost(t, fp32, int8, "gpu0")
    assert c.term(Term.LAUNCH) == pytest.approx(H100.device("gpu0").launch_overhead_s)
    assert c.term(Term.CONVERSION) > 0
    assert c.buffer_bytes == 1024 * 1024  # the int8 output
    assert c.low_s <= c.total_s <= c.high_s
    assert model.conversion_cost(t, fp32, fp32, "gpu0").total_s == 0
    # a layout change is a (slower) strided copy
    nchw = _t("b", (8, 64, 32, 32))
    lay = model.conversion_cost(nchw, Representation(DType.FP32, Layout.NCHW),
                                Representation(DType.FP32, Layout.NHWC), "gpu0")
    plain = model.conversion_cost(nchw, fp32, Representation(DType.FP16), "gpu0")
    assert lay.buffer_bytes == nchw.nbytes
    assert lay.term(Term.CONVERSION) > plain.term(Term.CONVERSION)


def test_transfer_is_bytes_over_bandwidth_plus_latency_plus_sync() -> None:
    model = RooflineModel(H100)
    t = _t("a", (1 << 20,))
    rep = Representation(DType.BF16)
    c = model.transfer_cost(t, rep, "gpu0", "gpu1")
    link = H100.route("gpu0", "gpu1")[0]
    nbytes = 2 * (1 << 20)
    assert c.term(Term.TRANSFER) == pytest.approx(nbytes / link.bandwidth_bytes_per_s +
                                                  link.latency_s)
    assert c.term(Term.SYNC) == pytest.approx(H100.device("gpu0").launch_overhead_s)
    assert c.bottleneck is Bottleneck.LINK
    assert c.memory_bytes == nbytes
    # int8 sends half of bf16's bytes
    assert model.transfer_cost(t, Representation(DType.INT8), "gpu0", "gpu1").memory_bytes \
        == nbytes // 2
    same = model.transfer_cost(t, rep, "gpu0", "gpu0")
    assert same.total_s == 0 and same.terms == ()


def test_multi_hop_transfer_pays_every_hop() -> None:
    model = RooflineModel(H100)
    t = _t("a", (1 << 16,))
    route = H100.route("cpu", "gpu1")
    c = model.transfer_cost(t, Representation(DType.FP32), "cpu", "gpu1")
    want = sum(t.nbytes / link.bandwidth_bytes_per_s + link.latency_s for link in route)
    assert c.term(Term.TRANSFER) == pytest.approx(want)


def test_wave_quantization_133_tiles_take_two_waves_on_132_sms() -> None:
    model = RooflineModel(H100)
    assert H100.device("gpu0").compute_units == 132
    # 12 x 11 = 132 output tiles of 128x128 vs 7 x 19 = 133 tiles, same K
    g132 = matmul_graph(128 * 12, 8192, 128 * 11)
    g133 = matmul_graph(128 * 7, 8192, 128 * 19)
    c132 = model.op_cost(g132, g132.ops[0], "gpu0", DType.BF16)
    c133 = model.op_cost(g133, g133.ops[0], "gpu0", DType.BF16)
    assert c132.bottleneck is Bottleneck.COMPUTE
    ratio = c133.term(Term.COMPUTE) / c132.term(Term.COMPUTE)
    assert 1.9 < ratio < 2.1  # one extra tile costs a whole second wave
    assert dict(c133.assumptions)["parallel_efficiency"] == pytest.approx(133 / 264)


def test_partial_tiles_and_small_k_lower_efficiency() -> None:
    model = RooflineModel(H100)
    big = matmul_graph(128 * 12, 4096, 128 * 11)  # 132 full tiles: one full wave
    ragged = matmul_graph(128 * 12 + 1, 4096, 128 * 11)  # a partial row of tiles
    small_k = matmul_graph(128 * 12, 16, 128 * 11)
    eff = {name: dict(model.op_cost(g, g.ops[0], "gpu0", DType.BF16).assumptions)["efficiency"]
           for name, g in (("big", big), ("ragged", ragged), ("small_k", small_k))}
    assert eff["ragged"] < 0.6 * eff["big"]
    assert eff["small_k"] < 0.25 * eff["big"]


def test_cpu_with_too_few_blocks_is_parallelism_bound() -> None:
    model = RooflineModel(H100)
    cores = H100.device("cpu").compute_units
    # 2 x (cores / 8) output blocks of 64x64: a quarter as many blocks as cores
    g = matmul_graph(128, 8192, 64 * (cores // 8))
    c = model.op_cost(g, g.ops[0], "cpu", DType.FP32)
    assert c.bottleneck is Bottleneck.PARALLELISM
    assert dict(c.assumptions)["parallel_efficiency"] == pytest.approx(0.25)


def test_memory_bound_elementwise_uses_bandwidth() -> None:
    model = RooflineModel(H100)
    n = 1 << 24
    g = Graph.build("r", [_t("x", (n,), Role.INPUT), _t("y", (n,), Role.OUTPUT)],
                    [Op("r", OpKind.RELU, ("x",), ("y",))])
    c = model.op_cost(g, g.ops[0], "gpu0", DType.FP32)
    assert c.bottleneck is Bottleneck.MEMORY
    a = dict(c.assumptions)
    bw = H100.device("gpu0").main_memory.bandwidth_bytes_per_s
    assert a["bytes"] == 8 * n
    assert c.term(Term.COMPUTE) + c.term(Term.MEMORY) == pytest.approx(
        8 * n / (bw * float(a["memory_fraction"])))


def test_irregular_ops_have_a_lower_bandwidth_ceiling() -> None:
    model = RooflineModel(H100)
    n = 1 << 22
    g = Graph.build("e", [_t("w", (n // 64, 64), Role.PARAM),
                          _t("i", (n // 64,), Role.INPUT, DType.INT64),
                          _t("y", (n // 64, 64), Role.OUTPUT),
                          _t("y2", (n // 64, 64), Role.OUTPUT)],
                    [Op("emb", OpKind.EMBEDDING, ("w", "i"), ("y",)),
                     Op("neg", OpKind.NEG, ("y",), ("y2",))])
    emb = dict(model.op_cost(g, g.op("emb"), "gpu0", DType.FP32).assumptions)
    neg = dict(model.op_cost(g, g.op("neg"), "gpu0", DType.FP32).assumptions)
    assert float(emb["memory_fraction"]) < float(neg["memory_fraction"])


def test_views_cost_nothing_not_even_a_launch() -> None:
    model = RooflineModel(H100)
    g = Graph.build("v", [_t("x", (4, 8), Role.INPUT), _t("y", (32,), Role.OUTPUT)],
                    [Op("v", OpKind.RESHAPE, ("x",), ("y",))])
    c = model.op_cost(g, g.ops[0], "gpu0", DType.FP32)
    assert c.total_s == 0 and c.terms == () and c.bottleneck is Bottleneck.NONE


def test_given_task_times_win() -> None:
    g = Graph.build("t", [_t("a", (4,), Role.INPUT), _t("b", (4,), Role.OUTPUT)],
                    [Op("t", OpKind.TASK, ("a",), ("b",),
                        hint=TaskHint(flops=1e9, bytes_moved=4096,
                                      device_times_s=(("gpu0", 0.25),)))])
    model = RooflineModel(H100)
    c = model.op_cost(g, g.ops[0], "gpu0", DType.FP32)
    assert c.source is Source.GIVEN and c.total_s == 0.25
    other = model.op_cost(g, g.ops[0], "gpu1", DType.FP32)
    assert other.source is Source.ROOFLINE and other.total_s > 0


def test_unsupported_dtype_and_kind_raise_naming_device_op_dtype() -> None:
    data = H100.model_dump(mode="json")
    for d in data["devices"]:
        if d["name"] == "gpu0":
            d["supported_dtypes"] = ["fp16", "bf16"]
            d["unsupported_kinds"] = ["topk"]
    m = Machine.model_validate(data)
    model = RooflineModel(m)
    g = matmul_graph(8, 8, 8)
    with pytest.raises(UnsupportedError, match=r"gpu0.*'mm'.*int8"):
        model.op_cost(g, g.ops[0], "gpu0", DType.INT8)
    g2 = Graph.build("k", [_t("x", (8, 8), Role.INPUT), _t("v", (8, 2), Role.OUTPUT),
                           _t("i", (8, 2), Role.OUTPUT, DType.INT64)],
                     [Op("tk", OpKind.TOPK, ("x",), ("v", "i"))])
    with pytest.raises(UnsupportedError, match="topk"):
        model.op_cost(g2, g2.ops[0], "gpu0", DType.FP16)
    with pytest.raises(UnsupportedError, match="no device"):
        model.op_cost(g, g.ops[0], "tpu9", DType.FP16)


def test_uncounted_kinds_get_a_wider_stated_interval() -> None:
    g = Graph.build("u", [_t("x", (1024,), Role.INPUT), _t("y", (1024,), Role.OUTPUT)],
                    [Op("u", OpKind.UNKNOWN, ("x",), ("y",))])
    c = RooflineModel(H100).op_cost(g, g.ops[0], "gpu0", DType.FP32)
    lo, hi = INTERVAL_COUNTED
    assert c.high_s / c.total_s > hi and c.low_s / c.total_s < lo
    assert "no counting rule" in str(dict(c.assumptions)["interval"])


def test_lstm_launches_one_kernel_per_step() -> None:
    seq, batch, inp, hid = 16, 2, 32, 64
    tensors = [_t("x", (seq, batch, inp), Role.INPUT), _t("W", (1, 4 * hid, inp), Role.PARAM),
               _t("R", (1, 4 * hid, hid), Role.PARAM), _t("y", (seq, 1, batch, hid),
                                                          Role.OUTPUT)]
    g = Graph.build("l", tensors, [Op("l", OpKind.LSTM, ("x", "W", "R"), ("y",),
                                      Attrs.of(hidden_size=hid))])
    dims = gemm_dims(g, g.ops[0])
    assert dims is not None and dims.steps == seq
    c = RooflineModel(H100).op_cost(g, g.ops[0], "gpu0", DType.FP32)
    assert c.term(Term.LAUNCH) == pytest.approx(seq * H100.device("gpu0").launch_overhead_s)


_KINDS = [OpKind.MATMUL, OpKind.RELU, OpKind.ADD, OpKind.SOFTMAX, OpKind.REDUCE_SUM,
          OpKind.TRANSPOSE, OpKind.GELU, OpKind.LAYER_NORM]


def _op_graph(kind: OpKind, m: int, n: int) -> Graph:
    if kind is OpKind.MATMUL:
        return matmul_graph(m, n, m)
    ins = [_t("x", (m, n), Role.INPUT)]
    names = ("x",)
    attrs: dict[str, object] = {}
    out = (m, n)
    if kind is OpKind.ADD:
        ins.append(_t("x2", (m, n), Role.INPUT))
        names = ("x", "x2")
    if kind is OpKind.REDUCE_SUM:
        attrs = {"axes": (1,), "keepdims": False}
        out = (m,)
    if kind is OpKind.TRANSPOSE:
        attrs = {"perm": (1, 0)}
        out = (n, m)
    if kind in (OpKind.SOFTMAX, OpKind.LAYER_NORM):
        attrs = {"axis": 1}
    return Graph.build("g", [*ins, _t("y", out, Role.OUTPUT)],
                       [Op("op", kind, names, ("y",), Attrs.of(attrs))])


@settings(max_examples=40, deadline=None)
@given(kind=st.sampled_from(_KINDS), m=st.integers(1, 3000), n=st.integers(1, 3000),
       preset=st.sampled_from(list_presets()), dtype=st.sampled_from([DType.FP32, DType.FP16,
                                                                       DType.INT8]))
def test_intervals_contain_their_centre(kind: OpKind, m: int, n: int, preset: str,
                                        dtype: DType) -> None:
    machine = load_machine(preset)
    model = RooflineModel(machine)
    g = _op_graph(kind, m, n)
    names = machine.device_names
    for dev in machine.devices:
        if dtype not in dev.dtypes or not dev.supports(kind):
            continue
        c = model.op_cost(g, g.ops[0], dev.name, dtype)
        assert c.low_s <= c.total_s <= c.high_s
        assert all(v >= 0 and math.isfinite(v) for _, v in c.terms)
        r = model.region_cost(g, list(g.ops), dev.name, dtype)
        assert r.low_s <= r.total_s <= r.high_s
        t = g.tensor("y")
        conv = model.conversion_cost(t, Representation(DType.FP32), Representation(dtype),
                                     dev.name)
        assert conv.low_s <= conv.total_s <= conv.high_s
        other = names[-1] if names[-1] != dev.name else names[0]
        tr = model.transfer_cost(t, Representation(dtype), dev.name, other)
        assert tr.low_s <= tr.total_s <= tr.high_s


def test_fingerprint_names_the_model() -> None:
    assert RooflineModel(H100).fingerprint() == "roofline/v1"


def test_region_of_given_times_costs_their_sum() -> None:
    """Given task times are exact and hold their own launch: two 100 us tasks fused on a
    GPU cost 200 us, not 200 us less a launch (issue 13); a task costed from its hint
    still pays one launch for the region."""
    x = _t("x", (4,), Role.INPUT)
    h = _t("h", (4,))
    y = _t("y", (4,), Role.OUTPUT)
    given = TaskHint(device_times_s=(("gpu0", 1e-4),))
    ops = [Op("a", OpKind.TASK, ("x",), ("h",), hint=given),
           Op("b", OpKind.TASK, ("h",), ("y",), hint=given)]
    g = Graph.build("g", [x, h, y], ops)
    model = RooflineModel(H100)
    r = model.region_cost(g, ops, "gpu0", DType.FP32)
    assert r.total_s == pytest.approx(2e-4, rel=1e-12)
    assert r.source is Source.GIVEN
    hinted = [Op("a", OpKind.TASK, ("x",), ("h",), hint=TaskHint(flops=1e9)),
              Op("b", OpKind.TASK, ("h",), ("y",), hint=TaskHint(flops=1e9))]
    g2 = Graph.build("g2", [x, h, y], hinted)
    one = model.op_cost(g2, hinted[0], "gpu0", DType.FP32)
    launch = one.term(Term.LAUNCH)
    assert launch > 0
    fused = model.region_cost(g2, hinted, "gpu0", DType.FP32)
    assert fused.total_s == pytest.approx(2 * one.total_s - launch, rel=1e-9)


ORIN = load_machine("jetson-agx-orin").without_efficiency()


def conv_graph(c_in: int, c_out: int, hw: int, group: int, k: int = 3) -> Graph:
    return Graph.build("conv", [_t("x", (1, c_in, hw, hw), Role.INPUT),
                                _t("w", (c_out, c_in // group, k, k), Role.PARAM),
                                _t("y", (1, c_out, hw, hw), Role.OUTPUT)],
                       [Op("c", OpKind.CONV, ("x", "w"), ("y",),
                           attrs={"group": group, "pads": (k // 2,) * 4})])


@pytest.mark.parametrize("device", ["gpu", "cpu"])
def test_depthwise_conv_is_memory_bound_on_its_bytes(device: str) -> None:
    """A 3x3 depthwise conv (K=9, N=1 per group) is a direct per-channel kernel: its time
    is its input, weight and output bytes at the bandwidth (GPU) or at most the assumed
    direct-kernel efficiency's compute (CPU) — not 128x128 GEMM tiles of one channel."""
    g = conv_graph(144, 144, 112, 144)
    c = RooflineModel(ORIN).op_cost(g, g.op("c"), device, DType.FP32)
    a = dict(c.assumptions)
    dev = ORIN.device(device)
    bytes_s = a["bytes"] / dev.main_memory.bandwidth_bytes_per_s
    flops_s = a["flops"] / dev.peak(DType.FP32)
    assert "direct kernel per channel group" in str(a["efficiency_rule"])
    # never faster than the bytes at full bandwidth nor than the flops at peak, and within
    # the stated assumptions of both (bandwidth fraction >= 0.6, efficiency >= 0.25)
    assert max(bytes_s, flops_s) < c.total_s <= max(bytes_s / 0.6, flops_s / 0.25) \
        + dev.launch_overhead_s
    if device == "gpu":  # 32.5 MFLOP on 5.3 TFLOP/s: the bytes dominate
        assert c.bottleneck is Bottleneck.MEMORY
        assert c.total_s < 150e-6  # the tiled-GEMM rule predicted 7.9 ms


def test_grouped_conv_takes_the_better_of_gemm_and_direct() -> None:
    """Wide groups (ResNeXt-like, 64 channels per group) keep the tiled GEMM when it is
    faster; a dense conv is unchanged by the grouped rule."""
    model = RooflineModel(ORIN)
    wide = conv_graph(512, 512, 28, 8)
    c = model.op_cost(wide, wide.op("c"), "gpu", DType.FP16)
    assert "efficiency_rule" not in dict(c.assumptions)
    assert dict(c.assumptions)["efficiency"] > 0.25
    dense = conv_graph(64, 64, 56, 1)
    d = model.op_cost(dense, dense.op("c"), "gpu", DType.FP16)
    assert "efficiency_rule" not in dict(d.assumptions)
    # a depthwise conv is at least as fast per byte as the dense conv of the same tensors
    dw = conv_graph(64, 64, 56, 64)
    e = model.op_cost(dw, dw.op("c"), "gpu", DType.FP16)
    assert e.total_s < d.total_s
