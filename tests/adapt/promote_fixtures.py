"""Plan files for the guardrail's tests: a placement given by hand, built by the planning
core (``planning.build_problem``, ``schedule.evaluate``, ``plan.build_plan``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["MODEL", "edit_plan", "placed_plan"]

#: a tiny zoo model: real runs take milliseconds
MODEL = "zoo:mlp?layers=2&hidden=64"


def placed_plan(path: Path, devices: Sequence[str], *, model: str = MODEL,
                machine: Any = None) -> Path:
    """A plan of ``model`` whose vertices go to ``devices`` in turn (one device: a
    single-device plan; ``("cpu0", "cpu1")``: every edge crosses between two worker
    processes, a deliberately worse plan on this machine), written to ``path``."""
    from placewise.hardware.probe import load_local
    from placewise.plan import build_plan, save_plan
    from placewise.planning import build_problem
    from placewise.schedule import Placement, evaluate
    from placewise.schedule.placement import Assignment
    from placewise.units import DType

    m = machine if machine is not None else load_local()
    prob = build_problem(model, m)
    pl = Placement.of({n: Assignment(devices[i % len(devices)], DType.FP32)
                       for i, n in enumerate(prob.vertex_names)})
    plan = build_plan(prob, evaluate(prob, pl), model_ref=model,
                      strategy="by hand: " + ",".join(devices))
    save_plan(plan, path)
    return path


def edit_plan(src: Path, dst: Path, **precision: Any) -> Path:
    """A copy of the plan file ``src`` with fields of its precision record replaced (a
    plan without one gets the default budget's record first)."""
    doc = json.loads(src.read_text())
    base = doc.get("precision") or {"policy": "keep", "budget_metric": "rel_l2",
                                    "budget_value": 0.01, "budget_limit": 0.01}
    doc["precision"] = {**base, **precision}
    dst.write_text(json.dumps(doc))
    return dst
