"""Profile an ONNX model with plain onnxruntime, as a user on a target machine would.

Nothing of placewise is imported: this is the script a user runs where placewise cannot
(a Jetson, a GPU server), whose output ``placewise calibrate import`` reads.

    python benchmarks/ort_user_profile.py MODEL.onnx --out DIR [--threads 1] [--cores 0]
        [--runs 30] [--warmup 5] [--provider CPUExecutionProvider] [--batch N]

Inputs are random (seeded) at the model's shapes; a free dimension takes ``--batch`` when
it is the first, else 1. Writes ``DIR/<prefix>_<date>.json`` (onnxruntime's own name) and
prints its path.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import onnxruntime as ort

_NP = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
       "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int8)": np.int8,
       "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_}


def feeds(sess: ort.InferenceSession, batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) and d > 0 else (batch if k == 0 else 1)
                 for k, d in enumerate(i.shape)]
        dt = _NP[i.type]
        if np.issubdtype(dt, np.integer):
            out[i.name] = rng.integers(0, 100, size=shape).astype(dt)
        elif dt is np.bool_:
            out[i.name] = rng.integers(0, 2, size=shape).astype(bool)
        else:
            out[i.name] = rng.standard_normal(shape).astype(dt)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cores", default="", help="comma-separated cores to pin to")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--provider", default="CPUExecutionProvider")
    ap.add_argument("--prefix", default="ort_profile")
    a = ap.parse_args(argv)
    if a.cores:
        os.sched_setaffinity(0, {int(c) for c in a.cores.split(",")})
    os.makedirs(a.out, exist_ok=True)
    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(a.out, a.prefix)
    so.log_severity_level = 3
    sess = ort.InferenceSession(a.model, so, providers=[a.provider])
    fd = feeds(sess, a.batch)
    for _ in range(a.warmup + a.runs):
        sess.run(None, fd)
    print(sess.end_profiling())
    return 0


if __name__ == "__main__":
    sys.exit(main())
