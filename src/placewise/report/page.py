"""The report as one HTML file: every style and script inline (plotly.js from the plotly
package, once), the figures as one JSON document drawn by ``Plotly.newPlot`` calls, and a
Content-Security-Policy that lets the page load nothing from anywhere.

Escaping: every text that reaches HTML goes through ``html.escape`` (tables, titles, notes;
the builders escape labels themselves, see ``placewise.report.model.label``); the figures'
JSON is written with ``<``, ``>``, ``&`` and the JavaScript line separators as ``\\uXXXX``
escapes, so that nothing in it (``</script>``, ``<!--``) can end or change the script
element it sits in.

>>> script_json({"a": "</script><!--"})
'{"a":"\\\\u003c/script\\\\u003e\\\\u003c!--"}'
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from placewise.report.model import Figure, Section, Table

__all__ = ["CSP", "plotly_js", "render_page", "script_json"]

CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
       "img-src data: blob:; font-src data:; connect-src 'none'; base-uri 'none'; "
       "form-action 'none'")

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2330;
background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:18px 28px}
header h1{margin:0;font-size:20px}header p{margin:4px 0 0;color:#c8cdd8}
main{padding:8px 28px 40px;max-width:1500px}
nav{margin:14px 0;padding:10px 14px;background:#fff;border:1px solid #dde1e8;border-radius:6px}
nav a{margin-right:14px;white-space:nowrap}
section{background:#fff;border:1px solid #dde1e8;border-radius:6px;margin:16px 0;
padding:6px 18px 16px}
h2{font-size:17px;margin:12px 0 6px}h3{font-size:14px;margin:14px 0 4px}
.note{color:#5b6473;margin:2px 0 8px}.absent{color:#7a5b00}
.plot{width:100%;min-height:260px}
.tablewrap{max-height:520px;overflow:auto;border:1px solid #e3e6ec}
table{border-collapse:collapse;font-size:12.5px;width:100%}
th,td{padding:3px 8px;border-bottom:1px solid #eceef2;text-align:left;vertical-align:top}
th{position:sticky;top:0;background:#f0f2f5}
td{font-variant-numeric:tabular-nums}
"""

_DRAW = """
(function(){
  var figs = JSON.parse(document.getElementById("pw-figures").textContent);
  var jobs = figs.map(function(f){
    return Plotly.newPlot(document.getElementById(f.id), f.data, f.layout,
                          {responsive: true, displaylogo: false});
  });
  Promise.all(jobs).then(function(){
    document.body.setAttribute("data-rendered", String(figs.length));
  }, function(e){ console.error("placewise report: a figure failed: " + e); });
})();
"""


@lru_cache(maxsize=1)
def plotly_js() -> str:
    """plotly.min.js as shipped in the plotly wheel, made safe to inline."""
    # lazy: plotly is heavy to import, loaded only when this runs
    from plotly.offline import get_plotlyjs

    return get_plotlyjs().replace("</script", "<\\/script").replace("<!--", "<\\!--")


def _clean(x: Any) -> Any:
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    return x


def script_json(obj: Any) -> str:
    """JSON text safe inside a ``<script>`` element (non-finite numbers become null)."""
    text = json.dumps(_clean(obj), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _table(t: Table) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in t.columns)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in t.rows)
    parts = [f"<h3>{html.escape(t.title)}</h3>"]
    if t.caption:
        parts.append(f'<p class="note">{html.escape(t.caption)}</p>')
    parts.append(f'<div class="tablewrap"><table><thead><tr>{head}</tr></thead>'
                 f"<tbody>{body}</tbody></table></div>")
    if t.left_out:
        parts.append(f'<p class="note">{html.escape(t.note())}</p>')
    return "".join(parts)


def render_page(title: str, subtitle: str, sections: Sequence[Section],
                absent: Sequence[str]) -> str:
    """The HTML text of the report. Table cells arrive escaped (the builders escape them
    with the rest of their labels); titles, notes and captions are escaped here."""
    figures: list[dict[str, Any]] = []
    body: list[str] = []
    for s in sections:
        part = [f'<section id="{html.escape(s.key)}"><h2>{html.escape(s.title)}</h2>']
        part += [f'<p class="note">{html.escape(n)}</p>' for n in s.notes]
        for f in s.figures:
            fid = f"fig-{len(figures)}"
            figures.append(_figure_json(fid, f))
            part.append(f"<h3>{html.escape(f.title)}</h3>")
            if f.note:
                part.append(f'<p class="note">{html.escape(f.note)}</p>')
            part.append(f'<div class="plot" id="{fid}"></div>')
        part += [_table(t) for t in s.tables]
        part.append("</section>")
        body.append("".join(part))
    nav = "".join(f'<a href="#{html.escape(s.key)}">{html.escape(s.title)}</a>'
                  for s in sections)
    missing = "".join(f'<p class="note absent">absent: {html.escape(a)}</p>' for a in absent)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{html.escape(CSP)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="placewise-figures" content="{len(figures)}">'
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style>"
        f"<script>{plotly_js()}</script></head>\n"
        f'<body data-figures="{len(figures)}"><header><h1>{html.escape(title)}</h1>'
        f"<p>{html.escape(subtitle)}</p></header><main><nav>{nav}</nav>{missing}"
        + "\n".join(body)
        + f'</main>\n<script id="pw-figures" type="application/json">{script_json(figures)}'
          f"</script>\n<script>{_DRAW}</script></body></html>\n")


def _figure_json(fid: str, f: Figure) -> dict[str, Any]:
    layout = {"margin": {"l": 60, "r": 30, "t": 30, "b": 60}, "paper_bgcolor": "#fff",
              "plot_bgcolor": "#fff", "font": {"size": 12}, **f.layout}
    for ax in ("xaxis", "yaxis"):
        layout.setdefault(ax, {}).setdefault("gridcolor", "#e5e8ee")
    return {"id": fid, "data": f.data, "layout": layout}
