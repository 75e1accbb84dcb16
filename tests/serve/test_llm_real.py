"""The LLM service run for real on the small decoder: continuous batching with left padding
gives every request the tokens it gets alone, the scheduling decisions are the simulator's,
a policy that could preempt is refused, and the iteration records add up."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import numpy as np
import pytest

from placewise.errors import InputError
from placewise.llm.real import SMALL_CONFIG, DecodeSession, export_decoder
from placewise.llm.steps import MeasuredStep
from placewise.serve.llm import LLMPolicy, LLMRequest, simulate_llm
from placewise.serve.llm_real import (
    RealIterations,
    check_no_preemption,
    fit_from_real,
    serve_llm_real,
)

VOCAB = SMALL_CONFIG["vocab_size"]


@pytest.fixture(scope="module")
def small_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    return export_decoder(SMALL_CONFIG, tmp_path_factory.mktemp("llm_real") / "small.onnx")


class Tick:
    """A clock that advances ``step_s`` at every reading (and by the time slept): the
    server's decisions become deterministic."""

    def __init__(self, step_s: float = 1e-4) -> None:
        self.t, self.step_s = 0.0, step_s
        self.slept: list[float] = []

    def __call__(self) -> float:
        self.t += self.step_s
        return self.t

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += seconds


class Linear:
    def iteration_s(self, tokens: int, ctx_sum: int, pair_sum: float, seqs: int) -> float:
        return 1e-3 + 1e-5 * tokens


def _prompts(requests: list[LLMRequest], seed: int = 3) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, VOCAB, r.prompt_tokens) for r in requests]


def _staggered() -> list[LLMRequest]:
    """Prompts of different lengths arriving while others decode, outputs of different
    lengths (one of a single token) so that sequences join and leave mid-decode."""
    spec = [(0.0, 7, 9), (0.0, 3, 12), (0.002, 11, 5), (0.003, 5, 1), (0.004, 16, 8),
            (0.006, 2, 10), (0.011, 9, 6), (0.05, 6, 4)]
    return [LLMRequest(a, p, o) for a, p, o in spec]


def _policy(**kw: object) -> LLMPolicy:
    base: dict[str, object] = {"kv_capacity_tokens": 1024, "max_seqs": 4,
                               "max_batch_tokens": 24, "block_tokens": 4,
                               "chunked_prefill": False}
    base.update(kw)
    return LLMPolicy(**base)  # type: ignore[arg-type]


def test_tokens_equal_each_prompt_decoded_alone(small_file: Path) -> None:
    reqs = _staggered()
    prompts = _prompts(reqs)
    tick = Tick()
    res, rec = serve_llm_real(reqs, small_file, _policy(), threads=1, clock=tick,
                              sleep=tick.sleep, prompts=prompts, keep_tokens=True)
    assert res.conserved() and res.completed == len(reqs)
    assert rec.output_ids is not None
    alone = DecodeSession(small_file, threads=1)
    for r, p, got in zip(reqs, prompts, rec.output_ids, strict=True):
        want = alone.generate(p[None], r.output_tokens)[0]
        assert got.tolist() == want.tolist()
    # the batch really changed mid-decode: sequences joined and left, caches rebuilt
    dec = ~rec.prefill
    assert len(set(rec.seqs[dec].tolist())) >= 3
    kinds = rec.prefill.tolist()
    assert any(a is False and b is True for a, b in itertools.pairwise(kinds))
    assert int((rec.rebuild_s[dec] > 0).sum()) >= 3
    assert (rec.padded_ctx[dec] > rec.ctx_sum[dec]).any()  # padding was really there
    assert tick.slept  # it waited idle for the last arrival


def test_tokens_equal_with_the_real_clock(small_file: Path) -> None:
    reqs = [LLMRequest(0.0, 5, 6), LLMRequest(0.001, 13, 4), LLMRequest(0.003, 2, 7)]
    res, rec = serve_llm_real(reqs, small_file, _policy(), threads=1, seed=5,
                              keep_tokens=True)
    assert res.conserved() and rec.output_ids is not None
    rng = np.random.default_rng(5)
    alone = DecodeSession(small_file, threads=1)
    for r, got in zip(reqs, rec.output_ids, strict=True):
        prompt = rng.integers(0, VOCAB, r.prompt_tokens, dtype=np.int64)
        assert got.tolist() == alone.generate(prompt[None], r.output_tokens)[0].tolist()
    assert (res.admitted_s >= res.arrival_s).all()
    assert (res.first_token_s > res.admitted_s).all()
    assert (res.finish_s >= res.first_token_s).all()


def _rank(x: np.ndarray) -> list[int]:
    """Which admission iteration each request joined in (ties: the same iteration)."""
    return np.unique(x, return_inverse=True)[1].tolist()


def test_same_decisions_as_the_simulator(small_file: Path) -> None:
    """Every request at t=0: timing cannot change a decision, so the real run's iterations
    are the simulator's, one by one (kind, batch, context, blocks, tokens)."""
    rng = np.random.default_rng(7)
    reqs = [LLMRequest(0.0, int(p), int(o))
            for p, o in zip(rng.integers(1, 20, 10), rng.integers(1, 10, 10), strict=True)]
    reqs.append(LLMRequest(0.0, 30, 4))  # 33 tokens, over the budget: rejected at arrival
    policy = _policy(kv_capacity_tokens=80, max_seqs=3, max_batch_tokens=32)
    tick = Tick()
    res, rec = serve_llm_real(reqs, small_file, policy, threads=1, clock=tick,
                              sleep=tick.sleep)
    sim = simulate_llm(reqs, Linear(), policy, record_iterations=True)
    assert sim.trace is not None and res.trace is not None and sim.preemptions == 0
    assert sim.trace.seqs[0] == 2 and (sim.trace.prefill_tokens > 0).sum() >= 5
    first = sim.trace.prefill_tokens[0], sim.trace.seqs[0]
    assert (rec.tokens[0], rec.seqs[0]) == first and rec.prefill[0]
    for name in ("tokens", "prefill_tokens", "seqs", "ctx_sum", "pair_sum", "kv_blocks",
                 "emitted"):
        assert getattr(res.trace, name).tolist() == getattr(sim.trace, name).tolist(), name
    assert res.rejected_mask.tolist() == sim.rejected_mask.tolist() == [False] * 10 + [True]
    assert res.tokens_out.tolist() == sim.tokens_out.tolist()
    ok = ~res.rejected_mask
    assert _rank(res.admitted_s[ok]) == _rank(sim.admitted_s[ok])
    assert (res.iterations, res.peak_kv_tokens, res.peak_kv_blocks) == (
        sim.iterations, sim.peak_kv_tokens, sim.peak_kv_blocks)
    assert np.isnan(res.finish_s[-1]) and res.conserved()
    _same_padding(reqs, policy, rec, small_file)


def _same_padding(reqs: list[LLMRequest], policy: LLMPolicy, rec: RealIterations,
                  small_file: Path) -> None:
    """A padded simulation asks the step about what the real engine computed, iteration by
    iteration; the real server takes a padded policy and ignores it (it always pads)."""
    padded = dataclasses.replace(policy, padded=True)
    sim = simulate_llm(reqs, Linear(), padded, record_iterations=True)
    assert sim.trace is not None and (rec.padded_ctx > rec.ctx_sum).any()
    assert sim.trace.tokens.tolist() == rec.padded_tokens.tolist()
    assert sim.trace.prefill_tokens.tolist() == np.where(rec.prefill, rec.padded_tokens,
                                                         0).tolist()
    assert sim.trace.ctx_sum.tolist() == rec.padded_ctx.tolist()
    assert sim.trace.pair_sum.tolist() == rec.padded_pair.tolist()
    for name in ("seqs", "kv_blocks", "emitted"):
        assert getattr(sim.trace, name).tolist() == getattr(rec, name).tolist(), name
    tick = Tick()
    _, again = serve_llm_real(reqs, small_file, padded, threads=1, clock=tick,
                              sleep=tick.sleep)
    for name in ("prefill", "seqs", "tokens", "ctx_sum", "pair_sum", "padded_tokens",
                 "padded_ctx", "padded_pair", "kv_blocks", "emitted"):
        assert getattr(again, name).tolist() == getattr(rec, name).tolist(), name


def test_policy_that_could_preempt_is_refused(tmp_path: Path) -> None:
    reqs = [LLMRequest(0.0, 40, 9)] * 3  # 48 tokens: 3 blocks of 16 each
    missing = tmp_path / "none.onnx"  # refused before the file is opened
    with pytest.raises(InputError, match="does not preempt") as err:
        serve_llm_real(reqs, missing, LLMPolicy(kv_capacity_tokens=128, chunked_prefill=False))
    assert err.value.place == "policy.kv_capacity_tokens"
    with pytest.raises(InputError, match="chunked prefill"):
        serve_llm_real(reqs, missing, LLMPolicy(kv_capacity_tokens=4096))
    # fewer sequences at once, or a cache for all three, and no refusal
    check_no_preemption(np.array([40] * 3), np.array([9] * 3),
                        LLMPolicy(kv_capacity_tokens=96, max_seqs=2, chunked_prefill=False))
    check_no_preemption(np.array([40] * 3), np.array([9] * 3),
                        LLMPolicy(kv_capacity_tokens=144, chunked_prefill=False))
    # a request rejected at arrival never runs: it cannot force a preemption
    check_no_preemption(np.array([40, 500]), np.array([9, 9]),
                        LLMPolicy(kv_capacity_tokens=144, chunked_prefill=False))


def test_bad_prompts_are_refused(small_file: Path) -> None:
    reqs = [LLMRequest(0.0, 4, 2)]
    with pytest.raises(InputError, match="token ids") as err:
        serve_llm_real(reqs, small_file, _policy(), prompts=[np.arange(3)])
    assert err.value.place == "prompts[0]"
    with pytest.raises(InputError, match="token ids"):
        serve_llm_real(reqs, small_file, _policy(), prompts=[np.array([0, 1, 2, VOCAB])])
    with pytest.raises(InputError, match="2 prompts for 1"):
        serve_llm_real(reqs, small_file, _policy(), prompts=[np.arange(4)] * 2)
    with pytest.raises(InputError):
        serve_llm_real(reqs, small_file, _policy(), warmup=-1)


def _check_records(res: object, rec: RealIterations, reqs: list[LLMRequest]) -> None:
    from placewise.serve.llm import LLMServeResult

    assert isinstance(res, LLMServeResult)
    pre, dec = rec.prefill, ~rec.prefill
    assert int(rec.emitted[dec].sum() + rec.emitted[pre].sum()) == int(res.tokens_out.sum())
    assert (rec.emitted == rec.seqs).all()
    assert (rec.tokens[dec] == rec.seqs[dec]).all()
    assert int(rec.tokens[pre].sum()) == sum(r.prompt_tokens for r in reqs)
    assert int(pre.sum()) >= 1 and (rec.padded_tokens >= rec.tokens).all()
    assert (rec.padded_ctx >= rec.ctx_sum).all() and (rec.padded_pair >= rec.pair_sum).all()
    assert res.tokens_out.tolist() == [r.output_tokens for r in reqs]
    assert res.iterations == len(rec) and res.busy_s == pytest.approx(rec.duration_s.sum())
    assert (rec.run_s <= rec.duration_s).all() and (rec.kv_blocks <= res.kv_capacity_blocks).all()
    assert (np.diff(rec.start_s) > 0).all()


def test_records_add_up_and_fit_the_step(small_file: Path) -> None:
    reqs = _staggered()
    res, rec = serve_llm_real(reqs, small_file, _policy(), threads=1)
    _check_records(res, rec, reqs)
    assert res.preemptions == 0 and res.rejected == 0
    summary = res.summary(ttft_slo_s=10.0, tpot_slo_s=10.0)
    assert summary["completed"] == len(reqs) and summary["goodput_rps"] > 0
    assert len(res.ttft_s) == len(reqs) and len(res.tpot_s) == 7
    for padded in (True, False):
        step = fit_from_real(rec, padded=padded)
        assert isinstance(step, MeasuredStep) and step.samples == len(rec)
        sim = simulate_llm(reqs, step, _policy())
        assert sim.conserved() and sim.tokens_out.tolist() == res.tokens_out.tolist()
    samples = rec.samples(padded=True)
    assert [s.ctx_sum for s in samples] == rec.padded_ctx.tolist()
    assert [s.seconds for s in samples] == rec.run_s.tolist()


def test_no_requests(small_file: Path) -> None:
    res, rec = serve_llm_real([], small_file, _policy())
    assert res.submitted == 0 and res.iterations == 0 and len(rec) == 0
    assert res.conserved() and res.trace is not None


def test_decode_cache_is_the_previous_presents(small_file: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Between membership changes each decode binds, as its past, the very OrtValues the
    previous call returned; the cache is rebuilt only where the batch changed."""
    from placewise.serve import llm_real

    calls: list[tuple[int, list[int], list[int]]] = []
    run = llm_real._Engine.run

    def spy(self: object, ids: np.ndarray, mask: np.ndarray, pos: np.ndarray,
            past: list[object]) -> object:
        out = run(self, ids, mask, pos, past)  # type: ignore[arg-type]
        calls.append((ids.shape[1], [id(v) for v in past], [id(v) for v in out[1]]))
        return out

    monkeypatch.setattr(llm_real._Engine, "run", spy)
    tick = Tick()
    reqs = _staggered()
    _, rec = serve_llm_real(reqs, small_file, _policy(), threads=1, clock=tick,
                            sleep=tick.sleep, warmup=0)
    assert len(calls) == len(rec)
    carried = 0
    for i in range(1, len(rec)):
        if rec.prefill[i]:
            continue
        same = calls[i][1] == calls[i - 1][2]
        assert same == (not rec.prefill[i - 1] and rec.rebuild_s[i] == 0)
        carried += same
    assert carried >= 10
    # rebuilt only by decodes, and only after the batch changed (a prefill or a finish)
    assert not rec.rebuild_s[rec.prefill].any()
    finished = np.r_[False, (~rec.prefill[:-1]) & (np.diff(rec.seqs) != 0)
                     | rec.prefill[:-1]]
    assert not (rec.rebuild_s > 0)[~finished & ~rec.prefill].any()
