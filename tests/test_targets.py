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
from normfuse.target import targets

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


def test_surviving_reduce_with_axes_attribute_is_adapted_for_the_raise() -> None:
    """ReduceMean-18 reads its axes from an input: a kept ReduceMean-13 with an axes attribute is
    respelled with a constant axes input, so the model is raised to 23 for RMSNormalization."""
    original = norm_model(RmsNormSpec(), opset=17)
    extra = onnx.helper.make_node("ReduceMean", ["x"], ["kept_mean"], axes=[-1], name="kept")
    original.graph.node.append(extra)
    original.graph.output.append(
        onnx.helper.make_tensor_value_info("kept_mean", onnx.TensorProto.FLOAT, ("batch", 7, 1))
    )
    result = normfuse.optimize(original, target="onnx")
    assert [site.op for site in result.report.sites] == ["RMSNormalization"]
    assert targets.default_opset(result.model) == 23
    kept = next(node for node in result.model.graph.node if node.name == "kept")
    assert len(kept.input) == 2 and not kept.attribute
    onnx.checker.check_model(result.model, full_check=True)
    assert_same_numerics(original, result.model, {"batch": 3}, seed=35)


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


@pytest.mark.parametrize("target", ["ort", "onnx"])
@pytest.mark.parametrize("opset", [13, 15, 16])
def test_a_site_inside_a_function_raises_the_model(target: str, opset: int) -> None:
    """The only norm is inside a function importing the model's opset: the site asks for the
    raise itself, so the result is standard ONNX at 17 (not an ORT-only node at the old opset)."""
    original = local_function_model(sequences=(7, 5), opset=opset)
    result = normfuse.optimize(original, target=target)
    assert len(result.report.sites) == 1
    assert not result.report.ort_only
    assert targets.default_opset(result.model) == 17
    assert [e.version for f in result.model.functions for e in f.opset_import] == [17]
    onnx.checker.check_model(result.model, full_check=True)
    assert_same_numerics(original, result.model, seed=33)


def test_a_function_at_another_opset_keeps_it() -> None:
    """A function importing another opset than the model is never raised: its site is the
    ORT-only form at the function's opset for ONNX Runtime, and refused for standard ONNX."""
    original = local_function_model(opset=16)
    original.functions[0].opset_import[0].version = 15
    result = normfuse.optimize(original, target="ort")
    assert [site.ort_only for site in result.report.sites] == [True]
    assert targets.default_opset(result.model) == 16
    assert_same_numerics(original, result.model, seed=34)
    result = normfuse.optimize(original, target="onnx")
    assert result.report.sites == []
    assert [miss.reason for miss in result.report.near_misses] == ["opset-too-low"]


def test_function_at_another_opset_blocks_the_raise() -> None:
    model = local_function_model(opset=16)
    model.functions[0].opset_import[0].version = 15
    assert not targets.can_raise_opset(model, 17)
