"""One device's worker: set-up (pin, load, build kernels or sessions) and the step loop.

A worker runs the steps of one device of an ``ExecProgram`` (``runtime.program``) in order,
for every request in flight: compute steps (a partition's onnxruntime session, or the ops of
a vertex in the op-level mode), conversions, the send and receive halves of transfers
(shared-memory slots plus a notification on a worker-to-worker pipe), core-gate tokens, and
on the host the ``io:in`` / ``io:out`` steps. The parent (``runtime.executor``) starts one
per device in a process of its own, or runs the host device's worker in the client's own
process and thread (``Executor(inline_host=True)``), so that a request on the host costs
no process hand-off.

Messages between the parent and a worker are JSON after a ``J`` byte, or 17 packed bytes
for the frequent ones (go / out / done); nothing is pickled.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import statistics
import struct
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as mp_wait
from typing import Any

import numpy as np

from placewise.cost.model import Representation
from placewise.errors import UnsupportedError
from placewise.graph.ir import Op, OpKind, Provenance
from placewise.runtime.backends.torch import unpack_fx
from placewise.units import DType, Layout

__all__ = ["measure_step_overhead"]

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
        _put(parent, "ready", w.setup())
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

    def __init__(self, payload: dict[str, Any], parent: Connection | None,
                 readers: list[tuple[str, Connection]], writers: dict[str, Any], *,
                 shm: Any = None, inbox: Inbox | None = None) -> None:
        """``parent`` is the pipe to the parent process; ``None`` for the host's worker run
        inline by the client (``shm``: the client's own shared-memory block), which then
        hands requests over with ``begin`` and takes results through ``on_output`` and
        ``on_done``. ``inbox``: where workers on the same thread leave this worker's transfer
        notes and gate tokens (instead of a pipe) and the tensors they hand over."""
        self.inbox = inbox if inbox is not None else Inbox()
        self.p = payload
        self.parent = parent
        self.inline = parent is None
        self._shm_given = shm
        #: inline only: request -> its input arrays (graph-input order)
        self.inline_inputs: dict[int, Sequence[Any]] = {}
        self.on_output: Callable[[int, int, list[Any]], None] | None = None
        self.on_done: Callable[[int, int], None] | None = None
        self._saved_pin: tuple[set[int], int] | None = None
        #: inline devices of different cores on one thread share a one-element list: the
        #: worker the thread is pinned for (each re-pins before its steps)
        self.pin_state: list[Any] | None = None
        self.readers = [c for _, c in readers]
        self.writers = writers
        self.device = payload["device"]
        self.cur_task = -2
        self.cur_request = -1
        self.cur_op = -1
        self.rss_start = _rss()

    # ---- setup ----
    def setup(self) -> dict[str, Any]:
        """Pin, load, build and warm; returns what the parent records of this worker."""
        from multiprocessing import shared_memory

        import torch

        from placewise.runtime import opexec

        p = self.p
        self.torch = torch
        self.opexec = opexec
        if self.inline:  # the client's own thread: put its pinning back on close
            self._saved_pin = (os.sched_getaffinity(0), torch.get_num_threads())
        self.threads = opexec.pin_process(p["cores"])
        torch.set_grad_enabled(False)
        self.cuda = p["backend"] == "cuda"
        if self.cuda and not torch.cuda.is_available():
            raise UnsupportedError(f"device {self.device!r} has backend cuda but torch sees "
                                   f"no GPU here")
        self.dev = torch.device("cuda") if self.cuda else torch.device("cpu")
        self.partitioned = p.get("granularity") == "partition"
        self.fx = p["format"] == "torch_export" and not self.partitioned
        self.shm = (self._shm_given if self._shm_given is not None
                    else shared_memory.SharedMemory(name=p["shm"]))
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
        self._init_loop()
        return {"threads": self.threads, "weights_bytes": self.weight_total,
                "rss_start": self.rss_start, "rss_ready": _rss(), "pid": os.getpid(),
                "isa": str(torch.backends.cpu.get_cpu_capability()),
                "inline": self.inline}

    def release(self) -> None:
        """Inline only: drop the sessions and the views on the client's shared memory, and
        give the client's thread its pinning back."""
        for name in ("sessions", "op_lists", "in_views", "out_views", "x_views"):
            if hasattr(self, name):
                setattr(self, name, {})
        self.status = np.zeros(_STATUS_WORDS, dtype=np.int64)
        if hasattr(self, "env"):
            self.env.clear()
        self.inline_inputs = {}
        if self._saved_pin is not None:
            cores, threads = self._saved_pin
            self._saved_pin = None
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, cores)
            self.torch.set_num_threads(threads)

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
            model = onnx.load(path, load_external_data=False)  # sizes from the dims
            for init in model.graph.initializer:
                self.weight_bytes_extra += _onnx_bytes(init)
            sess = make_session(path, provider, threads=self.threads,
                                spinning=bool(p.get("session_spinning", False)))
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
                                     values=reload.get("values"),
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
            # keyed by the owning array object (alive while a step holds it): reading the
            # buffer's address (``__array_interface__``) costs 3 us per call here
            base = data
            while isinstance(base.base, np.ndarray):
                base = base.base
            return id(base), int(base.nbytes)
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

    def _init_loop(self) -> None:
        #: requests in flight here, oldest first; per request its next step, capture flag
        #: and tensors
        self.active: list[int] = []
        self.cursor: dict[int, int] = {}
        self.capture: dict[int, bool] = {}
        self.env: dict[int, dict[str, tuple[Any, Any, int]]] = {}
        self.arrived: dict[tuple[int, int], tuple[float, int]] = {}
        self.tokens: dict[tuple[int, int], int] = {}  # (earlier task, request) -> ns
        self.n_msgs = 0  # notes and tokens received so far
        self.gated = any(st["gin"] for st in self.steps)

    def _loop(self) -> None:
        assert self.parent is not None
        conns = [self.parent, *self.readers]
        group = [(self, conns)]
        while True:
            if self.advance(conns):
                continue
            if wait_group(group, None) is False:
                return

    def begin(self, r: int, capture: bool) -> None:
        """Take request ``r`` into the pipeline (the parent's *go*)."""
        self.active.append(r)
        self.cursor[r] = 0
        self.capture[r] = capture
        self.env[r] = {}

    def _done(self, r: int) -> None:
        t = time.monotonic_ns()
        if self.on_done is not None:
            self.on_done(r, t)
        else:
            assert self.parent is not None
            _put_hot(self.parent, b"D", r, t)

    def advance(self, conns: list[Connection]) -> bool:
        """Run one ready step (older requests first, every time); False when none is."""
        steps = self.steps
        gated = self.gated
        for r in self.active:
            c = self.cursor[r]
            st = steps[c]
            if st["kind"] == "recv" and (st["task"], r) not in self.arrived:
                self._drain(conns, 0.0)
                if (st["task"], r) not in self.arrived:
                    continue
            elif gated and st["gin"]:  # core gates: wait like for a transfer
                if self._closed_gate(st, r) >= 0:
                    self._drain(conns, 0.0)
                    if self._closed_gate(st, r) >= 0:
                        continue
                for b in st["gin"]:
                    del self.tokens[(b, r)]
            pin = self.pin_state
            if pin is not None and pin[0] is not self:  # inline devices on other cores
                os.sched_setaffinity(0, self.p["cores"])
                pin[0] = self
            self._step(st, r, self.env[r], self.capture[r])
            self.cursor[r] = c + 1
            if c + 1 == len(steps):
                self.active.remove(r)
                del self.cursor[r], self.env[r], self.capture[r]
                self._done(r)
            return True
        return False

    def _closed_gate(self, st: dict[str, Any], r: int) -> int:
        """The first task whose gate token step ``st`` of request ``r`` still lacks; -1
        when every gate is open."""
        tokens = self.tokens
        for b in st["gin"]:
            if (b, r) not in tokens:
                return int(b)
        return -1

    def _drain(self, conns: list[Connection], timeout: float | None) -> bool:
        """Read every pending message (blocking for one if ``timeout`` is None); False
        when the worker must stop."""
        if self.inbox.box:
            self._take_inbox()
            if timeout == 0.0:
                return True
        if not conns and timeout == 0.0:
            return True  # polling a pipe costs 6 us here: none to poll
        return self._take(mp_wait(conns, timeout), conns)

    def _note(self, data: bytes) -> None:
        self.n_msgs += 1
        if len(data) == _GATE.size:
            _tag, ti, r = _GATE.unpack(data)
            self.tokens[(ti, r)] = time.monotonic_ns()
        else:
            ti, r, scale = _NOTE.unpack(data)
            self.arrived[(ti, r)] = (scale, time.monotonic_ns())

    def _take_inbox(self) -> bool:
        """Read the notes and tokens workers on this thread left; whether there were any."""
        box = self.inbox.box
        if not box:
            return False
        while box:
            self._note(box.popleft())
        return True

    def _take(self, ready: Sequence[Any], conns: list[Connection]) -> bool:
        """Read the messages of this worker's ready pipes (``conns``: all of them, less a
        peer's that broke); False when the worker must stop."""
        par = self.parent
        for c in ready:
            if par is not None and c is par:
                while True:
                    try:
                        if not c.poll():
                            break
                        msg = _get(c)
                    except (EOFError, OSError):
                        return False  # the parent is gone
                    tag = msg[0]
                    if tag == "go":
                        self.begin(int(msg[1]), bool(msg[2]))
                    elif tag == "flush":
                        _put(c, "telemetry", self.telemetry_data())
                    elif tag == "solo":
                        _put(c, "solo", self._solo(int(msg[1])))
                    elif tag == "spin":
                        self.set_spin(float(msg[1]), float(msg[2]))
                    elif tag == "stop":
                        return False
            else:
                assert isinstance(c, Connection)
                try:
                    while c.poll():
                        self._note(c.recv_bytes())
                except (EOFError, OSError):
                    # a peer died: the parent sees it and stops the run
                    self.readers = [x for x in self.readers if x is not c]
                    conns[:] = [x for x in conns if x is not c]
        return True

    def _wait_mark(self, t0: int) -> tuple[int, int, int]:
        """Nothing is runnable: what this worker waits for (a task, a gate's task, or -1:
        the next request), also shown in its status block."""
        waiting_for, gate = -1, 0
        if self.active:
            r0 = self.active[0]
            st0 = self.steps[self.cursor[r0]]
            waiting_for = st0["task"]
            if self.gated and st0["gin"]:
                b = self._closed_gate(st0, r0)
                if b >= 0:  # waiting for that task's end on another device
                    waiting_for, gate = b, 1
            status = self.status
            status[0] = 2
            status[1] = waiting_for
            status[2] = r0
        return t0, waiting_for, gate

    def _wait_end(self, mark: tuple[int, int, int]) -> None:
        """The wait is over: recorded when a request is in flight here (a wait that ends
        with a new request counts as waiting for it)."""
        t0, waiting_for, gate = mark
        if self.active:
            if gate:
                self.rec_waits.append((self.active[0], waiting_for, t0, time.monotonic_ns(),
                                       1))
            else:
                self.rec_waits.append((self.active[0], waiting_for, t0, time.monotonic_ns()))
        self.status[0] = 0

    def set_spin(self, spin_s: float, idle_spin_s: float) -> None:
        own = not self.p.get("shared_cores", False)
        self.spin_ns = int(spin_s * 1e9) if own else 0
        self.idle_spin_ns = int(idle_spin_s * 1e9) if own else 0

    def telemetry_data(self) -> dict[str, Any]:
        """The records since the last call (and they are cleared)."""
        data = {"tasks": self.rec_tasks, "ops": self.rec_ops, "waits": self.rec_waits,
                "peak_live": self.peak_live, "rss_peak": max(_maxrss(), _rss())}  # the kernel updates its mark lazily
        self.rec_tasks, self.rec_ops, self.rec_waits = [], [], []
        self.peak_live = self.live_bytes
        return data

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
            dst = self.tasks[ti]["dst"]
            k0 = now()
            peer = self.writers[dst]
            if isinstance(peer, Inbox):  # a worker on this thread: hand the tensor over
                peer.hand[(ti, r)] = data
            else:
                self._write(self.x_views[ti][slot], data)
            k1 = now()
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
            k0 = now()
            data = self.inbox.hand.pop((ti, r), None)
            if data is None:
                data = self._read(self.x_views[ti][slot])
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
            if self.inline:  # the client's own arrays: nothing to copy
                arrays = self.inline_inputs.pop(r)
                for name, key, arr in zip(self.p["input_order"], st["writes"], arrays,
                                          strict=True):
                    data = np.ascontiguousarray(arr, dtype=self.in_views[name][slot].dtype)
                    env[key] = (data, None, self._hold(data))
            else:
                for name, key in zip(self.p["input_order"], st["writes"], strict=True):
                    data = self._read(self.in_views[name][slot])
                    env[key] = (data, None, self._hold(data))
            kernel = now() - k0
        else:  # io_out
            k0 = now()
            if self.inline:
                outs = [self._output(name, slot, env[key][0])
                        for name, key in zip(self.p["output_order"], st["reads"], strict=True)]
            else:
                for name, key in zip(self.p["output_order"], st["reads"], strict=True):
                    self._write(self.out_views[name][slot], env[key][0])
            t1 = now()  # the outputs are ready: the request's latency ends here
            kernel = t1 - k0
            if self.on_output is not None:
                self.on_output(r, t1, outs)
            else:
                assert self.parent is not None
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

    def _output(self, name: str, slot: int, data: Any) -> Any:
        """An output handed to the inline client: a numpy array of the graph's dtype."""
        want = self.out_views[name][slot]
        if not isinstance(data, np.ndarray):
            data = data.detach().cpu().numpy()
        dtype = want.dtype if isinstance(want, np.ndarray) else data.dtype
        return np.asarray(data, dtype=dtype)

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


class Inbox:
    """A worker's mailbox for the workers on its own thread, used as their writing end
    towards it: a transfer note or a gate token is appended (not written to a pipe, whose
    poll alone costs 6 us here), and a transferred tensor is handed over as it is (the
    memory is the same: no copy through shared memory)."""

    __slots__ = ("box", "hand")

    def __init__(self) -> None:
        self.box: deque[bytes] = deque()
        #: (transfer task, request) -> the tensor
        self.hand: dict[tuple[int, int], Any] = {}

    def send_bytes(self, data: bytes) -> None:
        self.box.append(bytes(data))


def wait_group(group: Sequence[tuple[_Worker, list[Connection]]], timeout: float | None,
               extra: Sequence[Any] = (),
               on_extra: Callable[[list[Any]], None] | None = None) -> bool | None:
    """Nothing is runnable on any worker of ``group`` (each with its pipes; one thread runs
    them all): wait for a message and read it. Polls first for the longest spin time of
    the group (a worker polls only where its device's cores are its own: that saves a
    blocked thread's wake-up, for a transfer or for the next request). ``extra`` are more
    objects to wait on (the inline host: the other workers' pipes), handed to
    ``on_extra`` when ready. False when a worker must stop, None when ``timeout`` passed
    without a message."""
    if any([w._take_inbox() for w, _ in group]):
        return True  # a worker of this thread left a message: no need to wait
    t0 = time.monotonic_ns()
    marks = [(w, w._wait_mark(t0)) for w, _ in group]
    spin = max((w.spin_ns if w.active else w.idle_spin_ns) for w, _ in group)
    objs: list[Any] = [c for _, cs in group for c in cs]
    objs += extra
    limit = t0 + spin
    while True:
        polling = spin > 0 and time.monotonic_ns() < limit
        ready = mp_wait(objs, 0.0 if polling else timeout)
        if ready or not polling:
            break
    got: bool | None = True if ready else None
    if ready:
        theirs = [x for x in ready if any(x is e for e in extra)]
        if theirs:
            assert on_extra is not None
            on_extra(theirs)
        for w, cs in group:
            mine = [c for c in ready if any(c is x for x in cs)]
            if mine and not w._take(mine, cs):
                got = False
    for w, mark in marks:
        w._wait_end(mark)
    return got


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
