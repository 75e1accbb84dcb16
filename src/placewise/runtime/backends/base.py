"""The seam between the executor's workers and a runtime: a ``Backend`` opens a compiled
unit (one partition's file, as ``export`` writes it) for a device; the ``Unit`` binds its
inputs, runs, and hands its outputs back; the backend copies to and from host memory and
times a run. A worker (``runtime.worker``) sees nothing else of the runtime.

A new runtime (TensorRT, OpenVINO, onnxruntime on another execution provider) is one module
here with a ``Backend`` subclass, registered in ``runtime.backends`` for the device
``backend`` names it runs.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from placewise.hardware.spec import Device

__all__ = ["Backend", "Unit"]


class Unit(ABC):
    """A compiled unit open on its device: its input and output names (the partition's
    boundary tensors), the bytes of weights it holds, and ``run``."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    weight_bytes: int

    @abstractmethod
    def run(self, feeds: Mapping[str, Any]) -> Sequence[Any]:
        """Bind ``feeds`` (input name -> value, on the device where they already are),
        run, and return the outputs in ``outputs`` order (on the device)."""

    def synchronize(self) -> None:  # noqa: B027 - a no-op unless run is asynchronous
        """Wait until the device has finished the work ``run`` started (a runtime whose
        ``run`` returns before that overrides it)."""

    def timed_run(self, feeds: Mapping[str, Any]) -> tuple[Sequence[Any], int]:
        """``run`` and the nanoseconds it took, device work included."""
        t0 = time.monotonic_ns()
        out = self.run(feeds)
        self.synchronize()
        return out, time.monotonic_ns() - t0

    @abstractmethod
    def zero_feeds(self) -> dict[str, Any]:
        """Zeros of every input's shape and dtype (warm-up runs)."""


class Backend(ABC):
    """A runtime that runs compiled units on one kind of device."""

    #: the name telemetry and messages use
    name: str = ""

    @abstractmethod
    def open(self, path: str, device: Device, *, threads: int, spinning: bool) -> Unit:
        """The unit of the ONNX file ``path`` on ``device``, with ``threads`` host threads
        (pinned to the device's cores by the caller); ``spinning``: its threads may spin
        after a run (off where another device shares their cores)."""

    def to_host(self, value: Any) -> np.ndarray[Any, Any]:
        """A unit's output as a host (numpy) array; host-memory runtimes return it as is."""
        return np.asarray(value)

    def from_host(self, array: np.ndarray[Any, Any]) -> Any:
        """A host array as the device's runtime takes it as an input."""
        return array
