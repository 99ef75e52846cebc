"""Symbolic dims a model declares as arithmetic over its other dims, such as optimum's
`past_sequence_length + sequence_length` on a with-past decoder's attention mask.

A dim name is read as an expression only when it parses as whole numbers and names joined by
`+`, `-` and `*` (parentheses allowed) and every name in it is one of the dims the caller knows
(the model's own input dims): `seq-len`, whose parts are no dims of the model, stays a plain
name. Such a dim is then certain: the model's signature says what it equals.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass

# Longer names are never read as expressions (the parser's cost stays bounded).
MAX_EXPRESSION_CHARS = 200
_OPERATORS: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
}
_ALLOWED = (ast.Expression, ast.BinOp, ast.Name, ast.Constant, ast.Load, *_OPERATORS)


@dataclass(frozen=True)
class Expression:
    """A dim name that is arithmetic over other dim names."""

    text: str
    names: tuple[str, ...]
    tree: ast.Expression

    def value(self, sizes: Mapping[str, int]) -> int:
        """The dim's size for the sizes of its `names`."""
        return _evaluate(self.tree.body, sizes)


def parse(text: str, dims: set[str]) -> Expression | None:
    """`text` as an expression over names in `dims`, or None where it is a plain name (or uses
    anything else)."""
    if len(text) > MAX_EXPRESSION_CHARS:
        return None
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if not isinstance(tree.body, ast.BinOp):
        return None
    names: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED):
            return None
        if isinstance(node, ast.Constant) and type(node.value) is not int:
            return None
        if isinstance(node, ast.Name):
            names.append(node.id)
    if not names or not set(names) <= dims:
        return None
    return Expression(text, tuple(dict.fromkeys(names)), tree)


def _evaluate(node: ast.expr, sizes: Mapping[str, int]) -> int:
    if isinstance(node, ast.Name):
        return sizes[node.id]
    if isinstance(node, ast.Constant):
        return node.value
    assert isinstance(node, ast.BinOp)
    return _OPERATORS[type(node.op)](_evaluate(node.left, sizes), _evaluate(node.right, sizes))
