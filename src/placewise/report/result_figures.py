"""Figures and tables of what was measured or derived beside the plan: predicted against
measured by term (a ``validate --json`` result), the service under load (a ``serve --json``
result: latency percentiles with their confidence intervals, the batch-size histogram), and
MFU with the memory-bound fraction by layer type (``placewise.utilization``).

>>> v = {"attribution": {"latency": {"terms_s": {"compute": -2e-6, "launch": 5e-6},
...      "critical_path": []}, "throughput": None}}
>>> fig = term_figure(v)
>>> fig.data[0]["x"], fig.data[0]["y"]
(['compute', 'launch'], [-2.0, 5.0])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from placewise.report.model import Figure, Table, fmt_bytes, fmt_num, fmt_s, label, time_unit

__all__ = [
    "MAX_STEPS",
    "batch_figure",
    "percentile_figure",
    "serve_table",
    "step_figure",
    "term_figure",
    "utilization_figure",
    "utilization_table",
    "validation_table",
]

MAX_STEPS = 60
_QUANTILES = ("p50", "p90", "p95", "p99", "p99.9")


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


# ---- validation ----------------------------------------------------------------------------
def step_figure(v: Mapping[str, Any]) -> Figure | None:
    """Predicted against measured time of each step on the measured request's critical
    path (the longest ``MAX_STEPS`` steps when there are more)."""
    lat = (v.get("attribution") or {}).get("latency") or {}
    steps = [s for s in lat.get("critical_path") or [] if isinstance(s, dict)]
    if not steps:
        return None
    shown = steps
    if len(steps) > MAX_STEPS:
        keep = sorted(steps, key=lambda s: -max(_num(s.get("measured_s")) or 0,
                                                _num(s.get("predicted_s")) or 0))[:MAX_STEPS]
        ids = {id(s) for s in keep}
        shown = [s for s in steps if id(s) in ids]
    span = max(max(_num(s.get("measured_s")) or 0, _num(s.get("predicted_s")) or 0)
               for s in shown) or 1e-9
    unit, k = time_unit(span)
    names = [label(f"{i + 1}. {s.get('step') or s.get('task')} ({s.get('label', '')})")
             for i, s in enumerate(shown)]
    data = [{"type": "bar", "name": what, "x": names,
             "y": [(_num(s.get(key)) or 0.0) * k for s in shown],
             "hovertemplate": f"%{{x}}: {what} %{{y:.4g}} {unit}<extra></extra>"}
            for what, key in (("predicted", "predicted_s"), ("measured", "measured_s"))]
    layout = {"barmode": "group", "height": 420,
              "yaxis": {"title": {"text": f"time ({unit})"}},
              "xaxis": {"automargin": True, "tickangle": -30}}
    note = (f"{len(shown)} of {len(steps)} steps" if len(shown) < len(steps) else
            f"{len(steps)} steps") + " of the median request's critical path"
    return Figure("Predicted against measured, per step of the critical path", data, layout,
                  note)


def term_figure(v: Mapping[str, Any]) -> Figure | None:
    """Measured minus predicted, by term: where the latency and the throughput's period
    differ from the plan (``placewise.validate.attribution``)."""
    att = v.get("attribution") or {}
    data: list[dict[str, Any]] = []
    spans: list[float] = []
    rows = []
    for what in ("latency", "throughput"):
        terms = (att.get(what) or {}).get("terms_s") if isinstance(att.get(what), dict) else None
        if isinstance(terms, dict) and terms:
            items = [(str(t), _num(x) or 0.0) for t, x in terms.items()]
            rows.append((what, items))
            spans += [abs(x) for _, x in items]
    if not rows:
        return None
    unit, k = time_unit(max(spans) or 1e-9)
    for what, items in rows:
        data.append({"type": "bar", "name": f"{what} (period)" if what == "throughput" else what,
                     "x": [label(t) for t, _ in items], "y": [round(x * k, 9) for _, x in items],
                     "hovertemplate": f"%{{x}}: %{{y:+.4g}} {unit}<extra>{what}</extra>"})
    layout = {"barmode": "group", "height": 380,
              "yaxis": {"title": {"text": f"measured - predicted ({unit})"}, "zeroline": True}}
    return Figure("Measured against predicted, by term", data, layout,
                  "positive: the term took longer than the plan said")


def validation_table(v: Mapping[str, Any]) -> Table:
    """The headline figures: predicted, measured and the error of each."""
    pred, meas, err = v.get("predicted") or {}, v.get("measured") or {}, v.get("error") or {}
    lat = meas.get("latency") or {}
    rows = [["latency (p50)", fmt_s(pred.get("latency_s")), fmt_s(lat.get("p50_s")),
             _pct(err.get("latency"))],
            ["latency (p90)", fmt_s(pred.get("latency_s")), fmt_s(lat.get("p90_s")),
             _pct(err.get("latency_p90"))],
            ["throughput", _rps(pred.get("throughput_rps")), _rps(meas.get("throughput_rps")),
             _pct(err.get("throughput"))]]
    pm, mm = pred.get("memory_bytes") or {}, meas.get("memory_bytes") or {}
    for dev in sorted(set(pm) | set(mm)):
        rows.append([f"memory {dev}", fmt_bytes(pm.get(dev)), fmt_bytes(mm.get(dev)),
                     _pct((err.get("memory") or {}).get(dev))])
    att = v.get("attribution") or {}
    caption = " ".join(str((att.get(w) or {}).get("explanation", ""))
                       for w in ("latency", "throughput") if isinstance(att.get(w), dict))
    return Table("Predicted and measured", ["figure", "predicted", "measured", "error"],
                 [[label(c) for c in r] for r in rows], caption=caption.strip())


def _pct(x: Any) -> str:
    n = _num(x)
    return "-" if n is None else f"{n * 100:+.1f} %"


def _rps(x: Any) -> str:
    n = _num(x)
    return "-" if n is None else f"{n:.4g} req/s"


# ---- serve -----------------------------------------------------------------------------------
def _runs(s: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(name, figures) of a serve result: simulated, and measured for ``--real``."""
    if isinstance(s.get("simulated"), dict) and isinstance(s.get("measured"), dict):
        return [("simulated", s["simulated"]), ("measured", s["measured"])]
    return [("simulated", s)]


def percentile_figure(s: Mapping[str, Any]) -> Figure | None:
    """Latency percentiles of each run, with their 95 % intervals where bounded."""
    runs: list[tuple[str, list[str], Mapping[str, Any]]] = []
    top = 0.0
    for name, r in _runs(s):
        q = r.get("quantiles") or {}
        ks = [x for x in _QUANTILES if isinstance(q.get(x), dict)]
        top = max([top] + [_num(q[x].get("value_s")) or 0.0 for x in ks])
        if ks:
            runs.append((name, ks, q))
    if not runs:
        return None
    unit, k = time_unit(top or 1e-9)
    traces = []
    for name, ks, q in runs:
        vals = [(_num(q[x].get("value_s")) or 0.0) for x in ks]
        his = [_num(q[x].get("high_s")) for x in ks]
        los = [_num(q[x].get("low_s")) for x in ks]
        hi = [(h if h is not None else v) - v for h, v in zip(his, vals, strict=True)]
        lo = [v - (m if m is not None else v) for m, v in zip(los, vals, strict=True)]
        traces.append({"type": "bar", "name": name, "x": list(ks), "y": [v * k for v in vals],
                       "error_y": {"type": "data", "symmetric": False,
                                   "array": [h * k for h in hi], "arrayminus": [m * k for m in lo]},
                       "hovertemplate": f"{name} %{{x}}: %{{y:.4g}} {unit}<extra></extra>"})
    layout = {"barmode": "group", "height": 380,
              "yaxis": {"title": {"text": f"latency ({unit})"}}}
    return Figure("Latency percentiles under load (bars: 95 % interval)", traces, layout)


def batch_figure(s: Mapping[str, Any]) -> Figure | None:
    """How many batches of each size the batcher formed, per run."""
    traces = []
    for name, r in _runs(s):
        h = r.get("batch_sizes")
        if isinstance(h, dict) and h:
            items = sorted(((int(b), int(n)) for b, n in h.items()), key=lambda x: x[0])
            traces.append({"type": "bar", "name": name, "x": [b for b, _ in items],
                           "y": [n for _, n in items],
                           "hovertemplate": f"{name}: %{{y}} batches of %{{x}}<extra></extra>"})
    if not traces:
        return None
    layout = {"barmode": "group", "height": 340, "xaxis": {"title": {"text": "batch size"},
                                                           "dtick": 1},
              "yaxis": {"title": {"text": "batches"}}}
    return Figure("Batch sizes formed", traces, layout)


def serve_table(s: Mapping[str, Any]) -> Table:
    runs = _runs(s)
    keys: list[tuple[str, str, Callable[[Any], str]]] = [("arrived", "arrived", str), ("completed", "completed", str),
            ("rejected", "rejected", str), ("timed out", "timed_out", str),
            ("throughput", "throughput_rps", _rps), ("goodput", "goodput_rps", _rps),
            ("mean batch", "mean_batch", fmt_num), ("mean wait", "mean_wait_s", fmt_s),
            ("mean latency", "mean_latency_s", fmt_s), ("p99", "p99_s", fmt_s)]
    rows = [[name] + [fn(r.get(key)) if r.get(key) is not None else "-" for _, r in runs]
            for name, key, fn in keys]
    cap = (f"{s.get('batching', '')}; {s.get('admission', '')}; {s.get('replicas', 1)} "
           f"replica(s), {s.get('router', '')}; per batch: {s.get('per_batch', '')}")
    return Table("The service under load", ["figure"] + [n for n, _ in runs],
                 [[label(c) for c in r] for r in rows], caption=cap)


# ---- utilisation -----------------------------------------------------------------------------
def utilization_figure(u: Mapping[str, Any]) -> Figure | None:
    """MFU and memory-bound fraction by layer type (predicted, and measured when given),
    from ``Utilization.to_json()``."""
    rows = [r for r in u.get("by_layer_type") or [] if isinstance(r, dict)]
    if not rows:
        return None
    names = [label(r.get("layer_type")) for r in rows]
    traces: list[dict[str, Any]] = [{"type": "bar", "name": "MFU (predicted)", "x": names,
               "y": [(_num(r.get("mfu")) or 0.0) * 100 for r in rows]},
              {"type": "bar", "name": "memory-bound fraction (predicted)", "x": names,
               "y": [(_num(r.get("memory_bound_fraction")) or 0.0) * 100 for r in rows]}]
    measured = u.get("measured")
    mrows = [r for r in (measured or {}).get("by_layer_type") or [] if isinstance(r, dict)] \
        if isinstance(measured, dict) else []
    if mrows:
        traces.append({"type": "bar", "name": "MFU (measured)",
                       "x": [label(r.get("layer_type")) for r in mrows],
                       "y": [(_num(r.get("mfu")) or 0.0) * 100 for r in mrows]})
    for t in traces:
        t["hovertemplate"] = "%{x}: %{y:.3g} %<extra>" + t["name"] + "</extra>"
    layout = {"barmode": "group", "height": 380, "yaxis": {"title": {"text": "%"}},
              "xaxis": {"automargin": True}}
    note = (f"plan MFU {fmt_num((_num(u.get('mfu')) or 0) * 100, 3)} %, memory-bound "
            f"{fmt_num((_num(u.get('memory_bound_fraction')) or 0) * 100, 3)} % of the "
            f"compute time (conventions in the table below)")
    return Figure("MFU and memory-bound fraction by layer type", traces, layout, note)


def utilization_table(u: Mapping[str, Any]) -> Table:
    """The plan's MFU figures, predicted and measured, and the conventions they follow."""
    m: Mapping[str, Any] = u["measured"] if isinstance(u.get("measured"), dict) else {}

    def pct(x: Any) -> str:
        n = _num(x)
        return "-" if n is None else f"{n * 100:.3g} %"

    rows = [["FLOPs per run", fmt_num(u.get("flops")), fmt_num(m.get("flops"))],
            ["time", fmt_s(u.get("time_s")), fmt_s(m.get("time_s"))],
            ["peak of the devices used", fmt_num(u.get("peak_flops_per_s")) + " FLOP/s",
             fmt_num(m.get("peak_flops_per_s")) + " FLOP/s" if m else "-"],
            ["MFU", pct(u.get("mfu")), pct(m.get("mfu"))],
            ["MFU at the pipeline period", pct(u.get("mfu_throughput")),
             pct(m.get("mfu_throughput"))],
            ["memory-bound fraction", pct(u.get("memory_bound_fraction")),
             pct(m.get("memory_bound_fraction"))]]
    conv: Mapping[str, Any] = u["convention"] if isinstance(u.get("convention"), dict) else {}
    rows += [[f"convention: {k}", str(v), ""] for k, v in conv.items()]
    if u.get("uncounted"):
        rows.append(["uncounted op kinds", ", ".join(map(str, u["uncounted"])), ""])
    return Table("Utilisation", ["figure", "predicted", "measured"],
                 [[label(c) for c in r] for r in rows])
