"""Fuzzing the loaders (issue 10): structure-aware mutations of valid ONNX models, machine
YAML, task graphs, plans and calibrations (``tests.fuzz_mutators``) must load, or fail with
an ``InputError`` naming the file; never any other exception. A few hundred cases here
(bounded: ``max_examples`` per loader, each case under a time limit); ``benchmarks/
fuzz_loaders.py`` runs >= 10,000 per loader."""

from __future__ import annotations

import random
import traceback
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz_mutators import LOADERS, run_case

EXAMPLES = {"onnx": 80, "onnx_control": 40, "onnx_quant": 40, "machine": 40, "taskgraph": 80, "plan": 60, "calibration": 60}


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_the_unmutated_seed_loads(name: str, tmp_path: Path) -> None:
    class Unmutated(random.Random):
        def random(self) -> float:  # no byte-level damage, no alias bomb
            return 0.99

        def randint(self, a: int, b: int) -> int:
            return 0  # no mutation rounds

    loader = LOADERS[name]
    outcome, exc = run_case(loader, loader.make(Unmutated(0)), tmp_path)
    assert outcome == "ok", "".join(traceback.format_exception(exc)) if exc else outcome


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_mutated_inputs_load_or_fail_as_input_errors(name: str,
                                                     tmp_path_factory: pytest.TempPathFactory
                                                     ) -> None:
    loader = LOADERS[name]
    folder = tmp_path_factory.mktemp(f"fuzz-{name}")
    outcomes: dict[str, int] = {}

    @settings(max_examples=EXAMPLES[name], deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    # hypothesis's own random (edge-biased, shrinkable) and seeded uniform ones
    @given(st.one_of(st.randoms(use_true_random=False),
                     st.integers(0, 2**32).map(random.Random)))
    def case(rnd: random.Random) -> None:
        outcome, exc = run_case(loader, loader.make(rnd), folder, time_limit_s=60)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        assert outcome != "internal_error", "".join(traceback.format_exception(exc))
        if exc is not None and outcome == "input_error":
            assert str(exc), "an input error names the problem"

    case()
    assert sum(outcomes.values()) >= EXAMPLES[name] // 2
