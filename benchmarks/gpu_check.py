"""One go on a machine with an NVIDIA GPU: probe it, profile a zoo model on it with plain
onnxruntime, plan for its CPUs and GPU, and check the plan against what the GPU does.

Needs an NVIDIA GPU and either ``pip install onnxruntime-gpu`` or a CUDA build of torch
(the probe measures with whichever is there; the profile and the partition runs need
onnxruntime-gpu). On a machine without a GPU it exits 0 at once, saying "no CUDA device
(...)" and writing that into the summary. Steps (each timed, each result under ``--out``):

1. **detect**: what torch.cuda, the CUDA driver, onnxruntime and nvidia-smi see
   (``hardware.cuda_measure.detect_raw``; ``detect.json``);
2. **probe**: ``placewise hw probe --out machine.yaml --json`` (CPU cores and every GPU,
   measured; refreshes the ``--hw local`` cache the later steps plan on; ``probe.json``);
3. **model**: the zoo model (``--model``) exported to ``model.onnx`` at a fixed batch;
4. **profile**: plain onnxruntime with ``enable_profiling`` on ``CUDAExecutionProvider``
   (CPU fallback allowed, as a user's session would), ``--runs`` timed runs after warm-up:
   the profile JSON (``profile_cuda.json``) and the wall-clock latencies;
5. **import**: ``placewise calibrate import profile_cuda.json --model model.onnx --hw local
   --device gpu0 --out calibration_gpu.json`` where this build has ``calibrate import``;
6. **plans**: ``placewise plan model.onnx --hw local`` twice: the search's own choice over
   CPUs and GPU (``plan_auto.json``) and all on the GPU (``plan_gpu.json``, ``single:gpu0``),
   each with the imported calibration when there is one;
7. **validate**: ``placewise validate`` of each plan (a plan on the GPU is refused in one
   line: no CUDA backend in this build; the line is recorded), and ``validate --measured
   profile_cuda.json`` where this build has it;
8. **chain**: each plan exported (``placewise export``) and its partitions chained with
   plain onnxruntime on the providers the manifest names, ``--runs`` timed runs: measured
   end-to-end latency beside the plan's prediction, outputs against the whole model on CPU.

``--rehearse`` runs the same steps without a GPU (CPU execution provider, device ``cpu1``
in place of ``gpu0``), to check the pipeline itself on any machine; point
``XDG_CACHE_HOME`` elsewhere first, since the probe step rewrites the ``--hw local`` cache.

``summary.json`` holds every step's status, seconds and figures. Each step has a time
limit; the whole run stops starting steps after ``--budget-s`` (default 500 s: it fits a
9-minute slot on one GPU with 16 cores).

    python benchmarks/gpu_check.py --out gpu-check
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

DEFAULT_MODEL = "zoo:resnet?blocks=4&width=64&image=224&classes=1000&batch=8"


# --------------------------------------------------------------------------- pieces


def cli(args: Sequence[str], *, timeout_s: float, cwd: Path) -> dict[str, Any]:
    """``placewise ARGS`` as a subprocess: exit status, stdout's JSON when it is JSON, and
    stderr's last line (the one-line error of a refused input)."""
    t0 = time.perf_counter()
    try:
        r = subprocess.run([sys.executable, "-m", "placewise.cli", *args], cwd=cwd,
                           capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return {"args": list(args), "rc": None, "error": f"timed out after {timeout_s:g} s",
                "seconds": time.perf_counter() - t0}
    out: dict[str, Any] = {"args": list(args), "rc": r.returncode,
                           "seconds": time.perf_counter() - t0}
    text = r.stdout.strip()
    if text.startswith("{"):
        try:
            out["json"] = json.loads(text.splitlines()[-1] if "\n" in text else text)
        except json.JSONDecodeError:
            out["stdout_tail"] = text[-2000:]
    elif text:
        out["stdout_tail"] = text[-2000:]
    err = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    if err:
        out["stderr_last"] = err[-1][-2000:]
    return out


def has_command(words: Sequence[str], option: str | None = None, *, cwd: Path) -> bool:
    """Whether this build's CLI has ``placewise WORDS`` (and ``option`` in its help)."""
    r = subprocess.run([sys.executable, "-m", "placewise.cli", *words, "--help"], cwd=cwd,
                       capture_output=True, text=True, timeout=120, check=False)
    return r.returncode == 0 and (option is None or option in r.stdout)


def feeds_for(session: Any, seed: int = 0) -> dict[str, Any]:
    """Random inputs for every input of an onnxruntime session (fixed shapes)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    types = {"tensor(float)": np.float32, "tensor(float16)": np.float16,
             "tensor(double)": np.float64, "tensor(int64)": np.int64,
             "tensor(int32)": np.int32, "tensor(bool)": np.bool_}
    feeds: dict[str, Any] = {}
    for i in session.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        dtype = types.get(i.type, np.float32)
        if np.issubdtype(dtype, np.integer):
            feeds[i.name] = rng.integers(0, 10, shape).astype(dtype)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def profile_onnx(model: Path, out_dir: Path, provider: str, *, runs: int, warmup: int = 5
                 ) -> dict[str, Any]:
    """Plain onnxruntime profiling of ``model`` on ``provider`` (CPU fallback allowed, as in
    a user's session): the profile file (``profile_<provider>.json`` in ``out_dir``) and the
    wall-clock seconds of each timed run."""
    import onnxruntime as ort

    _require(ort, provider)
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(out_dir / "ort_profile")
    providers = [provider] if provider == "CPUExecutionProvider" else \
        [provider, "CPUExecutionProvider"]
    sess = ort.InferenceSession(str(model), sess_options=so, providers=providers)
    feeds = feeds_for(sess)
    for _ in range(warmup):
        sess.run(None, feeds)
    wall = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        wall.append(time.perf_counter() - t0)
    written = Path(sess.end_profiling())
    short = provider.removesuffix("ExecutionProvider").lower()
    final = out_dir / f"profile_{short}.json"
    os.replace(written, final)
    return {"profile": final.name, "providers": sess.get_providers(),
            "onnxruntime": ort.__version__, "runs": runs, "warmup": warmup,
            "wall_median_s": statistics.median(wall), "wall_min_s": min(wall),
            "wall_max_s": max(wall), "events": len(json.loads(final.read_text()))}


def _require(ort: Any, provider: str) -> None:
    """onnxruntime falls back to the CPU, with a mere warning, when asked for a provider it
    does not have: a measurement on the wrong device. Refuse instead."""
    have = ort.get_available_providers()
    if provider not in have:
        raise RuntimeError(f"onnxruntime {ort.__version__} here has no {provider} (it has "
                           f"{', '.join(have)}): pip install onnxruntime-gpu")


def chain_export(folder: Path, whole: Path, *, runs: int, warmup: int = 3) -> dict[str, Any]:
    """Chain an export's partitions with plain onnxruntime on the providers its manifest
    names (README, "Running an export with plain onnxruntime"): the median end-to-end
    seconds over ``runs`` and each output's relative L2 error against ``whole`` on CPU."""
    import numpy as np
    import onnxruntime as ort

    manifest = json.loads((folder / "manifest.json").read_text())
    sessions = []
    for part in manifest["partitions"]:
        prov = part["provider"]
        name, options = (prov["name"], prov.get("options", {})) if isinstance(prov, dict) \
            else (prov, part.get("provider_options", {}))
        _require(ort, name)
        sessions.append((part, ort.InferenceSession(str(folder / part["file"]),
                                                    providers=[(name, options)])))
    ref = ort.InferenceSession(str(whole), providers=["CPUExecutionProvider"])
    feeds = feeds_for(ref)

    def run() -> dict[str, Any]:
        values = dict(feeds)
        for part, sess in sessions:
            names = [t["name"] for t in part["outputs"]]
            values.update(zip(names, sess.run(
                names, {t["name"]: values[t["name"]] for t in part["inputs"]}), strict=True))
        return {t["name"]: values[t["name"]] for t in manifest["graph_outputs"]}

    for _ in range(warmup):
        got = run()
    wall = []
    for _ in range(runs):
        t0 = time.perf_counter()
        got = run()
        wall.append(time.perf_counter() - t0)
    expected = dict(zip([o.name for o in ref.get_outputs()], ref.run(None, feeds),
                        strict=True))
    errors = {k: float(np.linalg.norm(v - expected[k])) /
              max(float(np.linalg.norm(expected[k])), 1e-30) for k, v in got.items()}
    return {"partitions": [(p["name"], p["device"]) for p, _ in sessions],
            "providers": sorted({s.get_providers()[0] for _, s in sessions}),
            "runs": runs, "measured_median_s": statistics.median(wall),
            "measured_min_s": min(wall), "rel_l2": errors}


class Steps:
    """Runs named steps in order, each timed; a step that raises is recorded as failed and
    the run goes on; no step starts after ``budget_s``."""

    def __init__(self, budget_s: float) -> None:
        self.t0 = time.monotonic()
        self.budget_s = budget_s
        self.record: dict[str, Any] = {}

    def __call__(self, name: str, fn: Callable[[], Any]) -> Any:
        if time.monotonic() - self.t0 > self.budget_s:
            self.record[name] = {"status": "skipped", "why": f"past the {self.budget_s:g} s "
                                                             f"budget"}
            return None
        t = time.perf_counter()
        try:
            result = fn()
            status = "ok"
        except Exception as exc:
            result, status = {"error": f"{type(exc).__name__}: {exc}"[:2000]}, "failed"
        self.record[name] = {"status": status, "seconds": round(time.perf_counter() - t, 3),
                             "result": result}
        print(f"gpu_check: {name}: {status} ({self.record[name]['seconds']:.1f} s)",
              flush=True)
        return result if status == "ok" else None


def gpu_figures(spec: dict[str, Any]) -> dict[str, Any]:
    """The probed GPUs' figures from ``hw probe --json`` (a machine spec plus ``cuda`` and
    ``gpu_notes``): peaks, memory, launch, and the host link, each with its source."""
    gpus = []
    for d in spec.get("devices", []):
        if d.get("kind") != "gpu":
            continue
        tier = d["memory"][0]
        link: dict[str, Any] = next(
            (ln for ln in spec.get("links", []) if d["name"] in ln["endpoints"]), {})
        gpus.append({"device": d["name"], "model": d.get("model"),
                     "peak_flops_per_s": d["peak_flops_per_s"], "sms": d.get("compute_units"),
                     "memory": {k: tier[k] for k in ("name", "capacity_bytes",
                                                     "bandwidth_bytes_per_s", "source")},
                     "launch_overhead_s": d["launch_overhead_s"],
                     "launch_source": d["launch_source"],
                     "host_link": {k: link.get(k) for k in ("name", "bandwidth_bytes_per_s",
                                                            "latency_s", "source")}})
    return {"cuda": spec.get("cuda"), "gpu_notes": spec.get("gpu_notes"),
            "devices": [d["name"] for d in spec.get("devices", [])], "gpus": gpus}


def digest(plan: dict[str, Any], record: dict[str, Any], label: str) -> dict[str, Any]:
    """One plan's figures side by side: predicted latency; what ``validate`` said (measured
    p50 and its error, or the one line refusing it); the chained export's measured median
    and the prediction's error against it."""
    out: dict[str, Any] = {"devices_used": plan.get("devices_used"),
                           "predicted_latency_s": plan.get("latency_s")}
    val = (record.get(f"validate_{label}") or {}).get("result") or {}
    if val.get("rc") == 0 and "json" in val:
        out["validate"] = {"measured_p50_s": val["json"]["measured"]["latency"]["p50_s"],
                           "latency_error": val["json"]["error"]["latency"]}
    elif val:
        out["validate"] = {"rc": val.get("rc"), "said": val.get("stderr_last") or
                           val.get("error")}
    chain = (record.get(f"chain_{label}") or {}).get("result") or {}
    if "measured_median_s" in chain:
        out["chain"] = {k: chain.get(k) for k in ("measured_median_s", "error", "providers",
                                                   "rel_l2")}
    return out


def write_summary(out: Path, summary: dict[str, Any]) -> Path:
    path = out / "summary.json"
    path.write_text(json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n")
    return path


# --------------------------------------------------------------------------- the run


def _plans(steps: Steps, out: Path, cal: str | None, time_limit_s: float, device: str
           ) -> dict[str, Any]:
    plans: dict[str, Any] = {}
    for label, strategy in (("auto", "auto"), ("gpu", f"single:{device}")):
        args = ["plan", "model.onnx", "--hw", "local", "--strategy", strategy,
                "--time-limit", f"{time_limit_s:g}", "--out", f"plan_{label}.json", "--json"]
        if cal:
            args += ["--calibration", cal]
        r = steps(f"plan_{label}", partial(cli, args, timeout_s=time_limit_s + 240, cwd=out))
        if r and r.get("rc") == 0:
            plans[label] = r["json"]
    return plans


def _validate(steps: Steps, out: Path, plans: dict[str, Any], profile: str | None,
              measured_ok: bool, runs: int) -> None:
    for label, plan in plans.items():
        steps(f"validate_{label}", partial(
            cli, ["validate", f"plan_{label}.json", "--requests", "20", "--json"],
            timeout_s=300, cwd=out))
        if measured_ok and profile:
            steps(f"validate_measured_{label}", partial(
                cli, ["validate", f"plan_{label}.json", "--measured", profile, "--json"],
                timeout_s=300, cwd=out))
        exported = steps(f"export_{label}", partial(
            cli, ["export", f"plan_{label}.json", "--out", f"export_{label}", "--force",
                  "--json"], timeout_s=300, cwd=out))
        if exported and exported.get("rc") == 0:
            chained = steps(f"chain_{label}", partial(
                chain_export, out / f"export_{label}", out / "model.onnx", runs=runs))
            if chained:
                predicted = float(plan.get("latency_s") or 0.0)
                chained["predicted_s"] = predicted
                chained["error"] = (predicted - chained["measured_median_s"]) / \
                    chained["measured_median_s"]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for every result")
    ap.add_argument("--model", default=DEFAULT_MODEL, help="zoo reference (fixed batch)")
    ap.add_argument("--runs", type=int, default=50, help="timed runs per measurement")
    ap.add_argument("--time-limit", type=float, default=20.0, help="per plan search (s)")
    ap.add_argument("--budget-s", type=float, default=500.0, help="start no step after")
    ap.add_argument("--rehearse", action="store_true",
                    help="no GPU needed: CPU provider and device cpu1 in place of gpu0")
    a = ap.parse_args(argv)
    out: Path = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    from placewise.hardware.cuda import found_from_raw
    from placewise.hardware.cuda_measure import detect_raw

    steps = Steps(a.budget_s)
    summary: dict[str, Any] = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                               "model": a.model, "steps": steps.record}
    raw = steps("detect", detect_raw)
    (out / "detect.json").write_text(json.dumps(raw, indent=2, default=str) + "\n")
    found = found_from_raw(raw or {})
    summary["cuda"] = found.report
    provider, device = ("CPUExecutionProvider", "cpu1") if a.rehearse else \
        ("CUDAExecutionProvider", "gpu0")
    summary["rehearsal"] = bool(a.rehearse)
    if not found.gpus and not a.rehearse:
        summary["status"] = "no CUDA device"
        write_summary(out, summary)
        print(f"gpu_check: {found.report}: nothing to check (summary: {out / 'summary.json'})")
        return 0
    probe = steps("probe", partial(cli, ["hw", "probe", "--out", "machine.yaml", "--json"],
                                   timeout_s=400, cwd=out))
    if probe and probe.get("rc") == 0:
        (out / "probe.json").write_text(json.dumps(probe["json"], indent=2) + "\n")
        summary["probe"] = gpu_figures(probe["json"])
    steps("model", lambda: _export_model(a.model, out / "model.onnx"))
    prof = steps("profile", partial(profile_onnx, out / "model.onnx", out, provider,
                                    runs=a.runs))
    profile = prof["profile"] if prof else None
    cal = None
    if profile and has_command(["calibrate", "import"], cwd=out):
        imp = steps("import", lambda: cli(
            ["calibrate", "import", profile, "--model", "model.onnx", "--hw", "local",
             "--device", device, "--out", "calibration_gpu.json", "--json"],
            timeout_s=300, cwd=out))
        cal = "calibration_gpu.json" if imp and imp.get("rc") == 0 else None
    else:
        steps.record["import"] = {"status": "skipped",
                                  "why": "no profile" if not profile else
                                  "this build has no `placewise calibrate import`"}
    plans = _plans(steps, out, cal, a.time_limit, device)
    measured_ok = bool(profile) and has_command(["validate"], "--measured", cwd=out)
    if not measured_ok:
        steps.record["validate_measured"] = {
            "status": "skipped", "why": "no profile" if not profile else
            "this build's validate has no --measured"}
    _validate(steps, out, plans, profile, measured_ok, a.runs)
    summary["status"] = "ran"
    summary["plans"] = {k: digest(v, steps.record, k) for k, v in plans.items()}
    path = write_summary(out, summary)
    print(f"gpu_check: done: {path}")
    return 0


def _export_model(ref: str, path: Path) -> dict[str, Any]:
    from placewise.graph.zoo import export_onnx, parse_zoo_ref

    name, options = parse_zoo_ref(ref)
    export_onnx(name, options, path, dynamic_batch=False)
    return {"file": path.name, "bytes": path.stat().st_size}


if __name__ == "__main__":
    sys.exit(main())
