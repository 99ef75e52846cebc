"""Residual fusion: Add + norm -> ONNX Runtime's Skip* ops, when asked for or measured faster."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import (
    FLOAT32_ATOL,
    assert_same_numerics,
    max_abs_diff,
    op_counts,
    op_types,
    random_inputs,
    script_bench_clock,
)
from onnx import TensorProto, helper, numpy_helper

import normfuse
from models.builders import LayerNormSpec, RmsNormSpec, norm_model
from normfuse.measure.forms import FormChoice, FormChooser

SHAPE = (2, 7, 32)


def pre_norm_blocks(spec, layers: int = 2):
    """Blocks `h = h + MatMul(norm(h))`: every norm after the first reads a residual Add whose
    sum also feeds the next residual Add."""
    return norm_model(spec, shape=SHAPE, layers=layers)


@pytest.mark.parametrize(
    ("spec", "passes", "skip_op"),
    [
        (RmsNormSpec(), "rms-norm,skip-norm", "SkipSimplifiedLayerNormalization"),
    ],
)
def test_fuses_residual_add_with_the_sum_as_fourth_output(spec, passes, skip_op) -> None:
    original = pre_norm_blocks(spec, layers=3)
    result = normfuse.optimize(original, passes=passes)
    norm_op = (
        "LayerNormalization" if isinstance(spec, LayerNormSpec) else "SimplifiedLayerNormalization"
    )
    assert op_types(result.model) == [
        norm_op,
        "MatMul",
        skip_op,
        "MatMul",
        skip_op,
        "MatMul",
        "Add",
    ]
    skips = [n for n in result.model.graph.node if n.op_type == skip_op]
    assert all(len(n.output) == 4 and n.output[3] for n in skips)
    assert {(e.domain, e.version) for e in result.model.opset_import} >= {("com.microsoft", 1)}
    assert result.report.ort_only
    assert_same_numerics(original, result.model, seed=21)


def test_not_applied_by_default_nor_for_target_onnx() -> None:
    original = pre_norm_blocks(LayerNormSpec())
    default = normfuse.optimize(original)
    assert "SkipLayerNormalization" not in op_types(default.model)
    standard = normfuse.optimize(original, target="onnx", passes="layer-norm,skip-norm")
    assert "SkipLayerNormalization" not in op_types(standard.model)
    assert "ort-only-form" in [miss.reason for miss in standard.report.near_misses]


def test_symbolic_batch_fuses_where_both_sides_derive_from_it() -> None:
    """Input and skip both [batch, 7, 32] from the one graph input: proved the same shape
    (tests/test_skip_exactness.py has the refusals)."""
    original = norm_model(RmsNormSpec(), shape=("batch", 7, 32), layers=2)
    result = normfuse.optimize(original, passes="rms-norm,skip-norm")
    assert op_types(result.model).count("SkipSimplifiedLayerNormalization") == 1
    assert_same_numerics(original, result.model, {"batch": 3}, seed=25)


def test_layer_norm_residuals_are_left_less_accurate() -> None:
    """The layer-norm chain keeps Add + LayerNormalization: ONNX Runtime's SkipLayerNormalization
    is less accurate on offset rows (tests/test_skip_exactness.py, docs/residual-fusion.md)."""
    original = pre_norm_blocks(LayerNormSpec(), layers=3)
    result = normfuse.optimize(original, passes="layer-norm,skip-norm")
    assert "SkipLayerNormalization" not in op_types(result.model)
    assert {miss.reason for miss in result.report.near_misses} == {"skip-less-accurate"}
    assert_same_numerics(original, result.model, seed=21)


def scripted_choice(use_skip: bool):
    def measure(self, family, shape, elem_type, bias):
        ratio = 0.8 if use_skip else 3.0
        return FormChoice(
            family, shape, "float", 1.0, ratio, ratio, (ratio - 0.05, ratio + 0.05), use_skip
        )

    return measure


@pytest.mark.parametrize("use_skip", [True, False])
def test_tune_for_follows_the_measurement(use_skip: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FormChooser, "_measure", scripted_choice(use_skip))
    original = pre_norm_blocks(RmsNormSpec(), layers=3)
    result = normfuse.optimize(original, tune_for="cpu")
    skips = op_types(result.model).count("SkipSimplifiedLayerNormalization")
    assert skips == (2 if use_skip else 0)
    skip_records = [r for r in result.report.tuning if "skip_ratio" in r]
    assert len(skip_records) == 1  # both sites share one shape: timed once
    assert skip_records[0]["choice"] == ("skip" if use_skip else "add+norm")
    if not use_skip:
        assert [m.reason for m in result.report.near_misses] == ["measured-slower"] * 2
    assert_same_numerics(original, result.model, seed=22)


@pytest.mark.parametrize(
    ("skip_ratio", "use_skip"),
    [(0.95, True), (0.985, True), (0.995, False), (1.0, False), (1.05, False)],
)
def test_form_chooser_takes_the_skip_form_only_when_faster_beyond_one_percent(
    skip_ratio: float, use_skip: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both forms run in ONNX Runtime on a scripted clock: the Skip form replaces Add + norm only
    when its ratio's whole interval lies below 0.99 (0.995 lies below 1 beyond noise: no win),
    and only if it is no further from float64 on offset rows."""
    script_bench_clock(monkeypatch, [1e-3, skip_ratio * 1e-3])
    choice = FormChooser("cpu", runs=40).choose("layer-norm", (1, 4, 32), 1, bias=True)
    assert choice.ratio == pytest.approx(skip_ratio, rel=2e-3)
    low, high = choice.interval
    assert low <= choice.ratio <= high and high - low < 4e-3
    assert choice.faster() is use_skip
    unfused_error, skip_error = choice.errors  # offset rows: accuracy weighs in too
    assert choice.use_skip is (use_skip and skip_error <= unfused_error)
    assert choice.as_dict()["choice"] == ("skip" if choice.use_skip else "add+norm")


def projection_bias_model(rms: bool = False):
    """`sum = (x + b) + skip; y = norm(sum)`, with `sum` also a graph output."""
    import onnx
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(3)
    hidden = SHAPE[-1]
    consts = {
        "b": rng.normal(0, 1, hidden),
        "scale": rng.uniform(0.5, 1.5, hidden),
        "beta": rng.normal(0, 0.5, hidden),
    }
    initializers = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in consts.items()]
    norm = (
        helper.make_node("SimplifiedLayerNormalization", ["sum", "scale"], ["y"], epsilon=1e-6)
        if rms
        else helper.make_node("LayerNormalization", ["sum", "scale", "beta"], ["y"], epsilon=1e-5)
    )
    nodes = [
        helper.make_node("Add", ["x", "b"], ["biased"]),
        helper.make_node("Add", ["biased", "skip"], ["sum"]),
        norm,
    ]
    float_type = onnx.TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "projection_bias",
        [helper.make_tensor_value_info(n, float_type, list(SHAPE)) for n in ("x", "skip")],
        [helper.make_tensor_value_info(n, float_type, list(SHAPE)) for n in ("y", "sum")],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize(
    ("rms", "skip_op"),
    [(True, "SkipSimplifiedLayerNormalization")],
)
def test_projection_bias_before_the_residual_stays_its_own_add(rms: bool, skip_op: str) -> None:
    """(x + b) + skip is not the kernel's (x + skip) + b: the bias Add stays and is the op's
    input (tests/test_skip_exactness.py shows the difference on rows where it matters)."""
    original = projection_bias_model(rms)
    result = normfuse.optimize(original, passes="skip-norm")
    assert op_types(result.model) == ["Add", skip_op]
    node = result.model.graph.node[1]
    assert node.input[0] == result.model.graph.node[0].output[0]
    assert len(node.input) == (3 if rms else 4) and node.output[3] == "sum"
    assert_same_numerics(original, result.model, seed=23)


def test_tune_for_leaves_a_site_decomposed_where_the_fused_node_is_slower(monkeypatch) -> None:
    monkeypatch.setattr(FormChooser, "_measure", scripted_choice(False))
    monkeypatch.setattr(FormChooser, "_time_pair", lambda *args: (1.5, (1.4, 1.6)))
    original = pre_norm_blocks(LayerNormSpec(), layers=2)
    result = normfuse.optimize(original, tune_for="cpu")
    assert result.report.sites == []
    assert [m.reason for m in result.report.near_misses] == ["measured-slower"] * 2
    assert result.model.SerializeToString() == original.SerializeToString()


@pytest.mark.parametrize(
    ("fused_ratio", "choice"),
    [(0.95, "fused"), (1.0, "fused"), (1.005, "fused"), (1.05, "decomposed")],
)
def test_tune_for_leaves_a_norm_decomposed_only_when_slower_beyond_one_percent(
    fused_ratio: float, choice: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fused node against the decomposed subgraph on a scripted clock (both run in ONNX Runtime):
    decomposed only when the interval lies above 1.01 (1.005 lies above 1 beyond noise)."""
    monkeypatch.setattr(FormChooser, "_measure", scripted_choice(False))
    script_bench_clock(monkeypatch, [1e-3, fused_ratio * 1e-3])
    original = pre_norm_blocks(RmsNormSpec(divide="reciprocal"), layers=2)
    result = normfuse.optimize(original, tune_for="cpu")
    fused_records = [r for r in result.report.tuning if "fused_ratio" in r]
    assert len(fused_records) == 1  # one shape, timed once
    record = fused_records[0]
    low, high = record["fused_ratio_interval_95"]
    assert low <= record["fused_ratio"] <= high and high - low < 4e-3
    assert record["fused_ratio"] == pytest.approx(fused_ratio, rel=2e-3)
    assert record["choice"] == choice
    reasons = [m.reason for m in result.report.near_misses]
    if choice == "fused":
        assert op_counts(result.model)["SimplifiedLayerNormalization"] == 2
        assert reasons == ["measured-slower"]  # the Skip form, scripted slower
        assert_same_numerics(original, result.model)
    else:
        assert result.report.sites == []
        assert reasons == ["measured-slower"] * 2  # both norms; no Skip site left
        assert result.model.SerializeToString() == original.SerializeToString()


def _residual_norm(norm: str, gamma_shape: list, post_bias: bool = False, axis: int = -1):
    """Add(a, b) [+ constant bias] -> LayerNormalization / RMSNormalization (opset 23, from
    `axis`) whose gamma (and beta) are graph inputs of `gamma_shape`."""
    from onnx import TensorProto, helper

    hidden = SHAPE[-1]
    info = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(SHAPE)) for n in "ab"]
    info += [helper.make_tensor_value_info(n, TensorProto.FLOAT, gamma_shape) for n in ("g", "bt")]
    nodes = [helper.make_node("Add", ["a", "b"], ["sum"])]
    initializers = []
    if post_bias:
        bias = np.random.default_rng(3).normal(0, 1, hidden).astype(np.float32)
        initializers.append(helper.make_tensor("c", TensorProto.FLOAT, [hidden], bias))
        nodes.append(helper.make_node("Add", ["sum", "c"], ["biased"]))
    last = nodes[-1].output[0]
    inputs = [last, "g", "bt"] if norm == "LayerNormalization" else [last, "g"]
    nodes.append(helper.make_node(norm, inputs, ["y"], axis=axis, epsilon=1e-5))
    if norm != "LayerNormalization":
        info = info[:3]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(SHAPE))
    graph = helper.make_graph(nodes, "residual", info, [out], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])


@pytest.mark.parametrize("post_bias", [False, True])
@pytest.mark.parametrize(
    ("norm", "skip_op"),
    [
        ("LayerNormalization", None),
        ("RMSNormalization", "SkipSimplifiedLayerNormalization"),
    ],
)
def test_fuses_existing_norms_with_graph_input_gamma(norm, skip_op, post_bias) -> None:
    """A norm op already in the model (standard RMSNormalization too), gamma and beta fed at run
    time but declared 1-D [hidden]. A constant bias after the residual sum is not folded (the
    CPU and CUDA kernels add it in different orders): that site is left, `skip-bias-order`."""
    original = _residual_norm(norm, [SHAPE[-1]], post_bias)
    result = normfuse.optimize(original, passes="skip-norm")
    if post_bias or skip_op is None:
        assert result.report.sites == []
        reason = "skip-bias-order" if post_bias else "skip-less-accurate"
        assert [miss.reason for miss in result.report.near_misses] == [reason]
    else:
        assert op_types(result.model) == [skip_op]
    assert_same_numerics(original, result.model, seed=22)
    assert_same_on_cancelling_residuals(original, result.model, ("a", "b"))


def test_graph_input_gamma_not_declared_per_feature_stays() -> None:
    original = _residual_norm("RMSNormalization", [1, SHAPE[-1]])
    result = normfuse.optimize(original, passes="skip-norm")
    assert result.report.sites == []
    assert [miss.reason for miss in result.report.near_misses] == ["gamma-shape"]


def test_layer_norm_whose_bias_is_omitted_by_an_empty_name_is_read_without_one() -> None:
    """`LayerNormalization(sum, g, "")`: an empty input name means no bias (was `beta-shape`);
    the residual is then left for its kernel's accuracy alone."""
    nodes = [
        helper.make_node("Add", ["a", "b"], ["sum"]),
        helper.make_node("LayerNormalization", ["sum", "g", ""], ["y"], epsilon=1e-5),
    ]
    gamma = numpy_helper.from_array(np.linspace(0.5, 1.5, 8).astype(np.float32), "g")
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 4, 8]) for n in "ab"]
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 8])
    graph = helper.make_graph(nodes, "empty_bias", inputs, [output], [gamma])
    original = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    original.ir_version = 8
    result = normfuse.optimize(original, passes="skip-norm")
    assert result.report.sites == []
    assert [miss.reason for miss in result.report.near_misses] == ["skip-less-accurate"]
    assert result.model.SerializeToString() == original.SerializeToString()


def test_a_norm_over_more_than_the_last_axis_stays() -> None:
    """Skip* ops normalise the last axis only: a LayerNormalization from axis 1 of [2, 7, 32]
    (gamma [7, 32]) keeps its Add."""
    original = _residual_norm("LayerNormalization", list(SHAPE[1:]), axis=1)
    result = normfuse.optimize(original, passes="skip-norm")
    assert result.report.sites == []
    assert [miss.reason for miss in result.report.near_misses] == ["skip-axis"]
    assert result.model.SerializeToString() == original.SerializeToString()


def nested_bias_model():
    """`y = LayerNormalization(x + (skip + b))`: the bias belongs to the skip operand."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(4)
    hidden = SHAPE[-1]
    consts = {"b": rng.normal(0, 1, hidden), "scale": rng.uniform(0.5, 1.5, hidden)}
    initializers = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in consts.items()]
    nodes = [
        helper.make_node("Add", ["skip", "b"], ["biased"]),
        helper.make_node("Add", ["x", "biased"], ["sum"]),
        helper.make_node("LayerNormalization", ["sum", "scale"], ["y"], epsilon=1e-5),
    ]
    info = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(SHAPE)) for n in ("x", "skip")]
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(SHAPE))]
    graph = helper.make_graph(nodes, "nested_bias", info, out, initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("model", ["projection", "projection_rms", "nested"])
def test_a_bias_added_to_one_operand_first_is_exact_on_cancelling_residuals(model: str) -> None:
    """Whatever the pass does with a bias added before the residual sum, the result must be the
    original's where the residuals cancel (~+1e5 and ~-1e5): the bias keeps its own Add."""
    builders = {
        "projection": lambda: projection_bias_model(False),
        "projection_rms": lambda: projection_bias_model(True),
        "nested": nested_bias_model,
    }
    original = builders[model]()
    result = normfuse.optimize(original, passes="skip-norm")
    assert_same_on_cancelling_residuals(original, result.model, ("x", "skip"))


def assert_same_on_cancelling_residuals(
    original, fused, names: tuple[str, str], offset: float = 1e5
) -> None:
    """Residual operands `names` of about +offset and -offset (their sum ~ N(0, 2)): an Add
    taken in another order rounds at the offset's precision, beyond 1e-4 of the output."""
    feeds = random_inputs(original, seed=31)
    rng = np.random.default_rng(31)
    for sign, name in zip((1.0, -1.0), names, strict=True):
        noise = rng.normal(0.0, 1.0, feeds[name].shape)
        feeds[name] = (sign * offset + noise).astype(feeds[name].dtype)
    assert max_abs_diff(original, fused, feeds) <= FLOAT32_ATOL
