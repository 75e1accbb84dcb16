"""Pick the cost model for a machine: calibrated where a calibration is given, else roofline.

>>> from placewise.hardware.load import load_machine
>>> load_cost_model(load_machine("h100-sxm-server"), None).fingerprint()
'roofline/v1'
"""

from __future__ import annotations

import os
from pathlib import Path

from placewise.cost.calibrated import (
    CalibratedModel,
    Calibration,
    DeviceRecord,
    device_identity,
    load_calibration,
)
from placewise.cost.model import CostModel
from placewise.cost.roofline import RooflineModel
from placewise.errors import SpecError
from placewise.hardware.spec import Device, Machine

__all__ = ["check_calibration", "load_cost_model"]


def _mismatch(rec: DeviceRecord, dev: Device) -> str:
    fields = (("kind", rec.kind, str(dev.kind.value)), ("model", rec.model, dev.model),
              ("cores", rec.cores, dev.cores), ("backend", rec.backend, dev.backend))
    for name, cal_v, dev_v in fields:
        if cal_v != dev_v:
            return f"calibrated with {name} {cal_v!r}, the machine's device has {dev_v!r}"
    return "device description differs (compute units)"


def check_calibration(machine: Machine, cal: Calibration, *, file: str = "<calibration>") -> None:
    """``SpecError`` unless every device the calibration measured is a device of ``machine``
    with the same identity (kind, model, cores, backend, compute units) and the CPU model
    tags agree. A calibration that measured no device must record ``machine``'s
    fingerprint (an empty one, written by ``placewise recalibrate --init``)."""
    if not cal.devices:
        # an empty calibration (``placewise recalibrate --init``: the roofline, plus what
        # telemetry later adjusts) is for the machine whose fingerprint it records
        if not cal.machine_fingerprint:
            raise SpecError("the calibration measured no device", file=file, place="devices")
        if cal.machine_fingerprint != machine.fingerprint():
            raise SpecError(f"the calibration was made for machine fingerprint "
                            f"{cal.machine_fingerprint}, machine {machine.name!r} has "
                            f"{machine.fingerprint()}", file=file, place="machine_fingerprint")
    names = machine.device_names
    for i, rec in enumerate(cal.devices):
        place = f"devices[{i}] ({rec.name})"
        if rec.name not in names:
            raise SpecError(f"calibrated device {rec.name!r} is not a device of machine "
                            f"{machine.name!r} (devices: {', '.join(names)}); profile this "
                            f"machine to calibrate it", file=file, place=place)
        dev = machine.device(rec.name)
        if rec.identity and rec.identity != device_identity(dev):
            raise SpecError(_mismatch(rec, dev) + "; profile again on this machine",
                            file=file, place=place)
    a, b = cal.tags.get("cpu_model", ""), machine.tags.get("cpu_model", "")
    if a and b and a != b:
        raise SpecError(f"calibrated on CPU {a!r}, machine {machine.name!r} has {b!r}",
                        file=file, place="tags.cpu_model")


def load_cost_model(machine: Machine,
                    calibration: str | os.PathLike[str] | Calibration | None) -> CostModel:
    """The roofline model of ``machine`` (no calibration) or the calibrated model of a
    calibration file (or object) that matches it (else ``SpecError``)."""
    if calibration is None:
        return RooflineModel(machine)
    if isinstance(calibration, Calibration):
        cal, file = calibration, "<calibration>"
    else:
        file = os.fspath(calibration)
        cal = load_calibration(Path(file))
    check_calibration(machine, cal, file=file)
    return CalibratedModel(machine, cal)
