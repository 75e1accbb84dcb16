"""The text report ``placewise validate`` prints (the library never prints: the CLI does)."""

from __future__ import annotations

import math

from placewise.units import format_bytes
from placewise.validate.records import TERMS, ValidationReport, fmt_s

__all__ = ["render_validation"]


def _fmt_pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v * 100:+.1f}%"


def _fmt_b(n: int) -> str:
    return format_bytes(n)


def _ratio(r: float | None) -> str:
    """'x2.00 faster' / 'x1.50 slower' for a speed ratio (> 1: faster)."""
    if r is None or r <= 0 or not math.isfinite(r):
        return "n/a"
    return f"x{r:.2f} faster" if r >= 1 else f"x{1 / r:.2f} slower"


def render_validation(report: ValidationReport) -> str:
    """The text report ``placewise validate`` prints."""
    r = report
    lines = [f"validate {r.model}  strategy {r.strategy}  objective {r.objective}  "
             f"batch {r.batch}  devices {', '.join(r.devices)}",
             "",
             f"{'':24}{'predicted':>14}{'measured':>14}{'error':>10}"]
    lines.append(f"{'latency p50':24}{fmt_s(r.predicted_latency_s):>14}"
                 f"{fmt_s(r.latency.p50_s):>14}{_fmt_pct(r.latency_error):>10}")
    if r.latency_on_cpu is not None:
        lines.append(f"{'  on our cores (p50)':24}{'':>14}{fmt_s(r.latency_on_cpu.p50_s):>14}"
                     f"{_fmt_pct(r.latency_on_cpu_error):>10}   (less time other processes "
                     f"held the cores)")
    lines.append(f"{'latency p90 / p99':24}{'':>14}"
                 f"{fmt_s(r.latency.p90_s) + ' / ' + fmt_s(r.latency.p99_s):>14}"
                 f"   (n={r.latency.n})")
    pt = "n/a" if r.predicted_throughput_rps is None else f"{r.predicted_throughput_rps:.1f}/s"
    lines.append(f"{'throughput (pipelined)':24}{pt:>14}{f'{r.throughput_rps:.1f}/s':>14}"
                 f"{_fmt_pct(r.throughput_error):>10}   ({r.stream_requests} requests, "
                 f"{r.in_flight} in flight)")
    for mc in r.models:  # a workload plan: each model, every model's request at once
        lines.append(f"{'  model ' + mc.name + ' p50':24}{fmt_s(mc.predicted_s):>14}"
                     f"{fmt_s(mc.latency.p50_s):>14}{_fmt_pct(mc.error):>10}   (p99 "
                     f"{fmt_s(mc.latency.p99_s)}, n={mc.latency.n})")
    for m in r.memory:
        lines.append(f"{'memory ' + m.device:24}{_fmt_b(m.predicted_bytes):>14}"
                     f"{_fmt_b(m.measured_bytes):>14}{_fmt_pct(m.error):>10}   (RSS peak "
                     f"{_fmt_b(m.rss_peak_bytes)})")
    a = r.attribution
    lines += ["", f"latency attribution (request {a.request}: measured {fmt_s(a.measured_s)}, "
                  f"predicted {fmt_s(a.predicted_s)}):"]
    for k in TERMS:
        v = a.terms_s.get(k, 0.0)
        lines.append(f"  {k:18}{fmt_s(v, signed=True):>12}")
    lines.append(f"  {'total':18}{fmt_s(a.delta_s, signed=True):>12}")
    if a.by_kind:
        lines.append("  op kinds: " + ", ".join(f"{k} {fmt_s(v, signed=True)}"
                                                for k, v in a.by_kind[:4]))
    if a.by_edge:
        lines.append("  edges:    " + ", ".join(f"{k} {fmt_s(v, signed=True)}"
                                                for k, v in a.by_edge[:4]))
    lines.append("  tasks with the largest miss (median over requests):")
    for t in a.tasks[:6]:
        main = max(t.terms_s.items(), key=lambda kv: abs(kv[1]))
        lines.append(f"    {t.task:36} {t.label:20} pred {fmt_s(t.predicted_s):>9} "
                     f"meas {fmt_s(t.measured_s):>9}  ({main[0]} "
                     f"{fmt_s(main[1], signed=True)})")
    if r.throughput_attribution is not None:
        lines += ["", "throughput attribution: " + r.throughput_attribution.explanation]
    if r.quality:
        lines += ["", "quality vs fp32 reference:"]
        for q in r.quality:
            top1 = "" if q.top1_agreement is None else f"  top-1 {q.top1_agreement:.1%}"
            lines.append(f"  {q.output}: rel L2 {q.rel_l2_median:.2e} (max "
                         f"{q.rel_l2_max:.2e})  max abs {q.max_abs:.2e}  cosine >= "
                         f"{q.cosine_min:.6f}{top1}")
    qc = r.quality_check
    if qc is not None:
        est = (f"estimated {qc.estimated.get(qc.metric, 0.0):.4g}" if qc.estimated
               else "estimated exact (nothing lowered)")
        ratio = "" if qc.ratio is None else f", measured/estimated error x{qc.ratio:.2f}"
        verdict = "within" if qc.holds else "BREAKS"
        lines.append(f"  precision {qc.policy}: measured {qc.metric} "
                     f"{qc.measured.get(qc.metric, float('nan')):.4g} {verdict} the budget "
                     f"{qc.metric}={qc.value:g} ({est}{ratio}; {qc.inputs})")
    if r.baselines:
        lines += ["", "baseline (whole-model onnxruntime sessions, same requests):"]
        for b in r.baselines:
            where = "all cores" if b.name == "onnxruntime" else "the plan's cores"
            cores = ",".join(str(c) for c in b.cores)
            if not b.available:
                lines.append(f"  {b.precision} on {where}: unavailable ({b.reason})")
                continue
            assert b.latency is not None and b.throughput_rps is not None
            lines.append(f"  {b.precision} on {where} ({cores}): p50 {fmt_s(b.latency.p50_s)}, "
                         f"{b.throughput_rps:.1f}/s; the plan is "
                         f"{_ratio(b.plan_latency_speedup)} on latency and "
                         f"{_ratio(b.plan_throughput_ratio)} on throughput")
    if r.energy is not None:
        lines += ["", *_energy_lines(r)]
    for n in r.notes:
        lines.append(f"note: {n}")
    return "\n".join(lines) + "\n"


def _energy_lines(r: ValidationReport) -> list[str]:
    """Energy: the estimate (always labelled one) beside what was measured, or why not."""
    assert r.energy is not None
    est, meas = r.energy.estimate, r.energy.measured
    if est.available:
        sat = est.saturated_energy_per_request_j
        out = [f"energy (estimate from the model): {est.energy_per_request_j:.4g} J per request "
               f"isolated, {sat if sat is None else format(sat, '.4g')} J at saturation, "
               f"average {est.average_power_w:.4g} W"]
    else:
        out = [f"energy estimate: not available ({est.reason})"]
    if meas.available and meas.energy_per_request_j is not None:
        out.append(f"energy measured over the stream ({meas.source}): "
                   f"{meas.energy_per_request_j:.4g} J per request, average "
                   f"{meas.average_power_w or 0.0:.4g} W ({meas.covers})")
    else:
        out.append(f"energy measured: none ({meas.reason})")
    return out
