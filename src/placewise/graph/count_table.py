"""The counting rule table and what a rule sees: the conventions (FLOPs per elementwise
kind, norm, softmax, recurrent step), ``OpCount``, the context ``_Ctx`` whose helpers fail
naming the op, ``@rule`` registration, and the shape arithmetic rules share (window counts,
attention FLOPs, einsum indices). ``graph.count`` holds the rules and counts graphs;
``graph.count_fused`` the rules of fused ops.

>>> has_rule(OpKind.UNKNOWN)
False
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from placewise.errors import GraphError
from placewise.graph.ir import Graph, Op, OpKind, Tensor
from placewise.units import DType

__all__ = [
    "DYNAMIC_QUANTIZE_FLOPS",
    "ELEMENTWISE_FLOPS",
    "GRU_ELEMENTWISE_FLOPS_PER_HIDDEN",
    "LSTM_ELEMENTWISE_FLOPS_PER_HIDDEN",
    "NORM_FLOPS_PER_ELEMENT",
    "REQUANTIZE_FLOPS",
    "SOFTMAX_FLOPS_PER_ELEMENT",
    "TRANSCENDENTAL_FLOPS",
    "OpCount",
    "Rule",
    "attention_flops",
    "einsum_indices",
    "has_rule",
    "rule",
    "window_count",
]


#: FLOPs charged per element for one transcendental function (exp, log, erf, tanh, sin,
#: cos, pow). Special-function units run at roughly a quarter of FMA throughput on current
#: accelerators, and CPU vector libraries need ~10 FMAs per exp; 4 is the middle ground.
TRANSCENDENTAL_FLOPS = 4.0
_T = TRANSCENDENTAL_FLOPS
_SIGMOID = _T + 2.0  # 1 / (1 + exp(-x)): exp, add, reciprocal

#: Per-output-element FLOPs of every elementwise kind.
ELEMENTWISE_FLOPS: dict[OpKind, float] = {
    OpKind.RELU: 1.0,  # max(x, 0)
    OpKind.LEAKY_RELU: 2.0,  # compare/select + multiply
    OpKind.GELU: _T + 4.0,  # x * 0.5 * (1 + erf(x / sqrt 2)): erf + 4 arithmetic
    OpKind.SILU: _SIGMOID + 1.0,  # x * sigmoid(x)
    OpKind.SIGMOID: _SIGMOID,
    OpKind.HARD_SIGMOID: 3.0,  # clip(a*x + b, 0, 1): mul, add, clip
    OpKind.HARD_SWISH: 4.0,  # x * hard_sigmoid(x)
    OpKind.TANH: _T,
    OpKind.ELU: _T + 3.0,  # select(x > 0, x, alpha * (exp(x) - 1))
    OpKind.SOFTPLUS: 2.0 * _T + 1.0,  # log(1 + exp(x))
    OpKind.EXP: _T,
    OpKind.LOG: _T,
    OpKind.SQRT: 1.0,
    OpKind.RSQRT: 1.0,
    OpKind.RECIPROCAL: 1.0,
    OpKind.NEG: 1.0,
    OpKind.ABS: 1.0,
    OpKind.ERF: _T,
    OpKind.SIN: _T,
    OpKind.COS: _T,
    OpKind.CLIP: 2.0,  # max then min
    OpKind.NOT: 1.0,
    OpKind.ISNAN: 1.0,  # a compare (x != x)
    OpKind.ISINF: 1.0,
    OpKind.FLOOR: 1.0,
    OpKind.CEIL: 1.0,
    OpKind.ROUND: 1.0,
    OpKind.SIGN: 1.0,
    OpKind.ADD: 1.0,
    OpKind.SUB: 1.0,
    OpKind.MUL: 1.0,
    OpKind.DIV: 1.0,
    OpKind.POW: _T,
    OpKind.MAXIMUM: 1.0,
    OpKind.MINIMUM: 1.0,
    OpKind.EQUAL: 1.0,
    OpKind.LESS: 1.0,
    OpKind.GREATER: 1.0,
    OpKind.AND: 1.0,
    OpKind.OR: 1.0,
    OpKind.XOR: 1.0,
    OpKind.MOD: 2.0,  # a - b * floor(a / b): divide-floor, multiply-subtract (fused)
    OpKind.WHERE: 1.0,  # select
    OpKind.TRILU: 1.0,  # compare the element's row and column offset, select
}

#: softmax / log-softmax per element: running max, subtract, exp, sum, scale (or subtract log).
SOFTMAX_FLOPS_PER_ELEMENT = _T + 4.0

#: Norms per input element, *before* the affine part. Each present affine input (scale,
#: bias) adds 1 FLOP per element. Layer/group/instance norm: mean (1), centre (1), square
#: and accumulate (2), scale by inverse std (1). RMS norm: square and accumulate (2), scale
#: (1). Batch norm at inference uses stored statistics: normalize is folded with the affine
#: into one multiply-add per element (2 in total, scale/bias inputs add nothing more).
#: Per-row work (1/sqrt of a variance) is negligible and not counted.
NORM_FLOPS_PER_ELEMENT: dict[OpKind, float] = {
    OpKind.LAYER_NORM: 5.0,
    OpKind.GROUP_NORM: 5.0,
    OpKind.INSTANCE_NORM: 5.0,
    OpKind.RMS_NORM: 3.0,
    OpKind.BATCH_NORM: 2.0,
}

#: LSTM elementwise work per hidden unit per step and direction, beyond the gate matmuls:
#: add W·x and R·h for 4 gates (4), 3 sigmoids, 2 tanh (g and tanh(c)), c = f*c + i*g (3),
#: h = o*tanh(c) (1). Biases (input B present) add 8, peepholes (input P present) add 6.
LSTM_ELEMENTWISE_FLOPS_PER_HIDDEN = 4.0 + 3.0 * _SIGMOID + 2.0 * _T + 4.0

#: GRU elementwise work per hidden unit per step and direction, beyond the gate matmuls:
#: add W·x and R·h for z and r (2), n = tanh(W·x + r*(R·h)) (2 + tanh), 2 sigmoids,
#: h = (1-z)*n + z*h (4). Biases (input B present) add 6.
GRU_ELEMENTWISE_FLOPS_PER_HIDDEN = 2.0 + 2.0 + _T + 2.0 * _SIGMOID + 4.0

_QUANTIZE_FLOPS = 2.0  # x / scale + zero_point (rounding and saturation belong to the store)
_DEQUANTIZE_FLOPS = 2.0  # (q - zero_point) * scale
#: an integer accumulator to the output's scale and zero point: acc * (sx * sw / sy) + zp
REQUANTIZE_FLOPS = 2.0
#: DynamicQuantizeLinear per element: the running min and max (2), then quantize (2)
DYNAMIC_QUANTIZE_FLOPS = 2.0 + _QUANTIZE_FLOPS
_CAST_FLOPS = 1.0  # one convert instruction per element


@dataclass(frozen=True, slots=True)
class OpCount:
    """FLOPs and bytes of one op.

    ``bytes_by_dtype`` splits ``bytes_moved`` (read + written) by dtype, sorted by dtype
    value. ``counted`` is False when no rule covers the op's kind; ``is_view`` is True for
    reshape-like ops (zero bytes, zero FLOPs).
    """

    flops: float
    bytes_read: int
    bytes_written: int
    bytes_by_dtype: tuple[tuple[DType, int], ...]
    counted: bool
    is_view: bool

    @property
    def bytes_moved(self) -> int:
        return self.bytes_read + self.bytes_written


_UNCOUNTED = OpCount(0.0, 0, 0, (), counted=False, is_view=False)
_VIEW = OpCount(0.0, 0, 0, (), counted=True, is_view=True)

# ---- the rule table ----------------------------------------------------------------------


class _Ctx:
    """What a rule sees: the op, its tensors, and helpers that fail naming the op."""

    __slots__ = ("graph", "op")

    def __init__(self, graph: Graph, op: Op) -> None:
        self.graph = graph
        self.op = op

    def fail(self, problem: str) -> GraphError:
        return GraphError(problem, place=self.op.where())

    def opt(self, i: int) -> Tensor | None:
        """Input ``i``, or None when absent (past the end or an empty name)."""
        if i >= len(self.op.inputs) or not self.op.inputs[i]:
            return None
        return self.graph.tensor(self.op.inputs[i])

    def inp(self, i: int, what: str) -> Tensor:
        t = self.opt(i)
        if t is None:
            raise self.fail(f"{self.op.kind.value} needs input {i} ({what})")
        return t

    def out(self, i: int = 0) -> Tensor:
        if i >= len(self.op.outputs):
            raise self.fail(f"{self.op.kind.value} needs output {i}")
        return self.graph.tensor(self.op.outputs[i])

    def ins(self) -> list[Tensor]:
        return self.graph.in_tensors(self.op)

    def outs(self) -> list[Tensor]:
        return self.graph.out_tensors(self.op)

    def shape(self, t: Tensor) -> tuple[int, ...]:
        dims = t.shape
        if all(type(d) is int for d in dims):  # the usual case: already what is returned
            return dims  # type: ignore[return-value]
        if not t.is_concrete:
            how = (f"bind it with --shape {t.name}=DIMS or --batch"
                   if t.name in self.graph.inputs
                   else "bind the model's input dims with --shape INPUT=DIMS or --batch")
            raise self.fail(f"tensor {t.name!r} has symbolic shape {t.shape_str()}; {how}")
        return tuple(int(d) for d in t.shape)

    def numel(self, t: Tensor) -> int:
        return math.prod(self.shape(t))

    def attr_ints(self, name: str, default: Sequence[int]) -> tuple[int, ...]:
        v = self.op.attrs.get(name, tuple(default))
        if isinstance(v, int | float) and not isinstance(v, bool):
            return (int(v),)
        if not isinstance(v, tuple) or not all(isinstance(x, int | float) for x in v):
            raise self.fail(f"attribute {name!r} must be a list of integers, got {v!r}")
        return tuple(int(x) for x in v)

    def attr_int(self, name: str, default: int) -> int:
        v = self.op.attrs.get(name, default)
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise self.fail(f"attribute {name!r} must be an integer, got {v!r}")
        return int(v)

    def attr_strs(self, name: str) -> tuple[str, ...]:
        v = self.op.attrs.get(name, ())
        if isinstance(v, str):
            return (v,)
        if not isinstance(v, tuple) or not all(isinstance(x, str) for x in v):
            raise self.fail(f"attribute {name!r} must be a list of strings, got {v!r}")
        return tuple(str(x) for x in v)

    def count(self, flops: float, *, reads: Iterable[tuple[Tensor, int]] | None = None,
              writes: Iterable[tuple[Tensor, int]] | None = None) -> OpCount:
        """An ``OpCount``; ``reads``/``writes`` are (tensor, elements) pairs, defaulting to
        every present input / every output in full."""
        if reads is None:
            reads = [(t, self.numel(t)) for t in self.ins()]
        if writes is None:
            writes = [(t, self.numel(t)) for t in self.outs()]
        by: dict[DType, int] = {}
        r = w = 0
        for t, n in reads:
            b = t.dtype.nbytes(n)
            r += b
            by[t.dtype] = by.get(t.dtype, 0) + b
        for t, n in writes:
            b = t.dtype.nbytes(n)
            w += b
            by[t.dtype] = by.get(t.dtype, 0) + b
        split = tuple(sorted(((d, b) for d, b in by.items() if b), key=lambda x: x[0].value))
        return OpCount(float(flops), r, w, split, counted=True, is_view=False)


Rule = Callable[[_Ctx], OpCount]
_RULES: dict[OpKind, Rule] = {}


def rule(*kinds: OpKind) -> Callable[[Rule], Rule]:
    """Register the decorated function as the counting rule of ``kinds`` (once per kind)."""

    def register(fn: Rule) -> Rule:
        for k in kinds:
            if k in _RULES:
                raise ValueError(f"a counting rule for {k.value} is already registered")
            _RULES[k] = fn
        return fn

    return register


def has_rule(kind: OpKind) -> bool:
    """Whether ``kind`` has a counting rule.

    >>> has_rule(OpKind.CONV), has_rule(OpKind.UNKNOWN)
    (True, False)
    """
    return kind in _RULES


# ---- shape helpers -----------------------------------------------------------------------


def _broadcast(shapes: Iterable[tuple[int, ...]]) -> tuple[int, ...] | None:
    """numpy broadcasting of ``shapes``; None when they do not broadcast."""
    shapes = list(shapes)
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for s in shapes:
        for i, d in enumerate(s):
            j = rank - len(s) + i
            if d == out[j] or d == 1:
                continue
            if out[j] == 1:
                out[j] = d
            else:
                return None
    return tuple(out)


def _fmt(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _expect_shape(c: _Ctx, t: Tensor, expected: Sequence[int]) -> None:
    got = c.shape(t)
    if got != tuple(expected):
        raise c.fail(f"output {t.name!r} has shape {_fmt(got)}, expected {_fmt(expected)} "
                     f"from the input shapes")


def _expect_same_numel(c: _Ctx, a: Tensor, b: Tensor) -> int:
    n = c.numel(a)
    if c.numel(b) != n:
        raise c.fail(f"{a.name!r} {a.shape_str()} and {b.name!r} {b.shape_str()} "
                     f"must hold the same number of elements")
    return n


def window_count(size: int, kernel: int, stride: int, pad_begin: int, pad_end: int,
                 dilation: int = 1, *, ceil_mode: bool = False) -> int:
    """How many windows a convolution or pooling slides along one axis (its output size).

    With ``ceil_mode`` a last, partial window counts, unless it would start in the end
    padding (PyTorch's and onnxruntime's rule, which ONNX shape inference does not apply).

    >>> window_count(5, 2, 2, 0, 0), window_count(5, 2, 2, 0, 0, ceil_mode=True)
    (2, 3)
    >>> window_count(5, 2, 2, 1, 1, ceil_mode=True)  # a 4th window would start in padding
    3
    """
    span = size + pad_begin + pad_end - dilation * (kernel - 1) - 1
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    if (out - 1) * stride >= size + pad_begin:
        out -= 1
    return out


def attention_flops(heads: int, lq: int, lk: int, e: int, ev: int, *, masked: bool
                    ) -> float:
    """FLOPs of scaled dot-product attention over ``heads`` (batch x heads) score matrices
    of ``lq`` x ``lk``, head dims ``e`` (q, k) and ``ev`` (v): QK^T, scale, mask (when
    ``masked``), softmax, PV.

    >>> attention_flops(1, 2, 3, 4, 5, masked=False) == 2*6*4 + 6 + 6*SOFTMAX_FLOPS_PER_ELEMENT + 2*6*5
    True
    """
    scores = heads * lq * lk
    flops: float = 2 * scores * e + scores + (scores if masked else 0)
    return flops + scores * SOFTMAX_FLOPS_PER_ELEMENT + 2 * scores * ev


def einsum_indices(equation: str, shapes: Sequence[Sequence[int]]
                   ) -> tuple[list[list[str]], list[str], dict[str, int]]:
    """Parse an einsum ``equation`` against the operands' ``shapes``: each operand's index
    labels, the output's labels, and the size of every label. ``...`` becomes labels
    ``.0``, ``.1``... (right-aligned, broadcast as numpy does); without ``->`` the output
    is the ellipsis then the labels used once, sorted. Raises ``ValueError`` when the
    equation does not fit the shapes.

    >>> ops, out, sizes = einsum_indices("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)])
    >>> ops, out, sizes
    ([['b', 'i', 'j'], ['b', 'j', 'k']], ['b', 'i', 'k'], {'b': 2, 'i': 3, 'j': 4, 'k': 5})
    >>> einsum_indices("...ij->...ji", [(7, 2, 3)])[1]
    ['.0', 'j', 'i']
    """
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ValueError(f"{len(terms)} operands in {equation!r}, {len(shapes)} given")
    ell = max((len(s) - len(t.replace("...", "")) for t, s in zip(terms, shapes, strict=True)
               if "..." in t), default=0)
    sizes: dict[str, int] = {}
    operands: list[list[str]] = []
    for term, shape in zip(terms, shapes, strict=True):
        head, dots, tail = term.partition("...")
        n_ell = len(shape) - len(head) - len(tail) if dots else 0
        labels = [*head, *(f".{ell - n_ell + i}" for i in range(n_ell)), *tail]
        if n_ell < 0 or len(labels) != len(shape) or not all(x.isalpha() for x in head + tail):
            raise ValueError(f"term {term!r} does not fit a shape of rank {len(shape)}")
        for lab, d in zip(labels, shape, strict=True):
            have = sizes.get(lab, 1)
            if have != d and have != 1 and not (d == 1 and lab.startswith(".")):
                raise ValueError(f"index {lab!r} is {have} and {d}")
            sizes[lab] = max(have, d) if lab.startswith(".") else d
        operands.append(labels)
    dots_out = [f".{i}" for i in range(ell)]
    if arrow:
        head, dots, tail = rhs.partition("...")
        out = [*head, *(dots_out if dots else []), *tail]  # no "...": summed out
        if any(x not in sizes for x in out):
            raise ValueError(f"output {rhs!r} names an index no operand has")
    else:
        once = sorted(x for x in sizes if not x.startswith(".")
                      and sum(op.count(x) for op in operands) == 1)
        out = [*dots_out, *once]
    return operands, out, sizes
