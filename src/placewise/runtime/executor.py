"""Run a plan for real: one worker process per device, tensors crossing through shared memory.

``program_from_schedule(problem, schedule)`` (or ``program_from_plan(plan, graph,
machine)`` for a plan file) turns a scheduled placement into an ``ExecProgram``: every task of the schedule (compute = a vertex, ``xfer:...`` transfers,
``conv:...`` conversions) becomes a step on the worker of the device that runs it, in the
plan's order per device (predicted start time; a transfer is a *send* step on the sender at
its predicted start and a *receive* step on the receiver at its predicted end). The host
worker also has ``io:in`` (copy a request's inputs in) and ``io:out`` (copy the graph
outputs back to the client) steps.

**Core gates.** Devices whose ``cores`` overlap (the probed ``local`` machine's ``cpu01``
shares core 0 with ``cpu0`` and core 1 with ``cpu1``) must not compute at the same time:
the scheduler holds a shared core for one device at a time, and its task times assume so
(a 2-thread kernel whose second core is taken waits at its barrier). Data dependencies
alone do not keep the workers to that, so the program carries *core gates*
(``ExecProgram.gates``, ``CoreGate``): for every core shared by several devices, the
compute and conversion tasks of those devices in plan start order; where two consecutive
ones belong to different devices, the later task waits until the earlier one has finished
in the same request. Gates that the program already implies (the later step depends,
through data, transfers, each worker's step order or other gates, on the earlier one) are
dropped. Transfers are never gated (the scheduler gives them no cores). A program without
shared cores has no gates.

``Executor(program, source)`` runs it:

- **workers**: one process per device (``spawn``) — except, for partitioned programs, the
  host and the CPU devices sharing its cores, which run on the client's own thread
  (``inline_host``, see ``Executor``) — pinned to the device's cores with
  ``os.sched_setaffinity`` and ``len(cores)`` torch / onnxruntime threads, that loads the
  model itself (an ONNX file; a ``torch.export`` program from an *fx package*: the graph as
  JSON and the weights as ``.npy``, see ``pack_fx``) and keeps the weights of the ops it
  runs (once per device). Ops run through the same runners profiling timed: fx nodes of a
  ``torch.export`` program by calling their ``OpOverload`` (``FxProgram`` nodes), ONNX
  nodes as single-node onnxruntime sessions (``OnnxProgram.runner``), int8 contractions as
  onnxruntime dynamic-quantization sessions (``make_op_runner``). A device whose backend
  is ``cuda`` runs fx ops on the GPU (``torch.cuda``) when one is present.
- **transfers**: a shared-memory block (``multiprocessing.shared_memory``) holds one slot
  per transfer and request in flight; the sender copies the tensor into its slot and
  notifies the receiver through a pipe, the receiver copies it out. An int8 copy travels
  with its scale. Conversion tasks run the ``runtime.opexec`` conversion kernels where the
  plan puts them. An int8 kernel takes fp32 activations (onnxruntime dynamic
  quantization), so its int8 inputs are dequantized and its float outputs quantized around
  it: that work is timed apart (``hidden_conversion_ns``) because the plan does not name it.
- **gates**: after a gated step's earlier task has run, its worker sends a small token
  (``_GATE``: the task and the request, on the same worker-to-worker pipes as transfer
  notifications, told apart by size) to the later task's worker, which waits for it as it
  waits for a transfer: it keeps reading messages and runs other requests' ready steps
  meanwhile. A gate wait is a ``WaitRecord`` whose ``for_task`` is ``gate:{earlier task}``.
  Gates order the steps of one request; steps of different requests in flight still share
  cores (as the steady-state pipeline model assumes).
- **requests**: ``run(inputs, in_flight=1)`` runs requests one at a time;
  ``in_flight=K`` keeps K requests in the pipeline (a worker runs request k+1's ready
  steps while another device still works on request k; older requests go first). A
  request's latency runs from the client writing its inputs to the host worker having
  written its outputs to shared memory. ``run`` is a closed-loop client of the
  asynchronous API an open-loop client (``serve.real``) drives itself: ``submit(arrays)``
  hands one request over without waiting (a slot must be free: ``can_submit``),
  ``poll(timeout_s)`` runs the in-process workers and reads the others' messages until a
  request is done or the time is up and returns the ``Completion``s, ``finish(phase)``
  waits for the rest and records the requests' telemetry under ``phase``. One loop
  (``Executor._wait_some``) moves requests for both.
- **telemetry** (``runtime.telemetry``): every task's start/end on ``CLOCK_MONOTONIC``
  with the plan's task names, its CPU time, per-op times, waits, live tensor bytes per
  device, process memory, and ``solo(repeats)``: each device replays one request's steps
  alone.
- **faults**: a worker that dies, raises or makes no progress for ``timeout_s`` ends the
  run with ``ExecutionError`` naming the device, the task and the op (read from a status
  block each worker updates); every worker is stopped and the shared memory unlinked on
  every way out (also ``KeyboardInterrupt``; workers ignore SIGINT so that the parent
  shuts them down). Segment names start with ``placewise-``.

Spawned workers re-import the caller's main module: a script using the executor must guard
its top level with ``if __name__ == "__main__":``.
"""

from __future__ import annotations

import contextlib
import gc
import math
import multiprocessing as mp
import os
import secrets
import shutil
import signal
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as mp_wait
from typing import TYPE_CHECKING, Any

import numpy as np

from placewise.errors import ExecutionError, InputError, PlacewiseError, UnsupportedError
from placewise.graph.ir import Graph
from placewise.hardware.spec import Device
from placewise.runtime.backends.onnxruntime import provider_for
from placewise.runtime.backends.torch import Unpackable, pack_fx
from placewise.runtime.program import (
    ExecProgram,
)
from placewise.runtime.telemetry import (
    DeviceRecord,
    OpRecord,
    RequestRecord,
    SoloRecord,
    TaskRecord,
    Telemetry,
    WaitRecord,
    collect_tags,
)
from placewise.runtime.worker import (
    _STATUS_WORDS,
    Inbox,
    _get,
    _put,
    _put_hot,
    _rep_json,
    _Worker,
    _worker_entry,
    wait_group,
)
from placewise.schedule.simulate import TaskKind, may_poll, worker_threads
from placewise.units import DType

if TYPE_CHECKING:
    from placewise.runtime.opexec import ModelSource

__all__ = [
    "SHM_PREFIX",
    "Completion",
    "ExecutionError",
    "Executor",
    "Fault",
    "source_reload_args",
]

#: the granularity of a wait on pipes (``multiprocessing.connection.wait``: poll(2) takes
#: milliseconds, rounded up)
#: the last part of an idle wait spun rather than slept (see ``_wait_some``)
_SPIN_S = 3e-4
_WAIT_GRAIN_S = 1e-3
#: every shared-memory segment the executor creates is named ``/dev/shm/placewise-...``
SHM_PREFIX = "placewise-"
_ALIGN = 64

# ---- sources -----------------------------------------------------------------------------------


def source_reload_args(source: ModelSource, tmp_dir: str) -> dict[str, Any]:
    """How a worker gets ``source``: an ONNX file as it is; a ``torch.export`` program as
    an *fx package* under ``tmp_dir`` (``{"fx_package": folder}``: the graph as JSON, the
    weights as ``.npy`` files, nothing pickled), which a worker rebuilds in a fraction of a
    second without the ``torch.export`` deserializer (it imports ``torch._dynamo``, seconds
    per worker); a program the package cannot express is saved as ``.pt2`` instead."""
    from placewise.runtime.opexec import SourceFormat

    if source.format is SourceFormat.ONNX:
        if source.path is not None and source.path.is_file():
            return source.reload_args()
        from placewise.graph.onnx_data import save_model

        path = os.path.join(tmp_dir, "model.onnx")
        save_model(source.onnx_model, path)
        return {"ref": path, "shapes": None, "batch": None}
    folder = os.path.join(tmp_dir, "fx")
    try:
        pack_fx(source.exported_program, folder)
        return {"ref": source.ref, "fx_package": folder}
    except Unpackable:
        import torch

        path = os.path.join(tmp_dir, "model.pt2")
        torch.export.save(source.exported_program, path)
        return {"ref": path, "shapes": None, "batch": None}


# ---- faults (tests) ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Fault:
    """A fault to inject (tests): when ``device``'s worker reaches ``task`` of request
    ``request`` it ``"crash"``es (SIGKILL to itself), ``"hang"``s (sleeps) or ``"raise"``s."""

    kind: str
    device: str
    task: str
    request: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("crash", "hang", "raise"):
            raise ValueError(f"fault kind must be crash, hang or raise, got {self.kind!r}")


# ---- shared memory layout ----------------------------------------------------------------------


def _align(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


@dataclass(frozen=True, slots=True)
class _Buf:
    """A tensor slot region: ``offsets[slot]``, shape, numpy dtype name, bytes."""

    offsets: tuple[int, ...]
    shape: tuple[int, ...]
    dtype: str
    nbytes: int


def _np_dtype(dtype: DType) -> str:
    table = {DType.FP32: "float32", DType.FP16: "float16", DType.FP64: "float64",
             DType.INT8: "int8", DType.UINT8: "uint8", DType.INT16: "int16",
             DType.INT32: "int32", DType.INT64: "int64", DType.BOOL: "bool"}
    try:
        return table[dtype]
    except KeyError:
        raise UnsupportedError(f"the executor cannot hold {dtype.value} tensors in shared "
                               f"memory") from None


def _layout(program: ExecProgram, slots: int, n_workers: int
            ) -> tuple[int, dict[str, _Buf], dict[str, _Buf], dict[int, _Buf]]:
    g = program.graph
    pos = _align(n_workers * _STATUS_WORDS * 8)

    def region(shape: tuple[int, ...], dtype: DType) -> _Buf:
        nonlocal pos
        nbytes = dtype.nbytes(math.prod(shape))
        offs = []
        for _ in range(slots):
            offs.append(pos)
            pos += _align(max(nbytes, 1))
        return _Buf(tuple(offs), shape, _np_dtype(dtype), nbytes)

    ins = {t: region(g.tensor(t).concrete_shape, g.tensor(t).dtype) for t in g.inputs}
    outs = {t: region(g.tensor(t).concrete_shape, g.tensor(t).dtype) for t in g.outputs}
    xfers: dict[int, _Buf] = {}
    for t in program.transfers():
        assert t.tensor is not None and t.src_rep is not None
        xfers[t.index] = region(g.tensor(t.tensor).concrete_shape, t.src_rep.dtype)
    return max(pos, _ALIGN), ins, outs, xfers


def _buf_json(b: _Buf) -> dict[str, Any]:
    return {"offsets": list(b.offsets), "shape": list(b.shape), "dtype": b.dtype,
            "nbytes": b.nbytes}


# ---- the parent side ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Proc:
    device: str
    index: int
    proc: Any
    conn: Connection
    alive: bool = True


@dataclass(slots=True)
class _Flight:
    """A request in flight: when it was submitted, had its outputs, was done (on how many
    of its ``workers``)."""

    submit_ns: int
    workers: int
    ready_ns: int = 0
    out_ns: int = 0
    done_ns: int = 0
    done_count: int = 0
    outputs: list[np.ndarray[Any, Any]] | None = None


@dataclass(frozen=True, slots=True)
class Completion:
    """A request done on every worker (``Executor.poll``): its id, when the client
    submitted it and when the host had written its outputs (``CLOCK_MONOTONIC``
    nanoseconds, the clock of ``time.monotonic``; latency = ``outputs_ns - submit_ns``),
    when the last worker was done with it, and its outputs (graph-output order)."""

    request: int
    submit_ns: int
    outputs_ns: int
    done_ns: int
    outputs: list[np.ndarray[Any, Any]]


class Executor:
    """Worker processes running an ``ExecProgram`` (see the module docstring).

    Use as a context manager (or call ``close()``)::

        with Executor(program, source, reference_inputs=inputs[0]) as ex:
            ex.start()
            outputs = ex.run(requests, phase="isolated")
            tel = ex.telemetry()

    ``reference_inputs`` (one request's inputs, graph-input order) is what each worker runs
    once at start-up to get the integer values and shapes op runners need.
    ``slots`` bounds the requests in flight; ``timeout_s`` is how long a run may make no
    progress before it is declared hung; ``setup_timeout_s`` bounds start-up. A worker
    with nothing to run polls its pipes for ``spin_s`` before it sleeps (only when no other
    device of the program uses its cores), which saves a wake-up per transfer.
    ``omp_wait_policy`` is set as ``OMP_WAIT_POLICY`` in every worker before torch loads
    (``None``: inherit): with the default (active) policy, OpenMP threads of a multi-core
    device spin at every barrier, and when another process holds one of its cores a
    2-thread kernel waits for that process's time slice (tail latencies of tens of ms on a
    busy host); ``PASSIVE`` makes them sleep instead. With several requests in flight the
    client handles completions every ``refill_s`` while at least half the window is still
    queued, instead of waking for every message.

    ``inline_host`` runs the host device's worker in this process, on the calling thread,
    as a deployed application runs its own partitions: a request's inputs go straight to
    the host's first partition and its outputs straight back, with no process hand-off
    and no copy through shared memory (a worker process cost 50-180 us per request here;
    BENCHMARKS.md). CPU devices that share a core with the host join it on the same
    thread (the plan never has them compute while the host does): their transfers and
    gate tokens with the host go through in-process inboxes (``worker.Inbox``), not pipes.
    The thread is pinned to the cores those devices share (each session's threads keep
    their device's cores), and its pinning is put back on ``close``. ``None`` (the
    default): in-process for partitioned programs, unless a fault is injected on one of
    those devices (a crash or a hang injected into the client's own process would take the
    client with it); the op-level interpreter always runs in worker processes. An
    in-process device that hangs inside a partition cannot be timed out (as in any
    application calling onnxruntime itself).
    """

    def __init__(self, program: ExecProgram, source: ModelSource, *,
                 reference_inputs: Sequence[Any], slots: int = 4, timeout_s: float = 120.0,
                 setup_timeout_s: float = 900.0, fault: Fault | None = None,
                 warm_calls: int = 2, spin_s: float = 1e-3,
                 idle_spin_s: float = 2e-4, omp_wait_policy: str | None = "PASSIVE",
                 refill_s: float = 5e-4,
                 partition_files: Mapping[str, str] | None = None,
                 inline_host: bool | None = None, session_spinning: bool = True) -> None:
        if slots < 1:
            raise InputError(f"slots must be >= 1, got {slots}", place="slots")
        self.program = program
        self.source = source
        self.slots = slots
        self.timeout_s = float(timeout_s)
        self.setup_timeout_s = float(setup_timeout_s)
        self.fault = fault
        self.warm_calls = warm_calls
        self.spin_s = max(0.0, float(spin_s))
        self.idle_spin_s = max(0.0, float(idle_spin_s))
        self.omp_wait_policy = omp_wait_policy
        self.refill_s = max(0.0, float(refill_s))
        #: compiled partitions to run (name -> .onnx file, as ``export`` writes them);
        #: compiled at start-up when not given
        self.partition_files = dict(partition_files or {})
        self.inline_host = inline_host
        #: False: no onnxruntime session spins after its run (several executors sharing
        #: cores in one process: a plan set's buckets; an idle one's spinning pool threads
        #: would take the cores the next one's work needs)
        self.session_spinning = bool(session_spinning)
        #: the workers run in this process (the host's first), each with its pipes from
        #: other workers, and every pipe end they hold
        self._inline: list[tuple[_Worker, list[Connection]]] = []
        self._inline_ends: list[Connection] = []
        self._partition_files: dict[str, str] = {}
        self._reference = [np.ascontiguousarray(np.asarray(x)) for x in reference_inputs]
        self._procs: list[_Proc] = []
        self._shm: Any = None
        self._tmp: str | None = None
        self._fx_map: dict[str, Any] | None = None
        self._views_in: dict[str, list[np.ndarray[Any, Any]]] = {}
        self._views_out: dict[str, list[np.ndarray[Any, Any]]] = {}
        self._status: np.ndarray[Any, Any] | None = None
        self._ready_info: dict[str, dict[str, Any]] = {}
        self._tasks: list[TaskRecord] = []
        self._ops: list[OpRecord] = []
        self._waits: list[WaitRecord] = []
        self._requests: list[RequestRecord] = []
        self._solo: list[SoloRecord] = []
        self._peak_live: dict[str, int] = {}
        self._rss_peak: dict[str, int] = {}
        self._next_request = 0
        self._started = False
        self._closed = False
        self._tags: dict[str, str] = {}
        self._notes: list[str] = []
        self._pending_send: dict[tuple[int, int], tuple[Any, ...]] = {}
        self._pending_recv: dict[tuple[int, int], tuple[str, tuple[Any, ...]]] = {}
        self._phase_peaks: dict[str, dict[str, int]] = {}
        #: requests in flight by id; done since the last ``_record`` (for telemetry);
        #: done since the last ``poll`` (for the client)
        self._flight: dict[int, _Flight] = {}
        self._finished: list[tuple[int, _Flight]] = []
        self._completed: list[Completion] = []
        self._progress_ns = 0  # the last time a request moved (hang detection)
        self._gc_was: bool | None = None  # the collector's state while held off
        #: the client process's CPU seconds in the last ``run`` outside the workers
        #: (submitting requests, handling completions; telemetry collection excluded):
        #: 0.0 when the host's worker runs in this process, since all the client then does
        #: is that worker's loop, already the host's own work per request
        #: (``DeviceRecord.request_busy``), which a plan must not count twice
        self.last_run_cpu_s = 0.0

    # -- lifecycle --
    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def worker_pids(self) -> dict[str, int]:
        """Device name -> pid of its worker (started workers only)."""
        return {p.device: int(p.proc.pid) for p in self._procs if p.proc.pid is not None}

    @property
    def in_process(self) -> tuple[str, ...]:
        """The devices whose workers run in this process (the host first; see
        ``inline_host``), once started."""
        return tuple(w.device for w, _ in self._inline)

    @property
    def shm_name(self) -> str | None:
        return None if self._shm is None else str(self._shm.name)

    def start(self, progress: Callable[[str], None] | None = None) -> None:
        """Create the shared memory, spawn and pin the workers, wait until every one has
        loaded the model, built its kernels and warmed them."""
        if self._started:
            return
        self._started = True
        try:
            self._start(progress or (lambda _m: None))
        except BaseException:
            self.close()
            raise

    def _start(self, report: Callable[[str], None]) -> None:
        from multiprocessing import shared_memory

        prog = self.program
        devices = list(prog.devices)
        n = len(devices)
        size, ins, outs, xfers = _layout(prog, self.slots, n)
        name = f"{SHM_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        self._shm = shared_memory.SharedMemory(name=name, create=True, size=size)
        buf = self._shm.buf
        self._status = np.ndarray((n, _STATUS_WORDS), dtype=np.int64, buffer=buf, offset=0)
        self._status[:] = -1
        self._views_in = {t: [np.ndarray(b.shape, dtype=b.dtype, buffer=buf, offset=o)
                              for o in b.offsets] for t, b in ins.items()}
        self._views_out = {t: [np.ndarray(b.shape, dtype=b.dtype, buffer=buf, offset=o)
                               for o in b.offsets] for t, b in outs.items()}
        self._tmp = tempfile.mkdtemp(prefix="placewise-exec-")
        if prog.partitions:
            report(f"compiling {len(prog.partitions)} partitions")
            from placewise.runtime.compile import write_partitions

            self._partition_files = (dict(self.partition_files) if self.partition_files
                                     else write_partitions(self.source, prog.partitions,
                                                           prog.graph, self._tmp))
            reload: dict[str, Any] = {}
        else:
            reload = source_reload_args(self.source, self._tmp)
            self._fx_map = _fx_map(self.source, prog.graph)
        ctx = mp.get_context("spawn")
        # one pipe per ordered device pair that has transfers or core gates
        pairs = sorted({(t.device, t.dst_device) for t in prog.transfers()
                        if t.dst_device is not None} |
                       {(prog.tasks[gt.before].device, prog.tasks[gt.after].device)
                        for gt in prog.gates})
        readers: dict[str, list[tuple[str, Connection]]] = {d.name: [] for d in devices}
        writers: dict[str, dict[str, Any]] = {d.name: {} for d in devices}
        ends: list[Connection] = []
        fmt = self.source.format.value
        fault = None
        if self.fault is not None:
            try:
                ft = prog.task(self.fault.task).index
            except KeyError:
                raise InputError(f"fault names no task of the plan: {self.fault.task!r}",
                                 place="fault") from None
            fault = {"kind": self.fault.kind, "device": self.fault.device, "task": ft,
                     "request": self.fault.request}
        threads, in_process = self._threads()
        inline = {d for d, th in threads.items() if in_process and th == prog.host}
        # one pipe per ordered device pair, one inbox where both run on this thread
        boxes = {d: Inbox() for d in inline}
        for a, b in pairs:
            if a in inline and b in inline:
                writers[a][b] = boxes[b]
                continue
            r, w = ctx.Pipe(duplex=False)
            readers[b].append((a, r))
            writers[a][b] = w
            ends += [r, w]
        report(f"starting {n - len(inline)} worker processes")
        # libgomp reads OMP_WAIT_POLICY once, when torch loads it: the spawned interpreter
        # must find it in its environment (the caller's own OpenMP is already set up)
        old_policy = os.environ.get("OMP_WAIT_POLICY")
        if self.omp_wait_policy:
            os.environ["OMP_WAIT_POLICY"] = self.omp_wait_policy
        try:
            for i, d in enumerate(devices):
                payload = self._payload(d, i, reload, fmt, ins, outs, xfers, fault,
                                        may_poll(prog, threads, d.name))
                # onnxruntime's threads spin after a session's run: where one thread runs
                # several devices' sessions, a spinning pool thread of one takes the core
                # the next one's work needs (measured: bert on cpu0 + cpu01, 4.6 ms per
                # request spinning, 1.7 ms not)
                payload["session_spinning"] = payload["session_spinning"] and not (
                    d.name in inline and len(inline) > 1) and self.session_spinning
                if d.name in inline:
                    iw = _Worker(payload, None, readers[d.name], writers[d.name], shm=self._shm,
                                 inbox=boxes[d.name])
                    conns = [c for _, c in readers[d.name]]
                    self._inline.append((iw, conns))
                    self._inline_ends += [*conns, *(c for c in writers[d.name].values()
                                                    if isinstance(c, Connection))]
                    continue
                parent, child = ctx.Pipe(duplex=True)
                proc = ctx.Process(target=_worker_entry,
                                   args=(payload, child, readers[d.name], writers[d.name]),
                                   name=f"placewise-worker-{d.name}", daemon=True)
                proc.start()
                child.close()
                self._procs.append(_Proc(d.name, i, proc, parent))
        finally:
            if self.omp_wait_policy:
                if old_policy is None:
                    os.environ.pop("OMP_WAIT_POLICY", None)
                else:
                    os.environ["OMP_WAIT_POLICY"] = old_policy
            for c in ends:  # the workers hold their own ends now
                if not any(c is h for h in self._inline_ends):
                    c.close()
        pending = {p.device for p in self._procs}
        self._inline.sort(key=lambda x: x[0].device != prog.host)  # the host first
        for iw, _ in self._inline:  # requests hand their results back to the client
            iw.on_output, iw.on_done = self._on_output, self._on_done
        for iw, _ in self._inline:  # set up while the worker processes start theirs
            report(f"setting up {iw.device} in this process")
            try:  # each pins the thread to its cores: its session's threads inherit them
                self._ready_info[iw.device] = iw.setup()
            except PlacewiseError:
                raise
            except Exception as exc:
                self._raise_host_error(exc, iw, during=True)
            report(f"{iw.device} ready")
        if len(self._inline) > 1:
            # the thread runs one device's step at a time: pinned to the cores they all
            # share, it never moves (a move between cores costs 13 us here, and its
            # cache); where they share none, each device re-pins it before its steps
            common = set.intersection(*(set(iw.p["cores"]) for iw, _ in self._inline))
            if common:
                os.sched_setaffinity(0, common)
            else:
                pin: list[Any] = [None]
                for iw, _ in self._inline:
                    iw.pin_state = pin
        deadline = time.monotonic() + self.setup_timeout_s
        while pending:
            for msg, p in self._receive(deadline, "start-up"):
                if msg[0] == "ready":
                    self._ready_info[p.device] = msg[1]
                    pending.discard(p.device)
                    report(f"worker of {p.device} ready")
        dev_tags = [(d.name, list(d.cores or []), int(self._ready_info[d.name]["threads"]),
                     str(d.backend)) for d in devices]
        self._tags = collect_tags(dev_tags)
        self._tags["slots"] = str(self.slots)
        self._tags["shared_memory_bytes"] = str(size)
        self._tags["isa"] = str(self._ready_info[devices[0].name].get("isa", ""))
        self._tags["in_process"] = ",".join(w.device for w, _ in self._inline)

    def _payload(self, d: Device, i: int, reload: dict[str, Any], fmt: str,
                 ins: dict[str, _Buf], outs: dict[str, _Buf], xfers: dict[int, _Buf],
                 fault: dict[str, Any] | None, polls: bool) -> dict[str, Any]:
        prog = self.program
        steps = prog.steps[d.name]
        used_tasks = {s.task for s in steps if s.task >= 0}
        tasks = {}
        for ti in used_tasks:
            t = prog.tasks[ti]
            tasks[ti] = {"name": t.name, "kind": t.kind.value, "vertex": t.vertex,
                         "tensor": t.tensor, "device": t.device, "dst": t.dst_device,
                         "src_rep": _rep_json(t.src_rep), "dst_rep": _rep_json(t.dst_rep)}
        vertices = {}
        g = prog.graph
        for ti in used_tasks:
            t = prog.tasks[ti]
            if t.kind is TaskKind.COMPUTE:
                v = prog.vertices[t.name]
                vertices[t.name] = {
                    "dtype": v.dtype.value,
                    "ops": [{"name": o.name, "kind": o.kind.value, "inputs": list(o.inputs),
                             "outputs": list(o.outputs), "source": o.provenance.source,
                             "source_op": o.provenance.source_op,
                             "module_path": o.provenance.module_path} for o in v.ops],
                    "inputs": list(v.inputs), "outputs": list(v.outputs),
                    "float": {x: g.tensor(x).dtype.is_float for x in (*v.inputs, *v.outputs)}}
        return {
            "device": d.name, "index": i, "cores": list(d.cores or []),
            "backend": d.backend or "torch", "format": fmt, "source": reload,
            "graph_fingerprint": g.fingerprint(), "shm": self._shm.name,
            "slots": self.slots, "host": prog.host,
            "steps": [{"kind": s.kind.value, "task": s.task, "reads": list(s.reads),
                       "writes": list(s.writes), "frees": list(s.frees),
                       "gin": list(s.gates_in), "gout": list(s.gates_out)} for s in steps],
            "tasks": tasks, "vertices": vertices,
            "inputs": {t: _buf_json(b) for t, b in ins.items()},
            "outputs": {t: _buf_json(b) for t, b in outs.items()},
            "input_order": list(g.inputs), "output_order": list(g.outputs),
            "xfers": {ti: _buf_json(b) for ti, b in xfers.items()
                      if prog.tasks[ti].device == d.name or prog.tasks[ti].dst_device == d.name},
            "reference_inputs": self._reference, "fault": fault,
            "warm_calls": self.warm_calls,
            "n_workers": len(prog.devices),
            "spin_s": self.spin_s if polls else 0.0,
            "idle_spin_s": self.idle_spin_s if polls else 0.0,
            "fx_map": self._fx_map,
            "shared_cores": not polls,
            "session_spinning": polls,
            "granularity": "partition" if prog.partitions else "op",
            "provider": list(provider_for(d).as_ort()),
            "partitions": {name: path for name, path in self._partition_files.items()
                           if name in vertices},
        }

    # -- messages --
    def _wait_objects(self) -> list[Any]:
        live = [p for p in self._procs if p.alive]
        return [p.conn for p in live] + [p.proc.sentinel for p in live]

    def _receive(self, deadline: float, what: str) -> list[tuple[tuple[Any, ...], _Proc]]:
        """Messages from workers (blocking until at least one or a fault)."""
        timeout = max(0.0, deadline - time.monotonic())
        ready = mp_wait(self._wait_objects(), timeout)
        if not ready:
            self._raise_hang(what, timeout)
        return self._messages(ready, what)

    def _messages(self, ready: Sequence[Any], what: str
                  ) -> list[tuple[tuple[Any, ...], _Proc]]:
        """The messages of the ready pipes; a worker's error or death raises."""
        live = [p for p in self._procs if p.alive]
        out: list[tuple[tuple[Any, ...], _Proc]] = []
        died: list[_Proc] = []
        for obj in ready:
            for p in live:
                if obj is p.conn:
                    try:
                        while p.conn.poll():
                            msg = _get(p.conn)
                            if msg[0] == "error":
                                self._raise_worker_error(p, msg)
                            out.append((msg, p))
                    except (EOFError, OSError):
                        died.append(p)
                elif obj == p.proc.sentinel:
                    died.append(p)
        if died:
            # a worker may have sent its error report just before exiting
            for p in died:
                with contextlib.suppress(EOFError, OSError):
                    while p.conn.poll():
                        msg = _get(p.conn)
                        if msg[0] == "error":
                            self._raise_worker_error(p, msg)
            self._raise_died(died[0], what)
        return out

    def _status_of(self, p: _Proc) -> tuple[int, int, int, int, int]:
        assert self._status is not None
        row = self._status[p.index]
        return int(row[0]), int(row[1]), int(row[2]), int(row[3]), int(row[4])

    def _raise_worker_error(self, p: _Proc | str, msg: tuple[Any, ...]) -> None:
        _, task, request, op_index, text, tb = msg
        device = p if isinstance(p, str) else p.device
        where = self.program.where(int(task), int(op_index))
        rq = f" of request {request}" if int(request) >= 0 else " during start-up"
        self._notes.append(f"{device}: {tb[-2000:]}")
        raise ExecutionError(f"the worker of device {device!r} failed in {where}{rq}: "
                             f"{text}", device=device, task=self._task_name(task),
                             op=self._op_name(task, op_index), request=int(request))

    def _threads(self) -> tuple[dict[str, str], bool]:
        """Device -> the thread its worker runs on (``schedule.simulate.worker_threads``,
        the rule the scheduler prices wake-ups by): the host, and the CPU devices that share
        a core with it (the plan never has them compute at the same time as the host), on
        this process's thread; every other device in a worker process of its own. The
        op-level interpreter, or ``inline_host=False``: every device in its own process.
        The flag says whether the host's thread is this process's."""
        prog = self.program
        names = [d.name for d in prog.devices]
        inline = bool(prog.partitions) if self.inline_host is None else self.inline_host
        if not inline:
            return {d: d for d in names}, False
        threads = worker_threads(prog, names, prog.host)
        fault = self.fault
        if fault is not None and threads.get(fault.device) == prog.host:
            if self.inline_host:
                raise InputError(f"a fault on device {fault.device!r} needs "
                                 f"inline_host=False (its worker runs in this process)",
                                 place="fault")
            return {d: d for d in names}, False
        return threads, True

    def _raise_host_error(self, exc: BaseException, w: _Worker, *,
                          during: bool = False) -> None:
        """An in-process worker's step raised: a dead peer first (its pipe broke), else
        that worker's own error, named as a worker process's would be."""
        for p in self._procs:
            if p.alive and not p.proc.is_alive():
                self._raise_died(p, "a request")
        task, request, op = (-2, -1, -1) if during else (w.cur_task, w.cur_request, w.cur_op)
        self._raise_worker_error(w.device, (
            "error", task, request, op, f"{type(exc).__name__}: {exc}",
            traceback.format_exc()[-4000:]))

    def _raise_died(self, p: _Proc, what: str) -> None:
        p.proc.join(timeout=1.0)
        p.alive = False
        code = p.proc.exitcode
        state, task, request, _t0, op_index = self._status_of(p)
        how = (f"was killed by signal {-code}" if code is not None and code < 0
               else f"exited with status {code}")
        if state == 1 and task >= -1:
            where = self.program.where(task, op_index)
            at = f" while running {where} of request {request}"
        else:
            at = f" during {what}"
        raise ExecutionError(f"the worker of device {p.device!r} (pid {p.proc.pid}) {how}{at}",
                             device=p.device, task=self._task_name(task) if state == 1 else "",
                             op=self._op_name(task, op_index) if state == 1 else "",
                             request=request if state == 1 else -1)

    def _raise_hang(self, what: str, waited_s: float) -> None:
        now = time.monotonic_ns()
        running = []
        for p in self._procs:
            if not p.alive:
                continue
            state, task, request, t0, op_index = self._status_of(p)
            if state == 1:
                running.append((now - t0, p, task, request, op_index))
        if running:
            running.sort(key=lambda x: -x[0])
            dt, p, task, request, op_index = running[0]
            where = self.program.where(task, op_index)
            raise ExecutionError(
                f"the worker of device {p.device!r} hung in {where} of request {request}: "
                f"no progress for {dt / 1e9:.1f} s (timeout {waited_s:.1f} s)",
                device=p.device, task=self._task_name(task), op=self._op_name(task, op_index),
                request=request)
        waiting = []
        for p in self._procs:
            if p.alive:
                state, task, request, _t0, _op = self._status_of(p)
                waiting.append(f"{p.device} waits" + (
                    f" for {self._task_name(task)!r} of request {request}" if state == 2
                    else ""))
        raise ExecutionError(f"no worker made progress for {waited_s:.1f} s during {what} "
                             f"(" + "; ".join(waiting) + ")")

    def _task_name(self, task: int) -> str:
        if 0 <= task < len(self.program.tasks):
            return self.program.tasks[task].name
        return "io" if task == -1 else ""

    def _op_name(self, task: int, op_index: int) -> str:
        if 0 <= task < len(self.program.tasks):
            t = self.program.tasks[task]
            if t.vertex is not None and t.vertex in self.program.vertices:
                ops = self.program.vertices[t.vertex].ops
                if len(ops) == 1:
                    return ops[0].name
                if 0 <= op_index < len(ops) and not self.program.partitions:
                    return ops[op_index].name
        return ""

    def _send_all(self, tag: str, request: int = 0, flag: int = 0) -> None:
        for p in self._procs:
            if p.alive:
                try:
                    if tag == "go":
                        _put_hot(p.conn, b"G", request, flag)
                    else:
                        _put(p.conn, tag)
                except (BrokenPipeError, OSError):
                    self._raise_died(p, "sending a command")

    # -- running requests --
    @property
    def outstanding(self) -> int:
        """Requests submitted and not yet done on every worker."""
        return len(self._flight)

    @property
    def can_submit(self) -> bool:
        """Whether ``submit`` has a slot: the next request's slot (``request % slots``, as
        the workers address shared memory) is not held by a request still in flight. With
        requests finishing in order this is ``outstanding < slots``."""
        return (self._next_request - self.slots) not in self._flight

    def submit(self, arrays: Sequence[Any], *, capture: bool = False) -> int:
        """Hand one request (arrays in graph-input order) to the pipeline without waiting;
        returns its request id. ``PlacewiseError`` when no slot is free (keep
        ``outstanding`` below ``slots``; see ``can_submit``). Its completion comes back
        from ``poll``; its telemetry is recorded by ``finish``."""
        self._check_running()
        self._check_inputs(arrays, "the request")
        if not self.can_submit:
            raise PlacewiseError(f"no free slot: {len(self._flight)} requests in flight on "
                                 f"{self.slots} slots (poll for completions first)")
        self._hold_gc()
        try:
            return self._submit(arrays, capture)
        except BaseException:
            self.close()
            raise

    def poll(self, timeout_s: float = 0.0) -> list[Completion]:
        """Run the in-process workers' ready steps and read the worker processes' messages
        until at least one request is done, or ``timeout_s`` has passed (a wait may run
        over by a worker's spin time, ``spin_s``); returns the requests done since the last
        ``poll``, in the order they were done. A run that makes no progress for ``timeout_s`` of the
        executor while requests are in flight raises ``ExecutionError`` (hung), as does a
        worker that fails; the executor is then closed."""
        self._check_running()
        try:
            return self._wait_some(max(0.0, float(timeout_s)), 1, "requests in flight")
        except BaseException:
            self.close()
            raise

    def finish(self, phase: str) -> list[Completion]:
        """Wait for every request still in flight (returned, with those done but not yet
        polled), record the requests submitted since the last ``finish`` or ``run`` under
        ``phase`` (``RequestRecord``) and collect the workers' telemetry of them."""
        self._check_running()
        got: list[Completion] = []
        try:
            while True:  # returns what is done, or nothing once nothing is in flight
                got += self._wait_some(None, 1, f"{phase} requests")
                if not self._flight:
                    break
        except BaseException:
            self.close()
            raise
        finally:
            self._release_gc()
        self._record(phase)
        self._flush(phase)
        return got

    def run(self, inputs: Sequence[Sequence[Any]], *, phase: str = "isolated",
            in_flight: int = 1, capture: bool = False) -> list[list[np.ndarray[Any, Any]]]:
        """Run one request per element of ``inputs`` (each: arrays in graph-input order),
        keeping at most ``in_flight`` requests in the pipeline; returns each request's
        outputs (graph-output order). Telemetry is kept under ``phase``. The closed-loop
        client of ``submit`` / ``poll`` / ``finish``: the next request goes in as soon as
        one is done."""
        self._check_running()
        if self._flight or self._finished or self._completed:
            raise PlacewiseError("requests submitted with submit() are not finished (call "
                                 "finish() first)")
        k = max(1, min(int(in_flight), self.slots))
        n = len(inputs)
        for i, arrays in enumerate(inputs):  # refused before anything runs
            self._check_inputs(arrays, f"request {i}")
        base = self._next_request
        results: list[list[np.ndarray[Any, Any]]] = [[] for _ in range(n)]
        client_cpu0 = time.process_time()
        self._hold_gc()  # a collection of this process's heap would land inside a request
        try:
            nxt = done = 0
            while done < n:
                while nxt < n and len(self._flight) < k and self.can_submit:
                    self._submit(inputs[nxt], capture)
                    nxt += 1
                for c in self._wait_some(None, k, f"{phase} requests"):
                    results[c.request - base] = c.outputs
                    done += 1
        except BaseException:
            self.close()
            raise
        finally:
            self._release_gc()
        self._record(phase)
        # the client's own CPU time for these requests (telemetry collection excluded)
        self.last_run_cpu_s = 0.0 if self._inline else time.process_time() - client_cpu0
        self._flush(phase)
        return results

    def _check_running(self) -> None:
        if not self._started or self._closed:
            raise PlacewiseError("the executor is not running (call start())")

    def _check_inputs(self, arrays: Sequence[Any], label: str) -> None:
        g = self.program.graph
        if len(arrays) != len(g.inputs):
            raise InputError(f"{label} has {len(arrays)} inputs, the graph takes "
                             f"{len(g.inputs)}", place="inputs")
        for name, arr in zip(g.inputs, arrays, strict=True):
            want = self._views_in[name][0].shape
            if tuple(np.shape(arr)) != want:
                raise InputError(f"input {name!r} of {label} has shape "
                                 f"{list(np.shape(arr))}, the plan's graph has "
                                 f"{list(want)}", place="inputs")

    def _hold_gc(self) -> None:
        """Keep this process's garbage collector off while requests are in flight, until
        ``_release_gc`` (a collection would land inside a request)."""
        if self._gc_was is None:
            self._gc_was = gc.isenabled()
            gc.disable()

    def _release_gc(self) -> None:
        if self._gc_was is not None:
            if self._gc_was:
                gc.enable()
            self._gc_was = None

    def _submit(self, arrays: Sequence[Any], capture: bool) -> int:
        """Hand request ``arrays`` (checked, its slot free) to the workers."""
        r = self._next_request
        self._next_request += 1
        n_workers = sum(1 for p in self._procs if p.alive) + len(self._inline)
        self._flight[r] = _Flight(time.monotonic_ns(), n_workers)
        if self._inline:
            self._inline[0][0].inline_inputs[r] = arrays
            for w, _ in self._inline:
                w.begin(r, bool(capture))
        else:
            slot = r % self.slots
            for name, arr in zip(self.program.graph.inputs, arrays, strict=True):
                np.copyto(self._views_in[name][slot], np.asarray(arr), casting="unsafe")
        self._send_all("go", r, int(bool(capture)))
        self._progress_ns = time.monotonic_ns()
        return r

    def _on_output(self, request: int, ready_ns: int, outputs: list[np.ndarray[Any, Any]]
                   ) -> None:
        """The host has written request ``request``'s outputs (at ``ready_ns``)."""
        f = self._flight[request]
        f.ready_ns = ready_ns
        f.outputs = outputs
        f.out_ns = time.monotonic_ns()

    def _on_done(self, request: int, t_ns: int) -> None:
        """A worker is done with request ``request``; the last one frees its slot."""
        f = self._flight[request]
        f.done_count += 1
        f.done_ns = max(f.done_ns, t_ns)
        if f.done_count == f.workers:
            del self._flight[request]
            self._finished.append((request, f))
            self._completed.append(Completion(request, f.submit_ns, f.ready_ns,
                                              max(f.done_ns, f.out_ns), f.outputs or []))

    def _handle(self, ready: Sequence[Any], what: str) -> None:
        """The messages of the ready worker pipes: outputs and done notices."""
        g = self.program.graph
        for msg, _p in self._messages(ready, what):
            if msg[0] == "out":  # the host's worker process wrote the outputs
                r = int(msg[1])
                slot = r % self.slots
                self._on_output(r, int(msg[2]), [np.array(self._views_out[o][slot], copy=True)
                                                 for o in g.outputs])
            elif msg[0] == "done":
                self._on_done(int(msg[1]), int(msg[2]))
        self._progress_ns = time.monotonic_ns()

    def _wait_some(self, timeout_s: float | None, window: int, what: str
                   ) -> list[Completion]:
        """The one loop that moves requests: run the in-process workers' ready steps (one
        at a time, older requests first) and read the worker processes' messages until a
        request is done or ``timeout_s`` has passed (``None``: until one is done, or
        nothing is in flight). No progress for ``self.timeout_s`` with requests in flight
        is a hang. Without in-process workers, while at least half of a ``window`` of
        several requests is in flight the messages are read every ``refill_s`` rather
        than as each comes. Returns (and forgets) the requests done so far."""
        group = self._inline
        end = None if timeout_s is None else time.monotonic() + timeout_s
        end_ns = 0 if end is None else int(end * 1e9)

        def handle(ready: Sequence[Any]) -> None:
            self._handle(ready, what)

        first = True  # one look at the pipes, even with no time to wait
        while not self._completed:
            if group:
                w = group[0][0]
                try:
                    if any((w := gw[0]).advance(gw[1]) for gw in group):
                        self._progress_ns = time.monotonic_ns()
                        if end is not None and self._progress_ns >= end_ns:
                            break  # the time is up: the next steps wait for the next call
                        continue
                except (PlacewiseError, KeyboardInterrupt):
                    raise
                except Exception as exc:
                    self._raise_host_error(exc, w)
            now = time.monotonic()
            if end is None and not self._flight:
                break
            if end is not None and now >= end and not first:
                break
            first = False
            if end is not None and not self._flight:
                # nothing in flight, so no message to wait for: sleep, then spin the last
                # _SPIN_S (a sleep overshoots by the kernel's timer slack, 50-100 us here;
                # a pipe wait rounds up to the millisecond)
                if end - now > _SPIN_S:
                    time.sleep(end - now - _SPIN_S)
                continue
            stall = self.timeout_s - (time.monotonic_ns() - self._progress_ns) / 1e9
            wait = max(0.0, stall)
            if end is not None:
                # the pipe wait sleeps whole milliseconds (after a worker's spin): block
                # for what surely ends before ``end``, poll the rest
                wait = min(wait, max(0.0, end - now - _WAIT_GRAIN_S
                                     - (self.spin_s if group else 0.0)))
            if group:
                try:
                    got = wait_group(group, wait, self._wait_objects(), handle)
                except (PlacewiseError, KeyboardInterrupt):
                    raise
                except Exception as exc:
                    self._raise_host_error(exc, w)
                if got is not None:
                    self._progress_ns = time.monotonic_ns()
            else:
                if (window > 1 and len(self._flight) * 2 >= window and self.refill_s > 0):
                    # enough queued: let completions pile up and handle them together,
                    # rather than waking (and taking a core from a worker) for each one
                    time.sleep(self.refill_s)
                ready = mp_wait(self._wait_objects(), wait)
                if ready:
                    handle(ready)
            if (self._flight and not self._completed and time.monotonic_ns()
                    - self._progress_ns >= self.timeout_s * 1e9):
                self._raise_hang(what, self.timeout_s)
        got_now, self._completed = self._completed, []
        return got_now

    def _record(self, phase: str) -> None:
        """The requests done since the last record, as ``RequestRecord``s of ``phase``."""
        for r, f in sorted(self._finished, key=lambda x: x[0]):
            self._requests.append(RequestRecord(r, phase, f.submit_ns, f.ready_ns,
                                                max(f.done_ns, f.out_ns), f.out_ns))
        self._finished = []

    def _flush(self, phase: str) -> None:
        """Collect the workers' records since the last flush."""
        for w, _ in self._inline:
            self._absorb(w.device, w.telemetry_data(), phase)
        self._send_all("flush")
        pending = {p.device for p in self._procs if p.alive}
        deadline = time.monotonic() + self.timeout_s
        while pending:
            for msg, p in self._receive(deadline, "collecting telemetry"):
                if msg[0] != "telemetry":
                    continue
                pending.discard(p.device)
                self._absorb(p.device, msg[1], phase)

    def _absorb(self, device: str, data: dict[str, Any], phase: str) -> None:
        prog = self.program
        names = [t.name for t in prog.tasks]
        for rec in data["tasks"]:
            kind = rec[2]
            if kind == "send":
                self._pending_send.setdefault((rec[1], rec[0]), rec)
            elif kind == "recv":
                self._pending_recv.setdefault((rec[1], rec[0]), (device, rec))
            else:
                r, ti, kind_s, start, end, kernel, hidden, live = rec[:8]
                cpu_ns = int(rec[8]) if len(rec) > 8 else 0
                name = names[ti] if ti >= 0 else ("io:in" if kind_s == "io_in" else "io:out")
                k = {"compute": "compute", "convert": "conversion"}.get(kind_s, "io")
                self._tasks.append(TaskRecord(r, name, k, device, start, end, kernel, hidden,
                                              live, phase=phase, cpu_ns=cpu_ns))
        # pair sends with receives (either side may arrive first)
        for key in list(self._pending_send):
            if key in self._pending_recv:
                s = self._pending_send.pop(key)
                dev_r, rcv = self._pending_recv.pop(key)
                ti, r = key
                t = prog.tasks[ti]
                _, _, _, w0, w1, wk, notified, sent = s[:8]
                _, _, _, r0, r1, rk, received, live = rcv[:8]
                cpu_s = int(s[8]) if len(s) > 8 else 0
                cpu_r = int(rcv[8]) if len(rcv) > 8 else 0
                self._tasks.append(TaskRecord(
                    r, t.name, "transfer", t.device, w0, r1, wk + rk, 0, live,
                    dst_device=dev_r, marks=(("write_end", w1), ("notified", notified),
                                             ("sent", sent), ("received", received),
                                             ("read_start", r0), ("send_cpu_ns", cpu_s),
                                             ("receive_cpu_ns", cpu_r)),
                    phase=phase, cpu_ns=cpu_s + cpu_r))
        for o in data["ops"]:
            r, ti, oi, start, end = o
            v = prog.vertices[names[ti]]
            self._ops.append(OpRecord(r, v.ops[oi].name, v.name, device, start, end, phase))
        for w in data["waits"]:
            r, ti, start, end = w[:4]
            what = names[ti] if ti >= 0 else "request"
            if len(w) > 4 and w[4]:
                what = f"gate:{what}"  # a core gate: waiting for that task to end
            self._waits.append(WaitRecord(r, device, what, start, end, phase))
        self._peak_live[device] = max(self._peak_live.get(device, 0), int(data["peak_live"]))
        self._phase_peaks.setdefault(phase, {})[device] = max(
            self._phase_peaks.get(phase, {}).get(device, 0), int(data["peak_live"]))
        self._rss_peak[device] = max(self._rss_peak.get(device, 0), int(data["rss_peak"]))

    def peak_live_bytes(self, phase: str) -> dict[str, int]:
        """Device -> most live tensor bytes seen during ``phase``."""
        return dict(self._phase_peaks.get(phase, {}))

    def set_spin(self, spin_s: float, idle_spin_s: float) -> None:
        """Change how long workers poll before they sleep (see ``Executor``): polling cuts
        a request's wake-ups but takes CPU time the client may need between requests."""
        if not self._started or self._closed:
            raise PlacewiseError("the executor is not running (call start())")
        for w, _ in self._inline:
            w.set_spin(max(0.0, float(spin_s)), max(0.0, float(idle_spin_s)))
        for p in self._procs:
            if p.alive:
                _put(p.conn, "spin", max(0.0, float(spin_s)), max(0.0, float(idle_spin_s)))

    def solo(self, repeats: int = 5) -> list[SoloRecord]:
        """Replay, one device at a time with every other worker idle, the steps of the last
        request run with ``capture=True``; medians over ``repeats``."""
        if not self._started or self._closed:
            raise PlacewiseError("the executor is not running (call start())")
        prog = self.program
        out: list[SoloRecord] = []
        try:
            for d in prog.devices:
                p = next((q for q in self._procs if q.device == d.name), None)
                mine = next((w for w, _ in self._inline if w.device == d.name), None)
                if mine is not None:
                    got: list[Any] | None = mine._solo(int(repeats))
                elif p is None:
                    continue
                else:
                    _put(p.conn, "solo", int(repeats))
                    deadline = time.monotonic() + self.timeout_s + 5.0 * repeats
                    got = None
                    while got is None:
                        for msg, q in self._receive(deadline, f"solo replay on {p.device}"):
                            if msg[0] == "solo" and q is p:
                                got = msg[1]
                assert got is not None
                # a transfer's halves: the write on the sender, the read on the receiver
                for ti, _kind, total, kernel, hidden in got:
                    out.append(SoloRecord(prog.tasks[ti].name, d.name, total, kernel, hidden,
                                          int(repeats)))
        except BaseException:
            self.close()
            raise
        self._solo = out
        return out

    def telemetry(self) -> Telemetry:
        """Everything measured so far."""
        devices = []
        pids = {p.device: int(p.proc.pid or 0) for p in self._procs}
        for d in self.program.devices:
            if d.name not in pids and d.name not in self._ready_info:
                continue
            info = self._ready_info.get(d.name, {})
            devices.append(DeviceRecord(
                d.name, pids.get(d.name, int(info.get("pid", 0))), tuple(d.cores or ()),
                int(info.get("threads", 0)), str(d.backend), int(info.get("weights_bytes", 0)),
                int(self._peak_live.get(d.name, 0)), int(info.get("rss_start", 0)),
                int(info.get("rss_ready", 0)), int(self._rss_peak.get(d.name, 0))))
        return Telemetry(dict(self._tags), tuple(devices), tuple(self._requests),
                         tuple(sorted(self._tasks, key=lambda t: (t.request, t.start_ns))),
                         tuple(self._ops), tuple(self._waits), tuple(self._solo),
                         tuple(self._notes))

    def close(self) -> None:
        """Stop every worker (politely, then by force) and unlink the shared memory. Safe to
        call more than once."""
        if self._closed:
            return
        self._closed = True
        self._release_gc()
        # a second Ctrl-C must not cut the clean-up short (leaving workers or shared memory
        # behind): SIGINT is held while closing (main thread only) and re-raised after
        held: list[int] = []
        old: Any = None
        if threading.current_thread() is threading.main_thread():
            with contextlib.suppress(ValueError):
                old = signal.signal(signal.SIGINT, lambda *_: held.append(1))
        try:
            self._close()
        finally:
            if old is not None:
                signal.signal(signal.SIGINT, old)
        if held and old is signal.default_int_handler:
            raise KeyboardInterrupt

    def _close(self) -> None:
        try:
            for p in self._procs:
                if p.alive and p.proc.is_alive():
                    with contextlib.suppress(Exception):
                        _put(p.conn, "stop")
            deadline = time.monotonic() + 2.0
            for p in self._procs:
                with contextlib.suppress(Exception):
                    p.proc.join(timeout=max(0.05, deadline - time.monotonic()))
            for p in self._procs:
                if p.proc.is_alive():
                    with contextlib.suppress(Exception):
                        p.proc.terminate()
                        p.proc.join(timeout=2.0)
                if p.proc.is_alive():
                    with contextlib.suppress(Exception):
                        p.proc.kill()
                        p.proc.join(timeout=5.0)
                p.alive = False
                with contextlib.suppress(Exception):
                    p.conn.close()
        finally:
            for w, _ in reversed(self._inline):  # the host's saved pinning is put back last
                with contextlib.suppress(Exception):
                    w.release()
            self._inline = []
            for c in self._inline_ends:
                with contextlib.suppress(Exception):
                    c.close()
            self._inline_ends = []
            self._views_in = {}
            self._views_out = {}
            self._status = None
            if self._shm is not None:
                with contextlib.suppress(BufferError, OSError):
                    self._shm.close()
                with contextlib.suppress(FileNotFoundError):
                    self._shm.unlink()
                self._shm = None
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)
                self._tmp = None


def _fx_map(source: ModelSource, graph: Graph) -> dict[str, Any] | None:
    """fx node -> IR tensor(s), by the importer's own rules (so renamed tensors map too);
    ``InputError`` when the program is not the plan's graph."""
    from placewise.runtime.opexec import SourceFormat

    if source.format is not SourceFormat.TORCH_EXPORT:
        return None
    from placewise.graph.torch_import import _Builder

    b = _Builder(source.exported_program, graph.name, None)
    g = b.build()
    if g.fingerprint() != graph.fingerprint():
        raise InputError("the model source does not match the plan's graph (graph "
                         "fingerprints differ): plan this model again", file=source.ref)
    return {"node_tensor": {n.name: t for n, t in b.node_tensor.items()},
            "node_outputs": {n.name: list(ts) for n, ts in b.node_outputs.items()}}
