"""A workload plan exported: one folder per model, each what ``export`` writes for one model.

``placewise export PLAN --out DIR`` of a workload plan (``graph.workload``) writes
``DIR/<model>/``: that model's partitions (compiled from the workload's merged ONNX model,
each model's tensors named ``model/...``) and a manifest that plain onnxruntime chains
without placewise, naming that model's inputs and outputs; and ``DIR/workload.json``: the
models, their folders and streams, and the plan's fingerprint. The models' partitions are
the plan's (a partition never holds two models' work); each manifest's plan fingerprint is
that of the model's part of the plan (``plan_workload.member_plan``), its graph fingerprint
that of the model's part of the graph. Nothing is written when anything fails.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from placewise.export import (
    _check_out_dir,
    _plan_machine,
    _plan_source,
    _staging,
    export_plan,
    manifest_summary,
)
from placewise.io import atomic_write_json
from placewise.plan import Plan, load_plan
from placewise.plan_workload import member_graph, member_plan
from placewise.runtime.planned import plan_fingerprint

__all__ = ["WORKLOAD_FILE", "export_workload"]

WORKLOAD_FILE = "workload.json"


def export_workload(plan: Plan | str | os.PathLike[str], out_dir: str | os.PathLike[str], *,
                    machine: Any = None, force: bool = False,
                    progress: Any = None) -> dict[str, Any]:
    """Write the workload ``plan`` into ``out_dir`` (module docstring); returns the summary
    ``workload.json`` holds, with each model's manifest summary."""
    report = progress or (lambda _m, _f: None)
    file: str | None = None
    if not isinstance(plan, Plan):
        file = os.fspath(plan)
        plan = load_plan(file)
    if plan.workload is None:
        raise ValueError("export_workload takes a workload plan")
    target = _check_out_dir(out_dir, force=force, protect=[f for f in (file,) if f])
    report("checking the plan against its machine and models", 0.0)
    machine = _plan_machine(plan, machine, file)
    src = _plan_source(plan, None, file)
    rows = []
    with _staging(target, force=force) as tmp:
        models = plan.workload.models
        for i, m in enumerate(models):
            report(f"exporting model {m.name}", 0.1 + 0.8 * i / len(models))
            graph = member_graph(src.graph, m.name)
            part = member_plan(plan, m.name)
            part = part.model_copy(update={"fingerprints": part.fingerprints.model_copy(
                update={"graph": graph.fingerprint()})})
            man = export_plan(part, tmp / m.name, machine=machine,
                              source=dataclasses.replace(src, graph=graph))
            summary = manifest_summary(man, tmp / m.name)
            rows.append({"name": m.name, "ref": m.ref, "folder": m.name,
                         "inputs": list(m.inputs), "outputs": list(m.outputs),
                         "rate_per_s": m.rate_per_s, "slo_p99_s": m.slo_p99_s,
                         "priority": m.priority, "partitions": summary["partitions"],
                         "files": summary["files"], "bytes": summary["bytes"]})
        out = {"format": "placewise-workload-export", "version": 1, "model": plan.model,
               "machine": plan.machine.name, "plan_fingerprint": plan_fingerprint(plan),
               "models": rows}
        atomic_write_json(tmp / WORKLOAD_FILE, out)
    report("done", 1.0)
    return {"out": str(target), **out}
