"""Power figures and power modes in machine specs (placewise.hardware.power)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml

from placewise.errors import InputError, SpecError
from placewise.hardware.load import load_machine
from placewise.hardware.power import apply_mode, find_mode, split_ref
from placewise.hardware.spec import (
    list_presets,
    machine_json_schema_text,
    parse_machine,
)
from placewise.units import DType
from tests.test_cli import assert_bad_input, run

ORIN = "jetson-agx-orin"
SCHEMA_FILE = Path(str(resources.files("placewise") / "schemas" / "machine.schema.json"))
#: nvpmodel's AGX Orin 64GB table as the preset records it: (mode, cpu cores, cpu MHz,
#: gpu TPCs, gpu MHz, dla MHz, EMC MHz)
MODES = [("MAXN", 12, 2201.6, 8, 1300.5, 1600, 3199), ("50W", 12, 1497.6, 8, 828.75, 1408, 3199),
         ("30W", 8, 1728, 4, 624.75, 793.6, 3199), ("15W", 4, 1113.6, 3, 420.75, 614.4, 2133)]


def raw(name: str) -> dict[str, Any]:
    text = (resources.files("placewise.hardware") / "presets" / f"{name}.yaml").read_text()
    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize("name", list_presets())
def test_every_preset_has_sourced_power_figures(name: str) -> None:
    m = load_machine(name)
    assert m.power is not None and m.power.max_w > 0 and m.power.max_source
    assert 0 < m.power.idle_w <= m.power.max_w and m.power.idle_source
    for d in m.devices:
        assert d.power is not None, d.name
        assert 0 <= d.power.idle_w <= d.power.active_w
        # a datasheet (with its URL), a computation, or a stated estimate
        src = d.power.source
        assert "http" in src or "estimate, not a datasheet figure" in src, (d.name, src)
    for text in (m.power.max_source, m.power.idle_source):
        assert "http" in text or "estimate" in text or text.startswith("computed"), text


def test_datasheet_figures_of_the_presets() -> None:
    watts = {(n, d.name): d.power.active_w for n in list_presets()
             for d in load_machine(n).devices if d.power is not None}
    assert watts[("a100-pcie-server", "gpu")] == 300.0  # A100 80GB PCIe TDP
    assert watts[("a100-pcie-server", "cpu")] == 280.0  # EPYC 7763 TDP
    assert watts[("h100-sxm-server", "gpu0")] == watts[("h100-sxm-server", "gpu1")] == 700.0
    assert watts[("h100-sxm-server", "cpu")] == 350.0  # Xeon Platinum 8480+ TDP
    gh = load_machine("grace-hopper-gh200").power
    assert gh is not None and gh.max_w == 1000.0 and "450 W to 1000 W" in gh.max_source
    laptop = load_machine("laptop-soc").power
    assert laptop is not None and laptop.max_w == 28.0  # Processor Base Power
    orin = load_machine(ORIN).power
    assert orin is not None and orin.max_w == 60.0 and orin.default_mode == "MAXN"


def test_modes_parse_with_their_clocks() -> None:
    m = load_machine(ORIN)
    assert m.power is not None
    assert [x.name for x in m.power.modes] == [x[0] for x in MODES]
    for name, cores, cpu_mhz, tpcs, gpu_mhz, dla_mhz, emc_mhz in MODES:
        mode = find_mode(m, name)
        assert mode.devices["cpu"].clock_hz == pytest.approx(cpu_mhz * 1e6)
        assert mode.devices["cpu"].units == cores
        assert mode.devices["gpu"].clock_hz == pytest.approx(gpu_mhz * 1e6)
        assert mode.devices["gpu"].units == tpcs
        assert mode.devices["dla0"].clock_hz == mode.devices["dla1"].clock_hz == \
            pytest.approx(dla_mhz * 1e6)
        assert mode.memory_clock_hz == pytest.approx(emc_mhz * 1e6)
    assert find_mode(m, "60w").name == "MAXN" and find_mode(m, "30w").name == "30W"


@pytest.mark.parametrize("mode", MODES[1:], ids=[x[0] for x in MODES[1:]])
def test_a_mode_scales_peaks_by_clock_and_units(mode: tuple[Any, ...]) -> None:
    name, cores, cpu_mhz, tpcs, gpu_mhz, dla_mhz, emc_mhz = mode
    base, m = load_machine(ORIN), load_machine(f"{ORIN}@{name}")
    assert m.name == f"{ORIN}@{name}" and m.tags["power_mode"] == name
    assert m.power is not None and m.power.mode == name
    assert m.power.max_w == float(name.removesuffix("W"))
    gpu = (gpu_mhz / 1300.5) * (tpcs / 8)
    cpu = (cpu_mhz / 2201.6) * (cores / 12)
    dla = dla_mhz / 1600
    for dev, scale in (("gpu", gpu), ("cpu", cpu), ("dla0", dla), ("dla1", dla)):
        for dt, peak in base.device(dev).peak_flops_per_s.items():
            assert m.device(dev).peak(dt) == pytest.approx(peak * scale, rel=1e-9), (dev, dt)
    assert m.device("cpu").compute_units == cores
    assert m.device("gpu").compute_units == round(16 * tpcs / 8)  # 2 SMs per TPC
    bw = base.device("gpu").main_memory.bandwidth_bytes_per_s * emc_mhz / 3199
    assert m.device("gpu").main_memory.bandwidth_bytes_per_s == pytest.approx(bw)
    assert m.shared("lpddr5-mc").bandwidth_bytes_per_s == pytest.approx(bw)
    assert all(ln.bandwidth_bytes_per_s == pytest.approx(bw) for ln in m.links)
    # power: the mode's figures where the preset gives them, else scaled
    gp = m.device("gpu").power
    assert gp is not None and gp.active_w < base.device("gpu").power.active_w  # type: ignore[union-attr]
    dp, bp = m.device("dla0").power, base.device("dla0").power
    assert dp is not None and bp is not None
    assert dp.active_w == pytest.approx(bp.idle_w + (bp.active_w - bp.idle_w) * dla)
    assert m.fingerprint() != base.fingerprint()
    assert m.device("gpu").peak(DType.FP16) < base.device("gpu").peak(DType.FP16)


def test_the_default_mode_is_the_preset() -> None:
    base = load_machine(ORIN)
    for ref in (f"{ORIN}@MAXN", f"{ORIN}@maxn", f"{ORIN}@60W"):
        m = load_machine(ref)
        assert m.name == ORIN and m.fingerprint() == base.fingerprint()
    assert apply_mode(base, "MAXN") is base


def test_bad_modes_are_input_errors_naming_the_place() -> None:
    with pytest.raises(SpecError) as info:
        load_machine(f"{ORIN}@40W")
    assert isinstance(info.value, InputError)
    assert info.value.place == "power.modes" and info.value.file == f"{ORIN}@40W"
    assert "MAXN (also 60W), 50W, 30W, 15W" in info.value.problem
    with pytest.raises(SpecError, match="has no power modes"):
        load_machine("h100-sxm-server@30W")
    with pytest.raises(SpecError, match="local machine has no power modes"):
        load_machine("local@30W")
    with pytest.raises(SpecError, match="already in power mode"):
        apply_mode(load_machine(f"{ORIN}@30W"), "15W")
    assert split_ref("a@b@c") == ("a@b", "c")


def test_bad_mode_on_the_command_line_exits_2_naming_the_place() -> None:
    assert_bad_input(run("hw", "show", f"{ORIN}@40W"), f"{ORIN}@40W", "power.modes",
                     "no power mode '40W'")
    assert_bad_input(run("plan", "zoo:mlp", "--hw", "laptop-soc@15W", "--out", "/tmp/x.json"),
                     "laptop-soc@15W", "power.modes")


def test_fingerprint_is_unchanged_by_power_fields() -> None:
    data = raw(ORIN)
    fp = parse_machine(data, file="x").fingerprint()
    changed = json.loads(json.dumps(data))
    for d in changed["devices"]:
        d["power"]["active_w"] *= 2
        d["power"]["source"] = "something else"
    changed["power"]["max_w"] = 120.0
    changed["power"]["idle_w"] = 1.0
    assert parse_machine(changed, file="x").fingerprint() == fp
    no_power = json.loads(json.dumps(data))
    no_power.pop("power")
    for d in no_power["devices"]:
        d.pop("power")
    assert parse_machine(no_power, file="x").fingerprint() == fp
    changed["devices"][1]["peak_flops_per_s"]["fp16"] *= 2  # a peak: another machine
    assert parse_machine(changed, file="x").fingerprint() != fp


@pytest.mark.parametrize(("edit", "place", "problem"), [
    (lambda d: d["devices"][0]["power"].update(idle_w=99.0), "devices[0](cpu).power",
     "idle_w (99) exceeds active_w"),
    (lambda d: d["power"]["modes"][2]["devices"].update(npu={"clock_hz": 1e9}),
     "power.modes[2](30W).devices.npu", "unknown device 'npu'"),
    (lambda d: d["power"].update(default_mode="20W"), "power", "'20W' is not a mode"),
    (lambda d: d["power"]["modes"][1].update(name="maxn"), "power", "'maxn' repeats"),
    (lambda d: d["devices"][2]["power"].pop("clock_hz"), "devices[2](dla0).power.clock_hz",
     "no power.clock_hz"),
    (lambda d: d["power"]["modes"][0]["devices"]["gpu"].update(active_w=3.0),
     "power.modes[0](MAXN).devices.gpu", "need a source"),
])
def test_bad_power_specs_name_the_place(edit: Any, place: str, problem: str) -> None:
    data = json.loads(json.dumps(raw(ORIN)))
    edit(data)
    with pytest.raises(SpecError) as info:
        parse_machine(data, file="m.yaml")
    assert info.value.place is not None and info.value.place.startswith(place), info.value
    assert problem in info.value.problem, info.value


def test_schema_file_is_up_to_date() -> None:
    assert SCHEMA_FILE.read_text() == machine_json_schema_text()
    schema = json.loads(SCHEMA_FILE.read_text())
    for name in ("DevicePower", "MachinePower", "PowerMode", "ModeDevice"):
        assert name in schema["$defs"]
    assert "active_w" in schema["$defs"]["DevicePower"]["properties"]


def test_hw_show_renders_power_and_modes() -> None:
    proc = run("hw", "show", f"{ORIN}@30W", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["name"] == f"{ORIN}@30W" and data["energy_available"] is True
    assert data["power"]["mode"] == "30W" and data["power"]["max_w"] == 30.0
    assert data["power_modes"] == [f"{ORIN}@{x[0]}" for x in MODES]
    assert data["fingerprint"] == load_machine(f"{ORIN}@30W").fingerprint()
    text = run("hw", "show", ORIN).stdout
    assert "power modes (this spec: MAXN" in text and "gpu 624.75 x4" in text
    assert "machine (max/idle)" in text


def test_a_plan_made_in_a_power_mode_serves_and_exports_without_hw(tmp_path: Path) -> None:
    plan = tmp_path / "p.json"
    assert run("plan", "zoo:mlp", "--hw", f"{ORIN}@30W", "--out", str(plan)).returncode == 0
    r = run("serve", str(plan), "--rate", "1000", "--requests", "500", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["completed"] == 500
    r = run("export", str(plan), "--out", str(tmp_path / "parts"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "parts" / "manifest.json").is_file()
