"""Building a plan set: every grid point of the envelope planned through the one planning
core, the buckets chosen (``planset.choice``), plan entries shared by placement, padding and
residency recorded (``placewise.adapt.planset``'s steps 1 to 4).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from placewise import __version__
from placewise.adapt.planset.choice import (
    ChoiceCosts,
    Edges,
    GridFacts,
    Point,
    choose,
    grid_points,
    padding_table,
    resident_bytes,
    serving,
)
from placewise.adapt.planset.mix import Mix, grid_probabilities
from placewise.adapt.planset.record import Bucket, PlanSet, _with_fingerprints, parse_envelope
from placewise.cost.load import load_cost_model
from placewise.errors import Infeasible, InputError
from placewise.graph.load import load_model
from placewise.hardware.spec import Machine
from placewise.llm.spec import state_pairs, step_shapes
from placewise.plan import Plan
from placewise.plan_sources import sources_json
from placewise.planning import build_problem, plan_model
from placewise.precision.policy import parse_policy
from placewise.schedule.placement import held_dtype
from placewise.search.api import CommandBudget, minimum_time_s
from placewise.sweep.cells import seq_ref
from placewise.units import DType

__all__ = ["build_plan_set", "grid_facts", "plan_memories", "plan_weights"]

Progress = Callable[[str, float], None]

# ---- how the axes bind the model --------------------------------------------------------------
Binding = tuple[str, dict[str, list[int]] | None, int | None]


def _binder(model: str, axes: Sequence[str], phase: str | None = None
            ) -> Callable[[Mapping[str, int]], Binding]:
    """point -> (model ref, input shapes, batch) binding the envelope's axes to the model
    (module docstring); ``InputError`` for an axis the model does not have. ``phase``: the
    step of a decoder LLM the plans are for (``_decoder_binder``)."""
    if phase is not None or (model.endswith(".onnx") and "seq" in axes
                             and state_pairs(load_model(model))):
        return _decoder_binder(model, phase)
    if model.startswith("zoo:"):
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

def _decoder_binder(model: str, phase: str | None
                    ) -> Callable[[Mapping[str, int]], Binding]:
    """A decoder LLM's step (``past_key_values`` inputs, ``llm.spec.state_pairs``) has two
    lengths; ``phase`` says which one the seq axis is: ``prefill`` (a prompt of seq tokens
    over an empty cache) or ``decode`` (one token over a cache of seq - 1: the context after
    the step is seq)."""
    if phase not in PHASES:
        raise InputError((f"unknown phase {phase!r}: " if phase else "") + "a decoder's step "
                         f"has a prompt and a cache length: give --phase "
                         f"{' or '.join(PHASES)}", file=model, place="--phase")
    g = load_model(model)
    if not state_pairs(g):
        raise InputError("--phase applies to a decoder with past_key_values inputs",
                         file=model, place="--phase")

    def decoder(pt: Mapping[str, int]) -> Binding:
        batch, seq = pt.get("batch", 1), pt.get("seq", 1)
        new, past = (seq, 0) if phase == "prefill" else (1, seq - 1)
        return model, step_shapes(g, batch, new, past), pt.get("batch")

    return decoder


#: the steps of a decoder LLM a plan set can be built for (``--phase``)
PHASES = ("prefill", "decode")


# ---- building -------------------------------------------------------------------------------
def _plan_point(ref: str, shapes: Mapping[str, list[int]] | None, batch: int | None,
                machine: Machine, cost_model: Any, *, objective: str, strategy: str,
                policy: Any, seed: int, time_limit_s: float | None,
                sources: Mapping[str, Any] | None = None) -> Any:
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
                   progress: Progress | None = None, hw: str | None = None,
                   phase: str | None = None) -> PlanSet:
    """Plan ``model`` on ``machine`` for every grid point of ``envelope`` (a mapping or
    ``--envelope`` items) and choose the buckets (module docstring). ``time_limit_s``: each
    grid point's planning limit (default: the ``plan`` command's default for its size);
    ``mix``: the shape mix (default uniform over the grid); ``progress(label, fraction)``;
    ``hw``: the ``--hw`` reference ``machine`` was loaded from (each plan records a spec
    file's path, and the calibration's, ``placewise.plan_sources``); ``phase``: for a
    decoder LLM, the step the seq axis sizes (``prefill`` or ``decode``).
    ``InputError`` for an envelope or mix the model cannot take; ``Infeasible`` naming the
    grid point that does not fit."""
    t0 = time.perf_counter()
    env = parse_envelope(envelope) if not isinstance(envelope, Mapping) else \
        parse_envelope([f"{a}={','.join(map(str, v))}" for a, v in envelope.items()])
    axes = tuple(env)
    bind = _binder(model, axes, phase)
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
