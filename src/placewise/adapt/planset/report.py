"""What ``explain`` and ``check`` say about a plan set (``placewise.adapt.planset``).

``explain_plan_set(ps)``: one JSON object (buckets with edges, plan entries and which
buckets share them, the choice and why, the alternatives, padding per grid point,
residency per memory); ``render_plan_set(data)``: the same as plain text.
``check_plan_set(ps, ...)``: every bucket plan through ``placewise.check.check_plan``
(findings prefixed with the bucket), plus residency recomputed from the bucket plans
themselves (weights once per device, the largest non-weight peak) against each memory's
capacity and against what the file records.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from placewise.adapt.planset.build import grid_facts
from placewise.adapt.planset.choice import resident_bytes
from placewise.check import Check, Finding, Severity, check_plan
from placewise.units import format_bytes, format_seconds

__all__ = ["check_plan_set", "explain_plan_set", "planset_findings_json", "render_plan_set"]


def explain_plan_set(ps: Any) -> dict[str, Any]:
    """The plan set explained (module docstring)."""
    ch = ps.choice
    return {
        "format": "placewise-planset-explain", "model": ps.model, "machine": ps.machine,
        "objective": ps.objective, "axes": list(ps.axes), "envelope": ps.envelope,
        "fingerprint": ps.fingerprint(),
        "buckets": [{**b.to_json(), "devices": ps.plan_of(b).devices_used(),
                     "makespan_s": ps.plan_of(b).makespan_s} for b in ps.buckets],
        "plan_entries": [{"index": i, "batch": p.batch, "devices": p.devices_used(),
                          "buckets": [b.name for b in ps.buckets if b.plan_index == i]}
                         for i, p in enumerate(ps.plans)],
        "choice": {"buckets": ch.get("buckets"), "edges": ch.get("edges"),
                   "why": ch.get("why"), "method": ch.get("method"),
                   "costs": ch.get("costs"), "chosen": ch.get("chosen"),
                   "one_bucket": ch.get("one_bucket"),
                   "per_grid_point": ch.get("per_grid_point"),
                   "alternatives": ch.get("alternatives"), "considered": ch.get("considered")},
        "mix": ps.mix.to_json(),
        "padding": list(ps.padding),
        "residency": ps.residency,
    }


def _shape(d: dict[str, int]) -> str:
    return " ".join(f"{a}={v}" for a, v in d.items())


def _us(x: Any) -> str:
    return "-" if x is None else format_seconds(float(x))


def render_plan_set(data: dict[str, Any], *, max_rows: int = 40) -> str:
    """``explain_plan_set``'s object as plain text."""
    lines = [f"plan set {data['model']} on {data['machine']} ({data['objective']}); "
             f"envelope " + "; ".join(f"{a} {', '.join(map(str, v))}"
                                      for a, v in data["envelope"].items()),
             f"  fingerprint {data['fingerprint']}", "", "buckets:"]
    for b in data["buckets"]:
        lines.append(f"  {b['name']:<24} {_shape(b['lower'])} .. {_shape(b['upper'])}  "
                     f"plan entry {b['plan_index']}  latency {_us(b['predicted_latency_s'])}"
                     f"  P={b['probability']:.3g}  expected padding "
                     f"{_us(b['expected_padding_s'])}  on {', '.join(b['devices'])}")
    for e in data["plan_entries"]:
        if len(e["buckets"]) > 1:
            lines.append(f"  plan entry {e['index']} (the same placement) is shared by "
                         f"{', '.join(e['buckets'])}")
    ch = data["choice"]
    lines += ["", f"choice ({ch['method']}; {ch['considered']} evaluated): {ch['why']}"]
    costs = ch.get("costs") or {}
    lines.append(f"  costs: compile {costs.get('compile_s_per_bucket')} s per extra bucket "
                 f"over {costs.get('horizon_requests')} requests; memory "
                 f"{costs.get('memory_s_per_gib')} s per request per extra GiB")
    lines.append("  cheapest edge sets: " + "; ".join(
        f"{_edges(a['edges'])} -> {_us(a['total_cost_s'])}"
        for a in (ch.get("alternatives") or [])[:5]))
    lines += ["", "padding (served in its bucket / in the next bucket up):"]
    for r in data["padding"][:max_rows]:
        nxt = ", ".join(f"{a}: +{_us(v['padding_s'])}" for a, v in r["next_bucket_up"].items())
        lines.append(f"  {_shape(r['shape']):<18} own {_us(r['own_latency_s'])}  served at "
                     f"{_shape(r['upper'])} {_us(r['served_latency_s'])} (+"
                     f"{_us(r['padding_s'])})  P={r['probability']:.3g}"
                     + (f"  next up {nxt}" if nxt else ""))
    if len(data["padding"]) > max_rows:
        lines.append(f"  ... and {len(data['padding']) - max_rows} more grid points")
    res = data["residency"]
    lines += ["", f"residency (weights once per device): {format_bytes(res['resident_bytes'])}"
                  f" resident, weights {format_bytes(res['weights_bytes'])} (without sharing "
                  f"{format_bytes(res['weights_without_sharing_bytes'])}); "
                  f"{'fits' if res['fits'] else 'DOES NOT FIT'}"]
    for mem, r in res["memories"].items():
        cap = r["capacity_bytes"]
        lines.append(f"  {mem}: weights {format_bytes(r['weights_bytes'])} + largest other "
                     f"peak {format_bytes(r['other_peak_bytes'])} = "
                     f"{format_bytes(r['resident_bytes'])} of "
                     f"{format_bytes(cap) if cap is not None else '?'} "
                     f"({', '.join(r['devices']) or 'no weights'})")
    return "\n".join(lines) + "\n"


def _edges(e: dict[str, list[int]]) -> str:
    return " ".join(f"{a}:{','.join(map(str, v))}" for a, v in e.items())


def check_plan_set(ps: Any, *, machine: Any = None,
                   graph_of: Callable[[Any], Any] | None = None,
                   file: str | None = None) -> list[tuple[str, Any]]:
    """(bucket name or ``residency``, ``Finding``) for everything wrong (module
    docstring). ``graph_of(bucket)``: the bucket's graph, to check each plan against its
    model too; ``machine``: the machine, to check support and fingerprints."""
    out: list[tuple[str, Any]] = []
    for b in ps.buckets:
        graph = graph_of(b) if graph_of is not None else None
        for f in check_plan(ps.plan_of(b), graph, machine, file=file):
            out.append((b.name, f))
    planned = {tuple(b.upper[a] for a in ps.axes): ps.plan_of(b) for b in ps.buckets}
    facts = grid_facts(tuple(ps.axes), ps.envelope, planned)
    got = resident_bytes(facts, planned)
    recorded = ps.residency.get("memories", {})
    for mem, r in got.items():
        if not r["fits"]:
            out.append(("residency", Finding(
                Check.MEMORY, Severity.ERROR, mem,
                f"the bucket plans need {r['resident_bytes']} bytes resident (weights "
                f"{r['weights_bytes']} once per device + the largest other peak "
                f"{r['other_peak_bytes']}), more than its {r['capacity_bytes']}")))
        rec = recorded.get(mem)
        if rec is None or int(rec.get("resident_bytes", -1)) != r["resident_bytes"]:
            out.append(("residency", Finding(
                Check.MEMORY, Severity.ERROR, mem,
                f"the file records {None if rec is None else rec.get('resident_bytes')} "
                f"bytes resident, the bucket plans give {r['resident_bytes']}")))
    return out


def planset_findings_json(found: Sequence[tuple[str, Any]], *, checks: Sequence[Any],
                          buckets: Sequence[str]) -> dict[str, Any]:
    """``check --json`` of a plan set: ``ok``, counts, and per finding its bucket."""
    errors = sum(1 for _, f in found if f.severity is Severity.ERROR)
    return {"ok": errors == 0, "errors": errors, "warnings": len(found) - errors,
            "checks": [c.value for c in checks] + ["residency"], "buckets": list(buckets),
            "findings": [{"bucket": b, "check": f.check.value, "severity": f.severity.value,
                          "subject": f.subject, "message": f.message} for b, f in found]}
