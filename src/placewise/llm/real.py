"""A real decoder run step by step in onnxruntime with its KV cache kept bound.

``build_decoder`` makes a ``transformers`` Llama decoder (grouped-query attention, RoPE,
RMS norm, SwiGLU) from a config dict with seeded random weights; ``export_decoder`` writes
it as *one* ONNX file that serves both prefill and decode, with the input and output names
Hugging Face optimum gives a decoder with past:

- inputs ``input_ids`` [batch, sequence_length] int64, ``attention_mask``
  [batch, past_sequence_length + sequence_length] int64, ``position_ids``
  [batch, sequence_length] int64, and per layer ``past_key_values.{i}.key`` /
  ``past_key_values.{i}.value`` [batch, kv_heads, past_sequence_length, head_dim] float;
- outputs ``logits`` [batch, sequence_length, vocab] and per layer ``present.{i}.key`` /
  ``present.{i}.value`` [batch, kv_heads, past_sequence_length + sequence_length, head_dim].

``batch``, ``sequence_length`` and ``past_sequence_length`` are symbolic in the file.
Prefill feeds a past of length 0 (onnxruntime accepts zero-length dims: the past is
concatenated with the new keys and values, and a ``Concat`` with an empty operand is
exact), so no separate "no past" graph is needed.

``DecodeSession`` runs the file on onnxruntime's CPU provider through IO binding: the
present outputs of one call stay ``OrtValue`` objects allocated by onnxruntime and are bound
as the past inputs of the next; only the logits come back to the host. It times every call.
``measure_decode`` times prefill and each decode step over repeats, so that decode latency
can be read as a function of context length.

>>> input_names(1)
('input_ids', 'attention_mask', 'position_ids', 'past_key_values.0.key', 'past_key_values.0.value')
>>> output_names(1)
('logits', 'present.0.key', 'present.0.value')

``transformers`` (a test extra) and ``torch`` are imported inside the functions that need
them: ``DecodeSession`` and ``measure_decode`` run an exported file with onnxruntime alone.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from placewise.errors import InputError, ModelFormatError, UnsupportedError
from placewise.graph.onnx_import import MAX_ONNX_BYTES
from placewise.io import atomic_writer, check_output_path, quiet, read_file_bytes

__all__ = [
    "BENCH_CONFIG",
    "DIMS",
    "SMALL_CONFIG",
    "DecodeSession",
    "DecodeTiming",
    "build_decoder",
    "export_decoder",
    "input_names",
    "measure_decode",
    "output_names",
]

#: a small Llama (grouped-query: 4 query heads share 2 KV heads) for tests
SMALL_CONFIG: Mapping[str, Any] = MappingProxyType({
    "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256,
    "max_position_embeddings": 4096})

#: a larger one for benchmarks (about 17 M parameters, 67 MB of fp32 weights)
BENCH_CONFIG: Mapping[str, Any] = MappingProxyType({
    "hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
    "num_key_value_heads": 4, "intermediate_size": 1536, "vocab_size": 4096,
    "max_position_embeddings": 4096})

#: the symbolic dims of the exported file
DIMS = ("batch", "sequence_length", "past_sequence_length")
_TOTAL = "past_sequence_length + sequence_length"

#: config keys that are sizes (positive integers)
_SIZES = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
          "intermediate_size", "vocab_size", "max_position_embeddings", "head_dim")

_FLOATS = {"tensor(float)": np.float32, "tensor(float16)": np.float16}


def input_names(layers: int) -> tuple[str, ...]:
    """The decoder's input names (optimum's), in the order the file declares them."""
    past = [f"past_key_values.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    return ("input_ids", "attention_mask", "position_ids", *past)


def output_names(layers: int) -> tuple[str, ...]:
    """The decoder's output names (optimum's): the logits, then each layer's presents."""
    return ("logits", *(f"present.{i}.{kv}" for i in range(layers) for kv in ("key", "value")))


# --- building and exporting (torch, transformers) ---------------------------------------


def _llama_config(config: Mapping[str, Any]) -> Any:
    """A ``LlamaConfig`` from ``config``; an unknown key or a size that is not a positive
    integer is an ``InputError`` naming it."""
    from transformers import LlamaConfig

    if not isinstance(config, Mapping):
        raise InputError(f"a decoder config is a mapping of LlamaConfig fields, not "
                         f"{type(config).__name__}", place="config")
    known = set(LlamaConfig().to_dict()) | {"head_dim"}
    for key, value in config.items():
        if key not in known:
            raise InputError(f"not a LlamaConfig field (one of {', '.join(_SIZES)}, ...)",
                             place=f"config.{key}")
        if key in _SIZES and (isinstance(value, bool) or not isinstance(value, int)
                              or value < 1):
            raise InputError(f"must be a positive integer, not {value!r}",
                             place=f"config.{key}")
    c = LlamaConfig(**dict(config))
    heads = int(c.num_attention_heads)
    kv_heads = int(c.num_key_value_heads or heads)
    if heads % kv_heads:
        raise InputError(f"{heads} attention heads do not split into {kv_heads} KV-head "
                         f"groups",
                         place="config.num_key_value_heads")
    return c


def build_decoder(config: Mapping[str, Any], seed: int = 0) -> Any:
    """A ``LlamaForCausalLM`` built from ``config`` (``LlamaConfig`` fields, e.g.
    ``SMALL_CONFIG``) with weights drawn from ``seed``: fp32, eval mode. The global torch
    random state is left as it was."""
    import torch
    from transformers import LlamaForCausalLM

    c = _llama_config(config)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(c)
    return model.float().eval()


def _flat_decoder(model: Any) -> Any:
    """``model`` behind a forward over flat tensors (ids, mask, positions, then each layer's
    past key and value) that returns flat tensors (logits, then each layer's presents):
    the exporter sees no ``Cache`` object, the wrapper builds the ``DynamicCache``."""
    import torch
    from transformers import DynamicCache

    layers = int(model.config.num_hidden_layers)

    class FlatDecoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    position_ids: torch.Tensor, *past: torch.Tensor) -> tuple[torch.Tensor, ...]:
            cache = DynamicCache([(past[2 * i], past[2 * i + 1]) for i in range(layers)],
                                 config=self.model.config)
            out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                             position_ids=position_ids, cache=cache, use_cache=True)
            presents = [t for layer in out.cache.layers for t in (layer.keys, layer.values)]
            return (out.logits, *presents)

    return FlatDecoder().eval()


def _example(config: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """Example inputs to trace at and their dynamic shapes. Every dynamic dim is at least 2
    in the example (torch.export specialises 0 and 1); the file still runs at 0 and 1."""
    import torch
    from torch.export import Dim

    batch, seq, past = 2, 3, 5
    kv_heads = int(config.num_key_value_heads)
    head_dim = int(getattr(config, "head_dim", None)
                   or config.hidden_size // config.num_attention_heads)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, int(config.vocab_size), (batch, seq), generator=g)
    mask = torch.ones(batch, past + seq, dtype=torch.long)
    pos = torch.arange(past, past + seq).expand(batch, seq).contiguous()
    kv = tuple(torch.randn(batch, kv_heads, past, head_dim, generator=g)
               for _ in range(2 * int(config.num_hidden_layers)))
    b, s, p = (Dim(n) for n in DIMS)
    # the mask's length is past + new; torch.export takes no sum of two Dims, so it is its
    # own dynamic dim here and gets its name after export (_name_dims)
    shapes = ({0: b, 1: s}, {0: b, 1: Dim.DYNAMIC}, {0: b, 1: s},
              tuple({0: b, 2: p} for _ in kv))
    return (ids, mask, pos, *kv), shapes


def _name_dims(proto: Any, file: str) -> None:
    """Name the mask's length ``past_sequence_length + sequence_length`` and check every
    input and output has the symbolic dims the module docstring lists."""
    layers = sum(1 for v in proto.graph.input if v.name.endswith(".key"))
    want: dict[str, list[str | None]] = {
            "input_ids": ["batch", "sequence_length"],
            "attention_mask": ["batch", _TOTAL],
            "position_ids": ["batch", "sequence_length"],
            "logits": ["batch", "sequence_length", None]}
    for name in input_names(layers)[3:]:
        want[name] = ["batch", None, "past_sequence_length", None]
    for name in output_names(layers)[1:]:
        want[name] = ["batch", None, _TOTAL, None]
    values = {v.name: v for v in (*proto.graph.input, *proto.graph.output)}
    mask = values.get("attention_mask")
    if mask is not None and len(mask.type.tensor_type.shape.dim) == 2:
        mask.type.tensor_type.shape.dim[1].dim_param = _TOTAL
    for name, dims in want.items():
        if name not in values:
            raise UnsupportedError(f"{file}: the exporter wrote no {name!r}")
        got = [d.dim_param or None for d in values[name].type.tensor_type.shape.dim]
        if len(got) != len(dims) or any(w and g != w for w, g in zip(dims, got, strict=False)):
            raise UnsupportedError(f"{file}: {name!r} has dims {got}, expected {dims} "
                                   f"(None: any)")


def export_decoder(config: Mapping[str, Any], path: str | os.PathLike[str], *,
                   seed: int = 0) -> Path:
    """Write the decoder of ``config`` (weights from ``seed``) as one ONNX file at ``path``
    (opset 18, weights inline, written atomically) and return its path.

    The dynamo exporter traces the model behind a flat-tensor wrapper at a past of 5
    tokens; the file serves prefill (a past of length 0) and decode (one new token).
    """
    import torch

    check_output_path(path)  # before the minutes of work, not after
    model = build_decoder(config, seed)
    module = _flat_decoder(model)
    args, shapes = _example(model.config)
    layers = int(model.config.num_hidden_layers)
    file = os.fspath(path)

    def write(tmp: Path) -> None:
        with torch.no_grad(), quiet("torch.onnx", "torch.export", "onnxscript",
                                    "transformers"):
            prog = torch.onnx.export(module, args, dynamo=True, dynamic_shapes=shapes,
                                     input_names=list(input_names(layers)),
                                     output_names=list(output_names(layers)),
                                     opset_version=18, external_data=False, optimize=True)
        if prog is None:  # pragma: no cover - only the TorchScript exporter returns None
            raise UnsupportedError(f"{file}: torch.onnx.export returned no program")
        proto = prog.model_proto
        _name_dims(proto, file)
        tmp.write_bytes(proto.SerializeToString())

    return atomic_writer(path, write)


# --- running (onnxruntime) ----------------------------------------------------------------


def _positive(name: str, value: object, *, zero: bool = False) -> int:
    low = 0 if zero else 1
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        kind = "a non-negative" if zero else "a positive"
        raise InputError(f"must be {kind} integer, not {value!r}", place=name)
    return int(value)


@dataclass(frozen=True, slots=True)
class _Layout:
    """What a decoder file's past inputs and logits say about the model."""

    layers: int
    kv_heads: int
    head_dim: int
    vocab: int
    dtype: Any


def _layout(session: Any, file: str) -> _Layout:
    inputs = {i.name: i for i in session.get_inputs()}
    outputs = {o.name: o for o in session.get_outputs()}
    layers = sum(1 for n in inputs if n.startswith("past_key_values.") and n.endswith(".key"))
    if layers == 0:
        raise ModelFormatError("not a decoder with past: no 'past_key_values.0.key' input",
                               file=file, place="inputs")
    for names, have, where in ((input_names(layers), inputs, "inputs"),
                               (output_names(layers), outputs, "outputs")):
        missing = [n for n in names if n not in have]
        extra = [n for n in have if n not in names]
        if missing or extra:
            raise ModelFormatError(f"not a decoder with past of {layers} layers: "
                                   f"missing {missing}, unexpected {extra}",
                                   file=file, place=where)
    past = inputs["past_key_values.0.key"]
    shape, vocab = past.shape, outputs["logits"].shape
    if (len(shape) != 4 or not isinstance(shape[1], int) or not isinstance(shape[3], int)
            or len(vocab) != 3 or not isinstance(vocab[2], int)):
        raise ModelFormatError(f"past {shape} and logits {vocab} need static KV heads, "
                               f"head size and vocabulary", file=file,
                               place="past_key_values.0.key")
    if past.type not in _FLOATS:
        raise ModelFormatError(f"past of type {past.type}; float or float16 expected",
                               file=file, place="past_key_values.0.key")
    return _Layout(layers, shape[1], shape[3], vocab[2], _FLOATS[past.type])


class DecodeSession:
    """One exported decoder file in onnxruntime (CPU), run prefill then step by step.

    The cache lives in ``OrtValue`` objects that onnxruntime allocated for the previous
    call's ``present.*`` outputs; each call binds them as its ``past_key_values.*`` inputs
    (``bind_ortvalue_input``) and lets onnxruntime allocate the new presents
    (``bind_output``). Nothing of the cache is copied to numpy. ``prefill_s`` is the
    seconds of the last prefill's run, ``step_s`` each decode step's since then
    (``time.perf_counter`` around ``run_with_iobinding``).
    """

    def __init__(self, path: str | os.PathLike[str], *, threads: int | None = None) -> None:
        from placewise.onnxrt import new_session, session_options

        file = os.fspath(path)
        data = read_file_bytes(file, what="ONNX decoder", limit_bytes=MAX_ONNX_BYTES)
        opts = session_options()
        if threads is not None:
            opts.intra_op_num_threads = _positive("threads", threads)
            opts.inter_op_num_threads = 1
        try:
            self.session = new_session(data, opts)
        except Exception as exc:
            raise ModelFormatError(f"onnxruntime cannot load it: {exc}", file=file) from None
        self.file = file
        self.layout = _layout(self.session, file)
        self._past = input_names(self.layout.layers)[3:]
        self._outputs = output_names(self.layout.layers)
        self._cache: tuple[Any, ...] = ()
        self._batch = 0
        self._past_tokens = 0
        self.prefill_s: float | None = None
        self._step_s: list[float] = []
        self._last_s = 0.0

    @property
    def cache(self) -> tuple[Any, ...]:
        """The ``OrtValue`` presents of the last call (key, value per layer); () before."""
        return self._cache

    @property
    def past_tokens(self) -> int:
        """Tokens in the cache (the next step's past length)."""
        return self._past_tokens

    @property
    def step_s(self) -> tuple[float, ...]:
        """Seconds of each decode step since the last prefill."""
        return tuple(self._step_s)

    def _ids(self, ids: Any, place: str) -> np.ndarray:
        a = np.asarray(ids)
        if a.ndim != 2 or a.shape[0] < 1 or a.shape[1] < 1 or a.dtype.kind not in "iu":
            raise InputError(f"must be a 2-D integer array [batch, tokens], not "
                             f"{a.dtype} {list(a.shape)}", file=self.file, place=place)
        if a.min() < 0 or a.max() >= self.layout.vocab:
            raise InputError(f"token ids must lie in [0, {self.layout.vocab})",
                             file=self.file, place=place)
        return np.ascontiguousarray(a, dtype=np.int64)

    def empty_cache(self, batch: int) -> list[Any]:
        """A cache of no tokens for ``batch`` sequences, as the past inputs take it."""
        import onnxruntime as ort

        lay = self.layout
        empty = np.zeros((batch, lay.kv_heads, 0, lay.head_dim), dtype=lay.dtype)
        return [ort.OrtValue.ortvalue_from_numpy(empty) for _ in self._past]

    def run_bound(self, ids: np.ndarray, mask: np.ndarray, pos: np.ndarray,
                  past: Sequence[Any], clock: Callable[[], float] = time.perf_counter
                  ) -> tuple[list[Any], float]:
        """One call of the file with the cache ``past`` (onnxruntime values) bound as its
        past inputs and every output left where onnxruntime put it: (the outputs as
        onnxruntime values, logits first, then the presents; seconds of the call by
        ``clock``). The one way the decoder runs (``serve.llm_real`` batches with it)."""
        binding = self.session.io_binding()
        binding.bind_cpu_input("input_ids", ids)
        binding.bind_cpu_input("attention_mask", mask)
        binding.bind_cpu_input("position_ids", pos)
        for name, value in zip(self._past, past, strict=True):
            binding.bind_ortvalue_input(name, value)
        for name in self._outputs:
            binding.bind_output(name, "cpu")
        start = clock()
        self.session.run_with_iobinding(binding)
        elapsed = clock() - start
        return binding.get_outputs(), elapsed

    def _run(self, ids: np.ndarray, past: Sequence[Any]) -> np.ndarray:
        batch, new = ids.shape
        total = self._past_tokens + new
        mask = np.ones((batch, total), dtype=np.int64)
        pos = np.ascontiguousarray(np.broadcast_to(
            np.arange(self._past_tokens, total, dtype=np.int64), (batch, new)))
        values, elapsed = self.run_bound(ids, mask, pos, past)
        self._cache = tuple(values[1:])
        self._past_tokens = total
        self._last_s = elapsed
        logits: np.ndarray = values[0].numpy()
        return logits

    def prefill(self, input_ids: Any) -> np.ndarray:
        """Run the prompt ``input_ids`` [batch, tokens] over an empty cache; return the
        logits [batch, tokens, vocab] and keep the presents bound for ``step``."""
        ids = self._ids(input_ids, "input_ids")
        self._cache, self._past_tokens, self._step_s = (), 0, []
        logits = self._run(ids, self.empty_cache(ids.shape[0]))
        self._batch = ids.shape[0]
        self.prefill_s = self._last_s
        return logits

    def step(self, next_ids: Any) -> np.ndarray:
        """Run one new token per sequence (``next_ids`` [batch] or [batch, 1]) over the
        bound cache; return the logits [batch, 1, vocab]."""
        if not self._cache:
            raise InputError("step before prefill: there is no cache to extend",
                             file=self.file, place="step")
        a = np.asarray(next_ids)
        ids = self._ids(a.reshape(-1, 1) if a.ndim == 1 else a, "next_ids")
        if ids.shape != (self._batch, 1):
            raise InputError(f"must be one token for each of the {self._batch} sequences, "
                             f"not shape {list(a.shape)}", file=self.file, place="next_ids")
        logits = self._run(ids, self._cache)
        self._step_s.append(self._last_s)
        return logits

    def generate(self, prompt_ids: Any, new_tokens: int) -> np.ndarray:
        """Greedy decoding: the ``new_tokens`` ids [batch, new_tokens] that follow
        ``prompt_ids`` (the first from the prefill's logits, then one step per token)."""
        n = _positive("new_tokens", new_tokens)
        token = self.prefill(prompt_ids)[:, -1].argmax(-1)
        out = [token]
        for _ in range(n - 1):
            token = self.step(token)[:, -1].argmax(-1)
            out.append(token)
        return np.stack(out, axis=1).astype(np.int64)


# --- measuring ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DecodeTiming:
    """Measured seconds of a decoder file: ``prefill_s`` one sample per repeat;
    ``decode_s[k]`` one sample per repeat of the decode step that ran over a cache of
    ``prompt_tokens + k`` tokens (``context_tokens[k]``), k < ``new_tokens``."""

    batch: int
    prompt_tokens: int
    new_tokens: int
    threads: int | None
    prefill_s: tuple[float, ...]
    decode_s: tuple[tuple[float, ...], ...]

    @property
    def context_tokens(self) -> tuple[int, ...]:
        """The cache length each decode step ran over."""
        return tuple(self.prompt_tokens + k for k in range(self.new_tokens))

    @property
    def prefill_median_s(self) -> float:
        return statistics.median(self.prefill_s)

    @property
    def decode_median_s(self) -> float:
        """Median over every decode step of every repeat (seconds per token)."""
        return statistics.median(s for step in self.decode_s for s in step)

    def decode_by_context_s(self) -> tuple[tuple[int, float], ...]:
        """(context tokens, median seconds) of each decode step."""
        return tuple((c, statistics.median(s))
                     for c, s in zip(self.context_tokens, self.decode_s, strict=True))


def measure_decode(path: str | os.PathLike[str], *, batch: int, prompt_tokens: int,
                   new_tokens: int, repeats: int, warmup: int, threads: int | None = None,
                   seed: int = 0) -> DecodeTiming:
    """Time the decoder file at ``path``: ``warmup`` unrecorded runs, then ``repeats`` runs
    of a prefill of ``batch`` random prompts (ids drawn from ``seed``) of ``prompt_tokens``
    followed by ``new_tokens`` greedy decode steps, each step timed by itself."""
    b = _positive("batch", batch)
    p = _positive("prompt_tokens", prompt_tokens)
    n = _positive("new_tokens", new_tokens)
    r = _positive("repeats", repeats)
    w = _positive("warmup", warmup, zero=True)
    session = DecodeSession(path, threads=threads)
    rng = np.random.default_rng(seed)
    prefill: list[float] = []
    steps: list[tuple[float, ...]] = []
    for i in range(w + r):
        prompt = rng.integers(0, session.layout.vocab, size=(b, p), dtype=np.int64)
        token = session.prefill(prompt)[:, -1].argmax(-1)
        for _ in range(n):
            token = session.step(token)[:, -1].argmax(-1)
        if i >= w:
            assert session.prefill_s is not None
            prefill.append(session.prefill_s)
            steps.append(session.step_s)
    decode = tuple(tuple(run[k] for run in steps) for k in range(n))
    return DecodeTiming(b, p, n, threads, tuple(prefill), decode)
