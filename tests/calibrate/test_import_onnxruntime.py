"""onnxruntime profiles taken with plain onnxruntime, imported as a calibration: the reader,
matching to the graph's ops (optimized, fused, NCHWc and unnamed nodes), keys and
provenance, the refusals, and the cost model planning with the result."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from placewise.calibrate.imports.build import ImportReport, engine_class, import_calibration
from placewise.calibrate.imports.onnxruntime import read_onnxruntime, warmup_runs
from placewise.calibrate.imports.records import ImportedProfile, file_sha256
from placewise.cost.calibrated import CalibratedModel, Calibration, load_calibration, op_key
from placewise.cost.load import load_cost_model
from placewise.cost.model import Source
from placewise.errors import ProfileError
from placewise.graph.ir import Graph
from placewise.graph.onnx_import import read_onnx_as_is
from placewise.graph.zoo import export_onnx
from placewise.hardware.load import load_machine
from placewise.hardware.spec import Machine
from placewise.planning import load_graph
from placewise.runtime.ort_profile import read_events
from placewise.units import DType
from tests.calibrate.ortprofile import take_profile
from tests.calibrate.test_profile import machine as local_like

RUNS = 6
CLS_SHAPE = {"x": (1, 3, 48, 192)}


@pytest.fixture(scope="module")
def resnet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(model, profile): the zoo ResNet exported to ONNX, profiled by plain onnxruntime."""
    folder = tmp_path_factory.mktemp("resnet")
    model = export_onnx("resnet", {}, folder / "resnet.onnx")
    return model, take_profile(model, folder, runs=RUNS)


@pytest.fixture(scope="module")
def cls_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(model, profile) of a real third-party file (paddle2onnx; 308 unnamed nodes)."""
    from tests.corpus import CorpusUnavailable, fetch

    try:
        model = fetch("rapidocr-cls-v2")
    except CorpusUnavailable as exc:  # pragma: no cover - no network
        pytest.skip(f"corpus unavailable: {exc}")
    folder = tmp_path_factory.mktemp("cls")
    return model, take_profile(model, folder, runs=4, shapes=CLS_SHAPE)


def _import(model: Path, profile: Path | ImportedProfile, machine: Machine, *,
            batch: int | None = 1, shapes: dict[str, tuple[int, ...]] | None = None,
            **kw: Any) -> tuple[Calibration, ImportReport, Graph]:
    graph = load_graph(str(model), shapes, batch if shapes is None else None)
    prof = profile if isinstance(profile, ImportedProfile) else read_onnxruntime(profile)
    cal, rep = import_calibration([prof], graph, machine, onnx_model=read_onnx_as_is(model),
                                  model_ref=str(model), batch=batch, **kw)
    return cal, rep, graph


# ---- the reader -------------------------------------------------------------------------------


def test_reader_keeps_runs_after_warmup_and_classifies_nodes(resnet: tuple[Path, Path]) -> None:
    _model, path = resnet
    prof = read_onnxruntime(path, tool_version="1.x as told")
    assert prof.warmup_dropped >= 1 and prof.runs + prof.warmup_dropped == RUNS
    assert prof.source.tool == "onnxruntime" and prof.source.tool_version == "1.x as told"
    assert prof.source.sha256 == file_sha256(path)
    assert prof.source.device == "CPUExecutionProvider"
    assert len(prof.run_samples_s) == len(prof.run_nodes_s) == prof.runs
    assert len(prof.run_executor_s) == prof.runs  # SequentialExecutor::Execute
    assert all(run >= ex >= nodes for run, ex, nodes in zip(
        prof.run_samples_s, prof.run_executor_s, prof.run_nodes_s, strict=True))
    assert all(len(r.samples_s) == prof.runs for r in prof.regions)
    assert all(r.nodes == (r.label,) and r.engine == "CPUExecutionProvider"
               for r in prof.regions)
    assert {r.op_type for r in prof.regions} >= {"Conv", "Gemm"}
    assert prof.precision == "fp32"
    # the NCHWc layout reorders are reformats, not regions
    assert [t.kind for t in prof.transfers] == ["reformat"] * len(prof.transfers)
    assert all(t.label.startswith("Reorder") or "reorder" in t.label.lower()
               for t in prof.transfers)
    assert read_onnxruntime(path).source.tool_version == ""  # the file does not say


def test_threads_of_a_profile_against_the_device(resnet: tuple[Path, Path],
                                                 tmp_path: Path) -> None:
    model, _p = resnet
    two = take_profile(model, tmp_path, runs=3, threads=2)
    prof = read_onnxruntime(two)
    assert prof.threads == 2
    _cal, rep, _g = _import(model, prof, local_like())  # cpu1 has one core
    assert any("ran its kernels on 2 thread(s), device 'cpu1' has 1 core" in n
               for n in rep.profiles[0].notes)


def test_the_profilers_own_per_node_cost_is_taken_off(resnet: tuple[Path, Path]) -> None:
    """The least time of a node that does no work (the ResNet's Reshape) comes off every
    CPU node, never below zero; ``keep`` keeps the times as timed."""
    _model, path = resnet
    kept = read_onnxruntime(path, profiler_cost="keep")
    got = read_onnxruntime(path)
    views = [r for r in kept.regions if r.op_type == "Reshape"]
    floor = min(r.median_s for r in views)
    assert got.per_node_cost_s == floor > 0 and kept.per_node_cost_s == 0
    assert any("profiler's own cost per node" in n for n in got.notes)
    for a, b in zip(kept.regions, got.regions, strict=True):
        assert b.samples_s == tuple(max(x - floor, 0.0) for x in a.samples_s)
    nodes = len(kept.regions) + len(kept.transfers)
    assert all(a - nodes * floor - 1e-12 <= b < a
               for a, b in zip(kept.run_nodes_s, got.run_nodes_s, strict=True))


def test_runs_are_the_sum_of_their_kernel_events(resnet: tuple[Path, Path]) -> None:
    """Differential: the one parser against a plain reading of the same events."""
    _model, path = resnet
    events = json.loads(path.read_text())
    got = read_events(events, file=str(path))
    runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                  if e.get("cat") == "Session" and e.get("name") == "model_run")
    assert len(got.run_s) == len(runs) == RUNS
    for k, (lo, hi) in enumerate(runs):
        want: dict[str, float] = {}
        for e in events:
            if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and \
                    lo <= e["ts"] <= hi:
                node = e["name"][: -len("_kernel_time")]
                want[node] = want.get(node, 0.0) + e["dur"] / 1e6
        assert got.node_s[k] == pytest.approx(want)
        assert got.run_s[k] == pytest.approx((hi - lo) / 1e6)


def test_warmup_rule() -> None:
    assert warmup_runs([5.0, 1.0, 1.0]) == 1
    assert warmup_runs([5.0, 3.0, 1.0, 1.0, 1.0, 1.0]) == 2
    assert warmup_runs([1.0]) == 0
    assert warmup_runs([9.0, 9.0, 9.0, 1.0]) <= 2  # never more than half


# ---- matching, keys, provenance ----------------------------------------------------------------


def test_resnet_profile_covers_every_op_with_keys_and_provenance(
        resnet: tuple[Path, Path]) -> None:
    model, path = resnet
    m = local_like()
    cal, rep, graph = _import(model, path, m)
    assert rep.device == "cpu1"  # the onnxruntime device of the machine
    assert rep.matched_nodes == rep.profiled_nodes > 0 and not rep.unmatched
    assert rep.ops_covered == len(graph.ops) and rep.measured_share == pytest.approx(1.0)
    assert rep.split_nodes > 0  # NCHWc nodes with their fused BatchNorm/Relu
    assert rep.reformats >= 1 and rep.reformats_attributed == rep.reformats
    keys = {op_key(graph, op, DType.FP32)[0] for op in graph.ops}
    assert {x.key for x in cal.measurements} == keys
    assert all(x.device == "cpu1" and x.backend == "import:onnxruntime" and x.n >= 1
               and x.p10_s <= x.median_s <= x.p90_s for x in cal.measurements)
    assert not cal.fits  # ops nobody measured keep the roofline
    (imp,) = cal.imports
    assert (imp.tool, imp.device, imp.sha256) == ("onnxruntime", "cpu1", file_sha256(path))
    assert imp.profiled_nodes == rep.profiled_nodes and imp.ops_covered == len(graph.ops)
    assert imp.warmup_dropped >= 1 and imp.runs == RUNS - imp.warmup_dropped
    rc = cal.devices[0].run_call  # the session's time outside its executor
    assert rc.n == imp.runs and rc.p10_s <= rc.median_s <= rc.p90_s and rc.median_s > 0
    assert rep.node_gaps_s is not None and rep.run_overhead_s == rc.median_s
    # the file round-trips, and the cost model accepts it for this machine
    again = Calibration.from_json(json.loads(json.dumps(cal.to_json())), file="<mem>")
    assert again.fingerprint() == cal.fingerprint()
    assert isinstance(load_cost_model(m, cal), CalibratedModel)


def test_calibrations_without_imports_keep_their_json() -> None:
    assert "imports" not in Calibration.empty("local").to_json()


def test_unmeasured_ops_keep_the_roofline(resnet: tuple[Path, Path]) -> None:
    """A profile that timed only the convolutions: the rest is the roofline's, per op and
    per region."""
    model, path = resnet
    prof = read_onnxruntime(path)
    convs = tuple(r for r in prof.regions if r.op_type == "Conv")
    part = dataclasses.replace(prof, regions=convs, transfers=())
    m = local_like()
    cal, rep, graph = _import(model, part, m)
    assert 0 < rep.ops_covered < len(graph.ops) and 0 < rep.measured_share < 1
    cm = CalibratedModel(m, cal)
    measured = {x.key for x in cal.measurements}
    gemm = next(op for op in graph.ops if op.kind.value in ("gemm", "linear", "matmul"))
    assert op_key(graph, gemm, DType.FP32)[0] not in measured
    assert cm.op_cost(graph, gemm, "cpu1", DType.FP32).source is Source.ROOFLINE
    region = cm.region_cost(graph, [gemm], "cpu1", DType.FP32)
    assert region.total_s == pytest.approx(
        cm.roofline.region_cost(graph, [gemm], "cpu1", DType.FP32).total_s)
    conv = next(op for op in graph.ops if op.kind.value == "conv")
    assert cm.op_cost(graph, conv, "cpu1", DType.FP32).source is Source.PROFILED


def test_a_third_party_file_with_unnamed_nodes(cls_model: tuple[Path, Path]) -> None:
    model, path = cls_model
    cal, rep, graph = _import(model, path, local_like(), batch=None, shapes=CLS_SHAPE)
    assert rep.matched_nodes == rep.profiled_nodes > 100
    assert rep.ops_covered >= 0.95 * len(graph.ops)
    assert rep.measured_share > 0.95
    assert len(cal.measurements) > 50


def test_a_statically_quantized_file_of_an_old_opset(tmp_path: Path) -> None:
    """QDQ int8 (opset 11, which placewise upgrades to read it): onnxruntime's optimized
    graph is rebuilt from the file as it is, so the layout nodes it adds are found."""
    from tests.corpus import CorpusUnavailable, fetch

    try:
        model = fetch("rapidocr-cls-qdq")
    except CorpusUnavailable as exc:  # pragma: no cover - no network
        pytest.skip(f"corpus unavailable: {exc}")
    prof = take_profile(model, tmp_path, runs=3, shapes=CLS_SHAPE)
    cal, rep, graph = _import(model, prof, local_like(), batch=None, shapes=CLS_SHAPE)
    assert rep.matched_nodes == rep.profiled_nodes and not rep.unmatched
    assert rep.ops_covered == len(graph.ops)
    assert any(m.kind == "conv" for m in cal.measurements)


def test_preset_machine_device_choice_and_plan_cost_model(resnet: tuple[Path, Path]) -> None:
    model, path = resnet
    orin = load_machine("jetson-agx-orin")
    cal, rep, _g = _import(model, path, orin)  # the one CPU of the preset
    assert rep.device == "cpu" and [d.name for d in cal.devices] == ["cpu"]
    assert isinstance(load_cost_model(orin, cal), CalibratedModel)
    with pytest.raises(ProfileError, match="device 'gpu' is a gpu"):
        _import(model, path, orin, device="gpu")
    with pytest.raises(ProfileError, match="not a device of machine"):
        _import(model, path, orin, device="tpu9")


def test_engine_classes() -> None:
    assert [engine_class(e) for e in ("CPUExecutionProvider", "TensorrtExecutionProvider",
                                      "QNNExecutionProvider", "DLA", "GPU", "")] == \
        ["cpu", "gpu", "npu", "dla", "gpu", ""]


# ---- refusals ------------------------------------------------------------------------------------


def test_refuses_another_models_profile(resnet: tuple[Path, Path],
                                        cls_model: tuple[Path, Path]) -> None:
    model, _p = resnet
    _cls, cls_profile = cls_model
    with pytest.raises(ProfileError, match=r"\d+ of \d+ profiled nodes name an op of .*"
                                           r"resnet\.onnx: a profile of another model"):
        _import(model, cls_profile, local_like())


def test_refuses_another_batch_and_precision(resnet: tuple[Path, Path]) -> None:
    model, path = resnet
    with pytest.raises(ProfileError, match="profiled at batch 1, asked batch 2"):
        _import(model, path, local_like(), batch=2)
    said = dataclasses.replace(read_onnxruntime(path), batch=4)  # a file that states it
    with pytest.raises(ProfileError, match=r"batch 4 \(the file says\), asked batch 1"):
        _import(model, said, local_like(), batch=1)
    with pytest.raises(ProfileError, match=r"computes in fp32.*asked precision is fp16"):
        _import(model, path, local_like(), precision="fp16")


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "profile.json"
    p.write_text(text)
    return p


def test_refuses_truncated_and_hostile_files(resnet: tuple[Path, Path], tmp_path: Path) -> None:
    _m, path = resnet
    text = path.read_text()
    events = json.loads(text)
    cases: list[tuple[str, str]] = [
        (text[: len(text) // 2], "not valid JSON"),
        (text.replace('"dur" :', '"dur":').replace('"dur":', '"dur": NaN, "x":', 1),
         "NaN"),
        ("[" * 100 + "]" * 100, "nested more than"),
        ('{"traceEvents": []}', "expected a JSON list of trace events"),
        (json.dumps([*events[:3], 5, *events[3:]]), "event 3: expected an object"),
        ("[]", "no Session 'model_run' event"),
    ]
    huge = [dict(e) for e in events]
    k = next(i for i, e in enumerate(huge) if e.get("name", "").endswith("_kernel_time"))
    huge[k]["dur"] = 1e300
    cases.append((json.dumps(huge), f"[{k}].dur: number 1e+300 is too large"))
    huge[k]["dur"] = 1e20
    cases.append((json.dumps(huge), f"event {k}: 'dur' is 1e+20 microseconds"))
    shape = [dict(e) for e in events]
    shape[k] = {**shape[k], "args": {**shape[k]["args"], "output_type_shape": [{"float": [-1]}]}}
    cases.append((json.dumps(shape), f"event {k}: args.output_type_shape[0] has shape"))
    runs = [i for i, e in enumerate(events) if e.get("name") == "model_run"]
    overlap = [dict(e) for e in events]
    overlap[runs[1]]["ts"] = overlap[runs[0]]["ts"] + 1
    cases.append((json.dumps(overlap), "runs made concurrently cannot be told apart"))
    for body, needle in cases:
        p = _write(tmp_path, body)
        with pytest.raises(ProfileError, match=None) as info:
            read_onnxruntime(p)
        assert needle in str(info.value) and str(p) in str(info.value), (needle, info.value)


def test_loaded_back_from_disk(resnet: tuple[Path, Path], tmp_path: Path) -> None:
    model, path = resnet
    cal, _rep, _g = _import(model, path, local_like())
    out = cal.save(tmp_path / "cal.json")
    assert load_calibration(out).imports[0].file == str(path)


# ---- the builder on records a GPU profile's reader hands on (no GPU on this machine) ------


def _as_gpu(prof: ImportedProfile, *, subgraph: bool = False) -> ImportedProfile:
    """The real CPU profile's records with the engine a CUDA or TensorRT provider would
    report, plus host<->device copies of three sizes (what ``MemcpyFromHost`` /
    ``MemcpyToHost`` nodes become): the builder's handling of them, on records."""
    from placewise.calibrate.imports.records import MeasuredRegion, MeasuredTransfer

    engine = "TensorrtExecutionProvider" if subgraph else "CUDAExecutionProvider"
    regions = tuple(dataclasses.replace(r, engine=engine) for r in prof.regions)
    if subgraph:  # one compiled subgraph standing for every node
        regions = (MeasuredRegion(label="TRTKernel_graph_main_graph_1_0", op_type="TRTKernel",
                                  nodes=(), engine=engine,
                                  samples_s=tuple(sum(x) for x in zip(
                                      *(r.samples_s for r in prof.regions), strict=True))),)
    copies = tuple(MeasuredTransfer(f"copy{i}", "copy", *ends, nbytes=n,
                                    samples_s=(2e-6 + n * 1e-10,) * prof.runs, engine=engine)
                   for i, (ends, n) in enumerate([(("host", "device"), 12288),
                                                  (("host", "device"), 49152),
                                                  (("host", "device"), 196608),
                                                  (("device", "host"), 40)]))
    return dataclasses.replace(prof, regions=regions, transfers=copies)


def test_copies_become_a_link_and_the_host_keeps_the_roofline(resnet: tuple[Path, Path]
                                                              ) -> None:
    model, path = resnet
    orin = load_machine("jetson-agx-orin")
    cal, rep, graph = _import(model, _as_gpu(read_onnxruntime(path)), orin)
    assert rep.device == "gpu" and rep.copies == 4
    assert rep.links == ("cpu->gpu",)  # device->host: one size, too few to fit
    (lk,) = cal.links
    assert lk.latency_s == pytest.approx(2e-6, rel=1e-3)
    assert lk.seconds_per_byte == pytest.approx(1e-10, rel=1e-3)
    assert any("one size timed" in n for n in rep.notes)
    assert sorted(d.name for d in cal.devices) == ["cpu", "gpu"]
    cm = load_cost_model(orin, cal)
    conv = next(op for op in graph.ops if op.kind.value == "conv")
    assert cm.op_cost(graph, conv, "gpu", DType.FP32).source is Source.PROFILED
    host = cm.region_cost(graph, [conv], "cpu", DType.FP32)
    assert host.total_s == pytest.approx(
        CalibratedModel(orin, Calibration.empty("x")).roofline.region_cost(
            graph, [conv], "cpu", DType.FP32).total_s)


def test_a_compiled_subgraph_is_unattributed_unless_its_nodes_are_given(
        resnet: tuple[Path, Path]) -> None:
    model, path = resnet
    prof = _as_gpu(read_onnxruntime(path), subgraph=True)
    orin = load_machine("jetson-agx-orin")
    with pytest.raises(ProfileError, match="1 compiled subgraphs do not name their nodes"):
        _import(model, prof, orin)
    real = read_onnxruntime(path)
    nodes = [r.label for r in real.regions] + [t.label for t in real.transfers]
    cal, rep, graph = _import(model, prof, orin,
                              region_nodes={"TRTKernel_graph_main_graph_1_0": nodes})
    assert rep.matched_nodes == 1 and rep.split_nodes == 1
    assert rep.ops_covered == len(graph.ops)
    # the subgraph's median run (a mean would follow one slow sample of a loaded machine)
    total = float(np.median(prof.regions[0].samples_s))
    # the subgraph's time, shared by roofline time: the keys' medians add up to about it
    per_op = {op.name: next(m.median_s for m in cal.measurements
                            if m.key == op_key(graph, op, DType.FP32)[0]) for op in graph.ops}
    assert 0.3 * total < sum(per_op.values()) < 3 * total


def test_several_profiles_pool_their_samples(resnet: tuple[Path, Path]) -> None:
    model, path = resnet
    graph = load_graph(str(model), None, 1)
    one = read_onnxruntime(path)
    cal, rep = import_calibration([one, one], graph, local_like(), onnx_model=read_onnx_as_is(model),
                                  model_ref=str(model), batch=1)
    single, _ = import_calibration([one], graph, local_like(), onnx_model=read_onnx_as_is(model),
                                   model_ref=str(model), batch=1)
    assert len(cal.imports) == 2 and rep.profiled_nodes == 2 * len(one.regions)
    n1 = {m.key: m.n for m in single.measurements}
    assert all(m.n == 2 * n1[m.key] for m in cal.measurements)
    assert cal.devices[0].run_call.n == 2 * single.devices[0].run_call.n


def test_partitions_on_the_imported_device_pay_its_run_overhead(resnet: tuple[Path, Path]
                                                                ) -> None:
    from placewise.cost.model import Representation, Term

    model, path = resnet
    m = local_like()
    cal, _rep, graph = _import(model, path, m)
    rc = cal.devices[0].run_call
    cm = load_cost_model(m, cal)
    x = graph.tensor(graph.ops[0].inputs[0])
    into = cm.transfer_cost(x, Representation(DType.FP32), "cpu0", "cpu1")
    assert dict(into.assumptions)["run_call_s"] == rc.median_s
    assert into.term(Term.LAUNCH) >= rc.median_s
    req = cm.request_cost("cpu1", ["cpu1"])
    assert req is not None and req.term(Term.LAUNCH) == rc.median_s
    assert cm.request_cost("cpu0", ["cpu1"]) is None  # not calibrated


def test_torch_regions_match_by_module_path() -> None:
    """What a torch trace's reader hands on (a module path and an aten op, no node name)
    matches the ops of that module in a torch graph."""
    from placewise.calibrate.imports.build import _Matcher

    graph = load_graph("zoo:mlp?layers=2", None, 1)
    m = _Matcher.make(graph, None)
    assert m.ops_of_module("2", "aten::linear") == ["linear_1"]
    assert m.ops_of_module("2", "aten::addmm") == ["linear_1"]  # the module's ops
    assert m.ops_of_module("no.such.module", "aten::linear") == []


def test_dumped_tensorrt_subgraphs_name_their_nodes(resnet: tuple[Path, Path],
                                                    tmp_path: Path) -> None:
    """``trt_dump_subgraphs`` writes each TensorRT subgraph as an ONNX file named after its
    ``TRTKernel_graph_*`` node: here the whole model is one subgraph (what the provider
    does when TensorRT takes every node)."""
    import shutil

    from placewise.calibrate.imports.onnxruntime import subgraph_nodes

    model, path = resnet
    label = "TRTKernel_graph_main_graph_1_0"
    shutil.copyfile(model, tmp_path / f"{label}.onnx")
    (tmp_path / f"{label}1.onnx").write_bytes(b"not this one")  # ..._0 is not ..._01
    got = subgraph_nodes(tmp_path, [label, "TRTKernel_graph_other_2_0"])
    assert list(got) == [label] and len(got[label]) == len(read_onnx_as_is(model).graph.node)
    prof = _as_gpu(read_onnxruntime(path), subgraph=True)
    _cal, rep, graph = _import(model, prof, load_machine("jetson-agx-orin"), region_nodes=got)
    assert rep.matched_nodes == 1 and rep.ops_covered == len(graph.ops)
    with pytest.raises(ProfileError, match="not a folder"):
        subgraph_nodes(tmp_path / "absent", [label])
