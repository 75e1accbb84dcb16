"""The requests between the executor's client and its workers: each request's id and
slot (``request % slots``: where the workers address its tensors in shared memory), when
it was submitted, when the host had its outputs, when every worker was done with it; the
``Completion``s the client polls for and the ``RequestRecord``s telemetry keeps.

>>> h = Handoff(slots=1, workers=2)
>>> r = h.open(); h.can_submit
False
>>> h.on_output(r, 10, []); h.on_done(r, 11); h.on_done(r, 12)
>>> [(c.request, c.outputs_ns) for c in h.take_completed()], h.can_submit
([(0, 10)], True)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from placewise.runtime.telemetry import RequestRecord

__all__ = ["Completion", "Handoff"]


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


class Handoff:
    """Requests on ``slots`` slots, each done once ``workers`` workers are done with it."""

    def __init__(self, slots: int, workers: int = 1) -> None:
        self.slots = slots
        self.workers = workers
        self.next_request = 0
        #: requests in flight by id; done since the last ``records`` (for telemetry);
        #: done since the last ``take_completed`` (for the client)
        self.flight: dict[int, _Flight] = {}
        self.finished: list[tuple[int, _Flight]] = []
        self.completed: list[Completion] = []

    @property
    def can_submit(self) -> bool:
        """Whether the next request's slot is not held by a request still in flight (with
        requests finishing in order: fewer than ``slots`` in flight)."""
        return (self.next_request - self.slots) not in self.flight

    def open(self) -> int:
        """A new request, submitted now: its id."""
        r = self.next_request
        self.next_request += 1
        self.flight[r] = _Flight(time.monotonic_ns(), self.workers)
        return r

    def on_output(self, request: int, ready_ns: int, outputs: list[np.ndarray[Any, Any]]
                  ) -> None:
        """The host has written request ``request``'s outputs (at ``ready_ns``)."""
        f = self.flight[request]
        f.ready_ns = ready_ns
        f.outputs = outputs
        f.out_ns = time.monotonic_ns()

    def on_done(self, request: int, t_ns: int) -> None:
        """A worker is done with request ``request``; the last one frees its slot."""
        f = self.flight[request]
        f.done_count += 1
        f.done_ns = max(f.done_ns, t_ns)
        if f.done_count == f.workers:
            del self.flight[request]
            self.finished.append((request, f))
            self.completed.append(Completion(request, f.submit_ns, f.ready_ns,
                                             max(f.done_ns, f.out_ns), f.outputs or []))

    def take_completed(self) -> list[Completion]:
        """The requests done since the last call, in the order they were done."""
        got, self.completed = self.completed, []
        return got

    def records(self, phase: str) -> list[RequestRecord]:
        """The requests done since the last call, as ``RequestRecord``s of ``phase``."""
        out = [RequestRecord(r, phase, f.submit_ns, f.ready_ns, max(f.done_ns, f.out_ns),
                             f.out_ns) for r, f in sorted(self.finished, key=lambda x: x[0])]
        self.finished = []
        return out
