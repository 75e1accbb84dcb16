"""Session fixtures of the report tests: real inputs made once.

- ``local_files``: a tiny zoo MLP planned in this process for a seeded ``local`` machine
  (the test machine of tests/runtime/helpers, so nothing is probed) across its two CPU
  devices, then ``placewise validate --json`` and ``placewise serve --real --json`` of it
  run for real by the command line; plus the sweep fixture file (``helpers.sweep_doc``);
- ``hostile_plan``: ``zoo:mlp`` on the h100 preset with crossing edges whose model
  reference is ``helpers.HOSTILE``;
- ``reports``: the plan-only report (of the hostile plan) and the full one (plan,
  validation, serve, sweep) written by ``placewise report``; and the closed-loop report of
  a ``placewise loop`` file (``_loop_file``).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli_runner import run_cli
from tests.report.helpers import HOSTILE, sweep_doc


def env_of(xdg: Path) -> dict[str, str]:
    return dict(os.environ, COLUMNS="120", TERM="dumb", PYTHONHASHSEED="0",
                XDG_CACHE_HOME=str(xdg))


def cli(xdg: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return run_cli(args, env=env_of(xdg), timeout=timeout)


@pytest.fixture(scope="session")
def xdg(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An XDG cache holding the test machine as this host's probed ``local`` spec."""
    from placewise.hardware.probe import host_fingerprint, local_cache_path
    from tests.runtime.helpers import local_machine

    data: dict[str, Any] = local_machine().model_dump(mode="json")
    data["name"] = "local"
    data["tags"] = {**(data.get("tags") or {}), "fingerprint": host_fingerprint()}
    root = tmp_path_factory.mktemp("xdg")
    path = root / "placewise" / local_cache_path().name
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(data))
    return root


@pytest.fixture(scope="session")
def local_files(xdg: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from placewise.hardware.probe import load_local
    from placewise.plan import build_plan, save_plan
    from placewise.schedule import evaluate
    from tests.runtime.helpers import TINY_MLP, problem_of, split_placement, tiny_source

    folder = tmp_path_factory.mktemp("inputs")
    old = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(xdg)
    try:
        machine = load_local()
    finally:
        if old is None:
            del os.environ["XDG_CACHE_HOME"]
        else:
            os.environ["XDG_CACHE_HOME"] = old
    prob = problem_of(tiny_source(), machine)
    plan = build_plan(prob, evaluate(prob, split_placement(prob, int8=False)),
                      model_ref=TINY_MLP, strategy="test")
    files = {"plan": folder / "plan.json", "validation": folder / "validation.json",
             "serve": folder / "serve.json", "sweep": folder / "sweep.json"}
    save_plan(plan, files["plan"])
    v = cli(xdg, "validate", str(files["plan"]), "--requests", "5", "--no-baseline", "--json")
    assert v.returncode == 0, v.stderr
    files["validation"].write_text(v.stdout)
    s = cli(xdg, "serve", str(files["plan"]), "--rate", "400", "--requests", "150", "--real",
            "--json")
    assert s.returncode == 0, s.stderr
    files["serve"].write_text(s.stdout)
    files["sweep"].write_text(json.dumps(sweep_doc()))
    return files


@pytest.fixture(scope="session")
def hostile_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from placewise.plan import build_plan, save_plan
    from placewise.schedule import evaluate
    from tests.plan_fixtures import mlp_setup

    prob, plan = mlp_setup()
    path = tmp_path_factory.mktemp("hostile") / "plan.json"
    save_plan(build_plan(prob, evaluate(prob, plan.placement_obj()), model_ref=HOSTILE,
                         strategy="manual"), path)
    return path


def _loop_file(xdg: Path, folder: Path) -> Path:
    """A LOOP.json from ``placewise loop`` itself (a short drifting trace on the test
    machine), with ``HOSTILE`` written into its notes and one action's reason."""
    from placewise.adapt.trace import drifting_trace, save_shape_trace

    trace = folder / "shapes.jsonl"
    save_shape_trace(drifting_trace("batch", requests=60, rate_rps=100.0, phases=2,
                                    values=(1, 2), majority=1.0, seed=4), trace)
    path = folder / "loop.json"
    r = cli(xdg, "loop", "zoo:mlp?layers=2&hidden=64", "--trace", str(trace), "--windows", "2",
            "--envelope", "batch=1,2", "--plan-time", "1s", "--promote-requests", "12",
            "--promote-blocks", "6", "--budget", "120s", "--out", str(path), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(path.read_text())
    doc["notes"].append(HOSTILE)
    doc["windows"][0]["actions"].append({"action": "keep", "reason": HOSTILE,
                                         "evidence": {"note": HOSTILE}})
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture(scope="session")
def reports(xdg: Path, local_files: dict[str, Path], hostile_plan: Path,
            tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict[str, Any]]]:
    """name -> (report file, the --json answer of placewise report)."""
    folder = tmp_path_factory.mktemp("reports")
    # a real sweep (not the fixture): zoo:mlp on two presets, a batch past the regret diagonal
    real_sweep = folder / "real-sweep.json"
    r = cli(xdg, "sweep", "--model", "zoo:mlp", "--hw", "jetson-agx-orin", "--hw",
            "a100-pcie-server", "--batch", "1,8", "--slo", "1ms", "--out", str(real_sweep))
    assert r.returncode == 0, r.stderr
    loop = _loop_file(xdg, folder)
    out: dict[str, tuple[Path, dict[str, Any]]] = {}
    for name, inputs in (("plan-only", [hostile_plan]),
                         ("full", [local_files[k] for k in ("plan", "validation", "serve",
                                                            "sweep")]),
                         ("real-sweep", [real_sweep]), ("loop", [loop])):
        path = folder / f"{name}.html"
        r = cli(xdg, "report", *map(str, inputs), "--out", str(path), "--json")
        assert r.returncode == 0, r.stderr
        out[name] = (path, json.loads(r.stdout))
    return out
