"""The scheduler's thread rule: which worker thread runs each device, which threads sleep,
and what co-run slowdowns and wake-ups apply to a plan's tasks.

The executor (``placewise.runtime.executor``) runs the host's worker, and those of the CPU
devices sharing a core with the host, on the client's own thread, and every other device's
worker on its own (``worker_threads``); a thread sleeps when none of its workers may poll
(``may_poll``, ``sleeping_threads``). ``CoRun`` holds, per task of one timeline, what the
event loop needs to apply the **Co-run slowdown** and **Wake-ups** rules of
``placewise.schedule.simulate``'s docstring; ``corun_of`` builds it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from placewise.cost.model import Cost, Term
from placewise.hardware.spec import Device, DeviceKind
from placewise.schedule.placement import Placement, Problem
from placewise.schedule.timeline import TaskKind, Timeline
from placewise.units import DType

__all__ = ["CoRun", "HasDevices", "corun_of", "may_poll", "sleeping_threads", "worker_threads"]


class HasDevices(Protocol):
    """A machine, or an executable program: anything that names its devices."""

    def device(self, name: str) -> Device: ...


def worker_threads(machine: HasDevices, devices: Iterable[str], host: str) -> dict[str, str]:
    """Device -> the thread its worker runs on when the executor runs a partitioned plan
    of ``devices`` (``runtime.executor``): the host, and the CPU devices sharing a core
    with it, on the client's own thread (named after the host); every other device on its
    own (named after itself).

    >>> from placewise.hardware.load import load_machine
    >>> worker_threads(load_machine("h100-sxm-server"), ["gpu0"], "cpu")
    {'cpu': 'cpu', 'gpu0': 'gpu0'}
    """
    names = list(dict.fromkeys([host, *devices]))
    home = set(machine.device(host).cores or ())
    out: dict[str, str] = {}
    for d in names:
        dev = machine.device(d)
        together = d == host or (
            dev.kind is DeviceKind.CPU and (dev.backend or "").lower() != "cuda"
            and bool(home & set(dev.cores or ())))
        out[d] = host if together else d
    return out


def may_poll(machine: HasDevices, threads: Mapping[str, str], device: str) -> bool:
    """Whether ``device``'s worker may poll (spin) instead of sleeping when it has nothing
    to run: only where no device of another thread (``threads``: device -> thread,
    ``worker_threads``) uses one of its cores."""
    mine = set(machine.device(device).cores or ())
    th = threads[device]
    return not any(mine & set(machine.device(e).cores or ())
                   for e in threads if threads[e] != th)


def sleeping_threads(machine: HasDevices, threads: Mapping[str, str]) -> frozenset[str]:
    """The threads of ``threads`` (device -> thread, ``worker_threads``) that sleep when
    they have nothing to run: a thread polls when one of its workers may (``may_poll``)."""
    by: dict[str, list[str]] = {}
    for d, th in threads.items():
        by.setdefault(th, []).append(d)
    return frozenset(th for th, ds in by.items()
                     if not any(may_poll(machine, threads, d) for d in ds))



class CoRun:
    """What co-run slowdowns and wake-ups need during one simulation (see the module
    docstring), by task id: ``busy_dev``, the plan device (index into ``names``) a compute
    or conversion task keeps busy (-1: a transfer); ``sens``, whether a co-run can slow a
    compute task, ``cand`` / ``cand_order`` the devices that can (other plan devices on
    disjoint cores); ``wake`` / ``dst`` / ``dst_thread``, a transfer's wake-up, receiving
    device and the devices of the receiver's thread when that thread sleeps (0.0: it
    polls, or the sender runs on it). ``woken`` is filled by the simulation."""

    __slots__ = ("any_wake", "busy_dev", "cand", "cand_order", "dst", "dst_thread", "dtypes",
                 "memo", "names", "problem", "sens", "vertex", "wake", "woken")

    def __init__(self, problem: Problem, names: list[str], n: int) -> None:
        self.problem = problem
        self.names = names
        self.busy_dev = [-1] * n
        self.sens = [False] * n
        self.cand: list[frozenset[int]] = [frozenset()] * n
        self.cand_order: list[tuple[int, ...]] = [()] * n
        self.wake = [0.0] * n
        self.dst = [-1] * n
        self.dst_thread: list[tuple[int, ...]] = [()] * n
        self.any_wake = False
        self.vertex: list[int] = [-1] * n
        self.dtypes: list[DType | None] = [None] * n
        self.memo: dict[tuple[int, tuple[int, ...]], float] = {}
        self.woken: list[bool] = [False] * n

    def factor(self, i: int, busy: tuple[int, ...]) -> float:
        """Task ``i``'s slowdown while the plan devices ``busy`` compute."""
        if not busy:
            return 1.0
        key = (i, busy)
        f = self.memo.get(key)
        if f is None:
            dt = self.dtypes[i]
            assert dt is not None
            f = self.problem.corun(self.vertex[i], self.names[self.busy_dev[i]], dt,
                                   frozenset(self.names[x] for x in busy))
            self.memo[key] = f
        return f

    def settle(self, tl: Timeline) -> None:
        """A transfer whose receiver was woken: its cost gains the wake-up as
        ``Term.SYNC`` (so the task's terms still sum to its duration)."""
        for i, w in enumerate(self.woken):
            if w:
                c = tl.cost[i]
                d = self.names[self.dst[i]]
                a = dict(c.assumptions)
                a["wake_s"] = self.wake[i]
                a["wake"] = (f"the receiver's worker on {d} sleeps (its cores are shared with "
                             f"a device of another thread) and was idle when the data came")
                terms: dict[Term, float] = {}
                for k, v in (*c.terms, (Term.SYNC, self.wake[i])):
                    terms[k] = terms.get(k, 0.0) + v
                tl.cost[i] = Cost(tuple(terms.items()),
                                  c.low_s + self.wake[i], c.high_s + self.wake[i],
                                  c.bottleneck, c.source, tuple(sorted(a.items())),
                                  c.memory_bytes, c.buffer_bytes)
                tl.dur[i] = tl.cost[i].total_s


def corun_of(problem: Problem, placement: Placement, tl: Timeline) -> CoRun | None:
    """The co-run and wake-up tables of a built timeline; None when neither applies (one
    plan device, or the cost model knows no slowdown and no wake-up for this plan)."""
    n = len(tl.name)
    used = dict.fromkeys([problem.host, *tl.device,
                          *(d for d in tl.dst_device if d is not None)])
    if len(used) < 2:
        return None
    names = list(used)
    idx = {d: k for k, d in enumerate(names)}
    m = problem.machine
    cores = {d: frozenset(m.device(d).cores or ()) for d in names}
    threads = worker_threads(m, names, problem.host)
    sleeps = sleeping_threads(m, threads)
    members = {th: tuple(idx[d] for d in names if threads[d] == th) for th in sleeps}
    cand_of = {d: frozenset(idx[e] for e in names if e != d and not cores[d] & cores[e])
               for d in names}
    cand_names = {d: frozenset(names[x] for x in cand_of[d]) for d in names}
    co = CoRun(problem, names, n)
    found = False
    kinds, devs, vtx = tl.kind, tl.device, tl.vertex
    for i in range(n):
        k = kinds[i]
        if k is TaskKind.TRANSFER:
            dst = tl.dst_device[i]
            if dst is not None and threads[dst] in sleeps and threads[dst] != threads[devs[i]]:
                w = problem.wake(dst)
                if w > 0.0:
                    co.wake[i] = w
                    co.dst[i] = idx[dst]
                    co.dst_thread[i] = members[threads[dst]]
                    co.any_wake = found = True
            continue
        dev = devs[i]
        co.busy_dev[i] = idx[dev]
        v = vtx[i]
        if k is TaskKind.COMPUTE and v is not None and cand_of[dev]:
            dt = placement[v].dtype
            vi = problem.vertex_index[v]
            if problem.corun(vi, dev, dt, cand_names[dev]) > 1.0:
                co.sens[i] = found = True
                co.cand[i] = cand_of[dev]
                co.cand_order[i] = tuple(sorted(cand_of[dev]))
                co.vertex[i] = vi
                co.dtypes[i] = dt
    return co if found else None

