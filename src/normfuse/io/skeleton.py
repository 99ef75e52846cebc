"""A weightless copy of a model: the same nodes, signature and types, with large or external
initializers turned into typed graph inputs. Shape inference, `onnx.checker` and ONNX Runtime's
session creation see the same graph without a single weight being copied or read."""

from __future__ import annotations

import onnx
from onnx.external_data_helper import uses_external_data

KEPT_ELEMENTS = 4096  # small initializers keep their values (shapes, axes, constants in checks)


def kept(tensor: onnx.TensorProto) -> bool:
    """Whether the skeleton keeps `tensor` an initializer (small, stored inline)."""
    count = 1
    for dim in tensor.dims:
        count *= dim
    return count <= KEPT_ELEMENTS and not uses_external_data(tensor)


def skeleton(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with every initializer over `KEPT_ELEMENTS` elements, or stored externally, given
    as a graph input of the same type and shape instead (the model itself is not changed)."""
    source = model.graph
    copy = onnx.ModelProto(
        ir_version=model.ir_version,
        producer_name=model.producer_name,
        producer_version=model.producer_version,
        domain=model.domain,
        model_version=model.model_version,
    )
    copy.opset_import.extend(model.opset_import)
    copy.functions.extend(model.functions)
    graph = copy.graph  # filled in place: one copy of the nodes, not two
    graph.name = source.name
    graph.node.extend(source.node)
    graph.input.extend(source.input)
    graph.output.extend(source.output)
    graph.value_info.extend(source.value_info)
    graph.sparse_initializer.extend(source.sparse_initializer)
    inputs = {info.name for info in source.input}
    for tensor in source.initializer:
        if kept(tensor):
            graph.initializer.append(tensor)
        elif tensor.name not in inputs:
            graph.input.append(
                onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims))
            )
    return copy
