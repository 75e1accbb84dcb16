"""A workload plan as a loaded service: one arrival stream per model, simulated and for real.

A workload plan (``graph.workload``: several models planned together on one machine)
records each model's stream (``ModelRecord.rate_per_s``, ``priority``). Serving it:

- **arrivals** (``workload_arrivals``): each model's own Poisson stream at its rate (times
  ``scale``), seeded per model, merged in time order; a request's class is its model's index;
- **simulated** (``simulate_workload``): one server per model (``serve.sim``'s replicas,
  routed ``by-class``), each with its own queue and batcher; a model's batch costs what the
  model costs on its own under the plan's placement (``serve.service.MemberService``), after
  an idle gap what ``placewise tune`` measured for that model (each model tuned alone), and
  batches run padded to the plan's batch, as the executor runs them (the executor's
  program has the plan's fixed shapes); the devices, links and cores the models have in
  common are *shared* by name: one batch
  at a time, first come first served across the models, so a model waits while another's
  batch holds a device they both use;
- **for real** (``serve_workload``): one executor per model running that model's part of
  the plan (``plan_workload.member_plan``: its partitions, in the plan's order), every
  device a worker process; the executors of models that use one device run on its cores
  side by side, the operating system sharing them. The loop is ``serve.replicas``' with
  requests routed by model.

``by_model`` splits a result into each model's figures (completed, p50, p99, throughput).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from placewise.errors import InputError
from placewise.plan_workload import member_plan
from placewise.records import to_json
from placewise.runtime.executor import Executor
from placewise.runtime.planned import planned_program
from placewise.serve.policies import Batcher
from placewise.serve.queue import Admission, RequestQueue
from placewise.serve.real import SERVE, SERVE_WARMUP, Lane, Progress, RealServe
from placewise.serve.replicas import ReplicaLoop
from placewise.serve.service import MemberService, PlanService
from placewise.serve.sim import ServeResult, Workload, simulate
from placewise.serve.tune import plan_window

if TYPE_CHECKING:
    from placewise.hardware.spec import Machine
    from placewise.plan import Plan

__all__ = ["ModelFigures", "by_model", "serve_workload", "simulate_workload",
           "workload_arrivals"]


def _models(plan: Plan) -> list[Any]:
    if plan.workload is None:
        raise InputError("the plan is of one model, not a workload (plan --model A "
                         "--model B)", place="workload")
    return list(plan.workload.models)


def workload_arrivals(plan: Plan, duration_s: float, *, scale: float = 1.0, seed: int = 0,
                      rates: Sequence[float] | None = None) -> Workload:
    """Each model's Poisson arrivals at its rate (``rates``, else the plan's, times
    ``scale``) over ``duration_s`` seconds, merged; class = the model's index.
    ``InputError`` when a model has no rate."""
    models = _models(plan)
    if rates is None:
        missing = [m.name for m in models if m.rate_per_s is None]
        if missing:
            raise InputError(f"model {missing[0]!r} has no rate: plan with --stream "
                             f"{missing[0]}:rate=R", place="workload")
        rates = [float(m.rate_per_s or 0.0) for m in models]
    if not (duration_s > 0 and scale > 0):
        raise InputError("the duration and the scale must be > 0", place="--duration")
    times: list[np.ndarray] = []
    classes: list[np.ndarray] = []
    for k, rate in enumerate(rates):
        r = rate * scale
        rng = np.random.default_rng([seed, k])
        n = int(rng.poisson(r * duration_s)) + 1
        t = np.cumsum(rng.exponential(1.0 / r, n))
        t = t[t < duration_s]
        times.append(t)
        classes.append(np.full(len(t), k, dtype=np.int64))
    all_t = np.concatenate(times)
    order = np.argsort(all_t, kind="stable")
    return Workload(all_t[order], np.concatenate(classes)[order])


def simulate_workload(whole: PlanService, workload: Workload, batcher: Batcher, *,
                      admission: Admission | None = None, in_flight: int | None = None,
                      tuned: bool = True) -> ServeResult:
    """The workload plan of ``whole`` serving ``workload`` (module docstring); with
    ``tuned``, each model that ``placewise tune`` measured (``ModelRecord.service``) pays
    its measured idle-gap cost and spread (``serve.sim``'s idle gaps)."""
    models = _models(whole.plan)
    services = [MemberService(whole, m.name) for m in models]
    idle = [m.service if tuned else None for m in models]
    return simulate(workload, services, batcher, admission=admission,
                    priorities=[m.priority for m in models], router="by-class",
                    in_flight=in_flight, shared=True, pad_to=whole.plan.batch,
                    idle=idle if any(x is not None for x in idle) else None)


def serve_workload(plan: Plan, workload: Workload, batcher: Batcher, *,
                   admission: Admission | None = None, windows: Sequence[int] | None = None,
                   limit_s: float = 60.0, warmup: int = 5, inputs: int = 4, seed: int = 0,
                   machine: Machine | None = None, file: str | None = None,
                   timeout_s: float = 120.0, progress: Progress | None = None,
                   progress_s: float = 0.5) -> RealServe:
    """Serve ``workload`` with the workload ``plan`` on this machine, for real (module
    docstring): one executor per model, requests routed by model. The result's resources
    are ``{model}/{device}``."""
    # lazy: torch (runtime.opexec imports it) is heavy to import, loaded only when this runs
    from placewise.runtime.opexec import request_inputs

    report: Progress = progress or (lambda _m, _f: None)
    models = _models(plan)
    admission = admission or Admission()
    times = np.asarray(workload.times_s, dtype=float)
    classes = (np.zeros(len(times), dtype=np.int64) if workload.classes is None
               else np.asarray(workload.classes, dtype=np.int64))
    plans = [member_plan(plan, m.name) for m in models]
    wins = list(windows) if windows is not None else [plan_window(p) for p in plans]
    with contextlib.ExitStack() as stack:
        lanes: list[Lane] = []
        programs = []
        for k, (m, mp) in enumerate(zip(models, plans, strict=True)):
            report(f"starting model {m.name}", 0.1 * k / len(models))
            machine, src, program = planned_program(mp, machine, None, None, file)
            pool = request_inputs(src, program.graph, inputs, seed)
            tuned: dict[str, Any] = {} if mp.service is None else {
                "session_spinning": mp.service.session_spinning,
                "client_spin_s": mp.service.client_spin_s}  # what tune chose for it
            ex = stack.enter_context(Executor(
                program, src, reference_inputs=pool[0], slots=wins[k], inline_host=False,
                timeout_s=max(timeout_s, 100.0 * float(mp.makespan_s)), **tuned))
            ex.start()
            if warmup:
                ex.run([pool[i % len(pool)] for i in range(warmup)], phase=SERVE_WARMUP)
            lanes.append(Lane(ex, pool, max(1, int(plan.batch)), name=m.name))
            programs.append(program)
        report(f"serving {len(times)} requests of {len(models)} models", 0.15)
        run = ReplicaLoop(lanes, times, classes,
                          [RequestQueue(batcher, admission, tuple(x.priority for x in models))
                           for _ in models],
                          len(models), wins, limit_s, report, progress_s, "by-class",
                          [(float(p.throughput.period_s), float(p.makespan_s)) for p in plans])
        run.loop()
        run.drain()
        tels = [ln.ex.telemetry() for ln in lanes]
    tags = {"phase": SERVE, "router": "by-class", "models": ",".join(m.name for m in models),
            "batching": batcher.describe(), "admission": admission.text(),
            "windows": ",".join(map(str, wins)), "arrivals": str(len(times))}
    return run.served([m.name for m in models], programs, tels, tags)


@dataclass(frozen=True, slots=True)
class ModelFigures:
    """One model's share of a served workload: requests ``arrived`` and ``completed``, its
    latency p50 and p99 (None: none completed) and throughput over the run's span."""

    name: str
    arrived: int
    completed: int
    p50_s: float | None
    p99_s: float | None
    throughput_rps: float

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


def by_model(result: ServeResult, names: Sequence[str]) -> list[ModelFigures]:
    """``result`` split by class, one class per model (``names`` in class order)."""
    out = []
    for k, name in enumerate(names):
        lat = result.latency_s[result.classes == k]
        arrived = result.arrived_by_class[k] if k < len(result.arrived_by_class) else 0
        out.append(ModelFigures(
            name, int(arrived), len(lat),
            float(np.quantile(lat, 0.5)) if len(lat) else None,
            float(np.quantile(lat, 0.99)) if len(lat) else None,
            len(lat) / result.span_s if result.span_s > 0 else 0.0))
    return out
