"""validate checks the plan before it loads or runs anything (issue 10).

- a placement naming a device the machine lacks (``cpu9``) is refused, naming the device
  (it used to run everything on cpu0 and exit 0);
- a plan on ``local`` uses only kernels the local backends have: the search never puts a
  non-int8 kind in int8 on a local device (``graph.ir.INT8_KINDS``), and validate refuses
  such a plan naming the op and why (it used to fail mid-run, exit 1);
- a plan whose model is a hostile ``.pt2`` is refused with exit 2 and the payload never runs.

The CLI tests run on this machine's devices as the test helpers describe them (a seeded
``local`` cache), so nothing is probed.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from placewise.cost.roofline import RooflineModel
from placewise.errors import InputError, UnsupportedError
from placewise.graph.ir import INT8_KINDS, OpKind
from placewise.plan import Plan, build_plan, load_plan, plan_records_json, save_plan
from placewise.units import DType
from placewise.validate import validate_plan
from tests.cli_runner import run_cli
from tests.runtime.helpers import local_machine, tiny_plan, tiny_source
from tests.test_cli import assert_bad_input, run_together

BIG_MLP = "zoo:mlp?layers=2&hidden=1024&in_features=1024&out_features=1024"


def _with_placement(plan: Plan, vertex: str, **change: str) -> Plan:
    placement = {k: dict(v) for k, v in plan.placement.items()}
    placement[vertex].update(change)
    return plan.model_copy(update={"placement": placement})


# ---- the library ---------------------------------------------------------------------------


def test_a_device_the_machine_lacks_is_refused_before_the_model_loads(tmp_path: Path) -> None:
    plan, _ = tiny_plan()
    bad = _with_placement(plan, next(iter(plan.placement)), device="cpu9")
    # the model reference leads nowhere: the plan's own error comes first
    bad = bad.model_copy(update={"model": str(tmp_path / "absent.pt2")})
    path = tmp_path / "plan.json"
    save_plan(bad, path)
    with pytest.raises(InputError) as err:
        validate_plan(path, machine=local_machine(), requests=1)
    assert "'cpu9'" in err.value.problem and "does not have" in err.value.problem
    assert err.value.file == str(path) and err.value.place == "check support"


def test_int8_on_a_kind_without_an_int8_kernel_is_refused(tmp_path: Path) -> None:
    plan, _ = tiny_plan()
    relu = next(v for v, r in plan.regions.items() if plan.ops[r.ops[0]].kind is OpKind.RELU)
    bad = _with_placement(plan, relu, device="cpu1", dtype="int8")
    with pytest.raises(InputError) as err:
        validate_plan(bad, source=tiny_source(), machine=local_machine(), requests=1)
    msg = err.value.problem
    assert f"op {plan.regions[relu].ops[0]}" in msg and "int8" in msg and "relu" in msg
    assert "int8 kernels only for conv, gemm, linear, matmul" in msg


def test_the_roofline_has_no_int8_kernel_for_other_kinds_on_local_devices() -> None:
    m = local_machine()
    g = tiny_source().graph
    assert g is not None
    model = RooflineModel(m)
    relu = next(o for o in g.ops if o.kind is OpKind.RELU)
    lin = next(o for o in g.ops if o.kind is OpKind.LINEAR)
    assert model.op_cost(g, lin, "cpu1", DType.INT8).total_s > 0
    with pytest.raises(UnsupportedError, match="int8 kernels only for"):
        model.op_cost(g, relu, "cpu1", DType.INT8)
    with pytest.raises(UnsupportedError, match="int8 kernels only for"):
        model.region_cost(g, [lin, relu], "cpu1", DType.INT8)
    # a preset's devices describe their own kernels: no local rule there
    from placewise.hardware.load import load_machine

    preset = load_machine("h100-sxm-server")
    gpu = next(d for d in preset.devices if DType.INT8 in d.dtypes)
    assert RooflineModel(preset).op_cost(g, relu, gpu.name, DType.INT8).total_s > 0


# ---- the command line ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def xdg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An XDG cache holding the test machine as this host's probed ``local`` spec."""
    from placewise.hardware.probe import host_fingerprint, local_cache_path

    data: dict[str, Any] = local_machine().model_dump(mode="json")
    data["name"] = "local"
    data["tags"] = {**(data.get("tags") or {}), "fingerprint": host_fingerprint()}
    root = tmp_path_factory.mktemp("xdg")
    path = root / "placewise" / local_cache_path().name
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(data))
    return root


def _env(xdg: Path) -> dict[str, str]:
    return dict(os.environ, COLUMNS="120", TERM="dumb", PYTHONHASHSEED="0",
                XDG_CACHE_HOME=str(xdg))


def _run(xdg: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(args, env=_env(xdg), timeout=600)


def _run_together(xdg: Path, commands: list[list[str]]
                  ) -> list[subprocess.CompletedProcess[str]]:
    """``_run`` of each command, all started at once (for commands that measure nothing:
    nothing times itself beside another)."""
    return run_together(*commands, env=_env(xdg))


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from placewise.graph import zoo

    path = tmp_path_factory.mktemp("model") / "mlp.onnx"
    zoo.export_onnx("mlp", {"layers": 2, "hidden": 1024, "in_features": 1024,
                            "out_features": 1024}, path, dynamic_batch=False)
    return path


@pytest.fixture(scope="module")
def greedy_plans(xdg: Path, model_file: Path, tmp_path_factory: pytest.TempPathFactory
                 ) -> dict[str, tuple[subprocess.CompletedProcess[str], Path]]:
    """``plan MODEL --hw local --strategy greedy --precision int8`` of the zoo model and of
    the file, the two
    processes side by side (planning measures nothing)."""
    folder = tmp_path_factory.mktemp("plan")
    models = {"zoo": BIG_MLP, "file": str(model_file)}
    outs = {k: folder / f"greedy-{k}.json" for k in models}
    # int8 allowed where it pays, with a budget that holds anything (rel_l2 <= 1); a limit
    # whose evidence share probes every candidate and whose wall-clock backstop stays far
    # on a loaded machine (greedy and the evidence's count end the command long before it)
    procs = _run_together(xdg, [["plan", m, "--hw", "local", "--strategy", "greedy",
                                 "--precision", "int8", "--quality-budget", "rel_l2=1",
                                 "--time-limit", "300", "--out", str(outs[k])]
                                for k, m in models.items()])
    return {k: (proc, outs[k]) for k, proc in zip(models, procs, strict=True)}


@pytest.fixture(scope="module", params=["zoo", "file"])
def greedy_plan(request: pytest.FixtureRequest,
                greedy_plans: dict[str, tuple[subprocess.CompletedProcess[str], Path]]
                ) -> Path:
    proc, out = greedy_plans[request.param]
    assert proc.returncode == 0, proc.stderr
    return out


def _int8_vertices(plan: dict[str, Any]) -> dict[str, list[str]]:
    return {v: [plan["ops"][o]["kind"] for o in plan["regions"][v]["ops"]]
            for v, a in plan["placement"].items() if a["dtype"] == "int8"}


def _fused(plan: dict[str, Any], vertex: str) -> bool:
    kinds = [plan["ops"][o]["kind"] for o in plan["regions"][vertex]["ops"]]
    return len(kinds) == 2 and kinds[0] in ("linear", "gemm") and kinds[1] == "relu"


def test_greedy_on_local_uses_only_kernels_the_backends_have(greedy_plan: Path,
                                                             xdg: Path) -> None:
    plan = plan_records_json(load_plan(greedy_plan))
    int8 = _int8_vertices(plan)
    assert int8, "int8 pays on this machine where a kernel exists (the lone last linear)"
    kinds = {k.value for k in INT8_KINDS}
    for v, ops in int8.items():
        assert set(ops) <= kinds, (v, ops)
    # the fused linear+relu (gemm+relu) vertices are not: relu has no int8 kernel here
    assert any(_fused(plan, v) for v in plan["placement"])
    proc = _run(xdg, "check", str(greedy_plan), "--hw", "local")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_validate_names_the_op_without_an_int8_kernel(greedy_plan: Path, xdg: Path,
                                                      tmp_path: Path) -> None:
    plan = plan_records_json(load_plan(greedy_plan))
    fused = next(v for v in plan["regions"] if _fused(plan, v))
    plan["placement"][fused] = {"device": "cpu1", "dtype": "int8"}
    bad = tmp_path / "int8.json"
    bad.write_text(json.dumps(plan))
    relu = plan["regions"][fused]["ops"][1]
    assert_bad_input(_run(xdg, "validate", str(bad)), str(bad), f"op {relu}", "int8",
                     "int8 kernels only for")


def test_validate_names_a_device_the_machine_lacks(greedy_plan: Path, xdg: Path,
                                                   tmp_path: Path) -> None:
    plan = plan_records_json(load_plan(greedy_plan))
    vertex = sorted(plan["placement"])[0]
    plan["placement"][vertex]["device"] = "cpu9"
    bad = tmp_path / "cpu9.json"
    bad.write_text(json.dumps(plan))
    assert_bad_input(_run(xdg, "validate", str(bad)), str(bad), "'cpu9'", "does not have")


def test_validate_of_a_plan_whose_model_is_hostile(xdg: Path, tmp_path: Path) -> None:
    """The plan is made for a clean export; the file is then swapped for one with a pickle
    added at data/constants/model.pt: exit 2 naming the entry, and the pickle never runs."""
    from placewise.hardware.probe import load_local
    from placewise.runtime.opexec import load_source
    from placewise.schedule import Placement, evaluate
    from tests.graph.test_pt2_hostile import VARIANTS, _save
    from tests.runtime.helpers import problem_of

    clean = _save(tmp_path / "model.pt2")
    plan = tmp_path / "plan.json"
    # planned in this process for the CLI's `local` (the seeded cache), so that only the
    # validate runs start an interpreter
    local = load_local(xdg / "placewise")
    prob = problem_of(load_source(str(clean)), local)
    ev = evaluate(prob, Placement.uniform(prob.vertex_names, "cpu0", DType.FP32))
    save_plan(build_plan(prob, ev, model_ref=str(clean), strategy="single:cpu0"), plan)
    got = _run(xdg, "check", str(plan), "--hw", "local", "--json")  # a sound plan for local
    assert got.returncode == 0 and json.loads(got.stdout)["ok"], got.stdout + got.stderr
    variants = ("pickle at data/constants/model.pt", "pickle at data/weights/model.pt",
                "old-format files at the top", "models/NAME without .json")
    cases = []
    for i, variant in enumerate(variants):
        build, entry, _ = VARIANTS[variant]
        folder = tmp_path / f"hostile{i}"
        folder.mkdir()
        marker = folder / "MARKER"
        hostile = build(clean, folder / "model.pt2", marker)
        data = json.loads(plan.read_text())
        data["model"] = str(hostile)
        swapped = folder / "swapped.json"
        swapped.write_text(json.dumps(data))
        cases.append((hostile, entry, marker, ["validate", str(swapped)]))
    # the four refusals run at once: each is refused before anything loads or runs
    for (hostile, entry, marker, _), got in zip(
            cases, _run_together(xdg, [c[-1] for c in cases]), strict=True):
        assert_bad_input(got, str(hostile), f"entry {entry!r}")
        assert not marker.exists()


def test_validate_takes_the_recorded_calibration(tmp_path: Path) -> None:
    """A plan that records its calibration (``plan --calibration``) is validated against it
    without the flag: its stable tags are compared before anything runs, and a calibration
    no longer where the plan recorded it is one line naming it (exit 2)."""
    from placewise.adapt.recalibrate import empty_calibration
    from placewise.plan_sources import sources_json
    from placewise.schedule import evaluate
    from placewise.validate.compare import machine_tags
    from tests.adapt.test_recalibrate import _cli, _placement, _problem
    from tests.runtime.helpers import TINY_MLP

    cal = empty_calibration(local_machine(), {**machine_tags(), "torch": "0.0-old"})
    cal_file = cal.save(tmp_path / "cal.json")
    p = _problem(cal)
    plan = build_plan(p, evaluate(p, _placement(p)), model_ref=TINY_MLP, strategy="test",
                      sources=sources_json("local", p.machine, cal_file, cal.fingerprint()))
    assert plan.sources is not None and plan.sources.machine is None  # local: no file
    plan_file = tmp_path / "plan.json"
    save_plan(plan, plan_file)
    code, _, err = _cli("validate", str(plan_file))
    assert code == 2 and "torch: '0.0-old' vs" in err and "--allow-mismatch" in err, err
    cal_file.rename(tmp_path / "moved.json")
    code, out, err = _cli("validate", str(plan_file))
    assert code == 2 and not out and len(err.strip().splitlines()) == 1, err
    assert "sources.calibration" in err and "--calibration NEWPATH" in err, err
    code, _, err = _cli("validate", str(plan_file), "--calibration",
                        str(tmp_path / "moved.json"))
    assert code == 2 and "torch: '0.0-old' vs" in err, err  # pointed at: checked as before
