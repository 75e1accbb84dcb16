"""Fits of measured op times against shape features: per (device, family, kind, dtype)
a non-negative least-squares fit on relative error with leave-one-out residual quantiles
(``fit_measurements``), per-series fits for the same op at other batch sizes, and what a
fit predicts (``predict``, ``fit_estimate``). ``placewise.cost.calibrated`` builds the
calibrated cost model on them; the schema of ``Fit`` and ``Measurement`` is
``placewise.cost.calibration``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from placewise.cost.calibration import (
    FEATURES,
    MIN_FIT_POINTS,
    Fit,
    LinkMeasurement,
    Measurement,
)
from placewise.graph.ir import OpCategory, OpKind

__all__ = ["TRANSFER_METHOD", "fit_estimate", "fit_link", "fit_measurements", "predict"]

_MIN_HALF_WIDTH = 0.05
TRANSFER_METHOD = ("in model order: send step start -> receive step end of transfers whose "
                   "receiver was waiting, in runs alternating the regions between two devices; "
                   "fit latency + bytes x seconds_per_byte")

_CANDIDATES: dict[str, tuple[tuple[str, ...], ...]] = {
    "contraction": (("one", "eff_flops", "bytes"), ("one", "flops", "bytes"),
                    ("one", "eff_flops"), ("one", "flops"), ("one", "io_bytes")),
    "other": (("one", "bytes"), ("one", "io_bytes"), ("one", "elems"),
              ("one", "bytes", "flops"), ("one",)),
    "conversion": (("one", "bytes"), ("one", "elems")),
}



def _category_of(kind: str) -> str:
    if kind.startswith("convert:"):
        return "conversion"
    try:
        k = OpKind(kind)
    except ValueError:
        return "other"
    return "contraction" if k.category is OpCategory.CONTRACTION else "other"


def _solve_rel(x: np.ndarray[Any, Any], t: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Non-negative least squares on relative error: min sum(((x @ c) - t) / t)^2, c >= 0,
    by trying every subset of columns (there are at most three)."""
    p = x.shape[1]
    a = x / t[:, None]
    b = np.ones_like(t)
    scale = np.maximum(np.abs(a).max(axis=0), 1e-300)
    a_s = a / scale
    best: tuple[float, np.ndarray[Any, Any]] | None = None
    for r in range(1, p + 1):
        for cols in itertools.combinations(range(p), r):
            sol, *_ = np.linalg.lstsq(a_s[:, cols], b, rcond=None)
            if np.any(sol < 0):
                continue
            c = np.zeros(p)
            c[list(cols)] = sol
            err = float(np.sum((a_s @ c - b) ** 2))
            if best is None or err < best[0] - 1e-12:
                best = (err, c)
    if best is None:
        return np.zeros(p)
    return best[1] / scale


def _loo_residuals(x: np.ndarray[Any, Any], t: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    n = len(t)
    res = np.empty(n)
    for i in range(n):
        keep = np.arange(n) != i
        c = _solve_rel(x[keep], t[keep])
        pred = float(x[i] @ c)
        res[i] = math.log(t[i] / pred) if pred > 0 else math.log(t[i] / max(t[keep].min(), 1e-12))
    return res


def _fit_group(rows: Sequence[Measurement], device: str, family: str, kind: str, dtype: str,
               level: str) -> Fit | None:
    # one point per distinct feature vector (repeated keys average in log space)
    by_feat: dict[tuple[float, ...], list[float]] = {}
    for m in rows:
        fv = tuple(m.features.get(f, 0.0) for f in FEATURES)
        by_feat.setdefault(fv, []).append(m.median_s)
    if not by_feat:
        return None
    feats = list(by_feat)
    t = np.array([math.exp(float(np.mean(np.log(v)))) for v in by_feat.values()])
    full = np.array(feats)
    n = len(t)
    best: tuple[float, tuple[str, ...], np.ndarray[Any, Any], np.ndarray[Any, Any]] | None = None
    for cand in _CANDIDATES[_category_of(kind) if level != "device" else "other"]:
        cols = [FEATURES.index(f) for f in cand]
        x = full[:, cols]
        if n < len(cand) + 1 and cand != ("one",):
            continue
        if any(np.all(x[:, j] == 0) for j in range(x.shape[1])):
            continue
        res = _loo_residuals(x, t) if n >= 2 else np.zeros(1)
        score = float(np.mean(np.abs(res))) * (1.0 + 0.02 * len(cand))
        if best is None or score < best[0]:
            best = (score, cand, x, res)
    if best is None:
        cand = ("one",)
        x = np.ones((n, 1))
        res = _loo_residuals(x, t) if n >= 2 else np.zeros(1)
        best = (0.0, cand, x, res)
    _, cand, x, res = best
    coef = _solve_rel(x, t)
    if not np.any(coef > 0):
        return None
    spread = _MIN_HALF_WIDTH
    if n >= 2:
        # small samples: widen the empirical quantiles (a t-like factor)
        widen = 1.0 + 1.5 / math.sqrt(n)
        q10, q50, q90 = (float(np.quantile(res, q)) for q in (0.1, 0.5, 0.9))
        q10, q90 = min(q10 * widen, -spread), max(q90 * widen, spread)
    else:
        q10, q50, q90 = -0.5, 0.0, 0.5  # one point: a wide, stated guess
    q50 = min(max(q50, q10), q90)
    loo_pct = float(np.median(np.abs(np.expm1(-res)))) * 100 if n >= 2 else 0.0
    return Fit(device=device, kind=kind, dtype=dtype, family=family, level=level,
               features=list(cand),
               coef=[float(c) for c in coef], n=n, resid_q10=q10, resid_q50=q50,
               resid_q90=q90, loo_median_abs_pct=loo_pct)


_SERIES_FEATURES: dict[str, tuple[str, ...]] = {"contraction": ("one", "eff_flops"), "other": ("one", "io_bytes"),
                    "conversion": ("one", "bytes")}
_DEFAULT_SERIES_RESID = (-0.3, 0.0, 0.3)  # no evidence at all: a stated, wide guess


def _series_points(rows: Sequence[Measurement], cand: tuple[str, ...]
                   ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    by_feat: dict[tuple[float, ...], list[float]] = {}
    for m in rows:
        by_feat.setdefault(tuple(m.features.get(f, 0.0) for f in cand), []).append(m.median_s)
    x = np.array(list(by_feat))
    t = np.array([math.exp(float(np.mean(np.log(v)))) for v in by_feat.values()])
    return x, t


def _pool_keys(dev: str, m: Measurement) -> list[tuple[str, ...]]:
    """Where a series' leave-one-out residuals are pooled, most specific first."""
    cat = _category_name(m.kind)
    return [(dev, m.family, m.kind, m.dtype), (dev, m.family, "c:" + cat, m.dtype),
            (dev, m.family, m.dtype)]


def _series_fits(measurements: Sequence[Measurement], kind_fits: Sequence[Fit]) -> list[Fit]:
    """One fit per (device, series) with two or more distinct points: time linear in the
    series' work feature. Its interval: the leave-one-out residuals of every series of
    three or more points of the same (device, family, kind, dtype) - else category, else
    device - pooled; else the kind fit's; else a wide default."""
    series: dict[tuple[str, str], list[Measurement]] = {}
    for m in measurements:
        if m.series and not m.kind.startswith("convert:"):
            series.setdefault((m.device, m.series), []).append(m)
    prepared: list[tuple[str, str, Measurement, tuple[str, ...], Any, Any, Any]] = []
    pools: dict[tuple[str, ...], list[float]] = {}
    for (dev, key), rows in sorted(series.items()):
        m0 = rows[0]
        cand = _SERIES_FEATURES[_category_of(m0.kind)]
        x, t = _series_points(rows, cand)
        if len(t) < 2 or np.all(x[:, 1] == x[0, 1]):
            continue
        coef = _solve_rel(x, t)
        if not np.any(coef > 0):
            continue
        res = _loo_residuals(x, t) if len(t) >= 3 else None
        if res is not None:
            for pk in _pool_keys(dev, m0):
                pools.setdefault(pk, []).extend(float(r) for r in res)
        prepared.append((dev, key, m0, cand, coef, x, t))
    kinds = {(f.device, f.family, f.kind, f.dtype): f for f in kind_fits}
    fits: list[Fit] = []
    for dev, key, m0, cand, coef, _x, t in prepared:
        cat = _category_name(m0.kind)
        pool = None
        for pk in _pool_keys(dev, m0):
            if len(pools.get(pk, ())) >= 3:
                pool = np.array(pools[pk])
                break
        if pool is not None:
            widen = 1.0 + 1.5 / math.sqrt(len(pool))
            q10, q50, q90 = (float(np.quantile(pool, q)) for q in (0.1, 0.5, 0.9))
            q10, q90 = min(q10 * widen, -_MIN_HALF_WIDTH), max(q90 * widen, _MIN_HALF_WIDTH)
            q50 = 0.0  # a series' own line is unbiased; the pool only sets the width
            loo = float(np.median(np.abs(np.expm1(-pool)))) * 100
        else:
            kf = None
            for k in (m0.kind, f"category:{cat}", "*"):
                kf = kinds.get((dev, m0.family, k, m0.dtype))
                if kf is not None:
                    break
            if kf is not None:
                q10, q90 = kf.resid_q10 - kf.resid_q50, kf.resid_q90 - kf.resid_q50
                loo = kf.loo_median_abs_pct
            else:
                q10, _, q90 = _DEFAULT_SERIES_RESID
                loo = 0.0
            q50 = 0.0
        fits.append(Fit(device=dev, kind=m0.kind, dtype=m0.dtype, family=m0.family,
                        level="series", series=key, features=list(cand),
                        coef=[float(c) for c in coef], n=len(t), resid_q10=min(q10, 0.0),
                        resid_q50=q50, resid_q90=max(q90, 0.0), loo_median_abs_pct=loo))
    return fits


def fit_measurements(measurements: Iterable[Measurement]) -> list[Fit]:
    """Fits per (device, kind, dtype); pooled per category and per device for kinds with
    fewer than ``MIN_FIT_POINTS`` distinct shapes; and per series (one op at several batch
    sizes, see ``op_series``). Flagged measurements are left out."""
    measurements = [m for m in measurements if not m.flags]
    groups: dict[tuple[str, str, str, str], list[Measurement]] = {}
    cats: dict[tuple[str, str, str, str], list[Measurement]] = {}
    devs: dict[tuple[str, str, str], list[Measurement]] = {}
    for m in measurements:
        conv = m.kind.startswith("convert:")
        fam = "" if conv else m.family
        groups.setdefault((m.device, fam, m.kind, m.dtype), []).append(m)
        if not conv:
            cat = _category_name(m.kind)
            cats.setdefault((m.device, fam, cat, m.dtype), []).append(m)
            devs.setdefault((m.device, fam, m.dtype), []).append(m)
    fits: list[Fit] = []
    for (dev, fam, kind, dt), rows in sorted(groups.items()):
        distinct = {tuple(sorted(r.features.items())) for r in rows}
        conv = kind.startswith("convert:")
        if len(distinct) >= MIN_FIT_POINTS or conv:
            f = _fit_group(rows, dev, fam, kind, dt, "conversion" if conv else "kind")
            if f is not None:
                fits.append(f)
    for (dev, fam, cat, dt), rows in sorted(cats.items()):
        f = _fit_group(rows, dev, fam, f"category:{cat}", dt, "category")
        if f is not None:
            fits.append(f)
    for (dev, fam, dt), rows in sorted(devs.items()):
        f = _fit_group(rows, dev, fam, "*", dt, "device")
        if f is not None:
            fits.append(f)
    return fits + _series_fits(measurements, fits)


def _category_name(kind: str) -> str:
    try:
        return OpKind(kind).category.value
    except ValueError:
        return "other"


def predict(fit: Fit, features: Mapping[str, float]) -> float:
    """The fit's raw time for ``features`` (seconds), before the residual correction."""
    return float(sum(c * features.get(f, 0.0) for f, c in zip(fit.features, fit.coef,
                                                               strict=True)))


def fit_estimate(fit: Fit, features: Mapping[str, float]) -> tuple[float, float, float] | None:
    """(centre, low, high) seconds of ``fit`` for ``features``: the raw prediction shifted
    by the median leave-one-out residual, the interval by its p10 and p90 (it always
    contains the centre). None when the fit predicts no time.

    >>> f = Fit(device="d", kind="relu", dtype="fp32", features=["one"], coef=[1e-6], n=5,
    ...         resid_q10=-0.1, resid_q50=0.0, resid_q90=0.2)
    >>> [round(x * 1e6, 3) for x in fit_estimate(f, {"one": 1.0})]
    [1.0, 0.905, 1.221]
    """
    raw = predict(fit, features)
    if not raw > 0:
        return None
    centre = raw * math.exp(fit.resid_q50)
    low = min(centre * math.exp(fit.resid_q10 - fit.resid_q50), centre)
    high = max(centre * math.exp(fit.resid_q90 - fit.resid_q50), centre)
    return centre, low, high


# ---- the model -------------------------------------------------------------------------------


def fit_link(src: str, dst: str, samples: Sequence[tuple[int, float]]
             ) -> LinkMeasurement | None:
    """time = latency + bytes x seconds_per_byte, least squares on relative error with
    both coefficients >= 0, over (bytes, seconds) samples; None when there are none.

    >>> f = fit_link("a", "b", [(0, 2e-5), (1000, 3e-5), (2000, 4e-5), (2000, 4e-5)])
    >>> round(f.latency_s * 1e6, 3), round(f.seconds_per_byte * 1e9, 3), f.n
    (20.0, 10.0, 4)
    """
    pts = [(float(b), float(t)) for b, t in samples if t > 0]
    if not pts:
        return None
    x = np.array([p[0] for p in pts])
    t = np.array([p[1] for p in pts])
    if np.ptp(x) == 0:  # one size: the bandwidth cannot be told from the latency
        lat, spb = float(np.median(t)), 0.0
    else:
        w = 1.0 / t
        coef = np.linalg.lstsq(np.stack([w, x * w], axis=1), np.ones_like(t), rcond=None)[0]
        lat, spb = float(coef[0]), float(coef[1])
        if lat < 0:  # through the origin
            lat, spb = 0.0, float(np.median(t / np.maximum(x, 1.0)))
        elif spb < 0:  # no bandwidth visible in these sizes: a constant
            lat, spb = float(np.median(t)), 0.0
    pred = lat + spb * x
    ratio = np.log(t / np.maximum(pred, 1e-12))
    return LinkMeasurement(
        src=src, dst=dst, latency_s=lat, seconds_per_byte=spb, n=len(pts),
        resid_q10=min(float(np.quantile(ratio, 0.1)), 0.0),
        resid_q90=max(float(np.quantile(ratio, 0.9)), 0.0),
        min_bytes=int(x.min()), max_bytes=int(x.max()), method=TRANSFER_METHOD)
