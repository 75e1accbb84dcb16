"""Shape traces: replayed traffic whose input shapes vary (``SHAPES.jsonl``), and a seeded
generator of drifting traces.

**Format.** One JSON object per line (blank lines skipped)::

    {"t_s": 0.0123, "batch": 1, "seq": 128, "class": 0}

- ``t_s`` (required): the arrival, seconds from the start, ``>= 0`` and non-decreasing;
- ``batch``: the rows the request carries (an integer ``>= 1``; default 1);
- ``seq``: its sequence length (an integer ``>= 1``; optional: a model without a sequence
  axis has none, and then no line of the trace may have one);
- ``class``: its class index (an integer ``>= 0``, into the service's priorities;
  default 0);
- ``phase``: which phase of a generated trace it belongs to (an integer ``>= 0``;
  optional, for reports over time).

Any other key, a value of the wrong type, a time before the previous one or a trace longer
than ``MAX_REQUESTS`` (or larger than ``serve.arrivals.TRACE_MAX_BYTES``) is a
``SpecError`` naming the file, the line and the field.

**Drift.** ``drifting_trace`` draws Poisson arrivals at ``rate_rps`` and, per phase, a
shape mix that moves from mostly ``values[0]`` (probability ``majority``, the rest spread
evenly over the other values) to mostly ``values[-1]`` in equal steps: with
``axis="batch"`` the rows per request drift (batch mostly 1 that turns mostly 16), with
``axis="seq"`` the sequence length rises. Seeded: the same arguments give the same trace.

>>> tr = drifting_trace("batch", requests=200, phases=2, values=(1, 16), seed=1)
>>> len(tr), tr.shapes[0].keys() == {"batch"}, tr.phases[0], tr.phases[-1]
(200, True, 0, 1)
>>> first, last = tr.slice(0, 100), tr.slice(100, 200)
>>> sum(s["batch"] == 1 for s in first.shapes) > 60, sum(s["batch"] == 16 for s in last.shapes) > 60
(True, True)
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from placewise.errors import InputError, SpecError
from placewise.io import atomic_write_text, read_file_bytes
from placewise.serve.arrivals import TRACE_MAX_BYTES

__all__ = ["AXES", "MAX_REQUESTS", "ShapeTrace", "drifting_trace", "load_shape_trace",
           "save_shape_trace", "shape_key"]

#: the shape axes a trace may carry
AXES = ("batch", "seq")
#: the most requests a trace file may hold
MAX_REQUESTS = 2_000_000
_KEYS = ("t_s", "batch", "seq", "class", "phase")


def shape_key(shape: Mapping[str, int]) -> str:
    """A shape as text, axes in ``AXES`` order: ``batch=4,seq=128``.

    >>> shape_key({"seq": 128, "batch": 4})
    'batch=4,seq=128'
    """
    return ",".join(f"{a}={int(shape[a])}" for a in AXES if a in shape)


@dataclass(frozen=True)
class ShapeTrace:
    """Arrivals (``arrivals_s``, non-decreasing), each request's shape (``shapes``: ``batch``
    always, ``seq`` when the trace has one), class index (``classes``) and phase
    (``phases``; all 0 unless generated or given); ``file`` where it was read from."""

    arrivals_s: tuple[float, ...]
    shapes: tuple[dict[str, int], ...]
    classes: tuple[int, ...]
    phases: tuple[int, ...]
    file: str | None = None

    def __post_init__(self) -> None:
        n = len(self.arrivals_s)
        if not (len(self.shapes) == len(self.classes) == len(self.phases) == n):
            raise InputError("a trace needs one shape, class and phase per arrival",
                             place="trace")
        t = np.asarray(self.arrivals_s, dtype=float)
        if n and (not bool(np.isfinite(t).all()) or float(t.min()) < 0
                  or bool((np.diff(t) < 0).any())):
            raise InputError("arrival times must be finite, >= 0 and non-decreasing",
                             place="trace")

    def __len__(self) -> int:
        return len(self.arrivals_s)

    @property
    def axes(self) -> tuple[str, ...]:
        """The axes the trace's shapes carry."""
        return tuple(a for a in AXES if self.shapes and a in self.shapes[0])

    @property
    def duration_s(self) -> float:
        return float(self.arrivals_s[-1]) if self.arrivals_s else 0.0

    def slice(self, start: int, stop: int, *, rebase: bool = True) -> ShapeTrace:
        """Requests ``start:stop``; with ``rebase`` their times start at the first one's."""
        t = self.arrivals_s[start:stop]
        t0 = t[0] if (rebase and t) else 0.0
        return ShapeTrace(tuple(x - t0 for x in t), self.shapes[start:stop],
                          self.classes[start:stop], self.phases[start:stop], self.file)

    def shape_counts(self) -> dict[str, int]:
        """How many requests of each shape (``shape_key``), most frequent first."""
        return dict(Counter(shape_key(s) for s in self.shapes).most_common())

    def rows(self) -> int:
        """Rows carried by every request together."""
        return sum(int(s.get("batch", 1)) for s in self.shapes)


def _int_field(rec: Mapping[str, Any], key: str, lowest: int, default: int | None,
               file: str, place: str) -> int | None:
    v = rec.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < lowest:
        raise SpecError(f"{key!r} must be an integer >= {lowest}, got {v!r}", file=file,
                        place=place)
    return int(v)


def _record(line: str, file: str, no: int, last: float
            ) -> tuple[float, dict[str, int], int, int]:
    place = f"line {no}"
    try:
        rec = json.loads(line)
    except (json.JSONDecodeError, RecursionError) as exc:
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
        raise SpecError(f"not JSON ({msg})", file=file, place=place) from None
    if not isinstance(rec, dict):
        raise SpecError('expected an object like {"t_s": 0.01, "batch": 1}', file=file,
                        place=place)
    unknown = sorted(set(rec) - set(_KEYS))
    if unknown:
        raise SpecError(f"unknown field {unknown[0]!r} (known: {', '.join(_KEYS)})",
                        file=file, place=f"{place}: {unknown[0]}")
    t = rec.get("t_s")
    if isinstance(t, bool) or not isinstance(t, int | float) or not (
            math.isfinite(t) and t >= 0):
        raise SpecError(f"must be a number of seconds >= 0, got {t!r}", file=file,
                        place=f"{place}: t_s")
    if t < last:
        raise SpecError(f"arrival {t} is before the previous one ({last}): a trace is in "
                        f"time order", file=file, place=f"{place}: t_s")
    shape: dict[str, int] = {}
    for axis in AXES:
        v = _int_field(rec, axis, 1, 1 if axis == "batch" else None, file,
                       f"{place}: {axis}")
        if v is not None:
            shape[axis] = v
    cls = _int_field(rec, "class", 0, 0, file, f"{place}: class")
    phase = _int_field(rec, "phase", 0, 0, file, f"{place}: phase")
    assert cls is not None and phase is not None
    return float(t), shape, cls, phase


def load_shape_trace(path: str | os.PathLike[str]) -> ShapeTrace:
    """Read a ``SHAPES.jsonl`` trace (module docstring). ``SpecError`` naming the file,
    the line and the field for anything wrong; an empty trace is refused."""
    p = os.fspath(path)
    # a regular file only (a FIFO or a device would block or never end), bounded in size
    data = read_file_bytes(p, what="shape trace", limit_bytes=TRACE_MAX_BYTES, error=SpecError)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError("not UTF-8 text", file=p) from None
    times: list[float] = []
    shapes: list[dict[str, int]] = []
    classes: list[int] = []
    phases: list[int] = []
    last = 0.0
    seq_first: bool | None = None
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if len(times) >= MAX_REQUESTS:
            raise SpecError(f"more than {MAX_REQUESTS} requests", file=p, place=f"line {no}")
        t, shape, cls, phase = _record(line, p, no, last)
        has_seq = "seq" in shape
        if seq_first is None:
            seq_first = has_seq
        elif has_seq != seq_first:
            raise SpecError("every line gives 'seq' or none does (the first "
                            f"{'does' if seq_first else 'does not'})", file=p,
                            place=f"line {no}: seq")
        last = t
        times.append(t)
        shapes.append(shape)
        classes.append(cls)
        phases.append(phase)
    if not times:
        raise SpecError("the trace holds no requests", file=p)
    return ShapeTrace(tuple(times), tuple(shapes), tuple(classes), tuple(phases), p)


def save_shape_trace(trace: ShapeTrace, path: str | os.PathLike[str]) -> None:
    """Write ``trace`` as ``SHAPES.jsonl`` (atomically; ``load_shape_trace`` reads it back
    equal)."""
    lines = []
    for t, s, c, ph in zip(trace.arrivals_s, trace.shapes, trace.classes, trace.phases,
                           strict=True):
        rec: dict[str, Any] = {"t_s": float(t), **{a: int(s[a]) for a in AXES if a in s}}
        if c:
            rec["class"] = int(c)
        if ph:
            rec["phase"] = int(ph)
        lines.append(json.dumps(rec, separators=(",", ":")))
    atomic_write_text(path, "".join(x + "\n" for x in lines))


def _phase_weights(n_values: int, phases: int, majority: float) -> np.ndarray:
    """Per phase, the probability of each value: mostly the first, then mostly the last."""
    if n_values == 1:
        return np.ones((phases, 1))
    rest = (1.0 - majority) / (n_values - 1)
    start = np.full(n_values, rest)
    start[0] = majority
    end = np.full(n_values, rest)
    end[-1] = majority
    out = []
    for p in range(phases):
        f = p / (phases - 1) if phases > 1 else 0.0
        w = (1.0 - f) * start + f * end
        out.append(w / w.sum())
    return np.asarray(out)


def drifting_trace(axis: str = "batch", *, requests: int = 400, rate_rps: float = 100.0,
                   phases: int = 4, values: Sequence[int] = (1, 16), majority: float = 0.8,
                   fixed: Mapping[str, int] | None = None,
                   class_shares: Sequence[float] = (1.0,), seed: int = 0) -> ShapeTrace:
    """A seeded drifting trace (module docstring): ``requests`` Poisson arrivals at
    ``rate_rps`` in ``phases`` equal phases; ``axis`` (``batch`` or ``seq``) drifts over
    ``values`` from mostly the first to mostly the last (``majority``); ``fixed`` gives the
    other axes (default: ``batch`` 1 when ``axis`` is ``seq``); each request's class is
    drawn from ``class_shares``."""
    if axis not in AXES:
        raise InputError(f"unknown axis {axis!r} (known: {', '.join(AXES)})", place="axis")
    for name, v in (("requests", requests), ("phases", phases)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InputError(f"must be a positive integer, got {v!r}", place=name)
    if not (math.isfinite(rate_rps) and rate_rps > 0):
        raise InputError(f"the rate must be > 0, got {rate_rps}", place="rate_rps")
    vals = [int(v) for v in values]
    if not vals or min(vals) < 1:
        raise InputError(f"values must be integers >= 1, got {list(values)}", place="values")
    if not (0.0 < majority <= 1.0):
        raise InputError(f"majority must lie in (0, 1], got {majority}", place="majority")
    shares = np.asarray(class_shares, dtype=float)
    if not len(shares) or not bool(np.isfinite(shares).all()) or float(shares.min()) <= 0:
        raise InputError("class shares must be numbers > 0", place="class_shares")
    base = dict(fixed or ({"batch": 1} if axis == "seq" else {}))
    rng = np.random.default_rng(seed)
    times = np.cumsum(rng.exponential(1.0 / rate_rps, requests))
    times -= times[0]
    phase_of = np.minimum((np.arange(requests) * phases) // requests, phases - 1)
    weights = _phase_weights(len(vals), phases, majority)
    picks = np.array([rng.choice(len(vals), p=weights[p]) for p in phase_of.tolist()])
    classes = rng.choice(len(shares), size=requests, p=shares / shares.sum())
    shapes = tuple({**{a: int(base[a]) for a in AXES if a in base and a != axis},
                    axis: vals[k]} for k in picks.tolist())
    ordered = tuple({a: s[a] for a in AXES if a in s} for s in shapes)
    return ShapeTrace(tuple(float(x) for x in times), ordered,
                      tuple(int(c) for c in classes.tolist()),
                      tuple(int(p) for p in phase_of.tolist()))
