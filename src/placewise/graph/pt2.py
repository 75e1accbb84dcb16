"""Reading ``.pt2`` files (``torch.export.save``) without running anything they hold.

``torch.export.load`` unpickles in several places -- legacy weight and constant files,
payloads marked ``use_pickle``, custom and opaque objects, sample inputs (with a fallback to
a full unpickle when the weights-only one fails), the pre-2.7 layout -- and its program JSON
holds text torch evaluates: symbolic shape expressions go through ``sympy.sympify`` (which
calls ``eval``), guard code through ``exec`` (``ExportedProgram.module()``), pytree contexts
import modules by name. placewise treats model files as untrusted input, so ``read_pt2``, the
one way placewise reads a ``.pt2`` file, accepts an archive only when every entry is one
``torch.export.save`` writes, in the format it writes it (entries below are under the
archive's one top-level folder):

=========================================================  =================================
entry                                                       accepted when
=========================================================  =================================
``archive_format``                                          ``pt2``
``archive_version``                                         torch's archive version (``0``)
``byteorder``                                               this machine's byte order
``.data/version``, ``.data/serialization_id``               decimal digits
``models/model.json``                                       the program: JSON whose symbolic
                                                            expressions, guard code and pytree
                                                            contexts are plain data (below)
``data/weights/model_weights_config.json``,                 every payload a raw tensor
``data/constants/model_constants_config.json``              (``use_pickle`` false, named
                                                            ``weight_N`` / ``tensor_N``) whose
                                                            dtype, sizes, strides and offset
                                                            fit its file
``data/weights/weight_N``, ``data/constants/tensor_N``     raw tensor bytes a config names
``data/sample_inputs/model.pt``                             ``torch.load(weights_only=True)``
                                                            gives a tuple or dict
``extra/NAME``                                              UTF-8 text
=========================================================  =================================

Anything else is refused with ``ModelFormatError`` naming the entry: a file at the top of the
archive (the old layout, which torch loads with pickle), a second program or a
``models/NAME`` without ``.json``, a legacy ``data/weights/model.pt`` or
``data/constants/model.pt``, compiled AOTInductor code, directory, compressed, encrypted or
duplicated entries. In the program JSON a symbolic expression must be a sympy ``srepr`` of
numbers, symbols and a fixed set of sympy/torch functions; guard code a comparison of input
sizes; no pytree context may name an enum (which torch imports).

Torch then loads an in-memory copy holding exactly the checked bytes, with weights-only
loading forced for the duration (``TORCH_FORCE_WEIGHTS_ONLY_LOAD``), so no fallback can
unpickle; the loaded program must call only torch operators (no other Python callables).
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import logging
import math
import operator
import os
import re
import sys
import warnings
import zipfile
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from placewise.errors import ModelFormatError
from placewise.io import read_file_bytes, shorten

if TYPE_CHECKING:
    from torch.export import ExportedProgram

__all__ = ["MAX_PT2_BYTES", "check_pt2_archive", "read_pt2"]

#: the largest ``.pt2`` file placewise reads (it is held in memory twice while checked)
MAX_PT2_BYTES = 4 << 30
_MAX_ENTRIES = 100_000
_MAX_JSON_DEPTH = 200  # torch's program JSON nests about 12 deep
_MAX_NESTED_JSON = 8  # JSON text inside JSON strings (pytree specs hold two levels)
_MAX_EXPR_CHARS = 100_000

_MODEL = "model"  # the one program name torch.export.save writes
_WEIGHTS_CONFIG = f"data/weights/{_MODEL}_weights_config.json"
_CONSTANTS_CONFIG = f"data/constants/{_MODEL}_constants_config.json"
_PROGRAM = f"models/{_MODEL}.json"
_SAMPLE_INPUTS = f"data/sample_inputs/{_MODEL}.pt"
_WEIGHT_FILE = re.compile(r"data/weights/(weight_[0-9]{1,9})")
_CONSTANT_FILE = re.compile(r"data/constants/(tensor_[0-9]{1,9})")
_EXTRA_FILE = re.compile(r"extra/[A-Za-z0-9_.\-][A-Za-z0-9_.\-/]{0,254}")
_DIGITS = re.compile(rb"[0-9]{1,64}\n?")
_IDENT = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,99}")
_FLOAT_TEXT = re.compile(r"[-+]?([0-9]{1,400}(\.[0-9]{0,400})?|\.[0-9]{1,400})"
                         r"([eE][-+]?[0-9]{1,4})?")


def _refuse(problem: str, file: str, entry: str | None = None) -> ModelFormatError:
    return ModelFormatError(problem, file=file,
                            place=f"entry {entry!r}" if entry is not None else None)


# ---- the archive --------------------------------------------------------------------------


def _torch_constants() -> tuple[str, str]:
    from torch.export.pt2_archive import constants

    return str(constants.ARCHIVE_FORMAT_VALUE), str(constants.ARCHIVE_VERSION_VALUE)


def _entry_refusal(rel: str) -> str:
    """Why the archive entry ``rel`` (under the top folder) is not one placewise reads."""
    if rel.startswith("models/"):
        return (f"a program entry other than {_PROGRAM!r}: torch would load it as another "
                f"program; placewise reads only the one torch.export.save writes")
    if rel.startswith(("data/weights/", "data/constants/")) and rel.endswith((".pt", ".pkl")):
        return ("a pickled weights or constants file (the legacy layout); placewise does not "
                "unpickle model files")
    if rel.startswith(("data/aotinductor/", "data/executorch/", "data/mtia",
                       "xl_model_weights/")):
        return "compiled code or external weights; placewise does not load code from model files"
    if rel.startswith(("data/weights/", "data/constants/")):
        return "a payload file of a kind torch.export.save does not write (not weight_N/tensor_N)"
    if rel.startswith("data/sample_inputs/"):
        return f"sample inputs of a program other than {_MODEL!r}"
    return "an entry of a kind torch.export.save does not write"


def _read_entries(data: bytes, file: str) -> tuple[str, list[tuple[str, bytes]]]:
    """The archive's top folder and its entries (name under the folder, bytes), in order;
    refuses the shapes of archive torch.export.save never writes."""
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as e:
        raise _refuse(f"not a torch.export .pt2 archive (not a zip file: {e})", file) from None
    entries: list[tuple[str, bytes]] = []
    with zf:
        infos = zf.infolist()
        if not infos:
            raise _refuse("not a torch.export .pt2 archive (the zip file is empty)", file)
        if len(infos) > _MAX_ENTRIES:
            raise _refuse(f"the archive has {len(infos)} entries, more than placewise reads "
                          f"({_MAX_ENTRIES})", file)
        roots: dict[str, str] = {}
        seen: set[str] = set()
        for info in infos:
            name = info.filename
            if name in seen:
                raise _refuse("appears twice in the archive (readers disagree on which copy "
                              "counts); refused", file, name)
            seen.add(name)
            if "/" not in name:
                raise _refuse("a file at the top of the archive: the old (pre-2.7) "
                              "torch.export layout, which torch loads with pickle; placewise "
                              "reads only archives torch.export.save writes today", file, name)
            root, rel = name.split("/", 1)
            if not root or not rel or name.endswith("/") or "\\" in name or "\x00" in name \
                    or any(part in ("", ".", "..") for part in rel.split("/")):
                raise _refuse("not a plain file path inside the archive's folder", file, name)
            roots.setdefault(root, name)
        if len(roots) != 1:
            shown = ", ".join(repr(r) for r in list(roots)[:4])
            raise _refuse(f"not a torch.export .pt2 archive (expected one top-level folder, "
                          f"found {shown})", file)
        root = next(iter(roots))
        for info in infos:
            rel = info.filename.split("/", 1)[1]
            if info.flag_bits & 0x1:
                raise _refuse("is encrypted", file, rel)
            if info.compress_type != zipfile.ZIP_STORED:
                raise _refuse("is compressed; torch.export.save stores entries uncompressed",
                              file, rel)
            try:
                raw = zf.read(info)
            except (zipfile.BadZipFile, OSError, EOFError, ValueError, RuntimeError,
                    NotImplementedError) as e:
                raise _refuse(f"cannot be read ({e}); the archive is truncated or corrupt",
                              file, rel) from None
            entries.append((rel, raw))
    return root, entries


def _json(raw: bytes | str, file: str, entry: str) -> Any:
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        value = json.loads(text)
    except UnicodeDecodeError as e:
        raise _refuse(f"is not UTF-8 text ({e.reason} at byte {e.start})", file, entry) from None
    except (ValueError, RecursionError, MemoryError) as e:
        raise _refuse(f"is not valid JSON ({type(e).__name__}: {shorten(str(e), 200)})", file,
                      entry) from None
    _check_depth(value, file, entry)
    return value


def _check_depth(value: Any, file: str, entry: str) -> None:
    stack = [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict | list):
            if d >= _MAX_JSON_DEPTH:
                raise _refuse(f"JSON nested more than {_MAX_JSON_DEPTH} levels deep", file, entry)
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))


def check_pt2_archive(data: bytes, *, file: str) -> bytes:
    """Check the bytes of a ``.pt2`` file (module docstring) without torch unpickling or
    evaluating anything, and return a zip archive that holds exactly the checked entries
    (what torch is given to load). ``ModelFormatError`` names the entry at fault.

    >>> check_pt2_archive(b"not a zip", file="m.pt2")
    Traceback (most recent call last):
    ...
    placewise.errors.ModelFormatError: m.pt2: not a torch.export .pt2 archive (not a zip file: File is not a zip file)
    """
    root, entries = _read_entries(data, file)
    files = dict(entries)
    fmt_value, version_value = _torch_constants()
    if "archive_format" not in files:
        raise _refuse("not a torch.export .pt2 archive (it has no archive_format entry)", file)
    if files["archive_format"].strip() != fmt_value.encode():
        raise _refuse(f"not a torch.export .pt2 archive (archive_format is not "
                      f"{fmt_value!r}; other and legacy formats are not read)", file,
                      "archive_format")
    for rel in ("archive_version", _PROGRAM, _WEIGHTS_CONFIG, _CONSTANTS_CONFIG, _SAMPLE_INPUTS):
        if rel not in files:
            raise _refuse(f"the archive has no {rel!r} (not written by torch.export.save, or "
                          f"truncated)", file)
    if files["archive_version"].strip() != version_value.encode():
        raise _refuse(f"archive version {shorten(files['archive_version'].decode(errors='replace'), 20)!r}"
                      f" is not {version_value!r}, the one this torch reads", file,
                      "archive_version")
    payloads: dict[str, str] = {}  # payload file -> the config that must name it
    for rel, raw in entries:
        if rel in ("archive_format", "archive_version"):
            continue
        if rel == "byteorder":
            if raw.strip() != sys.byteorder.encode():
                raise _refuse(f"the archive was written {raw.strip()[:10].decode(errors='replace')}"
                              f"-endian; this machine is {sys.byteorder}-endian", file, rel)
        elif rel in (".data/version", ".data/serialization_id"):
            if not _DIGITS.fullmatch(raw):
                raise _refuse("is not a decimal number", file, rel)
        elif rel == _PROGRAM:
            check_program_json(_json(raw, file, rel), file=file, entry=rel)
        elif rel in (_WEIGHTS_CONFIG, _CONSTANTS_CONFIG, _SAMPLE_INPUTS):
            continue  # below, once every payload file is known
        elif _WEIGHT_FILE.fullmatch(rel) or _CONSTANT_FILE.fullmatch(rel):
            payloads[rel] = _WEIGHTS_CONFIG if rel.startswith("data/weights/") \
                else _CONSTANTS_CONFIG
        elif _EXTRA_FILE.fullmatch(rel):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                raise _refuse("is not UTF-8 text", file, rel) from None
        else:
            raise _refuse(_entry_refusal(rel), file, rel)
    named: set[str] = set()
    for config, folder, prefix, kind in (
            (_WEIGHTS_CONFIG, "data/weights/", "weight_", "weight"),
            (_CONSTANTS_CONFIG, "data/constants/", "tensor_", "constant")):
        named |= _check_payload_config(_json(files[config], file, config), files, file=file,
                                       entry=config, folder=folder, prefix=prefix, kind=kind)
    for rel, config in payloads.items():
        if rel not in named:
            raise _refuse(f"no entry of {config!r} names this payload file", file, rel)
    _check_sample_inputs(files[_SAMPLE_INPUTS], file)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zf:
        for rel, raw in entries:
            zf.writestr(zipfile.ZipInfo(f"{root}/{rel}", date_time=(1980, 1, 1, 0, 0, 0)), raw)
    return out.getvalue()


# ---- payloads -------------------------------------------------------------------------------


def _element_sizes() -> dict[int, int]:
    from torch._export.serde.serialize import _SERIALIZE_TO_TORCH_DTYPE

    return {int(code): int(dt.itemsize) for code, dt in _SERIALIZE_TO_TORCH_DTYPE.items()}


def _int_field(value: Any) -> int | None:
    """``{"as_int": n}`` -> n (a plain, non-negative int), else None."""
    if isinstance(value, dict) and set(value) == {"as_int"}:
        n = value["as_int"]
        if type(n) is int and 0 <= n < 1 << 62:
            return n
    return None


def _check_payload_config(config: Any, files: dict[str, bytes], *, file: str, entry: str,
                          folder: str, prefix: str, kind: str) -> set[str]:
    """Every payload of a weights/constants config is a raw tensor that fits its file;
    returns the payload files it names."""
    if not isinstance(config, dict) or set(config) != {"config"} \
            or not isinstance(config["config"], dict):
        raise _refuse("is not a torch.export payload config ({\"config\": {...}})", file, entry)
    sizes = _element_sizes()
    named: set[str] = set()
    for fqn, meta in config["config"].items():
        what = f"{kind} {shorten(str(fqn), 80)!r}"
        if not isinstance(meta, dict):
            raise _refuse(f"{what} is not an object", file, entry)
        pname = meta.get("path_name")
        if meta.get("use_pickle") is not False or not isinstance(pname, str) \
                or not re.fullmatch(re.escape(prefix) + r"[0-9]{1,9}", pname):
            raise _refuse(f"{what} is stored as a pickled object "
                          f"({shorten(str(pname), 40)!r}); placewise does not unpickle model "
                          f"files", file, entry)
        tm = meta.get("tensor_meta")
        if not isinstance(tm, dict) or not isinstance(meta.get("is_param"), bool):
            raise _refuse(f"{what} has no tensor_meta / is_param", file, entry)
        dtype, layout = tm.get("dtype"), tm.get("layout")
        dims = tm.get("sizes")
        strides = tm.get("strides")
        offset = _int_field(tm.get("storage_offset"))
        device = tm.get("device")
        if type(dtype) is not int or dtype not in sizes:
            raise _refuse(f"{what} has an unknown dtype {dtype!r}", file, entry)
        if layout != 7:  # schema.Layout.Strided: raw payloads are dense
            raise _refuse(f"{what} has layout {layout!r}; only strided tensors are read", file,
                          entry)
        if not isinstance(dims, list) or not isinstance(strides, list) \
                or len(dims) != len(strides) or len(dims) > 64 or offset is None:
            raise _refuse(f"{what} has malformed sizes, strides or storage_offset", file, entry)
        shape = [_int_field(d) for d in dims]
        steps = [_int_field(s) for s in strides]
        if any(d is None for d in shape) or any(s is None for s in steps):
            raise _refuse(f"{what}: sizes and strides must be plain non-negative integers",
                          file, entry)
        if not isinstance(tm.get("requires_grad"), bool) or not isinstance(device, dict) \
                or not isinstance(device.get("type"), str) \
                or not (device.get("index") is None or type(device.get("index")) is int):
            raise _refuse(f"{what} has a malformed requires_grad or device", file, entry)
        rel = folder + pname
        if rel not in files:
            raise _refuse(f"{what} names payload file {pname!r}, which the archive lacks",
                          file, entry)
        nbytes = len(files[rel])
        esize = sizes[dtype]
        if nbytes % esize:
            raise _refuse(f"{nbytes} bytes is not a whole number of {esize}-byte elements",
                          file, rel)
        numel = math.prod(d for d in shape if d is not None)
        extent = 0 if numel == 0 else offset + 1 + sum(
            (d - 1) * s for d, s in zip(shape, steps, strict=True)
            if d is not None and s is not None)
        if extent > nbytes // esize:
            raise _refuse(f"{what} needs {extent} elements of {pname!r}, which holds "
                          f"{nbytes // esize}", file, entry)
        named.add(rel)
    return named


def _check_sample_inputs(raw: bytes, file: str) -> None:
    if not raw:
        return
    import torch

    try:
        with _weights_only_forced():
            value = torch.load(io.BytesIO(raw), weights_only=True)
    except Exception:
        raise _refuse("the sample inputs are not plain tensors (they would need unpickling "
                      "arbitrary objects); refused", file, _SAMPLE_INPUTS) from None
    if not isinstance(value, tuple | dict):
        raise _refuse(f"the sample inputs are a {type(value).__name__}, not a tuple or dict",
                      file, _SAMPLE_INPUTS)


# ---- the program JSON ------------------------------------------------------------------------

#: functions a symbolic expression (a sympy srepr) may call: sympy's, and the ones torch's
#: deserializer adds (torch/_export/serde/serialize.py, ``sympy_functions``)
_SYM_CALLS = frozenset({
    "Symbol", "Integer", "Float", "Rational", "Add", "Mul", "Pow", "Mod", "Max", "Min", "Abs",
    "floor", "ceiling", "sqrt", "Piecewise", "ExprCondPair", "Tuple", "Eq", "Ne", "Lt", "Le",
    "Gt", "Ge", "Equality", "Unequality", "StrictLessThan", "LessThan", "StrictGreaterThan",
    "GreaterThan", "And", "Or", "Not",
    "FloorDiv", "ModularIndexing", "Where", "PythonMod", "CleanDiv", "CeilToInt",
    "FloorToInt", "CeilDiv", "LShift", "RShift", "PowByNatural", "FloatPow", "FloatTrueDiv",
    "IntTrueDiv", "IsNonOverlappingAndDenseIndicator", "TruncToFloat", "TruncToInt",
    "RoundToInt", "RoundDecimal", "ToFloat", "Identity",
})
_PLAIN_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.Tuple,
                ast.Load, ast.operator, ast.unaryop, ast.boolop, ast.cmpop)


def _parse_expr(text: Any, what: str, file: str, entry: str) -> ast.Expression:
    if not isinstance(text, str) or len(text) > _MAX_EXPR_CHARS:
        raise _refuse(f"{what} is not a string of at most {_MAX_EXPR_CHARS} characters", file,
                      entry)
    try:
        return ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise _refuse(f"{what} {shorten(text, 80)!r} is not an expression", file,
                      entry) from None


def check_sym_expr(text: Any, *, file: str, entry: str) -> None:
    """Refuse a symbolic size expression (torch evaluates it with ``sympy.sympify``) unless it
    is plain data: numbers, ``Symbol('name', assumption=True)``, ``Float('1.5')`` and calls
    of the functions in ``_SYM_CALLS``.

    >>> check_sym_expr("Add(Symbol('s0', positive=True), Integer(1))", file="m.pt2", entry="e")
    >>> check_sym_expr("__import__('os').system('id')", file="m.pt2", entry="e")
    Traceback (most recent call last):
    ...
    placewise.errors.ModelFormatError: m.pt2: entry 'e': symbolic expression "__import__('os').system('id')" calls something other than sympy functions; refused
    """
    what = "symbolic expression"
    tree = _parse_expr(text, what, file, entry)
    bad = _refuse(f"{what} {shorten(str(text), 80)!r} calls something other than sympy "
                  f"functions; refused", file, entry)
    named: set[int] = set()  # string constants in an allowed place
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in _SYM_CALLS:
                raise bad
            for kw in node.keywords:
                if kw.arg is None or not _IDENT.fullmatch(kw.arg) or not (
                        isinstance(kw.value, ast.Constant)
                        and type(kw.value.value) in (bool, int, type(None))):
                    raise bad
            if node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str):
                s = node.args[0].value
                if (node.func.id == "Symbol" and _IDENT.fullmatch(s)) or \
                        (node.func.id == "Float" and _FLOAT_TEXT.fullmatch(s)):
                    named.add(id(node.args[0]))
        elif isinstance(node, ast.Constant):
            if isinstance(node.value, str):
                if id(node) not in named:
                    raise bad
            elif type(node.value) not in (bool, int, float):
                raise bad
        elif isinstance(node, ast.Name):
            if not _IDENT.fullmatch(node.id):
                raise bad
        elif not isinstance(node, (*_PLAIN_NODES, ast.keyword)):
            raise bad


#: what guard code (``exec``-ed by ``ExportedProgram.module()``) may name and call
_GUARD_NAMES = frozenset({"L", "math", "inf", "abs", "int", "float"}) | _SYM_CALLS
_GUARD_TENSOR_ATTRS = frozenset({"size", "stride", "storage_offset", "dim", "numel"})
_GUARD_MATH_ATTRS = frozenset({"floor", "ceil", "trunc", "sqrt", "log2", "inf"})


def check_guard_code(text: Any, *, file: str, entry: str) -> None:
    """Refuse a guard (torch ``exec``-s guards as Python) unless it is arithmetic and
    comparisons over input sizes (``L['x'].size()[0] <= 64``), numbers and the functions
    of ``_GUARD_NAMES``.

    >>> check_guard_code("2*L['x'].size()[0] + 1 <= 129", file="m.pt2", entry="e")
    >>> check_guard_code("L['x'].__class__", file="m.pt2", entry="e")
    Traceback (most recent call last):
    ...
    placewise.errors.ModelFormatError: m.pt2: entry 'e': guard code "L['x'].__class__" is not a check of input sizes; refused
    """
    tree = _parse_expr(text, "guard code", file, entry)
    bad = _refuse(f"guard code {shorten(str(text), 80)!r} is not a check of input sizes; "
                  f"refused", file, entry)

    def rooted_at_l(node: ast.AST) -> bool:
        while isinstance(node, ast.Subscript | ast.Call | ast.Attribute):
            node = node.value if not isinstance(node, ast.Call) else node.func
        return isinstance(node, ast.Name) and node.id == "L"

    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            if node.id not in _GUARD_NAMES:
                raise bad
        elif isinstance(node, ast.Attribute):
            base = node.value
            if isinstance(base, ast.Name) and base.id == "math":
                if node.attr not in _GUARD_MATH_ATTRS:
                    raise bad
            elif node.attr not in _GUARD_TENSOR_ATTRS or not rooted_at_l(base):
                raise bad
        elif isinstance(node, ast.Subscript):
            key = node.slice
            if not rooted_at_l(node.value) or not isinstance(key, ast.Constant) or not (
                    type(key.value) is int or (isinstance(key.value, str)
                                               and _IDENT.fullmatch(key.value))):
                raise bad
        elif isinstance(node, ast.Call):
            if node.keywords or not isinstance(node.func, ast.Name | ast.Attribute):
                raise bad
        elif isinstance(node, ast.Constant):
            if type(node.value) not in (bool, int, float, str):
                raise bad
            if isinstance(node.value, str) and not _IDENT.fullmatch(node.value):
                raise bad  # only as a subscript key, checked above
        elif not isinstance(node, _PLAIN_NODES):
            raise bad


def check_program_json(program: Any, *, file: str, entry: str = _PROGRAM) -> None:
    """Refuse a ``models/model.json`` whose text torch would evaluate: every ``expr_str``
    must pass ``check_sym_expr``, every ``guards_code`` line ``check_guard_code``, every
    ``range_constraints`` key be a symbol name, and no JSON held in a string (pytree specs)
    may hold an ``__enum__`` object (torch imports the module it names)."""
    if not isinstance(program, dict) or not isinstance(program.get("graph_module"), dict):
        raise _refuse("is not a torch.export program (no graph_module)", file, entry)
    guards = program.get("guards_code", [])
    if not isinstance(guards, list):
        raise _refuse("guards_code is not a list", file, entry)
    for g in guards:
        check_guard_code(g, file=file, entry=entry)
    ranges = program.get("range_constraints", {})
    if not isinstance(ranges, dict) or not all(_IDENT.fullmatch(str(k)) for k in ranges):
        raise _refuse("range_constraints must map symbol names to ranges", file, entry)
    stack: list[tuple[Any, int]] = [(program, 0)]
    while stack:
        value, nested = stack.pop()
        if isinstance(value, dict):
            if "__enum__" in value:
                raise _refuse("a pytree context names an enum, which torch would import by "
                              "module name; refused", file, entry)
            for k, v in value.items():
                if k == "expr_str":
                    check_sym_expr(v, file=file, entry=entry)
                else:
                    stack.append((v, nested))
        elif isinstance(value, list):
            stack.extend((v, nested) for v in value)
        elif isinstance(value, str) and value[:1] in ("[", "{"):
            if nested >= _MAX_NESTED_JSON:
                raise _refuse(f"JSON text nested inside strings more than {_MAX_NESTED_JSON} "
                              f"levels deep", file, entry)
            try:
                inner = json.loads(value)
            except (ValueError, RecursionError):
                continue  # text, not JSON: torch does not parse it either
            _check_depth(inner, file, entry)
            stack.append((inner, nested + 1))


# ---- loading -----------------------------------------------------------------------------------

_FORCE = "TORCH_FORCE_WEIGHTS_ONLY_LOAD"
_NO_FORCE = "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"


@contextlib.contextmanager
def _weights_only_forced() -> Iterator[None]:
    """Every ``torch.load`` in this process is weights-only while inside (torch reads the
    variable on each call, so even a ``weights_only=False`` fallback cannot unpickle), and
    torch's export loggers are quiet (their tracebacks would go to stderr)."""
    saved = {k: os.environ.get(k) for k in (_FORCE, _NO_FORCE)}
    loggers = [logging.getLogger(n) for n in ("torch.export", "torch._export",
                                             "torch.export.pt2_archive._package",
                                             "torch._export.serde.serialize")]
    levels = [lg.level for lg in loggers]
    os.environ[_FORCE] = "1"
    os.environ.pop(_NO_FORCE, None)
    for lg in loggers:
        lg.setLevel(logging.CRITICAL + 1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        for lg, lv in zip(loggers, levels, strict=True):
            lg.setLevel(lv)


def _safe_functions() -> frozenset[Any]:
    import torch

    return frozenset({
        operator.getitem, operator.eq, operator.ne, operator.le, operator.ge, operator.lt,
        operator.gt, operator.neg, operator.pos, operator.mul, operator.add, operator.sub,
        operator.floordiv, operator.mod, operator.pow, operator.truediv, operator.and_,
        operator.or_, operator.lshift, operator.rshift, operator.not_, math.trunc, math.ceil,
        math.floor, math.sqrt, torch.sym_not, torch.sym_int, torch.sym_float, torch.sym_ite,
        torch.sym_max, torch.sym_min, torch.sym_sqrt, torch.sym_sum,
        torch._C._set_grad_enabled, torch.autograd.grad_mode.set_grad_enabled,
        torch.amp.autocast_mode._enter_autocast, torch.amp.autocast_mode._exit_autocast,
    })


#: higher-order operators whose only callables are the program's own subgraphs and ops
_SAFE_HOPS = frozenset({"cond", "while_loop", "map_impl", "scan", "associative_scan",
                        "wrap_with_set_grad_enabled", "wrap_with_autocast", "invoke_subgraph",
                        "auto_functionalized", "auto_functionalized_v2", "with_effects"})


def check_program(ep: ExportedProgram, *, file: str) -> None:
    """Refuse a loaded program that calls anything but torch operators (``OpOverload``),
    a few higher-order operators over its own subgraphs, and size arithmetic."""
    import torch
    from torch.fx import GraphModule, Node

    safe = _safe_functions()

    def allowed(fn: Any) -> bool:
        if isinstance(fn, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
            return True
        if isinstance(fn, torch._ops.HigherOrderOperator):
            return str(getattr(fn, "_name", "")) in _SAFE_HOPS
        try:
            return fn in safe
        except TypeError:  # unhashable
            return False

    def callables(arg: Any) -> Iterator[Any]:
        stack = [arg]
        while stack:
            a = stack.pop()
            if isinstance(a, list | tuple):
                stack.extend(a)
            elif isinstance(a, dict):
                stack.extend(a.values())
            elif callable(a) and not isinstance(a, Node | GraphModule | torch.Tensor | type):
                yield a

    for mod in ep.graph_module.modules():
        if not isinstance(mod, GraphModule):
            continue
        for node in mod.graph.nodes:
            where = f"fx node {node.name!r}"
            if node.op not in ("placeholder", "get_attr", "call_function", "output"):
                raise ModelFormatError(f"the program has a {node.op} node; torch.export "
                                       f"programs call only functions", file=file, place=where)
            if node.op != "call_function":
                continue
            if not allowed(node.target):
                raise ModelFormatError(f"the program calls {shorten(repr(node.target), 80)}, "
                                       f"which is not a torch operator; refused", file=file,
                                       place=where)
            for fn in callables((node.args, node.kwargs)):
                if not allowed(fn):
                    raise ModelFormatError(f"the program passes {shorten(repr(fn), 80)}, "
                                           f"which is not a torch operator; refused",
                                           file=file, place=where)


def read_pt2(path: str | os.PathLike[str]) -> ExportedProgram:
    """The ``torch.export.ExportedProgram`` saved at ``path``, read without running anything
    the file holds (module docstring); ``ModelFormatError`` otherwise, also for a file that
    is not a regular file, is larger than ``MAX_PT2_BYTES``, or that torch cannot load.
    Every reader of ``.pt2`` files in placewise goes through here."""
    file = os.fspath(path)
    data = read_file_bytes(file, what="torch.export program (.pt2)", limit_bytes=MAX_PT2_BYTES,
                           error=ModelFormatError)
    checked = check_pt2_archive(data, file=file)
    del data
    ep = _torch_load(checked, file)
    check_program(ep, file=file)
    return ep


def _torch_load(archive: bytes, file: str) -> ExportedProgram:
    import torch

    try:
        with _weights_only_forced():
            return torch.export.load(io.BytesIO(archive))
    except ModelFormatError:
        raise
    except Exception as e:
        raise ModelFormatError(f"torch.export.load failed: {type(e).__name__}: "
                               f"{shorten(str(e), 200)}", file=file) from None
