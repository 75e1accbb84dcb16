"""serve --real: the open-loop load generator driving the executor through the simulator's
queue; conservation, batching under a burst, admission, the wall limit, and clean-up on
Ctrl-C and on a worker fault."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
from typing import Any

import numpy as np
import pytest

from placewise.errors import ExecutionError, InputError, PlacewiseError
from placewise.plan import Plan, build_plan
from placewise.runtime.executor import Completion, Executor, Fault
from placewise.runtime.opexec import ModelSource, load_source, request_inputs
from placewise.runtime.program import program_from_plan
from placewise.schedule import evaluate
from placewise.serve.policies import max_batch, parse_batching
from placewise.serve.queue import Admission
from placewise.serve.real import SERVE, RealServe, serve_real
from placewise.serve.sim import Workload
from tests.runtime.helpers import (
    TINY_MLP,
    local_machine,
    own_segments,
    partition_files,
    problem_of,
    split_placement,
)

BATCH = 4


@pytest.fixture(scope="module")
def setup() -> dict[str, Any]:
    """A batch-4 plan of the tiny MLP across the test machine's devices (fp32: no int8
    session to build), its source and its partitions compiled once."""
    src = load_source(TINY_MLP, batch=BATCH)
    prob = problem_of(src, batch=BATCH)
    plan = build_plan(prob, evaluate(prob, split_placement(prob, int8=False)),
                      model_ref=TINY_MLP, strategy="test")
    assert src.graph is not None
    program = program_from_plan(plan, src.graph, local_machine())
    vertex_on = {t.device: t.name for t in program.tasks if t.kind.value == "compute"}
    return {"plan": plan, "source": src, "files": partition_files(program, src),
            "vertex_on": vertex_on, "program": program}


def _serve(setup: dict[str, Any], times: Any, batching: str, **kw: Any) -> RealServe:
    opts = {"partition_files": setup["files"], **kw.pop("executor_options", {})}
    plan: Plan = setup["plan"]
    src: ModelSource = setup["source"]
    return serve_real(plan, times, parse_batching(batching), source=src,
                      machine=local_machine(), warmup=kw.pop("warmup", 2),
                      executor_options=opts, **kw)


def _assert_clean() -> None:
    assert not mp.active_children()  # every worker process joined
    assert not own_segments()  # every shared-memory segment unlinked


def test_a_burst_is_queued_and_batched_and_every_request_is_counted(
        setup: dict[str, Any]) -> None:
    times = np.zeros(22)  # 22 requests at once: 5 batches of 4, 2 left for static:4
    got = _serve(setup, times, "static:4", keep_telemetry=True)
    r = got.result
    assert r.conserved() and r.arrived == 22
    assert r.completed == 20 and r.in_flight == 2 and r.rejected == r.timed_out == 0
    assert r.batch_sizes.tolist() == [4] * 5 and r.padded == 0
    # open loop: nobody waited for a completion to arrive, so the burst queued
    assert float(r.wait_s.max()) > 0 and bool((r.latency_s >= r.wait_s).all())
    assert len(r.latency_s) == len(r.classes) == r.completed
    assert got.late_s.n == 22 and got.late_s.max_s >= 0
    assert r.resources and len(r.busy_s) == len(r.resources) and max(r.busy_s) > 0
    assert all(b <= r.span_s + 1e-9 for b in r.busy_s)
    tel = got.telemetry
    assert tel is not None
    assert len(tel.requests_of(SERVE)) == 5  # the batches, as executor requests
    assert got.tags["batching"] == "static:4" and got.tags["plan_batch"] == "4"
    _assert_clean()


def test_dynamic_batching_pads_to_the_plans_batch(setup: dict[str, Any]) -> None:
    rng = np.random.default_rng(0)
    times = np.concatenate([np.zeros(10), 0.05 + np.cumsum(rng.exponential(0.002, 30))])
    classes = np.array([i % 2 for i in range(len(times))])
    got = _serve(setup, Workload(times, classes), "dynamic:max_batch=4,max_delay=1ms",
                 priorities=(1, 2), in_flight=2)
    r = got.result
    assert r.conserved() and r.arrived == 40 and r.completed == 40
    assert int(r.batch_sizes.sum()) == 40 and int(r.batch_sizes.max()) > 1
    assert r.padded == BATCH * len(r.batch_sizes) - 40
    assert r.arrived_by_class == (20, 20) and sorted(r.classes.tolist()) == [0] * 20 + [1] * 20
    _assert_clean()


def test_a_queue_limit_rejects_under_overload(setup: dict[str, Any]) -> None:
    # 30 at once into a queue of 5: all are offered before the first batch is formed
    got = _serve(setup, np.zeros(30), "none", admission=Admission(queue_limit=5))
    r = got.result
    assert r.rejected == 25 and r.completed == 5 and r.conserved()
    assert r.batch_sizes.tolist() == [1] * 5 and r.padded == 5 * (BATCH - 1)


def test_queued_requests_time_out(setup: dict[str, Any]) -> None:
    got = _serve(setup, np.zeros(40), "none", admission=Admission(timeout_s=1e-3))
    r = got.result
    assert r.timed_out > 0 and r.completed > 0 and r.conserved()
    assert bool((r.wait_s <= 1e-3 + 1e-9).all())  # nothing sent after its timeout


def test_the_wall_limit_stops_the_run(setup: dict[str, Any]) -> None:
    times = np.arange(2000) * 0.05  # 100 s of arrivals
    got = _serve(setup, times, "none", limit_s=0.5)
    r = got.result
    assert r.conserved() and 1 <= r.arrived <= 12  # what arrived in 0.5 s
    assert any("wall limit" in n for n in got.notes)
    _assert_clean()


def test_a_keyboard_interrupt_mid_run_leaves_nothing_behind(setup: dict[str, Any]) -> None:
    def progress(message: str, _f: float) -> None:
        if " arrived, " in message:  # a report from inside the timed run
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _serve(setup, np.arange(400) * 0.01, "none", progress=progress, progress_s=0.05)
    _assert_clean()


def test_ctrl_c_mid_run_leaves_nothing_behind(setup: dict[str, Any]) -> None:
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    serving = threading.Event()
    stop = threading.Event()

    def progress(message: str, _f: float) -> None:
        if message.startswith("serving"):
            serving.set()

    def interrupt() -> None:
        serving.wait(120)
        # Ctrl-C every 0.2 s until the run gives up (one that lands between two system
        # calls may be handled late)
        while not stop.wait(0.2):
            os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Thread(target=interrupt, daemon=True)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            _serve(setup, np.arange(3000) * 0.01, "none", progress=progress, limit_s=30.0)
    finally:
        stop.set()
        serving.set()
        timer.join()
        signal.signal(signal.SIGINT, old)
    _assert_clean()


@pytest.mark.parametrize("kind", ["raise", "crash"])
def test_a_worker_fault_is_an_error_with_nothing_left(setup: dict[str, Any], kind: str
                                                      ) -> None:
    task = setup["vertex_on"]["cpu1"]  # cpu1 runs in a worker process of its own
    fault = Fault(kind, "cpu1", task, request=5)  # after 2 warm-up requests: the 4th batch served
    with pytest.raises(ExecutionError) as info:
        _serve(setup, np.arange(20) * 0.001, "none", executor_options={"fault": fault})
    assert info.value.device == "cpu1" and info.value.request == 5
    _assert_clean()


def test_bad_arguments_are_refused_before_anything_runs(setup: dict[str, Any]) -> None:
    with pytest.raises(InputError, match="batches of up to 8") as info:
        _serve(setup, np.zeros(3), "static:8")
    assert info.value.place == "--batching"
    with pytest.raises(InputError, match="class indices"):
        _serve(setup, Workload(np.zeros(2), np.array([0, 1])), "none")
    with pytest.raises(InputError, match="wall limit"):
        _serve(setup, np.zeros(2), "none", limit_s=0.0)
    with pytest.raises(InputError, match="non-decreasing"):
        _serve(setup, np.array([1.0, 0.0]), "none")
    assert max_batch(parse_batching("dynamic:max_batch=6,max_delay=1ms")) == 6
    _assert_clean()


def test_the_executor_serves_an_open_loop_client(setup: dict[str, Any]) -> None:
    """submit / poll / finish: requests go in without waiting, come back as they are done,
    with the outputs run() gives, and are recorded under the phase finish() names."""
    src: ModelSource = setup["source"]
    assert src.graph is not None
    reqs = request_inputs(src, src.graph, 3, 0)
    with Executor(setup["program"], src, reference_inputs=reqs[0], slots=2,
                  partition_files=setup["files"]) as ex:
        ex.start()
        want = ex.run(reqs, phase="closed")
        assert ex.poll(0.01) == [] and ex.outstanding == 0  # nothing in flight: a wait
        a, b = ex.submit(reqs[0]), ex.submit(reqs[1])
        assert ex.outstanding == 2 and not ex.can_submit
        with pytest.raises(PlacewiseError, match="no free slot"):
            ex.submit(reqs[2])
        got: list[Completion] = []
        while len(got) < 2:
            got += ex.poll(1.0)
        assert sorted(c.request for c in got) == [a, b]
        for c in got:
            assert c.submit_ns < c.outputs_ns <= c.done_ns
            np.testing.assert_allclose(c.outputs[0], want[c.request - a][0], rtol=1e-6)
        c3 = ex.submit(reqs[2])
        with pytest.raises(PlacewiseError, match="finish"):
            ex.run(reqs, phase="mixed")  # the open-loop requests are not finished
        rest = ex.finish("open")
        assert [c.request for c in rest] == [c3] and ex.outstanding == 0
        tel = ex.telemetry()
        assert [r.request for r in tel.requests_of("open")] == [a, b, c3]
        assert len(tel.requests_of("closed")) == 3
        assert {t.phase for t in tel.tasks} == {"closed", "open"}
    _assert_clean()
