"""Read an ONNX model file into a placewise ``Graph``.

The importer never trusts the file: unreadable bytes, a truncated file, a model whose nodes
read undefined values, or an external-data reference that leaves the model's folder all end
in ``ModelFormatError`` naming the file, the place and the problem. Input dims can be bound
before shape inference (``shapes=`` per input, ``batch=`` for symbolic leading dims), so that
ONNX shape inference propagates concrete sizes through the graph.

Initializers and the outputs of ``Constant`` nodes become ``Role.PARAM`` tensors (no op);
every other node becomes one ``Op`` whose kind comes from a table keyed by ONNX op type
(``graph.onnx_kinds``; unknown types become ``OpKind.UNKNOWN`` with
``Provenance.source_op = "onnx::Type"``). Before that, ``graph.onnx_shapes`` resolves the
shapes and folds the shape arithmetic of the bound model.

>>> import onnx, tempfile, os
>>> from onnx import TensorProto, helper
>>> node = helper.make_node("Relu", ["x"], ["y"])
>>> graph = helper.make_graph([node], "g",
...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])])
>>> model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
>>> path = os.path.join(tempfile.mkdtemp(), "relu.onnx")
>>> onnx.save(model, path)
>>> g = load_onnx(path, batch=4)
>>> [(o.kind.value, o.provenance.source_op) for o in g.ops], g.tensor("y").shape
([('relu', 'onnx::Relu')], (4, 8))
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from placewise.errors import GraphError, ModelFormatError
from placewise.graph.ir import (
    Attrs,
    Dim,
    Graph,
    ImportRecord,
    Op,
    Role,
    Tensor,
    eval_dim,
)
from placewise.graph.onnx_bodies import control_attrs
from placewise.graph.onnx_compat import (
    MIN_OPSET,
    check_placeable_io,
    free_anonymous_dims,
    upgrade_opset,
)
from placewise.graph.onnx_control import CONTROL_FLOW_OPS, constant_tensor, subgraph_refs
from placewise.graph.onnx_data import tensors
from placewise.graph.onnx_kinds import _Ctx, _make_op, _type_name, _TypeInfo, onnx_dtype
from placewise.graph.onnx_shapes import PrepareInfo, prepare_onnx
from placewise.io import read_file_bytes, read_file_range, shorten
from placewise.units import DType

if TYPE_CHECKING:
    from onnx import GraphProto, ModelProto, NodeProto, TensorProto, TypeProto

__all__ = ["MIN_OPSET", "graph_of_prepared", "load_onnx", "load_onnx_source", "onnx_dtype",
           "read_onnx", "read_onnx_as_is"]

# external tensors up to this size are read in (shape inference may need their values);
# larger ones are only checked, never loaded: their dims and dtype are in the model proto
_LOAD_EXTERNAL_MAX_BYTES = 1 << 16
#: the largest .onnx file placewise reads (protobuf's own limit; bigger models keep their
#: weights in external data files)
MAX_ONNX_BYTES = (2 << 30) - 1


# ---- reading the file --------------------------------------------------------------------


def _read_model(path: str) -> ModelProto:
    import onnx

    # the input boundary: a regular file (a link to /dev/zero, a FIFO, a directory are
    # refused before reading) of at most MAX_ONNX_BYTES, never read past that limit
    data = read_file_bytes(path, what="ONNX model", limit_bytes=MAX_ONNX_BYTES,
                           error=ModelFormatError)
    try:
        model = onnx.ModelProto()
        model.ParseFromString(data)
    except Exception as e:  # protobuf DecodeError and friends: never a raw traceback
        raise ModelFormatError(
            f"not a readable ONNX model (truncated or corrupt protobuf: {type(e).__name__}: "
            f"{shorten(str(e), 200)})", file=path, place="ModelProto") from None
    if model.ir_version <= 0 or not model.HasField("graph") or not model.opset_import:
        raise ModelFormatError(
            "not an ONNX model (no ir_version, graph or opset_import; truncated or not an "
            "ONNX file?)", file=path)
    if not model.graph.output:
        raise ModelFormatError("the graph has no outputs (truncated file?)", file=path,
                               place=f"graph {model.graph.name!r}")
    return model


# ---- strings and tensor data ---------------------------------------------------------------


def _check_strings(model: ModelProto, path: str) -> None:
    """Every string field (names, op types, domains, dims, metadata) must be UTF-8 text.

    protobuf hands an invalid one over as ``bytes``; placewise refuses it here, naming the
    field, instead of failing later wherever the name is used."""
    from google.protobuf.descriptor import FieldDescriptor

    # per field: (1 message / 2 string / 0 other, repeated); only the fields a message has
    # set are visited (``ListFields``), in the order they are declared in
    kinds: dict[Any, tuple[int, bool]] = {}
    msg_type, str_type = FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_STRING

    def declared(item: tuple[Any, Any]) -> int:
        return int(item[0].index)

    # only message and string fields are looked at: tensor data is never copied out; a
    # message's place is kept as (parent's place, field, index) and written out only for
    # the message of an error (formatting every node's place costs more than the check)
    stack: list[tuple[Any, Any]] = [(model, None)]
    while stack:
        msg, at = stack.pop()
        present = msg.ListFields()
        if len(present) > 1:
            present.sort(key=declared)
        for fd, value in present:
            kind = kinds.get(fd)
            if kind is None:
                repeated = fd.is_repeated if hasattr(fd, "is_repeated") \
                    else fd.label == FieldDescriptor.LABEL_REPEATED
                kind = kinds[fd] = (1 if fd.type == msg_type else 2 if fd.type == str_type
                                    else 0, repeated)
            if kind[0] == 1:
                if kind[1]:
                    name = fd.name
                    stack.extend((m, (at, name, i)) for i, m in enumerate(value))
                else:
                    stack.append((value, (at, fd.name, None)))
            elif kind[0] == 2:
                for i, v in enumerate(value if kind[1] else (value,)):
                    if not isinstance(v, str):
                        where = _place_text((at, fd.name, i if kind[1] else None))
                        raise ModelFormatError(
                            f"is not UTF-8 text ({bytes(v)[:40]!r}); names and strings in "
                            f"an ONNX model must be UTF-8", file=path, place=where)


def _place_text(at: Any) -> str:
    """``graph.node[3].name`` from a place kept as (parent's place, field, index|None)."""
    parts: list[str] = []
    while at is not None:
        at, name, index = at
        parts.append(name if index is None else f"{name}[{index}]")
    return ".".join(reversed(parts))


# bits per element of each ONNX element type; the typed field that holds it without raw_data
_ELEM_BITS: dict[int, int] = {
    1: 32, 2: 8, 3: 8, 4: 16, 5: 16, 6: 32, 7: 64, 9: 8, 10: 16, 11: 64, 12: 32, 13: 64,
    14: 64, 15: 128, 16: 16, 17: 8, 18: 8, 19: 8, 20: 8, 21: 4, 22: 4, 23: 4, 24: 8, 25: 2,
    26: 2, 27: 6, 28: 6,
}
_ELEM_FIELD: dict[int, str] = {1: "float_data", 14: "float_data", 11: "double_data",
                               15: "double_data", 7: "int64_data", 12: "uint64_data",
                               13: "uint64_data", 8: "string_data"}
_DATA_FIELDS = ("float_data", "int32_data", "string_data", "int64_data", "double_data",
                "uint64_data")


def _typed_count(elem_type: int, numel: int) -> int:
    """How many entries the typed field holds for ``numel`` elements."""
    bits = _ELEM_BITS.get(elem_type, 0)  # STRING: one entry per element
    if elem_type in (14, 15):
        return 2 * numel  # complex: real and imaginary parts
    if bits in (2, 4):
        return -(-numel * bits // 8)  # packed bytes, one per int32 entry
    return numel


def _placed_tensors(graph: GraphProto, scope: str = "") -> Iterable[tuple[TensorProto, str]]:
    """Every stored tensor of ``graph`` (subgraphs included) with the place that names it."""
    stack: list[tuple[GraphProto, str]] = [(graph, scope)]
    while stack:
        g, within = stack.pop()
        for t in g.initializer:
            yield t, f"{within}initializer {t.name!r}"
        for sp in g.sparse_initializer:
            yield sp.values, f"{within}sparse initializer {sp.values.name!r} values"
            yield sp.indices, f"{within}sparse initializer {sp.values.name!r} indices"
        for i, node in enumerate(g.node):
            label = f"{within}node {node.name or f'{node.op_type}_{i}'!r}"
            for attr in node.attribute:
                where = f"{label} attribute {attr.name!r}"
                if attr.HasField("t"):
                    yield attr.t, where
                for j, t in enumerate(attr.tensors):
                    yield t, f"{where}[{j}]"
                if attr.HasField("sparse_tensor"):
                    yield attr.sparse_tensor.values, f"{where} values"
                    yield attr.sparse_tensor.indices, f"{where} indices"
                if attr.HasField("g"):
                    stack.append((attr.g, f"{where}: "))
                for j, sub in enumerate(attr.graphs):
                    stack.append((sub, f"{where}[{j}]: "))


def _check_tensor_data(model: ModelProto, path: str) -> None:
    """Every tensor stored in the model (initializers, sparse initializers, attribute
    tensors, subgraphs included) holds exactly the data its dims and element type need."""
    from onnx import TensorProto

    for tensor, place in _placed_tensors(model.graph):
        if tensor.data_location == TensorProto.EXTERNAL:
            continue  # checked by _resolve_external
        dims = [int(d) for d in tensor.dims]
        if any(d < 0 for d in dims):
            raise ModelFormatError(f"negative dimension in its shape {dims}", file=path,
                                   place=place)
        numel = math.prod(dims)
        elem = tensor.data_type
        if elem not in _ELEM_BITS and elem != TensorProto.STRING:
            if elem == TensorProto.UNDEFINED:
                raise ModelFormatError("has no element type (UNDEFINED)", file=path,
                                       place=place)
            continue  # a type this placewise does not know: it cannot size it either
        type_name = _type_name(elem)
        field = _ELEM_FIELD.get(elem, "int32_data")
        if tensor.HasField("raw_data"):
            if elem == TensorProto.STRING:
                raise ModelFormatError("a STRING tensor cannot hold raw_data", file=path,
                                       place=place)
            need = -(-numel * _ELEM_BITS[elem] // 8)
            have = len(tensor.raw_data)
            if have != need:
                raise ModelFormatError(
                    f"holds {have} bytes of raw_data but its shape {dims} of {type_name} "
                    f"needs {need}", file=path, place=place)
            others = [f for f in _DATA_FIELDS if len(getattr(tensor, f))]
            if others:
                raise ModelFormatError(f"holds both raw_data and {', '.join(others)}",
                                       file=path, place=place)
        else:
            need = _typed_count(elem, numel)
            have = len(getattr(tensor, field))
            if have != need:
                raise ModelFormatError(
                    f"holds {have} values in {field} but its shape {dims} of {type_name} "
                    f"needs {need}", file=path, place=place)
            others = [f for f in _DATA_FIELDS if f != field and len(getattr(tensor, f))]
            if others:
                raise ModelFormatError(
                    f"also holds data in {', '.join(others)}, which a {type_name} tensor "
                    f"does not use", file=path, place=place)


# ---- external data ---------------------------------------------------------------------------


def _is_absolute(location: str) -> bool:
    return (os.path.isabs(location) or location.startswith(("/", "\\"))
            or re.match(r"^[A-Za-z]:", location) is not None)


def _resolve_external(model: ModelProto, path: str) -> None:
    """Check every external-data reference; read small external tensors in place and
    name the others' files by their absolute, resolved path (``graph.onnx_data``).

    A ``location`` that is absolute, or that resolves (after symlinks and ``..``) outside
    the model's folder, is refused, as is a missing file or one too short for the tensor.
    """
    from onnx import TensorProto

    base = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    for tensor in tensors(model.graph):
        if tensor.data_location != TensorProto.EXTERNAL:
            continue
        place = f"initializer {tensor.name!r}"
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        if not location:
            raise ModelFormatError("external data has no location", file=path, place=place)
        if "\x00" in location or _is_absolute(location):
            raise ModelFormatError(
                f"external data location {location!r} is an absolute path; placewise only "
                f"reads external data inside the model's folder", file=path, place=place)
        target = os.path.realpath(os.path.join(base, location))
        if os.path.commonpath([base, target]) != base or target == base:
            raise ModelFormatError(
                f"external data location {location!r} escapes the model's folder "
                f"(resolves to {target!r}); refused", file=path, place=place)
        if not os.path.exists(target):
            raise ModelFormatError(f"external data file {location!r} does not exist",
                                   file=path, place=place)
        if not os.path.isfile(target):
            raise ModelFormatError(f"external data file {location!r} is not a regular file",
                                   file=path, place=place)
        try:
            offset = int(info.get("offset", "0"))
            length = int(info["length"]) if "length" in info else None
        except ValueError:
            raise ModelFormatError("external data offset/length is not an integer",
                                   file=path, place=place) from None
        dtype = onnx_dtype(tensor.data_type)
        expected = dtype.nbytes(math.prod(tensor.dims)) if dtype is not None else None
        if length is None:
            length = expected
        if offset < 0 or (length is not None and length < 0):
            raise ModelFormatError("external data offset/length is negative", file=path,
                                   place=place)
        if expected is not None and length is not None and length < expected:
            raise ModelFormatError(
                f"external data holds {length} bytes but the tensor needs {expected}",
                file=path, place=place)
        size = os.path.getsize(target)
        need = offset + (length if length is not None else 0)
        if need > size:
            raise ModelFormatError(
                f"external data file {location!r} is too short ({size} bytes, needs "
                f"{need}); truncated?", file=path, place=place)
        if length is not None and length <= _LOAD_EXTERNAL_MAX_BYTES:
            tensor.raw_data = read_file_range(target, offset, length,
                                              what="external data file",
                                              error=ModelFormatError)
            del tensor.external_data[:]
            tensor.data_location = TensorProto.DEFAULT
        else:  # kept outside: named by its resolved path (graph.onnx_data's convention)
            for e in tensor.external_data:
                if e.key == "location":
                    e.value = target


# ---- shapes and dtypes ---------------------------------------------------------------------


def _symbol(text: str) -> str:
    s = re.sub(r"\W", "_", text)
    return s if s and not s[0].isdigit() else "t_" + s


def _tensor_type_info(name: str, tp: TypeProto, env: Mapping[str, int]) -> _TypeInfo | None:
    """Shape and dtype from a TypeProto; sequences/optionals use their element type with a
    symbolic leading length."""
    which = tp.WhichOneof("value")
    if which == "tensor_type" or which == "sparse_tensor_type":
        tt = tp.tensor_type if which == "tensor_type" else tp.sparse_tensor_type
        if not tt.elem_type:
            return None
        dtype = onnx_dtype(tt.elem_type)
        if not tt.HasField("shape"):
            return _TypeInfo((f"{_symbol(name)}_numel",), dtype, tt.elem_type, False)
        else:
            dims: list[Dim] = []
            for i, d in enumerate(tt.shape.dim):
                if d.HasField("dim_value"):
                    dims.append(int(d.dim_value))
                elif d.dim_param:
                    dims.append(_eval_dim_param(d.dim_param, env, f"{_symbol(name)}_d{i}"))
                else:
                    dims.append(f"{_symbol(name)}_d{i}")
            shape = tuple(dims)
        return _TypeInfo(shape, dtype, tt.elem_type)
    if which == "sequence_type":
        inner = _tensor_type_info(name, tp.sequence_type.elem_type, env)
        if inner is None:
            return None
        return _TypeInfo((f"{_symbol(name)}_len", *inner.shape), inner.dtype, inner.elem_type,
                         inner.rank_known)
    if which == "optional_type":
        return _tensor_type_info(name, tp.optional_type.elem_type, env)
    return None


_MAX_DIM_PARAM = 64  # characters of a symbolic dim kept as written ("s0*s1", "batch")


def _eval_dim_param(text: str, env: Mapping[str, int], fresh: str) -> Dim:
    """``eval_dim`` of a dim_param. One that is no dim name or short arithmetic on names
    (an exporter's long, nested or ``floor(...)`` size expression) is an unknown size of its
    own, ``fresh``: errors then name the input dim to bind, not the expression."""
    got = eval_dim(text, env) if len(text) <= _MAX_DIM_PARAM else text
    if isinstance(got, int):
        return got
    if len(text) > _MAX_DIM_PARAM or text.count("(") > 2 or \
            not re.fullmatch(r"[\w\s+\-*/%()]+", text) or "**" in text or \
            re.search(r"\w\s*\(", text):
        return fresh
    return got


def _constant_node_info(node: NodeProto) -> _TypeInfo | None:
    for attr in node.attribute:
        if attr.name == "value":
            return _TypeInfo(tuple(int(d) for d in attr.t.dims), onnx_dtype(attr.t.data_type),
                             attr.t.data_type)
        if attr.name == "sparse_value":
            sv = attr.sparse_tensor
            return _TypeInfo(tuple(int(d) for d in sv.dims), onnx_dtype(sv.values.data_type),
                             sv.values.data_type)
        if attr.name == "value_float":
            return _TypeInfo((), DType.FP32, 1)
        if attr.name == "value_floats":
            return _TypeInfo((len(attr.floats),), DType.FP32, 1)
        if attr.name == "value_int":
            return _TypeInfo((), DType.INT64, 7)
        if attr.name == "value_ints":
            return _TypeInfo((len(attr.ints),), DType.INT64, 7)
        if attr.name in ("value_string", "value_strings"):
            return _TypeInfo((), None, 8)
    return None


# ---- the importer ---------------------------------------------------------------------------


def read_onnx(path: str | os.PathLike[str]) -> ModelProto:
    """The ONNX model at ``path`` with its external data, safely: unreadable, truncated or
    invalid files and external-data references that escape the model's folder are refused
    with ``ModelFormatError``; an opset older than ``MIN_OPSET`` is upgraded to it
    (``onnx.version_converter``; a conversion that fails is refused naming the node).
    Every reader of ``.onnx`` files goes through here."""
    return _read_onnx(os.fspath(path))[0]


def read_onnx_as_is(path: str | os.PathLike[str]) -> ModelProto:
    """The ONNX model at ``path`` with its external data, checked as ``read_onnx`` checks
    it but changed in nothing (no opset upgrade, no dims freed): the model another
    runtime ran, e.g. to rebuild the graph onnxruntime optimized from it."""
    file = os.fspath(path)
    model = _read_model(file)
    _check_strings(model, file)  # before any name is used in a message
    _resolve_external(model, file)
    _check_tensor_data(model, file)
    return model


def _read_onnx(file: str) -> tuple[ModelProto, int | None]:
    """``read_onnx`` and the opset the file had when it was upgraded (else None)."""
    model = read_onnx_as_is(file)
    free_anonymous_dims(model)
    return upgrade_opset(model, file)


def load_onnx(path: str | os.PathLike[str], *,
              shapes: Mapping[str, Sequence[int]] | None = None,
              batch: int | None = None,
              values: Mapping[str, Sequence[float]] | None = None) -> Graph:
    """Read the ONNX model at ``path`` into a ``Graph``.

    ``shapes`` maps graph input names to concrete dims; ``batch`` binds the first dim of
    every other graph input whose first dim is symbolic or unknown; ``values`` gives inputs a
    value (they become constants: shape arithmetic and ``If`` conditions that read them
    fold, and an ``If`` takes the branch they pick, ``graph.onnx_control``). All are applied
    before shape inference, so concrete sizes propagate; where ONNX inference stops although every
    input is concrete, onnxruntime resolves the rest, and shape arithmetic folds into
    constants (``graph.onnx_shapes``; ``Graph.record`` says how). Dims that stay unknown
    are kept as symbolic names (``str``).

    Raises ``ModelFormatError`` for a missing, unreadable, truncated or invalid file (or an
    unsafe external-data reference), ``InputError`` for a binding that conflicts with the
    model, ``GraphError`` for a value whose dtype cannot be inferred.
    """
    graph, _ = load_onnx_source(path, shapes=shapes, batch=batch, values=values)
    assert graph is not None
    return graph


def load_onnx_source(path: str | os.PathLike[str], *,
                     shapes: Mapping[str, Sequence[int]] | None = None,
                     batch: int | None = None,
                     with_graph: bool = True,
                     values: Mapping[str, Sequence[float]] | None = None
                     ) -> tuple[Graph | None, ModelProto]:
    """The ``Graph`` of the ONNX model at ``path`` (None unless ``with_graph``) and the
    model it was built from: bound, shapes resolved, shape arithmetic folded
    (``graph.onnx_shapes.prepare_onnx``). What runs the graph's ops (the runtime's model
    source, partitions) runs this model, whose nodes are the graph's ops."""
    file = os.fspath(path)
    source, upgraded_from = _read_onnx(file)
    check_placeable_io(source, file)
    model, info = prepare_onnx(source, file, shapes=shapes, batch=batch, values=values)
    if not with_graph:
        return None, model
    return graph_of_prepared(model, file, info, upgraded_from_opset=upgraded_from or 0), model


def graph_of_prepared(model: ModelProto, file: str, info: PrepareInfo, *,
                      upgraded_from_opset: int = 0) -> Graph:
    """The ``Graph`` of a model ``prepare_onnx`` made (``info`` is what it did;
    ``upgraded_from_opset``: the file's opset when the import upgraded it)."""
    problem = f" ({info.problem})" if info.problem else ""
    record = ImportRecord(info.shape_source, info.source_nodes, info.folded_nodes,
                          info.problem, upgraded_from_opset=upgraded_from_opset,
                          values=info.values, inlined_ifs=info.inlined_ifs)
    return _build_graph(model, file, info.env, problem, record)


def _build_graph(model: ModelProto, file: str, env: Mapping[str, int],
                 inference_problem: str, record: ImportRecord) -> Graph:
    graph = model.graph
    infos, consts, params, constant_nodes = _values(model, file, env)
    param_set = set(params)
    input_names = [vi.name for vi in graph.input if vi.name not in param_set]
    output_names = [vi.name for vi in graph.output]
    _solve_view_symbols(graph.node, infos, dict(env))
    ops, produced = _ops(model, file, _Ctx(infos, consts), param_set, input_names,
                         constant_nodes)
    defined = param_set | set(input_names) | set(produced)
    for o in output_names:
        if o not in defined:
            raise ModelFormatError(f"graph output {o!r} is not produced by any node "
                                   f"(truncated or corrupt model?)", file=file,
                                   place=f"output {o!r}")
    tensors = _tensors(infos, [*input_names, *params, *produced], produced, param_set,
                       input_names, set(output_names), file, inference_problem)
    return Graph.build(graph.name or os.path.splitext(os.path.basename(file))[0], tensors,
                       ops, input_names, output_names, file=file, record=record)


def _values(model: ModelProto, file: str, env: Mapping[str, int]
            ) -> tuple[dict[str, _TypeInfo], dict[str, TensorProto], list[str], set[int]]:
    """Every value's type (value infos, inputs, outputs, initializers, Constant nodes), the
    constant values, the parameters (initializers and Constant outputs, in order) and the
    indexes of the Constant nodes."""
    graph = model.graph
    infos: dict[str, _TypeInfo] = {}
    for vi in [*graph.value_info, *graph.input, *graph.output]:
        try:
            info = _tensor_type_info(vi.name, vi.type, env)
        except ModelFormatError as e:
            raise e.at(file=file) from None
        if info is not None and (vi.name not in infos or infos[vi.name].dtype is None):
            infos[vi.name] = info
    consts: dict[str, TensorProto] = {}
    params: list[str] = []
    for t in graph.initializer:
        if not t.name:
            raise ModelFormatError("an initializer has no name", file=file, place="initializer")
        if t.name not in consts:  # a set lookup: a list's would be quadratic in weights
            params.append(t.name)
        infos[t.name] = _TypeInfo(tuple(int(d) for d in t.dims), onnx_dtype(t.data_type),
                                  t.data_type)
        consts[t.name] = t
    for sp in graph.sparse_initializer:
        name = sp.values.name
        infos[name] = _TypeInfo(tuple(int(d) for d in sp.dims), onnx_dtype(sp.values.data_type),
                                sp.values.data_type)
        params.append(name)
    constant_nodes: set[int] = set()
    for i, node in enumerate(graph.node):
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and \
                len(node.output) == 1:
            info = _constant_node_info(node)
            if info is None:
                raise ModelFormatError("Constant node has no value attribute", file=file,
                                       place=f"node {node.name or node.output[0]!r}")
            infos[node.output[0]] = info
            value = constant_tensor(node)
            if value is not None:
                consts[node.output[0]] = value
            params.append(node.output[0])
            constant_nodes.add(i)
    return infos, consts, params, constant_nodes


def _ops(model: ModelProto, file: str, ctx: _Ctx, param_set: set[str], input_names: list[str],
         constant_nodes: set[int]) -> tuple[list[Op], dict[str, str]]:
    """The ops of the graph's nodes (Constant nodes left out) and each value's producer;
    ``ModelFormatError`` for a value read before it is defined or defined twice."""
    graph = model.graph
    # every value a node reads must be defined before it (ONNX requires topological order)
    defined = set(param_set) | set(input_names)
    ops: list[Op] = []
    used_names: set[str] = set()
    produced: dict[str, str] = {}
    for i, node in enumerate(graph.node):
        if i in constant_nodes:
            continue
        name = _op_name(node, i, used_names)
        for inp in node.input:
            if inp and inp not in defined:
                raise ModelFormatError(
                    f"input {inp!r} is not produced by any earlier node, initializer or graph "
                    f"input (truncated or corrupt model?)", file=file,
                    place=f"node {name!r} ({node.op_type})")
        extra = [r for r in subgraph_refs(node) if r in defined and r not in node.input]
        outputs = tuple(o for o in node.output if o)
        for o in outputs:
            if o in produced or o in param_set or o in input_names:
                raise ModelFormatError(f"value {o!r} is defined twice", file=file,
                                       place=f"node {name!r} ({node.op_type})")
            produced[o] = name
        defined.update(outputs)
        op = _make_op(node, name, (*node.input, *extra), outputs, ctx)
        if node.op_type in CONTROL_FLOW_OPS and node.domain in ("", "ai.onnx"):
            op = replace(op, attrs=Attrs.of(control_attrs(node, model, file, graph_of_prepared)))
        ops.append(op)
    return ops, produced


def _tensors(infos: Mapping[str, _TypeInfo], names: list[str], produced: Mapping[str, str],
             param_set: set[str], input_names: list[str], outputs_set: set[str], file: str,
             inference_problem: str) -> list[Tensor]:
    """The graph's tensors, each with its role; ``GraphError`` for one of unknown dtype."""
    tensors: list[Tensor] = []
    for tname in names:
        info = infos.get(tname)
        producer = produced.get(tname)
        place = f"node {producer!r}" if producer else f"tensor {tname!r}"
        if info is None or not info.elem_type:
            raise GraphError(f"the dtype of {tname!r} is unknown: shape inference gave it no "
                             f"type{inference_problem}", file=file, place=place)
        if info.dtype is None:
            raise GraphError(f"value {tname!r} has element type {_type_name(info.elem_type)}, "
                             f"which placewise cannot size", file=file, place=place)
        if tname in param_set:
            role = Role.PARAM
        elif tname in input_names:
            role = Role.INPUT
        elif tname in outputs_set:
            role = Role.OUTPUT
        else:
            role = Role.ACTIVATION
        tensors.append(Tensor(tname, info.shape, info.dtype, role=role))
    return tensors


_SIZE_PRESERVING = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}


def _solve_view_symbols(nodes: Iterable[NodeProto], infos: dict[str, _TypeInfo],
                        env: dict[str, int]) -> None:
    """Recover sizes ONNX inference left symbolic behind a reshape-like node.

    Such a node keeps the element count, so when its output has exactly one symbol its
    input lacks, and otherwise the same symbols as its input, that symbol is the quotient of
    the concrete parts. (This is what inference misses for a ``Reshape`` whose target shape
    is computed with ``Div`` on shape values.) ``infos`` is updated in place.
    """
    from collections import Counter

    solved = False
    for node in nodes:
        if node.op_type not in _SIZE_PRESERVING or node.domain not in ("", "ai.onnx"):
            continue
        if not node.input or not node.output:
            continue
        src, dst = infos.get(node.input[0]), infos.get(node.output[0])
        if src is None or dst is None or not src.rank_known or not dst.rank_known:
            continue
        in_dims = [eval_dim(d, env) for d in src.shape]
        out_dims = [eval_dim(d, env) for d in dst.shape]
        in_syms = Counter(d for d in in_dims if isinstance(d, str))
        out_syms = Counter(d for d in out_dims if isinstance(d, str))
        fresh = [d for d in out_syms if d not in in_syms]
        if len(fresh) != 1 or out_syms[fresh[0]] != 1 or not fresh[0].isidentifier():
            continue
        del out_syms[fresh[0]]
        if out_syms != in_syms:
            continue
        known = math.prod(d for d in out_dims if isinstance(d, int))
        total = math.prod(d for d in in_dims if isinstance(d, int))
        if known > 0 and total % known == 0:
            env[fresh[0]] = total // known
            solved = True
    if not solved:
        return
    for name, info in list(infos.items()):
        shape = tuple(eval_dim(d, env) for d in info.shape)
        if shape != info.shape:
            infos[name] = _TypeInfo(shape, info.dtype, info.elem_type, info.rank_known)


def _op_name(node: NodeProto, index: int, used: set[str]) -> str:
    base = node.name or f"{node.op_type}_{index}"
    name, k = base, 1
    while name in used:
        name = f"{base}_{k}"
        k += 1
    used.add(name)
    return name
