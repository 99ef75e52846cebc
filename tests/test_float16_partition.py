"""Where ONNX Runtime's CPU provider rounds float16 values is read from the graph it runs
(`float16_partition`), and a float16 norm's fused node rounds its input and result exactly
where the original does (issue 34: a move kept in float16 by a second move, a graph output or
a reader with a float16 kernel rounds in the original; 109 of 128 values differed)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from helpers import session
from onnx import TensorProto, helper, numpy_helper

import normfuse
from normfuse.facts.float16_partition import read_float16

F16 = TensorProto.FLOAT16
ROWS, WIDTH = 8, 16


def _layer_norm(x: str, out: str) -> list[onnx.NodeProto]:
    return [
        helper.make_node("ReduceMean", [x], ["mean"], axes=[-1]),
        helper.make_node("Sub", [x, "mean"], ["centred"]),
        helper.make_node("Pow", ["centred", "two"], ["square"]),
        helper.make_node("ReduceMean", ["square"], ["var"], axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["var_eps"]),
        helper.make_node("Sqrt", ["var_eps"], ["std"]),
        helper.make_node("Div", ["centred", "std"], ["normed"]),
        helper.make_node("Mul", ["normed", "gamma"], ["scaled"]),
        helper.make_node("Add", ["scaled", "beta"], [out]),
    ]


def _model(before: list, after: list, outputs: list[tuple[str, list[int]]]) -> onnx.ModelProto:
    """p = a * b in float16 (run in float32 by ONNX Runtime), `before` from p to `x`, a layer
    norm of `x` into `z` over WIDTH // 2 wide rows, `after` from `z`."""
    half = WIDTH // 2
    inits = [
        helper.make_tensor("two", F16, [], [2.0]),
        helper.make_tensor("eps", F16, [], [1e-5]),
        helper.make_tensor("amp", F16, [], [50.0]),
        helper.make_tensor("rows", TensorProto.INT64, [2], [ROWS * 2, half]),
        numpy_helper.from_array(np.linspace(0.5, 1.5, half).astype(np.float16), "gamma"),
        numpy_helper.from_array(np.linspace(-0.1, 0.1, half).astype(np.float16), "beta"),
    ]
    nodes = [helper.make_node("Mul", ["a", "b"], ["p"]), *before, *_layer_norm("x", "z"), *after]
    io = [helper.make_tensor_value_info(name, F16, [ROWS, WIDTH]) for name in ("a", "b")]
    out = [helper.make_tensor_value_info(name, F16, shape) for name, shape in outputs]
    graph = helper.make_graph(nodes, "partition", io, out, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model, full_check=True)
    return model


def _reshape(source: str, target: str, shape: str = "rows") -> onnx.NodeProto:
    return helper.make_node("Reshape", [source, shape], [target])


def _transpose(source: str, target: str) -> onnx.NodeProto:
    return helper.make_node("Transpose", [source], [target], perm=[1, 0])


# name -> (model, whether the original rounds the norm's input)
CASES = {
    "one move alone between float32 ops": (
        lambda: _model([_reshape("p", "x")], [], [("z", [ROWS * 2, WIDTH // 2])]),
        False,
    ),
    "two moves": (
        lambda: _model(
            [_transpose("p", "t"), _reshape("t", "x")], [], [("z", [ROWS * 2, WIDTH // 2])]
        ),
        True,
    ),
    "the moved value is also a graph output": (
        lambda: _model(
            [_reshape("p", "x")], [], [("z", [ROWS * 2, WIDTH // 2]), ("x", [ROWS * 2, 8])]
        ),
        True,
    ),
    "a reader with a float16 kernel beside the norm": (
        lambda: _model(
            [_reshape("p", "x"), helper.make_node("Max", ["x", "x"], ["m"])],
            [],
            [("z", [ROWS * 2, WIDTH // 2]), ("m", [ROWS * 2, 8])],
        ),
        True,
    ),
    "a Shape reader beside the norm": (
        lambda: _model(
            [_reshape("p", "x"), helper.make_node("Shape", ["x"], ["s"])],
            [],
            [("z", [ROWS * 2, WIDTH // 2])],
        ),
        None,  # whatever ONNX Runtime does: the fused model must do the same
    ),
}


def _assert_close(actual: np.ndarray, expected: np.ndarray) -> None:
    """Within float16's tolerance (a kernel's float order may move one ulp); a rounding in one
    model and not the other moves a normalised offset row by about 1."""
    np.testing.assert_allclose(
        actual.astype(np.float64), expected.astype(np.float64), rtol=1e-2, atol=1e-2
    )


def _offset_feeds(seed: int, offset: float) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = (offset + 0.05 * rng.standard_normal((ROWS, WIDTH))).astype(np.float16)
    return {"a": a, "b": np.ones((ROWS, WIDTH), np.float16)}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_norm_input_is_rounded_where_onnx_runtime_rounds_it(name: str) -> None:
    build, rounds = CASES[name]
    original = build()
    reads = read_float16(original)
    assert reads is not None
    if rounds is not None:
        assert reads.is_rounded("mean", "x") is rounds
    result = normfuse.optimize(original)
    assert [site.kind for site in result.report.sites] == ["layer-norm"]
    for seed, offset in ((0, 100.0), (1, 1000.0), (2, 0.0)):
        feeds = _offset_feeds(seed, offset)
        expected, actual = (session(m).run(None, feeds) for m in (original, result.model))
        for before, after in zip(expected, actual, strict=True):
            _assert_close(after, before)


def test_a_result_moved_twice_is_rounded_where_the_original_rounds_it() -> None:
    """z -> Transpose -> Reshape -> amplified: ONNX Runtime keeps the two moves in float16, so
    the original rounds the result; the fused model's Cast stays at the norm (not below the
    moves, where ONNX Runtime would drop it)."""
    after = [
        _transpose("z", "zt"),
        _reshape("zt", "zr"),
        helper.make_node("Mul", ["zr", "amp"], ["za"]),
        helper.make_node("Sub", ["za", "zr"], ["y"]),
    ]
    original = _model([_transpose("p", "x")], after, [("y", [ROWS * 2, WIDTH // 2])])
    reads = read_float16(original)
    assert reads is not None and reads.is_rounded("za", "zr") is True
    result = normfuse.optimize(original)
    assert [site.kind for site in result.report.sites] == ["layer-norm"]
    for seed in range(3):
        feeds = _offset_feeds(seed, 100.0)
        expected, actual = (session(m).run(None, feeds)[0] for m in (original, result.model))
        _assert_close(actual, expected)


def test_reads_differ_where_a_cast_is_dropped() -> None:
    """The guard's comparison: a rewrite whose Cast ONNX Runtime drops reads unrounded where
    the original rounds, and the difference names the read."""
    original = _model([_transpose("p", "t"), _reshape("t", "x")], [], [("z", [16, 8])])
    widened = onnx.ModelProto()
    widened.CopyFrom(original)
    # The same model with p cast to float32 first: the moves run in float32 in ONNX Runtime.
    nodes = list(widened.graph.node)
    nodes[0].output[0] = "p32"
    nodes[0].op_type = "Mul"
    widened.graph.ClearField("node")
    widened.graph.node.extend(
        [
            helper.make_node("Cast", ["a"], ["a32"], to=TensorProto.FLOAT),
            helper.make_node("Cast", ["b"], ["b32"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["a32", "b32"], ["p32"]),
            helper.make_node("Transpose", ["p32"], ["t32"], perm=[1, 0]),
            helper.make_node("Reshape", ["t32", "rows"], ["x32"]),
            helper.make_node("Cast", ["x32"], ["x"], to=F16),
            *nodes[3:],
        ]
    )
    before, after = read_float16(original), read_float16(widened)
    assert before is not None and after is not None
    differences = before.differences(after)
    assert any("'x'" in line and "rounded in the original" in line for line in differences)


def test_an_integer_cast_to_float16_that_onnx_runtime_merges_is_not_rounded_by_the_rewrite() -> (
    None
):
    """ADV13-01: ids -> Cast(float16) -> a float16 layer norm. ONNX Runtime merges the Cast
    with its own Cast to float32, so the original never rounds ids past 2048; the fused node's
    input Cast would read them rounded (0.155 apart). The guard reads both graphs and leaves
    the site (`float16-rounding`): the output is the original."""
    nodes = [helper.make_node("Cast", ["ids"], ["h"], to=F16), *_layer_norm("h", "z")[:7]]
    nodes[-1] = helper.make_node("Div", ["centred", "std"], ["z"])
    inits = [
        helper.make_tensor("two", F16, [], [2.0]),
        helper.make_tensor("eps", F16, [], [1e-5]),
    ]
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 16])
    out = helper.make_tensor_value_info("z", F16, [2, 16])
    graph = helper.make_graph(nodes, "ids", [ids], [out], inits)
    original = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(original, full_check=True)
    result = normfuse.optimize(original)
    assert result.report.sites == []
    assert [miss.reason for miss in result.report.near_misses] == ["float16-rounding"]
    feeds = {"ids": np.random.default_rng(0).integers(2049, 2080, (2, 16)).astype(np.int64)}
    expected, actual = (session(m).run(None, feeds)[0] for m in (original, result.model))
    np.testing.assert_array_equal(actual, expected)


def test_moves_inside_a_model_local_function_are_refused_not_guessed() -> None:
    """ONNX Runtime inlines a function under other names, so where it rounds inside the body
    is not read: a float16 norm whose input is moved from a float32-run op there is left
    (`float16-rounding`), never lifted on a guess."""
    body = [
        helper.make_node("Mul", ["a", "b"], ["p"]),
        _transpose("p", "x"),
        *_layer_norm("x", "z"),
    ]
    constants = [
        helper.make_node("Constant", [], [name], value=tensor)
        for name, tensor in (
            ("two", helper.make_tensor("two_value", F16, [], [2.0])),
            ("eps", helper.make_tensor("eps_value", F16, [], [1e-5])),
            ("gamma", numpy_helper.from_array(np.ones(ROWS, np.float16))),
            ("beta", numpy_helper.from_array(np.zeros(ROWS, np.float16))),
        )
    ]
    function = helper.make_function(
        "local", "Norm", ["a", "b"], ["z"], constants + body, [helper.make_opsetid("", 13)]
    )
    call = helper.make_node("Norm", ["a", "b"], ["z"], domain="local")
    io = [helper.make_tensor_value_info(name, F16, [ROWS, WIDTH]) for name in ("a", "b")]
    out = [helper.make_tensor_value_info("z", F16, [WIDTH, ROWS])]
    graph = helper.make_graph([call], "function", io, out)
    opsets = [helper.make_opsetid("", 13), helper.make_opsetid("local", 1)]
    original = helper.make_model(graph, opset_imports=opsets, functions=[function])
    onnx.checker.check_model(original, full_check=True)
    result = normfuse.optimize(original)
    assert result.report.sites == []
    assert "float16-rounding" in [miss.reason for miss in result.report.near_misses]
