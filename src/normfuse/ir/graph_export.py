"""How normfuse writes a rewritten gs graph back to ONNX: onnx-graphsurgeon's own export of the
main graph (the same fields, values and order: `OnnxExporter.export_graph` with no type check),
written straight into the model's `GraphProto` node by node instead of built as a list of node
protos, a graph, then a model, each copied into the next (at 100k nodes those copies were most
of the export's time). Attributes, tensors, value infos and function bodies are gs's own
conversions."""

from __future__ import annotations

import onnx
import onnx_graphsurgeon as gs
from onnx_graphsurgeon.exporters.onnx_exporter import OnnxExporter
from onnx_graphsurgeon.ir.tensor import SparseValues


def write_graph(graph: gs.Graph, into: onnx.GraphProto) -> None:
    """Write `graph` into the empty `into`, as `gs.export_onnx(graph, do_type_check=False).graph`
    would hold it (raises what gs's conversions raise on a malformed attribute or name)."""
    nodes = into.node
    for node in graph.nodes:
        proto = nodes.add()
        proto.op_type = node.op
        proto.input.extend([tensor.name for tensor in node.inputs])
        proto.output.extend([tensor.name for tensor in node.outputs])
        if node.name:
            proto.name = node.name
        if node.domain is not None:
            proto.domain = node.domain
        if node.attrs:
            proto.attribute.extend(export_attributes(node))
    into.name = graph.name
    into.input.extend([OnnxExporter.export_value_info_proto(t, False) for t in graph.inputs])
    into.output.extend([OnnxExporter.export_value_info_proto(t, False) for t in graph.outputs])
    tensors = graph.tensors()
    constants = [tensor for tensor in tensors.values() if isinstance(tensor, gs.Constant)]
    into.initializer.extend(
        [
            OnnxExporter.export_tensor_proto(tensor)
            for tensor in constants
            if not isinstance(tensor._values, SparseValues)
        ]
    )
    into.sparse_initializer.extend(
        [
            OnnxExporter.export_sparse_tensor_proto(tensor)
            for tensor in constants
            if isinstance(tensor._values, SparseValues)
        ]
    )
    boundary = {tensor.name for tensor in [*graph.inputs, *graph.outputs]}
    into.value_info.extend(
        [
            OnnxExporter.export_value_info_proto(tensor, False)
            for name, tensor in tensors.items()
            if name not in boundary
            and isinstance(tensor, gs.Variable)
            and (tensor.dtype is not None or tensor.shape is not None)
        ]
    )
    if graph.doc_string:
        into.doc_string = graph.doc_string


def export_attributes(node: gs.Node) -> list[onnx.AttributeProto]:
    """gs's conversion of `node`'s attributes, except an empty list (gs cannot tell its type:
    `ReduceMean-13`'s `axes=[]`), typed from the op's schema (INTS for an op onnx does not know),
    and a body, written as the main graph is."""
    converted = []
    for key, value in node.attrs.items():
        if isinstance(value, (list, tuple)) and not value:
            kind = _schema_type(node, key)
            converted.append(onnx.helper.make_attribute(key, [], attr_type=kind))
        elif isinstance(value, gs.Graph):
            body = onnx.GraphProto()
            write_graph(value, body)
            converted.append(onnx.helper.make_attribute(key, body))
        else:
            converted.extend(OnnxExporter.export_attributes({key: value}))
    return converted


def _schema_type(node: gs.Node, name: str) -> int:
    try:
        schema = onnx.defs.get_schema(node.op, domain=node.domain or "")
        return int(schema.attributes[name].type)
    except Exception:  # an op or attribute onnx does not know
        return onnx.AttributeProto.INTS


def functions(graph: gs.Graph) -> list[onnx.FunctionProto]:
    """gs's export of each model-local function of `graph`."""
    return [OnnxExporter.export_function(function) for function in graph.functions]
