"""Profiling for real on this machine (tiny models, few repeats) and the op runners."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from placewise.calibrate.profile import (
    _INT8_KINDS_VALUES,
    local_devices,
    measure,
    median_rel_ci,
    plan_jobs,
    profile_model,
    summarize_rounds,
    summarize_samples,
)
from placewise.cost.calibrated import CalibratedModel, load_calibration, op_key
from placewise.cost.model import Representation, Source
from placewise.errors import InputError, PlacewiseError, UnsupportedError
from placewise.graph.ir import OpKind
from placewise.hardware.spec import Machine
from placewise.runtime import opexec
from placewise.units import DType, Layout

CORES = sorted(os.sched_getaffinity(0))
C0, C1 = CORES[0], CORES[1 % len(CORES)]


def _dev(name: str, cores: list[int], dtypes: list[str], backend: str | None) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": name, "kind": "cpu", "model": f"test {name}",
        "peak_flops_per_s": {x: 5e10 for x in dtypes}, "peak_source": "test",
        "memory": [{"name": "dram", "capacity_bytes": 2**33, "bandwidth_bytes_per_s": 1e10,
                    "source": "test"}],
        "launch_overhead_s": 3e-6, "launch_source": "test", "compute_units": len(cores)}
    if backend is not None:
        d.update(cores=cores, backend=backend)
    return d


def machine() -> Machine:
    return Machine.model_validate({
        "name": "local", "tags": {"cpu_model": "test"},
        "devices": [_dev("cpu0", [C0], ["fp32"], "torch"),
                    _dev("cpu1", [C1], ["fp32", "int8"], "onnxruntime"),
                    _dev("remote", [0], ["fp32"], None)],
        "links": [{"name": "a", "endpoints": ["cpu0", "cpu1"], "bandwidth_bytes_per_s": 5e9,
                   "latency_s": 1e-5, "source": "test"},
                  {"name": "b", "endpoints": ["cpu0", "remote"], "bandwidth_bytes_per_s": 5e9,
                   "latency_s": 1e-5, "source": "test"}]})


TINY_MLP = "zoo:mlp?layers=1&hidden=16&in_features=8&out_features=4"
TINY_BERT = "zoo:bert?layers=1&hidden=16&heads=2&seq=8&vocab=50"


def test_profile_tiny_model_for_real(tmp_path: Path) -> None:
    m = machine()
    src = opexec.load_source(TINY_MLP, batch=2)
    graph = src.graph
    assert graph is not None
    seen: list[tuple[int, int]] = []
    cal = profile_model(graph, src, m, min_repeats=3, max_time_s=0.02, rounds=2, warmup_s=0.0,
                        progress=lambda done, total, what: seen.append((done, total)))
    assert seen and seen[-1][0] == seen[-1][1]
    assert {d.name for d in cal.devices} == {"cpu0", "cpu1"}  # "remote" is not local
    for dev in ("cpu0", "cpu1"):
        for op in graph.ops:
            key, _ = op_key(graph, op, DType.FP32)
            got = [x for x in cal.measurements if x.device == dev and x.key == key]
            assert len(got) == 1, (dev, op.name)
            x = got[0]
            assert x.p10_s <= x.median_s <= x.p90_s and x.n >= 3
            assert x.backend == "torch" and x.family == "torch"
    int8 = [x for x in cal.measurements if x.dtype == "int8" and not x.kind.startswith("conv")]
    assert int8 and all(x.device == "cpu1" and x.kind == "linear" and
                        x.backend == "onnxruntime" for x in int8)
    assert any(x.kind.startswith("convert:") for x in cal.measurements)
    for tag in ("cpu_model", "torch", "onnxruntime", "threads", "date", "cores"):
        assert cal.tags[tag]
    assert not cal.failures
    for rec in cal.devices:  # the executor's per-step overhead, measured per device
        d = rec.dispatch
        assert d.n > 0 and d.median_s > 0 and d.p10_s <= d.median_s <= d.p90_s
        assert "_step" in d.method
    path = cal.save(tmp_path / "cal.json")
    back = load_calibration(path)
    model = CalibratedModel(m, back)
    for op in graph.ops:
        c = model.op_cost(graph, op, "cpu1", DType.FP32)
        assert c.source is Source.PROFILED and c.low_s <= c.total_s <= c.high_s
        assert dict(c.assumptions)["dispatch_s"] == back.devices[1].dispatch.median_s
    lin = next(op for op in graph.ops if op.kind is OpKind.LINEAR)
    assert model.op_cost(graph, lin, "cpu1", DType.INT8).source is Source.PROFILED
    with pytest.raises(UnsupportedError):
        model.op_cost(graph, lin, "cpu0", DType.INT8)  # cpu0 has no int8


def test_a_worker_that_cannot_load_its_source_fails_naming_the_device() -> None:
    src = opexec.load_source(TINY_MLP, batch=1)
    assert src.graph is not None
    broken = opexec.ModelSource("zoo:no_such_model", src.format, src.graph,
                                exported_program=src.exported_program)
    with pytest.raises(PlacewiseError, match=r"device 'cpu0'.*no_such_model"):
        profile_model(src.graph, broken, machine(), devices=["cpu0"], min_repeats=1,
                      max_time_s=0.01, conversions=False)


def test_devices_must_be_local() -> None:
    m = machine()
    assert [d.name for d in local_devices(m)] == ["cpu0", "cpu1"]
    with pytest.raises(InputError, match="'remote' is not a local device"):
        local_devices(m, ["remote"])
    with pytest.raises(InputError, match="no device 'gpu0'"):
        local_devices(m, ["gpu0"])


def test_jobs_are_distinct_keys_and_int8_only_where_it_runs() -> None:
    src = opexec.load_source("zoo:mlp?layers=3&hidden=16&in_features=16&out_features=16",
                             batch=1, with_graph=True)
    graph = src.graph
    assert graph is not None
    m = machine()
    jobs, _ = plan_jobs(graph, local_devices(m))
    # four linears of the same shape [1,16]x[16,16] and three relus: one key each
    for dev in ("cpu0", "cpu1"):
        fp32 = [j for j in jobs if j.device == dev and j.dtype == "fp32"]
        assert sorted(j.kind for j in fp32) == ["linear", "relu"]
    int8 = [j for j in jobs if j.dtype == "int8"]
    assert [(j.device, j.kind) for j in int8] == [("cpu1", "linear")]
    assert set(_INT8_KINDS_VALUES) == {k.value for k in opexec.INT8_KINDS}


def test_sampling_statistics() -> None:
    assert median_rel_ci([1.0] * 30) == 0.0
    assert median_rel_ci([1.0, 2.0]) == float("inf")
    s = summarize_samples([1.0, 2.0, 3.0, 4.0, 100.0])
    assert s["median_s"] == 3.0 and s["p10_s"] <= s["median_s"] <= s["p90_s"]
    # the quietest round decides the median; the spread covers every sample
    r = summarize_rounds([[5.0, 5.2, 5.1], [1.0, 1.1, 1.0, 1.2], [9.0, 9.0, 9.5]])
    assert r["median_s"] == 1.05 and r["n"] == 10
    assert r["p10_s"] <= r["median_s"] <= r["p90_s"] and r["p90_s"] >= 9.0
    calls = []
    out = measure(lambda: calls.append(1), min_repeats=5, max_time_s=0.5,
                  target_rel_ci=1e9, warmup_s=0.0)
    assert out["n"] == 5  # a CI target that is always met stops at min_repeats
    assert len(calls) >= 7  # plus at least two warm-up calls


def test_fx_runners_run_every_op_at_its_shape() -> None:
    src = opexec.load_source(TINY_BERT, batch=2)
    graph = src.graph
    assert graph is not None
    prog = opexec.program_of(src)
    captured = prog.reference(list(src.example_inputs))
    for op in graph.ops:
        r = opexec.make_op_runner(src, prog, captured, op, DType.FP32, threads=1)
        out = r.run()
        outs = out if isinstance(out, list | tuple) else [out]
        for name, value in zip(op.outputs, outs, strict=False):
            assert tuple(value.shape) == graph.tensor(name).concrete_shape, op.name
        if op.kind is OpKind.LINEAR:
            q = opexec.make_op_runner(src, prog, captured, op, DType.INT8, threads=1)
            assert q.backend == "onnxruntime"
            assert tuple(q.run()[0].shape) == graph.tensor(op.outputs[0]).concrete_shape
        elif op.kind is not OpKind.MATMUL:
            with pytest.raises(UnsupportedError, match="int8"):
                opexec.make_op_runner(src, prog, captured, op, DType.INT8, threads=1)


def _onnx_model(path: Path) -> None:
    """Embedding -> MatMul (weight) -> Relu -> Reshape whose shape is computed from Shape:
    dynamic batch and shape plumbing, as exporters write it."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    table = numpy_helper.from_array(rng.standard_normal((20, 8)).astype(np.float32), "table")
    w = numpy_helper.from_array(rng.standard_normal((8, 6)).astype(np.float32), "w")
    minus1 = numpy_helper.from_array(np.array([-1], dtype=np.int64), "minus1")
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["emb"], name="emb"),
        helper.make_node("MatMul", ["emb", "w"], ["mm"], name="mm"),
        helper.make_node("Relu", ["mm"], ["r"], name="relu"),
        helper.make_node("Shape", ["ids"], ["s"], name="shape"),
        helper.make_node("Slice", ["s", "zero", "one"], ["b"], name="slice"),
        helper.make_node("Concat", ["b", "minus1"], ["newshape"], name="concat", axis=0),
        helper.make_node("Reshape", ["r", "newshape"], ["y"], name="reshape"),
        helper.make_node("Constant", [], ["zero"], name="c0",
                         value=numpy_helper.from_array(np.array([0], dtype=np.int64))),
        helper.make_node("Constant", [], ["one"], name="c1",
                         value=numpy_helper.from_array(np.array([1], dtype=np.int64))),
    ]
    nodes = nodes[-2:] + nodes[:-2]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64,
                                                                     ["batch", 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [table, w, minus1])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_onnx_single_node_runners_use_real_shapes_and_values(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    _onnx_model(path)
    src = opexec.load_source(str(path), batch=3)
    graph = src.graph
    assert graph is not None and src.format is opexec.SourceFormat.ONNX
    prog = opexec.program_of(src)
    assert isinstance(prog, opexec.OnnxProgram)
    feeds = prog.example_inputs(graph)
    assert feeds["ids"].shape == (3, 5) and feeds["ids"].max() < 20  # valid table indices
    captured = prog.reference(feeds)
    assert np.array_equal(captured["ids"], feeds["ids"])  # integer values are the real ones
    # the shape arithmetic folded into a constant at the bound batch: no op computes it
    assert "newshape" not in captured and not any(op.kind is OpKind.SHAPE for op in graph.ops)
    for op in graph.ops:
        r = opexec.make_op_runner(src, prog, captured, op, DType.FP32, threads=1)
        outs = r.run()
        for name, value in zip(op.outputs, outs, strict=True):
            assert tuple(np.asarray(value).shape) == graph.tensor(name).concrete_shape
    mm = next(op for op in graph.ops if op.kind is OpKind.MATMUL)
    q = opexec.make_op_runner(src, prog, captured, mm, DType.INT8, threads=1)
    assert "int8" in q.description and q.run()[0].shape == (3, 5, 6)


def test_conversion_kernels() -> None:
    x = torch.randn(2, 3, 4, 5)
    q, scale = opexec.quantize_int8(x)
    assert q.dtype is torch.int8 and q.abs().max() <= 127
    assert torch.allclose(opexec.dequantize_int8(q, scale), x, atol=scale)
    y, _ = opexec.convert_tensor(x, Representation(DType.FP32, Layout.NCHW),
                                 Representation(DType.FP16, Layout.NHWC))
    assert y.dtype is torch.float16 and tuple(y.shape) == (2, 4, 5, 3)
    r = opexec.make_conversion_runner((64, 64), Representation(DType.INT8),
                                      Representation(DType.FP32))
    out, _ = r.run()
    assert out.dtype is torch.float32 and tuple(out.shape) == (64, 64)
    with pytest.raises(UnsupportedError):
        opexec.make_conversion_runner((8,), Representation(DType.FP32),
                                      Representation(DType.INT4))


def test_task_graphs_have_no_executable_source(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no executable source"):
        opexec.load_source(str(tmp_path / "graph.json"))


def test_a_multicore_time_far_above_its_cores_alone_is_flagged_contention() -> None:
    from placewise.calibrate.profile import flag_contention
    from placewise.cost.calibrated import Measurement

    m = Machine.model_validate({
        "name": "local",
        "devices": [_dev("a", [0], ["fp32"], "torch"), _dev("b", [1], ["fp32"], "torch"),
                    _dev("ab", [0, 1], ["fp32"], "torch")],
        "links": [{"name": "l1", "endpoints": ["a", "ab"], "bandwidth_bytes_per_s": 1e9,
                   "latency_s": 1e-6, "source": "t"},
                  {"name": "l2", "endpoints": ["b", "ab"], "bandwidth_bytes_per_s": 1e9,
                   "latency_s": 1e-6, "source": "t"}]})

    def meas(dev: str, key: str, t: float) -> Measurement:
        return Measurement(device=dev, key=key, kind="relu", dtype="fp32", median_s=t,
                           p10_s=t, p90_s=t, n=5)

    out = flag_contention([meas("a", "k1", 50e-6), meas("ab", "k1", 12e-3),  # stalled
                           meas("a", "k2", 50e-6), meas("ab", "k2", 90e-6),  # just slower
                           meas("ab", "k3", 12e-3)], m)  # nothing to compare with
    assert [x.flags for x in out] == [[], ["contention"], [], [], []]
