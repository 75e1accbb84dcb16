"""Per-node times inside a partition, from onnxruntime's own profiler, mapped to the plan's ops.

A partition runs as one ``session.run``: its nodes are not visible to the executor's
telemetry. Calibration (never a timed run) therefore runs each partition again, alone, in a
profiling session (``enable_profiling``) pinned to its device's cores with the device's
thread count, on the request's real boundary values, and reads every node's
``kernel_time`` event. onnxruntime optimizes the graph first (fusions, eliminated
reshapes): the session also writes its optimized graph, and each optimized node is mapped
to the plan's ops through its output names. A node owns the ops that make its outputs; an
op fused into a later node (its output no longer exists) owns nothing, and its time is in
the node that absorbed it. A node whose outputs are internal names (a Gemm before the
reshape that restores the op's output shape, the Erf inside a Gelu) gives its time to the
owners of the first owned nodes after it; node time that reaches no op is reported apart
(``NodeProfile.unowned_s``).

``chain(models, partitions, inputs)`` runs compiled partitions in order with plain
onnxruntime sessions and returns every boundary value: the reference feeds of each
partition.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from placewise.runtime.program import Partition

__all__ = ["NodeProfile", "chain", "profile_partition"]


@dataclass(frozen=True, slots=True)
class NodeProfile:
    """One partition profiled: medians over ``runs`` runs.

    ``run_s``: one whole ``session.run`` as the profiler saw it; ``nodes_s``: the sum of
    its node kernel times; ``op_s``: seconds per plan op (ops fused into another node or
    eliminated have 0); ``unowned_s``: node time whose outputs name no plan tensor;
    ``op_kernels``: per plan op, the nodes whose time it got, as ``OpType(node name)`` with
    the execution provider that ran them (``OpType(node)@CPUExecutionProvider``)."""

    partition: str
    runs: int
    run_s: float
    nodes_s: float
    op_s: Mapping[str, float]
    unowned_s: float
    nodes: int
    op_kernels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@contextlib.contextmanager
def _pinned(cores: Sequence[int]) -> Iterator[None]:
    old = os.sched_getaffinity(0)
    try:
        if cores:
            os.sched_setaffinity(0, set(cores))
        yield
    finally:
        os.sched_setaffinity(0, old)


def profile_partition(model: Any, p: Partition, feeds: Mapping[str, np.ndarray[Any, Any]],
                      *, cores: Sequence[int], repeats: int = 20, warmup: int = 5
                      ) -> NodeProfile:
    """Profile partition ``p`` (its ONNX ``ModelProto``) on ``feeds`` (every input of
    ``p``), ``warmup`` runs then ``repeats`` profiled runs, pinned to ``cores``."""
    import onnx
    import onnxruntime as ort

    from placewise.graph.onnx_data import ort_session

    threads = max(1, len(cores))
    with tempfile.TemporaryDirectory(prefix="placewise-prof-") as tmp, _pinned(cores):
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(tmp, "profile")
        sess = ort_session(model, so)
        names = [i.name for i in sess.get_inputs()]
        outs = [o.name for o in sess.get_outputs()]
        fd = {n: feeds[n] for n in names}
        for _ in range(warmup + repeats):
            sess.run(outs, fd)
        trace = sess.end_profiling()
        with open(trace) as f:
            events = json.load(f)
        try:
            optimized = onnx.load(so.optimized_model_filepath, load_external_data=False)
            node_outputs = {n.name: list(n.output) for n in optimized.graph.node}
            consumers: dict[str, list[str]] = {}
            for n in optimized.graph.node:
                for x in n.input:
                    consumers.setdefault(x, []).append(n.name)
        except Exception:  # an optimized graph onnx cannot read back: map nothing
            node_outputs, consumers = {}, {}
    runs = [e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"]
    runs.sort(key=lambda e: e["ts"])
    kept = runs[warmup:] or runs
    per_node: dict[str, list[float]] = {}
    kernel = _node_kernels(events)
    for r in kept:
        lo, hi = r["ts"], r["ts"] + r["dur"]
        acc: dict[str, float] = {}
        for e in events:
            if e.get("cat") != "Node" or not str(e.get("name", "")).endswith("_kernel_time"):
                continue
            if lo <= e["ts"] <= hi:
                node = e["name"][: -len("_kernel_time")]
                acc[node] = acc.get(node, 0.0) + e["dur"] / 1e6
        for node, s in acc.items():
            per_node.setdefault(node, []).append(s)
    med = {n: statistics.median(xs) for n, xs in per_node.items()}
    producer = {o: op.name for op in p.ops for o in op.outputs}
    op_s = {op.name: 0.0 for op in p.ops}
    unowned = 0.0
    def own(node: str) -> list[str]:
        return sorted({producer[o] for o in node_outputs.get(node, []) if o in producer})

    def downstream(node: str) -> list[str]:
        """The owners of the first owned nodes after ``node`` (its time went there: a
        Gemm before the reshape that restores the op's output, an Erf inside a Gelu)."""
        seen = {node}
        frontier = [node]
        while frontier:
            nxt: list[str] = []
            found: set[str] = set()
            for n in frontier:
                for o in node_outputs.get(n, []):
                    for c in consumers.get(o, []):
                        if c in seen:
                            continue
                        seen.add(c)
                        got = own(c)
                        if got:
                            found.update(got)
                        else:
                            nxt.append(c)
            if found:
                return sorted(found)
            frontier = nxt
        return []

    kernels: dict[str, list[str]] = {}
    for node, s in med.items():
        owners = own(node) or downstream(node)
        if not owners:
            unowned += s
            continue
        for o in owners:
            op_s[o] += s / len(owners)
            kernels.setdefault(o, []).append(kernel.get(node, node))
    run_s = statistics.median(r["dur"] for r in kept) / 1e6 if kept else 0.0
    return NodeProfile(p.name, len(kept), run_s, sum(med.values()), op_s, unowned, len(med),
                       {o: tuple(ks) for o, ks in kernels.items()})


def _node_kernels(events: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Node name -> ``OpType(node)@provider`` from a profile's kernel-time events."""
    out: dict[str, str] = {}
    for e in events:
        name = str(e.get("name", ""))
        if e.get("cat") != "Node" or not name.endswith("_kernel_time"):
            continue
        node = name[: -len("_kernel_time")]
        args = e.get("args") or {}
        op_type = str(args.get("op_name", "")) or "?"
        provider = str(args.get("provider", ""))
        out.setdefault(node, f"{op_type}({node})" + (f"@{provider}" if provider else ""))
    return out


def chain(models: Mapping[str, Any], partitions: Sequence[Partition],
          inputs: Mapping[str, np.ndarray[Any, Any]]) -> dict[str, np.ndarray[Any, Any]]:
    """Every value the partitions exchange, running them in order on ``inputs`` (the
    graph's inputs by name) with plain CPU onnxruntime sessions."""
    import onnxruntime as ort

    from placewise.graph.onnx_data import ort_session

    vals = dict(inputs)
    for p in partitions:
        so = ort.SessionOptions()
        so.log_severity_level = 3
        sess = ort_session(models[p.name], so)
        feeds = {i.name: vals[i.name] for i in sess.get_inputs()}
        res = sess.run(list(p.outputs), feeds)
        vals.update(zip(p.outputs, res, strict=True))
    return vals
