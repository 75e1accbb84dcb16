"""Reusable hypothesis strategies: random valid workload graphs and task-graph dicts.

``random_graphs()`` draws a ``Graph`` built op by op from a pool of available tensors, so it
is a DAG by construction, with concrete, mutually consistent shapes (every op can be
counted), mixed op kinds (contractions, elementwise chains, norms, reductions, views, data
movement, the decomposed attention core, unknown ops), branches, joins and graph outputs
that are also consumed. ``task_graph_dicts()`` draws task-graph JSON documents (see
``placewise.graph.taskgraph``) that load without error.

Use from any test module::

    from tests.strategies import random_graphs

    @given(random_graphs(max_ops=10))
    def test_something(g): ...
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from hypothesis import strategies as st

from placewise.graph.ir import Attrs, Graph, Op, OpKind, Provenance, Role, Tensor
from placewise.units import DType

__all__ = ["MOTIFS", "random_graphs", "task_graph_dicts"]

MOTIFS = ("unary", "binary", "bias", "matmul", "linear", "softmax", "layer_norm", "reduce",
          "reshape", "transpose", "concat", "split", "attention", "unknown")
_UNARY = (OpKind.RELU, OpKind.GELU, OpKind.TANH, OpKind.EXP, OpKind.NEG, OpKind.SIGMOID,
          OpKind.SILU)
_BINARY = (OpKind.ADD, OpKind.MUL, OpKind.SUB, OpKind.MAXIMUM)


class _Builder:
    def __init__(self, dtype: DType) -> None:
        self.dtype = dtype
        self.tensors: dict[str, Tensor] = {}
        self.ops: list[Op] = []
        self.pool: list[str] = []  # activations / inputs available to later ops

    def tensor(self, shape: tuple[int, ...], role: Role = Role.ACTIVATION,
               dtype: DType | None = None) -> str:
        name = f"t{len(self.tensors)}"
        self.tensors[name] = Tensor(name, shape, dtype or self.dtype, role=role)
        if role in (Role.ACTIVATION, Role.INPUT):
            self.pool.append(name)
        return name

    def param(self, shape: tuple[int, ...]) -> str:
        name = f"p{len(self.tensors)}"
        self.tensors[name] = Tensor(name, shape, self.dtype, role=Role.PARAM)
        return name

    def op(self, kind: OpKind, inputs: tuple[str, ...], outputs: tuple[str, ...],
           attrs: Attrs | None = None, source_op: str = "") -> str:
        name = f"{kind.value}_{len(self.ops)}"
        self.ops.append(Op(name, kind, inputs, outputs, attrs or Attrs(),
                           Provenance(source=name, source_op=source_op)))
        return outputs[0] if outputs else ""

    def shape(self, t: str) -> tuple[int, ...]:
        return tuple(int(d) for d in self.tensors[t].shape)


_dims = st.integers(1, 4)


@st.composite
def random_graphs(draw: st.DrawFn, min_ops: int = 1, max_ops: int = 12, *,
                  motifs: tuple[str, ...] = MOTIFS, allow_outputs_consumed: bool = True
                  ) -> Graph:
    """A random valid ``Graph`` with between ``min_ops`` and ``max_ops`` motifs (a motif adds
    one to four ops), built only from ``motifs`` (names in ``MOTIFS``)."""
    dtype = draw(st.sampled_from([DType.FP32, DType.FP32, DType.FP16, DType.BF16]))
    b = _Builder(dtype)
    for _ in range(draw(st.integers(1, 3))):
        b.tensor((draw(_dims), draw(_dims)), Role.INPUT)
    n_motifs = draw(st.integers(min_ops, max_ops))
    for _ in range(n_motifs):
        # prefer the newest tensor (chains), sometimes any (branches and joins)
        newest = draw(st.booleans())
        x = b.pool[-1] if newest else b.pool[draw(st.integers(0, len(b.pool) - 1))]
        sx = b.shape(x)
        motif = draw(st.sampled_from(motifs))
        if motif == "unary":
            b.op(draw(st.sampled_from(_UNARY)), (x,), (b.tensor(sx),))
        elif motif == "binary":
            same = [t for t in b.pool if t != x and b.shape(t) == sx]
            y = x
            if len(same) > 0 and draw(st.booleans()):
                y = draw(st.sampled_from(same))
            b.op(draw(st.sampled_from(_BINARY)), (x, y), (b.tensor(sx),))
        elif motif == "bias":
            b.op(OpKind.ADD, (x, b.param(sx[-1:])), (b.tensor(sx),))
        elif motif == "matmul":
            n = draw(_dims)
            b.op(OpKind.MATMUL, (x, b.param((sx[-1], n))), (b.tensor((*sx[:-1], n)),))
        elif motif == "linear":
            n = draw(_dims)
            ins: tuple[str, ...] = (x, b.param((n, sx[-1])))
            if draw(st.booleans()):
                ins = (*ins, b.param((n,)))
            b.op(OpKind.LINEAR, ins, (b.tensor((*sx[:-1], n)),))
        elif motif == "softmax":
            b.op(OpKind.SOFTMAX, (x,), (b.tensor(sx),), Attrs.of(axis=-1))
        elif motif == "layer_norm":
            b.op(OpKind.LAYER_NORM, (x, b.param(sx[-1:]), b.param(sx[-1:])), (b.tensor(sx),),
                 Attrs.of(axis=-1, epsilon=1e-5))
        elif motif == "reduce":
            b.op(OpKind.REDUCE_SUM, (x,), (b.tensor((*sx[:-1], 1)),),
                 Attrs.of(axes=(-1,), keepdims=True))
        elif motif == "reshape":
            new = (math.prod(sx),) if len(sx) > 1 else (1, sx[0])
            b.op(OpKind.RESHAPE, (x,), (b.tensor(new),))
        elif motif == "transpose":
            if len(sx) >= 2:
                perm = (*range(len(sx) - 2), len(sx) - 1, len(sx) - 2)
                b.op(OpKind.TRANSPOSE, (x,), (b.tensor(tuple(sx[i] for i in perm)),),
                     Attrs.of(perm=perm))
            else:
                b.op(OpKind.IDENTITY, (x,), (b.tensor(sx),))
        elif motif == "concat":
            rest = [t for t in b.pool if b.shape(t)[1:] == sx[1:] and len(b.shape(t)) == len(sx)]
            y = draw(st.sampled_from(rest))
            b.op(OpKind.CONCAT, (x, y), (b.tensor((sx[0] + b.shape(y)[0], *sx[1:])),),
                 Attrs.of(axis=0))
        elif motif == "split":
            if sx[0] >= 2:
                k = draw(st.integers(1, sx[0] - 1))
                b.op(OpKind.SPLIT, (x,), (b.tensor((k, *sx[1:])), b.tensor((sx[0] - k, *sx[1:]))),
                     Attrs.of(axis=0))
            else:
                b.op(OpKind.DROPOUT, (x,), (b.tensor(sx),))
        elif motif == "attention":
            # scores = x @ K^T; scaled; optionally masked; softmax; @ V
            s, ev = draw(_dims), draw(_dims)
            lead = sx[:-1]
            scores = b.op(OpKind.MATMUL, (x, b.param((sx[-1], s))), (b.tensor((*lead, s)),))
            scores = b.op(OpKind.MUL, (scores, b.param(())), (b.tensor((*lead, s)),))
            if draw(st.booleans()):
                scores = b.op(OpKind.ADD, (scores, b.param((s,))), (b.tensor((*lead, s)),))
            probs = b.op(OpKind.SOFTMAX, (scores,), (b.tensor((*lead, s)),), Attrs.of(axis=-1))
            b.op(OpKind.MATMUL, (probs, b.param((s, ev))), (b.tensor((*lead, ev)),))
        elif motif == "unknown":
            args = (x,) if draw(st.booleans()) else (x, b.pool[0])
            b.op(OpKind.UNKNOWN, args, (b.tensor((draw(_dims),)),),
                 source_op=draw(st.sampled_from(["onnx::NonMaxSuppression", "custom::Op"])))
        else:
            raise ValueError(f"unknown motif {motif!r}")
    consumed = {t for o in b.ops for t in o.inputs}
    produced = {t for o in b.ops for t in o.outputs}
    tensors = []
    for t in b.tensors.values():
        if t.name in produced and (
                t.name not in consumed
                or (allow_outputs_consumed and draw(st.integers(0, 9)) == 0)):
            t = replace(t, role=Role.OUTPUT)
        tensors.append(t)
    return Graph.build("random", tensors, b.ops, require_concrete=True)


@st.composite
def task_graph_dicts(draw: st.DrawFn, min_tasks: int = 1, max_tasks: int = 12,
                     devices: tuple[str, ...] = ("cpu", "gpu")) -> dict[str, Any]:
    """A valid task-graph document: edges only go from lower to higher task index."""
    n = draw(st.integers(min_tasks, max_tasks))
    tasks: list[dict[str, Any]] = []
    for i in range(n):
        t: dict[str, Any] = {"name": f"task{i}"}
        if draw(st.booleans()):
            t["flops"] = draw(st.floats(0, 1e12, allow_nan=False, allow_infinity=False))
        if draw(st.booleans()):
            t["bytes"] = draw(st.integers(0, 10**9))
        if len(devices) > 0 and draw(st.booleans()):
            t["times_s"] = {d: draw(st.floats(0, 1.0, allow_nan=False)) for d in devices
                            if draw(st.booleans())}
        if draw(st.integers(0, 3)) == 0:
            t["scratch_bytes"] = draw(st.integers(0, 10**6))
        tasks.append(t)
    pairs = draw(st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1))
                         .filter(lambda p: p[0] < p[1]), max_size=3 * n)) if n > 1 else set()
    edges = [{"src": f"task{a}", "dst": f"task{z}", "bytes": draw(st.integers(0, 10**8))}
             for a, z in sorted(pairs)]
    doc: dict[str, Any] = {"schema_version": 1, "name": "random", "tasks": tasks,
                           "edges": edges}
    if draw(st.booleans()):
        doc["inputs"] = [{"dst": "task0", "bytes": draw(st.integers(0, 10**6))}]
    return doc
