"""Every bad or hostile input is one line and the right exit code, and leaves the user's files
as they were: inputs unchanged (sha256), no temporary or partial files, nothing written outside.

The default run takes the in-process cases; NORMFUSE_ROBUSTNESS=full adds signals, large sparse
files, another user, resource limits and closed or full standard streams (subprocesses).
"""

from __future__ import annotations

import os

import pytest
from battery_cases import CASES, Work
from battery_runner import run_case
from conftest import TALLY

FULL = os.environ.get("NORMFUSE_ROBUSTNESS", "") == "full"
SELECTED = sorted(name for name, (_, full) in CASES.items() if FULL or not full)


def test_the_battery_has_at_least_150_cases() -> None:
    assert len(CASES) >= 150, len(CASES)


@pytest.mark.parametrize("name", SELECTED)
def test_case(name: str, tmp_path) -> None:
    build, _ = CASES[name]
    folder, outside = tmp_path / "case", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    (outside / "keep.txt").write_text("outside the case folder\n")
    run = build(Work(folder, outside))
    TALLY["cases"] += 1
    TALLY[f"class:{name.split('/')[0]}"] += 1
    if run.skip:
        TALLY["skipped"] += 1
        pytest.skip(run.skip)
    outcome = run_case(run, folder, outside)
    for kind in ("traceback", "hang"):
        TALLY[kind] += bool(getattr(outcome, kind))
    for kind in ("changed", "stray", "escapes"):
        TALLY[kind] += bool(getattr(outcome, kind))
    if outcome.problems and not (
        outcome.traceback or outcome.hang or outcome.changed or outcome.stray or outcome.escapes
    ):
        TALLY["other"] += 1
    TALLY["passed"] += not outcome.problems
    assert not outcome.problems, "; ".join(outcome.problems)
