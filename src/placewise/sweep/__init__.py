"""Sweeps: every cell model x platform x batch (x shape x objective x precision) planned
(``placewise.planning``, as ``placewise plan`` plans), and what they add up to.

``run_sweep(config, engine=..., progress=...)`` returns the sweep document below;
``sweep_csv(doc)`` one row per cell. ``placewise sweep`` is the command line
(``placewise.cli.sweep``). Each cell gets ``time_limit_s`` for its search and for building
its plan (loading the model is not counted), so that its result is reproducible while the
search's work budget ends it (``wall_stopped`` says when the wall clock did instead). The
document is deterministic: the same inputs give the same JSON apart from ``timing``.

The sweep document (``schema: "placewise-sweep/1"``; keys with units end ``_s``,
``_bytes``, ``_j``, ``_w``, ``_rps``)::

    {"schema": "placewise-sweep/1", "created_by": "placewise X.Y.Z",
     "engine": "local" | "ray", "slo_s": float | null, "time_limit_s": float,
     "strategy": str, "seed": int,
     "axes": {"models": [ref..], "platforms": [ref..], "batches": [int..],
              "shapes": [{name: dims} | null ..], "objectives": [..], "precision": [..],
              "seqs": [int..]},
     "cells": [{                      # in axis order, the batch varying fastest
        "model", "platform", "machine" (the spec's name), "batch", "shape", "objective",
        "precision",
        "fits": bool,                 # a plan that fits in memory was found
        "reason": str | null,         # why not (MemoryInfeasible's message etc.)
        "failure": "MemoryInfeasible" | "Infeasible" | "UnsupportedError" | null,
        "latency_s", "period_s", "throughput_rps", "lower_bound_s",  # null when not fits
        "devices_used": [..], "bottleneck_resource", "chosen" (the search's label),
        "wall_stopped": bool | null,  # the wall clock, not the work budget, ended it
        "peak_bytes": {"dev/tier" | "pool:NAME": int}, "capacity_bytes": {..},
        "headroom_bytes": {..},       # capacity - peak; on a failure: the overflowing tier
        "energy": placewise.energy EnergyEstimate.to_json() | null,
        "mfu": float | null, "memory_bound_fraction": float | null,
        "by_layer_type": [Utilization.by_layer_type rows], "utilization": {..} | null,
        "plan_file": str | null,      # with --plans DIR
        "at_batches": [{              # this plan re-evaluated at each batch of its group
            "batch", "value", "latency_s", "period_s", "throughput_rps", "score_s",
            "fits", "peak_bytes", "capacity_bytes", "applied": APPLIED | null}],
        "at_seqs": [{"value" (seq), ... as at_batches}]}],   # first batch, --seq, seq models
     "fit_matrix": {"models", "platforms", "slo_s",
        "cells": [{"model", "platform", "fits", "best_batch", "latency_s",
                   "throughput_rps", "requests_per_j", "energy_per_request_j",
                   "objective", "shape", "precision", "reason"}]},
     "curves": [{"model", "platform", "shape", "objective", "precision",
                 "points": [{"batch", "latency_s", "throughput_rps", "fits",
                             "requests_per_j"}]}],
     "regret": [{"model", "platform", "shape", "objective", "precision", "batches",
                 "score": "latency_s" | "period_s",
                 "regret": [[row b1 (plan chosen at b1), column b2 (evaluated at b2)]],
                 "regret_s", "score_s", "latency_s": [[same layout]],
                 "negative": int}],
     "sensitivity": [{"model", "platform", "shape", "objective", "precision",
                      "axis": "batch" | "seq", "plan_batch", "edge", "first_unfit", "note",
                      "points": [{"value", "peak_bytes", "capacity_bytes", "fits",
                                  "latency_s", "throughput_rps", "applied", "error"}]}],
     "timing": {"wall_s", "cells", "engine_start_s", "cell_wall_s": [..]}}

    APPLIED = {"kind": "micro_batch" | "spill", "micro_batches", "micro_batch_size",
               "latency_s", "extra_s" (over the unsplit batch's latency),
               "estimated_extra_s" (the memory model's), "throughput_rps", "modelled",
               "fits", "peak_bytes", "note"}

``placewise.sweep.analysis`` defines the fit matrix, regret and sensitivity exactly;
``placewise.sweep.cells`` how a cell is planned and how a suggestion is applied.

>>> cfg = SweepConfig(models=("zoo:mlp?layers=2",), platforms=("a100-pcie-server",),
...                   batches=(1, 2))
>>> doc = run_sweep(cfg)
>>> doc["schema"], len(doc["cells"]), doc["regret"][0]["regret"][0][0]
('placewise-sweep/1', 2, 0.0)
"""

from __future__ import annotations

import csv
import io
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from placewise import __version__
from placewise.errors import InputError
from placewise.planning import load_graph
from placewise.precision.policy import parse_policy
from placewise.sweep.analysis import curves, fit_matrix, regret_matrices, sensitivity
from placewise.sweep.cells import CellSpec, load_platform
from placewise.sweep.engines import ENGINES, import_ray, run_local, run_ray

__all__ = ["CSV_COLUMNS", "SCHEMA", "SweepConfig", "cell_specs", "run_sweep", "sweep_csv"]

SCHEMA = "placewise-sweep/1"
OBJECTIVES = ("latency", "throughput")


@dataclass(frozen=True)
class SweepConfig:
    """What to sweep (the package docstring's ``axes``) and how each cell is planned."""

    models: tuple[str, ...]
    platforms: tuple[str, ...]
    batches: tuple[int, ...]
    shapes: tuple[Mapping[str, tuple[int, ...]] | None, ...] = (None,)
    objectives: tuple[str, ...] = ("latency",)
    precisions: tuple[str, ...] = ("KEEP",)
    seqs: tuple[int, ...] = ()
    slo_s: float | None = None
    time_limit_s: float = 1.0
    strategy: str = "auto"
    seed: int = 0
    plans_dir: str | None = None
    machines: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def check(self) -> None:
        """``InputError`` for anything a sweep would refuse, before any cell runs: empty or
        repeated axes, batches, objectives, precisions, the SLO, the time limit, models
        that do not load and platforms that do not resolve (``local`` is probed here,
        once, unless already in ``machines``)."""
        for name, values, place in (("model", self.models, "--model"),
                                    ("platform", self.platforms, "--hw"),
                                    ("batch", self.batches, "--batch")):
            if not values:
                raise InputError(f"give at least one {name}", place=place)
            dup = [v for i, v in enumerate(values) if v in values[:i]]
            if dup:
                raise InputError(f"{name} {dup[0]!r} given twice", place=place)
        for b in self.batches:
            if isinstance(b, bool) or not isinstance(b, int) or b < 1:
                raise InputError(f"a batch must be a positive integer, got {b!r}",
                                 place="--batch")
        for s in self.seqs:
            if isinstance(s, bool) or not isinstance(s, int) or s < 1:
                raise InputError(f"a sequence length must be a positive integer, got {s!r}",
                                 place="--seq")
        for o in self.objectives:
            if o not in OBJECTIVES:
                raise InputError(f"unknown objective {o!r} (latency or throughput)",
                                 place="--objective")
        for p in self.precisions:
            parse_policy(p)
        if self.slo_s is not None and not (math.isfinite(self.slo_s) and self.slo_s > 0):
            raise InputError(f"the SLO must be a positive duration, got {self.slo_s!r}",
                             place="--slo")
        if isinstance(self.time_limit_s, bool) or not math.isfinite(self.time_limit_s) or \
                self.time_limit_s <= 0:
            raise InputError(f"the time limit must be a positive number of seconds, got "
                             f"{self.time_limit_s!r}", place="--time-limit")
        for p in self.platforms:
            if p not in self.machines:
                self.machines[p] = load_platform(p)
        for model in self.models:
            for shape in self.shapes:
                load_graph(model, shape, self.batches[0])


def cell_specs(cfg: SweepConfig) -> list[CellSpec]:
    """The cells of ``cfg`` in the document's order (the batch varying fastest)."""
    out: list[CellSpec] = []
    for model in cfg.models:
        for platform in cfg.platforms:
            for shape in cfg.shapes:
                sh = None if shape is None else tuple(
                    sorted((k, tuple(int(x) for x in v)) for k, v in shape.items()))
                for objective in cfg.objectives:
                    for precision in cfg.precisions:
                        for b in cfg.batches:
                            out.append(CellSpec(
                                model, platform, b, sh, objective, precision,
                                cfg.time_limit_s, tuple(cfg.batches), tuple(cfg.seqs),
                                cfg.strategy, cfg.seed, cfg.plans_dir, index=len(out)))
    return out


def run_sweep(cfg: SweepConfig, *, engine: str = "local", ray_address: str | None = None,
              ray_num_cpus: int | None = None,
              progress: Callable[[str, float], None] | None = None) -> dict[str, Any]:
    """Check ``cfg``, run its cells on ``engine`` (``local`` or ``ray``) and return the
    sweep document (package docstring)."""
    if engine not in ENGINES:
        raise InputError(f"unknown engine {engine!r} (local or ray)", place="--engine")
    if engine == "ray":
        import_ray()  # refused before any work
    t0 = time.perf_counter()
    cfg.check()
    specs = cell_specs(cfg)
    if engine == "local":
        records, start_s = run_local(specs, machines=cfg.machines, progress=progress)
    else:
        records, start_s = run_ray(specs, address=ray_address, num_cpus=ray_num_cpus,
                                   progress=progress)
    walls = [float(r.pop("wall_s", 0.0)) for r in records]
    doc: dict[str, Any] = {
        "schema": SCHEMA, "created_by": f"placewise {__version__}", "engine": engine,
        "slo_s": cfg.slo_s, "time_limit_s": cfg.time_limit_s, "strategy": cfg.strategy,
        "seed": cfg.seed,
        "axes": {"models": list(cfg.models), "platforms": list(cfg.platforms),
                 "batches": list(cfg.batches),
                 "shapes": [None if s is None else {k: list(v) for k, v in s.items()}
                            for s in cfg.shapes],
                 "objectives": list(cfg.objectives), "precision": list(cfg.precisions),
                 "seqs": list(cfg.seqs)},
        "cells": records,
        "fit_matrix": fit_matrix(records, cfg.models, cfg.platforms, cfg.slo_s),
        "curves": curves(records), "regret": regret_matrices(records),
        "sensitivity": sensitivity(records)}
    doc = _finite(doc)
    doc["timing"] = {"wall_s": round(time.perf_counter() - t0, 4), "cells": len(records),
                     "engine_start_s": round(start_s, 4),
                     "cell_wall_s": [round(w, 4) for w in walls]}
    return doc


def _finite(obj: Any) -> Any:
    """``obj`` with every non-finite float as None (JSON has no infinity)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


CSV_COLUMNS = ("model", "platform", "batch", "shape", "objective", "precision", "fits",
               "latency_s", "throughput_rps", "lower_bound_s", "devices_used",
               "bottleneck_resource", "min_headroom_bytes", "energy_per_request_j",
               "requests_per_j", "mfu", "memory_bound_fraction", "reason")


def sweep_csv(doc: Mapping[str, Any]) -> str:
    """One CSV row per cell of a sweep document (``CSV_COLUMNS``)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for c in doc["cells"]:
        e = c.get("energy") or {}
        shape = c.get("shape")
        w.writerow([
            c["model"], c["platform"], c["batch"],
            "" if not shape else ";".join(f"{k}={'x'.join(map(str, v))}"
                                          for k, v in shape.items()),
            c["objective"], c["precision"], c["fits"], _num(c["latency_s"]),
            _num(c["throughput_rps"]), _num(c["lower_bound_s"]), " ".join(c["devices_used"]),
            c["bottleneck_resource"] or "",
            min(c["headroom_bytes"].values()) if c["headroom_bytes"] else "",
            _num(e.get("energy_per_request_j")) if e.get("available") else "",
            _num(e.get("requests_per_j")) if e.get("available") else "",
            _num(c["mfu"]), _num(c["memory_bound_fraction"]), c["reason"] or ""])
    return buf.getvalue()


def _num(v: Any) -> str:
    return "" if v is None else repr(float(v))
