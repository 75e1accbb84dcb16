"""The one measurement campaign over a started ``Executor``: the recipe calibration and
validation both run.

``run_campaign(executor, inputs, settings)`` runs these phases, in this order, each under
its own telemetry phase name:

1. **warm-up** (``WARMUP``): ``settings.warmup`` requests, cycling over the warm-up inputs
   (default: ``inputs``). A fresh executor's first requests are slow (caches, allocators,
   onnxruntime's first runs); nothing of this phase is used.
2. **isolated requests** (``ISOLATED``): one request per element of ``inputs``, one at a
   time (``in_flight=1``): what a single client sees. Their outputs are returned.
3. **a pipelined stream** (``STREAM``, with ``settings.stream``): ``K`` requests kept in
   flight (``settings.in_flight``, default ``default_in_flight``), cycling over ``inputs``,
   for ``settings.stream_requests`` requests or, without a count, about
   ``settings.stream_s`` seconds (``stream_length``). Where the client is a process of
   its own (no worker in it: ``inline_host=False``), workers sleep
   rather than poll when idle (``set_spin(0, 0)``): queued work keeps them busy, and
   polling would only take the cores the client needs to keep the pipeline fed. Where the
   client runs the host's worker itself, the workers keep their polling rule
   (``schedule.simulate.may_poll``: only on cores no other thread uses), as a deployed
   pipeline's stages do. The figures are the stream's
   **period per request** (``stream_period``) and the client process's CPU time per
   request.
4. **solo replay** (``CAPTURE``, with ``settings.solo_repeats > 0``): one request is run
   with its steps captured, then each device alone replays them (``Executor.solo``,
   medians over the repeats) with every other worker idle: the uncontended cost of exactly
   what the executor runs.

**The stream period.** Completions are the requests' ``outputs_ns`` (the host worker has
written the outputs) in time order, ``t[0] <= ... <= t[n-1]``. The first ``fill =
max(K, n // 10)`` completions are the pipeline filling (and the client getting into its
rhythm) and are skipped; the period is the mean time between the remaining completions,
``(t[n-1] - t[fill]) / (n - 1 - fill)`` seconds per request. A campaign's stream always
has at least ``max(K + 2, 3)`` requests, so the period is defined (``None`` only when the
steady completions do not advance the clock).

The library never prints; ``progress(phase, message)`` is called before each phase runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from placewise.errors import InputError
from placewise.runtime.telemetry import RequestRecord, SoloRecord, Telemetry

if TYPE_CHECKING:
    from placewise.runtime.executor import Executor

__all__ = [
    "CAPTURE",
    "ISOLATED",
    "STREAM",
    "WARMUP",
    "CampaignResult",
    "CampaignSettings",
    "StreamFigures",
    "default_in_flight",
    "run_campaign",
    "run_isolated",
    "run_stream",
    "solo_replay",
    "stream_fill",
    "stream_length",
    "stream_period",
    "warm_up",
]

#: telemetry phase names of the campaign's phases
WARMUP = "warmup"
ISOLATED = "isolated"
STREAM = "stream"
CAPTURE = "capture"

#: most requests a duration-bound stream runs
MAX_STREAM_REQUESTS = 5000

Progress = Callable[[str, str], None]
Inputs = Sequence[Sequence[Any]]


@dataclass(frozen=True, slots=True)
class CampaignSettings:
    """How a campaign runs (module docstring). ``in_flight``: requests in flight in the
    stream (``None``: ``default_in_flight`` of the program's devices);
    ``stream_requests``: the stream's length (``None``: about ``stream_s`` seconds,
    ``stream_length``); ``solo_repeats``: repeats of the solo replay (0: none)."""

    warmup: int = 10
    in_flight: int | None = None
    stream: bool = True
    stream_requests: int | None = None
    stream_s: float = 1.0
    solo_repeats: int = 0

    def check(self) -> None:
        """``InputError`` for settings no campaign can run."""
        if self.warmup < 0 or self.solo_repeats < 0:
            raise InputError(f"warmup and solo repeats must be >= 0, got {self.warmup} and "
                             f"{self.solo_repeats}", place="campaign settings")
        if self.in_flight is not None and self.in_flight < 1:
            raise InputError(f"in_flight must be >= 1, got {self.in_flight}",
                             place="campaign settings")
        if self.stream_requests is not None and self.stream_requests < 1:
            raise InputError(f"stream requests must be >= 1, got {self.stream_requests}",
                             place="campaign settings")
        if self.stream_requests is None and not self.stream_s >= 0:
            raise InputError(f"stream seconds must be >= 0, got {self.stream_s}",
                             place="campaign settings")


@dataclass(frozen=True, slots=True)
class StreamFigures:
    """What a pipelined stream measured: its ``requests``, the ``in_flight`` it kept, the
    completions skipped as the pipeline filled (``fill``), the period per request
    (seconds; see the module docstring) and the client process's CPU seconds per
    request."""

    requests: int
    in_flight: int
    fill: int
    period_s: float | None
    client_cpu_s: float


@dataclass(frozen=True)
class CampaignResult:
    """A campaign's isolated outputs (request order, graph-output order), the executor's
    telemetry after the last phase, the stream's figures (``None`` without a stream) and
    the solo replay's records (empty without one)."""

    outputs: list[list[np.ndarray[Any, Any]]]
    telemetry: Telemetry
    in_flight: int
    stream: StreamFigures | None
    solo: tuple[SoloRecord, ...]


def default_in_flight(n_devices: int) -> int:
    """Requests kept in flight in a stream over ``n_devices`` workers: two per device and
    two more, at least 8, so that the client's own scheduling delays do not starve the
    workers.

    >>> default_in_flight(1), default_in_flight(3), default_in_flight(4)
    (8, 8, 10)
    """
    return max(8, 2 * n_devices + 2)


def stream_fill(n: int, in_flight: int) -> int:
    """Completions of an ``n``-request stream skipped as the pipeline fills:
    ``max(in_flight, n // 10)``.

    >>> stream_fill(24, 8), stream_fill(300, 8)
    (8, 30)
    """
    return max(in_flight, n // 10)


def stream_period(requests: Sequence[RequestRecord], in_flight: int) -> float | None:
    """Seconds per request of a pipelined stream of ``requests`` kept ``in_flight`` deep:
    the mean time between completions after the first ``stream_fill`` (see the module
    docstring); ``None`` when fewer than two completions are left or they do not advance.

    >>> rs = [RequestRecord(i, "stream", 0, 100 + 10 * i, 0) for i in range(10)]
    >>> stream_period(rs, in_flight=2) * 1e9
    10.0
    >>> stream_period(rs[:3], in_flight=2) is None
    True
    """
    t = sorted(r.outputs_ns for r in requests)
    fill = stream_fill(len(t), in_flight)
    if len(t) < fill + 2 or t[-1] <= t[fill]:
        return None
    return (t[-1] - t[fill]) / (len(t) - 1 - fill) / 1e9


def stream_length(settings: CampaignSettings, in_flight: int, *, isolated_p50_s: float,
                  n_devices: int, min_requests: int = 1) -> int:
    """Requests in the stream: ``settings.stream_requests`` when given, else about
    ``settings.stream_s`` seconds of requests (pipelining can at best overlap the devices:
    ``min(in_flight, n_devices + 1)`` requests per isolated latency), at least
    ``min_requests`` and ``2 x in_flight``, at most ``MAX_STREAM_REQUESTS``; never fewer
    than ``max(in_flight + 2, 3)``, so that the period is defined.

    >>> s = CampaignSettings(stream_s=0.1)
    >>> stream_length(s, 8, isolated_p50_s=1e-3, n_devices=2, min_requests=5)
    300
    >>> stream_length(CampaignSettings(stream_requests=4), 8, isolated_p50_s=1e-3,
    ...               n_devices=2)
    10
    """
    if settings.stream_requests is not None:
        n = settings.stream_requests
    else:
        speedup = min(in_flight, n_devices + 1)
        n = int(min(MAX_STREAM_REQUESTS,
                    max(min_requests, 2 * in_flight,
                        settings.stream_s / max(isolated_p50_s, 1e-6) * speedup)))
    return max(n, in_flight + 2, 3)


def _cycle(inputs: Inputs, n: int) -> list[Sequence[Any]]:
    return [inputs[i % len(inputs)] for i in range(n)]


def warm_up(ex: Executor, inputs: Inputs, n: int) -> None:
    """``n`` warm-up requests, one at a time, cycling over ``inputs`` (phase ``WARMUP``)."""
    if n > 0:
        ex.run(_cycle(inputs, n), phase=WARMUP)


def run_isolated(ex: Executor, inputs: Inputs) -> list[list[np.ndarray[Any, Any]]]:
    """One request per element of ``inputs``, one at a time (phase ``ISOLATED``); their
    outputs."""
    return ex.run(inputs, phase=ISOLATED)


def run_stream(ex: Executor, inputs: Inputs, n: int, in_flight: int) -> StreamFigures:
    """``n`` requests cycling over ``inputs`` with ``in_flight`` kept in the pipeline (at
    most the executor's slots; phase ``STREAM``), workers sleeping when idle; its figures
    (module docstring)."""
    k = max(1, min(int(in_flight), ex.slots))
    if not ex.in_process:  # the client is a process of its own: leave it the cores
        ex.set_spin(0.0, 0.0)
    ex.run(_cycle(inputs, n), phase=STREAM, in_flight=k)
    client = ex.last_run_cpu_s / n
    period = stream_period(ex.telemetry().requests_of(STREAM), k)
    return StreamFigures(n, k, stream_fill(n, k), period, client)


def solo_replay(ex: Executor, request: Sequence[Any], repeats: int) -> list[SoloRecord]:
    """``request`` run once with its steps captured (phase ``CAPTURE``), then each device
    alone replays them, medians over ``repeats``."""
    ex.run([request], phase=CAPTURE, capture=True)
    return ex.solo(repeats)


def run_campaign(ex: Executor, inputs: Inputs, settings: CampaignSettings, *,
                 warmup_inputs: Inputs | None = None,
                 progress: Progress | None = None) -> CampaignResult:
    """The campaign of the module docstring on the started executor ``ex``: ``inputs``
    are the isolated requests (at least one; the stream cycles over them);
    ``warmup_inputs`` those the warm-up cycles over (default: ``inputs``)."""
    settings.check()
    if not inputs:
        raise InputError("a campaign needs at least one request", place="inputs")
    say: Progress = progress or (lambda _p, _m: None)
    n_dev = len(ex.program.devices)
    k = settings.in_flight if settings.in_flight is not None else default_in_flight(n_dev)
    k = max(1, min(k, ex.slots))
    if settings.warmup > 0:
        say(WARMUP, f"warming up ({settings.warmup} requests)")
        warm_up(ex, warmup_inputs or inputs, settings.warmup)
    say(ISOLATED, f"running {len(inputs)} isolated requests")
    outputs = run_isolated(ex, inputs)
    stream = None
    if settings.stream:
        iso = ex.telemetry().requests_of(ISOLATED)[-len(inputs):]
        p50 = float(np.median([r.latency_ns for r in iso])) / 1e9
        n = stream_length(settings, k, isolated_p50_s=p50, n_devices=n_dev,
                          min_requests=len(inputs))
        say(STREAM, f"running a stream of {n} requests, {k} in flight")
        stream = run_stream(ex, inputs, n, k)
    solo: list[SoloRecord] = []
    if settings.solo_repeats > 0:
        say(CAPTURE, "replaying each device alone")
        solo = solo_replay(ex, inputs[0], settings.solo_repeats)
    return CampaignResult(outputs, ex.telemetry(), k, stream, tuple(solo))
