"""`graph_export.write_graph` writes exactly what onnx-graphsurgeon's own export does (the same
bytes), on every committed real export and on graphs with what a real export rarely has: If
bodies, a model-local function, unnamed nodes, an empty domain, tensor attributes and a sparse
initializer."""

from __future__ import annotations

from pathlib import Path

import onnx
import onnx_graphsurgeon as gs
import pytest
from helpers import odd_scopes_model

from normfuse import graph_export
from normfuse.graph_import import import_graph

REAL = sorted((Path(__file__).resolve().parent.parent / "models" / "real").glob("*.onnx"))


@pytest.mark.parametrize("path", REAL, ids=[path.stem for path in REAL])
def test_a_real_export_is_written_as_gs_writes_it(path: Path) -> None:
    _assert_same(onnx.load(path))


def test_bodies_functions_sparse_and_unnamed_nodes_are_written_as_gs_writes_them() -> None:
    _assert_same(odd_scopes_model())


def _assert_same(model: onnx.ModelProto) -> None:
    expected = gs.export_onnx(import_graph(model), do_type_check=False)
    graph = import_graph(model)
    written = onnx.GraphProto()
    graph_export.write_graph(graph, written)
    assert written.SerializeToString(deterministic=True) == expected.graph.SerializeToString(
        deterministic=True
    )
    bodies = [f.SerializeToString(deterministic=True) for f in graph_export.functions(graph)]
    assert bodies == [f.SerializeToString(deterministic=True) for f in expected.functions]
    assert len(written.node) == len(model.graph.node)
