"""Cost-model accuracy on this machine: held-out op times against their predictions.

For every zoo model at several batch sizes (and as a torch.export program and/or an ONNX
file), profile every distinct op on the local devices (``placewise.calibrate.profile``), then:

- **leave one batch size out** (the primary scheme): fit on the measurements of the other
  batch sizes, predict the op keys of the held-out batch that the fit never saw (keys shared
  with another batch size would be *profiled*, not predicted, so they are not scored);
- **every k-th key out**: fit on all but every k-th distinct (device, key), predict those.

Scored per op kind and overall: median absolute % error, share within ±10% and ±20%,
coverage of the stated p10..p90 interval (nominal 80%); side by side the roofline model of
the probed machine and the naive estimate flops / peak FLOP/s. Also the sum over a model's
ops (each op instance, fp32) per (model, batch, device): predicted vs measured.

Prints a table and writes JSON (default ``benchmarks/results/cost_accuracy.json``).

    .venv/bin/python benchmarks/cost_accuracy.py                      # everything
    .venv/bin/python benchmarks/cost_accuracy.py --models mlp --batches 1,2,4 --formats fx

The machine is shared with other work while this runs: measurements are medians with a
confidence target, but expect noise; the JSON records the load average before and after.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from placewise.calibrate.profile import flag_contention, profile_models
from placewise.cost.calibrated import (
    CalibratedModel,
    Calibration,
    Fit,
    Measurement,
    device_record,
    fit_estimate,
    fit_measurements,
    op_key,
)
from placewise.cost.model import Representation
from placewise.cost.roofline import RooflineModel
from placewise.graph import zoo
from placewise.graph.ir import OpKind, Tensor
from placewise.hardware.probe import load_local
from placewise.runtime.opexec import load_source
from placewise.units import DType

NOMINAL_COVERAGE = 0.80


def _profile_all(args: argparse.Namespace, machine: Any, tmp: str) -> tuple[
        list[dict[str, Any]], dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    inventories: dict[str, Any] = {}
    roof = RooflineModel(machine)
    models = [m.name for m in zoo.list_models()] if args.models == "all" else \
        args.models.split(",")
    batches = [int(b) for b in args.batches.split(",")]
    formats = args.formats.split(",")
    for name in models:
        t0 = time.time()
        items = []
        for fmt in formats:
            for batch in batches:
                if fmt == "fx":
                    source = load_source(f"zoo:{name}", batch=batch)
                else:
                    path = os.path.join(tmp, f"{name}.onnx")
                    if not os.path.exists(path):
                        zoo.export_onnx(name, {}, path)
                    source = load_source(path, batch=batch)
                assert source.graph is not None
                items.append((f"{name}/{fmt}/b{batch}", name, fmt, batch, source))
        cals = profile_models([(it[4].graph, it[4]) for it in items], machine,
                              min_repeats=args.min_repeats, max_time_s=args.max_time_s,
                              devices=args.devices)
        for (run_id, name_, fmt, batch, source), cal in zip(items, cals, strict=True):
            graph = source.graph
            assert graph is not None
            ops_by_node = {op.provenance.source or op.name: op for op in graph.ops}
            # op instances per key (for the per-model sums)
            counts: dict[str, int] = defaultdict(int)
            for op in graph.ops:
                counts[op_key(graph, op, DType.FP32)[0]] += 1
            inventories[run_id] = {"counts": dict(counts), "failures": [
                f.model_dump(mode="json") for f in cal.failures]}
            for m in cal.measurements:
                row: dict[str, Any] = {"run": run_id, "model": name_, "format": fmt,
                                       "batch": batch,
                                       **m.model_dump(mode="json", exclude={"signature"})}
                dev = machine.device(m.device)
                dtype = DType(m.dtype)
                if m.kind.startswith("convert:"):
                    numel = int(m.features["elems"])
                    src = Representation(DType.INT8 if dtype is DType.FP32 else DType.FP32)
                    t = Tensor("t", (numel,), DType.FP32)
                    row["roofline_s"] = roof.conversion_cost(
                        t, src, Representation(dtype), m.device).total_s
                    row["naive_s"] = 0.0
                else:
                    op = ops_by_node[m.source_node]
                    row["roofline_s"] = roof.op_cost(graph, op, m.device, dtype).total_s
                    row["naive_s"] = m.features.get("flops", 0.0) / dev.peak(dtype)
                rows.append(row)
            print(f"  profiled {run_id}: {len(cal.measurements)} measurements, "
                  f"{len(cal.failures)} not measured", file=sys.stderr, flush=True)
        print(f"  {name}: {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    return rows, inventories


def _measurement(row: dict[str, Any]) -> Measurement:
    keep = set(Measurement.model_fields)
    return Measurement.model_validate({k: v for k, v in row.items() if k in keep})


def _predict(train: list[dict[str, Any]], test: list[dict[str, Any]], machine: Any,
             devices: list[str]) -> list[dict[str, Any]]:
    """Fit on ``train`` and predict every row of ``test``."""
    meas = [_measurement(r) for r in train]
    cal = Calibration(devices=[device_record(machine.device(d)) for d in devices],
                      measurements=meas, fits=fit_measurements(meas))
    model = CalibratedModel(machine, cal)
    conv_fits = {(f.device, f.kind, f.dtype): f for f in cal.fits
                 if f.kind.startswith("convert:")}
    out = []
    for r in test:
        kind = r["kind"]
        est: tuple[float, float, float, Fit] | None = None
        if kind.startswith("convert:"):
            fit = conv_fits.get((r["device"], kind, r["dtype"]))
            e = fit_estimate(fit, r["features"]) if fit is not None else None
            est = None if e is None or fit is None else (*e, fit)
        else:
            est = model.estimate(r["device"], OpKind(kind), DType(r["dtype"]), r["family"],
                                 r["features"], r.get("series", ""))
        if est is None:
            pred, low, high, level = r["roofline_s"], r["roofline_s"] * 0.6, \
                r["roofline_s"] * 1.7, "roofline"
        else:
            pred, low, high, fit = est
            level = fit.level
        out.append({**r, "pred_s": pred, "low_s": low, "high_s": high, "fit_level": level})
    return out


def _holdout_batch(rows: list[dict[str, Any]], machine: Any, devices: list[str]
                   ) -> list[dict[str, Any]]:
    preds: list[dict[str, Any]] = []
    for b in sorted({r["batch"] for r in rows}):
        train = [r for r in rows if r["batch"] != b]
        seen = {(r["device"], r["key"]) for r in train}
        test = [r for r in rows if r["batch"] == b and (r["device"], r["key"]) not in seen]
        # one row per (device, key) in the test set
        uniq = {(r["device"], r["key"]): r for r in test}
        preds += _predict(train, list(uniq.values()), machine, devices)
    return preds


def _holdout_key(rows: list[dict[str, Any]], machine: Any, devices: list[str], k: int
                 ) -> list[dict[str, Any]]:
    uniq: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        uniq.setdefault((r["device"], r["key"]), r)
    keys = sorted(uniq)
    preds: list[dict[str, Any]] = []
    for fold in range(k):
        test_keys = {key for i, key in enumerate(keys) if i % k == fold}
        train = [r for r in rows if (r["device"], r["key"]) not in test_keys]
        preds += _predict(train, [uniq[key] for key in sorted(test_keys)], machine, devices)
    return preds


def _stats(rows: list[dict[str, Any]], field: str) -> dict[str, Any]:
    if not rows:
        return {"n": 0}
    meas = np.array([r["median_s"] for r in rows])
    pred = np.array([r[field] for r in rows])
    err = np.abs(pred / meas - 1.0) * 100.0
    out = {"n": len(rows), "median_abs_pct": float(np.median(err)),
           "p90_abs_pct": float(np.quantile(err, 0.9)),
           "within_10_pct": float(np.mean(err <= 10.0)),
           "within_20_pct": float(np.mean(err <= 20.0)),
           "median_signed_pct": float(np.median((pred / meas - 1.0) * 100.0))}
    if field == "pred_s":
        lo = np.array([r["low_s"] for r in rows])
        hi = np.array([r["high_s"] for r in rows])
        out["coverage"] = float(np.mean((lo <= meas) & (meas <= hi)))
        out["median_rel_width"] = float(np.median((hi - lo) / pred))
    return out


def _report(preds: list[dict[str, Any]]) -> dict[str, Any]:
    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in preds:
        k = r["kind"] if not r["kind"].startswith("convert:") else "convert:" + (
            "quantize" if r["dtype"] == "int8" else "dequantize")
        by_kind[f"{k}/{r['dtype']}" if r["dtype"] != "fp32" else k].append(r)
    table = {}
    for k in sorted(by_kind):
        rs = by_kind[k]
        table[k] = {"calibrated": _stats(rs, "pred_s"), "roofline": _stats(rs, "roofline_s"),
                    "naive_peak": _stats([r for r in rs if r["naive_s"] > 0], "naive_s")}
    overall = {"calibrated": _stats(preds, "pred_s"), "roofline": _stats(preds, "roofline_s"),
               "naive_peak": _stats([r for r in preds if r["naive_s"] > 0], "naive_s"),
               "naive_peak_all_ops": _stats(preds, "naive_s")}
    by_device = {d: _stats([r for r in preds if r["device"] == d], "pred_s")
                 for d in sorted({r["device"] for r in preds})}
    by_format = {f: _stats([r for r in preds if r["format"] == f], "pred_s")
                 for f in sorted({r["format"] for r in preds})}
    by_level = {lv: _stats([r for r in preds if r["fit_level"] == lv], "pred_s")
                for lv in sorted({r["fit_level"] for r in preds})}
    return {"overall": overall, "by_kind": table, "by_device": by_device,
            "by_format": by_format, "by_fit_level": by_level}


def _model_sums(rows: list[dict[str, Any]], preds: list[dict[str, Any]],
                inventories: dict[str, Any]) -> list[dict[str, Any]]:
    """Per (run, device), fp32: sum over op instances of predicted vs measured time; keys
    not held out use their measurement (as the calibrated model would)."""
    pred_by = {(r["run"], r["device"], r["key"]): r["pred_s"] for r in preds}
    meas_by: dict[tuple[str, str, str], float] = {}
    for r in rows:
        meas_by[(r["run"], r["device"], r["key"])] = r["median_s"]
    out = []
    runs_devs = sorted({(r["run"], r["device"]) for r in rows})
    for run, dev in runs_devs:
        counts = inventories[run]["counts"]
        m_sum = p_sum = 0.0
        missing = 0
        for key, c in counts.items():
            m = meas_by.get((run, dev, key))
            if m is None:
                missing += c
                continue
            p = pred_by.get((run, dev, key), m)
            m_sum += c * m
            p_sum += c * p
        if m_sum > 0:
            out.append({"run": run, "device": dev, "measured_s": m_sum, "predicted_s": p_sum,
                        "error_pct": (p_sum / m_sum - 1) * 100, "ops_not_measured": missing})
    return out


def _fmt_stats(s: dict[str, Any], cov: bool = True) -> str:
    if not s.get("n"):
        return f"{'-':>7} {'-':>6} {'-':>6}" + (f" {'-':>6}" if cov else "")
    txt = f"{s['median_abs_pct']:6.1f}% {s['within_10_pct'] * 100:5.0f}% " \
          f"{s['within_20_pct'] * 100:5.0f}%"
    if cov:
        txt += f" {s.get('coverage', float('nan')) * 100:5.0f}%"
    return txt


def _print(title: str, rep: dict[str, Any]) -> None:
    print(f"\n== {title} ==")
    print(f"{'op kind':28s} {'n':>4}  {'calibrated: med|err| ±10% ±20% cover':>38}   "
          f"{'roofline med|err|':>17}   {'naive peak med|err| (n)':>23}")
    items = [*rep["by_kind"].items(), ("OVERALL", rep["overall"])]
    for k, v in items:
        c, r_, nv = v["calibrated"], v["roofline"], v["naive_peak"]
        naive = f"{nv['median_abs_pct']:8.1f}% ({nv['n']})" if nv.get("n") else "-"
        roofs = f"{r_['median_abs_pct']:8.1f}%" if r_.get("n") else "-"
        print(f"{k:28s} {c['n']:4d}  {_fmt_stats(c):>38}   {roofs:>17}   {naive:>23}")
    print("by device:  " + "; ".join(f"{d}: {_fmt_stats(s)}" for d, s in rep["by_device"].items()))
    print("by format:  " + "; ".join(f"{d}: {_fmt_stats(s)}" for d, s in rep["by_format"].items()))
    print("by fit level: " + "; ".join(f"{d}: {_fmt_stats(s)} (n={s['n']})"
                                       for d, s in rep["by_fit_level"].items()))


def _reflag(rows: list[dict[str, Any]], machine: Any) -> list[dict[str, Any]]:
    """Apply ``flag_contention`` to old rows (per run), keeping their order."""
    flags: dict[int, list[str]] = {}
    for run in sorted({r["run"] for r in rows}):
        idx = [i for i, r in enumerate(rows) if r["run"] == run]
        flagged = flag_contention([_measurement(rows[i]) for i in idx], machine)
        flags.update({i: f.flags for i, f in zip(idx, flagged, strict=True)})
    return [{**r, "flags": flags[i]} for i, r in enumerate(rows)]


def _repeatability(args: argparse.Namespace, machine: Any) -> dict[str, Any]:
    """Profile one model twice (one worker per device, back to back) and compare."""
    source = load_source(args.repeat)
    assert source.graph is not None
    a, b = profile_models([(source.graph, source), (source.graph, source)], machine,
                          min_repeats=args.min_repeats, max_time_s=args.max_time_s,
                          devices=args.devices)
    first = {(m.device, m.key): m.median_s for m in a.measurements if not m.flags}
    diffs: dict[str, list[float]] = defaultdict(list)
    for m in b.measurements:
        if (m.device, m.key) in first and not m.flags:
            diffs[m.device].append(abs(m.median_s / first[(m.device, m.key)] - 1) * 100)
    every = np.array([x for v in diffs.values() for x in v])
    return {"model": args.repeat, "n": len(every), "median_abs_pct": float(np.median(every)),
            "within_10_pct": float(np.mean(every <= 10)),
            "within_20_pct": float(np.mean(every <= 20)),
            "by_device": {d: float(np.median(v)) for d, v in sorted(diffs.items())}}


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="all", help="comma-separated zoo names, or 'all'")
    p.add_argument("--batches", default="1,2,4,8")
    p.add_argument("--formats", default="fx,onnx", help="fx (torch.export) and/or onnx")
    p.add_argument("--devices", default=None, type=lambda s: s.split(","),
                   help="local devices to profile (default: all)")
    p.add_argument("--min-repeats", type=int, default=7)
    p.add_argument("--max-time-s", type=float, default=0.3)
    p.add_argument("--holdout-k", type=int, default=5)
    p.add_argument("--out", default="benchmarks/results/cost_accuracy.json")
    p.add_argument("--repeat", default="zoo:bert?batch=4",
                   help="profile this model twice more to measure run-to-run noise ('' = skip)")
    p.add_argument("--reuse", default=None,
                   help="re-score the raw rows of an earlier JSON instead of profiling")
    args = p.parse_args(argv)
    machine = load_local()
    started = dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()
    load_before = _loadavg()
    t0 = time.time()
    if args.reuse:
        old = json.loads(Path(args.reuse).read_text())
        rows, inventories = old["rows"], old["inventories"]
        rows = _reflag(rows, machine)
    else:
        with tempfile.TemporaryDirectory(prefix="pw-acc-") as tmp:
            rows, inventories = _profile_all(args, machine, tmp)
    profile_s = time.time() - t0
    repeat = _repeatability(args, machine) if args.repeat and not args.reuse else \
        (old.get("repeatability") if args.reuse else None)
    devices = sorted({r["device"] for r in rows})
    flagged = [r for r in rows if r.get("flags")]
    clean = [r for r in rows if not r.get("flags")]
    by_batch = _holdout_batch(clean, machine, devices)
    by_key = _holdout_key(clean, machine, devices, args.holdout_k)
    rep_batch, rep_key = _report(by_batch), _report(by_key)
    sums = _model_sums(clean, by_batch, inventories)
    _print("held out: one batch size at a time (fit on the others)", rep_batch)
    _print(f"held out: every {args.holdout_k}th distinct (device, key)", rep_key)
    errs = np.array([abs(s["error_pct"]) for s in sums]) if sums else np.array([0.0])
    print(f"\nsum of a model's fp32 op times per (model, batch, device), batch held out: "
          f"median |err| {np.median(errs):.1f}%, max {errs.max():.1f}% over {len(sums)}")
    noise = np.array([(r["p90_s"] - r["p10_s"]) / r["median_s"] for r in rows])
    ci = np.array([r["rel_ci"] for r in rows])
    if repeat:
        print(f"run-to-run: the same model ({repeat['model']}) profiled twice: median "
              f"|difference| of op medians {repeat['median_abs_pct']:.1f}%, "
              f"{repeat['within_10_pct'] * 100:.0f}% within ±10%, "
              f"{repeat['within_20_pct'] * 100:.0f}% within ±20% (n={repeat['n']}; per device "
              + ", ".join(f"{d} {v:.1f}%" for d, v in repeat["by_device"].items()) + ")")
    by_dev = defaultdict(int)
    for r in flagged:
        by_dev[r["device"]] += 1
    print(f"flagged contention (not fitted, not scored): {len(flagged)} of {len(rows)} "
          f"measurements ({dict(by_dev)})")
    print(f"measurement noise: median (p90-p10)/median {np.median(noise) * 100:.1f}%, "
          f"median 95% CI of the median ±{np.median(ci) * 50:.1f}%; "
          f"{len(rows)} measurements, profiling "
          f"{'reused' if args.reuse else f'{profile_s:.0f} s'}; load average "
          f"{load_before} -> {_loadavg()}")
    result = {
        "benchmark": "cost_accuracy", "date": started,
        "command": "python benchmarks/cost_accuracy.py " + " ".join(
            argv if argv is not None else sys.argv[1:]),
        "machine": {"name": machine.name, "tags": machine.tags,
                    "devices": {d.name: {"cores": d.cores, "backend": d.backend,
                                         "dtypes": [x.value for x in d.dtypes]}
                                for d in machine.devices}},
        "settings": {"models": args.models, "batches": args.batches, "formats": args.formats,
                     "min_repeats": args.min_repeats, "max_time_s": args.max_time_s,
                     "holdout_k": args.holdout_k, "nominal_coverage": NOMINAL_COVERAGE},
        "load_average": {"before": load_before, "after": _loadavg()},
        "profile_s": profile_s,
        "measurement_noise": {"median_p90_p10_over_median": float(np.median(noise)),
                              "median_rel_ci": float(np.median(ci))},
        "holdout_batch": rep_batch, "holdout_key": rep_key, "model_sums": sums,
        "repeatability": repeat,
        "flagged_contention": {"n": len(flagged), "of": len(rows), "by_device": dict(by_dev),
                               "by_format": {f: sum(1 for r in flagged if r["format"] == f)
                                             for f in sorted({r["format"] for r in rows})}},
        "rows": rows, "inventories": inventories,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # one row per line: readable, diffable, and a third of the size of indented JSON
    rows_text = ",\n".join(json.dumps(r, sort_keys=True, allow_nan=False) for r in rows)
    head = json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=1,
                      sort_keys=True, allow_nan=False)
    out.write_text(head[:-1].rstrip() + ',\n "rows": [\n' + rows_text + "\n ]\n}\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
