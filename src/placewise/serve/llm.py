"""Serving a decoder LLM request by request with iteration-level (continuous) batching, as
vLLM, Orca and Sarathi-Serve schedule it and Vidur simulates it.

**Requests** (``placewise.serve.llm_requests``, names re-exported here):
``LLMRequest(arrival_s, prompt_tokens, output_tokens)``, from Poisson arrivals with lengths
drawn from ``fixed:N``, ``uniform:A-B`` or ``lognormal:MEAN,SIGMA``
(``poisson_llm_requests``), or replayed from a trace (``load_llm_trace``: CSV such as the
Azure LLM inference trace, or JSON lines).

**An iteration** runs the model once over a batch of sequences; sequence ``i`` brings ``n_i``
new tokens over a cache of ``p_i``: its prompt or a chunk of it (prefill), or the token it
produced last (decode, ``n_i = 1``). Its time is ``step.iteration_s(tokens, ctx_sum,
pair_sum, seqs)`` (``placewise.llm.steps.StepTime``), optionally times a seeded log-normal
factor of mean 1 (``jitter_sigma``). The iteration that completes a prefill produces the
request's first output token; each later decode iteration one more. The last token is never
written to the cache, so a request holds at most ``prompt + output - 1`` tokens of cache.

**The KV cache** holds ``kv_capacity_tokens`` in blocks of ``block_tokens`` (vLLM's paged
attention): a sequence holds ``ceil(cached tokens / block_tokens)`` blocks, allocated when an
iteration writes into a new block and freed when it finishes or is preempted.

**Scheduling** (``LLMPolicy``), first come first served:

- ``chunked_prefill=True`` (Sarathi-Serve, vLLM v1): every iteration carries every running
  decode, then prefill chunks that fill the rest of the ``max_batch_tokens`` budget: first
  the running sequences still in prefill (in admission order), then waiting requests while
  the budget, ``max_seqs`` and free blocks allow (a chunk shrinks to the blocks free).
- ``chunked_prefill=False`` (vLLM v0): an iteration is either prefill-only, which takes
  priority (whole prompts of waiting requests admitted in order while the budget,
  ``max_seqs`` and free blocks allow), or decode-only over every running sequence. A request
  longer than the budget (``prompt + output - 1`` tokens: what it prefills again after a
  preemption just before its last token) is rejected, as vLLM v0 requires
  ``max_num_batched_tokens >= max_model_len``.

**Preemption** (``"recompute"``, vLLM's default): when the running decodes need more new
blocks than are free, the most recently admitted sequence is evicted (its blocks freed, its
progress in prefill lost) and rejoins the front of the waiting queue, to be prefilled again
over its prompt and the tokens it produced so far; no waiting request is admitted in an
iteration that preempted (vLLM v1). When every running sequence is a prefill waiting for
blocks the others hold, the most recent is evicted the same way. A request keeps its first
token time through preemptions. A request whose ``prompt + output - 1`` tokens need more
blocks than the whole cache is rejected at arrival and counted, never looped on.

**Measured** per request: first admission, first token and finish times, preemptions;
TTFT = first token - arrival, TPOT = (finish - first token) / (output - 1) for outputs of more
than one token, e2e = finish - arrival; over the run: their p50/p90/p99 with sample counts,
output tokens and requests per second over the span (first arrival to last finish), goodput
at a TTFT and TPOT objective, iterations, preemptions, rejections, the peak KV cache in use
(``record_iterations``: every iteration's batch as well).

**Padding** (``LLMPolicy(padded=True)``, with ``chunked_prefill=False``): an engine with one
dense cache tensor per batch (onnxruntime, ``placewise.serve.llm_real``) computes more than
the real batch. A prefill of ``n`` prompts of which the longest is ``W`` tokens runs ``n W``
tokens (left padding) over ``n W`` of context and ``n W (W + 1) / 2`` pairs; a decode of
``n`` sequences whose longest past is ``P`` reads ``n (P + 1)`` of context (and as many
pairs). Such iterations cost ``step.iteration_s`` at those figures (``seqs`` unchanged);
admission, the token budget, blocks and preemption still count real tokens.

**Not modelled**: prefix caching, speculative decoding, swapping to host memory, vLLM's
free-block watermark, priorities other than arrival order, tokenisation, detokenisation
and networking; sampling costs what ``seqs`` costs in the step time. A request's output
length is known to the simulator but never used to schedule.

**Time** advances by each iteration's time; when nothing runs or waits it jumps to the next
arrival. Runs of decode-only iterations whose batch cannot change (no finish, no arrival
that could be admitted, no preemption before their end) are advanced together
(``fast_forward``): in a tight loop, or in one call of the step's optional
``iteration_s_many(tokens, ctx_sum, pair_sum, seqs)`` over numpy arrays (which must equal
``iteration_s`` element by element); the result is the same as one iteration at a time, to
the bit, jitter included (iteration ``i`` always draws the ``i``-th factor).

>>> class Linear:
...     def iteration_s(self, tokens, ctx_sum, pair_sum, seqs):
...         return 1e-3 + 1e-5 * tokens
>>> r = simulate_llm([LLMRequest(0.0, 100, 3)], Linear(), LLMPolicy(kv_capacity_tokens=4096))
>>> round(float(r.ttft_s[0]), 6), round(float(r.tpot_s[0]), 6), r.iterations
(0.002, 0.00101, 3)
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from placewise.errors import InputError
from placewise.llm.steps import StepTime
from placewise.serve.llm_records import LLMIterations, LLMPolicy, LLMServeResult
from placewise.serve.llm_requests import (
    LLMRequest,
    draw_lengths,
    load_llm_trace,
    poisson_llm_requests,
)

__all__ = [
    "LLMIterations",
    "LLMPolicy",
    "LLMRequest",
    "LLMServeResult",
    "admit_whole",
    "draw_lengths",
    "load_llm_trace",
    "poisson_llm_requests",
    "rejected_at_arrival",
    "simulate_llm",
]

#: the most decode-only iterations advanced in one vectorised step
MAX_RUN = 4096
#: the fewest advanced by ``iteration_s_many`` (fewer: a loop of scalar calls is cheaper)
MIN_VECTOR = 64
_JITTER_BLOCK = 4096


# --- admission rules (shared with the real server, ``serve.llm_real``) ------------------


def rejected_at_arrival(prompt_tokens: np.ndarray, output_tokens: np.ndarray,
                        policy: LLMPolicy) -> np.ndarray:
    """Which requests ``policy`` rejects when they arrive (module docstring): those whose
    ``prompt + output - 1`` tokens need more blocks than the whole cache holds, and, without
    chunked prefill, those longer than ``max_batch_tokens``.

    >>> pol = LLMPolicy(kv_capacity_tokens=64, max_batch_tokens=32, chunked_prefill=False)
    >>> rejected_at_arrival(np.array([10, 30, 60]), np.array([5, 5, 5]), pol).tolist()
    [False, True, True]
    """
    need = np.asarray(prompt_tokens, dtype=np.int64) + np.asarray(output_tokens) - 1
    rejected = -(-need // policy.block_tokens) > policy.kv_capacity_blocks
    if not policy.chunked_prefill:
        rejected |= need > policy.max_batch_tokens
    return np.asarray(rejected, dtype=bool)


def admit_whole(waiting_tokens: Iterable[int], running: int, free_blocks: int,
                policy: LLMPolicy) -> tuple[int, int]:
    """A prefill-only iteration's admissions without chunked prefill (vLLM v0): how many of
    the waiting requests, taken first come first served, whose whole prompts (``L`` tokens to
    prefill each, in queue order) join the ``running`` sequences while the
    ``max_batch_tokens`` budget, ``max_seqs`` and the ``free_blocks`` allow, and the blocks
    they take (``ceil(L / block_tokens)`` each). Reads ``waiting_tokens`` only as far as the
    first that does not fit.

    >>> pol = LLMPolicy(kv_capacity_tokens=4096, max_batch_tokens=100, block_tokens=16)
    >>> admit_whole([40, 50, 20], running=0, free_blocks=256, policy=pol)
    (2, 7)
    >>> admit_whole([40, 50, 20], running=0, free_blocks=3, policy=pol)
    (1, 3)
    """
    budget, B = policy.max_batch_tokens, policy.block_tokens
    room = policy.max_seqs - running
    k = blocks = 0
    for n in waiting_tokens:
        if k >= room:
            break
        nb = -(-n // B)
        if n > budget or nb > free_blocks - blocks:
            break
        blocks += nb
        budget -= n
        k += 1
    return k, blocks


# --- the simulator ------------------------------------------------------------------------


def simulate_llm(requests: Sequence[LLMRequest], step: StepTime, policy: LLMPolicy, *,
                 seed: int = 0, jitter_sigma: float = 0.0, fast_forward: bool = True,
                 record_iterations: bool = False) -> LLMServeResult:
    """Serve ``requests`` (any order; served by arrival, ties in the order given) on one
    model instance whose iterations cost ``step.iteration_s`` (times a log-normal factor of
    mean 1 and log-space sigma ``jitter_sigma``, drawn from ``seed``) under ``policy``
    (module docstring). ``fast_forward=False`` advances one iteration at a time (the same
    result, slower: a check of the fast path); ``record_iterations`` keeps every iteration
    in the result's ``trace``."""
    if not (isinstance(jitter_sigma, int | float) and math.isfinite(jitter_sigma)
            and jitter_sigma >= 0):
        raise InputError(f"must be a finite number >= 0, got {jitter_sigma!r}",
                         place="jitter_sigma")
    arr, prompt, out = _columns(requests)
    order = np.argsort(arr, kind="stable")
    rejected = rejected_at_arrival(prompt, out, policy)
    sim = _Sim(arr[order].tolist(), prompt[order].tolist(), out[order].tolist(),
               (~rejected[order]).tolist(), step, policy)
    sim.fast = fast_forward
    sim.sigma = float(jitter_sigma)
    sim.rng = np.random.default_rng(seed)
    sim.trace = _Trace() if record_iterations else None
    sim.run()
    return sim.result(order, arr, prompt, out, rejected)


def _columns(requests: Sequence[LLMRequest]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    try:
        arr = np.array([r.arrival_s for r in requests], dtype=float)
        prompt = np.array([r.prompt_tokens for r in requests], dtype=np.int64)
        out = np.array([r.output_tokens for r in requests], dtype=np.int64)
    except (TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise InputError(f"requests must be LLMRequest records of numbers ({exc})",
                         place="requests") from None
    for name, bad in (("arrival_s must be finite", ~np.isfinite(arr)),
                      ("prompt_tokens must be >= 1", prompt < 1),
                      ("output_tokens must be >= 1", out < 1)):
        if bad.any():
            i = int(np.argmax(bad))
            raise InputError(f"{name}, got {requests[i]!r}", place=f"request {i}")
    return arr, prompt, out


class _Trace:
    """Iterations as they happen (``LLMIterations`` columns)."""

    NAMES = ("start_s", "duration_s", "tokens", "prefill_tokens", "seqs", "ctx_sum",
             "pair_sum", "kv_blocks", "emitted")

    def __init__(self) -> None:
        self.cols: list[list[Any]] = [[] for _ in self.NAMES]

    def add(self, *row: Any) -> None:
        for col, v in zip(self.cols, row, strict=True):
            col.append(v)

    def extend(self, *rows: Any) -> None:
        for col, v in zip(self.cols, rows, strict=True):
            col.extend(np.asarray(v).tolist())

    def done(self) -> LLMIterations:
        dtypes = (float, float, np.int64, np.int64, np.int64, np.int64, float, np.int64,
                  np.int64)
        return LLMIterations(*(np.asarray(c, dtype=d)
                               for c, d in zip(self.cols, dtypes, strict=True)))


class _Sim:
    """The event loop over iterations (one object per run; module docstring).

    Requests are indexed in arrival order. A decoding sequence ``r`` caches ``b[r] + D``
    tokens before the ``D``-th decode iteration (``D`` counts iterations that advanced the
    decodes), so the decodes' ``ctx_sum`` is ``sum_b + n_dec * (D + 1)``, one needs a new
    block when ``(b[r] + D) % block_tokens == 0`` (``res`` counts the decodes by
    ``b % block_tokens``) and finishes when ``D`` reaches ``fin[r]``. The longest past among
    the decodes is ``top_b + D`` (``top_b``: the largest ``b``, ``None`` until recomputed
    after the largest left), so a padded decode's ``ctx_sum`` is that of the real decodes
    plus ``n_dec * top_b - sum_b``, constant while the batch is.
    """

    def __init__(self, arrival: list[float], prompt: list[int], output: list[int],
                 admit: list[bool], step: StepTime, policy: LLMPolicy) -> None:
        n = len(arrival)
        self.arrival, self.prompt, self.output = arrival, prompt, output
        self.incoming = [i for i in range(n) if admit[i]]
        self.next_in = 0
        self.step, self.policy = step, policy
        self.many = getattr(step, "iteration_s_many", None)
        self.B = policy.block_tokens
        self.total = self.free = policy.kv_capacity_blocks
        self.now = -math.inf
        self.waiting: deque[int] = deque()
        self.running: dict[int, None] = {}  # admission order
        self.partial: dict[int, None] = {}  # running, still in prefill
        self.L = list(prompt)  # tokens to prefill: prompt + produced so far
        self.d = [0] * n  # prefilled so far (partial)
        self.pre_d = 0  # sum of d over partial
        self.b = [0] * n
        self.fin = [-1] * n
        self.heap: list[tuple[int, int]] = []
        self.res = [0] * self.B
        self.n_dec = self.sum_b = self.D = 0
        self.top_b: int | None = 0
        self.admitted_s = [math.nan] * n
        self.first_s = [math.nan] * n
        self.finish_s = [math.nan] * n
        self.preempted = [0] * n
        self.produced = [0] * n
        self.iterations = 0
        self.busy = 0.0
        self.peak_tokens = self.peak_blocks = 0
        self.fast = True
        self.sigma = 0.0
        self.rng = np.random.default_rng(0)
        self.jf = np.zeros(0)  # jitter factors drawn, in blocks of _JITTER_BLOCK
        self.jl: list[float] = []  # the same as a list
        self.zi = 0  # the next unused
        self.trace: _Trace | None = None

    def run(self) -> None:
        inc, arrival = self.incoming, self.arrival
        while True:
            i = self.next_in
            while i < len(inc) and arrival[inc[i]] <= self.now:
                self.waiting.append(inc[i])
                i += 1
            self.next_in = i
            if not self.running and not self.waiting:
                if i >= len(inc):
                    return
                self.now = arrival[inc[i]]
                continue
            if self.policy.chunked_prefill:
                self._iterate_chunked()
            else:
                self._iterate_whole()

    def _next_arrival(self) -> float:
        i = self.next_in
        return self.arrival[self.incoming[i]] if i < len(self.incoming) else math.inf

    # --- forming an iteration

    def _iterate_chunked(self) -> None:
        need, preempted = self._decode_need()
        chunks = self._chunks(self.policy.max_batch_tokens - self.n_dec, preempted)
        if chunks:
            self._iterate(chunks, need, True)
        elif self.n_dec:
            self._decodes(need, preempted)
        else:  # every running prefill waits for blocks another holds
            self._preempt_tail()

    def _iterate_whole(self) -> None:
        batch = self._prefill_whole() if self.waiting else []
        if batch:
            self._iterate([(r, 0, self.L[r]) for r in batch], 0, False)
            return
        need, preempted = self._decode_need()
        self._decodes(need, preempted)

    def _decode_need(self) -> tuple[int, bool]:
        """New blocks the decodes need now, preempting until they are free; allocates them."""
        need = self.res[-self.D % self.B]
        preempted = False
        while need > self.free:
            self._preempt_tail()
            need = self.res[-self.D % self.B]
            preempted = True
        self.free -= need
        return need, preempted

    def _preempt_tail(self) -> None:
        r, _ = self.running.popitem()
        B = self.B
        if r in self.partial:
            del self.partial[r]
            self.free += -(-self.d[r] // B)
            self.pre_d -= self.d[r]
            self.d[r] = 0
        else:
            b = self.b[r]
            cached = b + self.D
            self.free += -(-cached // B)
            self.n_dec -= 1
            self.sum_b -= b
            self.res[b % B] -= 1
            self.fin[r] = -1
            if b == self.top_b:
                self.top_b = None
            self.L[r] = cached + 1  # the prompt and every token produced
        self.preempted[r] += 1
        self.waiting.appendleft(r)

    def _admit(self, r: int) -> None:
        self.waiting.popleft()
        self.running[r] = None
        self.partial[r] = None
        if self.admitted_s[r] != self.admitted_s[r]:  # NaN: first admission
            self.admitted_s[r] = self.now

    def _prefill_whole(self) -> list[int]:
        L = self.L
        k, blocks = admit_whole((L[r] for r in self.waiting), len(self.running), self.free,
                                self.policy)
        self.free -= blocks
        batch: list[int] = []
        for _ in range(k):
            r = self.waiting[0]
            self._admit(r)
            batch.append(r)
        return batch

    def _chunks(self, budget: int, preempted: bool) -> list[tuple[int, int, int]]:
        """Prefill chunks ``(request, cached, new)`` filling ``budget``; allocates blocks."""
        out: list[tuple[int, int, int]] = []
        B, L, d = self.B, self.L, self.d
        for r in self.partial:
            if budget <= 0:
                return out
            have = -(-d[r] // B)
            c = min(L[r] - d[r], budget, (have + self.free) * B - d[r])
            if c > 0:
                self.free -= -(-(d[r] + c) // B) - have
                budget -= c
                out.append((r, d[r], c))
        max_seqs = self.policy.max_seqs
        while (not preempted and self.waiting and budget > 0
               and len(self.running) < max_seqs):
            r = self.waiting[0]
            c = min(L[r], budget, self.free * B)
            if c <= 0:
                break
            self.free -= -(-c // B)
            budget -= c
            self._admit(r)
            out.append((r, 0, c))
        return out

    # --- running iterations

    def _jitter(self, k: int) -> np.ndarray:
        """The factors of the next ``k`` iterations (not consumed: ``self.zi += m``): the
        same stream however they are taken."""
        while len(self.jf) - self.zi < k:
            z = self.rng.standard_normal(_JITTER_BLOCK)
            sg = self.sigma
            self.jf = np.concatenate((self.jf[self.zi:], np.exp(sg * z - sg * sg / 2)))
            self.jl = self.jf.tolist()
            self.zi = 0
        return self.jf[self.zi:self.zi + k]

    def _time(self, tokens: int, ctx: int, pair: int, seqs: int) -> float:
        t = self.step.iteration_s(tokens, ctx, float(pair), seqs)
        if self.sigma:
            if self.zi >= len(self.jl):
                self._jitter(1)
            t *= self.jl[self.zi]
            self.zi += 1
        if not 0 <= t < math.inf:
            raise InputError(f"the step time is {t!r} s for an iteration of {tokens} tokens "
                             f"over {seqs} sequences (ctx_sum {ctx})", place="step")
        return t

    def _iterate(self, chunks: Sequence[tuple[int, int, int]], need: int, decodes: bool
                 ) -> None:
        """One iteration: the decodes (when ``decodes``) and ``chunks`` of prefill."""
        N = self.n_dec if decodes else 0
        ctx = pair = self.sum_b + N * (self.D + 1) if N else 0
        tokens, cached = N, 0
        for _, d, c in chunks:
            tokens += c
            ctx += d + c
            pair += c * d + c * (c + 1) // 2
            cached += d
        # what the step is asked about: the real batch, or the padded one the engine computes
        tok, ctx_p, pair_p = (self._padded(chunks, N, ctx) if self.policy.padded
                              else (tokens, ctx, pair))
        t = self._time(tok, ctx_p, pair_p, N + len(chunks))
        start, in_use = self.now, self.total - self.free
        self.now += t
        self.busy += t
        self.iterations += 1
        idle = self.pre_d - cached + (0 if decodes else self.sum_b + self.n_dec * self.D)
        self.peak_tokens = max(self.peak_tokens, ctx + idle)
        self.peak_blocks = max(self.peak_blocks, in_use)
        if N:
            self.D += 1
        emitted = N
        for r, d, c in chunks:
            self.d[r] = d + c
            self.pre_d += c
            if d + c == self.L[r]:
                emitted += 1
                self._prefilled(r)
        self._finish_decodes()
        if self.trace is not None:
            self.trace.add(start, t, tok, tok - N, N + len(chunks), ctx_p, float(pair_p),
                           in_use, emitted)

    def _padded(self, chunks: Sequence[tuple[int, int, int]], N: int, ctx: int
                ) -> tuple[int, int, int]:
        """What a padded engine computes for an iteration of real decode context ``ctx``
        (module docstring): ``tokens, ctx_sum, pair_sum``. Padded policies prefill whole, so
        the iteration is prefill-only (``chunks`` of whole prompts) or decode-only."""
        if chunks:
            n, w = len(chunks), max(c for _, _, c in chunks)
            return n * w, n * w, n * w * (w + 1) // 2
        c = ctx + self._pad()
        return N, c, c

    def _pad(self) -> int:
        """The decodes' padded ``ctx_sum`` minus their real one (0 unless ``padded``)."""
        if not (self.policy.padded and self.n_dec):
            return 0
        if self.top_b is None:
            b, fin = self.b, self.fin
            self.top_b = max(b[r] for r in self.running if fin[r] != -1)
        return self.n_dec * self.top_b - self.sum_b

    def _prefilled(self, r: int) -> None:
        """``r`` has completed its prefill and produced a token: decode or finish."""
        del self.partial[r]
        cached = self.L[r]
        self.pre_d -= cached
        self.d[r] = 0
        if self.first_s[r] != self.first_s[r]:
            self.first_s[r] = self.now
        if cached - self.prompt[r] + 1 >= self.output[r]:
            self.free += -(-cached // self.B)
            del self.running[r]
            self.finish_s[r] = self.now
            self.produced[r] = cached - self.prompt[r] + 1
            return
        b = cached - self.D
        self.b[r] = b
        self.n_dec += 1
        self.sum_b += b
        self.res[b % self.B] += 1
        if self.n_dec == 1 or (self.top_b is not None and b > self.top_b):
            self.top_b = b
        self.fin[r] = self.prompt[r] + self.output[r] - 1 - b
        heapq.heappush(self.heap, (self.fin[r], r))

    def _finish_decodes(self) -> None:
        heap, fin, D = self.heap, self.fin, self.D
        while heap and heap[0][0] <= D:
            f, r = heapq.heappop(heap)
            if fin[r] != f:
                continue  # preempted since
            b = self.b[r]
            self.free += -(-(b + D) // self.B)
            self.n_dec -= 1
            self.sum_b -= b
            self.res[b % self.B] -= 1
            fin[r] = -1
            if b == self.top_b:
                self.top_b = None
            del self.running[r]
            self.finish_s[r] = self.now
            self.produced[r] = b + D - self.prompt[r] + 1

    def _horizon(self) -> int:
        """Decode-only iterations before the next finish (at most ``MAX_RUN``)."""
        heap, fin = self.heap, self.fin
        while fin[heap[0][1]] != heap[0][0]:
            heapq.heappop(heap)
        return min(heap[0][0] - self.D, MAX_RUN)

    def _decodes(self, need: int, preempted: bool) -> None:
        """Decode-only iterations: one, or a run whose batch cannot change: up to the next
        finish, while the blocks last, and, with nobody waiting, until the next arrival (a
        waiting request that cannot be admitted now cannot be later in the run: the
        sequences are the same and the free blocks fewer)."""
        k = self._horizon() if self.fast and not preempted else 1
        if k < 2:
            self._iterate((), need, True)
        elif self.many is not None and k >= MIN_VECTOR and (
                kv := self._until_arrival(k)) >= MIN_VECTOR:
            self._decode_vector(need, kv)
        else:
            self._decode_loop(k)

    def _until_arrival(self, k: int) -> int:
        """``k``, or fewer where the next arrival matters: as many iterations as the first
        one's time allows before it, and 2 more (enough when iterations grow longer)."""
        if self.waiting or self.next_in >= len(self.incoming):
            return k
        N = self.n_dec
        c0 = self.sum_b + N * (self.D + 1) + self._pad()
        t0 = self.step.iteration_s(N, c0, float(c0), N)
        if not 0 < t0 < math.inf:
            return k
        return max(2, min(k, int(min((self._next_arrival() - self.now) / t0, MAX_RUN)) + 2))

    def _decode_loop(self, k: int) -> None:
        """Up to ``k`` decode-only iterations, the first one's blocks allocated."""
        N, B, res, total = self.n_dec, self.B, self.res, self.total
        t_next = math.inf if self.waiting else self._next_arrival()
        c = self.sum_b + N * (self.D + 1)
        pad = self._pad()
        trace = self.trace
        for j in range(k):
            t = self._time(N, c + pad, c + pad, N)
            start = self.now
            self.now = start + t
            self.busy += t
            self.iterations += 1
            self.D += 1
            if trace is not None:
                trace.add(start, t, N, 0, N, c + pad, float(c + pad), total - self.free, N)
            if j + 1 == k or t_next <= self.now:
                break
            nd = res[-self.D % B]
            if nd > self.free:
                break
            self.free -= nd
            c += N
        self.peak_tokens = max(self.peak_tokens, c + self.pre_d)
        self.peak_blocks = max(self.peak_blocks, total - self.free)
        self._finish_decodes()

    def _decode_vector(self, need: int, k: int) -> None:
        """As ``_decode_loop``, the times from one call of ``iteration_s_many``."""
        N, D = self.n_dec, self.D
        t_next = math.inf if self.waiting else self._next_arrival()
        c0 = self.sum_b + N * (D + 1)
        needs = np.asarray(self.res)[-(D + np.arange(k)) % self.B]
        needs[0] = need
        used = self.total - self.free - need + np.cumsum(needs)
        k = int(np.searchsorted(used, self.total, side="right"))  # >= 1: needs[0] is free
        ctx = c0 + N * np.arange(k, dtype=np.int64)
        priced = ctx + self._pad()
        times = self._times(N, priced)
        ends = np.cumsum(np.concatenate(([self.now], times)))
        m = min(k, int(np.searchsorted(ends[:k], t_next, side="left")))
        if self.sigma:
            self.zi += m
        self.free = self.total - int(used[m - 1])
        self.now = float(ends[m])
        self.busy = float(np.cumsum(np.concatenate(([self.busy], times[:m])))[-1])
        self.iterations += m
        self.D += m
        self.peak_tokens = max(self.peak_tokens, int(ctx[m - 1]) + self.pre_d)
        self.peak_blocks = max(self.peak_blocks, int(used[m - 1]))
        if self.trace is not None:
            full = np.full(m, N)
            self.trace.extend(ends[:m], times[:m], full, np.zeros(m), full, priced[:m],
                              priced[:m].astype(float), used[:m], full)
        self._finish_decodes()

    def _times(self, N: int, ctx: np.ndarray) -> np.ndarray:
        k = len(ctx)
        if self.many is not None:
            full = np.full(k, N, dtype=np.int64)
            times = np.asarray(self.many(full, ctx, ctx.astype(float), full), dtype=float)
        else:
            it = self.step.iteration_s
            times = np.array([it(N, c, float(c), N) for c in ctx.tolist()], dtype=float)
        if self.sigma:
            times = times * self._jitter(k)
        if not (np.all(times >= 0) and np.all(np.isfinite(times))):
            raise InputError(f"the step time is negative or not finite for a decode of {N} "
                             f"sequences", place="step")
        return times

    def result(self, order: np.ndarray, arr: np.ndarray, prompt: np.ndarray,
               out: np.ndarray, rejected: np.ndarray) -> LLMServeResult:
        def back(x: list[Any], dtype: Any) -> np.ndarray:
            y = np.empty(len(order), dtype=dtype)
            y[order] = np.asarray(x, dtype=dtype)
            return y

        finish = back(self.finish_s, float)
        return LLMServeResult(
            arrival_s=arr, prompt_tokens=prompt, output_tokens=out,
            admitted_s=back(self.admitted_s, float), first_token_s=back(self.first_s, float),
            finish_s=finish, preempted=back(self.preempted, np.int64),
            tokens_out=back(self.produced, np.int64), rejected_mask=rejected,
            iterations=self.iterations, busy_s=self.busy, peak_kv_tokens=self.peak_tokens,
            peak_kv_blocks=self.peak_blocks, kv_capacity_blocks=self.total,
            trace=self.trace.done() if self.trace is not None else None)
