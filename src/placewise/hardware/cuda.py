"""CUDA devices where they are: what a probe found (small records), and the ``gpu`` devices
and host links of a machine spec built from them. Everything here is a pure function of
those records, so it is tested on machines without a GPU by feeding it what published
``nvidia-smi`` output or ``torch.cuda.get_device_properties`` printouts show.
``placewise.hardware.cuda_measure`` gathers the raw records and measures (that part needs
the GPU); ``placewise.hardware.probe`` calls both.

Sources, each optional:

- ``torch.cuda``: ``is_available()`` and ``get_device_properties(i)``: ``name``,
  ``total_memory``, ``multi_processor_count``, ``major``/``minor`` (compute capability),
  ``is_integrated``, and clock rates and memory bus width where the build exposes them;
- the CUDA driver (``libcuda`` through ctypes, as ``deviceQuery`` reads it): the same
  attributes, for machines with onnxruntime-gpu and no CUDA torch;
- onnxruntime: ``CUDAExecutionProvider`` in ``get_available_providers()``;
- ``nvidia-smi --query-gpu=...``: name, memory, maximum SM and memory clocks, compute
  capability and PCIe generation/width where the driver knows the fields.

Peaks are derived, never measured here: SMs x maximum SM clock x the per-SM dense rate of
the architecture (``ARCHITECTURES``, keyed by compute capability, each rate with its
NVIDIA whitepaper). They are upper bounds: clocks sustained under tensor-core load are
lower. A GPU whose compute capability has no entry, or whose SM count or clock is unknown,
is reported and left out of the spec, never guessed.

>>> rec = parse_nvidia_smi("name, memory.total [MiB], clocks.max.sm [MHz], "
...     "clocks.max.memory [MHz]\\nNVIDIA H200, 143771 MiB, 1980 MHz, 3201 MHz\\n")
>>> rec[0]["name"], rec[0]["total_memory_bytes"], rec[0]["sm_clock_hz"]
('NVIDIA H200', 150754820096, 1980000000.0)
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from placewise.hardware.stats import Stat
from placewise.units import DType

__all__ = [
    "ARCHITECTURES",
    "NO_CUDA",
    "Architecture",
    "CudaFound",
    "GpuFacts",
    "GpuMeasured",
    "found_from_raw",
    "gpu_spec",
    "parse_nvidia_smi",
]

#: what ``hw probe`` says where it finds no GPU (each part replaced by what was seen)
NO_CUDA = "no CUDA device (torch.cuda unavailable / no CUDAExecutionProvider / no nvidia-smi)"

_P100_WP = ("\"NVIDIA Tesla P100\" whitepaper WP-08019-001 (2016), Table 1 (56 SMs at 1480 MHz: "
            "10.6 TFLOPS FP32, 5.3 FP64, 21.2 FP16): 64 FP32 and 32 FP64 cores per SM, FP16 at "
            "twice the FP32 rate, "
            "https://images.nvidia.com/content/pdf/tesla/whitepaper/pascal-architecture-whitepaper.pdf")
_V100_WP = ("\"NVIDIA Tesla V100 GPU Architecture\" whitepaper WP-08608-001 (2017), Table 1 "
            "(80 SMs at 1530 MHz: 15.7 TFLOPS FP32, 7.8 FP64, 125 Tensor): 64 FP32 and 32 "
            "FP64 cores and 8 tensor cores of 64 FP16 FMA/clock per SM, "
            "https://images.nvidia.com/content/volta-architecture/pdf/volta-architecture-whitepaper.pdf")
_TURING_WP = ("\"NVIDIA Turing GPU Architecture\" whitepaper WP-09183-001 (2018), Tesla T4 "
              "(40 SMs at 1590 MHz: 65 TFLOPS FP16, 130 TOPS INT8, 8.1 TFLOPS FP32): 64 FP32 "
              "cores, 2 FP64 units and 8 tensor cores per SM, "
              "https://images.nvidia.com/aem-dam/en-zz/Solutions/design-visualization/technologies/turing-architecture/NVIDIA-Turing-Architecture-Whitepaper.pdf")
_A100_WP = ("\"NVIDIA A100 Tensor Core GPU Architecture\" whitepaper (2020), Table 1 and 3 "
            "(108 SMs at 1410 MHz: 19.5 TFLOPS FP32, 9.7 FP64, 156 TF32, 312 FP16/BF16, 624 "
            "TOPS INT8, dense): 64 FP32 and 32 FP64 cores and 4 tensor cores of 256 FP16 "
            "FMA/clock per SM, https://images.nvidia.com/aem-dam/en-zz/Solutions/data-center/nvidia-ampere-architecture-whitepaper.pdf")
_GA102_WP = ("\"NVIDIA Ampere GA102 GPU Architecture\" whitepaper (2021), A40 / RTX 3090 "
             "tables: 128 FP32 cores and 4 tensor cores per SM, dense FP16 tensor 1024 "
             "FLOP/clock/SM (FP16 accumulate; GeForce parts run FP32 accumulate at half), "
             "INT8 twice that, TF32 half, "
             "https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf")
_ORIN_TB = ("\"NVIDIA Jetson AGX Orin Series Technical Brief\" v1.2 (2022): 16 SMs, 2048 CUDA "
            "cores, 64 third-generation tensor cores; 5.3 FP32 TFLOPS and 170 sparse INT8 TOPS "
            "(85 dense) at 1.3 GHz, i.e. 256 FP32 FLOP and 4096 INT8 ops per clock per SM, "
            "https://www.nvidia.com/content/dam/en-zz/Solutions/gtcf21/jetson-orin/nvidia-jetson-agx-orin-technical-brief.pdf")
_ADA_WP = ("\"NVIDIA ADA GPU Architecture\" whitepaper v2.1 (2023), L40 / RTX 4090 tables: 128 "
           "FP32 cores and 4 fourth-generation tensor cores per SM, dense FP16/BF16 tensor "
           "1024 FLOP/clock/SM (GeForce: half with FP32 accumulate), FP8 and INT8 2048, "
           "https://images.nvidia.com/aem-dam/Solutions/Data-Center/l4/nvidia-ada-gpu-architecture-whitepaper-v2.1.pdf")
_HOPPER_WP = ("\"NVIDIA H100 Tensor Core GPU Architecture\" whitepaper (2022), Tables 2-3: 128 "
              "FP32 and 64 FP64 cores and 4 fourth-generation tensor cores per SM, twice the "
              "A100 SM's dense MMA rate clock for clock (FP16/BF16 4096, TF32 2048, FP8 and "
              "INT8 8192 FLOP/clock/SM; FP64 tensor 256), "
              "https://resources.nvidia.com/en-us-tensor-core/gtc22-whitepaper-hopper")


@dataclass(frozen=True, slots=True)
class Architecture:
    """Dense per-SM rates (operations per clock per SM) of one compute capability, the kind
    of device memory it pairs with, and where the rates come from."""

    name: str
    per_sm_per_clock: Mapping[DType, float]
    memory: str  # "hbm", "gddr" or "lpddr" (memory shared with the host)
    source: str


def _arch(name: str, memory: str, source: str, **rates: float) -> Architecture:
    return Architecture(name, {DType(k): v for k, v in rates.items()}, memory, source)


#: compute capability -> architecture. fp32 is the CUDA-core rate (2 x FP32 cores: one FMA
#: each); fp16/bf16/int8/fp8 the dense tensor-core rates; fp64 the FP64 (tensor) rate.
ARCHITECTURES: dict[tuple[int, int], Architecture] = {
    (6, 0): _arch("Pascal GP100", "hbm", _P100_WP, fp64=64, fp32=128, fp16=256),
    (7, 0): _arch("Volta", "hbm", _V100_WP, fp64=64, fp32=128, fp16=1024),
    (7, 5): _arch("Turing", "gddr", _TURING_WP, fp64=4, fp32=128, fp16=1024, int8=2048),
    (8, 0): _arch("Ampere GA100", "hbm", _A100_WP, fp64=128, fp32=128, fp16=2048,
                  bf16=2048, int8=4096),
    (8, 6): _arch("Ampere GA10x", "gddr", _GA102_WP, fp64=4, fp32=256, fp16=1024,
                  bf16=1024, int8=2048),
    (8, 7): _arch("Ampere GA10B (Orin)", "lpddr", _ORIN_TB, fp32=256, fp16=2048, bf16=2048,
                  int8=4096),
    (8, 9): _arch("Ada Lovelace", "gddr", _ADA_WP, fp64=4, fp32=256, fp16=1024, bf16=1024,
                  fp8_e4m3=2048, fp8_e5m2=2048, int8=2048),
    (9, 0): _arch("Hopper", "hbm", _HOPPER_WP, fp64=256, fp32=256, fp16=4096, bf16=4096,
                  fp8_e4m3=8192, fp8_e5m2=8192, int8=8192),
}


@dataclass(frozen=True, slots=True)
class GpuFacts:
    """One CUDA device as found: ``None`` where no source said."""

    index: int
    name: str
    total_memory_bytes: int | None = None
    sm_count: int | None = None
    compute_capability: tuple[int, int] | None = None
    sm_clock_hz: float | None = None  # the maximum SM clock
    memory_clock_hz: float | None = None  # the maximum memory clock (CUDA's/nvidia-smi's)
    memory_bus_bits: int | None = None
    integrated: bool = False
    pcie_gen: int | None = None
    pcie_width: int | None = None
    sources: tuple[str, ...] = ()

    def missing(self) -> list[str]:
        """What the spec needs and no source gave."""
        need = {"SM count": self.sm_count, "compute capability": self.compute_capability,
                "maximum SM clock": self.sm_clock_hz, "memory size": self.total_memory_bytes}
        return [k for k, v in need.items() if v is None]


@dataclass(frozen=True, slots=True)
class CudaFound:
    """What a probe found: the GPUs, and what each source said (for the report)."""

    gpus: tuple[GpuFacts, ...]
    torch_cuda: str
    onnxruntime_cuda: str
    nvidia_smi: str
    measure_with: str | None  # "torch" or "onnxruntime": what can measure here; None: nothing
    host_machine: str = ""  # platform.machine() of the host (aarch64: a Grace host)

    @property
    def report(self) -> str:
        """One line: the GPUs found and by what, or why none."""
        said = f"{self.torch_cuda} / {self.onnxruntime_cuda} / {self.nvidia_smi}"
        if not self.gpus:
            return f"no CUDA device ({said})"
        names = ", ".join(f"gpu{g.index} {g.name}" for g in self.gpus)
        return f"{len(self.gpus)} CUDA device{'s' if len(self.gpus) > 1 else ''}: {names} ({said})"


@dataclass(frozen=True, slots=True)
class GpuMeasured:
    """What ``cuda_measure`` measured on one GPU (each a ``Stat`` with what it measured)."""

    device_bandwidth: Stat  # bytes read + written per second by a large on-device copy
    launch: Stat  # seconds of a tiny kernel launched and synchronised
    h2d: tuple[Stat, Stat]  # (latency, bandwidth) of host -> device copies (pinned if measured)
    d2h: tuple[Stat, Stat]
    pageable: str = ""  # the pageable copies' figures, in words
    api: str = ""


# --------------------------------------------------------------------------- parsing

_NUMBER = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")
_SMI_KEYS = {"index": "index", "name": "name", "memory.total": "total_memory_bytes",
             "clocks.max.sm": "sm_clock_hz", "clocks.max.memory": "memory_clock_hz",
             "clocks.max.mem": "memory_clock_hz", "compute_cap": "compute_capability",
             "pcie.link.gen.max": "pcie_gen", "pcie.link.width.max": "pcie_width",
             "driver_version": "driver_version"}
_SCALE = {"mib": 2**20, "gib": 2**30, "kib": 2**10, "mhz": 1e6, "ghz": 1e9, "khz": 1e3, "": 1}


def _smi_value(key: str, text: str) -> Any:
    text = text.strip()
    if not text or text.strip("[]").lower() in ("n/a", "not supported", "unknown error"):
        return None
    if key in ("name", "driver_version"):
        return text
    if key == "compute_capability":
        major, _, minor = text.partition(".")
        return (int(major), int(minor or 0)) if major.isdigit() and minor.isdigit() else None
    m = _NUMBER.match(text)
    if m is None:
        return None
    value = float(m.group(1)) * _SCALE.get(m.group(2).lower(), 1)
    return int(value) if key in ("index", "total_memory_bytes", "pcie_gen", "pcie_width") \
        else value


def parse_nvidia_smi(text: str) -> list[dict[str, Any]]:
    """Rows of ``nvidia-smi --query-gpu=... --format=csv`` (header line first; units such as
    ``MiB``/``MHz`` in the header or the values) as dicts with unit-named keys; unknown
    columns are dropped, ``N/A`` is ``None``. Text without a header is no rows."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines or "name" not in lines[0]:
        return []
    header = [h.strip().split(" [")[0] for h in lines[0].split(",")]
    rows = []
    for ln in lines[1:]:
        cells = [c.strip() for c in ln.split(",")]
        if len(cells) != len(header):
            continue
        row = {_SMI_KEYS[h]: _smi_value(_SMI_KEYS[h], c)
               for h, c in zip(header, cells, strict=True) if h in _SMI_KEYS}
        if row.get("name"):
            rows.append(row)
    return rows


def _from_properties(i: int, p: Mapping[str, Any], source: str) -> GpuFacts:
    """``torch.cuda.get_device_properties`` (or the driver's attributes under the same
    names; clocks in kHz as CUDA gives them) as ``GpuFacts``."""
    def num(key: str) -> float | None:
        v = p.get(key)
        return float(v) if isinstance(v, int | float) and v > 0 else None

    major, minor = p.get("major"), p.get("minor")
    sm_khz, mem_khz = num("clock_rate"), num("memory_clock_rate")
    mem = num("total_memory")
    sms, bus = num("multi_processor_count"), num("memory_bus_width")
    return GpuFacts(
        index=i, name=str(p.get("name", f"CUDA device {i}")),
        total_memory_bytes=int(mem) if mem else None,
        sm_count=int(sms) if sms else None,
        compute_capability=(int(major), int(minor)) if isinstance(major, int)
        and isinstance(minor, int) else None,
        sm_clock_hz=sm_khz * 1e3 if sm_khz else None,
        memory_clock_hz=mem_khz * 1e3 if mem_khz else None,
        memory_bus_bits=int(bus) if bus else None,
        integrated=bool(p.get("is_integrated", False)), sources=(source,))


def _fill(base: GpuFacts, other: GpuFacts) -> GpuFacts:
    """``base`` with the gaps ``other`` (the same GPU seen by another source) fills."""
    upd = {f: getattr(other, f) for f in _FACT_FIELDS
           if getattr(base, f) is None and getattr(other, f) is not None}
    if not upd:
        return base
    return replace(base, **upd, sources=(*base.sources, *other.sources))


_FACT_FIELDS = ("total_memory_bytes", "sm_count", "compute_capability", "sm_clock_hz",
                "memory_clock_hz", "memory_bus_bits", "pcie_gen", "pcie_width")


def _from_smi(i: int, row: Mapping[str, Any]) -> GpuFacts:
    facts: dict[str, Any] = {f: row.get(f) for f in _FACT_FIELDS}
    return GpuFacts(index=i, name=str(row["name"]), sources=("nvidia-smi",), **facts)


def _merge(gpus: list[GpuFacts], others: Sequence[GpuFacts]) -> list[GpuFacts]:
    """Each GPU filled from the first unused one of ``others`` with the same name."""
    used: set[int] = set()
    out = []
    for g in gpus:
        j = next((j for j, o in enumerate(others) if j not in used and o.name == g.name), None)
        if j is not None:
            used.add(j)
            g = _fill(g, others[j])
        out.append(g)
    return out


def found_from_raw(raw: Mapping[str, Any]) -> CudaFound:
    """``CudaFound`` from what ``cuda_measure.detect_raw`` gathered (or a recorded copy):
    ``torch``: {"version", "available", "devices": [properties]}; ``driver``: {"devices":
    [attributes]} or absent; ``onnxruntime``: {"version", "providers"}; ``nvidia_smi``:
    {"text", "error"}; ``host_machine``. Devices come from torch, else the driver, else
    nvidia-smi; nvidia-smi's rows fill the gaps of the device with the same name.

    >>> f = found_from_raw({})
    >>> f.report
    'no CUDA device (torch not installed / no onnxruntime / no nvidia-smi)'
    """
    torch = raw.get("torch") or {}
    driver = raw.get("driver") or {}
    ort = raw.get("onnxruntime") or {}
    smi = raw.get("nvidia_smi") or {}
    rows = parse_nvidia_smi(smi.get("text") or "")
    tv = torch.get("version")
    smi_gpus = [_from_smi(i, r) for i, r in enumerate(rows)]
    drv_gpus = [_from_properties(i, p, "CUDA driver attributes (libcuda)")
                for i, p in enumerate(driver.get("devices") or [])]
    gpus: list[GpuFacts]
    if torch.get("available") and torch.get("devices"):
        gpus = [_from_properties(i, p, f"torch.cuda (torch {tv})")
                for i, p in enumerate(torch["devices"])]
        gpus = _merge(_merge(gpus, drv_gpus), smi_gpus)
    elif drv_gpus:
        gpus = _merge(drv_gpus, smi_gpus)
    else:
        gpus = smi_gpus
    providers = list(ort.get("providers") or [])
    ort_cuda = "CUDAExecutionProvider" in providers
    measure_with = ("torch" if gpus and torch.get("available") else
                    "onnxruntime" if gpus and ort_cuda else None)
    return CudaFound(
        gpus=tuple(gpus),
        torch_cuda=("torch not installed" if tv is None else
                    f"torch.cuda: {len(torch.get('devices') or [])} device(s) (torch {tv})"
                    if torch.get("available") else "torch.cuda unavailable"),
        onnxruntime_cuda=("no onnxruntime" if ort.get("version") is None else
                          f"CUDAExecutionProvider (onnxruntime {ort['version']})" if ort_cuda
                          else "no CUDAExecutionProvider"),
        nvidia_smi=(f"nvidia-smi: {len(rows)} GPU(s)" if rows else
                    "no nvidia-smi" if not smi.get("text") and not smi.get("error") else
                    f"nvidia-smi: {smi.get('error') or 'no GPU listed'}"),
        measure_with=measure_with, host_machine=str(raw.get("host_machine", "")))


# --------------------------------------------------------------------------- spec


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """The spec parts of the GPUs: devices and links (as spec dicts), and one line per GPU
    left out (with why) or added (with what was assumed)."""

    devices: list[dict[str, Any]] = field(default_factory=list)
    links: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _peaks(g: GpuFacts, arch: Architecture) -> tuple[dict[str, float], str]:
    assert g.sm_count is not None and g.sm_clock_hz is not None
    peaks = {d.value: g.sm_count * g.sm_clock_hz * r for d, r in arch.per_sm_per_clock.items()}
    source = (f"computed: {g.sm_count} SMs (from {', '.join(g.sources)}) x the maximum SM "
              f"clock {g.sm_clock_hz / 1e6:.0f} MHz x the dense per-SM rate of compute "
              f"capability {g.compute_capability[0]}.{g.compute_capability[1]} "  # type: ignore[index]
              f"({arch.name}): " + ", ".join(f"{d.value} {r:g}" for d, r in
                                             arch.per_sm_per_clock.items())
              + f" operations/clock/SM; an upper bound (clocks sustained under load are "
              f"lower). Rates: {arch.source}")
    return peaks, source


def _tier(g: GpuFacts, arch: Architecture, m: GpuMeasured | None, date: str
          ) -> dict[str, Any] | None:
    capacity = g.total_memory_bytes
    assert capacity is not None
    cap_src = f"capacity: total memory reported by {', '.join(g.sources)}"
    if m is not None:
        bw, bw_src = m.device_bandwidth.value, m.device_bandwidth.source(date)
    elif g.memory_clock_hz and g.memory_bus_bits:
        bw = 2 * g.memory_clock_hz * g.memory_bus_bits / 8
        bw_src = (f"computed, not measured: 2 (double data rate) x the maximum memory clock "
                  f"{g.memory_clock_hz / 1e6:.0f} MHz x the {g.memory_bus_bits}-bit bus / 8; "
                  f"achievable copies reach less")
    else:
        return None
    name = "dram" if g.integrated else arch.memory
    return {"name": name, "capacity_bytes": capacity, "bandwidth_bytes_per_s": bw,
            "source": f"{cap_src}; bandwidth: {bw_src}"}


def _launch(m: GpuMeasured | None, date: str) -> tuple[float, str]:
    if m is not None:
        return m.launch.value, m.launch.source(date)
    return 5e-6, ("estimate, not measured (no API here could launch a kernel): a CUDA "
                  "kernel launch plus synchronisation of a few microseconds; see \"Getting "
                  "Started with CUDA Graphs\", https://developer.nvidia.com/blog/cuda-graphs/")


def _host_link(g: GpuFacts, m: GpuMeasured | None, host_machine: str, date: str
               ) -> tuple[str, float, float, str]:
    """(kind, bandwidth per direction, latency, source) of the GPU's path to host memory."""
    c2c = "gh200" in g.name.lower() or (g.compute_capability == (9, 0)
                                        and host_machine.lower() in ("aarch64", "arm64"))
    kind = "nvlink-c2c" if c2c else ("soc" if g.integrated else "pcie")
    if m is not None:
        (lat_in, bw_in), (lat_out, bw_out) = m.h2d, m.d2h
        bw = min(bw_in.value, bw_out.value)
        lat = max(lat_in.value, lat_out.value)
        src = (f"host -> device: {bw_in.source(date)}; {lat_in.source(date)}; device -> "
               f"host: {bw_out.source(date)}; {lat_out.source(date)}; the link takes the "
               f"slower direction" + (f"; {m.pageable}" if m.pageable else ""))
        return kind, bw, lat, src
    if kind == "pcie" and g.pcie_gen and g.pcie_width:
        per_lane = {3: 0.985e9, 4: 1.969e9, 5: 3.938e9, 6: 7.563e9}.get(g.pcie_gen)
        if per_lane:
            return kind, per_lane * g.pcie_width, 1e-5, (
                f"theoretical, not measured: PCIe Gen{g.pcie_gen} x{g.pcie_width} "
                f"(nvidia-smi pcie.link.gen.max/width.max) at {per_lane / 1e9:.3g} GB/s per "
                f"lane and direction, PCI-SIG base specification rates; latency: estimate, "
                f"not measured (a cudaMemcpy of a few bytes takes about 10 us)")
    return kind, 16e9, 1e-5, ("estimate, not measured: a PCIe Gen4 x16 link's sustained "
                              "copy rate of about 16 GB/s per direction and 10 us per copy")


def gpu_spec(found: CudaFound, measured: Mapping[int, GpuMeasured], *, date: str,
             hosts: Sequence[str], left_out: Mapping[int, str] | None = None) -> GpuSpec:
    """The ``gpu`` devices (``gpu0``, ``gpu1``, ...: backend ``cuda``, no CPU cores) of
    ``found``'s GPUs and their links to each host device in ``hosts`` (one link per host
    device, all occupying the GPU's one physical link, resource ``<kind>-gpuN``), with
    ``measured`` figures where given (by GPU index) and stated estimates otherwise. A GPU
    whose architecture or facts are unknown, or that ``left_out`` names (by index, with
    why), is left out, with the reason in ``notes``."""
    out = GpuSpec()
    for g in found.gpus:
        label = f"gpu{g.index} ({g.name})"
        missing = g.missing()
        if left_out and g.index in left_out:
            out.notes.append(f"{label} left out of the spec: {left_out[g.index]}")
            continue
        if missing:
            out.notes.append(f"{label} left out of the spec: {', '.join(missing)} unknown "
                             f"(sources: {', '.join(g.sources)})")
            continue
        cc = g.compute_capability
        assert cc is not None
        arch = ARCHITECTURES.get(cc)
        if arch is None:
            out.notes.append(f"{label} left out of the spec: compute capability "
                             f"{cc[0]}.{cc[1]} has no entry in placewise's architecture "
                             f"table (placewise.hardware.cuda.ARCHITECTURES)")
            continue
        m = measured.get(g.index)
        tier = _tier(g, arch, m, date)
        if tier is None:
            out.notes.append(f"{label} left out of the spec: memory bandwidth neither "
                             f"measured nor computable (memory clock or bus width unknown)")
            continue
        peaks, peak_src = _peaks(g, arch)
        launch_s, launch_src = _launch(m, date)
        name = f"gpu{g.index}"
        out.devices.append({
            "name": name, "kind": "gpu", "model": g.name, "peak_flops_per_s": peaks,
            "peak_source": peak_src, "memory": [tier], "launch_overhead_s": launch_s,
            "launch_source": launch_src, "compute_units": g.sm_count, "lanes": 1,
            "backend": "cuda"})
        kind, bw, lat, src = _host_link(g, m, found.host_machine, date)
        for h in hosts:
            out.links.append({"name": f"{kind}-{h}-{name}", "endpoints": [h, name],
                              "bandwidth_bytes_per_s": bw, "latency_s": lat, "duplex": True,
                              "resource": f"{kind}-{name}", "source": src})
        out.notes.append(f"{label}: {arch.name}, {g.sm_count} SMs, "
                         f"{'measured' if m is not None else 'not measured'}")
    return out
