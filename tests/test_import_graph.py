"""normfuse's layers are folders, and each imports only the layers below it (`LAYERS`); the
import graph has no cycle at run time; the leaf modules stay leaves
(`tests/benchmarks/import_graph.py` prints the graph)."""

from __future__ import annotations

from tests.benchmarks.import_graph import cycles, imports, modules

# The layers, lowest first: a module may import its own layer and the ones before it. `errors`
# (the one exception type) and the package itself (its version; its public names are imported
# on first use) are below everything; the public facades (`bench`, `tune`), the Olive pass and
# `__main__` above everything.
LAYERS = (
    "errors",
    "io",
    "ir",
    "facts",
    "target",
    "match",
    "passes",
    "rewrite",
    "prove",
    "measure",
    "stages",
    "driver",
    "cli",
    "public",
)
PUBLIC = {"bench", "tune", "olive_pass", "__main__"}


def _graph() -> dict[str, tuple[set[str], set[str]]]:
    return {
        _short(name): ({_short(t) for t in runtime}, {_short(t) for t in typing})
        for name, (runtime, typing) in imports(modules()).items()
    }


def _short(name: str) -> str:
    return "" if name == "normfuse" else name.removeprefix("normfuse.")


def layer(module: str) -> int:
    """The index in `LAYERS` of the layer that holds `module`."""
    if module in PUBLIC:
        return LAYERS.index("public")
    if module == "":
        return LAYERS.index("errors")
    return LAYERS.index(module.split(".")[0])


def test_every_module_is_in_a_layer():
    graph = _graph()
    assert "rewrite.rounds" in graph and "passes.layer_norm" in graph
    for module in graph:
        layer(module)  # raises ValueError for a module outside every layer


def test_each_layer_imports_only_the_layers_below_it():
    upward = [
        f"{module} -> {target}"
        for module, (runtime, typing) in _graph().items()
        for target in runtime | typing
        if layer(target) > layer(module)
    ]
    assert upward == []


def test_the_layer_rule_catches_an_upward_import():
    assert layer("facts.shapes") < layer("match.records") < layer("driver.optimize")
    assert layer("passes.rms_norm") < layer("rewrite.rounds")


def test_cycles_are_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_import_graph_has_no_cycle_even_with_typing_imports():
    graph = _graph()
    assert cycles({name: runtime | typing for name, (runtime, typing) in graph.items()}) == []


def test_records_and_context_are_leaves_of_their_layers():
    graph = _graph()
    assert graph["match.records"] == (set(), set())
    assert graph["match.context"] == (
        {"facts.constants", "facts.facts", "target.targets"},
        set(),
    )


def test_passes_and_the_rounds_do_not_import_each_other():
    graph = _graph()
    checks = [name for name in graph if name.startswith("passes.")]
    checks += ["match.norm_checks", "match.fused_sites"]
    for name in [*checks, "match.final_check"]:
        runtime, typing = graph[name]
        assert not {t for t in runtime | typing if t.startswith("rewrite.")}, name
    assert not {name for name in graph["rewrite.rounds"][0] if name in checks}


def test_the_command_line_and_the_package_load_no_onnx_library_at_start():
    """`normfuse --help` and `import normfuse` import neither onnx, onnxruntime nor
    onnx-graphsurgeon (their import is most of a small run's start-up)."""
    import subprocess
    import sys

    code = (
        "import sys, normfuse, normfuse.cli.main, normfuse.cli.parser as p\n"
        "p.build_parser()\n"
        "print(sorted(m for m in ('onnx', 'onnxruntime', 'onnx_graphsurgeon') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
