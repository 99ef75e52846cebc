"""A sweep of float16 arrangements around a norm, judged against ONNX Runtime itself: chains of
one to three value moves before or after a float16 layer norm computed from a float32-run op,
with each kind of second reader of the moved value (none, a graph output, a reader with a
float16 kernel, an explicit Cast, a `Shape`, a reader without one), in the main graph. A fused
model must give the original's values within float16's tolerance on offset rows and near
float16's limits, where a rounding in one and not the other moves values by far more (rows of
100 + 0.05 N are resolved to 0.06 in float16: a normalised value moves by about 1); a refused
site must say `float16-rounding` or be rolled back by the guard (issue 34)."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from helpers import session
from onnx import TensorProto, helper, numpy_helper

import normfuse

F16 = TensorProto.FLOAT16
ROWS, WIDTH = 4, 12
# Chains of moves, each keeping [ROWS, WIDTH] -> some shape whose last axis the norm reads.
CHAINS = {
    1: [("Transpose", {"perm": [1, 0]})],
    2: [("Transpose", {"perm": [1, 0]}), ("Reshape", {})],
    3: [("Reshape", {}), ("Transpose", {"perm": [1, 0]}), ("Identity", {})],
}
READERS = ("none", "graph-output", "max", "cast", "shape", "exp")
SIDES = ("input", "output")


def _moves(source: str, length: int, stem: str, nodes: list, inits: list) -> str:
    """Append the chain of `length` moves reading `source`; return the last tensor's name."""
    current = source
    for index, (op, attrs) in enumerate(CHAINS[length]):
        target = f"{stem}{index}"
        inputs = [current]
        if op == "Reshape":
            shape = f"{stem}_shape{index}"
            inits.append(numpy_helper.from_array(np.array([-1, 6], np.int64), shape))
            inputs.append(shape)
        nodes.append(helper.make_node(op, inputs, [target], **attrs))
        current = target
    return current


def _second_reader(moved: str, reader: str, nodes: list, outputs: list) -> None:
    if reader == "graph-output":
        outputs.append(helper.make_tensor_value_info(moved, F16, None))
    elif reader == "max":
        nodes.append(helper.make_node("Max", [moved, moved], ["side"]))
        outputs.append(helper.make_tensor_value_info("side", F16, None))
    elif reader == "cast":
        nodes.append(helper.make_node("Cast", [moved], ["side"], to=TensorProto.FLOAT))
        outputs.append(helper.make_tensor_value_info("side", TensorProto.FLOAT, None))
    elif reader == "shape":
        nodes.append(helper.make_node("Shape", [moved], ["side"]))
        outputs.append(helper.make_tensor_value_info("side", TensorProto.INT64, None))
    elif reader == "exp":
        nodes.append(helper.make_node("Exp", [moved], ["side"]))
        outputs.append(helper.make_tensor_value_info("side", F16, None))


def _layer_norm(x: str, out: str, nodes: list) -> None:
    nodes += [
        helper.make_node("ReduceMean", [x], ["mean"], axes=[-1]),
        helper.make_node("Sub", [x, "mean"], ["centred"]),
        helper.make_node("Pow", ["centred", "two"], ["square"]),
        helper.make_node("ReduceMean", ["square"], ["var"], axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["var_eps"]),
        helper.make_node("Sqrt", ["var_eps"], ["std"]),
        helper.make_node("Div", ["centred", "std"], [out]),
    ]


def _model(length: int, reader: str, side: str) -> onnx.ModelProto:
    nodes = [helper.make_node("Mul", ["a", "b"], ["p"])]
    inits = [
        numpy_helper.from_array(np.array(2.0, np.float16), "two"),
        numpy_helper.from_array(np.array(1e-3, np.float16), "eps"),
        numpy_helper.from_array(np.array(3.0, np.float16), "amp"),
    ]
    outputs: list = []
    if side == "input":
        moved = _moves("p", length, "m", nodes, inits)
        _second_reader(moved, reader, nodes, outputs)
        _layer_norm(moved, "normed", nodes)
        nodes.append(helper.make_node("Mul", ["normed", "amp"], ["y"]))
    else:
        _layer_norm("p", "normed", nodes)
        moved = _moves("normed", length, "m", nodes, inits)
        _second_reader(moved, reader, nodes, outputs)
        nodes.append(helper.make_node("Mul", [moved, "amp"], ["y"]))
    outputs.insert(0, helper.make_tensor_value_info("y", F16, None))
    io = [helper.make_tensor_value_info(name, F16, [ROWS, WIDTH]) for name in ("a", "b")]
    graph = helper.make_graph(nodes, "sweep", io, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model = onnx.shape_inference.infer_shapes(model)
    onnx.checker.check_model(model, full_check=True)
    return model


def _feeds(seed: int) -> list[dict[str, np.ndarray]]:
    """Products a * b that float16 cannot hold, in rows of a large mean and a small spread (a
    rounding moves a normalised value by about 1), and near float16's limit."""
    rng = np.random.default_rng(seed)
    shape = (ROWS, WIDTH)

    def uniform(low: float, high: float) -> np.ndarray:
        return rng.uniform(low, high, shape).astype(np.float16)

    return [
        {"a": uniform(100, 101), "b": uniform(1.0, 1.01)},
        {"a": uniform(30, 31), "b": uniform(30, 30.5)},
        {"a": uniform(-240, 240), "b": uniform(100, 200)},
    ]


@pytest.mark.parametrize(
    ("length", "reader", "side"), list(itertools.product(CHAINS, READERS, SIDES))
)
def test_float16_arrangement_rounds_where_onnx_runtime_rounds(
    length: int, reader: str, side: str
) -> None:
    original = _model(length, reader, side)
    result = normfuse.optimize(original)
    if not result.report.sites:
        reasons = {miss.reason for miss in result.report.near_misses}
        assert reasons & {"float16-rounding", "output-differs"}, reasons
        return
    assert [site.kind for site in result.report.sites] == ["layer-norm"]
    before, after = session(original), session(result.model)
    for feeds in _feeds(length):
        for expected, actual in zip(before.run(None, feeds), after.run(None, feeds), strict=True):
            np.testing.assert_allclose(
                actual.astype(np.float64), expected.astype(np.float64), rtol=1e-2, atol=1e-2
            )
