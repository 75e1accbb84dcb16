"""The whole-model onnxruntime baselines a plan is compared with.

A whole-model ``onnxruntime.InferenceSession`` (the model exported to ONNX at the plan's
shapes) runs in its own process, pinned to all usable cores with as many threads, on the
same requests as the plan: fp32; also int8 dynamic quantization when the plan computes in
int8; and, when the plan runs on one device whose cores are fewer, fp32 on exactly those
cores (the plan against it is the executor's own overhead). Each gives isolated latency,
back-to-back throughput and output quality against the same reference.
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing as mp
import os
import tempfile
import time
import traceback
import warnings
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

import numpy as np

from placewise.errors import PlacewiseError, UnsupportedError
from placewise.graph import zoo
from placewise.graph.ir import Graph
from placewise.graph.onnx_data import save_model
from placewise.precision.metrics import OutputQuality
from placewise.runtime.compile import int8_weights_reduced
from placewise.runtime.program import ExecProgram
from placewise.schedule.simulate import TaskKind
from placewise.units import DType
from placewise.validate.quality import looks_like_logits, output_quality
from placewise.validate.records import BaselineReport, latency_stats

if TYPE_CHECKING:
    from placewise.runtime.opexec import ModelSource

__all__ = ["plan_baselines"]


def _baseline_worker(conn: Connection, path: str, cores: list[int], quantize: bool,
                     inputs: list[list[np.ndarray[Any, Any]]], names: list[str],
                     outputs: list[str], min_time_s: float) -> None:
    try:
        os.sched_setaffinity(0, cores)
        # lazy: onnxruntime is heavy to import, loaded only when this runs
        import onnxruntime as ort

        # lazy: onnxruntime (placewise.onnxrt imports it) is heavy to import, loaded only when this runs
        from placewise.onnxrt import new_session

        model_path = path
        if quantize:
            # lazy: onnxruntime is heavy to import, loaded only when this runs
            from onnxruntime.quantization import quantize_dynamic

            # lazy: onnxruntime (placewise.onnxrt imports it) is heavy to import, loaded only when this runs
            from placewise.onnxrt import quiet_logs

            quiet_logs()

            q = os.path.join(os.path.dirname(path), "model.int8.onnx")
            # 7-bit weights where this CPU's integer GEMM saturates, as onnxruntime advises
            quantize_dynamic(path, q, reduce_range=int8_weights_reduced())
            model_path = q
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = len(cores)
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        sess = new_session(model_path, opts,
                           providers=["CPUExecutionProvider"])
        in_names = [i.name for i in sess.get_inputs()]
        if set(in_names) != set(names):  # exported names may differ: match by position
            names = in_names
        feeds = [dict(zip(names, req, strict=True)) for req in inputs]
        out_names = [o.name for o in sess.get_outputs()]
        if set(outputs) <= set(out_names):
            out_names = outputs
        for f in feeds[:3]:
            sess.run(out_names, f)
        lat = []
        results = []
        for f in feeds:
            t0 = time.perf_counter()
            res = sess.run(out_names, f)
            lat.append(time.perf_counter() - t0)
            results.append([np.asarray(r) for r in res])
        done = 0
        t0 = time.perf_counter()
        while True:
            for f in feeds:
                sess.run(out_names, f)
                done += 1
            if time.perf_counter() - t0 >= min_time_s:
                break
        rate = done / (time.perf_counter() - t0)
        conn.send(("ok", lat, rate, results))
    except BaseException as exc:
        with contextlib.suppress(Exception):
            conn.send(("error", f"{type(exc).__name__}: {exc}", traceback.format_exc()[-2000:]))
    finally:
        conn.close()


def _export_baseline(source: ModelSource, tmp: str) -> str:
    """An ONNX file of the whole model at the plan's shapes."""
    # lazy: torch (runtime.opexec imports it) is heavy to import, loaded only when this runs
    from placewise.runtime.opexec import SourceFormat

    if source.format is SourceFormat.ONNX:
        if source.path is not None and source.path.is_file():
            return str(source.path)

        path = os.path.join(tmp, "model.onnx")
        save_model(source.onnx_model, path)
        return path
    path = os.path.join(tmp, "model.onnx")
    ref = source.ref.strip()
    if ref.startswith("zoo:"):
        name, options = zoo.parse_zoo_ref(ref)
        if source.batch is not None:
            options["batch"] = source.batch
        zoo.export_onnx(name, options, path, dynamic_batch=False)
        return path

    # lazy: torch is heavy to import, loaded only when this runs
    import torch

    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        ep = source.exported_program
        prog = torch.onnx.export(ep, (), dynamo=True, opset_version=18, verbose=False)
        if prog is None:
            raise UnsupportedError("torch.onnx.export returned no program")
        prog.save(path)
    return path


def _run_baselines(source: ModelSource, graph: Graph,
                   requests: list[list[np.ndarray[Any, Any]]],
                   reference: list[list[np.ndarray[Any, Any]]], int8: bool,
                   min_time_s: float, timeout_s: float,
                   plan_cores: Sequence[int] = ()) -> list[BaselineReport]:
    """Whole-model sessions on all usable cores (fp32, and int8 when the plan uses int8);
    and, when the plan runs on one device whose cores are fewer, fp32 on exactly those cores
    with as many threads: the plan against it is the executor's own overhead."""
    all_cores = sorted(os.sched_getaffinity(0))
    runs: list[tuple[list[int], bool, str]] = [(all_cores, False, "onnxruntime")]
    if int8:
        runs.append((all_cores, True, "onnxruntime"))
    if plan_cores and sorted(plan_cores) != all_cores:
        runs.append((sorted(plan_cores), False, "onnxruntime on the plan's cores"))
    out: list[BaselineReport] = []
    logits = [looks_like_logits(graph, o) for o in graph.outputs]
    with tempfile.TemporaryDirectory(prefix="placewise-baseline-") as tmp:
        try:
            path = _export_baseline(source, tmp)
        except Exception as exc:  # an exporter failure leaves the report without a baseline
            reason = f"could not export the model to ONNX: {type(exc).__name__}: {exc}"
            return [BaselineReport("onnxruntime", "fp32", False, reason[:500])]
        for cores, quant, label in runs:
            precision = "int8 (dynamic quantization)" if quant else "fp32"
            ctx = mp.get_context("spawn")
            parent, child = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_baseline_worker, daemon=True, args=(
                child, path, cores, quant, requests, list(graph.inputs), list(graph.outputs),
                min_time_s), name="placewise-baseline")
            proc.start()
            child.close()
            try:
                if not parent.poll(timeout_s):
                    raise PlacewiseError(f"the baseline made no progress for {timeout_s:.0f} s")
                msg = parent.recv()
            except (EOFError, PlacewiseError) as exc:
                msg = ("error", str(exc) or f"the baseline process died (exit code "
                       f"{proc.exitcode})", "")
            finally:
                parent.close()
                proc.join(timeout=5)
                if proc.is_alive():
                    proc.kill()
                    proc.join()
            if msg[0] != "ok":
                out.append(BaselineReport(label, precision, False, str(msg[1])[:500],
                                          tuple(cores)))
                continue
            _, lat, rate, results = msg
            quality: list[OutputQuality] = []
            with contextlib.suppress(Exception):
                for j, name in enumerate(graph.outputs):
                    quality.append(output_quality(name, [r[j] for r in results],
                                                  [r[j] for r in reference],
                                                  logits=logits[j]))
            out.append(BaselineReport(label, precision, True, "", tuple(cores),
                                      latency_stats(lat), float(rate), tuple(quality)))
    return out


def plan_baselines(program: ExecProgram, source: ModelSource, graph: Graph,
                   requests: list[list[np.ndarray[Any, Any]]],
                   reference: list[list[np.ndarray[Any, Any]]], *, latency_p50_s: float,
                   throughput_rps: float, batch: int, stream_s: float,
                   timeout_s: float = 600.0) -> list[BaselineReport]:
    """The baselines of ``program`` (module docstring) on ``requests``, with the plan's
    measured ``latency_p50_s`` and ``throughput_rps`` (batch x runs/s) set beside each:
    its throughput in batch x runs/s too, the plan's latency speed-up and throughput
    ratio."""
    int8 = any(v.dtype is DType.INT8 for v in program.vertices.values())
    compute_devs = {t.device for t in program.tasks if t.kind is TaskKind.COMPUTE}
    plan_cores = tuple(program.device(next(iter(compute_devs))).cores or ()) \
        if len(compute_devs) == 1 else ()
    out: list[BaselineReport] = []
    for b in _run_baselines(source, graph, requests, reference, int8,
                            min_time_s=max(0.3, stream_s / 2), timeout_s=timeout_s,
                            plan_cores=plan_cores):
        if b.available and b.latency is not None and b.throughput_rps:
            b = BaselineReport(b.name, b.precision, True, b.reason, b.cores, b.latency,
                               b.throughput_rps * batch, b.quality,
                               b.latency.p50_s / latency_p50_s if latency_p50_s > 0 else None,
                               throughput_rps / (b.throughput_rps * batch))
        out.append(b)
    return out
