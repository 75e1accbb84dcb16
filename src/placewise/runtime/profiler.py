"""Per-node times inside a partition, from onnxruntime's own profiler, mapped to the plan's ops.

A partition runs as one ``session.run``: its nodes are not visible to the executor's
telemetry. Calibration (never a timed run) therefore runs each partition again, alone, in a
profiling session (``enable_profiling``) pinned to its device's cores with the device's
thread count, on the request's real boundary values, and reads every node's
``kernel_time`` event. onnxruntime optimizes the graph first (fusions, eliminated
reshapes, convolutions rewritten into blocked NCHWc nodes with layout reorders around
them): the session also writes its optimized graph (every node named while it is built, so
that unnamed nodes' events can be found in it), and ``node_owners`` maps each optimized
node to the plan ops whose work it does: a fused node's time is shared by the ops fused
into it, a layout reorder's goes to the op it serves. Node time that reaches no op is
reported apart (``NodeProfile.unowned_s``); ``op_s`` plus ``unowned_s`` is always
``nodes_s``.

``chain(models, partitions, inputs)`` runs compiled partitions in order with plain
onnxruntime sessions and returns every boundary value: the reference feeds of each
partition.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import statistics
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from placewise.runtime.program import Partition

__all__ = ["NodeProfile", "chain", "node_owners", "profile_partition"]


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
    unnamed = [n for n in model.graph.node if not n.name]
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
        # an unnamed node's profile events say "OpType_<index>", which its optimized
        # graph does not record: every node gets a name while the session is built
        taken = {n.name for n in model.graph.node}
        for i, n in enumerate(unnamed):
            n.name = _fresh(f"{n.op_type}_pw{i}", taken)
        try:
            sess = ort_session(model, so)
        finally:
            for n in unnamed:
                n.name = ""
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
            graph_nodes = [(n.name, list(n.input), list(n.output))
                           for n in optimized.graph.node]
        except Exception:  # an optimized graph onnx cannot read back: map nothing
            graph_nodes = []
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
    owners = node_owners(graph_nodes, p)
    op_s = {op.name: 0.0 for op in p.ops}
    unowned = 0.0
    kernels: dict[str, list[str]] = {}
    for node, s in med.items():
        got = owners.get(node, [])
        if not got:
            unowned += s
            continue
        for o in got:
            op_s[o] += s / len(got)
            kernels.setdefault(o, []).append(kernel.get(node, node))
    run_s = statistics.median(r["dur"] for r in kept) / 1e6 if kept else 0.0
    return NodeProfile(p.name, len(kept), run_s, sum(med.values()), op_s, unowned, len(med),
                       {o: tuple(ks) for o, ks in kernels.items()})


def _fresh(base: str, taken: set[str]) -> str:
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name


#: onnxruntime's NCHWc transformer names a rewritten node after the tensor it stands for
_NCHWC = re.compile(r"^(?P<tensor>.+)_nchwc(?:_token_\d+|_\d+)?$")


def node_owners(nodes: Sequence[tuple[str, Sequence[str], Sequence[str]]], p: Partition
                ) -> dict[str, list[str]]:
    """Optimized node name -> the plan ops of ``p`` whose work it does.

    ``nodes`` are the optimized graph's (name, inputs, outputs). A tensor of the optimized
    graph *stands for* a plan tensor when it has its name, or when it is the output of a
    node that onnxruntime named after that tensor (``<tensor>_nchwc``: the same values
    in a blocked layout). A node's targets are the plan tensors its outputs stand for or,
    when they stand for none (a layout reorder, the Gemm before the reshape that restores
    an op's output shape, the Erf inside a Gelu), the first ones after it. Its ops are the
    plan ops that compute its targets back to tensors the optimized graph holds anyway
    (an input of the partition, a weight, an output of another node): every op fused into
    the node (a Conv with its BatchNorm and Relu) shares its time. A reorder to or from a
    blocked layout thus goes to the op it serves.

    >>> from placewise.graph.ir import Op, OpKind
    >>> ops = (Op("c", OpKind.CONV, ("x", "w"), ("c1",)),
    ...        Op("r", OpKind.RELU, ("c1",), ("r1",)))
    >>> class P: ops = ops
    >>> node_owners([("r1_nchwc", ["x_b", "w_b"], ["t0"]), ("R", ["t0"], ["r1"]),
    ...              ("I", ["x"], ["x_b"])], P)  # doctest: +NORMALIZE_WHITESPACE
    {'r1_nchwc': ['c', 'r'], 'R': ['c', 'r'], 'I': ['c', 'r']}
    """
    producer = {o: op for op in p.ops for o in op.outputs}
    stands: dict[str, str] = {}  # optimized tensor -> plan tensor
    for name, _ins, outs in nodes:
        m = _NCHWC.match(name)
        alias = m.group("tensor") if m and m.group("tensor") in producer else None
        for o in outs:
            if o in producer:
                stands[o] = o
            elif alias is not None and len(outs) == 1:
                stands[o] = alias
    held = set(stands.values())
    consumers: dict[str, list[int]] = {}
    for i, (_n, ins, _o) in enumerate(nodes):
        for x in ins:
            consumers.setdefault(x, []).append(i)

    def targets(i: int) -> set[str]:
        seen, frontier, found = {i}, [i], set[str]()
        while frontier and not found:
            nxt = []
            for k in frontier:
                for o in nodes[k][2]:
                    if o in stands:
                        found.add(stands[o])
                        continue
                    for c in consumers.get(o, []):
                        if c not in seen:
                            seen.add(c)
                            nxt.append(c)
            frontier = nxt
        return found

    def ops_of(tensors: set[str]) -> list[str]:
        out: set[str] = set()
        todo = [producer[t] for t in tensors if t in producer]
        while todo:
            op = todo.pop()
            if op.name in out:
                continue
            out.add(op.name)
            todo.extend(producer[x] for x in op.inputs
                        if x in producer and x not in held)
        return sorted(out)

    return {name: ops_of(targets(i)) for i, (name, _ins, _outs) in enumerate(nodes) if name}


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
