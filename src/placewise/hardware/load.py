"""Where a machine comes from: a preset name, a YAML/JSON file (``hardware.spec``), ``local``
(this machine, probed once and cached: ``hardware.probe``) or ``NAME@MODE`` (a machine in
one of its power modes: ``hardware.power``).

>>> load_machine("jetson-agx-orin@30W").name
'jetson-agx-orin@30W'
"""

from __future__ import annotations

from pathlib import Path

from placewise.errors import SpecError
from placewise.hardware.power import apply_mode, split_ref
from placewise.hardware.probe import load_local
from placewise.hardware.spec import Machine, read_machine

__all__ = ["load_machine", "load_moded"]


def load_machine(ref: str | Path) -> Machine:
    """Load a machine from a preset name, a YAML/JSON path, or ``local``.

    ``local`` is this machine, measured by :func:`placewise.hardware.probe.load_local` the
    first time and read from its cache afterwards. ``NAME@MODE`` (``jetson-agx-orin@30W``)
    is that machine in one of its power modes (``placewise.hardware.power.apply_mode``).
    """
    ref_s = str(ref)
    if "@" in ref_s and not Path(ref_s).exists():
        return load_moded(ref_s)
    if ref_s == "local":
        return load_local()
    return read_machine(ref_s)


def load_moded(ref: str) -> Machine:
    """Load ``NAME@MODE`` (a preset or spec file, then ``apply_mode``); ``SpecError`` for
    an unknown mode, a machine without modes, or ``local@...``."""
    base, mode = split_ref(ref)
    if mode is None or not base or not mode:
        raise SpecError("expected NAME@MODE (e.g. jetson-agx-orin@30W)", file=ref)
    if base == "local":
        raise SpecError("the local machine has no power modes (placewise hw probe measures "
                        "time, not power)", file=ref, place="power.modes")
    return apply_mode(load_machine(base), mode, file=ref)
