"""``placewise serve`` as a library: the workload from the options, one simulated run, the
highest rate that meets a p99 objective, a latency-throughput sweep.

**Workload.** Open loop: Poisson at ``rate`` (``cv=None`` or 1) or gamma inter-arrivals
with coefficient of variation ``cv``; a trace (``serve.arrivals.load_trace``); or
``concurrency`` closed-loop clients with exponential think times. The run is ``requests``
requests or ``duration_s`` seconds of arrivals. Request classes are drawn by share from a
generator seeded with ``seed + 1`` (arrivals use ``seed``), so a run is reproducible.

**Capacity.** ``capacity_rps``: what the service can complete per second at the batcher's
largest batch, ``replicas * B / max_j w_j(B)`` (the busiest resource's occupancy per batch).

**Finding the highest rate** (``find_max_rate``, in the manner of MLPerf's Server scenario):
a bisection over Poisson rates between 0 and the capacity. At each rate, runs of ``n``
requests (at least ``min_requests``, so that p99 rests on enough samples) are simulated;
the rate *passes* when the 95 % interval of p99 lies at or below the objective, *fails*
when it lies above it, and is re-run with twice the requests while the interval straddles
it (up to ``max_requests``, where the point estimate decides): the early stopping rule.
The search ends when the bracket is narrower than ``tolerance`` of the rate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from placewise.errors import InputError
from placewise.serve.arrivals import gamma_arrivals, poisson_arrivals
from placewise.serve.policies import Batcher, max_batch
from placewise.serve.queue import Admission, RequestClass
from placewise.serve.report import summarize
from placewise.serve.sim import (
    ClosedLoop,
    IdleCost,
    ServeResult,
    ServiceFn,
    StageTimes,
    Workload,
    as_stages,
    quantile_ci,
    simulate,
)

__all__ = ["ServeSetup", "capacity_rps", "default_window", "find_max_rate", "run_interval",
           "run_once", "sweep", "workload"]

Progress = Callable[[str, float], None]


@dataclass(frozen=True)
class ServeSetup:
    """Everything but the service: the arrival process, classes, queue and batching."""

    batcher: Batcher
    classes: tuple[RequestClass, ...] = (RequestClass("default"),)
    admission: Admission = field(default_factory=Admission)
    rate: float | None = None
    cv: float | None = None
    concurrency: int | None = None
    think_s: float = 0.0
    trace: Workload | None = None
    requests: int | None = None
    duration_s: float | None = None
    seed: int = 0
    replicas: int = 1
    router: str = "round-robin"
    in_flight: int = 1
    pad_to: int | None = None
    slo_p99_s: float | None = None
    #: what an idle gap before a batch costs (a tuned plan's ``ServiceRecord``); None: the
    #: plan's own costs for every batch
    idle: IdleCost | None = None

    @property
    def priorities(self) -> tuple[int, ...]:
        return tuple(c.priority for c in self.classes)

    @property
    def shares(self) -> tuple[float, ...]:
        return tuple(c.share for c in self.classes)


def _classes_for(setup: ServeSetup, n: int) -> np.ndarray | None:
    if len(setup.classes) == 1:
        return None
    p = np.asarray(setup.shares, dtype=float)
    rng = np.random.default_rng(setup.seed + 1)
    return rng.choice(len(p), size=n, p=p / p.sum()).astype(np.int64)


def workload(setup: ServeSetup) -> Workload | ClosedLoop:
    """The arrivals ``setup`` describes (module docstring)."""
    if setup.trace is not None:
        w = setup.trace
        if setup.duration_s is not None:
            keep = np.asarray(w.times_s) <= setup.duration_s
            w = Workload(w.times_s[keep], None if w.classes is None else w.classes[keep],
                         None if w.shapes is None else w.shapes[keep])
        if setup.requests is not None:
            k = setup.requests
            w = Workload(w.times_s[:k], None if w.classes is None else w.classes[:k],
                         None if w.shapes is None else w.shapes[:k])
        return w
    if setup.concurrency is not None:
        return ClosedLoop(setup.concurrency, setup.think_s, setup.requests, setup.duration_s,
                          setup.shares, setup.seed)
    if setup.rate is None:
        raise InputError("give an arrival process: --rate, --concurrency or --trace",
                         place="--rate")
    n = setup.requests
    if n is None:
        if setup.duration_s is None or not setup.duration_s > 0:
            raise InputError("give the run length: --requests N or --duration S",
                             place="--requests")
        # enough draws to pass the duration with overwhelming probability, then cut
        mean = setup.rate * setup.duration_s
        n = max(1, int(mean + 10 * math.sqrt(mean) * max(1.0, setup.cv or 1.0) + 10))
    if setup.cv is None or setup.cv == 1.0:
        t = poisson_arrivals(setup.rate, n, seed=setup.seed)
    else:
        t = gamma_arrivals(setup.rate, setup.cv, n, seed=setup.seed)
    if setup.requests is None and setup.duration_s is not None:
        t = t[t <= setup.duration_s]
    return Workload(t, _classes_for(setup, len(t)))


def run_once(service: ServiceFn | Sequence[ServiceFn], setup: ServeSetup) -> tuple[ServeResult, dict[str, Any]]:
    """One simulated run and its figures (``serve.report.summarize``)."""
    r = simulate(workload(setup), service, setup.batcher, admission=setup.admission,
                 priorities=setup.priorities, replicas=setup.replicas, router=setup.router,
                 in_flight=setup.in_flight, pad_to=setup.pad_to, idle=setup.idle,
                 shared=isinstance(service, list | tuple))  # unlike replicas: one machine
    return r, summarize(r, setup.classes, slo_p99_s=setup.slo_p99_s)


def capacity_rps(service: ServiceFn | Sequence[ServiceFn], setup: ServeSetup) -> float:
    """Completions per second at the batcher's largest batch (module docstring; with
    ``setup.idle``, at the occupancies measured back to back); replicas that are not
    alike (a sequence of services): the sum of theirs."""
    if isinstance(service, list | tuple):
        return _shared_capacity(service, setup)
    assert callable(service)
    b = max_batch(setup.batcher) if setup.pad_to is None else max(setup.pad_to, 1)
    st = as_stages(service(b))
    busiest = max(st.occupancy_s, default=0.0)
    if setup.idle is not None:
        busiest *= setup.idle.occupancy_factor(0.0)
    if not busiest > 0:
        raise InputError("the plan's service takes no time: no capacity to load",
                         place="plan")
    return setup.replicas * max_batch(setup.batcher) / busiest


def _shared_capacity(services: Sequence[ServiceFn], setup: ServeSetup) -> float:
    """Replicas that are not alike: the sum of their capacities, unless they share a
    resource (a DLA replica whose fallback layers run on the GPU beside a GPU replica): then
    the rate at which, the stream split by capacity, the busiest shared resource is full."""
    caps = [capacity_rps(s, replace(setup, replicas=1)) for s in services]
    b = max_batch(setup.batcher) if setup.pad_to is None else max(setup.pad_to, 1)
    stages = [as_stages(s(b)) for s in services]
    names = [n for st in stages for n in st.resources]  # unnamed stages are never shared
    total = sum(caps)
    if len(set(names)) == len(names) or not total > 0:
        return total
    load: dict[str, float] = {}  # resource -> seconds per request, the stream split by capacity
    for c, st in zip(caps, stages, strict=True):
        for name, w in zip(st.resources, st.occupancy_s, strict=True):
            load[name] = load.get(name, 0.0) + (c / total) * w / max_batch(setup.batcher)
    busiest = max(load.values(), default=0.0)
    return min(total, 1.0 / busiest) if busiest > 0 else total


def default_window(service: ServiceFn | Sequence[ServiceFn], batcher: Batcher) -> int:
    """Batches in flight at once by default: as many as the pipeline holds at saturation,
    ``ceil(L / max_j w_j)`` at the batcher's largest batch (at least 1), so that the
    window (Little's law: throughput <= window / latency) does not cap the plan's
    throughput; replicas that are not alike: the largest of theirs."""
    if isinstance(service, list | tuple):
        return max(default_window(s, batcher) for s in service)
    assert callable(service)
    st = as_stages(service(max_batch(batcher)))
    busiest = max(st.occupancy_s, default=0.0)
    if not busiest > 0:
        return 1
    return max(1, math.ceil(st.latency_s / busiest - 1e-9))


def _p99_verdict(x: np.ndarray, slo: float) -> str:
    mid, lo, hi = quantile_ci(x, 0.99)
    if hi <= slo:
        return "pass"
    if lo > slo:
        return "fail"
    return "unsure" if math.isfinite(mid) else "fail"


def scaled(service: ServiceFn | Sequence[ServiceFn], factor: float
           ) -> ServiceFn | list[ServiceFn]:
    """``service`` with every batch's latency, offsets and occupancies times ``factor``
    (each replica's, for replicas that are not alike)."""
    if isinstance(service, list | tuple):
        return [scaled(s, factor) for s in service]  # type: ignore[misc]
    assert callable(service)

    def fn(*args: int) -> StageTimes:
        st = as_stages(service(*args))
        return StageTimes(st.latency_s * factor, tuple(x * factor for x in st.offsets_s),
                          tuple(x * factor for x in st.occupancy_s), st.resources)

    return fn


def run_interval(service: ServiceFn | Sequence[ServiceFn], setup: ServeSetup,
                 factors: Mapping[str, tuple[float, float]]
                 ) -> dict[str, dict[str, float | None]]:
    """The interval of p50 and p99 that the service model's own interval gives: for each
    quantile, the run simulated with every batch at ``low`` and at ``high`` times its service
    (``factors[q]``: the cost model's interval of the plan's latency, or how much a tuned
    plan's measurements moved when repeated), widened by each run's sampling interval
    (``quantile_ci``): ``{"p50": {"low_s", "high_s"}, "p99": ...}`` (None: unbounded, too few
    samples)."""
    runs: dict[float, ServeResult] = {}
    out = {}
    for name, q in (("p50", 0.5), ("p99", 0.99)):
        low, high = factors[name]
        for f in (low, high):
            if f not in runs:
                runs[f] = run_once(scaled(service, f), setup)[0]
        lo, hi = runs[low], runs[high]
        a = quantile_ci(lo.latency_s, q)[1] if len(lo.latency_s) else math.nan
        b = quantile_ci(hi.latency_s, q)[2] if len(hi.latency_s) else math.nan
        out[name] = {"low_s": float(a) if math.isfinite(a) else None,
                     "high_s": float(b) if math.isfinite(b) else None}
    return out


def find_max_rate(service: ServiceFn | Sequence[ServiceFn], setup: ServeSetup, slo_p99_s: float, *,
                  min_requests: int = 20_000, max_requests: int = 320_000,
                  tolerance: float = 0.01, progress: Progress | None = None
                  ) -> dict[str, Any]:
    """The highest Poisson rate whose p99 latency meets ``slo_p99_s`` (module docstring).
    Returns the rate, its run's figures, and every trial."""
    if not (math.isfinite(slo_p99_s) and slo_p99_s > 0):
        raise InputError(f"the p99 objective must be > 0, got {slo_p99_s}", place="--slo-p99")
    if setup.concurrency is not None or setup.trace is not None:
        raise InputError("--find-max-rate searches Poisson rates: drop --concurrency and "
                         "--trace", place="--find-max-rate")
    report = progress or (lambda _m, _f: None)
    cap = capacity_rps(service, setup)
    trials: list[dict[str, Any]] = []
    best: tuple[float, dict[str, Any]] | None = None

    def trial(rate: float) -> bool:
        nonlocal best
        n = max(min_requests, setup.requests or 0)
        while True:
            s = replace(setup, rate=rate, cv=None, requests=n, duration_s=None)
            r, fig = run_once(service, s)
            verdict = _p99_verdict(r.latency_s, slo_p99_s)
            if r.rejected or r.timed_out:
                verdict = "fail"  # a rate that loses requests does not meet the objective
            if verdict == "unsure" and n * 2 <= max_requests:
                n *= 2
                continue
            ok = verdict == "pass" or (verdict == "unsure" and fig["p99_s"] is not None
                                       and fig["p99_s"] <= slo_p99_s)
            trials.append({"rate_rps": rate, "requests": n, "p99_s": fig["p99_s"],
                           "p99_low_s": fig["quantiles"]["p99"]["low_s"],
                           "p99_high_s": fig["quantiles"]["p99"]["high_s"],
                           "verdict": verdict, "meets": ok})
            if ok and (best is None or rate > best[0]):
                best = (rate, fig)
            return ok

    lo, hi = 0.0, cap
    steps = 40  # at most: the bracket halves each time
    for i in range(steps + 1):
        report(f"rate {(lo + hi) / 2:.4g}/s", min(1.0, i / 10))
        mid = hi if i == 0 else (lo + hi) / 2
        if trial(mid):
            lo = mid
            if i == 0:
                break  # even the capacity meets it
        else:
            hi = mid
        if hi - lo <= tolerance * hi:
            break
    return {"slo_p99_s": slo_p99_s, "capacity_rps": cap,
            "max_rate_rps": best[0] if best else 0.0,
            "at_max": best[1] if best else None, "trials": trials,
            "rule": ("bisection over Poisson rates in (0, capacity]; per rate at least "
                     f"{min_requests} requests, doubled while the 95% interval of p99 "
                     f"straddles the objective (up to {max_requests}, then the point "
                     "estimate decides); a rate that rejects or times out fails")}


def sweep(service: ServiceFn | Sequence[ServiceFn], setup: ServeSetup, values: Sequence[str], *,
          progress: Progress | None = None) -> list[dict[str, Any]]:
    """A latency-throughput sweep: one run per value, a rate (``120``, or ``60%`` of the
    capacity) or, with ``concurrency`` set, a number of clients."""
    report = progress or (lambda _m, _f: None)
    rows: list[dict[str, Any]] = []
    cap = None
    for i, text in enumerate(values):
        report(f"point {i + 1} of {len(values)}: {text}", i / max(1, len(values)))
        t = text.strip()
        if setup.concurrency is not None:
            if not t.isdigit() or int(t) < 1:
                raise InputError(f"{t!r} is not a number of clients", place="--sweep")
            s = replace(setup, concurrency=int(t))
            label: dict[str, Any] = {"concurrency": int(t)}
        else:
            try:
                if t.endswith("%"):
                    cap = cap if cap is not None else capacity_rps(service, setup)
                    rate = float(t[:-1]) / 100.0 * cap
                else:
                    rate = float(t)
            except ValueError:
                raise InputError(f"{t!r} is not a rate (e.g. 120 or 60%)",
                                 place="--sweep") from None
            if not (math.isfinite(rate) and rate > 0):
                raise InputError(f"the rate must be > 0, got {t!r}", place="--sweep")
            s = replace(setup, rate=rate, trace=None)
            label = {"rate_rps": rate}
        _, fig = run_once(service, s)
        rows.append({**label, **{k: fig[k] for k in (
            "throughput_rps", "goodput_rps", "p50_s", "p95_s", "p99_s", "mean_wait_s",
            "mean_batch", "rejected", "timed_out", "n", "utilization")}})
    return rows
