"""The norms of 2024-26 models (issue 26), built by hand as their exports write them: Cohere's
per-head QK-norm weight, diffusers' adaLN, the gated grouped RMS norm of Mamba2 / NemotronH, an
identity Cast before a float16 norm; and the look-alikes of each that must not fuse. Every
fusion is checked against the original at ORT_DISABLE_ALL on adversarial inputs; the committed
exports of these models are covered by test_real_models.py and, on adversarial inputs, below."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import assert_same_numerics, op_counts
from onnx import TensorProto, helper, numpy_helper

import normfuse
from models.recent import RECENT

F32, F16 = TensorProto.FLOAT, TensorProto.FLOAT16
SEQ, HEADS, HEAD_DIM = 4, 2, 16
CHANNELS, GROUP = 64, 16  # the gated norm: 4 groups of 16 channels
MODELS_DIR = Path(__file__).resolve().parent.parent / "models"


def _model(nodes, inputs, output, initializers, opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "recent", inputs, [output], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def _const(name: str, value) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def _layer_norm(x: str, out: str, eps: str = "eps", sqrt_first: bool = False) -> list:
    """`(x - mean) * rsqrt(var + eps)` over the last axis, as Cohere's module is exported."""
    nodes = [
        helper.make_node("ReduceMean", [x], ["mean"], axes=[-1]),
        helper.make_node("Sub", [x, "mean"], ["centered"]),
        helper.make_node("Pow", ["centered", "two"], ["square"]),
        helper.make_node("ReduceMean", ["square"], ["variance"], axes=[-1]),
    ]
    if sqrt_first:  # near-miss: sqrt(var) + eps
        nodes += [
            helper.make_node("Sqrt", ["variance"], ["root"]),
            helper.make_node("Add", ["root", eps], ["std"]),
        ]
    else:
        nodes += [
            helper.make_node("Add", ["variance", eps], ["shifted"]),
            helper.make_node("Sqrt", ["shifted"], ["std"]),
        ]
    return [
        *nodes,
        helper.make_node("Reciprocal", ["std"], ["inv_std"]),
        helper.make_node("Mul", ["centered", "inv_std"], [out]),
    ]


def qk_norm(scale_shape: tuple, dtype: int = F32, bias: bool = False) -> onnx.ModelProto:
    """Cohere's QK-norm on q [N, S, H, Dh]: a bias-free layer norm over Dh whose weight is
    [H, Dh] (one per head), in float32 between Casts for a float16 model."""
    rng = np.random.default_rng(0)
    x = "q32" if dtype == F16 else "q"
    nodes = [helper.make_node("Cast", ["q"], ["q32"], to=F32)] if dtype == F16 else []
    nodes += _layer_norm(x, "normed")
    nodes.append(helper.make_node("Mul", ["weight", "normed"], ["scaled"]))
    last = "scaled"
    initializers = [
        _const("two", np.float32(2.0)),
        _const("eps", np.float32(1e-5)),
        _const("weight", rng.uniform(0.5, 1.5, scale_shape).astype(np.float32)),
    ]
    if bias:
        nodes.append(helper.make_node("Add", ["scaled", "bias"], ["biased"]))
        initializers.append(_const("bias", rng.normal(0, 0.5, scale_shape).astype(np.float32)))
        last = "biased"
    if dtype == F16:
        nodes.append(helper.make_node("Cast", [last], ["y"], to=F16))
    else:
        nodes.append(helper.make_node("Identity", [last], ["y"]))
    shape = ["batch", SEQ, HEADS, HEAD_DIM]
    return _model(
        nodes,
        [helper.make_tensor_value_info("q", dtype, shape)],
        helper.make_tensor_value_info("y", dtype, _broadcast(shape, scale_shape)),
        initializers,
    )


def _broadcast(shape: list, scale_shape: tuple) -> list:
    """x's shape broadcast with a scale's (a symbolic dim against a larger one: the larger)."""
    full = [*([1] * (len(scale_shape) - len(shape))), *shape]
    scale = [*([1] * (len(full) - len(scale_shape))), *scale_shape]
    return [dim if size == 1 else size for dim, size in zip(full, scale, strict=True)]


def _fused_nodes(result: normfuse.OptimizeResult, op: str) -> list[onnx.NodeProto]:
    return [node for node in result.model.graph.node if node.op_type == op]


@pytest.mark.parametrize("dtype", [F32, F16], ids=["float32", "float16"])
@pytest.mark.parametrize(
    "scale_shape",
    [(HEADS, HEAD_DIM), (SEQ, 1, HEAD_DIM)],
    ids=["per-head", "per-position"],  # both keep x's shape: the Mul stays after the node
)
def test_per_head_qk_norm_fuses_and_keeps_its_weight(scale_shape: tuple, dtype: int) -> None:
    original = qk_norm(scale_shape, dtype)
    result = normfuse.optimize(original)
    assert [site.kind for site in result.report.sites] == ["layer-norm"]
    assert result.report.near_misses == []
    (node,) = _fused_nodes(result, "LayerNormalization")
    initializers = {t.name: numpy_helper.to_array(t) for t in result.model.graph.initializer}
    assert np.all(initializers[node.input[1]] == 1.0)  # unit scale: the weight stays after it
    nodes = result.model.graph.node
    (multiply,) = [n for n in nodes if n.op_type == "Mul" and n.input[0] == node.output[0]]
    assert initializers[multiply.input[1]].shape == scale_shape
    # float16: the Mul in float32, then the cast back, as the model computes it
    assert initializers[multiply.input[1]].dtype == np.float32
    rtol = 1e-4 if dtype == F32 else 2e-3
    assert_same_numerics(original, result.model, {"batch": 3}, seed=1, rtol=rtol)


@pytest.mark.parametrize(
    ("scale_shape", "bias"),
    [((3, 1, 1, HEAD_DIM), False), ((HEADS, HEAD_DIM), True)],
    # a scale that would widen x (a batch of 3 on batch 1); a per-head scale with a bias after
    ids=["widening", "per-head-with-bias"],
)
def test_per_head_look_alikes_keep_gamma_shape(scale_shape: tuple, bias: bool) -> None:
    original = qk_norm(scale_shape, bias=bias)
    result = normfuse.optimize(original)
    assert result.report.sites == []
    assert [(m.kind, m.reason) for m in result.report.near_misses] == [
        ("layer-norm", "gamma-shape")
    ]
    assert "LayerNormalization" not in op_counts(result.model)


def ada_layer_norm(dtype: int = F32, identity_cast: bool = False) -> onnx.ModelProto:
    """diffusers' adaLN: a layer norm without affine over x [N, S, C], then `x * (1 + s) + b`
    with s, b [N, 1, C] per sample (graph inputs); float16 statistics cast to float64 as
    PyTorch's TorchScript export writes them, after an identity Cast of x when asked."""
    x = "x_cast" if identity_cast else "x"
    nodes = [helper.make_node("Cast", ["x"], ["x_cast"], to=dtype)] if identity_cast else []
    wide = "centered64"
    nodes += [
        helper.make_node("ReduceMean", [x], ["mean"], axes=[-1]),
        helper.make_node("Sub", [x, "mean"], ["centered"]),
    ]
    if dtype == F16:
        nodes.append(helper.make_node("Cast", ["centered"], [wide], to=TensorProto.DOUBLE))
    else:
        wide = "centered"
    nodes += [
        helper.make_node("Pow", [wide, "two"], ["square"]),
        helper.make_node("ReduceMean", ["square"], ["variance"], axes=[-1]),
        helper.make_node("Add", ["variance", "eps"], ["shifted"]),
        helper.make_node("Sqrt", ["shifted"], ["std"]),
        helper.make_node("Div", [wide, "std"], ["normed_wide"]),
    ]
    normed = "normed_wide"
    if dtype == F16:
        nodes.append(helper.make_node("Cast", ["normed_wide"], ["normed"], to=F16))
        normed = "normed"
    nodes += [
        helper.make_node("Add", ["one", "s"], ["gain"]),
        helper.make_node("Mul", [normed, "gain"], ["modulated"]),
        helper.make_node("Add", ["modulated", "b"], ["y"]),
    ]
    wide_type = np.float64 if dtype == F16 else np.float32
    np_type = np.float16 if dtype == F16 else np.float32
    channels = 32
    return _model(
        nodes,
        [
            helper.make_tensor_value_info("x", dtype, ["batch", SEQ, channels]),
            helper.make_tensor_value_info("s", dtype, ["batch", 1, channels]),
            helper.make_tensor_value_info("b", dtype, ["batch", 1, channels]),
        ],
        helper.make_tensor_value_info("y", dtype, ["batch", SEQ, channels]),
        [
            _const("two", wide_type(2.0)),
            _const("eps", wide_type(1e-6)),
            _const("one", np_type(1.0)),
        ],
    )


@pytest.mark.parametrize(
    ("dtype", "identity_cast"),
    [(F32, False), (F16, False), (F16, True), (F32, True)],
    ids=["float32", "float16", "float16-identity-cast", "float32-identity-cast"],
)
def test_ada_layer_norm_fuses_the_norm_and_keeps_the_modulation(
    dtype: int, identity_cast: bool
) -> None:
    original = ada_layer_norm(dtype, identity_cast)
    result = normfuse.optimize(original)
    assert [site.kind for site in result.report.sites] == ["layer-norm"]
    assert result.report.near_misses == []
    counts = op_counts(result.model)
    assert counts["LayerNormalization"] == 1
    assert counts["Mul"] == 1 and counts["Add"] == 2  # 1 + s, x * (1 + s), + b: all kept
    assert counts["Cast"] == (2 if dtype == F16 else 0) + identity_cast
    rtol = 1e-4 if dtype == F32 else 4e-3
    assert_same_numerics(original, result.model, {"batch": 3}, seed=3, rtol=rtol)


def gated_rms(
    gate: str = "before",
    groups_shape: tuple = (-1, SEQ, CHANNELS // GROUP, GROUP),
    reduce_axis: int = -1,
    centred: bool = False,
    divisor: float | None = None,
    sqrt_first: bool = False,
    back_shape: tuple = (-1, SEQ, CHANNELS),
    dtype: int = F32,
) -> onnx.ModelProto:
    """NemotronH's / Mamba2's gated RMS norm over x, z [N, S, C]: `h = x * silu(z)` (float32),
    Reshape to groups [N, S, G, C/G], `h * rsqrt(mean(h^2) + eps)` per group, Reshape back,
    `w * .` with w [C] (after the cast back, in the model's type). The variations are the
    look-alikes: the gate after the norm, other groupings, a mean subtracted, a divisor other
    than the group size, epsilon outside the square root."""
    rng = np.random.default_rng(4)
    np_type = np.float16 if dtype == F16 else np.float32
    nodes = []
    x, z = "x", "z"
    if dtype == F16:
        nodes += [
            helper.make_node("Cast", ["x"], ["x32"], to=F32),
            helper.make_node("Cast", ["z"], ["z32"], to=F32),
        ]
        x, z = "x32", "z32"
    nodes += [
        helper.make_node("Sigmoid", [z], ["sig"]),
        helper.make_node("Mul", [z, "sig"], ["silu"]),
    ]
    if gate == "before":
        nodes.append(helper.make_node("Mul", [x, "silu"], ["h"]))
    else:
        nodes.append(helper.make_node("Identity", [x], ["h"]))
    nodes.append(helper.make_node("Reshape", ["h", "groups_shape"], ["grouped"]))
    source = "grouped"
    if centred:
        nodes += [
            helper.make_node("ReduceMean", ["grouped"], ["group_mean"], axes=[reduce_axis]),
            helper.make_node("Sub", ["grouped", "group_mean"], ["centred"]),
        ]
        source = "centred"
    nodes.append(helper.make_node("Pow", [source, "two"], ["square"]))
    if divisor is None:
        nodes.append(
            helper.make_node("ReduceMean", ["square"], ["mean_square"], axes=[reduce_axis])
        )
    else:
        nodes += [
            helper.make_node("ReduceSum", ["square", "axes"], ["sum_square"]),
            helper.make_node("Div", ["sum_square", "divisor"], ["mean_square"]),
        ]
    if sqrt_first:
        nodes += [
            helper.make_node("Sqrt", ["mean_square"], ["root"]),
            helper.make_node("Add", ["root", "eps"], ["rms"]),
            helper.make_node("Div", [source, "rms"], ["normed"]),
        ]
    else:
        nodes += [
            helper.make_node("Add", ["mean_square", "eps"], ["shifted"]),
            helper.make_node("Sqrt", ["shifted"], ["rms"]),
            helper.make_node("Reciprocal", ["rms"], ["inv_rms"]),
            helper.make_node("Mul", [source, "inv_rms"], ["normed"]),
        ]
    nodes.append(helper.make_node("Reshape", ["normed", "back_shape"], ["ungrouped"]))
    last = "ungrouped"
    if gate == "after":
        nodes.append(helper.make_node("Mul", ["ungrouped", "silu"], ["gated"]))
        last = "gated"
    if dtype == F16:
        nodes.append(helper.make_node("Cast", [last], ["narrow"], to=F16))
        last = "narrow"
    nodes.append(helper.make_node("Mul", ["weight", last], ["y"]))
    initializers = [
        _const("groups_shape", np.array(groups_shape, np.int64)),
        _const("back_shape", np.array(back_shape, np.int64)),
        _const("two", np.float32(2.0)),
        _const("eps", np.float32(1e-5)),
        _const("weight", rng.uniform(0.5, 1.5, CHANNELS).astype(np_type)),
    ]
    if divisor is not None:
        initializers += [
            _const("axes", np.array([reduce_axis], np.int64)),
            _const("divisor", np.float32(divisor)),
        ]
    return _model(
        nodes,
        [
            helper.make_tensor_value_info(name, dtype, ["batch", SEQ, CHANNELS])
            for name in ("x", "z")
        ],
        helper.make_tensor_value_info("y", dtype, ["batch", SEQ, CHANNELS]),
        initializers,
    )


@pytest.mark.parametrize("dtype", [F32, F16], ids=["float32", "float16"])
@pytest.mark.parametrize("gate", ["before", "after"])
def test_gated_group_rms_fuses_and_keeps_gate_reshapes_and_weight(gate: str, dtype: int) -> None:
    """The RMS norm of each group becomes one SimplifiedLayerNormalization over the grouped
    tensor's last axis with a unit scale; the gate (before or after the norm, wherever the model
    has it), both Reshapes and the per-channel weight stay: the fused node computes exactly the
    statistics it replaces, whatever the grouping."""
    original = gated_rms(gate=gate, dtype=dtype)
    result = normfuse.optimize(original)
    assert [site.kind for site in result.report.sites] == ["rms-norm"]
    assert result.report.near_misses == []
    counts = op_counts(result.model)
    assert counts["SimplifiedLayerNormalization"] == 1
    assert counts["Reshape"] == 2 and counts["Sigmoid"] == 1
    assert counts["Mul"] == 3  # silu, the gate, the weight
    assert "ReduceMean" not in counts
    rtol = 1e-4 if dtype == F32 else 4e-3
    assert_same_numerics(original, result.model, {"batch": 3}, seed=5, rtol=rtol)


def test_gated_rms_grouped_against_the_grain_is_refused() -> None:
    """Groups taken with a stride (Reshape to [N, S, C/G, G], statistics over axis -2: element k
    of every group together) are not a trailing axis: not fused."""
    original = gated_rms(groups_shape=(-1, SEQ, GROUP, CHANNELS // GROUP), reduce_axis=-2)
    result = normfuse.optimize(original)
    assert result.report.sites == []
    assert [(m.kind, m.reason) for m in result.report.near_misses] == [
        ("rms-norm", "non-trailing-axes")
    ]
    assert "SimplifiedLayerNormalization" not in op_counts(result.model)


@pytest.mark.parametrize(
    ("variation", "expected"),
    [
        # Mean-centred groups between two Reshapes: a layer norm of groups the group-norm pass
        # does not recognise (the grouping splits the last axis, not the channels after the
        # batch), and that the layer-norm pass leaves to it.
        (
            {"centred": True},
            {("group-norm", "not-channel-groups"), ("layer-norm", "group-norm")},
        ),
        ({"divisor": GROUP - 1.0}, {("rms-norm", "unbiased-variance")}),
        ({"sqrt_first": True}, {("rms-norm", "epsilon-outside-sqrt")}),
    ],
    ids=["mean-centred", "divisor-d-1", "epsilon-outside-sqrt"],
)
def test_gated_rms_look_alikes_are_refused_with_their_reason(
    variation: dict, expected: set
) -> None:
    original = gated_rms(**variation)
    result = normfuse.optimize(original)
    assert result.report.sites == []
    assert {(m.kind, m.reason) for m in result.report.near_misses} == expected
    counts = op_counts(result.model)
    assert not {"SimplifiedLayerNormalization", "LayerNormalization"} & set(counts)
    assert counts == op_counts(original)


def test_dyt_is_never_a_norm() -> None:
    """Dynamic Tanh, `gamma * tanh(alpha * x) + beta`: no statistics, nothing fused or reported."""
    rng = np.random.default_rng(6)
    nodes = [
        helper.make_node("Mul", ["alpha", "x"], ["scaled"]),
        helper.make_node("Tanh", ["scaled"], ["squashed"]),
        helper.make_node("Mul", ["squashed", "gamma"], ["gained"]),
        helper.make_node("Add", ["gained", "beta"], ["y"]),
    ]
    original = _model(
        nodes,
        [helper.make_tensor_value_info("x", F32, ["batch", SEQ, 32])],
        helper.make_tensor_value_info("y", F32, ["batch", SEQ, 32]),
        [
            _const("alpha", np.float32([0.5])),
            _const("gamma", rng.uniform(0.5, 1.5, 32).astype(np.float32)),
            _const("beta", rng.normal(0, 1, 32).astype(np.float32)),
        ],
    )
    result = normfuse.optimize(original)
    assert result.report.sites == [] and result.report.near_misses == []
    assert op_counts(result.model) == op_counts(original)


def _recent_entries() -> list[dict]:
    manifest = json.loads((MODELS_DIR / "manifest.json").read_text())["models"]
    return [e for e in manifest if e["architecture"] in RECENT and "export_error" not in e]


@pytest.mark.parametrize(
    "entry",
    [entry for entry in _recent_entries() if entry["dtype"] == "float32"],
    ids=lambda entry: entry["file"],
)
def test_recent_exports_match_on_adversarial_inputs(entry: dict) -> None:
    """The committed float32 exports, fused, on large, tiny, constant-row, negative and outlier
    inputs (ORT_DISABLE_ALL): every fused norm is exact there too."""
    original = onnx.load(MODELS_DIR / entry["file"])
    result = normfuse.optimize(MODELS_DIR / entry["file"])
    expected = entry["layer_norm_sites"] + entry["rms_norm_sites"]
    kinds = Counter(site.kind for site in result.report.sites)
    already = op_counts(original)["LayerNormalization"]
    assert kinds["layer-norm"] + kinds["rms-norm"] == expected - already
    assert_same_numerics(original, result.model, entry["dims"], seed=9)


@pytest.mark.parametrize("name", ["dit_opset16.onnx", "sd3_opset16_torchscript_float16.onnx"])
def test_sites_of_one_graph_share_the_constants_they_need(name: str) -> None:
    """adaLN's norms have no affine, so each fused node needs a unit scale: the sites of one
    graph read one initializer per value (no two created initializers hold the same bytes), and
    the fused model is no larger than the original."""
    original = onnx.load(MODELS_DIR / "real" / name)
    result = normfuse.optimize(MODELS_DIR / "real" / name)
    assert len(result.report.sites) >= 3
    kept = {tensor.name for tensor in original.graph.initializer}
    created = [t for t in result.model.graph.initializer if t.name not in kept]
    values = Counter((t.data_type, tuple(t.dims), t.raw_data) for t in created)
    assert values and max(values.values()) == 1, [t.name for t in created]
    units = [t for t in created if np.all(numpy_helper.to_array(t) == 1) and len(t.dims) == 1]
    assert units and len(units) == len({(t.data_type, tuple(t.dims)) for t in units})
    assert result.model.ByteSize() <= original.ByteSize()


def test_recent_fixtures_stay_within_their_budget() -> None:
    """Each committed export of these models at most 300 KB, all of them at most 2.5 MB."""
    sizes = [(MODELS_DIR / entry["file"]).stat().st_size for entry in _recent_entries()]
    assert len(sizes) >= 20
    assert max(sizes) <= 300 * 1024
    assert sum(sizes) <= 2.5 * 1024 * 1024


def _grouped_rms_by_shape(target: str) -> onnx.ModelProto:
    """h = x * silu(z) [batch, seq, 64] -> Reshape(h, t) -> RMS over the last axis ->
    Reshape(Shape(h)) -> weight (Mamba2's `h.view(*h.shape[:-1], G, -1)`, batch and length
    symbolic). `t`: `copied` Concat(Shape(h)[0:2], [4, -1]); `window_off` Shape(h)[0:1] (one
    dim fewer: [batch, 4, 16 * seq], rows of a symbolic length); `other_tensor` Shape(z)[0:2]
    (another tensor's dims); `allowzero` the copied target read with allowzero=1."""
    start, end, source = 0, 2, "h"
    if target == "window_off":
        end = 1
    elif target == "other_tensor":
        source = "z"
    allowzero = {"allowzero": 1} if target == "allowzero" else {}
    nodes = [
        helper.make_node("Sigmoid", ["z"], ["sig"]),
        helper.make_node("Mul", ["z", "sig"], ["silu"]),
        helper.make_node("Mul", ["x", "silu"], ["h"]),
        helper.make_node("Shape", [source], ["dims"]),
        helper.make_node("Slice", ["dims", "start", "end"], ["lead"]),
        helper.make_node("Concat", ["lead", "tail"], ["target"], axis=0),
        helper.make_node("Reshape", ["h", "target"], ["grouped"], **allowzero),
        helper.make_node("Pow", ["grouped", "two"], ["square"]),
        helper.make_node("ReduceMean", ["square"], ["mean_square"], axes=[-1]),
        helper.make_node("Add", ["mean_square", "eps"], ["shifted"]),
        helper.make_node("Sqrt", ["shifted"], ["rms"]),
        helper.make_node("Div", ["grouped", "rms"], ["normed"]),
        helper.make_node("Shape", ["h"], ["h_dims"]),
        helper.make_node("Reshape", ["normed", "h_dims"], ["ungrouped"]),
        helper.make_node("Mul", ["weight", "ungrouped"], ["y"]),
    ]
    rng = np.random.default_rng(9)
    initializers = [
        _const("start", np.array([start], np.int64)),
        _const("end", np.array([end], np.int64)),
        _const("tail", np.array([CHANNELS // GROUP, -1], np.int64)),
        _const("two", np.float32(2.0)),
        _const("eps", np.float32(1e-5)),
        _const("weight", rng.uniform(0.5, 1.5, CHANNELS).astype(np.float32)),
    ]
    inputs = [helper.make_tensor_value_info(name, F32, ["batch", "seq", CHANNELS]) for name in "xz"]
    output = helper.make_tensor_value_info("y", F32, ["batch", "seq", CHANNELS])
    return _model(nodes, inputs, output, initializers)


def test_grouped_rms_with_a_target_copying_symbolic_dims_fuses() -> None:
    """ADV6-01: a target `Concat(Shape(h)[0:2], [G, -1])` copies h's own (symbolic) dims, so it
    reshapes as [0, 0, G, -1] does and the group size is D / G = 16: the RMS norm fuses and
    computes the original."""
    original = _grouped_rms_by_shape("copied")
    result = normfuse.optimize(original)
    assert [site.kind for site in result.report.sites] == ["rms-norm"]
    assert result.report.near_misses == []
    assert op_counts(result.model)["SimplifiedLayerNormalization"] == 1
    assert_same_numerics(original, result.model, {"batch": 3, "seq": 5}, seed=8)


@pytest.mark.parametrize("target", ["window_off", "other_tensor", "allowzero"])
def test_grouped_rms_targets_that_do_not_copy_the_input_are_left(target: str) -> None:
    """One thing changed: the window one dim short (rows of 16 * seq, not static), dims read
    from another tensor (z: the same shape only at run time), or allowzero=1 (a 0 would be a
    0): nothing fused, `unknown-shape`."""
    original = _grouped_rms_by_shape(target)
    result = normfuse.optimize(original)
    assert result.report.sites == []
    assert result.model.SerializeToString() == original.SerializeToString()
    assert [(m.kind, m.reason) for m in result.report.near_misses] == [
        ("rms-norm", "unknown-shape")
    ]
