"""Decoder specs, the step graph, fitted layer costs and the offloading search."""

from __future__ import annotations

import itertools
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placewise.cost.load import load_cost_model
from placewise.errors import InputError
from placewise.graph.count import count_op
from placewise.graph.ir import OpKind
from placewise.hardware.load import load_machine
from placewise.llm.cost import DeviceStep, check_against_graph, pairs
from placewise.llm.graph import step_graph
from placewise.llm.offload import (
    CLASSES,
    USABLE_FRACTION,
    OffloadStep,
    Shape,
    llamacpp_policy,
    memories,
    search_policy,
    workspace_bytes,
)
from placewise.llm.plan import plan_llm
from placewise.llm.spec import DecoderSpec, from_hf_config, list_specs, load_spec
from tests.cli_runner import run_cli

# ---- spec --------------------------------------------------------------------------------


def test_shipped_configs_have_the_published_parameter_counts() -> None:
    # parameter counts as the model cards state them (7B: 6.74B, 13B: 13.0B, Mistral 7.24B,
    # Llama 3 8.03B)
    expect = {"llama-2-7b": 6.74e9, "llama-2-13b": 13.02e9, "mistral-7b": 7.24e9,
              "llama-3-8b": 8.03e9}
    for name, n in expect.items():
        assert load_spec(name).params() == pytest.approx(n, rel=0.005), name
    assert set(expect) <= set(list_specs())


def test_kv_cache_bytes_follow_kv_heads_and_dtype() -> None:
    s = load_spec("llama-3-8b")  # 32 layers, 8 KV heads of 128, bf16
    assert s.kv_bytes_per_token() == 32 * 2 * 8 * 128 * 2
    q4 = load_spec("llama-2-7b@q4")
    assert q4.weight_bits == 4.5
    assert q4.layer_weight_bytes() == math.ceil(q4.layer_params() * 4.5 / 8)
    assert q4.kv_bytes_per_token() == load_spec("llama-2-7b").kv_bytes_per_token()


@pytest.mark.parametrize("cfg, problem", [
    ({"num_hidden_layers": 2}, "missing hidden_size"),
    ({"num_hidden_layers": 2, "hidden_size": "x", "num_attention_heads": 2, "vocab_size": 9,
      "intermediate_size": 8}, "expected an integer"),
    ({"num_hidden_layers": 2, "hidden_size": 8, "num_attention_heads": 3,
      "num_key_value_heads": 2, "vocab_size": 9, "intermediate_size": 8}, "not a multiple"),
])
def test_bad_configs_name_the_problem(cfg: dict[str, object], problem: str) -> None:
    with pytest.raises(InputError, match=problem):
        from_hf_config(cfg, file="c.json")


def test_a_config_file_that_is_not_json_names_its_line(tmp_path: object) -> None:
    from pathlib import Path

    p = Path(str(tmp_path)) / "config.json"
    p.write_text('{"hidden_size": 8,\n oops}')
    with pytest.raises(InputError, match=r"config.json: line 2"):
        load_spec(str(p))
    with pytest.raises(InputError, match="unknown weight format"):
        load_spec("llama-2-7b@q3")


# ---- graph and layer costs -----------------------------------------------------------------


def test_step_graph_flops_are_the_hand_formula() -> None:
    s = load_spec("mistral-7b")
    t, past = 16, 300
    g = step_graph(s, batch=2, new=t // 2, past=past, layers=1)
    lin = sum(count_op(g, o).flops for o in g.ops if o.kind is OpKind.LINEAR)
    assert lin == 2 * t * (s.layer_params() - 2 * s.hidden)  # every weight once per token
    attn = next(o for o in g.ops if o.kind is OpKind.ATTENTION)
    k = g.tensor(attn.inputs[1])
    assert k.shape == (2, s.kv_heads, past + t // 2, s.head_dim)  # the cache read whole
    assert count_op(g, attn).flops >= 2 * 2 * s.heads * (t // 2) * (past + t // 2) * 128


@pytest.mark.parametrize("hw, dev", [("h100-sxm-server", "gpu0"), ("a100-pcie-server", "cpu"),
                                     ("jetson-agx-orin", "gpu")])
def test_fitted_step_matches_the_whole_graph(hw: str, dev: str) -> None:
    m = load_machine(hw)
    cm = load_cost_model(m, None)
    step = DeviceStep.fit(load_spec("llama-2-7b"), cm, dev)
    for b, n, p in [(1, 1, 100), (8, 1, 1023), (64, 1, 4095), (4, 1, 30000), (1, 512, 0),
                    (1, 3000, 0), (2, 128, 0)]:
        fitted, direct = check_against_graph(step, cm, batch=b, new=n, past=p)
        assert fitted == pytest.approx(direct, rel=0.03), (b, n, p)


# ---- offloading ----------------------------------------------------------------------------

_SMALL = DecoderSpec("small", layers=4, hidden=1024, heads=8, kv_heads=8, head_dim=128,
                     ffn=4096, vocab=32000)


def _capacity_scaled(hw: str, factor: float) -> object:
    m = load_machine(hw)
    data = json.loads(m.model_dump_json())
    for d in data["devices"]:
        for t in d["memory"]:
            t["capacity_bytes"] = max(1, int(t["capacity_bytes"] * factor))
    from placewise.hardware.spec import parse_machine

    return parse_machine(data, file="<scaled>")


def _brute(spec: DecoderSpec, hw_machine: object, shape: Shape) -> tuple[float, tuple[int, ...]]:
    """Every composition priced one by one with ``OffloadStep`` and its bytes summed by hand:
    the search's independent check."""
    m = hw_machine
    cm = load_cost_model(m, None)  # type: ignore[arg-type]
    mem = memories(m)  # type: ignore[arg-type]
    accel, host = DeviceStep.fit(spec, cm, mem.accel), DeviceStep.fit(spec, cm, mem.host)
    wl, kvl = spec.layer_weight_bytes(), spec.kv_bytes_per_token_layer() * shape.batch * \
        shape.context
    best: tuple[float, tuple[int, ...]] = (math.inf, ())
    for split in itertools.product(range(spec.layers + 1), repeat=6):
        if sum(split) != spec.layers:
            continue
        res, w, kv, both, h, ha = split
        n_a = res + w + kv + both + ha
        used: dict[str, int] = {}
        fast = (res + kv + ha) * wl + (res + w) * kvl + (2 * wl if w + both else 0) + \
            (2 * kvl if kv + both else 0)
        if n_a:
            fast += spec.outer_weight_bytes() + workspace_bytes(spec, shape.batch, shape.batch)
        used[mem.fast.name] = fast
        assert mem.slow is not None and mem.host_pool is not None
        used[mem.slow.name] = used.get(mem.slow.name, 0) + (w + both) * wl + (kv + both) * kvl
        hb = h * (wl + kvl) + ha * kvl + (0 if n_a else spec.outer_weight_bytes()) + \
            (workspace_bytes(spec, shape.batch, shape.batch) if h + ha else 0)
        used[mem.host_pool.name] = used.get(mem.host_pool.name, 0) + hb
        caps = {p.name: p.capacity_bytes * USABLE_FRACTION
                for p in (mem.fast, mem.slow, mem.host_pool)}
        if any(v > caps[k] for k, v in used.items()):
            continue
        t = OffloadStep(spec, mem, accel, host, split).iteration_s(*shape.decode())  # type: ignore[arg-type]
        if t < best[0] - 1e-15:
            best = (t, split)
    return best


@settings(max_examples=12, deadline=None)
@given(factor=st.sampled_from([2e-4, 5e-4, 1e-3, 3e-3, 1.0]),
       batch=st.sampled_from([1, 4, 16]), context=st.sampled_from([512, 8192]),
       hw=st.sampled_from(["a100-pcie-server", "grace-hopper-gh200"]))
def test_search_finds_the_brute_force_optimum(factor: float, batch: int, context: int,
                                              hw: str) -> None:
    m = _capacity_scaled(hw, factor)
    shape = Shape(batch, context)
    t_brute, split = _brute(_SMALL, m, shape)
    cm = load_cost_model(m, None)  # type: ignore[arg-type]
    mem = memories(m)  # type: ignore[arg-type]
    found = search_policy(_SMALL, cm, mem, shape)
    if not split:
        assert found.best is None
        return
    assert found.best is not None
    accel, host = DeviceStep.fit(_SMALL, cm, mem.accel), DeviceStep.fit(_SMALL, cm, mem.host)
    t = OffloadStep(_SMALL, mem, accel, host, found.best.counts).iteration_s(*shape.decode())
    assert t == pytest.approx(t_brute, rel=1e-9)
    lc = llamacpp_policy(_SMALL, mem, shape)  # inside the searched space: never faster
    if lc is not None:
        t_lc = OffloadStep(_SMALL, mem, accel, host, lc.counts).iteration_s(*shape.decode())
        assert t <= t_lc * (1 + 1e-9)


def test_more_memory_is_never_slower() -> None:
    spec, shape = load_spec("llama-2-13b"), Shape(8, 8192)
    times = []
    for factor in (0.15, 0.3, 0.6, 1.0):
        m = _capacity_scaled("a100-pcie-server", factor)
        p = plan_llm(spec, m, load_cost_model(m, None), batches=(8,), contexts=(8192,))  # type: ignore[arg-type]
        cell = p.cells[0]
        times.append(cell.searched.decode_s if cell.searched else math.inf)
    assert times == sorted(times, reverse=True)
    assert math.isfinite(times[-1])
    del shape


def test_unified_memory_offloads_nothing_and_discrete_gpus_do() -> None:
    orin = memories(load_machine("jetson-agx-orin"))
    assert orin.slow is None and orin.host_pool is not None
    assert orin.host_pool.name == orin.fast.name  # one LPDDR5 for CPU and GPU
    gh = memories(load_machine("grace-hopper-gh200"))
    assert gh.slow is not None and gh.slow.bandwidth_bytes_per_s == 450e9  # NVLink-C2C
    a100 = memories(load_machine("a100-pcie-server"))
    assert a100.slow is not None and a100.slow.bandwidth_bytes_per_s == 32e9  # PCIe 4 x16
    s = search_policy(load_spec("mistral-7b"), load_cost_model(load_machine("jetson-agx-orin"),
                                                                None), orin, Shape(1, 4096))
    assert s.best is not None and s.best.counts[1:4] == (0, 0, 0)  # nothing slower to stream


def test_terms_add_up_and_streaming_shows_only_beyond_compute() -> None:
    m = load_machine("a100-pcie-server")
    cm, mem = load_cost_model(m, None), memories(m)
    spec = load_spec("llama-2-7b")
    accel, host = DeviceStep.fit(spec, cm, mem.accel), DeviceStep.fit(spec, cm, mem.host)
    shape = Shape(1, 1024)
    one = OffloadStep(spec, mem, accel, host, (31, 1, 0, 0, 0, 0)).terms(*shape.decode())
    res = OffloadStep(spec, mem, accel, host, (32, 0, 0, 0, 0, 0)).terms(*shape.decode())
    io = spec.layer_weight_bytes() / 32e9  # one layer's weights over PCIe
    c = accel.layer.time_s(*shape.decode())
    assert one["stream"] == pytest.approx(io - c)
    assert one["compute"] == pytest.approx(res["compute"])
    assert set(one) == {"compute", "stream", "host_compute", "handoff", "launch", "head"}
    assert CLASSES[0] == "resident"
    assert pairs(1, 1023) == 1024


# ---- command line --------------------------------------------------------------------------


def test_llm_plan_json_reports_policies_and_baselines() -> None:
    r = run_cli(["llm", "plan", "llama-2-13b", "--hw", "a100-pcie-server", "--batch", "1,32",
                 "--context", "4096", "--json"])
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)
    assert [c["batch"] for c in p["cells"]] == [1, 32]
    one, many = p["cells"]
    assert one["searched"]["counts"] == [40, 0, 0, 0, 0, 0] == one["resident"]["counts"]
    assert many["resident"] is None  # 32 x 4096 tokens of cache do not fit 80 GB
    assert many["searched"]["tokens_per_s"] >= many["llamacpp"]["tokens_per_s"]
    assert sum(many["searched"]["counts"]) == 40


@pytest.mark.parametrize("args, problem", [
    (["llm", "plan", "no-such-model"], "not a shipped decoder config"),
    (["llm", "plan", "llama-2-7b", "--batch", "0"], "--batch"),
    (["llm", "plan", "llama-2-7b", "--accel", "tpu"], "--accel tpu"),
])
def test_llm_plan_refuses_bad_input(args: list[str], problem: str) -> None:
    r = run_cli(args)
    assert r.returncode == 2
    assert problem in r.stderr and "Traceback" not in r.stderr
    assert r.stdout == ""


def test_scalar_and_array_step_formulas_agree() -> None:
    """``llm.cost.Ops``: one formula evaluated on numbers (the simulator's scalar calls) and
    on arrays (its fast path, the search) gives the same seconds."""
    import numpy as np

    m = load_machine("a100-pcie-server")
    cm, mem = load_cost_model(m, None), memories(m)
    spec = load_spec("llama-2-13b")
    accel, host = DeviceStep.fit(spec, cm, mem.accel), DeviceStep.fit(spec, cm, mem.host)
    rng = np.random.default_rng(3)
    tokens = rng.integers(1, 40000, 300)
    seqs = np.minimum(tokens, rng.integers(0, 64, 300))
    ctx = tokens * rng.integers(1, 3000, 300)
    pair = ctx * rng.uniform(0.5, 2.0, 300)
    for counts in [(40, 0, 0, 0, 0, 0), (10, 5, 5, 5, 10, 5), (0, 0, 0, 0, 40, 0),
                   (0, 40, 0, 0, 0, 0), (0, 0, 0, 0, 0, 40)]:
        step = OffloadStep(spec, mem, accel, host, counts)
        many = step.iteration_s_many(tokens, ctx, pair, seqs)
        one = [step.iteration_s(int(t), int(c), float(p), int(s))
               for t, c, p, s in zip(tokens, ctx, pair, seqs, strict=True)]
        assert many == pytest.approx(one, rel=1e-12)
    assert accel.layer.time_s(tokens, ctx, pair, seqs) == pytest.approx(
        [accel.layer.time_s(int(t), int(c), float(p), int(s))
         for t, c, p, s in zip(tokens, ctx, pair, seqs, strict=True)], rel=1e-12)


def test_host_attention_moves_the_step_tensors_not_the_cache() -> None:
    """FlexGen's class: the accelerator keeps the weights, the host keeps the cache and
    computes the attention; only queries, new keys and values and the output cross."""
    m = load_machine("a100-pcie-server")
    cm, mem = load_cost_model(m, None), memories(m)
    spec = load_spec("llama-2-7b")
    accel, host = DeviceStep.fit(spec, cm, mem.accel), DeviceStep.fit(spec, cm, mem.host)
    shape = Shape(8, 32768)
    args = shape.decode()
    t = OffloadStep(spec, mem, accel, host, (0, 0, 0, 0, 0, 32)).terms(*args)
    assert t["compute"] == pytest.approx(32 * accel.layer.linear_time_s(8))
    assert t["host_compute"] == pytest.approx(32 * host.layer.attention_time_s(*args[1:]))
    crossing = spec.dtype.nbytes(8 * (2 * 32 + 2 * 32) * 128) / 32e9 + 2 * 5e-6
    assert t["handoff"] == pytest.approx(32 * crossing)
    assert t["stream"] == 0.0
    pools = dict(_policy_bytes(spec, mem, shape, (0, 0, 0, 0, 0, 32)))
    kv = spec.kv_bytes_per_token_layer() * 8 * 32768
    assert pools[mem.host_pool.name] >= 32 * kv  # the cache in host memory
    assert pools[mem.fast.name] < 32 * spec.layer_weight_bytes() + 2 * kv


def _policy_bytes(spec: DecoderSpec, mem: object, shape: Shape,
                  counts: tuple[int, ...]) -> tuple[tuple[str, int], ...]:
    import numpy as np

    from placewise.llm.offload import _policy

    return _policy(spec, mem, shape, np.asarray(counts), "x").bytes_by_pool  # type: ignore[arg-type]


def test_a_deep_model_searches_without_host_attention_and_says_so() -> None:
    deep = DecoderSpec("deep", layers=60, hidden=256, heads=4, kv_heads=4, head_dim=64,
                       ffn=1024, vocab=1000)
    m = load_machine("a100-pcie-server")
    found = search_policy(deep, load_cost_model(m, None), memories(m), Shape(1, 512))
    assert "host_attention left out" in found.note
    assert found.best is not None and found.best.count("host_attention") == 0
    assert found.tried == math.comb(60 + 4, 4)
