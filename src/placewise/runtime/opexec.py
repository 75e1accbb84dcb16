"""Op runners: execute one source op of a model at its real shape, on the current process.

A ``ModelSource`` keeps a model's IR ``Graph`` together with what it was imported from (an
ONNX ``ModelProto`` or a ``torch.export`` ``ExportedProgram``), so that every IR op can be
mapped back to its source node through ``Provenance.source`` (ONNX node name / fx node
name; ONNX nodes are also found by their first output). Profiling uses these runners to time
ops one at a time; the executor reuses them (and ``FxProgram.run_node``) to run plans.

How one op is run:

- **torch.export (fx)**: the node's ``target`` (an ``OpOverload``) is called with inputs of
  the node's real shapes, strides and dtypes: parameters and buffers from the program's real
  state dict; floating-point activations random (seeded; non-negative for ops with a
  positive domain); integer and boolean activations (indices, masks, sizes) are the *real*
  values of a reference run of the whole program on valid example inputs (index inputs
  drawn below the size of the table they index). The reference run records only specs of
  floating-point values, so its memory is that of the integer values.
- **ONNX**: a single-node model (the node; the initializers and ``Constant`` nodes it reads
  kept as constants; every other input a graph input typed from the reference run) run by
  onnxruntime with ``intra_op_num_threads`` = the device's threads, one inter-op thread,
  sequential execution, full graph optimization. Integer inputs are again real values.
- **int8**: linear / matmul / gemm / conv whose weight is a parameter run as onnxruntime
  *dynamic quantization* (``quantize_dynamic``: int8 weights, activations quantized to
  uint8 per call, ``MatMulInteger`` / ``ConvInteger`` kernels). For fx nodes an equivalent
  one-op ONNX model is built first. Any other (kind, int8) is ``UnsupportedError``.

Conversion kernels (quantize / dequantize int8, cast, NCHW<->NHWC) are plain torch ops here
so that profiling and the executor run the same code.

>>> x = torch.randn(2, 3, 4, 5)
>>> q, scale = quantize_int8(x)
>>> q.dtype, bool((dequantize_int8(q, scale) - x).abs().max() <= scale)
(torch.int8, True)
>>> tuple(convert_layout(x, Layout.NCHW, Layout.NHWC).shape)
(2, 4, 5, 3)
"""

from __future__ import annotations

import contextlib
import math
import operator
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np
import torch

from placewise.cost.model import Representation
from placewise.errors import InputError, UnsupportedError
from placewise.graph import zoo
from placewise.graph.ir import INT8_KINDS, Graph, Op
from placewise.graph.load import bind_input_shapes
from placewise.graph.onnx_data import ort_session
from placewise.graph.onnx_import import load_onnx_source
from placewise.graph.onnx_shapes import every_value_an_output
from placewise.graph.torch_import import load_exported, read_pt2
from placewise.graph.walk import last_use
from placewise.graph.workload import is_workload_ref, load_workload
from placewise.io import quiet
from placewise.runtime.quantize import quantize_dynamic_model
from placewise.units import DType, Layout

__all__ = [
    "INT8_KINDS",
    "FxProgram",
    "ModelSource",
    "OnnxProgram",
    "OpRunner",
    "SourceFormat",
    "TensorSpec",
    "convert_layout",
    "convert_tensor",
    "dequantize_int8",
    "load_source",
    "make_conversion_runner",
    "make_op_runner",
    "pin_process",
    "program_of",
    "quantize_int8",
    "request_inputs",
    "torch_dtype",
]


_SEED = 0
_POSITIVE_FX = {"sqrt", "rsqrt", "log", "log1p", "reciprocal", "pow", "log2", "log10"}
_POSITIVE_ONNX = {"Sqrt", "Log", "Reciprocal", "Pow"}
_QUANT_OPS = {"MatMulInteger", "ConvInteger", "DynamicQuantizeMatMul", "QGemm",
              "MatMulIntegerToFloat"}
_UNSUPPORTED_ONNX = {"If", "Loop", "Scan"}
# ops whose output holds the input's values (index inputs are followed through them)
_ONNX_VIEWS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Cast", "Expand"}
_FX_VIEWS = ("aten.view", "aten.reshape", "aten._unsafe_view", "aten.flatten",
             "aten.squeeze", "aten.unsqueeze", "aten.clone", "aten._to_copy", "aten.expand",
             "aten.alias", "aten.contiguous")


class SourceFormat(Enum):
    ONNX = "onnx"
    TORCH_EXPORT = "torch_export"


@dataclass(frozen=True, slots=True)
class ModelSource:
    """A model's IR graph and the source it was imported from.

    ``ref``/``shapes``/``batch`` reload the same source in another process
    (``load_source(**source.reload_args())``); fx node names and ONNX node names are
    deterministic, so ops map the same way there.
    """

    ref: str
    format: SourceFormat
    graph: Graph | None
    path: Path | None = None
    onnx_model: Any = None  # onnx.ModelProto
    exported_program: Any = None  # torch.export.ExportedProgram
    example_inputs: tuple[Any, ...] = ()  # valid inputs (torch tensors / numpy arrays)
    shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()
    batch: int | None = None
    values: tuple[tuple[str, tuple[float, ...]], ...] = ()  # inputs given a value (ONNX)

    def reload_args(self) -> dict[str, Any]:
        """JSON-able arguments of ``load_source`` that rebuild this source."""
        out: dict[str, Any] = {"ref": self.ref,
                               "shapes": {k: list(v) for k, v in self.shapes} or None,
                               "batch": self.batch}
        if self.values:
            out["values"] = {k: list(v) for k, v in self.values}
        return out


def load_source(ref: str | os.PathLike[str], *, shapes: Mapping[str, Sequence[int]] | None = None,
                batch: int | None = None, with_graph: bool = True,
                values: Mapping[str, Sequence[float]] | None = None) -> ModelSource:
    """Load a model with its executable source: ``zoo:NAME?opts`` (exported with
    ``torch.export`` at static shapes), a ``.pt2`` program or an ``.onnx`` file.

    Task-graph JSON files have no executable source: ``InputError``. ``values`` gives
    ``.onnx`` inputs a value (``graph.onnx_control``).
    """
    text = os.fspath(ref)
    if values and not text.strip().lower().endswith(".onnx"):
        raise InputError("input values apply to .onnx models only", file=text,
                         place="--value")
    shp = tuple((k, tuple(int(d) for d in v)) for k, v in (shapes or {}).items())
    if text.strip().startswith("zoo:"):
        return _load_zoo_source(text.strip(), shp, batch, with_graph)
    if is_workload_ref(text):  # several models as one ONNX model (graph.workload)
        wgraph, wmodel = load_workload(text.strip(), shapes=shapes, batch=batch)
        return ModelSource(text.strip(), SourceFormat.ONNX, wgraph if with_graph else None,
                           None, onnx_model=wmodel, shapes=shp, batch=batch)
    path = Path(text)
    suffix = path.suffix.lower()
    if suffix == ".onnx":
        # the bound model with its shape arithmetic folded: the nodes are the graph's ops
        graph, model = load_onnx_source(text, shapes=shapes, batch=batch,
                                        with_graph=with_graph, values=values)
        vals = tuple((k, tuple(v)) for k, v in (values or {}).items())
        return ModelSource(text, SourceFormat.ONNX, graph, path, onnx_model=model,
                           shapes=shp, batch=batch, values=vals)
    if suffix == ".pt2":
        ep = read_pt2(text)  # checked entry by entry before torch sees it; nothing runs
        graph = None
        if with_graph:  # the same program, loaded once
            graph = load_exported(ep, name=path.stem, file=text)
            if shapes or batch is not None:
                if isinstance(batch, bool) or (batch is not None and (
                        not isinstance(batch, int) or batch <= 0)):
                    raise InputError(f"batch must be a positive integer, got {batch!r}",
                                     place="--batch")
                graph = bind_input_shapes(graph, shapes, batch, file=text)
        return ModelSource(text, SourceFormat.TORCH_EXPORT, graph, path,
                           exported_program=ep, shapes=shp, batch=batch)
    raise InputError("no executable source for this model: profiling and execution need a "
                     "zoo model, a .pt2 program or an .onnx file", file=text)


def _load_zoo_source(ref: str, shapes: tuple[tuple[str, tuple[int, ...]], ...],
                     batch: int | None, with_graph: bool) -> ModelSource:
    name, options = zoo.parse_zoo_ref(ref)
    if batch is not None:
        options["batch"] = batch
    module, inputs = zoo.build(name, **options)
    with torch.no_grad(), _quiet():
        ep = torch.export.export(module, inputs, strict=False)
    graph = None
    if with_graph:
        graph_name = name if not options else name + "?" + "&".join(
            f"{k}={v}" for k, v in sorted(options.items()))
        graph = load_exported(ep, name=graph_name)
    return ModelSource(ref, SourceFormat.TORCH_EXPORT, graph, None, exported_program=ep,
                       example_inputs=tuple(inputs), shapes=shapes, batch=batch)


# ---- process pinning --------------------------------------------------------------------------


def pin_process(cores: Sequence[int]) -> int:
    """Pin the calling process to ``cores`` and use that many torch threads; returns the
    thread count. Cores that do not exist here raise ``UnsupportedError``."""
    avail = os.sched_getaffinity(0) | set(range(os.cpu_count() or 1))
    want = sorted(set(int(c) for c in cores))
    if not want or any(c not in avail for c in want):
        raise UnsupportedError(f"cannot pin to cores {want}: this machine has cores "
                               f"{sorted(avail)}")
    os.sched_setaffinity(0, want)
    torch.set_num_threads(len(want))
    with contextlib.suppress(RuntimeError):  # only settable before inter-op work starts
        torch.set_num_interop_threads(1)
    return len(want)


# ---- values -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """Shape, strides and dtype of a floating-point value seen in a reference run."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: str  # torch or numpy dtype name


_TORCH_DTYPES: dict[DType, torch.dtype] = {
    DType.FP32: torch.float32, DType.FP16: torch.float16, DType.BF16: torch.bfloat16,
    DType.FP64: torch.float64, DType.INT8: torch.int8, DType.UINT8: torch.uint8,
    DType.INT16: torch.int16, DType.INT32: torch.int32, DType.INT64: torch.int64,
    DType.BOOL: torch.bool, DType.FP8_E4M3: torch.float8_e4m3fn,
    DType.FP8_E5M2: torch.float8_e5m2,
}


def torch_dtype(dtype: DType) -> torch.dtype:
    """The torch dtype of a placewise dtype (``UnsupportedError`` for int4).

    >>> torch_dtype(DType.BF16)
    torch.bfloat16
    """
    try:
        return _TORCH_DTYPES[dtype]
    except KeyError:
        raise UnsupportedError(f"torch has no dtype for {dtype.value}") from None


def _summarize_torch(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        if v.is_floating_point() or v.is_complex():
            return TensorSpec(tuple(v.shape), tuple(v.stride()), str(v.dtype))
        return v.detach().clone()
    if isinstance(v, list | tuple):
        return [_summarize_torch(x) for x in v]
    return v


def _rand_torch(spec: TensorSpec, gen: torch.Generator, positive: bool) -> torch.Tensor:
    dtype = getattr(torch, spec.dtype.removeprefix("torch."))
    need = 1 + sum((s - 1) * st for s, st in zip(spec.shape, spec.stride, strict=True)) \
        if all(s > 0 for s in spec.shape) else 0
    base = torch.randn(max(need, 1), generator=gen, dtype=torch.float32)
    if positive:
        base = base.abs() + 0.5
    base = base.to(dtype)
    return base.as_strided(spec.shape, spec.stride)


def _rand_numpy(shape: tuple[int, ...], dtype: np.dtype[Any], rng: np.random.Generator,
                positive: bool) -> np.ndarray[Any, Any]:
    a = rng.standard_normal(shape)
    if positive:
        a = np.abs(a) + 0.5
    return a.astype(dtype)


# ---- runners ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OpRunner:
    """One op, ready to run at its real shape: call ``run()`` as often as needed."""

    run: Callable[[], Any]
    backend: str  # "torch" or "onnxruntime"
    description: str
    keepalive: tuple[Any, ...] = field(default=(), repr=False)  # inputs, sessions, files


def _quiet() -> Any:
    """Silence library chatter (exporters, quantizer) - library code never prints."""
    return quiet()


def _ort_session(model: Any, threads: int) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = max(1, threads)
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3
    return ort_session(model, opts)


def _quantize_onnx(model: Any, what: str) -> Any:
    """onnxruntime dynamic quantization of a one-op model (its default op types; the
    weights as ``runtime.quantize.quantize_dynamic_model`` quantizes them);
    ``UnsupportedError`` if nothing was quantized."""
    with _quiet():
        q = quantize_dynamic_model(model, what, op_types=None)
    if not any(n.op_type in _QUANT_OPS for n in q.graph.node):
        raise UnsupportedError(f"{what} has no int8 kernel: onnxruntime dynamic quantization "
                               f"leaves it in float")
    return q


class FxProgram:
    """A ``torch.export`` program seen node by node: parameters, user inputs, a reference
    run that records the values ops need, and node runners."""

    def __init__(self, ep: Any) -> None:
        from torch.export.graph_signature import InputKind

        self.ep = ep
        self.nodes: dict[str, Any] = {n.name: n for n in ep.graph.nodes}
        self.params: dict[str, torch.Tensor] = {}
        self.user_inputs: list[str] = []
        consts = getattr(ep, "constants", {}) or {}
        state = ep.state_dict
        for spec in ep.graph_signature.input_specs:
            name = getattr(spec.arg, "name", None)
            if name is None:
                continue
            if spec.kind is InputKind.USER_INPUT:
                self.user_inputs.append(name)
            elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER,
                               InputKind.CONSTANT_TENSOR):
                target = spec.target
                value = state[target] if target in state else consts.get(target)
                if isinstance(value, torch.Tensor):
                    self.params[name] = value.detach()

    def node(self, name: str) -> Any:
        try:
            return self.nodes[name]
        except KeyError:
            raise UnsupportedError(f"the program has no fx node {name!r}") from None

    def example_inputs(self, seed: int = _SEED, *,
                       shapes: Mapping[str, Sequence[int]] | None = None) -> list[torch.Tensor]:
        """Valid inputs of the placeholders' shapes (``shapes`` by input name where given,
        else static metadata); integer inputs below the size of every table they index."""
        gen = torch.Generator().manual_seed(seed)
        out: list[torch.Tensor] = []
        for name in self.user_inputs:
            val = self.nodes[name].meta.get("val")
            if not isinstance(val, torch.Tensor):
                raise UnsupportedError(f"input {name!r} has no tensor metadata")
            try:
                if shapes is not None and name in shapes:
                    shape = tuple(int(d) for d in shapes[name])
                else:
                    shape = tuple(int(d) for d in val.shape)
            except (TypeError, ValueError):
                raise UnsupportedError(f"input {name!r} has a dynamic shape; bind it with "
                                       f"--shape or --batch") from None
            if val.is_floating_point():
                out.append(torch.randn(shape, generator=gen).to(val.dtype))
            elif val.dtype is torch.bool:
                out.append(torch.ones(shape, dtype=torch.bool))
            else:
                high = self._index_bound(name)
                out.append(torch.randint(0, high, shape, generator=gen, dtype=val.dtype)
                           if high else torch.ones(shape, dtype=val.dtype))
        return out

    def _index_bound(self, name: str) -> int:
        """Below the size of every table the input indexes (through views and casts of
        it); 0 when it indexes none (the input is then all ones: an attention mask that
        hides nothing; random 0/1 masks hide whole rows, where exporters disagree)."""
        bound = 1 << 30
        todo, seen = [self.nodes[name]], set()
        while todo:
            value = todo.pop()
            if value.name in seen:
                continue
            seen.add(value.name)
            for user in value.users:
                t = str(user.target)
                if any(v in t for v in _FX_VIEWS) and user.args and user.args[0] is value:
                    todo.append(user)
                elif "embedding" in t and len(user.args) >= 2 and user.args[1] is value:
                    bound = min(bound, int(self._val_shape(user.args[0])[0]))
                elif ("index_select" in t or "gather" in t) and len(user.args) >= 3 \
                        and user.args[2] is value:
                    data, dim = user.args[0], int(user.args[1])
                    bound = min(bound, int(self._val_shape(data)[dim]))
        return bound if bound < (1 << 30) else 0

    def _val_shape(self, node: Any) -> tuple[int, ...]:
        if node.name in self.params:
            return tuple(self.params[node.name].shape)
        return tuple(int(d) for d in node.meta["val"].shape)

    def run_node(self, node: Any, env: Mapping[str, Any]) -> Any:
        """Run one fx node with argument values from ``env`` (node name -> value)."""
        from torch.fx.node import map_arg

        args, kwargs = map_arg((node.args, node.kwargs), lambda n: env[n.name])
        return node.target(*args, **kwargs)

    def reference(self, inputs: Sequence[torch.Tensor] | None = None) -> dict[str, Any]:
        """Run the whole program once; return, per node, the integer/boolean values and the
        specs (shape, strides, dtype) of floating-point values."""
        if inputs is None:
            inputs = self.example_inputs()
        if len(inputs) != len(self.user_inputs):
            raise UnsupportedError(f"the program takes {len(self.user_inputs)} inputs, got "
                                   f"{len(inputs)}")
        env: dict[str, Any] = dict(self.params)
        captured: dict[str, Any] = {}
        for name, value in zip(self.user_inputs, inputs, strict=True):
            env[name] = value
            captured[name] = _summarize_torch(value)
        nodes = list(self.ep.graph.nodes)
        last = last_use([[i.name for i in n.all_input_nodes] for n in nodes])
        with torch.inference_mode():
            for at, n in enumerate(nodes):
                if n.op == "placeholder":
                    continue
                if n.op == "output":
                    break
                if n.op != "call_function":
                    raise UnsupportedError(f"fx node {n.name!r} is a {n.op}, which the runner "
                                           f"does not execute")
                out = self.run_node(n, env)
                env[n.name] = out
                captured[n.name] = _summarize_torch(out)
                for i in n.all_input_nodes:
                    if last.get(i.name) == at and i.name not in self.params:
                        env.pop(i.name, None)
        return captured

    def _value(self, node: Any, captured: Mapping[str, Any], gen: torch.Generator,
               positive: bool) -> Any:
        if node.name in self.params:
            return self.params[node.name]
        if node.name not in captured:
            raise UnsupportedError(f"no reference value for fx node {node.name!r}")
        return _materialize_torch(captured[node.name], gen, positive)

    def runner(self, name: str, captured: Mapping[str, Any], dtype: DType,
               threads: int) -> OpRunner:
        """A runner of fx node ``name`` at precision ``dtype`` (fp32 via torch; int8 via
        onnxruntime dynamic quantization)."""
        from torch.fx.node import map_arg

        node = self.node(name)
        if node.op != "call_function":
            raise UnsupportedError(f"fx node {name!r} is a {node.op}, not an op")
        target_name = _fx_target_name(node)
        if dtype is DType.INT8:
            return self._int8_runner(node, captured, threads)
        if dtype is not DType.FP32:
            raise UnsupportedError(f"fx node {name!r} ({target_name}) has no {dtype.value} "
                                   f"runner (torch runs the program's own fp32)")
        gen = torch.Generator().manual_seed(_SEED)
        positive = target_name.split(".")[0] in _POSITIVE_FX
        args, kwargs = map_arg((node.args, node.kwargs),
                               lambda n: self._value(n, captured, gen, positive))
        fn = node.target

        def run() -> Any:
            with torch.inference_mode():
                return fn(*args, **kwargs)

        return OpRunner(run, "torch", f"{target_name} (fx node {name})", (args, kwargs))

    def _int8_runner(self, node: Any, captured: Mapping[str, Any], threads: int) -> OpRunner:
        import onnx
        from onnx import TensorProto, helper, numpy_helper

        tname = _fx_target_name(node)
        base = tname.split(".")[0]
        args = list(node.args)
        if base not in ("linear", "matmul", "mm", "bmm", "conv2d", "conv1d") or len(args) < 2:
            raise UnsupportedError(f"fx node {node.name!r} ({tname}) has no int8 kernel")
        x_node, w_node = args[0], args[1]
        if getattr(w_node, "name", None) not in self.params:
            raise UnsupportedError(f"fx node {node.name!r} ({tname}): int8 needs a weight "
                                   f"parameter, its second input is an activation")
        spec = captured.get(x_node.name)
        if not isinstance(spec, TensorSpec):
            raise UnsupportedError(f"fx node {node.name!r}: no float input spec")
        w = self.params[w_node.name].detach().float().numpy()
        inits = []
        nodes = []
        x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(spec.shape))
        if base == "linear":
            inits.append(numpy_helper.from_array(np.ascontiguousarray(w.T), "w"))
            nodes.append(helper.make_node("MatMul", ["x", "w"], ["mm"]))
            bias = args[2] if len(args) > 2 else node.kwargs.get("bias")
            if bias is not None and getattr(bias, "name", None) in self.params:
                inits.append(numpy_helper.from_array(
                    self.params[bias.name].detach().float().numpy(), "b"))
                nodes.append(helper.make_node("Add", ["mm", "b"], ["y"]))
            else:
                nodes[-1] = helper.make_node("MatMul", ["x", "w"], ["y"])
        elif base in ("matmul", "mm", "bmm"):
            inits.append(numpy_helper.from_array(np.ascontiguousarray(w), "w"))
            nodes.append(helper.make_node("MatMul", ["x", "w"], ["y"]))
        else:
            stride, padding, dilation, groups = _conv_args(node)
            if isinstance(padding, str):
                raise UnsupportedError(f"fx node {node.name!r}: string padding {padding!r}")
            inits.append(numpy_helper.from_array(np.ascontiguousarray(w), "w"))
            ins = ["x", "w"]
            bias = args[2] if len(args) > 2 else None
            if bias is not None and getattr(bias, "name", None) in self.params:
                inits.append(numpy_helper.from_array(
                    self.params[bias.name].detach().float().numpy(), "b"))
                ins.append("b")
            nd = w.ndim - 2
            nodes.append(helper.make_node("Conv", ins, ["y"], strides=_tup(stride, nd),
                                          pads=list(_tup(padding, nd)) * 2,
                                          dilations=_tup(dilation, nd), group=int(groups)))
        graph = helper.make_graph(nodes, "op", [x_info], [onnx.ValueInfoProto(name="y")], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        q = _quantize_onnx(model, f"fx node {node.name!r} ({tname})")
        sess = _ort_session(q, threads)
        rng = np.random.default_rng(_SEED)
        feeds = {"x": _rand_numpy(spec.shape, np.dtype(np.float32), rng, False)}

        def run() -> Any:
            return sess.run(None, feeds)

        return OpRunner(run, "onnxruntime", f"{tname} int8 (fx node {node.name})",
                        (sess, feeds))


def _tup(v: Any, n: int) -> list[int]:
    if isinstance(v, int):
        return [v] * n
    vals = [int(x) for x in v]
    return vals * n if len(vals) == 1 else vals


def _conv_args(node: Any) -> tuple[Any, Any, Any, Any]:
    a = list(node.args) + [None] * 7
    kw = node.kwargs
    stride = a[3] if a[3] is not None else kw.get("stride", 1)
    padding = a[4] if a[4] is not None else kw.get("padding", 0)
    dilation = a[5] if a[5] is not None else kw.get("dilation", 1)
    groups = a[6] if a[6] is not None else kw.get("groups", 1)
    return stride, padding, dilation, groups


def _fx_target_name(node: Any) -> str:
    t = node.target
    if t is operator.getitem:
        return "getitem"
    name = getattr(t, "__name__", None) or str(t)
    return str(name)


def _materialize_torch(v: Any, gen: torch.Generator, positive: bool) -> Any:
    if isinstance(v, TensorSpec):
        return _rand_torch(v, gen, positive)
    if isinstance(v, list):
        return [_materialize_torch(x, gen, positive) for x in v]
    return v


class OnnxProgram:
    """An ONNX model seen node by node: a reference run and single-node runners."""

    def __init__(self, model: Any) -> None:
        self.model = model
        g = model.graph
        self.initializers = {t.name: t for t in g.initializer}
        self.constant_nodes: dict[str, Any] = {}
        self.by_output: dict[str, Any] = {}
        self.by_name: dict[str, Any] = {}
        for node in g.node:
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                for o in node.output:
                    self.constant_nodes[o] = node
            for o in node.output:
                if o:
                    self.by_output[o] = node
            if node.name:
                self.by_name.setdefault(node.name, node)
        self.inputs = [vi for vi in g.input if vi.name not in self.initializers]

    def node_for(self, op: Op) -> Any:
        """The ONNX node of IR ``op`` (by first output, then by node name)."""
        for o in op.outputs:
            if o in self.by_output:
                return self.by_output[o]
        if op.provenance.source in self.by_name:
            return self.by_name[op.provenance.source]
        raise UnsupportedError(f"no ONNX node for {op.where()}")

    def example_inputs(self, graph: Graph | None, seed: int = _SEED) -> dict[str, Any]:
        """Valid feeds: shapes from ``graph`` (bound) or the model; integer inputs below the
        size of every table a Gather indexes with them."""
        from onnx import helper

        rng = np.random.default_rng(seed)
        feeds: dict[str, Any] = {}
        for vi in self.inputs:
            tt = vi.type.tensor_type
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
            if graph is not None and graph.has_tensor(vi.name):
                shape = graph.tensor(vi.name).concrete_shape
            else:
                dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim]
                if any(d < 0 for d in dims):
                    raise UnsupportedError(f"input {vi.name!r} has a symbolic shape; bind it "
                                           f"with --shape or --batch")
                shape = tuple(dims)
            if dtype.kind == "f":
                feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
            elif dtype.kind == "b":
                feeds[vi.name] = np.ones(shape, dtype=dtype)
            else:
                high = self._index_bound(vi.name)
                feeds[vi.name] = (rng.integers(0, high, size=shape, dtype=dtype) if high
                                  else np.ones(shape, dtype=dtype))
        return feeds

    def _index_bound(self, name: str) -> int:
        """Below the size of every table a Gather indexes with the input (through views
        and casts of it); 0 when it indexes none (the input is then all ones, see
        ``FxProgram._index_bound``)."""
        bound = 1 << 30
        todo, seen = [name], set()
        while todo:
            value = todo.pop()
            if value in seen:
                continue
            seen.add(value)
            for node in self.model.graph.node:
                if not node.input or value not in node.input:
                    continue
                if node.op_type in _ONNX_VIEWS and node.input[0] == value:
                    todo.extend(o for o in node.output if o)
                elif node.op_type == "Gather" and len(node.input) >= 2 and \
                        node.input[1] == value:
                    axis = next((int(a.i) for a in node.attribute if a.name == "axis"), 0)
                    dims = self._dims(node.input[0])
                    if dims is not None and -len(dims) <= axis < len(dims) and dims[axis] > 0:
                        bound = min(bound, dims[axis])
        return bound if bound < (1 << 30) else 0

    def _dims(self, name: str) -> list[int] | None:
        """The concrete dims of a value: an initializer, a Constant, or its value_info."""
        from onnx import numpy_helper

        if name in self.initializers:
            return [int(d) for d in self.initializers[name].dims]
        if name in self.constant_nodes:
            return list(numpy_helper.to_array(self.constant_nodes[name].attribute[0].t).shape)
        for vi in self.model.graph.value_info:
            if vi.name == name and vi.type.tensor_type.HasField("shape"):
                dims = vi.type.tensor_type.shape.dim
                if all(d.HasField("dim_value") for d in dims):
                    return [int(d.dim_value) for d in dims]
        return None

    def reference(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        """Run the whole model once with every node output fetched; keep integer/boolean
        values and the (shape, dtype) of floating-point ones."""
        sess = _ort_session(every_value_an_output(self.model), 1)
        names = [o.name for o in sess.get_outputs()]
        values = sess.run(names, dict(feeds))
        captured: dict[str, Any] = {}
        for name, v in [*feeds.items(), *zip(names, values, strict=True)]:
            arr = np.asarray(v)
            if arr.dtype.kind in "fc":
                captured[name] = TensorSpec(tuple(arr.shape), (), str(arr.dtype))
            else:
                captured[name] = arr.copy()
        return captured

    def single_node_model(self, node: Any, captured: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        """A model of just ``node`` and the feeds to run it (float inputs random)."""
        import onnx
        from onnx import helper

        if node.op_type in _UNSUPPORTED_ONNX:
            raise UnsupportedError(f"ONNX node {node.name!r} ({node.op_type}) has a subgraph; "
                                   f"it is not run alone")
        rng = np.random.default_rng(_SEED)
        positive = node.op_type in _POSITIVE_ONNX
        nodes: list[Any] = []
        inits: list[Any] = []
        inputs: list[Any] = []
        feeds: dict[str, Any] = {}
        seen: set[str] = set()
        for i, name in enumerate(node.input):
            if not name or name in seen:
                continue
            seen.add(name)
            if name in self.initializers:
                inits.append(self.initializers[name])
            elif name in self.constant_nodes:
                nodes.append(self.constant_nodes[name])
            else:
                if name not in captured:
                    raise UnsupportedError(f"no reference value for ONNX value {name!r}")
                v = captured[name]
                if isinstance(v, TensorSpec):
                    dtype = np.dtype(v.dtype)
                    arr = _rand_numpy(v.shape, dtype, rng, positive and i == 0)
                else:
                    arr = v
                feeds[name] = arr
                inputs.append(helper.make_tensor_value_info(
                    name, helper.np_dtype_to_tensor_dtype(arr.dtype), list(arr.shape)))
        if not inputs:
            # an all-constant node would be folded away: feed its first input at run time
            first = next((n for n in node.input if n in self.initializers), None)
            if first is not None:
                from onnx import numpy_helper

                inits = [t for t in inits if t.name != first]
                arr = numpy_helper.to_array(self.initializers[first])
                feeds[first] = arr
                inputs.append(helper.make_tensor_value_info(
                    first, helper.np_dtype_to_tensor_dtype(arr.dtype), list(arr.shape)))
        nodes.append(node)
        outputs = [onnx.ValueInfoProto(name=o) for o in node.output if o]
        graph = helper.make_graph(nodes, "op", inputs, outputs, inits)
        model = helper.make_model(graph, opset_imports=list(self.model.opset_import))
        model.ir_version = self.model.ir_version
        model.functions.extend(self.model.functions)
        return model, feeds

    def runner(self, op: Op, captured: Mapping[str, Any], dtype: DType,
               threads: int) -> OpRunner:
        """A runner of the ONNX node of ``op`` at ``dtype`` (fp32 as in the model; int8 by
        dynamic quantization of a node whose weight is an initializer)."""
        node = self.node_for(op)
        model, feeds = self.single_node_model(node, captured)
        what = f"ONNX node {node.name or node.output[0]!r} ({node.op_type})"
        if dtype is DType.INT8:
            if op.kind not in INT8_KINDS or len(node.input) < 2 or \
                    node.input[1] not in self.initializers:
                raise UnsupportedError(f"{what} has no int8 kernel (needs a matmul, gemm or "
                                       f"conv whose weight is an initializer)")
            model = _quantize_onnx(model, what)
        elif dtype is not DType.FP32:
            raise UnsupportedError(f"{what} has no {dtype.value} runner")
        with _quiet():
            sess = _ort_session(model, threads)
        names = [o.name for o in sess.get_outputs()]

        def run() -> Any:
            return sess.run(names, feeds)

        return OpRunner(run, "onnxruntime", what + (" int8" if dtype is DType.INT8 else ""),
                        (sess, feeds))


def program_of(source: ModelSource) -> FxProgram | OnnxProgram:
    """The node-level view of ``source``."""
    if source.format is SourceFormat.TORCH_EXPORT:
        return FxProgram(source.exported_program)
    return OnnxProgram(source.onnx_model)


def make_op_runner(source: ModelSource, program: FxProgram | OnnxProgram,
                   captured: Mapping[str, Any], op: Op, dtype: DType, *,
                   threads: int) -> OpRunner:
    """A runner of IR ``op`` (mapped to its source node) at precision ``dtype``.

    ``captured`` is ``program.reference(...)``. ``UnsupportedError`` when the op has no
    runner at that precision.
    """
    if dtype is DType.INT8 and op.kind not in INT8_KINDS:
        raise UnsupportedError(f"{op.where()} ({op.kind.value}) has no int8 kernel here "
                               f"(int8 kinds: {', '.join(sorted(k.value for k in INT8_KINDS))})")
    if isinstance(program, FxProgram):
        return program.runner(op.provenance.source or op.name, captured, dtype, threads)
    return program.runner(op, captured, dtype, threads)


# ---- conversion kernels -------------------------------------------------------------------------


def quantize_int8(x: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Symmetric per-tensor int8: ``q = round(x / scale)`` with ``scale = max|x| / 127``."""
    amax = float(x.detach().abs().max()) if x.numel() else 0.0
    scale = amax / 127.0 if amax > 0 and math.isfinite(amax) else 1.0
    q = torch.mul(x, 1.0 / scale).round_().clamp_(-127.0, 127.0).to(torch.int8)
    return q, scale


def dequantize_int8(q: torch.Tensor, scale: float) -> torch.Tensor:
    """``q * scale`` in fp32."""
    return q.to(torch.float32).mul_(scale)


def convert_layout(x: torch.Tensor, src: Layout, dst: Layout) -> torch.Tensor:
    """Reorder a 4-D tensor between NCHW and NHWC (a contiguous copy); ROW_MAJOR is the
    identity on either side."""
    if src is dst or Layout.ROW_MAJOR in (src, dst):
        return x.contiguous()
    if x.dim() != 4:
        raise UnsupportedError(f"layout change {src.value}->{dst.value} needs a 4-D tensor, "
                               f"got {x.dim()}-D")
    perm = (0, 2, 3, 1) if (src, dst) == (Layout.NCHW, Layout.NHWC) else (0, 3, 1, 2)
    return x.permute(*perm).contiguous()


def convert_tensor(x: torch.Tensor, src: Representation, dst: Representation,
                   scale: float | None = None) -> tuple[torch.Tensor, float | None]:
    """Convert ``x`` held as ``src`` into ``dst``: layout first, then dtype (int8 through
    ``quantize_int8`` / ``dequantize_int8``; ``scale`` is needed when ``src`` is int8).
    Returns the tensor and the int8 scale (or None)."""
    y = convert_layout(x, src.layout, dst.layout) if src.layout is not dst.layout else x
    if src.dtype is dst.dtype:
        return y, scale
    if dst.dtype is DType.INT8 and src.dtype.is_float:
        return quantize_int8(y)
    if src.dtype is DType.INT8 and dst.dtype.is_float:
        if scale is None:
            raise UnsupportedError("dequantizing int8 needs its scale")
        return dequantize_int8(y, scale).to(torch_dtype(dst.dtype)), None
    return y.to(torch_dtype(dst.dtype)), scale


def make_conversion_runner(shape: Sequence[int], src: Representation,
                           dst: Representation) -> OpRunner:
    """A runner of the conversion kernel ``src -> dst`` on a tensor of ``shape``."""
    gen = torch.Generator().manual_seed(_SEED)
    shp = tuple(int(d) for d in shape)
    base = torch.randn(shp, generator=gen)
    scale: float | None = None
    if src.dtype is DType.INT8:
        x, scale = quantize_int8(base)
    else:
        x = base.to(torch_dtype(src.dtype))
    if dst.layout is not src.layout and Layout.ROW_MAJOR not in (src.layout, dst.layout) \
            and len(shp) != 4:
        raise UnsupportedError(f"layout change {src} -> {dst} needs a 4-D tensor")
    torch_dtype(dst.dtype)  # raise early for dtypes torch cannot hold

    def run() -> Any:
        return convert_tensor(x, src, dst, scale)

    return OpRunner(run, "torch", f"convert {src} -> {dst} {list(shp)}", (x,))


def request_inputs(source: ModelSource, graph: Graph, n: int, seed: int
                    ) -> list[list[np.ndarray[Any, Any]]]:
    """``n`` requests' inputs (arrays in graph-input order), seeded ``seed``, ``seed + 1``..."""
    out: list[list[np.ndarray[Any, Any]]] = []
    if source.format is SourceFormat.TORCH_EXPORT:
        prog = FxProgram(source.exported_program)
        shapes = {t: graph.tensor(t).concrete_shape for t in graph.inputs}
        if list(prog.user_inputs) != list(graph.inputs):
            shapes = {}
        for k in range(n):
            xs = prog.example_inputs(seed + k, shapes=shapes or None)
            out.append([x.detach().numpy().copy() for x in xs])
    else:
        oprog = OnnxProgram(source.onnx_model)
        for k in range(n):
            feeds = oprog.example_inputs(graph, seed + k)
            out.append([np.asarray(feeds[t]) for t in graph.inputs])
    return out
