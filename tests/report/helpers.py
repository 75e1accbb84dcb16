"""Builders for the report tests (not a test module).

- ``HOSTILE``: a label that would run script if any part of the report used it unescaped;
- ``sweep_doc()``: a sweep file's content laid out as ``placewise.sweep`` documents it
  (schema ``placewise-sweep/1``: cells, fit matrix, curves, regret, sensitivity), two
  models x two platforms x three batches, numbers from a simple latency model, energy on
  one platform only, and ``HOSTILE`` as one model's name;
- ``png_stats(data)``: (width, height, distinct colours, share of non-white pixels) of a
  PNG, decoded with zlib (no imaging library needed).
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

HOSTILE = "</script><img src=x onerror=window.__pwned=1><!--"


def _cell(model: str, platform: str, batch: int) -> dict[str, Any]:
    base = 1e-3 if platform == "jetson-agx-orin" else 2e-4
    lat = base * (1 + 0.6 * (batch - 1)) * (2 if model == HOSTILE else 1)
    peak = 1_000_000 * batch * (3 if model == HOSTILE else 1)
    cap = 2_500_000 if platform == "jetson-agx-orin" else 3_500_000
    fits = peak <= cap
    energy: dict[str, Any] | None = None
    if platform == "jetson-agx-orin":
        per = 0.05 * lat * 30 / batch
        energy = {"available": True, "reason": None, "mode": "MAXN", "batch": batch,
                  "makespan_s": lat, "energy_per_run_j": per * batch,
                  "energy_per_request_j": per, "requests_per_j": 1 / per,
                  "average_power_w": per * batch / lat, "saturated_energy_per_request_j": per,
                  "devices": [], "estimate": True, "method": "idle x makespan + active x busy"}
    return {"model": model, "platform": platform, "batch": batch, "shape": None,
            "objective": "latency", "precision": "keep", "fits": fits,
            "reason": None if fits else f"cpu/dram needs {peak} B > {cap} B",
            "latency_s": lat, "throughput_rps": batch / lat, "lower_bound_s": lat * 0.8,
            "devices_used": ["cpu"], "bottleneck_resource": "cpu",
            "peak_bytes": {"cpu/dram": peak}, "capacity_bytes": {"cpu/dram": cap},
            "headroom_bytes": {"cpu/dram": cap - peak}, "energy": energy,
            "mfu": 0.01 * batch, "memory_bound_fraction": 0.3, "by_layer_type": [],
            "plan_file": None}


def sweep_doc() -> dict[str, Any]:
    models, platforms, batches = ["zoo:mlp", HOSTILE], ["jetson-agx-orin", "h100-sxm-server"], [1, 2, 4]
    cells = [_cell(m, p, b) for m in models for p in platforms for b in batches]
    fit = []
    for m in models:
        for p in platforms:
            ok = [c for c in cells if c["model"] == m and c["platform"] == p and c["fits"]]
            best = max(ok, key=lambda c: c["throughput_rps"]) if ok else None
            fit.append({"model": m, "platform": p, "fits": best is not None,
                        "best_batch": best["batch"] if best else None,
                        "latency_s": best["latency_s"] if best else None,
                        "throughput_rps": best["throughput_rps"] if best else None,
                        "requests_per_j": (best["energy"] or {}).get("requests_per_j")
                        if best else None,
                        "reason": None if best else "no batch fits the memory"})
    curves = [{"model": m, "platform": p, "objective": "latency",
               "points": [{"batch": c["batch"], "latency_s": c["latency_s"],
                           "throughput_rps": c["throughput_rps"], "fits": c["fits"]}
                          for c in cells if c["model"] == m and c["platform"] == p]}
              for m in models for p in platforms]
    regret = [{"model": "zoo:mlp", "platform": "jetson-agx-orin", "objective": "latency",
               "batches": batches,
               "regret": [[0.0 if i == j else 0.1 * abs(i - j) for j in range(3)]
                          for i in range(3)],
               "latency_s": [[1e-3 * (1 + j) * (1 + 0.1 * abs(i - j)) for j in range(3)]
                             for i in range(3)]}]
    sens = [{"model": HOSTILE, "platform": "h100-sxm-server", "axis": "batch", "edge": 2,
             "points": [{"value": b, "peak_bytes": {"cpu/dram": 3_000_000 * b},
                         "capacity_bytes": {"cpu/dram": 3_500_000}, "fits": b < 2,
                         "applied": None if b < 2 else
                         {"kind": "micro_batch", "micro_batches": b, "latency_s": 1e-3 * b,
                          "extra_s": 1e-4 * b, "note": "split into micro-batches"}}
                        for b in batches]}]
    return {"schema": "placewise-sweep/1", "created_by": "tests", "engine": "local",
            "slo_s": 0.01, "axes": {"models": models, "platforms": platforms, "batches": batches,
                                    "shapes": [], "objectives": ["latency"],
                                    "precision": "keep"},
            "cells": cells,
            "fit_matrix": {"models": models, "platforms": platforms, "slo_s": 0.01,
                           "cells": fit},
            "curves": curves, "regret": regret, "sensitivity": sens,
            "timing": {"wall_s": 1.5, "cells": len(cells), "engine_start_s": 0.0}}


# ---- PNG ------------------------------------------------------------------------------------
def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else (b if pb <= pc else c)


def png_stats(data: bytes) -> tuple[int, int, int, float]:
    """(width, height, distinct colours, share of pixels that are not white) of an 8-bit
    RGB or RGBA, non-interlaced PNG (what Chromium's screenshots are)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, head = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            head = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    assert head is not None
    width, height, depth, ctype, _, _, interlace = head
    assert depth == 8 and ctype in (2, 6) and interlace == 0, head
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    colours: set[bytes] = set()
    coloured = 0
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + ((a + b) >> 1)) & 255
            elif f == 4:
                line[i] = (line[i] + _paeth(a, b, c)) & 255
        for x in range(0, stride, bpp * 4):  # every 4th pixel: enough to judge
            px = bytes(line[x:x + 3])
            colours.add(px)
            coloured += px != b"\xff\xff\xff"
        prev = line
    sampled = height * len(range(0, stride, bpp * 4))
    return width, height, len(colours), coloured / max(1, sampled)
