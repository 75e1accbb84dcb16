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
import os
import statistics
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from placewise.errors import ProfileError
from placewise.graph.onnx_data import ort_session
from placewise.io import load_json
from placewise.runtime.ort_profile import named_nodes, node_owners, read_events
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
        fresh = [_fresh(f"{n.op_type}_pw{i}", taken) for i, n in enumerate(unnamed)]
        names = iter(fresh)
        with named_nodes(model, [n.name or next(names) for n in model.graph.node]):
            sess = ort_session(model, so)
        inputs = [i.name for i in sess.get_inputs()]
        outs = [o.name for o in sess.get_outputs()]
        fd = {n: feeds[n] for n in inputs}
        for _ in range(warmup + repeats):
            sess.run(outs, fd)
        trace = sess.end_profiling()
        prof = read_events(load_json(trace, what="onnxruntime profile", error=ProfileError),
                           file=trace)
        try:
            optimized = onnx.load(so.optimized_model_filepath, load_external_data=False)
            graph_nodes = [(n.name, list(n.input), list(n.output))
                           for n in optimized.graph.node]
        except Exception:  # an optimized graph onnx cannot read back: map nothing
            graph_nodes = []
    kept = list(range(len(prof.run_s)))[warmup:] or list(range(len(prof.run_s)))
    per_node: dict[str, list[float]] = {}
    for k in kept:
        for node, s in prof.node_s[k].items():
            per_node.setdefault(node, []).append(s)
    med = {n: statistics.median(xs) for n, xs in per_node.items()}
    owners = node_owners(graph_nodes, p.ops)
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
            kernels.setdefault(o, []).append(prof.nodes[node].kernel)
    run_s = statistics.median(prof.run_s[k] for k in kept) if kept else 0.0
    return NodeProfile(p.name, len(kept), run_s, sum(med.values()), op_s, unowned, len(med),
                       {o: tuple(ks) for o, ks in kernels.items()})


def _fresh(base: str, taken: set[str]) -> str:
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name


def chain(models: Mapping[str, Any], partitions: Sequence[Partition],
          inputs: Mapping[str, np.ndarray[Any, Any]]) -> dict[str, np.ndarray[Any, Any]]:
    """Every value the partitions exchange, running them in order on ``inputs`` (the
    graph's inputs by name) with plain CPU onnxruntime sessions."""
    import onnxruntime as ort

    vals = dict(inputs)
    for p in partitions:
        so = ort.SessionOptions()
        so.log_severity_level = 3
        sess = ort_session(models[p.name], so)
        feeds = {i.name: vals[i.name] for i in sess.get_inputs()}
        res = sess.run(list(p.outputs), feeds)
        vals.update(zip(p.outputs, res, strict=True))
    return vals
