"""The report's parts as data: a ``Figure`` (a plotly figure as plain JSON: ``data`` traces
and ``layout``), a ``Table`` (header and rows of already formatted cells, with how many rows
were left out) and a ``Section`` holding them; plus the small formatting helpers the
builders share. Nothing here knows about HTML (``placewise.report.page`` renders).

>>> t = Table("t", ["a"], [["1"]], left_out=2)
>>> t.note()
'2 more rows not shown'
>>> time_unit(2e-4)
('us', 1000000.0)
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Any

from placewise.units import format_bytes, format_seconds

__all__ = ["COLORS", "Figure", "Section", "Table", "fmt_bytes", "fmt_num", "fmt_s", "label",
           "time_unit"]

# one colour per device / series, in order (plotly's default qualitative palette)
COLORS = ("#636efa", "#ef553b", "#00cc96", "#ab63fa", "#ffa15a", "#19d3f3", "#ff6692",
          "#b6e880", "#ff97ff", "#fecb52")


@dataclass
class Figure:
    """One plot: ``data`` and ``layout`` exactly as ``Plotly.newPlot`` takes them."""

    title: str
    data: list[dict[str, Any]]
    layout: dict[str, Any]
    note: str = ""


@dataclass
class Table:
    """A table of formatted cells; ``left_out``: rows not shown (the table is capped)."""

    title: str
    columns: list[str]
    rows: list[list[str]]
    left_out: int = 0
    caption: str = ""

    def note(self) -> str:
        return f"{self.left_out} more rows not shown" if self.left_out else ""


@dataclass
class Section:
    """A part of the report: an id (``plan``, ``gantt`` ...), a title, a paragraph of
    ``notes``, then its figures and tables."""

    key: str
    title: str
    figures: list[Figure] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def time_unit(span_s: float) -> tuple[str, float]:
    """The unit to draw a time axis of ``span_s`` seconds in, and its factor."""
    if span_s < 1e-3:
        return "us", 1e6
    if span_s < 1.0:
        return "ms", 1e3
    return "s", 1.0


def fmt_s(x: Any) -> str:
    """Seconds as text (``-`` for a missing value)."""
    return format_seconds(float(x)) if _finite(x) else "-"


def fmt_bytes(x: Any) -> str:
    return format_bytes(float(x)) if _finite(x) else "-"


def fmt_num(x: Any, digits: int = 4) -> str:
    if isinstance(x, bool):
        return "yes" if x else "no"
    return f"{float(x):.{digits}g}" if _finite(x) else "-"


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def label(x: Any) -> str:
    """Text for a plotly label. Plotly reads a few HTML tags and entities in its labels, so
    a label is HTML-escaped: it is shown as written and never read as markup."""
    return html.escape(str(x), quote=True)
