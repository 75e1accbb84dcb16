"""Measure a model's ops at their real shapes on this machine's devices.

``profile_model`` measures each *distinct* op of a graph (same kind, precision, shapes,
dtypes and attributes: one ``op_key``) on each local device (a device with ``cores`` and a
``backend``), and the conversion kernels (fp32 <-> int8) at the model's activation sizes,
then fits the per-(device, kind, precision) models of ``placewise.cost.calibrated``.

How one measurement is made:

- Devices are measured one after the other, each in its own worker process (``spawn``)
  pinned with ``os.sched_setaffinity`` to the device's cores, with torch and onnxruntime
  using ``len(cores)`` threads. Nothing else of placewise runs meanwhile.
- The worker loads the model source itself (``runtime.opexec.load_source``), runs it once
  for reference values, and builds each op's runner (``runtime.opexec``).
- Every op of a model is sampled in ``rounds`` rounds, round-robin over the ops, so that a
  burst of load from other processes hits a round of many ops rather than all samples of
  one. In a round: warm-up (at least two calls and ``warmup_s``), then single calls timed
  with ``time.perf_counter`` (garbage collection off) until there are
  ``ceil(min_repeats / rounds)`` (at least 3) samples *and* the distribution-free 95%
  confidence interval of the round's median is within ``target_rel_ci`` of it, or the
  round's share of ``max_time_s`` (per op and device) is spent.
- Each measurement records as ``median_s`` the median of its quietest round (other
  processes only add time; on a shared machine the plain median of all samples moved by
  10-25% between two profiles of the same model, the quietest-round median by about 2%),
  p10 and p90 over all samples, the sample count and the relative CI reached.
- A measurement of a multi-core device much slower than the same op on one of its cores
  alone is flagged ``contention`` (``flag_contention``): a parallel region waited for a
  worker thread whose core another process held. Flagged times are kept in the file but
  neither fitted nor used (the op gets its fitted time, and says so).

- Each device's worker also measures the executor's per-step overhead
  (``runtime.worker.measure_step_overhead``: the real ``_Worker._step`` of a no-op compute
  step, wall minus kernel time, in rounds; ``DISPATCH_METHOD``) and the calibration keeps it
  in ``DeviceRecord.dispatch`` (median of the quietest round, p10..p90): the calibrated
  model adds it once per executed step.

Progress is reported through ``progress(done, total, message)``; the library never prints.

>>> s = summarize_samples([3e-6, 1e-6, 2e-6, 2e-6, 2e-6])
>>> s["median_s"], s["n"]
(2e-06, 5)
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import gc
import math
import multiprocessing as mp
import os
import platform
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

import numpy as np

from placewise.cost.calibrated import (
    Calibration,
    Failure,
    Measurement,
    StepOverhead,
    conversion_features,
    conversion_key,
    device_record,
    fit_measurements,
    op_family,
    op_features,
    op_key,
    op_series,
)
from placewise.cost.calibration import DeviceRecord
from placewise.cost.model import Representation
from placewise.errors import InputError, PlacewiseError, UnsupportedError
from placewise.graph.ir import INT8_KINDS, Graph, Op, OpKind, Provenance, Role
from placewise.graph.onnx_data import save_model
from placewise.hardware.spec import Device, Machine
from placewise.hardware.stats import quantiles
from placewise.runtime.backends import backend_gap
from placewise.runtime.compile import int8_weights_reduced
from placewise.runtime.worker import measure_step_overhead
from placewise.units import DType

if TYPE_CHECKING:
    from placewise.runtime.opexec import ModelSource

__all__ = [
    "CONTENTION_EXCESS_S",
    "CONTENTION_RATIO",
    "DEFAULT_MAX_TIME_S",
    "DEFAULT_MIN_REPEATS",
    "DEFAULT_TARGET_REL_CI",
    "DISPATCH_METHOD",
    "ProfileJob",
    "flag_contention",
    "local_devices",
    "measure",
    "median_rel_ci",
    "plan_jobs",
    "profile_model",
    "profile_models",
    "sample",
    "summarize_rounds",
    "summarize_samples",
]

DEFAULT_MIN_REPEATS = 7
DEFAULT_MAX_TIME_S = 0.5
DEFAULT_TARGET_REL_CI = 0.03
DEFAULT_WARMUP_S = 0.01
#: each op is sampled in this many rounds, round-robin over all ops of a model, so that a
#: burst of load from other processes spreads over many ops instead of biasing one
DEFAULT_ROUNDS = 4
#: most distinct tensor sizes whose conversions are measured per device
MAX_CONVERSION_SIZES = 6
_MAX_SAMPLES = 2000
# kinds that never run (no kernel in any backend)
_SKIP_KINDS = frozenset({OpKind.TASK, OpKind.CONSTANT})
_INT8_KINDS_VALUES = tuple(sorted(k.value for k in INT8_KINDS))  # graph.ir.INT8_KINDS

Progress = Callable[[int, int, str], None]


# ---- statistics -------------------------------------------------------------------------


def median_rel_ci(samples: Sequence[float]) -> float:
    """Width of the distribution-free 95% confidence interval of the median (order
    statistics, normal approximation of the binomial), relative to the median.

    >>> median_rel_ci([1.0] * 20)
    0.0
    """
    n = len(samples)
    if n < 3:
        return math.inf
    s = sorted(samples)
    half = 1.96 * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half))
    hi = min(n - 1, math.ceil(n / 2 + half))
    med = float(np.median(s))
    return (s[hi] - s[lo]) / med if med > 0 else math.inf


def summarize_samples(samples: Sequence[float]) -> dict[str, Any]:
    """Median, p10, p90, count and relative CI of the median of timing samples."""
    p10, med, p90 = quantiles(samples)
    return {"median_s": med, "p10_s": p10, "p90_s": p90, "n": len(samples),
            "rel_ci": float(min(median_rel_ci(samples), 1e6))}


def summarize_rounds(rounds: Sequence[Sequence[float]]) -> dict[str, Any]:
    """Summarize samples taken in several rounds: ``median_s`` is the median of the
    quietest round (the lowest round median), because other processes only ever add time
    and a whole round may run while another process shares the core; ``p10_s``/``p90_s``
    are over every sample (the spread seen, interference included); ``rel_ci`` is the
    relative 95% CI of the chosen round's median.

    >>> s = summarize_rounds([[2.0, 2.1, 2.0, 2.2], [1.0, 1.1, 1.0, 1.05], [3.0, 3.0, 3.1]])
    >>> s["median_s"], s["n"], s["rounds"]
    (1.025, 11, 3)
    """
    full = [r for r in rounds if r]
    if not full:
        raise ValueError("no samples")
    quiet = min(full, key=lambda r: float(np.median(r)))
    every = [x for r in full for x in r]
    out = summarize_samples(every)
    med = float(np.median(quiet))
    out.update(median_s=med, p10_s=min(out["p10_s"], med), p90_s=max(out["p90_s"], med),
               rel_ci=float(min(median_rel_ci(quiet), 1e6)), rounds=len(full))
    return out


def sample(fn: Callable[[], Any], *, min_repeats: int = DEFAULT_MIN_REPEATS,
           max_time_s: float = DEFAULT_MAX_TIME_S, target_rel_ci: float = DEFAULT_TARGET_REL_CI,
           warmup_s: float = DEFAULT_WARMUP_S, prior: Sequence[float] = ()) -> list[float]:
    """Warm up, then time single calls of ``fn`` until there are ``min_repeats`` new samples
    and the median of ``prior`` + new samples has a 95% CI within ``target_rel_ci``, or
    ``max_time_s`` has passed. Returns the new samples (seconds)."""
    clock = time.perf_counter
    t_end = clock() + warmup_s
    k = 0
    while k < 2 or (clock() < t_end and k < 100):
        fn()
        k += 1
    samples: list[float] = []
    gc_was = gc.isenabled()
    gc.disable()
    try:
        start = clock()
        while True:
            t0 = clock()
            fn()
            t1 = clock()
            samples.append(t1 - t0)
            n = len(samples)
            elapsed = t1 - start
            if n >= min_repeats:
                if elapsed >= max_time_s or n + len(prior) >= _MAX_SAMPLES:
                    break
                if (n % 4 == 0 or n == min_repeats) and \
                        median_rel_ci([*prior, *samples]) <= target_rel_ci:
                    break
            elif n >= 2 and elapsed >= 4 * max_time_s:
                break  # a very slow op: a few samples are all the cap allows
    finally:
        if gc_was:
            gc.enable()
    return samples


def measure(fn: Callable[[], Any], *, min_repeats: int = DEFAULT_MIN_REPEATS,
            max_time_s: float = DEFAULT_MAX_TIME_S,
            target_rel_ci: float = DEFAULT_TARGET_REL_CI,
            warmup_s: float = DEFAULT_WARMUP_S) -> dict[str, Any]:
    """Time ``fn`` in one go (see ``sample``) and summarize the samples."""
    return summarize_samples(sample(fn, min_repeats=min_repeats, max_time_s=max_time_s,
                                    target_rel_ci=target_rel_ci, warmup_s=warmup_s))


# ---- planning -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProfileJob:
    """One distinct op key to measure on one device (run through ``op``'s source node)."""

    device: str
    key: str
    kind: str
    dtype: str
    op_name: str
    source_node: str
    outputs: tuple[str, ...]
    signature: str
    features: tuple[tuple[str, float], ...]
    family: str = ""
    series: str = ""

    def to_wire(self) -> dict[str, Any]:
        return {"key": self.key, "kind": self.kind, "dtype": self.dtype, "op": self.op_name,
                "source": self.source_node, "outputs": list(self.outputs)}


def local_devices(machine: Machine, names: Sequence[str] | None = None) -> list[Device]:
    """The devices of ``machine`` that can be measured here (they have cores and a
    backend), optionally only ``names``."""
    usable = [d for d in machine.devices if d.is_local]
    if names is not None:
        by = {d.name: d for d in machine.devices}
        out: list[Device] = []
        for n in names:
            if n not in by:
                raise InputError(f"machine {machine.name!r} has no device {n!r} (devices: "
                                 f"{', '.join(by)})", place="--devices")
            if not by[n].is_local:
                raise InputError(f"{backend_gap(by[n])}: only this machine's devices with "
                                 f"a backend can be profiled", place="--devices")
            out.append(by[n])
        return out
    return usable


def _runnable_dtypes(dev: Device) -> list[DType]:
    return [d for d in dev.dtypes if d in (DType.FP32, DType.INT8)]


def plan_jobs(graph: Graph, devices: Sequence[Device]) -> tuple[list[ProfileJob], list[Failure]]:
    """The distinct (device, op key) measurements a graph needs, plus the (device, key)
    pairs known unsupported up front (int8 of a kind with no int8 kernel is not listed:
    the device record says which kinds its int8 covers)."""
    jobs: list[ProfileJob] = []
    failures: list[Failure] = []
    for dev in devices:
        seen: set[str] = set()
        for op in graph.ops:
            if op.kind in _SKIP_KINDS or not dev.supports(op.kind):
                continue
            for dtype in _runnable_dtypes(dev):
                if dtype is DType.INT8 and op.kind.value not in _INT8_KINDS_VALUES:
                    continue
                key, sig = op_key(graph, op, dtype)
                if key in seen:
                    continue
                seen.add(key)
                feats = op_features(graph, op, dtype, dev)
                jobs.append(ProfileJob(dev.name, key, op.kind.value, dtype.value, op.name,
                                       op.provenance.source or op.name, op.outputs, sig,
                                       tuple(sorted(feats.items())), op_family(op),
                                       op_series(graph, op, dtype)))
    return jobs, failures


def _conversion_sizes(graph: Graph) -> list[tuple[int, ...]]:
    """Up to ``MAX_CONVERSION_SIZES`` distinct float activation shapes, spread over sizes."""
    shapes: dict[int, tuple[int, ...]] = {}
    for t in graph.tensors:
        if t.role is Role.PARAM or not t.dtype.is_float or not t.is_concrete:
            continue
        if t.numel > 0:
            shapes.setdefault(t.numel, t.concrete_shape)
    sizes = sorted(shapes)
    if len(sizes) > MAX_CONVERSION_SIZES:
        idx = np.unique(np.linspace(0, len(sizes) - 1, MAX_CONVERSION_SIZES).round().astype(int))
        sizes = [sizes[i] for i in idx]
    return [shapes[n] for n in sizes]


_CONVERSIONS = ((Representation(DType.FP32), Representation(DType.INT8)),
                (Representation(DType.INT8), Representation(DType.FP32)))


# ---- the worker --------------------------------------------------------------------------------


def _worker_main(conn: Connection, payload: dict[str, Any]) -> None:
    """Runs in a spawned process: pin, then per source: load it, build every runner,
    sample them round-robin, report."""
    try:
        warnings.simplefilter("ignore")  # library code never prints, workers included
        from placewise.runtime import opexec  # it imports torch: in the worker only

        threads = opexec.pin_process(payload["cores"])
        conn.send({"event": "ready", "threads": threads})
        conn.send({"event": "dispatch", **_dispatch_summary()})
        for index, item in enumerate(payload["sources"]):
            _worker_source(conn, index, item, payload["settings"], threads)
        conn.send({"event": "done"})
    except BaseException as exc:
        with contextlib.suppress(Exception):
            conn.send({"event": "fatal", "reason": f"{type(exc).__name__}: {exc}",
                       "trace": traceback.format_exc()[-4000:]})
    finally:
        conn.close()


#: rounds x steps of the executor's per-step overhead measurement (about 5 ms in all)
_DISPATCH_ROUNDS = 4
_DISPATCH_STEPS = 200
DISPATCH_METHOD = ("executor _Worker._step of a no-op compute step, wall minus kernel time, "
                   f"{_DISPATCH_ROUNDS} rounds x {_DISPATCH_STEPS} steps in the pinned "
                   "profiling worker; median of the quietest round, p10..p90 of all; "
                   "excludes the loop's waits and the request hand-off")


def _dispatch_summary() -> dict[str, Any]:
    """The executor's per-step overhead on this (pinned) process: ``summarize_rounds``."""
    gc_was = gc.isenabled()
    gc.disable()
    try:
        rounds = [measure_step_overhead(_DISPATCH_STEPS) for _ in range(_DISPATCH_ROUNDS)]
    finally:
        if gc_was:
            gc.enable()
    return summarize_rounds(rounds)


def _worker_source(conn: Connection, index: int, item: dict[str, Any],
                   settings: dict[str, Any], threads: int) -> None:
    from placewise.runtime import opexec  # it imports torch: in the worker only

    src = opexec.load_source(item["source"]["ref"], shapes=item["source"]["shapes"],
                             values=item["source"].get("values"),
                             batch=item["source"]["batch"], with_graph=False)
    program = opexec.program_of(src)
    feeds = item.get("feeds_shapes")
    if isinstance(program, opexec.FxProgram):
        captured = program.reference(list(src.example_inputs) or
                                     program.example_inputs(shapes=feeds))
    else:
        captured = program.reference(program.example_inputs(None) if feeds is None
                                     else _onnx_feeds(program, feeds))

    def fail(key: str, exc: BaseException) -> None:
        unsupported = isinstance(exc, UnsupportedError)
        reason = str(exc) if unsupported else f"{type(exc).__name__}: {exc}"
        conn.send({"event": "error", "src": index, "key": key, "reason": reason[:2000],
                   "unsupported": unsupported})

    runners: list[tuple[str, Any]] = []
    for job in item["jobs"]:
        op = Op(job["op"], OpKind(job["kind"]), (), tuple(job["outputs"]),
                provenance=Provenance(source=job["source"]))
        try:
            runners.append((job["key"], opexec.make_op_runner(
                src, program, captured, op, DType(job["dtype"]), threads=threads)))
        except Exception as exc:  # recorded; the profile goes on
            fail(job["key"], exc)
    for conv in item["conversions"]:
        try:
            runners.append((conv["key"], opexec.make_conversion_runner(
                conv["shape"], Representation(DType(conv["src"])),
                Representation(DType(conv["dst"])))))
        except Exception as exc:
            fail(conv["key"], exc)
    rounds = max(1, int(settings["rounds"]))
    per_round_min = max(3, math.ceil(settings["min_repeats"] / rounds))
    per_round_cap = settings["max_time_s"] / rounds
    samples: dict[str, list[list[float]]] = {key: [] for key, _ in runners}
    failed: set[str] = set()
    for _ in range(rounds):
        for key, runner in runners:
            if key in failed:
                continue
            try:
                samples[key].append(sample(
                    runner.run, min_repeats=per_round_min, max_time_s=per_round_cap,
                    target_rel_ci=settings["target_rel_ci"], warmup_s=settings["warmup_s"]))
            except Exception as exc:
                failed.add(key)
                fail(key, exc)
            conn.send({"event": "tick", "src": index})
    for key, runner in runners:
        if key not in failed and samples[key]:
            conn.send({"event": "result", "src": index, "key": key,
                       "backend": runner.backend, **summarize_rounds(samples[key])})


def _onnx_feeds(program: Any, shapes: dict[str, list[int]]) -> dict[str, Any]:
    from onnx import helper

    rng = np.random.default_rng(0)
    feeds: dict[str, Any] = {}
    for vi in program.inputs:
        shape = tuple(shapes[vi.name])
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type))
        if dtype.kind == "f":
            feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[vi.name] = np.ones(shape, dtype=dtype)
        else:
            high = program._index_bound(vi.name)  # 0: indexes no table (a mask): ones
            feeds[vi.name] = (rng.integers(0, high, size=shape, dtype=dtype) if high
                              else np.ones(shape, dtype=dtype))
    return feeds


def _run_device(dev: Device, payload: dict[str, Any], timeout_s: float,
                on_event: Callable[[dict[str, Any]], None]) -> None:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_worker_main, args=(child, payload),
                       name=f"placewise-profile-{dev.name}", daemon=True)
    proc.start()
    child.close()
    try:
        received = 0
        while True:
            if not parent.poll(timeout_s):
                raise PlacewiseError(f"profiling on device {dev.name!r} made no progress for "
                                     f"{timeout_s:.0f} s (worker hung) after {received} "
                                     f"results")
            try:
                msg = parent.recv()
            except EOFError:
                raise PlacewiseError(f"the profiling worker of device {dev.name!r} died "
                                     f"(exit code {proc.exitcode}) after {received} "
                                     f"results") from None
            ev = msg.get("event")
            if ev == "fatal":
                raise PlacewiseError(f"profiling on device {dev.name!r} failed: "
                                     f"{msg.get('reason')}")
            if ev == "done":
                break
            if ev in ("result", "error"):
                received += 1
            on_event(msg)
    finally:
        parent.close()
        proc.join(timeout=5)
        if proc.is_alive():
            proc.terminate()
            proc.join(timeout=5)
        if proc.is_alive():
            proc.kill()
            proc.join()


def _tags(machine: Machine, devices: Sequence[Device]) -> dict[str, str]:
    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "absent"

    cpu = machine.tags.get("cpu_model", "") or platform.processor() or platform.machine()
    return {
        "cpu_model": cpu,
        "torch": version("torch"),
        "onnxruntime": version("onnxruntime"),
        "numpy": version("numpy"),
        "python": platform.python_version(),
        "host": platform.node(),
        "threads": ",".join(f"{d.name}={len(d.cores or [])}" for d in devices),
        "cores": ";".join(f"{d.name}={','.join(map(str, d.cores or []))}" for d in devices),
        "date": _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
        "int8_method": "onnxruntime quantize_dynamic (int8 weights, dynamic uint8 "
                       "activations, MatMulInteger/ConvInteger)"
                       + (", 7-bit weights (reduce_range: this CPU's integer GEMM "
                          "saturates at 8)" if int8_weights_reduced() else ""),
    }


def _reload_source(source: ModelSource, tmp: str) -> dict[str, Any]:
    """Arguments a worker can load the same source with (saving it if it lives only in
    memory)."""
    from placewise.runtime.opexec import SourceFormat  # it imports torch: lazily

    ref = source.ref
    if ref.startswith("zoo:") or (source.path is not None and source.path.is_file()):
        return source.reload_args()
    os.makedirs(tmp, exist_ok=True)
    if source.format is SourceFormat.TORCH_EXPORT:
        import torch

        path = os.path.join(tmp, "model.pt2")
        torch.export.save(source.exported_program, path)
    else:
        path = os.path.join(tmp, "model.onnx")
        save_model(source.onnx_model, path)
    return {"ref": path, "shapes": None, "batch": None}


def profile_model(graph: Graph, source: ModelSource, machine: Machine, *,
                  progress: Progress | None = None, devices: Sequence[str] | None = None,
                  min_repeats: int = DEFAULT_MIN_REPEATS, max_time_s: float = DEFAULT_MAX_TIME_S,
                  target_rel_ci: float = DEFAULT_TARGET_REL_CI,
                  warmup_s: float = DEFAULT_WARMUP_S, rounds: int = DEFAULT_ROUNDS,
                  conversions: bool = True, timeout_s: float = 300.0) -> Calibration:
    """Measure every distinct op of ``graph`` on the local devices of ``machine`` and fit
    the calibrated model. ``graph`` must be the graph of ``source`` (concrete shapes).

    ``max_time_s`` caps the sampling of one op on one device (over all ``rounds``);
    ``timeout_s`` is how long a worker may stay silent before it is considered hung (then
    ``PlacewiseError``).
    """
    return profile_models([(graph, source)], machine, progress=progress, devices=devices,
                          min_repeats=min_repeats, max_time_s=max_time_s,
                          target_rel_ci=target_rel_ci, warmup_s=warmup_s, rounds=rounds,
                          conversions=conversions, timeout_s=timeout_s)[0]


@dataclass
class _Item:
    graph: Graph
    source: ModelSource
    jobs: list[ProfileJob]
    failures: list[Failure]
    conv: dict[str, list[dict[str, Any]]]
    conv_meta: dict[tuple[str, str], tuple[str, str, dict[str, float]]]
    measurements: list[Measurement]


def profile_models(items: Sequence[tuple[Graph, ModelSource]], machine: Machine, *,
                   progress: Progress | None = None, devices: Sequence[str] | None = None,
                   min_repeats: int = DEFAULT_MIN_REPEATS,
                   max_time_s: float = DEFAULT_MAX_TIME_S,
                   target_rel_ci: float = DEFAULT_TARGET_REL_CI,
                   warmup_s: float = DEFAULT_WARMUP_S, rounds: int = DEFAULT_ROUNDS,
                   conversions: bool = True, timeout_s: float = 300.0) -> list[Calibration]:
    """``profile_model`` for several (graph, source) pairs with one worker per device for
    all of them (a calibration each; merge them with ``merge_calibrations``)."""
    if min_repeats < 1 or max_time_s <= 0 or target_rel_ci <= 0 or rounds < 1:
        raise InputError("min_repeats and rounds must be >= 1, max_time_s and target_rel_ci "
                         "> 0", place="profile settings")
    devs = local_devices(machine, devices)
    if not devs:
        raise InputError(f"machine {machine.name!r} has no local device to profile (devices "
                         f"need cores and a backend: use --hw local)", place="--hw")
    work = [_work_item(graph, source, devs, conversions) for graph, source in items]
    settings = {"min_repeats": int(min_repeats), "max_time_s": float(max_time_s),
                "target_rel_ci": float(target_rel_ci), "warmup_s": float(warmup_s),
                "rounds": int(rounds)}
    total = sum((len(w.jobs) + sum(len(v) for v in w.conv.values())) * rounds for w in work)
    if progress is not None:
        progress(0, total, f"profiling {sum(len(w.jobs) for w in work)} op measurements on "
                           f"{', '.join(d.name for d in devs)}")
    dispatch = _measure_work(work, devs, settings, total, progress, timeout_s)
    if progress is not None:
        progress(total, total, "fitting")
    cals = []
    tags = _tags(machine, devs)
    records = [_profiled_record(dev, dispatch.get(dev.name)) for dev in devs]
    for w in work:
        w.measurements = flag_contention(w.measurements, machine)
        cal = Calibration(
            created=_dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat(),
            model=w.source.ref, machine=machine.name,
            machine_fingerprint=machine.fingerprint(), tags=tags,
            settings={k: float(v) for k, v in settings.items()}, devices=records,
            measurements=w.measurements, failures=w.failures)
        cals.append(cal.with_fits(fit_measurements(w.measurements)))
    return cals


def _work_item(graph: Graph, source: ModelSource, devs: Sequence[Device], conversions: bool
               ) -> _Item:
    """One model's jobs per device, the ops no device can run, and its conversions."""
    graph.check_concrete()
    jobs, failures = plan_jobs(graph, devs)
    conv_shapes = _conversion_sizes(graph) if conversions else []
    conv: dict[str, list[dict[str, Any]]] = {}
    conv_meta: dict[tuple[str, str], tuple[str, str, dict[str, float]]] = {}
    for dev in devs:
        todo = []
        for shape in conv_shapes:
            numel = math.prod(shape)
            for s, d in _CONVERSIONS:
                key, kind = conversion_key(numel, s, d)
                todo.append({"key": key, "src": s.dtype.value, "dst": d.dtype.value,
                             "shape": list(shape)})
                conv_meta[(dev.name, key)] = (kind, d.dtype.value,
                                              conversion_features(numel, s, d))
        conv[dev.name] = todo
    return _Item(graph, source, jobs, failures, conv, conv_meta, [])


def _measure_work(work: list[_Item], devs: Sequence[Device], settings: dict[str, Any],
                  total: int, progress: Progress | None, timeout_s: float
                  ) -> dict[str, dict[str, Any]]:
    """Run every item's jobs and conversions on each device's worker, recording what comes
    back in the items; each device's dispatch measurement (by device name)."""
    done = 0
    dispatch: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="placewise-profile-") as tmp:
        reloads = [_reload_source(w.source, os.path.join(tmp, str(i)))
                   for i, w in enumerate(work)]
        for dev in devs:
            payload = {"cores": list(dev.cores or []), "settings": settings, "sources": [
                {"source": reloads[i], "jobs": [j.to_wire() for j in w.jobs
                                                if j.device == dev.name],
                 "conversions": w.conv[dev.name],
                 "feeds_shapes": {t: list(w.graph.tensor(t).concrete_shape)
                                  for t in w.graph.inputs if w.graph.has_tensor(t)}}
                for i, w in enumerate(work)]}
            by_key = [{j.key: j for j in w.jobs if j.device == dev.name} for w in work]

            def on_event(msg: dict[str, Any], dev: Device = dev,
                         by_key: list[dict[str, ProfileJob]] = by_key) -> None:
                nonlocal done
                ev = msg["event"]
                if ev == "ready":
                    return
                if ev == "dispatch":
                    dispatch[dev.name] = msg
                    return
                w = work[msg["src"]]
                if ev == "tick":
                    done += 1
                    if progress is not None:
                        progress(min(done, total), total, f"{dev.name}: {w.source.ref}")
                    return
                _record(msg, dev, w, by_key[msg["src"]].get(msg["key"]))

            _run_device(dev, payload, timeout_s, on_event)
    return dispatch


def _profiled_record(dev: Device, disp: dict[str, Any] | None) -> DeviceRecord:
    """``dev``'s calibration record: int8 kinds where it runs int8, the measured dispatch."""
    rec = device_record(dev)
    if DType.INT8 in dev.dtypes:
        rec = rec.model_copy(update={"dtype_kinds": {"int8": list(_INT8_KINDS_VALUES)}})
    if disp is not None:
        med = max(float(disp["median_s"]), 0.0)
        rec = rec.model_copy(update={"dispatch": StepOverhead(
            median_s=med, p10_s=min(float(disp["p10_s"]), med),
            p90_s=max(float(disp["p90_s"]), med), n=int(disp["n"]),
            method=DISPATCH_METHOD)})
    return rec


#: a multi-core device slower than one of its own cores alone by this factor ...
CONTENTION_RATIO = 3.0
#: ... and by at least this much: an OS time slice lost by a descheduled worker thread
CONTENTION_EXCESS_S = 1e-3


def flag_contention(measurements: Sequence[Measurement], machine: Machine
                    ) -> list[Measurement]:
    """Flag ``"contention"`` on measurements of a multi-core device that took more than
    ``CONTENTION_RATIO`` times, and ``CONTENTION_EXCESS_S`` more than, the same op (same
    key) on a device running on a subset of its cores: more cores never make an op that
    much slower by themselves, but a parallel region waits for its slowest thread, and a
    thread whose core another process holds loses whole scheduler time slices. Such a
    time says how busy the machine was, not what the op costs."""
    cores = {d.name: set(d.cores or ()) for d in machine.devices}
    by_key: dict[str, list[Measurement]] = {}
    for m in measurements:
        by_key.setdefault(m.key, []).append(m)
    out: list[Measurement] = []
    for m in measurements:
        mine = cores.get(m.device, set())
        subsets = [o.median_s for o in by_key[m.key] if o.device != m.device and
                   cores.get(o.device) and cores[o.device] < mine]
        if len(mine) > 1 and subsets and "contention" not in m.flags:
            best = min(subsets)
            if m.median_s > CONTENTION_RATIO * best and \
                    m.median_s - best > CONTENTION_EXCESS_S:
                m = m.model_copy(update={"flags": [*m.flags, "contention"]})
        out.append(m)
    return out


def _record(msg: dict[str, Any], dev: Device, w: _Item, job: ProfileJob | None) -> None:
    key = msg["key"]
    if job is not None:
        kind, dtype, sig, node = job.kind, job.dtype, job.signature, job.source_node
        feats, family, series = dict(job.features), job.family, job.series
    else:
        kind, dtype, feats = w.conv_meta[(dev.name, key)]
        sig, node, family, series = "", "", "", ""
    if msg["event"] == "result":
        med = max(msg["median_s"], 1e-9)
        w.measurements.append(Measurement(
            device=dev.name, key=key, kind=kind, dtype=dtype, signature=sig, median_s=med,
            p10_s=min(msg["p10_s"], med), p90_s=max(msg["p90_s"], med), n=msg["n"],
            rel_ci=msg["rel_ci"], backend=msg.get("backend", ""), family=family,
            series=series, source_node=node, features=feats))
    else:
        w.failures.append(Failure(device=dev.name, key=key, kind=kind, dtype=dtype,
                                  reason=msg.get("reason", ""),
                                  unsupported=bool(msg.get("unsupported")), source_node=node))
