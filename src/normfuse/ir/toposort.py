"""Topological order of a rewritten scope, without recursion.

The order is onnx-graphsurgeon's own `toposort(mode="nodes")`: a node's level is one more than
the highest level of the nodes in its scope that produce what it reads (its bodies' outer reads
included, found by name); nodes are ordered by level, ties in the order a depth-first walk from
each node in list order finishes them. So an output is what gs's sort gave, except where gs's
import left a body's read of an outer value unlinked to the outer tensor (an input listed out of
order: gs then left the body's node ahead of the value's producer, ADV12-01). gs finds the levels
by recursion, one Python frame per node on the longest unsorted path: a rewrite appends its fused
nodes at the end of the list, and a few hundred norms chained one into the next exceeded
Python's recursion limit (ADV11-01). Here the walk keeps its own stack.
"""

from __future__ import annotations

from collections.abc import Iterable

import onnx_graphsurgeon as gs


def sort_scope(graph: gs.Graph) -> None:
    """Sort the nodes of `graph`, of the model-local functions it lists and of every body nested
    in them, in place (bodies before the graph that holds them: a body's order decides the order
    its outer reads are walked in)."""
    _sort_with_bodies(graph, set())


def _sort_with_bodies(graph: gs.Graph, done: set[int]) -> None:
    if id(graph) in done:
        return
    done.add(id(graph))
    for function in graph.functions:
        _sort_with_bodies(function, done)
    for node in graph.nodes:
        for body in _bodies(node):
            _sort_with_bodies(body, done)
    graph.nodes = _sorted_nodes(graph)


def _bodies(node: gs.Node) -> Iterable[gs.Graph]:
    return [value for value in node.attrs.values() if isinstance(value, gs.Graph)]


def _local_tensors(graph: gs.Graph) -> dict[str, gs.Tensor]:
    """The tensors `graph` itself holds, by name: node outputs, its inputs and its constants."""
    local = {t.name: t for node in graph.nodes for t in node.outputs if not t.is_empty()}
    local.update({t.name: t for t in graph.inputs})
    local.update({t.name: t for t in graph.tensors().values() if isinstance(t, gs.Constant)})
    return local


def _outer_reads(graph: gs.Graph) -> dict[str, gs.Tensor]:
    """The tensors `graph` (and the bodies nested in it) read from outside it, in the order gs
    lists them."""
    local = _local_tensors(graph)
    found: dict[str, gs.Tensor] = {}
    for node in graph.nodes:
        found.update({t.name: t for t in node.inputs if t.name not in local})
        for body in _bodies(node):
            found.update({n: t for n, t in _outer_reads(body).items() if n not in local})
    return found


def _sorted_nodes(graph: gs.Graph) -> list[gs.Node]:
    local = _local_tensors(graph)
    index = {id(node): position for position, node in enumerate(graph.nodes)}

    def producers(node: gs.Node) -> list[gs.Node]:
        found: dict[int, gs.Node] = {}
        names = [tensor.name for tensor in node.inputs]
        for body in _bodies(node):
            names += _outer_reads(body)
        for name in names:
            # By name: a body read of an outer value may be its own gs tensor, not linked to
            # the outer one (gs imports a body before the nodes listed after it: ADV12-01).
            if name in local:
                for producer in local[name].inputs:
                    if id(producer) not in index:
                        raise ValueError(f"node {producer.name!r} is not in the graph it feeds")
                    found.setdefault(id(producer), producer)
        return list(found.values())

    levels: dict[int, int] = {}
    finished: list[gs.Node] = []  # depth-first finishing order
    for start in graph.nodes:
        if id(start) in levels:
            continue
        stack = [(start, iter(producers(start)), -1)]
        on_path = {id(start)}
        while stack:
            node, pending, highest = stack[-1]
            for producer in pending:
                level = levels.get(id(producer))
                if level is not None:
                    highest = max(highest, level)
                    continue
                if id(producer) in on_path:
                    raise ValueError(f"the rewritten graph has a cycle through {producer.name!r}")
                stack[-1] = (node, pending, highest)
                stack.append((producer, iter(producers(producer)), -1))
                on_path.add(id(producer))
                break
            else:
                stack.pop()
                on_path.discard(id(node))
                levels[id(node)] = highest + 1
                finished.append(node)
                if stack:
                    parent, parent_pending, parent_highest = stack[-1]
                    stack[-1] = (parent, parent_pending, max(parent_highest, highest + 1))
    return sorted(finished, key=lambda node: levels[id(node)])
