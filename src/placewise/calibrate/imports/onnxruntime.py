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

onnxruntime profiles do not record onnxruntime's version: ``tool_version`` is what the
caller says (``--tool-version``), else ``""``.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from collections import Counter
from collections.abc import Sequence

from placewise.calibrate.imports.records import (
    ImportedProfile,
    MeasuredRegion,
    MeasuredTransfer,
    ProfileSource,
    file_sha256,
)
from placewise.errors import ProfileError
from placewise.io import load_json
from placewise.runtime.ort_profile import ORT_DTYPES, OrtNode, OrtRuns, read_events

__all__ = ["SUBGRAPH_PREFIXES", "read_onnxruntime", "subgraph_nodes", "warmup_runs"]

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
                     warmup: int | None = None) -> ImportedProfile:
    """Read an onnxruntime profile (module docstring). ``warmup``: leading runs to drop
    (default ``warmup_runs``: the first at least). ``ProfileError`` naming the file and the
    event for a file that is missing, truncated, hostile (NaN, huge numbers, deep nesting,
    more than 256 MiB) or not a profile of at least one run with a timed node."""
    file = os.fspath(path)
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
    regions, transfers = _measured(runs, drop)
    if not regions:
        raise ProfileError("no node kernel time inside the kept runs (kernel events "
                           f"'<node>{'_kernel_time'}' with cat 'Node')", file=file)
    date, date_from = _date(file)
    providers = Counter(r.engine for r in regions for _ in r.samples_s)
    notes = _notes(runs, drop, regions)
    precisions = {r.precision for r in regions if r.precision}
    return ImportedProfile(
        source=ProfileSource(tool="onnxruntime", tool_version=tool_version, file=file,
                             sha256=file_sha256(file), date=date, date_from=date_from,
                             device=providers.most_common(1)[0][0] if providers else ""),
        regions=tuple(regions), transfers=tuple(transfers), runs=len(runs.run_s) - drop,
        warmup_dropped=drop, run_samples_s=tuple(runs.run_s[drop:]),
        run_nodes_s=tuple(sum(acc.values()) for acc in runs.node_s[drop:]),
        run_executor_s=tuple(runs.exec_s[drop:]) if all(runs.exec_s[drop:]) else (),
        batch=None, precision=precisions.pop() if len(precisions) == 1 else "",
        notes=tuple(notes))


def _measured(runs: OrtRuns, drop: int) -> tuple[list[MeasuredRegion], list[MeasuredTransfer]]:
    per_node: dict[str, list[float]] = {}
    for acc in runs.node_s[drop:]:
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
    from placewise.graph.onnx_import import read_onnx_as_is

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
