"""The plan file on disk: writing, reading and the published JSON Schema (``placewise.plan``
re-exports everything here; see its docstring for what a plan holds).

**Layout (schema version 2).** One JSON object: the plan's small parts as named records
(identity, request, machine, makespan, throughput, bounds, memory, search, precision), and
its bulk tables stored column by column (``placewise.plan_columns``): ``placement``,
``regions``, ``ops``, ``tensors``, ``crossings``, ``schedule.tasks`` and
``schedule.critical_path``, their strings interned once in ``strings``. A 10,000-op plan
is about 1.5 MB (it was 33 MB when every task was a JSON object).

**Old files.** A version-1 file (every record a JSON object) is read and converted; one
that no longer converts, or a later version, is a ``SpecError`` saying to re-plan with
this version.

**Determinism.** Same plan, same bytes: keys sorted, two-space indent, the string table
in first-use order, packed columns at a fixed zlib level.

>>> from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
>>> from placewise.plan import build_plan
>>> from placewise.schedule import Problem, Placement, evaluate
>>> from placewise.schedule.testing import ToyCostModel, toy_machine
>>> from placewise.units import DType
>>> x = Tensor("x", (1000,), DType.FP32, role=Role.INPUT)
>>> y = Tensor("y", (1000,), DType.FP32, role=Role.OUTPUT)
>>> g = Graph.build("g", [x, y], [Op("a", OpKind.RELU, ("x",), ("y",))])
>>> prob = Problem(g, None, toy_machine(), ToyCostModel(toy_machine()))
>>> plan = build_plan(prob, evaluate(prob, Placement.uniform(["a"], "gpu", DType.FP32)),
...                   model_ref="g.json")
>>> data = plan_to_json(plan)
>>> data["schedule"]["tasks"]["rows"], sorted(data["schedule"]["tasks"]["cols"])[:3]
(3, ['assumptions', 'bottleneck', 'buffer_bytes'])
>>> plan_from_json(dumps_plan(plan)) == plan
True
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from placewise.errors import SpecError
from placewise.io import (
    MAX_JSON_BYTES,
    atomic_write_text,
    check_numbers,
    parse_json,
    read_file_bytes,
    validate_record,
)
from placewise.plan_columns import (
    Strings,
    decode_mapping,
    decode_table,
    encode_table,
    gc_paused,
    make_record,
    pack_strings,
    table_schema,
    unpack_strings,
)
from placewise.plan_records import (
    CrossingRecord,
    OpRecord,
    Plan,
    RegionRecord,
    TaskRecord,
    TensorRecord,
)
from placewise.units import DType

__all__ = [
    "SCHEMA_VERSION",
    "dumps_plan",
    "load_plan",
    "plan_from_json",
    "plan_json_schema",
    "plan_records_json",
    "plan_to_json",
    "save_plan",
]

#: the version of the plan file format this module writes (it also reads version 1)
SCHEMA_VERSION = 2
_OLD_VERSIONS = (1,)


class _Assignment(BaseModel):
    """A row of the ``placement`` table (keyed by vertex)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    device: str
    dtype: str


class _Step(BaseModel):
    """A row of the ``schedule.critical_path`` table: a task name."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    task: str


#: the keyed tables at the top level: field -> record class
_MAPPINGS: dict[str, type[BaseModel]] = {
    "placement": _Assignment, "regions": RegionRecord, "ops": OpRecord, "tensors": TensorRecord}


# ---- writing ----------------------------------------------------------------------------------
@gc_paused()
def plan_to_json(plan: Plan, *, packed: bool = True) -> dict[str, Any]:
    """The JSON object of a plan: its small records as objects (fields that are None left
    out), its bulk tables by column (see the module docstring); ``packed=False``: every
    column in its readable ``values`` form (what ``save_plan`` writes is packed)."""
    bulk: dict[str, Any] = {k: True for k in (*_MAPPINGS, "crossings")}
    data = plan.model_dump(mode="json", exclude_none=True, exclude={
        **bulk, "schedule": {"tasks": True, "critical_path": True}})
    strings = Strings()
    data["placement"] = encode_table(
        _Assignment, [make_record(_Assignment, {"device": a["device"], "dtype": a["dtype"]})
                      for a in plan.placement.values()], strings, keys=list(plan.placement),
        packed=packed)
    for key in ("regions", "ops", "tensors"):
        m: Mapping[str, BaseModel] = getattr(plan, key)
        data[key] = encode_table(_MAPPINGS[key], list(m.values()), strings, keys=list(m),
                                 packed=packed)
    data["schedule"]["tasks"] = encode_table(TaskRecord, plan.schedule.tasks, strings,
                                             packed=packed)
    data["schedule"]["critical_path"] = encode_table(
        _Step, [make_record(_Step, {"task": n}) for n in plan.schedule.critical_path], strings,
        packed=packed)
    data["crossings"] = encode_table(CrossingRecord, plan.crossings, strings, packed=packed)
    data["strings"] = pack_strings(strings.items) if packed else strings.items
    return data


def plan_records_json(plan: Plan) -> dict[str, Any]:
    """The plan with every record a JSON object, in the version-1 layout that ``load_plan``
    still reads (and converts): for tools and tests that edit a plan by hand. Large."""
    data = plan.model_dump(mode="json", exclude_none=True)
    data["schema_version"] = 1
    return data


def dumps_plan(plan: Plan) -> str:
    """The exact text ``save_plan`` writes: sorted keys, two-space indent, final newline."""
    return json.dumps(plan_to_json(plan), indent=2, sort_keys=True, allow_nan=False) + "\n"


def save_plan(plan: Plan, path: str | os.PathLike[str]) -> None:
    """Write ``plan`` to ``path`` atomically (never a half-written file)."""
    atomic_write_text(os.fspath(path), dumps_plan(plan))


# ---- reading ----------------------------------------------------------------------------------
def _replan(file: str, problem: str) -> SpecError:
    return SpecError(f"{problem}: re-plan with this version of placewise (it writes plan "
                     f"schema version {SCHEMA_VERSION})", file=file, place="schema_version")


@gc_paused()
def plan_from_json(data: Mapping[str, Any] | str | bytes, *, file: str | None = None) -> Plan:
    """Validate a plan from its JSON object or text; ``SpecError`` on any problem."""
    file = file or "<plan>"
    if isinstance(data, str | bytes):
        obj = parse_json(data, file=file, error=SpecError)  # depth, finite numbers
    else:
        obj = data
        check_numbers(obj, file=file, error=SpecError)
    if not isinstance(obj, Mapping):
        raise SpecError(f"a plan is a JSON object, not {type(obj).__name__}", file=file)
    if "schema_version" not in obj:
        raise SpecError("missing; is this a placewise plan file?", file=file,
                        place="schema_version")
    version = obj["schema_version"]
    if isinstance(version, bool) or (version != SCHEMA_VERSION
                                     and version not in _OLD_VERSIONS):
        raise _replan(file, f"plan schema version {version!r} is not supported (this "
                            f"placewise reads versions 1 and {SCHEMA_VERSION})")
    convert = _from_tables if version == SCHEMA_VERSION else _from_version_1
    plan = convert(obj, file)
    _check_references(plan, file)
    return plan


def _from_version_1(obj: Mapping[str, Any], file: str) -> Plan:
    """A version-1 file: every record a JSON object, as the records still are."""
    try:
        return validate_record(Plan, {**obj, "schema_version": SCHEMA_VERSION}, file=file,
                               error=SpecError)
    except SpecError as exc:
        raise _replan(file, f"this version-1 plan does not convert ({exc.place}: "
                            f"{exc.problem})") from None
    except ValueError as exc:
        raise SpecError(f"not valid JSON: {exc}", file=file) from None


def _from_tables(obj: Mapping[str, Any], file: str) -> Plan:
    strings = unpack_strings(obj.get("strings"), file=file, limit_bytes=MAX_JSON_BYTES)
    # the small records through pydantic (strict), the tables in their place by column
    head = {k: v for k, v in obj.items() if k != "strings"}
    for key in (*_MAPPINGS, "crossings"):
        if key in head:
            head[key] = [] if key == "crossings" else {}
    sched = obj.get("schedule")
    if isinstance(sched, Mapping):
        head["schedule"] = {**sched, **{k: [] for k in ("tasks", "critical_path")
                                        if k in sched}}
    try:
        plan: Plan = validate_record(Plan, head, file=file, error=SpecError)
    except ValueError as exc:
        raise SpecError(f"not valid JSON: {exc}", file=file) from None
    assert isinstance(sched, Mapping)
    tables: dict[str, Any] = {}
    for key, cls in _MAPPINGS.items():
        tables[key] = decode_mapping(cls, obj[key], strings, file=file, place=key)
    tables["placement"] = {v: {"device": a.device, "dtype": a.dtype}
                           for v, a in tables["placement"].items()}
    if "crossings" in obj:
        tables["crossings"] = tuple(decode_table(CrossingRecord, obj["crossings"], strings,
                                                 file=file, place="crossings"))
    tasks = decode_table(TaskRecord, sched["tasks"], strings, file=file,
                         place="schedule.tasks")
    path = decode_table(_Step, sched["critical_path"], strings, file=file,
                        place="schedule.critical_path")
    tables["schedule"] = plan.schedule.model_copy(update={
        "tasks": tuple(tasks), "critical_path": tuple(s.task for s in path)})
    return plan.model_copy(update=tables)


def _check_references(plan: Plan, file: str) -> None:
    """Names that refer to each other must exist (the checker judges times and sizes)."""
    names: set[str] = set()
    for i, t in enumerate(plan.schedule.tasks):
        if t.name in names:
            raise SpecError(f"task name {t.name!r} repeats", file=file,
                            place=f"schedule.tasks[{i}].name")
        names.add(t.name)
    resources = {r.name for r in plan.schedule.resources}
    placement = plan.placement
    for i, t in enumerate(plan.schedule.tasks):
        for d in t.deps:
            if d not in names:
                raise SpecError(f"depends on unknown task {d!r}", file=file,
                                place=f"schedule.tasks[{i}] ({t.name}).deps")
        if t.vertex is not None and t.vertex not in placement:
            raise SpecError(f"names unknown vertex {t.vertex!r}", file=file,
                            place=f"schedule.tasks[{i}] ({t.name}).vertex")
        if t.resource not in resources:
            raise SpecError(f"runs on unknown resource {t.resource!r} (not in "
                            f"schedule.resources)", file=file,
                            place=f"schedule.tasks[{i}] ({t.name}).resource")
    for name in plan.schedule.critical_path:
        if name not in names:
            raise SpecError(f"unknown task {name!r}", file=file, place="schedule.critical_path")
    for i, c in enumerate(plan.crossings):
        k = c.kept
        if k is not None and ((k.cost_s is None) != (k.delta_s is None)
                              or (k.cost_s is not None and k.dtype is None)):
            raise SpecError("cost_s, delta_s and dtype are given together (or cost_s and "
                            "delta_s not at all)", file=file,
                            place=f"crossings[{i}] ({c.tensor}).kept")
    dtypes: set[str] = set()
    for v, a in placement.items():
        if set(a) != {"device", "dtype"}:
            raise SpecError("an assignment has exactly the keys 'device' and 'dtype'",
                            file=file, place=f"placement.{v}")
        if a["dtype"] not in dtypes:
            try:
                DType.parse(a["dtype"])
            except ValueError as exc:
                raise SpecError(str(exc), file=file, place=f"placement.{v}.dtype") from None
            dtypes.add(a["dtype"])
        if v not in plan.regions:
            raise SpecError(f"vertex {v!r} has no entry in regions", file=file,
                            place=f"placement.{v}")
    ops = plan.ops
    for v, r in plan.regions.items():
        if v not in placement:
            raise SpecError(f"vertex {v!r} is not placed", file=file, place=f"regions.{v}")
        for op in r.ops:
            rec = ops.get(op)
            if rec is None or rec.vertex != v:
                raise SpecError(f"op {op!r} is not recorded as part of this vertex", file=file,
                                place=f"regions.{v}.ops")
    for op, rec in ops.items():
        if rec.vertex not in plan.regions:
            raise SpecError(f"names unknown vertex {rec.vertex!r}", file=file,
                            place=f"ops.{op}.vertex")


def load_plan(path: str | os.PathLike[str]) -> Plan:
    """Read a plan file written by ``save_plan`` (or a version-1 file, converted).

    ``InputError`` if it cannot be read; ``SpecError`` (file, place, problem) if it is not
    JSON, has an unknown ``schema_version``, a wrong type anywhere, or names that do not
    refer to each other.
    """
    file = os.fspath(path)
    text = read_file_bytes(file, what="plan", limit_bytes=MAX_JSON_BYTES, error=SpecError)
    return plan_from_json(text, file=file)


# ---- the JSON Schema --------------------------------------------------------------------------
def _refs(node: Any, out: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            out.add(ref[len("#/$defs/"):])
        for v in node.values():
            _refs(v, out)
    elif isinstance(node, list):
        for v in node:
            _refs(v, out)


def plan_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a plan file, as published in
    ``placewise/schemas/plan.schema.json``. It checks shapes and types; the packed columns'
    contents, references between names are checked by ``load_plan``, times and sizes by
    ``placewise.check``."""
    schema = Plan.model_json_schema(mode="serialization")
    defs: dict[str, Any] = schema["$defs"]
    props = schema["properties"]
    for key, cls in _MAPPINGS.items():
        props[key] = {**table_schema(cls, defs, keyed=True),
                      "description": f"{key}: a mapping stored as a table (its keys in the "
                                     f"column _key)"}
    props["crossings"] = table_schema(CrossingRecord, defs)
    props["strings"] = {
        "description": "every string of the tables, once (columns of strings hold indexes "
                       "into it): a list, or packed as base64 of its zlib-compressed JSON",
        "oneOf": [{"type": "array", "items": {"type": "string"}},
                  {"type": "object", "properties": {"zjson": {
                      "type": "string", "contentEncoding": "base64"}},
                   "required": ["zjson"], "additionalProperties": False}]}
    schema["required"] = sorted({*schema.get("required", ()), "strings", *_MAPPINGS,
                                 "crossings"})
    sched = defs["ScheduleRecord"]["properties"]
    sched["tasks"] = table_schema(TaskRecord, defs)
    sched["critical_path"] = table_schema(_Step, defs)
    # keep only the definitions still referred to
    used: set[str] = set()
    todo: set[str] = set()
    _refs(props, todo)
    while todo:
        name = todo.pop()
        if name in used or name not in defs:
            continue
        used.add(name)
        _refs(defs[name], todo)
    schema["$defs"] = {k: v for k, v in defs.items() if k in used}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"urn:placewise:schema:plan:{SCHEMA_VERSION}", **schema}
