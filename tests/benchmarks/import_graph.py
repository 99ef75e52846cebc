"""The import graph of normfuse's own modules (src/normfuse/**/*.py and passes/*.py), read from the
source: each module's normfuse imports, those under `if TYPE_CHECKING:` listed apart, and every
cycle of the runtime graph (the one Python executes) and of the graph with typing imports too.

    python tests/benchmarks/import_graph.py
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"normfuse": ROOT / "src" / "normfuse", "normfuse.passes": ROOT / "passes"}


def modules() -> dict[str, Path]:
    """Every module by its dotted name (the layer folders' modules included)."""
    found = {}
    for package, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = [package, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _typing_block(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(test)


def _targets(node: ast.AST, module: str, known: set[str]) -> set[str]:
    """The normfuse modules one import statement names."""
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name in known}
    if not isinstance(node, ast.ImportFrom):
        return set()
    base = node.module or ""
    if node.level:
        package = module if module in PACKAGES else module.rsplit(".", 1)[0]
        parts = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join([*parts, base] if base else parts)
    named = {f"{base}.{alias.name}" for alias in node.names} & known
    return named or ({base} & known)


def imports(known: dict[str, Path]) -> dict[str, tuple[set[str], set[str]]]:
    """module -> (runtime imports, imports under `if TYPE_CHECKING:`)."""
    graph = {}
    for module, path in known.items():
        runtime, typing = set(), set()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_nodes = {
            id(inner) for node in ast.walk(tree) if _typing_block(node) for inner in ast.walk(node)
        }
        for node in ast.walk(tree):
            targets = _targets(node, module, set(known)) - {module}
            (typing if id(node) in typing_nodes else runtime).update(targets)
        graph[module] = (runtime, typing - runtime)
    return graph


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def main() -> int:
    """Print the graph and its cycles; exit 1 when the runtime graph has a cycle."""
    graph = imports(modules())
    short = lambda name: name.removeprefix("normfuse.")  # noqa: E731
    for module, (runtime, typing) in sorted(graph.items()):
        line = f"{short(module)}: {', '.join(sorted(map(short, runtime))) or '-'}"
        print(line + (f"  [typing: {', '.join(sorted(map(short, typing)))}]" if typing else ""))
    runtime_edges = {module: runtime for module, (runtime, _) in graph.items()}
    all_edges = {module: runtime | typing for module, (runtime, typing) in graph.items()}
    for label, edges in (("runtime", runtime_edges), ("with typing imports", all_edges)):
        found = cycles(edges)
        print(f"cycles ({label}): {len(found)}")
        for component in found:
            print("  " + " <-> ".join(map(short, component)))
    return 1 if cycles(runtime_edges) else 0


if __name__ == "__main__":
    sys.exit(main())
