"""How often one `optimize` call runs onnx's shape inference and onnx-graphsurgeon's import
(issue 25): counted, never timed, on a zoo model whose Reshape targets are folded (BERT: the
types are derived in two rounds), plain, with `--tune-for` (on a scripted clock) and with
`--validate`."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnx.shape_inference
import onnx_graphsurgeon as gs
import pytest

import normfuse
from normfuse.measure.forms import FormChoice, FormChooser
from normfuse.prove.validate import ValidationOptions

BERT = Path(__file__).resolve().parents[1] / "models" / "real" / "bert_opset16.onnx"
DIMS = {"batch": 1, "sequence": 8}


def _counted(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """Counts of `infer_shapes` and `import_onnx` calls from here on."""
    counts: Counter = Counter()

    def counting(name: str, function):
        def call(*args, **kwargs):
            counts[name] += 1
            return function(*args, **kwargs)

        return call

    infer, imports = onnx.shape_inference.infer_shapes, gs.import_onnx
    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", counting("infer", infer))
    monkeypatch.setattr(gs, "import_onnx", counting("import", imports))
    return counts


def _equal_timings(monkeypatch: pytest.MonkeyPatch) -> None:
    """A scripted clock: every fused form times equal to its decomposed one (nothing excluded)."""

    def measure(self, family, shape, elem_type, bias):
        return FormChoice(family, shape, "float", 1.0, 1.0, 1.0, (0.98, 1.02), False)

    monkeypatch.setattr(FormChooser, "_measure", measure)
    monkeypatch.setattr(FormChooser, "_time_pair", lambda *args: (1.0, (0.98, 1.02)))


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        # before issue 25's change: plain 3 / 3, --tune-for 6 / 5, --validate 3 / 3
        ("plain", {"infer": 3, "import": 1}),
        ("tune", {"infer": 6, "import": 2}),
        ("validate", {"infer": 3, "import": 1}),
    ],
)
def test_inference_and_imports_per_optimize(
    mode: str, expected: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inference: the derived types (once, and once more after Reshape targets fold: the model
    changed), and the output guard's strict inference of the rewrite (another model); with
    `--tune-for`, the types at the timed shapes (another model: three more). Imports: one, read
    by every fold round and then rewritten (`ModelView.import_graph`); with `--tune-for`, one
    more for the folding at the timed shapes. A rebuild (an exclusion, a blocked opset)
    imports again: the rewrite changed the graph it had."""
    model = onnx.load(BERT)
    options: dict = {}
    if mode == "tune":
        _equal_timings(monkeypatch)
        options = {"tune_for": "cpu", "dims": DIMS}
    elif mode == "validate":
        options = {"validation": ValidationOptions(dims=DIMS)}
    counts = _counted(monkeypatch)
    result = normfuse.optimize(model, **options)
    assert len(result.report.sites) == 5
    if mode == "validate":
        assert result.report.validation.rolled_back == []
    assert dict(counts) == expected


def _large_weight_model() -> onnx.ModelProto:
    """A Reshape target computed from the values of a weight the skeleton makes a graph input
    (4097 elements): read as a constant it would fold to [1, -1]; as the skeleton reads it, it
    folds to nothing. The first Reshape's target goes through an Identity of `Shape(weight)`."""
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.ones(4097, np.int64), "weight")
    nodes = [
        helper.make_node("Shape", ["weight"], ["weight_shape"]),
        helper.make_node("Identity", ["weight_shape"], ["target1"]),
        helper.make_node("Reshape", ["x", "target1"], ["r1"]),
        helper.make_node("Slice", ["weight", "zero", "one"], ["first"]),
        helper.make_node("Concat", ["first", "minus_one"], ["target2"], axis=0),
        helper.make_node("Reshape", ["r1", "target2"], ["y"]),
    ]
    constants = [
        numpy_helper.from_array(np.array([value], np.int64), name)
        for name, value in (("zero", 0), ("one", 1), ("minus_one", -1))
    ]
    graph = helper.make_graph(
        nodes,
        "large_weight",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4097])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [weight, *constants],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(
    "source",
    [
        "gpt_neox_opset16.onnx",  # three fold rounds, large weights
        "phi3_opset16.onnx",  # three fold rounds
        "bert_opset16.onnx",
        "large weight",
    ],
)
def test_the_folding_reads_the_imported_graph_as_the_skeleton(source: str) -> None:
    """Folding Reshape targets on the one imported graph (`SkeletonGraph`: weights held as no
    constant, earlier rounds' folds held as constants) derives exactly the types that importing
    the skeleton in every round derives."""
    from normfuse.facts.shapes import derive_types
    from normfuse.ir.graph_import import import_graph
    from normfuse.ir.scopes import unique_names

    if source == "large weight":
        model = _large_weight_model()
    else:
        model = onnx.load(BERT.parent / source, load_external_data=False)
    model = unique_names(model)
    imported = derive_types(model, import_graph(model))
    assert imported == derive_types(model)
    if source == "large weight":
        # the weight's values are never read: y's dims stay unknown
        assert not any(isinstance(dim, int) for dim in imported.types["y"][1])
