"""Initializers stay in the scope the original model put them in.

onnx-graphsurgeon exports, as a graph's initializers, the constants that graph's own nodes read:
an outer initializer read only inside `If`/`Loop`/`Scan` bodies (optimum's merged decoders keep
every weight in the main graph for both branches) would leave the outer graph and be copied into
every body that reads it. `restore_placement` moves each exported initializer back to the graph
that held it in the original; initializers the rewrite created stay where the export put them.
Names are unique model-wide (`scopes.unique_names`), so a name identifies one tensor, and a body
is identified by its node's first output and the attribute holding it, which rewrites keep.
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx

ScopeKey = tuple[str, str, int] | None  # None: the main graph


def graphs_by_scope(
    graph: onnx.GraphProto, key: ScopeKey = None
) -> Iterator[tuple[ScopeKey, onnx.GraphProto]]:
    """`graph` and every body nested in it, each with its scope key."""
    yield key, graph
    for node in graph.node:
        anchor = node.output[0] if node.output else node.name
        for attribute in node.attribute:
            bodies = [attribute.g] if attribute.HasField("g") else []
            for index, body in enumerate([*bodies, *attribute.graphs]):
                yield from graphs_by_scope(body, (anchor, attribute.name, index))


def initializer_scopes(graph: onnx.GraphProto) -> dict[str, ScopeKey]:
    """The scope holding each initializer of `graph` and its bodies, by name."""
    return {
        tensor.name: key for key, scope in graphs_by_scope(graph) for tensor in scope.initializer
    }


def restore_placement(original: onnx.GraphProto, exported: onnx.GraphProto) -> None:
    """Move every initializer of `exported` (in place) to the scope `original` held it in, once;
    an initializer `original` did not have, or whose scope is gone, stays where it is."""
    home = initializer_scopes(original)
    graphs = dict(graphs_by_scope(exported))
    present = {key: {tensor.name for tensor in graph.initializer} for key, graph in graphs.items()}
    for key, graph in graphs.items():
        for index in reversed(range(len(graph.initializer))):
            tensor = graph.initializer[index]
            owner = home.get(tensor.name, key)
            if owner == key or owner not in graphs:
                continue
            if tensor.name not in present[owner]:
                graphs[owner].initializer.add().CopyFrom(tensor)
                present[owner].add(tensor.name)
            del graph.initializer[index]
