"""Bucketed serving, simulated: a shape trace through the serve simulator (``serve.sim``)
with each bucket's predicted service (``serve.service.PlanService`` of the bucket's plan at
its own shape, the one evaluator), the same routing and padding counts as the real path
(``adapt.serving``).

Every request goes through one queue (admission, then class priority) and runs alone
(requests carry their own rows) as one batch of its bucket's shape: the simulator's
workload gives each request a shape index, its bucket, and asks ``service(1, bucket)``.
So that per-bucket percentiles come out of one run, the simulator's classes are
``class x buckets + bucket`` with the class's priority (the queue orders them exactly as it
orders the classes).

Padding is counted as ``adapt.serving`` counts it; its time is each request's padded share
of its bucket's predicted latency.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from placewise.adapt.serving import (
    BucketServed,
    Padding,
    bucket_index,
    bucket_rows,
    padding_of,
    route,
)
from placewise.adapt.trace import ShapeTrace
from placewise.cost.load import load_cost_model
from placewise.serve.policies import NoBatcher
from placewise.serve.real import Call
from placewise.serve.report import summarize
from placewise.serve.service import PlanService
from placewise.serve.sim import Workload, simulate

if TYPE_CHECKING:
    from placewise.hardware.spec import Machine
    from placewise.serve.queue import Admission
    from placewise.serve.sim import ServeResult, StageTimes

__all__ = ["SimulatedBlock", "simulate_trace"]


@dataclass(frozen=True)
class SimulatedBlock:
    """A simulated block: the figures (``result``, classes as the trace's), per bucket its
    share (no telemetry), the padding in all, and each bucket's predicted service."""

    result: ServeResult
    buckets: tuple[BucketServed, ...]
    padding: Padding
    service_s: dict[str, float]

    def to_json(self) -> dict[str, Any]:
        return {**summarize(self.result), "buckets": [b.to_json() for b in self.buckets],
                "padding": self.padding.to_json(), "service_s": dict(self.service_s)}


def _stages(rows: Sequence[tuple[Any, ...]], machine: Machine, calibration: Any,
            file: str | None) -> list[StageTimes]:
    """Each bucket's predicted service at its own shape."""
    cost_model = load_cost_model(machine, calibration)
    out = []
    for _name, _lo, _up, _idx, plan, model, shapes, _b in rows:
        svc = PlanService(plan, machine, cost_model, "same", model,
                          {k: tuple(v) for k, v in shapes.items()} if shapes else None,
                          file=file)
        out.append(svc(max(1, int(plan.batch))))
    return out


def simulate_trace(plan_or_planset: Any, trace: ShapeTrace, *, machine: Machine,
                   calibration: Any = None, priorities: Sequence[int] = (1,),
                   admission: Admission | None = None, in_flight: int = 1
                   ) -> SimulatedBlock:
    """Simulate serving ``trace`` with a ``Plan``, a ``PlanSet`` or either's file (module
    docstring) on ``machine`` with the cost model of ``calibration`` (the one the plans
    were made with). ``InputError`` for a shape no bucket serves, a class without a
    priority, or a calibration that is not the plans'."""
    ps, rows, file = bucket_rows(plan_or_planset)
    names = [r[0] for r in rows]
    uppers: list[Mapping[str, int]] = [r[2] for r in rows]
    batches = [int(u.get("batch") or max(1, int(r[4].batch))) for u, r in
               zip(uppers, rows, strict=True)]
    times, classes, lane_of, nrows, seqs = route(
        trace, lambda s: bucket_index(ps, names, {"batch": batches[0]}, s), len(priorities))
    nb = len(rows)
    stages = _stages(rows, machine, calibration, file)
    ext = classes * nb + lane_of
    prio = [int(priorities[c // nb]) for c in range(len(priorities) * nb)]
    r = simulate(Workload(times, ext, lane_of), lambda b, k: stages[int(k)], NoBatcher(),
                 admission=admission, priorities=prio, in_flight=in_flight)
    done_lane = r.classes % nb
    calls: list[Call] = []
    done = r.completed
    # the completed requests, in arrival order, are those of the first ``completed`` ...
    order = _completed_ids(r, ext)
    for i in order:
        k = int(lane_of[i])
        seq = uppers[k].get("seq")
        used = int(nrows[i]) * (int(seqs[i]) if seqs is not None and seq else 1)
        size = batches[k] * (int(seq) if seqs is not None and seq else 1)
        calls.append(Call(k, (int(i),), int(nrows[i]), used, size, math.nan,
                          float(stages[k].latency_s)))
    buckets = []
    for k, (name, lo, up, idx, *_rest) in enumerate(rows):
        lat = r.latency_s[done_lane == k]
        mine = [c for c in calls if c.lane == k]
        buckets.append(BucketServed(
            name, dict(lo), dict(up), int(idx), int((lane_of[: r.arrived] == k).sum()),
            len(lat), len(mine), float(np.quantile(lat, 0.5)) if len(lat) else math.nan,
            float(np.quantile(lat, 0.99)) if len(lat) else math.nan,
            float(lat.mean()) if len(lat) else math.nan, padding_of(mine, batches)))
    result = _as_trace_classes(r, nb)
    assert done == result.completed
    return SimulatedBlock(result, tuple(buckets), padding_of(calls, batches),
                          {n: float(s.latency_s) for n, s in zip(names, stages, strict=True)})


def _completed_ids(r: ServeResult, ext: np.ndarray) -> list[int]:
    """The completed requests' indices. Without losses every arrival completed; with
    losses the simulator keeps no ids, so each completed class is matched to its arrivals
    in order (exact for the padding counts, which depend only on the bucket and shape when
    every request of a bucket has one shape, and a first-come estimate otherwise)."""
    if r.completed == r.arrived:
        return list(range(r.arrived))
    out: list[int] = []
    pos: dict[int, list[int]] = {}
    for i, c in enumerate(ext[: r.arrived].tolist()):
        pos.setdefault(int(c), []).append(i)
    taken: dict[int, int] = {}
    for c in r.classes.tolist():
        j = taken.get(int(c), 0)
        out.append(pos[int(c)][j])
        taken[int(c)] = j + 1
    return out


def _as_trace_classes(r: ServeResult, nb: int) -> ServeResult:
    """``r`` with the simulator's classes folded back to the trace's."""
    def fold(counts: tuple[int, ...]) -> tuple[int, ...]:
        k = len(counts) // nb
        return tuple(sum(counts[c * nb:(c + 1) * nb]) for c in range(k))

    return dataclasses.replace(
        r, classes=(r.classes // nb).astype(np.int64),
        arrived_by_class=fold(r.arrived_by_class), rejected_by_class=fold(r.rejected_by_class),
        timed_out_by_class=fold(r.timed_out_by_class))
