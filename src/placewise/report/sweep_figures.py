"""The sweep's figures (a ``placewise-sweep/1`` file, ``placewise.sweep``): the workload fit
matrix as a heatmap, latency-throughput curves over batch, the regret matrices, the energy
per request and requests per joule of each cell, working-set sensitivity, and a table of
the cells. Large sweeps stay readable: at most ``MAX_REGRET`` regret matrices and
``MAX_SENSITIVITY`` sensitivity plots are drawn, the energy plot shows the ``MAX_ENERGY_CELLS``
cells that fit with the least energy per request, and the cell table is capped.

>>> s = {"fit_matrix": {"models": ["m"], "platforms": ["p", "q"], "slo_s": 0.01,
...      "cells": [{"model": "m", "platform": "p", "fits": True, "best_batch": 4,
...                 "latency_s": 0.002, "throughput_rps": 2000.0, "reason": None},
...                {"model": "m", "platform": "q", "fits": False, "reason": "too big"}]}}
>>> fig = fit_figure(s)
>>> fig.data[0]["z"], fig.data[0]["text"][0][1]
([[1, 0]], 'no fit: too big')
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from placewise.report.model import (
    COLORS,
    Figure,
    Table,
    fmt_bytes,
    fmt_num,
    fmt_s,
    label,
)

__all__ = ["MAX_CELL_ROWS", "MAX_ENERGY_CELLS", "MAX_REGRET", "MAX_SENSITIVITY", "cells_table",
           "curve_figure", "energy_figure", "fit_figure", "regret_figures",
           "sensitivity_figures"]

MAX_REGRET = 6
MAX_SENSITIVITY = 6
MAX_ENERGY_CELLS = 60
MAX_CELL_ROWS = 400


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def _dicts(x: Any) -> list[Mapping[str, Any]]:
    return [v for v in x if isinstance(v, dict)] if isinstance(x, list) else []


def fit_figure(s: Mapping[str, Any]) -> Figure | None:
    """Models x platforms: 1 where the model fits the platform within the SLO at its best
    batch (the text says the batch, latency and throughput), 0 and the reason where not."""
    fm = s.get("fit_matrix")
    if not isinstance(fm, dict):
        return None
    models = [str(m) for m in fm.get("models") or []]
    platforms = [str(p) for p in fm.get("platforms") or []]
    if not models or not platforms:
        return None
    cells = {(str(c.get("model")), str(c.get("platform"))): c for c in _dicts(fm.get("cells"))}
    z: list[list[int | None]] = []
    text: list[list[str]] = []
    for m in models:
        zr: list[int | None] = []
        tr: list[str] = []
        for p in platforms:
            c = cells.get((m, p))
            if c is None:
                zr.append(None)
                tr.append("not swept")
            elif c.get("fits"):
                zr.append(1)
                rpj = _num(c.get("requests_per_j"))
                tr.append(f"batch {c.get('best_batch')}: {fmt_s(c.get('latency_s'))}, "
                          f"{fmt_num(c.get('throughput_rps'))} req/s"
                          + (f", {fmt_num(rpj)} req/J" if rpj is not None else ""))
            else:
                zr.append(0)
                tr.append(label(f"no fit: {c.get('reason') or 'does not fit'}"))
        z.append(zr)
        text.append(tr)
    data = [{"type": "heatmap", "x": [label(p) for p in platforms], "y": [label(m) for m in models],
             "z": z, "text": text, "zmin": 0, "zmax": 1, "showscale": False,
             "colorscale": [[0, "#f4b6b6"], [1, "#9fd8a4"]], "xgap": 2, "ygap": 2,
             "texttemplate": "%{text}", "textfont": {"size": 10},
             "hovertemplate": "%{y} on %{x}<br>%{text}<extra></extra>"}]
    slo = fm.get("slo_s", s.get("slo_s"))
    layout = {"height": max(260, 60 * len(models) + 160),
              "xaxis": {"side": "top", "automargin": True},
              "yaxis": {"automargin": True, "autorange": "reversed"}}
    return Figure("Workload fit matrix (green: fits" + (f" within the SLO {fmt_s(slo)}"
                  if _num(slo) is not None else "") + ", at the platform's best batch)",
                  data, layout)


def curve_figure(s: Mapping[str, Any]) -> Figure | None:
    """Latency against throughput over batch, one line per model, platform and objective;
    points that do not fit are hollow."""
    traces = []
    for i, c in enumerate(_dicts(s.get("curves"))):
        pts = [p for p in _dicts(c.get("points")) if _num(p.get("latency_s")) is not None
               and _num(p.get("throughput_rps")) is not None]
        if not pts:
            continue
        name = label(f"{c.get('model')} on {c.get('platform')} ({c.get('objective')})")
        traces.append({"type": "scatter", "mode": "lines+markers+text", "name": name,
                       "x": [p["throughput_rps"] for p in pts],
                       "y": [p["latency_s"] * 1e3 for p in pts],
                       "text": [f"b{p.get('batch')}" for p in pts], "textposition": "top center",
                       "marker": {"symbol": ["circle" if p.get("fits") else "circle-open"
                                             for p in pts], "size": 8,
                                  "color": COLORS[i % len(COLORS)]},
                       "line": {"color": COLORS[i % len(COLORS)]},
                       "hovertemplate": name + " %{text}: %{y:.4g} ms, %{x:.4g} req/s"
                                               "<extra></extra>"})
    if not traces:
        return None
    layout = {"height": 440, "xaxis": {"type": "log", "title": {"text": "throughput (req/s)"}},
              "yaxis": {"type": "log", "title": {"text": "latency (ms)"}},
              "legend": {"orientation": "h", "y": -0.25}}
    return Figure("Latency against throughput over batch", traces, layout)


def regret_figures(s: Mapping[str, Any]) -> tuple[list[Figure], int]:
    """One heatmap per regret entry (the first ``MAX_REGRET``): row b1 is the plan chosen at
    b1, column b2 where it is evaluated; a cell is its regret against the plan chosen at b2.
    Returns the figures and how many entries were left out."""
    entries = [r for r in _dicts(s.get("regret")) if isinstance(r.get("regret"), list)]
    figs = []
    for r in entries[:MAX_REGRET]:
        batches = [str(b) for b in r.get("batches") or []]
        z = [[_num(x) for x in row] if isinstance(row, list) else [] for row in r["regret"]]
        lat = r.get("latency_s") if isinstance(r.get("latency_s"), list) else None
        text = [[(f"{(_num(x) or 0) * 100:.1f} %" if _num(x) is not None else "-")
                 + (f"<br>{fmt_s(lat[i][j])}" if lat and i < len(lat)
                    and isinstance(lat[i], list) and j < len(lat[i]) else "")
                 for j, x in enumerate(row)] for i, row in enumerate(z)]
        title = f"{r.get('model')} on {r.get('platform')} ({r.get('objective')})"
        data = [{"type": "heatmap", "x": [f"b={b}" for b in batches],
                 "y": [f"chosen at b={b}" for b in batches], "z": z, "text": text,
                 "texttemplate": "%{text}", "colorscale": "Reds", "zmin": 0,
                 "colorbar": {"title": {"text": "regret"}, "tickformat": ".0%"},
                 "hovertemplate": "%{y}, evaluated at %{x}: %{text}<extra></extra>"}]
        layout = {"height": max(300, 40 * len(batches) + 160),
                  "xaxis": {"title": {"text": "evaluated at batch"}, "side": "top"},
                  "yaxis": {"autorange": "reversed", "automargin": True}}
        figs.append(Figure(f"Regret: {title}", data, layout,
                           "a cell: how much worse the plan chosen at b1 is at b2 than the "
                           "plan chosen at b2"))
    return figs, max(0, len(entries) - MAX_REGRET)


def energy_figure(s: Mapping[str, Any]) -> Figure | None:
    """Energy per request and requests per joule (perf per watt) of the cells with an
    energy estimate, the ``MAX_ENERGY_CELLS`` that fit with the least energy per request."""
    rows = []
    for c in _dicts(s.get("cells")):
        e = c.get("energy")
        if isinstance(e, dict) and e.get("available") and _num(e.get("energy_per_request_j")):
            rows.append((c, e))
    if not rows:
        return None
    rows.sort(key=lambda ce: (not ce[0].get("fits"), ce[1]["energy_per_request_j"]))
    shown = rows[:MAX_ENERGY_CELLS]
    names = [label(f"{c.get('model')} / {c.get('platform')} / b{c.get('batch')}"
                   + (f" / {c.get('objective')}" if c.get("objective") else "")) for c, _ in shown]
    data = [{"type": "bar", "name": "energy per request (J)", "x": names,
             "y": [e["energy_per_request_j"] for _, e in shown],
             "marker": {"color": ["#636efa" if c.get("fits") else "#c9c9d6" for c, _ in shown]},
             "hovertemplate": "%{x}: %{y:.4g} J per request<extra></extra>"},
            {"type": "scatter", "mode": "markers", "name": "requests per J (perf/W)",
             "x": names, "y": [_num(e.get("requests_per_j")) for _, e in shown], "yaxis": "y2",
             "marker": {"color": "#ef553b", "size": 8},
             "hovertemplate": "%{x}: %{y:.4g} requests per J<extra></extra>"}]
    layout = {"height": 460, "xaxis": {"automargin": True, "tickangle": -40},
              "yaxis": {"title": {"text": "J per request"}, "type": "log"},
              "yaxis2": {"title": {"text": "requests per J"}, "overlaying": "y", "side": "right",
                         "type": "log"},
              "legend": {"orientation": "h", "y": 1.12}}
    note = (f"{len(shown)} of {len(rows)} cells with an estimate" if len(shown) < len(rows)
            else f"{len(rows)} cells with an estimate") + \
        "; grey: does not fit; estimates from the energy model (placewise.energy), not measured"
    return Figure("Energy per request and perf per watt, per cell", data, layout, note)


def sensitivity_figures(s: Mapping[str, Any]) -> tuple[list[Figure], int]:
    """Peak memory per tier against batch or sequence length, capacity dashed, the edge
    where it stops fitting marked (the first ``MAX_SENSITIVITY`` entries)."""
    entries = _dicts(s.get("sensitivity"))
    figs = []
    for r in entries[:MAX_SENSITIVITY]:
        pts = _dicts(r.get("points"))
        tiers = sorted({t for p in pts for t in (p.get("peak_bytes") or {})})
        data: list[dict[str, Any]] = []
        for i, t in enumerate(tiers):
            color = COLORS[i % len(COLORS)]
            xs = [p.get("value") for p in pts]
            data.append({"type": "scatter", "mode": "lines+markers", "name": label(t),
                         "x": xs, "y": [(p.get("peak_bytes") or {}).get(t) for p in pts],
                         "line": {"color": color}, "legendgroup": label(t),
                         "text": [_applied(p) for p in pts],
                         "hovertemplate": f"{label(t)} at %{{x}}: %{{y:.4s}}B%{{text}}"
                                          "<extra></extra>"})
            data.append({"type": "scatter", "mode": "lines", "name": label(f"{t} capacity"),
                         "x": xs, "y": [(p.get("capacity_bytes") or {}).get(t) for p in pts],
                         "line": {"color": color, "dash": "dash"}, "legendgroup": label(t),
                         "showlegend": False, "hoverinfo": "skip"})
        if not data:
            continue
        axis = str(r.get("axis", "batch"))
        edge = r.get("edge")
        layout: dict[str, Any] = {"height": 380, "xaxis": {"title": {"text": label(axis)},
                                                           "type": "log"},
                                  "yaxis": {"title": {"text": "peak bytes"}, "type": "log"}}
        if _num(edge) is not None:
            layout["shapes"] = [{"type": "line", "x0": edge, "x1": edge, "yref": "paper",
                                 "y0": 0, "y1": 1, "line": {"color": "#d62728", "dash": "dot"}}]
        figs.append(Figure(f"Working set: {r.get('model')} on {r.get('platform')} "
                           f"against {axis}", data, layout,
                           f"stops fitting at {axis} {edge}" if edge is not None
                           else "fits over the whole range"))
    return figs, max(0, len(entries) - MAX_SENSITIVITY)


def _applied(p: Mapping[str, Any]) -> str:
    a = p.get("applied")
    if not isinstance(a, dict):
        return ""
    return label(f" ({a.get('kind')}: {fmt_s(a.get('latency_s'))}, +{fmt_s(a.get('extra_s'))})")


def cells_table(s: Mapping[str, Any]) -> Table:
    cells = _dicts(s.get("cells"))
    cols = ["model", "platform", "batch", "objective", "fits", "latency", "throughput",
            "lower bound", "bottleneck", "MFU", "J/request", "min headroom", "reason"]
    rows = []
    for c in cells[:MAX_CELL_ROWS]:
        e = c.get("energy") if isinstance(c.get("energy"), dict) else {}
        head = [v for v in (c.get("headroom_bytes") or {}).values() if _num(v) is not None]
        rows.append([label(c.get("model")), label(c.get("platform")), label(c.get("batch")),
                     label(c.get("objective") or ""), "yes" if c.get("fits") else "no",
                     fmt_s(c.get("latency_s")), fmt_num(c.get("throughput_rps")),
                     fmt_s(c.get("lower_bound_s")), label(c.get("bottleneck_resource") or ""),
                     fmt_num(c.get("mfu"), 3), fmt_num((e or {}).get("energy_per_request_j")),
                     fmt_bytes(min(head)) if head else "-", label(c.get("reason") or "")])
    timing: Mapping[str, Any] = s["timing"] if isinstance(s.get("timing"), dict) else {}
    cap = (f"engine {s.get('engine', '?')}; {len(cells)} cells"
           + (f" in {fmt_s(timing.get('wall_s'))}" if timing.get("wall_s") else ""))
    return Table("Sweep cells", cols, rows, left_out=max(0, len(cells) - MAX_CELL_ROWS),
                 caption=cap)
