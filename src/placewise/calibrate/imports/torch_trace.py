"""torch.profiler Chrome traces (``prof.export_chrome_trace``) read into an ``ImportedProfile``,
and aligned with a placewise graph built from ``torch.export``.

A trace's ``traceEvents`` hold host events (``cpu_op``: the aten ops; ``user_annotation``:
``record_function`` ranges, ``ProfilerStep#N``; ``python_function``: Python frames, among
them ``nn.Module: Name_i`` when recorded ``with_stack``/``with_modules``; ``cuda_runtime`` /
``cuda_driver``: launches) and device events (``kernel``, ``gpu_memcpy``, ``gpu_memset``)
that name their launch by ``args.correlation`` (and the op by ``args["External id"]``).

What becomes what:

- a **region** is a top-level op (a ``cpu_op`` named ``ns::op`` inside no other; ranges
  such as ``ProfilerStep#N`` or ``forward`` that some torch versions record as ``cpu_op``
  are not ops but annotations around them): what it
  does through its sub-ops is its own. Its device events are found through the launches
  inside it (``correlation``; ``External id`` where no launch is recorded). With kernels it
  is a GPU region whose time is the summed time of its kernels and memsets, its host time in
  ``launch_s``; without, a CPU region whose time is its own host time;
- ``module_path`` is the stack of ``nn.Module: Name_i`` frames around the op, joined by
  ``/`` (``Net_0/Linear_1``), empty when the trace was taken without them;
- each ``gpu_memcpy`` is a ``MeasuredTransfer`` of kind ``"copy"``: the direction from its
  name (``Memcpy HtoD (Pinned -> Device)``), ``pinned`` from the host side's word
  (``Pinned``/``Pageable``; ``None`` for device-to-device), bytes from ``args.bytes`` (else
  ``memory bandwidth (GB/s)`` x duration);
- several ``ProfilerStep#N`` are several runs: the first is dropped as warm-up, each other
  step gives each op one sample (ops are matched across steps by name and occurrence);
  without steps (or with one) the whole trace is one run, and a note says so.

``align_torch`` fills each region's ``nodes`` with the graph op it is: the trace's op
sequence and the graph's (``provenance.source_op`` such as ``aten.linear.default``) are
aligned in order by op type, and where both carry module paths the pairing of trace modules
(``Net_0/Linear_1``) with graph modules (``fc2``) must stay one to one.

>>> _op_type("aten::linear"), _op_type("aten.relu_.default"), _op_type("aten.add.Tensor")
('linear', 'relu', 'add')
>>> _copy_ends("Memcpy HtoD (Pinned -> Device)"), _copy_ends("Memcpy DtoH (Device -> Pageable)")
(('host', 'device', True), ('device', 'host', False))
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import difflib
import math
import os
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from placewise.calibrate.imports.records import (
    ImportedProfile,
    MeasuredRegion,
    MeasuredTransfer,
    ProfileSource,
    file_sha256,
)
from placewise.errors import ProfileError
from placewise.io import load_json

if TYPE_CHECKING:
    from placewise.graph.ir import Graph

__all__ = ["align_torch", "read_torch_trace"]

#: an event longer than a day (in the trace's microseconds) is not a measurement
MAX_DUR_US = 86_400e6
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_MODULE = re.compile(r"^nn\.Module: (.+)$")
_COPY = re.compile(r"^Memcpy (HtoD|DtoH|DtoD|HtoH|PtoP)(?: \((\w+) -> (\w+)\))?")
_HOST_OP = {"cpu_op", "Operator"}
_LAUNCH = {"cuda_runtime", "cuda_driver", "Runtime", "Driver"}
_KERNEL = {"kernel", "Kernel", "gpu_memset", "Memset"}
_MEMCPY = {"gpu_memcpy", "Memcpy"}
_PRECISION = {"float": "fp32", "c10::Half": "fp16", "c10::BFloat16": "bf16",
              "double": "fp64", "c10::qint8": "int8", "signed char": "int8",
              "c10::Float8_e4m3fn": "fp8"}


def _op_type(name: str) -> str:
    """``aten::linear`` / ``aten.linear.default`` -> ``linear`` (in-place ``_`` dropped)."""
    base = name.split("::", 1)[1] if "::" in name else name
    if base.startswith("aten."):
        base = base[5:].split(".", 1)[0]
    return base.rstrip("_") or base


def _copy_ends(name: str) -> tuple[str, str, bool | None]:
    m = _COPY.match(name)
    if not m:
        return "", "", None
    kind, left, right = m.group(1), m.group(2) or "", m.group(3) or ""
    side = {"HtoD": left, "DtoH": right}.get(kind, "")
    pinned = {"Pinned": True, "Pageable": False}.get(side)
    src = "host" if kind in ("HtoD", "HtoH") else "device"
    dst = "host" if kind in ("DtoH", "HtoH") else "device"
    return src, dst, pinned


# ---- events ----------------------------------------------------------------------------------
@dataclass(slots=True)
class _Ev:
    index: int
    cat: str
    name: str
    ts: float
    dur: float
    thread: tuple[str, str]
    args: dict[str, Any]
    parent: int = -1
    top: int = -1  # the top-level cpu_op around it (itself for a top-level op)
    modules: tuple[str, ...] = ()
    device: list[int] = field(default_factory=list)  # kernels/memsets attributed to a top op

    @property
    def end(self) -> float:
        return self.ts + self.dur


def _num(value: Any, *, file: str, place: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProfileError(f"expected a number, got {type(value).__name__}", file=file,
                           place=place)
    return float(value)


def _events(doc: Any, file: str) -> list[_Ev]:
    if isinstance(doc, dict):
        raw = doc.get("traceEvents")
    else:
        raise ProfileError("expected a JSON object with traceEvents (torch.profiler "
                           f"export_chrome_trace), got {type(doc).__name__}", file=file)
    if not isinstance(raw, list):
        raise ProfileError("traceEvents is not a list", file=file, place="traceEvents")
    out: list[_Ev] = []
    for i, e in enumerate(raw):
        place = f"traceEvents[{i}]"
        if not isinstance(e, dict):
            raise ProfileError("expected an event object", file=file, place=place)
        if e.get("ph") != "X":
            continue
        name, cat = e.get("name"), e.get("cat", "")
        if not isinstance(name, str) or not isinstance(cat, str):
            raise ProfileError("event has no name or category text", file=file, place=place)
        ts = _num(e.get("ts"), file=file, place=f"{place}.ts")
        dur = _num(e.get("dur"), file=file, place=f"{place}.dur")
        if dur < 0 or dur > MAX_DUR_US or not math.isfinite(ts) or abs(ts) > 1e18:
            raise ProfileError(f"event {name[:60]!r} has ts {ts!r} us, dur {dur!r} us (not a "
                               f"time: dur must be 0..{MAX_DUR_US:g} us)", file=file,
                               place=f"{place}.dur")
        args = e.get("args", {})
        if not isinstance(args, dict):
            raise ProfileError("args is not an object", file=file, place=f"{place}.args")
        out.append(_Ev(len(out), cat, name, ts, dur, (str(e.get("pid")), str(e.get("tid"))),
                       args))
    return out


def _is_op(ev: _Ev) -> bool:
    """An operator (``aten::addmm``, ``fbgemm::...``, ``autograd::engine::...``), not a
    ``record_function`` range recorded as a ``cpu_op`` (``forward``, ``ProfilerStep#3``)."""
    return ev.cat in _HOST_OP and "::" in ev.name


def _nest(events: list[_Ev]) -> None:
    """Parent links and module stacks of host events, per thread, by time containment."""
    by_thread: dict[tuple[str, str], list[_Ev]] = defaultdict(list)
    for ev in events:
        if ev.cat in _HOST_OP or ev.cat in _LAUNCH or ev.cat in ("user_annotation",
                                                                   "python_function"):
            by_thread[ev.thread].append(ev)
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e.ts, -e.dur))
        stack: list[_Ev] = []
        for ev in evs:
            while stack and stack[-1].end < ev.end - 1e-3:
                stack.pop()
            parent = stack[-1] if stack else None
            ev.parent = parent.index if parent is not None else -1
            mods = parent.modules if parent is not None else ()
            m = _MODULE.match(ev.name) if ev.cat == "python_function" else None
            ev.modules = (*mods, m.group(1)) if m else mods
            if _is_op(ev):
                ev.top = parent.top if parent is not None and parent.top >= 0 else ev.index
            elif parent is not None:
                ev.top = parent.top
            stack.append(ev)


def _attribute(events: list[_Ev]) -> int:
    """Attach kernels and memsets to the top-level op that launched them; returns how many
    device events no op claims."""
    by_corr = {ev.args.get("correlation"): ev for ev in events
               if ev.cat in _LAUNCH and ev.args.get("correlation") is not None}
    by_ext = {ev.args.get("External id"): ev for ev in events
              if _is_op(ev) and ev.args.get("External id") is not None}
    lost = 0
    for ev in events:
        if ev.cat not in _KERNEL and ev.cat not in _MEMCPY:
            continue
        host = by_corr.get(ev.args.get("correlation"))
        if host is None or host.top < 0:
            host = by_ext.get(ev.args.get("External id"))
        if host is None or host.top < 0:
            lost += ev.cat in _KERNEL
            continue
        ev.top = host.top
        if ev.cat in _KERNEL:
            events[host.top].device.append(ev.index)
    return lost


# ---- runs ------------------------------------------------------------------------------------
def _steps(events: Sequence[_Ev]) -> list[_Ev]:
    seen: dict[str, _Ev] = {}
    for ev in events:
        if _STEP.match(ev.name) and ev.name not in seen:
            seen[ev.name] = ev
    return sorted(seen.values(), key=lambda e: e.ts)


def _in_step(ev: _Ev, steps: Sequence[_Ev]) -> int:
    for k, st in enumerate(steps):
        if st.ts <= ev.ts <= st.end:
            return k
    return -1


def _precision(ev: _Ev) -> str:
    types = ev.args.get("Input type")
    if isinstance(types, list) and types and isinstance(types[0], str):
        return _PRECISION.get(types[0], "")
    return ""


def _shapes(ev: _Ev) -> tuple[tuple[int, ...], ...]:
    dims = ev.args.get("Input Dims")
    if not isinstance(dims, list):
        return ()
    return tuple(tuple(d) for d in dims if isinstance(d, list) and d
                 and all(isinstance(x, int) and not isinstance(x, bool) for x in d))


@dataclass(slots=True)
class _Acc:
    first: _Ev
    seq: int
    samples: list[float] = field(default_factory=list)
    launch: list[float] = field(default_factory=list)
    on_gpu: bool = False


def _regions(events: list[_Ev], runs: Sequence[int], steps: Sequence[_Ev]
             ) -> list[MeasuredRegion]:
    tops = sorted((ev for ev in events if ev.top == ev.index), key=lambda e: e.ts)
    acc: dict[tuple[str, int], _Acc] = {}
    for run in runs:
        seen: Counter[str] = Counter()
        for ev in tops:
            if steps and _in_step(ev, steps) != run:
                continue
            key = (ev.name, seen[ev.name])
            seen[ev.name] += 1
            a = acc.setdefault(key, _Acc(ev, len(acc)))
            if ev.device:
                a.on_gpu = True
                a.samples.append(sum(events[i].dur for i in ev.device) * 1e-6)
                a.launch.append(ev.dur * 1e-6)
            else:
                a.samples.append(ev.dur * 1e-6)
    out = []
    for (name, k), a in sorted(acc.items(), key=lambda kv: kv[1].seq):
        out.append(MeasuredRegion(
            label=f"{name}#{k}", op_type=name, nodes=(), engine="gpu" if a.on_gpu else "cpu",
            samples_s=tuple(a.samples), in_shapes=_shapes(a.first),
            precision=_precision(a.first), module_path="/".join(a.first.modules), seq=a.seq,
            launch_s=tuple(a.launch) if a.on_gpu and len(a.launch) == len(a.samples) else ()))
    return out


def _nbytes(ev: _Ev) -> int:
    b = ev.args.get("bytes")
    if isinstance(b, int) and not isinstance(b, bool) and b >= 0:
        return b
    bw = ev.args.get("memory bandwidth (GB/s)")
    if isinstance(bw, int | float) and not isinstance(bw, bool) and bw > 0:
        return round(bw * 1e9 * ev.dur * 1e-6)
    return 0


def _transfers(events: list[_Ev], runs: Sequence[int], steps: Sequence[_Ev]
               ) -> list[MeasuredTransfer]:
    copies = sorted((ev for ev in events if ev.cat in _MEMCPY), key=lambda e: e.ts)
    acc: dict[tuple[str, int, int], list[Any]] = {}
    for run in runs:
        seen: Counter[tuple[str, int]] = Counter()
        for ev in copies:
            where = events[ev.top] if ev.top >= 0 else ev
            if steps and _in_step(where, steps) != run:
                continue
            n = _nbytes(ev)
            key = (ev.name, n, seen[(ev.name, n)])
            seen[(ev.name, n)] += 1
            acc.setdefault(key, [ev, []])[1].append(ev.dur * 1e-6)
    out = []
    for (name, n, k), (ev, samples) in acc.items():
        src, dst, pinned = _copy_ends(name)
        by = f" by {events[ev.top].name}" if ev.top >= 0 else ""
        out.append(MeasuredTransfer(label=f"{name} {n} B #{k}{by}", kind="copy",
                                    src=src or "device", dst=dst or "device", nbytes=n,
                                    samples_s=tuple(samples), engine="gpu", pinned=pinned))
    return out


def _date(doc: dict[str, Any], events: Sequence[_Ev], path: str) -> tuple[str, str]:
    first = min((ev.ts for ev in events), default=0.0)
    base = doc.get("baseTimeNanoseconds")
    if isinstance(base, int) and not isinstance(base, bool):
        when = base * 1e-9 + first * 1e-6
    elif 1.4e15 <= first <= 4.1e15:  # microseconds since 1970 (2014..2099)
        when = first * 1e-6
    else:
        when = os.stat(path).st_mtime
        return _dt.datetime.fromtimestamp(when, tz=_dt.UTC).isoformat(timespec="seconds"), \
            "file mtime"
    if not 1.4e9 <= when <= 4.1e9:
        when = os.stat(path).st_mtime
        return _dt.datetime.fromtimestamp(when, tz=_dt.UTC).isoformat(timespec="seconds"), \
            "file mtime"
    return _dt.datetime.fromtimestamp(when, tz=_dt.UTC).isoformat(timespec="seconds"), "file"


def _device(doc: dict[str, Any]) -> str:
    props = doc.get("deviceProperties")
    if isinstance(props, list) and props and isinstance(props[0], dict):
        name = props[0].get("name")
        return name if isinstance(name, str) else ""
    return ""


def read_torch_trace(path: str | os.PathLike[str]) -> ImportedProfile:
    """Read a torch.profiler Chrome trace. Raises ``ProfileError`` (one line: file, place,
    problem) for a truncated, hostile or malformed file, or one with no op in it."""
    file = os.fspath(path)
    doc = load_json(file, what="torch.profiler trace", error=ProfileError)
    events = _events(doc, file)
    _nest(events)
    lost = _attribute(events)
    steps = _steps(events)
    notes = []
    if len(steps) >= 2:
        runs, dropped = list(range(1, len(steps))), 1
        notes.append(f"{len(steps)} profiler steps: the first dropped as warm-up, "
                     f"{len(runs)} kept")
    else:
        runs, dropped = [0], 0
        notes.append("one run: the trace holds " + ("one profiler step" if steps else
                                                   "no ProfilerStep#N") + ", so no spread")
        steps = steps[:1]
    regions = _regions(events, runs, steps)
    if not regions:
        raise ProfileError("no aten op (cpu_op event) in the trace", file=file)
    transfers = _transfers(events, runs, steps)
    if lost:
        notes.append(f"{lost} kernels or memsets could not be tied to an op (no launch or "
                     f"External id recorded): left out")
    if not any(r.module_path for r in regions):
        notes.append("no nn.Module frames (trace taken without with_stack/with_modules): "
                     "ops align with a graph by order and type only")
    precisions = {r.precision for r in regions if r.precision}
    date, date_from = _date(doc, events, file)
    source = ProfileSource(tool="torch.profiler", tool_version="", file=file,
                           sha256=file_sha256(file), date=date, date_from=date_from,
                           device=_device(doc))
    run_s = tuple(steps[k].dur * 1e-6 for k in runs) if steps else ()
    return ImportedProfile(source=source, regions=tuple(regions), transfers=tuple(transfers),
                           runs=len(runs), warmup_dropped=dropped, run_samples_s=run_s,
                           precision=precisions.pop() if len(precisions) == 1 else "",
                           notes=tuple(notes))


# ---- alignment with a graph ------------------------------------------------------------------
def _module_pairs(pairs: Iterable[tuple[MeasuredRegion, Any]]) -> dict[str, str]:
    votes: dict[str, Counter[str]] = defaultdict(Counter)
    for region, op in pairs:
        if region.module_path and op.provenance.module_path:
            votes[region.module_path][op.provenance.module_path] += 1
    chosen: dict[str, str] = {}
    taken: set[str] = set()
    for trace_mod, counter in sorted(votes.items(), key=lambda kv: -sum(kv[1].values())):
        for graph_mod, _ in counter.most_common():
            if graph_mod not in taken:
                chosen[trace_mod] = graph_mod
                taken.add(graph_mod)
                break
    return chosen


def align_torch(profile: ImportedProfile, graph: Graph) -> ImportedProfile:
    """``profile`` with each region's ``nodes`` set to the graph op it aligns with (in
    order, by op type; by module path where both say) and a note saying how many aligned.
    Regions that align with nothing keep ``nodes == ()``."""
    regions = sorted(profile.regions, key=lambda r: r.seq)
    ops = [op for op in graph.ops if op.provenance.source_op]
    a = [_op_type(r.op_type) for r in regions]
    b = [_op_type(op.provenance.source_op) for op in ops]
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    pairs = [(regions[blk.a + i], ops[blk.b + i])
             for blk in matcher.get_matching_blocks() for i in range(blk.size)]
    modules = _module_pairs(pairs)
    nodes: dict[str, str] = {}
    conflicts = 0
    for region, op in pairs:
        want = modules.get(region.module_path)
        if want is not None and op.provenance.module_path and want != op.provenance.module_path:
            conflicts += 1
            continue
        nodes[region.label] = op.name
    new = tuple(dataclasses.replace(r, nodes=(nodes[r.label],)) if r.label in nodes else r
                for r in profile.regions)
    note = (f"aligned {len(nodes)} of {len(regions)} trace ops with {len(ops)} graph ops "
            f"{graph.name!r} by order and op type"
            + (", module paths consistent" if modules else "")
            + (f"; {conflicts} pairs refused for a module path that disagrees"
               if conflicts else ""))
    return dataclasses.replace(profile, regions=new, notes=(*profile.notes, note))
