"""The closed loop's figures: the trace cut into windows, the mix distance that triggers a
replan, a window's gain of the adaptive arm over the static one, the prediction error by
term before and after recalibration, and the loop's headline summary (``adapt.loop``).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from placewise.adapt.trace import ShapeTrace, shape_key
from placewise.errors import InputError

__all__ = ["ARMS", "mix_distance", "prediction_rows", "split_windows", "summarize",
           "total_error", "window_gain"]

#: the loop's two arms: the never-adapting incumbent and the adapting plan set
ARMS = ("static", "adaptive")


# ---- the trace in windows ----------------------------------------------------------------------
def split_windows(trace: ShapeTrace, n: int) -> list[ShapeTrace]:
    """``trace`` cut into ``n`` windows of (nearly) equal request counts, each rebased to
    start at 0.

    >>> from placewise.adapt.trace import drifting_trace
    >>> ws = split_windows(drifting_trace(requests=10, seed=0), 3)
    >>> [len(w) for w in ws], ws[1].arrivals_s[0]
    ([4, 3, 3], 0.0)
    """
    if len(trace) < n:
        raise InputError(f"the trace holds {len(trace)} requests, fewer than the {n} windows "
                         f"asked for", file=trace.file, place="--windows")
    edges = [-(-i * len(trace) // n) for i in range(n + 1)]
    return [trace.slice(a, b) for a, b in itertools.pairwise(edges)]


def mix_distance(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> float:
    """Total-variation distance between two mixes (``[{"shape", "weight"}]``): half the summed absolute
    difference of the shares, 0 (same) to 1 (disjoint).

    >>> mix_distance([{"shape": {"batch": 1}, "weight": 1.0}],
    ...              [{"shape": {"batch": 1}, "weight": 0.25}, {"shape": {"batch": 16}, "weight": 0.75}])
    0.75
    """
    wa = {shape_key(m["shape"]): float(m["weight"]) for m in a}
    wb = {shape_key(m["shape"]): float(m["weight"]) for m in b}
    return 0.5 * sum(abs(wa.get(k, 0.0) - wb.get(k, 0.0)) for k in set(wa) | set(wb))


# ---- figures of a served block -----------------------------------------------------------------
def _q(xs: Sequence[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _gain(static: float | None, adaptive: float | None, *, lower_is_better: bool
          ) -> float | None:
    if static is None or adaptive is None or static <= 0:
        return None
    return 1.0 - adaptive / static if lower_is_better else adaptive / static - 1.0


def window_gain(arms: Mapping[str, Mapping[str, Any]]) -> dict[str, float | None]:
    """The adaptation gain of a window: positive is better for the adaptive arm.

    >>> window_gain({"static": {"latency_p50_s": 4.0, "latency_p99_s": 8.0, "throughput_rps": 10.0},
    ...              "adaptive": {"latency_p50_s": 3.0, "latency_p99_s": 8.0, "throughput_rps": 12.0}})
    {'latency_p50': 0.25, 'latency_p99': 0.0, 'throughput': 0.19999999999999996}
    """
    st, ad = arms.get("static") or {}, arms.get("adaptive") or {}
    return {"latency_p50": _gain(st.get("latency_p50_s"), ad.get("latency_p50_s"),
                                 lower_is_better=True),
            "latency_p99": _gain(st.get("latency_p99_s"), ad.get("latency_p99_s"),
                                 lower_is_better=True),
            "throughput": _gain(st.get("throughput_rps"), ad.get("throughput_rps"),
                                lower_is_better=False)}


def _median(xs: Sequence[float | None]) -> float | None:
    got = [x for x in xs if x is not None and math.isfinite(x)]
    return statistics.median(got) if got else None


def summarize(windows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The loop's headline figures from its window records (``run_loop``): median gains
    over the windows after the first, prediction error (median over the windows that
    recalibrated, before and after; and of the first and last windows served), counts of
    each action, and request conservation over every served block."""
    later = [w for w in windows if w.get("index", 0) >= 1]
    acts = [a.get("action") for w in windows for a in w.get("actions") or []]
    recal = [w for w in windows if any(a.get("action") == "recalibrate"
                                       for a in w.get("actions") or [])]
    req = {"offered": 0, "completed": 0, "rejected": 0, "timed_out": 0, "in_flight": 0,
           "not_arrived": 0}
    conserved = True
    for w in windows:
        for arm in ARMS:
            r = ((w.get("arms") or {}).get(arm) or {}).get("requests") or {}
            for k in req:
                req[k] += int(r.get(k, 0))
            conserved = conserved and bool(r.get("conserved", False))
    return {
        "windows_served": len(windows),
        "gain_latency_p50": _median([(w.get("gain") or {}).get("latency_p50") for w in later]),
        "gain_latency_p99": _median([(w.get("gain") or {}).get("latency_p99") for w in later]),
        "gain_throughput": _median([(w.get("gain") or {}).get("throughput") for w in later]),
        "gain_latency_p50_last": (windows[-1].get("gain") or {}).get("latency_p50")
        if windows else None,
        "prediction_error_before": _median([(w.get("prediction_error") or {}).get("before")
                                            for w in recal]),
        "prediction_error_after": _median([(w.get("prediction_error") or {}).get("after")
                                           for w in recal]),
        "prediction_error_first_window": (windows[0].get("prediction_error") or {}).get(
            "before") if windows else None,
        "prediction_error_last_window": (windows[-1].get("prediction_error") or {}).get(
            "before") if windows else None,
        "recalibrations": acts.count("recalibrate"),
        "replans": acts.count("replan"),
        "promotions": acts.count("promote"),
        "keeps": acts.count("keep"),
        "guardrail_refusals": sum(1 for w in windows for a in w.get("actions") or []
                                  if a.get("action") == "keep" and a.get("guardrail")),
        "rollbacks": acts.count("rollback"),
        "requests": {**req, "conserved": conserved and bool(windows)},
    }


# ---- prediction error by term --------------------------------------------------------------------
def prediction_rows(before: Sequence[Any], after: Sequence[Any], bucket: str
                    ) -> list[dict[str, Any]]:
    """Per term kind of one bucket's telemetry (its ``TelemetryRun`` s under the calibration
    served with, and the same measurements predicted under the recalibrated one): predicted
    before and after, and measured, summed over the terms of the kind and the runs' windows."""
    rows: dict[str, dict[str, Any]] = {}
    for runs, when in ((before, "before"), (after, "after")):
        for win in (w for run in runs for w in run.windows):
            for t in win.terms:
                r = rows.setdefault(t.kind, {"bucket": bucket, "kind": t.kind,
                                             "predicted_before_s": 0.0,
                                             "predicted_after_s": 0.0, "measured_s": 0.0,
                                             "terms": 0})
                r[f"predicted_{when}_s"] += float(t.predicted_s)
                if when == "before":
                    r["measured_s"] += float(t.measured_s)
                    r["terms"] += 1
    out = []
    for r in rows.values():
        m = r["measured_s"]
        r["error_before"] = abs(r["predicted_before_s"] - m) / m if m > 0 else None
        r["error_after"] = abs(r["predicted_after_s"] - m) / m if m > 0 else None
        out.append(r)
    return sorted(out, key=lambda r: r["kind"])


def total_error(rows: Sequence[Mapping[str, Any]], when: str) -> float | None:
    meas = sum(float(r["measured_s"]) for r in rows)
    if meas <= 0:
        return None
    return sum(abs(float(r[f"predicted_{when}_s"]) - float(r["measured_s"]))
               for r in rows) / meas
