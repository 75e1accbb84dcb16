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

CUDA devices, where ``torch.cuda``, the CUDA driver, onnxruntime's ``CUDAExecutionProvider``
or ``nvidia-smi`` sees them (``placewise.hardware.cuda``), are added as ``gpu0``, ``gpu1``,
...: backend ``cuda``, no CPU cores, peaks derived from SMs, clock and architecture, memory
bandwidth, launch latency and host copies measured in a worker of their own
(``placewise.hardware.cuda_measure``), one link to every CPU device over the GPU's one
physical host link. Without a GPU, ``ProbeResult.cuda.report`` says "no CUDA device (...)"
and the spec is the CPU devices' alone. The workers' side lives in ``probe_worker``.

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
import hashlib
import multiprocessing as mp
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from multiprocessing import shared_memory
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import yaml

from placewise.errors import PlacewiseError, SpecError
from placewise.hardware import cuda_measure
from placewise.hardware.cuda import CudaFound, GpuMeasured, found_from_raw, gpu_spec
from placewise.hardware.probe_worker import _worker_main
from placewise.hardware.spec import Machine, read_machine
from placewise.hardware.stats import PROBE_SOURCE_PREFIX
from placewise.hardware.stats import Stat as _Stat
from placewise.hardware.stats import stat_of as _stat_of

__all__ = [
    "PROBE_SOURCE_PREFIX",
    "ProbeResult",
    "cpu_model",
    "host_fingerprint",
    "load_local",
    "local_cache_path",
    "package_version",
    "probe",
    "probe_result",
    "save_local",
]

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


def _nvidia_gpu_models() -> list[str]:
    """The NVIDIA GPUs the kernel driver lists (``/proc/driver/nvidia/gpus/*/information``),
    read without loading CUDA; [] where there is no NVIDIA driver."""
    models = []
    for info in sorted(Path("/proc/driver/nvidia/gpus").glob("*/information")):
        with contextlib.suppress(OSError):
            for line in info.read_text(errors="replace").splitlines():
                if line.startswith("Model:"):
                    models.append(line.partition(":")[2].strip())
    return models


def host_fingerprint() -> str:
    """A short stable id of this host: CPU model, usable core count, torch version, and the
    NVIDIA GPUs the driver lists where there are any (a GPU added or removed is a new host).

    >>> len(host_fingerprint())
    16
    """
    key = f"{cpu_model()}|{len(_usable_cores())}|torch {package_version('torch')}"
    gpus = _nvidia_gpu_models()
    if gpus:
        key += f"|gpus {', '.join(gpus)}|onnxruntime {package_version('onnxruntime-gpu')}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def local_cache_path(cache_dir: str | Path | None = None, *, quick: bool = False) -> Path:
    """Where ``load_local`` keeps this host's probed spec."""
    if cache_dir is None:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        folder = Path(base) / "placewise"
    else:
        folder = Path(cache_dir)
    return folder / f"local-{host_fingerprint()}{'-quick' if quick else ''}.yaml"


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


def _measure_gpus(ctx: Any, found: CudaFound, core: int, quick: bool,
                  workers: list[_Worker], say: Callable[[str], None]
                  ) -> tuple[dict[int, GpuMeasured], dict[int, str]]:
    """Measure each GPU ``found`` lists, one after another in a worker of their own (pinned
    to ``core``, appended to ``workers`` so the caller stops it); a GPU whose measurement
    fails is left out, with the reason."""
    if not found.gpus or found.measure_with is None:
        return {}, {}
    preload = ("numpy", "torch") if found.measure_with == "torch" else \
        ("numpy", "onnx", "onnxruntime")
    wg = _start(ctx, "gpu", [core], 1, None, preload)
    workers.append(wg)
    wg.receive("start-up")
    measured: dict[int, GpuMeasured] = {}
    failed: dict[int, str] = {}
    for g in found.gpus:
        say(f"gpu{g.index} ({g.name}): memory, launches, host copies "
            f"({found.measure_with})")
        try:
            raw = wg.call("cuda_measure", f"gpu{g.index}", index=g.index,
                          api=found.measure_with, quick=quick)
            measured[g.index] = cuda_measure.measured_from_raw(raw)
        except (PlacewiseError, KeyError, ValueError, ZeroDivisionError) as exc:
            failed[g.index] = f"its measurement failed: {exc}"
    return measured, failed


def _plan(quick: bool) -> _Plan:
    copy_bytes = min(max(64 * 2**20, 2 * _l3_bytes()), 2**30)
    if quick:
        return _Plan((256, 512), 3, 0.02, 3, 0.01, copy_bytes, 3, 0.2,
                     (0, 2**20, 8 * 2**20), 50, 3)
    return _Plan((256, 512, 1024, 2048), 7, 0.1, 9, 0.05, copy_bytes, 9, 1.0,
                 (0, 2**20, 16 * 2**20, 64 * 2**20), 300, 9)


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """A probe's machine, what it found of CUDA (``cuda.report``: one line, "no CUDA device
    (...)" where none), and one note per GPU (added, or left out and why)."""

    machine: Machine
    cuda: CudaFound
    gpu_notes: tuple[str, ...] = ()


def probe(*, progress: Progress | None = None, quick: bool = False) -> Machine:
    """This machine as a ``Machine``: ``probe_result(...).machine``."""
    return probe_result(progress=progress, quick=quick).machine


def probe_result(*, progress: Progress | None = None, quick: bool = False) -> ProbeResult:
    """Measure this machine and return it as a ``Machine`` (see the module docstring), with
    what was found of CUDA: each GPU becomes a ``gpu`` device (``placewise.hardware.cuda``),
    measured by ``cuda_measure`` in a worker of its own; without one the spec is the CPUs'.

    ``progress(message, fraction)`` is called before each step and with 1.0 at the end.
    ``quick`` uses fewer repeats and smaller sizes (for tests; a few seconds to measure).
    Workers are started with multiprocessing ``spawn``, so a script calling this must guard
    its top level with ``if __name__ == "__main__":``. Raises ``PlacewiseError`` when a
    measurement fails.
    """
    report: Progress = progress or (lambda _msg, _frac: None)
    usable = _usable_cores()
    cores = _Cores(usable[0], usable[1] if len(usable) > 1 else usable[0], len(usable))
    date = _dt.datetime.now(_dt.UTC).date().isoformat()
    load_before = _load_average()
    steps = _Steps(report, 10 if cores.dual else 9)
    raw = _run_workers(_plan(quick), cores, quick, steps)
    machine, notes = _assemble(raw, cores, date, quick, load_before)
    report("done", 1.0)
    return ProbeResult(machine, raw.found, notes)


@dataclass(frozen=True, slots=True)
class _Cores:
    """The probe's two cores (the same one twice where only one is usable)."""

    c0: int
    c1: int
    usable: int

    @property
    def dual(self) -> bool:
        return self.c1 != self.c0


class _Steps:
    """Progress over a known number of steps."""

    def __init__(self, report: Progress, steps: int) -> None:
        self.report, self.steps, self.step = report, steps, 0

    def tick(self, message: str) -> None:
        self.report(message, self.step / self.steps)
        self.step += 1

    def within(self, message: str) -> None:
        """A message inside the current step."""
        self.report(message, (self.step - 0.5) / self.steps)


@dataclass(frozen=True, slots=True)
class _Raw:
    """The workers' replies (by measurement), what CUDA detection found and measured."""

    replies: dict[str, Any]
    nbytes: int
    found: CudaFound
    measured: dict[int, GpuMeasured]
    failed: dict[int, str]


def _run_workers(plan: _Plan, cores: _Cores, quick: bool, steps: _Steps) -> _Raw:
    """Start the workers, measure, stop them (whatever happens)."""
    c0, c1, dual = cores.c0, cores.c1, cores.dual
    ctx = mp.get_context("spawn")
    peer_a, peer_b = ctx.Pipe()
    workers: list[_Worker] = []
    shm = None
    torch_mods = ("numpy", "torch")
    try:
        steps.tick("starting measurement workers")
        w0 = _start(ctx, "cpu0", [c0], 1, peer_a, torch_mods)
        workers.append(w0)
        w1 = _start(ctx, "cpu1", [c1], 1, peer_b, ("numpy", "onnx", "onnxruntime"))
        workers.append(w1)
        w01 = _start(ctx, "cpu01", [c0, c1], 2, None, torch_mods) if dual else None
        if w01 is not None:
            workers.append(w01)
        for w in workers:
            w.receive("start-up")
        r = _measure_cpus(plan, cores, w0, w1, w01, steps)
        steps.tick("shared-memory copies between worker processes")
        shm = shared_memory.SharedMemory(create=True, size=max(plan.link_sizes))
        link = {"shm_name": shm.name, "sizes": plan.link_sizes,
                "repeats_small": plan.link_repeats_small,
                "repeats_large": plan.link_repeats_large}
        w0.send("link", role="send", **link)
        w1.send("link", role="recv", **link)
        r["link"] = w0.receive("link copy")
        w1.receive("link copy")
        steps.tick("CUDA devices")
        found = found_from_raw(w0.call("cuda_detect", "CUDA devices"))
        measured, failed = _measure_gpus(ctx, found, c0, quick, workers, steps.within)
        steps.tick("assembling the machine spec")
    finally:
        _stop(workers)
        peer_a.close()
        peer_b.close()
        if shm is not None:
            shm.close()
            with contextlib.suppress(FileNotFoundError):
                shm.unlink()
    return _Raw(r, plan.copy_bytes, found, measured, failed)


def _measure_cpus(plan: _Plan, cores: _Cores, w0: _Worker, w1: _Worker, w01: _Worker | None,
                  steps: _Steps) -> dict[str, Any]:
    """Matmul rates, dispatch overheads and memory bandwidth on the CPU workers."""
    c0, c1, dual = cores.c0, cores.c1, cores.dual
    r: dict[str, Any] = {}
    mm = {"sizes": plan.mm_sizes, "repeats": plan.mm_repeats, "target_s": plan.mm_target_s}
    steps.tick(f"fp32 matmul on core {c0} (torch, 1 thread)")
    r["mm0"] = w0.call("torch_mm", "fp32 matmul", **mm)
    steps.tick(f"int8 and fp32 matmul on core {c1} (onnxruntime, 1 thread)")
    r["int8"] = w1.call("ort_mm", "int8 matmul", integer=True, **mm)
    r["mm1"] = w1.call("ort_mm", "fp32 matmul", integer=False, **mm)
    r["mm01"] = None
    if w01 is not None:
        steps.tick(f"fp32 matmul on cores {c0},{c1} (torch, 2 threads)")
        r["mm01"] = w01.call("torch_mm", "fp32 matmul", **mm)

    steps.tick("per-op dispatch overhead")
    disp = {"repeats": plan.dispatch_repeats, "target_s": plan.dispatch_target_s}
    r["d0"] = w0.call("torch_dispatch", "dispatch overhead", **disp)
    r["d1"] = w1.call("ort_dispatch", "dispatch overhead", **disp)
    r["d01"] = w01.call("torch_dispatch", "dispatch overhead", **disp) if w01 else None

    steps.tick("memory bandwidth, one core at a time")
    nb = plan.copy_bytes
    r["bw0"] = w0.call("copy_bw", "memory bandwidth", nbytes=nb, repeats=plan.copy_repeats)
    r["bw1"] = w1.call("copy_bw", "memory bandwidth", nbytes=nb, repeats=plan.copy_repeats)

    steps.tick("memory bandwidth, both cores at once")
    start_at = time.monotonic() + 0.3
    win = {"nbytes": nb, "start_at": start_at, "duration_s": plan.window_s}
    w0.send("copy_window", **win)
    if dual:
        w1.send("copy_window", **win)
    r["win0"] = w0.receive("concurrent memory bandwidth")
    r["win1"] = w1.receive("concurrent memory bandwidth") if dual else None
    return r


def _bandwidths(raw: _Raw, cores: _Cores) -> tuple[_Stat, _Stat, _Stat]:
    """Memory bandwidth of core c0 alone, c1 alone, and both at once."""
    r, nb, c0, c1 = raw.replies, raw.nbytes, cores.c0, cores.c1
    mb = nb / 2**20
    bw0 = _copy_rate(r["bw0"]["samples"], nb, f"core {c0} alone: numpy copy of {mb:.0f} MiB, "
                                              f"bytes read + written per second")
    bw1 = _copy_rate(r["bw1"]["samples"], nb, f"core {c1} alone: numpy copy of {mb:.0f} MiB, "
                                              f"bytes read + written per second")
    if cores.dual and r["win1"] is not None:
        s0 = _copy_rate(r["win0"]["samples"], nb, "")
        s1 = _copy_rate(r["win1"]["samples"], nb, "")
        both = _Stat(s0.value + s1.value, min(s0.count, s1.count), max(s0.spread, s1.spread),
                     f"cores {c0} and {c1} at once: numpy copies of {mb:.0f} MiB each, sum of "
                     f"the two cores' bytes read + written per second (core {c0} alone: "
                     f"{bw0.value / 1e9:.2f} GB/s, core {c1} alone: {bw1.value / 1e9:.2f} GB/s)")
    else:
        both = _Stat(bw0.value, bw0.count, bw0.spread, f"one usable core: {bw0.what}")
    return bw0, bw1, both


def _tags(raw: _Raw, cores: _Cores, cpu_name: str, date: str, quick: bool,
          load_before: str) -> dict[str, str]:
    c0, c1, dual = cores.c0, cores.c1, cores.dual
    versions = {d: package_version(d) for d in ("torch", "onnxruntime", "numpy")}
    return {
        "cpu_model": cpu_name,
        "cores": ",".join(map(str, [c0, c1] if dual else [c0])),
        "usable_cores": str(cores.usable),
        "logical_cpus": str(os.cpu_count() or 0),
        "isa": str(raw.replies["mm0"].get("isa", "")),
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


def _cpu_devices(raw: _Raw, cores: _Cores, cpu_name: str, date: str,
                 bws: tuple[_Stat, _Stat, _Stat]) -> list[dict[str, Any]]:
    """cpu0 (torch fp32 on c0), cpu1 (int8/fp32 on c1) and, with two cores, cpu01."""
    r, c0, c1 = raw.replies, cores.c0, cores.c1
    bw0, bw1, both = bws
    peak0 = _best_rate(r["mm0"], f"core {c0}, 1 thread:")
    int8_1 = _best_rate(r["int8"], f"core {c1}, 1 thread:")
    fp32_1 = _best_rate(r["mm1"], f"core {c1}, 1 thread:")
    disp0 = _per_call(r["d0"], f"core {c0}:")
    disp1 = _per_call(r["d1"], f"core {c1}:")
    dram = _dram_bytes()

    def tier(bw: _Stat) -> dict[str, Any]:
        return {"name": "dram", "capacity_bytes": dram,
                "bandwidth_bytes_per_s": bw.value, "shared_with": "dram-mc",
                "source": (f"capacity: psutil.virtual_memory().total on {date}, the physical "
                           f"DRAM shared by every local device (not additive); bandwidth: "
                           f"{bw.source(date)}")}

    cpu1_backend = r["int8"].get("backend", "onnxruntime")
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
    if cores.dual and r["mm01"] is not None and r["d01"] is not None:
        peak01 = _best_rate(r["mm01"], f"cores {c0},{c1}, 2 threads:")
        disp01 = _per_call(r["d01"], f"cores {c0},{c1}:")
        devices.append(
            {"name": "cpu01", "kind": "cpu", "model": f"{cpu_name}, cores {c0},{c1}, "
                                                      f"torch fp32, 2 threads",
             "peak_flops_per_s": {"fp32": peak01.value}, "peak_source": peak01.source(date),
             "memory": [tier(both)], "launch_overhead_s": disp01.value,
             "launch_source": disp01.source(date), "compute_units": 2, "lanes": 1,
             "resources": ["dram-mc"], "cores": [c0, c1], "backend": "torch"})
    return devices


def _assemble(raw: _Raw, cores: _Cores, date: str, quick: bool, load_before: str
              ) -> tuple[Machine, tuple[str, ...]]:
    """The measured machine spec, validated, and the GPU notes."""
    c0, c1, dual = cores.c0, cores.c1, cores.dual
    bws = _bandwidths(raw, cores)
    link_what = (f"shared memory between worker processes on cores {c0} and {c1}, "
                 f"pipe handshake")
    lat, link_bw = _link_fit(raw.replies["link"]["results"], link_what)
    cpu_name = cpu_model()
    tags = _tags(raw, cores, cpu_name, date, quick, load_before)
    devices = _cpu_devices(raw, cores, cpu_name, date, bws)
    shared: list[dict[str, Any]] = [
        {"name": "dram-mc", "kind": "memory_controller", "bandwidth_bytes_per_s": bws[2].value,
         "source": bws[2].source(date)}]
    names = [d["name"] for d in devices]
    gpus = gpu_spec(raw.found, raw.measured, date=date, hosts=names, left_out=raw.failed)
    links = [{"name": f"shm-{a}-{b}", "endpoints": [a, b],
              "bandwidth_bytes_per_s": link_bw.value, "latency_s": lat.value,
              "duplex": False, "resource": "dram-mc",
              "source": f"bandwidth: {link_bw.source(date)}; latency: {lat.source(date)}"}
             for i, a in enumerate(names) for b in names[i + 1:]]
    kinds = (f"fp32 torch on core {c0}, int8/fp32 "
             f"{raw.replies['int8'].get('backend', 'onnxruntime')} on core {c1}")
    description = (
        f"This machine ({cpu_name}, {cores.usable} usable cores) as placewise worker devices: "
        f"{kinds}" + (f", fp32 torch on cores {c0},{c1} with 2 threads" if dual else
                      "; only one usable core, so cpu0 and cpu1 share it and cpu01 is absent")
        + ". Every device's dram tier is the same physical memory (capacity shared, not "
        "additive) behind the memory controller dram-mc. Devices whose `cores` intersect "
        "share those cores and must not compute at the same time. Links are shared-memory "
        "copies between worker processes.")
    if gpus.devices:
        tags["gpus"] = ", ".join(f"{d['name']}={d['model']}" for d in gpus.devices)
        tags["cuda"] = raw.found.report
        description += (f" GPUs ({', '.join(d['name'] for d in gpus.devices)}): CUDA devices "
                        f"with backend cuda, plannable and exportable (no CUDA backend runs "
                        f"them in this build); each reaches every CPU device over its one "
                        f"host link.")
    data = {"schema_version": 1, "name": "local", "description": description, "tags": tags,
            "devices": devices + gpus.devices, "shared_resources": shared,
            "links": links + gpus.links}
    try:
        machine = Machine.model_validate(data)
    except Exception as exc:  # a measurement produced an impossible number
        raise PlacewiseError(f"hw probe: measured spec does not validate: {exc}") from None
    return machine, tuple(gpus.notes)


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
            cached = read_machine(path)
        except SpecError:
            cached = None
        if cached is not None and cached.tags.get("fingerprint") == host_fingerprint():
            return cached
    machine = probe(progress=progress, quick=quick)
    save_local(machine, cache_dir, quick=quick)
    return machine


def save_local(machine: Machine, cache_dir: str | Path | None = None, *,
               quick: bool = False) -> None:
    """Write ``machine`` as this host's ``--hw local`` cache (what ``load_local`` reads); a
    cache that cannot be written is not an error."""
    path = local_cache_path(cache_dir, quick=quick)
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
