"""Counting the op kinds real transformer exports use, from small hand-made ONNX graphs
(and torch modules) imported as a user would: the kind, the FLOPs and bytes against hand
formulas, 100% coverage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from placewise.cost.roofline import GemmDims, gemm_dims
from placewise.errors import GraphError
from placewise.graph.count import ELEMENTWISE_FLOPS, count_graph, count_op, einsum_indices
from placewise.graph.ir import OpKind
from placewise.graph.onnx_import import load_onnx

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _load(tmp_path: Path, node: Any, ins: list[tuple[str, int, list[int]]],
          out: tuple[str, int, list[int] | None], inits: list[Any] | None = None,
          opset: int = 18) -> Any:
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(*i) for i in ins],
                          [helper.make_tensor_value_info(*out)], inits or [])
    path = tmp_path / "m.onnx"
    import onnx

    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]), str(path))
    graph = load_onnx(path)
    assert count_graph(graph).coverage == 1.0
    (op,) = graph.ops
    return graph, op, count_op(graph, op)


@pytest.mark.parametrize("op_type,kind,dtype_in,dtype_out", [
    ("IsNaN", OpKind.ISNAN, F, B), ("IsInf", OpKind.ISINF, F, B),
    ("Floor", OpKind.FLOOR, F, F), ("Ceil", OpKind.CEIL, F, F), ("Round", OpKind.ROUND, F, F),
    ("Sign", OpKind.SIGN, F, F), ("Not", OpKind.NOT, B, B), ("Erf", OpKind.ERF, F, F),
    ("BitwiseNot", OpKind.NOT, I64, I64),
])
def test_unary_kinds(tmp_path: Path, op_type: str, kind: OpKind, dtype_in: int,
                     dtype_out: int) -> None:
    _, op, c = _load(tmp_path, helper.make_node(op_type, ["x"], ["y"]),
                     [("x", dtype_in, [3, 5])], ("y", dtype_out, [3, 5]))
    assert op.kind is kind
    assert c.flops == 15 * ELEMENTWISE_FLOPS[kind]
    size = {F: 4, B: 1, I64: 8}
    assert (c.bytes_read, c.bytes_written) == (15 * size[dtype_in], 15 * size[dtype_out])


@pytest.mark.parametrize("op_type,kind,dtype", [
    ("And", OpKind.AND, B), ("Or", OpKind.OR, B), ("Xor", OpKind.XOR, B),
    ("BitwiseAnd", OpKind.AND, I64), ("BitwiseXor", OpKind.XOR, I64), ("Mod", OpKind.MOD, I64),
])
def test_binary_kinds_broadcast(tmp_path: Path, op_type: str, kind: OpKind, dtype: int) -> None:
    _, op, c = _load(tmp_path, helper.make_node(op_type, ["a", "b"], ["y"]),
                     [("a", dtype, [4, 1, 6]), ("b", dtype, [5, 1])], ("y", dtype, [4, 5, 6]))
    assert op.kind is kind
    assert c.flops == 120 * ELEMENTWISE_FLOPS[kind]
    size = 1 if dtype == B else 8
    assert c.bytes_read == (24 + 5) * size and c.bytes_written == 120 * size


def test_mod_fmod_attribute_and_cost(tmp_path: Path) -> None:
    _, op, c = _load(tmp_path, helper.make_node("Mod", ["a", "b"], ["y"], fmod=1),
                     [("a", F, [8]), ("b", F, [8])], ("y", F, [8]))
    assert op.attrs["fmod"] is True and c.flops == 16


def test_trilu_with_its_diagonal_input(tmp_path: Path) -> None:
    k = numpy_helper.from_array(np.array(1, np.int64), "k")
    _, op, c = _load(tmp_path, helper.make_node("Trilu", ["x", "k"], ["y"], upper=0),
                     [("x", F, [2, 4, 4])], ("y", F, [2, 4, 4]), [k])
    assert op.kind is OpKind.TRILU and op.attrs["upper"] is False
    assert c.flops == 32  # one compare-and-select per element
    assert c.bytes_read == 32 * 4 + 8 and c.bytes_written == 32 * 4


def test_where_isnan_chain_of_an_sdpa_export(tmp_path: Path) -> None:
    """The dynamo exporter's guard against fully masked rows: where(isnan(p), 0, p)."""
    import onnx

    zero = numpy_helper.from_array(np.array(0.0, np.float32), "zero")
    nodes = [helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node("IsNaN", ["p"], ["nan"]),
             helper.make_node("Where", ["nan", "zero", "p"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("s", F, [2, 4, 4])],
                          [helper.make_tensor_value_info("y", F, [2, 4, 4])], [zero])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    counts = count_graph(load_onnx(path))
    assert counts.coverage == 1.0
    assert counts.by_kind[OpKind.ISNAN].flops == 32 and counts.by_kind[OpKind.WHERE].flops == 32


def test_gather_nd_reads_what_it_gathers(tmp_path: Path) -> None:
    """The dynamo BERT mask: GatherND of [4,16] by [4,1,1,16,2] index pairs."""
    idx = numpy_helper.from_array(np.zeros((4, 1, 1, 16, 2), np.int64), "idx")
    _, op, c = _load(tmp_path, helper.make_node("GatherND", ["d", "idx"], ["y"]),
                     [("d", B, [4, 16])], ("y", B, [4, 1, 1, 16]), [idx])
    assert op.kind is OpKind.GATHER and op.attrs["variant"] == "nd"
    assert c.flops == 0
    assert c.bytes_read == 64 * 8 * 2 + 64 and c.bytes_written == 64


def test_gather_nd_with_batch_dims(tmp_path: Path) -> None:
    idx = numpy_helper.from_array(np.zeros((2, 5, 1), np.int64), "idx")
    _, _, c = _load(tmp_path, helper.make_node("GatherND", ["d", "idx"], ["y"], batch_dims=1),
                    [("d", F, [2, 3, 4])], ("y", F, [2, 5, 4]), [idx])
    assert c.bytes_written == 40 * 4 and c.bytes_read == 40 * 4 + 10 * 8


def test_gather_elements_takes_one_element_per_index(tmp_path: Path) -> None:
    idx = numpy_helper.from_array(np.zeros((3, 2), np.int64), "idx")
    _, op, c = _load(tmp_path, helper.make_node("GatherElements", ["d", "idx"], ["y"], axis=1),
                     [("d", F, [3, 50])], ("y", F, [3, 2]), [idx])
    assert op.attrs["variant"] == "elements"
    assert c.bytes_read == 6 * 8 + 6 * 4 and c.bytes_written == 6 * 4


def test_einsum_as_a_batched_matmul(tmp_path: Path) -> None:
    graph, op, c = _load(tmp_path, helper.make_node("Einsum", ["a", "b"], ["y"],
                                                    equation="bij,bjk->bik"),
                         [("a", F, [2, 3, 4]), ("b", F, [2, 4, 5])], ("y", F, [2, 3, 5]),
                         opset=17)
    assert op.kind is OpKind.EINSUM and op.attrs["equation"] == "bij,bjk->bik"
    assert c.flops == 2 * 2 * 3 * 4 * 5
    assert c.bytes_moved == (24 + 40 + 30) * 4
    assert gemm_dims(graph, op) == GemmDims(batch=2, m=3, n=5, k=4)


def test_einsum_implicit_output_and_ellipsis() -> None:
    ops, out, sizes = einsum_indices("ij,jk", [(2, 3), (3, 4)])
    assert ops == [["i", "j"], ["j", "k"]]
    assert out == ["i", "k"] and sizes == {"i": 2, "j": 3, "k": 4}
    _, out, sizes = einsum_indices("...ij,...jk->...ik", [(5, 1, 2, 3), (7, 3, 4)])
    assert out == [".0", ".1", "i", "k"] and sizes[".0"] == 5 and sizes[".1"] == 7
    with pytest.raises(ValueError, match="index 'j'"):
        einsum_indices("ij,jk->ik", [(2, 3), (4, 5)])


def test_einsum_that_does_not_fit_names_the_op(tmp_path: Path) -> None:
    import onnx

    node = helper.make_node("Einsum", ["a", "b"], ["y"], equation="ij,jk->ik", name="ein")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", F, [2, 3]),
                                        helper.make_tensor_value_info("b", F, [3, 4])],
                          [helper.make_tensor_value_info("y", F, [2, 5])])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    graph = load_onnx(path)
    with pytest.raises(GraphError, match=r"'ein'.*expected \[2,4\]"):
        count_op(graph, graph.op("ein"))


def test_torch_kinds_of_masks_and_einsum() -> None:
    """aten.__and__ (how transformers combines masks), tril, isnan, einsum, remainder."""
    import torch

    from placewise.graph.torch_import import import_module

    class M(torch.nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            keep = (a > 0) & (b > 0)
            y = torch.einsum("ij,jk->ik", a, b)
            y = torch.tril(y, 1) + torch.remainder(y, 2.0)
            return torch.where(keep | torch.isnan(a), a, 0.0) @ y

    g = import_module(M(), (torch.randn(4, 4), torch.randn(4, 4)), name="m")
    kinds = {op.provenance.source_op.split(".")[1]: op for op in g.ops}
    assert kinds["__and__"].kind is OpKind.AND and kinds["__or__"].kind is OpKind.OR
    assert kinds["tril"].kind is OpKind.TRILU and dict(kinds["tril"].attrs) == {"upper": False,
                                                                              "k": 1}
    assert kinds["isnan"].kind is OpKind.ISNAN and kinds["remainder"].kind is OpKind.MOD
    assert kinds["einsum"].kind is OpKind.EINSUM
    assert kinds["einsum"].attrs["equation"] == "ij,jk->ik"
    counts = count_graph(g)
    assert counts.coverage == 1.0 and counts.per_op[kinds["einsum"].name].flops == 2 * 64
