"""`toposort.sort_scope` orders nodes exactly as onnx-graphsurgeon's `toposort(mode="nodes")`
does (so outputs are unchanged), on every committed real export with its nodes shuffled and on a
graph with If bodies that read outer values and a model-local function."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import onnx
import pytest
from helpers import odd_scopes_model

from normfuse.ir import toposort
from normfuse.ir.graph_import import import_graph

REAL = sorted((Path(__file__).resolve().parent.parent / "models" / "real").glob("*.onnx"))


def _orders(model: onnx.ModelProto, seed: int) -> tuple[list[str], list[str]]:
    expected, graph = import_graph(model), import_graph(model)
    order = list(range(len(graph.nodes)))
    random.Random(seed).shuffle(order)
    for scope in (expected, graph):
        scope.nodes = [scope.nodes[i] for i in order]
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(order)))  # gs's sort recurses once per node
    try:
        expected.toposort(mode="nodes")
    finally:
        sys.setrecursionlimit(limit)
    toposort.sort_scope(graph)
    label = [f"{n.op}:{n.name}:{[t.name for t in n.outputs]}" for n in expected.nodes]
    return label, [f"{n.op}:{n.name}:{[t.name for t in n.outputs]}" for n in graph.nodes]


@pytest.mark.parametrize("path", REAL, ids=[path.stem for path in REAL])
def test_a_shuffled_real_export_is_sorted_as_gs_sorts_it(path: Path) -> None:
    expected, actual = _orders(onnx.load(path), seed=len(path.name))
    assert actual == expected


@pytest.mark.parametrize("seed", range(8))
def test_bodies_reading_outer_values_are_sorted_as_gs_sorts_them(seed: int) -> None:
    expected, actual = _orders(odd_scopes_model(), seed)
    assert actual == expected
