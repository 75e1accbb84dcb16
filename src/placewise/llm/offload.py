"""Which layers' weights and KV cache live in which memory, and where each layer computes:
the offloading policy of a decoder on one machine, priced and searched.

**Memories.** The accelerator ``A`` (default: the device with the highest peak in the
model's dtype) computes from its main tier (*fast*: HBM). Its *slow* home is the largest
other memory it can read: a second tier of its own (a GH200 GPU reading Grace's LPDDR5X
over NVLink-C2C) or the host CPU's main tier through the route between them (PCIe on a
discrete GPU). Tiers that name the same ``shared_with`` resource are one memory, counted
once: on a unified-memory SoC (Jetson, a laptop) the host's memory *is* the accelerator's,
so nothing is offloaded, only moved to another compute device. The host ``H`` is the CPU.

**Layer classes.** Decoder layers are alike, so a policy is a count per class:

| class | computes on | weights in | cache in |
|---|---|---|---|
| ``resident`` | A | fast | fast |
| ``weights_slow`` | A | slow (streamed each step) | fast |
| ``cache_slow`` | A | fast | slow (read each step) |
| ``both_slow`` | A | slow | slow |
| ``host`` | H | H's memory | H's memory |
| ``host_attention`` | A, its attention on H | fast | H's memory |

``host_attention`` is FlexGen's answer to a cache too large for the accelerator: the cache
stays in host memory and the host computes the layer's attention next to it, so only the
step's queries, new keys and values and the attention output cross the link (a few KB
per token) instead of the cache.

``host`` layers run first and the accelerator's after (llama.cpp's ``--n-gpu-layers`` keeps
the *last* layers on the GPU). The embedding, final norm and LM head stay on the device that
runs the last layer.

**Time of one iteration** (``OffloadStep.terms``): per layer on ``A`` its compute ``c_A``
(``llm.cost.LayerCost``); a streamed layer's bytes cross the slow path during the previous
layer's compute (one-layer lookahead, two buffers, as FlexGen overlaps), so only
``max(0, io - c_A)`` shows; host layers cost ``c_H``; the activations cross between them
twice; a ``host_attention`` layer costs the accelerator's part without attention, the
host's attention over the cache, and its tensors' two crossings (link bandwidth and
latency), in sequence; each device that runs layers pays one engine launch. It is an
actual schedule of the layers on the accelerator, the host and the slow path, with the
overlap exact for layers that are alike; not modelled: a prefetch deeper than one layer,
host attention overlapped with the accelerator's other layers (FlexGen pipelines it), and
contention of the slow path with other traffic.

**Memory.** ``usable_fraction`` (0.9, as vLLM's ``gpu_memory_utilization``) of each memory;
on ``A`` also two layer buffers when anything streams and the step's activations
(``workspace_bytes``).

**Search.** ``search_policy`` enumerates every composition of the layers into the six
classes (C(L+5, 5): 1,221,759 for 40 layers), vectorised, drops those that do not fit (the
reason kept in the count), and returns the fastest: exact over this space. Past
``MAX_COMPOSITIONS`` (more than 47 layers) ``host_attention`` is left out of the search,
and the result says so.
``llamacpp_policy`` is "as many layers as fit" on ``A`` with their cache, the rest on ``H``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from placewise.cost.model import CostModel
from placewise.hardware.spec import Device, Machine, MemoryTier
from placewise.llm.cost import DeviceStep, Ops, pairs
from placewise.llm.spec import DecoderSpec

__all__ = [
    "CLASSES",
    "Fitted",
    "Memories",
    "OffloadStep",
    "Policy",
    "Shape",
    "class_terms",
    "fit_steps",
    "llamacpp_policy",
    "memories",
    "search_policy",
]

CLASSES = ("resident", "weights_slow", "cache_slow", "both_slow", "host", "host_attention")
#: the most compositions a search enumerates at once (C(L+5, 5) rows of six counts)
MAX_COMPOSITIONS = 2_000_000
Counts = tuple[int, ...]  # layers per class, ``CLASSES`` order
USABLE_FRACTION = 0.9


@dataclass(frozen=True, slots=True)
class Shape:
    """What the policy is sized and timed for: ``batch`` sequences decoding at ``context``
    tokens each (the cache holds ``batch x context`` tokens per layer)."""

    batch: int
    context: int

    def decode(self) -> tuple[int, int, float, int]:
        """(tokens, ctx_sum, pair_sum, seqs) of one decode iteration at this shape."""
        return self.batch, self.batch * self.context, self.batch * pairs(1, self.context - 1), \
            self.batch


@dataclass(frozen=True, slots=True)
class Pool:
    name: str  # the memory (a tier, or the shared resource several tiers are)
    capacity_bytes: int
    bandwidth_bytes_per_s: float  # as the accelerator reads it


@dataclass(frozen=True, slots=True)
class Memories:
    """The accelerator, the host and the pools their data can live in."""

    accel: str
    host: str | None
    fast: Pool
    slow: Pool | None  # None: nothing slower to offload to (unified memory, or no host)
    host_pool: Pool | None  # where host layers keep their data
    link_bytes_per_s: float  # activations between host and accelerator
    link_latency_s: float = 0.0


def _pool_id(t: MemoryTier, dev: Device) -> str:
    return t.shared_with or f"{dev.name}:{t.name}"


def memories(machine: Machine, accel: str | None = None, host: str | None = None) -> Memories:
    """The memories of ``machine`` as the offloading model sees them (module docstring)."""
    if accel is None:
        gpus = [d for d in machine.devices if d.kind.value != "cpu"] or list(machine.devices)
        accel = max(gpus, key=lambda d: max(d.peak_flops_per_s.values())).name
    a = machine.device(accel)
    if host is None:
        cpus = [d.name for d in machine.devices if d.kind.value == "cpu" and d.name != accel]
        host = cpus[0] if cpus else None
    main = a.main_memory
    fast = Pool(_pool_id(main, a), main.capacity_bytes, main.bandwidth_bytes_per_s)
    cands: list[Pool] = [Pool(_pool_id(t, a), t.capacity_bytes, t.bandwidth_bytes_per_s)
                         for t in a.memory[1:]]
    host_pool, link_bw, link_lat = None, float("inf"), 0.0
    if host is not None:
        h = machine.device(host)
        route = machine.route(host, accel)
        link_bw = min((lk.bandwidth_bytes_per_s for lk in route), default=float("inf"))
        link_lat = sum(lk.latency_s for lk in route)
        hm = h.main_memory
        host_pool = Pool(_pool_id(hm, h), hm.capacity_bytes, hm.bandwidth_bytes_per_s)
        cands.append(Pool(host_pool.name, hm.capacity_bytes,
                          min(link_bw, hm.bandwidth_bytes_per_s)))
    cands = [p for p in cands if p.name != fast.name]
    slow = max(cands, key=lambda p: (p.bandwidth_bytes_per_s, p.capacity_bytes), default=None)
    return Memories(accel, host, fast, slow, host_pool, link_bw, link_lat)


@dataclass(frozen=True, slots=True)
class Policy:
    """Layers per class (``CLASSES`` order) for ``shape``, with the bytes each pool holds."""

    counts: Counts
    shape: Shape
    bytes_by_pool: tuple[tuple[str, int], ...] = ()
    name: str = ""

    def count(self, cls: str) -> int:
        return self.counts[CLASSES.index(cls)]


def workspace_bytes(spec: DecoderSpec, tokens: int, seqs: int) -> int:
    """Activations of one step on the device that computes it: a layer's widest live set
    (residual, normed input, Q/K/V, two MLP halves) for ``tokens`` rows, plus fp32 logits of
    ``seqs`` rows."""
    width = 2 * spec.hidden + (spec.heads + 2 * spec.kv_heads) * spec.head_dim + 2 * spec.ffn
    return spec.dtype.nbytes(tokens * width) + 4 * seqs * spec.vocab


@dataclass(frozen=True, slots=True)
class OffloadStep:
    """A decoder under a policy on a machine: a ``StepTime`` with its terms."""

    spec: DecoderSpec
    mem: Memories
    accel: DeviceStep
    host: DeviceStep | None
    counts: Counts

    def terms(self, tokens: int, ctx_sum: int, pair_sum: float, seqs: int) -> dict[str, float]:
        """Seconds of one iteration, by term: ``compute`` (accelerator), ``host_compute``,
        ``stream`` (slow-path bytes not hidden under compute), ``handoff`` (activations
        between host and accelerator), ``head``, ``launch``."""
        return {k: float(v) for k, v in class_terms(
            self.spec, self.mem, self.accel, self.host, self.counts,
            (tokens, ctx_sum, pair_sum, seqs)).items()}

    def iteration_s(self, tokens: int, ctx_sum: int, pair_sum: float, seqs: int) -> float:
        return sum(self.terms(tokens, ctx_sum, pair_sum, seqs).values())

    def iteration_s_many(self, tokens: np.ndarray, ctx_sum: np.ndarray, pair_sum: np.ndarray,
                         seqs: np.ndarray) -> np.ndarray:
        """``iteration_s`` of many iterations at once (the serving simulator's fast path)."""
        args = (np.asarray(tokens), np.asarray(ctx_sum), np.asarray(pair_sum), np.asarray(seqs))
        terms = class_terms(self.spec, self.mem, self.accel, self.host, self.counts, args)
        return np.asarray(sum(np.broadcast_to(v, args[0].shape) for v in terms.values()),
                          dtype=float)


# ---- memory and search ----------------------------------------------------------------------

def _pool_bytes(spec: DecoderSpec, mem: Memories, shape: Shape, n: np.ndarray
                ) -> dict[str, np.ndarray]:
    """Bytes each pool holds for every row of counts ``n`` ([k, 6], ``CLASSES`` order)."""
    wl = spec.layer_weight_bytes()
    kvl = spec.kv_bytes_per_token_layer() * shape.batch * shape.context
    outer, work = spec.outer_weight_bytes(), workspace_bytes(spec, shape.batch, shape.batch)
    res, w, kv, both, host, ha = (n[:, i].astype(np.int64) for i in range(6))
    on_a = (res + w + kv + both + ha) > 0
    fast = ((res + kv + ha) * wl + (res + w) * kvl + on_a * (outer + work)
            + ((w + both) > 0) * 2 * wl + ((kv + both) > 0) * 2 * kvl)
    out: dict[str, np.ndarray] = {mem.fast.name: fast}
    if mem.slow is not None:
        slow = (w + both) * wl + (kv + both) * kvl
        out[mem.slow.name] = out.get(mem.slow.name, 0) + slow
    if mem.host_pool is not None:
        h = host * (wl + kvl) + ha * kvl + (~on_a) * outer + ((host + ha) > 0) * work
        out[mem.host_pool.name] = out.get(mem.host_pool.name, 0) + h
    return out


def _capacities(mem: Memories) -> dict[str, int]:
    pools = [p for p in (mem.fast, mem.slow, mem.host_pool) if p is not None]
    return {p.name: int(p.capacity_bytes * USABLE_FRACTION) for p in pools}


def _compositions(layers: int, classes: int = len(CLASSES)) -> np.ndarray:
    """Every way to split ``layers`` into ``classes`` classes ([k, classes]); the classes
    left out (past the first ``classes``) get zero columns."""
    bars = np.asarray(list(itertools.combinations(range(layers + classes - 1), classes - 1)),
                      dtype=np.int64).reshape(-1, classes - 1)
    edges = np.concatenate([np.full((len(bars), 1), -1), bars,
                            np.full((len(bars), 1), layers + classes - 1)], axis=1)
    rows = np.diff(edges, axis=1) - 1
    return np.concatenate([rows, np.zeros((len(rows), len(CLASSES) - classes), np.int64)],
                          axis=1)


@dataclass(frozen=True, slots=True)
class Search:
    """The outcome of ``search_policy``: the best policy (None: nothing fits), how many
    compositions were tried, and how many each pool ruled out."""

    best: Policy | None
    tried: int
    infeasible_by_pool: tuple[tuple[str, int], ...]
    note: str = ""


Fitted = tuple[DeviceStep, DeviceStep | None]  # the accelerator's and the host's steps


def fit_steps(spec: DecoderSpec, model: CostModel, mem: Memories) -> Fitted:
    """``spec``'s layer costs on the accelerator and on the host (``DeviceStep.fit``): what
    every policy of ``mem`` is priced from."""
    accel = DeviceStep.fit(spec, model, mem.accel)
    host = DeviceStep.fit(spec, model, mem.host) if mem.host else None
    return accel, host


def _policy(spec: DecoderSpec, mem: Memories, shape: Shape, row: np.ndarray, name: str
            ) -> Policy:
    pools = _pool_bytes(spec, mem, shape, row[None, :])
    return Policy(tuple(int(x) for x in row), shape,
                  tuple((k, int(v[0])) for k, v in pools.items()), name)


def search_policy(spec: DecoderSpec, model: CostModel, mem: Memories, shape: Shape, *,
                  fitted: Fitted | None = None) -> Search:
    """The fastest policy for decode at ``shape`` among every composition that fits."""
    accel, host = fitted or fit_steps(spec, model, mem)
    full = math.comb(spec.layers + len(CLASSES) - 1, len(CLASSES) - 1) <= MAX_COMPOSITIONS
    n = _compositions(spec.layers, len(CLASSES) if full else len(CLASSES) - 1)
    note = "" if full else (f"{spec.layers} layers: host_attention left out of the search "
                            f"(more than {MAX_COMPOSITIONS:,} compositions)")
    if mem.slow is None:
        n = n[(n[:, 1] + n[:, 2] + n[:, 3]) == 0]
    if host is None:
        n = n[(n[:, 4] + n[:, 5]) == 0]
    ok = np.ones(len(n), dtype=bool)
    ruled: list[tuple[str, int]] = []
    caps = _capacities(mem)
    for pool, used in _pool_bytes(spec, mem, shape, n).items():
        fits = used <= caps[pool]
        ruled.append((pool, int((ok & ~fits).sum())))
        ok &= fits
    cand = n[ok]
    if not len(cand):
        return Search(None, len(n), tuple(ruled), note)
    terms = class_terms(spec, mem, accel, host, cand, shape.decode())
    t = np.asarray(sum(terms.values()), dtype=float)
    off = cand[:, 1:].sum(axis=1)
    best = cand[np.lexsort((off, np.round(t, 12)))[0]]
    return Search(_policy(spec, mem, shape, best, "searched"), len(n), tuple(ruled), note)


def class_terms(spec: DecoderSpec, mem: Memories, accel: DeviceStep, host: DeviceStep | None,
                n: Any, args: tuple[Any, Any, Any, Any]) -> dict[str, Any]:
    """The terms of one iteration (``OffloadStep.terms``) for counts ``n``: a tuple of six
    numbers (``CLASSES`` order) with ``args`` numbers or arrays of iterations, or an array
    [k, 6] of compositions at once (``llm.cost.Ops``: one formula for both)."""
    tokens, ctx_sum, pair_sum, seqs = args
    op = Ops.of(*args, *(n if isinstance(n, tuple) else (n,)))
    res, w, kv, both, nh, ha = n if isinstance(n, tuple) else (n[:, i] for i in range(6))
    n_a = res + w + kv + both
    c_a = accel.layer.time_s(*args)
    bw = mem.slow.bandwidth_bytes_per_s if mem.slow else float("inf")
    io_w = spec.layer_weight_bytes() / bw
    io_kv = spec.kv_bytes_per_token_layer() * ctx_sum / bw
    zero = 0.0 * n_a
    out = {"compute": n_a * c_a + ha * accel.layer.linear_time_s(tokens),
           "stream": (w * op.maximum(0.0, io_w - c_a) + kv * op.maximum(0.0, io_kv - c_a)
                      + both * op.maximum(0.0, io_w + io_kv - c_a)),
           "host_compute": zero, "handoff": zero,
           "launch": ((n_a + ha) > 0) * accel.overhead_s,
           "head": op.where((n_a + ha) > 0, accel.head_time_s(seqs), 0.0)}
    if host is not None:
        # queries out and attention back: heads x head_dim each; new keys and values out
        qkvo = spec.dtype.nbytes(tokens * (2 * spec.heads + 2 * spec.kv_heads) * spec.head_dim)
        out["host_compute"] = (nh * host.layer.time_s(*args)
                               + ha * host.layer.attention_time_s(ctx_sum, pair_sum, seqs))
        out["launch"] = out["launch"] + ((nh + ha) > 0) * host.overhead_s
        out["handoff"] = (((n_a + ha) > 0) & (nh > 0)) * (
            2 * spec.dtype.nbytes(tokens * spec.hidden) / mem.link_bytes_per_s) + ha * (
            qkvo / mem.link_bytes_per_s + 2 * mem.link_latency_s)
        out["head"] = op.where((n_a + ha) > 0, out["head"], host.head_time_s(seqs))
    return out


def llamacpp_policy(spec: DecoderSpec, mem: Memories, shape: Shape) -> Policy | None:
    """llama.cpp's ``--n-gpu-layers`` as its automatic fitting sets it: as many layers as
    fit on the accelerator with their cache (and the output layer), the rest computed on the
    host; None when even that does not fit."""
    caps = _capacities(mem)
    rows = np.asarray([[k, 0, 0, 0, spec.layers - k, 0] for k in range(spec.layers + 1)])
    if mem.host is None:
        rows = rows[-1:]
    ok = np.ones(len(rows), dtype=bool)
    for pool, used in _pool_bytes(spec, mem, shape, rows).items():
        ok &= used <= caps[pool]
    if not ok.any():
        return None
    return _policy(spec, mem, shape, rows[np.flatnonzero(ok)[-1]], "llama.cpp (layers that fit)")
