"""onnx's shape inference, run on a model or on one call of a model-local function, and the
types it writes read back as (element type, shape) by name."""

from __future__ import annotations

import onnx

from normfuse.ir.scopes import subgraphs

TensorType = tuple[int, tuple[int | str | None, ...] | None]


def infer(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with inferred value_info (data propagation where inference accepts it; the model
    itself when inference gives up)."""
    for data_prop in (True, False):
        try:
            return onnx.shape_inference.infer_shapes(
                model, check_type=False, strict_mode=False, data_prop=data_prop
            )
        except Exception:  # inference gave up on this model: try without data propagation
            continue
    return model


def collect(graph: onnx.GraphProto, types: dict[str, TensorType]) -> None:
    """Declared and inferred types of `graph` and of its subgraphs (If/Loop/Scan bodies)."""
    for info in [*graph.input, *graph.value_info, *graph.output]:
        if info.type.HasField("tensor_type"):
            types[info.name] = tensor_type(info.type.tensor_type)
    for node in graph.node:
        for subgraph in subgraphs(node):
            collect(subgraph, types)


def tensor_type(proto: onnx.TypeProto.Tensor) -> TensorType:
    """(element type, dims) of a tensor type: ints where static, names or None where not."""
    if not proto.HasField("shape"):
        return proto.elem_type, None
    dims: list[int | str | None] = []
    for dim in proto.shape.dim:
        if dim.HasField("dim_value"):
            dims.append(dim.dim_value)
        else:
            dims.append(dim.dim_param or None)
    return proto.elem_type, tuple(dims)


def resolved_body(function: onnx.FunctionProto, call: onnx.NodeProto) -> list[onnx.NodeProto]:
    """`function`'s nodes with each attribute reference replaced by the call's value (or the
    function's default; dropped where neither is given, so the operator's default applies)."""
    given = {attribute.name: attribute for attribute in call.attribute}
    defaults = {attribute.name: attribute for attribute in function.attribute_proto}
    nodes = []
    for node in function.node:
        if not any(attribute.ref_attr_name for attribute in node.attribute):
            nodes.append(node)
            continue
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        kept = []
        for attribute in copy.attribute:
            if not attribute.ref_attr_name:
                kept.append(attribute)
                continue
            source = given.get(attribute.ref_attr_name) or defaults.get(attribute.ref_attr_name)
            if source is not None:
                value = onnx.AttributeProto()
                value.CopyFrom(source)
                value.name = attribute.name
                kept.append(value)
        del copy.attribute[:]
        copy.attribute.extend(kept)
        nodes.append(copy)
    return nodes


def infer_body(
    model: onnx.ModelProto,
    function: onnx.FunctionProto,
    nodes: list[onnx.NodeProto],
    inputs: dict[str, TensorType],
) -> dict[str, TensorType]:
    """Types inside one call of `function` (its `nodes` resolved for that call), its formal
    inputs typed by `inputs`; the model's functions are given, so nested calls are inferred."""
    infos = [
        onnx.helper.make_tensor_value_info(name, *inputs[name])
        for name in function.input
        if name in inputs
    ]
    graph = onnx.helper.make_graph(
        nodes,
        function.name,
        infos,
        [onnx.helper.make_empty_tensor_value_info(name) for name in function.output],
    )
    imports = {entry.domain: entry.version for entry in model.opset_import}
    imports |= {entry.domain: entry.version for entry in function.opset_import}
    body = onnx.helper.make_model(
        graph,
        opset_imports=[onnx.helper.make_opsetid(d, v) for d, v in imports.items()],
        functions=list(model.functions),
        ir_version=max(model.ir_version, 8),
    )
    found: dict[str, TensorType] = {}
    collect(infer(body).graph, found)
    return found
