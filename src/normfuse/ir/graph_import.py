"""How normfuse reads a model into onnx-graphsurgeon: overridable initializers as graph inputs
(variables, in every scope that reads them), so that no matcher or folder can read them as
constants, and opset imports copied, so that an export never changes the caller's model."""

from __future__ import annotations

import onnx
import onnx_graphsurgeon as gs

from normfuse.ir.scopes import overridable


def import_graph(model: onnx.ModelProto) -> gs.Graph:
    """`model` as a gs graph, its main graph's overridable initializers as inputs (raises what
    gs raises on a graph it cannot read)."""
    return with_inputs(gs.import_onnx(model), model, frozenset(overridable(model.graph)))


def with_inputs(
    graph: gs.Graph, model: onnx.ModelProto, overridable_names: frozenset[str]
) -> gs.Graph:
    """`graph` (gs's import of `model`) with its own opset-import lists and the initializers
    named in `overridable_names` as variables and graph inputs again; changed in place."""
    # gs keeps the model's own opset-import containers and appends to them on export: give
    # the graph copies, so that the caller's model is never changed.
    for scope in [graph, *graph.functions]:
        scope.import_domains = [
            onnx.helper.make_opsetid(entry.domain, entry.version)
            for entry in scope.import_domains or []
        ]
    tensors = graph.tensors()
    for scope in [graph, *graph.subgraphs(recursive=True)]:
        for node in scope.nodes:
            for tensor in node.inputs:
                if tensor.name in overridable_names and isinstance(tensor, gs.Constant):
                    tensor.to_variable(shape=list(tensor.shape))
                    tensor.type = "tensor_type"  # what gs sets on variables it imports
    inputs = model.graph.input
    graph.inputs = [tensors[info.name] for info in inputs if info.name in tensors]
    return graph


def scopes(graph: gs.Graph) -> list[tuple[gs.Graph, gs.Function | None]]:
    """Every scope of `graph`, each with the model-local function it is in (None: the main
    graph's): the graph and its nested bodies, outermost first, then each function and its
    bodies."""
    found: list[tuple[gs.Graph, gs.Function | None]] = [
        (scope, None) for scope in [graph, *graph.subgraphs(recursive=True)]
    ]
    for function in graph.functions:
        found += [(scope, function) for scope in [function, *function.subgraphs(recursive=True)]]
    return found
