"""The plan file's bulk tables, stored column by column (plan schema version 2).

A plan's per-task, per-vertex, per-op, per-tensor and per-crossing records are written as
*tables*: one column per field of the record (``placewise.plan_records``), every string
interned once in the file's ``strings`` list and referred to by its index. A table is
``{"rows": n, "cols": {field: column}}``; a column is one of

- ``{"i8": "<base64>"}``: zlib-compressed little-endian int64 values: integers, booleans
  (0/1), or, for a column of strings or enum values, indexes into ``strings`` (-1: null);
- ``{"f8": "<base64>"}``: zlib-compressed little-endian float64 values (NaN: null; a plan
  never holds a NaN or an infinity otherwise);
- ``{"values": [...]}``: the values themselves, as JSON (what a hand-edited column, or one
  whose integers do not fit in 64 bits, uses; read exactly like the packed forms);

and a field whose value is not a scalar is stored in columns of its own:

- a tuple of strings or integers: ``{"len": column, "items": column}`` (``len`` -1: null);
- a tuple of records (or an optional record): ``{"len": column, "rows": table}``;
- a mapping (a task's terms and assumptions): ``{key: column}``, null where a row lacks the
  key; a key whose values are all numbers is an ``f8`` column, all strings an ``i8`` one.

Writing is deterministic (same records, same bytes). Reading validates every column field
by field (its form, its length, the type and range of every value, enum members, finite
numbers); the first problem is a ``SpecError`` naming the file, the place
(``schedule.tasks[3].start_s``: table, row, field) and the problem. Nothing is evaluated.

>>> from placewise.plan_records import OpRecord
>>> from placewise.graph.ir import OpKind
>>> strings = Strings()
>>> recs = [OpRecord(vertex="v", kind=OpKind.RELU), OpRecord(vertex="w", kind=OpKind.ADD)]
>>> table = encode_table(OpRecord, recs, strings)
>>> sorted(table["cols"]), table["rows"]
(['kind', 'vertex', 'where'], 2)
>>> decode_table(OpRecord, table, strings.items, file="f", place="ops") == recs
True
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import enum
import gc
import json
import math
import sys
import types
import typing
import zlib
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter
from typing import Any, TypeVar

from pydantic import BaseModel

from placewise.errors import SpecError

__all__ = [
    "Strings",
    "column_values",
    "decode_column_values",
    "decode_table",
    "encode_table",
    "encode_values",
    "gc_paused",
    "make_record",
    "pack_strings",
    "table_schema",
    "unpack_strings",
]

_M = TypeVar("_M", bound=BaseModel)
_BIG = sys.byteorder == "big"
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
#: the most rows a table may claim (a plan of 100k ops has a few hundred thousand)
_MAX_ROWS = 1 << 28
#: zlib level of the packed columns (fixed: the same records give the same bytes); 6, zlib's
#: default: 9 % smaller than 1 on a 10k-op plan with 9k crossings, 0.2 s more to write
_LEVEL = 6


class Strings:
    """The string table of a file being written: each string once, by first use (None is
    -1)."""

    __slots__ = ("index",)

    def __init__(self) -> None:
        self.index: dict[str | None, int] = {None: -1}

    def __call__(self, s: str | None) -> int:
        index = self.index
        return index.setdefault(s, len(index) - 1)

    def of(self, values: Sequence[str | None]) -> list[int]:
        """The indexes of ``values`` (interned as needed)."""
        index = self.index
        put = index.setdefault
        return [put(s, len(index) - 1) for s in values]

    @property
    def items(self) -> list[str]:
        """The strings, by index."""
        return typing.cast(list[str], list(self.index)[1:])


def pack_strings(items: list[str]) -> dict[str, str]:
    """The string table as written: ``{"zjson": base64 of the zlib-compressed UTF-8 JSON
    list}`` (a plain JSON list of strings is read as well)."""
    text = json.dumps(items, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return {"zjson": base64.b64encode(zlib.compress(text, _LEVEL)).decode("ascii")}


def unpack_strings(obj: Any, *, file: str, place: str = "strings",
                   limit_bytes: int = 1 << 30) -> list[str]:
    """The string table of a file (``pack_strings``'s form or a plain list), validated."""
    if isinstance(obj, Mapping) and set(obj) == {"zjson"} and isinstance(obj["zjson"], str):
        try:
            d = zlib.decompressobj()
            data = d.decompress(base64.b64decode(obj["zjson"], validate=True), limit_bytes)
            if not d.eof:
                raise zlib.error(f"more than {limit_bytes} bytes")
        except (binascii.Error, ValueError, zlib.error) as exc:
            raise SpecError(f"not a packed string table (base64 of zlib data): {exc}",
                            file=file, place=place) from None
        try:  # a list of strings holds no numbers to check
            obj = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise SpecError(f"not a packed string table (its JSON: {exc})"[:200], file=file,
                            place=place) from None
    if not isinstance(obj, list) or not all(isinstance(s, str) for s in obj):
        raise SpecError("the string table is a list of strings (or {\"zjson\": ...})",
                        file=file, place=place)
    return obj


# ---- making records ---------------------------------------------------------------------------
_FIELDS: dict[type, tuple[tuple[str, ...], dict[str, Any], set[str]]] = {}
_new = object.__new__
_set = object.__setattr__


def _fields(cls: type[BaseModel]) -> tuple[tuple[str, ...], dict[str, Any], set[str]]:
    got = _FIELDS.get(cls)
    if got is None:
        names = tuple(cls.model_fields)
        defaults = {n: f.default for n, f in cls.model_fields.items() if not f.is_required()}
        got = _FIELDS[cls] = (names, defaults, set(names))
    return got


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Hold the cyclic garbage collector while a plan's records are made or read: a plan of
    100k ops is a million small objects, and every collection pass would walk them all
    (it doubles the time). Reference counting still frees what is dropped."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def make_record(cls: type[_M], values: dict[str, Any]) -> _M:
    """A record of ``cls`` from values that are already of the fields' types (the plan's own,
    or a column that was validated), fields left out taking their defaults: what
    ``cls.model_construct(**values)`` makes, without its per-field bookkeeping.

    >>> from placewise.plan_records import AlternativeRecord
    >>> make_record(AlternativeRecord, {"device": "gpu", "reason": "no"}) == \\
    ...     AlternativeRecord(device="gpu", reason="no")
    True
    """
    names, defaults, fields_set = _fields(cls)
    if len(values) != len(names):
        for n, d in defaults.items():
            if n not in values:
                values[n] = d.copy() if isinstance(d, dict | list) else d
    m = _new(cls)
    _set(m, "__dict__", values)
    # one set per class: a frozen record's set is never changed in place (model_copy
    # copies it first)
    _set(m, "__pydantic_fields_set__", fields_set)
    _set(m, "__pydantic_extra__", None)
    _set(m, "__pydantic_private__", None)
    return m


# ---- field kinds ------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Kind:
    """How one field is stored: ``tag`` (str, enum, int, bool, float, strs, ints, records,
    fdict, adict), whether it may be None, and the enum or record class."""

    tag: str
    optional: bool = False
    cls: Any = None


def _kind(ann: Any) -> _Kind:
    optional = False
    origin = typing.get_origin(ann)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(ann) if a is not type(None)]
        if len(members) != 1:
            raise TypeError(f"no column layout for {ann!r}")
        optional, ann = True, members[0]
        origin = typing.get_origin(ann)
    if ann is str:
        return _Kind("str", optional)
    if ann is bool:
        return _Kind("bool", optional)
    if ann is int:
        return _Kind("int", optional)
    if ann is float:
        return _Kind("float", optional)
    if isinstance(ann, type) and issubclass(ann, enum.Enum):
        return _Kind("enum", optional, ann)
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return _Kind("records", optional, ann)
    args: tuple[Any, ...] = typing.get_args(ann)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        elem = args[0]
        if elem is str:
            return _Kind("strs", optional)
        if elem is int:
            return _Kind("ints", optional)
        if isinstance(elem, type) and issubclass(elem, BaseModel) and not optional:
            return _Kind("records", False, elem)
    if origin is dict and len(args) == 2:
        key, val = args
        if val is float and isinstance(key, type) and issubclass(key, enum.Enum):
            return _Kind("fdict", optional, key)
        if key is str and set(typing.get_args(val)) == {float, str}:
            return _Kind("adict", optional)
    raise TypeError(f"no column layout for {ann!r}")


_KINDS: dict[type, dict[str, _Kind]] = {}


def _kinds(cls: type[BaseModel]) -> dict[str, _Kind]:
    ks = _KINDS.get(cls)
    if ks is None:
        ks = _KINDS[cls] = {n: _kind(f.annotation) for n, f in cls.model_fields.items()}
    return ks


# ---- packing ----------------------------------------------------------------------------------
def _pack(code: str, values: Any) -> str:
    a = array(code, values)
    if _BIG:
        a.byteswap()
    return base64.b64encode(zlib.compress(a.tobytes(), _LEVEL)).decode("ascii")


def _ints(values: list[int]) -> dict[str, Any]:
    if values and (min(values) < _I64_MIN or max(values) > _I64_MAX):
        return {"values": values}
    return {"i8": _pack("q", values)}


def _floats(values: list[float]) -> dict[str, Any]:
    return {"f8": _pack("d", values)}


def _nan_for_none(values: Iterator[float | None]) -> list[float]:
    nan = math.nan
    return [nan if v is None else v for v in values]


def encode_values(cls: type[BaseModel], name: str, values: list[Any], strings: Strings,
                  *, packed: bool = True) -> Any:
    """The column of ``values``, the values of field ``name`` of record class ``cls``
    (``packed=False``: the readable ``values`` form, values written as they are)."""
    return _encode(_kinds(cls)[name], values, strings, packed)


def _plain(v: Any) -> Any:
    if isinstance(v, enum.Enum):
        return v.value
    if isinstance(v, tuple):
        return list(v)
    return v


def _encode(k: _Kind, values: list[Any], strings: Strings, packed: bool) -> Any:
    tag = k.tag
    if not packed and tag in ("str", "enum", "int", "bool", "float"):
        return {"values": [_plain(v) for v in values]}
    if tag == "str":
        return _ints(strings.of(values))
    if tag == "enum":  # ``_value_``: a plain attribute (``value`` and hashing are slow)
        return _ints(strings.of([None if v is None else v._value_ for v in values]))
    if tag in ("int", "bool"):
        return _ints([int(v) for v in values])
    if tag == "float":
        return _floats(_nan_for_none(iter(values)))
    if tag in ("strs", "ints"):
        lens = [-1 if v is None else len(v) for v in values]
        flat = [x for v in values if v is not None for x in v]
        if not packed:
            return {"len": {"values": lens}, "items": {"values": flat}}
        items = _ints(strings.of(flat)) if tag == "strs" else _ints(flat)
        return {"len": _ints(lens), "items": items}
    if tag == "records":
        if k.optional:
            lens = [0 if v is None else 1 for v in values]
            rows = [v for v in values if v is not None]
        else:
            lens = [len(v) for v in values]
            rows = [r for v in values for r in v]
        return {"len": _ints(lens) if packed else {"values": lens},
                "rows": encode_table(k.cls, rows, strings, packed=packed)}
    if tag == "fdict":
        fill = math.nan if packed else None
        cols: dict[str, list[Any]] = {}
        for i, d in enumerate(values):
            for key, v in d.items():
                name = key._value_
                col = cols.get(name)
                if col is None:
                    col = cols[name] = [fill] * len(values)
                col[i] = v
        return {name: _floats(cols[name]) if packed else {"values": cols[name]}
                for name in sorted(cols)}
    if tag == "adict":
        out: dict[str, Any] = {}
        for key in sorted({key for d in values for key in d}):
            col = [d.get(key) for d in values]
            present = [v for v in col if v is not None]
            if not packed:
                out[key] = {"values": col}
            elif all(isinstance(v, str) for v in present):
                out[key] = _ints(strings.of(col))
            elif all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
                out[key] = _floats([math.nan if v is None else float(v) for v in col])
            else:
                out[key] = {"values": [v if v is None or isinstance(v, str) else float(v)
                                       for v in col]}
        return out
    raise AssertionError(tag)


def encode_table(cls: type[BaseModel], records: Sequence[BaseModel], strings: Strings,
                 *, keys: Sequence[str] | None = None, packed: bool = True
                 ) -> dict[str, Any]:
    """The table of ``records`` (all of class ``cls``); ``keys``: a mapping's keys, stored as
    the column ``_key``; ``packed=False``: every column in the readable ``values`` form."""
    cols: dict[str, Any] = {}
    if keys is not None:
        cols["_key"] = _ints(strings.of(keys)) if packed else {"values": list(keys)}
    for name, k in _kinds(cls).items():
        cols[name] = _encode(k, list(map(attrgetter(name), records)), strings, packed)
    return {"rows": len(records), "cols": cols}


# ---- reading ----------------------------------------------------------------------------------
class _Ctx:
    __slots__ = ("file", "strings")

    def __init__(self, strings: Sequence[str], file: str) -> None:
        self.strings = strings
        self.file = file

    def fail(self, problem: str, place: str) -> SpecError:
        return SpecError(problem, file=self.file, place=place)


def _unpack(cx: _Ctx, text: Any, code: str, n: int, place: str) -> array[Any]:
    if not isinstance(text, str):
        raise cx.fail(f"a packed column is a base64 string, not {type(text).__name__}", place)
    try:
        raw = base64.b64decode(text, validate=True)
        d = zlib.decompressobj()
        data = d.decompress(raw, 8 * n + 1)
        if not d.eof or d.unused_data:
            raise zlib.error("more data than the table's rows")
    except (binascii.Error, ValueError, zlib.error) as exc:
        raise cx.fail(f"not a packed column (base64 of zlib data): {exc}", place) from None
    if len(data) != 8 * n:
        raise cx.fail(f"holds {len(data) // 8} values, the table has {n} rows", place)
    a = array(code)
    a.frombytes(data)
    if _BIG:
        a.byteswap()
    return a


def _column(cx: _Ctx, col: Any, n: int, place: str, packed: tuple[str, ...]
            ) -> tuple[str, Any]:
    """(form, values) of a column of ``n`` rows; ``packed``: the packed forms allowed."""
    if not isinstance(col, Mapping) or len(col) != 1:
        raise cx.fail("a column is an object with one member: " +
                      ", ".join(repr(p) for p in (*packed, "values")), place)
    (form, data), = col.items()
    if form == "values":
        if not isinstance(data, list):
            raise cx.fail("'values' is a list", place)
        if len(data) != n:
            raise cx.fail(f"holds {len(data)} values, the table has {n} rows", place)
        return form, data
    if form not in packed:
        raise cx.fail(f"unknown column form {form!r} (expected " +
                      " or ".join(repr(p) for p in (*packed, "values")) + ")", place)
    return form, _unpack(cx, data, "q" if form == "i8" else "d", n, place + "." + form)


def _row_place(place: str, row: int) -> str:
    """``schedule.tasks.start_s`` and row 3 -> ``schedule.tasks[3].start_s``."""
    table, _, field = place.rpartition(".")
    return f"{table}[{row}].{field}" if table else f"{place}[{row}]"


def _check_each(cx: _Ctx, values: Sequence[Any], ok: Callable[[Any], bool], what: str,
                place: str) -> None:
    for i, v in enumerate(values):
        if not ok(v):
            raise cx.fail(f"{what}, not {v!r}"[:200], _row_place(place, i))


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _ints_of(cx: _Ctx, col: Any, n: int, place: str) -> list[int]:
    form, vals = _column(cx, col, n, place, ("i8",))
    if form == "values":
        _check_each(cx, vals, _is_int, "an integer", place)
        return list(vals)
    out: list[int] = vals.tolist()
    return out


def _strs_of(cx: _Ctx, col: Any, n: int, place: str, optional: bool) -> list[str | None]:
    form, vals = _column(cx, col, n, place, ("i8",))
    if form == "values":
        _check_each(cx, vals, lambda v: isinstance(v, str) or (optional and v is None),
                    "a string" + (" or null" if optional else ""), place)
        return list(vals)
    strings = cx.strings
    if vals and (min(vals) < (-1 if optional else 0) or max(vals) >= len(strings)):
        bad = next(i for i, v in enumerate(vals)
                   if not (-1 if optional else 0) <= v < len(strings))
        raise cx.fail(f"string index {vals[bad]} is not in strings (0..{len(strings) - 1}"
                      + (", -1 for null" if optional else "") + ")", _row_place(place, bad))
    return [None if i < 0 else strings[i] for i in vals]


def _floats_of(cx: _Ctx, col: Any, n: int, place: str, optional: bool) -> list[float | None]:
    form, vals = _column(cx, col, n, place, ("f8",))
    if form == "values":
        _check_each(cx, vals, lambda v: _is_num(v) or (optional and v is None),
                    "a finite number" + (" or null" if optional else ""), place)
        return [None if v is None else float(v) for v in vals]
    floats: list[float] = vals.tolist()
    isfinite = math.isfinite
    out: list[float | None] = list(floats)
    if not all(map(isfinite, floats)):
        for i, v in enumerate(out):
            if v is not None and not isfinite(v):
                if v != v and optional:  # NaN: null
                    out[i] = None
                    continue
                raise cx.fail(f"a finite number{' or null' if optional else ''}, not {v!r}",
                              _row_place(place, i))
    return out


def _enum_of(cx: _Ctx, col: Any, n: int, place: str, k: _Kind) -> list[Any]:
    names = _strs_of(cx, col, n, place, k.optional)
    cache: dict[str | None, Any] = {None: None}
    out = []
    for i, s in enumerate(names):
        v = cache.get(s, cache)
        if v is cache:
            try:
                v = cache[s] = k.cls(s)
            except ValueError:
                allowed = ", ".join(repr(m.value) for m in k.cls)
                raise cx.fail(f"{s!r} is not one of {allowed}",
                              _row_place(place, i)) from None
        out.append(v)
    return out


def _sub(cx: _Ctx, col: Any, place: str, members: tuple[str, str]) -> tuple[Any, Any]:
    if not isinstance(col, Mapping) or set(col) != set(members):
        raise cx.fail(f"an object with the members {members[0]!r} and {members[1]!r}", place)
    return col[members[0]], col[members[1]]


def _decode(cx: _Ctx, k: _Kind, col: Any, n: int, place: str) -> list[Any]:
    tag = k.tag
    if tag == "str":
        return _strs_of(cx, col, n, place, k.optional)
    if tag == "enum":
        return _enum_of(cx, col, n, place, k)
    if tag == "int":
        return _ints_of(cx, col, n, place)
    if tag == "bool":
        form, vals = _column(cx, col, n, place, ("i8",))
        if form == "values":
            _check_each(cx, vals, lambda v: isinstance(v, bool), "true or false", place)
            return list(vals)
        _check_each(cx, vals, lambda v: v in (0, 1), "0 or 1", place)
        return [v == 1 for v in vals]
    if tag == "float":
        return _floats_of(cx, col, n, place, k.optional)
    if tag in ("strs", "ints"):
        lcol, icol = _sub(cx, col, place, ("len", "items"))
        lens = _lengths(cx, lcol, n, place, k.optional)
        total = sum(x for x in lens if x > 0)
        items: list[Any] = (_strs_of(cx, icol, total, place + ".items", False)
                            if tag == "strs" else _ints_of(cx, icol, total, place + ".items"))
        out: list[Any] = []
        pos = 0
        for x in lens:
            if x < 0:
                out.append(None)
            else:
                out.append(tuple(items[pos:pos + x]))
                pos += x
        return out
    if tag == "records":
        lcol, rows = _sub(cx, col, place, ("len", "rows"))
        lens = _lengths(cx, lcol, n, place, False)
        if k.optional:
            _check_each(cx, lens, lambda v: v in (0, 1), "0 or 1 (an optional record)",
                        place + ".len")
        recs = _decode_table(cx, k.cls, rows, place, sum(lens))
        out = []
        pos = 0
        for x in lens:
            if k.optional:
                out.append(recs[pos] if x else None)
            else:
                out.append(tuple(recs[pos:pos + x]))
            pos += x
        return out
    if tag in ("fdict", "adict"):
        if not isinstance(col, Mapping):
            raise cx.fail("an object of one column per key", place)
        dicts: list[dict[Any, Any]] = [{} for _ in range(n)]
        for key, sub in col.items():
            sp = f"{place}.{key}"
            if tag == "fdict":
                try:
                    kv: Any = k.cls(key)
                except ValueError:
                    allowed = ", ".join(repr(m.value) for m in k.cls)
                    raise cx.fail(f"{key!r} is not one of {allowed}", place) from None
                got: list[Any] = _floats_of(cx, sub, n, sp, True)
            else:
                kv = key
                got = _any_of(cx, sub, n, sp)
            for d, v in zip(dicts, got, strict=True):
                if v is not None:
                    d[kv] = v
        return dicts
    raise AssertionError(tag)


def _lengths(cx: _Ctx, col: Any, n: int, place: str, optional: bool) -> list[int]:
    lens = _ints_of(cx, col, n, place + ".len")
    _check_each(cx, lens, lambda v: v >= (-1 if optional else 0),
                "a length" + (" (-1: null)" if optional else ""), place + ".len")
    return lens


def _any_of(cx: _Ctx, col: Any, n: int, place: str) -> list[Any]:
    """A mapping's column of numbers or strings (null: the row lacks the key)."""
    if isinstance(col, Mapping) and "i8" in col:
        return _strs_of(cx, col, n, place, True)
    if isinstance(col, Mapping) and "f8" in col:
        return _floats_of(cx, col, n, place, True)
    _, vals = _column(cx, col, n, place, ("i8", "f8"))
    _check_each(cx, vals, lambda v: v is None or isinstance(v, str) or _is_num(v),
                "a finite number, a string or null", place)
    return [v if v is None or isinstance(v, str) else float(v) for v in vals]


def _decode_table(cx: _Ctx, cls: type[BaseModel], table: Any, place: str,
                  rows: int | None = None) -> list[Any]:
    recs, _ = _table(cx, cls, table, place, rows, keyed=False)
    return recs


def _table(cx: _Ctx, cls: type[BaseModel], table: Any, place: str, rows: int | None,
           keyed: bool) -> tuple[list[Any], list[str]]:
    if not isinstance(table, Mapping) or set(table) != {"rows", "cols"}:
        raise cx.fail("a table is an object with the members 'rows' and 'cols'", place)
    n = table["rows"]
    if not _is_int(n) or not 0 <= n <= _MAX_ROWS:
        raise cx.fail(f"'rows' is a count (at most {_MAX_ROWS}), not {n!r}"[:200],
                      place + ".rows")
    if rows is not None and n != rows:
        raise cx.fail(f"holds {n} rows, its parent's lengths add up to {rows}", place)
    cols = table["cols"]
    if not isinstance(cols, Mapping):
        raise cx.fail("'cols' is an object of columns", place + ".cols")
    kinds = _kinds(cls)
    expected = (["_key"] if keyed else []) + list(kinds)
    for name in cols:
        if name not in expected:
            raise cx.fail(f"unknown column {name!r} (a {cls.__name__} has " +
                          ", ".join(expected) + ")", place)
    for name in expected:
        if name not in cols:
            raise cx.fail(f"the column {name!r} is missing", place)
    keys: list[str] = []
    if keyed:
        keys = typing.cast(list[str], _strs_of(cx, cols["_key"], n, place + "._key", False))
        seen: set[str] = set()
        for i, key in enumerate(keys):
            if key in seen:
                raise cx.fail(f"the key {key!r} repeats", f"{place}[{i}]._key")
            seen.add(key)
    columns = [_decode(cx, k, cols[name], n, f"{place}.{name}") for name, k in kinds.items()]
    names = list(kinds)
    fields_set = _fields(cls)[2]
    recs: list[Any] = []
    append = recs.append
    for values in map(dict, map(zip, repeat(names, n), zip(*columns, strict=True))):
        m = _new(cls)  # make_record, inlined: every field is there
        _set(m, "__dict__", values)
        _set(m, "__pydantic_fields_set__", fields_set)
        _set(m, "__pydantic_extra__", None)
        _set(m, "__pydantic_private__", None)
        append(m)
    return recs, keys


def decode_table(cls: type[BaseModel], table: Any, strings: Sequence[str], *, file: str,
                 place: str) -> list[Any]:
    """The records of class ``cls`` of a table (validated; ``SpecError`` at ``place``)."""
    return _decode_table(_Ctx(strings, file), cls, table, place)


def decode_mapping(cls: type[BaseModel], table: Any, strings: Sequence[str], *, file: str,
                   place: str) -> dict[str, Any]:
    """A mapping key -> record of class ``cls`` from a table with a ``_key`` column."""
    recs, keys = _table(_Ctx(strings, file), cls, table, place, None, keyed=True)
    return dict(zip(keys, recs, strict=True))


def decode_column_values(col: Any, n: int, strings: Sequence[str], *, file: str, place: str,
                         what: str = "str") -> list[Any]:
    """A lone column of ``n`` strings (``what="str"``) or integers (``"int"``)."""
    cx = _Ctx(strings, file)
    if what == "str":
        return _strs_of(cx, col, n, place, False)
    return _ints_of(cx, col, n, place)


def column_values(cls: type[BaseModel], name: str, table: Mapping[str, Any],
                  strings: Sequence[str]) -> list[Any]:
    """The values of column ``name`` of a table of ``cls`` records, as its records hold them
    (for tools and tests that edit a file: write them back as ``{"values": [...]}`` in their
    JSON form)."""
    cx = _Ctx(strings, "<plan>")
    return _decode(cx, _kinds(cls)[name], table["cols"][name], table["rows"], name)


# ---- the JSON Schema --------------------------------------------------------------------------
_PACKED = {"type": "string", "contentEncoding": "base64",
           "description": "zlib-compressed little-endian 64-bit values"}


def _col_schema(packed: str, values: dict[str, Any]) -> dict[str, Any]:
    return {"oneOf": [
        {"type": "object", "properties": {packed: _PACKED}, "required": [packed],
         "additionalProperties": False},
        {"type": "object", "properties": {"values": {"type": "array", "items": values}},
         "required": ["values"], "additionalProperties": False}]}


_INT_COL = _col_schema("i8", {"type": "integer"})
_STR_COL = _col_schema("i8", {"type": ["string", "null"]})
_FLOAT_COL = _col_schema("f8", {"type": ["number", "null"]})
_BOOL_COL = _col_schema("i8", {"type": ["boolean", "integer"]})
_ANY_COL = {"oneOf": [*_col_schema("i8", {"type": ["number", "string", "null"]})["oneOf"],
                      _col_schema("f8", {})["oneOf"][0]]}


def _kind_schema(k: _Kind, defs: dict[str, Any]) -> dict[str, Any]:
    tag = k.tag
    if tag == "str":
        return {"$ref": "#/$defs/StringColumn"}
    if tag == "enum":
        return {**_STR_COL, "description": "one of " +
                ", ".join(str(m.value) for m in k.cls)}
    if tag == "int":
        return {"$ref": "#/$defs/IntColumn"}
    if tag == "bool":
        return _BOOL_COL
    if tag == "float":
        return {"$ref": "#/$defs/FloatColumn"}
    if tag in ("strs", "ints"):
        items = "StringColumn" if tag == "strs" else "IntColumn"
        return {"type": "object", "properties": {"len": {"$ref": "#/$defs/IntColumn"},
                                                 "items": {"$ref": f"#/$defs/{items}"}},
                "required": ["len", "items"], "additionalProperties": False}
    if tag == "records":
        name = f"{k.cls.__name__}Table"
        if name not in defs:
            defs[name] = {}  # reserve (recursion)
            defs[name] = table_schema(k.cls, defs)
        return {"type": "object", "properties": {"len": {"$ref": "#/$defs/IntColumn"},
                                                 "rows": {"$ref": f"#/$defs/{name}"}},
                "required": ["len", "rows"], "additionalProperties": False}
    if tag == "fdict":
        return {"type": "object", "propertyNames": {"enum": [m.value for m in k.cls]},
                "additionalProperties": {"$ref": "#/$defs/FloatColumn"}}
    return {"type": "object", "additionalProperties": _ANY_COL}


def table_schema(cls: type[BaseModel], defs: dict[str, Any], *, keyed: bool = False
                 ) -> dict[str, Any]:
    """The JSON Schema of a table of ``cls`` records; shared parts go into ``defs``."""
    defs.setdefault("IntColumn", _INT_COL)
    defs.setdefault("StringColumn", _STR_COL)
    defs.setdefault("FloatColumn", _FLOAT_COL)
    props: dict[str, Any] = {}
    if keyed:
        props["_key"] = {"$ref": "#/$defs/StringColumn"}
    for name, k in _kinds(cls).items():
        props[name] = _kind_schema(k, defs)
    doc = (cls.__doc__ or "").strip().split("\n\n")[0]
    return {"type": "object", "description": f"a table of {cls.__name__} records, by column"
            + (f": {' '.join(doc.split())}" if doc else ""),
            "properties": {"rows": {"type": "integer", "minimum": 0},
                           "cols": {"type": "object", "properties": props,
                                    "required": list(props), "additionalProperties": False}},
            "required": ["rows", "cols"], "additionalProperties": False}
