"""Ranks normfuse trusts agree with ONNX Runtime's, on every committed real export and on the
RoBERTa-style embeddings (issue 34: Hugging Face's position ids through Equal/Cast/CumSum/Mul/Add
lost every layer norm of a RoBERTa export to `unknown-rank`).

A rank is trusted beyond the dim allow-list (`shape_rules.rank_follows`): through every standard
op whose output rank follows from its inputs' ranks and attributes. The sweep runs each model
with every tensor whose rank normfuse trusts as an extra output, and compares the rank, and
every dim it trusts, with what ONNX Runtime produced."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from helpers import assert_same_numerics
from onnx import TensorProto, helper, numpy_helper

import normfuse
from normfuse.facts import model_view
from normfuse.prove import inputs, sessions
from normfuse.prove.guard import runnable

MODELS = Path(__file__).resolve().parent.parent / "models"
MANIFEST = json.loads((MODELS / "manifest.json").read_text())
HIDDEN = 16


def _roberta_embeddings() -> onnx.ModelProto:
    """Word + token-type (a zero Expand-ed to the ids' shape) + position embeddings (ids that
    are not padding, counted by CumSum), then a decomposed layer norm."""
    rng = np.random.default_rng(0)

    def table(name: str, rows: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal((rows, HIDDEN)).astype("f4"), name)

    node = helper.make_node
    nodes = [
        node("Equal", ["ids", "pad"], ["is_pad"]),
        node("Not", ["is_pad"], ["real"]),
        node("Cast", ["real"], ["mask"], to=TensorProto.INT32),
        node("CumSum", ["mask", "one"], ["count"]),
        node("Mul", ["count", "mask"], ["counted"]),
        node("Cast", ["counted"], ["counted64"], to=TensorProto.INT64),
        node("Add", ["counted64", "pad"], ["positions"]),
        node("Gather", ["position_table", "positions"], ["position"]),
        node("Gather", ["word_table", "ids"], ["word"]),
        node("Shape", ["ids"], ["ids_shape"]),
        node("Expand", ["zero_type", "ids_shape"], ["types"]),
        node("Gather", ["type_table", "types"], ["type"]),
        node("Add", ["word", "type"], ["word_type"]),
        node("Add", ["word_type", "position"], ["x"]),
        node("ReduceMean", ["x"], ["mean"], axes=[-1]),
        node("Sub", ["x", "mean"], ["centred"]),
        node("Pow", ["centred", "two"], ["square"]),
        node("ReduceMean", ["square"], ["var"], axes=[-1]),
        node("Add", ["var", "eps"], ["var_eps"]),
        node("Sqrt", ["var_eps"], ["std"]),
        node("Div", ["centred", "std"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array(1, np.int64), "pad"),
        numpy_helper.from_array(np.array(1, np.int32), "one"),
        numpy_helper.from_array(np.zeros((1, 1), np.int64), "zero_type"),
        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        numpy_helper.from_array(np.array(1e-5, np.float32), "eps"),
        table("position_table", 64),
        table("word_table", 50),
        table("type_table", 2),
    ]
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"])
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", HIDDEN])
    graph = helper.make_graph(nodes, "roberta_embeddings", [ids], [out], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    onnx.checker.check_model(model, full_check=True)
    return model


def test_roberta_position_ids_keep_the_rank_and_the_norm_fuses() -> None:
    original = _roberta_embeddings()
    result = normfuse.optimize(original)
    assert [site.kind for site in result.report.sites] == ["layer-norm"]
    assert_same_numerics(original, result.model, dims={"batch": 2, "seq": 7})


def _disagreements(model: onnx.ModelProto) -> list[str]:
    view = model_view.build(model, None)
    graph_outputs = {info.name for info in model.graph.output}
    produced = {out for node in model.graph.node for out in node.output if out}
    ranked = {
        name: found
        for name, found in view.types.items()
        if name in produced and name not in graph_outputs and found[1] is not None
    }
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.extend(helper.make_empty_tensor_value_info(name) for name in ranked)
    feeds, _ = inputs.make_inputs(model, inputs.probe_dims(model))
    names = [info.name for info in probe.graph.output]
    values = dict(zip(names, sessions.create(probe, "cpu").run(None, feeds), strict=True))
    found = []
    for name, (_, dims) in ranked.items():
        actual = np.shape(values[name])
        if len(actual) != len(dims):
            found.append(f"{name}: rank {len(dims)} trusted, ONNX Runtime {len(actual)}")
        elif any(isinstance(d, int) and d != a for d, a in zip(dims, actual, strict=True)):
            found.append(f"{name}: dims {dims} trusted, ONNX Runtime {actual}")
    return found


def _zoo() -> list[str]:
    """The committed fixtures (the manifest also lists exports built on demand)."""
    return sorted(e["file"] for e in MANIFEST["models"] if (MODELS / e["file"]).exists())


@pytest.mark.parametrize("name", ["roberta_embeddings", *_zoo()])
def test_trusted_ranks_and_dims_agree_with_onnx_runtime(name: str) -> None:
    if name == "roberta_embeddings":
        model = _roberta_embeddings()
    else:
        model = onnx.load(str(MODELS / name))
        if not runnable(model):
            pytest.skip("external data or too large to run here")
    assert _disagreements(model) == []
