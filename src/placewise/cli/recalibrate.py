"""``placewise recalibrate``: telemetry back into the cost model, key by key (the library is
``placewise.adapt.recalibrate``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from placewise.cli import JsonOpt, _print_json, app, out, resolve_machine
from placewise.errors import InputError

__all__ = ["recalibrate"]


def _same_file(a: Path, b: Path) -> bool:
    if os.path.exists(a) and os.path.exists(b):
        return os.path.samefile(a, b)
    return os.path.realpath(a) == os.path.realpath(b)


def _holds_calibration(path: Path) -> bool:
    """Whether ``path`` is a readable calibration file (which --out must never replace)."""
    from placewise.cost.calibrated import load_calibration
    from placewise.errors import PlacewiseError

    if not path.is_file():
        return False
    try:
        load_calibration(path)
    except PlacewiseError:
        return False
    return True


@app.command()
def recalibrate(
    out_file: Annotated[Path, typer.Option("--out", help="The new calibration file (never the old one)")],
    calibration: Annotated[Path | None, typer.Option(help="The calibration the telemetry's plans predicted from")] = None,
    telemetry: Annotated[list[Path] | None, typer.Option("--telemetry", help="A telemetry run (validate --telemetry-out, serve); repeat for several, oldest first")] = None,
    k: Annotated[int, typer.Option("--k", help="Update a key only when its latest k consecutive windows fall outside its interval")] = 3,
    init: Annotated[bool, typer.Option("--init", help="Write an empty calibration for --hw (the roofline, for telemetry to adjust)")] = False,
    hw: Annotated[str, typer.Option("--hw", help="With --init: the machine (local)")] = "local",
    allow_mismatch: Annotated[bool, typer.Option("--allow-mismatch", help="Use telemetry whose stable tags differ from the calibration's or each other's, naming the tags")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Update the calibration from measured per-term residuals, per key (never one global
    factor), into a new versioned file whose parent is the old one; prints what changed
    and why, and what did not."""
    from placewise.adapt.recalibrate import empty_calibration
    from placewise.adapt.recalibrate import recalibrate as _recalibrate
    from placewise.cost.calibrated import load_calibration
    from placewise.io import check_output_path
    from placewise.runtime.windows import load_telemetry_run
    from placewise.validate.compare import machine_tags

    check_output_path(out_file, place="--out")
    if _holds_calibration(out_file):
        raise InputError("holds a calibration already: a calibration is never edited or "
                         "replaced in place, write a new file", file=str(out_file),
                         place="--out")
    if init:
        if calibration is not None or telemetry:
            raise InputError("--init writes an empty calibration: give neither --calibration "
                             "nor --telemetry", place="--init")
        cal = empty_calibration(resolve_machine(hw), machine_tags())
        cal.save(out_file)
        if as_json:
            _print_json({"out": str(out_file), "fingerprint": cal.fingerprint(),
                         "machine": cal.machine, "revision": cal.revision, "keys": []})
        else:
            out.print(f"wrote {out_file}: an empty calibration for {cal.machine} "
                      f"({cal.fingerprint()}); plan with --calibration {out_file}",
                      markup=False)
        return
    if calibration is None:
        raise InputError("give the calibration the telemetry predicted from (or --init)",
                         place="--calibration")
    if not telemetry:
        raise InputError("give at least one telemetry run", place="--telemetry")
    if _same_file(calibration, out_file):
        raise InputError("would replace the calibration itself: a calibration is never "
                         "edited in place, write a new file", file=str(out_file), place="--out")
    cal = load_calibration(calibration)
    runs = [load_telemetry_run(p) for p in telemetry]
    try:
        rec = _recalibrate(cal, runs, k=k, allow_mismatch=allow_mismatch)
    except InputError as exc:
        raise exc.at(file=str(telemetry[0])) from None
    rec.calibration.save(out_file)
    if as_json:
        _print_json({**rec.to_json(), "out": str(out_file), "calibration": str(calibration),
                     "telemetry": [str(p) for p in telemetry]})
        return
    c = rec.calibration
    out.print(f"wrote {out_file}: revision {c.revision} of {calibration} (parent "
              f"{c.parent}); {len(rec.changed())} of {len(rec.changes)} keys changed "
              f"(k={k})", markup=False)
    for line in rec.mismatches:
        out.print(f"  tags differ (--allow-mismatch): {line}", markup=False)
    for ch in rec.changes:
        what = (f"x{ch.factor_before:.4g} -> x{ch.factor_after:.4g}" if ch.changed
                else f"kept x{ch.factor_before:.4g}")
        if ch.added_s:
            what = f"{'+' if ch.changed else 'kept +'}{ch.added_s:.4g} s"
        out.print(f"  {ch.key}: {what} (predicted {ch.predicted_s:.4g} s, measured "
                  f"{ch.measured_s:.4g} s in the latest window): {ch.reason}", markup=False)
