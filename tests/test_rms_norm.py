"""The RMS-norm pass: LLaMA/Gemma/T5 spellings fuse, in float32 and mixed precision, with matching
numerics; close spellings that compute something else are left unchanged with a reason."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import (
    assert_float32_kernel_between_casts,
    assert_same_numerics,
    op_types,
    random_inputs,
    run,
)

import normfuse
from models.builders import (
    LAYER_NORM_POSITIVES,
    RMS_NORM_FLOAT16_POSITIVES,
    RMS_NORM_NEGATIVES,
    RMS_NORM_POSITIVES,
    RmsNormSpec,
    norm_model,
)
from normfuse.prove.subgraph import as_float64

LAYERS = 2
EPSILON_F32 = float(np.float32(1e-5))  # a double epsilon the float32 attribute holds


def expected_ops(op: str) -> list[str]:
    return [op, "MatMul", "Add"] * LAYERS


@pytest.mark.parametrize("name", sorted(RMS_NORM_POSITIVES))
def test_fuses_variant_for_ort(name: str) -> None:
    original = norm_model(RMS_NORM_POSITIVES[name], layers=LAYERS)
    result = normfuse.optimize(original)
    assert op_types(result.model) == expected_ops("SimplifiedLayerNormalization")
    assert [site.kind for site in result.report.sites] == ["rms-norm"] * LAYERS
    assert result.report.near_misses == []
    assert result.report.ort_only
    assert list(result.model.graph.output) == list(original.graph.output)
    assert_same_numerics(original, result.model, {"batch": 3}, seed=7)


@pytest.mark.parametrize("name", ["llama_float32", "gemma_one_plus_w", "last_two_axes"])
def test_fuses_standard_rms_normalization_at_opset_23(name: str) -> None:
    original = norm_model(RMS_NORM_POSITIVES[name], opset=23, layers=LAYERS)
    result = normfuse.optimize(original, target="onnx")
    assert op_types(result.model) == expected_ops("RMSNormalization")
    assert not result.report.ort_only
    onnx.checker.check_model(result.model, full_check=True)
    assert_same_numerics(original, result.model, {"batch": 3}, seed=8)


def assert_float16_fused(original: onnx.ModelProto, op: str) -> None:
    """Fused to `op`'s float32 kernel between Casts; error against a float64 reference at most
    1.10x the original's (ORT CPU runs the original's statistics in float32 too)."""
    result = normfuse.optimize(original)
    assert_float32_kernel_between_casts(result.model, op, LAYERS)
    feeds = random_inputs(original, {"batch": 3}, seed=9)
    reference = run(as_float64(original), {k: v.astype(np.float64) for k, v in feeds.items()})[0]
    original_out, fused_out = run(original, feeds)[0], run(result.model, feeds)[0]
    scale = np.max(np.abs(reference))
    assert np.max(np.abs(fused_out - original_out)) / scale <= 1e-2
    original_error = np.max(np.abs(original_out - reference))
    assert np.max(np.abs(fused_out - reference)) <= 1.10 * original_error


@pytest.mark.parametrize("name", sorted(RMS_NORM_FLOAT16_POSITIVES))
def test_fuses_float16_mixed_precision(name: str) -> None:
    model = norm_model(RMS_NORM_FLOAT16_POSITIVES[name], dtype=np.float16, layers=LAYERS)
    assert_float16_fused(model, "SimplifiedLayerNormalization")


def test_fuses_float16_layer_norm_with_casts_around_the_statistics() -> None:
    spec = LAYER_NORM_POSITIVES["torchscript"].__class__(casts="around")
    model = norm_model(spec, dtype=np.float16, layers=LAYERS)
    assert op_types(model).count("Cast") == 2 * LAYERS
    assert_float16_fused(model, "LayerNormalization")


@pytest.mark.parametrize("scale", [True, False])
@pytest.mark.parametrize("bias", [True, False])
def test_float16_negated_numerator_keeps_its_sign_after_the_cast(scale: bool, bias: bool) -> None:
    """(mean - x) / std, cast back, then the affine in float16: the sign the fused node's scale
    carries survives moving the affine after the Cast (hypothesis found it lost without a
    scale). Numerics against the original on every adversarial input set."""
    spec = LAYER_NORM_POSITIVES["torchscript"].__class__(
        casts="around", centered="mean_minus_x", scale=scale, bias=bias
    )
    model = norm_model(spec, dtype=np.float16, layers=LAYERS)
    result = normfuse.optimize(model)
    assert_float32_kernel_between_casts(result.model, "LayerNormalization", LAYERS)
    assert_same_numerics(model, result.model, {"batch": 3}, seed=4, rtol=1e-2)


def test_upcast_without_cast_back_keeps_the_upcast() -> None:
    """x (float16) -> Cast(float32) -> RMS in float32, output float32: the Cast stays."""
    original = _upcast_only_model()
    result = normfuse.optimize(original)
    assert op_types(result.model) == ["Cast", "SimplifiedLayerNormalization"]
    assert result.report.sites[0].input == "wide"
    assert_same_numerics(original, result.model, seed=10)


def _upcast_only_model() -> onnx.ModelProto:
    from onnx import helper, numpy_helper

    f16, f32 = onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT
    nodes = [
        helper.make_node("Cast", ["x"], ["wide"], to=f32),
        helper.make_node("Pow", ["wide", "two"], ["square"]),
        helper.make_node("ReduceMean", ["square"], ["mean_square"], axes=[-1]),
        helper.make_node("Add", ["mean_square", "epsilon"], ["shifted"]),
        helper.make_node("Sqrt", ["shifted"], ["rms"]),
        helper.make_node("Div", ["wide", "rms"], ["normed"]),
        helper.make_node("Mul", ["normed", "scale"], ["y"]),
    ]
    rng = np.random.default_rng(0)
    initializers = [
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        numpy_helper.from_array(np.array(1e-6, np.float32), "epsilon"),
        numpy_helper.from_array(rng.uniform(0.5, 1.5, 16).astype(np.float32), "scale"),
    ]
    graph = helper.make_graph(
        nodes,
        "upcast_only",
        [helper.make_tensor_value_info("x", f16, [2, 5, 16])],
        [helper.make_tensor_value_info("y", f32, [2, 5, 16])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("name", sorted(RMS_NORM_NEGATIVES))
def test_rejects_condition(name: str) -> None:
    spec, reason = RMS_NORM_NEGATIVES[name]
    original = norm_model(spec)
    result = normfuse.optimize(original)
    assert result.report.sites == []
    assert result.model.SerializeToString() == original.SerializeToString()
    assert [miss.reason for miss in result.report.near_misses] == [reason]


def test_rejects_intermediate_used_elsewhere() -> None:
    original = norm_model(RmsNormSpec(), expose="Sqrt")
    result = normfuse.optimize(original)
    assert result.report.sites == []
    assert [miss.reason for miss in result.report.near_misses] == ["intermediate-used-elsewhere"]


def test_declined_layer_norm_is_not_fused_as_rms_of_the_centered_input() -> None:
    spec = LAYER_NORM_POSITIVES["torchscript"].__class__(variance_axes=(-2, -1))
    original = norm_model(spec)
    result = normfuse.optimize(original)
    assert result.report.sites == []
    assert [miss.reason for miss in result.report.near_misses] == ["mismatched-axes"]


def test_fuses_rms_norm_followed_by_a_bias_and_keeps_the_add() -> None:
    original = norm_model(RmsNormSpec(bias=True), layers=LAYERS)
    result = normfuse.optimize(original)
    assert op_types(result.model) == ["SimplifiedLayerNormalization", "Add", "MatMul", "Add"] * 2
    assert result.report.near_misses == []
    assert_same_numerics(original, result.model, {"batch": 3}, seed=17)


@pytest.mark.parametrize(
    ("spec", "reasons"),
    [
        # keepdims=0 restored over the wrong axis: x / rms of the transposed rows.
        (RmsNormSpec(unsqueeze_axes=(-2,)), ["unsqueeze-axes"]),
        # A layer norm the layer-norm pass declines is not an RMS norm of `x - mean` either,
        # whatever way the mean is written (keepdims=0 + Unsqueeze, mean - x).
        (
            LAYER_NORM_POSITIVES["keepdims_0_unsqueeze"].__class__(
                unsqueeze_axes=(-1,), epsilon_outside_sqrt=True
            ),
            ["epsilon-outside-sqrt"],
        ),
        (
            LAYER_NORM_POSITIVES["mean_minus_x"].__class__(
                centered="mean_minus_x", variance_axes=(-2, -1)
            ),
            ["mismatched-axes"],
        ),
    ],
    ids=["unsqueeze-wrong-axis", "layer-norm-unsqueezed-mean", "layer-norm-mean-minus-x"],
)
def test_rejects_look_alikes_with_their_own_reason(spec, reasons) -> None:
    original = norm_model(spec, shape=("batch", 32, 32))
    result = normfuse.optimize(original)
    assert result.report.sites == []
    assert result.model.SerializeToString() == original.SerializeToString()
    assert [miss.reason for miss in result.report.near_misses] == reasons


def test_fuses_float64_for_ort_in_double() -> None:
    """ONNX Runtime's CPU SimplifiedLayerNormalization runs in double for double inputs."""
    original = norm_model(RmsNormSpec(epsilon=EPSILON_F32), dtype=np.float64, layers=LAYERS)
    result = normfuse.optimize(original)
    assert op_types(result.model) == expected_ops("SimplifiedLayerNormalization")
    assert_same_numerics(original, result.model, {"batch": 3}, seed=18, rtol=1e-12)


def test_fuses_float64_standard_rms_normalization_with_double_statistics() -> None:
    original = norm_model(
        RmsNormSpec(epsilon=EPSILON_F32), opset=23, dtype=np.float64, layers=LAYERS
    )
    result = normfuse.optimize(original, target="onnx")
    assert op_types(result.model) == expected_ops("RMSNormalization")
    stash = {a.name: a.i for a in result.model.graph.node[0].attribute}["stash_type"]
    assert stash == onnx.TensorProto.DOUBLE
    onnx.checker.check_model(result.model, full_check=True)
    assert_same_numerics(original, result.model, {"batch": 3}, seed=19, rtol=1e-12)


@pytest.mark.parametrize(("axis", "fused_axis"), [(-1, -1), (1, -2)])
def test_axes_computed_from_the_shape_fold_where_the_rank_is_static(axis, fused_axis) -> None:
    from models.builders import range_axes_model

    original = range_axes_model(axis=axis)
    result = normfuse.optimize(original)
    assert op_types(result.model) == ["SimplifiedLayerNormalization"]
    assert result.report.sites[0].axis == fused_axis
    assert_same_numerics(original, result.model, seed=25)


def test_axes_from_the_shape_over_a_dynamic_batch_are_refused() -> None:
    """Range(0, rank): every axis, the dynamic batch included; no static normalised shape."""
    from models.builders import range_axes_model

    original = range_axes_model(axis=0)
    result = normfuse.optimize(original)
    assert result.report.sites == []
    assert [miss.reason for miss in result.report.near_misses] == ["unknown-shape"]


@pytest.mark.parametrize(
    ("provider", "scale", "widened"),
    [
        (None, np.float16(1.5), True),  # no tuning: ONNX Runtime's CPU provider's float32 kernel
        ("cpu", np.float16(1.5), True),
        ("cuda", np.float16(1.5), False),  # CUDA's float16 kernel
        ("cuda", np.float32(1 + 2**-12), True),  # a float32 scale float16 cannot hold exactly
    ],
)
def test_float16_kernel_choice_per_provider(provider, scale, widened: bool) -> None:
    """Which kernel a float16 norm gets: float32 between Casts except when tuning for CUDA, where
    the float16 kernel is kept unless it would round a parameter."""
    from types import SimpleNamespace

    import onnx_graphsurgeon as gs

    from normfuse.match.fused_sites import widened_float16
    from normfuse.match.norm_checks import FusedIO

    io = FusedIO(gs.Variable("x"), onnx.TensorProto.FLOAT16, np.float16, None, ())
    chooser = None if provider is None else SimpleNamespace(provider=provider)
    context = SimpleNamespace(policy=SimpleNamespace(form_chooser=chooser))
    assert widened_float16(io, context, (np.full(4, scale),)) is widened
    float32_io = FusedIO(gs.Variable("x"), onnx.TensorProto.FLOAT, np.float32, None, ())
    assert not widened_float16(float32_io, context, (np.full(4, scale),))
