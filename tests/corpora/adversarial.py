"""The adversarial corpus (issue 12): small graphs, built in memory with onnx.helper, each with what
it computes, the feeds it needs, its expected outcome and, for look-alikes, the evidence that it
differs from the nearest fused op.

`python -m corpora.adversarial --list` prints every case. Classes: "1".."9" are the classes of
issue 12 (overridable initializers, scopes, claimed shapes, bindings that must agree, exact
constant semantics, local functions with attribute references, emitted-op contracts, output
guard, validation), "hazard" near-miss maths, "exact-odd" exact but unusual spellings.
"""

from __future__ import annotations

import argparse
import functools
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from corpora.adversarial_build import (
    BOOL,
    F16,
    F64,
    I32,
    I64,
    NP,
    SHAPE,
    F,
    G,
    body,
    ln,
    model,
    rms,
    vi,
)
from models import builders

PROFILES = ("random", "large", "tiny", "constant", "negative", "outliers")


@dataclass(frozen=True)
class Expect:
    """`fuse`: at least `sites[kind]` sites of each kind; `keep`: nothing fused (at most
    `max_sites`), with a near-miss whose reason is in `reasons` when given; `either`: fusing is
    allowed when the numerics hold."""

    outcome: str
    sites: dict = field(default_factory=dict)
    reasons: frozenset | None = None
    max_sites: int | None = None


def FUSE(kind: str = "layer-norm", count: int = 1, **more: int) -> Expect:
    sites = {kind: count, **{k.replace("_", "-"): v for k, v in more.items()}}
    return Expect("fuse", sites)


def KEEP(*reasons: str, max_sites: int = 0) -> Expect:
    return Expect("keep", reasons=frozenset(reasons) if reasons else None, max_sites=max_sites)


EITHER = Expect("either")
# A body initializer named like an outer value: ONNX Runtime 1.32 binds the outer value where the
# outer graph uses it and the body's own where only bodies read it, so the binding is
# runtime-defined and normfuse leaves the whole model as it is (docs/guarantees.md).
# Numerics are still checked: the unchanged output must equal the original.
SHADOWING_INITIALIZER = KEEP("unsupported-scope")


@dataclass(frozen=True)
class Case:
    """One adversarial graph. `fixed`: variants of the non-float feeds (bool/int inputs);
    `overrides`: values fed for initializers that are graph inputs; `evidence`: builds the
    nearest fused op as a model with the same inputs and outputs; `refusal_ok`: a NormfuseError
    is an acceptable answer."""

    name: str
    cls: str
    statement: str
    build: Callable[[], onnx.ModelProto]
    expect: Expect
    fixed: tuple = ({},)
    overrides: dict = field(default_factory=dict)
    evidence: Callable[[onnx.ModelProto], onnx.ModelProto] | None = None
    refusal_ok: bool = False
    slow: bool = False

    def feeds(self, m: onnx.ModelProto) -> list[tuple[str, dict]]:
        """Every feed set the case is run on: each profile x each fixed variant, plus the
        random and constant profiles with the overrides fed."""
        return feed_sets(m, self.fixed, self.overrides, self.name)


# ---------------------------------------------------------------- inputs


def profile_array(shape, dtype, profile: str, seed: int) -> np.ndarray:
    """Adversarial float data: random, large (1e4), tiny (1e-4), constant rows, all-negative,
    one outlier per row."""
    rng = np.random.default_rng(seed)
    shape = tuple(shape)
    if profile == "random":
        a = rng.normal(1.0, 2.0, shape)
    elif profile == "large":
        a = rng.normal(0.0, 1.0, shape) * 1e4
        if dtype == np.float16:
            a = np.clip(a, -6e4, 6e4)
    elif profile == "tiny":
        a = rng.normal(0.0, 1.0, shape) * 1e-4
    elif profile == "constant":
        rows = rng.normal(1.0, 2.0, (*shape[:-1], 1)) if shape else rng.normal(1.0, 2.0, ())
        a = np.broadcast_to(rows, shape).copy()
    elif profile == "negative":
        a = -(np.abs(rng.normal(0.0, 2.0, shape)) + 0.1)
    elif profile == "outliers":
        a = rng.normal(0.0, 1.0, shape)
        if shape:
            a[..., 0] = 1e3
    else:
        raise ValueError(profile)
    return np.asarray(a, dtype)


def _dims(info: onnx.ValueInfoProto) -> list[int]:
    return [d.dim_value if d.HasField("dim_value") else 2 for d in info.type.tensor_type.shape.dim]


def feed_sets(m: onnx.ModelProto, fixed, overrides: dict, name: str) -> list[tuple[str, dict]]:
    initializers = {t.name for t in m.graph.initializer}
    free = [i for i in m.graph.input if i.name not in initializers]
    sets = []
    for variant_index, variant in enumerate(fixed):
        for profile_index, profile in enumerate(PROFILES):
            feeds = {}
            for input_index, info in enumerate(free):
                if info.name in variant:
                    feeds[info.name] = np.asarray(variant[info.name])
                    continue
                dtype = NP[info.type.tensor_type.elem_type]
                seed = zlib.crc32(f"{name}/{info.name}/{profile_index}/{input_index}".encode())
                feeds[info.name] = profile_array(_dims(info), dtype, profile, seed)
            label = f"{profile}" + (f"/v{variant_index}" if len(fixed) > 1 else "")
            sets.append((label, feeds))
            if overrides and profile in ("random", "constant"):
                forced = {k: np.asarray(v) for k, v in overrides.items()}
                sets.append((label + "+override", {**feeds, **forced}))
    return sets


# ---------------------------------------------------------------- evidence


def nearest(
    kind: str = "ln",
    x: str = "x",
    out: str = "y",
    axis: int = -1,
    eps: float = 1e-5,
    gamma: np.ndarray | str | None = "find",
    beta: np.ndarray | str | None = "find",
) -> Callable[[onnx.ModelProto], onnx.ModelProto]:
    """The nearest fused op to a look-alike: `LayerNormalization`-17 (kind "ln") or ORT's
    `SimplifiedLayerNormalization` (kind "rms") of `x`, with the same graph inputs and outputs.
    gamma/beta "find": the original's single main-graph initializer named gamma_*/beta_*."""

    def build(original: onnx.ModelProto) -> onnx.ModelProto:
        graph = original.graph
        inputs = {i.name: i for i in graph.input}
        elem = inputs[x].type.tensor_type.elem_type
        shape = _dims(inputs[x])
        dims = tuple(shape[axis:])
        dtype = NP[elem]
        inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}

        def pick(value, stem):
            if isinstance(value, str) and value == "find":
                found = [v for k, v in inits.items() if k.startswith(stem + "_")]
                return found[0] if len(found) == 1 else None
            return value

        g_value = pick(gamma, "gamma")
        b_value = pick(beta, "beta")
        g_value = np.ones(dims, dtype) if g_value is None else _fit(g_value, dims)
        tensors = [numpy_helper.from_array(np.asarray(g_value, dtype), "near_gamma")]
        node_inputs = [x, "near_gamma"]
        if kind == "ln" and b_value is not None:
            tensors.append(
                numpy_helper.from_array(np.asarray(_fit(b_value, dims), dtype), "near_beta")
            )
            node_inputs.append("near_beta")
        op = "LayerNormalization" if kind == "ln" else "SimplifiedLayerNormalization"
        node = helper.make_node(op, node_inputs, [out], axis=axis, epsilon=eps, stash_type=1)
        g = helper.make_graph([node], "nearest", list(graph.input), list(graph.output), tensors)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        return m

    return build


def _fit(value, dims) -> np.ndarray:
    """`value` broadcast to `dims`; a value varying along other axes contributes its first slice."""
    value = np.asarray(value)
    while value.ndim > len(dims):
        value = value[0]
    return np.broadcast_to(value, dims)


# ---------------------------------------------------------------- registry

CASES: list[Case] = []


def case(name, cls, statement, build, expect, **kw) -> None:
    assert all(c.name != name for c in CASES), name
    CASES.append(Case(name, cls, statement, build, expect, **kw))


def _simple(norm: str, opset=17, dtype=np.float32, overridable=(), seed=0, **kw):
    """x [2,5,16] -> one norm -> y."""

    def build():
        g = G(opset=opset, dtype=dtype, seed=seed)
        (ln if norm == "ln" else rms)(g, "x", out="y", **kw)
        elem = {np.float32: F, np.float16: F16, np.float64: F64}[dtype]
        return model(g, [("x", elem, SHAPE)], [("y", elem, SHAPE)], overridable=overridable)

    return build


def _with_named(norm: str, names: dict, overridable=(), opset=17, **kw):
    """One norm whose constants are initializers with the given names (so they can be graph
    inputs): names maps an argument of ln/rms (eps, exp, gamma, ...) to (name, value)."""

    def build():
        g = G(opset=opset)
        args = dict(kw)
        for arg, (name, value) in names.items():
            dtype = np.int64 if arg == "axes" else np.float32
            g.init(value, name, dtype)
            args[arg] = name
        (ln if norm == "ln" else rms)(g, "x", out="y", **args)
        return model(g, overridable=overridable)

    return build


# ================================================================ class 1: overridable initializers


def _class1() -> None:
    gamma = np.linspace(0.5, 1.5, 16, dtype=np.float32)
    beta = np.linspace(-0.5, 0.5, 16, dtype=np.float32)
    for norm in ("ln", "rms"):
        eps = 1e-5 if norm == "ln" else 1e-6
        constant_args = {
            "eps": ("eps", eps, np.float32(0.5), {}),
            "exp": ("two", 2.0, np.float32(4.0), {}),
            "divisor": ("d", 16.0, np.float32(3.0), {"var": "sum"}),
            "half": ("half", -0.5, np.float32(-1.0), {"divide": "pow_half"}),
            "one": ("one", 1.0, np.float32(2.0), {"divide": "one_over"}),
        }
        for arg, (name, value, override, extra) in constant_args.items():
            case(
                f"{norm}_overridable_{arg}",
                "1",
                f"{norm} whose {arg} is an initializer also listed in graph.input (fed {override})",
                _with_named(norm, {arg: (name, value)}, overridable=[name], **extra),
                KEEP(),
                overrides={name: override},
            )
        case(
            f"{norm}_overridable_axes_opset18",
            "1",
            f"{norm} at opset 18 whose ReduceMean axes initializer is a graph input (fed [-2])",
            _with_named(norm, {"axes": ("ax", [-1])}, overridable=["ax"], opset=18),
            KEEP(),
            overrides={"ax": np.array([-2], np.int64)},
        )
        case(
            f"{norm}_overridable_scale",
            "1",
            f"{norm} whose gamma is an overridable initializer: may feed the fused node as input",
            _with_named(norm, {"gamma": ("g", gamma)}, overridable=["g"]),
            EITHER,
            overrides={"g": (gamma[::-1] * 3).copy()},
        )
        case(
            f"{norm}_overridable_eps_via_identity",
            "1",
            f"{norm} with epsilon = Identity(eps), eps an overridable initializer",
            _identity_eps(norm, eps),
            KEEP(),
            overrides={"eps": np.float32(0.25)},
        )
        case(
            f"{norm}_overridable_eps_via_cast",
            "1",
            f"{norm} with epsilon = Cast(eps64 -> float), eps64 a float64 overridable initializer",
            _cast_eps(norm, eps),
            KEEP(),
            overrides={"eps64": np.float64(0.25)},
        )
        case(
            f"{norm}_all_initializers_as_inputs",
            "1",
            f"{norm} exported with keep_initializers_as_inputs: every constant is a graph input",
            _all_as_inputs(norm),
            KEEP(),
            overrides={"eps_0": np.float32(0.75)},
        )
        case(
            f"{norm}_overridable_eps_ir4_opset11",
            "1",
            f"{norm} at IR 4 / opset 11 with an overridable epsilon (ORT-only fused op target)",
            _ir4(norm, eps),
            KEEP(),
            overrides={"eps": np.float32(0.5)},
        )
        case(
            f"{norm}_overridable_eps_shared_by_two_norms",
            "1",
            f"two {norm}s reading one overridable epsilon",
            _two_norms_shared_eps(norm, eps),
            KEEP(),
            overrides={"eps": np.float32(0.5)},
        )
    case(
        "ln_overridable_bias",
        "1",
        "layer norm whose beta is an overridable initializer: may feed the fused node as input",
        _with_named("ln", {"beta": ("b", beta)}, overridable=["b"]),
        EITHER,
        overrides={"b": (beta * 5 + 1).copy()},
    )
    case(
        "rms_overridable_gemma_one",
        "1",
        "Gemma RMS norm x*(1+w): the literal one is an overridable initializer (fed 3)",
        _gemma_one(),
        EITHER,
        overrides={"one_w": np.float32(3.0)},
    )
    case(
        "keras_overridable_gamma",
        "1",
        "tf2onnx layer norm whose gamma (used in both g*r products) is an overridable input",
        _keras(gamma_mode="overridable"),
        EITHER,
        overrides={"kg": np.linspace(2.0, -2.0, 16, dtype=np.float32)},
    )


def _identity_eps(norm, eps):
    def build():
        g = G()
        g.init(eps, "eps")
        e = g.op("Identity", ["eps"])
        (ln if norm == "ln" else rms)(g, "x", eps=e, out="y")
        return model(g, overridable=["eps"])

    return build


def _cast_eps(norm, eps):
    def build():
        g = G()
        g.init(eps, "eps64", np.float64)
        e = g.op("Cast", ["eps64"], to=F)
        (ln if norm == "ln" else rms)(g, "x", eps=e, out="y")
        return model(g, overridable=["eps64"])

    return build


def _all_as_inputs(norm):
    def build():
        g = G()
        g.init(1e-5, "eps_0")
        (ln if norm == "ln" else rms)(g, "x", eps="eps_0", out="y")
        return model(g, overridable=[t.name for t in g.inits])

    return build


def _ir4(norm, eps):
    def build():
        g = G(opset=11)
        g.init(eps, "eps")
        (ln if norm == "ln" else rms)(g, "x", eps="eps", out="y")
        return model(g, overridable=["eps"], ir=4)

    return build


def _two_norms_shared_eps(norm, eps):
    def build():
        g = G()
        g.init(eps, "eps")
        f = ln if norm == "ln" else rms
        a = f(g, "x", eps="eps")
        f(g, a, eps="eps", out="y")
        return model(g, overridable=["eps"])

    return build


def _gemma_one():
    def build():
        g = G()
        w = g.init(np.linspace(-0.3, 0.3, 16), "w")
        g.init(1.0, "one_w")
        scale = g.op("Add", [w, "one_w"])
        rms(g, "x", gamma=scale, out="y")
        return model(g, overridable=["one_w"])

    return build


# ================================================================ class 4: keras bindings


def _keras(gamma_mode: str = "same", r_mode: str = "same", mean_mode: str = "same", x_mode="x"):
    """tf2onnx: y = x*(g*r) + (b - m*(g*r)). gamma_mode: same | x_only (the mean side lacks g) |
    m_only | different (two gammas) | equal_copies (two initializers, equal values) |
    overridable | commuted (r*g on one side). r_mode: same | other_eps (the mean side's r uses
    another epsilon) | pow_half (the mean side's r is Pow(v+eps, -0.5)). mean_mode: same |
    other (the mean side's m is the mean of another tensor)."""

    def build():
        g = G()
        inputs = [("x", F, SHAPE)]
        gamma = np.linspace(0.5, 1.5, 16, dtype=np.float32)
        m = g.reduce("ReduceMean", "x", (-1,))
        c = g.op("Sub", ["x", m])
        v = g.reduce("ReduceMean", g.op("Mul", [c, c]), (-1,))
        r = g.op("Reciprocal", [g.op("Sqrt", [g.op("Add", [v, g.init(1e-3, "keps")])])])
        if r_mode == "other_eps":
            r2 = g.op("Reciprocal", [g.op("Sqrt", [g.op("Add", [v, g.init(0.5, "keps2")])])])
        elif r_mode == "pow_half":
            r2 = g.op("Pow", [g.op("Add", [v, "keps"]), g.init(-0.5, "kh")])
        else:
            r2 = r
        g.init(gamma, "kg")
        if gamma_mode in ("same", "overridable"):
            gr = g.op("Mul", [r, "kg"])
            gr2 = gr if r2 == r else g.op("Mul", [r2, "kg"])
        elif gamma_mode == "x_only":
            gr, gr2 = g.op("Mul", [r, "kg"]), r2
        elif gamma_mode == "m_only":
            gr, gr2 = r, g.op("Mul", [r2, "kg"])
        elif gamma_mode == "different":
            gr = g.op("Mul", [r, "kg"])
            gr2 = g.op("Mul", [r2, g.init(gamma[::-1].copy(), "kg2")])
        elif gamma_mode == "equal_copies":
            gr = g.op("Mul", [r, "kg"])
            gr2 = g.op("Mul", [r2, g.init(gamma.copy(), "kg_copy")])
        elif gamma_mode == "commuted":
            gr = g.op("Mul", [r, "kg"])
            gr2 = g.op("Mul", ["kg", r2])
        else:
            raise ValueError(gamma_mode)
        m2 = m
        if mean_mode == "other":
            inputs.append(("x2", F, SHAPE))
            m2 = g.reduce("ReduceMean", "x2", (-1,))
        x_side = "x"
        if x_mode == "other":
            inputs.append(("x3", F, SHAPE))
            x_side = "x3"
        beta = g.init(np.linspace(-1, 1, 16), "kb")
        g.op("Add", [g.op("Mul", [x_side, gr]), g.op("Sub", [beta, g.op("Mul", [m2, gr2])])], "y")
        return model(g, inputs, overridable=["kg"] if gamma_mode == "overridable" else ())

    return build


def _class4() -> None:
    gamma = np.linspace(0.5, 1.5, 16, dtype=np.float32)
    beta = np.linspace(-1, 1, 16, dtype=np.float32)
    near = nearest("ln", eps=1e-3, gamma=gamma, beta=beta)
    case("keras_baseline", "4", "tf2onnx layer norm, one g*r used twice", _keras(), FUSE())
    case(
        "keras_gamma_on_x_side_only",
        "4",
        "x*(g*r) + (b - m*r): the mean side lacks gamma",
        _keras("x_only"),
        KEEP(),
        evidence=near,
    )
    case(
        "keras_gamma_on_mean_side_only",
        "4",
        "x*r + (b - m*(g*r)): the x side lacks gamma",
        _keras("m_only"),
        KEEP(),
        evidence=near,
    )
    case(
        "keras_two_different_gammas",
        "4",
        "x*(g1*r) + (b - m*(g2*r)) with g1 != g2",
        _keras("different"),
        KEEP(),
        evidence=near,
    )
    case(
        "keras_equal_gamma_copies",
        "exact-odd",
        "x*(g*r) + (b - m*(g'*r)) with g' a separate initializer equal to g",
        _keras("equal_copies"),
        EITHER,
    )
    case(
        "keras_commuted_gamma",
        "exact-odd",
        "x*(r*g) + (b - m*(g*r)): the two products commuted",
        _keras("commuted"),
        EITHER,
    )
    case(
        "keras_other_eps_on_mean_side",
        "4",
        "the mean side's rsqrt uses epsilon 0.5, the x side's 1e-3",
        _keras(r_mode="other_eps"),
        KEEP(),
        evidence=near,
    )
    case(
        "keras_pow_half_on_mean_side",
        "exact-odd",
        "the mean side's rsqrt written as Pow(v+eps,-0.5), the x side's as Reciprocal(Sqrt)",
        _keras(r_mode="pow_half"),
        EITHER,
    )
    case(
        "keras_mean_of_other_tensor",
        "4",
        "x*(g*r) + (b - mean(x2)*(g*r)): the subtracted mean is another tensor's",
        _keras(mean_mode="other"),
        KEEP(),
        evidence=near,
    )
    case(
        "keras_x_side_other_tensor",
        "4",
        "x3*(g*r) + (b - m*(g*r)): statistics of x applied to another tensor x3",
        _keras(x_mode="other"),
        KEEP(),
        evidence=nearest("ln", x="x3", eps=1e-3, gamma=gamma, beta=beta),
    )


# ================================================================ class 5: exact constants


def _exp_case(norm, exp_value, exp_dtype, model_dtype=np.float32):
    def build():
        g = G(dtype=model_dtype)
        e = g.init(exp_value, "exponent", exp_dtype)
        f = ln if norm == "ln" else rms
        f(g, "x", exp=e, out="y", eps=1e-3)
        elem = {np.float32: F, np.float16: F16, np.float64: F64}[model_dtype]
        return model(g, [("x", elem, SHAPE)], [("y", elem, SHAPE)])

    return build


def _eps_chain(norm, make_eps, opset=19, eps_outer=None):
    """A norm whose epsilon is computed by a constant subgraph `make_eps(g) -> name`."""

    def build():
        g = G(opset=opset)
        e = make_eps(g)
        (ln if norm == "ln" else rms)(g, "x", eps=e, out="y")
        return model(g)

    return build


def _fp8_eps(value, to, saturate):
    def make(g):
        c = g.const_node(value)
        return g.op("Cast", [g.op("Cast", [c], to=to, saturate=saturate)], to=F)

    return make


def _class5() -> None:
    for norm in ("ln", "rms"):
        kind = "layer-norm" if norm == "ln" else "rms-norm"
        near = nearest(norm, eps=1e-3)
        case(
            f"{norm}_exponent_f64_2_0000001",
            "5",
            f"float64 {norm} with Pow exponent 2.0000001 (NaN for negative bases)",
            _exp_case(norm, 2.0000001, np.float64, np.float64),
            KEEP(),
            evidence=None,
        )
        case(
            f"{norm}_exponent_f32_2_0000001_rounds_to_2",
            "exact-odd",
            f"{norm} with exponent written 2.0000001 in float32 (exactly 2.0f)",
            _exp_case(norm, 2.0000001, np.float32),
            EITHER,
        )
        case(
            f"{norm}_exponent_f16_near_2",
            "5",
            f"float16 {norm} with exponent float16(2.002) (not 2; NaN for negative bases)",
            _exp_case(norm, 2.002, np.float16, np.float16),
            KEEP(),
            evidence=nearest(norm, eps=1e-3),
        )
        case(
            f"{norm}_exponent_int64_2",
            "exact-odd",
            f"{norm} with Pow(d, int64 2): exactly the square",
            _exp_case(norm, 2, np.int64),
            FUSE(kind),
        )
        case(
            f"{norm}_exponent_int32_3",
            "5",
            f"{norm} with Pow(d, int32 3): a cube, not a square",
            _exp_case(norm, 3, np.int32),
            KEEP(),
            evidence=near,
        )
        case(
            f"{norm}_exponent_vector_of_2",
            "exact-odd",
            f"{norm} with a [16] exponent of all 2s",
            _exp_case(norm, np.full(16, 2.0), np.float32),
            EITHER,
        )
        case(
            f"{norm}_exponent_vector_one_3",
            "5",
            f"{norm} with a [16] exponent of 2s except the last, 3",
            _exp_case(norm, np.array([2.0] * 15 + [3.0]), np.float32),
            KEEP(),
            evidence=near,
        )
        case(
            f"{norm}_exponent_vector_first_2_then_4",
            "5",
            f"{norm} with a [16] exponent [2, 4, 4, ...]: only the first element is 2",
            _exp_case(norm, np.array([2.0] + [4.0] * 15), np.float32),
            KEEP(),
            evidence=near,
        )
        case(
            f"{norm}_eps_fp8_e4m3_underflow",
            "5",
            f"{norm} with eps = Cast(Cast(1e-5 -> float8e4m3fn, saturate) -> float) = 0",
            _eps_chain(norm, _fp8_eps(1e-5, TensorProto.FLOAT8E4M3FN, 1)),
            KEEP("epsilon-not-positive"),
            evidence=nearest(norm, eps=1e-5),
        )
        case(
            f"{norm}_eps_fp8_e4m3_saturate_448",
            "5",
            f"{norm} with eps = Cast(Cast(1000 -> float8e4m3fn, saturate=1)) = 448",
            _eps_chain(norm, _fp8_eps(1000.0, TensorProto.FLOAT8E4M3FN, 1)),
            EITHER,
        )
        case(
            f"{norm}_eps_fp8_e4m3_no_saturate_nan",
            "5",
            f"{norm} with eps = Cast(Cast(1000 -> float8e4m3fn, saturate=0)) = NaN",
            _eps_chain(norm, _fp8_eps(1000.0, TensorProto.FLOAT8E4M3FN, 0)),
            KEEP(),
            evidence=nearest(norm, eps=1000.0),
        )
        case(
            f"{norm}_eps_fp8_e5m2_rounding",
            "5",
            f"{norm} with eps = Cast(Cast(0.3 -> float8e5m2)) = 0.3125",
            _eps_chain(norm, _fp8_eps(0.3, TensorProto.FLOAT8E5M2, 1)),
            EITHER,
        )
        case(
            f"{norm}_eps_fp8_e4m3fnuz_saturate",
            "5",
            f"{norm} with eps = Cast(Cast(1000 -> float8e4m3fnuz, saturate=1)) = 240",
            _eps_chain(norm, _fp8_eps(1000.0, TensorProto.FLOAT8E4M3FNUZ, 1)),
            EITHER,
        )
        case(
            f"{norm}_eps_int32_overflow_negative",
            "5",
            f"{norm} with eps = 1/Cast(int32 2147483647 + 2) (wraps: eps < 0)",
            _eps_chain(norm, _int_overflow_eps),
            KEEP(),
            evidence=nearest(norm, eps=4.656612873077393e-10),
        )
        case(
            f"{norm}_eps_div_by_zero_inf",
            "5",
            f"{norm} with eps = 1e-5 / 0 = +inf (output is beta / zero)",
            _eps_chain(norm, lambda g: g.op("Div", [g.init(1e-5), g.init(0.0)])),
            EITHER,
        )
        case(
            f"{norm}_eps_zero_over_zero_nan",
            "5",
            f"{norm} with eps = 0 / 0 = NaN",
            _eps_chain(norm, lambda g: g.op("Div", [g.init(0.0), g.init(0.0)])),
            KEEP(),
            evidence=nearest(norm, eps=1e-5),
        )
        case(
            f"{norm}_eps_neg_over_zero",
            "5",
            f"{norm} with eps = -1 / 0 = -inf",
            _eps_chain(norm, lambda g: g.op("Div", [g.init(-1.0), g.init(0.0)])),
            KEEP(),
            evidence=nearest(norm, eps=1e-5),
        )
        case(
            f"{norm}_eps_sub_negative",
            "5",
            f"{norm} with eps = 1e-5 - 2e-5 < 0 (folded)",
            _eps_chain(norm, lambda g: g.op("Sub", [g.init(1e-5), g.init(2e-5)])),
            KEEP("epsilon-not-positive"),
            evidence=nearest(norm, eps=1e-5),
        )
        case(
            f"{norm}_eps_per_feature_vector",
            "5",
            f"{norm} with a [16] epsilon of different values (not a scalar)",
            _eps_chain(norm, lambda g: g.init(np.linspace(1e-5, 4.0, 16))),
            KEEP(),
            evidence=nearest(norm, eps=1e-5),
        )
        case(
            f"{norm}_eps_cast_float16_roundtrip",
            "exact-odd",
            f"{norm} with eps = Cast(Cast(1e-3 -> float16) -> float)",
            _eps_chain(
                norm,
                lambda g: g.op("Cast", [g.op("Cast", [g.init(1e-3)], to=F16)], to=F),
            ),
            EITHER,
        )
        case(
            f"{norm}_exponent_from_cast_of_2_9",
            "exact-odd",
            f"{norm} with exponent Cast(Cast(2.9 -> int64) -> float) = 2",
            _exp_chain(norm, lambda g: g.op("Cast", [g.op("Cast", [g.init(2.9)], to=I64)], to=F)),
            EITHER,
        )
        case(
            f"{norm}_exponent_from_cast_of_3_1",
            "5",
            f"{norm} with exponent Cast(Cast(3.1 -> int64) -> float) = 3",
            _exp_chain(norm, lambda g: g.op("Cast", [g.op("Cast", [g.init(3.1)], to=I64)], to=F)),
            KEEP(),
            evidence=nearest(norm, eps=1e-5),
        )
        case(
            f"{norm}_exponent_one_plus_one",
            "exact-odd",
            f"{norm} with exponent Add(1, 1) folded",
            _exp_chain(norm, lambda g: g.op("Add", [g.init(1.0), g.init(1.0)])),
            EITHER,
        )
    case(
        "ln_axes_int64_overflow_wraps_to_minus_one",
        "5",
        "layer norm at opset 18 whose axes are Sub(Mul(2^32, 2^32), 1): -1 with int64 wrapping",
        _wrapped_axes,
        EITHER,
    )
    case(
        "ln_axes_cast_int64_to_int32_wrap",
        "5",
        "layer norm at opset 18 whose axes are Cast(Cast(4294967295 -> int32) -> int64) = -1",
        _cast_wrapped_axes,
        EITHER,
    )


def _exp_chain(norm, make_exp):
    def build():
        g = G(opset=17)
        (ln if norm == "ln" else rms)(g, "x", exp=make_exp(g), out="y")
        return model(g)

    return build


def _int_overflow_eps(g: G) -> str:
    big = g.init(2147483647, dtype=np.int32)
    two = g.init(2, dtype=np.int32)
    wrapped = g.op("Cast", [g.op("Add", [big, two])], to=F)
    return g.op("Div", [g.init(1.0), wrapped])


def _wrapped_axes() -> onnx.ModelProto:
    g = G(opset=18)
    big = g.init(2**32, dtype=np.int64)
    axes = g.op("Sub", [g.op("Mul", [big, big]), g.init([1], dtype=np.int64)])
    ln(g, "x", axes=axes, out="y")
    return model(g)


def _cast_wrapped_axes() -> onnx.ModelProto:
    g = G(opset=18)
    value = g.init([4294967295], dtype=np.int64)
    axes = g.op("Cast", [g.op("Cast", [value], to=I32)], to=I64)
    ln(g, "x", axes=axes, out="y")
    return model(g)


# ================================================================ class 2: scopes


def _if_node(cond: str, then_g, else_g, outs) -> onnx.NodeProto:
    return helper.make_node("If", [cond], list(outs), then_branch=then_g, else_branch=else_g)


def _scope_outer_fused_inner_mul() -> onnx.ModelProto:
    """Outer norm with gamma "gamma"; the then-branch has its own initializer "gamma" (3s) and
    computes Mul(x, gamma) with it."""
    g = G()
    g.init(np.linspace(0.5, 1.5, 16), "gamma")
    ln(g, "x", gamma="gamma", out="y")
    t = G("then_")
    t.init(np.full(16, 3.0), "gamma")
    t.op("Mul", ["x", "gamma"], "t_out")
    e = G("else_")
    e.op("Mul", ["y", "gamma"], "e_out")
    g.nodes.append(
        _if_node(
            "c",
            body(t, [], [("t_out", F, SHAPE)]),
            body(e, [], [("e_out", F, SHAPE)]),
            ["z"],
        )
    )
    return model(g, [("x", F, SHAPE), ("c", BOOL, [])], [("y", F, SHAPE), ("z", F, SHAPE)])


def _scope_inner_norms(
    then_gamma, else_gamma, then_eps=0.5, shadow_eps=True, outer=True, outer_gamma_shape=(16,)
):
    """Norms in both branches and (optionally) outside, all reading initializers named
    gamma/eps; each branch may shadow them with its own values and shapes."""

    def build():
        g = G()
        g.init(np.broadcast_to(np.linspace(0.5, 1.5, 16), outer_gamma_shape), "gamma")
        g.init(1e-5, "eps")
        outputs = [("z", F, SHAPE)]
        if outer:
            ln(g, "x", gamma="gamma", eps="eps", out="y")
            outputs.insert(0, ("y", F, SHAPE))
        t = G("then_", seed=1)
        if then_gamma is not None:
            t.init(then_gamma, "gamma")
        if shadow_eps:
            t.init(then_eps, "eps")
        ln(t, "x", gamma="gamma", eps="eps", out="t_out")
        e = G("else_", seed=2)
        if else_gamma is not None:
            e.init(else_gamma, "gamma")
        ln(e, "x", gamma="gamma", eps="eps", out="e_out")
        g.nodes.append(
            _if_node(
                "c",
                body(t, [], [("t_out", F, SHAPE)]),
                body(e, [], [("e_out", F, SHAPE)]),
                ["z"],
            )
        )
        return model(g, [("x", F, SHAPE), ("c", BOOL, [])], outputs)

    return build


def _loop_shadow_x() -> onnx.ModelProto:
    """Outer LN of x; a Loop whose carried body input is also named x applies its own LN."""
    g = G()
    g.init(np.linspace(0.5, 1.5, 16), "gamma")
    ln(g, "x", gamma="gamma", out="y")
    b = G("loop_", seed=3)
    b.init(np.full(16, 2.0), "gamma")
    ln(b, "x", gamma="gamma", eps=0.25, out="x_out")
    b.op("Identity", ["cond_in"], "cond_out")
    loop_body = body(
        b,
        [("i", I64, []), ("cond_in", BOOL, []), ("x", F, SHAPE)],
        [("cond_out", BOOL, []), ("x_out", F, SHAPE)],
    )
    g.init(2, "trip", np.int64)
    g.nodes.append(helper.make_node("Loop", ["trip", "", "y"], ["z"], body=loop_body))
    return model(g, outputs=[("y", F, SHAPE), ("z", F, SHAPE)])


def _loop_shadow_gamma_input() -> onnx.ModelProto:
    """The Loop body's carried input is named gamma (dynamic), shadowing the outer initializer
    gamma; the body multiplies a norm by it."""
    g = G()
    g.init(np.linspace(0.5, 1.5, 16), "gamma")
    ln(g, "x", gamma="gamma", out="y")
    b = G("loop_", seed=3)
    normed = ln(b, "x", gamma=None, beta=None)
    b.op("Mul", [normed, "gamma"], "acc_out")
    b.op("Add", ["gamma", b.init(np.full(16, 1.0))], "gamma_out")
    b.op("Identity", ["cond_in"], "cond_out")
    loop_body = body(
        b,
        [("i", I64, []), ("cond_in", BOOL, []), ("gamma", F, [16])],
        [("cond_out", BOOL, []), ("gamma_out", F, [16]), ("acc_out", F, SHAPE)],
    )
    g.init(2, "trip", np.int64)
    g.init(np.full(16, -1.0), "gamma0")
    g.nodes.append(
        helper.make_node("Loop", ["trip", "", "gamma0"], ["gamma_final", "z"], body=loop_body)
    )
    return model(g, outputs=[("y", F, SHAPE), ("z", F, (2, 2, 5, 16)), ("gamma_final", F, [16])])


def _scan_shadow() -> onnx.ModelProto:
    """Scan over the batch axis; the body input is named x ([5,16]) and its initializer gamma
    shadows the outer gamma."""
    g = G()
    g.init(np.linspace(0.5, 1.5, 16), "gamma")
    ln(g, "x", gamma="gamma", out="y")
    b = G("scan_", seed=4)
    b.init(np.linspace(2.0, -2.0, 16), "gamma")
    ln(b, "x", gamma="gamma", eps=0.1, shape=(5, 16), out="s_out")
    scan_body = body(b, [("x", F, [5, 16])], [("s_out", F, [5, 16])])
    g.nodes.append(helper.make_node("Scan", ["x"], ["z"], body=scan_body, num_scan_inputs=1))
    return model(g, outputs=[("y", F, SHAPE), ("z", F, SHAPE)])


def _outer_mean_used_in_body() -> onnx.ModelProto:
    """The outer norm's mean (named m) is read inside the then-branch."""
    g = G()
    ln(g, "x", names={"mean": "m"}, out="y")
    t = G("then_")
    t.op("Add", ["x", "m"], "t_out")
    e = G("else_")
    e.op("Identity", ["x"], "e_out")
    g.nodes.append(
        _if_node("c", body(t, [], [("t_out", F, SHAPE)]), body(e, [], [("e_out", F, SHAPE)]), ["z"])
    )
    return model(g, [("x", F, SHAPE), ("c", BOOL, [])], [("y", F, SHAPE), ("z", F, SHAPE)])


def _nested_if_in_loop() -> onnx.ModelProto:
    """A Loop body holding an If whose then-branch shadows eps (0.5) for its norm."""
    g = G()
    g.init(1e-5, "eps")
    ln(g, "x", eps="eps", out="y")
    t = G("then_", seed=5)
    t.init(0.5, "eps")
    ln(t, "h", eps="eps", out="t_out")
    e = G("else_", seed=6)
    ln(e, "h", eps="eps", out="e_out")
    b = G("loop_")
    b.nodes.append(
        _if_node(
            "c", body(t, [], [("t_out", F, SHAPE)]), body(e, [], [("e_out", F, SHAPE)]), ["h_out"]
        )
    )
    b.op("Identity", ["cond_in"], "cond_out")
    loop_body = body(
        b,
        [("i", I64, []), ("cond_in", BOOL, []), ("h", F, SHAPE)],
        [("cond_out", BOOL, []), ("h_out", F, SHAPE)],
    )
    g.init(2, "trip", np.int64)
    g.nodes.append(helper.make_node("Loop", ["trip", "", "y"], ["z"], body=loop_body))
    return model(g, [("x", F, SHAPE), ("c", BOOL, [])], [("y", F, SHAPE), ("z", F, SHAPE)])


def _branch_reads_outer_gamma_sibling_shadows() -> onnx.ModelProto:
    """then-branch norm reads the outer gamma; else-branch defines gamma [5,16] (per token)."""
    per_token = np.linspace(0.1, 2.0, 80).reshape(5, 16)
    return _scope_inner_norms(None, per_token, outer=False, outer_gamma_shape=(5, 16))()


def _class2() -> None:
    both = ({"c": np.array(True)}, {"c": np.array(False)})
    case(
        "scope_outer_norm_inner_mul_shadowed_gamma",
        "2",
        "outer LN with gamma; the then-branch's own initializer gamma feeds Mul(x, gamma)",
        _scope_outer_fused_inner_mul,
        SHADOWING_INITIALIZER,
        fixed=both,
    )
    case(
        "scope_branch_shadows_eps",
        "2",
        "LN outside and in both branches; the then-branch shadows eps with 0.5",
        _scope_inner_norms(None, None),
        SHADOWING_INITIALIZER,
        fixed=both,
    )
    case(
        "scope_branch_shadows_gamma_per_token",
        "2",
        "outer gamma [5,16] with equal rows; the then-branch shadows it with a per-token [5,16]",
        _scope_inner_norms(
            np.linspace(0.1, 2.0, 80).reshape(5, 16),
            None,
            shadow_eps=False,
            outer_gamma_shape=(5, 16),
        ),
        EITHER,
        fixed=both,
    )
    case(
        "scope_outer_gamma_per_token_branch_gamma_vector",
        "2",
        "outer gamma is [5,16] per token (not LN); the then-branch shadows it with a [16] gamma",
        _scope_outer_per_token,
        SHADOWING_INITIALIZER,
        fixed=both,
    )
    case(
        "scope_siblings_reuse_gamma_other_shapes",
        "2",
        "then-branch gamma [16], else-branch gamma [1]: one name, two shapes, two norms",
        _scope_inner_norms(np.full(16, 2.0), np.full(1, 0.5), shadow_eps=False, outer=False),
        SHADOWING_INITIALIZER,
        fixed=both,
    )
    case(
        "scope_sibling_shadows_gamma_reader_uses_outer",
        "2",
        "then-branch reads the outer gamma [5,16] (equal rows); else-branch shadows it per token",
        _branch_reads_outer_gamma_sibling_shadows,
        EITHER,
        fixed=both,
    )
    case(
        "scope_loop_body_input_named_x",
        "2",
        "outer LN of x; a Loop whose carried body input is also named x normalises it again",
        _loop_shadow_x,
        SHADOWING_INITIALIZER,
    )
    case(
        "scope_loop_body_input_named_gamma",
        "2",
        "Loop body input gamma (dynamic) shadows the outer initializer gamma",
        _loop_shadow_gamma_input,
        FUSE("layer-norm", 1),
    )
    case(
        "scope_scan_body_shadows_x_and_gamma",
        "2",
        "Scan over batch; body input x [5,16] and body gamma shadow the outer names",
        _scan_shadow,
        SHADOWING_INITIALIZER,
    )
    case(
        "scope_outer_mean_read_in_branch",
        "2",
        "the outer norm's mean is read inside the then-branch (a consumer in another scope)",
        _outer_mean_used_in_body,
        EITHER,
        fixed=both,
    )
    case(
        "scope_if_in_loop_shadows_eps",
        "2",
        "a Loop body's If then-branch shadows eps with 0.5 for its norm",
        _nested_if_in_loop,
        SHADOWING_INITIALIZER,
        fixed=both,
    )
    case(
        "scope_rms_branch_shadows_eps",
        "2",
        "RMS outside and in the then-branch; the branch shadows eps with 0.5",
        _scope_rms,
        SHADOWING_INITIALIZER,
        fixed=both,
    )


def _scope_outer_per_token() -> onnx.ModelProto:
    g = G()
    g.init(np.linspace(0.1, 2.0, 80).reshape(5, 16), "gamma")
    ln(g, "x", gamma="gamma", out="y")
    t = G("then_")
    t.init(np.full((1, 16), 2.0), "gamma")
    ln(t, "x", gamma="gamma", out="t_out")
    e = G("else_")
    e.op("Identity", ["x"], "e_out")
    g.nodes.append(
        _if_node("c", body(t, [], [("t_out", F, SHAPE)]), body(e, [], [("e_out", F, SHAPE)]), ["z"])
    )
    return model(g, [("x", F, SHAPE), ("c", BOOL, [])], [("y", F, SHAPE), ("z", F, SHAPE)])


def _scope_rms() -> onnx.ModelProto:
    g = G()
    g.init(1e-6, "eps")
    rms(g, "x", eps="eps", out="y")
    t = G("then_")
    t.init(0.5, "eps")
    rms(t, "x", eps="eps", out="t_out")
    e = G("else_")
    e.op("Identity", ["x"], "e_out")
    g.nodes.append(
        _if_node("c", body(t, [], [("t_out", F, SHAPE)]), body(e, [], [("e_out", F, SHAPE)]), ["z"])
    )
    return model(g, [("x", F, SHAPE), ("c", BOOL, [])], [("y", F, SHAPE), ("z", F, SHAPE)])


# ================================================================ class 3: claimed shapes


def _reshaped_norm(norm: str, axes, claim, out_shape, var="mean", divisor=None, vi_on="r"):
    """inp [2,5,16] -> Reshape(inp, s) with s a graph input of unknown length -> norm (no
    affine) -> y. `claim` is the value_info claimed for the reshaped tensor (None: none)."""

    def build():
        g = G()
        g.op("Reshape", ["inp", "s"], "r")
        f = ln if norm == "ln" else rms
        kwargs = {"beta": None} if norm == "ln" else {}
        f(
            g,
            "r",
            axes=axes,
            gamma=None,
            var=var,
            divisor=divisor,
            out="y",
            shape=(2, 5, 16),
            **kwargs,
        )
        value_info = [(vi_on, F, claim)] if claim is not None else []
        return model(
            g,
            [("inp", F, SHAPE), ("s", I64, ["n"])],
            [("y", F, out_shape)],
            value_info=value_info,
        )

    return build


def _reshaped_nearest(norm: str, axis: int = -1, eps: float = 1e-5):
    def build(original: onnx.ModelProto) -> onnx.ModelProto:
        g = G()
        g.op("Reshape", ["inp", "s"], "r")
        op = "LayerNormalization" if norm == "ln" else "SimplifiedLayerNormalization"
        scale = g.op(
            "Expand",
            [
                g.init(1.0),
                g.op(
                    "Slice",
                    [
                        g.op("Shape", ["r"]),
                        g.init([axis], dtype=np.int64),
                        g.init([2**62], dtype=np.int64),
                    ],
                ),
            ],
        )
        g.nodes.append(helper.make_node(op, ["r", scale], ["y"], axis=axis, epsilon=eps))
        m = model(g, [], [])
        m.graph.ClearField("input")
        m.graph.input.extend(original.graph.input)
        m.graph.output.extend(original.graph.output)
        return m

    return build


def _stale(norm: str, what: str):
    """A real norm with stale claims: `what` in mean_dim | out_dim | out_rank | centered_rank."""

    def build():
        g = G()
        f = ln if norm == "ln" else rms
        if norm == "ln":
            f(g, "x", names={"mean": "m", "centered": "cent"}, out="y")
        else:
            f(g, "x", out="y")
        out = SHAPE
        value_info = []
        if what == "mean_dim":
            value_info = [("m", F, (2, 5, 16))]
        elif what == "centered_rank":
            value_info = [("cent", F, (80,))]
        elif what == "out_dim":
            out = (2, 5, 8)
        elif what == "out_rank":
            out = (2, 80)
        elif what == "out_unknown_dims":
            out = ("a", "b", "c")
        return model(g, outputs=[("y", F, out)], value_info=value_info)

    return build


def _stale_in_branch() -> onnx.ModelProto:
    g = G()
    t = G("then_")
    ln(t, "x", names={"mean": "tm"}, out="t_out")
    e = G("else_")
    e.op("Identity", ["x"], "e_out")
    then_g = body(t, [], [("t_out", F, SHAPE)])
    then_g.value_info.extend([vi("tm", F, (7,))])
    g.nodes.append(_if_node("c", then_g, body(e, [], [("e_out", F, SHAPE)]), ["z"]))
    return model(g, [("x", F, SHAPE), ("c", BOOL, [])], [("z", F, SHAPE)])


def _class3() -> None:
    rank4 = ({"s": np.array([2, 5, 4, 4], np.int64)},)
    for norm in ("ln", "rms"):
        for what in ("mean_dim", "centered_rank", "out_dim", "out_rank", "out_unknown_dims"):
            if norm == "rms" and what in ("mean_dim", "centered_rank"):
                continue
            case(
                f"{norm}_stale_{what}",
                "3",
                f"a real {norm} whose claimed shape ({what}) disagrees with inference",
                _stale(norm, what),
                EITHER,
            )
        case(
            f"{norm}_claimed_rank3_actual_rank4_axis2",
            "3",
            f"{norm} over axis 2 of a Reshape claimed [2,5,16] by value_info, really [2,5,4,4]",
            _reshaped_norm(norm, (2,), (2, 5, 16), (2, 5, 16)),
            KEEP(),
            fixed=rank4,
            evidence=_reshaped_nearest(norm, eps=1e-5 if norm == "ln" else 1e-6),
        )
        case(
            f"{norm}_claimed_last_dim_16_actual_8_sum_over_16",
            "3",
            f"{norm} with ReduceSum/16 of a Reshape claimed [2,5,16], really [2,10,8]",
            _reshaped_norm(norm, (-1,), (2, 5, 16), (2, 5, 16), var="sum", divisor=16.0),
            KEEP(),
            fixed=({"s": np.array([2, 10, 8], np.int64)},),
            evidence=_reshaped_nearest(norm, eps=1e-5 if norm == "ln" else 1e-6),
        )
        case(
            f"{norm}_unknown_rank_positive_axis",
            "3",
            f"{norm} over axis 2 of a tensor of unknown rank (fed rank 4)",
            _reshaped_norm(norm, (2,), None, (2, 5, 16)),
            KEEP(),
            fixed=rank4,
            evidence=_reshaped_nearest(norm, eps=1e-5 if norm == "ln" else 1e-6),
        )
        case(
            f"{norm}_unknown_rank_negative_axis",
            "exact-odd",
            f"{norm} over axis -1 of a tensor of unknown rank: exact whatever the rank",
            _reshaped_norm(norm, (-1,), None, (2, 5, 16)),
            EITHER,
            fixed=(*rank4, {"s": np.array([10, 16], np.int64)}),
        )
    case(
        "ln_claimed_rank3_actual_rank4_axes_1_2",
        "3",
        "LN over axes (1,2) of a Reshape claimed [2,5,16], really [2,5,4,4] (axes not trailing)",
        _reshaped_norm("ln", (1, 2), (2, 5, 16), (2, 5, 16)),
        KEEP(),
        fixed=rank4,
        evidence=_reshaped_nearest("ln", axis=-2),
    )
    case(
        "ln_stale_value_info_in_branch",
        "3",
        "a real LN inside a then-branch whose value_info and output claims are stale",
        _stale_in_branch,
        EITHER,
        fixed=({"c": np.array(True)}, {"c": np.array(False)}),
    )


# ================================================================ class 6: local functions


def _fn_ln(kind: str) -> onnx.FunctionProto:
    """A local function `LN(x)` whose body takes axes (@ax), keepdims (@kd) or epsilon (@eps)
    or gamma (@g) from the caller's attributes, per `kind`."""
    A = onnx.AttributeProto
    nodes = []

    def reduce(src, out):
        node = helper.make_node("ReduceMean", [src], [out])
        if kind == "axes":
            ref = A(name="axes", ref_attr_name="ax", type=A.INTS)
            node.attribute.append(ref)
        else:
            node.attribute.append(helper.make_attribute("axes", [-1]))
        if kind == "keepdims":
            node.attribute.append(A(name="keepdims", ref_attr_name="kd", type=A.INT))
        nodes.append(node)

    reduce("x", "mean")
    nodes.append(helper.make_node("Sub", ["x", "mean"], ["cent"]))
    nodes.append(helper.make_node("Mul", ["cent", "cent"], ["sq"]))
    reduce("sq", "var")
    eps_node = helper.make_node("Constant", [], ["eps"])
    if kind == "eps":
        eps_node.attribute.append(A(name="value_float", ref_attr_name="eps", type=A.FLOAT))
    else:
        eps_node.attribute.append(helper.make_attribute("value_float", 1e-5))
    nodes.append(eps_node)
    nodes.append(helper.make_node("Add", ["var", "eps"], ["shifted"]))
    nodes.append(helper.make_node("Sqrt", ["shifted"], ["std"]))
    nodes.append(helper.make_node("Div", ["cent", "std"], ["normed"]))
    if kind == "gamma":
        nodes.append(_gamma_ref_node())
        nodes.append(helper.make_node("Mul", ["normed", "g"], ["y"]))
    else:
        nodes.append(helper.make_node("Identity", ["normed"], ["y"]))
    attributes = {"axes": ["ax"], "keepdims": ["kd"], "eps": ["eps"], "gamma": ["g"]}[kind]
    return helper.make_function(
        "local", f"LN_{kind}", ["x"], ["y"], nodes, [helper.make_opsetid("", 17)], attributes
    )


def _gamma_ref_node() -> onnx.NodeProto:
    A = onnx.AttributeProto
    node = helper.make_node("Constant", [], ["g"])
    node.attribute.append(A(name="value_floats", ref_attr_name="g", type=A.FLOATS))
    return node


def _fn_model(kind: str, calls: list[dict], shape=SHAPE, wrap_if=False) -> Callable:
    def build():
        fn = _fn_ln(kind)
        nodes, outputs = [], []
        for index, attrs in enumerate(calls):
            nodes.append(
                helper.make_node(f"LN_{kind}", ["x"], [f"y{index}"], domain="local", **attrs)
            )
            outputs.append(vi(f"y{index}", F, shape))
        inputs = [vi("x", F, shape)]
        if wrap_if:
            then_g = helper.make_graph(nodes, "then", [], outputs)
            else_nodes = [helper.make_node("Identity", ["x"], [f"e{i}"]) for i in range(len(calls))]
            else_g = helper.make_graph(
                else_nodes, "else", [], [vi(f"e{i}", F, shape) for i in range(len(calls))]
            )
            nodes = [
                helper.make_node(
                    "If",
                    ["c"],
                    [f"z{i}" for i in range(len(calls))],
                    then_branch=then_g,
                    else_branch=else_g,
                )
            ]
            outputs = [vi(f"z{i}", F, shape) for i in range(len(calls))]
            inputs.append(vi("c", BOOL, []))
        graph = helper.make_graph(nodes, "fn", inputs, outputs)
        m = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
            functions=[fn],
        )
        m.ir_version = 8
        return m

    return build


def _fn_nested() -> onnx.ModelProto:
    """Outer(x, ax=...) calls Inner(x) with ax=@ax: the reference passes through two levels."""
    A = onnx.AttributeProto
    inner = _fn_ln("axes")
    call = helper.make_node("LN_axes", ["x"], ["y"], domain="local")
    call.attribute.append(A(name="ax", ref_attr_name="outer_ax", type=A.INTS))
    outer = helper.make_function(
        "local",
        "Outer",
        ["x"],
        ["y"],
        [call],
        [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
        ["outer_ax"],
    )
    nodes = [
        helper.make_node("Outer", ["x"], ["y0"], domain="local", outer_ax=[-1]),
        helper.make_node("Outer", ["x"], ["y1"], domain="local", outer_ax=[1]),
    ]
    graph = helper.make_graph(
        nodes, "nested", [vi("x", F, SHAPE)], [vi("y0", F, SHAPE), vi("y1", F, SHAPE)]
    )
    m = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
        functions=[inner, outer],
    )
    m.ir_version = 8
    return m


def _fn_default_attr() -> onnx.ModelProto:
    """The function declares eps with a default (0.5); one call passes 1e-5, one passes none."""
    fn = _fn_ln("eps")
    fn.ClearField("attribute")
    fn.attribute_proto.extend([helper.make_attribute("eps", 0.5)])
    nodes = [
        helper.make_node("LN_eps", ["x"], ["y0"], domain="local", eps=1e-5),
        helper.make_node("LN_eps", ["x"], ["y1"], domain="local"),
    ]
    graph = helper.make_graph(
        nodes, "defaults", [vi("x", F, SHAPE)], [vi("y0", F, SHAPE), vi("y1", F, SHAPE)]
    )
    m = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
        functions=[fn],
    )
    m.ir_version = 8
    return m


def _fn_eps_input() -> onnx.ModelProto:
    """The function takes epsilon as an input; the callers pass two different initializers."""
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["mean"], axes=[-1]),
        helper.make_node("Sub", ["x", "mean"], ["cent"]),
        helper.make_node("Mul", ["cent", "cent"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["var"], axes=[-1]),
        helper.make_node("Add", ["var", "e"], ["shifted"]),
        helper.make_node("Sqrt", ["shifted"], ["std"]),
        helper.make_node("Div", ["cent", "std"], ["y"]),
    ]
    fn = helper.make_function(
        "local", "LNe", ["x", "e"], ["y"], nodes, [helper.make_opsetid("", 17)]
    )
    calls = [
        helper.make_node("LNe", ["x", "e1"], ["y0"], domain="local"),
        helper.make_node("LNe", ["x", "e2"], ["y1"], domain="local"),
    ]
    graph = helper.make_graph(
        calls,
        "fn_input",
        [vi("x", F, SHAPE)],
        [vi("y0", F, SHAPE), vi("y1", F, SHAPE)],
        [
            numpy_helper.from_array(np.float32(1e-5), "e1"),
            numpy_helper.from_array(np.float32(0.5), "e2"),
        ],
    )
    m = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
        functions=[fn],
    )
    m.ir_version = 8
    return m


def _class6() -> None:
    square = (4, 4, 4)
    case(
        "fn_axes_ref_called_last_and_middle",
        "6",
        "local function LN with ReduceMean(axes=@ax), called with ax=[-1] and ax=[1]",
        _fn_model("axes", [{"ax": [-1]}, {"ax": [1]}]),
        EITHER,
    )
    case(
        "fn_axes_ref_called_middle_only",
        "6",
        "local function LN with ReduceMean(axes=@ax), called once with ax=[1] (not trailing)",
        _fn_model("axes", [{"ax": [1]}]),
        KEEP(),
        evidence=nearest("ln", out="y0", gamma=None, beta=None),
    )
    case(
        "fn_keepdims_ref_called_with_0",
        "6",
        "local function LN with keepdims=@kd called with kd=0 on [4,4,4] (broadcasts wrongly)",
        _fn_model("keepdims", [{"kd": 0}], shape=square),
        KEEP(),
        evidence=nearest("ln", out="y0", gamma=None, beta=None),
    )
    case(
        "fn_keepdims_ref_called_with_1_and_0",
        "6",
        "local function LN with keepdims=@kd called with kd=1 and kd=0 on [4,4,4]",
        _fn_model("keepdims", [{"kd": 1}, {"kd": 0}], shape=square),
        EITHER,
    )
    case(
        "fn_eps_ref_two_values",
        "6",
        "local function LN with Constant(value_float=@eps), called with 1e-5 and 0.5",
        _fn_model("eps", [{"eps": 1e-5}, {"eps": 0.5}]),
        EITHER,
    )
    case(
        "fn_eps_ref_zero",
        "6",
        "local function LN with Constant(value_float=@eps), called once with eps=0",
        _fn_model("eps", [{"eps": 0.0}]),
        KEEP(),
        evidence=nearest("ln", out="y0", gamma=None, beta=None),
    )
    case(
        "fn_eps_ref_single_call",
        "6",
        "local function LN with Constant(value_float=@eps), called once with 0.5",
        _fn_model("eps", [{"eps": 0.5}]),
        EITHER,
    )
    case(
        "fn_gamma_ref_two_values",
        "6",
        "local function LN with Constant(value_floats=@g) gamma, called with two gammas",
        _fn_model(
            "gamma",
            [{"g": list(np.linspace(0.5, 1.5, 16))}, {"g": list(np.linspace(-2.0, 2.0, 16))}],
        ),
        EITHER,
    )
    case(
        "fn_nested_axes_ref",
        "6",
        "Outer(outer_ax) calls LN_axes(ax=@outer_ax); called with [-1] and [1]",
        _fn_nested,
        EITHER,
    )
    case(
        "fn_attribute_default",
        "6",
        "function attribute eps with default 0.5: called with 1e-5 and without",
        _fn_default_attr,
        EITHER,
    )
    case(
        "fn_eps_as_input",
        "6",
        "function takes epsilon as an input; two callers pass 1e-5 and 0.5",
        _fn_eps_input,
        EITHER,
    )
    case(
        "fn_axes_ref_inside_if",
        "6",
        "function LN(axes=@ax) called inside an If branch with ax=[-1] and [1]",
        _fn_model("axes", [{"ax": [-1]}, {"ax": [1]}], wrap_if=True),
        EITHER,
        fixed=({"c": np.array(True)}, {"c": np.array(False)}),
    )


# ================================================================ class 7: emitted-op contracts


def _residual(
    norm="ln",
    x_shape=SHAPE,
    skip_shape=SHAPE,
    gamma_shape=(16,),
    beta_shape=(16,),
    sum_used=False,
    skip_const=False,
    same=False,
    dtype=np.float32,
):
    """h = Add(x, skip); y = norm(h) (gamma/beta of the given shapes); optionally z = h + y."""

    def build():
        g = G(dtype=dtype)
        elem = F if dtype == np.float32 else F16
        inputs = [("x", elem, x_shape)]
        if same:
            skip = "x"
        elif skip_const:
            skip = g.init(g.random(skip_shape, -1, 1), "skipc")
        else:
            skip = "skip"
            inputs.append(("skip", elem, skip_shape))
        h = g.op("Add", ["x", skip], "h")
        out_shape = tuple(np.broadcast_shapes(x_shape, skip_shape if not same else x_shape))
        gamma = g.random(gamma_shape) if gamma_shape is not None else None
        if norm == "ln":
            beta = g.random(beta_shape, -0.5, 0.5) if beta_shape is not None else None
            ln(g, h, gamma=gamma, beta=beta, shape=out_shape, out="y")
        else:
            rms(g, h, gamma=gamma, shape=out_shape, out="y")
        y_shape = tuple(np.broadcast_shapes(out_shape, gamma_shape or (1,), beta_shape or (1,)))
        outputs = [("y", elem, y_shape)]
        if sum_used:
            g.op("Add", [h, "y"], "z")
            outputs.append(("z", elem, y_shape))
        return model(g, inputs, outputs)

    return build


def _class7() -> None:
    for norm, kind in (("ln", "layer-norm"), ("rms", "rms-norm")):
        beta = (16,) if norm == "ln" else None
        variants = {
            "baseline": ({}, FUSE(kind)),
            "gamma_3d": (
                {"gamma_shape": (1, 1, 16), "beta_shape": (1, 1, 16) if beta else None},
                EITHER,
            ),
            "gamma_2d": ({"gamma_shape": (1, 16), "beta_shape": (1, 16) if beta else None}, EITHER),
            "x_last_dim_1": ({"x_shape": (2, 5, 1)}, EITHER),
            "skip_last_dim_1": ({"skip_shape": (2, 5, 1)}, EITHER),
            "skip_1d": ({"skip_shape": (16,)}, EITHER),
            "skip_batch_broadcast": ({"skip_shape": (1, 5, 16)}, EITHER),
            "skip_seq_broadcast": ({"skip_shape": (2, 1, 16)}, EITHER),
            "skip_rank2": ({"skip_shape": (5, 16)}, EITHER),
            "x_rank2_skip_rank3": ({"x_shape": (5, 16)}, EITHER),
            "rank2_both": ({"x_shape": (5, 16), "skip_shape": (5, 16)}, EITHER),
            "rank4_both": ({"x_shape": (2, 3, 5, 16), "skip_shape": (2, 3, 5, 16)}, EITHER),
            "add_x_to_itself": ({"same": True}, EITHER),
            "skip_constant": ({"skip_const": True}, EITHER),
            "sum_used_downstream": ({"sum_used": True}, FUSE(kind)),
            "gamma_rank4_raises_output_rank": (
                {"gamma_shape": (1, 1, 1, 16), "beta_shape": (16,) if beta else None},
                EITHER,
            ),
            "float16": ({"dtype": np.float16}, EITHER),
        }
        if beta:
            variants["beta_rank4_raises_output_rank"] = ({"beta_shape": (1, 1, 1, 16)}, EITHER)
            variants["no_gamma_no_beta"] = ({"gamma_shape": None, "beta_shape": None}, EITHER)
        for label, (kwargs, expect) in variants.items():
            args = {"beta_shape": beta, **kwargs}
            case(
                f"{norm}_residual_{label}",
                "7",
                f"Add(x, skip) then {norm}: {label.replace('_', ' ')}",
                _residual(norm, **args),
                expect,
            )
    case(
        "ln_two_axes_gamma_broadcast_along_seq",
        "7",
        "LN over (-2,-1) with gamma [16] (broadcast along the normalised seq axis)",
        _simple("ln", axes=(-2, -1), gamma=np.linspace(0.5, 1.5, 16, dtype=np.float32), beta=None),
        EITHER,
    )
    case(
        "ln_two_axes_beta_scalar",
        "7",
        "LN over (-2,-1) with a scalar beta []",
        _simple("ln", axes=(-2, -1), beta=np.float32(0.25)),
        EITHER,
    )


# ================================================================ class 8: output guard


def _outputs_case(kind: str):
    def build():
        g = G()
        inputs = [("x", F, SHAPE)]
        outputs = [("y", F, SHAPE)]
        if kind == "norm_output_also_consumed":
            ln(g, "x", out="y")
            g.op("Relu", ["y"], "r")
            outputs.append(("r", F, SHAPE))
        elif kind == "input_passthrough_output":
            ln(g, "x", out="y")
            outputs = [("x", F, SHAPE), ("y", F, SHAPE)]
        elif kind == "mean_exposed":
            ln(g, "x", names={"mean": "m"}, out="y")
            outputs.append(("m", F, (2, 5, 1)))
        elif kind == "std_exposed_rms":
            rms(g, "x", out="y")
            sqrt = next(n.output[0] for n in g.nodes if n.op_type == "Sqrt")
            outputs.append((sqrt, F, (2, 5, 1)))
        elif kind == "outputs_reordered":
            a = ln(g, "x", out="y")
            ln(g, a, out="y2")
            outputs = [("y2", F, SHAPE), ("y", F, SHAPE)]
        elif kind == "unused_input":
            ln(g, "x", out="y")
            inputs.append(("unused", F, (3,)))
        elif kind == "symbolic_dims":
            ln(g, "x", out="y")
            inputs = [("x", F, ("batch", "seq", 16))]
            outputs = [("y", F, ("batch", "seq", 16))]
        elif kind == "two_identity_outputs":
            ln(g, "x", out="y")
            g.op("Identity", ["y"], "y_a")
            g.op("Identity", ["y"], "y_b")
            outputs = [("y_a", F, SHAPE), ("y_b", F, SHAPE)]
        elif kind == "centered_shared_by_two":
            ln(g, "x", names={"centered": "cent"}, out="y")
            g.op("Abs", ["cent"], "a")
            outputs.append(("a", F, SHAPE))
        elif kind == "norm_output_is_input_to_next_norm_stats_only":
            a = ln(g, "x", out="y")
            ln(g, "x", stat_src=a, out="z")
            outputs.append(("z", F, SHAPE))
        return model(g, inputs, outputs)

    return build


def _class8() -> None:
    kinds = {
        "norm_output_also_consumed": FUSE(),
        "input_passthrough_output": FUSE(),
        "mean_exposed": FUSE(),
        "std_exposed_rms": KEEP("intermediate-used-elsewhere"),
        "outputs_reordered": FUSE("layer-norm", 2),
        "unused_input": FUSE(),
        "symbolic_dims": FUSE(),
        "two_identity_outputs": FUSE(),
        "centered_shared_by_two": EITHER,
        "norm_output_is_input_to_next_norm_stats_only": Expect("fuse", {"layer-norm": 1}),
    }
    for kind, expect in kinds.items():
        case(
            f"out_{kind}",
            "8",
            f"graph outputs: {kind.replace('_', ' ')}",
            _outputs_case(kind),
            expect,
        )


# ================================================================ class 9: validation


def _branch_case(then_kind: str, cond: str = "input"):
    """An If whose then-branch holds `then_kind` and whose else-branch a real LN. cond "input":
    a bool graph input (validation feeds True); "threshold": ReduceMax(x) > 5e3."""

    def build():
        g = G()
        inputs = [("x", F, SHAPE)]
        if cond == "input":
            c = "c"
            inputs.append(("c", BOOL, []))
        else:
            c = g.op("Greater", [g.op("ReduceMax", ["x"], keepdims=0), g.init(5e3)])
        t = G("then_")
        if then_kind == "identity":
            t.op("Identity", ["x"], "t_out")
        elif then_kind == "unbiased":
            ln(t, "x", var="sum", divisor=15.0, out="t_out")
        elif then_kind == "exponent_one_3":
            ln(t, "x", exp=np.array([2.0] * 15 + [3.0], np.float32), out="t_out")
        elif then_kind == "real":
            ln(t, "x", out="t_out")
        e = G("else_")
        if then_kind == "real":
            e.op("Identity", ["x"], "e_out")
        else:
            ln(e, "x", out="e_out")
        g.nodes.append(
            _if_node(
                c, body(t, [], [("t_out", F, SHAPE)]), body(e, [], [("e_out", F, SHAPE)]), ["y"]
            )
        )
        return model(g, inputs)

    return build


def _nan_only_exponent() -> onnx.ModelProto:
    g = G()
    ln(g, "x", exp=np.float32(2.0000005), out="y")
    return model(g)


def _int_input_norm() -> onnx.ModelProto:
    g = G()
    xf = g.op("Cast", ["ids"], to=F)
    ln(g, xf, out="y")
    return model(g, [("ids", I64, SHAPE)])


def _fp16_overflow() -> onnx.ModelProto:
    g = G(dtype=np.float16)
    ln(g, "x", out="y")
    return model(g, [("x", F16, SHAPE)], [("y", F16, SHAPE)])


def _class9() -> None:
    both = ({"c": np.array(True)}, {"c": np.array(False)})
    case(
        "val_real_ln_in_else_branch",
        "9",
        "a real LN in the else-branch of an If on a bool input (validation feeds True)",
        _branch_case("identity"),
        FUSE(),
        fixed=both,
    )
    case(
        "val_unbiased_in_then_real_in_else",
        "9",
        "unbiased-variance look-alike in the then-branch, a real LN in the else-branch",
        _branch_case("unbiased"),
        Expect("fuse", {"layer-norm": 1}, max_sites=1),
        fixed=both,
    )
    case(
        "val_lookalike_in_untaken_threshold_branch",
        "9",
        "exponent [2..2,3] look-alike in a branch taken only when max(x) > 5e3",
        _branch_case("exponent_one_3", cond="threshold"),
        Expect("fuse", {"layer-norm": 1}, max_sites=1),
    )
    case(
        "val_real_ln_in_threshold_branch",
        "9",
        "a real LN in a branch taken only when max(x) > 5e3",
        _branch_case("real", cond="threshold"),
        FUSE(),
    )
    case(
        "val_exponent_2_0000005_nan_only_difference",
        "9",
        "LN with float32 exponent 2.0000005: differs only by NaN for negative bases",
        _nan_only_exponent,
        KEEP(),
        evidence=nearest("ln", gamma="find", beta="find"),
    )
    case(
        "val_norm_of_cast_int_input",
        "9",
        "LN of Cast(int64 input -> float)",
        _int_input_norm,
        FUSE(),
        fixed=({"ids": np.arange(160, dtype=np.int64).reshape(SHAPE) % 7},),
    )
    case(
        "val_float16_plain_ln_overflow_repair",
        "9",
        "float16 LN without casts: large inputs overflow the float16 variance (fused: repair)",
        _fp16_overflow,
        FUSE(),
    )


# ================================================================ hazards


def _custom_ln(variant: str):
    """Layer-norm look-alikes that need their own wiring."""

    def build():
        g = G()
        inputs = [("x", F, SHAPE)]
        gamma = g.init(np.linspace(0.5, 1.5, 16), "gamma_0")
        beta = g.init(np.linspace(-0.5, 0.5, 16), "beta_0")
        m = g.reduce("ReduceMean", "x", (-1,))
        c = g.op("Sub", ["x", m])
        sq = g.op("Pow", [c, g.init(2.0)])
        v = g.reduce("ReduceMean", sq, (-1,))
        eps = g.init(1e-5)
        shifted = g.op("Add", [v, eps])
        std = g.op("Sqrt", [shifted])
        if variant == "mean_minus_x":
            normed = g.op("Div", [g.op("Sub", [m, "x"]), std])
        elif variant == "x_over_std":
            normed = g.op("Div", ["x", std])
        elif variant == "no_sqrt":
            normed = g.op("Div", [c, shifted])
        elif variant == "std_over_centered":
            normed = g.op("Div", [std, c])
        elif variant == "mul_by_std":
            normed = g.op("Mul", [c, std])
        elif variant == "max_eps":
            normed = g.op("Div", [c, g.op("Sqrt", [g.op("Max", [v, g.init(1.0)])])])
        elif variant == "sub_eps":
            normed = g.op("Div", [c, g.op("Sqrt", [g.op("Sub", [v, eps])])])
        elif variant == "sub_negative_eps":
            normed = g.op("Div", [c, g.op("Sqrt", [g.op("Sub", [v, g.init(-1e-5)])])])
        elif variant == "square_of_mean":
            v2 = g.op("Mul", [g.reduce("ReduceMean", c, (-1,)), g.reduce("ReduceMean", c, (-1,))])
            normed = g.op("Div", [c, g.op("Sqrt", [g.op("Add", [v2, eps])])])
        elif variant == "variance_of_x":
            vx = g.reduce("ReduceMean", g.op("Mul", ["x", "x"]), (-1,))
            normed = g.op("Div", [c, g.op("Sqrt", [g.op("Add", [vx, eps])])])
        elif variant == "one_pass_minus_mean_not_squared":
            ex2 = g.reduce("ReduceMean", g.op("Mul", ["x", "x"]), (-1,))
            vv = g.op("Sub", [ex2, m])
            normed = g.op("Div", [c, g.op("Sqrt", [g.op("Add", [g.op("Abs", [vv]), eps])])])
        elif variant == "centered_by_other_axis_mean":
            m2 = g.reduce("ReduceMean", "x", (-2,))
            normed = g.op("Div", [g.op("Sub", ["x", m2]), std])
        elif variant == "abs_variance":
            va = g.reduce("ReduceMean", g.op("Abs", [c]), (-1,))
            normed = g.op("Div", [c, g.op("Sqrt", [g.op("Add", [va, eps])])])
        elif variant == "reduce_all_axes":
            ma = g.op("ReduceMean", ["x"], keepdims=1)
            ca = g.op("Sub", ["x", ma])
            va = g.op("ReduceMean", [g.op("Mul", [ca, ca])], keepdims=1)
            normed = g.op("Div", [ca, g.op("Sqrt", [g.op("Add", [va, eps])])])
        elif variant == "square_of_two_centerings":
            c2 = g.op("Sub", ["x", g.reduce("ReduceMean", "x", (-2,))])
            v2 = g.reduce("ReduceMean", g.op("Mul", [c, c2]), (-1,))
            normed = g.op("Div", [c, g.op("Sqrt", [g.op("Abs", [g.op("Add", [v2, eps])])])])
        elif variant == "centered_times_x":
            v2 = g.reduce("ReduceMean", g.op("Mul", [c, "x"]), (-1,))
            normed = g.op("Div", [c, g.op("Sqrt", [g.op("Add", [v2, eps])])])
        elif variant == "sqrt_pow_0_5":
            normed = g.op("Div", [c, g.op("Pow", [shifted, g.init(0.5)])])
        elif variant == "gamma_before_divide":
            normed = g.op("Div", [g.op("Mul", [c, gamma]), std])
            g.op("Add", [normed, beta], "y")
            return model(g, inputs)
        elif variant == "centered_via_neg_add":
            c2 = g.op("Add", ["x", g.op("Neg", [m])])
            normed = g.op("Div", [c2, std])
        elif variant == "two_eps_added":
            normed = g.op("Div", [c, g.op("Sqrt", [g.op("Add", [shifted, g.init(1e-5)])])])
        elif variant == "stats_of_other_tensor":
            inputs.append(("x2", F, SHAPE))
            m2 = g.reduce("ReduceMean", "x2", (-1,))
            c2 = g.op("Sub", ["x", m2])
            v2 = g.reduce("ReduceMean", g.op("Mul", [c2, c2]), (-1,))
            normed = g.op("Div", [c2, g.op("Sqrt", [g.op("Add", [v2, eps])])])
        elif variant == "variance_of_other_centered":
            inputs.append(("x2", F, SHAPE))
            m2 = g.reduce("ReduceMean", "x2", (-1,))
            c2 = g.op("Sub", ["x2", m2])
            v2 = g.reduce("ReduceMean", g.op("Mul", [c2, c2]), (-1,))
            normed = g.op("Div", [c, g.op("Sqrt", [g.op("Add", [v2, eps])])])
        else:
            raise ValueError(variant)
        g.op("Add", [g.op("Mul", [normed, gamma]), beta], "y")
        return model(g, inputs)

    return build


def _keepdims0_ln() -> onnx.ModelProto:
    g = G()
    m = g.op("ReduceMean", ["x"], axes=[-1], keepdims=0)
    c = g.op("Sub", ["x", m])
    v = g.op("ReduceMean", [g.op("Mul", [c, c])], axes=[-1], keepdims=0)
    g.op("Div", [c, g.op("Sqrt", [g.op("Add", [v, g.init(1e-5)])])], "y")
    return model(g, [("x", F, (4, 4, 4))], [("y", F, (4, 4, 4))])


def _hazards() -> None:
    lookalikes = {
        "x_over_std": None,
        "no_sqrt": None,
        "std_over_centered": None,
        "mul_by_std": None,
        "max_eps": None,
        "sub_eps": None,
        "square_of_mean": None,
        "variance_of_x": None,
        "one_pass_minus_mean_not_squared": None,
        "centered_by_other_axis_mean": None,
        "abs_variance": None,
        "variance_of_other_centered": None,
        "square_of_two_centerings": None,
    }
    for variant, reason in lookalikes.items():
        case(
            f"hz_ln_{variant}",
            "hazard",
            f"layer-norm look-alike: {variant.replace('_', ' ')}",
            _custom_ln(variant),
            KEEP(*(reason,) if reason else ()),
            evidence=nearest("ln"),
        )
    # exact since the README's promise of 2026-12-01: mean - x (gamma negated), statistics over
    # every axis of a static tensor (LayerNormalization axis=0), an RMS norm of x - mean(x2)
    for variant in ("mean_minus_x", "reduce_all_axes", "stats_of_other_tensor"):
        case(
            f"hz_ln_{variant}",
            "hazard",
            f"exact though unusual: {variant.replace('_', ' ')}",
            _custom_ln(variant),
            EITHER,
            evidence=nearest("ln"),
        )
    for variant in (
        "sub_negative_eps",
        "sqrt_pow_0_5",
        "gamma_before_divide",
        "centered_via_neg_add",
    ):
        case(
            f"odd_ln_{variant}",
            "exact-odd",
            f"exact layer norm spelled with {variant.replace('_', ' ')}",
            _custom_ln(variant),
            EITHER,
        )
    case(
        "odd_ln_variance_as_mean_of_centered_times_x",
        "exact-odd",
        "variance written mean((x - m) * x), which equals mean((x - m)^2)",
        _custom_ln("centered_times_x"),
        EITHER,
    )
    case(
        "odd_ln_two_eps_added",
        "exact-odd",
        "layer norm with (var + 1e-5) + 1e-5: epsilon 2e-5",
        _custom_ln("two_eps_added"),
        EITHER,
    )
    near = nearest("ln")
    simple_ln = {
        "unbiased_variance": ({"var": "sum", "divisor": 15.0}, ("unbiased-variance",)),
        "divisor_d_plus_1": ({"var": "sum", "divisor": 17.0}, ("variance-divisor",)),
        "epsilon_outside_sqrt": ({"eps_outside": True}, ("epsilon-outside-sqrt",)),
        "mean_last_var_two": ({"axes": (-1,), "var_axes": (-2, -1)}, ("mismatched-axes",)),
        "mean_two_var_last": (
            {"axes": (-2, -1), "var_axes": (-1,), "gamma": None, "beta": None},
            ("mismatched-axes",),
        ),
        "batch_axes_all": ({"axes": (0, 1, 2), "gamma": None, "beta": None}, None),
        "batch_axis_only": ({"axes": (0,), "gamma": None, "beta": None}, ("batch-axis",)),
        "gamma_per_token": (
            {"gamma": np.linspace(0.1, 2, 80, dtype=np.float32).reshape(5, 16)},
            ("gamma-shape",),
        ),
        "gamma_per_batch": (
            {"gamma": np.linspace(0.1, 2, 32, dtype=np.float32).reshape(2, 1, 16)},
            ("gamma-shape",),
        ),
        "gamma_per_token_column": (
            {"gamma": np.linspace(0.1, 2, 5, dtype=np.float32).reshape(5, 1)},
            ("gamma-shape",),
        ),
        "beta_per_token": (
            {"beta": np.linspace(-2, 2, 80, dtype=np.float32).reshape(5, 16)},
            ("beta-shape",),
        ),
        "negative_epsilon": ({"eps": -1e-5}, ("epsilon-not-positive",)),
        "zero_epsilon": ({"eps": 0.0}, ("epsilon-not-positive",)),
        "non_trailing_axis": ({"axes": (1,), "gamma": None, "beta": None}, ("non-trailing-axes",)),
        "sum_not_mean_variance": ({"var": "sum", "divisor": 1.0}, ()),
    }
    for label, (kwargs, reasons) in simple_ln.items():
        case(
            f"hz_ln_{label}",
            "hazard",
            f"layer-norm look-alike: {label.replace('_', ' ')}",
            _simple("ln", **kwargs),
            EITHER if reasons is None else KEEP(*reasons),
            evidence=near,
        )
    case(
        "hz_ln_keepdims_0_square",
        "hazard",
        "LN with keepdims=0 on [4,4,4]: the mean broadcasts along the wrong axis",
        _keepdims0_ln,
        KEEP(),
        evidence=nearest("ln", gamma=None, beta=None),
    )
    near_rms = nearest("rms")
    simple_rms = {
        "epsilon_outside_sqrt": ({"eps_outside": True}, ("epsilon-outside-sqrt",)),
        "sum_not_mean": ({"var": "sum", "divisor": 1.0}, ()),
        "divisor_d_minus_1": ({"var": "sum", "divisor": 15.0}, ()),
        "non_trailing_axis": ({"axes": (1,), "gamma": None}, ("non-trailing-axes",)),
        "batch_axis": ({"axes": (0, 1, 2), "gamma": None}, None),
        "gamma_per_token": (
            {"gamma": np.linspace(0.1, 2, 80, dtype=np.float32).reshape(5, 16)},
            ("gamma-shape",),
        ),
        "negative_epsilon": ({"eps": -1e-6}, ("epsilon-not-positive",)),
        "cube": ({"exp": 3.0}, ()),
    }
    for label, (kwargs, reasons) in simple_rms.items():
        case(
            f"hz_rms_{label}",
            "hazard",
            f"RMS-norm look-alike: {label.replace('_', ' ')}",
            _simple("rms", **kwargs),
            EITHER if reasons is None else KEEP(*reasons),
            evidence=near_rms,
        )
    case(
        "hz_rms_numerator_other_tensor",
        "hazard",
        "x2 / sqrt(mean(x^2) + eps): numerator is another tensor",
        _rms_other_numerator,
        KEEP(),
        evidence=nearest("rms"),
    )
    case(
        "hz_rms_mean_abs",
        "hazard",
        "x / sqrt(mean(|x|) + eps)",
        _rms_abs,
        KEEP("mean-abs-not-square"),
        evidence=nearest("rms"),
    )
    from models import builders

    for name, (build, reason) in builders.OTHER_FAMILIES.items():
        case(f"hz_family_{name}", "hazard", f"other family: {name}", build, KEEP(reason))


def _rms_other_numerator() -> onnx.ModelProto:
    g = G()
    rms(g, "x", num="x2", gamma=None, out="y")
    return model(g, [("x", F, SHAPE), ("x2", F, SHAPE)])


def _rms_abs() -> onnx.ModelProto:
    g = G()
    ms = g.reduce("ReduceMean", g.op("Abs", ["x"]), (-1,))
    g.op("Div", ["x", g.op("Sqrt", [g.op("Add", [ms, g.init(1e-6)])])], "y")
    return model(g)


# ================================================================ exact-odd


def _odd_constants(form: str, norm: str = "ln"):
    """Exact norms whose constants are Constant nodes or Identity-wrapped initializers."""

    def build():
        g = G()
        if form == "constant_nodes":
            mk = g.const_node
        elif form == "identity":

            def mk(value):
                return g.op("Identity", [g.init(value)])
        elif form == "double_identity":

            def mk(value):
                return g.op("Identity", [g.op("Identity", [g.init(value)])])
        else:
            raise ValueError(form)
        if norm == "ln":
            ln(
                g,
                "x",
                exp=mk(2.0),
                eps=mk(1e-5),
                gamma=mk(np.linspace(0.5, 1.5, 16)),
                beta=mk(np.linspace(-0.5, 0.5, 16)),
                out="y",
            )
        else:
            rms(g, "x", exp=mk(2.0), eps=mk(1e-6), gamma=mk(np.linspace(0.5, 1.5, 16)), out="y")
        return model(g)

    return build


def _commuted(norm: str):
    def build():
        g = G()
        if norm == "ln":
            m = g.reduce("ReduceMean", "x", (-1,))
            c = g.op("Sub", ["x", m])
            v = g.reduce("ReduceMean", g.op("Mul", [c, c]), (-1,))
            inv = g.op("Reciprocal", [g.op("Sqrt", [g.op("Add", [g.init(1e-5), v])])])
            normed = g.op("Mul", [inv, c])
            scaled = g.op("Mul", [g.init(np.linspace(0.5, 1.5, 16)), normed])
            g.op("Add", [g.init(np.linspace(-0.5, 0.5, 16)), scaled], "y")
        else:
            v = g.reduce("ReduceMean", g.op("Mul", ["x", "x"]), (-1,))
            inv = g.op("Reciprocal", [g.op("Sqrt", [g.op("Add", [g.init(1e-6), v])])])
            g.op("Mul", [g.init(np.linspace(0.5, 1.5, 16)), g.op("Mul", [inv, "x"])], "y")
        return model(g)

    return build


def _rank4_three_axes() -> onnx.ModelProto:
    g = G()
    ln(g, "x", axes=(-3, -2, -1), shape=(2, 3, 4, 5), out="y")
    return model(g, [("x", F, (2, 3, 4, 5))], [("y", F, (2, 3, 4, 5))])


def _opset_variant(norm: str, opset: int, axes_form: str = "default"):
    def build():
        g = G(opset=opset)
        if axes_form == "constant_node":
            axes = g.const_node([-1], dtype=np.int64)
        elif axes_form == "identity":
            axes = g.op("Identity", [g.init([-1], dtype=np.int64)])
        else:
            axes = (-1,)
        (ln if norm == "ln" else rms)(g, "x", axes=axes, out="y")
        return model(g)

    return build


def _builder_cases() -> None:
    from models import builders

    shape = (2, 7, 32)  # the builders' own sizes: some specs fix tensor shapes
    for name, spec in builders.LAYER_NORM_POSITIVES.items():
        case(
            f"odd_builder_ln_{name}",
            "exact-odd",
            f"models.builders layer-norm spelling {name} in a residual block",
            lambda spec=spec: builders.norm_model(spec, shape=shape),
            FUSE(),
        )
    for name, spec in builders.RMS_NORM_POSITIVES.items():
        case(
            f"odd_builder_rms_{name}",
            "exact-odd",
            f"models.builders RMS spelling {name} in a residual block",
            lambda spec=spec: builders.norm_model(spec, shape=shape),
            FUSE("rms-norm"),
        )
    for name, spec in builders.RMS_NORM_FLOAT16_POSITIVES.items():
        case(
            f"odd_builder_rms_f16_{name}",
            "exact-odd",
            f"models.builders float16 RMS spelling {name}",
            lambda spec=spec: builders.norm_model(spec, shape=shape, dtype=np.float16),
            FUSE("rms-norm"),
        )
    case(
        "odd_builder_ln_f16_casts_around",
        "exact-odd",
        "float16 layer norm with Cast(float32) around the statistics",
        lambda: builders.norm_model(
            builders.LayerNormSpec(casts="around"), shape=shape, dtype=np.float16
        ),
        FUSE(),
    )
    case(
        "odd_builder_ln_two_layers_opset13",
        "exact-odd",
        "two residual layer-norm blocks at opset 13 (raised to 17)",
        lambda: builders.norm_model(builders.LayerNormSpec(), shape=shape, opset=13, layers=2),
        FUSE("layer-norm", 2),
    )


def _exact_odd() -> None:
    for form in ("constant_nodes", "identity", "double_identity"):
        case(
            f"odd_ln_{form}",
            "exact-odd",
            f"exact layer norm whose constants are {form.replace('_', ' ')}",
            _odd_constants(form),
            FUSE(),
        )
        case(
            f"odd_rms_{form}",
            "exact-odd",
            f"exact RMS norm whose constants are {form.replace('_', ' ')}",
            _odd_constants(form, "rms"),
            FUSE("rms-norm"),
        )
    case(
        "odd_ln_all_commuted",
        "exact-odd",
        "every commutative operand swapped",
        _commuted("ln"),
        FUSE(),
    )
    case(
        "odd_rms_all_commuted",
        "exact-odd",
        "every commutative operand swapped",
        _commuted("rms"),
        FUSE("rms-norm"),
    )
    case(
        "odd_ln_positive_axes_1_2",
        "exact-odd",
        "layer norm over axes (1, 2) of a rank-3 tensor",
        _simple("ln", axes=(1, 2), gamma=None, beta=None),
        FUSE(),
    )
    case(
        "odd_ln_rank4_three_axes",
        "exact-odd",
        "layer norm over (-3,-2,-1) of rank 4",
        _rank4_three_axes,
        FUSE(),
    )
    case(
        "odd_ln_eps_shape_1_1_1",
        "exact-odd",
        "layer norm with epsilon of shape [1,1,1]",
        _simple("ln", eps=np.full((1, 1, 1), 1e-5, np.float32)),
        FUSE(),
    )
    case(
        "odd_ln_gamma_2d_1_16",
        "exact-odd",
        "layer norm with gamma and beta [1,16]",
        _simple(
            "ln",
            gamma=np.linspace(0.5, 1.5, 16, dtype=np.float32).reshape(1, 16),
            beta=np.linspace(-1, 1, 16, dtype=np.float32).reshape(1, 16),
        ),
        EITHER,
    )
    case(
        "odd_ln_scalar_gamma_beta",
        "exact-odd",
        "layer norm with scalar gamma and beta",
        _simple("ln", gamma=np.float32(1.5), beta=np.float32(-0.25)),
        EITHER,
    )
    for opset in (11, 13, 18):
        case(
            f"odd_ln_opset{opset}",
            "exact-odd",
            f"layer norm at opset {opset}",
            _opset_variant("ln", opset),
            FUSE(),
        )
    case(
        "odd_rms_opset23",
        "exact-odd",
        "RMS norm at opset 23 (RMSNormalization exists)",
        _opset_variant("rms", 23),
        FUSE("rms-norm"),
    )
    for form in ("constant_node", "identity"):
        case(
            f"odd_ln_opset18_axes_{form}",
            "exact-odd",
            f"layer norm at opset 18 whose axes input is a {form.replace('_', ' ')}",
            _opset_variant("ln", 18, form),
            FUSE(),
        )
        case(
            f"odd_rms_opset18_axes_{form}",
            "exact-odd",
            f"RMS norm at opset 18 whose axes input is a {form.replace('_', ' ')}",
            _opset_variant("rms", 18, form),
            FUSE("rms-norm"),
        )
    case(
        "odd_ln_eps_add_folded",
        "exact-odd",
        "layer norm with eps = Add(5e-6, 5e-6)",
        _eps_chain("ln", lambda g: g.op("Add", [g.init(5e-6), g.init(5e-6)]), opset=17),
        FUSE(),
    )
    case(
        "odd_ln_float64",
        "exact-odd",
        "a float64 layer norm",
        _simple("ln", dtype=np.float64),
        EITHER,
    )
    case(
        "odd_ln_float16_plain_mul",
        "exact-odd",
        "a float16 layer norm with Mul(d,d) and no casts",
        _simple("ln", dtype=np.float16, exp="mul"),
        FUSE(),
    )
    _builder_cases()


# ================================================ names, outputs, odd attributes


def _collision(where: str, norm: str = "ln"):
    """A tensor already named like the fused node's new constant inputs ("y/<Op>/input1")."""

    def build():
        g = G()
        op = "LayerNormalization" if norm == "ln" else "SimplifiedLayerNormalization"
        taken = f"y/{op}/input1"
        inputs, outputs = [("x", F, SHAPE)], [("y", F, SHAPE)]
        (ln if norm == "ln" else rms)(g, "x", out="y")
        if where == "graph_input":
            inputs.append((taken, F, (16,)))
            g.op("Add", ["x", taken], "z")
            outputs.append(("z", F, SHAPE))
        elif where == "node_output":
            g.op("Neg", ["x"], taken)
            outputs.append((taken, F, SHAPE))
        elif where == "initializer":
            g.init(np.full(16, 7.0), taken)
            g.op("Add", ["x", taken], "z")
            outputs.append(("z", F, SHAPE))
        elif where == "body_node_output":
            t = G("then_")
            t.op("Neg", ["x"], taken)
            t.op("Identity", [taken], "t_out")
            e = G("else_")
            e.op("Identity", ["x"], "e_out")
            g.nodes.append(
                _if_node(
                    "c",
                    body(t, [], [("t_out", F, SHAPE)]),
                    body(e, [], [("e_out", F, SHAPE)]),
                    ["z"],
                )
            )
            inputs.append(("c", BOOL, []))
            outputs.append(("z", F, SHAPE))
        elif where == "skip_graph_input":
            g = G()
            h = g.op("Add", ["x", "skip"], "h")
            taken = "y/SkipLayerNormalization/input2"
            ln(g, h, out="y")
            inputs = [("x", F, SHAPE), ("skip", F, SHAPE), (taken, F, (16,))]
            g.op("Add", ["x", taken], "z")
            outputs.append(("z", F, SHAPE))
        return model(g, inputs, outputs)

    return build


def _constant_as_output(which: str):
    """A constant of the norm that is also a graph output (it must still be produced)."""

    def build():
        g = G()
        outputs = [("y", F, SHAPE)]
        if which == "eps_initializer":
            g.init(1e-5, "eps")
            ln(g, "x", eps="eps", out="y")
            outputs.append(("eps", F, ()))
        elif which == "eps_identity":
            e = g.op("Identity", [g.init(1e-5)], "eps_id")
            ln(g, "x", eps=e, out="y")
            outputs.append(("eps_id", F, ()))
        elif which == "exponent_constant_node":
            two = g.const_node(2.0, "two_k")
            ln(g, "x", exp=two, out="y")
            outputs.append(("two_k", F, ()))
        elif which == "gamma_initializer":
            g.init(np.linspace(0.5, 1.5, 16), "gamma")
            rms(g, "x", gamma="gamma", out="y")
            outputs.append(("gamma", F, (16,)))
        return model(g, outputs=outputs)

    return build


def _node_names(mode: str):
    """Two norms whose nodes all share one name, or have none."""

    def build():
        g = G()
        a = ln(g, "x")
        rms(g, a, out="y")
        for node in g.nodes:
            node.name = "" if mode == "empty" else "dup"
        return model(g)

    return build


def _noop_empty_axes(noop: int):
    def build():
        g = G(opset=18)
        m = g.op("ReduceMean", ["x"], keepdims=1, noop_with_empty_axes=noop)
        c = g.op("Sub", ["x", m])
        v = g.op("ReduceMean", [g.op("Mul", [c, c])], keepdims=1, noop_with_empty_axes=noop)
        g.op("Div", [c, g.op("Sqrt", [g.op("Add", [v, g.init(1e-5)])])], "y")
        return model(g)

    return build


def _no_keepdims_attribute() -> onnx.ModelProto:
    g = G()
    m = g.op("ReduceMean", ["x"], axes=[-1])
    c = g.op("Sub", ["x", m])
    v = g.op("ReduceMean", [g.op("Mul", [c, c])], axes=[-1])
    g.op("Div", [c, g.op("Sqrt", [g.op("Add", [v, g.init(1e-5)])])], "y")
    return model(g)


def _value_int_exponent() -> onnx.ModelProto:
    g = G()
    two = g.fresh("two")
    g.nodes.append(helper.make_node("Constant", [], [two], value_int=2))
    ln(g, "x", exp=two, out="y")
    return model(g)


def _outer_overridable_eps_in_body(shadow: bool):
    def build():
        g = G()
        g.init(1e-5, "eps")
        t = G("then_")
        if shadow:
            t.init(0.5, "eps")
        ln(t, "x", eps="eps", out="t_out")
        e = G("else_")
        e.op("Identity", ["x"], "e_out")
        g.nodes.append(
            _if_node(
                "c", body(t, [], [("t_out", F, SHAPE)]), body(e, [], [("e_out", F, SHAPE)]), ["y"]
            )
        )
        return model(g, [("x", F, SHAPE), ("c", BOOL, [])], overridable=["eps"])

    return build


def _shape_divisor(claimed: bool):
    """Variance = ReduceSum / Cast(Shape(r)[-1]); with `claimed`, r is a Reshape of unknown
    rank whose value_info claims [2,5,16] while it is [2,10,8]."""

    def build():
        g = G()
        if claimed:
            r = g.op("Reshape", ["inp", "s"], "r")
            inputs = [("inp", F, SHAPE), ("s", I64, ["n"])]
        else:
            r, inputs = "x", [("x", F, SHAPE)]
        d = g.op(
            "Cast",
            [g.op("Gather", [g.op("Shape", [r]), g.init(-1, dtype=np.int64)], axis=0)],
            to=F,
        )
        ln(g, r, var="sum", divisor=d, gamma=None, beta=None, out="y")
        value_info = [("r", F, (2, 5, 16))] if claimed else []
        return model(g, inputs, [("y", F, SHAPE)], value_info=value_info)

    return build


def _overridable_in_body(body_kind: str, constant: str):
    """A norm inside an If/Loop/Scan body reading `constant` (eps | exp | axes | gamma) from an
    outer initializer that is also a graph input."""

    def build():
        opset = 18 if constant == "axes" else 17
        g = G(opset=opset)
        value = {"eps": 1e-5, "exp": 2.0, "axes": [-1], "gamma": np.linspace(0.5, 1.5, 16)}[
            constant
        ]
        g.init(value, "outer_c", np.int64 if constant == "axes" else np.float32)
        b = G("b_", opset=opset)
        shape = (5, 16) if body_kind == "scan" else SHAPE
        src = "xs" if body_kind == "scan" else ("h" if body_kind == "loop" else "x")
        ln(b, src, shape=shape, out="b_out", **{constant: "outer_c"})
        inputs = [("x", F, SHAPE)]
        if body_kind == "if":
            e = G("else_")
            e.op("Identity", ["x"], "e_out")
            node = _if_node(
                "c", body(b, [], [("b_out", F, SHAPE)]), body(e, [], [("e_out", F, SHAPE)]), ["y"]
            )
            inputs.append(("c", BOOL, []))
        elif body_kind == "loop":
            b.op("Identity", ["cond_in"], "cond_out")
            loop_body = body(
                b,
                [("i", I64, []), ("cond_in", BOOL, []), ("h", F, SHAPE)],
                [("cond_out", BOOL, []), ("b_out", F, SHAPE)],
            )
            g.init(1, "trip", np.int64)
            node = helper.make_node("Loop", ["trip", "", "x"], ["y"], body=loop_body)
        else:
            scan_body = body(b, [("xs", F, (5, 16))], [("b_out", F, (5, 16))])
            node = helper.make_node("Scan", ["x"], ["y"], body=scan_body, num_scan_inputs=1)
        g.nodes.append(node)
        return model(g, inputs, overridable=["outer_c"])

    return build


def _fn_overridable_eps() -> onnx.ModelProto:
    """The local function taking epsilon as an input, fed an overridable initializer."""
    m = _fn_eps_input()
    m.graph.input.append(vi("e1", F, []))
    return m


def _roi_align_opset13(where: str):
    """A layer norm at opset 13 (normfuse may raise the opset to 17) next to a RoiAlign, whose
    default coordinate mode changed at opset 16, placed in `where`: main | if | loop | function."""

    def build():
        g = G(opset=13)
        ln(g, "x", out="y")
        rois = g.init([[1.0, 1.0, 5.0, 5.0]], "rois")
        g.init([0], "bi", np.int64)
        roi = helper.make_node(
            "RoiAlign",
            ["feat", rois, "bi"],
            ["r"],
            output_height=2,
            output_width=2,
            sampling_ratio=2,
        )
        inputs = [("x", F, SHAPE), ("feat", F, (1, 1, 8, 8))]
        out = ("r", F, (1, 1, 2, 2))
        functions = []
        opsets = {}
        if where == "main":
            g.nodes.append(roi)
        elif where == "if":
            roi.output[0] = "t_out"
            then_g = helper.make_graph([roi], "then", [], [vi("t_out", F, (1, 1, 2, 2))])
            else_g = helper.make_graph(
                [helper.make_node("Neg", ["feat"], ["e_out"])],
                "else",
                [],
                [vi("e_out", F, (1, 1, 8, 8))],
            )
            g.nodes.append(_if_node("c", then_g, else_g, ["r"]))
            inputs.append(("c", BOOL, []))
        elif where == "loop":
            roi.output[0] = "r_out"
            roi.input[0] = "f"
            loop_body = helper.make_graph(
                [roi, helper.make_node("Identity", ["cond_in"], ["cond_out"])],
                "loop",
                [vi("i", I64, []), vi("cond_in", BOOL, []), vi("f", F, (1, 1, 8, 8))],
                [
                    vi("cond_out", BOOL, []),
                    vi("f_out", F, (1, 1, 8, 8)),
                    vi("r_out", F, (1, 1, 2, 2)),
                ],
            )
            loop_body.node.append(helper.make_node("Identity", ["f"], ["f_out"]))
            g.init(1, "trip", np.int64)
            g.nodes.append(
                helper.make_node("Loop", ["trip", "", "feat"], ["f_last", "r"], body=loop_body)
            )
            out = ("r", F, (1, 1, 1, 2, 2))
        else:
            fn_roi = helper.make_node(
                "RoiAlign",
                ["f", "rr", "b"],
                ["o"],
                output_height=2,
                output_width=2,
                sampling_ratio=2,
            )
            functions.append(
                helper.make_function(
                    "local", "Roi", ["f", "rr", "b"], ["o"], [fn_roi], [helper.make_opsetid("", 13)]
                )
            )
            g.nodes.append(helper.make_node("Roi", ["feat", rois, "bi"], ["r"], domain="local"))
            opsets = {"local": 1}
        return model(g, inputs, [("y", F, SHAPE), out], functions=functions, opsets=opsets)

    return build


def _opset13_plain_function() -> onnx.ModelProto:
    g = G(opset=13)
    ln(g, "x", out="y")
    fn = helper.make_function(
        "local",
        "R",
        ["a"],
        ["b"],
        [helper.make_node("Relu", ["a"], ["b"])],
        [helper.make_opsetid("", 13)],
    )
    g.nodes.append(helper.make_node("R", ["x"], ["r"], domain="local"))
    return model(g, outputs=[("y", F, SHAPE), ("r", F, SHAPE)], functions=[fn], opsets={"local": 1})


def _branch_dependent_width(norm: str, claim: bool):
    """An If yields x [2,5,16] (then) or its first 8 features [2,5,8] (else); a norm with
    divisor 16 (ReduceSum / 16) follows: a layer norm only on the then path."""

    def build():
        g = G()
        t = G("then_")
        t.op("Identity", ["x"], "t_out")
        e = G("else_")
        starts, ends, axes = (
            e.init([0], dtype=np.int64),
            e.init([8], dtype=np.int64),
            e.init([-1], dtype=np.int64),
        )
        e.op("Slice", ["x", starts, ends, axes], "e_out")
        g.nodes.append(
            _if_node(
                "c",
                body(t, [], [("t_out", F, SHAPE)]),
                body(e, [], [("e_out", F, (2, 5, 8))]),
                ["h"],
            )
        )
        f = ln if norm == "ln" else rms
        extra = {"beta": None} if norm == "ln" else {}
        f(g, "h", var="sum", divisor=16.0, gamma=None, out="y", **extra)
        value_info = [("h", F, SHAPE)] if claim else []
        return model(
            g,
            [("x", F, SHAPE), ("c", BOOL, [])],
            [("y", F, ("a", "b", "d"))],
            value_info=value_info,
        )

    return build


def _sparse_gamma() -> onnx.ModelProto:
    g = G()
    ln(g, "x", gamma="sg", out="y")
    m = model(g)
    dense = np.zeros(16, np.float32)
    dense[[1, 5, 9]] = [2.0, -1.0, 0.5]
    values = numpy_helper.from_array(dense[[1, 5, 9]], "sg")
    indices = numpy_helper.from_array(np.array([1, 5, 9], np.int64), "sg_indices")
    m.graph.sparse_initializer.append(helper.make_sparse_tensor(values, indices, [16]))
    return m


def _with_ms_node() -> onnx.ModelProto:
    g = G()
    a = ln(g, "x")
    g.nodes.append(helper.make_node("Gelu", [a], ["y"], domain="com.microsoft"))
    return model(g, opsets={"com.microsoft": 1})


def _ai_onnx_domain() -> onnx.ModelProto:
    m = _simple("ln")()
    m.opset_import[0].domain = "ai.onnx"
    return m


def _norm_of_initializer(overridable: bool):
    def build():
        g = G()
        g.init(np.random.default_rng(3).normal(1, 2, SHAPE), "w")
        a = ln(g, "w")
        g.op("Add", [a, "x"], "y")
        return model(g, overridable=["w"] if overridable else ())

    return build


def _symbolic_batch_positive_axes() -> onnx.ModelProto:
    g = G()
    ln(g, "x", axes=(1, 2), gamma=None, beta=None, out="y")
    return model(g, [("x", F, ("batch", 5, 16))], [("y", F, ("batch", 5, 16))])


def _rank1_ln() -> onnx.ModelProto:
    g = G()
    ln(g, "x", axes=(0,), shape=(16,), out="y")
    return model(g, [("x", F, (16,))], [("y", F, (16,))])


def _loop_growing_shape() -> onnx.ModelProto:
    """A Loop body normalises Expand(x_row, [i+1, 16]): the site's shape changes every trip."""
    g = G()
    b = G("loop_")
    one = b.init([1], dtype=np.int64)
    rows = b.op("Add", [b.op("Unsqueeze", ["i", b.init([0], dtype=np.int64)]), one])
    shape = b.op("Concat", [rows, b.init([16], dtype=np.int64)], axis=0)
    grown = b.op("Expand", ["row", shape])
    ln(b, grown, shape=(3, 16), out="n_out")
    b.op("ReduceSum", ["n_out", b.init([0], dtype=np.int64)], "s_out", keepdims=0)
    b.op("Identity", ["cond_in"], "cond_out")
    b.op("Identity", ["row"], "row_out")
    loop_body = body(
        b,
        [("i", I64, []), ("cond_in", BOOL, []), ("row", F, (1, 16))],
        [("cond_out", BOOL, []), ("row_out", F, (1, 16)), ("s_out", F, (16,))],
    )
    g.init(3, "trip", np.int64)
    g.nodes.append(helper.make_node("Loop", ["trip", "", "x"], ["x_last", "y"], body=loop_body))
    return model(g, [("x", F, (1, 16))], [("y", F, (3, 16))])


def _optional_inputs_and_reuse(kind: str):
    def build():
        g = G()
        if kind == "clip_empty_min":
            c = g.op("Clip", ["x", "", g.init(4.0)])
            ln(g, c, out="y")
        elif kind == "output_used_twice_by_one_node":
            a = ln(g, "x")
            g.op("Mul", [a, a], "y")
        elif kind == "output_read_in_branch":
            ln(g, "x", out="n")
            t = G("then_")
            t.op("Neg", ["n"], "t_out")
            e = G("else_")
            e.op("Identity", ["x"], "e_out")
            g.nodes.append(
                _if_node(
                    "c",
                    body(t, [], [("t_out", F, SHAPE)]),
                    body(e, [], [("e_out", F, SHAPE)]),
                    ["y"],
                )
            )
            return model(g, [("x", F, SHAPE), ("c", BOOL, [])])
        return model(g)

    return build


def _fn_in_loop() -> onnx.ModelProto:
    """A local function holding a layer norm, called from inside a Loop body."""
    m = builders.local_function_model(sequences=(5,), hidden=16)
    fn = m.functions[0]
    call = helper.make_node("DecomposedLayerNorm", ["h"], ["h_out"], domain="local")
    loop_body = helper.make_graph(
        [call, helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "loop",
        [vi("i", I64, []), vi("cond_in", BOOL, []), vi("h", F, (2, 5, 16))],
        [vi("cond_out", BOOL, []), vi("h_out", F, (2, 5, 16))],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trip", "", "x"], ["y"], body=loop_body)],
        "fn_in_loop",
        [vi("x", F, (2, 5, 16))],
        [vi("y", F, (2, 5, 16))],
        [numpy_helper.from_array(np.array(2, np.int64), "trip")],
    )
    out = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
        functions=[fn],
    )
    out.ir_version = 8
    return out


def _dynamic_affine(which: str, dims):
    """A layer norm whose gamma or beta is a graph input of shape `dims` (symbolic)."""

    def build():
        g = G()
        kwargs = {which: "p"}
        ln(g, "x", out="y", **kwargs)
        return model(g, [("x", F, SHAPE), ("p", F, dims)], [("y", F, ("a", "b", "c"))])

    return build


def _keras_variant(kind: str):
    """tf2onnx form with the subtracted mean over another axis, or a per-token beta."""

    def build():
        g = G()
        m = g.reduce("ReduceMean", "x", (-1,))
        c = g.op("Sub", ["x", m])
        v = g.reduce("ReduceMean", g.op("Mul", [c, c]), (-1,))
        r = g.op("Reciprocal", [g.op("Sqrt", [g.op("Add", [v, g.init(1e-3)])])])
        gr = g.op("Mul", [r, g.init(np.linspace(0.5, 1.5, 16), "kg")])
        m2 = g.reduce("ReduceMean", "x", (-2,)) if kind == "mean_other_axis" else m
        beta_shape = (5, 16) if kind == "beta_per_token" else (16,)
        beta = g.init(np.linspace(-1, 1, int(np.prod(beta_shape))).reshape(beta_shape), "kb")
        g.op("Add", [g.op("Mul", ["x", gr]), g.op("Sub", [beta, g.op("Mul", [m2, gr])])], "y")
        return model(g)

    return build


GN_SHAPE = (1, 8, 5, 5)


def _gn(g: G, x: str, groups, shape=GN_SHAPE, eps=1e-5, back: str = "shape", out=None, **kw) -> str:
    """A hand-written group norm: Reshape(x, groups) -> layer-norm statistics over the last axis
    -> Reshape back -> gamma[C,1,1] * y + beta[C,1,1]; `groups` is a shape value or a name."""
    target = (
        groups if isinstance(groups, str) else g.init(list(groups), g.fresh("groups"), np.int64)
    )
    grouped = g.op("Reshape", [x, target])
    normed = ln(g, grouped, eps=eps, gamma=None, beta=None, shape=(1, 4, 50), **kw)
    back_shape = g.op("Shape", [x]) if back == "shape" else back
    restored = g.op("Reshape", [normed, back_shape])
    channels = shape[1]
    scaled = g.op(
        "Mul", [restored, g.init(np.linspace(0.5, 1.5, channels).reshape(channels, 1, 1))]
    )
    return g.op("Add", [scaled, g.init(np.linspace(-1, 1, channels).reshape(channels, 1, 1))], out)


def _gn_case(kind: str):
    def build():
        g = G()
        inputs = [("x", F, GN_SHAPE)]
        overridable = ()
        if kind == "baseline":
            _gn(g, "x", (0, 4, -1), out="y")
        elif kind == "groups_overridable":
            g.init([0, 4, -1], "groups", np.int64)
            _gn(g, "x", "groups", out="y")
            overridable = ("groups",)
        elif kind == "eps_overridable":
            g.init(1e-5, "eps")
            _gn(g, "x", (0, 4, -1), eps="eps", out="y")
            overridable = ("eps",)
        elif kind == "groups_from_input":
            _gn(g, "x", "gshape", out="y")
            inputs.append(("gshape", I64, (3,)))
        elif kind == "unbiased":
            _gn(g, "x", (0, 4, -1), var="sum", divisor=49.0, out="y")
        elif kind == "symbolic_spatial":
            _gn(g, "x", (0, 4, -1), shape=(1, 8, "h", "w"), out="y")
            inputs = [("x", F, (1, 8, "h", "w"))]
            return model(g, inputs, [("y", F, (1, 8, "h", "w"))])
        elif kind == "contiguous_w_groups":
            _gn(g, "x", (0, -1, 5), out="y")
        elif kind == "back_to_other_shape":
            _gn(g, "x", (0, 4, -1), back=g.init([1, 8, 25, 1], dtype=np.int64), out="r")
            g.op("Reshape", ["r", g.init(list(GN_SHAPE), dtype=np.int64)], "y")
        elif kind == "branch_shadows_groups":
            g.init([0, 4, -1], "groups", np.int64)
            _gn(g, "x", "groups", out="y")
            t = G("then_")
            t.init([0, 2, -1], "groups", np.int64)
            _gn(t, "x", "groups", out="t_out")
            e = G("else_")
            e.op("Identity", ["x"], "e_out")
            g.nodes.append(
                _if_node(
                    "c",
                    body(t, [], [("t_out", F, GN_SHAPE)]),
                    body(e, [], [("e_out", F, GN_SHAPE)]),
                    ["z"],
                )
            )
            return model(
                g, [("x", F, GN_SHAPE), ("c", BOOL, [])], [("y", F, GN_SHAPE), ("z", F, GN_SHAPE)]
            )
        return model(g, inputs, [("y", F, GN_SHAPE)], overridable=overridable)

    return build


CF_SHAPE = (1, 4, 3, 4)


def _channel_first(kind: str):
    """ConvNeXt-style statistics over axis 1 of NCHW [1,4,3,4], with an affine per `kind`."""

    def build():
        g = G()
        axes = {"axes_1_2": (1, 2), "negative_axis": (-3,)}.get(kind, (1,))
        shape = CF_SHAPE if kind != "rank3" else (1, 4, 6)
        gamma_shape = {
            "baseline": (4, 1, 1),
            "gamma_1d_broadcasts_along_w": (4,),
            "gamma_varies_along_w": (4, 1, 4),
            "gamma_varies_along_h": (4, 3, 1),
            "gamma_4d": (1, 4, 1, 1),
            "negative_axis": (4, 1, 1),
            "axes_1_2": (4, 3, 1),
            "rank3": (4, 1),
            "eps_overridable": (4, 1, 1),
        }[kind]
        beta_shape = (
            (4, 1, 1)
            if len(gamma_shape) == 3
            else (1, 4, 1, 1)
            if kind == "gamma_4d"
            else gamma_shape
        )
        if kind == "gamma_1d_broadcasts_along_w":
            beta_shape = (4, 1, 1)
        gamma = np.linspace(0.5, 1.5, int(np.prod(gamma_shape)), dtype=np.float32).reshape(
            gamma_shape
        )
        beta = np.linspace(-1, 1, int(np.prod(beta_shape)), dtype=np.float32).reshape(beta_shape)
        eps = 1e-6
        overridable = ()
        if kind == "eps_overridable":
            g.init(eps, "eps")
            eps, overridable = "eps", ("eps",)
        m = g.reduce("ReduceMean", "x", axes)
        c = g.op("Sub", ["x", m])
        v = g.reduce("ReduceMean", g.op("Pow", [c, g.init(2.0)]), axes)
        normed = g.op("Div", [c, g.op("Sqrt", [g.op("Add", [v, g.ref(eps, "eps")])])])
        scaled = g.op("Mul", [g.init(gamma, "gamma_0"), normed])
        g.op("Add", [scaled, g.init(beta, "beta_0")], "y")
        return model(g, [("x", F, shape)], [("y", F, shape)], overridable=overridable)

    return build


def _cf_nearest(original: onnx.ModelProto) -> onnx.ModelProto:
    """Channels-first LN as Transpose -> LayerNormalization (gamma/beta: the first slice of the
    original's along W and H) -> Transpose."""
    inits = {t.name: numpy_helper.to_array(t) for t in original.graph.initializer}
    gamma = np.broadcast_to(inits["gamma_0"], (4, 3, 4))[:, 0, 0].copy()
    beta = np.broadcast_to(inits["beta_0"], (4, 3, 4))[:, 0, 0].copy()
    g = G()
    t = g.op("Transpose", ["x"], perm=[0, 2, 3, 1])
    normed = g.op("LayerNormalization", [t, g.init(gamma), g.init(beta)], axis=-1, epsilon=1e-6)
    g.op("Transpose", [normed], "y", perm=[0, 3, 1, 2])
    return model(g, [("x", F, CF_SHAPE)], [("y", F, CF_SHAPE)])


def _val_extra(kind: str):
    def build():
        g = G()
        if kind == "loop_trip_from_input":
            b = G("loop_")
            ln(b, "h", out="h_out")
            b.op("Identity", ["cond_in"], "cond_out")
            loop_body = body(
                b,
                [("i", I64, []), ("cond_in", BOOL, []), ("h", F, SHAPE)],
                [("cond_out", BOOL, []), ("h_out", F, SHAPE)],
            )
            g.nodes.append(helper.make_node("Loop", ["n", "", "x"], ["y"], body=loop_body))
            return model(g, [("x", F, SHAPE), ("n", I64, [])])
        if kind == "scan_body_unbiased":
            b = G("scan_")
            ln(b, "xs", var="sum", divisor=15.0, shape=(5, 16), out="s_out")
            scan_body = body(b, [("xs", F, (5, 16))], [("s_out", F, (5, 16))])
            g.nodes.append(
                helper.make_node("Scan", ["x"], ["y"], body=scan_body, num_scan_inputs=1)
            )
            return model(g)
        if kind == "fp16_overflow_in_branch":
            g = G(dtype=np.float16)
            t = G("then_", dtype=np.float16)
            ln(t, "x", out="t_out")
            e = G("else_", dtype=np.float16)
            e.op("Identity", ["x"], "e_out")
            g.nodes.append(
                _if_node(
                    "c",
                    body(t, [], [("t_out", F16, SHAPE)]),
                    body(e, [], [("e_out", F16, SHAPE)]),
                    ["y"],
                )
            )
            return model(g, [("x", F16, SHAPE), ("c", BOOL, [])], [("y", F16, SHAPE)])
        if kind == "masked_large_negative":
            masked = g.op("Where", ["mask", "x", g.init(-1e9)])
            ln(g, masked, out="y")
            return model(g, [("x", F, SHAPE), ("mask", BOOL, SHAPE)])
        raise ValueError(kind)

    return build


def _fn_names_like_main() -> onnx.ModelProto:
    """Main graph LN with initializers eps/gamma; a local function whose body names its own
    Constants eps/gamma (other values) and normalises with them."""
    g = G()
    g.init(1e-5, "eps")
    g.init(np.linspace(0.5, 1.5, 16), "gamma")
    ln(g, "x", eps="eps", gamma="gamma", beta=None, out="y")
    body_nodes = [
        helper.make_node("Constant", [], ["eps"], value_float=0.5),
        helper.make_node(
            "Constant", [], ["gamma"], value=numpy_helper.from_array(np.full(16, 3.0, np.float32))
        ),
    ]
    f = G("f_")
    ln(f, "x", eps="eps", gamma="gamma", beta=None, out="fy")
    fn = helper.make_function(
        "local",
        "FLN",
        ["x"],
        ["fy"],
        body_nodes
        + [helper.make_node("Constant", [], [t.name], value=t) for t in f.inits]
        + f.nodes,
        [helper.make_opsetid("", 17)],
    )
    g.nodes.append(helper.make_node("FLN", ["x"], ["z"], domain="local"))
    return model(g, outputs=[("y", F, SHAPE), ("z", F, SHAPE)], functions=[fn], opsets={"local": 1})


def _ir3() -> onnx.ModelProto:
    """IR 3 / opset 9: every initializer must also be a graph input, so every one is a default."""
    g = G(opset=9)
    g.init(1e-5, "eps")
    ln(g, "x", eps="eps", out="y")
    return model(g, overridable=[t.name for t in g.inits], ir=3)


def _instance_affine_exponent(exponent: float, silu: bool):
    """Instance norm with a per-channel affine (statistics over H, W of NCHW [2,8,4,4]) whose
    variance uses Pow(x - mean, exponent)."""

    def build():
        g = G()
        shape = (2, 8, 4, 4)
        gamma = np.linspace(0.5, 1.5, 8).reshape(8, 1, 1)
        beta = np.linspace(-1, 1, 8).reshape(8, 1, 1)
        out = ln(
            g, "x", axes=(-2, -1), exp=np.float32(exponent), gamma=gamma, beta=beta, shape=shape
        )
        if silu:
            out = g.op("Mul", [out, g.op("Sigmoid", [out])])
        g.op("Identity", [out], "y")
        return model(g, [("x", F, shape)], [("y", F, shape)])

    return build


def _instance_nearest(original: onnx.ModelProto) -> onnx.ModelProto:
    """The exact instance norm with the same affine (exponent 2)."""
    silu = any(n.op_type == "Sigmoid" for n in original.graph.node)
    return _instance_affine_exponent(2.0, silu)()


def _gn_exp(exponent: float) -> onnx.ModelProto:
    g = G()
    _gn(g, "x", (0, 4, -1), exp=np.float32(exponent), out="y")
    return model(g, [("x", F, GN_SHAPE)], [("y", F, GN_SHAPE)])


def _instance_affine(**kw):
    """Instance norm with a per-channel affine on NCHW [2,8,4,4], statistics changed by `kw`."""

    def build():
        g = G()
        shape = (2, 8, 4, 4)
        gamma = np.linspace(0.5, 1.5, 8).reshape(8, 1, 1)
        beta = np.linspace(-1, 1, 8).reshape(8, 1, 1)
        args = {"axes": (-2, -1), "gamma": gamma, "beta": beta, "shape": shape, **kw}
        ln(g, "x", out="y", **args)
        return model(g, [("x", F, shape)], [("y", F, shape)])

    return build


def _gn_hazard(kwargs: dict) -> onnx.ModelProto:
    g = G()
    _gn(g, "x", (0, 4, -1), out="y", **kwargs)
    return model(g, [("x", F, GN_SHAPE)], [("y", F, GN_SHAPE)])


def _every_axis(x_shape, gamma_shape) -> onnx.ModelProto:
    g = G()
    gamma = (
        None
        if gamma_shape is None
        else np.linspace(0.5, 1.5, int(np.prod(gamma_shape))).reshape(gamma_shape)
    )
    beta = (
        None
        if gamma_shape is None
        else np.linspace(-1, 1, int(np.prod(gamma_shape))).reshape(gamma_shape)
    )
    ln(g, "x", axes=(0, 1, 2), gamma=gamma, beta=beta, shape=(2, 5, 16), out="y")
    return model(g, [("x", F, x_shape)], [("y", F, x_shape)])


def _batch3() -> None:
    both = ({"c": np.array(True)}, {"c": np.array(False)})
    case(
        "opset13_with_plain_local_function",
        "8",
        "LN at opset 13 next to a call of a local function (Relu) that imports opset 13",
        _opset13_plain_function,
        EITHER,
    )
    for norm in ("ln", "rms"):
        for claim in (False, True):
            case(
                f"{norm}_branch_dependent_width{'_claimed' if claim else ''}",
                "3",
                f"{norm} with divisor 16 of an If output that is [2,5,16] or [2,5,8] by branch"
                + (" (value_info claims [2,5,16])" if claim else ""),
                _branch_dependent_width(norm, claim),
                EITHER,
                fixed=both,
            )
    case(
        "sparse_initializer_gamma",
        "8",
        "LN whose gamma is a sparse initializer",
        _sparse_gamma,
        EITHER,
    )
    case(
        "existing_com_microsoft_node",
        "8",
        "LN followed by an existing com.microsoft Gelu",
        _with_ms_node,
        FUSE(),
    )
    case(
        "odd_ln_domain_spelled_ai_onnx",
        "exact-odd",
        "opset import domain 'ai.onnx'",
        _ai_onnx_domain,
        EITHER,
    )
    case(
        "odd_ln_symbolic_batch_positive_axes",
        "exact-odd",
        "LN over axes (1, 2) of [batch, 5, 16]",
        _symbolic_batch_positive_axes,
        FUSE(),
    )
    case(
        "ln_rank1_axis0",
        "hazard",
        "LN over axis 0 of a rank-1 [16] tensor (the only axis is the first)",
        _rank1_ln,
        EITHER,
    )
    case(
        "ln_of_initializer",
        "exact-odd",
        "LN of a constant initializer",
        _norm_of_initializer(False),
        EITHER,
    )
    case(
        "ln_of_overridable_initializer",
        "1",
        "LN of an initializer that is also a graph input (fed another tensor)",
        _norm_of_initializer(True),
        EITHER,
        overrides={"w": np.linspace(-3, 3, 160, dtype=np.float32).reshape(SHAPE)},
    )
    case(
        "ln_eps_float16_overflow_inf",
        "5",
        "LN with eps = Cast(Cast(1e5 -> float16) -> float) = inf",
        _eps_chain(
            "ln", lambda g: g.op("Cast", [g.op("Cast", [g.init(1e5)], to=F16)], to=F), opset=17
        ),
        EITHER,
    )
    case(
        "ln_exponent_nan",
        "5",
        "LN with exponent NaN",
        _exp_case("ln", np.nan, np.float32),
        KEEP(),
        evidence=nearest("ln", eps=1e-3),
    )
    case(
        "val_loop_body_norm_of_growing_shape",
        "9",
        "a Loop body normalises a tensor whose first dim grows each trip (1, 2, 3 rows)",
        _loop_growing_shape,
        EITHER,
    )
    for kind in ("clip_empty_min", "output_used_twice_by_one_node", "output_read_in_branch"):
        case(
            f"out_{kind}",
            "8",
            f"LN with {kind.replace('_', ' ')}",
            _optional_inputs_and_reuse(kind),
            FUSE(),
            fixed=both if kind == "output_read_in_branch" else ({},),
        )
    case(
        "fn_norm_called_in_loop_body",
        "6",
        "local function LN called inside a Loop body",
        _fn_in_loop,
        EITHER,
    )
    per_token = np.linspace(-2, 2, 80, dtype=np.float32).reshape(5, 16)
    vector = np.linspace(0.5, 1.5, 16, dtype=np.float32)
    for which in ("gamma", "beta"):
        case(
            f"ln_{which}_dynamic_input_rank2_symbolic",
            "7",
            f"LN whose {which} is a graph input [p, q], fed [5,16] (per token) or [1,16]",
            _dynamic_affine(which, ("p", "q")),
            EITHER,
            fixed=({"p": per_token}, {"p": vector.reshape(1, 16)}),
        )
        case(
            f"ln_{which}_dynamic_input_rank1",
            "7",
            f"LN whose {which} is a graph input [n], fed [16] or [1]",
            _dynamic_affine(which, ("n",)),
            EITHER,
            fixed=({"p": vector}, {"p": np.array([0.75], np.float32)}),
        )
    gamma = np.linspace(0.5, 1.5, 16, dtype=np.float32)
    for kind in ("mean_other_axis", "beta_per_token"):
        case(
            f"keras_{kind}",
            "4",
            f"tf2onnx layer norm with {kind.replace('_', ' ')}",
            _keras_variant(kind),
            KEEP(),
            evidence=nearest(
                "ln", eps=1e-3, gamma=gamma, beta=np.linspace(-1, 1, 16, dtype=np.float32)
            ),
        )
    gn_cases = {
        "baseline": (FUSE("group-norm"), {}, ({},)),
        "groups_overridable": (EITHER, {"groups": np.array([0, 2, -1], np.int64)}, ({},)),
        "eps_overridable": (KEEP(), {"eps": np.float32(0.5)}, ({},)),
        "groups_from_input": (
            EITHER,
            {},
            (
                {"gshape": np.array([0, 4, -1], np.int64)},
                {"gshape": np.array([0, 2, -1], np.int64)},
            ),
        ),
        "unbiased": (KEEP(), {}, ({},)),
        "symbolic_spatial": (EITHER, {}, ({},)),
        "contiguous_w_groups": (EITHER, {}, ({},)),
        "back_to_other_shape": (EITHER, {}, ({},)),
        "branch_shadows_groups": (EITHER, {}, both),
    }
    for kind, (expect, overrides, fixed) in gn_cases.items():
        case(
            f"gn_{kind}",
            "hazard"
            if kind == "unbiased"
            else "exact-odd"
            if kind == "baseline"
            else "2"
            if kind == "branch_shadows_groups"
            else "1"
            if "overridable" in kind
            else "3",
            f"hand-written group norm: {kind.replace('_', ' ')}",
            _gn_case(kind),
            expect,
            overrides=overrides,
            fixed=fixed,
            evidence=(lambda _m: _gn_case("baseline")()) if kind == "unbiased" else None,
        )
    channel_first = {
        "baseline": FUSE(),
        "gamma_1d_broadcasts_along_w": KEEP(),
        "gamma_varies_along_w": KEEP("gamma-shape"),
        "gamma_varies_along_h": KEEP("gamma-shape"),
        "gamma_4d": EITHER,
        "negative_axis": FUSE(),
        "axes_1_2": EITHER,
        "rank3": KEEP("non-trailing-axes"),
        "eps_overridable": KEEP(),
    }
    for kind, expect in channel_first.items():
        lookalike = expect.outcome == "keep" and kind not in ("rank3", "eps_overridable")
        case(
            f"cf_{kind}",
            "hazard" if lookalike else "exact-odd" if expect.outcome == "fuse" else "7",
            f"channels-first layer norm over axis 1 of NCHW: {kind.replace('_', ' ')}",
            _channel_first(kind),
            expect,
            overrides={"eps": np.float32(0.5)} if kind == "eps_overridable" else {},
            evidence=_cf_nearest if lookalike else None,
        )
    mask = np.arange(160).reshape(SHAPE) % 3 != 0
    val_extra = {
        "loop_trip_from_input": (
            FUSE(),
            ({"n": np.array(2, np.int64)}, {"n": np.array(0, np.int64)}),
        ),
        "scan_body_unbiased": (KEEP("unbiased-variance"), ({},)),
        "fp16_overflow_in_branch": (FUSE(), both),
        "masked_large_negative": (FUSE(), ({"mask": mask},)),
    }
    for kind, (expect, fixed) in val_extra.items():
        case(
            f"val_{kind}",
            "9",
            f"validation: {kind.replace('_', ' ')}",
            _val_extra(kind),
            expect,
            fixed=fixed,
        )
    case(
        "fn_body_names_like_main_graph",
        "6",
        "main LN reads initializers eps/gamma; a local function's Constants use the same names",
        _fn_names_like_main,
        FUSE("layer-norm", 1),
    )
    fp8 = {
        "e4m3fn_subnormal_3e-3": (3e-3, TensorProto.FLOAT8E4M3FN, 1),
        "e5m2_no_saturate_inf": (1e5, TensorProto.FLOAT8E5M2, 0),
        "e5m2_saturate_57344": (1e5, TensorProto.FLOAT8E5M2, 1),
        "e4m3fnuz_subnormal_3e-3": (3e-3, TensorProto.FLOAT8E4M3FNUZ, 1),
        "e5m2fnuz_rounding_0_3": (0.3, TensorProto.FLOAT8E5M2FNUZ, 1),
    }
    for label, (value, to, saturate) in fp8.items():
        case(
            f"ln_eps_fp8_{label}",
            "5",
            f"LN with eps = Cast(Cast({value} -> {label.split('_')[0]}, saturate={saturate}))",
            _eps_chain("ln", _fp8_eps(value, to, saturate)),
            EITHER,
        )
    case(
        "ln_ir3_opset9_initializers_are_inputs",
        "1",
        "IR 3 / opset 9 LN: every initializer is a graph input (ORT refuses feeds for them)",
        _ir3,
        EITHER,
    )
    for exponent in (0.5, 1.0, 3.0, 4.0):
        for silu in (False, True):
            case(
                f"gn_instance_affine_exponent_{exponent:g}{'_silu' if silu else ''}".replace(
                    ".", "_"
                ),
                "5",
                f"instance norm with per-channel affine whose variance uses Pow(d, {exponent:g})"
                + (", then SiLU" if silu else ""),
                _instance_affine_exponent(exponent, silu),
                KEEP(),
                evidence=_instance_nearest,
            )
    instance_hazards = {
        "eps_outside_sqrt": {"eps_outside": True},
        "negative_eps": {"eps": -1e-5},
        "zero_eps": {"eps": 0.0},
        "unbiased": {"var": "sum", "divisor": 15.0},
        "sum_not_mean": {"var": "sum", "divisor": 1.0},
        "var_last_axis_only": {"var_axes": (-1,)},
        "mean_h_only_var_hw": {"axes": (-2,), "var_axes": (-2, -1)},
        "eps_per_channel": {"eps": np.linspace(1e-5, 2.0, 8, dtype=np.float32).reshape(8, 1, 1)},
        "half_not_minus_half": {"divide": "pow_half", "half": 0.5},
        "one_over_is_two": {"divide": "one_over", "one": 2.0},
    }
    for label, kwargs in instance_hazards.items():
        case(
            f"gn_instance_affine_{label}",
            "hazard",
            f"instance-norm look-alike with per-channel affine: {label.replace('_', ' ')}",
            _instance_affine(**kwargs),
            KEEP(),
            evidence=_instance_nearest,
        )
    for label, kwargs in instance_hazards.items():
        if label in ("mean_h_only_var_hw", "var_last_axis_only", "eps_per_channel", "unbiased"):
            continue  # axes and shapes of NCHW; the grouped tensor is [1, 4, 50]
        case(
            f"gn_hand_written_{label}",
            "hazard",
            f"hand-written group-norm look-alike: {label.replace('_', ' ')}",
            functools.partial(_gn_hazard, kwargs),
            KEEP(),
            evidence=lambda _m: _gn_case("baseline")(),
        )
    for label, (x_shape, gamma_shape) in {
        "static_gamma_16": ((2, 5, 16), (16,)),
        "static_gamma_5_16": ((2, 5, 16), (5, 16)),
        "symbolic_batch_gamma_16": (("batch", 5, 16), (16,)),
        "symbolic_batch_no_affine": (("batch", 5, 16), None),
    }.items():
        case(
            f"ln_every_axis_{label}",
            "7",
            f"statistics over every axis of {x_shape} with gamma {gamma_shape}",
            functools.partial(_every_axis, x_shape, gamma_shape),
            EITHER,
        )
    case(
        "gn_instance_affine_exponent_2",
        "exact-odd",
        "instance norm with per-channel affine (the exact control of the exponent cases)",
        _instance_affine_exponent(2.0, False),
        FUSE("group-norm"),
    )
    case(
        "gn_hand_written_exponent_3",
        "5",
        "hand-written group norm whose variance uses Pow(d, 3)",
        lambda: _gn_exp(3.0),
        KEEP(),
        evidence=lambda _m: _gn_case("baseline")(),
    )
    for where in ("main", "if", "loop", "function"):
        case(
            f"opset13_roi_align_in_{where}",
            "8",
            f"LN at opset 13 with a RoiAlign (meaning changed at 16) in the {where} graph",
            _roi_align_opset13(where),
            EITHER,
            fixed=both if where == "if" else ({},),
        )
    overrides = {
        "eps": np.float32(0.5),
        "exp": np.float32(4.0),
        "axes": np.array([-2], np.int64),
        "gamma": np.linspace(3.0, -3.0, 16, dtype=np.float32),
    }
    for body_kind in ("if", "loop", "scan"):
        for constant, override in overrides.items():
            if body_kind == "scan" and constant == "axes":
                continue
            case(
                f"scope_{body_kind}_body_reads_overridable_{constant}",
                "1",
                f"LN in a {body_kind} body whose {constant} is an outer overridable initializer",
                _overridable_in_body(body_kind, constant),
                EITHER if constant == "gamma" else KEEP(),
                fixed=both if body_kind == "if" else ({},),
                overrides={"outer_c": override},
            )
    case(
        "fn_eps_input_fed_overridable_initializer",
        "1",
        "local function with epsilon as input, called with an overridable initializer (fed 0.5)",
        _fn_overridable_eps,
        EITHER,
        overrides={"e1": np.float32(0.5)},
    )
    for where in (
        "graph_input",
        "node_output",
        "initializer",
        "body_node_output",
        "skip_graph_input",
    ):
        case(
            f"name_collision_{where}",
            "8",
            f"a {where.replace('_', ' ')} already named like the fused node's new inputs",
            _collision(where),
            FUSE(),
            fixed=both if where == "body_node_output" else ({},),
        )
    case(
        "name_collision_rms_graph_input",
        "8",
        "a graph input already named y/SimplifiedLayerNormalization/input1",
        _collision("graph_input", "rms"),
        FUSE("rms-norm"),
    )
    for which in ("eps_initializer", "eps_identity", "exponent_constant_node", "gamma_initializer"):
        case(
            f"out_constant_is_graph_output_{which}",
            "8",
            f"the norm's {which.replace('_', ' ')} is also a graph output",
            _constant_as_output(which),
            EITHER,
        )
    for mode in ("empty",):
        case(
            f"out_node_names_{mode}",
            "8",
            f"LN then RMS norm whose nodes' names are all {mode}",
            _node_names(mode),
            FUSE("layer-norm", 1, rms_norm=1),
        )
    case(
        "hz_ln_opset18_noop_with_empty_axes",
        "hazard",
        "ReduceMean without axes and noop_with_empty_axes=1: the mean is x itself",
        _noop_empty_axes(1),
        KEEP(),
        evidence=nearest("ln", gamma=None, beta=None),
    )
    case(
        "hz_ln_opset18_no_axes_reduces_all",
        "hazard",
        "ReduceMean without axes at opset 18: reduces every axis, batch included",
        _noop_empty_axes(0),
        EITHER,
        evidence=nearest("ln", gamma=None, beta=None),
    )
    case(
        "odd_ln_keepdims_attribute_absent",
        "exact-odd",
        "layer norm whose ReduceMeans omit keepdims (default 1)",
        _no_keepdims_attribute,
        FUSE(),
    )
    case(
        "odd_ln_exponent_constant_value_int",
        "exact-odd",
        "layer norm with Pow(d, Constant(value_int=2))",
        _value_int_exponent,
        EITHER,
    )
    case(
        "ln_exponent_float16_2_in_float32_model",
        "exact-odd",
        "float32 layer norm with a float16 exponent 2.0",
        _exp_case("ln", 2.0, np.float16),
        EITHER,
    )
    case(
        "ln_exponent_float16_near_2_in_float32_model",
        "5",
        "float32 layer norm with a float16 exponent 2.002 (not 2)",
        _exp_case("ln", 2.002, np.float16),
        KEEP(),
        evidence=nearest("ln", eps=1e-3),
    )
    case(
        "scope_outer_overridable_eps_read_in_branch",
        "1",
        "a then-branch LN reads the outer epsilon, an overridable initializer (fed 0.5)",
        _outer_overridable_eps_in_body(False),
        KEEP(),
        fixed=both,
        overrides={"eps": np.float32(0.5)},
    )
    case(
        "scope_branch_shadows_overridable_eps",
        "1",
        "the outer epsilon is overridable; the then-branch shadows it with a true constant",
        _outer_overridable_eps_in_body(True),
        EITHER,
        fixed=both,
        overrides={"eps": np.float32(0.25)},
    )
    case(
        "odd_ln_divisor_from_shape",
        "exact-odd",
        "variance = ReduceSum / Cast(Shape(x)[-1]): the divisor is d, computed at run time",
        _shape_divisor(False),
        EITHER,
    )
    case(
        "ln_divisor_from_shape_of_claimed_tensor",
        "3",
        "variance = ReduceSum / Cast(Shape(r)[-1]) of a Reshape claimed [2,5,16], really [2,10,8]",
        _shape_divisor(True),
        EITHER,
        fixed=({"s": np.array([2, 10, 8], np.int64)},),
    )


for _register in (
    _class1,
    _class2,
    _class3,
    _class4,
    _class5,
    _class6,
    _class7,
    _class8,
    _class9,
    _hazards,
    _exact_odd,
    _batch3,
):
    _register()


def _register_second_corpus() -> None:
    """The second adversary's cases (tests/corpora/adversarial_2.py) join this corpus."""
    from corpora import adversarial_2

    adversarial_2.register(case, KEEP, EITHER, FUSE, nearest)


_register_second_corpus()


def _register_third_corpus() -> None:
    """The third adversary's cases (tests/corpora/adversarial_3.py) join this corpus."""
    from corpora import adversarial_3

    adversarial_3.register(case, KEEP, EITHER, FUSE, nearest)


_register_third_corpus()


def describe() -> str:
    """One line per case: name, class, expected outcome, statement."""
    lines = []
    for c in CASES:
        e = c.expect
        if e.outcome == "fuse":
            outcome = "fuse " + ",".join(f"{k}>={v}" for k, v in e.sites.items())
        elif e.outcome == "keep":
            outcome = "keep" + (f" ({'|'.join(sorted(e.reasons))})" if e.reasons else "")
        else:
            outcome = "either"
        lines.append(f"{c.name:58s} {c.cls:9s} {outcome:30s} {c.statement}")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="The adversarial corpus of normfuse (issue 12).")
    parser.add_argument("--list", action="store_true", help="print every case")
    args = parser.parse_args(argv)
    if args.list:
        print(describe())
    print(f"{len(CASES)} cases")


if __name__ == "__main__":
    main()
