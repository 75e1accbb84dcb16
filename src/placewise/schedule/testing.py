"""A toy cost model and machine with explicit, hand-checkable numbers.

For documentation examples and tests of the scheduler, memory model and everything built
on them (plan files, explain, trace, checker), so that those tests do not move when the
real cost models are tuned. Not for predictions.

``ToyCostModel`` (implements ``placewise.cost.model.CostModel``):

- an op takes ``times[(op, device)]`` seconds if given (all of it ``Term.COMPUTE``; its
  ``memory_bytes`` from ``memory[(op, device)]`` if given), else
  ``launch + max(flops / peak(dtype), bytes / bandwidth)`` with flops = ``hint.flops``
  for tasks and 2 per output element otherwise, bytes = inputs + outputs at the held dtype
  (``hint.bytes_moved`` for tasks); ``memory_bytes`` = those bytes;
- a region sums its ops' costs and pays one launch;
- a transfer takes ``bytes / bandwidth + latency`` summed over the route's links;
- a conversion reads the source and writes the target at the device's main bandwidth,
  plus one launch; its ``buffer_bytes`` is the target copy;
- co-run: a vertex whose first op is ``op`` takes ``corun[(op, device, busy_device)]``
  times longer while ``busy_device`` computes (the largest over the busy devices; 1.0 if
  not given); a hand-off to a sleeping worker on ``device`` takes ``wake[device]``
  seconds more (0.0 if not given).

>>> m = toy_machine()
>>> [d.name for d in m.devices], [link.name for link in m.links]
(['cpu', 'gpu'], ['pcie'])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from placewise.cost.model import (
    Bottleneck,
    Cost,
    NoRuntimeTerms,
    Representation,
    Source,
    Term,
)
from placewise.errors import UnsupportedError
from placewise.graph.ir import Graph, Op, OpKind, Tensor
from placewise.hardware.spec import Machine
from placewise.schedule.placement import held_dtype
from placewise.units import DType

__all__ = ["ToyCostModel", "toy_machine"]


def toy_machine(*, shared_controller: bool = False, gpu_lanes: int = 1,
                memory_bytes: int = 1 << 30) -> Machine:
    """A CPU (1 GFLOP/s fp32, 1 GB/s) and a GPU (10 GFLOP/s fp32/fp16, 10 GB/s) joined by
    a duplex 1 GB/s link ``pcie``; with ``shared_controller`` both draw on one 10 GB/s
    memory controller ``mc`` and share one ``memory_bytes`` capacity."""
    shared = "mc" if shared_controller else None
    src = "toy numbers for tests"

    def tier(name: str, bw: float) -> dict[str, object]:
        t: dict[str, object] = {"name": name, "capacity_bytes": memory_bytes,
                                "bandwidth_bytes_per_s": bw, "source": src}
        if shared:
            t["shared_with"] = shared
        return t

    data: dict[str, object] = {
        "name": "toy",
        "devices": [
            {"name": "cpu", "kind": "cpu", "peak_flops_per_s": {"fp32": 1e9},
             "peak_source": src, "memory": [tier("dram" if shared else "ram", 1e9)],
             "launch_overhead_s": 1e-6, "launch_source": src,
             "resources": [shared] if shared else []},
            {"name": "gpu", "kind": "gpu", "peak_flops_per_s": {"fp32": 1e10, "fp16": 2e10},
             "peak_source": src, "memory": [tier("dram" if shared else "vram", 1e10)],
             "launch_overhead_s": 1e-6, "launch_source": src, "lanes": gpu_lanes,
             "resources": [shared] if shared else []},
        ],
        "shared_resources": [{"name": shared, "bandwidth_bytes_per_s": 1e10, "source": src}]
        if shared else [],
        "links": [{"name": "pcie", "endpoints": ["cpu", "gpu"], "bandwidth_bytes_per_s": 1e9,
                   "latency_s": 1e-6, "duplex": True, "source": src}],
    }
    return Machine.model_validate(data)


class ToyCostModel(NoRuntimeTerms):
    """See the module docstring. ``times`` maps (op name, device) to seconds, ``memory``
    to the bytes the op moves through its device's memory (for contention)."""

    def __init__(self, machine: Machine,
                 times: Mapping[tuple[str, str], float] | None = None,
                 memory: Mapping[tuple[str, str], int] | None = None, *,
                 corun: Mapping[tuple[str, str, str], float] | None = None,
                 wake: Mapping[str, float] | None = None) -> None:
        self.machine = machine
        self.times = dict(times or {})
        self.memory = dict(memory or {})
        self.corun = dict(corun or {})
        self.wake = dict(wake or {})

    def corun_slowdown(self, graph: Graph, ops: Sequence[Op], device: str, dtype: DType,
                       busy: frozenset[str]) -> float:
        if not ops:
            return 1.0
        return max([1.0, *(self.corun.get((ops[0].name, device, b), 1.0) for b in busy)])

    def wake_s(self, device: str) -> float:
        return self.wake.get(device, 0.0)

    def _check(self, op: Op, device: str, dtype: DType) -> None:
        try:
            dev = self.machine.device(device)
        except KeyError:
            raise UnsupportedError(f"no device {device!r}") from None
        if not dev.supports(op.kind, dtype):
            raise UnsupportedError(f"device {device!r} cannot run {op.where()} in "
                                   f"{dtype.value}")

    def _parts(self, graph: Graph, op: Op, device: str, dtype: DType
               ) -> tuple[float, float, int]:
        dev = self.machine.device(device)
        if op.kind is OpKind.TASK and op.hint is not None:
            flops, nbytes = op.hint.flops, op.hint.bytes_moved
        else:
            outs = graph.out_tensors(op)
            flops = 2.0 * sum(t.numel for t in outs)
            nbytes = sum(held_dtype(t.dtype, dtype).nbytes(t.numel)
                         for t in [*graph.in_tensors(op), *outs])
        return flops / dev.peak(dtype), nbytes / dev.main_memory.bandwidth_bytes_per_s, nbytes

    def op_cost(self, graph: Graph, op: Op, device: str, dtype: DType) -> Cost:
        self._check(op, device, dtype)
        given = self.times.get((op.name, device))
        if given is None and op.hint is not None:
            given = op.hint.time_on(device)
        compute_s, memory_s, nbytes = self._parts(graph, op, device, dtype)
        nbytes = self.memory.get((op.name, device), nbytes)
        if given is not None:
            return Cost.of({Term.COMPUTE: given}, bottleneck=Bottleneck.COMPUTE,
                           source=Source.GIVEN, memory_bytes=nbytes,
                           buffer_bytes=op.scratch_bytes)
        launch = self.machine.device(device).launch_overhead_s
        return Cost.of({Term.COMPUTE: compute_s, Term.MEMORY: max(0.0, memory_s - compute_s),
                        Term.LAUNCH: launch},
                       bottleneck=Bottleneck.MEMORY if memory_s > compute_s
                       else Bottleneck.COMPUTE, source=Source.ROOFLINE,
                       memory_bytes=nbytes, buffer_bytes=op.scratch_bytes)

    def region_cost(self, graph: Graph, ops: list[Op], device: str, dtype: DType) -> Cost:
        launch = self.machine.device(device).launch_overhead_s
        costs = [self.op_cost(graph, op, device, dtype) for op in ops]
        terms: dict[Term, float] = {}
        for c in costs:
            for k, v in c.terms:
                terms[k] = terms.get(k, 0.0) + v
        if Term.LAUNCH in terms:
            terms[Term.LAUNCH] = launch
        return Cost.of(terms, bottleneck=Bottleneck.COMPUTE, source=Source.ROOFLINE,
                       memory_bytes=sum(c.memory_bytes for c in costs),
                       buffer_bytes=max(c.buffer_bytes for c in costs))

    def transfer_cost(self, tensor: Tensor, rep: Representation, src: str, dst: str) -> Cost:
        if src == dst:
            return Cost.zero()
        nbytes = rep.dtype.nbytes(tensor.numel)
        route = self.machine.route(src, dst)
        if not route:
            raise UnsupportedError(f"no route {src} -> {dst}")
        s = sum(nbytes / link.bandwidth_bytes_per_s + link.latency_s for link in route)
        return Cost.of({Term.TRANSFER: s}, bottleneck=Bottleneck.LINK, source=Source.ROOFLINE,
                       memory_bytes=nbytes)

    def conversion_cost(self, tensor: Tensor, src: Representation, dst: Representation,
                        device: str) -> Cost:
        if src == dst:
            return Cost.zero()
        dev = self.machine.device(device)
        read_b = src.dtype.nbytes(tensor.numel)
        write_b = dst.dtype.nbytes(tensor.numel)
        kernel = (read_b + write_b) / dev.main_memory.bandwidth_bytes_per_s
        return Cost.of({Term.CONVERSION: kernel, Term.LAUNCH: dev.launch_overhead_s},
                       bottleneck=Bottleneck.MEMORY, source=Source.ROOFLINE,
                       memory_bytes=read_b + write_b, buffer_bytes=write_b)

    def fingerprint(self) -> str:
        return "toy/v1"
