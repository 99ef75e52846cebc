"""Element types and shapes of a model's tensors, from its declarations and shape inference."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx.numpy_helper
import onnx_graphsurgeon as gs

from normfuse.facts.agreed_types import AgreedTypes, agreed_types
from normfuse.facts.constants import ConstantReader
from normfuse.facts.facts import ScopeFacts
from normfuse.facts.folding import Opset
from normfuse.facts.inference import TensorType, collect, infer
from normfuse.facts.static_values import MAX_DEPTH, shape_entries
from normfuse.io.skeleton import kept, skeleton
from normfuse.ir.graph_import import import_graph
from normfuse.ir.scopes import all_graphs, overridable

# Rounds of folding Reshape targets and inferring again (each round may make the next fold
# possible: a Reshape whose input became static).
FOLD_ROUNDS = 3
FOLDED_PREFIX = "normfuse_static_shape"


@dataclass(frozen=True)
class TypeFacts:
    """Derived types by name, the names whose declared type contradicts the derived one, and
    the types inside each model-local function (keyed by (domain, name))."""

    types: dict[str, TensorType]
    conflicts: frozenset[str]
    function_types: dict[tuple[str, str], dict[str, TensorType]] = field(default_factory=dict)


def derive_types(
    model: onnx.ModelProto, graph: gs.Graph | Callable[[], gs.Graph | None] | None = None
) -> TypeFacts:
    """Types that shape inference derives and ONNX Runtime agrees with, and the declarations
    that contradict them.

    `value_info` and declared output shapes are claims a model may carry stale while it still
    runs, so inference runs on a copy without them (graph inputs and initializers, which ONNX
    Runtime does enforce, are kept; Reshape targets computed from `Shape` are propagated). Each
    inferred shape is then cut to the dims ONNX Runtime agrees with (`agreed_types`: declared
    inputs, constants, and chains of allow-listed operators), and function bodies are typed from
    every call. A claim is used only through inference; where it disagrees with what is derived,
    its name is a conflict. `graph` (the model as `graph_import` imports it, not changed; or a
    function importing it when the folding first needs it) is what the folding reads, in every
    round; without it the skeleton is imported each round.
    """
    stripped = _without_claims(model)
    agreed = _agreed(stripped)
    sources: list[SkeletonGraph | None] = []  # the reading of `graph`, once asked for

    def source() -> SkeletonGraph | None:
        if not sources:
            imported = graph() if callable(graph) else graph
            sources.append(None if imported is None else SkeletonGraph.of(model, imported))
        return sources[0]

    for _ in range(FOLD_ROUNDS):
        folded = fold_reshape_targets(stripped, agreed.types, source)
        if folded is None:
            break
        stripped = folded
        agreed = _agreed(stripped)
    types = agreed.types
    declared: dict[str, TensorType] = {}
    collect(model.graph, declared)
    conflicts = frozenset(
        name
        for name, claim in declared.items()
        if name in types and _contradicts(claim, types[name])
    )
    functions = {key: _merged(calls) for key, calls in agreed.calls.items()}
    return TypeFacts(types, conflicts, functions)


# Standard ops whose output onnx's shape inference leaves untyped though the spec gives it as
# their first input's type and shape, as ONNX Runtime produces it (swept in
# tests/test_ort_shape_agreement.py): GroupNormalization-18/21, a function op with no inference
# of its own (every tensor after one would lose its type).
TYPED_AS_INPUT = frozenset({"GroupNormalization"})


def _agreed(stripped: onnx.ModelProto) -> AgreedTypes:
    inferred: dict[str, TensorType] = {}
    collect(infer(stripped).graph, inferred)
    return agreed_types(stripped, inferred)


def _merged(calls: list[dict[str, TensorType]]) -> dict[str, TensorType]:
    """One set of types for a function body from all its calls (a fusion inside a function
    applies to all of them): a tensor keeps its element type and rank where every call agrees,
    and each dim where every call agrees; a function never called has none."""
    agreed = {}
    for name, found in (calls[0] if calls else {}).items():
        merged = _merge([found, *(other.get(name) for other in calls[1:])])
        if merged is not None:
            agreed[name] = merged
    return agreed


def tensor_types(model: onnx.ModelProto) -> dict[str, TensorType]:
    """Map tensor names to derived (element type, shape) (see `derive_types`), the model
    imported once for the folding."""

    def imported() -> gs.Graph | None:
        try:
            return import_graph(model)
        except Exception:  # a graph gs cannot read: the folding tries the skeleton's own import
            return None

    return derive_types(model, imported).types


def fold_reshape_targets(
    stripped: onnx.ModelProto,
    types: dict[str, TensorType],
    reading: Callable[[], SkeletonGraph | None] = lambda: None,
) -> onnx.ModelProto | None:
    """A copy of `stripped` (a claim-free skeleton) in which the constant-only and shape
    arithmetic feeding each main-graph node whose output inference left not static (a Reshape's
    target; a Pad's pads, a Tile's repeats, any integer input past the first) is replaced, where
    it folds exactly (the one folding table), by initializers: onnx's data propagation stops at
    `Div` (ONNX's own group-norm body computes C / G) and at `ConstantOfShape`/`Transpose`
    (TorchScript's `F.pad` pads), so the parts it cannot propagate are given as values and
    inference goes on from there (a symbolic batch dim stays symbolic). None when nothing folds.
    The folding reads `reading()` (the same graph, read as the skeleton, the earlier rounds'
    folds held; asked only where something may fold) where it gives one, else an import of
    `stripped`. Only for deriving types: the model itself is never changed."""
    candidates = [
        (node, name)
        for node in stripped.graph.node
        if node.domain in ("", "ai.onnx") and node.output and not _static(types.get(node.output[0]))
        for name in _shape_inputs(node, types)
    ]
    if not candidates:
        return None
    model = onnx.ModelProto()
    model.CopyFrom(stripped)  # initializers that are graph inputs are inputs only already
    opset = next((e.version for e in stripped.opset_import if e.domain in ("", "ai.onnx")), None)
    source = reading()
    if source is None:
        try:
            graph = gs.import_onnx(model)
        except Exception:  # a graph gs cannot read: no folding
            return None
        tensors = graph.tensors()
        facts, used = ScopeFacts(ConstantReader(None, opset=opset), types), set(tensors)
    else:
        tensors, used = source.tensors, source.names
        facts = _SkeletonFacts(opset, types, source.held)
    outputs = {info.name for info in model.graph.output}
    folded: dict[str, np.ndarray] = {}
    seen: set[int] = set()
    for node, name in candidates:
        if name not in tensors:
            continue
        copied = _copying_target(node, tensors, facts)
        if copied is not None:
            folded[name] = copied
        else:
            _fold_parts(tensors[name], facts, folded, seen, MAX_DEPTH)
    folded = {name: value for name, value in folded.items() if name not in outputs}
    if not folded:
        return None
    for node in model.graph.node:
        for index, name in enumerate(node.output):
            if name in folded:
                fresh = f"{FOLDED_PREFIX}_{name}"
                while fresh in used:
                    fresh += "_"
                used.add(fresh)
                node.output[index] = fresh
                model.graph.initializer.append(onnx.numpy_helper.from_array(folded[name], name))
    if source is not None:
        source.held.update({id(tensors[name]): value for name, value in folded.items()})
    return model


def _copying_target(
    node: onnx.NodeProto, tensors: dict[str, gs.Tensor], facts: ScopeFacts
) -> np.ndarray | None:
    """A Reshape target computed from `Shape` of the Reshape's own input, as the constant that
    computes the same reshape: entry i "dim i of the input" written 0 (which copies dim i where
    `allowzero` is 0), other entries the ints they are (`Concat(Shape(h)[0:2], [G, -1])` of
    h [b, l, D] is [0, 0, G, -1]: onnx then sizes the -1, D / G, which it cannot from the
    symbols). Only where every reader of the target is such a Reshape of that input (the value
    stands in for the target in the skeleton that is inferred, never in the model); None
    otherwise."""
    if node.op_type != "Reshape" or len(node.input) != 2:
        return None
    data, target = tensors.get(node.input[0]), tensors.get(node.input[1])
    if data is None or target is None or facts.value(target) is not None:
        return None
    readers = target.outputs
    if any(
        reader.op != "Reshape"
        or reader.attrs.get("allowzero", 0)
        or reader.inputs[0] is not data
        or reader.inputs[1] is not target
        for reader in readers
    ):
        return None
    entries = shape_entries(target, facts)
    if entries is None:
        return None
    copied = [
        0 if isinstance(entry, tuple) and entry[0] is data and entry[1] == axis else entry
        for axis, entry in enumerate(entries)
    ]
    if not all(isinstance(entry, int) for entry in copied) or all(
        isinstance(entry, int) for entry in entries
    ):
        return None
    return np.array(copied, np.int64)


@dataclass(frozen=True)
class SkeletonGraph:
    """A model's imported graph (overridable initializers as inputs) read as its claim-free
    skeleton (`_without_claims`) imported again would be: a weight the skeleton gives as a graph
    input is no constant; a tensor an earlier fold round replaced is held as the constant it was
    folded to, with no producer; the names are the ones that import would hold. So one import
    serves every fold round (and then the rewrite)."""

    tensors: dict[str, gs.Tensor]
    # By tensor id: the folded value, or None for a weight the skeleton makes an input.
    held: dict[int, np.ndarray | None]
    names: set[str]

    @staticmethod
    def of(model: onnx.ModelProto, graph: gs.Graph) -> SkeletonGraph | None:
        """The reading of `graph` (imported from `model`); None where the skeleton's nodes
        differ from the model's (a node typed as its input is an `Identity` there)."""
        if any(_typed_as_identity(node) for node in model.graph.node):
            return None
        tensors = graph.tensors()
        weights = {tensor.name for tensor in model.graph.initializer if not kept(tensor)}
        held: dict[int, np.ndarray | None] = {
            id(tensors[name]): None
            for name in weights
            if isinstance(tensors.get(name), gs.Constant)
        }
        return SkeletonGraph(dict(tensors), held, set(tensors) | weights)


class _SkeletonFacts(ScopeFacts):
    """Facts of a `SkeletonGraph` round: a held tensor has no producer, and the type the
    skeleton's import gives it (a folded constant's own; a weight's, derived as an input)."""

    def __init__(
        self, opset: Opset, types: dict[str, TensorType], held: dict[int, np.ndarray | None]
    ) -> None:
        super().__init__(ConstantReader(None, opset=opset, held=held), types)
        self._held = held

    def producer(self, tensor: gs.Tensor) -> gs.Node | None:
        """None for a held tensor."""
        return None if id(tensor) in self._held else super().producer(tensor)

    def tensor_type(self, tensor: gs.Tensor) -> TensorType | None:
        """A folded constant's own type, a weight's derived one."""
        if id(tensor) not in self._held:
            return super().tensor_type(tensor)
        value = self._held[id(tensor)]
        if value is None:
            return self.types.get(tensor.name)
        return onnx.helper.np_dtype_to_tensor_dtype(np.dtype(value.dtype)), tuple(value.shape)


def _fold_parts(
    tensor: gs.Tensor,
    facts: ScopeFacts,
    folded: dict[str, np.ndarray],
    seen: set[int],
    depth: int,
) -> None:
    """Record in `folded` the largest computed (not yet constant) parts of `tensor`'s
    producers that fold to a value; `seen` (tensors already looked at) and the facts' memo of
    static values keep each tensor of the graph to one look."""
    node = facts.producer(tensor)
    if depth == 0 or id(tensor) in seen or node is None:
        return
    seen.add(id(tensor))
    if facts.value(tensor) is not None:
        return
    value = facts.static_value(tensor)
    if value is not None:
        folded[tensor.name] = value
        return
    for source in node.inputs:
        if source.name:
            _fold_parts(source, facts, folded, seen, depth - 1)


_INTEGER_TYPES = frozenset(
    {
        onnx.TensorProto.INT64,
        onnx.TensorProto.INT32,
        onnx.TensorProto.INT16,
        onnx.TensorProto.INT8,
        onnx.TensorProto.UINT64,
        onnx.TensorProto.UINT32,
        onnx.TensorProto.UINT16,
        onnx.TensorProto.UINT8,
    }
)


def _shape_inputs(node: onnx.NodeProto, types: dict[str, TensorType]) -> list[str]:
    """The inputs that may decide `node`'s output shape as values: a Reshape's target, and any
    other input past the first of an integer type (pads, repeats, starts, axes, a shape); a
    float input is data, never folded for this."""
    if node.op_type == "Reshape":
        return list(node.input[1:2])
    first = 0 if node.op_type == "ConstantOfShape" else 1
    return [
        name
        for name in node.input[first:]
        if name and types.get(name, (None,))[0] in _INTEGER_TYPES
    ]


def _static(found: TensorType | None) -> bool:
    return found is not None and found[1] is not None and all(isinstance(d, int) for d in found[1])


def _without_claims(model: onnx.ModelProto) -> onnx.ModelProto:
    """A skeleton without value_info or declared output shapes, in which initializers that are
    also graph inputs are inputs only: a caller may feed another value, so data-propagating
    inference must not derive shapes (a Reshape's rank, a Tile's width) from their defaults."""
    copy = skeleton(model)
    for graph in all_graphs(copy.graph):
        defaults = overridable(graph)
        if defaults:
            kept = [tensor for tensor in graph.initializer if tensor.name not in defaults]
            del graph.initializer[:]
            graph.initializer.extend(kept)
        del graph.value_info[:]
        _typed_as_input(graph)
        inputs = {info.name for info in graph.input}
        for info in graph.output:
            if info.type.HasField("tensor_type") and info.name not in inputs:
                info.type.tensor_type.ClearField("shape")
    for function in copy.functions:  # a body typed per call, as a graph is (ADV6-05)
        _typed_as_input(function)
    return copy


def _typed_as_identity(node: onnx.NodeProto) -> bool:
    """Whether the skeleton types are derived from makes `node` an Identity of its input."""
    standard = node.domain in ("", "ai.onnx") and node.op_type in TYPED_AS_INPUT
    return standard and bool(node.input) and len(node.output) == 1


def _typed_as_input(graph: onnx.GraphProto | onnx.FunctionProto) -> None:
    """Each node of `graph` (or a function body) in `TYPED_AS_INPUT` made an Identity of its
    first input, in place (in the skeleton types are derived from, never in the model)."""
    for node in graph.node:
        if _typed_as_identity(node):
            del node.input[1:]
            del node.attribute[:]
            node.op_type = "Identity"


def _contradicts(claim: TensorType, derived: TensorType) -> bool:
    """True when a declared type cannot describe the derived one (element type, rank, or a static
    dim that differs)."""
    if claim[0] and derived[0] and claim[0] != derived[0]:
        return True
    if claim[1] is None or derived[1] is None:
        return False
    if len(claim[1]) != len(derived[1]):
        return True
    return any(
        isinstance(a, int) and isinstance(b, int) and a != b
        for a, b in zip(claim[1], derived[1], strict=True)
    )


def _merge(found: list[TensorType | None]) -> TensorType | None:
    """One type for all call sites: same element type and rank, dims kept where they agree."""
    if any(item is None or item[1] is None for item in found):
        return None
    elem_types = {item[0] for item in found}
    ranks = {len(item[1]) for item in found}
    if len(elem_types) != 1 or len(ranks) != 1:
        return None
    dims = tuple(
        column[0] if len(set(column)) == 1 else None
        for column in zip(*(item[1] for item in found), strict=True)
    )
    return elem_types.pop(), dims
