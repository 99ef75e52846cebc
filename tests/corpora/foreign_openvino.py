"""OpenVINO's MVNFusion and RMSFusion transformation tests, rebuilt in ONNX:
src/common/transformations/tests/common_optimizations/mvn_fusion_test.cpp and the RMSFusion
tests (rms_norm_fusion_test.cpp). OpenVINO's Power, Subtract, Multiply, Divide, Convert and
ReduceMean (keep_dims false by default) map to Pow, Sub, Mul, Div, Cast and ReduceMean
(keepdims=1 where the result is broadcast back, as OpenVINO's broadcasting of the reduced
shape against the input needs); SquaredDifference(a, b) is written Sub then Mul(d, d).

MVN with eps_mode OUTSIDE_SQRT, (x - mean) / (sqrt(var) + eps), is OpenVINO's own op; no fused
op normfuse emits computes it (LayerNormalization adds epsilon inside the root), so those
graphs must be left alone."""

from __future__ import annotations

import numpy as np

from corpora.foreign_build import F16, F32, LN, RMS, G, case

MVN = "src/common/transformations/tests/common_optimizations/mvn_fusion_test.cpp"
RMSF = "src/common/transformations/tests/common_optimizations/rms_norm_fusion_test.cpp"
OV = "openvino"
OUTSIDE = "fuse: MVN(eps_mode=OUTSIDE_SQRT), their own op"


def _mvn(
    inside: bool,
    root="pow",
    divide="pow_minus_one",
    reuse_sub=True,
    convert=False,
    shape=(1, 3, 224, 224),
    axes=(1, 2, 3),
    self_multiply=False,
    rsqrt=False,
    f16_constants=False,
):
    g = G(13)
    x = g.input("input", F32, list(shape))

    def const(value):
        if f16_constants:
            return g.cast(g.const(value, F16), F32)
        return g.const(value)

    mean1 = g.mean(x, axes)
    sub1 = g.op("Sub", x, mean1)
    sub2 = sub1 if reuse_sub else g.op("Sub", x, g.mean(x, axes))
    if convert:
        sub2 = g.cast(sub2, F32)
    squared = g.op("Mul", sub2, sub2) if self_multiply else g.op("Pow", sub2, const(2.0))
    var = g.mean(squared, axes)
    eps = const(9.765625e-04 if f16_constants else 1e-9)

    def root_of(v):
        return g.op("Pow", v, const(0.5)) if root == "pow" else g.op("Sqrt", v)

    std = root_of(g.op("Add", var, eps)) if inside else g.op("Add", root_of(var), eps)
    if rsqrt:
        y = g.op("Mul", sub1, g.op("Div", const(1.0), std))
    elif divide == "pow_minus_one":
        y = g.op("Mul", sub1, g.op("Pow", std, const(-1.0)))
    else:
        y = g.op("Div", sub1, std)
    return g.model({y: (F32, list(shape))})


_MVN_CASES = {
    # name: (inside, keyword arguments)
    "Outside": (False, {"reuse_sub": False}),
    "ReuseSub": (False, {}),
    "WithConvert": (False, {"convert": True}),
    "Sqrt": (False, {"root": "sqrt"}),
    "AltDiv": (False, {"divide": "div"}),
    "SelfMultiply": (
        False,
        {"divide": "div", "self_multiply": True, "shape": (1, 16, 4096, 1), "axes": (2,)},
    ),
    "InsideSqrt": (True, {"reuse_sub": False}),
    "ReuseSubInsideSqrt": (True, {}),
    "WithConvertInsideSqrt": (True, {"convert": True}),
    "SqrtInsideSqrt": (True, {"root": "sqrt"}),
    "AltDivInsideSqrt": (True, {"divide": "div"}),
    "RsqrtInsideSqrt": (True, {"root": "sqrt", "rsqrt": True, "shape": (1, 3, 224), "axes": (2,)}),
    "RsqrtWithConvertedConstants": (
        True,
        {"root": "sqrt", "rsqrt": True, "shape": (1, 3, 224), "axes": (2,), "f16_constants": True},
    ),
}
for _name, (_inside, _kw) in _MVN_CASES.items():
    _keep = not _inside
    _axes = _kw.get("axes", (1, 2, 3))
    case(
        f"ov_mvn_{_name}",
        OV,
        f"{MVN} :: MVNFusionTest{_name}",
        OUTSIDE if _keep else "fuse: MVN(eps_mode=INSIDE_SQRT)",
        "keep" if _keep else "fuse",
        sites={} if _keep else LN,
        reasons={"epsilon-outside-sqrt", "not-layer-norm"},
        epsilon=None
        if _keep
        else float(np.float16(9.765625e-04))
        if _kw.get("f16_constants")
        else float(np.float32(1e-9)),
        note="shape [1,16,4096,1] instead of [1,16,409600,1] (the size only)"
        if _name == "SelfMultiply"
        else "statistics over the last axis only"
        if _axes == (2,)
        else "statistics over every axis but the batch: a trailing suffix",
    )(lambda i=_inside, kw=_kw: _mvn(i, **kw))


def _mvn_with_parameters():
    """MVNFusionTestWithParametersInside: the Keras-like form
    x * (rsqrt(var + eps) * gamma) + (beta - (rsqrt(var + eps) * gamma) * mean), gamma 1 and
    beta -1 as scalars, the variance from SquaredDifference(x, mean)."""
    g = G(13)
    x = g.input("input", F32, [1, 3, 224])
    mean = g.mean(x, (2,))
    d = g.op("Sub", x, mean)
    var = g.mean(g.op("Mul", d, d), (2,))
    inv = g.op("Pow", g.op("Add", var, g.const(1e-9)), g.const(-0.5))
    mul_gamma = g.op("Mul", inv, g.const(1.0))
    y = g.op(
        "Add", g.op("Mul", x, mul_gamma), g.op("Sub", g.const(-1.0), g.op("Mul", mul_gamma, mean))
    )
    return g.model({y: (F32, [1, 3, 224])})


case(
    "ov_mvn_WithParametersInside",
    OV,
    f"{MVN} :: MVNFusionTestWithParametersInside",
    "fuse: MVN(INSIDE_SQRT) * gamma + beta",
    "fuse",
    sites=LN,
    note="SquaredDifference written as Sub then Mul(d, d)",
)(_mvn_with_parameters)


def _rms(divide: str, dynamic=False, convert_out=True, f16_constants=False):
    """RMSFusion's tests: x * (1 / sqrt(mean(x^2) + eps)) spelled Power(sqrt, -1) /
    Divide(1, sqrt), or the look-alikes Power(sqrt, 1) and Divide(-1, sqrt); then Mul(gamma, .)
    and optionally Convert to f16."""
    g = G(13)
    shape = ["b", "s", 6] if dynamic else [1, 2, 6]
    x = g.input("input", F32, shape)

    def const(value):
        return g.cast(g.const(value, F16), F32) if f16_constants else g.const(value)

    ms = g.mean(g.op("Pow", x, const(2.0)), (-1,))
    std = g.op("Sqrt", g.op("Add", ms, const(1e-5)))
    kind, value = divide.split(":")
    inv = (
        g.op("Pow", std, const(float(value)))
        if kind == "pow"
        else g.op("Div", const(float(value)), std)
    )
    y = g.op("Mul", const([0.029, 0.014, 0.003, 0.013, 0.015, 0.009]), g.op("Mul", x, inv))
    if convert_out:
        y = g.cast(y, F16)
    return g.model({y: (F16 if convert_out else F32, shape)})


_RMS_CASES = {
    1: ("pow:-1", {}, "fuse", "fuse: RMS (output type f16)"),
    2: ("div:1", {}, "fuse", "fuse: RMS (output type f16)"),
    3: ("pow:1", {}, "keep", "no fusion: Power(sqrt, 1) is no reciprocal"),
    4: (
        "div:-1",
        {"dynamic": True},
        "either",
        "no fusion: Divide(-1, sqrt) is not in their pattern",
    ),
    5: ("pow:-1", {"dynamic": True}, "fuse", "fuse: RMS (dynamic batch and sequence)"),
    6: ("pow:-1", {"dynamic": True, "convert_out": False}, "fuse", "fuse: RMS (no Convert)"),
    7: (
        "pow:-1",
        {"dynamic": True, "convert_out": False, "f16_constants": True},
        "fuse",
        "fuse: RMS (f16 constants behind Converts; epsilon is f16(1e-5))",
    ),
}
for _n, (_div, _kw, _expect, _theirs) in _RMS_CASES.items():
    case(
        f"ov_rms_fusion_{_n}",
        OV,
        f"{RMSF} :: RMSNormFusionTest{_n}",
        _theirs,
        _expect,
        sites=RMS if _expect == "fuse" else {},
        reasons={"reciprocal-exponent"},
        note="-x / rms is an RMS norm with gamma' = -gamma: exact" if _n == 4 else "",
        dims={"b": 2, "s": 3} if _kw.get("dynamic") else {},
        epsilon=None
        if _expect != "fuse"
        else float(np.float16(1e-5))
        if _kw.get("f16_constants")
        else float(np.float32(1e-5)),
    )(lambda d=_div, kw=_kw: _rms(d, **kw))
