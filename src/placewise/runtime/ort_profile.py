"""onnxruntime's profiling trace, read once: the one parser of its events.

A session made with ``enable_profiling`` writes a JSON list of Chrome trace events:
``cat`` ``"Session"`` events (``model_loading_uri``, ``session_initialization``, one
``model_run`` per ``session.run``), ``cat`` ``"Node"`` events per node and run
(``<node>_kernel_time`` with ``args`` ``op_name``, ``provider``, ``input_type_shape``,
``output_type_shape``, ``thread_scheduling_stats``...; ``<node>_fence_before`` /
``_fence_after`` in some versions, which time no kernel) and, with API tracing, ``"Api"``
events. ``read_events`` checks every event it uses (naming its index) and returns the runs
in time order with each node's kernel time summed inside each run (``OrtRuns``); both
``placewise.runtime.profiler`` (placewise's own profiling of a partition) and
``placewise.calibrate.imports.onnxruntime`` (a profile a user took on the target) read
profiles through it.

onnxruntime optimizes the graph before it runs (fusions, eliminated nodes, convolutions
rewritten as blocked NCHWc nodes with reorders around them), so the nodes a profile names
are the *optimized* graph's. ``optimized_nodes`` builds that graph for the CPU the way a
default session does and ``node_owners`` maps each of its nodes to the source ops whose
work it does. A node without a name is called ``<OpType>_<index>`` in profiles, the index
counting the graph's nodes without its ``Constant`` nodes (``profile_names``).

>>> ev = [{"cat": "Session", "name": "model_run", "ts": 0, "dur": 50},
...       {"cat": "Node", "name": "c_kernel_time", "ts": 5, "dur": 20,
...        "args": {"op_name": "Conv", "provider": "CPUExecutionProvider",
...                 "output_type_shape": [{"float": [1, 8, 4, 4]}]}},
...       {"cat": "Node", "name": "c_fence_before", "ts": 4, "dur": 0}]
>>> r = read_events(ev)
>>> r.run_s, r.node_s, r.nodes["c"].out_types
((5e-05,), ({'c': 2e-05},), (('float', (1, 8, 4, 4)),))
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import os
import re
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from placewise.errors import ProfileError
from placewise.graph.onnx_data import ort_session

__all__ = [
    "KERNEL_SUFFIX",
    "MAX_EVENTS",
    "ORT_DTYPES",
    "OrtNode",
    "OrtRuns",
    "named_nodes",
    "node_owners",
    "optimized_nodes",
    "profile_names",
    "read_events",
]

KERNEL_SUFFIX = "_kernel_time"
_FENCES = ("_fence_before", "_fence_after")
#: most events a profile may hold (a 256 MiB file holds about a million)
MAX_EVENTS = 5_000_000
#: a duration or timestamp beyond this many microseconds (about 32 years) is not a profile
_MAX_US = 1e15
_MAX_RANK = 16
_MAX_DIM = 1 << 48
#: onnxruntime's NCHWc transformer names a rewritten node after the tensor it stands for
_NCHWC = re.compile(r"^(?P<tensor>.+)_nchwc(?:_token_\d+|_\d+)?$")

#: onnxruntime's element type names (``input_type_shape``) -> (placewise dtype, bytes)
ORT_DTYPES: dict[str, tuple[str, float]] = {
    "float": ("fp32", 4), "float16": ("fp16", 2), "bfloat16": ("bf16", 2),
    "double": ("fp64", 8), "int8": ("int8", 1), "uint8": ("uint8", 1),
    "int16": ("int16", 2), "uint16": ("int16", 2), "int32": ("int32", 4),
    "uint32": ("int32", 4), "int64": ("int64", 8), "uint64": ("int64", 8),
    "bool": ("bool", 1), "int4": ("int4", 0.5), "uint4": ("uint4", 0.5),
    "float8e4m3fn": ("fp8_e4m3", 1), "float8e5m2": ("fp8_e5m2", 1),
}

TypeShape = tuple[str, tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class OrtNode:
    """A node as its kernel-time events describe it (the first one seen): its op type
    (``op_name``), execution provider, and the element type and shape of every input and
    output (``input_type_shape``: ``(("float", (1, 3, 224, 224)), ...)``)."""

    name: str
    op_type: str
    provider: str
    in_types: tuple[TypeShape, ...] = ()
    out_types: tuple[TypeShape, ...] = ()
    first_event: int = -1
    threads: int = 0  # threads its kernel ran on (``thread_scheduling_stats``; 0: not said)

    @property
    def kernel(self) -> str:
        """``OpType(node)@provider``: how plans and sheets name the kernel that ran."""
        return f"{self.op_type or '?'}({self.name})" + (
            f"@{self.provider}" if self.provider else "")

    def out_bytes(self) -> int:
        """Bytes of its outputs (0 where a type is not known)."""
        total = 0.0
        for dt, shape in self.out_types:
            size = ORT_DTYPES.get(dt, ("", 0.0))[1]
            n = 1
            for d in shape:
                n *= d
            total += n * size
        return int(total)


@dataclass(frozen=True, slots=True)
class OrtRuns:
    """A profile's runs in time order: each ``model_run``'s duration (``run_s``), the
    seconds of each node's kernel events inside it, summed (``node_s``, one mapping per
    run; a node that did not run has no entry), the nodes (``nodes``, in order of first
    appearance), the executor's share of each run (``exec_s``) and what was left aside:
    fence events (``fences``) and kernel events in no ``model_run`` (``outside``)."""

    run_s: tuple[float, ...]
    node_s: tuple[Mapping[str, float], ...]
    nodes: Mapping[str, OrtNode]
    fences: int = 0
    outside: int = 0
    events: int = 0
    # the executor's time in each run (``SequentialExecutor::Execute``: the nodes and the
    # gaps between them; 0.0 where the profile has no such event)
    exec_s: tuple[float, ...] = ()
    # device-side kernel events (``cat`` ``"Kernel"``: CUDA/ROCm profiling), not read
    device_kernels: int = 0

    def node_kernels(self) -> dict[str, str]:
        """Node name -> ``OpType(node)@provider``."""
        return {n: node.kernel for n, node in self.nodes.items()}


def _fail(problem: str, file: str | None, index: int | None = None) -> ProfileError:
    return ProfileError(problem, file=file, place=None if index is None else f"event {index}")


def _number(e: Mapping[str, Any], key: str, file: str | None, i: int) -> float:
    v = e.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise _fail(f"{key!r} is {_show(v)}, expected a number of microseconds", file, i)
    if not 0 <= v <= _MAX_US:
        raise _fail(f"{key!r} is {v!r} microseconds (expected 0..{_MAX_US:g})", file, i)
    return float(v)


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _type_shapes(v: Any, what: str, file: str | None, i: int) -> tuple[TypeShape, ...]:
    """``[{"float": [1, 3]}, ...]`` -> ``(("float", (1, 3)), ...)``."""
    if v is None:
        return ()
    if not isinstance(v, list) or len(v) > 100_000:
        raise _fail(f"args.{what} is {_show(v)}, expected a list of {{type: shape}}", file, i)
    out: list[TypeShape] = []
    for k, item in enumerate(v):
        if not isinstance(item, dict) or len(item) != 1:
            raise _fail(f"args.{what}[{k}] is {_show(item)}, expected {{type: shape}}",
                        file, i)
        ((dt, shape),) = item.items()
        if not isinstance(shape, list) or len(shape) > _MAX_RANK or any(
                isinstance(d, bool) or not isinstance(d, int) or not 0 <= d <= _MAX_DIM
                for d in shape):
            raise _fail(f"args.{what}[{k}] has shape {_show(shape)}, expected at most "
                        f"{_MAX_RANK} dims of 0..{_MAX_DIM}", file, i)
        out.append((str(dt), tuple(shape)))
    return tuple(out)


def _node(name: str, args: Any, file: str | None, i: int) -> OrtNode:
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise _fail(f"args is {_show(args)}, expected an object", file, i)
    op, prov = args.get("op_name", ""), args.get("provider", "")
    if not isinstance(op, str) or not isinstance(prov, str) or len(op) > 1000 \
            or len(prov) > 1000:
        raise _fail("args.op_name and args.provider must be short strings", file, i)
    return OrtNode(name, op, prov, _type_shapes(args.get("input_type_shape"),
                                                "input_type_shape", file, i),
                   _type_shapes(args.get("output_type_shape"), "output_type_shape", file, i),
                   i, _threads(args.get("thread_scheduling_stats")))


def _threads(stats: Any) -> int:
    """Threads a kernel ran on: the caller's and its pool's ``sub_threads`` (0: not said).

    >>> _threads({"main_thread": {"Run": 43}, "sub_threads": {"1403": {"num_run": 1}}})
    2
    """
    if not isinstance(stats, dict) or not isinstance(stats.get("main_thread"), dict):
        return 0
    sub = stats.get("sub_threads")
    return 1 + (len(sub) if isinstance(sub, dict) else 0)


def read_events(events: Any, *, file: str | None = None) -> OrtRuns:
    """The runs of an onnxruntime profile (module docstring) from its parsed JSON;
    ``ProfileError`` naming the event for anything that is not a well-formed profile:
    not a list of objects, a ``model_run`` or kernel event without a finite, non-negative
    ``ts`` and ``dur``, malformed ``args``, ``model_run`` events that overlap (runs made
    concurrently cannot be told apart), more than ``MAX_EVENTS`` events."""
    if not isinstance(events, list):
        raise _fail(f"expected a JSON list of trace events (onnxruntime's profile), got "
                    f"a {type(events).__name__}", file)
    if len(events) > MAX_EVENTS:
        raise _fail(f"holds {len(events)} events (placewise reads at most {MAX_EVENTS})",
                    file)
    runs: list[tuple[float, float, int]] = []
    execs: list[tuple[float, float]] = []
    kernels: list[tuple[float, float, str, int]] = []
    nodes: dict[str, OrtNode] = {}
    fences = device_kernels = 0
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            raise _fail(f"expected an object, got {_show(e)}", file, i)
        cat, name = e.get("cat"), e.get("name")
        if cat == "Session" and name == "model_run":
            ts = _number(e, "ts", file, i)
            runs.append((ts, ts + _number(e, "dur", file, i), i))
        elif cat == "Session" and isinstance(name, str) and name.endswith("Executor::Execute"):
            execs.append((_number(e, "ts", file, i), _number(e, "dur", file, i)))
        elif cat == "Node":
            if not isinstance(name, str) or len(name) > 10_000:
                raise _fail(f"a Node event's name is {_show(name)}, expected a string",
                            file, i)
            if name.endswith(KERNEL_SUFFIX):
                node = name[: -len(KERNEL_SUFFIX)]
                kernels.append((_number(e, "ts", file, i), _number(e, "dur", file, i),
                                node, i))
                if node not in nodes:
                    nodes[node] = _node(node, e.get("args"), file, i)
            elif name.endswith(_FENCES):
                fences += 1
        elif cat == "Kernel":
            device_kernels += 1
    runs.sort()
    for (lo, hi, i), (lo2, _hi2, j) in itertools.pairwise(runs):
        if lo2 < hi:
            raise _fail(f"model_run overlaps the model_run of event {i} ({lo:g}..{hi:g} "
                        f"us): runs made concurrently cannot be told apart", file, j)
    starts = [r[0] for r in runs]
    per_run: list[dict[str, float]] = [{} for _ in runs]
    outside = 0
    for ts, dur, node, _i in kernels:
        k = bisect.bisect_right(starts, ts) - 1
        if k < 0 or ts > runs[k][1]:
            outside += 1
            continue
        acc = per_run[k]
        acc[node] = acc.get(node, 0.0) + dur / 1e6
    exec_s = [0.0] * len(runs)
    for ts, dur in execs:
        k = bisect.bisect_right(starts, ts) - 1
        if k >= 0 and ts <= runs[k][1]:
            exec_s[k] += dur / 1e6
    return OrtRuns(tuple((hi - lo) / 1e6 for lo, hi, _ in runs), tuple(per_run), nodes,
                   fences, outside, len(events), tuple(exec_s), device_kernels)


# ---- the optimized graph --------------------------------------------------------------------


def profile_names(model: Any) -> list[str]:
    """The name onnxruntime gives each node of ``model.graph`` in its profiles: its own,
    else ``<OpType>_<index>`` with the index counting nodes without the ``Constant`` ones
    (which onnxruntime turns into initializers first); ``""`` for those.

    >>> from onnx import helper
    >>> g = helper.make_graph([helper.make_node("Constant", [], ["c"], value_float=2.0),
    ...     helper.make_node("Mul", ["x", "c"], ["a"]),
    ...     helper.make_node("Relu", ["a"], ["y"], name="r")], "g", [], [])
    >>> profile_names(helper.make_model(g))
    ['', 'Mul_0', 'r']
    """
    out: list[str] = []
    k = 0
    for n in model.graph.node:
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            out.append("")
            continue
        out.append(n.name or f"{n.op_type}_{k}")
        k += 1
    return out


@contextlib.contextmanager
def named_nodes(model: Any, names: Sequence[str]) -> Iterator[None]:
    """``model``'s unnamed nodes named ``names`` (by position) while the block runs."""
    unnamed = [(n, names[i]) for i, n in enumerate(model.graph.node) if not n.name and names[i]]
    try:
        for n, name in unnamed:
            n.name = name
        yield
    finally:
        for n, _ in unnamed:
            n.name = ""


def optimized_nodes(model: Any) -> list[tuple[str, list[str], list[str]]]:
    """(name, inputs, outputs) of every node of ``model`` (a ``ModelProto``) as a default
    CPU session optimizes it (``ORT_ENABLE_ALL``: fusions, NCHWc), with unnamed nodes
    named as profiles name them (``profile_names``); ``[]`` when onnxruntime cannot
    build or write it back."""
    import onnx
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix="placewise-opt-") as tmp:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.optimized_model_filepath = os.path.join(tmp, "optimized.onnx")
        so.intra_op_num_threads = 1
        try:
            with named_nodes(model, profile_names(model)):
                ort_session(model, so)
            optimized = onnx.load(so.optimized_model_filepath, load_external_data=False)
        except Exception:  # a model this onnxruntime cannot build: nothing to map
            return []
        return [(n.name, list(n.input), list(n.output)) for n in optimized.graph.node]


def node_owners(nodes: Sequence[tuple[str, Sequence[str], Sequence[str]]], ops: Sequence[Any]
                ) -> dict[str, list[str]]:
    """Optimized node name -> the names of the ops (``ops``: ``graph.ir.Op``) whose work
    it does.

    ``nodes`` are the optimized graph's (name, inputs, outputs). A tensor of the optimized
    graph *stands for* an op's tensor when it has its name, or when it is the output of a
    node that onnxruntime named after that tensor (``<tensor>_nchwc``: the same values
    in a blocked layout). A node's targets are the op tensors its outputs stand for or,
    when they stand for none (a layout reorder, the Gemm before the reshape that restores
    an op's output shape, the Erf inside a Gelu), the first ones after it. Its ops are the
    ops that compute its targets back to tensors the optimized graph holds anyway
    (an input of the graph, a weight, an output of another node): every op fused into
    the node (a Conv with its BatchNorm and Relu) shares its time. A reorder to or from a
    blocked layout thus goes to the op it serves.

    >>> from placewise.graph.ir import Op, OpKind
    >>> ops = (Op("c", OpKind.CONV, ("x", "w"), ("c1",)),
    ...        Op("r", OpKind.RELU, ("c1",), ("r1",)))
    >>> node_owners([("r1_nchwc", ["x_b", "w_b"], ["t0"]), ("R", ["t0"], ["r1"]),
    ...              ("I", ["x"], ["x_b"])], ops)  # doctest: +NORMALIZE_WHITESPACE
    {'r1_nchwc': ['c', 'r'], 'R': ['c', 'r'], 'I': ['c', 'r']}
    """
    producer = {o: op for op in ops for o in op.outputs}
    stands: dict[str, str] = {}  # optimized tensor -> op tensor
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
