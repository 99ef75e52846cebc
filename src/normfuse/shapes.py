"""Element types and shapes of a model's tensors, from its declarations and shape inference."""

from __future__ import annotations

import onnx

TensorType = tuple[int, tuple[int | str | None, ...] | None]


def tensor_types(model: onnx.ModelProto) -> dict[str, TensorType]:
    """Map tensor names to (element type, shape) for every tensor whose type can be inferred.

    Shape inference runs on a copy (the model is not changed); where it fails (custom operators,
    inconsistent shapes), the types the model declares are used alone.
    """
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
    except Exception:
        inferred = model
    types: dict[str, TensorType] = {}
    _collect(inferred.graph, types)
    return types


def _collect(graph: onnx.GraphProto, types: dict[str, TensorType]) -> None:
    """Declared and inferred types of `graph` and of its subgraphs (If/Loop/Scan bodies)."""
    for info in [*graph.input, *graph.value_info, *graph.output]:
        if info.type.HasField("tensor_type"):
            types[info.name] = _tensor_type(info.type.tensor_type)
    for node in graph.node:
        for attribute in node.attribute:
            subgraphs = [attribute.g] if attribute.HasField("g") else []
            for subgraph in [*subgraphs, *attribute.graphs]:
                _collect(subgraph, types)


def _tensor_type(tensor_type: onnx.TypeProto.Tensor) -> TensorType:
    if not tensor_type.HasField("shape"):
        return tensor_type.elem_type, None
    dims = []
    for dim in tensor_type.shape.dim:
        if dim.HasField("dim_value"):
            dims.append(dim.dim_value)
        else:
            dims.append(dim.dim_param or None)
    return tensor_type.elem_type, tuple(dims)
