"""Faults end a run with an error naming the device and the op; nothing is left behind."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from typing import Any

import numpy as np
import pytest

from placewise.errors import InputError, SpecError
from placewise.plan import build_plan, plan_to_json, save_plan
from placewise.runtime.executor import ExecutionError, Executor, Fault
from placewise.runtime.opexec import FxProgram
from placewise.runtime.program import program_from_schedule
from placewise.schedule import evaluate
from placewise.validate import validate_plan
from tests.runtime.helpers import (
    TINY_MLP,
    alive,
    local_machine,
    own_segments,
    partition_files,
    problem_of,
    split_placement,
    tiny_plan,
    tiny_source,
)


@pytest.fixture(scope="module")
def setup() -> dict[str, Any]:
    src = tiny_source()
    prob = problem_of(src)
    # fp32 only: no int8 session to build, the workers start faster
    ev = evaluate(prob, split_placement(prob, int8=False))
    program = program_from_schedule(prob, ev.schedule)
    prog = FxProgram(src.exported_program)
    inputs = [[x.numpy().copy() for x in prog.example_inputs(seed)] for seed in range(4)]
    vertex_on = {t.device: t.name for t in program.tasks if t.kind.value == "compute"}
    # compiled once: these runs are about faults (tests/runtime/test_executor.py and the
    # validation tests let the executor compile)
    return {"source": src, "program": program, "inputs": inputs, "vertex_on": vertex_on,
            "files": partition_files(program, src)}


def _run_with(setup: dict[str, Any], fault: Fault | None, *, timeout_s: float = 60.0,
              before: Any = None) -> tuple[Exception, dict[str, int], str | None]:
    ex = Executor(setup["program"], setup["source"], reference_inputs=setup["inputs"][0],
                  timeout_s=timeout_s, fault=fault, warm_calls=0,
                  partition_files=setup["files"])
    try:
        ex.start()
        pids = ex.worker_pids
        shm = ex.shm_name
        if before is not None:
            before(ex)
        with pytest.raises(ExecutionError) as info:
            ex.run(setup["inputs"])
    finally:
        ex.close()
    return info.value, pids, shm


def _assert_clean(pids: dict[str, int], shm: str | None) -> None:
    assert pids and not any(alive(p) for p in pids.values()), pids
    assert shm is not None and shm not in own_segments()
    assert not own_segments()


def test_a_crashed_worker_names_device_and_op(setup: dict[str, Any]) -> None:
    task = setup["vertex_on"]["cpu1"]
    err, pids, shm = _run_with(setup, Fault("crash", "cpu1", task, request=1))
    # a partition of one op names that op; of several, the partition only
    ops = [o.name for o in setup["program"].vertices[task].ops]
    assert err.device == "cpu1" and err.task == task
    assert err.op == (ops[0] if len(ops) == 1 else "")
    assert err.request == 1
    msg = str(err)
    assert "cpu1" in msg and repr(task) in msg and "signal 9" in msg and "request 1" in msg
    _assert_clean(pids, shm)


def test_a_hung_worker_times_out_naming_device_and_op(setup: dict[str, Any]) -> None:
    # cpu1's worker process hangs while the host runs in this process (a fault on the host
    # moves every device into a process: tests/runtime/test_core_gates.py, test_inline.py)
    task = setup["vertex_on"]["cpu1"]
    t0 = time.monotonic()
    err, pids, shm = _run_with(setup, Fault("hang", "cpu1", task, request=0), timeout_s=1.5)
    assert time.monotonic() - t0 < 60
    assert err.device == "cpu1" and err.task == task
    assert "hung" in str(err) and repr(task) in str(err)
    _assert_clean(pids, shm)


def test_an_exception_in_a_worker_is_reported(setup: dict[str, Any]) -> None:
    task = setup["vertex_on"]["cpu1"]
    err, pids, shm = _run_with(setup, Fault("raise", "cpu1", task, request=2))
    assert err.device == "cpu1" and err.request == 2
    assert "injected fault" in str(err) and repr(task) in str(err)
    _assert_clean(pids, shm)


def test_a_worker_killed_from_outside_ends_the_run(setup: dict[str, Any]) -> None:
    def kill(ex: Executor) -> None:
        os.kill(ex.worker_pids["cpu1"], signal.SIGKILL)
        time.sleep(0.2)

    err, pids, shm = _run_with(setup, None, before=kill)
    assert err.device == "cpu1" and "killed by signal 9" in str(err)
    _assert_clean(pids, shm)


def test_keyboard_interrupt_stops_everything(setup: dict[str, Any]) -> None:
    # Python's own Ctrl-C handler, whatever an earlier import in this session installed
    # (in the full suite the SIGINTs below were once never turned into KeyboardInterrupt)
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _interrupt_a_hung_run(setup)
    finally:
        signal.signal(signal.SIGINT, old)


def _interrupt_a_hung_run(setup: dict[str, Any]) -> None:
    # the host (cpu0, run in this process: the thread Ctrl-C lands on) hangs
    task = setup["vertex_on"]["cpu0"]
    ex = Executor(setup["program"], setup["source"], reference_inputs=setup["inputs"][0],
                  timeout_s=60, fault=Fault("hang", "cpu0", task), warm_calls=0,
                  partition_files=setup["files"])
    try:
        ex.start()
        pids, shm = ex.worker_pids, ex.shm_name
        done = threading.Event()

        def interrupt() -> None:
            # Ctrl-C every half second until the run gives up (a signal that lands while
            # the main thread is between two system calls may be handled late)
            while not done.wait(0.5):
                os.kill(os.getpid(), signal.SIGINT)

        timer = threading.Thread(target=interrupt, daemon=True)
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                ex.run(setup["inputs"])
        finally:
            done.set()
            timer.join()
    finally:
        ex.close()
    _assert_clean(pids, shm)


def test_a_fault_naming_no_task_is_refused(setup: dict[str, Any]) -> None:
    ex = Executor(setup["program"], setup["source"], reference_inputs=setup["inputs"][0],
                  fault=Fault("crash", "cpu0", "no-such-task"), partition_files=setup["files"])
    with pytest.raises(InputError, match="no-such-task"):
        ex.start()
    assert not own_segments()
    with pytest.raises(ValueError):
        Fault("explode", "cpu0", "x")


# ---- bad plan files ------------------------------------------------------------------------


def test_a_corrupt_plan_file_is_a_spec_error(tmp_path: Any) -> None:
    path = tmp_path / "plan.json"
    path.write_text('{"schema_version": 1, "model": ')
    with pytest.raises(SpecError) as info:
        validate_plan(path, machine=local_machine())
    assert str(path) in str(info.value)
    path.write_text(json.dumps({"schema_version": 1, "model": "zoo:mlp"}))
    with pytest.raises(SpecError):
        validate_plan(path, machine=local_machine())
    with pytest.raises(InputError, match="cannot read"):
        validate_plan(tmp_path / "missing.json", machine=local_machine())


def test_a_plan_for_a_preset_is_refused(tmp_path: Any) -> None:
    from placewise.cost.roofline import RooflineModel
    from placewise.hardware.load import load_machine
    from placewise.schedule import Placement, Problem

    m = load_machine("jetson-agx-orin")
    src = tiny_source()
    prob = Problem(src.graph, None, m, RooflineModel(m))
    ev = evaluate(prob, Placement.uniform(prob.vertex_names, m.devices[0].name,
                                          m.devices[0].dtypes[0]))
    path = tmp_path / "preset.json"
    save_plan(build_plan(prob, ev, model_ref=TINY_MLP, strategy="test"), path)
    with pytest.raises(InputError, match="preset machine 'jetson-agx-orin'"):
        validate_plan(path)


def test_a_plan_for_another_machine_names_the_fingerprint(tmp_path: Any) -> None:
    plan, _ = tiny_plan()
    data = plan_to_json(plan)
    data["fingerprints"]["machine"] = "sha256:" + "0" * 64
    path = tmp_path / "other.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as info:
        validate_plan(path, machine=local_machine())
    assert "fingerprints.machine" in str(info.value) and "sha256:0000" in str(info.value)


def test_a_plan_for_another_model_is_refused(tmp_path: Any) -> None:
    plan, _ = tiny_plan()
    data = plan_to_json(plan)
    data["fingerprints"]["graph"] = "sha256:" + "1" * 64
    path = tmp_path / "graph.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"fingerprints\.graph"):
        validate_plan(path, machine=local_machine())
    assert np.isfinite(plan.makespan_s)
