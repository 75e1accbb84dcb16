"""Export round trip over the validation matrix: the partition files of every plan, chained
by plain onnxruntime, give the whole model's outputs.

For every zoo model and batch: the plans of ``benchmarks/validation.py`` (the best single
device, ``auto``, ``greedy``, and ``auto`` for throughput) on the probed ``local`` machine,
with the cached calibration where ``benchmarks/validation.py`` made one (else the analytic
model: the round trip does not depend on the costs). Each plan is exported
(``placewise.export.export_plan``) into a fresh folder; its partitions run in manifest order,
each in its own plain ``onnxruntime.InferenceSession`` (CPU), fed from the graph's inputs and
the earlier partitions' outputs, as the README's example does. The outputs are compared with
the model's own (torch, fp32) on the same seeded inputs: relative L2 per output, the worst
kept. fp32 plans must reach 1e-5; plans with int8 partitions are reported apart.

    .venv/bin/python benchmarks/export_roundtrip.py
    .venv/bin/python benchmarks/export_roundtrip.py --models mlp --batches 1

Writes ``benchmarks/results/export_roundtrip.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from validation import CACHE_DIR, _plans, context_calibration_path


def _chain(folder: Path, feeds: dict[str, Any]) -> dict[str, Any]:
    import onnxruntime as ort

    manifest = json.loads((folder / "manifest.json").read_text())
    values = dict(feeds)
    for part in manifest["partitions"]:
        sess = ort.InferenceSession(str(folder / part["file"]),
                                    providers=["CPUExecutionProvider"])
        names = [t["name"] for t in part["outputs"]]
        got = sess.run(names, {t["name"]: values[t["name"]] for t in part["inputs"]})
        values.update(zip(names, got, strict=True))
    return {t["name"]: values[t["name"]] for t in manifest["graph_outputs"]}


def _reference(source: Any, inputs: list[np.ndarray[Any, Any]]) -> list[np.ndarray[Any, Any]]:
    import torch

    with torch.inference_mode():
        out = source.exported_program.module()(*[torch.from_numpy(a) for a in inputs])
    outs = out if isinstance(out, (tuple, list)) else [out]
    return [np.asarray(o.detach().numpy()) for o in outs]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="mlp,resnet,bert,gpt,inception")
    p.add_argument("--batches", default="1,4,16")
    p.add_argument("--time-limit", type=float, default=3.0)
    p.add_argument("--cache", default=CACHE_DIR)
    p.add_argument("--out", default="benchmarks/results/export_roundtrip.json")
    args = p.parse_args(argv)

    from placewise.cost.calibrated import load_calibration
    from placewise.export import export_plan
    from placewise.hardware.probe import load_local
    from placewise.runtime.opexec import load_source, request_inputs

    machine = load_local()
    rows: list[dict[str, Any]] = []
    t_all = time.perf_counter()
    for name in args.models.split(","):
        for b in [int(x) for x in args.batches.split(",")]:
            cal_file = context_calibration_path(Path(args.cache), name, b, machine)
            cal = load_calibration(cal_file) if cal_file.is_file() else None
            src = load_source(f"zoo:{name}", batch=b)
            assert src.graph is not None
            inputs = request_inputs(src, src.graph, 1, 11)[0]
            ref = _reference(src, inputs)
            feeds = dict(zip(src.graph.inputs, inputs, strict=True))
            for kind, plan in _plans(name, b, machine, cal, args.time_limit):
                with tempfile.TemporaryDirectory(prefix="placewise-rt-") as tmp:
                    t0 = time.perf_counter()
                    manifest = export_plan(plan, Path(tmp) / "out", machine=machine,
                                           source=src)
                    got = _chain(Path(tmp) / "out", feeds)
                    dt_s = time.perf_counter() - t0
                errs = []
                for o, r in zip(src.graph.outputs, ref, strict=True):
                    g = np.asarray(got[o], dtype=np.float64)
                    rr = np.asarray(r, dtype=np.float64)
                    errs.append(float(np.linalg.norm(g - rr) / max(np.linalg.norm(rr), 1e-30)))
                precisions = sorted({x.precision for x in manifest.partitions})
                row = {"model": name, "batch": b, "plan": kind,
                       "partitions": len(manifest.partitions), "precisions": precisions,
                       "calibrated": cal is not None, "rel_l2": max(errs),
                       "seconds": round(dt_s, 2)}
                rows.append(row)
                ok = row["rel_l2"] <= 1e-5 or precisions != ["fp32"]
                print(f"{name} b{b} {kind}: {row['partitions']} partitions "
                      f"{'/'.join(precisions)}, rel L2 {row['rel_l2']:.1e}"
                      f"{'' if ok else '  OVER 1e-5'} ({dt_s:.1f} s)", flush=True)
    fp32 = [r["rel_l2"] for r in rows if r["precisions"] == ["fp32"]]
    int8 = [r["rel_l2"] for r in rows if r["precisions"] != ["fp32"]]
    summary = {"plans": len(rows), "fp32_plans": len(fp32),
               "fp32_worst_rel_l2": max(fp32) if fp32 else None,
               "fp32_over_1e-5": sum(x > 1e-5 for x in fp32),
               "int8_plans": len(int8), "int8_worst_rel_l2": max(int8) if int8 else None}
    Path(args.out).write_text(json.dumps({
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": "python " + " ".join([sys.argv[0], *(argv if argv is not None
                                                        else sys.argv[1:])]),
        "wall_s": round(time.perf_counter() - t_all, 1), "summary": summary, "rows": rows},
        indent=1))
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
