"""LLM serving on this machine, real against simulated, at about 60% of capacity.

    .venv/bin/python benchmarks/llm_serve_real.py [--requests 200] [--repeats 2]

1. The decoder of ``benchmarks/llm_local.py`` (``BENCH_CONFIG``, cached) and its step model
   fitted to four measured cells (batch {1, 8} x context {64, 640}: ``llm.validate``).
2. Capacity: the simulation of 2,000 requests all arriving at once (requests/s served).
3. ``--requests`` Poisson requests at 60% of it (prompts uniform 64-512 tokens, outputs
   uniform 16-128), vLLM-v0 prefill-first iterations of up to 8 sequences, priced padded
   to the longest sequence as the real engine runs them (``LLMPolicy.padded``): simulated, then
   served for real ``--repeats`` times on core 1 (``serve.llm_real``), each run compared
   with the simulation: TTFT, TPOT and end-to-end p50 and p99, and the real iterations'
   time split into terms (``serve.llm_real.iteration_terms``).

Writes ``benchmarks/results/llm_serve_real.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from placewise.cost.load import load_cost_model
from placewise.hardware.probe import load_local
from placewise.llm.validate import validate_local
from placewise.records import to_json
from placewise.serve.llm import LLMPolicy, LLMRequest, poisson_llm_requests, simulate_llm
from placewise.serve.llm_real import iteration_terms, serve_llm_real

sys.path.insert(0, str(Path(__file__).resolve().parent))
from llm_local import bench_decoder

POLICY = LLMPolicy(kv_capacity_tokens=8 * 640, max_seqs=8, max_batch_tokens=4096,
                   chunked_prefill=False, padded=True)
PROMPT, OUTPUT = "uniform:64-512", "uniform:16-128"


def _errors(sim: dict, real: dict) -> dict[str, float]:  # type: ignore[type-arg]
    out = {}
    for key in ("ttft", "tpot", "e2e"):
        for q in ("p50_s", "p99_s"):
            out[f"{key}_{q[:3]}"] = sim[key][q] / real[key][q] - 1.0
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--load", type=float, default=0.6)
    ap.add_argument("--out", default="benchmarks/results/llm_serve_real.json")
    args = ap.parse_args()
    path = bench_decoder()
    machine = load_local()
    os.sched_setaffinity(0, {1})
    check = validate_local(path, machine, load_cost_model(machine, None), device="cpu1",
                           batches=(1, 8), contexts=(64, 640), new_tokens=8, repeats=3,
                           threads=1)
    step = check.step
    burst = [LLMRequest(0.0, r.prompt_tokens, r.output_tokens)
             for r in poisson_llm_requests(1.0, 2000, PROMPT, OUTPUT, seed=7)]
    capacity = simulate_llm(burst, step, POLICY).requests_per_s
    rate = args.load * capacity
    reqs = poisson_llm_requests(rate, args.requests, PROMPT, OUTPUT, seed=1)
    sim = simulate_llm(reqs, step, POLICY).summary(ttft_slo_s=1.0, tpot_slo_s=0.05)
    print(f"step fit {step.coef_s} (rel rms {step.rel_rms:.3f}); capacity {capacity:.2f} "
          f"req/s; rate {rate:.2f} req/s")
    runs = []
    for i in range(args.repeats):
        res, records = serve_llm_real(reqs, path, POLICY, threads=1, seed=1)
        real = res.summary(ttft_slo_s=1.0, tpot_slo_s=0.05)
        terms = iteration_terms(records, step)
        err = _errors(sim, real)
        runs.append({"real": real, "terms_s": terms, "errors": err})
        print(f"run {i}: " + ", ".join(f"{k} {v:+.1%}" for k, v in err.items()))
        print("  terms: " + ", ".join(f"{k} {v:.2f} s" for k, v in terms.items()))
    print("| quantity | simulated | " + " | ".join(f"real {i}" for i in range(len(runs)))
          + " |")
    print("|---|---|" + "---|" * len(runs))
    for key in ("ttft", "tpot", "e2e"):
        for q in ("p50_s", "p99_s"):
            print(f"| {key} {q[:3]} | {sim[key][q] * 1e3:.1f} ms | "
                  + " | ".join(f"{r['real'][key][q] * 1e3:.1f} ms" for r in runs) + " |")
    out = {"date": time.strftime("%Y-%m-%d"), "machine": platform.node(),
           "command": "python benchmarks/llm_serve_real.py " + " ".join(sys.argv[1:]),
           "policy": to_json(POLICY), "step": to_json(step), "capacity_rps": capacity,
           "rate_rps": rate, "simulated": sim, "runs": runs}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
