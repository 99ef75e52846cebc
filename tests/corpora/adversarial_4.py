"""Adversarial corpus, fourth helper: this round's features (`--target onnx` opset raises and
their adapters, float16 norms as the float32 kernel between Casts, weights staying in their
scope, the output guard's per-site rollback).

Unlike the first two corpora these cases need checks the shared harness does not make
(`onnx.checker` full_check on the `--target onnx` output, initializers kept in their scopes, the
file not grown, the float64 distance ratio of float16 norms), so they run in their own test,
`tests/test_adversarial_4.py`. Each case declares its expected outcome with the corpus's
`Expect` (`FUSE`/`KEEP`/`EITHER`) and the configurations it runs in. Cases normfuse gets wrong
carry a finding id (`ADV4-NN`, described in `docs/limitations.md`) in `FINDINGS`; the
test marks them xfail(strict=True) in exactly the configurations they fail.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper

from corpora.adversarial import EITHER, FUSE, KEEP, Expect
from corpora.adversarial_build import F16, I64, SHAPE, F, G, body, ln, model, rms, vi

BF16 = TensorProto.BFLOAT16
DYN = ("d0", "d1", "d2")
CONFIGS = {"default": {}, "onnx": {"target": "onnx"}}

# case name -> (finding id, the configurations it fails in).
# ADV4-01..03 (attribute references in functions under the opset raise) and ADV4-04 (external
# scales copied inline) were fixed on main; their cases guard the fixes.
FINDINGS: dict[str, tuple[str, tuple[str, ...]]] = {}


@dataclass(frozen=True)
class Case4:
    """One case. `feature`: 1 opset raise, 2 float16, 3 weight placement, 4 guard/rollback;
    `configs`: the configurations it runs in; `fixed`: feeds of non-float inputs;
    `f64_ratio`: check the fused model is no further from float64 than the original (x1.10);
    `external`: optimise it from a file whose weights are external data."""

    name: str
    feature: str
    statement: str
    build: Callable[[], onnx.ModelProto]
    expect: Expect
    configs: tuple[str, ...] = ("default", "onnx")
    fixed: dict = field(default_factory=dict)
    overrides: dict = field(default_factory=dict)
    f64_ratio: bool = False
    external: bool = False


CASES: list[Case4] = []


def case(name: str, feature: str, statement: str, build, expect: Expect, **kw) -> None:
    assert all(c.name != name for c in CASES), name
    CASES.append(Case4(name, feature, statement, build, expect, **kw))


# ---------------------------------------------------------------- feature 1: opset raise


def _rms_plus(extra: Callable[[G], tuple[list, list]], opset: int = 17, kind: str = "rms"):
    """x -> a norm -> y, plus a side computation `extra(g)` returning extra (inputs, outputs)
    specs; the side nodes survive the rewrite, so a raise must keep their meaning."""

    def build():
        g = G(opset=opset)
        (rms if kind == "rms" else ln)(g, "x", out="y")
        ins, outs = extra(g)
        return model(g, [("x", F, SHAPE), *ins], [("y", F, SHAPE), *outs])

    return build


def _reduce(op: str, axes, keepdims: int = 1, out_shape=None, attr_axes: bool = True):
    def extra(g: G):
        attrs = {"keepdims": keepdims}
        if axes is not None:
            attrs["axes"] = list(axes)
        g.nodes.append(helper.make_node(op, ["x"], ["r"], name=g.fresh(op), **attrs))
        return [], [("r", F, out_shape)]

    return extra


def _raise_reduce_cases() -> None:
    items = [
        ("reducemax_axes_1", "ReduceMax", [1], 1, (2, 1, 16)),
        ("reducemax_negative_axes", "ReduceMax", [-2], 1, (2, 1, 16)),
        ("reducemin_keepdims0_two_axes", "ReduceMin", [0, -1], 0, (5,)),
        ("reducemean_keepdims0", "ReduceMean", [-1], 0, (2, 5)),
        ("reducel1_axes", "ReduceL1", [2], 1, (2, 5, 1)),
        ("reducel2_no_axes_reduces_all", "ReduceL2", None, 1, (1, 1, 1)),
        ("reducel2_no_axes_keepdims0", "ReduceL2", None, 0, ()),
        ("reducelogsum_axes", "ReduceLogSum", [1, 2], 1, (2, 1, 1)),
        ("reducelogsumexp_axes", "ReduceLogSumExp", [-1], 1, (2, 5, 1)),
        ("reduceprod_axes_unsorted", "ReduceProd", [2, 0], 1, (1, 5, 1)),
        ("reducesumsquare_axes", "ReduceSumSquare", [-3], 0, (5, 16)),
        ("reducemean_all_axes_listed", "ReduceMean", [0, 1, 2], 0, ()),
    ]
    for name, op, axes, keepdims, shape in items:
        case(
            f"a4_raise_{name}",
            "1",
            f"opset 17 RMS norm (raise to 23) beside {op}-13 axes={axes} keepdims={keepdims}",
            _rms_plus(_reduce(op, axes, keepdims, shape)),
            FUSE("rms-norm"),
        )
    case(
        "a4_raise_reducemax_opset16_ln_only",
        "1",
        "opset 16 layer norm (raise to 17 only) beside ReduceMax-13 with axes",
        _rms_plus(_reduce("ReduceMax", [1], 1, (2, 1, 16)), opset=16, kind="ln"),
        FUSE("layer-norm"),
    )
    case(
        "a4_raise_reducemax_int_input",
        "1",
        "ReduceMax-13 with axes on an int64 input beside an RMS norm at 17",
        _int_reduce,
        FUSE("rms-norm"),
        fixed={"ids": np.arange(10, dtype=np.int64).reshape(2, 5)},
    )


def _int_reduce() -> onnx.ModelProto:
    g = G(opset=17)
    rms(g, "x", out="y")
    g.op("ReduceMax", ["ids"], "r", axes=[-1], keepdims=0)
    return model(g, [("x", F, SHAPE), ("ids", I64, (2, 5))], [("y", F, SHAPE), ("r", I64, (2,))])


def _split(n: int, axis: int, split: list | None = None, dim=16):
    def extra(g: G):
        inputs = ["x"]
        if split is not None:
            inputs.append(g.init(split, g.fresh("split"), np.int64))
        outs = [f"s{i}" for i in range(n)]
        g.nodes.append(helper.make_node("Split", inputs, outs, name=g.fresh("Split"), axis=axis))
        sizes = split or [dim // n] * n
        shape = list(SHAPE)
        specs = []
        for i, size in enumerate(sizes):
            shape[axis] = size
            specs.append((outs[i], F, tuple(shape)))
        return [], specs

    return extra


def _raise_split_cases() -> None:
    for name, extra in (
        ("split_even_last_axis", _split(2, -1)),
        ("split_even_four", _split(4, 2)),
        ("split_uneven_split_input", _split(2, -1, [4, 12])),
        ("split_even_sizes_given", _split(2, -1, [8, 8])),
        ("split_single_output", _split(1, 1, dim=5)),
        ("split_axis1_five", _split(5, 1, dim=5)),
    ):
        case(
            f"a4_raise_{name}",
            "1",
            f"opset 17 RMS norm (raise to 23) beside Split-13 {name}",
            _rms_plus(extra),
            FUSE("rms-norm"),
        )


def _roialign(mode_attr: dict, opset: int = 15):
    def extra(g: G):
        rois = g.init(np.array([[0.5, 0.5, 3.2, 3.7], [0.0, 1.0, 4.0, 4.0]]), g.fresh("rois"))
        idx = g.init(np.array([0, 1]), g.fresh("bi"), np.int64)
        g.nodes.append(
            helper.make_node(
                "RoiAlign",
                ["img", rois, idx],
                ["roi"],
                name=g.fresh("RoiAlign"),
                output_height=2,
                output_width=2,
                sampling_ratio=2,
                **mode_attr,
            )
        )
        return [("img", F, (2, 3, 6, 6))], [("roi", F, (2, 3, 2, 2))]

    return _rms_plus(extra, opset=opset, kind="ln")


def _gridsample(attrs: dict):
    def extra(g: G):
        g.nodes.append(
            helper.make_node("GridSample", ["img", "grid"], ["gs"], name=g.fresh("GS"), **attrs)
        )
        return [("img", F, (1, 2, 5, 5)), ("grid", F, (1, 3, 3, 2))], [("gs", F, (1, 2, 3, 3))]

    return _rms_plus(extra)


def _dft(attrs: dict, length: int | None = None, shape_out=(1, 8, 2)):
    def extra(g: G):
        inputs = ["sig"]
        if length is not None:
            inputs.append(g.init(np.array(length), g.fresh("len"), np.int64))
        g.nodes.append(helper.make_node("DFT", inputs, ["spec"], name=g.fresh("DFT"), **attrs))
        return [("sig", F, (1, 8, 1) if "inverse" not in attrs else (1, 8, 2))], [
            ("spec", F, shape_out)
        ]

    return _rms_plus(extra)


def _raise_other_cases() -> None:
    for name, attrs in (
        ("roialign_default_mode", {}),
        ("roialign_max_mode", {"mode": "max"}),
        ("roialign_spatial_scale", {"spatial_scale": 0.5}),
    ):
        case(
            f"a4_raise_{name}_opset15",
            "1",
            f"opset 15 layer norm (raise to 17) beside RoiAlign-10 {attrs}",
            _roialign(attrs),
            FUSE("layer-norm"),
        )
    for name, attrs in (
        ("gridsample_default", {}),
        ("gridsample_bilinear_align", {"mode": "bilinear", "align_corners": 1}),
        ("gridsample_bicubic_border", {"mode": "bicubic", "padding_mode": "border"}),
        ("gridsample_nearest_reflection", {"mode": "nearest", "padding_mode": "reflection"}),
    ):
        case(
            f"a4_raise_{name}",
            "1",
            f"opset 17 RMS norm (raise to 23) beside GridSample-16 {attrs}",
            _gridsample(attrs),
            FUSE("rms-norm"),
        )
    for name, attrs, length, out in (
        ("dft_default_axis", {}, None, (1, 8, 2)),
        ("dft_onesided", {"onesided": 1}, None, (1, 5, 2)),
        ("dft_inverse", {"inverse": 1}, None, (1, 8, 2)),
        ("dft_length_input", {}, 4, (1, 4, 2)),
    ):
        case(
            f"a4_raise_{name}",
            "1",
            f"opset 17 RMS norm (raise to 23) beside DFT-17 {attrs} length={length}",
            _dft(attrs, length, out),
            FUSE("rms-norm"),
        )
    case(
        "a4_raise_refused_maxpool_ceil",
        "1",
        "MaxPool ceil_mode=1 survives: the raise to 23 is refused, the RMS norm kept",
        _rms_plus(_pool("MaxPool", 1)),
        FUSE("rms-norm"),
        configs=("default",),
    )
    case(
        "a4_raise_refused_maxpool_ceil_onnx",
        "1",
        "MaxPool ceil_mode=1 survives: under --target onnx the RMS norm says opset-too-low",
        _rms_plus(_pool("MaxPool", 1)),
        KEEP("opset-too-low"),
        configs=("onnx",),
    )
    case(
        "a4_raise_maxpool_floor_allowed",
        "1",
        "MaxPool ceil_mode=0 does not block the raise to 23",
        _rms_plus(_pool("MaxPool", 0)),
        FUSE("rms-norm"),
    )
    case(
        "a4_raise_ln_and_rms_maxpool_ceil",
        "1",
        "LN + RMS at 17 with a MaxPool ceil_mode=1: the layer norm still fuses at 17",
        _ln_rms_pool,
        FUSE("layer-norm"),
    )
    case(
        "a4_raise_quantize_linear",
        "1",
        "Quantize/DequantizeLinear-13 beside an RMS norm at 17 (raise to 23)",
        _rms_plus(_qdq),
        FUSE("rms-norm"),
    )
    case(
        "a4_raise_scatternd_opset15",
        "1",
        "ScatterND-13 beside a layer norm at 15 (raise to 17: reduction attribute added)",
        _rms_plus(_scatternd, opset=15, kind="ln"),
        FUSE("layer-norm"),
    )


def _pool(op: str, ceil: int):
    def extra(g: G):
        g.nodes.append(
            helper.make_node(
                op, ["p"], ["po"], name=g.fresh(op), kernel_shape=[2], strides=[2], ceil_mode=ceil
            )
        )
        return [("p", F, (2, 3, 5))], [("po", F, (2, 3, 3 if ceil else 2))]

    return extra


def _ln_rms_pool() -> onnx.ModelProto:
    g = G(opset=17)
    ln(g, "x", out="y")
    rms(g, "x", out="y2")
    _pool("MaxPool", 1)(g)
    return model(
        g,
        [("x", F, SHAPE), ("p", F, (2, 3, 5))],
        [("y", F, SHAPE), ("y2", F, SHAPE), ("po", F, (2, 3, 3))],
    )


def _qdq(g: G):
    s = g.init(np.float32(0.05), g.fresh("qs"))
    z = g.init(np.int8(3), g.fresh("qz"), np.int8)
    q = g.op("QuantizeLinear", ["x", s, z])
    g.op("DequantizeLinear", [q, s, z], "dq")
    return [], [("dq", F, SHAPE)]


def _scatternd(g: G):
    idx = g.init(np.array([[0, 1], [1, 3]]), g.fresh("idx"), np.int64)
    upd = g.init(np.ones((2, 16)), g.fresh("upd"))
    g.op("ScatterND", ["x", idx, upd], "sc")
    return [], [("sc", F, SHAPE)]


# nodes in bodies and functions


def _if_reduce_in_branch() -> onnx.ModelProto:
    g = G(opset=17)
    rms(g, "x", out="y")
    then_g = G("t_", opset=17)
    then_g.op("ReduceMax", ["x"], "t_out", axes=[-1], keepdims=1)
    else_g = G("e_", opset=17)
    else_g.op("ReduceMin", ["x"], "e_out", axes=[-1], keepdims=1)
    spec = [("out", F, (2, 5, 1))]
    g.nodes.append(
        helper.make_node(
            "If",
            ["c"],
            ["r"],
            then_branch=body(then_g, [], [("t_out", F, (2, 5, 1))]),
            else_branch=body(else_g, [], [("e_out", F, (2, 5, 1))]),
        )
    )
    del spec
    return model(
        g, [("x", F, SHAPE), ("c", TensorProto.BOOL, ())], [("y", F, SHAPE), ("r", F, (2, 5, 1))]
    )


def _if_rms_and_split_in_branch() -> onnx.ModelProto:
    g = G(opset=17)
    then_g = G("t_", opset=17)
    rms(then_g, "x", out="t_y")
    then_g.nodes.append(helper.make_node("Split", ["t_y"], ["t_a", "t_b"], axis=-1))
    else_g = G("e_", opset=17)
    else_g.nodes.append(helper.make_node("Split", ["x"], ["e_a", "e_b"], axis=-1))
    half = (2, 5, 8)
    g.nodes.append(
        helper.make_node(
            "If",
            ["c"],
            ["a", "b"],
            then_branch=body(then_g, [], [("t_a", F, half), ("t_b", F, half)]),
            else_branch=body(else_g, [], [("e_a", F, half), ("e_b", F, half)]),
        )
    )
    return model(
        g, [("x", F, SHAPE), ("c", TensorProto.BOOL, ())], [("a", F, half), ("b", F, half)]
    )


def _loop_reduce() -> onnx.ModelProto:
    g = G(opset=17)
    rms(g, "x", out="y")
    b = G("l_", opset=17)
    b.op("ReduceMax", ["l_s"], "l_m", axes=[1], keepdims=1)
    b.op("Add", ["l_s", "l_m"], "l_s2")
    b.op("Identity", ["l_cond"], "l_cond2")
    trip = g.init(np.array(3), "trip", np.int64)
    loop_body = body(
        b,
        [("l_i", I64, ()), ("l_cond", TensorProto.BOOL, ()), ("l_s", F, SHAPE)],
        [("l_cond2", TensorProto.BOOL, ()), ("l_s2", F, SHAPE)],
    )
    cond = g.init(np.array(True), "cond", np.bool_)
    g.nodes.append(helper.make_node("Loop", [trip, cond, "x"], ["ls"], body=loop_body))
    return model(g, [("x", F, SHAPE)], [("y", F, SHAPE), ("ls", F, SHAPE)])


def _scan_reduce_and_norm() -> onnx.ModelProto:
    g = G(opset=17)
    b = G("s_", opset=17)
    rms(b, "s_x", out="s_y", shape=(5, 16))
    b.op("ReduceMax", ["s_y"], "s_m", axes=[0], keepdims=0)
    scan_body = body(b, [("s_x", F, (5, 16))], [("s_y", F, (5, 16)), ("s_m", F, (16,))])
    g.nodes.append(helper.make_node("Scan", ["x"], ["y", "m"], body=scan_body, num_scan_inputs=1))
    return model(g, [("x", F, SHAPE)], [("y", F, SHAPE), ("m", F, (2, 16))])


def _nested_if_in_loop_split() -> onnx.ModelProto:
    g = G(opset=17)
    rms(g, "x", out="y")
    inner_t = G("it_", opset=17)
    inner_t.nodes.append(helper.make_node("Split", ["l_s"], ["it_a", "it_b"], axis=-1))
    inner_t.op("Concat", ["it_b", "it_a"], "it_o", axis=-1)
    inner_e = G("ie_", opset=17)
    inner_e.op("ReduceMean", ["l_s"], "ie_m", axes=[-1], keepdims=1)
    inner_e.op("Sub", ["l_s", "ie_m"], "ie_o")
    b = G("l_", opset=17)
    b.nodes.append(
        helper.make_node(
            "If",
            ["c"],
            ["l_s2"],
            then_branch=body(inner_t, [], [("it_o", F, SHAPE)]),
            else_branch=body(inner_e, [], [("ie_o", F, SHAPE)]),
        )
    )
    b.op("Identity", ["l_cond"], "l_cond2")
    trip = g.init(np.array(2), "trip", np.int64)
    cond = g.init(np.array(True), "cond", np.bool_)
    loop_body = body(
        b,
        [("l_i", I64, ()), ("l_cond", TensorProto.BOOL, ()), ("l_s", F, SHAPE)],
        [("l_cond2", TensorProto.BOOL, ()), ("l_s2", F, SHAPE)],
    )
    g.nodes.append(helper.make_node("Loop", [trip, cond, "x"], ["ls"], body=loop_body))
    return model(
        g, [("x", F, SHAPE), ("c", TensorProto.BOOL, ())], [("y", F, SHAPE), ("ls", F, SHAPE)]
    )


def _function_nodes(g: G) -> list[onnx.NodeProto]:
    """`g`'s nodes with its initializers as Constant nodes (a function holds no initializer)."""
    consts = [helper.make_node("Constant", [], [t.name], value=t) for t in g.inits]
    return consts + g.nodes


def _function_model(fn_nodes, fn_inputs, fn_outputs, attributes=(), call_attrs=None, norm=True):
    g = G(opset=17)
    if norm:
        rms(g, "x", out="y")
    fn = helper.make_function(
        "local",
        "fn",
        fn_inputs,
        fn_outputs,
        fn_nodes,
        [helper.make_opsetid("", 17)],
        attributes=list(attributes),
    )
    g.nodes.append(helper.make_node("fn", ["x"], ["fo"], domain="local", **(call_attrs or {})))
    outs = [("y", F, SHAPE)] if norm else []
    return g, fn, outs


def _function_reduce() -> onnx.ModelProto:
    nodes = [helper.make_node("ReduceMax", ["a"], ["b"], axes=[-1], keepdims=1)]
    g, fn, outs = _function_model(nodes, ["a"], ["b"])
    return model(
        g, [("x", F, SHAPE)], [*outs, ("fo", F, (2, 5, 1))], functions=[fn], opsets={"local": 1}
    )


def _function_reduce_attr_ref() -> onnx.ModelProto:
    reduce = helper.make_node("ReduceMax", ["a"], ["b"], keepdims=1)
    ref = onnx.AttributeProto()
    ref.name = "axes"
    ref.ref_attr_name = "ax"
    ref.type = onnx.AttributeProto.INTS
    reduce.attribute.append(ref)
    g, fn, outs = _function_model([reduce], ["a"], ["b"], attributes=["ax"], call_attrs={"ax": [1]})
    return model(
        g, [("x", F, SHAPE)], [*outs, ("fo", F, (2, 1, 16))], functions=[fn], opsets={"local": 1}
    )


def _function_reduce_attr_ref_broadcast() -> onnx.ModelProto:
    """ReduceMax(axes=@ax) in a function, its result broadcast back onto x: a reduce over all
    axes instead of @ax gives the same graph output shape and other values."""
    reduce = helper.make_node("ReduceMax", ["a"], ["b"], keepdims=1)
    ref = onnx.AttributeProto()
    ref.name = "axes"
    ref.ref_attr_name = "ax"
    ref.type = onnx.AttributeProto.INTS
    reduce.attribute.append(ref)
    g, fn, outs = _function_model([reduce], ["a"], ["b"], attributes=["ax"], call_attrs={"ax": [2]})
    g.op("Sub", ["x", "fo"], "centred")
    return model(
        g, [("x", F, SHAPE)], [*outs, ("centred", F, SHAPE)], functions=[fn], opsets={"local": 1}
    )


def _ref(name: str, ref: str, kind: int) -> onnx.AttributeProto:
    attr = onnx.AttributeProto()
    attr.name, attr.ref_attr_name, attr.type = name, ref, kind
    return attr


def _fn_ref(op: str, inputs, attrs: dict, refs: dict, call: dict, ins, outs, defaults=()):
    """x -> RMS norm -> y, plus `op` inside a local function whose attributes `refs` (name ->
    (function attribute, type)) are references, called on `ins` with `call` attribute values."""

    def build():
        node = helper.make_node(op, [f"a{i}" for i in range(len(inputs))], ["b"], **attrs)
        node.attribute.extend(_ref(n, r, t) for n, (r, t) in refs.items())
        names = [r for r, _ in refs.values()]
        plain = [n for n in names if n not in {d.name for d in defaults}]
        g = G(opset=17)
        rms(g, "x", out="y")
        fn = helper.make_function(
            "local",
            "fn",
            [f"a{i}" for i in range(len(inputs))],
            ["b"],
            [node],
            [helper.make_opsetid("", 17)],
            attributes=plain,
            attribute_protos=list(defaults),
        )
        g.nodes.append(helper.make_node("fn", list(inputs), ["fo"], domain="local", **call))
        return model(
            g,
            [("x", F, SHAPE), *ins],
            [("y", F, SHAPE), *outs],
            functions=[fn],
            opsets={"local": 1},
        )

    return build


def _function_if_body_attr_ref() -> onnx.ModelProto:
    """fn(a, c) = If(c, then: a - ReduceMax(a, axes=@ax), else: a): the reference sits in a
    branch inside the function body."""
    reduce = helper.make_node("ReduceMax", ["a"], ["t_m"], keepdims=1)
    reduce.attribute.append(_ref("axes", "ax", onnx.AttributeProto.INTS))
    then_g = helper.make_graph(
        [reduce, helper.make_node("Sub", ["a", "t_m"], ["t_o"])], "then", [], [vi("t_o", F, None)]
    )
    else_g = helper.make_graph(
        [helper.make_node("Identity", ["a"], ["e_o"])], "else", [], [vi("e_o", F, None)]
    )
    node = helper.make_node("If", ["c"], ["b"], then_branch=then_g, else_branch=else_g)
    fn = helper.make_function(
        "local", "fn", ["a", "c"], ["b"], [node], [helper.make_opsetid("", 17)], attributes=["ax"]
    )
    g = G(opset=17)
    rms(g, "x", out="y")
    g.nodes.append(helper.make_node("fn", ["x", "c"], ["fo"], domain="local", ax=[2]))
    return model(
        g,
        [("x", F, SHAPE), ("c", TensorProto.BOOL, ())],
        [("y", F, SHAPE), ("fo", F, SHAPE)],
        functions=[fn],
        opsets={"local": 1},
    )


def _nested_function_attr_ref() -> onnx.ModelProto:
    """outer(a) calls inner(a) with ax=@ax2; inner's ReduceMax reads axes=@ax; broadcast back."""
    reduce = helper.make_node("ReduceMax", ["a"], ["m"], keepdims=1)
    reduce.attribute.append(_ref("axes", "ax", onnx.AttributeProto.INTS))
    inner = helper.make_function(
        "local",
        "inner",
        ["a"],
        ["b"],
        [reduce, helper.make_node("Sub", ["a", "m"], ["b"])],
        [helper.make_opsetid("", 17)],
        attributes=["ax"],
    )
    call = helper.make_node("inner", ["a"], ["b"], domain="local")
    call.attribute.append(_ref("ax", "ax2", onnx.AttributeProto.INTS))
    outer = helper.make_function(
        "local",
        "outer",
        ["a"],
        ["b"],
        [call],
        [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
        attributes=["ax2"],
    )
    g = G(opset=17)
    rms(g, "x", out="y")
    g.nodes.append(helper.make_node("outer", ["x"], ["fo"], domain="local", ax2=[1]))
    return model(
        g,
        [("x", F, SHAPE)],
        [("y", F, SHAPE), ("fo", F, SHAPE)],
        functions=[inner, outer],
        opsets={"local": 1},
    )


def _function_split() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Split", ["a"], ["p", "q"], axis=-1),
        helper.make_node("Sub", ["p", "q"], ["b"]),
    ]
    g, fn, outs = _function_model(nodes, ["a"], ["b"])
    return model(
        g, [("x", F, SHAPE)], [*outs, ("fo", F, (2, 5, 8))], functions=[fn], opsets={"local": 1}
    )


def _function_with_norm_and_reduce() -> onnx.ModelProto:
    fg = G("f_", opset=17)
    rms(fg, "a", out="n", gamma=None)
    fg.op("ReduceMax", ["n"], "b", axes=[-1], keepdims=1)
    g, fn, _ = _function_model(_function_nodes(fg), ["a"], ["b"], norm=False)
    return model(g, [("x", F, SHAPE)], [("fo", F, (2, 5, 1))], functions=[fn], opsets={"local": 1})


def _function_ref_cases() -> None:
    ints, string, integer = (
        onnx.AttributeProto.INTS,
        onnx.AttributeProto.STRING,
        onnx.AttributeProto.INT,
    )
    img, grid = ("img", F, (1, 2, 5, 5)), ("grid", F, (1, 3, 3, 2))
    default_axes = helper.make_attribute("ax", [1])
    items = [
        (
            "gridsample_mode_ref_bilinear",
            _fn_ref(
                "GridSample",
                ["img", "grid"],
                {},
                {"mode": ("m", string)},
                {"m": "bilinear"},
                [img, grid],
                [("fo", F, (1, 2, 3, 3))],
            ),
            KEEP("opset-too-low"),
        ),
        (
            "gridsample_mode_ref_bicubic",
            _fn_ref(
                "GridSample",
                ["img", "grid"],
                {},
                {"mode": ("m", string)},
                {"m": "bicubic"},
                [img, grid],
                [("fo", F, (1, 2, 3, 3))],
            ),
            KEEP("opset-too-low"),
        ),
        (
            "dft_axis_ref",
            _fn_ref(
                "DFT",
                ["sig"],
                {},
                {"axis": ("ax", integer)},
                {"ax": 2},
                [("sig", F, (1, 4, 6, 1))],
                [("fo", F, (1, 4, 6, 2))],
            ),
            EITHER,
        ),
        (
            "reducemax_axes_ref_default",
            _fn_ref(
                "ReduceMax",
                ["x"],
                {"keepdims": 1},
                {"axes": ("ax", ints)},
                {},
                [],
                [("fo", F, (2, 1, 16))],
                defaults=[default_axes],
            ),
            EITHER,
        ),
        (
            "reducel2_keepdims_ref",
            _fn_ref(
                "ReduceL2",
                ["x"],
                {"axes": [1]},
                {"keepdims": ("kd", integer)},
                {"kd": 0},
                [],
                [("fo", F, (2, 16))],
            ),
            EITHER,
        ),
        (
            "split_axis_ref",
            _fn_ref(
                "Split",
                ["x"],
                {},
                {"axis": ("ax", integer)},
                {"ax": 1},
                [],
                [("fo", F, (2, 5, 16))],
            ),
            EITHER,
        ),
        (
            "roialign_in_function_opset17",
            _fn_ref(
                "RoiAlign",
                ["img", "rois", "bi"],
                {"output_height": 2, "output_width": 2},
                {},
                {},
                [img, ("rois", F, (1, 4)), ("bi", I64, (1,))],
                [("fo", F, (1, 2, 2, 2))],
            ),
            EITHER,
        ),
        (
            "maxpool_ceil_mode_ref",
            _fn_ref(
                "MaxPool",
                ["p"],
                {"kernel_shape": [2], "strides": [2]},
                {"ceil_mode": ("c", integer)},
                {"c": 1},
                [("p", F, (2, 3, 5))],
                [("fo", F, (2, 3, 3))],
            ),
            KEEP("opset-too-low"),
        ),
        (
            "maxpool_ceil_in_function",
            _fn_ref(
                "MaxPool",
                ["p"],
                {"kernel_shape": [2], "strides": [2], "ceil_mode": 1},
                {},
                {},
                [("p", F, (2, 3, 5))],
                [("fo", F, (2, 3, 3))],
            ),
            KEEP("opset-too-low"),
        ),
        (
            "averagepool_ceil_in_function",
            _fn_ref(
                "AveragePool",
                ["p"],
                {"kernel_shape": [2], "strides": [2], "ceil_mode": 1},
                {},
                {},
                [("p", F, (2, 3, 5))],
                [("fo", F, (2, 3, 3))],
            ),
            KEEP("opset-too-low"),
        ),
    ]
    fixed = {
        "roialign_in_function_opset17": {
            "rois": np.array([[0.5, 0.5, 3.2, 3.7]], np.float32),
            "bi": np.array([0], np.int64),
        },
    }
    for name, build, expect in items:
        case(
            f"a4_raise_fn_{name}",
            "1",
            f"a local function at the model's opset, attribute references: {name}",
            build,
            expect,
            configs=("onnx",) if expect.outcome == "keep" else ("default", "onnx"),
            fixed=fixed.get(name, {}),
        )
    case(
        "a4_raise_maxpool_ceil_in_if_branch",
        "1",
        "MaxPool ceil_mode=1 inside an If branch blocks the raise to 23 like one in the graph",
        _maxpool_in_branch,
        KEEP("opset-too-low"),
        configs=("onnx",),
        fixed={"c": np.array(True)},
    )


def _maxpool_in_branch() -> onnx.ModelProto:
    g = G(opset=17)
    rms(g, "x", out="y")
    tg = G("t_", opset=17)
    tg.op("MaxPool", ["p"], "t_o", kernel_shape=[2], strides=[2], ceil_mode=1)
    eg = G("e_", opset=17)
    eg.op("MaxPool", ["p"], "e_o", kernel_shape=[2], strides=[2], ceil_mode=0, pads=[0, 1])
    po = (2, 3, 3)
    g.nodes.append(
        helper.make_node(
            "If",
            ["c"],
            ["po"],
            then_branch=body(tg, [], [("t_o", F, po)]),
            else_branch=body(eg, [], [("e_o", F, po)]),
        )
    )
    return model(
        g,
        [("x", F, SHAPE), ("p", F, (2, 3, 5)), ("c", TensorProto.BOOL, ())],
        [("y", F, SHAPE), ("po", F, po)],
    )


def _raise_scope_cases() -> None:
    items = [
        ("if_reduce_in_branches", _if_reduce_in_branch, FUSE("rms-norm"), {"c": np.array(True)}),
        (
            "if_rms_and_split_in_branch",
            _if_rms_and_split_in_branch,
            FUSE("rms-norm"),
            {"c": np.array(True)},
        ),
        ("loop_reduce_in_body", _loop_reduce, FUSE("rms-norm"), {}),
        ("scan_reduce_and_norm_in_body", _scan_reduce_and_norm, FUSE("rms-norm"), {}),
        (
            "nested_if_in_loop_split_reduce",
            _nested_if_in_loop_split,
            FUSE("rms-norm"),
            {"c": np.array(False)},
        ),
        ("function_reduce_axes", _function_reduce, FUSE("rms-norm"), {}),
        ("function_reduce_axes_attribute_ref", _function_reduce_attr_ref, EITHER, {}),
        ("function_reduce_attr_ref_broadcast", _function_reduce_attr_ref_broadcast, EITHER, {}),
        ("function_if_body_attr_ref", _function_if_body_attr_ref, EITHER, {"c": np.array(True)}),
        ("nested_function_attr_ref", _nested_function_attr_ref, EITHER, {}),
        ("function_split_even", _function_split, FUSE("rms-norm"), {}),
        ("function_norm_and_reduce", _function_with_norm_and_reduce, FUSE("rms-norm"), {}),
    ]
    for name, build, expect, fixed in items:
        case(
            f"a4_raise_{name}",
            "1",
            f"opset 17, raise to 23 for an RMS norm, adapters in scope: {name}",
            build,
            expect,
            fixed=fixed,
        )


# ---------------------------------------------------------------- feature 2: float16


def _f16_norm(
    kind: str = "rms",
    *,
    opset: int = 18,
    gamma=None,
    affine_after_cast: bool = False,
    gemma: bool = False,
    input_f32: bool = False,
    elem=F16,
    extra_output: bool = False,
):
    """A float16 model whose norm statistics run in float32 between Casts (the exporters'
    spelling): x16 -> Cast(f32) -> norm -> Cast(f16) [-> Mul(weight16)]."""

    def build():
        g = G(opset=opset)
        x32 = "x" if input_f32 else g.op("Cast", ["x"], to=F)
        w = np.linspace(0.5, 1.5, 16) if gamma is None else np.asarray(gamma)
        inner_gamma = None if affine_after_cast else w.astype(np.float32)
        if gemma:
            inner_gamma = g.op("Add", [g.init(np.float32(1.0), "one"), g.init(w - 1.0, "gw")])
        if kind == "rms":
            n = rms(g, x32, gamma=inner_gamma)
        else:
            beta = None if affine_after_cast else np.linspace(-0.5, 0.5, 16).astype(np.float32)
            n = ln(g, x32, gamma=inner_gamma, beta=beta)
        if affine_after_cast:
            c = g.op("Cast", [n], to=elem)
            dtype = np.float16 if elem == F16 else np.float32
            g.op("Mul", [c, g.init(w, "weight", dtype)], "y")
        else:
            g.op("Cast", [n], "y", to=elem)
        outs = [("y", elem, SHAPE)]
        if extra_output:
            g.op("MatMul", ["y", g.init(np.eye(16) * 0.5, "proj", np.float16)], "z")
            outs.append(("z", F16, SHAPE))
        return model(g, [("x", F if input_f32 else elem, SHAPE)], outs)

    return build


def _f16_native(kind: str = "ln", opset: int = 17, gamma_values=None):
    def build():
        g = G(opset=opset, dtype=np.float16)
        gamma = "auto" if gamma_values is None else np.asarray(gamma_values, np.float16)
        (ln if kind == "ln" else rms)(g, "x", out="y", gamma=gamma)
        return model(g, [("x", F16, SHAPE)], [("y", F16, SHAPE)])

    return build


def _bf16_norm() -> onnx.ModelProto:
    """A float32 interface, bfloat16 activations around a norm computed in float32."""
    g = G(opset=18)
    xb = g.op("Cast", ["x"], to=BF16)
    n = rms(g, g.op("Cast", [xb], to=F))
    g.op("Cast", [g.op("Cast", [n], to=BF16)], "y", to=F)
    return model(g, [("x", F, SHAPE)], [("y", F, SHAPE)])


def _float16_cases() -> None:
    inexact = 1.0 + np.linspace(1e-4, 3e-4, 16)
    items = [
        ("rms_cast_inside_opset18", _f16_norm("rms"), FUSE("rms-norm")),
        ("rms_cast_inside_opset17", _f16_norm("rms", opset=17), FUSE("rms-norm")),
        ("ln_cast_inside_opset17", _f16_norm("ln", opset=17), FUSE("layer-norm")),
        ("rms_affine_after_cast", _f16_norm("rms", affine_after_cast=True), FUSE("rms-norm")),
        ("ln_affine_after_cast", _f16_norm("ln", affine_after_cast=True), FUSE("layer-norm")),
        ("rms_gamma_inexact_in_f16", _f16_norm("rms", gamma=inexact), FUSE("rms-norm")),
        ("rms_gemma_one_plus_w", _f16_norm("rms", gemma=True, gamma=inexact), FUSE("rms-norm")),
        ("rms_feeds_output_and_matmul", _f16_norm("rms", extra_output=True), FUSE("rms-norm")),
        ("rms_f32_input_f16_output", _f16_norm("rms", input_f32=True), FUSE("rms-norm")),
        ("ln_native_f16", _f16_native("ln"), FUSE("layer-norm")),
        ("rms_native_f16", _f16_native("rms", opset=18), FUSE("rms-norm")),
        (
            "ln_native_f16_gamma_subnormal",
            _f16_native("ln", gamma_values=np.full(16, 3e-6)),
            EITHER,
        ),
        ("rms_bfloat16_inside_float32_graph", _bf16_norm, KEEP("unsupported-dtype")),
    ]
    for name, build, expect in items:
        case(
            f"a4_f16_{name}",
            "2",
            f"float16: {name.replace('_', ' ')}",
            build,
            expect,
            f64_ratio=True,
        )


# ---------------------------------------------------------------- feature 3: placement


def _if_branches_outer_gamma(
    shared_elsewhere: bool = False,
    overridable: bool = False,
    both_branches: bool = True,
    kind: str = "ln",
):
    def build():
        g = G(opset=17)
        gamma = g.init(np.linspace(0.5, 1.5, 16), "gamma_w")
        beta = g.init(np.linspace(-0.5, 0.5, 16), "beta_w")
        norm = ln if kind == "ln" else rms
        kw = {"gamma": gamma, "beta": beta} if kind == "ln" else {"gamma": gamma}
        tg = G("t_", opset=17)
        norm(tg, "x", out="t_y", **kw)
        eg = G("e_", opset=17)
        if both_branches:
            norm(eg, "x", out="e_y", **kw)
        else:
            eg.op("Mul", ["x", gamma], "e_y")
        g.nodes.append(
            helper.make_node(
                "If",
                ["c"],
                ["y"],
                then_branch=body(tg, [], [("t_y", F, SHAPE)]),
                else_branch=body(eg, [], [("e_y", F, SHAPE)]),
            )
        )
        outs = [("y", F, SHAPE)]
        if shared_elsewhere:
            g.op("Add", ["x", gamma], "z")
            outs.append(("z", F, SHAPE))
        over = ("gamma_w",) if overridable else ()
        return model(g, [("x", F, SHAPE), ("c", TensorProto.BOOL, ())], outs, overridable=over)

    return build


def _loop_outer_gamma() -> onnx.ModelProto:
    g = G(opset=17)
    gamma = g.init(np.linspace(0.5, 1.5, 16), "gamma_w")
    b = G("l_", opset=17)
    rms(b, "l_s", out="l_s2", gamma=gamma)
    b.op("Identity", ["l_cond"], "l_cond2")
    trip = g.init(np.array(2), "trip", np.int64)
    cond = g.init(np.array(True), "cond", np.bool_)
    loop_body = body(
        b,
        [("l_i", I64, ()), ("l_cond", TensorProto.BOOL, ()), ("l_s", F, SHAPE)],
        [("l_cond2", TensorProto.BOOL, ()), ("l_s2", F, SHAPE)],
    )
    g.nodes.append(helper.make_node("Loop", [trip, cond, "x"], ["y"], body=loop_body))
    rms(g, "y", out="y2", gamma=gamma)
    return model(g, [("x", F, SHAPE)], [("y2", F, SHAPE)])


def _scan_outer_gamma() -> onnx.ModelProto:
    g = G(opset=17)
    gamma = g.init(np.linspace(0.5, 1.5, 16), "gamma_w")
    beta = g.init(np.linspace(-0.5, 0.5, 16), "beta_w")
    b = G("s_", opset=17)
    ln(b, "s_x", out="s_y", gamma=gamma, beta=beta, shape=(5, 16))
    scan_body = body(b, [("s_x", F, (5, 16))], [("s_y", F, (5, 16))])
    g.nodes.append(helper.make_node("Scan", ["x"], ["y"], body=scan_body, num_scan_inputs=1))
    return model(g, [("x", F, SHAPE)], [("y", F, SHAPE)])


def _nested_if_outer_gamma() -> onnx.ModelProto:
    g = G(opset=17)
    gamma = g.init(np.linspace(0.5, 1.5, 16), "gamma_w")
    inner_t = G("it_", opset=17)
    rms(inner_t, "x", out="it_y", gamma=gamma)
    inner_e = G("ie_", opset=17)
    inner_e.op("Mul", ["x", gamma], "ie_y")
    outer_t = G("ot_", opset=17)
    outer_t.nodes.append(
        helper.make_node(
            "If",
            ["c2"],
            ["ot_y"],
            then_branch=body(inner_t, [], [("it_y", F, SHAPE)]),
            else_branch=body(inner_e, [], [("ie_y", F, SHAPE)]),
        )
    )
    outer_e = G("oe_", opset=17)
    rms(outer_e, "x", out="oe_y", gamma=gamma)
    g.nodes.append(
        helper.make_node(
            "If",
            ["c"],
            ["y"],
            then_branch=body(outer_t, [], [("ot_y", F, SHAPE)]),
            else_branch=body(outer_e, [], [("oe_y", F, SHAPE)]),
        )
    )
    return model(
        g,
        [("x", F, SHAPE), ("c", TensorProto.BOOL, ()), ("c2", TensorProto.BOOL, ())],
        [("y", F, SHAPE)],
    )


def _body_own_gamma_same_bytes() -> onnx.ModelProto:
    """Main and a branch each hold their own initializer with the same bytes."""
    g = G(opset=17)
    gamma = g.init(np.linspace(0.5, 1.5, 16), "gamma_main")
    rms(g, "x", out="y", gamma=gamma)
    tg = G("t_", opset=17)
    rms(tg, "y", out="t_y", gamma=tg.init(np.linspace(0.5, 1.5, 16), "t_gamma"))
    eg = G("e_", opset=17)
    eg.op("Identity", ["y"], "e_y")
    g.nodes.append(
        helper.make_node(
            "If",
            ["c"],
            ["z"],
            then_branch=body(tg, [], [("t_y", F, SHAPE)]),
            else_branch=body(eg, [], [("e_y", F, SHAPE)]),
        )
    )
    return model(g, [("x", F, SHAPE), ("c", TensorProto.BOOL, ())], [("z", F, SHAPE)])


def _shadowed_gamma() -> onnx.ModelProto:
    g = G(opset=17)
    g.init(np.linspace(0.5, 1.5, 16), "gamma_w")
    g.op("Add", ["x", "gamma_w"], "z")
    tg = G("t_", opset=17)
    rms(tg, "x", out="t_y", gamma=tg.init(np.linspace(2.0, 3.0, 16), "gamma_w"))
    eg = G("e_", opset=17)
    eg.op("Identity", ["x"], "e_y")
    g.nodes.append(
        helper.make_node(
            "If",
            ["c"],
            ["y"],
            then_branch=body(tg, [], [("t_y", F, SHAPE)]),
            else_branch=body(eg, [], [("e_y", F, SHAPE)]),
        )
    )
    return model(
        g, [("x", F, SHAPE), ("c", TensorProto.BOOL, ())], [("y", F, SHAPE), ("z", F, SHAPE)]
    )


def _big_external(kind: str = "rms", in_branch: bool = False, f16: bool = False):
    """Weights of 4096 floats (above the external-data threshold used by the test)."""

    def build():
        g = G(opset=17)
        w = g.init(np.linspace(0.5, 1.5, 4096 * 16).reshape(4096, 16) * 0.01, "embed")
        gamma = g.init(np.linspace(0.5, 1.5, 16), "gamma_w")
        h = g.op("Gather", [w, "ids"])
        if in_branch:
            tg = G("t_", opset=17)
            rms(tg, h, out="t_y", gamma=gamma, shape=(2, 5, 16))
            eg = G("e_", opset=17)
            eg.op("Mul", [h, gamma], "e_y")
            g.nodes.append(
                helper.make_node(
                    "If",
                    ["c"],
                    ["y"],
                    then_branch=body(tg, [], [("t_y", F, SHAPE)]),
                    else_branch=body(eg, [], [("e_y", F, SHAPE)]),
                )
            )
            ins = [("ids", I64, (2, 5)), ("c", TensorProto.BOOL, ())]
        else:
            (rms if kind == "rms" else ln)(g, h, out="y", gamma=gamma)
            ins = [("ids", I64, (2, 5))]
        return model(g, ins, [("y", F, SHAPE)])

    return build


def _wide_external(
    in_branch: bool = False, kind: str = "ln", graph_output: bool = False, overridable=()
):
    """A norm over 1024 features: gamma and beta (4 KiB each) go to external data."""

    def build():
        width = 1024
        shape = (2, 3, width)
        g = G(opset=17)
        gamma = g.init(np.linspace(0.5, 1.5, width), "gamma_w")
        beta = g.init(np.linspace(-0.5, 0.5, width), "beta_w")
        norm = ln if kind == "ln" else rms
        kw = {"gamma": gamma, "beta": beta} if kind == "ln" else {"gamma": gamma}
        outs = [("y", F, shape)]
        if in_branch:
            tg = G("t_", opset=17)
            norm(tg, "x", out="t_y", shape=shape, **kw)
            eg = G("e_", opset=17)
            eg.op("Mul", ["x", gamma], "e_y")
            g.nodes.append(
                helper.make_node(
                    "If",
                    ["c"],
                    ["y"],
                    then_branch=body(tg, [], [("t_y", F, shape)]),
                    else_branch=body(eg, [], [("e_y", F, shape)]),
                )
            )
            ins = [("x", F, shape), ("c", TensorProto.BOOL, ())]
        else:
            norm(g, "x", out="y", shape=shape, **kw)
            ins = [("x", F, shape)]
        if graph_output:
            g.op("Identity", [gamma], "gamma_out")
            outs.append(("gamma_out", F, (width,)))
        return model(g, ins, outs, overridable=overridable)

    return build


def _overridable_main(kind: str = "rms", f16_after_cast: bool = False):
    def build():
        if f16_after_cast:
            m = _f16_norm("rms", affine_after_cast=True)()
            weight = next(t for t in m.graph.initializer if t.name == "weight")
            m.graph.input.append(vi("weight", F16, list(weight.dims)))
            return m
        g = G(opset=17)
        gamma = g.init(np.linspace(0.5, 1.5, 16), "gamma_w")
        beta = g.init(np.linspace(-0.5, 0.5, 16), "beta_w")
        if kind == "rms":
            rms(g, "x", out="y", gamma=gamma)
            over = ("gamma_w",)
        else:
            ln(g, "x", out="y", gamma=gamma, beta=beta)
            over = ("gamma_w", "beta_w")
        return model(g, [("x", F, SHAPE)], [("y", F, SHAPE)], overridable=over)

    return build


def _initializer_is_output() -> onnx.ModelProto:
    g = G(opset=17)
    gamma = g.init(np.linspace(0.5, 1.5, 16), "gamma_w")
    rms(g, "x", out="y", gamma=gamma)
    m = model(g, [("x", F, SHAPE)], [("y", F, SHAPE)])
    m.graph.output.append(vi("gamma_w", F, (16,)))
    return m


def _placement_cases() -> None:
    ids = {"ids": np.array([[0, 1, 2, 3, 4], [4095, 17, 2, 0, 9]], np.int64)}
    items = [
        (
            "if_both_branches_outer_gamma",
            _if_branches_outer_gamma(),
            FUSE("layer-norm", 2),
            {"c": np.array(True)},
            False,
        ),
        (
            "if_both_branches_outer_gamma_rms",
            _if_branches_outer_gamma(kind="rms"),
            FUSE("rms-norm", 2),
            {"c": np.array(False)},
            False,
        ),
        (
            "if_one_branch_norm_other_mul",
            _if_branches_outer_gamma(both_branches=False),
            FUSE("layer-norm"),
            {"c": np.array(True)},
            False,
        ),
        (
            "if_gamma_also_used_in_main",
            _if_branches_outer_gamma(shared_elsewhere=True),
            FUSE("layer-norm", 2),
            {"c": np.array(True)},
            False,
        ),
        (
            "if_gamma_overridable",
            _if_branches_outer_gamma(overridable=True),
            EITHER,
            {"c": np.array(True)},
            False,
        ),
        ("loop_body_and_main_share_gamma", _loop_outer_gamma, FUSE("rms-norm", 2), {}, False),
        ("scan_body_outer_gamma_beta", _scan_outer_gamma, FUSE("layer-norm"), {}, False),
        (
            "nested_if_outer_gamma",
            _nested_if_outer_gamma,
            FUSE("rms-norm", 2),
            {"c": np.array(True), "c2": np.array(True)},
            False,
        ),
        (
            "body_own_gamma_same_bytes",
            _body_own_gamma_same_bytes,
            FUSE("rms-norm", 2),
            {"c": np.array(True)},
            False,
        ),
        (
            "gamma_shadowed_in_branch",
            _shadowed_gamma,
            KEEP("unsupported-scope"),
            {"c": np.array(True)},
            False,
        ),
        ("external_data_main", _big_external(), FUSE("rms-norm"), ids, True),
        ("external_data_ln_main", _big_external("ln"), FUSE("layer-norm"), ids, True),
        (
            "external_data_branch",
            _big_external(in_branch=True),
            FUSE("rms-norm"),
            {**ids, "c": np.array(True)},
            True,
        ),
    ]
    items += [
        ("external_wide_gamma_beta_main", _wide_external(), FUSE("layer-norm"), {}, True),
        ("external_wide_gamma_rms_main", _wide_external(kind="rms"), FUSE("rms-norm"), {}, True),
        (
            "external_wide_gamma_beta_branch",
            _wide_external(in_branch=True),
            FUSE("layer-norm"),
            {"c": np.array(True)},
            True,
        ),
        (
            "external_wide_gamma_also_output",
            _wide_external(graph_output=True),
            FUSE("layer-norm"),
            {},
            True,
        ),
        ("initializer_gamma_is_graph_output", _initializer_is_output, FUSE("rms-norm"), {}, False),
    ]
    rng = np.random.default_rng(11)
    for name, build, over, fixed in (
        (
            "external_overridable_gamma_ln",
            _wide_external(overridable=("gamma_w",)),
            {"gamma_w": rng.uniform(-2, 2, 1024).astype(np.float32)},
            {},
        ),
        (
            "external_overridable_gamma_beta_branch",
            _wide_external(in_branch=True, overridable=("gamma_w", "beta_w")),
            {
                "gamma_w": rng.uniform(-2, 2, 1024).astype(np.float32),
                "beta_w": rng.uniform(-2, 2, 1024).astype(np.float32),
            },
            {"c": np.array(True)},
        ),
    ):
        case(
            f"a4_place_{name}",
            "3",
            f"external data, overridable parameters fed: {name.replace('_', ' ')}",
            build,
            EITHER,
            fixed=fixed,
            overrides=over,
            external=True,
        )
    for name, build, expect, fixed, external in items:
        case(
            f"a4_place_{name}",
            "3",
            f"weights stay where they are: {name.replace('_', ' ')}",
            build,
            expect,
            fixed=fixed,
            external=external,
        )


# ---------------------------------------------------------------- feature 4: guard


def _ceil_pool_norm(g: G, src: str, out: str, prefix: str = "") -> str:
    """MaxPool ceil_mode=1 on [2,3,5] (k=2, s=2, pads 1,1): onnx infers 4, ORT computes 3; an
    affine-free layer norm over that axis (the fused node needs a ones-scale of that size)."""
    pooled = g.op("MaxPool", [src], kernel_shape=[2], strides=[2], pads=[1, 1], ceil_mode=1)
    ln(g, pooled, out=out, gamma=None, beta=None, shape=(2, 3, 3))
    del prefix
    return out


def _guard_one() -> onnx.ModelProto:
    g = G(opset=17)
    _ceil_pool_norm(g, "p", "y")
    ln(g, "x", out="y2")
    return model(g, [("p", F, (2, 3, 5)), ("x", F, SHAPE)], [("y", F, DYN), ("y2", F, SHAPE)])


def _guard_many() -> onnx.ModelProto:
    g = G(opset=17)
    _ceil_pool_norm(g, "p", "y")
    _ceil_pool_norm(g, "p", "y3")
    rms(g, "x", out="y2")
    ln(g, "x", out="y4")
    return model(
        g,
        [("p", F, (2, 3, 5)), ("x", F, SHAPE)],
        [("y", F, DYN), ("y2", F, SHAPE), ("y3", F, DYN), ("y4", F, SHAPE)],
    )


def _guard_in_function() -> onnx.ModelProto:
    fg = G("f_", opset=17)
    _ceil_pool_norm(fg, "a", "b")
    fn = helper.make_function(
        "local", "fn", ["a"], ["b"], _function_nodes(fg), [helper.make_opsetid("", 17)]
    )
    g = G(opset=17)
    g.nodes.append(helper.make_node("fn", ["p"], ["y"], domain="local"))
    ln(g, "x", out="y2")
    return model(
        g,
        [("p", F, (2, 3, 5)), ("x", F, SHAPE)],
        [("y", F, DYN), ("y2", F, SHAPE)],
        functions=[fn],
        opsets={"local": 1},
    )


def _convtranspose_norm() -> onnx.ModelProto:
    """ConvTranspose SAME_UPPER with output_padding: onnx 11, ORT 10, normalised axis last."""
    g = G(opset=17)
    w = g.init(np.full((1, 1, 3), 0.3), "ctw")
    ct = g.op(
        "ConvTranspose",
        ["p", w],
        kernel_shape=[3],
        strides=[2],
        auto_pad="SAME_UPPER",
        output_padding=[1],
    )
    ln(g, ct, out="y", gamma=None, beta=None, shape=(1, 1, 10))
    ln(g, "x", out="y2")
    return model(g, [("p", F, (1, 1, 5)), ("x", F, SHAPE)], [("y", F, DYN), ("y2", F, SHAPE)])


def _guard_ok_pool_gamma_free_rms() -> onnx.ModelProto:
    g = G(opset=17)
    pooled = g.op("MaxPool", ["p"], kernel_shape=[2], strides=[2], pads=[1, 1], ceil_mode=1)
    rms(g, pooled, out="y", gamma=None, shape=(2, 3, 3))
    return model(g, [("p", F, (2, 3, 5))], [("y", F, DYN)])


def _branch_overridable_constant(which: str):
    """A norm in an If branch whose epsilon (or exponent) is an overridable main initializer."""

    def build():
        g = G(opset=17)
        eps = g.init(np.float32(1e-5), "eps_w")
        two = g.init(np.float32(2.0), "two_w")
        tg = G("t_", opset=17)
        rms(tg, "x", out="t_y", eps=eps, exp=two)
        eg = G("e_", opset=17)
        eg.op("Identity", ["x"], "e_y")
        g.nodes.append(
            helper.make_node(
                "If",
                ["c"],
                ["y"],
                then_branch=body(tg, [], [("t_y", F, SHAPE)]),
                else_branch=body(eg, [], [("e_y", F, SHAPE)]),
            )
        )
        return model(
            g,
            [("x", F, SHAPE), ("c", TensorProto.BOOL, ())],
            [("y", F, SHAPE)],
            overridable=(which,),
        )

    return build


def _override_cases() -> None:
    for name, which, value in (
        ("eps", "eps_w", np.float32(0.5)),
        ("exponent", "two_w", np.float32(3.0)),
    ):
        case(
            f"a4_place_override_branch_{name}",
            "3",
            f"an overridable {name} in the main graph read by a norm in an If branch, fed",
            _branch_overridable_constant(which),
            KEEP(),
            overrides={which: value},
            fixed={"c": np.array(True)},
        )
    rng = np.random.default_rng(7)
    for name, build, expect, overrides, fixed in (
        (
            "rms_main_gamma",
            _overridable_main("rms"),
            EITHER,
            {"gamma_w": rng.uniform(-2, 2, 16).astype(np.float32)},
            {},
        ),
        (
            "ln_main_gamma_beta",
            _overridable_main("ln"),
            EITHER,
            {
                "gamma_w": rng.uniform(-2, 2, 16).astype(np.float32),
                "beta_w": rng.uniform(-2, 2, 16).astype(np.float32),
            },
            {},
        ),
        (
            "f16_weight_after_cast",
            _overridable_main(f16_after_cast=True),
            EITHER,
            {"weight": rng.uniform(-2, 2, 16).astype(np.float16)},
            {},
        ),
        (
            "if_branches_gamma",
            _if_branches_outer_gamma(overridable=True),
            EITHER,
            {"gamma_w": rng.uniform(-2, 2, 16).astype(np.float32)},
            {"c": np.array(True)},
        ),
        (
            "if_branches_gamma_else",
            _if_branches_outer_gamma(overridable=True, kind="rms"),
            EITHER,
            {"gamma_w": rng.uniform(-2, 2, 16).astype(np.float32)},
            {"c": np.array(False)},
        ),
    ):
        case(
            f"a4_place_override_{name}",
            "3",
            f"an overridable initializer read by a fused norm, fed: {name.replace('_', ' ')}",
            build,
            expect,
            overrides=overrides,
            fixed=fixed,
        )


def _range_norm(limit: float, delta: float):
    """An affine-free layer norm over a float Range whose length float32 and float64 count
    differently (0.3 / 0.1: 3 in float32, 4 in float64; onnx and ORT both say 4)."""

    def build():
        g = G(opset=18)
        start = g.init(np.float32(0), "start")
        r = g.op(
            "Range", [start, g.init(np.float32(limit), "limit"), g.init(np.float32(delta), "delta")]
        )
        u = g.op("Unsqueeze", [r, g.init([0, 1], "uaxes", np.int64)])
        a = g.op("Add", [u, g.op("Mul", ["x", g.init(np.float32(0), "zero")])])
        ln(g, a, out="y", gamma=None, beta=None, shape=(1, 1, 1))
        return model(g, [("x", F, (1, 1, 1))], [("y", F, DYN)])

    return build


def _raise_breaks_function_many_sites() -> onnx.ModelProto:
    """Two RMS norms (which ask for 23), a layer norm (17 is enough) and a function whose
    GridSample(mode=@m) the raise cannot express: the rollback must keep the layer norm."""
    m = _fn_ref(
        "GridSample",
        ["img", "grid"],
        {},
        {"mode": ("m", onnx.AttributeProto.STRING)},
        {"m": "bilinear"},
        [("img", F, (1, 2, 5, 5)), ("grid", F, (1, 3, 3, 2))],
        [("fo", F, (1, 2, 3, 3))],
    )()
    g = G("k_", opset=17)
    rms(g, "x", out="y2")
    ln(g, "x", out="y3")
    m.graph.node.extend(g.nodes)
    m.graph.initializer.extend(g.inits)
    m.graph.output.extend([vi("y2", F, SHAPE), vi("y3", F, SHAPE)])
    return m


def _guard_cases() -> None:
    case(
        "a4_guard_raise_rollback_keeps_layer_norm",
        "4",
        "a raise broken by a function node: the RMS norms rolled back, the layer norm kept",
        _raise_breaks_function_many_sites,
        FUSE("layer-norm"),
    )
    for name, build in (
        ("float_range_length_0p3_by_0p1", _range_norm(0.3, 0.1)),
        ("float_range_length_1p1_by_0p1", _range_norm(1.1, 0.1)),
    ):
        case(f"a4_guard_{name}", "4", name.replace("_", " "), build, EITHER)
    items = [
        ("ceil_pool_one_site_plus_good", _guard_one, FUSE("layer-norm"), {}),
        ("ceil_pool_two_sites_plus_two_good", _guard_many, FUSE("layer-norm"), {}),
        ("ceil_pool_site_in_function", _guard_in_function, FUSE("layer-norm"), {}),
        ("convtranspose_same_output_padding", _convtranspose_norm, FUSE("layer-norm"), {}),
        ("ceil_pool_rms_only_site", _guard_ok_pool_gamma_free_rms, EITHER, {}),
    ]
    for name, build, expect, fixed in items:
        case(
            f"a4_guard_{name}",
            "4",
            f"guard: {name.replace('_', ' ')} (onnx infers a dim ORT computes differently)",
            build,
            expect,
            fixed=fixed,
        )


# ---------------------------------------------------------------- more, after the first run


def _f16_two_consumers() -> onnx.ModelProto:
    """The float32 norm output is both cast back to float16 and a float32 graph output."""
    g = G(opset=18)
    x32 = g.op("Cast", ["x"], to=F)
    n = rms(g, x32, gamma=np.linspace(0.5, 1.5, 16).astype(np.float32))
    g.op("Cast", [n], "y", to=F16)
    g.op("Identity", [n], "y32")
    return model(g, [("x", F16, SHAPE)], [("y", F16, SHAPE), ("y32", F, SHAPE)])


def _f16_gamma_cast_inside() -> onnx.ModelProto:
    """Mul(norm32, Cast(gamma16 -> float32)): the weight stored in float16, widened in-graph."""
    g = G(opset=18)
    x32 = g.op("Cast", ["x"], to=F)
    w = g.op("Cast", [g.init(np.linspace(0.5, 1.5, 16), "w16", np.float16)], to=F)
    n = rms(g, x32, gamma=w)
    g.op("Cast", [n], "y", to=F16)
    return model(g, [("x", F16, SHAPE)], [("y", F16, SHAPE)])


def _f16_ln_mul_add_after_cast() -> onnx.ModelProto:
    g = G(opset=18)
    n = ln(g, g.op("Cast", ["x"], to=F), gamma=None, beta=None)
    c = g.op("Cast", [n], to=F16)
    m = g.op("Mul", [c, g.init(np.linspace(0.5, 1.5, 16), "w", np.float16)])
    g.op("Add", [m, g.init(np.linspace(-0.5, 0.5, 16), "b", np.float16)], "y")
    return model(g, [("x", F16, SHAPE)], [("y", F16, SHAPE)])


def _f16_eps_underflows() -> onnx.ModelProto:
    """A native float16 norm whose epsilon 1e-8 is 0 in float16."""
    g = G(opset=17, dtype=np.float16)
    ln(g, "x", out="y", eps=np.float16(1e-8))
    return model(g, [("x", F16, SHAPE)], [("y", F16, SHAPE)])


def _f16_shared_input_cast() -> onnx.ModelProto:
    """The Cast(x -> float32) also feeds a float32 residual output."""
    g = G(opset=18)
    x32 = g.op("Cast", ["x"], "x32", to=F)
    n = rms(g, x32, gamma=np.linspace(0.5, 1.5, 16).astype(np.float32))
    g.op("Cast", [n], "y", to=F16)
    g.op("Add", [x32, n], "res")
    return model(g, [("x", F16, SHAPE)], [("y", F16, SHAPE), ("res", F, SHAPE)])


def _f16_in_branch_outer_weight() -> onnx.ModelProto:
    """A merged-decoder-like If: both branches norm in float32 between Casts and apply the outer
    float16 weight after the cast back."""
    g = G(opset=18)
    w = g.init(np.linspace(0.5, 1.5, 16), "weight", np.float16)
    branches = []
    for prefix in ("t_", "e_"):
        b = G(prefix, opset=18)
        n = rms(b, b.op("Cast", ["x"], to=F), gamma=None)
        b.op("Mul", [b.op("Cast", [n], to=F16), w], f"{prefix}y")
        branches.append(body(b, [], [(f"{prefix}y", F16, SHAPE)]))
    g.nodes.append(
        helper.make_node("If", ["c"], ["y"], then_branch=branches[0], else_branch=branches[1])
    )
    return model(g, [("x", F16, SHAPE), ("c", TensorProto.BOOL, ())], [("y", F16, SHAPE)])


def _double(kind: str, opset: int):
    def build():
        g = G(opset=opset, dtype=np.float64)
        (ln if kind == "ln" else rms)(g, "x", out="y")
        return model(g, [("x", TensorProto.DOUBLE, SHAPE)], [("y", TensorProto.DOUBLE, SHAPE)])

    return build


def _lookalike_plus_rms() -> onnx.ModelProto:
    """A look-alike (eps outside the root) keeps its ReduceMean-13 (axes attribute, keepdims=0
    + Unsqueeze-free), beside an RMS norm that asks for the raise to 23."""
    g = G(opset=17)
    ln(g, "x", out="y", eps_outside=True)
    rms(g, "x", out="y2")
    return model(g, [("x", F, SHAPE)], [("y", F, SHAPE), ("y2", F, SHAPE)])


def _left_ln_plus_rms() -> onnx.ModelProto:
    """An LN left decomposed (ConvTranspose dims not trusted) beside an RMS norm: at 23 the
    left norm's ReduceMean-13s must be adapted."""
    m = _convtranspose_norm()
    g = G("r_", opset=17)
    rms(g, "x", out="y3")
    m.graph.node.extend(g.nodes)
    m.graph.initializer.extend(g.inits)
    m.graph.output.append(vi("y3", F, SHAPE))
    return m


def _function_other_opset() -> onnx.ModelProto:
    """A local function importing opset 16 in a model at 17 (its ReduceMax-13 with axes)."""
    node = helper.make_node("ReduceMax", ["a"], ["b"], axes=[-1], keepdims=1)
    fn = helper.make_function("local", "fn", ["a"], ["b"], [node], [helper.make_opsetid("", 16)])
    g = G(opset=17)
    rms(g, "x", out="y")
    g.nodes.append(helper.make_node("fn", ["x"], ["fo"], domain="local"))
    return model(
        g,
        [("x", F, SHAPE)],
        [("y", F, SHAPE), ("fo", F, (2, 5, 1))],
        functions=[fn],
        opsets={"local": 1},
    )


def _opset13_mixed() -> onnx.ModelProto:
    """Opset 13: a layer norm (raise to 17) beside inference BatchNormalization-9, Resize-13
    and Pad-13."""
    g = G(opset=13)
    ln(g, "x", out="y")
    c = 3
    bn = [g.init(np.linspace(0.5, 1.5, c), g.fresh(n)) for n in ("s", "b", "m")]
    bn.append(g.init(np.linspace(1.0, 2.0, c), g.fresh("v")))
    g.op("BatchNormalization", ["img", *bn], "bn")
    scales = g.init(np.array([1.0, 1.0, 2.0, 2.0]), "scales")
    g.op("Resize", ["img", "", scales], "rs", mode="linear")
    pads = g.init(np.array([0, 0, 1, 1, 0, 0, 1, 1]), "pads", np.int64)
    g.op("Pad", ["img", pads], "pd", mode="reflect")
    return model(
        g,
        [("x", F, SHAPE), ("img", F, (1, c, 4, 4))],
        [
            ("y", F, SHAPE),
            ("bn", F, (1, c, 4, 4)),
            ("rs", F, (1, c, 8, 8)),
            ("pd", F, (1, c, 6, 6)),
        ],
    )


def _roialign_in_loop() -> onnx.ModelProto:
    """RoiAlign-10 (default mode) inside a Loop body at opset 15, a layer norm in the graph."""
    g = G(opset=15)
    ln(g, "x", out="y")
    b = G("l_", opset=15)
    rois = b.init(np.array([[0.5, 0.5, 3.2, 3.7]]), "l_rois")
    idx = b.init(np.array([0]), "l_bi", np.int64)
    b.op("RoiAlign", ["img", rois, idx], "l_r", output_height=2, output_width=2)
    b.op("Add", ["l_s", "l_r"], "l_s2")
    b.op("Identity", ["l_cond"], "l_cond2")
    st = (1, 2, 2, 2)
    trip = g.init(np.array(2), "trip", np.int64)
    cond = g.init(np.array(True), "cond", np.bool_)
    init = g.init(np.zeros(st), "s0")
    loop_body = body(
        b,
        [("l_i", I64, ()), ("l_cond", TensorProto.BOOL, ()), ("l_s", F, st)],
        [("l_cond2", TensorProto.BOOL, ()), ("l_s2", F, st)],
    )
    g.nodes.append(helper.make_node("Loop", [trip, cond, init], ["ls"], body=loop_body))
    return model(g, [("x", F, SHAPE), ("img", F, (1, 2, 6, 6))], [("y", F, SHAPE), ("ls", F, st)])


def _odd_shape(kind: str, shape, axes=(-1,), opset: int = 17):
    def build():
        g = G(opset=opset)
        (ln if kind == "ln" else rms)(g, "x", out="y", axes=axes, shape=shape)
        return model(g, [("x", F, shape)], [("y", F, shape)])

    return build


def _name_collision_main() -> onnx.ModelProto:
    """A tensor named like the adapter's constant (`<output>_axes`) already exists."""
    g = G(opset=17)
    rms(g, "x", out="y")
    g.op("ReduceMax", ["x"], "r", axes=[-1], keepdims=1)
    g.init(np.array([0]), "r_axes", np.int64)
    g.op("Unsqueeze", ["r", "r_axes"], "u")
    return model(g, [("x", F, SHAPE)], [("y", F, SHAPE), ("u", F, (1, 2, 5, 1))])


def _name_collision_body() -> onnx.ModelProto:
    """A branch defines `r_axes`, the name the adapter would give the main ReduceMax's axes."""
    g = G(opset=17)
    rms(g, "x", out="y")
    g.op("ReduceMax", ["x"], "r", axes=[-1], keepdims=1)
    tg = G("t_", opset=17)
    tg.op("ReduceMin", ["x"], "r_axes", axes=[-1], keepdims=1)
    tg.op("Sub", ["r", "r_axes"], "t_o")
    eg = G("e_", opset=17)
    eg.op("Identity", ["r"], "e_o")
    out = (2, 5, 1)
    g.nodes.append(
        helper.make_node(
            "If",
            ["c"],
            ["o"],
            then_branch=body(tg, [], [("t_o", F, out)]),
            else_branch=body(eg, [], [("e_o", F, out)]),
        )
    )
    return model(
        g, [("x", F, SHAPE), ("c", TensorProto.BOOL, ())], [("y", F, SHAPE), ("o", F, out)]
    )


def _old_opset(opset: int):
    """A layer norm at opset 11/12/13 beside ops whose meaning changes at 13 (Softmax's axis,
    Squeeze's and Split's attributes becoming inputs)."""

    def build():
        g = G(opset=opset)
        ln(g, "x", out="y")
        g.op("Softmax", ["x"], "sm", axis=1)
        ins, outs = [("x", F, SHAPE)], [("y", F, SHAPE), ("sm", F, SHAPE)]
        if opset < 13:
            g.op("Squeeze", ["u"], "sq", axes=[0])
            g.nodes.append(helper.make_node("Split", ["x"], ["s0", "s1"], axis=-1, split=[4, 12]))
            ins.append(("u", F, (1, 5)))
            outs += [("sq", F, (5,)), ("s0", F, (2, 5, 4)), ("s1", F, (2, 5, 12))]
        return model(g, ins, outs, ir=7)

    return build


def _alias_import() -> onnx.ModelProto:
    """The default domain imported as `ai.onnx`."""
    m = _rms_plus(_reduce("ReduceMax", [1], 1, (2, 1, 16)))()
    m.opset_import[0].domain = "ai.onnx"
    return m


def _f16_native_matmul(kind: str, width: int = 64, opset: int = 17, add_after: bool = False):
    """A native float16 norm (every op in float16) feeding a float16 MatMul: ORT CPU runs the
    decomposed ops in float32 and may keep the norm output unrounded into the MatMul."""

    def build():
        shape = (2, 5, width)
        g = G(opset=opset, dtype=np.float16, seed=3)
        n = (ln if kind == "ln" else rms)(g, "x", shape=shape)
        w = g.init(g.rng.normal(0, 1, (width, width)), "proj", np.float16)
        mm = g.op("MatMul", [n, w], None if add_after else "y")
        if add_after:
            g.op("Add", [mm, "x"], "y")
        return model(g, [("x", F16, shape)], [("y", F16, shape)])

    return build


def _more_cases() -> None:
    for name, build in (
        ("ln_native_matmul", _f16_native_matmul("ln")),
        ("rms_native_matmul_opset18", _f16_native_matmul("rms", opset=18)),
        ("ln_native_matmul_wide_residual", _f16_native_matmul("ln", 512, add_after=True)),
        ("rms_native_matmul_wide", _f16_native_matmul("rms", 512, opset=18)),
    ):
        case(f"a4_f16_{name}", "2", name.replace("_", " "), build, EITHER, f64_ratio=True)
    for name, build, expect, configs in (
        ("opset11_softmax_squeeze_split", _old_opset(11), FUSE("layer-norm"), ("default",)),
        ("opset11_onnx_refused", _old_opset(11), KEEP("opset-too-low"), ("onnx",)),
        ("opset12_softmax_squeeze_split", _old_opset(12), FUSE("layer-norm"), ("default",)),
        ("opset12_onnx_refused", _old_opset(12), KEEP("opset-too-low"), ("onnx",)),
        ("opset13_softmax_axis", _old_opset(13), FUSE("layer-norm"), ("default", "onnx")),
        (
            "default_domain_imported_as_ai_onnx",
            _alias_import,
            FUSE("rms-norm"),
            ("default", "onnx"),
        ),
    ):
        case(f"a4_raise_{name}", "1", name.replace("_", " "), build, expect, configs=configs)
    for name, build in (
        ("rank1_ln", _odd_shape("ln", (16,))),
        ("rank1_rms", _odd_shape("rms", (16,))),
        ("rank2_batch1_ln", _odd_shape("ln", (1, 16))),
        ("normalised_dim_1_ln", _odd_shape("ln", (3, 1))),
        ("normalised_dim_1_rms", _odd_shape("rms", (3, 1))),
        ("two_axes_with_unit_dim_ln", _odd_shape("ln", (2, 3, 1, 4), axes=(-2, -1))),
        ("rank5_three_axes_rms", _odd_shape("rms", (1, 2, 2, 3, 4), axes=(-3, -2, -1))),
        ("opset13_rank4_ln", _odd_shape("ln", (2, 1, 1, 16), opset=13)),
    ):
        case(f"a4_guard_{name}", "4", f"odd shapes run after fusion: {name}", build, EITHER)
    for name, build, fixed in (
        ("name_collision_main", _name_collision_main, {}),
        ("name_collision_body", _name_collision_body, {"c": np.array(True)}),
    ):
        case(f"a4_raise_{name}", "1", name.replace("_", " "), build, FUSE("rms-norm"), fixed=fixed)
    f16 = [
        ("f16_two_consumers_f32_output", _f16_two_consumers, EITHER),
        ("f16_gamma_cast_inside", _f16_gamma_cast_inside, FUSE("rms-norm")),
        ("f16_ln_mul_add_after_cast", _f16_ln_mul_add_after_cast, FUSE("layer-norm")),
        ("f16_eps_underflows_to_zero", _f16_eps_underflows, EITHER),
        ("f16_shared_input_cast", _f16_shared_input_cast, FUSE("rms-norm")),
        ("f16_in_branches_outer_weight", _f16_in_branch_outer_weight, FUSE("rms-norm", 2)),
        ("f64_ln_opset16", _double("ln", 16), EITHER),
        ("f64_rms_opset17", _double("rms", 17), EITHER),
    ]
    for name, build, expect in f16:
        fixed = {"c": np.array(True)} if "branch" in name else {}
        case(
            f"a4_{name}",
            "2",
            name.replace("_", " "),
            build,
            expect,
            f64_ratio=True,
            fixed=fixed,
        )
    raise_cases = [
        (
            "lookalike_reducemean_survives",
            _lookalike_plus_rms,
            FUSE("rms-norm"),
            ("default", "onnx"),
        ),
        ("left_ln_reducemean_survives", _left_ln_plus_rms, FUSE("rms-norm"), ("default", "onnx")),
        ("function_other_opset", _function_other_opset, KEEP("opset-too-low"), ("onnx",)),
        ("opset13_bn_resize_pad", _opset13_mixed, FUSE("layer-norm"), ("default", "onnx")),
        ("roialign_in_loop_opset15", _roialign_in_loop, FUSE("layer-norm"), ("default", "onnx")),
    ]
    for name, build, expect, configs in raise_cases:
        case(f"a4_raise_{name}", "1", name.replace("_", " "), build, expect, configs=configs)


for _group in (
    _raise_reduce_cases,
    _raise_split_cases,
    _raise_other_cases,
    _raise_scope_cases,
    _function_ref_cases,
    _float16_cases,
    _placement_cases,
    _override_cases,
    _guard_cases,
    _more_cases,
):
    _group()


def main(argv=None) -> None:
    """`python -m corpora.adversarial_4 --save NAME FOLDER` writes the case as NAME.onnx (weights
    external for an external-data case) and its random feeds as NAME.npz; `--list` prints every
    case."""
    import argparse
    import copy
    from pathlib import Path

    from corpora.adversarial import feed_sets

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--save", nargs=2, metavar=("NAME", "FOLDER"))
    args = parser.parse_args(argv)
    if args.list:
        for c in CASES:
            print(f"{c.name:56s} {c.feature} {c.expect.outcome:6s} {c.statement}")
    if args.save:
        name, folder = args.save
        c = next(c for c in CASES if c.name == name)
        m = c.build()
        path = Path(folder) / f"{name}.onnx"
        external = {
            "save_as_external_data": True,
            "location": f"{name}.data",
            "size_threshold": 1024,
        }
        onnx.save(copy.deepcopy(m), path, **(external if c.external else {}))
        feeds = dict(feed_sets(m, (c.fixed,), c.overrides, name))["random"]
        np.savez(Path(folder) / f"{name}.npz", **feeds)
        print(path)


if __name__ == "__main__":
    main()
