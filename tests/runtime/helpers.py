"""Shared builders for the runtime and validation tests (not a test module).

``local_machine()`` is this machine's devices as ``placewise hw probe`` lays them out (fp32
torch on the first usable core, int8/fp32 onnxruntime on the second, both cores together)
with round, hand-written numbers instead of measurements, so that tests never probe.
``tiny_plan()`` places a tiny zoo MLP across the devices, with an int8 vertex, so that a
run has transfers and conversions. ``partition_files()`` compiles a program's partitions
once per test session, for the runs whose subject is not the compilation (faults, clean-up).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

from placewise.cost.load import load_cost_model
from placewise.hardware.spec import Machine
from placewise.plan import Plan, build_plan
from placewise.runtime.executor import SHM_PREFIX
from placewise.runtime.opexec import ModelSource, load_source
from placewise.runtime.program import ExecProgram
from placewise.schedule import Assignment, Placement, Problem, evaluate
from placewise.units import DType

TINY_MLP = "zoo:mlp?layers=2&hidden=32&in_features=16&out_features=8"


def _cores() -> tuple[int, int]:
    usable = sorted(os.sched_getaffinity(0))
    return usable[0], usable[1] if len(usable) > 1 else usable[0]


@lru_cache(maxsize=1)
def local_machine() -> Machine:
    c0, c1 = _cores()
    src = "hand-written for tests"

    def tier() -> dict[str, Any]:
        return {"name": "dram", "capacity_bytes": 8 * 2**30, "bandwidth_bytes_per_s": 1e10,
                "shared_with": "dram-mc", "source": src}

    devices: list[dict[str, Any]] = [
        {"name": "cpu0", "kind": "cpu", "model": "test core 0, torch fp32",
         "peak_flops_per_s": {"fp32": 5e10}, "peak_source": src, "memory": [tier()],
         "launch_overhead_s": 3e-6, "launch_source": src, "resources": ["dram-mc"],
         "cores": [c0], "backend": "torch"},
        {"name": "cpu1", "kind": "cpu", "model": "test core 1, onnxruntime int8/fp32",
         "peak_flops_per_s": {"fp32": 3e10, "int8": 1e11}, "peak_source": src,
         "memory": [tier()], "launch_overhead_s": 1e-5, "launch_source": src,
         "resources": ["dram-mc"], "cores": [c1], "backend": "onnxruntime"},
    ]
    if c1 != c0:
        devices.append(
            {"name": "cpu01", "kind": "cpu", "model": "test cores 0-1, torch fp32",
             "peak_flops_per_s": {"fp32": 9e10}, "peak_source": src, "memory": [tier()],
             "launch_overhead_s": 3e-6, "launch_source": src, "compute_units": 2,
             "resources": ["dram-mc"], "cores": [c0, c1], "backend": "torch"})
    names = [d["name"] for d in devices]
    links = [{"name": f"shm-{a}-{b}", "endpoints": [a, b], "bandwidth_bytes_per_s": 5e9,
              "latency_s": 2e-5, "duplex": False, "resource": "dram-mc", "source": src}
             for i, a in enumerate(names) for b in names[i + 1:]]
    return Machine.model_validate({
        "name": "local-test", "devices": devices, "links": links,
        "shared_resources": [{"name": "dram-mc", "kind": "memory_controller",
                              "bandwidth_bytes_per_s": 1.5e10, "source": src}]})


@lru_cache(maxsize=4)
def tiny_source(ref: str = TINY_MLP) -> ModelSource:
    return load_source(ref)


def problem_of(source: ModelSource, machine: Machine | None = None, batch: int = 1
               ) -> Problem:
    m = machine or local_machine()
    assert source.graph is not None
    return Problem(source.graph, None, m, load_cost_model(m, None), batch=batch)


def split_placement(problem: Problem, *, int8: bool = True) -> Placement:
    """First half of the vertices on cpu0, the second linear on cpu1 (int8 when asked),
    the rest on cpu0; with three devices, the last vertex on cpu01."""
    names = problem.vertex_names
    out: dict[str, Assignment] = {}
    linears = [v.name for v in problem.vertices if v.ops[0].kind.value == "linear"]
    target = linears[1] if len(linears) > 1 else linears[0]
    for v in names:
        out[v] = Assignment("cpu0", DType.FP32)
    out[target] = Assignment("cpu1", DType.INT8 if int8 else DType.FP32)
    if "cpu01" in problem.machine.device_names:
        out[names[-1]] = Assignment("cpu01", DType.FP32)
    return Placement.of(out)


def tiny_plan(source: ModelSource | None = None, *, int8: bool = True,
              model_ref: str = TINY_MLP) -> tuple[Plan, Problem]:
    src = source or tiny_source()
    prob = problem_of(src)
    ev = evaluate(prob, split_placement(prob, int8=int8))
    return build_plan(prob, ev, model_ref=model_ref, strategy="test"), prob


def own_segments() -> set[str]:
    """Shared-memory segments this process's executors created and did not unlink."""
    prefix = f"{SHM_PREFIX}{os.getpid()}-"
    try:
        return {p.name for p in Path("/dev/shm").iterdir() if p.name.startswith(prefix)}
    except OSError:
        return set()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


_COMPILED: dict[tuple[Any, ...], tuple[ModelSource, dict[str, str]]] = {}


def partition_files(program: ExecProgram, source: ModelSource) -> dict[str, str]:
    """The program's partitions compiled to ONNX files once per test session and source
    (``Executor(..., partition_files=...)``): a run whose subject is a fault or the clean-up
    need not export the same partitions again. Runs that test the compilation itself let
    the executor compile."""
    from placewise.runtime.compile import write_partitions

    key = (id(source), tuple((p.name, tuple(o.name for o in p.ops), p.dtype, p.inputs,
                              p.outputs) for p in program.partitions))
    hit = _COMPILED.get(key)
    if hit is not None and hit[0] is source:
        return dict(hit[1])
    folder = tempfile.mkdtemp(prefix="placewise-test-partitions-")
    atexit.register(shutil.rmtree, folder, True)
    files = write_partitions(source, program.partitions, program.graph, folder)
    _COMPILED[key] = (source, files)  # the source is held: its id is never reused
    return dict(files)
