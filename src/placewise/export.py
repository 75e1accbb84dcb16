"""Export a plan as files a deployed runtime loads: one ONNX model per partition and a
manifest that says how to chain them (``placewise export PLAN --out DIR``).

``export_plan(plan, out_dir)``:

1. loads the plan, its machine and its model source, and checks the plan's machine and
   graph fingerprints *before* anything is compiled (the machine is the plan's preset, this
   machine for ``local`` plans, or the one given: a plan made with ``--hw FILE.yaml`` needs
   that file again);
2. derives the plan's partitions (``runtime.program.program_from_plan``, the executor's own
   derivation, without its local-device check) and puts them in execution order (a
   partition comes after every partition it reads from);
3. compiles each partition to one ONNX model (``runtime.compile.write_partitions``: the
   weights of a partition beyond 64 MiB, or of a model that keeps them in a data file, go
   to its device's ``weights.{device}.bin`` beside it, shared by that device's partitions,
   each distinct tensor once) and writes ``manifest.json``;
4. does all of that in a fresh hidden folder beside ``out_dir`` and renames it into place
   at the end, so a failure at any step leaves nothing half-written. An ``out_dir`` that
   holds files is refused unless ``force`` (it is then replaced as a whole, never merged).

**The manifest** (``Manifest``; JSON Schema in ``placewise/schemas/manifest.schema.json``):
``partitions`` in execution order, each with the device it was planned for, the
execution ``provider`` (and its options) a user of that device loads (``runtime.backends.
onnxruntime.provider_for``: CPU here; CUDA, TensorRT with a DLA core, OpenVINO on presets),
``precision``, ``threads`` (``intra_op_num_threads``) and ``cores`` (the CPU ids to pin to,
``null`` on presets), its ``file``, and its ``inputs`` and ``outputs`` with name, dtype (the
numpy name of the element type the file declares: ``float32``, ``int64``), shape and
``from`` (the partition that makes the tensor, or ``graph_input``); outputs also say
``to`` (the partitions that read them, and ``graph_output``). ``graph_inputs`` and
``graph_outputs`` (with the partition that makes each) and the plan, graph and machine
``fingerprints`` close it. A tuned plan (``placewise tune``) adds ``runtime``: the
onnxruntime session setting (``session.intra_op.allow_spinning``) and the client's idle-wait
spin it chose by measurement. Every partition file loads and runs in plain onnxruntime; the
README shows the dozen lines that chain them.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from placewise import __version__
from placewise.errors import InputError, PlacewiseError, SpecError, UnsupportedError
from placewise.graph.onnx_data import EXTERNAL_DATA_BYTES as _EXTERNAL_DATA_BYTES
from placewise.graph.onnx_data import external_locations
from placewise.io import (
    MAX_JSON_BYTES,
    atomic_write_json,
    check_output_path,
    parse_json,
    read_file_bytes,
    validate_record,
)
from placewise.plan import Plan, check_fingerprints, load_plan
from placewise.plan_sources import plan_machine
from placewise.runtime.backends.onnxruntime import provider_for
from placewise.runtime.compile import write_partitions
from placewise.runtime.planned import plan_fingerprint
from placewise.runtime.program import program_from_plan
from placewise.units import DType

__all__ = [
    "FORMAT_VERSION",
    "GRAPH_INPUT",
    "GRAPH_OUTPUT",
    "MANIFEST_FILE",
    "GraphOutput",
    "GraphTensor",
    "Manifest",
    "ManifestFingerprints",
    "PartitionOutput",
    "PartitionRecord",
    "PartitionTensor",
    "ProviderRecord",
    "RuntimeRecord",
    "export_plan",
    "load_manifest",
    "manifest_from_json",
    "manifest_json_schema",
    "manifest_summary",
    "manifest_to_json",
    "plan_fingerprint",
]

#: the version of the manifest format this module writes and reads
FORMAT_VERSION = 1
#: the manifest's file name inside an export folder
MANIFEST_FILE = "manifest.json"
#: ``from`` of a tensor the caller feeds; ``to`` of a tensor the caller gets back
GRAPH_INPUT = "graph_input"
GRAPH_OUTPUT = "graph_output"
#: a partition larger than this (or whose model keeps its weights in a data file) has its
#: weights beside it, in one ``weights.{device}.bin`` per device (``graph.onnx_data``)
EXTERNAL_DATA_BYTES = _EXTERNAL_DATA_BYTES

Progress = Callable[[str, float], None]

#: numpy names of the element types a boundary tensor may have
_NUMPY_NAMES = {DType.BOOL: "bool", DType.INT8: "int8", DType.UINT8: "uint8",
                DType.INT16: "int16", DType.INT32: "int32", DType.INT64: "int64",
                DType.FP16: "float16", DType.BF16: "bfloat16", DType.FP32: "float32",
                DType.FP64: "float64"}


# ---- the manifest -------------------------------------------------------------------------
class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False,
                              populate_by_name=True, serialize_by_alias=True)


#: a file name inside the export folder: no folders, no leading dot
FileName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$", max_length=255)]
Dim = Annotated[int, Field(ge=0, le=1 << 62)]


class ProviderRecord(_Record):
    """An onnxruntime execution provider and its options, as
    ``InferenceSession(path, providers=[(name, options)])`` takes them."""

    name: str = Field(min_length=1)
    options: dict[str, str] = Field(default_factory=dict)


class GraphTensor(_Record):
    """A tensor at the model's boundary: its name, numpy dtype name and shape."""

    name: str = Field(min_length=1)
    dtype: str = Field(min_length=1)
    shape: tuple[Dim, ...]


class GraphOutput(GraphTensor):
    """A graph output and the partition that makes it (``graph_input`` when the model
    passes an input straight through)."""

    from_: str = Field(validation_alias=AliasChoices("from", "from_"),
                       serialization_alias="from", min_length=1)


class PartitionTensor(GraphTensor):
    """A partition's input: ``from`` names the partition that makes it, or
    ``graph_input``."""

    from_: str = Field(validation_alias=AliasChoices("from", "from_"),
                       serialization_alias="from", min_length=1)


class PartitionOutput(PartitionTensor):
    """A partition's output (``from`` is the partition itself); ``to``: the partitions
    that read it, and ``graph_output`` when the caller gets it back."""

    to: tuple[str, ...] = ()


class PartitionRecord(_Record):
    """One compiled unit: an ONNX file run in one session on one device."""

    name: str = Field(min_length=1)
    index: int = Field(ge=0)
    device: str
    device_kind: str
    provider: ProviderRecord
    alternatives: tuple[ProviderRecord, ...] = ()
    precision: str
    threads: int = Field(ge=1, le=1 << 20)
    cores: tuple[Annotated[int, Field(ge=0, le=1 << 20)], ...] | None = None
    file: FileName
    external_data: FileName | None = None
    tasks: tuple[str, ...]
    inputs: tuple[PartitionTensor, ...]
    outputs: tuple[PartitionOutput, ...] = Field(min_length=1)


class ManifestFingerprints(_Record):
    """The plan file's own fingerprint (``plan_fingerprint``), and the graph and machine
    fingerprints the plan was made for."""

    plan: str
    graph: str
    machine: str


class RuntimeRecord(_Record):
    """The runtime settings ``placewise tune`` chose for the plan from measurement
    (``Plan.service``): onnxruntime's ``session.intra_op.allow_spinning`` session config
    entry for every partition's session ("1" or "0"), and how long before a request is due
    the client stops sleeping and spins (``client_spin_s``)."""

    session_intra_op_allow_spinning: Literal["0", "1"]
    client_spin_s: float = Field(ge=0)


class Manifest(_Record):
    """An export folder's ``manifest.json``; see the module docstring."""

    format_version: Literal[1] = 1
    created_by: str
    model: str
    machine: str
    batch: int = Field(ge=1)
    source_format: str
    partitions: tuple[PartitionRecord, ...] = Field(min_length=1)
    graph_inputs: tuple[GraphTensor, ...]
    graph_outputs: tuple[GraphOutput, ...] = Field(min_length=1)
    fingerprints: ManifestFingerprints
    #: the tuned plan's runtime settings (absent: the plan was not tuned)
    runtime: RuntimeRecord | None = None

    def partition(self, name: str) -> PartitionRecord:
        for p in self.partitions:
            if p.name == name:
                return p
        raise KeyError(f"the manifest has no partition {name!r}")


def manifest_to_json(manifest: Manifest) -> dict[str, Any]:
    """The JSON object of a manifest (what ``manifest.json`` holds)."""
    return manifest.model_dump(mode="json", by_alias=True,
                               exclude={"runtime"} if manifest.runtime is None else None)


def manifest_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of ``manifest.json``, as published in
    ``placewise/schemas/manifest.schema.json`` (regenerate that file with
    ``UPDATE_GOLDEN=1 pytest tests/test_export.py -k schema``). It checks shapes and types;
    ``load_manifest`` also checks the names that refer to each other.

    >>> manifest_json_schema()["title"]
    'Manifest'
    """
    schema = Manifest.model_json_schema(mode="serialization", by_alias=True)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"urn:placewise:schema:manifest:{FORMAT_VERSION}", **schema}


def manifest_from_json(data: Mapping[str, Any] | str | bytes, *,
                       file: str | None = None) -> Manifest:
    """Validate a manifest from its JSON object or text; ``SpecError`` naming the place of
    the first problem (types, a format version this placewise does not read, names that
    do not refer to each other)."""
    file = file or "<manifest>"
    obj = parse_json(data, file=file, error=SpecError) if isinstance(data, str | bytes) \
        else data
    if not isinstance(obj, Mapping):
        raise SpecError(f"a manifest is a JSON object, not {type(obj).__name__}", file=file)
    version = obj.get("format_version")
    if version is None:
        raise SpecError("missing; is this a placewise export manifest?", file=file,
                        place="format_version")
    if version != FORMAT_VERSION or isinstance(version, bool):
        raise SpecError(f"manifest format version {version!r} is not supported (this "
                        f"placewise reads version {FORMAT_VERSION})", file=file,
                        place="format_version")
    manifest = validate_record(Manifest, obj, file=file, error=SpecError)
    _check_references(manifest, file)
    return manifest


def _check_references(m: Manifest, file: str) -> None:
    """Every name refers to something that exists, in execution order."""
    made: dict[str, str] = {}  # tensor -> partition
    seen: set[str] = set()
    files: set[str] = set()
    data: set[str] = set()  # external data files: partitions may share one (a plan set's)
    graph_in = {t.name for t in m.graph_inputs}
    for i, p in enumerate(m.partitions):
        where = f"partitions[{i}] ({p.name})"
        if p.name in seen or p.name in (GRAPH_INPUT, GRAPH_OUTPUT):
            raise SpecError(f"partition name {p.name!r} repeats or is reserved", file=file,
                            place=f"{where}.name")
        if p.file in files | data | {MANIFEST_FILE}:
            raise SpecError(f"file {p.file!r} is named twice", file=file,
                            place=f"{where}.file")
        files.add(p.file)
        if p.external_data is not None:
            if p.external_data in files | {MANIFEST_FILE}:
                raise SpecError(f"file {p.external_data!r} is named twice", file=file,
                                place=f"{where}.external_data")
            data.add(p.external_data)
        for j, t in enumerate(p.inputs):
            if not (t.name in graph_in if t.from_ == GRAPH_INPUT
                    else made.get(t.name) == t.from_):
                raise SpecError(f"input {t.name!r} comes from {t.from_!r}, which does not make "
                                f"it before this partition", file=file,
                                place=f"{where}.inputs[{j}]")
        for j, t in enumerate(p.outputs):
            if t.from_ != p.name or t.name in made or t.name in graph_in:
                raise SpecError(f"output {t.name!r} must come from this partition and be made "
                                f"once", file=file, place=f"{where}.outputs[{j}]")
            made[t.name] = p.name
        seen.add(p.name)
    for j, go in enumerate(m.graph_outputs):
        ok = go.name in graph_in if go.from_ == GRAPH_INPUT else made.get(go.name) == go.from_
        if not ok:
            raise SpecError(f"graph output {go.name!r} is not made by {go.from_!r}", file=file,
                            place=f"graph_outputs[{j}]")


def load_manifest(path: str | os.PathLike[str], *, check_files: bool = True) -> Manifest:
    """Read an export folder's ``manifest.json`` (``path``: the file, or its folder)
    through the input boundary (``placewise.io``: a regular file, size and depth limits,
    finite numbers); ``SpecError`` naming the place of any problem. With ``check_files``,
    every partition file it names must be a regular file beside it."""
    file = os.fspath(path)
    if os.path.isdir(file):
        file = os.path.join(file, MANIFEST_FILE)
    data = read_file_bytes(file, what="manifest", limit_bytes=MAX_JSON_BYTES, error=SpecError)
    manifest = manifest_from_json(data, file=file)
    if check_files:
        folder = os.path.dirname(os.path.abspath(file))
        for i, p in enumerate(manifest.partitions):
            for key, name in (("file", p.file), ("external_data", p.external_data)):
                if name is not None and not os.path.isfile(os.path.join(folder, name)):
                    raise SpecError(f"names {name!r}, which is not a file beside the manifest",
                                    file=file, place=f"partitions[{i}] ({p.name}).{key}")
    return manifest


def manifest_summary(manifest: Manifest, folder: str | os.PathLike[str]) -> dict[str, Any]:
    """What ``placewise export --json`` prints: the folder, each partition's device,
    provider, precision, file and size, and the fingerprints."""
    root = Path(os.fspath(folder))

    def size(name: str | None) -> int:
        if name is None:
            return 0
        with contextlib.suppress(OSError):
            return (root / name).stat().st_size
        return 0

    parts: list[dict[str, Any]] = [
        {"name": p.name, "device": p.device, "provider": p.provider.name,
         "provider_options": dict(p.provider.options), "precision": p.precision,
         "threads": p.threads, "cores": list(p.cores) if p.cores is not None else None,
         "file": p.file, "external_data": p.external_data,
         "bytes": size(p.file) + size(p.external_data),
         "inputs": [t.name for t in p.inputs], "outputs": [t.name for t in p.outputs]}
        for p in manifest.partitions]
    shared = sorted({p["external_data"] for p in parts if p["external_data"] is not None})
    return {"out": str(root), "manifest": str(root / MANIFEST_FILE),
            "format_version": manifest.format_version, "model": manifest.model,
            "machine": manifest.machine, "batch": manifest.batch, "partitions": parts,
            "graph_inputs": [t.name for t in manifest.graph_inputs],
            "graph_outputs": [t.name for t in manifest.graph_outputs],
            "files": 1 + len(parts) + len(shared),
            "bytes": size(MANIFEST_FILE) + sum(size(p["file"]) for p in parts)
            + sum(size(x) for x in shared),
            "fingerprints": manifest.fingerprints.model_dump()}


# ---- the export ---------------------------------------------------------------------------
def export_plan(plan: Any, out_dir: str | os.PathLike[str], *, machine: Any = None,
                source: Any = None, force: bool = False,
                progress: Progress | None = None,
                external_data_bytes: int = EXTERNAL_DATA_BYTES) -> Manifest:
    """Write ``plan``'s partitions and manifest into ``out_dir``; returns the manifest.

    ``plan``: a ``placewise.plan.Plan`` or a plan file. ``machine``: the machine the plan
    was made for (default: its preset, this machine for a ``local`` plan, or the spec file
    the plan recorded, ``placewise.plan_sources.plan_machine``). ``source``: the model (a ``runtime.opexec.ModelSource``
    or a reference; default: the plan's ``model`` at its batch). ``force``: replace an
    ``out_dir`` that holds files. ``progress(message, fraction)`` is called between steps.
    ``external_data_bytes``: a partition larger than this (or one whose source keeps its
    weights in a data file) writes its weights into its device's ``weights.{device}.bin``,
    which every such partition of the device shares (each distinct tensor once).

    ``InputError`` (nothing written) for a plan, machine or model that does not load or
    whose fingerprint differs, an ``out_dir`` that exists and holds files (without
    ``force``), is not a folder, or cannot be written; ``UnsupportedError`` for a partition
    that cannot be compiled (fp16/bf16 ones among them).
    """
    report: Progress = progress or (lambda _m, _f: None)
    file: str | None = None
    if not isinstance(plan, Plan):
        file = os.fspath(plan)
        plan = load_plan(file)
    protect = [f for f in (file, plan.model) if f and not f.strip().startswith("zoo:")]
    target = _check_out_dir(out_dir, force=force, protect=protect)
    report("checking the plan against its machine and model", 0.0)
    machine = _plan_machine(plan, machine, file)
    src = _plan_source(plan, source, file)
    graph = src.graph
    assert graph is not None  # _plan_source checked it against the plan's fingerprint
    parts = _plan_partitions(plan, graph, machine)
    devices = {d.name: d for d in machine.devices}
    providers = {p.name: _provider(devices[p.device], p) for p in parts}
    fps = ManifestFingerprints(plan=plan_fingerprint(plan), graph=plan.fingerprints.graph,
                               machine=plan.fingerprints.machine)
    report(f"compiling {len(parts)} partition{'s' if len(parts) != 1 else ''}", 0.1)

    with _staging(target, force=force) as tmp:
        try:
            paths = write_partitions(src, parts, graph, str(tmp),
                                     external_data_bytes=external_data_bytes)
        except OSError as exc:
            raise InputError(f"cannot write the partitions: {exc.strerror or exc}",
                             file=str(target), place="--out") from None
        report("writing the manifest", 0.9)
        manifest = _manifest(plan, src, devices, parts, providers, paths, fps)
        atomic_write_json(tmp / MANIFEST_FILE, manifest_to_json(manifest))
        with contextlib.suppress(OSError):  # as readable as the partition files beside it
            shutil.copymode(paths[parts[0].name], tmp / MANIFEST_FILE)
    report("done", 1.0)
    return manifest


def _plan_machine(plan: Any, machine: Any, file: str | None) -> Any:
    """The plan's machine, its fingerprint checked (``placewise.plan_sources``)."""
    return plan_machine(plan, machine, file=file)


def _plan_source(plan: Any, source: Any, file: str | None) -> Any:
    """The plan's model source, its graph fingerprint checked. A reference is loaded at the
    plan's batch; when that graph differs, as the file stands (a zoo reference that names
    its own batch, a model exported with a fixed batch) and with the plan's input shapes,
    before the fingerprint is refused."""
    # lazy: torch (runtime.opexec imports it) is heavy to import, loaded only when this runs
    from placewise.runtime.opexec import load_source

    want = plan.fingerprints.graph
    if source is not None and not isinstance(source, str | os.PathLike):
        if source.graph is None:
            raise InputError("the model source has no graph", file=source.ref)
        check_fingerprints(plan, graph=source.graph, file=file)
        return source
    ref = os.fspath(source) if source is not None else plan.model
    shapes = {n: tuple(plan.tensors[n].shape) for n in plan.graph_inputs if n in plan.tensors}
    attempts: list[dict[str, Any]] = [{"batch": plan.batch}, {}]
    if shapes:
        attempts.append({"shapes": shapes})
    if plan.values:  # the model as it was planned: its inputs given those values
        attempts = [{**a, "values": plan.values} for a in attempts]
    first: Any = None
    first_error: PlacewiseError | None = None
    for kwargs in attempts:
        try:
            src = load_source(ref, **kwargs)
        except PlacewiseError as exc:  # e.g. a fixed batch that cannot be re-bound
            first_error = first_error or exc
            continue
        if src.graph is not None and src.graph.fingerprint() == want:
            return src
        if first is None:
            first = src
    if first is None:
        assert first_error is not None
        raise first_error
    if first.graph is None:
        raise InputError("the model source has no graph", file=ref)
    check_fingerprints(plan, graph=first.graph, file=file)
    raise AssertionError("unreachable: the fingerprint differs")  # pragma: no cover


def _plan_partitions(plan: Any, graph: Any, machine: Any) -> list[Any]:
    """The plan's partitions in execution order: the executor's own derivation (without
    its local-device check), each partition after every partition it reads from."""
    for v, a in plan.placement.items():
        dtype = DType.parse(a["dtype"])
        if dtype not in (DType.FP32, DType.INT8):
            raise UnsupportedError(f"vertex {v!r} on {a['device']!r} computes in "
                                   f"{dtype.value}: export compiles fp32 partitions and int8 "
                                   f"ones (onnxruntime dynamic quantization), not "
                                   f"{dtype.value}")
    parts = list(program_from_plan(plan, graph, machine, local_only=False).partitions)
    maker = {x: p.index for p in parts for x in p.outputs}
    done: set[int] = set()
    order: list[Any] = []
    while len(order) < len(parts):  # the earliest-numbered partition whose inputs exist
        ready = [p for p in parts if p.index not in done
                 and all(x not in maker or maker[x] in done for x in p.inputs)]
        if not ready:
            raise UnsupportedError("the plan's partitions read from each other in a cycle")
        nxt = min(ready, key=lambda p: p.index)
        order.append(nxt)
        done.add(nxt.index)
    return order


def _provider(device: Any, part: Any) -> tuple[ProviderRecord, tuple[ProviderRecord, ...],
                                               int, tuple[int, ...] | None]:
    """Provider, alternatives, threads and cores of a partition on ``device``."""
    prov = provider_for(device, part.dtype)
    cores = tuple(dict.fromkeys(device.cores)) if device.cores else None
    if cores:
        threads = len(cores)
    elif device.kind.value == "cpu":
        threads = int(device.compute_units)
    else:
        threads = 1
    return (ProviderRecord(name=prov.name, options=dict(prov.options)),
            tuple(ProviderRecord(name=a.name, options=dict(a.options))
                  for a in prov.alternatives), threads, cores)


def _numpy_name(elem_type: int) -> str:
    # lazy: onnx is heavy to import, loaded only when this runs
    import onnx

    if elem_type == onnx.TensorProto.BFLOAT16:
        return "bfloat16"
    try:
        return str(onnx.helper.tensor_dtype_to_np_dtype(elem_type).name)
    except Exception:
        return onnx.TensorProto.DataType.Name(elem_type).lower()


def _file_dtype(types: Mapping[str, Any], name: str, shape: Sequence[int], part: str) -> str:
    """The numpy dtype a partition file declares for boundary tensor ``name`` (``types``:
    its inputs' and outputs' ``TypeProto.Tensor`` by name), its static dims checked
    against the plan's ``shape`` (symbolic dims, such as an ONNX source's ``batch``, take
    the plan's value)."""
    tt = types.get(name)
    if tt is None:
        raise UnsupportedError(f"partition {part!r}: its file has no boundary tensor {name!r}")
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
    if tt.HasField("shape") and (len(dims) != len(shape) or any(
            d is not None and d != s for d, s in zip(dims, shape, strict=False))):
        raise UnsupportedError(f"partition {part!r}: its file declares {name!r} with shape "
                               f"{dims}, the plan {list(shape)}")
    return _numpy_name(tt.elem_type)


def _manifest(plan: Any, src: Any, devices: Mapping[str, Any], parts: Sequence[Any],
              providers: Mapping[str, Any], paths: Mapping[str, str],
              fps: ManifestFingerprints) -> Manifest:
    """The manifest of the written partitions (their boundary types read back from the
    files), every boundary tensor's producer and readers filled in."""
    # lazy: onnx is heavy to import, loaded only when this runs
    import onnx

    graph = src.graph
    graph_in = set(graph.inputs)
    graph_out = list(graph.outputs)
    maker = {x: p.name for p in parts for x in p.outputs}
    readers: dict[str, list[str]] = {}
    for p in parts:
        for x in p.inputs:
            readers.setdefault(x, []).append(p.name)
    declared: dict[str, str] = {}  # tensor -> the numpy dtype its maker's file declares

    def shape_of(name: str) -> tuple[int, ...]:
        return tuple(int(d) for d in graph.tensor(name).concrete_shape)

    records: list[PartitionRecord] = []
    for p in parts:
        path = paths[p.name]
        model = onnx.load(path, load_external_data=False)
        data = next(iter(external_locations(model)), None)
        types = {vi.name: vi.type.tensor_type for vi in (*model.graph.input,
                                                          *model.graph.output)}

        def tensor(name: str, frm: str, part: str = p.name,
                   types: Mapping[str, Any] = types) -> PartitionTensor:
            shape = shape_of(name)
            return PartitionTensor(name=name, dtype=_file_dtype(types, name, shape, part),
                                   shape=shape, from_=frm)

        ins = []
        for x in p.inputs:
            frm = maker.get(x) or (GRAPH_INPUT if x in graph_in else None)
            if frm is None:
                raise UnsupportedError(f"partition {p.name!r} reads {x!r}, which no partition "
                                       f"makes and the model does not take as an input")
            t = tensor(x, frm)
            if declared.setdefault(x, t.dtype) != t.dtype:
                raise UnsupportedError(f"partition {p.name!r} reads {x!r} as {t.dtype}; it is "
                                       f"made as {declared[x]}")
            ins.append(t)
        outs = []
        for x in p.outputs:
            to = list(readers.get(x, ())) + ([GRAPH_OUTPUT] if x in graph_out else [])
            t = tensor(x, p.name)
            declared[x] = t.dtype
            outs.append(PartitionOutput(name=x, dtype=t.dtype, shape=t.shape, from_=p.name,
                                        to=tuple(to)))
        prov, alts, threads, cores = providers[p.name]
        dev = devices[p.device]
        records.append(PartitionRecord(
            name=p.name, index=p.index, device=p.device, device_kind=dev.kind.value,
            provider=prov, alternatives=alts, precision=p.dtype.value, threads=threads,
            cores=cores, file=os.path.basename(path),
            external_data=data,
            tasks=tuple(p.tasks), inputs=tuple(ins), outputs=tuple(outs)))

    def graph_tensor(name: str) -> GraphTensor:
        t = graph.tensor(name)
        dtype = declared.get(name) or _NUMPY_NAMES.get(t.dtype, t.dtype.value)
        return GraphTensor(name=name, dtype=dtype, shape=shape_of(name))

    g_outs = []
    for x in graph_out:
        frm = maker.get(x) or (GRAPH_INPUT if x in graph_in else None)
        if frm is None:
            raise UnsupportedError(f"graph output {x!r} is made by no partition")
        gt = graph_tensor(x)
        g_outs.append(GraphOutput(name=x, dtype=gt.dtype, shape=gt.shape, from_=frm))
    return Manifest(created_by=f"placewise {__version__}", model=plan.model,
                    machine=plan.machine.name, batch=plan.batch,
                    source_format=src.format.value, partitions=tuple(records),
                    graph_inputs=tuple(graph_tensor(x) for x in graph.inputs),
                    graph_outputs=tuple(g_outs), fingerprints=fps,
                    runtime=None if plan.service is None else RuntimeRecord(
                        session_intra_op_allow_spinning="1" if plan.service.session_spinning
                        else "0", client_spin_s=plan.service.client_spin_s))


# ---- the output folder --------------------------------------------------------------------
def _check_out_dir(out_dir: str | os.PathLike[str], *, force: bool,
                   protect: Sequence[str]) -> Path:
    """The real path of ``out_dir`` once it may be written: new, an empty folder, or (with
    ``force``) a folder to replace; never a file, never under /proc or /sys, in a folder
    that can be created and written (``io.check_output_path``, on its manifest), and never
    (even with ``force``) a folder that holds the current folder, the home folder, the
    plan or the model."""
    given = os.fspath(out_dir)
    if not given.strip():
        raise InputError("the output folder is empty", place="--out")
    target = Path(os.path.realpath(given))
    if target.exists() and not target.is_dir():
        raise InputError("exists and is not a folder: placewise export writes a folder",
                         file=given, place="--out")
    check_output_path(target / MANIFEST_FILE, place="--out")
    if target.parent == target:
        raise InputError("is the root of the file system, not a folder to export into",
                         file=given, place="--out")
    if not target.exists():
        return target
    try:
        entries = sorted(os.listdir(target))
    except OSError as exc:
        raise InputError(f"cannot read the folder: {exc.strerror or exc}", file=given,
                         place="--out") from None
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise InputError(f"cannot write here: its folder {str(target.parent)!r} is not "
                         f"writable (the export is renamed into place)", file=given,
                         place="--out")
    if not entries:
        return target
    if not force:
        shown = ", ".join(entries[:3]) + (f" and {len(entries) - 3} more"
                                          if len(entries) > 3 else "")
        raise InputError(f"the folder holds {len(entries)} other file"
                         f"{'s' if len(entries) != 1 else ''} ({shown}): export writes into "
                         f"a new or empty folder; --force replaces it", file=given,
                         place="--out")
    keep = [Path.cwd(), Path.home(), *(Path(p) for p in protect)]
    for k in keep:
        real = Path(os.path.realpath(k))
        if real == target or target in real.parents:
            raise InputError(f"--force would delete {str(real)!r} with the folder: choose "
                             f"another output folder", file=given, place="--out")
    return target


@contextlib.contextmanager
def _staging(target: Path, *, force: bool) -> Iterator[Path]:
    """A fresh hidden folder beside ``target`` to write into; renamed onto ``target`` when
    the block ends without error (an existing ``target`` replaced as a whole), removed,
    with any parent folders it made, when it does not."""
    made: list[Path] = []
    probe = target.parent
    while not probe.exists():
        made.append(probe)
        probe = probe.parent
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        while True:
            tmp = target.parent / f".{target.name}.{secrets.token_hex(4)}.export-tmp"
            try:
                tmp.mkdir()
                break
            except FileExistsError:
                continue
    except OSError as exc:
        _remove_made(made)
        raise InputError(f"cannot create a folder beside it: {exc.strerror or exc}",
                         file=str(target), place="--out") from None
    try:
        yield tmp
        _publish(tmp, target, force=force)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        _remove_made(made)
        raise


def _remove_made(made: Sequence[Path]) -> None:
    for folder in made:  # deepest first
        with contextlib.suppress(OSError):
            folder.rmdir()


def _publish(tmp: Path, target: Path, *, force: bool) -> None:
    """Rename ``tmp`` onto ``target``: over nothing or an empty folder directly; over a
    folder with files (``force``) by moving it aside first, back again if the rename
    fails, and deleting it after."""
    file = str(target)
    try:
        occupied = target.is_dir() and any(target.iterdir())
    except OSError as exc:
        raise InputError(f"cannot read the folder: {exc.strerror or exc}", file=file,
                         place="--out") from None
    if target.exists() and not target.is_dir():
        raise InputError("exists and is not a folder (it appeared while exporting)",
                         file=file, place="--out")
    if occupied and not force:
        raise InputError("the folder was filled while exporting: nothing was replaced",
                         file=file, place="--out")
    try:
        if not occupied:
            os.rename(tmp, target)
            return
        aside = target.parent / f".{target.name}.{secrets.token_hex(4)}.export-old"
        os.rename(target, aside)
        try:
            os.rename(tmp, target)
        except OSError:
            os.rename(aside, target)
            raise
    except OSError as exc:
        raise InputError(f"cannot put the export in place: {exc.strerror or exc}",
                         file=file, place="--out") from None
    shutil.rmtree(aside, ignore_errors=True)
