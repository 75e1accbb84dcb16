"""``placewise tune``: the runtime settings a deployed service of the plan would use, chosen
on this machine from measurement, and what an idle gap before a request costs; both recorded
in the plan (``Plan.service``, a ``plan_records.ServiceRecord``) for ``serve``, ``serve
--real`` and ``export`` to use.

Everything is measured with the one run recipe (``serve.real.serve_real``: the plan's
executor driven open loop), one request at a time (``--batching none``) at the plan's batch:

1. **Settings.** Each of ``SETTINGS`` (onnxruntime's intra-op pool spinning after a run, on
   or off; the client's idle wait sleeping until ``CLIENT_SPIN_S`` before a request is due,
   or spinning the last ``LONG_SPIN_S``) serves one seeded Poisson stream of ``4 * probe``
   requests at ``PROBE_LOAD`` of the plan's predicted capacity, in ``PROBE_ROUNDS``
   interleaved rounds (A B C D A B C D: a drift of the machine touches every setting
   alike). The setting with the lowest latency p90 over its pooled requests is chosen (ties:
   the lower p50): the tail is what a service is sized by.
2. **Idle cost.** With the chosen setting, a ladder of rungs: ``per_gap`` requests spaced so
   that each follows about ``g`` of idle time, for every ``g`` in ``GAPS_S``, then a burst of
   ``per_gap`` requests arriving at once (each dispatched as the previous completes: the
   warm, back-to-back service). Each rung is one point: the median idle time its requests
   actually followed (measured, ``serve.real.Call.idle_s``) and their service p50 and p90
   (submit to outputs). The ladder runs ``repeats`` times; the points are the medians over
   the repeats. ``spread``: the larger of the warm service p50's spread between them and
   the chosen setting's latency p50's between the probe rounds; ``tail_spread``: that
   latency p90's between the rounds (spread: (max - min) / median).
3. **Capacity.** A burst of requests arriving at once, enough for about ``CAPACITY_S`` at
   the predicted capacity (a shorter run is dominated by its first requests' start-up), with
   the plan's window in flight (``plan_window``): completions per second, back to back.

The load generator's own lateness over the ladder runs is kept (``late_p50_s``/``late_p99_s``)
to show what it adds. The library never prints: ``progress(message, fraction)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from placewise.errors import InputError
from placewise.plan_records import IdlePoint, RuntimeTrial, ServiceRecord
from placewise.runtime.executor import CLIENT_SPIN_S
from placewise.serve.arrivals import poisson_arrivals
from placewise.serve.policies import parse_batching
from placewise.serve.real import Call, RealServe, serve_real
from placewise.serve.sim import Workload

if TYPE_CHECKING:
    from placewise.hardware.spec import Machine
    from placewise.plan import Plan
    from placewise.runtime.opexec import ModelSource

__all__ = ["CAPACITY_S", "GAPS_S", "LONG_SPIN_S", "PROBE_LOAD", "SETTINGS", "plan_window",
           "tune_service"]

#: idle gaps the ladder aims at (seconds); the points record the gaps actually measured
GAPS_S = (2e-4, 1e-3, 3e-3, 1e-2, 3e-2)
#: the settings are compared on a Poisson stream at this share of the predicted capacity,
#: in this many interleaved rounds
PROBE_LOAD = 0.3
PROBE_ROUNDS = 3
#: the capacity run lasts about this long (at the predicted capacity), within these counts
CAPACITY_S = 1.0
CAPACITY_MAX = 20_000
#: the client's long spin: it stays awake through gaps up to this long
LONG_SPIN_S = 2e-2
#: (session_spinning, client_spin_s) tried
SETTINGS = ((True, CLIENT_SPIN_S), (False, CLIENT_SPIN_S), (True, LONG_SPIN_S),
            (False, LONG_SPIN_S))

Progress = Callable[[str, float], None]


def _ladder(gaps_s: Sequence[float], per_gap: int, service_s: float, burst: int
            ) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Arrival times of the rungs (``per_gap`` requests spaced ``service_s + g``), then a
    burst of ``burst`` arriving together after the last rung has drained; and each
    segment's request index range."""
    times: list[float] = []
    segments: list[tuple[int, int]] = []
    t = 0.0
    for g in gaps_s:
        start = len(times)
        for _ in range(per_gap):
            times.append(t)
            t += service_s + g
        segments.append((start, len(times)))
    if burst:
        t += 4 * service_s + max(gaps_s, default=0.0)
        segments.append((len(times), len(times) + burst))
        times.extend([t] * burst)
    return np.asarray(times), segments


def _by_request(calls: Sequence[Call]) -> dict[int, Call]:
    return {i: c for c in calls for i in c.ids}


def _point(calls: Sequence[Call]) -> IdlePoint | None:
    """One rung's point: the median idle gap its requests followed, their service p50/p90."""
    done = [c for c in calls if math.isfinite(c.idle_s)]
    if not done:
        return None
    svc = np.array([c.service_s for c in done])
    return IdlePoint(gap_s=float(np.median([c.idle_s for c in done])),
                     service_p50_s=float(np.median(svc)),
                     service_p90_s=float(np.quantile(svc, 0.9)), n=len(done))


def tune_service(plan: Plan, *, machine: Machine | None = None,
                 source: ModelSource | str | None = None,
                 shapes: Mapping[str, Sequence[int]] | None = None, per_gap: int = 60,
                 probe: int = 60, repeats: int = 2, rounds: int = PROBE_ROUNDS,
                 capacity_s: float = CAPACITY_S, seed: int = 0,
                 progress: Progress | None = None,
                 executor_options: Mapping[str, Any] | None = None) -> ServiceRecord:
    """Measure ``plan`` as a service on this machine (module docstring) and return its
    ``ServiceRecord``. ``rounds``: of the settings' probe; ``capacity_s``: the capacity
    run's length at the predicted capacity. ``machine``, ``source``, ``shapes``,
    ``executor_options``: as for ``serve_real`` (the settings tried override theirs).
    ``InputError`` for bad arguments or a plan that cannot run here."""
    for name, v in (("--requests", per_gap), ("probe", probe), ("--repeats", repeats),
                    ("rounds", rounds)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InputError(f"must be a positive integer, got {v!r}", place=name)
    report: Progress = progress or (lambda _m, _f: None)
    none = parse_batching("none")
    predicted = float(plan.predicted_latency_s)
    steps = rounds * len(SETTINGS) + repeats + 1
    done = 0

    def run(times: np.ndarray, spinning: bool, spin_s: float, in_flight: int = 1
            ) -> RealServe:
        nonlocal done
        got = serve_real(plan, Workload(times), none, in_flight=in_flight, machine=machine,
                         source=source, shapes=shapes, seed=seed, limit_s=600.0,
                         executor_options={**(executor_options or {}),
                                           "session_spinning": spinning,
                                           "client_spin_s": spin_s})
        done += 1
        return got

    # 1. the settings, compared on a Poisson stream (interleaved rounds, pooled)
    window = plan_window(plan)
    period = float(plan.throughput.period_s)
    pred_cap = 1.0 / period if period > 0 else 1.0 / predicted
    stream = poisson_arrivals(PROBE_LOAD * pred_cap, 4 * probe, seed=seed)
    pooled: dict[tuple[bool, float], list[np.ndarray]] = {k: [] for k in SETTINGS}
    for k in range(rounds):
        for spinning, spin_s in SETTINGS:
            report(f"trying pool spinning {'on' if spinning else 'off'}, client spin "
                   f"{spin_s * 1e3:g} ms (round {k + 1} of {rounds})", done / steps)
            got = run(stream, spinning, spin_s, window)
            pooled[(spinning, spin_s)].append(got.result.latency_s)
    trials = []
    for (spinning, spin_s), runs in pooled.items():
        lat = np.concatenate(runs)
        trials.append(RuntimeTrial(session_spinning=spinning, client_spin_s=spin_s,
                                   latency_p50_s=float(np.median(lat)),
                                   latency_p90_s=float(np.quantile(lat, 0.9))))
    best = min(trials, key=lambda t: (t.latency_p90_s, t.latency_p50_s))
    # 2. the idle cost with the chosen setting: the ladder, repeated
    warm = float(np.median(np.concatenate(pooled[(best.session_spinning,
                                                  best.client_spin_s)])))
    rungs: list[list[IdlePoint]] = []
    lates: list[np.ndarray] = []
    for k in range(repeats):
        report(f"measuring the idle cost (ladder {k + 1} of {repeats})", done / steps)
        times, segments = _ladder(GAPS_S, per_gap, 1.5 * warm, per_gap)
        got = run(times, best.session_spinning, best.client_spin_s)
        lates.append(got.late[np.isfinite(got.late)])
        of = _by_request(got.calls)
        pts = []
        for a, b in segments:
            seg = list({id(c): c for i in range(a, b) if (c := of.get(i)) is not None
                        }.values())
            p = _point(seg[1:] if (a, b) == segments[-1] else seg)  # a burst's first waited
            if p is not None:
                pts.append(p)
        rungs.append(pts)
    points = _merge(rungs)
    warm_p50 = [min(r, key=lambda p: p.gap_s).service_p50_s for r in rungs if r]
    chosen = pooled[(best.session_spinning, best.client_spin_s)]
    spread = max(_spread(warm_p50), _spread([float(np.median(x)) for x in chosen]))
    tail_spread = _spread([float(np.quantile(x, 0.9)) for x in chosen if len(x)])
    # 3. the capacity, back to back with the plan's window, for about CAPACITY_S
    n = int(min(CAPACITY_MAX, max(4 * per_gap, capacity_s * pred_cap)))
    report(f"measuring the capacity ({n} requests, {window} in flight)", done / steps)
    capacity = run(np.zeros(n), best.session_spinning, best.client_spin_s,
                   window).result.throughput_rps
    report("done", 1.0)
    late = np.concatenate(lates) if lates else np.zeros(0)
    return ServiceRecord(
        session_spinning=best.session_spinning, client_spin_s=best.client_spin_s,
        predicted_latency_s=predicted, predicted_capacity_rps=pred_cap,
        capacity_rps=capacity, window=window, points=points, trials=tuple(trials),
        late_p50_s=float(np.median(late)) if len(late) else 0.0,
        late_p99_s=float(np.quantile(late, 0.99)) if len(late) else 0.0,
        spread=spread, tail_spread=tail_spread, requests=per_gap)


def _spread(values: Sequence[float]) -> float:
    """(max - min) / median of repeated measurements (0 for fewer than two).

    >>> _spread([1.0, 1.5, 0.5])
    1.0
    """
    if len(values) < 2:
        return 0.0
    return float((max(values) - min(values)) / np.median(values))


def plan_window(plan: Plan) -> int:
    """Executor requests in flight that keep the plan's pipeline full: ``ceil(latency /
    period)`` (``serve.run.default_window`` at the plan's own batch), at least 1."""
    period = float(plan.throughput.period_s)
    if not period > 0:
        return 1
    return max(1, math.ceil(float(plan.predicted_latency_s) / period - 1e-9))


def _merge(rungs: Sequence[Sequence[IdlePoint]]) -> tuple[IdlePoint, ...]:
    """The ladders' points, rung by rung, as medians over the repeats; sorted by gap."""
    width = min((len(r) for r in rungs), default=0)
    out = []
    for j in range(width):
        ps = [r[j] for r in rungs]
        out.append(IdlePoint(gap_s=float(np.median([p.gap_s for p in ps])),
                             service_p50_s=float(np.median([p.service_p50_s for p in ps])),
                             service_p90_s=float(np.median([p.service_p90_s for p in ps])),
                             n=sum(p.n for p in ps)))
    return tuple(sorted(out, key=lambda p: p.gap_s))
