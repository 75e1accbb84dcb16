"""How many buckets a plan set has and where their edges fall: the cost terms, the
search over edge sets (exhaustive up to ``MAX_EXHAUSTIVE`` edge sets; beyond, coordinate
descent with a dynamic programme over each axis's sorted values), residency and padding.

Everything here is a pure function of per-grid-point facts (``GridFacts``: each grid
point's predicted latency, placement and memory) and the mix's probabilities, so the
choice can be tested on hand-made tables; ``placewise.adapt.planset`` fills the facts from
real plans.

**Buckets.** The envelope is a grid (the product of each axis's sorted values). An *edge
set* picks, per axis, the values where a bucket ends (the axis's largest value always
does); the buckets are the product of the per-axis ranges ``(previous edge, edge]``. A
bucket's plan is the plan of the grid point at its upper corner (``upper``); a shape is
served in the smallest bucket covering it, padded up to ``upper``. A bucket the mix gives
no probability is dropped (``serving``; not the one at the envelope's top corner): its
shapes are served in the covering bucket of least predicted latency.

**The cost of an edge set** (seconds per request; every term in the same unit):

- ``expected_latency_s`` = sum over the mix's grid points ``g`` of ``P(g) x latency(upper(g))``
  (a mix shape between grid points counts at the smallest grid point covering it);
- ``compile_term_s`` = ``(buckets - 1) x compile_s_per_bucket / horizon_requests``: each
  bucket beyond the first is one more set of compiled sessions (the executor compiles
  one session per partition and shape), a one-off cost amortised over the requests the
  plan set serves before it is replanned;
- ``memory_term_s`` = ``memory_s_per_gib x`` (GiB resident beyond what one bucket holds):
  the price, per request, of holding more memory (``resident_bytes``);
- ``total_cost_s`` = the sum. An edge set whose residency does not fit a memory is not
  chosen (``fits`` False).

The defaults (``ChoiceCosts``) are stated in the plan set's ``choice.costs``: a plan set
serves a million requests before it is replanned; one more bucket costs a second to
compile (on this project's two-core test machine, exporting one bucket's partitions from
a zoo model and opening them in onnxruntime took about 1.1 s for ``zoo:mlp`` and
``zoo:bert``, ``benchmarks/planset.py``), so 1 us per request; a GiB held
beyond one bucket's residency is worth 10 us per request. ``placewise plan
--bucket-cost KEY=VALUE`` changes them.

**Residency** (``resident_bytes``): a weight lives once per device: per memory (a
device's tier, or a pool of tiers that are one physical memory), the union of the
parameter bytes the bucket plans place on its devices, each ``(device, parameter, held
dtype and shape)`` counted once, plus the largest activation/scratch/transfer peak of any bucket
plan in it (its peak minus its weights), against its capacity.

>>> facts = GridFacts(axes=("batch",), envelope={"batch": (1, 16)},
...                   latency_s={(1,): 1.0, (16,): 10.0}, placement_key={(1,): "a", (16,): "a"},
...                   weights={}, other_peak={}, capacity={})
>>> edges, choice = choose(facts, {(1,): 0.9, (16,): 0.1}, ChoiceCosts())
>>> edges, choice["buckets"]
(((1, 16),), 2)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from placewise.errors import InputError

__all__ = [
    "GIB",
    "MAX_EXHAUSTIVE",
    "ChoiceCosts",
    "Edges",
    "GridFacts",
    "Point",
    "axis_edge_sets",
    "choose",
    "cover_of",
    "cover_point",
    "evaluate_edges",
    "grid_points",
    "padding_table",
    "resident_bytes",
    "serving",
    "upper_of",
]

GIB = float(2**30)
#: edge sets searched exhaustively up to this many; beyond, coordinate descent (a dynamic
#: programme per axis, exact for one axis when memory does not matter)
MAX_EXHAUSTIVE = 4096

Point = tuple[int, ...]
Edges = tuple[tuple[int, ...], ...]  # per axis, the values where buckets end


@dataclass(frozen=True, slots=True)
class ChoiceCosts:
    """The stated prices of more buckets (module docstring): ``horizon_requests``
    requests served before the plan set is replanned; ``compile_s_per_bucket`` wall
    seconds to compile one more bucket's sessions; ``memory_s_per_gib`` seconds per
    request a GiB of extra resident memory is worth."""

    horizon_requests: int = 1_000_000
    compile_s_per_bucket: float = 1.0
    memory_s_per_gib: float = 1e-5

    def __post_init__(self) -> None:
        if self.horizon_requests < 1:
            raise InputError(f"horizon_requests must be >= 1, got {self.horizon_requests}",
                             place="costs")
        for k in ("compile_s_per_bucket", "memory_s_per_gib"):
            v = getattr(self, k)
            if not (math.isfinite(v) and v >= 0):
                raise InputError(f"{k} must be a finite number >= 0, got {v}", place="costs")

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "units": {
            "horizon_requests": "requests", "compile_s_per_bucket": "s (wall, one-off)",
            "memory_s_per_gib": "s per request per GiB resident beyond one bucket",
            "total_cost_s": "s per request"}}


@dataclass(frozen=True, slots=True)
class GridFacts:
    """What the choice needs of each grid point's plan: ``latency_s`` (predicted),
    ``placement_key`` (equal keys: the same device/precision assignment), ``weights``:
    point -> memory -> ``{(device, parameter, held dtype): bytes}``, ``other_peak``:
    point -> memory -> the peak bytes that are not weights, ``capacity``: memory -> bytes."""

    axes: tuple[str, ...]
    envelope: Mapping[str, Sequence[int]]
    latency_s: Mapping[Point, float]
    placement_key: Mapping[Point, str]
    weights: Mapping[Point, Mapping[str, Mapping[tuple[str, str, str], int]]]
    other_peak: Mapping[Point, Mapping[str, int]]
    capacity: Mapping[str, int]

    def values(self, axis: int) -> tuple[int, ...]:
        return tuple(self.envelope[self.axes[axis]])


def grid_points(axes: Sequence[str], envelope: Mapping[str, Sequence[int]]) -> list[Point]:
    """Every grid point, in lexicographic order of the axes.

    >>> grid_points(("batch", "seq"), {"batch": [1, 2], "seq": [8, 16]})
    [(1, 8), (1, 16), (2, 8), (2, 16)]
    """
    return [tuple(p) for p in itertools.product(*(envelope[a] for a in axes))]


def cover_point(axes: Sequence[str], envelope: Mapping[str, Sequence[int]],
                shape: Mapping[str, int], *, file: str | None = None,
                place: str | None = None) -> Point:
    """The smallest grid point covering ``shape`` (axis -> size; a missing ``batch`` is 1);
    ``InputError`` for a size below 1, a missing axis, or one above the envelope."""
    out = []
    for a in axes:
        if a not in shape:
            if a != "batch":
                raise InputError(f"the shape has no {a!r} (the envelope's axes: "
                                 f"{', '.join(axes)})", file=file, place=place)
            v = 1
        else:
            v = shape[a]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InputError(f"{a} must be a positive integer, got {v!r}", file=file,
                             place=place)
        vals = envelope[a]
        up = next((x for x in vals if x >= v), None)
        if up is None:
            raise InputError(f"{a}={v} is above the envelope (largest {a} {vals[-1]})",
                             file=file, place=place)
        out.append(up)
    return tuple(out)


def upper_of(edges: Edges, point: Point) -> Point:
    """The upper corner of the bucket of ``point`` under ``edges``."""
    return tuple(next(e for e in es if e >= v) for es, v in zip(edges, point, strict=True))


def axis_edge_sets(values: Sequence[int]) -> list[tuple[int, ...]]:
    """Every edge set of one axis: any subset of its values that holds the largest.

    >>> axis_edge_sets([1, 2, 4])
    [(4,), (1, 4), (2, 4), (1, 2, 4)]
    """
    head, last = list(values[:-1]), values[-1]
    out = []
    for k in range(len(head) + 1):
        for sub in itertools.combinations(head, k):
            out.append((*sub, last))
    return out


def resident_bytes(facts: GridFacts, uppers: Iterable[Point]) -> dict[str, dict[str, Any]]:
    """Residency of the bucket plans at ``uppers`` (module docstring), per memory:
    ``weights_bytes`` (each weight once per device), ``weights_without_sharing_bytes``
    (every bucket plan counting its own), ``other_peak_bytes`` (the largest non-weight
    peak), ``resident_bytes``, ``capacity_bytes`` and ``fits``."""
    ups = sorted(set(uppers))
    out: dict[str, dict[str, Any]] = {}
    memories = sorted({m for u in ups for m in (*facts.weights.get(u, {}),
                                                 *facts.other_peak.get(u, {}))})
    for mem in memories:
        union: dict[tuple[str, str, str], int] = {}
        each = 0
        for u in ups:
            w = facts.weights.get(u, {}).get(mem, {})
            union.update(w)
            each += sum(w.values())
        weights = sum(union.values())
        other = max((facts.other_peak.get(u, {}).get(mem, 0) for u in ups), default=0)
        cap = facts.capacity.get(mem)
        total = weights + other
        out[mem] = {"weights_bytes": weights, "weights_without_sharing_bytes": each,
                    "other_peak_bytes": other, "resident_bytes": total,
                    "capacity_bytes": cap, "fits": cap is None or total <= cap,
                    "devices": sorted({k[0] for k in union})}
    return out


def _edges_json(facts: GridFacts, edges: Edges) -> dict[str, list[int]]:
    return {a: list(es) for a, es in zip(facts.axes, edges, strict=True)}


def cover_of(facts: GridFacts, kept: Sequence[Point], point: Point) -> Point:
    """The kept bucket (upper corner) that serves ``point`` when its own was dropped: of
    those whose upper covers it, the one of least predicted latency (then the smallest)."""
    ups = [u for u in kept if all(a >= b for a, b in zip(u, point, strict=True))]
    return min(ups, key=lambda u: (facts.latency_s[u], math.prod(u), u))


def serving(facts: GridFacts, edges: Edges, probs: Mapping[Point, float], *,
            drop: bool = True) -> tuple[list[Point], dict[Point, Point]]:
    """The buckets kept under ``edges`` (upper corners, sorted) and, per grid point, the
    upper corner it is served at. A bucket the mix gives no probability is dropped when
    a kept bucket covers it (every bucket but the one at the envelope's top corner): its
    shapes, should they come, are served in ``cover_of``; dropping it changes no expected
    latency and saves its compile and memory cost. ``drop=False``: every bucket kept."""
    pts = grid_points(facts.axes, facts.envelope)
    own = {g: upper_of(edges, g) for g in pts}
    mass: dict[Point, float] = {}
    for g, p in probs.items():
        mass[own[g]] = mass.get(own[g], 0.0) + p
    top = tuple(es[-1] for es in edges)
    kept = sorted(u for u in set(own.values())
                  if not drop or mass.get(u, 0.0) > 0 or u == top)
    keep = set(kept)
    return kept, {g: u if u in keep else cover_of(facts, kept, u) for g, u in own.items()}


def evaluate_edges(facts: GridFacts, edges: Edges, probs: Mapping[Point, float],
                   costs: ChoiceCosts, base_resident: int | None = None, *,
                   drop: bool = True) -> dict[str, Any]:
    """The cost terms of one edge set (module docstring); ``drop``: as ``serving``."""
    uppers, served = serving(facts, edges, probs, drop=drop)
    expected = sum(p * facts.latency_s[served[g]] for g, p in probs.items())
    res = resident_bytes(facts, uppers)
    total_res = sum(int(r["resident_bytes"]) for r in res.values())
    extra = 0 if base_resident is None else max(0, total_res - base_resident)
    n = len(uppers)
    compile_term = (n - 1) * costs.compile_s_per_bucket / costs.horizon_requests
    memory_term = costs.memory_s_per_gib * extra / GIB
    fits = all(r["fits"] for r in res.values())
    return {"edges": _edges_json(facts, edges), "buckets": n,
            "dropped": math.prod(len(es) for es in edges) - n,
            "expected_latency_s": expected, "compile_term_s": compile_term,
            "memory_term_s": memory_term, "extra_resident_bytes": extra,
            "resident_bytes": total_res, "fits": fits,
            "total_cost_s": expected + compile_term + memory_term if fits else None}


def _key(rec: Mapping[str, Any]) -> tuple[float, int, int]:
    """Least cost, then fewest buckets, then fewest edges (dropped buckets included)."""
    t = rec["total_cost_s"]
    return (math.inf if t is None else float(t), int(rec["buckets"]),
            int(rec["buckets"]) + int(rec["dropped"]))


def _candidates(facts: GridFacts) -> tuple[list[Edges] | None, str]:
    per_axis = [axis_edge_sets(facts.values(i)) for i in range(len(facts.axes))]
    n = math.prod(len(x) for x in per_axis)
    if n <= MAX_EXHAUSTIVE:
        return [tuple(c) for c in itertools.product(*per_axis)], f"exhaustive over {n} edge sets"
    return None, (f"coordinate descent, a dynamic programme per axis ({n} edge sets are "
                  f"too many to try)")


def _dp_axis(facts: GridFacts, cur: Sequence[tuple[int, ...]], i: int,
             probs: Mapping[Point, float], costs: ChoiceCosts) -> tuple[int, ...]:
    """The best edges of axis ``i`` with the other axes' edges ``cur`` fixed: a dynamic
    programme over the axis's sorted values (a bucket range ``(v[j], v[k]]`` costs the
    mix mass in it served at ``v[k]``, plus one compile term per bucket it makes across
    the other axes). The memory term is left to the exact evaluation that follows."""
    vals = facts.values(i)
    n = len(vals)
    others = math.prod(len(e) for j, e in enumerate(cur) if j != i)
    per_bucket = others * costs.compile_s_per_bucket / costs.horizon_requests
    # mass[k]: (probability, point) of the mix whose axis-i value is vals[k]
    mass: list[list[tuple[float, Point]]] = [[] for _ in vals]
    for g, p in probs.items():
        mass[vals.index(g[i])].append((p, g))

    def served(g: Point, edge: int) -> float:
        up = tuple(edge if j == i else next(e for e in cur[j] if e >= g[j])
                   for j in range(len(g)))
        return facts.latency_s[up]

    best = [0.0] + [math.inf] * n  # best[k + 1]: values 0..k covered
    cut = [0] * (n + 1)
    for k in range(n):
        for j in range(k + 1):  # the range vals[j..k], served at vals[k]
            c = best[j] + per_bucket + sum(p * served(g, vals[k])
                                           for m in mass[j:k + 1] for p, g in m)
            if c < best[k + 1]:
                best[k + 1], cut[k + 1] = c, j
    edges, k = [], n
    while k > 0:
        edges.append(vals[k - 1])
        k = cut[k]
    return tuple(sorted(edges))


def _descend(facts: GridFacts, probs: Mapping[Point, float], costs: ChoiceCosts,
             base: int) -> list[dict[str, Any]]:
    """Coordinate descent: from one bucket per grid point, each axis's edges in turn
    chosen by ``_dp_axis`` with the others fixed, kept when the exact cost improves,
    until nothing does (at most 8 rounds)."""
    cur: list[tuple[int, ...]] = [facts.values(i) for i in range(len(facts.axes))]
    seen: dict[Edges, dict[str, Any]] = {}

    def ev(e: Edges) -> dict[str, Any]:
        if e not in seen:
            seen[e] = evaluate_edges(facts, e, probs, costs, base)
        return seen[e]

    best = ev(tuple(cur))
    for _ in range(8):
        improved = False
        for i in range(len(cur)):
            trial = tuple(_dp_axis(facts, cur, i, probs, costs) if j == i else cur[j]
                          for j in range(len(cur)))
            rec = ev(trial)
            if _key(rec) < _key(best):
                best, cur, improved = rec, list(trial), True
        if not improved:
            break
    return list(seen.values())


def choose(facts: GridFacts, probs: Mapping[Point, float], costs: ChoiceCosts
           ) -> tuple[Edges, dict[str, Any]]:
    """The edge set of least ``total_cost_s`` (ties: fewer buckets, then fewer edges) and
    the ``choice``
    record: the costs, how the edge sets were searched, the chosen one, the reference
    alternatives (one bucket; one bucket per grid point, none dropped) and the ten
    cheapest, and why."""
    axes_vals = [facts.values(i) for i in range(len(facts.axes))]
    one: Edges = tuple((v[-1],) for v in axes_vals)
    every: Edges = tuple(tuple(v) for v in axes_vals)
    base = int(evaluate_edges(facts, one, probs, costs)["resident_bytes"])
    cands, method = _candidates(facts)
    if cands is not None:
        recs = [evaluate_edges(facts, e, probs, costs, base) for e in cands]
    else:
        recs = _descend(facts, probs, costs, base)
    recs.sort(key=lambda r: (*_key(r), str(r["edges"])))
    best = recs[0]
    if best["total_cost_s"] is None:
        raise InputError("no edge set of the envelope fits in memory with its weights and "
                         "activations resident", place="--envelope")
    chosen: Edges = tuple(tuple(best["edges"][a]) for a in facts.axes)
    one_rec = evaluate_edges(facts, one, probs, costs, base)
    every_rec = evaluate_edges(facts, every, probs, costs, base, drop=False)
    choice = {"method": method, "costs": costs.to_json(), "buckets": best["buckets"],
              "edges": best["edges"], "chosen": best, "one_bucket": one_rec,
              "per_grid_point": every_rec, "considered": len(recs),
              "alternatives": recs[:10], "why": _why(best, one_rec, every_rec)}
    return chosen, choice


def _fmt(s: float | None) -> str:
    return "does not fit" if s is None else f"{s * 1e6:.4g} us"


def _why(best: Mapping[str, Any], one: Mapping[str, Any], every: Mapping[str, Any]) -> str:
    edges = "; ".join(f"{a} at {', '.join(map(str, v))}" for a, v in best["edges"].items())
    text = (f"{best['buckets']} bucket{'s' if best['buckets'] != 1 else ''} (edges: {edges}) "
            f"cost {_fmt(best['total_cost_s'])} per request: expected latency "
            f"{_fmt(best['expected_latency_s'])} + compile {_fmt(best['compile_term_s'])} + "
            f"memory {_fmt(best['memory_term_s'])}")
    text += (f"; one bucket for all costs {_fmt(one['total_cost_s'])} (expected latency "
             f"{_fmt(one['expected_latency_s'])}), one bucket per grid point "
             f"({every['buckets']}) {_fmt(every['total_cost_s'])} (expected latency "
             f"{_fmt(every['expected_latency_s'])} + compile {_fmt(every['compile_term_s'])}"
             f" + memory {_fmt(every['memory_term_s'])})")
    if best.get("dropped"):
        text += (f"; {best['dropped']} bucket{'s' if best['dropped'] != 1 else ''} of "
                 f"these edges without mix probability dropped (their shapes pad to the "
                 f"covering bucket of least latency)")
    if best["buckets"] == 1:
        text += ": padding everything to the largest shape costs less than another bucket"
    elif best["buckets"] == every["buckets"]:
        text += ": every grid point saves more padding than its bucket costs"
    else:
        text += (": the chosen edges save the padding that matters under the mix, and "
                 "further buckets cost more than the padding they would save")
    return text


def padding_table(facts: GridFacts, edges: Edges, probs: Mapping[Point, float]
                  ) -> list[dict[str, Any]]:
    """Per grid point: its bucket's upper corner, the latency at its own grid point and
    served padded in its bucket, the padding cost (the difference), its probability under
    the mix, and along each axis the padding cost of serving it in the next bucket up."""
    kept, at = serving(facts, edges, probs)
    keep = set(kept)
    rows = []
    for g in grid_points(facts.axes, facts.envelope):
        u = at[g]
        own = facts.latency_s[g]
        served = facts.latency_s[u]
        nxt: dict[str, Any] = {}
        for i, a in enumerate(facts.axes):
            later = [e for e in edges[i] if e > u[i]]
            if not later:
                continue
            up = tuple(later[0] if j == i else u[j] for j in range(len(u)))
            up = up if up in keep else cover_of(facts, kept, up)
            nxt[a] = {"upper": dict(zip(facts.axes, up, strict=True)),
                      "latency_s": facts.latency_s[up],
                      "padding_s": facts.latency_s[up] - own}
        rows.append({"shape": dict(zip(facts.axes, g, strict=True)),
                     "upper": dict(zip(facts.axes, u, strict=True)),
                     "own_latency_s": own, "served_latency_s": served,
                     "padding_s": served - own, "probability": probs.get(g, 0.0),
                     "next_bucket_up": nxt})
    return rows
