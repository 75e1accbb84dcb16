"""Machine specs: every preset loads and validates; bad specs fail naming file, place, problem."""

from __future__ import annotations

import copy
import json
import math
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from placewise.errors import SpecError
from placewise.graph.ir import OpKind
from placewise.hardware.load import load_machine
from placewise.hardware.spec import (
    DeviceKind,
    Machine,
    list_presets,
    machine_json_schema,
    machine_json_schema_text,
    parse_machine,
)
from placewise.units import DType

PRESETS = list_presets()
SCHEMA_FILE = Path(str(resources.files("placewise") / "schemas" / "machine.schema.json"))


def raw_preset(name: str) -> dict[str, Any]:
    text = (resources.files("placewise.hardware") / "presets" / f"{name}.yaml").read_text()
    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    return data


def numeric_fields(node: Any, path: str = "") -> list[tuple[str, Any]]:
    """Every (path, value) whose key carries a unit suffix or is a peak entry."""
    out: list[tuple[str, Any]] = []
    if isinstance(node, dict):
        for k, v in node.items():
            p = f"{path}.{k}" if path else str(k)
            unit_key = str(k).endswith(("_bytes", "_per_s", "_s")) and not isinstance(v, dict)
            if unit_key or path.endswith("peak_flops_per_s"):
                out.append((p, v))
            out.extend(numeric_fields(v, p))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.extend(numeric_fields(v, f"{path}[{i}]"))
    return out


# ----------------------------------------------------------------------------- presets


def test_the_five_presets_are_there() -> None:
    assert {"h100-sxm-server", "grace-hopper-gh200", "a100-pcie-server", "jetson-agx-orin",
            "laptop-soc"} <= set(PRESETS)


@pytest.mark.parametrize("name", PRESETS)
def test_preset_loads_and_validates(name: str) -> None:
    m = load_machine(name)
    assert isinstance(m, Machine)
    assert m.name == name
    assert m.description
    for d in m.devices:
        assert d.peak_source.strip() and d.launch_source.strip()
        assert d.peak_flops_per_s and all(v > 0 and math.isfinite(v)
                                          for v in d.peak_flops_per_s.values())
        for t in d.memory:
            assert t.capacity_bytes > 0 and t.bandwidth_bytes_per_s > 0 and t.source.strip()
        assert d.launch_overhead_s > 0
    for link in m.links:
        assert link.source.strip() and link.bandwidth_bytes_per_s > 0
    for r in m.shared_resources:
        assert r.source.strip()
    # every pair of devices is connected
    for a in m.device_names:
        for b in m.device_names:
            assert (a == b) == (m.route(a, b) == [])


@pytest.mark.parametrize("name", PRESETS)
def test_preset_numbers_are_yaml_numbers(name: str) -> None:
    # PyYAML reads `67e12` (no dot) or `6.7e13` (no exponent sign) as a string: forbid that.
    fields = numeric_fields(raw_preset(name))
    assert fields
    for path, value in fields:
        assert isinstance(value, int | float) and not isinstance(value, bool), (path, value)


@pytest.mark.parametrize("name", PRESETS)
def test_preset_matches_json_schema(name: str) -> None:
    jsonschema.Draft202012Validator(machine_json_schema()).validate(raw_preset(name))


@pytest.mark.parametrize("name", PRESETS)
def test_preset_round_trips_through_yaml(name: str, tmp_path: Path) -> None:
    m = load_machine(name)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(m.model_dump(mode="json"), sort_keys=False))
    again = load_machine(path)
    assert again == m
    assert again.fingerprint() == m.fingerprint()


@pytest.mark.parametrize("name", PRESETS)
def test_accelerator_peaks_say_dense(name: str) -> None:
    for d in load_machine(name).devices:
        if d.kind in (DeviceKind.GPU, DeviceKind.NPU, DeviceKind.DLA):
            text = d.peak_source.lower()
            if "spars" in text:
                assert "dense" in text, d.name


def test_h100_server_shape() -> None:
    m = load_machine("h100-sxm-server")
    assert m.device_names == ["cpu", "gpu0", "gpu1"]
    assert {link.name for link in m.links} == {"pcie-gpu0", "pcie-gpu1", "nvlink-01"}
    assert [link.name for link in m.route("cpu", "gpu1")] == ["pcie-gpu1"]
    assert [link.name for link in m.route("gpu1", "gpu0")] == ["nvlink-01"]
    gpu = m.device("gpu0")
    assert gpu.peak(DType.BF16) == pytest.approx(989.5e12)
    assert gpu.peak(DType.FP8_E4M3) == pytest.approx(1979e12)
    assert gpu.peak(DType.INT8) == pytest.approx(1979e12)
    assert gpu.peak(DType.FP32) == pytest.approx(67e12)
    assert gpu.main_memory.bandwidth_bytes_per_s == pytest.approx(3.35e12)
    assert gpu.compute_units == 132
    assert m.route("gpu0", "gpu1")[0].bandwidth_bytes_per_s == pytest.approx(450e9)
    assert m.route("cpu", "gpu0")[0].bandwidth_bytes_per_s == pytest.approx(64e9)


def test_gh200_c2c_and_shared_lpddr() -> None:
    m = load_machine("grace-hopper-gh200")
    (c2c,) = m.route("cpu", "gpu")
    assert c2c.bandwidth_bytes_per_s == pytest.approx(450e9)
    gpu = m.device("gpu")
    assert gpu.main_memory.capacity_bytes == 96_000_000_000
    assert gpu.tier("lpddr5x-via-c2c").shared_with == "grace-lpddr5x-mc"
    assert m.device("cpu").compute_units == 72


def test_a100_pcie_gen4() -> None:
    m = load_machine("a100-pcie-server")
    gpu = m.device("gpu")
    assert gpu.peak(DType.FP16) == pytest.approx(312e12)
    assert gpu.peak(DType.INT8) == pytest.approx(624e12)
    assert gpu.main_memory.bandwidth_bytes_per_s == pytest.approx(1.935e12)
    assert m.route("cpu", "gpu")[0].bandwidth_bytes_per_s == pytest.approx(32e9)


def test_jetson_shares_one_memory_and_restricts_dlas() -> None:
    m = load_machine("jetson-agx-orin")
    assert m.device_names == ["cpu", "gpu", "dla0", "dla1"]
    mc = m.shared("lpddr5-mc")
    assert mc.bandwidth_bytes_per_s == pytest.approx(204.8e9)
    for d in m.devices:
        assert d.main_memory.shared_with == "lpddr5-mc"
        assert "lpddr5-mc" in d.resources
    for link in m.links:
        assert link.resource_name == "lpddr5-mc"
    for dla in ("dla0", "dla1"):
        d = m.device(dla)
        assert d.kind is DeviceKind.DLA
        assert d.supports(OpKind.CONV, DType.INT8)
        assert d.supports(OpKind.CONV, DType.FP16)
        assert not d.supports(OpKind.CONV, DType.FP32)
        assert not d.supports(OpKind.ATTENTION)
        assert not d.supports(OpKind.LAYER_NORM)
    assert m.device("gpu").supports(OpKind.ATTENTION, DType.FP16)
    assert m.device("gpu").peak(DType.INT8) == pytest.approx(85e12)


def test_laptop_npu_is_restricted() -> None:
    m = load_machine("laptop-soc")
    npu = m.device("npu")
    assert npu.kind is DeviceKind.NPU
    assert set(npu.dtypes) == {DType.INT8, DType.FP16}
    assert npu.supports(OpKind.MATMUL, DType.INT8)
    assert not npu.supports(OpKind.MATMUL, DType.FP32)
    assert not npu.supports(OpKind.LSTM)
    assert npu.peak(DType.INT8) == pytest.approx(11e12)
    assert {d.main_memory.shared_with for d in m.devices} == {"lpddr5x-mc"}


# ----------------------------------------------------------------------------- JSON schema


def test_schema_file_is_up_to_date() -> None:
    assert SCHEMA_FILE.is_file(), f"missing {SCHEMA_FILE}"
    on_disk = SCHEMA_FILE.read_text(encoding="utf-8")
    assert json.loads(on_disk) == machine_json_schema(), (
        "src/placewise/schemas/machine.schema.json is stale; regenerate it with: "
        "python -c \"from placewise.hardware.spec import machine_json_schema_text as t; "
        "open('src/placewise/schemas/machine.schema.json', 'w').write(t())\"")
    assert on_disk == machine_json_schema_text()


def test_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(machine_json_schema())


def test_schema_rejects_what_the_loader_rejects() -> None:
    data = raw_preset("h100-sxm-server")
    data["devices"][1]["memory"][0]["capacity_bytes"] = 0
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(machine_json_schema()).validate(data)


# ----------------------------------------------------------------------------- bad specs


def write(tmp_path: Path, data: Any, name: str = "bad.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def load_error(path: Path) -> SpecError:
    with pytest.raises(SpecError) as info:
        load_machine(path)
    err = info.value
    assert err.file == str(path)
    assert str(err) == ": ".join(p for p in (err.file, err.place, err.problem) if p)
    return err


def mutated(preset: str, mutate: Any) -> dict[str, Any]:
    data = copy.deepcopy(raw_preset(preset))
    mutate(data)
    return data


@pytest.mark.parametrize(("field", "value"), [("capacity_bytes", 0),
                                              ("capacity_bytes", -5),
                                              ("bandwidth_bytes_per_s", 0.0),
                                              ("bandwidth_bytes_per_s", -1.0e9)])
def test_non_positive_tier_numbers(tmp_path: Path, field: str, value: float) -> None:
    data = mutated("h100-sxm-server",
                   lambda d: d["devices"][1]["memory"][0].__setitem__(field, value))
    err = load_error(write(tmp_path, data))
    assert err.place == f"devices[1](gpu0).memory[0](hbm3).{field}"
    assert "greater than 0" in err.problem and repr(value) in err.problem


def test_non_positive_link_bandwidth(tmp_path: Path) -> None:
    data = mutated("h100-sxm-server",
                   lambda d: d["links"][2].__setitem__("bandwidth_bytes_per_s", -1.0))
    err = load_error(write(tmp_path, data))
    assert err.place == "links[2](nvlink-01).bandwidth_bytes_per_s"
    assert "greater than 0" in err.problem


def test_non_positive_peak(tmp_path: Path) -> None:
    data = mutated("a100-pcie-server",
                   lambda d: d["devices"][1]["peak_flops_per_s"].__setitem__("fp16", 0))
    err = load_error(write(tmp_path, data))
    assert err.place == "devices[1](gpu).peak_flops_per_s.fp16"


def test_link_names_unknown_device(tmp_path: Path) -> None:
    data = mutated("h100-sxm-server",
                   lambda d: d["links"][2].__setitem__("endpoints", ["gpu0", "gpu9"]))
    err = load_error(write(tmp_path, data))
    assert err.place == "links[2](nvlink-01).endpoints[1]"
    assert "gpu9" in err.problem and "nvlink-01" in err.problem


def test_link_to_itself(tmp_path: Path) -> None:
    data = mutated("h100-sxm-server",
                   lambda d: d["links"][2].__setitem__("endpoints", ["gpu0", "gpu0"]))
    err = load_error(write(tmp_path, data))
    assert err.place == "links[2](nvlink-01).endpoints"
    assert "itself" in err.problem


def test_two_devices_without_route(tmp_path: Path) -> None:
    data = mutated("h100-sxm-server", lambda d: d.__setitem__("links", d["links"][:1]))
    err = load_error(write(tmp_path, data))
    assert err.place == "links"
    assert "no route" in err.problem and "'gpu1'" in err.problem


def test_unknown_dtype_key(tmp_path: Path) -> None:
    data = mutated("h100-sxm-server",
                   lambda d: d["devices"][1]["peak_flops_per_s"].__setitem__("fp99", 1.0e12))
    err = load_error(write(tmp_path, data))
    assert err.place == "devices[1](gpu0).peak_flops_per_s"
    assert "fp99" in err.problem and "unknown dtype" in err.problem


def test_unknown_supported_dtype(tmp_path: Path) -> None:
    data = mutated("jetson-agx-orin",
                   lambda d: d["devices"][2].__setitem__("supported_dtypes", ["int8", "int3"]))
    err = load_error(write(tmp_path, data))
    assert err.place == "devices[2](dla0).supported_dtypes"
    assert "int3" in err.problem


def test_unknown_op_kind(tmp_path: Path) -> None:
    data = mutated("jetson-agx-orin",
                   lambda d: d["devices"][2].__setitem__("supported_kinds",
                                                         ["conv", "convolution"]))
    err = load_error(write(tmp_path, data))
    assert err.place == "devices[2](dla0).supported_kinds[1]"
    assert "'convolution'" in err.problem and "'conv'" in err.problem
    assert len(err.problem) < 300


@pytest.mark.parametrize(("where", "value"), [("capacity_bytes", "lots"),
                                              ("bandwidth_bytes_per_s", "fast"),
                                              ("capacity_bytes", [1, 2])])
def test_wrong_types(tmp_path: Path, where: str, value: Any) -> None:
    data = mutated("a100-pcie-server",
                   lambda d: d["devices"][1]["memory"][0].__setitem__(where, value))
    err = load_error(write(tmp_path, data))
    assert err.place == f"devices[1](gpu).memory[0](hbm2e).{where}"
    assert "valid" in err.problem


def test_wrong_type_for_device_list(tmp_path: Path) -> None:
    data = mutated("a100-pcie-server", lambda d: d.__setitem__("devices", {"cpu": 1}))
    err = load_error(write(tmp_path, data))
    assert err.place == "devices"
    assert "list" in err.problem


def test_missing_required_field(tmp_path: Path) -> None:
    data = mutated("a100-pcie-server", lambda d: d["devices"][0].pop("peak_source"))
    err = load_error(write(tmp_path, data))
    assert err.place == "devices[0](cpu).peak_source"
    assert "required" in err.problem.lower()


def test_misspelt_field(tmp_path: Path) -> None:
    data = mutated("a100-pcie-server",
                   lambda d: d["devices"][0].__setitem__("launch_overhead", 1.0e-6))
    err = load_error(write(tmp_path, data))
    assert err.place == "devices[0](cpu).launch_overhead"


def test_unknown_shared_resource(tmp_path: Path) -> None:
    data = mutated("jetson-agx-orin",
                   lambda d: d["devices"][1].__setitem__("resources", ["ddr-mc"]))
    err = load_error(write(tmp_path, data))
    assert err.place == "devices[1](gpu).resources[0]"
    assert "ddr-mc" in err.problem and "lpddr5-mc" in err.problem


def test_unknown_shared_resource_in_tier(tmp_path: Path) -> None:
    data = mutated("jetson-agx-orin",
                   lambda d: d["devices"][0]["memory"][0].__setitem__("shared_with", "nope"))
    err = load_error(write(tmp_path, data))
    assert err.place == "devices[0](cpu).memory[0](lpddr5).shared_with"


@pytest.mark.parametrize(("section", "index", "place"), [
    ("devices", 2, "devices[2](gpu0).name"),
    ("links", 1, "links[1](pcie-gpu0).name"),
])
def test_repeated_names(tmp_path: Path, section: str, index: int, place: str) -> None:
    def mutate(d: dict[str, Any]) -> None:
        d[section][index]["name"] = d[section][index - 1]["name"]

    err = load_error(write(tmp_path, mutated("h100-sxm-server", mutate)))
    assert err.place == place
    assert "repeats" in err.problem


def test_yaml_syntax_error_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\ndevices:\n  - name: cpu\n    kind: [cpu\n")
    err = load_error(path)
    assert err.place is not None and err.place.startswith("line ")
    assert ", column " in err.place
    assert "invalid YAML" in err.problem


def test_yaml_syntax_error_position_is_right(tmp_path: Path) -> None:
    path = tmp_path / "tab.yaml"
    path.write_text("name: x\ndevices:\n\t- name: cpu\n")
    err = load_error(path)
    assert err.place == "line 3, column 1"


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.yaml"
    err = load_error(path)
    assert "no such file" in err.problem


def test_unknown_reference_is_neither_preset_nor_file() -> None:
    with pytest.raises(SpecError) as info:
        load_machine("no-such-preset")
    assert "h100-sxm-server" in info.value.problem


@pytest.mark.parametrize("text", ["- cpu\n- gpu\n", "just a string\n", "42\n", ""])
def test_non_mapping_top_level(tmp_path: Path, text: str) -> None:
    path = tmp_path / "list.yaml"
    path.write_text(text)
    err = load_error(path)
    assert err.place == "top level"
    assert "mapping" in err.problem


def test_parse_machine_names_the_file() -> None:
    with pytest.raises(SpecError) as info:
        parse_machine({"name": "x", "devices": []}, file="inline")
    assert info.value.file == "inline"
    assert info.value.place == "devices"


_TIER_FIELDS = ("capacity_bytes", "bandwidth_bytes_per_s")


@settings(max_examples=30, deadline=None)
@given(preset=st.sampled_from(PRESETS), device=st.integers(0, 3), field=st.sampled_from(
    _TIER_FIELDS), value=st.one_of(st.integers(-10**12, 0), st.floats(-1e15, 0.0)))
def test_any_non_positive_tier_number_is_named(preset: str, device: int, field: str,
                                               value: float) -> None:
    data = copy.deepcopy(raw_preset(preset))
    index = device % len(data["devices"])
    dev = data["devices"][index]
    dev["memory"] = [dict(t) for t in dev["memory"]]
    dev["memory"][0][field] = value
    with pytest.raises(SpecError) as info:
        parse_machine(data, file="prop.yaml")
    tier = dev["memory"][0]["name"]
    assert info.value.place == f"devices[{index}]({dev['name']}).memory[0]({tier}).{field}"
