"""Per-node times of a validated plan (``validate --profile-nodes``): each partition the
executor ran is profiled again, alone, by onnxruntime's own profiler, and its node times are
mapped to the plan's ops (``placewise.runtime.profiler.profile_partition``).

This runs *after* the timed campaign, never during it: a profiled session is slower than a
plain one, so these times are for the split of a partition's time among its ops (the
mapping sheet's measured column, MFU and the memory-bound fraction by layer type), not for
the headline latency. Each partition runs on the real boundary values of the first request
(the partitions chained in order, ``runtime.profiler.chain``), pinned to its device's cores
with the device's thread count, ``warmup`` runs then ``repeats`` profiled runs (medians).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from placewise.records import to_json
from placewise.runtime.compile import compile_partitions
from placewise.runtime.profiler import chain, profile_partition

__all__ = ["METHOD", "NodeTimes", "PartitionNodes", "profile_nodes"]

METHOD = ("onnxruntime profiler (enable_profiling), each partition alone after the timed "
          "runs, pinned to its device's cores, on the first request's boundary values; "
          "medians of the profiled runs; node times mapped to plan ops through the "
          "optimized graph's output names")


@dataclass(frozen=True, slots=True)
class PartitionNodes:
    """One partition's node times: ``op_s`` (plan op -> seconds), ``op_kernels`` (plan op
    -> the onnxruntime nodes that ran it), ``run_s`` (one whole profiled run),
    ``nodes_s`` (their sum) and ``unowned_s`` (node time that reached no plan op)."""

    partition: str
    device: str
    runs: int
    run_s: float
    nodes_s: float
    unowned_s: float
    nodes: int
    op_s: Mapping[str, float]
    op_kernels: Mapping[str, tuple[str, ...]]

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


@dataclass(frozen=True, slots=True)
class NodeTimes:
    """Every partition's node times, and how they were measured (``METHOD``)."""

    method: str
    partitions: tuple[PartitionNodes, ...]

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


def profile_nodes(program: Any, source: Any, request: Sequence[Any], machine: Any, *,
                  repeats: int = 20, warmup: int = 5) -> NodeTimes:
    """Profile every partition of ``program`` (a ``runtime.program.ExecProgram``) of
    ``source`` (its ``runtime.opexec.ModelSource``) on ``request`` (one value per graph
    input) on ``machine``'s devices (their cores)."""
    graph = program.graph
    parts = list(program.partitions)
    models = compile_partitions(source, parts, graph)
    values = chain(models, parts, dict(zip(graph.inputs, (np.asarray(x) for x in request),
                                           strict=True)))
    out = []
    for p in parts:
        cores = list(machine.device(p.device).cores or ())
        prof = profile_partition(models[p.name], p, values, cores=cores, repeats=repeats,
                                 warmup=warmup)
        out.append(PartitionNodes(p.name, p.device, prof.runs, prof.run_s, prof.nodes_s,
                                  prof.unowned_s, prof.nodes, dict(prof.op_s),
                                  dict(prof.op_kernels)))
    return NodeTimes(METHOD, tuple(out))
