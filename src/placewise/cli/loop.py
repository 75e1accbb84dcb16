"""``placewise loop``: the command line of ``placewise.adapt`` (issue 16)."""

from __future__ import annotations

__all__: list[str] = []
