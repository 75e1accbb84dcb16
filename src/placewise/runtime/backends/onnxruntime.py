"""onnxruntime sessions for partitions: the execution provider a device's runtime loads,
its threads pinned to the device's cores, no silent CPU fallback. ``OnnxRuntime`` is the
``Backend`` (``runtime.backends.base``) workers open partitions with: one session per
partition (``SessionUnit``), fed host arrays, on the provider of the device.

- **provider** (``provider_for``), read from the device's own fields (``hardware.spec.
  Device``: ``backend``, ``kind``, ``model``, ``name``):

  - a *local* device (it has a ``backend``): ``cuda`` runs the CUDA execution provider;
    ``torch``, ``onnxruntime`` and ``cpu`` run the CPU one;
  - a *preset* device records the provider a user of that hardware would load, so that its
    partitions export even though they cannot run here: an NVIDIA GPU (``kind: gpu``, an
    NVIDIA ``model``) the CUDA execution provider on CUDA device N (the number that ends
    the device's name, ``gpu1`` -> 1; TensorRT as the alternative); an Orin DLA (``kind:
    dla``) TensorRT with ``trt_dla_enable`` and ``trt_dla_core`` N (``dla1`` -> 1), with
    the precision the partition computes in enabled (DLAs run int8 and fp16 only); an Intel
    GPU or NPU OpenVINO with ``device_type`` GPU or NPU; a CPU the CPU execution provider.
    A GPU, NPU or accelerator from no vendor named here is ``UnsupportedError`` (naming the
    device and its model), never a guess.
- **threads**: ``intra_op_num_threads`` = the device's core count, one inter-op thread,
  sequential execution; the worker process is pinned to the device's cores
  (``os.sched_setaffinity``) before the session is made, and onnxruntime's threads inherit
  that affinity. Spinning is off where the device shares cores with another device.
- **no fallback**: ``session.disable_cpu_ep_fallback`` is set for every provider other
  than the CPU one, so a node without a kernel there fails loudly, naming the op.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnxruntime as ort

from placewise.errors import UnsupportedError
from placewise.hardware.spec import Device
from placewise.onnxrt import new_session
from placewise.runtime.backends.base import Backend, Unit

__all__ = ["OnnxRuntime", "Provider", "SessionUnit", "make_session", "provider_for",
           "weight_bytes"]


@dataclass(frozen=True, slots=True)
class Provider:
    """An execution provider with its options (as ``InferenceSession(providers=...)``
    takes them); ``alternatives``: other providers that run the same device (TensorRT
    beside CUDA on an NVIDIA GPU)."""

    name: str
    options: dict[str, str] = field(default_factory=dict)
    alternatives: tuple[Provider, ...] = ()

    def as_ort(self) -> tuple[str, dict[str, str]]:
        return self.name, dict(self.options)


CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
TENSORRT = "TensorrtExecutionProvider"
OPENVINO = "OpenVINOExecutionProvider"

_NVIDIA = ("nvidia", "jetson", "geforce", "quadro", "tesla")
_INTEL = ("intel", "arc graphics", "iris", "uhd graphics", "ai boost", "movidius")


def _ordinal(name: str) -> str:
    """The device number a device name gives (``gpu1`` -> ``1``, ``dla0`` -> ``0``, ``gpu``
    -> ``0``); a name that is not ``gpu``/``cuda``/``dla``/``npu`` and a number (``a100``)
    gives 0.

    >>> [_ordinal(n) for n in ("gpu1", "dla-1", "gpu", "a100")]
    ['1', '1', '0', '0']
    """
    m = re.fullmatch(r"(?:gpu|cuda|dla|npu)[_.:-]?(\d{1,4})", name.lower())
    return str(int(m.group(1))) if m else "0"


def provider_for(device: Any, dtype: Any = None) -> Provider:
    """The execution provider that runs ``device`` (a ``hardware.spec.Device``) for a
    partition computing in ``dtype`` (a ``units.DType``; only TensorRT's DLA options
    depend on it). See the module docstring for the rules.

    >>> from placewise.hardware.load import load_machine
    >>> orin = load_machine("jetson-agx-orin")
    >>> provider_for(orin.device("gpu")).name
    'CUDAExecutionProvider'
    >>> provider_for(orin.device("dla1")).options["trt_dla_core"]
    '1'
    """
    backend = (getattr(device, "backend", None) or "").strip().lower()
    kind = str(getattr(getattr(device, "kind", ""), "value", getattr(device, "kind", "")))
    model = (getattr(device, "model", "") or "").lower()
    name = str(getattr(device, "name", "") or "")
    n = _ordinal(name)
    if backend:
        if backend == "cuda":
            return Provider(CUDA, {"device_id": n})
        if backend in ("torch", "onnxruntime", "cpu"):
            return Provider(CPU)
        raise UnsupportedError(f"device {name!r}: no onnxruntime execution provider for "
                               f"backend {backend!r} (known: cuda, torch, onnxruntime, cpu)")
    if kind == "cpu":
        return Provider(CPU)
    if kind == "dla":
        opts = {"device_id": "0", "trt_dla_enable": "True", "trt_dla_core": n}
        precision = str(getattr(dtype, "value", dtype or ""))
        if precision == "int8":
            opts["trt_int8_enable"] = "True"
        elif precision == "fp16":
            opts["trt_fp16_enable"] = "True"
        return Provider(TENSORRT, opts)
    if any(w in model for w in _NVIDIA) and kind in ("gpu", "accelerator"):
        return Provider(CUDA, {"device_id": n}, (Provider(TENSORRT, {"device_id": n}),))
    if any(w in model for w in _INTEL) and kind in ("gpu", "npu"):
        return Provider(OPENVINO, {"device_type": kind.upper()})
    raise UnsupportedError(
        f"device {name!r} ({kind}, model {getattr(device, 'model', '') or 'not given'!r}): "
        f"no onnxruntime execution provider known for it (NVIDIA GPUs and DLAs, Intel GPUs "
        f"and NPUs, CPUs); name the vendor in the device's model")


def make_session(model: bytes | str, provider: Provider, *, threads: int,
                 spinning: bool = True, profile_prefix: str | None = None) -> Any:
    """An ``InferenceSession`` of ``model`` (serialized bytes or a file path) on
    ``provider`` with ``threads`` intra-op threads; ``profile_prefix`` turns on
    onnxruntime's own profiler (calibration runs only, never timed runs)."""
    avail = set(ort.get_available_providers())
    if provider.name not in avail:
        raise UnsupportedError(f"onnxruntime here has no {provider.name} (it has "
                               f"{', '.join(sorted(avail))})")
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = max(1, int(threads))
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    if provider.name != CPU:
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    if profile_prefix is not None:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    try:
        return new_session(model, so, providers=[provider.as_ort()])
    except Exception as exc:
        text = " ".join(str(exc).split())
        raise UnsupportedError(f"onnxruntime cannot load the partition on "
                               f"{provider.name}: {text[:400]}") from None


_ORT_NP: dict[str, Any] = {
    "tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
    "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int8)": np.int8,
    "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_}


class SessionUnit(Unit):
    """A partition as one ``InferenceSession`` (``make_session``); ``run`` feeds host
    (numpy) arrays, which onnxruntime copies to the provider's device and back."""

    def __init__(self, sess: Any, weight_bytes: int) -> None:
        self.sess = sess
        self.inputs = tuple(i.name for i in sess.get_inputs())
        self.outputs = tuple(o.name for o in sess.get_outputs())
        self.weight_bytes = weight_bytes

    def run(self, feeds: Mapping[str, Any]) -> Sequence[Any]:
        out: Sequence[Any] = self.sess.run(self.outputs, {n: feeds[n] for n in self.inputs})
        return out

    def zero_feeds(self) -> dict[str, Any]:
        return {i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape],
                                 dtype=_ORT_NP.get(i.type, np.float32))
                for i in self.sess.get_inputs()}


class OnnxRuntime(Backend):
    """onnxruntime with the execution provider of the device (``provider_for``): the CPU
    one for this machine's cores, CUDA for a ``cuda`` device."""

    name = "onnxruntime"

    def open(self, path: str, device: Device, *, threads: int, spinning: bool) -> Unit:
        return SessionUnit(make_session(path, provider_for(device), threads=threads,
                                        spinning=spinning), weight_bytes(path))


def weight_bytes(path: str) -> int:
    """Bytes of the initializers of the ONNX file ``path`` (from their dims: the external
    data is not read)."""
    import onnx  # heavy (0.3 s): only workers and exports open models

    model = onnx.load(path, load_external_data=False)
    total = 0
    for init in model.graph.initializer:
        try:
            item = int(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(init.data_type)).itemsize)
        except Exception:
            item = 4
        total += math.prod(init.dims) * item
    return total
