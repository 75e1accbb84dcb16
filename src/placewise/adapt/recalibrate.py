"""Recalibration: measured per-term residuals from telemetry runs update the calibration,
key by key, never with a global factor.

``recalibrate(cal, runs, k=3)`` reads the windows of one or more telemetry runs
(``placewise.runtime.windows``) key by key (compute per region set and device, transfer per
link, launch and run-call per device, contention per region set and device), in order (the
runs as given, each run's windows in order), and decides per key:

- **updated** when its latest ``k`` (or more) consecutive windows all fall outside the
  cost's interval on the same side: the robust estimate is the median, over those
  windows, of each window's median measured / predicted ratio (for contention, of the
  slowdowns ``(base + measured) / (base + predicted)``). The key's ``Adjustment``
  (``cost.calibrated``) gets ``factor = previous factor x that ratio`` (the predictions in
  the telemetry already carried the previous factor), and ``widen``, the observed spread:
  the larger of the windows' median relative spread (half their p10..p90 range over their
  median) and the half range of the window medians over their median. ``CalibratedModel``
  multiplies the key's costs by the factor, scales their interval with it and widens it to
  at least ``centre x (1 -+ widen)``.
- **unchanged** otherwise, with why: inside the interval in the latest window; outside in
  fewer than ``k`` consecutive latest windows; predicted zero (no ratio to take), except
  for a request hand-off the model did not have (``request:{host}``, predicted 0 s): its
  measured median is added (``Adjustment.add_s``).

Every other key, and every key a run did not measure, keeps exactly the prediction it had:
there is no factor outside a key. The result is a **new** ``Calibration``: ``parent`` is
the old one's fingerprint, ``revision`` the old one's + 1 (the old object and file are never
changed). Telemetry is refused (``InputError``) when its stable machine tags differ from
the calibration's (``MACHINE_TAG_KEYS`` the calibration records), when the runs' machine
tags differ from each other (runs of different plans, e.g. one per bucket, may be
combined: their keys name their devices), or when a run's predictions came from another calibration
(an empty calibration, ``empty_calibration``, stands for the roofline: runs of
``roofline/v1`` plans are its own); ``allow_mismatch=True`` keeps going and lists the
differences in ``Recalibration.mismatches``.

>>> from placewise.runtime.windows import TelemetryRun, TermWindow, Window
>>> from placewise.cost.calibrated import Calibration
>>> cal = Calibration.empty("local").model_copy(update={"machine_fingerprint": "m"})
>>> tw = TermWindow("launch", "launch:cpu0", "cpu0", "", 1e-5, 9e-6, 1.1e-5, 2e-5, 1e-6, 50)
>>> run = TelemetryRun({}, "p", cal.fingerprint(), tuple(Window(i, 50, (tw,)) for i in range(3)))
>>> r = recalibrate(cal, [run], k=3)
>>> r.calibration.revision, r.calibration.parent == cal.fingerprint(), r.changed()[0].factor_after
(1, True, 2.0)
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from placewise.cost.calibrated import Adjustment, Calibration, now_iso
from placewise.errors import InputError
from placewise.runtime.telemetry import MACHINE_TAG_KEYS, calibration_tag_keys, require_comparable

if TYPE_CHECKING:
    from placewise.hardware.spec import Machine
    from placewise.runtime.windows import TelemetryRun, TermWindow

__all__ = ["KeyChange", "Recalibration", "empty_calibration",
           "recalibrate"]

#: what a plan made without a calibration records as its cost model
ROOFLINE = "roofline/v1"


@dataclass(frozen=True, slots=True)
class KeyChange:
    """What recalibration decided for one key, and why."""

    kind: str
    key: str
    device: str
    link: str
    changed: bool
    reason: str
    windows: int  # windows that measured the key
    outside: int  # of its latest windows, how many in a row fell outside (same side)
    side: int  # +1 slower than the interval, -1 faster, 0 inside (latest window)
    predicted_s: float  # latest window
    measured_s: float  # latest window (median)
    factor_before: float
    factor_after: float
    widen: float = 0.0
    added_s: float = 0.0  # a request hand-off the model lacked: seconds added

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "key": self.key, "device": self.device, "link": self.link,
                "changed": self.changed, "reason": self.reason, "windows": self.windows,
                "outside_windows": self.outside, "side": self.side,
                "predicted_s": self.predicted_s, "measured_s": self.measured_s,
                "factor_before": self.factor_before, "factor_after": self.factor_after,
                "widen": self.widen, "added_s": self.added_s}


@dataclass(frozen=True)
class Recalibration:
    """The new calibration and, per key, what changed and why."""

    calibration: Calibration
    changes: tuple[KeyChange, ...]
    k: int
    runs: int
    mismatches: tuple[str, ...] = field(default=())

    def changed(self) -> list[KeyChange]:
        return [c for c in self.changes if c.changed]

    def to_json(self) -> dict[str, Any]:
        cal = self.calibration
        return {"parent": cal.parent, "revision": cal.revision,
                "fingerprint": cal.fingerprint(), "k": self.k, "runs": self.runs,
                "changed": len(self.changed()), "unchanged": len(self.changes) -
                len(self.changed()), "keys": [c.to_json() for c in self.changes],
                "mismatches": list(self.mismatches)}


def empty_calibration(machine: Machine, tags: Mapping[str, str]) -> Calibration:
    """A calibration that measured nothing, for ``machine`` (its name, fingerprint and the
    stable machine ``tags``): the model is the roofline until telemetry adjusts it."""
    return Calibration(created=now_iso(), machine=machine.name,
                       machine_fingerprint=machine.fingerprint(),
                       tags={k: str(tags[k]) for k in MACHINE_TAG_KEYS if k in tags})


def _is_empty(cal: Calibration) -> bool:
    return not (cal.devices or cal.measurements or cal.fits or cal.context or cal.links
                or cal.corun)


def _check_runs(cal: Calibration, runs: Sequence[TelemetryRun], allow: bool) -> list[str]:
    """The tag and fingerprint checks (module docstring); the differences as lines."""
    lines: list[str] = []
    keys = calibration_tag_keys(cal)
    fp = cal.fingerprint()
    own = {fp} | ({ROOFLINE} if _is_empty(cal) and cal.revision == 0 else set())
    for i, run in enumerate(runs):
        what = f"telemetry {i + 1} against the calibration's machine"
        lines += [f"telemetry {i + 1}: {x}" for x in
                  require_comparable(cal.tags, run.tags, what=what, allow_mismatch=allow,
                                     keys=keys)]
        if i:
            lines += [f"telemetry {i + 1} vs 1: {x}" for x in require_comparable(
                runs[0].tags, run.tags, what=f"telemetry {i + 1} against telemetry 1",
                allow_mismatch=allow, keys=MACHINE_TAG_KEYS)]
        if run.calibration_fingerprint not in own:
            msg = (f"telemetry {i + 1} predicted from calibration "
                   f"{run.calibration_fingerprint}, not from this one ({fp}): its residuals "
                   f"are another calibration's")
            if not allow:
                raise InputError(msg + "; pass --allow-mismatch to use it anyway",
                                 place="calibration_fingerprint")
            lines.append(msg)
    return lines


def _series(runs: Sequence[TelemetryRun]) -> dict[str, list[TermWindow]]:
    out: dict[str, list[TermWindow]] = {}
    for run in runs:
        for w in sorted(run.windows, key=lambda w: w.index):
            for t in w.terms:
                out.setdefault(t.key, []).append(t)
    return out


def _ratio(t: TermWindow) -> float | None:
    if t.kind == "contention":
        den = t.base_s + t.predicted_s
        return (t.base_s + t.measured_s) / den if den > 0 else None
    return t.measured_s / t.predicted_s if t.predicted_s > 0 else None


def _widen(ws: Sequence[TermWindow]) -> float:
    meds = [w.measured_s for w in ws]
    centre = statistics.median(meds)
    if centre <= 0:
        return 0.0
    inner = statistics.median(w.spread_s / w.measured_s if w.measured_s > 0 else 0.0
                              for w in ws)
    return max(inner, (max(meds) - min(meds)) / 2 / centre)


def _decide(key: str, ws: Sequence[TermWindow], old: Adjustment | None, k: int,
            revision: int) -> tuple[KeyChange, Adjustment | None]:
    last = ws[-1]
    side = last.side
    streak = 0
    if side:
        for w in reversed(ws):
            if w.side != side:
                break
            streak += 1
    before = old.factor if old is not None else 1.0

    def change(changed: bool, reason: str, after: float = before, widen: float = 0.0,
               added: float = old.add_s if old is not None else 0.0) -> KeyChange:
        return KeyChange(last.kind, key, last.device, last.link, changed, reason, len(ws),
                         streak, side, last.predicted_s, last.measured_s, before, after,
                         widen, added)

    if side == 0:
        return change(False, "inside its interval in the latest window"), None
    if streak < k:
        return change(False, f"outside its interval in only the latest {streak} "
                             f"window{'s' if streak != 1 else ''} (fewer than k={k} in a "
                             f"row)"), None
    used = ws[-streak:]
    ratios = [r for w in used if (r := _ratio(w)) is not None]
    if not ratios and key.startswith("request:") and side > 0:
        return _added(key, used, last, revision, k, change)
    if not ratios:
        return change(False, "predicted 0 s: no ratio to correct it by"), None
    ratio = statistics.median(ratios)
    if old is not None and old.add_s > 0:  # an added hand-off: the addition is what scales
        return _added(key, used, last, revision, k, change, old.add_s * ratio, ratio)
    after = min(max(before * ratio, 1e-6), 1e6)
    widen = _widen(used)
    med = statistics.median(w.measured_s for w in used)
    pred = statistics.median(w.predicted_s for w in used)
    how = "slower" if side > 0 else "faster"
    reason = (f"{streak} consecutive windows {how} than the interval (k={k}): median "
              f"measured {med:.3g} s vs predicted {pred:.3g} s, x{ratio:.3g}; interval "
              f"widened to at least +-{100 * widen:.0f}% (observed spread)")
    adj = Adjustment(kind=last.kind, key=key, device=last.device, link=last.link,
                     regions=list(last.regions), factor=after, widen=widen,
                     predicted_s=pred, measured_s=med,
                     spread_s=statistics.median(w.spread_s for w in used), windows=streak,
                     samples=sum(w.samples for w in used), revision=revision, reason=reason)
    return change(True, reason, after, widen), adj


def _added(key: str, used: Sequence[TermWindow], last: TermWindow, revision: int, k: int,
           change: Any, add_s: float | None = None, ratio: float | None = None
           ) -> tuple[KeyChange, Adjustment]:
    """A request hand-off the model does not have (predicted 0 s): the measured median,
    added; one added before (``add_s``) is scaled by the windows' ``ratio``."""
    med = statistics.median(w.measured_s for w in used)
    add = med if add_s is None else add_s
    widen = _widen(used)
    how = "slower" if last.side > 0 else "faster"
    what = (f"the model has no request hand-off here, measured median {med:.3g} s added"
            if ratio is None else f"the added hand-off x{ratio:.3g}: {add:.3g} s")
    reason = (f"{len(used)} consecutive windows {how} than the interval (k={k}): {what}; "
              f"interval +-{100 * widen:.0f}% (observed spread)")
    adj = Adjustment(kind=last.kind, key=key, device=last.device, factor=1.0, add_s=add,
                     widen=widen, predicted_s=statistics.median(w.predicted_s for w in used),
                     measured_s=med, spread_s=statistics.median(w.spread_s for w in used),
                     windows=len(used), samples=sum(w.samples for w in used),
                     revision=revision, reason=reason)
    ch: KeyChange = change(True, reason, 1.0, widen, add)
    return ch, adj


def recalibrate(cal: Calibration, runs: Sequence[TelemetryRun], *, k: int = 3,
                allow_mismatch: bool = False) -> Recalibration:
    """A new calibration from ``cal`` and the telemetry ``runs`` (module docstring).
    ``InputError`` for no run, ``k < 1``, or mismatched tags (unless ``allow_mismatch``)."""
    if k < 1:
        raise InputError(f"k must be >= 1, got {k}", place="--k")
    if not runs:
        raise InputError("give at least one telemetry run", place="--telemetry")
    mismatches = _check_runs(cal, runs, allow_mismatch)
    revision = cal.revision + 1
    old = {(a.kind, a.key): a for a in cal.adjustments}
    changes: list[KeyChange] = []
    new: dict[tuple[str, str], Adjustment] = dict(old)
    for key, ws in _series(runs).items():
        ch, adj = _decide(key, ws, old.get((ws[-1].kind, key)), k, revision)
        changes.append(ch)
        if adj is not None:
            new[(adj.kind, adj.key)] = adj
    out = cal.model_copy(update={"parent": cal.fingerprint(), "revision": revision,
                                 "adjustments": sorted(new.values(),
                                                       key=lambda a: (a.kind, a.key)),
                                 "created": now_iso()})
    out = Calibration.model_validate(out.model_dump())  # validated as a file would be
    return Recalibration(out, tuple(changes), k, len(runs), tuple(mismatches))
