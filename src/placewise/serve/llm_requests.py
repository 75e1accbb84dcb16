"""LLM requests for the serving simulator (``placewise.serve.llm``): the record, Poisson
arrivals with drawn lengths, and traces replayed from CSV (the Azure LLM inference trace) or
JSON lines.

>>> r = poisson_llm_requests(10.0, 2, "fixed:5", "lognormal:128,0.5", seed=1)
>>> r[0].prompt_tokens, r[0].output_tokens >= 1
(5, True)
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from placewise.errors import InputError
from placewise.io import read_text
from placewise.serve.arrivals import TRACE_MAX_BYTES, poisson_arrivals

__all__ = ["LLMRequest", "draw_lengths", "load_llm_trace", "poisson_llm_requests"]


@dataclass(frozen=True, slots=True)
class LLMRequest:
    """One request: arrives at ``arrival_s``, brings ``prompt_tokens`` and wants
    ``output_tokens`` (the first produced by its prefill)."""

    arrival_s: float
    prompt_tokens: int
    output_tokens: int


# --- lengths and generators -------------------------------------------------------------


def draw_lengths(spec: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` token counts (integers >= 1) from ``spec``: ``fixed:N``, ``uniform:A-B`` (both
    ends included) or ``lognormal:MEAN,SIGMA`` (log-normal of that mean and log-space
    sigma, rounded, at least 1).

    >>> rng = np.random.default_rng(0)
    >>> draw_lengths("fixed:7", 2, rng).tolist(), draw_lengths("uniform:2-2", 2, rng).tolist()
    ([7, 7], [2, 2])
    >>> x = draw_lengths("lognormal:512,1.0", 200_000, rng)
    >>> int(x.min()) >= 1, abs(float(x.mean()) / 512 - 1) < 0.02
    (True, True)
    """
    kind, _, arg = spec.partition(":")
    try:
        if kind == "fixed":
            return np.full(n, _positive_int(arg), dtype=np.int64)
        if kind == "uniform":
            lo, hi = (_positive_int(a) for a in arg.split("-"))
            if hi < lo:
                raise ValueError
            return rng.integers(lo, hi + 1, n).astype(np.int64)
        if kind == "lognormal":
            mean_s, sigma_s = arg.split(",")
            mean, sigma = float(mean_s), float(sigma_s)
            if not (math.isfinite(mean) and mean >= 1 and math.isfinite(sigma) and sigma >= 0):
                raise ValueError
            x = rng.lognormal(math.log(mean) - sigma * sigma / 2, sigma, n)
            return np.maximum(np.rint(x), 1).astype(np.int64)
    except ValueError:
        pass
    raise InputError(f"expected fixed:N, uniform:A-B or lognormal:MEAN,SIGMA (integers >= 1, "
                     f"MEAN >= 1, SIGMA >= 0), got {spec!r}", place="length distribution")


def _positive_int(s: str) -> int:
    v = int(s)
    if v < 1:
        raise ValueError
    return v


def poisson_llm_requests(rate_per_s: float, n: int, prompt: str, output: str, *,
                         seed: int = 0) -> list[LLMRequest]:
    """``n`` requests arriving as a Poisson process at ``rate_per_s``
    (``placewise.serve.arrivals.poisson_arrivals``) with prompt and output lengths drawn
    from the specs ``prompt`` and ``output`` (``draw_lengths``); the same arguments give the
    same requests.

    >>> r = poisson_llm_requests(10.0, 3, "fixed:5", "uniform:1-4", seed=1)
    >>> len(r), r[0].prompt_tokens, r[0].arrival_s < r[1].arrival_s
    (3, 5, True)
    """
    arrivals = poisson_arrivals(rate_per_s, n, seed=seed)
    rng = np.random.default_rng((seed, 1))
    p = draw_lengths(prompt, n, rng)
    o = draw_lengths(output, n, rng)
    return [LLMRequest(a, int(x), int(y))
            for a, x, y in zip(arrivals.tolist(), p.tolist(), o.tolist(), strict=True)]


# --- traces -------------------------------------------------------------------------------

_COLUMNS = {"arrival_s": ("arrival_s", "timestamp"),
            "prompt_tokens": ("prompt_tokens", "contexttokens"),
            "output_tokens": ("output_tokens", "generatedtokens")}


def load_llm_trace(path: str | os.PathLike[str]) -> list[LLMRequest]:
    """Requests replayed from a trace: CSV with a header, or JSON lines (a file whose first
    non-blank character is ``{``), with the fields ``arrival_s`` (or ``timestamp``),
    ``prompt_tokens`` (or ``ContextTokens``) and ``output_tokens`` (or ``GeneratedTokens``),
    names matched without regard to case: the Azure LLM inference trace
    (``TIMESTAMP,ContextTokens,GeneratedTokens``) loads as it is. Arrivals are seconds
    (numbers, kept as they are) or ISO datetimes (made seconds after the first); they must
    not decrease (a trace is in time order: an out-of-order line is an error, not sorted).
    Token counts are integers >= 1. Blank lines are skipped; a bad line is an
    ``InputError`` naming the file, the line and the problem.
    """
    p = os.fspath(path)
    # a byte-order mark (CSV files saved by Windows tools) is not part of the header
    text = read_text(p, what="LLM trace", limit_bytes=TRACE_MAX_BYTES).removeprefix("\ufeff")
    rows = _jsonl_rows(text, p) if text.lstrip()[:1] == "{" else _csv_rows(text, p)
    out: list[LLMRequest] = []
    first: dt.datetime | None = None
    last = -math.inf
    for no, rec in rows:
        place = f"line {no}"
        t, first = _arrival(rec["arrival_s"], first, bool(out) and first is None, p, place)
        if t < last:
            raise InputError(f"arrival {t} s is before the previous one ({last} s): a trace "
                             f"is in time order", file=p, place=place)
        last = t
        out.append(LLMRequest(t, _tokens(rec, "prompt_tokens", p, place),
                              _tokens(rec, "output_tokens", p, place)))
    if not out:
        raise InputError("the trace holds no requests", file=p)
    return out


def _jsonl_rows(text: str, p: str) -> Iterator[tuple[int, dict[str, Any]]]:
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"not JSON ({exc.msg} at column {exc.colno})", file=p,
                             place=f"line {no}") from None
        if not isinstance(rec, dict):
            raise InputError('expected an object like {"arrival_s": 0.5, "prompt_tokens": '
                             '512, "output_tokens": 128}', file=p, place=f"line {no}")
        yield no, _pick({str(k).lower(): v for k, v in rec.items()}, p, f"line {no}")


def _csv_rows(text: str, p: str) -> Iterator[tuple[int, dict[str, Any]]]:
    reader = csv.reader(io.StringIO(text))
    header: list[str] | None = None
    try:
        for row in reader:
            no = reader.line_num
            if not any(c.strip() for c in row):
                continue
            if header is None:
                header = [c.strip().lower() for c in row]
                _pick(dict.fromkeys(header, ""), p, f"line {no} (the header)")
                continue
            if len(row) != len(header):
                raise InputError(f"{len(row)} fields where the header has {len(header)}",
                                 file=p, place=f"line {no}")
            yield no, _pick(dict(zip(header, row, strict=True)), p, f"line {no}")
    except csv.Error as exc:
        raise InputError(f"not CSV ({exc})", file=p, place=f"line {reader.line_num}") from None
    if header is None:
        raise InputError("the trace holds no requests", file=p)


def _pick(rec: dict[str, Any], p: str, place: str) -> dict[str, Any]:
    out = {}
    for key, names in _COLUMNS.items():
        found = [n for n in names if n in rec]
        if not found:
            raise InputError(f"no {' or '.join(names)} field", file=p, place=place)
        out[key] = rec[found[0]]
    return out


def _arrival(raw: Any, first: dt.datetime | None, after_seconds: bool, p: str, place: str
             ) -> tuple[float, dt.datetime | None]:
    """Seconds of an arrival: a number, or a datetime counted from ``first``."""
    if isinstance(raw, str):
        try:
            raw = float(raw)
        except ValueError:
            return _since(raw, first, after_seconds, p, place)
    if first is not None:
        raise InputError(f"the arrival {raw!r} is not a datetime like the first line's",
                         file=p, place=place)
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not (
            math.isfinite(raw) and raw >= 0):
        raise InputError(f"the arrival must be seconds >= 0, got {raw!r}", file=p, place=place)
    return float(raw), None


def _since(raw: str, first: dt.datetime | None, after_seconds: bool, p: str, place: str
           ) -> tuple[float, dt.datetime]:
    try:
        when = dt.datetime.fromisoformat(raw.strip())
    except ValueError:
        when = None
    if when is None:
        raise InputError(f"the arrival {raw!r} is neither seconds nor an ISO datetime",
                         file=p, place=place)
    if after_seconds:
        raise InputError(f"the arrival {raw!r} is a datetime where the lines before give "
                         f"seconds", file=p, place=place)
    first = first or when
    if (first.tzinfo is None) != (when.tzinfo is None):
        raise InputError("the trace mixes datetimes with and without a time zone", file=p,
                         place=place)
    return (when - first).total_seconds(), first


def _tokens(rec: dict[str, Any], key: str, p: str, place: str) -> int:
    raw = rec[key]
    v: Any = raw
    if isinstance(raw, str):
        try:
            v = int(raw.strip())
        except ValueError:
            v = None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise InputError(f"{key} must be an integer >= 1, got {raw!r}", file=p, place=place)
    return v
