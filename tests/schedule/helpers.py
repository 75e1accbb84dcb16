"""Shared helpers for the scheduler tests: small graphs, random machines, a checker."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import strategies as st

from placewise.graph.ir import Graph, Op, OpKind, Role, TaskHint, Tensor
from placewise.hardware.spec import Machine
from placewise.schedule import (
    Placement,
    Problem,
    ResourceKind,
    Schedule,
    TaskKind,
    feasible_assignments,
)
from placewise.units import DType

TOL = 1e-9


def t(name: str, n: int = 1000, dtype: DType = DType.FP32, role: Role = Role.ACTIVATION
      ) -> Tensor:
    return Tensor(name, (n,), dtype, role=role)


def chain(n_ops: int = 3, size: int = 1000) -> Graph:
    """x -> o0 -> h0 -> o1 -> ... -> y."""
    tensors = [t("x", size, role=Role.INPUT)]
    ops = []
    prev = "x"
    for i in range(n_ops):
        out = "y" if i == n_ops - 1 else f"h{i}"
        tensors.append(t(out, size, role=Role.OUTPUT if out == "y" else Role.ACTIVATION))
        ops.append(Op(f"o{i}", OpKind.RELU, (prev,), (out,)))
        prev = out
    return Graph.build("chain", tensors, ops)


def sources(names: list[str], size: int = 10) -> Graph:
    """Independent tasks with no inputs, each producing one small graph output."""
    tensors = [t(f"y_{n}", size, role=Role.OUTPUT) for n in names]
    ops = [Op(n, OpKind.TASK, (), (f"y_{n}",), hint=TaskHint()) for n in names]
    return Graph.build("sources", tensors, ops)


def machine(devices: list[dict[str, Any]], links: list[dict[str, Any]],
            shared: list[dict[str, Any]] | None = None, name: str = "m") -> Machine:
    return Machine.model_validate({"name": name, "devices": devices, "links": links,
                                   "shared_resources": shared or []})


def device(name: str, *, kind: str = "cpu", dtypes: dict[str, float] | None = None,
           lanes: int = 1, capacity: int = 1 << 30, bw: float = 1e10,
           resources: list[str] | None = None, shared_with: str | None = None,
           launch: float = 1e-6,
           extra_tiers: list[dict[str, Any]] | None = None,
           unsupported: list[str] | None = None) -> dict[str, Any]:
    tier: dict[str, Any] = {"name": "mem", "capacity_bytes": capacity,
                            "bandwidth_bytes_per_s": bw, "source": "test"}
    if shared_with:
        tier["shared_with"] = shared_with
    return {"name": name, "kind": kind, "peak_flops_per_s": dtypes or {"fp32": 1e10},
            "peak_source": "test", "memory": [tier, *(extra_tiers or [])],
            "launch_overhead_s": launch, "launch_source": "test", "lanes": lanes,
            "resources": resources or [], "unsupported_kinds": unsupported or []}


def link(name: str, a: str, b: str, *, bw: float = 1e9, latency: float = 1e-6,
         duplex: bool = True, resource: str | None = None) -> dict[str, Any]:
    d: dict[str, Any] = {"name": name, "endpoints": [a, b], "bandwidth_bytes_per_s": bw,
                         "latency_s": latency, "duplex": duplex, "source": "test"}
    if resource:
        d["resource"] = resource
    return d


# ---- random machines -------------------------------------------------------------------------
_KINDS_SOMETIMES_UNSUPPORTED = ["matmul", "softmax", "layer_norm", "gelu", "attention",
                                "reduce_mean", "concat", "unknown"]


@st.composite
def random_machines(draw: st.DrawFn) -> Machine:
    """2-4 devices (the first runs everything in fp32), a connected set of links (duplex or
    not, some sharing a named resource), optionally a shared memory controller used by some
    devices and links, random lanes, dtypes, capacities (sometimes tiny) and pooled tiers."""
    n = draw(st.integers(2, 4))
    names = [f"d{i}" for i in range(n)]
    use_mc = draw(st.booleans())
    mc_users = [d for d in names if use_mc and draw(st.booleans())]
    pooled = use_mc and draw(st.booleans())
    small = draw(st.booleans())
    pool_cap = draw(st.sampled_from([5_000, 1 << 20]))
    devices = []
    for i, dn in enumerate(names):
        dtypes = {"fp32": draw(st.sampled_from([1e9, 1e10, 1e11]))}
        for dt in ("fp16", "bf16", "int8"):
            if draw(st.booleans()):
                dtypes[dt] = dtypes["fp32"] * 2
        unsupported = [] if i == 0 else draw(st.lists(st.sampled_from(
            _KINDS_SOMETIMES_UNSUPPORTED), max_size=3, unique=True))
        cap = draw(st.sampled_from([64, 500, 5_000, 1 << 30])) if small else 1 << 30
        in_pool = pooled and dn in mc_users
        devices.append(device(
            dn, kind="cpu" if i == 0 else draw(st.sampled_from(["gpu", "npu"])),
            dtypes=dtypes, lanes=draw(st.integers(1, 2)),
            capacity=pool_cap if in_pool else cap,
            bw=draw(st.sampled_from([1e9, 1e10])),
            resources=["mc"] if dn in mc_users else [],
            shared_with="mc" if in_pool else None, unsupported=unsupported,
            launch=draw(st.sampled_from([0.0, 1e-6]))))
    links = []
    for i in range(1, n):
        j = draw(st.integers(0, i - 1))
        links.append((names[j], names[i]))
    if n > 2 and draw(st.booleans()):
        a, b = draw(st.sampled_from([(x, y) for x in names for y in names if x < y]))
        if (a, b) not in links:
            links.append((a, b))
    shared_link_res = draw(st.booleans())
    out = []
    for k, (a, b) in enumerate(links):
        res = None
        if use_mc and draw(st.booleans()):
            res = "mc"
        elif shared_link_res and k < 2:
            res = "switch"
        out.append(link(f"l{k}", a, b, bw=draw(st.sampled_from([1e8, 1e9, 1e10])),
                        latency=draw(st.sampled_from([0.0, 1e-6])), duplex=draw(st.booleans()),
                        resource=res))
    shared = [{"name": "mc", "bandwidth_bytes_per_s": draw(st.sampled_from([5e8, 5e9, 1e10])),
               "source": "test"}] if use_mc else []
    return machine(devices, out, shared, name="random")


def random_placement(draw: st.DrawFn, problem: Problem) -> Placement:
    out = {}
    for v in problem.vertices:
        choices = feasible_assignments(problem, v.index)
        out[v.name] = draw(st.sampled_from(choices))
    return Placement.of(out)


# ---- an independent checker for schedules ------------------------------------------------------
def check_schedule(problem: Problem, s: Schedule) -> None:
    """Assert the invariants every schedule must satisfy (independent of the scheduler)."""
    tasks = {x.name: x for x in s.tasks}
    assert len(tasks) == len(s.tasks), "task names repeat"
    span = max(s.makespan_s, 1e-12)
    tol = TOL * span
    # every vertex exactly once, as a compute task on its assigned device
    comp = [x for x in s.tasks if x.kind is TaskKind.COMPUTE]
    assert sorted(x.name for x in comp) == sorted(problem.vertex_names)
    for x in comp:
        assert x.device == s.placement[x.name].device
        assert x.resource == x.device
    for x in s.tasks:
        assert x.start_s >= -tol and x.end_s <= s.makespan_s + tol
        assert x.end_s - x.start_s >= x.cost.total_s - tol * 10
        assert abs(sum(v for _, v in x.terms) - (x.end_s - x.start_s)) <= 1e-9 * max(1.0, span)
        for d in x.deps:
            assert tasks[d].end_s <= x.start_s + tol, f"{x.name} starts before {d} ends"
        if x.kind is TaskKind.TRANSFER:
            assert x.device != x.dst_device and x.link is not None
        if x.kind is TaskKind.CONVERSION:
            assert x.src_rep != x.dst_rep
    # data dependencies: each compute task waits for its inputs' producers (directly or via
    # transfers/conversions): walk deps back from each consumer
    for v in problem.vertices:
        ancestors: set[str] = set()
        stack = list(tasks[v.name].deps)
        while stack:
            d = stack.pop()
            if d in ancestors:
                continue
            ancestors.add(d)
            if tasks[d].kind is not TaskKind.COMPUTE:
                stack.extend(tasks[d].deps)
        for p in problem.preds[v.index]:
            assert problem.vertices[p].name in ancestors, (v.name, problem.vertices[p].name)
    # exclusivity: no two tasks overlap on one lane of a resource (shared resources too:
    # their lanes are trace tracks); exclusive resources use at most their lanes
    lanes = {r.name: r.lanes for r in s.resources if r.kind is not ResourceKind.SHARED}
    by_lane: dict[tuple[str, int], list[tuple[float, float, str]]] = {}
    for x in s.tasks:
        by_lane.setdefault((x.resource, x.lane), []).append((x.start_s, x.end_s, x.name))
    for (res, ln), items in by_lane.items():
        if res in lanes:
            assert 0 <= ln < lanes[res]
        items.sort()
        for (_, e1, n1), (s2, _, n2) in itertools.pairwise(items):
            assert e1 <= s2 + tol, f"{n1} and {n2} overlap on {res} lane {ln}"
    # a tensor reaches a device in a representation at most once
    keys = [(c.tensor, c.device, c.rep) for c in s.copies]
    assert len(keys) == len(set(keys))
