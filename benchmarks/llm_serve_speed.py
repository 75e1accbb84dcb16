"""Speed of the LLM serving simulator (``placewise.serve.llm.simulate_llm``).

``--requests`` Poisson requests (prompts log-normal of mean 512, outputs of mean 128, sigma
1 in log space) served with ``max_seqs`` 256 and a KV cache of 131072 tokens by a linear
step time ``5 ms + 20 us * tokens + 10 ns * ctx_sum``, with chunked prefill (budget 2048)
and prefill-first (budget 8192), at a light and a heavy load; the light chunked case also
one iteration at a time (``fast_forward=False``) and with the step's vectorised
``iteration_s_many``. Median of ``--repeats`` runs (and the spread, max - min over the
median); iterations per second of wall time; the run's own figures beside.

    .venv/bin/python benchmarks/llm_serve_speed.py

Prints a table and writes ``benchmarks/results/llm_serve_speed.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from placewise.serve.llm import LLMPolicy, LLMRequest, poisson_llm_requests, simulate_llm


class LinearStep:
    """``5 ms + 20 us * tokens + 10 ns * ctx_sum`` seconds."""

    def iteration_s(self, tokens: int, ctx_sum: int, pair_sum: float, seqs: int) -> float:
        return 5e-3 + 2e-5 * tokens + 1e-8 * ctx_sum


class LinearStepMany(LinearStep):
    def iteration_s_many(self, tokens: np.ndarray, ctx_sum: np.ndarray, pair_sum: np.ndarray,
                         seqs: np.ndarray) -> np.ndarray:
        return 5e-3 + 2e-5 * tokens + 1e-8 * ctx_sum


CASES = (  # (rate per s, chunked, fast_forward, vectorised step)
    (10.0, True, True, False),
    (10.0, True, False, False),
    (10.0, True, True, True),
    (10.0, False, True, False),
    (40.0, True, True, False),
    (40.0, False, True, False),
)


def cost_model_step() -> tuple[Any, LLMPolicy]:
    """Llama-2-7B on the a100-pcie-server preset: the searched policy's step (the cost
    model's layer costs, ``llm.plan.serving_step``) and its server (the most sequences of
    2,048 tokens whose cache keeps every layer on the GPU)."""
    from placewise.cost.load import load_cost_model
    from placewise.hardware.load import load_machine
    from placewise.llm.plan import serving_step
    from placewise.llm.spec import load_spec

    m = load_machine("a100-pcie-server")
    step, pr = serving_step(load_spec("llama-2-7b"), m, load_cost_model(m, None),
                            max_seqs=None, context=2048)
    return step, LLMPolicy(kv_capacity_tokens=pr.batch * 2048, max_seqs=pr.batch)


def _case(reqs: list[LLMRequest], rate: float, chunked: bool, fast: bool, many: bool,
          repeats: int, cost_model: bool = False) -> dict[str, Any]:
    pol = LLMPolicy(kv_capacity_tokens=131072, max_seqs=256,
                    max_batch_tokens=2048 if chunked else 8192, chunked_prefill=chunked)
    step: Any = LinearStepMany() if many else LinearStep()
    if cost_model:
        step, pol = cost_model_step()
    times = []
    r = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        r = simulate_llm(reqs, step, pol, fast_forward=fast)
        times.append(time.perf_counter() - t0)
    assert r is not None and r.conserved()
    med = statistics.median(times)
    s = r.summary()
    return {"requests": len(reqs), "rate_per_s": rate, "chunked_prefill": chunked,
            "step": "cost model (llama-2-7b, a100-pcie-server)" if cost_model else "linear",
            "fast_forward": fast, "iteration_s_many": many, "median_s": med,
            "spread": (max(times) - min(times)) / med, "times_s": times,
            "iterations": r.iterations, "iterations_per_s": r.iterations / med,
            "completed": r.completed, "rejected": r.rejected, "preemptions": r.preemptions,
            "ttft_p50_s": s["ttft"]["p50_s"], "ttft_p99_s": s["ttft"]["p99_s"],
            "tpot_p50_s": s["tpot"]["p50_s"], "output_tokens_per_s": r.output_tokens_per_s,
            "peak_kv_blocks": r.peak_kv_blocks}


def table(rows: list[dict[str, Any]]) -> str:
    out = ["| step | rate /s | prefill | fast | many | median s | spread | iterations | it/s | "
           "preempt | rejected | TTFT p50 ms | TPOT p50 ms | out tok/s |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(
            f"| {r['step']} | {r['rate_per_s']:g} | {'chunked' if r['chunked_prefill'] else 'first'} | "
            f"{'y' if r['fast_forward'] else 'n'} | {'y' if r['iteration_s_many'] else 'n'} | "
            f"{r['median_s']:.2f} | {r['spread']:.0%} | {r['iterations']} | "
            f"{r['iterations_per_s']:.0f} | {r['preemptions']} | {r['rejected']} | "
            f"{r['ttft_p50_s'] * 1e3:.1f} | {r['tpot_p50_s'] * 1e3:.2f} | "
            f"{r['output_tokens_per_s']:.0f} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/llm_serve_speed.json"))
    a = ap.parse_args()
    rows = []
    for rate, chunked, fast, many in CASES:
        reqs = poisson_llm_requests(rate, a.requests, "lognormal:512,1.0", "lognormal:128,1.0",
                                    seed=1)
        rows.append(_case(reqs, rate, chunked, fast, many, a.repeats))
        print(f"rate {rate:g} chunked {chunked} fast {fast} many {many}: "
              f"{rows[-1]['median_s']:.2f} s", file=sys.stderr, flush=True)
    reqs = poisson_llm_requests(8.0, a.requests, "lognormal:512,1.0", "lognormal:128,1.0",
                                seed=1)
    rows.append(_case(reqs, 8.0, True, True, True, a.repeats, cost_model=True))
    print(f"cost-model step: {rows[-1]['median_s']:.2f} s", file=sys.stderr, flush=True)
    result = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
              "machine": platform.processor() or platform.machine(),
              "cpus": os.cpu_count(), "python": platform.python_version(),
              "command": " ".join(sys.argv), "rows": rows}
    print(table(rows))
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(f"wrote {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
