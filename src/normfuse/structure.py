"""Structural checks that make a graph safe to rewrite, with one clear message per problem.

`onnx.checker` is not used as the gate: it rejects the ONNX Runtime-only output normfuse itself
writes (e.g. `LayerNormalization` below opset 17). These checks ask only what the rewrite relies
on: every tensor produced once, every input produced somewhere (graph input, initializer, node, or
an enclosing graph), no cycles, every node's domain imported, an opset the installed onnx knows,
and no model-local function that calls itself (directly or through others).
"""

from __future__ import annotations

import onnx
import onnx.defs

from normfuse.errors import NormfuseError

DEFAULT_DOMAINS = ("", "ai.onnx")


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
    _check_text(model.graph)
    _check_graph(model.graph, set(), set(imported) | {"ai.onnx"})
    _check_function_calls(model)


def _check_text(graph: onnx.GraphProto) -> None:
    """Every name, op type, domain and symbolic dim must be text (protobuf hands invalid UTF-8 in
    these fields back as bytes)."""
    infos = [*graph.input, *graph.output, *graph.value_info]
    texts = [info.name for info in infos]
    texts += [dim.dim_param for info in infos for dim in info.type.tensor_type.shape.dim]
    texts += [tensor.name for tensor in graph.initializer]
    for node in graph.node:
        texts += [node.name, node.op_type, node.domain, *node.input, *node.output]
        texts += [attribute.name for attribute in node.attribute]
        for attribute in node.attribute:
            subgraphs = [attribute.g] if attribute.HasField("g") else []
            for subgraph in [*subgraphs, *attribute.graphs]:
                _check_text(subgraph)
    bad = next((text for text in texts if not isinstance(text, str)), None)
    if bad is not None:
        raise NormfuseError(f"the model has a name that is not valid UTF-8 text: {bad!r}")


def _check_graph(graph: onnx.GraphProto, outer: set[str], domains: set[str]) -> None:
    produced: dict[str, str] = {}

    def define(name: str, by: str) -> None:
        if not name:
            return
        if name in produced:
            raise NormfuseError(f"tensor {name!r} is produced twice ({produced[name]} and {by})")
        produced[name] = by

    for info in graph.input:
        define(info.name, "a graph input")
    for tensor in graph.initializer:
        if tensor.name not in produced:
            define(tensor.name, "an initializer")
    for sparse in graph.sparse_initializer:
        if sparse.values.name not in produced:
            define(sparse.values.name, "a sparse initializer")
    for node in graph.node:
        if node.domain not in domains:
            raise NormfuseError(f"node {node.name!r} uses domain {node.domain!r}, not imported")
        for name in node.output:
            define(name, f"node {node.name or node.op_type!r}")
    visible = outer | set(produced)
    for node in graph.node:
        for name in node.input:
            if name and name not in visible:
                raise NormfuseError(f"node {node.name!r} reads {name!r}, which nothing produces")
        for attribute in node.attribute:
            subgraphs = [attribute.g] if attribute.HasField("g") else []
            for subgraph in [*subgraphs, *attribute.graphs]:
                _check_graph(subgraph, visible, domains)
    for info in graph.output:
        if info.name not in visible:
            raise NormfuseError(f"graph output {info.name!r} is produced by nothing")
    _check_acyclic(graph)


def _check_acyclic(graph: onnx.GraphProto) -> None:
    """Kahn's algorithm over the graph's own nodes; what cannot be ordered lies on a cycle."""
    producer = {name: index for index, node in enumerate(graph.node) for name in node.output}
    waiting = [0] * len(graph.node)
    users: dict[int, list[int]] = {}
    for index, node in enumerate(graph.node):
        for source in {producer[name] for name in node.input if name in producer}:
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
    if ordered < len(graph.node):
        stuck = next(graph.node[i] for i, count in enumerate(waiting) if count > 0)
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
