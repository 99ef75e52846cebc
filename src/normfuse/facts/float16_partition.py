"""Where ONNX Runtime's CPU provider rounds a float16 value, read from ONNX Runtime itself.

The CPU provider runs a float16 node that has no float16 kernel in float32, with Casts around
it, and removes the Cast pairs between two such nodes; whether a value between them is rounded
to float16 depends on its whole neighbourhood (a move with a float16 kernel stays float16 unless
every producer and reader runs in float32; a second reader, a graph output or an explicit Cast
keeps it float16). Rather than model that, this module asks ONNX Runtime for the graph it runs:
the session writes its graph after the float32 fallback (`optimized_model_filepath`, graph
optimisations off), in which the float32 copy of an original float16 value is named
`InsertedPrecisionFreeCast_<name>` and every other value keeps its name and type.

A read is *rounded* when the value a node reads, followed back through Casts and value moves to
the node that computed it, was held as float16 on the way (a graph input or initializer counts
too: the fused node then reads that float16 value, as the original does). Reads are keyed by the
reader's first output and the original name of the tensor read, so the same read can be looked
up in the original and in a rewrite.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import onnx

from normfuse.io.skeleton import skeleton
from normfuse.ir.float16_moves import MOVERS
from normfuse.ir.scopes import all_graphs

PREFIX = "InsertedPrecisionFreeCast_"
# A read: (the reader's first output, the original name of the tensor it reads).
Read = tuple[str, str]


@dataclass(frozen=True)
class Float16Reads:
    """Every read of a float16 value in a model as ONNX Runtime's CPU provider runs it: rounded
    or not, and the op of each reader."""

    rounded: dict[Read, bool]
    ops: dict[str, str]

    def is_rounded(self, reader_output: str, tensor: str) -> bool | None:
        """Whether the reader that writes `reader_output` reads `tensor` rounded to float16;
        None where the read is not in ONNX Runtime's graph (a body or function it rewrote)."""
        return self.rounded.get((reader_output, tensor))

    def differences(self, other: Float16Reads) -> list[str]:
        """The reads both models have (same reader op) that one rounds and the other does not,
        as sentences, ordered."""
        found = []
        for read, rounded in sorted(self.rounded.items()):
            theirs = other.rounded.get(read)
            if theirs is None or theirs == rounded or self.ops[read[0]] != other.ops.get(read[0]):
                continue
            where = "rounded" if rounded else "unrounded"
            found.append(
                f"{self.ops[read[0]]} writing {read[0]!r} reads {read[1]!r} {where} in the "
                f"original, {'rounded' if theirs else 'unrounded'} in the rewrite"
            )
        return found


def has_float16(model: onnx.ModelProto) -> bool:
    """Whether `model`'s main graph holds a float16 value (inputs, outputs, initializers, Casts,
    declared types): only then can ONNX Runtime's float32 fallback round anything."""
    half = onnx.TensorProto.FLOAT16
    graph = model.graph
    infos = [*graph.input, *graph.output, *graph.value_info]
    if any(info.type.tensor_type.elem_type == half for info in infos):
        return True
    if any(tensor.data_type == half for tensor in graph.initializer):
        return True
    return any(
        node.op_type == "Cast" and any(a.name == "to" and a.i == half for a in node.attribute)
        for node in graph.node
    )


def read_float16(model: onnx.ModelProto) -> Float16Reads | None:
    """The float16 reads of `model` as ONNX Runtime's CPU provider partitions it (its weightless
    skeleton: the partition does not depend on weights); None where ONNX Runtime cannot load it."""
    import onnxruntime as ort  # only where a float16 model is rewritten

    with tempfile.TemporaryDirectory(prefix="normfuse-partition-") as folder:
        written = Path(folder) / "partitioned.onnx"
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.log_severity_level = 4
        options.optimized_model_filepath = str(written)
        weightless = skeleton(model)
        try:
            ort.InferenceSession(
                weightless.SerializeToString(), options, providers=["CPUExecutionProvider"]
            )
            partitioned = onnx.load(str(written))
        except Exception:  # a model ONNX Runtime does not load has no partition to read
            return None
    return _reads(weightless, partitioned)


def _reads(model: onnx.ModelProto, partitioned: onnx.ModelProto) -> Float16Reads:
    """The reads of `model` in ONNX Runtime's graph of it, `partitioned`. A read is named by the
    model's own input of the reader (ONNX Runtime may drop the model's Casts, and the name with
    them), and recorded where the model's tensor is float16."""
    model_types = _elem_types(model)
    elem_types = _elem_types(partitioned)
    model_inputs = {
        node.output[0]: list(node.input)
        for graph in all_graphs(model.graph)
        for node in graph.node
        if node.output
    }
    graphs = list(all_graphs(partitioned.graph))
    producers = {out: node for graph in graphs for node in graph.node for out in node.output}
    rounded: dict[Read, bool] = {}
    ops: dict[str, str] = {}
    for graph in graphs:
        for node in graph.node:
            if node.name.startswith(PREFIX) or not node.output:
                continue  # a Cast ONNX Runtime inserted: not a read of the model's
            reader = node.output[0].removeprefix(PREFIX)
            ops[reader] = node.op_type
            own = model_inputs.get(reader)
            if own is None or len(own) != len(node.input):
                own = [name.removeprefix(PREFIX) for name in node.input]
            for name, original in zip(node.input, own, strict=True):
                half = model_types.get(original) == onnx.TensorProto.FLOAT16
                if name and (half or name.startswith(PREFIX)):
                    rounded[(reader, original)] = _held_as_float16(name, elem_types, producers)
    return Float16Reads(rounded, ops)


def _elem_types(model: onnx.ModelProto) -> dict[str, int]:
    """Every tensor's element type, as shape inference and the model's own lists give it."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model).graph
    except Exception:  # types then come from the names and the Casts alone
        inferred = model.graph
    found = {
        info.name: info.type.tensor_type.elem_type
        for info in [*inferred.input, *inferred.output, *inferred.value_info]
    }
    for graph in all_graphs(model.graph):
        found.update({tensor.name: tensor.data_type for tensor in graph.initializer})
    return found


def _elem_type(name: str, elem_types: dict[str, int], producers: dict) -> int:
    if name.startswith(PREFIX):
        return onnx.TensorProto.FLOAT
    node = producers.get(name)
    if node is not None and node.op_type == "Cast":
        return next(a.i for a in node.attribute if a.name == "to")
    return elem_types.get(name, onnx.TensorProto.UNDEFINED)


def _held_as_float16(name: str, elem_types: dict[str, int], producers: dict) -> bool:
    """Whether the value of `name`, followed back through Casts and value moves to the node that
    computed it (or a graph input or initializer), is held as float16 anywhere on the way."""
    seen = set()
    while name not in seen:
        seen.add(name)
        if _elem_type(name, elem_types, producers) == onnx.TensorProto.FLOAT16:
            return True
        node = producers.get(name)
        if node is None or (node.op_type != "Cast" and node.op_type not in MOVERS):
            return False
        name = node.input[0]
    return False
