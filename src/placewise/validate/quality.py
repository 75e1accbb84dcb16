"""Output quality: the plan's outputs against a single-device fp32 reference.

``reference_outputs`` computes the reference on the same requests (onnxruntime for ONNX
sources, the ``torch.export`` program's own nodes otherwise); ``output_quality`` compares
one output over every request (relative L2, max abs, cosine; top-1 agreement where
``looks_like_logits``: a float output of a contraction op with a last dimension of at
least 2); both live in ``placewise.precision.metrics`` and are re-exported here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from placewise.graph.ir import Graph
from placewise.graph.onnx_data import ort_session
from placewise.graph.torch_import import _Builder
from placewise.precision.metrics import looks_like_logits, output_quality

if TYPE_CHECKING:
    from placewise.runtime.opexec import ModelSource

__all__ = ["looks_like_logits", "output_quality", "reference_outputs"]

def reference_outputs(source: ModelSource, graph: Graph,
                       requests: Sequence[Sequence[np.ndarray[Any, Any]]]
                       ) -> list[list[np.ndarray[Any, Any]]]:
    """The single-device fp32 outputs (graph-output order) of every request."""
    # lazy: torch (runtime.opexec imports it) is heavy to import, loaded only when this runs
    from placewise.runtime.opexec import SourceFormat

    if source.format is SourceFormat.TORCH_EXPORT:
        return _fx_reference(source, graph, requests)
    # lazy: onnxruntime is heavy to import, loaded only when this runs
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort_session(source.onnx_model, opts)
    names = [i.name for i in sess.get_inputs()]
    outs = list(graph.outputs)
    res = []
    for req in requests:
        feeds = dict(zip(graph.inputs, req, strict=True))
        vals = sess.run(outs, {k: feeds[k] for k in names})
        res.append([np.asarray(v) for v in vals])
    return res


def _fx_reference(source: ModelSource, graph: Graph,
                  requests: Sequence[Sequence[np.ndarray[Any, Any]]]
                  ) -> list[list[np.ndarray[Any, Any]]]:
    # lazy: torch is heavy to import, loaded only when this runs
    import torch
    from torch.export.graph_signature import OutputKind

    # lazy: torch (runtime.opexec imports it) is heavy to import, loaded only when this runs
    from placewise.runtime.opexec import FxProgram

    ep = source.exported_program
    prog = FxProgram(ep)
    b = _Builder(ep, "reference", None)
    b.build()
    node_tensor = {n.name: t for n, t in b.node_tensor.items()}
    out_node = next(n for n in ep.graph.nodes if n.op == "output")

    def flat(v: Any) -> list[Any]:
        if isinstance(v, list | tuple):
            return [x for e in v for x in flat(e)]
        return [v]

    user: dict[str, str] = {}
    for spec, value in zip(ep.graph_signature.output_specs, flat(out_node.args[0]),
                           strict=False):
        if spec.kind is OutputKind.USER_OUTPUT and hasattr(value, "name"):
            t = node_tensor.get(value.name)
            if t is not None:
                user.setdefault(t, value.name)
    res = []
    with torch.inference_mode():
        for req in requests:
            env: dict[str, Any] = dict(prog.params)
            for name, arr in zip(prog.user_inputs, req, strict=True):
                env[name] = torch.from_numpy(np.array(arr))
            for n in ep.graph.nodes:
                if n.op == "call_function":
                    env[n.name] = prog.run_node(n, env)
                elif n.op == "get_attr":
                    env[n.name] = getattr(ep.graph_module, str(n.target))
            outs = []
            for t in graph.outputs:
                node = user.get(t)
                if node is None:
                    node = next((k for k, v in node_tensor.items() if v == t), t)
                v = env[node]
                outs.append(v.detach().numpy().copy() if isinstance(v, torch.Tensor)
                            else np.asarray(v))
            res.append(outs)
    return res
