"""Measured energy for ``validate``: the machine's own energy counters, where it has them.

Two sources are read, whichever exist:

- **RAPL** (Intel and AMD CPUs under Linux): each package domain
  ``/sys/class/powercap/intel-rapl:N/energy_uj`` (microjoules, a counter that wraps at
  ``max_energy_range_uj``; sub-domains such as ``intel-rapl:0:0`` are parts of their
  package and are not added again). The counters cover the whole package, so every
  process on it is in the figure, not just the plan's workers;
- **NVML** on NVIDIA GPUs (``pynvml``, only when it imports and initialises):
  ``nvmlDeviceGetTotalEnergyConsumption`` (millijoules since the driver loaded) per GPU.

``EnergyMeter`` reads the counters at ``start()`` and ``stop()``; ``MeasuredEnergy`` is the
difference with the window's requests. Where no source exists, ``available`` is False and
``reason`` says what was looked for.

>>> import tempfile, pathlib
>>> root = pathlib.Path(tempfile.mkdtemp())
>>> zone = root / "intel-rapl:0"; zone.mkdir()
>>> _ = (zone / "name").write_text("package-0\\n")
>>> _ = (zone / "max_energy_range_uj").write_text("1000000\\n")
>>> _ = (zone / "energy_uj").write_text("999000\\n")
>>> meter = EnergyMeter(rapl_root=root, nvml=False)
>>> meter.start()
>>> _ = (zone / "energy_uj").write_text("4000\\n")  # wrapped: 1000 + 4000 uJ
>>> m = meter.stop(requests=5, window_s=0.001)
>>> m.available, m.energy_j, m.energy_per_request_j, m.average_power_w
(True, 0.005, 0.001, 5.0)
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from placewise.energy import plan_energy
from placewise.records import to_json

__all__ = ["RAPL_ROOT", "EnergyComparison", "EnergyMeter", "MeasuredEnergy", "energy_comparison",
           "rapl_zones"]

RAPL_ROOT = Path("/sys/class/powercap")
_PACKAGE = re.compile(r"^intel-rapl:\d+$")


@dataclass(frozen=True, slots=True)
class MeasuredEnergy:
    """Energy measured over a window of ``requests`` requests (``window_s`` seconds):
    joules per source counter (``by_counter_j``), in all, per request and as average power.
    ``available`` False: no counter exists here, ``reason`` says why."""

    available: bool
    reason: str | None = None
    source: str | None = None
    requests: int = 0
    window_s: float = 0.0
    energy_j: float | None = None
    energy_per_request_j: float | None = None
    average_power_w: float | None = None
    by_counter_j: dict[str, float] = field(default_factory=dict)
    covers: str | None = None

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


@dataclass(frozen=True, slots=True)
class _Zone:
    name: str
    path: Path
    max_uj: int


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def rapl_zones(root: Path = RAPL_ROOT) -> list[_Zone]:
    """The readable RAPL package domains under ``root`` (empty when there are none)."""
    if not root.is_dir():
        return []
    zones: list[_Zone] = []
    for d in sorted(root.iterdir()):
        if not _PACKAGE.match(d.name) or _read_int(d / "energy_uj") is None:
            continue
        max_uj = _read_int(d / "max_energy_range_uj") or 0
        try:
            label = (d / "name").read_text().strip() or d.name
        except OSError:
            label = d.name
        zones.append(_Zone(f"rapl:{label}", d / "energy_uj", max_uj))
    return zones


def _nvml_handles() -> list[tuple[str, Any]]:
    """(label, handle) of every GPU NVML reports an energy counter for; [] without NVML."""
    try:
        # lazy: pynvml (NVML, only where a GPU is) is heavy to import, loaded only when this runs
        import pynvml  # type: ignore[import-not-found, import-untyped, unused-ignore]

        pynvml.nvmlInit()
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
            out.append((f"nvml:gpu{i}", h))
        return out
    except Exception:  # no pynvml, no driver, no GPU, no counter: no source
        return []


class EnergyMeter:
    """Reads the energy counters at ``start()`` and ``stop()`` (module docstring)."""

    def __init__(self, *, rapl_root: Path = RAPL_ROOT, nvml: bool = True) -> None:
        self._root = rapl_root
        self._zones = rapl_zones(rapl_root)
        self._nvml = _nvml_handles() if nvml else []
        self._start: dict[str, int] = {}
        self._t0 = 0.0
        self._end: tuple[dict[str, int], float] | None = None

    @property
    def available(self) -> bool:
        return bool(self._zones or self._nvml)

    def reason(self) -> str:
        """Why there is no measured energy here."""
        where = os.fspath(self._root)
        rapl = (f"no {where}" if not self._root.is_dir()
                else f"no readable RAPL package counter under {where}")
        return (f"no measured power source on this machine: {rapl} (RAPL) and no NVIDIA GPU "
                f"energy counter (NVML via pynvml)")

    def _read(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for z in self._zones:
            v = _read_int(z.path)
            if v is not None:
                out[z.name] = v
        for label, h in self._nvml:
            # lazy: pynvml (NVML, only where a GPU is) is heavy to import, loaded only when this runs
            import pynvml  # type: ignore[import-not-found, import-untyped, unused-ignore]

            out[label] = int(pynvml.nvmlDeviceGetTotalEnergyConsumption(h)) * 1000  # mJ -> uJ
        return out

    def start(self) -> None:
        self._start = self._read()
        self._t0 = time.perf_counter()
        self._end = None

    def mark(self) -> None:
        """Read the counters now as the window's end (``stop`` then uses this reading)."""
        self._end = (self._read(), time.perf_counter())

    def stop(self, *, requests: int, window_s: float | None = None) -> MeasuredEnergy:
        """The energy since ``start()`` over ``requests`` requests (``window_s``: the
        window's length, default: the wall time since ``start()``)."""
        if not self.available:
            return MeasuredEnergy(False, self.reason())
        end, t1 = self._end if self._end is not None else (self._read(), time.perf_counter())
        window = window_s if window_s is not None else t1 - self._t0
        wrap = {z.name: z.max_uj for z in self._zones}
        by: dict[str, float] = {}
        for name, v0 in self._start.items():
            if name not in end:
                continue
            d = end[name] - v0
            if d < 0 and wrap.get(name):
                d += wrap[name]  # the counter wrapped once
            by[name] = max(d, 0) / 1e6
        total = sum(by.values())
        covers = ("RAPL: the whole CPU package(s), every process on them" if self._zones else "")
        if self._nvml:
            covers = "; ".join(x for x in (covers, "NVML: each whole GPU") if x)
        return MeasuredEnergy(
            True, None, ", ".join(sorted(by)), requests, window, total,
            total / requests if requests > 0 else None,
            total / window if window > 0 else None, by, covers)


@dataclass(frozen=True, slots=True)
class EnergyComparison:
    """The plan's energy estimate (``placewise.energy.EnergyEstimate``) beside the energy
    measured over the pipelined stream (compare it with the estimate at saturation)."""

    estimate: Any  # EnergyEstimate
    measured: MeasuredEnergy

    def to_json(self) -> dict[str, Any]:
        est = self.estimate.to_json()
        ratio = None
        if (self.measured.energy_per_request_j is not None
                and est.get("saturated_energy_per_request_j")):
            ratio = self.measured.energy_per_request_j / est["saturated_energy_per_request_j"]
        return {"estimate": est, "measured": self.measured.to_json(),
                "measured_over_saturated_estimate": ratio,
                "compare": "measured energy per request over the stream (pipelined) against "
                           "the estimate at saturation"}


def energy_comparison(plan: Any, machine: Any, meter: EnergyMeter, *, runs: int,
                      batch: int) -> EnergyComparison:
    """The plan's estimate on ``machine`` and what ``meter`` measured over ``runs`` runs of
    ``batch`` requests (its window: ``start()`` to ``mark()``)."""
    return EnergyComparison(plan_energy(plan, machine),
                            meter.stop(requests=max(0, runs) * max(1, batch)))
