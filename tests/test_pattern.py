"""Matcher semantics on toy graphs: commutativity, alternatives, repeated names, constants in each
form, recomputed subexpressions."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import helper, numpy_helper

from normfuse.facts.constants import ConstantReader, reduce_axes
from normfuse.match.pattern import AnyOf, Const, Op, Var, match

READER = ConstantReader(None, opset=17)  # the toy graphs' opset
FLOAT = onnx.TensorProto.FLOAT


def graph(nodes, initializers=(), inputs=("a", "b")) -> gs.Graph:
    model = helper.make_model(
        helper.make_graph(
            nodes,
            "toy",
            [helper.make_tensor_value_info(name, FLOAT, [2, 3]) for name in inputs],
            [helper.make_tensor_value_info(nodes[-1].output[0], FLOAT, None)],
            list(initializers),
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    return gs.import_onnx(model)


def tensor(g: gs.Graph, name: str) -> gs.Tensor:
    return g.tensors()[name]


def first(pattern, t):
    return next(match(pattern, t, READER), None)


def test_add_and_mul_match_in_either_operand_order() -> None:
    g = graph([helper.make_node("Sqrt", ["a"], ["s"]), helper.make_node("Mul", ["b", "s"], ["y"])])
    found = first(Op("Mul", Op("Sqrt", Var("x"), name="root"), Var("other")), tensor(g, "y"))
    assert found is not None
    assert found["x"].name == "a" and found["other"].name == "b"
    assert [node.op for node in found.nodes] == ["Mul", "Sqrt"]


def test_sub_is_not_commutative() -> None:
    g = graph([helper.make_node("Sqrt", ["a"], ["s"]), helper.make_node("Sub", ["b", "s"], ["y"])])
    assert first(Op("Sub", Op("Sqrt", Var("x")), Var("other")), tensor(g, "y")) is None


def test_repeated_name_must_bind_the_same_tensor() -> None:
    square = Op("Mul", Var("d"), Var("d"))
    same = graph([helper.make_node("Mul", ["a", "a"], ["y"])])
    different = graph([helper.make_node("Mul", ["a", "b"], ["y"])])
    assert first(square, tensor(same, "y")) is not None
    assert first(square, tensor(different, "y")) is None


def test_repeated_name_accepts_an_identical_recomputation() -> None:
    g = graph(
        [
            helper.make_node("Sub", ["a", "b"], ["d1"]),
            helper.make_node("Sub", ["a", "b"], ["d2"]),
            helper.make_node("Mul", ["d1", "d2"], ["y"]),
        ]
    )
    d = Op("Sub", Var("x"), Var("m"), name="d")
    found = first(Op("Mul", d, d), tensor(g, "y"))
    assert found is not None
    assert sorted(node.name for node in found.nodes) == sorted(n.name for n in g.nodes)


def test_repeated_name_rejects_a_different_computation() -> None:
    g = graph(
        [
            helper.make_node("Sub", ["a", "b"], ["d1"]),
            helper.make_node("Sub", ["b", "a"], ["d2"]),
            helper.make_node("Mul", ["d1", "d2"], ["y"]),
        ]
    )
    d = Op("Sub", Var("x"), Var("m"), name="d")
    assert first(Op("Mul", d, d), tensor(g, "y")) is None


def test_alternatives_are_tried_in_order() -> None:
    g = graph(
        [helper.make_node("Reciprocal", ["a"], ["r"]), helper.make_node("Mul", ["b", "r"], ["y"])]
    )
    pattern = Op(
        "Mul",
        Var("n"),
        AnyOf(Op("Sqrt", Var("x"), name="sqrt"), Op("Reciprocal", Var("x"), name="reciprocal")),
    )
    found = first(pattern, tensor(g, "y"))
    assert found is not None and "reciprocal" in found and "sqrt" not in found


def constant_forms():
    two = np.array(2.0, np.float32)
    return {
        "initializer": ([], [numpy_helper.from_array(two, "c")]),
        "value": (
            [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(two))],
            [],
        ),
        "value_float": ([helper.make_node("Constant", [], ["c"], value_float=2.0)], []),
        "value_floats": ([helper.make_node("Constant", [], ["c"], value_floats=[2.0])], []),
        "identity": (
            [helper.make_node("Identity", ["c0"], ["c"])],
            [numpy_helper.from_array(two, "c0")],
        ),
        "cast": (
            [
                helper.make_node("Constant", [], ["c0"], value_int=2),
                helper.make_node("Cast", ["c0"], ["c"], to=FLOAT),
            ],
            [],
        ),
    }


def test_constants_match_by_value_in_every_form() -> None:
    for form, (nodes, initializers) in constant_forms().items():
        g = graph([*nodes, helper.make_node("Pow", ["a", "c"], ["y"])], initializers)
        assert first(Op("Pow", Var("x"), Const("two", 2.0)), tensor(g, "y")) is not None, form
        assert first(Op("Pow", Var("x"), Const("three", 3.0)), tensor(g, "y")) is None, form


def test_const_does_not_match_a_computed_tensor() -> None:
    g = graph([helper.make_node("Sqrt", ["b"], ["c"]), helper.make_node("Pow", ["a", "c"], ["y"])])
    assert first(Op("Pow", Var("x"), Const("e")), tensor(g, "y")) is None


def test_reduce_axes_from_attribute_or_input_normalised_to_negative() -> None:
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    g = graph(
        [
            helper.make_node("ReduceMean", ["a"], ["m1"], axes=[1]),
            helper.make_node("ReduceSum", ["a", "axes"], ["m2"]),
            helper.make_node("ReduceMean", ["a"], ["m3"]),
            helper.make_node("Add", ["m1", "m2"], ["y"]),
        ],
        [axes],
    )
    nodes = {node.outputs[0].name: node for node in g.nodes}
    assert reduce_axes(nodes["m1"], 2, READER) == (-1,)
    assert reduce_axes(nodes["m2"], 2, READER) == (-1,)
    assert reduce_axes(nodes["m3"], 2, READER) == (-2, -1)
    assert reduce_axes(nodes["m1"], None, READER) is None
