"""A small declarative pattern language over onnx-graphsurgeon graphs.

A pattern describes how a tensor is computed, written as nested calls that read like the maths:

    centered = Op("Sub", x, mean, name="centered")
    normed = Op("Div", centered, Op("Sqrt", Op("Add", variance, Const("epsilon"))))

Semantics:
- `Var(name)` matches any tensor and binds it; `Const(name)` matches a constant (initializer that
  no caller can override, `Constant` node, or an exact fold of them), optionally of a given
  one-element value, which it must equal exactly in its own type (a float64 2.0000001 is not 2).
- `Op(op, *inputs)` matches the first output of a default-domain node of that type whose leading
  inputs match `inputs` (`Add` and `Mul` in either operand order). `extra_inputs=True` lets the
  node have further inputs (a `ReduceMean` axes input, read later by the check).
- `AnyOf(...)` tries alternatives in order. A name used twice must bind the same tensor, or two
  tensors computed identically (exporters sometimes compute `x - mean` twice).
Matching yields every consistent `Match`; each records its bindings and the nodes it covers.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx_graphsurgeon as gs

from normfuse.facts.constants import DEFAULT_DOMAINS, Constants

COMMUTATIVE_OPS = frozenset({"Add", "Mul"})
# Ops whose two identical-looking nodes may compute different values (random draws), or whose
# sameness is a matter of value, not structure (Constant).
_NOT_REPEATABLE = frozenset(
    {
        "Constant",
        "RandomNormal",
        "RandomNormalLike",
        "RandomUniform",
        "RandomUniformLike",
        "Multinomial",
        "Bernoulli",
        "Dropout",
    }
)


@dataclass(frozen=True)
class Var:
    """Any tensor, bound to `name`."""

    name: str


@dataclass(frozen=True)
class Const:
    """A constant tensor bound to `name`; with `value`, a one-element constant equal to it."""

    name: str
    value: float | None = None


@dataclass(frozen=True, init=False)
class Op:
    """A tensor produced by a node of type `op` from `inputs`; bound to `name` when given."""

    op: str
    inputs: tuple[Pattern, ...]
    name: str | None
    extra_inputs: bool

    def __init__(
        self, op: str, *inputs: Pattern, name: str | None = None, extra_inputs: bool = False
    ) -> None:
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "inputs", inputs)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "extra_inputs", extra_inputs)


@dataclass(frozen=True, init=False)
class AnyOf:
    """The first of `alternatives` that matches (all are tried on backtracking)."""

    alternatives: tuple[Pattern, ...]

    def __init__(self, *alternatives: Pattern) -> None:
        object.__setattr__(self, "alternatives", alternatives)


Pattern = Var | Const | Op | AnyOf


@dataclass(frozen=True)
class Match:
    """Bindings from pattern names to tensors, and the matched nodes (root's producer first)."""

    root: gs.Tensor
    tensors: Mapping[str, gs.Tensor]
    nodes: tuple[gs.Node, ...] = field(default=())

    def __getitem__(self, name: str) -> gs.Tensor:
        return self.tensors[name]

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def node(self, name: str) -> gs.Node:
        """The node that produced the tensor bound to `name`."""
        return self.tensors[name].inputs[0]


class _State:
    """Bindings and covered nodes of a partial match; never changed (a step makes a new one)."""

    __slots__ = ("nodes", "tensors")

    def __init__(self, tensors: Mapping[str, gs.Tensor], nodes: tuple[gs.Node, ...]) -> None:
        self.tensors = tensors
        self.nodes = nodes

    def bind(self, name: str, tensor: gs.Tensor) -> _State | None:
        bound = self.tensors.get(name)
        if bound is None:
            tensors = dict(self.tensors)
            tensors[name] = tensor
            return _State(tensors, self.nodes)
        return self if equivalent(bound, tensor) else None

    def add(self, node: gs.Node) -> _State:
        for seen in self.nodes:  # by identity (gs nodes compare by value)
            if seen is node:
                return self
        return _State(self.tensors, (*self.nodes, node))


def match(pattern: Pattern, tensor: gs.Tensor, reader: Constants) -> Iterator[Match]:
    """Every way `pattern` matches the computation of `tensor`."""
    for state in _match(pattern, tensor, _State({}, ()), reader):
        yield Match(tensor, state.tensors, state.nodes)


def _match(
    pattern: Pattern, tensor: gs.Tensor, state: _State, reader: Constants
) -> Iterator[_State]:
    kind = type(pattern)  # the four pattern classes, most frequent first
    if kind is Op:
        yield from _match_op(pattern, tensor, state, reader)
    elif kind is AnyOf:
        node = producer(tensor)
        op = None if node is None else node.op
        for alternative in pattern.alternatives:
            # Cheap rejection first: an `Op` of another type cannot match (`_match_op`).
            if type(alternative) is not Op or alternative.op == op:
                yield from _match(alternative, tensor, state, reader)
    elif kind is Var:
        bound = state.bind(pattern.name, tensor)
        if bound is not None:
            yield bound
    else:
        yield from _match_const(pattern, tensor, state, reader)


def _match_const(
    pattern: Const, tensor: gs.Tensor, state: _State, reader: Constants
) -> Iterator[_State]:
    if pattern.value is None:
        if not reader.is_constant(tensor):
            return
    elif reader.scalar(tensor) != pattern.value:  # exactly, in the constant's own type
        return
    bound = state.bind(pattern.name, tensor)
    if bound is not None:
        yield bound


def _match_op(pattern: Op, tensor: gs.Tensor, state: _State, reader: Constants) -> Iterator[_State]:
    node = producer(tensor)
    if node is None or node.op != pattern.op or node.domain not in DEFAULT_DOMAINS:
        return
    if node.outputs[0] is not tensor:  # a secondary output (LayerNormalization's Mean, ...)
        return
    count = len(pattern.inputs)
    if len(node.inputs) < count or (len(node.inputs) > count and not pattern.extra_inputs):
        return
    if pattern.name is not None:
        state = state.bind(pattern.name, tensor)
        if state is None:
            return
    state = state.add(node)
    inputs = list(node.inputs[:count])
    orders = [inputs]
    if pattern.op in COMMUTATIVE_OPS and count == 2 and inputs[0] is not inputs[1]:
        orders.append(inputs[::-1])
    for order in orders:
        yield from _match_all(pattern.inputs, order, state, reader)


def _match_all(
    patterns: tuple[Pattern, ...], tensors: list[gs.Tensor], state: _State, reader: Constants
) -> Iterator[_State]:
    if len(patterns) == 1:  # the last operand: its matches are the whole list's
        yield from _match(patterns[0], tensors[0], state, reader)
        return
    if not patterns:
        yield state
        return
    for after_first in _match(patterns[0], tensors[0], state, reader):
        yield from _match_all(patterns[1:], tensors[1:], after_first, reader)


def root_ops(pattern: Pattern) -> frozenset[str] | None:
    """The op types a node must have for `pattern` to match its first output; None when the
    pattern's root is not an `Op` (it may match any tensor)."""
    if isinstance(pattern, Op):
        return frozenset({pattern.op})
    if isinstance(pattern, AnyOf):
        found: set[str] = set()
        for alternative in pattern.alternatives:
            ops = root_ops(alternative)
            if ops is None:
                return None
            found |= ops
        return frozenset(found)
    return None


def producer(tensor: gs.Tensor) -> gs.Node | None:
    """The node that computes `tensor`, or None for graph inputs and initializers."""
    return tensor.inputs[0] if len(tensor.inputs) == 1 else None


def equivalent(a: gs.Tensor, b: gs.Tensor, depth: int = 16) -> bool:
    """True if `a` and `b` are the same tensor or are computed identically from the same tensors."""
    if a is b:
        return True
    node_a, node_b = producer(a), producer(b)
    if depth == 0 or node_a is None or node_b is None or node_a is node_b:
        return False
    if node_a.op in _NOT_REPEATABLE or node_a.op != node_b.op or node_a.domain != node_b.domain:
        return False
    if node_a.domain not in DEFAULT_DOMAINS:  # a custom op may not be a function of its inputs
        return False
    if len(node_a.inputs) != len(node_b.inputs) or len(node_a.outputs) != 1:
        return False
    if len(node_b.outputs) != 1 or not _same_attrs(node_a.attrs, node_b.attrs):
        return False
    return all(
        equivalent(x, y, depth - 1) for x, y in zip(node_a.inputs, node_b.inputs, strict=True)
    )


def _same_attrs(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    try:
        return all(bool(np.all(a[key] == b[key])) for key in a)
    except (TypeError, ValueError):
        return False


def match_first(pattern: Pattern, tensor: gs.Tensor, reader: Constants) -> Match | None:
    """The first way `pattern` matches the computation of `tensor`, or None."""
    return next(match(pattern, tensor, reader), None)
