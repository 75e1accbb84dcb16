"""``placewise hw``: machine presets, a spec shown, this machine probed."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from placewise.cli import (
    JsonOpt,
    _print_json,
    _progress,
    _table,
    hw_app,
    out,
    resolve_machine,
)
from placewise.io import check_output_path
from placewise.units import format_bytes, format_flops

__all__ = ["render_machine"]


# ---- hw --------------------------------------------------------------------------------------
@hw_app.command("list")
def hw_list(as_json: JsonOpt = False) -> None:
    """List the machine presets."""
    from placewise.hardware.load import load_machine
    from placewise.hardware.spec import list_presets

    rows = []
    for name in list_presets():
        m = load_machine(name)
        rows.append({"name": name, "description": m.description,
                     "devices": [f"{d.name}:{d.kind.value}" for d in m.devices]})
    if as_json:
        _print_json({"presets": rows})
        return
    out.print(_table("presets", ["preset", "devices", "description"],
                     [[r["name"], " ".join(r["devices"]), _first_sentence(str(r["description"]))]
                      for r in rows], right=()))


def _first_sentence(text: str) -> str:
    head = " ".join(text.split()).split(". ")[0]
    return head if len(head) <= 70 else head[:67] + "..."


def _machine_json(m: Any) -> dict[str, Any]:
    data: dict[str, Any] = m.model_dump(mode="json")
    data["fingerprint"] = m.fingerprint()
    no_power = [d.name for d in m.devices if d.power is None]
    data["energy_available"] = not no_power
    data["energy_reason"] = (f"no power figures for {', '.join(no_power)}: energy is not "
                             f"available" if no_power else None)
    data["power_modes"] = [f"{m.name.partition('@')[0]}@{x.name}"
                           for x in (m.power.modes if m.power is not None else [])]
    return data


@hw_app.command("show")
def hw_show(hw: Annotated[str, typer.Argument(help="preset, YAML path, 'local', or NAME@MODE "
                                                  "(a power mode: jetson-agx-orin@30W)")],
            as_json: JsonOpt = False) -> None:
    """Show a machine spec."""
    m = resolve_machine(hw)
    if as_json:
        _print_json(_machine_json(m))
        return
    render_machine(m)


def render_machine(m: Any) -> None:
    out.print(f"[bold]{m.name}[/bold]  {m.description}")
    for k, v in sorted(m.tags.items()):
        out.print(f"  {k}: {v}")
    rows = []
    for d in m.devices:
        peaks = ", ".join(f"{k.value} {format_flops(v)}FLOP/s" for k, v in d.peak_flops_per_s.items())
        mem = ", ".join(f"{t.name} {format_bytes(t.capacity_bytes)} @ "
                        f"{format_bytes(t.bandwidth_bytes_per_s)}/s" for t in d.memory)
        rows.append([d.name, d.kind.value, peaks, mem, f"{d.launch_overhead_s * 1e6:.1f} us"])
    out.print(_table("devices", ["device", "kind", "peak", "memory", "launch"], rows))
    _render_efficiency(m)
    if m.links:
        out.print(_table("links", ["link", "between", "bandwidth", "latency", "resource"], [
            [ln.name, " <-> ".join(ln.endpoints), f"{format_bytes(ln.bandwidth_bytes_per_s)}/s",
             f"{ln.latency_s * 1e6:.2f} us", ln.resource_name] for ln in m.links]))
    if m.shared_resources:
        out.print(_table("shared resources", ["resource", "kind", "bandwidth"], [
            [r.name, r.kind, f"{format_bytes(r.bandwidth_bytes_per_s)}/s"]
            for r in m.shared_resources]))
    _render_power(m)


def _render_efficiency(m: Any) -> None:
    """Each device's fitted efficiency assumptions (``hw show``; sources in ``--json``),
    or that it keeps the cost model's built-in ones."""
    rows = []
    for d in m.devices:
        e = d.efficiency
        if e is None:
            rows.append([d.name, "built-in assumptions", "", ""])
            continue
        curves = "; ".join(f"{'/'.join(t.value for t in c.dtypes)} {c.peak_fraction:.3g} x W/"
                           f"(W + {format_flops(c.half_work_flops)}FLOP)" for c in e.contraction)
        rows.append([d.name, curves or "built-in",
                     "" if e.kernel_s is None else f"{e.kernel_s * 1e6:.2f} us",
                     "" if e.memory_fraction is None else f"{e.memory_fraction:.3g}"])
    if any(d.efficiency is not None for d in m.devices):
        out.print(_table("efficiency (fitted to published kernel measurements; sources: --json)",
                         ["device", "contraction curve", "kernel", "memory"], rows))


def _render_power(m: Any) -> None:
    """Power figures and modes (``hw show``), or why energy is not available."""
    no_power = [d.name for d in m.devices if d.power is None]
    if no_power:
        out.print(f"power: no power figures for {', '.join(no_power)}: energy is not available")
        return
    rows = [[d.name, f"{d.power.active_w:.4g} W", f"{d.power.idle_w:.4g} W",
             _first_sentence(d.power.source)] for d in m.devices]
    p = m.power
    if p is not None:
        rows.append(["machine (max/idle)", f"{p.max_w:g} W", f"{p.idle_w:g} W",
                     _first_sentence(p.max_source)])
    out.print(_table("power", ["device", "active", "idle", "source"], rows, right=(1, 2)))
    if p is not None and p.modes:
        current = p.mode or p.default_mode
        out.print(_table(f"power modes (this spec: {current}; pick one with "
                         f"{m.name.partition('@')[0]}@MODE)",
                         ["mode", "budget", "clocks (max, MHz; units online)"], [
            [x.name + (f" ({', '.join(x.aliases)})" if x.aliases else ""), f"{x.budget_w:g} W",
             ", ".join(f"{k} {v.clock_hz / 1e6:g}" + (f" x{v.units}" if v.units else "")
                       for k, v in x.devices.items())] for x in p.modes], right=(1,)))


@hw_app.command("probe")
def hw_probe(
    out_file: Annotated[Path | None, typer.Option("--out", help="Write the spec here (YAML)")] = None,
    quick: Annotated[bool, typer.Option(help="Fewer repeats, smaller sizes")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Measure this machine and write a spec (also refreshes the --hw local cache). CUDA
    devices where torch.cuda, onnxruntime's CUDA provider or nvidia-smi sees them become
    gpu devices; the report says what was found, or "no CUDA device (...)"."""
    from placewise.hardware.probe import probe_result, save_local

    if out_file is not None:
        check_output_path(out_file, place="--out")
    with _progress("probing this machine") as cb:
        res = probe_result(progress=cb, quick=quick)
    m = res.machine
    if not quick:
        save_local(m)
    if out_file is not None:
        from placewise.io import atomic_write_text

        atomic_write_text(out_file, yaml.safe_dump(m.model_dump(mode="json"), sort_keys=False))
    if as_json:
        _print_json({**_machine_json(m), "cuda": res.cuda.report,
                     "gpu_notes": list(res.gpu_notes)})
    else:
        render_machine(m)
        out.print(f"cuda: {res.cuda.report}")
        for note in res.gpu_notes:
            out.print(f"  {note}")
        if out_file is not None:
            out.print(f"wrote {out_file}")
