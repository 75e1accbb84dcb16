"""Decoder LLMs: the model as prefill and decode steps over a KV cache (state that persists
between steps), its layers and cache placed over memory tiers, and served request by request
with iteration-level batching.

- ``spec``: ``DecoderSpec``, a decoder's shape (layers, heads, KV heads, widths, dtypes) from a
  Hugging Face ``config.json`` or an ONNX decoder's past/present inputs and outputs;
- ``graph``: one decoder step (``new`` tokens over a cache of ``past``) as a placewise graph;
- ``steps``: ``StepTime``, what one iteration of a batch of sequences costs (the protocol the
  serving simulator reads) and its fit from the cost model;
- ``offload``: which layers' weights and cache live in which tier, priced and searched;
- ``real``: the decode loop run for real in onnxruntime with the cache kept bound.
"""
