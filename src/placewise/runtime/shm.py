"""The executor's shared-memory block: a status row per worker, then one slot per request in
flight for every graph input, graph output and transfer (``layout``), each slot aligned to
64 bytes. The parent creates the block (``SHM_PREFIX`` names it), every worker maps it; the
views (``Slot.view``) are numpy arrays on it.

>>> s = Slot((0, 64), (2, 3), "float32", 24)
>>> buf = bytearray(128)
>>> s.view(buf, 1).shape, s.view(buf, 1).dtype.name
((2, 3), 'float32')
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from placewise.errors import UnsupportedError
from placewise.runtime.program import ExecProgram
from placewise.units import DType

__all__ = ["SHM_PREFIX", "STATUS_WORDS", "Layout", "Slot", "layout", "status_rows"]

#: every shared-memory segment the executor creates is named ``/dev/shm/placewise-...``
SHM_PREFIX = "placewise-"
#: per worker: state, task, request, t_start_ns, -, pid, -, -
STATUS_WORDS = 8
_ALIGN = 64
_NP_DTYPES = {DType.FP32: "float32", DType.FP16: "float16", DType.FP64: "float64",
              DType.INT8: "int8", DType.UINT8: "uint8", DType.INT16: "int16",
              DType.INT32: "int32", DType.INT64: "int64", DType.BOOL: "bool"}


def _align(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


@dataclass(frozen=True, slots=True)
class Slot:
    """A tensor's slots: ``offsets[slot]`` into the block, its shape, numpy dtype name and
    bytes."""

    offsets: tuple[int, ...]
    shape: tuple[int, ...]
    dtype: str
    nbytes: int

    def view(self, buf: Any, slot: int) -> np.ndarray[Any, Any]:
        """The numpy array of slot ``slot`` on ``buf`` (the block's buffer)."""
        return np.ndarray(self.shape, dtype=np.dtype(self.dtype), buffer=buf,
                          offset=self.offsets[slot])

    def views(self, buf: Any) -> list[np.ndarray[Any, Any]]:
        return [self.view(buf, i) for i in range(len(self.offsets))]


@dataclass(frozen=True, slots=True)
class Layout:
    """Where everything lies in the block: its size, and the slots of the graph inputs,
    graph outputs and transfers (by task index)."""

    size_bytes: int
    inputs: dict[str, Slot]
    outputs: dict[str, Slot]
    xfers: dict[int, Slot]


def _np_dtype(dtype: DType) -> str:
    try:
        return _NP_DTYPES[dtype]
    except KeyError:
        raise UnsupportedError(f"the executor cannot hold {dtype.value} tensors in shared "
                               f"memory") from None


def layout(program: ExecProgram, slots: int, n_workers: int) -> Layout:
    """The block of ``program`` with ``slots`` requests in flight and ``n_workers`` status
    rows."""
    g = program.graph
    pos = _align(n_workers * STATUS_WORDS * 8)

    def region(shape: tuple[int, ...], dtype: DType) -> Slot:
        nonlocal pos
        nbytes = dtype.nbytes(math.prod(shape))
        offs = []
        for _ in range(slots):
            offs.append(pos)
            pos += _align(max(nbytes, 1))
        return Slot(tuple(offs), shape, _np_dtype(dtype), nbytes)

    ins = {t: region(g.tensor(t).concrete_shape, g.tensor(t).dtype) for t in g.inputs}
    outs = {t: region(g.tensor(t).concrete_shape, g.tensor(t).dtype) for t in g.outputs}
    xfers: dict[int, Slot] = {}
    for t in program.transfers():
        assert t.tensor is not None and t.src_rep is not None
        xfers[t.index] = region(g.tensor(t.tensor).concrete_shape, t.src_rep.dtype)
    return Layout(max(pos, _ALIGN), ins, outs, xfers)


def status_rows(buf: Any, n_workers: int) -> np.ndarray[Any, Any]:
    """The workers' status rows at the start of the block (one row of ``STATUS_WORDS``
    int64 per worker)."""
    return np.ndarray((n_workers, STATUS_WORDS), dtype=np.int64, buffer=buf, offset=0)
