"""The worker side of ``placewise hw probe``: everything here runs inside a spawned worker
process pinned to its cores (``_worker_main``), which imports what it measures with (torch,
onnxruntime, numpy) after pinning and thread settings, says "ready", and then serves the
parent's requests (``placewise.hardware.probe``) until told to stop. CUDA detection and
measurement (``placewise.hardware.cuda_measure``) are served the same way.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Any

from placewise.hardware import cuda_measure

__all__: list[str] = []


def _samples(fn: Callable[[], Any], *, repeats: int, target_s: float,
             warmup: int = 2) -> list[float]:
    """Seconds per call of ``fn``: ``repeats`` samples, each averaging enough calls to last
    about ``target_s``."""
    for _ in range(warmup):
        fn()
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-9)
    inner = max(1, int(target_s / once))
    out: list[float] = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        out.append((time.perf_counter() - t0) / inner)
    return out


def _torch_mm(threads: int, sizes: Sequence[int], repeats: int, target_s: float) -> Any:
    import torch

    torch.set_num_threads(threads)
    out = []
    with torch.inference_mode():
        for n in sizes:
            a = torch.randn(n, n)
            b = torch.randn(n, n)
            c = torch.empty(n, n)
            out.append((n, _samples(functools.partial(torch.mm, a, b, out=c),
                                    repeats=repeats, target_s=target_s)))
    return {"results": out, "method": "torch.mm fp32",
            "isa": str(torch.backends.cpu.get_cpu_capability())}


def _ort_session(model: Any, threads: int) -> Any:
    import onnxruntime as ort

    # placewise.onnxrt imports onnxruntime (about 0.5 s): only where a session is made
    from placewise.onnxrt import new_session

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    return new_session(model.SerializeToString(), so,
                       providers=["CPUExecutionProvider"])


def _ort_matmul_model(n: int, *, integer: bool) -> Any:
    from onnx import TensorProto, helper

    a_t = TensorProto.UINT8 if integer else TensorProto.FLOAT
    b_t = TensorProto.INT8 if integer else TensorProto.FLOAT
    y_t = TensorProto.INT32 if integer else TensorProto.FLOAT
    node = helper.make_node("MatMulInteger" if integer else "MatMul", ["A", "B"], ["Y"])
    graph = helper.make_graph(
        [node], "probe_matmul",
        [helper.make_tensor_value_info("A", a_t, [n, n]),
         helper.make_tensor_value_info("B", b_t, [n, n])],
        [helper.make_tensor_value_info("Y", y_t, [n, n])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _ort_mm(threads: int, sizes: Sequence[int], repeats: int, target_s: float,
            integer: bool) -> Any:
    import numpy as np

    rng = np.random.default_rng(0)
    try:
        out = []
        for n in sizes:
            sess = _ort_session(_ort_matmul_model(n, integer=integer), threads)
            feeds: dict[str, Any]
            if integer:
                feeds = {"A": rng.integers(0, 256, (n, n), dtype=np.uint8),
                         "B": rng.integers(-128, 128, (n, n), dtype=np.int8)}
            else:
                feeds = {"A": rng.standard_normal((n, n), dtype=np.float32),
                         "B": rng.standard_normal((n, n), dtype=np.float32)}
            out.append((n, _samples(functools.partial(sess.run, None, feeds),
                                    repeats=repeats, target_s=target_s)))
        method = ("onnxruntime MatMulInteger uint8 x int8 -> int32" if integer
                  else "onnxruntime MatMul fp32")
        return {"results": out, "method": method, "backend": "onnxruntime"}
    except ImportError:
        if not integer:
            return _torch_mm(threads, sizes, repeats, target_s) | {"backend": "torch"}
        import torch

        torch.set_num_threads(threads)
        out = []
        for n in sizes:
            a = torch.randint(-128, 128, (n, n), dtype=torch.int8)
            b = torch.randint(-128, 128, (n, n), dtype=torch.int8)
            out.append((n, _samples(functools.partial(torch._int_mm, a, b),
                                    repeats=repeats, target_s=target_s)))
        return {"results": out, "method": "torch._int_mm int8 x int8 -> int32 "
                                           "(onnxruntime unavailable)", "backend": "torch"}


def _torch_dispatch(threads: int, repeats: int, target_s: float) -> Any:
    import torch

    torch.set_num_threads(threads)
    x = torch.ones(1)
    z = torch.empty(1)
    with torch.inference_mode():
        s = _samples(lambda: torch.add(x, x, out=z), repeats=repeats, target_s=target_s,
                     warmup=100)
    return {"samples": s, "method": "torch.add on 1-element fp32 tensors"}


def _ort_dispatch(threads: int, repeats: int, target_s: float) -> Any:
    import numpy as np

    try:
        from onnx import TensorProto, helper
    except ImportError:
        return _torch_dispatch(threads, repeats, target_s)
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "X"], ["Y"])], "probe_dispatch",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1])])
    try:
        sess = _ort_session(helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", 13)]), threads)
    except ImportError:
        return _torch_dispatch(threads, repeats, target_s)
    feeds = {"X": np.ones(1, dtype=np.float32)}
    s = _samples(lambda: sess.run(None, feeds), repeats=repeats, target_s=target_s,
                 warmup=100)
    return {"samples": s, "method": "onnxruntime InferenceSession.run of a 1-element Add"}


def _copy_arrays(nbytes: int) -> tuple[Any, Any]:
    import numpy as np

    src = np.ones(nbytes // 8, dtype=np.float64)
    dst = np.zeros_like(src)
    return src, dst


def _copy_bw(nbytes: int, repeats: int) -> Any:
    import numpy as np

    src, dst = _copy_arrays(nbytes)
    return {"samples": _samples(lambda: np.copyto(dst, src), repeats=repeats, target_s=0.0)}


def _copy_window(nbytes: int, start_at: float, duration_s: float) -> Any:
    """Copy repeatedly from ``start_at`` (time.monotonic, shared by all processes) for
    ``duration_s``; several workers doing this at once measure the shared bandwidth."""
    import numpy as np

    src, dst = _copy_arrays(nbytes)
    np.copyto(dst, src)
    while time.monotonic() < start_at - 0.002:
        time.sleep(0.001)
    while time.monotonic() < start_at:
        pass
    samples: list[float] = []
    end = start_at + duration_s
    while time.monotonic() < end or len(samples) < 3:
        t0 = time.perf_counter()
        np.copyto(dst, src)
        samples.append(time.perf_counter() - t0)
    return {"samples": samples}


def _link(peer: Connection | None, role: str, shm_name: str, sizes: Sequence[int],
          repeats_small: int, repeats_large: int) -> Any:
    """One end of a shared-memory ping-pong. The sender writes ``size`` bytes into the shared
    block and notifies; the receiver copies them out and acknowledges. The sender times each
    round trip."""
    from multiprocessing import shared_memory

    import numpy as np

    if peer is None:
        raise RuntimeError("this worker has no peer connection")
    shm = shared_memory.SharedMemory(name=shm_name)
    results: list[tuple[int, list[float]]] = []
    try:
        block = np.ndarray((shm.size,), dtype=np.uint8, buffer=shm.buf)
        local = np.ones(max(max(sizes), 1), dtype=np.uint8)
        for size in sizes:
            reps = repeats_small if size < 2**20 else repeats_large
            warm = 20 if size < 2**20 else 2
            samples: list[float] = []
            for r in range(warm + reps):
                if role == "send":
                    t0 = time.perf_counter()
                    if size:
                        np.copyto(block[:size], local[:size])
                    peer.send_bytes(b"s")
                    peer.recv_bytes()
                    if r >= warm:
                        samples.append(time.perf_counter() - t0)
                else:
                    peer.recv_bytes()
                    if size:
                        np.copyto(local[:size], block[:size])
                    peer.send_bytes(b"a")
            results.append((size, samples))
        del block, local
    finally:
        shm.close()
    return {"results": results if role == "send" else []}


def _worker_main(conn: Connection, cores: list[int], threads: int,
                 peer: Connection | None, preload: tuple[str, ...]) -> None:
    """Entry point of a spawned measurement worker: pin, import what it will measure with,
    say "ready", then serve requests until 'stop'."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(threads)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cores)
    for module in preload:  # so that no worker is still importing while another measures
        with contextlib.suppress(ImportError):
            importlib.import_module(module)
    conn.send(("ok", "ready"))
    ops: dict[str, Callable[..., Any]] = {
        "torch_mm": _torch_mm, "ort_mm": _ort_mm, "torch_dispatch": _torch_dispatch,
        "ort_dispatch": _ort_dispatch, "copy_bw": _copy_bw, "copy_window": _copy_window,
        "cuda_detect": cuda_measure.detect_raw, "cuda_measure": cuda_measure.measure_gpu,
    }
    while True:
        try:
            op, kwargs = conn.recv()
        except EOFError:
            return
        if op == "stop":
            return
        try:
            if op == "link":
                result = _link(peer, **kwargs)
            elif op in ("torch_mm", "ort_mm", "torch_dispatch", "ort_dispatch"):
                result = ops[op](threads, **kwargs)
            else:
                result = ops[op](**kwargs)
            conn.send(("ok", result))
        except Exception as exc:  # reported to the parent, which raises
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
