"""A workload of several models sharing one machine, planned as one graph.

``placewise plan --model det=a.onnx --model cls=zoo:mlp`` plans every model of a workload
in one search over the shared machine: the models become one graph whose connected
components are the models (``load_workload``), so that the search, the evaluator (which
schedules their engines side by side, with the contention the machine spec declares), the
plan, ``export``, ``validate`` and ``serve --real`` need no second path. Each model keeps
its own identity:

- **names**: every tensor of model ``m`` is named ``m/...`` and every op ``m/...``
  (ONNX's ``onnx.compose.add_prefix``; an unnamed node is named ``m/TYPE_i``), so a
  tensor, op, region or partition says whose it is (``member_of``);
- **the reference**: the workload is one MODEL reference, ``workload:`` followed by the
  JSON list of ``[name, ref]`` pairs (``workload_ref``), recorded in the plan like any
  model's, which ``graph.load.load_model`` and the runtime's ``load_source`` read back;
- **the graph** records its members (``ImportRecord.members``).

A workload is merged at the ONNX level: ``.onnx`` members as they are, ``zoo:`` members and
``.pt2`` programs exported to ONNX first (``torch.onnx.export``, opset 18), every member
brought to the newest default-domain opset among them (``onnx.version_converter``), then
bound and prepared as one model (``graph.onnx_shapes.prepare_onnx``). ``--batch`` binds the
batch of every member; ``--shape m/INPUT=DIMS`` one input of one member. A symbolic dim
name is shared by every member that uses it. A task-graph ``.json`` has no ONNX and cannot
be a member.

>>> ref = workload_ref([Member("det", "a.onnx"), Member("cls", "zoo:mlp?layers=1")])
>>> ref
'workload:[["det","a.onnx"],["cls","zoo:mlp?layers=1"]]'
>>> [m.name for m in parse_workload_ref(ref)]
['det', 'cls']
>>> parse_member("zoo:mlp?layers=2"), parse_member("enc=models/enc.onnx").name
(Member(name='mlp', ref='zoo:mlp?layers=2'), 'enc')
>>> member_of("det/conv1_out"), member_of("x")
('det', None)
"""

from __future__ import annotations

import functools
import json
import os
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from placewise.errors import InputError, ModelFormatError
from placewise.units import parse_options

if TYPE_CHECKING:
    from onnx import ModelProto

    from placewise.graph.ir import Graph

__all__ = ["PREFIX", "SEP", "Member", "Stream", "is_workload_ref", "load_workload", "member_of",
           "members_by_name", "parse_member", "parse_stream", "parse_workload_ref", "split_names",
           "workload_ref"]

#: a workload reference starts with this
PREFIX = "workload:"
#: between a member's name and the name of its tensor or op
SEP = "/"

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")


@dataclass(frozen=True, slots=True)
class Member:
    """One model of a workload: its ``name`` (the prefix of its tensors and ops) and its
    MODEL reference ``ref``."""

    name: str
    ref: str


def parse_member(text: str) -> Member:
    """``NAME=REF`` or ``REF`` (named after the file's stem or the zoo model; characters
    other than letters, digits, ``_`` and ``-`` become ``_``)."""
    raw = text.strip()
    name, sep, ref = raw.partition("=")
    if sep and _NAME.match(name) and not name.startswith("zoo"):
        return Member(name, ref.strip())
    ref = raw
    base = ref[4:].split("?", 1)[0] if ref.startswith("zoo:") else Path(ref).stem
    name = re.sub(r"[^A-Za-z0-9_\-]", "_", base) or "model"
    if not name[0].isalpha() and name[0] != "_":
        name = "m_" + name
    return Member(name, ref)


@dataclass(frozen=True, slots=True)
class Stream:
    """A member's request stream: ``rate_per_s`` (requests per second; None: not given),
    ``slo_p99_s`` (its p99 latency objective; None: none) and ``priority`` (1 = highest,
    Triton's convention, as ``serve --class``)."""

    rate_per_s: float | None = None
    slo_p99_s: float | None = None
    priority: int = 1


def parse_stream(text: str) -> tuple[str, Stream]:
    """``NAME:rate=R,slo_p99=D,priority=P`` (every option optional).

    >>> parse_stream("det:rate=30,slo_p99=20ms,priority=1")
    ('det', Stream(rate_per_s=30.0, slo_p99_s=0.02, priority=1))
    """
    name, _, args = text.strip().partition(":")
    if not _NAME.match(name):
        raise InputError(f"{text!r}: a stream starts with its model's name "
                         f"(NAME:rate=30,slo_p99=20ms,priority=1)", place="--stream")
    opts = parse_options(args, f"--stream {name}",
                         {"rate": "positive", "slo_p99": "seconds", "priority": "priority"})
    rate = float(opts["rate"]) if "rate" in opts else None
    slo = float(opts["slo_p99"]) if "slo_p99" in opts else None
    priority = int(opts.get("priority", 1))
    return name, Stream(rate, slo, priority)


def _check(members: Sequence[Member], place: str) -> None:
    if len(members) < 2:
        raise InputError(f"a workload needs two models or more, got {len(members)}",
                         place=place)
    seen: set[str] = set()
    for m in members:
        if not _NAME.match(m.name):
            raise InputError(f"model name {m.name!r} must be letters, digits, '_' and '-', "
                             f"starting with a letter", place=place)
        if m.name in seen:
            raise InputError(f"two models are named {m.name!r}: name them (NAME=MODEL)",
                             place=place)
        if not m.ref or m.ref.startswith(PREFIX):
            raise InputError(f"model {m.name!r} has no model reference", place=place)
        seen.add(m.name)


def workload_ref(members: Sequence[Member]) -> str:
    """The MODEL reference of a workload of ``members`` (checked: two or more, distinct
    names)."""
    _check(members, "--model")
    return PREFIX + json.dumps([[m.name, m.ref] for m in members], separators=(",", ":"))


def is_workload_ref(ref: str | os.PathLike[str]) -> bool:
    return os.fspath(ref).strip().startswith(PREFIX)


def parse_workload_ref(ref: str) -> tuple[Member, ...]:
    """The members a ``workload_ref`` names; ``InputError`` for anything else."""
    text = ref.strip()
    try:
        data = json.loads(text[len(PREFIX):])
    except ValueError as exc:
        raise InputError(f"not a workload reference: {exc}", file=text[:80],
                         place="model") from None
    if not isinstance(data, list) or not all(
            isinstance(x, list) and len(x) == 2 and all(isinstance(y, str) for y in x)
            for x in data):
        raise InputError("a workload reference is a list of [name, model] pairs",
                         file=text[:80], place="model")
    members = tuple(Member(n, r) for n, r in data)
    _check(members, "model")
    return members


def member_of(name: str) -> str | None:
    """The model a tensor or op of a workload graph belongs to (None: not a member's)."""
    head, sep, _ = name.partition(SEP)
    return head if sep and _NAME.match(head) else None


def split_names(names: Iterable[str], members: Sequence[str]) -> dict[str, list[str]]:
    """``names`` grouped by member (every member listed, in order; a name of none is
    left out)."""
    out: dict[str, list[str]] = {m: [] for m in members}
    for n in names:
        m = member_of(n)
        if m in out:
            out[m].append(n)
    return out


def members_by_name(graph: Graph) -> dict[str, str]:
    """Op name -> member for a workload graph (by the op's first named output: an unnamed
    source node keeps the importer's name); {} for one model."""
    if not graph.record.members:
        return {}
    out: dict[str, str] = {}
    for op in graph.ops:
        for t in (*op.outputs, *op.inputs):
            m = member_of(t) if t else None
            if m is not None:
                out[op.name] = m
                break
    return out


# ---- loading ------------------------------------------------------------------------------

def load_workload(ref: str, *, shapes: Mapping[str, Sequence[int]] | None = None,
                  batch: int | None = None) -> tuple[Graph, ModelProto]:
    """The workload ``ref`` as one ``Graph`` (its record naming the members) and the
    prepared ONNX model its ops are the nodes of (module docstring)."""
    # the ONNX readers load only when a workload is read (graph.load's rule for every
    # format: the readers together add about 1.8 s of imports)
    from placewise.graph.onnx_compat import check_placeable_io
    from placewise.graph.onnx_import import graph_of_prepared
    from placewise.graph.onnx_shapes import prepare_onnx

    members = parse_workload_ref(ref)
    merged = merge_models([(m.name, _member_model(m)) for m in members], ref)
    check_placeable_io(merged, ref)
    model, info = prepare_onnx(merged, ref, shapes=shapes, batch=batch)
    graph = graph_of_prepared(model, ref, info)
    record = replace(graph.record, members=tuple(m.name for m in members))
    return graph.with_record(record), model


def merge_models(models: Sequence[tuple[str, ModelProto]], file: str) -> ModelProto:
    """One ONNX model holding ``models`` side by side, each one's names prefixed with its
    name and ``SEP``, at the newest default-domain opset among them."""
    import onnx  # as load_workload: only when a workload is read
    from onnx import compose, helper

    from placewise.graph.onnx_compat import default_opset, upgrade_opset

    versions = [default_opset(m, f"{file} ({name})") or 0 for name, m in models]
    target = max(versions)
    graph = onnx.GraphProto(name="workload")
    domains: dict[str, int] = {}
    ir_version = 0
    for name, model in models:
        if (default_opset(model, name) or target) < target:
            model, _ = upgrade_opset(model, f"{file} ({name})", to=target)
        if model.functions:
            raise ModelFormatError(f"model {name!r} defines local functions, which a "
                                   f"workload cannot merge yet", file=file, place=name)
        for i, node in enumerate(model.graph.node):
            if not node.name:
                node.name = f"{node.op_type}_{i}"
        one = compose.add_prefix(model, f"{name}{SEP}")
        g = one.graph
        graph.node.extend(g.node)
        graph.input.extend(g.input)
        graph.output.extend(g.output)
        graph.initializer.extend(g.initializer)
        graph.sparse_initializer.extend(g.sparse_initializer)
        graph.value_info.extend(g.value_info)
        for imp in one.opset_import:
            key = "" if imp.domain == "ai.onnx" else imp.domain
            domains[key] = max(domains.get(key, 0), int(imp.version))
        ir_version = max(ir_version, int(one.ir_version))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v)
                                                   for d, v in sorted(domains.items())],
                             ir_version=ir_version, producer_name="placewise workload")


def _member_model(m: Member) -> ModelProto:
    """A member as an ONNX model (a copy: the caller may change it)."""
    import onnx  # as load_workload: only when a workload is read

    from placewise.graph.onnx_compat import free_anonymous_dims
    from placewise.graph.onnx_import import read_onnx_as_is

    text = m.ref.strip()
    ext = os.path.splitext(text)[1].lower()
    if text.startswith("zoo:"):
        model = onnx.load_from_string(_zoo_onnx(text))
    elif ext == ".onnx":
        if not os.path.exists(text):
            raise ModelFormatError("no such file", file=text, place=f"model {m.name!r}")
        model = read_onnx_as_is(text)
    elif ext == ".pt2":
        model = onnx.load_from_string(_pt2_onnx(text))
    else:
        raise InputError(f"model {m.name!r}: a workload's models are .onnx, .pt2 or zoo:NAME "
                         f"(a task graph has no ONNX to run)", file=text, place="--model")
    free_anonymous_dims(model)
    return model


@functools.lru_cache(maxsize=16)
def _zoo_onnx(ref: str) -> bytes:
    """A zoo model exported to ONNX (dynamic batch), as bytes; once per process."""
    # torch (graph.zoo imports it) loads only when a zoo member is exported
    from placewise.graph.zoo import export_onnx, parse_zoo_ref

    name, options = parse_zoo_ref(ref)
    options.pop("batch", None)  # the workload's --batch binds it
    with tempfile.TemporaryDirectory(prefix="placewise-workload-") as tmp:
        path = Path(tmp) / "m.onnx"
        export_onnx(name, options, path, dynamic_batch=True)
        return path.read_bytes()


@functools.lru_cache(maxsize=16)
def _pt2_onnx(path: str) -> bytes:
    """A saved ``torch.export`` program exported to ONNX, as bytes; once per process."""
    # torch loads only when a .pt2 member is exported
    import torch

    from placewise.graph.torch_import import read_pt2
    from placewise.io import quiet

    ep = read_pt2(path)  # checked entry by entry, weights-only
    with tempfile.TemporaryDirectory(prefix="placewise-workload-") as tmp:
        out = Path(tmp) / "m.onnx"
        with torch.no_grad(), quiet("torch.onnx", "torch.export", "onnxscript"):
            prog = torch.onnx.export(ep, dynamo=True, opset_version=18, external_data=False,
                                     verbose=False, optimize=True)
            if prog is None:  # pragma: no cover - only the legacy exporter returns None
                raise ModelFormatError("torch.onnx.export returned no program", file=path)
            prog.save(str(out), external_data=False)
        return out.read_bytes()


def workload_models(graph: Graph) -> dict[str, Any]:
    """Member -> {"inputs": [...], "outputs": [...]} of a workload graph."""
    members = graph.record.members
    ins = split_names(graph.inputs, members)
    outs = split_names(graph.outputs, members)
    return {m: {"inputs": ins[m], "outputs": outs[m]} for m in members}
