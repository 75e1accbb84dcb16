"""The side of the CUDA probe that touches the machine: gather what torch, the CUDA driver,
onnxruntime and ``nvidia-smi`` say (``detect_raw``: a plain dict, recorded as is and read
by ``placewise.hardware.cuda.found_from_raw``), and measure one GPU (``measure_gpu``: it
needs the GPU; with CUDA torch, else with onnxruntime's CUDA execution provider). Both run
inside a ``placewise.hardware.probe`` worker process, so the caller never initialises CUDA.
``measured_from_raw`` (pure) turns the samples into ``cuda.GpuMeasured``.

What is measured, each a median over repeats after warm-up:

- device memory bandwidth: a large on-device copy (bytes read + written per second), timed
  with CUDA events (torch) or around a synchronised onnxruntime run of ``Y = X + 0`` with
  both tensors bound on the GPU;
- kernel launch latency: a one-element add launched and synchronised, wall time per call;
- host <-> device copies over sizes from 4 bytes to 256 MiB, pinned and pageable (torch;
  onnxruntime's Python API has no pinned host buffers, so only pageable there): latency
  (the 4-byte copy) and bandwidth (the slope over the larger sizes).

>>> m = measured_from_raw({"api": "t", "device_copy": {"nbytes": 10**9, "samples": [1e-3] * 3,
...     "method": "copy"}, "launch": {"samples": [5e-6] * 3, "method": "add"},
...     "copies": {"h2d_pinned": [[4, [1e-5] * 3], [10**8, [4.01e-3] * 3]],
...                "d2h_pinned": [[4, [1e-5] * 3], [10**8, [4.01e-3] * 3]]}})
>>> round(m.device_bandwidth.value / 1e12, 3), round(m.h2d[1].value / 1e9, 2)
(2.0, 25.0)
"""

from __future__ import annotations

import contextlib
import functools
import platform
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from typing import Any

from placewise.hardware.cuda import GpuMeasured
from placewise.hardware.stats import fit_latency_bandwidth, stat_of

__all__ = ["SMI_QUERY", "detect_raw", "measure_gpu", "measured_from_raw"]

#: the fields asked of nvidia-smi; ``_SMI_BASIC`` where the driver does not know them all
SMI_QUERY = ("index,name,memory.total,clocks.max.sm,clocks.max.mem,compute_cap,"
             "pcie.link.gen.max,pcie.link.width.max")
_SMI_BASIC = "name,memory.total,clocks.max.sm,clocks.max.mem"
_TORCH_PROPS = ("name", "major", "minor", "total_memory", "multi_processor_count",
                "is_integrated", "clock_rate", "memory_clock_rate", "memory_bus_width")
# CUdevice_attribute values of cuda.h (deviceQuery reads the same)
_DRIVER_ATTRS = {"clock_rate": 13, "multi_processor_count": 16, "is_integrated": 18,
                 "memory_clock_rate": 36, "memory_bus_width": 37, "major": 75, "minor": 76}
_MIB = 2**20


def _plain(v: Any) -> Any:
    return v if isinstance(v, bool | int | float | str) else str(v)


def _torch_info() -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        return {}
    info: dict[str, Any] = {"version": torch.__version__, "available": False, "devices": []}
    try:
        if torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                p = torch.cuda.get_device_properties(i)
                info["devices"].append({k: _plain(getattr(p, k)) for k in _TORCH_PROPS
                                        if hasattr(p, k)})
            info["available"] = bool(info["devices"])
            info["cuda"] = str(torch.version.cuda)
    except Exception as exc:  # a broken driver: say so, the probe goes on without torch
        info.update(available=False, devices=[], error=f"{type(exc).__name__}: {exc}")
    return info


def _driver_info() -> dict[str, Any]:
    """The CUDA driver's device attributes through ``libcuda`` (no CUDA toolkit needed)."""
    import ctypes

    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return {}
    if lib.cuInit(0) != 0:
        return {"error": "cuInit failed"}
    count = ctypes.c_int(0)
    if lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return {"error": "cuDeviceGetCount failed"}
    devices = []
    for i in range(count.value):
        dev = ctypes.c_int(0)
        if lib.cuDeviceGet(ctypes.byref(dev), i) != 0:
            continue
        name = ctypes.create_string_buffer(256)
        lib.cuDeviceGetName(name, 256, dev)
        mem = ctypes.c_size_t(0)
        lib.cuDeviceTotalMem_v2(ctypes.byref(mem), dev)
        d: dict[str, Any] = {"name": name.value.decode(errors="replace"),
                             "total_memory": int(mem.value)}
        for key, attr in _DRIVER_ATTRS.items():
            v = ctypes.c_int(0)
            if lib.cuDeviceGetAttribute(ctypes.byref(v), attr, dev) == 0:
                d[key] = int(v.value)
        d["is_integrated"] = bool(d.get("is_integrated", 0))
        devices.append(d)
    return {"devices": devices}


def _smi_info() -> dict[str, Any]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return {"text": None, "error": None}
    said = ""
    rc = 0
    for fields in (SMI_QUERY, _SMI_BASIC):
        try:
            r = subprocess.run([exe, f"--query-gpu={fields}", "--format=csv"],
                               capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            return {"text": None, "error": f"{type(exc).__name__}: {exc}"}
        if r.returncode == 0:
            return {"text": r.stdout, "error": None, "query": fields}
        rc = r.returncode
        said = " ".join((r.stdout or r.stderr).strip().splitlines()[:1])
    return {"text": None, "error": f"exit status {rc}: {said[:200]}"}


def detect_raw() -> dict[str, Any]:
    """What each source says, as plain data (see ``cuda.found_from_raw``)."""
    ort: dict[str, Any] = {}
    with contextlib.suppress(Exception):  # an onnxruntime that does not load: "no onnxruntime"
        import onnxruntime

        ort = {"version": onnxruntime.__version__,
               "providers": list(onnxruntime.get_available_providers())}
    return {"torch": _torch_info(), "driver": _driver_info(),
            "onnxruntime": ort, "nvidia_smi": _smi_info(), "host_machine": platform.machine()}


# --------------------------------------------------------------------------- measuring


def _timed(fn: Callable[[], Any], sync: Callable[[], Any], reps: int, warm: int
           ) -> list[float]:
    for _ in range(warm):
        fn()
        sync()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        out.append(time.perf_counter() - t0)
    return out


def _sizes(quick: bool) -> tuple[int, ...]:
    return (4, 64 * 2**10, _MIB, 16 * _MIB) if quick else \
        (4, 64 * 2**10, _MIB, 16 * _MIB, 256 * _MIB)


def _reps(size: int, quick: bool) -> int:
    small = size <= _MIB
    return (20 if small else 5) if quick else (100 if small else 10)


def _measure_torch(index: int, quick: bool) -> dict[str, Any]:
    import torch

    dev = torch.device("cuda", index)
    torch.cuda.set_device(dev)
    sync = torch.cuda.synchronize
    total = int(torch.cuda.get_device_properties(index).total_memory)
    nbytes = min((256 if quick else 1024) * _MIB, total // 8)
    src = torch.ones(nbytes, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    times = []
    for r in range(3 + (10 if quick else 30)):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        if r >= 3:
            times.append(a.elapsed_time(b) / 1e3)
    del src, dst
    x = torch.zeros(1, device=dev)
    launch = _timed(lambda: x.add_(1), sync, 200 if quick else 2000, 100)
    copies: dict[str, list[Any]] = {}
    for pinned in (True, False):
        for way in ("h2d", "d2h"):
            rows = []
            for size in _sizes(quick):
                host = torch.empty(size, dtype=torch.uint8, pin_memory=pinned)
                gpu = torch.empty(size, dtype=torch.uint8, device=dev)
                fn = (lambda g=gpu, h=host: g.copy_(h)) if way == "h2d" else \
                    (lambda g=gpu, h=host: h.copy_(g))
                rows.append([size, _timed(fn, sync, _reps(size, quick), 3)])
                del host, gpu
            copies[f"{way}_{'pinned' if pinned else 'pageable'}"] = rows
    return {"api": f"torch {torch.__version__} (CUDA {torch.version.cuda})",
            "device_copy": {"nbytes": nbytes, "samples": times,
                            "method": f"torch copy_ of {nbytes / _MIB:.0f} MiB on the device, "
                                      f"timed by CUDA events, bytes read + written"},
            "launch": {"samples": launch, "method": "torch add_ on a 1-element tensor on the "
                                                    "GPU, then torch.cuda.synchronize(), wall "
                                                    "time per call"},
            "copies": copies, "copy_method": "torch copy_ between a host tensor (pinned: "
                                             "pin_memory=True) and a GPU tensor, synchronised"}


def _add_model(n: int) -> bytes:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "Z"], ["Y"])], "probe_gpu",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [n])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [n])],
        [helper.make_tensor("Z", TensorProto.FLOAT, [1], [0.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return bytes(model.SerializeToString())


def _measure_ort(index: int, quick: bool) -> dict[str, Any]:
    import numpy as np
    import onnxruntime as ort

    # placewise.onnxrt imports onnxruntime (about 0.5 s): only where a session is made
    from placewise.onnxrt import new_session

    provider = ("CUDAExecutionProvider", {"device_id": str(index)})

    def bound(n: int) -> tuple[Any, Any]:
        so = ort.SessionOptions()
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        sess = new_session(_add_model(n), so, providers=[provider])
        io = sess.io_binding()
        io.bind_ortvalue_input("X", ort.OrtValue.ortvalue_from_shape_and_type(
            [n], np.float32, "cuda", index))
        io.bind_ortvalue_output("Y", ort.OrtValue.ortvalue_from_shape_and_type(
            [n], np.float32, "cuda", index))
        return sess, io

    nbytes = (256 if quick else 1024) * _MIB
    sess, io = bound(nbytes // 4)
    times = _timed(functools.partial(sess.run_with_iobinding, io), io.synchronize_outputs,
                   10 if quick else 30, 3)
    del sess, io
    tiny, tio = bound(1)
    launch = _timed(functools.partial(tiny.run_with_iobinding, tio), tio.synchronize_outputs,
                    200 if quick else 2000, 100)
    copies: dict[str, list[Any]] = {"h2d_pageable": [], "d2h_pageable": []}
    for size in _sizes(quick):
        arr = np.ones(size, dtype=np.uint8)
        dev_val = ort.OrtValue.ortvalue_from_numpy(arr, "cuda", index)
        reps = _reps(size, quick)
        upload = functools.partial(ort.OrtValue.ortvalue_from_numpy, arr, "cuda", index)
        copies["h2d_pageable"].append([size, _timed(upload, lambda: None, reps, 3)])
        copies["d2h_pageable"].append([size, _timed(dev_val.numpy, lambda: None, reps, 3)])
    return {"api": f"onnxruntime {ort.__version__} CUDAExecutionProvider",
            "device_copy": {"nbytes": nbytes, "samples": times,
                            "method": f"onnxruntime run_with_iobinding of Y = X + 0 over "
                                      f"{nbytes / _MIB:.0f} MiB bound on the GPU (includes one "
                                      f"session run's overhead), bytes read + written"},
            "launch": {"samples": launch, "method": "onnxruntime run_with_iobinding of a "
                                                    "1-element Add bound on the GPU, "
                                                    "synchronised: session overhead + one "
                                                    "kernel launch"},
            "copies": copies,
            "copy_method": "onnxruntime OrtValue.ortvalue_from_numpy to the GPU (allocation "
                           "from its arena + copy) and OrtValue.numpy() back, pageable host "
                           "memory (no pinned buffers through onnxruntime's Python API)"}


def measure_gpu(index: int, api: str, quick: bool = False) -> dict[str, Any]:
    """Measure GPU ``index`` with ``api`` ("torch" or "onnxruntime"); raw samples."""
    if api == "torch":
        return _measure_torch(index, quick)
    if api == "onnxruntime":
        return _measure_ort(index, quick)
    raise ValueError(f"no way to measure a GPU with {api!r}")


def measured_from_raw(raw: Mapping[str, Any]) -> GpuMeasured:
    """``GpuMeasured`` from ``measure_gpu``'s samples (pure). The host link's figures are the
    pinned copies where measured, else the pageable ones; the other kind is kept in words."""
    api = str(raw.get("api", ""))
    dc = raw["device_copy"]
    nb = int(dc["nbytes"])
    bw = stat_of([2.0 * nb / s for s in dc["samples"]], f"{api}: {dc['method']}")
    launch = stat_of(list(raw["launch"]["samples"]), f"{api}: {raw['launch']['method']}")
    copies = raw["copies"]
    kind = "pinned" if "h2d_pinned" in copies else "pageable"
    method = str(raw.get("copy_method", "copies"))
    h2d = fit_latency_bandwidth([(int(s), list(t)) for s, t in copies[f"h2d_{kind}"]],
                                f"{api}: host -> device {kind} copies ({method})")
    d2h = fit_latency_bandwidth([(int(s), list(t)) for s, t in copies[f"d2h_{kind}"]],
                                f"{api}: device -> host {kind} copies ({method})")
    pageable = ""
    if kind == "pinned" and "h2d_pageable" in copies:
        words = []
        for way in ("h2d", "d2h"):
            lat, b = fit_latency_bandwidth(
                [(int(s), list(t)) for s, t in copies[f"{way}_pageable"]], "")
            words.append(f"{way} {b.value / 1e9:.3g} GB/s, {lat.value * 1e6:.3g} us")
        pageable = "pageable copies (median, same sizes): " + "; ".join(words)
    return GpuMeasured(device_bandwidth=bw, launch=launch, h2d=h2d, d2h=d2h,
                       pageable=pageable, api=api)
