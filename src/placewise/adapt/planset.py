"""Plan sets: plans for a shape envelope (``placewise plan MODEL --envelope ...``).

A **plan set** covers an *envelope* of input shapes (``parse_envelope``: per axis a sorted
list of sizes; axes ``batch`` and ``seq``) with **buckets**: contiguous ranges of the
envelope's grid, each served by the plan of the grid point at its upper corner (a shape
is served in the smallest bucket covering it, padded up). ``build_plan_set``:

1. plans every grid point through the one planning core (``placewise.planning``:
   ``build_problem`` + ``plan_model``, as ``placewise plan`` and a sweep cell do), each
   under its own ``time_limit_s``. ``batch`` is the plan's batch; ``seq`` is the sequence
   length: the ``seq`` option of a zoo model (``zoo:bert?seq=128``), or the one symbolic
   non-leading input dimension of an ONNX file, bound through the input shapes
   (``--shape``); a model without the axis is refused (``InputError``);
2. chooses how many buckets and where their edges fall (``placewise.adapt.planset_choice``:
   the expected latency over the shape ``Mix`` plus a stated compile and memory cost per
   extra bucket; the choice, the alternatives and why are kept in ``choice``);
3. buckets whose best placement is the same (the same device and precision for every
   vertex; neighbours or not) share one **plan entry** (``plans[bucket.plan_index]``: the
   plan at the largest upper corner among them); every bucket still keeps its own plan at its own
   upper corner (``plan_of(bucket)``, the same placement at that shape), so that it is
   served without padding up to the shared entry's shape;
4. records the **padding** cost per grid point (the latency served at its bucket's upper
   corner, and in the next bucket up, minus at its own grid point) and the **residency**
   of all bucket plans (weights once per device: ``planset_choice.resident_bytes``).

**The file** (``save_plan_set`` / ``load_plan_set``): JSON, ``"format":
"placewise-planset"``, ``"version": 1``; the plan entries and the bucket plans as plan
documents (``placewise.plan_file``; a bucket plan identical to its entry is stored once);
``fingerprints``: the machine, the calibration, every plan's ``plan_fingerprint``, and the
plan set's own (sha256 of the document without it). Loading checks every fingerprint, that
the buckets cover the grid exactly once and that each bucket plan has its entry's
placement: a corrupt or edited file is a ``SpecError`` naming file, place and problem.

>>> env = parse_envelope(["batch=1,2,4", "seq=32..128:pow2"])
>>> env
{'batch': [1, 2, 4], 'seq': [32, 64, 128]}
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from placewise.adapt.planset_choice import (
    ChoiceCosts,
    Edges,
    GridFacts,
    Point,
    choose,
    cover_point,
    grid_points,
    padding_table,
    resident_bytes,
    serving,
)
from placewise.adapt.planset_mix import AXES, Mix, grid_probabilities, load_mix
from placewise.errors import Infeasible, InputError

if TYPE_CHECKING:
    from placewise.hardware.spec import Machine
    from placewise.plan import Plan

__all__ = [
    "AXES",
    "FORMAT",
    "MAX_GRID_POINTS",
    "VERSION",
    "Bucket",
    "Mix",
    "PlanSet",
    "build_plan_set",
    "dumps_plan_set",
    "grid_facts",
    "is_plan_set",
    "load_mix",
    "load_plan_set",
    "parse_envelope",
    "plan_memories",
    "plan_set_from_json",
    "plan_set_to_json",
    "plan_weights",
    "save_plan_set",
]

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


# ---- how the axes bind the model --------------------------------------------------------------
Binding = tuple[str, dict[str, list[int]] | None, int | None]


def _binder(model: str, axes: Sequence[str]) -> Callable[[Mapping[str, int]], Binding]:
    """point -> (model ref, input shapes, batch) binding the envelope's axes to the model
    (module docstring); ``InputError`` for an axis the model does not have."""
    if model.startswith("zoo:"):
        from placewise.sweep.cells import seq_ref

        if "seq" in axes and seq_ref(model, 1) is None:
            raise InputError("the model has no 'seq' option: the envelope's seq axis does "
                             "not apply", file=model, place="--envelope seq")

        def zoo(pt: Mapping[str, int]) -> Binding:
            ref = seq_ref(model, pt["seq"]) if "seq" in pt else model
            assert ref is not None
            return ref, None, pt.get("batch")

        return zoo
    if "seq" not in axes:
        return lambda pt: (model, None, pt.get("batch"))
    if not model.endswith(".onnx"):
        raise InputError("the seq axis binds a zoo model's seq option or an ONNX input's "
                         "symbolic dimension", file=model, place="--envelope seq")
    return _onnx_binder(model, axes)


def _onnx_binder(model: str, axes: Sequence[str]) -> Callable[[Mapping[str, int]], Binding]:
    from placewise.graph.load import load_model

    g = load_model(model)
    inputs = {n: g.tensor(n).shape for n in g.inputs}
    lead = {d[0] for d in inputs.values() if d and isinstance(d[0], str)}
    syms = sorted({x for d in inputs.values() for x in d[1:] if isinstance(x, str)} - lead)
    if not syms:
        raise InputError("no input has a symbolic sequence dimension (a named dimension "
                         "after the first) for the envelope's seq axis", file=model,
                         place="--envelope seq")
    named = [s for s in syms if "seq" in s.lower() or "len" in s.lower()]
    if len(syms) > 1 and len(named) != 1:
        raise InputError(f"more than one symbolic dimension could be the sequence length "
                         f"({', '.join(syms)}): the seq axis needs exactly one",
                         file=model, place="--envelope seq")
    seq = syms[0] if len(syms) == 1 else named[0]

    def onnx(pt: Mapping[str, int]) -> Binding:
        batch = pt.get("batch", 1)
        shapes: dict[str, list[int]] = {}
        for name, dims in inputs.items():
            if seq not in dims:
                continue
            row = []
            for i, d in enumerate(dims):
                if isinstance(d, int):
                    row.append(d)
                elif d == seq:
                    row.append(pt["seq"])
                elif i == 0:
                    row.append(batch)
                else:
                    raise InputError(f"input {name!r} has symbolic dimension {d!r} besides "
                                     f"the sequence length {seq!r}", file=model,
                                     place="--envelope seq")
            shapes[name] = row
        return model, shapes, pt.get("batch")

    return onnx


# ---- building -------------------------------------------------------------------------------
def _plan_point(ref: str, shapes: Mapping[str, list[int]] | None, batch: int | None,
                machine: Machine, cost_model: Any, *, objective: str, strategy: str,
                policy: Any, seed: int, time_limit_s: float | None,
                sources: Mapping[str, Any] | None = None) -> Any:
    from placewise.planning import build_problem, plan_model
    from placewise.search.api import CommandBudget, minimum_time_s

    start = time.perf_counter()
    problem = build_problem(ref, machine, shapes=shapes, batch=batch, cost_model=cost_model)
    clock = CommandBudget.make(time_limit_s, ops=len(problem.graph.ops), start=start,
                               least_s=minimum_time_s(problem))
    refusal = clock.too_short()
    if refusal is not None:
        raise refusal
    return plan_model(problem, ref, clock=clock, strategy=strategy, objective=objective,
                      policy=policy, seed=seed, shapes=shapes, batch=batch, sources=sources)


def _point_text(axes: Sequence[str], pt: Point) -> str:
    return " ".join(f"{a}={v}" for a, v in zip(axes, pt, strict=True))


def build_plan_set(model: str, machine: Machine, envelope: Mapping[str, Sequence[int]]
                   | Sequence[str], mix: Mix | None = None, *,
                   calibration: Path | str | None = None, objective: str = "latency",
                   strategy: str = "auto", precision: str = "KEEP",
                   time_limit_s: float | None = None, seed: int = 0,
                   costs: ChoiceCosts | None = None,
                   progress: Progress | None = None, hw: str | None = None) -> PlanSet:
    """Plan ``model`` on ``machine`` for every grid point of ``envelope`` (a mapping or
    ``--envelope`` items) and choose the buckets (module docstring). ``time_limit_s``: each
    grid point's planning limit (default: the ``plan`` command's default for its size);
    ``mix``: the shape mix (default uniform over the grid); ``progress(label, fraction)``;
    ``hw``: the ``--hw`` reference ``machine`` was loaded from (each plan records a spec
    file's path, and the calibration's, ``placewise.plan_sources``).
    ``InputError`` for an envelope or mix the model cannot take; ``Infeasible`` naming the
    grid point that does not fit."""
    from placewise import __version__
    from placewise.cost.load import load_cost_model
    from placewise.plan_sources import sources_json
    from placewise.precision.policy import parse_policy

    t0 = time.perf_counter()
    env = parse_envelope(envelope) if not isinstance(envelope, Mapping) else \
        parse_envelope([f"{a}={','.join(map(str, v))}" for a, v in envelope.items()])
    axes = tuple(env)
    bind = _binder(model, axes)
    probs = grid_probabilities(mix, axes, env)
    if calibration is not None and not Path(calibration).is_file():
        raise InputError("no such file", file=str(calibration), place="--calibration")
    cost_model = load_cost_model(machine, Path(calibration) if calibration else None)
    sources = sources_json(hw, machine, calibration, cost_model.fingerprint()
                           if calibration else None)
    policy = parse_policy(precision)
    report: Progress = progress or (lambda _l, _f: None)
    points = grid_points(axes, env)
    planned: dict[Point, Plan] = {}
    bindings: dict[Point, Binding] = {}
    for i, pt in enumerate(points):
        report(f"planning {_point_text(axes, pt)} ({i + 1} of {len(points)})", i / len(points))
        bindings[pt] = bind(dict(zip(axes, pt, strict=True)))
        ref, shapes, batch = bindings[pt]
        try:
            planned[pt] = _plan_point(ref, shapes, batch, machine, cost_model,
                                      objective=objective, strategy=strategy, policy=policy,
                                      seed=seed, time_limit_s=time_limit_s,
                                      sources=sources).plan
        except Infeasible as exc:
            raise type(exc)(f"at {_point_text(axes, pt)} of the envelope: {exc}") from None
    plan_s = time.perf_counter() - t0
    report("choosing the buckets", 0.95)
    facts = grid_facts(axes, env, planned)
    edges, choice = choose(facts, probs, costs or ChoiceCosts())
    ps = _assemble(model, machine, axes, env, planned, bindings, facts, edges, choice,
                   probs, mix, objective, f"placewise {__version__}")
    report("done", 1.0)
    return _with_fingerprints(ps, timing={"grid_points": len(points), "planning_s": plan_s,
                                          "total_s": time.perf_counter() - t0})


def _placement_key(plan: Plan) -> str:
    return hashlib.sha256(json.dumps(plan.placement, sort_keys=True).encode()).hexdigest()[:16]


def _memory_key(plan: Plan, device: str) -> tuple[str, Any] | None:
    """The memory a device's weights live in (its tier holding weights, else its first):
    ``dev/tier`` with that tier's record, or ``pool:NAME`` with the pool's."""
    tiers = plan.memory.devices.get(device)
    if not tiers:
        return None
    tier = next((t for t, r in tiers.items() if r.breakdown.weights > 0), next(iter(tiers)))
    rec = tiers[tier]
    if rec.checked:
        return f"{device}/{tier}", rec
    for p in plan.memory.pools:
        if (device, tier) in {tuple(m) for m in p.members}:
            return f"pool:{p.resource}", p
    return f"{device}/{tier}", rec


def plan_weights(plan: Plan) -> dict[str, dict[tuple[str, str, str], int]]:
    """memory -> ``{(device, parameter, held dtype and shape): bytes}`` of every weight
    the plan keeps resident (the evaluator's rule: a vertex's parameters on its device, in
    its held dtype, one copy per device and representation). A parameter of the same name
    and shape in two bucket plans is the same weight (the same model at another shape: a
    zoo model's weights do not depend on its batch, nor, but for its position table, on
    its sequence length); one whose shape changes with the bucket is another."""
    from placewise.schedule.placement import held_dtype
    from placewise.units import DType

    out: dict[str, dict[tuple[str, str, str], int]] = {}
    for v, a in plan.placement.items():
        dev = a["device"]
        key = _memory_key(plan, dev)
        if key is None:
            continue
        for p in plan.regions[v].params:
            t = plan.tensors[p]
            dt = held_dtype(t.dtype, DType.parse(a["dtype"]))
            rep = f"{dt.value}[{'x'.join(map(str, t.shape))}]"
            out.setdefault(key[0], {})[(dev, p, rep)] = dt.nbytes(math.prod(t.shape))
    return out


def plan_memories(plan: Plan) -> tuple[dict[str, int], dict[str, int]]:
    """memory -> the peak bytes that are not weights, and memory -> capacity."""
    other: dict[str, int] = {}
    cap: dict[str, int] = {}
    for dev in plan.memory.devices:
        key = _memory_key(plan, dev)
        if key is None:
            continue
        name, rec = key
        other[name] = max(0, int(rec.peak_bytes) - int(rec.breakdown.weights))
        cap[name] = int(rec.capacity_bytes)
    return other, cap


def grid_facts(axes: tuple[str, ...], env: Mapping[str, Sequence[int]],
               planned: Mapping[Point, Plan]) -> GridFacts:
    """The choice's facts from the grid points' plans."""
    weights, other, cap = {}, {}, {}
    for pt, p in planned.items():
        weights[pt] = plan_weights(p)
        other[pt], c = plan_memories(p)
        cap.update(c)
    return GridFacts(axes, {a: tuple(v) for a, v in env.items()},
                     {pt: p.predicted_latency_s for pt, p in planned.items()},
                     {pt: _placement_key(p) for pt, p in planned.items()}, weights, other, cap)


def _ranges(edges: Edges, env: Mapping[str, Sequence[int]], axes: Sequence[str]
            ) -> list[list[tuple[int, int]]]:
    """Per axis, each bucket's (lowest grid value, edge)."""
    out = []
    for a, es in zip(axes, edges, strict=True):
        vals, prev, rs = list(env[a]), 0, []
        for e in es:
            rs.append((min(v for v in vals if prev < v <= e), e))
            prev = e
        out.append(rs)
    return out


def _groups(cells: list[tuple[int, ...]], keys: Mapping[tuple[int, ...], str]
            ) -> dict[tuple[int, ...], tuple[int, ...]]:
    """cell -> the first cell with the same placement key: buckets whose placement is the
    same share one plan entry, neighbours or not (the plan entries are unique placements)."""
    first: dict[str, tuple[int, ...]] = {}
    return {c: first.setdefault(keys[c], c) for c in cells}


def _assemble(model: str, machine: Machine, axes: tuple[str, ...],
              env: Mapping[str, Sequence[int]], planned: Mapping[Point, Plan],
              bindings: Mapping[Point, Binding], facts: GridFacts, edges: Edges,
              choice: dict[str, Any], probs: Mapping[Point, float], mix: Mix | None,
              objective: str, created_by: str) -> PlanSet:
    import itertools

    ranges = _ranges(edges, env, axes)
    kept = set(serving(facts, edges, probs)[0])
    upper = {c: tuple(ranges[i][k][1] for i, k in enumerate(c))
             for c in itertools.product(*(range(len(r)) for r in ranges))}
    cells = [c for c in upper if upper[c] in kept]
    roots = _groups(cells, {c: facts.placement_key[upper[c]] for c in cells})
    members: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
    for c in cells:
        members.setdefault(roots[c], []).append(c)
    entry_of: dict[tuple[int, ...], int] = {}
    entries: list[Plan] = []
    for c in cells:
        r = roots[c]
        if r not in entry_of:
            top = max(members[r], key=lambda m: (math.prod(upper[m]), upper[m]))
            entry_of[r] = len(entries)
            entries.append(planned[upper[top]])
    pad = padding_table(facts, edges, probs)
    buckets = []
    for c in cells:
        lo = {a: ranges[i][k][0] for i, (a, k) in enumerate(zip(axes, c, strict=True))}
        up = dict(zip(axes, upper[c], strict=True))
        rows = [r for r in pad if r["upper"] == up]
        ref, shapes, batch = bindings[upper[c]]
        buckets.append(Bucket(
            name="_".join(f"{a}{lo[a]}-{up[a]}" for a in axes), lower=lo, upper=up,
            plan_index=entry_of[roots[c]], model_ref=ref, shapes=shapes, batch=batch,
            predicted_latency_s=facts.latency_s[upper[c]],
            probability=sum(r["probability"] for r in rows),
            expected_padding_s=sum(r["probability"] * r["padding_s"] for r in rows)))
    res = resident_bytes(facts, [upper[c] for c in cells])
    residency = {"memories": res, "fits": all(r["fits"] for r in res.values()),
                 "weights_bytes": sum(r["weights_bytes"] for r in res.values()),
                 "weights_without_sharing_bytes": sum(r["weights_without_sharing_bytes"]
                                                      for r in res.values()),
                 "resident_bytes": sum(r["resident_bytes"] for r in res.values())}
    choice = {**choice, "plan_entries": len(entries),
              "shared": [[b.name for b in buckets if b.plan_index == i]
                         for i in range(len(entries))]}
    grid = tuple({"shape": dict(zip(axes, pt, strict=True)), "latency_s": facts.latency_s[pt],
                  "placement_key": facts.placement_key[pt], "probability": probs.get(pt, 0.0)}
                 for pt in grid_points(axes, env))
    used_mix = mix if mix is not None else Mix(
        tuple((dict(zip(axes, pt, strict=True)), probs.get(pt, 0.0))
              for pt in grid_points(axes, env)), "uniform", None)
    return PlanSet(model=model, machine=machine.name, axes=axes,
                   envelope={a: list(v) for a, v in env.items()}, buckets=tuple(buckets),
                   plans=tuple(entries),
                   bucket_plans=tuple(planned[upper[c]] for c in cells), mix=used_mix,
                   choice=choice, residency=residency, padding=tuple(pad), grid=grid,
                   fingerprints={}, objective=objective, created_by=created_by)


# ---- the file ---------------------------------------------------------------------------------
def _doc(ps: PlanSet) -> dict[str, Any]:
    """The plan set's document without ``fingerprints.planset``."""
    from placewise.plan import plan_to_json
    from placewise.runtime.planned import plan_fingerprint

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
    from dataclasses import replace

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
    from placewise.io import atomic_write_text

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


def load_plan_or_set(path: str | os.PathLike[str]) -> Any:
    """A plan set or a plan file, each by its own checked loader: the one way every
    command that takes either (serve, promote, the store, the loop) loads it. A missing
    file, a FIFO or a device is refused by the plan loader (``InputError``)."""
    file = os.fspath(path)
    if is_plan_set(file):
        return load_plan_set(file)
    from placewise.plan import load_plan

    return load_plan(file)


# loading lives in planset_file (validation of every field) and is re-exported here
from placewise.adapt.planset_file import load_plan_set, plan_set_from_json  # noqa: E402
