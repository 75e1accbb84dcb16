"""The input and output boundary (issue 10): every bad file or output path is exit 2 and one
line on stderr, never a traceback, a hang, a replaced device node or a partial output.

CLI cases run ``python -m placewise.cli`` as a user would; the readers and the writer of
``placewise.io`` are also tested directly.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from placewise.errors import InputError, ModelFormatError, SpecError
from placewise.io import (
    atomic_write_text,
    check_output_path,
    load_json,
    parse_json,
    parse_yaml,
    read_file_bytes,
    read_text,
)
from tests.cli_runner import run_cli
from tests.test_cli import run_together as cli_run_together

ROOT = os.geteuid() == 0


def _env() -> dict[str, str]:
    env = dict(os.environ, COLUMNS="120", TERM="dumb", PYTHONHASHSEED="0")
    env.pop("PLACEWISE_DEBUG", None)
    return env


def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return run_cli(args, env=_env(), timeout=timeout)


def run_together(*commands: list[str], timeout: float = 300
                 ) -> list[subprocess.CompletedProcess[str]]:
    """``run`` of each command, all started at once (each refuses its own input)."""
    return cli_run_together(*commands, env=_env(), timeout=timeout)


def assert_bad_input(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def no_files(folder: Path) -> list[str]:
    """Everything under ``folder`` (hidden temp files included)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


# ---- fixtures: a machine spec, a plan, small ONNX models --------------------------------------
def machine_dict() -> dict[str, Any]:
    return {
        "name": "m", "devices": [
            {"name": "cpu", "kind": "cpu", "peak_flops_per_s": {"fp32": 1.0e12},
             "peak_source": "test", "launch_overhead_s": 2.0e-6, "launch_source": "test",
             "memory": [{"name": "dram", "capacity_bytes": 2**34,
                         "bandwidth_bytes_per_s": 1.0e11, "source": "test"}]},
            {"name": "gpu0", "kind": "gpu", "peak_flops_per_s": {"fp32": 5.0e13},
             "peak_source": "test", "launch_overhead_s": 5.0e-6, "launch_source": "test",
             "memory": [{"name": "hbm", "capacity_bytes": 2**35,
                         "bandwidth_bytes_per_s": 2.0e12, "source": "test"}]}],
        "links": [{"name": "pcie", "endpoints": ["cpu", "gpu0"],
                   "bandwidth_bytes_per_s": 3.0e10, "latency_s": 1.0e-5, "source": "test"}]}


def write_machine(path: Path, text_edit: tuple[str, str] | None = None) -> Path:
    text = yaml.safe_dump(machine_dict(), sort_keys=False)
    if text_edit is not None:
        old, new = text_edit
        assert old in text, (old, text)
        text = text.replace(old, new, 1)
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def task_graph(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-task abstract graph: the model of the ``plan`` runs whose subject is another
    input (a spec, a calibration), so that no run waits for torch to load a zoo model."""
    path = tmp_path_factory.mktemp("model") / "two.json"
    path.write_text(json.dumps({
        "schema_version": 1, "name": "two",
        "tasks": [{"name": "a", "flops": 1e6}, {"name": "b", "flops": 1e6}],
        "edges": [{"src": "a", "dst": "b", "bytes": 8}]}))
    return path


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory: pytest.TempPathFactory, task_graph: Path) -> Path:
    folder = tmp_path_factory.mktemp("plan")
    path = folder / "plan.json"
    proc = run("plan", str(task_graph), "--hw", "h100-sxm-server", "--strategy", "greedy",
               "--out", str(path))
    assert proc.returncode == 0, proc.stderr
    return path


def onnx_model(*, names: dict[str, str] | None = None) -> Any:
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    n = {"node": "mm", "x": "x", "W": "W", "y": "y", **(names or {})}
    w = numpy_helper.from_array(np.ones((8, 4), dtype=np.float32), n["W"])
    graph = helper.make_graph(
        [helper.make_node("MatMul", [n["x"], n["W"]], [n["y"]], name=n["node"])], "g",
        [helper.make_tensor_value_info(n["x"], TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info(n["y"], TensorProto.FLOAT, [2, 4])], initializer=[w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def save_onnx(model: Any, path: Path, replace: tuple[bytes, bytes] | None = None) -> Path:
    data = model.SerializeToString()
    if replace is not None:
        old, new = replace
        assert len(old) == len(new) and old in data
        data = data.replace(old, new)
    path.write_bytes(data)
    return path


# ---- internal errors of the issue, now exit 2 -----------------------------------------------
@pytest.mark.parametrize("command", ["plan", "trace", "zoo export"])
@pytest.mark.parametrize("target", ["proc", "directory"])
def test_out_into_proc_or_onto_a_directory(tmp_path: Path, plan_file: Path, command: str,
                                           target: str) -> None:
    folder = tmp_path / "existing"
    folder.mkdir()
    out = "/proc/placewise-plan.json" if target == "proc" else str(folder)
    args = {"plan": ["plan", "zoo:mlp", "--hw", "h100-sxm-server", "--strategy", "greedy"],
            "trace": ["trace", str(plan_file)],
            "zoo export": ["zoo", "export", "mlp", "--format", "onnx"]}[command]
    line = assert_bad_input(run(*args, "--out", out), out, "--out")
    assert ("/proc" in line) if target == "proc" else ("is a directory" in line)
    assert not os.path.exists("/proc/placewise-plan.json")
    assert folder.is_dir() and no_files(folder) == []


@pytest.mark.parametrize("command", [["hw", "probe", "--quick"], ["profile", "zoo:mlp"]])
def test_probe_and_profile_check_out_before_measuring(tmp_path: Path, command: list[str]
                                                      ) -> None:
    assert_bad_input(run(*command, "--out", str(tmp_path), timeout=120), "is a directory")
    assert no_files(tmp_path) == []


def test_out_onto_dev_full_is_refused_and_the_device_stays(tmp_path: Path) -> None:
    before = os.stat("/dev/full")
    assert stat.S_ISCHR(before.st_mode)
    line = assert_bad_input(run("plan", "zoo:mlp", "--hw", "h100-sxm-server", "--strategy",
                                "greedy", "--out", "/dev/full"), "/dev/full")
    assert "character device" in line and "never replaces" in line
    after = os.stat("/dev/full")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev


def test_out_onto_a_fifo_is_refused(tmp_path: Path, plan_file: Path) -> None:
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    assert_bad_input(run("trace", str(plan_file), "--out", str(fifo), timeout=60), "FIFO")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert no_files(tmp_path) == ["trace.json"]


def deep_json(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


@pytest.mark.parametrize("depth", [65, 100_000])
def test_deeply_nested_task_graph(tmp_path: Path, depth: int) -> None:
    f = tmp_path / "deep.json"
    f.write_text('{"schema_version": 1, "tasks": [{"name": "a", "times_s": '
                 + deep_json(depth) + "}]}")
    assert_bad_input(run("inspect", str(f)), str(f), "nested more than 64 levels")


@pytest.mark.parametrize("style", ["flow", "block"])
def test_deeply_nested_machine_spec(tmp_path: Path, style: str) -> None:
    f = tmp_path / "deep.yaml"
    if style == "flow":
        f.write_text("name: m\ndevices: " + "[" * 50_000 + "]" * 50_000 + "\n")
    else:
        f.write_text("name: m\ndevices:\n" + "".join("  " * i + "- \n" for i in range(1, 200)))
    assert_bad_input(run("hw", "show", str(f)), str(f), "nested more than 64 levels")


def test_deeply_nested_plan(tmp_path: Path) -> None:
    f = tmp_path / "deep.json"
    f.write_text('{"schema_version": 1, "model": ' + "[" * 200_000 + "]" * 200_000 + "}")
    explain, check, proc = run_together(["explain", str(f)], ["check", str(f)],
                                        ["trace", str(f), "--out", str(tmp_path / "t.json")])
    for got in (explain, check):
        assert_bad_input(got, str(f), "nested more than 64 levels")
    assert_bad_input(proc, "nested")
    assert not (tmp_path / "t.json").exists()


def test_onnx_names_that_are_not_utf8(tmp_path: Path) -> None:
    f = save_onnx(onnx_model(names={"node": "node_AAAA"}), tmp_path / "names.onnx",
                  replace=(b"node_AAAA", b"node_\xff\xfeAA"))
    g = save_onnx(onnx_model(names={"y": "out_AAAA"}), tmp_path / "tensor.onnx",
                  replace=(b"out_AAAA", b"out_\xc3\x28AA"))
    node, tensor = run_together(["inspect", str(f)], ["inspect", str(g)])
    line = assert_bad_input(node, str(f), "not UTF-8")
    assert "graph.node[0].name" in line
    assert_bad_input(tensor, str(g), "not UTF-8")


def test_capacity_of_10_to_the_400(tmp_path: Path, task_graph: Path) -> None:
    f = write_machine(tmp_path / "m.yaml", ("capacity_bytes: 17179869184",
                                            "capacity_bytes: 1" + "0" * 400))
    out = tmp_path / "p.json"
    show, plan = run_together(["hw", "show", str(f)],
                              ["plan", str(task_graph), "--hw", str(f), "--strategy", "greedy",
                               "--out", str(out)])
    line = assert_bad_input(show, str(f), "capacity_bytes")
    assert "devices[0](cpu).memory[0](dram).capacity_bytes" in line and "0" * 100 not in line
    assert_bad_input(plan, "capacity_bytes")
    assert not out.exists()


@pytest.mark.parametrize("edit, place", [
    (("launch_overhead_s: 5.0e-06", "launch_overhead_s: .inf"), "devices[1](gpu0).launch_overhead_s"),
    (("bandwidth_bytes_per_s: 30000000000.0", "bandwidth_bytes_per_s: .inf"),
     "links[0](pcie).bandwidth_bytes_per_s"),
    (("launch_overhead_s: 5.0e-06", "launch_overhead_s: .nan"), "devices[1](gpu0).launch_overhead_s"),
    (("latency_s: 1.0e-05", "latency_s: 1.0e+300"), "links[0](pcie).latency_s"),
    (("bandwidth_bytes_per_s: 30000000000.0", "bandwidth_bytes_per_s: 1.0e-300"),
     "links[0](pcie).bandwidth_bytes_per_s"),
])
def test_non_finite_or_absurd_spec_numbers_are_refused_at_load(tmp_path: Path,
                                                               edit: tuple[str, str],
                                                               place: str,
                                                               task_graph: Path) -> None:
    f = write_machine(tmp_path / "m.yaml", edit)
    out = tmp_path / "p.json"
    show, plan = run_together(["hw", "show", str(f)],
                              ["plan", str(task_graph), "--hw", str(f), "--out", str(out)])
    assert_bad_input(show, str(f), place)
    assert_bad_input(plan, place)
    assert not out.exists()


def test_zoo_option_asking_for_terabytes(tmp_path: Path) -> None:
    ref = "zoo:mlp?hidden=1048576&layers=1000"
    out = tmp_path / "m.onnx"
    inspect, export = run_together(["inspect", ref], ["zoo", "export", "gpt?seq=1048576",
                                                      "--format", "onnx", "--out", str(out)])
    line = assert_bad_input(inspect, "zoo:mlp", "hidden=1048576", "TiB", "GiB")
    assert "more than the 16.00 GiB" in line
    assert_bad_input(export, "seq=1048576")
    assert not out.exists()


def test_onnx_initializer_whose_bytes_do_not_match_its_shape(tmp_path: Path) -> None:
    model = onnx_model()
    w = model.graph.initializer[0]
    w.raw_data = w.raw_data[:-4]  # 31 floats for an 8x4 tensor
    f = save_onnx(model, tmp_path / "short.onnx")
    line = assert_bad_input(run("inspect", str(f)), str(f), "initializer 'W'")
    assert "124 bytes of raw_data" in line and "needs 128" in line


# ---- files that are not regular files ----------------------------------------------------
def test_onnx_symlinked_to_dev_zero_is_refused_before_reading(tmp_path: Path) -> None:
    f = tmp_path / "zero.onnx"
    f.symlink_to("/dev/zero")
    assert_bad_input(run("inspect", str(f), timeout=60), str(f), "character device")


@pytest.mark.parametrize("name, command", [
    ("m.onnx", ["inspect"]), ("t.json", ["inspect"]), ("m.yaml", ["hw", "show"]),
    ("p.json", ["explain"]), ("p.json", ["check"]),
])
def test_a_fifo_as_input_never_blocks(tmp_path: Path, name: str, command: list[str]) -> None:
    fifo = tmp_path / name
    os.mkfifo(fifo)
    assert_bad_input(run(*command, str(fifo), timeout=60), str(fifo), "FIFO")


@pytest.mark.parametrize("command", [
    ["loop", "zoo:mlp?layers=1&hidden=8", "--hw", "local", "--trace", "{fifo}", "--out", "{out}"],
    ["plan", "zoo:mlp?layers=1&hidden=8", "--hw", "local", "--envelope", "batch=1,2",
     "--mix", "{fifo}", "--out", "{out}"],
    ["recalibrate", "--calibration", "{fifo}", "--telemetry", "{fifo}", "--out", "{out}"],
    ["promote", "--incumbent", "{fifo}", "--candidate", "{fifo}"],
])
def test_a_fifo_given_to_an_option_never_blocks(tmp_path: Path, command: list[str]) -> None:
    fifo, out = tmp_path / "in.fifo", tmp_path / "out.json"
    os.mkfifo(fifo)
    args = [a.format(fifo=fifo, out=out) for a in command]
    assert_bad_input(run(*args, timeout=60), str(fifo), "FIFO")
    assert not out.exists()


def test_a_directory_as_a_calibration(tmp_path: Path, task_graph: Path) -> None:
    out = tmp_path / "p.json"
    assert_bad_input(run("plan", str(task_graph), "--hw", "h100-sxm-server", "--calibration",
                         str(tmp_path), "--out", str(out)), str(tmp_path))
    assert not out.exists()


def test_an_onnx_file_over_the_size_limit_is_refused_unread(tmp_path: Path) -> None:
    f = tmp_path / "huge.onnx"
    with open(f, "wb") as fh:
        fh.truncate(3 << 30)  # sparse: 3 GiB of nothing, never read
    assert_bad_input(run("inspect", str(f), timeout=60), str(f), "3.0 GiB", "more than")


def test_a_yaml_alias_bomb(tmp_path: Path) -> None:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for prev, name in zip("abcdefgh", "bcdefghi", strict=False):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 10) + "]")
    f = tmp_path / "bomb.yaml"
    f.write_text("\n".join(lines) + "\n")
    assert_bad_input(run("hw", "show", str(f)), str(f), "alias")


def test_a_yaml_python_tag_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    f = tmp_path / "evil.yaml"
    f.write_text(f"name: !!python/object/apply:os.system ['touch {marker}']\n")
    assert_bad_input(run("hw", "show", str(f)), str(f), "invalid YAML")
    assert not marker.exists()


def test_calibration_with_non_finite_numbers(tmp_path: Path, task_graph: Path) -> None:
    cal = tmp_path / "cal.json"
    cal.write_text('{"format": "placewise-calibration", "version": 1, "machine": "x", '
                   '"settings": {"a": 1e999}}')
    out = tmp_path / "p.json"
    assert_bad_input(run("plan", str(task_graph), "--hw", "h100-sxm-server", "--calibration",
                         str(cal), "--out", str(out)), str(cal), "settings.a", "1e999")
    assert not out.exists()


# ---- the readers -------------------------------------------------------------------------
def test_read_file_bytes_limits(tmp_path: Path) -> None:
    f = tmp_path / "x.bin"
    f.write_bytes(b"0123456789")
    assert read_file_bytes(f, what="test file", limit_bytes=10) == b"0123456789"
    with pytest.raises(SpecError, match="more than a test file may hold") as e:
        read_file_bytes(f, what="test file", limit_bytes=9, error=SpecError)
    assert e.value.file == str(f)
    with pytest.raises(InputError, match="no such file"):
        read_file_bytes(tmp_path / "nope", what="test file", limit_bytes=10)
    with pytest.raises(InputError, match="directory"):
        read_file_bytes(tmp_path, what="test file", limit_bytes=10)
    link = tmp_path / "link.bin"
    link.symlink_to(f)
    assert read_file_bytes(link, what="test file", limit_bytes=10) == b"0123456789"
    (tmp_path / "bad.txt").write_bytes(b"ok \xff")
    with pytest.raises(InputError, match=r"not UTF-8 text.*byte 3"):
        read_text(tmp_path / "bad.txt", what="test file", limit_bytes=10)


def test_read_stops_at_the_limit_when_the_file_grows(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import placewise.io as pio

    f = tmp_path / "grows.json"
    f.write_bytes(b"x" * 100)
    real_stat = os.stat

    def small_stat(path: Any, *a: Any, **k: Any) -> os.stat_result:
        st = real_stat(path, *a, **k)
        if os.fspath(path) != str(f):
            return st
        return os.stat_result((*tuple(st)[:6], 5, *tuple(st)[7:]))  # says 5 bytes

    monkeypatch.setattr(pio.os, "stat", small_stat)
    with pytest.raises(InputError, match="grew past"):
        pio.read_file_bytes(f, what="task graph", limit_bytes=10)


@pytest.mark.parametrize("text, place, words", [
    ('{"a": [1, 1e999]}', "a[1]", "1e999 is not finite"),
    ('{"a": NaN}', "a", "NaN is not finite"),
    ('{"a": {"b": -Infinity}}', "a.b", "-Infinity is not finite"),
    ('{"a": ' + "1" + "0" * 400 + "}", "a", "(401 digits) is too large"),
    ('{"a": 1e200}', "a", "too large"),
    ('{"a": [' + "9" * 5000 + "]}", "a[0]", "(5000 digits) is too large"),
])
def test_json_numbers_must_be_finite(text: str, place: str, words: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_json(text, file="f.json", error=SpecError)
    assert e.value.file == "f.json" and e.value.place == place
    assert words in e.value.problem


def test_json_depth_is_checked_before_parsing() -> None:
    assert parse_json("[" * 64 + "]" * 64, file="f.json") == parse_json(
        "[" * 64 + "]" * 64, file="f.json")
    assert parse_json('{"s": "' + "[" * 1000 + '"}', file="f.json") == {"s": "[" * 1000}
    with pytest.raises(InputError, match="nested more than 64"):
        parse_json("[" * 65 + "]" * 65, file="f.json")
    with pytest.raises(InputError, match="nested more than 64"):
        parse_json("[" * 1_000_000, file="f.json")
    with pytest.raises(InputError, match="line 1 column 5"):
        parse_json('{"a"', file="f.json")


def test_yaml_reader() -> None:
    assert parse_yaml("a: &x [1, 2]\nb: *x\n", file="m.yaml") == {"a": [1, 2], "b": [1, 2]}
    for text, words in (("a: .inf\n", "not finite"), ("a: .nan\n", "not finite"),
                        ("a: 1\n---\nb: 2\n", "more than one YAML document"),
                        ("d: 2023-13-45\n", "invalid YAML"),
                        ("a: [" * 65 + "]" * 65, "nested more than 64"),
                        ("a: " + "1" + "0" * 400 + "\n", "too large")):
        with pytest.raises(InputError, match=words):
            parse_yaml(text, file="m.yaml")


def test_load_json_error_class_and_file(tmp_path: Path) -> None:
    f = tmp_path / "x.json"
    f.write_text('{"a": NaN}')
    with pytest.raises(ModelFormatError) as e:
        load_json(f, what="thing", error=ModelFormatError)
    assert e.value.file == str(f) and e.value.place == "a"


# ---- the writer --------------------------------------------------------------------------
def test_check_output_path(tmp_path: Path) -> None:
    assert check_output_path(tmp_path / "new.json") == tmp_path / "new.json"
    assert check_output_path(tmp_path / "a" / "b" / "new.json")  # parents get created
    (tmp_path / "old.json").write_text("{}")
    check_output_path(tmp_path / "old.json")
    link = tmp_path / "null.json"
    link.symlink_to("/dev/null")
    with pytest.raises(InputError, match="character device"):
        check_output_path(link)
    with pytest.raises(InputError, match="/sys"):
        check_output_path("/sys/kernel/x.json")
    (tmp_path / "file").write_text("")
    with pytest.raises(InputError, match="not a folder"):
        check_output_path(tmp_path / "file" / "x.json")


@pytest.mark.skipif(ROOT, reason="root can write into a read-only folder")
def test_unwritable_folder(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(InputError, match="not writable"):
            atomic_write_text(ro / "x.json", "{}")
    finally:
        ro.chmod(0o700)


def test_atomic_write_creates_parents_and_leaves_nothing_on_failure(tmp_path: Path) -> None:
    from placewise.io import atomic_writer

    target = tmp_path / "deep" / "er" / "x.json"
    atomic_write_text(target, "{}\n")
    assert target.read_text() == "{}\n"

    def fail(p: Path) -> None:
        p.write_text("half")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        atomic_writer(target, fail)
    assert target.read_text() == "{}\n"
    assert no_files(tmp_path / "deep" / "er") == ["x.json"]


def test_no_space_left_is_an_input_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                         ) -> None:
    import placewise.io as pio

    def full(p: Path) -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(InputError, match="No space left") as e:
        pio.atomic_writer(tmp_path / "x.json", full)
    assert e.value.file == str(tmp_path / "x.json")
    assert no_files(tmp_path) == []


def test_calibration_save_goes_through_the_boundary(tmp_path: Path) -> None:
    from placewise.cost.calibrated import Calibration, load_calibration

    cal = Calibration.empty("local")
    with pytest.raises(InputError, match="character device"):
        cal.save("/dev/full")
    path = cal.save(tmp_path / "c.json")
    assert load_calibration(path) == cal
    assert json.loads(path.read_text())["machine"] == "local"
