"""Small problems for the search tests: task graphs with given times, toy and 3-device
machines without shared controllers (so that the contention-free models are exact where
they claim to be), and graphs of real ops whose precision choice causes conversions."""

from __future__ import annotations

from placewise.graph.ir import Graph
from placewise.graph.taskgraph import generate, parse_taskgraph
from placewise.hardware.spec import Machine
from placewise.schedule import Problem
from placewise.schedule.testing import ToyCostModel, toy_machine
from placewise.units import DType
from tests.schedule.helpers import device, link, machine


def three_devices() -> Machine:
    """cpu (fp32), gpu (fp32, fp16) and npu (fp32), all pairs linked, one lane each."""
    return machine(
        [device("cpu", dtypes={"fp32": 1e9}),
         device("gpu", kind="gpu", dtypes={"fp32": 4e9, "fp16": 8e9}),
         device("npu", kind="npu", dtypes={"fp32": 2e9})],
        [link("l1", "cpu", "gpu", bw=2e9), link("l2", "cpu", "npu", bw=1e9),
         link("l3", "gpu", "npu", bw=5e8)], name="three")


def task_graph(kind: str, n: int, seed: int, m: Machine, *, edge_bytes: float = 3e7
               ) -> Graph:
    """A generated task graph whose tasks take flops / peak on each device (x affinity)."""
    rates = {d: m.device(d).peak(DType.FP32) for d in m.device_names}
    return parse_taskgraph(generate(kind, n, seed=seed, device_flops_per_s=rates,
                                    mean_edge_bytes=edge_bytes, mean_flops=1e9))


def task_problem(kind: str, n: int, seed: int, m: Machine | None = None,
                 **kw: float) -> Problem:
    m = m or toy_machine()
    return Problem(task_graph(kind, n, seed, m, **kw), None, m, ToyCostModel(m))
