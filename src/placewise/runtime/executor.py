"""Run a plan for real: one worker per device, tensors crossing through shared memory.

``program_from_schedule(problem, schedule)`` (or ``program_from_plan(plan, graph,
machine)`` for a plan file) turns a scheduled placement into an ``ExecProgram``
(``runtime.program``): every task of the schedule (compute = a partition, ``xfer:...``
transfers, ``conv:...`` conversions) becomes a step on the worker of the device that runs
it, in the plan's order per device (predicted start time; a transfer is a *send* step on
the sender at its predicted start and a *receive* step on the receiver at its predicted
end), with core gates between devices that share cores. The host worker also has ``io:in``
(copy a request's inputs in) and ``io:out`` (copy the graph outputs back to the client)
steps.

``Executor(program, source)`` runs it:

- **workers** (``runtime.worker``): one per device, in a process of its own (``spawn``) —
  except the host and the CPU devices sharing its cores, which run on the client's own
  thread (``inline_host``, see ``Executor``) — pinned to the device's cores with
  ``os.sched_setaffinity`` and ``len(cores)`` runtime threads. Each receives a typed
  ``WorkerSpec`` (its steps, tasks and partitions) and opens one compiled unit per
  partition through its device's backend (``runtime.backends``: onnxruntime with the
  device's execution provider), from the ONNX files ``runtime.compile`` writes (as
  ``export`` does) or that the caller gives (``partition_files``).
- **transfers**: a shared-memory block (``runtime.shm``) holds one slot per transfer and
  request in flight; the sender copies the tensor into its slot and notifies the receiver
  through a pipe (``runtime.messages``), the receiver copies it out. An int8 copy travels
  with its scale. Conversion tasks run the ``runtime.opexec`` conversion kernels where the
  plan puts them. An int8 partition takes fp32 activations (onnxruntime dynamic
  quantization), so its int8 inputs are dequantized and its float outputs quantized around
  it: that work is timed apart (``hidden_conversion_ns``) because the plan does not name it.
- **gates**: after a gated step's earlier task has run, its worker sends a small token
  (the task and the request, on the same worker-to-worker pipes as transfer
  notifications, told apart by size) to the later task's worker, which waits for it as it
  waits for a transfer: it keeps reading messages and runs other requests' ready steps
  meanwhile. A gate wait is a ``WaitRecord`` whose ``for_task`` is ``gate:{earlier task}``.
  Gates order the steps of one request; steps of different requests in flight still share
  cores (as the steady-state pipeline model assumes).
- **requests**: ``run(inputs, in_flight=1)`` runs requests one at a time;
  ``in_flight=K`` keeps K requests in the pipeline (a worker runs request k+1's ready
  steps while another device still works on request k; older requests go first). A
  request's latency runs from the client writing its inputs to the host worker having
  written its outputs. ``run`` is a closed-loop client of the asynchronous API an
  open-loop client (``serve.real``) drives itself: ``submit(arrays)`` hands one request
  over without waiting (a slot must be free: ``can_submit``), ``poll(timeout_s)`` runs the
  in-process workers and reads the others' messages until a request is done or the time
  is up and returns the ``Completion``s, ``finish(phase)`` waits for the rest and records
  the requests' telemetry under ``phase``. One loop (``Executor._wait_some``) moves
  requests for both.
- **telemetry** (``runtime.telemetry``, kept by ``runtime.collect``): every task's
  start/end on ``CLOCK_MONOTONIC`` with the plan's task names, its CPU time, waits, live
  tensor bytes per device, process memory, and ``solo(repeats)``: each device replays one
  request's steps alone.
- **faults** (``runtime.procs``): a worker that dies, raises or makes no progress for
  ``timeout_s`` ends the run with ``ExecutionError`` naming the device, the task and the op
  (read from a status block each worker updates); every worker is stopped and the shared
  memory unlinked on every way out (also ``KeyboardInterrupt``; workers ignore SIGINT so
  that the parent shuts them down). Segment names start with ``placewise-``.

Spawned workers re-import the caller's main module: a script using the executor must guard
its top level with ``if __name__ == "__main__":``.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing as mp
import os
import secrets
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing import shared_memory
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as mp_wait
from typing import TYPE_CHECKING, Any

import numpy as np

from placewise.errors import ExecutionError, InputError, PlacewiseError
from placewise.runtime.collect import Records
from placewise.runtime.compile import write_partitions
from placewise.runtime.handoff import Completion, Handoff
from placewise.runtime.messages import put
from placewise.runtime.procs import Proc, Procs, pipes
from placewise.runtime.program import ExecProgram
from placewise.runtime.shm import SHM_PREFIX, Layout, layout, status_rows
from placewise.runtime.telemetry import (
    DeviceRecord,
    RequestRecord,
    SoloRecord,
    Telemetry,
    collect_tags,
)
from placewise.runtime.worker import FaultAt, WorkerSpec, _Worker, _worker_entry, wait_group
from placewise.schedule.simulate import TaskKind, may_poll, worker_threads

if TYPE_CHECKING:
    from placewise.runtime.opexec import ModelSource

__all__ = ["CLIENT_SPIN_S", "SHM_PREFIX", "Completion", "ExecutionError", "Executor", "Fault"]

#: the granularity of a wait on pipes (``multiprocessing.connection.wait``: poll(2) takes
#: milliseconds, rounded up)
_WAIT_GRAIN_S = 1e-3
#: the last part of an idle wait spun rather than slept by default (``client_spin_s``)
CLIENT_SPIN_S = 3e-4


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



class Executor:
    """Worker processes running an ``ExecProgram`` (see the module docstring).

    Use as a context manager (or call ``close()``)::

        with Executor(program, source, reference_inputs=inputs[0]) as ex:
            ex.start()
            outputs = ex.run(requests, phase="isolated")
            tel = ex.telemetry()

    ``reference_inputs`` (one request's inputs, graph-input order), when given, is checked
    against the graph's inputs before anything starts.
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
    default): in-process, unless a fault is injected on one of those devices (a crash or
    a hang injected into the client's own process would take the client with it). An
    in-process device that hangs inside a partition cannot be timed out (as in any
    application calling onnxruntime itself).

    ``client_spin_s``: with nothing in flight, the client's wait (``poll``) sleeps and spins
    only its last ``client_spin_s`` (a sleep overshoots by the kernel's timer slack, 50-100
    us here); a longer spin keeps the client's core awake through idle gaps, at the price of
    a core that spins. ``session_spinning``: onnxruntime's intra-op pool spins after a run
    (its threads then answer the next run at once). ``placewise tune`` chooses both per plan
    from measurement (``Plan.service``).
    """

    def __init__(self, program: ExecProgram, source: ModelSource, *,
                 reference_inputs: Sequence[Any] | None = None, slots: int = 4, timeout_s: float = 120.0,
                 setup_timeout_s: float = 900.0, fault: Fault | None = None,
                 warm_calls: int = 2, spin_s: float = 1e-3,
                 idle_spin_s: float = 2e-4, omp_wait_policy: str | None = "PASSIVE",
                 refill_s: float = 5e-4,
                 partition_files: Mapping[str, str] | None = None,
                 inline_host: bool | None = None, session_spinning: bool = True,
                 client_spin_s: float = CLIENT_SPIN_S) -> None:
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
        self.client_spin_s = max(0.0, float(client_spin_s))
        #: the workers run in this process (the host's first), each with its pipes from
        #: other workers, and every pipe end they hold
        self._inline: list[tuple[_Worker, list[Connection]]] = []
        self._inline_ends: list[Connection] = []
        self._pipe_ends: list[Connection] = []
        self._partition_files: dict[str, str] = {}
        if reference_inputs is not None:
            self._check_inputs(reference_inputs, "the reference request")
        self._workers = Procs(program)
        self._shm: Any = None
        self._tmp: str | None = None
        self._views_in: dict[str, list[np.ndarray[Any, Any]]] = {}
        self._views_out: dict[str, list[np.ndarray[Any, Any]]] = {}
        self._ready_info: dict[str, dict[str, Any]] = {}
        self._records = Records(program)
        self._requests: list[RequestRecord] = []
        self._solo: list[SoloRecord] = []
        self._started = False
        self._closed = False
        self._tags: dict[str, str] = {}
        self._handoff = Handoff(slots)
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
        return {p.device: int(p.proc.pid) for p in self._workers.procs
                if p.proc.pid is not None}

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
        prog = self.program
        devices = list(prog.devices)
        lay = layout(prog, self.slots, len(devices))
        name = f"{SHM_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        self._shm = shared_memory.SharedMemory(name=name, create=True, size=lay.size_bytes)
        buf = self._shm.buf
        self._workers.status = status_rows(buf, len(devices))
        self._workers.status[:] = -1
        self._views_in = {t: b.views(buf) for t, b in lay.inputs.items()}
        self._views_out = {t: b.views(buf) for t, b in lay.outputs.items()}
        self._tmp = tempfile.mkdtemp(prefix="placewise-exec-")
        report(f"compiling {len(prog.partitions)} partitions")
        self._partition_files = (dict(self.partition_files) if self.partition_files
                                 else write_partitions(self.source, prog.partitions,
                                                       prog.graph, self._tmp))
        fault = self._fault_at()
        threads, in_process = self._threads()
        inline = {d for d, th in threads.items() if in_process and th == prog.host}
        ctx = mp.get_context("spawn")
        readers, writers, boxes, self._pipe_ends = pipes(ctx, prog, inline)
        report(f"starting {len(devices) - len(inline)} worker processes")
        # libgomp reads OMP_WAIT_POLICY once, when torch loads it: the spawned interpreter
        # must find it in its environment (the caller's own OpenMP is already set up)
        old_policy = os.environ.get("OMP_WAIT_POLICY")
        if self.omp_wait_policy:
            os.environ["OMP_WAIT_POLICY"] = self.omp_wait_policy
        try:
            for i, d in enumerate(devices):
                spec = self._spec(i, lay, fault, may_poll(prog, threads, d.name),
                                  d.name in inline and len(inline) > 1)
                if d.name in inline:
                    iw = _Worker(spec, None, readers[d.name], writers[d.name], shm=self._shm,
                                 inbox=boxes[d.name])
                    conns = [c for _, c in readers[d.name]]
                    self._inline.append((iw, conns))
                    self._inline_ends += [*conns, *(c for c in writers[d.name].values()
                                                    if isinstance(c, Connection))]
                    continue
                parent, child = ctx.Pipe(duplex=True)
                proc = ctx.Process(target=_worker_entry,
                                   args=(spec, child, readers[d.name], writers[d.name]),
                                   name=f"placewise-worker-{d.name}", daemon=True)
                proc.start()
                child.close()
                self._workers.procs.append(Proc(d.name, i, proc, parent))
        finally:
            if self.omp_wait_policy:
                if old_policy is None:
                    os.environ.pop("OMP_WAIT_POLICY", None)
                else:
                    os.environ["OMP_WAIT_POLICY"] = old_policy
            for c in self._pipe_ends:  # the workers hold their own ends now
                if not any(c is h for h in self._inline_ends):
                    c.close()
            self._pipe_ends = []
        self._setup_inline(report)
        self._ready_info.update(self._workers.await_ready(
            time.monotonic() + self.setup_timeout_s, report))
        self._handoff.workers = len(self._workers.procs) + len(self._inline)
        dev_tags = [(d.name, list(d.cores or []), int(self._ready_info[d.name]["threads"]),
                     str(d.backend)) for d in devices]
        self._tags = collect_tags(dev_tags)
        self._tags["slots"] = str(self.slots)
        self._tags["shared_memory_bytes"] = str(lay.size_bytes)
        self._tags["isa"] = str(self._ready_info[devices[0].name].get("isa", ""))
        self._tags["in_process"] = ",".join(w.device for w, _ in self._inline)

    def _fault_at(self) -> FaultAt | None:
        if self.fault is None:
            return None
        try:
            ft = self.program.task(self.fault.task).index
        except KeyError:
            raise InputError(f"fault names no task of the plan: {self.fault.task!r}",
                             place="fault") from None
        return FaultAt(self.fault.kind, ft, self.fault.request)

    def _spec(self, i: int, lay: Layout, fault: FaultAt | None, polls: bool,
              crowded: bool) -> WorkerSpec:
        """What device ``i``'s worker runs. ``polls``: its cores are its own (it may poll
        and its sessions spin); ``crowded``: one thread runs it with other devices, whose
        work a spinning session thread would slow (measured: bert on cpu0 + cpu01, 4.6 ms
        per request spinning, 1.7 ms not)."""
        prog = self.program
        d = prog.devices[i]
        steps = prog.steps[d.name]
        tasks = {s.task: prog.tasks[s.task] for s in steps if s.task >= 0}
        vertices = {t.name: prog.vertices[t.name] for t in tasks.values()
                    if t.kind is TaskKind.COMPUTE}
        g = prog.graph
        floats = frozenset(x for v in vertices.values() for x in (*v.inputs, *v.outputs)
                           if g.tensor(x).dtype.is_float)
        return WorkerSpec(
            d, i, len(prog.devices), self._shm.name, self.slots, steps, tasks, vertices,
            floats, {n: p for n, p in self._partition_files.items() if n in vertices},
            lay.inputs, lay.outputs,
            {ti: b for ti, b in lay.xfers.items() if ti in tasks}, fault, self.warm_calls,
            self.spin_s if polls else 0.0, self.idle_spin_s if polls else 0.0,
            shared_cores=not polls,
            session_spinning=polls and not crowded and self.session_spinning)

    def _setup_inline(self, report: Callable[[str], None]) -> None:
        """Set up the in-process workers (the host first) while the worker processes start
        theirs; each pins the thread to its cores (its session's threads inherit them)."""
        self._inline.sort(key=lambda x: x[0].device != self.program.host)
        for iw, _ in self._inline:  # requests hand their results back to the client
            iw.on_output, iw.on_done = self._handoff.on_output, self._handoff.on_done
        for iw, _ in self._inline:
            report(f"setting up {iw.device} in this process")
            try:
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
            common = set.intersection(*(set(iw.cores) for iw, _ in self._inline))
            if common:
                os.sched_setaffinity(0, common)
            else:
                pin: list[Any] = [None]
                for iw, _ in self._inline:
                    iw.pin_state = pin

    def _threads(self) -> tuple[dict[str, str], bool]:
        """Device -> the thread its worker runs on (``schedule.simulate.worker_threads``,
        the rule the scheduler prices wake-ups by): the host, and the CPU devices that share
        a core with it (the plan never has them compute at the same time as the host), on
        this process's thread; every other device in a worker process of its own. With
        ``inline_host=False``: every device in its own process. The flag says whether the
        host's thread is this process's."""
        prog = self.program
        names = [d.name for d in prog.devices]
        if self.inline_host is False:
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
        """An in-process worker raised (``during`` start-up, or in a request's step)."""
        task, request = (-2, -1) if during else (w.cur_task, w.cur_request)
        self._workers.raise_host_error(exc, w.device, task, request)

    # -- running requests --
    @property
    def outstanding(self) -> int:
        """Requests submitted and not yet done on every worker."""
        return len(self._handoff.flight)

    @property
    def can_submit(self) -> bool:
        """Whether ``submit`` has a slot: the next request's slot (``request % slots``, as
        the workers address shared memory) is not held by a request still in flight. With
        requests finishing in order this is ``outstanding < slots``."""
        return self._handoff.can_submit

    def submit(self, arrays: Sequence[Any], *, capture: bool = False) -> int:
        """Hand one request (arrays in graph-input order) to the pipeline without waiting;
        returns its request id. ``PlacewiseError`` when no slot is free (keep
        ``outstanding`` below ``slots``; see ``can_submit``). Its completion comes back
        from ``poll``; its telemetry is recorded by ``finish``."""
        self._check_running()
        self._check_inputs(arrays, "the request")
        if not self.can_submit:
            raise PlacewiseError(f"no free slot: {self.outstanding} requests in flight on "
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
                if not self._handoff.flight:
                    break
        except BaseException:
            self.close()
            raise
        finally:
            self._release_gc()
        self._requests += self._handoff.records(phase)
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
        h = self._handoff
        if h.flight or h.finished or h.completed:
            raise PlacewiseError("requests submitted with submit() are not finished (call "
                                 "finish() first)")
        k = max(1, min(int(in_flight), self.slots))
        n = len(inputs)
        for i, arrays in enumerate(inputs):  # refused before anything runs
            self._check_inputs(arrays, f"request {i}")
        base = h.next_request
        results: list[list[np.ndarray[Any, Any]]] = [[] for _ in range(n)]
        client_cpu0 = time.process_time()
        self._hold_gc()  # a collection of this process's heap would land inside a request
        try:
            nxt = done = 0
            while done < n:
                while nxt < n and len(h.flight) < k and h.can_submit:
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
        self._requests += h.records(phase)
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
            want = tuple(g.tensor(name).concrete_shape)
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
        r = self._handoff.open()
        if self._inline:
            self._inline[0][0].inline_inputs[r] = arrays
            for w, _ in self._inline:
                w.begin(r, bool(capture))
        else:
            slot = r % self.slots
            for name, arr in zip(self.program.graph.inputs, arrays, strict=True):
                np.copyto(self._views_in[name][slot], np.asarray(arr), casting="unsafe")
        self._workers.send_all("go", r, int(bool(capture)))
        self._progress_ns = time.monotonic_ns()
        return r

    def _handle(self, ready: Sequence[Any], what: str) -> None:
        """The messages of the ready worker pipes: outputs and done notices."""
        g = self.program.graph
        for msg, _p in self._workers.messages(ready, what):
            if msg[0] == "out":  # the host's worker process wrote the outputs
                r = int(msg[1])
                slot = r % self.slots
                self._handoff.on_output(r, int(msg[2]), [np.array(self._views_out[o][slot], copy=True)
                                                 for o in g.outputs])
            elif msg[0] == "done":
                self._handoff.on_done(int(msg[1]), int(msg[2]))
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
        h = self._handoff
        while not h.completed:
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
            if end is None and not h.flight:
                break
            if end is not None and now >= end and not first:
                break
            first = False
            if end is not None and not h.flight:
                # nothing in flight, so no message to wait for: sleep, then spin the last
                # client_spin_s (a sleep overshoots by the kernel's timer slack, 50-100 us
                # here; a pipe wait rounds up to the millisecond)
                if end - now > self.client_spin_s:
                    time.sleep(end - now - self.client_spin_s)
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
                    got = wait_group(group, wait, self._workers.wait_objects(), handle)
                except (PlacewiseError, KeyboardInterrupt):
                    raise
                except Exception as exc:
                    self._raise_host_error(exc, w)
                if got is not None:
                    self._progress_ns = time.monotonic_ns()
            else:
                if (window > 1 and len(h.flight) * 2 >= window and self.refill_s > 0):
                    # enough queued: let completions pile up and handle them together,
                    # rather than waking (and taking a core from a worker) for each one
                    time.sleep(self.refill_s)
                ready = mp_wait(self._workers.wait_objects(), wait)
                if ready:
                    handle(ready)
            if (h.flight and not h.completed and time.monotonic_ns()
                    - self._progress_ns >= self.timeout_s * 1e9):
                self._workers.raise_hang(what, self.timeout_s)
        return h.take_completed()

    def _flush(self, phase: str) -> None:
        """Collect the workers' records since the last flush."""
        for w, _ in self._inline:
            self._records.absorb(w.device, w.telemetry_data(), phase)
        self._workers.send_all("flush")
        pending = {p.device for p in self._workers.alive()}
        deadline = time.monotonic() + self.timeout_s
        while pending:
            for msg, p in self._workers.receive(deadline, "collecting telemetry"):
                if msg[0] != "telemetry":
                    continue
                pending.discard(p.device)
                self._records.absorb(p.device, msg[1], phase)

    def peak_live_bytes(self, phase: str) -> dict[str, int]:
        """Device -> most live tensor bytes seen during ``phase``."""
        return dict(self._records.phase_peaks.get(phase, {}))

    def set_spin(self, spin_s: float, idle_spin_s: float) -> None:
        """Change how long workers poll before they sleep (see ``Executor``): polling cuts
        a request's wake-ups but takes CPU time the client may need between requests."""
        if not self._started or self._closed:
            raise PlacewiseError("the executor is not running (call start())")
        for w, _ in self._inline:
            w.set_spin(max(0.0, float(spin_s)), max(0.0, float(idle_spin_s)))
        for p in self._workers.alive():
            put(p.conn, "spin", max(0.0, float(spin_s)), max(0.0, float(idle_spin_s)))

    def solo(self, repeats: int = 5) -> list[SoloRecord]:
        """Replay, one device at a time with every other worker idle, the steps of the last
        request run with ``capture=True``; medians over ``repeats``."""
        if not self._started or self._closed:
            raise PlacewiseError("the executor is not running (call start())")
        prog = self.program
        out: list[SoloRecord] = []
        try:
            for d in prog.devices:
                p = next((q for q in self._workers.procs if q.device == d.name), None)
                mine = next((w for w, _ in self._inline if w.device == d.name), None)
                if mine is not None:
                    got: list[Any] | None = mine._solo(int(repeats))
                elif p is None:
                    continue
                else:
                    put(p.conn, "solo", int(repeats))
                    deadline = time.monotonic() + self.timeout_s + 5.0 * repeats
                    got = None
                    while got is None:
                        for msg, q in self._workers.receive(deadline,
                                                            f"solo replay on {p.device}"):
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
        rec = self._records
        pids = {p.device: int(p.proc.pid or 0) for p in self._workers.procs}
        for d in self.program.devices:
            if d.name not in pids and d.name not in self._ready_info:
                continue
            info = self._ready_info.get(d.name, {})
            devices.append(DeviceRecord(
                d.name, pids.get(d.name, int(info.get("pid", 0))), tuple(d.cores or ()),
                int(info.get("threads", 0)), str(d.backend), int(info.get("weights_bytes", 0)),
                int(rec.peak_live.get(d.name, 0)), int(info.get("rss_start", 0)),
                int(info.get("rss_ready", 0)), int(rec.rss_peak.get(d.name, 0))))
        return Telemetry(dict(self._tags), tuple(devices), tuple(self._requests),
                         tuple(sorted(rec.tasks, key=lambda t: (t.request, t.start_ns))),
                         (), tuple(rec.waits), tuple(self._solo),
                         tuple(self._workers.notes))

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
            self._workers.stop()
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
            self._workers.status = None
            if self._shm is not None:
                with contextlib.suppress(BufferError, OSError):
                    self._shm.close()
                with contextlib.suppress(FileNotFoundError):
                    self._shm.unlink()
                self._shm = None
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)
                self._tmp = None
