"""The torch backend of the op-level debugging mode: a ``torch.export`` program as an *fx
package* (the graph as JSON, the weights as ``.npy`` files, nothing pickled).

A worker of ``--granularity op`` rebuilds the program from the package in a fraction of a
second, without the ``torch.export`` deserializer (which imports ``torch._dynamo``: seconds per
worker). The partitioned runtime never uses it: torch sources reach it as ONNX partitions
(``runtime.compile``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["Unpackable", "pack_fx", "unpack_fx"]



class Unpackable(Exception):
    """A program the fx package cannot express (falls back to .pt2)."""


def _enc_target(target: Any) -> str:
    import operator

    if target is operator.getitem:
        return "operator.getitem"
    schema = getattr(target, "_schema", None)
    overload = getattr(target, "_overloadname", None)
    if schema is None or overload is None:
        raise Unpackable(f"target {target!r}")
    return f"{schema.name}.{overload}"


def _dec_target(text: str) -> Any:
    import operator

    import torch

    if text == "operator.getitem":
        return operator.getitem
    qual, _, overload = text.rpartition(".")
    ns, _, name = qual.partition("::")
    return getattr(getattr(getattr(torch.ops, ns), name), overload)


def _enc_arg(v: Any) -> Any:
    import torch
    from torch.fx import Node

    if isinstance(v, Node):
        return {"n": v.name}
    if v is None or isinstance(v, bool | int | str):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else {"f": repr(v)}
    if isinstance(v, list):
        return {"l": [_enc_arg(x) for x in v]}
    if isinstance(v, tuple):
        return {"t": [_enc_arg(x) for x in v]}
    if isinstance(v, dict):
        return {"d": {str(k): _enc_arg(x) for k, x in v.items()}}
    if isinstance(v, torch.dtype):
        return {"dtype": str(v).removeprefix("torch.")}
    if isinstance(v, torch.device):
        return {"device": str(v)}
    if isinstance(v, torch.layout):
        return {"layout": str(v).removeprefix("torch.")}
    if isinstance(v, torch.memory_format):
        return {"memory_format": str(v).removeprefix("torch.")}
    raise Unpackable(f"argument {v!r}")


def _dec_arg(v: Any, nodes: Mapping[str, Any]) -> Any:
    import torch

    if not isinstance(v, dict):
        return v
    if "n" in v:
        return nodes[v["n"]]
    if "f" in v:
        return float(v["f"])
    if "l" in v:
        return [_dec_arg(x, nodes) for x in v["l"]]
    if "t" in v:
        return tuple(_dec_arg(x, nodes) for x in v["t"])
    if "d" in v:
        return {k: _dec_arg(x, nodes) for k, x in v["d"].items()}
    if "dtype" in v:
        return getattr(torch, v["dtype"])
    if "device" in v:
        return torch.device(v["device"])
    if "layout" in v:
        return getattr(torch, v["layout"])
    return getattr(torch, v["memory_format"])


def pack_fx(ep: Any, folder: str) -> None:
    """Write ``ep`` (an ``ExportedProgram``) as an fx package into ``folder``: the nodes,
    the input signature and the weights (one ``.npy`` per tensor, ``allow_pickle=False``).
    Raises ``Unpackable`` for what it cannot express (callers fall back to ``.pt2``)."""
    import torch

    os.makedirs(folder, exist_ok=True)
    nodes = []
    for n in ep.graph.nodes:
        if n.op not in ("placeholder", "call_function", "output"):
            raise Unpackable(f"fx node {n.name!r} is a {n.op}")
        nodes.append({"name": n.name, "op": n.op,
                      "target": _enc_target(n.target) if n.op == "call_function" else "",
                      "args": _enc_arg(tuple(n.args)), "kwargs": _enc_arg(dict(n.kwargs))})
    state = ep.state_dict
    consts = getattr(ep, "constants", {}) or {}
    specs = []
    for i, spec in enumerate(ep.graph_signature.input_specs):
        name = getattr(spec.arg, "name", None)
        entry: dict[str, Any] = {"arg": name, "kind": spec.kind.name, "target": spec.target}
        value = None
        if spec.target is not None:
            value = state[spec.target] if spec.target in state else consts.get(spec.target)
        if isinstance(value, torch.Tensor):
            t = value.detach().cpu().contiguous()
            if t.dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2) or \
                    t.is_quantized:
                raise Unpackable(f"weight of dtype {t.dtype}")
            fname = f"w{i}.npy"
            np.save(os.path.join(folder, fname), t.numpy(), allow_pickle=False)
            entry["file"] = fname
            entry["param"] = spec.target in state
        specs.append(entry)
    with open(os.path.join(folder, "program.json"), "w", encoding="utf-8") as f:
        json.dump({"nodes": nodes, "inputs": specs}, f)


class _PackedProgram:
    """What ``FxProgram`` reads from an ``ExportedProgram``, rebuilt from an fx package."""

    def __init__(self, graph: Any, input_specs: list[Any], state_dict: dict[str, Any],
                 constants: dict[str, Any]) -> None:
        from types import SimpleNamespace

        self.graph = graph
        self.graph_signature = SimpleNamespace(input_specs=input_specs)
        self.state_dict = state_dict
        self.constants = constants
        self.graph_module = SimpleNamespace()


def unpack_fx(folder: str) -> _PackedProgram:
    """The program of an fx package (see ``pack_fx``)."""
    from types import SimpleNamespace

    import torch
    from torch.export.graph_signature import InputKind

    from placewise.io import load_json  # the input boundary: regular file, depth, numbers

    data = load_json(os.path.join(folder, "program.json"), what="fx package program")
    g = torch.fx.Graph()
    made: dict[str, Any] = {}
    for nd in data["nodes"]:
        if nd["op"] == "placeholder":
            node = g.placeholder(nd["name"])
        elif nd["op"] == "output":
            (value,) = _dec_arg(nd["args"], made)
            node = g.output(value)
        else:
            node = g.create_node("call_function", _dec_target(nd["target"]),
                                 _dec_arg(nd["args"], made), _dec_arg(nd["kwargs"], made),
                                 name=nd["name"])
        node.name = nd["name"]  # fx renames names that shadow builtins ("input")
        made[nd["name"]] = node
    specs = []
    state: dict[str, Any] = {}
    consts: dict[str, Any] = {}
    for entry in data["inputs"]:
        if "file" in entry:
            arr = np.load(os.path.join(folder, entry["file"]), allow_pickle=False)
            (state if entry.get("param", True) else consts)[entry["target"]] = \
                torch.from_numpy(arr)
        specs.append(SimpleNamespace(arg=SimpleNamespace(name=entry["arg"]),
                                     kind=InputKind[entry["kind"]], target=entry["target"]))
    return _PackedProgram(g, specs, state, consts)


