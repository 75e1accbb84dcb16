"""The real decoder: exported once with its KV cache as inputs and outputs, run step by step
in onnxruntime with the cache kept bound, against transformers' own decoding."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from placewise.errors import InputError, ModelFormatError
from placewise.llm.real import (
    DIMS,
    SMALL_CONFIG,
    DecodeSession,
    DecodeTiming,
    export_decoder,
    input_names,
    measure_decode,
    output_names,
)

NEW = 8
LAYERS = SMALL_CONFIG["num_hidden_layers"]
PAST = input_names(LAYERS)[3:]


@pytest.fixture(scope="module")
def small_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    return export_decoder(SMALL_CONFIG, tmp_path_factory.mktemp("llm") / "small.onnx")


@pytest.fixture(scope="module")
def small_model() -> Any:
    pytest.importorskip("transformers")
    from placewise.llm.real import build_decoder

    return build_decoder(SMALL_CONFIG, seed=0)


def _prompt(batch: int, tokens: int = 6, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, SMALL_CONFIG["vocab_size"], (batch, tokens))


def _torch_greedy(model: Any, prompt: np.ndarray, n: int) -> tuple[np.ndarray, list[Any]]:
    """transformers' model in a manual loop over its own DynamicCache: tokens and logits."""
    import torch

    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(prompt), use_cache=True)
        logits, cache = [out.logits.numpy()], out.cache
        token = out.logits[:, -1].argmax(-1, keepdim=True)
        tokens = [token]
        for _ in range(n - 1):
            out = model(input_ids=token, cache=cache, use_cache=True)
            logits.append(out.logits.numpy())
            cache = out.cache
            token = out.logits[:, -1].argmax(-1, keepdim=True)
            tokens.append(token)
    return torch.cat(tokens, dim=1).numpy(), logits


@pytest.mark.parametrize("batch", [1, 2])
def test_greedy_tokens_and_logits_match_transformers(small_file: Path, small_model: Any,
                                                      batch: int) -> None:
    import torch
    from transformers import GenerationConfig

    prompt = _prompt(batch)
    want, want_logits = _torch_greedy(small_model, prompt, NEW)
    session = DecodeSession(small_file, threads=1)
    got_logits = [session.prefill(prompt)]
    token = got_logits[-1][:, -1].argmax(-1)
    got = [token]
    for _ in range(NEW - 1):
        got_logits.append(session.step(token))
        token = got_logits[-1][:, -1].argmax(-1)
        got.append(token)
    assert np.array_equal(np.stack(got, axis=1), want)
    for g, w in zip(got_logits, want_logits, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    assert session.past_tokens == prompt.shape[1] + NEW - 1
    assert len(session.step_s) == NEW - 1 and session.prefill_s is not None
    # generate() is the same loop; transformers' generate agrees with both
    assert np.array_equal(DecodeSession(small_file).generate(prompt, NEW), want)
    config = GenerationConfig(max_new_tokens=NEW, do_sample=False, eos_token_id=None,
                              pad_token_id=0)
    ids = torch.from_numpy(prompt)
    with torch.no_grad():
        hf = small_model.generate(ids, attention_mask=torch.ones_like(ids),
                                  generation_config=config)
    assert np.array_equal(hf[:, prompt.shape[1]:].numpy(), want)


def test_cache_is_carried_as_the_previous_presents(small_file: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Each step binds, as its past inputs, the very OrtValues the previous call's
    get_outputs() gave back (same objects, same memory); numpy() is called on the logits
    and on nothing else."""
    import onnxruntime as ort

    session = DecodeSession(small_file, threads=1)
    bound: list[dict[str, Any]] = []
    produced: list[list[Any]] = []
    make_binding = session.session.io_binding

    def spy_binding() -> Any:
        binding = make_binding()
        calls: dict[str, Any] = {}
        bind, get = binding.bind_ortvalue_input, binding.get_outputs
        bound.append(calls)

        def bind_spy(name: str, value: Any) -> None:
            calls[name] = value
            bind(name, value)

        def get_spy() -> Any:
            values = get()
            produced.append(values)
            return values

        binding.bind_ortvalue_input = bind_spy
        binding.get_outputs = get_spy
        return binding

    to_host: list[Any] = []
    numpy = ort.OrtValue.numpy

    def numpy_spy(self: Any) -> Any:
        to_host.append(self)
        return numpy(self)

    monkeypatch.setattr(session.session, "io_binding", spy_binding)
    monkeypatch.setattr(ort.OrtValue, "numpy", numpy_spy)
    session.generate(_prompt(2), 4)

    assert len(bound) == len(produced) == 4
    assert [v.shape() for v in bound[0].values()] == [[2, 2, 0, 16]] * len(PAST)
    for k in range(1, 4):
        assert list(bound[k]) == list(PAST)
        for name, present in zip(PAST, produced[k - 1][1:], strict=True):
            assert bound[k][name] is present
            assert bound[k][name].data_ptr() == present.data_ptr()
            assert present.shape() == [2, 2, 5 + k, 16]  # prompt 6, then one a step
    assert len(to_host) == 4
    assert all(v is out[0] for v, out in zip(to_host, produced, strict=True))
    assert all(isinstance(v, ort.OrtValue) for v in session.cache)
    assert [v is p for v, p in zip(session.cache, produced[-1][1:], strict=True)] == \
        [True] * len(PAST)


def test_exported_file_has_symbolic_dims(small_file: Path) -> None:
    model = onnx.load(str(small_file))

    def dims(values: Any) -> dict[str, list[str | int]]:
        return {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
                for v in values}

    total = "past_sequence_length + sequence_length"
    ins, outs = dims(model.graph.input), dims(model.graph.output)
    assert tuple(ins) == input_names(LAYERS) and tuple(outs) == output_names(LAYERS)
    assert ins["input_ids"] == ins["position_ids"] == ["batch", "sequence_length"]
    assert ins["attention_mask"] == ["batch", total]
    assert outs["logits"] == ["batch", "sequence_length", 256]
    for name in PAST:
        assert ins[name] == ["batch", 2, "past_sequence_length", 16]
    for name in output_names(LAYERS)[1:]:
        assert outs[name] == ["batch", 2, total, 16]
    assert DIMS == ("batch", "sequence_length", "past_sequence_length")
    types = {v.name: v.type.tensor_type.elem_type for v in model.graph.input}
    assert types["input_ids"] == types["attention_mask"] == TensorProto.INT64
    assert types[PAST[0]] == TensorProto.FLOAT


def test_measure_decode_samples_each_context(small_file: Path) -> None:
    t = measure_decode(small_file, batch=2, prompt_tokens=5, new_tokens=3, repeats=2,
                       warmup=1, threads=1)
    assert isinstance(t, DecodeTiming)
    assert len(t.prefill_s) == 2 and [len(s) for s in t.decode_s] == [2, 2, 2]
    assert t.context_tokens == (5, 6, 7)
    assert [c for c, _ in t.decode_by_context_s()] == [5, 6, 7]
    assert t.prefill_median_s > 0 and t.decode_median_s > 0
    with pytest.raises(InputError, match="repeats"):
        measure_decode(small_file, batch=1, prompt_tokens=1, new_tokens=1, repeats=0,
                       warmup=0)


def test_bad_paths_and_inputs_are_input_errors(tmp_path: Path, small_file: Path) -> None:
    missing = tmp_path / "missing.onnx"
    with pytest.raises(InputError, match=f"{missing}: cannot read: no such file"):
        DecodeSession(missing)
    with pytest.raises(InputError, match="not a regular file"):
        DecodeSession(tmp_path)
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model")
    with pytest.raises(ModelFormatError, match=r"junk\.onnx: onnxruntime cannot load it"):
        DecodeSession(junk)
    with pytest.raises(InputError, match=r"is a directory, not a regular file"):
        export_decoder(SMALL_CONFIG, tmp_path)
    with pytest.raises(InputError, match=r"config\.hidden: not a LlamaConfig field"):
        export_decoder({"hidden": 64}, tmp_path / "x.onnx")
    with pytest.raises(InputError, match=r"config\.num_key_value_heads"):
        export_decoder({**SMALL_CONFIG, "num_key_value_heads": 3}, tmp_path / "x.onnx")
    assert not (tmp_path / "x.onnx").exists()
    session = DecodeSession(small_file)
    with pytest.raises(InputError, match="step before prefill"):
        session.step(np.array([1]))
    with pytest.raises(InputError, match=r"input_ids: token ids must lie in \[0, 256\)"):
        session.prefill(np.array([[256]]))
    session.prefill(_prompt(2))
    with pytest.raises(InputError, match="one token for each of the 2 sequences"):
        session.step(np.array([1, 2, 3]))


def test_a_model_without_past_is_refused(tmp_path: Path) -> None:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    with pytest.raises(ModelFormatError, match=r"relu\.onnx: inputs: not a decoder with past"):
        DecodeSession(path)


def test_module_imports_without_transformers_or_torch() -> None:
    code = ("import sys; sys.modules['transformers'] = None; import placewise.llm.real; "
            "assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
