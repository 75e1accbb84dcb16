"""The host's worker (and the workers of CPU devices sharing its cores) run in the client's
own process: requests cost no process hand-off, and the results are those of worker
processes.

``split_placement`` puts vertices on cpu0 (the host), cpu1 (int8) and cpu01 (sharing core 0
with the host): cpu0 and cpu01 run on the client's thread, cpu1 in a worker process.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

from placewise.errors import ExecutionError, InputError
from placewise.runtime.executor import Executor, Fault
from placewise.runtime.opexec import FxProgram
from placewise.runtime.program import program_from_schedule
from placewise.schedule import Placement, evaluate
from placewise.units import DType
from tests.runtime.helpers import (
    alive,
    own_segments,
    partition_files,
    problem_of,
    split_placement,
    tiny_source,
)


def _inputs(source: Any, n: int) -> list[list[np.ndarray[Any, Any]]]:
    prog = FxProgram(source.exported_program)
    return [[x.numpy().copy() for x in prog.example_inputs(seed)] for seed in range(n)]


def _run(program: Any, source: Any, inputs: Any, **kw: Any) -> dict[str, Any]:
    before = os.sched_getaffinity(0)
    # compiled once (the subject here is where the workers run, not the compilation)
    with Executor(program, source, reference_inputs=inputs[0], slots=3, timeout_s=60,
                  partition_files=partition_files(program, source), **kw) as ex:
        ex.start()
        pinned = os.sched_getaffinity(0)
        isolated = ex.run(inputs, phase="isolated")
        stream = ex.run(inputs * 2, phase="stream", in_flight=3)
        client_cpu = ex.last_run_cpu_s
        ex.run(inputs[:1], phase="capture", capture=True)
        solo = ex.solo(2)
        tel = ex.telemetry()
        pids = ex.worker_pids
    return {"isolated": isolated, "stream": stream, "solo": solo, "telemetry": tel,
            "pids": pids, "pinned": pinned, "before": before, "client_cpu": client_cpu,
            "after": os.sched_getaffinity(0)}


@pytest.fixture(scope="module")
def split() -> dict[str, Any]:
    src = tiny_source()
    prob = problem_of(src)
    if "cpu01" not in prob.machine.device_names:
        pytest.skip("one usable core: no device shares the host's cores")
    program = program_from_schedule(prob, evaluate(prob, split_placement(prob)).schedule)
    inputs = _inputs(src, 4)
    return {"source": src, "program": program, "inputs": inputs,
            "inline": _run(program, src, inputs),
            "processes": _run(program, src, inputs, inline_host=False)}


def test_host_and_its_core_sharers_run_in_this_process(split: dict[str, Any]) -> None:
    ran = split["inline"]
    assert ran["telemetry"].tags["in_process"] == "cpu0,cpu01"
    assert set(ran["pids"]) == {"cpu1"}  # only cpu1 is a worker process
    devs = {d.device: d for d in ran["telemetry"].devices}
    assert devs["cpu0"].pid == devs["cpu01"].pid == os.getpid() != devs["cpu1"].pid
    # the client's thread ran on the cores cpu0 and cpu01 share, and is given its own back
    assert ran["pinned"] == set(split["program"].device("cpu0").cores)
    assert ran["after"] == ran["before"]
    assert not any(alive(p) for p in ran["pids"].values()) and not own_segments()


def test_in_process_results_are_the_worker_processes_results(split: dict[str, Any]) -> None:
    a, b = split["inline"], split["processes"]
    assert b["telemetry"].tags["in_process"] == ""
    assert set(b["pids"]) == {"cpu0", "cpu1", "cpu01"}
    for phase in ("isolated", "stream"):
        assert len(a[phase]) == len(b[phase])
        for x, y in zip(a[phase], b[phase], strict=True):
            for u, v in zip(x, y, strict=True):
                assert u.dtype == v.dtype and u.shape == v.shape
                np.testing.assert_array_equal(u, v)


def test_the_client_cpu_is_counted_once(split: dict[str, Any]) -> None:
    # in-process, the client's CPU time is the host worker's own (its per-request work);
    # with a worker process per device it is the client's alone
    assert split["inline"]["client_cpu"] == 0.0
    assert split["processes"]["client_cpu"] > 0.0


def test_in_process_telemetry_names_every_task(split: dict[str, Any]) -> None:
    tel = split["inline"]["telemetry"]
    names = {t.name for t in split["program"].tasks}
    for phase in ("isolated", "stream"):
        got = {t.task for t in tel.tasks if t.phase == phase}
        assert got >= names, names - got
        reqs = tel.requests_of(phase)
        assert all(r.outputs_ns > r.submit_ns for r in reqs)
    transfers = [t for t in tel.tasks if t.kind == "transfer" and t.phase == "isolated"]
    assert {(t.device, t.dst_device) for t in transfers} >= {("cpu0", "cpu1")}
    assert all(t.end_ns >= t.start_ns for t in transfers)
    # solo replays every device, the in-process ones too
    assert {s.device for s in split["inline"]["solo"]} == {"cpu0", "cpu1", "cpu01"}


def test_a_single_device_plan_needs_no_worker_process() -> None:
    src = tiny_source()
    prob = problem_of(src)
    program = program_from_schedule(prob, evaluate(
        prob, Placement.uniform(prob.vertex_names, "cpu0", DType.FP32)).schedule)
    inputs = _inputs(src, 3)
    ran = _run(program, src, inputs)
    assert ran["pids"] == {} and ran["telemetry"].tags["in_process"] == "cpu0"
    ref = _run(program, src, inputs, inline_host=False)
    for x, y in zip(ran["isolated"], ref["isolated"], strict=True):
        np.testing.assert_array_equal(x[0], y[0])
    assert not own_segments()


def test_a_fault_on_an_in_process_device_is_refused_or_moves_it_out(
        split: dict[str, Any]) -> None:
    prog, src, inputs = split["program"], split["source"], split["inputs"]
    task = next(t.name for t in prog.tasks if t.device == "cpu01" and t.kind.value == "compute")
    with pytest.raises(InputError, match="inline_host=False"):
        Executor(prog, src, reference_inputs=inputs[0], inline_host=True,
                 fault=Fault("raise", "cpu01", task),
                 partition_files=partition_files(prog, src)).start()
    assert not own_segments()
    # by default the faulty device's worker is a process again, and the fault is reported
    ex = Executor(prog, src, reference_inputs=inputs[0], timeout_s=60, warm_calls=0,
                  fault=Fault("raise", "cpu01", task, request=1),
                  partition_files=partition_files(prog, src))
    try:
        ex.start()
        assert set(ex.worker_pids) == {"cpu0", "cpu1", "cpu01"}
        with pytest.raises(ExecutionError, match="injected fault") as info:
            ex.run(inputs)
        assert info.value.device == "cpu01" and info.value.request == 1
    finally:
        ex.close()
    assert not own_segments()


def test_a_worker_process_dying_ends_an_in_process_run(split: dict[str, Any]) -> None:
    import signal

    prog, src, inputs = split["program"], split["source"], split["inputs"]
    ex = Executor(prog, src, reference_inputs=inputs[0], timeout_s=60, warm_calls=0,
                  partition_files=partition_files(prog, src))
    try:
        ex.start()
        os.kill(ex.worker_pids["cpu1"], signal.SIGKILL)
        with pytest.raises(ExecutionError, match="killed by signal 9") as info:
            ex.run(inputs)
        assert info.value.device == "cpu1"
    finally:
        ex.close()
    assert os.sched_getaffinity(0) == split["inline"]["before"]
    assert not own_segments()
