"""One entry point for every MODEL argument: ``zoo:NAME?opts``, ``.onnx``, ``.pt2``, ``.json``.

>>> g = load_model("zoo:mlp?layers=1&hidden=8", batch=2)
>>> g.tensor(g.inputs[0]).shape
(2, 64)
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from placewise.errors import InputError, ModelFormatError
from placewise.graph.ir import Dim, Graph, bind_shapes, eval_dim

__all__ = ["bind_input_shapes", "load_model"]

_EXTENSIONS = (".onnx", ".pt2", ".json")


def load_model(ref: str | os.PathLike[str], *, shapes: Mapping[str, Sequence[int]] | None = None,
               batch: int | None = None,
               values: Mapping[str, Sequence[float]] | None = None) -> Graph:
    """Load the model named by ``ref`` into a ``Graph``.

    ``ref`` is ``zoo:NAME?opt=value&...`` (a built-in model; ``batch`` overrides its batch
    option), a ``.onnx`` file, a ``.pt2`` file saved by ``torch.export.save``, or a ``.json``
    abstract task graph (which takes neither ``shapes`` nor ``batch``). ``shapes`` (input
    name -> dims) and ``batch`` bind input dims:
    symbolic dims take the requested sizes; a request that contradicts a concrete dim raises
    ``InputError``. ``values`` (input name -> numbers) gives ``.onnx`` inputs a value
    (``graph.onnx_control``); other models refuse it. Any file that cannot be read raises
    ``ModelFormatError``.
    """
    text = os.fspath(ref).strip()
    if values and not text.lower().endswith(".onnx"):
        raise InputError("input values apply to .onnx models only", file=text,
                         place="--value")
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int)
                              or batch <= 0):
        raise InputError(f"batch must be a positive integer, got {batch!r}", place="--batch")
    if text.startswith("workload:"):
        from placewise.graph.workload import load_workload

        if values:
            raise InputError("--value applies to one model, not to a workload", file=text[:80],
                             place="--value")
        return load_workload(text, shapes=shapes, batch=batch)[0]
    if text.startswith("zoo:"):
        # each format's reader is imported when a file of that format is read: the four
        # readers together add about 1.8 s of imports (python -X importtime)
        from placewise.graph.zoo import load_zoo

        graph = load_zoo(text, batch=batch)
        if not shapes:
            return graph
        try:
            return bind_input_shapes(graph, shapes, None, file=text)
        except InputError as e:
            raise InputError(f"{e.problem} (zoo models have fixed shapes: set them with "
                             f"options, e.g. zoo:NAME?batch=N)", file=e.file,
                             place=e.place) from None
    ext = os.path.splitext(text)[1].lower()
    if ext not in _EXTENSIONS:
        if not os.path.exists(text):
            raise ModelFormatError("no such file (and not a zoo:NAME reference)", file=text)
        raise ModelFormatError(
            f"unknown model file type {ext or '(no extension)'!r}: expected .onnx, .pt2, "
            f".json or zoo:NAME", file=text)
    if not os.path.exists(text):
        raise ModelFormatError("no such file", file=text)
    if ext == ".onnx":
        from placewise.graph.onnx_import import load_onnx

        return load_onnx(text, shapes=shapes, batch=batch, values=values)
    if ext == ".pt2":
        from placewise.graph.torch_import import load_pt2

        graph = load_pt2(text)
        if shapes or batch is not None:
            graph = bind_input_shapes(graph, shapes, batch, file=text)
        return graph
    from placewise.graph.taskgraph import load_taskgraph

    graph = load_taskgraph(text)
    if shapes or batch is not None:
        raise InputError("a task graph has fixed costs per task; --shape and --batch do not "
                         "apply to it", file=text, place="--batch" if batch else "--shape")
    return graph


def bind_input_shapes(graph: Graph, shapes: Mapping[str, Sequence[int]] | None,
                      batch: int | None, *, file: str | None = None) -> Graph:
    """Bind the graph's symbolic input dims to concrete sizes and propagate them.

    ``shapes`` gives full dims per input: each symbolic dim that is a plain name binds that
    symbol; a concrete dim must match. ``batch`` binds the first dim of every other input
    whose first dim is a plain symbol. Symbols are then evaluated everywhere (``bind_shapes``).
    Raises ``InputError`` for an unknown input, a rank mismatch, a conflict with a concrete
    dim, or a ``batch`` that no input can take.

    >>> from placewise.graph.ir import Tensor, Op, OpKind, Role
    >>> from placewise.units import DType
    >>> x = Tensor("x", ("s0", 4), DType.FP32, role=Role.INPUT)
    >>> y = Tensor("y", ("s0", 4), DType.FP32, role=Role.OUTPUT)
    >>> g = Graph.build("g", [x, y], [Op("r", OpKind.RELU, ("x",), ("y",))])
    >>> bind_input_shapes(g, None, 3).tensor("y").shape
    (3, 4)
    """
    env: dict[str, int] = {}
    requested = dict(shapes or {})

    def bind(symbol: Dim, value: int, place: str, index: int) -> None:
        if isinstance(symbol, int):
            if symbol != value:
                raise InputError(f"dimension {index} is {symbol} in the model but {value} "
                                 f"was requested", file=file, place=place)
            return
        if not symbol.isidentifier():
            return  # an expression: checked after evaluation below
        if env.get(symbol, value) != value:
            raise InputError(f"symbol {symbol!r} bound to both {env[symbol]} and {value}",
                             file=file, place=place)
        env[symbol] = value

    for name, dims in requested.items():
        if name not in graph.inputs:
            known = ", ".join(repr(n) for n in graph.inputs) or "none"
            raise InputError(f"the model has no input {name!r} (inputs: {known})", file=file,
                             place="--shape")
        t = graph.tensor(name)
        want = tuple(int(d) for d in dims)
        if len(want) != len(t.shape):
            raise InputError(f"shape {list(want)} has rank {len(want)} but the input has rank "
                             f"{len(t.shape)} ({t.shape_str()})", file=file,
                             place=f"input {name!r}")
        for i, (have, w) in enumerate(zip(t.shape, want, strict=True)):
            if w < 0:
                raise InputError(f"negative dimension in {list(want)}", file=file,
                                 place=f"input {name!r}")
            bind(have, w, f"input {name!r}", i)
    if batch is not None:
        bound_any = False
        fixed: list[str] = []
        for name in graph.inputs:
            if name in requested:
                continue
            t = graph.tensor(name)
            if not t.shape:
                continue
            d0 = t.shape[0]
            if isinstance(d0, str) and d0.isidentifier():
                bind(d0, batch, f"input {name!r}", 0)
                bound_any = True
            elif isinstance(d0, int) and d0 != batch:
                fixed.append(f"{name!r} {t.shape_str()}")
        if not bound_any and fixed:
            raise InputError(f"batch {batch} cannot be applied: the model's inputs have a "
                             f"fixed leading dim ({', '.join(fixed)}); export it with a "
                             f"dynamic batch", file=file, place="--batch")
    bound = bind_shapes(graph, env, require_concrete=False)
    for name, dims in requested.items():
        got = tuple(eval_dim(d, env) for d in bound.tensor(name).shape)
        if got != tuple(int(d) for d in dims):
            raise InputError(f"requested shape {list(dims)} but the input's dims evaluate to "
                             f"{[str(d) for d in got]}", file=file, place=f"input {name!r}")
    return bound
