"""The executor runs a placed model for real: outputs, telemetry, pipelining, clean-up."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch

from placewise.errors import InputError, PlacewiseError
from placewise.hardware.load import load_machine
from placewise.plan import load_plan, save_plan
from placewise.runtime.executor import Executor
from placewise.runtime.opexec import FxProgram, load_source
from placewise.runtime.program import StepKind, copy_key, program_from_plan, program_from_schedule
from placewise.runtime.telemetry import Telemetry
from placewise.schedule import Assignment, Placement, Problem, TaskKind, evaluate
from placewise.units import DType
from tests.runtime.helpers import (
    alive,
    local_machine,
    own_segments,
    partition_files,
    problem_of,
    split_placement,
    tiny_plan,
    tiny_source,
)

N_REQUESTS = 6


def _inputs(source: Any, n: int) -> list[list[np.ndarray[Any, Any]]]:
    prog = FxProgram(source.exported_program)
    return [[x.numpy().copy() for x in prog.example_inputs(seed)] for seed in range(n)]


def _reference(source: Any, req: list[np.ndarray[Any, Any]]) -> np.ndarray[Any, Any]:
    with torch.inference_mode():
        out = source.exported_program.module()(*[torch.from_numpy(a) for a in req])
    return np.asarray(out.detach().numpy())


@pytest.fixture(scope="module")
def setup() -> dict[str, Any]:
    src = tiny_source()
    prob = problem_of(src)
    ev = evaluate(prob, split_placement(prob))
    return {"source": src, "problem": prob, "evaluation": ev,
            "program": program_from_schedule(prob, ev.schedule)}


@pytest.fixture(scope="module")
def ran(setup: dict[str, Any]) -> dict[str, Any]:
    src = setup["source"]
    inputs = _inputs(src, N_REQUESTS)
    # the partitions compiled once per session (the executor's own compilation of this
    # program runs in tests/test_validate.py, of an ONNX source below)
    with Executor(setup["program"], src, reference_inputs=inputs[0], slots=3,
                  timeout_s=60, partition_files=partition_files(setup["program"], src)) as ex:
        ex.start()
        isolated = ex.run(inputs, phase="isolated")
        stream = ex.run(inputs * 3, phase="stream", in_flight=3)
        ex.run(inputs[:1], phase="capture", capture=True)
        solo = ex.solo(2)
        peaks = ex.peak_live_bytes("isolated")
        tel = ex.telemetry()
        pids = ex.worker_pids
        shm = ex.shm_name
    return {"inputs": inputs, "isolated": isolated, "stream": stream, "solo": solo,
            "telemetry": tel, "pids": pids, "shm": shm, "peaks": peaks}


# ---- the program (no processes) --------------------------------------------------------------


def test_steps_read_only_what_an_earlier_step_wrote(setup: dict[str, Any]) -> None:
    prog = setup["program"]
    for dev, steps in prog.steps.items():
        have: set[str] = set()
        for i, st in enumerate(steps):
            assert set(st.reads) <= have, (dev, i, st)
            have |= set(st.writes)
            have -= set(st.frees)
        assert not have, f"{dev} leaves copies alive: {have}"
    host = prog.steps[prog.host]
    assert host[0].kind is StepKind.IO_IN
    assert sum(st.kind is StepKind.IO_OUT for st in host) == 1


def test_every_task_is_a_step_on_its_device(setup: dict[str, Any]) -> None:
    prog = setup["program"]
    sched = setup["evaluation"].schedule
    members = {name for p in prog.partitions for name in p.tasks}
    assert {t.name for t in prog.tasks} == (
        {t.name for t in sched.tasks} - members) | {p.name for p in prog.partitions}
    assert members == {t.name for t in sched.tasks if t.kind is TaskKind.COMPUTE}
    for t in prog.tasks:
        kinds = {(d, st.kind) for d, steps in prog.steps.items() for st in steps
                 if st.task == t.index}
        if t.kind is TaskKind.TRANSFER:
            assert kinds == {(t.device, StepKind.SEND), (t.dst_device, StepKind.RECV)}
        else:
            want = StepKind.COMPUTE if t.kind is TaskKind.COMPUTE else StepKind.CONVERT
            assert kinds == {(t.device, want)}
    # the plan's int8 vertex makes quantize/dequantize conversions
    conv = [t for t in prog.tasks if t.kind is TaskKind.CONVERSION]
    assert {(c.src_rep.dtype, c.dst_rep.dtype) for c in conv} >= {(DType.FP32, DType.INT8),
                                                                  (DType.INT8, DType.FP32)}


def test_program_from_a_plan_file_is_the_same(setup: dict[str, Any], tmp_path: Any) -> None:
    plan, prob = tiny_plan(setup["source"])
    path = tmp_path / "plan.json"
    save_plan(plan, path)
    again = program_from_plan(load_plan(path), prob.graph, prob.machine)
    mine = setup["program"]
    assert [t.name for t in again.tasks] == [t.name for t in mine.tasks]
    for dev in mine.steps:
        assert [(s.kind, again.tasks[s.task].name if s.task >= 0 else "", s.reads, s.writes)
                for s in again.steps[dev]] == \
            [(s.kind, mine.tasks[s.task].name if s.task >= 0 else "", s.reads, s.writes)
             for s in mine.steps[dev]]


def test_a_preset_device_is_not_runnable_here(setup: dict[str, Any]) -> None:
    m = load_machine("h100-sxm-server")
    src = setup["source"]
    prob = Problem(src.graph, None, m, setup["problem"].cost_model.__class__(m))
    ev = evaluate(prob, Placement.uniform(prob.vertex_names, "gpu0", DType.FP32))
    with pytest.raises(InputError, match="not a local device"):
        program_from_schedule(prob, ev.schedule)


def test_copy_key_names_the_representation() -> None:
    from placewise.cost.model import Representation

    assert copy_key("t", Representation(DType.FP32)) == "t@fp32/row_major"


# ---- a real run -------------------------------------------------------------------------------


def test_outputs_match_the_fp32_reference(setup: dict[str, Any], ran: dict[str, Any]) -> None:
    for req, out in zip(ran["inputs"], ran["isolated"], strict=True):
        ref = _reference(setup["source"], req)
        (y,) = out
        assert y.shape == ref.shape
        rel = np.linalg.norm(y - ref) / np.linalg.norm(ref)
        assert rel < 0.05  # one int8 linear in the chain


def test_pipelined_requests_compute_the_same_outputs(ran: dict[str, Any]) -> None:
    n = len(ran["inputs"])
    for i, out in enumerate(ran["stream"]):
        np.testing.assert_allclose(out[0], ran["isolated"][i % n][0], rtol=1e-6, atol=1e-7)


def test_telemetry_uses_the_plans_task_names(setup: dict[str, Any], ran: dict[str, Any]
                                             ) -> None:
    tel: Telemetry = ran["telemetry"]
    names = {t.name for t in setup["program"].tasks} | {"io:in", "io:out"}
    iso = tel.requests_of("isolated")
    assert len(iso) == N_REQUESTS
    for r in iso:
        recs = tel.tasks_of(r.request)
        assert {t.task for t in recs} == names
        assert len(recs) == len(names)
        assert r.submit_ns <= min(t.start_ns for t in recs)
        out = next(t for t in recs if t.task == "io:out")
        assert out.end_ns == r.outputs_ns <= r.client_ns
        assert max(t.end_ns for t in recs) <= r.done_ns
    kinds = {t.task: t.kind for t in tel.tasks}
    for t in setup["program"].tasks:
        assert kinds[t.name] == {"compute": "compute", "transfer": "transfer",
                                 "conversion": "conversion"}[t.kind.value]


def test_transfers_happen_in_order_on_one_clock(ran: dict[str, Any]) -> None:
    tel: Telemetry = ran["telemetry"]
    xfers = [t for t in tel.tasks if t.kind == "transfer"]
    assert xfers
    for t in xfers:
        m = dict(t.marks)
        # written by one process, read by another: the same CLOCK_MONOTONIC orders them
        assert t.start_ns <= m["write_end"] <= m["notified"] <= m["received"] \
            <= m["read_start"] <= t.end_ns
        assert t.dst_device is not None and t.dst_device != t.device
        assert t.kernel_ns > 0


def test_ops_and_memory_are_recorded(setup: dict[str, Any], ran: dict[str, Any]) -> None:
    tel: Telemetry = ran["telemetry"]
    prog = setup["program"]
    assert not tel.ops  # one session per partition: nodes are timed by its profiler only
    assert prog.partitions
    for d in tel.devices:
        assert d.weights_bytes > 0
        assert ran["peaks"][d.device] >= d.weights_bytes
        assert d.rss_peak_bytes >= d.rss_ready_bytes > 0
        assert d.cores and d.threads == len(d.cores)
    assert all(t.live_bytes > 0 for t in tel.tasks if t.kind != "io")
    for key in ("torch", "onnxruntime", "cpu_model", "pinning", "threads", "clock"):
        assert tel.tags[key]
    again = Telemetry.from_json(tel.to_json())
    assert again == tel


def test_solo_replays_every_task(setup: dict[str, Any], ran: dict[str, Any]) -> None:
    prog = setup["program"]
    got = {(s.task, s.device) for s in ran["solo"]}
    for t in prog.tasks:
        if t.kind is TaskKind.TRANSFER:
            assert (t.name, t.device) in got and (t.name, t.dst_device) in got
        else:
            assert (t.name, t.device) in got
    assert all(s.total_s >= s.kernel_s >= 0 and math.isfinite(s.total_s) for s in ran["solo"])
    int8 = [s for s in ran["solo"] if s.task in prog.vertices and
            prog.vertices[s.task].dtype is DType.INT8]
    assert int8 and all(s.hidden_conversion_s > 0 for s in int8)


def test_a_stream_keeps_several_requests_in_flight(ran: dict[str, Any]) -> None:
    tel: Telemetry = ran["telemetry"]
    stream = sorted(tel.requests_of("stream"), key=lambda r: r.request)
    overlaps = sum(1 for a, b in itertools.pairwise(stream)
                   if b.submit_ns < a.outputs_ns)
    assert overlaps > 0
    # the host worker starts request k+1 while request k is still on another device
    starts = {t.request: t.start_ns for t in tel.tasks
              if t.task == "io:in" and t.phase == "stream"}
    outs = {t.request: t.end_ns for t in tel.tasks if t.task == "io:out" and t.phase == "stream"}
    assert any(starts[r + 1] < outs[r] for r in outs if r + 1 in starts)


def test_workers_and_shared_memory_are_gone(ran: dict[str, Any]) -> None:
    assert ran["pids"] and not any(alive(p) for p in ran["pids"].values())
    assert ran["shm"] is not None and ran["shm"] not in own_segments()
    assert not own_segments()


def test_an_onnx_file_runs_the_same_way(tmp_path: Any) -> None:
    import onnxruntime as ort

    from placewise.graph import zoo

    path = tmp_path / "mlp.onnx"
    zoo.export_onnx("mlp", {"layers": 1, "hidden": 16, "in_features": 8, "out_features": 4},
                    path, dynamic_batch=False)
    src = load_source(str(path))
    prob = problem_of(src)
    names = prob.vertex_names
    pl = Placement.of({n: Assignment("cpu1" if i == 0 else "cpu0",
                                     DType.INT8 if i == 0 else DType.FP32)
                       for i, n in enumerate(names)})
    ev = evaluate(prob, pl)
    program = program_from_schedule(prob, ev.schedule)
    rng = np.random.default_rng(0)
    inputs = [[rng.standard_normal((1, 8)).astype(np.float32)] for _ in range(3)]
    with Executor(program, src, reference_inputs=inputs[0], timeout_s=60) as ex:
        ex.start()
        outs = ex.run(inputs)
        tel = ex.telemetry()
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    for req, out in zip(inputs, outs, strict=True):
        ref = sess.run(None, {name: req[0]})[0]
        assert np.linalg.norm(out[0] - ref) / np.linalg.norm(ref) < 0.05
    assert {t.task for t in tel.tasks} >= {t.name for t in program.tasks}
    assert not own_segments()


def test_run_refuses_inputs_of_another_shape(setup: dict[str, Any]) -> None:
    src = setup["source"]
    prog = setup["program"]
    inputs = _inputs(src, 1)
    with Executor(prog, src, reference_inputs=inputs[0], timeout_s=60, warm_calls=0,
                  partition_files=partition_files(prog, src)) as ex:
        ex.start()
        with pytest.raises(InputError, match="shape"):
            ex.run([[np.zeros((3, 3), dtype=np.float32)]])
        assert len(ex.run(inputs)) == 1  # refused before anything ran: still usable
    with pytest.raises(PlacewiseError, match="not running"):
        ex.run(inputs)
    assert not own_segments()


@pytest.mark.skipif("CUDAExecutionProvider" not in ort.get_available_providers(),
                    reason="no onnxruntime CUDA execution provider here")
def test_a_cuda_device_runs_its_partitions_on_the_gpu() -> None:  # pragma: no cover - GPU
    """A device of backend ``cuda`` runs through the same backend seam: onnxruntime with
    the CUDA execution provider."""
    m = local_machine()
    data = m.model_dump(mode="json")
    data["devices"][0]["backend"] = "cuda"
    from placewise.hardware.spec import Machine

    gm = Machine.model_validate(data)
    src = tiny_source()
    prob = problem_of(src, gm)
    ev = evaluate(prob, Placement.uniform(prob.vertex_names, "cpu0", DType.FP32))
    program = program_from_schedule(prob, ev.schedule)
    inputs = _inputs(src, 2)
    with Executor(program, src, reference_inputs=inputs[0], timeout_s=120) as ex:
        ex.start()
        outs = ex.run(inputs)
    for req, out in zip(inputs, outs, strict=True):
        np.testing.assert_allclose(out[0], _reference(src, req), rtol=1e-3, atol=1e-4)
