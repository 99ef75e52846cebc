"""ONNX Runtime's norm-fusion tests, rebuilt: the C++ graph-transformer tests
(onnxruntime/test/optimizer/graph_transform_test_layernorm.cc) with the generator scripts of their
models (onnxruntime/test/testdata/transform/fusion/*.py), and the Python transformers optimizer's
test_skip_layer_norm_fusion.py."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from corpora.foreign_build import (
    F16,
    F32,
    F64,
    LN,
    RMS,
    SKIP_PASSES,
    G,
    case,
    layer_norm,
    rms_norm,
)

CC = "onnxruntime/test/optimizer/graph_transform_test_layernorm.cc"
GEN = "onnxruntime/test/testdata/transform/fusion/"
PY = "onnxruntime/test/python/transformers/test_skip_layer_norm_fusion.py"
MS = [("com.microsoft", 1)]
ORT = "onnxruntime"


def _ms():
    from onnx import helper

    return [helper.make_opsetid(d, v) for d, v in MS]


# ---------------------------------------------------------------- LayerNormFusion


@case(
    "ort_layer_norm_current_opset",
    ORT,
    f"{CC} :: LayerNormFusionCurrentOpsetTest",
    "fuse: LayerNormalization",
    "fuse",
    sites=LN,
)
def _current_opset():
    g = G(23)
    x = g.input("x", F32, [2, 3, 64])
    y = layer_norm(g, x, gamma=g.rand([64]), beta=g.rand([64]))
    return g.model({y: (F32, [2, 3, 64])})


def _shared_input(eps: float):
    g = G(12)
    a = g.input("A", F32, [16, 32, 4])
    outs = {}
    for _ in range(2):
        y = layer_norm(
            g,
            a,
            eps=g.const(eps),
            gamma=g.const([1, 2, 3, 4]),
            beta=g.const([1, 2, 3, 4]),
            gamma_first=True,
            beta_first=True,
        )
        outs[y] = (F32, [16, 32, 4])
    return g.model(outs, _ms())


EPS0 = (
    "epsilon is the constant 0, as in the generator. Not exact: with epsilon 0, ONNX "
    "Runtime's LayerNormalization kernel gives inf/NaN where the decomposed graph is finite "
    "on near-constant rows (tests/test_foreign_suites.py measures it); normfuse refuses"
)

case(
    "ort_two_layer_norms_share_input",
    ORT,
    f"{CC} :: TwoLayerNormShareSameInput ({GEN}layer_norm_shared_input.py)",
    "fuse: 2 LayerNormalization (epsilon 0)",
    "keep",
    reasons={"epsilon-not-positive"},
    note=EPS0,
)(lambda: _shared_input(0.0))
case(
    "ort_two_layer_norms_share_input_eps_probe",
    ORT,
    f"{CC} :: TwoLayerNormShareSameInput, epsilon 1e-5 (probe: the structure alone)",
    "fuse: 2 LayerNormalization",
    "fuse",
    sites={"layer-norm": 2},
)(lambda: _shared_input(1e-5))


def _with_cast_2(eps: float):
    g = G(12)
    a = g.input("A", F16, [16, 32, 4])
    exponent = g.cast(g.const(2.0), F16)
    y = layer_norm(
        g,
        a,
        eps=g.const(eps, F16),
        exponent=exponent,
        gamma=g.const([1, 2, 3, 4], F16),
        beta=g.const([1, 2, 3, 4], F16),
        gamma_first=True,
        beta_first=True,
    )
    return g.model({y: (F16, [16, 32, 4])}, _ms())


case(
    "ort_layer_norm_with_cast_2",
    ORT,
    f"{CC} :: LayerNormWithCastFusionTest_2 ({GEN}layer_norm_with_cast_2.py)",
    "fuse: LayerNormalization (float16, exponent Cast(2.0 -> f16), epsilon 0)",
    "keep",
    reasons={"epsilon-not-positive"},
    note=EPS0,
)(lambda: _with_cast_2(0.0))
case(
    "ort_layer_norm_with_cast_2_eps_probe",
    ORT,
    f"{CC} :: LayerNormWithCastFusionTest_2, epsilon 1e-5 (probe)",
    "fuse: LayerNormalization",
    "fuse",
    sites=LN,
)(lambda: _with_cast_2(1e-5))


def _with_cast_3(eps: float):
    g = G(12)
    a = g.input("A", F32, [16, 32, 4])
    y = layer_norm(
        g,
        a,
        eps=g.const(eps),
        cast_normed=F16,
        gamma=g.const([1, 2, 3, 4], F16),
        beta=g.const([1, 2, 3, 4], F16),
        gamma_first=True,
        beta_first=True,
    )
    return g.model({y: (F16, [16, 32, 4])}, _ms())


case(
    "ort_layer_norm_with_cast_3",
    ORT,
    f"{CC} :: LayerNormWithCastFusionTest_3 ({GEN}layer_norm_with_cast_3.py)",
    "fuse: LayerNormalization (float32 statistics, Cast to f16 before the affine, epsilon 0)",
    "keep",
    reasons={"epsilon-not-positive"},
    note=EPS0,
)(lambda: _with_cast_3(0.0))
case(
    "ort_layer_norm_with_cast_3_eps_probe",
    ORT,
    f"{CC} :: LayerNormWithCastFusionTest_3, epsilon 1e-5 (probe)",
    "fuse: LayerNormalization",
    "fuse",
    sites=LN,
)(lambda: _with_cast_3(1e-5))


def _build_layer_norm(opset: int, axes1, axes2, eps_first=False, eps=1e-5):
    """The test file's BuildLayerNorm: float16 x [2,3,3,3], mean and x - mean in float16, Cast
    to float32, Pow, mean, Add(eps), Sqrt, Div, Cast back, Mul(ones), Add(zeros)."""
    shape = [2, 3, 3, 3]
    g = G(opset)
    x = g.input("x", F16, shape)
    norm_axes = sorted(a % 4 for a in axes1)
    nshape = [shape[a] for a in norm_axes]
    y = layer_norm(
        g,
        x,
        axes=axes1,
        var_axes=axes2,
        eps=g.const(eps),
        eps_first=eps_first,
        cast_centered=F32,
        cast_normed=F16,
        gamma=g.const(np.ones(nshape), F16),
        beta=g.const(np.zeros(nshape), F16),
    )
    return g.model({y: (F16, shape)})


for _opset in (18, 14):
    case(
        f"ort_layer_norm_with_cast_5_opset{_opset}",
        ORT,
        f"{CC} :: LayerNormWithCastFusionTest_5 (BuildLayerNorm, opset {_opset})",
        "fuse: LayerNormalization",
        "fuse",
        sites=LN,
    )(lambda o=_opset: _build_layer_norm(o, (-1,), (-1,)))

case(
    "ort_layer_norm_add_epsilon_input0",
    ORT,
    f"{CC} :: LayerNormFusionAddEpsilonInput0",
    "fuse: LayerNormalization, epsilon attribute 1e-4",
    "fuse",
    sites=LN,
    epsilon=float(np.float32(1e-4)),
)(lambda: _build_layer_norm(14, (-1,), (-1,), eps_first=True, eps=1e-4))

_AXES_CASES = {
    6: ((-2,), (-1,), "keep", "no fusion: the two means reduce different axes"),
    7: ((-2, -1), (-1, -2), "fuse", "no fusion (fused only in training builds)"),
    8: ((-3, -2, -1), (-1, -2), "keep", "no fusion: the two means reduce different axes"),
    9: ((2, -1), (-1, -2), "fuse", "no fusion (fused only in training builds)"),
}
for _n, (_a1, _a2, _expect, _theirs) in _AXES_CASES.items():
    for _opset in (18, 14):
        case(
            f"ort_layer_norm_with_cast_{_n}_opset{_opset}",
            ORT,
            f"{CC} :: LayerNormWithCastFusionTest_{_n} (axes {_a1} / {_a2}, opset {_opset})",
            _theirs,
            _expect,
            sites=LN if _expect == "fuse" else {},
            reasons={"mismatched-axes"},
            note="the same axes in another order or spelling is one set: exact"
            if _expect == "fuse"
            else "",
        )(lambda o=_opset, a1=_a1, a2=_a2: _build_layer_norm(o, a1, a2))


def _double_layer_norm():
    g = G(14)
    x = g.input("x", F64, [2, 4])
    y = layer_norm(
        g,
        x,
        eps=g.const(1e-50, F64),
        exponent=g.const(2.0, F64),
        gamma=g.const(np.ones(4), F64),
        beta=g.const(np.zeros(4), F64),
    )
    return g.model({y: (F64, [2, 4])})


def _double_rms():
    g = G(14)
    x = g.input("x", F64, [2, 4])
    y = rms_norm(
        g, x, g.const(1e-50, F64), exponent=g.const(2.0, F64), gamma=g.const(np.ones(4), F64)
    )
    return g.model({y: (F64, [2, 4])})


case(
    "ort_reject_lossy_double_epsilon_layer_norm",
    ORT,
    f"{CC} :: LayerNormFusionsRejectLossyDoubleEpsilon (layer norm)",
    "no fusion: epsilon 1e-50 is not a float32",
    "keep",
    reasons={"epsilon-not-float32"},
)(_double_layer_norm)
case(
    "ort_reject_lossy_double_epsilon_rms",
    ORT,
    f"{CC} :: LayerNormFusionsRejectLossyDoubleEpsilon (simplified layer norm)",
    "no fusion: epsilon 1e-50 is not a float32",
    "keep",
    reasons={"epsilon-not-float32"},
)(_double_rms)


def _scale_bias_identity():
    """layer_norm_fusion_scale_bias.py with casts and Identity on the scale and the bias."""
    g = G(12)
    a = g.input("A", F16, [16, 32, 4])
    gamma = g.op("Identity", g.const([1, 2, 3, 4], F16))
    beta = g.op("Identity", g.const([1e-6] * 4, F16))
    y = layer_norm(
        g,
        a,
        eps=g.const(1e-12),
        cast_centered=F32,
        cast_normed=F16,
        gamma=gamma,
        beta=beta,
        gamma_first=True,
    )
    return g.model({y: (F16, [16, 32, 4])}, _ms())


case(
    "ort_layer_norm_scale_bias_identity",
    ORT,
    f"{CC} :: LayerNormScaleBiasTest ({GEN}layer_norm_fusion_scale_bias.py)",
    "fuse: LayerNormalization",
    "fuse",
    sites=LN,
)(_scale_bias_identity)


# ---------------------------------------------------------------- SimplifiedLayerNormFusion


def _t5(casts: bool):
    g = G(12)
    a = g.input("A", F16 if casts else F32, [16, 32, 4])
    x = g.cast(a, F32) if casts else a
    y = rms_norm(
        g,
        x,
        g.const(1e-12),
        gamma=g.const([1, 2, 3, 4], F16 if casts else F32),
        gamma_first=True,
        cast_normed=F16 if casts else None,
    )
    return g.model({y: (F16 if casts else F32, [16, 32, 4])}, _ms())


case(
    "ort_simplified_layer_norm_t5",
    ORT,
    f"{CC} :: SimplifiedLayerNormFusionTest ({GEN}layer_norm_t5_gen.py)",
    "fuse: SimplifiedLayerNormalization",
    "fuse",
    sites=RMS,
)(lambda: _t5(False))
case(
    "ort_simplified_layer_norm_with_casts",
    ORT,
    f"{CC} :: SimplifiedLayerNormWithCastsFusionTest / ...CudaEp "
    "(simplified_layer_norm_with_casts)",
    "CPU: no fusion (kernel: input and scale types differ); CUDA: fuse",
    "fuse",
    sites=RMS,
)(lambda: _t5(True))


def _shared_cast_exponent(leading_cast: bool):
    g = G(17)
    exponent = g.cast(g.const(2.0, F16), F32)
    eps, scale = g.const(1e-5), g.const([1.0] * 4)
    outs = {}
    for i in range(2):
        x = g.input(f"x{i}", F16 if leading_cast else F32, [2, 4])
        if leading_cast:
            x = g.cast(x, F32)
        y = rms_norm(g, x, eps, exponent=exponent, gamma=scale)
        outs[y] = (F32, [2, 4])
    return g.model(outs)


for _lead in (False, True):
    case(
        f"ort_simplified_shared_cast_pow_exponent{'_leading_cast' if _lead else ''}",
        ORT,
        f"{CC} :: SimplifiedLayerNormFusionSharedCastPowExponent (leading cast {_lead})",
        "fuse: 2 SimplifiedLayerNormalization",
        "fuse",
        sites={"rms-norm": 2},
    )(lambda lead=_lead: _shared_cast_exponent(lead))


def _sln_eps_first():
    g = G(17)
    x = g.input("x", F32, [2, 4])
    y = rms_norm(g, x, g.const(1e-4), eps_first=True, gamma=g.const([1.0] * 4))
    return g.model({y: (F32, [2, 4])})


case(
    "ort_simplified_add_epsilon_input0",
    ORT,
    f"{CC} :: SimplifiedLayerNormFusionAddEpsilonInput0",
    "fuse: SimplifiedLayerNormalization, epsilon attribute 1e-4",
    "fuse",
    sites=RMS,
    epsilon=float(np.float32(1e-4)),
)(_sln_eps_first)


def _int_exponent(elem: int):
    g = G(17)
    x = g.input("x", F32, [2, 4])
    y = rms_norm(g, x, g.const(1e-5), exponent=g.const(2, elem), gamma=g.const([1.0] * 4))
    return g.model({y: (F32, [2, 4])})


for _elem, _label in ((TensorProto.INT32, "int32"), (TensorProto.INT64, "int64")):
    case(
        f"ort_simplified_integer_pow_exponent_{_label}",
        ORT,
        f"{CC} :: SimplifiedLayerNormFusionAllowsIntegerPowExponentTwo ({_label})",
        "fuse: SimplifiedLayerNormalization",
        "fuse",
        sites=RMS,
        note="the int8 and uint8 exponents of the same test are left out: ONNX Runtime's CPU "
        "Pow has no kernel for them, so the original cannot run here",
    )(lambda e=_elem: _int_exponent(e))


def _pow_three(cast_exponent: bool):
    g = G(17)
    x = g.input("x", F32, [2, 4])
    exponent = g.cast(g.const(3.0, F16), F32) if cast_exponent else g.const(3.0)
    y = rms_norm(g, x, g.const(1e-5), exponent=exponent, gamma=g.const([1.0] * 4))
    return g.model({y: (F32, [2, 4])})


for _cast in (False, True):
    case(
        f"ort_simplified_requires_pow_two{'_cast' if _cast else ''}",
        ORT,
        f"{CC} :: SimplifiedLayerNormFusionRequiresPowExponentTwo (cast exponent {_cast})",
        "no fusion: the exponent is 3",
        "keep",
        reasons={"square-exponent"},
    )(lambda c=_cast: _pow_three(c))


def _fp16_loop_shared_exponent():
    g = G(17)
    exponent = g.const(2.0, F16)
    outs = {}
    for i in range(2):
        x = g.input(f"x{i}", F16, [2, 4])
        y = rms_norm(g, x, g.const(1e-4, F16), exponent=exponent, gamma=g.const([1.0] * 4, F16))
        outs[y] = (F16, [2, 4])
    return g.model(outs)


case(
    "ort_simplified_fp16_shared_pow_exponent",
    ORT,
    f"{CC} :: SimplifiedLayerNormFusionOptimizationLoopSharedPowExponent",
    "fuse: 2 SimplifiedLayerNormalization (after the optimisation loop repeats)",
    "fuse",
    sites={"rms-norm": 2},
    note="the test's Conv side branch is left out",
    epsilon=float(np.float16(1e-4)),
)(_fp16_loop_shared_exponent)


def _fp16_pow_edge():
    g = G(12)
    x = g.input("x", F16, [1, 4, 8])
    eps = g.input("bias", F16, [1, 4, 1])
    scale = g.input("scale", F16, [1, 4, 1])
    y = rms_norm(g, x, eps, exponent=g.cast(g.const([2.0]), F16), gamma=scale)
    return g.model({y: (F16, [1, 4, 8])})


case(
    "ort_simplified_fp16_pow_edge",
    ORT,
    f"{GEN}gen_simplified_layer_norm_fp16_pow_edge.py",
    "a model for the float16 Pow edge; epsilon and scale are graph inputs",
    "keep",
    reasons={"epsilon-not-constant"},
    note="epsilon is a graph input here, so no fused op with an epsilon attribute is exact",
)(_fp16_pow_edge)


# ---------------------------------------------------------------- SkipLayerNormFusion (C++)


def _skip_format(fmt: int, multi_output_add: bool = False):
    """skip_layer_norm_gen.py: the layer norm (x - mean computed twice, Mul(gamma, .)) over
    Add(Add(A, bias), B) (format 1), Add(A, Add(B, bias)) (format 2) or Add(A, B) (format 3);
    with `multi_output_add`, a Neg also reads the inner sum."""
    g = G(12)
    a = g.input("A", F32, [16, 32, 4])
    b = g.input("B", F32, [16, 32, 4])
    outs = {}
    if fmt == 1:
        inner = g.op("Add", a, g.const([0.1, 0.2, 0.3, 0.4]))
        ln_in = g.op("Add", inner, b)
    elif fmt == 2:
        inner = g.op("Add", b, g.const([0.1, 0.2, 0.3, 0.4]))
        ln_in = g.op("Add", a, inner)
    else:
        inner = ln_in = g.op("Add", a, b)
    y = layer_norm(
        g,
        ln_in,
        eps=g.const(1e-12),
        two_subs=True,
        gamma=g.const([1, 2, 3, 4]),
        beta=g.const([0.1, 0.2, 0.3, 0.4]),
        gamma_first=True,
    )
    outs[y] = (F32, [16, 32, 4])
    if multi_output_add:
        outs[g.op("Neg", inner)] = (F32, [16, 32, 4])
    return g.model(outs)


# normfuse leaves every layer-norm residual (its layer norm still fuses): ONNX Runtime's CPU
# SkipLayerNormalization was measured less accurate than Add + LayerNormalization on offset rows.
SKIP_LN_LEFT = (
    "SkipLayerNormalization is left (skip-less-accurate): its CPU kernel was measured further "
    "from float64 than Add + LayerNormalization on offset rows (ADV3-05)"
)
for _fmt in (1, 2, 3):
    case(
        f"ort_skip_layer_norm_format{_fmt}",
        ORT,
        f"{CC} :: SkipLayerNormFusionTest (skip_layer_norm_format{_fmt})",
        "fuse: SkipLayerNormalization" + (" with the bias" if _fmt < 3 else ""),
        "fuse",
        sites=LN,
        passes=SKIP_PASSES,
        note="the generator's Neg output is not a graph output there; here it is one. "
        + SKIP_LN_LEFT,
    )(lambda f=_fmt: _skip_format(f))
for _fmt in (1, 2):
    case(
        f"ort_skip_layer_norm_format{_fmt}_partial",
        ORT,
        f"{CC} :: SkipLayerNormFusionTest (skip_layer_norm_format{_fmt}_partial)",
        "fuse: SkipLayerNormalization without the bias (the bias Add has another reader)",
        "fuse",
        sites=LN,
        passes=SKIP_PASSES,
        note=SKIP_LN_LEFT,
    )(lambda f=_fmt: _skip_format(f, True))
case(
    "ort_skip_layer_norm_format3_no_fusion",
    ORT,
    f"{CC} :: SkipLayerNormFusionTest (skip_layer_norm_format3_no_fusion)",
    "no Skip fusion: the residual sum has another reader",
    "either",
    sites=LN,
    passes=SKIP_PASSES,
    note="the sum can be SkipLayerNormalization's fourth output, so fusing it is exact",
)(lambda: _skip_format(3, True))


def _add_then_layer_norm(opset: int, gamma_shape, graph_output_sum=False, bias=0, cast=False):
    """Add(input_1, input_2) -> LayerNormalization(axis=-1): ONNX Runtime's current-opset and
    3-D gamma tests, and the Python optimizer's create_test_model (bias 1 / 2: input_1 / input_2
    is MatMul(input_0, W) + bias; `cast`: the MatMul is float16 and cast to float32)."""
    g = G(opset)
    hidden = gamma_shape[-1]
    shape = [1, 2, hidden] if opset == 17 else [2, 3, hidden]
    inputs = {}
    for i in (1, 2):
        if bias == i:
            x0 = g.input("input_0", F16 if cast else F32, shape)
            mm = g.op("MatMul", x0, g.const(np.ones((hidden, hidden)), F16 if cast else F32))
            if cast:
                mm = g.cast(mm, F32)
            inputs[i] = g.op("Add", mm, g.const(np.ones(hidden)))
        else:
            inputs[i] = g.input(f"input_{i}", F32, shape)
    total = g.op("Add", inputs[1], inputs[2])
    y = g.op("LayerNormalization", total, g.rand(gamma_shape), g.rand(gamma_shape), axis=-1)
    outs = {y: (F32, shape)}
    if graph_output_sum:
        outs[total] = (F32, shape)
    return g.model(outs)


case(
    "ort_skip_layer_norm_current_opset",
    ORT,
    f"{CC} :: SkipLayerNormFusionCurrentOpsetTest",
    "fuse: SkipLayerNormalization",
    "keep",
    reasons={"skip-less-accurate"},
    passes=SKIP_PASSES,
    note=SKIP_LN_LEFT,
)(lambda: _add_then_layer_norm(23, [64]))
case(
    "ort_skip_layer_norm_3d_gamma",
    ORT,
    f"{CC} :: SkipLayerNormFusion_3DGamma_NoFusion",
    "no fusion: the SkipLayerNormalization kernel wants 1-D gamma/beta",
    "either",
    passes=SKIP_PASSES,
    note="gamma [1,1,4] varies only along the last axis: reshaped to [4] a fusion is exact",
    dims={},
)(lambda: _add_then_layer_norm(17, [1, 1, 4]))

_PY_CASES = {
    "no_graph_output": {},
    "graph_output": {"graph_output_sum": True},
    "graph_output_bias1": {"graph_output_sum": True, "bias": 1},
    "graph_output_bias2": {"graph_output_sum": True, "bias": 2},
    "graph_output_cast_bias1": {"graph_output_sum": True, "bias": 1, "cast": True},
    "graph_output_cast_bias2": {"graph_output_sum": True, "bias": 2, "cast": True},
}
for _label, _kw in _PY_CASES.items():
    case(
        f"ort_py_skip_layer_norm_{_label}",
        ORT,
        f"{PY} :: test_skip_layer_norm_{_label}",
        "fuse: SkipLayerNormalization" + (" with the bias" if "bias" in _kw else ""),
        "keep",
        reasons={"skip-less-accurate"},
        passes=SKIP_PASSES,
        note="built at opset 17 (their opset 16 has no standard LayerNormalization). "
        + SKIP_LN_LEFT,
    )(lambda kw=_kw: _add_then_layer_norm(17, [3], **kw))


def _fp16_inputs(hidden="N"):
    """layer_norm_fp16.py: float16 x [M, N] with scale and bias as graph inputs [N], exponent
    and epsilon as one-element float16 initializers, opset 10."""
    g = G(10)
    x = g.input("X", F16, ["M", hidden])
    scale, bias = g.input("Scale", F16, [hidden]), g.input("B", F16, [hidden])
    y = layer_norm(
        g,
        x,
        eps=g.const([1e-4], F16),
        exponent=g.const([2.0], F16),
        gamma=scale,
        beta=bias,
        gamma_first=True,
    )
    return g.model({y: (F16, ["M", hidden])})


case(
    "ort_layer_norm_fp16_opset10",
    ORT,
    f"{GEN}layer_norm_fp16.py (Level-2 LayerNormFusion, float16)",
    "fuse: LayerNormalization",
    "fuse",
    sites=LN,
    dims={"M": 3, "N": 8},
    epsilon=float(np.float16(1e-4)),
    gap="gap: the normalised dim N is symbolic (scale and bias [N] share it with x); normfuse "
    "needs static normalised dims (unknown-shape)",
    note="opset 10: the fused op is ONNX Runtime's LayerNormalization at that opset",
)(_fp16_inputs)
case(
    "ort_layer_norm_fp16_opset10_static_probe",
    ORT,
    f"{GEN}layer_norm_fp16.py, N = 8 static (probe)",
    "fuse: LayerNormalization",
    "fuse",
    sites=LN,
    dims={"M": 3},
    epsilon=float(np.float16(1e-4)),
)(lambda: _fp16_inputs(8))


def _without_scale_bias(eps: float):
    g = G(12)
    x = g.input("X", F32, [16, 32, 4])
    y = layer_norm(g, x, eps=g.const(eps))
    return g.model({y: (F32, [16, 32, 4])}, _ms())


case(
    "ort_layer_norm_without_scale_bias",
    ORT,
    f"{GEN}layer_norm_without_scale_bias.py",
    "fuse: LayerNormalization (epsilon 0)",
    "keep",
    reasons={"epsilon-not-positive"},
    note=EPS0,
)(lambda: _without_scale_bias(0.0))
case(
    "ort_layer_norm_without_scale_bias_eps_probe",
    ORT,
    f"{GEN}layer_norm_without_scale_bias.py, epsilon 1e-5 (probe)",
    "fuse: LayerNormalization",
    "fuse",
    sites=LN,
)(lambda: _without_scale_bias(1e-5))
