"""The exception hierarchy. Every message names the thing at fault.

``InputError`` and its subclasses are the user's fault (bad file, bad spec, bad flag): the CLI
turns them into exit status 2 and one line on stderr of the form ``FILE: PLACE: PROBLEM``.
"""

from __future__ import annotations

__all__ = [
    "ExecutionError",
    "GraphError",
    "Infeasible",
    "InputError",
    "MemoryInfeasible",
    "ModelFormatError",
    "PlacewiseError",
    "ProfileError",
    "SpecError",
    "UnsupportedError",
]


class PlacewiseError(Exception):
    """Base of every error placewise raises on purpose."""


class InputError(PlacewiseError):
    """Bad input: a file, a place in it, and the problem.

    >>> str(InputError("problem", file="m.onnx", place="node 'Conv_3'"))
    "m.onnx: node 'Conv_3': problem"
    """

    def __init__(self, problem: str, *, file: str | None = None, place: str | None = None):
        self.problem = problem
        self.file = file
        self.place = place
        super().__init__(self.line())

    def line(self) -> str:
        parts = [p for p in (self.file, self.place) if p]
        parts.append(self.problem)
        return ": ".join(parts)

    def at(self, *, file: str | None = None, place: str | None = None) -> InputError:
        """Return a copy of this error with the file/place filled in where still missing."""
        return type(self)(
            self.problem, file=self.file or file, place=self.place or place
        )


class ModelFormatError(InputError):
    """A model file that cannot be read or is not a valid model."""


class GraphError(InputError):
    """A graph that breaks an invariant (cycle, dangling tensor, unknown shape...)."""


class SpecError(InputError):
    """A hardware spec, calibration or plan file with wrong types or impossible numbers."""


class ProfileError(InputError):
    """A measured profile or trace (onnxruntime, trtexec, torch.profiler) that is malformed,
    truncated, hostile, or not a measurement of the model and settings asked for."""


class UnsupportedError(PlacewiseError):
    """A request placewise understands but cannot serve (op kind on a device, ...)."""


class Infeasible(PlacewiseError):
    """No placement satisfies the constraints."""


class MemoryInfeasible(Infeasible):
    """A memory tier overflows: names the device, tier, time and what occupies it."""

    def __init__(self, message: str, *, device: str = "", tier: str = "", need_bytes: int = 0,
                 capacity_bytes: int = 0):
        self.device = device
        self.tier = tier
        self.need_bytes = need_bytes
        self.capacity_bytes = capacity_bytes
        super().__init__(message)


class ExecutionError(PlacewiseError):
    """A real run that could not finish: a worker died, raised or hung. Names the device,
    the task and the op it was running, and the request."""

    def __init__(self, message: str, *, device: str = "", task: str = "", op: str = "",
                 request: int = -1) -> None:
        self.device = device
        self.task = task
        self.op = op
        self.request = request
        super().__init__(message)
