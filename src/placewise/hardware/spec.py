"""Machine specs: devices, memory tiers, shared resources and links, validated on load.

A spec is data (YAML), never code. Every number carries a ``source``: a datasheet title/URL,
or "measured by placewise hw probe" with date and tags. Units are in the field names.

>>> m = read_machine("h100-sxm-server")
>>> m.device("gpu0").peak_flops_per_s[DType.BF16] > 1e14
True
>>> [l.name for l in m.route("cpu", "gpu0")]
['pcie-gpu0']
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import deque
from collections.abc import Iterable
from enum import Enum, StrEnum
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from placewise.errors import SpecError
from placewise.graph.ir import OpKind
from placewise.hardware.efficiency import DeviceEfficiency
from placewise.io import MAX_YAML_BYTES, load_yaml, parse_yaml
from placewise.units import DType

__all__ = [
    "CoRun",
    "Device",
    "DeviceEfficiency",
    "DeviceKind",
    "DevicePower",
    "Link",
    "Machine",
    "MachinePower",
    "MemoryTier",
    "ModeDevice",
    "PowerMode",
    "SharedResource",
    "list_presets",
    "machine_json_schema",
    "machine_json_schema_text",
    "parse_machine",
    "read_machine",
]

#: the largest memory tier a spec may describe (1 EiB); larger is a typo (10**400...)
MAX_CAPACITY_BYTES = 1 << 60
#: rates (FLOP/s, bytes/s) a spec may give: at least 1 per second, at most 1e30
MIN_RATE, MAX_RATE = 1.0, 1e30
#: the longest launch overhead or link latency a spec may give (s)
MAX_DURATION_S = 1e6


def _at_least_min_rate(v: float) -> float:
    if v < MIN_RATE:
        raise ValueError(f"must be at least {MIN_RATE:g} per second (got {v!r})")
    return v


# every float refuses inf and NaN (``_Strict``: allow_inf_nan=False) and has bounds, so no
# number that loads can overflow a cost, a schedule or a plan file
Rate = Annotated[float, Field(gt=0, le=MAX_RATE), AfterValidator(_at_least_min_rate)]
Capacity = Annotated[int, Field(gt=0, le=MAX_CAPACITY_BYTES)]
PositiveInt = Annotated[int, Field(gt=0, le=1 << 31)]
Duration = Annotated[float, Field(ge=0, le=MAX_DURATION_S)]
#: the most power a spec may give (10 MW: a whole data hall); larger is a typo
MAX_POWER_W = 1e7
Watts = Annotated[float, Field(ge=0, le=MAX_POWER_W)]
ClockHz = Annotated[float, Field(gt=0, le=1e12)]


class _PlacedError(ValueError):
    """A cross-reference problem found after field validation, with the place it concerns."""

    def __init__(self, problem: str, place: str):
        super().__init__(problem)
        self.place = place


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True,
                              allow_inf_nan=False)


class DeviceKind(StrEnum):
    GPU = "gpu"
    CPU = "cpu"
    NPU = "npu"
    DLA = "dla"
    ACCELERATOR = "accelerator"


class MemoryTier(_Strict):
    """A capacity with a bandwidth: HBM, DRAM, SRAM, host memory."""

    name: str
    capacity_bytes: Capacity
    bandwidth_bytes_per_s: Rate
    source: str = Field(min_length=1)
    shared_with: str | None = None  # name of a SharedResource whose bandwidth this tier uses


class DevicePower(_Strict):
    """A device's power draw (W): ``active_w`` while it runs a task, ``idle_w`` while it is
    powered but waits. ``source``: the datasheet figure (title + URL), or "estimate, not a
    datasheet figure: ..." with the reasoning. ``clock_hz``/``units``: the clock and the
    compute units (CPU cores, GPU TPCs) its peaks are computed at, which power modes scale
    from (``placewise.hardware.power``); needed only by a machine with ``power.modes``.
    Not part of ``Machine.fingerprint``."""

    active_w: Watts
    idle_w: Watts
    source: str = Field(min_length=1)
    clock_hz: ClockHz | None = None
    units: PositiveInt | None = None

    @model_validator(mode="after")
    def _check(self) -> DevicePower:
        if self.idle_w > self.active_w:
            raise ValueError(f"idle_w ({self.idle_w:g}) exceeds active_w ({self.active_w:g})")
        return self


class ModeDevice(_Strict):
    """One device in a power mode: its maximum clock and online units (default: all of
    them), and its power figures where a source gives them (else they are scaled: see
    ``placewise.hardware.power``)."""

    clock_hz: ClockHz
    units: PositiveInt | None = None
    active_w: Watts | None = None
    idle_w: Watts | None = None
    source: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _check(self) -> ModeDevice:
        if (self.active_w is not None or self.idle_w is not None) and self.source is None:
            raise ValueError("active_w/idle_w need a source")
        return self


class PowerMode(_Strict):
    """A power mode (e.g. nvpmodel's 30W): its power budget and each device's clocks."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$")
    aliases: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-]+$")]] = Field(
        default_factory=list)
    budget_w: Watts
    source: str = Field(min_length=1)
    memory_clock_hz: ClockHz | None = None  # DRAM (EMC) clock cap; scales memory bandwidth
    devices: dict[str, ModeDevice] = Field(min_length=1)


class MachinePower(_Strict):
    """Machine-level power: ``max_w`` the board, module or TDP power (the budget the
    devices share), ``idle_w`` the whole machine idle, each with its source; ``modes``:
    the power modes the hardware has, ``default_mode`` the one the unmoded spec describes
    (its clocks are the devices' ``power.clock_hz``), ``mode`` the mode this spec is in
    (set by ``placewise.hardware.power.apply_mode``; None: the default). Not part of
    ``Machine.fingerprint``."""

    max_w: Watts
    max_source: str = Field(min_length=1)
    idle_w: Watts
    idle_source: str = Field(min_length=1)
    memory_clock_hz: ClockHz | None = None  # DRAM clock of the default mode
    modes: list[PowerMode] = Field(default_factory=list)
    default_mode: str | None = None
    mode: str | None = None

    @model_validator(mode="after")
    def _check(self) -> MachinePower:
        if self.idle_w > self.max_w:
            raise ValueError(f"idle_w ({self.idle_w:g}) exceeds max_w ({self.max_w:g})")
        names: list[str] = []
        for m in self.modes:
            for n in (m.name, *m.aliases):
                if n.lower() in names:
                    raise ValueError(f"power mode name {n!r} repeats")
                names.append(n.lower())
        if self.modes and self.default_mode is None:
            raise ValueError("power.default_mode must name one of the modes")
        for field, value in (("default_mode", self.default_mode), ("mode", self.mode)):
            if value is not None and value.lower() not in names:
                raise ValueError(f"power.{field} {value!r} is not a mode "
                                 f"(modes: {', '.join(m.name for m in self.modes) or 'none'})")
        return self


class CoRun(_Strict):
    """How much longer a device's work takes while other devices compute beside it (their
    engines contend for what the spec does not model as bandwidth: DRAM banks and row
    buffers, caches, the fabric): ``added`` maps a co-running device to the fraction its
    being busy adds, so that with the set ``B`` busy the device's compute runs ``1 + sum of
    added over B`` times longer (``Device.corun_slowdown``), fitted to published or measured
    figures named in ``source``."""

    added: dict[str, Annotated[float, Field(ge=0.0, le=10.0)]]
    source: str = Field(min_length=1)


class Device(_Strict):
    """Something that executes ops, with per-dtype peaks, launch overhead and memory tiers."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$")
    kind: DeviceKind
    model: str = ""
    peak_flops_per_s: dict[DType, Rate]
    peak_source: str = Field(min_length=1)
    memory: list[MemoryTier] = Field(min_length=1)
    launch_overhead_s: Duration
    launch_source: str = Field(min_length=1)
    # one partition (a compiled engine/session) launched and synchronised: what a plan pays
    # per partition on this device beyond its kernels (None: the cost model's stated
    # default for the device kind)
    partition_overhead_s: Duration | None = None
    partition_source: str | None = Field(default=None, min_length=1)
    compute_units: PositiveInt = 1  # SMs, cores, NPU tiles: the parallelism an op must fill
    lanes: Annotated[int, Field(gt=0, le=4096)] = 1  # concurrent streams/queues the scheduler may use
    supported_kinds: list[OpKind] | None = None  # None: every kind
    unsupported_kinds: list[OpKind] = Field(default_factory=list)
    supported_dtypes: list[DType] | None = None  # None: the keys of peak_flops_per_s
    resources: list[str] = Field(default_factory=list)  # shared resources it also occupies
    cores: list[Annotated[int, Field(ge=0, le=1 << 20)]] | None = None  # local devices: the OS CPU ids this device is pinned to
    backend: str | None = None  # local devices: the runtime backend ("torch", "onnxruntime")
    power: DevicePower | None = None  # None: no power figures (energy not available)
    # fitted efficiency assumptions (``placewise.hardware.efficiency``); None: the cost
    # model's built-in assumptions, stated beside every cost
    efficiency: DeviceEfficiency | None = None
    corun: CoRun | None = None  # slowdown beside other busy devices; None: none known

    def corun_slowdown(self, busy: Iterable[str]) -> float:
        """``1 + sum of corun.added`` over the devices ``busy`` (1.0 without ``corun``).

        >>> from placewise.hardware.load import load_machine
        >>> gpu = load_machine("jetson-agx-orin").device("gpu")
        >>> gpu.corun_slowdown([]), round(gpu.corun_slowdown(["dla0", "dla1"]), 3)
        (1.0, 1.311)
        """
        if self.corun is None:
            return 1.0
        return 1.0 + sum(self.corun.added.get(b, 0.0) for b in busy)

    @field_validator("peak_flops_per_s", mode="before")
    @classmethod
    def _parse_dtype_keys(cls, v: Any) -> Any:
        if isinstance(v, dict):
            out = {}
            for k, val in v.items():
                out[DType.parse(k) if isinstance(k, str) else k] = val
            return out
        return v

    @field_validator("supported_dtypes", mode="before")
    @classmethod
    def _parse_dtypes(cls, v: Any) -> Any:
        if isinstance(v, list):
            return [DType.parse(x) if isinstance(x, str) else x for x in v]
        return v

    @property
    def is_local(self) -> bool:
        """A device of this machine (probed ``local``): it has the CPU ids it is pinned to
        and a runtime ``backend``. Only local devices run plans; the others plan and export."""
        return bool(self.cores) and bool(self.backend)

    @model_validator(mode="after")
    def _check(self) -> Device:
        if not self.peak_flops_per_s:
            raise ValueError("peak_flops_per_s must name at least one dtype")
        names = [t.name for t in self.memory]
        if len(set(names)) != len(names):
            raise ValueError(f"memory tier names repeat: {names}")
        if (self.partition_overhead_s is None) != (self.partition_source is None):
            raise ValueError("partition_overhead_s and partition_source go together: give "
                             "the figure with where it comes from")
        return self

    @property
    def dtypes(self) -> list[DType]:
        if self.supported_dtypes is not None:
            return list(self.supported_dtypes)
        return list(self.peak_flops_per_s)

    def supports(self, kind: OpKind, dtype: DType | None = None) -> bool:
        if kind in self.unsupported_kinds:
            return False
        if self.supported_kinds is not None and kind not in self.supported_kinds:
            return False
        return dtype is None or dtype in self.dtypes

    def peak(self, dtype: DType) -> float:
        """Peak FLOP/s for ``dtype``; a dtype without its own peak runs at the fp32 one."""
        if dtype in self.peak_flops_per_s:
            return self.peak_flops_per_s[dtype]
        if DType.FP32 in self.peak_flops_per_s:
            return self.peak_flops_per_s[DType.FP32]
        return max(self.peak_flops_per_s.values())

    @property
    def main_memory(self) -> MemoryTier:
        """The tier that holds weights and activations by default (the first one listed)."""
        return self.memory[0]

    def tier(self, name: str) -> MemoryTier:
        for t in self.memory:
            if t.name == name:
                return t
        raise KeyError(f"device {self.name!r} has no memory tier {name!r}")


class SharedResource(_Strict):
    """Something several devices contend for, e.g. one memory controller."""

    name: str
    kind: str = "memory_controller"
    bandwidth_bytes_per_s: Rate
    source: str = Field(min_length=1)


class Link(_Strict):
    """A path between two devices' memories."""

    name: str
    endpoints: tuple[str, str]
    bandwidth_bytes_per_s: Rate  # per direction
    latency_s: Duration
    duplex: bool = True  # True: the two directions do not contend
    resource: str | None = None  # the resource a transfer occupies (defaults to the link)
    source: str = Field(min_length=1)

    @property
    def resource_name(self) -> str:
        return self.resource or f"link:{self.name}"


class Machine(_Strict):
    """A machine: devices, the shared resources they contend for, and links between them."""

    schema_version: int = 1
    name: str
    description: str = ""
    tags: dict[str, str] = Field(default_factory=dict)
    devices: list[Device] = Field(min_length=1)
    shared_resources: list[SharedResource] = Field(default_factory=list)
    links: list[Link] = Field(default_factory=list)
    power: MachinePower | None = None  # None: no machine-level power figures

    @model_validator(mode="after")
    def _check(self) -> Machine:
        names = [d.name for d in self.devices]
        self._check_power(names)
        for i, d in enumerate(self.devices):
            if d.name in names[:i]:
                raise _PlacedError(f"device name {d.name!r} repeats",
                                   f"devices[{i}]({d.name}).name")
        shared = [r.name for r in self.shared_resources]
        for i, r in enumerate(self.shared_resources):
            if r.name in shared[:i]:
                raise _PlacedError(f"shared resource name {r.name!r} repeats",
                                   f"shared_resources[{i}]({r.name}).name")
        for i, d in enumerate(self.devices):
            for j, res in enumerate(d.resources):
                if res not in shared:
                    raise _PlacedError(
                        f"device {d.name!r} names unknown shared resource {res!r} "
                        f"(known: {', '.join(shared) or 'none'})",
                        f"devices[{i}]({d.name}).resources[{j}]")
            for j, t in enumerate(d.memory):
                if t.shared_with is not None and t.shared_with not in shared:
                    raise _PlacedError(
                        f"device {d.name!r} tier {t.name!r} names unknown shared resource "
                        f"{t.shared_with!r} (known: {', '.join(shared) or 'none'})",
                        f"devices[{i}]({d.name}).memory[{j}]({t.name}).shared_with")
        for i, d in enumerate(self.devices):
            for other in (d.corun.added if d.corun is not None else {}):
                if other not in names or other == d.name:
                    raise _PlacedError(
                        f"device {d.name!r} names {other!r} as a co-runner, which is not "
                        f"another device of the machine",
                        f"devices[{i}]({d.name}).corun.added.{other}")
        link_names = [link.name for link in self.links]
        for i, link in enumerate(self.links):
            where = f"links[{i}]({link.name})"
            if link.name in link_names[:i]:
                raise _PlacedError(f"link name {link.name!r} repeats", f"{where}.name")
            for j, e in enumerate(link.endpoints):
                if e not in names:
                    raise _PlacedError(f"link {link.name!r} names unknown device {e!r} "
                                       f"(devices: {', '.join(names)})",
                                       f"{where}.endpoints[{j}]")
            if link.endpoints[0] == link.endpoints[1]:
                raise _PlacedError(f"link {link.name!r} connects device {link.endpoints[0]!r} "
                                   f"to itself", f"{where}.endpoints")
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                if not self._path(a, b):
                    raise _PlacedError(f"no route between devices {a!r} and {b!r}: add a link",
                                       "links")
        return self

    def _check_power(self, names: list[str]) -> None:
        if self.power is None:
            return
        for i, mode in enumerate(self.power.modes):
            for dev in mode.devices:
                where = f"power.modes[{i}]({mode.name}).devices.{dev}"
                if dev not in names:
                    raise _PlacedError(f"power mode {mode.name!r} names unknown device {dev!r} "
                                       f"(devices: {', '.join(names)})", where)
                d = self.devices[names.index(dev)]
                if d.power is None or d.power.clock_hz is None:
                    raise _PlacedError(f"device {dev!r} is in power mode {mode.name!r} but has "
                                       f"no power.clock_hz to scale from",
                                       f"devices[{names.index(dev)}]({dev}).power.clock_hz")
            if mode.memory_clock_hz is not None and self.power.memory_clock_hz is None:
                raise _PlacedError(f"power mode {mode.name!r} caps the memory clock but "
                                   f"power.memory_clock_hz (the default's) is not given",
                                   "power.memory_clock_hz")

    def device(self, name: str) -> Device:
        for d in self.devices:
            if d.name == name:
                return d
        raise KeyError(f"machine {self.name!r} has no device {name!r}")

    @property
    def device_names(self) -> list[str]:
        return [d.name for d in self.devices]

    def shared(self, name: str) -> SharedResource:
        for r in self.shared_resources:
            if r.name == name:
                return r
        raise KeyError(name)

    def _path(self, a: str, b: str) -> list[Link]:
        prev: dict[str, tuple[str, Link] | None] = {a: None}
        q = deque([a])
        while q:
            u = q.popleft()
            if u == b:
                break
            for link in self.links:
                if u in link.endpoints:
                    v = link.endpoints[1] if link.endpoints[0] == u else link.endpoints[0]
                    if v not in prev:
                        prev[v] = (u, link)
                        q.append(v)
        if b not in prev:
            return []
        path: list[Link] = []
        node = b
        while prev[node] is not None:
            u, link = prev[node]  # type: ignore[misc]
            path.append(link)
            node = u
        path.reverse()
        return path

    def route(self, src: str, dst: str) -> list[Link]:
        """Links a tensor crosses from ``src`` to ``dst`` (fewest hops); [] if same device."""
        if src == dst:
            return []
        return self._path(src, dst)

    def without_efficiency(self) -> Machine:
        """This machine with every device's ``efficiency`` block removed: the cost model's
        built-in assumptions (what a spec without the block gets).

        >>> m = read_machine("h100-sxm-server")
        >>> [d.efficiency is None for d in m.without_efficiency().devices]
        [True, True, True]
        """
        return self.model_copy(update={"devices": [
            d.model_copy(update={"efficiency": None}) for d in self.devices]})

    def fingerprint(self) -> str:
        """sha256 of the spec without its description and power figures (power does not
        change a plan; a power mode that changes peaks changes them, hence this)."""
        exclude: Any = {"description": True, "power": True,
                        "devices": {"__all__": {"power"}}}
        payload = self.model_dump(mode="json", exclude=exclude)
        for d in payload["devices"]:  # a spec without co-run factors keeps its fingerprint
            if d.get("corun") is None:
                d.pop("corun", None)
        return "sha256:" + hashlib.sha256(
            json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def machine_json_schema() -> dict[str, Any]:
    """The published JSON Schema (draft 2020-12) of the YAML machine spec.

    >>> machine_json_schema()["title"]
    'Machine'
    """
    schema = Machine.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def machine_json_schema_text() -> str:
    """The schema as the text of ``placewise/schemas/machine.schema.json`` (regenerate that
    file with ``python -c "from placewise.hardware.spec import machine_json_schema_text as t;
    open('src/placewise/schemas/machine.schema.json', 'w').write(t())"``)."""
    return json.dumps(machine_json_schema(), indent=2, sort_keys=True) + "\n"


def list_presets() -> list[str]:
    folder = resources.files("placewise.hardware") / "presets"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


_ENUM_REPR = re.compile(r"<\w+\.\w+: '([^']*)'>")


def _loc(err: Any, data: Any) -> str:
    """Render a pydantic error location with device/link names instead of bare indices."""
    parts: list[str] = []
    node = data
    for key in err.get("loc", ()):
        if isinstance(key, int) and isinstance(node, list) and 0 <= key < len(node):
            item = node[key]
            label = item.get("name") if isinstance(item, dict) else None
            parts.append(f"[{key}]" + (f"({label})" if label else ""))
            node = item
        elif key == "[key]":
            parts.append(" (the key)")
            node = None
        else:
            text = key.value if isinstance(key, Enum) else str(key)
            enum_repr = _ENUM_REPR.fullmatch(text)  # pydantic renders enum dict keys by repr
            if enum_repr:
                text = enum_repr.group(1)
            parts.append(f".{text}" if parts else text)
            node = node.get(text, node.get(key)) if isinstance(node, dict) else None
    return "".join(parts) or "top level"


def _problem(err: Any) -> str:
    """One readable sentence for one pydantic error."""
    msg: str = err.get("msg", "invalid").removeprefix("Value error, ")
    ctx = err.get("ctx") or {}
    if err.get("type") == "enum" and "expected" in ctx:
        expected = [x.strip() for x in str(ctx["expected"]).replace(" or ", ", ").split(",")]
        if len(expected) > 16:
            msg = (f"unknown value; expected one of {', '.join(expected[:10])}, ... "
                   f"({len(expected)} values)")
    value = err.get("input")
    if "input" in err and not isinstance(value, dict | list) and err.get("type") != "missing" \
            and "(got " not in msg:
        msg += f" (got {_short_repr(value)})"
    return msg


def _short_repr(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {len(str(value)) if value.bit_length() < 14000 else 'many'} digits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def parse_machine(data: Any, *, file: str) -> Machine:
    """Validate already-parsed YAML/JSON data into a ``Machine`` or raise ``SpecError``.

    >>> parse_machine([], file="m.yaml")
    Traceback (most recent call last):
    ...
    placewise.errors.SpecError: m.yaml: top level: expected a mapping at the top level
    """
    if not isinstance(data, dict):
        raise SpecError("expected a mapping at the top level", file=file, place="top level")
    try:
        return Machine.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        cause = (err.get("ctx") or {}).get("error")
        if isinstance(cause, _PlacedError):
            raise SpecError(str(cause), file=file, place=cause.place) from None
        raise SpecError(_problem(err), file=file, place=_loc(err, data)) from None


def read_machine(ref: str | Path) -> Machine:
    """A machine from a preset name or a YAML/JSON path (``hardware.load.load_machine``
    also reads ``local`` and ``NAME@MODE``).

    >>> read_machine("jetson-agx-orin").name
    'jetson-agx-orin'
    """
    ref_s = str(ref)
    path = Path(ref_s)
    if ref_s in list_presets():
        file = f"preset:{ref_s}"
        text = (resources.files("placewise.hardware") / "presets" / f"{ref_s}.yaml").read_text()
        data = parse_yaml(text, file=file, error=SpecError, check=False)
    elif path.suffix.lower() in (".yaml", ".yml", ".json") or path.exists() or path.is_symlink():
        file = ref_s
        # the schema (allow_inf_nan=False and bounds) checks every number, naming the field
        data = load_yaml(path, what="machine spec", error=SpecError,
                         limit_bytes=MAX_YAML_BYTES, check=False)
    else:
        raise SpecError(f"not a preset ({', '.join(list_presets())}), a YAML file or 'local'",
                        file=ref_s)
    return parse_machine(data, file=file)
