"""Arrival processes: open-loop Poisson, bursty gamma inter-arrivals, a replayed trace.

Both return the arrival times (seconds from 0, increasing) of ``n`` requests, drawn from
``numpy.random.default_rng(seed)``: the same arguments give the same times.

>>> t = poisson_arrivals(1000.0, 5, seed=1)
>>> len(t), bool((t[1:] > t[:-1]).all())
(5, True)
>>> g = gamma_arrivals(1000.0, 3.0, 100_000, seed=1)
>>> round(float(g[-1] / len(g)) * 1000, 1)  # mean inter-arrival: 1 ms
1.0
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from placewise.errors import InputError

__all__ = ["TRACE_MAX_BYTES", "gamma_arrivals", "load_trace", "poisson_arrivals"]


def _check(rate_per_s: float, n: int) -> None:
    if not (isinstance(rate_per_s, int | float) and math.isfinite(rate_per_s)
            and rate_per_s > 0):
        raise InputError(f"the arrival rate must be a finite number > 0, got {rate_per_s!r}",
                         place="--rate")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InputError(f"the number of requests must be a positive integer, got {n!r}",
                         place="--requests")


def poisson_arrivals(rate_per_s: float, n: int, *, seed: int = 0) -> np.ndarray:
    """``n`` Poisson arrivals at ``rate_per_s`` (exponential inter-arrival times)."""
    _check(rate_per_s, n)
    rng = np.random.default_rng(seed)
    return np.cumsum(rng.exponential(1.0 / rate_per_s, n))


def gamma_arrivals(rate_per_s: float, cv: float, n: int, *, seed: int = 0) -> np.ndarray:
    """``n`` arrivals whose inter-arrival times are gamma distributed with mean
    ``1 / rate_per_s`` and coefficient of variation ``cv`` (``cv = 1``: Poisson; larger:
    burstier). Shape ``1 / cv**2``, scale ``cv**2 / rate_per_s``."""
    _check(rate_per_s, n)
    if not (isinstance(cv, int | float) and math.isfinite(cv) and cv > 0):
        raise InputError(f"the coefficient of variation must be a finite number > 0, got "
                         f"{cv!r}", place="--cv")
    rng = np.random.default_rng(seed)
    shape = 1.0 / (cv * cv)
    return np.cumsum(rng.gamma(shape, 1.0 / (shape * rate_per_s), n))


#: the largest trace file read (bytes): a trace is a list of arrivals, not a data set
TRACE_MAX_BYTES = 1 << 30


def load_trace(path: str | os.PathLike[str], classes: Sequence[str] = ("default",)
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, tuple[int, ...]]]]:
    """A trace of arrivals, one JSON object per line: ``{"t": 0.0123, "class": "chat",
    "shape": {"input_ids": [1, 128]}}``. ``t`` (seconds from the start, non-decreasing) is
    required; ``class`` must be one of ``classes`` (default: the first); ``shape`` (input
    name -> dims) where shapes vary. Blank lines are skipped. Returns the times, class
    indices, shape indices and the distinct shapes, smallest first (by elements over
    every input; "no shape given", ``{}``, is the first). A
    line that is not such an object is an ``InputError`` naming the file and the line.
    """
    p = os.fspath(path)
    try:
        size = os.path.getsize(p)
        if size > TRACE_MAX_BYTES:
            raise InputError(f"the trace is {size} bytes, more than {TRACE_MAX_BYTES}", file=p)
        fh = open(p, encoding="utf-8")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise InputError(f"cannot read the trace: {exc.strerror or exc}", file=p) from None
    index = {c: i for i, c in enumerate(classes)}
    shapes: list[dict[str, tuple[int, ...]]] = [{}]
    shape_index: dict[tuple[tuple[str, tuple[int, ...]], ...], int] = {(): 0}
    times: list[float] = []
    cls: list[int] = []
    shp: list[int] = []
    last = -math.inf
    with fh:
        try:
            for no, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                place = f"line {no}"
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise InputError(f"not JSON ({exc.msg} at column {exc.colno})", file=p,
                                     place=place) from None
                if not isinstance(rec, dict):
                    raise InputError("expected an object like {\"t\": 0.01}", file=p,
                                     place=place)
                unknown = set(rec) - {"t", "class", "shape"}
                if unknown:
                    raise InputError(f"unknown keys {sorted(unknown)} (known: t, class, "
                                     f"shape)", file=p, place=place)
                t = rec.get("t")
                if isinstance(t, bool) or not isinstance(t, int | float) or not (
                        math.isfinite(t) and t >= 0):
                    raise InputError(f"'t' must be a number of seconds >= 0, got {t!r}",
                                     file=p, place=place)
                if t < last:
                    raise InputError(f"arrival {t} is before the previous one ({last}): a "
                                     f"trace is in time order", file=p, place=place)
                last = float(t)
                name = rec.get("class", classes[0])
                if name not in index:
                    raise InputError(f"unknown class {name!r} (classes: "
                                     f"{', '.join(classes)}; declare it with --class)",
                                     file=p, place=place)
                key = _shape_key(rec.get("shape"), p, place)
                if key not in shape_index:
                    shape_index[key] = len(shapes)
                    shapes.append(dict(key))
                times.append(float(t))
                cls.append(index[name])
                shp.append(shape_index[key])
        except UnicodeDecodeError:
            raise InputError("the trace is not UTF-8 text", file=p) from None
    if not times:
        raise InputError("the trace holds no arrivals", file=p)
    # shape indices by size (elements over every input), so that the largest index of a
    # batch is its largest shape (a mixed batch is priced padded to it)
    order = sorted(range(len(shapes)), key=lambda i: (
        sum(math.prod(d) for d in shapes[i].values()), sorted(shapes[i].items())))
    rank = np.empty(len(shapes), dtype=np.int64)
    rank[order] = np.arange(len(shapes))
    return (np.asarray(times), np.asarray(cls, dtype=np.int64),
            rank[np.asarray(shp, dtype=np.int64)], [shapes[i] for i in order])


def _shape_key(shape: Any, file: str, place: str
               ) -> tuple[tuple[str, tuple[int, ...]], ...]:
    if shape is None:
        return ()
    if not isinstance(shape, dict) or not all(
            isinstance(k, str) and isinstance(v, list) and v and all(
                isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in v)
            for k, v in shape.items()):
        raise InputError("'shape' must map input names to lists of positive dims, e.g. "
                         "{\"x\": [1, 128]}", file=file, place=place)
    return tuple(sorted((k, tuple(v)) for k, v in shape.items()))
