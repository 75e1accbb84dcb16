"""The runtimes partitions run in, behind one seam (``base.Backend``: open a compiled unit
for a device, bind inputs, run, read outputs, copy to and from host memory, time a run).
``BACKENDS`` maps a device's ``backend`` name to the runtime that runs it: today
onnxruntime (``onnxruntime.OnnxRuntime``, with the device's execution provider) for every
name. ``RUNNABLE_BACKENDS`` are those this build runs (on the device's CPU cores); any
other device (a probed GPU, backend ``cuda``; a preset's accelerator) is plannable and
exportable only, and ``backend_gap`` says so in one line.

>>> from placewise.hardware.load import load_machine
>>> backend_gap(load_machine("h100-sxm-server").device("gpu0"))
"device 'gpu0' is not a local device (gpu, NVIDIA H100 SXM5 80GB; no backend): plannable and exportable only"
"""

from __future__ import annotations

from typing import Any

from placewise.errors import UnsupportedError
from placewise.hardware.spec import Device
from placewise.runtime.backends.base import Backend
from placewise.runtime.backends.onnxruntime import OnnxRuntime

__all__ = ["BACKENDS", "RUNNABLE_BACKENDS", "backend_for", "backend_gap", "runnable_part"]

#: a device's ``backend`` -> the runtime that runs its partitions
BACKENDS: dict[str, type[Backend]] = {
    "torch": OnnxRuntime, "onnxruntime": OnnxRuntime, "cpu": OnnxRuntime,
    "cuda": OnnxRuntime}
#: device backends this build runs (on the device's CPU cores)
RUNNABLE_BACKENDS = ("torch", "onnxruntime", "cpu")


def backend_for(device: Device) -> Backend:
    """The runtime that runs ``device``'s partitions; ``UnsupportedError`` for a device
    whose backend none of ``BACKENDS`` is."""
    backend = (device.backend or "").strip().lower()
    try:
        return BACKENDS[backend]()
    except KeyError:
        raise UnsupportedError(f"device {device.name!r}: no runtime for backend {backend!r} "
                               f"(known: {', '.join(BACKENDS)})") from None


def backend_gap(device: Device) -> str | None:
    """Why this build cannot run ``device``, or None when it can: it is a local device
    (``Device.is_local``) whose backend is one of ``RUNNABLE_BACKENDS``."""
    backend = (device.backend or "").strip().lower()
    if backend in RUNNABLE_BACKENDS and device.is_local:
        return None
    kind = device.kind.value
    model = device.model or "model not given"
    if not backend:
        return (f"device {device.name!r} is not a local device ({kind}, {model}; no "
                f"backend): plannable and exportable only")
    head = f"device {device.name!r} ({kind}, {model}) is plannable and exportable only"
    if backend not in RUNNABLE_BACKENDS:
        name = backend.upper() if backend == "cuda" else backend
        return (f"{head}: no {name} backend in this build (runnable backends: "
                f"{', '.join(RUNNABLE_BACKENDS)}, on CPU cores)")
    return f"{head}: backend {backend} needs the CPU cores it runs on (none given)"


def runnable_part(machine: Any) -> tuple[Any, list[str]]:
    """``machine`` (a ``hardware.spec.Machine``) without the devices this build cannot run
    and the links that touch them, with one line per device left out (``backend_gap``);
    ``machine`` itself when every device runs. What ``demo`` plans on, so that the plan it
    validates runs here.

    >>> from placewise.hardware.load import load_machine
    >>> part, gaps = runnable_part(load_machine("h100-sxm-server"))
    Traceback (most recent call last):
    ...
    ValueError: no device of machine 'h100-sxm-server' runs in this build
    """
    gaps = {d.name: gap for d in machine.devices if (gap := backend_gap(d)) is not None}
    if not gaps:
        return machine, []
    if len(gaps) == len(machine.devices):
        raise ValueError(f"no device of machine {machine.name!r} runs in this build")
    data = machine.model_dump(mode="json")
    data["devices"] = [d for d in data["devices"] if d["name"] not in gaps]
    data["links"] = [ln for ln in data["links"] if not set(ln["endpoints"]) & set(gaps)]
    return type(machine).model_validate(data), list(gaps.values())
