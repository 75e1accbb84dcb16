"""The scheduler's resource model: what a task occupies and how shared bandwidth is divided.

Each device's compute lanes and each link (one resource per direction of a duplex link) are
exclusive resources; a machine's shared resources (memory controllers, unified memory) are
bandwidth divided max-min fairly among the tasks drawing on them (``waterfill``); CPU cores
that two devices share are held by one device at a time (``core:N``). The rules are stated
in ``placewise.schedule.simulate``'s docstring; this module builds the tables the event loop
reads (``Resources``) and sums what a finished schedule used (``resource_uses``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from placewise.errors import InputError
from placewise.hardware.spec import Machine
from placewise.records import dataclass_record

if TYPE_CHECKING:
    from placewise.schedule.timeline import Timeline

__all__ = [
    "ResourceKind",
    "ResourceUse",
    "Resources",
    "core_name",
    "core_occupancy_s",
    "resource_uses",
    "waterfill",
]


class ResourceKind(Enum):
    """``COMPUTE`` and ``LINK`` are exclusive (one task per lane at a time); ``SHARED`` is
    bandwidth divided among concurrent tasks (its lanes only keep trace tracks apart)."""

    COMPUTE = "compute"
    LINK = "link"
    SHARED = "shared"




@dataclass_record
@dataclass(frozen=True, slots=True)
class ResourceUse:
    """A resource the schedule used.

    ``busy_s``: summed task durations on it (contention included); ``work_s``: summed
    uncontended durations. For a ``SHARED`` resource (``lanes`` 0: unbounded) they are
    what its bandwidth ``C`` implies: ``work_s`` is its *occupancy* per run, the sum over
    its tasks of ``min(bytes / C, T)`` (each task's bytes at the full bandwidth, never
    longer than the task's uncontended duration ``T``: a task cannot occupy the resource
    longer than it runs); ``busy_s`` is the least time in which it can serve the bytes of
    its tasks of positive duration under the model, ``bytes / max(C, largest demand)``
    (see the module docstring: the active tasks never share more than that), a valid lower
    bound of the makespan.
    """

    name: str
    kind: ResourceKind
    lanes: int
    busy_s: float
    work_s: float
    tasks: int
    device: str | None = None
    link: str | None = None
    bandwidth_bytes_per_s: float = 0.0
    bytes: int = 0

    @property
    def exclusive(self) -> bool:
        return self.kind is not ResourceKind.SHARED



def core_name(core: int) -> str:
    """The resource name of CPU core ``core`` (``core:N``).

    >>> core_name(3)
    'core:3'
    """
    return f"core:{core}"


def core_occupancy_s(tl: Timeline) -> dict[str, float]:
    """See ``Schedule.core_occupancy_s``; from a timeline (also one rebuilt from records)."""
    devs: dict[int, dict[str, None]] = {}
    work: dict[int, float] = {}
    cores, res, lanes, dur, device = tl.cores, tl.res, tl.res_lanes, tl.dur, tl.device
    for i, cs in enumerate(cores):
        if not cs:
            continue
        share = dur[i] / max(1, lanes[res[i]])
        for c in cs:
            devs.setdefault(c, {})[device[i]] = None
            work[c] = work.get(c, 0.0) + share
    return {core_name(c): work[c] for c in sorted(work) if len(devs[c]) > 1}



class Resources:
    """The resources of one machine for one simulation, appended to a timeline's ``res_*``
    arrays (a resource id indexes them): every device's compute lanes (``lanes`` overrides
    ``Device.lanes`` by device name), every shared resource, every link direction.

    ``dev_res``: device -> its compute resource; ``dev_cores``: device -> the cores its
    compute and conversion tasks hold; ``res_gate``: resource id -> the cores its tasks hold
    that another device shares (empty: not gated); ``dev_ctrl``: device -> the shared
    resources its tasks draw on; ``link_res``: (link, sending end) -> (resource id, the
    shared resources the link itself occupies).
    """

    __slots__ = ("dev_cores", "dev_ctrl", "dev_res", "index", "link_res", "res_gate", "tl")

    def __init__(self, tl: Timeline, machine: Machine, lanes: Mapping[str, int] | None) -> None:
        self.tl = tl
        self.index: dict[str, int] = {}
        for d in machine.devices:
            n = d.lanes
            if lanes is not None and d.name in lanes:
                n = int(lanes[d.name])
                if n < 1:
                    raise InputError(f"lanes must be >= 1, got {n}", place=f"device {d.name!r}")
            self._add(d.name, ResourceKind.COMPUTE, n, device=d.name)
        shared = {r.name for r in machine.shared_resources}
        for r in machine.shared_resources:
            self._add(r.name, ResourceKind.SHARED, 0, bw=r.bandwidth_bytes_per_s)
        self.dev_res = {d.name: self.index[d.name] for d in machine.devices}
        self.dev_cores: dict[str, tuple[int, ...]] = {
            d.name: tuple(sorted(set(d.cores))) for d in machine.devices if d.cores}
        self.dev_ctrl: dict[str, tuple[int, ...]] = {}
        for d in machine.devices:
            names = [*d.resources]
            if d.main_memory.shared_with:
                names.append(d.main_memory.shared_with)
            self.dev_ctrl[d.name] = tuple(self.index[n] for n in dict.fromkeys(names)
                                          if n in shared)
        self.link_res: dict[tuple[str, str], tuple[int, tuple[int, ...]]] = {}
        for link in machine.links:
            a, b = link.endpoints
            if link.resource is not None and link.resource in shared:
                ri = self.index[link.resource]
                self.link_res[(link.name, a)] = (ri, (ri,))
                self.link_res[(link.name, b)] = (ri, (ri,))
                continue
            base = link.resource_name
            if link.duplex:
                for src, suffix in ((a, ":fwd"), (b, ":rev")):
                    self.link_res[(link.name, src)] = (self._link(base + suffix, link.name), ())
            else:
                ri = self._link(base, link.name)
                self.link_res[(link.name, a)] = (ri, ())
                self.link_res[(link.name, b)] = (ri, ())
        users: dict[int, int] = {}
        for cs in self.dev_cores.values():
            for c in cs:
                users[c] = users.get(c, 0) + 1
        self.res_gate: list[tuple[int, ...]] = [() for _ in tl.res_name]
        for dn, cs in self.dev_cores.items():
            self.res_gate[self.dev_res[dn]] = tuple(c for c in cs if users[c] > 1)

    def _add(self, name: str, kind: ResourceKind, lanes: int, *, device: str | None = None,
             link: str | None = None, bw: float = 0.0) -> int:
        tl = self.tl
        if name in self.index:
            raise InputError(f"resource name {name!r} is used twice (device, link or shared "
                             f"resource names collide)", place=f"resource {name!r}")
        ri = len(tl.res_name)
        self.index[name] = ri
        tl.res_name.append(name)
        tl.res_kind.append(kind)
        tl.res_lanes.append(lanes)
        tl.res_device.append(device)
        tl.res_link.append(link)
        tl.res_bw.append(bw)
        return ri

    def _link(self, name: str, link: str) -> int:
        ri = self.index.get(name)
        if ri is None:
            return self._add(name, ResourceKind.LINK, 1, link=link)
        if self.tl.res_kind[ri] is not ResourceKind.LINK:
            raise InputError(f"resource name {name!r} is used by a link and by a device",
                             place=f"link {link!r}")
        return ri


def waterfill(capacity: float, demands: dict[int, float]) -> dict[int, float]:
    """Max-min fair shares among ``demands`` (each capped at its demand) of
    ``max(capacity, largest demand)``: a task is never slowed by its own traffic (see the
    module docstring), so a lone task always gets its demand.

    >>> waterfill(10.0, {0: 8.0, 1: 8.0})
    {0: 5.0, 1: 5.0}
    >>> waterfill(10.0, {0: 30.0})
    {0: 30.0}
    >>> waterfill(10.0, {0: 20.0, 1: 20.0})
    {0: 10.0, 1: 10.0}
    """
    order = sorted(demands.items(), key=lambda kv: (kv[1], kv[0]))
    n = len(order)
    left = capacity
    if n and order[-1][1] > left:
        left = order[-1][1]
    out: dict[int, float] = {}
    for k, (i, d) in enumerate(order):
        share = left / (n - k)
        alloc = d if d <= share else share
        out[i] = alloc
        left -= alloc
    return out



def resource_uses(tl: Timeline) -> tuple[tuple[ResourceUse, ...], bool]:
    """What a simulated timeline used of each resource (see ``ResourceUse``; resources no
    task used are left out), and whether any task drew on a shared resource."""
    start, end, dur = tl.start, tl.end, tl.dur
    nres = len(tl.res_name)
    busy = [0.0] * nres
    work = [0.0] * nres
    count = [0] * nres
    shared_bytes = [0.0] * nres
    served = [0.0] * nres  # bytes of tasks of positive duration (they take time to serve)
    peak = [0.0] * nres  # largest demand
    occupied = [0.0] * nres  # sum of min(bytes / bandwidth, uncontended duration)
    res = tl.res
    part = tl.part
    bw = tl.res_bw
    for i in range(len(tl.name)):
        r = res[i]
        d = dur[i]
        busy[r] += end[i] - start[i]
        work[r] += d
        count[r] += 1
        for c, by in part[i]:
            shared_bytes[c] += by
            if d > 0.0:
                served[c] += by
                if by > peak[c] * d:
                    peak[c] = by / d
                sat = by / bw[c]
                occupied[c] += sat if sat < d else d
    out: list[ResourceUse] = []
    for r in range(nres):
        kind = tl.res_kind[r]
        if kind is ResourceKind.SHARED:
            if count[r] == 0 and shared_bytes[r] == 0.0:
                continue
            least = served[r] / max(bw[r], peak[r])
            out.append(ResourceUse(tl.res_name[r], kind, 0, least, occupied[r], count[r],
                                   bandwidth_bytes_per_s=bw[r], bytes=int(shared_bytes[r])))
        elif count[r]:
            out.append(ResourceUse(tl.res_name[r], kind, tl.res_lanes[r], busy[r], work[r],
                                   count[r], device=tl.res_device[r], link=tl.res_link[r]))
    return tuple(out), any(shared_bytes)
