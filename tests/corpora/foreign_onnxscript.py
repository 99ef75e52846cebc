"""onnxscript rewriter's norm-fusion tests, rebuilt: rules/fusion/_layer_norm_test.py and
_layer_norm_extended_test.py (LayerNormalization), ort_fusions/rms_normalization_unit_test.py
(SimplifiedLayerNormalization), rules/fusion/_rms_normalization_extended_test.py
(RMSNormalization) and ort_fusions/skip_normalization_unit_test.py (Skip*).

Their scales and biases are graph inputs (onnxscript functions' parameters), and so they are
here."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, numpy_helper

from corpora.foreign_build import F16, F32, F64, LN, RMS, SKIP_PASSES, G, case, rms_norm

LNT = "onnxscript/rewriter/rules/fusion/_layer_norm_test.py"
LNX = "onnxscript/rewriter/rules/fusion/_layer_norm_extended_test.py"
RMSU = "onnxscript/rewriter/ort_fusions/rms_normalization_unit_test.py"
RMSX = "onnxscript/rewriter/rules/fusion/_rms_normalization_extended_test.py"
SKIP = "onnxscript/rewriter/ort_fusions/skip_normalization_unit_test.py"
OS = "onnxscript"


def _eps_constant(g: G, elem: int, value: float, as_tensor: bool = False) -> str:
    """op.Constant(value_float=...) or op.Constant(value=tensor([...]))."""
    if elem == F32 and not as_tensor:
        return g.op("Constant", value_float=value)
    array = np.array(
        [value] if as_tensor else value,
        dtype={F32: np.float32, F16: np.float16, F64: np.float64}[elem],
    )
    return g.op("Constant", value=numpy_helper.from_array(array))


def _layer_norm(elem=F32, square="mul", divide="reciprocal", bias=False, eps_elem=None):
    g = G(18)
    x = g.input("x", elem, [2, 4, 8])
    scale = g.input("scale", elem, [8])
    mean = g.mean(x, (-1,))
    d = g.op("Sub", x, mean)
    dd = g.op("Mul", d, d) if square == "mul" else g.op("Pow", d, g.const(2, TensorProto.INT64))
    var = g.mean(dd, (-1,))
    std = g.op("Sqrt", g.op("Add", var, _eps_constant(g, eps_elem or elem, 1e-5)))
    normed = (
        g.op("Mul", d, g.op("Reciprocal", std)) if divide == "reciprocal" else g.op("Div", d, std)
    )
    y = g.op("Mul", normed, scale)
    if bias:
        y = g.op("Add", y, g.input("bias", elem, [8]))
    return g.model({y: (elem, [2, 4, 8])})


for _name, _test, _kw in (
    ("without_bias", f"{LNT} :: test_layer_norm_fusion_without_bias", {}),
    ("with_bias", f"{LNT} :: test_layer_norm_fusion_with_bias", {"bias": True}),
    ("pow_variant", f"{LNX} :: test_pow_for_deviation_squared", {"square": "pow"}),
    ("div_variant", f"{LNX} :: test_div_for_normalization", {"divide": "div"}),
    ("pow_and_div", f"{LNX} :: test_pow_and_div_combined", {"square": "pow", "divide": "div"}),
    ("div_with_bias", f"{LNX} :: test_div_with_bias", {"divide": "div", "bias": True}),
):
    case(
        f"os_layer_norm_{_name}",
        OS,
        _test,
        "fuse: LayerNormalization",
        "fuse",
        sites=LN,
        target="onnx",
        note="Pow's exponent is the int64 constant 2, as onnxscript writes `op.Pow(d, 2)`"
        if _kw.get("square") == "pow"
        else "",
    )(lambda kw=_kw: _layer_norm(**kw))

case(
    "os_layer_norm_double",
    OS,
    f"{LNX} :: test_double_precision",
    "fuse: LayerNormalization (double; their epsilon is a float32 Constant, which makes Add's "
    "operand types differ, so the test never runs the model)",
    "keep",
    reasons={"epsilon-not-float32", "float64-stash-type"},
    target="onnx",
    note="built with a double epsilon 1e-5 so the model is valid; 1e-5 is no float32, and "
    "LayerNormalization's epsilon attribute is a float32 (and float64 has no standard stash "
    "type): any fusion would round epsilon",
)(lambda: _layer_norm(F64))
case(
    "os_layer_norm_fp16_no_fusion",
    OS,
    f"{LNX} :: test_fp16_input_no_fusion",
    "no fusion: float16 is not among their layer-norm compute types",
    "either",
    target="onnx",
    note="epsilon built as a float16 Constant so that the model is valid",
)(lambda: _layer_norm(F16))


def _rms(elem=F32, scale_first=False, cast_input=False, int_input=False, sym=True):
    g = G(18)
    batch = ["B", "S"] if sym else [2, 4]
    x = g.input("x", TensorProto.INT32 if int_input else elem, [*batch, 16])
    scale = g.input("scale", F32 if int_input else elem, [16])
    xf = g.cast(x, F32) if (cast_input or int_input) else x
    y = rms_norm(
        g,
        xf,
        _eps_constant(g, F32 if int_input or cast_input else elem, 1e-6, True),
        exponent=g.const(2.0, F32 if int_input or cast_input else elem),
        divide="reciprocal",
        cast_normed=F16 if cast_input else None,
    )
    y = g.op("Mul", scale, y) if scale_first else g.op("Mul", y, scale)
    return g.model({y: (F32 if int_input else elem, [*batch, 16])})


for _target, _file, _op in (
    ("ort", RMSU, "SimplifiedLayerNormalization"),
    ("onnx", RMSX, "RMSNormalization"),
):
    _p = "os_sln" if _target == "ort" else "os_rmsnorm"
    for _order, _first in (("scale_times_normalized", True), ("normalized_times_scale", False)):
        case(
            f"{_p}_{_order}",
            OS,
            f"{_file} :: test_mul_order_variants ({_order})",
            f"fuse: {_op}",
            "fuse",
            sites=RMS,
            target=_target,
        )(lambda f=_first, s=_target == "ort": _rms(scale_first=f, sym=s))
    case(
        f"{_p}_mixed_precision_cast",
        OS,
        f"{_file} :: test_{'cast_input_' if _target == 'ort' else ''}mixed_precision"
        + ("" if _target == "ort" else "_cast"),
        f"fuse: {_op} (float16 in, float32 statistics, Cast back)",
        "fuse",
        sites=RMS,
        target=_target,
    )(lambda s=_target == "ort": _rms(F16, cast_input=True, sym=s))
    case(
        f"{_p}_int_input_no_fusion",
        OS,
        f"{_file} :: test_int_input_no_fusion",
        "no fusion: x is int32 (cast to float32 before the norm)",
        "either",
        target=_target,
        note="the norm reads Cast(x) as float32; fusing it would be exact",
    )(lambda: _rms(int_input=True))
case(
    "os_rmsnorm_double",
    OS,
    f"{RMSX} :: test_double_precision",
    "fuse: RMSNormalization (double, epsilon 1e-6)",
    "keep",
    reasons={"epsilon-not-float32"},
    target="onnx",
    note="1e-6 in double is no float32, and the fused op's epsilon attribute is a float32",
)(lambda: _rms(F64, sym=False))


# ---------------------------------------------------------------- skip normalisation


def _skip(norm: str, order="input_skip", bias=None, with_add=True, rank=3):
    """Add(input, skip) [+ bias] -> LayerNormalization / RMSNormalization (opset 23: their
    SimplifiedLayerNormalization is ONNX Runtime's own op, not valid standard ONNX)."""
    g = G(23 if norm == "rms" else 18)
    shape = [2, 8, 16] if rank == 3 else ["S", 16]
    x = g.input("input", F32, shape)
    total = x
    if with_add:
        skip = g.input("skip", F32, shape)
        if bias == "pre":
            x = g.op("Add", x, g.input("bias", F32, [16]))
        total = g.op("Add", skip, x) if order == "skip_input" else g.op("Add", x, skip)
        if bias == "post":
            total = g.op("Add", total, g.input("bias", F32, [16]))
    gamma = g.input("gamma", F32, [16])
    if norm == "rms":
        y = g.op("RMSNormalization", total, gamma, axis=-1, epsilon=1e-6, stash_type=1)
    else:
        y = g.op(
            "LayerNormalization",
            total,
            gamma,
            g.input("beta", F32, [16]),
            axis=-1,
            epsilon=1e-6,
            stash_type=1,
        )
    return g.model({y: (F32, shape)})


SKIP_POST_BIAS_GAP = (
    "gap: a bias that is a graph input, added after the residual sum: normfuse folds only a "
    "constant bias there (a tensor bias of any shape would block the plain residual fusion)"
)
for _name, _kw in (
    ("skip_rms_input_plus_skip", {}),
    ("skip_rms_skip_plus_input", {"order": "skip_input"}),
    ("skip_rms_post_bias", {"bias": "post"}),
    ("skip_rms_pre_bias", {"bias": "pre"}),
):
    case(
        f"os_{_name}",
        OS,
        f"{SKIP} :: {_name.replace('skip_rms_', 'test_skip_rms_')}",
        "fuse: SkipSimplifiedLayerNormalization",
        "fuse",
        sites={"skip-norm": 1},
        passes=SKIP_PASSES,
        gap=SKIP_POST_BIAS_GAP if _kw.get("bias") == "post" else None,
        note="their SimplifiedLayerNormalization is written as RMSNormalization-23",
    )(lambda kw=_kw: _skip("rms", **kw))
for _name, _kw in (("skip_ln_no_bias", {}), ("skip_ln_post_bias", {"bias": "post"})):
    case(
        f"os_{_name}",
        OS,
        f"{SKIP} :: test_{_name}",
        "fuse: SkipLayerNormalization",
        "keep",
        reasons={"skip-less-accurate", "skip-shape"},  # post bias: a graph input, not [H]-shaped
        passes=SKIP_PASSES,
        note="SkipLayerNormalization is left (skip-less-accurate): measured less accurate than "
        "Add + LayerNormalization on offset rows (ADV3-05)",
    )(lambda kw=_kw: _skip("ln", **kw))
case(
    "os_skip_no_add_no_fusion",
    OS,
    f"{SKIP} :: test_no_skip_add_no_fusion",
    "no fusion: no residual Add",
    "keep",
    passes=SKIP_PASSES,
    note="nothing to fuse and no near-miss needed: the norm is already one op",
)(lambda: _skip("rms", with_add=False))
case(
    "os_skip_rank2_no_fusion",
    OS,
    f"{SKIP} :: test_rank2_input_no_fusion",
    "no fusion: rank-2 input",
    "either",
    passes=SKIP_PASSES,
)(lambda: _skip("rms", rank=2))


def _skip_probe(decomposed: bool, constant_gamma: bool):
    """Probes beside the skip cases: the residual Add read by a decomposed RMS norm, or by
    RMSNormalization-23 with a constant gamma."""
    g = G(23)
    x, skip = g.input("input", F32, [2, 8, 16]), g.input("skip", F32, [2, 8, 16])
    total = g.op("Add", x, skip)
    gamma = g.rand([16]) if constant_gamma else g.input("gamma", F32, [16])
    if decomposed:
        y = rms_norm(g, total, g.const(1e-6), gamma=gamma)
    else:
        y = g.op("RMSNormalization", total, gamma, axis=-1, epsilon=1e-6)
    return g.model({y: (F32, [2, 8, 16])})


for _name, _decomposed, _const, _gap in (
    ("decomposed_input_gamma", True, False, None),
    ("decomposed_constant_gamma", True, True, None),
    ("op_constant_gamma", False, True, None),
):
    case(
        f"os_skip_rms_{_name}_probe",
        OS,
        f"{SKIP} :: test_skip_rms_no_bias (probe: {_name})",
        "fuse: SkipSimplifiedLayerNormalization",
        "fuse",
        sites={"skip-norm": 1},
        passes=SKIP_PASSES,
        gap=_gap,
    )(lambda d=_decomposed, c=_const: _skip_probe(d, c))


def _rank1_opset23():
    """_rms_normalization_test.py: opset 23, x and weight both [128] graph inputs, the exponent
    and epsilon as Constant(value_float), Mul(weight, x * Reciprocal(rms))."""
    g = G(23)
    x, weight = g.input("embedding", F32, [128]), g.input("layernorm_weight", F32, [128])
    y = rms_norm(
        g,
        x,
        g.op("Constant", value_float=1e-5),
        exponent=g.op("Constant", value_float=2.0),
        divide="reciprocal",
        gamma=weight,
        gamma_first=True,
    )
    return g.model({y: (F32, [128])})


case(
    "os_rmsnorm_rank1_opset23",
    OS,
    "onnxscript/rewriter/rules/fusion/_rms_normalization_test.py :: test_rms_normalization_fusion",
    "fuse: RMSNormalization",
    "fuse",
    sites=RMS,
    target="onnx",
    epsilon=float(np.float32(1e-5)),
)(_rank1_opset23)
