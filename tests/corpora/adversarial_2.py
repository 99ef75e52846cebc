"""Adversarial corpus, second helper (issue 15's spellings and structures): Pow roots and
reciprocals, exponent tensors, `mean - x` numerators, keepdims=0 + Unsqueeze, `ReduceSum * (1/d)`
and `d` from `Shape`, ReduceSumSquare / ReduceL2 RMS norms, Mean / InvStdDev outputs, shared
statistics, computed and odd axes, QK-norm after dynamic Reshapes, opset raises, float64 and
float16.

Registered into `corpora.adversarial.CASES` by `register()` (called at the end of that module), so
`tests/test_adversarial.py` runs every case here in its four configurations. Cases that normfuse
gets wrong carry a finding id (`ADV2-NN`, described in `docs/limitations.md`) in
`FINDINGS`; the test marks them xfail(strict=True) in exactly the configurations they fail.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import helper

from corpora.adversarial_build import BOOL, F16, F64, I64, SHAPE, F, G, model, vi

# case name -> (finding id, the configurations it fails in); tests/test_adversarial.py requires
# each (case, configuration) pair to fail, as a strict xfail would, and then reports the case's
# test xfailed. "near-miss" is test_lookalike_reports_a_near_miss (marked xfail(strict=True)).
FINDINGS: dict[str, tuple[str, tuple[str, ...]]] = {
    # Empty: ADV2-01..05 were fixed on main in af8bc56 and ADV2-06/07 in 97068ad; their cases
    # pass and guard the fixes (`docs/limitations.md`). A new finding is listed here as
    # name: (finding id, the configurations it fails in).
}

GAMMA = np.linspace(0.5, 1.5, 16, dtype=np.float32)
BETA = np.linspace(-0.5, 0.5, 16, dtype=np.float32)
ELEM = {np.float32: F, np.float16: F16, np.float64: F64}


def _c(g: G, value, stem: str) -> str:
    """A tensor name: names pass through, numpy values keep their dtype, Python numbers take the
    graph's dtype."""
    if isinstance(value, str):
        return value
    if isinstance(value, np.ndarray | np.generic):
        return g.init(value, g.fresh(stem), value.dtype)
    return g.init(value, g.fresh(stem))


def norm(
    g: G,
    x: str,
    *,
    kind: str = "ln",
    axes=(-1,),
    var_axes=None,
    sq=2.0,
    root="sqrt",
    inv="div",
    eps=1e-5,
    gamma=None,
    beta=None,
    numerator: str = "x-m",
    mean: str | None = None,
    centered: str | None = None,
    variance: str | None = None,
    out: str | None = "y",
) -> str:
    """A decomposed layer norm (kind "ln") or RMS norm ("rms") of `x`.

    sq: the square's exponent (a value or name) or "mul"; root: "sqrt" or the Pow exponent of the
    square root; inv: "div" (Div by std), "recip" (Mul by Reciprocal), a value (Mul by Pow(std, e))
    or ("rsqrt", e) (Mul by Pow(v + eps, e), no root); numerator: "x-m" or "m-x"; mean, centered,
    variance: existing tensors to reuse instead of computing them."""
    if kind == "ln":
        mean = mean or g.reduce("ReduceMean", x, axes)
        base = centered or g.op("Sub", [x, mean])
    else:
        base = x
    if variance is None:
        square = (
            g.op("Mul", [base, base])
            if isinstance(sq, str) and sq == "mul"
            else g.op("Pow", [base, _c(g, sq, "two")])
        )
        variance = g.reduce("ReduceMean", square, var_axes if var_axes is not None else axes)
    shifted = g.op("Add", [variance, _c(g, eps, "eps")])
    num = base if numerator == "x-m" else g.op("Sub", [mean, x])
    if isinstance(inv, tuple):
        normed = g.op("Mul", [num, g.op("Pow", [shifted, _c(g, inv[1], "half")])])
    else:
        std = (
            g.op("Sqrt", [shifted])
            if isinstance(root, str) and root == "sqrt"
            else g.op("Pow", [shifted, _c(g, root, "root")])
        )
        if isinstance(inv, str) and inv == "div":
            normed = g.op("Div", [num, std])
        elif isinstance(inv, str) and inv == "recip":
            normed = g.op("Mul", [num, g.op("Reciprocal", [std])])
        else:
            normed = g.op("Mul", [num, g.op("Pow", [std, _c(g, inv, "inv")])])
    result = normed
    if gamma is not None:
        result = g.op("Mul", [result, _c(g, gamma, "gamma")])
    if beta is not None:
        result = g.op("Add", [result, _c(g, beta, "beta")])
    if out is not None:
        g.nodes[-1].output[0] = out
        return out
    return result


def simple(
    kind: str = "ln",
    *,
    dtype=np.float32,
    shape=SHAPE,
    out_shape=None,
    opset: int = 17,
    affine: bool = True,
    **kw,
) -> Callable[[], onnx.ModelProto]:
    """x -> one norm -> y; `affine` adds the default gamma (and beta for a layer norm)."""

    def build():
        g = G(opset=opset, dtype=dtype)
        args = dict(kw)
        if affine:
            args.setdefault("gamma", np.linspace(0.5, 1.5, shape[-1]).astype(dtype))
            if kind == "ln":
                args.setdefault("beta", np.linspace(-0.5, 0.5, shape[-1]).astype(dtype))
        norm(g, "x", kind=kind, **args)
        elem = ELEM[dtype]
        return model(g, [("x", elem, shape)], [("y", elem, out_shape or shape)])

    return build


def rank4(value, dtype=np.float32) -> np.ndarray:
    return np.full((1, 1, 1, 1), value, dtype)


OUT4 = (1, *SHAPE)


def _pow_cases(case, KEEP, EITHER, FUSE, nearest) -> None:
    """Pow(., 0.5) roots, Pow(., -1) reciprocals and exponent tensors."""
    ln_near = nearest("ln")
    rms_near = nearest("rms", eps=1e-6)
    f16, f64 = np.float16, np.float64
    items = [
        # name, kind, kwargs, expect, evidence
        ("root_pow_half_float16_exponent", "ln", {"root": f16(0.5)}, EITHER, None),
        ("root_pow_half_float64_exponent", "ln", {"root": f64(0.5)}, EITHER, None),
        ("root_pow_half_vector16", "ln", {"root": np.full(16, 0.5, np.float32)}, EITHER, None),
        (
            "root_pow_half_rank4_raises_output_rank",
            "ln",
            {"root": rank4(0.5), "out_shape": OUT4},
            EITHER,
            None,
        ),
        ("root_pow_0_5001", "ln", {"root": np.float32(0.5001)}, KEEP("root-exponent"), ln_near),
        (
            "root_pow_vector_one_0_25",
            "ln",
            {"root": np.array([0.5] * 15 + [0.25], np.float32)},
            KEEP("root-exponent"),
            ln_near,
        ),
        ("recip_pow_minus1_int64", "ln", {"inv": np.int64(-1)}, EITHER, None),
        ("recip_pow_minus1_float16", "ln", {"inv": f16(-1)}, EITHER, None),
        (
            "recip_pow_minus1_rank4_raises_output_rank",
            "ln",
            {"inv": rank4(-1.0), "out_shape": OUT4},
            EITHER,
            None,
        ),
        (
            "recip_pow_vector_one_minus2",
            "ln",
            {"inv": np.array([-1.0] * 15 + [-2.0], np.float32)},
            KEEP("reciprocal-exponent"),
            ln_near,
        ),
        (
            "recip_pow_minus_1_0001",
            "ln",
            {"inv": np.float32(-1.0001)},
            KEEP("reciprocal-exponent"),
            ln_near,
        ),
        ("recip_pow_plus1", "ln", {"inv": np.float32(1.0)}, KEEP(), ln_near),
        ("root_and_recip_pow_sqrt_div", "ln", {"root": 0.5, "inv": -1.0}, EITHER, None),
        (
            "rsqrt_pow_minus_half_float16_exponent",
            "ln",
            {"inv": ("rsqrt", f16(-0.5))},
            EITHER,
            None,
        ),
        (
            "rsqrt_pow_minus_half_rank4_raises_output_rank",
            "ln",
            {"inv": ("rsqrt", rank4(-0.5)), "out_shape": OUT4},
            EITHER,
            None,
        ),
        ("rsqrt_pow_minus1_no_root", "ln", {"inv": ("rsqrt", -1.0)}, KEEP(), ln_near),
        (
            "square_exp_2_0000002_f32",
            "ln",
            {"sq": np.float32(2.0000002)},
            KEEP("square-exponent"),
            ln_near,
        ),
        ("square_exp_minus_2", "ln", {"sq": np.float32(-2.0)}, KEEP("square-exponent"), ln_near),
        ("square_exp_2_float64_in_float32_model", "ln", {"sq": f64(2.0)}, EITHER, None),
        ("square_exp_2_int32_vector16", "ln", {"sq": np.full(16, 2, np.int32)}, EITHER, None),
        (
            "square_exp_2_shape_2_5_1",
            "ln",
            {"sq": np.full((2, 5, 1), 2.0, np.float32)},
            EITHER,
            None,
        ),
        (
            "square_exp_2_rank4_raises_output_rank",
            "ln",
            {"sq": rank4(2.0), "out_shape": OUT4},
            EITHER,
            None,
        ),
        (
            "square_exp_2_shape_3_1_1_1_widens_batch",
            "ln",
            {"sq": np.full((3, 1, 1, 1), 2.0, np.float32), "out_shape": (3, *SHAPE)},
            EITHER,
            None,
        ),
        (
            "square_exp_int64_vector_one_3",
            "ln",
            {"sq": np.array([2] * 15 + [3], np.int64)},
            KEEP("square-exponent"),
            ln_near,
        ),
        ("rms_root_pow_half_float16_exponent", "rms", {"root": f16(0.5)}, EITHER, None),
        (
            "rms_root_pow_half_rank4_raises_output_rank",
            "rms",
            {"root": rank4(0.5), "out_shape": OUT4},
            EITHER,
            None,
        ),
        (
            "rms_recip_pow_minus1_rank4_raises_output_rank",
            "rms",
            {"inv": rank4(-1.0), "out_shape": OUT4},
            EITHER,
            None,
        ),
        (
            "rms_square_exp_rank4_raises_output_rank",
            "rms",
            {"sq": rank4(2.0), "out_shape": OUT4},
            EITHER,
            None,
        ),
        (
            "rms_root_pow_0_5001",
            "rms",
            {"root": np.float32(0.5001)},
            KEEP("root-exponent"),
            rms_near,
        ),
        ("rms_recip_pow_minus1_int64", "rms", {"inv": np.int64(-1)}, EITHER, None),
        (
            "rms_recip_pow_minus_1_0001",
            "rms",
            {"inv": np.float32(-1.0001)},
            KEEP("reciprocal-exponent"),
            rms_near,
        ),
        (
            "rms_square_exp_minus_2",
            "rms",
            {"sq": np.float32(-2.0)},
            KEEP("square-exponent"),
            rms_near,
        ),
        (
            "rms_square_exp_2_0000002_f32",
            "rms",
            {"sq": np.float32(2.0000002)},
            KEEP("square-exponent"),
            rms_near,
        ),
        ("rms_rsqrt_pow_minus1_no_root", "rms", {"inv": ("rsqrt", -1.0)}, KEEP(), rms_near),
    ]
    for name, kind, kw, expect, evidence in items:
        kw = dict(kw)
        out_shape = kw.pop("out_shape", None)
        if kind == "rms":
            kw.setdefault("eps", 1e-6)
        label = name if name.startswith("rms_") else f"ln_{name}"
        cls = "hazard" if evidence is not None else "exact-odd" if expect is EITHER else "5"
        case(
            f"a2_{label}",
            cls,
            f"{kind} with {', '.join(f'{k}={_show(v)}' for k, v in kw.items())}",
            simple(kind, out_shape=out_shape, **kw),
            expect,
            evidence=evidence,
        )
    for kind in ("ln", "rms"):
        for which, value, fed in (("root", 0.5, 0.25), ("inv", -1.0, -2.0)):
            case(
                f"a2_{kind}_{which}_exponent_overridable",
                "1",
                f"{kind} whose {'root' if which == 'root' else 'reciprocal'} Pow exponent is an "
                f"overridable initializer (fed {fed})",
                _overridable_exponent(kind, which, value),
                KEEP(),
                overrides={"e": np.float32(fed)},
            )
    case(
        "a2_ln_float16_model_pow_roots",
        "exact-odd",
        "float16 layer norm with Pow(., 0.5) root and Pow(., -1) reciprocal (float16 exponents)",
        simple("ln", dtype=np.float16, root=f16(0.5), inv=f16(-1.0)),
        EITHER,
    )
    case(
        "a2_ln_float64_model_pow_roots_exact_eps",
        "exact-odd",
        "float64 layer norm, eps 2^-17 (a float32), Pow(., 0.5) and Pow(., -1)",
        simple("ln", dtype=np.float64, root=f64(0.5), inv=f64(-1.0), eps=2.0**-17),
        EITHER,
    )
    case(
        "a2_ln_rsqrt_as_pow_of_pow",
        "exact-odd",
        "layer norm with Mul(c, Pow(Pow(v + eps, -1), 0.5)) (rsqrt spelled twice)",
        _rsqrt_pow_of_pow,
        EITHER,
    )
    case(
        "a2_keras_root_pow_rank4_raises_output_rank",
        "exact-odd",
        "tf2onnx layer norm whose r = Reciprocal(Pow(v + eps, [[[[0.5]]]])) (output rank 4)",
        _keras(root=rank4(0.5), out_shape=OUT4),
        EITHER,
    )
    case(
        "a2_keras_recip_pow_minus_1_0001",
        "hazard",
        "tf2onnx layer norm whose r = Pow(sqrt(v + eps), -1.0001)",
        _keras(recip=np.float32(-1.0001)),
        KEEP(),
        evidence=nearest(
            "ln", eps=1e-3, gamma=GAMMA, beta=np.linspace(-1, 1, 16, dtype=np.float32)
        ),
    )
    case(
        "a2_keras_root_pow_0_5001",
        "hazard",
        "tf2onnx layer norm whose r = Reciprocal(Pow(v + eps, 0.5001))",
        _keras(root=np.float32(0.5001)),
        KEEP(),
        evidence=nearest(
            "ln", eps=1e-3, gamma=GAMMA, beta=np.linspace(-1, 1, 16, dtype=np.float32)
        ),
    )
    case(
        "a2_keras_pow_roots_exact",
        "exact-odd",
        "tf2onnx layer norm whose r = Pow(Pow(v + eps, 0.5), -1) (float16 exponents)",
        _keras(root=f16(0.5), recip=f16(-1.0)),
        EITHER,
    )


def _show(value) -> str:
    if isinstance(value, np.ndarray):
        flat = np.unique(value)
        return f"{value.dtype}{list(value.shape)} of {flat.tolist()}"
    if isinstance(value, np.generic):
        return f"{value.dtype.name} {value}"
    return repr(value)


def _overridable_exponent(kind: str, which: str, value: float):
    def build():
        g = G()
        g.init(value, "e")
        eps = 1e-5 if kind == "ln" else 1e-6
        norm(g, "x", kind=kind, eps=eps, gamma=GAMMA, **{which: "e"})
        return model(g, overridable=["e"])

    return build


def _rsqrt_pow_of_pow() -> onnx.ModelProto:
    g = G()
    m = g.reduce("ReduceMean", "x", (-1,))
    c = g.op("Sub", ["x", m])
    v = g.reduce("ReduceMean", g.op("Mul", [c, c]), (-1,))
    inv_var = g.op("Pow", [g.op("Add", [v, g.init(1e-5)]), g.init(-1.0)])
    r = g.op("Pow", [inv_var, g.init(0.5)])
    g.op("Mul", [g.op("Mul", [c, r]), g.init(GAMMA)], "y")
    return model(g)


def _keras(root="sqrt", recip="recip", out_shape=None):
    """tf2onnx: y = x*(g*r) + (b - m*(g*r)), r = 1/sqrt(v + eps) spelled by root/recip."""

    def build():
        g = G()
        m = g.reduce("ReduceMean", "x", (-1,))
        c = g.op("Sub", ["x", m])
        v = g.reduce("ReduceMean", g.op("Mul", [c, c]), (-1,))
        shifted = g.op("Add", [v, g.init(1e-3)])
        std = (
            g.op("Sqrt", [shifted])
            if isinstance(root, str) and root == "sqrt"
            else g.op("Pow", [shifted, _c(g, root, "root")])
        )
        r = (
            g.op("Reciprocal", [std])
            if isinstance(recip, str)
            else g.op("Pow", [std, _c(g, recip, "inv")])
        )
        gr = g.op("Mul", [r, g.init(GAMMA, "kg")])
        beta = g.init(np.linspace(-1, 1, 16), "kb")
        g.op("Add", [g.op("Mul", ["x", gr]), g.op("Sub", [beta, g.op("Mul", [m, gr])])], "y")
        return model(g, outputs=[("y", F, out_shape or SHAPE)])

    return build


# ---------------------------------------------------------------- mean - x


def _mean_minus_x(variant: str):
    """Layer norm with numerator mean - x (normfuse emits gamma' = -gamma), per `variant`."""

    def build():
        g = G()
        inputs = [("x", F, SHAPE)]
        overridable = []
        kw: dict = {"numerator": "m-x"}
        if variant == "gamma_graph_input":
            inputs.append(("gam", F, (16,)))
            kw.update(gamma="gam", beta=BETA)
        elif variant == "gamma_overridable":
            g.init(GAMMA, "gam")
            overridable.append("gam")
            kw.update(gamma="gam", beta=BETA)
        elif variant == "gamma_identity_of_overridable":
            g.init(GAMMA, "gam")
            overridable.append("gam")
            kw.update(gamma=g.op("Identity", ["gam"]), beta=BETA)
        elif variant == "gamma_zero_nan_inf":
            special = GAMMA.copy()
            special[:4] = [0.0, -0.0, np.nan, 1e30]
            kw.update(gamma=special, beta=BETA)
        elif variant == "beta_only":
            kw.update(beta=BETA)
        elif variant == "gemma_one_plus_w":
            kw.update(gamma=g.op("Add", [g.init(np.linspace(-0.3, 0.3, 16)), g.init(1.0)]))
        elif variant == "gamma_scalar":
            kw.update(gamma=np.array([1.5], np.float32), beta=np.float32(0.25))
        elif variant == "gamma_per_token":
            kw.update(gamma=np.linspace(0.5, 1.5, 80, dtype=np.float32).reshape(5, 16))
        elif variant == "gamma_cast_from_float64":
            kw.update(
                gamma=g.op("Cast", [g.init(GAMMA.astype(np.float64), dtype=np.float64)], to=F)
            )
        elif variant == "gamma_is_graph_output":
            g.init(GAMMA, "gam")
            kw.update(gamma="gam", beta=BETA)
        elif variant == "two_separate_means":
            kw.update(gamma=GAMMA, beta=BETA)
            m1 = g.reduce("ReduceMean", "x", (-1,))
            m2 = g.reduce("ReduceMean", "x", (-1,))
            c = g.op("Sub", ["x", m1])
            v = g.reduce("ReduceMean", g.op("Mul", [c, c]), (-1,))
            std = g.op("Sqrt", [g.op("Add", [v, g.init(1e-5)])])
            normed = g.op("Div", [g.op("Sub", [m2, "x"]), std])
            g.op("Add", [g.op("Mul", [normed, g.init(GAMMA)]), g.init(BETA)], "y")
            return model(g)
        elif variant in ("numerator_mean_of_two_axes", "numerator_mean_of_other_tensor"):
            if variant == "numerator_mean_of_two_axes":
                other = g.reduce("ReduceMean", "x", (-2, -1))
            else:
                inputs.append(("x2", F, SHAPE))
                other = g.reduce("ReduceMean", "x2", (-1,))
            m = g.reduce("ReduceMean", "x", (-1,))
            c = g.op("Sub", ["x", m])
            v = g.reduce("ReduceMean", g.op("Mul", [c, c]), (-1,))
            std = g.op("Sqrt", [g.op("Add", [v, g.init(1e-5)])])
            normed = g.op("Div", [g.op("Sub", [other, "x"]), std])
            g.op("Mul", [normed, g.init(GAMMA, "gamma_0")], "y")
            return model(g, inputs)
        elif variant == "gamma_before_divide":
            m = g.reduce("ReduceMean", "x", (-1,))
            c = g.op("Sub", ["x", m])
            v = g.reduce("ReduceMean", g.op("Mul", [c, c]), (-1,))
            std = g.op("Sqrt", [g.op("Add", [v, g.init(1e-5)])])
            scaled = g.op("Mul", [g.op("Sub", [m, "x"]), g.init(GAMMA)])
            g.op("Add", [g.op("Div", [scaled, std]), g.init(BETA)], "y")
            return model(g)
        elif variant == "float16":
            g = G(dtype=np.float16)
            norm(
                g,
                "x",
                numerator="m-x",
                gamma=GAMMA.astype(np.float16),
                beta=BETA.astype(np.float16),
            )
            return model(g, [("x", F16, SHAPE)], [("y", F16, SHAPE)])
        elif variant == "gamma_rank4":
            kw.update(gamma=GAMMA.reshape(1, 1, 1, 16))
            norm(g, "x", **kw)
            return model(g, outputs=[("y", F, OUT4)])
        else:
            raise ValueError(variant)
        norm(g, "x", **kw)
        outputs = [("y", F, SHAPE)]
        if variant == "gamma_is_graph_output":
            outputs.append(("gam", F, (16,)))
        return model(g, inputs, outputs, overridable=overridable)

    return build


def _mean_minus_x_cases(case, KEEP, EITHER, FUSE, nearest) -> None:
    overrides = {"gam": (GAMMA[::-1] * -3).copy()}
    plain = {
        "gamma_graph_input": ({}, EITHER),
        "gamma_overridable": (overrides, EITHER),
        "gamma_identity_of_overridable": (overrides, EITHER),
        "gamma_zero_nan_inf": ({}, EITHER),
        "beta_only": ({}, EITHER),
        "gemma_one_plus_w": ({}, EITHER),
        "gamma_scalar": ({}, EITHER),
        "gamma_cast_from_float64": ({}, EITHER),
        "gamma_is_graph_output": ({}, EITHER),
        "two_separate_means": ({}, EITHER),
        "gamma_before_divide": ({}, EITHER),
        "float16": ({}, EITHER),
        "gamma_rank4": ({}, EITHER),
        # [5, 16] on x [.., 5, 16]: the scale stays a Mul after the fused node (Cohere's QK-norm)
        "gamma_per_token": ({}, EITHER),
    }
    for variant, (fed, expect) in plain.items():
        case(
            f"a2_ln_mean_minus_x_{variant}",
            "1" if fed else "exact-odd",
            f"layer norm with numerator mean - x: {variant.replace('_', ' ')}",
            _mean_minus_x(variant),
            expect,
            overrides=fed,
        )
    case(
        "a2_ln_mean_minus_x_numerator_mean_of_two_axes",
        "hazard",
        "layer-norm look-alike with numerator mean - x: numerator mean of two axes",
        _mean_minus_x("numerator_mean_of_two_axes"),
        KEEP(),
        evidence=nearest("ln", gamma=None, beta=None),
    )
    case(
        "a2_ln_mean_minus_x_numerator_mean_of_other_tensor",
        "hazard",
        "numerator mean(x2) - x, statistics of x",
        _mean_minus_x("numerator_mean_of_other_tensor"),
        KEEP(),
        evidence=nearest("ln", gamma=GAMMA, beta=None),
    )
    case(
        "a2_rms_of_x_minus_mean_of_two_axes",
        "hazard",
        "RMS norm over the last axis of x - mean(x, axes=(-2,-1)): not a layer norm",
        _rms_of_centered_other_axes,
        KEEP(),
        evidence=nearest("ln", eps=1e-6, gamma=GAMMA, beta=None),
    )


def _rms_of_centered_other_axes() -> onnx.ModelProto:
    g = G()
    m = g.reduce("ReduceMean", "x", (-2, -1))
    c = g.op("Sub", ["x", m])
    norm(g, c, kind="rms", eps=1e-6, gamma=GAMMA)
    return model(g)


# ---------------------------------------------------------------- keepdims=0 + Unsqueeze

SQ = (2, 4, 4)  # square trailing dims: a wrongly placed mean still broadcasts


def _unsqueeze(g: G, t: str, axes) -> str:
    if g.opset >= 13:
        if isinstance(axes, str):
            return g.op("Unsqueeze", [t, axes])
        return g.op("Unsqueeze", [t, g.init(list(axes), dtype=np.int64)])
    return g.op("Unsqueeze", [t], axes=list(axes))


def _keepdims0(variant: str, opset: int = 17):
    """Layer norm / RMS norm whose reductions drop their axes (keepdims=0) and are unsqueezed
    back, per `variant`."""

    def build():
        g = G(opset=opset)
        shape, axes, mean_back, var_back = SHAPE, (-1,), (2,), (2,)
        inputs = [("x", F, shape)]
        outputs = [("y", F, shape)]
        kind = "ln"
        fixed_axes = None
        if variant == "mean_wrong_axis":
            shape, mean_back = SQ, (1,)
        elif variant == "var_wrong_axis":
            shape, var_back = SQ, (1,)
        elif variant == "two_axes_negative":
            axes, mean_back, var_back = (-2, -1), (-2, -1), (-2, -1)
        elif variant == "two_axes_unsorted":
            axes, mean_back, var_back = (-1, -2), (-1, 1), (2, -2)
        elif variant == "two_axes_wrong":
            shape, axes, mean_back, var_back = (4, 4, 4), (-2, -1), (0, 1), (-2, -1)
        elif variant == "rms_wrong_axis":
            shape, var_back, kind = SQ, (1,), "rms"
        elif variant == "axes_graph_input":
            shape = SQ
            inputs.append(("ua", I64, (1,)))
            fixed_axes = "ua"
        elif variant == "mean_exposed_rank2":
            outputs.append(("mean_out", F, (2, 5)))
        elif variant == "rank1":
            shape, axes, mean_back, var_back = (16,), (0,), (0,), (0,)
        inputs[0] = ("x", F, shape)
        outputs[0] = ("y", F, shape)
        x = "x"
        if kind == "ln":
            m0 = g.reduce("ReduceMean", x, axes, keepdims=0)
            if variant == "mean_exposed_rank2":
                g.nodes[-1].output[0] = "mean_out"
                m0 = "mean_out"
            m = _unsqueeze(g, m0, fixed_axes or mean_back)
            base = g.op("Sub", [x, m])
        else:
            base = x
        v0 = g.reduce("ReduceMean", g.op("Mul", [base, base]), axes, keepdims=0)
        v = _unsqueeze(g, v0, fixed_axes or var_back)
        std = g.op("Sqrt", [g.op("Add", [v, g.init(1e-5)])])
        normed = g.op("Div", [base, std])
        dims = shape[-len(axes) :]
        g.op(
            "Mul",
            [normed, g.init(np.linspace(0.5, 1.5, int(np.prod(dims))).reshape(dims), "gamma_0")],
            "y",
        )
        return model(g, inputs, outputs)

    return build


def _keepdims_cases(case, KEEP, EITHER, FUSE, nearest) -> None:
    for variant, expect, cls in (
        ("two_axes_negative", EITHER, "exact-odd"),
        ("two_axes_unsorted", EITHER, "exact-odd"),
        ("mean_exposed_rank2", EITHER, "8"),
        ("rank1", EITHER, "exact-odd"),
    ):
        case(
            f"a2_ln_keepdims0_{variant}",
            cls,
            f"keepdims=0 statistics unsqueezed back: {variant.replace('_', ' ')}",
            _keepdims0(variant),
            expect,
        )
    case(
        "a2_ln_keepdims0_opset11_attribute_axes",
        "exact-odd",
        "opset 11 keepdims=0 statistics, Unsqueeze(axes=[2]) attributes",
        _keepdims0("plain", opset=11),
        EITHER,
    )
    for variant in ("mean_wrong_axis", "var_wrong_axis", "two_axes_wrong", "rms_wrong_axis"):
        kind = "rms" if variant.startswith("rms") else "ln"
        two = variant == "two_axes_wrong"
        case(
            f"a2_ln_keepdims0_{variant}" if kind == "ln" else "a2_rms_keepdims0_wrong_axis",
            "hazard",
            f"keepdims=0 statistics unsqueezed on other axes than reduced: {variant}",
            _keepdims0(variant),
            KEEP("unsqueeze-axes"),
            evidence=nearest(kind, axis=-2 if two else -1, beta=None),
        )
    case(
        "a2_ln_keepdims0_unsqueeze_axes_graph_input",
        "3",
        "keepdims=0 statistics unsqueezed with axes fed at run time ([2] or [1])",
        _keepdims0("axes_graph_input"),
        KEEP(),
        fixed=({"ua": np.array([2], np.int64)}, {"ua": np.array([1], np.int64)}),
    )


# ---------------------------------------------------------------- ReduceSum * (1/d), d from Shape


def _divisor(variant: str, kind: str = "ln"):
    """A norm whose mean of squares is ReduceSum(...) divided by / multiplied with a divisor
    spelled per `variant`; no affine unless stated."""

    def build():
        g = G(opset=17)
        shape = SHAPE
        axes = (-1,)
        inputs = [("x", F, shape)]
        x = "x"
        if variant in ("times_nextafter_0_1", "times_nearest_0_1"):
            shape = (2, 5, 10)
            inputs = [("x", F, shape)]
        if variant.startswith("shape_of_broadcast"):
            inputs = [("a", F, (2, 5, 1)), ("b", F, (16,))]
            x = g.op("Add", ["a", "b"])
        if variant == "reduceprod_shape_start1" or variant == "reduceprod_shape_all":
            axes = (-2, -1)
        if variant.startswith("symbolic"):
            shape = (2, 5, "d")
            inputs = [("x", F, shape)]
        if variant == "shape_of_other_symbolic":
            inputs.append(("o", F, ("n",)))

        def shape_dim(t, **attrs):
            return g.op(
                "Cast",
                [g.op("Gather", [g.op("Shape", [t], **attrs), g.init(-1, dtype=np.int64)], axis=0)],
                to=F,
            )

        if kind == "ln":
            m = g.reduce("ReduceMean", x, axes)
            base = g.op("Sub", [x, m])
        else:
            base = x
        if kind == "rms_sumsquare":
            total = g.reduce("ReduceSumSquare", base, axes, axes_input=False)
        else:
            total = g.reduce("ReduceSum", g.op("Mul", [base, base]), axes)
        if variant == "times_1_over_15":
            v = g.op("Mul", [total, g.init(np.float32(1 / 15))])
        elif variant == "times_1_over_17":
            v = g.op("Mul", [total, g.init(np.float32(1 / 17))])
        elif variant == "times_nearest_0_1":
            v = g.op("Mul", [total, g.init(np.float32(0.1))])
        elif variant == "times_nextafter_0_1":
            v = g.op("Mul", [total, g.init(np.nextafter(np.float32(0.1), np.float32(1)))])
        elif variant == "shape_of_other_symbolic":
            v = g.op("Div", [total, shape_dim("o")])
        elif variant == "shape_slice_wrong":
            d = g.op("Cast", [g.op("Shape", [x], start=1, end=2)], to=F)
            v = g.op("Div", [total, d])
        elif variant == "shape_start_minus1":
            d = g.op("Cast", [g.op("Shape", [x], start=-1)], to=F)
            v = g.op("Div", [total, d])
        elif variant == "shape_of_broadcast_source":
            v = g.op("Div", [total, shape_dim("a")])
        elif variant == "shape_of_broadcast_partner":
            v = g.op("Div", [total, shape_dim("b")])
        elif variant == "reduceprod_shape_start1":
            d = g.op("Cast", [g.op("ReduceProd", [g.op("Shape", [x], start=1)], keepdims=1)], to=F)
            v = g.op("Div", [total, d])
        elif variant == "reduceprod_shape_all":
            d = g.op("Cast", [g.op("ReduceProd", [g.op("Shape", [x])], keepdims=1)], to=F)
            v = g.op("Div", [total, d])
        elif variant == "times_one_over_shape":
            v = g.op("Mul", [total, g.op("Div", [g.init(1.0), shape_dim(x)])])
        elif variant == "symbolic_shape_d":
            v = g.op("Div", [total, shape_dim(x)])
        elif variant == "symbolic_constant_16" or variant == "over_16":
            v = g.op("Div", [total, g.init(16.0)])
        elif variant == "over_15":
            v = g.op("Div", [total, g.init(15.0)])
        elif variant == "eps_in_sum_over_15":
            v = g.op("Div", [g.op("Add", [total, g.init(1e-6)]), g.init(15.0)])
        elif variant == "eps_in_sum_negative":
            v = g.op("Div", [g.op("Add", [total, g.init(-1e-3)]), g.init(16.0)])
        elif variant == "eps_in_sum_shape_d":
            v = g.op("Div", [g.op("Add", [total, g.init(1e-6)]), shape_dim(x)])
        elif variant == "eps_in_sum_times_r":
            v = g.op("Mul", [g.op("Add", [total, g.init(1e-6)]), g.init(np.float32(1 / 16))])
        elif variant == "two_axes_over_16":
            v = g.op("Div", [total, g.init(16.0)])
        else:
            raise ValueError(variant)
        eps_in_sum = variant.startswith("eps_in_sum")
        shifted = v if eps_in_sum else g.op("Add", [v, g.init(1e-5 if kind == "ln" else 1e-6)])
        g.op("Div", [base, g.op("Sqrt", [shifted])], "y")
        return model(g, inputs, [("y", F, shape)])

    return build


def _rms_variant(variant: str):
    """RMS norms spelled with ReduceSumSquare / ReduceL2, per `variant`; gamma GAMMA."""

    def build():
        g = G(opset=17)
        inputs = [("x", F, SHAPE)]
        axes = [-1]
        x = "x"
        if variant == "l2_pow_2_0000002":
            l2 = g.op("ReduceL2", [x], axes=axes, keepdims=1)
            ms = g.op("Div", [g.op("Pow", [l2, g.init(np.float32(2.0000002))]), g.init(16.0)])
        elif variant == "l2_mul_self":
            l2 = g.op("ReduceL2", [x], axes=axes, keepdims=1)
            ms = g.op("Div", [g.op("Mul", [l2, l2]), g.init(16.0)])
        elif variant == "l2_not_squared":
            l2 = g.op("ReduceL2", [x], axes=axes, keepdims=1)
            ms = g.op("Div", [l2, g.init(16.0)])
        elif variant == "l2_keepdims0_unsqueeze":
            l2 = g.op("ReduceL2", [x], axes=axes, keepdims=0)
            ms = _unsqueeze(g, g.op("Div", [g.op("Pow", [l2, g.init(2.0)]), g.init(16.0)]), [2])
        elif variant == "sumsquare_keepdims0_unsqueeze":
            s = g.op("ReduceSumSquare", [x], axes=axes, keepdims=0)
            ms = _unsqueeze(g, g.op("Div", [s, g.init(16.0)]), [-1])
        elif variant == "sumsquare_two_axes_over_16":
            s = g.op("ReduceSumSquare", [x], axes=[-2, -1], keepdims=1)
            ms = g.op("Div", [s, g.init(16.0)])
        elif variant == "l2_of_other_tensor":
            inputs.append(("x2", F, SHAPE))
            l2 = g.op("ReduceL2", ["x2"], axes=axes, keepdims=1)
            ms = g.op("Div", [g.op("Pow", [l2, g.init(2.0)]), g.init(16.0)])
        elif variant == "sumsquare_eps_in_sum_d_3":
            s = g.op("ReduceSumSquare", [x], axes=[-1], keepdims=1)
            ms = g.op("Div", [g.op("Add", [s, g.init(1e-6)]), g.init(16.0)])
        else:
            raise ValueError(variant)
        eps_in = variant == "sumsquare_eps_in_sum_d_3"
        shifted = ms if eps_in else g.op("Add", [ms, g.init(1e-6)])
        g.op("Mul", [g.op("Div", [x, g.op("Sqrt", [shifted])]), g.init(GAMMA, "gamma_0")], "y")
        return model(g, inputs)

    return build


def _rms_bias(variant: str):
    def build():
        g = G(opset=17)
        inputs = [("x", F, SHAPE)]
        out_shape = SHAPE
        r = norm(g, "x", kind="rms", eps=1e-6, gamma=GAMMA, out=None)
        if variant == "graph_input":
            inputs.append(("bias", F, (16,)))
            b = "bias"
        elif variant == "rank4":
            b = g.init(BETA.reshape(1, 1, 1, 16))
            out_shape = OUT4
        elif variant == "per_token":
            b = g.init(np.linspace(-1, 1, 80).reshape(5, 16))
        elif variant == "then_ln":
            r = g.op("Add", [r, g.init(BETA)])
            norm(g, r, gamma=GAMMA, beta=BETA)
            return model(g, inputs)
        else:
            raise ValueError(variant)
        g.op("Add", [r, b], "y")
        return model(g, inputs, [("y", F, out_shape)])

    return build


def _divisor_cases(case, KEEP, EITHER, FUSE, nearest) -> None:
    ln_plain = nearest("ln", gamma=None, beta=None)
    rms_plain = nearest("rms", eps=1e-6, gamma=None)
    items = [
        ("ln", "times_1_over_15", KEEP("unbiased-variance", "variance-divisor"), ln_plain),
        ("ln", "times_1_over_17", KEEP("variance-divisor"), ln_plain),
        ("ln", "times_nearest_0_1", EITHER, None),
        ("ln", "times_nextafter_0_1", KEEP("variance-divisor"), "strict"),
        ("ln", "shape_of_other_symbolic", KEEP(), ln_plain),
        ("ln", "shape_slice_wrong", KEEP("variance-divisor"), ln_plain),
        ("ln", "shape_start_minus1", EITHER, None),
        ("ln", "shape_of_broadcast_source", KEEP("variance-divisor"), "broadcast"),
        ("ln", "shape_of_broadcast_partner", EITHER, None),
        ("ln", "reduceprod_shape_start1", EITHER, None),
        (
            "ln",
            "reduceprod_shape_all",
            KEEP("variance-divisor"),
            nearest("ln", axis=-2, gamma=None, beta=None),
        ),
        ("ln", "times_one_over_shape", EITHER, None),
        ("ln", "symbolic_shape_d", EITHER, None),
        ("ln", "symbolic_constant_16", KEEP(), ln_plain),
        ("rms", "times_1_over_15", KEEP("variance-divisor", "unbiased-variance"), rms_plain),
        ("rms", "shape_of_other_symbolic", KEEP(), rms_plain),
        ("rms", "symbolic_constant_16", KEEP(), rms_plain),
        ("rms", "shape_of_broadcast_source", KEEP("variance-divisor"), "broadcast"),
        ("rms_sumsquare", "over_15", KEEP("variance-divisor", "unbiased-variance"), rms_plain),
        (
            "rms_sumsquare",
            "eps_in_sum_over_15",
            KEEP("variance-divisor", "unbiased-variance"),
            rms_plain,
        ),
        ("rms_sumsquare", "eps_in_sum_negative", KEEP("epsilon-not-positive"), rms_plain),
        ("rms_sumsquare", "eps_in_sum_shape_d", EITHER, None),
        ("rms_sumsquare", "eps_in_sum_times_r", EITHER, None),
        ("rms_sumsquare", "shape_slice_wrong", KEEP("variance-divisor"), rms_plain),
    ]
    for kind, variant, expect, evidence in items:
        if evidence == "broadcast":
            evidence = _broadcast_nearest(kind)
        if evidence == "strict":
            cls, evidence = "strict", None
        else:
            cls = "hazard" if evidence is not None else "exact-odd"
        case(
            f"a2_{kind}_divisor_{variant}",
            cls,
            f"{kind}: mean of squares as a sum with divisor {variant.replace('_', ' ')}",
            _divisor(variant, kind),
            expect,
            evidence=evidence,
        )
    for variant in (
        "l2_mul_self",
        "l2_keepdims0_unsqueeze",
        "sumsquare_keepdims0_unsqueeze",
        "sumsquare_eps_in_sum_d_3",
    ):
        case(
            f"a2_rms_{variant}",
            "exact-odd",
            f"RMS norm spelled {variant.replace('_', ' ')}",
            _rms_variant(variant),
            EITHER,
        )
    for variant, reasons in (
        ("l2_not_squared", ()),
        ("sumsquare_two_axes_over_16", ("variance-divisor",)),
        ("l2_of_other_tensor", ()),
    ):
        case(
            f"a2_rms_{variant}",
            "hazard",
            f"RMS look-alike spelled {variant.replace('_', ' ')}",
            _rms_variant(variant),
            KEEP(*reasons),
            evidence=nearest(
                "rms",
                eps=1e-6,
                axis=-2 if "two_axes" in variant else -1,
                gamma=np.tile(GAMMA, (5, 1)) if "two_axes" in variant else GAMMA,
            ),
        )
    case(
        "a2_rms_l2_pow_2_0000002",
        "strict",
        "RMS norm with Pow(ReduceL2, 2.0000002) / d: the square is not exactly 2 (no NaN: l2 >= 0)",
        _rms_variant("l2_pow_2_0000002"),
        KEEP("square-exponent", "not-rms-norm"),
    )
    for variant in ("graph_input", "rank4", "per_token", "then_ln"):
        case(
            f"a2_rms_then_bias_{variant}",
            "exact-odd",
            f"RMS norm followed by a bias: {variant.replace('_', ' ')}",
            _rms_bias(variant),
            EITHER,
        )


def _broadcast_nearest(kind: str):
    """The nearest fused op of x = a + b (a [2,5,1], b [16]): built on the same inputs."""

    def build(original: onnx.ModelProto) -> onnx.ModelProto:
        g = G()
        x = g.op("Add", ["a", "b"])
        if kind == "ln":
            g.op("LayerNormalization", [x, g.init(np.ones(16))], "y", axis=-1, epsilon=1e-5)
        else:
            g.nodes.append(
                helper.make_node(
                    "SimplifiedLayerNormalization",
                    [x, g.init(np.ones(16), "s1")],
                    ["y"],
                    axis=-1,
                    epsilon=1e-6,
                )
            )
        return model(g, [("a", F, (2, 5, 1)), ("b", F, (16,))])

    return build


# ---------------------------------------------------------------- statistics used elsewhere


def _stats_out(variant: str):
    """A layer norm one of whose statistics is also used outside it, per `variant`."""

    def build():
        dtype = {"f16": np.float16, "f64": np.float64}.get(variant.split("_")[0], np.float32)
        g = G(dtype=dtype)
        elem = ELEM[dtype]
        shape, axes = SHAPE, (-1,)
        if "two_axes" in variant:
            axes = (-2, -1)
        if "rank1" in variant:
            shape, axes = (16,), (0,)
        stat_shape = tuple(1 if i >= len(shape) - len(axes) else d for i, d in enumerate(shape))
        x = "x"
        inputs = [("x", elem, shape)]
        outputs = [("y", elem, shape)]
        eps = 2.0**-17 if dtype == np.float64 else 1e-5
        if "of_cast" in variant:
            inputs = [("x", F16, shape)]
            outputs = [("y", F16, shape)]
            x = g.op("Cast", ["x"], to=F)
        m = g.reduce("ReduceMean", x, axes)
        c = g.op("Sub", [x, m])
        v = g.reduce("ReduceMean", g.op("Mul", [c, c]), axes)
        shifted = g.op("Add", [v, g.init(eps)])
        std = g.op("Sqrt", [shifted])
        inv = g.op("Reciprocal", [std])
        if "pow_minus_half" in variant:
            inv = g.op("Pow", [shifted, g.init(-0.5)])
        normed = g.op("Div", [c, std]) if "divides" in variant else g.op("Mul", [c, inv])
        gamma = np.linspace(0.5, 1.5, int(np.prod(shape[len(shape) - len(axes) :]))).reshape(
            shape[len(shape) - len(axes) :]
        )
        out = g.op("Add", [g.op("Mul", [normed, g.init(gamma)]), g.init(gamma * 0.1)])
        if "of_cast" in variant:
            out = g.op("Cast", [out], to=F16)
        g.op("Identity", [out], "y")
        what = next(
            w for w in ("mean", "invstd", "std", "variance", "centered") if w in variant.split("_")
        )
        used = {"mean": m, "invstd": inv, "std": std, "variance": v, "centered": c}[what]
        used_elem = F if "of_cast" in variant else elem
        if "cast_f16" in variant:
            used = g.op("Cast", [used], to=F16)
            used_elem = F16
        if "squeezed" in variant:
            used = g.op("Squeeze", [used, g.init([-1], dtype=np.int64)])
            stat_shape = stat_shape[:-1]
        if "consumer" in variant:
            used = g.op("Mul", [used, g.init(3.0)])
        g.op("Identity", [used], "stat")
        outputs.append(("stat", used_elem, shape if what == "centered" else stat_shape))
        return model(g, inputs, outputs)

    return build


def _stats_cases(case, KEEP, EITHER, FUSE, nearest) -> None:
    for variant in (
        "mean_used_consumer",
        "invstd_used_cast_f16",
        "std_used",
        "variance_used",
        "centered_used",
        "f16_mean_used",
        "f16_invstd_used",
        "f64_mean_used",
        "f64_invstd_used",
        "mean_of_cast_used",
        "invstd_of_cast_used",
        "two_axes_mean_used",
        "two_axes_invstd_used",
        "pow_minus_half_invstd_used",
        "divides_invstd_used",
        "rank1_mean_used",
        "rank1_invstd_used",
        "mean_used_squeezed",
    ):
        case(
            f"a2_ln_stats_{variant}",
            "8",
            f"layer norm whose {variant.replace('_', ' ')} elsewhere (a graph output)",
            _stats_out(variant),
            EITHER,
        )


# ---------------------------------------------------------------- shared statistics


def _shared(variant: str):
    def build():
        g = G()
        inputs = [("x", F, SHAPE)]
        m = g.reduce("ReduceMean", "x", (-1,))
        c = g.op("Sub", ["x", m])
        outs = []
        if variant == "centered_two_eps":
            for eps, gam in ((1e-5, GAMMA), (1e-2, GAMMA[::-1].copy())):
                outs.append(
                    norm(g, "x", mean=m, centered=c, eps=eps, gamma=gam, beta=BETA, out=None)
                )
        elif variant == "centered_and_variance_two_eps":
            v = g.reduce("ReduceMean", g.op("Mul", [c, c]), (-1,))
            for eps, gam in ((1e-5, GAMMA), (1e-1, GAMMA[::-1].copy())):
                outs.append(
                    norm(g, "x", mean=m, centered=c, variance=v, eps=eps, gamma=gam, out=None)
                )
        elif variant == "std_two_gammas":
            v = g.reduce("ReduceMean", g.op("Mul", [c, c]), (-1,))
            std = g.op("Sqrt", [g.op("Add", [v, g.init(1e-5)])])
            normed = g.op("Div", [c, std])
            outs.append(g.op("Mul", [normed, g.init(GAMMA)]))
            outs.append(
                g.op("Add", [g.op("Mul", [normed, g.init(GAMMA[::-1].copy())]), g.init(BETA)])
            )
        elif variant == "mean_centres_other_tensor":
            inputs.append(("z", F, SHAPE))
            outs.append(norm(g, "x", mean=m, centered=c, gamma=GAMMA, out=None))
            cz = g.op("Sub", ["z", m])
            vz = g.reduce("ReduceMean", g.op("Mul", [cz, cz]), (-1,))
            outs.append(g.op("Div", [cz, g.op("Sqrt", [g.op("Add", [vz, g.init(1e-5)])])]))
        elif variant == "ln_and_rms_of_centered":
            outs.append(norm(g, "x", mean=m, centered=c, gamma=GAMMA, out=None))
            outs.append(norm(g, c, kind="rms", eps=1e-3, gamma=GAMMA[::-1].copy(), out=None))
        elif variant == "mean_two_axes_norms":
            outs.append(norm(g, "x", mean=m, centered=c, gamma=GAMMA, out=None))
            v2 = g.reduce("ReduceMean", g.op("Mul", [c, c]), (-2, -1))
            outs.append(g.op("Div", [c, g.op("Sqrt", [g.op("Add", [v2, g.init(1e-5)])])]))
        elif variant == "centered_twice_mean_once_minus":
            outs.append(norm(g, "x", mean=m, centered=c, gamma=GAMMA, out=None))
            outs.append(
                norm(g, "x", mean=m, centered=c, numerator="m-x", gamma=GAMMA, beta=BETA, out=None)
            )
        elif variant == "keepdims0_mean":
            m0 = g.reduce("ReduceMean", "x", (-1,), keepdims=0)
            for eps in (1e-5, 1e-2):
                mu = _unsqueeze(g, m0, [2])
                outs.append(norm(g, "x", mean=mu, eps=eps, gamma=GAMMA, out=None))
        else:
            raise ValueError(variant)
        g.op("Add", outs, "y") if len(outs) == 2 else None
        return model(g, inputs)

    return build


def _shared_cases(case, KEEP, EITHER, FUSE, nearest) -> None:
    for variant in (
        "centered_two_eps",
        "centered_and_variance_two_eps",
        "std_two_gammas",
        "mean_centres_other_tensor",
        "ln_and_rms_of_centered",
        "mean_two_axes_norms",
        "centered_twice_mean_once_minus",
        "keepdims0_mean",
    ):
        case(
            f"a2_shared_{variant}",
            "exact-odd",
            f"two norms sharing statistics: {variant.replace('_', ' ')} (outputs summed)",
            _shared(variant),
            EITHER,
        )


# ---------------------------------------------------------------- axes


def _axes(variant: str):
    def build():
        opset = 18
        g = G(opset=opset)
        shape = SHAPE
        inputs = [("x", F, shape)]
        gamma = GAMMA
        overridable = []
        if variant.startswith("range"):
            rank = g.op("Size", [g.op("Shape", ["x"])])
            start, step = {
                "range_from_minus1": (-1, 1),
                "range_from_0": (0, 1),
                "range_step2": (0, 2),
                "range_from_1": (1, 1),
                "range_overridable_start": ("rs", 1),
            }.get(variant, (2, 1))
            if variant == "range_overridable_start":
                g.init(2, "rs", np.int64)
                overridable.append("rs")
                start_name = "rs"
            else:
                start_name = g.init(start, dtype=np.int64)
            if variant == "range_of_other_rank2":
                inputs.append(("o", F, (3, 3)))
                rank = g.op("Size", [g.op("Shape", ["o"])])
                start_name = g.init(1, dtype=np.int64)
            axes = g.op("Range", [start_name, rank, g.init(step, dtype=np.int64)])
            if variant in ("range_from_0", "range_from_minus1"):
                gamma = None
            if variant == "range_from_1":
                gamma = np.linspace(0.5, 1.5, 80, dtype=np.float32).reshape(5, 16)
        elif variant == "graph_input":
            inputs.append(("ax", I64, (1,)))
            axes = "ax"
        elif variant == "noop_empty_initializer":
            axes = g.init(np.zeros(0, np.int64), dtype=np.int64)
        elif variant == "duplicate":
            axes = g.init([-1, 2], dtype=np.int64)
        elif variant == "axes_0_2":
            axes = g.init([0, 2], dtype=np.int64)
            gamma = None
        elif variant == "axes_unsorted":
            axes = g.init([-1, -2], dtype=np.int64)
            gamma = np.linspace(0.5, 1.5, 80, dtype=np.float32).reshape(5, 16)
        elif variant == "batch_only":
            axes = g.init([-3], dtype=np.int64)
            gamma = None
        elif variant == "batch_and_seq":
            axes = g.init([0, 1], dtype=np.int64)
            gamma = None
        elif variant == "from_shape_arith":
            rank = g.op("Size", [g.op("Shape", ["x"])])
            axes = g.op(
                "Unsqueeze",
                [g.op("Sub", [rank, g.init(1, dtype=np.int64)]), g.init([0], dtype=np.int64)],
            )
        elif variant == "noop_with_axes":
            axes = g.init([-1], dtype=np.int64)
        else:
            raise ValueError(variant)
        noop = 1 if variant.startswith("noop") else 0
        m = g.op("ReduceMean", ["x", axes], keepdims=1, noop_with_empty_axes=noop)
        c = g.op("Sub", ["x", m])
        v = g.op("ReduceMean", [g.op("Mul", [c, c]), axes], keepdims=1, noop_with_empty_axes=noop)
        normed = g.op("Div", [c, g.op("Sqrt", [g.op("Add", [v, g.init(1e-5)])])])
        if gamma is None:
            g.nodes[-1].output[0] = "y"
        else:
            g.op("Mul", [normed, g.init(gamma, "gamma_0")], "y")
        return model(g, inputs, overridable=overridable)

    return build


def _axes_var_noop() -> onnx.ModelProto:
    g = G(opset=18)
    m = g.reduce("ReduceMean", "x", (-1,))
    c = g.op("Sub", ["x", m])
    v = g.op(
        "ReduceMean",
        [g.op("Mul", [c, c]), g.init(np.zeros(0, np.int64), dtype=np.int64)],
        keepdims=1,
        noop_with_empty_axes=1,
    )
    g.op("Div", [c, g.op("Sqrt", [g.op("Add", [v, g.init(1e-5)])])], "y")
    return model(g)


def _rank_cases_model(variant: str):
    def build():
        g = G()
        if variant == "rank1_gamma_1":
            norm(g, "x", axes=(0,), gamma=np.array([1.5], np.float32), beta=np.float32(0.5))
            return model(g, [("x", F, (16,))], [("y", F, (16,))])
        if variant == "rank1_rms":
            norm(g, "x", kind="rms", axes=(-1,), eps=1e-6, gamma=GAMMA)
            return model(g, [("x", F, (16,))], [("y", F, (16,))])
        if variant == "all_axes_symbolic_first":
            norm(g, "x", axes=(0, 1))
            return model(g, [("x", F, ("n", 16))], [("y", F, ("n", 16))])
        if variant == "all_axes_gamma_full":
            gam = np.linspace(0.5, 1.5, 80, dtype=np.float32).reshape(5, 16)
            norm(g, "x", axes=(0, 1), gamma=gam, beta=gam * 0.1)
            return model(g, [("x", F, (5, 16))], [("y", F, (5, 16))])
        if variant == "all_axes_rms_rank2":
            norm(g, "x", kind="rms", axes=(0, 1), eps=1e-6, gamma=GAMMA)
            return model(g, [("x", F, (5, 16))], [("y", F, (5, 16))])
        if variant == "mean_attr_axis_minus1_var_axis_2":
            norm(g, "x", axes=(-1,), var_axes=(2,), gamma=GAMMA)
            return model(g)
        raise ValueError(variant)

    return build


def _axes_cases(case, KEEP, EITHER, FUSE, nearest) -> None:
    plain = nearest("ln", gamma=None, beta=None)
    for variant, expect, evidence in (
        ("range_from_minus1", EITHER, None),
        ("range_from_0", EITHER, None),
        ("range_from_1", EITHER, None),
        ("range_step2", KEEP("non-trailing-axes", "batch-axis"), plain),
        ("range_of_other_rank2", KEEP("non-trailing-axes", "batch-axis"), nearest("ln", beta=None)),
        ("noop_empty_initializer", KEEP(), nearest("ln", beta=None)),
        ("duplicate", EITHER, None),
        ("axes_0_2", KEEP("non-trailing-axes", "batch-axis"), plain),
        ("axes_unsorted", EITHER, None),
        ("batch_only", KEEP("batch-axis"), plain),
        ("batch_and_seq", KEEP("batch-axis", "non-trailing-axes"), plain),
        ("from_shape_arith", EITHER, None),
        ("noop_with_axes", EITHER, None),
    ):
        case(
            f"a2_ln_axes_{variant}",
            "hazard" if evidence is not None else "exact-odd",
            f"opset-18 layer norm with axes {variant.replace('_', ' ')}",
            _axes(variant),
            expect,
            evidence=evidence,
        )
    case(
        "a2_ln_axes_graph_input",
        "3",
        "opset-18 layer norm whose axes are a graph input (fed [-1] or [1])",
        _axes("graph_input"),
        KEEP(),
        fixed=({"ax": np.array([-1], np.int64)}, {"ax": np.array([1], np.int64)}),
    )
    case(
        "a2_ln_axes_range_overridable_start",
        "1",
        "axes Range(start, rank) with start an overridable initializer (2; fed 1)",
        _axes("range_overridable_start"),
        KEEP(),
        overrides={"rs": np.array(1, np.int64)},
    )
    case(
        "a2_ln_axes_variance_noop_empty",
        "hazard",
        "variance ReduceMean with empty axes and noop_with_empty_axes=1 (the square itself)",
        _axes_var_noop,
        KEEP(),
        evidence=plain,
    )
    for variant in (
        "rank1_gamma_1",
        "rank1_rms",
        "all_axes_symbolic_first",
        "all_axes_gamma_full",
        "all_axes_rms_rank2",
        "mean_attr_axis_minus1_var_axis_2",
    ):
        case(
            f"a2_{variant}",
            "exact-odd",
            f"norm over {variant.replace('_', ' ')}",
            _rank_cases_model(variant),
            EITHER,
        )


# ---------------------------------------------------------------- QK-norm after dynamic Reshapes

QK_IN = (2, 5, 64)


def _qk(variant: str, stats: str = "mean", gamma=GAMMA, kind: str = "rms"):
    """x [2,5,64] reshaped to [2,5,heads,head_dim] by a target spelled per `variant`, normalised
    over head_dim (stats "mean": ReduceMean; "sum16": ReduceSum / 16; "shape_d": ReduceSum /
    Shape(r)[-1]), reshaped back to Shape(x)."""

    def build():
        g = G(opset=17)
        x_shape = QK_IN
        inputs = []
        overridable = []
        allowzero = 0
        if variant == "concat_shape":
            target = g.op(
                "Concat", [g.op("Shape", ["x"], end=2), g.init([4, 16], dtype=np.int64)], axis=0
            )
        elif variant == "graph_input":
            inputs.append(("t", I64, (4,)))
            target = "t"
        elif variant == "overridable":
            g.init([2, 5, 4, 16], "t", np.int64)
            overridable.append("t")
            target = "t"
        elif variant == "symbolic_minus1":
            x_shape = (2, 5, "n")
            target = g.init([0, 0, 4, -1], dtype=np.int64)
        elif variant == "data_head_count":
            inputs.append(("h", I64, (1,)))
            target = g.op(
                "Concat", [g.op("Shape", ["x"], end=2), "h", g.init([-1], dtype=np.int64)], axis=0
            )
        elif variant == "allowzero":
            target = g.op(
                "Concat", [g.op("Shape", ["x"], end=2), g.init([4, 16], dtype=np.int64)], axis=0
            )
            allowzero = 1
        elif variant == "minus1_middle":
            target = g.init([0, 0, -1, 16], dtype=np.int64)
        elif variant == "shape_of_other_input":
            inputs.append(("w", F, ("h",)))
            target = g.op(
                "Concat",
                [g.op("Shape", ["x"], end=2), g.op("Shape", ["w"]), g.init([-1], dtype=np.int64)],
                axis=0,
            )
        else:
            raise ValueError(variant)
        inputs.insert(0, ("x", F, x_shape))
        r = g.op("Reshape", ["x", target], allowzero=allowzero)
        if kind == "ln":
            m = g.reduce("ReduceMean", r, (-1,))
            base = g.op("Sub", [r, m])
        else:
            base = r
        square = g.op("Mul", [base, base])
        if stats == "mean":
            ms = g.reduce("ReduceMean", square, (-1,))
        else:
            total = g.reduce("ReduceSum", square, (-1,))
            if stats == "sum16":
                d = g.init(16.0)
            else:
                d = g.op("Cast", [g.op("Shape", [r], start=-1)], to=F)
            ms = g.op("Div", [total, d])
        normed = g.op("Div", [base, g.op("Sqrt", [g.op("Add", [ms, g.init(1e-6)])])])
        if gamma is not None:
            normed = g.op("Mul", [normed, g.init(gamma, "gamma_0")])
        g.op("Reshape", [normed, g.op("Shape", ["x"])], "y")
        return model(g, inputs, [("y", F, x_shape)], overridable=overridable)

    return build


def _qk_x(*widths) -> tuple:
    rng = np.random.default_rng(7)
    return tuple({"x": rng.normal(1.0, 2.0, (2, 5, w)).astype(np.float32)} for w in widths)


def _qk_cases(case, KEEP, EITHER, FUSE, nearest) -> None:
    heads = ({"t": np.array([2, 5, 4, 16], np.int64)}, {"t": np.array([2, 5, 8, 8], np.int64)})
    items = [
        ("concat_shape_gamma16", "concat_shape", "mean", GAMMA, "rms", EITHER, {}, ({},)),
        ("concat_shape_ln_shape_d", "concat_shape", "shape_d", None, "ln", EITHER, {}, ({},)),
        ("graph_input_target_sum16", "graph_input", "sum16", None, "rms", KEEP(), {}, heads),
        ("graph_input_target_mean", "graph_input", "mean", None, "rms", EITHER, {}, heads),
        ("graph_input_target_ln_mean", "graph_input", "mean", None, "ln", EITHER, {}, heads),
        (
            "overridable_target_sum16",
            "overridable",
            "sum16",
            None,
            "rms",
            KEEP(),
            {"t": np.array([2, 5, 8, 8], np.int64)},
            ({},),
        ),
        (
            "overridable_target_mean_no_gamma",
            "overridable",
            "mean",
            None,
            "rms",
            EITHER,
            {"t": np.array([2, 5, 8, 8], np.int64)},
            ({},),
        ),
        (
            "overridable_target_ln_no_affine",
            "overridable",
            "mean",
            None,
            "ln",
            EITHER,
            {"t": np.array([2, 5, 8, 8], np.int64)},
            ({},),
        ),
        (
            "overridable_target_gamma1",
            "overridable",
            "mean",
            np.array([1.5], np.float32),
            "rms",
            EITHER,
            {"t": np.array([2, 5, 8, 8], np.int64)},
            ({},),
        ),
        (
            "symbolic_hidden_sum16",
            "symbolic_minus1",
            "sum16",
            None,
            "rms",
            KEEP(),
            {},
            _qk_x(64, 32),
        ),
        ("symbolic_hidden_mean", "symbolic_minus1", "mean", None, "rms", EITHER, {}, _qk_x(64, 32)),
        ("symbolic_hidden_gamma16", "symbolic_minus1", "mean", GAMMA, "rms", EITHER, {}, _qk_x(64)),
        (
            "symbolic_hidden_shape_d",
            "symbolic_minus1",
            "shape_d",
            None,
            "rms",
            EITHER,
            {},
            _qk_x(64, 32),
        ),
        (
            "symbolic_hidden_ln_no_affine",
            "symbolic_minus1",
            "mean",
            None,
            "ln",
            EITHER,
            {},
            _qk_x(64, 32),
        ),
        (
            "symbolic_hidden_gamma1",
            "symbolic_minus1",
            "mean",
            np.array([1.5], np.float32),
            "rms",
            EITHER,
            {},
            _qk_x(64, 32),
        ),
        (
            "data_head_count_sum16",
            "data_head_count",
            "sum16",
            None,
            "rms",
            KEEP(),
            {},
            ({"h": np.array([4], np.int64)}, {"h": np.array([8], np.int64)}),
        ),
        (
            "data_head_count_mean",
            "data_head_count",
            "mean",
            None,
            "rms",
            EITHER,
            {},
            ({"h": np.array([4], np.int64)}, {"h": np.array([8], np.int64)}),
        ),
        ("allowzero_gamma16", "allowzero", "mean", GAMMA, "rms", EITHER, {}, ({},)),
        ("minus1_middle_gamma16", "minus1_middle", "mean", GAMMA, "rms", EITHER, {}, ({},)),
        ("minus1_middle_sum16", "minus1_middle", "sum16", GAMMA, "rms", EITHER, {}, ({},)),
        (
            "shape_of_other_input_sum16",
            "shape_of_other_input",
            "sum16",
            None,
            "rms",
            KEEP(),
            {},
            tuple(
                {**x, "w": np.zeros(h, np.float32)}
                for x, h in zip(_qk_x(64, 64), (4, 8), strict=True)
            ),
        ),
        (
            "shape_of_other_input_mean",
            "shape_of_other_input",
            "mean",
            None,
            "rms",
            EITHER,
            {},
            tuple(
                {**x, "w": np.zeros(h, np.float32)}
                for x, h in zip(_qk_x(64, 64), (4, 8), strict=True)
            ),
        ),
    ]
    for name, variant, stats, gamma, kind, expect, overrides, fixed in items:
        case(
            f"a2_qk_{name}",
            "1" if overrides else "3",
            f"QK-norm ({kind}) over head_dim after a Reshape, target {variant.replace('_', ' ')}"
            f" ({stats})",
            _qk(variant, stats, gamma, kind),
            expect,
            overrides=overrides,
            fixed=fixed,
        )


# ---------------------------------------------------------------- opset raises


def _raise(extra: str, where: str = "main", opset: int = 17, norm_kind: str = "rms"):
    """A norm at `opset` next to an operator whose meaning or schema changes at a later opset,
    placed in the main graph, an If branch (both branches), a Loop body or a local function."""

    def build():
        g = G(opset=opset)
        inputs = [("x", F, SHAPE)]
        outputs = [("y", F, SHAPE)]
        norm(
            g,
            "x",
            kind=norm_kind,
            eps=1e-6 if norm_kind == "rms" else 1e-5,
            gamma=GAMMA,
            beta=BETA if norm_kind == "ln" else None,
        )
        functions, opsets = [], {}
        nodes, in_name, in_info, out_info = _extra_op(extra, opset)
        inputs.append(in_info)
        if where == "main":
            g.nodes.extend(nodes)
            outputs.append(out_info)
        elif where == "if":
            out_name, elem, shape = out_info
            then_nodes, _, _, _ = _extra_op(extra, opset, suffix="_t")
            else_nodes, _, _, _ = _extra_op(extra, opset, suffix="_e")
            then_g = helper.make_graph(then_nodes, "then", [], [vi(out_name + "_t", elem, shape)])
            else_g = helper.make_graph(else_nodes, "else", [], [vi(out_name + "_e", elem, shape)])
            g.nodes.append(
                helper.make_node("If", ["c"], [out_name], then_branch=then_g, else_branch=else_g)
            )
            inputs.append(("c", BOOL, []))
            outputs.append(out_info)
        elif where == "loop":
            out_name, elem, shape = out_info
            body_nodes, _, _, _ = _extra_op(extra, opset, suffix="_b")
            body_nodes.append(helper.make_node("Identity", ["cond_in"], ["cond_out"]))
            loop_body = helper.make_graph(
                body_nodes,
                "loop",
                [vi("i", I64, []), vi("cond_in", BOOL, [])],
                [vi("cond_out", BOOL, []), vi(out_name + "_b", elem, shape)],
            )
            g.init(1, "trip", np.int64)
            g.nodes.append(helper.make_node("Loop", ["trip", ""], [out_name], body=loop_body))
            outputs.append((out_name, elem, (1, *shape)))
        elif where.startswith("function"):
            fn_opset = int(where.split("_")[1]) if "_" in where else opset
            fn_nodes, _, _, _ = _extra_op(extra, fn_opset, suffix="_f", fn_input="fi")
            out_name, elem, shape = out_info
            functions.append(
                helper.make_function(
                    "local",
                    "Extra",
                    ["fi"],
                    [out_name + "_f"],
                    fn_nodes,
                    [helper.make_opsetid("", fn_opset)],
                )
            )
            g.nodes.append(helper.make_node("Extra", [in_name], [out_name], domain="local"))
            opsets = {"local": 1}
            outputs.append(out_info)
        return model(g, inputs, outputs, functions=functions, opsets=opsets)

    return build


def _extra_op(extra: str, opset: int, suffix: str = "", fn_input: str | None = None):
    """(nodes, input name, input info, output info) of one operator `extra` reading a graph
    input; names carry `suffix` (bodies), the input is `fn_input` inside a function."""
    src = fn_input or f"in_{extra}"
    out = f"out_{extra}"
    o = out + suffix
    A = helper.make_node
    k = f"k_{extra}{suffix}"
    if extra == "split_no_split_input":
        nodes = [A("Split", [src], [o + "a", o + "b"], axis=-1), A("Sub", [o + "a", o + "b"], [o])]
        return nodes, src, (src, F, (2, 8)), (out, F, (2, 4))
    if extra == "split_attribute_opset11":
        nodes = [
            A("Split", [src], [o + "a", o + "b"], axis=-1, split=[3, 5]),
            A("Concat", [o + "b", o + "a"], [o], axis=-1),
        ]
        return nodes, src, (src, F, (2, 8)), (out, F, (2, 8))
    if extra == "squeeze_attribute_opset11":
        nodes = [A("Squeeze", [src], [o + "s"], axes=[0]), A("Unsqueeze", [o + "s"], [o], axes=[1])]
        return nodes, src, (src, F, (1, 8)), (out, F, (8, 1))
    if extra == "reducesum_attribute_opset11":
        nodes = [A("ReduceSum", [src], [o], axes=[-1], keepdims=1)]
        return nodes, src, (src, F, (2, 8)), (out, F, (2, 1))
    if extra == "gridsample_bilinear":
        grid = helper.make_tensor(k, F, [1, 2, 2, 2], np.linspace(-1, 1, 8).tolist())
        nodes = [
            A("Constant", [], [k], value=grid),
            A("GridSample", [src, k], [o], mode="bilinear", align_corners=1),
        ]
        return nodes, src, (src, F, (1, 1, 4, 4)), (out, F, (1, 1, 2, 2))
    if extra == "dft_axis_attribute":
        nodes = [A("DFT", [src], [o], axis=1)]
        return nodes, src, (src, F, (1, 8, 1)), (out, F, (1, 8, 2))
    if extra == "reducelogsumexp_attribute":
        nodes = [A("ReduceLogSumExp", [src], [o], axes=[-1], keepdims=1)]
        return nodes, src, (src, F, (2, 8)), (out, F, (2, 1))
    if extra == "reducemax_attribute":
        nodes = [A("ReduceMax", [src], [o], axes=[-1], keepdims=1)]
        return nodes, src, (src, F, (2, 8)), (out, F, (2, 1))
    if extra == "reducemean_attribute":
        nodes = [A("ReduceMean", [src], [o], axes=[-1], keepdims=1)]
        return nodes, src, (src, F, (2, 8)), (out, F, (2, 1))
    if extra == "resize_linear":
        scales = helper.make_tensor(k, F, [4], [1.0, 1.0, 2.0, 2.0])
        nodes = [
            A("Constant", [], [k], value=scales),
            A("Resize", [src, "", k], [o], mode="linear"),
        ]
        return nodes, src, (src, F, (1, 1, 2, 2)), (out, F, (1, 1, 4, 4))
    if extra == "pad_reflect":
        pads = helper.make_tensor(k, I64, [4], [0, 1, 0, 1])
        nodes = [A("Constant", [], [k], value=pads), A("Pad", [src, k], [o], mode="reflect")]
        return nodes, src, (src, F, (2, 8)), (out, F, (2, 10))
    if extra == "scatter_elements_add":
        idx = helper.make_tensor(k, I64, [2, 2], [0, 0, 1, 1])
        nodes = [
            A("Constant", [], [k], value=idx),
            A(
                "ScatterElements",
                [src, k, src + "_u" if False else k + "u"],
                [o],
                axis=1,
                reduction="add",
            ),
        ]
        upd = helper.make_tensor(k + "u", F, [2, 2], [1.0, 2.0, 3.0, 4.0])
        nodes.insert(0, A("Constant", [], [k + "u"], value=upd))
        return nodes, src, (src, F, (2, 8)), (out, F, (2, 8))
    if extra == "batchnorm_training":
        c = [
            helper.make_tensor(k + n, F, [3], v)
            for n, v in (
                ("s", [1.0, 2.0, 3.0]),
                ("b", [0.0, 0.5, 1.0]),
                ("m", [0.0] * 3),
                ("v", [1.0] * 3),
            )
        ]
        nodes = [A("Constant", [], [t.name], value=t) for t in c]
        nodes.append(
            A(
                "BatchNormalization",
                [src, *(t.name for t in c)],
                [o, o + "rm", o + "rv"],
                training_mode=1,
            )
        )
        return nodes, src, (src, F, (2, 3, 4)), (out, F, (2, 3, 4))
    if extra == "groupnorm18":
        c = [
            helper.make_tensor(k + n, F, [2], v) for n, v in (("s", [1.0, 2.0]), ("b", [0.0, 0.5]))
        ]
        nodes = [A("Constant", [], [t.name], value=t) for t in c]
        nodes.append(
            A("GroupNormalization", [src, c[0].name, c[1].name], [o], num_groups=2, epsilon=1e-5)
        )
        return nodes, src, (src, F, (1, 4, 2, 2)), (out, F, (1, 4, 2, 2))
    if extra == "clip_min_max":
        lo = helper.make_tensor(k + "lo", F, [], [-0.5])
        hi = helper.make_tensor(k + "hi", F, [], [0.5])
        nodes = [
            A("Constant", [], [k + "lo"], value=lo),
            A("Constant", [], [k + "hi"], value=hi),
            A("Clip", [src, k + "lo", k + "hi"], [o]),
        ]
        return nodes, src, (src, F, (2, 8)), (out, F, (2, 8))
    raise ValueError(extra)


def _raise_cases(case, KEEP, EITHER, FUSE, nearest) -> None:
    both = ({"c": np.array(True)}, {"c": np.array(False)})
    items = [
        # extra, where, opset, norm
        ("split_no_split_input", "main", 17, "rms"),
        ("split_no_split_input", "if", 17, "rms"),
        ("split_no_split_input", "loop", 17, "rms"),
        ("split_no_split_input", "function", 17, "rms"),
        ("gridsample_bilinear", "main", 17, "rms"),
        ("gridsample_bilinear", "main", 16, "ln"),
        ("gridsample_bilinear", "function", 16, "ln"),
        ("dft_axis_attribute", "main", 17, "rms"),
        ("dft_axis_attribute", "if", 17, "rms"),
        ("reducelogsumexp_attribute", "main", 17, "rms"),
        ("reducemax_attribute", "loop", 17, "rms"),
        ("reducemean_attribute", "if", 17, "rms"),
        ("reducemean_attribute", "function", 17, "rms"),
        ("resize_linear", "main", 13, "ln"),
        ("resize_linear", "main", 17, "rms"),
        ("pad_reflect", "main", 13, "ln"),
        ("pad_reflect", "main", 17, "rms"),
        ("clip_min_max", "main", 13, "ln"),
        ("scatter_elements_add", "main", 16, "ln"),
        ("scatter_elements_add", "main", 17, "rms"),
        ("batchnorm_training", "main", 15, "ln"),
        ("batchnorm_training", "main", 17, "rms"),
        ("split_no_split_input", "main", 13, "ln"),
        ("squeeze_attribute_opset11", "function", 11, "ln"),
        ("split_attribute_opset11", "main", 11, "ln"),
        ("reducesum_attribute_opset11", "if", 11, "rms"),
        ("pad_reflect", "main", 18, "rms"),
        ("pad_reflect", "loop", 18, "rms"),
        ("clip_min_max", "function", 18, "rms"),
        ("batchnorm_training", "if", 18, "rms"),
        ("scatter_elements_add", "main", 18, "rms"),
        ("gridsample_bilinear", "main", 18, "rms"),
        ("dft_axis_attribute", "function", 18, "rms"),
    ]
    for extra, where, opset, kind in items:
        case(
            f"a2_raise_opset{opset}_{kind}_{extra}_in_{where}",
            "8",
            f"{kind} at opset {opset} next to {extra.replace('_', ' ')} in the {where} "
            "(a raised opset changes its schema or meaning)",
            _raise(extra, where, opset, kind),
            EITHER,
            fixed=both if where == "if" else ({},),
        )
    case(
        "a2_raise_opset17_rms_beside_unfused_ln_lookalike",
        "8",
        "an RMS norm (raised to 23 under --target onnx) beside an unbiased layer-norm look-alike "
        "whose "
        "ReduceMean-13 nodes carry axes attributes",
        _rms_beside_lookalike,
        EITHER,
    )


def _rms_beside_lookalike() -> onnx.ModelProto:
    g = G(opset=17)
    r = norm(g, "x", kind="rms", eps=1e-6, gamma=GAMMA, out=None)
    m = g.reduce("ReduceMean", r, (-1,))
    c = g.op("Sub", [r, m])
    v = g.op("Div", [g.reduce("ReduceSum", g.op("Mul", [c, c]), (-1,)), g.init(15.0)])
    g.op("Div", [c, g.op("Sqrt", [g.op("Add", [v, g.init(1e-5)])])], "y")
    return model(g)


# ---------------------------------------------------------------- float64, float16, casts


def _precision(variant: str):
    def build():
        g = G()
        if variant in ("ln_downcast_f16", "rms_downcast_f16", "ln_upcast_f64"):
            low = np.float16 if "f16" in variant else np.float64
            h = G(prefix="h_", dtype=low)
            h.nodes, h.inits = g.nodes, g.inits
            xc = g.op("Cast", ["x"], to=ELEM[low])
            kind = variant.split("_")[0]
            r = norm(h, xc, kind=kind, eps=1e-3, gamma=GAMMA.astype(low), out=None)
            g.op("Cast", [r], "y", to=F)
            return model(g)
        if variant == "f16_upcast_not_cast_back":
            xc = g.op("Cast", ["x"], to=F)
            norm(g, xc, gamma=GAMMA, beta=BETA)
            return model(g, [("x", F16, SHAPE)], [("y", F, SHAPE)])
        if variant == "f16_mean_f16_var_f32":
            h = G(prefix="h_", dtype=np.float16)
            h.nodes, h.inits = g.nodes, g.inits
            m = h.reduce("ReduceMean", "x", (-1,))
            c = h.op("Sub", ["x", m])
            c32 = g.op("Cast", [c], to=F)
            v = g.reduce("ReduceMean", g.op("Mul", [c32, c32]), (-1,))
            std = g.op("Cast", [g.op("Sqrt", [g.op("Add", [v, g.init(1e-5)])])], to=F16)
            h.op("Mul", [h.op("Div", [c, std]), h.init(GAMMA.astype(np.float16))], "y")
            return model(g, [("x", F16, SHAPE)], [("y", F16, SHAPE)])
        if variant == "f16_eps_underflows_to_zero":
            h = G(dtype=np.float16)
            norm(h, "x", eps=np.float16(1e-8), gamma=GAMMA.astype(np.float16))
            return model(h, [("x", F16, SHAPE)], [("y", F16, SHAPE)])
        if variant == "f16_sum_over_d_overflow":
            h = G(dtype=np.float16)
            m = h.reduce("ReduceMean", "x", (-1,))
            c = h.op("Sub", ["x", m])
            v = h.op("Div", [h.reduce("ReduceSum", h.op("Mul", [c, c]), (-1,)), h.init(16.0)])
            h.op("Div", [c, h.op("Sqrt", [h.op("Add", [v, h.init(1e-3)])])], "y")
            return model(h, [("x", F16, SHAPE)], [("y", F16, SHAPE)])
        if variant in (
            "ln_f64_eps_1e-5",
            "rms_f64_eps_1e-6",
            "ln_f64_eps_cast_from_f32",
            "rms_f64_eps_2pow-20",
        ):
            h = G(dtype=np.float64)
            kind = variant.split("_")[0]
            eps = {
                "ln_f64_eps_1e-5": 1e-5,
                "rms_f64_eps_1e-6": 1e-6,
                "rms_f64_eps_2pow-20": 2.0**-20,
            }.get(variant)
            if eps is None:
                eps = h.op("Cast", [h.init(np.float32(1e-5), dtype=np.float32)], to=F64)
            norm(h, "x", kind=kind, eps=eps, gamma=GAMMA.astype(np.float64))
            return model(h, [("x", F64, SHAPE)], [("y", F64, SHAPE)])
        raise ValueError(variant)

    return build


def _precision_cases(case, KEEP, EITHER, FUSE, nearest) -> None:
    for variant in (
        "ln_downcast_f16",
        "rms_downcast_f16",
        "ln_upcast_f64",
        "f16_upcast_not_cast_back",
        "f16_mean_f16_var_f32",
        "f16_eps_underflows_to_zero",
        "f16_sum_over_d_overflow",
        "ln_f64_eps_cast_from_f32",
        "rms_f64_eps_2pow-20",
    ):
        case(
            f"a2_precision_{variant}".replace("-", "_"),
            "exact-odd",
            f"mixed precision: {variant.replace('_', ' ')}",
            _precision(variant),
            EITHER,
        )
    for variant in ("ln_f64_eps_1e-5", "rms_f64_eps_1e-6"):
        case(
            f"a2_precision_{variant}".replace("-", "_"),
            "strict",
            f"float64 {variant.split('_')[0]} whose epsilon is not exactly a float32",
            _precision(variant),
            KEEP("epsilon-not-float32", "float64-stash-type"),
        )


# ---------------------------------------------------------------- overridable shape facts


def _ov_shape(variant: str, stats: str = "mean", kind: str = "ln"):
    """x's trailing dim comes from an overridable initializer `ov` (default 16); a norm over the
    last axis without affine follows (stats "mean" or "sum16": ReduceSum / 16)."""

    def build():
        g = G(opset=17)
        if variant == "reshape_target":
            g.init([2, 5, 16], "ov", np.int64)
            inputs = [("inp", F, (2, 80))]
            x = g.op("Reshape", ["inp", "ov"])
            back = g.init([2, 80], dtype=np.int64)
            out_shape = (2, 80)
        elif variant == "tile_repeats":
            g.init([1, 1, 2], "ov", np.int64)
            inputs = [("inp", F, (2, 5, 8))]
            x = g.op("Tile", ["inp", "ov"])
            back, out_shape = None, (2, 5, "w")
        elif variant == "slice_ends":
            g.init([16], "ov", np.int64)
            inputs = [("inp", F, (2, 5, 32))]
            x = g.op(
                "Slice", ["inp", g.init([0], dtype=np.int64), "ov", g.init([-1], dtype=np.int64)]
            )
            back, out_shape = None, (2, 5, "w")
        elif variant == "concat_part_of_target":
            g.init([4, 16], "ov", np.int64)
            inputs = [("inp", F, (2, 5, 64))]
            target = g.op("Concat", [g.op("Shape", ["inp"], end=2), "ov"], axis=0)
            x = g.op("Reshape", ["inp", target])
            back = g.op("Shape", ["inp"])
            out_shape = (2, 5, 64)
        else:
            raise ValueError(variant)
        if kind == "ln":
            m = g.reduce("ReduceMean", x, (-1,))
            base = g.op("Sub", [x, m])
        else:
            base = x
        square = g.op("Mul", [base, base])
        if stats == "mean":
            ms = g.reduce("ReduceMean", square, (-1,))
        else:
            ms = g.op("Div", [g.reduce("ReduceSum", square, (-1,)), g.init(16.0)])
        normed = g.op("Div", [base, g.op("Sqrt", [g.op("Add", [ms, g.init(1e-5)])])])
        if back is not None:
            g.op("Reshape", [normed, back], "y")
        else:
            g.nodes[-1].output[0] = "y"
        return model(g, inputs, [("y", F, out_shape)], overridable=["ov"])

    return build


def _ov_cases(case, KEEP, EITHER, FUSE, nearest) -> None:
    fed = {
        "reshape_target": np.array([2, 10, 8], np.int64),
        "tile_repeats": np.array([1, 1, 1], np.int64),
        "slice_ends": np.array([8], np.int64),
        "concat_part_of_target": np.array([8, 8], np.int64),
    }
    for variant, override in fed.items():
        for kind in ("ln", "rms"):
            for stats, expect in (("mean", EITHER), ("sum16", KEEP())):
                case(
                    f"a2_ov_{variant}_{kind}_{stats}",
                    "1",
                    f"{kind} without affine ({stats}) over a last axis sized by an overridable "
                    f"initializer via {variant.replace('_', ' ')} (fed {override.tolist()})",
                    _ov_shape(variant, stats, kind),
                    expect,
                    overrides={"ov": override},
                )
    case(
        "a2_ln_keepdims0_unsqueeze_axes_overridable",
        "1",
        "keepdims=0 statistics unsqueezed with axes from an overridable initializer ([2]; fed [1])",
        _keepdims0_overridable,
        KEEP(),
        overrides={"ua": np.array([1], np.int64)},
    )


def _keepdims0_overridable() -> onnx.ModelProto:
    g = G(opset=17)
    g.init([2], "ua", np.int64)
    m = g.op("Unsqueeze", [g.reduce("ReduceMean", "x", (-1,), keepdims=0), "ua"])
    c = g.op("Sub", ["x", m])
    v = g.op("Unsqueeze", [g.reduce("ReduceMean", g.op("Mul", [c, c]), (-1,), keepdims=0), "ua"])
    g.op("Div", [c, g.op("Sqrt", [g.op("Add", [v, g.init(1e-5)])])], "y")
    return model(g, [("x", F, SQ)], [("y", F, SQ)], overridable=["ua"])


def _ov_rank(kind: str, axes_form: str, affine: bool):
    """x = Reshape(inp, ov), ov an overridable initializer [2,5,16] (declared [r]); the norm
    reduces axis 2 ("attr": axes=[2] at opset 17; "range": Range(2, Size(Shape(x))) at opset 18),
    trailing only while x has rank 3 (fed ov = [1,2,5,16], axis 2 is the 5-axis); y = Flatten(.)."""

    def build():
        g = G(opset=18 if axes_form == "range" else 17)
        g.init([2, 5, 16], "ov", np.int64)
        x = g.op("Reshape", ["inp", "ov"])
        if axes_form == "range":
            rank = g.op("Size", [g.op("Shape", [x])])
            axes = g.op("Range", [g.init(2, dtype=np.int64), rank, g.init(1, dtype=np.int64)])

            def reduce(t):
                return g.op("ReduceMean", [t, axes], keepdims=1)
        else:

            def reduce(t):
                return g.op("ReduceMean", [t], axes=[2], keepdims=1)

        base = g.op("Sub", [x, reduce(x)]) if kind == "ln" else x
        mean_square = reduce(g.op("Mul", [base, base]))
        normed = g.op("Div", [base, g.op("Sqrt", [g.op("Add", [mean_square, g.init(1e-5)])])])
        if affine:
            normed = g.op("Mul", [normed, g.init(GAMMA)])
        g.op("Flatten", [normed], "y", axis=0)
        m = model(g, [("inp", F, SHAPE)], [("y", F, (1, 160))], overridable=["ov"])
        m.graph.input[1].CopyFrom(vi("ov", I64, ["r"]))
        return m

    return build


def _ov_rank_keepdims0(kind: str):
    """x = Reshape(inp, ov) (ov overridable, [2,4,4]); keepdims=0 statistics over axis -1
    unsqueezed back at axis 2: the dropped axis only while x has rank 3 (fed [1,2,4,4])."""

    def build():
        g = G(opset=17)
        g.init([2, 4, 4], "ov", np.int64)
        x = g.op("Reshape", ["inp", "ov"])
        two = g.init([2], dtype=np.int64)
        if kind == "ln":
            m = g.op("Unsqueeze", [g.reduce("ReduceMean", x, (-1,), keepdims=0), two])
            base = g.op("Sub", [x, m])
        else:
            base = x
        v = g.op(
            "Unsqueeze", [g.reduce("ReduceMean", g.op("Mul", [base, base]), (-1,), keepdims=0), two]
        )
        normed = g.op("Div", [base, g.op("Sqrt", [g.op("Add", [v, g.init(1e-5)])])])
        g.op("Flatten", [normed], "y", axis=0)
        m = model(g, [("inp", F, SQ)], [("y", F, (1, 32))], overridable=["ov"])
        m.graph.input[1].CopyFrom(vi("ov", I64, ["r"]))
        return m

    return build


def _ov_rank_cases(case, KEEP, EITHER, FUSE, nearest) -> None:
    for kind in ("ln", "rms"):
        for axes_form in ("attr", "range"):
            for affine in (False, True):
                case(
                    f"a2_ov_rank_{kind}_{axes_form}_axis2{'_gamma' if affine else ''}",
                    "1",
                    f"{kind} over axis 2 ({axes_form}) of a Reshape whose target is an "
                    "overridable initializer (rank 3; fed [1,2,5,16], rank 4)",
                    _ov_rank(kind, axes_form, affine),
                    EITHER,
                    overrides={"ov": np.array([1, 2, 5, 16], np.int64)},
                )
    for kind in ("ln", "rms"):
        case(
            f"a2_ov_rank_{kind}_keepdims0_unsqueeze_axis2",
            "1",
            f"{kind} with keepdims=0 statistics unsqueezed at axis 2 of a Reshape whose target is "
            "an overridable initializer (rank 3; fed [1,2,4,4], rank 4)",
            _ov_rank_keepdims0(kind),
            EITHER,
            overrides={"ov": np.array([1, 2, 4, 4], np.int64)},
        )


def _size_of_overridable(what: str, kind: str):
    """A norm whose epsilon / divisor / exponent is Cast(Size(ov)) (times 1e-6 for epsilon), ov an
    overridable float initializer declared [r] (3, 16 or 2 elements by default)."""

    def build():
        g = G(opset=17)
        count = {"eps": 3, "divisor": 16, "exponent": 2}[what]
        g.init(np.zeros(count, np.float32), "ov")
        size = g.op("Cast", [g.op("Size", ["ov"])], to=F)
        if what == "eps":
            norm(g, "x", kind=kind, eps=g.op("Mul", [size, g.init(1e-6)]), gamma=GAMMA)
        elif what == "exponent":
            norm(g, "x", kind=kind, sq=size, gamma=GAMMA)
        else:
            base = g.op("Sub", ["x", g.reduce("ReduceMean", "x", (-1,))]) if kind == "ln" else "x"
            v = g.op("Div", [g.reduce("ReduceSum", g.op("Mul", [base, base]), (-1,)), size])
            normed = g.op("Div", [base, g.op("Sqrt", [g.op("Add", [v, g.init(1e-5)])])])
            g.op("Mul", [normed, g.init(GAMMA)], "y")
        m = model(g, overridable=["ov"])
        m.graph.input[1].CopyFrom(vi("ov", F, ["r"]))
        return m

    return build


def _body_stats(where: str):
    """A layer norm whose mean is also an output, inside an If branch or a local function."""

    def build():
        if where == "if":
            t = G("t_")
            m = t.reduce("ReduceMean", "x", (-1,))
            norm(t, "x", mean=m, gamma=GAMMA, beta=BETA, out="t_y")
            t.op("Identity", [m], "t_m")
            e = G("e_")
            e.op("Identity", ["x"], "e_y")
            e.op("ReduceMax", ["x"], "e_m", axes=[-1], keepdims=1)
            node = helper.make_node(
                "If",
                ["c"],
                ["y", "mean_out"],
                then_branch=helper.make_graph(
                    t.nodes, "then", [], [vi("t_y", F, SHAPE), vi("t_m", F, (2, 5, 1))], t.inits
                ),
                else_branch=helper.make_graph(
                    e.nodes, "else", [], [vi("e_y", F, SHAPE), vi("e_m", F, (2, 5, 1))]
                ),
            )
            g = G()
            g.nodes.append(node)
            return model(
                g, [("x", F, SHAPE), ("c", BOOL, [])], [("y", F, SHAPE), ("mean_out", F, (2, 5, 1))]
            )
        f = G("f_")
        m = f.reduce("ReduceMean", "fx", (-1,))
        norm(f, "fx", mean=m, sq="mul", eps=f.const_node(1e-5), out="fy")
        f.op("Identity", [m], "fm")
        fn = helper.make_function(
            "local", "LNM", ["fx"], ["fy", "fm"], f.nodes, [helper.make_opsetid("", 17)]
        )
        g = G()
        g.nodes.append(helper.make_node("LNM", ["x"], ["y", "mean_out"], domain="local"))
        return model(
            g,
            outputs=[("y", F, SHAPE), ("mean_out", F, (2, 5, 1))],
            functions=[fn],
            opsets={"local": 1},
        )

    return build


def _fn_raise(variant: str):
    """An opset-13 model whose layer norm lives in a local function (importing opset 13): called
    from the main graph, from an If branch, next to a RoiAlign-10 (which blocks the raise), or
    twice with inputs of different ranks."""

    def build():
        f = G("f_", opset=13)
        norm(
            f,
            "fx",
            sq="mul",
            eps=f.const_node(1e-5),
            gamma=f.const_node(GAMMA),
            beta=f.const_node(BETA),
            out="fy",
        )
        fn = helper.make_function(
            "local", "LNF", ["fx"], ["fy"], f.nodes, [helper.make_opsetid("", 13)]
        )
        g = G(opset=13)
        inputs, outputs = [("x", F, SHAPE)], [("y", F, SHAPE)]
        call = helper.make_node("LNF", ["x"], ["y"], domain="local")
        if variant == "if_call":
            call.output[0] = "ty"
            then_g = helper.make_graph([call], "then", [], [vi("ty", F, SHAPE)])
            else_g = helper.make_graph(
                [helper.make_node("Neg", ["x"], ["ey"])], "else", [], [vi("ey", F, SHAPE)]
            )
            g.nodes.append(
                helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
            )
            inputs.append(("c", BOOL, []))
        else:
            g.nodes.append(call)
        if variant == "roialign_main":
            g.init([[1.0, 1.0, 5.0, 5.0]], "rois")
            g.init([0], "bi", np.int64)
            g.nodes.append(
                helper.make_node(
                    "RoiAlign",
                    ["feat", "rois", "bi"],
                    ["r"],
                    output_height=2,
                    output_width=2,
                    sampling_ratio=2,
                )
            )
            inputs.append(("feat", F, (1, 1, 8, 8)))
            outputs.append(("r", F, (1, 1, 2, 2)))
        if variant == "two_calls_other_rank":
            g.nodes.append(helper.make_node("LNF", ["x2"], ["y2"], domain="local"))
            inputs.append(("x2", F, (3, 16)))
            outputs.append(("y2", F, (3, 16)))
        return model(g, inputs, outputs, functions=[fn], opsets={"local": 1})

    return build


def _ov_affine_shape(kind: str, which: str):
    """x [2,16,16]; gamma (or beta) = Reshape(w[16], ov), ov an overridable initializer [16]
    (declared [r]); fed [16, 1] the affine varies along the sequence axis."""

    def build():
        g = G(opset=17)
        g.init([16], "ov", np.int64)
        w = g.op("Reshape", [g.init(GAMMA), "ov"])
        kw = {"gamma": w} if which == "gamma" else {"gamma": GAMMA, "beta": w}
        norm(g, "x", kind=kind, eps=1e-5, **kw)
        m = model(g, [("x", F, (2, 16, 16))], [("y", F, (2, 16, 16))], overridable=["ov"])
        m.graph.input[1].CopyFrom(vi("ov", I64, ["r"]))
        return m

    return build


def _misc_cases(case, KEEP, EITHER, FUSE, nearest) -> None:
    for what, reasons, fed in (
        ("eps", ("epsilon-not-constant",), 100000),
        ("divisor", ("variance-divisor",), 8),
        ("exponent", ("not-layer-norm", "not-rms-norm", "square-exponent"), 3),
    ):
        for kind in ("ln", "rms"):
            case(
                f"a2_{kind}_{what}_from_size_of_overridable",
                "1",
                f"{kind} whose {what} is computed from Size(ov), ov an overridable initializer "
                f"(fed {fed} elements)",
                _size_of_overridable(what, kind),
                KEEP(*reasons),
                overrides={"ov": np.zeros(fed, np.float32)},
            )
    for kind in ("ln", "rms"):
        for label, shape in (
            ("normalised_axis", (2, 5, 0)),
            ("batch", (0, 5, 16)),
            ("middle", (2, 0, 16)),
        ):
            case(
                f"a2_{kind}_zero_size_{label}",
                "7",
                f"{kind} of a static {list(shape)} tensor (a zero-size {label.replace('_', ' ')})",
                simple(kind, shape=shape, affine=False, eps=1e-5),
                KEEP("empty-normalised-axes") if label == "normalised_axis" else EITHER,
                fixed=({"x": np.zeros(shape, np.float32)},),
            )
    for kind, which in (("ln", "gamma"), ("ln", "beta"), ("rms", "gamma")):
        case(
            f"a2_ov_{kind}_{which}_reshaped_by_overridable",
            "1",
            f"{kind} whose {which} is Reshape(w, ov), ov overridable ([16]; fed [16, 1])",
            _ov_affine_shape(kind, which),
            EITHER,
            overrides={"ov": np.array([16, 1], np.int64)},
        )
    both = ({"c": np.array(True)}, {"c": np.array(False)})
    for variant in ("main_call", "if_call", "roialign_main", "two_calls_other_rank"):
        case(
            f"a2_fn_opset13_ln_{variant}",
            "8",
            f"opset-13 layer norm in a local function: {variant.replace('_', ' ')}",
            _fn_raise(variant),
            EITHER,
            fixed=both if variant == "if_call" else ({},),
        )
    case(
        "a2_ln_mean_exposed_in_if_branch",
        "2",
        "a then-branch layer norm whose mean is also a branch output",
        _body_stats("if"),
        EITHER,
        fixed=both,
    )
    case(
        "a2_ln_mean_exposed_in_function",
        "6",
        "a local function's layer norm whose mean is also a function output",
        _body_stats("function"),
        EITHER,
    )


# ---------------------------------------------------------------- more RMS / mean - x structure


def _more(variant: str):
    def build():
        opset = 18 if variant.startswith("opset18") else 17
        g = G(opset=opset)
        inputs = [("x", F, SHAPE)]
        outputs = [("y", F, SHAPE)]
        overridable = []
        if variant == "opset18_sumsquare_noop_empty_axes":
            s = g.op(
                "ReduceSumSquare",
                ["x", g.init(np.zeros(0, np.int64), dtype=np.int64)],
                keepdims=1,
                noop_with_empty_axes=1,
            )
            ms = g.op("Div", [s, g.init(16.0)])
        elif variant == "opset18_sumsquare_no_axes_reduces_all":
            s = g.op("ReduceSumSquare", ["x"], keepdims=1)
            ms = g.op("Div", [s, g.init(160.0)])
        elif variant == "opset18_sumsquare_axes_graph_input":
            inputs.append(("ax", I64, (1,)))
            s = g.op("ReduceSumSquare", ["x", "ax"], keepdims=1)
            ms = g.op("Div", [s, g.init(16.0)])
        elif variant == "sumsquare_keepdims0_no_unsqueeze_square":
            inputs, outputs = [("x", F, (4, 4, 4))], [("y", F, (4, 4, 4))]
            s = g.op("ReduceSumSquare", ["x"], axes=[-1], keepdims=0)
            ms = g.op("Div", [s, g.init(4.0)])
        elif variant == "sumsquare_eps_in_sum_overridable":
            g.init(1e-6, "e")
            overridable.append("e")
            s = g.op("ReduceSumSquare", ["x"], axes=[-1], keepdims=1)
            ms = g.op("Div", [g.op("Add", [s, "e"]), g.init(16.0)])
            g.op("Mul", [g.op("Div", ["x", g.op("Sqrt", [ms])]), g.init(GAMMA)], "y")
            return model(g, inputs, outputs, overridable=overridable)
        elif variant == "mean_minus_x_unsqueezed_mean":
            m0 = g.reduce("ReduceMean", "x", (-1,), keepdims=0)
            m = _unsqueeze(g, m0, [2])
            norm(g, "x", mean=m, numerator="m-x", gamma=GAMMA, beta=BETA)
            return model(g)
        elif variant == "mean_minus_x_gamma_shared":
            gam = g.init(GAMMA, "gam")
            r = norm(g, "x", numerator="m-x", gamma=gam, beta=BETA, out=None)
            g.op("Add", [r, g.op("Mul", ["x", gam])], "y")
            return model(g)
        elif variant == "mean_minus_x_after_residual":
            inputs.append(("skip", F, SHAPE))
            h = g.op("Add", ["x", "skip"])
            norm(g, h, numerator="m-x", gamma=GAMMA, beta=BETA)
            return model(g, inputs)
        elif variant == "mean_minus_x_mean_exposed":
            m = g.reduce("ReduceMean", "x", (-1,))
            g.nodes[-1].output[0] = "mean_out"
            norm(g, "x", mean="mean_out", numerator="m-x", gamma=GAMMA, beta=BETA)
            return model(g, outputs=[("y", F, SHAPE), ("mean_out", F, (2, 5, 1))])
        elif variant == "residual_ln_mean_exposed":
            inputs.append(("skip", F, SHAPE))
            h = g.op("Add", ["x", "skip"])
            m = g.reduce("ReduceMean", h, (-1,))
            g.nodes[-1].output[0] = "mean_out"
            norm(g, h, mean="mean_out", gamma=GAMMA, beta=BETA)
            return model(g, inputs, [("y", F, SHAPE), ("mean_out", F, (2, 5, 1))])
        elif variant == "residual_rms_pow_roots":
            inputs.append(("skip", F, SHAPE))
            h = g.op("Add", ["x", "skip"])
            norm(g, h, kind="rms", eps=1e-6, root=0.5, inv=-1.0, gamma=GAMMA)
            return model(g, inputs)
        else:
            raise ValueError(variant)
        shifted = g.op("Add", [ms, g.init(1e-6)])
        g.op(
            "Mul",
            [
                g.op("Div", ["x", g.op("Sqrt", [shifted])]),
                g.init(np.linspace(0.5, 1.5, inputs[0][2][-1]), "gamma_0"),
            ],
            "y",
        )
        return model(g, inputs, outputs, overridable=overridable)

    return build


def _more_cases(case, KEEP, EITHER, FUSE, nearest) -> None:
    rms_near = nearest("rms", eps=1e-6)
    for variant, expect, evidence, extra in (
        ("opset18_sumsquare_noop_empty_axes", KEEP(), rms_near, {}),
        ("opset18_sumsquare_no_axes_reduces_all", EITHER, None, {}),
        ("sumsquare_keepdims0_no_unsqueeze_square", KEEP(), rms_near, {}),
        (
            "opset18_sumsquare_axes_graph_input",
            KEEP(),
            None,
            {"fixed": ({"ax": np.array([-1], np.int64)}, {"ax": np.array([1], np.int64)})},
        ),
        ("sumsquare_eps_in_sum_overridable", KEEP(), None, {"overrides": {"e": np.float32(0.5)}}),
        ("mean_minus_x_unsqueezed_mean", EITHER, None, {}),
        ("mean_minus_x_gamma_shared", EITHER, None, {}),
        ("mean_minus_x_after_residual", EITHER, None, {}),
        ("mean_minus_x_mean_exposed", EITHER, None, {}),
        ("residual_ln_mean_exposed", EITHER, None, {}),
        ("residual_rms_pow_roots", EITHER, None, {}),
    ):
        cls = (
            "hazard"
            if evidence is not None
            else "1"
            if "overrides" in extra
            else "3"
            if "fixed" in extra
            else "exact-odd"
        )
        case(
            f"a2_{variant}",
            cls,
            variant.replace("_", " "),
            _more(variant),
            expect,
            evidence=evidence,
            **extra,
        )


# ---------------------------------------------------------------- registry


def register(case, KEEP, EITHER, FUSE, nearest) -> None:
    """Add every case of this module to the corpus through its `case` registrar (the corpus's
    expectation helpers and `nearest` evidence builder are passed in, so running
    `python -m corpora.adversarial` does not import the corpus twice)."""
    for group in GROUPS:
        group(case, KEEP, EITHER, FUSE, nearest)


GROUPS = [
    _pow_cases,
    _mean_minus_x_cases,
    _keepdims_cases,
    _divisor_cases,
    _stats_cases,
    _shared_cases,
    _axes_cases,
    _qk_cases,
    _raise_cases,
    _precision_cases,
    _ov_cases,
    _more_cases,
    _ov_rank_cases,
    _misc_cases,
]
