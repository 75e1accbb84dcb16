"""What a reader of a target's own profile hands on: the measured regions, copies and
reformats of one profile file, in the tool's own words, with where the file came from.

A reader (``onnxruntime.py``, ``trtexec.py``, ``torch_trace.py``) parses one tool's format
into an ``ImportedProfile`` and knows nothing of placewise graphs; ``build.py`` matches its
regions to a graph's ops and writes calibration keys. Times are seconds, one sample per
kept run (warm-up runs already dropped by the reader, which says how many it dropped).

>>> r = MeasuredRegion(label="Conv_0", op_type="Conv", nodes=("Conv_0",),
...                    engine="CPUExecutionProvider", samples_s=(2e-6, 1e-6, 3e-6))
>>> r.median_s, r.p10_s <= r.median_s <= r.p90_s
(2e-06, True)
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from placewise.errors import ProfileError
from placewise.hardware.stats import quantiles

__all__ = [
    "ImportedProfile",
    "MeasuredRegion",
    "MeasuredTransfer",
    "ProfileSource",
    "file_sha256",
]

#: what a reader calls the place a region ran (``MeasuredRegion.engine``), normalised to a
#: device class of the machine spec by ``build.py``: "cpu", "gpu", "dla", "npu"
ENGINE_CLASSES = ("cpu", "gpu", "dla", "npu")


def file_sha256(path: str | os.PathLike[str]) -> str:
    """``sha256:<hex>`` of a file's bytes (streamed)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def _check_samples(samples: Sequence[float], *, what: str) -> None:
    if not samples:
        raise ProfileError(f"{what} has no timed run")
    for s in samples:
        if not isinstance(s, float) or not math.isfinite(s) or s < 0:
            raise ProfileError(f"{what} has time {s!r} s (not a finite number >= 0)")


@dataclass(frozen=True, slots=True)
class ProfileSource:
    """Where a profile came from: the tool and its version (``""`` when the file does not
    say), the file as given and its ``sha256:`` hash, when it was taken (ISO 8601, from the
    file where it says, else the file's modification time, ``date_from`` says which) and the
    device the file says it ran on (``""``: it does not say)."""

    tool: str  # "onnxruntime" | "trtexec" | "torch.profiler"
    tool_version: str
    file: str
    sha256: str
    date: str
    date_from: str = "file mtime"  # "file" | "file mtime"
    device: str = ""
    extra_files: tuple[tuple[str, str], ...] = ()  # (path, sha256) read beside it (layer info)

    def to_json(self) -> dict[str, object]:
        return {"tool": self.tool, "tool_version": self.tool_version, "file": self.file,
                "sha256": self.sha256, "date": self.date, "date_from": self.date_from,
                "device": self.device,
                "extra_files": [{"file": f, "sha256": h} for f, h in self.extra_files]}


@dataclass(frozen=True, slots=True)
class MeasuredRegion:
    """One thing the tool timed that computes: an onnxruntime node (a fused node, a
    ``TRTKernel_graph_*`` subgraph), a TensorRT layer (a fused layer, a ``{ForeignNode[...]}``
    DLA subgraph), a torch op with its kernels.

    ``nodes``: the source model's node names it covers, in the tool's words (ONNX node
    names; empty when the tool does not say, e.g. torch traces, which give ``module_path``
    and ``seq`` instead). ``engine``: where it ran as the tool says it
    (``CUDAExecutionProvider``, ``GPU``, ``DLA``, ``cpu``). ``samples_s``: its time in each
    kept run. Shapes as the tool reports them (empty: not reported); ``precision`` of its
    computation where the tool says (``""``: it does not)."""

    label: str
    op_type: str
    nodes: tuple[str, ...]
    engine: str
    samples_s: tuple[float, ...]
    in_shapes: tuple[tuple[int, ...], ...] = ()
    out_shapes: tuple[tuple[int, ...], ...] = ()
    precision: str = ""
    module_path: str = ""
    seq: int = -1  # order of first appearance in the run (torch traces align by it)
    launch_s: tuple[float, ...] = ()  # host-side launch time per run where the tool splits it
    # first and last source node of a subgraph the tool names only by its ends (TensorRT's
    # "{ForeignNode[a...b]}"): the region covers the ops between them; () otherwise
    span: tuple[str, ...] = ()
    # the tool's mean over the runs where the one sample kept is its median (trtexec)
    mean_s: float | None = None

    def __post_init__(self) -> None:
        _check_samples(self.samples_s, what=f"region {self.label!r}")
        if self.mean_s is not None:
            _check_samples((self.mean_s,), what=f"region {self.label!r} (its mean)")

    @property
    def median_s(self) -> float:
        return quantiles(self.samples_s)[1]

    @property
    def p10_s(self) -> float:
        return quantiles(self.samples_s)[0]

    @property
    def p90_s(self) -> float:
        return quantiles(self.samples_s)[2]


@dataclass(frozen=True, slots=True)
class MeasuredTransfer:
    """One thing the tool timed that moves or reformats data, not computes.

    ``kind``: ``"copy"`` (between memories: host<->device memcpy, a link measurement) or
    ``"reformat"`` (a layout or precision conversion on one device: TensorRT's
    "Reformatting CopyNode", onnxruntime's ``MemcpyToHost``/``ReorderInput``...).
    ``src``/``dst``: for a copy, ``"host"`` or ``"device"`` (or the engine names); for a
    reformat, the formats where the tool says (``""`` otherwise). ``nbytes``: bytes moved
    per run (0: not reported); ``pinned``: host memory page-locked (None: not said).
    ``nodes``: the source nodes it serves (a reformat before a layer), where said."""

    label: str
    kind: str  # "copy" | "reformat"
    src: str
    dst: str
    nbytes: int
    samples_s: tuple[float, ...]
    engine: str = ""
    pinned: bool | None = None
    nodes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in ("copy", "reformat"):
            raise ProfileError(f"transfer {self.label!r} has kind {self.kind!r} "
                               f"(expected 'copy' or 'reformat')")
        if self.nbytes < 0:
            raise ProfileError(f"transfer {self.label!r} moves {self.nbytes} bytes")
        _check_samples(self.samples_s, what=f"transfer {self.label!r}")

    @property
    def median_s(self) -> float:
        return quantiles(self.samples_s)[1]


@dataclass(frozen=True, slots=True)
class ImportedProfile:
    """One profile file (with its companion files) as read: regions and transfers with a
    sample per kept run, the whole run's time per kept run where the tool times it
    (``run_samples_s``: onnxruntime's ``model_run``, trtexec's per-inference total, a torch
    trace's step), and what the file says about batch and precision (``None``/``""``: it
    does not say, or says several)."""

    source: ProfileSource
    regions: tuple[MeasuredRegion, ...]
    transfers: tuple[MeasuredTransfer, ...] = ()
    runs: int = 1
    warmup_dropped: int = 0
    run_samples_s: tuple[float, ...] = ()
    # the timed regions' and transfers' seconds summed in each of those runs (aligned with
    # ``run_samples_s``; empty: the tool does not say): the run's time less this is the
    # framework's own per-run overhead
    run_nodes_s: tuple[float, ...] = ()
    # the framework's executor time in each of those runs (the nodes and the gaps between
    # them, e.g. onnxruntime's ``SequentialExecutor::Execute``; empty: not timed): the run
    # less this is the per-run overhead outside the executor, which does not hold the
    # profiler's own per-node cost
    run_executor_s: tuple[float, ...] = ()
    batch: int | None = None
    precision: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    # False where the tool keeps a summary (trtexec: average and median over ``runs``), not
    # one time per run: the samples then hold no spread, and none may be read from them
    spread_recorded: bool = True
    # seconds the reader took off each node's samples as the tool's own per-node cost
    # (the notes say how it was told; 0: none)
    per_node_cost_s: float = 0.0
    # threads the measured kernels ran on, at most (0: the file does not say)
    threads: int = 0

    def __post_init__(self) -> None:
        if self.runs < 1:
            raise ProfileError("no timed run", file=self.source.file)
        if not self.regions:
            raise ProfileError("no timed node, layer or kernel", file=self.source.file)
        if self.run_samples_s:
            _check_samples(self.run_samples_s, what="the run")
        for what, xs in (("node sums", self.run_nodes_s),
                         ("executor times", self.run_executor_s)):
            if xs and len(xs) != len(self.run_samples_s):
                raise ProfileError(f"{len(xs)} {what} for {len(self.run_samples_s)} runs",
                                   file=self.source.file)
