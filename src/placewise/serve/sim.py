"""A batcher in front of a pipeline of stages, simulated request by request.

**Model.** Requests arrive at given times (``placewise.serve.arrivals``) into one FIFO
queue. Whenever the first stage is free and requests are queued, the batcher
(``placewise.serve.policies``) decides how many to send as one batch; it is asked again at
every arrival and at its deadline. A batch of ``b`` requests then flows through the stages
in order (the plan's partitions, each on its own device): stage ``k`` takes
``service_s(b)[k]`` seconds and serves one batch at a time, first come first served, so
several batches are in flight across stages at once. A request's latency is its batch's
finish on the last stage minus its arrival; its wait, its batch's start minus its arrival.

**Admission** (Triton's queue policy): with ``queue_limit``, a request that arrives to a
full queue is rejected; with ``timeout_s``, a queued request whose wait exceeds it when a
batch is formed is dropped as timed out. **Conservation**: ``arrived = completed +
rejected + timed_out + in_flight`` (in flight: queued when arrivals ended and never sent,
e.g. fewer than ``B`` left for ``static:B``).

Because stages are FIFO and the batcher only sends when the first stage is free, every
batch's times follow from the previous batch's by a recurrence: the loop is linear in the
number of requests, with no event heap.

>>> import numpy as np
>>> from placewise.serve.policies import parse_batching
>>> r = simulate(np.array([0.0, 0.1, 0.2]), lambda b: (0.5,), parse_batching("none"))
>>> r.latency_s.round(3).tolist(), r.completed, r.conserved()
([0.5, 0.9, 1.3], 3, True)
>>> r = simulate(np.array([0.0, 0.1, 0.2]), lambda b: (0.5,),
...              parse_batching("dynamic:max_batch=2,max_delay=0.05"))
>>> r.batch_sizes.tolist(), r.latency_s.round(3).tolist()
([1, 2], [0.55, 0.95, 0.85])
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from placewise.errors import InputError
from placewise.serve.policies import Batcher

__all__ = ["ServeResult", "quantile_ci", "simulate"]

ServiceFn = Callable[[int], Sequence[float]]


@dataclass(frozen=True)
class ServeResult:
    """One simulated run. ``latency_s`` and ``wait_s`` are per completed request in
    arrival order; ``batch_sizes`` per batch in dispatch order; ``busy_s`` per stage;
    ``span_s`` from the first arrival to the last completion."""

    arrived: int
    completed: int
    rejected: int
    timed_out: int
    in_flight: int
    latency_s: np.ndarray
    wait_s: np.ndarray
    batch_sizes: np.ndarray
    busy_s: tuple[float, ...]
    span_s: float

    @property
    def throughput_rps(self) -> float:
        return self.completed / self.span_s if self.span_s > 0 else 0.0

    def utilization(self) -> tuple[float, ...]:
        return tuple(b / self.span_s if self.span_s > 0 else 0.0 for b in self.busy_s)

    def conserved(self) -> bool:
        return self.arrived == self.completed + self.rejected + self.timed_out + self.in_flight


def quantile_ci(samples: np.ndarray, q: float, *, z: float = 1.96
                ) -> tuple[float, float, float]:
    """The ``q`` quantile of ``samples`` with a non-parametric ~95 % confidence interval:
    the order statistics at ranks ``n q -/+ z sqrt(n q (1 - q))`` (the normal
    approximation of the binomial count of samples below the quantile), clipped to the
    sample. With fewer than ``1 / (1 - q)`` samples (p99: 100) the interval is open at the
    top (``inf``).

    >>> quantile_ci(np.arange(1000.0), 0.5)
    (499.5, 469.0, 531.0)
    """
    x = np.sort(np.asarray(samples, dtype=float))
    n = len(x)
    if n == 0:
        return (math.nan, math.nan, math.nan)
    mid = float(np.quantile(x, q))
    half = z * math.sqrt(n * q * (1 - q))
    lo = math.floor(n * q - half)
    hi = math.ceil(n * q + half)
    low = float(x[max(0, lo)])
    high = float(x[hi]) if hi < n else math.inf
    return (mid, low, high)


def simulate(arrivals_s: np.ndarray, service_s: ServiceFn, batcher: Batcher, *,
             queue_limit: int | None = None, timeout_s: float | None = None,
             deterministic: bool = True) -> ServeResult:
    """Simulate ``batcher`` in front of the stages ``service_s(b)`` describes (see the
    module docstring). ``arrivals_s`` must be non-decreasing. ``deterministic``: a batch of
    ``b`` always takes ``service_s(b)`` (asked once per size); else ``service_s`` is asked
    for every batch (random service times)."""
    arr = np.asarray(arrivals_s, dtype=float)
    if arr.ndim != 1 or (len(arr) > 1 and bool((np.diff(arr) < 0).any())):
        raise InputError("arrival times must be a non-decreasing sequence", place="arrivals")
    if queue_limit is not None and queue_limit < 1:
        raise InputError(f"the queue limit must be >= 1, got {queue_limit}",
                         place="--queue-limit")
    if timeout_s is not None and not timeout_s > 0:
        raise InputError(f"the timeout must be > 0, got {timeout_s}", place="--timeout")
    times = arr.tolist()
    n = len(times)
    cache: dict[int, tuple[float, ...]] = {}
    stages = len(tuple(service_s(1)))
    free = [0.0] * stages
    busy = [0.0] * stages
    latency = [math.nan] * n
    wait = [math.nan] * n
    sizes: list[int] = []
    queue: deque[int] = deque()
    rejected = timed_out = 0
    nxt = 0  # next arrival not yet admitted
    now = 0.0
    end = times[0] if n else 0.0
    limit = queue_limit if queue_limit is not None else math.inf

    def admit(until: float) -> None:
        nonlocal nxt, rejected
        while nxt < n and times[nxt] <= until:
            if len(queue) >= limit:
                rejected += 1
            else:
                queue.append(nxt)
            nxt += 1

    while True:
        now = max(now, free[0])
        admit(now)
        if timeout_s is not None:
            while queue and now - times[queue[0]] > timeout_s:
                queue.popleft()
                timed_out += 1
        if not queue:
            if nxt >= n:
                break
            now = times[nxt]
            continue
        k = batcher.decide(len(queue), now - times[queue[0]])
        if k == 0:
            deadline = batcher.deadline_s(times[queue[0]])
            if nxt < n and times[nxt] <= deadline:
                now = times[nxt]
                continue
            if deadline == math.inf:
                break  # never enough requests (static:B): the rest stays in flight
            now = deadline
            k = batcher.decide(len(queue), now - times[queue[0]]) or len(queue)
        k = min(k, len(queue))
        svc = cache.get(k) if deterministic else None
        if svc is None:
            svc = cache[k] = tuple(float(s) for s in service_s(k))
        t = now
        for j in range(stages):
            start = t if t > free[j] else free[j]
            t = start + svc[j]
            free[j] = t
            busy[j] += svc[j]
        sizes.append(k)
        for _ in range(k):
            r = queue.popleft()
            latency[r] = t - times[r]
            wait[r] = now - times[r]
        end = max(end, t)
    lat = np.asarray(latency)
    done = ~np.isnan(lat)
    completed = int(done.sum())
    in_flight = n - completed - rejected - timed_out
    span = end - (times[0] if n else 0.0)
    return ServeResult(n, completed, rejected, timed_out, in_flight, lat[done],
                       np.asarray(wait)[done], np.asarray(sizes, dtype=np.int64),
                       tuple(busy), span)
