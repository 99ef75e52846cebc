"""Cut one fused site out of a model, so it can be run and checked on its own, and convert small
models to float64 for a reference run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx.external_data_helper import load_external_data_for_tensor, uses_external_data

from normfuse.ir.scopes import all_graphs

FLOAT_ELEM_TYPES = {onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT, onnx.TensorProto.BFLOAT16}


def extract(
    model: onnx.ModelProto,
    inputs: dict[str, tuple[int, list[int]]],
    output_name: str,
    output_type: int,
    base_dir: Path | None,
    function: tuple[str, str] | None = None,
) -> onnx.ModelProto | None:
    """The nodes computing `output_name` from `inputs` (name -> element type and shape) and
    constants, as a model with those inputs and one output; None when the output depends on
    anything else. The nodes are looked up in every graph of the model (names are unique across
    its scopes), or in the body of the model-local `function` (its own namespace and opsets)."""
    nodes, initializers, opsets = _scope(model, function)
    producers = {name: node for node in nodes for name in node.output}
    needed_nodes: set[int] = set()
    needed_initializers: set[str] = set()
    stack, seen = [output_name], set()
    while stack:
        name = stack.pop()
        if name in seen or name in inputs or not name:
            continue
        seen.add(name)
        if name in initializers:
            needed_initializers.add(name)
            continue
        node = producers.get(name)
        if node is None or any(
            a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) or a.ref_attr_name
            for a in node.attribute
        ):
            return None
        needed_nodes.add(id(node))
        stack.extend(node.input)
    ordered = [node for node in nodes if id(node) in needed_nodes]
    tensors = [_loaded(initializers[name], base_dir) for name in sorted(needed_initializers)]
    site_graph = onnx.helper.make_graph(
        ordered,
        f"site_{output_name}",
        [
            onnx.helper.make_tensor_value_info(name, elem_type, shape)
            for name, (elem_type, shape) in inputs.items()
        ],
        [onnx.helper.make_tensor_value_info(output_name, output_type, None)],
        tensors,
    )
    site = onnx.helper.make_model(site_graph, opset_imports=opsets)
    site.ir_version = model.ir_version
    return site


def shape_only_sources(
    model: onnx.ModelProto,
    inputs: set[str],
    output_name: str,
    function: tuple[str, str] | None = None,
) -> list[str] | None:
    """The tensors besides `inputs` and constants that `output_name` depends on, where each is
    read only by `Shape` or `Size` nodes on the way (a Reshape back to `Shape(x)`, an Expand to
    `Shape(z)`): only their shapes matter, so a site can be cut out with them as inputs too.
    None where the output depends on another tensor's values (or on nothing more)."""
    nodes, initializers, _ = _scope(model, function)
    producers = {name: node for node in nodes for name in node.output}
    readers: dict[str, set[str]] = {}
    stack, seen, sources = [output_name], set(), []
    while stack:
        name = stack.pop()
        if name in seen or name in inputs or not name or name in initializers:
            continue
        seen.add(name)
        node = producers.get(name)
        if node is None:
            sources.append(name)
            continue
        for tensor in node.input:
            readers.setdefault(tensor, set()).add(node.op_type)
        stack.extend(node.input)
    # Each source read, and only through Shape or Size: never the output itself (a producer
    # outside the scope's nodes, in a nested body, is no tensor read for its shape).
    shape_only = all(readers.get(name) and readers[name] <= {"Shape", "Size"} for name in sources)
    if not sources or not shape_only:
        return None
    return sorted(sources)


def _scope(
    model: onnx.ModelProto, function: tuple[str, str] | None
) -> tuple[list[onnx.NodeProto], dict[str, onnx.TensorProto], list[onnx.OperatorSetIdProto]]:
    """Nodes (in order), initializers and opset imports of the scope a site lives in."""
    if function is None:
        graphs = list(all_graphs(model.graph))
        nodes = [node for graph in graphs for node in graph.node]
        initializers = {t.name: t for graph in graphs for t in graph.initializer}
        return nodes, initializers, list(model.opset_import)
    body = next(f for f in model.functions if (f.domain, f.name) == function)
    opsets = {entry.domain: entry for entry in model.opset_import}
    opsets.update({entry.domain: entry for entry in body.opset_import})
    return list(body.node), {}, list(opsets.values())


def with_weights_loaded(model: onnx.ModelProto, base_dir: Path) -> onnx.ModelProto:
    """A copy of `model` whose external initializers (any scope) hold their bytes."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for graph in all_graphs(copy.graph):
        for tensor in graph.initializer:
            if uses_external_data(tensor):
                tensor.CopyFrom(_loaded(tensor, base_dir))
    return copy


def _loaded(tensor: onnx.TensorProto, base_dir: Path | None) -> onnx.TensorProto:
    """`tensor` with its external data read into it (a copy; the model is not changed)."""
    if not uses_external_data(tensor):
        return tensor
    copy = onnx.TensorProto()
    copy.CopyFrom(tensor)
    load_external_data_for_tensor(copy, str(base_dir))
    del copy.external_data[:]
    copy.data_location = onnx.TensorProto.DEFAULT
    return copy


def as_float64(model: onnx.ModelProto) -> onnx.ModelProto:
    """A float64 copy of a model whose floats are float16/float32 (initializers, declared types,
    `Cast` targets, `Constant` values, the statistics' `stash_type`), in every body and
    model-local function, for a reference run. Its weights must be in memory."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graphs = list(all_graphs(copy.graph))
    for graph in graphs:
        for tensor in graph.initializer:
            if tensor.data_type in FLOAT_ELEM_TYPES:
                tensor.CopyFrom(_float64_tensor(tensor))
        for info in [*graph.input, *graph.output, *graph.value_info]:
            if info.type.tensor_type.elem_type in FLOAT_ELEM_TYPES:
                info.type.tensor_type.elem_type = onnx.TensorProto.DOUBLE
    opset = next((o.version for o in copy.opset_import if o.domain in ("", "ai.onnx")), 0)
    for graph in graphs:
        _widen_nodes(graph.node, opset)
    for function in copy.functions:
        _widen_nodes(function.node, opset)
    return copy


# Standard ops with a `stash_type` (the statistics' type, float32 by default), from the opset
# that gave it to them: set to float64 even where the model leaves the default.
_STASHED = {"LayerNormalization": 17, "GroupNormalization": 21, "RMSNormalization": 23}


def _widen_nodes(nodes, opset: int) -> None:
    """Float types named by nodes (Cast targets, statistics types, constant values) to float64."""
    for node in nodes:
        since = _STASHED.get(node.op_type) if node.domain in ("", "ai.onnx") else None
        stashed = any(attribute.name == "stash_type" for attribute in node.attribute)
        if since is not None and opset >= since and not stashed:
            node.attribute.append(onnx.helper.make_attribute("stash_type", onnx.TensorProto.DOUBLE))
        for attribute in node.attribute:
            if attribute.ref_attr_name:
                continue  # a function's caller sets it (widened at the call)
            widened_type = (node.op_type == "Cast" and attribute.name == "to") or (
                attribute.name == "stash_type"
            )
            if widened_type and attribute.i in FLOAT_ELEM_TYPES:
                attribute.i = onnx.TensorProto.DOUBLE
            if attribute.HasField("t") and attribute.t.data_type in FLOAT_ELEM_TYPES:
                attribute.t.CopyFrom(_float64_tensor(attribute.t))
        if (
            node.op_type == "Constant"
            and node.attribute
            and node.attribute[0].name in ("value_float", "value_floats")
            and not node.attribute[0].ref_attr_name
        ):
            value = onnx.helper.get_attribute_value(node.attribute[0])
            array = np.asarray(value, dtype=np.float64)
            del node.attribute[:]
            node.attribute.append(
                onnx.helper.make_attribute("value", onnx.numpy_helper.from_array(array))
            )


def _float64_tensor(tensor: onnx.TensorProto) -> onnx.TensorProto:
    array = onnx.numpy_helper.to_array(tensor).astype(np.float64)
    return onnx.numpy_helper.from_array(array, tensor.name)
