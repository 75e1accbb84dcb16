"""Output quality: the plan's outputs against a single-device fp32 reference.

``reference_outputs`` computes the reference on the same requests (onnxruntime for ONNX
sources, the ``torch.export`` program's own nodes otherwise); ``output_quality`` compares
one output over every request (relative L2, max abs, cosine; top-1 agreement where
``looks_like_logits``: a float output of a contraction op with a last dimension of at
least 2).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from placewise.errors import PlacewiseError
from placewise.graph.ir import Graph, OpKind
from placewise.validate.records import OutputQuality

if TYPE_CHECKING:
    from placewise.runtime.opexec import ModelSource

__all__ = ["looks_like_logits", "output_quality", "reference_outputs"]

_CONTRACTIONS = frozenset({OpKind.LINEAR, OpKind.GEMM, OpKind.MATMUL, OpKind.CONV,
                           OpKind.CONV_TRANSPOSE})


def output_quality(name: str, got: Sequence[np.ndarray[Any, Any]],
                   ref: Sequence[np.ndarray[Any, Any]], *, logits: bool) -> OutputQuality:
    """Compare one output's values over requests with the reference.

    >>> a = [np.array([[1.0, 2.0, 3.0]])]
    >>> q = output_quality("y", a, a, logits=True)
    >>> q.rel_l2_max, q.max_abs, q.cosine_min, q.top1_agreement
    (0.0, 0.0, 1.0, 1.0)
    """
    rels: list[float] = []
    max_abs = 0.0
    cos_min = 1.0
    agree = 0
    rows = 0
    for y, r in zip(got, ref, strict=True):
        yf = np.asarray(y, dtype=np.float64).ravel()
        rf = np.asarray(r, dtype=np.float64).ravel()
        if yf.shape != rf.shape:
            raise PlacewiseError(f"output {name!r}: shape {np.shape(y)} differs from the "
                                 f"reference's {np.shape(r)}")
        diff = yf - rf
        nr = float(np.linalg.norm(rf))
        nd = float(np.linalg.norm(diff))
        rels.append(nd / nr if nr > 0 else (0.0 if nd == 0 else math.inf))
        if diff.size:
            max_abs = max(max_abs, float(np.max(np.abs(diff))))
        ny = float(np.linalg.norm(yf))
        cos = float(np.dot(yf, rf) / (ny * nr)) if ny > 0 and nr > 0 else (
            1.0 if ny == nr else 0.0)
        cos_min = min(cos_min, cos)
        if logits:
            a = np.asarray(y)
            b = np.asarray(r)
            ya = a.reshape(-1, a.shape[-1]).argmax(axis=1)
            ra = b.reshape(-1, b.shape[-1]).argmax(axis=1)
            agree += int(np.sum(ya == ra))
            rows += int(ya.size)
    return OutputQuality(name, len(rels), float(statistics.median(rels)) if rels else 0.0,
                         max(rels) if rels else 0.0, max_abs, cos_min,
                         (agree / rows) if logits and rows else None)


def reference_outputs(source: ModelSource, graph: Graph,
                       requests: Sequence[Sequence[np.ndarray[Any, Any]]]
                       ) -> list[list[np.ndarray[Any, Any]]]:
    """The single-device fp32 outputs (graph-output order) of every request."""
    from placewise.runtime.opexec import SourceFormat

    if source.format is SourceFormat.TORCH_EXPORT:
        return _fx_reference(source, graph, requests)
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(source.onnx_model.SerializeToString(), sess_options=opts,
                                providers=["CPUExecutionProvider"])
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
    import torch
    from torch.export.graph_signature import OutputKind

    from placewise.graph.torch_import import _Builder
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


def looks_like_logits(graph: Graph, name: str) -> bool:
    t = graph.tensor(name)
    if not t.dtype.is_float or len(t.shape) < 2:
        return False
    last = t.shape[-1]
    if not isinstance(last, int) or last < 2:
        return False
    prod = graph.producer(name)
    return prod is not None and prod.kind in _CONTRACTIONS
