"""``placewise validate PLAN --measured PROFILE...``: rendering of the comparison of a plan
with a profile taken on the target (the library is ``placewise.validate.measured``)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from placewise.cli import _print_json, _table, out
from placewise.errors import InputError
from placewise.units import format_seconds

__all__ = ["validate_measured_cmd"]


def validate_measured_cmd(plan_file: Path, profiles: Sequence[Path], *,
                          layer_info: Path | None, trtexec_log: Path | None,
                          subgraphs: Path | None, as_json: bool,
                          running: Mapping[str, Any]) -> None:
    """Read the plan and the profiles, compare, print (``--json``: the record)."""
    from placewise.calibrate.imports.read import detect_format, read_profile
    from placewise.plan import load_plan
    from placewise.validate.measured import validate_measured

    for flag, given in running.items():
        if given:
            raise InputError(f"{flag} is for a run on this machine; --measured runs nothing",
                             place=flag)
    paths = [os.fspath(p) for p in profiles]
    formats = [detect_format(p) for p in paths]
    for opt, flag in ((layer_info, "--layer-info"), (trtexec_log, "--trtexec-log")):
        if opt is not None and "trtexec" not in formats:
            raise InputError(f"{flag} is for trtexec profiles; none was given", place=flag)
    plan = load_plan(plan_file)
    read = [read_profile(p, layer_info=layer_info, trtexec_log=trtexec_log) for p in paths]
    region_nodes: dict[str, tuple[str, ...]] = {}
    if subgraphs is not None:
        from placewise.calibrate.imports.onnxruntime import subgraph_nodes

        region_nodes = subgraph_nodes(subgraphs, [r.label for p in read for r in p.regions
                                                  if not r.nodes])
    got = validate_measured(plan, read, file=str(plan_file), region_nodes=region_nodes)
    if as_json:
        _print_json(got.to_json())
        return
    _render(got.to_json())


def _s(x: float | None) -> str:
    return format_seconds(x) if x is not None else "-"


def _pct(x: float | None) -> str:
    return f"{100 * x:+.0f}%" if x is not None else "-"


def _render(doc: dict[str, Any]) -> None:
    out.print(f"plan {doc['plan']} ({doc['machine']}) against "
              f"{', '.join(os.path.basename(p) for p in doc['profiles'])} "
              f"({', '.join(doc['tools'])}; ran on "
              f"{', '.join(f'{e} ({n})' for e, n in doc['engines'].items())}, read as "
              f"{doc['profile_device']}, {doc['profile_device_kind']}): nothing was run",
              markup=False)
    rows = [[p["name"] + (" *" if p["flagged"] else ""), f"{p['device']} ({p['device_kind']})",
             _s(p["predicted_s"]),
             " / ".join(_s(p["terms_s"][t]) for t in ("compute", "memory", "launch")),
             _s(p["measured_s"]), f"{p['ops_measured']}/{p['ops']}", _pct(p["error"])]
            for p in doc["partitions"]]
    out.print(_table("per partition (* measured on another kind of device)",
                     ["partition", "device", "predicted", "compute / memory / launch",
                      "measured", "ops measured", "error"], rows))
    if doc["copies"]:
        out.print(_table("copies", ["direction", "crossings", "predicted", "copies timed",
                                    "measured", "error"],
                         [[c["direction"], c["crossings"], _s(c["predicted_s"]), c["copies"],
                           _s(c["measured_s"]), _pct(c["error"])] for c in doc["copies"]]))
    e = doc["end_to_end"]
    out.print(f"end to end: predicted {_s(e['predicted_s'])}, measured median "
              f"{_s(e['measured_median_s'])} (p90 {_s(e['measured_p90_s'])}, {e['runs']} runs; "
              f"run overhead {_s(e['run_overhead_s'])}), error {_pct(e['error'])}; the measured "
              f"ops sum to {_s(doc['measured_total_s'])}", markup=False)
    if doc["misses"]:
        out.print(_table("largest misses", ["vertex", "ops", "kind", "module", "device",
                                            "predicted", "measured", "error"],
                         [[m["vertex"] + (" *" if m["flagged"] else ""), m["ops"], m["kind"],
                           m["module_path"] or "-",
                           m["device"], _s(m["predicted_s"]), _s(m["measured_s"]),
                           _pct(m["error"])] for m in doc["misses"]]))
    for note in doc["notes"]:
        out.print(f"note: {note}", markup=False)
