"""The messages between the executor and its workers, and between workers.

Parent <-> worker: control messages as JSON after a ``J`` byte (``put`` / ``get``), the
frequent ones (go / out / done) as 17 packed bytes (``put_hot``). Worker -> worker, on the
pipe of an ordered device pair: a transfer's note (``NOTE``: task, request, int8 scale) or
a core gate's token (``GATE``: 13 bytes, told apart by size). Workers on one thread leave
them in an ``Inbox`` instead. Nothing is pickled.

>>> class Pipe:
...     def send_bytes(self, b): self.data = b
...     def recv_bytes(self): return self.data
>>> p = Pipe()
>>> put_hot(p, b"D", 3, 7); get(p)
('done', 3, 7)
>>> put(p, "spin", 0.5, 0.0); get(p)
('spin', 0.5, 0.0)
"""

from __future__ import annotations

import json
import struct
from collections import deque
from typing import Any

__all__ = ["GATE", "NOTE", "Inbox", "get", "put", "put_hot"]

NOTE = struct.Struct("<iqd")  # task index, request, int8 scale (nan: none)
GATE = struct.Struct("<ciq")  # b"T", earlier task index, request (13 bytes: not a NOTE)
_HOT = struct.Struct("<cqq")  # go / out / done: tag, request, capture flag or time (ns)
_HOT_TAGS = {b"G": "go", b"O": "out", b"D": "done"}


def put(conn: Any, tag: str, *payload: Any) -> None:
    """A control message: JSON after a ``J`` byte."""
    conn.send_bytes(b"J" + json.dumps([tag, *payload], separators=(",", ":")).encode())


def put_hot(conn: Any, tag: bytes, a: int, b: int) -> None:
    """A frequent message (go / out / done) as 17 packed bytes."""
    conn.send_bytes(_HOT.pack(tag, a, b))


def get(conn: Any) -> tuple[Any, ...]:
    """The next message of ``conn`` as ``(tag, *payload)``."""
    data = conn.recv_bytes()
    if data[:1] == b"J":
        return tuple(json.loads(data[1:]))
    tag, a, b = _HOT.unpack(data)
    return _HOT_TAGS[tag], a, b


class Inbox:
    """A worker's mailbox for the workers on its own thread, used as their writing end
    towards it: a transfer note or a gate token is appended (not written to a pipe, whose
    poll alone costs 6 us here), and a transferred tensor is handed over as it is (the
    memory is the same: no copy through shared memory)."""

    __slots__ = ("box", "hand")

    def __init__(self) -> None:
        self.box: deque[bytes] = deque()
        #: (transfer task, request) -> the tensor
        self.hand: dict[tuple[int, int], Any] = {}

    def send_bytes(self, data: bytes) -> None:
        self.box.append(bytes(data))
