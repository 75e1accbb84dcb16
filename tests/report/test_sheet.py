"""The operator-to-kernel mapping sheet (placewise.report.sheet) and ``placewise sheet``."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from placewise.errors import InputError
from placewise.plan import Plan, save_plan
from placewise.report.sheet import (
    SHEET_COLUMNS,
    SheetRow,
    mapping_sheet,
    sheet_summary,
    vertex_partitions,
    write_sheet_csv,
)
from placewise.runtime.program import plan_partitions, program_from_plan
from placewise.schedule import Assignment
from placewise.schedule.simulate import TaskKind
from placewise.units import DType
from tests.test_cli import assert_bad_input, run
from tests.test_utilization import F_MM1, F_RELU, hand_plan, validated_tiny

CONTRACT = ("op", "module_path", "region", "partition", "device", "precision", "kernel",
            "assumption", "bottleneck", "predicted_s", "measured_s")


@pytest.fixture(scope="module")
def validated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Plan, Any, dict[str, Any], Path]:
    return validated_tiny(str(tmp_path_factory.getbasetemp()))


def _by_region(rows: list[SheetRow]) -> dict[str, list[SheetRow]]:
    out: dict[str, list[SheetRow]] = {}
    for r in rows:
        out.setdefault(r.region, []).append(r)
    return out


def test_one_row_per_op_with_the_contract_columns() -> None:
    from tests.plan_fixtures import mlp_setup

    prob, plan = mlp_setup()  # zoo:mlp on h100-sxm-server: cpu, then gpu0 in bf16
    rows = mapping_sheet(plan, graph=prob.graph)
    assert set(CONTRACT) <= set(SHEET_COLUMNS)
    assert sorted(r.op for r in rows) == sorted(plan.ops)
    order = [t.vertex for t in plan.schedule.tasks
             if t.kind is TaskKind.COMPUTE and t.vertex is not None]
    assert [r.op for r in rows] == [o for v in order for o in plan.regions[v].ops]
    parts = {p.name: p for p in plan_partitions(plan, prob.graph, prob.machine)}
    tasks = plan.task_index()
    for r in rows:
        op = prob.graph.op(r.op)
        assert r.region == plan.ops[r.op].vertex and r.kind == op.kind.value
        assert r.module_path == op.provenance.module_path != ""
        assert op.provenance.source_op in r.kernel
        assert r.op in {o.name for o in parts[r.partition].ops}  # the executor's partition
        assert (r.device, r.precision) == (plan.placement[r.region]["device"],
                                           plan.placement[r.region]["dtype"])
        assert r.bottleneck == tasks[r.region].bottleneck.value
        assert "model=roofline" in r.assumption
        assert r.measured_s is None and r.measured_from == ""
        assert ("CUDAExecutionProvider" if r.device == "gpu0" else "CPUExecutionProvider") \
            in r.provider
    assert {r.precision for r in rows} == {"fp32", "bf16"}
    for v, rs in _by_region(rows).items():  # the region's time, apportioned
        assert sum(r.share for r in rs) == pytest.approx(1.0)
        assert sum(r.predicted_s for r in rs) == pytest.approx(tasks[v].duration_s)
        assert all(r.region_predicted_s == tasks[v].duration_s for r in rs)
    s = sheet_summary(rows)
    assert s["rows"] == len(plan.ops) and s["regions"] == len(plan.regions)
    assert s["predicted_s"] == pytest.approx(sum(
        t.duration_s for t in plan.schedule.tasks if t.kind is TaskKind.COMPUTE))


def test_a_fused_region_is_split_by_flops_when_compute_bound() -> None:
    gpu = Assignment("gpu", DType.FP32)
    plan, prob = hand_plan({"mm1": gpu, "mm2": gpu}, fused=True)
    rows = {r.op: r for r in mapping_sheet(plan, graph=prob.graph, machine=prob.machine)}
    assert rows["mm1"].region == rows["relu"].region == "mm1"
    assert rows["mm1"].bottleneck == "compute"  # the toy region is compute-bound
    assert rows["mm1"].share_basis == "flops"
    assert rows["mm1"].share == pytest.approx(F_MM1 / (F_MM1 + F_RELU))
    assert rows["relu"].share == pytest.approx(F_RELU / (F_MM1 + F_RELU))
    assert (rows["mm2"].share, rows["mm2"].share_basis) == (1.0, "single op")
    assert vertex_partitions(plan, prob.graph, prob.machine) == {"mm1": "p0.gpu", "mm2": "p0.gpu"}


def test_csv_round_trip(tmp_path: Path) -> None:
    from tests.plan_fixtures import mlp_setup

    prob, plan = mlp_setup()
    rows = mapping_sheet(plan, graph=prob.graph)
    path = tmp_path / "sheet.csv"
    write_sheet_csv(rows, path)
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames or ()) == SHEET_COLUMNS
        back = list(reader)
    assert len(back) == len(rows)
    for r, b in zip(rows, back, strict=True):
        for k, v in r.to_json().items():
            if v is None:
                assert b[k] == ""
            elif isinstance(v, float):
                assert float(b[k]) == v
            else:
                assert b[k] == str(v)
    # a path that cannot be a file is refused before anything is written
    with pytest.raises(InputError):
        write_sheet_csv(rows, tmp_path)


def test_the_measured_columns_come_from_the_validation(
        validated: tuple[Plan, Any, dict[str, Any], Path]) -> None:
    plan, prob, data, _ = validated
    # the sheet's partitions are the ones the executor ran
    assert plan_partitions(plan, prob.graph, prob.machine) == list(
        program_from_plan(plan, prob.graph, prob.machine).partitions)
    rows = mapping_sheet(plan, data, graph=prob.graph, machine=prob.machine)
    op_s = {op: s for p in data["nodes"]["partitions"] for op, s in p["op_s"].items()}
    part_s = {t["task"]: t["measured_s"] for t in data["attribution"]["latency"]["tasks"]
              if t["kind"] == "compute"}
    assert sorted(r.op for r in rows) == sorted(plan.ops)
    for r in rows:
        assert r.measured_from == "node profile"
        assert r.measured_s == op_s[r.op]
        assert r.partition_measured_s == part_s[r.partition]
        assert r.region_measured_s == pytest.approx(
            sum(op_s[o] for o in plan.regions[r.region].ops))
    assert any("@CPUExecutionProvider" in r.kernel for r in rows)  # onnxruntime's nodes
    # without the node profiles, only the partitions' times are there
    bare = mapping_sheet(plan, dict(data, nodes=None), graph=prob.graph, machine=prob.machine)
    for r in bare:
        assert r.partition_measured_s == part_s[r.partition]
        assert r.measured_from in ("partition only", "partition of this op alone")
        assert (r.measured_s is None) == (r.measured_from == "partition only")
        assert "@" not in r.kernel


def test_a_validation_of_another_plan_is_refused(
        validated: tuple[Plan, Any, dict[str, Any], Path]) -> None:
    from tests.plan_fixtures import mlp_setup

    _, _, data, _ = validated
    prob, plan = mlp_setup()
    with pytest.raises(InputError, match="another plan") as e:
        mapping_sheet(plan, data, graph=prob.graph, validation_file="v.json")
    assert e.value.file == "v.json"


def test_cli_sheet_exit_codes(validated: tuple[Plan, Any, dict[str, Any], Path],
                              tmp_path: Path) -> None:
    from tests.plan_fixtures import mlp_setup
    from tests.runtime.helpers import local_machine

    plan, _, data, vfile = validated
    plan_file = tmp_path / "plan.json"
    save_plan(plan, plan_file)
    hw = tmp_path / "machine.yaml"
    hw.write_text(yaml.safe_dump(local_machine().model_dump(mode="json", exclude_none=True)))
    out = tmp_path / "sheet.csv"
    ok = run("sheet", str(plan_file), "--validation", str(vfile), "--hw", str(hw),
             "--out", str(out), "--json")
    assert ok.returncode == 0, ok.stderr
    got = json.loads(ok.stdout)
    assert got["rows"] == len(plan.ops) and got["out"] == str(out)
    assert got["columns"] == list(SHEET_COLUMNS)
    util = got["utilization"]
    assert util["measured"] is not None and util["measured"]["per_node"] is True
    assert util["mfu"] > 0 and not math.isnan(util["mfu"])
    with out.open(newline="") as f:
        assert len(list(csv.DictReader(f))) == len(plan.ops)
    # another plan's validation: exit 2 naming the file, nothing written
    _, other = mlp_setup()
    other_file = tmp_path / "other.json"
    save_plan(other, other_file)
    out2 = tmp_path / "other.csv"
    bad = run("sheet", str(other_file), "--validation", str(vfile), "--out", str(out2))
    assert_bad_input(bad, str(vfile), "another plan")
    assert not out2.exists()
    # a corrupt validation JSON: exit 2 naming the file
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text(json.dumps(data)[:100])
    bad2 = run("sheet", str(plan_file), "--validation", str(corrupt), "--hw", str(hw),
               "--out", str(out2))
    assert_bad_input(bad2, str(corrupt))
    assert not out2.exists()
    # the preset plan, no validation: the summary table
    text = run("sheet", str(other_file), "--out", str(out2))
    assert text.returncode == 0, text.stderr
    assert "MFU" in text.stdout and "by layer type" in text.stdout and out2.exists()
