"""The figures of a service run, simulated or measured, as one JSON-ready dict.

``summarize(result, classes)``: conservation; latency percentiles p50/p90/p95/p99/p99.9
overall and per class, each with its sample count and a non-parametric 95 % interval
(``sim.quantile_ci``); p99 is flagged when fewer than 299 samples back it (below 299 not even
the largest sample bounds p99 from above with 95 % confidence: ``0.99**299 < 0.05``); the
queue-wait distribution; the batch-size histogram; per-resource utilisation (busy time over
the run's span); goodput, the requests completed within their class's p99 objective (or the
run's ``slo_p99_s``) per second; and fairness across classes, Jain's index
``(sum x)^2 / (k sum x^2)`` over each class's fraction of arrived requests completed within
its objective (1: every class served alike; ``1/k``: one class served, the rest starved).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from placewise.serve.queue import RequestClass
from placewise.serve.sim import ServeResult, quantile_ci

__all__ = ["IDLE_AFTER_S", "P99_MIN_SAMPLES", "QUANTILES", "TERMS", "inside", "jain", "summarize",
           "terms"]

QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99), ("p99.9", 0.999))
P99_MIN_SAMPLES = 299


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _quantiles(x: np.ndarray) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, q in QUANTILES:
        mid, lo, hi = quantile_ci(x, q)
        out[name] = {"value_s": _num(mid), "low_s": _num(lo), "high_s": _num(hi),
                     "n": len(x)}
    return out


def jain(values: Sequence[float]) -> float | None:
    """Jain's fairness index of ``values`` (None without any).

    >>> jain([1.0, 1.0]), jain([1.0, 0.0])
    (1.0, 0.5)
    """
    v = [float(x) for x in values]
    if not v or not any(v):
        return None
    return sum(v) ** 2 / (len(v) * sum(x * x for x in v))


def summarize(r: ServeResult, classes: Sequence[RequestClass] = (RequestClass("default"),),
              *, slo_p99_s: float | None = None) -> dict[str, Any]:
    """The run's figures (module docstring); keys named as ``placewise serve --json``."""
    lat, wt = r.latency_s, r.wait_s
    n = len(lat)
    span = r.span_s
    q = _quantiles(lat)
    done_cls = r.classes if len(r.classes) == n else np.zeros(n, dtype=np.int64)
    per_class: dict[str, Any] = {}
    within_all = 0
    fractions = []
    for c, cl in enumerate(classes):
        mask = done_cls == c
        x = lat[mask]
        slo = cl.slo_p99_s if cl.slo_p99_s is not None else slo_p99_s
        within = int((x <= slo).sum()) if slo is not None else len(x)
        within_all += within
        arrived = r.arrived_by_class[c] if c < len(r.arrived_by_class) else (
            r.arrived if len(classes) == 1 else 0)
        fractions.append(within / arrived if arrived else 0.0)
        cq = _quantiles(x)
        per_class[cl.name] = {
            "share": cl.share, "priority": cl.priority, "slo_p99_s": slo,
            "arrived": int(arrived), "completed": len(x),
            "rejected": int(r.rejected_by_class[c]) if c < len(r.rejected_by_class) else 0,
            "timed_out": int(r.timed_out_by_class[c]) if c < len(r.timed_out_by_class) else 0,
            "n": len(x), "p50_s": cq["p50"]["value_s"], "p95_s": cq["p95"]["value_s"],
            "p99_s": cq["p99"]["value_s"], "quantiles": cq,
            "p99_reliable": len(x) >= P99_MIN_SAMPLES,
            "mean_wait_s": _num(float(wt[mask].mean())) if len(x) else None,
            "goodput_rps": within / span if span > 0 else 0.0,
            "slo_met": (None if slo is None or not len(x)
                        else bool(cq["p99"]["value_s"] is not None
                                  and cq["p99"]["value_s"] <= slo)),
        }
    sizes, counts = np.unique(r.batch_sizes, return_counts=True)
    wait_edges = [0.0, *np.quantile(wt, [0.5, 0.9, 0.99, 1.0]).tolist()] if n else []
    notes = []
    if n < P99_MIN_SAMPLES:
        notes.append(f"p99 from {n} samples: fewer than {P99_MIN_SAMPLES}, so not even the "
                     f"largest bounds it with 95 % confidence; run more requests")
    if len(classes) > 1:
        few = [f"class {k} ({c['n']})" for k, c in per_class.items()
               if c["n"] < P99_MIN_SAMPLES]
        if few:
            notes.append(f"p99 per class from fewer than {P99_MIN_SAMPLES} samples: "
                         f"{', '.join(few)}")
    return {
        "arrived": r.arrived, "completed": r.completed, "rejected": r.rejected,
        "timed_out": r.timed_out, "in_flight": r.in_flight, "conserved": r.conserved(),
        "preempted": r.preempted, "delayed": r.delayed, "padded": r.padded, "n": n,
        "p50_s": q["p50"]["value_s"], "p90_s": q["p90"]["value_s"],
        "p95_s": q["p95"]["value_s"], "p99_s": q["p99"]["value_s"],
        "p999_s": q["p99.9"]["value_s"], "quantiles": q,
        "p99_reliable": n >= P99_MIN_SAMPLES,
        "mean_latency_s": _num(float(lat.mean())) if n else None,
        "mean_wait_s": _num(float(wt.mean())) if n else None,
        "wait": {"quantiles": _quantiles(wt),
                 "histogram": _histogram(wt, wait_edges)},
        "throughput_rps": r.throughput_rps,
        "goodput_rps": within_all / span if span > 0 else 0.0,
        "slo_p99_s": slo_p99_s, "span_s": span,
        "utilization": dict(zip(r.resources, r.utilization(), strict=False)),
        "batch_sizes": {str(int(s)): int(c) for s, c in zip(sizes, counts, strict=True)},
        "mean_batch": float(r.batch_sizes.mean()) if len(r.batch_sizes) else None,
        "per_class": per_class,
        "fairness": {"jain": jain(fractions), "over": "fraction of each class's arrivals "
                     "completed within its p99 objective"},
        "notes": notes,
    }


def _histogram(x: np.ndarray, edges: list[float]) -> list[dict[str, Any]]:
    """Counts of ``x`` between the sorted, de-duplicated ``edges``."""
    e = sorted(set(edges))
    if len(e) < 2:
        return [{"low_s": e[0] if e else 0.0, "high_s": e[0] if e else 0.0,
                 "count": len(x)}] if len(x) else []
    counts, _ = np.histogram(x, bins=e)
    return [{"low_s": float(lo), "high_s": float(hi), "count": int(c)}
            for lo, hi, c in zip(e[:-1], e[1:], counts, strict=True)]


#: the per-request terms of a service run, simulated and measured alike: the generator's
#: lateness (measured only), the queue wait (dispatch - arrival, lateness included), the
#: executor's idle time before the request's batch, the service (latency - wait), and the
#: service split into its partition runs (``compute``) and the rest (``handoff``: request
#: hand-offs, transfers, dispatch and wake-ups); the split is measured from the executor's
#: telemetry and predicted by the plan's critical path
TERMS = ("late", "wait", "idle", "service", "compute", "handoff")
#: an idle gap longer than this makes a request "after idle" in ``terms``
IDLE_AFTER_S = 1e-3


def _stats(x: np.ndarray) -> dict[str, float | None]:
    x = x[np.isfinite(x)]
    if not len(x):
        return {"p50_s": None, "p99_s": None, "mean_s": None, "n": 0}
    return {"p50_s": float(np.quantile(x, 0.5)), "p99_s": float(np.quantile(x, 0.99)),
            "mean_s": float(x.mean()), "n": len(x)}


def _terms_of(r: ServeResult, late: np.ndarray | None, compute: np.ndarray | float | None
              ) -> dict[str, np.ndarray]:
    svc = r.latency_s - r.wait_s
    n = len(svc)
    idle = r.idle_s if len(r.idle_s) == n else np.full(n, math.nan)
    comp = (np.full(n, math.nan) if compute is None
            else np.broadcast_to(np.asarray(compute, dtype=float), (n,)) if np.ndim(compute) == 0
            else np.asarray(compute, dtype=float))
    if len(comp) != n:
        comp = np.full(n, math.nan)
    return {"late": late if late is not None else np.zeros(0), "wait": r.wait_s,
            "idle": idle, "service": svc, "compute": comp, "handoff": svc - comp}


def terms(simulated: ServeResult, measured: ServeResult, late_s: np.ndarray | None = None,
          *, compute_s: np.ndarray | None = None,
          predicted_compute_s: float | None = None) -> dict[str, Any]:
    """Where a measured run's time went against the simulation of the same arrivals, per
    request, in terms named alike (``TERMS``): each term's p50, p99 and mean on both sides
    (``compute_s``: the measured partition runs per completed request;
    ``predicted_compute_s``: the plan's, per request); the service of requests after an
    idle gap (longer than ``IDLE_AFTER_S``) and of the rest; and the miss of the mean
    latency split exactly into its wait and service parts (``mean latency = mean wait +
    mean service`` on both sides)."""
    sim = _terms_of(simulated, None, predicted_compute_s)
    real = _terms_of(measured, late_s, compute_s)
    out: dict[str, Any] = {"terms": {k: {"simulated": _stats(sim[k]),
                                         "measured": _stats(real[k])} for k in TERMS}}
    split: dict[str, Any] = {}
    for side, t in (("simulated", sim), ("measured", real)):
        after = np.nan_to_num(t["idle"], nan=0.0) > IDLE_AFTER_S
        split[side] = {"after_idle": _stats(t["service"][after]),
                       "warm": _stats(t["service"][~after])}
    out["service_by_idle"] = split
    def mean(x: np.ndarray) -> float:
        x = x[np.isfinite(x)]
        return float(x.mean()) if len(x) else math.nan

    out["mean_miss"] = {
        k: _num(mean(a) - mean(b)) for k, a, b in (
            ("latency_s", measured.latency_s, simulated.latency_s),
            ("wait_s", real["wait"], sim["wait"]), ("service_s", real["service"], sim["service"]))}
    return out


def inside(measured: dict[str, Any], interval: dict[str, dict[str, float | None]]
           ) -> dict[str, Any]:
    """Whether the measured p50 and p99 fall inside the predicted interval
    (``serve.run.run_interval``; an end that is None is open)."""
    out: dict[str, Any] = {}
    for name in ("p50", "p99"):
        m = measured.get(f"{name}_s")
        lo, hi = interval[name]["low_s"], interval[name]["high_s"]
        ok = m is not None and (lo is None or lo <= m) and (hi is None or m <= hi)
        out[name] = {"measured_s": m, "low_s": lo, "high_s": hi, "inside": bool(ok)}
    return out
