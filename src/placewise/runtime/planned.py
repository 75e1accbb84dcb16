"""The plan -> program contract: the checked way from a plan file to what the executor runs.

Everything that runs a plan on this machine (``validate``, ``serve --real``, the telemetry
windows of ``runtime.windows``, the loop) goes through ``planned_program``:

- ``check_machine``: this machine, whose fingerprint must be the plan's (a plan made for a
  preset is refused);
- ``check_runnable``: the independent checker (``placewise.check``) and the backends of this
  build find the plan runnable here, before anything of the model is loaded;
- ``load_planned_source``: the model as it was planned, its graph's fingerprint the plan's;
- ``program_from_plan`` (``runtime.program``): the program.

``predicted_tasks`` lines the program's partitions up with the plan's tasks, and
``plan_fingerprint`` names the plan a run's telemetry belongs to.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from placewise.check import Check, Severity, check_plan
from placewise.cost.model import Term
from placewise.errors import InputError
from placewise.hardware.power import split_ref
from placewise.hardware.probe import load_local
from placewise.hardware.spec import Machine, list_presets
from placewise.plan import Plan, check_fingerprints, dumps_plan
from placewise.plan_workload import member_graph
from placewise.runtime.backends import backend_gap
from placewise.runtime.program import ExecProgram, program_from_plan

if TYPE_CHECKING:
    from placewise.plan import TaskRecord as PlanTask
    from placewise.runtime.opexec import ModelSource

__all__ = ["check_machine", "check_runnable", "load_planned_source", "plan_fingerprint",
           "planned_program", "predicted_tasks"]


def plan_fingerprint(plan: Plan) -> str:
    """``sha256:`` of the plan's canonical text (``plan.dumps_plan``): the same for a plan
    and the file ``save_plan`` wrote of it."""
    return "sha256:" + hashlib.sha256(dumps_plan(plan).encode("utf-8")).hexdigest()


def check_machine(plan: Plan, machine: Machine | None, file: str | None) -> Machine:
    """The machine ``plan`` runs on: ``machine``, or this one (``load_local()``); a plan
    made for a preset, or whose machine fingerprint is not this machine's, is an
    ``InputError`` (``file``: the plan file, named in the message)."""
    name = plan.machine.name
    if machine is None:
        if split_ref(name)[0] in list_presets():
            raise InputError(f"the plan was made for the preset machine {name!r}, which is not "
                             f"here: validate runs plans on this machine's devices (plan with "
                             f"--hw local)", file=file, place="machine")
        machine = load_local()
    check_fingerprints(plan, machine=machine, file=file)
    return machine


def check_runnable(plan: Plan, machine: Machine, file: str | None) -> None:
    """Refuse, before anything is loaded or run, a plan the independent checker
    (``placewise.check``) finds broken on ``machine``: a device the machine lacks, a kernel
    its backends do not have (int8 outside ``graph.ir.INT8_KINDS``), an impossible
    schedule; a device used by the plan that no backend of this build runs (a probed GPU:
    ``runtime.backends.backend_gap``) comes before all of them. The first error is the
    message, support errors first."""
    for name in plan.devices_used():
        if name in machine.device_names:
            gap = backend_gap(machine.device(name))
            if gap is not None:
                raise InputError(f"the plan cannot run here: {gap}", file=file,
                                 place=f"device {name!r}")
    errors = [f for f in check_plan(plan, machine=machine, file=file)
              if f.severity is Severity.ERROR]
    if not errors:
        return
    order = {Check.SUPPORT: 0, Check.COVERAGE: 1}
    errors.sort(key=lambda f: order.get(f.check, 2))
    first = errors[0]
    more = (f" ({len(errors) - 1} more error{'s' if len(errors) > 2 else ''}: placewise "
            f"check {file or 'PLAN'} --hw local lists them)" if len(errors) > 1 else "")
    raise InputError(f"the plan cannot run here: {first.subject} {first.message}{more}",
                     file=file, place=f"check {first.check.value}")


def load_planned_source(ref: str, plan: Plan, shapes: Any) -> ModelSource:
    """The plan's model as it was planned: bound to the plan's batch, or (a model whose
    inputs have a fixed leading dim, or a zoo reference that names its own batch, planned
    without ``--batch``) as it is; the graph fingerprint decides which."""
    # runtime.opexec imports torch: loaded only when a model is, not to read a plan
    from placewise.runtime.opexec import load_source

    values = plan.values or None  # the inputs given a value when the plan was made
    try:
        src = load_source(ref, batch=plan.batch, shapes=shapes, values=values)
    except InputError as exc:
        if exc.place != "--batch":
            raise
        return load_source(ref, shapes=shapes, values=values)  # the fingerprint check follows
    if src.graph is not None and src.graph.fingerprint() != plan.fingerprints.graph:
        own = load_source(ref, shapes=shapes, values=values)
        if own.graph is not None and own.graph.fingerprint() == plan.fingerprints.graph:
            return own
    return src


def planned_program(plan: Plan, machine: Machine | None, source: ModelSource | str | None,
                    shapes: Any, file: str | None
                    ) -> tuple[Machine, ModelSource, ExecProgram]:
    """The checked way from a plan to what the executor runs (``validate`` and ``serve
    --real``): this machine (``check_machine``), the plan runnable on it
    (``check_runnable``) before anything of the model is loaded, the model as planned
    (read by the checked loaders: a .pt2 archive is checked entry by entry before torch
    sees it, with weights-only unpickling forced) whose graph's fingerprint must be the
    plan's, and the program."""
    machine = check_machine(plan, machine, file)
    check_runnable(plan, machine, file)
    if source is None or isinstance(source, str):
        src = load_planned_source(source or plan.model, plan, shapes)
    else:
        src = source
    if src.graph is None:
        raise InputError("the model source has no graph", file=src.ref)
    check_fingerprints(plan, graph=src.graph, file=file)
    graph = src.graph
    if plan.workload is not None and len(plan.workload.models) == 1 \
            and len(graph.record.members) > 1:  # one model's part of a workload plan
        graph = member_graph(graph, plan.workload.models[0].name)
    return machine, src, program_from_plan(plan, graph, machine)


def predicted_tasks(plan: Plan, program: ExecProgram) -> dict[str, PlanTask]:
    """The plan's tasks by name, and one for each partition of ``program``: its member
    tasks back to back (start of the first; duration, terms, interval and contention
    summed), so that a partition's step lines up with what the plan predicted for it."""
    out = plan.task_index()
    for p in program.partitions:
        members = [out[n] for n in p.tasks if n in out]
        if not members:
            continue
        terms: dict[Term, float] = {}
        for m in members:
            for k, v in m.terms_s.items():
                terms[k] = terms.get(k, 0.0) + v
        first = min(members, key=lambda m: m.start_s)
        dur = sum(m.duration_s for m in members)
        out[p.name] = first.model_copy(update={
            "name": p.name, "vertex": p.name, "start_s": first.start_s,
            "end_s": first.start_s + dur, "terms_s": terms,
            "contention_s": sum(m.contention_s for m in members),
            "low_s": sum(m.low_s for m in members), "high_s": sum(m.high_s for m in members),
            "deps": (), "assumptions": {"partition_of": float(len(members))}})
    return out
