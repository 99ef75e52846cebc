"""The fault-injection script (tests/mutation/run.py) in the default run, CI-sized: every planted
fault still applies to the code it names, and one fault is planted and caught for real."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "mutation"))

from mutants import MUTANTS  # noqa: E402


@pytest.mark.parametrize("mutant", MUTANTS, ids=[mutant.name for mutant in MUTANTS])
def test_the_planted_fault_still_matches_exactly_once(mutant) -> None:
    """A refactor that moves the code a mutant plants its fault in breaks the mutant: update it
    (tests/mutation/mutants.py) so that the fault is planted again."""
    text = (ROOT / mutant.path).read_text()
    assert text.count(mutant.old) == 1, f"{mutant.name}: {mutant.path} changed"
    for test in mutant.tests:
        assert (ROOT / test.split("::")[0]).is_file(), test


def test_an_epsilon_fault_in_the_skip_form_is_killed() -> None:
    """Epsilon x10 in every Skip* node: the skip-norm numerics on adversarial inputs catch it
    (on N(0, 1) inputs alone they did not)."""
    selection = "tests/test_skip_exactness.py::test_same_dim_params_fuse"
    command = [sys.executable, "tests/mutation/run.py", "eps-x10-skip-norm", "--tests", selection]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "killed   eps-x10-skip-norm" in result.stdout
    assert "mutation score: 1/1 killed (100%)" in result.stdout
