"""Which runs a validation may be compared with, by their stable tags
(``placewise.runtime.telemetry.STABLE_TAG_KEYS``).

- ``check_calibration_tags(plan, cal_file)``: the calibration the plan predicts from
  (``validate --calibration CAL.json``) must be the plan's (same fingerprint: else always
  an ``InputError``) and measured under this machine's stable tags (versions, CPU model,
  cores: the ``MACHINE_TAG_KEYS`` the calibration records), checked before anything runs;
- ``compare_with(report, path)``: an earlier run (``validate --against PREV``: the JSON of
  ``validate --json``, or a telemetry run file, ``placewise.runtime.windows``) must carry the
  same stable tags as this one; the comparison is its measured latency and throughput
  next to this run's. ``compare_tags_with(tags, path)`` is the same check for any run's
  tags (``serve --against PREV``: the JSON of an earlier ``serve --json``).

Either refuses (``InputError`` naming every differing tag with both values) unless
``allow_mismatch``, and then returns the differences as lines.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from placewise.cost.calibrated import load_calibration
from placewise.errors import InputError
from placewise.io import load_json
from placewise.runtime.planned import plan_fingerprint
from placewise.runtime.telemetry import (
    MACHINE_TAG_KEYS,
    STABLE_TAG_KEYS,
    calibration_tag_keys,
    model_fingerprint,
    require_comparable,
    stable_tags,
)
from placewise.runtime.windows import load_telemetry_run

if TYPE_CHECKING:
    from placewise.plan import Plan
    from placewise.validate.records import ValidationReport

__all__ = ["check_calibration_tags", "compare_tags_with", "compare_with", "machine_tags",
           "plan_tags", "precheck_against", "run_tags", "serve_arrival", "serve_stable_tags"]


def machine_tags() -> dict[str, str]:
    """This process's stable machine tags (``MACHINE_TAG_KEYS``)."""
    t = stable_tags(model_fingerprint="", graph_fingerprint="", plan_fingerprint="",
                    calibration_fingerprint="", arrival="", seed=None)
    return {k: t[k] for k in MACHINE_TAG_KEYS}


def check_calibration_tags(plan: Plan, cal_file: str | os.PathLike[str], *,
                           allow_mismatch: bool = False) -> list[str]:
    """Refuse a calibration that is not the plan's, or that was measured under other
    stable machine tags than this process runs with (module docstring)."""
    file = os.fspath(cal_file)
    cal = load_calibration(file)
    if cal.fingerprint() != plan.fingerprints.calibration:
        raise InputError(f"the plan was made with calibration {plan.fingerprints.calibration}, "
                         f"this file is {cal.fingerprint()}", file=file, place="--calibration")
    try:
        return require_comparable(cal.tags, machine_tags(), keys=calibration_tag_keys(cal),
                                  what="the calibration against this run",
                                  allow_mismatch=allow_mismatch)
    except InputError as exc:
        raise exc.at(file=file) from None


def run_tags(path: str | os.PathLike[str]) -> tuple[str, dict[str, str], Mapping[str, Any]]:
    """(kind, stable tags, document) of an earlier run's file: ``validation`` (the JSON of
    ``validate --json``; one without ``stable_tags`` has none), ``serve`` (of ``serve
    --json``) or ``telemetry``."""
    file = os.fspath(path)
    data = load_json(file, what="run")
    if not isinstance(data, dict):
        raise InputError("expected a JSON object at the top level", file=file)
    if data.get("format") == "placewise-telemetry":
        return "telemetry", dict(load_telemetry_run(file).tags), data
    if {"plan", "predicted", "measured"} <= set(data):
        tags = data.get("stable_tags", {})
        if not isinstance(tags, dict):
            raise InputError("stable_tags must be an object", file=file, place="stable_tags")
        return "validation", {str(k): str(v) for k, v in tags.items()}, data
    if {"plan", "machine"} <= set(data) and ("batching" in data or "buckets" in data):
        tags = data.get("stable_tags", {})
        if not isinstance(tags, dict):
            raise InputError("stable_tags must be an object", file=file, place="stable_tags")
        return "serve", {str(k): str(v) for k, v in tags.items()}, data
    raise InputError("is not the JSON of 'placewise validate --json' or 'placewise serve "
                     "--json', nor a telemetry run (placewise-telemetry)", file=file)


def plan_tags(plan: Plan) -> dict[str, str]:
    """The stable tags a run of ``plan`` in this process will record, as far as they are
    known before it runs: the fingerprints and the machine tags."""
    return {"model_fingerprint": model_fingerprint(plan.model),
            "graph_fingerprint": plan.fingerprints.graph,
            "plan_fingerprint": plan_fingerprint(plan),
            "calibration_fingerprint": plan.fingerprints.calibration, **machine_tags()}


def compare_tags_with(tags: Mapping[str, str], path: str | os.PathLike[str], *,
                      keys: Sequence[str] | None = None, allow_mismatch: bool = False
                      ) -> dict[str, Any]:
    """Refuse the earlier run in ``path`` (``run_tags``) unless its stable tags (``keys``,
    default every one) are ``tags``; its file, kind and the differences as lines."""
    file = os.fspath(path)
    kind, theirs, _ = run_tags(file)
    try:
        lines = require_comparable(theirs, tags, keys=tuple(keys or STABLE_TAG_KEYS),
                                   what="the earlier run against this one",
                                   allow_mismatch=allow_mismatch)
    except InputError as exc:
        raise exc.at(file=file) from None
    return {"file": file, "kind": kind, "tag_differences": lines}


def precheck_against(plan: Plan, path: str | os.PathLike[str], *,
                     allow_mismatch: bool = False) -> None:
    """Before anything runs: refuse an earlier run whose tags already differ from what this
    run of ``plan`` will record (fingerprints and machine tags; threads, arrival and seed
    are compared after the run by ``compare_with``)."""
    known = plan_tags(plan)
    compare_tags_with(known, path, keys=tuple(known), allow_mismatch=allow_mismatch)


def compare_with(report: ValidationReport, path: str | os.PathLike[str], *,
                 allow_mismatch: bool = False) -> dict[str, Any]:
    """This run next to the earlier run in ``path`` (module docstring): its file, kind,
    the tag differences (lines) and, for a validation, both measured latency p50 and
    throughput."""
    file = os.fspath(path)
    kind, tags, data = run_tags(file)
    try:
        lines = require_comparable(tags, report.stable_tags, what="the earlier run against "
                                   "this one", allow_mismatch=allow_mismatch)
    except InputError as exc:
        raise exc.at(file=file) from None
    out: dict[str, Any] = {"file": file, "kind": kind, "tag_differences": lines}
    if kind == "validation":
        meas = data.get("measured", {})
        lat = meas.get("latency", {}) if isinstance(meas, dict) else {}
        before = lat.get("p50_s") if isinstance(lat, dict) else None
        tput = meas.get("throughput_rps") if isinstance(meas, dict) else None
        out["latency_p50_s"] = {"before": before, "now": report.latency.p50_s}
        out["throughput_rps"] = {"before": tput, "now": report.throughput_rps}
    return out


def serve_arrival(*, rate: float | None, cv: float | None, concurrency: int | None,
                  think: str, trace: str | os.PathLike[str] | None) -> str:
    """The arrival process of a ``serve`` run as a stable tag: ``poisson:R/s`` (``gamma:R/s,
    cv=C``), ``closed:N,think=T`` or ``trace:sha256:...`` of the trace file's bytes.

    >>> serve_arrival(rate=100.0, cv=None, concurrency=None, think="0", trace=None)
    'poisson:100/s'
    """
    if trace is not None:
        return "trace:" + model_fingerprint(os.fspath(trace))
    if concurrency is not None:
        return f"closed:{concurrency},think={think}"
    if cv is not None and cv != 1:
        return f"gamma:{rate:g}/s,cv={cv:g}"
    return f"poisson:{rate:g}/s"


def serve_stable_tags(plan: Plan, *, arrival: str, seed: int,
                      threads: str | None = None) -> dict[str, str]:
    """The stable tags of a ``serve`` run of ``plan`` (``runtime.telemetry.stable_tags``):
    ``threads`` as the real run recorded them (``None``: simulated only, none ran)."""
    known = plan_tags(plan)
    t = stable_tags(model_fingerprint=known["model_fingerprint"],
                    graph_fingerprint=known["graph_fingerprint"],
                    plan_fingerprint=known["plan_fingerprint"],
                    calibration_fingerprint=known["calibration_fingerprint"],
                    arrival=arrival, seed=seed)
    t["threads"] = "simulated" if threads is None else threads
    return t
