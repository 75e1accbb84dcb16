"""Fusion patterns on small hand-built graphs, partition checks, and random-DAG properties."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placewise.errors import GraphError, InputError
from placewise.graph.fuse import (
    PATTERNS,
    Partition,
    Region,
    check_partition,
    fuse,
    singletons,
)
from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
from placewise.units import DType
from tests.strategies import random_graphs

F32 = DType.FP32


Row = tuple[str, OpKind, tuple[str, ...], tuple[str, ...]]


def build(ops: Sequence[Row], inputs: Mapping[str, tuple[int, ...]],
          params: Mapping[str, tuple[int, ...]], shapes: Mapping[str, tuple[int, ...]],
          outputs: tuple[str, ...]) -> Graph:
    """Graph from (name, kind, ins, outs) rows; ``shapes`` for produced tensors."""
    ts = [Tensor(n, s, F32, role=Role.INPUT) for n, s in inputs.items()]
    ts += [Tensor(n, s, F32, role=Role.PARAM) for n, s in params.items()]
    ts += [Tensor(n, s, F32, role=Role.OUTPUT if n in outputs else Role.ACTIVATION)
           for n, s in shapes.items()]
    return Graph.build("g", ts, [Op(n, k, i, o) for n, k, i, o in ops])


def summary(p: Partition) -> list[tuple[tuple[str, ...], str]]:
    return [(r.ops, r.pattern) for r in p.regions]


def mlp(extra_consumer: bool = False, hidden_is_output: bool = False) -> Graph:
    ops: list[Row] = [("mm", OpKind.MATMUL, ("x", "w"), ("h",)),
                      ("bias", OpKind.ADD, ("h", "b"), ("hb",)),
                      ("act", OpKind.GELU, ("hb",), ("a",)),
                      ("mm2", OpKind.MATMUL, ("a", "w2"), ("y",))]
    shapes: dict[str, tuple[int, ...]] = {"h": (4, 8), "hb": (4, 8), "a": (4, 8), "y": (4, 2)}
    if extra_consumer:
        ops.append(("side", OpKind.RELU, ("h",), ("s",)))
        shapes["s"] = (4, 8)
    outs = ("y", "s", "h") if hidden_is_output else ("y", "s")
    return build(ops, {"x": (4, 16)}, {"w": (16, 8), "b": (8,), "w2": (8, 2)}, shapes, outs)


def test_contraction_bias_act() -> None:
    g = mlp()
    p = fuse(g)
    check_partition(g, p)
    assert summary(p) == [(("mm", "bias", "act"), "contraction+bias+act"),
                          (("mm2",), "single")]
    r = p.region_of("bias")
    assert r.name == "mm"
    assert r.inputs == ("x", "w", "b") and r.internal == ("h", "hb") and r.outputs == ("a",)
    assert p.region_graph_edges() == [("mm", "mm2", "a")]


def test_shared_intermediate_stops_fusion() -> None:
    g = mlp(extra_consumer=True)
    p = fuse(g)
    check_partition(g, p)
    assert p.region_of("mm").ops == ("mm",)
    assert p.region_of("bias").ops == ("bias", "act")  # an elementwise chain of its own
    assert p.region_of("bias").pattern == "elementwise-chain"


def test_graph_output_intermediate_stops_fusion() -> None:
    g = mlp(extra_consumer=True, hidden_is_output=True)
    p = fuse(g)
    check_partition(g, p)
    assert p.region_of("mm").ops == ("mm",)


def test_views_between_fused_ops_are_absorbed_and_epilogue_chain() -> None:
    g = build([("conv", OpKind.CONV, ("x", "w"), ("c",)),
               ("flat", OpKind.FLATTEN, ("c",), ("f",)),
               ("add", OpKind.ADD, ("f", "bias"), ("fb",)),
               ("act", OpKind.RELU, ("fb",), ("r",)),
               ("res", OpKind.ADD, ("r", "skip"), ("y",)),
               ("view", OpKind.RESHAPE, ("y",), ("out",))],
              {"x": (1, 2, 4, 4), "skip": (1, 32)}, {"w": (2, 2, 1, 1), "bias": (32,)},
              {"c": (1, 2, 4, 4), "f": (1, 32), "fb": (1, 32), "r": (1, 32), "y": (1, 32),
               "out": (32,)}, ("out",))
    p = fuse(g)
    check_partition(g, p)
    assert summary(p) == [(("conv", "flat", "add", "act", "res"),
                           "contraction+bias+elementwise-chain"),
                          (("view",), "single")]  # a trailing view is not absorbed
    assert p.regions[0].inputs == ("x", "w", "bias", "skip")


def test_conv_batch_norm_relu() -> None:
    g = build([("conv", OpKind.CONV, ("x", "w"), ("c",)),
               ("bn", OpKind.BATCH_NORM, ("c", "s", "b", "m", "v"), ("n",)),
               ("relu", OpKind.RELU, ("n",), ("y",)),
               ("pool", OpKind.MAX_POOL, ("y",), ("z",))],
              {"x": (1, 2, 4, 4)}, {"w": (3, 2, 1, 1), "s": (3,), "b": (3,), "m": (3,),
                                    "v": (3,)},
              {"c": (1, 3, 4, 4), "n": (1, 3, 4, 4), "y": (1, 3, 4, 4), "z": (1, 3, 2, 2)},
              ("z",))
    p = fuse(g)
    check_partition(g, p)
    assert summary(p) == [(("conv", "bn", "relu"), "contraction+bn+act"),
                          (("pool",), "single")]


def test_contraction_residual_without_param_is_not_bias() -> None:
    g = build([("mm", OpKind.MATMUL, ("x", "w"), ("h",)),
               ("res", OpKind.ADD, ("h", "x"), ("y",))],
              {"x": (4, 4)}, {"w": (4, 4)}, {"h": (4, 4), "y": (4, 4)}, ("y",))
    assert summary(fuse(g)) == [(("mm", "res"), "contraction+elementwise-chain")]


def test_elementwise_chain_and_single() -> None:
    g = build([("a", OpKind.RELU, ("x",), ("t1",)),
               ("b", OpKind.MUL, ("t1", "x"), ("t2",)),
               ("c", OpKind.TANH, ("t2",), ("t3",)),
               ("sm", OpKind.SOFTMAX, ("t3",), ("t4",)),
               ("d", OpKind.EXP, ("t4",), ("y",))],
              {"x": (3, 3)}, {}, {n: (3, 3) for n in ("t1", "t2", "t3", "t4", "y")}, ("y",))
    p = fuse(g)
    check_partition(g, p)
    assert summary(p) == [(("a", "b", "c"), "elementwise-chain"), (("sm",), "single"),
                          (("d",), "single")]


def attention_graph(*, mask: bool = True, dropout: bool = False, transpose_k: bool = True
                    ) -> Graph:
    ops: list[Row] = []
    kt = "k"
    if transpose_k:
        ops.append(("kT", OpKind.TRANSPOSE, ("k",), ("kt",)))
        kt = "kt"
    ops += [("qk", OpKind.MATMUL, ("q", kt), ("s",)),
            ("scale", OpKind.DIV, ("s", "sqrt_d"), ("ss",))]
    last = "ss"
    if mask:
        ops.append(("mask", OpKind.ADD, ("ss", "m"), ("sm",)))
        last = "sm"
    ops.append(("softmax", OpKind.SOFTMAX, (last,), ("p",)))
    probs = "p"
    if dropout:
        ops.append(("drop", OpKind.DROPOUT, ("p",), ("pd",)))
        probs = "pd"
    ops += [("pv", OpKind.MATMUL, (probs, "v"), ("o",)),
            ("proj", OpKind.MATMUL, ("o", "wo"), ("y",))]
    shapes = {"kt": (2, 8, 6), "s": (2, 5, 6), "ss": (2, 5, 6), "sm": (2, 5, 6),
              "p": (2, 5, 6), "pd": (2, 5, 6), "o": (2, 5, 8), "y": (2, 5, 8)}
    used = {t for _, _, ins, outs in ops for t in (*ins, *outs)}
    return build(ops, {"q": (2, 5, 8), "k": (2, 6, 8), "v": (2, 6, 8), "m": (5, 6)},
                 {"sqrt_d": (), "wo": (8, 8)}, {k: v for k, v in shapes.items() if k in used},
                 ("y",))


@pytest.mark.parametrize(("mask", "dropout"), [(True, False), (False, False), (True, True)])
def test_attention_core(mask: bool, dropout: bool) -> None:
    g = attention_graph(mask=mask, dropout=dropout)
    p = fuse(g)
    check_partition(g, p)
    core = p.region_of("softmax")
    expect = ["qk", "scale", *(["mask"] if mask else []), "softmax",
              *(["drop"] if dropout else []), "pv"]
    assert list(core.ops) == expect
    assert core.pattern == "attention-core"
    assert p.region_of("kT").ops == ("kT",)  # the k transpose stays outside
    assert p.region_of("proj").ops == ("proj",)
    assert set(core.inputs) == {"q", "kt", "sqrt_d", "v", *(["m"] if mask else [])}


def test_attention_pattern_can_be_disabled() -> None:
    g = attention_graph()
    p = fuse(g, patterns=("contraction", "elementwise"))
    check_partition(g, p)
    # without the attention pattern, q@k^T takes its scale and mask as an epilogue
    assert p.region_of("qk").ops == ("qk", "scale", "mask")
    assert p.region_of("softmax").ops == ("softmax",)


def test_single_attention_op_is_its_own_region() -> None:
    g = build([("attn", OpKind.ATTENTION, ("q", "k", "v"), ("o",)),
               ("act", OpKind.RELU, ("o",), ("y",))],
              {"q": (2, 4, 8), "k": (2, 4, 8), "v": (2, 4, 8)}, {},
              {"o": (2, 4, 8), "y": (2, 4, 8)}, ("y",))
    assert summary(fuse(g)) == [(("attn",), "attention"), (("act",), "single")]


def test_no_patterns_equals_singletons() -> None:
    g = attention_graph()
    assert fuse(g, patterns=()) == singletons(g)
    assert all(len(r.ops) == 1 for r in singletons(g).regions)


def test_unknown_pattern_is_an_input_error() -> None:
    with pytest.raises(InputError, match="unknown fusion pattern"):
        fuse(mlp(), patterns=("contraction", "magic"))


def test_deterministic() -> None:
    assert fuse(attention_graph()) == fuse(attention_graph())
    assert PATTERNS == ("contraction", "elementwise", "attention")


# ---- check_partition catches every kind of bad partition ------------------------------------


def diamond() -> Graph:
    # a -> b -> d, a -> c -> d (ops a, b, c, d; tensors ta, tb, tc, y)
    return build([("a", OpKind.RELU, ("x",), ("ta",)),
                  ("b", OpKind.EXP, ("ta",), ("tb",)),
                  ("c", OpKind.NEG, ("ta",), ("tc",)),
                  ("d", OpKind.ADD, ("tb", "tc"), ("y",))],
                 {"x": (2,)}, {}, {"ta": (2,), "tb": (2,), "tc": (2,), "y": (2,)}, ("y",))


def region(g: Graph, ops: tuple[str, ...]) -> Region:
    from placewise.graph.fuse import _region

    return _region(g, ops[0], [g.op(o) for o in ops], "test", set(g.outputs))


def test_check_partition_accepts_singletons_and_fuse() -> None:
    g = diamond()
    check_partition(g, singletons(g))
    check_partition(g, fuse(g))


def test_check_partition_rejects_bad_partitions() -> None:
    g = diamond()
    fp = g.fingerprint()
    with pytest.raises(GraphError, match="another graph"):
        check_partition(g, Partition("sha256:0", singletons(g).regions))
    with pytest.raises(GraphError, match="in no region"):
        check_partition(g, Partition(fp, singletons(g).regions[:-1]))
    twice = (*singletons(g).regions, replace(region(g, ("d",)), name="d2"))
    with pytest.raises(GraphError, match="also in region"):
        check_partition(g, Partition(fp, twice))
    with pytest.raises(GraphError, match="not in the graph"):
        check_partition(g, Partition(fp, (*singletons(g).regions,
                                          Region("z", ("zz",), "single", (), (), ()))))
    # region {a, d} with b, c outside: a -> b -> d leaves and re-enters -> cycle
    bad = (region(g, ("a", "d")), region(g, ("b",)), region(g, ("c",)))
    with pytest.raises(GraphError, match="cycle"):
        check_partition(g, Partition(fp, bad))
    # wrong order of regions
    rs = singletons(g).regions
    with pytest.raises(GraphError, match="listed before"):
        check_partition(g, Partition(fp, (rs[1], rs[0], rs[2], rs[3])))
    # a lie about internal tensors
    lying = replace(rs[0], internal=("ta",), outputs=())
    with pytest.raises(GraphError, match="internal tensor 'ta' is read outside"):
        check_partition(g, Partition(fp, (lying, *rs[1:])))
    with pytest.raises(GraphError, match="inputs are wrong"):
        check_partition(g, Partition(fp, (replace(rs[0], inputs=()), *rs[1:])))
    with pytest.raises(GraphError, match="topological"):
        unordered = replace(region(g, ("b", "c")), ops=("c", "b"))
        check_partition(g, Partition(fp, (rs[0], unordered, rs[3])))


def test_region_of_unknown_op() -> None:
    with pytest.raises(GraphError, match="no region"):
        singletons(diamond()).region_of("nope")


def test_region_cycle_would_arise_from_naive_merge() -> None:
    # G1 = {a, d}, G2 = {b, c} with a -> c and b -> d: no op-level cycle, a region cycle.
    g = build([("a", OpKind.RELU, ("x",), ("ta",)),
               ("b", OpKind.NEG, ("x",), ("tb",)),
               ("c", OpKind.ADD, ("ta", "tb"), ("tc",)),
               ("d", OpKind.ADD, ("ta", "tb"), ("td",))],
              {"x": (2,)}, {}, {"ta": (2,), "tb": (2,), "tc": (2,), "td": (2,)},
              ("tc", "td"))
    with pytest.raises(GraphError, match="cycle"):
        check_partition(g, Partition(g.fingerprint(),
                                     (region(g, ("a", "d")), region(g, ("b", "c")))))
    check_partition(g, fuse(g))


# ---- properties on random DAGs -----------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs(max_ops=14),
       st.sets(st.sampled_from(PATTERNS)).map(lambda s: tuple(p for p in PATTERNS if p in s)))
def test_fuse_gives_valid_partitions(g: Graph, patterns: tuple[str, ...]) -> None:
    p = fuse(g, patterns=patterns)
    check_partition(g, p)  # exactly once, acyclic, topological, internal never escapes
    assert sorted(o for r in p.regions for o in r.ops) == sorted(o.name for o in g.ops)
    index = {r.name: i for i, r in enumerate(p.regions)}
    for src, dst, _ in p.region_graph_edges():
        assert index[src] < index[dst]
    for r in p.regions:
        for t in r.internal:
            assert t not in g.outputs
            assert all(c.name in r.ops for c in g.consumers(t))
        if len(r.ops) > 1:
            assert r.pattern != "single"
    if not patterns:
        assert p == singletons(g)
    assert fuse(g, patterns=patterns) == p  # deterministic


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs(min_ops=1, max_ops=1, motifs=("attention",), allow_outputs_consumed=False))
def test_attention_motif_is_found(g: Graph) -> None:
    p = fuse(g)
    check_partition(g, p)
    (softmax,) = [o for o in g.ops if o.kind is OpKind.SOFTMAX]
    r = p.region_of(softmax.name)
    assert r.pattern == "attention-core"
    assert r.ops == tuple(o.name for o in g.ops)  # the motif is exactly the core
    assert len(r.outputs) == 1
