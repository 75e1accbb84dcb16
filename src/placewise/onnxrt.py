"""The one way placewise makes an onnxruntime ``InferenceSession``: quietly.

onnxruntime writes warnings (unused initializers, shape merges, output shape checks) and
errors (a kernel that fails) to stderr in ANSI colour through two loggers: the
process-wide default one and each session's own. Importing this module raises the default
logger's threshold to fatal (``set_default_logger_severity``), and every session made here
gets the same threshold (``log_severity_level``), so none of its lines reach a user's
terminal; failures still arrive as exceptions, which placewise words itself. Every ``InferenceSession`` in placewise is made by ``new_session``.

>>> import onnx
>>> from onnx import TensorProto, helper
>>> g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
>>> m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
>>> sess = new_session(m.SerializeToString())
>>> [o.name for o in sess.get_outputs()], session_options().log_severity_level
(['y'], 4)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnxruntime as _ort

__all__ = ["LOG_SEVERITY", "new_session", "quiet_logs", "session_options"]

#: onnxruntime's severity threshold for placewise's sessions: 4 = fatal only (errors arrive
#: as exceptions, which placewise words itself)
LOG_SEVERITY = 4



def quiet_logs() -> None:
    """Raise onnxruntime's default logger to ``LOG_SEVERITY`` (done on import; call it
    before onnxruntime's own tools, quantization and symbolic shape inference, make
    sessions of their own)."""
    _ort.set_default_logger_severity(LOG_SEVERITY)


quiet_logs()


def session_options() -> Any:
    """A fresh ``onnxruntime.SessionOptions`` with placewise's log threshold."""
    opts = _ort.SessionOptions()
    opts.log_severity_level = LOG_SEVERITY
    return opts


def new_session(model: bytes | str, options: Any = None, *,
                providers: Sequence[Any] = ("CPUExecutionProvider",)) -> Any:
    """An ``InferenceSession`` of ``model`` (serialized bytes or a file path) with
    ``options`` (``session_options()`` when None; a given one has its log threshold
    raised to ``LOG_SEVERITY`` unless it is already higher) on ``providers``."""
    opts = session_options() if options is None else options
    opts.log_severity_level = max(int(opts.log_severity_level), LOG_SEVERITY)
    return _ort.InferenceSession(model, sess_options=opts, providers=list(providers))
