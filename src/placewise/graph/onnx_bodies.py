"""The work of control flow kept as one op (``If``, ``Loop``, ``Scan``): each subgraph is
made a model of its own, prepared (``graph.onnx_shapes.prepare_onnx``), imported by the
importer that asks (``graph.onnx_import`` hands over ``graph_of_prepared``: a body may hold
control flow again) and counted with the graph count rules; ``control_attrs`` gives the op
its work per iteration and the iterations (the attributes ``OpKind.IF``/``LOOP``/``SCAN``
document).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from placewise.errors import InputError, PlacewiseError
from placewise.graph.count import count_graph
from placewise.graph.ir import CONTROL_FLOW_KINDS, Graph, OpKind
from placewise.graph.onnx_control import _const_bool, _constant_values, _outer_refs
from placewise.graph.onnx_shapes import FOLD_MAX_BYTES, PrepareInfo, prepare_onnx

if TYPE_CHECKING:
    from onnx import GraphProto, ModelProto, NodeProto, TensorProto

__all__ = ["BodyImport", "control_attrs"]

#: how a prepared subgraph model becomes a ``Graph`` (``onnx_import.graph_of_prepared``)
BodyImport = Callable[["ModelProto", str, PrepareInfo], Graph]


def _concrete(tp: Any) -> bool:
    return (tp.WhichOneof("value") == "tensor_type" and tp.tensor_type.HasField("shape")
            and all(d.HasField("dim_value") for d in tp.tensor_type.shape.dim))


def _body_model(body: GraphProto, outer: ModelProto, input_types: Sequence[Any | None]
                ) -> ModelProto:
    """``body`` as a model of its own: its inputs (typed by ``input_types`` where the body
    leaves them open) and the outer values it reads as inputs, small outer constants as
    initializers (so shape arithmetic on them folds)."""
    from onnx import GraphProto as _GraphProto
    from onnx import helper

    g = _GraphProto()
    g.CopyFrom(body)
    for vi, tp in zip(g.input, input_types, strict=False):
        if tp is not None and not _concrete(vi.type):
            vi.type.CopyFrom(tp)
    types = {vi.name: vi.type for vi in [*outer.graph.input, *outer.graph.value_info,
                                         *outer.graph.output]}
    consts = _constant_values(outer.graph)
    for name in _outer_refs(body):
        t = consts.get(name)
        if t is not None and len(t.raw_data) + 8 * sum(
                len(getattr(t, f)) for f in ("float_data", "int32_data", "int64_data",
                                             "double_data", "uint64_data")) <= FOLD_MAX_BYTES:
            init = g.initializer.add()
            init.CopyFrom(t)
            init.name = name
        elif t is not None:
            g.input.append(helper.make_tensor_value_info(name, t.data_type, list(t.dims)))
        elif name in types:
            vi = g.input.add()
            vi.name = name
            vi.type.CopyFrom(types[name])
        else:
            raise InputError(f"reads outer value {name!r}, whose type is not known",
                             place=f"subgraph {body.name!r}")
    return helper.make_model(g, opset_imports=list(outer.opset_import),
                             ir_version=outer.ir_version)


def _body_work(body: GraphProto, outer: ModelProto, file: str, import_body: BodyImport,
               input_types: Sequence[Any | None] = ()) -> dict[str, Any]:
    """The work of one run of ``body``, counted by the graph count rules on the body
    imported as a model (nested control flow included)."""
    try:
        model, info = prepare_onnx(_body_model(body, outer, input_types), file)
        graph = import_body(model, file, info)
        count = count_graph(graph)
    except PlacewiseError as exc:
        why = getattr(exc, "problem", str(exc))
        return {"body_counted": False, "body_uncounted": (f"subgraph: {why}"[:200],)}
    by: dict[str, int] = {}
    read = written = kernels = 0
    for op in graph.ops:
        c = count.per_op[op.name]
        read += c.bytes_read
        written += c.bytes_written
        for d, b in c.bytes_by_dtype:
            by[d.value] = by.get(d.value, 0) + b
        if op.kind in CONTROL_FLOW_KINDS:
            inner = op.attrs.get("body_kernels", 1)
            trips = op.attrs.get("trips", 1)
            kernels += (inner if isinstance(inner, int) else 1) * (
                trips if isinstance(trips, int) else 1)
        elif not c.is_view and op.kind not in (OpKind.SHAPE, OpKind.CONSTANT):
            kernels += 1
    names = sorted(by)
    return {"body_flops": float(count.flops), "body_bytes_read": read,
            "body_bytes_written": written, "body_dtypes": tuple(names),
            "body_dtype_bytes": tuple(by[n] for n in names), "body_kernels": kernels,
            "body_counted": count.coverage == 1.0, "body_uncounted": tuple(count.uncounted)}


def _subgraph(node: NodeProto, name: str) -> GraphProto | None:
    for attr in node.attribute:
        if attr.name == name and attr.HasField("g"):
            return attr.g
    return None


def _if_attrs(node: NodeProto, outer: ModelProto, file: str, import_body: BodyImport
              ) -> dict[str, Any]:
    """Both branches counted; the costlier is the central estimate, the other the low end."""
    works = {}
    for label in ("then", "else"):
        sub = _subgraph(node, f"{label}_branch")
        if sub is None:
            return {"body_counted": False, "body_uncounted": (f"no {label}_branch",)}
        works[label] = _body_work(sub, outer, file, import_body)
    if not all(w["body_counted"] for w in works.values()):
        bad = next(w for w in works.values() if not w["body_counted"])
        return {**bad, "trips": 1, "trips_bound": "exact"}

    def size(w: dict[str, Any]) -> tuple[float, int]:
        return w["body_flops"], w["body_bytes_read"] + w["body_bytes_written"]

    big, small = sorted(works, key=lambda k: size(works[k]), reverse=True)
    (f_big, b_big), (f_small, b_small) = size(works[big]), size(works[small])
    shares = [x / y for x, y in ((f_small, f_big), (b_small, b_big)) if y > 0]
    return {**works[big], "branch": big, "low_share": min(shares, default=1.0), "trips": 1,
            "trips_bound": "exact"}


def _loop_trips(node: NodeProto, body: GraphProto, consts: Mapping[str, TensorProto]
                ) -> tuple[int, str]:
    """Iterations of a ``Loop``: its max count M when constant ("exact" when nothing else
    can stop it, else "at most"); 1 when M is unknown ("at least")."""
    from onnx import numpy_helper

    m_name = node.input[0] if node.input else ""
    if not m_name or m_name not in consts:
        return 1, "at least"
    try:
        m = numpy_helper.to_array(consts[m_name])
    except Exception:
        return 1, "at least"
    if m.size != 1 or m.dtype.kind not in "iu":  # M is an int64 scalar; anything else:
        return 1, "at least"                     # onnxruntime refuses it at run time
    trips = int(m.reshape(-1)[0])
    trips = max(0, trips)
    cond_in = body.input[1].name if len(body.input) > 1 else ""
    cond_out = body.output[0].name if body.output else ""
    inner = _constant_values(body)
    passes = cond_out == cond_in or any(
        n.op_type == "Identity" and list(n.output) == [cond_out] and list(n.input) == [cond_in]
        for n in body.node)
    const_true = _const_bool(cond_out, inner) is True
    outer_cond = node.input[1] if len(node.input) > 1 else ""
    starts_true = not outer_cond or _const_bool(outer_cond, consts) is True
    exact = starts_true and (passes or const_true)
    return trips, "exact" if exact else "at most"


def control_attrs(node: NodeProto, outer: ModelProto, file: str, import_body: BodyImport
                  ) -> dict[str, Any]:
    """The attributes of a kept control-flow node's op (``OpKind.IF``/``LOOP``/``SCAN``,
    documented on ``OpKind``): its subgraph's work per iteration and the iterations, each
    body imported by ``import_body`` (the importer's ``graph_of_prepared``) and counted. A
    node whose attributes are malformed is left uncounted, saying so."""
    try:
        return _control_attrs(node, outer, file, import_body)
    except (TypeError, ValueError, AttributeError, IndexError, KeyError) as exc:
        return {"body_counted": False,
                "body_uncounted": (f"malformed {node.op_type}: {type(exc).__name__}: "
                                   f"{exc}"[:200],)}


def _control_attrs(node: NodeProto, outer: ModelProto, file: str, import_body: BodyImport
                   ) -> dict[str, Any]:
    types = {vi.name: vi.type for vi in [*outer.graph.input, *outer.graph.value_info,
                                         *outer.graph.output]}
    if node.op_type == "If":
        return _if_attrs(node, outer, file, import_body)
    body = _subgraph(node, "body")
    if body is None:
        return {"body_counted": False, "body_uncounted": ("no body",)}
    consts = _constant_values(outer.graph)
    if node.op_type == "Loop":
        trips, bound = _loop_trips(node, body, consts)
        carried = [types.get(x) for x in node.input[2:]]
        work = _body_work(body, outer, file, import_body, [None, None, *carried])
        return {**work, "trips": trips, "trips_bound": bound}
    return _scan_attrs(node, body, outer, file, types, import_body)


def _scan_attrs(node: NodeProto, body: GraphProto, outer: ModelProto, file: str,
                types: Mapping[str, Any], import_body: BodyImport) -> dict[str, Any]:
    """A ``Scan`` runs once per slice along its first scan input's axis."""
    from onnx import helper

    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute
             if a.name in ("num_scan_inputs", "scan_input_axes")}
    n_scan = int(attrs.get("num_scan_inputs", 0))
    n_state = len(node.input) - n_scan
    axes = list(attrs.get("scan_input_axes", [])) or [0] * n_scan
    input_types: list[Any | None] = [types.get(x) for x in node.input[:n_state]]
    trips: int | None = None
    for x, axis in zip(node.input[n_state:], axes, strict=False):
        tp = types.get(x)
        if tp is None or not _concrete(tp):
            input_types.append(None)
            continue
        dims = [int(d.dim_value) for d in tp.tensor_type.shape.dim]
        axis = axis + len(dims) if axis < 0 else axis
        if not 0 <= axis < len(dims):
            input_types.append(None)
            continue
        if trips is None:
            trips = dims[axis]
        del dims[axis]
        input_types.append(helper.make_tensor_type_proto(tp.tensor_type.elem_type, dims))
    work = _body_work(body, outer, file, import_body, input_types)
    if trips is None:
        return {**work, "trips": 1, "trips_bound": "at least"}
    return {**work, "trips": trips, "trips_bound": "exact"}
