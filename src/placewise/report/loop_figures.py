"""The closed-loop mapping report (a ``placewise-loop`` file, ``placewise.adapt.loop``): per
window and per bucket, the compile-time prediction error before and after recalibration by
term, the runtime adaptation gain (latency and throughput of the adaptive plan set against
the never-adapting incumbent served on the same traffic), the shape mix over time, the
padding waste, the actions taken with their evidence, and the stable tags of each phase.

Every builder reads the decoded LOOP.json defensively (a missing key draws nothing) and
escapes every label it takes from the file (``placewise.report.model.label``).

>>> doc = {"windows": [{"index": 1, "arms": {
...     "static": {"latency_p50_s": 0.004, "latency_p99_s": 0.006, "throughput_rps": 90.0},
...     "adaptive": {"latency_p50_s": 0.002, "latency_p99_s": 0.003,
...                  "throughput_rps": 100.0}}}]}
>>> fig = gain_figure(doc)
>>> [t["name"] for t in fig.data][:2], fig.data[0]["y"]
(['static p50', 'adaptive p50'], [4.0])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from placewise.report.model import COLORS, Figure, Section, Table, fmt_num, fmt_s, label

__all__ = ["ARMS", "MAX_ACTION_ROWS", "MAX_PHASE_ROWS", "actions_table", "bucket_error_figure",
           "bucket_table",
           "error_figure", "gain_figure", "loop_sections", "mix_figure", "padding_figure",
           "phases_table", "summary_table", "throughput_figure"]

ARMS = ("static", "adaptive")
MAX_ACTION_ROWS = 200
MAX_PHASE_ROWS = 200
_DASH = {"static": "dash", "adaptive": "solid"}


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def _dicts(x: Any) -> list[Mapping[str, Any]]:
    return [v for v in x if isinstance(v, dict)] if isinstance(x, list) else []


def _windows(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return _dicts(doc.get("windows"))


def _arm(w: Mapping[str, Any], arm: str) -> Mapping[str, Any]:
    arms = w.get("arms")
    got = arms.get(arm) if isinstance(arms, dict) else None
    return got if isinstance(got, dict) else {}


def _pct(x: Any) -> str:
    n = _num(x)
    return "-" if n is None else f"{n * 100:+.1f} %"


def _line(name: str, x: list[Any], y: list[float | None], color: str, dash: str,
          hover: str) -> dict[str, Any]:
    return {"type": "scatter", "mode": "lines+markers", "name": label(name), "x": x, "y": y,
            "line": {"color": color, "dash": dash}, "marker": {"color": color},
            "hovertemplate": label(name) + " window %{x}: " + hover + "<extra></extra>"}


# ---- over time -------------------------------------------------------------------------------
def gain_figure(doc: Mapping[str, Any]) -> Figure | None:
    """Median and p99 latency per window of the adaptive plan set and of the static
    incumbent, served on the same replayed traffic."""
    ws = _windows(doc)
    xs = [w.get("index") for w in ws]
    traces = []
    for q, what in (("p50", "latency_p50_s"), ("p99", "latency_p99_s")):
        for i, arm in enumerate(ARMS):
            ys = [_ms(_arm(w, arm).get(what)) for w in ws]
            if any(y is not None for y in ys):
                traces.append(_line(f"{arm} {q}", xs, ys, COLORS[i],
                                    _DASH[arm] if q == "p50" else "dot", "%{y:.4g} ms"))
    if not traces:
        return None
    layout = {"height": 400, "xaxis": {"title": {"text": "window"}, "dtick": 1},
              "yaxis": {"title": {"text": "latency (ms)"}, "rangemode": "tozero"},
              "legend": {"orientation": "h", "y": -0.25}}
    return Figure("Runtime adaptation gain: latency per window, adaptive against the static "
                  "incumbent", traces, layout,
                  "both served on the same replayed window of the trace, interleaved")


def _ms(x: Any) -> float | None:
    n = _num(x)
    return None if n is None else round(n * 1e3, 9)


def throughput_figure(doc: Mapping[str, Any]) -> Figure | None:
    """Completed requests per second per window, adaptive against static."""
    ws = _windows(doc)
    xs = [w.get("index") for w in ws]
    traces = []
    for i, arm in enumerate(ARMS):
        ys = [_num(_arm(w, arm).get("throughput_rps")) for w in ws]
        if any(y is not None for y in ys):
            traces.append({"type": "bar", "name": arm, "x": xs, "y": ys,
                           "marker": {"color": COLORS[i]},
                           "hovertemplate": arm + " window %{x}: %{y:.4g} req/s<extra></extra>"})
    if not traces:
        return None
    layout = {"barmode": "group", "height": 340, "xaxis": {"title": {"text": "window"},
                                                           "dtick": 1},
              "yaxis": {"title": {"text": "throughput (req/s)"}}}
    return Figure("Throughput per window (completed requests per second of the run)", traces,
                  layout)


def _distinct(ws: Sequence[Mapping[str, Any]], field: str,
              key: Callable[[Mapping[str, Any]], str]) -> list[str]:
    """The distinct ``key`` of the records under ``field`` over the windows, in order of
    first appearance."""
    return list(dict.fromkeys(key(d) for w in ws for d in _dicts(w.get(field))))


def error_figure(doc: Mapping[str, Any]) -> Figure | None:
    """Compile-time prediction error per window and term kind, before and after
    recalibration: |predicted - measured| / measured of the adaptive arm's terms summed by
    kind over its buckets."""
    ws = _windows(doc)
    kinds = _distinct(ws, "prediction", lambda p: str(p.get("kind")))
    if not kinds:
        return None
    xs = [w.get("index") for w in ws]
    traces = []
    for i, kind in enumerate(kinds):
        for when, dash in (("before", "dash"), ("after", "solid")):
            ys = [_kind_error(w, kind, when) for w in ws]
            if any(y is not None for y in ys):
                traces.append(_line(f"{kind} ({when})", xs, ys, COLORS[i % len(COLORS)], dash,
                                    "%{y:.3g} %"))
    layout = {"height": 400, "xaxis": {"title": {"text": "window"}, "dtick": 1},
              "yaxis": {"title": {"text": "|predicted - measured| / measured (%)"},
                        "rangemode": "tozero"},
              "legend": {"orientation": "h", "y": -0.25}}
    return Figure("Compile-time prediction error by term, before and after recalibration",
                  traces, layout, "dashed: the calibration the window was served with; solid: "
                                  "the one recalibrated from it, on the same measurements")


def _kind_error(w: Mapping[str, Any], kind: str, when: str) -> float | None:
    pred = meas = 0.0
    seen = False
    for p in _dicts(w.get("prediction")):
        if str(p.get("kind")) != kind:
            continue
        ps, ms = _num(p.get(f"predicted_{when}_s")), _num(p.get("measured_s"))
        if ps is None or ms is None:
            continue
        pred, meas, seen = pred + ps, meas + ms, True
    if not seen or meas <= 0:
        return None
    return round(abs(pred - meas) / meas * 100, 6)


def bucket_error_figure(doc: Mapping[str, Any]) -> Figure | None:
    """Per bucket, the prediction error over every window it served (the adaptive arm's
    terms summed), before and after recalibration."""
    sums: dict[str, dict[str, float]] = {}
    for w in _windows(doc):
        for p in _dicts(w.get("prediction")):
            b, ms = str(p.get("bucket")), _num(p.get("measured_s"))
            pb, pa = _num(p.get("predicted_before_s")), _num(p.get("predicted_after_s"))
            if ms is None or pb is None or pa is None:
                continue
            acc = sums.setdefault(b, {"before": 0.0, "after": 0.0, "measured": 0.0})
            acc["before"] += abs(pb - ms)
            acc["after"] += abs(pa - ms)
            acc["measured"] += ms
    names = [b for b, acc in sums.items() if acc["measured"] > 0]
    if not names:
        return None
    traces = [{"type": "bar", "name": when, "x": [label(b) for b in names],
               "y": [round(sums[b][when] / sums[b]["measured"] * 100, 6) for b in names],
               "marker": {"color": COLORS[i]},
               "hovertemplate": "%{x}: %{y:.3g} % " + when + "<extra></extra>"}
              for i, when in enumerate(("before", "after"))]
    layout = {"barmode": "group", "height": 340, "xaxis": {"title": {"text": "bucket"}},
              "yaxis": {"title": {"text": "sum |predicted - measured| / measured (%)"},
                        "rangemode": "tozero"}}
    return Figure("Prediction error per bucket, before and after recalibration", traces,
                  layout, "every term of every window the bucket served in the adaptive arm")


def mix_figure(doc: Mapping[str, Any]) -> Figure | None:
    """The shape mix of each window (the drift): the share of requests per shape."""
    ws = _windows(doc)
    shapes = _distinct(ws, "mix", lambda m: _shape_text(m.get("shape")))
    if not shapes:
        return None
    xs = [w.get("index") for w in ws]
    traces = []
    for i, s in enumerate(shapes):
        ys = []
        for w in ws:
            got = [_num(m.get("weight")) for m in _dicts(w.get("mix"))
                   if _shape_text(m.get("shape")) == s]
            ys.append(round((got[0] or 0.0) * 100, 6) if got else 0.0)
        traces.append({"type": "bar", "name": label(s), "x": xs, "y": ys,
                       "marker": {"color": COLORS[i % len(COLORS)]},
                       "hovertemplate": label(s) + " window %{x}: %{y:.3g} %<extra></extra>"})
    layout = {"barmode": "stack", "height": 340, "xaxis": {"title": {"text": "window"},
                                                           "dtick": 1},
              "yaxis": {"title": {"text": "share of requests (%)"}, "range": [0, 100]}}
    return Figure("Shape mix per window (the drift)", traces, layout)


def _shape_text(shape: Any) -> str:
    if isinstance(shape, dict):
        return " ".join(f"{k}={v}" for k, v in sorted(shape.items()))
    return str(shape)


def padding_figure(doc: Mapping[str, Any]) -> Figure | None:
    """Padding waste per window: the share of the rows (and sequence positions) computed
    that were padding, adaptive against static."""
    ws = _windows(doc)
    xs = [w.get("index") for w in ws]
    traces = []
    for i, arm in enumerate(ARMS):
        ys = [_num(_arm(w, arm).get("padding_waste")) for w in ws]
        if any(y is not None for y in ys):
            traces.append(_line(arm, xs, [None if y is None else round(y * 100, 6) for y in ys],
                                COLORS[i], _DASH[arm], "%{y:.3g} % padding"))
    if not traces:
        return None
    layout = {"height": 320, "xaxis": {"title": {"text": "window"}, "dtick": 1},
              "yaxis": {"title": {"text": "padding waste (%)"}, "rangemode": "tozero"}}
    return Figure("Padding waste per window", traces, layout)


# ---- tables ----------------------------------------------------------------------------------
def summary_table(doc: Mapping[str, Any]) -> Table:
    """The loop's headline figures (``summary``)."""
    s: Mapping[str, Any] = doc["summary"] if isinstance(doc.get("summary"), dict) else {}
    req: Mapping[str, Any] = s["requests"] if isinstance(s.get("requests"), dict) else {}
    rows = [["windows served", fmt_num(s.get("windows_served"))],
            ["adaptation gain, median latency (after the drift)", _pct(s.get("gain_latency_p50"))],
            ["adaptation gain, p99 latency (after the drift)", _pct(s.get("gain_latency_p99"))],
            ["adaptation gain, throughput (after the drift)", _pct(s.get("gain_throughput"))],
            ["prediction error before recalibration", _share(s.get("prediction_error_before"))],
            ["prediction error after recalibration", _share(s.get("prediction_error_after"))],
            ["prediction error, first -> last window served",
             f"{_share(s.get('prediction_error_first_window'))} -> "
             f"{_share(s.get('prediction_error_last_window'))}"],
            ["recalibrations", fmt_num(s.get("recalibrations"))],
            ["candidates planned", fmt_num(s.get("replans"))],
            ["promoted", fmt_num(s.get("promotions"))],
            ["kept: refused by the guardrail", fmt_num(s.get("guardrail_refusals"))],
            ["kept: not predicted better by the margin", fmt_num(_minus(
                s.get("keeps"), s.get("guardrail_refusals")))],
            ["rolled back", fmt_num(s.get("rollbacks"))],
            ["requests offered / completed", f"{fmt_num(req.get('offered'))} / "
                                             f"{fmt_num(req.get('completed'))}"],
            ["requests conserved", fmt_num(req.get("conserved"))],
            ["stopped by the budget", fmt_num(s.get("budget_exhausted"))]]
    return Table("The closed loop", ["figure", "value"], [[label(c) for c in r] for r in rows],
                 caption="gains: 1 - adaptive / static for latency, adaptive / static - 1 for "
                         "throughput; positive is better")


def _minus(a: Any, b: Any) -> float | None:
    x, y = _num(a), _num(b)
    return None if x is None else x - (y or 0.0)


def bucket_table(doc: Mapping[str, Any]) -> Table:
    """Per window, arm and bucket: requests, predicted and measured latency, padding."""
    rows: list[list[str]] = []
    total = 0
    for w in _windows(doc):
        for arm in ARMS:
            for b in _dicts(_arm(w, arm).get("buckets")):
                total += 1
                if len(rows) < MAX_ACTION_ROWS:
                    rows.append([str(w.get("index")), arm, str(b.get("bucket")),
                                 fmt_num(b.get("requests")), fmt_s(b.get("predicted_latency_s")),
                                 fmt_s(b.get("latency_p50_s")), fmt_s(b.get("latency_p99_s")),
                                 _share(b.get("padding_waste"))])
    return Table("Per bucket", ["window", "arm", "bucket", "requests", "predicted (plan)",
                                "measured p50", "measured p99", "padding"],
                 [[label(c) for c in r] for r in rows], left_out=total - len(rows))


def _share(x: Any) -> str:
    n = _num(x)
    return "-" if n is None else f"{n * 100:.1f} %"


def actions_table(doc: Mapping[str, Any]) -> Table:
    """Every action with its reason and evidence (the decision records, abridged)."""
    rows: list[list[str]] = []
    total = 0
    for w in _windows(doc):
        for a in _dicts(w.get("actions")):
            total += 1
            if len(rows) < MAX_ACTION_ROWS:
                rows.append([str(w.get("index")), str(a.get("action")), str(a.get("reason")),
                             _evidence_text(a.get("evidence"))])
    return Table("Actions and their evidence", ["window", "action", "reason", "evidence"],
                 [[label(c) for c in r] for r in rows], left_out=total - len(rows))


def _evidence_text(ev: Any, limit: int = 600) -> str:
    if not isinstance(ev, dict):
        return "" if ev is None else str(ev)[:limit]
    parts = []
    for k, v in ev.items():
        if isinstance(v, float):
            parts.append(f"{k}={v:.4g}")
        elif isinstance(v, dict | list):
            parts.append(f"{k}=({len(v)} items)")
        else:
            parts.append(f"{k}={v}")
    text = "; ".join(parts)
    return text if len(text) <= limit else text[:limit] + "..."


def phases_table(doc: Mapping[str, Any]) -> Table:
    """The stable tags of each phase: the fingerprints in full for the first phase, then
    which tags differ from the phase before."""
    rows: list[list[str]] = []
    phases = _dicts(doc.get("phases"))
    for p in phases[:MAX_PHASE_ROWS]:
        tags: Mapping[str, Any] = p["tags"] if isinstance(p.get("tags"), dict) else {}
        diff = p.get("differs_from_previous")
        if not rows:
            what = "; ".join(f"{k}={v}" for k, v in sorted(tags.items()))
        elif isinstance(diff, dict) and diff:
            what = "; ".join(f"{k}: {_short(v)}" for k, v in sorted(diff.items()))
        else:
            what = "same tags as the phase before"
        rows.append([str(p.get("index")), str(p.get("name")), str(p.get("window")),
                     str(p.get("arm") or ""), _short(p.get("plan_set")),
                     _short(p.get("calibration")), what])
    return Table("Tags of each phase", ["phase", "name", "window", "arm", "plan set",
                                        "calibration", "tags"],
                 [[label(c) for c in r] for r in rows],
                 left_out=max(0, len(phases) - MAX_PHASE_ROWS))


def _short(v: Any) -> str:
    if isinstance(v, list | tuple) and len(v) == 2:
        return f"{_short(v[0])} -> {_short(v[1])}"
    text = "-" if v is None else str(v)
    return text[:19] + "..." if len(text) > 22 and ":" in text else text


def _figs(*figs: Figure | None) -> list[Figure]:
    return [f for f in figs if f is not None]


def loop_sections(doc: Mapping[str, Any]) -> list[Section]:
    """The report's sections of a loop file."""
    notes = [str(n) for n in doc.get("notes") or []]
    return [Section("loop", "The closed loop", _figs(gain_figure(doc), throughput_figure(doc)),
                    [summary_table(doc)], notes),
            Section("loop-prediction", "Compile-time prediction error",
                    _figs(error_figure(doc), bucket_error_figure(doc)), [bucket_table(doc)]),
            Section("loop-drift", "Shape drift and padding",
                    _figs(mix_figure(doc), padding_figure(doc))),
            Section("loop-actions", "Actions", tables=[actions_table(doc)]),
            Section("loop-tags", "Tags per phase", tables=[phases_table(doc)])]
