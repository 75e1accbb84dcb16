"""onnxruntime sessions for partitions: the execution provider a device's runtime loads,
its threads pinned to the device's cores, no silent CPU fallback.

- **provider** (``provider_for``): this machine's CPU devices run the CPU execution
  provider; a device whose backend is ``cuda`` runs the CUDA execution provider. Devices of
  presets record the provider a user of that hardware would load (NVIDIA GPUs: CUDA; Orin
  DLAs: TensorRT with a DLA core; Intel iGPU and NPU: OpenVINO), so their partitions export
  even though they cannot run here.
- **threads**: ``intra_op_num_threads`` = the device's core count, one inter-op thread,
  sequential execution; the worker process is pinned to the device's cores
  (``os.sched_setaffinity``) before the session is made, and onnxruntime's threads inherit
  that affinity. Spinning is off where the device shares cores with another device.
- **no fallback**: ``session.disable_cpu_ep_fallback`` is set for every provider other
  than the CPU one, so a node without a kernel there fails loudly, naming the op.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from placewise.errors import UnsupportedError

__all__ = ["Provider", "make_session", "provider_for"]


@dataclass(frozen=True, slots=True)
class Provider:
    """An execution provider with its options (as ``InferenceSession(providers=...)``
    takes them)."""

    name: str
    options: dict[str, str] = field(default_factory=dict)

    def as_ort(self) -> tuple[str, dict[str, str]]:
        return self.name, dict(self.options)


def provider_for(device: Any) -> Provider:
    """The execution provider that runs ``device`` (a ``hardware.spec.Device``)."""
    backend = (getattr(device, "backend", None) or "").lower()
    kind = str(getattr(getattr(device, "kind", ""), "value", getattr(device, "kind", "")))
    model = (getattr(device, "model", "") or "").lower()
    name = (getattr(device, "name", "") or "").lower()
    if backend == "cuda":
        return Provider("CUDAExecutionProvider", {"device_id": "0"})
    if backend in ("torch", "onnxruntime", "cpu"):
        return Provider("CPUExecutionProvider")
    if "dla" in name or "dla" in model or kind == "dla":
        core = "1" if name.endswith("1") else "0"
        return Provider("TensorrtExecutionProvider",
                        {"trt_dla_enable": "True", "trt_dla_core": core})
    if "nvidia" in model or "jetson" in model or "orin" in model or "hopper" in model \
            or (kind == "gpu" and any(w in model for w in ("a100", "h100", "gh200", "ampere"))):
        return Provider("CUDAExecutionProvider", {"device_id": "0"})
    if "intel" in model or "openvino" in model:
        dtype = "NPU" if kind == "npu" else ("GPU" if kind == "gpu" else "CPU")
        return Provider("OpenVINOExecutionProvider", {"device_type": dtype})
    if kind == "gpu":
        return Provider("CUDAExecutionProvider", {"device_id": "0"})
    return Provider("CPUExecutionProvider")


def make_session(model: bytes | str, provider: Provider, *, threads: int,
                 spinning: bool = True, profile_prefix: str | None = None) -> Any:
    """An ``InferenceSession`` of ``model`` (serialized bytes or a file path) on
    ``provider`` with ``threads`` intra-op threads; ``profile_prefix`` turns on
    onnxruntime's own profiler (calibration runs only, never timed runs)."""
    import onnxruntime as ort

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
    if provider.name != "CPUExecutionProvider":
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    if profile_prefix is not None:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    try:
        return ort.InferenceSession(model, sess_options=so, providers=[provider.as_ort()])
    except Exception as exc:
        text = " ".join(str(exc).split())
        raise UnsupportedError(f"onnxruntime cannot load the partition on "
                               f"{provider.name}: {text[:400]}") from None


def session_io(sess: Any) -> tuple[Sequence[str], Sequence[str]]:
    return [i.name for i in sess.get_inputs()], [o.name for o in sess.get_outputs()]
