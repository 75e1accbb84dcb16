"""Reading a plan set file (``placewise.adapt.planset``): every field validated, every
fingerprint checked; ``SpecError`` naming the file, the place in it and the problem.

Loading never unpickles or evaluates anything: the file is parsed as JSON (depth and
number limits of ``placewise.io``), its records validated by strict pydantic models, and
its plans by ``placewise.plan_file.plan_from_json``.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from placewise.adapt.planset.mix import Mix
from placewise.adapt.planset.record import (
    FORMAT,
    Bucket,
    PlanSet,
    _doc_fingerprint,
    is_plan_set,
    parse_envelope,
)
from placewise.errors import SpecError
from placewise.io import MAX_JSON_BYTES, check_numbers, parse_json, read_file_bytes, validate_record
from placewise.plan import load_plan, plan_from_json
from placewise.runtime.planned import plan_fingerprint

__all__ = ["load_plan_or_set", "load_plan_set", "plan_set_from_json"]

Size = int


class _R(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class _BucketDoc(_R):
    name: str = Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$", max_length=200)
    lower: dict[str, int]
    upper: dict[str, int]
    plan_index: int = Field(ge=0)
    model_ref: str = Field(min_length=1)
    shapes: dict[str, list[int]] | None = None
    batch: int | None = Field(default=None, ge=1)
    predicted_latency_s: float = Field(ge=0)
    probability: float = Field(ge=0, le=1.000001)
    expected_padding_s: float


class _MixItem(_R):
    shape: dict[str, int]
    probability: float = Field(ge=0, le=1.000001)


class _MixDoc(_R):
    kind: Literal["distribution", "trace", "uniform"]
    source: str | None = None
    requests: int | None = Field(default=None, ge=1)
    items: list[_MixItem] = Field(min_length=1)


class _Next(_R):
    upper: dict[str, int]
    latency_s: float
    padding_s: float


class _PadRow(_R):
    shape: dict[str, int]
    upper: dict[str, int]
    own_latency_s: float
    served_latency_s: float
    padding_s: float
    probability: float = Field(ge=0, le=1.000001)
    next_bucket_up: dict[str, _Next]


class _GridRow(_R):
    shape: dict[str, int]
    latency_s: float
    placement_key: str
    probability: float = Field(ge=0, le=1.000001)


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)


class _Costs(_Open):
    horizon_requests: int
    compile_s_per_bucket: float
    memory_s_per_gib: float


class _Alt(_Open):
    edges: dict[str, list[int]]
    buckets: int
    expected_latency_s: float
    compile_term_s: float
    memory_term_s: float
    total_cost_s: float | None


class _Choice(_Open):
    method: str
    buckets: int
    edges: dict[str, list[int]]
    why: str
    considered: int
    costs: _Costs
    chosen: _Alt
    one_bucket: _Alt
    per_grid_point: _Alt
    alternatives: list[_Alt]


class _Memory(_R):
    weights_bytes: int
    weights_without_sharing_bytes: int
    other_peak_bytes: int
    resident_bytes: int
    capacity_bytes: int | None
    fits: bool
    devices: list[str]


class _Residency(_R):
    memories: dict[str, _Memory]
    fits: bool
    weights_bytes: int
    weights_without_sharing_bytes: int
    resident_bytes: int


class _Fingerprints(_R):
    machine: str
    calibration: str
    plans: list[str]
    bucket_plans: list[str]
    planset: str


class _Doc(_R):
    format: Literal["placewise-planset"]
    version: Literal[1]
    created_by: str
    model: str = Field(min_length=1)
    machine: str
    objective: Literal["latency", "throughput"]
    axes: list[Literal["batch", "seq"]] = Field(min_length=1, max_length=2)
    envelope: dict[str, list[int]]
    buckets: list[_BucketDoc] = Field(min_length=1)
    mix: _MixDoc
    choice: _Choice
    residency: _Residency
    padding: list[_PadRow]
    grid: list[_GridRow]
    plans: list[dict[str, Any]] = Field(min_length=1)
    bucket_plans: list[dict[str, Any] | None]
    fingerprints: _Fingerprints


def _err(file: str, place: str, problem: str) -> SpecError:
    return SpecError(problem, file=file, place=place)


def _plans(raw: list[Any], file: str, what: str) -> list[Any]:
    out: list[Any] = []
    for i, d in enumerate(raw):
        if d is None:
            out.append(None)
            continue
        try:
            out.append(plan_from_json(d, file=file))
        except SpecError as exc:
            raise _err(file, f"{what}[{i}]" + (f".{exc.place}" if exc.place else ""),
                       exc.problem) from None
    return out


def plan_set_from_json(data: Mapping[str, Any] | str | bytes, *, file: str | None = None
                       ) -> Any:
    """A ``PlanSet`` from its document (or text); ``SpecError`` on any problem."""
    file = file or "<plan set>"
    obj = parse_json(data, file=file, error=SpecError) if isinstance(data, str | bytes) \
        else data
    check_numbers(obj, file=file, error=SpecError)
    if not isinstance(obj, Mapping) or obj.get("format") != FORMAT:
        raise _err(file, "format", f"not a plan set (expected format {FORMAT!r})")
    doc: _Doc = validate_record(_Doc, dict(obj), file=file, error=SpecError)
    got = _doc_fingerprint(obj)
    if got != doc.fingerprints.planset:
        raise _err(file, "fingerprints.planset",
                   f"the document does not match its fingerprint ({got[:19]}... computed, "
                   f"{doc.fingerprints.planset[:19]}... recorded): the file was edited or "
                   f"is corrupt; plan the envelope again")
    try:
        env = parse_envelope([f"{a}={','.join(map(str, v))}" for a, v in doc.envelope.items()])
    except Exception as exc:
        raise _err(file, "envelope", str(getattr(exc, "problem", exc))) from None
    if list(env) != list(doc.axes) or env != doc.envelope:
        raise _err(file, "axes", "the axes and the envelope disagree")
    entries = _plans(doc.plans, file, "plans")
    own = _plans(doc.bucket_plans, file, "bucket_plans")
    if len(own) != len(doc.buckets):
        raise _err(file, "bucket_plans", f"{len(own)} bucket plans for "
                   f"{len(doc.buckets)} buckets")
    _check_fingerprints(doc, entries, own, file)
    buckets = tuple(Bucket(**b.model_dump()) for b in doc.buckets)
    bucket_plans = []
    for i, (b, p) in enumerate(zip(buckets, own, strict=True)):
        if b.plan_index >= len(entries):
            raise _err(file, f"buckets[{i}].plan_index",
                       f"{b.plan_index} is not one of the {len(entries)} plan entries")
        plan = p if p is not None else entries[b.plan_index]
        if plan.placement != entries[b.plan_index].placement:
            raise _err(file, f"bucket_plans[{i}]", "its placement is not its plan entry's")
        if b.batch is not None and plan.batch != b.batch:
            raise _err(file, f"buckets[{i}].batch",
                       f"{b.batch}, but its plan was made for batch {plan.batch}")
        bucket_plans.append(plan)
    _check_cover(doc, file)
    mix = Mix.from_json(doc.mix.model_dump())
    return PlanSet(model=doc.model, machine=doc.machine, axes=tuple(doc.axes), envelope=env,
                   buckets=buckets, plans=tuple(entries), bucket_plans=tuple(bucket_plans),
                   mix=mix, choice=dict(obj["choice"]), residency=dict(obj["residency"]),
                   padding=tuple(obj["padding"]), grid=tuple(obj["grid"]),
                   fingerprints=doc.fingerprints.model_dump(), objective=doc.objective,
                   created_by=doc.created_by)


def _check_fingerprints(doc: _Doc, entries: list[Any], own: list[Any], file: str) -> None:
    fps = doc.fingerprints
    if len(fps.plans) != len(entries) or len(fps.bucket_plans) != len(own):
        raise _err(file, "fingerprints", "one fingerprint per plan entry and bucket plan")
    for i, p in enumerate(entries):
        if plan_fingerprint(p) != fps.plans[i]:
            raise _err(file, f"plans[{i}]", "the plan does not match its fingerprint "
                       f"(fingerprints.plans[{i}]): the file was edited or is corrupt")
    for i, p in enumerate(own):
        plan = p if p is not None else entries[min(doc.buckets[i].plan_index,
                                                   len(entries) - 1)]
        if plan_fingerprint(plan) != fps.bucket_plans[i]:
            raise _err(file, f"bucket_plans[{i}]", "the plan does not match its fingerprint "
                       f"(fingerprints.bucket_plans[{i}])")
    for i, p in enumerate([*entries, *(q for q in own if q is not None)]):
        if p.fingerprints.machine != fps.machine or p.machine.name != doc.machine:
            raise _err(file, f"plans[{i}].fingerprints.machine",
                       "the plans of one plan set were made for different machines")
        if p.fingerprints.calibration != fps.calibration:
            raise _err(file, f"plans[{i}].fingerprints.calibration",
                       "the plans of one plan set were made with different calibrations")


def _check_cover(doc: _Doc, file: str) -> None:
    """Every grid point in at most one bucket's range and under some bucket's upper
    corner (its own bucket dropped: served in a covering one); every edge a grid value."""
    axes = list(doc.axes)
    hits: dict[tuple[int, ...], int] = {}
    for i, b in enumerate(doc.buckets):
        for a in axes:
            if a not in b.lower or a not in b.upper or set(b.upper) != set(axes):
                raise _err(file, f"buckets[{i}]", f"lower and upper must give every axis "
                           f"({', '.join(axes)})")
            if b.upper[a] not in doc.envelope[a] or b.lower[a] not in doc.envelope[a] \
                    or b.lower[a] > b.upper[a]:
                raise _err(file, f"buckets[{i}].upper.{a}",
                           "not a range of the envelope's values")
        ranges = [[v for v in doc.envelope[a] if b.lower[a] <= v <= b.upper[a]] for a in axes]
        for pt in itertools.product(*ranges):
            if pt in hits:
                raise _err(file, f"buckets[{i}]", f"grid point {pt} is also in bucket "
                           f"{doc.buckets[hits[pt]].name!r}")
            hits[pt] = i
    ups = [tuple(b.upper[a] for a in axes) for b in doc.buckets]
    missing = [pt for pt in itertools.product(*(doc.envelope[a] for a in axes))
               if pt not in hits and not any(all(x >= y for x, y in zip(u, pt, strict=True))
                                             for u in ups)]
    if missing:
        raise _err(file, "buckets", f"no bucket covers grid point {missing[0]}")


def load_plan_set(path: str | os.PathLike[str] | Mapping[str, Any], *,
                  file: str | None = None) -> Any:
    """Read a plan set file written by ``save_plan_set`` (or take its document);
    ``SpecError`` (file, place, problem) for a file that is not one, is corrupt, or whose
    fingerprints do not match."""
    if isinstance(path, Mapping):
        return plan_set_from_json(path, file=file)
    name = file or os.fspath(path)
    data = read_file_bytes(os.fspath(path), what="plan set", limit_bytes=MAX_JSON_BYTES,
                           error=SpecError)
    return plan_set_from_json(data, file=name)


def load_plan_or_set(path: str | os.PathLike[str]) -> Any:
    """A plan set or a plan file, each by its own checked loader: the one way every
    command that takes either (serve, promote, the store, the loop) loads it. A missing
    file, a FIFO or a device is refused by the plan loader (``InputError``)."""
    file = os.fspath(path)
    if is_plan_set(file):
        return load_plan_set(file)
    return load_plan(file)
