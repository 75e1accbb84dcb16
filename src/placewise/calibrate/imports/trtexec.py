"""trtexec's per-layer profile (``--exportProfile``), joined with its layer information
(``--exportLayerInfo``) and, optionally, its console log, read into an ``ImportedProfile``.

**The profile** is a JSON array: ``{"count": N}`` (the number of profiled inferences), then
one object per engine layer with ``name``, ``timeMs`` (total over the N runs), ``averageMs``
and ``percentage``; TensorRT 8.5 and later add ``medianMs``. trtexec writes the layer name
unescaped, so a raw ``\\x1e``/``\\x1f`` separator inside a name is escaped before parsing.

**The layer information** is ``{"Layers": [...], "Bindings": [...]}``. Built with
``--profilingVerbosity=detailed``, each layer is an object with ``Name``, ``LayerType``,
``Inputs``/``Outputs`` (``Name``, ``Dimensions``, ``Format/Datatype``), and from TensorRT
8.6 on ``Metadata``, where TensorRT lists the ONNX nodes a fused layer came from
(``"[ONNX Layer: /conv1/Conv]\\x1e[ONNX Layer: /relu/Relu]"``); TensorRT 10 adds ``StreamId``.
Built without detailed verbosity, ``Layers`` is a list of names only: then only the name is
known, and the ONNX nodes are read from it (``"Conv_0 + Relu_1"`` -> ``Conv_0``, ``Relu_1``;
such names may also hold initializer names, which match no graph op).

What becomes what:

- a layer is a ``MeasuredRegion`` covering its ONNX nodes (a fused layer covers several);
- ``{ForeignNode[a...b]}`` is one region covering a subgraph TensorRT names only by its first
  and last node (``MeasuredRegion.span``). TensorRT uses this name both for a DLA subgraph
  and for a Myelin subgraph on the GPU: the region is on the DLA only where the files say so
  (the layer type in detailed layer information, or the log's "Layers Running on DLA"); a
  ForeignNode no file places is counted on the GPU, and a note says how many;
- "Reformatting CopyNode for ..." layers (and TensorRT 7's "... input/output reformatter N")
  are ``MeasuredTransfer`` of kind ``"reformat"``, with the formats and bytes from the layer
  information where it has them;
- the precision of a region is the type of its weights where the layer has weights, else
  the data type of its first output.

trtexec profiles report an average (and a median) over ``count`` runs, never the runs
themselves: each region carries **one** sample (the median where recorded, else the average,
with the average kept in ``mean_s``), ``runs`` is ``count``, ``spread_recorded`` is False and
a note says the spread is not recorded. No spread is invented.

>>> _onnx_nodes_from_name("features.0.0.weight + QuantizeLinear_8 + Conv_12 + PWN(Clip_16)")
('features.0.0.weight', 'QuantizeLinear_8', 'Conv_12', 'Clip_16')
>>> _onnx_nodes_from_name("Conv_0 + Relu_1 [profile 1]")
('Conv_0', 'Relu_1')
>>> _metadata_nodes("[ONNX Layer: /conv1/Conv]\\x1e[ONNX Layer: /relu/Relu]")
('/conv1/Conv', '/relu/Relu')
>>> _precision("Thirty-two wide channel vectorized row major Int8 format"), _precision("Half")
('int8', 'fp16')
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from placewise.calibrate.imports.records import (
    ImportedProfile,
    MeasuredRegion,
    MeasuredTransfer,
    ProfileSource,
    file_sha256,
)
from placewise.errors import ProfileError
from placewise.io import MAX_JSON_BYTES, parse_json, read_file_bytes, read_text

__all__ = ["read_trtexec"]

#: a layer's time above this (a day) is not a measurement but a broken or hostile file
MAX_LAYER_MS = 86_400_000.0
MAX_COUNT = 10**12
MAX_LOG_BYTES = 256 * 1024 * 1024

_REFORMAT = re.compile(r"^Reformatting CopyNode for (Input|Output) Tensor (\d+) to (.*)$", re.S)
_OLD_REFORMAT = re.compile(r"^(.*) (input|output) reformatter (\d+)$", re.S)
_FOREIGN = re.compile(r"^\{ForeignNode\[(.*)\]\}$", re.S)
_ONNX_LAYER = re.compile(r"\[ONNX Layer: ([^\]\x1e\x1f]*)\]")
_UNNAMED = re.compile(r"^(\(Unnamed Layer\* \d+\)|\[trainStation\d+\]$)")

# data type words in "Format/Datatype" (TensorRT 8: "... FP16 format ..."; 10: "Half")
_PRECISIONS = (
    (re.compile(r"\b(FP32|Float|kFLOAT)\b", re.I), "fp32"),
    (re.compile(r"\b(FP16|Half|kHALF)\b", re.I), "fp16"),
    (re.compile(r"\b(BF16|BFloat16|kBF16)\b", re.I), "bf16"),
    (re.compile(r"\b(FP8|E4M3|kFP8)\b", re.I), "fp8"),
    (re.compile(r"\b(Int8|kINT8)\b", re.I), "int8"),
    (re.compile(r"\b(Int4|kINT4|FP4|E2M1)\b", re.I), "int4"),
    (re.compile(r"\b(Int32|kINT32)\b", re.I), "int32"),
    (re.compile(r"\b(Int64|kINT64)\b", re.I), "int64"),
    (re.compile(r"\b(Bool|kBOOL)\b", re.I), "bool"),
)
_ELEMENT_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1, "int32": 4,
                  "int64": 8, "bool": 1}


def _precision(fmt: str) -> str:
    for pattern, name in _PRECISIONS:
        if pattern.search(fmt):
            return name
    return ""


def _metadata_nodes(metadata: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(m.strip() for m in _ONNX_LAYER.findall(metadata) if m.strip()))


def _onnx_nodes_from_name(name: str) -> tuple[str, ...]:
    """The source node names a TensorRT layer name spells: fused parts joined by ``+`` or
    ``||``, pointwise fusions as ``PWN(a, PWN(b, c))``; TensorRT's own ``(Unnamed Layer* N)``
    parts are left out."""
    name = re.sub(r" \[profile \d+\]$", "", name)  # a layer of a second shape profile
    text = re.sub(r"\bPWN\(", "", name.replace("\x1e", "+").replace("\x1f", "+"))
    parts: list[str] = []
    for chunk in re.split(r"\s*(?:\+|\|\||,)\s+|\s+\+\s*", text):
        part = chunk.strip().rstrip(")").strip()
        if part and not _UNNAMED.match(part) and part not in parts:
            parts.append(part)
    return tuple(parts)


# ---- reading the files -----------------------------------------------------------------------
def _load(path: str, what: str) -> Any:
    data = read_file_bytes(path, what=what, limit_bytes=MAX_JSON_BYTES, error=ProfileError)
    # trtexec writes layer names unescaped: make TensorRT's separators valid JSON
    data = data.replace(b"\x1e", b"\\u001e").replace(b"\x1f", b"\\u001f")
    return parse_json(data, file=path, error=ProfileError)


def _number(value: Any, *, file: str, place: str, limit: float = MAX_LAYER_MS) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProfileError(f"expected a number, got {type(value).__name__}", file=file,
                           place=place)
    v = float(value)
    if not math.isfinite(v) or v < 0:
        raise ProfileError(f"time {value!r} is not a finite number >= 0", file=file,
                           place=place)
    if v > limit:
        raise ProfileError(f"time {value!r} ms is beyond any measurement (more than "
                           f"{limit:g} ms)", file=file, place=place)
    return v


@dataclass(frozen=True, slots=True)
class _Row:
    name: str
    avg_ms: float
    median_ms: float | None
    index: int


def _profile_rows(path: str) -> tuple[int, list[_Row]]:
    doc = _load(path, "trtexec profile")
    if not isinstance(doc, list):
        raise ProfileError(f"expected a JSON array (trtexec --exportProfile), got "
                           f"{type(doc).__name__}", file=path)
    if not doc:
        raise ProfileError("empty array: no {\"count\": N} and no layer", file=path)
    head = doc[0]
    if not isinstance(head, dict) or "count" not in head:
        raise ProfileError('expected {"count": N} first (trtexec --exportProfile)', file=path,
                           place="[0]")
    count = head["count"]
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT:
        raise ProfileError(f"count {count!r} is not a whole number of runs in 1..{MAX_COUNT}",
                           file=path, place="[0].count")
    rows = []
    for i, rec in enumerate(doc[1:], start=1):
        if not isinstance(rec, dict):
            raise ProfileError(f"expected a layer object, got {type(rec).__name__}",
                               file=path, place=f"[{i}]")
        name = rec.get("name")
        if not isinstance(name, str) or not name:
            raise ProfileError("layer has no name", file=path, place=f"[{i}].name")
        for key in ("timeMs", "averageMs"):
            if key not in rec:
                raise ProfileError(f"layer {name!r} has no {key}", file=path, place=f"[{i}]")
        _number(rec["timeMs"], file=path, place=f"[{i}].timeMs",
                limit=MAX_LAYER_MS * min(count, MAX_COUNT))
        avg = _number(rec["averageMs"], file=path, place=f"[{i}].averageMs")
        med = (_number(rec["medianMs"], file=path, place=f"[{i}].medianMs")
               if "medianMs" in rec else None)
        if "percentage" in rec:
            _number(rec["percentage"], file=path, place=f"[{i}].percentage", limit=100.001)
        rows.append(_Row(name, avg, med, i))
    if not rows:
        raise ProfileError("no layer after the count: a truncated or empty profile", file=path)
    return count, rows


@dataclass(frozen=True, slots=True)
class _Layer:
    name: str
    layer_type: str = ""
    nodes: tuple[str, ...] = ()
    in_fmts: tuple[str, ...] = ()
    out_fmts: tuple[str, ...] = ()
    in_shapes: tuple[tuple[int, ...], ...] = ()
    out_shapes: tuple[tuple[int, ...], ...] = ()
    in_names: tuple[str, ...] = ()
    weights_type: str = ""
    origin: str = ""


def _tensors(value: Any, *, file: str, place: str
             ) -> tuple[tuple[str, ...], tuple[str, ...], tuple[tuple[int, ...], ...]]:
    if value is None:
        return (), (), ()
    if not isinstance(value, list):
        raise ProfileError(f"expected a list of tensors, got {type(value).__name__}",
                           file=file, place=place)
    names, fmts, shapes = [], [], []
    for j, t in enumerate(value):
        if not isinstance(t, dict):
            raise ProfileError("expected a tensor object", file=file, place=f"{place}[{j}]")
        names.append(str(t.get("Name", "")))
        fmt = t.get("Format/Datatype", t.get("Datatype", t.get("Format", "")))
        fmts.append(fmt if isinstance(fmt, str) else "")
        dims = t.get("Dimensions", [])
        if not isinstance(dims, list) or not all(
                isinstance(d, int) and not isinstance(d, bool) for d in dims):
            raise ProfileError("Dimensions is not a list of integers", file=file,
                               place=f"{place}[{j}].Dimensions")
        shapes.append(tuple(dims))
    return tuple(names), tuple(fmts), tuple(shapes)


def _layer_info(path: str) -> tuple[dict[str, _Layer], bool, tuple[str, ...]]:
    """Layers by name, whether they are detailed, and the binding names."""
    doc = _load(path, "trtexec layer information")
    if not isinstance(doc, dict) or not isinstance(doc.get("Layers"), list):
        raise ProfileError('expected {"Layers": [...]} (trtexec --exportLayerInfo), got '
                           f"{type(doc).__name__}", file=path)
    bindings = doc.get("Bindings", [])
    if not isinstance(bindings, list):
        raise ProfileError("Bindings is not a list", file=path, place="Bindings")
    layers: dict[str, _Layer] = {}
    detailed = False
    for i, rec in enumerate(doc["Layers"]):
        place = f"Layers[{i}]"
        if isinstance(rec, str):
            layers.setdefault(rec, _Layer(rec, nodes=_onnx_nodes_from_name(rec)))
            continue
        if not isinstance(rec, dict) or not isinstance(rec.get("Name"), str):
            raise ProfileError("expected a layer name or an object with a Name", file=path,
                               place=place)
        detailed = True
        name = rec["Name"]
        meta = rec.get("Metadata", "")
        nodes = _metadata_nodes(meta) if isinstance(meta, str) else ()
        in_names, in_fmts, in_shapes = _tensors(rec.get("Inputs"), file=path,
                                                place=f"{place}.Inputs")
        _, out_fmts, out_shapes = _tensors(rec.get("Outputs"), file=path,
                                           place=f"{place}.Outputs")
        weights = rec.get("Weights")
        wtype = weights.get("Type", "") if isinstance(weights, dict) else ""
        layers.setdefault(name, _Layer(
            name, layer_type=str(rec.get("LayerType", "")),
            nodes=nodes or _onnx_nodes_from_name(name), in_fmts=in_fmts, out_fmts=out_fmts,
            in_shapes=in_shapes, out_shapes=out_shapes, in_names=in_names,
            weights_type=wtype if isinstance(wtype, str) else "",
            origin=str(rec.get("Origin", ""))))
    return layers, detailed, tuple(b for b in bindings if isinstance(b, str))


@dataclass(frozen=True, slots=True)
class _Log:
    version: str = ""
    device: str = ""
    dla: frozenset[str] = frozenset()
    gpu: Mapping[str, str] | None = None  # GPU layer name -> the log's layer type


def _read_log(path: str) -> _Log:
    text = read_text(path, what="trtexec log", limit_bytes=MAX_LOG_BYTES, error=ProfileError)
    version = ""
    m = re.search(r"TensorRT version: ([0-9][0-9.]*)", text)
    if m:
        version = m.group(1)
    else:
        m = re.search(r"\[TensorRT v(\d+)\]", text)
        if m:
            version = m.group(1)
    m = re.search(r"Selected Device: (.+)", text)
    device = m.group(1).strip() if m else ""
    dla = frozenset(s.strip().rstrip(",") for s in re.findall(r"\[DlaLayer\] (.+)", text))
    gpu = {}
    for line in re.findall(r"\[GpuLayer\] (.+)", text):
        kind, _, name = line.partition(": ")
        gpu[name.strip()] = kind.strip()
    return _Log(version, device, dla, gpu)


# ---- turning rows into regions and transfers -------------------------------------------------
def _engine(name: str, layer: _Layer | None, log: _Log | None) -> str:
    if log is not None and name in log.dla:
        return "DLA"
    if layer is not None and "dla" in layer.layer_type.lower():
        return "DLA"
    return "GPU"


def _nbytes(shape: tuple[int, ...], precision: str) -> int:
    size = _ELEMENT_BYTES.get(precision, 0)
    if not shape or size == 0 or any(d < 0 for d in shape):
        return 0
    return math.prod(shape) * size


def _samples(row: _Row) -> tuple[tuple[float, ...], float | None]:
    if row.median_ms is not None:
        return (row.median_ms * 1e-3,), row.avg_ms * 1e-3
    return (row.avg_ms * 1e-3,), None


def _region(row: _Row, layer: _Layer | None, log: _Log | None) -> MeasuredRegion:
    samples, mean = _samples(row)
    span: tuple[str, ...] = ()
    m = _FOREIGN.match(row.name)
    if m:
        inner = m.group(1)
        ends = tuple(p for p in inner.split("...") if p) if "..." in inner else (inner,)
        span = (ends[0], ends[-1]) if len(ends) >= 2 else ()
        nodes = layer.nodes if layer is not None and layer.layer_type and layer.nodes \
            and "..." not in "".join(layer.nodes) else ends
        op_type = "ForeignNode"
    else:
        nodes = layer.nodes if layer is not None else _onnx_nodes_from_name(row.name)
        op_type = layer.layer_type if layer is not None and layer.layer_type else (
            (log.gpu or {}).get(row.name, "") if log is not None else "")
    precision = ""
    if layer is not None:
        precision = _precision(layer.weights_type) or (
            _precision(layer.out_fmts[0]) if layer.out_fmts else "")
    return MeasuredRegion(
        label=row.name, op_type=op_type, nodes=nodes, engine=_engine(row.name, layer, log),
        samples_s=samples, in_shapes=layer.in_shapes if layer else (),
        out_shapes=layer.out_shapes if layer else (), precision=precision, seq=row.index - 1,
        span=span, mean_s=mean)


def _reformat(row: _Row, layer: _Layer | None, layers: Mapping[str, _Layer]
              ) -> MeasuredTransfer | None:
    m = _REFORMAT.match(row.name)
    if m:
        target = m.group(3)
    else:
        old = _OLD_REFORMAT.match(row.name)
        if not old:
            return None
        target = old.group(1)
    samples, _ = _samples(row)
    src = layer.in_fmts[0] if layer is not None and layer.in_fmts else ""
    dst = layer.out_fmts[0] if layer is not None and layer.out_fmts else ""
    nbytes = 0
    if layer is not None and layer.out_shapes:
        nbytes = _nbytes(layer.out_shapes[0], _precision(dst))
    target_layer = layers.get(target)
    nodes = target_layer.nodes if target_layer is not None else _onnx_nodes_from_name(target)
    return MeasuredTransfer(label=row.name, kind="reformat", src=src, dst=dst, nbytes=nbytes,
                            samples_s=samples, engine="GPU", nodes=nodes)


def _batch(layers: Mapping[str, _Layer], bindings: Sequence[str]) -> int | None:
    firsts = {shape[0] for layer in layers.values()
              for name, shape in zip(layer.in_names, layer.in_shapes, strict=False)
              if name in bindings and shape and shape[0] > 0}
    return firsts.pop() if len(firsts) == 1 else None


def _mtime(path: str) -> str:
    ts = os.stat(path).st_mtime
    return _dt.datetime.fromtimestamp(ts, tz=_dt.UTC).isoformat(timespec="seconds")


def read_trtexec(profile_path: str | os.PathLike[str],
                 layer_info_path: str | os.PathLike[str] | None = None, *,
                 log_path: str | os.PathLike[str] | None = None) -> ImportedProfile:
    """Read trtexec's ``--exportProfile`` file, joined by layer name with its
    ``--exportLayerInfo`` file and its console log where given (the log tells DLA layers
    from GPU ones, and gives the TensorRT version and device). Raises ``ProfileError`` (one
    line: file, place, problem) for a truncated, hostile or malformed file."""
    path = os.fspath(profile_path)
    count, rows = _profile_rows(path)
    layers: dict[str, _Layer] = {}
    detailed = False
    bindings: tuple[str, ...] = ()
    extra: list[tuple[str, str]] = []
    median = all(r.median_ms is not None for r in rows)
    notes = [f"trtexec records each layer's average{' and median' if median else ''} over "
             f"{count} runs, not the runs: one sample per layer "
             f"({'the median' if median else 'the average'}); the spread is not recorded"]
    if layer_info_path is not None:
        info = os.fspath(layer_info_path)
        layers, detailed, bindings = _layer_info(info)
        extra.append((info, file_sha256(info)))
        if not detailed:
            notes.append("layer information holds layer names only (engine built without "
                         "--profilingVerbosity=detailed): no layer types, formats, shapes or "
                         "precisions; ONNX nodes are read from the layer names")
    log = None
    if log_path is not None:
        lp = os.fspath(log_path)
        log = _read_log(lp)
        extra.append((lp, file_sha256(lp)))
    regions: list[MeasuredRegion] = []
    transfers: list[MeasuredTransfer] = []
    for row in rows:
        layer = layers.get(row.name)
        t = _reformat(row, layer, layers)
        if t is not None and (layer is None or layer.origin in ("", "REFORMAT")):
            transfers.append(t)
        else:
            regions.append(_region(row, layer, log))
    _join_notes(notes, rows, layers, regions, log, layer_info_path is not None)
    precisions = {r.precision for r in regions if r.precision and r.samples_s[0] > 0}
    source = ProfileSource(
        tool="trtexec", tool_version=log.version if log else "", file=path,
        sha256=file_sha256(path), date=_mtime(path), date_from="file mtime",
        device=log.device if log else "", extra_files=tuple(extra))
    return ImportedProfile(
        source=source, regions=tuple(regions), transfers=tuple(transfers), runs=count,
        warmup_dropped=0, run_samples_s=(sum(r.avg_ms for r in rows) * 1e-3,),
        batch=_batch(layers, bindings) if detailed else None,
        precision=precisions.pop() if len(precisions) == 1 else "", notes=tuple(notes),
        spread_recorded=False)


def _join_notes(notes: list[str], rows: Sequence[_Row], layers: Mapping[str, _Layer],
                regions: Sequence[MeasuredRegion], log: _Log | None, have_info: bool) -> None:
    if have_info:
        missing = [r.name for r in rows if r.name not in layers]
        if missing:
            notes.append(f"{len(missing)} of {len(rows)} profiled layers are not in the layer "
                         f"information (first: {missing[0]!r}): no type, format or shape for them")
    zero = sum(1 for r in regions if r.samples_s[0] == 0.0)
    if zero:
        notes.append(f"{zero} layers timed 0 ms (not run, or below the timer's resolution)")
    kinds = Counter(r.engine for r in regions if r.op_type == "ForeignNode")
    unplaced = sum(1 for r in regions if r.op_type == "ForeignNode" and r.engine == "GPU"
                   and not (log is not None and r.label in (log.gpu or {}))
                   and not (layers.get(r.label) and layers[r.label].layer_type))
    if kinds:
        notes.append(f"ForeignNode subgraphs: {dict(sorted(kinds.items()))}")
    if unplaced:
        notes.append(f"{unplaced} ForeignNode subgraphs are not placed by any file given "
                     f"(TensorRT names DLA and Myelin subgraphs alike): counted on the GPU; "
                     f"give the trtexec log or detailed layer information to tell them apart")
