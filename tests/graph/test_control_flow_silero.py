"""silero-vad (a real spox export whose whole network sits inside an If chosen by the ``sr``
input's value): counted, planned and exported op by op once ``--value sr=16000`` is given.

The file comes from the corpus (``tests/corpus.py``: the PyPI wheel at an exact version,
sha256 checked) when this checkout has it, else from the same wheel fetched here the same
way."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from placewise.graph.count import count_graph
from placewise.graph.ir import OpKind
from placewise.graph.onnx_import import load_onnx
from tests.test_cli import assert_bad_input, run
from tests.test_export import chain, rel_l2

WHEEL = "silero_vad-6.2.3-py3-none-any.whl"
WHEEL_SHA256 = "7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8"
MEMBER = "silero_vad/data/silero_vad.onnx"
SHA256 = "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3"
SHAPES = ("--shape", "input=1x512", "--shape", "state=2x1x128")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _download() -> Path:
    root = Path(os.environ.get("PLACEWISE_CORPUS_DIR",
                               Path.home() / ".cache" / "placewise-corpus"))
    out = root / "files" / "silero-vad-spox.onnx"
    if out.is_file() and _sha256(out) == SHA256:
        return out
    wheel = root / "wheels" / WHEEL
    if not (wheel.is_file() and _sha256(wheel) == WHEEL_SHA256):
        wheel.parent.mkdir(parents=True, exist_ok=True)
        got = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                              "silero-vad==6.2.3", "-d", str(wheel.parent)],
                             capture_output=True, text=True, timeout=600)
        if got.returncode != 0 or not wheel.is_file():
            pytest.skip(f"silero-vad 6.2.3 could not be fetched from PyPI: "
                        f"{got.stderr.strip()[-200:]}")
        assert _sha256(wheel) == WHEEL_SHA256, "the silero-vad wheel's sha256 differs"
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as z, tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        part = Path(tmp) / out.name
        part.write_bytes(z.read(MEMBER))
        assert _sha256(part) == SHA256, "silero_vad.onnx's sha256 differs"
        os.replace(part, out)
    return out


@pytest.fixture(scope="module")
def silero() -> Path:
    try:
        from tests.corpus import fetch  # type: ignore[import-not-found]
    except ImportError:
        return _download()
    return Path(fetch("silero-vad-spox"))


def test_the_value_puts_the_network_inside_the_if_in_the_count(silero: Path) -> None:
    unbound = load_onnx(silero, shapes={"input": (1, 512), "state": (2, 1, 128)})
    assert any(o.kind is OpKind.IF for o in unbound.ops)
    g = load_onnx(silero, shapes={"input": (1, 512), "state": (2, 1, 128)},
                  values={"sr": (16000,)})
    counts = count_graph(g)
    assert counts.coverage == 1.0 and not counts.uncounted
    assert not any(o.kind is OpKind.IF for o in g.ops)
    kinds = {o.kind for o in g.ops}
    assert {OpKind.CONV, OpKind.LSTM} <= kinds
    assert counts.flops > 1e6  # the 16 kHz network (6 convs, an LSTM), not one If
    assert g.inputs == ("input", "state")
    unknown = run("inspect", str(silero), *SHAPES)  # sr unknown: the branches' shapes differ
    assert_bad_input(unknown, str(silero), "If_0", "--value")
    proc = run("inspect", str(silero), *SHAPES, "--value", "sr=16000", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["coverage"] == 1.0 and data["values"] == ["sr"] and data["inlined_ifs"] >= 1


def test_plan_and_export_reproduce_the_model(silero: Path, tmp_path: Path) -> None:
    plan_file = tmp_path / "vad.plan.json"
    made = run("plan", str(silero), "--hw", "jetson-agx-orin", *SHAPES, "--value", "sr=16000",
               "--out", str(plan_file), "--time-limit", "120", "--json")
    assert made.returncode == 0, made.stderr
    summary = json.loads(made.stdout)
    assert summary["latency_s"] > 20e-6  # a network, not "10 us" of one uncounted op
    plan = json.loads(plan_file.read_text())
    assert plan["values"] == {"sr": [16000.0]}
    out = tmp_path / "export"
    exported = run("export", str(plan_file), "--out", str(out))  # values from the plan
    assert exported.returncode == 0, exported.stderr
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((1, 512)) * 0.1).astype(np.float32)
    state = (rng.standard_normal((2, 1, 128)) * 0.1).astype(np.float32)
    whole = ort.InferenceSession(str(silero), providers=["CPUExecutionProvider"])
    want = whole.run(["output", "stateN"], {"input": x, "state": state,
                                            "sr": np.array(16000, np.int64)})
    got = chain(out, {"input": x, "state": state})
    assert rel_l2(got["output"], want[0]) <= 1e-5
    assert rel_l2(got["stateN"], want[1]) <= 1e-5
