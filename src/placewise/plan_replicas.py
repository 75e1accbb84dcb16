"""Replication against layer placement: whole copies of the model on devices of their own,
the stream split by each copy's capacity, beside the plan that places layers over devices.

Every search scores ``single:DEVICE`` (every vertex on one device) as a baseline, and a
throughput plan records each one's pipelined throughput (``SearchRecord.baselines``). A set
of such copies on devices that share nothing (no CPU core in common) serves a stream split by
capacity (``serve --replica-plan ... --router weighted``) at the sum of their throughputs.
``replica_option`` finds the set with the highest sum (every subset of the feasible devices:
a machine has a handful) and sets it against the plan's own throughput, so that the choice
between replication and layer placement is made on the evaluator's numbers, and says how to
get the copies. A mix (a replica that is itself a layer placement over several devices) is
not searched: ``serve`` takes such plans as replicas, but nothing proposes them yet.

>>> pick = _best_set({"gpu": 900.0, "dla0": 300.0, "dla1": 300.0}, {})
>>> sorted(pick), sum(pick.values())
(['dla0', 'dla1', 'gpu'], 1500.0)
>>> sorted(_best_set({"cpu0": 5.0, "cpu1": 5.0, "cpu01": 8.0},
...                  {"cpu0": (0,), "cpu1": (1,), "cpu01": (0, 1)}))
['cpu0', 'cpu1']
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from placewise.hardware.spec import Machine
from placewise.plan_records import Plan

__all__ = ["replica_option"]


def _best_set(rates: Mapping[str, float], cores: Mapping[str, Sequence[int]]
              ) -> dict[str, float]:
    """The devices, no two sharing a core, whose rates sum highest (ties: fewer devices,
    then names)."""
    names = sorted(rates)
    best: tuple[float, int, tuple[str, ...]] = (0.0, 0, ())
    for k in range(1, len(names) + 1):
        for combo in itertools.combinations(names, k):
            used: set[int] = set()
            ok = True
            for d in combo:
                mine = set(cores.get(d, ()))
                if used & mine:
                    ok = False
                    break
                used |= mine
            if not ok:
                continue
            total = sum(rates[d] for d in combo)
            if (total, -len(combo)) > (best[0], -best[1]):
                best = (total, len(combo), combo)
    return {d: rates[d] for d in best[2]}


def replica_option(plan: Plan, machine: Machine | None = None) -> dict[str, Any] | None:
    """For a throughput plan: the best set of whole-model copies on single devices (module
    docstring) beside the plan's throughput; None for a latency plan or when no single
    device fits. ``machine``: the plan's (a device that does not run every op of the model
    is left out: its baseline falls back to another device; devices sharing a CPU core are
    never both replicas; each copy's rate is divided by its device's co-run slowdown beside the others,
    ``Device.corun_slowdown``: the copies run at once). Shared memory bandwidth between the
    copies is not priced here."""
    if plan.objective.value != "throughput" or plan.search is None:
        return None
    rates = {}
    for b in plan.search.baselines:  # a throughput search's objective is the period
        if not (b.label.startswith("single:") and b.feasible):
            continue
        rps = b.throughput_rps or (plan.batch / b.objective_s if b.objective_s else None)
        if rps:
            rates[b.label.removeprefix("single:")] = float(rps)
    if not rates:
        return None
    cores = {d.name: tuple(d.cores or ()) for d in machine.devices} if machine else {}
    if machine is not None:  # a copy whose ops fall back to another device is not its own
        kinds = {o.kind for o in plan.ops.values()}
        rates = {d: r for d, r in rates.items()
                 if all(machine.device(d).supports(k) for k in kinds)}
        if not rates:
            return None
    pick = _best_set(rates, cores)
    if machine is not None:  # the copies run side by side: each slowed by the others
        pick = {d: r / machine.device(d).corun_slowdown(set(pick) - {d})
                for d, r in pick.items()}
    total = sum(pick.values())
    own = float(plan.throughput_rps or 0.0)
    return {"devices": sorted(pick), "capacity_rps": total,
            "by_device_rps": dict(sorted(pick.items())), "plan_rps": own,
            "replicate": total > own,
            "how": [f"placewise plan {plan.model} --hw {plan.machine.name} --batch "
                    f"{plan.batch} --objective throughput --strategy single:{d} --out "
                    f"replica-{d}.json" for d in sorted(pick)]}
