"""An imported calibration added into another calibration of the same machine.

``merge_into(base, new)``: the devices ``new`` measured (its imports' devices) replace
whatever ``base`` held for them (measurements, failures, fits, model-order regions, co-run
ratios, links into or out of them, import records); everything else of ``base`` stays.
So one file can hold a GPU imported from a trtexec profile beside the host CPU profiled by
placewise, or several devices each imported from its own profile.

The terms of placewise's own executor on a device (``DeviceRecord``: its per-step dispatch,
the request hand-off, the pipelined worker time, the wake-ups), which no target profiler
can see, are kept from ``base`` where it measured them: a calibration ``placewise profile``
made on this machine (of any model) lends them to the devices imported into it. Refused
(``ProfileError``) when the two were made for different machines.
"""

from __future__ import annotations

from placewise.cost.calibration import Calibration, DeviceRecord
from placewise.errors import ProfileError

__all__ = ["merge_into"]


def merge_into(base: Calibration, new: Calibration, *, file: str = "<calibration>"
               ) -> Calibration:
    """``base`` with the devices ``new`` imported replaced by ``new``'s (module docstring)."""
    if base.machine and new.machine and base.machine != new.machine:
        raise ProfileError(f"the calibration is for machine {base.machine!r}, this import for "
                           f"{new.machine!r}", file=file, place="--into")
    if base.machine_fingerprint and new.machine_fingerprint and \
            base.machine_fingerprint != new.machine_fingerprint:
        raise ProfileError(f"the calibration was made for machine fingerprint "
                           f"{base.machine_fingerprint}, this import for "
                           f"{new.machine_fingerprint}", file=file, place="--into")
    if base.adjustments:
        raise ProfileError("the calibration holds telemetry adjustments (a recalibrated "
                           "revision): import into its parent or a fresh file",
                           file=file, place="--into")
    mine = {r.device for r in new.imports}
    old = {d.name: d for d in base.devices}
    devices = {d.name: d for d in base.devices if d.name not in mine}
    for d in new.devices:
        if d.name in old and old[d.name].identity != d.identity:
            raise ProfileError(f"device {d.name!r} differs between the calibrations "
                               f"(identity {old[d.name].identity} vs {d.identity})",
                               file=file, place="--into")
        if d.name in mine or d.name not in devices:
            devices[d.name] = _with_executor(d, old.get(d.name))
    new_links = {(lk.src, lk.dst) for lk in new.links}
    models = [m for m in (base.model, new.model) if m]
    return base.model_copy(update={
        "model": " + ".join(dict.fromkeys(models)),
        "created": new.created or base.created,
        "devices": list(devices.values()),
        "measurements": [m for m in base.measurements if m.device not in mine]
        + list(new.measurements),
        "fits": [f for f in base.fits if f.device not in mine],
        "failures": [f for f in base.failures if f.device not in mine] + list(new.failures),
        "context": [c for c in base.context if c.device not in mine],
        "corun": [c for c in base.corun if c.device not in mine and c.busy not in mine],
        "links": [lk for lk in base.links if (lk.src, lk.dst) not in new_links]
        + list(new.links),
        "imports": [r for r in base.imports if r.device not in mine] + list(new.imports),
    })


_EXECUTOR = ("dispatch", "request", "request_shared", "request_busy", "wake_sleep", "wake_poll")


def _with_executor(new: DeviceRecord, old: DeviceRecord | None) -> DeviceRecord:
    """``new`` with the executor terms ``old`` measured and ``new`` did not."""
    if old is None:
        return new
    keep = {k: getattr(old, k) for k in _EXECUTOR
            if getattr(old, k).n > 0 and getattr(new, k).n == 0}
    return new.model_copy(update=keep) if keep else new
