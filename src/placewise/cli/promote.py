"""``placewise promote`` and ``placewise rollback``: the command line of the guardrail and
the last-known-good store (``placewise.adapt.promote``, ``placewise.adapt.store``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from placewise.cli import JsonOpt, _print_json, _progress, app, out

__all__ = ["promote", "rollback"]


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 1e3:.3f} ms"


def _print_record(doc: dict[str, Any]) -> None:
    s = doc["stats"]
    out.print(f"decision: {doc['decision']}  ({doc['reason']})")
    out.print(f"  median improvement {_pct(s['improvement'])}, "
              f"{100 * s['confidence']:g}% CI [{_pct(s['ci_low'])}, {_pct(s['ci_high'])}] "
              f"(exact coverage {100 * s['coverage']:.1f}%) over {s['pairs']} block pairs; "
              f"threshold {100 * s['threshold']:g}%")
    for role in ("incumbent", "candidate"):
        a = doc[role]
        out.print(f"  {role:<9} {a['file']}: p50 {_ms(a['p50_s'])}, p99 {_ms(a['p99_s'])}, "
                  f"{a['completed']} of {a['arrived']} requests")
    out.print(f"  p99 ratio {s['p99_ratio']:.3f} (tolerance +{100 * s['p99_tolerance']:g}%; "
              f"{s['p99_note']})" if s["p99_ratio"] is not None else "  p99: n/a")
    out.print(f"  quality: {'holds' if doc['quality']['holds'] else 'FAILS'}: "
              f"{doc['quality']['text']}")
    t = doc["traffic"]
    out.print(f"  traffic: {t['requests']} requests per arm ({t['source']}), {t['blocks']} "
              f"A/B block pairs of {t['block_requests']} in {t['rounds']} round(s), "
              f"warm-up {t['warmup']}; "
              f"{doc['wall_s']:.1f} s")
    for c in doc["checks"]:
        out.print(f"  [{'ok' if c['passed'] else 'no'}] {c['name']}: {c['text']}")
    if doc["store"]:
        for a in doc["store"]["actions"]:
            out.print(f"  store {doc['store']['dir']}: {a}")
    for n in doc["notes"]:
        out.print(f"  note: {n}")


@app.command()
def promote(
    candidate: Annotated[Path, typer.Option("--candidate", help="The candidate plan or plan set (B)")],
    incumbent: Annotated[Path | None, typer.Option("--incumbent", help="The plan or plan set in service (A); default: the --store's last-known-good")] = None,
    requests: Annotated[int | None, typer.Option("--requests", help="Requests per arm (default: the whole --trace, or generated for blocks of about 50 ms)")] = None,
    trace: Annotated[Path | None, typer.Option("--trace", help="Replayed traffic: a SHAPES.jsonl shape trace")] = None,
    store: Annotated[Path | None, typer.Option("--store", help="Last-known-good store folder: keeps the candidate when promoted")] = None,
    threshold: Annotated[float, typer.Option("--threshold", help="The median improvement the CI's lower end must clear (fraction)")] = 0.05,
    p99_tolerance: Annotated[float, typer.Option("--p99-tolerance", help="How much worse the candidate's p99 may be (fraction)")] = 0.10,
    blocks: Annotated[int, typer.Option("--blocks", help="A/B block pairs")] = 20,
    rounds: Annotated[int | None, typer.Option("--rounds", help="Rounds of freshly started instances the pairs are split over (default: 2 when each gets 6 pairs, else 1)")] = None,
    warmup: Annotated[int, typer.Option("--warmup", help="Untimed requests per arm first")] = 10,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the generated inputs")] = 0,
    as_json: JsonOpt = False,
) -> None:
    """Run the incumbent and the candidate interleaved (A/B/A/B blocks) on the same
    replayed traffic, for real, and promote the candidate only when the 95% CI of the
    median improvement clears the threshold, p99 holds and quality holds."""
    from placewise.adapt.promote import promote as _promote

    with _progress("promote") as bar:
        rec = _promote(incumbent, candidate, requests=requests, blocks=blocks, trace=trace,
                       store=store, threshold=threshold, p99_tolerance=p99_tolerance,
                       warmup=warmup, seed=seed, rounds=rounds, progress=bar)
    doc = rec.to_json()
    if as_json:
        _print_json(doc)
        return
    _print_record(doc)


@app.command()
def rollback(
    store: Annotated[Path, typer.Option("--store", help="Last-known-good store folder")],
    as_json: JsonOpt = False,
) -> None:
    """Make the previous last-known-good plan current again (one step back)."""
    from placewise.adapt.store import LastKnownGood

    lkg = LastKnownGood(store)
    left, restored = lkg.rollback()
    notes = lkg.version_notes(restored)
    if as_json:
        _print_json({"store": str(store), "from": left.to_json(), "to": restored.to_json(),
                     "current_file": str(lkg.current_path), "notes": notes})
        return
    h = restored.header
    out.print(f"rolled back {store}: entry {left.id} -> entry {restored.id} "
              f"({h.kind} {h.source}, kept {h.when}); serve {lkg.current_path}")
    for n in notes:
        out.print(f"  note: {n}")
