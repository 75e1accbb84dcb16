"""The plan's tables: a summary, the crossing edges with their costs (the costliest
``MAX_CROSSINGS``), the search record (what was tried and pruned) and the mapping sheet
(``placewise.report.sheet``, the first ``MAX_SHEET_ROWS`` ops). Each says how many rows it
left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from placewise.report.model import Table, fmt_bytes, fmt_num, fmt_s, label

__all__ = ["MAX_CROSSINGS", "MAX_SHEET_ROWS", "crossing_table", "search_tables", "sheet_table",
           "summary_table", "workload_table"]

MAX_CROSSINGS = 200
MAX_SHEET_ROWS = 500


def summary_table(plan: Any) -> Table:
    fp = plan.fingerprints
    rows = [["model", plan.model], ["graph", plan.graph_name],
            ["machine", plan.machine.name], ["objective", plan.objective.value],
            ["batch", str(plan.batch)], ["strategy", plan.strategy],
            ["devices used", ", ".join(plan.devices_used())],
            ["ops / vertices / tasks",
             f"{len(plan.ops)} / {len(plan.regions)} / {len(plan.schedule.tasks)}"],
            ["latency (predicted)", fmt_s(plan.predicted_latency_s)
             + ("" if plan.exact else " (lower bound)")],
            ["throughput (predicted)", f"{fmt_num(plan.throughput_rps)} req/s, bottleneck "
                                       f"{plan.bottleneck_resource}"],
            ["lower bound", f"{fmt_s(plan.lower_bound_s)} ({plan.bounds.binding})"],
            ["memory", "fits" if plan.memory.feasible else "DOES NOT FIT"],
            ["crossing edges", str(len(plan.crossings))],
            ["fingerprints", f"graph {fp.graph}, machine {fp.machine}, cost model "
                             f"{fp.calibration}"],
            ["made by", plan.created_by]]
    rows += [["note", n] for n in plan.notes]
    return Table("The plan", ["", ""], [[label(a), label(b)] for a, b in rows])


def workload_table(plan: Any) -> Table | None:
    """A workload plan's models, one row each: devices, latency beside the others and
    alone, what shared bandwidth added, its stream and objective (None: one model)."""
    if plan.workload is None:
        return None
    rows = []
    for m in plan.workload.models:
        slo = "-" if m.slo_p99_s is None else fmt_s(m.slo_p99_s)
        rows.append([label(m.name), label(m.ref), ", ".join(m.devices), str(m.ops),
                     fmt_s(m.latency_s),
                     "-" if m.alone_latency_s is None else fmt_s(m.alone_latency_s),
                     fmt_s(m.contention_s),
                     "-" if m.rate_per_s is None else f"{fmt_num(m.rate_per_s)}/s",
                     str(m.priority), slo])
    return Table("Models (a request of each at once)",
                 ["model", "ref", "devices", "ops", "latency", "alone", "contention", "rate",
                  "priority", "slo p99"], rows)


def crossing_table(plan: Any) -> Table:
    rows = []
    chosen = sorted(plan.crossings, key=lambda c: -c.total_s)
    for c in chosen[:MAX_CROSSINGS]:
        kept = c.kept
        keep = "-"
        if kept is not None:
            keep = (f"{kept.reason}" if kept.reason else
                    f"{kept.vertex} on {kept.device}: {fmt_s(kept.cost_s)} "
                    f"({'+' if (kept.delta_s or 0) >= 0 else ''}{fmt_s(kept.delta_s)})")
        rows.append([c.tensor, f"{c.src_vertex or 'input'} ({c.src_device}, {c.src_rep})",
                     f"{c.dst_vertex or 'output'} ({c.dst_device}, {c.dst_rep})",
                     fmt_bytes(c.nbytes), ", ".join(c.links) or "-", fmt_s(c.transfer_s),
                     fmt_s(c.conversion_s), fmt_s(c.sync_s), fmt_s(c.contention_s),
                     fmt_s(c.total_s), keep])
    return Table("Crossing edges, costliest first",
                 ["tensor", "from", "to", "bytes", "links", "transfer", "conversion", "sync",
                  "contention", "total", "kept on one device instead"],
                 [[label(x) for x in r] for r in rows],
                 left_out=max(0, len(chosen) - MAX_CROSSINGS))


def search_tables(plan: Any) -> list[Table]:
    s = plan.search
    if s is None:
        return []
    head = [["strategy", s.strategy], ["chosen", s.chosen or "-"],
            ["candidates evaluated", str(s.candidates_evaluated)],
            ["estimates", str(s.estimates)], ["lower bound", fmt_s(s.lower_bound_s)],
            ["precisions searched", ", ".join(s.dtypes) or "-"]]
    if s.cpsat_status is not None:
        head.append(["CP-SAT", f"{s.cpsat_status}, bound {fmt_s(s.cpsat_bound_s)}, gap "
                               f"{fmt_num(s.gap)}"])
    head += [[f"pruned: {k}", f"{n}" + (f" (e.g. {'; '.join(s.pruned_examples.get(k, ())[:2])})"
                                        if s.pruned_examples.get(k) else "")]
             for k, n in s.pruned.items()]
    head += [["note", n] for n in s.notes]
    tables = [Table("Search record", ["", ""], [[label(a), label(b)] for a, b in head])]
    cand = [("tried", c) for c in s.alternatives] + [("baseline", c) for c in s.baselines]
    if cand:
        rows = [[kind, c.label, fmt_s(c.objective_s), "yes" if c.feasible else "no",
                 fmt_s(c.makespan_s), fmt_s(c.period_s), fmt_num(c.throughput_rps), c.note]
                for kind, c in cand[:MAX_CROSSINGS]]
        tables.append(Table("Candidates and baselines",
                            ["", "label", "objective", "fits", "makespan", "period",
                             "throughput", "note"], [[label(x) for x in r] for r in rows],
                            left_out=max(0, len(cand) - MAX_CROSSINGS)))
    return tables


def sheet_table(rows: list[Any], columns: tuple[str, ...] | list[str]) -> Table:
    """The mapping sheet (``mapping_sheet`` rows, ``SheetRow.to_json()``), capped."""
    shown = []
    for r in rows[:MAX_SHEET_ROWS]:
        d: Mapping[str, Any] = r.to_json() if hasattr(r, "to_json") else r
        shown.append([_cell(d.get(c)) for c in columns])
    return Table("Mapping sheet: operator to kernel", list(columns), shown,
                 left_out=max(0, len(rows) - MAX_SHEET_ROWS))


def _cell(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return fmt_s(x) if x < 1e3 else fmt_num(x)
    if isinstance(x, dict):
        return label(", ".join(f"{k}={v}" for k, v in x.items()))
    return label(x)
