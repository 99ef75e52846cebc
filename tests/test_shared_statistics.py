"""Norms sharing statistics (issue 21, item 10): three or more norms of one x sharing one
variance fuse (the partner rule takes a group, not only a pair), and a group with one member
that is not exactly a norm is refused whole; a second norm `(mean - x) / std` sharing the std
fuses."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import assert_same_numerics, op_counts

import normfuse
from models.builders import GraphBuilder, _single_op_model

SHAPE = ("batch", 7, 32)


def _shared_variance_model(count: int, odd: str | None = None) -> onnx.ModelProto:
    """`count` layer norms of x sharing one mean, one x - mean and one variance, each with its
    own epsilon and affine; outputs their sum. `odd`: the last one is not a layer norm
    ("epsilon_outside_sqrt": sqrt(var) + eps), or a Relu reads the variance ("third_consumer")."""
    b = GraphBuilder(17)
    rng = np.random.default_rng(0)
    centered = b.op("Sub", ["x", b.reduce("ReduceMean", "x", (-1,))])
    variance = b.reduce("ReduceMean", b.op("Mul", [centered, centered]), (-1,))
    outputs = []
    for index in range(count):
        epsilon = b.const(10.0 ** (index - 5), "epsilon")
        if odd == "epsilon_outside_sqrt" and index == count - 1:
            std = b.op("Add", [b.op("Sqrt", [variance]), epsilon])
        else:
            std = b.op("Sqrt", [b.op("Add", [variance, epsilon])])
        normed = b.op("Div", [centered, std])
        scaled = b.op("Mul", [normed, b.const(rng.uniform(0.5, 1.5, SHAPE[-1]), "scale")])
        outputs.append(b.op("Add", [scaled, b.const(rng.normal(0, 0.5, SHAPE[-1]), "bias")]))
    if odd == "third_consumer":
        outputs.append(b.op("Relu", [variance]))
    out = outputs[0]
    for other in outputs[1:]:
        out = b.op("Add", [out, other])
    return _single_op_model(b, out, SHAPE, "shared_variance")


@pytest.mark.parametrize("count", [2, 3, 4])
def test_norms_sharing_one_variance_all_fuse(count: int) -> None:
    """Each norm is exactly a layer norm; the shared statistics die after the last one fuses."""
    original = _shared_variance_model(count)
    result = normfuse.optimize(original)
    assert [site.kind for site in result.report.sites] == ["layer-norm"] * count
    assert result.report.near_misses == []
    counts = op_counts(result.model)
    assert counts["LayerNormalization"] == count
    assert not {"ReduceMean", "Sqrt", "Div", "Sub"} & set(counts)
    onnx.checker.check_model(result.model, full_check=True)
    assert_same_numerics(original, result.model, seed=5)


@pytest.mark.parametrize("odd", ["epsilon_outside_sqrt", "third_consumer"])
def test_a_group_with_a_member_that_is_not_a_norm_is_refused(odd: str) -> None:
    """Three norms share the statistics, but one reader is not exactly a norm: none is fused
    (fusing the others would keep the statistics alive for it); the norms share one site key
    (the mean), whose near-miss says the statistics are used elsewhere."""
    original = _shared_variance_model(3, odd)
    result = normfuse.optimize(original)
    assert result.report.sites == []
    reasons = [miss.reason for miss in result.report.near_misses]
    assert reasons == ["intermediate-used-elsewhere"]
    assert op_counts(result.model) == op_counts(original)


def _shared_std_model(second: str, affine: bool = True) -> onnx.ModelProto:
    """Two readers of one std of x: the layer norm (x - mean) / std and `second`: "negated"
    (mean - x) / std, or "not_a_deviation" x / std (not a norm); outputs their sum."""
    b = GraphBuilder(17)
    rng = np.random.default_rng(1)
    mean = b.reduce("ReduceMean", "x", (-1,))
    centered = b.op("Sub", ["x", mean])
    variance = b.reduce("ReduceMean", b.op("Mul", [centered, centered]), (-1,))
    std = b.op("Sqrt", [b.op("Add", [variance, b.const(1e-5, "epsilon")])])
    numerators = {"negated": b.op("Sub", [mean, "x"]), "not_a_deviation": "x"}
    outputs = []
    for numerator in (centered, numerators[second]):
        normed = b.op("Div", [numerator, std])
        if affine:
            scaled = b.op("Mul", [normed, b.const(rng.uniform(0.5, 1.5, SHAPE[-1]), "scale")])
            normed = b.op("Add", [scaled, b.const(rng.normal(0, 0.5, SHAPE[-1]), "bias")])
        outputs.append(normed)
    return _single_op_model(b, b.op("Add", outputs), SHAPE, "shared_std")


@pytest.mark.parametrize("affine", [True, False])
def test_second_norm_of_mean_minus_x_sharing_the_std_fuses(affine: bool) -> None:
    """(mean - x) / std over the first norm's std is the layer norm with the scale negated (an
    exact negation): both fuse, and compute the original on adversarial rows."""
    original = _shared_std_model("negated", affine)
    result = normfuse.optimize(original)
    assert [site.kind for site in result.report.sites] == ["layer-norm", "layer-norm"]
    assert result.report.near_misses == []
    assert not {"ReduceMean", "Sqrt", "Div", "Sub"} & set(op_counts(result.model))
    assert_same_numerics(original, result.model, seed=6)


def test_std_shared_with_a_division_of_x_itself_is_refused() -> None:
    """x / std is no norm's numerator: the std escapes into it, the norm is left."""
    original = _shared_std_model("not_a_deviation")
    result = normfuse.optimize(original)
    assert result.report.sites == []
    assert [miss.reason for miss in result.report.near_misses] == ["intermediate-used-elsewhere"]
    assert op_counts(result.model) == op_counts(original)
