"""A decoder run for real on this machine against what placewise predicts for it.

For every (batch, context) cell the real ONNX decoder (``llm.real``) prefills ``batch``
prompts of ``context`` tokens and decodes a few tokens past them, with its cache kept bound
between steps; the medians of the prefill and of the decode steps are the measurement.
Two predictions stand beside each:

- **graph**: the decoder file itself bound to the cell's shapes, scheduled whole on one
  device by the one evaluator (``schedule.evaluate``) with the given cost model (roofline or
  a calibration): its makespan, split into the evaluator's terms;
- **step fit** (``llm.steps.fit_step``): the step model fitted to the cells named in
  ``fit_cells`` (the corners of the grid by default) and read at the others -- the model the
  LLM serving simulation runs on, checked where it was not fitted.

>>> cells = grid_cells((1, 8), (128, 2048))
>>> corners(cells)
((1, 128), (1, 2048), (8, 128), (8, 2048))
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from placewise.graph.load import load_model
from placewise.hardware.stats import stat_of
from placewise.llm.cost import pairs
from placewise.llm.real import DecodeTiming, measure_decode
from placewise.llm.spec import spec_from_graph, step_shapes
from placewise.llm.steps import MeasuredStep, StepSample, fit_step
from placewise.planning import build_problem
from placewise.schedule.evaluate import evaluate
from placewise.search.baselines import single_placement
from placewise.search.space import SearchSpace

__all__ = ["CellResult", "LocalCheck", "corners", "grid_cells", "predict_graph",
           "validate_local"]


def grid_cells(batches: Sequence[int], contexts: Sequence[int]) -> list[tuple[int, int]]:
    return [(b, c) for b in batches for c in contexts]


def corners(cells: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    bs, cs = sorted({b for b, _ in cells}), sorted({c for _, c in cells})
    return tuple(sorted({(b, c) for b in (bs[0], bs[-1]) for c in (cs[0], cs[-1])}))


def predict_graph(path: str, machine: Any, cost_model: Any, device: str, *, batch: int,
                  new: int, past: int, graph: Any = None) -> tuple[float, dict[str, float]]:
    """(seconds, seconds by term) of one step of the decoder at ``path`` on ``device``."""
    graph = graph if graph is not None else load_model(path)
    problem = build_problem(path, machine, shapes=step_shapes(graph, batch, new, past),
                            cost_model=cost_model)
    placement, _ = single_placement(SearchSpace(problem), device)
    ev = evaluate(problem, placement)
    terms: dict[str, float] = {}
    for task in ev.schedule.tasks:
        for term, v in task.terms:
            terms[term.value] = terms.get(term.value, 0.0) + v
    if ev.request is not None:
        terms["request"] = ev.request.total_s
    return ev.latency_s, terms


@dataclass(frozen=True, slots=True)
class CellResult:
    batch: int
    context: int
    prefill_s: float  # measured medians
    decode_s: float
    prefill_spread: float  # (p90 - p10) / median of the repeats
    decode_spread: float
    graph_prefill_s: float
    graph_decode_s: float
    graph_decode_terms_s: tuple[tuple[str, float], ...]
    fit_prefill_s: float
    fit_decode_s: float
    fitted_here: bool  # the step fit was fitted on this cell


@dataclass(frozen=True, slots=True)
class LocalCheck:
    model: str
    device: str
    threads: int | None
    cost_model: str
    step: MeasuredStep
    cells: tuple[CellResult, ...]

    def errors(self, phase: str, which: str) -> list[float]:
        """Relative errors (predicted / measured - 1) of ``phase`` (prefill, decode) by
        ``which`` prediction (graph; fit: the cells the fit did not see)."""
        out = []
        for c in self.cells:
            if which == "fit" and c.fitted_here:
                continue
            pred = getattr(c, f"{which}_{phase}_s")
            out.append(pred / getattr(c, f"{phase}_s") - 1.0)
        return out


def _spread(xs: Sequence[float]) -> float:
    return stat_of(xs, "").spread


def _decode_samples(t: DecodeTiming) -> list[float]:
    return [s for step in t.decode_s for s in step]


def validate_local(path: str | os.PathLike[str], machine: Any, cost_model: Any, *,
                   device: str, batches: Sequence[int], contexts: Sequence[int],
                   new_tokens: int = 8, repeats: int = 3, warmup: int = 1,
                   threads: int | None = None,
                   fit_cells: Sequence[tuple[int, int]] | None = None,
                   progress: Callable[[str, float], None] | None = None) -> LocalCheck:
    """Measure and predict every cell (module docstring)."""
    p = os.fspath(path)
    graph = load_model(p)
    spec = spec_from_graph(graph, file=p)
    cells = grid_cells(batches, contexts)
    fit_at = set(fit_cells if fit_cells is not None else corners(cells))
    timings: dict[tuple[int, int], DecodeTiming] = {}
    for i, (b, c) in enumerate(cells):
        if progress is not None:
            progress(f"batch {b}, context {c}", i / len(cells))
        timings[(b, c)] = measure_decode(p, batch=b, prompt_tokens=c, new_tokens=new_tokens,
                                         repeats=repeats, warmup=warmup, threads=threads)
    samples = []
    for (b, c), t in timings.items():
        if (b, c) not in fit_at:
            continue
        samples.append(StepSample(b * c, b * c, b * pairs(c, 0), b, t.prefill_median_s))
        ctx = c + new_tokens // 2  # the median step's cache, new token included
        samples.append(StepSample(b, b * ctx, b * pairs(1, ctx - 1), b, t.decode_median_s))
    step = fit_step(samples)
    out = []
    for b, c in cells:
        t = timings[(b, c)]
        gp, _ = predict_graph(p, machine, cost_model, device, batch=b, new=c, past=0,
                              graph=graph)
        mid = c + new_tokens // 2
        gd, terms = predict_graph(p, machine, cost_model, device, batch=b, new=1,
                                  past=mid - 1, graph=graph)
        out.append(CellResult(
            b, c, t.prefill_median_s, t.decode_median_s, _spread(t.prefill_s),
            _spread(_decode_samples(t)), gp, gd, tuple(sorted(terms.items())),
            step.iteration_s(b * c, b * c, b * pairs(c, 0), b),
            step.iteration_s(b, b * mid, b * pairs(1, mid - 1), b), (b, c) in fit_at))
    if progress is not None:
        progress("done", 1.0)
    return LocalCheck(spec.name, device, threads, cost_model.fingerprint(), step, tuple(out))
