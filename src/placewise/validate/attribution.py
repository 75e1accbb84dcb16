"""Attribution: where the measured run differs from the plan's prediction, term by term.

No global correction factor. The measured timeline of the median-latency isolated request
is walked back from the outputs along the chain that bound it (each step's
latest-finishing data dependency or the step before it on its worker): the *measured
critical path*. Every step on it is split into terms against the plan's own task:

- ``compute``: solo kernel time minus the plan's compute + memory + launch terms (a
  profiled op's time includes its own kernel dispatch);
- ``contention``: in-run kernel/copy time minus solo time, minus the plan's contention term
  (the solo replay runs each kernel back to back with every other worker idle: other
  devices' memory traffic, other processes on the cores and caches gone cold between
  requests all land here);
- ``conversion``: conversion kernels against the plan's conversion tasks, plus conversions
  the plan does not name (int8 kernels taking fp32 activations);
- ``transfer``: shared-memory write + notify + read (solo) against the plan's transfer task
  (counted once, where the data path goes from the send to its receive);
- ``launch/dispatch``: executor time around kernels (step bookkeeping, per-op Python, the
  worker's loop between two of its steps), the io steps and the client hand-off (inputs
  in), none of which the plan models;
- ``waiting``: time between another device's step and the step that waited for it (a
  message in flight, a worker woken late, OS scheduling);
- ``path``: minus the part of the predicted makespan that is not on the measured critical
  path (the plan's critical path differs from the one that really bound the request).

The terms add up exactly to measured minus predicted latency. Per task (all tasks, medians
over the isolated requests) the same split is reported, and the op kinds and edges
(transfers, conversions) with the largest share of the miss are named. Throughput is
attributed the same way on the measured bottleneck device (its busy time per request by
term, its idle time, and the shift from the plan's bottleneck resource).

``attribute_latency`` and ``attribute_throughput`` build the records
(``placewise.validate.records``) from the campaign's telemetry and solo replay.
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from placewise.cost.model import Term
from placewise.errors import PlacewiseError
from placewise.runtime.planned import predicted_tasks
from placewise.runtime.program import ExecProgram, StepKind
from placewise.runtime.telemetry import SoloRecord, TaskRecord, Telemetry
from placewise.schedule.simulate import TaskKind
from placewise.units import DType
from placewise.validate.records import (
    TERMS,
    Attribution,
    LatencyStats,
    StepShare,
    TaskShare,
    ThroughputAttribution,
    fmt_s,
    latency_stats,
)

if TYPE_CHECKING:
    from placewise.plan import Plan
    from placewise.plan import TaskRecord as PlanTask

__all__ = ["attribute_latency", "attribute_throughput"]


def _terms0() -> dict[str, float]:
    return {t: 0.0 for t in TERMS}


@dataclass(slots=True)
class _Step:
    name: str  # display name
    task: int  # plan task index (-1: io)
    kind: StepKind
    device: str
    start: int
    end: int
    kernel: int  # ns in kernels (send: write; recv: read)
    hidden: int
    extra: int = 0  # send: notify ns (counted as transfer)
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    off_cpu: int = 0  # ns the worker was off its cores during the step (estimated)


def _label(program: ExecProgram, ti: int) -> str:
    if ti < 0:
        return "io"
    t = program.tasks[ti]
    if t.vertex is not None and t.vertex in program.vertices:
        v = program.vertices[t.vertex]
        kinds = list(dict.fromkeys(o.kind.value for o in v.ops))
        return "+".join(kinds) + ("/int8" if v.dtype is DType.INT8 else "")
    if t.kind.value == "transfer":
        rep = t.src_rep.dtype.value if t.src_rep is not None else ""
        return f"{t.device}->{t.dst_device} {rep}".strip()
    src = t.src_rep.dtype.value if t.src_rep is not None else "?"
    dst = t.dst_rep.dtype.value if t.dst_rep is not None else "?"
    return f"{src}->{dst}@{t.device}"


def _steps_of_request(program: ExecProgram, records: Sequence[TaskRecord]
                      ) -> dict[str, list[_Step]]:
    """The measured steps of one request per device, in the device's program order."""
    by_name: dict[tuple[str, str], TaskRecord] = {}
    rec: TaskRecord | None
    for rec in records:
        if rec.kind == "transfer":
            by_name[(rec.task, "transfer")] = rec
        else:
            by_name[(rec.task, rec.device)] = rec
    out: dict[str, list[_Step]] = {}
    threads = {d.name: max(1, len(d.cores or ())) for d in program.devices}

    def off(dur: int, cpu: int, dev: str) -> int:
        return max(0, dur - cpu // threads[dev]) if cpu > 0 else 0

    for dev, steps in program.steps.items():
        lst: list[_Step] = []
        for st in steps:
            if st.kind is StepKind.IO_IN or st.kind is StepKind.IO_OUT:
                name = "io:in" if st.kind is StepKind.IO_IN else "io:out"
                rec = by_name.get((name, dev))
                if rec is None:
                    continue
                lst.append(_Step(name, -1, st.kind, dev, rec.start_ns, rec.end_ns,
                                 rec.kernel_ns, 0, 0, st.reads, st.writes,
                                 off(rec.duration_ns, rec.cpu_ns, dev)))
                continue
            t = program.tasks[st.task]
            if st.kind in (StepKind.SEND, StepKind.RECV):
                rec = by_name.get((t.name, "transfer"))
                if rec is None:
                    continue
                marks = dict(rec.marks)
                if st.kind is StepKind.SEND:
                    # the data is on its way once the notification is issued (the
                    # receiver may have it before the sender's write call returns)
                    w1 = marks.get("write_end", rec.start_ns)
                    nt = marks.get("notified", w1)
                    lst.append(_Step(f"{t.name} (send)", st.task, st.kind, dev, rec.start_ns,
                                     nt, w1 - rec.start_ns, 0, nt - w1, st.reads, st.writes,
                                     off(nt - rec.start_ns, marks.get("send_cpu_ns", 0), dev)))
                else:
                    r0 = marks.get("read_start", rec.end_ns)
                    lst.append(_Step(f"{t.name} (receive)", st.task, st.kind, dev, r0,
                                     rec.end_ns, rec.end_ns - r0, 0, 0, st.reads, st.writes,
                                     off(rec.end_ns - r0, marks.get("receive_cpu_ns", 0),
                                         dev)))
                continue
            rec = by_name.get((t.name, dev))
            if rec is None:
                continue
            lst.append(_Step(t.name, st.task, st.kind, dev, rec.start_ns, rec.end_ns,
                             rec.kernel_ns, rec.hidden_conversion_ns, 0, st.reads, st.writes,
                             off(rec.duration_ns, rec.cpu_ns, dev)))
        out[dev] = lst
    return out


def _solo_index(program: ExecProgram, solo: Sequence[SoloRecord]
                ) -> dict[tuple[str, str], SoloRecord]:
    return {(s.task, s.device): s for s in solo}


def _pred_parts(trec: PlanTask) -> tuple[float, float, float, float]:
    """(total, contention, launch, hidden-conversion) seconds of a plan task: the launch
    term is the executor's dispatch (compared with the measured time around kernels), the
    conversion term of a compute task is conversion inside its step (int8 kernels)."""
    conv = trec.term(Term.CONVERSION) if trec.kind is TaskKind.COMPUTE else 0.0
    return trec.duration_s, trec.contention_s, trec.term(Term.LAUNCH), conv


def _pred_wake(trec: PlanTask | None) -> float:
    """The wake-up of a sleeping receiver the plan put into a transfer (its ``wake_s``
    assumption, part of its sync term): measured, it is the receiver's wait before the
    receive step, so it is compared under "waiting", not "transfer"."""
    if trec is None or trec.kind is not TaskKind.TRANSFER:
        return 0.0
    w = trec.assumptions.get("wake_s", 0.0)
    return float(w) if isinstance(w, (int, float)) else 0.0


def _split_step(st: _Step, solo: SoloRecord | None,
                pred: tuple[float, float, float, float], counted: bool) -> dict[str, float]:
    """The measured-minus-predicted seconds of one step, by term (excluding its gap): each
    measured part against the plan's own term for it."""
    pred_total, pred_cont, pred_launch, pred_conv = pred
    d = _terms0()
    dur = (st.end - st.start) / 1e9
    k = st.kernel / 1e9
    h = st.hidden / 1e9
    extra = st.extra / 1e9
    sk = solo.kernel_s if solo is not None else k
    if st.kind is StepKind.COMPUTE:
        d["compute"] = sk - (pred_total - pred_cont - pred_launch - pred_conv)
        d["contention"] = (k - sk) - pred_cont
        d["conversion"] = h - pred_conv
        d["launch/dispatch"] = dur - k - h - pred_launch
    elif st.kind is StepKind.CONVERT:
        d["conversion"] = sk - (pred_total - pred_cont - pred_launch)
        d["contention"] = (k - sk) - pred_cont
        d["launch/dispatch"] = dur - k - pred_launch
    elif st.kind is StepKind.SEND:
        p_total, p_cont, p_launch = (pred_total, pred_cont, pred_launch) if counted else \
            (0.0, 0.0, 0.0)
        d["transfer"] = sk + extra - (p_total - p_cont - p_launch)
        d["contention"] = (k - sk) - p_cont
        d["launch/dispatch"] = dur - k - extra - p_launch
    elif st.kind is StepKind.RECV:
        d["transfer"] = sk
        d["contention"] = k - sk
        d["launch/dispatch"] = dur - k
    else:
        d["launch/dispatch"] = dur
    return d


def _critical_path(program: ExecProgram, plan: Plan, steps: dict[str, list[_Step]],
                   solo: dict[tuple[str, str], SoloRecord], submit_ns: int, outputs_ns: int
                   ) -> tuple[list[StepShare], dict[str, float], float, float]:
    """Walk back from io:out; returns the path (first to last), the terms and the client
    hand-off at the head and the tail."""
    pos: dict[tuple[str, int], int] = {}
    writer: dict[tuple[str, str], _Step] = {}
    send_of: dict[int, _Step] = {}
    step_of: dict[int, _Step] = {}  # compute/convert steps by task
    for dev, lst in steps.items():
        for i, st in enumerate(lst):
            pos[(dev, id(st))] = i
            for k in st.writes:
                writer.setdefault((dev, k), st)
            if st.kind is StepKind.SEND:
                send_of[st.task] = st
            elif st.kind in (StepKind.COMPUTE, StepKind.CONVERT):
                step_of[st.task] = st
    # core gates: a step waits for the step the plan runs before it on a shared core
    gated: dict[int, list[int]] = {}
    for gt in getattr(program, "gates", ()):
        gated.setdefault(gt.after, []).append(gt.before)
    host = program.host
    last = next((s for s in steps.get(host, []) if s.kind is StepKind.IO_OUT), None)
    if last is None:
        raise PlacewiseError("the measured request has no io:out step")
    pred = predicted_tasks(plan, program)
    chain: list[tuple[_Step, int, bool]] = []  # (step, gap before it in ns, cross-device)
    cur = last
    head = 0
    while True:
        cands: list[_Step] = []
        for k in cur.reads:
            w = writer.get((cur.device, k))
            if w is not None and w is not cur:
                cands.append(w)
        if cur.kind is StepKind.RECV and cur.task in send_of:
            cands.append(send_of[cur.task])
        for before in gated.get(cur.task, ()) if cur.task >= 0 else ():
            if before in step_of:
                cands.append(step_of[before])
        i = pos[(cur.device, id(cur))]
        if i > 0:
            cands.append(steps[cur.device][i - 1])
        if not cands:
            chain.append((cur, 0, False))
            head = cur.start - submit_ns
            break
        best = max(cands, key=lambda s: s.end)
        # never clamped: the path's durations and gaps telescope to outputs - submit
        chain.append((cur, cur.start - best.end, best.device != cur.device))
        cur = best
    chain.reverse()
    tail = outputs_ns - last.end
    terms = _terms0()
    shares: list[StepShare] = []
    counted_pred = 0.0
    for idx, (st, gap, cross) in enumerate(chain):
        nxt = chain[idx + 1][0] if idx + 1 < len(chain) else None
        parts = (0.0, 0.0, 0.0, 0.0)
        counted = False
        task_name = program.tasks[st.task].name if st.task >= 0 else st.name
        if st.task >= 0:
            trec = pred.get(task_name)
            if trec is not None:
                parts = _pred_parts(trec)
        p_total = parts[0]
        if st.kind is StepKind.SEND:
            counted = nxt is not None and nxt.kind is StepKind.RECV and nxt.task == st.task
        elif st.kind in (StepKind.COMPUTE, StepKind.CONVERT):
            counted = True
        s = solo.get((task_name, st.device))
        d = _split_step(st, s, parts, counted)
        if counted and st.kind is StepKind.SEND:
            wake = _pred_wake(pred.get(task_name))
            d["transfer"] += wake
            d["waiting"] -= wake
        # a wait for another device's data is waiting; a gap after the previous step of
        # the same worker is the worker's own loop (bookkeeping between steps)
        d["waiting" if cross else "launch/dispatch"] += gap / 1e9
        predicted = p_total if counted else 0.0
        counted_pred += predicted
        for k, v in d.items():
            terms[k] += v
        shares.append(StepShare(st.name, task_name, st.kind.value, st.device,
                                _label(program, st.task), (st.end - st.start) / 1e9,
                                predicted, gap / 1e9, d, st.off_cpu / 1e9))
    # the client hand-off at both ends, against the plan's request term (if any)
    terms["launch/dispatch"] += (head + tail) / 1e9 - (plan.predicted_latency_s -
                                                       float(plan.makespan_s))
    terms["path"] = -(float(plan.makespan_s) - counted_pred)
    return shares, terms, head / 1e9, tail / 1e9


def _task_shares(program: ExecProgram, plan: Plan, tel: Telemetry, phase: str,
                 solo: dict[tuple[str, str], SoloRecord]) -> list[TaskShare]:
    pred = predicted_tasks(plan, program)
    recs: dict[str, list[TaskRecord]] = {}
    for r in tel.tasks:
        if r.phase == phase and r.kind != "io":
            recs.setdefault(r.task, []).append(r)
    out: list[TaskShare] = []
    for t in program.tasks:
        rs = recs.get(t.name)
        trec = pred.get(t.name)
        if not rs or trec is None:
            continue
        p_total, p_cont, p_launch, p_conv = _pred_parts(trec)
        med = statistics.median(r.duration_ns for r in rs) / 1e9
        kern = statistics.median(r.kernel_ns for r in rs) / 1e9
        hid = statistics.median(r.hidden_conversion_ns for r in rs) / 1e9
        d = _terms0()
        if t.kind.value == "transfer":
            sk = sum(s.kernel_s for (name, _dev), s in solo.items() if name == t.name) or kern
            d["transfer"] = sk - (p_total - p_cont - p_launch)
            d["contention"] = (kern - sk) - p_cont
            d["waiting"] = med - kern - p_launch
            solo_s: float | None = sk
        else:
            s = solo.get((t.name, t.device))
            sk = s.kernel_s if s is not None else kern
            main = "compute" if t.kind.value == "compute" else "conversion"
            d[main] = sk - (p_total - p_cont - p_launch - p_conv)
            d["contention"] = (kern - sk) - p_cont
            d["conversion"] += hid - p_conv
            d["launch/dispatch"] = med - kern - hid - p_launch
            solo_s = s.total_s if s is not None else None
        ops = tuple(o.name for o in program.vertices[t.name].ops) if t.name in \
            program.vertices else ()
        out.append(TaskShare(t.name, t.kind.value, t.device, _label(program, t.index), ops,
                             p_total, med, solo_s, d))
    out.sort(key=lambda x: -abs(x.delta_s))
    return out


def _rank_labels(shares: Sequence[StepShare]) -> tuple[list[tuple[str, float]],
                                                       list[tuple[str, float]]]:
    kinds: dict[str, float] = {}
    edges: dict[str, float] = {}
    for s in shares:
        miss = sum(v for k, v in s.terms_s.items() if k not in ("waiting", "path"))
        if s.kind == "compute":
            kinds[s.label] = kinds.get(s.label, 0.0) + miss
        elif s.kind in ("send", "recv", "convert"):
            key = s.task
            edges[key] = edges.get(key, 0.0) + miss
    rk = sorted(kinds.items(), key=lambda kv: -abs(kv[1]))
    re_ = sorted(edges.items(), key=lambda kv: -abs(kv[1]))
    return rk, re_


def _explain(terms: Mapping[str, float], delta: float, kinds: Sequence[tuple[str, float]],
             edges: Sequence[tuple[str, float]]) -> str:
    if not terms:
        return ""
    top = sorted(terms.items(), key=lambda kv: -abs(kv[1]))[:3]
    parts = [f"{k} {fmt_s(v, signed=True)}" for k, v in top if abs(v) > 0]
    text = (f"measured {'over' if delta >= 0 else 'under'} the prediction by "
            f"{fmt_s(abs(delta))}; largest terms: " + ", ".join(parts))
    if kinds:
        text += "; op kinds: " + ", ".join(f"{k} {fmt_s(v, signed=True)}"
                                          for k, v in kinds[:3])
    if edges:
        text += "; edges: " + ", ".join(f"{k} {fmt_s(v, signed=True)}" for k, v in edges[:2])
    return text


def _throughput_attribution(program: ExecProgram, plan: Plan, tel: Telemetry, phase: str,
                            solo: dict[tuple[str, str], SoloRecord], measured_rps: float
                            ) -> ThroughputAttribution | None:
    if measured_rps <= 0 or plan.throughput.period_s <= 0:
        return None
    batch = max(1, int(plan.batch))
    measured_period = batch / measured_rps
    reqs = sorted({r.request for r in tel.requests if r.phase == phase})
    if len(reqs) < 3:
        return None
    steady = set(reqs[len(reqs) // 4:])
    busy: dict[str, list[float]] = {}
    per_req: dict[tuple[str, int], float] = {}
    cpu_req: dict[tuple[str, int], float] = {}
    kern: dict[tuple[str, int, str], float] = {}
    for r in tel.tasks:
        if r.phase != phase or r.request not in steady:
            continue
        if r.kind == "transfer":
            marks = dict(r.marks)
            w = (marks.get("sent", r.start_ns) - r.start_ns) / 1e9
            rd = (r.end_ns - marks.get("read_start", r.end_ns)) / 1e9
            per_req[(r.device, r.request)] = per_req.get((r.device, r.request), 0.0) + w
            dst = r.dst_device or r.device
            per_req[(dst, r.request)] = per_req.get((dst, r.request), 0.0) + rd
            cpu_req[(r.device, r.request)] = cpu_req.get((r.device, r.request), 0.0) + \
                marks.get("send_cpu_ns", 0) / 1e9
            cpu_req[(dst, r.request)] = cpu_req.get((dst, r.request), 0.0) + \
                marks.get("receive_cpu_ns", 0) / 1e9
            kern[(r.device, r.request, "transfer")] = kern.get(
                (r.device, r.request, "transfer"), 0.0) + w
            kern[(dst, r.request, "transfer")] = kern.get((dst, r.request, "transfer"),
                                                          0.0) + rd
            continue
        dur = r.duration_ns / 1e9
        per_req[(r.device, r.request)] = per_req.get((r.device, r.request), 0.0) + dur
        cpu_req[(r.device, r.request)] = cpu_req.get((r.device, r.request), 0.0) + \
            r.cpu_ns / 1e9
        cat = {"compute": "compute", "conversion": "conversion"}.get(r.kind, "io")
        kern[(r.device, r.request, cat)] = kern.get((r.device, r.request, cat), 0.0) + \
            r.kernel_ns / 1e9
        kern[(r.device, r.request, "hidden")] = kern.get((r.device, r.request, "hidden"),
                                                         0.0) + r.hidden_conversion_ns / 1e9
    for (dev, _r), v in per_req.items():
        busy.setdefault(dev, []).append(v)
    med_busy = {d: statistics.median(v) for d, v in busy.items()}
    if not med_busy:
        return None
    threads = {d.name: max(1, len(d.cores or ())) for d in program.devices}
    share: dict[str, float] = {}
    for dev in med_busy:
        wall = sum(v for (d, _r), v in per_req.items() if d == dev)
        cpu = sum(v for (d, _r), v in cpu_req.items() if d == dev)
        if wall > 0 and cpu > 0:
            share[dev] = min(1.0, cpu / threads.get(dev, 1) / wall)
    occ = {name: float(v) for name, v in plan.throughput.occupancy_s}
    bneck = max(med_busy, key=lambda d: med_busy[d])
    pred_period = float(plan.throughput.period_s)
    pred_dev = occ.get(bneck, 0.0)

    def med(dev: str, cat: str) -> float:
        vals = [kern.get((dev, r, cat), 0.0) for r in steady]
        return statistics.median(vals) if vals else 0.0

    # predicted uncontended work of the bottleneck device, split compute / conversion
    pred_compute = sum(t.end_s - t.start_s - t.contention_s for t in plan.schedule.tasks
                       if t.device == bneck and t.kind.value == "compute")
    pred_conv = sum(t.end_s - t.start_s - t.contention_s for t in plan.schedule.tasks
                    if t.device == bneck and t.kind.value == "conversion")
    solo_compute = sum(s.kernel_s for (name, dev), s in solo.items()
                       if dev == bneck and name in program.vertices
                       and program.task(name).device == bneck)
    solo_conv = sum(s.kernel_s for (name, dev), s in solo.items() if dev == bneck and
                    name.startswith("conv:"))
    k_comp = med(bneck, "compute")
    k_conv = med(bneck, "conversion")
    terms = _terms0()
    b = med_busy[bneck]
    terms["compute"] = (solo_compute or k_comp) - pred_compute
    terms["conversion"] = (solo_conv or k_conv) - pred_conv + med(bneck, "hidden")
    terms["contention"] = (k_comp - (solo_compute or k_comp)) + (k_conv - (solo_conv or k_conv))
    terms["transfer"] = med(bneck, "transfer")
    # whatever the occupancy model counted beyond compute+conversion of the device
    other_pred = pred_dev - pred_compute - pred_conv
    terms["launch/dispatch"] = b - k_comp - k_conv - med(bneck, "hidden") - \
        med(bneck, "transfer") - other_pred
    terms["waiting"] = measured_period - b
    terms["path"] = pred_dev - pred_period
    delta = measured_period - pred_period
    top = sorted(terms.items(), key=lambda kv: -abs(kv[1]))[:3]
    text = (f"measured period {fmt_s(measured_period)} vs predicted {fmt_s(pred_period)} "
            f"(bottleneck {bneck} measured, {plan.throughput.bottleneck_resource} predicted); "
            f"{'+' if delta >= 0 else '-'}{fmt_s(abs(delta))}: " +
            ", ".join(f"{k} {fmt_s(v, signed=True)}" for k, v in top))
    if bneck in share and share[bneck] < 0.9:
        text += (f"; its worker got {share[bneck]:.0%} of its cores while busy (other "
                 f"processes held them the rest of the time)")
    return ThroughputAttribution(pred_period, measured_period,
                                 plan.throughput.bottleneck_resource, bneck, med_busy,
                                 {d: occ.get(d, 0.0) for d in med_busy}, terms, text, share)


def attribute_latency(program: ExecProgram, plan: Plan, tel: Telemetry,
                      solo: Sequence[SoloRecord], phase: str
                      ) -> tuple[Attribution, LatencyStats | None]:
    """The latency attribution of the median-latency request of ``phase`` (isolated
    requests; module docstring), and every request's latency less the time the workers
    on its measured critical path were off their cores (``None`` when no request's path
    could be walked)."""
    iso = tel.requests_of(phase)
    if not iso:
        raise PlacewiseError(f"no {phase} requests to attribute")
    solo_idx = _solo_index(program, solo)
    ordered = sorted(iso, key=lambda r: r.latency_ns)
    med_req = ordered[(len(ordered) - 1) // 2]
    # every request's latency less the time its critical path's workers were off their
    # cores: what the same run measured while our workers held their cores
    on_cpu: list[float] = []
    for r in iso:
        with contextlib.suppress(PlacewiseError, KeyError):
            st_r = _steps_of_request(program, tel.tasks_of(r.request))
            sh_r, _, _, _ = _critical_path(program, plan, st_r, solo_idx, r.submit_ns,
                                           r.outputs_ns)
            on_cpu.append(r.latency_ns / 1e9 - sum(x.off_cpu_s for x in sh_r))
    lat_on_cpu = latency_stats(on_cpu) if on_cpu else None
    steps = _steps_of_request(program, tel.tasks_of(med_req.request))
    shares, terms, head, tail = _critical_path(program, plan, steps, solo_idx,
                                               med_req.submit_ns, med_req.outputs_ns)
    tasks = _task_shares(program, plan, tel, phase, solo_idx)
    kinds, edges = _rank_labels(shares)
    delta = med_req.latency_ns / 1e9 - plan.predicted_latency_s
    off_cpu = sum(s.off_cpu_s for s in shares)
    explanation = _explain(terms, delta, kinds, edges)
    if off_cpu > 0.1 * abs(delta) and off_cpu > 0:
        explanation += (f"; the critical path's workers were off their cores for "
                        f"{fmt_s(off_cpu)} (other processes ran on them)")
    attribution = Attribution(med_req.request, med_req.latency_ns / 1e9,
                              plan.predicted_latency_s, terms, tuple(shares), tuple(tasks),
                              tuple(kinds), tuple(edges), head, tail, explanation, off_cpu)
    return attribution, lat_on_cpu


def attribute_throughput(program: ExecProgram, plan: Plan, tel: Telemetry,
                         solo: Sequence[SoloRecord], phase: str, measured_rps: float
                         ) -> ThroughputAttribution | None:
    """The throughput attribution of the pipelined stream ``phase`` on the measured
    bottleneck device (module docstring); ``None`` without a measured or predicted
    throughput or with fewer than three requests."""
    return _throughput_attribution(program, plan, tel, phase, _solo_index(program, solo),
                                   measured_rps)
