"""A plan's partitions and what each cut between devices buys.

``plan_file_partitions(plan)``: the plan's partitions by the executor's rule
(``placewise.schedule.partitions.partitions_of``), read from the plan file alone (what
``explain`` shows; the executor and ``export`` get the same names from the graph).

``plan_cuts(problem, plan)``: for each cut (a partition fed by a partition on another
device), the plan's objective value with the receiving partition moved onto the sender's
device — the plan without that cut, scored by the evaluator (``schedule.evaluate``, the
one search ranks by) — so ``buys_s`` is what the cut is worth *with* every effect the
evaluator models: the receiving device's speed, the transfers and partition launches it
adds, and the overlap of the two devices' work. ``build_plan`` records them
(``Plan.cuts``). Evaluating them costs one evaluation per cut; past ``CUT_WORK`` vertex
evaluations in all none is evaluated (each cut says so), so the work is bounded and
deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass

from placewise.graph.ir import Op
from placewise.plan_records import CutRecord, Plan
from placewise.schedule.evaluate import evaluate
from placewise.schedule.partitions import Partition, partitions_of
from placewise.schedule.placement import Assignment, Placement, Problem, feasible_assignments
from placewise.schedule.simulate import TaskKind
from placewise.units import DType

__all__ = ["CUT_WORK", "cut_pairs", "plan_cuts", "plan_file_partitions"]

#: at most this many vertex evaluations (vertices x cuts) are spent on the cuts' values:
#: about 0.25 s of scheduling (25 us per vertex, BENCHMARKS.md "Planning at scale"), small
#: beside a plan's time limit
CUT_WORK = 10_000


@dataclass(frozen=True, slots=True)
class _Task:
    index: int
    name: str
    kind: TaskKind
    device: str
    dst_device: str | None
    tensor: str | None
    start_s: float
    end_s: float


@dataclass(frozen=True, slots=True)
class _Vertex:
    dtype: DType
    ops: tuple[Op, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Outputs:
    outputs: tuple[str, ...]


def plan_file_partitions(plan: Plan) -> list[Partition]:
    """The plan's partitions by the executor's rule, from the plan file alone (their ops
    left empty: the file names them, the graph holds them)."""
    records = plan.schedule.tasks
    tasks = [_Task(i, t.name, t.kind, t.device, t.dst_device, t.tensor, t.start_s, t.end_s)
             for i, t in enumerate(records)]
    vertices = {t.name: _Vertex(plan.assignment(t.name).dtype, (),
                                tuple(plan.regions[t.name].inputs),
                                tuple(plan.regions[t.name].outputs))
                for t in records if t.kind is TaskKind.COMPUTE}
    cores = {t.device: tuple(t.cores) for t in records
             if t.cores and t.kind is not TaskKind.TRANSFER}
    return partitions_of(_Outputs(tuple(plan.graph_outputs)), tasks, vertices, cores,
                         by_model=plan.workload is not None)


def cut_pairs(plan: Plan, parts: list[Partition]) -> list[tuple[Partition, Partition]]:
    """(sender, receiver) partitions on different devices joined by a crossing, in the
    order of the plan's crossings."""
    owner = {v: p for p in parts for v in p.tasks}
    out: dict[tuple[str, str], tuple[Partition, Partition]] = {}
    for c in plan.crossings:
        ps, pd = owner.get(c.src_vertex or ""), owner.get(c.dst_vertex or "")
        if ps is not None and pd is not None and ps.device != pd.device:
            out.setdefault((ps.name, pd.name), (ps, pd))
    return list(out.values())


def _moved(problem: Problem, placement: Placement, vertices: tuple[str, ...],
           device: str) -> Placement | str:
    """``placement`` with ``vertices`` on ``device`` (own dtype if it runs there, else the
    cheapest), or why one cannot run there."""
    new = dict(placement.items())
    for v in vertices:
        options = [a for a in feasible_assignments(problem, v) if a.device == device]
        if not options:
            return f"{v} cannot run on {device}"
        own = placement[v].dtype
        new[v] = next((a for a in options if a.dtype is own), None) or min(
            options, key=lambda a: (problem.cost(v, a.device, a.dtype).total_s,
                                    a.dtype.value))
    return Placement.of({v: Assignment(a.device, a.dtype) for v, a in new.items()})


def plan_cuts(problem: Problem, plan: Plan) -> tuple[CutRecord, ...]:
    """Every cut of ``plan`` (made for ``problem``) with its value (module docstring)."""
    pairs = cut_pairs(plan, plan_file_partitions(plan))
    own = plan.objective_value
    if len(pairs) * len(problem.vertices) > CUT_WORK or own is None:
        why = (f"not evaluated: {len(pairs)} cuts x {len(problem.vertices)} vertices is over "
               f"{CUT_WORK} vertex evaluations" if own is not None
               else "not evaluated: the plan has no finite objective value")
        return tuple(CutRecord(src=a.name, dst=b.name, reason=why) for a, b in pairs)
    placement = plan.placement_obj()
    out = []
    for a, b in pairs:
        moved = _moved(problem, placement, b.tasks, a.device)
        if isinstance(moved, str):
            out.append(CutRecord(src=a.name, dst=b.name, reason=moved))
            continue
        value = evaluate(problem, moved).score(plan.objective)
        if value == float("inf"):
            out.append(CutRecord(src=a.name, dst=b.name, reason=f"{b.name}'s vertices do not "
                                 f"fit in memory on {a.device}"))
            continue
        out.append(CutRecord(src=a.name, dst=b.name, merged_value_s=value,
                             buys_s=value - own))
    return tuple(out)
