"""The LLM service of ``placewise.serve.llm`` run for real: one onnxruntime session of a
decoder file (``placewise.llm.real``: optimum's names, past and present as inputs and
outputs) serving requests open loop with iteration-level batching, making the scheduling
decisions the simulator makes for ``LLMPolicy(chunked_prefill=False)`` (vLLM v0).

**Decisions.** An iteration is prefill-only, which takes priority: waiting requests are
admitted first come first served by ``admit_whole`` (the simulator's own rule: the
``max_batch_tokens`` budget, ``max_seqs`` and free KV blocks); otherwise it is decode-only
over every running sequence. Requests are rejected at arrival by ``rejected_at_arrival``, as
the simulator rejects them. KV blocks are counted as the simulator counts them (a sequence
holds ``ceil(cached / block_tokens)`` blocks), so that admissions wait for the same blocks.

**No preemption.** The real server never evicts a sequence: ``serve_llm_real`` refuses
(``InputError``) a policy under which running sequences could run out of blocks, i.e. whose
``kv_capacity_blocks`` is less than the sum of the ``min(max_seqs, requests)`` largest
per-request needs ``ceil((prompt + output - 1) / block_tokens)`` (at most ``max_seqs`` times
the largest need; requests rejected at arrival never run and do not count). Under any other
policy the simulator would never preempt either, and free blocks never hold an admission back
(the running sequences and those admitted hold at most their needs, at most ``max_seqs`` of
them): only the token budget and ``max_seqs`` do. Chunked prefill is refused as well.
``policy.padded`` is ignored: this engine always pads (below), whatever the policy says, and
its records carry both the real and the padded figures, so one policy may serve here and in
``simulate_llm`` alike; ``LLMPolicy(padded=True)`` makes the simulator price what this engine
computes.

**Execution.** Time is the ``clock``'s, from the run's start (after ``warmup`` untimed
prefill-and-decode rounds); when nothing runs or waits, the server sleeps until about 0.2 ms
before the next arrival and spins the rest. A prefill iteration runs the admitted prompts as
one call, left-padded to the longest (pad id 0, ``attention_mask`` 0 on pads,
``position_ids`` counting real tokens from 0) over an empty cache; each request's first
token is the argmax of the logits at its last position (greedy). The running sequences
decode together over one batched cache: the ``present.*`` ``OrtValue`` objects of a call are
bound as the next call's ``past_key_values.*`` (IO binding; nothing copied to numpy) while
the batch's membership stays the same. When it changes (sequences joined after a prefill,
or finished), the next decode rebuilds the batched cache once, through numpy: every
member's real cache, right-aligned (its pads on the left, masked), in a cache as long as the
longest member's, so no column is padding for every member.

**Records** (``RealIterations``): per iteration its start and duration, whether it was a
prefill, sequences, new tokens, the real ``ctx_sum`` and ``pair_sum`` (as the simulator
defines them) and the padded ones (what the model computed: a prefill of ``n`` prompts
padded to ``L`` computes ``n * L`` tokens; a decode over a cache padded to ``P`` reads
``n * (P + 1)`` of context), KV blocks in use, output tokens, the seconds of the run call
(``run_s``) and of the cache rebuild (``rebuild_s``). ``fit_from_real`` fits the simulator's
step model (``placewise.llm.steps.fit_step``) to them, so the simulator can run on the step
time measured from this very engine; under ``LLMPolicy(padded=True)`` the simulator asks it
about the padded figures these records show (the same, iteration by iteration, when the
decisions are the same).

The ``LLMServeResult`` is filled as the simulator fills it (admission, first token and
finish relative to the run's start; ``preempted`` all zero; the iterations as its
``trace``), so its ``summary``, ``goodput``, ``ttft_s`` and ``tpot_s`` read the same.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from placewise.errors import InputError
from placewise.llm.real import DecodeSession
from placewise.llm.steps import MeasuredStep, StepSample, StepTime, fit_step
from placewise.serve.llm import (
    LLMIterations,
    LLMPolicy,
    LLMRequest,
    LLMServeResult,
    _columns,
    admit_whole,
    rejected_at_arrival,
)

__all__ = ["SPIN_S", "RealIterations", "check_no_preemption", "fit_from_real",
           "iteration_terms", "serve_llm_real"]

#: the last seconds before an arrival that the server spins instead of sleeping
SPIN_S = 2e-4


# --- records --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RealIterations:
    """Every iteration of a real run, in order (module docstring): ``start_s`` (from the
    run's start) and ``duration_s`` (rebuild, run call and bookkeeping), ``prefill`` (bool),
    ``seqs``, ``tokens`` (new, real), ``ctx_sum`` and ``pair_sum`` (real), ``padded_tokens``,
    ``padded_ctx`` and ``padded_pair`` (what the model computed), ``kv_blocks`` in use,
    ``emitted`` output tokens, ``run_s`` (the run call) and ``rebuild_s`` (rebuilding the
    batched cache). ``output_ids``: each request's generated ids (order given; empty when
    rejected) when the run kept them."""

    start_s: np.ndarray
    duration_s: np.ndarray
    prefill: np.ndarray
    seqs: np.ndarray
    tokens: np.ndarray
    ctx_sum: np.ndarray
    pair_sum: np.ndarray
    padded_tokens: np.ndarray
    padded_ctx: np.ndarray
    padded_pair: np.ndarray
    kv_blocks: np.ndarray
    emitted: np.ndarray
    run_s: np.ndarray
    rebuild_s: np.ndarray
    output_ids: tuple[np.ndarray, ...] | None = None

    def __len__(self) -> int:
        return len(self.start_s)

    def as_llm_iterations(self) -> LLMIterations:
        """The simulator's record of the same iterations (real figures)."""
        prefill_tokens = np.where(self.prefill, self.tokens, 0)
        return LLMIterations(self.start_s, self.duration_s, self.tokens, prefill_tokens,
                             self.seqs, self.ctx_sum, self.pair_sum, self.kv_blocks,
                             self.emitted)

    def samples(self, *, padded: bool = True) -> list[StepSample]:
        """One ``StepSample`` per iteration, timed by its run call (``run_s``): the padded
        batch the model computed (``padded=True``) or the real one the simulator sees."""
        cols = ((self.padded_tokens, self.padded_ctx, self.padded_pair) if padded
                else (self.tokens, self.ctx_sum, self.pair_sum))
        tokens, ctx, pair = (c.tolist() for c in cols)
        return [StepSample(int(t), int(c), float(p), int(s), float(r))
                for t, c, p, s, r in zip(tokens, ctx, pair, self.seqs.tolist(),
                                         self.run_s.tolist(), strict=True)]


def fit_from_real(records: RealIterations, *, padded: bool = True) -> MeasuredStep:
    """The step model (``fit_step``) fitted to a real run's iterations, each timed by its
    run call (``run_s``: the cache rebuilds, which the simulator does not model, are left
    out). ``padded=True`` (the default) fits on what the model computed: a prefill's
    ``tokens = seqs * longest prompt``, ``ctx_sum`` likewise and ``pair_sum = seqs * L (L +
    1) / 2``; a decode's ``ctx_sum = pair_sum = seqs * (padded past + 1)``. ``padded=False``
    fits on the real batch (what ``simulate_llm`` asks about unless its policy is
    ``padded``), so that padding's cost is averaged into the coefficients instead: simulate
    a ``padded=True`` fit with ``LLMPolicy(padded=True)``."""
    return fit_step(records.samples(padded=padded))


class _Record:
    """Iterations as they happen (``RealIterations`` columns)."""

    NAMES = ("start_s", "duration_s", "prefill", "seqs", "tokens", "ctx_sum", "pair_sum",
             "padded_tokens", "padded_ctx", "padded_pair", "kv_blocks", "emitted", "run_s",
             "rebuild_s")
    TYPES = (float, float, bool, np.int64, np.int64, np.int64, float, np.int64, np.int64,
             float, np.int64, np.int64, float, float)

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []

    def add(self, *row: Any) -> None:
        self.rows.append(row)

    def done(self, output_ids: tuple[np.ndarray, ...] | None) -> RealIterations:
        cols = list(zip(*self.rows, strict=True)) if self.rows else [()] * len(self.NAMES)
        arrays = {name: np.asarray(c, dtype=t)
                  for name, c, t in zip(self.NAMES, cols, self.TYPES, strict=True)}
        return RealIterations(**arrays, output_ids=output_ids)


# --- checks -----------------------------------------------------------------------------------


def check_no_preemption(prompt_tokens: np.ndarray, output_tokens: np.ndarray,
                        policy: LLMPolicy) -> None:
    """Raise ``InputError`` when ``policy`` could have to preempt one of these requests (the
    module docstring's rule) or prefills in chunks: the real server does neither.

    >>> p, o = np.array([40, 40, 40]), np.array([9, 9, 9])
    >>> check_no_preemption(p, o, LLMPolicy(kv_capacity_tokens=144, chunked_prefill=False))
    >>> check_no_preemption(p, o, LLMPolicy(kv_capacity_tokens=128, chunked_prefill=False))
    Traceback (most recent call last):
    placewise.errors.InputError: policy.kv_capacity_tokens: 3 sequences could hold up to 9 \
blocks of 16 tokens together, the cache holds 8: the real server does not preempt (give at \
least 144 tokens or fewer max_seqs)
    """
    if policy.chunked_prefill:
        raise InputError("the real server runs whole prefills (vLLM v0); chunked prefill is "
                         "simulated only", place="policy.chunked_prefill")
    rejected = rejected_at_arrival(prompt_tokens, output_tokens, policy)
    need = np.asarray(prompt_tokens, dtype=np.int64) + np.asarray(output_tokens) - 1
    blocks = np.sort(-(-need[~rejected] // policy.block_tokens))[::-1]
    k = min(policy.max_seqs, len(blocks))
    worst = int(blocks[:k].sum())
    if worst > policy.kv_capacity_blocks:
        raise InputError(f"{k} sequences could hold up to {worst} blocks of "
                         f"{policy.block_tokens} tokens together, the cache holds "
                         f"{policy.kv_capacity_blocks}: the real server does not preempt "
                         f"(give at least {worst * policy.block_tokens} tokens or fewer "
                         f"max_seqs)", place="policy.kv_capacity_tokens")


def _prompts(prompts: Sequence[Any] | None, lengths: np.ndarray, vocab: int,
             seed: int) -> list[np.ndarray]:
    """Each request's prompt ids: given (checked against its length and the vocabulary) or
    drawn uniformly from ``seed``."""
    if prompts is None:
        rng = np.random.default_rng(seed)
        return [rng.integers(0, vocab, int(n), dtype=np.int64) for n in lengths.tolist()]
    if len(prompts) != len(lengths):
        raise InputError(f"{len(prompts)} prompts for {len(lengths)} requests",
                         place="prompts")
    out = []
    for i, (p, n) in enumerate(zip(prompts, lengths.tolist(), strict=True)):
        a = np.asarray(p)
        if a.shape != (n,) or a.dtype.kind not in "iu" or (n and (a.min() < 0
                                                                or a.max() >= vocab)):
            raise InputError(f"must be {n} token ids in [0, {vocab}) (its prompt_tokens), "
                             f"not {a.dtype} {list(a.shape)}", place=f"prompts[{i}]")
        out.append(a.astype(np.int64))
    return out


# --- the engine -------------------------------------------------------------------------------


class _Engine:
    """The decoder session: runs ids, mask and positions over a past of ``OrtValue``s with
    IO binding; the presents stay ``OrtValue``s, only the last position's logits come to
    numpy."""

    def __init__(self, path: str | os.PathLike[str], threads: int | None,
                 clock: Callable[[], float]) -> None:
        import onnxruntime as ort

        self.ort = ort
        self.dec = DecodeSession(path, threads=threads)
        self.lay = self.dec.layout
        self.clock = clock

    def run(self, ids: np.ndarray, mask: np.ndarray, pos: np.ndarray, past: Sequence[Any]
            ) -> tuple[np.ndarray, tuple[Any, ...], float]:
        """Greedy next ids [batch], the presents, the run call's seconds."""
        values, run_s = self.dec.run_bound(ids, mask, pos, past, self.clock)
        logits = values[0].numpy()
        return logits[:, -1].argmax(-1).astype(np.int64), tuple(values[1:]), run_s

    def prefill(self, prompts: Sequence[np.ndarray]) -> tuple[np.ndarray, tuple[Any, ...],
                                                              float, int]:
        """Left-padded batched prefill: first ids, presents, seconds, padded length."""
        n, width = len(prompts), max(len(p) for p in prompts)
        ids = np.zeros((n, width), dtype=np.int64)
        mask = np.zeros((n, width), dtype=np.int64)
        pos = np.zeros((n, width), dtype=np.int64)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = p
            mask[i, width - len(p):] = 1
            pos[i, width - len(p):] = np.arange(len(p))
        first, presents, run_s = self.run(ids, mask, pos, self.dec.empty_cache(n))
        return first, presents, run_s, width

    def warm(self, prompt: np.ndarray) -> None:
        first, presents, _, width = self.prefill([prompt])
        mask = np.ones((1, width + 1), dtype=np.int64)
        self.run(first.reshape(1, 1), mask, np.full((1, 1), width, dtype=np.int64), presents)


# --- the server -------------------------------------------------------------------------------


class _Seq:
    """A running sequence: its request, tokens cached, ids produced, and where its cache
    lies: row ``row`` of ``src`` (a prefill's presents) or of the decode batch's cache
    (``src`` None). Its real tokens are always the last ``ctx`` columns of that cache."""

    __slots__ = ("ctx", "ids", "req", "row", "src")

    def __init__(self, req: int, ctx: int, first: int, src: tuple[Any, ...], row: int
                 ) -> None:
        self.req, self.ctx, self.ids = req, ctx, [first]
        self.src: tuple[Any, ...] | None = src
        self.row = row


class _Server:
    """The loop (module docstring). Requests keep their given indices; ``incoming`` lists
    the accepted ones in arrival order."""

    def __init__(self, engine: _Engine, arrival: np.ndarray, prompts: list[np.ndarray],
                 output: np.ndarray, rejected: np.ndarray, policy: LLMPolicy,
                 clock: Callable[[], float], sleep: Callable[[float], None]) -> None:
        n = len(arrival)
        self.engine, self.policy, self.clock, self.sleep = engine, policy, clock, sleep
        self.arrival, self.prompts = arrival.tolist(), prompts
        self.output = output.tolist()
        order = np.argsort(arrival, kind="stable").tolist()
        self.incoming = [i for i in order if not rejected[i]]
        self.next_in = 0
        self.B, self.total = policy.block_tokens, policy.kv_capacity_blocks
        self.free = self.total
        self.waiting: deque[int] = deque()
        self.batch: list[_Seq] = []  # the decode batch, in the order of its cache rows
        self.joined: list[_Seq] = []  # prefilled since the last decode
        self.cache: tuple[Any, ...] = ()
        self.host: list[np.ndarray] = []  # the numpy arrays a rebuilt cache lies in
        self.padded = 0  # the batched cache's length
        self.dirty = False
        self.admitted_s = [np.nan] * n
        self.first_s = [np.nan] * n
        self.finish_s = [np.nan] * n
        self.produced = [0] * n
        self.ids: list[list[int]] = [[] for _ in range(n)]
        self.record = _Record()
        self.busy = 0.0
        self.peak_tokens = self.peak_blocks = 0
        self.t0 = 0.0

    def now(self) -> float:
        return self.clock() - self.t0

    def run(self) -> None:
        self.t0 = self.clock()
        inc, arrival = self.incoming, self.arrival
        while True:
            start = self.now()
            while self.next_in < len(inc) and arrival[inc[self.next_in]] <= start:
                self.waiting.append(inc[self.next_in])
                self.next_in += 1
            if not self.waiting and not self.batch and not self.joined:
                if self.next_in >= len(inc):
                    return
                self._wait_until(arrival[inc[self.next_in]])
                continue
            if not (self.waiting and self._prefill(start)):
                self._decode(start)

    def _wait_until(self, t: float) -> None:
        target = self.t0 + t
        left = target - self.clock()
        if left > SPIN_S:
            self.sleep(left - SPIN_S)
        while self.clock() < target:
            pass

    def _running(self) -> int:
        return len(self.batch) + len(self.joined)

    def _prefill(self, start: float) -> bool:
        """One prefill-only iteration when ``admit_whole`` admits anyone."""
        prompts = self.prompts
        k, blocks = admit_whole((len(prompts[r]) for r in self.waiting), self._running(),
                                self.free, self.policy)
        if not k:
            return False
        self.free -= blocks
        admitted = [self.waiting.popleft() for _ in range(k)]
        for r in admitted:
            self.admitted_s[r] = start
        decoding = sum(s.ctx for s in (*self.batch, *self.joined))
        first, presents, run_s, width = self.engine.prefill([prompts[r] for r in admitted])
        lengths = [len(prompts[r]) for r in admitted]
        in_use = self.total - self.free
        end = self.now()
        for row, (r, token) in enumerate(zip(admitted, first.tolist(), strict=True)):
            self.first_s[r] = end
            seq = _Seq(r, lengths[row], token, presents, row)
            if self.output[r] == 1:
                self._finish(seq, end)
            else:
                self.joined.append(seq)
                self.dirty = True
        ctx = sum(lengths)
        pair = sum(n * (n + 1) // 2 for n in lengths)
        self._note(start, end, True, k, ctx, ctx, pair, k * width, k * width,
                   k * width * (width + 1) // 2, in_use, k, run_s, 0.0)
        self.peak_tokens = max(self.peak_tokens, ctx + decoding)
        return True

    def _finish(self, seq: _Seq, end: float) -> None:
        r = seq.req
        self.finish_s[r] = end
        self.produced[r] = len(seq.ids)
        self.ids[r] = seq.ids
        self.free += -(-seq.ctx // self.B)

    def _note(self, start: float, end: float, *row: Any) -> None:
        self.record.add(start, end - start, *row)
        self.busy += end - start
        self.peak_blocks = max(self.peak_blocks, row[-4])

    def _decode(self, start: float) -> None:
        """One decode-only iteration over every running sequence."""
        need = sum(1 for s in (*self.batch, *self.joined) if s.ctx % self.B == 0)
        assert need <= self.free, "a preemption the policy check should have excluded"
        self.free -= need
        in_use = self.total - self.free
        rebuild_s = self._rebuild() if self.dirty else 0.0
        batch, width = self.batch, self.padded
        n = len(batch)
        assert n, "a decode with nothing running"
        ctx = np.fromiter((s.ctx for s in batch), dtype=np.int64, count=n)
        ids = np.fromiter((s.ids[-1] for s in batch), dtype=np.int64, count=n).reshape(n, 1)
        mask = (np.arange(width + 1) >= (width - ctx)[:, None]).astype(np.int64)
        tokens, self.cache, run_s = self.engine.run(ids, mask, ctx.reshape(n, 1), self.cache)
        self.host = []
        self.padded = width + 1
        end = self.now()
        done: list[_Seq] = []
        for seq, token in zip(batch, tokens.tolist(), strict=True):
            seq.ctx += 1
            seq.ids.append(token)
            if len(seq.ids) == self.output[seq.req]:
                done.append(seq)
        for seq in done:
            self._finish(seq, end)
        if done:
            self.batch = [s for s in batch if len(s.ids) < self.output[s.req]]
            self.dirty = True
        real = int(ctx.sum()) + n
        padded = n * (width + 1)
        self._note(start, end, False, n, n, real, real, n, padded, padded, in_use, n, run_s,
                   rebuild_s)
        self.peak_tokens = max(self.peak_tokens, real)

    def _rebuild(self) -> float:
        """The decode batch's cache for its new members, rebuilt once through numpy: each
        member's last ``ctx`` columns, right-aligned, as long as the longest member."""
        start = self.clock()
        members = [*self.batch, *self.joined]
        width = max(s.ctx for s in members)
        lay = self.engine.lay
        shape = (len(members), lay.kv_heads, width, lay.head_dim)
        new = [np.zeros(shape, dtype=lay.dtype) for _ in range(2 * lay.layers)]
        host: dict[int, list[np.ndarray]] = {}
        for i, s in enumerate(members):
            src = self.cache if s.src is None else s.src
            arrays = host.get(id(src))
            if arrays is None:
                arrays = host[id(src)] = [v.numpy() for v in src]
            for a, b in zip(new, arrays, strict=True):
                a[i, :, width - s.ctx:] = b[s.row, :, b.shape[2] - s.ctx:]
            s.src, s.row = None, i
        self.host = new  # kept alive while the OrtValues below read them
        self.cache = tuple(self.engine.ort.OrtValue.ortvalue_from_numpy(a) for a in new)
        self.batch, self.joined, self.padded, self.dirty = members, [], width, False
        return self.clock() - start


def serve_llm_real(requests: Sequence[LLMRequest], path: str | os.PathLike[str],
                   policy: LLMPolicy, *, threads: int | None = None,
                   clock: Callable[[], float] = time.perf_counter,
                   sleep: Callable[[float], None] = time.sleep,
                   prompts: Sequence[Any] | None = None, seed: int = 0, warmup: int = 1,
                   keep_tokens: bool = False) -> tuple[LLMServeResult, RealIterations]:
    """Serve ``requests`` (``arrival_s`` from the run's start) open loop on the decoder file
    at ``path`` (one onnxruntime CPU session, ``threads`` intra-op threads) under ``policy``
    (``chunked_prefill=False``; one that could preempt is refused; ``padded`` is ignored, as
    the engine always pads: module docstring).

    Each request's prompt is ``prompts[i]`` (its ``prompt_tokens`` ids) or drawn uniformly
    from ``seed``; it gets ``output_tokens`` greedy tokens (no end-of-sequence stop).
    ``warmup`` untimed rounds (a prefill of the first prompt and one decode) run first.
    ``clock`` and ``sleep`` are the time source (seconds) and the idle wait.
    ``keep_tokens`` keeps every request's generated ids in the records' ``output_ids``.
    Returns the result as the simulator fills it (its ``trace``: these iterations) and the
    real iteration records.
    """
    arr, prompt, out = _columns(requests)
    check_no_preemption(prompt, out, policy)
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise InputError(f"must be an integer >= 0, got {warmup!r}", place="warmup")
    rejected = rejected_at_arrival(prompt, out, policy)
    engine = _Engine(path, threads, clock)
    ids = _prompts(prompts, prompt, engine.lay.vocab, seed)
    for _ in range(warmup if len(ids) else 0):
        engine.warm(ids[0])
    server = _Server(engine, arr, ids, out, rejected, policy, clock, sleep)
    server.run()
    kept = (tuple(np.asarray(t, dtype=np.int64) for t in server.ids) if keep_tokens
            else None)
    records = server.record.done(kept)
    result = LLMServeResult(
        arrival_s=arr, prompt_tokens=prompt, output_tokens=out,
        admitted_s=np.asarray(server.admitted_s, dtype=float),
        first_token_s=np.asarray(server.first_s, dtype=float),
        finish_s=np.asarray(server.finish_s, dtype=float),
        preempted=np.zeros(len(arr), dtype=np.int64),
        tokens_out=np.asarray(server.produced, dtype=np.int64), rejected_mask=rejected,
        iterations=len(records), busy_s=server.busy, peak_kv_tokens=server.peak_tokens,
        peak_kv_blocks=server.peak_blocks, kv_capacity_blocks=policy.kv_capacity_blocks,
        trace=records.as_llm_iterations())
    return result, records


def iteration_terms(records: RealIterations, step: StepTime) -> dict[str, float]:
    """Where the real iterations' time went against ``step``'s prediction for the batches
    the simulator sees, summed over the run (seconds): ``predicted`` (the step model at the
    real batches), ``padding`` (the step model at the padded batches the model computed,
    minus ``predicted``), ``step_model`` (the run calls measured, minus the step model at
    the padded batches), ``rebuild`` (rebuilding the batched cache) and ``bookkeeping``
    (the rest of each iteration: sampling, binding, records). ``measured`` is their sum,
    the iterations' total time."""
    def total(tokens: np.ndarray, ctx: np.ndarray, pair: np.ndarray) -> float:
        return float(sum(step.iteration_s(int(t), int(c), float(p), int(s)) for t, c, p, s
                         in zip(tokens, ctx, pair, records.seqs, strict=True)))

    real = total(records.tokens, records.ctx_sum, records.pair_sum)
    padded = total(records.padded_tokens, records.padded_ctx, records.padded_pair)
    run, rebuild = float(records.run_s.sum()), float(records.rebuild_s.sum())
    measured = float(records.duration_s.sum())
    return {"predicted": real, "padding": padded - real, "step_model": run - padded,
            "rebuild": rebuild, "bookkeeping": measured - run - rebuild, "measured": measured}
