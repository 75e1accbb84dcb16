"""Measure this machine and describe it as a ``Machine`` whose devices later issues execute on.

The local machine is modelled as three worker devices built from the first two CPU cores the
process may use (``c0``, ``c1``), each meant to be one worker process pinned to its cores:

- ``cpu0``: core ``c0`` running fp32 torch kernels (backend ``torch``, 1 thread).
- ``cpu1``: core ``c1`` running onnxruntime sessions (backend ``onnxruntime``, 1 intra-op
  thread); its int8 peak is onnxruntime ``MatMulInteger`` (uint8 x int8 -> int32, the form
  onnxruntime's quantizers emit), its fp32 peak onnxruntime ``MatMul``. Where onnxruntime
  cannot be loaded the device falls back to torch (``torch._int_mm`` for int8) and says so.
- ``cpu01``: both cores running fp32 torch kernels (backend ``torch``, 2 threads).

All three share the DRAM through one memory controller, the shared resource ``dram-mc``,
whose bandwidth is a copy measured on both cores at once (a single core alone reaches less:
that is each single-core device's tier bandwidth). ``cpu01`` uses the same cores as ``cpu0``
and ``cpu1``: ``Device.cores`` says which, and devices whose cores intersect cannot compute
at the same time without slowing each other down (a scheduler must treat them as one).
Links between the devices are copies through POSIX shared memory between two worker
processes pinned to different cores, with a pipe handshake; their bandwidth and latency are
measured end to end (write into the shared block, notify, read out) and they occupy
``dram-mc``. Every DRAM tier is the same physical memory: its capacity is shared.

With a single usable core, ``cpu0`` and ``cpu1`` both run on it (their ``cores`` are the
same) and ``cpu01`` is left out. Cores beyond the first two are not used.

Each measurement runs in a worker process started with ``spawn`` and pinned with
``os.sched_setaffinity``, so the caller's own affinity and thread settings are untouched.
Every number is a median over repeats after warm-up; its ``source`` says "measured by
placewise hw probe", the date, how many samples and their spread ((p90 - p10) / median).

``load_local`` caches the result as YAML under ``${XDG_CACHE_HOME:-~/.cache}/placewise``,
keyed by a host fingerprint (CPU model, usable cores, torch version), so ``--hw local`` is
cheap after the first time; a cache that does not load is measured again.

>>> local_cache_path("/tmp/pw-cache").name.startswith("local-")
True
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import hashlib
import importlib
import multiprocessing as mp
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import yaml

from placewise.errors import PlacewiseError, SpecError
from placewise.hardware.spec import Machine, load_machine

__all__ = [
    "PROBE_SOURCE_PREFIX",
    "cpu_model",
    "host_fingerprint",
    "load_local",
    "local_cache_path",
    "package_version",
    "probe",
]

PROBE_SOURCE_PREFIX = "measured by placewise hw probe"

Progress = Callable[[str, float], None]

_CALL_TIMEOUT_S = 600.0


# --------------------------------------------------------------------------- host facts


def _usable_cores() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (or platform), for tags."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    _, _, value = line.partition(":")
                    if value.strip():
                        return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown cpu"


def package_version(dist: str) -> str:
    """An installed distribution's version, or "absent"."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"


def _l3_bytes() -> int:
    path = Path("/sys/devices/system/cpu/cpu0/cache/index3/size")
    try:
        text = path.read_text().strip().upper()
    except OSError:
        return 32 * 2**20
    scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
    digits = text.rstrip("KMG")
    return int(digits) * scale if digits.isdigit() else 32 * 2**20


def _dram_bytes() -> int:
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except Exception:  # psutil missing or unsupported platform
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _load_average() -> str:
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "unknown"


def host_fingerprint() -> str:
    """A short stable id of this host: CPU model, usable core count, torch version.

    >>> len(host_fingerprint())
    16
    """
    key = f"{cpu_model()}|{len(_usable_cores())}|torch {package_version('torch')}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def local_cache_path(cache_dir: str | Path | None = None, *, quick: bool = False) -> Path:
    """Where ``load_local`` keeps this host's probed spec."""
    if cache_dir is None:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        folder = Path(base) / "placewise"
    else:
        folder = Path(cache_dir)
    return folder / f"local-{host_fingerprint()}{'-quick' if quick else ''}.yaml"


# --------------------------------------------------------------------------- worker side
# Everything below runs inside a spawned worker process pinned to its cores. Heavy imports
# (torch, onnxruntime, numpy) happen there, after pinning and thread settings.


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


# --------------------------------------------------------------------------- parent side


@dataclass(frozen=True, slots=True)
class _Worker:
    name: str
    cores: tuple[int, ...]
    threads: int
    proc: Any
    conn: Connection

    def send(self, op: str, **kwargs: Any) -> None:
        self.conn.send((op, kwargs))

    def receive(self, what: str) -> Any:
        deadline = time.monotonic() + _CALL_TIMEOUT_S
        while not self.conn.poll(0.2):
            if not self.proc.is_alive():
                raise PlacewiseError(f"hw probe: worker {self.name} (cores {list(self.cores)}) "
                                     f"died while measuring {what} "
                                     f"(exit code {self.proc.exitcode})")
            if time.monotonic() > deadline:
                raise PlacewiseError(f"hw probe: worker {self.name} timed out measuring {what}")
        try:
            status, result = self.conn.recv()
        except (EOFError, OSError):
            self.proc.join(timeout=5)
            raise PlacewiseError(
                f"hw probe: worker {self.name} (cores {list(self.cores)}) ended while "
                f"measuring {what} (exit code {self.proc.exitcode}); a script that calls "
                f"probe() must guard its top level with `if __name__ == '__main__':` "
                f"(multiprocessing spawn)") from None
        if status != "ok":
            raise PlacewiseError(f"hw probe: {what} failed on worker {self.name} "
                                 f"(cores {list(self.cores)}): {result}")
        return result

    def call(self, op: str, what: str, **kwargs: Any) -> Any:
        self.send(op, **kwargs)
        return self.receive(what)


def _start(ctx: Any, name: str, cores: Sequence[int], threads: int,
           peer: Connection | None, preload: tuple[str, ...]) -> _Worker:
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_worker_main,
                       args=(child, list(cores), threads, peer, preload),
                       name=f"placewise-probe-{name}", daemon=True)
    proc.start()
    child.close()
    return _Worker(name, tuple(cores), threads, proc, parent)


def _stop(workers: Sequence[_Worker]) -> None:
    for w in workers:
        with contextlib.suppress(OSError, ValueError):
            w.send("stop")
    for w in workers:
        w.proc.join(timeout=10)
        if w.proc.is_alive():
            w.proc.terminate()
            w.proc.join(timeout=5)
        w.conn.close()


@dataclass(frozen=True, slots=True)
class _Stat:
    """A measured figure: the median, how many samples, their spread, what was measured."""

    value: float
    count: int
    spread: float
    what: str

    def source(self, date: str) -> str:
        return (f"{PROBE_SOURCE_PREFIX} {date} (median of {self.count}, spread "
                f"{self.spread * 100:.1f}%): {self.what}")


def _stat_of(values: Sequence[float], what: str) -> _Stat:
    """Median and spread, (p90 - p10) / median: robust to the odd descheduled sample."""
    med = statistics.median(values)
    if len(values) > 1:
        deciles = statistics.quantiles(values, n=10, method="inclusive")
        spread = (deciles[-1] - deciles[0]) / med if med > 0 else 0.0
    else:
        spread = 0.0
    return _Stat(med, len(values), spread, what)


def _best_rate(result: Any, label: str) -> _Stat:
    """Best of the per-size median rates of a matmul sweep (2 n^3 operations per call)."""
    best: _Stat | None = None
    for n, secs in result["results"]:
        rates = [2.0 * n**3 / s for s in secs]
        st = _stat_of(rates, f"{label} {result['method']}, n={n}")
        if best is None or st.value > best.value:
            best = st
    assert best is not None
    sizes = [n for n, _ in result["results"]]
    return _Stat(best.value, best.count, best.spread,
                 f"{best.what} (best of the medians over n={','.join(map(str, sizes))}), "
                 f"{best.value / 1e9:.1f} G op/s")


def _per_call(result: Any, label: str) -> _Stat:
    st = _stat_of(result["samples"], f"{label} {result['method']}, seconds per call")
    return st


def _copy_rate(samples: Sequence[float], nbytes: int, what: str) -> _Stat:
    return _stat_of([2.0 * nbytes / s for s in samples], what)


def _link_fit(results: Sequence[tuple[int, list[float]]], what: str) -> tuple[_Stat, _Stat]:
    """Latency = half the empty round trip; bandwidth = slope of (round trip - empty round
    trip) against bytes, fitted through the origin over the non-empty sizes."""
    by_size = {size: statistics.median(s) for size, s in results}
    empty = next(s for size, s in results if size == 0)
    latency = _stat_of([x / 2 for x in empty], f"{what}: one-way handshake latency, half the "
                                               f"round trip of an empty message")
    pts = [(size, by_size[size] - by_size[0]) for size, _ in results if size > 0]
    num = sum(size * max(y, 1e-12) for size, y in pts)
    den = sum(size * size for size, _ in pts)
    bw = den / num
    largest, samples = max(results, key=lambda r: r[0])
    rates = [largest / max(s - by_size[0], 1e-12) for s in samples]
    spread_st = _stat_of(rates, "")
    sizes = ",".join(str(size) for size, _ in pts)
    return latency, _Stat(bw, spread_st.count, spread_st.spread,
                          f"{what}: end-to-end bandwidth (write into the shared block, notify, "
                          f"copy out), fitted over sizes {sizes} bytes")


@dataclass(frozen=True, slots=True)
class _Plan:
    mm_sizes: tuple[int, ...]
    mm_repeats: int
    mm_target_s: float
    dispatch_repeats: int
    dispatch_target_s: float
    copy_bytes: int
    copy_repeats: int
    window_s: float
    link_sizes: tuple[int, ...]
    link_repeats_small: int
    link_repeats_large: int


def _plan(quick: bool) -> _Plan:
    copy_bytes = min(max(64 * 2**20, 2 * _l3_bytes()), 2**30)
    if quick:
        return _Plan((256, 512), 3, 0.02, 3, 0.01, copy_bytes, 3, 0.2,
                     (0, 2**20, 8 * 2**20), 50, 3)
    return _Plan((256, 512, 1024, 2048), 7, 0.1, 9, 0.05, copy_bytes, 9, 1.0,
                 (0, 2**20, 16 * 2**20, 64 * 2**20), 300, 9)


def probe(*, progress: Progress | None = None, quick: bool = False) -> Machine:
    """Measure this machine and return it as a ``Machine`` (see the module docstring).

    ``progress(message, fraction)`` is called before each step and with 1.0 at the end.
    ``quick`` uses fewer repeats and smaller sizes (for tests; a few seconds to measure).
    Workers are started with multiprocessing ``spawn``, so a script calling this must guard
    its top level with ``if __name__ == "__main__":``. Raises ``PlacewiseError`` when a
    measurement fails.
    """
    report: Progress = progress or (lambda _msg, _frac: None)
    plan = _plan(quick)
    usable = _usable_cores()
    c0 = usable[0]
    c1 = usable[1] if len(usable) > 1 else usable[0]
    dual = c1 != c0
    date = _dt.datetime.now(_dt.UTC).date().isoformat()
    load_before = _load_average()
    steps = 9 if dual else 8
    step = 0

    def tick(message: str) -> None:
        nonlocal step
        report(message, step / steps)
        step += 1

    ctx = mp.get_context("spawn")
    peer_a, peer_b = ctx.Pipe()
    workers: list[_Worker] = []
    shm = None
    torch_mods = ("numpy", "torch")
    ort_mods = ("numpy", "onnx", "onnxruntime")
    try:
        tick("starting measurement workers")
        w0 = _start(ctx, "cpu0", [c0], 1, peer_a, torch_mods)
        workers.append(w0)
        w1 = _start(ctx, "cpu1", [c1], 1, peer_b, ort_mods)
        workers.append(w1)
        w01 = _start(ctx, "cpu01", [c0, c1], 2, None, torch_mods) if dual else None
        if w01 is not None:
            workers.append(w01)
        for w in workers:
            w.receive("start-up")

        mm = {"sizes": plan.mm_sizes, "repeats": plan.mm_repeats,
              "target_s": plan.mm_target_s}
        tick(f"fp32 matmul on core {c0} (torch, 1 thread)")
        r_mm0 = w0.call("torch_mm", "fp32 matmul", **mm)
        tick(f"int8 and fp32 matmul on core {c1} (onnxruntime, 1 thread)")
        r_int8 = w1.call("ort_mm", "int8 matmul", integer=True, **mm)
        r_mm1 = w1.call("ort_mm", "fp32 matmul", integer=False, **mm)
        r_mm01 = None
        if w01 is not None:
            tick(f"fp32 matmul on cores {c0},{c1} (torch, 2 threads)")
            r_mm01 = w01.call("torch_mm", "fp32 matmul", **mm)

        tick("per-op dispatch overhead")
        disp = {"repeats": plan.dispatch_repeats, "target_s": plan.dispatch_target_s}
        r_d0 = w0.call("torch_dispatch", "dispatch overhead", **disp)
        r_d1 = w1.call("ort_dispatch", "dispatch overhead", **disp)
        r_d01 = w01.call("torch_dispatch", "dispatch overhead", **disp) if w01 else None

        tick("memory bandwidth, one core at a time")
        nb = plan.copy_bytes
        r_bw0 = w0.call("copy_bw", "memory bandwidth", nbytes=nb, repeats=plan.copy_repeats)
        r_bw1 = w1.call("copy_bw", "memory bandwidth", nbytes=nb, repeats=plan.copy_repeats)

        tick("memory bandwidth, both cores at once")
        start_at = time.monotonic() + 0.3
        win = {"nbytes": nb, "start_at": start_at, "duration_s": plan.window_s}
        w0.send("copy_window", **win)
        if dual:
            w1.send("copy_window", **win)
        r_win0 = w0.receive("concurrent memory bandwidth")
        r_win1 = w1.receive("concurrent memory bandwidth") if dual else None

        tick("shared-memory copies between worker processes")
        from multiprocessing import shared_memory

        shm = shared_memory.SharedMemory(create=True, size=max(plan.link_sizes))
        link = {"shm_name": shm.name, "sizes": plan.link_sizes,
                "repeats_small": plan.link_repeats_small,
                "repeats_large": plan.link_repeats_large}
        w0.send("link", role="send", **link)
        w1.send("link", role="recv", **link)
        r_link = w0.receive("link copy")
        w1.receive("link copy")
        tick("assembling the machine spec")
    finally:
        _stop(workers)
        peer_a.close()
        peer_b.close()
        if shm is not None:
            shm.close()
            with contextlib.suppress(FileNotFoundError):
                shm.unlink()

    mb = nb / 2**20
    peak0 = _best_rate(r_mm0, f"core {c0}, 1 thread:")
    int8_1 = _best_rate(r_int8, f"core {c1}, 1 thread:")
    fp32_1 = _best_rate(r_mm1, f"core {c1}, 1 thread:")
    disp0 = _per_call(r_d0, f"core {c0}:")
    disp1 = _per_call(r_d1, f"core {c1}:")
    bw0 = _copy_rate(r_bw0["samples"], nb, f"core {c0} alone: numpy copy of {mb:.0f} MiB, "
                                           f"bytes read + written per second")
    bw1 = _copy_rate(r_bw1["samples"], nb, f"core {c1} alone: numpy copy of {mb:.0f} MiB, "
                                           f"bytes read + written per second")
    if dual and r_win1 is not None:
        s0 = _copy_rate(r_win0["samples"], nb, "")
        s1 = _copy_rate(r_win1["samples"], nb, "")
        both = _Stat(s0.value + s1.value, min(s0.count, s1.count), max(s0.spread, s1.spread),
                     f"cores {c0} and {c1} at once: numpy copies of {mb:.0f} MiB each, sum of "
                     f"the two cores' bytes read + written per second (core {c0} alone: "
                     f"{bw0.value / 1e9:.2f} GB/s, core {c1} alone: {bw1.value / 1e9:.2f} GB/s)")
    else:
        both = _Stat(bw0.value, bw0.count, bw0.spread,
                     f"one usable core: {bw0.what}")
    link_what = (f"shared memory between worker processes on cores {c0} and {c1}, "
                 f"pipe handshake")
    lat, link_bw = _link_fit(r_link["results"], link_what)

    versions = {d: package_version(d) for d in ("torch", "onnxruntime", "numpy")}
    cpu_name = cpu_model()
    dram = _dram_bytes()
    tags = {
        "cpu_model": cpu_name,
        "cores": ",".join(map(str, [c0, c1] if dual else [c0])),
        "usable_cores": str(len(usable)),
        "logical_cpus": str(os.cpu_count() or 0),
        "isa": str(r_mm0.get("isa", "")),
        "torch": versions["torch"],
        "onnxruntime": versions["onnxruntime"],
        "numpy": versions["numpy"],
        "python": platform.python_version(),
        "threads": "cpu0=1,cpu1=1" + (",cpu01=2" if dual else ""),
        "date": date,
        "probe_mode": "quick" if quick else "full",
        # other work on these cores during the probe lowers every figure: keep the evidence
        "load_average_1m": f"{load_before} at start, {_load_average()} at end",
        "fingerprint": host_fingerprint(),
    }

    def tier(bw: _Stat) -> dict[str, Any]:
        return {"name": "dram", "capacity_bytes": dram,
                "bandwidth_bytes_per_s": bw.value, "shared_with": "dram-mc",
                "source": (f"capacity: psutil.virtual_memory().total on {date}, the physical "
                           f"DRAM shared by every local device (not additive); bandwidth: "
                           f"{bw.source(date)}")}

    cpu1_backend = r_int8.get("backend", "onnxruntime")
    devices: list[dict[str, Any]] = [
        {"name": "cpu0", "kind": "cpu", "model": f"{cpu_name}, core {c0}, torch fp32",
         "peak_flops_per_s": {"fp32": peak0.value}, "peak_source": peak0.source(date),
         "memory": [tier(bw0)], "launch_overhead_s": disp0.value,
         "launch_source": disp0.source(date), "compute_units": 1, "lanes": 1,
         "resources": ["dram-mc"], "cores": [c0], "backend": "torch"},
        {"name": "cpu1", "kind": "cpu",
         "model": f"{cpu_name}, core {c1}, {cpu1_backend} int8/fp32",
         "peak_flops_per_s": {"int8": int8_1.value, "fp32": fp32_1.value},
         "peak_source": f"int8: {int8_1.source(date)}; fp32: {fp32_1.source(date)}",
         "memory": [tier(bw1)], "launch_overhead_s": disp1.value,
         "launch_source": disp1.source(date), "compute_units": 1, "lanes": 1,
         "resources": ["dram-mc"], "cores": [c1], "backend": cpu1_backend},
    ]
    if dual and r_mm01 is not None and r_d01 is not None:
        peak01 = _best_rate(r_mm01, f"cores {c0},{c1}, 2 threads:")
        disp01 = _per_call(r_d01, f"cores {c0},{c1}:")
        devices.append(
            {"name": "cpu01", "kind": "cpu", "model": f"{cpu_name}, cores {c0},{c1}, "
                                                      f"torch fp32, 2 threads",
             "peak_flops_per_s": {"fp32": peak01.value}, "peak_source": peak01.source(date),
             "memory": [tier(both)], "launch_overhead_s": disp01.value,
             "launch_source": disp01.source(date), "compute_units": 2, "lanes": 1,
             "resources": ["dram-mc"], "cores": [c0, c1], "backend": "torch"})

    shared: list[dict[str, Any]] = [
        {"name": "dram-mc", "kind": "memory_controller", "bandwidth_bytes_per_s": both.value,
         "source": both.source(date)}]
    names = [d["name"] for d in devices]
    links = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            links.append({
                "name": f"shm-{a}-{b}", "endpoints": [a, b],
                "bandwidth_bytes_per_s": link_bw.value, "latency_s": lat.value,
                "duplex": False, "resource": "dram-mc",
                "source": f"bandwidth: {link_bw.source(date)}; latency: {lat.source(date)}"})
    kinds = f"fp32 torch on core {c0}, int8/fp32 {cpu1_backend} on core {c1}"
    description = (
        f"This machine ({cpu_name}, {len(usable)} usable cores) as placewise worker devices: "
        f"{kinds}" + (f", fp32 torch on cores {c0},{c1} with 2 threads" if dual else
                      "; only one usable core, so cpu0 and cpu1 share it and cpu01 is absent")
        + ". Every device's dram tier is the same physical memory (capacity shared, not "
        "additive) behind the memory controller dram-mc. Devices whose `cores` intersect "
        "share those cores and must not compute at the same time. Links are shared-memory "
        "copies between worker processes.")
    data = {"schema_version": 1, "name": "local", "description": description, "tags": tags,
            "devices": devices, "shared_resources": shared, "links": links}
    try:
        machine = Machine.model_validate(data)
    except Exception as exc:  # a measurement produced an impossible number
        raise PlacewiseError(f"hw probe: measured spec does not validate: {exc}") from None
    report("done", 1.0)
    return machine


# --------------------------------------------------------------------------- cache


def _dump(machine: Machine) -> str:
    header = (f"# {machine.name}: this machine, {PROBE_SOURCE_PREFIX} "
              f"{machine.tags.get('date', '')}.\n# Cache written by placewise; delete it (or "
              f"use refresh) to measure again.\n")
    body = yaml.safe_dump(machine.model_dump(mode="json"), sort_keys=False, width=100,
                          allow_unicode=True)
    return header + body


def load_local(cache_dir: str | Path | None = None, refresh: bool = False, *,
               progress: Progress | None = None, quick: bool = False) -> Machine:
    """This machine as a ``Machine``: read from the cache, or probed (and cached).

    The cache is ``local-<host fingerprint>.yaml`` under ``cache_dir`` (default
    ``${XDG_CACHE_HOME:-~/.cache}/placewise``); quick probes are cached apart
    (``...-quick.yaml``) so they never stand in for a full one. A cache file that does not
    load or validate, or that was written for another host, is measured again; ``refresh``
    always measures again. A cache that cannot be written is not an error.
    """
    path = local_cache_path(cache_dir, quick=quick)
    if not refresh and path.is_file():
        try:
            cached = load_machine(path)
        except SpecError:
            cached = None
        if cached is not None and cached.tags.get("fingerprint") == host_fingerprint():
            return cached
    machine = probe(progress=progress, quick=quick)
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".local-", suffix=".yaml.tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(_dump(machine))
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    return machine
