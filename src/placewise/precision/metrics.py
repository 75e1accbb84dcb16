"""Output quality: a run's outputs against the fp32 reference on the same requests.

Four metrics, named as budgets name them (``METRICS``):

- ``rel_l2``: ``||y - ref|| / ||ref||`` per request (the worst request);
- ``cosine``: cosine similarity of ``y`` and ``ref`` flattened (the lowest request);
- ``max_abs``: the largest absolute difference over every element and request;
- ``top1``: share of rows (all axes but the last) whose argmax over the last axis agrees,
  only for outputs that ``looks_like_logits`` (a float output of a contraction op with a
  last dimension of at least 2).

A request whose output is NaN or infinite where the reference is not (or the other way
round) counts as the worst: ``rel_l2`` and ``max_abs`` infinite, ``cosine`` -1.

``output_quality`` reports one output (an ``OutputQuality`` record, as ``validate``
reports it);
``quality_of`` the worst over every output of a graph, as one ``{metric: value}`` dict.

>>> a = [np.array([[1.0, 2.0, 3.0]])]
>>> b = [np.array([[1.0, 2.0, 3.3]])]
>>> q = compare(b, a, logits=True)
>>> round(q.rel_l2_max, 4), round(q.max_abs, 4), q.top1
(0.0802, 0.3, 1.0)
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from placewise.errors import PlacewiseError
from placewise.graph.ir import GEMM_KINDS, Graph
from placewise.records import to_json

__all__ = ["METRICS", "Comparison", "OutputQuality", "compare", "looks_like_logits", "output_quality",
           "quality_of", "worst_quality"]

#: the metric names, as budgets and plan files spell them
METRICS = ("rel_l2", "cosine", "max_abs", "top1")



@dataclass(frozen=True, slots=True)
class OutputQuality:
    """One graph output against the fp32 reference, over every request.

    ``rel_l2``: median and worst ``||y - ref|| / ||ref||`` per request; ``max_abs``: the
    largest absolute difference; ``cosine_min``: the lowest cosine similarity;
    ``top1_agreement``: share of rows whose argmax over the last axis agrees (None when
    the output does not look like logits)."""

    output: str
    n: int
    rel_l2_median: float
    rel_l2_max: float
    max_abs: float
    cosine_min: float
    top1_agreement: float | None

    def to_json(self) -> dict[str, Any]:
        return to_json(self)



@dataclass(frozen=True, slots=True)
class Comparison:
    """One output's values against the reference over ``n`` requests: relative L2 (median
    and worst request), max abs, the lowest cosine, top-1 agreement (None: not logits)."""

    n: int
    rel_l2_median: float
    rel_l2_max: float
    max_abs: float
    cosine_min: float
    top1: float | None


def compare(got: Sequence[np.ndarray[Any, Any]], ref: Sequence[np.ndarray[Any, Any]], *,
            logits: bool, name: str = "output") -> Comparison:
    """Compare one output's values (one array per request) with the reference's."""
    rels: list[float] = []
    max_abs = 0.0
    cos_min = 1.0
    agree = 0
    rows = 0
    for y, r in zip(got, ref, strict=True):
        yf = np.asarray(y, dtype=np.float64).ravel()
        rf = np.asarray(r, dtype=np.float64).ravel()
        if yf.shape != rf.shape:
            raise PlacewiseError(f"output {name!r}: shape {np.shape(y)} differs from the "
                                 f"reference's {np.shape(r)}")
        yf, rf, finite = _finite_parts(yf, rf)
        if not finite:  # a NaN or inf where the other is not: the worst, never hidden
            rels.append(math.inf)
            max_abs = math.inf
            cos_min = -1.0
        diff = yf - rf
        nr = _norm(rf)
        nd = _norm(diff)
        if finite:
            rels.append(nd / nr if nr > 0 else (0.0 if nd == 0 else math.inf))
            if diff.size:
                max_abs = max(max_abs, float(np.max(np.abs(diff))))
            ny = _norm(yf)
            if nd == 0:
                cos = 1.0  # identical (the division below may round to just under 1)
            elif ny > 0 and nr > 0:
                cos = min(1.0, max(-1.0, float(np.sum(yf * rf)) / (ny * nr)))
            else:
                cos = 0.0
            cos_min = min(cos_min, cos)
        if logits:
            a = np.asarray(y)
            b = np.asarray(r)
            ya = a.reshape(-1, a.shape[-1]).argmax(axis=1)
            ra = b.reshape(-1, b.shape[-1]).argmax(axis=1)
            agree += int(np.sum(ya == ra)) if finite else 0
            rows += int(ya.size)
    return Comparison(len(rels), float(statistics.median(rels)) if rels else 0.0,
                      max(rels) if rels else 0.0, max_abs, cos_min,
                      (agree / rows) if logits and rows else None)


def _norm(x: np.ndarray[Any, Any]) -> float:
    """The L2 norm, without BLAS (whose threads contend with onnxruntime's: 100x slower)."""
    return math.sqrt(float(np.sum(x * x)))


def _finite_parts(y: np.ndarray[Any, Any], r: np.ndarray[Any, Any]
                  ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], bool]:
    """``y`` and ``r`` with the positions where both hold the same infinity or both NaN set
    to 0 (equal, and out of the norms), and whether every other position is finite."""
    if np.isfinite(y).all() and np.isfinite(r).all():
        return y, r, True
    same = (y == r) | (np.isnan(y) & np.isnan(r))
    finite = bool((same | (np.isfinite(y) & np.isfinite(r))).all())
    drop = same & ~np.isfinite(r)
    return np.where(drop, 0.0, y), np.where(drop, 0.0, r), finite


def output_quality(name: str, got: Sequence[np.ndarray[Any, Any]],
                   ref: Sequence[np.ndarray[Any, Any]], *, logits: bool) -> OutputQuality:
    """Compare one output's values over requests with the reference (``validate``'s record of it).

    >>> a = [np.array([[1.0, 2.0, 3.0]])]
    >>> q = output_quality("y", a, a, logits=True)
    >>> q.rel_l2_max, q.max_abs, q.cosine_min, q.top1_agreement
    (0.0, 0.0, 1.0, 1.0)
    """
    c = compare(got, ref, logits=logits, name=name)
    return OutputQuality(name, c.n, c.rel_l2_median, c.rel_l2_max, c.max_abs, c.cosine_min,
                         c.top1)


def quality_of(got: Sequence[Sequence[np.ndarray[Any, Any]]],
               ref: Sequence[Sequence[np.ndarray[Any, Any]]], graph: Graph
               ) -> dict[str, float]:
    """The worst quality over every output of ``graph`` and every request: ``got`` and
    ``ref`` hold per request the outputs in ``graph.outputs`` order. ``rel_l2`` and
    ``max_abs`` are the largest, ``cosine`` and ``top1`` the lowest; ``top1`` only when
    some output looks like logits.

    >>> from placewise.graph.ir import Tensor
    >>> from placewise.units import DType
    >>> g = Graph.build("g", [Tensor("x", (2, 3), DType.FP32)], [], ["x"], ["x"])
    >>> ref = [[np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]])]]
    >>> quality_of(ref, ref, g)
    {'rel_l2': 0.0, 'cosine': 1.0, 'max_abs': 0.0}
    """
    if len(got) != len(ref):
        raise PlacewiseError(f"{len(got)} requests' outputs against {len(ref)} references")
    per_output = []
    for j, name in enumerate(graph.outputs):
        c = compare([r[j] for r in got], [r[j] for r in ref],
                    logits=looks_like_logits(graph, name), name=name)
        per_output.append((c.rel_l2_max, c.cosine_min, c.max_abs, c.top1))
    return worst_quality(per_output)


def worst_quality(per_output: Iterable[tuple[float, float, float, float | None]]
                  ) -> dict[str, float]:
    """The worst output's figures from ``(rel_l2 max, cosine min, max_abs, top1 or None)``
    per output, named as quality budgets name them (``top1`` only when some output has it).

    >>> worst_quality([(0.1, 0.99, 2.0, None), (0.2, 0.999, 1.0, 0.9)])
    {'rel_l2': 0.2, 'cosine': 0.99, 'max_abs': 2.0, 'top1': 0.9}
    """
    out: dict[str, float] = {"rel_l2": 0.0, "cosine": 1.0, "max_abs": 0.0}
    top1: list[float] = []
    for rel, cos, mx, t1 in per_output:
        out["rel_l2"] = max(out["rel_l2"], rel)
        out["cosine"] = min(out["cosine"], cos)
        out["max_abs"] = max(out["max_abs"], mx)
        if t1 is not None:
            top1.append(t1)
    if top1:
        out["top1"] = min(top1)
    return out


def looks_like_logits(graph: Graph, name: str) -> bool:
    """Whether tensor ``name`` looks like logits: float, at least 2-D with a last dimension
    of at least 2, made by a contraction op."""
    t = graph.tensor(name)
    if not t.dtype.is_float or len(t.shape) < 2:
        return False
    last = t.shape[-1]
    if not isinstance(last, int) or last < 2:
        return False
    prod = graph.producer(name)
    return prod is not None and prod.kind in GEMM_KINDS
