"""CUDA devices in ``hw probe``: spec building from recorded detection records (values from
published ``nvidia-smi`` / ``deviceQuery`` output, cited beside each), the no-GPU path on a
machine without one, and ``validate`` / ``serve --real`` refusing a plan on a probed GPU
(plannable and exportable only: no CUDA backend in this build). No timing assertions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from placewise.hardware.cuda import (
    ARCHITECTURES,
    NO_CUDA,
    found_from_raw,
    gpu_spec,
    parse_nvidia_smi,
)
from placewise.hardware.cuda_measure import detect_raw, measured_from_raw
from placewise.hardware.probe import host_fingerprint, save_local
from placewise.hardware.spec import Machine
from placewise.hardware.stats import PROBE_SOURCE_PREFIX
from placewise.plan import load_plan
from tests.cli_runner import run_cli

ROOT = Path(__file__).resolve().parents[2]

# NVIDIA A100-SXM4-40GB as the CUDA driver reports it (deviceQuery prints these attributes):
# name, compute capability 8.0, 42298834944 bytes and 108 multiprocessors from the deviceQuery
# output posted in https://github.com/bottlerocket-os/bottlerocket/pull/3873 ("Device 2:
# NVIDIA A100-SXM4-40GB"); GPU max clock 1410 MHz, memory clock 1215 MHz and a 5120-bit bus
# from the A100 deviceQuery output posted in https://github.com/samridh-dev/votess/issues/10.
# Clocks in kHz, as CU_DEVICE_ATTRIBUTE_CLOCK_RATE / MEMORY_CLOCK_RATE give them.
A100_DRIVER = {"name": "NVIDIA A100-SXM4-40GB", "major": 8, "minor": 0,
               "total_memory": 42298834944, "multi_processor_count": 108,
               "clock_rate": 1410000, "memory_clock_rate": 1215000, "memory_bus_width": 5120,
               "is_integrated": False}

# NVIDIA H200 (SXM): memory.total 143771 MiB from the nvidia-smi table posted in
# https://github.com/NVIDIA/cuda-samples/issues/311; maximum clocks 1980 MHz (graphics/SM)
# and 3201 MHz (memory) from `nvidia-smi -q -d CLOCK` on a P5e instance posted in
# https://github.com/awslabs/amazon-eks-ami/pull/1985. The header is nvidia-smi's own
# (`--format=csv` prints the field names with their units).
H200_SMI = ("name, memory.total [MiB], clocks.max.sm [MHz], clocks.max.memory [MHz]\n"
            "NVIDIA H200, 143771 MiB, 1980 MHz, 3201 MHz\n")
# torch.cuda.get_device_properties of the same GPU: compute capability 9.0 and 132 SMs, the
# GH100 configuration of the H100 SXM5 ("NVIDIA H100 Tensor Core GPU Architecture"
# whitepaper, Table 2) that the H200 keeps (NVIDIA's H200 datasheet quotes the H100 SXM's
# dense tensor peaks, 989 TFLOPS BF16, for it).
H200_TORCH = {"name": "NVIDIA H200", "major": 9, "minor": 0,
              "total_memory": 143771 * 2**20, "multi_processor_count": 132}


def a100_found() -> Any:
    """An ORT-only machine (onnxruntime-gpu, CPU torch, no nvidia-smi): the driver's view."""
    return found_from_raw({
        "torch": {"version": "2.5.1+cpu", "available": False, "devices": []},
        "driver": {"devices": [A100_DRIVER]},
        "onnxruntime": {"version": "1.20.1",
                        "providers": ["CUDAExecutionProvider", "CPUExecutionProvider"]},
        "nvidia_smi": {"text": None, "error": None}, "host_machine": "x86_64"})


def test_nvidia_smi_rows_parse_with_units() -> None:
    rows = parse_nvidia_smi(H200_SMI)
    assert rows == [{"name": "NVIDIA H200", "total_memory_bytes": 143771 * 2**20,
                     "sm_clock_hz": 1980e6, "memory_clock_hz": 3201e6}]
    # nounits / N/A cells / a compute_cap column
    rows = parse_nvidia_smi("index, name, memory.total [MiB], compute_cap, pcie.link.gen.max\n"
                            "0, NVIDIA H200, 143771, 9.0, [N/A]\n")
    assert rows[0]["compute_capability"] == (9, 0) and rows[0]["pcie_gen"] is None
    assert parse_nvidia_smi("") == [] and parse_nvidia_smi("No devices were found\n") == []


def test_a100_from_driver_attributes_matches_nvidia_published_peaks() -> None:
    found = a100_found()
    assert found.measure_with == "onnxruntime"
    assert "CUDAExecutionProvider" in found.report and "gpu0 NVIDIA A100" in found.report
    spec = gpu_spec(found, {}, date="2026-12-03", hosts=["cpu0", "cpu1"])
    (dev,) = spec.devices
    peaks = dev["peak_flops_per_s"]
    # derived (SMs x clock x per-SM rate) against the A100 whitepaper's Table 1: 312 TFLOPS
    # FP16/BF16 tensor, 19.5 FP32, 624 TOPS INT8, 19.5 FP64 tensor (dense)
    for dtype, published in (("fp16", 312e12), ("bf16", 312e12), ("fp32", 19.5e12),
                             ("int8", 624e12), ("fp64", 19.5e12)):
        assert peaks[dtype] == pytest.approx(published, rel=0.005), dtype
    (tier,) = dev["memory"]
    assert tier["name"] == "hbm" and tier["capacity_bytes"] == 42298834944
    # 2 x 1215 MHz x 5120 bit / 8 = 1555 GB/s, the whitepaper's HBM2 bandwidth
    assert tier["bandwidth_bytes_per_s"] == pytest.approx(1555e9, rel=0.001)
    assert "computed, not measured" in tier["source"]
    assert dev["kind"] == "gpu" and dev["backend"] == "cuda" and dev["compute_units"] == 108
    assert "cores" not in dev and "estimate, not measured" in dev["launch_source"]
    assert "A100 Tensor Core GPU Architecture" in dev["peak_source"]
    assert [lk["endpoints"] for lk in spec.links] == [["cpu0", "gpu0"], ["cpu1", "gpu0"]]
    assert {lk["resource"] for lk in spec.links} == {"pcie-gpu0"}  # one physical link


def test_h200_from_nvidia_smi_alone_is_reported_not_guessed() -> None:
    found = found_from_raw({"nvidia_smi": {"text": H200_SMI, "error": None},
                            "torch": {"version": "2.5.1+cpu", "available": False}})
    assert [g.name for g in found.gpus] == ["NVIDIA H200"] and found.measure_with is None
    spec = gpu_spec(found, {}, date="2026-12-03", hosts=["cpu0"])
    assert spec.devices == [] and spec.links == []
    (note,) = spec.notes
    assert "left out" in note and "SM count" in note and "compute capability" in note


def test_h200_torch_and_nvidia_smi_with_measurements() -> None:
    found = found_from_raw({
        "torch": {"version": "2.5.1+cu124", "available": True, "devices": [H200_TORCH]},
        "nvidia_smi": {"text": H200_SMI, "error": None}, "host_machine": "x86_64"})
    (g,) = found.gpus
    assert g.sm_clock_hz == 1980e6 and g.memory_clock_hz == 3201e6  # filled by nvidia-smi
    assert g.sources == ("torch.cuda (torch 2.5.1+cu124)", "nvidia-smi")
    assert found.measure_with == "torch"
    # the samples' shape is what cuda_measure records; the figures are stand-ins (this
    # checks that measured figures, not derived ones, reach the spec with their provenance)
    raw = {"api": "torch 2.5.1+cu124 (CUDA 12.4)",
           "device_copy": {"nbytes": 2**30, "samples": [0.5e-3, 0.51e-3, 0.52e-3],
                           "method": "copy"},
           "launch": {"samples": [6e-6, 7e-6, 8e-6], "method": "add_"},
           "copies": {k: [[4, [1e-5] * 3], [2**24, [1e-5 + 2**24 / bw] * 3]]
                      for k, bw in (("h2d_pinned", 50e9), ("d2h_pinned", 40e9),
                                    ("h2d_pageable", 20e9), ("d2h_pageable", 15e9))}}
    spec = gpu_spec(found, {0: measured_from_raw(raw)}, date="2026-12-03", hosts=["cpu0"])
    (dev,) = spec.devices
    # Hopper: 132 SMs x 1980 MHz x 4096 dense FP16 FLOP/clock/SM; the datasheet's 989.5 TF is
    # at a lower (sustained) clock: the derived peak is the upper bound, within 10%
    assert dev["peak_flops_per_s"]["bf16"] == pytest.approx(132 * 1980e6 * 4096)
    assert 989.5e12 < dev["peak_flops_per_s"]["bf16"] < 1.1 * 989.5e12
    (tier,) = dev["memory"]
    assert tier["bandwidth_bytes_per_s"] == pytest.approx(2 * 2**30 / 0.51e-3)
    assert tier["capacity_bytes"] == 143771 * 2**20
    assert PROBE_SOURCE_PREFIX in tier["source"] and "2026-12-03" in tier["source"]
    assert dev["launch_overhead_s"] == pytest.approx(7e-6)
    assert PROBE_SOURCE_PREFIX in dev["launch_source"]
    (link,) = spec.links
    assert link["bandwidth_bytes_per_s"] == pytest.approx(40e9, rel=1e-6)  # slower direction
    assert link["latency_s"] == pytest.approx(1e-5)
    assert "pinned" in link["source"] and "pageable copies" in link["source"]


def test_unknown_architecture_and_failed_measurement_are_left_out() -> None:
    blackwell = dict(A100_DRIVER, name="NVIDIA B200", major=10, minor=0)
    assert (10, 0) not in ARCHITECTURES
    found = found_from_raw({"driver": {"devices": [blackwell, A100_DRIVER]}})
    spec = gpu_spec(found, {}, date="d", hosts=["cpu0"], left_out={1: "it hung"})
    assert spec.devices == []
    assert "compute capability 10.0 has no entry" in spec.notes[0]
    assert "it hung" in spec.notes[1]


def test_grace_hopper_host_link_is_nvlink_c2c() -> None:
    gh = dict(H200_TORCH, name="NVIDIA GH200 480GB")
    found = found_from_raw({"torch": {"version": "2.5", "available": True, "devices": [gh]},
                            "nvidia_smi": {"text": H200_SMI.replace("H200", "GH200 480GB")},
                            "host_machine": "aarch64"})
    raw = {"api": "t", "device_copy": {"nbytes": 2**30, "samples": [1e-3], "method": "c"},
           "launch": {"samples": [5e-6], "method": "a"},
           "copies": {k: [[4, [1e-5]], [2**24, [1e-4]]] for k in ("h2d_pinned", "d2h_pinned")}}
    spec = gpu_spec(found, {0: measured_from_raw(raw)}, date="d", hosts=["cpu0"])
    assert spec.links[0]["resource"] == "nvlink-c2c-gpu0"


def test_no_gpu_here_says_so_and_the_spec_is_the_cpus() -> None:
    raw = detect_raw()
    found = found_from_raw(raw)
    if found.gpus:  # pragma: no cover - a machine with a GPU
        pytest.skip(f"this machine has a GPU: {found.report}")
    assert found.report.startswith("no CUDA device (")
    if raw["torch"].get("version") and not raw["onnxruntime"].get("providers", []).count(
            "CUDAExecutionProvider") and raw["nvidia_smi"]["text"] is None \
            and raw["nvidia_smi"]["error"] is None:
        assert found.report == NO_CUDA
    spec = gpu_spec(found, {}, date="d", hosts=["cpu0"])
    assert spec.devices == spec.links == spec.notes == []


def _cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(args, env=env, cwd=cwd, timeout=600)


@pytest.fixture(scope="module")
def gpu_local(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], Path]:
    """A ``--hw local`` cache holding this machine's CPU devices (hand-written figures, as
    the runtime tests use) plus the A100 a probe on an A100 host would add: what ``load_local``
    returns on such a host."""
    from tests.runtime.helpers import local_machine

    base = local_machine().model_dump(mode="json")
    spec = gpu_spec(a100_found(), {}, date="2026-12-03",
                    hosts=[d["name"] for d in base["devices"]])
    base.update(name="local", tags={"fingerprint": host_fingerprint()},
                devices=base["devices"] + spec.devices, links=base["links"] + spec.links)
    machine = Machine.model_validate(base)
    cache = tmp_path_factory.mktemp("xdg")
    save_local(machine, cache / "placewise")
    env = dict(os.environ, XDG_CACHE_HOME=str(cache),
               PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
    return env, tmp_path_factory.mktemp("work")


def test_a_probed_gpu_is_plannable_exportable_and_refused_by_validate_and_serve(
        gpu_local: tuple[dict[str, str], Path]) -> None:
    env, work = gpu_local
    model = "zoo:mlp?layers=2&hidden=32&in_features=16&out_features=8"
    r = _cli(["plan", model, "--hw", "local", "--strategy", "single:gpu0", "--out",
              "plan.json", "--json"], env, work)
    assert r.returncode == 0, r.stderr
    assert load_plan(work / "plan.json").devices_used() == ["gpu0"]
    r = _cli(["export", "plan.json", "--out", "exported", "--json"], env, work)
    assert r.returncode == 0, r.stderr
    providers = {p["provider"] for p in json.loads(r.stdout)["partitions"]}
    assert providers == {"CUDAExecutionProvider"}
    for args in (["validate", "plan.json", "--requests", "3"],
                 ["serve", "plan.json", "--real", "--rate", "10", "--requests", "5"]):
        r = _cli(args, env, work)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
        assert "gpu0" in lines[0] and "no CUDA backend in this build" in lines[0], lines[0]
        assert "plan.json" in lines[0]


# --------------------------------------------------------------------------- gpu_check.py

def _gpu_check() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" /
                                                  "gpu_check.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_gpu_check_exits_cleanly_without_a_gpu(tmp_path: Path) -> None:
    if found_from_raw(detect_raw()).gpus:  # pragma: no cover - a machine with a GPU
        pytest.skip("this machine has a GPU: gpu_check would run in full")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--out",
                        str(tmp_path / "out")], capture_output=True, text=True, env=env,
                       timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    assert "no CUDA device (" in r.stdout and "nothing to check" in r.stdout
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["status"] == "no CUDA device"
    assert summary["cuda"].startswith("no CUDA device (")
    assert set(summary["steps"]) == {"detect"}  # nothing after detection ran
    assert (tmp_path / "out" / "detect.json").is_file()


def test_gpu_check_pieces_that_need_no_gpu(gpu_local: tuple[dict[str, str], Path],
                                           tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    gc = _gpu_check()
    env, _ = gpu_local
    for key in ("XDG_CACHE_HOME", "PYTHONPATH"):
        monkeypatch.setenv(key, env[key])
    model = tmp_path / "model.onnx"
    assert gc._export_model("zoo:mlp?layers=2&hidden=32&in_features=16&out_features=8&batch=2",
                            model)["bytes"] > 0
    # plain onnxruntime profiling, as on the GPU but on the CPU provider
    prof = gc.profile_onnx(model, tmp_path, "CPUExecutionProvider", runs=5, warmup=1)
    events = json.loads((tmp_path / prof["profile"]).read_text())
    nodes = [e for e in events if e.get("cat") == "Node"]
    assert nodes and {e["args"]["provider"] for e in nodes} == {"CPUExecutionProvider"}
    assert prof["runs"] == 5 and prof["wall_min_s"] <= prof["wall_median_s"]
    # a CPU plan on the (GPU-holding) local machine, exported and chained by plain onnxruntime
    r = gc.cli(["plan", "model.onnx", "--hw", "local", "--strategy", "single:cpu0", "--out",
                "plan_cpu.json", "--json"], timeout_s=300, cwd=tmp_path)
    assert r["rc"] == 0 and r["json"]["devices_used"] == ["cpu0"], r
    r = gc.cli(["export", "plan_cpu.json", "--out", "export_cpu", "--json"], timeout_s=300,
               cwd=tmp_path)
    assert r["rc"] == 0, r
    chained = gc.chain_export(tmp_path / "export_cpu", model, runs=3, warmup=1)
    assert chained["providers"] == ["CPUExecutionProvider"]
    assert all(err < 1e-5 for err in chained["rel_l2"].values()), chained
    # a refused command comes back as its one line
    r = gc.cli(["validate", "missing.json"], timeout_s=120, cwd=tmp_path)
    assert r["rc"] == 2 and "missing.json" in r["stderr_last"]
    # steps: a failure is recorded and the run goes on; past the budget nothing starts
    steps = gc.Steps(budget_s=1e9)
    assert steps("fine", lambda: {"x": 1}) == {"x": 1}
    assert steps("broken", lambda: 1 / 0) is None
    assert steps.record["broken"]["status"] == "failed"
    assert "ZeroDivisionError" in steps.record["broken"]["result"]["error"]
    late = gc.Steps(budget_s=-1.0)
    assert late("never", lambda: pytest.fail("ran past the budget")) is None
    assert late.record["never"]["status"] == "skipped"
    path = gc.write_summary(tmp_path, {"steps": steps.record})
    assert json.loads(path.read_text())["steps"]["fine"]["status"] == "ok"
    # the digest of a plan on the GPU: predicted, and validate's one-line refusal
    plan = steps("plan_gpu", lambda: gc.cli(
        ["plan", "model.onnx", "--hw", "local", "--strategy", "single:gpu0", "--out",
         "plan_gpu.json", "--json"], timeout_s=300, cwd=tmp_path))
    steps("validate_gpu", lambda: gc.cli(["validate", "plan_gpu.json", "--json"],
                                         timeout_s=300, cwd=tmp_path))
    steps.record["chain_gpu"] = {"status": "ok", "result": chained}  # shape check only
    d = gc.digest(plan["json"], steps.record, "gpu")
    assert d["devices_used"] == ["gpu0"] and d["predicted_latency_s"] > 0
    assert d["validate"]["rc"] == 2 and "no CUDA backend" in d["validate"]["said"]
    assert d["chain"]["measured_median_s"] == chained["measured_median_s"]
    # the GPU figures the summary keeps, from hw show --json of the GPU-holding local spec
    shown = gc.cli(["hw", "show", "local", "--json"], timeout_s=120, cwd=tmp_path)["json"]
    figs = gc.gpu_figures({**shown, "cuda": "1 CUDA device", "gpu_notes": []})
    (g,) = figs["gpus"]
    assert g["device"] == "gpu0" and g["sms"] == 108 and figs["devices"][-1] == "gpu0"
    assert g["memory"]["name"] == "hbm" and g["host_link"]["name"] == "pcie-cpu0-gpu0"
    # no silent CPU fallback: asking for the CUDA provider where there is none is an error
    with pytest.raises(RuntimeError, match="no CUDAExecutionProvider"):
        gc.profile_onnx(model, tmp_path, "CUDAExecutionProvider", runs=1)
    assert gc.cli(["export", "plan_gpu.json", "--out", "export_gpu"], timeout_s=300,
                  cwd=tmp_path)["rc"] == 0
    with pytest.raises(RuntimeError, match="no CUDAExecutionProvider"):
        gc.chain_export(tmp_path / "export_gpu", model, runs=1)


def test_the_runnable_part_leaves_the_gpu_out_and_profile_says_why(
        gpu_local: tuple[dict[str, str], Path]) -> None:
    from placewise.calibrate.profile import local_devices
    from placewise.errors import InputError
    from placewise.hardware.probe import load_local
    from placewise.runtime.backends import backend_gap, runnable_part

    env, _ = gpu_local
    cache = Path(env["XDG_CACHE_HOME"]) / "placewise"
    m = load_local(cache)
    assert "gpu0" in m.device_names and backend_gap(m.device("cpu0")) is None
    part, gaps = runnable_part(m)
    assert "gpu0" not in part.device_names
    assert part.device_names == [n for n in m.device_names if n != "gpu0"]
    assert all("gpu0" not in ln.endpoints for ln in part.links)
    assert len(gaps) == 1 and "no CUDA backend in this build" in gaps[0]
    assert [d.name for d in local_devices(m)] == part.device_names  # profile skips it
    with pytest.raises(InputError, match=r"'gpu0'.*no CUDA backend in this build"):
        local_devices(m, ["gpu0"])


@pytest.mark.parametrize("api", ["torch", "onnxruntime"])
def test_a_gpu_whose_measurement_fails_is_left_out_naming_why(api: str) -> None:
    """The probe's GPU worker runs ``cuda_measure`` for real; on this machine (no GPU) it
    fails, and the probe keeps the reason instead of crashing or guessing figures."""
    import multiprocessing as mp

    import placewise.hardware.probe as probe_mod

    if found_from_raw(detect_raw()).gpus:  # pragma: no cover - a machine with a GPU
        pytest.skip("this machine has a GPU: its measurement would succeed")
    found = found_from_raw({
        "torch": {"version": "x", "available": api == "torch", "devices": [H200_TORCH]},
        "driver": {"devices": [H200_TORCH]},
        "onnxruntime": {"version": "x", "providers": ["CUDAExecutionProvider"]},
        "nvidia_smi": {"text": H200_SMI}})
    assert found.measure_with == api
    workers: list[Any] = []
    core = probe_mod._usable_cores()[0]
    try:
        measured, failed = probe_mod._measure_gpus(mp.get_context("spawn"), found, core,
                                                   True, workers, lambda _m: None)
    finally:
        probe_mod._stop(workers)
    assert measured == {} and list(failed) == [0]
    assert failed[0].startswith("its measurement failed: hw probe: gpu0 failed on worker gpu")
    spec = gpu_spec(found, measured, date="d", hosts=["cpu0"], left_out=failed)
    assert spec.devices == [] and "its measurement failed" in spec.notes[0]


def test_hw_probe_without_a_gpu_reports_it_and_keeps_the_cpu_spec(tmp_path: Path) -> None:
    if found_from_raw(detect_raw()).gpus:  # pragma: no cover - a machine with a GPU
        pytest.skip("this machine has a GPU")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), XDG_CACHE_HOME=str(tmp_path))
    r = _cli(["hw", "probe", "--quick", "--json"], env, tmp_path)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["cuda"].startswith("no CUDA device (") and data["gpu_notes"] == []
    assert {d["kind"] for d in data["devices"]} == {"cpu"}
    assert all("gpu" not in ln["name"] for ln in data["links"])
    assert "gpus" not in data["tags"] and "cuda" not in data["tags"]
    r = _cli(["hw", "probe", "--quick"], env, tmp_path)
    assert r.returncode == 0 and "cuda: no CUDA device (" in r.stdout
