"""Where a sweep's cells run: ``local`` (this process, in order) or ``ray`` (Ray tasks).

Both take the cells as ``CellSpec`` records and return the cell records in the cells'
order; the figures are the same whichever ran them (each cell plans with its own
deterministic work budget).

**Ray.** ``run_ray`` starts a local cluster (``ray.init()``) unless ``address`` names an
existing one (``--ray-address``), and shuts down only a cluster it started. A task gets a
``CellSpec.to_json()`` record (strings and numbers) and returns the cell's record: each
task loads the model and the machine itself; no session or graph crosses the wire. Cells
whose platform is ``local`` (this machine, as probed) are pinned to the driver's node, whose
probe cache the driver filled before any task starts, and run one at a time (never two
concurrently: the next is submitted when the last has finished). Ray is an optional
dependency (``placewise[ray]``), imported only here and only when asked for.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from placewise.errors import InputError
from placewise.sweep.cells import CellSpec, run_cell

__all__ = ["ENGINES", "import_ray", "run_local", "run_ray"]

ENGINES = ("local", "ray")

Progress = Callable[[str, float], None]


def _label(spec: CellSpec) -> str:
    return f"{spec.model} on {spec.platform} at batch {spec.batch} ({spec.objective})"


def run_local(specs: Sequence[CellSpec], *, machines: Mapping[str, Any] | None = None,
              progress: Progress | None = None) -> tuple[list[dict[str, Any]], float]:
    """Run every cell in this process, in order; ``machines``: platforms already loaded
    (by reference). Returns the records and the engine's start-up seconds (0)."""
    out = []
    for i, spec in enumerate(specs):
        if progress is not None:
            progress(_label(spec), i / max(1, len(specs)))
        out.append(run_cell(spec, (machines or {}).get(spec.platform)))
    return out, 0.0


def import_ray() -> Any:
    """The ``ray`` module, or ``InputError`` saying how to install it."""
    try:
        # lazy: ray is heavy to import, loaded only when this runs
        import ray
    except ImportError:
        raise InputError("the ray engine needs Ray: pip install 'placewise[ray]'",
                         place="--engine") from None
    return ray


def _ray_cell(spec: dict[str, Any]) -> dict[str, Any]:
    """A Ray task's body: one cell from its record (the worker loads everything)."""
    try:
        return {"ok": run_cell(spec)}
    except InputError as exc:  # bad input travels back as data, re-raised by the driver
        return {"input_error": {"problem": exc.problem, "file": exc.file, "place": exc.place}}


def run_ray(specs: Sequence[CellSpec], *, address: str | None = None,
            num_cpus: int | None = None, progress: Progress | None = None
            ) -> tuple[list[dict[str, Any]], float]:
    """Run the cells as Ray tasks (module docstring). Returns the records in the cells'
    order and the seconds ``ray.init`` took (0 when connected to a running cluster that
    this process had already joined)."""
    ray = import_ray()
    t0 = time.perf_counter()
    started = False
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.ERROR,
                                  "log_to_driver": False}
        if address:
            kwargs["address"] = address
        elif num_cpus is not None:
            kwargs["num_cpus"] = num_cpus
        try:
            ray.init(**kwargs)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise InputError(f"cannot start or reach a Ray cluster: {exc}",
                             place="--ray-address" if address else "--engine") from None
        started = True
    start_s = time.perf_counter() - t0
    try:
        return _submit(ray, specs, progress), start_s
    finally:
        if started:
            ray.shutdown()


def _submit(ray: Any, specs: Sequence[CellSpec], progress: Progress | None
            ) -> list[dict[str, Any]]:
    # lazy: ray is heavy to import, loaded only when this runs
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    task = ray.remote(num_cpus=1, max_retries=0)(_ray_cell)
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    local = [i for i, s in enumerate(specs) if s.platform == "local"]
    pending: dict[Any, int] = {}
    for i, s in enumerate(specs):
        if s.platform != "local":
            pending[task.remote(s.to_json())] = i
    local_ref = None
    if local:
        local_ref = task.options(scheduling_strategy=here).remote(specs[local[0]].to_json())
        pending[local_ref] = local[0]
    nxt = 1
    results: dict[int, dict[str, Any]] = {}
    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            ref = ready[0]
            i = pending.pop(ref)
            got = ray.get(ref)
            if "input_error" in got:
                e = got["input_error"]
                raise InputError(e["problem"], file=e["file"], place=e["place"])
            results[i] = got["ok"]
            if ref == local_ref and nxt < len(local):  # the next local cell, alone
                local_ref = task.options(scheduling_strategy=here).remote(
                    specs[local[nxt]].to_json())
                pending[local_ref] = local[nxt]
                nxt += 1
            if progress is not None:
                progress(_label(specs[i]), len(results) / max(1, len(specs)))
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
    return [results[i] for i in range(len(specs))]
