"""``calibrate import --into``: an imported device added into another calibration keeps
the executor terms that calibration measured, and nothing of the device's old costs."""

from __future__ import annotations

import pytest

from placewise.calibrate.imports.merge import merge_into
from placewise.cost.calibration import (
    Calibration,
    DeviceRecord,
    Fit,
    ImportRecord,
    Measurement,
    StepOverhead,
)
from placewise.errors import ProfileError


def _meas(device: str, key: str, backend: str) -> Measurement:
    return Measurement(device=device, key=key, kind="relu", dtype="fp32", median_s=1e-5,
                       p10_s=9e-6, p90_s=2e-5, n=5, backend=backend)


def _base() -> Calibration:
    over = StepOverhead(median_s=2e-5, p10_s=1e-5, p90_s=3e-5, n=9, method="measured")
    devs = [DeviceRecord(name=n, kind="cpu", identity=f"id-{n}", dispatch=over, request=over)
            for n in ("cpu0", "cpu1")]
    fit = Fit(device="cpu0", kind="relu", dtype="fp32", features=["one"], coef=[1e-5], n=3,
              resid_q10=-0.1, resid_q50=0.0, resid_q90=0.1)
    return Calibration(machine="local", machine_fingerprint="fp", devices=devs,
                       measurements=[_meas("cpu0", "a", "onnxruntime"),
                                     _meas("cpu1", "b", "onnxruntime")], fits=[fit])


def _imported(identity: str = "id-cpu0") -> Calibration:
    rc = StepOverhead(median_s=7e-6, p10_s=6e-6, p90_s=8e-6, n=20, method="profile")
    rec = ImportRecord(tool="onnxruntime", file="p.json", sha256="sha256:x", device="cpu0",
                       profiled_nodes=3, matched_nodes=3, ops_covered=3)
    return Calibration(machine="local", machine_fingerprint="fp",
                       devices=[DeviceRecord(name="cpu0", kind="cpu", identity=identity,
                                             run_call=rc)],
                       measurements=[_meas("cpu0", "c", "import:onnxruntime")],
                       imports=[rec])


def test_the_imported_device_replaces_its_costs_and_keeps_the_executor_terms() -> None:
    base, new = _base(), _imported()
    got = merge_into(base, new)
    keys = {(m.device, m.key) for m in got.measurements}
    assert keys == {("cpu0", "c"), ("cpu1", "b")}  # cpu0's own measurement and fit are gone
    assert [f.device for f in got.fits] == []
    cpu0 = next(d for d in got.devices if d.name == "cpu0")
    assert cpu0.dispatch == base.devices[0].dispatch  # the executor's terms kept
    assert cpu0.request == base.devices[0].request
    assert cpu0.run_call == new.devices[0].run_call  # the profile's session overhead
    assert [r.device for r in got.imports] == ["cpu0"]
    assert next(d for d in got.devices if d.name == "cpu1") == base.devices[1]


def test_another_machine_or_device_is_refused() -> None:
    other = _imported().model_copy(update={"machine_fingerprint": "other"})
    with pytest.raises(ProfileError, match="fingerprint"):
        merge_into(_base(), other, file="c.json")
    with pytest.raises(ProfileError, match="differs"):
        merge_into(_base(), _imported(identity="id-else"), file="c.json")
