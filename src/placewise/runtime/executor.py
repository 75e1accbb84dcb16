"""Run a plan for real: one worker process per device, tensors crossing through shared memory.

``program_from_schedule(problem, schedule)`` (or ``program_from_plan(plan, graph,
machine)`` for a plan file) turns a scheduled placement into an ``ExecProgram``: every task of the schedule (compute = a vertex, ``xfer:...`` transfers,
``conv:...`` conversions) becomes a step on the worker of the device that runs it, in the
plan's order per device (predicted start time; a transfer is a *send* step on the sender at
its predicted start and a *receive* step on the receiver at its predicted end). The host
worker also has ``io:in`` (copy a request's inputs in) and ``io:out`` (copy the graph
outputs back to the client) steps.

**Core gates.** Devices whose ``cores`` overlap (the probed ``local`` machine's ``cpu01``
shares core 0 with ``cpu0`` and core 1 with ``cpu1``) must not compute at the same time:
the scheduler holds a shared core for one device at a time, and its task times assume so
(a 2-thread kernel whose second core is taken waits at its barrier). Data dependencies
alone do not keep the workers to that, so the program carries *core gates*
(``ExecProgram.gates``, ``CoreGate``): for every core shared by several devices, the
compute and conversion tasks of those devices in plan start order; where two consecutive
ones belong to different devices, the later task waits until the earlier one has finished
in the same request. Gates that the program already implies (the later step depends,
through data, transfers, each worker's step order or other gates, on the earlier one) are
dropped. Transfers are never gated (the scheduler gives them no cores). A program without
shared cores has no gates.

``Executor(program, source)`` runs it:

- **workers**: one process per device (``spawn``), pinned to the device's cores with
  ``os.sched_setaffinity`` and ``len(cores)`` torch / onnxruntime threads, that loads the
  model itself (an ONNX file; a ``torch.export`` program from an *fx package*: the graph as
  JSON and the weights as ``.npy``, see ``pack_fx``) and keeps the weights of the ops it
  runs (once per device). Ops run through the same runners profiling timed: fx nodes of a
  ``torch.export`` program by calling their ``OpOverload`` (``FxProgram`` nodes), ONNX
  nodes as single-node onnxruntime sessions (``OnnxProgram.runner``), int8 contractions as
  onnxruntime dynamic-quantization sessions (``make_op_runner``). A device whose backend
  is ``cuda`` runs fx ops on the GPU (``torch.cuda``) when one is present.
- **transfers**: a shared-memory block (``multiprocessing.shared_memory``) holds one slot
  per transfer and request in flight; the sender copies the tensor into its slot and
  notifies the receiver through a pipe, the receiver copies it out. An int8 copy travels
  with its scale. Conversion tasks run the ``runtime.opexec`` conversion kernels where the
  plan puts them. An int8 kernel takes fp32 activations (onnxruntime dynamic
  quantization), so its int8 inputs are dequantized and its float outputs quantized around
  it: that work is timed apart (``hidden_conversion_ns``) because the plan does not name it.
- **gates**: after a gated step's earlier task has run, its worker sends a small token
  (``_GATE``: the task and the request, on the same worker-to-worker pipes as transfer
  notifications, told apart by size) to the later task's worker, which waits for it as it
  waits for a transfer: it keeps reading messages and runs other requests' ready steps
  meanwhile. A gate wait is a ``WaitRecord`` whose ``for_task`` is ``gate:{earlier task}``.
  Gates order the steps of one request; steps of different requests in flight still share
  cores (as the steady-state pipeline model assumes).
- **requests**: ``run(inputs, in_flight=1)`` runs requests one at a time;
  ``in_flight=K`` keeps K requests in the pipeline (a worker runs request k+1's ready
  steps while another device still works on request k; older requests go first). A
  request's latency runs from the client writing its inputs to the host worker having
  written its outputs to shared memory.
- **telemetry** (``runtime.telemetry``): every task's start/end on ``CLOCK_MONOTONIC``
  with the plan's task names, its CPU time, per-op times, waits, live tensor bytes per
  device, process memory, and ``solo(repeats)``: each device replays one request's steps
  alone.
- **faults**: a worker that dies, raises or makes no progress for ``timeout_s`` ends the
  run with ``ExecutionError`` naming the device, the task and the op (read from a status
  block each worker updates); every worker is stopped and the shared memory unlinked on
  every way out (also ``KeyboardInterrupt``; workers ignore SIGINT so that the parent
  shuts them down). Segment names start with ``placewise-``.

Spawned workers re-import the caller's main module: a script using the executor must guard
its top level with ``if __name__ == "__main__":``.
"""

from __future__ import annotations

import contextlib
import json
import math
import multiprocessing as mp
import os
import secrets
import shutil
import signal
import statistics
import struct
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as mp_wait
from typing import TYPE_CHECKING, Any

import numpy as np

from placewise.cost.model import Representation
from placewise.errors import ExecutionError, InputError, PlacewiseError, UnsupportedError
from placewise.graph.ir import Graph, Op, OpKind, Provenance
from placewise.hardware.spec import Device
from placewise.runtime.backends.onnxruntime import provider_for
from placewise.runtime.program import (
    ExecProgram,
)
from placewise.runtime.telemetry import (
    DeviceRecord,
    OpRecord,
    RequestRecord,
    SoloRecord,
    TaskRecord,
    Telemetry,
    WaitRecord,
    collect_tags,
)
from placewise.schedule.simulate import TaskKind
from placewise.units import DType, Layout

if TYPE_CHECKING:
    from placewise.runtime.opexec import ModelSource

__all__ = [
    "SHM_PREFIX",
    "ExecutionError",
    "Executor",
    "Fault",
    "measure_step_overhead",
    "pack_fx",
    "source_reload_args",
    "unpack_fx",
]

#: every shared-memory segment the executor creates is named ``/dev/shm/placewise-...``
SHM_PREFIX = "placewise-"
_ALIGN = 64
_STATUS_WORDS = 8  # per worker: state, task, request, t_start_ns, op, pid, -, -
_NOTE = struct.Struct("<iqd")  # task index, request, int8 scale (nan: none)
_GATE = struct.Struct("<ciq")  # b"T", earlier task index, request (13 bytes: not a _NOTE)
_HOT = struct.Struct("<cqq")  # go / out / done: tag, request, capture flag or time (ns)
_HOT_TAGS = {b"G": "go", b"O": "out", b"D": "done"}


def _put(conn: Connection, tag: str, *payload: Any) -> None:
    """A control message: JSON after a ``J`` byte (nothing is pickled)."""
    conn.send_bytes(b"J" + json.dumps([tag, *payload], separators=(",", ":")).encode())


def _put_hot(conn: Connection, tag: bytes, a: int, b: int) -> None:
    """A frequent message (go / out / done) as 17 packed bytes."""
    conn.send_bytes(_HOT.pack(tag, a, b))


def _get(conn: Connection) -> tuple[Any, ...]:
    data = conn.recv_bytes()
    if data[:1] == b"J":
        return tuple(json.loads(data[1:]))
    tag, a, b = _HOT.unpack(data)
    return _HOT_TAGS[tag], a, b




# ---- sources -----------------------------------------------------------------------------------


def source_reload_args(source: ModelSource, tmp_dir: str) -> dict[str, Any]:
    """How a worker gets ``source``: an ONNX file as it is; a ``torch.export`` program as
    an *fx package* under ``tmp_dir`` (``{"fx_package": folder}``: the graph as JSON, the
    weights as ``.npy`` files, nothing pickled), which a worker rebuilds in a fraction of a
    second without the ``torch.export`` deserializer (it imports ``torch._dynamo``, seconds
    per worker); a program the package cannot express is saved as ``.pt2`` instead."""
    from placewise.runtime.opexec import SourceFormat

    if source.format is SourceFormat.ONNX:
        if source.path is not None and source.path.is_file():
            return source.reload_args()
        import onnx

        path = os.path.join(tmp_dir, "model.onnx")
        onnx.save(source.onnx_model, path)
        return {"ref": path, "shapes": None, "batch": None}
    folder = os.path.join(tmp_dir, "fx")
    try:
        pack_fx(source.exported_program, folder)
        return {"ref": source.ref, "fx_package": folder}
    except _Unpackable:
        import torch

        path = os.path.join(tmp_dir, "model.pt2")
        torch.export.save(source.exported_program, path)
        return {"ref": path, "shapes": None, "batch": None}


# ---- fx packages: a torch.export program as JSON + .npy ---------------------------------------


class _Unpackable(Exception):
    """A program the fx package cannot express (falls back to .pt2)."""


def _enc_target(target: Any) -> str:
    import operator

    if target is operator.getitem:
        return "operator.getitem"
    schema = getattr(target, "_schema", None)
    overload = getattr(target, "_overloadname", None)
    if schema is None or overload is None:
        raise _Unpackable(f"target {target!r}")
    return f"{schema.name}.{overload}"


def _dec_target(text: str) -> Any:
    import operator

    import torch

    if text == "operator.getitem":
        return operator.getitem
    qual, _, overload = text.rpartition(".")
    ns, _, name = qual.partition("::")
    return getattr(getattr(getattr(torch.ops, ns), name), overload)


def _enc_arg(v: Any) -> Any:
    import torch
    from torch.fx import Node

    if isinstance(v, Node):
        return {"n": v.name}
    if v is None or isinstance(v, bool | int | str):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else {"f": repr(v)}
    if isinstance(v, list):
        return {"l": [_enc_arg(x) for x in v]}
    if isinstance(v, tuple):
        return {"t": [_enc_arg(x) for x in v]}
    if isinstance(v, dict):
        return {"d": {str(k): _enc_arg(x) for k, x in v.items()}}
    if isinstance(v, torch.dtype):
        return {"dtype": str(v).removeprefix("torch.")}
    if isinstance(v, torch.device):
        return {"device": str(v)}
    if isinstance(v, torch.layout):
        return {"layout": str(v).removeprefix("torch.")}
    if isinstance(v, torch.memory_format):
        return {"memory_format": str(v).removeprefix("torch.")}
    raise _Unpackable(f"argument {v!r}")


def _dec_arg(v: Any, nodes: Mapping[str, Any]) -> Any:
    import torch

    if not isinstance(v, dict):
        return v
    if "n" in v:
        return nodes[v["n"]]
    if "f" in v:
        return float(v["f"])
    if "l" in v:
        return [_dec_arg(x, nodes) for x in v["l"]]
    if "t" in v:
        return tuple(_dec_arg(x, nodes) for x in v["t"])
    if "d" in v:
        return {k: _dec_arg(x, nodes) for k, x in v["d"].items()}
    if "dtype" in v:
        return getattr(torch, v["dtype"])
    if "device" in v:
        return torch.device(v["device"])
    if "layout" in v:
        return getattr(torch, v["layout"])
    return getattr(torch, v["memory_format"])


def pack_fx(ep: Any, folder: str) -> None:
    """Write ``ep`` (an ``ExportedProgram``) as an fx package into ``folder``: the nodes,
    the input signature and the weights (one ``.npy`` per tensor, ``allow_pickle=False``).
    Raises ``_Unpackable`` for what it cannot express (callers fall back to ``.pt2``)."""
    import torch

    os.makedirs(folder, exist_ok=True)
    nodes = []
    for n in ep.graph.nodes:
        if n.op not in ("placeholder", "call_function", "output"):
            raise _Unpackable(f"fx node {n.name!r} is a {n.op}")
        nodes.append({"name": n.name, "op": n.op,
                      "target": _enc_target(n.target) if n.op == "call_function" else "",
                      "args": _enc_arg(tuple(n.args)), "kwargs": _enc_arg(dict(n.kwargs))})
    state = ep.state_dict
    consts = getattr(ep, "constants", {}) or {}
    specs = []
    for i, spec in enumerate(ep.graph_signature.input_specs):
        name = getattr(spec.arg, "name", None)
        entry: dict[str, Any] = {"arg": name, "kind": spec.kind.name, "target": spec.target}
        value = None
        if spec.target is not None:
            value = state[spec.target] if spec.target in state else consts.get(spec.target)
        if isinstance(value, torch.Tensor):
            t = value.detach().cpu().contiguous()
            if t.dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2) or \
                    t.is_quantized:
                raise _Unpackable(f"weight of dtype {t.dtype}")
            fname = f"w{i}.npy"
            np.save(os.path.join(folder, fname), t.numpy(), allow_pickle=False)
            entry["file"] = fname
            entry["param"] = spec.target in state
        specs.append(entry)
    with open(os.path.join(folder, "program.json"), "w", encoding="utf-8") as f:
        json.dump({"nodes": nodes, "inputs": specs}, f)


class _PackedProgram:
    """What ``FxProgram`` reads from an ``ExportedProgram``, rebuilt from an fx package."""

    def __init__(self, graph: Any, input_specs: list[Any], state_dict: dict[str, Any],
                 constants: dict[str, Any]) -> None:
        from types import SimpleNamespace

        self.graph = graph
        self.graph_signature = SimpleNamespace(input_specs=input_specs)
        self.state_dict = state_dict
        self.constants = constants
        self.graph_module = SimpleNamespace()


def unpack_fx(folder: str) -> _PackedProgram:
    """The program of an fx package (see ``pack_fx``)."""
    from types import SimpleNamespace

    import torch
    from torch.export.graph_signature import InputKind

    from placewise.io import load_json  # the input boundary: regular file, depth, numbers

    data = load_json(os.path.join(folder, "program.json"), what="fx package program")
    g = torch.fx.Graph()
    made: dict[str, Any] = {}
    for nd in data["nodes"]:
        if nd["op"] == "placeholder":
            node = g.placeholder(nd["name"])
        elif nd["op"] == "output":
            (value,) = _dec_arg(nd["args"], made)
            node = g.output(value)
        else:
            node = g.create_node("call_function", _dec_target(nd["target"]),
                                 _dec_arg(nd["args"], made), _dec_arg(nd["kwargs"], made),
                                 name=nd["name"])
        node.name = nd["name"]  # fx renames names that shadow builtins ("input")
        made[nd["name"]] = node
    specs = []
    state: dict[str, Any] = {}
    consts: dict[str, Any] = {}
    for entry in data["inputs"]:
        if "file" in entry:
            arr = np.load(os.path.join(folder, entry["file"]), allow_pickle=False)
            (state if entry.get("param", True) else consts)[entry["target"]] = \
                torch.from_numpy(arr)
        specs.append(SimpleNamespace(arg=SimpleNamespace(name=entry["arg"]),
                                     kind=InputKind[entry["kind"]], target=entry["target"]))
    return _PackedProgram(g, specs, state, consts)


# ---- faults (tests) ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Fault:
    """A fault to inject (tests): when ``device``'s worker reaches ``task`` of request
    ``request`` it ``"crash"``es (SIGKILL to itself), ``"hang"``s (sleeps) or ``"raise"``s."""

    kind: str
    device: str
    task: str
    request: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ("crash", "hang", "raise"):
            raise ValueError(f"fault kind must be crash, hang or raise, got {self.kind!r}")


# ---- shared memory layout ----------------------------------------------------------------------


def _align(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


@dataclass(frozen=True, slots=True)
class _Buf:
    """A tensor slot region: ``offsets[slot]``, shape, numpy dtype name, bytes."""

    offsets: tuple[int, ...]
    shape: tuple[int, ...]
    dtype: str
    nbytes: int


def _np_dtype(dtype: DType) -> str:
    table = {DType.FP32: "float32", DType.FP16: "float16", DType.FP64: "float64",
             DType.INT8: "int8", DType.UINT8: "uint8", DType.INT16: "int16",
             DType.INT32: "int32", DType.INT64: "int64", DType.BOOL: "bool"}
    try:
        return table[dtype]
    except KeyError:
        raise UnsupportedError(f"the executor cannot hold {dtype.value} tensors in shared "
                               f"memory") from None


def _layout(program: ExecProgram, slots: int, n_workers: int
            ) -> tuple[int, dict[str, _Buf], dict[str, _Buf], dict[int, _Buf]]:
    g = program.graph
    pos = _align(n_workers * _STATUS_WORDS * 8)

    def region(shape: tuple[int, ...], dtype: DType) -> _Buf:
        nonlocal pos
        nbytes = dtype.nbytes(math.prod(shape))
        offs = []
        for _ in range(slots):
            offs.append(pos)
            pos += _align(max(nbytes, 1))
        return _Buf(tuple(offs), shape, _np_dtype(dtype), nbytes)

    ins = {t: region(g.tensor(t).concrete_shape, g.tensor(t).dtype) for t in g.inputs}
    outs = {t: region(g.tensor(t).concrete_shape, g.tensor(t).dtype) for t in g.outputs}
    xfers: dict[int, _Buf] = {}
    for t in program.transfers():
        assert t.tensor is not None and t.src_rep is not None
        xfers[t.index] = region(g.tensor(t.tensor).concrete_shape, t.src_rep.dtype)
    return max(pos, _ALIGN), ins, outs, xfers


def _buf_json(b: _Buf) -> dict[str, Any]:
    return {"offsets": list(b.offsets), "shape": list(b.shape), "dtype": b.dtype,
            "nbytes": b.nbytes}


# ---- the parent side ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Proc:
    device: str
    index: int
    proc: Any
    conn: Connection
    alive: bool = True


class Executor:
    """Worker processes running an ``ExecProgram`` (see the module docstring).

    Use as a context manager (or call ``close()``)::

        with Executor(program, source, reference_inputs=inputs[0]) as ex:
            ex.start()
            outputs = ex.run(requests, phase="isolated")
            tel = ex.telemetry()

    ``reference_inputs`` (one request's inputs, graph-input order) is what each worker runs
    once at start-up to get the integer values and shapes op runners need.
    ``slots`` bounds the requests in flight; ``timeout_s`` is how long a run may make no
    progress before it is declared hung; ``setup_timeout_s`` bounds start-up. A worker
    with nothing to run polls its pipes for ``spin_s`` before it sleeps (only when no other
    device of the program uses its cores), which saves a wake-up per transfer.
    ``omp_wait_policy`` is set as ``OMP_WAIT_POLICY`` in every worker before torch loads
    (``None``: inherit): with the default (active) policy, OpenMP threads of a multi-core
    device spin at every barrier, and when another process holds one of its cores a
    2-thread kernel waits for that process's time slice (tail latencies of tens of ms on a
    busy host); ``PASSIVE`` makes them sleep instead. With several requests in flight the
    client handles completions every ``refill_s`` while at least half the window is still
    queued, instead of waking for every message.
    """

    def __init__(self, program: ExecProgram, source: ModelSource, *,
                 reference_inputs: Sequence[Any], slots: int = 4, timeout_s: float = 120.0,
                 setup_timeout_s: float = 900.0, fault: Fault | None = None,
                 warm_calls: int = 2, spin_s: float = 1e-3,
                 idle_spin_s: float = 2e-4, omp_wait_policy: str | None = "PASSIVE",
                 refill_s: float = 5e-4,
                 partition_files: Mapping[str, str] | None = None) -> None:
        if slots < 1:
            raise InputError(f"slots must be >= 1, got {slots}", place="slots")
        self.program = program
        self.source = source
        self.slots = slots
        self.timeout_s = float(timeout_s)
        self.setup_timeout_s = float(setup_timeout_s)
        self.fault = fault
        self.warm_calls = warm_calls
        self.spin_s = max(0.0, float(spin_s))
        self.idle_spin_s = max(0.0, float(idle_spin_s))
        self.omp_wait_policy = omp_wait_policy
        self.refill_s = max(0.0, float(refill_s))
        #: compiled partitions to run (name -> .onnx file, as ``export`` writes them);
        #: compiled at start-up when not given
        self.partition_files = dict(partition_files or {})
        self._partition_files: dict[str, str] = {}
        self._reference = [np.ascontiguousarray(np.asarray(x)) for x in reference_inputs]
        self._procs: list[_Proc] = []
        self._shm: Any = None
        self._tmp: str | None = None
        self._fx_map: dict[str, Any] | None = None
        self._views_in: dict[str, list[np.ndarray[Any, Any]]] = {}
        self._views_out: dict[str, list[np.ndarray[Any, Any]]] = {}
        self._status: np.ndarray[Any, Any] | None = None
        self._ready_info: dict[str, dict[str, Any]] = {}
        self._tasks: list[TaskRecord] = []
        self._ops: list[OpRecord] = []
        self._waits: list[WaitRecord] = []
        self._requests: list[RequestRecord] = []
        self._solo: list[SoloRecord] = []
        self._peak_live: dict[str, int] = {}
        self._rss_peak: dict[str, int] = {}
        self._next_request = 0
        self._started = False
        self._closed = False
        self._tags: dict[str, str] = {}
        self._notes: list[str] = []
        self._pending_send: dict[tuple[int, int], tuple[Any, ...]] = {}
        self._pending_recv: dict[tuple[int, int], tuple[str, tuple[Any, ...]]] = {}
        self._phase_peaks: dict[str, dict[str, int]] = {}
        #: the client process's CPU seconds in the last ``run`` (submitting requests,
        #: handling completions; telemetry collection excluded)
        self.last_run_cpu_s = 0.0

    # -- lifecycle --
    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def worker_pids(self) -> dict[str, int]:
        """Device name -> pid of its worker (started workers only)."""
        return {p.device: int(p.proc.pid) for p in self._procs if p.proc.pid is not None}

    @property
    def shm_name(self) -> str | None:
        return None if self._shm is None else str(self._shm.name)

    def start(self, progress: Callable[[str], None] | None = None) -> None:
        """Create the shared memory, spawn and pin the workers, wait until every one has
        loaded the model, built its kernels and warmed them."""
        if self._started:
            return
        self._started = True
        try:
            self._start(progress or (lambda _m: None))
        except BaseException:
            self.close()
            raise

    def _start(self, report: Callable[[str], None]) -> None:
        from multiprocessing import shared_memory

        prog = self.program
        devices = list(prog.devices)
        n = len(devices)
        size, ins, outs, xfers = _layout(prog, self.slots, n)
        name = f"{SHM_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
        self._shm = shared_memory.SharedMemory(name=name, create=True, size=size)
        buf = self._shm.buf
        self._status = np.ndarray((n, _STATUS_WORDS), dtype=np.int64, buffer=buf, offset=0)
        self._status[:] = -1
        self._views_in = {t: [np.ndarray(b.shape, dtype=b.dtype, buffer=buf, offset=o)
                              for o in b.offsets] for t, b in ins.items()}
        self._views_out = {t: [np.ndarray(b.shape, dtype=b.dtype, buffer=buf, offset=o)
                               for o in b.offsets] for t, b in outs.items()}
        self._tmp = tempfile.mkdtemp(prefix="placewise-exec-")
        if prog.partitions:
            report(f"compiling {len(prog.partitions)} partitions")
            from placewise.runtime.compile import write_partitions

            self._partition_files = (dict(self.partition_files) if self.partition_files
                                     else write_partitions(self.source, prog.partitions,
                                                           prog.graph, self._tmp))
            reload: dict[str, Any] = {}
        else:
            reload = source_reload_args(self.source, self._tmp)
            self._fx_map = _fx_map(self.source, prog.graph)
        ctx = mp.get_context("spawn")
        # one pipe per ordered device pair that has transfers or core gates
        pairs = sorted({(t.device, t.dst_device) for t in prog.transfers()
                        if t.dst_device is not None} |
                       {(prog.tasks[gt.before].device, prog.tasks[gt.after].device)
                        for gt in prog.gates})
        readers: dict[str, list[tuple[str, Connection]]] = {d.name: [] for d in devices}
        writers: dict[str, dict[str, Connection]] = {d.name: {} for d in devices}
        ends: list[Connection] = []
        for a, b in pairs:
            r, w = ctx.Pipe(duplex=False)
            readers[b].append((a, r))
            writers[a][b] = w
            ends += [r, w]
        fmt = self.source.format.value
        fault = None
        if self.fault is not None:
            try:
                ft = prog.task(self.fault.task).index
            except KeyError:
                raise InputError(f"fault names no task of the plan: {self.fault.task!r}",
                                 place="fault") from None
            fault = {"kind": self.fault.kind, "device": self.fault.device, "task": ft,
                     "request": self.fault.request}
        report(f"starting {n} worker processes")
        # libgomp reads OMP_WAIT_POLICY once, when torch loads it: the spawned interpreter
        # must find it in its environment (the caller's own OpenMP is already set up)
        old_policy = os.environ.get("OMP_WAIT_POLICY")
        if self.omp_wait_policy:
            os.environ["OMP_WAIT_POLICY"] = self.omp_wait_policy
        try:
            for i, d in enumerate(devices):
                payload = self._payload(d, i, reload, fmt, ins, outs, xfers, fault)
                parent, child = ctx.Pipe(duplex=True)
                proc = ctx.Process(target=_worker_entry,
                                   args=(payload, child, readers[d.name], writers[d.name]),
                                   name=f"placewise-worker-{d.name}", daemon=True)
                proc.start()
                child.close()
                self._procs.append(_Proc(d.name, i, proc, parent))
        finally:
            if self.omp_wait_policy:
                if old_policy is None:
                    os.environ.pop("OMP_WAIT_POLICY", None)
                else:
                    os.environ["OMP_WAIT_POLICY"] = old_policy
            for c in ends:  # the workers hold their own ends now
                c.close()
        pending = {p.device for p in self._procs}
        deadline = time.monotonic() + self.setup_timeout_s
        while pending:
            for msg, p in self._receive(deadline, "start-up"):
                if msg[0] == "ready":
                    self._ready_info[p.device] = msg[1]
                    pending.discard(p.device)
                    report(f"worker of {p.device} ready")
        dev_tags = [(d.name, list(d.cores or []), int(self._ready_info[d.name]["threads"]),
                     str(d.backend)) for d in devices]
        self._tags = collect_tags(dev_tags)
        self._tags["slots"] = str(self.slots)
        self._tags["shared_memory_bytes"] = str(size)
        self._tags["isa"] = str(self._ready_info[devices[0].name].get("isa", ""))

    def _shares_cores(self, d: Device) -> bool:
        mine = set(d.cores or ())
        return any(mine & set(o.cores or ()) for o in self.program.devices if o.name != d.name)

    def _payload(self, d: Device, i: int, reload: dict[str, Any], fmt: str,
                 ins: dict[str, _Buf], outs: dict[str, _Buf], xfers: dict[int, _Buf],
                 fault: dict[str, Any] | None) -> dict[str, Any]:
        prog = self.program
        steps = prog.steps[d.name]
        used_tasks = {s.task for s in steps if s.task >= 0}
        tasks = {}
        for ti in used_tasks:
            t = prog.tasks[ti]
            tasks[ti] = {"name": t.name, "kind": t.kind.value, "vertex": t.vertex,
                         "tensor": t.tensor, "device": t.device, "dst": t.dst_device,
                         "src_rep": _rep_json(t.src_rep), "dst_rep": _rep_json(t.dst_rep)}
        vertices = {}
        g = prog.graph
        for ti in used_tasks:
            t = prog.tasks[ti]
            if t.kind is TaskKind.COMPUTE:
                v = prog.vertices[t.name]
                vertices[t.name] = {
                    "dtype": v.dtype.value,
                    "ops": [{"name": o.name, "kind": o.kind.value, "inputs": list(o.inputs),
                             "outputs": list(o.outputs), "source": o.provenance.source,
                             "source_op": o.provenance.source_op,
                             "module_path": o.provenance.module_path} for o in v.ops],
                    "inputs": list(v.inputs), "outputs": list(v.outputs),
                    "float": {x: g.tensor(x).dtype.is_float for x in (*v.inputs, *v.outputs)}}
        return {
            "device": d.name, "index": i, "cores": list(d.cores or []),
            "backend": d.backend or "torch", "format": fmt, "source": reload,
            "graph_fingerprint": g.fingerprint(), "shm": self._shm.name,
            "slots": self.slots, "host": prog.host,
            "steps": [{"kind": s.kind.value, "task": s.task, "reads": list(s.reads),
                       "writes": list(s.writes), "frees": list(s.frees),
                       "gin": list(s.gates_in), "gout": list(s.gates_out)} for s in steps],
            "tasks": tasks, "vertices": vertices,
            "inputs": {t: _buf_json(b) for t, b in ins.items()},
            "outputs": {t: _buf_json(b) for t, b in outs.items()},
            "input_order": list(g.inputs), "output_order": list(g.outputs),
            "xfers": {ti: _buf_json(b) for ti, b in xfers.items()
                      if prog.tasks[ti].device == d.name or prog.tasks[ti].dst_device == d.name},
            "reference_inputs": self._reference, "fault": fault,
            "warm_calls": self.warm_calls,
            "n_workers": len(prog.devices),
            "spin_s": self.spin_s if not self._shares_cores(d) else 0.0,
            "idle_spin_s": self.idle_spin_s if not self._shares_cores(d) else 0.0,
            "fx_map": self._fx_map,
            "shared_cores": self._shares_cores(d),
            "granularity": "partition" if prog.partitions else "op",
            "provider": list(provider_for(d).as_ort()),
            "partitions": {name: path for name, path in self._partition_files.items()
                           if name in vertices},
        }

    # -- messages --
    def _receive(self, deadline: float, what: str) -> list[tuple[tuple[Any, ...], _Proc]]:
        """Messages from workers (blocking until at least one or a fault)."""
        live = [p for p in self._procs if p.alive]
        objs: list[Any] = [p.conn for p in live] + [p.proc.sentinel for p in live]
        timeout = max(0.0, deadline - time.monotonic())
        ready = mp_wait(objs, timeout)
        if not ready:
            self._raise_hang(what, timeout)
        out: list[tuple[tuple[Any, ...], _Proc]] = []
        died: list[_Proc] = []
        for obj in ready:
            for p in live:
                if obj is p.conn:
                    try:
                        while p.conn.poll():
                            msg = _get(p.conn)
                            if msg[0] == "error":
                                self._raise_worker_error(p, msg)
                            out.append((msg, p))
                    except (EOFError, OSError):
                        died.append(p)
                elif obj == p.proc.sentinel:
                    died.append(p)
        if died:
            # a worker may have sent its error report just before exiting
            for p in died:
                with contextlib.suppress(EOFError, OSError):
                    while p.conn.poll():
                        msg = _get(p.conn)
                        if msg[0] == "error":
                            self._raise_worker_error(p, msg)
            self._raise_died(died[0], what)
        return out

    def _status_of(self, p: _Proc) -> tuple[int, int, int, int, int]:
        assert self._status is not None
        row = self._status[p.index]
        return int(row[0]), int(row[1]), int(row[2]), int(row[3]), int(row[4])

    def _raise_worker_error(self, p: _Proc, msg: tuple[Any, ...]) -> None:
        _, task, request, op_index, text, tb = msg
        where = self.program.where(int(task), int(op_index))
        rq = f" of request {request}" if int(request) >= 0 else " during start-up"
        self._notes.append(f"{p.device}: {tb[-2000:]}")
        raise ExecutionError(f"the worker of device {p.device!r} failed in {where}{rq}: "
                             f"{text}", device=p.device, task=self._task_name(task),
                             op=self._op_name(task, op_index), request=int(request))

    def _raise_died(self, p: _Proc, what: str) -> None:
        p.proc.join(timeout=1.0)
        p.alive = False
        code = p.proc.exitcode
        state, task, request, _t0, op_index = self._status_of(p)
        how = (f"was killed by signal {-code}" if code is not None and code < 0
               else f"exited with status {code}")
        if state == 1 and task >= -1:
            where = self.program.where(task, op_index)
            at = f" while running {where} of request {request}"
        else:
            at = f" during {what}"
        raise ExecutionError(f"the worker of device {p.device!r} (pid {p.proc.pid}) {how}{at}",
                             device=p.device, task=self._task_name(task) if state == 1 else "",
                             op=self._op_name(task, op_index) if state == 1 else "",
                             request=request if state == 1 else -1)

    def _raise_hang(self, what: str, waited_s: float) -> None:
        now = time.monotonic_ns()
        running = []
        for p in self._procs:
            if not p.alive:
                continue
            state, task, request, t0, op_index = self._status_of(p)
            if state == 1:
                running.append((now - t0, p, task, request, op_index))
        if running:
            running.sort(key=lambda x: -x[0])
            dt, p, task, request, op_index = running[0]
            where = self.program.where(task, op_index)
            raise ExecutionError(
                f"the worker of device {p.device!r} hung in {where} of request {request}: "
                f"no progress for {dt / 1e9:.1f} s (timeout {waited_s:.1f} s)",
                device=p.device, task=self._task_name(task), op=self._op_name(task, op_index),
                request=request)
        waiting = []
        for p in self._procs:
            if p.alive:
                state, task, request, _t0, _op = self._status_of(p)
                waiting.append(f"{p.device} waits" + (
                    f" for {self._task_name(task)!r} of request {request}" if state == 2
                    else ""))
        raise ExecutionError(f"no worker made progress for {waited_s:.1f} s during {what} "
                             f"(" + "; ".join(waiting) + ")")

    def _task_name(self, task: int) -> str:
        if 0 <= task < len(self.program.tasks):
            return self.program.tasks[task].name
        return "io" if task == -1 else ""

    def _op_name(self, task: int, op_index: int) -> str:
        if 0 <= task < len(self.program.tasks):
            t = self.program.tasks[task]
            if t.vertex is not None and t.vertex in self.program.vertices:
                ops = self.program.vertices[t.vertex].ops
                if len(ops) == 1:
                    return ops[0].name
                if 0 <= op_index < len(ops) and not self.program.partitions:
                    return ops[op_index].name
        return ""

    def _send_all(self, tag: str, request: int = 0, flag: int = 0) -> None:
        for p in self._procs:
            if p.alive:
                try:
                    if tag == "go":
                        _put_hot(p.conn, b"G", request, flag)
                    else:
                        _put(p.conn, tag)
                except (BrokenPipeError, OSError):
                    self._raise_died(p, "sending a command")

    # -- running requests --
    def run(self, inputs: Sequence[Sequence[Any]], *, phase: str = "isolated",
            in_flight: int = 1, capture: bool = False) -> list[list[np.ndarray[Any, Any]]]:
        """Run one request per element of ``inputs`` (each: arrays in graph-input order),
        keeping at most ``in_flight`` requests in the pipeline; returns each request's
        outputs (graph-output order). Telemetry is kept under ``phase``."""
        if not self._started or self._closed:
            raise PlacewiseError("the executor is not running (call start())")
        k = max(1, min(int(in_flight), self.slots))
        g = self.program.graph
        n = len(inputs)
        for i, arrays in enumerate(inputs):  # refused before anything runs
            if len(arrays) != len(g.inputs):
                raise InputError(f"request {i} has {len(arrays)} inputs, the graph takes "
                                 f"{len(g.inputs)}", place="inputs")
            for name, arr in zip(g.inputs, arrays, strict=True):
                want = self._views_in[name][0].shape
                if tuple(np.shape(arr)) != want:
                    raise InputError(f"input {name!r} of request {i} has shape "
                                     f"{list(np.shape(arr))}, the plan's graph has "
                                     f"{list(want)}", place="inputs")
        results: list[list[np.ndarray[Any, Any]] | None] = [None] * n
        submit_ns = [0] * n
        out_ns = [0] * n
        ready_ns = [0] * n
        done_count = [0] * n
        done_ns = [0] * n
        base = self._next_request
        self._next_request += n
        nxt = 0
        outstanding = 0
        finished = 0
        n_workers = sum(1 for p in self._procs if p.alive)
        client_cpu0 = time.process_time()
        try:
            while finished < n:
                while nxt < n and outstanding < k:
                    slot = (base + nxt) % self.slots
                    arrays = inputs[nxt]
                    submit_ns[nxt] = time.monotonic_ns()
                    for name, arr in zip(g.inputs, arrays, strict=True):
                        np.copyto(self._views_in[name][slot], np.asarray(arr),
                                  casting="unsafe")
                    self._send_all("go", base + nxt, int(bool(capture)))
                    nxt += 1
                    outstanding += 1
                if k > 1 and outstanding * 2 >= k and self.refill_s > 0:
                    # enough queued: let completions pile up and handle them together,
                    # rather than waking (and taking a core from a worker) for each one
                    time.sleep(self.refill_s)
                deadline = time.monotonic() + self.timeout_s
                for msg, _p in self._receive(deadline, f"{phase} requests"):
                    tag = msg[0]
                    if tag == "out":
                        r = int(msg[1]) - base
                        slot = int(msg[1]) % self.slots
                        ready_ns[r] = int(msg[2])
                        results[r] = [np.array(self._views_out[o][slot], copy=True)
                                      for o in g.outputs]
                        out_ns[r] = time.monotonic_ns()
                    elif tag == "done":
                        r = int(msg[1]) - base
                        done_count[r] += 1
                        done_ns[r] = max(done_ns[r], int(msg[2]))
                        if done_count[r] == n_workers:
                            outstanding -= 1
                            finished += 1
        except BaseException:
            self.close()
            raise
        for r in range(n):
            self._requests.append(RequestRecord(base + r, phase, submit_ns[r], ready_ns[r],
                                                max(done_ns[r], out_ns[r]), out_ns[r]))
        # the client's own CPU time for these requests (telemetry collection excluded)
        self.last_run_cpu_s = time.process_time() - client_cpu0
        self._flush(phase)
        return [x if x is not None else [] for x in results]

    def _flush(self, phase: str) -> None:
        """Collect the workers' records since the last flush."""
        self._send_all("flush")
        pending = {p.device for p in self._procs if p.alive}
        deadline = time.monotonic() + self.timeout_s
        while pending:
            for msg, p in self._receive(deadline, "collecting telemetry"):
                if msg[0] != "telemetry":
                    continue
                pending.discard(p.device)
                self._absorb(p.device, msg[1], phase)

    def _absorb(self, device: str, data: dict[str, Any], phase: str) -> None:
        prog = self.program
        names = [t.name for t in prog.tasks]
        for rec in data["tasks"]:
            kind = rec[2]
            if kind == "send":
                self._pending_send.setdefault((rec[1], rec[0]), rec)
            elif kind == "recv":
                self._pending_recv.setdefault((rec[1], rec[0]), (device, rec))
            else:
                r, ti, kind_s, start, end, kernel, hidden, live = rec[:8]
                cpu_ns = int(rec[8]) if len(rec) > 8 else 0
                name = names[ti] if ti >= 0 else ("io:in" if kind_s == "io_in" else "io:out")
                k = {"compute": "compute", "convert": "conversion"}.get(kind_s, "io")
                self._tasks.append(TaskRecord(r, name, k, device, start, end, kernel, hidden,
                                              live, phase=phase, cpu_ns=cpu_ns))
        # pair sends with receives (either side may arrive first)
        for key in list(self._pending_send):
            if key in self._pending_recv:
                s = self._pending_send.pop(key)
                dev_r, rcv = self._pending_recv.pop(key)
                ti, r = key
                t = prog.tasks[ti]
                _, _, _, w0, w1, wk, notified, sent = s[:8]
                _, _, _, r0, r1, rk, received, live = rcv[:8]
                cpu_s = int(s[8]) if len(s) > 8 else 0
                cpu_r = int(rcv[8]) if len(rcv) > 8 else 0
                self._tasks.append(TaskRecord(
                    r, t.name, "transfer", t.device, w0, r1, wk + rk, 0, live,
                    dst_device=dev_r, marks=(("write_end", w1), ("notified", notified),
                                             ("sent", sent), ("received", received),
                                             ("read_start", r0), ("send_cpu_ns", cpu_s),
                                             ("receive_cpu_ns", cpu_r)),
                    phase=phase, cpu_ns=cpu_s + cpu_r))
        for o in data["ops"]:
            r, ti, oi, start, end = o
            v = prog.vertices[names[ti]]
            self._ops.append(OpRecord(r, v.ops[oi].name, v.name, device, start, end, phase))
        for w in data["waits"]:
            r, ti, start, end = w[:4]
            what = names[ti] if ti >= 0 else "request"
            if len(w) > 4 and w[4]:
                what = f"gate:{what}"  # a core gate: waiting for that task to end
            self._waits.append(WaitRecord(r, device, what, start, end, phase))
        self._peak_live[device] = max(self._peak_live.get(device, 0), int(data["peak_live"]))
        self._phase_peaks.setdefault(phase, {})[device] = max(
            self._phase_peaks.get(phase, {}).get(device, 0), int(data["peak_live"]))
        self._rss_peak[device] = max(self._rss_peak.get(device, 0), int(data["rss_peak"]))

    def peak_live_bytes(self, phase: str) -> dict[str, int]:
        """Device -> most live tensor bytes seen during ``phase``."""
        return dict(self._phase_peaks.get(phase, {}))

    def set_spin(self, spin_s: float, idle_spin_s: float) -> None:
        """Change how long workers poll before they sleep (see ``Executor``): polling cuts
        a request's wake-ups but takes CPU time the client may need between requests."""
        if not self._started or self._closed:
            raise PlacewiseError("the executor is not running (call start())")
        for p in self._procs:
            if p.alive:
                _put(p.conn, "spin", max(0.0, float(spin_s)), max(0.0, float(idle_spin_s)))

    def solo(self, repeats: int = 5) -> list[SoloRecord]:
        """Replay, one device at a time with every other worker idle, the steps of the last
        request run with ``capture=True``; medians over ``repeats``."""
        if not self._started or self._closed:
            raise PlacewiseError("the executor is not running (call start())")
        prog = self.program
        out: list[SoloRecord] = []
        try:
            for p in self._procs:
                _put(p.conn, "solo", int(repeats))
                deadline = time.monotonic() + self.timeout_s + 5.0 * repeats
                got = None
                while got is None:
                    for msg, q in self._receive(deadline, f"solo replay on {p.device}"):
                        if msg[0] == "solo" and q is p:
                            got = msg[1]
                # a transfer's halves: the write on the sender, the read on the receiver
                for ti, _kind, total, kernel, hidden in got:
                    out.append(SoloRecord(prog.tasks[ti].name, p.device, total, kernel, hidden,
                                          int(repeats)))
        except BaseException:
            self.close()
            raise
        self._solo = out
        return out

    def telemetry(self) -> Telemetry:
        """Everything measured so far."""
        devices = []
        for p in self._procs:
            info = self._ready_info.get(p.device, {})
            d = self.program.device(p.device)
            devices.append(DeviceRecord(
                p.device, int(p.proc.pid or 0), tuple(d.cores or ()),
                int(info.get("threads", 0)), str(d.backend), int(info.get("weights_bytes", 0)),
                int(self._peak_live.get(p.device, 0)), int(info.get("rss_start", 0)),
                int(info.get("rss_ready", 0)), int(self._rss_peak.get(p.device, 0))))
        return Telemetry(dict(self._tags), tuple(devices), tuple(self._requests),
                         tuple(sorted(self._tasks, key=lambda t: (t.request, t.start_ns))),
                         tuple(self._ops), tuple(self._waits), tuple(self._solo),
                         tuple(self._notes))

    def close(self) -> None:
        """Stop every worker (politely, then by force) and unlink the shared memory. Safe to
        call more than once."""
        if self._closed:
            return
        self._closed = True
        # a second Ctrl-C must not cut the clean-up short (leaving workers or shared memory
        # behind): SIGINT is held while closing (main thread only) and re-raised after
        held: list[int] = []
        old: Any = None
        if threading.current_thread() is threading.main_thread():
            with contextlib.suppress(ValueError):
                old = signal.signal(signal.SIGINT, lambda *_: held.append(1))
        try:
            self._close()
        finally:
            if old is not None:
                signal.signal(signal.SIGINT, old)
        if held and old is signal.default_int_handler:
            raise KeyboardInterrupt

    def _close(self) -> None:
        try:
            for p in self._procs:
                if p.alive and p.proc.is_alive():
                    with contextlib.suppress(Exception):
                        _put(p.conn, "stop")
            deadline = time.monotonic() + 2.0
            for p in self._procs:
                with contextlib.suppress(Exception):
                    p.proc.join(timeout=max(0.05, deadline - time.monotonic()))
            for p in self._procs:
                if p.proc.is_alive():
                    with contextlib.suppress(Exception):
                        p.proc.terminate()
                        p.proc.join(timeout=2.0)
                if p.proc.is_alive():
                    with contextlib.suppress(Exception):
                        p.proc.kill()
                        p.proc.join(timeout=5.0)
                p.alive = False
                with contextlib.suppress(Exception):
                    p.conn.close()
        finally:
            self._views_in = {}
            self._views_out = {}
            self._status = None
            if self._shm is not None:
                with contextlib.suppress(BufferError, OSError):
                    self._shm.close()
                with contextlib.suppress(FileNotFoundError):
                    self._shm.unlink()
                self._shm = None
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)
                self._tmp = None


def _fx_map(source: ModelSource, graph: Graph) -> dict[str, Any] | None:
    """fx node -> IR tensor(s), by the importer's own rules (so renamed tensors map too);
    ``InputError`` when the program is not the plan's graph."""
    from placewise.runtime.opexec import SourceFormat

    if source.format is not SourceFormat.TORCH_EXPORT:
        return None
    from placewise.graph.torch_import import _Builder

    b = _Builder(source.exported_program, graph.name, None)
    g = b.build()
    if g.fingerprint() != graph.fingerprint():
        raise InputError("the model source does not match the plan's graph (graph "
                         "fingerprints differ): plan this model again", file=source.ref)
    return {"node_tensor": {n.name: t for n, t in b.node_tensor.items()},
            "node_outputs": {n.name: list(ts) for n, ts in b.node_outputs.items()}}


def _rep_json(rep: Representation | None) -> list[str] | None:
    return None if rep is None else [rep.dtype.value, rep.layout.value]


def _rep(data: list[str]) -> Representation:
    return Representation(DType(data[0]), Layout(data[1]))


# ---- the worker side ---------------------------------------------------------------------------
# Everything below runs in a spawned worker process.


def _worker_entry(payload: dict[str, Any], parent: Connection,
                  readers: list[tuple[str, Connection]],
                  writers: dict[str, Connection]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when workers stop
    code = 0
    w: _Worker | None = None
    try:
        w = _Worker(payload, parent, readers, writers)
        w.setup()
        w.loop()
    except BaseException as exc:  # report, then leave without running atexit handlers
        code = 1
        task, request, op = (w.cur_task, w.cur_request, w.cur_op) if w is not None else (-2, -1, -1)
        with contextlib.suppress(Exception):
            _put(parent, "error", task, request, op, f"{type(exc).__name__}: {exc}",
                 traceback.format_exc()[-4000:])
    finally:
        with contextlib.suppress(Exception):
            parent.close()
        os._exit(code)


def _rss() -> int:
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except Exception:  # psutil missing: /proc
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _maxrss() -> int:
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


class _Ref:
    """A dynamic argument: the value of tensor ``name`` in the step's values."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name


def _compile_args(args: tuple[Any, ...]) -> tuple[bool, Any]:
    """Like ``_compile_arg`` for a top-level argument tuple, with a fast path when the
    dynamic arguments are plain tensor references (the common case)."""
    if all(not isinstance(a, list | tuple | dict) for a in args):
        dyn = [(i, a.name) for i, a in enumerate(args) if isinstance(a, _Ref)]
        if not dyn:
            return True, args
        base = list(args)

        def get(vals: dict[str, Any]) -> tuple[Any, ...]:
            out = base.copy()
            for i, name in dyn:
                out[i] = vals[name]
            return tuple(out)

        return False, get
    return _compile_arg(args)


def _compile_arg(v: Any) -> tuple[bool, Any]:
    """(static?, value or getter) for an argument structure with ``_Ref`` leaves."""
    if isinstance(v, _Ref):
        name = v.name
        return False, lambda vals: vals[name]
    if isinstance(v, list | tuple):
        parts = [_compile_arg(x) for x in v]
        if all(s for s, _ in parts):
            return True, v
        typ = type(v)
        getters = [(s, x) for s, x in parts]

        def get(vals: dict[str, Any]) -> Any:
            return typ(x if s else x(vals) for s, x in getters)

        return False, get
    if isinstance(v, dict):
        items = {k: _compile_arg(x) for k, x in v.items()}
        if all(s for s, _ in items.values()):
            return True, v

        def getd(vals: dict[str, Any]) -> Any:
            return {k: (x if s else x(vals)) for k, (s, x) in items.items()}

        return False, getd
    return True, v


class _Worker:
    """One device's worker: setup (pin, load, build kernels) and the step loop."""

    def __init__(self, payload: dict[str, Any], parent: Connection,
                 readers: list[tuple[str, Connection]], writers: dict[str, Connection]) -> None:
        self.p = payload
        self.parent = parent
        self.readers = [c for _, c in readers]
        self.writers = writers
        self.device = payload["device"]
        self.cur_task = -2
        self.cur_request = -1
        self.cur_op = -1
        self.rss_start = _rss()

    # ---- setup ----
    def setup(self) -> None:
        from multiprocessing import shared_memory

        import torch

        from placewise.runtime import opexec

        p = self.p
        self.torch = torch
        self.opexec = opexec
        self.threads = opexec.pin_process(p["cores"])
        torch.set_grad_enabled(False)
        self.cuda = p["backend"] == "cuda"
        if self.cuda and not torch.cuda.is_available():
            raise UnsupportedError(f"device {self.device!r} has backend cuda but torch sees "
                                   f"no GPU here")
        self.dev = torch.device("cuda") if self.cuda else torch.device("cpu")
        self.partitioned = p.get("granularity") == "partition"
        self.fx = p["format"] == "torch_export" and not self.partitioned
        self.shm = shared_memory.SharedMemory(name=p["shm"])
        buf = self.shm.buf
        n = int(p["n_workers"])
        self.status = np.ndarray((n, _STATUS_WORDS), dtype=np.int64, buffer=buf, offset=0)[
            int(p["index"])]
        self.status[:] = 0
        self.status[5] = os.getpid()
        self.slots = int(p["slots"])
        # tensor views on the shared block
        self.in_views = {t: [self._view(buf, b, o) for o in b["offsets"]]
                         for t, b in p["inputs"].items()}
        self.out_views = {t: [self._view(buf, b, o) for o in b["offsets"]]
                          for t, b in p["outputs"].items()}
        self.x_views = {int(ti): [self._view(buf, b, o) for o in b["offsets"]]
                        for ti, b in p["xfers"].items()}
        self.tasks = {int(k): v for k, v in p["tasks"].items()}
        self.steps = p["steps"]
        self.weights: dict[int, int] = {}  # storage ptr -> bytes (held for the whole run)
        self.weight_bytes_extra = 0
        self.cuda_params: dict[str, Any] = {}
        self.op_lists: dict[int, list[Callable[[dict[str, Any]], None]]] = {}
        if self.partitioned:
            self._setup_partitions()
        else:
            self._setup_interpreter()
        self.cur_task = -2
        # state of the step loop
        self.live: dict[int, list[int]] = {}  # storage ptr -> [bytes, refs]
        self.live_bytes = 0
        for ptr, nb in self.weights.items():
            self.live[ptr] = [nb, 1]
            self.live_bytes += nb
        self.live_bytes += self.weight_bytes_extra
        self.weight_total = self.live_bytes
        self.peak_live = self.live_bytes
        self.rec_tasks: list[tuple[Any, ...]] = []
        self.rec_ops: list[tuple[Any, ...]] = []
        self.rec_waits: list[tuple[Any, ...]] = []
        self.snapshot: dict[str, tuple[Any, Any, int]] | None = None
        self.fault = p["fault"] if p["fault"] and p["fault"]["device"] == self.device else None
        self.spin_ns = int(float(p.get("spin_s", 0.0)) * 1e9)
        self.idle_spin_ns = int(float(p.get("idle_spin_s", 0.0)) * 1e9)
        self._warm()
        _put(self.parent, "ready", {
            "threads": self.threads, "weights_bytes": self.weight_total,
            "rss_start": self.rss_start, "rss_ready": _rss(), "pid": os.getpid(),
            "isa": str(torch.backends.cpu.get_cpu_capability())})

    def _setup_partitions(self) -> None:
        """One onnxruntime session per partition this device runs (no model source)."""
        import onnx

        from placewise.runtime.backends.onnxruntime import Provider, make_session

        p = self.p
        provider = Provider(p["provider"][0], dict(p["provider"][1]))
        self.sessions: dict[int, Any] = {}
        for st in self.steps:
            if st["kind"] != "compute":
                continue
            ti = st["task"]
            self.cur_task = ti
            vname = self.tasks[ti]["vertex"]
            path = p["partitions"][vname]
            model = onnx.load(path, load_external_data=True)
            for init in model.graph.initializer:
                self.weight_bytes_extra += _onnx_bytes(init)
            sess = make_session(path, provider, threads=self.threads,
                                spinning=not p.get("shared_cores", False))
            self.sessions[ti] = sess
            self.op_lists[ti] = [self._session_run(sess, self.p["vertices"][vname])]

    def _session_run(self, sess: Any, v: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
        feeds_of = [i.name for i in sess.get_inputs()]
        outs = list(v["outputs"])

        def run(vals: dict[str, Any]) -> None:
            res = sess.run(outs, {n: vals[n] for n in feeds_of})
            for n, r in zip(outs, res, strict=True):
                vals[n] = r

        return run

    def _setup_interpreter(self) -> None:
        """The op-by-op interpreter (``granularity="op"``): the worker loads the model
        source and builds a runner per op."""
        p = self.p
        torch = self.torch
        opexec = self.opexec
        reload = p["source"]
        if "fx_package" in reload:
            src = opexec.ModelSource(reload["ref"], opexec.SourceFormat.TORCH_EXPORT, None,
                                     exported_program=unpack_fx(reload["fx_package"]))
        else:
            src = opexec.load_source(reload["ref"], shapes=reload["shapes"],
                                     batch=reload["batch"], with_graph=False)
        self.src = src
        self.program: Any = opexec.program_of(src)
        refs = p["reference_inputs"]
        if isinstance(self.program, opexec.FxProgram):
            self._fx_maps()
            captured = self.program.reference([torch.from_numpy(np.array(a)) for a in refs])
        else:
            feeds = {vi.name: np.array(a) for vi, a in zip(self.program.inputs, refs,
                                                          strict=True)}
            captured = self.program.reference(feeds)
        self.captured: Any = captured
        for st in self.steps:
            if st["kind"] == "compute":
                self.cur_task = st["task"]
                self.op_lists[st["task"]] = self._build_vertex(self.tasks[st["task"]])
        self._drop_unused_params()

    def _view(self, buf: Any, b: dict[str, Any], offset: int) -> Any:
        shape = tuple(b["shape"])
        arr = np.ndarray(shape, dtype=np.dtype(b["dtype"]), buffer=buf, offset=offset)
        if self.fx:
            if arr.dtype == np.bool_:
                return self.torch.from_numpy(arr.view(np.uint8)).view(self.torch.bool)
            return self.torch.from_numpy(arr)
        return arr

    def _fx_maps(self) -> None:
        self.node_tensor: dict[str, str] = dict(self.p["fx_map"]["node_tensor"])
        self.node_outputs = {k: list(v) for k, v in self.p["fx_map"]["node_outputs"].items()}
        self.tensor_node: dict[str, str] = {}
        for node, t in self.node_tensor.items():
            self.tensor_node.setdefault(t, node)

    def _count_weight(self, t: Any) -> None:
        if isinstance(t, self.torch.Tensor):
            s = t.untyped_storage()
            self.weights[s.data_ptr()] = s.nbytes()

    def _build_vertex(self, task: dict[str, Any]) -> list[Callable[[dict[str, Any]], None]]:
        v = self.p["vertices"][task["vertex"]]
        dtype = DType(v["dtype"])
        runs = []
        for oi, od in enumerate(v["ops"]):
            self.cur_op = oi
            op = Op(od["name"], OpKind(od["kind"]), tuple(od["inputs"]), tuple(od["outputs"]),
                    provenance=Provenance(od["source"], od["source_op"], od["module_path"]))
            runs.append(self._build_op(op, dtype))
        self.cur_op = -1
        return runs

    def _build_op(self, op: Op, dtype: DType) -> Callable[[dict[str, Any]], None]:
        opexec = self.opexec
        prog = self.program
        if isinstance(prog, opexec.FxProgram):
            node = prog.node(op.provenance.source or op.name)
            if dtype is DType.INT8:
                runner = opexec.make_op_runner(self.src, prog, self.captured, op, DType.INT8,
                                               threads=self.threads)
                return self._int8_fx(node, runner, op)
            return self._fx_fp32(node, op)
        runner = opexec.make_op_runner(self.src, prog, self.captured, op, dtype,
                                       threads=self.threads)
        return self._onnx(runner, op, dtype)

    def _fx_ref(self, n: Any) -> Any:
        """Argument for fx node ``n``: a parameter (static), an IR tensor (dynamic) or a
        static value computed by the reference run (sizes, scalars)."""
        prog = self.program
        torch = self.torch
        if n.name in prog.params:
            t = prog.params[n.name]
            if self.cuda:
                t = self._cuda_param(n.name)
            self._count_weight(t)
            return t
        if n.op == "get_attr":
            val = getattr(prog.ep.graph_module, str(n.target))
            return val.to(self.dev) if isinstance(val, torch.Tensor) else val
        tensor = self.node_tensor.get(n.name)
        if tensor is not None:
            return _Ref(tensor)
        val = self.captured.get(n.name)
        if val is None or isinstance(val, self.opexec.TensorSpec):
            raise UnsupportedError(f"fx node {n.name!r} is neither an op of the graph nor a "
                                   f"static value")
        return val

    def _cuda_param(self, name: str) -> Any:
        if name not in self.cuda_params:
            self.cuda_params[name] = self.program.params[name].to(self.dev)
        return self.cuda_params[name]

    def _fx_fp32(self, node: Any, op: Op) -> Callable[[dict[str, Any]], None]:
        from torch.fx.node import map_arg

        torch = self.torch
        args, kwargs = map_arg((node.args, node.kwargs), self._fx_ref)
        if self.cuda:
            kwargs = {k: (self.dev if isinstance(v, torch.device) else v)
                      for k, v in kwargs.items()}
        s_a, get_a = _compile_args(tuple(args))
        s_k, get_k = _compile_arg(dict(kwargs))
        fn = node.target
        outs = self.node_outputs.get(node.name)
        single = self.node_tensor.get(node.name)

        def run(vals: dict[str, Any]) -> None:
            a = get_a if s_a else get_a(vals)
            k = get_k if s_k else get_k(vals)
            out = fn(*a, **k)
            if outs is not None:
                for i, name in enumerate(outs):
                    if name:
                        vals[name] = out[i]
            elif single is not None:
                vals[single] = out

        return run

    def _int8_fx(self, node: Any, runner: Any, op: Op) -> Callable[[dict[str, Any]], None]:
        torch = self.torch
        sess, feeds = runner.keepalive[0], runner.keepalive[1]
        x_node = node.args[0]
        x_name = self.node_tensor[x_node.name]
        out_name = self.node_tensor[node.name]
        names = [o.name for o in sess.get_outputs()]
        (feed_name,) = list(feeds)
        w = node.args[1]
        self.weight_bytes_extra += int(self.program.params[w.name].numel())
        if len(node.args) > 2 and getattr(node.args[2], "name", None) in self.program.params:
            self.weight_bytes_extra += int(self.program.params[node.args[2].name].nbytes)

        def run(vals: dict[str, Any]) -> None:
            x = vals[x_name]
            xa = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x
            y = sess.run(names, {feed_name: np.ascontiguousarray(xa, dtype=np.float32)})[0]
            vals[out_name] = torch.from_numpy(y)

        return run

    def _onnx(self, runner: Any, op: Op, dtype: DType) -> Callable[[dict[str, Any]], None]:
        sess, fixed = runner.keepalive[0], runner.keepalive[1]
        out_names = [o.name for o in sess.get_outputs()]
        prog = self.program
        dynamic = [n for n in fixed if n in set(op.inputs) and n not in prog.initializers
                   and n not in prog.constant_nodes]
        static = {n: v for n, v in fixed.items() if n not in dynamic}
        if dtype is DType.INT8:
            # the quantized session holds int8 weights: one byte per element (+ fp32 bias)
            for name in op.inputs:
                init = self.program.initializers.get(name)
                if init is not None:
                    numel = math.prod(init.dims)
                    self.weight_bytes_extra += numel if len(init.dims) >= 2 else numel * 4
        else:
            for name in op.inputs:
                init = self.program.initializers.get(name)
                if init is not None:
                    self.weight_bytes_extra += math.prod(init.dims) * _onnx_elem_bytes(init)

        def run(vals: dict[str, Any]) -> None:
            feeds = dict(static)
            for n in dynamic:
                feeds[n] = vals[n]
            res = sess.run(out_names, feeds)
            for n, v in zip(out_names, res, strict=True):
                vals[n] = v

        return run

    def _drop_unused_params(self) -> None:
        """Keep only the weights this device's ops use (the rest is released)."""
        import gc

        prog = self.program
        if isinstance(prog, self.opexec.FxProgram):
            used = set(self.weights)
            for name in list(prog.params):
                t = prog.params[name]
                if t.untyped_storage().data_ptr() not in used:
                    del prog.params[name]
            sd = prog.ep.state_dict
            for k in list(sd):
                t = sd[k]
                if isinstance(t, self.torch.Tensor) and t.untyped_storage().data_ptr() not in used:
                    del sd[k]
        gc.collect()

    def _warm(self) -> None:
        """Run every compute/convert kernel ``warm_calls`` times on reference-shaped
        values (first calls build caches and allocate)."""
        calls = int(self.p.get("warm_calls", 2))
        if calls <= 0:
            return
        vals = self._zero_values() if self.partitioned else self._reference_values()
        for _ in range(calls):
            for st in self.steps:
                if st["kind"] != "compute":
                    continue
                local = dict(vals)
                for run in self.op_lists[st["task"]]:
                    with contextlib.suppress(Exception):
                        run(local)
                        if self.cuda:
                            self.torch.cuda.synchronize()

    def _zero_values(self) -> dict[str, Any]:
        """Zeros of each partition input's shape and dtype (warm-up of the sessions)."""
        out: dict[str, Any] = {}
        for sess in self.sessions.values():
            for i in sess.get_inputs():
                shape = [d if isinstance(d, int) else 1 for d in i.shape]
                out.setdefault(i.name, np.zeros(shape, dtype=_ORT_NP.get(i.type, np.float32)))
        return out

    def _reference_values(self) -> dict[str, Any]:
        """Values of reference shape for every tensor the steps read (random floats, real
        integers)."""
        torch = self.torch
        gen = torch.Generator().manual_seed(0)
        out: dict[str, Any] = {}
        prog = self.program
        for st in self.steps:
            if st["kind"] != "compute":
                continue
            v = self.p["vertices"][self.tasks[st["task"]]["vertex"]]
            for od in v["ops"]:
                for name in od["inputs"]:
                    if not name or name in out:
                        continue
                    if self.fx:
                        node = self.tensor_node.get(name)
                        if node is None:
                            continue
                        val: Any = self.captured.get(node)
                        if val is None:
                            continue
                        if isinstance(val, self.opexec.TensorSpec):
                            dt = getattr(torch, val.dtype.removeprefix("torch."))
                            out[name] = torch.randn(val.shape, generator=gen).to(dt).to(self.dev)
                        elif isinstance(val, torch.Tensor):
                            out[name] = val.to(self.dev)
                    else:
                        val = self.captured.get(name)
                        if val is None or name in getattr(prog, "initializers", {}):
                            continue
                        if isinstance(val, self.opexec.TensorSpec):
                            out[name] = np.random.default_rng(0).standard_normal(
                                val.shape).astype(np.dtype(val.dtype))
                        else:
                            out[name] = val
        return out

    # ---- accounting ----
    def _storage(self, data: Any) -> tuple[int, int]:
        if isinstance(data, np.ndarray):
            base = data
            while isinstance(base.base, np.ndarray):
                base = base.base
            return int(base.__array_interface__["data"][0]), int(base.nbytes)
        s = data.untyped_storage()
        return int(s.data_ptr()), int(s.nbytes())

    def _hold(self, data: Any) -> int:
        """Count ``data``'s storage as live (once per storage); returns its key."""
        ptr, nb = self._storage(data)
        e = self.live.get(ptr)
        if e is None:
            self.live[ptr] = [nb, 1]
            self.live_bytes += nb
        else:
            e[1] += 1
        return ptr

    def _release(self, ptr: int) -> None:
        e = self.live.get(ptr)
        if e is None:
            return
        e[1] -= 1
        if e[1] <= 0:
            self.live_bytes -= e[0]
            del self.live[ptr]

    # ---- conversions ----
    def _quant(self, data: Any) -> tuple[Any, float]:
        torch = self.torch
        x = torch.from_numpy(data) if isinstance(data, np.ndarray) else data
        q, scale = self.opexec.quantize_int8(x)
        return (q.numpy() if isinstance(data, np.ndarray) else q), scale

    def _dequant(self, data: Any, scale: float) -> Any:
        torch = self.torch
        if isinstance(data, np.ndarray):
            return self.opexec.dequantize_int8(torch.from_numpy(data), scale).numpy()
        return self.opexec.dequantize_int8(data, scale)

    def _convert(self, data: Any, scale: float | None, src: Representation,
                 dst: Representation) -> tuple[Any, float | None]:
        torch = self.torch
        is_np = isinstance(data, np.ndarray)
        x = torch.from_numpy(data) if is_np else data
        y, s = self.opexec.convert_tensor(x, src, dst, scale)
        return (y.numpy() if is_np else y), s

    # ---- the loop ----
    def loop(self) -> None:
        torch = self.torch
        with torch.inference_mode():
            self._loop()

    def _loop(self) -> None:
        active: list[int] = []
        cursor: dict[int, int] = {}
        capture: dict[int, bool] = {}
        env: dict[int, dict[str, tuple[Any, Any, int]]] = {}
        self.arrived: dict[tuple[int, int], tuple[float, int]] = {}
        self.tokens: dict[tuple[int, int], int] = {}  # (earlier task, request) -> ns
        self.n_msgs = 0  # notes and tokens received so far
        steps = self.steps
        nsteps = len(steps)
        conns = [self.parent, *self.readers]
        status = self.status
        gated = any(st["gin"] for st in steps)
        while True:
            ran = False
            for r in active:
                c = cursor[r]
                st = steps[c]
                if st["kind"] == "recv" and (st["task"], r) not in self.arrived:
                    self._drain(conns, 0.0, active, cursor, capture, env)
                    if (st["task"], r) not in self.arrived:
                        continue
                elif gated and st["gin"]:  # core gates: wait like for a transfer
                    if self._closed_gate(st, r) >= 0:
                        self._drain(conns, 0.0, active, cursor, capture, env)
                        if self._closed_gate(st, r) >= 0:
                            continue
                    for b in st["gin"]:
                        del self.tokens[(b, r)]
                self._step(st, r, env[r], capture[r])
                cursor[r] = c + 1
                if c + 1 == nsteps:
                    active.remove(r)
                    del cursor[r], env[r], capture[r]
                    _put_hot(self.parent, b"D", r, time.monotonic_ns())
                ran = True
                break  # older requests first, every time
            if ran:
                continue
            # nothing runnable: block until a message arrives
            t0 = time.monotonic_ns()
            waiting_for = -1
            gate = 0
            if active:
                r0 = active[0]
                st0 = steps[cursor[r0]]
                waiting_for = st0["task"]
                if gated and st0["gin"]:
                    b = self._closed_gate(st0, r0)
                    if b >= 0:  # waiting for that task's end on another device
                        waiting_for, gate = b, 1
                status[0] = 2
                status[1] = waiting_for
                status[2] = r0
            if (self.spin_ns if active else self.idle_spin_ns) > 0:
                # the device's cores are its own: poll a while before sleeping, which
                # saves the wake-up latency of a blocked process (for a transfer, or for
                # the next request)
                limit = t0 + (self.spin_ns if active else self.idle_spin_ns)
                n_msgs = self.n_msgs
                n_active = len(active)
                while time.monotonic_ns() < limit and self.n_msgs == n_msgs \
                        and len(active) == n_active:
                    if not self._drain(conns, 0.0, active, cursor, capture, env):
                        return
                if self.n_msgs == n_msgs and len(active) == n_active and \
                        not self._drain(conns, None, active, cursor, capture, env):
                    return
            elif not self._drain(conns, None, active, cursor, capture, env):
                return
            if active:
                if gate:
                    self.rec_waits.append((active[0], waiting_for, t0, time.monotonic_ns(),
                                           1))
                else:
                    self.rec_waits.append((active[0], waiting_for, t0, time.monotonic_ns()))
            status[0] = 0

    def _closed_gate(self, st: dict[str, Any], r: int) -> int:
        """The first task whose gate token step ``st`` of request ``r`` still lacks; -1
        when every gate is open."""
        tokens = self.tokens
        for b in st["gin"]:
            if (b, r) not in tokens:
                return int(b)
        return -1

    def _drain(self, conns: list[Connection], timeout: float | None, active: list[int],
               cursor: dict[int, int], capture: dict[int, bool],
               env: dict[int, dict[str, tuple[Any, Any, int]]]) -> bool:
        """Read every pending message (blocking for one if ``timeout`` is None); False
        when the worker must stop."""
        ready = mp_wait(conns, timeout)
        for c in ready:
            if c is self.parent:
                while True:
                    try:
                        if not c.poll():
                            break
                        msg = _get(c)
                    except (EOFError, OSError):
                        return False  # the parent is gone
                    tag = msg[0]
                    if tag == "go":
                        r = int(msg[1])
                        active.append(r)
                        cursor[r] = 0
                        capture[r] = bool(msg[2])
                        env[r] = {}
                    elif tag == "flush":
                        self._send_telemetry()
                    elif tag == "solo":
                        _put(self.parent, "solo", self._solo(int(msg[1])))
                    elif tag == "spin":
                        own = not self.p.get("shared_cores", False)
                        self.spin_ns = int(float(msg[1]) * 1e9) if own else 0
                        self.idle_spin_ns = int(float(msg[2]) * 1e9) if own else 0
                    elif tag == "stop":
                        return False
            else:
                assert isinstance(c, Connection)
                try:
                    while c.poll():
                        data = c.recv_bytes()
                        self.n_msgs += 1
                        if len(data) == _GATE.size:
                            _tag, ti, r = _GATE.unpack(data)
                            self.tokens[(ti, r)] = time.monotonic_ns()
                            continue
                        ti, r, scale = _NOTE.unpack(data)
                        self.arrived[(ti, r)] = (scale, time.monotonic_ns())
                except (EOFError, OSError):
                    # a peer died: the parent sees it and stops the run
                    self.readers = [x for x in self.readers if x is not c]
                    conns[:] = [self.parent, *self.readers]
        return True

    def _send_telemetry(self) -> None:
        data = {"tasks": self.rec_tasks, "ops": self.rec_ops, "waits": self.rec_waits,
                "peak_live": self.peak_live, "rss_peak": _maxrss()}
        _put(self.parent, "telemetry", data)
        self.rec_tasks, self.rec_ops, self.rec_waits = [], [], []
        self.peak_live = self.live_bytes

    def _inject(self, task: int, r: int) -> None:
        f = self.fault
        if f is None or f["task"] != task or f["request"] != r:
            return
        if f["kind"] == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        elif f["kind"] == "hang":
            time.sleep(3600.0)
        else:
            raise RuntimeError("injected fault")

    def _step(self, st: dict[str, Any], r: int, env: dict[str, tuple[Any, Any, int]],
              cap: bool) -> None:
        kind = st["kind"]
        ti = st["task"]
        status = self.status
        now = time.monotonic_ns
        cpu = time.process_time_ns
        c0 = cpu()
        t0 = now()
        status[3] = t0
        status[1] = ti
        status[2] = r
        status[4] = -1
        status[0] = 1
        self.cur_task, self.cur_request, self.cur_op = ti, r, -1
        if self.fault is not None:
            self._inject(ti, r)
        slot = r % self.slots
        kernel = 0
        hidden = 0
        if kind == "compute":
            kernel, hidden = self._compute(ti, r, env, st)
        elif kind == "convert":
            task = self.tasks[ti]
            (rk,) = st["reads"]
            (wk,) = st["writes"]
            data, scale, _ = env[rk]
            k0 = now()
            y, s = self._convert(data, scale, _rep(task["src_rep"]), _rep(task["dst_rep"]))
            kernel = now() - k0
            env[wk] = (y, s, self._hold(y))
        elif kind == "send":
            (rk,) = st["reads"]
            data, scale, _ = env[rk]
            view = self.x_views[ti][slot]
            k0 = now()
            self._write(view, data)
            k1 = now()
            dst = self.tasks[ti]["dst"]
            note = _NOTE.pack(ti, r, math.nan if scale is None else float(scale))
            t_note = now()
            self.writers[dst].send_bytes(note)
            t1 = now()
            self.rec_tasks.append((r, ti, "send", k0, k1, k1 - k0, t_note, t1, cpu() - c0))
            self._after(st, r, env, cap)
            status[0] = 0
            return
        elif kind == "recv":
            scale, received = self.arrived.pop((ti, r))
            (wk,) = st["writes"]
            view = self.x_views[ti][slot]
            k0 = now()
            data = self._read(view)
            k1 = now()
            env[wk] = (data, None if math.isnan(scale) else scale, self._hold(data))
            self._peak()
            self.rec_tasks.append((r, ti, "recv", k0, k1, k1 - k0, received, self.live_bytes,
                                   cpu() - c0))
            self._after(st, r, env, cap)
            status[0] = 0
            return
        elif kind == "io_in":
            k0 = now()
            for name, key in zip(self.p["input_order"], st["writes"], strict=True):
                data = self._read(self.in_views[name][slot])
                env[key] = (data, None, self._hold(data))
            kernel = now() - k0
        else:  # io_out
            k0 = now()
            for name, key in zip(self.p["output_order"], st["reads"], strict=True):
                self._write(self.out_views[name][slot], env[key][0])
            t1 = now()  # the outputs are ready: the request's latency ends here
            kernel = t1 - k0
            _put_hot(self.parent, b"O", r, t1)
            self._peak()
            self.rec_tasks.append((r, ti, kind, t0, t1, kernel, hidden, self.live_bytes,
                                   cpu() - c0))
            self._after(st, r, env, cap)
            status[0] = 0
            return
        t1 = now()
        gout = st["gout"]
        if gout:  # core gates: this task has ended, the later tasks may start
            token = _GATE.pack(b"T", ti, r)
            for dst in gout:
                self.writers[dst].send_bytes(token)
        self._peak()
        self.rec_tasks.append((r, ti, kind, t0, t1, kernel, hidden, self.live_bytes,
                               cpu() - c0))
        self._after(st, r, env, cap)
        status[0] = 0

    def _peak(self) -> None:
        if self.live_bytes > self.peak_live:
            self.peak_live = self.live_bytes

    def _after(self, st: dict[str, Any], r: int, env: dict[str, tuple[Any, Any, int]],
               cap: bool) -> None:
        if cap:
            snap = self.snapshot if self.snapshot is not None else {}
            for k in st["writes"]:
                if k in env:
                    snap[k] = env[k]
            if st["kind"] == "io_in":
                snap.clear()
                for k in st["writes"]:
                    snap[k] = env[k]
            self.snapshot = snap
        for k in st["frees"]:
            v = env.pop(k, None)
            if v is not None:
                self._release(v[2])

    def _write(self, view: Any, data: Any) -> None:
        if isinstance(view, np.ndarray):
            np.copyto(view, data, casting="unsafe")
        else:
            view.copy_(data)

    def _read(self, view: Any) -> Any:
        if isinstance(view, np.ndarray):
            return np.array(view, copy=True)
        out = view.clone()
        return out.to(self.dev) if self.cuda else out

    def _compute(self, ti: int, r: int, env: dict[str, tuple[Any, Any, int]],
                 st: dict[str, Any]) -> tuple[int, int]:
        task = self.tasks[ti]
        v = self.p["vertices"][task["vertex"]]
        int8 = v["dtype"] == "int8"
        isfloat = v["float"]
        now = time.monotonic_ns
        hidden = 0
        vals: dict[str, Any] = {}
        for name, key in zip(v["inputs"], st["reads"], strict=True):
            data, scale, _ = env[key]
            if int8 and scale is not None and isfloat[name]:
                h0 = now()
                data = self._dequant(data, scale)
                hidden += now() - h0
            vals[name] = data
        kernel = 0
        status = self.status
        cuda = self.cuda
        for oi, run in enumerate(self.op_lists[ti]):
            status[4] = oi
            self.cur_op = oi
            k0 = now()
            run(vals)
            if cuda:
                self.torch.cuda.synchronize()
            k1 = now()
            kernel += k1 - k0
            if not self.partitioned:  # a session's nodes are timed by its profiler
                self.rec_ops.append((r, ti, oi, k0, k1))
        for name, key in zip(v["outputs"], st["writes"], strict=True):
            data = vals[name]
            scale = None
            if int8 and isfloat[name]:
                h0 = now()
                data, scale = self._quant(data)
                hidden += now() - h0
            env[key] = (data, scale, self._hold(data))
        return kernel, hidden

    # ---- solo replay ----
    def _solo(self, repeats: int) -> list[tuple[int, str, float, float, float]]:
        """Replay this device's steps of the captured request ``repeats`` times, alone."""
        snap = self.snapshot or {}
        now = time.monotonic_ns
        samples: dict[int, list[tuple[int, int, int, str]]] = {}
        saved = (self.rec_tasks, self.rec_ops, self.rec_waits, self.live_bytes, self.peak_live)
        self.rec_tasks, self.rec_ops, self.rec_waits = [], [], []
        for _ in range(max(1, repeats)):
            for st in self.steps:
                kind = st["kind"]
                ti = st["task"]
                if ti < 0:
                    continue
                t0 = now()
                kernel = hidden = 0
                if kind == "compute":
                    env = {k: snap[k] for k in st["reads"] if k in snap}
                    if len(env) != len(st["reads"]):
                        continue
                    env_copy = dict(env)
                    kernel, hidden = self._compute(ti, -1, env_copy, st)
                    for k in st["writes"]:
                        v = env_copy.get(k)
                        if v is not None:
                            self._release(v[2])
                elif kind == "convert":
                    (rk,) = st["reads"]
                    if rk not in snap:
                        continue
                    task = self.tasks[ti]
                    data, scale, _ = snap[rk]
                    k0 = now()
                    self._convert(data, scale, _rep(task["src_rep"]), _rep(task["dst_rep"]))
                    kernel = now() - k0
                elif kind == "send":
                    (rk,) = st["reads"]
                    if rk not in snap:
                        continue
                    k0 = now()
                    self._write(self.x_views[ti][0], snap[rk][0])
                    kernel = now() - k0
                else:  # recv
                    k0 = now()
                    self._read(self.x_views[ti][0])
                    kernel = now() - k0
                t1 = now()
                samples.setdefault(ti, []).append((t1 - t0, kernel, hidden, kind))
        self.rec_tasks, self.rec_ops, self.rec_waits, self.live_bytes, self.peak_live = saved
        out = []
        for ti, s in samples.items():
            out.append((ti, s[0][3], statistics.median(x[0] for x in s) / 1e9,
                        statistics.median(x[1] for x in s) / 1e9,
                        statistics.median(x[2] for x in s) / 1e9))
        return out


def measure_step_overhead(steps: int = 200) -> list[float]:
    """Seconds the worker's step path (``_Worker._step``: status block, telemetry records,
    live-tensor bookkeeping, frees) costs per compute step beyond its kernel time, one
    sample per step, measured in the calling process (profiling calls it in a worker
    pinned to the device's cores). The step runs one no-op op on a small array, so the
    sample is the step's wall time minus the (near-zero) kernel time it recorded. The
    blocking/polling of ``_loop`` between steps and the hand-off of a request are not in it.

    >>> s = measure_step_overhead(5)
    >>> len(s), all(x >= 0 for x in s)
    (5, True)
    """
    if steps < 1:
        raise ValueError("steps must be >= 1")
    w = _Worker.__new__(_Worker)
    w.p = {"vertices": {"v": {"dtype": "fp32", "float": {"x": True, "y": True},
                              "inputs": ["x"], "outputs": ["y"]}}}
    w.status = np.zeros(_STATUS_WORDS, dtype=np.int64)
    w.fault = None
    w.slots = 1
    w.cuda = False
    w.partitioned = False
    w.tasks = {0: {"vertex": "v"}}

    def noop(vals: dict[str, Any]) -> None:
        vals["y"] = vals["x"]

    w.op_lists = {0: [noop]}
    w.live, w.live_bytes, w.peak_live = {}, 0, 0
    w.rec_tasks, w.rec_ops = [], []
    w.snapshot = None
    x = np.zeros(16, dtype=np.float32)
    st = {"kind": "compute", "task": 0, "reads": ("x",), "writes": ("y",), "frees": ("y",),
          "gin": (), "gout": ()}
    now = time.perf_counter_ns
    out: list[float] = []
    for _ in range(steps + 3):  # three warm-up steps
        env: dict[str, tuple[Any, Any, int]] = {"x": (x, None, w._hold(x))}
        t0 = now()
        w._step(st, 0, env, False)
        t1 = now()
        kernel = w.rec_tasks[-1][5]
        out.append(max(0.0, (t1 - t0 - kernel) * 1e-9))
        w._release(env["x"][2])
        w.rec_tasks.clear()
        w.rec_ops.clear()
    return out[3:]


_ORT_NP: dict[str, Any] = {
    "tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
    "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_}


def _onnx_bytes(init: Any) -> int:
    """Bytes an ONNX initializer holds."""
    return math.prod(init.dims) * _onnx_elem_bytes(init)


def _onnx_elem_bytes(init: Any) -> int:
    from onnx import helper

    try:
        return int(np.dtype(helper.tensor_dtype_to_np_dtype(init.data_type)).itemsize)
    except Exception:
        return 4
