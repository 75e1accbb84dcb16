"""precision.metrics: per-output comparison, the worst over a graph's outputs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from placewise.errors import PlacewiseError
from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
from placewise.precision.metrics import METRICS, compare, looks_like_logits, quality_of
from placewise.units import DType
from placewise.validate import output_quality as validate_output_quality
from placewise.validate.quality import looks_like_logits as validate_looks_like_logits


def _graph() -> Graph:
    """x -> linear -> logits [2, 4]; x -> relu -> feat [2, 3]."""
    tensors = [Tensor("x", (2, 3), DType.FP32, role=Role.INPUT),
               Tensor("w", (4, 3), DType.FP32, role=Role.PARAM),
               Tensor("logits", (2, 4), DType.FP32, role=Role.OUTPUT),
               Tensor("feat", (2, 3), DType.FP32, role=Role.OUTPUT)]
    ops = [Op("fc", OpKind.LINEAR, ("x", "w"), ("logits",)),
           Op("act", OpKind.RELU, ("x",), ("feat",))]
    return Graph.build("g", tensors, ops, ["x"], ["logits", "feat"])


def test_validate_keeps_its_names() -> None:
    assert validate_looks_like_logits is looks_like_logits
    q = validate_output_quality("y", [np.ones(3)], [np.ones(3)], logits=False)
    assert (q.output, q.rel_l2_max, q.top1_agreement) == ("y", 0.0, None)


def test_logits_are_contraction_outputs() -> None:
    g = _graph()
    assert looks_like_logits(g, "logits")
    assert not looks_like_logits(g, "feat")


def test_quality_of_is_the_worst_over_outputs_and_requests() -> None:
    g = _graph()
    rng = np.random.default_rng(0)
    ref = [[rng.standard_normal((2, 4)), rng.standard_normal((2, 3))] for _ in range(3)]
    got = [[a.copy(), b.copy()] for a, b in ref]
    got[1][1] = got[1][1] + 0.5  # request 1, output feat: the worst rel_l2 / max_abs
    got[2][0] = got[2][0] * 1.01  # request 2, logits: scaled (cosine 1, argmax kept)
    q = quality_of(got, ref, g)
    assert set(q) == set(METRICS)
    feat = compare([r[1] for r in got], [r[1] for r in ref], logits=False)
    assert q["rel_l2"] == feat.rel_l2_max > 0.01
    assert q["max_abs"] == pytest.approx(0.5)
    assert q["cosine"] == feat.cosine_min < 1.0
    assert q["top1"] == 1.0
    swapped = [[-a, b] for a, b in ref]  # every argmax of the logits moves
    assert quality_of(swapped, ref, g)["top1"] < 0.5


def test_no_top1_without_logits_and_errors() -> None:
    g = Graph.build("h", [Tensor("x", (2, 3), DType.FP32)], [], ["x"], ["x"])
    ref = [[np.ones((2, 3))]]
    assert "top1" not in quality_of(ref, ref, g)
    assert math.isinf(quality_of([[np.ones((2, 3))]], [[np.zeros((2, 3))]], g)["rel_l2"])
    with pytest.raises(PlacewiseError, match="shape"):
        quality_of([[np.ones((2, 4))]], ref, g)
    with pytest.raises(PlacewiseError, match="requests"):
        quality_of([], ref, g)


def test_nan_and_inf_are_never_hidden() -> None:
    ref = [np.array([[1.0, 2.0, 3.0]]), np.array([[1.0, -np.inf, np.nan]])]
    same = compare(ref, ref, logits=True)
    assert (same.rel_l2_max, same.max_abs, same.cosine_min, same.top1) == (0.0, 0.0, 1.0, 1.0)
    got = [np.array([[1.0, np.nan, 3.0]]), ref[1]]
    bad = compare(got, ref, logits=True)
    assert math.isinf(bad.rel_l2_max) and math.isinf(bad.max_abs)
    assert bad.cosine_min == -1.0 and bad.top1 == 0.5
    g = Graph.build("h", [Tensor("x", (1, 3), DType.FP32)], [], ["x"], ["x"])
    assert math.isinf(quality_of([[got[0]]], [[ref[0]]], g)["rel_l2"])
