"""A device's efficiency block (``placewise.hardware.efficiency``): the schema checks it, the
roofline costs by it (hand-computed here), and every preset number in it has a source."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from placewise.cost.model import Term
from placewise.cost.roofline import RooflineModel, kernel_time_s
from placewise.errors import SpecError
from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
from placewise.hardware.load import load_machine
from placewise.hardware.spec import Machine, list_presets, parse_machine
from placewise.schedule.testing import toy_machine
from placewise.units import DType

SRC = "a published measurement, for tests"


def with_efficiency(block: dict[str, Any] | None) -> Machine:
    """The toy machine (GPU: 10 GFLOP/s fp32, 20 fp16, 10 GB/s) with ``block`` on its GPU."""
    data = toy_machine().model_dump(mode="json")
    data["devices"][1]["efficiency"] = block
    return parse_machine(data, file="toy.yaml")


def matmul(m: int, k: int, n: int, dtype: DType = DType.FP16) -> Graph:
    return Graph.build("mm", [Tensor("x", (m, k), dtype, role=Role.INPUT),
                              Tensor("w", (k, n), dtype, role=Role.PARAM),
                              Tensor("y", (m, n), dtype, role=Role.OUTPUT)],
                       [Op("mm", OpKind.MATMUL, ("x", "w"), ("y",))])


CURVE = {"contraction": [{"dtypes": ["fp16"], "peak_fraction": 0.5,
                          "half_work_flops": 2 * 256**3, "source": SRC}],
         "kernel_s": 3e-6, "kernel_source": SRC, "memory_fraction": 0.5,
         "memory_source": SRC}


def test_a_gemm_costs_what_the_curve_says() -> None:
    """256^3 fp16 matmul: W = 2*256^3 flops = half_work, so efficiency = 0.5 * 1/2 = 0.25;
    compute = W / (20e9 * 0.25); no separate launch term (the curve holds the floor)."""
    m = with_efficiency(CURVE)
    g = matmul(256, 256, 256)
    c = RooflineModel(m).op_cost(g, g.op("mm"), "gpu", DType.FP16)
    work = 2 * 256**3
    a = dict(c.assumptions)
    assert a["efficiency"] == pytest.approx(0.25)
    assert c.term(Term.COMPUTE) == pytest.approx(work / (20e9 * 0.25))
    assert c.term(Term.LAUNCH) == 0.0
    # bytes: 3 x 256^2 fp16 = 393,216 over 10 GB/s at the block's 0.5 fraction: 78.6 us,
    # less than the 419 us of compute, so fully hidden
    assert a["memory_fraction"] == pytest.approx(0.5)
    assert c.term(Term.MEMORY) == 0.0
    assert "fitted curve" in str(a["efficiency_rule"])


def test_a_dtype_without_a_curve_keeps_the_built_in_rule() -> None:
    g = matmul(256, 256, 256, DType.FP32)
    fitted = RooflineModel(with_efficiency(CURVE)).op_cost(g, g.op("mm"), "gpu", DType.FP32)
    plain = RooflineModel(toy_machine()).op_cost(g, g.op("mm"), "gpu", DType.FP32)
    assert dict(fitted.assumptions)["efficiency"] == dict(plain.assumptions)["efficiency"]
    assert fitted.term(Term.COMPUTE) == plain.term(Term.COMPUTE)
    # but its kernel pays the block's kernel time, not launch_overhead_s (1 us)
    assert fitted.term(Term.LAUNCH) == pytest.approx(3e-6)
    assert plain.term(Term.LAUNCH) == pytest.approx(1e-6)


def test_an_elementwise_kernel_pays_kernel_s_and_the_memory_fraction() -> None:
    t = [Tensor("x", (1000, 1000), DType.FP16, role=Role.INPUT),
         Tensor("y", (1000, 1000), DType.FP16, role=Role.OUTPUT)]
    g = Graph.build("relu", t, [Op("r", OpKind.RELU, ("x",), ("y",))])
    c = RooflineModel(with_efficiency(CURVE)).op_cost(g, g.op("r"), "gpu", DType.FP16)
    assert c.term(Term.LAUNCH) == pytest.approx(3e-6)
    # 4 MB read + written at 10 GB/s x 0.5 (1e6 elements fill the toy GPU's one unit); the
    # term is what the 1e6 flops at half of 20 GFLOP/s (100 us) do not hide
    assert dict(c.assumptions)["memory_s"] == pytest.approx(4e6 / 5e9, rel=0.01)
    assert c.term(Term.MEMORY) == pytest.approx(4e6 / 5e9 - 1e6 / 1e10, rel=0.01)


def test_a_fused_region_led_by_a_curve_pays_no_extra_launch() -> None:
    t = [Tensor("x", (256, 256), DType.FP16, role=Role.INPUT),
         Tensor("w", (256, 256), DType.FP16, role=Role.PARAM),
         Tensor("h", (256, 256), DType.FP16), Tensor("y", (256, 256), DType.FP16,
                                                     role=Role.OUTPUT)]
    g = Graph.build("mmr", t, [Op("mm", OpKind.MATMUL, ("x", "w"), ("h",)),
                               Op("r", OpKind.RELU, ("h",), ("y",))])
    model = RooflineModel(with_efficiency(CURVE))
    region = model.region_cost(g, list(g.ops), "gpu", DType.FP16)
    assert region.term(Term.LAUNCH) == 0.0
    assert region.term(Term.COMPUTE) >= 2 * 256**3 / (20e9 * 0.25)


def test_without_the_block_nothing_changes() -> None:
    assert kernel_time_s(toy_machine().device("gpu")) == (1e-6, "toy numbers for tests")
    fitted = load_machine("h100-sxm-server")
    assert fitted.device("gpu0").efficiency is not None
    assert fitted.without_efficiency().device("gpu0").efficiency is None
    assert fitted.without_efficiency().fingerprint() != fitted.fingerprint()


@pytest.mark.parametrize("block, problem", [
    ({"kernel_s": 1e-6}, "kernel_s and its source go together"),
    ({"memory_fraction": 1.5, "memory_source": SRC}, "less than or equal to 1"),
    ({"contraction": [{"dtypes": ["fp16"], "peak_fraction": 0.8, "half_work_flops": -1,
                       "source": SRC}]}, "greater than or equal to 0"),
    ({"contraction": [{"dtypes": ["fp16"], "peak_fraction": 0.8, "half_work_flops": 1,
                       "source": SRC, "kinds": ["relu"]}]}, "not a contraction kind"),
    ({"contraction": [{"dtypes": ["fp16"], "peak_fraction": 0.8, "half_work_flops": 1,
                       "source": SRC}] * 2}, "repeats"),
    ({"contraction": [{"dtypes": ["fp16"], "peak_fraction": 0.8, "half_work_flops": 1}]},
     "Field required"),
])
def test_bad_blocks_are_refused_naming_the_place(block: dict[str, Any], problem: str) -> None:
    with pytest.raises(SpecError) as err:
        with_efficiency(block)
    assert problem in str(err.value)
    assert "devices[1](gpu).efficiency" in str(err.value)


def test_a_bad_block_exits_2_with_one_line(tmp_path: Path) -> None:
    data = toy_machine().model_dump(mode="json")
    data["devices"][1]["efficiency"] = {"memory_fraction": 0, "memory_source": SRC}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    r = subprocess.run([sys.executable, "-m", "placewise.cli", "hw", "show", str(path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr
    assert "bad.yaml" in lines[0] and "efficiency.memory_fraction" in lines[0]


@pytest.mark.parametrize("name", list_presets())
def test_every_preset_efficiency_number_has_a_source(name: str) -> None:
    for d in load_machine(name).devices:
        e = d.efficiency
        if e is None:
            continue
        for c in e.contraction:
            assert c.source.strip() and 0 < c.peak_fraction <= 1 and c.half_work_flops >= 0
        assert (e.kernel_s is None) == (e.kernel_source is None)
        assert (e.memory_fraction is None) == (e.memory_source is None)
        for text in [c.source for c in e.contraction] + [e.kernel_source or "x",
                                                         e.memory_source or "x"]:
            assert text.strip()


def test_the_accelerator_presets_carry_fitted_blocks() -> None:
    """The GPUs of the datacenter and embedded presets are fitted (the laptop SoC and
    every CPU keep the built-in rules, which their specs say by having no block)."""
    for name, dev in [("h100-sxm-server", "gpu0"), ("h100-sxm-server", "gpu1"),
                      ("a100-pcie-server", "gpu"), ("grace-hopper-gh200", "gpu"),
                      ("jetson-agx-orin", "gpu")]:
        e = load_machine(name).device(dev).efficiency
        assert e is not None and e.curve_for(OpKind.CONV, DType.INT8) is not None
        assert e.kernel_s is not None and e.kernel_s > 0


def test_hw_show_lists_the_fitted_blocks_and_json_carries_their_sources() -> None:
    def show(*args: str) -> str:
        r = subprocess.run([sys.executable, "-m", "placewise.cli", "hw", "show",
                            "a100-pcie-server", *args], capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr
        return r.stdout

    text = show()
    assert "efficiency" in text and "built-in assumptions" in text  # the CPU keeps them
    data = yaml.safe_load(show("--json"))
    gpu = next(d for d in data["devices"] if d["name"] == "gpu")
    assert gpu["efficiency"]["kernel_source"].strip()
    assert all(c["source"].strip() for c in gpu["efficiency"]["contraction"])
