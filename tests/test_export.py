"""`placewise export`: partitions as ONNX files and a manifest, chained by plain onnxruntime.

Round trips (the chain of partition files gives the whole model's outputs) for a zoo model
on this machine's devices, an ONNX file and a .pt2 program, and preset plans whose
partitions record CUDA / TensorRT (DLA) / OpenVINO providers; the README's chaining code run
as written, in a process without placewise; the manifest's schema; bad input (exit 2,
nothing written).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import onnxruntime as ort
import pytest
import torch
import yaml

from placewise.cost.load import load_cost_model
from placewise.errors import InputError, SpecError, UnsupportedError
from placewise.export import (
    GRAPH_INPUT,
    GRAPH_OUTPUT,
    MANIFEST_FILE,
    export_plan,
    load_manifest,
    manifest_from_json,
    manifest_json_schema,
)
from placewise.graph.zoo import export_onnx, export_pt2
from placewise.hardware.load import load_machine
from placewise.hardware.spec import Machine
from placewise.plan import Plan, build_plan, save_plan
from placewise.runtime.backends.onnxruntime import provider_for
from placewise.runtime.opexec import ModelSource, load_source
from placewise.schedule import Assignment, Placement, Problem, evaluate
from placewise.units import DType
from tests.cli_runner import run_cli
from tests.runtime.helpers import local_machine, tiny_plan, tiny_source
from tests.test_cli import assert_bad_input, run_together

ROOT = Path(__file__).parents[1]
SCHEMA_FILE = ROOT / "src" / "placewise" / "schemas" / "manifest.schema.json"
README = ROOT / "README.md"
MLP = {"layers": 2, "hidden": 32, "in_features": 16, "out_features": 8}
BERT = {"layers": 1, "hidden": 32, "heads": 2, "seq": 8, "vocab": 50}


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="120", TERM="dumb", PYTHONHASHSEED="0")
    return run_cli(args, env=env, cwd=cwd, timeout=600)




OnnxOf = Callable[[str, dict[str, Any], Path], Path]


@pytest.fixture(scope="module")
def onnx_of(tmp_path_factory: pytest.TempPathFactory) -> OnnxOf:
    """``onnx_of(name, options, dest)``: the zoo model exported to ONNX at ``dest`` (the
    export is made once per module and copied: the same bytes every time)."""
    folder = tmp_path_factory.mktemp("models")
    made: dict[str, Path] = {}

    def copy(name: str, options: dict[str, Any], dest: Path) -> Path:
        key = json.dumps([name, options], sort_keys=True)
        if key not in made:
            made[key] = export_onnx(name, options, folder / f"{len(made)}-{name}.onnx")
        shutil.copyfile(made[key], dest)
        return dest

    return copy


def listing(folder: Path) -> list[str]:
    """Every path under ``folder``, hidden ones included."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def rel_l2(got: np.ndarray[Any, Any], want: np.ndarray[Any, Any]) -> float:
    return float(np.linalg.norm(got.astype(np.float64) - want.astype(np.float64))
                 / max(np.linalg.norm(want.astype(np.float64)), 1e-30))


def chain(folder: Path, feeds: dict[str, np.ndarray[Any, Any]]) -> dict[str, Any]:
    """Run the manifest's partitions in order, each in its own CPU session (the manifest's
    providers are for the hardware it was planned for)."""
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    values = dict(feeds)
    for part in manifest["partitions"]:
        sess = ort.InferenceSession(str(folder / part["file"]),
                                    providers=["CPUExecutionProvider"])
        assert sorted(i.name for i in sess.get_inputs()) == \
            sorted(t["name"] for t in part["inputs"])
        names = [t["name"] for t in part["outputs"]]
        feed = {t["name"]: values[t["name"]] for t in part["inputs"]}
        for t in part["inputs"]:  # the manifest says what to feed
            assert list(feed[t["name"]].shape) == t["shape"], t
            assert feed[t["name"]].dtype == np.dtype(t["dtype"]), t
        got = sess.run(names, feed)
        for t, g in zip(part["outputs"], got, strict=True):
            assert list(g.shape) == t["shape"] and g.dtype == np.dtype(t["dtype"]), t
        values.update(zip(names, got, strict=True))
    return {t["name"]: values[t["name"]] for t in manifest["graph_outputs"]}


def random_feeds(manifest: Any, seed: int = 0) -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(seed)
    out = {}
    for t in manifest.graph_inputs:
        if t.dtype.startswith("int"):
            out[t.name] = rng.integers(0, 10, t.shape).astype(t.dtype)
        else:
            out[t.name] = rng.standard_normal(t.shape).astype(t.dtype)
    return out


def torch_reference(src: ModelSource, feeds: dict[str, np.ndarray[Any, Any]]) -> list[Any]:
    assert src.graph is not None
    mod = src.exported_program.module()
    with torch.no_grad():
        out = mod(*[torch.from_numpy(feeds[n]) for n in src.graph.inputs])
    outs = out if isinstance(out, tuple | list) else (out,)
    return [o.numpy() for o in outs]


def check_manifest(folder: Path, manifest: Any) -> dict[str, Any]:
    """What every export must satisfy: the files, the schema, the loader, the links."""
    data = json.loads((folder / MANIFEST_FILE).read_text())
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(data, schema, cls=jsonschema.Draft202012Validator)
    assert load_manifest(folder) == manifest
    assert listing(folder) == sorted([MANIFEST_FILE, *(p.file for p in manifest.partitions),
                                      *{p.external_data for p in manifest.partitions
                                        if p.external_data}])  # a device's shared file once
    made: dict[str, str] = {}
    for p in manifest.partitions:
        for t in p.inputs:
            assert t.from_ == GRAPH_INPUT or made[t.name] == t.from_  # execution order
        for t in p.outputs:
            made[t.name] = p.name
            assert t.to, t  # a partition output always goes somewhere
    for go in manifest.graph_outputs:
        assert made[go.name] == go.from_
        prod = next(p for p in manifest.partitions if p.name == go.from_)
        assert GRAPH_OUTPUT in next(t.to for t in prod.outputs if t.name == go.name)
    assert data["fingerprints"]["plan"].startswith("sha256:")
    return data


def plan_on(machine: Machine, src: ModelSource, assign: dict[str, tuple[str, DType]],
            default: tuple[str, DType], model_ref: str) -> Plan:
    """A plan of ``src`` on ``machine``: one vertex per op, ``assign`` (vertex -> device,
    dtype) and ``default`` for the rest."""
    assert src.graph is not None
    prob = Problem(src.graph, None, machine, load_cost_model(machine, None), batch=1)
    place = {v: Assignment(*assign.get(v, default)) for v in prob.vertex_names}
    ev = evaluate(prob, Placement.of(place))
    return build_plan(prob, ev, model_ref=model_ref, strategy="test")


def thirds(names: list[str], devices: list[str]) -> dict[str, str]:
    k = len(devices)
    return {v: devices[min(k - 1, i * k // len(names))] for i, v in enumerate(names)}


# ---- providers -------------------------------------------------------------------------------
def test_providers_of_every_preset_device() -> None:
    want = {
        ("h100-sxm-server", "gpu1"): ("CUDAExecutionProvider", {"device_id": "1"}),
        ("a100-pcie-server", "gpu"): ("CUDAExecutionProvider", {"device_id": "0"}),
        ("grace-hopper-gh200", "gpu"): ("CUDAExecutionProvider", {"device_id": "0"}),
        ("jetson-agx-orin", "gpu"): ("CUDAExecutionProvider", {"device_id": "0"}),
        ("jetson-agx-orin", "dla1"): ("TensorrtExecutionProvider", {
            "device_id": "0", "trt_dla_enable": "True", "trt_dla_core": "1",
            "trt_int8_enable": "True"}),
        ("laptop-soc", "gpu"): ("OpenVINOExecutionProvider", {"device_type": "GPU"}),
        ("laptop-soc", "npu"): ("OpenVINOExecutionProvider", {"device_type": "NPU"}),
        ("laptop-soc", "cpu"): ("CPUExecutionProvider", {}),
    }
    for (preset, dev), (name, options) in want.items():
        p = provider_for(load_machine(preset).device(dev), DType.INT8)
        assert (p.name, p.options) == (name, options), (preset, dev, p)
    gpu = provider_for(load_machine("h100-sxm-server").device("gpu0"))
    assert [a.name for a in gpu.alternatives] == ["TensorrtExecutionProvider"]
    assert provider_for(load_machine("jetson-agx-orin").device("dla0"), DType.FP16) \
        .options["trt_fp16_enable"] == "True"
    for d in local_machine().devices:  # this machine's devices
        assert provider_for(d).name == "CPUExecutionProvider"


def test_a_device_of_an_unknown_vendor_has_no_guessed_provider() -> None:
    data = load_machine("h100-sxm-server").model_dump(mode="json")
    data["devices"][1]["model"] = "Some Vendor X1"
    m = Machine.model_validate(data)
    with pytest.raises(UnsupportedError, match=r"gpu0.*Some Vendor X1"):
        provider_for(m.device("gpu0"))


# ---- round trips -----------------------------------------------------------------------------
def test_zoo_plan_on_this_machines_devices(tmp_path: Path) -> None:
    plan, _ = tiny_plan(int8=False)
    src = tiny_source()
    out = tmp_path / "export"
    steps: list[tuple[str, float]] = []
    manifest = export_plan(plan, out, machine=local_machine(), source=src,
                           progress=lambda m, f: steps.append((m, f)))
    check_manifest(out, manifest)
    assert [f for _, f in steps] == sorted(f for _, f in steps) and steps[-1][1] == 1.0
    assert any("compiling" in m for m, _ in steps)
    devices = {d.name: d for d in local_machine().devices}
    assert len(manifest.partitions) >= 3
    for p in manifest.partitions:
        assert p.provider.name == "CPUExecutionProvider" and p.precision == "fp32"
        assert p.cores == tuple(devices[p.device].cores or ())
        assert p.threads == len(p.cores or ())
        assert p.file == f"{p.name}.onnx" and p.external_data is None
    # every plan vertex is in exactly one partition
    tasks = [t for p in manifest.partitions for t in p.tasks]
    assert sorted(tasks) == sorted(plan.placement)
    feeds = random_feeds(manifest)
    got = chain(out, feeds)
    want = torch_reference(src, feeds)
    assert len(got) == len(want)
    for g, w in zip(got.values(), want, strict=True):
        assert rel_l2(g, w) <= 1e-5


def test_onnx_file_plan_with_an_int8_partition(tmp_path: Path, onnx_of: OnnxOf) -> None:
    model = onnx_of("mlp", MLP, tmp_path / "mlp.onnx")
    src = load_source(str(model), batch=1)
    assert src.graph is not None
    ops = [op.name for op in src.graph.ops]  # gemm, relu, gemm, relu, gemm
    assert src.graph.op(ops[2]).kind.value == "gemm"
    plan = plan_on(local_machine(), src, {ops[2]: ("cpu1", DType.INT8)}, ("cpu0", DType.FP32),
                   str(model))
    out = tmp_path / "export"
    manifest = export_plan(plan, out, machine=local_machine())
    check_manifest(out, manifest)
    assert {p.precision for p in manifest.partitions} == {"fp32", "int8"}
    # the int8 partition is onnxruntime's dynamic quantization; its float boundary stays fp32
    q = next(p for p in manifest.partitions if p.precision == "int8")
    import onnx

    kinds = {n.op_type for n in onnx.load(str(out / q.file)).graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= kinds
    assert all(t.dtype == "float32" for t in (*q.inputs, *q.outputs))
    feeds = random_feeds(manifest)
    whole = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    want = whole.run(None, feeds)
    got = list(chain(out, feeds).values())
    assert 0 < rel_l2(got[0], want[0]) < 0.05  # int8 is close, not exact


def write_machine_yaml(machine: Machine, path: Path) -> Path:
    path.write_text(yaml.safe_dump(machine.model_dump(mode="json"), sort_keys=False))
    assert load_machine(path).fingerprint() == machine.fingerprint()
    return path


def test_pt2_plan_from_the_command_line(tmp_path: Path) -> None:
    model = tmp_path / "mlp.pt2"
    export_pt2("mlp", MLP, model)
    src = load_source(str(model), batch=1)
    plan, _ = tiny_plan(src, int8=False, model_ref=str(model))
    plan_file = tmp_path / "plan.json"
    save_plan(plan, plan_file)
    hw = write_machine_yaml(local_machine(), tmp_path / "machine.yaml")
    out, refused_out = tmp_path / "export", tmp_path / "refused"
    # the plan's machine is a spec file: without it, export says what to give (the two
    # runs side by side, each with its own folder)
    refused, proc = run_together(["export", str(plan_file), "--out", str(refused_out)],
                                 ["export", str(plan_file), "--out", str(out), "--hw", str(hw),
                                  "--json"])
    assert_bad_input(refused, "--hw")
    assert not refused_out.exists()
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    manifest = load_manifest(out / MANIFEST_FILE)
    check_manifest(out, manifest)
    assert summary["out"] == str(out)
    assert [p["name"] for p in summary["partitions"]] == [p.name for p in manifest.partitions]
    assert summary["files"] == len(listing(out))
    assert summary["fingerprints"] == manifest.fingerprints.model_dump()
    assert manifest.source_format == "torch_export"
    feeds = random_feeds(manifest)
    want = torch_reference(src, feeds)
    for g, w in zip(chain(out, feeds).values(), want, strict=True):
        assert rel_l2(g, w) <= 1e-5


PRESETS = [
    ("h100-sxm-server", ["cpu", "gpu0", "gpu1"], False),
    ("laptop-soc", ["cpu", "gpu"], False),
    ("jetson-agx-orin", ["cpu", "gpu"], True),
]


@pytest.fixture(scope="module")
def preset_exports(tmp_path_factory: pytest.TempPathFactory, onnx_of: OnnxOf
                   ) -> dict[str, dict[str, Any]]:
    """Each preset's plan of bert exported by ``placewise export`` (preset -> its source,
    machine, model file, export folder and finished process): ONNX bert on h100 and
    laptop-soc; zoo bert (torch: DLAs run its linears) on Orin. The three export processes
    run side by side (exporting measures nothing)."""
    cases: dict[str, dict[str, Any]] = {}
    for preset, devices, dla in PRESETS:
        tmp = tmp_path_factory.mktemp(preset)
        model = tmp / "bert.onnx"
        if not dla:
            onnx_of("bert", BERT, model)
        ref = "zoo:bert?" + "&".join(f"{k}={v}" for k, v in BERT.items()) if dla else str(model)
        src = load_source(ref, batch=1)
        m = load_machine(preset)
        assert src.graph is not None
        prob = Problem(src.graph, None, m, load_cost_model(m, None))
        assign = {v: (d, DType.FP32) for v, d in thirds(prob.vertex_names, devices).items()}
        if dla:  # one linear on a DLA core, in int8 (DLAs run int8 and fp16 only)
            lin = [v.name for v in prob.vertices if v.ops[0].kind.value == "linear"]
            assert lin
            assign[lin[len(lin) // 2]] = ("dla1", DType.INT8)
        plan = plan_on(m, src, assign, (devices[0], DType.FP32), ref)
        plan_file = tmp / "plan.json"
        save_plan(plan, plan_file)
        cases[preset] = {"src": src, "machine": m, "model": model, "plan": plan_file,
                         "out": tmp / "export"}
    procs = run_together(*[["export", str(c["plan"]), "--out", str(c["out"])]
                           for c in cases.values()])
    for c, proc in zip(cases.values(), procs, strict=True):
        c["proc"] = proc
    return cases


@pytest.mark.parametrize("preset,devices,dla", PRESETS)
def test_preset_plan_records_the_providers_of_its_hardware(
        preset_exports: dict[str, dict[str, Any]], preset: str, devices: list[str],
        dla: bool) -> None:
    """ONNX bert on h100 and laptop-soc; zoo bert (torch: DLAs run its linears) on Orin."""
    case = preset_exports[preset]
    src, m, model, out, proc = (case[k] for k in ("src", "machine", "model", "out", "proc"))
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())  # rich wraps long lines
    assert f"for {preset}:" in text and "partitions, in execution order" in text
    assert "one .onnx per partition and manifest.json" in text
    manifest = load_manifest(out)
    check_manifest(out, manifest)
    assert manifest.machine == preset
    providers = {p.device: p.provider for p in manifest.partitions}
    assert set(providers) == set(devices) | ({"dla1"} if dla else set())
    for dev, prov in providers.items():
        assert prov.name == provider_for(m.device(dev), DType.INT8 if dev.startswith("dla")
                                         else DType.FP32).name
    assert providers["cpu"].name == "CPUExecutionProvider"
    accel = {prov.name for dev, prov in providers.items() if dev != "cpu"}
    assert accel <= {"CUDAExecutionProvider", "TensorrtExecutionProvider",
                     "OpenVINOExecutionProvider"} and accel
    if dla:
        assert providers["dla1"].options["trt_dla_core"] == "1"
    for p in manifest.partitions:
        assert p.cores is None and p.threads >= 1  # presets: nothing to pin here
    # the files run here in onnxruntime's CPU provider and chain to the whole model
    feeds = random_feeds(manifest)
    if dla:
        want = dict(zip(src.graph.outputs, torch_reference(src, feeds), strict=True))
    else:
        whole = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        want = dict(zip([o.name for o in whole.get_outputs()], whole.run(None, feeds),
                        strict=True))
    got = chain(out, feeds)
    assert set(got) == set(want)
    for name, g in got.items():
        err = rel_l2(g, want[name])
        if dla:  # one int8 linear: close, not exact
            assert 0 < err < 0.05
        else:
            assert err <= 1e-5


def readme_snippet() -> str:
    text = README.read_text()
    section = text.split("## Running an export with plain onnxruntime", 1)[1]
    m = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert m, "the README section has no python block"
    return m.group(1)


def test_the_readme_chains_an_export_without_placewise(tmp_path: Path,
                                                       onnx_of: OnnxOf) -> None:
    code = readme_snippet()
    assert "placewise" not in code
    model = onnx_of("bert", BERT, tmp_path / "bert.onnx")
    src = load_source(str(model), batch=1)
    m = load_machine("h100-sxm-server")
    assert src.graph is not None
    names = Problem(src.graph, None, m, load_cost_model(m, None)).vertex_names
    assign = {v: (d, DType.FP32) for v, d in thirds(names, ["cpu", "gpu0"]).items()}
    save_plan(plan_on(m, src, assign, ("cpu", DType.FP32), str(model)), tmp_path / "plan.json")
    proc = cli("export", "plan.json", "--out", "bert-export", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    check = ("\nimport sys\n"
             "assert not [n for n in sys.modules if n.startswith('placewise')]\n"
             "assert errors and max(errors.values()) <= 1e-5, errors\n"
             "print('README-OK', len(manifest['partitions']))\n")
    run = subprocess.run([sys.executable, "-c", code + check], capture_output=True,
                         text=True, cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "README-OK" in run.stdout


# ---- the manifest file ------------------------------------------------------------------------
def test_published_schema_is_up_to_date() -> None:
    text = json.dumps(manifest_json_schema(), indent=2, sort_keys=True) + "\n"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        SCHEMA_FILE.write_text(text)
    assert SCHEMA_FILE.read_text() == text, \
        "manifest.schema.json is stale: rerun with UPDATE_GOLDEN=1"


@pytest.fixture(scope="module")
def small_export(tmp_path_factory: pytest.TempPathFactory, onnx_of: OnnxOf) -> Path:
    """An ONNX mlp planned on h100 (cpu then gpu0), exported: quick to make."""
    tmp = tmp_path_factory.mktemp("small")
    model = onnx_of("mlp", MLP, tmp / "mlp.onnx")
    src = load_source(str(model), batch=1)
    m = load_machine("h100-sxm-server")
    assert src.graph is not None
    names = Problem(src.graph, None, m, load_cost_model(m, None)).vertex_names
    assign = {v: (d, DType.FP32) for v, d in thirds(names, ["cpu", "gpu0"]).items()}
    save_plan(plan_on(m, src, assign, ("cpu", DType.FP32), str(model)), tmp / "plan.json")
    export_plan(tmp / "plan.json", tmp / "export")
    return tmp


def test_load_manifest_refuses_what_does_not_hold_together(small_export: Path) -> None:
    data = json.loads((small_export / "export" / MANIFEST_FILE).read_text())
    assert len(data["partitions"]) >= 2

    def refused(mutate: Any, *needles: str) -> None:
        d = json.loads(json.dumps(data))
        mutate(d)
        with pytest.raises(SpecError) as info:
            manifest_from_json(json.dumps(d), file="m.json")
        for n in needles:
            assert n in str(info.value), (n, str(info.value))

    refused(lambda d: d.update(format_version=2), "format_version", "version 2")
    refused(lambda d: d["partitions"][0].update(file="../escape.onnx"), "partitions[0].file")
    refused(lambda d: d["partitions"][1]["inputs"][0].update({"from": "nowhere"}),
            "partitions[1]", "does not make")
    refused(lambda d: d["partitions"].reverse(), "does not make")
    refused(lambda d: d["graph_outputs"][0].update({"from": GRAPH_INPUT}), "graph_outputs[0]")
    refused(lambda d: d["partitions"][0].update(threads=0), "partitions[0].threads")
    refused(lambda d: d["partitions"][0]["inputs"][0].update(shape=[1.5]), "shape")
    # a file the manifest names must be there
    broken = small_export / "broken"
    broken.mkdir()
    (broken / MANIFEST_FILE).write_text(json.dumps(data))
    with pytest.raises(SpecError, match=r"partitions\[0\].*\.file.*not a file"):
        load_manifest(broken)
    with pytest.raises(SpecError, match="no such file"):
        load_manifest(small_export / "nothing-here")
    (broken / "x.json").write_text("[" * 200 + "]" * 200)
    with pytest.raises(SpecError, match="nested"):
        load_manifest(broken / "x.json")


def test_an_fp16_plan_is_refused_before_anything_is_written(tmp_path: Path,
                                                            onnx_of: OnnxOf) -> None:
    model = onnx_of("mlp", MLP, tmp_path / "mlp.onnx")
    src = load_source(str(model), batch=1)
    plan = plan_on(load_machine("h100-sxm-server"), src, {}, ("gpu0", DType.FP16), str(model))
    with pytest.raises(UnsupportedError, match="fp16"):
        export_plan(plan, tmp_path / "export")
    assert listing(tmp_path) == ["mlp.onnx"]


# ---- bad input: exit 2, nothing half-written -----------------------------------------------------
@pytest.fixture
def onnx_plan(tmp_path: Path, small_export: Path) -> Path:
    """A copy of the small export's model and plan in a fresh folder."""
    for name in ("mlp.onnx", "plan.json"):
        (tmp_path / name).write_bytes((small_export / name).read_bytes())
    plan = json.loads((tmp_path / "plan.json").read_text())
    plan["model"] = str(tmp_path / "mlp.onnx")
    (tmp_path / "plan.json").write_text(json.dumps(plan, indent=2, sort_keys=True) + "\n")
    return tmp_path / "plan.json"


def test_a_missing_model_file(onnx_plan: Path) -> None:
    (onnx_plan.parent / "mlp.onnx").unlink()
    before = listing(onnx_plan.parent)
    assert_bad_input(cli("export", str(onnx_plan), "--out", str(onnx_plan.parent / "out")),
                     "mlp.onnx", "no such file")
    assert listing(onnx_plan.parent) == before


def test_a_changed_model_file(onnx_plan: Path) -> None:
    export_onnx("mlp", {**MLP, "hidden": 24}, onnx_plan.parent / "mlp.onnx")
    before = listing(onnx_plan.parent)
    assert_bad_input(cli("export", str(onnx_plan), "--out", str(onnx_plan.parent / "a" / "b")),
                     "fingerprints.graph", "another graph")
    assert listing(onnx_plan.parent) == before  # not even the parent folder "a"


def test_an_output_folder_with_other_files(onnx_plan: Path) -> None:
    out = onnx_plan.parent / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    before = listing(onnx_plan.parent)
    assert_bad_input(cli("export", str(onnx_plan), "--out", str(out)), str(out),
                     "keep.txt", "--force")
    assert listing(onnx_plan.parent) == before
    proc = cli("export", str(onnx_plan), "--out", str(out), "--force")
    assert proc.returncode == 0, proc.stderr
    manifest = load_manifest(out)
    check_manifest(out, manifest)  # replaced as a whole: keep.txt is gone, nothing beside
    assert sorted(os.listdir(onnx_plan.parent)) == ["mlp.onnx", "out", "plan.json"]
    # an empty folder is fine without --force
    empty = onnx_plan.parent / "empty"
    empty.mkdir()
    assert export_plan(onnx_plan, empty) == manifest
    assert load_manifest(empty) == manifest


def test_large_weights_go_to_external_data(onnx_plan: Path) -> None:
    out = onnx_plan.parent / "out"
    manifest = export_plan(onnx_plan, out, external_data_bytes=1024)  # every one is "large"
    check_manifest(out, manifest)
    # one weights file per device, shared by that device's partitions
    assert all(p.external_data == f"weights.{p.device}.bin" for p in manifest.partitions)
    whole = ort.InferenceSession(str(onnx_plan.parent / "mlp.onnx"),
                                 providers=["CPUExecutionProvider"])
    feeds = random_feeds(manifest)
    for g, w in zip(chain(out, feeds).values(), whole.run(None, feeds), strict=True):
        assert rel_l2(g, w) <= 1e-5


def test_force_never_deletes_the_plan_or_the_current_folder(onnx_plan: Path) -> None:
    folder = onnx_plan.parent
    before = listing(folder)
    assert_bad_input(cli("export", str(onnx_plan), "--out", str(folder), "--force"),
                     "--force would delete")
    assert_bad_input(cli("export", str(onnx_plan), "--out", ".", "--force", cwd=folder),
                     "--force would delete")
    assert listing(folder) == before


def test_an_output_path_that_cannot_be_written(onnx_plan: Path) -> None:
    folder = onnx_plan.parent
    before = listing(folder)
    procs = run_together(["export", str(onnx_plan), "--out", "/proc/placewise-export"],
                         ["export", str(onnx_plan), "--out", str(folder / "plan.json")],
                         ["export", str(onnx_plan), "--out", str(folder / "plan.json" / "x")])
    for proc, words in zip(procs, ("/proc", "not a folder", "not a folder"), strict=True):
        assert_bad_input(proc, words)
    assert listing(folder) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder(onnx_plan: Path) -> None:  # pragma: no cover - needs non-root
    ro = onnx_plan.parent / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        assert_bad_input(cli("export", str(onnx_plan), "--out", str(ro / "out")),
                         "not writable")
        assert os.listdir(ro) == []
    finally:
        ro.chmod(0o755)


def test_a_failure_while_writing_leaves_nothing(onnx_plan: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import placewise.export as export_mod

    def fail(*_a: Any, **_k: Any) -> Any:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(export_mod, "write_partitions", fail)
    folder = onnx_plan.parent
    before = listing(folder)
    with pytest.raises(InputError, match="No space left"):
        export_plan(onnx_plan, folder / "new" / "out")
    assert listing(folder) == before


def test_the_machine_fingerprint_is_checked(onnx_plan: Path) -> None:
    other = load_machine("laptop-soc")
    with pytest.raises(InputError, match=r"fingerprints\.machine"):
        export_plan(onnx_plan, onnx_plan.parent / "out", machine=other)
    assert not (onnx_plan.parent / "out").exists()
