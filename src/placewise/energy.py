"""Energy of a plan: an estimate from the machine's power figures and the plan's schedule.

**The model.** Every device of the machine is powered for the whole run and draws its
``idle_w``; while it runs a task it draws ``active_w`` instead. So one run of the plan
(``plan.batch`` requests) costs

    energy_j = sum over devices (idle_w x makespan_s + (active_w - idle_w) x busy_s)
               + rest_w x makespan_s

where ``busy_s`` is the device's busy time in the plan's schedule (``ResourceRecord.busy_s``
of its compute resources; a resource with several lanes counts its mean lane occupancy,
``busy_s / lanes``; never more than the makespan) and ``rest_w`` is the part of the
machine's own ``power.idle_w`` that its devices' ``idle_w`` do not account for (memory,
I/O, the board: 0 when the machine gives no machine-level figure or its devices account
for all of it). From it: energy per request (``energy_j / batch``), requests per joule,
and average power (``energy_j / makespan_s``).

**At saturation** (requests back to back, the pipeline full) a run takes the plan's
pipeline period instead of its makespan (``plan.throughput.period_s``) and each device is
still busy ``busy_s`` per run: ``saturated_energy_per_request_j`` and
``saturated_average_power_w`` use the period in place of the makespan.

**Its limits** (why it is always labelled an estimate): ``active_w`` is one figure per
device (a TDP or a measured stress-test power), whatever the op: a memory-bound op draws
less than a dense GEMM, so busy devices are over-estimated; idle power is a stated
estimate for most devices; links and transfers (DMA engines, NVLink, PCIe) cost nothing
beyond the devices' idle power; the host's request hand-off outside the schedule
(``plan.request``) is left out; DVFS, boost clocks and thermal throttling are not
modelled, and a machine whose estimated average power exceeds its ``power.max_w`` would
lower its clocks (a note says so). A machine without power figures (``local``: a probe
measures time, not power) gives ``available=False`` with the reason.

>>> from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
>>> from placewise.hardware.spec import Machine
>>> from placewise.plan import build_plan
>>> from placewise.schedule import Problem, Placement, evaluate
>>> from placewise.schedule.testing import ToyCostModel, toy_machine
>>> from placewise.units import DType
>>> x = Tensor("x", (1000,), DType.FP32, role=Role.INPUT)
>>> y = Tensor("y", (1000,), DType.FP32, role=Role.OUTPUT)
>>> g = Graph.build("g", [x, y], [Op("a", OpKind.RELU, ("x",), ("y",))])
>>> m = toy_machine()
>>> prob = Problem(g, None, m, ToyCostModel(m, {("a", "gpu"): 1e-3}))
>>> plan = build_plan(prob, evaluate(prob, Placement.uniform(["a"], "gpu", DType.FP32)),
...                   model_ref="g.json", strategy="single:gpu")
>>> plan_energy(plan, m).reason
'machine toy has no power figures (devices without them: cpu, gpu)'
>>> data = m.model_dump(mode="json")
>>> for d, (active, idle) in zip(data["devices"], [(10.0, 2.0), (100.0, 20.0)]):
...     d["power"] = {"active_w": active, "idle_w": idle, "source": "toy"}
>>> powered = Machine.model_validate(data)  # power is not in the fingerprint: same plan
>>> e = plan_energy(plan, powered)
>>> round(plan.makespan_s * 1e3, 6)  # 5 us in, 1 ms on the gpu, 5 us out
1.01
>>> # cpu 2 W x 1.01 ms + gpu (20 W x 1.01 ms + 80 W x 1 ms) = 102.22 mJ
>>> round(e.energy_per_run_j * 1e3, 4), e.estimate, round(e.requests_per_j, 3)
(102.22, True, 9.783)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from placewise.plan import check_fingerprints
from placewise.records import to_json
from placewise.schedule.simulate import ResourceKind

if TYPE_CHECKING:
    from placewise.hardware.spec import Machine
    from placewise.plan import Plan

__all__ = ["METHOD", "DeviceEnergy", "EnergyEstimate", "plan_energy"]

#: the formula, as every estimate states it
METHOD = ("estimate from the model: energy = sum over devices (idle_w x makespan_s + "
          "(active_w - idle_w) x busy_s) + rest-of-machine idle_w x makespan_s; at "
          "saturation the pipeline period replaces the makespan")

REST = "(rest of machine)"


@dataclass(frozen=True, slots=True)
class DeviceEnergy:
    """One device's share of a run: its power figures, busy time and energy."""

    device: str
    idle_w: float
    active_w: float
    busy_s: float
    energy_j: float
    saturated_energy_j: float
    source: str


@dataclass(frozen=True, slots=True)
class EnergyEstimate:
    """The energy of a plan (module docstring); figures are None when not ``available``."""

    available: bool
    reason: str | None
    machine: str
    mode: str | None
    batch: int
    makespan_s: float
    period_s: float | None = None
    energy_per_run_j: float | None = None
    energy_per_request_j: float | None = None
    requests_per_j: float | None = None
    average_power_w: float | None = None
    saturated_energy_per_request_j: float | None = None
    saturated_requests_per_j: float | None = None
    saturated_average_power_w: float | None = None
    machine_max_w: float | None = None
    devices: tuple[DeviceEnergy, ...] = ()
    notes: tuple[str, ...] = ()
    estimate: bool = True
    method: str = field(default=METHOD)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready values of every field (``records.to_json``)."""
        out: dict[str, Any] = to_json(self)
        return out


def _busy(plan: Plan, window_s: float) -> dict[str, float]:
    """Device -> busy seconds per run (compute resources, ``busy_s / lanes``, at most
    ``window_s``)."""
    busy: dict[str, float] = {}
    for r in plan.schedule.resources:
        if r.kind is ResourceKind.COMPUTE and r.device is not None:
            busy[r.device] = busy.get(r.device, 0.0) + r.busy_s / max(1, r.lanes)
    return {d: min(b, window_s) for d, b in busy.items()}


def _mode(machine: Machine) -> str | None:
    p = machine.power
    if p is None:
        return None
    return p.mode or p.default_mode


def plan_energy(plan: Plan, machine: Machine, *, file: str | None = None) -> EnergyEstimate:
    """The energy estimate of ``plan`` on ``machine`` (module docstring). ``machine`` must
    be the plan's (its fingerprint; ``InputError`` naming it otherwise, ``file``: the plan
    file for the message)."""
    check_fingerprints(plan, machine=machine, file=file)
    batch = max(1, int(plan.batch))
    makespan = float(plan.makespan_s)
    period = float(plan.throughput.period_s) if plan.throughput.period_s > 0 else None
    max_w = machine.power.max_w if machine.power is not None else None
    base = EnergyEstimate(False, None, machine.name, _mode(machine), batch, makespan,
                          period_s=period, machine_max_w=max_w)
    missing = [d.name for d in machine.devices if d.power is None]
    if missing:
        what = ("the local machine (measured by placewise hw probe, which measures time, not "
                "power)" if machine.name == "local" else f"machine {machine.name}")
        return replace(base, reason=f"{what} has no power figures (devices without them: "
                                    f"{', '.join(missing)})")
    if makespan <= 0:
        return replace(base, reason="the plan's makespan is zero: nothing runs")
    busy = _busy(plan, makespan)
    rows: list[DeviceEnergy] = []
    for d in machine.devices:
        p = d.power
        assert p is not None
        b = busy.get(d.name, 0.0)
        dyn = max(0.0, p.active_w - p.idle_w)
        sat = (p.idle_w * period + dyn * min(b, period)) if period is not None else math.nan
        rows.append(DeviceEnergy(d.name, p.idle_w, p.active_w, b, p.idle_w * makespan + dyn * b,
                                 sat, p.source))
    if machine.power is not None:
        rest_w = machine.power.idle_w - sum(d.power.idle_w for d in machine.devices
                                            if d.power is not None)
        if rest_w > 1e-9:
            rows.append(DeviceEnergy(REST, rest_w, rest_w, 0.0, rest_w * makespan,
                                     rest_w * period if period is not None else math.nan,
                                     f"machine idle_w less its devices' idle_w: "
                                     f"{machine.power.idle_source}"))
    run_j = sum(r.energy_j for r in rows)
    sat_j = sum(r.saturated_energy_j for r in rows) if period is not None else None
    avg_w = run_j / makespan
    notes: list[str] = []
    for label, watts in (("average power", avg_w),
                         ("saturated average power", sat_j / period if sat_j and period else None)):
        if max_w is not None and watts is not None and watts > max_w * (1 + 1e-9):
            notes.append(f"the estimated {label} ({watts:.4g} W) exceeds the machine's power "
                         f"budget ({max_w:g} W): the hardware would lower its clocks, so the "
                         f"plan's times and this energy are optimistic")
    return replace(
        base, available=True, energy_per_run_j=run_j, energy_per_request_j=run_j / batch,
        requests_per_j=batch / run_j if run_j > 0 else None, average_power_w=avg_w,
        saturated_energy_per_request_j=sat_j / batch if sat_j is not None else None,
        saturated_requests_per_j=batch / sat_j if sat_j else None,
        saturated_average_power_w=sat_j / period if sat_j is not None and period else None,
        devices=tuple(rows), notes=tuple(notes))
