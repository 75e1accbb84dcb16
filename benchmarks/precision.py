"""Precision policies over the zoo and the transformer set: speed gain against quality cost,
the estimate against the measured error, and the time the quality evidence takes.

For every model, on two presets (``jetson-agx-orin``, ``h100-sxm-server``) and on the probed
``local`` machine (unfused there: local int8 kernels exist only for contractions), the plan
is searched (``heft``) under ``KEEP``, ``int8`` and ``mixed`` (local: ``int8`` only, the
only lower precision the runtime runs) at two budgets (``rel_l2=0.01``, ``rel_l2=0.05``)
through ``placewise.precision.evidence.plan_precision``, the library call behind ``plan
--precision``. Recorded per plan: predicted latency (and the gain over KEEP), vertices
lowered, the estimated error (the chosen assignment emulated as a whole), the fallback
list, the time the evidence took (everything but the searches) and the vertices emulated.
Local plans that lower something are validated (``validate_plan``, 5 requests, no
baseline): measured error against the estimate. ``LOCAL`` lists larger models planned
for ``local`` and validated the same way (the default zoo sizes never lower on this CPU).
A last sweep times the evidence of ``zoo:bert`` at growing depth (op count) under ``int8``.

    .venv/bin/python benchmarks/precision.py
    .venv/bin/python benchmarks/precision.py --models zoo:mlp --quick

Writes ``benchmarks/results/precision.json``. Run it alone: it times evidence runs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parents[1]))

ZOO = ["zoo:mlp?layers=3&hidden=512&batch=32", "zoo:resnet", "zoo:bert", "zoo:gpt"]
REAL = [("bert", "dynamo"), ("gpt2", "dynamo"), ("vit", "dynamo"), ("t5", "ts")]
PRESETS = ["jetson-agx-orin", "h100-sxm-server"]
#: sizes at which int8 pays on this CPU's roofline (the default zoo sizes never lower here:
#: lowering must pay), planned for ``local`` and validated
LOCAL = ["zoo:mlp?layers=4&hidden=1024&batch=64", "zoo:bert?hidden=512&seq=128&batch=4",
         "zoo:gpt?hidden=512&seq=128&batch=4", "zoo:resnet?width=64&image=64&batch=8"]
BUDGETS = ["rel_l2=0.01", "rel_l2=0.05"]
OUT = Path(__file__).parent / "results" / "precision.json"


def _problem(model: str, hw: str, fused: bool) -> Any:
    from placewise.cli import resolve_machine
    from placewise.cost.load import load_cost_model
    from placewise.graph.fuse import fuse
    from placewise.graph.load import load_model
    from placewise.schedule.placement import Problem

    graph = load_model(model)
    machine = resolve_machine(hw)
    return Problem(graph, fuse(graph) if fused else None, machine,
                   load_cost_model(machine, None))


def _one(model: str, hw: str, policy: str, budget: str, fused: bool) -> dict[str, Any]:
    from placewise.plan import build_plan, save_plan
    from placewise.precision.evidence import plan_precision
    from placewise.precision.policy import QualityBudget, parse_policy
    from placewise.search.api import plan_search

    problem = _problem(model, hw, fused)
    spent = [0.0]

    def search(prob: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return plan_search(prob, strategy="heft", time_limit_s=60.0)
        finally:
            spent[0] += time.perf_counter() - t0

    t0 = time.perf_counter()
    out, rec = plan_precision(problem, model, parse_policy(policy),
                              QualityBudget.parse(budget), search)
    total = time.perf_counter() - t0
    plan = build_plan(out.problem, out.result, model_ref=model, precision=rec)
    row = {"model": model, "hw": hw, "policy": policy, "budget": budget, "fused": fused,
           "ops": len(problem.graph.ops), "vertices": len(problem.vertices),
           "latency_s": plan.predicted_latency_s, "lowered": len(rec["lowered"]),
           "lowered_dtypes": sorted(set(rec["lowered"].values())),
           "estimated": rec["estimated"], "estimated_error": rec["estimated_error"],
           "fallback": len(rec["fallback"]), "rechecks": rec["rechecks"],
           "emulated": sum(1 for d in rec["decisions"] if d["quality"]),
           "evidence_s": total - spent[0], "search_s": spent[0]}
    if hw == "local" and rec["lowered"]:
        import tempfile

        from placewise.validate import validate_plan

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "plan.json"
            save_plan(plan, path)
            rep = validate_plan(str(path), requests=5, baseline=False)
        qc = rep.quality_check
        if qc is not None:
            row["measured"] = dict(qc.measured)
            row["measured_error"] = qc.measured_error
            row["ratio"] = qc.ratio
            row["holds"] = qc.holds
    return row


def _models(args: argparse.Namespace) -> list[str]:
    if args.models:
        return list(args.models)
    models = list(ZOO)
    try:
        from tests.realmodels import export

        folder = Path(args.real_dir)
        models += [str(export(m, f, folder)) for m, f in REAL]
    except ImportError:
        pass
    return models


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="*")
    ap.add_argument("--real-dir", default="/tmp/placewise-realmodels")
    ap.add_argument("--quick", action="store_true", help="one budget, presets only")
    ap.add_argument("--depths", nargs="*", type=int, default=[1, 2, 4, 8])
    ap.add_argument("--local-only", action="store_true",
                    help="only the LOCAL models (kept beside the file's other results)")
    args = ap.parse_args()
    old = json.loads(OUT.read_text()) if OUT.exists() else {}
    local_rows = []
    for model in LOCAL:
        for policy, b in [("keep", BUDGETS[0]), ("int8", BUDGETS[0]), ("int8", BUDGETS[1])]:
            row = _one(model, "local", policy, b, False)
            local_rows.append(row)
            print(json.dumps(row), flush=True)
    if args.local_only:
        old["local_rows"] = local_rows
        OUT.write_text(json.dumps(old, indent=2) + "\n")
        return
    rows: list[dict[str, Any]] = []
    budgets = BUDGETS[:1] if args.quick else BUDGETS
    for model in _models(args):
        for hw in [*PRESETS, *([] if args.quick else ["local"])]:
            fused = hw != "local"
            runs = [("keep", BUDGETS[0])]
            for b in budgets:
                runs += [("int8", b)] + ([] if hw == "local" else [("mixed", b)])
            for policy, b in runs:
                try:
                    row = _one(model, hw, policy, b, fused)
                except Exception as e:  # a benchmark records failures and goes on
                    row = {"model": model, "hw": hw, "policy": policy, "budget": b,
                           "error": f"{type(e).__name__}: {str(e)[:300]}"}
                rows.append(row)
                print(json.dumps(row), flush=True)
    growth = []
    for depth in args.depths:
        model = f"zoo:bert?layers={depth}"
        row = _one(model, "jetson-agx-orin", "int8", BUDGETS[1], False)
        growth.append({"model": model, "ops": row["ops"], "emulated": row["emulated"],
                       "evidence_s": row["evidence_s"]})
        print(json.dumps(growth[-1]), flush=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({
        "date": dt.date.today().isoformat(), "machine": platform.processor() or platform.machine(),
        "command": "benchmarks/precision.py " + " ".join(sys.argv[1:]),
        "rows": rows, "local_rows": local_rows, "evidence_growth": growth}, indent=2) + "\n")


if __name__ == "__main__":
    main()
