"""Search budgets: the time limit is a wall-clock deadline, steps that cannot be interrupted
are sized before they start, limits too short and graphs too large are refused up front.

Time is injected (a fake clock that only moves when the test says so), never measured:
nothing here depends on how fast the machine is.
"""

from __future__ import annotations

import types
from pathlib import Path

import pytest

import placewise.search.api as api
import placewise.search.result as result_mod
from placewise.errors import InputError
from placewise.graph.taskgraph import generate
from placewise.io import atomic_write_json
from placewise.schedule import Objective
from placewise.schedule.placement import Problem
from placewise.search import plan_search
from placewise.search.api import check_scale, minimum_time_s
from placewise.search.auto import Context
from placewise.search.dp import dp_search
from placewise.search.heft import heft_choice
from placewise.search.local import local_search
from placewise.search.result import Tracker
from placewise.search.space import Budget, Model, SearchSpace, SearchStopped
from tests.search.helpers import task_problem, three_devices


class FakeClock:
    """A clock that moves only when told (``advance``), or by ``step`` on every reading."""

    def __init__(self, step: float = 0.0) -> None:
        self.t = 1000.0
        self.step = step
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        self.t += self.step
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


# ---- the budget ----------------------------------------------------------------------------
def test_budget_deadline_is_wall_clock_and_says_so() -> None:
    clock = FakeClock()
    b = Budget(5.0, deadline_s=10.0, clock=clock)
    b.charge(1.0)
    assert not b.exhausted() and b.fits(1.0) and b.wall_left_s() == 10.0
    clock.advance(9.5)
    assert not b.exhausted() and not b.wall_stopped
    assert not b.fits(0.1, 1.0)  # one more second would pass the deadline
    assert b.wall_stopped  # the wall clock, not the work budget, said no
    stop = b.stop_at(0.2)
    assert not stop()  # 9.5 + 0.2 s is still before the deadline
    clock.advance(1.0)
    assert b.exhausted() and stop() and b.wall_left_s() == 0.0


def test_work_budget_ends_first_without_a_wall_stop() -> None:
    b = Budget(2.0, deadline_s=100.0, clock=FakeClock())
    assert not b.fits(2.5)  # deterministic: more work than the budget holds
    b.charge(2.0)
    assert b.exhausted() and not b.wall_stopped


def test_reserve_and_speed_size_steps() -> None:
    clock = FakeClock()
    b = Budget(100.0, deadline_s=10.0, clock=clock)
    b.calibrate(wall_s=4.0, work_s=2.0)
    assert b.speed == 2.0
    assert b.fits(4.0) and not b.fits(6.0)  # 6 s of work would take 12 s here
    b.reserve_s = 3.0
    assert not b.fits(4.0) and b.wall_left_s() == 7.0


# ---- each strategy under a deadline that passes after the first evaluation ------------------
@pytest.fixture
def deadline_after_first_evaluation(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """Every scheduler evaluation takes 100 fake seconds: the first one uses up the limit."""
    clock = FakeClock()
    real = result_mod.evaluate

    def slow(*args: object, **kw: object) -> object:
        out = real(*args, **kw)  # type: ignore[arg-type]
        clock.advance(100.0)
        return out

    monkeypatch.setattr(result_mod, "evaluate", slow)
    return clock


@pytest.mark.parametrize("strategy", ["auto", "local", "heft", "dp", "cpsat", "exhaustive",
                                      "greedy", "single:npu"])
def test_each_strategy_returns_its_best_so_far_when_the_deadline_passes(
        strategy: str, deadline_after_first_evaluation: FakeClock) -> None:
    prob = task_problem("chain", 8, 3, three_devices())
    r = plan_search(prob, strategy=strategy, time_limit_s=10.0, seed=0,
                    clock=deadline_after_first_evaluation)
    assert r.candidates_evaluated == 1  # nothing was started that could not finish
    assert r.feasible and r.wall_stopped
    assert r.time_limit_s == 10.0 and r.search_time_s >= 100.0  # the time really spent
    assert len(r.baselines) == 1 and r.chosen == r.baselines[0][0]
    # the requested baseline is scored first; else they go in order (all seemed to fit)
    assert r.chosen == (strategy if strategy in ("greedy", "single:npu") else "single:cpu")
    notes = " ".join(r.notes)
    assert "time limit" in notes and "may differ between runs" in notes
    assert "skipped" in notes  # the baselines (and steps) it could not start


def test_baselines_that_cannot_all_fit_start_with_the_best_single_device(
        deadline_after_first_evaluation: FakeClock) -> None:
    clock = deadline_after_first_evaluation
    prob = task_problem("chain", 8, 3, three_devices())
    sp = SearchSpace(prob)
    tr = Tracker(prob, Objective.LATENCY, Budget(1e6, deadline_s=250.0, clock=clock))
    tr.evaluate(sp.placement([0] * sp.n))  # measured: an evaluation takes 100 s
    ctx = Context(sp, Model(sp), tr, seed=0)
    ctx.baselines()
    # 150 s left: one more evaluation fits, and it goes to the fastest device
    assert [b for b, _ in tr.baselines] == ["single:gpu"]
    assert any(n.startswith("baselines single:cpu, single:npu, greedy: skipped: it would not "
                            "finish before the time limit") for n in tr.notes)


def test_with_time_enough_nothing_is_skipped() -> None:
    prob = task_problem("chain", 8, 3, three_devices())
    r = plan_search(prob, strategy="heft", time_limit_s=60.0, work_limit_s=5.0,
                    clock=FakeClock())
    assert [b for b, _ in r.baselines] == ["single:cpu", "single:gpu", "single:npu", "greedy"]
    assert r.chosen == "heft" and not r.wall_stopped
    assert not any("skipped" in n or "time limit" in n for n in r.notes)
    assert r.work_budget_s == 5.0


# ---- loops watch the deadline ----------------------------------------------------------------
def test_local_search_loop_stops_at_the_deadline() -> None:
    prob = task_problem("layered", 30, 4, three_devices())
    sp = SearchSpace(prob)
    model = Model(sp)
    clock = FakeClock(step=0.01)  # every reading of the clock moves it 10 ms
    budget = Budget(1e6, deadline_s=5.0, clock=clock)  # the work budget never ends it
    tr = Tracker(prob, Objective.LATENCY, budget)
    start = [0] * sp.n
    tr.evaluate(sp.placement(start))
    out = local_search(model, tr, [("start", start)], seed=0, exact_max=0, max_stale=10**9)
    assert out.proposed > 0 and budget.wall_stopped and budget.used_s < budget.limit_s
    assert clock.t - budget.start < 5.0 + 1.0  # stopped at the deadline, not long after


def test_heft_dp_and_costing_give_up_when_told() -> None:
    prob = task_problem("chain", 300, 1, three_devices())
    model = Model(SearchSpace(prob))
    with pytest.raises(SearchStopped, match="heft stopped after placing 0 of 300"):
        heft_choice(model, stop=lambda: True)
    with pytest.raises(SearchStopped, match="dp stopped"):
        dp_search(model, stop=lambda: True)
    calls = []

    def later(queries: int) -> bool:
        calls.append(queries)
        return len(calls) > 1

    with pytest.raises(SearchStopped, match="costing stopped after 256 of 300") as exc:
        SearchSpace(prob, stop=later)
    assert (exc.value.done, exc.value.total) == (256, 300)
    assert calls == [0, 256 * 4]  # told the cost-model queries so far (4 per vertex)
    # without a stop they finish
    assert len(heft_choice(model, stop=lambda: False)) == 300


# ---- limits too short: refused, naming what is needed --------------------------------------
def test_a_limit_below_the_least_search_is_refused_up_front() -> None:
    prob = task_problem("chain", 600, 2, three_devices())
    need = minimum_time_s(prob)
    assert need > 0
    clock = FakeClock()
    with pytest.raises(InputError, match=r"--time-limit: .* too short for 600 vertices: "
                                         r"costing every vertex .* give --time-limit \d+"):
        plan_search(prob, time_limit_s=need / 2, clock=clock)
    assert clock.reads <= 1  # refused before any work


def test_costing_that_reaches_the_deadline_is_refused_with_its_measured_need(
        monkeypatch: pytest.MonkeyPatch) -> None:
    prob = task_problem("chain", 600, 2, three_devices())
    clock = FakeClock()
    real = Problem.cost

    def slow_cost(self: Problem, *args: object, **kw: object) -> object:
        clock.advance(0.1)  # each cost-model query takes 100 fake ms
        return real(self, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Problem, "cost", slow_cost)
    with pytest.raises(InputError) as exc:
        plan_search(prob, time_limit_s=60.0, clock=clock)
    msg = str(exc.value)
    assert msg.startswith("--time-limit: 60 s is too short for 600 vertices on this machine")
    assert "deadline after 256 of 600 vertices" in msg and "give --time-limit" in msg
    need = int(msg.rsplit("give --time-limit ", 1)[1].split()[0])
    assert need > 60  # it names what the whole costing would take


# ---- graphs too large for the memory: refused before anything large is built ----------------
def test_check_scale_names_the_limit_and_why() -> None:
    check_scale(1000, available_bytes=1000 * api.PLAN_BYTES_PER_OP)  # fits exactly
    with pytest.raises(InputError) as exc:
        check_scale(1_000_000, available_bytes=8 << 30, file="g.json")
    msg = str(exc.value)
    assert msg.startswith("g.json: graph size: 1000000 ops is more than this machine can plan")
    assert "128.00 KiB per op" in msg and "8.00 GiB is available" in msg
    assert msg.endswith(f"about {(8 << 30) // api.PLAN_BYTES_PER_OP} ops")


def _little_memory(monkeypatch: pytest.MonkeyPatch, available: int) -> None:
    fake = types.SimpleNamespace(
        virtual_memory=lambda: types.SimpleNamespace(available=available))
    monkeypatch.setattr(api, "psutil", fake)


def test_plan_search_refuses_a_problem_too_large_for_the_memory(
        monkeypatch: pytest.MonkeyPatch) -> None:
    prob = task_problem("chain", 50, 0, three_devices())
    _little_memory(monkeypatch, 10 * api.SEARCH_BYTES_PER_VERTEX)
    with pytest.raises(InputError, match=r"graph size: 50 ops is more than this machine can "
                                         r"search in memory.*about 10 ops"):
        plan_search(prob, time_limit_s=10.0)


def test_cli_plan_refuses_a_graph_too_large_for_the_memory(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    from placewise.cli import main

    graph = tmp_path / "g.json"
    atomic_write_json(str(graph), generate("layered", 64, seed=0))
    out = tmp_path / "plan.json"
    _little_memory(monkeypatch, 8 * api.PLAN_BYTES_PER_OP)
    with pytest.raises(SystemExit) as exc:
        main(["plan", str(graph), "--hw", "h100-sxm-server", "--time-limit", "5",
              "--out", str(out)])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    assert err[0].startswith(f"{graph}: graph size: 64 ops is more than this machine can plan")
    assert err[0].endswith("about 8 ops") and not out.exists()
