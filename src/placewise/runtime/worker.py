"""One device's worker: set-up (pin, open the device's compiled units) and the step loop.

A worker runs the steps of one device of an ``ExecProgram`` (``runtime.program``) in order,
for every request in flight: compute steps (a partition's compiled unit, opened through the
device's ``Backend``: ``runtime.backends``), conversions, the send and receive halves of
transfers (shared-memory slots plus a notification on a worker-to-worker pipe), core-gate
tokens, and on the host the ``io:in`` / ``io:out`` steps. It receives a ``WorkerSpec``
(typed steps and tasks of the program) and dispatches each step on its ``StepKind``
through a table. The parent (``runtime.executor``) starts one per device in a process of
its own, or runs the host device's worker in the client's own process and thread
(``Executor(inline_host=True)``), so that a request on the host costs no process hand-off.
Messages: ``runtime.messages``.
"""

from __future__ import annotations

import contextlib
import math
import os
import resource
import signal
import statistics
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing import shared_memory
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as mp_wait
from typing import Any

import numpy as np
import psutil

from placewise.hardware.spec import Device
from placewise.runtime.backends import backend_for
from placewise.runtime.backends.base import Backend, Unit
from placewise.runtime.messages import GATE, NOTE, Inbox, get, put, put_hot
from placewise.runtime.program import ExecStep, ExecTask, ExecVertex, StepKind
from placewise.runtime.shm import STATUS_WORDS, Slot, status_rows
from placewise.schedule.simulate import TaskKind
from placewise.units import DType

__all__ = ["FaultAt", "WorkerSpec", "measure_step_overhead", "wait_group"]

#: a tensor copy a step holds: (data, int8 scale or None, its storage key)
Held = tuple[Any, Any, int]


@dataclass(frozen=True, slots=True)
class FaultAt:
    """A fault to inject (tests): at task index ``task`` of request ``request``, ``kind``
    (crash, hang or raise)."""

    kind: str
    task: int
    request: int


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """What one device's worker runs: its steps in order, the tasks and vertices they name,
    the compiled unit of each partition (vertex -> ONNX file), where its tensors lie in the
    shared-memory block (``runtime.shm``), and how it waits. Sent once, at start-up,
    between the executor's own processes."""

    device: Device
    index: int
    n_workers: int
    shm: str
    slots: int
    steps: tuple[ExecStep, ...]
    tasks: Mapping[int, ExecTask]
    vertices: Mapping[str, ExecVertex]
    #: the vertices' boundary tensors that hold floats (int8 partitions quantize them)
    floats: frozenset[str]
    units: Mapping[str, str]
    inputs: Mapping[str, Slot]
    outputs: Mapping[str, Slot]
    xfers: Mapping[int, Slot]
    fault: FaultAt | None = None
    warm_calls: int = 2
    spin_s: float = 0.0
    idle_spin_s: float = 0.0
    #: another device of the program uses this one's cores: never poll, never spin
    shared_cores: bool = False
    session_spinning: bool = True


def _worker_entry(spec: WorkerSpec, parent: Connection,
                  readers: list[tuple[str, Connection]],
                  writers: dict[str, Connection]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when workers stop
    code = 0
    w: _Worker | None = None
    try:
        w = _Worker(spec, parent, readers, writers)
        put(parent, "ready", w.setup())
        w.loop()
    except BaseException as exc:  # report, then leave without running atexit handlers
        code = 1
        task, request = (w.cur_task, w.cur_request) if w is not None else (-2, -1)
        with contextlib.suppress(Exception):
            put(parent, "error", task, request, f"{type(exc).__name__}: {exc}",
                traceback.format_exc()[-4000:])
    finally:
        with contextlib.suppress(Exception):
            parent.close()
        os._exit(code)


def _rss() -> int:
    return int(psutil.Process().memory_info().rss)


def _maxrss() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


class _Worker:
    """One device's worker: setup (pin, open units) and the step loop."""

    def __init__(self, spec: WorkerSpec, parent: Connection | None,
                 readers: list[tuple[str, Connection]], writers: Mapping[str, Any], *,
                 shm: Any = None, inbox: Inbox | None = None) -> None:
        """``parent`` is the pipe to the parent process; ``None`` for the host's worker run
        inline by the client (``shm``: the client's own shared-memory block), which then
        hands requests over with ``begin`` and takes results through ``on_output`` and
        ``on_done``. ``inbox``: where workers on the same thread leave this worker's transfer
        notes and gate tokens (instead of a pipe) and the tensors they hand over."""
        self.inbox = inbox if inbox is not None else Inbox()
        self.spec = spec
        self.parent = parent
        self.inline = parent is None
        self._shm_given = shm
        #: inline only: request -> its input arrays (graph-input order)
        self.inline_inputs: dict[int, Sequence[Any]] = {}
        self.on_output: Callable[[int, int, list[Any]], None] | None = None
        self.on_done: Callable[[int, int], None] | None = None
        self._saved_pin: tuple[set[int], int] | None = None
        #: inline devices of different cores on one thread share a one-element list: the
        #: worker the thread is pinned for (each re-pins before its steps)
        self.pin_state: list[Any] | None = None
        self.readers = [c for _, c in readers]
        self.writers = writers
        self.device = spec.device.name
        self.cores = list(spec.device.cores or ())
        self.steps = spec.steps
        self.tasks = spec.tasks
        self.vertices = spec.vertices
        self.floats = spec.floats
        self.cur_task = -2
        self.cur_request = -1
        self.rss_start = _rss()
        #: the step table: what each kind of step does (see ``_step``)
        self._run: dict[StepKind, Callable[[ExecStep, int, dict[str, Held], int],
                                           tuple[int, int, int, int, int]]] = {
            StepKind.COMPUTE: self._run_compute, StepKind.CONVERT: self._run_convert,
            StepKind.SEND: self._run_send, StepKind.RECV: self._run_recv,
            StepKind.IO_IN: self._run_io_in, StepKind.IO_OUT: self._run_io_out}

    # ---- setup ----
    def setup(self) -> dict[str, Any]:
        """Pin, open the units and warm them; returns what the parent records of this
        worker."""
        import torch  # heavy (1-2 s): the worker's conversion kernels and thread pinning

        from placewise.runtime import opexec  # loads torch

        spec = self.spec
        self.torch = torch
        self.opexec = opexec
        if self.inline:  # the client's own thread: put its pinning back on close
            self._saved_pin = (os.sched_getaffinity(0), torch.get_num_threads())
        self.threads = opexec.pin_process(self.cores)
        torch.set_grad_enabled(False)
        self.shm = (self._shm_given if self._shm_given is not None
                    else shared_memory.SharedMemory(name=spec.shm))
        buf = self.shm.buf
        self.status = status_rows(buf, spec.n_workers)[spec.index]
        self.status[:] = 0
        self.status[5] = os.getpid()
        self.slots = spec.slots
        self.in_views = {t: b.views(buf) for t, b in spec.inputs.items()}
        self.out_views = {t: b.views(buf) for t, b in spec.outputs.items()}
        self.x_views = {ti: b.views(buf) for ti, b in spec.xfers.items()}
        self.backend: Backend = backend_for(spec.device)
        self.units: dict[int, Unit] = {}
        for st in self.steps:
            if st.kind is StepKind.COMPUTE:
                self.cur_task = st.task
                self.units[st.task] = self.backend.open(
                    spec.units[self.tasks[st.task].vertex or ""], spec.device,
                    threads=self.threads, spinning=spec.session_spinning)
        self.cur_task = -2
        # state of the step loop
        self.live: dict[int, list[int]] = {}  # storage key -> [bytes, refs]
        self.live_bytes = sum(u.weight_bytes for u in self.units.values())
        self.weight_total = self.live_bytes
        self.peak_live = self.live_bytes
        self.rec_tasks: list[tuple[Any, ...]] = []
        self.rec_waits: list[tuple[Any, ...]] = []
        self.snapshot: dict[str, Held] | None = None
        self.fault = spec.fault
        self.spin_ns = int(spec.spin_s * 1e9)
        self.idle_spin_ns = int(spec.idle_spin_s * 1e9)
        self._warm()
        self._init_loop()
        return {"threads": self.threads, "weights_bytes": self.weight_total,
                "rss_start": self.rss_start, "rss_ready": _rss(), "pid": os.getpid(),
                "isa": str(torch.backends.cpu.get_cpu_capability()),
                "inline": self.inline}

    def release(self) -> None:
        """Inline only: drop the units and the views on the client's shared memory, and
        give the client's thread its pinning back."""
        for name in ("units", "in_views", "out_views", "x_views"):
            if hasattr(self, name):
                setattr(self, name, {})
        self.status = np.zeros(STATUS_WORDS, dtype=np.int64)
        if hasattr(self, "env"):
            self.env.clear()
        self.inline_inputs = {}
        if self._saved_pin is not None:
            cores, threads = self._saved_pin
            self._saved_pin = None
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, cores)
            self.torch.set_num_threads(threads)

    def _warm(self) -> None:
        """Run every unit ``warm_calls`` times on zeros (first calls build caches and
        allocate)."""
        for _ in range(max(0, self.spec.warm_calls)):
            for unit in self.units.values():
                with contextlib.suppress(Exception):
                    unit.timed_run(unit.zero_feeds())

    # ---- accounting ----
    def _storage(self, data: Any) -> tuple[int, int]:
        if isinstance(data, np.ndarray):
            # keyed by the owning array object (alive while a step holds it): reading the
            # buffer's address (``__array_interface__``) costs 3 us per call here
            base = data
            while isinstance(base.base, np.ndarray):
                base = base.base
            return id(base), int(base.nbytes)
        return id(data), int(getattr(data, "nbytes", 0))

    def _hold(self, data: Any) -> int:
        """Count ``data``'s storage as live (once per storage); returns its key."""
        ptr, nb = self._storage(data)
        e = self.live.get(ptr)
        if e is None:
            self.live[ptr] = [nb, 1]
            self.live_bytes += nb
        else:
            e[1] += 1
        return ptr

    def _release(self, ptr: int) -> None:
        e = self.live.get(ptr)
        if e is None:
            return
        e[1] -= 1
        if e[1] <= 0:
            self.live_bytes -= e[0]
            del self.live[ptr]

    # ---- conversions (host arrays, ``runtime.opexec`` kernels) ----
    def _quant(self, data: Any) -> tuple[Any, float]:
        q, scale = self.opexec.quantize_int8(self.torch.from_numpy(np.asarray(data)))
        return q.numpy(), scale

    def _dequant(self, data: Any, scale: float) -> Any:
        return self.opexec.dequantize_int8(self.torch.from_numpy(np.asarray(data)),
                                           scale).numpy()

    def _convert(self, data: Any, scale: float | None, task: ExecTask
                 ) -> tuple[Any, float | None]:
        assert task.src_rep is not None and task.dst_rep is not None
        y, s = self.opexec.convert_tensor(self.torch.from_numpy(np.asarray(data)),
                                          task.src_rep, task.dst_rep, scale)
        return y.numpy(), s

    # ---- the loop ----
    def loop(self) -> None:
        torch = self.torch
        with torch.inference_mode():
            self._loop()

    def _init_loop(self) -> None:
        #: requests in flight here, oldest first; per request its next step, capture flag
        #: and tensors
        self.active: list[int] = []
        self.cursor: dict[int, int] = {}
        self.capture: dict[int, bool] = {}
        self.env: dict[int, dict[str, tuple[Any, Any, int]]] = {}
        self.arrived: dict[tuple[int, int], tuple[float, int]] = {}
        self.tokens: dict[tuple[int, int], int] = {}  # (earlier task, request) -> ns
        self.n_msgs = 0  # notes and tokens received so far
        self.gated = any(st.gates_in for st in self.steps)

    def _loop(self) -> None:
        assert self.parent is not None
        conns = [self.parent, *self.readers]
        group = [(self, conns)]
        while True:
            if self.advance(conns):
                continue
            if wait_group(group, None) is False:
                return

    def begin(self, r: int, capture: bool) -> None:
        """Take request ``r`` into the pipeline (the parent's *go*)."""
        self.active.append(r)
        self.cursor[r] = 0
        self.capture[r] = capture
        self.env[r] = {}

    def _done(self, r: int) -> None:
        t = time.monotonic_ns()
        if self.on_done is not None:
            self.on_done(r, t)
        else:
            assert self.parent is not None
            put_hot(self.parent, b"D", r, t)

    def advance(self, conns: list[Connection]) -> bool:
        """Run one ready step (older requests first, every time); False when none is."""
        steps = self.steps
        gated = self.gated
        for r in self.active:
            c = self.cursor[r]
            st = steps[c]
            if st.kind is StepKind.RECV and (st.task, r) not in self.arrived:
                self._drain(conns, 0.0)
                if (st.task, r) not in self.arrived:
                    continue
            elif gated and st.gates_in:  # core gates: wait like for a transfer
                if self._closed_gate(st, r) >= 0:
                    self._drain(conns, 0.0)
                    if self._closed_gate(st, r) >= 0:
                        continue
                for b in st.gates_in:
                    del self.tokens[(b, r)]
            pin = self.pin_state
            if pin is not None and pin[0] is not self:  # inline devices on other cores
                os.sched_setaffinity(0, self.cores)
                pin[0] = self
            self._step(st, r, self.env[r], self.capture[r])
            self.cursor[r] = c + 1
            if c + 1 == len(steps):
                self.active.remove(r)
                del self.cursor[r], self.env[r], self.capture[r]
                self._done(r)
            return True
        return False

    def _closed_gate(self, st: ExecStep, r: int) -> int:
        """The first task whose gate token step ``st`` of request ``r`` still lacks; -1
        when every gate is open."""
        tokens = self.tokens
        for b in st.gates_in:
            if (b, r) not in tokens:
                return int(b)
        return -1

    def _drain(self, conns: list[Connection], timeout: float | None) -> bool:
        """Read every pending message (blocking for one if ``timeout`` is None); False
        when the worker must stop."""
        if self.inbox.box:
            self._take_inbox()
            if timeout == 0.0:
                return True
        if not conns and timeout == 0.0:
            return True  # polling a pipe costs 6 us here: none to poll
        return self._take(mp_wait(conns, timeout), conns)

    def _note(self, data: bytes) -> None:
        self.n_msgs += 1
        if len(data) == GATE.size:
            _tag, ti, r = GATE.unpack(data)
            self.tokens[(ti, r)] = time.monotonic_ns()
        else:
            ti, r, scale = NOTE.unpack(data)
            self.arrived[(ti, r)] = (scale, time.monotonic_ns())

    def _take_inbox(self) -> bool:
        """Read the notes and tokens workers on this thread left; whether there were any."""
        box = self.inbox.box
        if not box:
            return False
        while box:
            self._note(box.popleft())
        return True

    def _take(self, ready: Sequence[Any], conns: list[Connection]) -> bool:
        """Read the messages of this worker's ready pipes (``conns``: all of them, less a
        peer's that broke); False when the worker must stop."""
        par = self.parent
        for c in ready:
            if par is not None and c is par:
                while True:
                    try:
                        if not c.poll():
                            break
                        msg = get(c)
                    except (EOFError, OSError):
                        return False  # the parent is gone
                    tag = msg[0]
                    if tag == "go":
                        self.begin(int(msg[1]), bool(msg[2]))
                    elif tag == "flush":
                        put(c, "telemetry", self.telemetry_data())
                    elif tag == "solo":
                        put(c, "solo", self._solo(int(msg[1])))
                    elif tag == "spin":
                        self.set_spin(float(msg[1]), float(msg[2]))
                    elif tag == "stop":
                        return False
            else:
                assert isinstance(c, Connection)
                try:
                    while c.poll():
                        self._note(c.recv_bytes())
                except (EOFError, OSError):
                    # a peer died: the parent sees it and stops the run
                    self.readers = [x for x in self.readers if x is not c]
                    conns[:] = [x for x in conns if x is not c]
        return True

    def _wait_mark(self, t0: int) -> tuple[int, int, int]:
        """Nothing is runnable: what this worker waits for (a task, a gate's task, or -1:
        the next request), also shown in its status block."""
        waiting_for, gate = -1, 0
        if self.active:
            r0 = self.active[0]
            st0 = self.steps[self.cursor[r0]]
            waiting_for = st0.task
            if self.gated and st0.gates_in:
                b = self._closed_gate(st0, r0)
                if b >= 0:  # waiting for that task's end on another device
                    waiting_for, gate = b, 1
            status = self.status
            status[0] = 2
            status[1] = waiting_for
            status[2] = r0
        return t0, waiting_for, gate

    def _wait_end(self, mark: tuple[int, int, int]) -> None:
        """The wait is over: recorded when a request is in flight here (a wait that ends
        with a new request counts as waiting for it)."""
        t0, waiting_for, gate = mark
        if self.active:
            if gate:
                self.rec_waits.append((self.active[0], waiting_for, t0, time.monotonic_ns(),
                                       1))
            else:
                self.rec_waits.append((self.active[0], waiting_for, t0, time.monotonic_ns()))
        self.status[0] = 0

    def set_spin(self, spin_s: float, idle_spin_s: float) -> None:
        own = not self.spec.shared_cores
        self.spin_ns = int(spin_s * 1e9) if own else 0
        self.idle_spin_ns = int(idle_spin_s * 1e9) if own else 0

    def telemetry_data(self) -> dict[str, Any]:
        """The records since the last call (and they are cleared)."""
        data = {"tasks": self.rec_tasks, "waits": self.rec_waits, "peak_live": self.peak_live,
                "rss_peak": max(_maxrss(), _rss())}  # the kernel updates its mark lazily
        self.rec_tasks, self.rec_waits = [], []
        self.peak_live = self.live_bytes
        return data

    def _inject(self, task: int, r: int) -> None:
        f = self.fault
        if f is None or f.task != task or f.request != r:
            return
        if f.kind == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        elif f.kind == "hang":
            time.sleep(3600.0)
        else:
            raise RuntimeError("injected fault")

    # ---- the steps ----
    def _step(self, st: ExecStep, r: int, env: dict[str, Held], cap: bool) -> None:
        """Run step ``st`` of request ``r`` (its kind's entry of the step table) and record
        it: ``(request, task, kind, start, end, kernel, a, b, cpu)`` where ``a, b`` are the
        hidden conversion time and the live bytes after it (a send: when the note was
        written and sent; a receive: when the note arrived and the live bytes)."""
        ti = st.task
        status = self.status
        c0 = time.process_time_ns()
        t0 = time.monotonic_ns()
        status[3] = t0
        status[1] = ti
        status[2] = r
        status[0] = 1
        self.cur_task, self.cur_request = ti, r
        if self.fault is not None:
            self._inject(ti, r)
        rec = self._run[st.kind](st, r, env, t0)
        if st.gates_out:  # core gates: this task has ended, the later tasks may start
            token = GATE.pack(b"T", ti, r)
            for dst in st.gates_out:
                self.writers[dst].send_bytes(token)
        if self.live_bytes > self.peak_live:
            self.peak_live = self.live_bytes
        self.rec_tasks.append((r, ti, st.kind.value, *rec, time.process_time_ns() - c0))
        self._after(st, r, env, cap)
        status[0] = 0

    def _run_compute(self, st: ExecStep, r: int, env: dict[str, Held], t0: int
                     ) -> tuple[int, int, int, int, int]:
        kernel, hidden = self._compute(st, env)
        return t0, time.monotonic_ns(), kernel, hidden, self.live_bytes

    def _run_convert(self, st: ExecStep, r: int, env: dict[str, Held], t0: int
                     ) -> tuple[int, int, int, int, int]:
        (rk,), (wk,) = st.reads, st.writes
        data, scale, _ = env[rk]
        k0 = time.monotonic_ns()
        y, s = self._convert(data, scale, self.tasks[st.task])
        kernel = time.monotonic_ns() - k0
        env[wk] = (y, s, self._hold(y))
        return t0, time.monotonic_ns(), kernel, 0, self.live_bytes

    def _run_send(self, st: ExecStep, r: int, env: dict[str, Held], t0: int
                  ) -> tuple[int, int, int, int, int]:
        ti = st.task
        (rk,) = st.reads
        data, scale, _ = env[rk]
        peer = self.writers[self.tasks[ti].dst_device or ""]
        k0 = time.monotonic_ns()
        if isinstance(peer, Inbox):  # a worker on this thread: hand the tensor over
            peer.hand[(ti, r)] = data
        else:
            _write(self.x_views[ti][r % self.slots], self.backend.to_host(data))
        k1 = time.monotonic_ns()
        note = NOTE.pack(ti, r, math.nan if scale is None else float(scale))
        t_note = time.monotonic_ns()
        peer.send_bytes(note)
        return k0, k1, k1 - k0, t_note, time.monotonic_ns()

    def _run_recv(self, st: ExecStep, r: int, env: dict[str, Held], t0: int
                  ) -> tuple[int, int, int, int, int]:
        ti = st.task
        scale, received = self.arrived.pop((ti, r))
        (wk,) = st.writes
        k0 = time.monotonic_ns()
        data = self.inbox.hand.pop((ti, r), None)
        if data is None:
            data = self.backend.from_host(np.array(self.x_views[ti][r % self.slots], copy=True))
        k1 = time.monotonic_ns()
        env[wk] = (data, None if math.isnan(scale) else scale, self._hold(data))
        return k0, k1, k1 - k0, received, self.live_bytes

    def _run_io_in(self, st: ExecStep, r: int, env: dict[str, Held], t0: int
                   ) -> tuple[int, int, int, int, int]:
        slot = r % self.slots
        names = self.spec.inputs
        if self.inline:  # the client's own arrays: nothing to copy
            arrays = self.inline_inputs.pop(r)
            for name, key, arr in zip(names, st.writes, arrays, strict=True):
                data = np.ascontiguousarray(arr, dtype=self.in_views[name][slot].dtype)
                env[key] = (data, None, self._hold(data))
        else:
            for name, key in zip(names, st.writes, strict=True):
                data = np.array(self.in_views[name][slot], copy=True)
                env[key] = (data, None, self._hold(data))
        t1 = time.monotonic_ns()
        return t0, t1, t1 - t0, 0, self.live_bytes

    def _run_io_out(self, st: ExecStep, r: int, env: dict[str, Held], t0: int
                    ) -> tuple[int, int, int, int, int]:
        slot = r % self.slots
        names = self.spec.outputs
        outs = []
        if self.inline:
            outs = [np.asarray(self.backend.to_host(env[key][0]),
                               dtype=self.out_views[name][slot].dtype)
                    for name, key in zip(names, st.reads, strict=True)]
        else:
            for name, key in zip(names, st.reads, strict=True):
                _write(self.out_views[name][slot], self.backend.to_host(env[key][0]))
        t1 = time.monotonic_ns()  # the outputs are ready: the request's latency ends here
        if self.on_output is not None:
            self.on_output(r, t1, outs)
        else:
            assert self.parent is not None
            put_hot(self.parent, b"O", r, t1)
        return t0, t1, t1 - t0, 0, self.live_bytes

    def _after(self, st: ExecStep, r: int, env: dict[str, Held], cap: bool) -> None:
        if cap:
            snap = self.snapshot if self.snapshot is not None else {}
            if st.kind is StepKind.IO_IN:
                snap.clear()
            for k in st.writes:
                if k in env:
                    snap[k] = env[k]
            self.snapshot = snap
        for k in st.frees:
            v = env.pop(k, None)
            if v is not None:
                self._release(v[2])

    def _compute(self, st: ExecStep, env: Mapping[str, Held]) -> tuple[int, int]:
        """Run the step's unit on ``env``'s copies, write its outputs into ``env``; an int8
        unit's float boundary is dequantized / quantized around it (hidden time)."""
        v = self.vertices[self.tasks[st.task].vertex or ""]
        int8 = v.dtype is DType.INT8
        floats = self.floats
        now = time.monotonic_ns
        hidden = 0
        vals: dict[str, Any] = {}
        for name, key in zip(v.inputs, st.reads, strict=True):
            data, scale, _ = env[key]
            if int8 and scale is not None and name in floats:
                h0 = now()
                data = self._dequant(data, scale)
                hidden += now() - h0
            vals[name] = data
        unit = self.units[st.task]
        outs, kernel = unit.timed_run(vals)
        got = dict(zip(unit.outputs, outs, strict=True))
        for name, key in zip(v.outputs, st.writes, strict=True):
            data = got[name]
            scale = None
            if int8 and name in floats:
                h0 = now()
                data, scale = self._quant(data)
                hidden += now() - h0
            assert isinstance(env, dict)
            env[key] = (data, scale, self._hold(data))
        return kernel, hidden

    # ---- solo replay ----
    def _solo(self, repeats: int) -> list[tuple[int, str, float, float, float]]:
        """Replay this device's steps of the captured request ``repeats`` times, alone:
        per task (step kind, median total, kernel and hidden seconds)."""
        snap = self.snapshot or {}
        samples: dict[int, list[tuple[int, int, int, str]]] = {}
        saved = (self.rec_tasks, self.rec_waits, self.live_bytes, self.peak_live)
        self.rec_tasks, self.rec_waits = [], []
        for _ in range(max(1, repeats)):
            for st in self.steps:
                if st.task < 0 or not all(k in snap for k in st.reads):
                    continue
                t0 = time.monotonic_ns()
                kernel, hidden = self._replay(st, snap)
                samples.setdefault(st.task, []).append(
                    (time.monotonic_ns() - t0, kernel, hidden, st.kind.value))
        self.rec_tasks, self.rec_waits, self.live_bytes, self.peak_live = saved
        med = statistics.median
        return [(ti, s[0][3], med(x[0] for x in s) / 1e9, med(x[1] for x in s) / 1e9,
                 med(x[2] for x in s) / 1e9) for ti, s in samples.items()]

    def _replay(self, st: ExecStep, snap: Mapping[str, Held]) -> tuple[int, int]:
        """One solo run of step ``st`` on the captured copies: (kernel, hidden) ns."""
        k0 = time.monotonic_ns()
        if st.kind is StepKind.COMPUTE:
            env = {k: snap[k] for k in st.reads}
            kernel, hidden = self._compute(st, env)
            for k in st.writes:
                if (v := env.get(k)) is not None:
                    self._release(v[2])
            return kernel, hidden
        if st.kind is StepKind.CONVERT:
            data, scale, _ = snap[st.reads[0]]
            self._convert(data, scale, self.tasks[st.task])
        elif st.kind is StepKind.SEND:
            _write(self.x_views[st.task][0], self.backend.to_host(snap[st.reads[0]][0]))
        else:  # recv
            self.backend.from_host(np.array(self.x_views[st.task][0], copy=True))
        return time.monotonic_ns() - k0, 0


def _write(view: np.ndarray[Any, Any], data: Any) -> None:
    np.copyto(view, data, casting="unsafe")


def wait_group(group: Sequence[tuple[_Worker, list[Connection]]], timeout: float | None,
               extra: Sequence[Any] = (),
               on_extra: Callable[[list[Any]], None] | None = None) -> bool | None:
    """Nothing is runnable on any worker of ``group`` (each with its pipes; one thread runs
    them all): wait for a message and read it. Polls first for the longest spin time of
    the group (a worker polls only where its device's cores are its own: that saves a
    blocked thread's wake-up, for a transfer or for the next request). ``extra`` are more
    objects to wait on (the inline host: the other workers' pipes), handed to
    ``on_extra`` when ready. False when a worker must stop, None when ``timeout`` passed
    without a message."""
    if any([w._take_inbox() for w, _ in group]):
        return True  # a worker of this thread left a message: no need to wait
    t0 = time.monotonic_ns()
    marks = [(w, w._wait_mark(t0)) for w, _ in group]
    spin = max((w.spin_ns if w.active else w.idle_spin_ns) for w, _ in group)
    objs: list[Any] = [c for _, cs in group for c in cs]
    objs += extra
    limit = t0 + spin
    while True:
        polling = spin > 0 and time.monotonic_ns() < limit
        ready = mp_wait(objs, 0.0 if polling else timeout)
        if ready or not polling:
            break
    got: bool | None = True if ready else None
    if ready:
        theirs = [x for x in ready if any(x is e for e in extra)]
        if theirs:
            assert on_extra is not None
            on_extra(theirs)
        for w, cs in group:
            mine = [c for c in ready if any(c is x for x in cs)]
            if mine and not w._take(mine, cs):
                got = False
    for w, mark in marks:
        w._wait_end(mark)
    return got


class _NoOp(Unit):
    """A unit that copies its input to its output (``measure_step_overhead``)."""

    inputs = ("x",)
    outputs = ("y",)
    weight_bytes = 0

    def run(self, feeds: Mapping[str, Any]) -> Sequence[Any]:
        return [feeds["x"]]

    def zero_feeds(self) -> dict[str, Any]:
        return {"x": np.zeros(16, dtype=np.float32)}


def measure_step_overhead(steps: int = 200) -> list[float]:
    """Seconds the worker's step path (``_Worker._step``: status block, telemetry records,
    live-tensor bookkeeping, frees) costs per compute step beyond its kernel time, one
    sample per step, measured in the calling process (profiling calls it in a worker
    pinned to the device's cores). The step runs a no-op unit on a small array, so the
    sample is the step's wall time minus the (near-zero) kernel time it recorded. The
    blocking/polling of ``_loop`` between steps and the hand-off of a request are not in it.

    >>> s = measure_step_overhead(5)
    >>> len(s), all(x >= 0 for x in s)
    (5, True)
    """
    if steps < 1:
        raise ValueError("steps must be >= 1")
    w = _Worker.__new__(_Worker)
    w.vertices = {"v": ExecVertex("v", "cpu", DType.FP32, (), ("x",), ("y",))}
    w.floats = frozenset({"x", "y"})
    w.tasks = {0: ExecTask(0, "v", TaskKind.COMPUTE, "cpu", None, "v", None, None, None, (),
                           0.0, 0.0)}
    w._run = {StepKind.COMPUTE: w._run_compute}
    w.status = np.zeros(STATUS_WORDS, dtype=np.int64)
    w.fault = None
    w.slots = 1
    w.units = {0: _NoOp()}
    w.live, w.live_bytes, w.peak_live = {}, 0, 0
    w.rec_tasks = []
    w.snapshot = None
    x = np.zeros(16, dtype=np.float32)
    st = ExecStep(StepKind.COMPUTE, 0, ("x",), ("y",), ("y",))
    now = time.perf_counter_ns
    out: list[float] = []
    for _ in range(steps + 3):  # three warm-up steps
        env: dict[str, Held] = {"x": (x, None, w._hold(x))}
        t0 = now()
        w._step(st, 0, env, False)
        t1 = now()
        kernel = w.rec_tasks[-1][5]
        out.append(max(0.0, (t1 - t0 - kernel) * 1e-9))
        w._release(env["x"][2])
        w.rec_tasks.clear()
    return out[3:]
