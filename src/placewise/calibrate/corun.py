"""Co-run slowdown and wake-up latency, measured on this machine's CPU devices.

Model-order calibration (``placewise.calibrate.context``) times every region with one
device computing at a time. Two things it cannot see make multi-device plans miss
(BENCHMARKS.md, "Validation with partitioned execution"): a region runs slower while
another core computes (shared caches, memory bandwidth, the hypervisor), and a hand-off to
a worker that sleeps waits for the operating system to wake it (the executor's workers on
cores another device shares may not spin: ``runtime.executor``). This module measures both
with real processes pinned to the devices' cores; ``profile_corun`` adds them to a
calibration, ``CalibratedModel`` answers from them (``corun_slowdown``, ``wake_s``) and the
scheduler applies them (``placewise.schedule.simulate``).

**Co-run slowdown** (``measure_corun``). For every ordered pair (A, B) of local devices on
disjoint cores (the probed ``local`` machine: ``cpu0`` and ``cpu1``; ``cpu01`` shares both
cores, so it never computes beside another device) and every precision A runs (fp32, and
int8 where A runs it: regions of ``graph.ir.INT8_KINDS`` in int8, the rest fp32):

- the model's single-device program on A is compiled (``runtime.compile``), one ONNX model
  per partition, and its boundary values are made once from a seeded request
  (``runtime.profiler.chain``);
- B is kept busy by a process pinned to B's cores that runs B's own fp32 partitions of the
  same model back to back in onnxruntime sessions (``runtime.backends.onnxruntime``,
  ``intra_op_num_threads`` = B's cores); between measurements it pauses (waits on an event);
- each *round*, every partition of A is profiled node by node (onnxruntime's profiler,
  ``runtime.profiler.profile_partition``, pinned to A's cores) with B paused, then with B
  busy; a region's time is the sum of its ops' node times, and its sample is the ratio
  busy / alone within the round (regions onnxruntime fused away, 0 s alone, give none);
- rounds are round-robin over the pairs until ``rounds`` are done or ``max_time_s`` is
  spent (at least one round); this machine's speed drifts by tens of percent over seconds,
  so of each pair's rounds the quieter half (by A's total node time alone) is kept;
- samples of one region key (``cost.calibrated.region_key``: identical layers share it)
  give a ``CorunMeasurement`` of level ``region`` (median, p10, p90, count); per op class
  (``region_class``) and precision, each kept round's summed busy time over summed alone
  time gives one sample of level ``class``, what regions of other models fall back to.

**Wake-up latency** (``measure_wake``). A receiver process pinned to the device's cores
waits on a pipe, message by message alternately blocking in
``multiprocessing.connection.wait`` (as a worker that may not spin) and polling it with a
zero timeout (as one that spins); the receiver is a plain interpreter (stdlib only), so it
starts in milliseconds; the parent, pinned
to a core outside the device where there is one, pauses 0.5-2 ms (long enough for the
receiver to be descheduled) and sends ``time.monotonic_ns()``; the receiver's sample is
the time from that stamp to its resuming. Per device the median, p10, p90 and count of
both modes become ``DeviceRecord.wake_sleep`` and ``wake_poll``.

Links measured by model-order calibration are flagged (``LinkMeasurement.receiver_sleeps``)
with whether their receiver slept in those runs: the alternating run of a pair has the
pair and the host (the machine's first CPU device) as its devices, and the scheduler's
rule says whose worker sleeps (``link_receiver_sleeps``).

Nothing here runs inside a timed run of the executor; progress goes through
``progress(done, total, message)``; the library never prints.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from placewise.cost.calibrated import (
    CalibratedModel,
    Calibration,
    CorunMeasurement,
    StepOverhead,
    region_class,
    region_key,
)
from placewise.errors import ExecutionError, InputError
from placewise.graph.fuse import fuse
from placewise.graph.ir import INT8_KINDS
from placewise.hardware.spec import Device, DeviceKind, Machine
from placewise.runtime.backends.onnxruntime import CPU, Provider, make_session
from placewise.runtime.compile import compile_partitions, save_partitions
from placewise.runtime.profiler import chain, profile_partition
from placewise.runtime.program import program_from_schedule
from placewise.schedule.placement import Assignment, Placement, Problem, feasible_assignments
from placewise.schedule.simulate import schedule, sleeping_threads, worker_threads
from placewise.units import DType

if TYPE_CHECKING:
    from placewise.graph.fuse import Partition
    from placewise.graph.ir import Graph
    from placewise.runtime.opexec import ModelSource

__all__ = [
    "CORUN_METHOD",
    "WAKE_POLL_METHOD",
    "WAKE_SLEEP_METHOD",
    "corun_pairs",
    "link_receiver_sleeps",
    "measure_corun",
    "measure_wake",
    "profile_corun",
    "summarize_ratios",
]

Progress = Callable[[int, int, str], None]

CORUN_METHOD = ("onnxruntime's profiler on every partition of the device's single-device "
                "program, pinned to its cores, alone and with the other device running the "
                "same model's fp32 partitions back to back on its own cores; ratio busy / "
                "alone per round, the quieter half of the rounds")
WAKE_SLEEP_METHOD = ("a pipe message's send stamp -> a receiver process pinned to the "
                     "device's cores resuming from a blocking wait (0.5-2 ms idle before)")
WAKE_POLL_METHOD = ("a pipe message's send stamp -> a receiver process pinned to the "
                    "device's cores seeing it while polling")
_CTX = mp.get_context("spawn")
#: idle gaps before each wake-up message (seconds), cycled
_GAPS_S = (5e-4, 1e-3, 1.5e-3, 2e-3)


# ---- wake-up -----------------------------------------------------------------------------------
#: the receiver: a plain interpreter (stdlib only, so it starts in milliseconds) pinned to
#: the device's cores; message k is awaited blocking when k is even, polling when odd
_RECEIVER = """
import json, os, sys, time
from multiprocessing.connection import wait
data, out, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
cores = [int(c) for c in sys.argv[4].split(",") if c]
if cores:
    os.sched_setaffinity(0, set(cores))
os.write(out, b"r")
got = []
for k in range(n):
    if k % 2 == 0:
        wait([data])
    else:
        while not wait([data], 0):
            pass
    now = time.monotonic_ns()
    got.append(now - int.from_bytes(os.read(data, 8), "little"))
os.write(out, json.dumps(got).encode() + b"\\n")
"""


def _read_line(fd: int, deadline: float) -> bytes:
    buf = b""
    while not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise TimeoutError
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def measure_wake(device: Device, *, samples: int = 40,
                 sender_cores: Sequence[int] | None = None,
                 timeout_s: float = 60.0) -> dict[str, list[float]]:
    """Seconds from a pipe message's send stamp to a receiver process pinned to
    ``device``'s cores resuming, ``samples`` times each when it blocks (``"sleep"``) and
    when it polls (``"poll"``), alternating. The sender (this process) is pinned to
    ``sender_cores`` meanwhile (default: the usable cores outside the device's, else all
    of them)."""
    if samples < 1:
        raise InputError(f"samples must be >= 1, got {samples}", place="wake samples")
    cores = list(device.cores or ())
    usable = sorted(os.sched_getaffinity(0))
    send = list(sender_cores) if sender_cores is not None else (
        [c for c in usable if c not in cores] or usable)
    data_r, data_w = os.pipe()
    out_r, out_w = os.pipe()
    old = os.sched_getaffinity(0)
    proc = subprocess.Popen(
        [sys.executable, "-c", _RECEIVER, str(data_r), str(out_w), str(2 * samples),
         ",".join(str(c) for c in cores)], pass_fds=(data_r, out_w),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    os.close(data_r)
    os.close(out_w)
    try:
        deadline = time.monotonic() + timeout_s
        if not select.select([out_r], [], [], timeout_s)[0] or os.read(out_r, 1) != b"r":
            raise ExecutionError(f"the wake-up receiver on {device.name} did not start "
                                 f"within {timeout_s:.0f} s")
        os.sched_setaffinity(0, set(send))
        for k in range(2 * samples):
            time.sleep(_GAPS_S[(k // 2) % len(_GAPS_S)])
            os.write(data_w, time.monotonic_ns().to_bytes(8, "little"))
        got = [int(x) for x in json.loads(_read_line(out_r, deadline))]
    except (EOFError, OSError, TimeoutError, ValueError):
        proc.kill()
        err = proc.communicate()[1].decode(errors="replace").strip().splitlines()
        raise ExecutionError(f"the wake-up receiver on {device.name} failed (exit "
                             f"{proc.returncode}): {err[-1] if err else 'no message'}"
                             ) from None
    finally:
        os.sched_setaffinity(0, old)
        os.close(data_w)
        os.close(out_r)
        if proc.poll() is None:
            try:
                proc.wait(5.0)
            except subprocess.TimeoutExpired:  # pragma: no cover - a stuck receiver
                proc.kill()
                proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    xs = [max(x, 0) / 1e9 for x in got]
    return {"sleep": xs[0::2], "poll": xs[1::2]}


def link_receiver_sleeps(machine: Machine, src: str, dst: str, host: str) -> bool:
    """Whether ``dst``'s worker slept in model-order calibration's run alternating between
    ``src`` and ``dst`` (its devices: the two and ``host``): the scheduler's rule
    (``schedule.simulate.worker_threads`` / ``sleeping_threads``, as the executor runs
    them): its thread sleeps and ``src`` runs on another thread.

    >>> from placewise.hardware.spec import Machine
    >>> def dev(n, c):
    ...     return {"name": n, "kind": "cpu", "peak_flops_per_s": {"fp32": 1e9},
    ...             "peak_source": "t", "launch_overhead_s": 0.0, "launch_source": "t",
    ...             "memory": [{"name": "m", "capacity_bytes": 1, "bandwidth_bytes_per_s": 1,
    ...                         "source": "t"}], "cores": c, "backend": "onnxruntime"}
    >>> names = {"cpu0": [0], "cpu1": [1], "cpu01": [0, 1]}
    >>> m = Machine.model_validate({"name": "l", "devices": [dev(n, c) for n, c in names.items()],
    ...     "links": [{"name": a + b, "endpoints": [a, b], "bandwidth_bytes_per_s": 1e9,
    ...                "latency_s": 0.0, "source": "t"} for a, b in
    ...               (("cpu0", "cpu1"), ("cpu0", "cpu01"), ("cpu1", "cpu01"))]})
    >>> [link_receiver_sleeps(m, a, b, "cpu0") for a, b in
    ...  (("cpu0", "cpu1"), ("cpu0", "cpu01"), ("cpu01", "cpu1"), ("cpu1", "cpu01"))]
    [False, False, True, False]
    """
    threads = worker_threads(machine, [src, dst], host)
    return threads[dst] in sleeping_threads(machine, threads) and threads[src] != threads[dst]


# ---- co-run ------------------------------------------------------------------------------------
def corun_pairs(devices: Sequence[Device]) -> list[tuple[Device, Device]]:
    """Ordered pairs (measured, busy) of devices on disjoint cores.

    >>> from placewise.schedule.testing import toy_machine
    >>> corun_pairs(toy_machine().devices)
    []
    """
    out = []
    for a in devices:
        for b in devices:
            if a.name != b.name and a.cores and b.cores and not set(a.cores) & set(b.cores):
                out.append((a, b))
    return out


def summarize_ratios(xs: Sequence[float]) -> tuple[float, float, float, int]:
    """(median, p10, p90, count) of ratio samples.

    >>> summarize_ratios([1.0, 1.2, 1.1])
    (1.1, 1.02, 1.18, 3)
    """
    a = np.asarray(xs, dtype=float)
    med, lo, hi = (float(np.round(v, 12)) for v in (np.median(a), np.quantile(a, 0.1),
                                                     np.quantile(a, 0.9)))
    return med, min(lo, med), max(hi, med), len(a)


def _busy_loop(paths: list[str], feeds: list[dict[str, Any]], cores: list[int],
               go: Any, stop: Any, running: Any, count: Any) -> None:  # pragma: no cover
    """Runs in a spawned process: ``paths``' partitions back to back while ``go`` is set."""
    if cores:
        os.sched_setaffinity(0, set(cores))
    sessions = [make_session(p, Provider(CPU), threads=max(1, len(cores))) for p in paths]
    outs = [[o.name for o in s.get_outputs()] for s in sessions]
    while not stop.is_set():
        if not go.is_set():
            running.value = 0
            go.wait(0.05)
            continue
        running.value = 1
        for s, o, fd in zip(sessions, outs, feeds, strict=True):
            s.run(o, fd)
        with count.get_lock():
            count.value += 1
    running.value = 0


@dataclass
class _Busy:
    """A process keeping one device busy with the model's partitions (see the module
    docstring); paused until ``resume``."""

    device: str
    proc: Any
    go: Any
    stop: Any
    running: Any
    count: Any

    @classmethod
    def start(cls, device: Device, paths: list[str], feeds: list[dict[str, Any]]) -> _Busy:
        go, stop = _CTX.Event(), _CTX.Event()
        running, count = _CTX.Value("i", 0), _CTX.Value("q", 0)
        proc = _CTX.Process(target=_busy_loop, daemon=True, args=(
            paths, feeds, list(device.cores or ()), go, stop, running, count))
        proc.start()
        return cls(device.name, proc, go, stop, running, count)

    def resume(self, timeout_s: float) -> None:
        """Run, and return once at least one more pass of the model has finished."""
        start = self.count.value
        self.go.set()
        self._until(lambda: self.count.value > start, timeout_s, "start")

    def pause(self, timeout_s: float) -> None:
        self.go.clear()
        self._until(lambda: self.running.value == 0, timeout_s, "pause")

    def _until(self, cond: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not cond():
            if not self.proc.is_alive():
                raise ExecutionError(f"the process keeping {self.device} busy died (exit "
                                     f"{self.proc.exitcode})")
            if time.monotonic() > deadline:
                raise ExecutionError(f"the process keeping {self.device} busy did not "
                                     f"{what} within {timeout_s:.0f} s")
            time.sleep(5e-4)

    def close(self) -> None:
        self.stop.set()
        self.go.set()
        self.proc.join(10.0)
        if self.proc.is_alive():  # pragma: no cover - stuck in a run
            self.proc.kill()
            self.proc.join()


@dataclass
class _Job:
    """One device and precision to measure: its program's partitions, their compiled
    models and boundary values, its vertices' ops, region keys, classes and precisions,
    and per busy device the rounds measured so far."""

    device: Device
    dtype: DType
    partitions: list[Any]
    models: dict[str, Any]
    feeds: dict[str, Any]
    vertex_ops: dict[str, tuple[str, ...]]
    regions: dict[str, tuple[str, str, str]]  # vertex -> (region key, class, dtype)
    # busy device -> per round: (total node seconds alone, vertex -> (alone, busy) seconds)
    rounds: dict[str, list[tuple[float, dict[str, tuple[float, float]]]]] = \
        field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.device.name}:{self.dtype.value}"


def _placement(problem: Any, device: str, dtype: DType) -> Any:
    """Every vertex on ``device``: in ``dtype`` where the device runs it and the executor
    has kernels (int8: regions of ``INT8_KINDS`` only), else fp32; None when a vertex runs
    there in neither."""
    out = {}
    for v in problem.vertices:
        feas = set(feasible_assignments(problem, v.name))
        runs = dtype is not DType.INT8 or all(op.kind in INT8_KINDS for op in v.ops)
        if Assignment(device, dtype) in feas and runs:
            out[v.name] = Assignment(device, dtype)
        elif Assignment(device, DType.FP32) in feas:
            out[v.name] = Assignment(device, DType.FP32)
        else:
            return None
    return Placement.of(out)


def _job(problem: Any, graph: Graph, source: ModelSource, device: Device, dtype: DType,
         inputs: Mapping[str, Any], cache: dict[tuple[Any, ...], Any]) -> _Job | None:
    """The single-device program of ``device`` in ``dtype``, compiled, with its boundary
    values; None when it cannot run there (or runs nothing in ``dtype``)."""
    pl = _placement(problem, device.name, dtype)
    if pl is None or (dtype is not DType.FP32 and all(
            a.dtype is DType.FP32 for a in pl.values())):
        return None
    prog = program_from_schedule(problem, schedule(problem, pl))
    parts = list(prog.partitions)
    models = compile_partitions(source, parts, graph, cache=cache)
    feeds = chain(models, parts, inputs)
    vertex_ops: dict[str, tuple[str, ...]] = {}
    regions: dict[str, tuple[str, str, str]] = {}
    for p in parts:
        for vname in p.tasks:
            v = problem.vertex(vname)
            dt = pl[vname].dtype
            vertex_ops[vname] = tuple(o.name for o in v.ops)
            regions[vname] = (region_key(graph, list(v.ops), dt), region_class(v.ops),
                              dt.value)
    return _Job(device, dtype, parts, models, feeds, vertex_ops, regions)


def _profile_job(job: _Job, repeats: int) -> tuple[float, dict[str, float]]:
    """(total node seconds, seconds per vertex) of one profiling pass over ``job``'s
    partitions, pinned to its device's cores."""
    cores = list(job.device.cores or ())
    per: dict[str, float] = {}
    total = 0.0
    for p in job.partitions:
        prof = profile_partition(job.models[p.name], p, job.feeds, cores=cores,
                                 repeats=repeats, warmup=max(2, repeats // 4))
        total += prof.nodes_s
        for vname in p.tasks:
            per[vname] = sum(prof.op_s.get(o, 0.0) for o in job.vertex_ops[vname])
    return total, per


def _busy_programs(problem: Any, graph: Graph, source: ModelSource, devices: Sequence[Device],
                   inputs: Mapping[str, Any], cache: dict[tuple[Any, ...], Any], folder: str
                   ) -> dict[str, tuple[list[str], list[dict[str, Any]]]]:
    """Per device: its fp32 single-device partitions as files, and each one's feeds."""
    out = {}
    for d in devices:
        job = _job(problem, graph, source, d, DType.FP32, inputs, cache)
        if job is None:
            continue
        sub = os.path.join(folder, d.name)
        os.makedirs(sub)
        paths = save_partitions(job.models, sub)
        names = [p.name for p in job.partitions]
        feeds = [{i: np.asarray(job.feeds[i]) for i in p.inputs} for p in job.partitions]
        out[d.name] = ([paths[n] for n in names], feeds)
    return out


def measure_corun(graph: Graph, source: ModelSource, machine: Machine,
                  calibration: Calibration, *, partition: Partition | None = None,
                  devices: Sequence[Device], rounds: int = 6, repeats: int = 12,
                  max_time_s: float = 60.0, seed: int = 1, timeout_s: float = 120.0,
                  progress: Progress | None = None) -> list[CorunMeasurement]:
    """The co-run slowdowns of ``graph``'s regions on ``devices`` (see the module
    docstring). ``calibration`` only orders the single-device programs (any calibration
    of this machine). Nothing to measure (no two devices on disjoint cores): []."""
    from placewise.runtime.opexec import request_inputs  # it imports torch: lazily

    pairs = corun_pairs(devices)
    if not pairs:
        return []
    t0 = time.monotonic()
    part = partition if partition is not None else fuse(graph)
    problem = Problem(graph, part, machine, CalibratedModel(machine, calibration))
    req = request_inputs(source, graph, 1, seed)[0]
    inputs = dict(zip(graph.inputs, (np.asarray(x) for x in req), strict=True))
    cache: dict[tuple[Any, ...], Any] = {}
    measured = {a.name: a for a, _ in pairs}
    jobs: list[_Job] = []
    for d in measured.values():
        for dt in [DType.FP32, *([DType.INT8] if DType.INT8 in d.dtypes else [])]:
            if progress is not None:
                progress(0, 1, f"compiling the partitions of {d.name}:{dt.value}")
            j = _job(problem, graph, source, d, dt, inputs, cache)
            if j is not None:
                jobs.append(j)
    tmp = tempfile.mkdtemp(prefix="placewise-corun-")
    busy: dict[str, _Busy] = {}
    try:
        progs = _busy_programs(problem, graph, source, list({b.name: b for _, b in pairs
                                                             }.values()),
                               inputs, cache, tmp)
        by_name = {d.name: d for d in devices}
        for name, (paths, feeds) in progs.items():
            busy[name] = _Busy.start(by_name[name], paths, feeds)
        work = [(j, b) for j in jobs for a, b in pairs if a.name == j.device.name
                and b.name in busy]
        total = rounds * len(work)
        done = 0
        for _rnd in range(rounds):
            if _rnd and time.monotonic() - t0 > max_time_s:
                break
            for j, b in work:
                if progress is not None:
                    progress(done, total, f"{j.label} alone and beside {b.name}")
                done += 1
                for other in busy.values():
                    other.pause(timeout_s)
                alone_total, alone = _profile_job(j, repeats)
                busy[b.name].resume(timeout_s)
                _, beside = _profile_job(j, repeats)
                busy[b.name].pause(timeout_s)
                j.rounds.setdefault(b.name, []).append(
                    (alone_total, {v: (alone[v], beside.get(v, 0.0)) for v in alone}))
        if progress is not None:
            progress(total, total, "co-run measurements done")
    finally:
        for x in busy.values():
            x.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return _records(jobs)


def _records(jobs: Sequence[_Job]) -> list[CorunMeasurement]:
    """Per (device, busy device): region ratios pooled by key over the quieter half of
    the rounds, and per class and precision the time-weighted ratio of each kept round."""
    region: dict[tuple[str, str, str], tuple[list[float], str, str]] = {}
    cls: dict[tuple[str, str, str, str], list[float]] = {}
    for j in jobs:
        for b, rs in sorted(j.rounds.items()):
            kept = sorted(rs, key=lambda r: r[0])[:(len(rs) + 1) // 2]
            for _total, per in kept:
                sums: dict[tuple[str, str], list[float]] = {}
                for v, (alone, beside) in per.items():
                    if alone <= 0 or beside <= 0:
                        continue  # fused into another region's node, or eliminated
                    key, c, dt = j.regions[v]
                    region.setdefault((j.device.name, b, key), ([], dt, v))[0].append(
                        beside / alone)
                    acc = sums.setdefault((c, dt), [0.0, 0.0])
                    acc[0] += alone
                    acc[1] += beside
                for (c, dt), (a_s, b_s) in sums.items():
                    cls.setdefault((j.device.name, b, c, dt), []).append(b_s / a_s)
    out: list[CorunMeasurement] = []
    for (dev, b, key), (xs, dt, label) in sorted(region.items()):
        med, lo, hi, n = summarize_ratios(xs)
        out.append(CorunMeasurement(device=dev, busy=b, level="region", key=key, dtype=dt,
                                    label=label, slowdown_median=med, slowdown_p10=lo,
                                    slowdown_p90=hi, n=n, method=CORUN_METHOD))
    for (dev, b, c, dt), xs in sorted(cls.items()):
        med, lo, hi, n = summarize_ratios(xs)
        out.append(CorunMeasurement(device=dev, busy=b, level="class", key=c, dtype=dt,
                                    label=f"{c} regions, time-weighted", slowdown_median=med,
                                    slowdown_p10=lo, slowdown_p90=hi, n=n,
                                    method=CORUN_METHOD))
    return out


def _local(machine: Machine, names: Sequence[str] | None) -> list[Device]:
    usable = [d for d in machine.devices if d.is_local]
    if names is None:
        return usable
    by = {d.name: d for d in usable}
    for n in names:
        if n not in by:
            raise InputError(f"machine {machine.name!r} has no local device {n!r} (local "
                             f"devices: {', '.join(by) or 'none'})", place="--devices")
    return [by[n] for n in names]


def _host(machine: Machine) -> str:
    """The host plans default to (``schedule.placement.Problem``): the first CPU device."""
    cpus = [d.name for d in machine.devices if d.kind is DeviceKind.CPU]
    return cpus[0] if cpus else machine.devices[0].name


def profile_corun(graph: Graph, source: ModelSource, machine: Machine,
                  calibration: Calibration, *, partition: Partition | None = None,
                  devices: Sequence[str] | None = None, rounds: int = 6, repeats: int = 12,
                  wake_samples: int = 40, max_time_s: float = 60.0, seed: int = 1,
                  timeout_s: float = 120.0, progress: Progress | None = None) -> Calibration:
    """``calibration`` with the co-run slowdowns of ``graph`` (``Calibration.corun``), the
    wake-up latencies of its devices (``DeviceRecord.wake_sleep`` / ``wake_poll``) and its
    links flagged with whether their receiver slept (``LinkMeasurement.receiver_sleeps``,
    where not recorded). ``max_time_s`` bounds the co-run rounds (at least one is run).
    Raises ``InputError`` for bad settings, ``ExecutionError`` when a helper process
    fails."""
    if rounds < 1 or repeats < 1 or wake_samples < 1 or not max_time_s > 0:
        raise InputError(f"rounds, repeats and wake samples must be >= 1 and max_time_s > 0, "
                         f"got {rounds}, {repeats}, {wake_samples} and {max_time_s}",
                         place="co-run profile settings")
    graph.check_concrete()
    devs = _local(machine, devices)
    if not devs:
        raise InputError(f"machine {machine.name!r} has no local device to profile (devices "
                         f"need cores and a backend: use --hw local)", place="--hw")
    known = {d.name for d in calibration.devices}
    devs = [d for d in devs if d.name in known]
    records = []
    for d in calibration.devices:
        dev = next((x for x in devs if x.name == d.name), None)
        if dev is None:
            records.append(d)
            continue
        if progress is not None:
            progress(0, 1, f"wake-up latency on {d.name}")
        got = measure_wake(dev, samples=wake_samples, timeout_s=timeout_s)
        records.append(d.model_copy(update={
            "wake_sleep": StepOverhead.of(got["sleep"], WAKE_SLEEP_METHOD),
            "wake_poll": StepOverhead.of(got["poll"], WAKE_POLL_METHOD)}))
    corun = measure_corun(graph, source, machine, calibration, partition=partition,
                          devices=devs, rounds=rounds, repeats=repeats, max_time_s=max_time_s,
                          seed=seed, timeout_s=timeout_s, progress=progress)
    host = _host(machine)
    names = set(machine.device_names)
    links = [lk if lk.receiver_sleeps is not None or not {lk.src, lk.dst} <= names else
             lk.model_copy(update={"receiver_sleeps": link_receiver_sleeps(
                 machine, lk.src, lk.dst, host)}) for lk in calibration.links]
    mine = {(c.device, c.busy, c.level, c.key, c.dtype) for c in corun}
    kept = [c for c in calibration.corun if (c.device, c.busy, c.level, c.key, c.dtype)
            not in mine]
    settings = dict(calibration.settings)
    settings.update({"corun_rounds": float(rounds), "corun_repeats": float(repeats),
                     "corun_max_time_s": float(max_time_s),
                     "wake_samples": float(wake_samples)})
    return calibration.model_copy(update={"devices": records, "corun": kept + corun,
                                          "links": links, "settings": settings})
