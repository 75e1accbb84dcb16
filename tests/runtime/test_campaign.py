"""The measurement campaign: the one recipe of warm-up, isolated requests, stream and solo."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from placewise.errors import InputError
from placewise.runtime.campaign import (
    CAPTURE,
    ISOLATED,
    STREAM,
    WARMUP,
    CampaignResult,
    CampaignSettings,
    run_campaign,
    stream_fill,
    stream_length,
    stream_period,
)
from placewise.runtime.executor import Executor
from placewise.runtime.opexec import request_inputs
from placewise.runtime.program import program_from_schedule
from placewise.runtime.telemetry import RequestRecord
from placewise.schedule import evaluate
from tests.runtime.helpers import partition_files, problem_of, split_placement, tiny_source


def _stream(completions_ns: list[int]) -> list[RequestRecord]:
    return [RequestRecord(i, STREAM, 0, t, t) for i, t in enumerate(completions_ns)]


def test_the_period_skips_the_fill_and_averages_the_rest() -> None:
    # 30 completions: the first 8 (in flight) fill the pipeline, slowly; then every 5 ns
    ts = [1000 * i for i in range(8)] + [7000 + 5 * i for i in range(1, 23)]
    assert stream_fill(len(ts), 8) == 8
    assert stream_period(_stream(ts), 8) == pytest.approx(5e-9)
    # order of the records does not matter: completions are sorted by time
    assert stream_period(_stream(ts[::-1]), 8) == pytest.approx(5e-9)


def test_a_long_stream_skips_a_tenth() -> None:
    # 200 completions: fill = 20 > in flight; the first 20 are 100 ns apart, then 1 ns
    ts = [100 * i for i in range(21)] + [2000 + i for i in range(1, 180)]
    assert stream_fill(len(ts), 8) == 20
    assert stream_period(_stream(ts), 8) == pytest.approx(1e-9)


def test_too_short_a_stream_has_no_period() -> None:
    assert stream_period(_stream([1, 2, 3, 4, 5, 6, 7, 8, 9]), 8) is None
    assert stream_period(_stream([5] * 12), 8) is None  # the clock did not advance


def test_a_stream_is_long_enough_for_its_period() -> None:
    # a count below the minimum is raised to in_flight + 2
    assert stream_length(CampaignSettings(stream_requests=1), 8, isolated_p50_s=1.0,
                         n_devices=1) == 10
    # a duration: seconds / p50 x the overlap the devices allow, within the bounds
    s = CampaignSettings(stream_s=0.5)
    assert stream_length(s, 4, isolated_p50_s=1e-2, n_devices=1) == 100
    assert stream_length(s, 4, isolated_p50_s=1e-9, n_devices=1) == 5000
    assert stream_length(s, 4, isolated_p50_s=10.0, n_devices=1, min_requests=30) == 30


@pytest.mark.parametrize("bad", [CampaignSettings(warmup=-1), CampaignSettings(in_flight=0),
                                 CampaignSettings(stream_requests=0),
                                 CampaignSettings(stream_s=-1.0),
                                 CampaignSettings(solo_repeats=-2)])
def test_bad_settings_are_refused(bad: CampaignSettings) -> None:
    with pytest.raises(InputError):
        bad.check()


@pytest.fixture(scope="module")
def campaign() -> dict[str, Any]:
    src = tiny_source()
    prob = problem_of(src)
    assert src.graph is not None
    program = program_from_schedule(prob, evaluate(prob, split_placement(prob)).schedule)
    inputs = request_inputs(src, src.graph, 6, 3)
    phases: list[str] = []
    settings = CampaignSettings(warmup=3, in_flight=4, stream_requests=9, solo_repeats=2)
    # compiled once per session: the subject is the recipe (test_executor.py compiles)
    with Executor(program, src, reference_inputs=inputs[0], slots=4, timeout_s=60,
                  partition_files=partition_files(program, src)) as ex:
        ex.start()
        got = run_campaign(ex, inputs[2:], settings, warmup_inputs=inputs[:2],
                           progress=lambda phase, _m: phases.append(phase))
        in_process = ex.in_process
    return {"result": got, "phases": phases, "inputs": inputs, "program": program,
            "in_process": in_process}


def test_every_phase_runs_in_order_with_its_count(campaign: dict[str, Any]) -> None:
    got: CampaignResult = campaign["result"]
    assert campaign["phases"] == [WARMUP, ISOLATED, STREAM, CAPTURE]
    tel = got.telemetry
    assert len(tel.requests_of(WARMUP)) == 3
    assert len(tel.requests_of(ISOLATED)) == 4
    assert len(tel.requests_of(STREAM)) == 9
    assert len(tel.requests_of(CAPTURE)) == 1
    # ids grow phase after phase: the recipe's order
    last = [max(r.request for r in tel.requests_of(p)) for p in (WARMUP, ISOLATED, STREAM)]
    first = [min(r.request for r in tel.requests_of(p)) for p in (ISOLATED, STREAM, CAPTURE)]
    assert all(a < b for a, b in zip(last, first, strict=True))


def test_the_figures_come_from_the_stream(campaign: dict[str, Any]) -> None:
    got: CampaignResult = campaign["result"]
    assert got.stream is not None and got.in_flight == 4
    assert (got.stream.requests, got.stream.in_flight, got.stream.fill) == (9, 4, 4)
    assert got.stream.period_s == stream_period(got.telemetry.requests_of(STREAM), 4)
    assert got.stream.period_s is not None and got.stream.period_s > 0
    # the host's worker runs in the client's own thread: the client's CPU time is that
    # worker's own (in its per-request work), not counted a second time
    assert campaign["in_process"] and got.stream.client_cpu_s == 0.0
    assert {s.device for s in got.solo} == {d.name for d in campaign["program"].devices}


def test_the_isolated_outputs_are_returned_in_request_order(campaign: dict[str, Any]) -> None:
    got: CampaignResult = campaign["result"]
    assert len(got.outputs) == 4
    for a, b in zip(got.outputs[:-1], got.outputs[1:], strict=True):
        assert not np.array_equal(a[0], b[0])  # each request its own inputs


def test_without_a_stream_or_solo_only_warm_up_and_isolated_run() -> None:
    src = tiny_source()
    prob = problem_of(src)
    assert src.graph is not None
    program = program_from_schedule(prob, evaluate(prob, split_placement(prob)).schedule)
    inputs = request_inputs(src, src.graph, 2, 0)
    with Executor(program, src, reference_inputs=inputs[0], slots=2, timeout_s=60,
                  partition_files=partition_files(program, src)) as ex:  # compiled once
        ex.start()
        got = run_campaign(ex, inputs, CampaignSettings(warmup=1, stream=False))
    assert got.stream is None and got.solo == ()
    assert {r.phase for r in got.telemetry.requests} == {WARMUP, ISOLATED}
    assert got.in_flight == 2  # the default (8) capped at the executor's slots
