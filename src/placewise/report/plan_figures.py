"""The plan's figures: the schedule as a Gantt chart per resource with its crossing edges,
memory over time per device and tier with capacity, and a roofline with the placed ops.

Each stays readable, and small, for a plan of 10k+ ops: the Gantt chart merges runs of
tasks shorter than one pixel of its width (``GANTT_PIXELS``) into one bar that says how
many it holds, draws at most ``MAX_CROSSING_LINES`` crossing edges (the costliest), the
roofline draws at most ``MAX_ROOFLINE_POINTS`` ops (the longest), and the memory
timelines are the plan's own, already decimated (``placewise.plan.MAX_TIMELINE_POINTS``).

>>> from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
>>> from placewise.plan import build_plan
>>> from placewise.schedule import Problem, Placement, evaluate
>>> from placewise.schedule.testing import ToyCostModel, toy_machine
>>> from placewise.units import DType
>>> x = Tensor("x", (1000,), DType.FP32, role=Role.INPUT)
>>> y = Tensor("y", (1000,), DType.FP32, role=Role.OUTPUT)
>>> g = Graph.build("g", [x, y], [Op("a", OpKind.RELU, ("x",), ("y",))])
>>> prob = Problem(g, None, toy_machine(), ToyCostModel(toy_machine()))
>>> plan = build_plan(prob, evaluate(prob, Placement.uniform(["a"], "gpu", DType.FP32)),
...                   model_ref="g.json", strategy="single:gpu")
>>> fig = gantt_figure(plan)
>>> [(t["name"], len(t["x"])) for t in fig.data]
[('compute', 1), ('transfer', 2), ('crossing edges', 8)]
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from placewise.report.model import COLORS, Figure, fmt_bytes, fmt_num, fmt_s, label, time_unit

__all__ = ["GANTT_PIXELS", "MAX_CROSSING_LINES", "MAX_ROOFLINE_POINTS", "gantt_figure",
           "memory_figure", "roofline_figure"]

GANTT_PIXELS = 1600
MAX_CROSSING_LINES = 300
MAX_ROOFLINE_POINTS = 3000
_KIND_COLORS = {"compute": "#636efa", "transfer": "#ef553b", "conversion": "#ffa15a",
                "merged": "#9aa0a6"}


def _row_of(t: Any, lanes: dict[str, int]) -> str:
    return t.resource if lanes.get(t.resource, 1) <= 1 else f"{t.resource} #{t.lane}"


def _bars(tasks: list[Any], pixel: float) -> Iterable[tuple[str, float, float, str]]:
    """(kind, start, end, hover) per bar of one row: runs of tasks shorter than ``pixel``
    that follow each other within ``pixel`` become one bar."""
    run: list[Any] = []

    def flush() -> Iterable[tuple[str, float, float, str]]:
        if len(run) == 1:
            yield _one(run[0])
        elif run:
            s, e = run[0].start_s, max(t.end_s for t in run)
            busy = sum(t.end_s - t.start_s for t in run)
            yield ("merged", s, e, f"{len(run)} tasks shorter than a pixel, merged<br>"
                                   f"{label(run[0].name)} .. {label(run[-1].name)}<br>"
                                   f"{fmt_s(s)} to {fmt_s(e)}, busy {fmt_s(busy)}")
        run.clear()

    for t in tasks:
        short = t.end_s - t.start_s < pixel
        if run and (not short or t.start_s - max(r.end_s for r in run[-1:]) > pixel):
            yield from flush()
        if short:
            run.append(t)
        else:
            yield _one(t)
    yield from flush()


def _one(t: Any) -> tuple[str, float, float, str]:
    terms = ", ".join(f"{k.value} {fmt_s(v)}" for k, v in sorted(
        t.terms_s.items(), key=lambda kv: -kv[1]) if v > 0)
    what = (f"{label(t.tensor)} {fmt_bytes(t.nbytes)}" if t.tensor is not None
            else f"vertex {label(t.vertex)}")
    return (t.kind.value, t.start_s, t.end_s,
            f"<b>{label(t.name)}</b><br>{t.kind.value} on {label(t.device)}: {what}<br>"
            f"{fmt_s(t.start_s)} + {fmt_s(t.end_s - t.start_s)} ({terms or 'no terms'})<br>"
            f"bottleneck {t.bottleneck.value}")


def gantt_figure(plan: Any) -> Figure:
    """The schedule: one row per resource (and lane), a bar per task coloured by kind,
    crossing edges as lines from the producer's end through the tasks that move the
    tensor to the consumer's start."""
    tasks = plan.schedule.tasks
    span = max((t.end_s for t in tasks), default=0.0) or 1e-9
    unit, k = time_unit(span)
    pixel = span / GANTT_PIXELS
    lanes = {r.name: r.lanes for r in plan.schedule.resources}
    order = {r.name: i for i, r in enumerate(plan.schedule.resources)}
    by_row: dict[str, list[Any]] = defaultdict(list)
    for t in tasks:
        by_row[_row_of(t, lanes)].append(t)
    rows = sorted(by_row, key=lambda r: (order.get(r.split(" #")[0], 1 << 30), r))
    series: dict[str, dict[str, list[Any]]] = {}
    merged = 0
    for row in rows:
        for kind, s, e, hover in _bars(sorted(by_row[row], key=lambda t: t.start_s), pixel):
            d = series.setdefault(kind, {"base": [], "x": [], "y": [], "hovertext": []})
            d["base"].append(round(s * k, 9))
            d["x"].append(round(max(e - s, pixel / 4) * k, 9))
            d["y"].append(label(row))
            d["hovertext"].append(hover)
            merged += kind == "merged"
    data: list[dict[str, Any]] = []
    for kind in ("compute", "transfer", "conversion", "merged"):
        if kind in series:
            d = series[kind]
            data.append({"type": "bar", "orientation": "h", "name": kind, **d,
                         "marker": {"color": _KIND_COLORS[kind]}, "textposition": "none",
                         "hovertemplate": "%{hovertext}<extra></extra>"})
    data.append(_crossing_lines(plan, lanes, k))
    note = (f"{len(tasks)} tasks on {len(rows)} rows"
            + (f"; {merged} bars merge runs of tasks shorter than a pixel "
               f"({fmt_s(pixel)})" if merged else ""))
    layout = {"barmode": "overlay", "height": max(320, 34 * len(rows) + 140),
              "xaxis": {"title": {"text": f"time ({unit})"}, "rangemode": "tozero"},
              "yaxis": {"type": "category", "categoryorder": "array",
                        "categoryarray": [label(r) for r in reversed(rows)],
                        "automargin": True},
              "legend": {"orientation": "h", "y": -0.2}}
    return Figure("Schedule per resource, with crossing edges", data, layout, note)


def _crossing_lines(plan: Any, lanes: dict[str, int], k: float) -> dict[str, Any]:
    index = plan.task_index()
    compute = {t.vertex: t for t in plan.schedule.tasks if t.vertex is not None}
    xs: list[float | None] = []
    ys: list[str | None] = []
    texts: list[str | None] = []
    chosen = sorted(plan.crossings, key=lambda c: -c.total_s)[:MAX_CROSSING_LINES]
    for c in chosen:
        pts: list[tuple[float, str]] = []
        src = compute.get(c.src_vertex) if c.src_vertex else None
        if src is not None:
            pts.append((src.end_s, _row_of(src, lanes)))
        for name in c.tasks:
            t = index.get(name)
            if t is not None:
                pts += [(t.start_s, _row_of(t, lanes)), (t.end_s, _row_of(t, lanes))]
        dst = compute.get(c.dst_vertex) if c.dst_vertex else None
        if dst is not None:
            pts.append((dst.start_s, _row_of(dst, lanes)))
        if len(pts) < 2:
            continue
        hover = (f"<b>{label(c.key)}</b><br>{label(c.src_device)} -> {label(c.dst_device)}, "
                 f"{fmt_bytes(c.nbytes)}, {fmt_s(c.total_s)}")
        for x, y in pts:
            xs.append(round(x * k, 9))
            ys.append(label(y))
            texts.append(hover)
        xs.append(None)
        ys.append(None)
        texts.append(None)
    return {"type": "scatter", "mode": "lines+markers", "name": "crossing edges", "x": xs,
            "y": ys, "text": texts, "hovertemplate": "%{text}<extra></extra>",
            "line": {"color": "rgba(20,20,20,0.55)", "width": 1.2},
            "marker": {"size": 4, "color": "rgba(20,20,20,0.7)"}}


def memory_figure(plan: Any) -> Figure:
    """Memory held over time per device and tier (the plan's timelines, an upper envelope)
    with each tier's capacity dashed; pools of tiers that are one memory as their own line."""
    span = plan.makespan_s or max((t.end_s for t in plan.schedule.tasks), default=1e-9)
    unit, k = time_unit(span)
    data: list[dict[str, Any]] = []
    series: list[tuple[str, Any]] = []
    for dev, tiers in plan.memory.devices.items():
        for tier_name, rec in tiers.items():
            if rec.peak_bytes > 0 or rec.checked:
                series.append((f"{dev}/{tier_name}", rec))
    for pool in plan.memory.pools:
        series.append((f"pool {pool.resource}", pool))
    for i, (name, rec) in enumerate(series):
        color = COLORS[i % len(COLORS)]
        pts = [(t, b) for t, b in rec.timeline if b > 0]
        data.append({"type": "scatter", "mode": "lines", "name": label(name),
                     "legendgroup": label(name), "line": {"shape": "hv", "color": color},
                     "x": [round(t * k, 9) for t, _ in pts], "y": [b for _, b in pts],
                     "hovertemplate": f"{label(name)}: %{{y:.4s}}B at %{{x:.4g}} {unit}"
                                      "<extra></extra>"})
        data.append({"type": "scatter", "mode": "lines", "name": f"{label(name)} capacity",
                     "legendgroup": label(name), "showlegend": False,
                     "line": {"dash": "dash", "color": color},
                     "x": [0, round(span * k, 9)], "y": [rec.capacity_bytes] * 2,
                     "hovertemplate": f"{label(name)} capacity {fmt_bytes(rec.capacity_bytes)}"
                                      "<extra></extra>"})
    layout = {"height": 420, "xaxis": {"title": {"text": f"time ({unit})"}},
              "yaxis": {"title": {"text": "bytes held (log)"}, "type": "log"},
              "legend": {"orientation": "h", "y": -0.25}}
    peaks = "; ".join(f"{n} peak {fmt_bytes(r.peak_bytes)} of {fmt_bytes(r.capacity_bytes)}"
                      for n, r in series[:12])
    return Figure("Memory over time per device and tier (dashed: capacity)", data, layout,
                  peaks + ("" if plan.memory.feasible else "; DOES NOT FIT"))


def roofline_figure(plan: Any) -> Figure | None:
    """The placed compute tasks on each device's roofline: arithmetic intensity (FLOPs per
    byte moved, from the cost model's assumptions) against achieved FLOP/s (FLOPs over the
    task's scheduled time); the roof is min(peak, bandwidth x intensity) per device and
    precision. None when no task states its FLOPs and bytes."""
    pts: dict[str, list[tuple[float, float, float, str]]] = defaultdict(list)
    roofs: dict[tuple[str, str], tuple[float, float]] = {}
    for t in plan.schedule.tasks:
        a = t.assumptions
        flops, nbytes = a.get("flops"), a.get("bytes")
        dur = t.end_s - t.start_s
        if t.kind.value != "compute" or not isinstance(flops, float | int) \
                or not isinstance(nbytes, float | int) or flops <= 0 or nbytes <= 0 or dur <= 0:
            continue
        pts[t.device].append((flops / nbytes, flops / dur, dur, t.name))
        peak, bw = a.get("peak_flops_per_s"), a.get("bandwidth_bytes_per_s")
        if isinstance(peak, float | int) and isinstance(bw, float | int) and peak > 0 and bw > 0:
            key = (t.device, str(a.get("dtype", "")))
            old = roofs.get(key, (0.0, 0.0))
            roofs[key] = (max(old[0], float(peak)), max(old[1], float(bw)))
    if not pts:
        return None
    total = sum(len(v) for v in pts.values())
    keep = sorted((p for v in pts.values() for p in v), key=lambda p: -p[2])
    cut = keep[MAX_ROOFLINE_POINTS - 1][2] if total > MAX_ROOFLINE_POINTS else 0.0
    xs = [p[0] for v in pts.values() for p in v]
    lo, hi = min(xs) / 4, max(xs) * 4
    if roofs:
        lo = min(lo, min(p / b for p, b in roofs.values()) / 4)
        hi = max(hi, max(p / b for p, b in roofs.values()) * 4)
    grid = [lo * (hi / lo) ** (i / 60) for i in range(61)]
    data: list[dict[str, Any]] = []
    devices = list(pts)
    for (dev, dtype), (peak, bw) in sorted(roofs.items()):
        color = COLORS[devices.index(dev) % len(COLORS)] if dev in devices else "#444"
        data.append({"type": "scatter", "mode": "lines", "name": label(f"{dev} {dtype} roof"),
                     "x": grid, "y": [min(peak, bw * x) for x in grid],
                     "line": {"color": color, "dash": "dot"},
                     "hovertemplate": f"{label(dev)} {label(dtype)}: peak "
                                      f"{fmt_num(peak)} FLOP/s, {fmt_bytes(bw)}/s<extra></extra>"})
    for i, dev in enumerate(devices):
        shown = [p for p in pts[dev] if p[2] >= cut]
        data.append({"type": "scatter", "mode": "markers", "name": label(f"{dev} ops"),
                     "x": [p[0] for p in shown], "y": [p[1] for p in shown],
                     "text": [f"{label(p[3])}: {fmt_s(p[2])}" for p in shown],
                     "marker": {"color": COLORS[i % len(COLORS)], "size": 7, "opacity": 0.75},
                     "hovertemplate": "%{text}<br>%{x:.3g} FLOP/B, %{y:.3s}FLOP/s"
                                      "<extra></extra>"})
    shown_n = sum(len(d["x"]) for d in data if d.get("mode") == "markers")
    layout = {"height": 460, "xaxis": {"type": "log", "title": {"text": "FLOPs per byte"}},
              "yaxis": {"type": "log", "title": {"text": "achieved FLOP/s"}},
              "legend": {"orientation": "h", "y": -0.25}}
    note = f"{shown_n} of {total} compute tasks" + (
        f" (the {shown_n} longest)" if shown_n < total else "")
    return Figure("Roofline with the placed ops", data, layout, note)
