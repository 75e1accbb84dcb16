"""The baselines every plan is compared to: one device for everything, and greedy.

- ``single:DEVICE``: every vertex on ``DEVICE``, all in the one precision (of the searched
  set) with the least total compute time there — no conversions inside the device. A
  vertex the device cannot run falls back to the host device (as an execution provider
  falls back to the CPU), or to its fastest candidate if the host cannot run it either;
  the fallback is reported.
- ``greedy``: every vertex on its locally fastest (device, precision), ignoring what its
  neighbours' transfers and conversions cost — how runtimes assign ops to execution
  providers by priority.

>>> from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
>>> from placewise.schedule.placement import Problem
>>> from placewise.schedule.testing import ToyCostModel, toy_machine
>>> from placewise.search.space import SearchSpace
>>> from placewise.units import DType
>>> x = Tensor("x", (1000,), DType.FP32, role=Role.INPUT)
>>> y = Tensor("y", (1000,), DType.FP32, role=Role.OUTPUT)
>>> g = Graph.build("g", [x, y], [Op("a", OpKind.RELU, ("x",), ("y",))])
>>> m = toy_machine()
>>> space = SearchSpace(Problem(g, None, m, ToyCostModel(m, {("a", "gpu"): 1e-3})))
>>> str(greedy_placement(space)["a"]), str(single_placement(space, "gpu")[0]["a"])
('cpu/fp32', 'gpu/fp32')
"""

from __future__ import annotations

from placewise.errors import InputError
from placewise.schedule.placement import Placement
from placewise.search.space import SearchSpace

__all__ = ["greedy_choice", "greedy_placement", "single_choice", "single_placement"]


def greedy_choice(space: SearchSpace) -> list[int]:
    """Candidate indexes of ``greedy``: each vertex's locally fastest candidate."""
    return list(space.best_k)


def greedy_placement(space: SearchSpace) -> Placement:
    """Each vertex on its locally fastest (device, precision)."""
    return space.placement(greedy_choice(space))


def single_choice(space: SearchSpace, device: str) -> tuple[list[int], str]:
    """Candidate indexes of ``single:DEVICE`` and a note on fallbacks ('' if none)."""
    p = space.problem
    if device not in p.device_index:
        raise InputError(f"machine {p.machine.name!r} has no device {device!r} (devices: "
                         f"{', '.join(p.devices)})", place="--strategy")
    di = p.device_index[device]
    host = p.device_index[p.host]
    totals: list[tuple[float, int]] = []
    for pos, dt in enumerate(space.dev_dtypes[di]):
        s = 0.0
        for i in range(space.n):
            for k, a in enumerate(space.cands[i]):
                if space.cand_dev[i][k] == di and a.dtype is dt:
                    s += space.cost_s[i][k]
                    break
        totals.append((s, pos))
    chosen = space.dev_dtypes[di][min(totals)[1]] if totals else None
    choice: list[int] = []
    fallback = 0
    for i in range(space.n):
        devs = space.cand_dev[i]
        costs = space.cost_s[i]
        on = [k for k in range(len(devs)) if devs[k] == di]
        if on:
            exact = [k for k in on if space.cands[i][k].dtype is chosen]
            choice.append(exact[0] if exact else min(on, key=lambda k: (costs[k], k)))
            continue
        fallback += 1
        on_host = [k for k in range(len(devs)) if devs[k] == host]
        pool = on_host or list(range(len(devs)))
        choice.append(min(pool, key=lambda k: (costs[k], k)))
    note = ""
    if fallback:
        note = (f"{fallback} of {space.n} vertices cannot run on {device} and fall back to "
                f"{p.host} (or their fastest device)")
    return choice, note


def single_placement(space: SearchSpace, device: str) -> tuple[Placement, str]:
    """Every vertex on ``device`` in its best uniform precision (see the module doc),
    and the fallback note."""
    choice, note = single_choice(space, device)
    return space.placement(choice), note
