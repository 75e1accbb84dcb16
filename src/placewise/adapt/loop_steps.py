"""The steps of the closed loop (``placewise.adapt.loop``): the initial plan set, serving a
window on every arm, the rollback check, recalibration, replanning and the guardrail.

Every step calls the piece that owns the work: plan sets ``adapt.planset``
(``build_plan_set``, ``mix_of_trace``), serving ``adapt.serving.open_service``, telemetry
windows ``runtime.windows.windows_from_telemetry``, recalibration
``adapt.recalibrate.recalibrate``, the guardrail ``adapt.guardrail.decide`` and
``adapt.promote.promote``, the last-known-good ``adapt.store.LastKnownGood``, the
evaluator ``schedule.evaluate`` (a plan's placement priced under another calibration), tags
``runtime.telemetry``. Nothing here prints.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from placewise.adapt.guardrail import decide
from placewise.adapt.loop_figures import (
    mix_distance,
    prediction_rows,
    split_windows,
    total_error,
    window_gain,
)
from placewise.adapt.planset import build_plan_set, save_plan_set
from placewise.adapt.planset.mix import mix_of_trace
from placewise.adapt.promote import promote
from placewise.adapt.recalibrate import empty_calibration, recalibrate
from placewise.adapt.serving import open_service
from placewise.adapt.store import LastKnownGood
from placewise.adapt.trace import ShapeTrace, save_shape_trace
from placewise.cost.calibrated import load_calibration
from placewise.cost.load import load_cost_model
from placewise.io import atomic_write_json
from placewise.plan import build_plan
from placewise.planning import build_problem
from placewise.runtime.telemetry import (
    STABLE_TAG_KEYS,
    model_fingerprint,
    require_comparable,
    tag_differences,
)
from placewise.runtime.windows import windows_from_telemetry
from placewise.schedule.evaluate import evaluate
from placewise.serve.real import SERVE
from placewise.validate.compare import machine_tags

__all__ = ["ALLOWED_TO_DIFFER", "Arm", "LoopState", "adapt", "envelope_of", "expected_cost",
           "initial_state", "least_window_s", "mix_json", "repredict", "serve_window"]

#: stable tags in which two arms served on the same window may differ: what makes them two
#: plan sets (as ``adapt.promote`` allows; the graph is the one of a set's first bucket,
#: bound at that bucket's shape)
ALLOWED_TO_DIFFER = ("plan_fingerprint", "calibration_fingerprint", "threads",
                     "graph_fingerprint")
_VOLATILE_SHOWN = ("date", "load_average_1m", "host", "phase", "block")
#: untimed executor requests per bucket before each arm serves a window
WARMUP = 3
#: the arm name of a set on probation's predecessor
LKG = "last-known-good"

Clock = Callable[[], float]


@dataclass
class Arm:
    """A plan set in service: its file, the loaded set, its resident service, the mix it
    was planned for."""

    name: str
    file: Path
    plan_set: Any
    service: Any
    mix: Any

    @property
    def fingerprint(self) -> str:
        return str(self.plan_set.fingerprint())


@dataclass
class LoopState:
    """What the loop holds between windows (the record is the output)."""

    model: str
    machine: Any
    envelope: dict[str, list[int]]
    calibration: Any
    calibration_path: Path
    store: Any
    stack: ExitStack
    static: Arm
    adaptive: Arm
    seed: int = 0
    probation: Arm | None = None  # the set a promotion replaced, served until confirmed
    phases: list[dict[str, Any]] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    planned: int = 0
    _cost_models: dict[str, Any] = field(default_factory=dict)
    _repredicted: dict[tuple[str, str], Any] = field(default_factory=dict)

    def cost_model(self) -> Any:
        """The cost model of the current calibration (cached per calibration)."""
        fp = self.calibration.fingerprint()
        if fp not in self._cost_models:
            self._cost_models[fp] = load_cost_model(self.machine, self.calibration)
        return self._cost_models[fp]


# ---- small helpers -----------------------------------------------------------------------------
def envelope_of(trace: ShapeTrace) -> dict[str, list[int]]:
    """The envelope covering every shape of ``trace``: per axis, powers of two from the
    smallest power of two at or below its least size up to the first at or above its
    largest.

    >>> from placewise.adapt.trace import drifting_trace
    >>> envelope_of(drifting_trace(requests=50, values=(1, 16), seed=0))
    {'batch': [1, 2, 4, 8, 16]}
    """
    env: dict[str, list[int]] = {}
    for axis in trace.axes:
        vals = [int(s[axis]) for s in trace.shapes]
        lo = 1 << (min(vals).bit_length() - 1)
        hi = 1 << (max(vals) - 1).bit_length()
        out, v = [], lo
        while v <= hi:
            out.append(v)
            v *= 2
        env[axis] = out
    return env


def mix_json(mix: Any) -> list[dict[str, Any]]:
    """A ``planset.mix.Mix`` as LOOP.json lists it: ``[{"shape", "weight"}]``, most frequent
    first."""
    items = sorted(mix.items, key=lambda it: (-it[1], sorted(it[0].items())))
    return [{"shape": dict(s), "weight": float(p)} for s, p in items]


def least_window_s(win: ShapeTrace, arms: int = 2) -> float:
    """The least budget a window needs to be served on ``arms`` arms."""
    return arms * (win.duration_s + 1.0)


def _tags_shown(tags: Mapping[str, str]) -> dict[str, str]:
    return {k: str(tags[k]) for k in (*STABLE_TAG_KEYS, *_VOLATILE_SHOWN) if k in tags}


def _phase(st: LoopState, name: str, window: int, arm: str | None, tags: Mapping[str, str],
           plan_set: str | None) -> dict[str, Any]:
    """Record a phase with its tags and which stable tags differ from the phase of the same
    kind before it (``serve``, ``plan``, ``guardrail``: its name's first word)."""
    kind = name.split()[0]
    prev = next((p["tags"] for p in reversed(st.phases) if p["kind"] == kind), None)
    rec = {"index": len(st.phases), "name": name, "kind": kind, "window": window, "arm": arm,
           "plan_set": plan_set, "calibration": st.calibration.fingerprint(),
           "tags": _tags_shown(tags),
           "differs_from_previous": {} if prev is None else
           {k: list(v) for k, v in tag_differences(prev, tags).items()}}
    st.phases.append(rec)
    return rec


def _plan_tags(st: LoopState, ps: Any) -> dict[str, str]:
    """The tags of a planning phase: this machine's stable tags, the model, the calibration
    planned with and the plan set made."""
    return {**machine_tags(), "model_fingerprint": model_fingerprint(st.model),
            "calibration_fingerprint": st.calibration.fingerprint(),
            "plan_fingerprint": str(ps.fingerprint()), "seed": str(st.seed)}


def _rel(path: Path, work: Path) -> str:
    try:
        return str(path.relative_to(work))
    except ValueError:
        return str(path)


# ---- planning ----------------------------------------------------------------------------------
def _plan(st: LoopState, mix: Any, work: Path, name: str, cfg: Any) -> tuple[Path, Any]:
    """A plan set for ``mix`` with the current calibration, saved under ``work``."""
    ps = build_plan_set(st.model, st.machine, st.envelope, mix,
                        calibration=st.calibration_path, time_limit_s=cfg.plan_time_s,
                        seed=cfg.seed)
    path = work / f"{name}.json"
    save_plan_set(ps, path)
    st.planned += 1
    st.files[name] = _rel(path, work)
    return path, ps


def _open(st: LoopState, name: str, path: Path, ps: Any, mix: Any) -> Arm:
    # every device in a worker process: this process keeps its affinity, so the stable
    # tags (usable cores) of every run are the machine's, as the calibration records them
    svc = st.stack.enter_context(open_service(path, seed=st.seed, machine=st.machine,
                                              executor_options={"inline_host": False}))
    return Arm(name, path, ps, svc, mix)


def initial_state(model: str, machine: Any, trace: ShapeTrace, first: ShapeTrace, cfg: Any,
                  work: Path, calibration: str | Path | None, stack: ExitStack) -> LoopState:
    """Plan the initial plan set for the first window's mix, keep it as the first
    last-known-good and open both arms' services on it."""
    if calibration is None:
        cal = empty_calibration(machine, machine_tags())
        cal_path = work / "calibration-r0.json"
        cal.save(cal_path)
    else:
        cal_path = Path(calibration)
        cal = load_calibration(cal_path)
    env = {a: [int(v) for v in vs] for a, vs in (cfg.envelope or envelope_of(trace)).items()}
    store = LastKnownGood(work / "lkg")
    placeholder = Arm("static", Path(), None, None, None)
    st = LoopState(model, machine, env, cal, cal_path, store, stack, placeholder, placeholder,
                   seed=int(cfg.seed))
    st.files["calibration-r0"] = _rel(cal_path, work)
    mix0 = mix_of_trace(first)
    path, ps = _plan(st, mix0, work, "planset-0", cfg)
    store.keep(path, {"decision": {"decision": "initial", "reason": "the plan set of the "
                                   "first window's shape mix"}})
    st.static = _open(st, "static", path, ps, mix0)
    st.adaptive = _open(st, "adaptive", path, ps, mix0)
    _phase(st, "plan the initial plan set", 0, None, _plan_tags(st, ps), ps.fingerprint())
    return st


# ---- serving a window --------------------------------------------------------------------------
def _arm_record(arm: Arm, blocks: Sequence[Any], win: ShapeTrace) -> dict[str, Any]:
    """An arm's figures of one window served as consecutive ``blocks`` (slices of it):
    requests (conserved), latency, throughput (completed over the blocks' spans), padding,
    per bucket."""
    offered = len(win)
    req = {"offered": offered, "arrived": 0, "completed": 0, "rejected": 0, "timed_out": 0,
           "in_flight": 0}
    conserved = True
    span = 0.0
    for blk in blocks:
        r = blk.result
        for k in ("arrived", "completed", "rejected", "timed_out", "in_flight"):
            req[k] += int(getattr(r, k))
        conserved = conserved and bool(r.conserved())
        span += float(r.span_s)
    req["not_arrived"] = offered - req["arrived"]
    req["conserved"] = conserved and offered == req["arrived"] + req["not_arrived"]
    lat = _samples(blocks)
    done = lat[np.isfinite(lat)]
    pad = [blk.padding for blk in blocks]
    return {"plan_set": arm.fingerprint, "file": str(arm.file.name), "requests": req,
            "latency_p50_s": _q(done, 0.5), "latency_p99_s": _q(done, 0.99),
            "latency_mean_s": float(done.mean()) if len(done) else None,
            "throughput_rps": req["completed"] / span if span > 0 else 0.0, "span_s": span,
            "padding_waste": _share(pad), "padding_time_s": sum(p.time_s for p in pad),
            "buckets": _bucket_records(arm, blocks), "blocks": len(blocks),
            "notes": list(dict.fromkeys(n for blk in blocks for n in blk.notes))}


def _share(pads: Sequence[Any]) -> float:
    run = sum(p.elements_run for p in pads)
    return sum(p.padded_elements for p in pads) / run if run else 0.0


def _bucket_records(arm: Arm, blocks: Sequence[Any]) -> list[dict[str, Any]]:
    """Per bucket that served something: requests, latency of its completed requests,
    its plan's predicted latency, padding."""
    out = []
    for k, name in enumerate(b.name for b in blocks[0].buckets):
        served = [blk.buckets[k] for blk in blocks]
        arrived = sum(b.arrived for b in served)
        if not arrived:
            continue
        lat = np.concatenate([np.asarray(blk.latency_s, dtype=float)[blk.bucket_of == k]
                              for blk in blocks])
        lat = lat[np.isfinite(lat)]
        base = arm.plan_set.buckets[arm.plan_set._index(name)]
        out.append({"bucket": name, "lower": dict(served[0].lower),
                    "upper": dict(served[0].upper), "requests": int(arrived),
                    "completed": int(sum(b.completed for b in served)),
                    "latency_p50_s": _q(lat, 0.5), "latency_p99_s": _q(lat, 0.99),
                    "predicted_latency_s": float(base.predicted_latency_s),
                    "padding_waste": _share([b.padding for b in served]),
                    "padding_time_s": float(sum(b.padding.time_s for b in served))})
    return out


def _q(x: np.ndarray, q: float) -> float | None:
    return float(np.quantile(x, q)) if len(x) else None


def _arms_of(st: LoopState) -> list[Arm]:
    arms = [st.static, st.adaptive]
    if st.probation is not None and st.probation.service is not None:
        arms.append(st.probation)
    return arms


def serve_window(i: int, win: ShapeTrace, st: LoopState, cfg: Any, left_s: float
                 ) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """Serve window ``i`` on every arm, interleaved: the window is cut into ``cfg.slices``
    consecutive slices and each slice is served by every arm in turn (static first in
    even slices of even windows, adaptive first in odd ones; a set on probation last), so
    that both arms see the same requests under the same conditions. Returns the window's
    record and, per arm, its blocks in slice order."""
    arms = _arms_of(st)
    pieces = split_windows(win, min(cfg.slices, len(win)))
    calls = len(arms) * len(pieces)
    blocks: dict[str, list[Any]] = {a.name: [] for a in arms}
    for j, piece in enumerate(pieces):
        order = arms[:2] if (i + j) % 2 == 0 else arms[1::-1]
        limit = max(2.0, min(2.0 * piece.duration_s + 5.0, left_s / calls))
        for arm in order + arms[2:]:
            # a few untimed requests per bucket first: the arm served first would otherwise
            # pay for waking its idle workers, the second not
            blocks[arm.name].append(arm.service.serve(
                piece, limit_s=limit, window_requests=cfg.window_requests, warmup=WARMUP))
    recs: dict[str, dict[str, Any]] = {}
    for arm in arms:
        recs[arm.name] = _arm_record(arm, blocks[arm.name], win)
        recs[arm.name]["phase"] = _phase(st, f"serve window {i} ({arm.name})", i, arm.name,
                                         blocks[arm.name][0].tags, arm.fingerprint)["index"]
    keys = [k for k in _stable_keys() if k not in ALLOWED_TO_DIFFER]
    diffs = require_comparable(blocks["static"][0].tags, blocks["adaptive"][0].tags,
                               what=f"window {i}: static against adaptive",
                               allow_mismatch=True, keys=keys)
    rec: dict[str, Any] = {"index": i, "requests": len(win), "duration_s": win.duration_s,
                           "mix": mix_json(mix_of_trace(win)), "slices": len(pieces),
                           "first": arms[0].name if i % 2 == 0 else arms[1].name,
                           "arms": recs, "comparable": not diffs, "tag_differences": diffs}
    rec["gain"] = window_gain(recs) if not diffs else {"latency_p50": None,
                                                         "latency_p99": None,
                                                         "throughput": None}
    return rec, blocks


def _stable_keys() -> tuple[str, ...]:
    return STABLE_TAG_KEYS


# ---- prediction under a calibration ------------------------------------------------------------
def repredict(st: LoopState, arm: Arm, bucket: str) -> Any:
    """The bucket's plan with its placement priced under the current calibration (the
    evaluator, ``schedule.evaluate``; the plan itself when it was made with it)."""
    ps = arm.plan_set
    b = ps.buckets[ps._index(bucket)]
    plan = ps.plan_of(b)
    cm = st.cost_model()
    if plan.fingerprints.calibration == cm.fingerprint():
        return plan
    key = (f"{arm.fingerprint}/{bucket}", cm.fingerprint())
    if key not in st._repredicted:
        prob = build_problem(b.model_ref, st.machine, shapes=b.shapes, batch=b.batch,
                             cost_model=cm)
        ev = evaluate(prob, plan.placement_obj())
        st._repredicted[key] = build_plan(prob, ev, model_ref=plan.model,
                                          objective=plan.objective.value,
                                          strategy=plan.strategy, seed=plan.seed,
                                          alternatives=False)
    return st._repredicted[key]


def expected_cost(st: LoopState, arm: Arm, mix: Any) -> float:
    """The predicted expected latency of ``arm``'s plan set over ``mix`` under the current
    calibration: each shape at its bucket's plan (padding included: the plan runs at the
    bucket's upper corner), weighted by its probability."""
    total = 0.0
    for shape, p in mix.items:
        b = arm.plan_set.bucket_for(shape)
        total += p * float(repredict(st, arm, b.name).predicted_latency_s)
    return total


def _runs(st: LoopState, arm: Arm, blocks: Sequence[Any], cfg: Any) -> dict[str, list[Any]]:
    """Bucket -> the telemetry windows of each of ``blocks`` (in order), lined up with the
    bucket's plan priced under the current calibration."""
    out: dict[str, list[Any]] = {}
    programs = {b.name: b.program for b in arm.service.buckets}
    for blk in blocks:
        for b in blk.buckets:
            if b.telemetry is None:
                continue
            plan = repredict(st, arm, b.name)
            if b.run is not None and \
                    plan.fingerprints.calibration == b.run.calibration_fingerprint:
                out.setdefault(b.name, []).append(b.run)
                continue
            out.setdefault(b.name, []).append(windows_from_telemetry(
                plan, b.telemetry, window_requests=cfg.window_requests,
                tags=dict(b.telemetry.tags), program=programs[b.name], phases=(SERVE,),
                bucket=b.name))
    return out


# ---- after a window ----------------------------------------------------------------------------
def adapt(i: int, last: bool, win: ShapeTrace, rec: dict[str, Any], blocks: Mapping[str, Any],
          st: LoopState, cfg: Any, work: Path, left: Callable[[], float]
          ) -> list[dict[str, Any]]:
    """The actions after window ``i`` (module docstring of ``adapt.loop``), in order."""
    actions: list[dict[str, Any]] = []
    rolled = False
    served = st.adaptive  # the arm that served blocks["adaptive"]
    if st.probation is not None:
        act = _probation(i, st, blocks)
        actions.append(act)
        rolled = act["action"] == "rollback"
    recal = _recalibrate(rec, blocks["adaptive"], served, st, cfg, work)
    if recal is not None:
        actions.append(recal)
    if last:
        return actions

    observed = mix_of_trace(win)
    dist = mix_distance(mix_json(observed), mix_json(st.adaptive.mix))
    rec["mix_distance"] = dist
    if rolled or not (recal is not None or dist > cfg.mix_shift):
        return actions
    grid = math.prod(len(v) for v in st.envelope.values())
    if left() < cfg.plan_time_s * grid + least_window_s(win, 4):
        actions.append({"action": "keep", "reason": "the budget left cannot plan and try a "
                        "candidate", "evidence": {"left_s": left()}, "guardrail": False})
        return actions
    actions += _replan(i, win, observed, dist, recal is not None, st, cfg, work, left)
    return actions


def _samples(blocks: Sequence[Any]) -> np.ndarray:
    """Per request of the window (slice after slice, so in trace order), its latency
    (``nan`` unless completed)."""
    return np.concatenate([np.asarray(b.latency_s, dtype=float) for b in blocks])


def _probation(i: int, st: LoopState, blocks: Mapping[str, Any]) -> dict[str, Any]:
    """The set promoted after the window before against the set it replaced (served on
    this window too, or the static arm when it is the same plan set), each request paired
    with itself: roll back when the replaced one is the better by the guardrail's rule
    (``decide`` with the promoted set as A, the last-known-good as B, no threshold)."""
    assert st.probation is not None
    old, st.probation = st.probation, None
    new_s = _samples(blocks["adaptive"])
    old_s = _samples(blocks[old.name] if old.service is not None else blocks["static"])
    both = np.isfinite(new_s) & np.isfinite(old_s)
    ev: dict[str, Any] = {"promoted": st.adaptive.fingerprint,
                          "last_known_good": old.fingerprint, "paired_requests": int(both.sum()),
                          "served_as": old.name if old.service is not None else "static"}
    if int(both.sum()) < 6:
        _close(old)
        return {"action": "confirm", "reason": f"only {int(both.sum())} requests completed "
                "on both: too few to judge, the promoted set stays", "evidence": ev}
    d = decide(new_s[both], old_s[both], threshold=0.0, p99_tolerance=1.0, seed=st.seed)
    ev.update({k: v for k, v in d.to_json().items() if k in ("decision", "reason", "stats")})
    why = _back(d.reason)
    if d.decision != "promote":
        _close(old)
        return {"action": "confirm", "reason": "the promoted set stays: going back to the "
                "last-known-good is not better on this window: " + why, "evidence": ev}
    left, back = st.store.rollback()
    ev.update({"store_left": left.id, "store_restored": back.id})
    st.adaptive.service.close()
    svc = old.service
    if svc is None:
        svc = _open(st, "adaptive", old.file, old.plan_set, old.mix).service
    st.adaptive = Arm("adaptive", old.file, old.plan_set, svc, old.mix)
    return {"action": "rollback", "reason": "the promoted set is worse than the "
            "last-known-good on this window: " + why, "evidence": ev}


def _back(reason: str) -> str:
    """The guardrail's reason read for a rollback (the last-known-good is its candidate)."""
    return reason.removeprefix("keep the incumbent: ").replace("the candidate",
                                                               "the last-known-good")


def _close(arm: Arm) -> None:
    if arm.service is not None:
        arm.service.close()


def _recalibrate(rec: dict[str, Any], blocks: Sequence[Any], arm: Arm, st: LoopState,
                 cfg: Any, work: Path) -> dict[str, Any] | None:
    """Recalibrate from the telemetry windows of ``arm`` (the adaptive arm that served
    ``blocks``); the prediction error by term before and after, on the same measurements."""
    before = _runs(st, arm, blocks, cfg)
    if not before:
        rec["prediction"], rec["prediction_error"] = [], {"before": None, "after": None}
        return None
    r = recalibrate(st.calibration, [run for runs in before.values() for run in runs],
                    k=cfg.k)
    changed = r.changed()
    action = None
    if changed:
        path = work / f"calibration-r{r.calibration.revision}.json"
        r.calibration.save(path)
        st.files[path.stem] = _rel(path, work)
        st.calibration, st.calibration_path = r.calibration, path
        action = {"action": "recalibrate",
                  "reason": f"{len(changed)} of {len(r.changes)} keys outside their interval "
                            f"in {cfg.k} consecutive windows",
                  "evidence": {"parent": r.calibration.parent,
                               "revision": r.calibration.revision,
                               "fingerprint": r.calibration.fingerprint(),
                               "file": _rel(path, work),
                               "changed": [c.to_json() for c in changed][:50],
                               "unchanged": len(r.changes) - len(changed)}}
    after = _runs(st, arm, blocks, cfg) if changed else before
    rows = [row for name in before for row in prediction_rows(before[name], after[name], name)]
    rec["prediction"] = rows
    rec["prediction_error"] = {"before": total_error(rows, "before"),
                               "after": total_error(rows, "after")}
    return action


def _replan(i: int, win: ShapeTrace, observed: Any, dist: float, recalibrated: bool,
            st: LoopState, cfg: Any, work: Path, left: Callable[[], float]
            ) -> list[dict[str, Any]]:
    """Plan a candidate for the window's mix; try it behind the guardrail when it is
    predicted better by the margin."""
    why = []
    if recalibrated:
        why.append("the calibration changed")
    if dist > cfg.mix_shift:
        why.append(f"the shape mix moved {dist:.2f} (total variation) from the one the set "
                   f"was planned for, more than {cfg.mix_shift}")
    path, ps = _plan(st, observed, work, f"planset-{i + 1}-candidate", cfg)
    cand = Arm("candidate", path, ps, None, observed)
    inc_cost = expected_cost(st, st.adaptive, observed)
    cand_cost = expected_cost(st, cand, observed)
    gain = 1.0 - cand_cost / inc_cost if inc_cost > 0 else 0.0
    ev = {"trigger": "; ".join(why), "mix_distance": dist,
          "incumbent_expected_s": inc_cost, "candidate_expected_s": cand_cost,
          "predicted_gain": gain, "margin": cfg.margin, "candidate": ps.fingerprint(),
          "candidate_file": _rel(path, work),
          "incumbent_buckets": [b.name for b in st.adaptive.plan_set.buckets],
          "candidate_buckets": [b.name for b in ps.buckets]}
    acts: list[dict[str, Any]] = [{"action": "replan", "reason": "; ".join(why),
                                   "evidence": ev}]
    _phase(st, f"plan a candidate after window {i}", i, None, _plan_tags(st, ps),
           ps.fingerprint())
    if cand.fingerprint == st.adaptive.fingerprint or gain < cfg.margin:
        acts.append({"action": "keep", "guardrail": False,
                     "reason": f"the candidate is not predicted better by the {cfg.margin:.0%} "
                               f"margin (predicted gain {gain:+.1%})", "evidence": ev})
        return acts
    acts.append(_try(i, win, cand, observed, st, cfg, work, left))
    return acts


def _try(i: int, win: ShapeTrace, cand: Arm, observed: Any, st: LoopState, cfg: Any,
         work: Path, left: Callable[[], float]) -> dict[str, Any]:
    """The guardrail on the window's replayed traffic; a promoted candidate goes into
    service and the set it replaces on probation."""
    tr_path = work / f"window-{i}.jsonl"
    save_shape_trace(win, tr_path)
    n = min(cfg.promote_requests, len(win))
    blocks = max(6, min(cfg.promote_blocks, n // 2))
    if n < blocks:
        return {"action": "keep", "guardrail": False, "reason": f"the window's {n} requests "
                f"cannot fill the guardrail's {blocks} block pairs", "evidence": {}}
    limit = max(2.0, min(win.duration_s + 5.0, left() / (2 * blocks + 2)))
    rec = promote(st.adaptive.file, cand.file, requests=n, blocks=blocks, trace=tr_path,
                  store=st.store.root, threshold=cfg.threshold,
                  p99_tolerance=cfg.p99_tolerance, seed=cfg.seed, machine=st.machine,
                  limit_s=limit)
    dec_path = work / f"decision-{i}.json"
    atomic_write_json(dec_path, rec.to_json())
    st.files[dec_path.stem] = _rel(dec_path, work)
    _phase(st, f"guardrail after window {i} (candidate)", i, "candidate",
           rec.candidate.tags, cand.fingerprint)
    ev = {**rec.summary(), "record": _rel(dec_path, work),
          "tag_differences": {k: list(v) for k, v in rec.tag_differences.items()},
          "quality": rec.quality.holds}
    if rec.decision != "promote":
        return {"action": "keep", "guardrail": True, "reason": rec.reason, "evidence": ev}
    old = st.adaptive
    if old.fingerprint == st.static.fingerprint:  # the static arm serves it already
        old.service.close()
        old = Arm(LKG, old.file, old.plan_set, None, old.mix)
    st.probation = Arm(LKG, old.file, old.plan_set, old.service, old.mix)
    st.adaptive = _open(st, "adaptive", cand.file, cand.plan_set, observed)
    return {"action": "promote", "guardrail": True, "reason": rec.reason, "evidence": ev}


