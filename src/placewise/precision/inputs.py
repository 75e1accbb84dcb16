"""Representative inputs for quality evidence and validation: a ``.npz`` file or generated.

``load_inputs(path, like)`` reads ``--inputs FILE.npz`` (``numpy.load`` with
``allow_pickle=False``: never unpickles): one array per model input, named as the input;
each array is either one request at the input's shape or ``N`` requests stacked along a
new leading axis; every array has the same ``N`` and exactly the input's dtype. ``like``
is one generated request (``runtime.opexec.request_inputs``) that gives the names, shapes
and dtypes. Anything else is an ``InputError`` naming the file, the array and the problem.

>>> import tempfile, os
>>> x = np.zeros((2, 3), np.float32)
>>> path = os.path.join(tempfile.mkdtemp(), "in.npz")
>>> np.savez(path, x=np.stack([x, x + 1, x + 2]))
>>> reqs = load_inputs(path, ["x"], [x])
>>> len(reqs), reqs[2][0][0, 0]
(3, np.float32(2.0))
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Sequence
from typing import Any

import numpy as np

from placewise.errors import InputError

__all__ = ["GENERATED", "MAX_INPUT_BYTES", "describe_generated", "load_inputs"]

#: the largest inputs file read (bytes on disk)
MAX_INPUT_BYTES = 2 * 2**30
#: how generated inputs are made (``runtime.opexec.request_inputs``)
GENERATED = ("standard normal floats; integers uniform below the size of every table they "
             "index (other integers, such as attention masks, are ones); booleans true")


def describe_generated(n: int, seed: int) -> str:
    """The plan's line for ``n`` generated requests from ``seed``."""
    return f"generated: {n} requests, seeds {seed}..{seed + n - 1} ({GENERATED})"


def load_inputs(path: str | os.PathLike[str], names: Sequence[str],
                like: Sequence[np.ndarray[Any, Any]]) -> list[list[np.ndarray[Any, Any]]]:
    """The requests (arrays in ``names`` order) of the ``.npz`` file at ``path``; see the
    module docstring."""
    file = os.fspath(path)
    if not os.path.isfile(file):
        raise InputError("no such inputs file", file=file)
    if os.path.getsize(file) > MAX_INPUT_BYTES:
        raise InputError(f"the inputs file is larger than {MAX_INPUT_BYTES} bytes", file=file)
    try:
        with np.load(file, allow_pickle=False) as data:
            arrays = {k: np.asarray(data[k]) for k in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as e:
        raise InputError(f"not a readable .npz file of arrays: {str(e).splitlines()[0][:160]}",
                         file=file) from None
    missing = [n for n in names if n not in arrays]
    extra = sorted(set(arrays) - set(names))
    if missing:
        raise InputError(f"no array for model input {missing[0]!r} (the file holds "
                         f"{', '.join(sorted(arrays)) or 'nothing'})", file=file,
                         place=f"array {missing[0]!r}")
    if extra:
        raise InputError(f"array {extra[0]!r} is not a model input (inputs: "
                         f"{', '.join(names)})", file=file, place=f"array {extra[0]!r}")
    count: int | None = None
    stacked: list[np.ndarray[Any, Any]] = []
    for name, ref in zip(names, like, strict=True):
        a = arrays[name]
        if a.dtype != ref.dtype:
            raise InputError(f"dtype {a.dtype} differs from the input's {ref.dtype}",
                             file=file, place=f"array {name!r}")
        if a.shape == ref.shape:
            a = a[None]
        elif a.shape[1:] != ref.shape or a.ndim != ref.ndim + 1 or a.shape[0] == 0:
            raise InputError(f"shape {list(a.shape)} is neither the input's {list(ref.shape)} "
                             f"nor N requests of it [N, {', '.join(map(str, ref.shape))}]",
                             file=file, place=f"array {name!r}")
        if count is not None and a.shape[0] != count:
            raise InputError(f"{a.shape[0]} requests, but the other arrays hold {count}",
                             file=file, place=f"array {name!r}")
        count = a.shape[0]
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            raise InputError("holds a NaN or an infinity", file=file, place=f"array {name!r}")
        stacked.append(a)
    n = count or 0
    return [[np.ascontiguousarray(a[k]) for a in stacked] for k in range(n)]
