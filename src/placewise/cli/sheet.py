"""``placewise sheet``: the operator-to-kernel mapping sheet of a plan as CSV (the library is ``placewise.report.sheet``)."""

from __future__ import annotations

__all__: list[str] = []
