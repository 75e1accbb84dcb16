"""ONNX weights kept outside the model: external data read, written and handed to onnxruntime.

Models of real size keep their weights outside the ``.onnx`` file (ONNX *external data*:
a tensor names a ``location`` file, an ``offset`` and a ``length``). placewise follows
two rules, so that no step breaks on them:

- **In memory**, a model placewise holds (``graph.onnx_import.read_onnx`` and every model
  cut from it: partitions, one-op models, precision rewrites) may keep large tensors as
  external data whose ``location`` is the *absolute, resolved* path of a file the importer
  checked (a regular file inside the model's folder). Such a model is never written as it
  is: ``save_model`` writes every external or large initializer into a data file beside
  the file it writes, with a relative location.
- **Nothing mutates a model it is given**: writing, checking and opening sessions build
  light copies (the weights are referenced, not copied) or pass the weights to
  onnxruntime apart (``SessionOptions.add_external_initializers``, read in place from a
  memory map).

``WeightsFile`` is the one writer of data files: identical tensors (dtype, dims, bytes)
are written once, at 64-byte aligned offsets, so partitions that share a file share their
common weights (``placewise.export`` per device, plan-set export across buckets).

>>> import numpy as np, onnx, os, tempfile
>>> from onnx import TensorProto, helper, numpy_helper
>>> w = numpy_helper.from_array(np.ones((64, 64), np.float32), "w")
>>> g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [w])
>>> m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
>>> d = tempfile.mkdtemp()
>>> save_model(m, os.path.join(d, "m.onnx"), external_data_bytes=1024)
'm.onnx.data'
>>> has_external_data(m)  # the model given is unchanged
False
>>> sorted(os.listdir(d))
['m.onnx', 'm.onnx.data']
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from placewise.errors import ModelFormatError
from placewise.graph.onnx_kinds import onnx_dtype

if TYPE_CHECKING:
    from onnx import GraphProto, ModelProto, NodeProto, TensorProto

__all__ = ["EXTERNAL_DATA_BYTES", "SHARE_MIN_BYTES", "WeightsFile", "check_model",
           "embedded", "external_info", "external_locations", "has_external_data", "light_copy",
           "ort_session", "resolve_locations", "save_model", "tensor_bytes", "tensors", "to_array"]

#: a model larger than this is written with its weights in a data file beside it
EXTERNAL_DATA_BYTES = 64 * 2**20
#: initializers smaller than this stay inside the model file when the rest goes out
SHARE_MIN_BYTES = 1024
_ALIGN = 64

#: where a tensor goes: (location, offset, length) in a data file
Put = Callable[["TensorProto"], tuple[str, int, int]]


def tensors(graph: GraphProto) -> Iterable[TensorProto]:
    """Every TensorProto in the graph that may carry external data, subgraphs included."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from tensors(attr.g)
            for sub in attr.graphs:
                yield from tensors(sub)


def _is_external(t: TensorProto) -> bool:
    from onnx import TensorProto

    return t.data_location == TensorProto.EXTERNAL


def external_info(t: TensorProto) -> tuple[str, int, int]:
    """(location, offset, length) of an external tensor (length from its dims and type
    where the entry is missing)."""
    info = {e.key: e.value for e in t.external_data}
    length = info.get("length")
    return (info.get("location", ""), int(info.get("offset", "0") or 0),
            int(length) if length else tensor_bytes(t))


def resolve_locations(model: ModelProto, folder: str | os.PathLike[str]) -> ModelProto:
    """``model`` (just read from a file in ``folder`` that placewise wrote: not user input,
    which ``graph.onnx_import.read_onnx`` checks) with its external-data locations made
    absolute, in place; returns it."""
    base = os.path.realpath(os.fspath(folder))
    for t in tensors(model.graph):
        if _is_external(t):
            for e in t.external_data:
                if e.key == "location" and not os.path.isabs(e.value):
                    e.value = os.path.join(base, e.value)
    return model


def has_external_data(model: ModelProto) -> bool:
    """Whether any tensor of ``model`` (subgraphs included) is external data."""
    return any(_is_external(t) for t in tensors(model.graph))


def tensor_bytes(t: TensorProto) -> int:
    """The bytes a tensor's values take (from its dims and element type, as the importer
    counts them: sub-byte types packed; 0 for strings and unknown types)."""
    dtype = onnx_dtype(t.data_type)
    return 0 if dtype is None or t.data_type == 8 else dtype.nbytes(math.prod(t.dims))


def _mapped(t: TensorProto) -> Any:
    """A read-only memory map of an external tensor's bytes (uint8)."""
    import numpy as np

    location, offset, length = external_info(t)
    need = tensor_bytes(t)
    if 0 < need < length:  # a longer span than the tensor needs (the importer allows it)
        length = need
    if not os.path.isabs(location):
        raise ModelFormatError(f"external data location {location!r} is relative: only "
                               f"placewise.graph.onnx_import.read_onnx resolves it",
                               place=f"initializer {t.name!r}")
    if length == 0:
        return np.zeros(0, np.uint8)
    if os.path.getsize(location) < offset + length:
        raise ModelFormatError(f"is too short for tensor {t.name!r} ({length} bytes at "
                               f"offset {offset}); changed since it was read?", file=location)
    return np.memmap(location, dtype=np.uint8, mode="r", offset=offset, shape=(length,))


def _raw(t: TensorProto) -> Any:
    """The little-endian bytes of a tensor (a buffer), or None for strings."""
    from onnx import TensorProto, numpy_helper

    if t.data_type == TensorProto.STRING:
        return None
    if _is_external(t):
        return memoryview(_mapped(t))
    if t.HasField("raw_data"):
        return t.raw_data
    return numpy_helper.to_array(t).tobytes()


def to_array(t: TensorProto) -> Any:
    """The values of ``t`` as a numpy array (external data: a read-only memory map)."""
    from onnx import helper, numpy_helper

    if not _is_external(t):
        return numpy_helper.to_array(t)
    try:
        dtype = helper.tensor_dtype_to_np_dtype(t.data_type)
        raw = _mapped(t)
        if dtype.kind in "biuf" and dtype.itemsize * math.prod(t.dims) == raw.nbytes:
            return raw.view(dtype).reshape(tuple(t.dims))
    except (KeyError, ValueError):
        pass
    return numpy_helper.to_array(embedded(t))


# ---- writing -------------------------------------------------------------------------------


class WeightsFile:
    """One external-data file, written as tensors are put in it: identical tensors (same
    dtype, dims and bytes) once, each at a 64-byte aligned offset."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.name = self.path.name
        self.size = 0
        self.references = 0
        self._at: dict[str, tuple[int, int]] = {}
        self._f: Any = None

    @property
    def tensors(self) -> int:
        """Distinct tensors written."""
        return len(self._at)

    def put(self, t: TensorProto) -> tuple[str, int, int]:
        """Write ``t``'s bytes (unless the same tensor is there): (location, offset,
        length)."""
        raw = _raw(t)
        assert raw is not None, "string tensors stay inside the model"
        h = hashlib.sha256(f"{t.data_type}:{list(t.dims)}:".encode())
        h.update(raw)
        key = h.hexdigest()
        if key not in self._at:
            if self._f is None:
                self._f = open(self.path, "wb")  # noqa: SIM115 - closed by close()
            pad = (-self.size) % _ALIGN
            self._f.write(b"\0" * pad)
            self._f.write(raw)
            self._at[key] = (self.size + pad, len(raw))
            self.size += pad + len(raw)
        self.references += 1
        return (self.name, *self._at[key])

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None

    def __enter__(self) -> WeightsFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _external_tensor(t: TensorProto, where: tuple[str, int, int]) -> TensorProto:
    from onnx import TensorProto

    out = TensorProto(name=t.name, data_type=t.data_type, doc_string=t.doc_string)
    out.dims.extend(t.dims)
    out.data_location = TensorProto.EXTERNAL
    for k, v in zip(("location", "offset", "length"), where, strict=True):
        e = out.external_data.add()
        e.key, e.value = k, str(v)
    return out


def embedded(t: TensorProto) -> TensorProto:
    """``t`` itself, or (external data) a copy holding its bytes."""
    from onnx import TensorProto

    if not _is_external(t):
        return t
    out = TensorProto(name=t.name, data_type=t.data_type, doc_string=t.doc_string)
    out.dims.extend(t.dims)
    out.raw_data = bytes(_mapped(t))
    return out


def _light_tensor(t: TensorProto, put: Put | None, min_bytes: int) -> TensorProto:
    """``t`` as the copy holds it: in ``put``'s file when it is external or at least
    ``min_bytes`` (and ``put`` is given), else embedded."""
    from onnx import TensorProto

    if put is not None and t.data_type != TensorProto.STRING and (
            _is_external(t) or tensor_bytes(t) >= min_bytes):
        return _external_tensor(t, put(t))
    return embedded(t)


def _light_node(n: NodeProto) -> NodeProto:
    """``n``, or a copy whose external attribute tensors (subgraphs included) are read in."""
    from onnx import NodeProto

    if not any(_is_external(t) for a in n.attribute for t in
               [*([a.t] if a.HasField("t") else []), *a.tensors,
                *(x for g in ([a.g] if a.HasField("g") else []) for x in tensors(g)),
                *(x for g in a.graphs for x in tensors(g))]):
        return n
    out = NodeProto()
    out.CopyFrom(n)
    for a in out.attribute:
        if a.HasField("t") and _is_external(a.t):
            a.t.CopyFrom(embedded(a.t))
        for i, t in enumerate(a.tensors):
            if _is_external(t):
                a.tensors[i].CopyFrom(embedded(t))
        if a.HasField("g"):
            a.g.CopyFrom(_light_graph(a.g, None, 0))
        for i, g in enumerate(a.graphs):
            a.graphs[i].CopyFrom(_light_graph(g, None, 0))
    return out


def _repeated(fd: Any) -> bool:
    flag = getattr(fd, "is_repeated", None)  # protobuf >= 6; ``label`` is deprecated there
    return flag if isinstance(flag, bool) else bool(fd.label == fd.LABEL_REPEATED)


def _light_graph(g: GraphProto, put: Put | None, min_bytes: int) -> GraphProto:
    from onnx import GraphProto, SparseTensorProto

    out = GraphProto()
    for fd, value in g.ListFields():
        if fd.name in ("initializer", "node", "sparse_initializer"):
            continue
        if _repeated(fd):
            getattr(out, fd.name).extend(value)
        elif fd.message_type is not None:
            getattr(out, fd.name).CopyFrom(value)
        else:
            setattr(out, fd.name, value)
    out.initializer.extend(_light_tensor(t, put, min_bytes) for t in g.initializer)
    for s in g.sparse_initializer:
        out.sparse_initializer.append(SparseTensorProto(
            values=_light_tensor(s.values, None, 0), indices=_light_tensor(s.indices, None, 0),
            dims=s.dims))
    out.node.extend(_light_node(n) for n in g.node)
    return out


def light_copy(model: ModelProto, put: Put | None = None, *,
               min_bytes: int = SHARE_MIN_BYTES) -> ModelProto:
    """A copy of ``model`` that does not copy its large weights: the graph's initializers
    that are external, or of at least ``min_bytes``, go where ``put`` says (a
    ``WeightsFile.put``); without ``put``, every external tensor is read in (embedded)."""
    from onnx import ModelProto

    out = ModelProto()
    for fd, value in model.ListFields():
        if fd.name == "graph":
            continue
        if _repeated(fd):
            getattr(out, fd.name).extend(value)
        elif fd.message_type is not None:
            getattr(out, fd.name).CopyFrom(value)
        else:
            setattr(out, fd.name, value)
    out.graph.CopyFrom(_light_graph(model.graph, put, min_bytes))
    return out


def save_model(model: ModelProto, path: str | os.PathLike[str], *,
               external_data_bytes: int = EXTERNAL_DATA_BYTES,
               weights: WeightsFile | None = None) -> str | None:
    """Write ``model`` at ``path`` without changing it; returns the data file's name (beside
    ``path``) or None. Its initializers of at least ``SHARE_MIN_BYTES`` go to ``weights``
    (a file shared with other models) when given, else, when the model holds external data
    or is larger than ``external_data_bytes``, to ``{name}.data`` beside it."""
    import onnx

    file = os.fspath(path)
    if weights is None and not has_external_data(model) and \
            model.ByteSize() <= external_data_bytes:
        onnx.save_model(model, file)
        return None
    own = weights is None
    w = weights if weights is not None else WeightsFile(file + ".data")
    try:
        light = light_copy(model, w.put)
    finally:
        if own:
            w.close()
    onnx.save_model(light, file)
    return w.name if w.references else None


# ---- checking and running -------------------------------------------------------------------


def check_model(model: ModelProto) -> None:
    """``onnx.checker.check_model`` of ``model``, whose weights may be external data or
    large (the checker reads a light copy whose weights name an empty stub file; it checks
    the graph, not the weights' bytes)."""
    import onnx

    if not has_external_data(model) and model.ByteSize() <= EXTERNAL_DATA_BYTES:
        onnx.checker.check_model(model)
        return
    with tempfile.TemporaryDirectory(prefix="placewise-check-") as tmp:
        stub = "stub.data"
        Path(tmp, stub).touch()
        light = light_copy(model, lambda t: (stub, 0, tensor_bytes(t)))
        path = os.path.join(tmp, "model.onnx")
        onnx.save_model(light, path)
        onnx.checker.check_model(path)


def _session_weights(model: ModelProto) -> tuple[list[str], list[Any], bool]:
    """The external initializers of the main graph as (names, OrtValues) read in place,
    and whether other tensors are external (attribute tensors, subgraphs, types numpy
    does not hold): those the session cannot take apart."""
    import onnxruntime as ort
    from onnx import helper

    names: list[str] = []
    values: list[Any] = []
    for t in model.graph.initializer:
        if not _is_external(t):
            continue
        try:
            dtype = helper.tensor_dtype_to_np_dtype(t.data_type)
        except Exception:
            return [], [], True
        raw = _mapped(t)
        if dtype.kind not in "biuf" or dtype.itemsize * math.prod(t.dims) != raw.nbytes:
            return [], [], True
        arr = raw.view(dtype).reshape(tuple(t.dims))
        names.append(t.name)
        values.append(ort.OrtValue.ortvalue_from_numpy(arr))
    inner = sum(1 for t in tensors(model.graph) if _is_external(t)) > len(names)
    return names, values, inner


def ort_session(model: ModelProto | bytes | str, options: Any,
                providers: Any = ("CPUExecutionProvider",)) -> Any:
    """An ``onnxruntime.InferenceSession`` of ``model`` (a ``ModelProto``, its bytes or a
    file path), made by ``placewise.onnxrt.new_session`` (quiet). A ``ModelProto``'s
    external initializers are given to onnxruntime apart
    (``options.add_external_initializers``, memory-mapped, kept alive with the session):
    ``options`` must be fresh, used for this one session."""
    # placewise.onnxrt imports onnxruntime (about 0.5 s): only where a session is made
    from placewise.onnxrt import new_session

    if isinstance(model, (bytes, str, os.PathLike)):
        return new_session(model if isinstance(model, bytes) else os.fspath(model), options,
                           providers=providers)
    names, values, inner = _session_weights(model)
    if inner:
        names, values = [], []
        model = light_copy(model)  # read the external tensors in
    if names:
        options.add_external_initializers(names, values)
    sess = new_session(model.SerializeToString(), options, providers=providers)
    if values:  # onnxruntime reads the weights where they are: keep them alive
        with contextlib.suppress(AttributeError):
            sess._placewise_weights = values
    return sess


def external_locations(model: ModelProto) -> Iterator[str]:
    """The distinct external-data locations ``model`` names, in order."""
    seen: set[str] = set()
    for t in tensors(model.graph):
        if _is_external(t):
            loc = external_info(t)[0]
            if loc not in seen:
                seen.add(loc)
                yield loc
