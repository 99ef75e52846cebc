"""Adversarial corpus, second helper (issue 15's spellings and structures): Pow roots and
reciprocals, exponent tensors, `mean - x` numerators, keepdims=0 + Unsqueeze, `ReduceSum * (1/d)`
and `d` from `Shape`, ReduceSumSquare / ReduceL2 RMS norms, Mean / InvStdDev outputs, shared
statistics, computed and odd axes, QK-norm after dynamic Reshapes, opset raises, float64 and
float16.

Registered into `models.adversarial.CASES` by `register()` (called at the end of that module), so
`tests/test_adversarial.py` runs every case here in its four configurations. Cases that normfuse
gets wrong carry a finding id (`ADV2-NN`, see `adversary2-findings.md` at the repository's
worktree root) in `FINDINGS`; the test marks them xfail(strict=True).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import helper

from models.adversarial_build import BOOL, F16, F64, I64, SHAPE, F, G, model, vi

# case name -> finding id; tests/test_adversarial.py xfails these (strict).
FINDINGS: dict[str, str] = {}

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
        square = g.op("Mul", [base, base]) if isinstance(sq, str) and sq == "mul" else g.op("Pow", [base, _c(g, sq, "two")])
        variance = g.reduce("ReduceMean", square, var_axes if var_axes is not None else axes)
    shifted = g.op("Add", [variance, _c(g, eps, "eps")])
    num = base if numerator == "x-m" else g.op("Sub", [mean, x])
    if isinstance(inv, tuple):
        normed = g.op("Mul", [num, g.op("Pow", [shifted, _c(g, inv[1], "half")])])
    else:
        std = g.op("Sqrt", [shifted]) if isinstance(root, str) and root == "sqrt" else g.op("Pow", [shifted, _c(g, root, "root")])
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
        ("rsqrt_pow_minus_half_float16_exponent", "ln", {"inv": ("rsqrt", f16(-0.5))}, EITHER, None),
        (
            "rsqrt_pow_minus_half_rank4_raises_output_rank",
            "ln",
            {"inv": ("rsqrt", rank4(-0.5)), "out_shape": OUT4},
            EITHER,
            None,
        ),
        ("rsqrt_pow_minus1_no_root", "ln", {"inv": ("rsqrt", -1.0)}, KEEP(), ln_near),
        ("square_exp_2_0000002_f32", "ln", {"sq": np.float32(2.0000002)}, KEEP("square-exponent"), ln_near),
        ("square_exp_minus_2", "ln", {"sq": np.float32(-2.0)}, KEEP("square-exponent"), ln_near),
        ("square_exp_2_float64_in_float32_model", "ln", {"sq": f64(2.0)}, EITHER, None),
        ("square_exp_2_int32_vector16", "ln", {"sq": np.full(16, 2, np.int32)}, EITHER, None),
        ("square_exp_2_shape_2_5_1", "ln", {"sq": np.full((2, 5, 1), 2.0, np.float32)}, EITHER, None),
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
        ("rms_root_pow_0_5001", "rms", {"root": np.float32(0.5001)}, KEEP("root-exponent"), rms_near),
        ("rms_recip_pow_minus1_int64", "rms", {"inv": np.int64(-1)}, EITHER, None),
        (
            "rms_recip_pow_minus_1_0001",
            "rms",
            {"inv": np.float32(-1.0001)},
            KEEP("reciprocal-exponent"),
            rms_near,
        ),
        ("rms_square_exp_minus_2", "rms", {"sq": np.float32(-2.0)}, KEEP("square-exponent"), rms_near),
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
        evidence=nearest("ln", eps=1e-3, gamma=GAMMA, beta=np.linspace(-1, 1, 16, dtype=np.float32)),
    )
    case(
        "a2_keras_root_pow_0_5001",
        "hazard",
        "tf2onnx layer norm whose r = Reciprocal(Pow(v + eps, 0.5001))",
        _keras(root=np.float32(0.5001)),
        KEEP(),
        evidence=nearest("ln", eps=1e-3, gamma=GAMMA, beta=np.linspace(-1, 1, 16, dtype=np.float32)),
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
        std = g.op("Sqrt", [shifted]) if isinstance(root, str) and root == "sqrt" else g.op("Pow", [shifted, _c(g, root, "root")])
        r = g.op("Reciprocal", [std]) if isinstance(recip, str) else g.op("Pow", [std, _c(g, recip, "inv")])
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
            kw.update(gamma=g.op("Cast", [g.init(GAMMA.astype(np.float64), dtype=np.float64)], to=F))
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
            norm(g, "x", numerator="m-x", gamma=GAMMA.astype(np.float16), beta=BETA.astype(np.float16))
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
    for variant in ("gamma_per_token", "numerator_mean_of_two_axes"):
        case(
            f"a2_ln_mean_minus_x_{variant}",
            "hazard",
            f"layer-norm look-alike with numerator mean - x: {variant.replace('_', ' ')}",
            _mean_minus_x(variant),
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
        dims = shape[-len(axes):]
        g.op("Mul", [normed, g.init(np.linspace(0.5, 1.5, int(np.prod(dims))).reshape(dims), "gamma_0")], "y")
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
            return g.op("Cast", [g.op("Gather", [g.op("Shape", [t], **attrs), g.init(-1, dtype=np.int64)], axis=0)], to=F)

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
        elif variant == "symbolic_constant_16":
            v = g.op("Div", [total, g.init(16.0)])
        elif variant == "over_16":
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
        ("ln", "reduceprod_shape_all", KEEP("variance-divisor"), nearest("ln", axis=-2, gamma=None, beta=None)),
        ("ln", "times_one_over_shape", EITHER, None),
        ("ln", "symbolic_shape_d", EITHER, None),
        ("ln", "symbolic_constant_16", KEEP(), ln_plain),
        ("rms", "times_1_over_15", KEEP("variance-divisor", "unbiased-variance"), rms_plain),
        ("rms", "shape_of_other_symbolic", KEEP(), rms_plain),
        ("rms", "symbolic_constant_16", KEEP(), rms_plain),
        ("rms", "shape_of_broadcast_source", KEEP("variance-divisor"), "broadcast"),
        ("rms_sumsquare", "over_15", KEEP("variance-divisor", "unbiased-variance"), rms_plain),
        ("rms_sumsquare", "eps_in_sum_over_15", KEEP("variance-divisor", "unbiased-variance"), rms_plain),
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
            f"{kind} whose mean of squares is a sum with divisor spelled {variant.replace('_', ' ')}",
            _divisor(variant, kind),
            expect,
            evidence=evidence,
        )
    for variant in ("l2_mul_self", "l2_keepdims0_unsqueeze", "sumsquare_keepdims0_unsqueeze", "sumsquare_eps_in_sum_d_3"):
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
            evidence=nearest("rms", eps=1e-6, axis=-2 if "two_axes" in variant else -1,
                             gamma=np.tile(GAMMA, (5, 1)) if "two_axes" in variant else GAMMA),
        )
    case(
        "a2_rms_l2_pow_2_0000002",
        "strict",
        "RMS norm with Pow(ReduceL2, 2.0000002) / d: the square is not exactly 2 (no NaN: l2 >= 0)",
        _rms_variant("l2_pow_2_0000002"),
        KEEP("square-exponent"),
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
                    "SimplifiedLayerNormalization", [x, g.init(np.ones(16), "s1")], ["y"], axis=-1, epsilon=1e-6
                )
            )
        return model(g, [("a", F, (2, 5, 1)), ("b", F, (16,))])

    return build


# ---------------------------------------------------------------- registry


def register() -> None:
    """Add every case of this module to `models.adversarial.CASES`."""
    from models.adversarial import EITHER, FUSE, KEEP, case, nearest

    for group in GROUPS:
        group(case, KEEP, EITHER, FUSE, nearest)


GROUPS = [_pow_cases, _mean_minus_x_cases, _keepdims_cases, _divisor_cases]
