"""The offloading plan of a decoder on a machine, over batch sizes and context lengths.

``plan_llm`` fits the layer costs once per device (``llm.cost``), then for every (batch,
context) cell searches the policy (``llm.offload.search_policy``) and prices two baselines
beside it: llama.cpp's "as many layers as fit" and everything resident on the accelerator
(when it fits). Each is reported with its decode tokens/s, the terms of one decode
iteration, the prefill of one ``prompt``-token request alone (its time to first token on an
idle machine) and the bytes each memory holds. Where no policy fits, the cell says which
memory ruled the candidates out.

>>> from placewise.hardware.load import load_machine
>>> from placewise.cost.load import load_cost_model
>>> from placewise.llm.spec import load_spec
>>> m = load_machine("a100-pcie-server")
>>> p = plan_llm(load_spec("llama-2-13b"), m, load_cost_model(m, None), batches=(1,),
...              contexts=(4096,))
>>> c = p.cells[0]
>>> c.searched.counts, c.llamacpp.counts  # 13B fp16 (26 GB) fits an 80 GB A100
((40, 0, 0, 0, 0, 0), (40, 0, 0, 0, 0, 0))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from placewise.cost.model import CostModel
from placewise.errors import MemoryInfeasible
from placewise.hardware.spec import Machine
from placewise.llm.cost import pairs
from placewise.llm.offload import (
    CLASSES,
    Fitted,
    Memories,
    OffloadStep,
    Policy,
    Shape,
    fit_steps,
    llamacpp_policy,
    memories,
    search_policy,
)
from placewise.llm.spec import DecoderSpec

__all__ = ["LLMPlan", "PolicyCell", "PolicyResult", "plan_llm", "priced", "serving_step"]


@dataclass(frozen=True, slots=True)
class PolicyResult:
    """One policy priced at its cell's shape."""

    name: str
    batch: int  # the shape it was sized and timed for
    context: int
    counts: tuple[int, ...]  # layers per class, ``offload.CLASSES`` order
    decode_s: float  # one decode iteration of the batch
    tokens_per_s: float  # batch / decode_s
    terms_s: tuple[tuple[str, float], ...]  # of one decode iteration
    prefill_s: float  # one prompt of ``LLMPlan.prompt`` tokens, alone
    bytes_by_pool: tuple[tuple[str, int], ...]

    def classes(self) -> dict[str, int]:
        return dict(zip(CLASSES, self.counts, strict=True))


@dataclass(frozen=True, slots=True)
class PolicyCell:
    batch: int
    context: int
    searched: PolicyResult | None
    llamacpp: PolicyResult | None
    resident: PolicyResult | None  # every layer on the accelerator's fast memory
    tried: int
    ruled_out: tuple[tuple[str, int], ...]  # compositions each memory ruled out
    note: str = ""


@dataclass(frozen=True, slots=True)
class LLMPlan:
    model: str
    machine: str
    accel: str
    host: str | None
    pools: tuple[tuple[str, int, float], ...]  # name, usable bytes basis, bytes/s as read
    weight_bytes: int
    kv_bytes_per_token: int
    prompt: int
    cost_model: str
    cells: tuple[PolicyCell, ...]


def priced(spec: DecoderSpec, mem: Memories, fitted: Fitted, policy: Policy,
           prompt: int) -> PolicyResult:
    """``policy`` with its decode and prefill times (``OffloadStep``)."""
    step = OffloadStep(spec, mem, fitted[0], fitted[1], policy.counts)
    terms = step.terms(*policy.shape.decode())
    decode = sum(terms.values())
    prefill = step.iteration_s(prompt, prompt, pairs(prompt, 0), 1)
    return PolicyResult(policy.name, policy.shape.batch, policy.shape.context, policy.counts,
                        decode, policy.shape.batch / decode,
                        tuple(sorted(terms.items())), prefill, policy.bytes_by_pool)


def _resident(spec: DecoderSpec, mem: Memories, shape: Shape) -> Policy | None:
    lc = llamacpp_policy(spec, mem, shape)
    if lc is None or lc.count("resident") < spec.layers:
        return None
    return Policy(lc.counts, shape, lc.bytes_by_pool, "all resident")


def plan_llm(spec: DecoderSpec, machine: Machine, model: CostModel, *,
             batches: Sequence[int] = (1,), contexts: Sequence[int] = (4096,),
             prompt: int = 512, accel: str | None = None,
             progress: Callable[[str, float], None] | None = None) -> LLMPlan:
    """Search and price the policies of ``spec`` on ``machine`` (module docstring)."""
    mem = memories(machine, accel)
    fitted = fit_steps(spec, model, mem)
    cells = []
    grid = [(b, c) for c in contexts for b in batches]
    for i, (b, c) in enumerate(grid):
        shape = Shape(b, c)
        found = search_policy(spec, model, mem, shape, fitted=fitted)
        lc = llamacpp_policy(spec, mem, shape)
        res = _resident(spec, mem, shape)
        beyond = (f"context {c} is beyond the {spec.max_positions} positions {spec.name} "
                  "was trained for" if spec.max_positions and c > spec.max_positions else "")
        note = "; ".join(x for x in (beyond, found.note) if x)
        cells.append(PolicyCell(
            b, c, priced(spec, mem, fitted, found.best, prompt) if found.best else None,
            priced(spec, mem, fitted, lc, prompt) if lc else None,
            priced(spec, mem, fitted, res, prompt) if res else None,
            found.tried, found.infeasible_by_pool, note))
        if progress is not None:
            progress(f"batch {b}, context {c}", (i + 1) / len(grid))
    pools = tuple((p.name, p.capacity_bytes, p.bandwidth_bytes_per_s)
                  for p in (mem.fast, mem.slow, mem.host_pool) if p is not None)
    return LLMPlan(spec.name, machine.name, mem.accel, mem.host, pools, spec.weight_bytes(),
                   spec.kv_bytes_per_token(), prompt, model.fingerprint(), tuple(cells))


def serving_step(spec: DecoderSpec, machine: Machine, model: CostModel, *,
                 max_seqs: int | None, context: int, accel: str | None = None
                 ) -> tuple[OffloadStep, PolicyResult]:
    """The step a server of ``max_seqs`` sequences of up to ``context`` tokens runs at: the
    policy searched for that shape (its cache holds ``max_seqs x context`` tokens), as a
    ``StepTime``, with the policy priced (its ``counts`` and, in ``prefill_s``, a
    ``context``-token prefill). ``max_seqs=None``: the largest power of two up to 256 whose
    policy keeps every layer resident (else 1). ``Infeasible`` when nothing fits."""
    mem = memories(machine, accel)
    fitted = fit_steps(spec, model, mem)
    if max_seqs is None:
        max_seqs = next((n for n in (256, 128, 64, 32, 16, 8, 4, 2)
                         if _resident(spec, mem, Shape(n, context)) is not None), 1)
    shape = Shape(max_seqs, context)
    found = search_policy(spec, model, mem, shape, fitted=fitted)
    if found.best is None:
        ruled = ", ".join(f"{k}: {v}" for k, v in found.infeasible_by_pool if v)
        raise MemoryInfeasible(f"{spec.name} with {max_seqs} sequences of {context} tokens "
                               f"fits no policy on {machine.name} (ruled out by {ruled}); "
                               "lower --max-seqs or --context")
    step = OffloadStep(spec, mem, fitted[0], fitted[1], found.best.counts)
    return step, priced(spec, mem, fitted, found.best, context)

