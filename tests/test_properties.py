"""Property-based tests: random layer-norm and RMS-norm graphs always fuse as intended with matching
numerics; random mutations that break the mathematics never fuse."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import FLOAT32_ATOL, assert_same_numerics, op_counts
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import normfuse
from models.builders import LayerNormSpec, RmsNormSpec, norm_model

SETTINGS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
FUSED_OPS = ("LayerNormalization", "SimplifiedLayerNormalization")

axes = st.sampled_from([(-1,), (-2, -1)])
epsilons = st.sampled_from([1e-12, 1e-6, 1e-5, 1e-3, 0.1])

layer_norm_specs = st.builds(
    LayerNormSpec,
    axes=axes,
    square=st.sampled_from(["pow", "mul"]),
    divide=st.sampled_from(["div", "reciprocal", "one_over", "pow_half", "pow_minus_one"]),
    variance=st.sampled_from(["mean", "sum_over_d", "sum_times_reciprocal", "sum_over_shape_d"]),
    root=st.sampled_from(["sqrt", "pow"]),
    centered=st.sampled_from(["x_minus_mean", "mean_minus_x", "numerator_negated"]),
    epsilon=epsilons,
    epsilon_form=st.sampled_from(["initializer", "value_float", "value", "one_element"]),
    scale=st.booleans(),
    bias=st.booleans(),
    scale_first=st.booleans(),
    bias_first=st.booleans(),
    shared_centered=st.booleans(),
)
rms_norm_specs = st.builds(
    RmsNormSpec,
    axes=axes,
    square=st.sampled_from(["pow", "mul"]),
    divide=st.sampled_from(["div", "reciprocal", "one_over", "pow_half", "pow_minus_one"]),
    mean=st.sampled_from(
        [
            "mean",
            "sum_over_d",
            "sum_times_reciprocal",
            "sum_square_over_d",
            "l2_squared_over_d",
            "epsilon_in_sum",
        ]
    ),
    root=st.sampled_from(["sqrt", "pow"]),
    epsilon=epsilons,
    scale=st.sampled_from(["plain", "none", "gemma"]),
    scale_first=st.booleans(),
)
# Intermediates whose extra use must stop the first norm from fusing.
# (The first Add of a norm is `variance + epsilon` in every spelling generated here.)
BLOCKING_EXPOSURES = {LayerNormSpec: ["Add", "Sub"], RmsNormSpec: ["Add", "Add"]}


def with_distractor(model: onnx.ModelProto) -> onnx.ModelProto:
    """Add `Mul(Relu(x), Relu(x))` as an extra output: a squaring that is no norm."""
    graph = model.graph
    graph.node.extend(
        [
            onnx.helper.make_node("Relu", ["x"], ["distractor_relu"], name="distractor_relu"),
            onnx.helper.make_node(
                "Mul", ["distractor_relu", "distractor_relu"], ["distractor"], name="distractor_mul"
            ),
        ]
    )
    graph.output.append(onnx.helper.make_tensor_value_info("distractor", 0, None))
    graph.output[-1].type.CopyFrom(graph.input[0].type)
    return model


def assert_numerics(original: onnx.ModelProto, fused: onnx.ModelProto, seed: int) -> None:
    """The same outputs on every adversarial input profile (tiny and constant rows, large and
    negative values, outliers); float16 models within float16 rounding."""
    outputs = [info.type.tensor_type.elem_type for info in original.graph.output]
    half = onnx.TensorProto.FLOAT16 in outputs
    assert_same_numerics(original, fused, {"batch": 2}, seed, rtol=1e-2 if half else FLOAT32_ATOL)


@SETTINGS
@given(
    spec=st.one_of(layer_norm_specs, rms_norm_specs),
    layers=st.integers(1, 3),
    half=st.booleans(),
    expose=st.booleans(),
    distractor=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_random_norm_graphs_fuse_as_intended(spec, layers, half, expose, distractor, seed) -> None:
    if half:
        casts = "around" if isinstance(spec, LayerNormSpec) else "llama"
        spec = type(spec)(**{**spec.__dict__, "casts": casts})
    exposed = BLOCKING_EXPOSURES[type(spec)][seed % 2] if expose and not half else None
    original = norm_model(
        spec, layers=layers, dtype=np.float16 if half else np.float32, expose=exposed, seed=seed
    )
    if distractor:
        original = with_distractor(original)
    result = normfuse.optimize(original)
    intended = layers - (1 if exposed else 0)
    assert len(result.report.sites) == intended
    assert sum(op_counts(result.model)[op] for op in FUSED_OPS) == intended
    if exposed:
        assert [miss.reason for miss in result.report.near_misses] == [
            "intermediate-used-elsewhere"
        ]
    if not result.report.ort_only:
        onnx.checker.check_model(result.model, full_check=True)
    assert_numerics(original, result.model, seed)


MUTATIONS = {
    "non_trailing_axis": ({"axes": (1,)}, {"axes": (1,)}),
    "unbiased_divisor": ({"variance": "sum_over_d_minus_1"}, None),
    "epsilon_outside_sqrt": ({"epsilon_outside_sqrt": True}, {"epsilon_outside_sqrt": True}),
    "batch_axis": (
        {"axes": (0, 1), "scale": False, "bias": False, "variance": "mean"},
        {"axes": (0, 1), "scale": "none", "mean": "mean"},
    ),
    "sum_not_mean": (None, {"mean": "sum"}),
    "mean_of_abs": (None, {"square": "abs"}),
}
# RMS spellings a mutation does not apply to (they have no squares or no separate epsilon Add).
IGNORES_MUTATION = {
    "epsilon_outside_sqrt": ("epsilon_in_sum",),
    "mean_of_abs": ("sum_square_over_d", "l2_squared_over_d", "epsilon_in_sum"),
}
MUTATION_REASONS = {
    "non_trailing_axis": "non-trailing-axes",
    "unbiased_divisor": "unbiased-variance",
    "epsilon_outside_sqrt": "epsilon-outside-sqrt",
    "batch_axis": "batch-axis",
    "sum_not_mean": "sum-not-mean",
    "mean_of_abs": "mean-abs-not-square",
}


# Every (family, mutation) pair that applies: each is drawn (no example returns early).
MUTATION_CASES = [
    (family, mutation)
    for mutation in sorted(MUTATIONS)
    for family, changes in zip(("layer-norm", "rms-norm"), MUTATIONS[mutation], strict=True)
    if changes is not None
]
SPECS = {"layer-norm": layer_norm_specs, "rms-norm": rms_norm_specs}


@pytest.mark.parametrize(("family", "mutation"), MUTATION_CASES)
@settings(SETTINGS, max_examples=4)
@given(data=st.data(), layers=st.integers(1, 2))
def test_mutations_that_break_the_maths_never_fuse(family, mutation, data, layers) -> None:
    spec = data.draw(SPECS[family], label="spec")
    changes = MUTATIONS[mutation][0 if family == "layer-norm" else 1]
    mutated = type(spec)(**{**spec.__dict__, **changes})
    if isinstance(spec, RmsNormSpec) and spec.mean in IGNORES_MUTATION.get(mutation, ()):
        mutated = type(spec)(**{**mutated.__dict__, "mean": "mean"})
    original = norm_model(mutated, layers=layers)
    result = normfuse.optimize(original)
    assert result.report.sites == []
    assert result.model.SerializeToString() == original.SerializeToString()
    assert [miss.reason for miss in result.report.near_misses] == [
        MUTATION_REASONS[mutation]
    ] * layers
