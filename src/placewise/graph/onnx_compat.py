"""What the ONNX importer does to files from other exporters before building a graph.

- **old opsets**: a default-domain opset below ``MIN_OPSET`` is upgraded with
  ``onnx.version_converter`` (``upgrade_opset``; the graph's ``ImportRecord`` says from
  which); a node the converter cannot upgrade is named in the error.
- **"any size" dims**: a negative ``dim_value`` (paddle2onnx's ``-1``) and an anonymous
  ``dim_param`` (``?``) become free dims, each its own unknown (``free_anonymous_dims``).
- **placeable inputs and outputs**: a string, sequence or map input or output is refused
  naming it (``check_placeable_io``).

>>> import onnx
>>> from onnx import TensorProto, helper
>>> g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, "?", "?"])],
...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
>>> m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
>>> free_anonymous_dims(m)
>>> [d.WhichOneof("value") for d in m.graph.input[0].type.tensor_type.shape.dim]
[None, None, None]
>>> upgraded, was = upgrade_opset(m, "m.onnx")
>>> was, upgraded.opset_import[0].version
(11, 13)
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from placewise.errors import GraphError, ModelFormatError
from placewise.graph.onnx_kinds import _type_name, onnx_dtype
from placewise.io import quiet, shorten

if TYPE_CHECKING:
    from onnx import ModelProto

__all__ = ["MIN_OPSET", "check_placeable_io", "default_opset", "free_anonymous_dims",
           "upgrade_opset"]

#: the oldest default-domain opset placewise computes on: older files are upgraded to it
MIN_OPSET = 13


def default_opset(model: ModelProto, path: str) -> int | None:
    """The default-domain opset (None for a model with no default-domain node and no such
    import: an ``ai.onnx.ml``-only model)."""
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if not versions:
        if all(n.domain not in ("", "ai.onnx") for n in model.graph.node):
            return None
        raise ModelFormatError("the model imports no default-domain (ai.onnx) opset",
                               file=path, place="opset_import")
    return int(versions[0])


def upgrade_opset(model: ModelProto, path: str, to: int = MIN_OPSET
                  ) -> tuple[ModelProto, int | None]:
    """``model`` converted to opset ``to`` (default ``MIN_OPSET``) with
    ``onnx.version_converter`` when its default-domain opset is older, and the opset it had
    (None when it needed nothing).

    The converter keeps each node's outputs; a node it rewrites loses its name, which is
    given back (the node that makes the same first output), so provenance survives. A
    conversion that fails is ``ModelFormatError`` naming the node it fails on."""
    version = default_opset(model, path)
    if version is None or version >= to:
        return model, None
    from onnx import version_converter

    names = {n.output[0]: n.name for n in model.graph.node if n.output and n.name}
    try:
        with quiet():
            upgraded = version_converter.convert_version(model, to)
    except Exception as e:
        raise ModelFormatError(
            f"opset {version} could not be upgraded to {to} with "
            f"onnx.version_converter: {shorten(str(e), 160)}", file=path,
            place=_failing_node(model, version, to)) from None
    used = {n.name for n in upgraded.graph.node if n.name}
    for node in upgraded.graph.node:
        name = names.get(node.output[0]) if node.output else None
        if not node.name and name is not None and name not in used:
            node.name = name
            used.add(name)
    return upgraded, version


def _failing_node(model: ModelProto, version: int, to: int = MIN_OPSET) -> str:
    """The first node the version converter cannot upgrade alone ("opset_import" when each
    converts on its own): each node in a model of its own, its inputs typeless graph
    inputs."""
    import onnx
    from onnx import helper, version_converter

    for i, node in enumerate(model.graph.node):
        ins = [onnx.ValueInfoProto(name=n) for n in dict.fromkeys(node.input) if n]
        outs = [onnx.ValueInfoProto(name=n) for n in node.output if n]
        one = helper.make_model(helper.make_graph([node], "one", ins, outs),
                                opset_imports=list(model.opset_import),
                                ir_version=model.ir_version)
        try:
            with quiet():
                version_converter.convert_version(one, to)
        except Exception:
            return f"node {node.name or f'{node.op_type}_{i}'!r} ({node.op_type}, opset " \
                   f"{version})"
    return "opset_import"


def _anonymous(dim_param: str) -> bool:
    """Whether a dim_param names no symbol: ``?``, ``-1`` and other text without a letter,
    digit or underscore (exporters write these for "any size")."""
    return not re.search(r"\w", dim_param) or dim_param.strip() == "-1"


def free_anonymous_dims(model: ModelProto) -> None:
    """Make every top-level dim that an exporter wrote as "any size" a free dim (neither
    value nor name): a negative ``dim_value`` (paddle2onnx's ``-1``) and an anonymous
    ``dim_param`` (``?``). Two such dims are two unknown sizes, never one symbol; each gets
    a name of its own where the graph is built (``VALUE_d<i>``)."""
    g = model.graph
    for vi in [*g.input, *g.output, *g.value_info]:
        if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
            continue
        for d in vi.type.tensor_type.shape.dim:
            if (d.HasField("dim_value") and d.dim_value < 0) or \
                    (d.HasField("dim_param") and _anonymous(d.dim_param)):
                d.Clear()


def check_placeable_io(model: ModelProto, file: str) -> None:
    """Every graph input and output must be a tensor of a type placewise sizes: a string,
    map or sequence (a tokenizer's text, a list of tensors, a classifier's ZipMap) cannot
    be fed, sized or placed, so the model is refused naming that input or output."""
    inits = {t.name for t in model.graph.initializer}
    for vi, role in [*((v, "input") for v in model.graph.input),
                     *((v, "output") for v in model.graph.output)]:
        if vi.name in inits or not vi.type.WhichOneof("value"):
            continue
        tp = vi.type
        while tp.WhichOneof("value") == "optional_type":
            tp = tp.optional_type.elem_type
        which = tp.WhichOneof("value")
        if which != "tensor_type":
            what = {"sequence_type": "a sequence", "map_type": "a map",
                    "sparse_tensor_type": "a sparse tensor"}.get(which or "", "not a tensor")
            raise GraphError(f"is {what}; placewise places models whose {role}s are dense "
                             f"tensors", file=file, place=f"{role} {vi.name!r}")
        elem = tp.tensor_type.elem_type
        if elem and onnx_dtype(elem) is None:
            raise GraphError(f"has element type {_type_name(elem)}, which placewise cannot "
                             f"size or place (it places models whose {role}s are numeric "
                             f"tensors)", file=file, place=f"{role} {vi.name!r}")
