"""The report's inputs, recognised by content: a plan file, the JSON of ``placewise validate
PLAN --json``, of ``placewise serve PLAN --json`` (simulated, or with ``--real``) and a sweep
file (schema ``placewise-sweep/1``, see ``placewise.sweep``) and a closed-loop file
(``"format": "placewise-loop"``, ``placewise.adapt.loop``).

``load_inputs(paths)`` reads each file once and decides what it is from its keys, never from
its name. A file that is none of these, a second file of a kind, and a validation or serve
result made of another plan than the one given (``placewise.export.plan_fingerprint``, which
``validate --json`` records as ``plan.fingerprint`` and ``serve --json`` as
``plan_fingerprint``) are ``InputError`` naming the file; so are a validation and a serve
result whose stable tags (``runtime.telemetry.STABLE_TAG_KEYS``, arrival and seed aside)
differ, unless ``allow_mismatch`` (the report then lists them).

>>> import json, tempfile, os
>>> d = tempfile.mkdtemp()
>>> p = os.path.join(d, "x.json")
>>> _ = open(p, "w").write(json.dumps({"hello": 1}))
>>> load_inputs([p])
Traceback (most recent call last):
...
placewise.errors.InputError: ...x.json: is not a plan, a validation (validate --json), a serve result (serve --json), a sweep (placewise-sweep/1) or a loop file (placewise-loop): its keys are hello
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from placewise.errors import InputError
from placewise.io import MAX_JSON_BYTES, parse_json, read_file_bytes
from placewise.plan import plan_from_json
from placewise.runtime.planned import plan_fingerprint
from placewise.runtime.telemetry import STABLE_TAG_KEYS, require_comparable

__all__ = ["KINDS", "LOOP_FORMAT", "SWEEP_SCHEMA", "ReportInputs", "classify", "load_inputs"]

SWEEP_SCHEMA = "placewise-sweep/1"
LOOP_FORMAT = "placewise-loop"
KINDS = ("plan", "validation", "serve", "sweep", "loop")

_PLAN_KEYS = {"schema_version", "fingerprints", "schedule", "placement", "memory"}
_VALIDATION_KEYS = {"plan", "predicted", "measured", "attribution"}
_SERVE_KEYS = {"batching", "service", "quantiles", "per_batch"}


@dataclass
class ReportInputs:
    """What the report shows: at most one of each kind (None when absent), with the file
    each came from (``files``: kind -> path)."""

    plan: Any = None  # placewise.plan.Plan
    validation: Mapping[str, Any] | None = None
    serve: Mapping[str, Any] | None = None
    sweep: Mapping[str, Any] | None = None
    loop: Mapping[str, Any] | None = None
    files: dict[str, str] = field(default_factory=dict)
    # stable tags that differ between the results, compared anyway (``allow_mismatch``)
    tag_differences: list[str] = field(default_factory=list)

    def present(self) -> list[str]:
        return [k for k in KINDS if getattr(self, k) is not None]


def classify(data: Any) -> str | None:
    """The kind of a decoded JSON document, or None.

    >>> classify({"schema": "placewise-sweep/1", "cells": []})
    'sweep'
    >>> classify({"plan": {}, "predicted": {}, "measured": {}, "attribution": {}})
    'validation'
    >>> classify([1, 2]) is None
    True
    """
    if not isinstance(data, dict):
        return None
    keys = set(data)
    if data.get("schema") == SWEEP_SCHEMA:
        return "sweep"
    if data.get("format") == LOOP_FORMAT:
        return "loop"
    if keys >= _PLAN_KEYS:
        return "plan"
    if keys >= _VALIDATION_KEYS and isinstance(data.get("plan"), dict):
        return "validation"
    if keys >= _SERVE_KEYS:
        return "serve"
    return None


def _what_keys(data: Any) -> str:
    if isinstance(data, dict):
        keys = sorted(str(k) for k in data)
        text = ", ".join(keys[:8]) + (f" and {len(keys) - 8} more" if len(keys) > 8 else "")
        return f"its keys are {text or 'none'}"
    return f"it is a JSON {type(data).__name__}, not an object"


def _load_one(path: str) -> tuple[str, Any]:
    raw = read_file_bytes(path, what="report input", limit_bytes=MAX_JSON_BYTES)
    data = parse_json(raw, file=path)
    kind = classify(data)
    if kind is None:
        if isinstance(data, dict) and str(data.get("schema", "")).startswith("placewise-sweep/"):
            raise InputError(f"sweep schema {data['schema']!r} is not {SWEEP_SCHEMA!r}, the one "
                             f"this report reads", file=path, place="schema")
        raise InputError("is not a plan, a validation (validate --json), a serve result "
                         f"(serve --json), a sweep ({SWEEP_SCHEMA}) or a loop file "
                         f"({LOOP_FORMAT}): {_what_keys(data)}",
                         file=path)
    if kind == "plan":
        del data
        return kind, plan_from_json(raw, file=path)
    if kind == "sweep":
        _check_sweep(data, path)
    if kind == "loop":
        _check_loop(data, path)
    return kind, data


def _check_loop(data: Mapping[str, Any], path: str) -> None:
    if data.get("version") != 1:
        raise InputError(f"loop file version {data.get('version')!r} is not 1, the one this "
                         f"report reads", file=path, place="version")
    windows = data.get("windows")
    if not isinstance(windows, list) or not all(isinstance(w, dict) for w in windows):
        raise InputError("a loop file's windows must be a list of objects", file=path,
                         place="windows")
    if "phases" in data and not isinstance(data["phases"], list):
        raise InputError("a loop file's phases must be a list", file=path, place="phases")


def _check_sweep(data: Mapping[str, Any], path: str) -> None:
    cells = data.get("cells")
    if not isinstance(cells, list) or not all(isinstance(c, dict) for c in cells):
        raise InputError("a sweep's cells must be a list of objects", file=path, place="cells")
    for key in ("curves", "regret", "sensitivity"):
        if key in data and not isinstance(data[key], list):
            raise InputError(f"a sweep's {key} must be a list", file=path, place=key)
    if "fit_matrix" in data and data["fit_matrix"] is not None \
            and not isinstance(data["fit_matrix"], dict):
        raise InputError("a sweep's fit_matrix must be an object", file=path, place="fit_matrix")


def _result_fingerprint(kind: str, data: Mapping[str, Any]) -> tuple[str, Any]:
    if kind == "validation":
        return "plan.fingerprint", data["plan"].get("fingerprint")
    return "plan_fingerprint", data.get("plan_fingerprint")


def load_inputs(paths: Sequence[str | os.PathLike[str]], *,
                allow_mismatch: bool = False) -> ReportInputs:
    """Read and recognise the report's input files (see the module docstring). A
    validation and a serve result whose stable tags differ are refused (``InputError``
    naming every differing tag) unless ``allow_mismatch`` (then listed in
    ``ReportInputs.tag_differences``)."""
    if not paths:
        raise InputError("give at least one input: a plan, a validation, a serve result or a "
                         "sweep", place="INPUT")
    got = ReportInputs()
    for p in paths:
        path = os.fspath(p)
        kind, value = _load_one(path)
        if kind in got.files:
            raise InputError(f"a second {kind} (the first is {got.files[kind]}): the report "
                             f"reads one of each kind", file=path)
        setattr(got, kind, value)
        got.files[kind] = path
    if got.plan is not None:
        _check_results(got)
    got.tag_differences = _check_tags(got, allow_mismatch)
    return got


def _tags_of(data: Mapping[str, Any]) -> dict[str, str]:
    """A result's stable tags (``stable_tags``; older files: the ``tags`` they recorded)."""
    tags = data.get("stable_tags") or data.get("tags") or {}
    return {str(k): str(v) for k, v in tags.items()} if isinstance(tags, dict) else {}


def _check_tags(got: ReportInputs, allow: bool) -> list[str]:
    """The validation and the serve result must have run under the same stable tags: the
    arrival process and seed aside (a validation's campaign is not a serve run's load),
    every ``STABLE_TAG_KEYS`` both record."""
    if got.validation is None or got.serve is None:
        return []
    a, b = _tags_of(got.validation), _tags_of(got.serve)
    keys = [k for k in STABLE_TAG_KEYS if k not in ("arrival", "seed") and k in a and k in b]
    try:
        return require_comparable(a, b, keys=keys, allow_mismatch=allow,
                                  what=f"the validation {got.files['validation']} against "
                                       f"this serve result")
    except InputError as exc:
        raise exc.at(file=got.files["serve"]) from None


def _check_results(got: ReportInputs) -> None:
    mine: str | None = None
    for kind in ("validation", "serve"):
        data = getattr(got, kind)
        if data is None:
            continue
        place, theirs = _result_fingerprint(kind, data)
        if mine is None:
            mine = plan_fingerprint(got.plan)
        if not isinstance(theirs, str):
            raise InputError(f"this {kind} result records no plan fingerprint, so it cannot be "
                             f"matched to the plan {got.files['plan']}: make it again with "
                             f"this placewise", file=got.files[kind], place=place)
        if theirs != mine:
            raise InputError(f"this {kind} result is of another plan (fingerprint "
                             f"{theirs[:19]}..., the plan {got.files['plan']} is "
                             f"{mine[:19]}...)", file=got.files[kind], place=place)
