"""Request classes, admission and the queue in front of the batcher: the one piece of
queueing logic the simulator (``serve.sim``) and the real load generator (``serve.real``)
both run, so that a policy means the same thing in both.

**Classes.** ``--class NAME:share=0.2,priority=1,slo_p99=5ms``: a share of the traffic,
a priority (Triton's convention: 1 is the highest; larger numbers are lower) and an
optional p99 objective. Without classes every request is of one class, ``default``.

**Admission** follows Triton's ``ModelQueuePolicy``:

- ``queue_limit`` (``max_queue_size``): a request arriving to a full queue is rejected;
  with ``preempt``, an arriving request of a higher priority than the lowest queued one
  takes that one's place instead (the newest request of the lowest priority is rejected
  and counted as *preempted*);
- ``timeout_s`` (``default_timeout_microseconds``): a queued request that has waited longer
  when a batch is formed has timed out. ``timeout_action="reject"`` drops it (counted
  *timed out*); ``"delay"`` keeps it, behind every request of its own or a higher priority
  that has not timed out (Triton: "delay the request until all other requests at the same
  (or higher) priority levels that have not reached their timeouts are processed").

**Order.** A batch takes requests by priority (highest first), first come first served
within a priority, delayed requests after the non-delayed ones of their level. The batcher
(``serve.policies``) decides how many to send from the number queued and the wait of the
oldest queued request.

>>> from placewise.serve.policies import parse_batching
>>> q = RequestQueue(parse_batching("static:2"), Admission(), priorities=[2, 1])
>>> q.offer(0, 0.0, 0), q.offer(1, 0.1, 0), q.offer(2, 0.2, 1)
([], [], [])
>>> q.take(0.2)  # the priority-1 request first, then the oldest of priority 2
([2, 0], [])
>>> q.next_time(0.2)  # one left: static:2 waits for a second without a time limit
inf
"""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from placewise.errors import InputError
from placewise.serve.policies import Batcher
from placewise.units import parse_options

__all__ = ["Admission", "RequestClass", "RequestQueue", "parse_class"]


@dataclass(frozen=True, slots=True)
class RequestClass:
    """A class of requests: its ``share`` of the traffic, ``priority`` (1 = highest) and
    p99 objective (``None``: none)."""

    name: str
    share: float = 1.0
    priority: int = 1
    slo_p99_s: float | None = None

    def text(self) -> str:
        slo = f",slo_p99={self.slo_p99_s:g}s" if self.slo_p99_s is not None else ""
        return f"{self.name}:share={self.share:g},priority={self.priority}{slo}"


def parse_class(text: str) -> RequestClass:
    """``NAME:share=S,priority=P,slo_p99=D`` (every option optional).

    >>> parse_class("chat:share=0.2,priority=1,slo_p99=5ms")
    RequestClass(name='chat', share=0.2, priority=1, slo_p99_s=0.005)
    """
    name, _, args = text.strip().partition(":")
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise InputError(f"{text!r}: a class needs a name of letters, digits, '_', '.', '-' "
                         f"(NAME:share=0.2,priority=1,slo_p99=5ms)", place="--class")
    opts = parse_options(args, f"--class {name}",
                         {"share": "positive", "priority": "priority", "slo_p99": "seconds"})
    share = float(opts.get("share", 1.0))
    priority = int(opts.get("priority", 1))
    slo = float(opts["slo_p99"]) if "slo_p99" in opts else None
    return RequestClass(name, share, priority, slo)


@dataclass(frozen=True, slots=True)
class Admission:
    """Triton's queue policy (module docstring): ``queue_limit`` (None: unbounded),
    ``timeout_s`` (None: none), ``timeout_action`` ``reject`` or ``delay``, ``preempt``."""

    queue_limit: int | None = None
    timeout_s: float | None = None
    timeout_action: str = "reject"
    preempt: bool = False

    def __post_init__(self) -> None:
        if self.queue_limit is not None and (isinstance(self.queue_limit, bool)
                                             or self.queue_limit < 1):
            raise InputError(f"the queue limit must be >= 1, got {self.queue_limit}",
                             place="--queue-limit")
        if self.timeout_s is not None and not (self.timeout_s > 0
                                               and math.isfinite(self.timeout_s)):
            raise InputError(f"the timeout must be > 0, got {self.timeout_s}",
                             place="--timeout")
        if self.timeout_action not in ("reject", "delay"):
            raise InputError(f"unknown timeout action {self.timeout_action!r} (reject or "
                             f"delay)", place="--timeout-action")

    def text(self) -> str:
        parts = [f"queue_limit={self.queue_limit}" if self.queue_limit else "unbounded"]
        if self.timeout_s is not None:
            parts.append(f"timeout={self.timeout_s:g}s ({self.timeout_action})")
        if self.preempt:
            parts.append("preempt")
        return ", ".join(parts)


class RequestQueue:
    """The queue of one server (module docstring). Requests are integer ids; the caller
    keeps their arrival times and classes. ``priorities[c]`` is class ``c``'s priority.
    ``preempted`` and ``delayed`` count what the policy did."""

    def __init__(self, batcher: Batcher, admission: Admission,
                 priorities: Sequence[int] = (1,)) -> None:
        self.batcher = batcher
        self.admission = admission
        levels = sorted(set(priorities))
        self._level = [levels.index(p) for p in priorities]  # class -> level (0 = highest)
        self._queues: list[deque[int]] = [deque() for _ in levels]
        self._delayed: list[deque[int]] = [deque() for _ in levels]
        self._arrival: dict[int, float] = {}
        self._size = 0
        self._limit = admission.queue_limit if admission.queue_limit is not None else math.inf
        self._timeout = admission.timeout_s
        self._single = len(levels) == 1 and admission.timeout_s is None
        self.preempted = 0
        self.delayed = 0

    def __len__(self) -> int:
        return self._size

    def offer(self, rid: int, t: float, cls: int = 0) -> list[int]:
        """Admit request ``rid`` arriving at ``t``: ``[]`` when admitted, else the ids
        rejected now (``[rid]``, or the queued request it preempted)."""
        lvl = self._level[cls]
        out: list[int] = []
        if self._size >= self._limit:
            victim = self._victim(lvl) if self.admission.preempt else None
            if victim is None:
                return [rid]
            out.append(victim)
            self.preempted += 1
            self._size -= 1
            del self._arrival[victim]
        self._queues[lvl].append(rid)
        self._arrival[rid] = t
        self._size += 1
        return out

    def _victim(self, lvl: int) -> int | None:
        """The newest queued request of the lowest priority below ``lvl``, removed."""
        for low in range(len(self._queues) - 1, lvl, -1):
            for dq in (self._queues[low], self._delayed[low]):  # the newest first
                if dq:
                    return dq.pop()
        return None

    def _oldest(self) -> float:
        return min(self._arrival[dq[0]] for dq in (*self._queues, *self._delayed) if dq)

    def _expire(self, now: float) -> list[int]:
        """Move (delay) or drop (reject) the requests that have waited past the timeout."""
        if self._timeout is None:
            return []
        limit = now - self._timeout
        dropped: list[int] = []
        for lvl, dq in enumerate(self._queues):
            while dq and self._arrival[dq[0]] < limit:
                rid = dq.popleft()
                if self.admission.timeout_action == "reject":
                    dropped.append(rid)
                    del self._arrival[rid]
                    self._size -= 1
                else:
                    self._delayed[lvl].append(rid)
                    self.delayed += 1
        return dropped

    def next_time(self, now: float) -> float:
        """The earliest time ``>= now`` at which ``take`` would send a batch if nothing
        more arrives (``inf``: never), assuming the server is free from ``now``."""
        if not self._size:
            return math.inf
        oldest = self._arrival[self._queues[0][0]] if self._single else self._oldest()
        if self.batcher.decide(self._size, now - oldest):
            return now
        return max(now, self.batcher.deadline_s(oldest))

    def _decide(self, now: float, oldest: float) -> int:
        k = self.batcher.decide(self._size, now - oldest)
        if not k and now >= self.batcher.deadline_s(oldest):
            # at the deadline by the clock (``now - oldest`` may round below the delay)
            k = self.batcher.decide(self._size, math.inf)
        return k

    def take(self, now: float) -> tuple[list[int], list[int]]:
        """The batch to send at ``now`` (empty: wait) and the requests dropped now for
        their timeout."""
        dropped = self._expire(now)
        if not self._size:
            return [], dropped
        if self._single:
            dq = self._queues[0]
            k = self._decide(now, self._arrival[dq[0]])
            if not k:
                return [], dropped
            k = min(k, self._size)
            batch = [dq.popleft() for _ in range(k)]
        else:
            k = self._decide(now, self._oldest())
            if not k:
                return [], dropped
            k = min(k, self._size)
            batch = []
            for lvl in range(len(self._queues)):
                for dq in (self._queues[lvl], self._delayed[lvl]):
                    while dq and len(batch) < k:
                        batch.append(dq.popleft())
                if len(batch) >= k:
                    break
        for rid in batch:
            del self._arrival[rid]
        self._size -= k
        return batch, dropped

    def drain(self) -> list[int]:
        """Every request still queued (they end in flight), removed."""
        rest = [rid for dq in (*self._queues, *self._delayed) for rid in dq]
        for dq in (*self._queues, *self._delayed):
            dq.clear()
        self._arrival.clear()
        self._size = 0
        return rest
