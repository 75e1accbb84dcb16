"""Shape traces (SHAPES.jsonl): round trip, the seeded drifting generator, and bad lines
refused with the file, line and field named (library and CLI, exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from placewise.adapt.trace import (
    MAX_REQUESTS,
    ShapeTrace,
    drifting_trace,
    load_shape_trace,
    save_shape_trace,
)
from placewise.errors import InputError, SpecError
from tests.test_cli import assert_bad_input, run


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(x + "\n" for x in lines))
    return path


def test_a_trace_round_trips(tmp_path: Path) -> None:
    tr = drifting_trace("seq", requests=50, rate_rps=500.0, phases=3, values=(32, 128, 512),
                        fixed={"batch": 2}, class_shares=(3.0, 1.0), seed=7)
    save_shape_trace(tr, tmp_path / "s.jsonl")
    back = load_shape_trace(tmp_path / "s.jsonl")
    assert back.arrivals_s == tr.arrivals_s and back.shapes == tr.shapes
    assert back.classes == tr.classes and back.phases == tr.phases
    assert back.file == str(tmp_path / "s.jsonl") and back.axes == ("batch", "seq")
    assert all(s["batch"] == 2 for s in back.shapes) and {0, 1} == set(back.classes)


def test_defaults_and_blank_lines(tmp_path: Path) -> None:
    p = _write(tmp_path / "s.jsonl", ['{"t_s": 0}', "", '{"t_s": 0.5, "batch": 4, "class": 1}'])
    tr = load_shape_trace(p)
    assert tr.shapes == ({"batch": 1}, {"batch": 4}) and tr.classes == (0, 1)
    assert tr.rows() == 5 and tr.shape_counts() == {"batch=1": 1, "batch=4": 1}
    assert tr.slice(1, 2).arrivals_s == (0.0,)


def test_the_drift_is_seeded_and_moves_the_mix() -> None:
    a = drifting_trace("batch", requests=400, rate_rps=100.0, phases=4, values=(1, 4, 16),
                       seed=3)
    assert a == drifting_trace("batch", requests=400, rate_rps=100.0, phases=4,
                               values=(1, 4, 16), seed=3)
    assert a != drifting_trace("batch", requests=400, rate_rps=100.0, phases=4,
                               values=(1, 4, 16), seed=4)
    first, last = a.slice(0, 100), a.slice(300, 400)
    assert sum(s["batch"] == 1 for s in first.shapes) > 65  # mostly batch 1 ...
    assert sum(s["batch"] == 16 for s in last.shapes) > 65  # ... turns mostly batch 16
    assert set(a.phases) == {0, 1, 2, 3} and list(a.phases) == sorted(a.phases)
    # Poisson at the stated rate: 400 arrivals over about 4 s
    assert 3.0 < a.duration_s < 5.0
    with pytest.raises(InputError):
        drifting_trace("width")
    with pytest.raises(InputError):
        drifting_trace(rate_rps=0.0)


@pytest.mark.parametrize("line,needles", [
    ('{"t_s": 0.2, "batch": 0}', ["line 2: batch", ">= 1"]),
    ('{"t_s": 0.2, "batch": 2.5}', ["line 2: batch"]),
    ('{"t_s": 0.2, "batch": true}', ["line 2: batch"]),
    ('{"t_s": 0.05}', ["line 2: t_s", "before the previous"]),
    ('{"t_s": "soon"}', ["line 2: t_s"]),
    ('{"t_s": 0.2, "width": 3}', ["line 2: width", "unknown field"]),
    ('{"t_s": 0.2, "class": -1}', ["line 2: class"]),
    ('{"t_s": 0.2, "seq": 64}', ["line 2: seq", "every line gives 'seq'"]),
    ('{"t_s": 0.2', ["line 2", "not JSON"]),
    ('[0.2, 1]', ["line 2", "expected an object"]),
    ('{"t_s": NaN}', ["line 2: t_s"]),
])
def test_a_bad_line_names_the_file_line_and_field(tmp_path: Path, line: str,
                                                    needles: list[str]) -> None:
    p = _write(tmp_path / "bad.jsonl", ['{"t_s": 0.1, "batch": 1}', line])
    with pytest.raises(SpecError) as exc:
        load_shape_trace(p)
    text = str(exc.value)
    assert text.startswith(str(p))
    for n in needles:
        assert n in text, (n, text)


def test_empty_missing_and_oversized(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SpecError, match="no requests"):
        load_shape_trace(_write(tmp_path / "e.jsonl", [""]))
    with pytest.raises(SpecError, match="cannot read"):
        load_shape_trace(tmp_path / "missing.jsonl")
    monkeypatch.setattr("placewise.adapt.trace.MAX_REQUESTS", 3)
    p = _write(tmp_path / "long.jsonl", [json.dumps({"t_s": i}) for i in range(5)])
    with pytest.raises(SpecError, match="more than 3 requests"):
        load_shape_trace(p)
    assert MAX_REQUESTS >= 1_000_000


def test_a_trace_object_refuses_unordered_times() -> None:
    with pytest.raises(InputError):
        ShapeTrace((0.2, 0.1), ({"batch": 1}, {"batch": 1}), (0, 0), (0, 0))


def test_cli_refuses_a_bad_trace_with_exit_2(tmp_path: Path) -> None:
    from placewise.plan import save_plan
    from tests.runtime.helpers import tiny_plan

    plan, _ = tiny_plan(int8=False)
    save_plan(plan, tmp_path / "plan.json")
    bad = _write(tmp_path / "bad.jsonl", ['{"t_s": 0.0}', '{"t_s": 0.1, "batch": -2}'])
    proc = run("serve", str(tmp_path / "plan.json"), "--real", "--trace", str(bad), "--json")
    assert_bad_input(proc, str(bad), "line 2: batch")
    assert proc.stdout == ""
