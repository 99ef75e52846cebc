"""Adversarial corpus, third helper (issue 21's classes): shapes where onnx's shape inference and
ONNX Runtime disagree (pooling with ceil_mode, ConvTranspose with SAME_* and output_padding)
feeding a norm, model-local functions reached from several scopes with different shapes, constant
folding under op attributes that change a value's meaning, residual fusion (bias association,
rank, dtype, broadcasting, symbolic dims) and group norms with casts or shared statistics.

Registered into `corpora.adversarial.CASES` by `register()` (called at the end of that module), so
`tests/test_adversarial.py` runs every case here in its four configurations. Cases that normfuse
gets wrong carry a finding id (`ADV3-NN`, described in `docs/limitations.md`) in
`FINDINGS`; the test marks them xfail(strict=True) in exactly the configurations they fail.

Every disagreeing pooling/ConvTranspose configuration below was found by a sweep on onnx 1.23.2
and onnxruntime 1.32.0: `L_ONNX` is what onnx's shape inference says, `L_ORT` what ONNX Runtime
returns (a model's declared output has no shape, so the model runs on ORT's length).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper

from corpora.adversarial_2 import norm
from corpora.adversarial_build import BOOL, F16, F64, I64, SHAPE, F, G, body, model

# case name -> (finding id, the configurations it fails in); tests/test_adversarial.py requires
# each (case, configuration) pair to fail, as a strict xfail would, and then reports the case's
# test xfailed. "near-miss" is test_lookalike_reports_a_near_miss (marked xfail(strict=True)).
# What still fails after merging main's fixes for issue 21 (22:55 UTC; before the merge 200
# cases failed somewhere: `docs/limitations.md`).
FINDINGS: dict[str, tuple[str, tuple[str, ...]]] = {}

C_SHAPES, C_FUNCTIONS, C_FOLDER, C_RESIDUAL, C_GROUP = (
    "a3-shapes",
    "a3-functions",
    "a3-folder",
    "a3-residual",
    "a3-group-norm",
)
ELEM = {np.float32: F, np.float16: F16, np.float64: F64}
INT_MAX = np.iinfo(np.int64).max
INT_MIN = np.iinfo(np.int64).min
GAMMA = np.linspace(0.5, 1.5, 16, dtype=np.float32)
BETA = np.linspace(-0.5, 0.5, 16, dtype=np.float32)
BOTH_BRANCHES = ({"c": np.array(True)}, {"c": np.array(False)})

# ================================================================ class 1: shape disagreements

# (op, L, kernel, stride, pads, dilation, L_ONNX, L_ORT): 1-D pooling with ceil_mode=1
POOLS = [
    ("MaxPool", 5, 2, 2, (1, 1), 1, 4, 3),
    ("MaxPool", 6, 2, 2, (0, 1), 1, 4, 3),
    ("MaxPool", 7, 2, 2, (1, 1), 1, 5, 4),
    ("MaxPool", 8, 2, 3, (1, 1), 2, 4, 3),
    ("MaxPool", 9, 2, 2, (1, 1), 1, 6, 5),
    ("MaxPool", 9, 3, 3, (0, 1), 1, 4, 3),
    ("AveragePool", 5, 2, 2, (1, 1), 1, 4, 3),
    ("AveragePool", 8, 2, 2, (0, 1), 1, 5, 4),
    ("AveragePool", 9, 2, 3, (0, 0), 1, 4, 3),
    ("LpPool", 5, 2, 2, (1, 1), 1, 4, 3),
    ("LpPool", 7, 2, 2, (1, 1), 1, 5, 4),
]
# MaxPool and AveragePool-19 with auto_pad SAME_* and dilation 2 disagree even with ceil_mode=0
POOLS_SAME = [
    ("MaxPool", 8, 2, 2, "SAME_UPPER", 2, 4, 3),
    ("MaxPool", 7, 3, 1, "SAME_UPPER", 2, 7, 5),
    ("MaxPool", 8, 3, 2, "SAME_LOWER", 2, 4, 3),
    ("MaxPool", 8, 2, 1, "SAME_LOWER", 2, 8, 7),
    ("AveragePool", 8, 2, 2, "SAME_UPPER", 2, 4, 3),  # dilations: AveragePool-19
    ("AveragePool", 8, 3, 1, "SAME_LOWER", 2, 8, 6),
]
# (L, kernel, stride, output_padding, auto_pad, dilation, L_ONNX, L_ORT): ConvTranspose 3 -> 2 ch
CONV_TRANSPOSES = [
    (5, 2, 2, 1, "SAME_UPPER", 1, 11, 10),
    (5, 3, 2, 1, "SAME_LOWER", 1, 11, 10),
    (4, 3, 3, 1, "SAME_UPPER", 2, 13, 12),
]
CH = 4  # channels of the pooled tensor


def _pool(g: G, x: str, spec) -> str:
    op, _, k, s, pads, dil, _, _ = spec
    attrs = {"kernel_shape": [k], "strides": [s], "ceil_mode": 1}
    if isinstance(pads, str):
        attrs["auto_pad"] = pads
    else:
        attrs["pads"] = list(pads)
    if dil != 1:
        attrs["dilations"] = [dil]
    return g.op(op, [x], **attrs)


def _conv_t(g: G, x: str, spec) -> str:
    _, k, s, out_pad, auto_pad, dil, _, _ = spec
    w = g.init(np.linspace(-1, 1, CH * CH * k).reshape(CH, CH, k))
    attrs = {
        "kernel_shape": [k],
        "strides": [s],
        "output_padding": [out_pad],
        "auto_pad": auto_pad,
    }
    if dil != 1:
        attrs["dilations"] = [dil]
    return g.op("ConvTranspose", [x, w], **attrs)


def _norm_variant(g: G, p: str, variant: str, l_onnx: int, y: str) -> None:
    """Append to `g` a norm of `p`'s last axis spelled by `variant`, its output named `y`."""
    if variant == "ln_noaffine":
        norm(g, p, kind="ln", out=y)
    elif variant == "rms_noaffine":
        norm(g, p, kind="rms", eps=1e-6, out=y)
    elif variant == "ln_gamma1":
        gamma, beta = np.array([1.5], np.float32), np.array([0.25], np.float32)
        norm(g, p, kind="ln", gamma=gamma, beta=beta, out=y)
    elif variant == "rms_gamma1":
        norm(g, p, kind="rms", eps=1e-6, gamma=np.array([1.5], np.float32), out=y)
    elif variant in ("rms_sum_div", "ln_sum_div"):
        base = p
        if variant == "ln_sum_div":
            base = g.op("Sub", [p, g.reduce("ReduceMean", p, (-1,))])
        total = g.reduce("ReduceSum", g.op("Mul", [base, base]), (-1,))
        var = g.op("Div", [total, g.init(float(l_onnx))])
        std = g.op("Sqrt", [g.op("Add", [var, g.init(1e-6)])])
        g.op("Div", [base, std], y)
    elif variant in ("qk_rms", "qk_rms_gamma1"):
        heads = g.op("Reshape", [p, g.init([0, 2, -1], dtype=np.int64)])
        gamma = np.array([1.25], np.float32) if variant == "qk_rms_gamma1" else None
        norm(g, heads, kind="rms", eps=1e-6, gamma=gamma, out=y)
    elif variant == "gn":
        grouped = g.op("Reshape", [p, g.init([0, 2, -1], dtype=np.int64)])
        normed = norm(g, grouped, kind="ln", out=None)
        back = g.op("Reshape", [normed, g.op("Shape", [p])])
        scaled = g.op("Mul", [back, g.init(np.linspace(0.5, 1.5, CH).reshape(CH, 1))])
        g.op("Add", [scaled, g.init(np.linspace(-1, 1, CH).reshape(CH, 1))], y)
    else:
        raise ValueError(variant)


def _after_disagreement(
    source: str, spec, variant: str, ceil: int = 1, branch: str = "", opset: int = 18
):
    """x [2, CH, L] -> pooling / ConvTranspose whose length onnx and ORT disagree on -> a norm of
    the disagreeing axis, spelled by `variant`; with `branch` ("then"/"else") the norm sits in
    that branch of an If on the graph input c, which returns its ReduceMax over the last axis
    (the other branch: -ReduceMax(x)). ONNX Runtime allocates an If's outputs by the inferred
    shape, so a branch cannot return the disagreeing axis itself."""

    def build():
        g = G(opset=opset)
        length = spec[1] if source == "pool" else spec[0]
        p = _pool(g, "x", spec) if source == "pool" else _conv_t(g, "x", spec)
        if not ceil:
            g.nodes[-1].attribute.pop(
                next(i for i, a in enumerate(g.nodes[-1].attribute) if a.name == "ceil_mode")
            )
        out = ("n", "h", "l") if variant.startswith("qk") else ("n", "c", "l")
        inputs = [("x", F, (2, CH, length))]
        if not branch:
            _norm_variant(g, p, variant, spec[-2], "y")
        else:
            site, other = G("b_", opset=opset), G("o_", opset=opset)
            _norm_variant(site, p, variant, spec[-2], "b_n")
            site.reduce("ReduceMax", "b_n", (-1,))
            site.nodes[-1].output[0] = "b_y"
            other.op("Neg", [other.reduce("ReduceMax", "x", (-1,))], "o_y")
            out = (2, CH, 1) if variant != "qk" else (2, 2, 1)
            bodies = {
                "b": body(site, [], [("b_y", F, out)]),
                "o": body(other, [], [("o_y", F, out)]),
            }
            then_g, else_g = (
                (bodies["b"], bodies["o"]) if branch == "then" else (bodies["o"], bodies["b"])
            )
            g.nodes.append(
                helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
            )
            inputs.append(("c", BOOL, []))
        return model(g, inputs, [("y", F, out)])

    return build


def _pooled_site(g: G, x: str, variant: str, y: str) -> None:
    """MaxPool SAME_UPPER dilations 2 (onnx 4, ORT 3 on length 8), a norm of the pooled axis by
    `variant`, then its ReduceMax over that axis (a shape onnx and ORT agree on) as `y`."""
    p = g.op("MaxPool", [x], kernel_shape=[2], strides=[2], auto_pad="SAME_UPPER", dilations=[2])
    _norm_variant(g, p, variant, 4, g.prefix + "n")
    g.reduce("ReduceMax", g.prefix + "n", (-1,))
    g.nodes[-1].output[0] = y


def _hidden_site(where: str, variant: str):
    """The pooled site where generated inputs may not reach it: in the body of a Loop whose trip
    count is the graph input M (fed 0 and 1), or in local.P called from the else branch of
    If(c) (fed true and false)."""

    def build():
        g = G(opset=19)
        inputs = [("x", F, (2, CH, 8))]
        functions, opsets = [], None
        if where == "loop":
            lb = G("l_", opset=19)
            lb.op("Identity", ["l_cond"], "l_cond_out")
            _pooled_site(lb, "x", variant, "l_scan")
            loop_body = body(
                lb,
                [("l_i", I64, []), ("l_cond", BOOL, [])],
                [("l_cond_out", BOOL, []), ("l_scan", F, (2, CH, 1))],
            )
            g.nodes.append(helper.make_node("Loop", ["M", ""], ["y"], body=loop_body))
            inputs.append(("M", I64, []))
            out = ("m", 2, CH, 1)
        else:
            f = G("p_", opset=19)
            _pooled_site(f, "px", variant, "py")
            constants = [helper.make_node("Constant", [], [t.name], value=t) for t in f.inits]
            functions = [
                helper.make_function(
                    "local", "P", ["px"], ["py"], constants + f.nodes, [helper.make_opsetid("", 19)]
                )
            ]
            opsets = {"local": 1}
            t, e = G("t_", opset=19), G("e_", opset=19)
            t.op("Neg", [t.reduce("ReduceMax", "x", (-1,))], "t_y")
            e.nodes.append(helper.make_node("P", ["x"], ["e_y"], domain="local"))
            g.nodes.append(
                helper.make_node(
                    "If",
                    ["c"],
                    ["y"],
                    then_branch=body(t, [], [("t_y", F, (2, CH, 1))]),
                    else_branch=body(e, [], [("e_y", F, (2, CH, 1))]),
                )
            )
            inputs.append(("c", BOOL, []))
            out = (2, CH, 1)
        return model(g, inputs, [("y", F, out)], functions=functions, opsets=opsets)

    return build


def _pooled_group_norm(op: str, groups: int):
    def build():
        g = G(opset=18)
        p = g.op(op, ["x"], kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)
        grouped = g.op("Reshape", [p, g.init([0, groups, -1], dtype=np.int64)])
        normed = norm(g, grouped, kind="ln", out=None)
        back = g.op("Reshape", [normed, g.op("Shape", [p])])
        scaled = g.op("Mul", [back, g.init(np.linspace(0.5, 1.5, 8).reshape(8, 1, 1))])
        g.op("Add", [scaled, g.init(np.linspace(-1, 1, 8).reshape(8, 1, 1))], "y")
        return model(g, [("x", F, (1, 8, 5, 5))], [("y", F, ("n", "c", "h", "w"))])

    return build


SHAPE_VARIANTS = {
    # variant -> (expectation key, statement)
    "ln_noaffine": ("either", "layer norm without affine (a ones-scale sized by that dim)"),
    "rms_noaffine": ("either", "RMS norm without affine (a ones-scale sized by that dim)"),
    "ln_gamma1": ("either", "layer norm with one-element gamma/beta (expanded to that dim)"),
    "rms_gamma1": ("either", "RMS norm with a one-element gamma (expanded to that dim)"),
    "rms_sum_div": ("keep", "ReduceSum(x^2) / L_ONNX: a mean for onnx, not at run time"),
    "ln_sum_div": ("keep", "layer-norm variance ReduceSum / L_ONNX: not a mean at run time"),
    "qk_rms": ("either", "QK-norm whose head_dim comes from Reshape(., [0, 2, -1]) of that dim"),
    "qk_rms_gamma1": ("either", "QK-norm with a one-element gamma after Reshape of that dim"),
    "gn": ("either", "group norm [N, C, L] -> [N, 2, -1] whose C/G*L comes from that dim"),
}
DIVISOR_REASONS = ("variance-divisor", "unknown-shape", "sum-not-mean", "unbiased-variance")


def _shape_cases(case, KEEP, EITHER, FUSE, nearest) -> None:
    everywhere = ("ln_noaffine", "rms_sum_div")
    for index, spec in enumerate(POOLS):
        op, length, k, s, pads, dil, l_onnx, l_ort = spec
        variants = SHAPE_VARIANTS if index in (0, 3, 6, 9) else everywhere
        for variant in variants:
            key, statement = SHAPE_VARIANTS[variant]
            tag = f"{op.lower()}_l{length}_k{k}_s{s}_p{pads[0]}{pads[1]}_d{dil}"
            case(
                f"a3_{tag}_{variant}",
                C_SHAPES,
                f"{op} ceil_mode=1 (onnx infers {l_onnx}, ORT gives {l_ort}), then {statement}",
                _after_disagreement("pool", spec, variant),
                KEEP(*DIVISOR_REASONS) if key == "keep" else EITHER,
            )
    for spec in CONV_TRANSPOSES:
        length, k, s, out_pad, auto_pad, dil, l_onnx, l_ort = spec
        for variant in ("ln_noaffine", "rms_gamma1", "rms_sum_div", "gn", "qk_rms"):
            key, statement = SHAPE_VARIANTS[variant]
            tag = f"convt_l{length}_k{k}_s{s}_op{out_pad}_{auto_pad.lower()}_d{dil}"
            case(
                f"a3_{tag}_{variant}",
                C_SHAPES,
                f"ConvTranspose {auto_pad} + output_padding (onnx infers {l_onnx}, ORT gives "
                f"{l_ort}), then {statement}",
                _after_disagreement("convt", spec, variant),
                KEEP(*DIVISOR_REASONS) if key == "keep" else EITHER,
            )
    for spec in POOLS_SAME:
        op, length, k, s, auto_pad, dil, l_onnx, l_ort = spec
        for variant in ("ln_noaffine", "rms_gamma1", "rms_sum_div", "gn"):
            key, statement = SHAPE_VARIANTS[variant]
            case(
                f"a3_{op.lower()}_l{length}_k{k}_s{s}_{auto_pad.lower()}_d{dil}_ceil0_{variant}",
                C_SHAPES,
                f"{op} {auto_pad} dilations 2 ceil_mode=0 (onnx infers {l_onnx}, ORT gives "
                f"{l_ort}), then {statement}",
                _after_disagreement("pool", spec, variant, ceil=0, opset=19),
                KEEP(*DIVISOR_REASONS) if key == "keep" else EITHER,
            )
    for spec, ceil in ((POOLS[0], 1), (POOLS_SAME[0], 0), (POOLS_SAME[4], 0)):
        op, length, k, s, pads, dil, l_onnx, l_ort = spec
        for branch in ("then", "else"):
            for variant in ("ln_noaffine", "rms_sum_div", "gn"):
                key, statement = SHAPE_VARIANTS[variant]
                pad = pads.lower() if isinstance(pads, str) else f"p{pads[0]}{pads[1]}"
                case(
                    f"a3_{op.lower()}_l{length}_{pad}_ceil{ceil}_in_{branch}_{variant}",
                    C_SHAPES,
                    f"{op} (onnx infers {l_onnx}, ORT gives {l_ort}), then in the {branch} branch "
                    f"of If(c) {statement} (other branch: Neg); fed c true and false",
                    _after_disagreement("pool", spec, variant, ceil=ceil, branch=branch, opset=19),
                    KEEP(*DIVISOR_REASONS) if key == "keep" else EITHER,
                    fixed=BOTH_BRANCHES,
                )
    trips = ({"M": np.array(0, np.int64)}, {"M": np.array(1, np.int64)})
    for where, fixed in (("loop", trips), ("function_in_else", BOTH_BRANCHES)):
        for variant in ("ln_noaffine", "rms_sum_div", "gn"):
            key, statement = SHAPE_VARIANTS[variant]
            case(
                f"a3_maxpool_same_d2_{where}_{variant}",
                C_SHAPES,
                f"MaxPool SAME_UPPER dilations 2 (onnx 4, ORT 3), then {statement}, inside "
                + (
                    "a Loop body whose trip count is the input M (fed 0 and 1)"
                    if where == "loop"
                    else "local.P called from the else branch of If(c) (fed true and false)"
                ),
                _hidden_site(where, variant),
                KEEP(*DIVISOR_REASONS) if key == "keep" else EITHER,
                fixed=fixed,
            )
    for op in ("MaxPool", "AveragePool"):
        for groups in (4, 8):
            case(
                f"a3_{op.lower()}2d_ceil_gn_g{groups}",
                C_SHAPES,
                f"{op} 2-D k=2 s=2 pads 1 ceil_mode=1 on [1,8,5,5] (onnx infers 4x4, ORT gives "
                f"3x3), then a group norm (G={groups}, per-channel affine) of the pooled tensor",
                _pooled_group_norm(op, groups),
                EITHER,
            )
    # controls: ceil_mode=0, where onnx and ORT agree; a sum / L is then an exact mean
    for spec in (POOLS[0], POOLS[6]):
        op, length, k, s, pads, dil, _, _ = spec
        for variant in ("ln_noaffine", "rms_gamma1"):
            case(
                f"a3_{op.lower()}_l{length}_ceil0_{variant}",
                C_SHAPES,
                f"{op} ceil_mode=0 (onnx and ORT agree), then {SHAPE_VARIANTS[variant][1]}",
                _after_disagreement("pool", spec, variant, ceil=0),
                EITHER,
            )


# ================================================================ class 2: local functions


def _fn_norm(name: str, kind: str, opset: int = 17, body_kind: str = "plain") -> onnx.FunctionProto:
    """local.`name`(fx) -> fy: a norm over the last axis with constants as Constant nodes.

    body_kind: plain (no affine), gamma1 (one-element gamma), sum_div8 (ReduceSum(x^2) / 8, a
    mean only for width 8), castlike (epsilon CastLike x: any float type), shape_div
    (ReduceSum / Cast(Shape(x)[-1]): a mean at every width)."""
    f = G("f_", opset=opset)
    if body_kind in ("sum_div8", "shape_div"):
        total = f.op("ReduceSum", [f.op("Mul", ["fx", "fx"]), f.const_node([-1], dtype=np.int64)])
        if body_kind == "sum_div8":
            divisor = f.const_node(8.0)
        else:
            last = f.op("Gather", [f.op("Shape", ["fx"]), f.const_node([-1], dtype=np.int64)])
            divisor = f.op("Cast", [last], to=F)
        ms = f.op("Div", [total, divisor])
        std = f.op("Sqrt", [f.op("Add", [ms, f.const_node(1e-6)])])
        f.op("Div", ["fx", std], "fy")
    else:
        gamma = f.const_node(np.array([1.5], np.float32)) if body_kind == "gamma1" else None
        eps = f.const_node(1e-5 if kind == "ln" else 1e-6)
        if body_kind == "castlike":
            eps = f.op("CastLike", [eps, "fx"])
        norm(f, "fx", kind=kind, sq="mul", eps=eps, gamma=gamma, out="fy")
    return helper.make_function(
        "local", name, ["fx"], ["fy"], f.nodes, [helper.make_opsetid("", opset)]
    )


def _fn_caller(name: str, callee: str, opset: int = 17, pad: bool = True) -> onnx.FunctionProto:
    """local.`name`(hx) -> hy: concatenates hx with itself on the last axis (width doubles) when
    `pad`, then calls local.`callee`."""
    f = G("h_", opset=opset)
    inner = f.op("Concat", ["hx", "hx"], axis=-1) if pad else f.op("Identity", ["hx"])
    f.nodes.append(helper.make_node(callee, [inner], ["hy"], domain="local"))
    return helper.make_function(
        "local",
        name,
        ["hx"],
        ["hy"],
        f.nodes,
        [helper.make_opsetid("", opset), helper.make_opsetid("local", 1)],
    )


def _functions(variant: str, kind: str = "ln"):
    def build():
        g = G(opset=17)
        call = lambda fn, x, y: g.nodes.append(helper.make_node(fn, [x], [y], domain="local"))  # noqa: E731
        body_kind = {"gamma1": "gamma1", "sum_div8": "sum_div8", "shape_div": "shape_div"}.get(
            variant.split("__")[-1], "castlike" if variant.startswith("float16") else "plain"
        )
        fns = [_fn_norm("N", kind, body_kind=body_kind)]
        inputs = [("x", F, (2, 8))]
        outputs = [("y", F, (2, 8))]
        if variant.startswith("graph8_via16"):
            # N called from the graph with [2, 8] and from H with [2, 16]
            fns.append(_fn_caller("H", "N"))
            call("N", "x", "y")
            call("H", "x", "z")
            outputs.append(("z", F, (2, 16)))
        elif variant.startswith("direct8_16"):
            inputs.append(("x16", F, (2, 16)))
            call("N", "x", "y")
            call("N", "x16", "z")
            outputs.append(("z", F, (2, 16)))
        elif variant.startswith("only_via"):
            depth = int(variant.split("__")[0][-1])
            inputs, outputs = [("x", F, SHAPE)], [("y", F, SHAPE)]
            previous = "N"
            for level in range(depth):
                fns.append(_fn_caller(f"H{level}", previous, pad=False))
                previous = f"H{level}"
            call(previous, "x", "y")
        elif variant.startswith("rank2_rank3"):
            inputs.append(("x3", F, (3, 4, 8)))
            fns.append(_fn_caller("H", "N", pad=False))
            call("N", "x", "y")
            call("H", "x3", "z")
            outputs.append(("z", F, (3, 4, 8)))
        elif variant.startswith("if_branch16"):
            inputs += [("c", BOOL, []), ("x16", F, (2, 16))]
            call("N", "x", "y")
            t = G("t_")
            t.nodes.append(helper.make_node("N", ["x16"], ["t_z"], domain="local"))
            e = G("e_")
            e.op("Neg", ["x16"], "e_z")
            g.nodes.append(
                helper.make_node(
                    "If",
                    ["c"],
                    ["z"],
                    then_branch=body(t, [], [("t_z", F, (2, 16))]),
                    else_branch=body(e, [], [("e_z", F, (2, 16))]),
                )
            )
            outputs.append(("z", F, (2, 16)))
        elif variant.startswith("float16_and_float32"):
            inputs.append(("xh", F16, (2, 8)))
            call("N", "x", "y")
            call("N", "xh", "z")
            outputs.append(("z", F16, (2, 8)))
        elif variant.startswith("loop_body16"):
            inputs.append(("x16", F, (2, 16)))
            call("N", "x", "y")
            lb = G("l_")
            lb.op("Identity", ["l_cond"], "l_cond_out")
            lb.nodes.append(helper.make_node("N", ["l_acc"], ["l_next"], domain="local"))
            loop_body = body(
                lb,
                [("l_i", I64, []), ("l_cond", BOOL, []), ("l_acc", F, (2, 16))],
                [("l_cond_out", BOOL, []), ("l_next", F, (2, 16))],
            )
            trips = g.init(np.array(2, np.int64), dtype=np.int64)
            g.nodes.append(helper.make_node("Loop", [trips, "", "x16"], ["z"], body=loop_body))
            outputs.append(("z", F, (2, 16)))
        else:
            raise ValueError(variant)
        return model(g, inputs, outputs, functions=fns, opsets={"local": 1})

    return build


def _nested_if_function(kind: str, widths: tuple[int, int]):
    """local.B(fx, fc) holds an If whose then-branch is a norm of fx and whose else-branch holds
    another If (on the same condition, negated) with the other norm kind; called from the graph
    with [2, widths[0]] and from local.W (which widens by Concat) with [2, widths[1]]."""

    def build():
        f = G("f_")
        other = "rms" if kind == "ln" else "ln"
        t = G("ft_")
        norm(t, "fx", kind=kind, sq="mul", eps=t.const_node(1e-5), out="ft_y")
        inner_t, inner_e = G("fit_"), G("fie_")
        norm(inner_t, "fx", kind=other, sq="mul", eps=inner_t.const_node(1e-5), out="fit_y")
        inner_e.op("Neg", ["fx"], "fie_y")
        e = G("fe_")
        nc = e.op("Not", ["fc"])
        e.nodes.append(
            helper.make_node(
                "If",
                [nc],
                ["fe_y"],
                then_branch=body(inner_t, [], [("fit_y", F, None)]),
                else_branch=body(inner_e, [], [("fie_y", F, None)]),
            )
        )
        f.nodes.append(
            helper.make_node(
                "If",
                ["fc"],
                ["fy"],
                then_branch=body(t, [], [("ft_y", F, None)]),
                else_branch=body(e, [], [("fe_y", F, None)]),
            )
        )
        fb = helper.make_function(
            "local", "B", ["fx", "fc"], ["fy"], f.nodes, [helper.make_opsetid("", 17)]
        )
        w = G("w_")
        wide = w.op("Concat", ["wx", "wx"], axis=-1)
        w.nodes.append(helper.make_node("B", [wide, "wc"], ["wy"], domain="local"))
        fw = helper.make_function(
            "local",
            "W",
            ["wx", "wc"],
            ["wy"],
            w.nodes,
            [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
        )
        g = G()
        g.nodes.append(helper.make_node("B", ["x", "c"], ["y"], domain="local"))
        outputs = [("y", F, (2, widths[0]))]
        fns = [fb]
        if widths[1] != widths[0]:
            g.nodes.append(helper.make_node("W", ["xw", "c"], ["z"], domain="local"))
            outputs.append(("z", F, (2, widths[1])))
            fns.append(fw)
        inputs = [("x", F, (2, widths[0])), ("c", BOOL, [])]
        if widths[1] != widths[0]:
            inputs.append(("xw", F, (2, widths[1] // 2)))
        return model(g, inputs, outputs, functions=fns, opsets={"local": 1})

    return build


def _growing_loop(kind: str, declared, direct: bool):
    """A Loop (M iterations) whose carried value doubles its width each iteration (Concat of the
    normed value with itself), starting at [2, 8]; the body input declares `declared`. The norm
    is local.N called in the body (or written in the body when `direct`)."""

    def build():
        lb = G("l_")
        lb.op("Identity", ["l_cond"], "l_cond_out")
        if direct:
            eps = lb.init(1e-5 if kind == "ln" else 1e-6)
            normed = norm(lb, "l_acc", kind=kind, sq="mul", eps=eps, out=None)
        else:
            normed = "l_n"
            lb.nodes.append(helper.make_node("N", ["l_acc"], [normed], domain="local"))
        lb.op("Concat", [normed, normed], "l_next", axis=-1)
        loop_body = body(
            lb,
            [("l_i", I64, []), ("l_cond", BOOL, []), ("l_acc", F, declared)],
            [("l_cond_out", BOOL, []), ("l_next", F, (2, None))],
        )
        g = G()
        g.nodes.append(helper.make_node("Loop", ["M", "", "x"], ["y"], body=loop_body))
        functions = [] if direct else [_fn_norm("N", kind)]
        return model(
            g,
            [("x", F, (2, 8)), ("M", I64, [])],
            [("y", F, (2, None))],
            functions=functions,
            opsets=None if direct else {"local": 1},
        )

    return build


def _function_cases(case, KEEP, EITHER, FUSE, nearest) -> None:
    trips = ({"M": np.array(1, np.int64)}, {"M": np.array(3, np.int64)})
    for kind in ("ln", "rms"):
        for declared, tag in (((2, 8), "declared_2x8"), ((2, None), "declared_2xq")):
            for direct in (False, True):
                where = "written in the body" if direct else "in local.N called from the body"
                case(
                    f"a3_fn_loop_growing_{kind}_{tag}_{'direct' if direct else 'call'}",
                    C_FUNCTIONS,
                    f"{kind} {where} of a Loop whose carried value doubles its width each "
                    f"iteration from [2,8]; the body input declares {list(declared)}; fed M = 1, 3",
                    _growing_loop(kind, declared, direct),
                    EITHER,
                    fixed=trips,
                )
    shapes = {
        "graph8_via16": "called from the graph with [2,8] and from local.H with [2,16]",
        "direct8_16": "called twice from the graph, with [2,8] and with [2,16]",
        "rank2_rank3": "called with [2,8] from the graph and [3,4,8] from local.H",
        "if_branch16": "called with [2,8] from the graph and [2,16] from an If branch",
        "loop_body16": "called with [2,8] from the graph and [2,16] from a Loop body",
        "float16_and_float32": "called with float32 [2,8] and float16 [2,8]",
    }
    for variant, where in shapes.items():
        for kind in ("ln", "rms"):
            for body_kind in ("", "__gamma1"):
                if body_kind and variant in ("rank2_rank3", "float16_and_float32", "loop_body16"):
                    continue
                fixed = BOTH_BRANCHES if variant == "if_branch16" else ({},)
                what = "one-element gamma " if body_kind else ""
                case(
                    f"a3_fn_{kind}{body_kind.replace('__', '_')}_{variant}",
                    C_FUNCTIONS,
                    f"local function: {kind} {what}without a sized affine, {where}",
                    _functions(variant + body_kind, kind),
                    EITHER,
                    fixed=fixed,
                )
    for variant in ("graph8_via16", "direct8_16", "if_branch16"):
        fixed = BOTH_BRANCHES if variant == "if_branch16" else ({},)
        case(
            f"a3_fn_sum_div8_{variant}",
            C_FUNCTIONS,
            f"local function RMS with ReduceSum(x^2) / 8, {shapes[variant]}: a mean only at 8",
            _functions(variant + "__sum_div8"),
            KEEP(*DIVISOR_REASONS, "shape-conflict"),
            fixed=fixed,
        )
        case(
            f"a3_fn_shape_div_{variant}",
            C_FUNCTIONS,
            f"local function RMS with ReduceSum(x^2) / Cast(Shape(x)[-1]), {shapes[variant]}",
            _functions(variant + "__shape_div"),
            EITHER,
            fixed=fixed,
        )
    for depth in (1, 2, 3):
        for kind in ("ln", "rms"):
            case(
                f"a3_fn_{kind}_only_via{depth}",
                C_FUNCTIONS,
                f"a {kind} in local.N reached only through {depth} other local function(s)",
                _functions(f"only_via{depth}", kind),
                FUSE("layer-norm" if kind == "ln" else "rms-norm"),
            )
    for kind in ("ln", "rms"):
        for widths in ((16, 16), (8, 16)):
            case(
                f"a3_fn_nested_if_{kind}_w{widths[0]}_{widths[1]}",
                C_FUNCTIONS,
                f"local function holding nested Ifs ({kind} / other norm / Neg), called with "
                f"[2,{widths[0]}]"
                + (f" and via local.W with [2,{widths[1]}]" if widths[1] != widths[0] else ""),
                _nested_if_function(kind, widths),
                EITHER,
                fixed=BOTH_BRANCHES,
            )


# ================================================================ class 3: the constant folder


def _rms_with_divisor(g: G, divisor: str, x: str = "x", eps=1e-6) -> str:
    total = g.reduce("ReduceSum", g.op("Mul", [x, x]), (-1,))
    ms = g.op("Div", [total, divisor])
    std = g.op("Sqrt", [g.op("Add", [ms, g.ref(eps, "eps")])])
    return g.op("Mul", [g.op("Div", [x, std]), g.init(GAMMA)], "y")


def _ln_with_divisor(g: G, divisor: str, x: str = "x") -> str:
    mean = g.reduce("ReduceMean", x, (-1,))
    c = g.op("Sub", [x, mean])
    var = g.op("Div", [g.reduce("ReduceSum", g.op("Mul", [c, c]), (-1,)), divisor])
    std = g.op("Sqrt", [g.op("Add", [var, g.init(1e-5)])])
    return g.op("Add", [g.op("Mul", [g.op("Div", [c, std]), g.init(GAMMA)]), g.init(BETA)], "y")


def _i(g: G, value) -> str:
    return g.init(np.asarray(value, np.int64), dtype=np.int64)


def _shape(g: G) -> str:
    return g.op("Shape", ["x"])


DivisorSpec = Callable[[G], str]


def _reduce_divisor(op: str, value, noop: int, keepdims: int = 1) -> DivisorSpec:
    """op(value) with no axes and noop_with_empty_axes=noop (opset 18: axes is an input)."""

    def make(g: G) -> str:
        return g.op(
            op,
            [g.init(np.asarray(value, np.float32))],
            keepdims=keepdims,
            noop_with_empty_axes=noop,
        )

    return make


def _gather_divisor(index) -> DivisorSpec:
    def make(g: G) -> str:
        picked = g.op("Gather", [_shape(g), _i(g, index)])
        return g.op("Cast", [picked], to=F)

    return make


def _gather2d_divisor(table, index, axis: int) -> DivisorSpec:
    def make(g: G) -> str:
        return g.op("Gather", [g.init(np.asarray(table, np.float32)), _i(g, index)], axis=axis)

    return make


def _slice_divisor(starts, ends, steps, pick) -> DivisorSpec:
    def make(g: G) -> str:
        sliced = g.op("Slice", [_shape(g), _i(g, starts), _i(g, ends), _i(g, [0]), _i(g, steps)])
        picked = g.op("Gather", [sliced, _i(g, pick)]) if pick is not None else sliced
        return g.op("Cast", [picked], to=F)

    return make


def _slice_const_divisor(values, starts, ends, steps) -> DivisorSpec:
    def make(g: G) -> str:
        data = g.init(np.asarray(values, np.float32))
        return g.op("Slice", [data, _i(g, starts), _i(g, ends), _i(g, [0]), _i(g, steps)])

    return make


def _int_div_divisor(num, den, negate: bool, dtype=np.int64) -> DivisorSpec:
    def make(g: G) -> str:
        q = g.op(
            "Div",
            [
                g.init(np.asarray(num, dtype), dtype=dtype),
                g.init(np.asarray(den, dtype), dtype=dtype),
            ],
        )
        if negate:
            q = g.op("Neg", [q])
        return g.op("Cast", [q], to=F)

    return make


def _shape_int_div_divisor() -> DivisorSpec:
    """(Shape(x)[-1] * 2 + 1) / 2 in int64: 33 / 2 truncates to 16."""

    def make(g: G) -> str:
        last = g.op("Gather", [_shape(g), _i(g, [-1])])
        odd = g.op("Add", [g.op("Mul", [last, _i(g, [2])]), _i(g, [1])])
        return g.op("Cast", [g.op("Div", [odd, _i(g, [2])])], to=F)

    return make


def _f8_divisor(value, to: int, saturate: int) -> DivisorSpec:
    def make(g: G) -> str:
        f8 = g.op("Cast", [g.init(np.float32(value))], to=to, saturate=saturate)
        return g.op("Cast", [f8], to=F)

    return make


def _where_divisor(compare_index: int, equals: int) -> DivisorSpec:
    def make(g: G) -> str:
        dim = g.op("Gather", [_shape(g), _i(g, compare_index)])
        cond = g.op("Equal", [dim, _i(g, equals)])
        return g.op("Where", [cond, g.init(np.float32(16.0)), g.init(np.float32(15.0))])

    return make


def _expand_divisor(shape) -> DivisorSpec:
    def make(g: G) -> str:
        ones = g.op("Expand", [g.init(np.float32(1.0)), _i(g, shape)])
        return g.op("ReduceSum", [ones], keepdims=0)

    return make


def _squeeze_divisor(op: str, axes, opset: int) -> DivisorSpec:
    """Squeeze/Unsqueeze of Shape(x)[-1:] with axes as an attribute (opset < 13) or an input."""

    def make(g: G) -> str:
        last = g.op("Slice", [_shape(g), _i(g, [-1]), _i(g, [INT_MAX])])
        attribute = opset < 13
        moved = g.op(op, [last], axes=list(axes)) if attribute else g.op(op, [last, _i(g, axes)])
        return g.op("Cast", [moved], to=F)

    return make


def _reduceprod_shape_divisor(start: int, keepdims: int) -> DivisorSpec:
    def make(g: G) -> str:
        dims = g.op("Slice", [_shape(g), _i(g, [start]), _i(g, [INT_MAX])])
        prod = g.op("ReduceProd", [dims], keepdims=keepdims)
        return g.op("Cast", [prod], to=F)

    return make


def _chain_divisor(value, dtype, ops) -> DivisorSpec:
    """`value` (an initializer of `dtype`) through `ops` ((op_type, extra inputs, attributes)
    each; an extra input is a value of the running dtype), then Cast to float."""

    def make(g: G) -> str:
        t = g.init(np.asarray(value, dtype), dtype=dtype)
        for op, extra, attrs in ops:
            t = g.op(op, [t, *(g.init(np.asarray(v, dtype), dtype=dtype) for v in extra)], **attrs)
        return g.op("Cast", [t], to=F)

    return make


def _shape_attr_divisor(pick, **attrs) -> DivisorSpec:
    """Cast(Gather(Shape(x, start/end), pick)) (Shape-15 attributes)."""

    def make(g: G) -> str:
        return g.op("Cast", [g.op("Gather", [g.op("Shape", ["x"], **attrs), _i(g, pick)])], to=F)

    return make


def _empty_axes_divisor(op: str, value, noop: int) -> DivisorSpec:
    """op(value, axes=[] as an empty input, noop_with_empty_axes=noop)."""

    def make(g: G) -> str:
        empty = g.init(np.zeros(0, np.int64), dtype=np.int64)
        return g.op(op, [g.init(np.asarray(value, np.float32)), empty], noop_with_empty_axes=noop)

    return make


def _folder_model(make: DivisorSpec, kind: str, opset: int, out_shape=SHAPE):
    def build():
        g = G(opset=opset)
        divisor = make(g)
        (_rms_with_divisor if kind == "rms" else _ln_with_divisor)(g, divisor)
        return model(g, outputs=[("y", F, out_shape)])

    return build


def _eps_model(make_eps: Callable[[G], str], opset: int):
    def build():
        g = G(opset=opset)
        norm(g, "x", kind="ln", eps=make_eps(g), gamma=GAMMA, beta=BETA)
        return model(g)

    return build


def _f8_eps(value, to: int, saturate: int):
    def make(g: G) -> str:
        return g.op(
            "Cast", [g.op("Cast", [g.init(np.float32(value))], to=to, saturate=saturate)], to=F
        )

    return make


def _range_axes_model(start, limit, delta, out_shape=SHAPE):
    def build():
        g = G(opset=18)
        axes = g.op("Range", [_i(g, start), _i(g, limit), _i(g, delta)])
        norm(g, "x", kind="ln", axes=axes)
        return model(g, outputs=[("y", F, out_shape)])

    return build


def _concat_model(variant: str):
    def build():
        g = G(opset=18)
        out_shape = SHAPE
        if variant == "reshape_target":
            batch = g.op("Gather", [_shape(g), _i(g, [0])])
            target = g.op("Concat", [batch, _i(g, [-1])], axis=-1)
            flat = g.op("Reshape", ["x", target])
            norm(g, flat, kind="ln")
            out_shape = (2, 80)
        elif variant == "reshape_target_axis0":
            target = g.op("Concat", [_i(g, [10]), _i(g, [2]), _i(g, [8])], axis=0)
            norm(g, g.op("Reshape", ["x", target]), kind="rms", eps=1e-6)
            out_shape = (10, 2, 8)
        elif variant == "gamma_axis_minus1":
            gamma = g.op(
                "Concat",
                [g.init(GAMMA[:8].reshape(1, 8)), g.init(GAMMA[8:].reshape(1, 8))],
                axis=-1,
            )
            norm(g, "x", kind="ln", gamma=gamma, beta=BETA)
        elif variant == "gamma_axis0_rank2":
            # [8,1] and [8,1] on axis 0: a [16, 1] gamma varies along the token axis? No: it
            # broadcasts [16,1] against [2,5,16] -> fails; so reshape it to [16] first.
            stacked = g.op(
                "Concat", [g.init(GAMMA[:8].reshape(8, 1)), g.init(GAMMA[8:].reshape(8, 1))], axis=0
            )
            norm(g, "x", kind="ln", gamma=g.op("Reshape", [stacked, _i(g, [-1])]), beta=BETA)
        elif variant == "gamma_axis1_transposed":
            # [8,1] and [8,1] on axis 1 -> [8, 2]; flattened it interleaves the halves
            stacked = g.op(
                "Concat", [g.init(GAMMA[:8].reshape(8, 1)), g.init(GAMMA[8:].reshape(8, 1))], axis=1
            )
            norm(g, "x", kind="ln", gamma=g.op("Reshape", [stacked, _i(g, [-1])]), beta=BETA)
        else:
            raise ValueError(variant)
        return model(g, outputs=[("y", F, out_shape)])

    return build


def _expand_gamma_model(shape, out_shape=SHAPE):
    def build():
        g = G(opset=18)
        gamma = g.op("Expand", [g.init(np.array([1.5], np.float32)), _i(g, shape)])
        norm(g, "x", kind="rms", eps=1e-6, gamma=gamma)
        return model(g, outputs=[("y", F, out_shape)])

    return build


def _unsqueeze_mean_model(opset: int, axes, out_shape=SHAPE):
    def build():
        g = G(opset=opset)
        mean = g.reduce("ReduceMean", "x", (-1,), keepdims=0)
        mean = (
            g.op("Unsqueeze", [mean], axes=list(axes))
            if opset < 13
            else g.op("Unsqueeze", [mean, _i(g, axes)])
        )
        norm(g, "x", kind="ln", mean=mean, gamma=GAMMA, beta=BETA)
        return model(g, outputs=[("y", F, out_shape)])

    return build


E4, E5 = TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2
NOT_MEAN = (
    "variance-divisor",
    "sum-not-mean",
    "not-rms-norm",
    "not-layer-norm",
    "unbiased-variance",
)


def _folder_cases(case, KEEP, EITHER, FUSE, nearest) -> None:
    ones16 = np.ones(16, np.float32)
    prod16 = np.array([1.0] * 15 + [16.0], np.float32)
    alternating = np.array([15.0, 17.0] * 8, np.float32)
    max16 = np.array([16.0, 1.0] * 8, np.float32)
    exact, not_mean = "exact", "not-mean"
    divisors: list[tuple[str, str, DivisorSpec, str, int]] = [
        # name, statement, divisor, outcome, opset
        (
            "reduceprod_noop1_no_axes",
            "ReduceProd-18(c, noop_with_empty_axes=1): c itself, a per-column divisor [1,..,1,16]",
            _reduce_divisor("ReduceProd", prod16, 1),
            not_mean,
            18,
        ),
        (
            "reduceprod_noop0_no_axes",
            "ReduceProd-18(c=[1,..,1,16]) over every axis = 16",
            _reduce_divisor("ReduceProd", prod16, 0),
            exact,
            18,
        ),
        (
            "reducesum_noop1_no_axes",
            "ReduceSum-13(ones(16), noop_with_empty_axes=1): ones, so the variance is a sum",
            _reduce_divisor("ReduceSum", ones16, 1),
            not_mean,
            13,
        ),
        (
            "reducesum_noop0_no_axes",
            "ReduceSum-13(ones(16)) over every axis = 16",
            _reduce_divisor("ReduceSum", ones16, 0),
            exact,
            13,
        ),
        (
            "reducemean_noop1_no_axes",
            "ReduceMean-18([15,17]*8, noop_with_empty_axes=1): divisors 15 and 17",
            _reduce_divisor("ReduceMean", alternating, 1),
            not_mean,
            18,
        ),
        (
            "reducemean_noop0_no_axes",
            "ReduceMean-18([15,17]*8) = 16",
            _reduce_divisor("ReduceMean", alternating, 0),
            exact,
            18,
        ),
        (
            "reducemax_noop1_no_axes",
            "ReduceMax-18([16,1]*8, noop_with_empty_axes=1): divisors 16 and 1",
            _reduce_divisor("ReduceMax", max16, 1),
            not_mean,
            18,
        ),
        (
            "reducemax_noop0_keepdims0",
            "ReduceMax-18([16,1]*8, keepdims=0) = scalar 16",
            _reduce_divisor("ReduceMax", max16, 0, keepdims=0),
            exact,
            18,
        ),
        (
            "reduceprod_shape_tail_keepdims0",
            "Cast(ReduceProd(Shape(x)[2:], keepdims=0)) = 16",
            _reduceprod_shape_divisor(2, 0),
            exact,
            18,
        ),
        (
            "reduceprod_shape_tail2_keepdims1",
            "Cast(ReduceProd(Shape(x)[1:])) = 80, not 16",
            _reduceprod_shape_divisor(1, 1),
            not_mean,
            18,
        ),
        ("gather_minus1", "Cast(Gather(Shape(x), [-1])) = 16", _gather_divisor([-1]), exact, 17),
        (
            "gather_minus1_scalar",
            "Cast(Gather(Shape(x), -1)) (scalar index) = 16",
            _gather_divisor(-1),
            exact,
            17,
        ),
        ("gather_minus2", "Cast(Gather(Shape(x), [-2])) = 5", _gather_divisor([-2]), not_mean, 17),
        ("gather_minus3", "Cast(Gather(Shape(x), -3)) = 2", _gather_divisor(-3), not_mean, 17),
        (
            "gather2d_axis_minus1_index_minus1",
            "Gather([[5,16]], [-1], axis=-1) = [[16]]",
            _gather2d_divisor([[5, 16]], [-1], -1),
            exact,
            17,
        ),
        (
            "gather2d_axis0_index_minus1",
            "Gather([[16],[5]], -1, axis=0) = [5]",
            _gather2d_divisor([[16], [5]], -1, 0),
            not_mean,
            17,
        ),
        (
            "slice_neg_step_pick0",
            "Slice(Shape(x), [-1], [INT_MIN], steps=[-1]) = [16,5,2], [0] = 16",
            _slice_divisor([-1], [INT_MIN], [-1], [0]),
            exact,
            17,
        ),
        (
            "slice_neg_step_pick_minus1",
            "Slice(Shape(x), [-1], [INT_MIN], steps=[-1]), [-1] = 2",
            _slice_divisor([-1], [INT_MIN], [-1], [-1]),
            not_mean,
            17,
        ),
        (
            "slice_neg_step_one",
            "Slice(Shape(x), [-1], [-2], steps=[-1]) = [16]",
            _slice_divisor([-1], [-2], [-1], None),
            exact,
            17,
        ),
        (
            "slice_neg_step_minus2",
            "Slice(Shape(x), [2], [INT_MIN], steps=[-2]) = [16, 2], [1] = 2",
            _slice_divisor([2], [INT_MIN], [-2], [1]),
            not_mean,
            17,
        ),
        (
            "slice_const_step_minus3",
            "Slice([16,5,2,4], [3], [0], steps=[-3]) = [4] (end excluded)",
            _slice_const_divisor([16, 5, 2, 4], [3], [0], [-3]),
            not_mean,
            17,
        ),
        (
            "slice_const_step_minus3_end_minus3",
            "Slice([4,5,2,16], [-1], [-3], steps=[-3]) = [16]",
            _slice_const_divisor([4, 5, 2, 16], [-1], [-3], [-3]),
            exact,
            17,
        ),
        (
            "int_div_trunc_neg_31",
            "Neg(Div(int64 -31, 2)) = 15 (truncation; floor would say 16)",
            _int_div_divisor(-31, 2, True),
            not_mean,
            17,
        ),
        (
            "int_div_trunc_neg_33",
            "Neg(Div(int64 -33, 2)) = 16 (truncation; floor would say 17)",
            _int_div_divisor(-33, 2, True),
            exact,
            17,
        ),
        ("int_div_33_by_2", "Div(int64 33, 2) = 16", _int_div_divisor(33, 2, False), exact, 17),
        (
            "int32_div_neg_by_neg",
            "Div(int32 -33, -2) = 16",
            _int_div_divisor(-33, -2, False, np.int32),
            exact,
            17,
        ),
        (
            "int_div_31_by_minus2",
            "Neg(Div(int64 31, -2)) = 15 (floor would say 16)",
            _int_div_divisor(31, -2, True),
            not_mean,
            17,
        ),
        (
            "int_div_shape_arith",
            "Div(Shape(x)[-1] * 2 + 1, 2) = 16 in int64",
            _shape_int_div_divisor(),
            exact,
            17,
        ),
        (
            "f8e4m3_17_rounds_to_16",
            "Cast(Cast(17, float8e4m3fn)) = 16",
            _f8_divisor(17.0, E4, 1),
            exact,
            19,
        ),
        (
            "f8e4m3_16_5_rounds_to_16",
            "Cast(Cast(16.5, float8e4m3fn)) = 16",
            _f8_divisor(16.5, E4, 1),
            exact,
            19,
        ),
        (
            "f8e4m3_15_rounds_to_16",
            "Cast(Cast(15, float8e4m3fn)) = 15 (representable: 15)",
            _f8_divisor(15.0, E4, 1),
            not_mean,
            19,
        ),
        (
            "f8e5m2_18_rounds_to_16",
            "Cast(Cast(18, float8e5m2)) = 16",
            _f8_divisor(18.0, E5, 0),
            exact,
            19,
        ),
        (
            "where_shape_true",
            "Where(Shape(x)[-1] == 16, 16, 15) = 16",
            _where_divisor(-1, 16),
            exact,
            17,
        ),
        (
            "where_shape_false",
            "Where(Shape(x)[-2] == 16, 16, 15) = 15",
            _where_divisor(-2, 16),
            not_mean,
            17,
        ),
        (
            "expand_ones_16",
            "ReduceSum(Expand(1, [16]), keepdims=0) = 16",
            _expand_divisor([16]),
            exact,
            13,
        ),
        (
            "expand_ones_4x4",
            "ReduceSum(Expand(1, [4, 4]), keepdims=0) = 16",
            _expand_divisor([4, 4]),
            exact,
            13,
        ),
        (
            "expand_ones_5",
            "ReduceSum(Expand(1, [5]), keepdims=0) = 5",
            _expand_divisor([5]),
            not_mean,
            13,
        ),
        (
            "squeeze_attr_opset11",
            "Cast(Squeeze(Shape(x)[-1:], axes=[0])) (attribute) = 16",
            _squeeze_divisor("Squeeze", [0], 11),
            exact,
            11,
        ),
        (
            "squeeze_input_opset13",
            "Cast(Squeeze(Shape(x)[-1:], [0])) (input) = 16",
            _squeeze_divisor("Squeeze", [0], 13),
            exact,
            13,
        ),
        (
            "unsqueeze_attr_opset11",
            "Cast(Unsqueeze(Shape(x)[-1:], axes=[-1])) = [[16]]",
            _squeeze_divisor("Unsqueeze", [-1], 11),
            exact,
            11,
        ),
        (
            "unsqueeze_input_opset13",
            "Cast(Unsqueeze(Shape(x)[-1:], [0])) = [[16]]",
            _squeeze_divisor("Unsqueeze", [0], 13),
            exact,
            13,
        ),
    ]
    int64, f32 = np.int64, np.float32
    divisors += [
        (
            "mod_int_neg_33_17",
            "Abs(Mod(int64 -33, 17)) = 1 (the divisor's sign; C's % says 16)",
            _chain_divisor(-33, int64, [("Mod", [17], {}), ("Abs", [], {})]),
            not_mean,
            18,
        ),
        (
            "mod_int_33_17",
            "Mod(int64 33, 17) = 16",
            _chain_divisor(33, int64, [("Mod", [17], {})]),
            exact,
            18,
        ),
        (
            "mod_fmod_neg_33_17",
            "Abs(Mod(-33.0, 17.0, fmod=1)) = 16",
            _chain_divisor(-33.0, f32, [("Mod", [17.0], {"fmod": 1}), ("Abs", [], {})]),
            exact,
            18,
        ),
        (
            "mod_fmod0_int_neg_1_17",
            "Mod(int64 -1, 17) = 16 (the divisor's sign)",
            _chain_divisor(-1, int64, [("Mod", [17], {})]),
            exact,
            18,
        ),
        (
            "cast_trunc_neg_16_7",
            "Neg(Cast(-16.7 -> int64)) = 16 (toward zero)",
            _chain_divisor(-16.7, f32, [("Cast", [], {"to": I64}), ("Neg", [], {})]),
            exact,
            18,
        ),
        (
            "cast_trunc_neg_15_3",
            "Neg(Cast(-15.3 -> int64)) = 15 (floor would say 16)",
            _chain_divisor(-15.3, f32, [("Cast", [], {"to": I64}), ("Neg", [], {})]),
            not_mean,
            18,
        ),
        (
            "cast_trunc_16_9",
            "Cast(16.9 -> int64) = 16 (rounding would say 17)",
            _chain_divisor(16.9, f32, [("Cast", [], {"to": I64})]),
            exact,
            18,
        ),
        (
            "cast_int64_272_uint8",
            "Cast(int64 272 -> uint8) = 16 (wraps)",
            _chain_divisor(272, int64, [("Cast", [], {"to": TensorProto.UINT8})]),
            exact,
            18,
        ),
        (
            "shape_end_minus1_last",
            "Cast(Gather(Shape(x, end=-1), [-1])) = 5 (not 16)",
            _shape_attr_divisor([-1], end=-1),
            not_mean,
            18,
        ),
        (
            "shape_start_minus1",
            "Cast(Gather(Shape(x, start=-1), [0])) = 16",
            _shape_attr_divisor([0], start=-1),
            exact,
            18,
        ),
        (
            "shape_start1_end2",
            "Cast(Gather(Shape(x, start=1, end=2), [0])) = 5",
            _shape_attr_divisor([0], start=1, end=2),
            not_mean,
            18,
        ),
        (
            "reducesum_empty_axes_noop1",
            "ReduceSum(ones(16), axes=[], noop_with_empty_axes=1): ones",
            _empty_axes_divisor("ReduceSum", ones16, 1),
            not_mean,
            18,
        ),
        (
            "reducesum_empty_axes_noop0",
            "ReduceSum(ones(16), axes=[]) = 16",
            _empty_axes_divisor("ReduceSum", ones16, 0),
            exact,
            18,
        ),
        (
            "reducesumsquare_noop1",
            "ReduceSumSquare-18(ones(16), noop_with_empty_axes=1): ones",
            _reduce_divisor("ReduceSumSquare", ones16, 1),
            not_mean,
            18,
        ),
        (
            "reducesumsquare_noop0",
            "ReduceSumSquare-18(ones(16)) = 16",
            _reduce_divisor("ReduceSumSquare", ones16, 0),
            exact,
            18,
        ),
        (
            "reducel1_noop1",
            "ReduceL1-18(-ones(16), noop_with_empty_axes=1): -1s",
            _reduce_divisor("ReduceL1", -ones16, 1),
            not_mean,
            18,
        ),
    ]
    for name, statement, make, outcome, opset in divisors:
        kinds = (
            ("rms", "ln")
            if name
            in (
                "reduceprod_noop1_no_axes",
                "reducesum_noop1_no_axes",
                "int_div_trunc_neg_31",
                "int_div_trunc_neg_33",
                "f8e4m3_17_rounds_to_16",
                "gather_minus2",
                "slice_neg_step_pick0",
            )
            else ("rms",)
        )
        for kind in kinds:
            expect = (
                KEEP(*NOT_MEAN)
                if outcome == not_mean
                else FUSE("rms-norm" if kind == "rms" else "layer-norm")
            )
            case(
                f"a3_fold_{kind}_{name}",
                C_FOLDER,
                f"{kind} whose variance divisor is {statement}",
                _folder_model(make, kind, opset),
                expect,
            )
    eps_cases = [
        (
            "f8e4m3_saturate_1000",
            "Cast(Cast(1000, float8e4m3fn, saturate=1)) = 448",
            _f8_eps(1000.0, E4, 1),
            EITHER,
        ),
        (
            "f8e4m3_no_saturate_1000",
            "Cast(Cast(1000, float8e4m3fn, saturate=0)) = NaN",
            _f8_eps(1000.0, E4, 0),
            KEEP("epsilon-not-positive", "epsilon-not-constant"),
        ),
        (
            "f8e5m2_no_saturate_1e5",
            "Cast(Cast(1e5, float8e5m2, saturate=0)) = inf",
            _f8_eps(1e5, E5, 0),
            KEEP("epsilon-not-positive", "epsilon-not-constant", "epsilon-not-float32"),
        ),
        (
            "f8e4m3_tiny_flushes_to_0",
            "Cast(Cast(1e-5, float8e4m3fn)) = 0",
            _f8_eps(1e-5, E4, 1),
            KEEP("epsilon-not-positive"),
        ),
    ]
    for name, statement, make, expect in eps_cases:
        case(
            f"a3_fold_eps_{name}",
            C_FOLDER,
            f"layer norm whose epsilon is {statement}",
            _eps_model(make, 19),
            expect,
        )
    ranges = [
        ("minus1_0_1", (-1, 0, 1), FUSE("layer-norm"), SHAPE),
        ("2_3_1", (2, 3, 1), FUSE("layer-norm"), SHAPE),
        ("2_0_minus1", (2, 0, -1), EITHER, SHAPE),
        ("0_3_2", (0, 3, 2), KEEP("non-trailing-axes", "batch-axis"), SHAPE),
        (
            "1_minus4_minus3",
            (1, -4, -3),
            KEEP("non-trailing-axes", "batch-axis", "unknown-axes"),
            SHAPE,
        ),
    ]
    for name, (start, limit, delta), expect, out_shape in ranges:
        case(
            f"a3_fold_range_axes_{name}",
            C_FOLDER,
            f"layer norm whose axes are Range({start}, {limit}, {delta})",
            _range_axes_model(start, limit, delta, out_shape),
            expect,
        )
    concats = {
        "reshape_target": (EITHER, "LN of Reshape(x, Concat(Shape(x)[0:1], [-1])) = [2, 80]"),
        "reshape_target_axis0": (EITHER, "RMS of Reshape(x, Concat([10],[2],[8], axis=0))"),
        "gamma_axis_minus1": (FUSE("layer-norm"), "gamma Concat([1,8],[1,8], axis=-1) = [1,16]"),
        "gamma_axis0_rank2": (FUSE("layer-norm"), "gamma Reshape(Concat([8,1],[8,1], axis=0))"),
        "gamma_axis1_transposed": (
            EITHER,
            "gamma Reshape(Concat([8,1],[8,1], axis=1)): the halves interleaved",
        ),
    }
    for name, (expect, statement) in concats.items():
        case(f"a3_fold_concat_{name}", C_FOLDER, statement, _concat_model(name), expect)
    for shape, out_shape in (((16,), SHAPE), ((5, 16), SHAPE), ((1, 1, 1, 16), (1, *SHAPE))):
        case(
            f"a3_fold_expand_gamma_{'x'.join(map(str, shape))}",
            C_FOLDER,
            f"RMS norm whose gamma is Expand([1.5], {list(shape)})",
            _expand_gamma_model(shape, out_shape),
            EITHER,
        )
    for opset, axes, expect in (
        (11, [-1], FUSE("layer-norm")),
        (11, [2], FUSE("layer-norm")),
        (13, [-1], FUSE("layer-norm")),
        (13, [2], FUSE("layer-norm")),
    ):
        case(
            f"a3_fold_unsqueeze_mean_opset{opset}_axes{axes[0]}",
            C_FOLDER,
            f"layer norm whose mean is Unsqueeze(ReduceMean(keepdims=0), {axes}) at opset {opset}",
            _unsqueeze_mean_model(opset, axes),
            expect,
        )


# ================================================================ class 4: residual fusion

H = 16
RSHAPE = (2, 4, H)


def _offset_rows(shape, seed: int, dtype=np.float32, centre=1000.0, spread=1e-3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (centre + spread * rng.standard_normal(shape)).astype(dtype)


def _norm_op(g: G, x: str, kind: str, eps: float, gamma, beta, out: str | None = None) -> str:
    """The norm as the op a model may already hold: LayerNormalization-17 (ln) or
    RMSNormalization-23 (rms; `g` must be at opset 23), over the last axis, float32 statistics."""
    out = out or g.fresh("normed")
    inputs = [x, g.init(gamma, dtype=gamma.dtype)]
    if kind == "ln":
        inputs.append(g.init(beta, dtype=beta.dtype))
        node = helper.make_node("LayerNormalization", inputs, [out], axis=-1, epsilon=eps)
    else:
        node = helper.make_node(
            "RMSNormalization", inputs, [out], axis=-1, epsilon=eps, stash_type=1
        )
    g.nodes.append(node)
    return out


def _residual(order: str, kind: str = "ln", dtype=np.float32, **kw):
    """h = a, s and a constant bias b added in `order`; y = norm(h) (gamma, and beta for ln).

    order: "ab_s" (a + b) + s, "as_b" (a + s) + b, "b_as" b + (a + s), "s_ab" s + (a + b),
    "ba_s" (b + a) + s, "sa_b" (s + a) + b, "as" a + s (no bias), "ab_s_b2" ((a + b) + s) + b2.
    kw: bias_shape, skip_shape, a_shape (dims may be names), sum_out (h also an output), eps,
    op (the norm is already one op: only residual fusion can change the model)."""

    def build():
        g = G(opset=23 if kw.get("op") and kind == "rms" else 17, dtype=dtype)
        elem = ELEM[dtype]
        a_shape = kw.get("a_shape", RSHAPE)
        s_shape = kw.get("skip_shape", a_shape)
        bias_shape = kw.get("bias_shape", (H,))
        b = g.init(np.linspace(-0.3, 0.7, H).reshape(bias_shape).astype(dtype), "bias_b")
        spell = {
            "ab_s": lambda: g.op("Add", [g.op("Add", ["a", b]), "s"]),
            "as_b": lambda: g.op("Add", [g.op("Add", ["a", "s"]), b]),
            "b_as": lambda: g.op("Add", [b, g.op("Add", ["a", "s"])]),
            "s_ab": lambda: g.op("Add", ["s", g.op("Add", ["a", b])]),
            "ba_s": lambda: g.op("Add", [g.op("Add", [b, "a"]), "s"]),
            "sa_b": lambda: g.op("Add", [g.op("Add", ["s", "a"]), b]),
            "as": lambda: g.op("Add", ["a", "s"]),
            "ab_s_b2": lambda: g.op(
                "Add",
                [
                    g.op("Add", [g.op("Add", ["a", b]), "s"]),
                    g.init(np.linspace(0.2, -0.2, H).astype(dtype)),
                ],
            ),
        }
        h = spell[order]()
        eps = kw.get("eps", 1e-5 if kind == "ln" else 1e-6)
        gamma = np.linspace(0.5, 1.5, H).astype(dtype)
        beta = np.linspace(-0.5, 0.5, H).astype(dtype) if kind == "ln" else None
        if kw.get("op"):
            _norm_op(g, h, kind, eps, gamma, beta, "y")
        else:
            norm(g, h, kind=kind, eps=eps, gamma=gamma, beta=beta)
        out_shape = kw.get("out_shape", a_shape)
        outputs = [("y", elem, out_shape)]
        if kw.get("sum_out"):
            g.op("Identity", [h], "h_out")
            outputs.append(("h_out", elem, out_shape))
        return model(g, [("a", elem, a_shape), ("s", elem, s_shape)], outputs)

    return build


def _offset_feeds(
    dtype=np.float32, shape=RSHAPE, skip_shape=None, centre=1000.0, spread=1e-3
) -> tuple:
    """The profiles, plus rows of `centre` +- `spread` (where float association shows)."""
    return (
        {},
        {
            "a": _offset_rows(shape, 1, dtype, centre, spread),
            "s": _offset_rows(skip_shape or shape, 2, dtype, 0.0, spread),
        },
    )


def _f16_rounding_feeds() -> tuple:
    """a = 100 exactly, s = 0.01 N(0,1): in float16 a + s rounds to 100 (a constant row)."""
    rng = np.random.default_rng(3)
    return (
        {},
        {
            "a": np.full(RSHAPE, 100.0, np.float16),
            "s": (0.01 * rng.standard_normal(RSHAPE)).astype(np.float16),
        },
    )


def _prenorm_chain(kind: str, bias_first: bool):
    """h1 = a + s; y1 = norm(h1); h2 = (h1 + b) + y1 or (h1 + y1) + b; y = norm(h2), each norm
    already one op (LayerNormalization / RMSNormalization-23)."""

    def build():
        g = G(opset=23 if kind == "rms" else 17)
        h1 = g.op("Add", ["a", "s"])
        gamma = np.linspace(0.5, 1.5, H).astype(np.float32)
        beta = BETA if kind == "ln" else None
        eps = 1e-5 if kind == "ln" else 1e-6
        y1 = _norm_op(g, h1, kind, eps, gamma, beta)
        b = g.init(np.linspace(-0.3, 0.7, H).astype(np.float32), "bias_b")
        if bias_first:
            h2 = g.op("Add", [g.op("Add", [h1, b]), y1])
        else:
            h2 = g.op("Add", [g.op("Add", [h1, y1]), b])
        _norm_op(g, h2, kind, eps, gamma[::-1].copy(), beta, "y")
        return model(g, [("a", F, RSHAPE), ("s", F, RSHAPE)], [("y", F, RSHAPE)])

    return build


DYN = ("batch", "seq", H)


def _residual_dynamic(variant: str):
    """A dynamic export's residual: a [batch, seq, H] plus a skip whose shape is built at run
    time (Expand to Shape(a) or to [batch, 1, H]) or declared with its own symbolic dims, then a
    decomposed layer norm."""

    def build():
        g = G(opset=18)
        inputs = [("a", F, DYN)]
        if variant.startswith("expand"):
            inputs.append(("t", F, (1, 1, H)))
            shape = g.op("Shape", ["a"])
            if variant == "expand_partial":
                batch = g.op("Slice", [shape, _i(g, [0]), _i(g, [1])])
                shape = g.op("Concat", [batch, _i(g, [1]), _i(g, [H])], axis=0)
            skip = g.op("Expand", ["t", shape])
        else:
            inputs.append(
                ("s", F, {"seq1": ("batch", 1, H), "hidden": ("batch", "seq", "h")}[variant])
            )
            skip = "s"
        h = g.op("Add", ["a", skip])
        norm(g, h, kind="ln", gamma=GAMMA, beta=BETA)
        return model(g, inputs, [("y", F, DYN)])

    return build


def _residual_cases(case, KEEP, EITHER, FUSE, nearest) -> None:
    rng = np.random.default_rng(5)
    dynamic = {
        "expand_full": ("s = Expand(t [1,1,H], Shape(a)): the same shape as a", ({},)),
        "expand_partial": ("s = Expand(t, [batch, 1, H]): broadcasts over seq", ({},)),
        "seq1": ("s declared [batch, 1, H]: broadcasts over seq", ({},)),
        "hidden": (
            "s declared [batch, seq, h], fed with h = 1 and h = H",
            (
                {"s": rng.normal(0, 1, (2, 2, 1)).astype(np.float32)},
                {"s": rng.normal(0, 1, (2, 2, H)).astype(np.float32)},
            ),
        ),
    }
    for name, (statement, fixed) in dynamic.items():
        case(
            f"a3_res_ln_dynamic_{name}",
            C_RESIDUAL,
            f"a [batch, seq, H] + {statement}, then a layer norm",
            _residual_dynamic(name),
            FUSE("layer-norm"),
            fixed=fixed,
        )
    orders = {
        "as": "a + s (no bias)",
        "ab_s": "(a + b) + s",
        "as_b": "(a + s) + b",
        "b_as": "b + (a + s)",
        "s_ab": "s + (a + b)",
        "ba_s": "(b + a) + s",
        "sa_b": "(s + a) + b",
        "ab_s_b2": "((a + b) + s) + b2",
    }
    norm_kind = {"ln": "layer-norm", "rms": "rms-norm"}
    for order, spelled in orders.items():
        for kind in ("ln", "rms"):
            op = "LayerNormalization" if kind == "ln" else "RMSNormalization"
            case(
                f"a3_res_{kind}_op_{order}",
                C_RESIDUAL,
                f"residual {spelled} (b a constant bias [H]) feeding an existing {op}; "
                "rows 1000 +- 1e-3 (float association shows)",
                _residual(order, kind, op=True),
                EITHER,
                fixed=_offset_feeds(),
            )
            if order in ("ab_s", "as_b", "s_ab"):  # "as": the shaped cases below
                case(
                    f"a3_res_{kind}_{order}",
                    C_RESIDUAL,
                    f"residual {spelled} (b a constant bias [H]) feeding a decomposed {kind}",
                    _residual(order, kind),
                    FUSE(norm_kind[kind]),
                )
            if order in ("ab_s", "as_b"):
                case(
                    f"a3_res_{kind}_op_{order}_sum_used",
                    C_RESIDUAL,
                    f"residual {spelled} feeding an existing {op}, the sum also a graph output; "
                    "rows 1000 +- 1e-3",
                    _residual(order, kind, op=True, sum_out=True),
                    EITHER,
                    fixed=_offset_feeds(),
                )
    out4 = (1, *RSHAPE)
    shaped = {
        "bias_1_1_1_h_after": (
            "as_b",
            {"bias_shape": (1, 1, 1, H), "out_shape": out4},
            "(a + s) + b with b [1,1,1,H]: output rank 4",
        ),
        "bias_1_1_1_h_before": (
            "ab_s",
            {"bias_shape": (1, 1, 1, H), "out_shape": out4},
            "(a + b) + s with b [1,1,1,H]: output rank 4",
        ),
        "bias_1_1_h": ("as_b", {"bias_shape": (1, 1, H)}, "(a + s) + b with b [1,1,H]"),
        "skip_1_s_h": ("as", {"skip_shape": (1, 4, H)}, "a [B,S,H] + s [1,S,H]"),
        "skip_h": ("as", {"skip_shape": (H,)}, "a [B,S,H] + s [H]"),
        "skip_s_h": ("as", {"skip_shape": (4, H)}, "a [B,S,H] + s [S,H]"),
        "skip_s_h_bias": ("as_b", {"skip_shape": (4, H)}, "(a [B,S,H] + s [S,H]) + b"),
        "a_broadcast_b_1_h": (
            "as",
            {"a_shape": (1, 4, H), "skip_shape": RSHAPE, "out_shape": RSHAPE},
            "a [1,S,H] + s [B,S,H]",
        ),
    }
    for name, (order, kw, spelled) in shaped.items():
        for kind in ("ln", "rms"):
            if kind == "rms" and name not in ("bias_1_1_1_h_after", "skip_s_h"):
                continue
            case(
                f"a3_res_{kind}_{name}",
                C_RESIDUAL,
                f"residual {spelled} feeding a {kind}",
                _residual(order, kind, **kw),
                FUSE("layer-norm" if kind == "ln" else "rms-norm"),
            )
    for order in ("as", "as_b", "ab_s"):
        for kind in ("ln", "rms"):
            case(
                f"a3_res_{kind}_op_float16_{order}",
                C_RESIDUAL,
                f"float16 residual {orders.get(order, 'a + s')} feeding an existing float16 "
                f"{kind} op; a = 100, s = 0.01 N(0,1) (the float16 sum is a constant row)",
                _residual(order, kind, dtype=np.float16, op=True),
                EITHER,
                fixed=_f16_rounding_feeds(),
            )
        case(
            f"a3_res_ln_float16_{order}",
            C_RESIDUAL,
            f"float16 residual {orders.get(order, 'a + s')} feeding a decomposed float16 ln",
            _residual(order, "ln", dtype=np.float16),
            FUSE("layer-norm"),
        )
    for order in ("as", "as_b"):
        for kind in ("ln", "rms"):
            case(
                f"a3_res_{kind}_float64_{order}",
                C_RESIDUAL,
                f"float64 residual {orders.get(order, 'a + s')} feeding a float64 {kind} "
                "(epsilon 2^-17, a float32)",
                _residual(order, kind, dtype=np.float64, eps=2.0**-17),
                EITHER,
                fixed=_offset_feeds(np.float64),
            )
    symbolic = {
        "same_names": (("batch", "seq", H), ("batch", "seq", H), ({},)),
        "other_names": (
            ("batch", "seq", H),
            ("b2", "s2", H),
            (
                {},
                {"s": np.full((1, 2, H), 0.5, np.float32)},
                {"s": np.full((2, 1, H), 0.5, np.float32)},
            ),
        ),
        "skip_static_a_symbolic": (("batch", "seq", H), (2, 2, H), ({},)),
    }
    for name, (a_shape, s_shape, fixed) in symbolic.items():
        for order in ("as", "as_b"):
            case(
                f"a3_res_ln_symbolic_{name}_{order}",
                C_RESIDUAL,
                f"residual {orders.get(order, 'a + s')} with a {list(a_shape)}, s {list(s_shape)}",
                _residual(
                    order, "ln", a_shape=a_shape, skip_shape=s_shape, out_shape=("batch", "seq", H)
                ),
                EITHER,
                fixed=fixed,
            )
    for kind in ("ln", "rms"):
        for bias_first in (True, False):
            case(
                f"a3_res_{kind}_prenorm_chain_{'bias_first' if bias_first else 'bias_last'}",
                C_RESIDUAL,
                f"pre-norm chain of existing ops: y1 = {kind}(a + s); y = {kind}("
                + ("((a + s) + b) + y1" if bias_first else "((a + s) + y1) + b")
                + ")",
                _prenorm_chain(kind, bias_first),
                EITHER,
                fixed=_offset_feeds(),
            )


# ================================================================ class 5: group norm

GN = (1, 8, 5, 5)


def _gn_model(variant: str):
    """Group norm spellings (statistics as elementary ops between two Reshapes)."""

    def build():
        shape = GN
        groups = 4
        dtype = np.float32
        if variant.startswith("diffusers_f16"):
            dtype = np.float16
        if variant in ("g4_c6", "g4_c6_back_const"):
            shape = (1, 6, 4, 4)
        if variant == "g3_c8":
            shape = (1, 8, 3, 3)
            groups = 3
        g = G(dtype=dtype)
        elem = ELEM[dtype]
        c = shape[1]
        x = "x"
        target = g.init([0, groups, -1], "groups", np.int64)
        affine_dtype = np.float32 if variant == "diffusers_f16_cast_first" else dtype
        gamma = g.init(np.linspace(0.5, 1.5, c).reshape(c, 1, 1), "gn_gamma", affine_dtype)
        beta = g.init(np.linspace(-1, 1, c).reshape(c, 1, 1), "gn_beta", affine_dtype)
        if variant == "diffusers_f16_cast_first":
            x = g.op("Cast", [x], to=F)
            g.dtype = np.float32
        grouped = g.op("Reshape", [x, target])
        if variant in ("diffusers_f16", "diffusers_f16_affine_f32", "diffusers_f16_silu"):
            grouped = g.op("Cast", [grouped], to=F)
            g.dtype = np.float32
        shared = ("three_share_var", "mean_minus_x_share_std", "mean_minus_x", "mean_minus_x_both")
        if variant in shared:
            mean = g.reduce("ReduceMean", grouped, (-1,))
            cen = g.op("Sub", [mean, grouped] if variant.endswith("both") else [grouped, mean])
            var = g.reduce("ReduceMean", g.op("Mul", [cen, cen]), (-1,))
            std = g.op("Sqrt", [g.op("Add", [var, g.init(1e-5)])])
            outs = []
            if variant == "three_share_var":
                numerators = [cen, cen, cen]
            elif variant == "mean_minus_x_both":
                numerators = [cen]
            else:
                negated = g.op("Sub", [mean, grouped])
                numerators = [cen, negated] if variant == "mean_minus_x_share_std" else [negated]
            for index, num in enumerate(numerators):
                normed = g.op("Div", [num, std])
                back = g.op("Reshape", [normed, g.op("Shape", ["x"])])
                scale = g.init(np.linspace(0.5, 1.5, c).reshape(c, 1, 1) * (index + 1))
                outs.append(g.op("Add", [g.op("Mul", [back, scale]), beta], f"y{index}"))
            return model(g, [("x", elem, shape)], [(o, elem, shape) for o in outs])
        normed = norm(g, grouped, kind="ln", out=None)
        if variant in ("diffusers_f16", "diffusers_f16_silu"):
            normed = g.op("Cast", [normed], to=F16)
            g.dtype = np.float16
        backs = {
            "back_n_c_minus1_w": [1, c, -1, shape[3]],
            "back_0_c_minus1_w": [0, c, -1, shape[3]],
            "back_n_c_h_minus1": [1, c, shape[2], -1],
            "back_minus1_c_h_w": [-1, c, shape[2], shape[3]],
            "g4_c6_back_const": list(shape),
        }
        if variant in backs:
            back_shape = g.init(backs[variant], "back", np.int64)
        else:
            back_shape = g.op("Shape", ["x"])
        back = g.op("Reshape", [normed, back_shape])
        if variant == "diffusers_f16_affine_f32":
            gamma = g.init(np.linspace(0.5, 1.5, c).reshape(c, 1, 1).astype(np.float32))
            beta = g.init(np.linspace(-1, 1, c).reshape(c, 1, 1).astype(np.float32))
        y = g.op("Add", [g.op("Mul", [back, gamma]), beta])
        if variant == "diffusers_f16_affine_f32":
            y = g.op("Cast", [y], to=F16)
        if variant == "diffusers_f16_cast_first":
            y = g.op("Cast", [y], to=F16)
        if variant == "diffusers_f16_silu":
            y = g.op("Mul", [y, g.op("Sigmoid", [y])])
        g.op("Identity", [y], "y")
        return model(g, [("x", elem, shape)], [("y", elem, shape)])

    return build


def _gn_cast_first_back(variant: str):
    """float16 x -> Cast(f32) -> Reshape [0, 4, -1] -> statistics -> Reshape back -> Cast(f16),
    no affine; the Reshape back's target is `Shape` of x (x's shape: a group norm), of another
    float16 input z of x's rank and size (shape_other), of a Transpose of x (shape_transposed),
    or x's dims in another order by `Shape` start/end slices (shape_sliced)."""

    def build():
        shape = (1, 8, 5, 4) if variant == "shape_transposed" else GN
        g = G(dtype=np.float32)
        x = g.op("Cast", ["x"], to=F)
        grouped = g.op("Reshape", [x, g.init([0, 4, -1], "groups", np.int64)])
        normed = norm(g, grouped, kind="ln", out=None)
        inputs = [("x", F16, shape)]
        out_shape = shape
        if variant == "shape_of_x":
            back_shape = g.op("Shape", ["x"])
        elif variant == "shape_other":
            out_shape = (1, 8, 25, 1)
            inputs.append(("z", F16, out_shape))
            back_shape = g.op("Shape", ["z"])
        elif variant == "shape_transposed":
            out_shape = (1, 8, 4, 5)
            back_shape = g.op("Shape", [g.op("Transpose", ["x"], perm=[0, 1, 3, 2])])
        elif variant == "shape_sliced":
            out_shape = (1, 5, 8, 5)
            windows = [(0, 1), (2, 3), (1, 2), (3, 4)]
            parts = [g.op("Shape", ["x"], start=lo, end=hi) for lo, hi in windows]
            back_shape = g.op("Concat", parts, axis=0)
        else:
            raise ValueError(variant)
        back = g.op("Reshape", [normed, back_shape])
        g.op("Cast", [back], "y", to=F16)
        return model(g, inputs, [("y", F16, out_shape)])

    return build


def _ln_shared(variant: str):
    """Layer norms over the last axis sharing statistics: three Divs by one std, or x - m and
    m - x over one std."""

    def build():
        g = G()
        mean = g.reduce("ReduceMean", "x", (-1,))
        cen = g.op("Sub", ["x", mean])
        var = g.reduce("ReduceMean", g.op("Mul", [cen, cen]), (-1,))
        std = g.op("Sqrt", [g.op("Add", [var, g.init(1e-5)])])
        if variant.startswith("three_share_var"):
            numerators = [cen, cen, cen]
        else:
            numerators = [cen, g.op("Sub", [mean, "x"])]
        outs = []
        for index, num in enumerate(numerators):
            s = std
            if variant == "three_share_var_two_std" and index == 2:
                s = g.op("Sqrt", [g.op("Add", [var, g.init(1e-5)])])
            normed = g.op("Div", [num, s])
            outs.append(
                g.op(
                    "Add",
                    [g.op("Mul", [normed, g.init(GAMMA * (index + 1))]), g.init(BETA)],
                    f"y{index}",
                )
            )
        return model(g, outputs=[(o, F, SHAPE) for o in outs])

    return build


def _group_cases(case, KEEP, EITHER, FUSE, nearest) -> None:
    gn = {
        "diffusers_f16": "diffusers float16: Reshape -> Cast(f32) -> statistics -> Cast(f16) -> "
        "Reshape -> float16 affine",
        "diffusers_f16_affine_f32": "float16 x, Reshape -> Cast(f32) -> statistics -> Reshape "
        "-> float32 affine -> Cast(f16)",
        "diffusers_f16_cast_first": "float16 x -> Cast(f32) -> Reshape -> statistics -> Reshape "
        "-> affine -> Cast(f16)",
        "diffusers_f16_silu": "diffusers float16 group norm followed by SiLU",
        "g4_c6": "G = 4 does not divide C = 6 but divides C*H*W = 96 (groups straddle channels)",
        "g4_c6_back_const": "G = 4, C = 6, Reshape back to the constant [1, 6, 4, 4]",
        "g3_c8": "G = 3 does not divide C = 8 but divides C*H*W = 72",
        "back_n_c_minus1_w": "Reshape back written [N, C, -1, W]",
        "back_0_c_minus1_w": "Reshape back written [0, C, -1, W]",
        "back_n_c_h_minus1": "Reshape back written [N, C, H, -1]",
        "back_minus1_c_h_w": "Reshape back written [-1, C, H, W]",
        "three_share_var": "three group norms sharing one mean, variance and std",
        "mean_minus_x_share_std": "group norms (x - m) / std and (m - x) / std sharing the std",
        "mean_minus_x": "group norm whose numerator is m - x (the variance from x - m)",
        "mean_minus_x_both": "group norm computing m - x once, for the variance and numerator",
    }
    for variant, statement in gn.items():
        count = 1
        case(
            f"a3_gn_{variant}",
            C_GROUP,
            statement,
            _gn_model(variant),
            FUSE("group-norm", count),
        )
    case(
        "a3_gn_cast_first_back_shape_of_x",
        C_GROUP,
        "float16 x -> Cast(f32) -> group statistics -> Reshape(Shape(x)): Cast keeps x's shape",
        _gn_cast_first_back("shape_of_x"),
        FUSE("group-norm"),
    )
    for variant, statement in (
        ("shape_other", "Reshape back to Shape(z), z another float16 input of x's rank and size"),
        ("shape_transposed", "Reshape back to Shape(Transpose(x)): x's dims in another order"),
        ("shape_sliced", "Reshape back to Concat of Shape(x) start/end slices: [N, H, C, W]"),
    ):
        case(
            f"a3_gn_cast_first_back_{variant}",
            C_GROUP,
            f"cast-first group statistics, {statement}: not x's shape",
            _gn_cast_first_back(variant),
            KEEP("reshape-not-restored"),
        )
    for variant, count, statement in (
        ("three_share_var", 3, "three layer norms dividing one x - m by one std (own gamma each)"),
        ("three_share_var_two_std", 3, "three layer norms sharing one variance, two std nodes"),
        ("mean_minus_x_share_std", 2, "layer norms (x - m) / std and (m - x) / std sharing std"),
    ):
        case(
            f"a3_ln_{variant}",
            C_GROUP,
            statement,
            _ln_shared(variant),
            FUSE("layer-norm", count),
        )


def register(case, KEEP, EITHER, FUSE, nearest) -> None:
    """Add every case of this module to the corpus through its `case` registrar."""
    for group in GROUPS:
        group(case, KEEP, EITHER, FUSE, nearest)


GROUPS = [_shape_cases, _function_cases, _folder_cases, _residual_cases, _group_cases]
