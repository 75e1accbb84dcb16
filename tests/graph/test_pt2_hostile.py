"""Hostile ``.pt2`` archives (issue 10): reading one never runs code of its choosing.

Each archive carries a live payload -- a pickle, a sympy expression, guard code, a module
import -- that would create a marker file if torch evaluated it (the controls show that they
do). Reading must raise ``ModelFormatError`` naming the entry (CLI: exit 2, one line) and the
marker must never appear.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import json
import os
import pickle
import subprocess
import uuid
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from placewise.errors import ModelFormatError
from placewise.graph import pt2
from placewise.graph.torch_import import load_pt2, read_pt2
from tests.test_cli import assert_bad_input, run, run_together


class _Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(6, 5)
        self.register_buffer("shift", torch.ones(5))
        self.table = torch.arange(5.0)  # a lifted tensor constant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.lin(x) + self.shift + self.table)


def _save(path: Path, *, dynamic: bool = False) -> Path:
    shapes = ({0: torch.export.Dim("batch", min=2, max=64)},) if dynamic else None
    ep = torch.export.export(_Tiny(), (torch.randn(4, 6),), dynamic_shapes=shapes, strict=False)
    torch.export.save(ep, str(path))
    return path


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _save(tmp_path_factory.mktemp("pt2") / "clean.pt2")


@pytest.fixture(scope="module")
def dynamic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _save(tmp_path_factory.mktemp("pt2") / "dynamic.pt2", dynamic=True)


class _Touch:
    """Unpickling this creates ``path`` (``builtins.exec`` of a one-line program)."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[str]]:
        return (builtins.exec, (f"import pathlib; pathlib.Path({self.path!r}).touch()",))


def _pickle(marker: Path) -> bytes:
    return pickle.dumps(_Touch(marker))


def _torch_save_pickle(marker: Path) -> bytes:
    """A ``torch.save`` archive whose ``data.pkl`` is the payload (what torch.load reads)."""
    buf = io.BytesIO()
    torch.save({"x": torch.zeros(1)}, buf)
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, _pickle(marker) if info.filename.endswith("data.pkl") else data)
    return out.getvalue()


def _rewrite(src: Path, dst: Path, *, add: Mapping[str, bytes] | None = None,
             replace: Mapping[str, bytes] | None = None, drop: tuple[str, ...] = (),
             top: Mapping[str, bytes] | None = None) -> Path:
    """``src`` copied to ``dst`` (folder renamed to dst's stem); names relative to it."""
    root = dst.stem
    with zipfile.ZipFile(src) as zi, zipfile.ZipFile(dst, "w") as zo:
        for info in zi.infolist():
            rel = info.filename.split("/", 1)[1]
            if rel not in drop:
                zo.writestr(f"{root}/{rel}", (replace or {}).get(rel, zi.read(info)))
        for rel, data in (add or {}).items():
            zo.writestr(f"{root}/{rel}", data)
        for name, data in (top or {}).items():
            zo.writestr(name, data)
    return dst


def _entry(path: Path, rel: str) -> bytes:
    with zipfile.ZipFile(path) as zf:
        return zf.read(f"{path.stem}/{rel}")


def _program(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(_entry(path, "models/model.json"))
    return data


# ---- the variants of issue 10 ------------------------------------------------------------------


def _constants_pickle(clean: Path, dst: Path, marker: Path) -> Path:
    return _rewrite(clean, dst, add={"data/constants/model.pt": _torch_save_pickle(marker)})


def _weights_pickle(clean: Path, dst: Path, marker: Path) -> Path:
    return _rewrite(clean, dst, add={"data/weights/model.pt": _torch_save_pickle(marker)})


def _legacy_top(clean: Path, dst: Path, marker: Path) -> Path:
    # without archive_version torch's reader fails and torch.export.load takes its pre-2.7
    # path, which unpickles the serialized_*.pt files at the top of the archive
    evil = _torch_save_pickle(marker)
    return _rewrite(clean, dst, drop=("archive_version",), top={
        "version": b"8.20", "serialized_exported_program.json": _entry(clean, "models/model.json"),
        "serialized_state_dict.pt": evil, "serialized_constants.pt": evil,
        "serialized_example_inputs.pt": evil})


def _model_without_json(clean: Path, dst: Path, marker: Path) -> Path:
    # torch loads every models/* entry as a program, named by cutting 5 characters off:
    # models/pwned.bin0 is program "pwned", whose sample inputs it unpickles
    return _rewrite(clean, dst, add={
        "models/pwned.bin0": _entry(clean, "models/model.json"),
        "data/weights/pwned_weights_config.json":
            _entry(clean, "data/weights/model_weights_config.json"),
        "data/constants/pwned_constants_config.json":
            _entry(clean, "data/constants/model_constants_config.json"),
        "data/sample_inputs/pwned.pt": _torch_save_pickle(marker)})


def _use_pickle_weight(clean: Path, dst: Path, marker: Path) -> Path:
    config = json.loads(_entry(clean, "data/weights/model_weights_config.json"))
    first = next(iter(config["config"].values()))
    first["use_pickle"] = True
    return _rewrite(clean, dst, replace={
        "data/weights/model_weights_config.json": json.dumps(config).encode(),
        "data/weights/" + first["path_name"]: _torch_save_pickle(marker)})


def _sample_inputs_pickle(clean: Path, dst: Path, marker: Path) -> Path:
    return _rewrite(clean, dst, replace={"data/sample_inputs/model.pt": _torch_save_pickle(marker)})


def _sympy_expression(clean: Path, dst: Path, marker: Path) -> Path:
    # torch parses symbolic sizes with sympy.sympify, which evaluates the text
    prog = _program(clean)
    tv = prog["graph_module"]["graph"]["tensor_values"]
    first = next(iter(tv.values()))
    first["sizes"][0] = {"as_expr": {"expr_str": f"__import__('pathlib').Path({str(marker)!r})"
                                                 f".touch() or 4", "hint": {"as_int": 4}}}
    return _rewrite(clean, dst, replace={"models/model.json": json.dumps(prog).encode()})


def _guard_code(clean: Path, dst: Path, marker: Path) -> Path:
    # ExportedProgram.module() exec-s guards_code
    prog = _program(clean)
    prog["guards_code"] = [f"__import__('pathlib').Path({str(marker)!r}).touch() is None"]
    return _rewrite(clean, dst, replace={"models/model.json": json.dumps(prog).encode()})


def _enum_import(clean: Path, dst: Path, marker: Path) -> Path:
    # a pytree context naming an enum makes torch import the module it names
    name = f"pw_hostile_{uuid.uuid4().hex}"  # never imported before
    (dst.parent / f"{name}.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n")
    prog = _program(clean)
    sig = prog["graph_module"]["module_call_graph"][0]["signature"]
    enum = {"__enum__": True, "fqn": f"{name}:E", "name": "A"}
    spec = json.loads(sig["in_spec"])
    spec[1]["children_spec"][1]["context"] = json.dumps([enum])
    sig["in_spec"] = json.dumps(spec)
    return _rewrite(clean, dst, replace={"models/model.json": json.dumps(prog).encode()})


VARIANTS: dict[str, tuple[Callable[[Path, Path, Path], Path], str, str]] = {
    # name: (builder, entry named in the error, words in the error)
    "pickle at data/constants/model.pt": (_constants_pickle, "data/constants/model.pt", "pickled"),
    "pickle at data/weights/model.pt": (_weights_pickle, "data/weights/model.pt", "pickled"),
    "old-format files at the top": (_legacy_top, "version", "old"),
    "models/NAME without .json": (_model_without_json, "models/pwned.bin0", "program"),
    "use_pickle weight": (_use_pickle_weight, "data/weights/model_weights_config.json",
                          "pickled"),
    "pickled sample inputs": (_sample_inputs_pickle, "data/sample_inputs/model.pt",
                              "sample inputs"),
    "sympy expression": (_sympy_expression, "models/model.json", "symbolic expression"),
    "guard code": (_guard_code, "models/model.json", "guard code"),
    "enum import": (_enum_import, "models/model.json", "enum"),
}


@pytest.fixture
def marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(tmp_path))  # where the enum variant's module lies
    return tmp_path / "MARKER"


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_hostile_archive_is_refused_without_running_it(clean: Path, tmp_path: Path,
                                                       marker: Path, variant: str) -> None:
    build, entry, words = VARIANTS[variant]
    path = build(clean, tmp_path / "hostile.pt2", marker)
    for read in (read_pt2, load_pt2):
        with pytest.raises(ModelFormatError) as err:
            read(path)
        assert err.value.file == str(path)
        assert err.value.place == f"entry {entry!r}", err.value
        assert words in err.value.problem, err.value
        assert not marker.exists()
    # the executable-source loader (profile, validate) goes through the same reader
    from placewise.runtime.opexec import load_source

    with pytest.raises(ModelFormatError):
        load_source(str(path))
    assert not marker.exists()


CLI_VARIANTS = ["pickle at data/constants/model.pt", "old-format files at the top",
                "models/NAME without .json", "sympy expression"]
Inspected = dict[str, tuple[Path, Path, subprocess.CompletedProcess[str]]]


@pytest.fixture(scope="module")
def cli_inspected(clean: Path, tmp_path_factory: pytest.TempPathFactory) -> Inspected:
    """``placewise inspect`` of each CLI variant's archive (variant -> archive, its marker,
    the finished process) and of the clean export (``"clean"``), the processes side by
    side: each only reads its file and refuses it or counts it."""
    cases: dict[str, tuple[Path, Path]] = {}
    for variant in CLI_VARIANTS:
        folder = tmp_path_factory.mktemp("cli")
        marker = folder / "MARKER"
        cases[variant] = (VARIANTS[variant][0](clean, folder / "hostile.pt2", marker), marker)
    cases["clean"] = (clean, tmp_path_factory.mktemp("cli") / "MARKER")
    procs = run_together(*[["inspect", str(p), *(["--json"] if v == "clean" else [])]
                           for v, (p, _) in cases.items()])
    return {v: (p, m, proc) for (v, (p, m)), proc in zip(cases.items(), procs, strict=True)}


@pytest.mark.parametrize("variant", CLI_VARIANTS)
def test_cli_inspect_of_a_hostile_archive_exits_2(cli_inspected: Inspected,
                                                  variant: str) -> None:
    _, entry, _ = VARIANTS[variant]
    path, marker, proc = cli_inspected[variant]
    assert_bad_input(proc, str(path), f"entry {entry!r}")
    assert not marker.exists()


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_control_torch_alone_runs_each_payload(clean: Path, tmp_path: Path, marker: Path,
                                               variant: str) -> None:
    """Control: ``torch.export.load`` on its own (and the program it returns) runs every
    payload above, so the tests that refuse them test something."""
    path = VARIANTS[variant][0](clean, tmp_path / "hostile.pt2", marker)
    with contextlib.suppress(Exception):
        ep = torch.export.load(str(path))
        ep.module()(torch.randn(4, 6))
    assert marker.exists()


def test_the_payloads_are_live(clean: Path, tmp_path: Path) -> None:
    """Controls: the payloads do run where placewise's reader is not in the way."""
    m1 = tmp_path / "m1"
    pickle.loads(_pickle(m1))
    assert m1.exists()
    m2 = tmp_path / "m2"
    torch.load(io.BytesIO(_torch_save_pickle(m2)), weights_only=False)
    assert m2.exists()
    m3 = tmp_path / "m3"
    import sympy

    sympy.sympify(f"__import__('pathlib').Path({str(m3)!r}).touch()")
    assert m3.exists()


def test_weights_only_is_forced_with_no_fallback(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """While torch loads an archive, even ``torch.load(weights_only=False)`` (the fallback
    torch's deserializer takes when a weights-only load fails) cannot unpickle, whatever the
    user's environment says; the environment is restored after."""
    marker = tmp_path / "MARKER"
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    monkeypatch.delenv("TORCH_FORCE_WEIGHTS_ONLY_LOAD", raising=False)
    with pt2._weights_only_forced(), pytest.raises(pickle.UnpicklingError):
        torch.load(io.BytesIO(_torch_save_pickle(marker)), weights_only=False)
    assert not marker.exists()
    assert os.environ.get("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD") == "1"
    assert "TORCH_FORCE_WEIGHTS_ONLY_LOAD" not in os.environ


def test_a_program_calling_a_python_function_is_refused(clean: Path, tmp_path: Path) -> None:
    ep = read_pt2(clean)
    marker = tmp_path / "MARKER"
    graph = ep.graph_module.graph
    out = next(n for n in graph.nodes if n.op == "output")
    with graph.inserting_before(out):
        graph.call_function(os.system, (f"touch {marker}",))
    with pytest.raises(ModelFormatError, match="not a torch operator") as err:
        pt2.check_program(ep, file="x.pt2")
    assert err.value.place is not None and "fx node" in err.value.place
    assert not marker.exists()


@pytest.mark.parametrize("change,entry,words", [
    (lambda c, d: _rewrite(c, d, add={"data/aotinductor/model/model.so": b"\x7fELF"}),
     "data/aotinductor/model/model.so", "compiled code"),
    (lambda c, d: _rewrite(c, d, add={"data/weights/weight_9": b"\0" * 8}),
     "data/weights/weight_9", "names this payload"),
    (lambda c, d: _rewrite(c, d, top={"notes.txt": b"hi"}), "notes.txt", "top of the archive"),
    (lambda c, d: _rewrite(c, d, add={"notes.txt": b"hi"}), "notes.txt", "kind"),
    (lambda c, d: _rewrite(c, d, add={"data/misc": b"?"}), "data/misc", "kind"),
    (lambda c, d: _rewrite(c, d, replace={"byteorder": b"big"}), "byteorder", "endian"),
])
def test_unknown_or_malformed_entries_are_refused(clean: Path, tmp_path: Path, change: Any,
                                                  entry: str, words: str) -> None:
    path = change(clean, tmp_path / "odd.pt2")
    with pytest.raises(ModelFormatError) as err:
        read_pt2(path)
    assert err.value.place == f"entry {entry!r}" and words in err.value.problem, err.value


def test_compressed_duplicated_and_oversized_payloads_are_refused(clean: Path,
                                                                  tmp_path: Path) -> None:
    deflated = tmp_path / "deflated.pt2"
    with zipfile.ZipFile(clean) as zi, zipfile.ZipFile(deflated, "w",
                                                      zipfile.ZIP_DEFLATED) as zo:
        for info in zi.infolist():
            zo.writestr(info.filename.replace("clean/", "deflated/"), zi.read(info))
    with pytest.raises(ModelFormatError, match="compressed"):
        read_pt2(deflated)
    twice = tmp_path / "twice.pt2"
    with zipfile.ZipFile(clean) as zi, zipfile.ZipFile(twice, "w") as zo:
        for info in zi.infolist():
            zo.writestr(info.filename.replace("clean/", "twice/"), zi.read(info))
        with pytest.warns(UserWarning):  # zipfile warns about the duplicate name
            zo.writestr("twice/byteorder", b"little")
    with pytest.raises(ModelFormatError, match="twice"):
        read_pt2(twice)
    # a weight whose sizes need more elements than its file holds (torch would allocate)
    config = json.loads(_entry(clean, "data/weights/model_weights_config.json"))
    meta = next(iter(config["config"].values()))
    meta["tensor_meta"]["sizes"][0] = {"as_int": 1 << 40}
    big = _rewrite(clean, tmp_path / "big.pt2", replace={
        "data/weights/model_weights_config.json": json.dumps(config).encode()})
    with pytest.raises(ModelFormatError, match="needs"):
        read_pt2(big)


def test_files_that_are_not_regular_or_too_large(tmp_path: Path, clean: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    link = tmp_path / "zero.pt2"
    link.symlink_to("/dev/zero")
    with pytest.raises(ModelFormatError, match="not a regular file"):
        read_pt2(link)
    assert_bad_input(run("inspect", str(link)), str(link), "regular file")
    folder = tmp_path / "dir.pt2"
    folder.mkdir()
    with pytest.raises(ModelFormatError, match="directory"):
        read_pt2(folder)
    monkeypatch.setattr(pt2, "MAX_PT2_BYTES", 1000)
    with pytest.raises(ModelFormatError, match="more than"):
        read_pt2(clean)


# ---- what must still load -----------------------------------------------------------------------


def test_a_clean_export_still_loads(clean: Path, dynamic: Path) -> None:
    g = load_pt2(clean)
    assert g.name == "clean" and [o.kind.value for o in g.ops][-1] == "relu"
    x = torch.randn(4, 6)
    trusted = torch.export.load(str(clean))  # this test wrote the file
    assert torch.equal(read_pt2(clean).module()(x), trusted.module()(x))
    # dynamic shapes: symbolic expressions of the plain kind pass
    assert "Symbol(" in json.dumps(_program(dynamic))
    g = load_pt2(dynamic)
    assert isinstance(g.tensor(g.inputs[0]).shape[0], str)
    assert read_pt2(dynamic).module()(torch.randn(3, 6)).shape == (3, 5)


def test_cli_inspect_of_a_clean_export(cli_inspected: Inspected) -> None:
    proc = cli_inspected["clean"][2]
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["ops"] >= 3


@pytest.mark.parametrize("name", ["mlp", "resnet", "bert", "gpt", "inception"])
def test_every_zoo_export_loads(tmp_path: Path, name: str) -> None:
    from placewise.graph import zoo

    path = tmp_path / f"{name}.pt2"
    zoo.export_pt2(name, {}, path)
    assert load_pt2(path).ops


def test_guards_and_expressions_checks() -> None:
    ok = ["Symbol('s77', positive=True, integer=True)", "Integer(-3)",
          "Add(FloorDiv(Mul(Integer(3), Symbol('s0', integer=True)), Integer(2)), Integer(1))",
          "Max(Integer(1), Symbol('s1'))", "Float('1.5', precision=53)", "-oo",
          "Piecewise((Integer(1), StrictLessThan(Symbol('s0'), Integer(4))), (Integer(0), true))"]
    for text in ok:
        pt2.check_sym_expr(text, file="f", entry="e")
    bad = ["Symbol('s0').__class__", "Max('__import__(\"os\")')", "Symbol('a b')", "lambda: 1",
           "[x for x in ()]", "exec('1')", "Float('nan; 1')", "Symbol('s', **{})", "b'x'",
           "Add(Symbol('s0'), f(1))", "(" * 500 + ")" * 500]
    for text in bad:
        with pytest.raises(ModelFormatError):
            pt2.check_sym_expr(text, file="f", entry="e")
    for guard in ["((4*L['y'].size()[0] + 4*L['x'].size()[0]) % (2*L['x'].size()[0])) == 0",
                  "2 <= L['x'].size()[0]", "L['x'].stride()[0] == 1 and L['x'].dim() == 2",
                  "Max(1, L['x'].size()[0]) <= math.floor(64.0)"]:
        pt2.check_guard_code(guard, file="f", entry="e")
    for guard in ["L['x'].size().__class__", "L['x\") or print(1) or (\"'].size()[0] > 0",
                  "print(1)", "L['x'].numpy()", "args[0].size()[0] > 0", "L.__dict__"]:
        with pytest.raises(ModelFormatError):
            pt2.check_guard_code(guard, file="f", entry="e")
