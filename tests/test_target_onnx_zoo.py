"""`--target onnx` on every real export in models/real (float16 variants too): every site fused as
a standard operator, no contrib-domain node, the result passes the checker (full_check) and strict
inference, and computes what the original does on ONNX Runtime CPU."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from helpers import FLOAT32_ATOL, op_counts, random_inputs, run
from test_real_models import ENTRIES, MODELS_DIR, assert_group_norms

import normfuse
from normfuse.target import targets

STANDARD = {"layer-norm": "LayerNormalization", "rms-norm": "RMSNormalization"}


@pytest.mark.parametrize("entry", ENTRIES, ids=[entry["file"] for entry in ENTRIES])
def test_target_onnx_fuses_every_norm_as_a_standard_operator(entry: dict) -> None:
    path = MODELS_DIR / entry["file"]
    original = onnx.load(path)
    result = normfuse.optimize(path, target="onnx")
    before, counts = op_counts(original), op_counts(result.model)
    kinds = Counter(site.kind for site in result.report.sites)
    assert kinds["layer-norm"] == entry["layer_norm_sites"] - before["LayerNormalization"]
    assert kinds["rms-norm"] == entry["rms_norm_sites"] - before["RMSNormalization"]
    assert_group_norms(entry, result, before)
    assert counts["RMSNormalization"] == entry["rms_norm_sites"]
    assert all(
        STANDARD.get(site.kind, "LayerNormalization") == site.op for site in result.report.sites
    )
    assert not result.report.ort_only
    assert all(node.domain in ("", "ai.onnx") for node in result.model.graph.node)
    if kinds["rms-norm"]:
        assert targets.default_opset(result.model) == 23
    onnx.checker.check_model(result.model, full_check=True)
    onnx.shape_inference.infer_shapes(result.model, check_type=True, strict_mode=True)
    feeds = random_inputs(original, entry["dims"], seed=6, int_high=entry["int_input_high"])
    expected, actual = run(original, feeds)[0], run(result.model, feeds)[0]
    error = np.max(np.abs(expected.astype(np.float64) - actual))
    if entry["dtype"] == "float32":
        assert error <= FLOAT32_ATOL
    else:
        assert error <= 1e-2 * np.max(np.abs(expected.astype(np.float64)))
