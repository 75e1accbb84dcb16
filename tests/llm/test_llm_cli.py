"""``placewise llm``: serve (simulated), export, run (real, on this machine), plan of a file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_runner import run_cli


def _json(args: list[str]) -> dict:  # type: ignore[type-arg]
    r = run_cli(args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def test_serve_on_a_preset_picks_the_batch_that_keeps_layers_resident() -> None:
    d = _json(["llm", "serve", "llama-2-7b", "--hw", "a100-pcie-server", "--rate", "4",
               "--requests", "300", "--json"])
    p, pol = d["policy"], d["step"]["policy"]
    assert pol["counts"] == [32, 0, 0, 0, 0, 0]
    assert p["max_seqs"] == pol["batch"] and p["kv_capacity_tokens"] == pol["batch"] * 2048
    # the next batch up would not keep every layer's cache on the 80 GB card
    assert (2 * pol["batch"] * 2048 * 524288 + 13.5e9) > 0.9 * 80e9
    r = d["result"]
    assert r["completed"] + r["rejected"] == r["submitted"] == 300
    assert r["ttft"]["n"] == r["completed"] and r["ttft"]["p50_s"] <= r["ttft"]["p99_s"]
    lo, hi = r["tpot"]["interval_s"]["p50"]
    assert lo <= r["tpot"]["p50_s"] <= hi
    assert r["e2e"]["interval_s"]["p99"][1] is None  # 300 samples cannot bound a p99 above
    assert 0 < r["goodput_rps"] <= r["requests_per_s"]


def test_serve_reports_when_nothing_fits() -> None:
    r = run_cli(["llm", "serve", "llama-2-13b", "--hw", "laptop-soc", "--rate", "1",
                 "--requests", "10", "--max-seqs", "8", "--context", "8192"])
    assert r.returncode == 3, r.stderr
    assert "fits no policy" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("args, problem", [
    (["--rate", "1", "--trace", "x.csv"], "exclude each other"),
    ([], "give --rate"),
    (["--rate", "1", "--step", "missing.json"], "missing.json"),
    (["--rate", "1", "--prompt", "weird:3"], "weird"),
])
def test_serve_refuses_bad_input(args: list[str], problem: str, tmp_path: Path) -> None:
    r = run_cli(["llm", "serve", "llama-2-7b", *args], cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert problem in r.stderr and "Traceback" not in r.stderr and r.stdout == ""


def test_a_step_file_without_a_step_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "s.json"
    bad.write_text(json.dumps({"step": {"coef_s": [1, 2], "rel_rms": 0, "samples": 1}}))
    r = run_cli(["llm", "serve", "x.onnx", "--step", str(bad), "--rate", "1"])
    assert r.returncode == 2 and "step.coef_s" in r.stderr


@pytest.fixture(scope="module")
def decoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    path = tmp_path_factory.mktemp("llm") / "small.onnx"
    r = run_cli(["llm", "export", str(path), "--size", "small"])
    assert r.returncode == 0, r.stderr
    return path


def test_plan_reads_the_shape_of_an_onnx_decoder(decoder: Path) -> None:
    d = _json(["llm", "plan", str(decoder), "--hw", "jetson-agx-orin", "--json"])
    assert d["kv_bytes_per_token"] == 2 * 2 * 2 * 16 * 4  # layers x K,V x kv heads x dim x fp32
    assert sum(d["cells"][0]["searched"]["counts"]) == 2  # both layers, wherever they run


def test_run_measures_predicts_and_feeds_serve(decoder: Path, tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    d = _json(["llm", "run", str(decoder), "--batch", "1,2", "--context", "8,16,32",
               "--new-tokens", "3", "--repeats", "2", "--out", str(out), "--json"])
    assert json.loads(out.read_text()) == d
    cells = d["cells"]
    assert [(c["batch"], c["context"]) for c in cells] == [(b, c) for b in (1, 2)
                                                          for c in (8, 16, 32)]
    assert sum(c["fitted_here"] for c in cells) == 4  # the corners
    for c in cells:
        for k in ("prefill_s", "decode_s", "graph_prefill_s", "graph_decode_s",
                  "fit_prefill_s", "fit_decode_s"):
            assert c[k] > 0, k
        assert dict(c["graph_decode_terms_s"])["compute"] > 0
    assert all(v >= 0 for v in d["step"]["coef_s"])
    s = _json(["llm", "serve", str(decoder), "--step", str(out), "--rate", "20",
               "--requests", "40", "--prompt", "uniform:8-32", "--output", "uniform:2-6",
               "--max-seqs", "4", "--context", "64", "--json"])
    assert s["step"]["measured"] == d["step"]
    assert s["result"]["completed"] == 40


def test_serve_real_beside_the_simulation(decoder: Path, tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    _json(["llm", "run", str(decoder), "--batch", "1,4", "--context", "8,32",
           "--new-tokens", "3", "--repeats", "2", "--out", str(out), "--json"])
    args = ["llm", "serve", str(decoder), "--step", str(out), "--rate", "40",
            "--requests", "12", "--prompt", "uniform:8-32", "--output", "uniform:2-6",
            "--max-seqs", "4", "--context", "64"]
    refused = run_cli([*args, "--real"])  # chunked prefill is not what the real engine runs
    assert refused.returncode == 2 and "--prefill-first" in refused.stderr
    d = _json([*args, "--prefill-first", "--real", "--json"])
    sim, real = d["result"], d["real"]["result"]
    assert sim["completed"] == real["completed"] == 12
    t = d["real"]["terms_s"]
    parts = t["predicted"] + t["padding"] + t["step_model"] + t["rebuild"] + t["bookkeeping"]
    assert parts == pytest.approx(t["measured"])
    assert t["padding"] >= 0 and t["rebuild"] >= 0


def test_a_plan_set_over_context_for_each_phase(decoder: Path, tmp_path: Path) -> None:
    """``plan --envelope`` of a decoder: ``--phase decode`` sizes the cache by the seq axis
    (one new token over seq - 1 cached), ``--phase prefill`` the prompt."""
    sets = {}
    for phase in ("decode", "prefill"):
        out = tmp_path / f"{phase}.json"
        r = run_cli(["plan", str(decoder), "--hw", "jetson-agx-orin", "--envelope",
                     "batch=1,4", "--envelope", "seq=16,64", "--phase", phase,
                     "--out", str(out)])
        assert r.returncode == 0, r.stderr
        sets[phase] = {(b["batch"], b["upper"]["seq"]): b for b in
                       json.loads(out.read_text())["buckets"]}
    dec = sets["decode"][(4, 64)]["shapes"]
    assert dec["input_ids"] == [4, 1] and dec["attention_mask"] == [4, 64]
    assert dec["past_key_values.1.value"] == [4, 2, 63, 16]
    pre = sets["prefill"][(4, 64)]["shapes"]
    assert pre["input_ids"] == [4, 64] and pre["past_key_values.0.key"] == [4, 2, 0, 16]
    # a prompt of 64 costs more than one token over 63 cached
    assert sets["prefill"][(4, 64)]["predicted_latency_s"] > \
        sets["decode"][(4, 64)]["predicted_latency_s"]
    for args, problem in [([], "give --phase prefill or decode"),
                          (["--phase", "sideways"], "unknown phase 'sideways'")]:
        r = run_cli(["plan", str(decoder), "--hw", "jetson-agx-orin", "--envelope", "seq=16",
                     *args, "--out", str(tmp_path / "x.json")])
        assert r.returncode == 2 and problem in r.stderr, r.stderr
