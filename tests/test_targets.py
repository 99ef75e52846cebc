"""Target rules: when the opset is raised (for ONNX Runtime and for standard ONNX), what blocks
the raise, and that model-local functions are raised with the model."""

from __future__ import annotations

import onnx
import pytest
from helpers import assert_same_numerics, op_types

import normfuse
from models.builders import (
    LayerNormSpec,
    RmsNormSpec,
    local_function_model,
    norm_model,
    with_batch_norm,
)
from normfuse import targets

LAYERS = 2


@pytest.mark.parametrize("opset", [13, 14, 16])
def test_target_onnx_raises_the_opset_to_17_for_layer_norm(opset: int) -> None:
    original = norm_model(LayerNormSpec(), opset=opset, layers=LAYERS)
    result = normfuse.optimize(original, target="onnx")
    assert op_types(result.model) == ["LayerNormalization", "MatMul", "Add"] * LAYERS
    assert targets.default_opset(result.model) == 17
    assert not result.report.ort_only
    onnx.checker.check_model(result.model, full_check=True)
    assert_same_numerics(original, result.model, {"batch": 3}, seed=30)


def test_target_onnx_raises_the_opset_to_23_for_rms_norm() -> None:
    original = norm_model(RmsNormSpec(), opset=18, layers=LAYERS)
    result = normfuse.optimize(original, target="onnx")
    assert op_types(result.model) == ["RMSNormalization", "MatMul", "Add"] * LAYERS
    assert targets.default_opset(result.model) == 23
    onnx.checker.check_model(result.model, full_check=True)
    assert_same_numerics(original, result.model, {"batch": 3}, seed=31)


def test_rms_norm_with_axes_attributes_is_not_raised_past_18() -> None:
    """ReduceMean-18 reads its axes from an input: an axes attribute (opset 17) has no meaning
    there, so a model keeping one cannot be raised to 23."""
    original = norm_model(RmsNormSpec(), opset=17)
    extra = onnx.helper.make_node("ReduceMean", ["x"], ["kept_mean"], axes=[-1], name="kept")
    original.graph.node.append(extra)
    original.graph.output.append(
        onnx.helper.make_tensor_value_info("kept_mean", onnx.TensorProto.FLOAT, None)
    )
    result = normfuse.optimize(original, target="onnx")
    assert result.report.sites == []
    misses = result.report.near_misses
    assert [miss.reason for miss in misses] == ["opset-too-low"]
    assert "RMSNormalization needs opset 23" in misses[0].detail


@pytest.mark.parametrize("training", [False, True])
def test_batch_norm_9_training_form_blocks_the_raise(training: bool) -> None:
    model = with_batch_norm(norm_model(LayerNormSpec(), shape=("batch", 7, 32), opset=13), training)
    assert targets.can_raise_opset(model, 17) is not training


def test_unraisable_model_is_refused_for_onnx_and_ort_only_for_ort() -> None:
    original = with_batch_norm(norm_model(LayerNormSpec(), opset=13), training_outputs=True)
    result = normfuse.optimize(original, target="onnx")
    assert result.report.sites == []
    assert result.model.SerializeToString() == original.SerializeToString()
    misses = result.report.near_misses
    assert [miss.reason for miss in misses] == ["opset-too-low"]
    assert "LayerNormalization needs opset 17" in misses[0].detail
    result = normfuse.optimize(original, target="ort")
    assert len(result.report.sites) == 1
    assert result.report.ort_only
    assert targets.default_opset(result.model) == 13


@pytest.mark.parametrize("target", ["ort", "onnx"])
def test_model_local_functions_are_raised_with_the_model(target: str) -> None:
    """A model at opset 16 whose function imports opset 16: raising the model raises the
    function too, so the result passes the checker."""
    original = local_function_model(opset=16)
    main = norm_model(LayerNormSpec(), shape=(2, 7, 32), opset=16, layers=1)
    original.graph.node.extend(main.graph.node)
    original.graph.initializer.extend(main.graph.initializer)
    original.graph.input.append(main.graph.input[0])
    original.graph.output.append(main.graph.output[0])
    result = normfuse.optimize(original, target=target)
    assert targets.default_opset(result.model) == 17
    assert all(
        entry.version == 17
        for function in result.model.functions
        for entry in function.opset_import
        if entry.domain == ""
    )
    onnx.checker.check_model(result.model, full_check=True)
    assert_same_numerics(original, result.model, seed=32)


def test_function_at_another_opset_blocks_the_raise() -> None:
    model = local_function_model(opset=16)
    model.functions[0].opset_import[0].version = 15
    assert not targets.can_raise_opset(model, 17)


def test_meaning_preserving_table_names_only_existing_versions() -> None:
    """Every version the table trusts is a real schema version of that operator."""
    for op, versions in targets._MEANING_PRESERVING_VERSIONS.items():
        for version in versions:
            assert onnx.defs.get_schema(op, version, "").since_version == version, (op, version)
