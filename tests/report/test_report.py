"""``placewise report``: which sections appear for which inputs, escaping of hostile labels,
results of another plan refused, bad input (exit 2, one line, no file), the size of a
report of a large plan."""

from __future__ import annotations

import json
import re
from html import escape as html_escape
from pathlib import Path
from typing import Any

import pytest

from placewise.errors import InputError
from placewise.report import build_report, load_inputs, report_sections
from placewise.report.page import CSP, plotly_js
from tests.report.conftest import cli
from tests.report.helpers import HOSTILE, sweep_doc
from tests.test_cli import assert_bad_input

Reports = dict[str, tuple[Path, dict[str, Any]]]
PLAN_SECTIONS = ["plan", "schedule", "memory", "roofline", "utilization", "search", "sheet"]


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _outside_plotly(html: str) -> str:
    js = plotly_js()
    assert html.count(js) == 1, "plotly.js must be inlined exactly once"
    return html.replace(js, "")


# ---- sections per inputs -------------------------------------------------------------------
def test_sections_follow_the_inputs(reports: Reports) -> None:
    _, plan_only = reports["plan-only"]
    assert plan_only["sections"] == PLAN_SECTIONS
    # the hostile model reference cannot be loaded: no MFU, no sheet, and it says so
    assert plan_only["figures"] == 3
    assert [a.split(":")[0] for a in plan_only["absent"][3:]] == [
        "MFU and memory-bound fraction", "Mapping sheet"]
    _, full = reports["full"]
    assert full["sections"] == [*PLAN_SECTIONS, "validation", "serve", "fit", "curves",
                                "regret", "energy", "sensitivity", "cells"]
    assert full["absent"] == []
    assert set(full["inputs"]) == {"plan", "validation", "serve", "sweep"}
    # gantt, memory, roofline, MFU; steps, terms; percentiles, batches; fit, curves, regret,
    # energy, sensitivity
    assert full["figures"] == 13
    # a sweep file written by placewise sweep itself draws every sweep figure
    _, real = reports["real-sweep"]
    assert real["sections"] == ["fit", "curves", "regret", "energy", "sensitivity", "cells"]
    assert set(real["inputs"]) == {"sweep"}
    assert real["figures"] >= 5


def test_the_page_declares_its_figures_and_says_what_is_absent(reports: Reports) -> None:
    path, answer = reports["plan-only"]
    html = _text(path)
    assert f'data-figures="{answer["figures"]}"' in html
    assert len(re.findall(r'<div class="plot" id="fig-\d+"></div>', html)) == answer["figures"]
    assert "absent: a validation" in html and "absent: a sweep" in html
    # the hostile model reference cannot be loaded: MFU and the sheet say why, not silently
    assert "MFU and memory-bound fraction: not available" in html
    assert answer["size_bytes"] == path.stat().st_size


def test_sweep_only_and_library_entry(local_files: dict[str, Path]) -> None:
    rep = report_sections(load_inputs([local_files["sweep"]]))
    assert [s.key for s in rep.sections] == ["fit", "curves", "regret", "energy",
                                             "sensitivity", "cells"]
    assert rep.figures() == 5
    assert len(rep.absent) == 1 + 2  # plan, validation, serve
    fit = rep.sections[0].figures[0].data[0]
    assert fit["z"] == [[1, 1], [0, 1]]  # the hostile model fits nowhere on orin's capacity
    html = rep.html()
    assert html == build_report(load_inputs([local_files["sweep"]]))


# ---- self-contained and escaped --------------------------------------------------------------
@pytest.mark.parametrize("name", ["plan-only", "full"])
def test_self_contained_and_inert(reports: Reports, name: str) -> None:
    html = _text(reports[name][0])
    rest = _outside_plotly(html)
    assert HOSTILE not in html
    # no element that loads anything: no img/link/iframe, no src= or href= in any tag
    assert not re.search(r"<(img|link|iframe|object|embed)\b", rest, re.I)
    assert not re.search(r"<[a-z][^>]*\s(src|href)=(?!\"#)", rest, re.I)
    assert not re.search(r"@import|url\(", rest, re.I)
    assert len(re.findall(r"<script", rest)) == 3  # plotly, the figures' JSON, the drawing
    assert len(re.findall(r"</script", rest)) == 3
    assert "<!--" not in rest
    assert f'http-equiv="Content-Security-Policy" content="{html_escape(CSP)}"' in rest
    assert "&lt;/script&gt;&lt;img src=x onerror=window.__pwned=1&gt;" in rest
    figs = re.search(r'<script id="pw-figures" type="application/json">(.*?)</script>', rest,
                     re.S)
    assert figs is not None
    data = json.loads(figs.group(1))
    assert len(data) == reports[name][1]["figures"]


def test_escaping_unit() -> None:
    from placewise.report.page import script_json

    text = script_json({"a": HOSTILE, "b": float("nan")})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"a": HOSTILE, "b": None}


# ---- results of another plan -------------------------------------------------------------------
def test_results_of_another_plan_are_refused(local_files: dict[str, Path], hostile_plan: Path,
                                             tmp_path: Path) -> None:
    for kind in ("validation", "serve"):
        with pytest.raises(InputError) as exc:
            load_inputs([hostile_plan, local_files[kind]])
        assert exc.value.file == str(local_files[kind])
        assert "another plan" in exc.value.problem
    data = json.loads(local_files["validation"].read_text())
    data["plan"].pop("fingerprint")
    old = tmp_path / "old-validation.json"
    old.write_text(json.dumps(data))
    with pytest.raises(InputError, match="no plan fingerprint") as exc:
        load_inputs([local_files["plan"], old])
    assert exc.value.file == str(old)
    # without a plan, a result is shown as it is
    assert load_inputs([local_files["serve"]]).present() == ["serve"]


def test_cli_refuses_a_mismatch_and_writes_nothing(xdg: Path, local_files: dict[str, Path],
                                                   hostile_plan: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    r = cli(xdg, "report", str(hostile_plan), str(local_files["validation"]), "--out", str(out))
    assert_bad_input(r, str(local_files["validation"]), "another plan")
    assert not out.exists() and list(tmp_path.iterdir()) == []


# ---- bad input ---------------------------------------------------------------------------------
def test_bad_inputs_exit_2_naming_the_file(xdg: Path, local_files: dict[str, Path],
                                           tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"hello": [1]}))
    notjson = tmp_path / "notes.txt"
    notjson.write_text("plan: yes\n")
    newer = tmp_path / "sweep2.json"
    newer.write_text(json.dumps({**sweep_doc(), "schema": "placewise-sweep/9"}))
    badcells = tmp_path / "sweep3.json"
    badcells.write_text(json.dumps({**sweep_doc(), "cells": {"a": 1}}))
    out = tmp_path / "out" / "r.html"
    out.parent.mkdir()
    out.write_text("old")
    cases = [([other], "is not a plan, a validation"), ([notjson], ""),
             ([newer], "placewise-sweep/9"), ([badcells], "cells"),
             ([tmp_path / "missing.json"], ""),
             ([local_files["sweep"], local_files["sweep"]], "a second sweep")]
    for inputs, needle in cases:
        r = cli(xdg, "report", *map(str, inputs), "--out", str(out))
        assert_bad_input(r, str(inputs[-1]), needle)
        assert out.read_text() == "old"  # untouched
    assert sorted(p.name for p in out.parent.iterdir()) == ["r.html"]  # no temporary left
    r = cli(xdg, "report", str(local_files["sweep"]), "--out", "/dev/null")
    assert_bad_input(r, "/dev/null")
    r = cli(xdg, "report", "--out", str(out))
    assert r.returncode == 2


def test_cli_json_answer(reports: Reports) -> None:
    path, answer = reports["full"]
    assert set(answer) == {"out", "size_bytes", "figures", "sections", "inputs", "absent",
                           "tag_mismatches"}
    assert answer["tag_mismatches"] == []  # one plan, its validation and serve: same tags
    assert answer["out"] == str(path) and answer["size_bytes"] == path.stat().st_size


# ---- a large plan ------------------------------------------------------------------------------
def test_a_large_plan_stays_small_and_aggregated(tmp_path: Path) -> None:
    """4000 generated ops across three devices (thousands of crossings): the report merges
    sub-pixel tasks, caps its tables and stays far under 20 MB."""
    from placewise.cost.load import load_cost_model
    from placewise.graph.taskgraph import generate, parse_taskgraph
    from placewise.hardware.load import load_machine
    from placewise.plan import build_plan, save_plan
    from placewise.report.plan_figures import GANTT_PIXELS, MAX_CROSSING_LINES
    from placewise.report.plan_tables import MAX_CROSSINGS
    from placewise.schedule import Assignment, Placement, Problem, evaluate
    from placewise.units import DType

    g = parse_taskgraph(generate("layered", 4000, seed=0))
    m = load_machine("h100-sxm-server")
    prob = Problem(g, None, m, load_cost_model(m, None))
    devs = ["gpu0", "gpu1", "cpu"]
    pl = Placement.of({v: Assignment(devs[(i // 50) % 3], DType.FP32)
                       for i, v in enumerate(prob.vertex_names)})
    plan = build_plan(prob, evaluate(prob, pl), model_ref="layered")
    path = tmp_path / "big.json"
    save_plan(plan, path)
    assert len(plan.ops) == 4000 and len(plan.crossings) > MAX_CROSSINGS
    rep = report_sections(load_inputs([path]), graph=g, machine=m)
    html = rep.html()
    assert len(html.encode()) < 20 * 2**20
    sched = next(s for s in rep.sections if s.key == "schedule")
    gantt = sched.figures[0]
    bars = sum(len(t["x"]) for t in gantt.data if t["type"] == "bar")
    assert "merged" in [t["name"] for t in gantt.data]
    assert bars < len(plan.schedule.tasks)
    rows = len(gantt.layout["yaxis"]["categoryarray"])
    assert bars <= rows * GANTT_PIXELS
    lines = next(t for t in gantt.data if t["name"] == "crossing edges")
    assert lines["x"].count(None) <= MAX_CROSSING_LINES
    table = sched.tables[0]
    assert len(table.rows) == MAX_CROSSINGS
    assert table.left_out == len(plan.crossings) - MAX_CROSSINGS
    assert f"{table.left_out} more rows not shown" in html
    util = next(s for s in rep.sections if s.key == "utilization")
    assert util.figures  # the task graph's MFU, from the graph given
