"""normfuse as a step of an Olive workflow (the `olive` extra): Olive finds the pass through a
package config, runs it on a committed model, and the output carries normfuse's report."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import FLOAT32_ATOL, op_counts, random_inputs, run

# Olive sends usage telemetry unless told not to; tests use no network.
os.environ.setdefault("OLIVE_DISABLE_TELEMETRY", "1")
pytest.importorskip("olive", reason="Olive is not installed (pip install -e '.[olive]')")

from olive.workflows import run as olive_run

from normfuse import olive_pass

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "models" / "real" / "llama_opset18_dynamo_float32.onnx"
EXAMPLE = ROOT / "docs" / "olive" / "normfuse_workflow.json"
DIMS = {"batch": 1, "sequence": 16}


def workflow(tmp_path: Path) -> dict:
    """The docs example, with absolute paths into `tmp_path`."""
    config = json.loads(EXAMPLE.read_text())
    config["input_model"]["model_path"] = str(MODEL)
    config["cache_dir"] = str(tmp_path / "cache")
    config["output_dir"] = str(tmp_path / "output")
    return config


def test_example_config_names_the_pass_and_a_committed_model() -> None:
    config = json.loads(EXAMPLE.read_text())
    assert (ROOT / config["input_model"]["model_path"]) == MODEL
    assert [step["type"] for step in config["passes"].values()] == [olive_pass.PASS_TYPE]


def test_package_config_keeps_olive_passes_and_adds_normfuse(tmp_path: Path) -> None:
    path = tmp_path / "package.json"
    assert olive_pass.main([str(path)]) == 0
    passes = json.loads(path.read_text())["passes"]
    assert passes[olive_pass.PASS_TYPE]["module_path"] == "normfuse.olive_pass.Normfuse"
    assert "OnnxPeepholeOptimizer" in passes
    assert list(tmp_path.iterdir()) == [path]


def test_workflow_fuses_and_output_carries_report(tmp_path: Path) -> None:
    olive_run(workflow(tmp_path), package_config=olive_pass.package_config())
    output = tmp_path / "output"
    attributes = json.loads((output / "model_config.json").read_text())["config"][
        "model_attributes"
    ]
    report = attributes[olive_pass.REPORT_KEY]
    assert report["counts"]["rms-norm"] == 5
    assert len(report["sites"]) == 5
    assert report["validation"]["passed"] is True
    fused = onnx.load(output / "model.onnx")
    original = onnx.load(MODEL)
    assert op_counts(fused)["SimplifiedLayerNormalization"] == 5
    assert op_counts(original)["SimplifiedLayerNormalization"] == 0
    random_feeds = [random_inputs(original, DIMS, seed=seed) for seed in (0, 1)]
    # Every token the same: identical rows, the degenerate case for a per-row statistic.
    same_token = {**random_feeds[0], "input_ids": np.zeros((1, 16), np.int64)}
    for feeds in (*random_feeds, same_token):
        expected, actual = run(original, feeds)[0], run(fused, feeds)[0]
        assert np.max(np.abs(expected - actual)) <= FLOAT32_ATOL
