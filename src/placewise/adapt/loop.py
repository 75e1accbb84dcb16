"""The closed loop on a replayed drifting trace: plan, serve, recalibrate, replan, promote or
keep, roll back; the never-adapting incumbent served alongside on the same traffic.

**Windows.** The trace (``placewise.adapt.trace``) is cut into ``windows`` windows of equal
request counts, each replayed from its own start. Window 0 is the initial mix: the plan set
(``placewise.adapt.planset``) of both arms is planned for it. Every window is then served by
each arm, interleaved: cut into ``slices`` consecutive slices, each slice served by one arm
then the other (the first arm alternating from slice to slice), so both see the same
requests under the same load, by services opened once and kept resident
(``placewise.adapt.serving``), each block after a few untimed requests per bucket:

- **static**: the plan set of window 0 with the initial calibration, never changed;
- **adaptive**: the loop's current plan set.

**Actions** after each window, each with its evidence:

1. ``rollback`` / ``confirm``: a plan set promoted in the window before is on probation. It
   is compared with the set it replaced (the last-known-good, served on the same window
   too) by the guardrail's statistics (``placewise.adapt.guardrail.decide``: the
   last-known-good "promoted" back over the new one means the new one is worse); if worse,
   the store rolls back to it (``placewise.adapt.store.LastKnownGood``).
2. ``recalibrate``: the adaptive arm's telemetry windows of the last ``k`` served windows go
   to ``placewise.adapt.recalibrate.recalibrate`` (which moves a key only when ``k``
   consecutive windows fall outside its interval); a changed calibration is written as a
   new file whose parent is the old one.
3. ``replan``: when a calibration changed, or the window's shape mix is farther than
   ``mix_shift`` (total variation) from the mix the adaptive set was planned for, a
   candidate plan set is planned for the window's mix with the current calibration. If its
   predicted expected cost over that mix is not lower than the incumbent's (re-evaluated
   with the same calibration) by ``margin``, the candidate is dropped (``keep``, reason:
   not predicted better).
4. ``promote`` / ``keep``: otherwise the guardrail runs incumbent and candidate interleaved
   on the window's replayed traffic (``placewise.adapt.promote.promote``) and its decision
   record is the evidence; a promoted set goes on probation (1.).

**Figures** per window and per bucket: predicted against measured latency by term (the
calibration the window was served with, and the one recalibrated from it on the same
measurements: compile-time prediction error before and after), measured latency and
throughput of both arms and the gain (``1 - adaptive / static`` for latency,
``adaptive / static - 1`` for throughput: positive is better), padding waste, the actions
and the stable tags of each phase (with which tags differ from the phase before).

**Bounds.** ``budget_s`` bounds the loop's wall time: each window's serving is limited to
what is left, planning to ``plan_time_s`` (and what is left), and a window that cannot start
with enough left is not served (``summary.budget_exhausted``). Requests are conserved per
served block: ``offered = completed + rejected + timed_out + in_flight + not_arrived``.

**Artifacts** (plan sets, calibrations, telemetry runs, the last-known-good store) are
written under ``work_dir``; LOOP.json (``save_loop``) names them relative to it.

The library never prints: ``progress(message, fraction)`` is called between steps.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from placewise.adapt import loop_steps as steps
from placewise.adapt.loop_figures import split_windows, summarize
from placewise.adapt.trace import ShapeTrace
from placewise.errors import InputError
from placewise.io import atomic_write_json

__all__ = ["FORMAT", "VERSION", "LoopSettings", "check_work_dir", "run_loop", "save_loop"]

FORMAT = "placewise-loop"
VERSION = 1

Progress = Callable[[str, float], None]


@dataclass(frozen=True)
class LoopSettings:
    """How the loop runs (module docstring). ``envelope``: axis -> values (None: from the
    trace, its shapes rounded up to powers of two); ``k``: consecutive windows outside a
    cost's interval before recalibrating; ``margin``: how much lower a candidate's predicted
    expected cost must be; ``mix_shift``: total-variation distance of a window's mix that
    triggers replanning; ``threshold`` / ``p99_tolerance``: the guardrail's;
    ``promote_requests``: requests per guardrail trial (its traffic is the window's trace)
    in ``promote_blocks`` A/B block pairs; ``window_requests``: executor requests per
    telemetry window; ``slices``: the interleaved slices of each window."""

    windows: int = 6
    budget_s: float = 300.0
    seed: int = 0
    k: int = 2
    margin: float = 0.05
    mix_shift: float = 0.25
    threshold: float = 0.05
    p99_tolerance: float = 0.10
    promote_requests: int = 200
    promote_blocks: int = 10
    plan_time_s: float = 5.0
    window_requests: int = 20
    slices: int = 4
    envelope: Mapping[str, Sequence[int]] | None = None

    def check(self) -> None:
        """``InputError`` naming the setting at fault."""
        ints: tuple[tuple[str, int, int], ...] = (("windows", self.windows, 2), ("k", self.k, 1),
                ("promote_requests", self.promote_requests, 12),
                ("promote_blocks", self.promote_blocks, 6),
                ("window_requests", self.window_requests, 2), ("slices", self.slices, 1))
        for name, v, lo in ints:
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise InputError(f"must be an integer >= {lo}, got {v!r}",
                                 place=f"--{_opt(name)}")
        secs: tuple[tuple[str, float, float], ...] = (("budget_s", self.budget_s, 1.0),
                                                      ("plan_time_s", self.plan_time_s, 0.1))
        for name, x, least in secs:
            if not (isinstance(x, int | float) and math.isfinite(x) and x >= least):
                raise InputError(f"must be a number of seconds >= {least}, got {x!r}",
                                 place=f"--{_opt(name)}")
        for name, x in (("margin", self.margin), ("mix_shift", self.mix_shift),
                        ("threshold", self.threshold), ("p99_tolerance", self.p99_tolerance)):
            if not (isinstance(x, int | float) and math.isfinite(x) and 0.0 <= x < 1.0):
                raise InputError(f"must be a fraction in [0, 1), got {x!r}",
                                 place=f"--{_opt(name)}")

    def to_json(self) -> dict[str, Any]:
        return {"windows": self.windows, "budget_s": self.budget_s, "seed": self.seed,
                "k": self.k, "margin": self.margin, "mix_shift": self.mix_shift,
                "threshold": self.threshold, "p99_tolerance": self.p99_tolerance,
                "promote_requests": self.promote_requests,
                "promote_blocks": self.promote_blocks, "plan_time_s": self.plan_time_s,
                "window_requests": self.window_requests, "slices": self.slices,
                "envelope": None if self.envelope is None else
                {a: [int(v) for v in vs] for a, vs in self.envelope.items()}}


def _opt(name: str) -> str:
    return name.removesuffix("_s").replace("_", "-")


# ---- the loop --------------------------------------------------------------------------------------
def save_loop(doc: Mapping[str, Any], path: str | Path) -> None:
    """Write a loop record atomically (JSON)."""
    atomic_write_json(path, doc)


def check_work_dir(path: str | Path) -> Path:
    """``path`` as the artifacts' folder: ``InputError`` for a file or a folder already
    holding something (an earlier loop's store and calibrations would mix with this one's)."""
    work = Path(path)
    if work.exists() and (not work.is_dir() or any(work.iterdir())):
        raise InputError("the loop's work folder must be new or empty (it would mix with "
                         "what is there): remove it or give another --work", file=str(work),
                         place="--work")
    return work


def _work_dir(path: str | Path) -> Path:
    work = check_work_dir(path)
    try:
        work.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot make the work folder: {exc.strerror or exc}",
                         file=str(work), place="--work") from None
    return work


def run_loop(model: str, machine: Any, trace: ShapeTrace, *, work_dir: str | Path,
             settings: LoopSettings | None = None, calibration: str | Path | None = None,
             progress: Progress | None = None, clock: Callable[[], float] = time.monotonic
             ) -> dict[str, Any]:
    """Run the closed loop (module docstring) and return its record (the LOOP.json
    document). ``calibration``: the starting calibration file (default: an empty one for
    ``machine``, written under ``work_dir``). Raises ``InputError`` for bad settings or a
    trace too short; every service started is stopped when it returns or raises."""
    cfg = settings or LoopSettings()
    cfg.check()
    windows = split_windows(trace, cfg.windows)
    deadline = clock() + float(cfg.budget_s)
    work = _work_dir(work_dir)
    say = progress or (lambda msg, frac: None)
    records: list[dict[str, Any]] = []
    notes: list[str] = []
    with ExitStack() as stack:
        say("planning the initial plan set and starting both arms", 0.0)
        st = steps.initial_state(model, machine, trace, windows[0], cfg, work, calibration,
                                 stack)
        for i, win in enumerate(windows):
            arms = 3 if st.probation is not None else 2
            if deadline - clock() < steps.least_window_s(win, arms):
                notes.append(f"the budget ran out before window {i}: {len(windows) - i} of "
                             f"{len(windows)} windows not served")
                break
            say(f"window {i + 1} of {len(windows)}: serving", i / len(windows))
            rec, blocks = steps.serve_window(i, win, st, cfg, deadline - clock())
            say(f"window {i + 1} of {len(windows)}: adapting", (i + 0.5) / len(windows))
            rec["actions"] = steps.adapt(i, i == len(windows) - 1, win, rec, blocks, st, cfg,
                                         work, lambda: deadline - clock())
            records.append(rec)
        say("done", 1.0)
    summary = summarize(records)
    summary["budget_exhausted"] = len(records) < len(windows)
    summary["plan_sets_planned"] = st.planned
    return {"format": FORMAT, "version": VERSION, "model": model,
            "machine": str(getattr(machine, "name", machine)),
            "trace": {"file": trace.file, "requests": len(trace), "duration_s": trace.duration_s,
                      "axes": list(trace.axes), "windows": len(windows)},
            "envelope": st.envelope, "settings": cfg.to_json(), "summary": summary,
            "windows": records, "phases": st.phases, "files": st.files, "work_dir": str(work),
            "notes": notes}
