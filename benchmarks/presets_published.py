"""Presets against published whole-model measurements (issue 25, item 3).

Every row of ``benchmarks/data/published_models.yaml`` (MLPerf Inference closed results of
NVIDIA's submissions, NVIDIA's TensorRT demoBERT latencies) is planned with placewise's
roofline on the preset it names, at the published batch and precision, the whole model on
the published device (the planner's own evaluator, ``placewise.schedule.evaluate``, over the
fused graph of ``placewise.planning.build_problem``), and its prediction is put beside the
published figure:

- a latency row (``latency_s``): the plan's latency, host input to host output for MLPerf
  SingleStream/MultiStream (``host_io``), device time only for demoBERT (its README: "The
  time measurements do not include the time required to copy inputs to the device");
- a throughput row (``samples_per_s``, MLPerf Offline): batch / the plan's pipeline period,
  summed over the devices the published system ran side by side (Orin: GPU + 2 DLAs).

``error`` is predicted / published - 1 in the published quantity. The presets' efficiency
blocks are fitted to kernel-level measurements only (``benchmarks/fit_presets.py``); these
whole-model figures never enter the fit. Each row is also costed with the built-in
assumptions (``Machine.without_efficiency``), to show what the fitted blocks changed.

The models are built in code as placewise graphs with the published architectures (ONNX
files of them would be a gigabyte of weights for BERT-large): ResNet-50 v1.5 (MLPerf's) and
BERT-large/base at the published sequence length, each op as an exporter writes it
(conv + batch norm + ReLU, separate Q/K/V projections, one fused attention op per layer,
LayerNorm, GELU), fused by ``placewise.graph.fuse``.

    .venv/bin/python benchmarks/presets_published.py     # writes results/presets_published.json

Planning only (no timing claims): about half a minute on two cores.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from placewise.graph.ir import Attrs, Graph, Op, OpKind, Role, Tensor  # noqa: E402
from placewise.hardware.load import load_machine  # noqa: E402
from placewise.hardware.spec import Machine  # noqa: E402
from placewise.planning import build_problem  # noqa: E402
from placewise.schedule import Placement, evaluate  # noqa: E402
from placewise.units import DType  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "published_models.yaml"
OUT = ROOT / "benchmarks" / "results" / "presets_published.json"
TARGET_MEDIAN, TARGET_MAX = 0.20, 0.50


class _Builder:
    """Tensors and ops of a graph built in code, names made unique."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.tensors: list[Tensor] = []
        self.ops: list[Op] = []

    def tensor(self, shape: tuple[int, ...], role: Role = Role.ACTIVATION,
               dtype: DType = DType.FP32, name: str | None = None) -> str:
        n = name or f"t{len(self.tensors)}"
        self.tensors.append(Tensor(n, shape, dtype, role=role))
        return n

    def param(self, shape: tuple[int, ...]) -> str:
        return self.tensor(shape, Role.PARAM)

    def op(self, kind: OpKind, inputs: list[str], out_shape: tuple[int, ...],
           attrs: dict[str, Any] | None = None) -> str:
        out = self.tensor(out_shape)
        self.ops.append(Op(f"{kind.value}{len(self.ops)}", kind, tuple(inputs), (out,),
                           attrs=Attrs.of(attrs or {})))
        return out

    def graph(self, output: str) -> Graph:
        self.tensors = [Tensor(t.name, t.shape, t.dtype, role=Role.OUTPUT)
                        if t.name == output else t for t in self.tensors]
        return Graph.build(self.name, self.tensors, self.ops)


def _conv_bn(b: _Builder, x: str, shape: tuple[int, ...], cout: int, k: int, stride: int,
             relu: bool = True) -> tuple[str, tuple[int, ...]]:
    n, cin, h, w = shape
    pad = k // 2
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    out = (n, cout, oh, ow)
    y = b.op(OpKind.CONV, [x, b.param((cout, cin, k, k))], out,
             {"kernel_shape": (k, k), "strides": (stride, stride),
              "pads": (pad, pad, pad, pad), "group": 1})
    y = b.op(OpKind.BATCH_NORM, [y, *(b.param((cout,)) for _ in range(4))], out,
             {"epsilon": 1e-5})
    if relu:
        y = b.op(OpKind.RELU, [y], out)
    return y, out


def resnet50(batch: int) -> Graph:
    """ResNet-50 v1.5: stem 7x7/2 + max pool, bottlenecks 3-4-6-3 (stride on the 3x3),
    global average pool, 1000-way linear."""
    b = _Builder(f"resnet50-b{batch}")
    x = b.tensor((batch, 3, 224, 224), Role.INPUT, name="image")
    y, s = _conv_bn(b, x, (batch, 3, 224, 224), 64, 7, 2)
    s = (batch, 64, 56, 56)
    y = b.op(OpKind.MAX_POOL, [y], s, {"kernel_shape": (3, 3), "strides": (2, 2),
                                       "pads": (1, 1, 1, 1)})
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            st = stride if i == 0 else 1
            h, hs = _conv_bn(b, y, s, width, 1, 1)
            h, hs = _conv_bn(b, h, hs, width, 3, st)
            h, hs = _conv_bn(b, h, hs, 4 * width, 1, 1, relu=False)
            skip = y
            if i == 0:
                skip, _ = _conv_bn(b, y, s, 4 * width, 1, st, relu=False)
            y = b.op(OpKind.ADD, [h, skip], hs)
            y = b.op(OpKind.RELU, [y], hs)
            s = hs
    y = b.op(OpKind.GLOBAL_AVG_POOL, [y], (batch, 2048, 1, 1))
    y = b.op(OpKind.FLATTEN, [y], (batch, 2048), {"axis": 1})
    y = b.op(OpKind.LINEAR, [y, b.param((1000, 2048)), b.param((1000,))], (batch, 1000))
    return b.graph(y)


def bert(batch: int, seq: int, layers: int, hidden: int, heads: int, ffn: int,
         vocab: int = 30522) -> Graph:
    """BERT encoder for SQuAD: word + position + token-type embeddings and LayerNorm;
    per layer Q, K, V projections, one fused attention op, output projection, residual +
    LayerNorm, GELU FFN, residual + LayerNorm; the 2-way QA head."""
    b = _Builder(f"bert-l{layers}-h{hidden}-s{seq}-b{batch}")
    act = (batch, seq, hidden)
    ids = b.tensor((batch, seq), Role.INPUT, DType.INT64, name="input_ids")
    types = b.tensor((batch, seq), Role.INPUT, DType.INT64, name="token_type_ids")
    x = b.op(OpKind.EMBEDDING, [b.param((vocab, hidden)), ids], act)
    t = b.op(OpKind.EMBEDDING, [b.param((2, hidden)), types], act)
    x = b.op(OpKind.ADD, [x, t], act)
    x = b.op(OpKind.ADD, [x, b.param((seq, hidden))], act)

    def norm(v: str) -> str:
        return b.op(OpKind.LAYER_NORM, [v, b.param((hidden,)), b.param((hidden,))], act,
                    {"axis": -1, "epsilon": 1e-12})

    def linear(v: str, n_in: int, n_out: int) -> str:
        return b.op(OpKind.LINEAR, [v, b.param((n_out, n_in)), b.param((n_out,))],
                    (batch, seq, n_out))

    x = norm(x)
    for _ in range(layers):
        q, k, v = (linear(x, hidden, hidden) for _ in range(3))
        a = b.op(OpKind.ATTENTION, [q, k, v], act, {"num_heads": heads})
        a = linear(a, hidden, hidden)
        x = norm(b.op(OpKind.ADD, [a, x], act))
        f = b.op(OpKind.GELU, [linear(x, hidden, ffn)], (batch, seq, ffn))
        x = norm(b.op(OpKind.ADD, [linear(f, ffn, hidden), x], act))
    return b.graph(linear(x, hidden, 2))


MODELS = {
    "resnet50": lambda row: resnet50(row["batch"]),
    "bert-large": lambda row: bert(row["batch"], row["seq"], 24, 1024, 16, 4096),
    "bert-base": lambda row: bert(row["batch"], row["seq"], 12, 768, 12, 3072),
}


def _plan(machine: Machine, graph: Graph, device: str, batch: int, dtype: DType,
          host_io: bool) -> dict[str, float]:
    """The whole graph on ``device`` at ``dtype``: latency and pipeline period (s), with
    the graph's inputs and outputs on the host CPU (``host_io``) or on the device."""
    from placewise.cost.load import load_cost_model

    prob = build_problem(graph.name, machine, graph=graph, batch=batch,
                         cost_model=load_cost_model(machine, None))
    if not host_io:
        from placewise.schedule.placement import Problem

        prob = Problem(graph, prob.partition, machine, prob.cost_model, batch=batch,
                       host=device)
    ev = evaluate(prob, Placement.uniform(prob.vertex_names, device, dtype))
    if not ev.feasible:
        raise RuntimeError(f"{graph.name} does not fit on {machine.name}/{device}")
    return {"latency_s": ev.latency_s, "period_s": ev.pipeline.period_s,
            "regions": float(len(prob.vertex_names))}


def predict(row: dict[str, Any], machine: Machine) -> dict[str, Any]:
    dtype = DType.parse(row["precision"])
    host_io = "mlperf" in row["scenario"].lower() and "offline" not in \
        row["scenario"].lower()
    if "samples_per_s" in row:
        total = 0.0
        per_device = {}
        for device, batch in row["devices"].items():
            graph = MODELS[row["model"]]({**row, "batch": batch})
            p = _plan(machine, graph, device, batch, dtype, host_io=False)
            per_device[device] = batch / p["period_s"]
            total += per_device[device]
        return {"predicted": total, "per_device_samples_per_s": per_device}
    (device, batch), = row["devices"].items()
    graph = MODELS[row["model"]]({**row, "batch": batch})
    p = _plan(machine, graph, device, batch, dtype, host_io=host_io)
    return {"predicted": p["latency_s"], "regions": p["regions"], "host_io": host_io}


def run(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        t0 = time.perf_counter()
        machine = load_machine(row["preset"])
        quantity = "samples_per_s" if "samples_per_s" in row else "latency_s"
        published = float(row[quantity])
        fitted = predict(row, machine)
        builtin = predict(row, machine.without_efficiency())
        out.append({
            "id": row["id"], "model": row["model"] + (f"-seq{row['seq']}" if "seq" in row
                                                      else ""),
            "preset": row["preset"], "devices": row["devices"],
            "precision": row["precision"], "batch": row["batch"],
            "scenario": row["scenario"], "quantity": quantity, "published": published,
            "predicted": fitted["predicted"], "error": fitted["predicted"] / published - 1,
            "predicted_builtin": builtin["predicted"],
            "error_builtin": builtin["predicted"] / published - 1,
            "detail": {k: v for k, v in fitted.items() if k != "predicted"},
            "software": row["software"], "source": row["source"],
            "closeness": row.get("closeness", ""),
            "plan_s": round(time.perf_counter() - t0, 2)})
    return out


def summary(rows: list[dict[str, Any]], key: str = "error") -> dict[str, Any]:
    errs = [abs(r[key]) for r in rows]
    return {"rows": len(rows), "presets": len({r["preset"] for r in rows}),
            "median_abs_error": statistics.median(errs), "max_abs_error": max(errs),
            "within_50pct": sum(e <= TARGET_MAX for e in errs)}


def _fmt(quantity: str, x: float) -> str:
    return f"{x * 1e3:.3f} ms" if quantity == "latency_s" else f"{x:,.0f}/s"


def table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'row':32} {'preset':18} {'prec':5} {'batch':>5} {'published':>13} "
            f"{'predicted':>13} {'error':>7} {'built-in':>8}")
    lines = [head, "-" * len(head)]
    for r in rows:
        q = r["quantity"]
        lines.append(f"{r['id']:32} {r['preset']:18} {r['precision']:5} {r['batch']:>5} "
                     f"{_fmt(q, r['published']):>13} {_fmt(q, r['predicted']):>13} "
                     f"{r['error']:>+7.0%} {r['error_builtin']:>+8.0%}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--only", default=None, help="rows whose id contains this text")
    args = ap.parse_args()
    data = yaml.safe_load(args.data.read_text())
    rows = [r for r in data["rows"] if args.only is None or args.only in r["id"]]
    results = run(rows)
    s_fit, s_builtin = summary(results), summary(results, "error_builtin")
    met = s_fit["median_abs_error"] <= TARGET_MEDIAN and s_fit["max_abs_error"] <= TARGET_MAX
    doc = {"target": {"median_abs_error": TARGET_MEDIAN, "max_abs_error": TARGET_MAX,
                      "met": met},
           "summary": s_fit, "summary_builtin_assumptions": s_builtin, "rows": results}
    if args.only is None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    print(table(results))
    print(f"\nfitted presets: median |error| {s_fit['median_abs_error']:.1%}, max "
          f"{s_fit['max_abs_error']:.1%} over {s_fit['rows']} rows on {s_fit['presets']} "
          f"presets (target median <= 20%, max <= 50%: {'met' if met else 'missed'}); "
          f"built-in assumptions: median {s_builtin['median_abs_error']:.1%}, max "
          f"{s_builtin['max_abs_error']:.1%}")


if __name__ == "__main__":
    main()
