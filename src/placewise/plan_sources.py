"""The files a plan was made from, and finding them again.

``placewise plan --hw FILE --calibration FILE`` records in the plan's ``sources`` the machine
spec's and the calibration's path (absolute, and as given) and fingerprint
(``sources_json``). The commands that read a plan (``export``, ``serve``, ``validate``,
``sheet``, ``report``) then take the plan's machine and calibration without the flags:

- ``plan_machine(plan)``: a preset (or a preset in a power mode) by name, ``local`` probed
  (once, cached), a spec file from its recorded path; its fingerprint is checked. A spec
  file that is no longer there, or whose fingerprint changed, is an ``InputError`` naming
  the file, what the plan recorded and what was found, and the flag to point at it
  (``--hw NEWPATH``, checked against the fingerprint like any machine given).
- ``plan_calibration(plan, given)``: the calibration file to use: ``given`` when the user
  named one, else the recorded one, checked the same way (``--calibration NEWPATH``).

Presets, ``local`` and the roofline (no calibration) are not files and are not recorded;
plans written before ``sources`` existed have none and behave as before.

>>> from placewise.hardware.load import load_machine
>>> m = load_machine("jetson-agx-orin")
>>> sources_json("jetson-agx-orin", m, None, None) is None
True
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from placewise.cost.calibration import load_calibration
from placewise.errors import InputError, PlacewiseError
from placewise.hardware.load import load_machine
from placewise.hardware.power import split_ref
from placewise.hardware.probe import load_local
from placewise.hardware.spec import list_presets
from placewise.plan import check_fingerprints

if TYPE_CHECKING:
    from placewise.hardware.spec import Machine
    from placewise.plan_records import Plan, SourceFileRecord

__all__ = ["is_spec_file", "plan_calibration", "plan_machine", "sources_json"]


def is_spec_file(hw: str) -> bool:
    """Whether the ``--hw`` reference ``hw`` names a spec file (not a preset, a preset in a
    power mode, or ``local``).

    >>> is_spec_file("jetson-agx-orin@30W"), is_spec_file("local"), is_spec_file("m.yaml")
    (False, False, True)
    """
    ref = str(hw)
    if ref == "local" or ref in list_presets():
        return False
    return Path(ref).exists() or split_ref(ref)[0] not in list_presets()


def _absolute(ref: str) -> str:
    """``ref`` made absolute (a ``FILE@MODE`` reference keeps its mode)."""
    if Path(ref).exists():
        return os.path.abspath(ref)
    base, mode = split_ref(ref)
    return os.path.abspath(base) + (f"@{mode}" if mode else "")


def sources_json(hw: str | None, machine: Machine | None,
                 calibration: str | os.PathLike[str] | None,
                 calibration_fp: str | None) -> dict[str, Any] | None:
    """The plan's ``sources`` record (``placewise.plan_records.SourcesRecord``): the machine
    spec file ``hw`` (the ``--hw`` reference ``machine`` was loaded from) and the
    ``calibration`` file (its cost model's fingerprint ``calibration_fp``); None when
    neither is a file."""
    out: dict[str, Any] = {}
    if hw is not None and machine is not None and is_spec_file(hw):
        out["machine"] = {"path": _absolute(str(hw)), "given": str(hw),
                          "fingerprint": machine.fingerprint()}
    if calibration is not None and calibration_fp is not None:
        given = os.fspath(calibration)
        out["calibration"] = {"path": os.path.abspath(given), "given": given,
                              "fingerprint": calibration_fp}
    return out or None


def _there(path: str) -> bool:
    return Path(path).is_file() or (not Path(path).exists()
                                    and Path(split_ref(path)[0]).is_file())


def _short(fp: str) -> str:
    """A fingerprint with its digest cut to 16 characters (``sha256:9855908a03486ede...``)."""
    head, sep, digest = fp.rpartition(":")
    return fp if len(digest) <= 16 else f"{head}{sep}{digest[:16]}..."


def _moved(rec: SourceFileRecord, what: str, flag: str, file: str | None,
           place: str) -> InputError:
    return InputError(f"the plan's {what} {rec.given!r} is not at {rec.path} any more: point "
                      f"at it with {flag} NEWPATH (it must hold fingerprint "
                      f"{_short(rec.fingerprint)})", file=file, place=place)


def _changed(rec: SourceFileRecord, what: str, flag: str, found: str, file: str | None,
             place: str) -> InputError:
    return InputError(f"the plan's {what} {rec.path} changed: the plan recorded fingerprint "
                      f"{_short(rec.fingerprint)}, the file now holds {_short(found)}: point "
                      f"at the one the plan was made with ({flag} NEWPATH), or plan again",
                      file=file, place=place)


def plan_machine(plan: Plan, machine: Machine | None = None, *,
                 file: str | None = None) -> Machine:
    """The plan's machine (``machine`` when given), its fingerprint checked (module
    docstring). ``file``: the plan file, for messages."""
    if machine is None:
        name = plan.machine.name
        rec = plan.sources.machine if plan.sources is not None else None
        if rec is not None:
            place = "sources.machine"
            if not _there(rec.path):
                raise _moved(rec, "machine spec", "--hw", file, place)
            try:
                machine = load_machine(rec.path)
            except PlacewiseError as exc:
                raise InputError(f"the plan's machine spec {rec.path} no longer loads "
                                 f"({exc}): point at the one the plan was made with (--hw "
                                 f"NEWPATH), or plan again", file=file, place=place) from None
            if machine.fingerprint() != rec.fingerprint:
                raise _changed(rec, "machine spec", "--hw", machine.fingerprint(), file, place)
        elif split_ref(name)[0] in list_presets():  # a preset, or a preset in a power mode
            machine = load_machine(name)
        elif name == "local":
            machine = load_local()
        else:
            raise InputError(f"the plan was made for machine {name!r}, which is neither a "
                             f"preset nor this machine ('local'), and it does not record its "
                             f"spec file: give it (--hw FILE)", file=file, place="machine")
    check_fingerprints(plan, machine=machine, file=file)
    return machine


def plan_calibration(plan: Plan, given: str | os.PathLike[str] | None = None, *,
                     file: str | None = None) -> Path | None:
    """The calibration file to cost ``plan`` with: ``given`` (the user's ``--calibration``;
    its cost model is checked by whoever loads it), else the one the plan recorded, which
    must still be there with the recorded fingerprint (``InputError`` naming it), else None
    (the plan was made with the roofline, or before plans recorded their calibration)."""
    if given is not None:
        path = Path(given)
        if not path.is_file():
            raise InputError("no such file", file=str(given), place="--calibration")
        return path
    rec = plan.sources.calibration if plan.sources is not None else None
    if rec is None:
        return None
    place = "sources.calibration"
    if not Path(rec.path).is_file():
        raise _moved(rec, "calibration", "--calibration", file, place)
    try:
        found = load_calibration(rec.path).fingerprint()
    except PlacewiseError as exc:
        raise InputError(f"the plan's calibration {rec.path} no longer loads ({exc}): point "
                         f"at the one the plan was made with (--calibration NEWPATH), or "
                         f"plan again", file=file, place=place) from None
    if found != rec.fingerprint:
        raise _changed(rec, "calibration", "--calibration", found, file, place)
    return Path(rec.path)
