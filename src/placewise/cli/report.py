"""``placewise report``: one self-contained offline HTML report of a plan with its validation, serve and sweep results (the library is ``placewise.report``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from placewise.cli import JsonOpt, _print_json, app, err, out

__all__ = ["report"]


@app.command()
def report(
    inputs: Annotated[list[Path], typer.Argument(metavar="INPUT...", help="A plan file, and the JSON of 'placewise validate PLAN --json', of 'placewise serve PLAN --json' and a sweep file (each recognised by its content)")],
    out_file: Annotated[Path, typer.Option("--out", help="HTML file to write")],
    allow_mismatch: Annotated[bool, typer.Option("--allow-mismatch", help="Report results whose stable tags differ, naming the tags that differ")] = False,
    as_json: JsonOpt = False,
) -> None:
    """One HTML file, offline and self-contained: the schedule, memory, roofline, MFU,
    crossing edges, search record and mapping sheet of a plan; predicted against measured;
    the service under load; the sweep's fit matrix, curves, regret and energy."""
    from placewise.io import atomic_write_text, check_output_path
    from placewise.report import load_inputs, report_sections

    check_output_path(out_file, place="--out")
    got = load_inputs([str(p) for p in inputs], allow_mismatch=allow_mismatch)
    for line in got.tag_differences:
        err.print(f"tags differ (--allow-mismatch): {line}", markup=False)
    rep = report_sections(got)
    text = rep.html()
    atomic_write_text(out_file, text)
    size = len(text.encode("utf-8"))
    if as_json:
        _print_json({"out": str(out_file), "size_bytes": size, "figures": rep.figures(),
                     "sections": [s.key for s in rep.sections], "inputs": got.files,
                     "absent": rep.absent, "tag_mismatches": got.tag_differences})
        return
    out.print(f"wrote {out_file} ({size / 1e6:.2f} MB): {len(rep.sections)} sections, "
              f"{rep.figures()} figures; open it in any browser (file://, offline)")
    for a in rep.absent:
        out.print(f"  absent: {a}")
