"""Power modes: a machine spec in one of its hardware power modes (nvpmodel's 15W, 30W...).

A spec with ``power.modes`` describes its ``power.default_mode`` (the clocks its peaks are
computed at are the devices' ``power.clock_hz``). ``apply_mode(machine, "30W")`` returns
the machine in another mode:

- **peaks** scale with each device's clock and online units:
  ``peak x (mode clock / clock_hz) x (mode units / units)``; a device's ``compute_units``
  scale with the units (CPU cores taken offline, GPU TPCs gated);
- **memory bandwidth** (every tier, shared memory controller and unified-memory link that
  runs at DRAM speed) scales with the DRAM clock when the mode caps it
  (``memory_clock_hz``);
- **power**: the machine's ``max_w`` becomes the mode's budget; a device's ``active_w`` /
  ``idle_w`` are the mode's where its source gives them, else ``active_w`` is
  ``idle_w + (active_w - idle_w) x clock ratio x units ratio`` (dynamic power linear in
  clock and units: it leaves out the voltage drop of a lower clock, so it over-estimates
  low modes) and ``idle_w`` is kept;
- the **name** says the mode (``jetson-agx-orin@30W``), the tag ``power_mode`` too, so a
  moded machine has its own fingerprint. Naming the default mode gives the spec unchanged
  (same name, same fingerprint): ``jetson-agx-orin@MAXN`` is ``jetson-agx-orin``.

>>> from placewise.hardware.spec import read_machine
>>> orin = read_machine("jetson-agx-orin")
>>> m30 = apply_mode(orin, "30W")
>>> m30.name, m30.power.max_w, m30.power.mode
('jetson-agx-orin@30W', 30.0, '30W')
>>> from placewise.units import DType
>>> round(m30.device("gpu").peak(DType.FP16) / orin.device("gpu").peak(DType.FP16), 3)
0.24
>>> apply_mode(orin, "maxn") is orin
True
"""

from __future__ import annotations

from typing import Any

from placewise.errors import SpecError
from placewise.hardware.spec import Device, Machine, PowerMode, parse_machine

__all__ = ["apply_mode", "find_mode", "mode_names", "split_ref"]


def split_ref(ref: str) -> tuple[str, str | None]:
    """``"NAME@MODE"`` -> ``("NAME", "MODE")``; no ``@`` -> ``(ref, None)``.

    >>> split_ref("jetson-agx-orin@30W"), split_ref("laptop-soc")
    (('jetson-agx-orin', '30W'), ('laptop-soc', None))
    """
    base, sep, mode = ref.rpartition("@")
    return (base, mode) if sep else (ref, None)


def mode_names(machine: Machine) -> list[str]:
    """The machine's power modes, by name (empty without modes)."""
    return [] if machine.power is None else [m.name for m in machine.power.modes]


def find_mode(machine: Machine, name: str, *, file: str | None = None) -> PowerMode:
    """The mode called ``name`` (or one of its aliases, case-insensitive); ``SpecError``
    naming the modes there are otherwise."""
    modes = machine.power.modes if machine.power is not None else []
    if not modes:
        raise SpecError(f"machine {machine.name!r} has no power modes", file=file,
                        place="power.modes")
    want = name.lower()
    for m in modes:
        if want == m.name.lower() or want in (a.lower() for a in m.aliases):
            return m
    raise SpecError(f"no power mode {name!r} (modes: "
                    f"{', '.join(_label(m) for m in modes)})", file=file, place="power.modes")


def _label(m: PowerMode) -> str:
    return m.name + (f" (also {', '.join(m.aliases)})" if m.aliases else "")


def apply_mode(machine: Machine, mode: str, *, file: str | None = None) -> Machine:
    """``machine`` in power mode ``mode`` (module docstring); the default mode returns
    ``machine`` itself."""
    m = find_mode(machine, mode, file=file)
    power = machine.power
    assert power is not None
    if power.mode is not None:
        raise SpecError(f"machine {machine.name!r} is already in power mode {power.mode!r}",
                        file=file, place="power.mode")
    if power.default_mode is not None and find_mode(machine, power.default_mode).name == m.name:
        return machine
    mem = (m.memory_clock_hz / power.memory_clock_hz
           if m.memory_clock_hz is not None and power.memory_clock_hz else 1.0)
    data: dict[str, Any] = machine.model_dump(mode="json")
    data["name"] = f"{machine.name}@{m.name}"
    data["description"] = (f"{machine.description} In power mode {m.name} "
                           f"({m.budget_w:g} W budget): {m.source}").strip()
    data["tags"] = {**machine.tags, "power_mode": m.name}
    data["power"].update(max_w=m.budget_w, max_source=m.source, mode=m.name)
    for d, dd in zip(machine.devices, data["devices"], strict=True):
        _scale_device(d, dd, m, mem)
    if mem != 1.0:
        for r in data["shared_resources"]:
            if r["kind"] == "memory_controller":
                r["bandwidth_bytes_per_s"] *= mem
        scaled = {r["name"] for r in data["shared_resources"] if r["kind"] == "memory_controller"}
        for link in data["links"]:
            if link.get("resource") in scaled:
                link["bandwidth_bytes_per_s"] *= mem
    return parse_machine(data, file=file or data["name"])


def _scale_device(d: Device, dd: dict[str, Any], m: PowerMode, mem: float) -> None:
    """Scale one device's dumped spec ``dd`` to mode ``m`` in place."""
    if mem != 1.0:
        for t in dd["memory"]:
            t["bandwidth_bytes_per_s"] *= mem
    md = m.devices.get(d.name)
    if md is None or d.power is None or d.power.clock_hz is None:
        return
    clock = md.clock_hz / d.power.clock_hz
    units = (md.units / d.power.units) if md.units is not None and d.power.units else 1.0
    scale = clock * units
    dd["peak_flops_per_s"] = {k: v * scale for k, v in dd["peak_flops_per_s"].items()}
    dd["peak_source"] = (f"{d.peak_source} Scaled to power mode {m.name}: x{clock:.4g} "
                         f"(max clock {md.clock_hz / 1e6:g} MHz of {d.power.clock_hz / 1e6:g})"
                         + (f" x{units:.4g} ({md.units} of {d.power.units} units online)"
                            if units != 1.0 else "") + f" ({m.source})")
    if units != 1.0:
        dd["compute_units"] = max(1, round(d.compute_units * units))
    p = dd["power"]
    idle = md.idle_w if md.idle_w is not None else d.power.idle_w
    if md.active_w is not None:
        active, src = md.active_w, f"power mode {m.name}: {md.source}"
    else:
        active = idle + max(0.0, d.power.active_w - d.power.idle_w) * scale
        src = (f"power mode {m.name}: scaled, idle_w + (active_w - idle_w) x {scale:.4g} "
               f"(clock x units of this mode), from: {d.power.source}")
    p.update(active_w=max(active, idle), idle_w=idle, source=src, clock_hz=md.clock_hz,
             units=md.units if md.units is not None else d.power.units)
