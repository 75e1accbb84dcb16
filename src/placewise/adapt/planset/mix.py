"""Shape mixes for plan sets: a distribution of shapes (JSON or YAML weights) or a JSONL
trace of requests (weights are counts), and the mix rounded up onto an envelope's grid.

>>> m = Mix.from_weights({(("batch", 1),): 3.0, (("batch", 16),): 1.0}, kind="distribution",
...                      source=None)
>>> m.items
(({'batch': 1}, 0.75), ({'batch': 16}, 0.25))
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from placewise.adapt.planset.choice import Point, cover_point, grid_points
from placewise.adapt.trace import load_shape_trace
from placewise.errors import InputError
from placewise.io import MAX_JSON_BYTES, parse_json, parse_yaml, read_text

__all__ = ["AXES", "Mix", "grid_probabilities", "load_mix", "mix_of_trace"]

#: the shape axes an envelope may have
AXES = ("batch", "seq")
_MAX_SIZE = 1 << 24


# ---- the mix ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Mix:
    """A distribution of shapes: ``items`` (shape, probability), probabilities summing to
    1, one item per distinct shape, sorted; ``kind``: ``distribution`` (a file of weights),
    ``trace`` (a JSONL trace of requests; weights are counts) or ``uniform`` (every grid
    point alike, when no mix is given); ``requests``: a trace's count."""

    items: tuple[tuple[dict[str, int], float], ...]
    kind: str = "distribution"
    source: str | None = None
    requests: int | None = None

    @classmethod
    def from_weights(cls, weights: Mapping[tuple[tuple[str, int], ...], float], *,
                     kind: str, source: str | None, requests: int | None = None) -> Mix:
        total = sum(weights.values())
        if not total > 0:
            raise InputError("the weights sum to 0: no shape has a positive weight",
                             file=source)
        items = tuple((dict(k), w / total) for k, w in sorted(weights.items()) if w > 0)
        return cls(items, kind, source, requests)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "source": self.source, "requests": self.requests,
                "items": [{"shape": s, "probability": p} for s, p in self.items]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Mix:
        return cls(tuple((dict(i["shape"]), float(i["probability"])) for i in data["items"]),
                   str(data["kind"]), data.get("source"), data.get("requests"))


_MIX_KEYS = {"batch", "seq", "weight"}
_MAX_MIX_ITEMS = 1_000_000


def _shape_of(rec: Any, keys: set[str], *, file: str, place: str
              ) -> tuple[tuple[str, int], ...]:
    if not isinstance(rec, Mapping):
        raise InputError(f"expected an object, got {type(rec).__name__}", file=file,
                         place=place)
    unknown = sorted(set(rec) - keys)
    if unknown:
        raise InputError(f"unknown field {unknown[0]!r} (fields: {', '.join(sorted(keys))})",
                         file=file, place=place)
    shape = {}
    for a in AXES:
        v = rec.get(a, 1 if a == "batch" else None)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= _MAX_SIZE:
            raise InputError(f"{a} must be an integer from 1 to {_MAX_SIZE}, got {v!r}",
                             file=file, place=f"{place}.{a}")
        shape[a] = v
    return tuple(sorted(shape.items()))


def mix_of_trace(trace: Any) -> Mix:
    """The mix of a shape trace (``placewise.adapt.trace.ShapeTrace``): one weight per
    request."""
    counts: dict[tuple[tuple[str, int], ...], float] = {}
    for shape in trace.shapes:
        key = tuple(sorted((a, int(v)) for a, v in shape.items() if a in AXES))
        counts[key] = counts.get(key, 0.0) + 1.0
    if not counts:
        raise InputError("the trace holds no request", file=trace.file)
    return Mix.from_weights(counts, kind="trace", source=trace.file, requests=len(trace))


def load_mix(path: str | os.PathLike[str]) -> Mix:
    """A shape mix from ``path``: JSON or YAML, a list of ``{batch, seq, weight}`` (or an
    object whose ``mix`` is one), or a ``.jsonl`` trace of requests (``{t_s, batch, seq,
    class}`` per line, H4's shape trace; weights are counts). ``InputError`` naming file,
    place and problem for anything else: an empty mix, a negative, non-finite or missing
    weight, a size that is not a positive integer, an unknown field."""
    file = os.fspath(path)
    text = read_text(file, what="shape mix", limit_bytes=MAX_JSON_BYTES)
    if file.endswith(".jsonl"):
        return mix_of_trace(load_shape_trace(file))
    data = (parse_yaml(text, file=file) if file.endswith((".yaml", ".yml"))
            else parse_json(text, file=file))
    if isinstance(data, Mapping) and set(data) == {"mix"}:
        data = data["mix"]
    if not isinstance(data, list):
        raise InputError(f"a mix is a list of {{batch, seq, weight}}, not "
                         f"{type(data).__name__}", file=file)
    if not data:
        raise InputError("the mix is empty", file=file)
    if len(data) > _MAX_MIX_ITEMS:
        raise InputError(f"more than {_MAX_MIX_ITEMS} items", file=file)
    weights: dict[tuple[tuple[str, int], ...], float] = {}
    for i, rec in enumerate(data):
        place = f"[{i}]"
        shape = _shape_of(rec, _MIX_KEYS, file=file, place=place)
        w = rec.get("weight")
        if isinstance(w, bool) or not isinstance(w, int | float) or not (
                math.isfinite(w) and w >= 0):
            raise InputError(f"weight must be a finite number >= 0, got {w!r}", file=file,
                             place=f"{place}.weight")
        weights[shape] = weights.get(shape, 0.0) + float(w)
    return Mix.from_weights(weights, kind="distribution", source=file)


def grid_probabilities(mix: Mix | None, axes: Sequence[str],
                        envelope: Mapping[str, Sequence[int]]) -> dict[Point, float]:
    """The mix rounded up onto the grid (uniform over the grid without a mix)."""
    pts = grid_points(axes, envelope)
    if mix is None:
        return {p: 1.0 / len(pts) for p in pts}
    probs: dict[Point, float] = {}
    for i, (shape, p) in enumerate(mix.items):
        extra = sorted(set(shape) - set(axes) - {"batch"})
        if extra:
            raise InputError(f"the mix has axis {extra[0]!r}, which the envelope lacks "
                             f"(axes: {', '.join(axes)})", file=mix.source,
                             place=f"shape {shape}")
        g = cover_point(axes, envelope, shape, file=mix.source,
                        place=f"shape {i} {shape}")
        probs[g] = probs.get(g, 0.0) + p
    return probs
