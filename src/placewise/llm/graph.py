"""One decoder step as a placewise graph, at a concrete shape, for the cost model.

``step_graph(spec, batch=b, new=n, past=p)`` is ``layers`` decoder layers (pre-norm, rotary
positions, SwiGLU or GELU MLP) over ``b`` sequences each bringing ``n`` new tokens to a cache
of ``p`` tokens, optionally with the embedding and the LM head. The cache is *state*: each
layer reads ``cache.L.k`` / ``cache.L.v`` (inputs of ``p + n`` tokens: the engine appends the
step's own K and V in place, as a paged-attention engine does) and writes only the new
tokens' K and V (outputs ``kv.L.k`` / ``kv.L.v``) -- not a concatenated copy of the whole
cache, which is what a Hugging Face ONNX export does instead (``llm.real`` runs that one).

Prefill is ``new = prompt, past = 0`` (causal attention over the prompt); decode is ``new =
1, past = context``. The LM head runs on the last token of each sequence only.

>>> from placewise.llm.spec import load_spec
>>> g = step_graph(load_spec("llama-2-7b"), batch=2, new=1, past=100, layers=1)
>>> [t.shape for t in g.tensors if t.name == "cache.0.k"]
[(2, 32, 101, 128)]
"""

from __future__ import annotations

from dataclasses import dataclass, field

from placewise.graph.ir import Attrs, Graph, Op, OpKind, Provenance, Role, Tensor
from placewise.llm.spec import DecoderSpec
from placewise.units import DType

__all__ = ["step_graph"]


@dataclass
class _B:
    dtype: DType
    tensors: dict[str, Tensor] = field(default_factory=dict)
    ops: list[Op] = field(default_factory=list)

    def t(self, name: str, shape: tuple[int, ...], role: Role = Role.ACTIVATION,
          dtype: DType | None = None) -> str:
        self.tensors[name] = Tensor(name, shape, dtype or self.dtype, role=role)
        return name

    def op(self, name: str, kind: OpKind, ins: tuple[str, ...], out: str,
           module: str, **attrs: object) -> str:
        self.ops.append(Op(name, kind, ins, (out,), Attrs.of(attrs),
                           Provenance(source=name, source_op="placewise.llm",
                                      module_path=module)))
        return out


def _weight_dtype(s: DecoderSpec) -> DType | None:
    """How the layer weights are stored: packed integers for a quantized file (a ``Q4_0``
    file's 4.5 bits as int4: its fp16 block scales, 1/9 of its bytes, are left out), else
    the compute dtype."""
    if s.weight_bits <= 4.5:
        return DType.INT4
    if s.weight_bits <= 8.5:
        return DType.INT8
    return None


def _layer(b: _B, s: DecoderSpec, i: int, x: str, rows: tuple[int, int], past: int) -> str:
    """Decoder layer ``i`` on ``x`` ([batch, new, hidden]); returns its output's name."""
    bt, n = rows
    h, q_w, kv_w = s.hidden, s.heads * s.head_dim, s.kv_heads * s.head_dim
    P, m = Role.PARAM, f"layers.{i}"

    def lin(name: str, src: str, out_w: int, in_w: int, role: Role = Role.ACTIVATION) -> str:
        w = b.t(f"{m}.{name}.weight", (out_w, in_w), P, _weight_dtype(s))
        return b.op(f"{m}.{name}", OpKind.LINEAR, (src, w),
                    b.t(f"{m}.{name}.out", (bt, n, out_w), role), f"{m}.{name}")

    def unary(name: str, kind: OpKind, ins: tuple[str, ...], width: int) -> str:
        return b.op(f"{m}.{name}", kind, ins, b.t(f"{m}.{name}.out", (bt, n, width)),
                    f"{m}.{name}")

    x1 = unary("input_norm", OpKind.RMS_NORM, (x, b.t(f"{m}.input_norm.weight", (h,), P)), h)
    q = unary("rope_q", OpKind.MUL, (lin("q_proj", x1, q_w, h),
                                     b.t(f"{m}.rope.q", (n, q_w), P)), q_w)
    lin("k_proj", x1, kv_w, h, Role.OUTPUT)  # the new tokens' K and V, appended to the cache
    lin("v_proj", x1, kv_w, h, Role.OUTPUT)
    q4 = b.op(f"{m}.q_heads", OpKind.RESHAPE, (q,),
              b.t(f"{m}.q_heads.out", (bt, s.heads, n, s.head_dim)), f"{m}.self_attn")
    cache = (bt, s.kv_heads, past + n, s.head_dim)
    ck, cv = b.t(f"cache.{i}.k", cache, Role.INPUT), b.t(f"cache.{i}.v", cache, Role.INPUT)
    a = b.op(f"{m}.attention", OpKind.ATTENTION, (q4, ck, cv),
             b.t(f"{m}.attention.out", (bt, s.heads, n, s.head_dim)), f"{m}.self_attn",
             is_causal=n > 1)
    a2 = b.op(f"{m}.attn_merge", OpKind.RESHAPE, (a,), b.t(f"{m}.attn_merge.out", (bt, n, q_w)),
              f"{m}.self_attn")
    x2 = unary("attn_residual", OpKind.ADD, (x, lin("o_proj", a2, h, q_w)), h)
    x3 = unary("post_norm", OpKind.RMS_NORM,
               (x2, b.t(f"{m}.post_norm.weight", (h,), P)), h)
    if s.gated_mlp:
        gate = unary("act", OpKind.SILU, (lin("gate_proj", x3, s.ffn, h),), s.ffn)
        hid = unary("gate_mul", OpKind.MUL, (gate, lin("up_proj", x3, s.ffn, h)), s.ffn)
    else:
        hid = unary("act", OpKind.GELU, (lin("up_proj", x3, s.ffn, h),), s.ffn)
    return unary("mlp_residual", OpKind.ADD, (x2, lin("down_proj", hid, h, s.ffn)), h)


def step_graph(spec: DecoderSpec, *, batch: int, new: int, past: int, layers: int | None = None,
               embed: bool = False, head: bool = False) -> Graph:
    """``layers`` (default: all) decoder layers of ``spec`` at one step's shape; with
    ``embed`` the token embedding before them, with ``head`` the final norm and LM head
    (last token of each sequence) after them."""
    if min(batch, new) < 1 or past < 0:
        raise ValueError(f"batch {batch} and new {new} must be >= 1, past {past} >= 0")
    b = _B(spec.dtype)
    h = spec.hidden
    if embed:
        ids = b.t("input_ids", (batch, new), Role.INPUT, DType.INT64)
        table = b.t("embed_tokens.weight", (spec.vocab, h), Role.PARAM)
        x = b.op("embed_tokens", OpKind.GATHER, (table, ids), b.t("embed.out", (batch, new, h)),
                 "embed_tokens")
    else:
        x = b.t("hidden_in", (batch, new, h), Role.INPUT)
    for i in range(spec.layers if layers is None else layers):
        x = _layer(b, spec, i, x, (batch, new), past)
    if head:
        last = b.op("last_token", OpKind.SLICE, (x,), b.t("last.out", (batch, 1, h)), "lm_head")
        y = b.op("norm", OpKind.RMS_NORM, (last, b.t("norm.weight", (h,), Role.PARAM)),
                 b.t("norm.out", (batch, 1, h)), "norm")
        w = b.t("lm_head.weight", (spec.vocab, h), Role.PARAM)
        b.op("lm_head", OpKind.LINEAR, (y, w), b.t("logits", (batch, 1, spec.vocab),
                                                    Role.OUTPUT), "lm_head")
    else:
        b.tensors[x] = Tensor(x, b.tensors[x].shape, b.tensors[x].dtype, role=Role.OUTPUT)
    return Graph.build(f"{spec.name}[b={batch},new={new},past={past}]",
                       list(b.tensors.values()), b.ops)
