"""The runtimes partitions run in: one module per runtime (``onnxruntime``; ``torch`` for
the op-by-op mode), both on CPU cores. A device whose backend has a module here is
runnable; any other device (a probed GPU, backend ``cuda``; a preset's accelerator) is
plannable and exportable only, and ``backend_gap`` says so in one line.

>>> from placewise.hardware.spec import load_machine
>>> backend_gap(load_machine("h100-sxm-server").device("gpu0"))
"device 'gpu0' (gpu, NVIDIA H100 SXM5 80GB) is plannable and exportable only: it is not a local device (no backend)"
"""

from __future__ import annotations

from typing import Any

__all__ = ["RUNNABLE_BACKENDS", "backend_gap"]

#: device backends this build runs (on the device's CPU cores), each through a module here
RUNNABLE_BACKENDS = ("torch", "onnxruntime", "cpu")


def backend_gap(device: Any) -> str | None:
    """Why this build cannot run ``device`` (a ``hardware.spec.Device``), or None when it
    can: it has CPU cores and a backend of ``RUNNABLE_BACKENDS``."""
    backend = (getattr(device, "backend", None) or "").strip().lower()
    if backend in RUNNABLE_BACKENDS and getattr(device, "cores", None):
        return None
    kind = getattr(getattr(device, "kind", ""), "value", getattr(device, "kind", ""))
    model = getattr(device, "model", "") or "model not given"
    head = f"device {device.name!r} ({kind}, {model}) is plannable and exportable only"
    if not backend:
        return f"{head}: it is not a local device (no backend)"
    if backend not in RUNNABLE_BACKENDS:
        name = backend.upper() if backend == "cuda" else backend
        return (f"{head}: no {name} backend in this build (runnable backends: "
                f"{', '.join(RUNNABLE_BACKENDS)}, on CPU cores)")
    return f"{head}: backend {backend} needs the CPU cores it runs on (none given)"
