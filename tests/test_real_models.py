"""Real PyTorch exports committed in models/real: every layer norm the PyTorch module has is fused,
the outputs match, and a second run changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from helpers import FLOAT32_ATOL, max_abs_diff, op_counts, random_inputs

import normfuse

MODELS_DIR = Path(__file__).resolve().parent.parent / "models"
MANIFEST = json.loads((MODELS_DIR / "manifest.json").read_text())
ENTRIES = [entry for entry in MANIFEST["models"] if "export_error" not in entry]


def test_manifest_lists_bert_and_gpt2_at_opsets_14_and_16() -> None:
    exported = {(entry["architecture"], entry["opset"]) for entry in ENTRIES}
    assert {("bert", 14), ("bert", 16), ("gpt2", 14), ("gpt2", 16)} <= exported


@pytest.mark.parametrize("entry", ENTRIES, ids=[entry["file"] for entry in ENTRIES])
def test_fuses_every_layer_norm_of_real_export(entry: dict) -> None:
    path = MODELS_DIR / entry["file"]
    original = onnx.load(path)
    result = normfuse.optimize(path)
    expected = entry["layer_norm_sites"]
    assert len(result.report.sites) == expected
    assert op_counts(result.model)["LayerNormalization"] == expected
    removed = op_counts(original) - op_counts(result.model)
    assert set(removed) <= {"ReduceMean", "Sub", "Pow", "Add", "Sqrt", "Div", "Mul", "Constant"}
    # Every norm has a scale and a bias: each fused node absorbed one Mul and two Adds.
    assert (removed["ReduceMean"], removed["Mul"], removed["Add"]) == (
        2 * expected,
        expected,
        2 * expected,
    )
    assert result.report.near_misses == []
    onnx.checker.check_model(result.model, full_check=True)
    sequence = entry["inputs"]["input_ids"][1]
    feeds = random_inputs(
        original, {"batch": 1, "sequence": sequence}, seed=5, int_high=entry["int_input_high"]
    )
    assert max_abs_diff(original, result.model, feeds) <= FLOAT32_ATOL


@pytest.mark.parametrize("entry", ENTRIES, ids=[entry["file"] for entry in ENTRIES])
def test_second_run_gives_identical_bytes(entry: dict, tmp_path: Path) -> None:
    first, second = tmp_path / "first.onnx", tmp_path / "second.onnx"
    normfuse.save(normfuse.optimize(MODELS_DIR / entry["file"]), first)
    normfuse.save(normfuse.optimize(first), second)
    assert second.read_bytes() == first.read_bytes()
