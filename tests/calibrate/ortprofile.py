"""Profiles taken the way a user takes them on a target (not a test module).

``take_profile`` is what a user's script does, with plain onnxruntime and numpy only
(nothing of placewise): a session with ``enable_profiling``, a few runs on random inputs,
``end_profiling``. Tests import its file into a calibration as they would import a
profile sent from a Jetson.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort


def take_profile(model: str | os.PathLike[str], folder: Path, *, runs: int = 6,
                 shapes: Mapping[str, Sequence[int]] | None = None, threads: int = 1,
                 prefix: str = "ort") -> Path:
    """Profile ``model`` with plain onnxruntime on the CPU: ``runs`` runs on random
    inputs (dims that are not numbers: ``shapes``, else 1), the profile file's path."""
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(folder / prefix)
    so.intra_op_num_threads = threads
    so.log_severity_level = 3
    sess = ort.InferenceSession(os.fspath(model), so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {}
    for i in sess.get_inputs():
        dims = (shapes or {}).get(i.name) or [d if isinstance(d, int) and d > 0 else 1
                                              for d in i.shape]
        if "int64" in i.type:
            feeds[i.name] = rng.integers(0, 4, size=dims).astype(np.int64)
        else:
            feeds[i.name] = rng.random(dims, dtype=np.float32)
    for _ in range(runs):
        sess.run(None, feeds)
    return Path(sess.end_profiling())
