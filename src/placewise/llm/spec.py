"""A decoder LLM's shape: what its weights and its KV cache take, layer by layer.

``DecoderSpec`` is read from a Hugging Face ``config.json`` (``from_hf_config``; Llama,
Mistral, Qwen2, GPT-2 families), from one of the public configs shipped with placewise
(``load_spec("llama-2-7b")``, weights not needed), or from an ONNX decoder exported with its
past and present key/value tensors (``spec_from_graph``: the cache is the graph's *state*,
``state_pairs``).

>>> s = load_spec("llama-2-7b")
>>> s.layers, s.kv_heads, s.head_dim, round(s.params() / 1e9, 2)
(32, 32, 128, 6.74)
>>> s.kv_bytes_per_token()  # every layer's K and V, fp16: 0.5 MiB per token
524288
>>> load_spec("mistral-7b").kv_bytes_per_token()  # grouped-query: 8 KV heads of 32
131072
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from placewise.errors import InputError
from placewise.graph.ir import Graph, Role
from placewise.io import load_json, parse_json
from placewise.units import DType

__all__ = [
    "DecoderSpec",
    "StatePair",
    "from_hf_config",
    "list_specs",
    "load_spec",
    "resolve_spec",
    "spec_from_graph",
    "state_pairs",
    "step_shapes",
]

_HF_DTYPES = {"float16": DType.FP16, "bfloat16": DType.BF16, "float32": DType.FP32}


@dataclass(frozen=True, slots=True)
class DecoderSpec:
    """The shape of a decoder-only transformer (pre-norm, rotary or learned positions).

    ``weight_bits`` is the storage width of the layer weights (16 for fp16/bf16; 4.5 for a
    llama.cpp ``Q4_0`` file, 4 bits plus one fp16 scale per 32 weights); ``dtype`` is what
    the kernels compute in and what the cache holds.
    """

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    gated_mlp: bool = True  # SwiGLU (gate, up, down) as Llama; False: two matrices as GPT-2
    dtype: DType = DType.FP16
    weight_bits: float = 16.0
    tied_embeddings: bool = False
    max_positions: int = 0  # the context it was trained for (0: unknown)
    source: str = ""

    def __post_init__(self) -> None:
        for f in ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab"):
            if getattr(self, f) < 1:
                raise InputError(f"decoder {self.name}: {f} must be >= 1, got "
                                 f"{getattr(self, f)}")
        if self.heads % self.kv_heads:
            raise InputError(f"decoder {self.name}: {self.heads} heads are not a multiple of "
                             f"{self.kv_heads} KV heads")
        if not 1.0 <= self.weight_bits <= 32.0:
            raise InputError(f"decoder {self.name}: weight_bits {self.weight_bits} outside "
                             "1..32")

    # ---- parameters ----
    def layer_params(self) -> int:
        """Weights of one decoder layer: Q, K, V, O projections, the MLP, two norms."""
        q = self.heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        attn = self.hidden * (q + 2 * kv) + q * self.hidden
        mlp = (3 if self.gated_mlp else 2) * self.hidden * self.ffn
        return attn + mlp + 2 * self.hidden

    def embed_params(self) -> int:
        return self.vocab * self.hidden

    def head_params(self) -> int:
        """The final norm and the LM head (shared with the embedding when tied)."""
        return self.hidden + (0 if self.tied_embeddings else self.vocab * self.hidden)

    def params(self) -> int:
        return self.layers * self.layer_params() + self.embed_params() + self.head_params()

    # ---- bytes ----
    def layer_weight_bytes(self) -> int:
        return math.ceil(self.layer_params() * self.weight_bits / 8)

    def outer_weight_bytes(self) -> int:
        """Embedding, final norm and LM head (kept where the first and last layer run)."""
        return math.ceil((self.embed_params() + self.head_params()) * self.weight_bits / 8)

    def weight_bytes(self) -> int:
        return self.layers * self.layer_weight_bytes() + self.outer_weight_bytes()

    def kv_bytes_per_token_layer(self) -> int:
        """K and V of one token in one layer."""
        return self.dtype.nbytes(2 * self.kv_heads * self.head_dim)

    def kv_bytes_per_token(self) -> int:
        return self.layers * self.kv_bytes_per_token_layer()

    def with_(self, **changes: Any) -> DecoderSpec:
        return replace(self, **changes)


def _req(cfg: Mapping[str, Any], keys: tuple[str, ...], file: str, default: Any = None) -> Any:
    for k in keys:
        if k in cfg and cfg[k] is not None:
            v = cfg[k]
            if isinstance(v, bool) or not isinstance(v, int | float | str):
                raise InputError(f"{file}: {k}: expected a number, got {v!r}")
            return v
    if default is not None:
        return default
    raise InputError(f"{file}: missing {' or '.join(keys)}")


def _int(cfg: Mapping[str, Any], keys: tuple[str, ...], file: str, default: Any = None) -> int:
    v = _req(cfg, keys, file, default)
    if not isinstance(v, int) or isinstance(v, bool):
        raise InputError(f"{file}: {keys[0]}: expected an integer, got {v!r}")
    return v


def from_hf_config(cfg: Mapping[str, Any], *, name: str = "", file: str = "<config>"
                   ) -> DecoderSpec:
    """A ``DecoderSpec`` from a Hugging Face ``config.json`` (as a mapping).

    >>> from_hf_config({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4,
    ...                 "vocab_size": 100}).ffn
    256
    """
    if not isinstance(cfg, Mapping):
        raise InputError(f"{file}: a config is a JSON object")
    family = str(cfg.get("model_type", "llama"))
    gpt2 = family == "gpt2"
    hidden = _int(cfg, ("hidden_size", "n_embd", "d_model"), file)
    heads = _int(cfg, ("num_attention_heads", "n_head"), file)
    dtype_name = str(cfg.get("torch_dtype") or cfg.get("dtype") or "float16")
    dtype = _HF_DTYPES.get(dtype_name, DType.FP16)
    ffn_default = 4 * hidden if gpt2 else None
    return DecoderSpec(
        name=name or str(cfg.get("_name_or_path") or family),
        layers=_int(cfg, ("num_hidden_layers", "n_layer"), file),
        hidden=hidden, heads=heads,
        kv_heads=_int(cfg, ("num_key_value_heads",), file, heads),
        head_dim=_int(cfg, ("head_dim",), file, max(1, hidden // max(1, heads))),
        ffn=_int(cfg, ("intermediate_size", "n_inner"), file, ffn_default),
        vocab=_int(cfg, ("vocab_size",), file),
        gated_mlp=not gpt2, dtype=dtype, weight_bits=float(dtype.bits),
        tied_embeddings=bool(cfg.get("tie_word_embeddings", gpt2)),
        max_positions=_int(cfg, ("max_position_embeddings", "n_positions"), file, 0),
        source=str(cfg.get("_source", file)))


def list_specs() -> list[str]:
    """Names of the public decoder configs shipped with placewise."""
    folder = resources.files("placewise.llm") / "models"
    return sorted(p.name.removesuffix(".json") for p in folder.iterdir()
                  if p.name.endswith(".json"))


def load_spec(ref: str) -> DecoderSpec:
    """A shipped config by name (``llama-2-7b``), or a ``config.json`` path; a ``@q4``
    suffix stores the weights at llama.cpp ``Q4_0``'s 4.5 bits (``llama-2-7b@q4``)."""
    base, _, quant = ref.partition("@")
    if base in list_specs():
        file, name = f"placewise/llm/models/{base}.json", base
        cfg = parse_json((resources.files("placewise.llm") / "models" / f"{base}.json")
                         .read_text(), file=file)
    else:
        path = Path(base)
        if not path.exists():
            raise InputError(f"{base}: not a shipped decoder config ({', '.join(list_specs())})"
                             " nor a config.json file")
        file, name = str(path), path.parent.name
        cfg = load_json(path, what="decoder config")
    spec = from_hf_config(cfg, name=name, file=file)
    if quant:
        bits = {"q4": 4.5, "q8": 8.5, "fp16": 16.0}.get(quant)
        if bits is None:
            raise InputError(f"{ref}: unknown weight format {quant!r} (q4, q8, fp16)")
        spec = spec.with_(name=f"{name}@{quant}", weight_bits=bits)
    return spec


# ---- ONNX decoders: the cache as state ------------------------------------------------------

@dataclass(frozen=True, slots=True)
class StatePair:
    """One cache tensor: the graph input that brings it (``past``) and the output that
    returns it grown by the step's tokens (``present``), of layer ``layer``."""

    layer: int
    which: str  # "key" or "value"
    past: str
    present: str


_PAST = re.compile(r"^past_key_values[._](\d+)[._](key|value)$")
_PRESENT = re.compile(r"^present[._](\d+)[._](key|value)$")


def state_pairs(graph: Graph) -> list[StatePair]:
    """The KV-cache tensors of a decoder exported as Hugging Face exporters write it
    (inputs ``past_key_values.N.key|value``, outputs ``present.N.key|value``), by layer.
    Empty for a graph that has no cache."""
    pres = {(int(m[1]), m[2]): o for o in graph.outputs if (m := _PRESENT.match(o))}
    out = []
    for i in graph.inputs:
        m = _PAST.match(i)
        if m and (int(m[1]), m[2]) in pres:
            out.append(StatePair(int(m[1]), m[2], i, pres[(int(m[1]), m[2])]))
    return sorted(out, key=lambda p: (p.layer, p.which))


def step_shapes(graph: Graph, batch: int, new: int, past: int) -> dict[str, list[int]]:
    """The input shapes of one step of the decoder ``graph`` (optimum's names): ``batch``
    sequences bringing ``new`` tokens over ``past`` cached ones."""
    shapes = {"input_ids": [batch, new], "attention_mask": [batch, past + new],
              "position_ids": [batch, new]}
    for p in state_pairs(graph):
        t = graph.tensor(p.past)
        shapes[p.past] = [batch, int(t.shape[1]), past, int(t.shape[3])]
    return {k: v for k, v in shapes.items() if k in graph.inputs}


def spec_from_graph(graph: Graph, *, file: str = "") -> DecoderSpec:
    """A decoder's shape from its ONNX graph: layers, KV heads and head dim from the cache
    tensors ``[batch, kv_heads, past, head_dim]``; hidden and vocab from the LM head (the
    largest 2-D weight); the MLP width from the other weights of the first layer."""
    where = file or graph.name
    pairs = state_pairs(graph)
    if not pairs:
        raise InputError(f"{where}: not a decoder with a KV cache (no past_key_values.N.key "
                         "inputs with matching present.N.key outputs)")
    past = graph.tensor(pairs[0].past)
    if len(past.shape) != 4 or not all(isinstance(d, int) for d in past.shape[1::2]):
        raise InputError(f"{where}: {past.name}: expected [batch, kv_heads, past, head_dim] "
                         f"with concrete heads and head dim, got {list(past.shape)}")
    kv_heads, head_dim = int(past.shape[1]), int(past.shape[3])
    mats = [t for t in graph.tensors if t.role is Role.PARAM and len(t.shape) == 2
            and all(isinstance(d, int) for d in t.shape)]
    if not mats:
        raise InputError(f"{where}: no 2-D weights to read the widths from")
    head = max(mats, key=lambda t: int(t.shape[0]) * int(t.shape[1]))
    vocab, hidden = sorted((int(head.shape[0]), int(head.shape[1])), reverse=True)
    dims = sorted({int(d) for t in mats for d in t.shape} - {hidden, vocab,
                                                             kv_heads * head_dim})
    ffn = dims[-1] if dims else 4 * hidden
    layers = 1 + max(p.layer for p in pairs)
    per_layer = sum(1 for t in mats if ffn in t.shape) / layers
    return DecoderSpec(name=graph.name, layers=layers, hidden=hidden,
                       heads=max(1, hidden // head_dim), kv_heads=kv_heads,
                       head_dim=head_dim, ffn=ffn, vocab=vocab, gated_mlp=per_layer >= 3,
                       dtype=past.dtype, weight_bits=float(past.dtype.bits), source=where)


def resolve_spec(ref: str) -> DecoderSpec:
    """A decoder named on the command line: a shipped config (``llama-2-7b``, ``@q4``
    allowed), a ``config.json``, or an ``.onnx`` decoder with its past/present cache."""
    if ref.lower().endswith(".onnx"):
        from placewise.graph.load import load_model  # the ONNX reader: onnx loads with it

        return spec_from_graph(load_model(ref), file=ref)
    return load_spec(ref)
