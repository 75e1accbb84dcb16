"""Large seeded ONNX DAGs for import-scaling tests and ``benchmarks/onnx_scale.py``.

``onnx_dag(n, seed)`` builds a model of exactly ``n`` nodes in the mix of a CNN/MLP export:
``Conv`` (3x3 and, after a ``Concat``, 1x1), ``Relu``, ``Sigmoid``, ``MatMul`` and ``Add``
with weights, ``Transpose``, and joins (``Add``, ``Mul``, ``Concat``) of parallel branches.
Every value has the shape ``[N, C, S, S]`` (``N`` symbolic unless ``batch`` is given), no
``value_info`` is written (as most exporters do), nodes are named like torch.onnx's
(``/b12/Conv``), and the weights are small seeded random floats. The branches fork from
earlier values and join later, so the graph is a DAG of bounded width (``width``), not a
chain.

>>> m = onnx_dag(40, seed=1)
>>> len(m.graph.node), m.graph.output[0].name
(40, 'y')
>>> sorted({n.op_type for n in m.graph.node}) == sorted(
...     {n.op_type for n in onnx_dag(40, seed=1).graph.node})
True
"""

from __future__ import annotations

import random

import numpy as np
from onnx import ModelProto, TensorProto, helper, numpy_helper

__all__ = ["onnx_dag"]

# (kind, weight): unary kinds keep the frontier width, joins narrow it, forks widen it
_MIX: tuple[tuple[str, float], ...] = (
    ("conv", 0.18), ("relu", 0.16), ("matmul", 0.14), ("bias", 0.10), ("sigmoid", 0.05),
    ("transpose", 0.04), ("add", 0.10), ("mul", 0.05), ("concat", 0.06), ("fork", 0.12))


def onnx_dag(n: int, seed: int = 0, *, channels: int = 8, size: int = 8, width: int = 12,
             batch: int | None = None, opset: int = 17) -> ModelProto:
    """A seeded ONNX model of exactly ``n`` nodes (module docstring); ``n >= 1``."""
    if n < 1:
        raise ValueError(f"n must be positive, got {n}")
    rng = random.Random(seed)
    gen = np.random.default_rng(seed)
    c, s = channels, size
    nodes: list[helper.NodeProto] = []
    inits: list[TensorProto] = []
    frontier = ["x"]
    kinds, weights = zip(*_MIX, strict=True)

    def weight(name: str, shape: tuple[int, ...]) -> str:
        arr = (gen.standard_normal(shape) * 0.1).astype(np.float32)
        inits.append(numpy_helper.from_array(arr, name))
        return name

    def node(op: str, ins: list[str], **attrs: object) -> str:
        i = len(nodes)
        out = f"/b{i}/{op}_output_0"
        nodes.append(helper.make_node(op, ins, [out], name=f"/b{i}/{op}", **attrs))
        return out

    def pick() -> int:  # recent values are likelier, as in a real network
        k = len(frontier)
        return k - 1 - min(int(rng.expovariate(0.7)), k - 1)

    while True:
        budget = n - len(nodes) - (len(frontier) - 1)  # the final joins are prepaid
        if budget <= 0:
            break
        kind = rng.choices(kinds, weights)[0]
        joins = kind in ("add", "mul", "concat")
        if len(frontier) > width:
            kind, joins = "add", True
        if (joins and len(frontier) < 2) or (kind == "fork" and budget < 2):
            kind, joins = "relu", False  # a concat join (two nodes) takes one of budget
        if joins:
            a, b = sorted(rng.sample(range(len(frontier)), 2))
            x, y = frontier[a], frontier[b]
            del frontier[b], frontier[a]
            i = len(nodes)
            if kind == "concat":
                cat = node("Concat", [x, y], axis=1)
                out = node("Conv", [cat, weight(f"w{i}", (c, 2 * c, 1, 1))],
                           kernel_shape=[1, 1])
            else:
                out = node("Add" if kind == "add" else "Mul", [x, y])
            frontier.append(out)
            continue
        j = pick()
        x = frontier[j]
        if kind == "fork":  # a branch from an earlier value: both stay live
            frontier.append(node("Relu", [x]))
            continue
        i = len(nodes)
        if kind == "conv":
            out = node("Conv", [x, weight(f"w{i}", (c, c, 3, 3)), weight(f"b{i}", (c,))],
                       kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        elif kind == "matmul":
            out = node("MatMul", [x, weight(f"w{i}", (s, s))])
        elif kind == "bias":
            out = node("Add", [x, weight(f"b{i}", (s,))])
        elif kind == "transpose":
            out = node("Transpose", [x], perm=[0, 1, 3, 2])
        else:
            out = node("Sigmoid" if kind == "sigmoid" else "Relu", [x])
        frontier[j] = out
    while len(frontier) > 1:
        x, y = frontier.pop(0), frontier.pop(0)
        frontier.append(node("Add", [x, y]))
    nodes[-1].output[0] = "y"
    dims: list[int | str] = ["N" if batch is None else batch, c, s, s]
    graph = helper.make_graph(
        nodes, f"dag{n}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             producer_name="placewise-tests")
