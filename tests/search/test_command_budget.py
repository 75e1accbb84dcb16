"""The ``plan`` command's wall-clock budget (``CommandBudget``): the limit covers loading,
the search and a reserve for building and writing the plan; the default grows with the
graph and is printed. Time is injected, never measured: nothing here depends on how fast
the machine is (the bound itself is measured by ``benchmarks/search.py --suite cli``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import placewise.search.api as api
from placewise.errors import InputError
from placewise.graph.taskgraph import generate
from placewise.io import atomic_write_json
from placewise.search import plan_search
from placewise.search.api import CommandBudget, default_time_limit_s, finish_reserve_s
from tests.search.helpers import task_problem, three_devices


class Clock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_the_default_limit_and_the_reserve_grow_with_the_graph() -> None:
    sizes = [100, 1_000, 10_000, 100_000]
    limits = [default_time_limit_s(n) for n in sizes]
    reserves = [finish_reserve_s(n) for n in sizes]
    assert limits == sorted(limits) and reserves == sorted(reserves)
    assert limits[2] == pytest.approx(api.DEFAULT_LIMIT_BASE_S + 1e4 * api.DEFAULT_LIMIT_OP_S)
    # the reserve follows the measured speed (twice as slow: twice the reserve)
    assert finish_reserve_s(10_000, speed=2 * api.PRIOR_SPEED) == pytest.approx(2 * reserves[2])


def test_the_search_gets_what_loading_and_the_reserve_leave() -> None:
    clock = Clock()
    b = CommandBudget(20.0, ops=10_000, start=97.0, clock=clock, least_s=0.5)  # 3 s loading
    limit, work, reserve = b.search_limits()
    assert reserve == b.reserve_s == finish_reserve_s(10_000) > 0
    assert limit == pytest.approx(20.0 - 3.0)  # what is left, the reserve inside it
    assert limit - reserve == pytest.approx(20.0 - 3.0 - b.reserve_s)
    # a command that searches twice gives each search half of what is left
    half = b.search_limits(0.5)
    assert half[0] - half[2] == pytest.approx((limit - reserve) / 2)
    # the work budget does not depend on how long loading really took: same plan
    clock.t = 105.0
    assert b.search_limits()[1] == work
    assert work == pytest.approx(api.WORK_SHARE * (20.0 - api.LOAD_OP_S * 10_000 - reserve))


def test_loading_that_takes_the_search_time_overruns_and_says_so() -> None:
    clock = Clock()
    b = CommandBudget(10.0, ops=1_000, start=91.0, clock=clock, least_s=0.2)  # 9 s loading
    assert "loading took 9 s of the 10 s time limit" in b.overrun()
    limit, work, reserve = b.search_limits()
    assert limit - reserve == pytest.approx(work)  # the search still gets its work budget
    assert "overruns" in b.text()


def test_a_limit_that_cannot_hold_the_least_search_and_the_reserve_is_refused() -> None:
    b = CommandBudget(1.0, ops=10_000, start=100.0, clock=Clock(), least_s=0.5)
    err = b.too_short()
    assert isinstance(err, InputError)
    text = str(err)
    assert text.startswith("--time-limit: 1 s is too short for 10000 ops")
    assert f"give --time-limit {int(0.5 + b.reserve_s) + 1} or more" in text
    assert CommandBudget(60.0, ops=10_000, start=0.0, clock=Clock(), least_s=0.5
                         ).too_short() is None


def test_the_default_is_raised_to_fit_the_least_search_and_printed_as_such() -> None:
    small = CommandBudget.make(None, ops=1_000, start=100.0, clock=Clock(), least_s=0.1)
    assert small.default and not small.raised
    assert small.limit_s == default_time_limit_s(1_000)
    assert small.text().startswith(f"time limit {default_time_limit_s(1_000):g} s (the "
                                   f"default for 1000 ops: ")
    big = CommandBudget.make(None, ops=1_000, start=100.0, clock=Clock(), least_s=30.0)
    assert big.raised and big.limit_s >= 1.5 * 30.0 + big.reserve_s
    assert "raised to fit the least search" in big.text()
    given = CommandBudget.make(7.0, ops=1_000, start=100.0, clock=Clock())
    assert not given.default and given.limit_s == 7.0 and "default" not in given.text()
    with pytest.raises(InputError, match="--time-limit"):
        CommandBudget.make(-1.0, ops=10, start=0.0)


def test_plan_search_keeps_the_reserve_out_of_its_time() -> None:
    prob = task_problem("chain", 60, 1, three_devices())
    need = api.minimum_time_s(prob)
    plan_search(prob, strategy="greedy", time_limit_s=need * 4 + 1.0)
    with pytest.raises(InputError, match=r"kept for after the search.*give --time-limit"):
        plan_search(prob, strategy="greedy", time_limit_s=need * 4 + 1.0, reserve_s=1e3)


def test_the_tracker_reports_each_better_plan() -> None:
    prob = task_problem("layered", 40, 2, three_devices())
    seen: list[tuple[str, float]] = []
    r = plan_search(prob, strategy="auto", time_limit_s=5.0,
                    on_best=lambda label, s: seen.append((label, s)))
    assert seen, "the first plan scored is reported"
    values = [s for _, s in seen]
    assert values == sorted(values, reverse=True) and len(set(values)) == len(values)
    assert values[-1] == pytest.approx(r.best.score(r.objective))


def test_the_plan_command_prints_its_default_budget_and_times_itself(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from placewise.cli import main

    graph = tmp_path / "g.json"
    atomic_write_json(str(graph), generate("chain", 30, seed=0))
    with pytest.raises(SystemExit) as exc:
        main(["plan", str(graph), "--hw", "h100-sxm-server", "--strategy", "greedy",
              "--out", str(tmp_path / "p.json")])
    assert exc.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("time limit ") and "the default for 30 ops" in lines[0]
    assert "kept to build and write the plan" in " ".join(lines[:3])
    with pytest.raises(SystemExit):
        main(["plan", str(graph), "--hw", "h100-sxm-server", "--strategy", "greedy",
              "--time-limit", "30", "--json", "--out", str(tmp_path / "q.json")])
    timing = json.loads(capsys.readouterr().out)["timing"]
    assert timing["time_limit_s"] == 30.0 and timing["default_limit"] is False
    for key in ("load_s", "search_s", "build_s", "write_s", "reserve_s", "total_s"):
        assert timing[key] >= 0.0, key
