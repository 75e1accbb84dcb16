"""The calibration file's schema: what ``placewise profile`` measured (``Measurement``,
``ContextMeasurement``, ``LinkMeasurement``, ``CorunMeasurement``, ``StepOverhead``,
``Failure``), the fits made from it (``Fit``), the devices it was measured on
(``DeviceRecord``), the per-key corrections ``placewise recalibrate`` made from telemetry
(``Adjustment``), and the file itself (``Calibration``, ``load_calibration``). Validated
data, never code: pydantic models, strict (unknown fields refused), units in field names.

How the numbers are fitted and used to cost ops is ``placewise.cost.calibrated`` (which
re-exports these names for its callers).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from placewise.errors import SpecError
from placewise.hardware.stats import quantiles
from placewise.io import atomic_writer, load_json

__all__ = [
    "ADJUSTMENT_KINDS",
    "CALIBRATION_FORMAT",
    "CALIBRATION_VERSION",
    "FEATURES",
    "MIN_FIT_POINTS",
    "Adjustment",
    "Calibration",
    "ContextMeasurement",
    "CorunMeasurement",
    "DeviceRecord",
    "Failure",
    "Fit",
    "ImportRecord",
    "LinkMeasurement",
    "Measurement",
    "StepOverhead",
    "load_calibration",
]

CALIBRATION_FORMAT = "placewise-calibration"
CALIBRATION_VERSION = 1
#: shape features a fit may use (all >= 0)
FEATURES = ("one", "flops", "eff_flops", "bytes", "io_bytes", "elems")
#: fewest distinct shapes for a per-kind fit (fewer: pooled with its category)
MIN_FIT_POINTS = 3
_MAX_FILE_BYTES = 256 * 1024 * 1024


# ---- the file format (pydantic validates untrusted JSON) ----------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _finite_nonneg(v: float) -> float:
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"must be a finite number >= 0, got {v!r}")
    return v


class Measurement(_Strict):
    """One (device, key) measured: median time and spread over ``n`` repeats."""

    device: str
    key: str = Field(min_length=1, max_length=200)
    kind: str = Field(min_length=1, max_length=200)
    dtype: str
    signature: str = Field(default="", max_length=100_000)
    median_s: float
    p10_s: float
    p90_s: float
    n: int = Field(ge=1)
    rel_ci: float = 0.0
    backend: str = ""
    family: str = ""  # the source format's ops: "torch" (fx/aten), "onnx", "" (other)
    series: str = ""  # the same op at other batch sizes shares this (see ``op_series``)
    source_node: str = ""
    # "contention": the time is other processes', not the op's (see profile.flag_contention);
    # flagged measurements are kept for the record but neither used nor fitted
    flags: list[str] = Field(default_factory=list, max_length=8)
    features: dict[str, float] = Field(default_factory=dict)

    @field_validator("median_s", "p10_s", "p90_s", "rel_ci")
    @classmethod
    def _finite(cls, v: float) -> float:
        return _finite_nonneg(v)

    @field_validator("features")
    @classmethod
    def _features(cls, v: dict[str, float]) -> dict[str, float]:
        for k, x in v.items():
            if k not in FEATURES:
                raise ValueError(f"unknown feature {k!r} (known: {', '.join(FEATURES)})")
            _finite_nonneg(x)
        return v

    @model_validator(mode="after")
    def _order(self) -> Measurement:
        if self.median_s <= 0:
            raise ValueError(f"median_s must be > 0, got {self.median_s!r}")
        if not self.p10_s <= self.median_s <= self.p90_s:
            raise ValueError(f"need p10_s <= median_s <= p90_s, got {self.p10_s!r}, "
                             f"{self.median_s!r}, {self.p90_s!r}")
        return self


class Fit(_Strict):
    """time = sum(coef_i * feature_i) for one (device, kind, dtype) group, with the
    quantiles of its leave-one-out log residuals log(measured / predicted)."""

    device: str
    kind: str  # an OpKind value, "category:<name>", "*" (every op) or "convert:<src>><dst>"
    dtype: str
    family: str = ""  # ops of which source format were fitted (see ``op_family``)
    level: str = "kind"  # series | kind | category | device | conversion
    series: str = ""  # for level "series": the ``op_series`` key it covers
    features: list[str] = Field(min_length=1)
    coef: list[float]
    n: int = Field(ge=1)
    resid_q10: float
    resid_q50: float
    resid_q90: float
    loo_median_abs_pct: float = 0.0

    @field_validator("features")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        for k in v:
            if k not in FEATURES:
                raise ValueError(f"unknown feature {k!r} (known: {', '.join(FEATURES)})")
        return v

    @field_validator("coef")
    @classmethod
    def _coef(cls, v: list[float]) -> list[float]:
        return [_finite_nonneg(x) for x in v]

    @model_validator(mode="after")
    def _check(self) -> Fit:
        if len(self.coef) != len(self.features):
            raise ValueError(f"{len(self.coef)} coefficients for {len(self.features)} features")
        for q in (self.resid_q10, self.resid_q50, self.resid_q90):
            if not math.isfinite(q) or abs(q) > 50:
                raise ValueError(f"residual quantile {q!r} is not a finite log-ratio")
        if not self.resid_q10 <= self.resid_q50 <= self.resid_q90:
            raise ValueError("need resid_q10 <= resid_q50 <= resid_q90")
        if not any(c > 0 for c in self.coef):
            raise ValueError("every coefficient is zero")
        return self


class StepOverhead(_Strict):
    """The executor's own cost per executed step (task) on a device, beyond its kernels:
    median, p10..p90 spread, sample count and how it was measured. ``n == 0``: not
    measured (a calibration made before this was profiled), all zero."""

    median_s: float = 0.0
    p10_s: float = 0.0
    p90_s: float = 0.0
    n: int = Field(default=0, ge=0)
    method: str = Field(default="", max_length=2_000)

    @field_validator("median_s", "p10_s", "p90_s")
    @classmethod
    def _finite(cls, v: float) -> float:
        return _finite_nonneg(v)

    @model_validator(mode="after")
    def _order(self) -> StepOverhead:
        if not self.p10_s <= self.median_s <= self.p90_s:
            raise ValueError("expected p10_s <= median_s <= p90_s")
        return self

    @classmethod
    def of(cls, samples: Sequence[float], method: str) -> StepOverhead:
        """Median, p10..p90 and count of ``samples`` (seconds), measured by ``method``."""
        p10, med, p90 = quantiles(samples)
        return cls(median_s=med, p10_s=p10, p90_s=p90, n=len(samples), method=method)


class DeviceRecord(_Strict):
    """Which device was measured: its identity must match the machine it is used with.
    ``dispatch``: the executor's measured per-step overhead there (absent in older files:
    not measured)."""

    name: str
    kind: str
    model: str = ""
    cores: list[int] | None = None
    backend: str | None = None
    threads: int = Field(default=1, ge=1)
    identity: str = ""
    # precisions the device runs only for some op kinds, e.g. {"int8": ["linear", ...]}
    dtype_kinds: dict[str, list[str]] = Field(default_factory=dict)
    dispatch: StepOverhead = Field(default_factory=StepOverhead)
    # this device as the host: a request's hand-off from the client to the workers and
    # back (inputs written -> graph starts, graph ends -> outputs ready), measured in model
    # order by ``placewise.calibrate.context`` (absent: not measured)
    request: StepOverhead = Field(default_factory=StepOverhead)
    # the same when a device of the plan shares this host's cores (its worker sleeps)
    request_shared: StepOverhead = Field(default_factory=StepOverhead)
    # the worker's own time per request when requests are pipelined (messages, io steps,
    # wake-ups), beyond its steps (``placewise.calibrate.context``)
    request_busy: StepOverhead = Field(default_factory=StepOverhead)
    # the fixed cost of one partition's ``session.run`` on this device as the executor runs
    # it (the step's time less its nodes' kernel times, ``placewise.calibrate.context``); paid
    # once per partition: plans charge it to the transfer that starts a partition and, on
    # the host, to the request (absent: not measured)
    run_call: StepOverhead = Field(default_factory=StepOverhead)
    # a pipe notification -> the worker process on this device resuming, when it blocks on
    # its pipes (``wake_sleep``: what a worker on cores another device shares does) and
    # when it polls them (``wake_poll``), measured by ``placewise.calibrate.corun``; the
    # difference is ``CalibratedModel.wake_s`` (absent: not measured)
    wake_sleep: StepOverhead = Field(default_factory=StepOverhead)
    wake_poll: StepOverhead = Field(default_factory=StepOverhead)


class ContextMeasurement(_Strict):
    """A region (or conversion) as the executor ran it *in model order*
    (``placewise.calibrate.context``): its step time plus the worker's loop time before it, with
    inputs as the previous steps left them (not hot in cache). ``kernel_s``: the ops' own
    time; ``hidden_s``: conversions inside the step that the plan does not name (int8
    kernels take fp32 activations); ``overhead_s``: the executor's time around them (step
    bookkeeping, per-op dispatch, the loop between two steps). Medians over ``n`` samples;
    ``median_s`` is the median of the step totals, so the parts need not add up to it
    exactly."""

    device: str
    key: str = Field(min_length=1, max_length=200)  # ``region_key`` or ``conversion_key``
    kind: str = "region"  # "region" | "conversion"
    dtype: str
    label: str = Field(default="", max_length=1_000)
    ops: int = Field(default=1, ge=0)
    median_s: float
    p10_s: float
    p90_s: float
    n: int = Field(ge=1)
    kernel_s: float = 0.0
    hidden_s: float = 0.0
    overhead_s: float = 0.0

    @field_validator("median_s", "p10_s", "p90_s", "kernel_s", "hidden_s", "overhead_s")
    @classmethod
    def _finite(cls, v: float) -> float:
        return _finite_nonneg(v)

    @field_validator("kind")
    @classmethod
    def _kind(cls, v: str) -> str:
        if v not in ("region", "conversion"):
            raise ValueError(f"kind must be 'region' or 'conversion', got {v!r}")
        return v

    @model_validator(mode="after")
    def _order(self) -> ContextMeasurement:
        # 0 is a measurement: inside a partition, onnxruntime may fuse a region's ops into
        # another region's node (a reshape into the Gemm before it) or eliminate them
        if self.median_s < 0 or (self.median_s == 0 and self.kind != "region"):
            raise ValueError(f"median_s must be > 0 (>= 0 for a region), got "
                             f"{self.median_s!r}")
        if not self.p10_s <= self.median_s <= self.p90_s:
            raise ValueError("need p10_s <= median_s <= p90_s")
        return self


class LinkMeasurement(_Strict):
    """A transfer between two devices as the executor does it, measured in model order
    (``placewise.cost.fit.fit_link``): time = ``latency_s`` + bytes x
    ``seconds_per_byte``, with the quantiles of log(measured / fitted) over ``n`` samples
    of ``min_bytes``..``max_bytes``."""

    src: str
    dst: str
    latency_s: float
    seconds_per_byte: float
    n: int = Field(ge=1)
    resid_q10: float = 0.0
    resid_q90: float = 0.0
    min_bytes: int = Field(default=0, ge=0)
    max_bytes: int = Field(default=0, ge=0)
    method: str = Field(default="", max_length=2_000)
    # whether the receiving worker slept (blocked on its pipes) in the runs that measured
    # the link, so its samples include a wake-up (``None``: not recorded, older files)
    receiver_sleeps: bool | None = None

    @field_validator("latency_s", "seconds_per_byte")
    @classmethod
    def _finite(cls, v: float) -> float:
        return _finite_nonneg(v)

    @model_validator(mode="after")
    def _check(self) -> LinkMeasurement:
        for q in (self.resid_q10, self.resid_q90):
            if not math.isfinite(q) or abs(q) > 50:
                raise ValueError(f"residual quantile {q!r} is not a finite log-ratio")
        if not self.resid_q10 <= 0.0 <= self.resid_q90:
            raise ValueError("need resid_q10 <= 0 <= resid_q90")
        if self.latency_s <= 0 and self.seconds_per_byte <= 0:
            raise ValueError("latency_s and seconds_per_byte are both zero")
        return self


class CorunMeasurement(_Strict):
    """How many times longer a region takes on ``device`` while device ``busy`` computes
    (``placewise.calibrate.corun``): ratios of its time with ``busy`` running the same
    model's work continuously on its own cores to its time alone, median and p10..p90 over
    ``n`` samples. ``level``: ``"region"`` (``key`` is a ``region_key``) or ``"class"``
    (``key`` is a ``region_class``, the region samples of that class pooled: what a region
    that was not measured gets)."""

    device: str
    busy: str
    level: str = "region"
    key: str = Field(min_length=1, max_length=200)
    dtype: str
    label: str = Field(default="", max_length=1_000)
    slowdown_median: float
    slowdown_p10: float
    slowdown_p90: float
    n: int = Field(ge=1)
    method: str = Field(default="", max_length=2_000)

    @field_validator("slowdown_median", "slowdown_p10", "slowdown_p90")
    @classmethod
    def _ratio(cls, v: float) -> float:
        if not math.isfinite(v) or not 0 < v <= 1000:
            raise ValueError(f"a slowdown must be a finite ratio in (0, 1000], got {v!r}")
        return v

    @field_validator("level")
    @classmethod
    def _level(cls, v: str) -> str:
        if v not in ("region", "class"):
            raise ValueError(f"level must be 'region' or 'class', got {v!r}")
        return v

    @model_validator(mode="after")
    def _check(self) -> CorunMeasurement:
        if not self.slowdown_p10 <= self.slowdown_median <= self.slowdown_p90:
            raise ValueError("need slowdown_p10 <= slowdown_median <= slowdown_p90")
        if self.busy == self.device:
            raise ValueError(f"device {self.device!r} cannot be busy beside itself")
        return self


class Failure(_Strict):
    """An op key that could not be measured on a device, and why. ``unsupported``: the
    device has no kernel for it (the model refuses the op too), otherwise a failed run."""

    device: str
    key: str
    kind: str
    dtype: str
    reason: str = Field(default="", max_length=10_000)
    unsupported: bool = True
    source_node: str = ""


#: the terms telemetry recalibrates, one key each (``placewise.adapt.recalibrate``)
ADJUSTMENT_KINDS = ("compute", "transfer", "launch", "contention")


class Adjustment(_Strict):
    """A per-key correction made from runtime telemetry (``placewise.adapt.recalibrate``),
    applied by ``CalibratedModel`` to exactly the costs of its key and nothing else:

    - ``compute``: the kernel part (every term but ``launch``) of the regions ``regions``
      (``region_key``) on ``device``;
    - ``launch``: the executor's per-step and run-call cost (``Term.LAUNCH``) on ``device``;
      with a ``key`` of ``request:{device}``, the request hand-off on that host
      (``request_cost``): scaled by ``factor``, or, where the model has none (the roofline),
      ``add_s`` seconds of ``Term.SYNC``;
    - ``transfer``: the link ``link`` (``"src->dst"``), every term of its transfers;
    - ``contention``: the co-run slowdown of ``regions`` on ``device`` while another device
      computes (``corun_slowdown``), as a factor on the slowdown.

    The cost's central estimate is multiplied by ``factor`` (cumulative: a later revision's
    factor includes the earlier ones), its interval scaled with it and then widened to at
    least ``centre x (1 -+ widen)`` (the spread observed in the telemetry). The rest is the
    evidence: the windows' median ``measured_s`` against ``predicted_s``, their spread, the
    number of windows and samples, the ``revision`` that made it and why.
    """

    kind: str
    key: str = Field(min_length=1, max_length=300)
    device: str = ""
    link: str = ""
    regions: list[str] = Field(default_factory=list, max_length=100_000)
    factor: float
    add_s: float = 0.0
    widen: float = 0.0
    predicted_s: float = 0.0
    measured_s: float = 0.0
    spread_s: float = 0.0
    windows: int = Field(default=0, ge=0)
    samples: int = Field(default=0, ge=0)
    revision: int = Field(default=0, ge=0)
    reason: str = Field(default="", max_length=10_000)

    @field_validator("kind")
    @classmethod
    def _kind(cls, v: str) -> str:
        if v not in ADJUSTMENT_KINDS:
            raise ValueError(f"kind must be one of {', '.join(ADJUSTMENT_KINDS)}, got {v!r}")
        return v

    @field_validator("predicted_s", "measured_s", "spread_s", "widen", "add_s")
    @classmethod
    def _finite(cls, v: float) -> float:
        return _finite_nonneg(v)

    @field_validator("factor")
    @classmethod
    def _factor(cls, v: float) -> float:
        if not math.isfinite(v) or not 1e-6 <= v <= 1e6:
            raise ValueError(f"an adjustment factor must be a finite ratio in [1e-6, 1e6], "
                             f"got {v!r}")
        return v

    @model_validator(mode="after")
    def _check(self) -> Adjustment:
        if self.kind in ("compute", "launch", "contention") and not self.device:
            raise ValueError(f"a {self.kind} adjustment names its device")
        if self.kind == "transfer" and "->" not in self.link:
            raise ValueError("a transfer adjustment names its link as 'src->dst'")
        if self.kind in ("compute", "contention") and not self.regions:
            raise ValueError(f"a {self.kind} adjustment names its regions")
        return self


class ImportRecord(_Strict):
    """A profile taken on the target by its own tool (``placewise calibrate import``,
    ``placewise.calibrate.imports``): which tool and version (``""``: the file does not
    say and the user did not either), the file and its sha256, when it was taken and how
    that is known, the machine's device its measurements are keyed on and the engine the
    file says ran them (an execution provider, ``GPU``, ``DLA``), the runs kept and the
    warm-up runs dropped, how many of its timed nodes (layers, ops) there were, how many
    named an op of the model, and how many of the model's ops they cover."""

    tool: str = Field(min_length=1, max_length=100)
    tool_version: str = Field(default="", max_length=200)
    file: str = Field(min_length=1, max_length=4_096)
    sha256: str = Field(min_length=1, max_length=200)
    date: str = Field(default="", max_length=100)
    date_from: str = Field(default="", max_length=200)
    device: str
    engine: str = Field(default="", max_length=1_000)
    runs: int = Field(default=1, ge=0)
    warmup_dropped: int = Field(default=0, ge=0)
    profiled_nodes: int = Field(ge=0)
    matched_nodes: int = Field(ge=0)
    ops_covered: int = Field(ge=0)
    extra_files: list[str] = Field(default_factory=list, max_length=16)  # "path sha256:..."
    notes: list[str] = Field(default_factory=list, max_length=100)


class Calibration(_Strict):
    """What ``placewise profile`` measured, and the fits made from it; or what profiles
    taken on the target measured (``imports``, ``placewise calibrate import``: no fits, so
    that ops nobody measured keep the roofline).

    ``parent``/``revision``/``adjustments``: a calibration that ``placewise recalibrate``
    wrote from another (``parent``: that one's fingerprint; ``revision``: its revision + 1)
    holds the per-key corrections telemetry asked for (``Adjustment``). A file without
    them is revision 0 with no parent; they are left out of its JSON (and so of its
    fingerprint) while at those defaults.
    """

    format: str = CALIBRATION_FORMAT
    version: int = CALIBRATION_VERSION
    created: str = ""
    model: str = ""
    machine: str = ""
    machine_fingerprint: str = ""
    tags: dict[str, str] = Field(default_factory=dict)
    settings: dict[str, float] = Field(default_factory=dict)
    devices: list[DeviceRecord] = Field(default_factory=list)
    measurements: list[Measurement] = Field(default_factory=list)
    fits: list[Fit] = Field(default_factory=list)
    failures: list[Failure] = Field(default_factory=list)
    context: list[ContextMeasurement] = Field(default_factory=list)
    links: list[LinkMeasurement] = Field(default_factory=list)
    # the client process's CPU time per pipelined request (``placewise.calibrate.context``)
    client: StepOverhead = Field(default_factory=StepOverhead)
    # co-run slowdowns (``placewise.calibrate.corun``; absent in older files: none known)
    corun: list[CorunMeasurement] = Field(default_factory=list)
    parent: str = Field(default="", max_length=200)
    revision: int = Field(default=0, ge=0)
    adjustments: list[Adjustment] = Field(default_factory=list)
    # the on-target profiles its measurements were imported from (``calibrate import``;
    # absent: measured here by ``placewise profile``)
    imports: list[ImportRecord] = Field(default_factory=list, max_length=10_000)

    @field_validator("format")
    @classmethod
    def _format(cls, v: str) -> str:
        if v != CALIBRATION_FORMAT:
            raise ValueError(f"not a placewise calibration (format {v!r}, expected "
                             f"{CALIBRATION_FORMAT!r})")
        return v

    @field_validator("version")
    @classmethod
    def _version(cls, v: int) -> int:
        if v != CALIBRATION_VERSION:
            raise ValueError(f"calibration version {v} is not supported (this placewise "
                             f"reads version {CALIBRATION_VERSION}); profile again")
        return v

    @model_validator(mode="after")
    def _refs(self) -> Calibration:
        names = {d.name for d in self.devices}
        if len(names) != len(self.devices):
            raise ValueError("device names repeat")
        for i, m in enumerate(self.measurements):
            if m.device not in names:
                raise ValueError(f"measurements[{i}] names device {m.device!r}, which is not "
                                 f"among devices {sorted(names)}")
        for i, f in enumerate(self.fits):
            if f.device not in names:
                raise ValueError(f"fits[{i}] names device {f.device!r}, which is not among "
                                 f"devices {sorted(names)}")
        for i, lk in enumerate(self.links):
            for d in (lk.src, lk.dst):
                if d not in names:
                    raise ValueError(f"links[{i}] names device {d!r}, which is not among "
                                     f"devices {sorted(names)}")
        for i, c in enumerate(self.context):
            if c.device not in names:
                raise ValueError(f"context[{i}] names device {c.device!r}, which is not "
                                 f"among devices {sorted(names)}")
        for i, cr in enumerate(self.corun):
            for d in (cr.device, cr.busy):
                if d not in names:
                    raise ValueError(f"corun[{i}] names device {d!r}, which is not among "
                                     f"devices {sorted(names)}")
        for i, imp in enumerate(self.imports):
            if imp.device not in names:
                raise ValueError(f"imports[{i}] names device {imp.device!r}, which is not "
                                 f"among devices {sorted(names)}")
        keys = [(a.kind, a.key) for a in self.adjustments]
        if len(set(keys)) != len(keys):
            raise ValueError("adjustments repeat a key")
        if self.revision and not self.parent:
            raise ValueError(f"revision {self.revision} names no parent calibration")
        return self

    @classmethod
    def empty(cls, machine: str) -> Calibration:
        return cls(machine=machine)

    def to_json(self) -> dict[str, Any]:
        d = self.model_dump(mode="json")
        for k, default in (("parent", ""), ("revision", 0), ("adjustments", []),
                           ("imports", [])):
            if d.get(k) == default:
                del d[k]  # files (and fingerprints) from before recalibration and imports
                # stay as they were
        return d

    @classmethod
    def from_json(cls, data: Any, *, file: str) -> Calibration:
        """Validate parsed JSON into a ``Calibration`` or raise ``SpecError``."""
        if not isinstance(data, dict):
            raise SpecError("expected a JSON object at the top level", file=file,
                            place="top level")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
            loc = "".join(f"[{k}]" if isinstance(k, int) else (f".{k}" if i else str(k))
                          for i, k in enumerate(err.get("loc", ()))) or "top level"
            raise SpecError(msg, file=file, place=loc) from None

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the calibration as JSON (atomically: the file appears only when complete)."""
        text = json.dumps(self.to_json(), indent=1, sort_keys=True, allow_nan=False) + "\n"
        return atomic_writer(path, lambda p: p.write_text(text, encoding="utf-8"))

    def fingerprint(self) -> str:
        payload = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return "calibration:sha256:" + hashlib.sha256(payload.encode()).hexdigest()[:32]

    def with_fits(self, fits: Sequence[Fit]) -> Calibration:
        return self.model_copy(update={"fits": list(fits)})


def load_calibration(path: str | os.PathLike[str]) -> Calibration:
    """Read and validate a calibration file; ``SpecError`` naming file, place and problem
    for anything missing, unreadable, corrupt or hostile (NaN, negative times, unknown
    fields, absurd nesting or size). The file goes through the input boundary
    (``placewise.io.load_json``: a regular file of at most 256 MiB, finite numbers)."""
    file = os.fspath(path)
    if not os.path.lexists(file):
        raise SpecError("no such calibration file", file=file)
    data = load_json(file, what="calibration", error=SpecError, limit_bytes=_MAX_FILE_BYTES)
    return Calibration.from_json(data, file=file)


# ---- keys and features ---------------------------------------------------------------------
