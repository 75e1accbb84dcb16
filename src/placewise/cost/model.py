"""The cost-model contract: what an op, a transfer and a conversion cost, term by term.

Every answer is a ``Cost``: named terms (seconds each), a central estimate, an interval
(p10..p90 by default), the bottleneck class, and provenance (roofline / calibrated /
profiled / given) with the assumptions used. The scheduler, search, plan and validation all
consume this contract and nothing else.

>>> c = Cost.of({Term.COMPUTE: 2e-6, Term.LAUNCH: 1e-6}, bottleneck=Bottleneck.COMPUTE,
...             source=Source.ROOFLINE, rel_low=0.8, rel_high=1.3)
>>> c.total_s, c.low_s <= c.total_s <= c.high_s
(3e-06, True)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from placewise.graph.ir import Graph, Op, Tensor
from placewise.hardware.spec import Machine
from placewise.units import DType, Layout

__all__ = [
    "Bottleneck",
    "Cost",
    "CostModel",
    "NoRuntimeTerms",
    "Representation",
    "Source",
    "Term",
]


class Term(Enum):
    """Named parts of a cost. Times of all terms of one ``Cost`` add up to its total."""

    COMPUTE = "compute"
    MEMORY = "memory"  # memory traffic beyond what overlaps with compute
    LAUNCH = "launch"  # kernel launch / dispatch
    TRANSFER = "transfer"
    CONVERSION = "conversion"
    SYNC = "sync"
    CONTENTION = "contention"  # added by the scheduler, never by the cost model
    QUEUEING = "queueing"  # added by the serving simulator


class Bottleneck(Enum):
    COMPUTE = "compute"
    MEMORY = "memory"
    LAUNCH = "launch"
    PARALLELISM = "parallelism"
    LINK = "link"
    NONE = "none"


class Source(Enum):
    ROOFLINE = "roofline"
    CALIBRATED = "calibrated"
    PROFILED = "profiled"
    GIVEN = "given"  # explicit times from a task graph


@dataclass(frozen=True, slots=True)
class Representation:
    """How a device holds a tensor: dtype and layout."""

    dtype: DType
    layout: Layout = Layout.ROW_MAJOR

    def __str__(self) -> str:
        return f"{self.dtype.value}/{self.layout.value}"


@dataclass(frozen=True, slots=True)
class Cost:
    """Seconds, split in named terms, with an interval and where the numbers came from."""

    terms: tuple[tuple[Term, float], ...]
    low_s: float
    high_s: float
    bottleneck: Bottleneck
    source: Source
    # assumptions used: peak_flops_per_s, efficiency, bytes, bandwidth_bytes_per_s, ...
    assumptions: tuple[tuple[str, float | str], ...] = ()
    # bytes this task moves through its device's memory (for contention modelling)
    memory_bytes: int = 0
    # temporary buffer the task holds while it runs (conversion output, workspace)
    buffer_bytes: int = 0
    _total: float = field(default=0.0, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_total", sum(v for _, v in self.terms))

    @classmethod
    def of(cls, terms: dict[Term, float], *, bottleneck: Bottleneck, source: Source,
           rel_low: float = 1.0, rel_high: float = 1.0,
           assumptions: dict[str, float | str] | None = None, memory_bytes: int = 0,
           buffer_bytes: int = 0) -> Cost:
        """Build a cost whose interval is ``[total*rel_low, total*rel_high]``."""
        items = tuple((k, float(v)) for k, v in terms.items() if v != 0.0)
        total = sum(v for _, v in items)
        return cls(items, total * rel_low, total * rel_high, bottleneck, source,
                   tuple(sorted((assumptions or {}).items())), memory_bytes, buffer_bytes)

    @classmethod
    def zero(cls) -> Cost:
        return cls((), 0.0, 0.0, Bottleneck.NONE, Source.ROOFLINE)

    @property
    def total_s(self) -> float:
        return self._total

    def term(self, t: Term) -> float:
        return sum(v for k, v in self.terms if k is t)

    def to_json(self) -> dict[str, Any]:
        return {
            "total_s": self.total_s,
            "low_s": self.low_s,
            "high_s": self.high_s,
            "terms_s": {k.value: v for k, v in self.terms},
            "bottleneck": self.bottleneck.value,
            "source": self.source.value,
            "assumptions": dict(self.assumptions),
            "memory_bytes": self.memory_bytes,
            "buffer_bytes": self.buffer_bytes,
        }


class CostModel(Protocol):
    """The three questions every cost model answers."""

    machine: Machine

    def op_cost(self, graph: Graph, op: Op, device: str, dtype: DType) -> Cost:
        """An op (or the ops of a fused region, see ``region_cost``) on ``device`` computing
        in ``dtype`` at the op's real shape."""
        ...

    def region_cost(self, graph: Graph, ops: list[Op], device: str, dtype: DType) -> Cost:
        """A fused region: one launch, internal tensors never leave the device."""
        ...

    def transfer_cost(self, tensor: Tensor, rep: Representation, src: str, dst: str) -> Cost:
        """Moving ``tensor`` held as ``rep`` from device ``src`` to ``dst`` (zero if same)."""
        ...

    def conversion_cost(self, tensor: Tensor, src: Representation, dst: Representation,
                        device: str) -> Cost:
        """Converting ``tensor`` between representations on ``device`` (zero if equal):
        a kernel with its own cost and a temporary output buffer."""
        ...

    def corun_slowdown(self, graph: Graph, ops: Sequence[Op], device: str, dtype: DType,
                       busy: frozenset[str]) -> float:
        """How many times longer the region ``ops`` takes on ``device`` (in ``dtype``) while
        the devices ``busy`` compute at the same time (their own work, on other cores):
        ``>= 1``, ``1.0`` when nothing is known, never smaller for a larger ``busy``. The
        scheduler stretches the overlapping part of a compute task by it
        (``placewise.schedule.simulate``)."""
        ...

    def wake_s(self, device: str) -> float:
        """Seconds a hand-off to ``device`` takes longer when its worker sleeps (blocks on
        its pipes) than when it polls: ``0.0`` when nothing is known. The scheduler adds it
        to a transfer whose receiver sleeps (``placewise.schedule.simulate``); a
        ``transfer_cost`` answers for a polling receiver."""
        ...

    def request_cost(self, host: str, devices: Sequence[str] = ()) -> Cost | None:
        """A request's hand-off outside the schedule when ``host`` holds the graph's inputs
        and outputs and ``devices`` are the placement's (inputs written -> graph starts,
        graph ends -> outputs ready): the evaluator adds it to the makespan
        (``placewise.schedule.evaluate``). None when nothing is known."""
        ...

    def request_busy_s(self, device: str) -> float | None:
        """Seconds of ``device``'s worker per pipelined request beyond its tasks (None: not
        known); the evaluator adds it to the throughput occupancy."""
        ...

    def client_busy_s(self) -> float | None:
        """Seconds of the client process per pipelined request (None: not known)."""
        ...

    def fingerprint(self) -> str:
        """Identifies the calibration (or 'roofline') for plan files."""
        ...


class NoRuntimeTerms:
    """The runtime terms of ``CostModel`` for a model that measured none (a datasheet
    roofline, a toy): no request hand-off, no per-request worker or client time. They are
    properties of the runtime that runs a plan, measured by calibration
    (``placewise.cost.calibrated``)."""

    def request_cost(self, host: str, devices: Sequence[str] = ()) -> Cost | None:
        return None

    def request_busy_s(self, device: str) -> float | None:
        return None

    def client_busy_s(self) -> float | None:
        return None
