"""The LLM serving simulator: hand-computed runs, preemption and rejection, invariants on
random workloads (hypothesis), the fast path against one iteration at a time, requests and
traces."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placewise.errors import InputError
from placewise.serve.llm import (
    LLMPolicy,
    LLMRequest,
    LLMServeResult,
    draw_lengths,
    load_llm_trace,
    poisson_llm_requests,
    simulate_llm,
)


class Linear:
    """``a + b tokens + c ctx_sum + d pair_sum + e seqs`` seconds."""

    def __init__(self, a: float = 1e-3, b: float = 1e-4, c: float = 0.0, d: float = 0.0,
                 e: float = 0.0) -> None:
        self.k = (a, b, c, d, e)

    def iteration_s(self, tokens: int, ctx_sum: int, pair_sum: float, seqs: int) -> float:
        a, b, c, d, e = self.k
        return a + b * tokens + c * ctx_sum + d * pair_sum + e * seqs


class LinearMany(Linear):
    def iteration_s_many(self, tokens: np.ndarray, ctx_sum: np.ndarray, pair_sum: np.ndarray,
                         seqs: np.ndarray) -> np.ndarray:
        a, b, c, d, e = self.k
        return a + b * tokens + c * ctx_sum + d * pair_sum + e * seqs


def _policy(**kw: object) -> LLMPolicy:
    base: dict[str, object] = {"kv_capacity_tokens": 1 << 16, "max_seqs": 8,
                               "max_batch_tokens": 4096}
    base.update(kw)
    return LLMPolicy(**base)  # type: ignore[arg-type]


# --- hand-computed runs -----------------------------------------------------------------


@pytest.mark.parametrize("chunked", [False, True])
def test_one_request_alone(chunked: bool) -> None:
    step = Linear(1e-3, 1e-5, 1e-7)
    r = simulate_llm([LLMRequest(2.0, 100, 5)], step, _policy(chunked_prefill=chunked),
                     record_iterations=True)
    prefill = 1e-3 + 1e-5 * 100 + 1e-7 * 100
    decodes = [1e-3 + 1e-5 + 1e-7 * ctx for ctx in (101, 102, 103, 104)]
    assert r.ttft_s[0] == pytest.approx(prefill)
    assert r.tpot_s[0] == pytest.approx(sum(decodes) / 4)
    assert r.e2e_s[0] == pytest.approx(prefill + sum(decodes))
    assert r.admitted_s[0] == 2.0
    assert r.iterations == 5 and r.completed == 1 and r.tokens_out[0] == 5
    assert r.trace is not None
    assert r.trace.tokens.tolist() == [100, 1, 1, 1, 1]
    assert r.trace.ctx_sum.tolist() == [100, 101, 102, 103, 104]
    assert r.trace.pair_sum.tolist() == [5050.0, 101.0, 102.0, 103.0, 104.0]
    assert r.peak_kv_tokens == 104 and r.peak_kv_blocks == 7


def test_two_requests_prefill_first() -> None:
    """vLLM v0: B arrives during A's prefill and is prefilled before A decodes again."""
    reqs = [LLMRequest(0.0, 10, 3), LLMRequest(1.5e-3, 10, 4)]
    r = simulate_llm(reqs, Linear(), _policy(chunked_prefill=False))
    assert r.first_token_s == pytest.approx([2e-3, 4e-3])
    assert r.finish_s == pytest.approx([6.4e-3, 7.5e-3])
    assert r.ttft_s == pytest.approx([2e-3, 2.5e-3])
    assert r.tpot_s == pytest.approx([2.2e-3, 3.5e-3 / 3])
    assert r.iterations == 5
    assert r.span_s == pytest.approx(7.5e-3)
    assert r.output_tokens_per_s == pytest.approx(7 / 7.5e-3)
    assert r.requests_per_s == pytest.approx(2 / 7.5e-3)
    assert r.goodput(2.2e-3, 3e-3) == pytest.approx(1 / 7.5e-3)
    assert r.goodput(3e-3, 3e-3) == pytest.approx(2 / 7.5e-3)
    assert r.goodput(1e-3, 1.0) == 0.0
    s = r.summary(ttft_slo_s=3e-3, tpot_slo_s=3e-3)
    assert s["goodput_rps"] == pytest.approx(2 / 7.5e-3)
    assert s["ttft"]["n"] == 2 and s["tpot"]["n"] == 2 and s["e2e"]["p50_s"] == pytest.approx(
        (6.4e-3 + 6e-3) / 2)
    json.dumps(s)


def test_two_requests_chunked() -> None:
    """Sarathi: B's prefill rides with A's first decode."""
    reqs = [LLMRequest(0.0, 10, 3), LLMRequest(1.5e-3, 10, 4)]
    r = simulate_llm(reqs, Linear(), _policy(chunked_prefill=True), record_iterations=True)
    assert r.first_token_s == pytest.approx([2e-3, 4.1e-3])
    assert r.finish_s == pytest.approx([5.3e-3, 7.5e-3])
    assert r.trace is not None
    assert r.trace.tokens.tolist() == [10, 11, 2, 1, 1]
    assert r.trace.prefill_tokens.tolist() == [10, 10, 0, 0, 0]
    assert r.trace.emitted.tolist() == [1, 2, 2, 1, 1]


def test_chunked_prefill_splits_a_long_prompt() -> None:
    reqs = [LLMRequest(0.0, 100, 2), LLMRequest(0.0, 20, 2)]
    r = simulate_llm(reqs, Linear(), _policy(max_batch_tokens=32), record_iterations=True)
    tr = r.trace
    assert tr is not None
    assert tr.tokens.tolist() == [32, 32, 32, 24, 2]
    assert tr.seqs.tolist() == [1, 1, 1, 2, 2]
    # chunk c over d cached: c (d + (c + 1) / 2) query-key pairs
    assert tr.pair_sum.tolist() == [528.0, 1552.0, 2576.0, 394.0 + 210.0, 101.0 + 21.0]
    assert tr.ctx_sum.tolist() == [32, 64, 96, 120, 122]
    ends = tr.start_s + tr.duration_s
    assert r.first_token_s.tolist() == [ends[3], ends[3]]
    assert r.ttft_s[0] == pytest.approx(3 * (1e-3 + 32e-4) + (1e-3 + 24e-4))
    assert r.admitted_s.tolist() == [0.0, ends[2]]


def test_padded_two_sequences() -> None:
    """A padded engine prefills 10 and 4 tokens as 2 x 10, then decodes both over a cache
    padded to the longer past (10, then 11), then the shorter alone; decisions unchanged."""
    reqs = [LLMRequest(0.0, 10, 3), LLMRequest(0.0, 4, 4)]
    step = Linear(1e-3, 1e-5, 1e-7, 1e-9)
    pol = _policy(chunked_prefill=False, padded=True)
    r = simulate_llm(reqs, step, pol, record_iterations=True)
    real = simulate_llm(reqs, step, _policy(chunked_prefill=False), record_iterations=True)
    assert r.trace is not None and real.trace is not None
    assert r.trace.tokens.tolist() == [20, 2, 2, 1]
    assert r.trace.prefill_tokens.tolist() == [20, 0, 0, 0]
    assert r.trace.seqs.tolist() == real.trace.seqs.tolist() == [2, 2, 2, 1]
    assert r.trace.ctx_sum.tolist() == [20, 2 * (10 + 1), 2 * (11 + 1), 7]
    assert r.trace.pair_sum.tolist() == [2 * 55.0, 22.0, 24.0, 7.0]
    assert real.trace.ctx_sum.tolist() == [14, 11 + 5, 12 + 6, 7]
    want = [step.iteration_s(t, c, p, n) for t, c, p, n in
            [(20, 20, 110, 2), (2, 22, 22, 2), (2, 24, 24, 2), (1, 7, 7, 1)]]
    assert r.trace.duration_s.tolist() == want
    assert r.finish_s.tolist() == [sum(want[:3]), sum(want)]
    assert r.tokens_out.tolist() == real.tokens_out.tolist() == [3, 4]
    assert r.trace.kv_blocks.tolist() == real.trace.kv_blocks.tolist()
    assert r.peak_kv_tokens == real.peak_kv_tokens == 18  # real tokens, not padded ones


def test_padded_when_the_longest_leaves() -> None:
    """The longest sequence finishes first: the next decodes pad to the next longest."""
    reqs = [LLMRequest(0.0, 20, 2), LLMRequest(0.0, 8, 4), LLMRequest(0.0, 5, 4)]
    for fast in (True, False):
        r = simulate_llm(reqs, Linear(), _policy(chunked_prefill=False, padded=True),
                         fast_forward=fast, record_iterations=True)
        assert r.trace is not None
        assert r.trace.tokens.tolist() == [60, 3, 2, 2]
        assert r.trace.ctx_sum.tolist() == [60, 3 * 21, 2 * 10, 2 * 11]
        assert r.trace.pair_sum.tolist() == [3 * 210.0, 63.0, 20.0, 22.0]


def test_padded_with_chunked_prefill_is_refused() -> None:
    with pytest.raises(InputError, match="chunked_prefill=False") as e:
        _policy(padded=True)
    assert e.value.place == "padded"
    with pytest.raises(InputError, match="bool") as e:
        _policy(chunked_prefill=False, padded=1)
    assert e.value.place == "padded"


def test_preemption_recomputes_and_completes() -> None:
    """4 blocks of 16: two decodes cross into their third block at once; the later one is
    evicted, waits for the other to finish, and is prefilled again over 16 + 17 tokens."""
    reqs = [LLMRequest(0.0, 16, 20), LLMRequest(0.0, 16, 20)]
    pol = _policy(kv_capacity_tokens=64, chunked_prefill=False)
    r = simulate_llm(reqs, Linear(), pol, record_iterations=True)
    assert r.preempted.tolist() == [0, 1] and r.preemptions == 1
    assert r.tokens_out.tolist() == [20, 20]
    assert r.finish_s == pytest.approx([26.7e-3, 33.2e-3])
    assert r.first_token_s == pytest.approx([4.2e-3, 4.2e-3])
    assert r.trace is not None
    assert 33 in r.trace.prefill_tokens.tolist()
    assert r.peak_kv_blocks == 4 and r.trace.kv_blocks.max() == 4
    same = simulate_llm(reqs, Linear(), pol, fast_forward=False)
    assert np.array_equal(same.finish_s, r.finish_s)


def test_preemption_chunked() -> None:
    reqs = [LLMRequest(0.0, 40, 30), LLMRequest(0.0, 40, 30), LLMRequest(0.0, 8, 50)]
    pol = _policy(kv_capacity_tokens=128, max_batch_tokens=64, chunked_prefill=True)
    r = simulate_llm(reqs, Linear(), pol, record_iterations=True)
    assert r.completed == 3 and r.preemptions >= 1
    assert r.tokens_out.tolist() == [30, 30, 50]
    assert r.trace is not None and r.trace.kv_blocks.max() <= 8


def test_rejects_what_can_never_fit() -> None:
    reqs = [LLMRequest(0.0, 60, 10), LLMRequest(0.0, 60, 5), LLMRequest(1.0, 30, 10)]
    r = simulate_llm(reqs, Linear(), _policy(kv_capacity_tokens=64, max_batch_tokens=32))
    # 60 + 10 - 1 tokens need 5 blocks of 4; 60 + 5 - 1 fill them exactly
    assert r.rejected_mask.tolist() == [True, False, False]
    assert r.rejected == 1 and r.completed == 2 and r.conserved()
    assert math.isnan(r.finish_s[0]) and r.tokens_out[0] == 0
    whole = simulate_llm(reqs, Linear(), _policy(kv_capacity_tokens=64, max_batch_tokens=32,
                                                 chunked_prefill=False))
    # without chunks the budget must hold the longest prefill again: 30 + 10 - 1 > 32
    assert whole.rejected_mask.tolist() == [True, True, True] and whole.conserved()
    assert whole.iterations == 0 and whole.span_s == 0.0 and whole.requests_per_s == 0.0


def test_requests_in_any_order() -> None:
    reqs = poisson_llm_requests(200.0, 30, "uniform:1-64", "uniform:1-16", seed=3)
    a = simulate_llm(reqs, Linear(), _policy(max_seqs=4, max_batch_tokens=64))
    b = simulate_llm(reqs[::-1], Linear(), _policy(max_seqs=4, max_batch_tokens=64))
    assert np.array_equal(a.finish_s, b.finish_s[::-1])
    assert np.array_equal(a.first_token_s, b.first_token_s[::-1])


def test_jitter_is_seeded() -> None:
    reqs = poisson_llm_requests(100.0, 40, "uniform:1-64", "uniform:1-40", seed=2)
    pol = _policy(max_seqs=4)
    a = simulate_llm(reqs, Linear(), pol, seed=1, jitter_sigma=0.3)
    b = simulate_llm(reqs, LinearMany(), pol, seed=1, jitter_sigma=0.3)
    c = simulate_llm(reqs, Linear(), pol, seed=1, jitter_sigma=0.3, fast_forward=False)
    d = simulate_llm(reqs, Linear(), pol, seed=2, jitter_sigma=0.3)
    plain = simulate_llm(reqs, Linear(), pol)
    assert np.array_equal(a.finish_s, b.finish_s) and np.array_equal(a.finish_s, c.finish_s)
    assert not np.array_equal(a.finish_s, d.finish_s)
    assert not np.array_equal(a.finish_s, plain.finish_s)


# --- invariants on random workloads --------------------------------------------------------


def _check(r: LLMServeResult, pol: LLMPolicy) -> None:
    tr = r.trace
    assert tr is not None
    assert r.conserved()
    need = r.prompt_tokens + r.output_tokens - 1
    rej = -(-need // pol.block_tokens) > pol.kv_capacity_blocks
    if not pol.chunked_prefill:
        rej |= need > pol.max_batch_tokens
    assert np.array_equal(r.rejected_mask, rej)
    assert np.array_equal(r.completed_mask, ~rej)
    assert (tr.kv_blocks <= pol.kv_capacity_blocks).all()
    assert r.peak_kv_blocks <= pol.kv_capacity_blocks
    assert (tr.seqs <= pol.max_seqs).all()
    if pol.padded:  # n sequences padded to the longest, of at most the budget
        assert (tr.tokens % tr.seqs == 0).all()
        assert (tr.tokens // tr.seqs <= pol.max_batch_tokens).all()
    else:
        decode_only = (tr.prefill_tokens == 0) & (tr.tokens <= pol.max_seqs)
        assert ((tr.tokens <= pol.max_batch_tokens) | decode_only).all()
    done = r.completed_mask
    assert np.array_equal(r.tokens_out[done], r.output_tokens[done])
    assert int(tr.emitted.sum()) == int(r.output_tokens[done].sum())
    assert r.iterations == len(tr.start_s)
    ends = tr.start_s + tr.duration_s
    for i in np.flatnonzero(done):
        j = int(np.searchsorted(ends, r.first_token_s[i]))
        assert ends[j] == r.first_token_s[i]
        assert tr.start_s[j] >= r.arrival_s[i]
        ttft = r.first_token_s[i] - r.arrival_s[i]
        assert ttft >= tr.duration_s[j] * (1 - 1e-12)  # to the rounding of the subtraction
        assert r.finish_s[i] >= r.first_token_s[i] >= r.admitted_s[i] >= r.arrival_s[i]
    order = np.lexsort((np.arange(r.submitted), r.arrival_s))
    admitted = r.admitted_s[order][done[order]]
    assert (np.diff(admitted) >= 0).all()  # first admissions in arrival order


workloads = st.lists(
    st.tuples(st.floats(0.0, 0.02), st.integers(1, 80), st.integers(1, 30)),
    min_size=1, max_size=12)


@settings(max_examples=120, deadline=None)
@given(workloads, st.integers(1, 6), st.integers(1, 128), st.sampled_from([1, 4, 16]),
       st.integers(1, 12), st.sampled_from(["chunked", "whole", "padded"]),
       st.sampled_from([0.0, 0.3]), st.floats(1e-6, 1e-4), st.floats(0.0, 1e-6))
def test_invariants(work: list[tuple[float, int, int]], max_seqs: int, budget: int,
                    block: int, blocks: int, mode: str, jitter: float, per_token: float,
                    per_ctx: float) -> None:
    """Also: the fast path (a loop, or ``iteration_s_many``) equals one iteration at a time,
    padded batches included."""
    t = np.cumsum([w[0] for w in work])
    reqs = [LLMRequest(float(a), p, o) for a, (_, p, o) in zip(t, work, strict=True)]
    pol = LLMPolicy(kv_capacity_tokens=block * blocks, max_seqs=max_seqs,
                    max_batch_tokens=budget, chunked_prefill=mode == "chunked",
                    block_tokens=block, padded=mode == "padded")
    step = Linear(1e-4, per_token, per_ctx, 1e-9, 1e-6)
    r = simulate_llm(reqs, step, pol, jitter_sigma=jitter, record_iterations=True)
    _check(r, pol)
    slow = simulate_llm(reqs, step, pol, jitter_sigma=jitter, fast_forward=False,
                        record_iterations=True)
    many = simulate_llm(reqs, LinearMany(*step.k), pol, jitter_sigma=jitter,
                        record_iterations=True)
    for other in (slow, many):
        for name in ("admitted_s", "first_token_s", "finish_s", "preempted", "tokens_out"):
            assert np.array_equal(getattr(r, name), getattr(other, name), equal_nan=True)
        assert other.iterations == r.iterations and other.peak_kv_tokens == r.peak_kv_tokens
        assert other.busy_s == r.busy_s and other.trace is not None
        for col in ("tokens", "ctx_sum", "pair_sum", "duration_s"):
            assert np.array_equal(getattr(r.trace, col), getattr(other.trace, col))


def test_invariants_under_load() -> None:
    """A longer run where the fast path and preemptions both happen."""
    reqs = poisson_llm_requests(400.0, 300, "lognormal:64,0.8", "lognormal:48,0.8", seed=5)
    for chunked, padded in ((False, False), (True, False), (False, True)):
        pol = LLMPolicy(kv_capacity_tokens=1024, max_seqs=16, max_batch_tokens=512,
                        chunked_prefill=chunked, padded=padded)
        r = simulate_llm(reqs, Linear(1e-3, 1e-5, 1e-7), pol, record_iterations=True)
        _check(r, pol)
        assert r.preemptions > 0
        slow = simulate_llm(reqs, Linear(1e-3, 1e-5, 1e-7), pol, fast_forward=False)
        assert np.array_equal(r.finish_s, slow.finish_s, equal_nan=True)
        assert r.busy_s == slow.busy_s


@pytest.mark.parametrize(("chunked", "padded"), [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("jitter", [0.0, 0.2])
def test_fast_path_matches_one_at_a_time(chunked: bool, padded: bool, jitter: float,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Long decodes between sparse arrivals, in a cache that runs out: the runs advanced in
    one step (a scalar loop, or ``iteration_s_many``) give every iteration, bit for bit,
    padded batches included."""
    from placewise.serve import llm

    used: list[str] = []
    for name in ("_decode_loop", "_decode_vector"):
        def spy(self: object, *a: int, _f: object = getattr(llm._Sim, name),
                _n: str = name) -> None:
            used.append(_n)
            _f(self, *a)  # type: ignore[operator]
        monkeypatch.setattr(llm._Sim, name, spy)
    reqs = [LLMRequest(0.05 * i, 20 + 37 * i, 300 + 90 * i) for i in range(6)]
    pol = _policy(kv_capacity_tokens=1600, max_batch_tokens=1024, chunked_prefill=chunked,
                  padded=padded)
    step = Linear(1e-3, 1e-5, 1e-7)
    runs = [simulate_llm(reqs, s, pol, fast_forward=f, jitter_sigma=jitter, seed=3,
                         record_iterations=True)
            for s, f in ((LinearMany(*step.k), True), (step, True), (step, False))]
    assert {"_decode_loop", "_decode_vector"} <= set(used)
    assert runs[0].preemptions > 0
    for other in runs[1:]:
        for name in ("first_token_s", "finish_s", "preempted", "tokens_out"):
            assert np.array_equal(getattr(runs[0], name), getattr(other, name))
        assert runs[0].trace is not None and other.trace is not None
        for col in ("start_s", "duration_s", "tokens", "prefill_tokens", "ctx_sum",
                    "pair_sum", "kv_blocks", "emitted"):
            assert np.array_equal(getattr(runs[0].trace, col), getattr(other.trace, col))
        assert (runs[0].busy_s, runs[0].peak_kv_tokens, runs[0].peak_kv_blocks) == (
            other.busy_s, other.peak_kv_tokens, other.peak_kv_blocks)
    _check(runs[0], pol)


# --- bad input -------------------------------------------------------------------------


@pytest.mark.parametrize(("kw", "place"), [
    ({"max_seqs": 0}, "max_seqs"), ({"max_batch_tokens": 1.5}, "max_batch_tokens"),
    ({"kv_capacity_tokens": 8}, "kv_capacity_tokens"), ({"block_tokens": 0}, "block_tokens"),
    ({"preemption": "swap"}, "preemption")])
def test_policy_checks(kw: dict[str, object], place: str) -> None:
    with pytest.raises(InputError) as e:
        _policy(**kw)
    assert e.value.place == place


def test_bad_requests_and_steps() -> None:
    with pytest.raises(InputError, match="request 1: output_tokens must be >= 1"):
        simulate_llm([LLMRequest(0.0, 4, 1), LLMRequest(0.0, 4, 0)], Linear(), _policy())
    with pytest.raises(InputError, match="jitter_sigma"):
        simulate_llm([LLMRequest(0.0, 4, 1)], Linear(), _policy(), jitter_sigma=-1.0)
    with pytest.raises(InputError, match="step time"):
        simulate_llm([LLMRequest(0.0, 4, 1)], Linear(a=math.nan), _policy())
    empty = simulate_llm([], Linear(), _policy())
    assert empty.submitted == 0 and empty.conserved() and empty.summary()["ttft"]["n"] == 0


# --- requests and traces -----------------------------------------------------------------


def test_lengths_and_generators() -> None:
    rng = np.random.default_rng(0)
    u = draw_lengths("uniform:3-5", 1000, rng)
    assert set(u.tolist()) == {3, 4, 5}
    x = draw_lengths("lognormal:128,0.5", 50_000, rng)
    assert x.min() >= 1 and abs(x.mean() / 128 - 1) < 0.02
    for bad in ("fixed:0", "uniform:5-2", "lognormal:abc", "lognormal:0.5,1", "gauss:3", "7"):
        with pytest.raises(InputError, match="length distribution"):
            draw_lengths(bad, 3, rng)
    a = poisson_llm_requests(50.0, 20, "fixed:9", "uniform:1-9", seed=4)
    assert a == poisson_llm_requests(50.0, 20, "fixed:9", "uniform:1-9", seed=4)
    assert a != poisson_llm_requests(50.0, 20, "fixed:9", "uniform:1-9", seed=5)
    assert all(r.prompt_tokens == 9 and 1 <= r.output_tokens <= 9 for r in a)


def test_azure_csv(tmp_path: Path) -> None:
    p = tmp_path / "azure.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2023-11-16 18:15:46.6805900,4808,10\n\n"
                 "2023-11-16 18:15:50.9951690,3180,8\n")
    r = load_llm_trace(p)
    assert [(x.prompt_tokens, x.output_tokens) for x in r] == [(4808, 10), (3180, 8)]
    assert r[0].arrival_s == 0.0 and r[1].arrival_s == pytest.approx(4.314579)


def test_seconds_csv_and_jsonl(tmp_path: Path) -> None:
    c = tmp_path / "t.csv"
    c.write_text("output_tokens,arrival_s,prompt_tokens\n3,0.5,7\n4,0.5,8\n")
    assert load_llm_trace(c) == [LLMRequest(0.5, 7, 3), LLMRequest(0.5, 8, 4)]
    j = tmp_path / "t.jsonl"
    j.write_text('{"arrival_s": 0.25, "prompt_tokens": 7, "output_tokens": 3}\n\n'
                 '{"timestamp": 1, "ContextTokens": 9, "GeneratedTokens": 1}\n')
    assert load_llm_trace(j) == [LLMRequest(0.25, 7, 3), LLMRequest(1.0, 9, 1)]


HEAD = "arrival_s,prompt_tokens,output_tokens\n"


@pytest.mark.parametrize(("name", "text", "where", "what"), [
    ("a.csv", "arrival_s,prompt_tokens\n0,1\n", "line 1 (the header)", "no output_tokens or"),
    ("b.csv", HEAD + "0,1,1\n0.1,abc,1\n", "line 3", "prompt_tokens must be an integer"),
    ("c.csv", HEAD + "-1,1,1\n", "line 2", "seconds >= 0"),
    ("d.csv", HEAD + "1,1,1\n0.5,1,1\n", "line 3", "before the previous one"),
    ("e.csv", HEAD + "0,1,0\n", "line 2", "output_tokens must be an integer >= 1"),
    ("f.csv", HEAD + "0,1,1,9\n", "line 2", "4 fields"),
    ("g.csv", HEAD + "yesterday,1,1\n", "line 2", "neither seconds nor"),
    ("h.csv", HEAD + "0,1,1\n2023-01-01T00:00:00,1,1\n", "line 3", "datetime where"),
    ("i.csv", HEAD + "2023-01-01T00:00:00,1,1\n2023-01-01T00:00:01+00:00,1,1\n", "line 3",
     "time zone"),
    ("j.jsonl", '{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1}\n{oops\n',
     "line 2", "not JSON"),
    ("k.jsonl", '{"arrival_s": 0, "prompt_tokens": true, "output_tokens": 1}\n', "line 1",
     "integer >= 1"),
    ("l.jsonl", '{"arrival_s": 0, "output_tokens": 1}\n', "line 1", "no prompt_tokens"),
    ("m.csv", HEAD, None, "no requests"),
    ("n.csv", "", None, "no requests"),
])
def test_bad_traces(tmp_path: Path, name: str, text: str, where: str | None,
                    what: str) -> None:
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(InputError) as e:
        load_llm_trace(p)
    assert e.value.file == str(p) and e.value.place == where and what in e.value.problem


def test_unreadable_traces(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        load_llm_trace(tmp_path / "missing.csv")
    p = tmp_path / "bin.csv"
    p.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(InputError, match="not UTF-8"):
        load_llm_trace(p)
