"""Bucketed serving (``adapt.serving``): each request to its bucket with the right padding,
class priority re-ordering through the serve queue, executors resident across blocks
(same worker processes), request conservation, per-bucket telemetry with the stable tags,
and the CLI's plan-set / shape-trace path."""

from __future__ import annotations

import json
import multiprocessing as mp
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from placewise.adapt.planset import build_plan_set, save_plan_set
from placewise.adapt.planset.choice import ChoiceCosts
from placewise.adapt.serving import Service, open_service
from placewise.adapt.trace import ShapeTrace, save_shape_trace
from placewise.errors import InputError
from placewise.plan import Plan, build_plan
from placewise.runtime.opexec import load_source
from placewise.runtime.telemetry import STABLE_TAG_KEYS
from placewise.schedule import evaluate
from placewise.serve.queue import Admission
from tests.runtime.helpers import (
    TINY_MLP,
    alive,
    local_machine,
    own_segments,
    problem_of,
    split_placement,
)
from tests.test_cli import run


def _plan(batch: int) -> Plan:
    src = load_source(TINY_MLP, batch=batch)
    prob = problem_of(src, batch=batch)
    return build_plan(prob, evaluate(prob, split_placement(prob, int8=False)),
                      model_ref=TINY_MLP, strategy="test")


@pytest.fixture(scope="module")
def plan_set_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A plan set of the tiny MLP over batch 1 and 4 (two buckets: compile priced at 0,
    so padding batch 1 up to 4 is not worth sharing a bucket), saved."""
    ps = build_plan_set(TINY_MLP, local_machine(), {"batch": [1, 4]},
                        costs=ChoiceCosts(compile_s_per_bucket=0.0), time_limit_s=1.0)
    assert [b.upper for b in ps.buckets] == [{"batch": 1}, {"batch": 4}]
    path = tmp_path_factory.mktemp("planset") / "ps.json"
    save_plan_set(ps, path)
    return path


@pytest.fixture(scope="module")
def service(plan_set_file: Path) -> Iterator[Service]:
    # every device in its own worker process, so that residency shows in the pids
    with open_service(plan_set_file, machine=local_machine(), priorities=(1, 2), warmup=2,
                      seed=0, executor_options={"inline_host": False}) as svc:
        yield svc
    assert not mp.active_children() and not own_segments()


def _trace(batches: list[int], times: list[float] | None = None,
           classes: list[int] | None = None) -> ShapeTrace:
    n = len(batches)
    return ShapeTrace(tuple(times if times is not None else [0.002 * i for i in range(n)]),
                      tuple({"batch": b} for b in batches),
                      tuple(classes if classes is not None else [0] * n), (0,) * n)


def test_each_request_runs_in_its_bucket_padded_to_its_batch(service: Service) -> None:
    batches = [1, 2, 3, 4, 1, 1, 3, 2, 4, 1]
    block = service.serve(_trace(batches))
    assert block.result.conserved() and block.result.completed == len(batches)
    want = [0 if b == 1 else 1 for b in batches]
    assert block.bucket_of.tolist() == want
    b1, b4 = block.buckets
    assert (b1.upper, b4.upper) == ({"batch": 1}, {"batch": 4})
    assert (b1.arrived, b4.arrived) == (4, 6) and (b1.calls, b4.calls) == (4, 6)
    assert b1.padding.padded_rows == 0 and b1.padding.rows_run == 4
    assert b4.padding.padded_rows == sum(4 - b for b in batches if b > 1) == 6
    assert b4.padding.rows_run == 24 and b4.padding.fraction == pytest.approx(6 / 24)
    assert 0 < b4.padding.time_s < b4.padding.busy_s and b1.padding.time_s == 0.0
    assert block.padding.padded_rows == 6 and block.result.padded == 6
    assert bool(np.isfinite(block.latency_s).all()) and b1.p50_s > 0 and b4.p99_s >= b4.p50_s
    # per-bucket telemetry of this block: one executor request per request
    for b in (b1, b4):
        assert b.telemetry is not None and len(b.telemetry.requests) == b.calls
        assert {r.phase for r in b.telemetry.requests} == {"serve"}
        assert b.telemetry.tags["bucket"] == b.name
        assert all(k in b.telemetry.tags for k in STABLE_TAG_KEYS)
    assert b1.telemetry is not None and b4.telemetry is not None
    assert b1.telemetry.tags["plan_fingerprint"] != b4.telemetry.tags["plan_fingerprint"]
    assert all(k in block.tags for k in STABLE_TAG_KEYS)
    assert block.tags["arrival"].startswith("trace:") and block.tags["seed"] == "0"
    assert service.plan_set is not None
    assert block.tags["plan_fingerprint"] == service.plan_set.fingerprint()
    assert json.dumps(block.to_json())  # JSON-ready


def test_a_high_priority_class_queued_behind_low_ones_goes_first(service: Service) -> None:
    # 6 low-priority requests (class 1, priority 2) then 2 high ones, all at once: all are
    # queued before the first is sent, and the high ones leave the queue first
    classes = [1] * 6 + [0] * 2
    block = service.serve(_trace([1, 3, 1, 3, 1, 3, 1, 4], [0.0] * 8, classes))
    assert block.result.completed == 8 and block.result.conserved()
    wait = block.wait_s
    high, low = wait[6:], wait[:6]
    assert float(high.max()) < float(low.min())
    # within a priority, first come first served
    assert bool((np.diff(low) >= 0).all())


def test_executors_stay_resident_across_blocks(service: Service) -> None:
    pids = service.worker_pids()
    executors = service.executors
    assert any(pids.values())  # the tiny plan's second device runs in its own process
    for _ in range(2):
        block = service.serve(_trace([1, 4, 2]))
        assert block.result.completed == 3
        assert service.worker_pids() == pids
        assert service.executors == executors
    assert all(alive(p) for d in pids.values() for p in d.values())
    assert block.index > 0


def test_every_request_is_counted_under_admission_limits(service: Service) -> None:
    block = service.serve(_trace([1, 2] * 10, [0.0] * 20), admission=Admission(queue_limit=3))
    r = block.result
    assert r.arrived == 20 and r.rejected == 17 and r.completed == 3 and r.conserved()
    assert sum(b.arrived for b in block.buckets) == 20
    assert sum(b.completed for b in block.buckets) == r.completed
    assert int(np.isfinite(block.latency_s).sum()) == 3


def test_closing_the_service_stops_its_workers() -> None:
    svc = open_service(_plan(1), machine=local_machine(), warmup=0)
    with svc:
        pids = [p for d in svc.worker_pids().values() for p in d.values()]
        shm = {ex.shm_name for ex in svc.executors.values()}
        assert pids and all(alive(p) for p in pids)
    assert not any(alive(p) for p in pids) and not (shm & own_segments())
    with pytest.raises(InputError, match="closed"):
        svc.serve(_trace([1]))


def test_a_request_above_the_envelope_is_refused_before_it_runs(service: Service) -> None:
    with pytest.raises(InputError, match="request 1"):
        service.serve(_trace([1, 8]))
    with pytest.raises(InputError, match="no priority"):
        service.serve(_trace([1], classes=[2]))
    assert service.serve(_trace([2])).result.completed == 1  # still serving


def test_telemetry_windows_per_bucket(service: Service) -> None:
    block = service.serve(_trace([1] * 6 + [3] * 6), window_requests=3)
    runs = block.runs
    assert set(runs) == set(service.bucket_names) and len(runs) == 2
    for name, r in runs.items():
        assert r.bucket == name and len(r.windows) == 2
        assert r.tags["bucket"] == name and r.tags["arrival"] == block.tags["arrival"]


def test_a_plain_plan_is_one_bucket_and_serves_a_trace_from_the_cli(tmp_path: Path) -> None:
    plan_file = tmp_path / "plan.json"
    proc = run("plan", "zoo:mlp?layers=2&hidden=64", "--hw", "local", "--batch", "4",
               "--out", str(plan_file))
    assert proc.returncode == 0, proc.stderr
    batches = [1, 4, 2, 1, 3, 1]
    tr = _trace(batches)
    save_shape_trace(tr, tmp_path / "s.jsonl")
    proc = run("serve", str(plan_file), "--real", "--trace", str(tmp_path / "s.jsonl"),
               "--telemetry-out", str(tmp_path / "run.json"), "--window-requests", "2",
               "--json")
    assert proc.returncode == 0, proc.stderr
    got: dict[str, Any] = json.loads(proc.stdout)
    assert got["plan_set"] is False and got["completed"] == 6 and got["conserved"]
    (b,) = got["buckets"]
    assert b["name"] == "plan" and b["upper"] == {"batch": 4}
    assert b["padding"]["padded_rows"] == sum(4 - x for x in batches)
    assert all(k in got["tags"] for k in STABLE_TAG_KEYS)
    assert got["telemetry"]["plan"]["executor_requests"] == 6
    run_file = json.loads((tmp_path / "run.json").read_text())
    assert run_file["format"] == "placewise-telemetry" and run_file["bucket"] == "plan"
    assert got["simulated"]["buckets"][0]["padding"] == b["padding"] | {
        k: got["simulated"]["buckets"][0]["padding"][k] for k in ("busy_s", "padding_time_s")}
    # without --real: simulated only, from the plan's predicted service
    proc = run("serve", str(plan_file), "--trace", str(tmp_path / "s.jsonl"), "--json")
    assert proc.returncode == 0, proc.stderr
    sim = json.loads(proc.stdout)
    assert sim["real"] is False and "measured" not in sim and sim["completed"] == 6
    assert sim["buckets"][0]["padding"]["padded_rows"] == sum(4 - x for x in batches)


def test_sequence_positions_are_padded_up_to_the_bucket() -> None:
    ps = build_plan_set("zoo:bert?layers=1&hidden=32&heads=2&vocab=100", local_machine(),
                        {"seq": [16, 32]}, costs=ChoiceCosts(compile_s_per_bucket=0.0),
                        time_limit_s=1.0)
    assert [b.upper for b in ps.buckets] == [{"seq": 16}, {"seq": 32}]
    seqs = [10, 16, 20, 32, 9]
    tr = ShapeTrace(tuple(0.002 * i for i in range(5)),
                    tuple({"batch": 1, "seq": s} for s in seqs), (0,) * 5, (0,) * 5)
    with open_service(ps, machine=local_machine(), warmup=0) as svc:
        block = svc.serve(tr)
    assert block.result.completed == 5 and block.bucket_of.tolist() == [0, 0, 1, 1, 0]
    s16, s32 = block.buckets
    assert (s16.padding.elements_run, s16.padding.padded_elements) == (48, 48 - 35)
    assert (s32.padding.elements_run, s32.padding.padded_elements) == (64, 12)
    assert s16.padding.padded_rows == s32.padding.padded_rows == 0  # batch 1 everywhere
    assert block.padding.fraction == pytest.approx(25 / 112)


def test_the_simulated_path_routes_and_pads_as_the_real_one(plan_set_file: Path,
                                                            service: Service) -> None:
    from placewise.adapt.serving_sim import simulate_trace

    batches = [1, 3, 4, 1, 2, 1]
    tr = _trace(batches, [0.01 * i for i in range(6)], [0, 1, 0, 1, 0, 1])  # no queueing
    sim = simulate_trace(plan_set_file, tr, machine=local_machine(), priorities=(1, 2))
    real = service.serve(tr)
    assert sim.result.conserved() and sim.result.completed == 6
    assert sim.result.arrived_by_class == (3, 3) and sorted(sim.result.classes.tolist()) == [
        0, 0, 0, 1, 1, 1]
    for s, r in zip(sim.buckets, real.buckets, strict=True):
        assert (s.name, s.arrived, s.calls) == (r.name, r.arrived, r.calls)
        assert s.padding.padded_rows == r.padding.padded_rows
        assert s.padding.padded_elements == r.padding.padded_elements
        # alone in the machine, a request takes its bucket's predicted latency
        assert s.p50_s == pytest.approx(sim.service_s[s.name])
    assert sim.padding.padded_rows == real.padding.padded_rows == 3
    with pytest.raises(InputError, match="request 0"):
        simulate_trace(plan_set_file, _trace([16]), machine=local_machine())
