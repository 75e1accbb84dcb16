"""``promote``: run an incumbent and a candidate plan (or plan set) interleaved on the same
replayed traffic, for real on this machine, and let the guardrail (``adapt.guardrail``)
decide whether the candidate replaces the incumbent.

**Refused before anything runs** (``InputError``): a candidate made for another model (a
plan's graph fingerprint, a plan set's model fingerprint) or another machine than the
incumbent, either made for another machine than this one, or one that does not match the
last-known-good store's current entry (``adapt.store``).

**Running.** Both are opened with ``adapt.serving.open_service`` (resident executors,
every bucket of a plan set) and kept alive side by side for a round. The traffic is a shape
trace (``--trace``, ``adapt.trace``; its first ``requests`` requests) or, for two plain
plans, requests at the incumbent's batch arriving at a fixed interval: twice the slower
arm's median service time measured in the warm-up (on spaced requests), so that neither arm is driven past half
its capacity; by default as many as make each block last about ``BLOCK_S`` (at least
``MIN_REQUESTS``, at most ``MAX_REQUESTS``): a block of a few milliseconds is at the mercy
of one time slice of another process, and one of 50 ms is not. The traffic is cut into
``blocks`` consecutive slices; slice ``i`` is served by both arms, one right after the
other (interleaved blocks, A/B, B/A, A/B, ...: the order alternates between pairs so that
neither arm always runs first), each slice's arrivals rebased to the start of its block,
so both arms see exactly the same requests at the same offsets. Before the timed blocks
each arm serves ``warmup`` requests untimed.

**Rounds.** The block pairs are split over ``rounds`` rounds (default 2 when each gets at
least 6 pairs), each on freshly started services of both arms: two instances of the same
plan differ by a few percent, and the guardrail's replication check
(``adapt.guardrail``) asks that every round clear the threshold, so that one lucky pair
of instances cannot promote a candidate.

**Quality.** The candidate's outputs on generated inputs (two per bucket, from ``seed``,
at the bucket's shape) are compared with the single-device fp32 reference
(``validate.quality``) and held against the candidate's precision budget (its plan's
``PrecisionRecord``; ``precision.policy.DEFAULT_BUDGET`` when it records none); a plan
whose own record estimates an error beyond its budget fails too.

**The record** (``DecisionRecord``): the guardrail's decision, reason, checks and figures;
both arms' identity (fingerprints, the validator header fields), latency summaries and
stable tags, the tags that differ between them (``runtime.telemetry.tag_differences``);
the traffic; the quality; what the store did. With a store: an empty store first keeps
the incumbent; a promotion keeps the candidate as the new last-known-good, with the
decision in its header; every decision is logged in the store.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from placewise.adapt.guardrail import Decision, decide, min_pairs
from placewise.adapt.planset import load_plan_or_set
from placewise.adapt.serving import open_service
from placewise.adapt.store import Header, LastKnownGood, identity_of, mismatch, now_utc
from placewise.adapt.trace import ShapeTrace, load_shape_trace
from placewise.errors import InputError
from placewise.hardware.probe import load_local
from placewise.precision.metrics import quality_of
from placewise.precision.policy import DEFAULT_BUDGET, QualityBudget
from placewise.runtime.telemetry import STABLE_TAG_KEYS, tag_differences
from placewise.validate.quality import reference_outputs

if TYPE_CHECKING:
    from placewise.adapt.serving import Service
    from placewise.hardware.spec import Machine

__all__ = ["BLOCK_S", "FORMAT", "MAX_REQUESTS", "MIN_REQUESTS", "Arm", "DecisionRecord", "QualityResult", "promote", "quality_check"]

FORMAT = "placewise-decision"
#: the default length of one block of generated traffic, and the bounds of its request count
BLOCK_S = 0.05
MIN_REQUESTS, MAX_REQUESTS = 200, 20_000
Progress = Callable[[str, float], None]
#: stable tags two arms may differ in: what makes them two plans
_ARM_KEYS = ("plan_fingerprint", "calibration_fingerprint", "threads")


@dataclass(frozen=True)
class QualityResult:
    """The candidate's measured output quality against its budget (module docstring)."""

    holds: bool
    metric: str
    value: float
    limit: float
    measured: dict[str, float]
    error: float
    requests: int
    text: str

    def to_json(self) -> dict[str, Any]:
        return {"holds": self.holds, "budget": f"{self.metric}={self.value:g}",
                "limit": self.limit, "measured": dict(self.measured), "error": self.error,
                "requests": self.requests, "text": self.text}


@dataclass(frozen=True)
class Arm:
    """One side of the comparison: its ``role`` (``incumbent`` / ``candidate``), file,
    identity (``Header``), latency figures over the timed blocks, the requests completed
    of those that arrived, its measured warm-up service time and its stable tags."""

    role: str
    file: str
    header: Header
    p50_s: float
    p99_s: float
    mean_s: float
    completed: int
    arrived: int
    service_s: float
    tags: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        h = self.header.to_json()
        h.pop("decision", None)
        return {"role": self.role, "file": self.file, "identity": h,
                "p50_s": _num(self.p50_s), "p99_s": _num(self.p99_s),
                "mean_s": _num(self.mean_s), "completed": self.completed,
                "arrived": self.arrived, "warmup_service_s": _num(self.service_s),
                "tags": dict(self.tags)}


@dataclass(frozen=True)
class DecisionRecord:
    """What ``promote`` decided and why (module docstring)."""

    guardrail: Decision
    incumbent: Arm
    candidate: Arm
    quality: QualityResult
    traffic: dict[str, Any]
    tag_differences: dict[str, tuple[str | None, str | None]]
    store: dict[str, Any] | None
    wall_s: float
    when: str
    notes: tuple[str, ...] = field(default=())

    @property
    def decision(self) -> str:
        return self.guardrail.decision

    @property
    def reason(self) -> str:
        return self.guardrail.reason

    def summary(self) -> dict[str, Any]:
        """The short form kept in a store's header and log."""
        s = self.guardrail.stats
        return {"decision": self.decision, "reason": self.reason, "when": self.when,
                "incumbent": self.incumbent.header.plan_fingerprint,
                "candidate": self.candidate.header.plan_fingerprint,
                "improvement": _num(s.improvement), "ci_low": _num(s.ci_low),
                "ci_high": _num(s.ci_high), "pairs": s.pairs,
                "p99_ratio": _num(s.p99_ratio), "quality_holds": self.quality.holds}

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": 1, **self.guardrail.to_json(),
                "incumbent": self.incumbent.to_json(), "candidate": self.candidate.to_json(),
                "quality": self.quality.to_json(), "traffic": dict(self.traffic),
                "tags": {"incumbent": dict(self.incumbent.tags),
                         "candidate": dict(self.candidate.tags),
                         "differences": {k: list(v) for k, v in self.tag_differences.items()},
                         "allowed_to_differ": list(_ARM_KEYS)},
                "store": self.store, "wall_s": self.wall_s, "when": self.when,
                "notes": list(self.notes)}


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _check_args(requests: int | None, blocks: int, warmup: int, limit_s: float) -> None:
    for name, v, low in (("--requests", requests, 1), ("--blocks", blocks, 1),
                         ("--warmup", warmup, 0)):
        if v is None and name == "--requests":
            continue
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise InputError(f"must be an integer >= {low}, got {v!r}", place=name)
    if requests is not None and requests < blocks:
        raise InputError(f"{requests} requests cannot fill {blocks} blocks",
                         place="--requests")
    if not (limit_s > 0 and math.isfinite(limit_s)):
        raise InputError(f"the wall limit per block must be > 0 s, got {limit_s}",
                         place="limit_s")


def _identity(ref: str | os.PathLike[str]) -> tuple[Any, Header]:
    file = os.fspath(ref)
    obj = load_plan_or_set(file)
    return obj, identity_of(obj, file)


def _check_pair(inc: Header, cand: Header, machine_fp: str, cand_file: str,
                inc_file: str) -> None:
    """Refuse a candidate that is not comparable with the incumbent, or either made for
    another machine than this one (module docstring)."""
    for h, file in ((inc, inc_file), (cand, cand_file)):
        if h.machine_fingerprint != machine_fp:
            raise InputError(f"made for another machine (fingerprint "
                             f"{h.machine_fingerprint[:23]}, this machine's "
                             f"{machine_fp[:23]}): plan it again with --hw local",
                             file=file, place="fingerprints.machine")
    bad = mismatch(inc, cand)
    if bad is not None:
        raise InputError(bad[1].replace("the last-known-good's", "the incumbent's"),
                         file=cand_file, place=bad[0])


def quality_check(service: Service, plan_or_set: Any, *, seed: int = 0,
                  requests: int = 2) -> QualityResult:
    """The candidate's outputs against the fp32 reference on ``requests`` generated inputs
    per bucket, held against its precision budget (module docstring)."""
    # lazy: torch (runtime.opexec imports it) is heavy to import, loaded only when this runs
    from placewise.runtime.opexec import request_inputs

    plans = tuple(getattr(plan_or_set, "plans", None) or (plan_or_set,))
    records = [p.precision for p in plans if p.precision is not None]
    budget = (QualityBudget(records[0].budget_metric, records[0].budget_value)
              if records else DEFAULT_BUDGET)
    worst: dict[str, float] = {}
    n = 0
    for ex in service.executors.values():
        graph = ex.program.graph
        inputs = request_inputs(ex.source, graph, requests, seed)
        got = ex.run(inputs, phase="promote-quality")
        q = quality_of(got, reference_outputs(ex.source, graph, inputs), graph)
        n += len(inputs)
        for k, v in q.items():
            lower_better = k in ("rel_l2", "max_abs")
            if k not in worst or (v > worst[k] if lower_better else v < worst[k]):
                worst[k] = v
    if budget.metric not in worst:
        return QualityResult(False, budget.metric, budget.value, budget.limit, worst,
                             math.nan, n, f"the budget is on {budget.metric}, which these "
                             f"outputs do not have: quality cannot be shown to hold")
    err = budget.error(worst)
    holds = budget.holds(worst)
    text = (f"{budget.metric} error {err:.3g} against a limit of {budget.limit:.3g} "
            f"({budget.text()}) over {n} requests")
    over = [r for r in records if r.estimated_error > r.budget_limit * (1 + 1e-9)]
    if over:
        holds = False
        text += (f"; the plan's own precision record estimates {over[0].estimated_error:.3g}"
                 f", beyond its limit {over[0].budget_limit:.3g}")
    return QualityResult(holds, budget.metric, budget.value, budget.limit, worst, err, n, text)


def _generated(batch: int, requests: int, interval_s: float) -> ShapeTrace:
    return ShapeTrace(tuple(i * interval_s for i in range(requests)),
                      tuple({"batch": batch} for _ in range(requests)),
                      (0,) * requests, (0,) * requests)


def _burst(trace: ShapeTrace, n: int) -> ShapeTrace:
    """The first ``n`` requests of ``trace`` (cycled), all arriving at once."""
    idx = [i % len(trace) for i in range(n)]
    return ShapeTrace((0.0,) * n, tuple(trace.shapes[i] for i in idx),
                      tuple(trace.classes[i] for i in idx), (0,) * n)


@dataclass
class _Side:
    """One arm over the rounds: its current service and the thread pinning the service
    left behind (each service's in-process workers pin the calling thread; it is put back
    before each of its blocks), and what its blocks measured."""

    service: Any = None
    pin: set[int] | None = None
    blocks: list[np.ndarray] = field(default_factory=list)
    arrived: int = 0
    service_s: float = math.nan
    tags: dict[str, str] = field(default_factory=dict)

    def serve(self, trace: ShapeTrace, limit_s: float) -> Any:
        if self.pin is not None:
            os.sched_setaffinity(0, self.pin)
        return self.service.serve(trace, limit_s=limit_s)

    def run(self, piece: ShapeTrace, limit_s: float) -> None:
        """Serve one timed block and keep its completed requests' latencies."""
        blk = self.serve(piece, limit_s)
        lat = np.asarray(blk.latency_s, dtype=float)
        self.blocks.append(lat[np.isfinite(lat)])
        self.arrived += len(piece)
        if not self.tags:
            self.tags = dict(blk.tags)


def _open(side: _Side, obj: Any, machine: Machine, seed: int, stack: ExitStack) -> None:
    side.service = stack.enter_context(open_service(obj, machine=machine, seed=seed))
    side.pin = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


def _service_s(blk: Any) -> float:
    """The median service time (latency less queueing) of a served block."""
    svc = np.asarray(blk.latency_s) - np.asarray(blk.wait_s)
    svc = svc[np.isfinite(svc)]
    return float(np.median(svc)) if len(svc) else math.nan


def _warm(side: _Side, traffic: ShapeTrace | None, batch: int, warmup: int,
          limit_s: float, *, first: bool = True) -> None:
    """Untimed warm-up: ``warmup`` requests at once, then (generated traffic) as many
    spaced at twice their service time, whose median service time is the arm's (spaced
    requests find idle workers asleep, which back-to-back ones do not)."""
    if not warmup:
        return
    burst = _burst(traffic, warmup) if traffic is not None else _generated(batch, warmup, 0.0)
    service_s = _service_s(side.serve(burst, limit_s))
    if first:
        side.service_s = service_s
    if first and traffic is None and math.isfinite(side.service_s):
        spaced = _generated(batch, warmup, 2.0 * side.service_s)
        side.service_s = _service_s(side.serve(spaced, limit_s))


def _arm(role: str, file: str, header: Header, side: _Side) -> Arm:
    lat = np.concatenate(side.blocks) if side.blocks else np.zeros(0)

    def q(p: float) -> float:
        return float(np.quantile(lat, p)) if len(lat) else math.nan

    return Arm(role, file, header, q(0.5), q(0.99), float(lat.mean()) if len(lat) else
               math.nan, len(lat), side.arrived, side.service_s, side.tags)


def _files(incumbent: str | os.PathLike[str] | None, candidate: str | os.PathLike[str],
           lkg: LastKnownGood | None) -> tuple[str, str]:
    """The incumbent's file (the store's current entry when not given) and the
    candidate's."""
    if incumbent is None:
        cur = lkg.current() if lkg is not None else None
        if cur is None:
            raise InputError("give --incumbent, or a --store that holds a last-known-good "
                             "plan", place="--incumbent")
        incumbent = cur.path
    return os.fspath(incumbent), os.fspath(candidate)


def _load_traffic(trace: str | os.PathLike[str] | None, requests: int | None, blocks: int,
                  a_head: Header, b_head: Header) -> tuple[ShapeTrace | None, int]:
    """The replayed trace cut to ``requests`` (``None`` for generated traffic: plans
    only) and the request count (0: set after the warm-up)."""
    if trace is None:
        if a_head.kind == "planset" or b_head.kind == "planset":
            raise InputError("a plan set serves a mix of shapes: give the traffic with "
                             "--trace SHAPES.jsonl", place="--trace")
        return None, 0 if requests is None else requests
    shape_trace = load_shape_trace(trace)
    n = len(shape_trace) if requests is None else min(requests, len(shape_trace))
    if n < blocks:
        raise InputError(f"{n} requests cannot fill {blocks} blocks", file=shape_trace.file,
                         place="--blocks")
    return shape_trace.slice(0, n), n


def promote(incumbent: str | os.PathLike[str] | None, candidate: str | os.PathLike[str], *,
            requests: int | None = None, blocks: int = 20,
            trace: str | os.PathLike[str] | None = None,
            store: str | os.PathLike[str] | None = None, threshold: float = 0.05,
            p99_tolerance: float = 0.10, confidence: float = 0.95, warmup: int = 10,
            seed: int = 0, machine: Machine | None = None, limit_s: float = 60.0,
            rounds: int | None = None, progress: Progress | None = None) -> DecisionRecord:
    """Run ``incumbent`` (A) and ``candidate`` (B) interleaved and decide (module
    docstring). ``incumbent``: a plan or plan set file (``None``: the store's current
    last-known-good). ``requests``: requests per arm (default: the whole trace, or
    generated for blocks of about ``BLOCK_S``), in ``blocks`` block pairs over
    ``rounds`` rounds of fresh instances (default: 2 when each gets at least 6 pairs, else
    1). ``limit_s``: the wall limit of one block.
    Raises ``InputError`` for refused inputs (nothing runs), ``ExecutionError`` when a
    worker fails (nothing is left running)."""
    report: Progress = progress or (lambda _m, _f: None)
    _check_args(requests, blocks, warmup, limit_s)
    t_start = time.monotonic()
    lkg = LastKnownGood(store) if store is not None else None
    inc_file, cand_file = _files(incumbent, candidate, lkg)
    a_obj, a_head = _identity(inc_file)
    b_obj, b_head = _identity(cand_file)
    if machine is None:
        machine = load_local()  # before any executor pins this thread
    _check_pair(a_head, b_head, str(machine.fingerprint()), cand_file, inc_file)
    if lkg is not None:
        lkg.check_candidate(b_head, file=cand_file)
    shape_trace, n = _load_traffic(trace, requests, blocks, a_head, b_head)
    batch = max(1, int(getattr(a_obj, "batch", 1)))
    rounds = _rounds_of(rounds, blocks)
    side_a, side_b = _Side(), _Side()
    round_of: list[int] = []
    quality: QualityResult | None = None
    traffic_notes: dict[str, Any] = {}
    per = 0
    held = set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    try:
        for r in range(rounds):
            with ExitStack() as stack:  # fresh instances of both arms every round
                report(f"round {r + 1} of {rounds}: starting both arms", r / rounds)
                for side, obj in ((side_a, a_obj), (side_b, b_obj)):
                    _open(side, obj, machine, seed, stack)
                for side in (side_a, side_b):
                    _warm(side, shape_trace, batch, warmup, limit_s, first=r == 0)
                if quality is None:
                    report("checking the candidate's output quality", 0.05)
                    quality = quality_check(side_b.service, b_obj, seed=seed)
                if r == 0:
                    shape_trace, n, traffic_notes = _traffic(shape_trace, n, batch, blocks,
                                                             side_a, side_b, trace)
                    per = n // blocks
                assert shape_trace is not None
                mine = [i for i in range(blocks) if i * rounds // blocks == r]
                for i in mine:
                    piece = shape_trace.slice(i * per, (i + 1) * per if i < blocks - 1 else n)
                    for side in (side_a, side_b) if i % 2 == 0 else (side_b, side_a):
                        side.run(piece, limit_s)
                    round_of.append(r)
                    report(f"block pair {i + 1} of {blocks}", (i + 1) / blocks)
    finally:  # the in-process workers pin this thread: the caller gets its pinning back
        if held is not None:
            os.sched_setaffinity(0, held)
    assert quality is not None
    return _finish(side_a, side_b, a_head, b_head, inc_file, cand_file, quality, lkg,
                   traffic=traffic_notes | {"requests": n, "blocks": blocks,
                                            "block_requests": per, "warmup": warmup,
                                            "seed": seed, "rounds": rounds,
                                            "order": "A/B, B/A alternately per block pair"},
                   round_of=round_of, threshold=threshold, p99_tolerance=p99_tolerance,
                   confidence=confidence, seed=seed, t_start=t_start)


def _rounds_of(rounds: int | None, blocks: int) -> int:
    """The rounds of fresh instances: as given (each needs enough block pairs for an
    interval), or 2 when ``blocks`` gives each at least 6 pairs, else 1."""
    if rounds is None:
        return 2 if blocks >= 2 * min_pairs() else 1
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise InputError(f"must be an integer >= 1, got {rounds!r}", place="--rounds")
    if rounds > 1 and blocks // rounds < min_pairs():
        raise InputError(f"{blocks} block pairs over {rounds} rounds leave fewer than "
                         f"{min_pairs()} per round, too few for an interval (more --blocks, "
                         f"or --rounds 1)", place="--rounds")
    return rounds


def _traffic(shape_trace: ShapeTrace | None, n: int, batch: int, blocks: int, side_a: _Side,
             side_b: _Side, trace: str | os.PathLike[str] | None
             ) -> tuple[ShapeTrace, int, dict[str, Any]]:
    """The traffic both arms replay (module docstring), its size and description."""
    if shape_trace is not None:
        return shape_trace, n, {"source": "trace", "file": os.fspath(trace or ""),
                                "duration_s": shape_trace.duration_s,
                                "shapes": shape_trace.shape_counts()}
    slowest = max(side_a.service_s, side_b.service_s)
    interval = 2.0 * slowest if math.isfinite(slowest) and slowest > 0 else 1e-3
    if not n:
        n = max(blocks, min(MAX_REQUESTS, max(MIN_REQUESTS,
                                              math.ceil(blocks * BLOCK_S / interval))))
    return _generated(batch, n, interval), n, {
        "source": "generated", "interval_s": interval, "batch": batch,
        "rule": "twice the slower arm's warm-up median service time"}


def _finish(side_a: _Side, side_b: _Side, a_head: Header, b_head: Header, inc_file: str,
            cand_file: str, quality: QualityResult, lkg: LastKnownGood | None, *,
            traffic: dict[str, Any], round_of: list[int], threshold: float,
            p99_tolerance: float, confidence: float, seed: int, t_start: float
            ) -> DecisionRecord:
    """Decide, compare the tags, act on the store, and build the record."""
    notes: list[str] = []
    empty = [i for i, (x, y) in enumerate(zip(side_a.blocks, side_b.blocks, strict=True))
             if not len(x) or not len(y)]
    pairs_a = [x for i, x in enumerate(side_a.blocks) if i not in empty]
    pairs_b = [y for i, y in enumerate(side_b.blocks) if i not in empty]
    if empty:
        notes.append(f"{len(empty)} block pair(s) completed no request on one side within "
                     f"the block's wall limit and were left out")
    lost = sum(side.arrived - sum(len(b) for b in side.blocks) for side in (side_a, side_b))
    if lost > 0:
        notes.append(f"{lost} request(s) did not complete within their block's limit")
    rounds = [r for i, r in enumerate(round_of) if i not in empty]
    guard = decide(pairs_a, pairs_b, threshold=threshold, p99_tolerance=p99_tolerance,
                   quality_holds=quality.holds, confidence=confidence, seed=seed,
                   rounds=rounds if len(set(rounds)) > 1 else None)
    keys = [k for k in STABLE_TAG_KEYS if k not in _ARM_KEYS]
    diffs = tag_differences(side_a.tags, side_b.tags, keys=keys)
    if diffs:
        notes.append("the two arms ran under different stable tags: "
                     + "; ".join(f"{k}: {a!r} vs {b!r}" for k, (a, b) in diffs.items()))
    rec = DecisionRecord(guard, _arm("incumbent", inc_file, a_head, side_a),
                         _arm("candidate", cand_file, b_head, side_b), quality, traffic,
                         diffs, None, time.monotonic() - t_start, now_utc(), tuple(notes))
    if lkg is None:
        return rec
    return _act(rec, lkg, inc_file, cand_file)


def _act(rec: DecisionRecord, lkg: LastKnownGood, inc_file: str,
         cand_file: str) -> DecisionRecord:
    """Keep the incumbent in an empty store, the candidate when promoted; log it."""
    actions: list[str] = []
    cur = lkg.current()
    if cur is None:
        lkg.keep(inc_file, {"decision": {"decision": "initial", "when": rec.when,
                                         "reason": "the incumbent of the first decision"}})
        actions.append("kept the incumbent as the first last-known-good")
    elif cur.header.plan_fingerprint != rec.incumbent.header.plan_fingerprint:
        actions.append(f"note: the incumbent is not the store's current entry "
                       f"({cur.id})")
    if rec.decision == "promote":
        entry = lkg.keep(cand_file, {"decision": rec.summary()})
        actions.append(f"kept the candidate as last-known-good entry {entry.id}")
    lkg.record(rec.summary())
    now = lkg.current()
    store = {"dir": str(lkg.root), "actions": actions,
             "current": None if now is None else now.id,
             "current_file": str(lkg.current_path)}
    return replace(rec, store=store)

