"""placewise.energy: the energy of a plan against a hand computation; refusals; the local
machine; validate's measured energy (RAPL on a fake sysfs tree)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from placewise.energy import REST, plan_energy
from placewise.errors import InputError
from placewise.graph.ir import Graph, Op, OpKind, Role, Tensor
from placewise.hardware.load import load_machine
from placewise.hardware.spec import Machine
from placewise.plan import Plan, build_plan
from placewise.schedule import Placement, Problem, evaluate
from placewise.schedule.testing import ToyCostModel, toy_machine
from placewise.units import DType
from placewise.validate.power import EnergyMeter, rapl_zones

# hand numbers: a on the cpu for 2 ms, b on the gpu for 3 ms; each 4000-byte tensor crossing
# the 1 GB/s, 1 us link takes 5 us
T_A, T_B, T_X = 2e-3, 3e-3, 4000 / 1e9 + 1e-6
CPU_W, GPU_W = (10.0, 2.0), (100.0, 20.0)  # (active, idle)
MACHINE_IDLE_W = 30.0  # 8 W more than the devices' idle: the rest of the machine


def powered(m: Machine, *, max_w: float | None = 200.0, name: str | None = None) -> Machine:
    data: dict[str, Any] = m.model_dump(mode="json")
    for d, (active, idle) in zip(data["devices"], [CPU_W, GPU_W], strict=True):
        d["power"] = {"active_w": active, "idle_w": idle, "source": "hand numbers"}
    if max_w is not None:
        data["power"] = {"max_w": max_w, "max_source": "hand", "idle_w": MACHINE_IDLE_W,
                         "idle_source": "hand"}
    if name:
        data["name"] = name
    return Machine.model_validate(data)


def two_op_plan(machine: Machine, batch: int = 1) -> Plan:
    x = Tensor("x", (1000,), DType.FP32, role=Role.INPUT)
    h = Tensor("h", (1000,), DType.FP32)
    y = Tensor("y", (1000,), DType.FP32, role=Role.OUTPUT)
    g = Graph.build("g", [x, h, y], [Op("a", OpKind.RELU, ("x",), ("h",)),
                                     Op("b", OpKind.RELU, ("h",), ("y",))])
    prob = Problem(g, None, machine, ToyCostModel(machine, {("a", "cpu"): T_A,
                                                            ("b", "gpu"): T_B}), batch=batch)
    p = Placement.from_json({"a": {"device": "cpu", "dtype": "fp32"},
                             "b": {"device": "gpu", "dtype": "fp32"}})
    return build_plan(prob, evaluate(prob, p), model_ref="g.json", strategy="hand")


def test_energy_against_a_hand_computation() -> None:
    m = toy_machine()
    plan = two_op_plan(m)
    makespan = T_A + T_X + T_B + T_X  # a, h to the gpu, b, y back to the host
    assert plan.makespan_s == pytest.approx(makespan, rel=1e-9)
    e = plan_energy(plan, powered(m))  # power is not in the fingerprint: the plan's machine
    assert e.available and e.estimate and e.reason is None
    cpu_j = CPU_W[1] * makespan + (CPU_W[0] - CPU_W[1]) * T_A
    gpu_j = GPU_W[1] * makespan + (GPU_W[0] - GPU_W[1]) * T_B
    rest_j = (MACHINE_IDLE_W - CPU_W[1] - GPU_W[1]) * makespan
    total = cpu_j + gpu_j + rest_j  # 0.02602 + 0.3402 + 0.04008 = 0.4063 J
    assert total == pytest.approx(0.4063, rel=1e-6)
    rows = {r.device: r for r in e.devices}
    assert rows["cpu"].busy_s == pytest.approx(T_A)
    assert rows["gpu"].busy_s == pytest.approx(T_B)
    assert rows["cpu"].energy_j == pytest.approx(cpu_j)
    assert rows["gpu"].energy_j == pytest.approx(gpu_j)
    assert rows[REST].energy_j == pytest.approx(rest_j)
    assert e.energy_per_run_j == pytest.approx(total)
    assert e.energy_per_request_j == pytest.approx(total)
    assert e.requests_per_j == pytest.approx(1 / total)
    assert e.average_power_w == pytest.approx(total / makespan)
    assert "idle_w x makespan_s" in e.method
    assert e.to_json()["estimate"] is True


def test_saturation_uses_the_pipeline_period() -> None:
    m = toy_machine()
    plan = two_op_plan(m)
    period = T_B  # the gpu is the bottleneck: 3 ms per run
    assert plan.throughput.period_s == pytest.approx(period)
    e = plan_energy(plan, powered(m))
    sat = (CPU_W[1] * period + (CPU_W[0] - CPU_W[1]) * T_A
           + GPU_W[1] * period + (GPU_W[0] - GPU_W[1]) * T_B
           + (MACHINE_IDLE_W - CPU_W[1] - GPU_W[1]) * period)  # 0.022 + 0.3 + 0.024
    assert sat == pytest.approx(0.346)
    assert e.saturated_energy_per_request_j == pytest.approx(sat)
    assert e.saturated_requests_per_j == pytest.approx(1 / sat)
    assert e.saturated_average_power_w == pytest.approx(sat / period)
    # back to back, the idle share of each run shrinks: a request costs less
    assert e.saturated_energy_per_request_j < e.energy_per_request_j


def test_batch_divides_the_run() -> None:
    m = toy_machine()
    one = plan_energy(two_op_plan(m), powered(m))
    four = plan_energy(two_op_plan(m, batch=4), powered(m))
    assert four.batch == 4
    assert four.energy_per_run_j == pytest.approx(one.energy_per_run_j)  # same toy times
    assert four.energy_per_request_j == pytest.approx(one.energy_per_run_j / 4)
    assert four.requests_per_j == pytest.approx(4 / one.energy_per_run_j)


def test_budget_note_when_the_estimate_exceeds_the_machine_power() -> None:
    m = toy_machine()
    plan = two_op_plan(m)
    avg = plan_energy(plan, powered(m)).average_power_w  # about 81 W
    assert avg is not None and 50 < avg < 200
    assert plan_energy(plan, powered(m, max_w=200.0)).notes == ()
    notes = plan_energy(plan, powered(m, max_w=50.0)).notes
    assert notes and "exceeds the machine's power budget (50 W)" in notes[0]


def test_machine_without_power_is_not_available_with_the_reason() -> None:
    m = toy_machine()
    e = plan_energy(two_op_plan(m), m)
    assert not e.available and e.energy_per_request_j is None and e.requests_per_j is None
    assert e.reason == "machine toy has no power figures (devices without them: cpu, gpu)"


def test_local_machine_is_not_available_with_the_reason() -> None:
    data = toy_machine().model_dump(mode="json")
    data["name"] = "local"  # what placewise hw probe names this machine; it has no power
    local = Machine.model_validate(data)
    e = plan_energy(two_op_plan(local), local)
    assert not e.available
    assert e.reason is not None and e.reason.startswith("the local machine")
    assert "measures time, not power" in e.reason
    assert e.to_json()["available"] is False


def test_a_machine_of_another_fingerprint_is_refused() -> None:
    plan = two_op_plan(toy_machine())
    with pytest.raises(InputError) as info:
        plan_energy(plan, load_machine("jetson-agx-orin"), file="p.json")
    assert info.value.place == "fingerprints.machine" and info.value.file == "p.json"


def test_a_plan_for_a_preset_and_its_power_modes() -> None:
    """A plan on the Orin preset gets an estimate; the same plan is refused on the 30W mode
    (its peaks, hence its fingerprint, differ); the 30W plan draws less power."""
    from placewise.cost.load import load_cost_model
    from placewise.graph.load import load_model

    plans = {}
    for ref in ("jetson-agx-orin", "jetson-agx-orin@30W"):
        m = load_machine(ref)
        g = load_model("zoo:mlp", batch=4)
        prob = Problem(g, None, m, load_cost_model(m, None), batch=4)
        ops = list(prob.vertex_names)
        p = Placement.uniform(ops, "gpu", DType.FP16)
        plans[ref] = (build_plan(prob, evaluate(prob, p), model_ref="zoo:mlp", strategy="gpu"), m)
    (base, mb), (m30_plan, m30) = plans["jetson-agx-orin"], plans["jetson-agx-orin@30W"]
    eb, e30 = plan_energy(base, mb), plan_energy(m30_plan, m30)
    assert eb.available and e30.available and e30.mode == "30W" and eb.mode == "MAXN"
    assert m30_plan.makespan_s > base.makespan_s  # lower clocks
    assert e30.average_power_w is not None and eb.average_power_w is not None
    assert e30.average_power_w < eb.average_power_w
    with pytest.raises(InputError):
        plan_energy(base, m30)


# ---- measured energy (validate) ----------------------------------------------------------------
def fake_rapl(root: Path, zones: dict[str, tuple[str, int, int]]) -> None:
    """``zones``: directory -> (name, energy_uj, max_energy_range_uj)."""
    for d, (name, uj, max_uj) in zones.items():
        z = root / d
        z.mkdir(parents=True)
        (z / "name").write_text(name + "\n")
        (z / "energy_uj").write_text(f"{uj}\n")
        (z / "max_energy_range_uj").write_text(f"{max_uj}\n")


def set_uj(root: Path, d: str, uj: int) -> None:
    (root / d / "energy_uj").write_text(f"{uj}\n")


def test_rapl_reader_on_a_fake_sysfs_tree_with_wraparound(tmp_path: Path) -> None:
    fake_rapl(tmp_path, {"intel-rapl:0": ("package-0", 10_000_000, 262_143_328_850),
                         "intel-rapl:1": ("package-1", 262_143_000_000, 262_143_328_850),
                         "intel-rapl:0:0": ("core", 5_000_000, 262_143_328_850)})
    (tmp_path / "intel-rapl:2").mkdir()  # no counter: ignored
    assert [z.name for z in rapl_zones(tmp_path)] == ["rapl:package-0", "rapl:package-1"]
    meter = EnergyMeter(rapl_root=tmp_path, nvml=False)
    assert meter.available
    meter.start()
    set_uj(tmp_path, "intel-rapl:0", 13_000_000)  # +3 J
    set_uj(tmp_path, "intel-rapl:1", 671_150)  # wrapped: +328_850 + 671_150 uJ = +1 J
    set_uj(tmp_path, "intel-rapl:0:0", 9_000_000)  # a sub-domain of package-0: not added
    meter.mark()
    set_uj(tmp_path, "intel-rapl:0", 99_000_000)  # after the window: not counted
    m = meter.stop(requests=8, window_s=2.0)
    assert m.available and m.reason is None
    assert m.by_counter_j == pytest.approx({"rapl:package-0": 3.0, "rapl:package-1": 1.0})
    assert m.energy_j == pytest.approx(4.0)
    assert m.energy_per_request_j == pytest.approx(0.5)
    assert m.average_power_w == pytest.approx(2.0)
    assert m.covers is not None and "whole CPU package" in m.covers


def test_no_power_source_says_so(tmp_path: Path) -> None:
    meter = EnergyMeter(rapl_root=tmp_path / "powercap", nvml=False)
    assert not meter.available
    meter.start()
    m = meter.stop(requests=3)
    assert not m.available and m.energy_j is None
    assert m.reason is not None and "no measured power source" in m.reason
    assert str(tmp_path / "powercap") in m.reason
    assert m.to_json()["available"] is False


def test_this_machine_without_powercap_reports_none() -> None:
    """The machine the tests run on: with no /sys/class/powercap it says so, plainly."""
    meter = EnergyMeter(nvml=False)
    if Path("/sys/class/powercap").is_dir() and rapl_zones():
        pytest.skip("this machine has RAPL counters")
    assert not meter.available and "/sys/class/powercap" in meter.reason()


def test_validate_reports_energy_beside_the_estimate(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """validate with a fake RAPL tree whose counters grow while the stream runs: measured
    energy per request beside the estimate (not available on this test machine: no power
    figures); without a tree it says none exists."""
    import itertools

    from placewise.validate import power, render_validation, validate_plan
    from tests.runtime.helpers import local_machine, tiny_plan, tiny_source

    plan, _ = tiny_plan()
    root = tmp_path / "powercap"
    fake_rapl(root, {"intel-rapl:0": ("package-0", 1_000_000, 10**12)})
    ticks = itertools.count()
    real_read = power._read_int

    def growing(path: Path) -> int | None:  # every read of the counter adds 0.5 J
        v = real_read(path)
        if path.name == "energy_uj" and v is not None:
            return v + 500_000 * next(ticks)
        return v

    monkeypatch.setattr(power, "_read_int", growing)
    monkeypatch.setattr(power, "RAPL_ROOT", root)
    monkeypatch.setattr(power.EnergyMeter.__init__, "__kwdefaults__",
                        {"rapl_root": root, "nvml": False})
    rep = validate_plan(plan, source=tiny_source(), machine=local_machine(), requests=3,
                        stream_s=0.1, solo_repeats=1, warmup=1, baseline=False)
    data = rep.to_json()["energy"]
    assert data["estimate"]["available"] is False
    assert "no power figures" in data["estimate"]["reason"]
    meas = data["measured"]
    assert meas["available"] is True and meas["source"] == "rapl:package-0"
    assert meas["energy_j"] == pytest.approx(0.5)  # start and mark: one read apart
    assert meas["requests"] == rep.stream_requests * rep.batch
    assert meas["energy_per_request_j"] == pytest.approx(0.5 / meas["requests"])
    text = render_validation(rep)
    assert "energy measured over the stream (rapl:package-0)" in text
    assert "energy estimate: not available" in text

    monkeypatch.setattr(power.EnergyMeter.__init__, "__kwdefaults__",
                        {"rapl_root": tmp_path / "none", "nvml": False})
    rep = validate_plan(plan, source=tiny_source(), machine=local_machine(), requests=2,
                        stream_s=0.05, solo_repeats=1, warmup=1, baseline=False)
    meas = rep.to_json()["energy"]["measured"]
    assert meas["available"] is False and "no measured power source" in meas["reason"]
    assert "energy measured: none (no measured power source" in render_validation(rep)
