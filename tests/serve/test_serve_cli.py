"""``placewise serve`` on plan files: the per-batch service from the evaluator, the
service at saturation against the plan's throughput, find-max-rate, sweep, trace replay,
determinism, and bad input (exit 2 naming the place)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from placewise.cost.load import load_cost_model
from placewise.errors import InputError
from placewise.graph.fuse import fuse
from placewise.graph.load import load_model
from placewise.hardware.load import load_machine
from placewise.plan import build_plan, load_plan, save_plan
from placewise.schedule.evaluate import evaluate
from placewise.schedule.placement import Problem
from placewise.search.api import plan_search
from placewise.serve import Admission, Workload, parse_batching, poisson_arrivals, simulate
from placewise.serve.arrivals import load_trace
from placewise.serve.run import ServeSetup, capacity_rps, find_max_rate, run_once
from placewise.serve.service import PlanService
from tests.test_cli import assert_bad_input, run_together

MODEL = "zoo:mlp?layers=3&hidden=128"
PRESET = "jetson-agx-orin"


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    m = load_machine(PRESET)
    g = load_model(MODEL)
    prob = Problem(g, fuse(g), m, load_cost_model(m, None))
    res = plan_search(prob, strategy="auto", objective="throughput", time_limit_s=5.0)
    path = tmp_path_factory.mktemp("serve") / "plan.json"
    save_plan(build_plan(prob, res, model_ref=MODEL, strategy="auto",
                         objective="throughput"), path)
    return path


@pytest.fixture(scope="module")
def service(plan_file: Path) -> PlanService:
    m = load_machine(PRESET)
    return PlanService(load_plan(plan_file), m, load_cost_model(m, None), file=str(plan_file))


def test_service_at_the_plans_batch_is_the_plans_own(plan_file: Path,
                                                     service: PlanService) -> None:
    p = load_plan(plan_file)
    st = service(1)
    assert st.latency_s == pytest.approx(p.predicted_latency_s, rel=1e-9)
    assert max(st.occupancy_s) == pytest.approx(p.throughput.period_s, rel=1e-9)
    assert len(st.offsets_s) == len(st.occupancy_s) == len(st.resources)


def test_same_placement_at_a_larger_batch(service: PlanService) -> None:
    """``same``: the plan's placement evaluated on the model bound to batch 8."""
    m = load_machine(PRESET)
    g = load_model(MODEL, batch=8)
    prob = Problem(g, fuse(g), m, load_cost_model(m, None), batch=8)
    ev = evaluate(prob, service.plan.placement_obj())
    assert service(8).latency_s == pytest.approx(ev.latency_s, rel=1e-12)
    assert service(8).latency_s > service(1).latency_s


def test_replan_searches_at_the_batch(plan_file: Path) -> None:
    m = load_machine(PRESET)
    svc = PlanService(load_plan(plan_file), m, load_cost_model(m, None), mode="replan",
                      time_limit_s=2.0)
    ev = svc.evaluation(8)
    assert ev.feasible and ev.placement.keys() == svc.plan.placement_obj().keys()


def test_saturated_service_runs_at_the_plans_throughput(service: PlanService) -> None:
    """Offered twice its capacity with a bounded queue and enough requests in flight to
    fill the pipeline (Little's law: throughput x latency; partition launches add latency
    that occupies no resource), the simulated service completes requests at the
    evaluator's throughput; with fewer in flight, at in-flight / latency."""
    p = service.plan
    rate = 2 * float(p.throughput_rps or 0)
    fill = math.ceil(float(p.throughput_rps or 0) * p.predicted_latency_s)
    r = simulate(Workload(poisson_arrivals(rate, 50_000, seed=2)), service,
                 parse_batching("none"), admission=Admission(queue_limit=64),
                 in_flight=2 * fill)
    assert r.conserved() and r.rejected > 0
    assert r.throughput_rps == pytest.approx(p.throughput_rps, rel=0.02)
    if fill > 2:  # too few in flight: bounded by Little's law, not by the resources
        few = max(1, fill // 2)
        r = simulate(Workload(poisson_arrivals(rate, 50_000, seed=2)), service,
                     parse_batching("none"), admission=Admission(queue_limit=64),
                     in_flight=few)
        assert r.throughput_rps <= few / p.predicted_latency_s * 1.02


def test_find_max_rate_meets_the_objective_and_the_next_rate_does_not(
        service: PlanService) -> None:
    setup = ServeSetup(parse_batching("none"), in_flight=4, seed=1)
    slo = 3 * service(1).latency_s
    got = find_max_rate(service, setup, slo, min_requests=5000, max_requests=20_000,
                        tolerance=0.02)
    best = got["max_rate_rps"]
    assert 0 < best <= capacity_rps(service, setup)
    assert got["at_max"]["p99_s"] <= slo
    failing = [t for t in got["trials"] if not t["meets"]]
    assert failing and min(t["rate_rps"] for t in failing) > best
    assert min(t["rate_rps"] for t in failing) <= best * 1.05  # the bracket closed


def test_priorities_order_the_tails(service: PlanService) -> None:
    """Under heavy load the priority-1 class waits less than the priority-2 class."""
    from placewise.serve.queue import RequestClass

    classes = (RequestClass("gold", 0.3, 1), RequestClass("bronze", 0.7, 2))
    setup = ServeSetup(parse_batching("none"), classes, in_flight=1, requests=20_000,
                       rate=0.95 * capacity_rps(service, ServeSetup(parse_batching("none"))),
                       seed=4)
    _, fig = run_once(service, setup)
    gold, bronze = fig["per_class"]["gold"], fig["per_class"]["bronze"]
    assert gold["mean_wait_s"] < bronze["mean_wait_s"]
    assert gold["arrived"] + bronze["arrived"] == fig["arrived"] == 20_000


def test_trace_lines_are_checked(tmp_path: Path) -> None:
    good = tmp_path / "t.jsonl"
    good.write_text('{"t": 0.0, "class": "a"}\n\n{"t": 0.001}\n{"t": 0.002, "class": "b", '
                    '"shape": {"x": [2, 128]}}\n')
    t, cls, shp, shapes = load_trace(good, ["a", "b"])
    assert t.tolist() == [0.0, 0.001, 0.002] and cls.tolist() == [0, 0, 1]
    assert shp.tolist() == [0, 0, 1] and shapes[1] == {"x": (2, 128)}
    for line, needle in (('{"t": -1}', "line 2"), ("not json", "line 2"),
                         ('{"t": 0.0, "class": "zz"}', "unknown class"),
                         ('{"t": 0.0, "when": 1}', "unknown keys"),
                         ('{"t": 0.5}\n{"t": 0.1}', "line 3")):
        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"t": 0.0}\n' + line + "\n")
        with pytest.raises(InputError, match=needle) as e:
            load_trace(bad, ["a"])
        assert e.value.file == str(bad)


def test_serve_json_has_the_keys_and_is_reproducible(plan_file: Path, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps({"t": i * 1e-4, "class": "a" if i % 3 else "b"}) + "\n"
                             for i in range(400)))
    args = [str(plan_file), "--requests", "3000", "--rate", "5000", "--batching",
            "dynamic:max_batch=8,max_delay=0.2ms", "--seed", "3", "--json"]
    a, b, c, s = run_together(
        ["serve", *args], ["serve", *args],
        ["serve", str(plan_file), "--trace", str(trace), "--class", "a:share=0.6,priority=2",
         "--class", "b:share=0.4,priority=1,slo_p99=1ms", "--json"],
        ["serve", str(plan_file), "--rate", "1000", "--requests", "2000", "--sweep",
         "20%,50%,80%", "--json"])
    for p in (a, c, s):
        assert p.returncode == 0, p.stderr
    ja = json.loads(a.stdout)
    for key in ("arrived", "completed", "rejected", "timed_out", "in_flight", "p50_s",
                "p95_s", "p99_s", "mean_wait_s", "throughput_rps", "goodput_rps",
                "utilization", "per_class", "batch_sizes", "n"):
        assert key in ja, key
    assert ja["conserved"] and ja["arrived"] == 3000
    assert ja == json.loads(b.stdout)  # seeded: identical
    jc = json.loads(c.stdout)
    assert jc["per_class"]["b"]["arrived"] == 134 and jc["per_class"]["a"]["arrived"] == 266
    assert jc["p99_reliable"] and not jc["per_class"]["b"]["p99_reliable"]  # 400; 134
    assert any("class b" in n for n in jc["notes"])
    assert jc["per_class"]["b"]["slo_p99_s"] == 0.001
    js = json.loads(s.stdout)
    assert [round(r["rate_rps"] / js["sweep"][0]["rate_rps"], 6) for r in js["sweep"]] == \
        [1.0, 2.5, 4.0]
    # an untuned plan is simulated with its predicted costs; the cost model's interval
    # brackets the simulated tails
    assert ja["service_model"] == "predicted"
    for q in ("p50", "p99"):
        lo, hi = ja["interval"][q]["low_s"], ja["interval"][q]["high_s"]
        assert lo is not None and hi is not None and lo <= ja[f"{q}_s"] <= hi
    assert math.isfinite(js["sweep"][-1]["p99_s"])


def test_bad_input_exits_2_naming_the_place(plan_file: Path, tmp_path: Path) -> None:
    trace = tmp_path / "bad.jsonl"
    trace.write_text('{"t": 0.0}\n{"t": 0.1}\n{"t": "soon"}\n')
    p = str(plan_file)
    procs = run_together(
        ["serve", p, "--rate", "100", "--batching", "fifo"],
        ["serve", p, "--rate", "0"],
        ["serve", p, "--rate", "-5"],
        ["serve", p, "--trace", str(trace)],
        ["serve", p],
        ["serve", p, "--rate", "100", "--find-max-rate"],
        ["serve", p, "--rate", "100", "--class", "x:share=0"],
        ["serve", p, "--rate", "100", "--router", "random"],
        ["serve", p, "--rate", "100", "--hw", "h100-sxm-server"],
        ["serve", str(tmp_path / "missing.json"), "--rate", "100"],
        ["tune", p],  # a preset's plan: tune serves it on this machine
        ["tune", str(tmp_path / "missing.json")],
        ["tune", p, "--requests", "0"])
    needles = [("--batching", "fifo"), ("--rate",), ("--rate",), ("line 3", str(trace)),
               ("--rate",), ("--slo-p99",), ("share",), ("--router",),
               ("fingerprints.machine",), ("missing.json",), ("preset", "plan.json"),
               ("missing.json",), ("--requests",)]
    for proc, need in zip(procs, needles, strict=True):
        assert_bad_input(proc, *need)


def test_replica_plans_of_unlike_devices(tmp_path: Path) -> None:
    """Two plans of the model, one on the GPU and one on the CPU, serve as two replicas:
    the weighted router splits the stream by each one's capacity; a replica sharing a
    device with another shares it (the same plan twice serves no more than once); a
    replica plan of another model, or --real of a preset's plans, is refused."""
    plans = {d: tmp_path / f"{d}.json" for d in ("gpu", "cpu")}
    other = tmp_path / "other.json"
    made = run_together(*[["plan", MODEL, "--hw", PRESET, "--strategy", f"single:{d}",
                           "--out", str(p)] for d, p in plans.items()],
                        ["plan", "zoo:mlp?layers=2&hidden=64", "--hw", PRESET, "--strategy",
                         "single:cpu", "--out", str(other)])
    for p in made:
        assert p.returncode == 0, p.stderr
    caps = {d: 1.0 / load_plan(p).throughput.period_s for d, p in plans.items()}
    g, c = str(plans["gpu"]), str(plans["cpu"])
    ok, rr, twice, *bad = run_together(
        ["serve", g, "--replica-plan", c, "--router", "weighted", "--rate", "100",
         "--requests", "4000", "--json"],
        ["serve", g, "--replica-plan", c, "--rate", "100", "--requests", "4000", "--json"],
        ["serve", g, "--replica-plan", g, "--rate", "100", "--requests", "400", "--json"],
        ["serve", g, "--replica-plan", str(other), "--rate", "100"],
        ["serve", g, "--replica-plan", c, "--rate", "100", "--real"],
        ["serve", g, "--replica-plan", c, "--replicas", "2", "--rate", "100"])
    assert ok.returncode == 0, ok.stderr
    j = json.loads(ok.stdout)
    assert j["replica_plans"] == [g, c] and j["replicas"] == 2 and sum(j["by_replica"]) == 4000
    assert j["by_replica"][0] / j["by_replica"][1] == pytest.approx(caps["gpu"] / caps["cpu"],
                                                                    rel=0.01)
    assert json.loads(rr.stdout)["by_replica"] == [2000, 2000]  # round-robin
    assert twice.returncode == 0, twice.stderr
    shared = json.loads(twice.stdout)["utilization"]
    assert "gpu" in shared and not any(k.startswith("r0/") for k in shared)  # one gpu
    for proc, need in zip(bad, [("other.json", "fingerprints.graph"),
                                ("gpu.json", "cannot run here"),
                                ("--replica-plan", "--replicas")], strict=True):
        assert_bad_input(proc, *need)
