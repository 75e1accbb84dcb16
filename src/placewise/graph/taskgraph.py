"""Abstract task graphs: a JSON format for synthetic benchmarks and scheduling-tool users.

A task graph names tasks with given costs and the data that flows between them::

    {"schema_version": 1, "name": "demo",
     "tasks": [{"name": "a", "flops": 2e9, "bytes": 1000000},
               {"name": "b", "flops": 1e9, "times_s": {"gpu0": 0.001}}],
     "edges": [{"src": "a", "dst": "b", "bytes": 4096}],
     "inputs": [{"dst": "a", "bytes": 1024}]}

It loads into an ordinary ``Graph``:

- every task becomes an op of kind ``OpKind.TASK`` whose ``TaskHint`` holds ``flops``,
  ``bytes`` (bytes moved, default 0) and ``times_s`` (device name -> seconds, overriding any
  cost model), with ``scratch_bytes`` as the op's workspace and ``dtype`` (default fp32) as
  its ``dtype`` attribute;
- every edge becomes its own tensor of shape ``(bytes,)`` and dtype uint8, produced by
  ``src`` and consumed by ``dst``, named ``name`` or ``"SRC->DST"``;
- every entry of ``inputs`` becomes a graph input (role INPUT) read by ``dst``, named
  ``name`` or ``"in:DST"``; a task with no predecessors and no input simply starts from
  nothing;
- every entry of ``outputs`` becomes a graph output written by ``src`` (``"SRC:out"``); a
  task with no successors and no listed output writes a 0-byte graph output ``"TASK:out"``,
  so that the graph's outputs are exactly the ends of its work.

The published JSON Schema (draft 2020-12) is ``schema_path()``. Validation here is plain
Python (no runtime dependency) and stricter than the schema: unique names, edges naming
existing tasks, no self-edge and no cycle. Every error is a ``SpecError`` (wrong types or
values) or a ``GraphError`` (graph structure) naming the file and the place, such as
``edges[3].src``.

>>> g = parse_taskgraph({"schema_version": 1, "tasks": [{"name": "a", "flops": 10},
...     {"name": "b"}], "edges": [{"src": "a", "dst": "b", "bytes": 8}]}, file="t.json")
>>> [(o.name, o.hint.flops) for o in g.ops], g.tensor("a->b").nbytes, g.outputs
([('a', 10.0), ('b', 0.0)], 8, ('b:out',))
>>> d = generate("chain", 3, seed=1)
>>> len(d["tasks"]), len(d["edges"])
(3, 2)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from placewise.errors import GraphError, InputError, SpecError
from placewise.graph.ir import Attrs, Graph, Op, OpKind, Provenance, Role, TaskHint, Tensor
from placewise.io import load_json
from placewise.units import DType

__all__ = [
    "GENERATORS",
    "SCHEMA_VERSION",
    "generate",
    "load_taskgraph",
    "parse_taskgraph",
    "schema_path",
]

SCHEMA_VERSION = 1
GENERATORS = ("chain", "fork-join", "layered", "transformer")

_TOP_KEYS = {"schema_version", "name", "tasks", "edges", "inputs", "outputs"}
_TASK_KEYS = {"name", "flops", "bytes", "dtype", "times_s", "scratch_bytes"}
_EDGE_KEYS = {"src", "dst", "bytes", "name"}
_INPUT_KEYS = {"dst", "bytes", "name"}
_OUTPUT_KEYS = {"src", "bytes", "name"}
_DTYPES = {d.value: d for d in DType}
_MAX_COUNT = 1 << 60  # bytes of one tensor or task: an exabyte
_MAX_NUMBER = 1e30  # FLOPs and seconds: finite, with room to add them up


def schema_path() -> Path:
    """Path of the published JSON Schema of the task-graph format."""
    return Path(str(resources.files("placewise") / "schemas" / "taskgraph.schema.json"))


# ---- validation helpers ----------------------------------------------------------------------


class _V:
    """Plain-Python checks that fail with ``SpecError(file, place, problem)``."""

    __slots__ = ("file",)

    def __init__(self, file: str | None) -> None:
        self.file = file

    def fail(self, place: str, problem: str) -> SpecError:
        return SpecError(problem, file=self.file, place=place or None)

    def obj(self, v: Any, place: str, required: tuple[str, ...], allowed: set[str]
            ) -> dict[str, Any]:
        if not isinstance(v, dict):
            raise self.fail(place, f"must be an object, got {_kind(v)}")
        for k in required:
            if k not in v:
                raise self.fail(place, f"missing required key {k!r}")
        unknown = sorted(set(v) - allowed)
        if unknown:
            raise self.fail(_at(place, unknown[0]), f"unknown key (allowed: "
                            f"{', '.join(sorted(allowed))})")
        return v

    def array(self, v: Any, place: str, *, min_items: int = 0) -> list[Any]:
        if not isinstance(v, list):
            raise self.fail(place, f"must be an array, got {_kind(v)}")
        if len(v) < min_items:
            raise self.fail(place, f"must hold at least {min_items} item(s)")
        return v

    def name(self, v: Any, place: str) -> str:
        if not isinstance(v, str):
            raise self.fail(place, f"must be a string, got {_kind(v)}")
        if not v:
            raise self.fail(place, "must not be empty")
        return v

    def number(self, v: Any, place: str) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise self.fail(place, f"must be a number, got {_kind(v)}")
        if isinstance(v, int) and abs(v) > _MAX_NUMBER:
            raise self.fail(place, f"must be at most {_MAX_NUMBER:g}, got an integer of "
                            f"{v.bit_length()} bits")
        if not math.isfinite(v):
            raise self.fail(place, f"must be a finite number, got {v}")
        if v < 0:
            raise self.fail(place, f"must be >= 0, got {v}")
        if v > _MAX_NUMBER:
            raise self.fail(place, f"must be at most {_MAX_NUMBER:g}, got {v:g}")
        return float(v)

    def count(self, v: Any, place: str) -> int:
        if isinstance(v, float) and math.isfinite(v) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(place, f"must be an integer, got {_kind(v)}")
        if v < 0:
            raise self.fail(place, f"must be >= 0, got {v}")
        if v > _MAX_COUNT:
            raise self.fail(place, f"must be at most {_MAX_COUNT} (2**60), got "
                            f"{v if v.bit_length() <= 128 else f'an integer of {v.bit_length()} bits'}")
        return v


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int | float):
        return f"the number {v}"
    if isinstance(v, str):
        return f"the string {v!r}"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, dict):
        return "an object"
    return type(v).__name__


def _at(place: str, key: str) -> str:
    return f"{place}.{key}" if place else key


# ---- loading ---------------------------------------------------------------------------------


def load_taskgraph(path: str | Path) -> Graph:
    """Read and validate a task-graph JSON file into a ``Graph`` of ``OpKind.TASK`` ops.

    The file goes through the input boundary (``placewise.io.load_json``): a regular file
    no larger than ``MAX_JSON_BYTES``, UTF-8, nested at most ``MAX_DEPTH`` levels, finite
    numbers only."""
    file = str(path)
    data = load_json(path, what="task graph", error=SpecError)
    return parse_taskgraph(data, file=file)


def parse_taskgraph(data: Any, *, file: str | None = None) -> Graph:
    """Validate an already-decoded task graph (see the module docstring) into a ``Graph``."""
    v = _V(file)
    top = v.obj(data, "", ("schema_version", "tasks"), _TOP_KEYS)
    version = top["schema_version"]
    if isinstance(version, bool) or version != SCHEMA_VERSION:
        raise v.fail("schema_version", f"unsupported version {version!r} (this placewise "
                     f"reads version {SCHEMA_VERSION})")
    if "name" in top and not isinstance(top["name"], str):
        raise v.fail("name", f"must be a string, got {_kind(top['name'])}")
    default_name = Path(file).stem if file else "taskgraph"
    gname = top.get("name") or default_name

    task_at, specs = _tasks(v, top)
    t = _Tensors(v, task_at)
    t.read(top)
    attrs = {d: Attrs.of(dtype=d.value) for d in DType}
    ops = [Op(name, OpKind.TASK, tuple(t.reads[name]), tuple(t.writes[name]),
              attrs=attrs[dtype],
              provenance=Provenance(source=task_at[name], source_op="task"),
              scratch_bytes=scratch, hint=TaskHint(flops, nbytes, times))
           for name, flops, nbytes, dtype, times, scratch in specs]
    graph_outputs = sorted(t.outputs, key=lambda tn: _order_key(t.at[tn]))
    return Graph.build(gname, t.tensors, ops, outputs=graph_outputs, file=file)


_Spec = tuple[str, float, int, DType, tuple[tuple[str, float], ...], int]


def _tasks(v: _V, top: dict[str, Any]) -> tuple[dict[str, str], list[_Spec]]:
    """Each task's place by name, and its (name, flops, bytes, dtype, times, scratch)."""
    tasks = v.array(top["tasks"], "tasks", min_items=1)
    task_at: dict[str, str] = {}
    specs: list[_Spec] = []
    for i, t in enumerate(tasks):
        p = f"tasks[{i}]"
        v.obj(t, p, ("name",), _TASK_KEYS)
        name = v.name(t["name"], f"{p}.name")
        if name in task_at:
            raise GraphError(f"task name {name!r} used twice (first at {task_at[name]})",
                             file=v.file, place=f"{p}.name")
        task_at[name] = p
        flops = v.number(t.get("flops", 0), f"{p}.flops")
        nbytes = v.count(t.get("bytes", 0), f"{p}.bytes")
        scratch = v.count(t.get("scratch_bytes", 0), f"{p}.scratch_bytes")
        dt = t.get("dtype", DType.FP32.value)
        if not isinstance(dt, str) or dt not in _DTYPES:
            raise v.fail(f"{p}.dtype", f"unknown dtype {dt!r} (known: "
                         f"{', '.join(d.value for d in DType)})")
        times: list[tuple[str, float]] = []
        if "times_s" in t:
            ts = t["times_s"]
            if not isinstance(ts, dict):
                raise v.fail(f"{p}.times_s", f"must be an object mapping device name to "
                             f"seconds, got {_kind(ts)}")
            for dev, sec in ts.items():
                if not dev:
                    raise v.fail(f"{p}.times_s", "device name must not be empty")
                times.append((dev, v.number(sec, f"{p}.times_s.{dev}")))
        specs.append((name, flops, nbytes, _DTYPES[dt], tuple(sorted(times)), scratch))
    return task_at, specs


class _Tensors:
    """The tensors of a task graph (edges, inputs, outputs), what each task reads and
    writes, and the graph outputs listed (or added: a task with no successor)."""

    def __init__(self, v: _V, task_at: dict[str, str]) -> None:
        self.v, self.task_at = v, task_at
        self.at: dict[str, str] = {}
        self.tensors: list[Tensor] = []
        self.reads: dict[str, list[str]] = {n: [] for n in task_at}
        self.writes: dict[str, list[str]] = {n: [] for n in task_at}
        self.outputs: list[str] = []

    def add(self, tname: str, nbytes: int, role: Role, place: str, name_given: bool) -> None:
        if tname in self.at:
            hint = "" if name_given else "; give it a distinct \"name\""
            raise GraphError(f"tensor name {tname!r} used twice (first at "
                             f"{self.at[tname]}){hint}", file=self.v.file,
                             place=f"{place}.name" if name_given else place)
        self.at[tname] = place
        self.tensors.append(Tensor(tname, (nbytes,), DType.UINT8, role=role))

    def task_ref(self, x: Any, place: str) -> str:
        n = self.v.name(x, place)
        if n not in self.task_at:
            raise GraphError(f"unknown task {n!r}", file=self.v.file, place=place)
        return n

    def read(self, top: dict[str, Any]) -> None:
        v, file = self.v, self.v.file
        for i, e in enumerate(v.array(top.get("edges", []), "edges")):
            p = f"edges[{i}]"
            v.obj(e, p, ("src", "dst", "bytes"), _EDGE_KEYS)
            src = self.task_ref(e["src"], f"{p}.src")
            dst = self.task_ref(e["dst"], f"{p}.dst")
            if src == dst:
                raise GraphError(f"edge from task {src!r} to itself", file=file, place=p)
            nbytes = v.count(e["bytes"], f"{p}.bytes")
            tname = v.name(e["name"], f"{p}.name") if "name" in e else f"{src}->{dst}"
            self.add(tname, nbytes, Role.ACTIVATION, p, "name" in e)
            self.writes[src].append(tname)
            self.reads[dst].append(tname)
        for i, e in enumerate(v.array(top.get("inputs", []), "inputs")):
            p = f"inputs[{i}]"
            v.obj(e, p, ("dst", "bytes"), _INPUT_KEYS)
            dst = self.task_ref(e["dst"], f"{p}.dst")
            nbytes = v.count(e["bytes"], f"{p}.bytes")
            tname = v.name(e["name"], f"{p}.name") if "name" in e else f"in:{dst}"
            self.add(tname, nbytes, Role.INPUT, p, "name" in e)
            self.reads[dst].append(tname)
        for i, e in enumerate(v.array(top.get("outputs", []), "outputs")):
            p = f"outputs[{i}]"
            v.obj(e, p, ("src", "bytes"), _OUTPUT_KEYS)
            src = self.task_ref(e["src"], f"{p}.src")
            nbytes = v.count(e["bytes"], f"{p}.bytes")
            tname = v.name(e["name"], f"{p}.name") if "name" in e else f"{src}:out"
            self.add(tname, nbytes, Role.OUTPUT, p, "name" in e)
            self.writes[src].append(tname)
            self.outputs.append(tname)
        for name, p in self.task_at.items():
            if not self.writes[name]:
                tname = f"{name}:out"
                if tname in self.at:
                    raise GraphError(f"tensor name {tname!r} is taken by {self.at[tname]}, "
                                     f"but task {name!r} has no successor and needs it for "
                                     f"its automatic 0-byte output; rename that tensor",
                                     file=file, place=self.at[tname])
                self.add(tname, 0, Role.OUTPUT, p, False)
                self.writes[name].append(tname)
                self.outputs.append(tname)


def _order_key(place: str) -> tuple[int, int]:
    """Order graph outputs as the file lists them: listed outputs, then automatic ones."""
    head, _, idx = place.partition("[")
    return (0 if head == "outputs" else 1, int(idx.rstrip("]")))


# ---- generators ------------------------------------------------------------------------------


def _lognormal(rng: np.random.Generator, mean: float, sigma: float, size: int) -> np.ndarray:
    """Lognormal draws with the given mean (sigma 0 gives the mean exactly)."""
    if sigma <= 0:
        return np.full(size, float(mean))
    return rng.lognormal(math.log(mean) - sigma * sigma / 2.0, sigma, size)


def generate(kind: str, n: int, seed: int = 0, *, width: int | None = None,
             max_in_degree: int = 3, mean_flops: float = 1e9, mean_bytes: float = 1e6,
             mean_edge_bytes: float = 1e6, sigma: float = 0.5, hidden: int = 768,
             seq: int = 128, device_flops_per_s: Mapping[str, float] | None = None
             ) -> dict[str, Any]:
    """A synthetic task graph (a dict in the task-graph format) with ``n`` tasks.

    Kinds (``GENERATORS``):

    - ``chain``: t0 -> t1 -> ... -> t(n-1).
    - ``fork-join``: stages of one fork task fanning out to ``width`` parallel tasks that
      join in the next stage's fork task (default width n-2: one fork, one join).
    - ``layered``: random layered DAG, layers of ``width`` tasks (default about sqrt(n));
      each task past the first layer draws 1..``max_in_degree`` predecessors from the layer
      before.
    - ``transformer``: an embedding task then repeated pre-norm blocks (ln1, q, k, v, attn,
      proj, residual add, ln2, fc1, act, fc2, residual add) sized by ``hidden`` and ``seq``
      in fp32; truncated to ``n`` tasks.

    FLOPs, bytes and edge bytes are lognormal around ``mean_*`` with log-sigma ``sigma``
    (transformer: around the block's own figures), from ``numpy.random.default_rng(seed)``:
    the same arguments give the same graph. Every source task reads one graph input. With
    ``device_flops_per_s`` every task also gets ``times_s`` = flops / rate, times a per
    (task, device) lognormal affinity factor (log-sigma 0.3).

    >>> d = generate("fork-join", 6, seed=0, width=2)
    >>> [(e["src"], e["dst"]) for e in d["edges"]]
    [('t0', 't1'), ('t0', 't2'), ('t1', 't3'), ('t2', 't3'), ('t3', 't4'), ('t3', 't5')]
    """
    if kind not in GENERATORS:
        raise InputError(f"unknown task-graph kind {kind!r} (known: {', '.join(GENERATORS)})",
                         place="generate kind")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InputError(f"the number of tasks must be a positive integer, got {n!r}",
                         place="generate n")
    if width is not None and width < 1:
        raise InputError(f"width must be >= 1, got {width}", place="generate width")
    if max_in_degree < 1:
        raise InputError(f"max_in_degree must be >= 1, got {max_in_degree}",
                         place="generate max_in_degree")
    rng = np.random.default_rng(seed)
    if kind == "transformer":
        names, flops, nbytes, src, dst, ebytes, sources, in_bytes = _transformer(
            rng, n, hidden, seq, sigma)
    else:
        names = [f"t{i}" for i in range(n)]
        if kind == "chain":
            src = np.arange(n - 1, dtype=np.int64)
            dst = src + 1
        elif kind == "fork-join":
            src, dst = _fork_join(n, width if width is not None else max(1, n - 2))
        else:
            w = width if width is not None else max(1, round(math.sqrt(n)))
            src, dst = _layered(rng, n, w, max_in_degree)
        flops = _lognormal(rng, mean_flops, sigma, n)
        nbytes = np.rint(_lognormal(rng, mean_bytes, sigma, n)).astype(np.int64)
        ebytes = np.rint(_lognormal(rng, mean_edge_bytes, sigma, len(src))).astype(np.int64)
        has_pred = np.zeros(n, dtype=bool)
        has_pred[dst] = True
        sources = np.flatnonzero(~has_pred)
        in_bytes = np.rint(_lognormal(rng, mean_edge_bytes, sigma, len(sources))
                           ).astype(np.int64)
    tasks: list[dict[str, Any]] = [
        {"name": nm, "flops": f, "bytes": b, "dtype": "fp32"}
        for nm, f, b in zip(names, flops.tolist(), nbytes.tolist(), strict=True)]
    if device_flops_per_s:
        for dev, rate in sorted(device_flops_per_s.items()):
            if not rate > 0:
                raise InputError(f"device {dev!r}: flops_per_s must be > 0, got {rate}",
                                 place="generate device_flops_per_s")
            factor = _lognormal(rng, 1.0, 0.3, n)
            for t, f, a in zip(tasks, flops.tolist(), factor.tolist(), strict=True):
                t.setdefault("times_s", {})[dev] = f / rate * a
    edges = [{"src": names[s], "dst": names[d], "bytes": b}
             for s, d, b in zip(src.tolist(), dst.tolist(), ebytes.tolist(), strict=True)]
    inputs = [{"dst": names[s], "bytes": b}
              for s, b in zip(sources.tolist(), in_bytes.tolist(), strict=True)]
    return {"schema_version": SCHEMA_VERSION, "name": f"{kind}-{n}-s{seed}",
            "tasks": tasks, "edges": edges, "inputs": inputs}


def _fork_join(n: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    idx = np.arange(n, dtype=np.int64)
    stage = width + 1
    par = idx[idx % stage != 0]
    fork = par // stage * stage
    join = fork + stage
    keep = join < n
    src = np.concatenate([fork, par[keep]])
    dst = np.concatenate([par, join[keep]])
    order = np.lexsort((dst, src))
    return src[order], dst[order]


def _layered(rng: np.random.Generator, n: int, width: int, max_in: int
             ) -> tuple[np.ndarray, np.ndarray]:
    if n <= width:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    tasks = np.arange(width, n, dtype=np.int64)
    k = rng.integers(1, max_in + 1, size=len(tasks))
    dst = np.repeat(tasks, k)
    prev_start = (dst // width - 1) * width
    src = prev_start + rng.integers(0, width, size=len(dst))
    pairs = np.unique(src * n + dst)
    return pairs // n, pairs % n


# transformer block: (part, flops(S, H), bytes(S, H)) in fp32; 4 bytes per element
_BLOCK = ("ln1", "q", "k", "v", "attn", "proj", "add1", "ln2", "fc1", "act", "fc2", "add2")
_BLOCK_EDGES = (("in", "ln1"), ("in", "add1"), ("ln1", "q"), ("ln1", "k"), ("ln1", "v"),
                ("q", "attn"), ("k", "attn"), ("v", "attn"), ("attn", "proj"),
                ("proj", "add1"), ("add1", "ln2"), ("add1", "add2"), ("ln2", "fc1"),
                ("fc1", "act"), ("act", "fc2"), ("fc2", "add2"))


def _block_costs(s: int, h: int) -> dict[str, tuple[float, float, float]]:
    """part -> (flops, bytes moved, bytes of its output) for one block at seq s, hidden h."""
    act = 4.0 * s * h
    lin = (2.0 * s * h * h, 2 * act + 4.0 * h * h, act)
    return {
        "ln1": (7.0 * s * h, 2 * act, act), "ln2": (7.0 * s * h, 2 * act, act),
        "q": lin, "k": lin, "v": lin, "proj": lin,
        "attn": (4.0 * s * s * h + 8.0 * s * s, 4 * act, act),
        "add1": (1.0 * s * h, 3 * act, act), "add2": (1.0 * s * h, 3 * act, act),
        "fc1": (8.0 * s * h * h, act + 16.0 * h * h + 4 * act, 4 * act),
        "act": (8.0 * 4 * s * h, 8 * act, 4 * act),
        "fc2": (8.0 * s * h * h, 4 * act + 16.0 * h * h + act, act),
    }


def _transformer(rng: np.random.Generator, n: int, hidden: int, seq: int, sigma: float
                 ) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                            np.ndarray, np.ndarray, np.ndarray]:
    if hidden < 1 or seq < 1:
        raise InputError(f"hidden and seq must be >= 1, got {hidden} and {seq}",
                         place="generate transformer")
    costs = _block_costs(seq, hidden)
    blocks = max(0, math.ceil((n - 1) / len(_BLOCK)))
    names = ["embed"]
    base_f = [0.0]
    base_b = [8.0 * seq + 8.0 * seq * hidden]  # token ids read, embeddings written (rows)
    out_b = {"embed": 4.0 * seq * hidden}
    src_names: list[str] = []
    dst_names: list[str] = []
    prev = "embed"
    for layer in range(blocks):
        local = {p: f"L{layer}.{p}" for p in _BLOCK}
        local["in"] = prev
        for p in _BLOCK:
            f, b, o = costs[p]
            names.append(local[p])
            base_f.append(f)
            base_b.append(b)
            out_b[local[p]] = o
        for a, z in _BLOCK_EDGES:
            src_names.append(local[a])
            dst_names.append(local[z])
        prev = local["add2"]
    names = names[:n]
    pos = {nm: i for i, nm in enumerate(names)}
    jitter = _lognormal(rng, 1.0, sigma, 2 * len(names))
    flops = np.asarray(base_f[:n]) * jitter[:n]
    nbytes = np.rint(np.asarray(base_b[:n]) * jitter[n:]).astype(np.int64)
    kept = [(pos[a], pos[z], out_b[a]) for a, z in zip(src_names, dst_names, strict=True)
            if a in pos and z in pos]
    src = np.asarray([k[0] for k in kept], dtype=np.int64)
    dst = np.asarray([k[1] for k in kept], dtype=np.int64)
    ebytes = np.rint(np.asarray([k[2] for k in kept], dtype=float)).astype(np.int64)
    sources = np.asarray([0], dtype=np.int64)
    in_bytes = np.asarray([8 * seq], dtype=np.int64)
    return names, flops, nbytes, src, dst, ebytes, sources, in_bytes
