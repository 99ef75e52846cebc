"""Scopes of a model: every name defined once, and which initializers are overridable defaults.

ONNX lets an `If`/`Loop`/`Scan` body define a tensor (initializer, body input, node output) under
a name an enclosing scope or a sibling body also defines; inside the body the innermost definition
wins. Tools that resolve names model-wide (onnx-graphsurgeon's importer among them) then mix the
two tensors up. `unique_names` renames such inner definitions (and the uses they reach), which
changes nothing a model computes: bodies bind their inputs and outputs by position. After it,
every fact keyed by name (types, constants) is a fact of exactly one tensor.

An initializer also listed in its graph's inputs is a default the caller may override at run time
(ONNX Runtime honours a fed value): `overridable` names them; they are never constants.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import onnx


def subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    """The graphs held by `node`'s attributes (If branches, Loop/Scan bodies)."""
    for attribute in node.attribute:
        if attribute.HasField("g"):
            yield attribute.g
        yield from attribute.graphs


def all_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """`graph` and every graph nested in it, outermost first."""
    yield graph
    for node in graph.node:
        if node.attribute:  # a node without attributes holds no graph
            for subgraph in subgraphs(node):
                yield from all_graphs(subgraph)


def definitions(graph: onnx.GraphProto) -> list[str]:
    """The names `graph` itself defines: inputs, initializers, node outputs (not nested ones)."""
    names = [info.name for info in graph.input]
    names += [tensor.name for tensor in graph.initializer]
    names += [tensor.values.name for tensor in graph.sparse_initializer]
    names += [name for node in graph.node for name in node.output]
    return [name for name in names if name]


def overridable(graph: onnx.GraphProto) -> set[str]:
    """Initializers of `graph` that are also its inputs: defaults a caller may override."""
    inputs = {info.name for info in graph.input}
    return {tensor.name for tensor in graph.initializer if tensor.name in inputs}


def body_overridable(model: onnx.ModelProto) -> set[str]:
    """Initializers of nested bodies that their body also lists as inputs (which value ONNX
    Runtime binds there is not something to rewrite around)."""
    found: set[str] = set()
    roots = [model.graph, *(_function_graph(function) for function in model.functions)]
    for root in roots:
        for graph in list(all_graphs(root))[1:]:
            found |= overridable(graph)
    return found


def shadowing_initializers(model: onnx.ModelProto) -> set[str]:
    """Initializers of nested bodies named like a value an enclosing scope already defines.

    Which value such a name means is not settled: the ONNX spec asks for unique names, and ONNX
    Runtime binds the outer value where the outer graph uses it but drops an outer initializer
    that only bodies read, so that the body's own one wins (both seen with onnxruntime 1.32). A
    body input of the same name always wins. No rewrite may pick a side: such models are left
    as they are.
    """
    found: set[str] = set()

    def visit(graph: onnx.GraphProto, visible: set[str]) -> None:
        for node in graph.node:
            for body in subgraphs(node):
                inner = visible - {info.name for info in body.input}
                found.update(t.name for t in body.initializer if t.name in inner)
                visit(body, visible | set(definitions(body)))

    visit(model.graph, set(definitions(model.graph)))
    for function in model.functions:
        visit(_function_graph(function), {*function.input, *_node_outputs(function.node)})
    return found


def unique_names(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` itself when no nested body redefines a name, else a copy where every redefinition
    in a body is renamed (with the uses it reaches). Main-graph and function-level names, the
    model's signature, are never renamed."""
    if not _has_redefinitions(model):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    renamer = _Renamer(set(_every_name(copy)))
    renamer.nested(copy.graph, renamer.claim_all(definitions(copy.graph)))
    for function in copy.functions:
        renamer.claimed = set()
        names = [*function.input, *_node_outputs(function.node)]
        env = renamer.claim_all(names)
        for node in function.node:
            for subgraph in subgraphs(node):
                renamer.graph(subgraph, env)
    return copy


class _Renamer:
    """Renames body definitions whose name another definition already holds."""

    def __init__(self, taken: set[str]) -> None:
        self.taken = taken  # every name anywhere: fresh names avoid all of them
        self.claimed: set[str] = set()  # names already bound to a definition

    def claim_all(self, names: list[str]) -> dict[str, str]:
        self.claimed |= set(names)
        return {name: name for name in names}

    def nested(self, graph: onnx.GraphProto, env: dict[str, str]) -> None:
        for node in graph.node:
            for subgraph in subgraphs(node):
                self.graph(subgraph, env)

    def graph(self, graph: onnx.GraphProto, outer: dict[str, str]) -> None:
        """Bind each name `graph` defines (fresh where claimed), rewrite every reference inside
        `graph` to the definition it resolves to, then do the same for bodies below it.

        A body input named like an outer value wins inside the body (as in ONNX Runtime), and is
        renamed like any definition. (Body initializers named like outer values are refused
        before this: see `shadowing_initializers`.)"""
        env = dict(outer)
        for name in dict.fromkeys(definitions(graph)):  # an input that is also an initializer
            if name in self.claimed:
                env[name] = self._fresh(name)
            else:
                env[name] = name
            self.claimed.add(env[name])
        for info in [*graph.input, *graph.output, *graph.value_info]:
            info.name = env.get(info.name, info.name)
        for tensor in graph.initializer:
            tensor.name = env.get(tensor.name, tensor.name)
        for tensor in graph.sparse_initializer:
            tensor.values.name = env.get(tensor.values.name, tensor.values.name)
        for node in graph.node:
            node.input[:] = [env.get(name, name) if name else name for name in node.input]
            node.output[:] = [env.get(name, name) if name else name for name in node.output]
        self.nested(graph, env)

    def _fresh(self, name: str) -> str:
        index = 1
        while f"{name}__{index}" in self.taken:
            index += 1
        fresh = f"{name}__{index}"
        self.taken.add(fresh)
        return fresh


def _has_redefinitions(model: onnx.ModelProto) -> bool:
    """True when some name is defined in two scopes (every shadowing, sibling reuse, or body
    initializer named like an outer value has one); the main graph and each function body are
    separate namespaces."""
    namespaces = [list(all_graphs(model.graph))]
    for function in model.functions:
        body = _function_graph(function)
        body.input.extend(onnx.ValueInfoProto(name=name) for name in function.input)
        namespaces.append(list(all_graphs(body)))
    for graphs in namespaces:
        if len(graphs) == 1:  # one scope: each name is defined once there (or it is invalid)
            continue
        counts = Counter(name for graph in graphs for name in set(definitions(graph)))
        if any(count > 1 for count in counts.values()):
            return True
    return False


def _every_name(model: onnx.ModelProto) -> Iterator[str]:
    roots = [model.graph, *(_function_graph(function) for function in model.functions)]
    for root in roots:
        for graph in all_graphs(root):
            yield from definitions(graph)
            yield from (name for node in graph.node for name in node.input)
            yield from (info.name for info in [*graph.output, *graph.value_info])


def _node_outputs(nodes) -> list[str]:
    return [name for node in nodes for name in node.output if name]


def _function_graph(function: onnx.FunctionProto) -> onnx.GraphProto:
    """A function body as a graph (for walking its nodes and bodies; not for running)."""
    graph = onnx.GraphProto()
    graph.node.extend(function.node)
    return graph
