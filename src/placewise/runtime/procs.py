"""The executor's worker processes seen from the parent: their pipes (waiting on them,
reading their messages, sending commands), their status rows in shared memory, and what
went wrong in words (``ExecutionError`` naming the device, the task, the op and the
request) when one raises, dies or hangs; then stopping them."""

from __future__ import annotations

import contextlib
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as mp_wait
from typing import Any

import numpy as np

from placewise.errors import ExecutionError
from placewise.runtime.messages import Inbox, get, put, put_hot
from placewise.runtime.program import ExecProgram

__all__ = ["Proc", "Procs", "pipes"]


@dataclass(slots=True)
class Proc:
    """A worker process: its device, its status row, the process and the parent's pipe."""

    device: str
    index: int
    proc: Any
    conn: Connection
    alive: bool = True


class Procs:
    """The worker processes of one program (``procs``), their status rows (``status``,
    set once the shared memory exists) and the notes of their failures (``notes``)."""

    def __init__(self, program: ExecProgram) -> None:
        self.program = program
        self.procs: list[Proc] = []
        self.status: np.ndarray[Any, Any] | None = None
        self.notes: list[str] = []

    def alive(self) -> list[Proc]:
        return [p for p in self.procs if p.alive]

    # ---- messages ----
    def wait_objects(self) -> list[Any]:
        live = self.alive()
        return [p.conn for p in live] + [p.proc.sentinel for p in live]

    def receive(self, deadline: float, what: str) -> list[tuple[tuple[Any, ...], Proc]]:
        """Messages from workers (blocking until at least one, a fault, or ``deadline``:
        a hang)."""
        timeout = max(0.0, deadline - time.monotonic())
        ready = mp_wait(self.wait_objects(), timeout)
        if not ready:
            self.raise_hang(what, timeout)
        return self.messages(ready, what)

    def messages(self, ready: Sequence[Any], what: str
                 ) -> list[tuple[tuple[Any, ...], Proc]]:
        """The messages of the ready pipes; a worker's error or death raises."""
        out: list[tuple[tuple[Any, ...], Proc]] = []
        died: list[Proc] = []
        for obj in ready:
            for p in self.alive():
                if obj is p.conn:
                    try:
                        while p.conn.poll():
                            msg = get(p.conn)
                            if msg[0] == "error":
                                self.raise_worker_error(p.device, msg)
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
                        msg = get(p.conn)
                        if msg[0] == "error":
                            self.raise_worker_error(p.device, msg)
            self.raise_died(died[0], what)
        return out

    def send_all(self, tag: str, request: int = 0, flag: int = 0) -> None:
        """A command to every live worker (``go`` as a hot message)."""
        for p in self.alive():
            try:
                if tag == "go":
                    put_hot(p.conn, b"G", request, flag)
                else:
                    put(p.conn, tag)
            except (BrokenPipeError, OSError):
                self.raise_died(p, "sending a command")

    # ---- failures in words ----
    def status_of(self, p: Proc) -> tuple[int, int, int, int]:
        """A worker's state (0 idle, 1 running, 2 waiting), task, request, start (ns)."""
        assert self.status is not None
        row = self.status[p.index]
        return int(row[0]), int(row[1]), int(row[2]), int(row[3])

    def raise_worker_error(self, device: str, msg: tuple[Any, ...]) -> None:
        _, task, request, text, tb = msg
        where = self.program.where(int(task))
        rq = f" of request {request}" if int(request) >= 0 else " during start-up"
        self.notes.append(f"{device}: {tb[-2000:]}")
        raise ExecutionError(f"the worker of device {device!r} failed in {where}{rq}: "
                             f"{text}", device=device, task=self.task_name(task),
                             op=self.op_name(task), request=int(request))

    def raise_host_error(self, exc: BaseException, device: str, task: int,
                         request: int) -> None:
        """An in-process worker's step raised: a dead peer first (its pipe broke), else
        that worker's own error, named as a worker process's would be."""
        for p in self.alive():
            if not p.proc.is_alive():
                self.raise_died(p, "a request")
        self.raise_worker_error(device, ("error", task, request,
                                         f"{type(exc).__name__}: {exc}",
                                         traceback.format_exc()[-4000:]))

    def raise_died(self, p: Proc, what: str) -> None:
        p.proc.join(timeout=1.0)
        p.alive = False
        code = p.proc.exitcode
        state, task, request, _t0 = self.status_of(p)
        how = (f"was killed by signal {-code}" if code is not None and code < 0
               else f"exited with status {code}")
        if state == 1 and task >= -1:
            at = f" while running {self.program.where(task)} of request {request}"
        else:
            at = f" during {what}"
        raise ExecutionError(f"the worker of device {p.device!r} (pid {p.proc.pid}) {how}{at}",
                             device=p.device, task=self.task_name(task) if state == 1 else "",
                             op=self.op_name(task) if state == 1 else "",
                             request=request if state == 1 else -1)

    def raise_hang(self, what: str, waited_s: float) -> None:
        now = time.monotonic_ns()
        running = []
        for p in self.alive():
            state, task, request, t0 = self.status_of(p)
            if state == 1:
                running.append((now - t0, p, task, request))
        if running:
            running.sort(key=lambda x: -x[0])
            dt, p, task, request = running[0]
            raise ExecutionError(
                f"the worker of device {p.device!r} hung in {self.program.where(task)} of "
                f"request {request}: no progress for {dt / 1e9:.1f} s (timeout "
                f"{waited_s:.1f} s)", device=p.device, task=self.task_name(task),
                op=self.op_name(task), request=request)
        waiting = []
        for p in self.alive():
            state, task, request, _t0 = self.status_of(p)
            waiting.append(f"{p.device} waits" + (
                f" for {self.task_name(task)!r} of request {request}" if state == 2 else ""))
        raise ExecutionError(f"no worker made progress for {waited_s:.1f} s during {what} "
                             f"(" + "; ".join(waiting) + ")")

    def task_name(self, task: int) -> str:
        if 0 <= task < len(self.program.tasks):
            return self.program.tasks[task].name
        return "io" if task == -1 else ""

    def op_name(self, task: int) -> str:
        """The op a task runs, when it runs one (a partition of several: none)."""
        if 0 <= task < len(self.program.tasks):
            t = self.program.tasks[task]
            if t.vertex is not None and t.vertex in self.program.vertices:
                ops = self.program.vertices[t.vertex].ops
                if len(ops) == 1:
                    return ops[0].name
        return ""

    def await_ready(self, deadline: float, report: Callable[[str], None]
                    ) -> dict[str, dict[str, Any]]:
        """Wait until every worker process has opened its units and warmed them: what
        each reported (by device)."""
        info: dict[str, dict[str, Any]] = {}
        pending = {p.device for p in self.procs}
        while pending:
            for msg, p in self.receive(deadline, "start-up"):
                if msg[0] == "ready":
                    info[p.device] = msg[1]
                    pending.discard(p.device)
                    report(f"worker of {p.device} ready")
        return info

    # ---- stopping ----
    def stop(self) -> None:
        """Stop every worker: politely, then by force."""
        for p in self.procs:
            if p.alive and p.proc.is_alive():
                with contextlib.suppress(Exception):
                    put(p.conn, "stop")
        deadline = time.monotonic() + 2.0
        for p in self.procs:
            with contextlib.suppress(Exception):
                p.proc.join(timeout=max(0.05, deadline - time.monotonic()))
        for p in self.procs:
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


def pipes(ctx: Any, program: ExecProgram, inline: set[str]
          ) -> tuple[dict[str, list[tuple[str, Connection]]], dict[str, dict[str, Any]],
                     dict[str, Inbox], list[Connection]]:
    """One pipe per ordered device pair that has transfers or core gates: its reading end
    per receiving device (with the sender's name), its writing end per sending one; an
    inbox instead where both devices run on this thread (``inline``). The last item: every
    pipe end made (the parent closes its copies once the workers hold theirs)."""
    prog = program
    pairs = sorted({(t.device, t.dst_device) for t in prog.transfers()
                    if t.dst_device is not None} |
                   {(prog.tasks[gt.before].device, prog.tasks[gt.after].device)
                    for gt in prog.gates})
    readers: dict[str, list[tuple[str, Connection]]] = {d.name: [] for d in prog.devices}
    writers: dict[str, dict[str, Any]] = {d.name: {} for d in prog.devices}
    boxes = {d: Inbox() for d in inline}
    ends: list[Connection] = []
    for a, b in pairs:
        if a in inline and b in inline:
            writers[a][b] = boxes[b]
            continue
        r, w = ctx.Pipe(duplex=False)
        readers[b].append((a, r))
        writers[a][b] = w
        ends += [r, w]
    return readers, writers, boxes, ends
