"""``placewise sweep``: plan every cell of models x platforms x batches, the fit matrix, curves, regret and sensitivity; rendered here (the library is ``placewise.sweep``)."""

from __future__ import annotations

__all__: list[str] = []
