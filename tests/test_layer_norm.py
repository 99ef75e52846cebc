"""The layer-norm pass: every spelling that is layer norm fuses with identical numerics; every
graph that is something else is left unchanged with a stated reason."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import (
    FLOAT32_ATOL,
    adversarial_inputs,
    assert_float32_kernel_between_casts,
    assert_same_numerics,
    op_types,
    random_inputs,
    run,
)

import normfuse
from models.builders import (
    FUNCTION_BODY_NEGATIVES,
    OTHER_FAMILIES,
    SHARED_CENTERED_NEGATIVES,
    LayerNormSpec,
    norm_model,
    onnx_layer_norm_function_model,
    shared_centered_model,
)
from models.builders import (
    LAYER_NORM_NEGATIVES as NEGATIVES,
)
from models.builders import (
    LAYER_NORM_POSITIVES as POSITIVES,
)
from models.builders import (
    LAYER_NORM_STRUCTURES as STRUCTURES,
)
from normfuse.prove.subgraph import as_float64

LAYERS = 2
EPSILON_F32 = float(np.float32(1e-5))  # a double epsilon the float32 attribute holds
EXPECTED_OPS = ["LayerNormalization", "MatMul", "Add"] * LAYERS


def assert_fused(original: onnx.ModelProto, opset_after: int = 17) -> normfuse.OptimizeResult:
    """Optimise `original` and check everything a positive must satisfy."""
    result = normfuse.optimize(original)
    fused = result.model
    assert op_types(fused) == EXPECTED_OPS
    assert len(result.report.sites) == LAYERS
    assert result.report.near_misses == []
    assert [o.name for o in fused.graph.output] == [o.name for o in original.graph.output]
    assert list(fused.graph.input) == list(original.graph.input)
    assert normfuse.target.targets.default_opset(fused) == opset_after
    onnx.checker.check_model(fused, full_check=True)
    assert_same_numerics(original, fused, {"batch": 3}, seed=1)
    return result


def assert_unchanged(original: onnx.ModelProto, reason: str) -> None:
    """Optimise `original` and check that nothing changed and the reason was given."""
    result = normfuse.optimize(original)
    assert result.report.sites == []
    assert result.model.SerializeToString() == original.SerializeToString()
    assert reason in [miss.reason for miss in result.report.near_misses]


@pytest.mark.parametrize("name", sorted(POSITIVES))
def test_fuses_variant(name: str) -> None:
    assert_fused(norm_model(POSITIVES[name], layers=LAYERS))


@pytest.mark.parametrize("opset", [13, 14, 16])
def test_fuses_below_opset_17_by_raising_the_opset(opset: int) -> None:
    result = assert_fused(norm_model(LayerNormSpec(), opset=opset, layers=LAYERS))
    assert result.report.opset_before == opset
    assert not result.report.ort_only


@pytest.mark.parametrize("name", ["torchscript", "last_two_axes", "population_sum_over_d"])
def test_fuses_opset_18_axes_input(name: str) -> None:
    model = norm_model(POSITIVES[name], opset=18, layers=LAYERS)
    assert any(len(node.input) == 2 for node in model.graph.node if node.op_type == "ReduceMean")
    assert_fused(model, opset_after=18)


def test_fuses_float16_at_least_as_accurately() -> None:
    original = norm_model(
        LayerNormSpec(epsilon_form="value_float"), dtype=np.float16, layers=LAYERS
    )
    result = normfuse.optimize(original)
    assert_float32_kernel_between_casts(result.model, "LayerNormalization", LAYERS)
    feeds = random_inputs(original, {"batch": 3}, seed=2)
    reference = run(as_float64(original), {k: v.astype(np.float64) for k, v in feeds.items()})[0]
    original_error = np.max(np.abs(run(original, feeds)[0] - reference))
    fused_error = np.max(np.abs(run(result.model, feeds)[0] - reference))
    assert fused_error <= 1.10 * original_error


def downcast_layer_norm_model() -> onnx.ModelProto:
    """Layer norm of a float32 x with scale and bias in float32, its result cast to float16."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    consts = {
        "two": np.array(2.0),
        "eps": np.array(1e-5),
        "scale": rng.uniform(0.5, 1.5, 32),
        "bias": rng.normal(0, 0.5, 32),
    }
    initializers = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in consts.items()]
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["mean"], axes=[-1]),
        helper.make_node("Sub", ["x", "mean"], ["centered"]),
        helper.make_node("Pow", ["centered", "two"], ["square"]),
        helper.make_node("ReduceMean", ["square"], ["variance"], axes=[-1]),
        helper.make_node("Add", ["variance", "eps"], ["shifted"]),
        helper.make_node("Sqrt", ["shifted"], ["std"]),
        helper.make_node("Div", ["centered", "std"], ["normed"]),
        helper.make_node("Mul", ["normed", "scale"], ["scaled"]),
        helper.make_node("Add", ["scaled", "bias"], ["y32"]),
        helper.make_node("Cast", ["y32"], ["y"], to=TensorProto.FLOAT16),
    ]
    graph = helper.make_graph(
        nodes,
        "downcast",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 7, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2, 7, 32])],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_fuses_float32_statistics_cast_down_with_one_cast_after() -> None:
    original = downcast_layer_norm_model()
    result = normfuse.optimize(original)
    assert op_types(result.model) == ["LayerNormalization", "Cast"]
    assert result.report.near_misses == []
    assert result.model.graph.node[1].attribute[0].i == onnx.TensorProto.FLOAT16
    # one float16 rounding of the same float32 result: at most one float16 ulp apart
    assert_same_numerics(original, result.model, rtol=1e-3)


@pytest.mark.parametrize("name", sorted(NEGATIVES))
def test_rejects_condition(name: str) -> None:
    spec, reason = NEGATIVES[name]
    assert_unchanged(norm_model(spec, layers=1), reason)


@pytest.mark.parametrize("node", ["Sqrt", "Sub", "Add"])
def test_rejects_intermediate_used_elsewhere(node: str) -> None:
    assert_unchanged(norm_model(LayerNormSpec(), expose=node), "intermediate-used-elsewhere")


@pytest.mark.parametrize(
    ("spec", "node", "index"),
    [
        (LayerNormSpec(divide="reciprocal"), "Reciprocal", 2),
        (LayerNormSpec(divide="pow_half"), "Pow", 2),
        (LayerNormSpec(form="keras"), "Reciprocal", 2),
    ],
    ids=["reciprocal", "pow-minus-half", "keras"],
)
def test_fuses_with_inv_std_output_where_it_is_used(spec, node, index) -> None:
    """1/std used outside becomes LayerNormalization's optional InvStdDev output."""
    original = norm_model(spec, expose=node)
    if node == "Pow":  # the second Pow of the spelling: Pow(variance + epsilon, -0.5)
        exposed = [n for n in original.graph.node if n.op_type == "Pow"][1].output[0]
        original.graph.output[1].name = exposed
    result = normfuse.optimize(original)
    fused = result.model
    assert op_types(fused).count("LayerNormalization") == 1
    assert set(op_types(fused)) == {"LayerNormalization", "MatMul", "Add"}
    ln = next(n for n in fused.graph.node if n.op_type == "LayerNormalization")
    assert ln.output[index] == original.graph.output[1].name
    onnx.checker.check_model(fused, full_check=True)
    assert_same_numerics(original, fused, seed=22)
    assert_same_on_infinite_rows(original, fused)


def assert_same_on_infinite_rows(original: onnx.ModelProto, fused: onnx.ModelProto) -> None:
    """Rows holding +inf or -inf give the same outputs, NaN where NaN and inf where inf."""
    feeds = random_inputs(original, seed=23)
    name = original.graph.input[0].name
    for value in (np.inf, -np.inf):
        x = feeds[name].copy()
        x[..., 0] = value
        case = {**feeds, name: x}
        for expected, actual in zip(run(original, case), run(fused, case), strict=True):
            np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-4, equal_nan=True)


def test_a_mean_used_elsewhere_stays_the_models_own_reduce_mean() -> None:
    """ONNX Runtime's LayerNormalization gives Mean = NaN for a row holding +-inf, where
    ReduceMean gives +-inf: a mean used outside is not taken from the fused node; its ReduceMean
    stays and the norm fuses."""
    original = norm_model(LayerNormSpec(), expose="ReduceMean")
    result = normfuse.optimize(original)
    fused = result.model
    assert op_types(fused) == ["ReduceMean", "LayerNormalization", "MatMul", "Add"]
    ln = next(n for n in fused.graph.node if n.op_type == "LayerNormalization")
    assert len(ln.output) == 1
    assert result.report.near_misses == []
    onnx.checker.check_model(fused, full_check=True)
    assert_same_numerics(original, fused, seed=22)
    assert_same_on_infinite_rows(original, fused)


@pytest.mark.parametrize("name", sorted(STRUCTURES))
def test_fuses_every_norm_of_a_structure(name: str) -> None:
    """ONNX's function body (Mean and InvStdDev used) fuses to one node whose InvStdDev is the
    Reciprocal's output; two norms sharing a mean or x - mean fuse to two nodes, and the shared
    nodes die."""
    original = STRUCTURES[name]()
    result = normfuse.optimize(original)
    fused = result.model
    norms = [n for n in fused.graph.node if n.op_type == "LayerNormalization"]
    assert len(norms) == len(result.report.sites) == (2 if name.startswith("shared") else 1)
    assert result.report.near_misses == []
    onnx.checker.check_model(fused, full_check=True)
    if name.startswith("shared"):
        assert op_types(fused) == ["LayerNormalization", "LayerNormalization", "Add"]
    else:
        producers = [n.op_type for n in original.graph.node if n.output[0] == norms[0].output[2]]
        assert producers == ["Reciprocal"]
        assert "Sqrt" not in op_types(fused) and "Reciprocal" not in op_types(fused)
    assert_same_numerics(original, fused, seed=25)
    assert_same_on_infinite_rows(original, fused)


@pytest.mark.parametrize("parameters", ["constants", "inputs"])
@pytest.mark.parametrize("variant", sorted(FUNCTION_BODY_NEGATIVES))
def test_rejects_function_body_near_misses(variant: str, parameters: str) -> None:
    original = onnx_layer_norm_function_model(parameters=parameters, variant=variant)
    assert_unchanged(original, FUNCTION_BODY_NEGATIVES[variant])
    result = normfuse.optimize(original)
    assert [miss.reason for miss in result.report.near_misses] == [FUNCTION_BODY_NEGATIVES[variant]]


def test_function_body_with_mean_reshaped_elsewhere_still_fuses() -> None:
    """The fused node replaces the 2-D statistics only; the Reshapes back are the model's own and
    stay, so a Reshape of the mean to another shape computes what it did (docs/ARCHITECTURE)."""
    original = onnx_layer_norm_function_model(variant="reshape_mean_elsewhere")
    result = normfuse.optimize(original)
    assert len(result.report.sites) == 1
    assert op_types(result.model).count("Reshape") == 3
    assert_same_numerics(original, result.model, seed=26)


@pytest.mark.parametrize("variant", sorted(SHARED_CENTERED_NEGATIVES))
def test_rejects_shared_centering_with_a_use_outside_both_norms(variant: str) -> None:
    original = shared_centered_model(variant=variant)
    assert_unchanged(original, SHARED_CENTERED_NEGATIVES[variant])
    result = normfuse.optimize(original)
    reasons = [miss.reason for miss in result.report.near_misses]
    assert reasons == [SHARED_CENTERED_NEGATIVES[variant]]


def test_fuses_core_when_only_the_normed_tensor_escapes() -> None:
    """If `normed` also feeds a graph output, the norm without scale and bias still fuses."""
    original = norm_model(LayerNormSpec(divide="div"), expose="Div")
    result = normfuse.optimize(original)
    assert op_types(result.model) == ["LayerNormalization", "Mul", "Add", "MatMul", "Add"]
    assert_same_numerics(original, result.model, seed=3)


def test_target_ort_emits_ort_only_layer_norm_where_opset_cannot_be_raised() -> None:
    original = norm_model(LayerNormSpec(), opset=12, layers=LAYERS)
    result = normfuse.optimize(original)
    assert result.report.ort_only
    assert op_types(result.model) == EXPECTED_OPS
    assert normfuse.target.targets.default_opset(result.model) == 12
    assert_same_numerics(original, result.model, seed=4)


def test_optimizing_twice_gives_identical_bytes() -> None:
    once = normfuse.optimize(norm_model(LayerNormSpec(), opset=14, layers=LAYERS)).model
    twice = normfuse.optimize(once).model
    assert twice.SerializeToString() == once.SerializeToString()


def test_keeps_model_metadata_doc_strings_and_value_info() -> None:
    original = norm_model(LayerNormSpec(), layers=LAYERS)
    kept = next(n.output[0] for n in original.graph.node if n.op_type == "MatMul")
    removed = next(n.output[0] for n in original.graph.node if n.op_type == "Sqrt")
    original.graph.value_info.extend(
        [
            onnx.helper.make_tensor_value_info(kept, onnx.TensorProto.FLOAT, ["batch", 7, 32]),
            onnx.helper.make_tensor_value_info(removed, onnx.TensorProto.FLOAT, ["batch", 7, 1]),
        ]
    )
    fused = normfuse.optimize(original).model
    assert fused.doc_string == original.doc_string
    assert list(fused.metadata_props) == list(original.metadata_props)
    assert fused.producer_name == original.producer_name
    assert fused.graph.name == original.graph.name
    assert list(fused.graph.value_info) == [original.graph.value_info[0]]


def test_passes_option_can_disable_layer_norm() -> None:
    original = norm_model(LayerNormSpec())
    result = normfuse.optimize(original, passes=[])
    assert result.report.sites == []
    assert result.model.SerializeToString() == original.SerializeToString()


def test_unknown_pass_is_a_clear_error() -> None:
    with pytest.raises(normfuse.NormfuseError, match="unknown pass"):
        normfuse.optimize(norm_model(LayerNormSpec()), passes="layer-nrom")


def test_rejects_epsilon_that_broadcasts_to_a_higher_rank() -> None:
    original = norm_model(LayerNormSpec(epsilon_form="one_element"))
    epsilon = next(t for t in original.graph.initializer if t.name.startswith("epsilon"))
    epsilon.dims[:] = [1, 1, 1, 1]
    original.graph.output[0].type.tensor_type.ClearField("shape")
    result = normfuse.optimize(original)
    assert result.report.sites == []
    assert result.model.SerializeToString() == original.SerializeToString()
    assert [miss.reason for miss in result.report.near_misses] == ["broadcast-shape"]
    feeds = random_inputs(original, seed=11)
    assert run(original, feeds)[0].ndim == 4


def if_model_with_norm_in_branch() -> onnx.ModelProto:
    """`y = If(cond, then: LN(x) (decomposed, reading outer x), else: Identity(x))`."""
    from onnx import helper

    from models.builders import GraphBuilder, add_layer_norm

    shape = (2, 7, 32)
    b = GraphBuilder(17)
    normed = add_layer_norm(b, "x", shape, LayerNormSpec(), np.random.default_rng(0))
    b.nodes.append(helper.make_node("Identity", [normed], ["then_out"]))
    float_type = onnx.TensorProto.FLOAT
    then_branch = helper.make_graph(
        b.nodes,
        "then",
        [],
        [helper.make_tensor_value_info("then_out", float_type, list(shape))],
        b.initializers,
    )
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["else_out"])],
        "else",
        [],
        [helper.make_tensor_value_info("else_out", float_type, list(shape))],
    )
    graph = helper.make_graph(
        [helper.make_node("If", ["cond"], ["y"], then_branch=then_branch, else_branch=else_branch)],
        "if_model",
        [
            helper.make_tensor_value_info("x", float_type, list(shape)),
            helper.make_tensor_value_info("cond", onnx.TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", float_type, list(shape))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_fuses_inside_if_branch_reading_outer_scope() -> None:
    original = if_model_with_norm_in_branch()
    result = normfuse.optimize(original)
    assert len(result.report.sites) == 1
    then_branch = next(a.g for a in result.model.graph.node[0].attribute if a.name == "then_branch")
    assert [node.op_type for node in then_branch.node] == ["LayerNormalization", "Identity"]
    onnx.checker.check_model(result.model, full_check=True)
    for name, profile in adversarial_inputs(original, seed=12).items():
        for cond in (True, False):
            feeds = {**profile, "cond": np.array(cond)}
            pairs = zip(run(original, feeds), run(result.model, feeds), strict=True)
            for expected, actual in pairs:
                error = np.max(np.abs(expected.astype(np.float64) - actual))
                assert error <= FLOAT32_ATOL * max(1.0, np.abs(expected).max()), (name, cond)


def test_fuses_last_three_axes_of_a_rank_4_tensor() -> None:
    spec = LayerNormSpec(axes=(-3, -2, -1))
    original = norm_model(spec, shape=("batch", 3, 5, 8), layers=1)
    result = normfuse.optimize(original)
    assert op_types(result.model) == ["LayerNormalization", "MatMul", "Add"]
    assert result.report.sites[0].axis == -3
    assert_same_numerics(original, result.model, {"batch": 2}, seed=13)


@pytest.mark.parametrize("name", sorted(OTHER_FAMILIES))
def test_rejects_other_normalisation_families(name: str) -> None:
    build, reason = OTHER_FAMILIES[name]
    assert_unchanged(build(), reason)


def rewired(model: onnx.ModelProto, op_type: str, change) -> onnx.ModelProto:
    """A copy of `model` whose first `op_type` node is changed by `change(node, model)`."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    node = next(n for n in copy.graph.node if n.op_type == op_type)
    change(node, copy)
    return copy


def swap_inputs(node: onnx.NodeProto, _model: onnx.ModelProto) -> None:
    node.input[0], node.input[1] = node.input[1], node.input[0]


def set_constant(name_prefix: str, value: float):
    def change(_node: onnx.NodeProto, model: onnx.ModelProto) -> None:
        tensor = next(t for t in model.graph.initializer if t.name.startswith(name_prefix))
        tensor.CopyFrom(onnx.numpy_helper.from_array(np.array(value, np.float32), tensor.name))

    return change


def drop_keepdims(node: onnx.NodeProto, _model: onnx.ModelProto) -> None:
    next(a for a in node.attribute if a.name == "keepdims").i = 0


@pytest.mark.parametrize(
    ("spec", "op_type", "change", "reasons"),
    [
        (LayerNormSpec(), "Div", swap_inputs, ["not-layer-norm"]),  # std / centered
        # std / (mean - x)
        (LayerNormSpec(centered="mean_minus_x"), "Div", swap_inputs, ["not-layer-norm"]),
        (LayerNormSpec(), "Pow", set_constant("two", 3.0), ["square-exponent"]),  # cubed
        (
            LayerNormSpec(divide="pow_half"),
            "Mul",
            set_constant("minus_half", 0.5),
            ["not-layer-norm"],
        ),
        (
            LayerNormSpec(divide="pow_half"),
            "Mul",
            set_constant("minus_half", -1.0),
            ["not-layer-norm"],
        ),
        (LayerNormSpec(), "ReduceMean", drop_keepdims, ["keepdims"]),
    ],
    ids=[
        "div-swapped",
        "negated-div-swapped",
        "pow-3",
        "pow-plus-half",
        "pow-minus-one",
        "keepdims-0",
    ],
)
def test_rejects_each_equivalence_condition(spec, op_type, change, reasons) -> None:
    """Each operand slot, exponent and attribute the maths depends on is checked: nothing fuses,
    and the near-misses are exactly those expected (`not-layer-norm` where no spelling applies:
    a refusal is never silent)."""
    original = rewired(norm_model(spec), op_type, change)
    result = normfuse.optimize(original)
    assert result.report.sites == []
    assert result.model.SerializeToString() == original.SerializeToString()
    assert [miss.reason for miss in result.report.near_misses] == reasons


def test_fuses_every_site_of_a_model_with_unnamed_nodes() -> None:
    original = norm_model(LayerNormSpec(), layers=3)
    for node in original.graph.node:
        node.name = ""
    result = normfuse.optimize(original)
    assert op_types(result.model).count("LayerNormalization") == 3
    assert_same_numerics(original, result.model, seed=14)


@pytest.mark.parametrize("affine", [True, False])
def test_fuses_channel_first_layer_norm_between_transposes(affine) -> None:
    from models.builders import channel_first_layer_norm_model

    original = channel_first_layer_norm_model(("batch", 16, 6, 6), affine)
    result = normfuse.optimize(original)
    assert op_types(result.model) == ["Transpose", "LayerNormalization", "Transpose"]
    onnx.checker.check_model(result.model, full_check=True)
    assert_same_numerics(original, result.model, {"batch": 2}, seed=15)


def _float16_channel_first_model(channels: int = 6) -> onnx.ModelProto:
    """Cast(x to float32), channels-first statistics, Cast back, then a float16 affine shaped
    [C, 1, 1]; with C equal to the last dim, a [C] affine after the Transpose back would still
    broadcast, along the wrong axis."""
    from onnx import helper

    from models.builders import GraphBuilder

    b, rng = GraphBuilder(17, np.float16), np.random.default_rng(0)
    wide = b.op("Cast", ["x"], to=onnx.TensorProto.FLOAT)
    centered = b.op("Sub", [wide, b.reduce("ReduceMean", wide, (1,))])
    square = b.op("Pow", [centered, b.const(2.0, "two", np.float32)])
    variance = b.reduce("ReduceMean", square, (1,))
    std = b.op("Sqrt", [b.op("Add", [variance, b.const(1e-6, "epsilon", np.float32)])])
    out = b.op("Cast", [b.op("Div", [centered, std])], to=onnx.TensorProto.FLOAT16)
    out = b.op("Mul", [b.const(rng.uniform(0.5, 1.5, (channels, 1, 1)), "scale"), out])
    out = b.op("Add", [out, b.const(rng.normal(0, 0.5, (channels, 1, 1)), "bias")])
    half, shape = onnx.TensorProto.FLOAT16, ["batch", channels, 4, channels]
    graph = helper.make_graph(
        b.nodes,
        "channel_first_float16",
        [helper.make_tensor_value_info("x", half, shape)],
        [helper.make_tensor_value_info(out, half, shape)],
        b.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_float16_channel_first_keeps_its_affine_in_the_kernel() -> None:
    """The float32 kernel between Casts and Transposes takes the [C] affine itself (an affine
    moved after the Transpose back would scale the last axis: a wrong fusion caught here)."""
    original = _float16_channel_first_model()
    result = normfuse.optimize(original)
    assert op_types(result.model) == [
        "Cast",
        "Transpose",
        "LayerNormalization",
        "Transpose",
        "Cast",
    ]
    assert_same_numerics(original, result.model, {"batch": 2}, seed=3, rtol=1e-2)


def test_rejects_axis_1_of_a_rank_3_tensor() -> None:
    """Statistics over axis 1 of [batch, sequence, hidden] mix tokens: not a layer norm."""
    from models.builders import channel_first_layer_norm_model

    assert_unchanged(channel_first_layer_norm_model(("batch", 8, 10)), "non-trailing-axes")


def test_rejects_channel_first_with_a_per_position_scale() -> None:
    from models.builders import channel_first_layer_norm_model

    original = channel_first_layer_norm_model()
    scale = next(t for t in original.graph.initializer if t.name.startswith("scale"))
    values = np.random.default_rng(0).uniform(0.5, 1.5, (16, 6, 6)).astype(np.float32)
    scale.CopyFrom(onnx.numpy_helper.from_array(values, scale.name))
    assert_unchanged(original, "gamma-shape")


@pytest.mark.parametrize("sequences", [(7,), (7, 11)])
def test_fuses_inside_a_model_local_function(sequences) -> None:
    from models.builders import local_function_model

    original = local_function_model(sequences)
    result = normfuse.optimize(original)
    assert len(result.report.sites) == 1
    body = result.model.functions[0]
    assert [n.op_type for n in body.node if n.op_type != "Constant"] == ["LayerNormalization"]
    onnx.checker.check_model(result.model, full_check=True)
    assert_same_numerics(original, result.model, seed=16)


def test_rejects_keepdims_0_unsqueezed_back_over_other_axes() -> None:
    """Mean over the last axis, unsqueezed back as axis -2: each row minus a column's mean."""
    original = norm_model(LayerNormSpec(unsqueeze_axes=(-2,)), shape=("batch", 32, 32))
    assert_unchanged(original, "unsqueeze-axes")
    result = normfuse.optimize(original)
    assert [miss.reason for miss in result.report.near_misses] == ["unsqueeze-axes"]


@pytest.mark.parametrize(
    ("shape", "axes"),
    [((32,), (-1,)), ((32,), (0,)), ((3, 7, 32), (0, 1, 2)), ((3, 7, 32), (-3, -2, -1))],
    ids=["rank-1", "rank-1-axis-0", "all-axes", "all-axes-negative"],
)
def test_fuses_statistics_over_every_axis_as_axis_0(shape, axes) -> None:
    original = norm_model(LayerNormSpec(axes=axes), shape=shape, layers=1)
    result = normfuse.optimize(original)
    assert op_types(result.model) == ["LayerNormalization", "MatMul", "Add"]
    assert result.report.sites[0].axis == -len(shape)
    onnx.checker.check_model(result.model, full_check=True)
    assert_same_numerics(original, result.model, seed=20)


@pytest.mark.parametrize(
    ("shape", "axes"),
    [(("batch", 7, 32), (0,)), (("batch", 7, 32), (0, 1)), ((2, 8, 5, 5), (0, 2, 3))],
    ids=["batch-only", "batch-and-sequence", "batch-norm-nchw"],
)
def test_rejects_batch_norm_like_statistics(shape, axes) -> None:
    spec = LayerNormSpec(axes=axes, scale=False, bias=False)
    assert_unchanged(norm_model(spec, shape=shape, layers=1), "batch-axis")


def test_fuses_float64_for_ort_and_says_it_is_ort_only() -> None:
    """ONNX Runtime's CPU LayerNormalization implements double only with stash_type=1 (float32
    Mean/InvStdDev outputs) and computes Y in double; the standard reads stash_type=1 as float32
    statistics, so the result is ORT-only."""
    original = norm_model(LayerNormSpec(epsilon=EPSILON_F32), dtype=np.float64, layers=LAYERS)
    result = normfuse.optimize(original)
    assert op_types(result.model) == EXPECTED_OPS
    assert result.report.ort_only
    assert_same_numerics(original, result.model, {"batch": 3}, seed=21, rtol=1e-12)


def test_target_onnx_refuses_float64_layer_norm() -> None:
    original = norm_model(LayerNormSpec(epsilon=EPSILON_F32), dtype=np.float64)
    result = normfuse.optimize(original, target="onnx")
    assert result.report.sites == []
    assert result.model.SerializeToString() == original.SerializeToString()
    assert [miss.reason for miss in result.report.near_misses] == ["float64-stash-type"]


def test_rejects_double_epsilon_that_float32_cannot_hold() -> None:
    assert_unchanged(norm_model(LayerNormSpec(), dtype=np.float64), "epsilon-not-float32")


def test_fuses_two_norms_sharing_one_mean() -> None:
    from models.builders import shared_mean_model

    original = shared_mean_model()
    result = normfuse.optimize(original)
    assert op_types(result.model) == ["LayerNormalization", "LayerNormalization", "Add"]
    assert len(result.report.sites) == 2
    assert result.report.near_misses == []
    onnx.checker.check_model(result.model, full_check=True)
    assert_same_numerics(original, result.model, seed=24)


def test_rejects_square_of_opposite_deviations() -> None:
    """(x - mean) * (mean - x) is minus the squared deviation: the nearest look-alike of the
    `mean - x` variance is not a layer norm, and no spelling takes it for one (`not-layer-norm`)."""
    original = norm_model(LayerNormSpec(square="mul"), layers=1)
    sub = next(n for n in original.graph.node if n.op_type == "Sub")
    negated = onnx.helper.make_node("Sub", [sub.input[1], sub.input[0]], ["negated_dev"])
    square = next(n for n in original.graph.node if n.op_type == "Mul")
    square.input[1] = "negated_dev"
    index = list(original.graph.node).index(square)
    original.graph.node.insert(index, negated)
    result = normfuse.optimize(original)
    assert result.report.sites == []
    assert result.model.SerializeToString() == original.SerializeToString()
    assert [miss.reason for miss in result.report.near_misses] == ["not-layer-norm"]


def test_function_body_read_at_another_opset_than_its_model_is_left_with_its_reason() -> None:
    """A body importing opset 13 (ReduceMean's axes an attribute) in a model importing 18:
    ONNX Runtime inlines it at 18, where that attribute does not exist; not read as a mean."""
    from models.builders import local_function_model

    original = local_function_model(opset=13)
    original.opset_import[0].version = 18
    result = normfuse.optimize(original)
    assert result.report.sites == []
    assert result.model.SerializeToString() == original.SerializeToString()
    [miss] = result.report.near_misses
    assert miss.reason == "unknown-axes"
    assert "opset 13" in miss.detail and "model's 18" in miss.detail
