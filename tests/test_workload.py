"""A workload of several models as one graph: references, merging, planning, running."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from placewise.errors import InputError
from placewise.graph.load import load_model
from placewise.graph.workload import (
    Member,
    Stream,
    load_workload,
    member_of,
    members_by_name,
    parse_member,
    parse_stream,
    parse_workload_ref,
    workload_ref,
)
from placewise.graph.zoo import export_onnx
from placewise.plan import load_plan
from placewise.plan_partitions import plan_file_partitions
from tests.test_cli import assert_bad_input, run, run_together


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two zoo models exported by torch.onnx (opset 18, dynamic batch) and one ONNX model
    written with onnx.helper at opset 13 (a Gemm and a Softmax)."""
    folder = tmp_path_factory.mktemp("workload")
    out = {"mlp": folder / "mlp.onnx", "resnet": folder / "resnet.onnx",
           "old": folder / "old.onnx"}
    export_onnx("mlp", {"layers": 2}, out["mlp"])
    export_onnx("resnet", {"blocks": 2}, out["resnet"])
    rng = np.random.default_rng(0)
    w = helper.make_tensor("w", TensorProto.FLOAT, [16, 8],
                           rng.standard_normal((16, 8)).astype(np.float32).ravel())
    g = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w"], ["h"]),
         helper.make_node("Softmax", ["h"], ["y"], axis=1)], "old",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), out["old"])
    # three 3x3 convolutions with ReLU: every layer one a DLA runs
    nodes, inits, prev = [], [], "x"
    for i in range(3):
        inits.append(helper.make_tensor(f"w{i}", TensorProto.FLOAT, [32, 32 if i else 16, 3, 3],
                                        rng.standard_normal(32 * (32 if i else 16) * 9)
                                        .astype(np.float32) * 0.1))
        nodes += [helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        prev = f"r{i}"
    g = helper.make_graph(nodes, "convs",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                         ["n", 16, 64, 64])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT,
                                                         ["n", 32, 64, 64])], inits)
    out["convs"] = folder / "convs.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), out["convs"])
    return out


def test_references_round_trip_and_refuse_what_is_not_a_workload() -> None:
    members = [Member("det", "a.onnx"), Member("cls", "zoo:mlp?layers=1")]
    assert parse_workload_ref(workload_ref(members)) == tuple(members)
    assert parse_member("zoo:resnet?blocks=1") == Member("resnet", "zoo:resnet?blocks=1")
    assert parse_member("models/3d-net.onnx").name == "m_3d-net"
    for bad in ([members[0]], [members[0], Member("det", "b.onnx")],
                [members[0], Member("a b", "b.onnx")]):
        with pytest.raises(InputError):
            workload_ref(bad)
    for text in ("workload:nope", "workload:[1,2]", 'workload:[["a","x.onnx"]]'):
        with pytest.raises(InputError):
            parse_workload_ref(text)
    assert parse_stream("det:rate=30,slo_p99=20ms,priority=2") == (
        "det", Stream(30.0, 0.02, 2))
    for bad_stream in ("det:rate=0", "det:priority=0", "det:slo_p99=soon", "det:burst=3",
                       ":rate=3"):
        with pytest.raises(InputError):
            parse_stream(bad_stream)


def test_a_merged_workload_computes_what_each_model_computes_alone(
        files: dict[str, Path]) -> None:
    """The merged model (opset 13 brought to 18) run by onnxruntime gives each member's
    outputs as the member run alone (to float rounding), and every tensor and op says its model."""
    import onnxruntime as ort

    ref = workload_ref([Member("a", str(files["mlp"])), Member("b", str(files["old"]))])
    graph, model = load_workload(ref, batch=3)
    assert graph.record.members == ("a", "b")
    assert {member_of(t.name) for t in graph.tensors} == {"a", "b"}
    assert set(members_by_name(graph).values()) == {"a", "b"}
    assert graph.fingerprint() == load_model(ref, batch=3).fingerprint()  # deterministic
    assert max(o.version for o in model.opset_import if o.domain == "") == 18
    rng = np.random.default_rng(1)
    xa = rng.standard_normal((3, 64)).astype(np.float32)
    xb = rng.standard_normal((3, 16)).astype(np.float32)
    both = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = dict(zip([o.name for o in both.get_outputs()],
                   both.run(None, {"a/input": xa, "b/x": xb}), strict=True))
    for name, path, x in (("a", files["mlp"], xa), ("b", files["old"], xb)):
        alone = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        (want,) = alone.run(None, {alone.get_inputs()[0].name: x})
        out = f"{name}/{alone.get_outputs()[0].name}"
        np.testing.assert_allclose(got[out], want, rtol=1e-6, atol=1e-7)


def test_a_workload_member_without_onnx_is_refused(tmp_path: Path) -> None:
    task = tmp_path / "t.json"
    task.write_text(json.dumps({"tasks": []}))
    with pytest.raises(InputError, match="task graph"):
        load_workload(workload_ref([Member("a", "zoo:mlp"), Member("b", str(task))]))


@pytest.fixture(scope="module")
def planned(files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
            ) -> dict[str, Path]:
    """The same two-model workload planned on jetson-agx-orin with either model first in
    priority, and on this machine (cost-model work budget: a deterministic search)."""
    folder = tmp_path_factory.mktemp("wplan")
    base = ["plan", "--model", f"a={files['mlp']}", "--model", f"b={files['resnet']}",
            "--batch", "2", "--strategy", "greedy"]
    outs = {"a_first": folder / "a.json", "b_first": folder / "b.json",
            "local": folder / "local.json"}
    procs = run_together(
        [*base, "--hw", "jetson-agx-orin", "--stream", "a:rate=500,slo_p99=1ms,priority=1",
         "--stream", "b:rate=200,priority=2", "--out", str(outs["a_first"])],
        [*base, "--hw", "jetson-agx-orin", "--stream", "a:rate=500,slo_p99=1ms,priority=2",
         "--stream", "b:rate=200,priority=1", "--out", str(outs["b_first"])],
        [*base, "--hw", "local", "--out", str(outs["local"])])
    for p in procs:
        assert p.returncode == 0, p.stderr
    return outs


def test_a_workload_plan_records_each_model_and_keeps_their_partitions_apart(
        planned: dict[str, Path]) -> None:
    plan = load_plan(planned["a_first"])
    assert plan.workload is not None
    a, b = plan.workload.models
    assert (a.name, a.rate_per_s, a.slo_p99_s, a.priority) == ("a", 500.0, 0.001, 1)
    assert (b.name, b.rate_per_s, b.slo_p99_s, b.priority) == ("b", 200.0, None, 2)
    assert a.inputs == ("a/input",) and all(o.startswith("b/") for o in b.outputs)
    assert max(a.latency_s, b.latency_s) == pytest.approx(plan.makespan_s)
    assert a.ops + b.ops == len(plan.ops)
    util = plan.workload.utilization
    assert util is not None and set(util) == set(a.busy_s) | set(b.busy_s)
    for d, u in util.items():
        want = (500 * a.busy_s.get(d, 0.0) + 200 * b.busy_s.get(d, 0.0)) / plan.batch
        assert u == pytest.approx(want)
    for part in plan_file_partitions(plan):  # no compiled unit holds two models' work
        owners = {member_of(next(iter(plan.regions[v].outputs))) for v in part.tasks}
        assert len(owners) == 1, (part.name, owners)


def test_the_higher_priority_model_goes_first_where_they_contend(
        planned: dict[str, Path]) -> None:
    """The same placement scheduled with either model first: each model's latency is no
    worse when it has the priority than when the other has it."""
    from placewise.hardware.load import load_machine
    from placewise.plan_workload import vertex_members, workload_json
    from placewise.planning import build_problem
    from placewise.schedule.evaluate import evaluate

    plan = load_plan(planned["a_first"])
    prob = build_problem(plan.model, load_machine("jetson-agx-orin"), batch=2)
    placement = plan.placement_obj()
    owner = vertex_members(prob)
    members = parse_workload_ref(plan.model)
    lat = {}
    for first in ("a", "b"):
        p = prob.prioritized({v: 1 if m == first else 2 for v, m in owner.items()})
        w = workload_json(p, evaluate(p, placement).schedule, members)
        lat[first] = {m["name"]: m["latency_s"] for m in w["models"]}
    assert lat["a"]["a"] <= lat["b"]["a"] + 1e-12
    assert lat["b"]["b"] <= lat["a"]["b"] + 1e-12


def test_explain_shows_every_model(planned: dict[str, Path]) -> None:
    proc = run("explain", str(planned["a_first"]), "--json")
    assert proc.returncode == 0, proc.stderr
    w = json.loads(proc.stdout)["workload"]
    assert [m["name"] for m in w["models"]] == ["a", "b"]
    assert all(m["partitions"] for m in w["models"])
    text = run("explain", str(planned["a_first"])).stdout
    assert "workload: 2 models" in text


def test_a_workload_plan_runs_for_real_here(planned: dict[str, Path]) -> None:
    """validate runs both models' partitions side by side in onnxruntime, outputs exact."""
    proc = run("validate", str(planned["local"]), "--requests", "12", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    quality = data["quality"]
    assert {member_of(q["output"]) for q in quality} == {"a", "b"}
    assert all(q["rel_l2_max"] <= 1e-5 for q in quality)  # the same fp32 kernels, cut up
    models = {m["name"]: m for m in data["models"]}  # each model predicted beside measured
    assert set(models) == {"a", "b"}
    plan = load_plan(planned["local"])
    assert plan.workload is not None
    for m in plan.workload.models:
        got = models[m.name]
        assert got["predicted_s"] >= m.latency_s and got["latency"]["n"] == 12
        assert 0 < got["latency"]["p50_s"] <= data["measured"]["latency"]["max_s"] * 1.0001


@pytest.mark.parametrize(("args", "needle"), [
    (["--model", "zoo:mlp"], "two models"),
    (["zoo:mlp", "--model", "zoo:mlp", "--model", "zoo:resnet"], "not both"),
    (["--model", "zoo:mlp", "--model", "zoo:resnet", "--stream", "bert:rate=3"],
     "no model named 'bert'"),
    (["--model", "zoo:mlp", "--model", "zoo:mlp"], "two models are named 'mlp'"),
    (["--model", "zoo:mlp", "--model", "zoo:resnet", "--stream", "mlp:rate=-1"], "rate"),
])
def test_bad_workloads_are_refused_in_one_line(args: list[str], needle: str,
                                               tmp_path: Path) -> None:
    proc = run("plan", *args, "--hw", "jetson-agx-orin", "--out", str(tmp_path / "p.json"))
    assert_bad_input(proc, needle)
    assert not (tmp_path / "p.json").exists()


# ---- serving ---------------------------------------------------------------------------------
def test_models_that_share_a_device_wait_for_each_other_in_the_simulator() -> None:
    """Two servers routed by class, each one stage on a resource of the same name: shared,
    the second request waits for the first; not shared, it does not."""
    from placewise.serve.policies import parse_batching
    from placewise.serve.sim import StageTimes, Workload, simulate

    def svc(b: int) -> StageTimes:
        return StageTimes(0.5, (0.0,), (0.5,), ("dev",))

    wl = Workload(np.array([0.0, 0.1]), np.array([0, 1]))
    none = parse_batching("none")
    apart = simulate(wl, [svc, svc], none, priorities=(1, 1), router="by-class")
    together = simulate(wl, [svc, svc], none, priorities=(1, 1), router="by-class",
                        shared=True)
    assert apart.latency_s.tolist() == pytest.approx([0.5, 0.5])
    assert together.latency_s.tolist() == pytest.approx([0.5, 0.9])
    assert together.resources == ("dev",) and together.busy_s == pytest.approx((1.0,))
    assert apart.conserved() and together.conserved()
    assert together.by_replica == (1, 1)
    with pytest.raises(InputError, match="one replica per class"):
        simulate(wl, [svc, svc], none, priorities=(1,), router="by-class")


def test_each_model_arrives_at_its_own_rate(planned: dict[str, Path]) -> None:
    from placewise.serve.workload import workload_arrivals

    plan = load_plan(planned["a_first"])
    wl = workload_arrivals(plan, 20.0, seed=3)
    assert wl.classes is not None
    counts = np.bincount(wl.classes, minlength=2)
    assert counts[0] / 20.0 == pytest.approx(500, rel=0.1)
    assert counts[1] / 20.0 == pytest.approx(200, rel=0.1)
    assert bool((np.diff(wl.times_s) >= 0).all())
    again = workload_arrivals(plan, 20.0, seed=3)
    np.testing.assert_array_equal(again.times_s, wl.times_s)  # seeded
    with pytest.raises(InputError, match="has no rate"):
        workload_arrivals(load_plan(planned["local"]), 1.0)


def test_serve_simulates_each_model_of_a_workload_plan(planned: dict[str, Path]) -> None:
    proc = run("serve", str(planned["a_first"]), "--duration", "2s", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    sim = data["simulated"]
    assert sim["conserved"]
    assert [m["name"] for m in sim["by_model"]] == ["a", "b"]
    for m, rate in zip(sim["by_model"], (500, 200), strict=True):
        assert m["completed"] == m["arrived"] > 0
        assert m["throughput_rps"] == pytest.approx(rate, rel=0.25)
        assert 0 < m["p50_s"] <= m["p99_s"]
    text = run("serve", str(planned["a_first"]), "--duration", "1s").stdout
    assert "by model" in text and "1 ms" in text  # a's objective beside its p99
    assert_bad_input(run("serve", str(planned["a_first"]), "--rate", "5"), "--rate")
    assert_bad_input(run("serve", str(planned["local"])), "has no rate")


def test_serve_real_runs_each_model_on_its_own_executor(planned: dict[str, Path],
                                                        tmp_path: Path) -> None:
    """Both models of a plan made here served for real side by side: every arrival of each
    model completes (the streams are given here: the local plan records none)."""
    from placewise.serve.policies import parse_batching
    from placewise.serve.workload import by_model, serve_workload, workload_arrivals

    plan = load_plan(planned["local"])
    wl = workload_arrivals(plan, 0.5, rates=[60.0, 40.0], seed=1)
    got = serve_workload(plan, wl, parse_batching("none"), limit_s=60.0, warmup=2)
    assert got.result.conserved() and got.result.completed == len(wl.times_s)
    figs = by_model(got.result, ["a", "b"])
    assert [f.completed for f in figs] == [int((wl.classes == k).sum()) for k in (0, 1)]
    assert all(f.p50_s is not None and f.p50_s > 0 for f in figs)
    assert set(got.result.resources) <= {f"{m}/{d}" for m in "ab"
                                         for d in ("cpu0", "cpu1", "cpu01")}


# ---- export ----------------------------------------------------------------------------------
def test_export_writes_one_folder_per_model_that_plain_onnxruntime_chains(
        planned: dict[str, Path], files: dict[str, Path], tmp_path: Path) -> None:
    """Each model's folder is a manifest of its own partitions; chained by plain
    onnxruntime, it computes what the model computes alone."""
    import onnxruntime as ort

    from placewise.export import load_manifest
    from tests.test_export import chain, check_manifest

    out = tmp_path / "ex"
    proc = run("export", str(planned["a_first"]), "--out", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert [m["folder"] for m in summary["models"]] == ["a", "b"]
    index = json.loads((out / "workload.json").read_text())
    assert index["plan_fingerprint"] == summary["plan_fingerprint"]
    rng = np.random.default_rng(2)
    for m, path in (("a", files["mlp"]), ("b", files["resnet"])):
        manifest = load_manifest(out / m)
        check_manifest(out / m, manifest)
        (inp,) = manifest.graph_inputs
        assert inp.name.startswith(f"{m}/")
        x = rng.standard_normal(inp.shape).astype(np.float32)
        got = chain(out / m, {inp.name: x})
        alone = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        (want,) = alone.run(None, {alone.get_inputs()[0].name: x})
        (value,) = got.values()
        np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-6)
    assert_bad_input(run("export", str(planned["a_first"]), "--out", str(out)), "--out")


# ---- engines that slow each other down ---------------------------------------------------------
def test_engines_on_the_jetson_slow_each_other_as_the_preset_says(
        files: dict[str, Path]) -> None:
    """Two copies of a model, one on the GPU and one on DLA0, both in fp16: together, each
    is stretched by the preset's co-run factor over the time they overlap (TensorRT
    #2745's figures), never more; alone on the same devices, neither is."""
    from placewise.hardware.load import load_machine
    from placewise.plan_workload import member_placement, member_problem, vertex_members
    from placewise.planning import build_problem
    from placewise.schedule.evaluate import evaluate
    from placewise.schedule.placement import Assignment, Placement
    from placewise.units import DType

    machine = load_machine("jetson-agx-orin")
    gpu = machine.device("gpu")
    assert gpu.corun is not None and "2745" in gpu.corun.source
    ref = workload_ref([Member("g", str(files["convs"])), Member("d", str(files["convs"]))])
    prob = build_problem(ref, machine, batch=8)
    where = {"g": "gpu", "d": "dla0"}
    placement = Placement.of({v: Assignment(where[m], DType.FP16)
                              for v, m in vertex_members(prob).items()})
    together = evaluate(prob, placement).schedule
    alone = {m: evaluate(p := member_problem(prob, m), member_placement(placement, p))
             .schedule.makespan_s for m in where}
    from placewise.plan_workload import workload_json

    ends = {w["name"]: w["latency_s"] for w in workload_json(
        prob, together, parse_workload_ref(ref))["models"]}
    first_end = min(ends.values())
    for m, other in (("g", "dla0"), ("d", "gpu")):
        factor = machine.device(where[m]).corun_slowdown([other])
        assert factor > 1.0
        # the overlapped part is stretched: no faster than alone, no slower than all of it
        assert ends[m] > alone[m] * (1 + 1e-9)
        assert ends[m] <= alone[m] * factor * (1 + 1e-9)
    # the one that ends first overlapped the other all along: stretched by its full factor
    m0 = min(ends, key=lambda k: ends[k])
    f0 = machine.device(where[m0]).corun_slowdown([where["d" if m0 == "g" else "g"]])
    assert first_end == pytest.approx(alone[m0] * f0, rel=0.05)
    with pytest.raises(Exception, match="co-runner"):
        bad = machine.model_dump()
        bad["devices"][1]["corun"] = {"added": {"tpu": 0.1}, "source": "x"}
        type(machine).model_validate(bad)


def test_tune_measures_each_model_on_its_own_and_serve_uses_it(planned: dict[str, Path],
                                                                tmp_path: Path) -> None:
    """tune of a workload plan tunes each model's part alone (ModelRecord.service); the
    simulation then prices each model's idle gaps with its own measurement."""
    from placewise.cost.load import load_cost_model
    from placewise.hardware.probe import load_local
    from placewise.plan_workload import member_plan
    from placewise.serve.policies import parse_batching
    from placewise.serve.service import PlanService
    from placewise.serve.workload import by_model, simulate_workload, workload_arrivals

    out = tmp_path / "tuned.json"
    proc = run("tune", str(planned["local"]), "--out", str(out), "--requests", "4",
               "--repeats", "1", "--json")
    assert proc.returncode == 0, proc.stderr
    plan = load_plan(out)
    assert plan.workload is not None and plan.service is None
    for m in plan.workload.models:
        assert m.service is not None and m.service.points
        assert m.alone_latency_s is not None and m.alone_latency_s <= m.latency_s * 1.000001
        part = member_plan(plan, m.name)
        assert part.service == m.service and part.predicted_latency_s == m.alone_latency_s
        assert m.service.predicted_latency_s == pytest.approx(m.alone_latency_s)
    whole = PlanService(plan, load_local(), load_cost_model(load_local(), None))
    wl = workload_arrivals(plan, 2.0, rates=[50.0, 50.0], seed=4)
    tuned = by_model(simulate_workload(whole, wl, parse_batching("none")), ["a", "b"])
    plain = by_model(simulate_workload(whole, wl, parse_batching("none"), tuned=False),
                     ["a", "b"])
    assert [f.completed for f in tuned] == [f.completed for f in plain]
    assert any(t.p50_s != p.p50_s for t, p in zip(tuned, plain, strict=True))


# ---- replication against layer placement -------------------------------------------------------
@pytest.mark.parametrize("hw", ["local", "jetson-agx-orin"])
def test_a_throughput_plan_weighs_replicas_against_itself(hw: str, files: dict[str, Path],
                                                          tmp_path: Path) -> None:
    """plan --objective throughput says what whole copies on devices of their own would
    serve: never two copies on a core, never a device that cannot run every op, each copy
    slowed by the others' co-run factors."""
    from placewise.hardware.load import load_machine
    from placewise.hardware.probe import load_local

    proc = run("plan", str(files["resnet"]), "--hw", hw, "--batch", "4", "--objective",
               "throughput", "--strategy", "greedy", "--out", str(tmp_path / "p.json"),
               "--json")
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(proc.stdout)["replication"]
    assert rep is not None
    machine = load_local() if hw == "local" else load_machine(hw)
    plan = load_plan(tmp_path / "p.json")
    kinds = {o.kind for o in plan.ops.values()}
    used: set[int] = set()
    for d in rep["devices"]:
        dev = machine.device(d)
        assert all(dev.supports(k) for k in kinds)
        assert not used & set(dev.cores or ())
        used |= set(dev.cores or ())
    assert rep["capacity_rps"] == pytest.approx(sum(rep["by_device_rps"].values()))
    assert rep["replicate"] == (rep["capacity_rps"] > rep["plan_rps"])
    assert rep["plan_rps"] == pytest.approx(plan.throughput_rps)
    latency = run("plan", str(files["resnet"]), "--hw", hw, "--batch", "4", "--strategy",
                  "greedy", "--out", str(tmp_path / "l.json"), "--json")
    assert json.loads(latency.stdout)["replication"] is None  # a latency plan: no such choice


def test_a_dla_replica_with_gpu_fallback_shares_the_gpu_with_a_gpu_replica(
        files: dict[str, Path], tmp_path: Path) -> None:
    """The resnet's mean and linear layers do not run on a DLA: its DLA replica runs them on
    the GPU (one op per vertex, each on dla0 where the DLA runs it, else on the GPU).
    Served beside a GPU replica, the two share the GPU: the simulation has one GPU
    resource, busy with both replicas' work."""
    from placewise.cost.load import load_cost_model
    from placewise.hardware.load import load_machine
    from placewise.plan import build_plan, save_plan
    from placewise.planning import build_problem
    from placewise.schedule.evaluate import evaluate
    from placewise.schedule.placement import Assignment, Placement
    from placewise.units import DType

    machine = load_machine("jetson-agx-orin")
    prob = build_problem(str(files["resnet"]), machine, batch=4, fuse_ops=False,
                         cost_model=load_cost_model(machine, None))
    dla = machine.device("dla0")
    plans = {}
    for name, pick in (("gpu", lambda op: "gpu"),
                       ("dla", lambda op: "dla0" if dla.supports(op.kind) else "gpu")):
        place = Placement.of({v.name: Assignment(pick(v.ops[0]), DType.FP16)
                              for v in prob.vertices})
        path = tmp_path / f"{name}.json"
        save_plan(build_plan(prob, evaluate(prob, place), model_ref=str(files["resnet"]),
                             strategy="test"), path)
        plans[name] = path
    assert set(load_plan(plans["dla"]).devices_used()) == {"dla0", "gpu"}  # the fallback
    proc = run("serve", str(plans["gpu"]), "--replica-plan", str(plans["dla"]), "--router",
               "weighted", "--rate", "2000", "--requests", "2000", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    util = data["utilization"]
    assert "gpu" in util and "dla0" in util and not any("/" in k for k in util)
    assert sum(data["by_replica"]) == 2000 and min(data["by_replica"]) > 0


def test_the_report_and_the_sheet_show_every_model(planned: dict[str, Path],
                                                   tmp_path: Path) -> None:
    html, csv = tmp_path / "r.html", tmp_path / "s.csv"
    made = run_together(["report", str(planned["a_first"]), "--out", str(html)],
                        ["sheet", str(planned["a_first"]), "--out", str(csv)])
    for p in made:
        assert p.returncode == 0, p.stderr
    page = html.read_text()
    assert "Models (a request of each at once)" in page
    rows = csv.read_text().splitlines()[1:]
    assert {r.split("/", 1)[0] for r in rows} == {"a", "b"}  # every op row names its model
