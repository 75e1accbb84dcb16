"""Real transformer models for tests and benchmarks (not a test module).

Each model is a ``transformers`` architecture built from a small config with seeded random
weights (no hub), in eval mode, wrapped so that it takes positional tensors and returns its
last hidden state. ``export(name, fmt, folder)`` writes it once per folder as

- ``ts``: ONNX from ``torch.onnx.export`` with the TorchScript exporter (opset 17),
- ``dynamo``: ONNX from the dynamo exporter (opset 18),
- ``pt2``: ``torch.export.save`` of ``torch.export.export``,

at the fixed example shapes below. ``MODELS`` lists the names:

- ``bert``: a BERT encoder with an attention mask (sdpa attention);
- ``gpt2``: a GPT-2 decoder with its causal mask and an attention mask;
- ``vit``: a ViT image encoder (patch convolution, no pooler);
- ``t5``: a T5 encoder-decoder (relative position buckets, RMS norm, eager attention:
  the dynamo exporter of torch 2.13 fails on T5's sdpa path with a view of a
  non-contiguous tensor while decomposing).

``transformers`` is a test extra; importing this module without it raises ImportError.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from placewise.io import quiet

MODELS = ("bert", "gpt2", "vit", "t5")
FORMATS = ("ts", "dynamo", "pt2")
SEED = 0


class _LastHidden(torch.nn.Module):
    def __init__(self, model: torch.nn.Module, names: tuple[str, ...]) -> None:
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        out = self.model(**dict(zip(self.names, args, strict=True)))
        return out.last_hidden_state


def _bert() -> tuple[torch.nn.Module, tuple[str, ...]]:
    from transformers import BertConfig, BertModel

    c = BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                   intermediate_size=64, max_position_embeddings=64)
    return BertModel(c, add_pooling_layer=False), ("input_ids", "attention_mask")


def _gpt2() -> tuple[torch.nn.Module, tuple[str, ...]]:
    from transformers import GPT2Config, GPT2Model

    c = GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=2, n_positions=64,
                   use_cache=False, bos_token_id=0, eos_token_id=0)
    return GPT2Model(c), ("input_ids", "attention_mask")


def _vit() -> tuple[torch.nn.Module, tuple[str, ...]]:
    from transformers import ViTConfig, ViTModel

    c = ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=32,
                  num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    return ViTModel(c, add_pooling_layer=False), ("pixel_values",)


def _t5() -> tuple[torch.nn.Module, tuple[str, ...]]:
    from transformers import T5Config, T5Model

    c = T5Config(vocab_size=128, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2,
                 use_cache=False)
    c._attn_implementation = "eager"
    return T5Model(c), ("input_ids", "decoder_input_ids")


_BUILDERS: dict[str, Callable[[], tuple[torch.nn.Module, tuple[str, ...]]]] = {
    "bert": _bert, "gpt2": _gpt2, "vit": _vit, "t5": _t5}


def example_inputs(name: str) -> dict[str, torch.Tensor]:
    """The example inputs (seeded) the model is exported at, by input name."""
    g = torch.Generator().manual_seed(SEED + 1)
    if name == "vit":
        return {"pixel_values": torch.randn(2, 3, 32, 32, generator=g)}
    if name == "t5":
        return {"input_ids": torch.randint(0, 128, (2, 16), generator=g),
                "decoder_input_ids": torch.randint(0, 128, (2, 8), generator=g)}
    mask = torch.ones(4, 16, dtype=torch.long)
    mask[1, 12:] = 0  # one padded row: the mask is used, not constant
    return {"input_ids": torch.randint(0, 128, (4, 16), generator=g), "attention_mask": mask}


def build(name: str) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """The wrapped model (seeded weights, eval mode) and its example inputs."""
    if name not in _BUILDERS:
        raise KeyError(f"unknown real model {name!r}; one of {', '.join(MODELS)}")
    torch.manual_seed(SEED)
    model, names = _BUILDERS[name]()
    return _LastHidden(model.eval(), names).eval(), example_inputs(name)


def _quiet() -> Any:
    return quiet("torch.onnx", "torch.export", "onnxscript", "transformers")


def export(name: str, fmt: str, folder: str | os.PathLike[str]) -> Path:
    """Write model ``name`` in format ``fmt`` (``ts``, ``dynamo`` or ``pt2``) into
    ``folder`` (once: an existing file is reused) and return its path."""
    if fmt not in FORMATS:
        raise KeyError(f"unknown export format {fmt!r}; one of {', '.join(FORMATS)}")
    path = Path(folder) / (f"{name}.pt2" if fmt == "pt2" else f"{name}-{fmt}.onnx")
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    model, inputs = build(name)
    args: tuple[Any, ...] = tuple(inputs.values())
    with _quiet(), torch.no_grad():
        if fmt == "pt2":
            torch.export.save(torch.export.export(model, args), str(path))
        else:
            torch.onnx.export(model, args, str(path), input_names=list(inputs),
                              output_names=["last_hidden_state"],
                              opset_version=17 if fmt == "ts" else 18,
                              dynamo=fmt == "dynamo", external_data=False)
    return path


def export_all(folder: str | os.PathLike[str]) -> dict[tuple[str, str], Path]:
    """Every (model, format) of the set, written into ``folder``."""
    return {(m, f): export(m, f, folder) for m in MODELS for f in FORMATS}
