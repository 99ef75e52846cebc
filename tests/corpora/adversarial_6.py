"""Adversarial corpus, sixth helper (issue 26): the norms of 2024-26 models and the group-norm
forms, hand-built with onnx.helper.

Features: 1 gated RMS norm with groups (Mamba2 / NemotronH), 2 adaLN (DiT / SD3 / Flux),
3 QK-norms (Cohere, OLMo 2, Flux), 4 sandwich norms (Gemma 3), 5 DyT and other never-norms near
a norm, 6 group norm (GroupNormalization-18/-21 nodes, the exporters' InstanceNormalization
form and its look-alikes). Each case runs in `tests/test_adversarial_6.py` (the checks of the
fourth corpus's test, on the case's extra feeds too: rows of 1e3 + N(0, 0.01) and constant
groups). Expected outcomes use the corpus's `Expect`; `FUSE_OR(kind, *reasons)` means fusing
`kind` is right, and so is leaving it with one of `reasons` (a rewrite that is exact either way,
e.g. an RMS norm whose per-head weight stays a Mul). Cases normfuse gets wrong carry a finding
id (`ADV6-NN`, described in `docs/limitations.md`) in `FINDINGS`; the test marks them
xfail(strict=True) in exactly the configurations they fail.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper

from corpora.adversarial import FUSE, KEEP, Expect
from corpora.adversarial_build import F16, NP, F, G, body, ln, model, normalise

# "validate": --validate (normfuse.ValidationOptions with the case's symbolic dims at 2, added
# by the test); "skip": the default passes plus skip-norm (Gemma 3's residual sums).
CONFIGS = {
    "default": {},
    "onnx": {"target": "onnx"},
    "validate": {"validation": "auto"},
    "skip": {"skip": True},
}
NP_OF = {F: np.float32, F16: np.float16}

# case name -> (finding id, the configurations it fails in).
BOTH = ("default", "onnx", "validate")
WITH_SKIP = (*BOTH, "skip")
FINDINGS: dict[str, tuple[str, tuple[str, ...]]] = {
    # ADV6-01 (a symbolic batch and a Reshape target Concat(Shape(h)[0:2], [G, -1]) left the
    # -1 unsized: unknown-shape) is fixed: a target copying its input's dims is inferred as
    # [0, 0, G, -1] (shapes._copying_target).
    # ADV6-02 (a GroupNormalization-21 node with scale and bias graph inputs had no near-miss)
    # is fixed: such a node is `gamma-shape` ("not a true constant").
    # ADV6-03 (a grouping Reshape target Concat(Slice(Shape(x), 0, 1), [G, -1]) was
    # `not-channel-groups`) is fixed: a Slice of a shape with step 1 is read as its entries.
    # ADV6-04 (a GroupNormalization-21 node downstream of another was `unsupported-dtype`) was
    # fixed on main (types derived through GroupNormalization); its cases guard the fix.
    # ADV6-05 (--validate rolled back a GroupNormalization-21 in a function: "input or output
    # type unknown") is fixed: a function body types GroupNormalization's output as a graph does.
    # ADV6-06 (group statistics over the last two axes of [N, G, C/G, H*W] were
    # `not-channel-groups`) is fixed: fused as LayerNormalization over the axes after G.
    # ADV6-07 (a gated group RMS norm computed in float16 throughout: NaN, then 1.5-1.8x further
    # from float64 than the original) was fixed on main: the fused node's Casts are lifted over
    # the moves around it (float16_moves.py); --validate keeps it since the lifted site is fed
    # where its moves start (the move's input is kept with the site).
    # ADV6-08 (a hand-written group norm in float16 throughout, 1.3x further from float64) was
    # fixed on main the same way for 32-element groups; 512-element groups stay further.
    "a6_gn_decomposed_float16_pure_wide": ("ADV6-08", BOTH),
    # Adversary 7 (feature 7: float16 norms next to value moves; `docs/limitations.md`).
    # ADV7-01 (Reshape -> layer norm over the last axis -> Reshape back was refused
    # `group-norm`) is fixed: a Reshape that keeps the last axis normalised alone is no grouping.
    # missed: a float16 norm reading the first one's fused output through a Reshape is
    # `unknown-dtype` (the new tensor between the fused node and its Cast has no type).
    "a7_back_to_back": ("ADV7-02", BOTH),
    # ADV7-03 (--validate rolled back a site whose input Cast was lifted: "IndexError") was
    # fixed on main: the first move's input is kept with the site, not read off the moved node.
    # ADV7-04 (--validate could not isolate a site whose output moves or Reshape back read
    # another tensor's shape: Expand / Tile by Shape(z), Gather by indices from Shape(x), a
    # Reshape back to Shape(x)) is fixed: tensors read only through Shape are fed as zeros.
    # ADV7-05 (LN over Transpose(SpaceToDepth(x)) was `unknown-rank`) is fixed: SpaceToDepth
    # and DepthToSpace are on the shape allow-list (swept against ONNX Runtime).
    # ADV7-06 (the result also read by Shape kept its Cast at the node: 1.35x further from
    # float64) was fixed on main: Shape and Size read no value, so the moves are lifted anyway.
}


def FUSE_OR(kind: str, *reasons: str, count: int = 1) -> Expect:
    """Fusing `count` sites of `kind` is right; so is fusing nothing with one of `reasons`."""
    return Expect("or", {kind: count}, frozenset(reasons))


@dataclass(frozen=True)
class Case6:
    """One case. `feature`: "1".."6" (module docstring); `groups`: the group count for the
    constant-groups feed (x's elements split into that many groups per sample, each constant);
    `offset`: also feed rows of 1e3 + N(0, 0.01); `overrides`: values fed for initializers that
    are graph inputs (on the random and constant profiles too); `reference`: a float64
    evaluation of what the model means (where converting the model to float64 does not give
    one: GroupNormalization-21's body casts to its float32 stash type)."""

    name: str
    feature: str
    statement: str
    build: Callable[[], onnx.ModelProto]
    expect: Expect
    configs: tuple[str, ...] = ("default", "onnx", "validate")
    groups: int = 0
    offset: bool = True
    reference: Callable[[onnx.ModelProto, dict], list[np.ndarray]] | None = None
    overrides: dict = field(default_factory=dict)


CASES: list[Case6] = []


def case(name: str, feature: str, statement: str, build, expect: Expect, **kw) -> None:
    assert all(c.name != name for c in CASES), name
    CASES.append(Case6(name, feature, statement, build, expect, **kw))


def extra_feeds(m: onnx.ModelProto, c: Case6, seed: int) -> list[tuple[str, dict]]:
    """The case's own adversarial feeds: every float input at 1e3 + N(0, 0.01); x (the first
    input) in constant groups (the other inputs random); and where inputs have symbolic dims,
    random inputs with every symbolic dim at 1 and at 3 (the corpus's profiles use 2)."""
    rng = np.random.default_rng(seed)
    inits = {t.name for t in m.graph.initializer}
    free = [i for i in m.graph.input if i.name not in inits]
    shapes = {i.name: _shape_at(i, 2) for i in free}
    types = {i.name: NP_OF.get(i.type.tensor_type.elem_type) for i in free}
    other = {n: np.ones(shapes[n], NP[e]) for n, e in _elems(free).items() if types[n] is None}
    shapes = {n: v for n, v in shapes.items() if types[n] is not None}
    sets = []
    if c.offset:
        sets.append(
            (
                "offset1e3",
                {n: (1e3 + rng.normal(0, 0.01, shapes[n])).astype(types[n]) for n in shapes}
                | other,
            )
        )
    if c.groups:
        feeds = {n: rng.normal(0.5, 1.0, shapes[n]).astype(types[n]) for n in shapes} | other
        x = free[0].name
        dims = shapes[x]
        levels = rng.normal(3.0, 50.0, (dims[0], c.groups, 1))
        grouped = np.broadcast_to(levels, (dims[0], c.groups, int(np.prod(dims[1:])) // c.groups))
        feeds[x] = grouped.reshape(dims).astype(types[x])
        sets.append(("constant-groups", feeds))
    if symbolic_inputs(m):
        for size in (1, 3):
            feeds = {
                i.name: rng.normal(1.0, 2.0, _shape_at(i, size)).astype(types[i.name])
                for i in free
                if i.name in shapes
            }
            sets.append((f"symbolic-dims-{size}", feeds | other))
    return sets


def _shape_at(info: onnx.ValueInfoProto, size: int) -> list[int]:
    """The input's shape with every symbolic dim at `size`."""
    dims = info.type.tensor_type.shape.dim
    return [d.dim_value if d.HasField("dim_value") else size for d in dims]


def symbolic_inputs(m: onnx.ModelProto) -> bool:
    """Whether a graph input (not an initializer) has a symbolic dim."""
    inits = {t.name for t in m.graph.initializer}
    return any(
        d.HasField("dim_param")
        for i in m.graph.input
        if i.name not in inits
        for d in i.type.tensor_type.shape.dim
    )


def gn21_reference(m: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    """GroupNormalization-21 by its definition in float64 NumPy, two-pass statistics: x [N, C, *S]
    in G groups, (x - mean) / sqrt(var + eps), then scale[c] * y + bias[c]."""
    from onnx import numpy_helper

    node = next(n for n in m.graph.node if n.op_type == "GroupNormalization")
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    values = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer} | feeds
    for n in m.graph.node:
        if n.op_type == "Constant":
            value = helper.get_attribute_value(n.attribute[0])
            is_tensor = isinstance(value, onnx.TensorProto)
            values[n.output[0]] = numpy_helper.to_array(value) if is_tensor else np.asarray(value)
    x, scale, bias = (np.asarray(values[i], np.float64) for i in node.input)
    groups, eps = attrs["num_groups"], attrs.get("epsilon", 1e-5)
    grouped = x.reshape(x.shape[0], groups, -1)
    centred = grouped - grouped.mean(-1, keepdims=True)
    y = (centred / np.sqrt((centred**2).mean(-1, keepdims=True) + eps)).reshape(x.shape)
    per_channel = (1, -1, *[1] * (x.ndim - 2))
    return [y * scale.reshape(per_channel) + bias.reshape(per_channel)]


def _elems(infos) -> dict[str, int]:
    return {i.name: i.type.tensor_type.elem_type for i in infos}


# ---------------------------------------------------------------- small pieces


def _i64(g: G, values) -> str:
    return g.init(np.asarray(values, np.int64), g.fresh("shape"), np.int64)


def _silu(g: G, z: str) -> str:
    return g.op("Mul", [z, g.op("Sigmoid", [z])])


def _rms_stats(
    g: G,
    x: str,
    *,
    eps=1e-6,
    spelling="div",
    center=False,
    divisor=None,
    eps_outside=False,
    axes=(-1,),
    stat="pow",
) -> str:
    """x / sqrt(mean(x^2) + eps) over `axes` (no scale); `center` subtracts the mean first;
    `stat`: pow (Pow, ReduceMean or ReduceSum / divisor) | sumsquare (ReduceSumSquare /
    divisor) | l2 (ReduceL2 squared / divisor)."""
    num = g.op("Sub", [x, g.reduce("ReduceMean", x, axes)]) if center else x
    if stat != "pow":
        d = g.init(float(divisor), g.fresh("d"))
        if stat == "sumsquare":
            total = g.op("ReduceSumSquare", [num, _i64(g, axes)], keepdims=1)
        else:
            l2 = g.op("ReduceL2", [num, _i64(g, axes)], keepdims=1)
            total = g.op("Pow", [l2, g.init(2.0, g.fresh("two"))])
        ms = g.op("Div", [total, d])
        shifted = g.op("Add", [ms, g.init(eps, g.fresh("eps"))])
        return normalise(g, num, shifted, "reciprocal" if spelling == "rsqrt" else spelling)
    square = g.op("Pow", [num, g.init(2.0, g.fresh("two"))])
    if divisor is None:
        ms = g.reduce("ReduceMean", square, axes)
    else:
        ms = g.op(
            "Div", [g.reduce("ReduceSum", square, axes), g.init(float(divisor), g.fresh("d"))]
        )
    e = g.init(eps, g.fresh("eps"))
    if eps_outside:
        return g.op("Div", [num, g.op("Add", [g.op("Sqrt", [ms]), e])])
    if spelling == "rsqrt":
        return g.op("Mul", [num, g.op("Reciprocal", [g.op("Sqrt", [g.op("Add", [ms, e])])])])
    return normalise(g, num, g.op("Add", [ms, e]), spelling)


# ================================================================ feature 1: gated group RMS


def _gated(
    groups=4,
    d=32,
    *,
    opset=18,
    gate="before",
    spelling="rsqrt",
    batch=(2, 3),
    symbolic=False,
    target="const",
    back="const",
    transpose=False,
    center=False,
    divisor=None,
    eps_outside=False,
    weight="channel",
    f16=False,
    out_shape=None,
    stat="pow",
):
    """Mamba2's MambaRMSNormGated: y = w * RMS_group(x * silu(z)) with Reshape -> RMS over the
    group -> Reshape back (`gate`: before | after | none; `target`: const | concat; `back`:
    const | shape | other (another shape); `weight`: channel | group | none)."""

    def build():
        g = G(opset=opset, seed=groups * 7 + d, dtype=np.float16 if f16 == "pure" else np.float32)
        elem = F16 if f16 else F
        x, z = "x", "z"
        if f16 is True:
            x, z = g.op("Cast", ["x"], to=F), g.op("Cast", ["z"], to=F)
        h = g.op("Mul", [x, _silu(g, z)]) if gate == "before" else x
        size = d // groups
        if target in ("concat", "concat_size"):
            lead = g.op("Slice", [g.op("Shape", [h]), _i64(g, [0]), _i64(g, [2])])
            tail = [groups, -1] if target == "concat" else [-1, size]
            shape = g.op("Concat", [lead, _i64(g, tail)], axis=0)
        elif transpose:
            shape = _i64(g, [0, 0, size, groups])
        else:
            shape = _i64(g, [0, 0, groups, size])
        r = g.op("Reshape", [h, shape])
        if transpose:
            r = g.op("Transpose", [r], perm=[0, 1, 3, 2])
        n = _rms_stats(
            g,
            r,
            spelling=spelling,
            center=center,
            divisor=divisor,
            eps_outside=eps_outside,
            stat=stat,
        )
        if transpose:
            n = g.op("Transpose", [n], perm=[0, 1, 3, 2])
        if weight == "group":
            n = g.op("Mul", [n, g.init(g.random((groups, 1)), g.fresh("wg"))])
        elif weight == "grouped_full":
            n = g.op("Mul", [n, g.init(g.random((groups, size)), g.fresh("wg"))])
        elif weight == "grouped_shared":
            n = g.op("Mul", [n, g.init(g.random((size,)), g.fresh("wg"))])
        if back == "shape":
            y = g.op("Reshape", [n, g.op("Shape", [h])])
        elif back == "other":
            y = g.op("Reshape", [n, _i64(g, [0, -1, size])])
        else:
            y = g.op("Reshape", [n, _i64(g, [0, 0, d])])
        if f16 is True:
            y = g.op("Cast", [y], to=F16)
        if weight == "channel":
            y = g.op("Mul", [g.init(g.random((d,)), g.fresh("w"), NP_OF[elem]), y])
        if gate == "after":
            y = g.op("Mul", [y, _silu(g, "z")])
        g.op("Identity", [y], "y")
        dims = ("b", "l", d) if symbolic else (*batch, d)
        return model(g, [("x", elem, dims), ("z", elem, dims)], [("y", elem, out_shape or dims)])

    return build


def _feature1() -> None:
    for groups in (1, 2, 4, 8, 32):
        case(
            f"a6_gated_groups{groups}",
            "1",
            f"Mamba2 gated RMS norm, {groups} groups of 32 channels, gate before the norm",
            _gated(groups),
            FUSE("rms-norm"),
        )
    for spelling in ("div", "one_over", "pow_half"):
        case(
            f"a6_gated_spelling_{spelling}",
            "1",
            f"gated group RMS norm, 1/sqrt spelled {spelling}",
            _gated(4, spelling=spelling),
            FUSE("rms-norm"),
        )
    case(
        "a6_gated_opset17",
        "1",
        "gated group RMS at opset 17",
        _gated(4, opset=17),
        FUSE("rms-norm"),
    )
    case(
        "a6_gated_d64_g8",
        "1",
        "NemotronH-like: 64 channels in 8 groups",
        _gated(8, 64),
        FUSE("rms-norm"),
    )
    case(
        "a6_gated_symbolic_batch",
        "1",
        "gated group RMS, batch and length symbolic, Reshape [0, 0, G, D/G]",
        _gated(4, symbolic=True),
        FUSE("rms-norm"),
    )
    case(
        "a6_gated_symbolic_concat_target",
        "1",
        "gated group RMS, symbolic batch, target Concat(Shape(h)[0:2], [G, -1]), back by Shape(h)",
        _gated(4, symbolic=True, target="concat", back="shape"),
        FUSE("rms-norm"),
    )
    case(
        "a6_gated_symbolic_concat_target_const_back",
        "1",
        "gated group RMS, symbolic batch, target Concat(Shape(h)[0:2], [G, -1]), back [0, 0, D]",
        _gated(4, symbolic=True, target="concat"),
        FUSE("rms-norm"),
    )
    case(
        "a6_gated_symbolic_view_minus1_group_size",
        "1",
        "Mamba2's own view(*shape[:-1], -1, group_size): target Concat(Shape(h)[0:2], [-1, D/G])",
        _gated(4, symbolic=True, target="concat_size", back="shape"),
        FUSE("rms-norm"),
    )
    case(
        "a6_gated_static_concat_target",
        "1",
        "gated group RMS, static batch, target Concat(Shape(h)[0:2], [G, -1]), back by Shape(h)",
        _gated(4, target="concat", back="shape"),
        FUSE("rms-norm"),
    )
    case(
        "a6_gated_back_by_shape",
        "1",
        "gated group RMS, Reshape back to Shape(h)",
        _gated(4, back="shape"),
        FUSE("rms-norm"),
    )
    case(
        "a6_gated_float16",
        "1",
        "float16 Mamba2: Cast x, z to float32, gated group RMS, Cast back, w * y in float16",
        _gated(4, f16=True),
        FUSE("rms-norm"),
    )
    for stat in ("sumsquare", "l2"):
        case(
            f"a6_gated_stat_{stat}",
            "1",
            f"gated group RMS, mean of squares as {stat} / (D/G) (opset 18 axes inputs)",
            _gated(4, stat=stat, divisor=8),
            FUSE("rms-norm"),
        )
    case(
        "a6_gated_stat_sumsquare_d_minus_1",
        "1",
        "look-alike: ReduceSumSquare / (D/G - 1)",
        _gated(4, stat="sumsquare", divisor=7),
        KEEP("variance-divisor", "unbiased-variance"),
    )
    case(
        "a6_gated_float16_pure",
        "1",
        "gated group RMS computed in float16 throughout (no Casts)",
        _gated(4, f16="pure"),
        FUSE("rms-norm"),
    )
    case(
        "a6_gated_float16_pure_d256",
        "1",
        "gated group RMS in float16 throughout, 256 channels in 2 groups",
        _gated(2, 256, f16="pure"),
        FUSE("rms-norm"),
    )
    case(
        "a6_gated_no_gate",
        "1",
        "group RMS without the gate (z unused but an input)",
        _gated(4, gate="none"),
        FUSE("rms-norm"),
    )
    case(
        "a6_gated_gate_after_norm",
        "1",
        "look-alike: the gate after the norm (norm_before_gate): the RMS still fuses, gate kept",
        _gated(4, gate="after"),
        FUSE("rms-norm"),
    )
    case(
        "a6_gated_transposed_groups",
        "1",
        "look-alike: groups over non-contiguous channels (Reshape [.., D/G, G] + Transpose)",
        _gated(4, transpose=True),
        FUSE_OR("rms-norm", "group-norm", "not-channel-groups"),
    )
    case(
        "a6_gated_back_to_other_shape",
        "1",
        "look-alike: Reshape back to [B, -1, D/G], not x's shape",
        _gated(4, back="other", weight="none", out_shape=(2, 12, 8)),
        FUSE_OR("rms-norm", "reshape-not-restored", "group-norm"),
    )
    case(
        "a6_gated_mean_centred",
        "1",
        "look-alike: the group statistics mean-centred (a layer norm over the group)",
        _gated(4, center=True),
        FUSE_OR("layer-norm", "group-norm", "not-channel-groups", "not-rms-norm"),
    )
    case(
        "a6_gated_divisor_d_minus_1",
        "1",
        "look-alike: mean of squares as ReduceSum / (D/G - 1)",
        _gated(4, divisor=7),
        KEEP("variance-divisor", "unbiased-variance"),
    )
    case(
        "a6_gated_divisor_d_exact_sum",
        "1",
        "ReduceSum / (D/G) exactly: the same RMS norm",
        _gated(4, divisor=8),
        FUSE("rms-norm"),
    )
    case(
        "a6_gated_eps_outside_sqrt",
        "1",
        "look-alike: epsilon added outside the square root",
        _gated(4, eps_outside=True),
        KEEP("epsilon-outside-sqrt"),
    )
    case(
        "a6_gated_weight_per_group",
        "1",
        "look-alike: the weight shaped [G, 1] on the grouped tensor, not per channel",
        _gated(4, weight="group"),
        FUSE_OR("rms-norm", "gamma-shape", "per-group-affine"),
    )
    case(
        "a6_gated_weight_reshaped_to_groups",
        "1",
        "the weight as [G, D/G] on the grouped tensor before the Reshape back (w reshaped)",
        _gated(4, weight="grouped_full"),
        FUSE_OR("rms-norm", "gamma-shape"),
    )
    case(
        "a6_gated_weight_shared_by_groups",
        "1",
        "one [D/G] weight shared by every group, on the grouped tensor: an exact scale",
        _gated(4, weight="grouped_shared"),
        FUSE("rms-norm"),
    )
    case(
        "a6_gated_no_weight",
        "1",
        "gated group RMS without weight",
        _gated(4, weight="none"),
        FUSE("rms-norm"),
    )


# ================================================================ feature 2: adaLN


def _adaln(
    *,
    d=16,
    seq=5,
    mod="inputs",
    form="one_plus",
    swap=False,
    s_shape="sample",
    axes=(-1,),
    eps=1e-6,
    f16=False,
    opset=18,
    gate=False,
):
    """DiT/SD3/Flux adaLN: LayerNorm(x) without affine, then x * (1 + s) + b with per-sample s, b
    (`mod`: inputs s, b [B, 1, D] | emb: Linear(c) -> Split -> Unsqueeze | const: s, b constant;
    `form`: one_plus | one_plus_rev (s + 1) | expand (n + n * s + b); `s_shape`: sample [B, 1, D]
    | token [B, S, 1] (s broadcast over the wrong axis); `gate`: DiT's gate_msa * y as well)."""

    def build():
        g = G(opset=opset, seed=d + seq, dtype=np.float16 if f16 == "pure" else np.float32)
        elem = F16 if f16 else F
        ins = [("x", elem, (2, seq, d))]
        x = g.op("Cast", ["x"], to=F) if f16 is True else "x"
        n = ln(g, x, axes=axes, eps=eps, gamma=None, beta=None, shape=(2, seq, d))
        if f16 is True:
            n = g.op("Cast", [n], to=F16)
        t = NP_OF[elem]
        if mod == "inputs":
            sd = (2, 1, d) if s_shape == "sample" else (2, seq, 1)
            ins += [("s", elem, sd), ("b", elem, (2, 1, d))]
            s, b = "s", "b"
        elif mod == "emb":
            ins.append(("c", elem, (2, d)))
            lin = g.op("MatMul", ["c", g.init(g.random((d, 3 * d), -0.1, 0.1), g.fresh("W"), t)])
            lin = g.op("Add", [lin, g.init(g.random((3 * d,), -0.1, 0.1), g.fresh("bW"), t)])
            parts = [g.fresh("chunk") for _ in range(3)]
            g.nodes.append(
                helper.make_node(
                    "Split", [lin], parts, name=g.fresh("Split"), axis=-1, num_outputs=3
                )
            )
            s, b, gt = (g.op("Unsqueeze", [p, _i64(g, [1])]) for p in parts)
        else:
            s = g.init(g.random((d,), -0.3, 0.3), g.fresh("s"), t)
            b = g.init(g.random((d,), -0.3, 0.3), g.fresh("b"), t)
        if swap:
            s, b = b, s
        one = g.init(1.0, g.fresh("one"), t)
        if form == "expand":
            y = g.op("Add", [g.op("Add", [n, g.op("Mul", [n, s])]), b])
        else:
            scale = g.op("Add", [s, one] if form == "one_plus_rev" else [one, s])
            y = g.op("Add", [g.op("Mul", [n, scale]), b])
        if gate:
            y = g.op("Add", ["x", g.op("Mul", [gt, y])])
        g.op("Identity", [y], "y")
        return model(g, ins, [("y", elem, (2, seq, d))])

    return build


def _feature2() -> None:
    items = [
        ("inputs", {}, "s, b graph inputs [B, 1, D]"),
        ("inputs_rev", {"form": "one_plus_rev"}, "(s + 1) operand order"),
        ("inputs_expand", {"form": "expand"}, "n + n * s + b"),
        ("emb_split", {"mod": "emb"}, "s, b from Linear(c) -> Split(3) -> Unsqueeze"),
        ("emb_split_gate", {"mod": "emb", "gate": True}, "DiT: x + gate * (n * (1 + s) + b)"),
        ("eps_1e5", {"eps": 1e-5}, "SD3 epsilon 1e-5"),
        ("d64", {"d": 64, "seq": 4}, "hidden 64"),
        ("opset17", {"opset": 17}, "opset 17"),
        ("float16", {"f16": True}, "float16 x cast to float32 for the norm, modulation in float16"),
        ("float16_pure", {"f16": "pure"}, "float16 throughout, no Casts"),
        (
            "float16_pure_d256",
            {"f16": "pure", "d": 256, "seq": 3},
            "float16 throughout, hidden 256",
        ),
        ("const_mod", {"mod": "const"}, "s, b constants (a learned modulation): foldable"),
        ("swapped", {"swap": True}, "shift and scale swapped: x * (1 + b) + s"),
        ("swapped_emb", {"swap": True, "mod": "emb"}, "swapped, from the embedding"),
        ("scale_per_token", {"s_shape": "token"}, "s [B, S, 1]: broadcast over the wrong axis"),
    ]
    for name, kw, words in items:
        case(
            f"a6_adaln_{name}",
            "2",
            f"adaLN: layer norm without affine then modulation; {words}",
            _adaln(**kw),
            FUSE("layer-norm"),
        )
    case(
        "a6_adaln_dit_block",
        "2",
        "a DiT block: two adaLN-Zero norms around attention and MLP, residual sums between",
        _dit_block,
        FUSE("layer-norm", 2),
        configs=WITH_SKIP,
    )
    case(
        "a6_adaln_norm_over_seq",
        "2",
        "look-alike: the norm over the sequence axis (1) of [B, S, D]",
        _adaln(axes=(1,)),
        KEEP("non-trailing-axes"),
    )
    case(
        "a6_adaln_norm_over_seq_and_hidden",
        "2",
        "norm over axes (1, 2): a trailing suffix, LayerNormalization(axis=1)",
        _adaln(axes=(1, 2)),
        FUSE("layer-norm"),
    )
    case(
        "a6_adaln_shift_inside_norm",
        "2",
        "look-alike: the shift added to x - mean before dividing (not a norm then shift)",
        _adaln_shift_inside,
        KEEP("not-layer-norm", "intermediate-used-elsewhere", "beta-shape"),
    )
    case(
        "a6_adaln_scale_is_stat",
        "2",
        "look-alike: the modulation scale computed from the norm's own variance",
        _adaln_scale_from_var,
        KEEP("intermediate-used-elsewhere"),
    )


def _dit_block() -> onnx.ModelProto:
    """A DiT block: h = x + g1 * attn(norm1(x) * (1 + s1) + b1); y = h + g2 * mlp(norm2(h) *
    (1 + s2) + b2), the six modulations split from Linear(c)."""
    g = G(opset=18, seed=21)
    d = 16
    # Small weights: the outlier profile's 1e3 entries stay O(1) through the modulation, so a
    # difference is the fusion's, not float32 rounding of 1e4-sized intermediates.
    lin = g.op("MatMul", ["c", g.init(g.random((d, 6 * d), -0.01, 0.01))])
    parts = [g.fresh("chunk") for _ in range(6)]
    g.nodes.append(
        helper.make_node("Split", [lin], parts, name=g.fresh("Split"), axis=-1, num_outputs=6)
    )
    s1, b1, g1, s2, b2, g2 = (g.op("Unsqueeze", [p, _i64(g, [1])]) for p in parts)

    def branch(v, s, b, gate):
        n = ln(g, v, gamma=None, beta=None, eps=1e-6)
        m = g.op("Add", [g.op("Mul", [n, g.op("Add", [g.init(1.0), s])]), b])
        m = g.op("MatMul", [m, g.init(g.random((d, d), -0.1, 0.1))])
        return g.op("Add", [v, g.op("Mul", [gate, m])])

    h = branch("x", s1, b1, g1)
    g.op("Identity", [branch(h, s2, b2, g2)], "y")
    return model(g, [("x", F, (2, 5, d)), ("c", F, (2, d))], [("y", F, (2, 5, d))])


def _adaln_shift_inside() -> onnx.ModelProto:
    g = G(opset=18)
    mean = g.reduce("ReduceMean", "x", (-1,))
    c = g.op("Sub", ["x", mean])
    var = g.reduce("ReduceMean", g.op("Pow", [c, g.init(2.0)]), (-1,))
    std = g.op("Sqrt", [g.op("Add", [var, g.init(1e-6)])])
    n = g.op("Div", [g.op("Add", [c, "b"]), std])
    g.op("Mul", [n, g.op("Add", [g.init(1.0), "s"])], "y")
    return model(
        g,
        [("x", F, (2, 5, 16)), ("s", F, (2, 1, 16)), ("b", F, (2, 1, 16))],
        [("y", F, (2, 5, 16))],
    )


def _adaln_scale_from_var() -> onnx.ModelProto:
    g = G(opset=18)
    mean = g.reduce("ReduceMean", "x", (-1,))
    c = g.op("Sub", ["x", mean])
    var = g.reduce("ReduceMean", g.op("Pow", [c, g.init(2.0)]), (-1,))
    std = g.op("Sqrt", [g.op("Add", [var, g.init(1e-6)])])
    n = g.op("Div", [c, std])
    g.op("Mul", [n, g.op("Add", [var, "s"])], "y")
    return model(g, [("x", F, (2, 5, 16)), ("s", F, (2, 1, 16))], [("y", F, (2, 5, 16))])


# ================================================================ feature 3: QK-norms


def _qk(
    kind: str,
    *,
    heads=4,
    dh=8,
    seq=3,
    weight="head_dim",
    f16=False,
    weight_before_cast=False,
    axes=(-1,),
    opset=18,
    symbolic=False,
):
    """QK-norm variants. `kind`: cohere (layer norm over Dh, no bias, weight [H, Dh]) | olmo2
    (RMS over the full H*Dh, then Reshape to heads) | flux (RMS over Dh on [B, H, S, Dh]) | qwen3
    (Reshape [B, S, H, Dh] by a Shape-built target, RMS over Dh). `weight`: head_dim | heads
    ([H, Dh]) | per_head ([H, 1, 1]) | none."""

    def build():
        g = G(opset=opset, seed=heads * 11 + dh, dtype=np.float16 if f16 == "pure" else np.float32)
        elem = F16 if f16 else F
        t = NP_OF[elem]
        if kind == "flux":
            dims = (2, heads, seq, dh)
            in_dims = ("b", heads, "s", dh) if symbolic else dims
        else:
            dims = (2, seq, heads * dh)
            in_dims = ("b", "s", heads * dh) if symbolic else dims
        x = g.op("Cast", ["q"], to=F) if f16 is True else "q"
        if kind in ("cohere", "qwen3", "qwen3_heads"):
            if kind in ("qwen3", "qwen3_heads"):
                lead = g.op("Slice", [g.op("Shape", ["q"]), _i64(g, [0]), _i64(g, [2])])
                tail = [-1, dh] if kind == "qwen3" else [heads, -1]
                target = g.op("Concat", [lead, _i64(g, tail)], axis=0)
            else:
                target = _i64(g, [0, 0, heads, dh])
            x = g.op("Reshape", [x, target])
            full = (2, seq, heads, dh)
        else:
            full = dims
        if kind == "cohere":
            n = ln(g, x, axes=axes, eps=1e-5, gamma=None, beta=None, shape=full)
        else:
            n = _rms_stats(g, x, axes=axes)
        shapes = {
            "head_dim": (dh,),
            "heads": (heads, dh),
            "per_head": (heads, 1, 1),
            "full": (heads * dh,),
        }
        w = None
        wt = np.float32 if weight_before_cast else t
        if weight == "heads_equal":
            w = g.init(np.tile(g.random((1, dh)), (heads, 1)), g.fresh("w"), wt)
        elif weight != "none":
            w = g.init(g.random(shapes[weight]), g.fresh("w"), wt)
        if w is not None and weight_before_cast:
            n = g.op("Mul", [n, w])
        if f16 is True:
            n = g.op("Cast", [n], to=F16)
        if w is not None and not weight_before_cast:
            n = g.op("Mul", [n, w])
        if kind == "olmo2":
            n = g.op("Reshape", [n, _i64(g, [0, 0, heads, dh])])
            out = (2, seq, heads, dh)
        else:
            out = full
        out_dims = out
        if symbolic:
            out_dims = ("b", heads, "s", dh) if kind == "flux" else ("b", "s", heads, dh)
        g.op("Identity", [n], "y")
        return model(g, [("q", elem, in_dims)], [("y", elem, out_dims)])

    return build


def _feature3() -> None:
    items = [
        (
            "cohere_weight_heads",
            _qk("cohere", weight="heads"),
            FUSE_OR("layer-norm", "gamma-shape"),
            "Cohere: layer norm over Dh, weight [H, Dh]",
        ),
        (
            "cohere_weight_heads_equal_rows",
            _qk("cohere", weight="heads_equal"),
            FUSE_OR("layer-norm", "gamma-shape"),
            "Cohere weight [H, Dh] with equal rows",
        ),
        (
            "cohere_weight_head_dim",
            _qk("cohere", weight="head_dim"),
            FUSE("layer-norm"),
            "Cohere-like with a shared [Dh] weight",
        ),
        ("cohere_no_weight", _qk("cohere", weight="none"), FUSE("layer-norm"), "no weight"),
        (
            "cohere_float16_heads",
            _qk("cohere", weight="heads", f16=True),
            FUSE_OR("layer-norm", "gamma-shape"),
            "float16 Cohere, weight [H, Dh] after the cast",
        ),
        (
            "cohere_over_heads_axis",
            _qk("cohere", weight="none", axes=(-2,)),
            KEEP("non-trailing-axes"),
            "look-alike: statistics over H, not Dh",
        ),
        (
            "olmo2_full",
            _qk("olmo2", weight="full"),
            FUSE("rms-norm"),
            "OLMo 2: RMS over the full H*Dh, weight [H*Dh], then Reshape to heads",
        ),
        (
            "olmo2_float16_weight_before_cast",
            _qk("olmo2", weight="full", f16=True, weight_before_cast=True),
            FUSE("rms-norm"),
            "OLMo 2 float16: weight before the Cast back",
        ),
        (
            "olmo2_float16_weight_after_cast",
            _qk("olmo2", weight="full", f16=True),
            FUSE("rms-norm"),
            "float16: weight after the Cast back (LLaMA order)",
        ),
        (
            "olmo2_symbolic",
            _qk("olmo2", weight="full", symbolic=True),
            FUSE("rms-norm"),
            "OLMo 2, batch and sequence symbolic",
        ),
        ("flux_q", _qk("flux"), FUSE("rms-norm"), "Flux q RMS norm on [B, H, S, Dh], scale [Dh]"),
        (
            "flux_float16",
            _qk("flux", f16=True),
            FUSE("rms-norm"),
            "Flux float16: x.float(), rrms, .to(dtype) * scale",
        ),
        ("flux_symbolic", _qk("flux", symbolic=True), FUSE("rms-norm"), "Flux, B and S symbolic"),
        ("flux_float16_pure", _qk("flux", f16="pure"), FUSE("rms-norm"), "Flux q/k in float16"),
        (
            "cohere_float16_pure_no_weight",
            _qk("cohere", weight="none", f16="pure"),
            FUSE("layer-norm"),
            "Cohere-like layer norm over Dh in float16 throughout",
        ),
        ("flux_dh64", _qk("flux", dh=64, heads=2), FUSE("rms-norm"), "Flux head dim 64"),
        (
            "flux_per_head_weight",
            _qk("flux", weight="per_head"),
            FUSE_OR("rms-norm", "gamma-shape"),
            "look-alike: weight [H, 1, 1] varies per head",
        ),
        (
            "flux_weight_heads_dh",
            _qk("flux", weight="heads", seq=4),
            FUSE_OR("rms-norm", "gamma-shape"),
            "look-alike: weight [H, Dh] on [B, H, S, Dh] (H = S = 4) varies along S, not per head",
        ),
        (
            "flux_over_seq",
            _qk("flux", axes=(-2,), weight="none"),
            KEEP("non-trailing-axes"),
            "look-alike: RMS over S, not Dh",
        ),
        (
            "flux_over_seq_and_dh",
            _qk("flux", axes=(-2, -1), weight="none"),
            FUSE("rms-norm"),
            "RMS over (S, Dh): a trailing suffix",
        ),
        (
            "qwen3_shape_target",
            _qk("qwen3"),
            FUSE("rms-norm"),
            "Qwen3/Gemma 3: Reshape to [B, S, -1, Dh] by Concat(Shape(q)[0:2]), RMS over Dh",
        ),
        (
            "qwen3_symbolic",
            _qk("qwen3", symbolic=True),
            FUSE("rms-norm"),
            "Qwen3, batch and sequence symbolic",
        ),
        (
            "qwen3_heads_then_minus1_symbolic",
            _qk("qwen3_heads", symbolic=True),
            FUSE("rms-norm"),
            "Reshape to [B, S, H, -1] by Concat(Shape(q)[0:2], [H, -1]), B and S symbolic",
        ),
        (
            "qwen3_heads_then_minus1_static",
            _qk("qwen3_heads"),
            FUSE("rms-norm"),
            "Reshape to [B, S, H, -1] by Concat(Shape(q)[0:2], [H, -1]), static",
        ),
        (
            "flux_from_projection",
            _flux_projection,
            FUSE("rms-norm", 2),
            "Flux attention: MatMul -> Reshape [B, S, H, Dh] -> Transpose -> q, k RMS norms",
        ),
        (
            "gemma3_q_norm",
            _gemma3_qk,
            FUSE("rms-norm"),
            "Gemma 3 q_norm: Shape-built Reshape, float16, (1 + w) in float32 before the cast",
        ),
        (
            "olmo2_weight_heads_after_reshape",
            _olmo2_weight_after_reshape,
            FUSE("rms-norm"),
            "RMS over H*Dh without weight, Reshape, then weight [H, Dh]",
        ),
    ]
    for name, build, expect, words in items:
        case(f"a6_qk_{name}", "3", words, build, expect)


def _flux_projection() -> onnx.ModelProto:
    g = G(opset=18, seed=4)
    outs = []
    for name in ("q", "k"):
        p = g.op("MatMul", ["h", g.init(g.random((32, 32), -0.3, 0.3))])
        p = g.op("Transpose", [g.op("Reshape", [p, _i64(g, [0, 0, 4, 8])])], perm=[0, 2, 1, 3])
        out = g.op("Cast", [g.op("Cast", [_rms_stats(g, p)], to=F16)], to=F)
        g.op("Mul", [out, g.init(g.random((8,)))], name)
        outs.append((name, F, ("b", 4, "s", 8)))
    return model(g, [("h", F, ("b", "s", 32))], outs)


def _gemma3_qk() -> onnx.ModelProto:
    """Gemma 3's q_norm: Reshape [B, S, -1, Dh] by a Shape-built target, then Gemma's RMS norm
    (float32 statistics, (1 + w) over Dh) in float16 between Casts."""
    g = G(opset=18, seed=6)
    lead = g.op("Slice", [g.op("Shape", ["q"]), _i64(g, [0]), _i64(g, [2])])
    r = g.op("Reshape", ["q", g.op("Concat", [lead, _i64(g, [-1, 8])], axis=0)])
    g.op("Identity", [_gemma_rms(g, r, 8, f16=True)], "y")
    return model(g, [("q", F16, ("b", "s", 32))], [("y", F16, ("b", "s", 4, 8))])


def _olmo2_weight_after_reshape() -> onnx.ModelProto:
    g = G(opset=18, seed=3)
    n = _rms_stats(g, "q")
    n = g.op("Reshape", [n, _i64(g, [0, 0, 4, 8])])
    g.op("Mul", [n, g.init(g.random((4, 8)))], "y")
    return model(g, [("q", F, (2, 3, 32))], [("y", F, (2, 3, 4, 8))])


# ================================================================ feature 4: sandwich norms


def _gemma_rms(g: G, x: str, d: int, *, f16=False, order="one_plus", w=None, eps=1e-6) -> str:
    """Gemma's RMS norm: float32 statistics, scale (1 + w) applied before the cast back."""
    h = g.op("Cast", [x], to=F) if f16 is True else x
    n = _rms_stats(g, h, eps=eps, spelling="rsqrt")
    weight = w or g.init(g.random((d,), -0.5, 0.5), g.fresh("w"))
    one = g.init(1.0, g.fresh("one"))
    scale = g.op("Add", [one, weight] if order == "one_plus" else [weight, one])
    y = g.op("Mul", [n, scale])
    return g.op("Cast", [y], to=F16) if f16 is True else y


def _sandwich(*, d=16, f16=False, order="one_plus", layers=1, w_input=False, share=False, opset=18):
    """Gemma 3 decoder layers: h = x + post_attn(attn(pre_attn(x))); out = h +
    post_ffw(mlp(pre_ffw(h))), each norm Gemma's RMS with (1 + w); `w_input`: the pre-attention
    weight a graph input; `share`: one weight tensor for all four norms."""

    def build():
        g = G(opset=opset, seed=d, dtype=np.float16 if f16 == "pure" else np.float32)
        elem = F16 if f16 else F
        t = NP_OF[elem]
        shared = g.init(g.random((d,), -0.5, 0.5), "w_shared") if share else None
        h = "x"
        for layer in range(layers):

            def norm(v, first=False, layer=layer):
                w = "w_in" if (w_input and first and layer == 0) else shared
                return _gemma_rms(g, v, d, f16=f16, order=order, w=w)

            a = norm(h, first=True)
            a = g.op("MatMul", [a, g.init(g.random((d, d), -0.3, 0.3), g.fresh("Wa"), t)])
            h = g.op("Add", [h, norm(a)])
            m = norm(h)
            m = g.op("MatMul", [m, g.init(g.random((d, d), -0.3, 0.3), g.fresh("Wm"), t)])
            m = g.op("Mul", [m, g.op("Sigmoid", [m])])
            h = g.op("Add", [h, norm(m)])
        g.op("Identity", [h], "y")
        ins = [("x", elem, (2, 5, d))]
        if w_input:
            ins.append(("w_in", F, (d,)))
        return model(g, ins, [("y", elem, (2, 5, d))])

    return build


def _feature4() -> None:
    items = [
        ("one_layer", {}, FUSE("rms-norm", 4), "one layer: four norms"),
        ("two_layers", {"layers": 2}, FUSE("rms-norm", 8), "two layers: eight norms"),
        ("w_plus_one", {"order": "w_plus_one"}, FUSE("rms-norm", 4), "(w + 1) operand order"),
        ("float16", {"f16": True}, FUSE("rms-norm", 4), "float16, statistics and scale in float32"),
        (
            "float16_two_layers",
            {"f16": True, "layers": 2},
            FUSE("rms-norm", 8),
            "float16, two layers",
        ),
        (
            "shared_weight",
            {"share": True},
            FUSE("rms-norm", 4),
            "one (1 + w) tensor feeding all four norms",
        ),
        (
            "weight_input",
            {"w_input": True},
            FUSE("rms-norm", 4),
            "the pre-attention w a graph input: that norm fuses without scale, (1 + w) kept",
        ),
        ("d64", {"d": 64}, FUSE("rms-norm", 4), "hidden 64"),
        ("opset17", {"opset": 17}, FUSE("rms-norm", 4), "opset 17"),
        ("float16_pure", {"f16": "pure"}, FUSE("rms-norm", 4), "float16 throughout, no Casts"),
    ]
    for name, kw, expect, words in items:
        case(
            f"a6_sandwich_{name}",
            "4",
            f"Gemma 3 sandwich norms; {words}",
            _sandwich(**kw),
            expect,
            configs=WITH_SKIP,
        )
    case(
        "a6_sandwich_phi3_rms",
        "4",
        "Phi-3's RMS norm (LLaMA's: float16, statistics in float32, w after the cast back)",
        _phi3,
        FUSE("rms-norm"),
    )
    case(
        "a6_sandwich_cohere_hidden_ln",
        "4",
        "Cohere's hidden-state layer norm: mean-centred, weight [D], no bias",
        _cohere_hidden,
        FUSE("layer-norm"),
    )
    case(
        "a6_sandwich_one_minus_w",
        "4",
        "look-alike scale: (1 - w), still a constant scale",
        _gemma_variant("sub"),
        FUSE("rms-norm"),
    )
    case(
        "a6_sandwich_norm_output_reused",
        "4",
        "the normalised value (before the scale) also feeds the residual",
        _gemma_variant("reuse"),
        FUSE_OR("rms-norm", "intermediate-used-elsewhere"),
    )
    case(
        "a6_sandwich_sqrt_d_embed",
        "4",
        "Gemma's embedding scale x * sqrt(D) before the first norm",
        _gemma_variant("embed"),
        FUSE("rms-norm"),
    )
    case(
        "a6_sandwich_scale_times_w",
        "4",
        "look-alike: x * (1 + w) where the 1 + w is computed from a graph input",
        _gemma_variant("input_one"),
        FUSE_OR("rms-norm", "gamma-shape"),
    )


def _phi3() -> onnx.ModelProto:
    g = G(opset=18, seed=7)
    n = g.op("Cast", [_rms_stats(g, g.op("Cast", ["x"], to=F), eps=1e-5, spelling="rsqrt")], to=F16)
    g.op("Mul", [g.init(g.random((16,)), g.fresh("w"), np.float16), n], "y")
    return model(g, [("x", F16, (2, 5, 16))], [("y", F16, (2, 5, 16))])


def _cohere_hidden() -> onnx.ModelProto:
    g = G(opset=18, seed=8)
    ln(g, "x", beta=None, eps=1e-5, out="y")
    return model(g)


def _gemma_variant(kind: str):
    def build():
        g = G(opset=18, seed=5)
        d = 16
        ins = [("x", F, (2, 5, d))]
        if kind == "sub":
            n = _rms_stats(g, "x", spelling="rsqrt")
            y = g.op("Mul", [n, g.op("Sub", [g.init(1.0), g.init(g.random((d,), -0.5, 0.5))])])
        elif kind == "reuse":
            n = _rms_stats(g, "x", spelling="rsqrt")
            y = g.op("Mul", [n, g.op("Add", [g.init(1.0), g.init(g.random((d,), -0.5, 0.5))])])
            y = g.op("Add", [y, n])
        elif kind == "embed":
            e = g.op("Mul", ["x", g.init(np.float32(np.sqrt(d)))])
            y = _gemma_rms(g, e, d)
        else:
            ins.append(("one", F, (1,)))
            n = _rms_stats(g, "x", spelling="rsqrt")
            y = g.op("Mul", [n, g.op("Add", ["one", g.init(g.random((d,), -0.5, 0.5))])])
        g.op("Identity", [y], "y")
        return model(g, ins, [("y", F, (2, 5, d))])

    return build


# ================================================================ feature 5: never-norms


def _never(kind: str):
    """Never-norms (and norms with a never-norm beside them) on x [2, 5, 16]."""

    def build():
        g = G(opset=18, seed=9)
        d = 16
        x = "x"
        if kind == "dyt":
            t = g.op("Tanh", [g.op("Mul", [x, g.init(0.5)])])
            y = g.op(
                "Add", [g.op("Mul", [t, g.init(g.random((d,)))]), g.init(g.random((d,), -0.5, 0.5))]
            )
        elif kind == "dyt_alpha_per_channel":
            t = g.op("Tanh", [g.op("Mul", [g.init(g.random((d,))), x])])
            y = g.op("Mul", [g.init(g.random((d,))), t])
        elif kind == "dyt_then_rms":
            t = g.op("Tanh", [g.op("Mul", [x, g.init(0.5)])])
            y = g.op("Mul", [_rms_stats(g, t), g.init(g.random((d,)))])
        elif kind == "rms_then_dyt":
            n = g.op("Mul", [_rms_stats(g, x), g.init(g.random((d,)))])
            y = g.op("Tanh", [g.op("Mul", [n, g.init(0.8)])])
        elif kind == "mean_of_dyt":
            t = g.op("Tanh", [g.op("Mul", [x, g.init(0.5)])])
            y = ln(g, x, stat_src=t, gamma=None, beta=None)
        elif kind == "tanh_normalised":
            y = g.op("Tanh", [_rms_stats(g, x)])
        elif kind == "tanh_of_ms":
            ms = g.reduce("ReduceMean", g.op("Pow", [x, g.init(2.0)]), (-1,))
            y = g.op("Div", [x, g.op("Tanh", [g.op("Add", [ms, g.init(1e-6)])])])
        elif kind == "clip_rows_then_rms":
            c = g.op("Clip", [x, g.init(-2.0), g.init(2.0)])
            y = g.op("Mul", [_rms_stats(g, c), g.init(g.random((d,)))])
        elif kind == "clip_ms":
            ms = g.reduce("ReduceMean", g.op("Pow", [x, g.init(2.0)]), (-1,))
            y = g.op("Div", [x, g.op("Sqrt", [g.op("Clip", [ms, g.init(1e-6), g.init(1e4)])])])
        elif kind == "max_ms":
            ms = g.reduce("ReduceMean", g.op("Pow", [x, g.init(2.0)]), (-1,))
            y = g.op("Div", [x, g.op("Sqrt", [g.op("Max", [ms, g.init(1e-6)])])])
        elif kind == "max_abs":
            m = g.op("ReduceMax", [g.op("Abs", [x]), _i64(g, [-1])], keepdims=1)
            y = g.op("Div", [x, g.op("Add", [m, g.init(1e-6)])])
        elif kind == "max_square":
            m = g.op("ReduceMax", [g.op("Pow", [x, g.init(2.0)]), _i64(g, [-1])], keepdims=1)
            y = g.op("Div", [x, g.op("Sqrt", [g.op("Add", [m, g.init(1e-6)])])])
        elif kind == "mean_abs":
            m = g.reduce("ReduceMean", g.op("Abs", [x]), (-1,))
            y = g.op("Div", [x, g.op("Add", [m, g.init(1e-6)])])
        elif kind == "mean_abs_sqrt":
            m = g.reduce("ReduceMean", g.op("Abs", [x]), (-1,))
            y = g.op("Div", [x, g.op("Sqrt", [g.op("Add", [m, g.init(1e-6)])])])
        elif kind == "l2":
            ss = g.op("ReduceL2", [x, _i64(g, [-1])], keepdims=1)
            y = g.op("Div", [x, g.op("Max", [ss, g.init(1e-12)])])
        elif kind == "softsign_rows":
            y = g.op("Div", [x, g.op("Add", [g.op("Abs", [x]), g.init(1.0)])])
        elif kind == "minmax":
            lo = g.op("ReduceMin", [x, _i64(g, [-1])], keepdims=1)
            hi = g.op("ReduceMax", [x, _i64(g, [-1])], keepdims=1)
            y = g.op(
                "Div", [g.op("Sub", [x, lo]), g.op("Add", [g.op("Sub", [hi, lo]), g.init(1e-6)])]
            )
        elif kind == "std_no_center":
            ms = g.reduce("ReduceMean", g.op("Pow", [x, g.init(2.0)]), (-1,))
            y = g.op("Mul", [x, g.op("Sqrt", [g.op("Add", [ms, g.init(1e-6)])])])
        elif kind == "cube_mean":
            ms = g.reduce("ReduceMean", g.op("Pow", [x, g.init(3.0)]), (-1,))
            y = g.op("Div", [x, g.op("Sqrt", [g.op("Add", [ms, g.init(1e-6)])])])
        else:
            raise ValueError(kind)
        g.op("Identity", [y], "y")
        return model(g, [("x", F, (2, 5, d))], [("y", F, (2, 5, d))])

    return build


def _feature5() -> None:
    items = [
        ("dyt", KEEP(), "DyT gamma * tanh(alpha * x) + beta: never a norm"),
        ("dyt_alpha_per_channel", KEEP(), "DyT with a per-channel alpha, no beta"),
        ("dyt_then_rms", FUSE("rms-norm"), "DyT then an RMS norm of its output: the RMS fuses"),
        ("rms_then_dyt", FUSE("rms-norm"), "an RMS norm then tanh: the RMS fuses, Tanh kept"),
        ("tanh_normalised", FUSE("rms-norm"), "tanh(RMS(x)): the RMS fuses"),
        (
            "mean_of_dyt",
            FUSE("rms-norm"),
            "c = x - mean(DyT(x)), then c / sqrt(mean(c^2) + eps): an RMS norm of c",
        ),
        ("tanh_of_ms", KEEP("not-rms-norm", "root-exponent"), "x / tanh(mean(x^2) + eps)"),
        ("clip_rows_then_rms", FUSE("rms-norm"), "clipped rows, then an RMS norm of them"),
        ("clip_ms", KEEP("not-rms-norm"), "x / sqrt(clip(mean(x^2), eps, 1e4))"),
        ("max_ms", KEEP("not-rms-norm", "l2-norm"), "x / sqrt(max(mean(x^2), eps))"),
        ("max_abs", KEEP(), "max-abs scaling x / (max|x| + eps)"),
        ("max_square", KEEP(), "x / sqrt(max(x^2) + eps)"),
        ("mean_abs", KEEP(), "x / (mean|x| + eps): no root, no square"),
        ("mean_abs_sqrt", KEEP("mean-abs-not-square", "not-rms-norm"), "x / sqrt(mean|x| + eps)"),
        ("l2", KEEP("l2-norm"), "L2 normalisation x / max(||x||, eps)"),
        ("softsign_rows", KEEP(), "softsign x / (1 + |x|)"),
        ("minmax", KEEP(), "min-max scaling of rows"),
        ("std_no_center", KEEP("not-rms-norm"), "x * sqrt(mean(x^2) + eps): multiplies"),
        ("cube_mean", KEEP("square-exponent"), "x / sqrt(mean(x^3) + eps)"),
    ]
    for name, expect, words in items:
        case(f"a6_never_{name}", "5", words, _never(name), expect)


# ================================================================ feature 6: group norm


def _gn_node(
    *,
    c=8,
    groups=4,
    spatial=(3, 3),
    eps=1e-5,
    f16=False,
    symbolic=False,
    affine_inputs=False,
    stash=None,
    opset=21,
):
    """One GroupNormalization-21 node on x [2, C, *S] (scale, bias [C]); `affine_inputs`: scale
    and bias graph inputs, not initializers. (GroupNormalization-18 is not in the corpus:
    onnx 1.23's checker refuses its deprecated schema at opsets 18-20.)"""

    def build():
        g = G(opset=opset, seed=c + groups)
        elem = F16 if f16 else F
        t = NP_OF[elem]
        n = c
        ins = [("x", elem, (("n" if symbolic else 2), c, *spatial))]
        if affine_inputs:
            ins += [("scale", elem, (n,)), ("bias", elem, (n,))]
            scale, bias = "scale", "bias"
        else:
            scale = g.init(g.random((n,)), g.fresh("scale"), t)
            bias = g.init(g.random((n,), -0.5, 0.5), g.fresh("bias"), t)
        attrs = {"num_groups": groups, "epsilon": eps}
        if stash is not None:
            attrs["stash_type"] = stash
        g.nodes.append(
            helper.make_node("GroupNormalization", ["x", scale, bias], ["y"], name="gn", **attrs)
        )
        return model(g, ins, [("y", elem, ins[0][2])])

    return build


def _gn21_graph(kind: str):
    """GroupNormalization-21 (C = 8, G = 4, x [2, 8, 3, 3]) in a context: `silu` after it,
    `constant` scale and bias from Constant nodes, `two` nodes sharing their affine, `if` inside
    an If branch reading outer initializers."""

    def build():
        g = G(opset=21, seed=8)
        dims = (2, 8, 3, 3)
        ins, outs = [("x", F, dims)], []
        make = g.const_node if kind == "constant" else g.init
        scale, bias = make(g.random((8,))), make(g.random((8,), -0.5, 0.5))
        if kind == "value_floats":
            scale, bias = "vf_scale", "vf_bias"
            for name, values in ((scale, np.linspace(0.5, 1.5, 8)), (bias, [0.1] * 8)):
                g.nodes.append(helper.make_node("Constant", [], [name], value_floats=list(values)))
        if kind == "same_scale_bias":
            bias = scale
        attrs = {} if kind == "no_epsilon" else {"epsilon": 1e-5}

        def gn(x, out, where=g):
            where.nodes.append(
                helper.make_node(
                    "GroupNormalization",
                    [x, scale, bias],
                    [out],
                    name=where.fresh("gn"),
                    num_groups=4,
                    **attrs,
                )
            )
            return out

        if kind == "silu":
            y = gn("x", "n")
            g.op("Mul", [y, g.op("Sigmoid", [y])], "y")
        elif kind == "used_twice":
            n = gn("x", "n")
            g.op("Add", [n, n], "y")
            g.op("Identity", [n], "n_out")
            outs.append(("n_out", F, dims))
        elif kind == "resnet":
            a = g.op("Mul", [gn("x", "a"), g.op("Sigmoid", ["a"], "sa")], "a2")
            w = g.init(g.random((8, 8, 3, 3), -0.2, 0.2), "conv_w")
            c = g.op(
                "Conv", [a, w, g.init(g.random((8,), -0.1, 0.1), "conv_b")], "c", pads=[1, 1, 1, 1]
            )
            gn(c, "y")
        elif kind in ("two", "two_typed"):
            a = gn("x", "a")
            gn(g.op("Mul", [a, g.init(2.0)], "a2"), "y")
        elif kind == "if":
            then_g, else_g = G("t_", opset=21), G("e_", opset=21)
            gn("x", "t_y", then_g)
            else_g.op("Identity", ["x"], "e_y")
            branches = [
                helper.make_graph(b.nodes, n, [], [helper.make_tensor_value_info(o, F, dims)])
                for b, n, o in ((then_g, "then", "t_y"), (else_g, "else", "e_y"))
            ]
            g.nodes.append(
                helper.make_node(
                    "If", ["flag"], ["y"], then_branch=branches[0], else_branch=branches[1]
                )
            )
            ins.append(("flag", onnx.TensorProto.BOOL, ()))
        else:
            gn("x", "y")
        typed = {
            "two_typed": [("a", F, dims), ("a2", F, dims)],
            "resnet": [("a", F, dims), ("sa", F, dims), ("a2", F, dims), ("c", F, dims)],
        }.get(kind, [])
        return model(g, ins, [("y", F, dims), *outs], value_info=typed)

    return build


def _gn21_in_function() -> onnx.ModelProto:
    """A GroupNormalization-21 node inside a model-local function, its affine Constant nodes."""
    g = G(opset=21, seed=9)
    body = [
        helper.make_node("Constant", [], ["s"], value=onnx.numpy_helper.from_array(g.random((8,)))),
        helper.make_node(
            "Constant", [], ["b"], value=onnx.numpy_helper.from_array(g.random((8,), -0.5, 0.5))
        ),
        helper.make_node("GroupNormalization", ["X", "s", "b"], ["Y"], num_groups=4),
    ]
    fn = helper.make_function("local", "GNBlock", ["X"], ["Y"], body, [helper.make_opsetid("", 21)])
    g.nodes.append(helper.make_node("GNBlock", ["x"], ["y"], domain="local"))
    dims = (2, 8, 3, 3)
    return model(g, [("x", F, dims)], [("y", F, dims)], functions=[fn], opsets={"local": 1})


def _gn_instance(
    *,
    c=8,
    groups=4,
    spatial=(3, 3),
    eps=1e-5,
    f16=False,
    in_scale="ones",
    back="restore",
    affine="channel",
    target="const",
    symbolic=False,
    opset=17,
):
    """The exporters' group norm: Reshape [N, G, -1] -> InstanceNormalization(ones, zeros) ->
    Reshape back -> Mul(gamma [C, 1, 1]) -> Add(beta). `in_scale`: ones | random | bias (zeros
    scale ones, bias not zero); `back`: restore | shape | other; `affine`: channel | group
    (per-group gamma on the grouped tensor) | none."""

    def build():
        g = G(opset=opset, seed=c * 3 + groups)
        elem = F16 if f16 else F
        t = NP_OF[elem]
        dims = (("n" if symbolic else 2), c, *spatial)
        if target == "const":
            r = g.op("Reshape", ["x", _i64(g, [0, groups, -1])])
        else:
            lead = g.op("Slice", [g.op("Shape", ["x"]), _i64(g, [0]), _i64(g, [1])])
            r = g.op("Reshape", ["x", g.op("Concat", [lead, _i64(g, [groups, -1])], axis=0)])
        s = np.ones(groups) if in_scale in ("ones", "bias") else g.random((groups,))
        b = g.random((groups,), -0.5, 0.5) if in_scale == "bias" else np.zeros(groups)
        n = g.op(
            "InstanceNormalization",
            [r, g.init(s, g.fresh("in_s"), t), g.init(b, g.fresh("in_b"), t)],
            epsilon=eps,
        )
        if affine == "group":
            n = g.op("Mul", [n, g.init(g.random((groups, 1)), g.fresh("gg"), t)])
        if back == "shape":
            y = g.op("Reshape", [n, g.op("Shape", ["x"])])
        elif back == "other":
            y = g.op("Reshape", [n, _i64(g, [0, c, -1])])
        else:
            y = g.op("Reshape", [n, _i64(g, [0, c, *spatial])])
        bshape = (c, 1) if back == "other" else (c, *[1] * len(spatial))
        if affine == "channel":
            y = g.op("Mul", [y, g.init(g.random(bshape), g.fresh("gamma"), t)])
            y = g.op("Add", [y, g.init(g.random(bshape, -0.5, 0.5), g.fresh("beta"), t)])
        g.op("Identity", [y], "y")
        out = (dims[0], c, int(np.prod(spatial))) if back == "other" else dims
        return model(g, [("x", elem, dims)], [("y", elem, out)])

    return build


def _gn_decomposed(
    *,
    c=8,
    groups=4,
    spatial=(3, 3),
    symbolic=False,
    target="const",
    back="const",
    ln_kw=None,
    affine="channel",
    f16=False,
):
    """nn.GroupNorm written out: Reshape [N, G, -1] -> layer-norm statistics over the last axis
    -> Reshape back -> Mul(gamma [C, 1, 1]) -> Add(beta). `target`: const | gather (TorchScript's
    Unsqueeze(Gather(Shape(x), 0))) | slice (Slice(Shape(x), 0, 1)) | interleaved ([0, -1, G]:
    groups of channels G apart) | split ([0, G, C/G, -1], statistics over the last two axes);
    `back`: const | shape | other ([0, C, -1]); `ln_kw`: look-alike statistics (divisor,
    eps_outside); `affine`: channel | group ([G, 1] on the grouped tensor) | wrong_axis (gamma
    [C, 1]: it varies along H); `f16`: float16 x cast to float32 around the statistics."""

    def build():
        g = G(opset=18, seed=c + groups, dtype=np.float16 if f16 == "pure" else np.float32)
        elem = F16 if f16 else F
        dims = (("n" if symbolic else 2), c, *spatial)
        size = c * int(np.prod(spatial)) // groups
        x = g.op("Cast", ["x"], to=F) if f16 is True else "x"
        grouped = (2, groups, size)
        axes = (-1,)
        if target == "const":
            shape = _i64(g, [0, groups, -1])
        elif target == "interleaved":
            shape = _i64(g, [0, -1, groups])
            grouped = (2, size, groups)
        elif target == "split":
            shape = _i64(g, [0, groups, c // groups, -1])
            grouped = (2, groups, c // groups, int(np.prod(spatial)))
            axes = (-2, -1)
        elif target == "gather":
            batch = g.op(
                "Gather",
                [g.op("Shape", ["x"]), g.init(np.array(0, np.int64), g.fresh("i0"), np.int64)],
            )
            lead = g.op("Unsqueeze", [batch, _i64(g, [0])])
            shape = g.op("Concat", [lead, _i64(g, [groups, -1])], axis=0)
        else:
            lead = g.op("Slice", [g.op("Shape", ["x"]), _i64(g, [0]), _i64(g, [1])])
            shape = g.op("Concat", [lead, _i64(g, [groups, -1])], axis=0)
        r = g.op("Reshape", [x, shape])
        n = ln(g, r, gamma=None, beta=None, shape=grouped, axes=axes, **(ln_kw or {}))
        if affine == "group":
            n = g.op("Mul", [n, g.init(g.random((groups, 1)), g.fresh("gg"))])
        out = dims
        if back == "other":
            y = g.op("Reshape", [n, _i64(g, [0, c, -1])])
            out = (dims[0], c, int(np.prod(spatial)))
        else:
            back_shape = g.op("Shape", ["x"]) if back == "shape" else _i64(g, [0, c, *spatial])
            y = g.op("Reshape", [n, back_shape])
        if f16 is True:
            y = g.op("Cast", [y], to=F16)
        bshape = (c, *[1] * (len(out) - 2))
        if affine == "wrong_axis":
            bshape = (c, 1)
        t = NP_OF[elem]
        if affine != "group":
            y = g.op("Mul", [y, g.init(g.random(bshape), g.fresh("gamma"), t)])
            y = g.op("Add", [y, g.init(g.random(bshape, -0.5, 0.5), g.fresh("beta"), t)])
        g.op("Identity", [y], "y")
        return model(g, [("x", elem, dims)], [("y", elem, out)])

    return build


def _gn_decomposed_cases() -> None:
    """The hand-written group norm, exact and look-alike."""
    looks = [
        (
            "other_back",
            {"back": "other"},
            FUSE_OR("group-norm", "reshape-not-restored"),
            "Reshape back to [N, C, -1]",
        ),
        (
            "interleaved_groups",
            {"target": "interleaved"},
            FUSE_OR("group-norm", "not-channel-groups", "group-norm"),
            "Reshape [N, -1, G]: statistics over channels G apart",
        ),
        (
            "split_two_axes",
            {"target": "split"},
            FUSE_OR("group-norm", "group-statistics-axes"),
            "Reshape [N, G, C/G, -1], statistics over the last two axes",
        ),
        (
            "divisor_d_minus_1",
            {"ln_kw": {"var": "sum", "divisor": 17.0}},
            KEEP("unbiased-variance", "variance-divisor"),
            "variance ReduceSum / (L - 1)",
        ),
        (
            "eps_outside",
            {"ln_kw": {"eps_outside": True}},
            KEEP("epsilon-outside-sqrt"),
            "epsilon outside the square root",
        ),
        (
            "per_group_affine",
            {"affine": "group"},
            FUSE_OR("group-norm", "per-group-affine"),
            "gamma [G, 1] on the grouped tensor, no per-channel affine",
        ),
        (
            "gamma_wrong_axis",
            {"affine": "wrong_axis", "spatial": (8, 3)},
            FUSE_OR("group-norm", "gamma-shape", "beta-shape"),
            "gamma, beta [C, 1] on [N, C, H = C, W]: they vary along H",
        ),
        (
            "groups_do_not_divide",
            {"groups": 3},
            FUSE_OR("group-norm", "groups-do-not-divide"),
            "Reshape [N, 3, -1] of 8 channels x 3x3: groups cut channels",
        ),
        (
            "float16",
            {"f16": True},
            FUSE("group-norm"),
            "float16 x, statistics in float32 between Casts",
        ),
        ("float16_pure", {"f16": "pure"}, FUSE("group-norm"), "float16 throughout, no Casts"),
        (
            "float16_pure_wide",
            {"f16": "pure", "c": 32, "groups": 4, "spatial": (8, 8)},
            FUSE("group-norm"),
            "float16 throughout, 512-element groups",
        ),
        ("g1", {"groups": 1}, FUSE("group-norm"), "one group"),
        ("gC", {"groups": 8}, FUSE("group-norm"), "G = C"),
        ("5d", {"spatial": (2, 2, 3)}, FUSE("group-norm"), "5-D x"),
    ]
    for name, kw, expect, words in looks:
        case(
            f"a6_gn_decomposed_{name}",
            "6",
            f"hand-written group norm: {words}",
            _gn_decomposed(**kw),
            expect,
            groups=kw.get("groups", 4) if kw.get("groups", 4) in (1, 4, 8) else 0,
        )


def _feature6() -> None:
    gn21 = [
        ("g1", {"groups": 1}, 1),
        ("gC", {"groups": 8}, 8),
        ("g2", {"groups": 2}, 2),
        ("g4", {}, 4),
        ("g4_eps_tiny", {"eps": 1e-12}, 4),
        ("g4_eps_large", {"eps": 10.0}, 4),
        ("g4_symbolic_batch", {"symbolic": True}, 4),
        ("g4_3d", {"spatial": (6,)}, 4),
        ("g4_5d", {"spatial": (2, 2, 3)}, 4),
        ("g32_c64", {"c": 64, "groups": 32, "spatial": (2, 2)}, 32),
        ("g4_stash_float32", {"stash": 1}, 4),
    ]
    for name, kw, groups in gn21:
        case(
            f"a6_gn21_{name}",
            "6",
            f"GroupNormalization-21 float32, {kw or 'C=8, G=4'}",
            _gn_node(**kw),
            FUSE("group-norm"),
            groups=groups,
            reference=gn21_reference,
        )
    odd = [
        ("c1_g1", {"c": 1, "groups": 1}, 1, FUSE("group-norm")),
        ("gC_spatial1", {"spatial": (1, 1), "groups": 8}, 8, FUSE("group-norm")),
        ("opset23", {"opset": 23}, 4, FUSE("group-norm")),
        ("symbolic_spatial", {"spatial": ("h", "w")}, 0, FUSE_OR("group-norm", "unknown-shape")),
        ("eps_zero", {"eps": 0.0}, 4, KEEP("epsilon-not-positive")),
    ]
    for name, kw, groups, expect in odd:
        case(
            f"a6_gn21_{name}",
            "6",
            f"GroupNormalization-21 float32, {kw}",
            _gn_node(**kw),
            expect,
            groups=groups,
            reference=gn21_reference,
        )
    more = [
        ("silu_after", _gn21_graph("silu"), FUSE("group-norm"), "then SiLU x * Sigmoid(x)"),
        (
            "scale_constant_node",
            _gn21_graph("constant"),
            FUSE("group-norm"),
            "scale and bias from Constant nodes",
        ),
        (
            "two_nodes_shared_affine",
            _gn21_graph("two"),
            FUSE_OR("group-norm", "unknown-dtype", "unknown-shape", count=2),
            "two nodes in a chain sharing one scale and bias, intermediates untyped (onnx infers"
            " no type for a GroupNormalization-21 output)",
        ),
        ("no_epsilon", _gn21_graph("no_epsilon"), FUSE("group-norm"), "without epsilon (1e-5)"),
        (
            "value_floats",
            _gn21_graph("value_floats"),
            FUSE("group-norm"),
            "scale and bias from Constant(value_floats)",
        ),
        (
            "same_scale_bias",
            _gn21_graph("same_scale_bias"),
            FUSE("group-norm"),
            "one tensor as both scale and bias",
        ),
        (
            "used_twice",
            _gn21_graph("used_twice"),
            FUSE("group-norm"),
            "output read twice and a graph output",
        ),
        (
            "in_function",
            _gn21_in_function,
            FUSE("group-norm"),
            "inside a model-local function, affine from Constant nodes",
        ),
        (
            "resnet_block",
            _gn21_graph("resnet"),
            FUSE("group-norm", 2),
            "ResnetBlock2D: GroupNorm -> SiLU -> Conv -> GroupNorm, every type declared",
        ),
        (
            "in_if_branch",
            _gn21_graph("if"),
            FUSE("group-norm"),
            "in an If branch, scale and bias outer initializers",
        ),
        (
            "two_nodes_typed",
            _gn21_graph("two_typed"),
            FUSE("group-norm", 2),
            "two nodes in a chain, the intermediates' types declared (value_info)",
        ),
        ("eps_negative", _gn_node(eps=-1e-5), KEEP("epsilon-not-positive"), "epsilon -1e-5"),
        (
            "rank2",
            _gn_node(spatial=()),
            FUSE_OR("group-norm", "unknown-shape", "unknown-rank"),
            "x [N, C] (no spatial dims): groups of C/G single elements",
        ),
        (
            "stash_double",
            _gn_node(stash=11),
            FUSE_OR("group-norm", "cast-types"),
            "stash_type double: ORT computes the one-pass statistics in float64",
        ),
    ]
    for name, build, expect, words in more:
        # A node in a context has no NumPy reference here: no feed that makes the body NaN.
        alone = name not in (
            "in_if_branch",
            "two_nodes_shared_affine",
            "two_nodes_typed",
            "silu_after",
            "resnet_block",
            "used_twice",
            "in_function",
        )
        case(
            f"a6_gn21_{name}",
            "6",
            f"GroupNormalization-21 {words}",
            build,
            expect,
            groups=4 if alone else 0,
            offset=alone,
            reference=gn21_reference if alone else None,
        )
    for name, kw, groups in gn21[:6]:
        case(
            f"a6_gn21_f16_{name}",
            "6",
            f"GroupNormalization-21 float16, {kw or 'C=8, G=4'}",
            _gn_node(f16=True, **kw),
            FUSE_OR("group-norm", "unsupported-dtype"),
            groups=groups,
            reference=gn21_reference,
        )
    case(
        "a6_gn21_affine_inputs",
        "6",
        "GroupNormalization-21 with scale and bias graph inputs",
        _gn_node(affine_inputs=True),
        FUSE_OR("group-norm", "gamma-shape", "beta-shape"),
        groups=4,
        reference=gn21_reference,
    )
    inst = [
        ("g4", {}, 4),
        ("g1", {"groups": 1}, 1),
        ("gC", {"groups": 8}, 8),
        ("g4_back_by_shape", {"back": "shape"}, 4),
        ("g4_target_concat_symbolic", {"target": "concat", "symbolic": True, "back": "shape"}, 4),
        ("g4_eps_tiny", {"eps": 1e-12}, 4),
        ("g4_eps_large", {"eps": 10.0}, 4),
        ("g4_3d", {"spatial": (6,)}, 4),
        ("g4_5d", {"spatial": (2, 2, 3)}, 4),
        ("g32_c64", {"c": 64, "groups": 32, "spatial": (2, 2)}, 32),
        ("g4_no_affine", {"affine": "none"}, 4),
        ("g4_opset18", {"opset": 18}, 4),
        ("g4_float16", {"f16": True}, 4),
    ]
    for name, kw, groups in inst:
        case(
            f"a6_inorm_{name}",
            "6",
            f"exporters' InstanceNormalization group norm, {kw or 'C=8, G=4'}",
            _gn_instance(**kw),
            FUSE_OR("group-norm", "no-faster-form"),
            groups=groups,
        )
    looks = [
        (
            "back_to_other_shape",
            {"back": "other"},
            ("reshape-not-restored",),
            "Reshape back to [N, C, -1], not x's shape",
        ),
        (
            "scale_not_ones",
            {"in_scale": "random"},
            ("per-group-affine",),
            "InstanceNormalization scale not ones (a per-group scale)",
        ),
        (
            "bias_not_zeros",
            {"in_scale": "bias"},
            ("per-group-affine",),
            "InstanceNormalization bias not zeros (a per-group bias)",
        ),
        (
            "per_group_affine",
            {"affine": "group"},
            ("per-group-affine",),
            "a per-group gamma [G, 1] on the grouped tensor, no per-channel affine",
        ),
    ]
    for name, kw, reasons, words in looks:
        case(
            f"a6_inorm_look_{name}",
            "6",
            f"look-alike: {words}",
            _gn_instance(**kw),
            FUSE_OR("group-norm", *reasons, "no-faster-form"),
            groups=4,
        )
    for name, kw in (
        ("const_target", {}),
        ("concat_target_symbolic", {"symbolic": True, "target": "concat", "back": "shape"}),
        ("concat_target_static", {"target": "concat", "back": "shape"}),
        ("const_target_symbolic", {"symbolic": True, "back": "shape"}),
        ("gather_target_static", {"target": "gather", "back": "shape"}),
        ("gather_target_symbolic", {"symbolic": True, "target": "gather", "back": "shape"}),
    ):
        case(
            f"a6_gn_decomposed_{name}",
            "6",
            f"hand-written group norm (two-pass statistics between the Reshapes), {name}",
            _gn_decomposed(**kw),
            FUSE("group-norm"),
            groups=4,
        )
    case(
        "a6_inorm_look_groups_do_not_divide",
        "6",
        "look-alike: Reshape [N, 3, -1] of C = 8 channels x 3x3 (72 = 3 x 24: groups cut channels)",
        _gn_instance(groups=3),
        KEEP("groups-do-not-divide", "not-channel-groups", "no-faster-form"),
        groups=3,
    )


# ================================================================ overridable weights


def _overridable(kind: str):
    """A constant a fused node could fold, held by an initializer that is also a graph input
    (so a caller may feed another value): `gn21` scale and bias of a GroupNormalization-21,
    `adaln` a constant modulation (1 + s), `gemma` Gemma's (1 + w), `flux` a QK-norm scale,
    `gated` Mamba2's weight, `gn_target` / `qk_target` the grouping / head Reshape's target."""

    def build():
        g = G(opset=21 if kind == "gn21" else 18, seed=13)
        if kind == "gn21":
            dims = (2, 8, 3, 3)
            g.init(g.random((8,)), "ov_scale")
            g.init(g.random((8,), -0.5, 0.5), "ov_bias")
            g.nodes.append(
                helper.make_node(
                    "GroupNormalization", ["x", "ov_scale", "ov_bias"], ["y"], num_groups=4
                )
            )
            names = ["ov_scale", "ov_bias"]
        elif kind == "adaln":
            dims = (2, 5, 16)
            n = ln(g, "x", gamma=None, beta=None, eps=1e-6)
            g.init(g.random((16,), -0.3, 0.3), "ov_s")
            g.init(g.random((16,), -0.3, 0.3), "ov_b")
            scaled = g.op("Mul", [n, g.op("Add", [g.init(1.0), "ov_s"])])
            g.op("Add", [scaled, "ov_b"], "y")
            names = ["ov_s", "ov_b"]
        elif kind == "gemma":
            dims = (2, 5, 16)
            g.init(g.random((16,), -0.5, 0.5), "ov_w")
            g.op("Identity", [_gemma_rms(g, "x", 16, w="ov_w")], "y")
            names = ["ov_w"]
        elif kind == "flux":
            dims = (2, 4, 3, 8)
            g.init(g.random((8,)), "ov_w")
            g.op("Mul", [_rms_stats(g, "x"), "ov_w"], "y")
            names = ["ov_w"]
        elif kind == "gn_target":
            dims = (2, 8, 3, 3)
            g.init(np.array([0, 4, -1], np.int64), "ov_shape", np.int64)
            n = ln(g, g.op("Reshape", ["x", "ov_shape"]), gamma=None, beta=None, shape=(2, 4, 18))
            y = g.op("Reshape", [n, g.op("Shape", ["x"])])
            y = g.op("Mul", [y, g.init(g.random((8, 1, 1)))])
            g.op("Add", [y, g.init(g.random((8, 1, 1), -0.5, 0.5))], "y")
            names = ["ov_shape"]
        elif kind == "qk_target":
            g.init(np.array([0, 0, 4, 8], np.int64), "ov_shape", np.int64)
            n = _rms_stats(g, g.op("Reshape", ["x", "ov_shape"]))
            g.op("Mul", [n, g.init(g.random((8,)))], "y")
            out = ("a", "b", "c", "d")
            return model(g, [("x", F, (2, 3, 32))], [("y", F, out)], overridable=["ov_shape"])
        else:
            dims = (2, 3, 32)
            g.init(g.random((32,)), "ov_w")
            r = g.op("Reshape", ["x", _i64(g, [0, 0, 4, 8])])
            back = g.op("Reshape", [_rms_stats(g, r, spelling="rsqrt"), _i64(g, [0, 0, 32])])
            g.op("Mul", ["ov_w", back], "y")
            names = ["ov_w"]
        return model(g, [("x", F, dims)], [("y", F, dims)], overridable=names)

    return build


def _overridable_cases() -> None:
    items = [
        (
            "gn21",
            "6",
            {"ov_scale": np.full(8, 2.5, np.float32), "ov_bias": np.full(8, -1.0, np.float32)},
            FUSE_OR("group-norm", "gamma-shape", "beta-shape"),
        ),
        (
            "adaln",
            "2",
            {"ov_s": np.full(16, 0.7, np.float32), "ov_b": np.full(16, 3.0, np.float32)},
            FUSE("layer-norm"),
        ),
        ("gemma", "4", {"ov_w": np.full(16, 2.0, np.float32)}, FUSE("rms-norm")),
        ("flux", "3", {"ov_w": np.full(8, -3.0, np.float32)}, FUSE("rms-norm")),
        ("gated", "1", {"ov_w": np.full(32, 4.0, np.float32)}, FUSE("rms-norm")),
        (
            "gn_target",
            "6",
            {"ov_shape": np.array([0, 2, -1], np.int64)},
            FUSE_OR("group-norm", "not-channel-groups", "unknown-shape"),
        ),
        (
            "qk_target",
            "3",
            {"ov_shape": np.array([0, 0, 32, 1], np.int64)},
            FUSE_OR("rms-norm", "unknown-shape"),
        ),
    ]
    for kind, feature, overrides, expect in items:
        case(
            f"a6_overridable_{kind}",
            feature,
            f"{kind}: a foldable constant held by an overridable initializer (fed another value)",
            _overridable(kind),
            expect,
            overrides=overrides,
            groups=4 if kind == "gn21" else 0,
            reference=gn21_reference if kind == "gn21" else None,
        )


# ========================================================= feature 7: float16 norms and moves

H16 = 16


def _n16(g: G, x: str, kind: str, shape) -> str:
    """A float16 norm of `x` (shape `shape`) over its last axis: `ln` layer norm with affine,
    `rms` RMS norm with a weight."""
    if kind == "ln":
        return ln(g, x, shape=shape)
    return g.op("Mul", [_rms_stats(g, x), g.init(g.random((shape[-1],)), g.fresh("w"))])


def _f16_case(body, inputs, outputs, opset=18):
    """A float16 model: `body(g)` appends nodes that read the named inputs and write the named
    outputs."""

    def build():
        g = G(opset=opset, seed=7, dtype=np.float16)
        body(g)
        return model(g, inputs, outputs)

    return build


X = [("x", F16, (2, 6, H16))]
Y = [("y", F16, (2, 6, H16))]


def _b_reshape(kind):
    def body(g):
        r = g.op("Reshape", ["x", _i64(g, [2, 3, 2, H16])])
        n = _n16(g, r, kind, (2, 3, 2, H16))
        g.op("Reshape", [n, _i64(g, [2, 6, H16])], "y")

    return body


def _b_transpose(kind):
    def body(g):
        t = g.op("Transpose", ["x"], perm=[1, 0, 2])
        n = _n16(g, t, kind, (6, 2, H16))
        g.op("Transpose", [n], "y", perm=[1, 0, 2])

    return body


def _b_moved_used_before(g):
    r = g.op("Reshape", ["x", _i64(g, [12, H16])])
    n = _n16(g, r, "ln", (12, H16))
    g.op("Reshape", [n, _i64(g, [2, 6, H16])], "y")
    g.op("Add", [r, g.init(np.float16(1.5))], "y2")


def _b_moved_used_after(g):
    r = g.op("Reshape", ["x", _i64(g, [12, H16])])
    n = _n16(g, r, "rms", (12, H16))
    g.op("Reshape", [g.op("Add", [n, r]), _i64(g, [2, 6, H16])], "y")


def _b_result_two_consumers(g):
    n = _n16(g, g.op("Transpose", ["x"], perm=[1, 0, 2]), "ln", (6, 2, H16))
    g.op("Transpose", [n], "y", perm=[1, 0, 2])
    g.op("Mul", [n, g.init(np.float16(3.0))], "y2")


def _b_mid_output_in(g):
    r = g.op("Reshape", ["x", _i64(g, [2, 3, 2, H16])], "mid")
    t = g.op("Transpose", [r], perm=[1, 0, 2, 3])
    n = _n16(g, t, "ln", (3, 2, 2, H16))
    g.op("Reshape", [g.op("Transpose", [n], perm=[1, 0, 2, 3]), _i64(g, [2, 6, H16])], "y")


def _b_mid_output_out(g):
    n = _n16(g, "x", "rms", (2, 6, H16))
    r = g.op("Reshape", [n, _i64(g, [12, H16])], "mid")
    g.op("Unsqueeze", [r, _i64(g, [0])], "y")


def _b_gather_data_out(g):
    n = _n16(g, "x", "ln", (2, 6, H16))
    g.op("Gather", [n, _i64(g, [5, 0, -1, 2])], "y", axis=1)


def _b_gather_data_in(g):
    x = g.op("Gather", ["x", _i64(g, [3, 3, 1, -6])], axis=1)
    g.op("Identity", [_n16(g, x, "rms", (2, 4, H16))], "y")


def _b_gather_runtime_idx(g):
    lead = g.op("Slice", [g.op("Shape", ["x"]), _i64(g, [0]), _i64(g, [1])])
    idx = g.op("Sub", [lead, _i64(g, [1, 2, 1])])
    x = g.op("Gather", ["x", idx], axis=0)
    n = _n16(g, x, "ln", (3, 6, H16))
    g.op("Gather", [n, idx], "y", axis=0)


def _b_gather_indices_side(g):
    n = _n16(g, "x", "ln", (2, 6, H16))
    idx = g.op("Cast", [g.op("Mul", [n, g.init(np.float16(2.0))])], to=onnx.TensorProto.INT64)
    table = g.init(g.random((32, 4)), g.fresh("table"))
    g.op("Gather", [table, idx], "y", axis=0)


def _b_cast_up(g):
    n = _n16(g, "x", "ln", (2, 6, H16))
    g.op("Cast", [g.op("Transpose", [n], perm=[0, 2, 1])], "y", to=F)


def _b_expand_runtime(side):
    def body(g):
        s = g.op("Shape", ["z"])
        if side == "in":
            e = g.op("Expand", ["x", s])
            g.op("Identity", [_n16(g, e, "ln", (2, 6, H16))], "y")
        else:
            g.op("Expand", [_n16(g, "x", "ln", (1, 6, H16)), s], "y")

    return body


def _b_tile_runtime(side):
    def body(g):
        lead = g.op("Slice", [g.op("Shape", ["z"]), _i64(g, [0]), _i64(g, [1])])
        reps = g.op("Concat", [lead, _i64(g, [1, 1])], axis=0)
        if side == "in":
            g.op("Identity", [_n16(g, g.op("Tile", ["x", reps]), "rms", (2, 6, H16))], "y")
        else:
            g.op("Tile", [_n16(g, "x", "rms", (1, 6, H16)), reps], "y")

    return body


def _b_slice_neg(where):
    def body(g):
        args = [_i64(g, [-1]), _i64(g, [-100]), _i64(g, [where]), _i64(g, [-1])]
        if where == -1:
            s = g.op("Slice", ["x", *args])
            g.op("Identity", [_n16(g, s, "ln", (2, 6, H16))], "y")
        else:
            n = _n16(g, "x", "ln", (2, 6, H16))
            args = [_i64(g, [-1]), _i64(g, [-100]), _i64(g, [1]), _i64(g, [-2])]
            g.op("Slice", [n, *args], "y")

    return body


def _b_chain_in(g):
    u = g.op("Unsqueeze", ["x", _i64(g, [0])])
    t = g.op("Transpose", [u], perm=[0, 2, 1, 3])
    f = g.op("Flatten", [t], axis=3)
    s = g.op("Reshape", [f, _i64(g, [6, 2, H16])])
    n = _n16(g, s, "ln", (6, 2, H16))
    g.op("Transpose", [n], "y", perm=[1, 0, 2])


def _b_chain_out(g):
    n = _n16(g, "x", "rms", (2, 6, H16))
    i = g.op("Identity", [n])
    t = g.op("Transpose", [i], perm=[1, 0, 2])
    r = g.op("Reshape", [t, _i64(g, [6, 2, 4, 4])])
    g.op("Squeeze", [g.op("Unsqueeze", [r, _i64(g, [0])]), _i64(g, [0])], "y")


def _b_if_branch(g, split=True):
    b = G("then_", opset=18, seed=3, dtype=np.float16)
    if split:
        r = b.op("Reshape", ["x", _i64(b, [12, H16])])
        b.op("Reshape", [_n16(b, r, "ln", (12, H16)), _i64(b, [2, 6, H16])], "then_y")
    else:
        t = b.op("Transpose", ["x"], perm=[1, 0, 2])
        b.op("Transpose", [_n16(b, t, "ln", (6, 2, H16))], "then_y", perm=[1, 0, 2])
    e = G("else_", opset=18, dtype=np.float16)
    e.op("Identity", ["x"], "else_y")
    then = body(b, [], [("then_y", F16, (2, 6, H16))])
    other = body(e, [], [("else_y", F16, (2, 6, H16))])
    g.op("If", ["cond"], "y", then_branch=then, else_branch=other)


def _b_loop_body(g):
    b = G("loop_", opset=18, seed=5, dtype=np.float16)
    t = b.op("Transpose", ["x"], perm=[1, 0, 2])
    n = _n16(b, t, "rms", (6, 2, H16))
    b.op("Transpose", [n], "loop_out", perm=[1, 0, 2])
    b.op("Identity", ["loop_c"], "loop_c_out")
    loop = body(
        b,
        [("loop_i", onnx.TensorProto.INT64, ()), ("loop_c", onnx.TensorProto.BOOL, ())],
        [("loop_c_out", onnx.TensorProto.BOOL, ()), ("loop_out", F16, (2, 6, H16))],
    )
    trips = _i64(g, 1)
    keep = g.init(np.array(True), g.fresh("keep"), np.bool_)
    g.op("Loop", [trips, keep], "ys", body=loop)
    g.op("Squeeze", ["ys", _i64(g, [0])], "y")


def _b_source(op):
    def body(g):
        if op == "matmul":
            h = g.op("MatMul", ["x", g.init(g.random((H16, H16), -0.3, 0.3), g.fresh("wm"))])
        elif op == "mul":
            h = g.op("Mul", ["x", "z"])
        elif op == "add":
            h = g.op("Add", ["x", "z"])
        elif op == "softmax":
            h = g.op("Softmax", ["x"], axis=-1)
        elif op == "mul_const":
            h = g.op("Mul", ["x", g.init(np.float16(2.0))])
        else:
            h = g.op("Sigmoid", ["x"])
        t = g.op("Transpose", [h], perm=[1, 0, 2])
        g.op("Transpose", [_n16(g, t, "ln", (6, 2, H16))], "y", perm=[1, 0, 2])

    return body


def _b_symbolic(g):
    r = g.op("Reshape", ["x", _i64(g, [0, 0, 2, 8])])
    n = _n16(g, r, "rms", (2, 6, 2, 8))
    g.op("Reshape", [n, _i64(g, [0, 0, H16])], "y")


def _b_overflow(g):
    big = g.op("Mul", [g.op("Mul", ["x", g.init(np.float16(1e3))]), g.init(np.float16(1e3))])
    t = g.op("Transpose", [big], perm=[1, 0, 2])
    g.op("Transpose", [_n16(g, t, "ln", (6, 2, H16))], "y", perm=[1, 0, 2])


def _b_square_overflow(g):
    big = g.op("Mul", ["x", g.init(np.float16(300.0))])
    r = g.op("Reshape", [big, _i64(g, [12, H16])])
    g.op("Reshape", [_n16(g, r, "rms", (12, H16)), _i64(g, [2, 6, H16])], "y")


def _b_concat_out(where):
    def body(g):
        n = _n16(g, "x", "ln", (2, 6, H16))
        if where == "direct":
            g.op("Concat", [n, "x"], "y", axis=-1)
        else:
            r = g.op("Reshape", [n, _i64(g, [2, 6, 2, 8])])
            g.op("Concat", [r, r], "y", axis=-1)

    return body


def _b_in_refused(op):
    def body(g):
        if op == "concat":
            h = g.op("Concat", ["x", "x"], axis=1)
            shape = (2, 12, H16)
        elif op == "pad":
            h = g.op("Pad", ["x", _i64(g, [0, 1, 0, 0, 1, 0])])
            shape = (2, 8, H16)
        else:
            h = g.op("Split", ["x", _i64(g, [2, 4])], axis=1)
            g.nodes[-1].output.append(g.fresh("rest"))
            shape = (2, 2, H16)
        n = _n16(g, h, "ln", shape)
        g.op("ReduceSum", [n, _i64(g, [1])], "y", keepdims=1)

    return body


def _b_back_to_back(g):
    a = _n16(g, "x", "ln", (2, 6, H16))
    r = g.op("Reshape", [a, _i64(g, [2, 6, 2, 8])])
    b = _n16(g, r, "rms", (2, 6, 2, 8))
    g.op("Reshape", [b, _i64(g, [2, 6, H16])], "y")


def _b_group_norm(g):
    r = g.op("Reshape", ["x", _i64(g, [2, 4, 18])])
    n = ln(g, r, gamma=None, beta=None, shape=(2, 4, 18))
    y = g.op("Reshape", [n, g.op("Shape", ["x"])])
    y = g.op("Mul", [y, g.init(g.random((8, 1, 1)))])
    g.op("Add", [g.op("Transpose", [y], perm=[0, 1, 3, 2]), g.init(g.random((8, 1, 1)))], "y")


def _b_space_to_depth(g):
    s = g.op("SpaceToDepth", ["x"], blocksize=2)
    t = g.op("Transpose", [s], perm=[0, 2, 3, 1])
    g.op("Identity", [_n16(g, t, "ln", (1, 2, 2, H16))], "y")


def _b_runtime_reshape(g):
    last = g.op("Slice", [g.op("Shape", ["x"]), _i64(g, [2]), _i64(g, [3])])
    r = g.op("Reshape", ["x", g.op("Concat", [_i64(g, [-1]), last], axis=0)])
    g.op("Identity", [_n16(g, r, "ln", (12, H16))], "y")


def _b_input_is_output(g):
    t = g.op("Transpose", ["x"], "t", perm=[1, 0, 2])
    n = _n16(g, t, "rms", (6, 2, H16))
    g.op("Transpose", [n], "y", perm=[1, 0, 2])
    g.op("Identity", [n], "y2")


def _b_branch_reads(side, op="If"):
    """The norm in the outer graph; a subgraph (If branch or Loop body) reads the moved input
    (`side` in) or the norm's result (out) from the outer scope."""

    def build(g):
        t = g.op("Transpose", ["x"], perm=[1, 0, 2])
        n = _n16(g, t, "ln", (6, 2, H16))
        g.op("Transpose", [n], "y", perm=[1, 0, 2])
        read = t if side == "in" else n
        b = G("sub_", opset=18, seed=9, dtype=np.float16)
        b.op("Add", [read, b.init(np.float16(0.5))], "sub_out")
        if op == "If":
            e = G("else_", opset=18, dtype=np.float16)
            e.op("Identity", [read], "else_out")
            then = body(b, [], [("sub_out", F16, (6, 2, H16))])
            other = body(e, [], [("else_out", F16, (6, 2, H16))])
            g.op("If", ["cond"], "y2", then_branch=then, else_branch=other)
            return
        b.op("Identity", ["sub_c"], "sub_c_out")
        loop = body(
            b,
            [("sub_i", onnx.TensorProto.INT64, ()), ("sub_c", onnx.TensorProto.BOOL, ())],
            [("sub_c_out", onnx.TensorProto.BOOL, ()), ("sub_out", F16, (6, 2, H16))],
        )
        keep = g.init(np.array(True), g.fresh("keep"), np.bool_)
        ys = g.op("Loop", [_i64(g, 1), keep], body=loop)
        g.op("Squeeze", [ys, _i64(g, [0])], "y2")

    return build


def _b_shared_moved(g):
    t = g.op("Transpose", ["x"], perm=[1, 0, 2])
    a = _n16(g, t, "ln", (6, 2, H16))
    b = _n16(g, t, "rms", (6, 2, H16))
    g.op("Transpose", [g.op("Add", [a, b])], "y", perm=[1, 0, 2])


def _b_threshold(g):
    n = _n16(g, "x", "ln", (2, 6, H16))
    g.op("Greater", [g.op("Transpose", [n], perm=[1, 0, 2]), g.init(np.float16(0.3))], "y")


def _b_mid_two_consumers(g):
    n = _n16(g, "x", "rms", (2, 6, H16))
    t = g.op("Transpose", [n], perm=[1, 0, 2])
    g.op("Reshape", [t, _i64(g, [12, H16])], "y")
    g.op("Mul", [t, t], "y2")


def _b_shape_of_result(g):
    n = _n16(g, "x", "ln", (2, 6, H16))
    r = g.op("Reshape", [n, _i64(g, [12, H16])])
    g.op("Reshape", [g.op("Sqrt", [g.op("Abs", [r])]), g.op("Shape", [n])], "y")


def _b_kept_cast(other):
    """The LN result read by a non-move (`other`: shape | mul | output) and through a
    Transpose by Abs -> Sqrt (ops ONNX Runtime's CPU provider runs in float32 for float16)."""

    def build(g):
        n = _n16(g, "x", "ln", (2, 6, H16)) if other != "output" else ln(g, "x", out="n")
        t = g.op("Transpose", [n], perm=[1, 0, 2])
        g.op("Sqrt", [g.op("Abs", [t])], "y")
        if other == "shape":
            g.op("Shape", [n], "y2")
        elif other == "mul":
            g.op("Mul", [n, g.init(np.float16(3.0))], "y2")

    return build


def _b_input_shape_reader(where):
    """h = Sqrt(|x| + 1) (float32 inside ONNX Runtime's CPU provider), Transpose, LN; Shape reads
    h (`where` = source) or the Transpose (moved) as a second output."""

    def build(g):
        h = g.op("Sqrt", [g.op("Add", [g.op("Abs", ["x"]), g.init(np.float16(1.0))])])
        t = g.op("Transpose", [h], perm=[1, 0, 2])
        g.op("Transpose", [_n16(g, t, "ln", (6, 2, H16))], "y", perm=[1, 0, 2])
        g.op("Shape", [h if where == "source" else t], "y2")

    return build


def _feature7() -> None:
    z = [("z", F16, (2, 6, H16))]
    y2t = [("y2", F16, (6, 2, H16))]
    LNF, RMSF = FUSE("layer-norm"), FUSE("rms-norm")
    items = [
        ("reshape_ln", "Reshape -> LN -> Reshape back", _b_reshape("ln"), X, Y, LNF),
        ("reshape_rms", "Reshape -> RMS -> Reshape back", _b_reshape("rms"), X, Y, RMSF),
        ("transpose_ln", "Transpose -> LN -> Transpose", _b_transpose("ln"), X, Y, LNF),
        ("transpose_rms", "Transpose -> RMS -> Transpose", _b_transpose("rms"), X, Y, RMSF),
        (
            "moved_used_before",
            "the Reshaped x also feeds an Add output",
            _b_moved_used_before,
            X,
            [*Y, ("y2", F16, (12, H16))],
            LNF,
        ),
        (
            "moved_used_after",
            "RMS(Reshape(x)) + Reshape(x) (residual with the moved x)",
            _b_moved_used_after,
            X,
            Y,
            RMSF,
        ),
        (
            "result_two_consumers",
            "the norm result feeds a Transpose and a Mul output",
            _b_result_two_consumers,
            X,
            [*Y, *y2t],
            LNF,
        ),
        (
            "mid_output_in",
            "Reshape's result (before a Transpose and the norm) is a graph output",
            _b_mid_output_in,
            X,
            [*Y, ("mid", F16, (2, 3, 2, H16))],
            LNF,
        ),
        (
            "mid_output_out",
            "Reshape of the RMS result is a graph output, then Unsqueeze",
            _b_mid_output_out,
            X,
            [("y", F16, (1, 12, H16)), ("mid", F16, (12, H16))],
            RMSF,
        ),
        (
            "gather_data_out",
            "Gather(LN(x), [5, 0, -1, 2]) on axis 1",
            _b_gather_data_out,
            X,
            [("y", F16, (2, 4, H16))],
            LNF,
        ),
        (
            "gather_data_in",
            "RMS(Gather(x, [3, 3, 1, -6]))",
            _b_gather_data_in,
            X,
            [("y", F16, (2, 4, H16))],
            RMSF,
        ),
        (
            "gather_runtime_idx",
            "Gather by indices Shape(x)[0] - [1, 2, 1] before and after the LN",
            _b_gather_runtime_idx,
            X,
            [("y", F16, (3, 6, H16))],
            LNF,
        ),
        (
            "gather_indices_side",
            "Cast(2 * LN(x), int64) as the indices of a Gather",
            _b_gather_indices_side,
            X,
            [("y", F16, (2, 6, H16, 4))],
            LNF,
        ),
        (
            "cast_up_after_move",
            "Cast(Transpose(LN(x)), float32): a float16 rounding to keep",
            _b_cast_up,
            X,
            [("y", F, (2, H16, 6))],
            LNF,
        ),
        (
            "expand_runtime_in",
            "LN(Expand(x, Shape(z)))",
            _b_expand_runtime("in"),
            [("x", F16, (1, 6, H16)), *z],
            Y,
            LNF,
        ),
        (
            "expand_runtime_out",
            "Expand(LN(x), Shape(z))",
            _b_expand_runtime("out"),
            [("x", F16, (1, 6, H16)), *z],
            Y,
            LNF,
        ),
        (
            "tile_runtime_in",
            "RMS(Tile(x, [Shape(z)[0], 1, 1]))",
            _b_tile_runtime("in"),
            [("x", F16, (1, 6, H16)), *z],
            Y,
            RMSF,
        ),
        (
            "tile_runtime_out",
            "Tile(RMS(x), [Shape(z)[0], 1, 1])",
            _b_tile_runtime("out"),
            [("x", F16, (1, 6, H16)), *z],
            Y,
            RMSF,
        ),
        (
            "slice_neg_step_norm_axis",
            "LN(x[..., ::-1]) (the normalised axis reversed)",
            _b_slice_neg(-1),
            X,
            Y,
            LNF,
        ),
        (
            "slice_neg_step_out",
            "LN(x)[:, ::-2]",
            _b_slice_neg(1),
            X,
            [("y", F16, (2, 3, H16))],
            LNF,
        ),
        (
            "chain4_in",
            "Unsqueeze -> Transpose -> Flatten -> Reshape -> LN -> Transpose",
            _b_chain_in,
            X,
            Y,
            LNF,
        ),
        (
            "chain4_out",
            "RMS -> Identity -> Transpose -> Reshape -> Unsqueeze -> Squeeze",
            _b_chain_out,
            X,
            [("y", F16, (6, 2, 4, 4))],
            RMSF,
        ),
        (
            "if_branch",
            "Reshape -> LN -> Reshape in an If branch reading the outer x",
            _b_if_branch,
            [*X, ("cond", onnx.TensorProto.BOOL, ())],
            Y,
            LNF,
        ),
        (
            "loop_body",
            "Transpose -> RMS -> Transpose in a Loop body reading the outer x",
            _b_loop_body,
            X,
            Y,
            RMSF,
        ),
        ("source_matmul", "x @ W -> Transpose -> LN -> Transpose", _b_source("matmul"), X, Y, LNF),
        ("source_mul", "x * z -> Transpose -> LN -> Transpose", _b_source("mul"), [*X, *z], Y, LNF),
        (
            "source_mul_const",
            "x * 2 -> Transpose -> LN -> Transpose",
            _b_source("mul_const"),
            X,
            Y,
            LNF,
        ),
        (
            "if_branch_transpose",
            "Transpose -> LN -> Transpose in an If branch (outer x)",
            lambda g: _b_if_branch(g, split=False),
            [*X, ("cond", onnx.TensorProto.BOOL, ())],
            Y,
            LNF,
        ),
        ("source_add", "x + z -> Transpose -> LN -> Transpose", _b_source("add"), [*X, *z], Y, LNF),
        (
            "source_softmax",
            "Softmax(x) -> Transpose -> LN -> Transpose",
            _b_source("softmax"),
            X,
            Y,
            LNF,
        ),
        (
            "source_sigmoid",
            "Sigmoid(x) -> Transpose -> LN -> Transpose",
            _b_source("sigmoid"),
            X,
            Y,
            LNF,
        ),
        (
            "symbolic",
            "symbolic [b, s, 16]: Reshape [0, 0, 2, 8] -> RMS -> Reshape back",
            _b_symbolic,
            [("x", F16, ("b", "s", H16))],
            [("y", F16, ("b", "s", H16))],
            RMSF,
        ),
        (
            "overflow_1e6",
            "LN(Transpose(x * 1e3 * 1e3)): inf in float16 before the norm",
            _b_overflow,
            X,
            Y,
            FUSE_OR("layer-norm", "float16-rounding"),
        ),
        (
            "square_overflow",
            "RMS(Reshape(300 x)): x^2 overflows float16 inside the norm",
            _b_square_overflow,
            X,
            Y,
            FUSE_OR("rms-norm", "float16-rounding"),
        ),
        (
            "concat_out_direct",
            "Concat(LN(x), x)",
            _b_concat_out("direct"),
            X,
            [("y", F16, (2, 6, 2 * H16))],
            LNF,
        ),
        (
            "concat_out_after_reshape",
            "Concat(Reshape(LN(x)), same)",
            _b_concat_out("reshape"),
            X,
            [("y", F16, (2, 6, 2, H16))],
            LNF,
        ),
        (
            "concat_in",
            "LN(Concat(x, x))",
            _b_in_refused("concat"),
            X,
            [("y", F16, (2, 1, H16))],
            FUSE_OR("layer-norm", "float16-rounding"),
        ),
        (
            "pad_in",
            "LN(Pad(x))",
            _b_in_refused("pad"),
            X,
            [("y", F16, (2, 1, H16))],
            FUSE_OR("layer-norm", "float16-rounding"),
        ),
        (
            "split_in",
            "LN(Split(x)[0])",
            _b_in_refused("split"),
            X,
            [("y", F16, (2, 1, H16))],
            FUSE_OR("layer-norm", "float16-rounding"),
        ),
        (
            "back_to_back",
            "LN -> Reshape -> RMS -> Reshape",
            _b_back_to_back,
            X,
            Y,
            FUSE("layer-norm", rms_norm=1),
        ),
        (
            "group_norm",
            "hand-written group norm (Reshape, LN, Reshape Shape(x)), Transpose, bias",
            _b_group_norm,
            [("x", F16, (2, 8, 3, 3))],
            [("y", F16, (2, 8, 3, 3))],
            FUSE("group-norm"),
        ),
        (
            "space_to_depth",
            "LN(Transpose(SpaceToDepth(x)))",
            _b_space_to_depth,
            [("x", F16, (1, 4, 4, 4))],
            [("y", F16, (1, 2, 2, H16))],
            FUSE_OR("layer-norm", "float16-rounding"),
        ),
        (
            "runtime_reshape",
            "LN(Reshape(x, Concat([-1], Shape(x)[2:3])))",
            _b_runtime_reshape,
            X,
            [("y", F16, (12, H16))],
            FUSE_OR("layer-norm", "unknown-shape"),
        ),
        (
            "subgraph_if_reads_moved_in",
            "an If branch reads the outer Transpose(x) the LN reads",
            _b_branch_reads("in"),
            [*X, ("cond", onnx.TensorProto.BOOL, ())],
            [*Y, *y2t],
            LNF,
        ),
        (
            "subgraph_if_reads_result",
            "an If branch reads the outer LN result (moved after)",
            _b_branch_reads("out"),
            [*X, ("cond", onnx.TensorProto.BOOL, ())],
            [*Y, *y2t],
            LNF,
        ),
        (
            "subgraph_loop_reads_result",
            "a Loop body reads the outer LN result (moved after)",
            _b_branch_reads("out", "Loop"),
            X,
            [*Y, *y2t],
            LNF,
        ),
        (
            "subgraph_loop_reads_moved_in",
            "a Loop body reads the outer Transpose(x) the LN reads",
            _b_branch_reads("in", "Loop"),
            X,
            [*Y, *y2t],
            LNF,
        ),
        (
            "shared_moved_two_norms",
            "LN(t) + RMS(t), t = Transpose(x)",
            _b_shared_moved,
            X,
            Y,
            FUSE("layer-norm", rms_norm=1),
        ),
        (
            "threshold_after_move",
            "Transpose(LN(x)) > 0.3 (a bool output)",
            _b_threshold,
            X,
            [("y", onnx.TensorProto.BOOL, (6, 2, H16))],
            LNF,
        ),
        (
            "mid_two_consumers",
            "t = Transpose(RMS(x)) feeds a Reshape output and t * t",
            _b_mid_two_consumers,
            X,
            [("y", F16, (12, H16)), *y2t],
            RMSF,
        ),
        ("shape_of_result", "Reshape(sqrt|Reshape(LN)|, Shape(LN))", _b_shape_of_result, X, Y, LNF),
        (
            "kept_cast_shape",
            "Sqrt(Abs(Transpose(LN))), Shape(LN) out",
            _b_kept_cast("shape"),
            X,
            [("y", F16, (6, 2, H16)), ("y2", onnx.TensorProto.INT64, (3,))],
            LNF,
        ),
        (
            "kept_cast_mul",
            "Sqrt(Abs(Transpose(LN))) and 3 * LN",
            _b_kept_cast("mul"),
            X,
            [("y", F16, (6, 2, H16)), ("y2", F16, (2, 6, H16))],
            FUSE_OR("layer-norm", "float16-rounding"),  # ORT rounds after the fused Cast only
        ),
        (
            "kept_cast_output",
            "Sqrt(Abs(Transpose(LN))), LN a graph output",
            _b_kept_cast("output"),
            X,
            [("y", F16, (6, 2, H16)), ("n", F16, (2, 6, H16))],
            FUSE_OR("layer-norm", "float16-rounding"),  # ORT rounds after the fused Cast only
        ),
        (
            "input_shape_reader_source",
            "LN(Transpose(Sqrt(|x| + 1))), Shape(Sqrt(..)) out",
            _b_input_shape_reader("source"),
            X,
            [*Y, ("y2", onnx.TensorProto.INT64, (3,))],
            LNF,
        ),
        (
            "input_shape_reader_moved",
            "LN(Transpose(Sqrt(|x| + 1))), Shape(Transpose) out",
            _b_input_shape_reader("moved"),
            X,
            [*Y, ("y2", onnx.TensorProto.INT64, (3,))],
            LNF,
        ),
        (
            "moved_input_is_output",
            "Transpose(x) is a graph output; RMS result also Identity'd out",
            _b_input_is_output,
            X,
            [*Y, ("t", F16, (6, 2, H16)), *y2t],
            RMSF,
        ),
    ]
    for name, statement, fn, inputs, outputs, expect in items:
        case(f"a7_{name}", "7", statement, _f16_case(fn, inputs, outputs), expect)


for _group in (
    _feature1,
    _feature2,
    _feature3,
    _feature4,
    _feature5,
    _feature6,
    _overridable_cases,
    _gn_decomposed_cases,
    _feature7,
):
    _group()


def main(argv=None) -> None:
    """`python -m corpora.adversarial_6 --save NAME FOLDER` writes the case as NAME.onnx and its
    random feeds as NAME.npz; `--list` prints every case."""
    import argparse
    from pathlib import Path

    from corpora.adversarial import feed_sets

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--save", nargs=2, metavar=("NAME", "FOLDER"))
    args = parser.parse_args(argv)
    if args.list:
        for c in CASES:
            print(f"{c.name:52s} {c.feature} {c.expect.outcome:5s} {c.statement}")
    if args.save:
        name, folder = args.save
        c = next(c for c in CASES if c.name == name)
        m = c.build()
        path = Path(folder) / f"{name}.onnx"
        onnx.save(m, path)
        np.savez(Path(folder) / f"{name}.npz", **dict(feed_sets(m, ({},), {}, name))["random"])
        print(path)


if __name__ == "__main__":
    main()
