"""Dims that size emitted tensors or prove divisors come only from sources ONNX Runtime agrees
with (issue 21, item 1), and function bodies are typed from every call (item 2).

Each negative builds a norm behind an operator whose inferred shape ONNX Runtime does not
produce (pooling with ceil_mode=1, ConvTranspose with SAME_* and output_padding), checks that the
model runs as it is, and asserts that nothing was fused and why. Each positive is the same norm
behind an agreeing configuration, fused, with numerics checked against the original.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import assert_same_numerics, op_counts, random_inputs, run
from onnx import TensorProto, helper, numpy_helper

import normfuse

F = TensorProto.FLOAT
POOL = {"kernel_shape": [2], "strides": [2], "pads": [1, 1]}  # [2,3,5]: onnx 4, ORT 3 (ceil)
SAME_PADDED = {"strides": [2], "auto_pad": "SAME_UPPER", "output_padding": [1]}  # 11 vs 10


def _layer_norm(x: str, out: str, prefix: str = "") -> list[onnx.NodeProto]:
    """Affine-free layer norm over the last axis (epsilon `eps`): the fused node needs a
    ones-scale sized from the normalised dim."""
    p = prefix
    return [
        helper.make_node("ReduceMean", [x], [p + "mean"], axes=[-1]),
        helper.make_node("Sub", [x, p + "mean"], [p + "cent"]),
        helper.make_node("Mul", [p + "cent", p + "cent"], [p + "sq"]),
        helper.make_node("ReduceMean", [p + "sq"], [p + "var"], axes=[-1]),
        helper.make_node("Add", [p + "var", p + "eps"], [p + "shifted"]),
        helper.make_node("Sqrt", [p + "shifted"], [p + "std"]),
        helper.make_node("Div", [p + "cent", p + "std"], [out]),
    ]


def _model(
    nodes: list[onnx.NodeProto],
    shape: list[int],
    initializers: dict | None = None,
    out_rank: int | None = None,
) -> onnx.ModelProto:
    values = {"eps": np.float32(1e-5), **(initializers or {})}
    graph = helper.make_graph(
        nodes,
        "agreed",
        [helper.make_tensor_value_info("x", F, shape)],
        [helper.make_tensor_value_info("y", F, [None] * (out_rank or len(shape)))],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in values.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model, full_check=True)
    return model


def _pool(ceil_mode: int) -> onnx.NodeProto:
    return helper.make_node("MaxPool", ["x"], ["p"], ceil_mode=ceil_mode, **POOL)


def _conv_transpose(padded: bool) -> onnx.NodeProto:
    attrs = SAME_PADDED if padded else {"strides": [2], "auto_pad": "SAME_UPPER"}
    return helper.make_node("ConvTranspose", ["x", "w"], ["p"], **attrs)


WEIGHT = {"w": np.linspace(-1, 1, 18, dtype=np.float32).reshape(2, 3, 3)}


def _affine_free(front: onnx.NodeProto, extra: dict | None = None, shape=(2, 3, 5)):
    return _model([front, *_layer_norm("p", "y")], list(shape), extra)


def _one_element_gamma(front: onnx.NodeProto, extra: dict | None = None, shape=(2, 3, 5)):
    nodes = [front, *_layer_norm("p", "n"), helper.make_node("Mul", ["n", "gamma"], ["y"])]
    return _model(nodes, list(shape), {"gamma": np.array([1.5], np.float32), **(extra or {})})


def _sum_over_four(front: onnx.NodeProto, extra: dict | None = None, shape=(2, 3, 5)):
    """RMS norm whose mean is written ReduceSum / 4: a mean only where the axis has 4 items."""
    nodes = [
        front,
        helper.make_node("Mul", ["p", "p"], ["sq"]),
        helper.make_node("ReduceSum", ["sq", "axes"], ["total"]),
        helper.make_node("Div", ["total", "four"], ["ms"]),
        helper.make_node("Add", ["ms", "eps"], ["shifted"]),
        helper.make_node("Sqrt", ["shifted"], ["rms"]),
        helper.make_node("Div", ["p", "rms"], ["y"]),
    ]
    values = {"axes": np.array([-1], np.int64), "four": np.float32(4.0), **(extra or {})}
    return _model(nodes, list(shape), values)


def _flattened_rows(front: onnx.NodeProto, extra: dict | None = None, shape=(2, 3, 5)):
    """The norm's row length is a Reshape target read from Shape(p) (the head_dim of a
    QK-norm): Reshape(p, [-1, Shape(p)[2]])."""
    nodes = [
        front,
        helper.make_node("Shape", ["p"], ["s"]),
        helper.make_node("Gather", ["s", "two"], ["d"], axis=0),
        helper.make_node("Concat", ["minus_one", "d"], ["target"], axis=0),
        helper.make_node("Reshape", ["p", "target"], ["rows"]),
        *_layer_norm("rows", "y"),
    ]
    values = {"two": np.array([2], np.int64), "minus_one": np.array([-1], np.int64)}
    return _model(nodes, list(shape), {**values, **(extra or {})}, out_rank=2)


SHAPES = {"pool": (2, 3, 5), "conv_transpose": (1, 2, 5)}
FRONTS = {
    "pool": (lambda bad: _pool(int(bad)), None),
    "conv_transpose": (_conv_transpose, WEIGHT),
}
# Each builder, and the reason it is left for behind a disagreeing operator: the normalised dim
# is unknown, or (a Reshape target read from an untrusted shape) even the rank.
BUILDERS = {
    "affine_free": (_affine_free, "unknown-shape"),
    "one_element_gamma": (_one_element_gamma, "unknown-shape"),
    "flattened_rows": (_flattened_rows, "unknown-rank"),
}


def _build(builder, front: str, bad: bool) -> onnx.ModelProto:
    make, extra = FRONTS[front]
    return builder(make(bad), extra, SHAPES[front])


@pytest.mark.parametrize("front", sorted(FRONTS))
@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_dim_onnx_runtime_disagrees_with_is_not_used(front: str, kind: str) -> None:
    """Behind a disagreeing operator the normalised dim is unknown: nothing is fused (the
    output is the original), every near-miss gives the builder's reason, and the original
    runs."""
    builder, reason = BUILDERS[kind]
    model = _build(builder, front, bad=True)
    run(model, random_inputs(model))  # the model is valid and runs as it is
    result = normfuse.optimize(model)
    assert result.report.sites == []
    assert result.report.near_misses
    assert {miss.reason for miss in result.report.near_misses} == {reason}
    assert op_counts(result.model) == op_counts(model)


@pytest.mark.parametrize("front", sorted(FRONTS))
@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_dim_onnx_runtime_agrees_with_is_used(front: str, kind: str) -> None:
    """The same norms behind an agreeing configuration fuse and compute what the original does
    on adversarial rows."""
    model = _build(BUILDERS[kind][0], front, bad=False)
    result = normfuse.optimize(model)
    assert [site.kind for site in result.report.sites] == ["layer-norm"]
    assert_same_numerics(model, result.model)


def test_divisor_from_a_disagreeing_dim_proves_nothing() -> None:
    """ReduceSum / 4 over what onnx infers as 4 items and ONNX Runtime computes as 3 is not a
    mean: not fused, `unknown-shape`; over 4 real items (ceil_mode=0, length 7) it fuses."""
    bad = _sum_over_four(_pool(1))
    run(bad, random_inputs(bad))
    result = normfuse.optimize(bad)
    assert result.report.sites == []
    assert [miss.reason for miss in result.report.near_misses] == ["unknown-shape"]
    good = _sum_over_four(_pool(0), shape=(2, 3, 7))
    fused = normfuse.optimize(good)
    assert [site.kind for site in fused.report.sites] == ["rms-norm"]
    assert_same_numerics(good, fused.model)


def _group_norm(front: onnx.NodeProto, extra: dict | None = None, shape=(2, 4, 5)):
    """Group norm of p (NCL, 2 groups): Reshape [0, 2, -1], statistics over the last axis,
    Reshape back to Shape(p), per-channel scale and bias; the group's size is C/G·L."""
    nodes = [
        front,
        helper.make_node("Reshape", ["p", "groups"], ["grouped"]),
        *_layer_norm("grouped", "normed"),
        helper.make_node("Shape", ["p"], ["p_shape"]),
        helper.make_node("Reshape", ["normed", "p_shape"], ["back"]),
        helper.make_node("Mul", ["back", "scale"], ["scaled"]),
        helper.make_node("Add", ["scaled", "bias"], ["y"]),
    ]
    values = {
        "groups": np.array([0, 2, -1], np.int64),
        "scale": np.linspace(0.5, 1.5, 4, dtype=np.float32).reshape(4, 1),
        "bias": np.linspace(-0.5, 0.5, 4, dtype=np.float32).reshape(4, 1),
    }
    return _model(nodes, list(shape), {**values, **(extra or {})})


@pytest.mark.parametrize("ceil_mode", [0, 1])
def test_group_size_from_a_disagreeing_dim_is_not_used(ceil_mode: int) -> None:
    """Group norm's C/G·L behind pooling: with ceil_mode=1 (L is 3 at run time, 4 inferred)
    nothing is fused, `unknown-shape` (the earlier code emitted it for L=4); with ceil_mode=0
    it fuses and computes the original."""
    model = _group_norm(_pool(ceil_mode), shape=(2, 4, 5))
    run(model, random_inputs(model))
    result = normfuse.optimize(model)
    if ceil_mode:
        assert result.report.sites == []
        reasons = {(miss.kind, miss.reason) for miss in result.report.near_misses}
        # the layer-norm pass names the family; the group-norm pass gives the reason
        assert reasons == {("group-norm", "unknown-shape"), ("layer-norm", "group-norm")}
    else:
        assert [site.kind for site in result.report.sites] == ["group-norm"]
        assert_same_numerics(model, result.model)


def _space_to_depth_norm(front: str, gamma: tuple | None = None) -> onnx.ModelProto:
    """x [1, 4, 4, 4] -> `front` -> a layer norm over the last axis (then `* gamma` of shape
    `gamma`):
    `s2d` Transpose(SpaceToDepth(x, 2), [0, 2, 3, 1]) ([1, 2, 2, 16], adversary 7's
    `a7_space_to_depth` in float32); `einsum` the same values by Einsum (not on the
    allow-list)."""
    if front == "s2d":
        fronts = [
            helper.make_node("SpaceToDepth", ["x"], ["s"], blocksize=2),
            helper.make_node("Transpose", ["s"], ["p"], perm=[0, 2, 3, 1]),
        ]
    else:
        fronts = [
            helper.make_node("SpaceToDepth", ["x"], ["s"], blocksize=2),
            helper.make_node("Einsum", ["s"], ["p"], equation="nchw->nhwc"),
        ]
    out = "y" if gamma is None else "n"
    nodes = [*fronts, *_layer_norm("p", out)]
    extra = {}
    if gamma is not None:
        nodes.append(helper.make_node("Mul", ["n", "gamma"], ["y"]))
        count = int(np.prod(gamma))
        extra["gamma"] = np.linspace(0.5, 1.5, count, dtype=np.float32).reshape(gamma)
    return _model(nodes, [1, 4, 4, 4], extra)


def test_layer_norm_behind_space_to_depth_fuses() -> None:
    """ADV7-05: SpaceToDepth is on the allow-list (swept in test_ort_shape_agreement.py), so
    the normalised dim 16 behind it is known and the layer norm fuses."""
    model = _space_to_depth_norm("s2d", gamma=(16,))
    result = normfuse.optimize(model)
    assert [site.kind for site in result.report.sites] == ["layer-norm"]
    assert result.report.near_misses == []
    assert_same_numerics(model, result.model, seed=6)


@pytest.mark.parametrize(
    ("front", "gamma", "reason"),
    [("einsum", None, "unknown-shape"), ("s2d", (2, 1), "gamma-shape")],
)
def test_layer_norm_behind_space_to_depth_look_alikes(front, gamma, reason) -> None:
    """The same values moved by Einsum (off the dim allow-list: its rank, from the equation,
    is trusted, its dims are not), or a scale
    [2, 1] that varies along W, not the normalised axis: nothing fused, the reason given."""
    model = _space_to_depth_norm(front, gamma)
    run(model, random_inputs(model))
    result = normfuse.optimize(model)
    assert result.report.sites == []
    assert result.model.SerializeToString() == model.SerializeToString()
    assert reason in [miss.reason for miss in result.report.near_misses]


@pytest.mark.parametrize(("scale", "trusted"), [(0.7, False), (2.0, True)])
def test_a_fractional_resize_scale_gives_no_trusted_dim(scale: float, trusted: bool) -> None:
    """onnx sizes Resize's output as floor(dim * scale) in float64, ONNX Runtime in float32:
    10 x 0.7 is 6 in one and 7 in the other. A norm over that axis is left (`unknown-shape`,
    before any rewrite; a fused scale sized 6 failed at run time where no run caught it); an
    integral scale is trusted and the norm fuses."""
    nodes = [
        helper.make_node("Resize", ["x", "", "scales"], ["p"], mode="nearest"),
        *_layer_norm("p", "y"),
    ]
    scales = np.array([1, 1, scale], np.float32)
    model = _model(nodes, [2, 3, 10], {"scales": scales})
    result = normfuse.optimize(model)
    if trusted:
        assert [site.kind for site in result.report.sites] == ["layer-norm"]
        assert_same_numerics(model, result.model)
    else:
        assert result.report.sites == []
        assert [miss.reason for miss in result.report.near_misses] == ["unknown-shape"]
