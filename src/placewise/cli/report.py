"""``placewise report``: one self-contained offline HTML report of a plan with its validation, serve and sweep results (the library is ``placewise.report``)."""

from __future__ import annotations

__all__: list[str] = []
