"""A profile file as an ``ImportedProfile``: which tool wrote it (``detect_format``, from
its first bytes) and that tool's reader (``read_profile``). ``calibrate import`` and
``validate --measured`` read profiles through these alone."""

from __future__ import annotations

import importlib
import inspect
import os
from pathlib import Path
from typing import Any

from placewise.calibrate.imports.records import ImportedProfile
from placewise.errors import ProfileError
from placewise.io import read_file_range

__all__ = ["READERS", "detect_format", "read_profile"]

#: format -> (reader module, reader function, what it reads)
READERS = {
    "onnxruntime": ("placewise.calibrate.imports.onnxruntime", "read_onnxruntime",
                    "onnxruntime profile"),
    "trtexec": ("placewise.calibrate.imports.trtexec", "read_trtexec",
                "trtexec --exportProfile"),
    "torch.profiler": ("placewise.calibrate.imports.torch_trace", "read_torch_trace",
                       "torch.profiler trace"),
}
_PEEK_BYTES = 64 * 1024


def detect_format(path: str | os.PathLike[str]) -> str:
    """Which tool wrote the profile at ``path``, from its first bytes: onnxruntime (a
    list of events with ``"cat"``), trtexec (a list starting with ``{"count"`` or with
    per-layer ``"averageMs"``), torch.profiler (an object with ``"traceEvents"``);
    ``ProfileError`` otherwise."""
    path = os.fspath(path)
    if not os.path.lexists(path):
        raise ProfileError("no such file", file=path)
    text = _peek(path)
    if text.startswith("["):
        body = text[1:].lstrip()
        if body.startswith("{") and ('"count"' in body[:200] or '"averageMs"' in body
                                     or '"timeMs"' in body):
            return "trtexec"
        if '"cat"' in body or body.startswith("]"):
            return "onnxruntime"
    if text.startswith("{") and '"traceEvents"' in text:
        return "torch.profiler"
    if text.startswith("{") and '"Layers"' in text:
        raise ProfileError("a trtexec --exportLayerInfo file, not a profile: give it as "
                           "--layer-info beside its --exportProfile file", file=path)
    raise ProfileError("not a profile placewise reads (onnxruntime's profiling JSON, trtexec "
                       "--exportProfile, a torch.profiler Chrome trace)", file=path)


def _peek(path: str) -> str:
    """The first bytes of the regular file at ``path`` as text (the reader then reads it
    whole, through the input boundary)."""
    try:
        size = os.stat(path).st_size
    except OSError as exc:
        raise ProfileError(f"cannot read: {exc.strerror or exc}", file=path) from None
    head = read_file_range(path, 0, min(size, _PEEK_BYTES), what="profile",
                           error=ProfileError)
    return head.decode("utf-8", "replace").lstrip("\ufeff \t\r\n")


def read_profile(path: str | os.PathLike[str], *, layer_info: Path | None = None,
                 trtexec_log: Path | None = None, tool_version: str = "",
                 profiler_cost: str = "remove") -> ImportedProfile:
    """The profile at ``path`` read by its format's reader (imported only when needed).
    ``layer_info``/``trtexec_log``: trtexec's companion files (used for trtexec profiles
    only); ``tool_version``: the tool's version where the file does not say;
    ``profiler_cost``: ``remove`` or ``keep`` onnxruntime's per-node profiling cost."""
    path = os.fspath(path)
    fmt = detect_format(path)
    module, func, what = READERS[fmt]
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        raise ProfileError(f"{what} files are not supported yet by this placewise",
                           file=path) from None
    reader = getattr(mod, func, None)
    if reader is None:
        raise ProfileError(f"{what} files are not supported yet by this placewise", file=path)
    params = inspect.signature(reader).parameters
    kwargs: dict[str, Any] = {}
    if "tool_version" in params and tool_version:
        kwargs["tool_version"] = tool_version
    if "profiler_cost" in params:
        kwargs["profiler_cost"] = profiler_cost
    if fmt == "trtexec" and layer_info is not None:
        kwargs["layer_info_path"] = layer_info
    if fmt == "trtexec" and trtexec_log is not None:
        kwargs["log_path"] = trtexec_log
    prof: ImportedProfile = reader(path, **kwargs)
    return prof
