"""The local probe: a quick probe yields a valid, measured Machine; the cache round-trips."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

import placewise.hardware.probe as probe_mod
from placewise.hardware.load import load_machine
from placewise.hardware.probe import (
    PROBE_SOURCE_PREFIX,
    host_fingerprint,
    load_local,
    local_cache_path,
    probe,
)
from placewise.hardware.spec import Machine
from placewise.units import DType

TWO_CORES = len(probe_mod._usable_cores()) >= 2


@pytest.fixture(scope="module")
def probed() -> tuple[Machine, list[tuple[str, float]], Any]:
    calls: list[tuple[str, float]] = []
    affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    machine = probe(quick=True, progress=lambda msg, frac: calls.append((msg, frac)))
    after = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    return machine, calls, (affinity, after)


def all_sources(m: Machine) -> list[str]:
    out = []
    for d in m.devices:
        out += [d.peak_source, d.launch_source] + [t.source for t in d.memory]
    out += [r.source for r in m.shared_resources] + [link.source for link in m.links]
    return out


def test_quick_probe_devices(probed: Any) -> None:
    m, _, _ = probed
    assert m.name == "local"
    expected = ["cpu0", "cpu1", "cpu01"] if TWO_CORES else ["cpu0", "cpu1"]
    assert m.device_names == expected
    cpu0, cpu1 = m.device("cpu0"), m.device("cpu1")
    assert cpu0.backend == "torch" and cpu0.cores is not None and len(cpu0.cores) == 1
    assert cpu1.backend in ("onnxruntime", "torch") and cpu1.cores is not None
    assert set(cpu0.peak_flops_per_s) == {DType.FP32}
    assert set(cpu1.peak_flops_per_s) == {DType.INT8, DType.FP32}
    if TWO_CORES:
        cpu01 = m.device("cpu01")
        assert cpu01.backend == "torch" and cpu01.compute_units == 2
        assert cpu01.cores == sorted({*cpu0.cores, *cpu1.cores})
        assert cpu0.cores != cpu1.cores


def test_quick_probe_numbers_are_measured_and_positive(probed: Any) -> None:
    m, _, _ = probed
    for d in m.devices:
        assert all(v > 0 and math.isfinite(v) for v in d.peak_flops_per_s.values())
        assert 0 < d.launch_overhead_s < 1
        assert d.main_memory.capacity_bytes > 0
        assert 0 < d.main_memory.bandwidth_bytes_per_s < math.inf
        assert d.main_memory.shared_with == "dram-mc"
        assert "dram-mc" in d.resources
    for link in m.links:
        assert 0 < link.bandwidth_bytes_per_s < math.inf and 0 < link.latency_s < 1
        assert link.resource_name == "dram-mc"
    assert m.shared("dram-mc").bandwidth_bytes_per_s > 0
    for s in all_sources(m):
        assert PROBE_SOURCE_PREFIX in s and "median of" in s


def test_every_pair_of_devices_has_one_direct_link(probed: Any) -> None:
    m, _, _ = probed
    for a in m.device_names:
        for b in m.device_names:
            if a != b:
                assert len(m.route(a, b)) == 1


def test_devices_name_their_cores(probed: Any) -> None:
    m, _, _ = probed
    usable = set(probe_mod._usable_cores())
    for d in m.devices:
        assert d.cores and set(d.cores) <= usable
    assert [r.name for r in m.shared_resources] == ["dram-mc"]
    assert "cores" in m.description and "intersect" in m.description


def test_quick_probe_tags(probed: Any) -> None:
    m, _, _ = probed
    for key in ("cpu_model", "cores", "torch", "onnxruntime", "numpy", "threads", "date",
                "python", "probe_mode", "fingerprint"):
        assert m.tags.get(key), key
    assert m.tags["probe_mode"] == "quick"
    assert m.tags["fingerprint"] == host_fingerprint()
    assert m.tags["date"] in m.device("cpu0").peak_source


def test_progress_and_parent_affinity(probed: Any) -> None:
    _, calls, (before, after) = probed
    fractions = [f for _, f in calls]
    assert fractions == sorted(fractions)
    assert fractions[0] == 0.0 and fractions[-1] == 1.0
    assert all(isinstance(msg, str) and msg for msg, _ in calls)
    assert before == after


def test_single_core_degrades(monkeypatch: pytest.MonkeyPatch) -> None:
    only = probe_mod._usable_cores()[:1]
    monkeypatch.setattr(probe_mod, "_usable_cores", lambda: list(only))
    m = probe(quick=True)
    assert m.device_names == ["cpu0", "cpu1"]
    assert m.device("cpu0").cores == m.device("cpu1").cores == only
    assert [r.name for r in m.shared_resources] == ["dram-mc"]
    assert len(m.links) == 1
    assert "only one usable core" in m.description


# ----------------------------------------------------------------------------- cache


@pytest.fixture
def counting_probe(monkeypatch: pytest.MonkeyPatch, probed: Any) -> list[bool]:
    """Replace the measurement by the module's quick result; count how often it runs."""
    machine, _, _ = probed
    runs: list[bool] = []

    def fake(*, progress: Any = None, quick: bool = False) -> Machine:
        runs.append(quick)
        return machine

    monkeypatch.setattr(probe_mod, "probe", fake)
    return runs


def test_cache_round_trip(tmp_path: Path, counting_probe: list[bool], probed: Any) -> None:
    machine, _, _ = probed
    first = load_local(tmp_path, quick=True)
    assert counting_probe == [True]
    path = local_cache_path(tmp_path, quick=True)
    assert path.is_file() and path.name == f"local-{host_fingerprint()}-quick.yaml"
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind
    second = load_local(tmp_path, quick=True)
    assert counting_probe == [True]  # served from the cache
    assert first == second == machine
    assert second.fingerprint() == machine.fingerprint()
    assert load_machine(path) == machine
    load_local(tmp_path, refresh=True, quick=True)
    assert counting_probe == [True, True]


def test_quick_and_full_caches_are_apart(tmp_path: Path, counting_probe: list[bool]) -> None:
    load_local(tmp_path, quick=True)
    load_local(tmp_path)
    assert counting_probe == [True, False]
    assert local_cache_path(tmp_path) != local_cache_path(tmp_path, quick=True)


@pytest.mark.parametrize("garbage", [
    "devices: [\n  - name: cpu0\n",  # YAML syntax error
    "- not\n- a mapping\n",
    "",
    "name: local\ndevices: []\n",  # valid YAML, invalid spec
    "\x00\x01binary",
])
def test_corrupt_cache_is_measured_again(tmp_path: Path, counting_probe: list[bool],
                                         probed: Any, garbage: str) -> None:
    path = local_cache_path(tmp_path, quick=True)
    path.write_text(garbage)
    m = load_local(tmp_path, quick=True)
    assert counting_probe == [True]
    assert m == probed[0]
    assert load_machine(path) == m  # the cache was rewritten


def test_cache_of_another_host_is_measured_again(tmp_path: Path, counting_probe: list[bool],
                                                 probed: Any) -> None:
    data = probed[0].model_dump(mode="json")
    data["tags"]["fingerprint"] = "someone-else"
    local_cache_path(tmp_path, quick=True).write_text(yaml.safe_dump(data))
    load_local(tmp_path, quick=True)
    assert counting_probe == [True]


def test_unwritable_cache_is_not_an_error(tmp_path: Path, counting_probe: list[bool]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    m = load_local(blocker / "cache", quick=True)
    assert m.name == "local" and counting_probe == [True]


def test_default_cache_dir_follows_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       counting_probe: list[bool]) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert local_cache_path().parent == tmp_path / "placewise"
    m = load_machine("local")  # the spec loader hands `local` to the probe cache
    assert m.name == "local"
    assert counting_probe == [False]
    assert local_cache_path().is_file()
