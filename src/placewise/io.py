"""The input and output boundary: every file placewise reads or writes goes through here.

**Reading.** ``read_file_bytes`` opens only regular files (after following symlinks: a link
to ``/dev/zero``, a FIFO, a directory or a device node is refused before anything is read)
no larger than a stated limit, and never reads more than that limit plus one byte, so a
file that grows while it is read cannot exhaust memory. ``read_text`` adds UTF-8 decoding;
``parse_json`` / ``load_json`` and ``parse_yaml`` / ``load_yaml`` parse with a nesting-depth
limit checked *before* parsing (so the parsers never recurse deeply), YAML by
``yaml.safe_load`` only and with a bound on its size once aliases are expanded (an alias
bomb is refused), and then ``check_numbers`` walks the result iteratively: ``NaN``,
``Infinity``, ``1e999`` and integers too large to be a float (``10**400``) are refused.
Every problem raises an ``InputError`` subclass (the caller chooses which) naming the file,
the place (``line 3 column 7``, ``devices[0].launch_overhead_s``) and the problem.

>>> parse_json('{"a": [1, 2.5]}', file="x.json")
{'a': [1, 2.5]}
>>> parse_json('{"a": [1, 1e999]}', file="x.json")
Traceback (most recent call last):
...
placewise.errors.InputError: x.json: a[1]: number 1e999 is not finite
>>> parse_json("[" * 100 + "]" * 100, file="x.json")
Traceback (most recent call last):
...
placewise.errors.InputError: x.json: nested more than 64 levels deep (placewise reads at most 64)

**Writing.** Outputs are written atomically (a temporary file in the same folder, then a
rename), so a failure never leaves a half-written file behind. ``check_output_path`` is the
rule every output obeys, checked before any work starts and again just before the rename:
the path is new or an existing *regular* file (a directory, a FIFO or a device node such as
``/dev/full`` is refused, never replaced), in a folder that is not under ``/proc`` or
``/sys``. Missing parent folders are still created (as before); a parent that cannot be
created or written is an ``InputError`` naming the path, never a raw ``OSError``.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import os
import re
import shutil
import stat
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from placewise.errors import InputError

__all__ = [
    "MAX_ABS",
    "MAX_DEPTH",
    "MAX_JSON_BYTES",
    "MAX_YAML_BYTES",
    "MAX_YAML_NODES",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "atomic_writer",
    "check_numbers",
    "check_output_path",
    "load_json",
    "load_yaml",
    "parse_json",
    "parse_yaml",
    "quiet",
    "read_file_bytes",
    "read_file_range",
    "read_text",
    "shorten",
    "validate_record",
]

#: deepest nesting of arrays/objects any placewise file may have (plans have 8)
MAX_DEPTH = 64
#: default size limit of a JSON file (plans, task graphs, calibrations)
MAX_JSON_BYTES = 256 * 1024 * 1024
#: default size limit of a YAML file (machine specs are a few kilobytes)
MAX_YAML_BYTES = 16 * 1024 * 1024
#: most YAML nodes a document may hold once its aliases are expanded
MAX_YAML_NODES = 1_000_000

#: the largest magnitude of any number in a file placewise reads
MAX_ABS = 1e100
_MAX_INT_DIGITS = 309  # more digits than this can never be a finite float

ErrorType = type[InputError]


# ---- reading files -------------------------------------------------------------------------
def _kind_of(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _size_text(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def read_file_bytes(path: str | os.PathLike[str], *, what: str, limit_bytes: int,
                    error: ErrorType = InputError) -> bytes:
    """The bytes of the regular file at ``path`` (symlinks followed), at most ``limit_bytes``.

    ``what`` names the kind of file in messages ("ONNX model", "plan"). A missing or
    unreadable path, a directory, FIFO, socket or device node, and a file larger than the
    limit raise ``error`` (an ``InputError`` subclass) naming the file. The file is opened
    non-blocking and checked again on the open descriptor, and at most ``limit_bytes + 1``
    bytes are ever read.

    >>> read_file_bytes("/dev/zero", what="ONNX model", limit_bytes=1 << 20)
    Traceback (most recent call last):
    ...
    placewise.errors.InputError: /dev/zero: is a character device, not a regular file; placewise reads an ONNX model only from a regular file
    """
    file = os.fspath(path)

    def refuse(mode: int) -> InputError:
        return error(f"is {_kind_of(mode)}, not a regular file; placewise reads {_a(what)} "
                     f"only from a regular file", file=file)

    try:
        st = os.stat(file)
    except FileNotFoundError:
        raise error("cannot read: no such file", file=file) from None
    except OSError as exc:
        raise error(f"cannot read: {exc.strerror or exc}", file=file) from None
    if not stat.S_ISREG(st.st_mode):
        raise refuse(st.st_mode)
    too_big = error(f"is {_size_text(st.st_size)}, more than {_a(what)} may hold "
                    f"({_size_text(limit_bytes)})", file=file)
    if st.st_size > limit_bytes:
        raise too_big
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise error(f"cannot read: {exc.strerror or exc}", file=file) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # swapped between stat and open
            raise refuse(st.st_mode)
        chunks: list[bytes] = []
        left = limit_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 24))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise error(f"cannot read: {exc.strerror or exc}", file=file) from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit_bytes:  # it grew while being read
        raise error(f"grew past {_size_text(limit_bytes)} while being read, more than "
                    f"{_a(what)} may hold", file=file)
    return data


def read_file_range(path: str | os.PathLike[str], offset: int, length: int, *, what: str,
                    error: ErrorType = InputError) -> bytes:
    """Exactly ``length`` bytes at ``offset`` of the regular file at ``path`` (symlinks
    followed; anything else, or a file too short, raises ``error``)."""
    file = os.fspath(path)
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error("cannot read: no such file", file=file) from None
    except OSError as exc:
        raise error(f"cannot read: {exc.strerror or exc}", file=file) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"is {_kind_of(st.st_mode)}, not a regular file; placewise reads "
                        f"{_a(what)} only from a regular file", file=file)
        if offset < 0 or length < 0 or offset + length > st.st_size:
            raise error(f"is {st.st_size} bytes, too short for {length} bytes at offset "
                        f"{offset}", file=file)
        data = os.pread(fd, length, offset)
    except OSError as exc:
        raise error(f"cannot read: {exc.strerror or exc}", file=file) from None
    finally:
        os.close(fd)
    if len(data) != length:
        raise error(f"shrank while being read ({len(data)} of {length} bytes)", file=file)
    return data


def _a(what: str) -> str:
    return ("an " if what[:1].lower() in "aeiou" else "a ") + what


def read_text(path: str | os.PathLike[str], *, what: str, limit_bytes: int,
              error: ErrorType = InputError) -> str:
    """``read_file_bytes`` decoded as UTF-8 (``error`` naming the byte that is not)."""
    data = read_file_bytes(path, what=what, limit_bytes=limit_bytes, error=error)
    return _decode(data, file=os.fspath(path), error=error)


def _decode(data: bytes, *, file: str, error: ErrorType) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"not UTF-8 text: {exc.reason} at byte {exc.start}", file=file) from None


# ---- numbers and depth ---------------------------------------------------------------------
class _BadNumber:
    """A JSON number literal that is not a finite float (kept as text until it is placed)."""

    __slots__ = ("problem",)

    def __init__(self, text: str, problem: str = "number {} is not finite") -> None:
        self.problem = problem.format(text)


def _path_text(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "top level"


def check_numbers(data: Any, *, file: str | None, error: ErrorType = InputError,
                  max_depth: int = MAX_DEPTH, max_abs: float = MAX_ABS) -> None:
    """Refuse, naming the place, any non-finite float (NaN, inf), any number larger in
    magnitude than ``max_abs`` (default 1e100: no placewise file comes near it, and the
    headroom means no unit conversion or sum can overflow), and nesting deeper than
    ``max_depth``; walks ``data`` iteratively.

    >>> check_numbers({"tiers": [{"capacity_bytes": 10**400}]}, file="m.yaml")
    Traceback (most recent call last):
    ...
    placewise.errors.InputError: m.yaml: tiers[0].capacity_bytes: the integer 1000000000...(401 digits) is too large (placewise reads numbers up to 1e+100)
    """
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(data, ())]
    seen: set[int] = set()
    while stack:
        value, path = stack.pop()
        if isinstance(value, bool) or value is None or isinstance(value, str):
            continue
        if isinstance(value, float):
            if not math.isfinite(value):
                raise error(f"number {value!r} is not finite", file=file,
                            place=_path_text(path))
            if abs(value) > max_abs:
                raise error(f"number {value!r} is too large (placewise reads numbers up to "
                            f"{max_abs:g})", file=file, place=_path_text(path))
            continue
        if isinstance(value, int):
            if abs(value) > max_abs:
                raise error(f"the integer {_int_text(value)} is too large (placewise reads "
                            f"numbers up to {max_abs:g})", file=file, place=_path_text(path))
            continue
        if isinstance(value, _BadNumber):
            raise error(value.problem, file=file, place=_path_text(path))
        if isinstance(value, dict | list):
            if len(path) >= max_depth:
                raise error(f"nested more than {max_depth} levels deep (placewise reads at "
                            f"most {max_depth})", file=file, place=_path_text(path))
            if id(value) in seen:  # a YAML alias: already checked
                continue
            seen.add(id(value))
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for k, v in items:
                key = k if isinstance(k, int | str) else repr(k)
                if isinstance(value, dict) and isinstance(k, float | int) \
                        and not isinstance(k, bool):
                    stack.append((k, (*path, f"{key} (the key)")))
                stack.append((v, (*path, key)))


def _int_text(n: int) -> str:
    digits = len(str(abs(n))) if abs(n).bit_length() < 14000 else None
    if digits is None:
        return f"of {abs(n).bit_length()} bits"
    text = str(n)
    return text if len(text) <= 20 else f"{text[:10]}...({digits} digits)"


_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)


def _json_depth(text: str | bytes) -> int:
    """The deepest bracket nesting of JSON text, strings left out (never recurses)."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if b"[" not in raw and b"{" not in raw:
        return 0
    import numpy as np

    brackets = _JSON_STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    deepest, level = 0, 0
    for start in range(0, len(brackets), 1 << 22):  # bounded memory for any size
        arr = np.frombuffer(brackets, dtype=np.uint8, count=min(1 << 22,
                            len(brackets) - start), offset=start)
        steps = np.where((arr == ord("[")) | (arr == ord("{")), 1, -1).astype(np.int64)
        run = np.cumsum(steps) + level
        deepest = max(deepest, int(run.max()))
        level = int(run[-1])
    return deepest


_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def _parse_int(text: str) -> int | _BadNumber:
    if len(text.lstrip("-")) > _MAX_INT_DIGITS:
        return _BadNumber(f"{text[:10]}...({len(text.lstrip('-'))} digits)",
                          "the integer {} is too large (placewise reads numbers up to "
                          f"{MAX_ABS:g})")
    return int(text)


def _parse_float(text: str) -> float | _BadNumber:
    v = float(text)
    if not math.isfinite(v):
        return _BadNumber(text if len(text) <= 24 else text[:21] + "...")
    return v


def parse_json(text: str | bytes, *, file: str | None, error: ErrorType = InputError,
               max_depth: int = MAX_DEPTH) -> Any:
    """JSON text -> Python data, with a nesting limit checked before parsing and finite
    numbers (no ``NaN``, ``Infinity``, ``1e999`` or integers beyond the float range),
    none beyond ``MAX_ABS`` (``check_numbers`` names the place of the first such number;
    it walks the data only when the parser met one).

    >>> parse_json('{"a": [1, 2.5]}', file="f.json")
    {'a': [1, 2.5]}
    >>> parse_json('{"a": [1, 1e300]}', file="f.json")
    Traceback (most recent call last):
    ...
    placewise.errors.InputError: f.json: a[1]: number 1e+300 is too large (placewise reads numbers up to 1e+100)
    """
    if isinstance(text, bytes):
        text = _decode(text, file=file or "<json>", error=error)
    if _json_depth(text) > max_depth:
        raise error(f"nested more than {max_depth} levels deep (placewise reads at most "
                    f"{max_depth})", file=file)
    bad: list[_BadNumber] = []  # the number hooks note every refusal while parsing

    def parse_int(text: str) -> int | _BadNumber:
        if len(text) < 20:  # at most 19 digits: far below MAX_ABS
            return int(text)
        v = _parse_int(text)
        if isinstance(v, _BadNumber) or abs(v) > MAX_ABS:
            v = v if isinstance(v, _BadNumber) else _BadNumber(
                "", f"the integer {_int_text(v)} is too large (placewise reads numbers up "
                    f"to {MAX_ABS:g})")
            bad.append(v)
        return v

    def parse_float(text: str) -> float | _BadNumber:
        f = float(text)
        if abs(f) <= MAX_ABS:  # finite and in range (NaN compares false)
            return f
        v = _parse_float(text)
        bad.append(v if isinstance(v, _BadNumber) else _BadNumber(""))
        return v

    def parse_constant(text: str) -> _BadNumber:
        bad.append(_BadNumber(text))
        return bad[-1]

    try:
        data = json.loads(text, parse_int=parse_int, parse_float=parse_float,
                          parse_constant=parse_constant)
    except json.JSONDecodeError as exc:
        raise error(f"not valid JSON: {exc.msg}", file=file,
                    place=f"line {exc.lineno} column {exc.colno}") from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise error(f"not valid JSON: {type(exc).__name__}: {shorten(str(exc))}",
                    file=file) from None
    if bad:  # walk the data to name the place (nesting was checked before parsing)
        check_numbers(data, file=file, error=error, max_depth=max_depth)
    return data


def load_json(path: str | os.PathLike[str], *, what: str, error: ErrorType = InputError,
              limit_bytes: int = MAX_JSON_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """``read_file_bytes`` then ``parse_json``: the one way placewise reads a JSON file."""
    file = os.fspath(path)
    data = read_file_bytes(file, what=what, limit_bytes=limit_bytes, error=error)
    return parse_json(_decode(data, file=file, error=error), file=file, error=error,
                      max_depth=max_depth)


def shorten(text: str, limit: int = 160) -> str:
    """``text`` on one line, cut to ``limit`` characters with "..." (for messages).

    >>> shorten("a   b  c", 4), shorten("a   b  c")
    ('a...', 'a b c')
    """
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---- YAML ------------------------------------------------------------------------------------
def _yaml_error(exc: Exception, *, file: str | None, error: ErrorType) -> InputError:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    place = f"line {mark.line + 1}, column {mark.column + 1}" if mark else None
    problem = getattr(exc, "problem", None) or shorten(str(exc)) or "invalid YAML"
    return error(f"invalid YAML: {problem}", file=file, place=place)


def _yaml_shape(text: str, *, file: str | None, error: ErrorType, max_depth: int,
                max_nodes: int) -> None:
    """Walk the YAML event stream (an iterative parser) and refuse documents nested deeper
    than ``max_depth`` or holding more than ``max_nodes`` nodes once aliases are expanded."""
    import yaml

    def mark_place(ev: Any) -> str | None:
        m = getattr(ev, "start_mark", None)
        return f"line {m.line + 1}, column {m.column + 1}" if m else None

    sizes: dict[str, int] = {}
    stack: list[list[Any]] = []  # [anchor, expanded node count]
    total = 0
    docs = 0
    for ev in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(ev, yaml.DocumentStartEvent):
            docs += 1
            if docs > 1:
                raise error("holds more than one YAML document", file=file,
                            place=mark_place(ev))
            continue
        if isinstance(ev, yaml.ScalarEvent | yaml.AliasEvent):
            n = 1 if isinstance(ev, yaml.ScalarEvent) else sizes.get(ev.anchor or "", 1)
            anchor = getattr(ev, "anchor", None)
            if isinstance(ev, yaml.ScalarEvent) and anchor:
                sizes[anchor] = 1
        elif isinstance(ev, yaml.CollectionStartEvent):
            if len(stack) >= max_depth:
                raise error(f"nested more than {max_depth} levels deep (placewise reads at "
                            f"most {max_depth})", file=file, place=mark_place(ev))
            stack.append([ev.anchor, 1])
            continue
        elif isinstance(ev, yaml.CollectionEndEvent):
            anchor, n = stack.pop()
            if anchor:
                sizes[anchor] = n
        else:
            continue
        if stack:
            stack[-1][1] += n
        total += n if not stack else 0
        if (stack and stack[-1][1] > max_nodes) or total > max_nodes:
            raise error(f"holds more than {max_nodes} values once its aliases are expanded "
                        f"(an alias bomb?)", file=file, place=mark_place(ev))


def parse_yaml(text: str, *, file: str | None, error: ErrorType = InputError,
               max_depth: int = MAX_DEPTH, max_nodes: int = MAX_YAML_NODES,
               check: bool = True) -> Any:
    """YAML text -> Python data by ``yaml.safe_load`` only, after the event stream showed it
    is one document, no deeper than ``max_depth`` and no larger than ``max_nodes`` with its
    aliases expanded; numbers then checked finite by ``check_numbers`` (``check=False``: the
    caller's schema checks them, e.g. a pydantic model that refuses inf and NaN).

    >>> parse_yaml("a: &x [1, 2]\\nb: *x\\n", file="m.yaml")
    {'a': [1, 2], 'b': [1, 2]}
    >>> parse_yaml("launch_s: .inf\\n", file="m.yaml")
    Traceback (most recent call last):
    ...
    placewise.errors.InputError: m.yaml: launch_s: number inf is not finite
    """
    import yaml

    try:
        _yaml_shape(text, file=file, error=error, max_depth=max_depth, max_nodes=max_nodes)
        data = yaml.safe_load(text)
    except InputError:
        raise
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, file=file, error=error) from None
    except (ValueError, TypeError, OverflowError, RecursionError, MemoryError) as exc:
        # e.g. a timestamp with month 13, "!!float abc"
        raise error(f"invalid YAML: {type(exc).__name__}: {shorten(str(exc))}",
                    file=file) from None
    if check:
        check_numbers(data, file=file, error=error, max_depth=max_depth)
    return data


def load_yaml(path: str | os.PathLike[str], *, what: str, error: ErrorType = InputError,
              limit_bytes: int = MAX_YAML_BYTES, max_depth: int = MAX_DEPTH,
              max_nodes: int = MAX_YAML_NODES, check: bool = True) -> Any:
    """``read_text`` then ``parse_yaml``: the one way placewise reads a YAML file."""
    file = os.fspath(path)
    text = read_text(file, what=what, limit_bytes=limit_bytes, error=error)
    return parse_yaml(text, file=file, error=error, max_depth=max_depth, max_nodes=max_nodes,
                      check=check)


# ---- writing -------------------------------------------------------------------------------
_VIRTUAL_ROOTS = ("/proc", "/sys")


def check_output_path(path: str | os.PathLike[str], *, place: str | None = None) -> Path:
    """``InputError`` unless ``path`` may be written: new or an existing regular file (a
    symlink is judged by what it points to), in a folder that exists or can be created and
    is not under ``/proc`` or ``/sys``. Returns the path.

    >>> check_output_path("/dev/null")
    Traceback (most recent call last):
    ...
    placewise.errors.InputError: /dev/null: exists and is a character device, not a regular file; placewise never replaces it: write to a regular file or a new path
    """
    target = Path(os.fspath(path))
    file = str(target)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        raise InputError("a parent of this path is not a folder", file=file,
                         place=place) from None
    except OSError as exc:
        raise InputError(f"cannot use this output path: {exc.strerror or exc}", file=file,
                         place=place) from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise InputError(f"exists and is {_kind_of(st.st_mode)}, not a regular file; "
                         f"placewise never replaces it: write to a regular file or a new "
                         f"path", file=file, place=place)
    folder = os.path.realpath(os.path.dirname(os.path.abspath(file)))
    for root in _VIRTUAL_ROOTS:
        if folder == root or folder.startswith(root + os.sep):
            raise InputError(f"is under {root}, a kernel file system, not a place to write "
                             f"files", file=file, place=place)
    probe = folder
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if not os.path.isdir(probe):
        raise InputError(f"cannot create the folder: {probe!r} is not a folder", file=file,
                         place=place)
    if not os.access(probe, os.W_OK | os.X_OK):
        what = "the folder" if probe == folder else f"the folder {probe!r}"
        raise InputError(f"cannot write here: {what} is not writable", file=file,
                         place=place)
    return target


def atomic_writer(path: str | os.PathLike[str], write: Callable[[Path], object], *,
                  keep_name: bool = False) -> Path:
    """Call ``write(tmp_path)`` then rename ``tmp_path`` over ``path``; clean up on failure.

    ``path`` must pass ``check_output_path`` (checked first and again just before the
    rename). Missing parent folders are created. With ``keep_name`` the temporary file has
    the destination's own name inside a fresh hidden folder (a .pt2 archive takes its inner
    folder name from the file name). An ``OSError`` while creating, writing or renaming
    (no space left, read-only file system) becomes an ``InputError`` naming the path.
    """
    target = check_output_path(path)
    file = str(target)
    folder = target.parent if str(target.parent) else Path(".")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create the folder {str(folder)!r}: {exc.strerror or exc}",
                         file=file) from None
    tmpdir: str | None = None
    try:
        if keep_name:
            tmpdir = tempfile.mkdtemp(prefix=f".{target.name}.", dir=folder)
            tmp = os.path.join(tmpdir, target.name)
        else:
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
            os.close(fd)
    except OSError as exc:
        raise InputError(f"cannot write in the folder {str(folder)!r}: "
                         f"{exc.strerror or exc}", file=file) from None
    try:
        write(Path(tmp))
        check_output_path(target)  # nothing swapped in meanwhile
        os.replace(tmp, target)
    except OSError as exc:
        raise InputError(f"cannot write the file: {exc.strerror or exc}", file=file) from None
    finally:
        if tmpdir is not None:
            shutil.rmtree(tmpdir, ignore_errors=True)
        else:
            Path(tmp).unlink(missing_ok=True)
    return target


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    def write(p: Path) -> None:
        p.write_bytes(data)

    atomic_writer(path, write)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> None:
    """Deterministic JSON: sorted keys, two-space indent, trailing newline."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


_R = TypeVar("_R")


def place_of(loc: Sequence[int | str]) -> str:
    """A pydantic error location as a place: ``devices[0].memory`` (``(top level)``)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part == "[key]":
            out += " (key)"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def validate_record(cls: Any, obj: Any, *, file: str | None,
                    error: type[InputError] = InputError) -> Any:
    """``cls.model_validate_json`` (a pydantic model, strict) of the parsed object ``obj``;
    the first problem as ``error`` naming ``file`` and its place (with how many more)."""
    from pydantic import ValidationError

    try:
        return cls.model_validate_json(json.dumps(obj, allow_nan=False), strict=True)
    except ValidationError as exc:
        first = exc.errors()[0]
        more = exc.error_count() - 1
        problem = first["msg"] + (f" (and {more} more problem{'s' if more > 1 else ''})"
                                  if more > 0 else "")
        raise error(problem, file=file, place=place_of(first["loc"])) from None


@contextlib.contextmanager
def quiet(*loggers: str, level: int = logging.ERROR) -> Iterator[None]:
    """Silence third-party chatter while the block runs: warnings, anything printed to
    stdout/stderr, and the named loggers below ``level`` (the root logger when none is
    named). The library never prints; exporters, quantizers and shape inference do.

    >>> with quiet():
    ...     print("not shown")
    """
    names = list(loggers) or [""]
    logs = [logging.getLogger(n) if n else logging.getLogger() for n in names]
    levels = [lg.level for lg in logs]
    sink = io.StringIO()
    try:
        for lg in logs:
            lg.setLevel(level)
        with warnings.catch_warnings(), contextlib.redirect_stdout(sink), \
                contextlib.redirect_stderr(sink):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, lv in zip(logs, levels, strict=True):
            lg.setLevel(lv)
