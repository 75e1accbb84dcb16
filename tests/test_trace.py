"""The Chrome/Perfetto trace: tracks, no overlaps, flows, counters, args, golden file."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from typing import Any

import pytest

from placewise.hardware.spec import Machine
from placewise.plan import Plan
from placewise.schedule import Problem
from placewise.schedule.testing import toy_machine
from placewise.trace import TRACE_CATEGORY, to_chrome_trace
from tests.plan_fixtures import golden, mlp_setup, toy_plan


def _events(trace: dict[str, Any], ph: str) -> list[dict[str, Any]]:
    return [e for e in trace["traceEvents"] if e["ph"] == ph]


def _ns(us: float) -> int:
    return round(us * 1000)


def _unified() -> Machine:
    """cpu and gpu share one memory: transfers run on the shared controller, not a link."""
    data = toy_machine(shared_controller=True).model_dump(mode="json")
    data["links"][0]["resource"] = "mc"
    return Machine.model_validate(data)


@pytest.fixture(scope="module", params=["plain", "shared", "lanes", "unified"])
def toy(request: pytest.FixtureRequest) -> tuple[Problem, Plan]:
    m = {"plain": toy_machine, "shared": lambda: toy_machine(shared_controller=True),
         "lanes": lambda: toy_machine(gpu_lanes=2), "unified": _unified}[request.param]()
    return toy_plan(m)


def test_one_named_track_per_resource_lane(toy: tuple[Problem, Plan]) -> None:
    _, plan = toy
    trace = to_chrome_trace(plan)
    json.dumps(trace)
    procs = {e["pid"]: e["args"]["name"] for e in _events(trace, "M")
             if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in _events(trace, "M")
               if e["name"] == "thread_name"}
    assert procs[1] == "cpu (cpu)" and procs[2] == "gpu (gpu)"
    assert ("links" in procs.values()) or ("shared resources" in procs.values())
    x = _events(trace, "X")
    assert len(x) == len(plan.schedule.tasks)
    lanes = {(t.resource, t.lane) for t in plan.schedule.tasks}
    tracks = {(e["pid"], e["tid"]) for e in x}
    assert len(tracks) == len(lanes)  # one track per lane, never shared
    assert tracks <= set(threads)
    by_name = {t.name: t for t in plan.schedule.tasks}
    for e in x:
        t = by_name[e["name"]]
        name = threads[(e["pid"], e["tid"])]
        if t.kind.value == "transfer":
            assert name.startswith(("link:pcie:", "mc lane "))
        else:
            assert name == f"compute lane {t.lane}" and procs[e["pid"]].startswith(t.device)


def test_times_in_microseconds_and_no_overlap(toy: tuple[Problem, Plan]) -> None:
    _, plan = toy
    trace = to_chrome_trace(plan)
    by_name = {t.name: t for t in plan.schedule.tasks}
    per_track: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for e in _events(trace, "X"):
        t = by_name[e["name"]]
        assert e["ts"] == pytest.approx(t.start_s * 1e6, abs=1e-3)
        assert e["dur"] == pytest.approx(t.duration_s * 1e6, abs=2e-3)
        assert e["dur"] >= 0 and e["cat"] == TRACE_CATEGORY
        per_track[(e["pid"], e["tid"])].append((_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])))
    for spans in per_track.values():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert end <= start


def test_args_carry_terms_and_interval(toy: tuple[Problem, Plan]) -> None:
    _, plan = toy
    by_name = {t.name: t for t in plan.schedule.tasks}
    for e in _events(to_chrome_trace(plan), "X"):
        t = by_name[e["name"]]
        a = e["args"]
        assert a["low_s"] == t.low_s and a["high_s"] == t.high_s
        terms = {k[:-2]: v for k, v in a.items()
                 if k.endswith("_s") and k[:-2] in {x.value for x in t.terms_s}}
        assert terms == {k.value: v for k, v in t.terms_s.items() if v}
        assert a["kind"] == t.kind.value and a["source"] == t.source.value
        assert a["critical_path"] == (t.name in plan.schedule.critical_path)
        assert a.get("deps", []) == list(t.deps)


def test_flow_arrow_per_dependency(toy: tuple[Problem, Plan]) -> None:
    _, plan = toy
    trace = to_chrome_trace(plan)
    slices = {(e["pid"], e["tid"], e["ts"]): e["name"] for e in _events(trace, "X")}
    starts = {e["id"]: e for e in _events(trace, "s")}
    ends = {e["id"]: e for e in _events(trace, "f")}
    assert starts.keys() == ends.keys()
    assert len(starts) == sum(len(t.deps) for t in plan.schedule.tasks)
    pairs = set()
    for i, s in starts.items():
        f = ends[i]
        assert f["bp"] == "e" and s["cat"] == f["cat"] == TRACE_CATEGORY
        src = slices[(s["pid"], s["tid"], s["ts"])]  # bound to the slice starting there
        dst = slices[(f["pid"], f["tid"], f["ts"])]
        pairs.add((src, dst))
    assert pairs == {(d, t.name) for t in plan.schedule.tasks for d in t.deps}


def test_memory_counters_per_tier(toy: tuple[Problem, Plan]) -> None:
    _, plan = toy
    trace = to_chrome_trace(plan)
    counters: dict[tuple[int, str], list[int]] = defaultdict(list)
    for e in _events(trace, "C"):
        counters[(e["pid"], e["name"])].append(e["args"]["bytes"])
    for i, d in enumerate(plan.machine.devices, start=1):
        for tier, u in plan.memory.devices[d.name].items():
            levels = counters[(i, f"memory {tier}")]
            assert levels == [b for _, b in u.timeline] and max(levels) == u.peak_bytes
    if plan.memory.pools:
        assert any(name.startswith("memory mc") for _, name in counters)


def test_trace_is_deterministic() -> None:
    _, p1 = toy_plan()
    _, p2 = toy_plan()
    assert json.dumps(to_chrome_trace(p1)) == json.dumps(to_chrome_trace(p2))


def test_golden_trace_mlp() -> None:
    _, plan = mlp_setup()
    golden("trace_mlp_h100.json",
           json.dumps(to_chrome_trace(plan), indent=1, sort_keys=True) + "\n")
