"""A device's efficiency assumptions as data: what fraction of its datasheet peaks its kernels
reach, by op class, precision and size, each fitted to a published kernel-level measurement.

A device spec may carry an ``efficiency`` block (``DeviceEfficiency``). The roofline cost
model (``placewise.cost.roofline``) reads it instead of its built-in constants; a device
without the block (or a field the block leaves out) keeps the built-in assumptions, which
the cost model states beside every cost it returns.

- ``contraction``: tensor-core GEMM / convolution (and the other contraction kinds, or the
  ``kinds`` listed) efficiency against the work of one kernel, per precision:
  ``efficiency(W) = peak_fraction * W / (W + half_work_flops)``, W the kernel's flops. Its
  time is then ``(W + half_work_flops) / (peak_fraction * peak)``: the large-kernel rate
  plus a fixed floor of ``half_work_flops / (peak_fraction * peak)`` seconds, the
  launch-bound time of a small GEMM (which is why a contraction costed by a curve pays no
  separate launch term). ``benchmarks/fit_presets.py`` fits both numbers to published
  GEMM measurements (``benchmarks/data/published_kernels.yaml``).
- ``kernel_s``: the fixed time of one kernel that is not costed by a curve (elementwise,
  pooling, normalisation, ...), replacing ``launch_overhead_s`` for ops and fused regions
  (transfers keep ``launch_overhead_s`` as their synchronisation).
- ``memory_fraction``: the fraction of the main memory's bandwidth a streaming
  (memory-bound) kernel reaches, replacing the built-in 0.80 (GPU-like) / 0.60 (CPU).

Every number carries its ``source``: the title and URL of the published measurement it was
fitted to, or read from.

>>> e = DeviceEfficiency.model_validate({"contraction": [{"dtypes": ["fp16"],
...     "peak_fraction": 0.8, "half_work_flops": 4e9, "source": "fit to ..."}]})
>>> e.curve_for(OpKind.CONV, DType.FP16).peak_fraction
0.8
>>> e.curve_for(OpKind.CONV, DType.INT8) is None
True
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from placewise.graph.ir import CONTRACTION_KINDS, OpKind
from placewise.units import DType

__all__ = ["ContractionCurve", "DeviceEfficiency"]


Fraction = Annotated[float, Field(gt=0, le=1)]
#: a kernel's fixed time: at most one second (longer is a typo for a per-kernel figure)
KernelSeconds = Annotated[float, Field(ge=0, le=1.0)]
#: the work at which a kernel reaches half its large-size efficiency (at most 1e18 flops)
HalfWork = Annotated[float, Field(ge=0, le=1e18)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ContractionCurve(_Strict):
    """Efficiency of contraction kernels of ``dtypes`` (and ``kinds``: every contraction
    kind when None) against the flops ``W`` of one kernel:
    ``peak_fraction * W / (W + half_work_flops)``."""

    dtypes: list[DType] = Field(min_length=1)
    kinds: list[OpKind] | None = None
    peak_fraction: Fraction
    half_work_flops: HalfWork
    source: str = Field(min_length=1)

    @field_validator("dtypes", mode="before")
    @classmethod
    def _parse_dtypes(cls, v: Any) -> Any:
        if isinstance(v, list):
            return [DType.parse(x) if isinstance(x, str) else x for x in v]
        return v

    @field_validator("kinds")
    @classmethod
    def _contractions_only(cls, v: list[OpKind] | None) -> list[OpKind] | None:
        for k in v or ():
            if k not in CONTRACTION_KINDS:
                names = ", ".join(sorted(x.value for x in CONTRACTION_KINDS))
                raise ValueError(f"{k.value!r} is not a contraction kind ({names})")
        return v

    def efficiency(self, work_flops: float) -> float:
        """The fraction of peak a kernel of ``work_flops`` reaches.

        >>> ContractionCurve(dtypes=[DType.FP16], peak_fraction=0.8, half_work_flops=1e9,
        ...                  source="s").efficiency(1e9)
        0.4
        """
        w = max(0.0, float(work_flops))
        if w == 0.0:
            return self.peak_fraction if self.half_work_flops == 0 else 0.0
        return self.peak_fraction * w / (w + self.half_work_flops)

    def covers(self, kind: OpKind, dtype: DType) -> bool:
        kinds = CONTRACTION_KINDS if self.kinds is None else self.kinds
        return dtype in self.dtypes and kind in kinds


class DeviceEfficiency(_Strict):
    """A device's fitted efficiency assumptions (module docstring); every field optional,
    each number with its source. ``note``: what the block leaves to the built-in
    assumptions and why (no published measurement found, ...)."""

    contraction: list[ContractionCurve] = Field(default_factory=list)
    kernel_s: KernelSeconds | None = None
    kernel_source: str | None = Field(default=None, min_length=1)
    memory_fraction: Fraction | None = None
    memory_source: str | None = Field(default=None, min_length=1)
    note: str = ""

    @model_validator(mode="after")
    def _check(self) -> DeviceEfficiency:
        for value, src, name in ((self.kernel_s, self.kernel_source, "kernel_s"),
                                 (self.memory_fraction, self.memory_source,
                                  "memory_fraction")):
            if (value is None) != (src is None):
                raise ValueError(f"{name} and its source go together: give the figure with "
                                 f"the published measurement it comes from")
        seen: dict[tuple[OpKind, DType], int] = {}
        for i, c in enumerate(self.contraction):
            for kind in (CONTRACTION_KINDS if c.kinds is None else c.kinds):
                for d in c.dtypes:
                    if (kind, d) in seen:
                        raise ValueError(f"contraction[{i}] repeats {kind.value}/{d.value}, "
                                         f"already covered by contraction[{seen[kind, d]}]")
                    seen[kind, d] = i
        return self

    def curve_for(self, kind: OpKind, dtype: DType) -> ContractionCurve | None:
        """The curve covering ``kind`` at ``dtype`` (None: the built-in rule applies)."""
        for c in self.contraction:
            if c.covers(kind, dtype):
                return c
        return None
