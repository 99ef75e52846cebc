"""Structural checks that make a graph safe to rewrite, with one clear message per problem.

`onnx.checker` is not used as the gate: it rejects the ONNX Runtime-only output normfuse itself
writes (e.g. `LayerNormalization` below opset 17). These checks ask only what the rewrite relies
on: every tensor produced once, every input produced somewhere (graph input, initializer, node, or
an enclosing graph), no cycles, every node's domain imported, an opset the installed onnx knows,
and no model-local function that calls itself (directly or through others).
"""

from __future__ import annotations

from typing import NamedTuple

import onnx
import onnx.defs

from normfuse.errors import NormfuseError

DEFAULT_DOMAINS = ("", "ai.onnx")


class _Node(NamedTuple):
    """The fields of one node the checks read (protobuf fields are read once: each read of a
    repeated field builds a new container)."""

    name: str
    op_type: str
    domain: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attribute_names: tuple[str, ...]
    bodies: tuple[_Graph, ...]


class _Graph(NamedTuple):
    """The fields of one graph (and, through its nodes, its bodies) the checks read."""

    inputs: tuple[str, ...]
    initializers: tuple[str, ...]
    sparse_initializers: tuple[str, ...]
    outputs: tuple[str, ...]
    infos: tuple[onnx.ValueInfoProto, ...]  # inputs, outputs, value_info: names and dims
    nodes: tuple[_Node, ...]


def check_structure(model: onnx.ModelProto) -> None:
    """Raise `NormfuseError` naming the first structural problem of `model`, if any."""
    imported = {entry.domain or "": entry.version for entry in model.opset_import}
    imported.setdefault("", imported.get("ai.onnx", 0))
    known = onnx.defs.onnx_opset_version()
    if imported.get("", 0) > known:
        raise NormfuseError(
            f"the model needs ONNX opset {imported['']}; the installed onnx "
            f"{onnx.__version__} knows up to {known} (upgrade onnx)"
        )
    graph = _read(model.graph)
    _check_text(graph)
    _check_graph(graph, set(), set(imported) | {"ai.onnx"})
    _check_function_calls(model)


def _read(graph: onnx.GraphProto) -> _Graph:
    nodes = []
    for node in graph.node:
        attributes = node.attribute
        names: tuple[str, ...] = ()
        bodies: tuple[_Graph, ...] = ()
        if attributes:  # a node without attributes holds no graph
            names = tuple(attribute.name for attribute in attributes)
            bodies = tuple(
                _read(body)
                for attribute in attributes
                for body in [*([attribute.g] if attribute.HasField("g") else []), *attribute.graphs]
            )
        nodes.append(
            _Node(
                node.name,
                node.op_type,
                node.domain,
                tuple(node.input),
                tuple(node.output),
                names,
                bodies,
            )
        )
    return _Graph(
        tuple(info.name for info in graph.input),
        tuple(tensor.name for tensor in graph.initializer),
        tuple(sparse.values.name for sparse in graph.sparse_initializer),
        tuple(info.name for info in graph.output),
        (*graph.input, *graph.output, *graph.value_info),
        tuple(nodes),
    )


def _check_text(graph: _Graph) -> None:
    """Every name, op type, domain and symbolic dim must be text (protobuf hands invalid UTF-8 in
    these fields back as bytes)."""
    texts = [info.name for info in graph.infos]
    texts += [dim.dim_param for info in graph.infos for dim in info.type.tensor_type.shape.dim]
    texts += graph.initializers
    for node in graph.nodes:
        texts += [node.name, node.op_type, node.domain, *node.inputs, *node.outputs]
        texts += node.attribute_names
        for body in node.bodies:
            _check_text(body)
    bad = next((text for text in texts if not isinstance(text, str)), None)
    if bad is not None:
        raise NormfuseError(f"the model has a name that is not valid UTF-8 text: {bad!r}")


def _check_graph(graph: _Graph, outer: set[str], domains: set[str]) -> None:
    produced: dict[str, str] = {}

    def define(name: str, by: str) -> None:
        if not name:
            return
        if name in produced:
            raise NormfuseError(f"tensor {name!r} is produced twice ({produced[name]} and {by})")
        produced[name] = by

    for name in graph.inputs:
        define(name, "a graph input")
    for name in graph.initializers:
        if name not in produced:
            define(name, "an initializer")
    for name in graph.sparse_initializers:
        if name not in produced:
            define(name, "a sparse initializer")
    for node in graph.nodes:
        if node.domain not in domains:
            raise NormfuseError(f"node {node.name!r} uses domain {node.domain!r}, not imported")
        for name in node.outputs:
            define(name, f"node {node.name or node.op_type!r}")
    visible = outer | set(produced)
    for node in graph.nodes:
        for name in node.inputs:
            if name and name not in visible:
                raise NormfuseError(f"node {node.name!r} reads {name!r}, which nothing produces")
        for body in node.bodies:
            _check_graph(body, visible, domains)
    for name in graph.outputs:
        if name not in visible:
            raise NormfuseError(f"graph output {name!r} is produced by nothing")
    _check_acyclic(graph)


def _check_acyclic(graph: _Graph) -> None:
    """Kahn's algorithm over the graph's own nodes; what cannot be ordered lies on a cycle."""
    nodes = graph.nodes
    producer = {name: index for index, node in enumerate(nodes) for name in node.outputs}
    if all(
        producer.get(name, -1) < index for index, node in enumerate(nodes) for name in node.inputs
    ):
        return  # every input is made before its reader (or outside the graph): in order
    waiting = [0] * len(nodes)
    users: dict[int, list[int]] = {}
    for index, node in enumerate(nodes):
        for source in {producer[name] for name in node.inputs if name in producer}:
            waiting[index] += 1
            users.setdefault(source, []).append(index)
    ready = [index for index, count in enumerate(waiting) if count == 0]
    ordered = 0
    while ready:
        index = ready.pop()
        ordered += 1
        for user in users.get(index, []):
            waiting[user] -= 1
            if waiting[user] == 0:
                ready.append(user)
    if ordered < len(nodes):
        stuck = next(nodes[i] for i, count in enumerate(waiting) if count > 0)
        raise NormfuseError(f"the graph has a cycle through node {stuck.name or stuck.op_type!r}")


def _check_function_calls(model: onnx.ModelProto) -> None:
    """Model-local functions must not recurse (ONNX forbids it; expanding one never ends)."""
    calls = {
        (function.domain, function.name): {(node.domain, node.op_type) for node in function.node}
        for function in model.functions
    }
    done: set[tuple[str, str]] = set()
    for start in calls:
        path, stack = [start], [iter(sorted(calls[start] & calls.keys()))]
        while stack:
            callee = next(stack[-1], None)
            if callee is None:
                done.add(path.pop())
                stack.pop()
            elif callee in path:
                chain = " -> ".join(name for _, name in [*path[path.index(callee) :], callee])
                raise NormfuseError(f"model-local functions call themselves: {chain}")
            elif callee not in done:
                path.append(callee)
                stack.append(iter(sorted(calls[callee] & calls.keys())))
