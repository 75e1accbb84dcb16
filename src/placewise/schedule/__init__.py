"""The scheduler: the one evaluator of a placement.

- ``placement``: ``Placement`` / ``Assignment`` and the ``Problem`` (graph, partition,
  machine, cost model, batch) with its region DAG and memoized costs;
- ``simulate``: ``schedule(problem, placement) -> Schedule`` — compute, transfer and
  conversion tasks on device lanes, links and shared memory controllers (with contention);
- ``memory``: ``memory_report(problem, schedule) -> MemoryReport`` — lifetimes, per-tier
  timelines, peaks, breakdowns, violations and suggestions;
- ``bounds``: lower bounds of a problem and of a schedule;
- ``pipeline``: steady-state throughput and its bottleneck resource;
- ``evaluate``: all of the above in one ``Evaluation``;
- ``testing``: a toy cost model and machine with hand-checkable numbers.
"""

from placewise.schedule.bounds import LowerBound, problem_lower_bound, schedule_lower_bound
from placewise.schedule.evaluate import Evaluation, Objective, evaluate
from placewise.schedule.memory import (
    Buffer,
    Category,
    MemoryReport,
    Occupant,
    Suggestion,
    TierUsage,
    Violation,
    memory_report,
)
from placewise.schedule.pipeline import Throughput, throughput
from placewise.schedule.placement import (
    Assignment,
    Edge,
    Placement,
    Problem,
    Pruned,
    Vertex,
    feasible_assignments,
    held_dtype,
    held_rep,
    pruned_assignments,
)
from placewise.schedule.simulate import (
    ResourceKind,
    ResourceUse,
    Schedule,
    Task,
    TaskKind,
    TensorCopy,
    Timeline,
    schedule,
)

__all__ = [
    "Assignment",
    "Buffer",
    "Category",
    "Edge",
    "Evaluation",
    "LowerBound",
    "MemoryReport",
    "Objective",
    "Occupant",
    "Placement",
    "Problem",
    "Pruned",
    "ResourceKind",
    "ResourceUse",
    "Schedule",
    "Suggestion",
    "Task",
    "TaskKind",
    "TensorCopy",
    "Throughput",
    "TierUsage",
    "Timeline",
    "Vertex",
    "Violation",
    "evaluate",
    "feasible_assignments",
    "held_dtype",
    "held_rep",
    "memory_report",
    "problem_lower_bound",
    "pruned_assignments",
    "schedule",
    "schedule_lower_bound",
    "throughput",
]
