"""The kind sets beside ``OpKind``: each defined once, and consistent with each other."""

from __future__ import annotations

from placewise.graph.ir import (
    CONTRACTION_KINDS,
    GEMM_KINDS,
    INT8_KINDS,
    OpCategory,
    OpKind,
)
from placewise.graph.onnx_kinds import _KINDS, INT8_ONNX_OP_TYPES


def test_contractions_are_the_contraction_category() -> None:
    assert {k for k in OpKind if k.category is OpCategory.CONTRACTION} == CONTRACTION_KINDS
    assert len(CONTRACTION_KINDS) == 9


def test_gemm_kinds_are_the_single_kernel_contractions() -> None:
    assert GEMM_KINDS < CONTRACTION_KINDS
    others = {OpKind.ATTENTION, OpKind.LSTM, OpKind.GRU, OpKind.EINSUM}
    assert others == CONTRACTION_KINDS - GEMM_KINDS
    assert INT8_KINDS <= GEMM_KINDS


def test_int8_onnx_types_spell_int8_kinds() -> None:
    assert {_KINDS[t] for t in INT8_ONNX_OP_TYPES} <= INT8_KINDS
    assert INT8_ONNX_OP_TYPES == ("MatMul", "Gemm", "Conv")
