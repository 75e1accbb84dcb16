"""``build_report(inputs)``: the report's sections from what was given, and the HTML page.

Sections appear only when their inputs are present; the page lists what is absent and
what would add it. With a plan: its summary, the schedule (Gantt with crossing edges),
memory over time, the roofline, MFU and memory-bound fraction by layer type
(``placewise.utilization``), the crossing edges, the search record and the mapping sheet
(``placewise.report.sheet``). With a validation: predicted against measured, by step and by
term. With a serve result: latency percentiles and batch sizes. With a sweep: the fit
matrix, latency-throughput curves, regret matrices, energy, working-set sensitivity and the
cells. With a closed-loop file: the adaptation gain, prediction error before and after
recalibration, drift, padding, actions and tags per phase (``placewise.report.loop_figures``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from placewise.errors import PlacewiseError
from placewise.report import loop_figures as lf
from placewise.report import plan_figures as pf
from placewise.report import plan_tables as pt
from placewise.report import result_figures as rf
from placewise.report import sweep_figures as sf
from placewise.report.inputs import ReportInputs
from placewise.report.model import Figure, Section
from placewise.report.page import render_page
from placewise.report.sheet import SHEET_COLUMNS, mapping_sheet
from placewise.utilization import plan_graph, plan_machine, plan_utilization

__all__ = ["SHEET_SHOWN", "Report", "build_report", "report_sections"]

# the mapping sheet's columns the report shows (the CSV of `placewise sheet` has them all)
SHEET_SHOWN = ("op", "module_path", "region", "partition", "device", "precision", "kernel",
               "assumption", "bottleneck", "predicted_s", "measured_s")

_ABSENT = {
    "plan": "the plan (a plan file from placewise plan): schedule, memory, roofline, MFU, "
            "crossing edges, search record, mapping sheet",
    "validation": "a validation (placewise validate PLAN --json > V.json): predicted against "
                  "measured, by term",
    "serve": "a serve result (placewise serve PLAN --json > S.json): latency percentiles and "
             "batch sizes under load",
    "sweep": "a sweep (placewise sweep ... --out SWEEP.json): fit matrix, latency-throughput "
             "curves, regret, energy",
}


@dataclass
class Report:
    """The report's sections, what is absent, and the page title."""

    title: str
    subtitle: str
    sections: list[Section]
    absent: list[str]

    def figures(self) -> int:
        return sum(len(s.figures) for s in self.sections)

    def html(self) -> str:
        return render_page(self.title, self.subtitle, self.sections, self.absent)


def _figs(*figs: Figure | None) -> list[Figure]:
    return [f for f in figs if f is not None]


def _plan_sections(inp: ReportInputs, graph: Any, machine: Any,
                   notes: list[str]) -> list[Section]:
    plan = inp.plan
    models = pt.workload_table(plan)
    secs = [Section("plan", "Plan", tables=[pt.summary_table(plan),
                                            *([models] if models is not None else [])]),
            Section("schedule", "Schedule", _figs(pf.gantt_figure(plan)),
                    [pt.crossing_table(plan)] if plan.crossings else [],
                    [] if plan.crossings else ["no crossing edges: every tensor stays on its "
                                               "device and representation"]),
            Section("memory", "Memory", _figs(pf.memory_figure(plan)))]
    roof = pf.roofline_figure(plan)
    secs.append(Section("roofline", "Roofline", _figs(roof), notes=[] if roof else [
        "no compute task states its FLOPs and bytes (the cost model's assumptions)"]))
    util_sec = Section("utilization", "MFU and memory-bound fraction")
    why = "the plan's model graph or machine could not be loaded"
    sheet_sec = Section("sheet", "Mapping sheet")
    try:
        graph = graph if graph is not None else plan_graph(plan, file=inp.files.get("plan"))
        machine = machine if machine is not None else plan_machine(plan,
                                                                   file=inp.files.get("plan"))
        u = plan_utilization(plan, validation=inp.validation, graph=graph, machine=machine,
                             validation_file=inp.files.get("validation")).to_json()
        util_sec.figures = _figs(rf.utilization_figure(u))
        util_sec.tables = [rf.utilization_table(u)]
    except (ImportError, PlacewiseError) as exc:
        if graph is None or machine is None:
            why = f"{why}: {_one_line(exc)}"
            graph = None
        util_sec.notes.append(f"not available: {_one_line(exc)}")
    try:
        if graph is None or machine is None:
            raise PlacewiseError(why)
        rows = mapping_sheet(plan, inp.validation, graph=graph, machine=machine,
                             validation_file=inp.files.get("validation"))
        cols = tuple(c for c in SHEET_SHOWN if c in SHEET_COLUMNS)
        sheet_sec.tables = [pt.sheet_table(rows, cols)]
        sheet_sec.notes.append("all columns: placewise sheet PLAN --out FILE.csv")
    except (ImportError, PlacewiseError) as exc:
        sheet_sec.notes.append(f"not available: {_one_line(exc)}")
    secs += [util_sec, Section("search", "Search record", tables=pt.search_tables(plan),
                               notes=[] if plan.search else ["the plan records no search"]),
             sheet_sec]
    for s in (util_sec, sheet_sec):
        if not s.figures and not s.tables:
            notes.append(f"{s.title}: {' '.join(s.notes)}")
    return secs


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _validation_section(v: Mapping[str, Any]) -> Section:
    notes = [str(n) for n in v.get("notes") or []]
    tags = v.get("tags") if isinstance(v.get("tags"), dict) else {}
    if tags:
        notes.append("measured on " + ", ".join(f"{k}={tags[k]}" for k in
                                                ("host", "cpu_model", "date", "placewise")
                                                if k in tags))
    return Section("validation", "Predicted against measured",
                   _figs(rf.step_figure(v), rf.term_figure(v)), [rf.validation_table(v)], notes)


def _serve_section(s: Mapping[str, Any]) -> Section:
    notes = [str(n) for n in (s.get("notes") or []) + (s.get("real_notes") or [])]
    return Section("serve", "Serving under load",
                   _figs(rf.percentile_figure(s), rf.batch_figure(s)), [rf.serve_table(s)], notes)


def _sweep_sections(s: Mapping[str, Any]) -> list[Section]:
    regret, r_left = sf.regret_figures(s)
    sens, s_left = sf.sensitivity_figures(s)
    energy = sf.energy_figure(s)
    secs = [Section("fit", "Workload fit matrix", _figs(sf.fit_figure(s))),
            Section("curves", "Latency against throughput", _figs(sf.curve_figure(s))),
            Section("regret", "Regret matrix", regret,
                    notes=[f"{r_left} more regret matrices not shown"] if r_left else []),
            Section("energy", "Energy", _figs(energy), notes=[] if energy else [
                "no cell has an energy estimate (the platforms have no power figures)"]),
            Section("sensitivity", "Working-set sensitivity", sens,
                    notes=[f"{s_left} more not shown"] if s_left else []),
            Section("cells", "Sweep cells", tables=[sf.cells_table(s)])]
    return [x for x in secs if x.figures or x.tables or x.notes]


def report_sections(inp: ReportInputs, *, graph: Any = None, machine: Any = None) -> Report:
    """The report of ``inp`` (``placewise.report.inputs.load_inputs``). ``graph`` and
    ``machine``: the plan's, when the caller has them (else loaded from the plan's model
    reference and machine; where that fails the MFU and the mapping sheet say so)."""
    sections: list[Section] = []
    absent = [_ABSENT[k] for k in _ABSENT if getattr(inp, k) is None]
    if inp.plan is not None:
        sections += _plan_sections(inp, graph, machine, absent)
    if inp.validation is not None:
        sections.append(_validation_section(inp.validation))
    if inp.serve is not None:
        sections.append(_serve_section(inp.serve))
    if inp.sweep is not None:
        sections += _sweep_sections(inp.sweep)
    if inp.loop is not None:
        sections += lf.loop_sections(inp.loop)
    if inp.plan is not None:
        p = inp.plan
        title = f"placewise report: {p.model} on {p.machine.name}"
        sub = (f"{p.objective.value}, batch {p.batch}, strategy {p.strategy}; inputs: "
               + ", ".join(f"{k} {v}" for k, v in inp.files.items()))
    else:
        title = "placewise report"
        if inp.loop is not None:
            title += f": the closed loop of {inp.loop.get('model')} on {inp.loop.get('machine')}"
        sub = "inputs: " + ", ".join(f"{k} {v}" for k, v in inp.files.items())
    return Report(title, sub, sections, absent)


def build_report(inputs: ReportInputs, *, graph: Any = None, machine: Any = None) -> str:
    """The report's HTML: one self-contained offline file (see ``placewise.report``)."""
    return report_sections(inputs, graph=graph, machine=machine).html()
