"""The plan set, its envelope and its document: ``PlanSet`` and ``Bucket``,
``parse_envelope``, the document and its fingerprints (``plan_set_to_json``,
``dumps_plan_set``, ``save_plan_set``) and ``is_plan_set`` (``placewise.adapt.planset``).

>>> parse_envelope(["batch=1,2,4", "seq=32..128:pow2"])
{'batch': [1, 2, 4], 'seq': [32, 64, 128]}
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from placewise.adapt.planset.choice import cover_point
from placewise.adapt.planset.mix import AXES, Mix
from placewise.errors import InputError
from placewise.io import atomic_write_text
from placewise.plan import Plan, plan_to_json
from placewise.runtime.planned import plan_fingerprint

__all__ = ["FORMAT", "MAX_AXIS_VALUES", "MAX_GRID_POINTS", "VERSION", "Bucket", "PlanSet",
           "dumps_plan_set", "is_plan_set", "parse_envelope", "plan_set_to_json",
           "save_plan_set"]

FORMAT = "placewise-planset"
VERSION = 1
#: at most this many values per axis and grid points in all
MAX_AXIS_VALUES = 16
MAX_GRID_POINTS = 64
_MAX_SIZE = 1 << 24

Progress = Callable[[str, float], None]
# ---- the envelope ---------------------------------------------------------------------------
def _int(text: str, place: str) -> int:
    t = text.strip()
    if not t.isdigit():
        raise InputError(f"expected a positive integer, got {t!r}", place=place)
    v = int(t)
    if not 1 <= v <= _MAX_SIZE:
        raise InputError(f"{v} is out of range (1 to {_MAX_SIZE})", place=place)
    return v


def _axis_values(spec: str, place: str) -> list[int]:
    if ".." not in spec:
        vals = [_int(x, place) for x in spec.split(",")] if spec.strip() else []
    else:
        rng, _, step = spec.partition(":")
        lo_t, _, hi_t = rng.partition("..")
        lo, hi = _int(lo_t, place), _int(hi_t, place)
        if lo > hi:
            raise InputError(f"range {lo}..{hi} is empty", place=place)
        step = step.strip() or "pow2"
        if step == "pow2":
            if lo & (lo - 1) or hi & (hi - 1):
                raise InputError(f"{lo}..{hi}:pow2 needs powers of two at both ends",
                                 place=place)
            vals, v = [], lo
            while v <= hi:
                vals.append(v)
                v *= 2
        elif step.startswith("+"):
            k = _int(step[1:], place)
            if (hi - lo) // k + 1 > MAX_AXIS_VALUES:
                raise InputError(f"{lo}..{hi}:+{k} has more than {MAX_AXIS_VALUES} values",
                                 place=place)
            vals = list(range(lo, hi + 1, k))
            if vals[-1] != hi:
                vals.append(hi)
        else:
            raise InputError(f"unknown step {step!r} (pow2, or +N)", place=place)
    if not vals:
        raise InputError("no values", place=place)
    if len(set(vals)) > MAX_AXIS_VALUES:
        raise InputError(f"more than {MAX_AXIS_VALUES} values", place=place)
    return sorted(set(vals))


def parse_envelope(items: Sequence[str]) -> dict[str, list[int]]:
    """``["batch=1,2,4,8,16", "seq=32..512:pow2"]`` -> ``{"batch": [...], "seq": [...]}``.

    An axis is ``batch`` or ``seq``; its values a comma list, ``LO..HI:pow2`` or
    ``LO..HI:+STEP`` (positive integers, sorted, without repeats). ``InputError`` (place
    ``--envelope ITEM``) for anything else, an axis given twice, or a grid of more than
    ``MAX_GRID_POINTS`` points.

    >>> parse_envelope(["batch=16,1,4", "seq=8..32:+8"])
    {'batch': [1, 4, 16], 'seq': [8, 16, 24, 32]}
    """
    if isinstance(items, str):
        items = [items]
    env: dict[str, list[int]] = {}
    for item in items:
        place = f"--envelope {item}"
        name, sep, spec = str(item).partition("=")
        name = name.strip()
        if not sep:
            raise InputError("expected AXIS=VALUES (e.g. batch=1,2,4 or seq=32..512:pow2)",
                             place=place)
        if name not in AXES:
            raise InputError(f"unknown axis {name!r} (axes: {', '.join(AXES)})", place=place)
        if name in env:
            raise InputError(f"axis {name!r} given twice", place=place)
        env[name] = _axis_values(spec, place)
    if not env:
        raise InputError("no axes", place="--envelope")
    n = math.prod(len(v) for v in env.values())
    if n > MAX_GRID_POINTS:
        raise InputError(f"{n} grid points; a plan set plans every one: at most "
                         f"{MAX_GRID_POINTS}", place="--envelope")
    return {a: env[a] for a in AXES if a in env}

# ---- buckets and the plan set -----------------------------------------------------------------
@dataclass(frozen=True)
class Bucket:
    """A contiguous range of the envelope's grid: ``lower``/``upper`` (inclusive; the
    smallest and largest grid value per axis; the plan is planned at ``upper``), the plan
    entry it shares (``plan_index``), the model reference at ``upper`` (``model_ref``, with
    ``shapes`` the input bindings and ``batch`` the plan's batch: what ``planning.
    load_graph`` and ``runtime.opexec.load_source`` take), the predicted latency of its
    plan, its probability under the mix and its ``expected_padding_s`` (the mix-weighted
    padding cost of the shapes it serves, per request of the whole mix)."""

    name: str
    lower: dict[str, int]
    upper: dict[str, int]
    plan_index: int
    model_ref: str
    shapes: dict[str, list[int]] | None
    batch: int | None
    predicted_latency_s: float
    probability: float = 0.0
    expected_padding_s: float = 0.0

    def covers(self, shape: Mapping[str, int]) -> bool:
        return all(shape.get(a, 1) <= u for a, u in self.upper.items())

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "lower": dict(self.lower), "upper": dict(self.upper),
                "plan_index": self.plan_index, "model_ref": self.model_ref,
                "shapes": self.shapes, "batch": self.batch,
                "predicted_latency_s": self.predicted_latency_s,
                "probability": self.probability,
                "expected_padding_s": self.expected_padding_s}


@dataclass(frozen=True)
class PlanSet:
    """Plans for a shape envelope (module docstring). ``plans``: the plan entries (unique
    placements among neighbours); ``bucket_plans``: each bucket's own plan at its upper
    corner (the placement of its entry); ``grid``: per grid point its predicted latency
    and placement key; ``padding``: per grid point its padding costs (``planset_choice.
    padding_table``); ``timing``: wall seconds (not stored in the file)."""

    model: str
    machine: str
    axes: tuple[str, ...]
    envelope: dict[str, list[int]]
    buckets: tuple[Bucket, ...]
    plans: tuple[Plan, ...]
    bucket_plans: tuple[Plan, ...]
    mix: Mix
    choice: dict[str, Any]
    residency: dict[str, Any]
    padding: tuple[dict[str, Any], ...]
    grid: tuple[dict[str, Any], ...]
    fingerprints: dict[str, Any]
    objective: str = "latency"
    created_by: str = ""
    timing: dict[str, Any] = field(default_factory=dict, compare=False)

    def bucket_for(self, shape: Mapping[str, int]) -> Bucket:
        """The smallest bucket covering ``shape`` (axis -> size; other keys ignored, a
        missing ``batch`` is 1); ``InputError`` above the envelope."""
        g = cover_point(self.axes, self.envelope, {a: v for a, v in shape.items()
                                                   if a in self.axes},
                        place=f"shape {dict(shape)}")
        for b in self.buckets:
            if all(b.lower[a] <= v <= b.upper[a] for a, v in zip(self.axes, g, strict=True)):
                return b
        # its own bucket was dropped (no mix probability): the covering one of least
        # predicted latency (``planset_choice.cover_of``)
        ups = [b for b in self.buckets
               if all(b.upper[a] >= v for a, v in zip(self.axes, g, strict=True))]
        if not ups:  # pragma: no cover - the loader checks every grid point is covered
            raise InputError(f"no bucket covers {dict(zip(self.axes, g, strict=True))}",
                             place="shape")
        return min(ups, key=lambda b: (b.predicted_latency_s, math.prod(b.upper.values()),
                                       tuple(b.upper.values())))

    def plan_of(self, bucket: Bucket | str | int) -> Plan:
        """The plan ``bucket`` is served with: planned at its upper corner, with the
        placement of its plan entry (``plans[bucket.plan_index]``)."""
        return self.bucket_plans[self._index(bucket)]

    def entry_of(self, bucket: Bucket | str | int) -> Plan:
        """The bucket's shared plan entry."""
        return self.plans[self.buckets[self._index(bucket)].plan_index]

    def _index(self, bucket: Bucket | str | int) -> int:
        if isinstance(bucket, int):
            return bucket
        name = bucket if isinstance(bucket, str) else bucket.name
        for i, b in enumerate(self.buckets):
            if b.name == name:
                return i
        raise InputError(f"the plan set has no bucket {name!r}", place="bucket")

    def fingerprint(self) -> str:
        """``sha256:`` of the plan set's document (what ``save_plan_set`` writes, without
        its own fingerprint)."""
        return str(self.fingerprints.get("planset") or _doc_fingerprint(_doc(self)))

# ---- the file ---------------------------------------------------------------------------------
def _doc(ps: PlanSet) -> dict[str, Any]:
    """The plan set's document without ``fingerprints.planset``."""
    entry_fps = [plan_fingerprint(p) for p in ps.plans]
    bucket_fps = [plan_fingerprint(p) for p in ps.bucket_plans]
    first = ps.plans[0].fingerprints if ps.plans else None
    return {
        "format": FORMAT, "version": VERSION, "created_by": ps.created_by, "model": ps.model,
        "machine": ps.machine, "objective": ps.objective, "axes": list(ps.axes),
        "envelope": ps.envelope, "buckets": [b.to_json() for b in ps.buckets],
        "mix": ps.mix.to_json(), "choice": ps.choice, "residency": _jsonable(ps.residency),
        "padding": list(ps.padding), "grid": list(ps.grid),
        "plans": [plan_to_json(p) for p in ps.plans],
        "bucket_plans": [None if fp == entry_fps[b.plan_index] else plan_to_json(p)
                         for b, p, fp in zip(ps.buckets, ps.bucket_plans, bucket_fps,
                                             strict=True)],
        "fingerprints": {"machine": first.machine if first else "",
                         "calibration": first.calibration if first else "",
                         "plans": entry_fps, "bucket_plans": bucket_fps},
    }


def _jsonable(obj: Any) -> Any:
    return json.loads(json.dumps(obj, sort_keys=True))


def _doc_fingerprint(doc: Mapping[str, Any]) -> str:
    body = dict(doc)
    body["fingerprints"] = {k: v for k, v in doc["fingerprints"].items() if k != "planset"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _with_fingerprints(ps: PlanSet, *, timing: dict[str, Any] | None = None) -> PlanSet:
    doc = _doc(ps)
    fps = {**doc["fingerprints"], "planset": _doc_fingerprint(doc)}
    return replace(ps, fingerprints=fps, timing=timing or ps.timing)


def plan_set_to_json(ps: PlanSet) -> dict[str, Any]:
    """The document ``save_plan_set`` writes."""
    doc = _doc(ps)
    doc["fingerprints"]["planset"] = _doc_fingerprint(doc)
    return doc


def dumps_plan_set(ps: PlanSet) -> str:
    """The file's text: ``format`` and ``version`` first (``is_plan_set`` reads only the
    head), then every other key in sorted order, deterministic."""
    doc = plan_set_to_json(ps)
    head = {"format": doc.pop("format"), "version": doc.pop("version")}
    text = json.dumps(head, indent=2)[:-2] + ",\n"
    body = json.dumps(doc, indent=2, sort_keys=True, allow_nan=False)
    return text + body[2:] + "\n"


def save_plan_set(ps: PlanSet, path: str | os.PathLike[str]) -> None:
    """Write ``ps`` to ``path`` atomically (deterministic JSON)."""
    atomic_write_text(os.fspath(path), dumps_plan_set(ps))


def is_plan_set(path_or_doc: str | os.PathLike[str] | Mapping[str, Any]) -> bool:
    """Whether a document (or the file) is a plan set: its ``format`` says so. A file that
    cannot be read or parsed is not one (its loader names the problem)."""
    if isinstance(path_or_doc, Mapping):
        return path_or_doc.get("format") == FORMAT
    try:
        # only a regular file is opened: a FIFO or a device would block or never end (the
        # plan loader then refuses it, naming what it is)
        if not stat.S_ISREG(os.stat(os.fspath(path_or_doc)).st_mode):
            return False
        with open(os.fspath(path_or_doc), "rb") as f:
            head = f.read(256)
    except OSError:
        return False
    return re.match(rb'\s*\{\s*"format"\s*:\s*"placewise-planset"', head) is not None
