"""normfuse's own import graph has no cycle at run time, and the leaf modules stay leaves
(`tests/benchmarks/import_graph.py` prints the graph)."""

from __future__ import annotations

from tests.benchmarks.import_graph import cycles, imports, modules

# The modules checks are built from: not in a cycle even counting `if TYPE_CHECKING:` imports.
CORE = {
    "forms",
    "rewrite",
    "shapes",
    "site_inputs",
    "static_values",
    "same_shape",
    "final_check",
    "context",
    "facts",
    "records",
}


def _graph() -> dict[str, tuple[set[str], set[str]]]:
    return {
        name.removeprefix("normfuse."): (
            {target.removeprefix("normfuse.") for target in runtime},
            {target.removeprefix("normfuse.") for target in typing},
        )
        for name, (runtime, typing) in imports(modules()).items()
    }


def test_cycles_are_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_runtime_import_graph_has_no_cycle():
    graph = _graph()
    assert "rewrite" in graph and "passes.layer_norm" in graph
    assert cycles({name: runtime for name, (runtime, _) in graph.items()}) == []


def test_the_core_is_in_no_cycle_even_with_typing_imports():
    graph = _graph()
    found = cycles({name: runtime | typing for name, (runtime, typing) in graph.items()})
    assert [component for component in found if CORE & set(component)] == []


def test_records_and_context_are_leaves():
    graph = _graph()
    assert graph["records"] == (set(), set())
    assert graph["context"] == ({"constants", "facts", "targets"}, set())
    assert graph["facts"] == ({"constants", "folding", "inference", "static_values"}, set())


def test_passes_and_the_driver_do_not_import_each_other():
    graph = _graph()
    checks = [name for name in graph if name.startswith("passes.")] + ["norm_checks"]
    for name in [*checks, "final_check"]:
        runtime, typing = graph[name]
        assert "rewrite" not in runtime | typing, name
    assert not {name for name in graph["rewrite"][0] if name in checks}
