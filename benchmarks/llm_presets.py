"""Decoders on the machine presets: which layers and how much cache each keeps on its
accelerator, predicted decode tokens/s, the llama.cpp "layers that fit" baseline, and the
predictions set against published measurements.

    .venv/bin/python benchmarks/llm_presets.py [--out benchmarks/results/llm_presets.json]

The predictions are placewise's roofline (datasheet peaks, the preset's fitted GEMM
efficiency): no measurement of these machines enters them. Published figures used:

- llama.cpp pull request #6017 (ggerganov, "llama : add pipeline parallelism support",
  https://github.com/ggml-org/llama.cpp/pull/6017), one NVIDIA A100 80GB PCIe, llama 7B F16,
  llama-bench: tg128 74.77 t/s, pp512 8668 t/s;
- AWQ (Lin et al., MLSys 2024, arXiv:2306.00978), TinyChat figure, Jetson Orin 64 GB,
  4-bit llama.cpp: Llama-2-7B 15.9 tok/s, Llama-2-13B 9.1 tok/s (batch 1 decode).

tg128 generates 128 tokens after an empty prompt: placewise prices it at the mean context
of 64 tokens. pp512 is a 512-token prefill: 512 / prefill seconds.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from placewise.cost.load import load_cost_model
from placewise.hardware.load import load_machine
from placewise.llm.cost import pairs
from placewise.llm.offload import OffloadStep, fit_steps, memories
from placewise.llm.plan import plan_llm
from placewise.llm.spec import load_spec
from placewise.records import to_json

PRESETS = ("h100-sxm-server", "a100-pcie-server", "grace-hopper-gh200", "jetson-agx-orin",
           "laptop-soc")
MODELS = ("llama-2-7b", "llama-2-13b", "mistral-7b", "llama-3-8b", "llama-2-7b@q4",
          "llama-2-13b@q4")
CONTEXTS = (4096, 32768)
BATCHES = (1, 16)

#: (preset, model, what, published value, source)
PUBLISHED = (
    ("a100-pcie-server", "llama-2-7b", "tg128 t/s", 74.77, "llama.cpp PR #6017"),
    ("a100-pcie-server", "llama-2-7b", "pp512 t/s", 8668.0, "llama.cpp PR #6017"),
    ("jetson-agx-orin", "llama-2-7b@q4", "tg t/s (batch 1)", 15.9, "AWQ, TinyChat figure"),
    ("jetson-agx-orin", "llama-2-13b@q4", "tg t/s (batch 1)", 9.1, "AWQ, TinyChat figure"),
)


def _resident_step(model: str, hw: str) -> OffloadStep:
    spec, m = load_spec(model), load_machine(hw)
    cm = load_cost_model(m, None)
    mem = memories(m)
    return OffloadStep(spec, mem, *fit_steps(spec, cm, mem), (spec.layers, 0, 0, 0, 0, 0))


def published_rows() -> list[dict[str, object]]:
    rows = []
    for hw, model, what, value, source in PUBLISHED:
        step = _resident_step(model, hw)
        if what.startswith("pp512"):
            pred = 512 / step.iteration_s(512, 512, pairs(512, 0), 1)
        else:
            ctx = 64 if what.startswith("tg128") else 128
            pred = 1 / step.iteration_s(1, ctx, pairs(1, ctx - 1), 1)
        rows.append({"preset": hw, "model": model, "what": what, "published": value,
                     "predicted": pred, "ratio": pred / value, "source": source})
    return rows


def preset_rows() -> list[dict[str, object]]:
    rows = []
    for hw in PRESETS:
        m = load_machine(hw)
        cm = load_cost_model(m, None)
        for model in MODELS:
            t0 = time.perf_counter()
            p = plan_llm(load_spec(model), m, cm, batches=BATCHES, contexts=CONTEXTS)
            for c in p.cells:
                s, lc = c.searched, c.llamacpp
                fast = dict(s.bytes_by_pool).get(p.pools[0][0], 0) if s else 0
                rows.append({
                    "preset": hw, "model": model, "batch": c.batch, "context": c.context,
                    "searched": s.classes() if s else None,
                    "searched_tok_s": s.tokens_per_s if s else None,
                    "llamacpp": lc.classes() if lc else None,
                    "llamacpp_tok_s": lc.tokens_per_s if lc else None,
                    "fast_bytes": fast, "fast_pool": p.pools[0][0],
                    "note": c.note, "plan_s": time.perf_counter() - t0})
    return rows


def _classes(c: dict[str, int] | None) -> str:
    if c is None:
        return "no fit"
    short = {"resident": "res", "weights_slow": "w-slow", "cache_slow": "kv-slow",
             "both_slow": "both", "host": "host", "host_attention": "host-attn"}
    return " ".join(f"{short[k]} {v}" for k, v in c.items() if v)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default="benchmarks/results/llm_presets.json")
    args = ap.parse_args()
    pub, rows = published_rows(), preset_rows()
    print("| preset | model | what | published | predicted | ratio | source |")
    print("|---|---|---|---|---|---|---|")
    for r in pub:
        print(f"| {r['preset']} | {r['model']} | {r['what']} | {r['published']:.1f} | "
              f"{r['predicted']:.1f} | {r['ratio']:.2f} | {r['source']} |")
    print()
    print("| preset | model | batch | context | searched | tok/s | llama.cpp | tok/s | "
          "gain |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        s, lc = r["searched_tok_s"], r["llamacpp_tok_s"]
        gain = f"{s / lc:.2f}x" if s and lc else "-"  # type: ignore[operator]
        print(f"| {r['preset']} | {r['model']} | {r['batch']} | {r['context']} | "
              f"{_classes(r['searched'])} | {(s and f'{s:.1f}') or '-'} | "  # type: ignore[str-format]
              f"{_classes(r['llamacpp'])} | {(lc and f'{lc:.1f}') or '-'} | {gain} |")
    out = {"date": time.strftime("%Y-%m-%d"), "machine": platform.node(),
           "command": "python benchmarks/llm_presets.py", "published": pub, "presets": rows}
    Path(args.out).write_text(json.dumps(to_json(out), indent=1) + "\n")


if __name__ == "__main__":
    main()
