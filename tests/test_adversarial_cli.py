"""Command-line runs of cases from the second adversarial corpus (corpora/adversarial_2.py) whose
failure showed only through the CLI (ADV2-07, fixed in 97068ad)."""

from __future__ import annotations

import onnx
import pytest
from corpora.adversarial import CASES
from helpers import CliRun, run_cli

BY_NAME = {c.name: c for c in CASES}


def _optimize(tmp_path, capfd, name: str, *options: str) -> CliRun:
    """`normfuse optimize` of the case, in this process (`helpers.run_cli`)."""
    source = tmp_path / f"{name}.onnx"
    onnx.save(BY_NAME[name].build(), source)
    return run_cli(capfd, "optimize", str(source), "-o", str(tmp_path / "out.onnx"), *options)


@pytest.mark.parametrize("report", [[], ["--report", "-"]])
@pytest.mark.parametrize(
    "name", ["a2_ln_zero_size_normalised_axis", "a2_rms_zero_size_normalised_axis"]
)
def test_validate_with_an_unrunnable_site_writes_the_rolled_back_model(
    tmp_path, capfd, name, report
):
    """`optimize --validate` of a model whose fused site cannot run rolls the site back and writes
    the model (the API does); it must not stop with an internal error."""
    done = _optimize(tmp_path, capfd, name, "--validate", *report)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out.onnx").exists()


@pytest.mark.parametrize(
    "name", ["a2_ln_zero_size_normalised_axis", "a2_rms_zero_size_normalised_axis"]
)
def test_optimize_without_validate_writes(tmp_path, capfd, name) -> None:
    """Without --validate the model is written with exit 0 (ADV2-06: the empty normalised axis is
    no longer fused, so the output runs wherever the original does)."""
    done = _optimize(tmp_path, capfd, name)
    assert done.returncode == 0, done.stderr
