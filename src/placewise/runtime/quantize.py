"""onnxruntime dynamic quantization as placewise's int8 kernels use it: int8 weights,
activations quantized per call (``MatMulInteger`` / ``ConvInteger``), the weights at 7 bits
where this machine's integer GEMM saturates (``int8_weights_reduced``). The int8 partitions
(``runtime.compile``) and the int8 op runners profiling times (``runtime.opexec``) are made
by ``quantize_dynamic_model``.
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Sequence
from typing import Any

import numpy as np

from placewise.errors import UnsupportedError
from placewise.graph.onnx_data import save_model
from placewise.graph.onnx_kinds import INT8_ONNX_OP_TYPES
from placewise.io import quiet
from placewise.onnxrt import new_session, quiet_logs, session_options

__all__ = ["int8_weights_reduced", "quantize_dynamic_model"]


@functools.lru_cache(maxsize=1)
def int8_weights_reduced() -> bool:
    """Whether int8 weights are quantized to 7 bits (``reduce_range``) on this machine:
    True where onnxruntime's ``MatMulInteger`` (uint8 x int8 -> int32) is not exact on
    worst-case operands (all 255 times all 127 or -128). Such kernels (x86 without
    AVX-VNNI / AVX512-VNNI / AMX) add pairs of uint8 x int8 products in saturating int16
    (``vpmaddubsw``), and a dynamically quantized activation spans all of 0..255; with 7-bit
    weights the pair sums fit. Measured once per process, on two shapes (a row, a block)."""
    # onnx costs about a second to import; validate and serve import this module at start
    from onnx import TensorProto, helper
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "B"], ["Y"])], "int8_exactness",
        [helper.make_tensor_value_info("A", TensorProto.UINT8, ["m", 64]),
         helper.make_tensor_value_info("B", TensorProto.INT8, [64, 32])],
        [helper.make_tensor_value_info("Y", TensorProto.INT32, ["m", 32])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    opts = session_options()
    opts.intra_op_num_threads = 1
    sess = new_session(model.SerializeToString(), opts,
                       providers=["CPUExecutionProvider"])
    b = np.where(np.arange(64 * 32).reshape(64, 32) % 2, 127, -128).astype(np.int8)
    for m in (1, 16):
        a = np.full((m, 64), 255, np.uint8)
        got = sess.run(None, {"A": a, "B": b})[0]
        if not np.array_equal(got, a.astype(np.int32) @ b.astype(np.int32)):
            return True
    return False


def quantize_dynamic_model(model: Any, what: str, *,
                           op_types: Sequence[str] | None = INT8_ONNX_OP_TYPES) -> Any:
    """``model`` with onnxruntime dynamic quantization (int8 weights, uint8 activations
    quantized per call: ``MatMulInteger`` / ``ConvInteger`` kernels) of its ``op_types``
    nodes (``INT8_ONNX_OP_TYPES`` by default; None: onnxruntime's own default set; a MatMul
    whose B is not an initializer stays float, onnxruntime's ``MatMulConstBOnly`` default),
    its weights at 7 bits where ``int8_weights_reduced()``."""
    # heavy (onnxruntime's quantization tool imports its own onnx helpers): int8 only
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quiet_logs()

    with tempfile.TemporaryDirectory(prefix="placewise-quant-") as tmp, \
            quiet("torch.onnx", "torch.export", "onnxscript"):
        src = os.path.join(tmp, "in.onnx")
        dst = os.path.join(tmp, "out.onnx")
        save_model(model, src)
        try:
            quantize_dynamic(src, dst, weight_type=QuantType.QInt8,
                             op_types_to_quantize=None if op_types is None else list(op_types),
                             reduce_range=int8_weights_reduced())
        except Exception as exc:
            raise UnsupportedError(f"onnxruntime could not quantize {what}: "
                                   f"{type(exc).__name__}: {exc}") from None
        return onnx.load(dst)
