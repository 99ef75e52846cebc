"""Float16 hazards of GPU runtimes are named: a float16 norm whose squares overflow when every op
rounds to float16 gets a `float16_hazard` record and a table line, its fused node (float32
statistics, `stash_type=1`) evaluated finite on the same rows; float32 models and float16 norms
computed in float32 get none. No GPU: strict float16 is evaluated with NumPy
(`normfuse.prove.strict_float16`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import normfuse
from normfuse.prove import float16_hazards
from normfuse.prove.float16_hazards import probe_rows
from normfuse.prove.strict_float16 import Program

REAL_MODELS = Path(__file__).resolve().parent.parent / "models" / "real"
F16, F32 = TensorProto.FLOAT16, TensorProto.FLOAT
HIDDEN = 64
SHAPE = (2, 4, HIDDEN)
LARGEST_BELOW_256 = 255.875  # float16's largest value whose square (65472) is finite


def _model(nodes, elem_type: int, initializers, opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "norm",
        [helper.make_tensor_value_info("x", elem_type, ["batch", 4, HIDDEN])],
        [helper.make_tensor_value_info("y", elem_type, ["batch", 4, HIDDEN])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _constants(elem_type: int) -> list[onnx.TensorProto]:
    dtype = helper.tensor_dtype_to_np_dtype(elem_type)
    return [
        numpy_helper.from_array(np.array(2.0, dtype), "two"),
        numpy_helper.from_array(np.array(1e-5, dtype), "eps"),
        numpy_helper.from_array(np.ones(HIDDEN, dtype), "gamma"),
        numpy_helper.from_array(np.zeros(HIDDEN, dtype), "beta"),
    ]


def decomposed(kind: str, elem_type: int = F16) -> onnx.ModelProto:
    """A decomposed layer norm (`ln`) or RMS norm (`rms`) computed in `elem_type` throughout."""
    centre = [
        helper.make_node("ReduceMean", ["x"], ["mean"], axes=[-1]),
        helper.make_node("Sub", ["x", "mean"], ["d"]),
    ]
    first = "d" if kind == "ln" else "x"
    nodes = [
        *(centre if kind == "ln" else []),
        helper.make_node("Pow", [first, "two"], ["squares"]),
        helper.make_node("ReduceMean", ["squares"], ["variance"], axes=[-1]),
        helper.make_node("Add", ["variance", "eps"], ["shifted"]),
        helper.make_node("Sqrt", ["shifted"], ["deviation"]),
        helper.make_node("Div", [first, "deviation"], ["normalised"]),
        helper.make_node("Mul", ["normalised", "gamma"], ["scaled" if kind == "ln" else "y"]),
        *([helper.make_node("Add", ["scaled", "beta"], ["y"])] if kind == "ln" else []),
    ]
    constants = _constants(elem_type)
    return _model(nodes, elem_type, constants if kind == "ln" else constants[:3])


def fused_layer_norm() -> onnx.ModelProto:
    """`LayerNormalization` on float16 with float32 statistics (`stash_type=1`)."""
    node = helper.make_node(
        "LayerNormalization", ["x", "gamma", "beta"], ["y"], epsilon=1e-5, stash_type=1
    )
    return _model([node], F16, _constants(F16)[2:])


# ------------------------------------------------------------ the evaluator itself


def _single(op: str, values: list[np.ndarray], **attrs) -> onnx.ModelProto:
    names = [f"in{k}" for k in range(len(values))]
    graph = helper.make_graph(
        [helper.make_node(op, names, ["out"], **attrs)],
        op,
        [
            helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for name, v in zip(names, values, strict=True)
        ],
        [helper.make_tensor_value_info("out", F16, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("op", ["Pow", "Mul", "Div", "Sqrt"])
def test_elementwise_ops_round_as_onnx_reference_computes_float16(op: str) -> None:
    """onnx.reference computes these float16 ops in float16 (NumPy rounds each result once):
    the strict evaluator agrees bit for bit, overflows included."""
    rng = np.random.default_rng(3)
    first = (rng.uniform(0.0, 400.0, 256) * rng.choice([-1, 1], 256)).astype(np.float16)
    second = rng.uniform(0.5, 300.0, 256).astype(np.float16)
    values = {"Pow": [first, np.array(2.0, np.float16)], "Sqrt": [np.abs(first)]}
    inputs = values.get(op, [first, second])
    model = _single(op, inputs)
    feeds = {f"in{k}": value for k, value in enumerate(inputs)}
    with np.errstate(all="ignore"):
        expected = ReferenceEvaluator(model).run(None, feeds)[0]
    actual = Program(model).run(feeds)["out"]
    assert actual.dtype == np.float16 and np.isinf(expected).any() == (op in ("Pow", "Mul"))
    np.testing.assert_array_equal(actual, expected)


def test_reductions_round_once_where_onnx_reference_rounds_the_sum() -> None:
    """Why the evaluator is normfuse's own: onnx.reference's float16 ReduceMean rounds the sum
    (128000) to float16 before dividing, inf; a float16 kernel with a float32 accumulator (and
    the strict evaluator) gives the mean, 2000. Its ReduceSum rounds the sum once: both agree."""
    rows = np.full((1, 64), 2000.0, np.float16)
    axes = np.array([-1], np.int64)
    for op, strict in (("ReduceMean", 2000.0), ("ReduceSum", np.inf)):
        model = _single(op, [rows, axes])
        feeds = {"in0": rows, "in1": axes}
        with np.errstate(all="ignore"):
            assert np.isinf(ReferenceEvaluator(model).run(None, feeds)[0]).all()
        assert Program(model).run(feeds)["out"].item() == strict


def test_fused_layer_norm_keeps_float32_statistics_where_onnx_reference_does_not() -> None:
    """onnx.reference's LayerNormalization ignores `stash_type`: on float16 rows of ±300 its
    variance overflows and it returns 0; with float32 statistics the rows normalise to ±1."""
    model = fused_layer_norm()
    feeds = {"x": probe_rows(SHAPE, 300.0)}
    with np.errstate(all="ignore"):
        theirs = ReferenceEvaluator(model).run(None, feeds)[0]
    ours = Program(model).run(feeds)["y"]
    assert np.all(theirs == 0)
    np.testing.assert_array_equal(ours, np.sign(feeds["x"]).astype(np.float16))


@pytest.mark.parametrize("kind", ["ln", "rms"])
def test_squares_overflow_from_spread_256(kind: str) -> None:
    """In strict float16 the squares of rows of spread 256 are inf (65536 > 65504), those of the
    largest float16 below it finite; the fused node is finite on both."""
    program, fused = Program(decomposed(kind)), Program(fused_layer_norm())
    wide = {"x": probe_rows(SHAPE, 256.0)}
    assert float16_hazards.non_finite(program.model, program.run(wide))[0] == ("Pow", "squares")
    assert not float16_hazards.non_finite(
        program.model, program.run({"x": probe_rows(SHAPE, LARGEST_BELOW_256)})
    )
    assert not float16_hazards.non_finite(fused.model, fused.run(wide))
    assert float16_hazards.max_finite_spread(program, wide) == LARGEST_BELOW_256


# ------------------------------------------------------------ the report


@pytest.mark.parametrize("kind", ["ln", "rms"])
def test_float16_site_carries_its_hazard(kind: str) -> None:
    result = normfuse.optimize(decomposed(kind))
    (site,) = result.report.sites
    record = site.float16_hazard
    assert record["first_non_finite"] == {"op": "Pow", "tensor": "squares"}
    assert record["non_finite_ops"][:2] == ["Pow", "ReduceMean"]
    assert record["max_finite_spread"] == LARGEST_BELOW_256
    # The overflowed variance divides the rows to 0: the output is beta, 1 from float64's ±1.
    assert record["original_output_finite"] and record["original_error"] == pytest.approx(1.0)
    assert record["fused_finite"] and record["fused_error"] < 1e-3
    as_json = json.loads(result.report.to_json())
    assert as_json["sites"][0]["float16_hazard"] == record
    assert float16_hazards.NOTE in as_json["notes"]
    lines = [line for line in result.report.table().splitlines() if "float16 hazard" in line]
    assert lines == [
        "float16 hazard 'y': Pow inf at ±300, finite to |x-mean| 255.875; fused: finite",
        float16_hazards.NOTE,
    ]


def test_inspect_names_the_hazard() -> None:
    report = normfuse.inspect(decomposed("ln"))
    assert report.sites[0].float16_hazard["max_finite_spread"] == LARGEST_BELOW_256


@pytest.mark.parametrize("kind", ["ln", "rms"])
def test_float32_model_has_no_hazard_record(kind: str) -> None:
    result = normfuse.optimize(decomposed(kind, F32))
    assert [site.float16_hazard for site in result.report.sites] == [None]
    as_json = json.loads(result.report.to_json())
    assert "float16_hazard" not in as_json["sites"][0]
    assert float16_hazards.NOTE not in as_json["notes"]


def test_float16_export_computing_its_squares_in_float32_has_none() -> None:
    """The zoo's float16 exports cast to float32 (dynamo) or float64 (TorchScript's layer norm)
    before the squares: nothing overflows, nothing is named."""
    report = normfuse.inspect(REAL_MODELS / "llama_opset18_dynamo_float16.onnx")
    assert report.sites and not any(site.float16_hazard for site in report.sites)


def test_float16_conversion_of_a_real_export_is_named_site_by_site() -> None:
    """ONNX Runtime's own float16 converter (how float32 exports are made float16 for GPUs)
    leaves ViT's decomposed layer norms computing their squares in float16: every one is named,
    and each fused node is finite on the rows that overflow the original."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = convert_float_to_float16(onnx.load(REAL_MODELS / "vit_opset16.onnx"))
    report = normfuse.inspect(model)
    records = [site.float16_hazard for site in report.sites]
    assert len(records) == 5 and all(records)
    assert {record["max_finite_spread"] for record in records} == {LARGEST_BELOW_256}
    assert all(record["fused_finite"] for record in records)
    assert all(record["original_error"] > 1.0 > 1e-3 > record["fused_error"] for record in records)
