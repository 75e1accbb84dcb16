"""Small file helpers shared by the parts that write artifacts.

Outputs are written atomically (temporary file in the same folder, then rename), so a
failure never leaves a half-written file behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["atomic_write_bytes", "atomic_write_json", "atomic_write_text", "atomic_writer"]


def atomic_writer(path: str | Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp_path)`` then rename ``tmp_path`` over ``path``; clean up on failure."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    def write(p: Path) -> None:
        p.write_bytes(data)

    atomic_writer(path, write)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any) -> None:
    """Deterministic JSON: sorted keys, two-space indent, trailing newline."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")
