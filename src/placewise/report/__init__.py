"""What a reviewer reads: the operator-to-kernel mapping sheet (``report.sheet``) and the one
self-contained offline HTML report of a plan with its validation, serve and sweep results.

``load_inputs(paths)`` recognises each input file by its content (a plan, the JSON of
``validate --json``, of ``serve --json``, a ``placewise-sweep/1`` sweep; anything else, and
a result of another plan, is an ``InputError`` naming the file); ``build_report(inputs)``
returns the HTML text; ``report_sections`` the sections it holds.

**The file** is one HTML page that works offline from ``file://`` in any browser: every
style and script is inline, plotly.js once; the figures are one JSON document drawn with
``Plotly.newPlot``; a Content-Security-Policy forbids the page any request; every label is
escaped (``html.escape`` in HTML, ``\\uXXXX`` escapes of ``<``, ``>`` and ``&`` in the JSON
inside ``<script>``). A plan of 10k ops stays usable and well under 20 MB: the Gantt chart
merges tasks shorter than a pixel, the roofline and tables are capped and say how much they
left out, memory timelines are the plan's decimated envelopes.

**Why plotly.** The plotly wheel ships plotly.min.js (``plotly.offline.get_plotlyjs``), so
an offline, self-contained file is one read of a file already installed, and the figures
are plain JSON (no Python objects between the data and the page). Altair / Vega-Lite would
need three bundles (vega, vega-lite, vega-embed) that Altair does not ship: from a CDN
(a network request from the page, which the report must never make) or from an extra
package (``vl-convert``, a native binary) to inline them.

>>> from placewise.report.inputs import ReportInputs
>>> html = build_report(ReportInputs())
>>> html.startswith("<!DOCTYPE html>") and "absent: the plan" in html
True
"""

from placewise.report.build import Report, build_report, report_sections
from placewise.report.inputs import ReportInputs, load_inputs

__all__ = ["Report", "ReportInputs", "build_report", "load_inputs", "report_sections"]
