"""Structure-aware mutators of valid placewise inputs, and the loaders they feed (not a test
module). Shared by ``tests/test_fuzz_loaders.py`` (hypothesis, a few hundred cases) and
``benchmarks/fuzz_loaders.py`` (>= 10,000 seeded cases per loader).

Each ``LOADERS[name]`` is a ``Loader``: ``make(rnd)`` mutates a valid seed document with
``rnd`` (a ``random.Random``; hypothesis passes its own) and returns the bytes of a file;
``run(path)`` reads that file the way the CLI does and goes a step further (the graph is
summarized, the machine planned on, the plan explained, traced and checked, the calibration
costed), so a number accepted on load but fatal later is found too.

The mutations: drop or duplicate fields and list items, swap subtrees, change a value's
type, extreme numbers (0, -0.0, 5e-324, 1e308, 2**63, 10**400, NaN, +-inf), odd strings
(empty, 10,000 characters, NUL, a lone surrogate, path tricks), deep nesting (up to 5,000
levels, flow and block style), and text-level damage (truncation, stray bytes, invalid
UTF-8, YAML tags, anchors and alias bombs). ONNX models are mutated as ``ModelProto``:
names (invalid UTF-8 too), dims, dim expressions, element types, raw_data and typed data
lengths, attributes, node order and kinds, opsets, external-data references and metadata;
then, sometimes, as bytes.

``classify(exc)`` sorts an outcome: ``ok`` (no exception; for the machine loader also a
plan that is infeasible, exit 3 at the CLI), ``input_error`` (an ``InputError`` or another
deliberate ``PlacewiseError``: exit 2) or ``internal_error`` (anything else: exit 1, a bug).
"""

from __future__ import annotations

import copy
import json
import random
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from placewise.errors import Infeasible, PlacewiseError

__all__ = ["EXTREME_NUMBERS", "LOADERS", "Loader", "classify", "mutate_tree", "run_case"]

EXTREME_NUMBERS: tuple[Any, ...] = (
    0, -1, -0.0, 1, 0.5, 5e-324, 1e-300, 1e300, 1.7976931348623157e308, -1e308, 2**31,
    2**53 + 1, 2**63, 2**64, 10**30, 10**308, 10**400, -(10**400), float("nan"), float("inf"),
    float("-inf"), True, 3.0,
)
ODD_STRINGS: tuple[str, ...] = (
    "", " ", "a" * 10_000, "\x00", "\ud800", "名前", "../../etc/passwd", "/dev/zero", "NaN",
    "inf", "fp32", "cpu", "gpu0", "a.b", "x" * 300, "${HOME}", "1e999", "zoo:mlp",
)
DEPTHS = (2, 10, 63, 64, 65, 100, 1000, 5000)
_DEEP = "\x01DEEP\x01"  # sentinel replaced by deeply nested text after serializing


# ---- generic tree mutation (JSON / YAML documents) -----------------------------------------
def _nodes(tree: Any) -> list[tuple[Any, Any]]:
    """(container, key) of every value below the root, iteratively."""
    out: list[tuple[Any, Any]] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        items: Iterator[tuple[Any, Any]]
        if isinstance(node, dict):
            items = iter(list(node.items()))
        elif isinstance(node, list):
            items = iter(list(enumerate(node)))
        else:
            continue
        for k, v in items:
            out.append((node, k))
            if isinstance(v, dict | list) and len(out) < 20_000:
                stack.append(v)
    return out


def _other_value(rnd: random.Random) -> Any:
    return rnd.choice([None, True, False, "text", 0, -1, 1.5, [], {}, [1, 2], {"a": 1},
                       rnd.choice(EXTREME_NUMBERS), rnd.choice(ODD_STRINGS)])


def mutate_tree(tree: Any, rnd: random.Random, *, rounds: int | None = None) -> Any:
    """A mutated deep copy of the JSON-like ``tree`` (1 to 4 structure-aware edits)."""
    tree = copy.deepcopy(tree)
    for _ in range(rounds if rounds is not None else rnd.randint(1, 4)):
        nodes = _nodes(tree)
        if not nodes:
            return rnd.choice([tree, _other_value(rnd), [tree], {"x": tree}])
        parent, key = rnd.choice(nodes)
        value = parent[key]
        op = rnd.randrange(10)
        if op == 0:  # drop a field or item
            del parent[key]
        elif op == 1:  # duplicate a field (under another key) or an item
            if isinstance(parent, list):
                parent.insert(key, copy.deepcopy(value))
            else:
                other = rnd.choice(list(parent))
                parent[other] = copy.deepcopy(value)
        elif op == 2:  # change the type
            parent[key] = _other_value(rnd)
        elif op == 3:  # an extreme number, preferably where a number was
            numbers = [(p, k) for p, k in nodes if isinstance(p[k], int | float)]
            p, k = rnd.choice(numbers) if numbers else (parent, key)
            p[k] = rnd.choice(EXTREME_NUMBERS)
        elif op == 4:  # an odd string, preferably where a string was
            strings = [(p, k) for p, k in nodes if isinstance(p[k], str)]
            p, k = rnd.choice(strings) if strings else (parent, key)
            p[k] = rnd.choice(ODD_STRINGS)
        elif op == 5:  # rename a key
            if isinstance(parent, dict):
                parent[rnd.choice((*ODD_STRINGS, "name", "extra", "devices"))] = \
                    parent.pop(key)
        elif op == 6:  # deep nesting (rendered after serializing)
            parent[key] = _DEEP
        elif op == 7:  # swap two subtrees
            p2, k2 = rnd.choice(nodes)
            with suppress(KeyError, IndexError):
                parent[key], p2[k2] = copy.deepcopy(p2[k2]), copy.deepcopy(value)
        elif op == 8:  # empty or shorten a list / object
            if isinstance(value, list | dict) and value:
                parent[key] = type(value)() if rnd.random() < 0.5 else (
                    value[: len(value) // 2] if isinstance(value, list)
                    else dict(list(value.items())[: len(value) // 2]))
            else:
                parent[key] = [value] * rnd.choice([2, 100])
        else:  # wrap in a list or object
            parent[key] = rnd.choice([[value], {"value": value}])
    return tree


def _deep_text(rnd: random.Random, *, yaml_block: bool = False) -> str:
    depth = rnd.choice(DEPTHS)
    if yaml_block:
        return "\n" + "".join("  " * (i + 1) + "-\n" for i in range(min(depth, 300))) \
            + "  " * (min(depth, 300) + 1) + "1"
    if rnd.random() < 0.5:
        return "[" * depth + "1" + "]" * depth
    return '{"a": ' * depth + "1" + "}" * depth


def _damage(data: bytes, rnd: random.Random, extra: tuple[bytes, ...] = ()) -> bytes:
    """Text-level damage: truncate, insert stray bytes, delete or duplicate a slice."""
    if not data:
        return data
    op = rnd.randrange(5)
    i = rnd.randrange(len(data))
    if op == 0:
        return data[:i]
    if op == 1:
        junk = rnd.choice((b"\xff", b"\xc3", b"\x00", b"\xed\xa0\x80", b"NaN", b"]", b"{",
                           b'"', b"\t", *extra))
        return data[:i] + junk + data[i:]
    if op == 2:
        j = min(len(data), i + rnd.randint(1, 64))
        return data[:i] + data[j:]
    if op == 3:
        j = min(len(data), i + rnd.randint(1, 256))
        return data[:j] + data[i:j] * rnd.randint(1, 5) + data[j:]
    return bytes(b ^ (1 << rnd.randrange(8)) if rnd.random() < 0.01 else b for b in data)


def _json_bytes(tree: Any, rnd: random.Random) -> bytes:
    text = json.dumps(tree, allow_nan=True)
    while json.dumps(_DEEP) in text:
        text = text.replace(json.dumps(_DEEP), _deep_text(rnd), 1)
    data = text.encode("utf-8", "surrogatepass")
    if rnd.random() < 0.15:
        data = _damage(data, rnd)
    return data


_YAML_EXTRAS = (
    b"!!python/object/apply:os.system ['touch /tmp/placewise-fuzz-pwned']", b"!!binary AAAA",
    b"2023-13-45", b"!!set {a, b}", b".inf", b"-.inf", b".nan", b"&a ", b"*a", b"*missing",
    b"? [a, b]\n: 1\n", b"\n---\n", b"!!float abc", b"0x1p9999", b"1e999", b"<<: *a\n",
)


def _alias_bomb() -> str:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for i, name in enumerate("bcdefgh"):
        prev = "abcdefg"[i]
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 10) + "]")
    return "\n".join(lines) + "\n"


def _yaml_bytes(tree: Any, rnd: random.Random) -> bytes:
    import yaml

    text = yaml.safe_dump(tree, sort_keys=False, allow_unicode=True, width=100)
    while _DEEP in text or "\\x01DEEP\\x01" in text:
        quoted = next(q for q in ("\"\\x01DEEP\\x01\"", "\"\x01DEEP\x01\"", _DEEP)
                      if q in text)
        text = text.replace(quoted, _deep_text(rnd, yaml_block=rnd.random() < 0.3)
                            if quoted != _DEEP else "1", 1)
    if rnd.random() < 0.05:
        text = _alias_bomb() + text
    data = text.encode("utf-8", "surrogatepass")
    if rnd.random() < 0.2:
        data = _damage(data, rnd, _YAML_EXTRAS)
    return data


# ---- seeds -----------------------------------------------------------------------------------
def _small_machine() -> dict[str, Any]:
    return {
        "name": "fuzz", "description": "a small machine", "tags": {"cpu_model": "Fuzz CPU"},
        "devices": [
            {"name": "cpu", "kind": "cpu", "peak_flops_per_s": {"fp32": 1e12, "int8": 4e12},
             "peak_source": "test", "launch_overhead_s": 2e-6, "launch_source": "test",
             "compute_units": 8, "lanes": 1, "resources": ["dram-ctl"],
             "memory": [{"name": "dram", "capacity_bytes": 2**34,
                         "bandwidth_bytes_per_s": 1e11, "source": "test",
                         "shared_with": "dram-ctl"}]},
            {"name": "gpu0", "kind": "gpu",
             "peak_flops_per_s": {"fp32": 5e13, "fp16": 2e14, "bf16": 2e14},
             "peak_source": "test", "launch_overhead_s": 5e-6, "launch_source": "test",
             "compute_units": 100, "lanes": 2, "unsupported_kinds": ["lstm"],
             "memory": [{"name": "hbm", "capacity_bytes": 2**36,
                         "bandwidth_bytes_per_s": 2e12, "source": "test"}]},
        ],
        "shared_resources": [{"name": "dram-ctl", "kind": "memory_controller",
                              "bandwidth_bytes_per_s": 1e11, "source": "test"}],
        "links": [{"name": "pcie", "endpoints": ["cpu", "gpu0"], "bandwidth_bytes_per_s": 3e10,
                   "latency_s": 1e-5, "duplex": True, "source": "test"}],
    }


@lru_cache(maxsize=1)
def _preset_machine() -> dict[str, Any]:
    from importlib import resources

    import yaml

    text = (resources.files("placewise.hardware") / "presets" / "h100-sxm-server.yaml"
            ).read_text()
    return dict(yaml.safe_load(text))


@lru_cache(maxsize=1)
def _tiny_graph() -> Any:
    from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
    from placewise.units import DType

    ts = [Tensor("x", (4, 64), DType.FP32, role=Role.INPUT),
          Tensor("w", (64, 64), DType.FP32, role=Role.PARAM),
          Tensor("h", (4, 64), DType.FP32),
          Tensor("y", (4, 64), DType.FP32, role=Role.OUTPUT)]
    ops = [Op("mm", OpKind.MATMUL, ("x", "w"), ("h",)), Op("act", OpKind.RELU, ("h",), ("y",))]
    return Graph.build("tiny", ts, ops)


def _taskgraph_seed(rnd: random.Random) -> dict[str, Any]:
    from placewise.graph.taskgraph import generate

    if rnd.random() < 0.5:
        return generate(rnd.choice(("chain", "fork-join", "layered", "transformer")),
                        rnd.randint(2, 8), seed=rnd.randrange(100),
                        device_flops_per_s={"cpu": 1e12} if rnd.random() < 0.5 else None)
    return {"schema_version": 1, "name": "hand",
            "tasks": [{"name": "a", "flops": 2e9, "bytes": 1000000, "dtype": "fp16"},
                      {"name": "b", "flops": 1e9, "times_s": {"cpu": 0.001, "gpu0": 1e-4}},
                      {"name": "c", "scratch_bytes": 4096}],
            "edges": [{"src": "a", "dst": "b", "bytes": 4096},
                      {"src": "a", "dst": "c", "bytes": 16, "name": "ac"}],
            "inputs": [{"dst": "a", "bytes": 1024, "name": "in"}],
            "outputs": [{"src": "b", "bytes": 8}]}


@lru_cache(maxsize=1)
def _plan_seed() -> dict[str, Any]:
    from placewise.plan import plan_to_json
    from tests.plan_fixtures import toy_plan

    return dict(plan_to_json(toy_plan()[1], packed=False))  # mutations reach the values


def _cal_machine_dict() -> dict[str, Any]:
    from tests.cost.test_calibrated import _dev as dev  # the calibration tests' devices

    return {"name": "local", "tags": {"cpu_model": "Test CPU"},
            "devices": [dev("cpu0", [0], ["fp32"], "torch"),
                        dev("cpu1", [1], ["fp32", "int8"], "onnxruntime")],
            "links": [{"name": "shm", "endpoints": ["cpu0", "cpu1"],
                       "bandwidth_bytes_per_s": 5e9, "latency_s": 1e-5, "source": "test"}]}


@lru_cache(maxsize=1)
def _cal_setup() -> tuple[Any, Any, dict[str, Any]]:
    """(machine, graph, calibration JSON) of a synthetic calibration with fits."""
    import math

    from placewise.cost.calibrated import (
        Calibration,
        Measurement,
        device_record,
        fit_measurements,
        op_features,
        op_key,
    )
    from placewise.graph.ir import Graph, Op, OpKind, Provenance, Role, Tensor
    from placewise.hardware.spec import Machine
    from placewise.units import DType

    machine = Machine.model_validate(_cal_machine_dict())
    tensors, ops = [], []
    for i, m in enumerate((1, 4, 16)):
        tensors += [Tensor(f"x{i}", (m, 64), DType.FP32, role=Role.INPUT),
                    Tensor(f"w{i}", (64, 64), DType.FP32, role=Role.PARAM),
                    Tensor(f"y{i}", (m, 64), DType.FP32, role=Role.OUTPUT)]
        ops.append(Op(f"lin{i}", OpKind.LINEAR, (f"x{i}", f"w{i}"), (f"y{i}",),
                      provenance=Provenance(source=f"lin{i}", source_op="aten.linear.default")))
    tensors.append(Tensor("r", (1, 64), DType.FP32, role=Role.OUTPUT))
    ops.append(Op("relu", OpKind.RELU, ("y0",), ("r",),
                  provenance=Provenance(source="relu", source_op="aten.relu.default")))
    g = Graph.build("lin", tensors, ops)
    meas = []
    for dev in machine.devices:
        for op in g.ops[:-1]:
            key, sig = op_key(g, op, DType.FP32)
            f = op_features(g, op, DType.FP32, dev)
            t = 5e-6 + f["flops"] / 1e10 + f["bytes"] / 5e9 * math.exp(0.01 * len(meas))
            meas.append(Measurement(device=dev.name, key=key, kind="linear", dtype="fp32",
                                    signature=sig, median_s=t, p10_s=0.9 * t, p90_s=1.2 * t,
                                    n=20, family="torch", source_node=op.name, features=f))
    recs = [device_record(d) for d in machine.devices]
    cal = Calibration(machine="local", tags={"cpu_model": "Test CPU"}, devices=recs,
                      measurements=meas, fits=fit_measurements(meas))
    return machine, g, cal.to_json()


# ---- ONNX ------------------------------------------------------------------------------------
_MARK = "\u00ff_BADUTF8_"  # its UTF-8 bytes are replaced by invalid UTF-8 after serializing
_OP_TYPES = ("Relu", "Add", "MatMul", "Gemm", "Conv", "Reshape", "Transpose", "Softmax",
             "LayerNormalization", "Gather", "Concat", "Split", "Loop", "If", "Scan", "Frob",
             "Constant", "Cast", "ReduceMean", "Slice", "Expand", "ConstantOfShape", "TopK")


@lru_cache(maxsize=1)
def _onnx_seed() -> bytes:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "B")
    shape = numpy_helper.from_array(np.array([-1, 2, 4], dtype=np.int64), "shape")
    idx = helper.make_tensor("idx", TensorProto.INT64, [2], [0, 3])
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"),
        helper.make_node("Add", ["h", "B"], ["hb"], name="add"),
        helper.make_node("Relu", ["hb"], ["r"], name="relu"),
        helper.make_node("Constant", [], ["scale"], name="const",
                         value=helper.make_tensor("s", TensorProto.FLOAT, [], [0.5])),
        helper.make_node("Mul", ["r", "scale"], ["m"], name="mul"),
        helper.make_node("Reshape", ["m", "shape"], ["rs"], name="reshape"),
        helper.make_node("Transpose", ["rs"], ["t"], name="tr", perm=[0, 2, 1]),
        helper.make_node("Softmax", ["t"], ["sm"], name="softmax", axis=-1),
        helper.make_node("Gather", ["W", "idx"], ["g"], name="gather", axis=0),
        helper.make_node("Gemm", ["x", "W", "B"], ["gm"], name="gemm", transB=1, alpha=1.0),
    ]
    graph = helper.make_graph(
        nodes, "fuzz", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [helper.make_tensor_value_info("sm", TensorProto.FLOAT, ["S", 4, 2]),
         helper.make_tensor_value_info("g", TensorProto.FLOAT, [2, 8]),
         helper.make_tensor_value_info("gm", TensorProto.FLOAT, ["N", 8])],
        initializer=[w, b, shape, idx])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    meta = model.metadata_props.add()
    meta.key, meta.value = "pkg.torch.onnx.name_scopes", "['', 'mod']"
    nodes[0].metadata_props.add().CopyFrom(meta)
    model.graph.node[0].metadata_props.add().CopyFrom(meta)
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def _tensor(name: str, data_type: int, dims: list[int], **fields: Any) -> Any:
    """A TensorProto built field by field (onnx.helper refuses inconsistent ones)."""
    from onnx import TensorProto

    t = TensorProto()
    t.name, t.data_type = name, data_type
    t.dims.extend(dims)
    for key, value in fields.items():
        if key == "raw_data":
            t.raw_data = value
        else:
            getattr(t, key).extend(value)
    return t


def _mutate_model(model: Any, rnd: random.Random) -> None:
    for _ in range(rnd.randint(1, 4)):
        with suppress(ValueError, TypeError):  # protobuf refused the edit: try another
            _mutate_once(model, rnd)


def _mutate_once(model: Any, rnd: random.Random) -> None:
    from onnx import AttributeProto, TensorProto, helper

    g = model.graph
    op = rnd.randrange(14)
    if op == 0 and g.node:  # names
        node = rnd.choice(g.node)
        target = rnd.choice(("name", "input", "output", "op_type", "domain"))
        new = rnd.choice((_MARK + "n", "", "x", "W", "h", "a" * 5000, "名前"))
        if target in ("input", "output") and len(getattr(node, target)):
            getattr(node, target)[rnd.randrange(len(getattr(node, target)))] = new
        elif target in ("name", "op_type", "domain"):
            setattr(node, target, new if target != "op_type" or rnd.random() < 0.3
                    else rnd.choice(_OP_TYPES))
    elif op == 1:  # graph input/output/initializer names
        pool = [*g.input, *g.output, *g.initializer]
        if pool:
            rnd.choice(pool).name = rnd.choice((_MARK + "t", "", "x", "h", "sm", "W"))
    elif op == 2 and g.initializer:  # initializer dims
        t = rnd.choice(g.initializer)
        choice = rnd.randrange(4)
        if choice == 0 and len(t.dims):
            t.dims[rnd.randrange(len(t.dims))] = rnd.choice(
                (-1, 0, 1, 3, 2**31, 2**62, -(2**62)))
        elif choice == 1:
            t.dims.append(rnd.choice((1, 2, 0, 2**40)))
        elif choice == 2 and len(t.dims):
            del t.dims[-1]
        else:
            del t.dims[:]
    elif op == 3 and g.initializer:  # element types
        rnd.choice(g.initializer).data_type = rnd.randrange(0, 31)
    elif op == 4 and g.initializer:  # raw / typed data lengths
        t = rnd.choice(g.initializer)
        choice = rnd.randrange(5)
        if choice == 0 and t.raw_data:
            t.raw_data = t.raw_data[: rnd.randrange(len(t.raw_data))]
        elif choice == 1:
            t.raw_data = t.raw_data + b"\x00" * rnd.choice((1, 3, 4, 1000))
        elif choice == 2:
            t.float_data.extend([1.0, float("nan"), float("inf")])
        elif choice == 3:
            t.ClearField("raw_data")
        else:
            t.int64_data.extend([2**62, -1])
    elif op == 5:  # value-info dims and dim expressions
        vis = [*g.input, *g.output, *g.value_info]
        if vis:
            vi = rnd.choice(vis)
            tt = vi.type.tensor_type
            if tt.HasField("shape") and len(tt.shape.dim) and rnd.random() < 0.7:
                d = tt.shape.dim[rnd.randrange(len(tt.shape.dim))]
                if rnd.random() < 0.5:
                    d.dim_value = rnd.choice((-1, 0, 2**62, 7))
                else:
                    d.dim_param = rnd.choice(("N*", "N+" * 3000 + "1", "(" * 300 + "N" +
                                              ")" * 300, "N//0", "9" * 5000, _MARK,
                                              "N*N*N*N*N*N*N*N", "N-100"))
            else:
                tt.elem_type = rnd.randrange(0, 31)
    elif op == 6 and g.node:  # attributes
        node = rnd.choice(g.node)
        if node.attribute and rnd.random() < 0.6:
            a = rnd.choice(node.attribute)
            choice = rnd.randrange(5)
            if choice == 0:
                a.type = rnd.choice((AttributeProto.INT, AttributeProto.FLOAT,
                                     AttributeProto.STRING, AttributeProto.INTS,
                                     AttributeProto.TENSOR, AttributeProto.GRAPH, 0))
            elif choice == 1:
                a.i = rnd.choice((2**62, -(2**62), 10**6))
                a.type = AttributeProto.INT
            elif choice == 2:
                a.ints.extend([2**62, -5, 0])
            elif choice == 3:
                a.f = float(rnd.choice(("nan", "inf", "1e38")))
            else:
                a.name = rnd.choice(("", _MARK, "perm", "axis"))
        else:
            node.attribute.append(rnd.choice((
                helper.make_attribute("axis", rnd.choice((2**40, -7, 0))),
                helper.make_attribute("perm", [5, 5, 5]),
                helper.make_attribute("kernel_shape", [0, -1]),
                helper.make_attribute("body", helper.make_graph([], "empty", [], [])),
                helper.make_attribute("value", _tensor("v", TensorProto.FLOAT,
                                                       [2**20, 2**20])),
            )))
    elif op == 7 and g.node:  # structure
        choice = rnd.randrange(4)
        if choice == 0:
            del g.node[rnd.randrange(len(g.node))]
        elif choice == 1:
            g.node.append(copy.deepcopy(rnd.choice(g.node)))
        elif choice == 2:
            nodes = list(g.node)
            rnd.shuffle(nodes)
            del g.node[:]
            g.node.extend(nodes)
        else:
            g.node.add().CopyFrom(helper.make_node(rnd.choice(_OP_TYPES),
                                                   ["x", "nope"], ["extra"]))
    elif op == 8:  # graph inputs / outputs
        choice = rnd.randrange(3)
        if choice == 0 and g.output:
            del g.output[rnd.randrange(len(g.output))]
        elif choice == 1 and g.input:
            del g.input[rnd.randrange(len(g.input))]
        else:
            g.output.add().CopyFrom(helper.make_tensor_value_info(
                rnd.choice(("ghost", "h", "W")), rnd.randrange(0, 20), [2]))
    elif op == 9:  # opsets and versions
        choice = rnd.randrange(3)
        if choice == 0 and model.opset_import:
            model.opset_import[0].version = rnd.choice((0, 1, 12, 13, 18, 21, 10**6))
        elif choice == 1 and model.opset_import:
            model.opset_import[0].domain = rnd.choice(("", "ai.onnx", "com.x", _MARK))
        else:
            model.ir_version = rnd.choice((0, 1, 3, 10, 2**40))
    elif op == 10 and g.initializer:  # external data
        t = rnd.choice(g.initializer)
        t.data_location = TensorProto.EXTERNAL
        del t.external_data[:]
        for key, value in rnd.choice((
                (("location", "w.bin"),), (("location", "../../etc/passwd"),),
                (("location", "/etc/passwd"),), (("location", "a\x00b"),),
                (("location", "fuzz.onnx"), ("offset", "-5")),
                (("location", "fuzz.onnx"), ("offset", "x"), ("length", "9")),
                (("location", "fuzz.onnx"), ("length", str(2**62))),
                (("location", "fuzz.onnx"), ("offset", "0"), ("length", "256")), ())):
            e = t.external_data.add()
            e.key, e.value = key, value
    elif op == 11:  # metadata the importer parses
        target = model.graph.node[0] if g.node else model
        m = target.metadata_props.add()
        m.key = "pkg.torch.onnx.name_scopes"
        m.value = rnd.choice(("[" * 5000 + "]" * 5000, "not python", "['a', 'b']",
                              "[1, 2]", "(" * 200, "9" * 10000, "{'a': 1}", _MARK))
    elif op == 12 and g.node:  # a Constant node's value
        const = [n for n in g.node if n.op_type == "Constant"]
        if const:
            node = const[0]
            del node.attribute[:]
            node.attribute.append(rnd.choice((
                helper.make_attribute("value_ints", [1, 2, 2**62]),
                helper.make_attribute("value_float", 1.0),
                helper.make_attribute("value_string", "s"),
                helper.make_attribute("sparse_value", helper.make_sparse_tensor(
                    _tensor("v", TensorProto.FLOAT, [2], float_data=[1.0, 2.0]),
                    _tensor("i", TensorProto.INT64, [2], int64_data=[0, 9]), [3])),
                helper.make_attribute("value", _tensor("v", TensorProto.FLOAT, [3],
                                                       float_data=[1.0])),
            )))
    elif op == 13:  # sparse initializers
        sp = g.sparse_initializer.add()
        sp.values.CopyFrom(_tensor("sv", rnd.choice((1, 7, 0)), [2], int64_data=[1, 2]))
        sp.indices.CopyFrom(_tensor("si", TensorProto.INT64, [rnd.choice((2, 3))],
                                    int64_data=[0, 1, 2][: rnd.choice((2, 3))]))
        sp.dims.append(rnd.choice((4, -1, 2**40)))


def _onnx_bytes(rnd: random.Random) -> bytes:
    import onnx

    model = onnx.ModelProto()
    model.ParseFromString(_onnx_seed())
    _mutate_model(model, rnd)
    return _finish_onnx(bytes(model.SerializeToString()), rnd)


def _finish_onnx(data: bytes, rnd: random.Random) -> bytes:
    """Serialized model bytes with the invalid-UTF-8 marks in place, sometimes damaged."""
    data = data.replace(_MARK.encode("utf-8"), b"\xff\xfe_BADUTF8_")  # same length
    if rnd.random() < 0.1:
        data = _damage(data, rnd)
    return data


def _control_bytes(rnd: random.Random) -> bytes:
    from tests.fuzz_onnx_seeds import control_bytes

    return control_bytes(rnd, _mutate_once, _finish_onnx)


def _quant_bytes(rnd: random.Random) -> bytes:
    from tests.fuzz_onnx_seeds import quant_bytes

    return quant_bytes(rnd, _mutate_once, _finish_onnx)


# ---- loaders -------------------------------------------------------------------------------
def _run_onnx(path: Path) -> None:
    from placewise.graph.onnx_import import load_onnx
    from placewise.graph.summary import summarize

    graph = load_onnx(path, batch=2)
    graph.check_concrete(file=str(path))
    summarize(graph)


def _run_control(path: Path) -> None:
    from tests.fuzz_onnx_seeds import run_control

    run_control(path)


def _run_quant(path: Path) -> None:
    from tests.fuzz_onnx_seeds import run_quant

    run_quant(path)


def _run_machine(path: Path) -> None:
    from placewise.cost.roofline import RooflineModel
    from placewise.hardware.load import load_machine
    from placewise.plan import build_plan, dumps_plan
    from placewise.schedule.placement import Problem
    from placewise.search.api import plan_search

    machine = load_machine(path)
    problem = Problem(_tiny_graph(), None, machine, RooflineModel(machine))
    result = plan_search(problem, strategy="greedy", time_limit_s=5.0)
    dumps_plan(build_plan(problem, result, model_ref="tiny", strategy="greedy"))


def _run_taskgraph(path: Path) -> None:
    from placewise.graph.fuse import fuse
    from placewise.graph.summary import summarize
    from placewise.graph.taskgraph import load_taskgraph

    graph = load_taskgraph(path)
    graph.check_concrete(file=str(path))
    summarize(graph)
    fuse(graph)


def _run_plan(path: Path) -> None:
    from placewise.check import check_plan
    from placewise.explain import explain, render_explain
    from placewise.plan import load_plan
    from placewise.trace import to_chrome_trace

    plan = load_plan(path)
    render_explain(explain(plan))
    to_chrome_trace(plan)
    check_plan(plan, None, None, file=str(path))


def _run_calibration(path: Path) -> None:
    from placewise.cost.load import load_cost_model
    from placewise.units import DType

    machine, graph, _ = _cal_setup()
    model = load_cost_model(machine, path)
    for dev in machine.device_names:
        for op in graph.ops:
            model.op_cost(graph, op, dev, DType.FP32)


@dataclass(frozen=True)
class Loader:
    name: str
    suffix: str
    make: Callable[[random.Random], bytes]
    run: Callable[[Path], None]


def _make_machine(rnd: random.Random) -> bytes:
    seed = _small_machine() if rnd.random() < 0.8 else _preset_machine()
    return _yaml_bytes(mutate_tree(seed, rnd), rnd)


def _make_taskgraph(rnd: random.Random) -> bytes:
    return _json_bytes(mutate_tree(_taskgraph_seed(rnd), rnd), rnd)


def _make_plan(rnd: random.Random) -> bytes:
    return _json_bytes(mutate_tree(_plan_seed(), rnd), rnd)


def _make_calibration(rnd: random.Random) -> bytes:
    return _json_bytes(mutate_tree(_cal_setup()[2], rnd), rnd)


LOADERS: dict[str, Loader] = {
    "onnx": Loader("onnx", ".onnx", _onnx_bytes, _run_onnx),
    # control flow (If/Loop/Scan, --value) and quantized models: tests.fuzz_onnx_seeds
    "onnx_control": Loader("onnx_control", ".onnx", _control_bytes, _run_control),
    "onnx_quant": Loader("onnx_quant", ".onnx", _quant_bytes, _run_quant),
    "machine": Loader("machine", ".yaml", _make_machine, _run_machine),
    "taskgraph": Loader("taskgraph", ".json", _make_taskgraph, _run_taskgraph),
    "plan": Loader("plan", ".json", _make_plan, _run_plan),
    "calibration": Loader("calibration", ".json", _make_calibration, _run_calibration),
}


class CaseTimeout(Exception):
    """A case ran past its time limit (a hang counts as an internal error)."""


@contextmanager
def _time_limit(seconds: int) -> Iterator[None]:
    def on_alarm(signum: int, frame: Any) -> None:
        raise CaseTimeout(f"ran past {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def classify(exc: BaseException | None) -> str:
    """``ok``, ``input_error`` or ``internal_error`` (see the module docstring)."""
    if exc is None or isinstance(exc, Infeasible):
        return "ok"
    if isinstance(exc, PlacewiseError):
        return "input_error"
    return "internal_error"


def run_case(loader: Loader, data: bytes, folder: Path, *, time_limit_s: int = 60
             ) -> tuple[str, BaseException | None]:
    """Write ``data`` to a file in ``folder`` and run ``loader`` on it: (outcome, error)."""
    path = folder / f"fuzz{loader.suffix}"
    path.write_bytes(data)
    try:
        with _time_limit(time_limit_s):
            loader.run(path)
    except Exception as exc:  # sorted by classify
        return classify(exc), exc
    return "ok", None
