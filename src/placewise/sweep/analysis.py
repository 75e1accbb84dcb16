"""What a sweep's cells add up to: the fit matrix, the curves, the regret matrix and the
working-set sensitivity. Pure functions of the cell records (``placewise.sweep.cells``);
the package docstring gives the JSON of each.

A *group* is the cells of one model, platform, shape, objective and precision: they differ
only in the batch.

- ``fit_matrix``: per model and platform, the cell with the highest throughput among those
  that fit in memory and meet the latency SLO (every fitting cell without an SLO); ties go
  to the smaller batch, then the sweep's order. A model and platform with no such cell
  says why (the memory of its smallest batch, or the lowest latency against the SLO).
- ``curves``: per group, latency and throughput over batch.
- ``regret``: per group, ``regret[i][j] = (s(p_i, b_j) - s(p_j, b_j)) / s(p_j, b_j)``, where
  ``p_i`` is the plan chosen at batch ``b_i``, ``s(p, b)`` its score re-evaluated at ``b``
  (latency for the latency objective, the pipeline period for throughput) and ``p_j`` the
  plan chosen at ``b_j``; ``None`` where either plan is missing or ``p_i`` does not fit at
  ``b_j``. The diagonal is 0 (a plan re-evaluated at its own batch reproduces itself, which
  ``PlanService`` checks). Off the diagonal the regret is >= 0 whenever the search at
  ``b_j`` found the best placement among those it compares with; a negative entry says the
  plan chosen at ``b_i`` is better at ``b_j`` than the one searched there (a heuristic
  search, or one that the time limit cut short): ``negative`` counts them.
- ``sensitivity``: per group, peak memory per tier over batch for the plan chosen at the
  largest batch that fits, re-evaluated at every batch; ``edge`` is the largest batch at
  which it fits when a larger one does not (None: it fits at every batch swept, or at
  none); past it, each point carries the applied suggestion. For a model with a ``seq``
  option swept with ``--seq``, the same over sequence length for the plan chosen at the
  group's first batch.

>>> cells = [{"model": "m", "platform": "p", "shape": None, "objective": "latency",
...           "precision": "KEEP", "batch": b, "fits": True, "latency_s": 0.001 * b,
...           "throughput_rps": 1000.0, "energy": None, "reason": None,
...           "at_batches": [{"batch": c, "score_s": 0.001 * c * (1 if c == b else 1.5),
...                           "latency_s": 0.001 * c, "fits": True}
...                          for c in (1, 2)]} for b in (1, 2)]
>>> regret_matrices(cells)[0]["regret"]
[[0.0, 0.5], [0.5, 0.0]]
>>> fit_matrix(cells, ["m"], ["p"], 0.0015)["cells"][0]["best_batch"]
1
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from placewise.sweep.cells import cell_key
from placewise.units import format_seconds

__all__ = ["curves", "fit_matrix", "groups", "regret_matrices", "sensitivity"]

Cell = Mapping[str, Any]


def groups(cells: Sequence[Cell]) -> list[list[Cell]]:
    """The cells grouped by everything but the batch (first-seen order), each by batch."""
    out: dict[tuple[Any, ...], list[Cell]] = {}
    for c in cells:
        out.setdefault(cell_key(c), []).append(c)
    return [sorted(g, key=lambda c: int(c["batch"])) for g in out.values()]


def _head(g: Sequence[Cell]) -> dict[str, Any]:
    c = g[0]
    return {"model": c["model"], "platform": c["platform"], "shape": c["shape"],
            "objective": c["objective"], "precision": c["precision"]}


def _requests_per_j(c: Cell) -> float | None:
    e = c.get("energy")
    if not e or not e.get("available", False):
        return None
    v = e.get("requests_per_j")
    return None if v is None else float(v)


def fit_matrix(cells: Sequence[Cell], models: Sequence[str], platforms: Sequence[str],
               slo_s: float | None) -> dict[str, Any]:
    """The workload fit matrix (module docstring)."""
    rows = []
    for model in models:
        for platform in platforms:
            mine = [c for c in cells if c["model"] == model and c["platform"] == platform]
            rows.append(_fit_cell(model, platform, mine, slo_s))
    return {"models": list(models), "platforms": list(platforms), "slo_s": slo_s,
            "cells": rows}


def _fit_cell(model: str, platform: str, mine: Sequence[Cell], slo_s: float | None
              ) -> dict[str, Any]:
    row: dict[str, Any] = {"model": model, "platform": platform, "fits": False,
                           "best_batch": None, "latency_s": None, "throughput_rps": None,
                           "requests_per_j": None, "energy_per_request_j": None,
                           "objective": None, "shape": None, "precision": None,
                           "reason": None}
    fitting = [c for c in mine if c["fits"]]
    ok = [c for c in fitting if slo_s is None or float(c["latency_s"]) <= slo_s]
    if ok:
        best = max(enumerate(ok), key=lambda ic: (float(ic[1]["throughput_rps"]),
                                                  -int(ic[1]["batch"]), -ic[0]))[1]
        energy = best.get("energy") or {}
        row.update({"fits": True, "best_batch": int(best["batch"]),
                    "latency_s": best["latency_s"], "throughput_rps": best["throughput_rps"],
                    "requests_per_j": _requests_per_j(best),
                    "energy_per_request_j": energy.get("energy_per_request_j")
                    if energy.get("available") else None,
                    "objective": best["objective"], "shape": best["shape"],
                    "precision": best["precision"]})
        return row
    if not mine:
        row["reason"] = "no cell was swept"
    elif fitting:
        fast = min(fitting, key=lambda c: (float(c["latency_s"]), int(c["batch"])))
        row["reason"] = (f"misses the SLO: the lowest latency is "
                         f"{format_seconds(float(fast['latency_s']))} (batch {fast['batch']}, "
                         f"{fast['objective']} plan), the SLO {format_seconds(float(slo_s or 0))}")
    else:
        first = min(mine, key=lambda c: int(c["batch"]))
        row["reason"] = f"does not fit at batch {first['batch']}: {first['reason']}"
    return row


def curves(cells: Sequence[Cell]) -> list[dict[str, Any]]:
    """Latency and throughput over batch, per group."""
    out = []
    for g in groups(cells):
        head = _head(g)
        head["points"] = [{"batch": int(c["batch"]), "latency_s": c["latency_s"],
                           "throughput_rps": c["throughput_rps"], "fits": bool(c["fits"]),
                           "requests_per_j": _requests_per_j(c)} for c in g]
        out.append(head)
    return out


def regret_matrices(cells: Sequence[Cell]) -> list[dict[str, Any]]:
    """The regret matrix of every group with at least two batches (module docstring)."""
    out = []
    for g in groups(cells):
        if len(g) < 2:
            continue
        batches = [int(c["batch"]) for c in g]
        at = [{int(p["batch"]): p for p in c.get("at_batches", [])} if c["fits"] else {}
              for c in g]
        own = [at[j].get(b, {}).get("score_s") for j, b in enumerate(batches)]
        regret: list[list[float | None]] = []
        regret_s: list[list[float | None]] = []
        latency: list[list[float | None]] = []
        score: list[list[float | None]] = []
        negative = 0
        for i in range(len(g)):
            r_row: list[float | None] = []
            rs_row: list[float | None] = []
            l_row: list[float | None] = []
            s_row: list[float | None] = []
            for j, b in enumerate(batches):
                p = at[i].get(b)
                s = None if p is None or not p.get("fits") else p.get("score_s")
                l_row.append(None if p is None else p.get("latency_s"))
                s_row.append(s)
                ref = own[j]
                if s is None or ref is None or ref <= 0:
                    r_row.append(None)
                    rs_row.append(None)
                    continue
                d = 0.0 if i == j else float(s) - float(ref)
                r_row.append(d / float(ref))
                rs_row.append(d)
                negative += d < 0
            regret.append(r_row)
            regret_s.append(rs_row)
            latency.append(l_row)
            score.append(s_row)
        head = _head(g)
        head.update({"batches": batches, "regret": regret, "regret_s": regret_s,
                     "latency_s": latency, "score_s": score, "negative": negative,
                     "score": "latency_s" if head["objective"] == "latency" else "period_s"})
        out.append(head)
    return out


def _edge(points: Sequence[Mapping[str, Any]]) -> tuple[Any, Any]:
    fits = [p for p in points if p.get("fits")]
    unfit = [p for p in points if not p.get("fits")]
    if not fits or not unfit:
        return None, (unfit[0]["value"] if unfit else None)
    first_unfit = min(p["value"] for p in unfit)
    below = [p["value"] for p in fits if p["value"] < first_unfit]
    return (max(below) if below else None), first_unfit


def sensitivity(cells: Sequence[Cell]) -> list[dict[str, Any]]:
    """Working-set sensitivity over batch (and sequence length), per group."""
    out = []
    for g in groups(cells):
        fitting = [c for c in g if c["fits"]]
        head = _head(g)
        if fitting:
            ref = fitting[-1]
            points = [_sens_point(p) for p in ref.get("at_batches", [])]
            note = (f"the plan chosen at batch {ref['batch']} (the largest that fits) "
                    f"re-evaluated at each batch")
        else:
            ref = None
            points = [{"value": int(c["batch"]), "peak_bytes": c["peak_bytes"],
                       "capacity_bytes": c["capacity_bytes"], "fits": False,
                       "latency_s": None, "applied": None} for c in g]
            note = "no plan fits at any batch: the peaks are what the search reported"
        edge, first_unfit = _edge(points)
        out.append({**head, "axis": "batch", "plan_batch": None if ref is None else
                    int(ref["batch"]), "edge": edge, "first_unfit": first_unfit,
                    "note": note, "points": points})
        first = g[0]
        if first["fits"] and first.get("at_seqs"):
            points = [_sens_point(p) for p in first["at_seqs"]]
            edge, first_unfit = _edge(points)
            out.append({**head, "axis": "seq", "plan_batch": int(first["batch"]),
                        "edge": edge, "first_unfit": first_unfit,
                        "note": f"the plan chosen at batch {first['batch']} evaluated on the "
                                f"model at each sequence length", "points": points})
    return out


def _sens_point(p: Mapping[str, Any]) -> dict[str, Any]:
    return {"value": p.get("value", p.get("batch")), "peak_bytes": p.get("peak_bytes", {}),
            "capacity_bytes": p.get("capacity_bytes", {}), "fits": bool(p.get("fits")),
            "latency_s": p.get("latency_s"), "throughput_rps": p.get("throughput_rps"),
            "applied": p.get("applied"), "error": p.get("error")}
