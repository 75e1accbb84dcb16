"""The last-known-good store: keep / rollback round trip, the validator header checked,
mismatched candidates refused (library and command line: exit 2, one line)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from placewise.adapt.store import LastKnownGood
from placewise.errors import InputError, SpecError
from tests.adapt.promote_fixtures import placed_plan
from tests.test_cli import run


@pytest.fixture(scope="module")
def plans(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from placewise.hardware.load import load_machine

    d = tmp_path_factory.mktemp("plans")
    return {"a": placed_plan(d / "a.json", ("cpu0",)),
            "b": placed_plan(d / "b.json", ("cpu1",)),
            "c": placed_plan(d / "c.json", ("cpu0", "cpu1")),
            "other_model": placed_plan(d / "m.json", ("cpu0",),
                                       model="zoo:mlp?layers=2&hidden=32"),
            "other_machine": placed_plan(d / "x.json", ("cpu",),
                                         machine=load_machine("laptop-soc"))}


def test_keep_and_rollback_round_trip(plans: dict[str, Path], tmp_path: Path) -> None:
    lkg = LastKnownGood(tmp_path / "store")
    assert lkg.current() is None
    a = lkg.keep(plans["a"], {"decision": {"decision": "initial"}})
    b = lkg.keep(plans["b"], {"decision": {"decision": "promote", "reason": "faster"}})
    c = lkg.keep(plans["c"], {"decision": {"decision": "promote"}})
    cur = lkg.current()
    assert cur is not None and cur.id == c.id and c.previous == b.id
    assert lkg.current_path.read_bytes() == plans["c"].read_bytes()
    h = b.header
    assert h.kind == "plan" and h.decision["reason"] == "faster"
    assert set(h.versions) == {"placewise", "onnxruntime", "torch", "python"}
    assert h.model == "zoo:mlp?layers=2&hidden=64" and h.when.endswith("+00:00")
    assert h.machine_fingerprint.startswith("sha256:") and len(h.graph_fingerprints) == 1
    left, back = lkg.rollback()
    assert (left.id, back.id) == (c.id, b.id) and left.rolled_back
    assert lkg.current_path.read_bytes() == plans["b"].read_bytes()
    _, back = lkg.rollback()
    assert back.id == a.id
    with pytest.raises(InputError, match="nothing before it"):
        lkg.rollback()
    # a new entry after rolling back: its previous is what was current (a)
    d = lkg.keep(plans["b"])
    assert d.previous == a.id
    assert [e.id for e in lkg.history()] == [1, 2, 3, 4]
    assert [e.rolled_back != "" for e in lkg.history()] == [False, True, True, False]
    log = lkg.decisions()
    assert [x["decision"] for x in log] == ["rollback", "rollback"]
    doc = json.loads((tmp_path / "store" / "index.json").read_text())
    assert doc["format"] == "placewise-lkg" and doc["current"] == d.id


def test_header_is_checked(plans: dict[str, Path], tmp_path: Path) -> None:
    lkg = LastKnownGood(tmp_path / "s")
    e = lkg.keep(plans["a"])
    lkg.keep(plans["b"])
    e.path.write_bytes(e.path.read_bytes() + b" ")  # the stored file changed
    with pytest.raises(SpecError, match="changed since it was kept"):
        lkg.rollback()
    index = tmp_path / "s" / "index.json"
    doc = json.loads(index.read_text())
    doc["entries"][0]["header"].pop("sha256")
    index.write_text(json.dumps(doc))
    with pytest.raises(SpecError, match=r"entries\[0\]"):
        lkg.history()
    index.write_text('{"format": "something else"}')
    with pytest.raises(SpecError, match="not a last-known-good index"):
        lkg.current()


@pytest.mark.parametrize(("which", "place"), [("other_model", "fingerprints.graph"),
                                              ("other_machine", "fingerprints.machine")])
def test_mismatched_candidate_refused(plans: dict[str, Path], tmp_path: Path, which: str,
                                      place: str) -> None:
    lkg = LastKnownGood(tmp_path / "s")
    lkg.keep(plans["a"])
    before = (tmp_path / "s" / "index.json").read_bytes()
    with pytest.raises(InputError) as exc:
        lkg.keep(plans[which])
    assert exc.value.place == place and "another" in exc.value.problem
    assert (tmp_path / "s" / "index.json").read_bytes() == before
    assert len(list((tmp_path / "s" / "plans").iterdir())) == 1


def test_cli_refuses_with_exit_2(plans: dict[str, Path], tmp_path: Path) -> None:
    """A candidate of another model or machine: exit 2, one line naming the file and the
    fingerprint, no traceback, nothing written; rollback of an empty store likewise."""
    store = tmp_path / "s"
    for which, place in (("other_model", "fingerprints.graph"),
                         ("other_machine", "fingerprints.machine")):
        p = run("promote", "--incumbent", str(plans["a"]), "--candidate", str(plans[which]),
                "--store", str(store), "--json")
        assert p.returncode == 2, p.stderr
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and str(plans[which]) in lines[0] and place in lines[0]
        assert p.stdout == "" and "Traceback" not in p.stderr
    assert not store.exists()
    p = run("rollback", "--store", str(store))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    assert "nothing to roll back" in p.stderr
