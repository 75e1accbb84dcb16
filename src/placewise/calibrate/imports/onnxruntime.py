"""onnxruntime's profiling JSON (``SessionOptions.enable_profiling``, any execution
provider) as an ``ImportedProfile``.

The events are read by ``placewise.runtime.ort_profile.read_events`` (the one parser of
onnxruntime's profiles): one ``model_run`` per ``session.run``, each node's kernel time
summed inside each run, fences ignored. The first runs are warm-up (first-run
allocations, kernel selection, caches): ``warmup_runs`` says how many are dropped. Each
node becomes a region with one sample per kept run it ran in:

- ``TRTKernel_graph_*`` (a TensorRT execution provider subgraph), and the other
  providers' compiled subgraphs (``OpenVINO-EP-subgraph_*``, ``QNN_*``...) cover many ONNX
  nodes that the profile does not name: their ``nodes`` are empty and a note says so;
- ``MemcpyToHost`` / ``MemcpyFromHost`` are copies between host and device memory
  (bytes from their output's type and shape);
- ``ReorderInput`` / ``ReorderOutput`` (onnxruntime's blocked-layout conversions) are
  reformats;
- every other node covers itself (``nodes == (name,)``), in the optimized graph's words.

A node's kernel time includes the profiler's own work for it (its event's arguments: shapes,
sizes, memory figures), a few microseconds per node that an unprofiled run does not pay:
on this project's CPU a whole run's node times summed 1.3x (a small ResNet) to 1.9x (a
230-node OCR classifier) its unprofiled time. A node that does no work (``NO_WORK``: a
``Reshape``, a ``Squeeze``...) takes about that cost alone: the least median time of such a
node on a CPU provider is taken off every CPU node's samples (never below zero) and said
in the notes; ``profiler_cost="keep"`` keeps the times as timed.

onnxruntime profiles do not record onnxruntime's version: ``tool_version`` is what the
caller says (``--tool-version``), else ``""``.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import statistics
from collections import Counter
from collections.abc import Sequence

from placewise.calibrate.imports.build import engine_class
from placewise.calibrate.imports.records import (
    ImportedProfile,
    MeasuredRegion,
    MeasuredTransfer,
    ProfileSource,
    file_sha256,
)
from placewise.errors import ProfileError
from placewise.graph.onnx_import import read_onnx_as_is
from placewise.io import load_json
from placewise.runtime.ort_profile import ORT_DTYPES, OrtNode, OrtRuns, read_events

__all__ = ["NO_WORK", "SUBGRAPH_PREFIXES", "read_onnxruntime", "subgraph_nodes", "warmup_runs"]

#: node names of compiled subgraphs that stand for many ONNX nodes (TensorRT, OpenVINO, QNN,
#: CoreML, NNAPI, VitisAI, DirectML/MIGraphX fused partitions)
SUBGRAPH_PREFIXES = ("TRTKernel_graph_", "OpenVINO-EP-subgraph_", "OpenVINOExecutionProvider_",
                     "QNN_", "QNNExecutionProvider_", "CoreML_", "NNAPI_", "VitisAI",
                     "MIGraphX_", "DmlFusedNode_", "TensorrtExecutionProvider_")
#: providers whose kernels run asynchronously to the node that launches them
_ASYNC = ("CUDAExecutionProvider", "ROCMExecutionProvider", "MIGraphXExecutionProvider",
          "DmlExecutionProvider", "WebGpuExecutionProvider")
_COPIES = {"MemcpyToHost": ("device", "host"), "MemcpyFromHost": ("host", "device")}
_REFORMATS = {"ReorderInput": ("NCHW", "NCHWc"), "ReorderOutput": ("NCHWc", "NCHW")}
#: op types whose kernel does no work on the data (views, metadata): their time is the
#: profiler's and the executor's per-node cost
NO_WORK = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Shape", "Size")
#: a run is warm-up while it takes this many times the median of the later runs
WARMUP_RATIO = 1.5
#: onnxruntime's profile file name: <prefix>_YYYY-MM-DD_HH-MM-SS.json (local time)
_NAME_DATE = re.compile(r"_(\d{4}-\d{2}-\d{2})_(\d{2})-(\d{2})-(\d{2})(?:_\d+)?\.json$")
#: the largest onnxruntime profile read (256 MiB of JSON: about a million events)
MAX_PROFILE_BYTES = 256 * 1024 * 1024


def warmup_runs(run_s: tuple[float, ...] | list[float]) -> int:
    """How many leading runs are warm-up: the first (when there are two or more), and
    every run after it that still takes more than ``WARMUP_RATIO`` times the median of
    the runs after it, at most half of the runs.

    >>> warmup_runs([9.0, 1.0, 1.1, 1.0]), warmup_runs([9.0, 4.0, 1.0, 1.1, 1.0, 0.9])
    (1, 2)
    >>> warmup_runs([3.0])
    0
    """
    n = len(run_s)
    if n < 2:
        return 0
    drop = 1
    while drop < n // 2:
        rest = sorted(run_s[drop + 1:])
        if not rest or run_s[drop] <= WARMUP_RATIO * rest[len(rest) // 2]:
            break
        drop += 1
    return drop


def _date(file: str) -> tuple[str, str]:
    m = _NAME_DATE.search(os.path.basename(file))
    if m:
        try:
            d = _dt.datetime.fromisoformat(f"{m.group(1)}T{m.group(2)}:{m.group(3)}:"
                                           f"{m.group(4)}")
            return d.isoformat(), "file name (the target's local time)"
        except ValueError:
            pass
    mtime = _dt.datetime.fromtimestamp(os.stat(file).st_mtime, _dt.UTC).replace(microsecond=0)
    return mtime.isoformat(), "file mtime"


def _shapes(types: tuple[tuple[str, tuple[int, ...]], ...]) -> tuple[tuple[int, ...], ...]:
    return tuple(s for _dt, s in types)


def _precision(node: OrtNode) -> str:
    """The precision a node computes in, from its inputs' element types: the widest float
    type among them, else ``int8``/``uint8`` for quantized kernels, else ``""``."""
    kinds = [ORT_DTYPES.get(dt, ("", 0))[0] for dt, _s in node.in_types]
    for p in ("fp64", "fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2"):
        if p in kinds:
            return p
    if "int8" in kinds or "uint8" in kinds:
        return "int8"
    return ""


def _region(node: OrtNode, samples: tuple[float, ...]) -> MeasuredRegion:
    subgraph = node.name.startswith(SUBGRAPH_PREFIXES)
    return MeasuredRegion(
        label=node.name, op_type=node.op_type, nodes=() if subgraph else (node.name,),
        engine=node.provider, samples_s=samples, in_shapes=_shapes(node.in_types),
        out_shapes=_shapes(node.out_types), precision="" if subgraph else _precision(node),
        seq=node.first_event)


def _transfer(node: OrtNode, samples: tuple[float, ...]) -> MeasuredTransfer:
    if node.op_type in _COPIES:
        src, dst = _COPIES[node.op_type]
        return MeasuredTransfer(node.name, "copy", src, dst, node.out_bytes(), samples,
                                engine=node.provider, nodes=(node.name,))
    src, dst = _REFORMATS[node.op_type]
    return MeasuredTransfer(node.name, "reformat", src, dst, node.out_bytes(), samples,
                            engine=node.provider, nodes=(node.name,))


def read_onnxruntime(path: str | os.PathLike[str], *, tool_version: str = "",
                     warmup: int | None = None, profiler_cost: str = "remove"
                     ) -> ImportedProfile:
    """Read an onnxruntime profile (module docstring). ``warmup``: leading runs to drop
    (default ``warmup_runs``: the first at least). ``profiler_cost``: ``"remove"`` takes
    the profiler's own per-node cost off CPU nodes (module docstring), ``"keep"`` keeps
    the times as timed. ``ProfileError`` naming the file and the
    event for a file that is missing, truncated, hostile (NaN, huge numbers, deep nesting,
    more than 256 MiB) or not a profile of at least one run with a timed node."""
    file = os.fspath(path)
    if profiler_cost not in ("remove", "keep"):
        raise ProfileError(f"profiler cost {profiler_cost!r}: 'remove' or 'keep'",
                           place="--profiler-cost")
    if not os.path.lexists(file):
        raise ProfileError("no such file", file=file)
    data = load_json(file, what="onnxruntime profile", error=ProfileError,
                     limit_bytes=MAX_PROFILE_BYTES)
    runs = read_events(data, file=file)
    if not runs.run_s:
        raise ProfileError("no Session 'model_run' event: not the profile of an onnxruntime "
                           "inference session that ran", file=file)
    if warmup is None:
        drop = warmup_runs(runs.run_s)
    elif not 0 <= warmup < len(runs.run_s):
        raise ProfileError(f"cannot drop {warmup} warm-up runs of {len(runs.run_s)}",
                           file=file, place="warmup")
    else:
        drop = warmup
    floor = _profiler_floor(runs, drop) if profiler_cost == "remove" else None
    kept = _kept(runs, drop, floor)
    regions, transfers = _measured(runs, kept)
    if not regions:
        raise ProfileError("no node kernel time inside the kept runs (kernel events "
                           f"'<node>{'_kernel_time'}' with cat 'Node')", file=file)
    date, date_from = _date(file)
    providers = Counter(r.engine for r in regions for _ in r.samples_s)
    notes = _notes(runs, drop, regions)
    if floor is not None:
        cpu = sum(1 for n in runs.nodes.values() if _on_cpu(n))
        notes.append(f"the profiler's own cost per node, {floor[0] * 1e6:.3g} us (the least "
                     f"time of a node that does no work: {floor[1]}), taken off each of the "
                     f"{cpu} CPU nodes' times")
    elif profiler_cost == "remove":
        notes.append("no CPU node that does no work (a Reshape, a Squeeze...) to tell the "
                     "profiler's own per-node cost by: node times kept as timed")
    precisions = {r.precision for r in regions if r.precision}
    return ImportedProfile(
        source=ProfileSource(tool="onnxruntime", tool_version=tool_version, file=file,
                             sha256=file_sha256(file), date=date, date_from=date_from,
                             device=providers.most_common(1)[0][0] if providers else ""),
        regions=tuple(regions), transfers=tuple(transfers), runs=len(runs.run_s) - drop,
        warmup_dropped=drop, run_samples_s=tuple(runs.run_s[drop:]),
        run_nodes_s=tuple(sum(acc.values()) for acc in kept),
        run_executor_s=tuple(runs.exec_s[drop:]) if all(runs.exec_s[drop:]) else (),
        batch=None, precision=precisions.pop() if len(precisions) == 1 else "",
        notes=tuple(notes), per_node_cost_s=floor[0] if floor is not None else 0.0,
        threads=max((n.threads for n in runs.nodes.values()), default=0))


def _on_cpu(node: OrtNode) -> bool:
    return engine_class(node.provider) == "cpu"


def _profiler_floor(runs: OrtRuns, drop: int) -> tuple[float, str] | None:
    """(seconds, node): the least median time of a CPU node that does no work (a view:
    ``NO_WORK``), which bounds the profiler's own cost per node from above; None
    without such a node."""
    best: tuple[float, str] | None = None
    for name, node in runs.nodes.items():
        if node.op_type not in NO_WORK or not _on_cpu(node):
            continue
        xs = [acc[name] for acc in runs.node_s[drop:] if name in acc]
        if xs:
            med = statistics.median(xs)
            if best is None or med < best[0]:
                best = (med, f"{node.op_type} {name!r}")
    return best


def _kept(runs: OrtRuns, drop: int, floor: tuple[float, str] | None
          ) -> list[dict[str, float]]:
    """The kept runs' node times, the profiler's per-node cost taken off CPU nodes."""
    if floor is None:
        return [dict(acc) for acc in runs.node_s[drop:]]
    cpu = {n for n, node in runs.nodes.items() if _on_cpu(node)}
    return [{n: max(s - floor[0], 0.0) if n in cpu else s for n, s in acc.items()}
            for acc in runs.node_s[drop:]]


def _measured(runs: OrtRuns, kept: list[dict[str, float]]
              ) -> tuple[list[MeasuredRegion], list[MeasuredTransfer]]:
    per_node: dict[str, list[float]] = {}
    for acc in kept:
        for node, s in acc.items():
            per_node.setdefault(node, []).append(s)
    regions: list[MeasuredRegion] = []
    transfers: list[MeasuredTransfer] = []
    for name, info in runs.nodes.items():
        samples = tuple(per_node.get(name, ()))
        if not samples:
            continue  # ran only in warm-up runs
        if info.op_type in _COPIES or info.op_type in _REFORMATS:
            transfers.append(_transfer(info, samples))
        else:
            regions.append(_region(info, samples))
    return regions, transfers


def _notes(runs: OrtRuns, drop: int, regions: list[MeasuredRegion]) -> list[str]:
    notes = [f"{len(runs.run_s)} runs, {drop} dropped as warm-up"
             + ("" if drop else " (a single run: its time includes first-run work)")]
    threads = max((n.threads for n in runs.nodes.values()), default=0)
    if threads:
        notes.append(f"kernels ran on up to {threads} thread(s) (thread_scheduling_stats)")
    if runs.fences:
        notes.append(f"{runs.fences} fence events ignored (they time no kernel)")
    if runs.outside:
        notes.append(f"{runs.outside} kernel events outside every model_run ignored")
    asynchronous = sorted({r.engine for r in regions if r.engine in _ASYNC})
    if asynchronous:
        notes.append(f"{', '.join(asynchronous)} nodes: onnxruntime times the host side of "
                     f"each node (launching its kernels); the device's own time shows where "
                     f"the host waits for it (copies back, synchronisation)"
                     + (f"; {runs.device_kernels} device kernel events not read"
                        if runs.device_kernels else ""))
    sub = [r.label for r in regions if not r.nodes]
    if sub:
        notes.append(f"{len(sub)} compiled subgraph node(s) ({', '.join(sub[:3])}"
                     f"{'...' if len(sub) > 3 else ''}) cover ONNX nodes the profile does "
                     f"not name: unattributed unless their nodes are given")
    return notes


def subgraph_nodes(folder: str | os.PathLike[str], labels: Sequence[str]
                   ) -> dict[str, tuple[str, ...]]:
    """The ONNX nodes of compiled subgraphs (``TRTKernel_graph_*``) from the subgraph files
    the TensorRT execution provider dumps (``trt_dump_subgraphs``): for each of
    ``labels``, the ``.onnx`` file in ``folder`` whose name holds it (the longest such
    name: ``..._1`` is not ``..._10``), its node names. Labels without a file are left
    out. Files are read through the input boundary (``read_onnx_as_is``)."""
    root = os.fspath(folder)
    if not os.path.isdir(root):
        raise ProfileError("not a folder", file=root, place="--subgraphs")
    files = sorted(f for f in os.listdir(root) if f.endswith(".onnx"))
    out: dict[str, tuple[str, ...]] = {}
    for label in labels:
        hits = [f for f in files if re.search(re.escape(label) + r"(?!\d)", f)]
        if not hits:
            continue
        model = read_onnx_as_is(os.path.join(root, min(hits, key=len)))
        names = tuple(n.name for n in model.graph.node if n.name)
        if names:
            out[label] = names
    return out
