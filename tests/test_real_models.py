"""Real PyTorch exports committed in models/real: every layer norm the PyTorch module has is fused,
the outputs match, and a second run changes nothing."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import FLOAT32_ATOL, op_counts, random_inputs, run

import normfuse

MODELS_DIR = Path(__file__).resolve().parent.parent / "models"
MANIFEST = json.loads((MODELS_DIR / "manifest.json").read_text())
ENTRIES = [entry for entry in MANIFEST["models"] if "export_error" not in entry]


def test_manifest_lists_bert_and_gpt2_at_opsets_14_and_16() -> None:
    exported = {(entry["architecture"], entry["opset"]) for entry in ENTRIES}
    assert {("bert", 14), ("bert", 16), ("gpt2", 14), ("gpt2", 16)} <= exported


FUSED_OPS = {"LayerNormalization", "SimplifiedLayerNormalization"}
DECOMPOSED_OPS = {
    "ReduceMean",
    "Sub",
    "Pow",
    "Add",
    "Sqrt",
    "Div",
    "Mul",
    "Constant",
    "Cast",
    "Reciprocal",
    "Reshape",  # the variance's Reshape in dynamo's hand-written group norm
}


@pytest.mark.parametrize("entry", ENTRIES, ids=[entry["file"] for entry in ENTRIES])
def test_fuses_every_norm_of_real_export(entry: dict) -> None:
    path = MODELS_DIR / entry["file"]
    original = onnx.load(path)
    result = normfuse.optimize(path)
    kinds = Counter(site.kind for site in result.report.sites)
    before, counts = op_counts(original), op_counts(result.model)
    layer_norms = entry["layer_norm_sites"]
    rms_norms = entry["rms_norm_sites"]
    # Exporters write LayerNormalization themselves from opset 17: those count as already fused.
    assert kinds["layer-norm"] == layer_norms - before["LayerNormalization"]
    assert kinds["rms-norm"] == rms_norms - before["RMSNormalization"]
    assert_group_norms(entry, result, before)
    assert counts["LayerNormalization"] == layer_norms + kinds["group-norm"]
    assert counts["SimplifiedLayerNormalization"] + counts["RMSNormalization"] == rms_norms
    assert set(op_counts(original) - counts) <= DECOMPOSED_OPS
    group_outputs = {site.output for site in result.report.sites if site.kind == "group-norm"}
    assert_scales_absorbed(result.model, group_outputs)
    if not result.report.ort_only:
        onnx.checker.check_model(result.model, full_check=True)
    feeds = random_inputs(original, entry["dims"], seed=5, int_high=entry["int_input_high"])
    expected, actual = run(original, feeds)[0], run(result.model, feeds)[0]
    error = np.max(np.abs(expected.astype(np.float64) - actual))
    if entry["dtype"] == "float32":
        assert error <= FLOAT32_ATOL
    else:
        assert error <= 1e-2 * np.max(np.abs(expected.astype(np.float64)))


def assert_group_norms(entry: dict, result: normfuse.OptimizeResult, before: Counter) -> None:
    """Every group norm is fused, kept as the exporter's InstanceNormalization form
    (`no-faster-form`), or left where shape inference lost its spatial dims (`unknown-shape`; the
    layer-norm pass then reports the same statistics as `group-norm`); nothing else is reported."""
    misses = Counter((miss.kind, miss.reason) for miss in result.report.near_misses)
    kept, unknown = (
        misses[("group-norm", "no-faster-form")],
        misses[("group-norm", "unknown-shape")],
    )
    assert misses == Counter(
        {
            ("group-norm", "no-faster-form"): kept,
            ("group-norm", "unknown-shape"): unknown,
            ("layer-norm", "group-norm"): unknown,
        }
    )
    fused = sum(site.kind == "group-norm" for site in result.report.sites)
    expected = entry.get("group_norm_sites", 0)
    assert fused + kept + unknown + before["GroupNormalization"] == expected


def assert_scales_absorbed(model: onnx.ModelProto, group_outputs: set[str]) -> None:
    """The exports' norm scales are random: a fused node whose scale is all ones lost it (group
    norms' statistics excepted: their per-channel affine stays after the Reshape back)."""
    initializers = {tensor.name: tensor for tensor in model.graph.initializer}
    users = {name: node for node in model.graph.node for name in node.input}
    for node in model.graph.node:
        if node.op_type in FUSED_OPS and node.output[0] not in group_outputs:
            scale = onnx.numpy_helper.to_array(initializers[node.input[1]])
            if np.all(scale == 1.0):  # a float32 kernel whose float16 affine follows its Cast
                cast = users[node.output[0]]
                multiply = users[cast.output[0]]
                assert (cast.op_type, multiply.op_type) == ("Cast", "Mul"), node.name
                scale = onnx.numpy_helper.to_array(initializers[multiply.input[1]])
            assert not np.allclose(scale, 1.0), node.name


@pytest.mark.parametrize("entry", ENTRIES, ids=[entry["file"] for entry in ENTRIES])
def test_second_run_gives_identical_bytes(entry: dict, tmp_path: Path) -> None:
    first, second = tmp_path / "first.onnx", tmp_path / "second.onnx"
    normfuse.save(normfuse.optimize(MODELS_DIR / entry["file"]), first)
    normfuse.save(normfuse.optimize(first), second)
    assert second.read_bytes() == first.read_bytes()


def test_committed_fixtures_stay_small() -> None:
    """Each committed model under 2 MB, all of them under 30 MB (the project's limits)."""
    files = list((MODELS_DIR / "real").glob("*.onnx"))
    assert files
    assert max(f.stat().st_size for f in files) < 2 * 1024 * 1024
    assert sum(f.stat().st_size for f in files) < 30 * 1024 * 1024
    listed = {MODELS_DIR / entry["file"] for entry in ENTRIES}
    assert set(files) == listed
