"""The reason registry (`normfuse.match.reasons`) is exactly what the code raises, and the reasons
table of docs/spellings-and-reasons.md is the one rendered from it.

The scan reads the source (AST) of src/normfuse/**/*.py and passes/*.py. A code is raised where a
record is made with it: `Reject(code, ...)`, `Unfit(code, ...)`, the guard's `Failure(code, ...)`,
`NearMiss(kind, node, code, ...)`, a row `Refusal(binding, code, detail)` of a pass's table of
refusing bindings (counted in the module holding the table; `norm_checks.refuse_bindings` raises
it), and an exclusion `(code, detail)` that the driver reports as a near-miss. The code
expression is followed through literals, conditionals, dict lookups, named constants, local
assignments, loop tables, a parameter's callers, a dataclass field's constructions and a
`reason()` method's returns. As a net for any other route, every kebab-case
literal in those modules must be a registered code or one of `NOT_REASONS`.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

from normfuse.passes import group_norm, layer_norm, rms_norm, skip_norm

from normfuse.match import reasons
from normfuse.match.norm_checks import Refusal

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "spellings-and-reasons.md"
REGENERATE = "python -m normfuse.match.reasons docs/spellings-and-reasons.md"
RAISERS = {"Reject": 0, "Unfit": 0, "Failure": 0, "NearMiss": 2, "Refusal": 1}
# Raise sites that pass on a code another record already carries (counted where it was made).
PASS_THROUGH = {
    ("rounds", "reject.reason"),
    ("rounds", "*unfit"),
    ("rounds", "*excluded[outcome.output]"),
    ("norm_checks", "refusal.code"),
}
# Kebab-case literals that are not reason codes: family names, labels, JSON keys.
NOT_REASONS = {"layer-norm", "rms-norm", "skip-norm", "channel-first", "cand-f64", "orig-f64"}
NOT_REASONS |= {"near-misses", "constant-rows", "float16-limits"}  # input profiles
NOT_REASONS |= {"ort-transformers", "utf-8"}  # a stage's name (--with); an encoding
KEBAB = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)+$")


class Source:
    """One scanned module: its tree, each node's enclosing function, its functions by name."""

    def __init__(self, path: Path) -> None:
        self.stem = path.stem
        self.tree = ast.parse(path.read_text(encoding="utf-8"))
        self.scope: dict[int, ast.AST] = {}
        self.functions: dict[str, list[ast.FunctionDef]] = defaultdict(list)
        self._index(self.tree, self.tree)

    def _index(self, node: ast.AST, scope: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            self.scope[id(child)] = scope
            inner = child if isinstance(child, ast.FunctionDef) else scope
            if isinstance(child, ast.FunctionDef):
                self.functions[child.name].append(child)
            self._index(child, inner)


SOURCES = [
    Source(path)
    for path in sorted((ROOT / "src" / "normfuse").rglob("*.py"))
    + sorted((ROOT / "passes").glob("*.py"))
    if path.stem != "reasons"
]


def _called(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)


def _walk_scope(scope: ast.AST):
    """The nodes of `scope` itself (a module or a function), without nested functions' nodes."""
    for child in ast.iter_child_nodes(scope):
        yield child
        if not isinstance(child, ast.FunctionDef):
            yield from _walk_scope(child)


def _assigned(name: str, scope: ast.AST) -> list[ast.expr]:
    """Values assigned to `name` in `scope` (and appended to it)."""
    values = []
    for node in _walk_scope(scope):
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                values.append(node.value)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if node.func.attr == "append" and isinstance(owner, ast.Name) and owner.id == name:
                values.append(ast.List(elts=node.args))
    return values


def _element(sequence: ast.expr, index: int, source: Source, scope: ast.AST) -> set[str] | None:
    """The codes at `index` of each row of the table `sequence` (a loop's iterable)."""
    if isinstance(sequence, ast.Call) and _called(sequence) == "zip":
        return resolve(sequence.args[index], source, scope)
    rows: list[ast.expr] = []
    if isinstance(sequence, ast.Name):
        for holder in (scope, source.tree):
            for value in _assigned(sequence.id, holder):
                rows += value.elts if isinstance(value, ast.Tuple | ast.List) else []
    found = [resolve(row.elts[index], source, scope) for row in rows if isinstance(row, ast.Tuple)]
    return set().union(*found) if found and None not in found else None


def _field(attribute: ast.Attribute, source: Source) -> set[str] | None:
    """The codes a dataclass field (`kernel.params`) is built with, over every construction."""
    for cls in (node for node in ast.walk(source.tree) if isinstance(node, ast.ClassDef)):
        fields = [n.target.id for n in cls.body if isinstance(n, ast.AnnAssign)]
        if attribute.attr not in fields:
            continue
        index, found = fields.index(attribute.attr), set()
        for call in ast.walk(source.tree):
            if isinstance(call, ast.Call) and _called(call) == cls.name:
                args = dict(enumerate(call.args)) | {k.arg: k.value for k in call.keywords}
                value = args.get(index, args.get(attribute.attr))
                found |= resolve(value, source, source.tree) or set()
        return found
    return None


def _parameter(name: str, function: ast.FunctionDef, source: Source) -> set[str] | None:
    """The codes every caller in the module passes for parameter `name`."""
    params = _params(function)
    index = params.index(name) - (params[:1] == ["self"])
    found = set()
    for call in ast.walk(source.tree):
        if isinstance(call, ast.Call) and _called(call) == function.name:
            args = dict(enumerate(call.args)) | {k.arg: k.value for k in call.keywords}
            value = args.get(index, args.get(name))
            codes = resolve(value, source, source.scope[id(call)])
            if codes is None:
                return None
            found |= codes
    return found


def _name(name: str, source: Source, scope: ast.AST) -> set[str] | None:
    """A name: a local assignment or loop target, a parameter, or a module constant."""
    values = _assigned(name, scope)
    for loop in (node for node in _walk_scope(scope) if isinstance(node, ast.For)):
        targets = loop.target.elts if isinstance(loop.target, ast.Tuple) else [loop.target]
        for index, target in enumerate(targets):
            if isinstance(target, ast.Name) and target.id == name:
                return _element(loop.iter, index, source, scope)
    if not values and isinstance(scope, ast.FunctionDef) and name in _params(scope):
        return _parameter(name, scope, source)
    if not values:
        for other in SOURCES:
            values += [(v, other) for v in _assigned(name, other.tree)]  # type: ignore[misc]
        found = [resolve(value, other, other.tree) for value, other in values]
        return set().union(*found) if found and None not in found else None
    found = [resolve(value, source, scope) for value in values]
    return set().union(*found) if None not in found else None


def _params(function: ast.FunctionDef) -> list[str]:
    return [arg.arg for arg in function.args.args]


def _returns(method: str) -> set[str] | None:
    """The codes every method named `method` returns (a `choice.reason()`)."""
    found: set[str] = set()
    for source in SOURCES:
        for function in source.functions.get(method, []):
            for node in ast.walk(function):
                if isinstance(node, ast.Return) and node.value is not None:
                    found |= resolve(node.value, source, function) or set()
    return found or None


def resolve(expr: ast.expr | None, source: Source, scope: ast.AST) -> set[str] | None:
    """The codes `expr` may evaluate to; None where the scan cannot follow it."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return {expr.value}
    parts: list[ast.expr] | None = None
    if isinstance(expr, ast.IfExp):
        parts = [expr.body, expr.orelse]
    elif isinstance(expr, ast.Dict):
        parts = list(expr.values)
    elif isinstance(expr, ast.Tuple | ast.List):
        parts = list(expr.elts)
    elif isinstance(expr, ast.Subscript):
        parts = [expr.value]
    if parts is not None:
        found = [resolve(part, source, scope) for part in parts]
        return set().union(*found) if None not in found else None
    if isinstance(expr, ast.Name):
        return _name(expr.id, source, scope)
    if isinstance(expr, ast.Attribute):
        return _field(expr, source)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and not expr.args:
        return _returns(expr.func.attr)
    return None


def raised() -> tuple[dict[str, set[str]], list[str]]:
    """code -> modules raising it, and the raise sites the scan could not follow."""
    where: dict[str, set[str]] = defaultdict(set)
    lost = []
    for source in SOURCES:
        for node in ast.walk(source.tree):
            scope = source.scope.get(id(node), source.tree)
            code: ast.expr | None = None
            if isinstance(node, ast.Call) and _called(node) in RAISERS:
                args = node.args[: RAISERS[_called(node)] + 1]
                if (
                    any(isinstance(arg, ast.Starred) for arg in args)
                    or len(args) <= RAISERS[_called(node)]
                ):
                    code = None
                else:
                    code = args[-1]
                keyword = [k.value for k in node.keywords if k.arg == "reason"]
                code = keyword[0] if keyword else code
                text = ast.unparse(node.args[-1] if code is None else code)
                if (source.stem, text) in PASS_THROUGH:
                    continue
            elif _is_exclusion(node):
                code = node.elts[0]  # type: ignore[attr-defined]
            else:
                continue
            codes = resolve(code, source, scope)
            if codes is None:
                lost.append(f"{source.stem}:{node.lineno}: {ast.unparse(node)[:80]}")
            for found in codes or ():
                where[found].add(source.stem)
    return where, lost


def _is_exclusion(node: ast.AST) -> bool:
    """A `(code, detail)` pair: an excluded site's near-miss (validation, timing, rollback)."""
    if not isinstance(node, ast.Tuple) or len(node.elts) != 2:
        return False
    first, second = node.elts
    return (
        isinstance(first, ast.Constant)
        and isinstance(first.value, str)
        and bool(KEBAB.match(first.value))
        and not (isinstance(second, ast.Constant) and KEBAB.match(str(second.value)))
    )


def kebab_literals() -> set[str]:
    """Every kebab-case string literal in the scanned modules."""
    return {
        node.value
        for source in SOURCES
        for node in ast.walk(source.tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and KEBAB.match(node.value)
    }


def test_every_raise_site_is_followed():
    _, lost = raised()
    assert not lost, "reason codes the scan cannot follow:\n" + "\n".join(lost)


def test_registry_is_exactly_what_the_code_raises():
    where, _ = raised()
    registered = {reason.code: set(reason.raised_by) for reason in reasons.REASONS}
    unregistered = sorted(set(where) - set(registered))
    unraised = sorted(set(registered) - set(where))
    assert not unregistered, f"raised but not in normfuse/reasons.py: {unregistered}"
    assert not unraised, f"registered but raised nowhere: {unraised}"
    wrong = {code: sorted(where[code]) for code in registered if where[code] != registered[code]}
    assert not wrong, f"raised_by differs from the modules that raise them: {wrong}"


def test_no_code_escapes_the_scan():
    unknown = sorted(kebab_literals() - reasons.codes() - NOT_REASONS)
    assert not unknown, f"kebab-case literals neither registered nor in NOT_REASONS: {unknown}"


def test_codes_are_unique_and_described():
    codes = [reason.code for reason in reasons.REASONS]
    assert len(codes) == len(set(codes))
    for reason in reasons.REASONS:
        assert reason.meaning and "\n" not in reason.meaning and reason.raised_by, reason.code


def test_doc_holds_the_rendered_table():
    text = DOC.read_text(encoding="utf-8")
    table = reasons.render_table()
    assert text.count(reasons.TABLE_START) == 1, f"no reasons table; run: {REGENERATE}"
    assert table in text, f"the reasons table is stale; run: {REGENERATE}"
    assert reasons.rewrite_doc(text) == text, f"the reasons table is stale; run: {REGENERATE}"


def test_refusal_tables_are_scanned():
    """Every row of the passes' refusal tables, read at run time, is a raise site of its pass."""
    where, _ = raised()
    rows = [
        (module.__name__.rsplit(".", 1)[-1], row)
        for module in (group_norm, layer_norm, rms_norm, skip_norm)
        for table in vars(module).values()
        if isinstance(table, tuple)
        for row in table
        if isinstance(row, Refusal)
    ]
    assert rows
    for stem, row in rows:
        assert stem in where[row.code], f"{stem}: {row} not found by the scan"
