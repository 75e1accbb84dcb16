"""Seeds and mutations for the newer ONNX readers (not a test module): control flow (``If``
with weights and outer-scope reads in its branches, ``Loop`` with a constant and with a
given trip count, ``Scan``) and quantized models (onnxruntime's ``quantize_dynamic``, and
``quantize_static`` in QDQ and QOperator form, of a small Conv + MatMul model).
``tests.fuzz_mutators`` registers them as the ``onnx_control`` and ``onnx_quant`` loaders.

Mutations reach inside subgraphs: a case mutates the top graph or one subgraph (with the
top-level mutations of ``tests.fuzz_mutators``), and control-flow edits change what the
readers of this part rely on: an ``If``'s condition (constant, of several elements, of a
string type), a ``Loop``'s trip count (negative, huge, a float), a ``Scan``'s axes and
input count, a branch's outputs or a dropped branch, a body's inputs.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from contextlib import suppress
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = ["control_bytes", "quant_bytes", "run_control", "run_quant"]


def _vi(name: str, dims: list[int | str] | None, elem: int = 1) -> Any:
    from onnx import helper

    return helper.make_tensor_value_info(name, elem, dims)


@lru_cache(maxsize=1)
def control_seed() -> bytes:
    """x -> Relu -> a; If(c): a @ W (W a branch initializer) else Neg(a); a Loop of M
    (a graph input) iterations and one of 3 (a constant) over it; a Scan over ``seq``."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "W")
    then = helper.make_graph([helper.make_node("MatMul", ["a", "W"], ["t"], name="then_mm")],
                             "then", [], [_vi("t", ["N", 8])], [w])
    other = helper.make_graph([helper.make_node("Neg", ["a"], ["e"], name="else_neg")],
                              "else", [], [_vi("e", ["N", 8])])
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(
             np.full((8, 8), 0.1, np.float32), "kv")),
         helper.make_node("MatMul", ["acc_in", "k"], ["mm"]),
         helper.make_node("Add", ["mm", "y"], ["acc_out"])], "body",
        [_vi("i", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL),
         _vi("acc_in", None)], [_vi("cond_out", [], TensorProto.BOOL), _vi("acc_out", None)])
    scan_body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "xs"], ["s_out"]),
         helper.make_node("Tanh", ["s_out"], ["ys"])], "scan_body",
        [_vi("s_in", [2, 8]), _vi("xs", [2, 8])], [_vi("s_out", [2, 8]), _vi("ys", [2, 8])])
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("If", ["c"], ["y"], name="if", then_branch=then, else_branch=other),
        helper.make_node("Loop", ["M", "", "y"], ["l1"], name="loop_m", body=body),
        helper.make_node("Loop", ["three", "", "l1"], ["l2"], name="loop_3", body=body),
        helper.make_node("Scan", ["s0", "seq"], ["sN", "ys"], name="scan", body=scan_body,
                         num_scan_inputs=1),
    ]
    three = numpy_helper.from_array(np.array(3, np.int64), "three")
    graph = helper.make_graph(
        nodes, "control",
        [_vi("x", ["N", 8]), _vi("c", [], TensorProto.BOOL), _vi("M", [], TensorProto.INT64),
         _vi("s0", [2, 8]), _vi("seq", [5, 2, 8])],
        [_vi("l2", ["N", 8]), _vi("sN", [2, 8]), _vi("ys", [5, 2, 8])], [three])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def _float_model() -> Any:
    """A small Conv -> Relu -> Flatten -> MatMul -> Add model to quantize."""
    import numpy as np
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("cw", (4, 3, 3, 3)), ("cb", (4,)), ("mw", (64, 8)), ("mb", (8,)))]
    nodes = [helper.make_node("Conv", ["x", "cw", "cb"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
             helper.make_node("MatMul", ["f", "mw"], ["m"], name="matmul"),
             helper.make_node("Add", ["m", "mb"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "quant", [_vi("x", [1, 3, 4, 4])], [_vi("y", [1, 8])],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@lru_cache(maxsize=3)
def quant_seed(form: str) -> bytes:
    """``_float_model`` quantized by onnxruntime: ``dynamic`` (DynamicQuantizeLinear,
    MatMulInteger, ConvInteger), ``qdq`` or ``qoperator`` (static, QLinearConv /
    QLinearMatMul)."""
    import tempfile

    import numpy as np
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    class Reader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            rng = np.random.default_rng(2)
            self.items = iter([{"x": rng.standard_normal((1, 3, 4, 4)).astype(np.float32)}
                               for _ in range(4)])

        def get_next(self) -> dict[str, Any] | None:
            return next(self.items, None)

    with tempfile.TemporaryDirectory(prefix="fuzz-quant-") as tmp:
        src, out = Path(tmp) / "f.onnx", Path(tmp) / "q.onnx"
        onnx.save(_float_model(), str(src))
        if form == "dynamic":
            quantize_dynamic(str(src), str(out), weight_type=QuantType.QInt8)
        else:
            fmt = QuantFormat.QDQ if form == "qdq" else QuantFormat.QOperator
            quantize_static(str(src), str(out), Reader(), quant_format=fmt,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        return out.read_bytes()


# ---- mutations ------------------------------------------------------------------------------


def _subgraphs(graph: Any) -> Iterator[Any]:
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("g"):
                yield attr.g
                yield from _subgraphs(attr.g)
            for sub in attr.graphs:
                yield sub
                yield from _subgraphs(sub)


def _control_edit(model: Any, rnd: random.Random) -> None:
    """One edit of what control-flow readers rely on."""
    from onnx import TensorProto, helper

    g = model.graph
    flow = [n for n in g.node if n.op_type in ("If", "Loop", "Scan")]
    if not flow:
        return
    node = rnd.choice(flow)
    choice = rnd.randrange(7)
    if choice == 0 and node.input:  # the first input: a constant of odd type or size
        name = f"odd_{rnd.randrange(1000)}"
        value = rnd.choice((
            helper.make_tensor(name, TensorProto.BOOL, [], [True]),
            helper.make_tensor(name, TensorProto.INT64, [], [rnd.choice((-1, 0, 2**62))]),
            helper.make_tensor(name, TensorProto.FLOAT, [], [float("nan")]),
            helper.make_tensor(name, TensorProto.INT64, [3], [1, 0, 1]),
            helper.make_tensor(name, TensorProto.STRING, [], [b"yes"])))
        g.initializer.append(value)
        node.input[0] = name
    elif choice == 1 and node.attribute:  # a branch or body dropped
        del node.attribute[rnd.randrange(len(node.attribute))]
    elif choice == 2:  # a subgraph's outputs or inputs changed
        subs = [a.g for a in node.attribute if a.HasField("g")]
        if subs:
            sub = rnd.choice(subs)
            target = sub.output if rnd.random() < 0.5 else sub.input
            if len(target) and rnd.random() < 0.5:
                del target[rnd.randrange(len(target))]
            else:
                target.append(_vi(rnd.choice(("ghost", "a", "x")), [2]))
    elif choice == 3 and node.op_type == "Scan":  # scan axes and counts
        for a in node.attribute:
            if a.name == "num_scan_inputs":
                a.i = rnd.choice((0, 2, 9, -1))
        node.attribute.append(helper.make_attribute("scan_input_axes",
                                                    [rnd.choice((5, -9, 1))]))
    elif choice == 4:  # an input read only from inside a subgraph, removed from the graph
        if g.input:
            del g.input[rnd.randrange(len(g.input))]
    elif choice == 5:  # subgraph reads an undefined outer value
        subs = list(_subgraphs(g))
        if subs:
            sub = rnd.choice(subs)
            if sub.node:
                n = rnd.choice(sub.node)
                if n.input:
                    n.input[rnd.randrange(len(n.input))] = rnd.choice(("undefined", "", "c"))
    else:  # nest the node's copy inside its own branch
        subs = [a.g for a in node.attribute if a.HasField("g")]
        if subs:
            from onnx import NodeProto

            copy = NodeProto()  # a standalone copy first: never copy a message into itself
            copy.CopyFrom(node)
            copy.ClearField("output")
            copy.output.extend([f"{o}_nested" for o in node.output])
            rnd.choice(subs).node.append(copy)


def _mutate(model: Any, rnd: random.Random, mutate_model: Callable[[Any, random.Random], None]
            ) -> None:
    """Top-level mutations, or those of one subgraph, and control-flow edits."""
    import onnx

    for _ in range(rnd.randint(1, 4)):
        with suppress(ValueError, TypeError, IndexError):
            kind = rnd.randrange(3)
            subs = list(_subgraphs(model.graph))
            if kind == 0 or not subs:
                mutate_model(model, rnd)
            elif kind == 1:
                sub = rnd.choice(subs)
                wrapper = onnx.ModelProto()
                wrapper.graph.CopyFrom(sub)
                wrapper.opset_import.extend(model.opset_import)
                mutate_model(wrapper, rnd)
                sub.CopyFrom(wrapper.graph)
            else:
                _control_edit(model, rnd)


def _bytes(seed: bytes, rnd: random.Random,
           mutate_model: Callable[[Any, random.Random], None],
           finish: Callable[[bytes, random.Random], bytes]) -> bytes:
    import onnx

    model = onnx.ModelProto()
    model.ParseFromString(seed)
    _mutate(model, rnd, mutate_model)
    return finish(bytes(model.SerializeToString()), rnd)


def control_bytes(rnd: random.Random, mutate_model: Callable[[Any, random.Random], None],
                  finish: Callable[[bytes, random.Random], bytes]) -> bytes:
    return _bytes(control_seed(), rnd, mutate_model, finish)


def quant_bytes(rnd: random.Random, mutate_model: Callable[[Any, random.Random], None],
                finish: Callable[[bytes, random.Random], bytes]) -> bytes:
    return _bytes(quant_seed(rnd.choice(("dynamic", "qdq", "qoperator"))), rnd,
                  mutate_model, finish)


# ---- running ------------------------------------------------------------------------------


def _cost_every_op(graph: Any) -> None:
    from placewise.cost.roofline import RooflineModel
    from placewise.errors import UnsupportedError
    from placewise.hardware.load import load_machine
    from placewise.units import DType

    model = RooflineModel(load_machine("jetson-agx-orin"))
    for op in graph.ops:
        with suppress(UnsupportedError):  # a kind the device does not run
            model.op_cost(graph, op, "gpu", DType.FP32)


def run_control(path: Path) -> None:
    """Import as the CLI does (batch 2), summarize and cost every op; again with the
    branch and the trip count given by ``--value`` where those inputs are still there."""
    from placewise.graph.onnx_import import load_onnx
    from placewise.graph.summary import summarize

    graph = load_onnx(path, batch=2)
    graph.check_concrete(file=str(path))
    summarize(graph)
    _cost_every_op(graph)
    values = {k: v for k, v in (("c", (1,)), ("M", (4,))) if k in graph.inputs}
    if values:
        bound = load_onnx(path, batch=2, values=values)
        bound.check_concrete(file=str(path))
        summarize(bound)
        _cost_every_op(bound)


def run_quant(path: Path) -> None:
    """Import, summarize and cost every op."""
    from placewise.graph.onnx_import import load_onnx
    from placewise.graph.summary import summarize

    graph = load_onnx(path)
    graph.check_concrete(file=str(path))
    summarize(graph)
    _cost_every_op(graph)
