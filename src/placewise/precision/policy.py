"""Precision as the user's policy, with quality evidence before any lowering.

A ``Policy`` says which precisions a plan may use:

- ``keep`` (the default): every vertex computes at the model's own precision
  (``natural_dtype``: the widest float dtype among its tensors; fp32 when it has none);
- ``fp32``, ``fp16``, ``bf16``, ``int8``: that dtype is allowed wherever a device computes
  in it and the quality budget holds (a dtype wider than the model's own needs no evidence);
- ``mixed``: fp16, bf16 and int8 per vertex, within the budget.

A ``QualityBudget`` (``METRIC=VALUE``; metrics ``rel_l2``, ``cosine``, ``max_abs``,
``top1``; default ``DEFAULT_BUDGET``, ``rel_l2=0.01``: outputs within 1% relative L2 of the
fp32 reference) bounds the output error of the whole plan. Its ``error`` of a quality
measurement is the metric turned into "lower is better" (``1 - cosine``, ``1 - top1``).

Evidence comes before the search (``sensitivity_table``): every vertex that some device
computes faster at a lower precision is emulated alone at it on this CPU
(``placewise.precision.emulate.Emulator``), on representative inputs, and its output error
recorded. Only vertices whose error is within the budget are admitted, greedily by time
gain per unit of error while the combined estimate (``QualityBudget.combine``) stays within
it; the search chooses among the admitted precisions; the chosen assignment is emulated
again as a whole before the plan is written, and while it breaks the budget the lowered
vertex with the largest error falls back to its own precision and the search runs again
(``plan_with_policy``). A lowered plan that does not beat the plan at the model's own
precision (searched too) gives way to it: lowering must pay.

The evidence has an ``EvidenceBudget``: a number of emulated runs of the model (the
reference, one per probe, one per re-check; the deterministic work budget the command
scales to ``--time-limit``) and a wall-clock deadline (the backstop). Probes run in order of
time gain; what the budget does not reach is not probed and keeps the model's own
precision (never lowered without evidence), and the outcome's notes say what was gathered.

>>> parse_policy("Mixed")
<Policy.MIXED: 'mixed'>
>>> b = QualityBudget.parse("cosine=0.999")
>>> b.metric, b.limit, b.holds({"cosine": 0.9995})
('cosine', 0.0010000000000000009, True)
>>> round(QualityBudget.parse("rel_l2=0.01").combine([0.006, 0.008]), 6)
0.01
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import partial
from typing import Any, Protocol

from placewise.errors import InputError, UnsupportedError
from placewise.graph.ir import OpKind
from placewise.records import to_json
from placewise.schedule.placement import Problem
from placewise.schedule.placement import natural_dtype as natural_of
from placewise.units import DType

__all__ = [
    "DEFAULT_BUDGET",
    "EVIDENCE_REQUESTS",
    "MAX_RECHECKS",
    "METRICS",
    "Decision",
    "EvidenceBudget",
    "Outcome",
    "Policy",
    "QualityBudget",
    "emulated_ops",
    "is_lowering",
    "lowered_of",
    "natural_dtype",
    "parse_policy",
    "plan_with_policy",
    "precision_json",
    "sensitivity_table",
]

#: the quality metrics a budget may bound
METRICS = ("rel_l2", "cosine", "max_abs", "top1")
#: requests of generated inputs the evidence runs on (``--inputs`` gives its own)
EVIDENCE_REQUESTS = 8
#: how many times the chosen assignment is re-checked (and the search rerun) at most
MAX_RECHECKS = 6
#: significant digits quality figures are stored with (the file stays byte-identical
#: across runs whose float noise is below them)
_DIGITS = 4


class Policy(Enum):
    """``--precision``: see the module docstring."""

    KEEP = "keep"
    FP32 = "fp32"
    FP16 = "fp16"
    BF16 = "bf16"
    INT8 = "int8"
    MIXED = "mixed"

    @property
    def dtypes(self) -> tuple[DType, ...]:
        """The precisions the policy lets the search consider besides the model's own."""
        if self is Policy.KEEP:
            return ()
        if self is Policy.MIXED:
            return (DType.FP16, DType.BF16, DType.INT8)
        return (DType(self.value),)


def parse_policy(text: str | Policy) -> Policy:
    """``KEEP|fp32|fp16|bf16|int8|mixed`` (any case) -> ``Policy``; ``InputError`` naming
    ``--precision`` otherwise."""
    if isinstance(text, Policy):
        return text
    key = str(text).strip().lower()
    for p in Policy:
        if p.value == key:
            return p
    raise InputError(f"unknown precision policy {text!r} (one of KEEP, fp32, fp16, bf16, "
                     f"int8, mixed)", place="--precision")


@dataclass(frozen=True, slots=True)
class QualityBudget:
    """A bound on one output-quality metric (see the module docstring)."""

    metric: str
    value: float
    default: bool = False

    @classmethod
    def parse(cls, text: str | None) -> QualityBudget:
        """``METRIC=VALUE`` -> budget (``None``: ``DEFAULT_BUDGET``); ``InputError`` naming
        ``--quality-budget`` for an unknown metric or a value out of range."""
        if text is None:
            return DEFAULT_BUDGET
        metric, sep, raw = str(text).partition("=")
        metric = metric.strip().lower()
        if not sep or metric not in METRICS:
            raise InputError(f"quality budget {text!r}: expected METRIC=VALUE with METRIC one "
                             f"of {', '.join(METRICS)}", place="--quality-budget")
        try:
            value = float(raw)
        except ValueError:
            raise InputError(f"quality budget {text!r}: {raw.strip()!r} is not a number",
                             place="--quality-budget") from None
        ok = {"rel_l2": 0.0 < value <= 1.0, "max_abs": 0.0 < value < math.inf,
              "cosine": 0.0 < value <= 1.0, "top1": 0.0 < value <= 1.0}[metric]
        if not ok or not math.isfinite(value):
            rng = {"rel_l2": "in (0, 1]", "max_abs": "positive and finite",
                   "cosine": "in (0, 1]", "top1": "in (0, 1]"}[metric]
            raise InputError(f"quality budget {metric}={raw.strip()}: the value must be {rng}",
                             place="--quality-budget")
        return cls(metric, value)

    @property
    def limit(self) -> float:
        """The largest ``error`` within the budget."""
        return self.value if self.metric in ("rel_l2", "max_abs") else 1.0 - self.value

    def error(self, quality: Mapping[str, float]) -> float:
        """The budget metric of ``quality`` as "lower is better"."""
        if self.metric not in quality:
            raise UnsupportedError(f"the quality budget is on {self.metric}, which was not "
                                   f"measured (top1 needs a logits-like output)")
        v = float(quality[self.metric])
        return v if self.metric in ("rel_l2", "max_abs") else 1.0 - v

    def holds(self, quality: Mapping[str, float]) -> bool:
        """Whether ``quality`` is within the budget."""
        return self.error(quality) <= self.limit * (1.0 + 1e-9)

    def combine(self, errors: Iterable[float]) -> float:
        """The estimated error of lowering several vertices together, from each one's error
        alone: independent relative errors add in quadrature (``rel_l2``); ``1 - cosine``
        (about half the squared relative error), ``max_abs`` and ``1 - top1`` (a union
        bound) add. The assignment is emulated as a whole afterwards anyway."""
        es = [max(0.0, float(e)) for e in errors]
        if self.metric == "rel_l2":
            return math.sqrt(sum(e * e for e in es))
        return sum(es)

    def text(self) -> str:
        return f"{self.metric}={self.value:g}"


DEFAULT_BUDGET = QualityBudget("rel_l2", 0.01, default=True)


def natural_dtype(problem: Problem, vi: int) -> DType:
    """The precision vertex ``vi`` computes in as the model is: the widest float dtype among
    its tensors (fp32 when it has none)."""
    g = problem.graph
    v = problem.vertices[vi]
    return natural_of(g.tensor(t).dtype for t in (*v.inputs, *v.params, *v.outputs,
                                                  *v.internal))


def is_lowering(dtype: DType, natural: DType) -> bool:
    """Whether computing in ``dtype`` changes the numbers of a vertex whose own precision
    is ``natural`` (anything but the same dtype or a wider float)."""
    return dtype is not natural and not (dtype.is_float and dtype.bits > natural.bits)


def emulated_ops(problem: Problem, vi: int, dtype: DType) -> tuple[str, ...]:
    """The ops of vertex ``vi`` whose numbers change when it computes in ``dtype``: every
    op with a float input or output (the emulator applies each kind's scheme: an int8
    contraction is quantized as the runtime's int8 partitions are; other int8 ops get
    int8 activations; local devices run int8 only for contractions, see
    ``placewise.cost.roofline.local_kernel_gap``)."""
    g = problem.graph
    return tuple(op.name for op in problem.vertices[vi].ops
                 if any(g.tensor(t).dtype.is_float for t in (*op.inputs, *op.outputs) if t))


def _sig(x: float) -> float:
    if x == 0.0 or not math.isfinite(x):
        return float(x)
    return float(f"{x:.{_DIGITS}g}")


def _quality(q: Mapping[str, float]) -> dict[str, float]:
    return {k: _sig(float(v)) for k, v in sorted(q.items())}


@dataclass(frozen=True, slots=True)
class EvidenceBudget:
    """How much quality evidence a plan may gather (module docstring): ``evaluations``
    emulated runs at most (None: no limit), none started after ``deadline`` (a ``clock()``
    reading; None: none); ``why``: what sized it, for the notes.

    >>> b = EvidenceBudget(4)
    >>> m = b.meter()
    >>> [m.take() for _ in range(5)], m.used, m.stopped
    ([True, True, True, True, False], 4, 'work')
    """

    evaluations: int | None = None
    deadline: float | None = None
    clock: Callable[[], float] = time.perf_counter
    why: str = ""
    setup_s: float = 0.0  # the nominal setup and run (0: unknown), to forecast the
    run_s: float = 0.0    # reference run at the pace the setup really went

    def meter(self) -> _Meter:
        return _Meter(self)


@dataclass(slots=True)
class _Meter:
    """Counts the evaluations of one evidence run against its budget; ``stopped``: "work"
    (the count was spent) or "clock" (the deadline passed) once a ``take`` was refused."""

    budget: EvidenceBudget
    used: int = 0
    stopped: str = ""
    run_s: float = 0.0  # the wall time of the last emulated run (``timed``)

    def left(self) -> int | None:
        n = self.budget.evaluations
        return None if n is None else max(0, n - self.used)

    def can(self, n: int = 1, *, keep: int = 0, clock: bool = True) -> bool:
        """Whether ``n`` more evaluations fit, ``keep`` of them left over afterwards (and,
        with ``clock``, the deadline has not passed: the re-checks, which come after the
        search, spend only what the probes kept for them)."""
        left = self.left()
        if left is not None and left < n + keep:
            self.stopped = self.stopped or "work"
            return False
        d = self.budget.deadline
        if clock and d is not None and self.budget.clock() + self.run_s >= d:
            self.stopped = self.stopped or "clock"  # would end past the deadline
            return False
        return True

    def timed(self, run: Callable[[], Any]) -> Any:
        """``run()``, its wall time kept as the next run's forecast (``can``)."""
        t0 = self.budget.clock()
        got = run()
        self.run_s = max(0.0, self.budget.clock() - t0)
        return got

    def take(self, *, keep: int = 0, clock: bool = True) -> bool:
        """Count one evaluation if it fits (``can``)."""
        if not self.can(1, keep=keep, clock=clock):
            return False
        self.used += 1
        return True


#: evaluations kept back from the probes for re-checking the chosen assignment
RECHECK_RESERVE = 2
#: the least evidence worth starting: the reference, one probe and one re-check
LEAST_EVALUATIONS = 3
NOT_PROBED = "not probed: the evidence budget was spent (kept at its own precision)"


@dataclass(slots=True)
class Decision:
    """One row of the sensitivity table: vertex ``vertex`` lowered alone to ``dtype``.

    ``gain_s``: the best time at its own precision minus the best at ``dtype`` over the
    machine's devices (None: no device computes it at both); ``quality``: the emulated
    output quality (empty when not emulated); ``error``: the budget metric of it;
    ``admitted``: the search may choose it; ``chosen``: the plan does; ``fallback``: it was
    chosen, then kept at its own precision because the whole assignment broke the budget.
    """

    vertex: str
    dtype: DType
    natural: DType
    ops: tuple[str, ...]
    gain_s: float | None
    quality: dict[str, float] = field(default_factory=dict)
    error: float | None = None
    admitted: bool = False
    chosen: bool = False
    fallback: bool = False
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


def _best_time(problem: Problem, vi: int, dtype: DType) -> float | None:
    best = None
    for dev in problem.machine.devices:
        if dtype not in dev.dtypes:
            continue
        try:
            t = problem.cost(vi, dev.name, dtype).total_s
        except UnsupportedError:
            continue
        best = t if best is None else min(best, t)
    return best


class EmulatorLike(Protocol):
    def outputs(self, requests: Sequence[Sequence[Any]], lowered: Mapping[str, DType]
                ) -> list[list[Any]]: ...
    def why_not(self, op_name: str, dtype: DType) -> str: ...


QualityFn = Callable[[Sequence[Sequence[Any]], Sequence[Sequence[Any]]], dict[str, float]]
Progress = Callable[[str, float], None]


def _candidates(problem: Problem, policy: Policy) -> list[Decision]:
    """Every (vertex, lowered dtype) the policy allows and some device computes faster."""
    rows: list[Decision] = []
    for v in problem.vertices:
        nat = natural_dtype(problem, v.index)
        base = None
        for dt in policy.dtypes:
            if not is_lowering(dt, nat):
                continue
            ops = emulated_ops(problem, v.index, dt)
            if OpKind.TASK in v.kinds:  # an abstract task: nothing says its numbers stay
                ops = tuple(o.name for o in v.ops)
            if base is None:
                base = _best_time(problem, v.index, nat)
            low = _best_time(problem, v.index, dt)
            gain = None if base is None or low is None else _sig(base - low)
            row = Decision(v.name, dt, nat, ops, gain)
            if low is None:
                row.reason = f"no device computes it in {dt.value}"
            elif gain is not None and gain <= 0.0:
                row.reason = f"no faster in {dt.value} on any device"
            elif not ops:
                row.quality, row.error = {}, 0.0
                row.reason = f"its numbers do not change in {dt.value}"
            rows.append(row)
    return rows


def sensitivity_table(problem: Problem, policy: Policy, budget: QualityBudget,
                      emulator: EmulatorLike, requests: Sequence[Sequence[Any]],
                      reference: Sequence[Sequence[Any]], quality: QualityFn,
                      progress: Progress | None = None,
                      rows: list[Decision] | None = None,
                      meter: _Meter | None = None) -> list[Decision]:
    """The per-vertex sensitivity table: each candidate lowered alone and emulated (only
    those some device computes faster; the rest say why not), then the admission: rows
    within the budget, greedily by gain per unit of error while the combined estimate
    holds. ``rows``: the candidates when the caller has them already. ``meter``: the
    evidence budget's count (``EvidenceBudget.meter``): probes run by time gain while it
    lasts, keeping evaluations for the re-checks; the rest are not probed (``NOT_PROBED``)
    and keep their own precision."""
    rows = _candidates(problem, policy) if rows is None else rows
    todo = []
    for r in rows:
        if r.reason or not r.ops:
            continue
        why = next((w for w in (emulator.why_not(o, r.dtype) for o in r.ops) if w), "")
        if why:
            r.reason = f"cannot be emulated: {why}"
            continue
        todo.append(r)
    todo.sort(key=lambda r: (-(r.gain_s or 0.0), r.vertex, r.dtype.value))
    n = meter.budget.evaluations if meter is not None else None
    keep = 1 if n is None or n < 8 else RECHECK_RESERVE
    for k, r in enumerate(todo):
        if meter is not None and not meter.take(keep=keep):
            r.reason = NOT_PROBED
            continue
        if progress is not None:
            progress(f"emulating {r.vertex} in {r.dtype.value}", k / max(1, len(todo)))
        lowered = dict.fromkeys(r.ops, r.dtype)
        run = partial(emulator.outputs, requests, lowered)
        got = meter.timed(run) if meter is not None else run()
        r.quality = _quality(quality(got, reference))
        r.error = _sig(budget.error(r.quality))
    _admit(rows, budget)
    return rows


def _admit(rows: list[Decision], budget: QualityBudget) -> None:
    ok = []
    for r in rows:
        if r.error is None or (r.reason and r.error != 0.0):
            continue
        if r.error > budget.limit:
            r.reason = (f"alone it breaks the budget ({budget.metric} error {r.error:.3g} > "
                        f"{budget.limit:.3g})")
            continue
        ok.append(r)
    ok.sort(key=lambda r: (-(r.gain_s or 0.0) / max(r.error or 0.0, 1e-12), r.vertex,
                           r.dtype.value))
    worst: dict[str, float] = {}
    for r in ok:
        trial = dict(worst)
        trial[r.vertex] = max(trial.get(r.vertex, 0.0), r.error or 0.0)
        if budget.combine(trial.values()) <= budget.limit:
            worst = trial
            r.admitted = True
            if not r.reason:
                r.reason = "within the budget"
        else:
            r.reason = "the combined estimate would break the budget"


def _restriction(problem: Problem, policy: Policy, rows: Sequence[Decision]
                 ) -> dict[str, frozenset[DType]]:
    allowed: dict[str, set[DType]] = {}
    for v in problem.vertices:
        nat = natural_dtype(problem, v.index)
        allowed[v.name] = {nat} | {d for d in policy.dtypes if not is_lowering(d, nat)}
    for r in rows:
        if r.admitted:
            allowed[r.vertex].add(r.dtype)
    return {k: frozenset(v) for k, v in allowed.items()}


@dataclass(slots=True)
class Outcome:
    """What ``plan_with_policy`` found: the search result, the problem it searched (with
    the final precision restriction), the table, and the chosen assignment's emulated
    quality (empty when nothing is lowered: the outputs are the reference's)."""

    result: Any
    problem: Problem
    policy: Policy
    budget: QualityBudget
    decisions: list[Decision]
    estimated: dict[str, float]
    estimated_error: float
    combined_estimate: float
    rechecks: int
    notes: list[str]


def lowered_of(problem: Problem, placement: Mapping[str, Any]) -> dict[str, DType]:
    """Vertex -> dtype for the vertices ``placement`` (vertex -> ``Assignment``) lowers."""
    out = {}
    for v in problem.vertices:
        a = placement[v.name]
        if is_lowering(a.dtype, natural_dtype(problem, v.index)):
            out[v.name] = a.dtype
    return out


def plan_with_policy(problem: Problem, policy: Policy, budget: QualityBudget,
                     search: Callable[[Problem], Any], *,
                     emulator: Callable[[], EmulatorLike] | None = None,
                     requests: Sequence[Sequence[Any]] = (),
                     quality: QualityFn | None = None,
                     progress: Progress | None = None,
                     evidence: EvidenceBudget | None = None) -> Outcome:
    """Search ``problem`` under ``policy`` and ``budget`` (see the module docstring).

    ``search(problem)`` returns a search result (``placewise.search.api.plan_search``);
    ``emulator()`` builds the emulator (only called when some vertex may be lowered and
    ``evidence`` holds ``LEAST_EVALUATIONS``) that runs ``requests``; ``quality(got,
    reference)`` measures outputs; ``evidence``: the evidence budget (default: none).
    """
    notes: list[str] = []
    meter = (evidence or EvidenceBudget()).meter()
    rows = _candidates(problem, policy)
    need = [r for r in rows if not r.reason and r.ops]
    reference: list[list[Any]] = []
    emu: EmulatorLike | None = None
    if need:
        if emulator is None or quality is None:
            raise UnsupportedError(f"precision {policy.value} needs quality evidence: an "
                                   f"emulator, inputs and a quality measure")
        if meter.can(LEAST_EVALUATIONS):  # the inputs and the emulator only then
            if not requests:
                raise UnsupportedError(f"precision {policy.value} needs quality evidence "
                                       f"on some inputs")
            emu = meter.timed(emulator)
            b = meter.budget
            if b.setup_s > 0.0 and b.run_s > 0.0:  # the reference and a probe, at that pace
                meter.run_s *= 2.0 * b.run_s / b.setup_s
        if emu is not None and meter.take():
            reference = meter.timed(partial(emu.outputs, requests, {}))
            rows = sensitivity_table(problem, policy, budget, emu, requests, reference,
                                     quality, progress, rows, meter)
        else:
            emu = None
            for r in need:
                r.reason = NOT_PROBED
            _admit(rows, budget)
    else:
        _admit(rows, budget)
    by_key = {(r.vertex, r.dtype): r for r in rows}
    rechecks = 0
    estimated: dict[str, float] = {}
    est_err = 0.0
    while True:
        restricted = problem.restricted(_restriction(problem, policy, rows))
        result = search(restricted)
        placement = result.best.placement
        lowered = lowered_of(restricted, placement)
        chosen = [by_key[(v, d)] for v, d in lowered.items() if (v, d) in by_key]
        for r in rows:
            r.chosen = (r.vertex, r.dtype) in {(c.vertex, c.dtype) for c in chosen}
        combined = budget.combine(r.error or 0.0 for r in chosen)
        if not any(r.ops for r in chosen) or emu is None:
            estimated, est_err = {}, 0.0
            break
        ops = {o: r.dtype for r in chosen for o in r.ops}
        spent = not meter.take(clock=False)
        if not spent:
            estimated = _quality(quality(emu.outputs(requests, ops), reference))  # type: ignore[misc]
            est_err = _sig(budget.error(estimated))
            rechecks += 1
            if budget.holds(estimated):
                break
            worst = max((r for r in chosen if r.ops), key=lambda r: (r.error or 0.0,
                                                                     r.vertex))
            worst.admitted, worst.chosen, worst.fallback = False, False, True
            worst.reason = (f"chosen, then kept at {worst.natural.value}: the whole "
                            f"assignment measured {budget.metric} error {est_err:.3g} > "
                            f"{budget.limit:.3g}")
        if spent or rechecks >= MAX_RECHECKS:
            why = ("the evidence budget was spent before the chosen assignment could be "
                   "re-checked" if spent else "the re-check limit was reached")
            for r in rows:
                if r.admitted:
                    r.admitted, r.fallback = False, r.chosen
                    r.chosen = False
                    r.reason = f"kept: {why}"
            notes.append(f"every vertex is kept at its own precision: {why}" if spent else
                         f"the chosen assignment broke the budget {rechecks} times: every "
                         f"vertex is kept at its own precision")
            restricted = problem.restricted(_restriction(problem, policy, rows))
            result = search(restricted)
            estimated, est_err, combined = {}, 0.0, 0.0
            break
    if lowered_of(restricted, result.best.placement) and (
            kept := _unless_own_is_as_fast(problem, search, result, rows, notes)):
        (result, restricted), estimated, est_err, combined = kept, {}, 0.0, 0.0
    if need:
        notes.insert(0, _evidence_note(rows, need, meter, rechecks))
    return Outcome(result, restricted, policy, budget, rows, estimated, est_err,
                   _sig(combined), rechecks, notes)


def _unless_own_is_as_fast(problem: Problem, search: Callable[[Problem], Any], result: Any,
                           rows: Sequence[Decision], notes: list[str]
                           ) -> tuple[Any, Problem] | None:
    """The search at the model's own precision and its problem when it scores no worse
    than the lowered ``result`` (the chosen rows then un-chosen, a note saying so); else
    None: lowering paid."""
    own = problem.restricted(_restriction(problem, Policy.KEEP, []))
    base = search(own)
    got, keep = _score(result), _score(base)
    if keep > got:
        return None
    for r in rows:
        if r.chosen:
            r.chosen = False
            r.reason = "admitted; the plan at the model's own precision is as fast"
    notes.append(f"lowering did not pay: the plan at the model's own precision "
                 f"scores {keep:.4g} s, the lowered one {got:.4g} s")
    return base, own


def _evidence_note(rows: Sequence[Decision], need: Sequence[Decision], meter: _Meter,
                   rechecks: int) -> str:
    """The note saying what evidence was gathered and what was not."""
    probed = sum(1 for r in rows if r.quality)
    skipped = [r for r in rows if r.reason == NOT_PROBED]
    n = meter.budget.evaluations
    cap = (f"of a budget of {n}" if n is not None else "no budget") + (
        f" ({meter.budget.why})" if meter.budget.why else "")
    text = (f"quality evidence: {probed} of {len(need)} candidates probed, {rechecks} "
            f"re-check{'s' if rechecks != 1 else ''}; {meter.used} emulated runs {cap}")
    if skipped:
        by = {"work": "the work budget was spent", "clock": "its share of the wall time ran out"}
        names = ", ".join(f"{r.vertex}:{r.dtype.value}" for r in skipped[:6])
        more = f" and {len(skipped) - 6} more" if len(skipped) > 6 else ""
        text += (f"; {len(skipped)} not probed ({by.get(meter.stopped, 'stopped')}), kept "
                 f"at their own precision: {names}{more}")
    return text


def _score(result: Any) -> float:
    """A search result's objective value (lower is better)."""
    return float(result.best.score(result.objective))


def precision_json(outcome: Outcome, *, inputs: str = "", input_requests: int = 0,
                   schemes: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The plan file's ``precision`` record (``placewise.plan.PrecisionRecord``) of
    ``outcome``: ``inputs`` says what the evidence ran on, ``schemes`` how each dtype was
    emulated."""
    b = outcome.budget
    lowered = lowered_of(outcome.problem, outcome.result.best.placement)
    rows = outcome.decisions
    return {
        "policy": outcome.policy.value,
        "budget_metric": b.metric, "budget_value": b.value, "budget_default": b.default,
        "budget_limit": _sig(b.limit),
        "inputs": inputs, "input_requests": input_requests,
        "schemes": dict(schemes or {}),
        "decisions": [r.to_json() for r in rows],
        "lowered": {v: d.value for v, d in sorted(lowered.items())},
        "estimated": dict(outcome.estimated),
        "estimated_error": outcome.estimated_error,
        "combined_estimate": outcome.combined_estimate,
        "rechecks": outcome.rechecks,
        "fallback": sorted({r.vertex for r in rows if r.fallback}),
        "notes": list(outcome.notes),
    }
