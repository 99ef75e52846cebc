"""Residual (Skip*) fusion is exact or absent: the bias's association, the output's rank and
shape, float16 sums, dtypes without a kernel, symbolic shapes, and the accuracy rule of
`--tune-for` (fake timings only: no assertion here depends on a measured time)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import FLOAT32_ATOL, assert_same_numerics, max_abs_diff, op_types, run, session
from onnx import TensorProto, helper, numpy_helper

import normfuse
from normfuse.measure import forms
from normfuse.measure.forms import FormChooser

HIDDEN = 32
F32, F16, F64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE
SKIP_OPS = ("SkipLayerNormalization", "SkipSimplifiedLayerNormalization")


def _model(nodes, inputs, outputs, initializers=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "residual", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _norm(kind: str, source: str, elem_type: int = F32, out: str = "y") -> tuple[list, list]:
    """A LayerNormalization (with beta) or SimplifiedLayerNormalization of `source`."""
    dtype = helper.tensor_dtype_to_np_dtype(elem_type)
    rng = np.random.default_rng(7)
    gamma = numpy_helper.from_array(rng.uniform(0.5, 1.5, HIDDEN).astype(dtype), f"{out}_g")
    beta = numpy_helper.from_array(rng.normal(0, 0.5, HIDDEN).astype(dtype), f"{out}_b")
    if kind == "ln":
        node = helper.make_node(
            "LayerNormalization", [source, gamma.name, beta.name], [out], axis=-1, epsilon=1e-5
        )
        return [node], [gamma, beta]
    node = helper.make_node(
        "SimplifiedLayerNormalization", [source, gamma.name], [out], axis=-1, epsilon=1e-6
    )
    return [node], [gamma]


def _info(name: str, shape, elem_type: int = F32):
    return helper.make_tensor_value_info(name, elem_type, list(shape))


def _bias(shape=(HIDDEN,), elem_type: int = F32, name: str = "c"):
    dtype = helper.tensor_dtype_to_np_dtype(elem_type)
    values = np.random.default_rng(5).uniform(-3.0, 3.0, shape).astype(dtype)
    return numpy_helper.from_array(values, name)


def residual(kind: str, bias: str | None = None, shape=(2, 4, HIDDEN), bias_shape=(HIDDEN,)):
    """`norm((a [+ c]) + s [+ c])`: `bias` "pre" adds the constant c to `a` first, "post" adds
    it to the residual sum; the sum is also a graph output (the op's fourth output)."""
    nodes, initializers = [], []
    first = "a"
    if bias is not None:
        initializers.append(_bias(bias_shape))
    if bias == "pre":
        nodes.append(helper.make_node("Add", ["a", "c"], ["biased"]))
        first = "biased"
    nodes.append(helper.make_node("Add", [first, "s"], ["sum"]))
    total = "sum"
    if bias == "post":
        nodes.append(helper.make_node("Add", ["sum", "c"], ["total"]))
        total = "total"
    norm, params = _norm(kind, total)
    out_shape = np.broadcast_shapes(shape, bias_shape) if bias else shape
    return _model(
        nodes + norm,
        [_info("a", shape), _info("s", shape)],
        [_info("y", out_shape), _info(total, out_shape)],
        initializers + params,
    )


def cancellation_rows(shape=(2, 4, HIDDEN)) -> dict[str, np.ndarray]:
    """a = 1e8 + 8 (i mod 2) (exact in float32, one ulp is 8), s = -1e8: (a + c) + s drops c
    (|c| < 4, half an ulp) where (a + s) + c keeps it; every row well conditioned either way."""
    steps = 8.0 * (np.arange(HIDDEN) % 2).astype(np.float32)
    a = np.broadcast_to(np.float32(1e8) + steps, shape).astype(np.float32)
    return {"a": a, "s": np.full(shape, -1e8, np.float32)}


def skip_nodes(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [node for node in model.graph.node if node.op_type in SKIP_OPS]


def reasons(result) -> list[str]:
    return [miss.reason for miss in result.report.near_misses]


# ------------------------------------------------------------------ association of the bias


def test_layer_norm_residual_is_left_the_skip_kernel_is_less_accurate() -> None:
    """ONNX Runtime's SkipLayerNormalization computes the statistics less accurately than Add +
    LayerNormalization (ADV3-05): the site is left, with its reason, whatever the bias."""
    for bias in (None, "pre"):
        original = residual("ln", bias=bias)
        result = normfuse.optimize(original, passes="skip-norm")
        assert skip_nodes(result.model) == [] and reasons(result) == ["skip-less-accurate"]
        assert result.model.SerializeToString() == original.SerializeToString()


@pytest.mark.parametrize("kind", ["rms"])
def test_bias_before_the_residual_is_not_folded(kind: str) -> None:
    original = residual(kind, bias="pre")
    result = normfuse.optimize(original, passes="skip-norm")
    (node,) = skip_nodes(result.model)
    assert op_types(result.model)[0] == "Add" and node.input[0] == "biased"
    assert len(node.input) == (4 if kind == "ln" else 3)  # no bias input: (a + c) is the input
    feeds = cancellation_rows()
    assert max_abs_diff(original, result.model, feeds) <= FLOAT32_ATOL
    assert_same_numerics(original, result.model, seed=31)


@pytest.mark.parametrize("kind", ["ln", "rms"])
def test_bias_after_the_residual_is_left_no_kernel_order_fits_both_providers(kind: str) -> None:
    """(a + s) + c is the CPU kernel's order but not the CUDA kernel's (a + c) + s."""
    original = residual(kind, bias="post")
    result = normfuse.optimize(original, passes="skip-norm")
    assert skip_nodes(result.model) == []
    (miss,) = result.report.near_misses
    assert miss.reason == "skip-bias-order" and "CUDA" in miss.detail
    assert max_abs_diff(original, result.model, cancellation_rows()) == 0.0
    assert_same_numerics(original, result.model, seed=32)


def test_cancellation_rows_tell_the_two_associations_apart() -> None:
    """The inputs above do discriminate: the kernel's order on the pre-bias model differs."""
    pre = residual("ln", bias="pre")
    folded = helper.make_node(
        "SkipLayerNormalization",
        ["a", "s", "y_g", "y_b", "c"],
        ["y", "", "", "biased_sum"],
        epsilon=1e-5,
        domain="com.microsoft",
    )
    wrong = _model(
        [folded],
        [_info("a", (2, 4, HIDDEN)), _info("s", (2, 4, HIDDEN))],
        [_info("y", (2, 4, HIDDEN))],
        list(pre.graph.initializer),
    )
    wrong.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    feeds = cancellation_rows()
    expected, actual = run(pre, feeds)[0], session(wrong).run(None, feeds)[0]
    assert np.max(np.abs(expected - actual)) > 0.1


# ------------------------------------------------------------------ rank and shape


@pytest.mark.parametrize(("bias", "reason"), [("pre", "skip-shape"), ("post", "skip-bias-order")])
def test_bias_that_raises_the_rank_is_left(bias: str, reason: str) -> None:
    """A [1, 1, 1, H] bias on [2, 4, H] makes the original's output rank 4; the Skip op's would
    be rank 3. Before the residual, input [1, 2, 4, H] and skip [2, 4, H] differ in shape."""
    original = residual("ln", bias=bias, bias_shape=(1, 1, 1, HIDDEN))
    result = normfuse.optimize(original, passes="skip-norm")
    assert skip_nodes(result.model) == []
    assert reasons(result) == [reason]
    assert run(result.model, cancellation_rows())[0].shape == (1, 2, 4, HIDDEN)
    assert_same_numerics(original, result.model, seed=33)


@pytest.mark.parametrize(
    ("a_shape", "s_shape"),
    [
        ((2, 4, HIDDEN), (4, HIDDEN)),
        ((2, 4, HIDDEN), (1, 4, HIDDEN)),
        ((1, 4, HIDDEN), (2, 4, HIDDEN)),
    ],
)
def test_broadcasting_residual_add_is_left(a_shape, s_shape) -> None:
    norm, params = _norm("ln", "sum")
    out = np.broadcast_shapes(a_shape, s_shape)
    original = _model(
        [helper.make_node("Add", ["a", "s"], ["sum"]), *norm],
        [_info("a", a_shape), _info("s", s_shape)],
        [_info("y", out)],
        params,
    )
    result = normfuse.optimize(original, passes="skip-norm")
    assert skip_nodes(result.model) == []
    assert reasons(result) == ["skip-shape"]
    assert_same_numerics(original, result.model, seed=34)


def test_rank_four_is_left_and_rank_two_fuses() -> None:
    four = residual("rms", shape=(2, 2, 4, HIDDEN))
    result = normfuse.optimize(four, passes="skip-norm")
    assert skip_nodes(result.model) == [] and reasons(result) == ["skip-rank"]
    two = residual("rms", shape=(8, HIDDEN))
    result = normfuse.optimize(two, passes="skip-norm")
    assert op_types(result.model) == ["SkipSimplifiedLayerNormalization"]
    assert_same_numerics(two, result.model, seed=35)


# ------------------------------------------------------------------ dtypes


def _typed_residual(elem_type: int, kind: str = "ln") -> onnx.ModelProto:
    norm, params = _norm(kind, "sum", elem_type)
    shape = (2, 4, HIDDEN)
    return _model(
        [helper.make_node("Add", ["a", "s"], ["sum"]), *norm],
        [_info("a", shape, elem_type), _info("s", shape, elem_type)],
        [_info("y", shape, elem_type)],
        params,
    )


@pytest.mark.parametrize("kind", ["ln", "rms"])
def test_float16_sum_is_left(kind: str) -> None:
    original = _typed_residual(F16, kind)
    result = normfuse.optimize(original, passes="skip-norm")
    assert skip_nodes(result.model) == []
    assert reasons(result) == ["skip-float16-sum"]
    assert_same_numerics(original, result.model, seed=36, rtol=1e-3)


def test_float16_kernel_normalises_what_the_model_rounds_away() -> None:
    """Why float16 is left: rows of 100 + 0.01 N(0, 1) split over input and skip are constant
    once the model rounds the sum to float16; the kernel's float32 sum is not."""
    original = _typed_residual(F16)
    fused = onnx.ModelProto()
    fused.CopyFrom(original)
    del fused.graph.node[:]
    fused.graph.node.append(
        helper.make_node(
            "SkipLayerNormalization",
            ["a", "s", "y_g", "y_b"],
            ["y"],
            epsilon=1e-5,
            domain="com.microsoft",
        )
    )
    fused.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    rng = np.random.default_rng(0)
    a = np.full((2, 4, HIDDEN), 100.0, np.float16)
    s = (0.01 * rng.standard_normal((2, 4, HIDDEN))).astype(np.float16)
    feeds = {"a": a, "s": s}
    assert np.max(np.abs(run(original, feeds)[0] - session(fused).run(None, feeds)[0])) > 0.1


def test_float64_site_is_left_and_the_rest_of_the_model_fuses() -> None:
    shape = (2, 4, HIDDEN)
    norm64, params64 = _norm("rms", "sum64", F64, out="y64")
    norm32, params32 = _norm("rms", "sum32", F32, out="y32")
    original = _model(
        [
            helper.make_node("Add", ["a64", "s64"], ["sum64"]),
            *norm64,
            helper.make_node("Add", ["a", "s"], ["sum32"]),
            *norm32,
        ],
        [_info("a64", shape, F64), _info("s64", shape, F64), _info("a", shape), _info("s", shape)],
        [_info("y64", shape, F64), _info("y32", shape)],
        params64 + params32,
    )
    result = normfuse.optimize(original, passes="skip-norm")
    (node,) = skip_nodes(result.model)
    assert node.output[0] == "y32"
    assert reasons(result) == ["unsupported-dtype"]
    assert_same_numerics(original, result.model, seed=37)


# ------------------------------------------------------------------ symbolic shapes


def _symbolic(a_shape, s_shape, derived: bool = False, kind: str = "rms") -> onnx.ModelProto:
    """Add(a, s) -> RMS norm (or `kind`); with `derived`, s is
    Reshape(MatMul(Reshape(x, [-1, H]), W), Shape(a)) for a graph input x: the same derivation
    as a only through Shape(a)."""
    norm, params = _norm(kind, "sum")
    inputs = [_info("a", a_shape)]
    nodes = []
    initializers = list(params)
    if derived:
        weight = np.random.default_rng(9).normal(0, 0.2, (HIDDEN, HIDDEN)).astype(np.float32)
        initializers += [
            numpy_helper.from_array(weight, "w"),
            numpy_helper.from_array(np.array([-1, HIDDEN], np.int64), "flat"),
        ]
        inputs.append(_info("x", s_shape))
        nodes += [
            helper.make_node("Reshape", ["x", "flat"], ["x2"]),
            helper.make_node("MatMul", ["x2", "w"], ["p2"]),
            helper.make_node("Shape", ["a"], ["a_shape"]),
            helper.make_node("Reshape", ["p2", "a_shape"], ["s"]),
        ]
    else:
        inputs.append(_info("s", s_shape))
    nodes += [helper.make_node("Add", ["a", "s"], ["sum"]), *norm]
    return _model(nodes, inputs, [_info("y", [None] * len(a_shape))], initializers)


def test_same_dim_params_fuse() -> None:
    original = _symbolic(("batch", "sequence", HIDDEN), ("batch", "sequence", HIDDEN))
    result = normfuse.optimize(original, passes="skip-norm")
    assert op_types(result.model) == ["SkipSimplifiedLayerNormalization"]
    assert_same_numerics(original, result.model, {"batch": 3, "sequence": 5}, seed=38)


def test_same_derivation_through_shape_fuses() -> None:
    original = _symbolic(("batch", "sequence", HIDDEN), ("batch", "sequence", HIDDEN), True)
    result = normfuse.optimize(original, passes="skip-norm")
    assert op_types(result.model)[-1] == "SkipSimplifiedLayerNormalization"
    assert_same_numerics(original, result.model, {"batch": 3, "sequence": 5}, seed=39)


def test_skip_reshaped_to_shape_of_input_fuses_whatever_its_source() -> None:
    """s = Reshape(., Shape(a)) has a's shape even when x is declared [other, ...]."""
    original = _symbolic(("batch", "sequence", HIDDEN), ("other", "sequence", HIDDEN), True)
    result = normfuse.optimize(original, passes="skip-norm")
    assert op_types(result.model)[-1] == "SkipSimplifiedLayerNormalization"
    assert_same_numerics(original, result.model, {"batch": 3, "sequence": 5, "other": 3}, 42)


def test_different_symbols_are_left_with_a_readable_reason() -> None:
    """`other` may be 1 where `batch` is 3: the Add broadcasts, the Skip op would not."""
    original = _symbolic(("batch", "sequence", HIDDEN), ("other", "sequence", HIDDEN))
    result = normfuse.optimize(original, passes="skip-norm")
    assert skip_nodes(result.model) == []
    (miss,) = result.report.near_misses
    assert miss.reason == "skip-shape"
    assert "[batch, sequence, 32]" in miss.detail and "[other, sequence, 32]" in miss.detail
    assert not any(mark in miss.detail for mark in ("('", "',", "{", "set(", "unk__"))
    feeds = {
        "a": np.ones((3, 5, HIDDEN), np.float32),
        "s": np.random.default_rng(0).normal(size=(1, 5, HIDDEN)).astype(np.float32),
    }
    assert max_abs_diff(original, result.model, feeds) == 0.0


# ------------------------------------------------------------------ --tune-for


def _fake_time(faster: bool):
    """`_measure` with a scripted timing and the real offset-row accuracy (no timing asserted)."""

    def measure(self, family, shape, elem_type, bias):
        interval = (0.5, 0.6) if faster else (1.4, 1.6)
        errors = forms.offset_row_errors(family, shape, elem_type, bias, self.provider)
        return forms.decide(
            family,
            shape,
            elem_type,
            (1.0, sum(interval) / 2),
            (sum(interval) / 2, interval),
            errors,
        )

    return measure


def test_offset_rows_show_the_skip_layer_norm_further_from_float64() -> None:
    unfused, skip = forms.offset_row_errors("layer-norm", (2, 16, 64), F32, True, "cpu")
    assert skip > unfused > 0.0
    choice = forms.decide(
        "layer-norm", (2, 16, 64), F32, (1.0, 0.5), (0.5, (0.45, 0.55)), (unfused, skip)
    )
    assert not choice.use_skip and choice.reason() == "less-accurate"


def test_decide_takes_the_skip_form_only_faster_and_no_less_accurate() -> None:
    fast, slow = (0.5, (0.45, 0.55)), (1.5, (1.4, 1.6))
    noise = (0.995, (0.98, 1.01))
    cases = [(fast, (1.0, 1.0), True), (fast, (1.0, 2.0), False), (slow, (2.0, 1.0), False)]
    cases.append((noise, (2.0, 1.0), False))
    for timing, errors, expected in cases:
        choice = forms.decide("rms-norm", (1, 4, 32), F32, (1.0, timing[0]), timing, errors)
        assert choice.use_skip is expected, (timing, errors)


def test_tune_for_refuses_a_faster_but_less_accurate_skip_form(monkeypatch) -> None:
    monkeypatch.setattr(FormChooser, "_measure", _fake_time(faster=True))
    monkeypatch.setattr(forms, "offset_row_errors", lambda *args: (1e-7, 2e-7))
    monkeypatch.setattr(FormChooser, "_time_pair", lambda *args: (1.0, (0.98, 1.02)))
    original = _symbolic(("batch", "sequence", HIDDEN), ("batch", "sequence", HIDDEN))
    result = normfuse.optimize(original, tune_for="cpu", dims={"batch": 4, "sequence": 6})
    assert skip_nodes(result.model) == []
    (miss,) = result.report.near_misses
    assert miss.reason == "less-accurate" and "offset rows" in miss.detail
    (record,) = [r for r in result.report.tuning if "skip_ratio" in r]
    assert record["timed_shape"] == [4, 6, HIDDEN]
    assert record["model_shape"] == "[batch, sequence, 32]"
    assert record["skip_error"] > record["add_then_norm_error"]
    assert_same_numerics(original, result.model, {"batch": 4, "sequence": 6}, seed=40)


def test_tune_for_times_at_the_dims_shape(monkeypatch) -> None:
    seen = []

    def measure(self, family, shape, elem_type, bias):
        seen.append(shape)
        return forms.decide(family, shape, elem_type, (1.0, 0.5), (0.5, (0.45, 0.55)), (1.0, 1.0))

    monkeypatch.setattr(FormChooser, "_measure", measure)
    monkeypatch.setattr(FormChooser, "_time_pair", lambda *args: (1.0, (0.98, 1.02)))
    original = _symbolic(("batch", "sequence", HIDDEN), ("batch", "sequence", HIDDEN))
    result = normfuse.optimize(original, tune_for="cpu", dims={"batch": 2, "sequence": 9})
    assert seen == [(2, 9, HIDDEN)]
    assert op_types(result.model) == ["SkipSimplifiedLayerNormalization"]
    assert_same_numerics(original, result.model, {"batch": 2, "sequence": 9}, seed=41)


# ------------------------------------------------------------------ an identity Cast (T5)


@pytest.mark.parametrize("to", [F32, F16])
def test_cast_between_sum_and_norm_goes_only_when_it_is_the_identity(to: int) -> None:
    """T5's `.to(float32)` on a float32 stream: Add -> Cast(float) -> norm, the Cast's output
    also read by the next residual Add. A Cast to float16 changes the values: left."""
    shape = (2, 4, HIDDEN)
    norm, params = _norm("rms", "cast", to)
    nodes = [
        helper.make_node("Add", ["a", "s"], ["sum"]),
        helper.make_node("Cast", ["sum"], ["cast"], to=to),
        *norm,
        helper.make_node("Cast", ["y"], ["y32"], to=F32),
        helper.make_node("Cast", ["cast"], ["cast32"], to=F32),
        helper.make_node("Add", ["cast32", "y32"], ["out"]),
    ]
    original = _model(nodes, [_info("a", shape), _info("s", shape)], [_info("out", shape)], params)
    result = normfuse.optimize(original, passes="skip-norm")
    if to == F32:
        assert [n.op_type for n in skip_nodes(result.model)] == ["SkipSimplifiedLayerNormalization"]
    else:
        assert skip_nodes(result.model) == [] and reasons(result) == ["skip-cast"]
    assert_same_numerics(original, result.model, seed=43, rtol=1e-3 if to == F16 else FLOAT32_ATOL)


def test_reshape_minus_one_not_cancelled_is_not_proved() -> None:
    """s = Reshape(MatMul(Reshape(a, [-1, H]), W), [-1, sequence, H]): its -1 is a's batch only
    by counting elements, which the proof does not do: left, with the reason."""
    norm, params = _norm("ln", "sum")
    weight = np.random.default_rng(9).normal(0, 0.2, (HIDDEN, HIDDEN)).astype(np.float32)
    initializers = [
        *params,
        numpy_helper.from_array(weight, "w"),
        numpy_helper.from_array(np.array([-1, HIDDEN], np.int64), "flat"),
        numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
        numpy_helper.from_array(np.array([1], np.int64), "one"),
        numpy_helper.from_array(np.array([3], np.int64), "three"),
    ]
    nodes = [
        helper.make_node("Reshape", ["a", "flat"], ["a2"]),
        helper.make_node("MatMul", ["a2", "w"], ["p2"]),
        helper.make_node("Shape", ["a"], ["a_shape"]),
        helper.make_node("Slice", ["a_shape", "one", "three"], ["tail"]),
        helper.make_node("Concat", ["minus_one", "tail"], ["target"], axis=0),
        helper.make_node("Reshape", ["p2", "target"], ["s"]),
        helper.make_node("Add", ["a", "s"], ["sum"]),
        *norm,
    ]
    shape = ("batch", "sequence", HIDDEN)
    original = _model(nodes, [_info("a", shape)], [_info("y", [None] * 3)], initializers)
    result = normfuse.optimize(original, passes="skip-norm")
    assert skip_nodes(result.model) == [] and reasons(result) == ["skip-shape"]
    assert_same_numerics(original, result.model, {"batch": 3, "sequence": 5}, seed=44)


# Layer-norm residuals (BERT, GPT-2) are left `skip-less-accurate`; RMS ones fuse.
REAL = {"bert_opset14": 0, "gpt2_opset14": 0, "llama_opset17": 4, "t5_encoder_opset17": 4}


@pytest.mark.parametrize(("name", "expected"), REAL.items())
def test_residual_fusion_fires_on_dynamic_exports(name: str, expected: int) -> None:
    """TorchScript exports with symbolic batch and sequence (models/real): every Skip* site the
    proof reaches fuses, and the model computes what it did."""
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "models" / "real" / f"{name}.onnx"
    original = onnx.load(path)
    result = normfuse.optimize(original, passes="group-norm,layer-norm,rms-norm,skip-norm")
    assert len(skip_nodes(result.model)) == expected
    assert set(reasons(result)) <= {"skip-shape", "skip-less-accurate"}
    assert_same_numerics(original, result.model, {"batch": 2, "sequence": 7}, seed=45)
