"""The group-norm pass: decomposed group-norm statistics fuse with identical numerics (random and
adversarial inputs, ORT_DISABLE_ALL); exporters' InstanceNormalization spelling is recognised and
kept; every hazard is left unchanged with its reason."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
import onnx_graphsurgeon as gs
import pytest
from helpers import (
    FLOAT32_ATOL,
    assert_same_numerics,
    op_counts,
    random_inputs,
    run,
    script_bench_clock,
)
from onnx import helper

import normfuse
from models.builders import (
    GROUP_NORM_KEPT,
    GROUP_NORM_NEGATIVES,
    GROUP_NORM_POSITIVES,
    LAYER_NORM_PASS_FAMILIES,
    GraphBuilder,
    GroupNormSpec,
    LayerNormSpec,
    add_group_norm,
    add_layer_norm,
    group_norm_block_model,
    group_normalization_model,
    onnx_group_norm_function_model,
    ort_inlined_group_norm_model,
    padded_group_norm_model,
)
from normfuse.measure.forms import FormChooser
from normfuse.prove.subgraph import as_float64
from normfuse.prove.validate import ValidationOptions, check_sites

LAYERS = 2
SHAPE = ("batch", 8, 5, 5)


def adversarial_inputs(shape: tuple[int, ...], seed: int = 0) -> list[np.ndarray]:
    """Inputs that stress the statistics: a large mean against a small spread, a constant
    tensor (zero variance), huge and tiny magnitudes, one outlier."""
    rng = np.random.default_rng(seed)
    outlier = rng.normal(0, 1, shape)
    outlier.flat[rng.integers(outlier.size)] = 1e4
    cases = [
        1e3 + rng.normal(0, 1e-2, shape),
        np.full(shape, 0.5),
        rng.normal(0, 1e4, shape),
        rng.normal(0, 1e-4, shape),
        outlier,
    ]
    return [case.astype(np.float32) for case in cases]


def assert_as_accurate(original: onnx.ModelProto, fused: onnx.ModelProto, x: np.ndarray) -> None:
    """The fused model is within tolerance of the original, or at least as close as the original
    to a float64 run of the original."""
    reference = run(as_float64(original), {"x": x.astype(np.float64)})[0]
    before, after = run(original, {"x": x})[0], run(fused, {"x": x})[0]
    assert np.all(np.isfinite(after))
    scale = max(1.0, float(np.max(np.abs(reference))))
    if np.max(np.abs(after - before)) <= FLOAT32_ATOL * scale:
        return
    assert np.max(np.abs(after - reference)) <= 1.5 * np.max(np.abs(before - reference))


def assert_fused(original: onnx.ModelProto, layers: int = LAYERS) -> normfuse.OptimizeResult:
    """Optimise `original`: one LayerNormalization per group norm, no near-miss, same numerics."""
    result = normfuse.optimize(original)
    fused = result.model
    assert [site.kind for site in result.report.sites] == ["group-norm"] * layers
    assert result.report.near_misses == []
    counts = op_counts(fused)
    assert counts["LayerNormalization"] == layers
    assert not {"ReduceMean", "Sqrt", "Div", "Pow"} & set(counts)
    onnx.checker.check_model(fused, full_check=True)
    assert_same_numerics(original, fused, {"batch": 3}, seed=1)
    shape = random_inputs(original, {"batch": 3})["x"].shape
    for x in adversarial_inputs(shape):
        assert_as_accurate(original, fused, x)
    return result


def assert_unchanged(original: onnx.ModelProto, reason: str, passes=None) -> None:
    result = normfuse.optimize(original, passes=passes)
    assert result.report.sites == []
    assert result.model.SerializeToString() == original.SerializeToString()
    assert reason in [miss.reason for miss in [*result.report.near_misses, *result.report.kept]]


@pytest.mark.parametrize("name", sorted(GROUP_NORM_POSITIVES))
def test_fuses_spelling(name: str) -> None:
    spec = GROUP_NORM_POSITIVES[name]
    shape = (1, *SHAPE[1:]) if spec.spelling == "dynamo_var" else SHAPE  # static, as dynamo's
    assert_fused(group_norm_block_model(spec, shape, layers=LAYERS))


@pytest.mark.parametrize("opset", [13, 16, 18])
def test_fuses_at_other_opsets(opset: int) -> None:
    # One layer: below 17, ONNX shape inference loses the rank after Reshape(., Shape(x)), so a
    # second group norm's input shape is unknown (`unknown-rank`, left alone).
    spec = GROUP_NORM_POSITIVES["decomposed"]
    result = assert_fused(group_norm_block_model(spec, SHAPE, opset=opset), layers=1)
    assert normfuse.target.targets.default_opset(result.model) == max(opset, 17)


def test_fuses_static_diffusion_shape_with_32_groups() -> None:
    spec = GroupNormSpec(groups=32, spelling="decomposed", silu=True)
    assert_fused(group_norm_block_model(spec, (1, 64, 6, 6), layers=1), layers=1)


@pytest.mark.parametrize("shape", [("batch", 6, 4, 4), (2, 6, 2, 3)])
def test_fuses_groups_that_divide_channels_times_positions(shape: tuple) -> None:
    """4 groups of 6 channels: each row of [N, 4, -1] straddles channels, and its last-axis
    layer norm is still exact (issue 21, item 10), so it fuses and computes the original."""
    spec = GroupNormSpec(groups=4, spelling="decomposed")
    assert_fused(group_norm_block_model(spec, shape, layers=1), layers=1)


def test_fuses_a_reshape_back_with_one_inferred_dim() -> None:
    """The Reshape back written [0, C, -1, W]: every other entry restores x's dim, so the -1 is
    H (the element counts are equal) and the site fuses (issue 21, item 10)."""
    spec = GroupNormSpec(spelling="decomposed", reshape_back="minus_one")
    assert_fused(group_norm_block_model(spec, SHAPE, layers=1), layers=1)


def test_emits_layer_norm_over_the_last_axis_of_the_groups() -> None:
    result = normfuse.optimize(group_norm_block_model(GROUP_NORM_POSITIVES["decomposed"], SHAPE))
    node = next(n for n in result.model.graph.node if n.op_type == "LayerNormalization")
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["axis"] == -1 and attrs["stash_type"] == 1
    assert np.isclose(attrs["epsilon"], 1e-5)
    assert len(node.input) == 2  # scale of ones; the per-channel affine stays after the Reshape


@pytest.mark.parametrize("name", sorted(GROUP_NORM_KEPT))
def test_keeps_exporter_instance_norm_spelling(name: str) -> None:
    assert_unchanged(group_norm_block_model(GROUP_NORM_KEPT[name], SHAPE), "no-faster-form")


@pytest.mark.parametrize("name", sorted(GROUP_NORM_NEGATIVES))
def test_rejects_hazard(name: str) -> None:
    spec, shape, reason = GROUP_NORM_NEGATIVES[name]
    model = group_norm_block_model(spec, shape or SHAPE)
    result = normfuse.optimize(model)
    assert result.report.sites == []
    assert result.model.SerializeToString() == model.SerializeToString()
    assert result.report.near_misses[0].kind == "group-norm"
    assert result.report.near_misses[0].reason == reason


def test_target_onnx_below_opset_17_raises_the_opset() -> None:
    model = group_norm_block_model(GROUP_NORM_POSITIVES["decomposed"], SHAPE, opset=16)
    result = normfuse.optimize(model, target="onnx")
    assert len(result.report.sites) == 1
    assert normfuse.target.targets.default_opset(result.model) == 17
    onnx.checker.check_model(result.model, full_check=True)
    assert_same_numerics(model, result.model, {"batch": 2}, seed=40)


def test_target_onnx_reports_opset_too_low_where_the_opset_cannot_be_raised() -> None:
    from models.builders import with_batch_norm

    model = group_norm_block_model(GROUP_NORM_POSITIVES["decomposed"], (2, 8, 5, 5), opset=13)
    model = with_batch_norm(model, training_outputs=True)  # BatchNormalization-9 training form
    result = normfuse.optimize(model, target="onnx")
    assert result.report.sites == []
    assert "opset-too-low" in {miss.reason for miss in result.report.near_misses}


def test_unknown_spatial_dims_are_left_alone() -> None:
    model = group_norm_block_model(GROUP_NORM_POSITIVES["decomposed"], ("batch", 8, "h", 5))
    assert_unchanged(model, "unknown-shape")


@pytest.mark.parametrize("name", sorted(LAYER_NORM_PASS_FAMILIES))
def test_layer_norm_pass_alone_reports_group_and_instance_norm(name: str) -> None:
    build, reason = LAYER_NORM_PASS_FAMILIES[name]
    assert_unchanged(build(), reason, passes="layer-norm,rms-norm")
    assert_fused(build(), layers=1)


def test_optimizing_twice_gives_identical_bytes() -> None:
    once = normfuse.optimize(group_norm_block_model(GROUP_NORM_POSITIVES["decomposed_silu"], SHAPE))
    twice = normfuse.optimize(once.model)
    assert twice.report.sites == []
    assert twice.model.SerializeToString() == once.model.SerializeToString()


@pytest.mark.parametrize(("fused_ratio", "choice"), [(1.005, "fused"), (1.05, "decomposed")])
def test_tune_for_times_group_norm_statistics_against_decomposed(
    fused_ratio: float, choice: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Timed on a scripted clock (both forms run in ONNX Runtime): decomposed only when the
    fused node is slower beyond noise and by more than 1%."""
    script_bench_clock(monkeypatch, [1e-3, fused_ratio * 1e-3])
    original = group_norm_block_model(
        GROUP_NORM_POSITIVES["decomposed_silu"], (1, 8, 5, 5), layers=2
    )
    result = normfuse.optimize(original, tune_for="cpu")
    records = [r for r in result.report.tuning if r.get("family") == "group-norm"]
    assert len(records) == 1  # one shape, timed once
    assert records[0]["shape"][1:] == [4, 50]  # the grouped tensor (more rows when isolated)
    assert records[0]["fused_ratio"] == pytest.approx(fused_ratio, rel=2e-3)
    assert records[0]["choice"] == choice
    if choice == "fused":
        assert len(result.report.sites) == 2
        assert_same_numerics(original, result.model)
    else:
        assert result.report.sites == []
        reasons = [(m.kind, m.reason) for m in result.report.near_misses]
        # left decomposed, the layer-norm pass sees group statistics and says why it keeps them
        assert (
            sorted(reasons)
            == [("group-norm", "measured-slower")] * 2 + [("layer-norm", "group-norm")] * 2
        )
        assert result.model.SerializeToString() == original.SerializeToString()


def test_tune_for_leaves_group_norm_decomposed_where_measured_slower(monkeypatch) -> None:
    monkeypatch.setattr(FormChooser, "_time_pair", lambda *args: (1.5, (1.4, 1.6)))
    original = group_norm_block_model(GROUP_NORM_POSITIVES["decomposed"], (1, 8, 5, 5), layers=2)
    result = normfuse.optimize(original, tune_for="cpu")
    assert result.report.sites == []
    assert [m.reason for m in result.report.near_misses if m.kind == "group-norm"] == [
        "measured-slower"
    ] * 2
    assert result.model.SerializeToString() == original.SerializeToString()


def test_layer_norm_of_a_reshaped_tensor_is_no_group_norm() -> None:
    """Statistics of a Reshape output that is not reshaped back: a layer norm, fused by that
    pass, with no group-norm near-miss."""
    b = GraphBuilder(17)
    reshaped = b.op("Reshape", ["x", b.const([0, 7, 32], "shape", np.int64)])
    out = add_layer_norm(b, reshaped, (None, 7, 32), LayerNormSpec(), np.random.default_rng(0))
    graph = onnx.helper.make_graph(
        b.nodes,
        "reshaped_layer_norm",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 224])],
        [onnx.helper.make_tensor_value_info(out, onnx.TensorProto.FLOAT, ["batch", 7, 32])],
        b.initializers,
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
    model.ir_version = 8
    result = normfuse.optimize(model)
    assert [site.kind for site in result.report.sites] == ["layer-norm"]
    assert result.report.near_misses == []
    assert_same_numerics(model, result.model, seed=3)


ONNX_BODY_VARIANTS = {
    "static": {},
    "affine_as_graph_inputs": {"affine_as_inputs": True},
    "symbolic_batch": {"shape": ("batch", 8, 5, 5)},
    "32_channels_8_groups": {"shape": (1, 32, 4, 4), "groups": 8},
    "rank_3": {"shape": (2, 6, 3), "groups": 3},
    "group_per_channel": {"shape": (2, 6, 3), "groups": 6},
}


@pytest.mark.parametrize("name", sorted(ONNX_BODY_VARIANTS))
def test_fuses_onnx_group_norm_function_body(name: str) -> None:
    """ONNX's own GroupNormalization-21 body (C/G computed by Div, a 5-D Reshape before the
    grouped one, one-pass variance) fuses into one LayerNormalization, and the caller's model is
    not changed (its unnamed Constant values stay unnamed)."""
    original = onnx_group_norm_function_model(**ONNX_BODY_VARIANTS[name])
    before = original.SerializeToString()
    result = normfuse.optimize(original)
    assert original.SerializeToString() == before
    assert [site.kind for site in result.report.sites] == ["group-norm"]
    assert result.report.near_misses == []
    counts = op_counts(result.model)
    assert counts["LayerNormalization"] == 1
    assert not {"ReduceMean", "Sqrt"} & set(counts)
    assert counts["Div"] == 1  # C / G, which the kept Reshape still computes
    onnx.checker.check_model(result.model, full_check=True)
    assert_same_numerics(original, result.model, {"batch": 3}, seed=2)
    feeds = random_inputs(original, {"batch": 3}, seed=2)
    for x in adversarial_inputs(feeds["x"].shape):
        cases = {**feeds, "x": x}
        reference = run(as_float64(original), {k: v.astype(np.float64) for k, v in cases.items()})
        before_run, after = run(original, cases)[0], run(result.model, cases)[0]
        assert np.all(np.isfinite(after))
        scale = max(1.0, float(np.max(np.abs(reference[0]))))
        close = np.max(np.abs(after - before_run)) <= FLOAT32_ATOL * scale
        # One-pass variance cancels on a large mean: the original gives NaN (a negative variance)
        # where float64 does not; the fused node must then be nearer float64 than the original.
        error_before = np.nan_to_num(np.abs(before_run - reference[0]), nan=np.inf)
        better = np.max(np.abs(after - reference[0])) <= np.max(error_before)
        assert close or better


def test_onnx_group_norm_body_with_dynamic_spatial_dims_is_left_with_its_reason() -> None:
    """C/G * H * W is not static: the grouped dim (and LayerNormalization's scale) is unknown."""
    original = onnx_group_norm_function_model(shape=(1, 8, "h", "w"))
    result = normfuse.optimize(original)
    assert result.report.sites == []
    assert result.model.SerializeToString() == original.SerializeToString()
    assert "not-channel-groups" in [miss.reason for miss in result.report.near_misses]


def float16_group_norm_model(shape: tuple = ("batch", 8, 5, 5)) -> onnx.ModelProto:
    """diffusers' float16 group norm: Reshape -> Cast(float32) -> statistics -> Cast(float16) ->
    Reshape back -> per-channel scale and bias in float16."""
    b = GraphBuilder(17, dtype=np.float16)
    stats = LayerNormSpec(scale=False, bias=False, casts="around")
    spec = GroupNormSpec(spelling="decomposed", stats=stats)
    out = add_group_norm(b, "x", shape, spec, np.random.default_rng(0))
    half = onnx.TensorProto.FLOAT16
    graph = onnx.helper.make_graph(
        b.nodes,
        "float16_group_norm",
        [onnx.helper.make_tensor_value_info("x", half, list(shape))],
        [onnx.helper.make_tensor_value_info(out, half, list(shape))],
        b.initializers,
    )
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])


def test_fuses_float16_group_norm_with_float32_statistics() -> None:
    """The statistics fuse into the float32 kernel between the model's own pair of Casts (a
    float16 norm is emitted as Cast, float32 LayerNormalization, Cast back: docs/deploy.md);
    nearer a float64 run than the original, or within its rounding."""
    original = float16_group_norm_model()
    original.ir_version = 8
    result = normfuse.optimize(original)
    assert [site.kind for site in result.report.sites] == ["group-norm"]
    assert result.report.near_misses == []
    counts = op_counts(result.model)
    assert counts["LayerNormalization"] == 1 and counts["Cast"] == 2
    [norm] = [node for node in result.model.graph.node if node.op_type == "LayerNormalization"]
    scale = next(t for t in result.model.graph.initializer if t.name == norm.input[1])
    assert scale.data_type == onnx.TensorProto.FLOAT  # the float32 kernel
    onnx.checker.check_model(result.model, full_check=True)
    for x in adversarial_inputs((3, 8, 5, 5)):
        x = x.astype(np.float16)
        reference = run(as_float64(original), {"x": x.astype(np.float64)})[0]
        before, after = run(original, {"x": x})[0], run(result.model, {"x": x})[0]
        half_ulps = 2.0**-10 * np.maximum(1.0, np.abs(reference))
        error_before = np.abs(before.astype(np.float64) - reference)
        error_after = np.abs(after.astype(np.float64) - reference)
        assert np.all(error_after <= np.maximum(error_before, 2 * half_ulps))


def _with_epsilon_scaled(model: onnx.ModelProto, factor: float) -> onnx.ModelProto:
    """A copy of a fused model with every LayerNormalization's epsilon multiplied by `factor`."""
    wrong = onnx.ModelProto()
    wrong.CopyFrom(model)
    for node in wrong.graph.node:
        if node.op_type == "LayerNormalization":
            next(a for a in node.attribute if a.name == "epsilon").f *= factor
    return wrong


@pytest.mark.parametrize("name", ["decomposed", "decomposed_static_reshape"])
def test_validate_checks_group_norm_sites_behind_a_symbolic_batch(name: str) -> None:
    """TorchScript's grouping Reshape reads the batch from Shape(x): inference leaves the grouped
    tensor [batch, G, ?] with a symbolic last dim, which the site check once fed as 1 ("X.shape=
    {1,32,1}"), rolling back exact fusions (issue 26). It is fed at C/G * H * W, the size the
    fused scale fixes: the sites are checked alone, pass and stay; a wrong epsilon still fails."""
    spec = dataclasses.replace(GROUP_NORM_POSITIVES[name], grouping="torchscript")
    original = group_norm_block_model(spec, SHAPE, layers=LAYERS)
    result = normfuse.optimize(original, validation=ValidationOptions())
    assert [site.kind for site in result.report.sites] == ["group-norm"] * LAYERS
    checks = result.report.validation.sites
    assert len(checks) == LAYERS
    assert all(check.comparison is not None and check.passed for check in checks)
    assert result.report.validation.rolled_back == []
    assert_same_numerics(original, result.model, {"batch": 3}, seed=5)
    wrong = _with_epsilon_scaled(result.model, 1e4)
    failed = check_sites(original, wrong, result.report.sites, ValidationOptions())
    assert [check.passed for check in failed] == [False] * LAYERS
    assert all(check.comparison is not None for check in failed)


def test_validate_keeps_the_hand_written_vae_group_norms() -> None:
    """The TorchScript export of a hand-written VAE mid block (symbolic batch): its four group
    norms fuse and survive `--validate`, each checked alone."""
    path = Path(__file__).resolve().parent.parent / "models/real"
    original = onnx.load(str(path / "vae_mid_block_hand_written_opset17.onnx"))
    result = normfuse.optimize(original, validation=ValidationOptions())
    assert [site.kind for site in result.report.sites] == ["group-norm"] * 4
    assert result.report.validation.passed
    assert result.report.validation.rolled_back == []
    checks = result.report.validation.sites
    assert len(checks) == 4 and all(check.comparison is not None for check in checks)


ORT_INLINED_VARIANTS = {
    "as_ort_writes_it": {},
    "shape_without_attributes": {"shape_attrs": {}},
    "negative_start": {"shape_attrs": {"start": -4}},
    "start_clamped_end_rank": {"shape_attrs": {"start": -9, "end": 4}},
    "end_clamped": {"shape_attrs": {"end": 10}},
    "leading_dims_then_static_w": {"first_back": "leading_dims_and_w"},
}


@pytest.mark.parametrize("name", sorted(ORT_INLINED_VARIANTS))
def test_fuses_group_normalization_as_ort_inlines_it(name: str) -> None:
    """ONNX Runtime inlines GroupNormalization-21 (no CPU kernel) with `Shape(x', start=0)` for
    the Reshapes back; every Shape-15 window that is the whole shape restores x's shape, so the
    site fuses (issue 26), and computes the original (or, where its one-pass variance gave
    NaN, is finite and nearer float64)."""
    original = ort_inlined_group_norm_model(**ORT_INLINED_VARIANTS[name])
    result = normfuse.optimize(original)
    assert [site.kind for site in result.report.sites] == ["group-norm"]
    assert result.report.near_misses == []
    counts = op_counts(result.model)
    assert counts["LayerNormalization"] == 1 and "ReduceMean" not in counts
    assert_same_numerics(original, result.model, {"batch": 3}, seed=8)
    feeds = random_inputs(original, {"batch": 3}, seed=8)
    for x in adversarial_inputs(feeds["x"].shape):
        reference = run(as_float64(original), {"x": x.astype(np.float64)})[0]
        before, after = run(original, {"x": x})[0], run(result.model, {"x": x})[0]
        assert np.all(np.isfinite(after))
        error_before = np.nan_to_num(np.abs(before - reference), nan=np.inf)
        close = np.max(np.abs(after - before)) <= FLOAT32_ATOL * max(1.0, np.abs(reference).max())
        assert close or np.max(np.abs(after - reference)) <= np.max(error_before)


def test_ort_inlined_group_norm_reshaped_back_to_another_rank_is_refused() -> None:
    """The first Reshape back written [N, C, -1] (`Concat(Shape(x', end=2), [-1])`): not x's
    shape, so not the structure proved; left with its reason."""
    original = ort_inlined_group_norm_model(first_back="nc_minus_one")
    result = normfuse.optimize(original)
    assert result.report.sites == []
    assert result.model.SerializeToString() == original.SerializeToString()
    assert [miss.reason for miss in result.report.near_misses if miss.kind == "group-norm"] == [
        "reshape-not-restored"
    ]


WINDOW_BOUNDS = [None, -9, -4, -3, -1, 0, 1, 3, 4, 9]


def test_shape_windows_are_the_dims_onnx_runtime_returns() -> None:
    """`_shape_window` against ORT's Shape-15 kernel on a rank-4 tensor, every start/end pair."""
    from normfuse.facts.static_values import shape_window as _shape_window

    dims = np.array([2, 3, 5, 7], np.int64)
    x = np.zeros(dims, np.float32)
    for start in WINDOW_BOUNDS:
        for end in WINDOW_BOUNDS:
            attrs = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
            node = onnx.helper.make_node("Shape", ["x"], ["s"], **attrs)
            graph = onnx.helper.make_graph(
                [node],
                "shape",
                [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, dims.tolist())],
                [onnx.helper.make_tensor_value_info("s", onnx.TensorProto.INT64, None)],
            )
            model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)])
            model.ir_version = 8
            [got] = run(model, {"x": x})
            window = _shape_window(gs.Node("Shape", attrs=attrs), 4, 17)
            assert window is not None and window[1] is not None
            assert list(dims[window[0] : window[1]]) == list(got), attrs
            # Shape-13 has no start/end: a node that writes them is not read at all.
            assert _shape_window(gs.Node("Shape", attrs=attrs), 4, 14) == (
                (0, 4) if not attrs else None
            )
    assert _shape_window(gs.Node("Shape", attrs={"start": 0}), None, 17) == (0, None)
    assert _shape_window(gs.Node("Shape", attrs={"start": -1}), None, 17) is None
    assert _shape_window(gs.Node("Shape", attrs={"axis": 0}), 4, 17) is None


@pytest.mark.parametrize(
    ("mode", "grouping"),
    [("constant", "torchscript"), ("reflect", "torchscript"), ("constant", "constant")],
)
def test_fuses_group_norm_after_a_pad_with_constant_only_pads(mode: str, grouping: str) -> None:
    """TorchScript's `F.pad` (diffusers' Downsample2D): the pads come from a constant-only chain
    (ConstantOfShape, Slice, Transpose, ...) that shape inference does not fold, so the Conv
    after it and the group norm after that had no shape (`unknown-rank`; 22 of 24 group norms
    of a TorchScript AutoencoderKL, issue 26). The chain is folded exactly for type derivation,
    and the group norm fuses with the original's numerics (the whole model on random inputs;
    the site alone on adversarial rows, by `--validate`: ORT has no float64 Conv). Folded as
    the Pad's own input, whether or not a later Reshape reads Shape of the Conv."""
    original = padded_group_norm_model(mode=mode, grouping=grouping)
    result = normfuse.optimize(original, validation=ValidationOptions())
    assert [site.kind for site in result.report.sites] == ["group-norm"]
    assert result.report.near_misses == []
    assert op_counts(result.model)["LayerNormalization"] == 1
    validation = result.report.validation
    assert validation.passed and validation.rolled_back == []
    assert [check.comparison is not None for check in validation.sites] == [True]
    onnx.checker.check_model(result.model, full_check=True)
    for seed in range(3):
        assert_same_numerics(original, result.model, {"batch": 2}, seed=seed)


def test_group_norm_after_pads_the_folding_table_cannot_compute_is_left() -> None:
    """The same chain through an op the folding table lacks (`Max`): nothing is guessed; the
    group norm is left with its reason."""
    assert_unchanged(padded_group_norm_model(unfoldable=True), "unknown-shape")


GROUP_NORMALIZATION_SHAPES = {
    "nchw_symbolic_batch": (("batch", 8, 5, 5), 4),
    "nchw_static": ((2, 32, 4, 4), 8),
    "rank_3": ((2, 6, 7), 3),
    "rank_5": ((1, 8, 2, 3, 3), 2),
    "group_per_channel": ((2, 6, 3, 3), 6),
}


@pytest.mark.parametrize("opset", [21, 18])
@pytest.mark.parametrize("name", sorted(GROUP_NORMALIZATION_SHAPES))
def test_rewrites_group_normalization_to_the_layer_norm_form(name: str, opset: int) -> None:
    """A GroupNormalization-21 node, or -18 (scale and bias per group; no ORT CPU kernel for
    either: ORT runs the one-pass body) becomes Reshape -> LayerNormalization -> Reshape -> Mul
    -> Add: the original's values on random inputs; on adversarial ones within tolerance or
    nearer float64, and finite where the original's one-pass variance gave NaN (a repair, which
    the large-mean input must show)."""
    shape, groups = GROUP_NORMALIZATION_SHAPES[name]
    original = group_normalization_model(shape, groups, opset=opset)
    result = normfuse.optimize(original, validation=ValidationOptions())
    assert [site.kind for site in result.report.sites] == ["group-norm"]
    assert result.report.near_misses == []
    assert result.report.validation.passed and result.report.validation.rolled_back == []
    counts = op_counts(result.model)
    assert counts == {"Reshape": 2, "LayerNormalization": 1, "Mul": 1, "Add": 1}
    onnx.checker.check_model(result.model, full_check=True)
    assert_same_numerics(original, result.model, {"batch": 3}, seed=9)
    feeds = random_inputs(original, {"batch": 3}, seed=9)
    repairs = 0
    for x in adversarial_inputs(feeds["x"].shape):
        reference = _group_norm_reference(original, x, groups)
        before, after = run(original, {"x": x})[0], run(result.model, {"x": x})[0]
        assert np.all(np.isfinite(after))
        repairs += not np.all(np.isfinite(before))
        error_before = np.nan_to_num(np.abs(before - reference), nan=np.inf)
        close = np.max(np.abs(after - before)) <= FLOAT32_ATOL * max(1.0, np.abs(reference).max())
        assert close or np.max(np.abs(after - reference)) <= np.max(error_before)
    assert repairs >= 1


def _group_norm_reference(model: onnx.ModelProto, x: np.ndarray, groups: int) -> np.ndarray:
    """GroupNormalization-18/21 by its definition in float64 NumPy (two-pass statistics; -18's
    scale and bias [G] apply to each group's channels, -21's [C] per channel)."""
    values = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    grouped = x.astype(np.float64).reshape(x.shape[0], groups, -1)
    centered = grouped - grouped.mean(-1, keepdims=True)
    normed = centered / np.sqrt(grouped.var(-1, keepdims=True) + 1e-5)
    if values["scale"].size == groups and groups != x.shape[1]:
        scale, bias = (values[n].astype(np.float64)[:, None] for n in ("scale", "bias"))
        return (normed * scale + bias).reshape(x.shape)
    per_channel = (x.shape[1], *(1,) * (x.ndim - 2))
    scale, bias = (values[n].astype(np.float64).reshape(per_channel) for n in ("scale", "bias"))
    return normed.reshape(x.shape) * scale + bias


def _as_float16(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for info in [*copy.graph.input, *copy.graph.output]:
        info.type.tensor_type.elem_type = onnx.TensorProto.FLOAT16
    for tensor in copy.graph.initializer:
        half = onnx.numpy_helper.to_array(tensor).astype(np.float16)
        tensor.CopyFrom(onnx.numpy_helper.from_array(half, tensor.name))
    return copy


def _as_type(model: onnx.ModelProto, elem_type: int) -> onnx.ModelProto:
    """`model` with x, y, scale and bias of `elem_type` (values cast through float32)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for info in [*copy.graph.input, *copy.graph.output]:
        info.type.tensor_type.elem_type = elem_type
    for tensor in copy.graph.initializer:
        values = onnx.numpy_helper.to_array(tensor).astype(np.float32).reshape(-1).tolist()
        tensor.CopyFrom(helper.make_tensor(tensor.name, elem_type, tensor.dims, values))
    return copy


def _with_stash_type(model: onnx.ModelProto, stash_type: int) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    copy.graph.node[0].attribute.append(helper.make_attribute("stash_type", stash_type))
    return copy


def _with_opset(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    copy.opset_import[0].version = opset
    return copy


@pytest.mark.parametrize("name", sorted(GROUP_NORMALIZATION_SHAPES))
def test_rewrites_float16_group_normalization_21_between_casts(name: str) -> None:
    """float16 GroupNormalization-21 (stash type float32: x cast to float32, normalised, the
    result cast back, the affine in float16) becomes Cast -> Reshape -> LayerNormalization ->
    Reshape -> Cast -> Mul -> Add in that order, and is no further from a float64 evaluation of
    the op's definition than the node (issue 23's float16 rule), on random and adversarial
    inputs; where the node's one-pass variance is NaN/inf the rewrite is finite (a repair)."""
    shape, groups = GROUP_NORMALIZATION_SHAPES[name]
    original = _as_float16(group_normalization_model(shape, groups))
    result = normfuse.optimize(original, validation=ValidationOptions())
    assert [site.kind for site in result.report.sites] == ["group-norm"]
    assert result.report.near_misses == []
    assert result.report.validation.passed and result.report.validation.rolled_back == []
    onnx.checker.check_model(result.model, full_check=True)
    order = [node.op_type for node in result.model.graph.node]
    assert order == ["Cast", "Reshape", "LayerNormalization", "Reshape", "Cast", "Mul", "Add"]
    feeds = random_inputs(original, {"batch": 3}, seed=9)
    shape = feeds["x"].shape
    cases = [feeds["x"], _two_values(shape), *adversarial_inputs(shape)]
    for x in cases:
        _assert_no_further_from_float64(original, result.model, x.astype(np.float16), groups)


def _two_values(shape: tuple[int, ...]) -> np.ndarray:
    """1000 + 0.5·{0, 1}: a large mean against a spread float16 holds exactly."""
    return 1000 + 0.5 * np.random.default_rng(3).integers(0, 2, shape)


def _assert_no_further_from_float64(
    original: onnx.ModelProto, fused: onnx.ModelProto, x: np.ndarray, groups: int
) -> bool:
    """The fused model's float16 output is finite and no further from the op's definition in
    float64 than the original's; returns whether the original's was not finite (a repair)."""
    reference = _group_norm_reference(original, x, groups)
    before, after = run(original, {"x": x})[0], run(fused, {"x": x})[0]
    assert after.dtype == np.float16 and np.all(np.isfinite(after))
    error_before = np.nan_to_num(np.abs(before - reference), nan=np.inf, posinf=np.inf)
    assert np.max(np.abs(after - reference)) <= np.max(error_before)
    return not np.all(np.isfinite(before))


@pytest.mark.parametrize("name", ["rank_5", "group_per_channel"])
def test_float16_group_normalization_21_rewrite_repairs_the_one_pass_nan(name: str) -> None:
    """At 1000 + 0.5·{0, 1} the node's one-pass float32 variance goes negative (NaN) at these
    shapes; the rewrite's two-pass statistics are finite and near float64."""
    shape, groups = GROUP_NORMALIZATION_SHAPES[name]
    original = _as_float16(group_normalization_model(shape, groups))
    fused = normfuse.optimize(original).model
    x = _two_values(tuple(3 if isinstance(d, str) else d for d in shape)).astype(np.float16)
    assert _assert_no_further_from_float64(original, fused, x, groups)


GROUP_NORMALIZATION_NEGATIVES = {
    "bfloat16": (
        lambda: _as_type(group_normalization_model(), onnx.TensorProto.BFLOAT16),
        "unsupported-dtype",
    ),
    "float16_stash_float16": (
        lambda: _with_stash_type(_as_float16(group_normalization_model()), 10),
        "cast-types",
    ),
    "symbolic_spatial": (
        lambda: group_normalization_model(("batch", 8, "h", 5)),
        "unknown-shape",
    ),
    "groups_do_not_divide": (
        lambda: group_normalization_model((1, 6, 3, 3), 4),
        "groups-do-not-divide",
    ),
    "empty_groups": (lambda: group_normalization_model((1, 8, 0, 5), 4), "empty-normalised-axes"),
}


@pytest.mark.parametrize("name", sorted(GROUP_NORMALIZATION_NEGATIVES))
def test_group_normalization_21_hazards_are_left_with_their_reason(name: str) -> None:
    build, reason = GROUP_NORMALIZATION_NEGATIVES[name]
    assert_unchanged(build(), reason)


def _with_parameter(model: onnx.ModelProto, name: str, value: np.ndarray) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    index = [t.name for t in copy.graph.initializer].index(name)
    copy.graph.initializer[index].CopyFrom(onnx.numpy_helper.from_array(value, name))
    return copy


GROUP_NORMALIZATION_18_NEGATIVES = {
    # -18 with a per-channel [C] scale or bias (-21's layout): not the op's [G] contract.
    "per_channel_scale": ("scale", np.ones(8, np.float32), "gamma-shape"),
    "per_channel_bias": ("bias", np.zeros(8, np.float32), "beta-shape"),
    "float64_scale": ("scale", np.ones(4, np.float64), "gamma-shape"),
}


@pytest.mark.parametrize("name", sorted(GROUP_NORMALIZATION_18_NEGATIVES))
def test_group_normalization_18_look_alikes_are_left_with_their_reason(name: str) -> None:
    parameter, value, reason = GROUP_NORMALIZATION_18_NEGATIVES[name]
    original = group_normalization_model((1, 8, 5, 5), 4, opset=18)
    assert_unchanged(_with_parameter(original, parameter, value), reason)


def test_group_normalization_18_in_float16_is_left_with_its_reason() -> None:
    original = _as_float16(group_normalization_model((1, 8, 5, 5), 4, opset=18))
    assert_unchanged(original, "unsupported-dtype")


def test_group_normalization_18_scale_repeats_per_group() -> None:
    """Each group's scale and bias value lands on exactly its C/G channels (a distinct value per
    group: a wrong repeat or a tiled layout changes the output, which the node's run shows)."""
    original = group_normalization_model((1, 6, 3, 3), 3, opset=18)
    original = _with_parameter(original, "scale", np.array([1.0, -2.0, 3.0], np.float32))
    original = _with_parameter(original, "bias", np.array([10.0, 0.0, -10.0], np.float32))
    result = normfuse.optimize(original)
    assert [site.kind for site in result.report.sites] == ["group-norm"]
    x = random_inputs(original, {}, seed=4)["x"]
    before, after = run(original, {"x": x})[0], run(result.model, {"x": x})[0]
    np.testing.assert_allclose(after, before, atol=1e-5)
    np.testing.assert_allclose(after, _group_norm_reference(original, x, 3), atol=1e-5)


def _cast_first_group_norm(back: str, shape: tuple = ("batch", 8, 5, 5)) -> onnx.ModelProto:
    """float16 x -> Cast(float32) -> Reshape [0, 4, -1] -> statistics -> Reshape back to
    `Shape(s)` -> Cast(float16), where s is named by `back`: "cast" (the Cast's output),
    "x" (diffusers: the float16 input), "identity_x" (an Identity of it), "relu_x" (a Relu of
    x: Relu keeps shapes), "transpose_x" (its last two dims swapped) or "z" (another input)."""
    half, full = onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT
    h = onnx.helper
    nodes = [
        h.make_node("Cast", ["x"], ["xf"], to=full),
        h.make_node("Reshape", ["xf", "groups"], ["grouped"]),
        h.make_node("ReduceMean", ["grouped", "axes"], ["mean"]),
        h.make_node("Sub", ["grouped", "mean"], ["centered"]),
        h.make_node("Mul", ["centered", "centered"], ["squared"]),
        h.make_node("ReduceMean", ["squared", "axes"], ["variance"]),
        h.make_node("Add", ["variance", "eps"], ["shifted"]),
        h.make_node("Sqrt", ["shifted"], ["std"]),
        h.make_node("Div", ["centered", "std"], ["normed"]),
    ]
    source = {"cast": "xf", "x": "x", "z": "z"}.get(back, "s")
    if back in ("identity_x", "relu_x"):
        nodes.append(h.make_node("Identity" if back == "identity_x" else "Relu", ["x"], ["s"]))
    if back == "transpose_x":
        nodes.append(h.make_node("Transpose", ["x"], ["s"], perm=[0, 1, 3, 2]))
    nodes += [
        h.make_node("Shape", [source], ["back_shape"]),
        h.make_node("Reshape", ["normed", "back_shape"], ["back"]),
        h.make_node("Cast", ["back"], ["y"], to=half),
    ]
    inputs = [h.make_tensor_value_info("x", half, list(shape))]
    out_shape = list(shape)
    if back == "z":
        out_shape = [shape[0], 8, 25, 1]
        inputs.append(h.make_tensor_value_info("z", half, out_shape))
    if back == "transpose_x":
        out_shape = [shape[0], 8, shape[3], shape[2]]
    initializers = [
        onnx.numpy_helper.from_array(np.array([0, 4, -1], np.int64), "groups"),
        onnx.numpy_helper.from_array(np.array([-1], np.int64), "axes"),
        onnx.numpy_helper.from_array(np.array(1e-5, np.float32), "eps"),
    ]
    graph = h.make_graph(
        nodes, "cast_first", inputs, [h.make_tensor_value_info("y", half, out_shape)], initializers
    )
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 18)], ir_version=10)


@pytest.mark.parametrize("back", ["cast", "x", "identity_x", "relu_x"])
def test_reshape_back_to_the_shape_of_a_same_shaped_source_fuses(back: str) -> None:
    """The Reshape back restores x's shape when it reads `Shape` of x's source through ops that
    keep shapes (diffusers' Cast-first float16 spelling; issue 21, ADV3-10): fused, same
    numerics on the adversarial inputs."""
    original = _cast_first_group_norm(back, (2, 8, 5, 5))
    onnx.checker.check_model(original, full_check=True)
    result = normfuse.optimize(original)
    assert [site.kind for site in result.report.sites] == ["group-norm"]
    assert op_counts(result.model)["LayerNormalization"] == 1
    assert_same_numerics(original, result.model)


@pytest.mark.parametrize("back", ["transpose_x", "z"])
def test_reshape_back_to_the_shape_of_another_tensor_is_refused(back: str) -> None:
    """`Shape` of a Transpose of x, or of another input of x's rank and size: not x's shape, so
    the statistics stay decomposed with `reshape-not-restored`."""
    original = _cast_first_group_norm(back, (2, 8, 5, 4) if back == "transpose_x" else (1, 8, 5, 5))
    onnx.checker.check_model(original, full_check=True)
    result = normfuse.optimize(original)
    assert result.report.sites == []
    assert "reshape-not-restored" in [miss.reason for miss in result.report.near_misses]
    assert_same_numerics(original, result.model)


def _chained_group_normalizations(between: str) -> onnx.ModelProto:
    """x -> GroupNormalization-21 -> Relu [-> Resize(nearest, x2)] -> GroupNormalization-21,
    no value_info: onnx's shape inference types no GroupNormalization output, so the second
    node's x is typed only through normfuse's derivation (and through Resize's rule)."""
    rng = np.random.default_rng(5)
    nodes = [
        helper.make_node("GroupNormalization", ["x", "s0", "b0"], ["g0"], num_groups=4),
        helper.make_node("Relu", ["g0"], ["r0"]),
    ]
    if between == "resize":
        nodes.append(helper.make_node("Resize", ["r0", "", "scales"], ["r1"], mode="nearest"))
    second = [nodes[-1].output[0], "s1", "b1"]
    nodes.append(helper.make_node("GroupNormalization", second, ["y"], num_groups=2))
    parameters = [
        onnx.numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype(np.float32), name)
        for name in ("s0", "s1")
    ] + [
        onnx.numpy_helper.from_array(rng.normal(0, 0.5, 8).astype(np.float32), name)
        for name in ("b0", "b1")
    ]
    parameters.append(onnx.numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"))
    graph = helper.make_graph(
        nodes,
        "chained",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 8, 4, 5])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        parameters,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize("between", ["relu", "resize"])
def test_group_normalization_after_another_is_typed_and_rewritten(between: str) -> None:
    """dynamo's UNet exports chain GroupNormalization-21 nodes through Conv and Resize; before
    GroupNormalization was typed as its input, only the first of 21 was rewritten (the rest
    `unsupported-dtype`, x of unknown type)."""
    original = _chained_group_normalizations(between)
    result = normfuse.optimize(original)
    assert [site.kind for site in result.report.sites] == ["group-norm"] * 2
    assert result.report.near_misses == []
    assert "GroupNormalization" not in op_counts(result.model)
    assert_same_numerics(original, result.model, {"batch": 2}, seed=3)


# Adversaries 6 and 7 (issue 26): grouping targets, a non-constant GroupNormalization affine,
# and a layer norm between Reshapes that keep the last axis.


def _hand_written_group_norm(
    target: str, axes: tuple[int, ...] = (-1,), variance_axes=None, shape=(2, 8, 5, 5)
) -> onnx.ModelProto:
    """x [N, 8, 5, 5] -> Reshape(target) -> layer-norm statistics over `axes` (no affine) ->
    Reshape(Shape(x)) -> gamma [8, 1, 1] -> beta. Targets: `slice` Concat(Slice(Shape(x), 0, 1),
    [4, -1]) (`x.view(*x.shape[:1], 4, -1)`), `slice_two` Slice(.., 0, 2) (N and C, then
    [4, -1]), `slice_channels` Slice(.., 1, 2) (C where N belongs), `split` [0, 4, 2, -1],
    `split_static` [0, 4, 2, 25], `split_off` [0, 4, 5, -1] (the inner dims not C/G = 2 first:
    still 50 per group), `split_zero` [0, 4, 0, -1] (a 0 copying x's dim 2)."""
    rng = np.random.default_rng(5)
    b = GraphBuilder(18)
    if target.startswith("slice"):
        start, end = {"slice": (0, 1), "slice_two": (0, 2), "slice_channels": (1, 2)}[target]
        window = b.op(
            "Slice",
            [
                b.op("Shape", ["x"]),
                b.const([start], "start", np.int64),
                b.const([end], "end", np.int64),
            ],
        )
        grouped = b.op("Concat", [window, b.const([4, -1], "groups", np.int64)], axis=0)
    else:
        entries = {
            "split": [0, 4, 2, -1],
            "split_static": [0, 4, 2, 25],
            "split_off": [0, 4, 5, -1],
            "split_zero": [0, 4, 0, -1],
        }[target]
        grouped = b.const(entries, "grouped", np.int64)
    reshaped = b.op("Reshape", ["x", grouped])
    spec = LayerNormSpec(axes=axes, variance_axes=variance_axes, scale=False, bias=False)
    normed = add_layer_norm(b, reshaped, (None, 4, 2, 25), spec, rng)
    back = b.op("Reshape", [normed, b.op("Shape", ["x"])])
    scaled = b.op("Mul", [back, b.const(rng.uniform(0.5, 1.5, (8, 1, 1)), "gamma")])
    out = b.op("Add", [scaled, b.const(rng.normal(0, 0.5, (8, 1, 1)), "beta")])
    graph = helper.make_graph(
        b.nodes,
        "hand_written_group_norm",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info(out, onnx.TensorProto.FLOAT, list(shape))],
        b.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize(
    ("target", "axes", "shape"),
    [
        ("slice", (-1,), (2, 8, 5, 5)),
        ("slice", (-1,), ("batch", 8, 5, 5)),
        ("split", (-2, -1), (2, 8, 5, 5)),
        ("split", (-2, -1), ("batch", 8, 5, 5)),
        ("split_static", (-2, -1), (2, 8, 5, 5)),
        ("split_off", (-2, -1), (2, 8, 5, 5)),
    ],
)
def test_fuses_group_norm_with_sliced_or_split_grouping_targets(target, axes, shape) -> None:
    """ADV6-03: a grouping target whose batch is `Slice(Shape(x), 0, 1)` splits the channels
    into groups; ADV6-06: [N, G, C/G, -1] with statistics over its last two axes (Keras'
    channels-first group norm) normalises each group's C/G * H * W elements. Both fuse, the
    second as LayerNormalization over the two axes, and compute the original."""
    model = _hand_written_group_norm(target, axes, shape=shape)
    result = normfuse.optimize(model)
    assert [site.kind for site in result.report.sites] == ["group-norm"]
    assert result.report.near_misses == []
    node = next(n for n in result.model.graph.node if n.op_type == "LayerNormalization")
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["axis"] == -len(axes)
    onnx.checker.check_model(result.model, full_check=True)
    assert_same_numerics(model, result.model, {"batch": 3}, seed=2)
    for x in adversarial_inputs((2, 8, 5, 5)):
        assert_as_accurate(model, result.model, x)


@pytest.mark.parametrize(
    ("target", "axes", "variance_axes", "reason"),
    [
        # Slice windows off by one: N and C, then [4, -1] (rank 4, groups a dim of x); C where
        # the batch belongs.
        ("slice_two", (-1,), None, "not-channel-groups"),
        ("slice_channels", (-1,), None, "not-channel-groups"),
        # [N, G, C/G, H*W] normalised over its last axis only (each channel's own positions).
        ("split", (-1,), None, "group-statistics-axes"),
        # The mean over both axes, the variance over the last only.
        ("split", (-2, -1), (-1,), "mismatched-axes"),
        # A 0 in the group's dims copies x's dim 2: not proved to be C/G.
        ("split_zero", (-2, -1), None, "not-channel-groups"),
    ],
)
def test_grouping_target_look_alikes_are_left_with_their_reason(
    target, axes, variance_axes, reason
) -> None:
    model = _hand_written_group_norm(target, axes, variance_axes)
    result = normfuse.optimize(model)
    assert result.report.sites == []
    assert result.model.SerializeToString() == model.SerializeToString()
    assert reason in [m.reason for m in result.report.near_misses if m.kind == "group-norm"]


def test_group_normalization_with_a_scale_fed_at_run_time_says_why_it_stays() -> None:
    """ADV6-02: a GroupNormalization-21 node whose scale and bias are graph inputs (ONNX
    Runtime runs its one-pass body) is left with a near-miss naming the scale."""
    model = group_normalization_model((2, 8, 5, 5))
    for parameter in list(model.graph.initializer):
        model.graph.input.append(
            helper.make_tensor_value_info(parameter.name, onnx.TensorProto.FLOAT, [8])
        )
    del model.graph.initializer[:]
    result = normfuse.optimize(model)
    assert result.report.sites == []
    assert result.model.SerializeToString() == model.SerializeToString()
    misses = [(m.kind, m.reason) for m in result.report.near_misses]
    assert misses == [("group-norm", "gamma-shape")]
    assert "not a true constant" in result.report.near_misses[0].detail


def _reshaped_layer_norm(target: list[int], axes: tuple[int, ...] = (-1,)) -> onnx.ModelProto:
    """x [2, 6, 16] -> Reshape(target) -> a layer norm over `axes` (affine on the last axis when
    it is the only one) -> Reshape([2, 6, 16]) (adversary 7's `a7_reshape_ln`, float32)."""
    b = GraphBuilder(18)
    reshaped = b.op("Reshape", ["x", b.const(target, "grouped", np.int64)])
    spec = LayerNormSpec(axes=axes, scale=axes == (-1,), bias=axes == (-1,))
    normed = add_layer_norm(b, reshaped, tuple(target), spec, np.random.default_rng(4))
    out = b.op("Reshape", [normed, b.const([2, 6, 16], "back", np.int64)])
    graph = helper.make_graph(
        b.nodes,
        "reshaped_layer_norm",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 6, 16])],
        [helper.make_tensor_value_info(out, onnx.TensorProto.FLOAT, [2, 6, 16])],
        b.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("target", [[2, 3, 2, 16], [12, 16], [12, 1, 16]])
def test_layer_norm_between_reshapes_keeping_the_last_axis_fuses(target: list[int]) -> None:
    """ADV7-01: Reshapes that keep the last axis around statistics over it alone: each row
    normalised is a row of x, a layer norm (not a group norm), fused by the layer-norm pass."""
    model = _reshaped_layer_norm(target)
    result = normfuse.optimize(model)
    assert [site.kind for site in result.report.sites] == ["layer-norm"]
    assert result.report.near_misses == []
    onnx.checker.check_model(result.model, full_check=True)
    assert_same_numerics(model, result.model, seed=4)


def test_two_rows_of_x_normalised_together_are_a_group_norm() -> None:
    """[2, 6, 16] -> [2, 3, 2, 16], statistics over the last two axes, Reshape back: 3 groups of
    2 channels of x [N, C, S], exactly; fused by the group-norm pass over the two axes."""
    model = _reshaped_layer_norm([2, 3, 2, 16], (-2, -1))
    result = normfuse.optimize(model)
    assert [site.kind for site in result.report.sites] == ["group-norm"]
    assert_same_numerics(model, result.model, seed=4)


@pytest.mark.parametrize(
    ("target", "axes"),
    [
        ([2, 12, 8], (-1,)),  # the last axis split: rows of 8 are no rows of x
        ([12, 16], (-2, -1)),  # every row of both samples normalised together
    ],
)
def test_layer_norm_between_reshapes_that_regroup_rows_is_left(target, axes) -> None:
    model = _reshaped_layer_norm(target, axes)
    result = normfuse.optimize(model)
    assert result.report.sites == []
    assert result.model.SerializeToString() == model.SerializeToString()
    assert ("layer-norm", "group-norm") in [(m.kind, m.reason) for m in result.report.near_misses]


def test_a_group_norm_whose_grouped_result_escapes_says_so() -> None:
    """ADV11-02: the normalised grouped tensor (before the Reshape back) is also read by another
    node.
    The group-norm pass alone fuses nothing and says why (`intermediate-used-elsewhere`, not an
    empty report); with the default passes the layer-norm pass fuses the statistics over the
    grouped tensor, which is exactly a layer norm of it, with the original's numerics."""
    from models.builders import group_norm_model

    model = group_norm_model()
    shape_of = {n.output[0] for n in model.graph.node if n.op_type == "Shape"}
    back = next(n for n in model.graph.node if n.op_type == "Reshape" and n.input[1] in shape_of)
    model.graph.node.append(helper.make_node("Identity", [back.input[0]], ["inter"]))
    model.graph.output.append(helper.make_tensor_value_info("inter", onnx.TensorProto.FLOAT, None))
    assert_unchanged(model, "intermediate-used-elsewhere", passes=["group-norm"])
    misses = normfuse.optimize(model, passes=["group-norm"]).report.near_misses
    assert [miss.kind for miss in misses] == ["group-norm"]
    assert "reshaped back but also read by" in misses[0].detail
    result = normfuse.optimize(model)
    assert [site.kind for site in result.report.sites] == ["layer-norm"]
    assert_same_numerics(model, result.model, {"batch": 3}, seed=2)
