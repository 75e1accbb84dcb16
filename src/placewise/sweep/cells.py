"""One sweep cell: a model on a platform at a batch (and shape, objective, precision),
planned with ``placewise.planning`` and described as a small JSON record.

``CellSpec`` is what an engine hands a worker (strings and numbers only: it crosses the
wire to a Ray task); ``run_cell(spec)`` loads the model and the machine itself, plans the
cell under its own time limit, and returns the cell's record (the package docstring lists
its keys). Besides the cell's own figures the record holds ``at_batches``: the cell's plan
re-evaluated at every batch of its group (``PlanService(mode="same").evaluation(b2)``, the
one re-evaluation), from which ``placewise.sweep.analysis`` builds the regret matrix and
the working-set sensitivity, and, for the group's first batch of a model with a ``seq``
option, ``at_seqs``: the same placement evaluated on the model at each sequence length.

Past the point where the plan stops fitting, the memory model's first suggestion is
applied for real (``apply_suggestion``): ``micro_batch`` evaluates the same placement at
batch ``ceil(b / k)`` through the evaluator (``k`` raised until it fits) and runs the
``k`` micro-batches back to back through the pipeline (latency of one plus ``k - 1``
periods); ``spill`` is recorded with the memory model's estimate only, since the
evaluator holds a device's bytes in one tier and prices work at its main memory: moving
part of them to another tier is not something it can schedule.

>>> spec = CellSpec("zoo:mlp?layers=2", "a100-pcie-server", 2, batches=(1, 2))
>>> rec = run_cell(spec)
>>> rec["fits"], rec["batch"], [p["batch"] for p in rec["at_batches"]]
(True, 2, [1, 2])
>>> rec["at_batches"][1]["latency_s"] == rec["latency_s"]
True
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from placewise.energy import plan_energy
from placewise.errors import Infeasible, InputError, MemoryInfeasible, UnsupportedError
from placewise.graph.zoo import parse_zoo_ref, resolve_options
from placewise.hardware.load import load_machine
from placewise.hardware.probe import load_local
from placewise.plan import save_plan
from placewise.planning import build_problem, plan_model
from placewise.precision.policy import parse_policy
from placewise.schedule.evaluate import evaluate
from placewise.search.api import CommandBudget, minimum_time_s
from placewise.serve.service import PlanService
from placewise.utilization import plan_utilization

if TYPE_CHECKING:
    from placewise.hardware.spec import Machine
    from placewise.plan import Plan
    from placewise.schedule.evaluate import Evaluation

__all__ = [
    "CellSpec",
    "apply_suggestion",
    "cell_key",
    "load_platform",
    "run_cell",
    "seq_ref",
    "tier_bytes",
]


@dataclass(frozen=True, slots=True)
class CellSpec:
    """A cell to plan: ``model`` (a model reference), ``platform`` (a preset, a YAML path or
    ``local``), ``batch``; ``shape`` (input name -> dims, or None), ``objective``,
    ``precision`` (a policy name), ``time_limit_s`` (search and building the plan);
    ``batches``: the batches of its group (re-evaluated for the regret matrix); ``seqs``:
    sequence lengths to evaluate the placement at (only used by the group's first batch
    of a zoo model with a ``seq`` option); ``plans_dir``: write the plan there."""

    model: str
    platform: str
    batch: int
    shape: tuple[tuple[str, tuple[int, ...]], ...] | None = None
    objective: str = "latency"
    precision: str = "KEEP"
    time_limit_s: float = 1.0
    batches: tuple[int, ...] = ()
    seqs: tuple[int, ...] = ()
    strategy: str = "auto"
    seed: int = 0
    plans_dir: str | None = None
    index: int = field(default=0, compare=False)

    def to_json(self) -> dict[str, Any]:
        """A small record of plain values (what crosses the wire)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CellSpec:
        d = dict(data)
        if d.get("shape") is not None:
            d["shape"] = tuple((str(n), tuple(int(x) for x in dims)) for n, dims in d["shape"])
        for k in ("batches", "seqs"):
            d[k] = tuple(int(x) for x in d.get(k, ()))
        return cls(**d)

    @property
    def shapes(self) -> dict[str, tuple[int, ...]] | None:
        return None if self.shape is None else dict(self.shape)

    @property
    def shape_json(self) -> dict[str, list[int]] | None:
        return None if self.shape is None else {n: list(d) for n, d in self.shape}


def cell_key(rec: Mapping[str, Any]) -> tuple[Any, ...]:
    """The key of a cell record's group (all but the batch)."""
    shape = rec.get("shape")
    return (rec["model"], rec["platform"], None if shape is None else
            tuple(sorted((k, tuple(v)) for k, v in shape.items())), rec["objective"],
            rec["precision"])


def load_platform(ref: str) -> Machine:
    """A preset, a YAML path, or ``local`` (read from the probe's cache; probed if none)."""
    if ref == "local":
        return load_local()

    return load_machine(ref)


def tier_bytes(ev: Evaluation) -> tuple[dict[str, int], dict[str, int]]:
    """Peak and capacity bytes of every memory the evaluation's fit is decided by:
    ``dev/tier`` for a device's own tier, ``pool:NAME`` for tiers that are one memory."""
    peak: dict[str, int] = {}
    cap: dict[str, int] = {}
    for u in ev.memory.usages:
        if not u.checked:
            continue
        key = f"{u.members[0][0]}/{u.members[0][1]}" if len(u.members) == 1 else f"pool:{u.pool}"
        peak[key] = int(u.peak_bytes)
        cap[key] = int(u.capacity_bytes)
    return dict(sorted(peak.items())), dict(sorted(cap.items()))


def seq_ref(model: str, seq: int) -> str | None:
    """``model`` with its ``seq`` option set to ``seq``, or None when it has none.

    >>> seq_ref("zoo:bert?layers=1", 128)
    'zoo:bert?layers=1&seq=128'
    >>> print(seq_ref("zoo:mlp", 128))
    None
    """
    if not model.startswith("zoo:"):
        return None

    name, options = parse_zoo_ref(model)
    if "seq" not in resolve_options(name, {}):
        return None
    options["seq"] = int(seq)
    return f"zoo:{name}?" + "&".join(f"{k}={v}" for k, v in sorted(options.items()))


def apply_suggestion(ev: Evaluation, batch: int,
                     at: Callable[[int], Evaluation]) -> dict[str, Any] | None:
    """The memory model's suggestion for the infeasible ``ev`` (at ``batch``) applied for
    real (module docstring); ``at(b)`` evaluates the same placement at batch ``b``. None
    when there is no suggestion."""
    sugs = ev.memory.suggestions
    mb = next((s for s in sugs if s.kind == "micro_batch" and s.possible), None)
    if mb is not None:
        k = max(2, mb.micro_batches)
        while k <= batch:
            size = math.ceil(batch / k)
            runs = math.ceil(batch / size)
            try:
                got = at(size)
            except InputError as exc:
                return _applied("micro_batch", runs, None, None, mb.extra_s,
                                f"{mb.note}; not evaluated: {exc.problem}")
            if got.feasible:
                latency = got.latency_s + (runs - 1) * got.pipeline.period_s
                return _applied(
                    "micro_batch", runs, latency, latency - ev.latency_s, mb.extra_s,
                    f"{runs} micro-batches of {size} (the memory model suggested "
                    f"{mb.micro_batches}): "
                    f"the same placement evaluated at batch {size}, run {runs} times back to "
                    f"back through its pipeline (latency of one plus {runs - 1} periods)",
                    size=size, throughput_rps=got.throughput_rps, tiers=tier_bytes(got))
            k = runs + 1
        return _applied("micro_batch", batch, None, None, mb.extra_s,
                        f"{mb.note}; even micro-batches of one sample do not fit")
    spill = next((s for s in sugs if s.kind == "spill"), None)
    if spill is not None:
        return _applied("spill", 0, None, None, spill.extra_s,
                        f"{spill.note}; not applied: the evaluator holds a device's bytes in "
                        f"one tier and prices its work at the main memory, so it cannot "
                        f"schedule a partial spill (the time is the memory model's estimate)")
    why = next((s.note for s in sugs), None)
    if why is None:
        return None
    return _applied("micro_batch", 0, None, None, 0.0, why)


def _applied(kind: str, runs: int, latency: float | None, extra: float | None,
             estimated: float, note: str, *, size: int | None = None,
             throughput_rps: float | None = None,
             tiers: tuple[dict[str, int], dict[str, int]] | None = None) -> dict[str, Any]:
    return {"kind": kind, "micro_batches": runs, "micro_batch_size": size,
            "latency_s": latency, "extra_s": extra, "estimated_extra_s": float(estimated),
            "throughput_rps": throughput_rps, "modelled": latency is not None,
            "fits": latency is not None,
            "peak_bytes": tiers[0] if tiers else None, "note": note}


def _point(ev: Evaluation, value: int, objective: str,
           at: Callable[[int], Evaluation], batch: int) -> dict[str, Any]:
    peak, cap = tier_bytes(ev)
    return {"value": value, "latency_s": ev.latency_s, "period_s": ev.pipeline.period_s,
            "throughput_rps": ev.throughput_rps, "score_s": _score(ev, objective),
            "fits": bool(ev.feasible), "peak_bytes": peak, "capacity_bytes": cap,
            "applied": None if ev.feasible else apply_suggestion(ev, batch, at)}


def _score(ev: Evaluation, objective: str) -> float | None:
    s = ev.score(objective)
    return s if math.isfinite(s) else None


def _failed(spec: CellSpec, exc: Exception) -> dict[str, Any]:
    peak: dict[str, int] = {}
    cap: dict[str, int] = {}
    if isinstance(exc, MemoryInfeasible) and exc.tier:
        key = f"{exc.device}/{exc.tier}"
        peak[key], cap[key] = int(exc.need_bytes), int(exc.capacity_bytes)
    return {"fits": False, "reason": " ".join(str(exc).split()),
            "failure": type(exc).__name__, "peak_bytes": peak, "capacity_bytes": cap,
            "headroom_bytes": {k: cap[k] - peak[k] for k in peak}}


def _energy(plan: Plan, machine: Machine) -> dict[str, Any]:
    data: dict[str, Any] = plan_energy(plan, machine).to_json()
    return data


def _utilization(plan: Plan, graph: Any, machine: Machine) -> dict[str, Any]:
    data: dict[str, Any] = plan_utilization(plan, graph=graph, machine=machine).to_json()
    return data


def run_cell(spec: CellSpec | Mapping[str, Any], machine: Machine | None = None
             ) -> dict[str, Any]:
    """Plan ``spec`` and return its record (module docstring); ``machine``: the platform
    already loaded. ``InputError`` propagates (bad input is the sweep's, not the cell's);
    a cell that cannot be planned (memory, unsupported, nowhere to run) records why."""
    if not isinstance(spec, CellSpec):
        spec = CellSpec.from_json(spec)
    try:
        return _run_cell(spec, machine)
    except InputError as exc:  # name the cell: the sweep stops on it
        raise InputError(f"{exc.problem} (cell {spec.model} on {spec.platform} at batch "
                         f"{spec.batch})", file=exc.file, place=exc.place) from None


def _run_cell(spec: CellSpec, machine: Machine | None) -> dict[str, Any]:
    t0 = time.perf_counter()
    m = machine if machine is not None else load_platform(spec.platform)
    rec: dict[str, Any] = {
        "model": spec.model, "platform": spec.platform, "machine": m.name,
        "batch": spec.batch, "shape": spec.shape_json, "objective": spec.objective,
        "precision": spec.precision, "fits": False, "reason": None, "failure": None,
        "latency_s": None, "period_s": None, "throughput_rps": None, "lower_bound_s": None,
        "devices_used": [], "bottleneck_resource": None, "chosen": None,
        "wall_stopped": None, "peak_bytes": {}, "capacity_bytes": {}, "headroom_bytes": {},
        "energy": None, "mfu": None, "memory_bound_fraction": None, "by_layer_type": [],
        "utilization": None, "plan_file": None, "at_batches": [], "at_seqs": []}
    problem = build_problem(spec.model, m, shapes=spec.shapes, batch=spec.batch)
    clock = CommandBudget.make(spec.time_limit_s, ops=len(problem.graph.ops),
                               start=time.perf_counter(), least_s=minimum_time_s(problem))
    refusal = clock.too_short()
    if refusal is not None:
        raise refusal
    try:
        done = plan_model(problem, spec.model, clock=clock, strategy=spec.strategy,
                          objective=spec.objective, policy=parse_policy(spec.precision),
                          seed=spec.seed, shapes=spec.shapes, batch=spec.batch)
    except (MemoryInfeasible, Infeasible, UnsupportedError) as exc:
        rec.update(_failed(spec, exc))
        rec["wall_s"] = time.perf_counter() - t0
        return rec
    plan, res = done.plan, done.result
    ev = res.best
    peak, cap = tier_bytes(ev)
    rec.update({
        "fits": True, "latency_s": ev.latency_s, "period_s": ev.pipeline.period_s,
        "throughput_rps": ev.throughput_rps, "lower_bound_s": res.lower_bound_s,
        "devices_used": list(res.devices_used), "bottleneck_resource": ev.bottleneck_resource,
        "chosen": res.chosen, "wall_stopped": bool(res.wall_stopped),
        "peak_bytes": peak, "capacity_bytes": cap,
        "headroom_bytes": {k: cap[k] - peak[k] for k in peak}})
    rec["energy"] = _energy(plan, m)
    util = _utilization(plan, done.outcome.problem.graph, m)
    rec.update({"utilization": util, "mfu": util.get("mfu"),
                "memory_bound_fraction": util.get("memory_bound_fraction"),
                "by_layer_type": list(util.get("by_layer_type") or [])})
    if spec.plans_dir is not None:
        rec["plan_file"] = _save(plan, spec)
    rec["at_batches"] = _at_batches(plan, m, done.outcome.problem.cost_model, spec)
    if spec.seqs and spec.batches and spec.batch == spec.batches[0]:
        rec["at_seqs"] = _at_seqs(plan, m, done.outcome.problem.cost_model, spec)
    rec["wall_s"] = time.perf_counter() - t0
    return rec


def _save(plan: Plan, spec: CellSpec) -> str:
    assert spec.plans_dir is not None
    name = f"cell{spec.index:04d}-b{spec.batch}-{spec.objective}.json"
    path = Path(spec.plans_dir) / name
    save_plan(plan, path)
    return str(path)


def _at_batches(plan: Plan, machine: Machine, cost_model: Any, spec: CellSpec
                ) -> list[dict[str, Any]]:
    svc = PlanService(plan, machine, cost_model, mode="same", model=spec.model,
                      shapes=spec.shapes)
    out = []
    for b in spec.batches or (spec.batch,):
        try:
            ev = svc.evaluation(b)
        except InputError as exc:
            out.append({"batch": b, "value": b, "fits": False, "latency_s": None,
                        "score_s": None, "error": exc.problem})
            continue
        point = _point(ev, b, spec.objective, svc.evaluation, b)
        point["batch"] = b
        out.append(point)
    return out


def _at_seqs(plan: Plan, machine: Machine, cost_model: Any, spec: CellSpec
             ) -> list[dict[str, Any]]:
    """The plan's placement evaluated on the model at each of ``spec.seqs`` (same batch):
    the problem is the model rebuilt at that length (``PlanService`` refuses a graph other
    than the plan's at the plan's own batch, so the evaluator is called directly)."""
    placement = plan.placement_obj()
    out = []
    for s in spec.seqs:
        ref = seq_ref(spec.model, s)
        if ref is None:
            return []

        def at(b: int, ref: str = ref) -> Evaluation:
            prob = build_problem(ref, machine, shapes=spec.shapes, batch=b,
                                 cost_model=cost_model)
            if set(prob.vertex_index) != set(placement):
                raise InputError(f"{ref} has other fused regions than the plan",
                                 place="--seq")
            return evaluate(prob, placement)

        try:
            ev = at(spec.batch)
        except InputError as exc:
            out.append({"value": s, "fits": False, "latency_s": None, "score_s": None,
                        "error": exc.problem})
            continue
        out.append(_point(ev, s, spec.objective, at, spec.batch))
    return out

