"""Command-line runs of cases from the second adversarial corpus (models/adversarial_2.py) whose
failure showed only through the CLI (ADV2-07 in docs/adversary2-findings.md, fixed in 97068ad)."""

from __future__ import annotations

import subprocess
import sys

import onnx
import pytest

from models.adversarial import CASES

BY_NAME = {c.name: c for c in CASES}


def _optimize(tmp_path, name: str, *options: str) -> subprocess.CompletedProcess:
    source = tmp_path / f"{name}.onnx"
    onnx.save(BY_NAME[name].build(), source)
    command = [sys.executable, "-m", "normfuse", "optimize", str(source), "-o"]
    command += [str(tmp_path / "out.onnx"), *options]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("report", [[], ["--report", "-"]])
@pytest.mark.parametrize(
    "name", ["a2_ln_zero_size_normalised_axis", "a2_rms_zero_size_normalised_axis"]
)
def test_validate_with_an_unrunnable_site_writes_the_rolled_back_model(tmp_path, name, report):
    """`optimize --validate` of a model whose fused site cannot run rolls the site back and writes
    the model (the API does); it must not stop with an internal error."""
    done = _optimize(tmp_path, name, "--validate", *report)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out.onnx").exists()


@pytest.mark.parametrize(
    "name", ["a2_ln_zero_size_normalised_axis", "a2_rms_zero_size_normalised_axis"]
)
def test_optimize_without_validate_writes(tmp_path, name) -> None:
    """Without --validate the model is written with exit 0 (ADV2-06: the empty normalised axis is
    no longer fused, so the output runs wherever the original does)."""
    done = _optimize(tmp_path, name)
    assert done.returncode == 0, done.stderr
