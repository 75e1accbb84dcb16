"""The scheduler with the real cost model on machine presets."""

from __future__ import annotations

import pytest

from placewise.cost.roofline import RooflineModel
from placewise.graph.fuse import fuse
from placewise.graph.taskgraph import generate, parse_taskgraph
from placewise.hardware.load import load_machine
from placewise.schedule import (
    Assignment,
    Placement,
    Problem,
    TaskKind,
    evaluate,
    feasible_assignments,
    problem_lower_bound,
)
from placewise.units import DType
from tests.schedule.helpers import check_schedule


@pytest.fixture(scope="module")
def mlp():  # type: ignore[no-untyped-def]
    from placewise.graph.load import load_model

    return load_model("zoo:mlp?layers=2&hidden=16", batch=2)


def test_zoo_model_on_the_h100_server(mlp) -> None:  # type: ignore[no-untyped-def]
    m = load_machine("h100-sxm-server")
    prob = Problem(mlp, fuse(mlp), m, RooflineModel(m), batch=2)
    pl = Placement.uniform(prob.vertex_names, "gpu0", DType.BF16)
    ev = evaluate(prob, pl)
    s = ev.schedule
    check_schedule(prob, s)
    names = [x.name for x in s.tasks]
    inp, out = mlp.inputs[0], mlp.outputs[0]
    # the fp32 input shrinks to bf16 on the host before it crosses PCIe; the bf16 result
    # comes back and grows to fp32 on the host
    assert names[0] == f"conv:{inp}:fp32->bf16@cpu"
    assert names[1] == f"xfer:{inp}:cpu->gpu0:bf16"
    assert s.task(names[1]).resource == "link:pcie-gpu0:fwd"
    assert names[-1] == f"conv:{out}:bf16->fp32@cpu"
    assert ev.feasible and ev.exact and ev.lower_bound_s <= ev.makespan_s
    assert ev.bottleneck_resource in {"gpu0", "link:pcie-gpu0:fwd", "link:pcie-gpu0:rev", "cpu"}
    assert problem_lower_bound(prob).value_s <= ev.makespan_s
    weights = ev.memory.usage("gpu0").breakdown[0][1]
    assert weights == sum(t.dtype.nbytes(t.numel) // 2 for t in mlp.params
                          if t.dtype is DType.FP32)


def test_task_graph_on_the_jetson_contends_on_the_memory_controller() -> None:
    g = parse_taskgraph(generate("fork-join", 12, seed=3, width=4, mean_bytes=4e8,
                                 mean_flops=1e6))
    m = load_machine("jetson-agx-orin")
    prob = Problem(g, None, m, RooflineModel(m))
    # fork/join on the cpu, the parallel tasks alternate between cpu and gpu
    out = {}
    for i, v in enumerate(prob.vertices):
        out[v.name] = Assignment("gpu" if i % 2 else "cpu", DType.FP32)
    ev = evaluate(prob, Placement.of(out))
    check_schedule(prob, ev.schedule)
    slowed = [x for x in ev.schedule.tasks if x.contention_s > 0]
    assert slowed, "memory-bound tasks overlapping on the shared LPDDR5 must slow down"
    assert all(x.kind is TaskKind.COMPUTE or x.resource == "lpddr5-mc" for x in slowed)
    mc = ev.schedule.resource("lpddr5-mc")
    assert not mc.exclusive and mc.bytes > 0
    assert ev.lower_bound_s <= ev.makespan_s
    (pool,) = ev.memory.pools()
    assert pool.pool == "lpddr5-mc" and len(pool.members) == 4


def test_dla_restrictions_prune_assignments() -> None:
    g = parse_taskgraph(generate("chain", 3, seed=0))
    m = load_machine("jetson-agx-orin")
    prob = Problem(g, None, m, RooflineModel(m))
    devices = {a.device for a in feasible_assignments(prob, 0)}
    assert devices == {"cpu", "gpu"}  # task ops are not in the DLA's supported kinds
