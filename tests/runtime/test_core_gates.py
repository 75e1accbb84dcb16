"""Core gates: devices that share CPU cores (cpu01 with cpu0 and cpu1) compute one at a time,
in the plan's order, in every request, isolated or pipelined.

The tiny MLP of ``helpers`` is a chain: every task depends on the one before it, so data
alone already orders it (its program needs no gate). The runs here use a tiny model with
three branches from the input instead (``Branches``: three linear+relu on one branch, one
linear on each of the others, summed), exported with ``torch.export``: a cpu0 task and an
independent cpu01 task would overlap without gates.
"""

from __future__ import annotations

import itertools
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from placewise.hardware.spec import Machine
from placewise.runtime.executor import ExecutionError, Executor, Fault
from placewise.runtime.opexec import ModelSource, load_source
from placewise.runtime.program import (
    ExecProgram,
    StepKind,
    program_from_plan,
    program_from_schedule,
)
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
    tiny_source,
)

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2,
                                reason="needs two usable cores (cpu01 shares them)")

WIDTH = 192
BATCH = 16


class Branches(nn.Module):
    """x -> (3 x linear+relu) + linear_3(x) + linear_4(x)."""

    def __init__(self) -> None:
        super().__init__()
        self.chain = nn.ModuleList([nn.Linear(WIDTH, WIDTH) for _ in range(3)])
        self.side = nn.Linear(WIDTH, WIDTH)
        self.other = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x
        for lin in self.chain:
            y = torch.relu(lin(y))
        return y + self.side(x) + self.other(x)


@pytest.fixture(scope="module")
def branches(tmp_path_factory: pytest.TempPathFactory) -> ModelSource:
    torch.manual_seed(0)
    module = Branches().eval()
    with torch.no_grad():
        ep = torch.export.export(module, (torch.randn(BATCH, WIDTH),))
    path = tmp_path_factory.mktemp("gates") / "branches.pt2"
    torch.export.save(ep, str(path))
    return load_source(str(path))


def _placement(prob: Problem, where: dict[str, str]) -> Placement:
    return Placement.of({n: Assignment(where.get(n, "cpu0"), DType.FP32)
                         for n in prob.vertex_names})


#: the side branch on cpu1, the other branch on cpu01, the rest on cpu0
WHERE = {"linear_3": "cpu1", "linear_4": "cpu01"}


@pytest.fixture(scope="module")
def gated(branches: ModelSource) -> dict[str, Any]:
    prob = problem_of(branches)
    ev = evaluate(prob, _placement(prob, WHERE))
    return {"problem": prob, "evaluation": ev,
            "program": program_from_schedule(prob, ev.schedule)}


def _shared(prog: ExecProgram, a: str, b: str) -> bool:
    return a != b and bool(set(prog.device(a).cores or ()) & set(prog.device(b).cores or ()))


def _ordered_pairs(prog: ExecProgram) -> Iterator[tuple[int, int]]:
    """(earlier, later) compute/conversion tasks of devices sharing a core, in plan order."""
    work = [t for t in prog.tasks if t.kind in (TaskKind.COMPUTE, TaskKind.CONVERSION)]
    for a, b in itertools.permutations(work, 2):
        if _shared(prog, a.device, b.device) and (a.start_s, a.index) < (b.start_s, b.index):
            yield a.index, b.index


def _happens_before(prog: ExecProgram) -> dict[tuple[str, int], set[tuple[str, int]]]:
    """Step -> every step that runs before it in a request (each worker's order, send ->
    receive, gate tokens): an independent, brute-force reading of the program."""
    preds: dict[tuple[str, int], set[tuple[str, int]]] = {}
    step_of: dict[tuple[int, StepKind], tuple[str, int]] = {}
    for dev, steps in prog.steps.items():
        for i, st in enumerate(steps):
            preds[(dev, i)] = {(dev, i - 1)} if i else set()
            if st.task >= 0:
                step_of[(st.task, st.kind)] = (dev, i)
    for dev, steps in prog.steps.items():
        for i, st in enumerate(steps):
            if st.kind is StepKind.RECV:
                preds[(dev, i)].add(step_of[(st.task, StepKind.SEND)])
            for b in st.gates_in:
                kind = (StepKind.COMPUTE if prog.tasks[b].kind is TaskKind.COMPUTE
                        else StepKind.CONVERT)
                src = step_of[(b, kind)]
                assert dev in prog.steps[src[0]][src[1]].gates_out
                preds[(dev, i)].add(src)
    closure: dict[tuple[str, int], set[tuple[str, int]]] = {}
    visiting: set[tuple[str, int]] = set()

    def walk(node: tuple[str, int]) -> set[tuple[str, int]]:
        if node in closure:
            return closure[node]
        assert node not in visiting, f"the program's steps wait in a cycle at {node}"
        visiting.add(node)
        out: set[tuple[str, int]] = set()
        for p in preds[node]:
            out.add(p)
            out |= walk(p)
        visiting.discard(node)
        closure[node] = out
        return out

    for node in preds:
        walk(node)
    return closure


def _check_program(prog: ExecProgram) -> None:
    """Every plan-ordered pair on a shared core runs in that order; no wait cycle."""
    before = _happens_before(prog)
    where = {}
    for dev, steps in prog.steps.items():
        for i, st in enumerate(steps):
            if st.kind in (StepKind.COMPUTE, StepKind.CONVERT):
                where[st.task] = (dev, i)
    for a, b in _ordered_pairs(prog):
        assert where[a] in before[where[b]], (prog.tasks[a].name, prog.tasks[b].name)
    for gt in prog.gates:
        ta, tb = prog.tasks[gt.before], prog.tasks[gt.after]
        assert _shared(prog, ta.device, tb.device)
        assert set(gt.cores) <= set(prog.device(ta.device).cores or ()) & \
            set(prog.device(tb.device).cores or ())
        assert ta.end_s <= tb.start_s + 1e-12  # the scheduler never overlaps them


# ---- the program (no processes) -----------------------------------------------------------


def test_gates_follow_the_plans_order_on_shared_cores(gated: dict[str, Any]) -> None:
    prog: ExecProgram = gated["program"]

    def ops(task: int) -> list[str]:
        return [o.name for o in prog.vertices[prog.tasks[task].name].ops]

    # cpu01's linear_4 shares core 0 with cpu0 and core 1 with cpu1: it waits for the
    # partition before it on one of them and gates the one after it on another; every gate
    # involves it (cpu0 and cpu1 share no core)
    assert all("linear_4" in ops(g.before) + ops(g.after) for g in prog.gates)
    assert {prog.tasks[g.before].device for g in prog.gates} & {"cpu01"}
    assert {prog.tasks[g.after].device for g in prog.gates} & {"cpu01"}
    _check_program(prog)
    for dev, steps in prog.steps.items():
        for st in steps:
            if st.kind not in (StepKind.COMPUTE, StepKind.CONVERT):
                assert not st.gates_in and not st.gates_out, (dev, st)


def test_random_placements_give_acyclic_complete_gates(branches: ModelSource) -> None:
    prob = problem_of(branches)
    rng = random.Random(7)
    devices = ["cpu0", "cpu1", "cpu01"]
    for _ in range(25):
        where = {n: rng.choice(devices) for n in prob.vertex_names}
        ev = evaluate(prob, _placement(prob, where))
        _check_program(program_from_schedule(prob, ev.schedule))


def test_a_plan_file_gives_the_same_gates(gated: dict[str, Any], tmp_path: Path) -> None:
    from placewise.plan import build_plan, load_plan, save_plan

    prob = gated["problem"]
    plan = build_plan(prob, gated["evaluation"], model_ref="branches.pt2", strategy="test")
    save_plan(plan, tmp_path / "plan.json")
    again = program_from_plan(load_plan(tmp_path / "plan.json"), prob.graph, prob.machine)
    assert again.gates == gated["program"].gates
    assert again.steps == gated["program"].steps


def test_no_gates_without_shared_cores() -> None:
    src = tiny_source()
    data = local_machine().model_dump(mode="json")
    data["devices"] = [d for d in data["devices"] if d["name"] != "cpu01"]
    data["links"] = [lk for lk in data["links"] if "cpu01" not in lk["endpoints"]]
    two = Machine.model_validate(data)
    prob = problem_of(src, two)
    prog = program_from_schedule(prob, evaluate(prob, split_placement(prob)).schedule)
    assert prog.gates == ()
    assert all(not st.gates_in and not st.gates_out
               for steps in prog.steps.values() for st in steps)


def test_a_chain_needs_no_gate() -> None:
    # the MLP with its last vertex on cpu01: data dependencies order everything
    src = tiny_source()
    prob = problem_of(src)
    prog = program_from_schedule(prob, evaluate(prob, split_placement(prob)).schedule)
    assert any(t.device == "cpu01" for t in prog.tasks)
    assert prog.gates == ()
    _check_program(prog)


# ---- real runs ---------------------------------------------------------------------------


def _inputs(n: int) -> list[list[np.ndarray[Any, Any]]]:
    rng = np.random.default_rng(3)
    return [[rng.standard_normal((BATCH, WIDTH)).astype(np.float32)] for _ in range(n)]


def _reference(source: ModelSource, req: list[np.ndarray[Any, Any]]) -> np.ndarray[Any, Any]:
    with torch.inference_mode():
        out = source.exported_program.module()(torch.from_numpy(req[0]))
    return np.asarray(out.detach().numpy())


def _assert_plan_order_kept(prog: ExecProgram, tel: Telemetry, phase: str) -> int:
    """In every request of ``phase``, no task starts before a task the plan runs before
    it on a shared core has ended; returns the number of pairs checked."""
    pairs = [(prog.tasks[a].name, prog.tasks[b].name) for a, b in _ordered_pairs(prog)]
    assert pairs
    checked = 0
    for req in tel.requests_of(phase):
        recs = {t.task: t for t in tel.tasks_of(req.request) if t.phase == phase}
        for a, b in pairs:
            ra, rb = recs[a], recs[b]
            assert rb.start_ns >= ra.end_ns, (
                f"request {req.request}: {b} on {rb.device} started "
                f"{(ra.end_ns - rb.start_ns) / 1e3:.0f} us before {a} on {ra.device} ended")
            checked += 1
    return checked


@pytest.fixture(scope="module")
def ran(branches: ModelSource, gated: dict[str, Any]) -> dict[str, Any]:
    inputs = _inputs(6)
    with Executor(gated["program"], branches, reference_inputs=inputs[0], slots=4,
                  timeout_s=60, partition_files=partition_files(gated["program"], branches)
                  ) as ex:  # compiled once for this and the fault runs below
        ex.start()
        isolated = ex.run(inputs, phase="isolated")
        stream = ex.run(inputs * 2, phase="stream", in_flight=4)
        tel = ex.telemetry()
        pids, shm = ex.worker_pids, ex.shm_name
    return {"inputs": inputs, "isolated": isolated, "stream": stream, "telemetry": tel,
            "pids": pids, "shm": shm}


def test_gated_runs_compute_the_right_outputs(branches: ModelSource, ran: dict[str, Any]
                                              ) -> None:
    for req, out in zip(ran["inputs"], ran["isolated"], strict=True):
        np.testing.assert_allclose(out[0], _reference(branches, req), rtol=1e-4, atol=1e-5)
    n = len(ran["inputs"])
    for i, out in enumerate(ran["stream"]):
        np.testing.assert_allclose(out[0], ran["isolated"][i % n][0], rtol=1e-6, atol=1e-7)


def test_shared_cores_are_taken_in_plan_order(gated: dict[str, Any], ran: dict[str, Any]
                                              ) -> None:
    tel: Telemetry = ran["telemetry"]
    assert _assert_plan_order_kept(gated["program"], tel, "isolated") > 0
    assert _assert_plan_order_kept(gated["program"], tel, "stream") > 0


def test_pipelined_requests_still_overlap(ran: dict[str, Any]) -> None:
    tel: Telemetry = ran["telemetry"]
    stream = sorted(tel.requests_of("stream"), key=lambda r: r.request)
    assert len(stream) == 12
    assert any(b.submit_ns < a.outputs_ns for a, b in itertools.pairwise(stream))


def test_gate_waits_are_wait_records(gated: dict[str, Any], ran: dict[str, Any]) -> None:
    prog: ExecProgram = gated["program"]
    tel: Telemetry = ran["telemetry"]
    befores = {f"gate:{prog.tasks[g.before].name}": prog.tasks[g.after].device
               for g in prog.gates}
    gate_waits = [w for w in tel.waits if w.for_task.startswith("gate:")]
    # cpu01 has its input long before cpu0 ends the chain: it waits at its gate
    assert gate_waits
    for w in gate_waits:
        assert befores.get(w.for_task) == w.device
        assert w.end_ns >= w.start_ns


def test_gated_workers_and_memory_are_gone(ran: dict[str, Any]) -> None:
    assert ran["pids"] and not any(alive(p) for p in ran["pids"].values())
    assert ran["shm"] not in own_segments()


def _fault_while_gated(branches: ModelSource, prog: ExecProgram, kind: str, request: int,
                       n: int, timeout_s: float) -> tuple[Any, ExecutionError, Any, Any]:
    """Run with ``kind`` injected into the step that a cpu01 gate waits for; returns that
    task, the error, the worker pids and the shared-memory name."""
    gate = next(g for g in prog.gates if prog.tasks[g.after].device == "cpu01")
    before = prog.tasks[gate.before]
    inputs = _inputs(n)
    ex = Executor(prog, branches, reference_inputs=inputs[0], timeout_s=timeout_s,
                  warm_calls=0, fault=Fault(kind, before.device, before.name,
                                            request=request),
                  partition_files=partition_files(prog, branches))  # compiled once
    try:
        ex.start()
        pids, shm = ex.worker_pids, ex.shm_name
        with pytest.raises(ExecutionError) as info:
            ex.run(inputs)
    finally:
        ex.close()
    return before, info.value, pids, shm


def test_a_crash_while_a_gate_waits_ends_the_run(branches: ModelSource,
                                                 gated: dict[str, Any]) -> None:
    before, err, pids, shm = _fault_while_gated(branches, gated["program"], "crash", 1, 3, 60)
    assert err.device == before.device and err.task == before.name and err.request == 1
    assert "signal 9" in str(err) and repr(before.name) in str(err)
    assert pids and not any(alive(p) for p in pids.values())
    assert shm is not None and shm not in own_segments()
    assert not own_segments()


def test_a_hang_while_a_gate_waits_is_reported(branches: ModelSource,
                                               gated: dict[str, Any]) -> None:
    before, err, pids, shm = _fault_while_gated(branches, gated["program"], "hang", 0, 2, 1.5)
    assert err.device == before.device and err.task == before.name
    assert "hung" in str(err)
    assert pids and not any(alive(p) for p in pids.values())
    assert shm is not None and not own_segments()
