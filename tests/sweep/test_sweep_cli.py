"""``placewise sweep`` on the command line: a run with --json and --csv, bad input -> exit 2
with one line and no output file, a missing Ray."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tests.test_cli import run, run_together

BASE = ["sweep", "--model", "zoo:mlp", "--hw", "a100-pcie-server", "--batch", "1,2"]


def test_sweep_json_and_csv(tmp_path: Path) -> None:
    out, csv = tmp_path / "s.json", tmp_path / "s.csv"
    r = run(*BASE, "--out", str(out), "--csv", str(csv), "--slo", "1s", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert json.loads(out.read_text()) == doc
    assert doc["fit_matrix"]["slo_s"] == 1.0 and doc["fit_matrix"]["cells"][0]["fits"]
    assert [c["batch"] for c in doc["cells"]] == [1, 2]
    assert len(csv.read_text().splitlines()) == 3


def test_sweep_table(tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    r = run(*BASE, "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "fit matrix" in r.stdout and "a100-pcie-server" in r.stdout
    assert "2 cells (2 fit) on local" in r.stdout


def test_bad_input_exit_2(tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    cases = [
        (["--batch", "0"], "--batch"),
        (["--batch", "a"], "--batch"),
        (["--hw", "no-such-preset"], "no-such-preset"),
        (["--model", "zoo:nosuch"], "nosuch"),
        (["--objective", "fast"], "--objective"),
        (["--precision", "fp7"], "fp7"),
        (["--slo", "soon"], "--slo"),
        (["--time-limit", "0"], "--time-limit"),
        (["--time-limit", "0.01"], "too short"),  # refused by the first cell's search
        (["--engine", "spark"], "--engine"),
        (["--ray-address", "auto"], "--ray-address"),
        (["--hw", "a100-pcie-server"], "given twice"),
    ]
    commands = []
    for extra, _ in cases:
        args = list(BASE)
        for flag, value in zip(extra[::2], extra[1::2], strict=True):
            if flag in ("--batch", "--model") or (flag == "--hw" and value != "a100-pcie-server"):
                i = args.index(flag)
                args[i + 1] = value
            else:
                args += [flag, value]
        commands.append([*args, "--out", str(out)])
    commands.append([*BASE, "--out", str(tmp_path)])  # a folder
    results = run_together(*commands)
    for (_, want), r in zip([*cases, ([], str(tmp_path))], results, strict=True):
        assert r.returncode == 2, (r.args, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and want in lines[0], (r.args, r.stderr)
        assert r.stdout == ""
    assert not out.exists()


def test_missing_ray(tmp_path: Path) -> None:
    """A ray that cannot be imported: exit 2 and how to install it."""
    fake = tmp_path / "noray" / "ray"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no ray here')\n")
    env = dict(os.environ, COLUMNS="120", TERM="dumb",
               PYTHONPATH=os.pathsep.join([str(fake.parent), *sys.path]))
    out = tmp_path / "s.json"
    (r,) = run_together([*BASE, "--engine", "ray", "--out", str(out)], env=env)
    assert r.returncode == 2
    assert "pip install 'placewise[ray]'" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not out.exists()
