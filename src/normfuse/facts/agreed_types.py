"""Inferred types cut to the dims ONNX Runtime agrees with, in every scope and every call.

A shape is trusted where its source is one ONNX Runtime agrees with: a declared graph input, an
initializer or `Constant`, or a node on the allow-list (`shape_rules`) whose inputs are trusted.
Everything else keeps its element type and loses its dims (or keeps only the ones the rule
trusts). Bodies are walked in place: If branches; Loop and Scan bodies, whose carried state is
trusted by induction (its body output has the shape, sizes or symbols, assumed for its
input); and each call of a model-local function, inferred with that call's trusted input types,
transitively (a call inside a function body is typed from that body's call).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from normfuse.facts.inference import TensorType, infer_body, resolved_body
from normfuse.facts.shape_rules import (
    BROADCAST,
    FULL,
    RANK_FROM_LENGTH,
    SAME_SHAPE,
    Values,
    rank_follows,
    trusted_dims,
)
from normfuse.ir.scopes import subgraphs

FunctionKey = tuple[str, str]
# Nested function calls followed before a call's body is left untyped (ONNX forbids recursion;
# this bounds a malformed model).
MAX_CALL_DEPTH = 8


@dataclass
class _Scope:
    types: dict[str, TensorType]  # what inference derived
    result: dict[str, TensorType]  # element types, and the dims ONNX Runtime agrees with
    trusted: set[str] = field(default_factory=set)  # names whose whole shape is trusted
    ranked: set[str] = field(default_factory=set)  # names whose rank (at least) is trusted

    def child(self) -> _Scope:
        return _Scope(self.types, dict(self.result), set(self.trusted), set(self.ranked))

    def has_rank(self, name: str) -> bool:
        return name in self.trusted or name in self.ranked

    def trust(self, name: str, found: TensorType | None = None) -> None:
        found = self.types.get(name) if found is None else found
        if found is not None:
            self.result[name] = found
        self.trusted.add(name)

    def elem_type(self, name: str) -> int:
        found = self.result.get(name) or self.types.get(name)
        return 0 if found is None else found[0]


@dataclass(frozen=True)
class AgreedTypes:
    """Trusted types of the main graph and its bodies, and each function's per-call types."""

    types: dict[str, TensorType]
    calls: dict[FunctionKey, list[dict[str, TensorType]]]


def agreed_types(model: onnx.ModelProto, types: dict[str, TensorType]) -> AgreedTypes:
    """`types` (inferred for `model`, a claim-free skeleton) cut to what ONNX Runtime agrees
    with, and the types of every call of every model-local function."""
    walk = _Walk(model)
    scope = _Scope(types, {name: (found[0], None) for name, found in types.items()})
    for info in model.graph.input:
        scope.trust(info.name)
    walk.graph(model.graph, scope, 0)
    return AgreedTypes(scope.result, walk.calls)


class _Walk:
    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        self.functions = {(f.domain, f.name): f for f in model.functions}
        self.calls: dict[FunctionKey, list[dict[str, TensorType]]] = {
            key: [] for key in self.functions
        }
        self.memo: dict[bytes, tuple[dict[str, TensorType], set[str]]] = {}
        # Small constants by name (names are unique across scopes): a Resize's scales.
        self.values: Values = {}
        self.overridable = {info.name for info in model.graph.input}

    def graph(self, graph: onnx.GraphProto, scope: _Scope, depth: int) -> None:
        for tensor in graph.initializer:
            scope.trust(tensor.name, (tensor.data_type, tuple(tensor.dims)))
            if _small(tensor) and tensor.name not in self.overridable:
                self.values[tensor.name] = numpy_helper.to_array(tensor)
        self.nodes(list(graph.node), scope, depth)

    def nodes(self, nodes: list[onnx.NodeProto], scope: _Scope, depth: int) -> None:
        for node in nodes:
            if (node.domain, node.op_type) in self.functions:
                self.call(node, scope, depth)
            elif next(subgraphs(node), None) is not None:
                self.control_flow(node, scope, depth)
            else:
                if node.op_type == "Constant" and node.output and node.attribute:
                    self._constant(node)
                _node(node, scope, self.values)

    def _constant(self, node: onnx.NodeProto) -> None:
        attribute = node.attribute[0]
        if attribute.name == "value" and _small(attribute.t):
            self.values[node.output[0]] = numpy_helper.to_array(attribute.t)
        elif attribute.name in ("value_float", "value_floats") and not attribute.ref_attr_name:
            value = onnx.helper.get_attribute_value(attribute)
            self.values[node.output[0]] = np.asarray(value, np.float32)

    def control_flow(self, node: onnx.NodeProto, scope: _Scope, depth: int) -> None:
        bodies = {a.name: a.g for a in node.attribute if a.HasField("g")}
        if node.domain not in ("", "ai.onnx"):
            return
        if node.op_type == "If" and set(bodies) == {"then_branch", "else_branch"}:
            for body in bodies.values():
                self.graph(body, scope, depth)
            for index, name in enumerate(node.output):
                branches = [body.output[index].name for body in bodies.values()]
                if name and all(branch in scope.trusted for branch in branches):
                    scope.trust(name)
        elif node.op_type == "Loop" and "body" in bodies:
            body = bodies["body"]
            carried = len(node.input) - 2
            if len(body.input) != carried + 2 or len(body.output) < carried + 1:
                return
            pairs = [
                (node.input[2 + j], body.input[2 + j], body.output[1 + j]) for j in range(carried)
            ]
            self.iterated(node, body, pairs, scope, depth)
        elif node.op_type == "Scan" and "body" in bodies:
            body = bodies["body"]
            if len(node.input) != len(body.input):
                return  # Scan-8 (a sequence_lens input): not followed
            scanned = _attribute(node, "num_scan_inputs", 0)
            states = len(node.input) - scanned
            pairs = [(node.input[j], body.input[j], body.output[j]) for j in range(states)]
            for outer, formal in zip(node.input[states:], body.input[states:], strict=False):
                if outer in scope.trusted:
                    scope.trust(formal.name)
            self.iterated(node, body, pairs, scope, depth)

    def iterated(
        self,
        node: onnx.NodeProto,
        body: onnx.GraphProto,
        pairs: list[tuple[str, onnx.ValueInfoProto, onnx.ValueInfoProto]],
        scope: _Scope,
        depth: int,
    ) -> None:
        """A Loop or Scan body whose state (outer input, body input, body output) is trusted by
        induction: assumed at the outer input's static shape, kept where the body gives it back
        at that shape; a state that does not is dropped and the body walked again."""
        assumed = [
            outer in scope.trusted
            and _every_dim_named(scope.result.get(outer))
            and scope.types.get(formal.name, (0, None))[1] == scope.result[outer][1]
            for outer, formal, _ in pairs
        ]
        while True:
            inner = scope.child()
            for (outer, formal, _), kept in zip(pairs, assumed, strict=True):
                if kept:
                    inner.trust(formal.name, scope.result[outer])
            self.graph(body, inner, depth)
            broken = [
                index
                for index, ((outer, _, back), kept) in enumerate(zip(pairs, assumed, strict=True))
                if kept
                and (
                    back.name not in inner.trusted
                    or inner.result.get(back.name) != scope.result[outer]
                )
            ]
            if not broken:
                break
            for index in broken:
                assumed[index] = False
        scope.result.update(inner.result)
        scope.trusted |= inner.trusted
        for (outer, _, _), kept, name in zip(pairs, assumed, node.output, strict=False):
            if kept and name:
                scope.trust(name, scope.result[outer])

    def call(self, node: onnx.NodeProto, scope: _Scope, depth: int) -> None:
        """One call of a model-local function: its body typed from this call's trusted inputs,
        recorded for the function, and its trusted outputs given to the caller."""
        key = (node.domain, node.op_type)
        function = self.functions[key]
        inputs = {
            formal: scope.result.get(actual, (scope.elem_type(actual), None))
            for formal, actual in zip(function.input, node.input, strict=False)
            if actual and scope.elem_type(actual)
        }
        trusted = {
            formal
            for formal, actual in zip(function.input, node.input, strict=False)
            if actual in scope.trusted
        }
        if depth >= MAX_CALL_DEPTH:
            self.calls[key].append({})
            return
        memo_key = _call_key(node, inputs, trusted)
        if memo_key not in self.memo:
            nodes = resolved_body(function, node)
            types = infer_body(self.model, function, nodes, inputs)
            inner = _Scope(types, {name: (found[0], None) for name, found in types.items()})
            for formal in function.input:
                if formal in trusted:
                    inner.trust(formal, inputs.get(formal))
                elif formal in inputs:
                    inner.result[formal] = inputs[formal]
            self.nodes(nodes, inner, depth + 1)
            self.memo[memo_key] = (inner.result, inner.trusted)
        result, inner_trusted = self.memo[memo_key]
        self.calls[key].append(result)
        for formal, actual in zip(function.output, node.output, strict=False):
            if not actual or formal not in result:
                continue
            if formal in inner_trusted:
                scope.trust(actual, result[formal])
            else:
                scope.result[actual] = (result[formal][0], None)


def _small(tensor: onnx.TensorProto) -> bool:
    return tensor.data_location != onnx.TensorProto.EXTERNAL and int(np.prod(tensor.dims)) <= 64


def _node(node: onnx.NodeProto, scope: _Scope, values: Values) -> None:
    """One node outside any body: its outputs trusted as far as its rule and inputs allow."""
    if _shape_of_ranked(node, scope):
        return
    trust = trusted_dims(node, values)
    inputs = [name for name in node.input if name]
    if trust is not None and all(name in scope.trusted for name in inputs):
        for name in node.output:
            found = scope.types.get(name)
            if not name:
                continue
            if trust == FULL:
                scope.trust(name)
            elif found is not None and found[1] is not None:
                shape = found[1]
                scope.result[name] = (found[0], shape[:trust] + (None,) * (len(shape) - trust))
        return
    if (
        trust is not None
        and node.op_type in SAME_SHAPE
        and inputs
        and all(n in scope.trusted for n in inputs[1:])
    ):
        partial = scope.result.get(node.input[0])
        if partial is not None and partial[1] is not None:
            for name in node.output:
                found = scope.types.get(name)
                if found is not None and found[1] is not None and len(found[1]) == len(partial[1]):
                    scope.result[name] = (found[0], partial[1])
    _rank_only(node, inputs, scope)


def _shape_of_ranked(node: onnx.NodeProto, scope: _Scope) -> bool:
    """`Shape` and `Size` of a tensor whose rank is trusted: the output's own shape follows from
    that rank alone (its values are run-time sizes, which no fact claims), so it is trusted
    whole: a Shape's length is the rank cut by `start` and `end`, a Size is a scalar."""
    if node.op_type not in ("Shape", "Size") or node.domain not in ("", "ai.onnx"):
        return False
    if len(node.input) != 1 or not node.output or not scope.has_rank(node.input[0]):
        return False
    known = scope.result.get(node.input[0])
    if known is None or known[1] is None:
        return False
    rank = len(known[1])
    if node.op_type == "Size":
        scope.trust(node.output[0], (onnx.TensorProto.INT64, ()))
        return True
    if any(attribute.ref_attr_name for attribute in node.attribute):
        return False
    start = _clamped(_attribute(node, "start", 0), rank)
    end = _clamped(_attribute(node, "end", rank), rank)
    scope.trust(node.output[0], (onnx.TensorProto.INT64, (max(0, end - start),)))
    return True


def _clamped(index: int, rank: int) -> int:
    """A Shape bound as the spec reads it: negative from the end, then clamped to [0, rank]."""
    return min(max(index + rank if index < 0 else index, 0), rank)


def _rank_only(node: onnx.NodeProto, inputs: list[str], scope: _Scope) -> None:
    """The outputs' ranks, where the dims are not trusted: a standard op's output rank follows
    from its inputs' ranks and its attributes (`rank_follows`), or, for the ops that take it
    from a shape or axes input's length, from that input's trusted shape."""
    if not rank_follows(node):
        return
    leading, rest = inputs[:1], inputs[1:]
    if node.op_type in RANK_FROM_LENGTH:
        ok = all(scope.has_rank(n) for n in leading) and all(n in scope.trusted for n in rest)
    else:
        ok = all(scope.has_rank(name) for name in inputs)
    if not ok:
        return
    for name in node.output:
        found = scope.types.get(name)
        if not name or found is None or found[1] is None:
            continue
        known = scope.result.get(name)
        if known is None or known[1] is None or len(known[1]) != len(found[1]):
            dims = (None,) * len(found[1])
            if node.op_type in BROADCAST:
                dims = _broadcast_dims(found[1], [scope.result.get(n) for n in inputs])
            scope.result[name] = (found[0], dims)
        scope.ranked.add(name)


def _broadcast_dims(inferred: tuple, operands: list[TensorType | None]) -> tuple:
    """A broadcasting op's output dims that its inputs fix: a size above 1 at a position (from
    the right) of an input whose dims are trusted is the output's there, or the op fails."""
    dims = []
    for offset in range(1, len(inferred) + 1):
        sizes = {
            shape[-offset]
            for _, shape in filter(None, operands)
            if shape is not None
            and len(shape) >= offset
            and isinstance(shape[-offset], int)
            and shape[-offset] > 1
        }
        dim = inferred[-offset]
        dims.append(dim if sizes == {dim} else None)
    return tuple(reversed(dims))


def _every_dim_named(found: TensorType | None) -> bool:
    """A shape whose every dim is a size or a symbol (a symbol names one run-time size: the
    induction over a Loop's iterations holds for it as for a static size)."""
    return found is not None and found[1] is not None and all(d is not None for d in found[1])


def _attribute(node: onnx.NodeProto, name: str, default: int) -> int:
    for attribute in node.attribute:
        if attribute.name == name:
            return int(onnx.helper.get_attribute_value(attribute))
    return default


def _call_key(node: onnx.NodeProto, inputs: dict[str, TensorType], trusted: set[str]) -> bytes:
    attributes = b"".join(a.SerializeToString() for a in node.attribute)
    return (
        repr((node.domain, node.op_type, sorted(inputs.items()), sorted(trusted))).encode()
        + attributes
    )
