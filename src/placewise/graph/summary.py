"""Graph summary behind ``placewise inspect``: ops, tensors, FLOPs, bytes, params, coverage.

>>> from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
>>> from placewise.units import DType
>>> g = Graph.build("t", [Tensor("x", (2, 4), DType.FP32, role=Role.INPUT),
...                       Tensor("w", (4, 3), DType.FP32, role=Role.PARAM),
...                       Tensor("y", (2, 3), DType.FP32, role=Role.OUTPUT)],
...                 [Op("mm", OpKind.MATMUL, ("x", "w"), ("y",))])
>>> s = summarize(g)
>>> s["ops"], s["flops"], s["param_bytes"], s["uncounted"]
(1, 48.0, 48, [])
"""

from __future__ import annotations

from typing import Any

from placewise.graph.count import count_graph
from placewise.graph.fuse import fuse
from placewise.graph.ir import CONTROL_FLOW_KINDS, Graph, Op, OpCategory, OpKind, Role

__all__ = ["control_flow_note", "summarize"]


def control_flow_note(op: Op) -> str:
    """How a kept control-flow op (``OpKind.IF``/``LOOP``/``SCAN``) is costed, in words,
    saying when its trip count is a bound.

    >>> from placewise.graph.ir import Attrs
    >>> control_flow_note(Op("l", OpKind.LOOP, (), (), Attrs.of(trips=1,
    ...     trips_bound="at least", body_counted=True)))
    'loop l: trip count unknown; costed as 1 iteration, a lower bound (give its count with --value)'
    """
    a = op.attrs
    what = f"{op.kind.value} {op.name}"
    if not a.get("body_counted", False):
        why = "; ".join(str(x) for x in a.get("body_uncounted", ()) or ()) or "no rule"  # type: ignore[union-attr]
        return f"{what}: its subgraph is not fully counted ({why})"
    if op.kind is OpKind.IF:
        return (f"{what}: condition unknown; costed as its costlier ({a.get('branch')}) "
                f"branch, the interval reaching down to the other (give the inputs that "
                f"decide it with --value to cost the branch taken)")
    trips, bound = a.get("trips", 1), a.get("trips_bound", "exact")
    if bound == "at least":
        return (f"{what}: trip count unknown; costed as {trips} iteration, a lower bound "
                f"(give its count with --value)")
    if bound == "at most":
        return f"{what}: at most {trips} iterations, costed as {trips} (an upper bound)"
    return f"{what}: {trips} iterations"


def summarize(graph: Graph) -> dict[str, Any]:
    """Everything ``inspect`` reports, as plain JSON-ready data (units in the keys)."""
    counts = count_graph(graph)
    view_outputs = {
        t for op in graph.ops if op.kind.category is OpCategory.VIEW for t in op.outputs
    }
    produced = [t for t in graph.tensors if t.role in (Role.ACTIVATION, Role.OUTPUT)]
    activation_bytes = sum(t.nbytes for t in produced if t.name not in view_outputs)
    by_kind = {
        kind.value: {"count": kc.count, "flops": kc.flops, "bytes_moved": kc.bytes_moved}
        for kind, kc in sorted(counts.by_kind.items(), key=lambda kv: kv[0].value)
    }
    partition = fuse(graph)
    patterns: dict[str, int] = {}
    for r in partition.regions:
        patterns[r.pattern] = patterns.get(r.pattern, 0) + 1
    return {
        "name": graph.name,
        "fingerprint": graph.fingerprint(),
        "ops": len(graph.ops),
        "tensors": len(graph.tensors),
        "flops": counts.flops,
        "bytes_moved": counts.bytes_moved,
        "params": sum(t.numel for t in graph.params),
        "param_bytes": graph.param_bytes,
        "activation_bytes": activation_bytes,
        "inputs": [_tensor_json(graph, n) for n in graph.inputs],
        "outputs": [_tensor_json(graph, n) for n in graph.outputs],
        "by_kind": by_kind,
        "uncounted": list(counts.uncounted),
        "coverage": counts.coverage,
        "regions": len(partition.regions),
        "regions_by_pattern": dict(sorted(patterns.items())),
        "shape_source": graph.record.shape_source or None,
        "source_nodes": graph.record.source_nodes or None,
        "folded_nodes": graph.record.folded_nodes,
        "upgraded_from_opset": graph.record.upgraded_from_opset or None,
        "values": list(graph.record.values),
        "inlined_ifs": graph.record.inlined_ifs,
        "control_flow": [control_flow_note(op) for op in graph.ops
                         if op.kind in CONTROL_FLOW_KINDS],
    }


def _tensor_json(graph: Graph, name: str) -> dict[str, Any]:
    t = graph.tensor(name)
    return {"name": t.name, "shape": list(t.shape), "dtype": t.dtype.value,
            "bytes": t.nbytes if t.is_concrete else None}
