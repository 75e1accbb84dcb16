"""Data types, layouts, sizes and unit parsing/formatting.

>>> DType.INT4.nbytes(10)
5
>>> DType.FP32.nbytes(3)
12
>>> parse_bytes("1.5 GiB")
1610612736
>>> format_bytes(1536)
'1.50 KiB'
>>> format_seconds(0.0000125)
'12.5 us'
"""

from __future__ import annotations

import math
import re
from enum import Enum

from placewise.errors import InputError

__all__ = [
    "DType",
    "Layout",
    "format_bytes",
    "format_flops",
    "format_seconds",
    "parse_bytes",
    "parse_dims",
    "parse_options",
    "parse_seconds",
]


class DType(Enum):
    """Element types, with their storage width in bits (int4 is packed two per byte)."""

    BOOL = "bool"
    INT4 = "int4"
    UINT4 = "uint4"
    INT8 = "int8"
    UINT8 = "uint8"
    INT16 = "int16"
    INT32 = "int32"
    INT64 = "int64"
    FP8_E4M3 = "fp8_e4m3"
    FP8_E5M2 = "fp8_e5m2"
    BF16 = "bf16"
    FP16 = "fp16"
    FP32 = "fp32"
    FP64 = "fp64"

    @property
    def bits(self) -> int:
        return _BITS[self]

    @property
    def is_float(self) -> bool:
        return self in _FLOATS

    def nbytes(self, numel: int) -> int:
        """Bytes to store ``numel`` elements (sub-byte types are packed, rounded up)."""
        return (numel * self.bits + 7) // 8

    @classmethod
    def parse(cls, text: str) -> DType:
        key = text.strip().lower()
        key = _ALIASES.get(key, key)
        try:
            return cls(key)
        except ValueError:
            known = ", ".join(d.value for d in cls)
            raise ValueError(f"unknown dtype {text!r} (known: {known})") from None


_BITS = {
    DType.BOOL: 8, DType.INT4: 4, DType.UINT4: 4, DType.INT8: 8, DType.UINT8: 8,
    DType.INT16: 16, DType.INT32: 32, DType.INT64: 64, DType.FP8_E4M3: 8, DType.FP8_E5M2: 8,
    DType.BF16: 16, DType.FP16: 16, DType.FP32: 32, DType.FP64: 64,
}
_FLOATS = {DType.FP8_E4M3, DType.FP8_E5M2, DType.BF16, DType.FP16, DType.FP32, DType.FP64}
_ALIASES = {
    "float32": "fp32", "float": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16",
    "float64": "fp64", "double": "fp64", "fp8": "fp8_e4m3", "float8_e4m3fn": "fp8_e4m3",
    "float8_e5m2": "fp8_e5m2", "long": "int64", "int": "int32",
}


class Layout(Enum):
    """How a tensor's elements are ordered in memory."""

    ROW_MAJOR = "row_major"  # plain contiguous (C order); the default for non-image tensors
    NCHW = "nchw"
    NHWC = "nhwc"


_BYTE_UNITS = {
    "": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}


def parse_bytes(text: str | int | float) -> int:
    """Parse ``"16 GiB"``, ``"512MB"`` or a plain number of bytes."""
    if isinstance(text, int | float):
        return int(text)
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).lower() not in _BYTE_UNITS:
        raise ValueError(f"cannot parse byte size {text!r}")
    return int(float(m.group(1)) * _BYTE_UNITS[m.group(2).lower()])


def parse_dims(text: str) -> tuple[int, ...]:
    """Parse ``"1x3x224x224"`` or ``"1,3,224,224"`` into a shape.

    >>> parse_dims("2x128")
    (2, 128)
    """
    parts = [p for p in re.split(r"[x,\s]+", text.strip()) if p]
    if not parts:
        raise ValueError(f"empty shape {text!r}")
    dims: list[int] = []
    for p in parts:
        if not p.isdigit():
            raise ValueError(f"shape {text!r}: dimension {p!r} is not a non-negative integer")
        dims.append(int(p))
    return tuple(dims)


def format_bytes(n: float) -> str:
    if n < 1024:
        return f"{int(n)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024.0
        if n < 1024 or unit == "TiB":
            return f"{n:.2f} {unit}"
    raise AssertionError("unreachable")


def format_seconds(s: float) -> str:
    if s == 0:
        return "0 s"
    a = abs(s)
    if a >= 1:
        return f"{s:.3g} s"
    if a >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    if a >= 1e-6:
        return f"{s * 1e6:.3g} us"
    return f"{s * 1e9:.3g} ns"


def format_flops(f: float) -> str:
    if f == 0 or not math.isfinite(f):
        return f"{f:g}"
    for unit, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(f) >= scale:
            return f"{f / scale:.3g} {unit}"
    return f"{f:.3g} "


_SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


def parse_seconds(text: str, place: str) -> float:
    """A duration: ``2ms``, ``0.5s``, ``300us`` or a plain number of seconds
    (``InputError`` at ``place`` otherwise).

    >>> parse_seconds("2ms", "--slo"), parse_seconds("0.5", "--slo")
    (0.002, 0.5)
    """
    m = re.fullmatch(r"([0-9]*\.?[0-9]+(?:e-?[0-9]+)?)(s|ms|us)?", text.strip())
    if m is None:
        raise InputError(f"{text!r} is not a duration (e.g. 2ms, 0.5s)", place=place)
    return float(m.group(1)) * _SECONDS[m.group(2) or "s"]


def parse_options(args: str, place: str, kinds: dict[str, str]) -> dict[str, float | int]:
    """``KEY=VALUE,KEY=VALUE`` where each key's value is of its kind: ``positive`` (a finite
    number > 0), ``priority`` (an integer >= 1, 1 the highest) or ``seconds`` (a duration
    > 0, ``parse_seconds``). ``InputError`` at ``place`` (and the key) for an unknown key
    or a bad value.

    >>> parse_options("rate=30,slo_p99=20ms", "--stream a",
    ...               {"rate": "positive", "slo_p99": "seconds", "priority": "priority"})
    {'rate': 30.0, 'slo_p99': 0.02}
    """
    out: dict[str, float | int] = {}
    for part in filter(None, args.split(",")):
        key, sep, value = part.partition("=")
        if not sep or key not in kinds:
            raise InputError(f"unknown option {part!r} (known: {', '.join(kinds)})",
                             place=place)
        at, kind = f"{place} {key}", kinds[key]
        if kind == "priority":
            if not value.strip().isdigit() or int(value) < 1:
                raise InputError(f"{key} must be an integer >= 1 (1 = highest), got "
                                 f"{value!r}", place=at)
            out[key] = int(value)
        elif kind == "seconds":
            out[key] = parse_seconds(value, at)
            if not out[key] > 0:
                raise InputError(f"{key} must be > 0, got {value!r}", place=at)
        else:
            try:
                x = float(value)
            except ValueError:
                x = math.nan
            if not (math.isfinite(x) and x > 0):
                raise InputError(f"{key} must be a number > 0, got {value!r}", place=at)
            out[key] = x
    return out
