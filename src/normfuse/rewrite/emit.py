"""Writing proved sites into the graph: each site's fused node replaces its subgraph (its
output keeps the original tensor's name), the float16 output Casts go past the value moves that
alone read them, the constants the fused nodes need are created once per scope, and names never
collide."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx_graphsurgeon as gs

from normfuse.facts.constants import Constants
from normfuse.ir import toposort
from normfuse.ir.float16_moves import LIFTABLE
from normfuse.match.context import Context
from normfuse.match.records import (
    FusedNode,
    Site,
)


def apply_sites(graph: gs.Graph, sites: list[Site], names: NameRegistry, reader: Constants) -> None:
    """Replace each site's subgraph by its fused node, keep output names, clean up, sort. New
    names are unique across every scope in `names`."""
    if not sites:
        return
    emitter = _Emitter(graph, names, reader)
    position = {id(node): (index, node) for index, node in enumerate(graph.nodes)}
    for site in sites:
        found = sorted(position[key] for key in site.node_ids if key in position)
        _apply_site(emitter, site, [node for _, node in found])
    # gs's own order of the nodes, found without recursion (`toposort`); the function list is
    # not sorted: the export keeps the model's function order.
    graph.cleanup(remove_unused_graph_inputs=False)
    toposort.sort_scope(graph)


def _apply_site(emitter: _Emitter, site: Site, nodes: list[gs.Node]) -> None:
    """Emit `site`'s fused node (with its Casts and Transposes) producing the site's output."""
    fused = site.fused
    name = emitter.node_name(f"{site.output}/{site.op}")
    own = _site_initializers(nodes)
    inputs = _fused_inputs(fused, name, own, emitter)
    output = site.root
    output.inputs.clear()
    if fused.input_cast is not None:
        moves = fused.input_moves
        source = fused.moved_input if moves else inputs[0]
        inputs[0] = emitter.fed_by(source, "Cast", {"to": fused.input_cast}, name)
        for move in moves:  # the same moves, of the cast values
            operands = tuple(move.inputs[1:])
            inputs[0] = emitter.fed_by(inputs[0], move.op, dict(move.attrs), name, operands)
    for op, value in reversed(list(zip(("Mul", "Add"), fused.after_cast, strict=True))):
        if value is not None:
            operand = _constant(value, f"{name}/{op}_operand", own, emitter)
            output = emitter.feeding(output, op, {}, name, (operand,))
    if fused.output_cast is not None:
        output = emitter.feeding(output, "Cast", {"to": fused.output_cast}, name)
    if fused.scale_after is not None:
        operand = _constant(fused.scale_after, f"{name}/scale_after", own, emitter)
        output = emitter.feeding(output, "Mul", {}, name, (operand,))
    if fused.layout is not None:
        before, after = fused.layout
        output = emitter.feeding(output, "Transpose", {"perm": list(after)}, name)
        inputs[0] = emitter.fed_by(inputs[0], "Transpose", {"perm": list(before)}, name)
    if fused.grouping is not None:
        grouped, back = (np.array(shape, np.int64) for shape in fused.grouping)
        back_operand = _constant(back, f"{name}/shape_back", own, emitter)
        output = emitter.feeding(output, "Reshape", {}, name, (back_operand,))
        grouped_operand = _constant(grouped, f"{name}/grouped_shape", own, emitter)
        inputs[0] = emitter.fed_by(inputs[0], "Reshape", {}, name, (grouped_operand,))
    if fused.output_moves:  # the result moved in float32 too, cast where the moves end
        moved = output
        for move in fused.output_moves:
            moved = emitter.fed_by(moved, move.op, dict(move.attrs), name, tuple(move.inputs[1:]))
        end = fused.moved_output
        end.inputs.clear()
        cast = gs.Node("Cast", emitter.node_name(f"{name}/Cast_out"), {"to": fused.output_cast})
        cast.inputs, cast.outputs = [moved], [end]
        emitter.graph.nodes.append(cast)
    outputs = [output]
    for index, tensor in fused.extra_outputs:
        used = tensor in emitter.graph.outputs or any(
            id(user) not in site.node_ids for user in tensor.outputs
        )
        if used:
            tensor.inputs.clear()
            outputs += [gs.Variable.empty() for _ in range(index - len(outputs))] + [tensor]
    emitter.graph.nodes.append(
        gs.Node(fused.op, name, dict(fused.attrs), inputs, outputs, domain=fused.domain)
    )


def output_moves(
    fused: FusedNode, root: gs.Tensor, graph_outputs: set[str], context: Context
) -> tuple:
    """For a float16 norm fused as the float32 kernel between Casts (nothing else after it):
    the value-moving nodes (Reshape, Transpose, ...) that alone read its result, one after the
    other, none of whose outputs but the last is a graph output, where ONNX Runtime's CPU
    provider reads the moved result unrounded in the original (asked of its graph:
    `float16_partition`; a model-local function's reads are not shown, and its moves are taken
    as they always were). Moved in float32 and cast where the moves end, the fused model rounds
    where the original does (the input side: `fused_sites.float16_input_moves`; the output
    guard compares every read both models share). Under ONNX's semantics the same values: a
    move commutes with a Cast."""
    widened = fused.input_cast is not None and fused.output_cast is not None
    plain = fused.layout is None and fused.grouping is None and fused.scale_after is None
    if not (widened and plain and all(value is None for value in fused.after_cast)):
        return ()
    if root.inputs and root.inputs[0].op == "Cast":
        return ()  # the model's own Cast back rounds the result there: so does the fused one
    moves, tensor = [], root
    while tensor.name not in graph_outputs:
        # Shape and Size read no value: they read the float16 tensor, which stays.
        users = [user for user in tensor.outputs if user.op not in ("Shape", "Size")]
        if len(users) != 1:
            break
        node = users[0]
        data_only = node.inputs[0] is tensor and all(t is not tensor for t in node.inputs[1:])
        if node.op not in LIFTABLE or len(node.outputs) != 1 or not data_only:
            break
        moves.append(node)
        tensor = node.outputs[0]
    lookup = context.facts.float16_rounded
    if moves and lookup is not None:
        readers = [user for user in tensor.outputs if user.outputs]
        if any(lookup(user.outputs[0].name, tensor.name) for user in readers):
            return ()  # the original rounds the moved result: so does the Cast at the norm
    return tuple(moves)


class NameRegistry:
    """Every tensor and node name in a set of scopes, so that a name made in one scope never
    shadows or is shadowed by another scope's."""

    def __init__(self, scopes: Sequence[gs.Graph]) -> None:
        self.tensors: set[str] = set()
        self.nodes: set[str] = set()
        for scope in scopes:
            for node in scope.nodes:
                self.nodes.add(node.name)
                self.tensors.update(t.name for t in [*node.inputs, *node.outputs])
            self.tensors.update(t.name for t in [*scope.inputs, *scope.outputs])


class _Emitter:
    """Adds nodes and tensors to one graph under unique, deterministic names."""

    def __init__(self, graph: gs.Graph, names: NameRegistry, reader: Constants) -> None:
        self.graph = graph
        self.names = names
        self.reader = reader  # reads a site's own initializers, external data included
        # The constants this emitter made, by element type, shape and bytes: sites of one graph
        # needing the same new value (a unit scale, a reshaped affine) share one initializer.
        self._made: dict[tuple[str, tuple[int, ...], bytes], gs.Constant] = {}

    def node_name(self, stem: str) -> str:
        """A node name not yet used in any scope, reserved."""
        name = _unique(stem, self.names.nodes)
        self.names.nodes.add(name)
        return name

    def tensor(self, stem: str, value: np.ndarray | None = None) -> gs.Tensor:
        """A new variable (or, with `value`, constant) under a name no scope uses."""
        name = _unique(stem, self.names.tensors)
        self.names.tensors.add(name)
        return gs.Variable(name) if value is None else gs.Constant(name, value)

    def constant(self, stem: str, value: np.ndarray) -> gs.Constant:
        """A constant holding exactly `value`: one this emitter already made, else a new one."""
        value = np.ascontiguousarray(value)
        key = (value.dtype.str, tuple(value.shape), value.tobytes())
        if key not in self._made:
            self._made[key] = self.tensor(stem, value)
        return self._made[key]

    def feeding(
        self, output: gs.Tensor, op: str, attrs: dict, stem: str, operands: tuple = ()
    ) -> gs.Tensor:
        """Add `op` producing `output` from a new tensor (and `operands`); return that tensor."""
        source = self.tensor(f"{stem}/{op}_input")
        node = gs.Node(op, self.node_name(f"{stem}/{op}"), attrs, [source, *operands], [output])
        self.graph.nodes.append(node)
        return source

    def fed_by(
        self, source: gs.Tensor, op: str, attrs: dict, stem: str, operands: tuple = ()
    ) -> gs.Tensor:
        """Add `op` reading `source` (and `operands`) into a new tensor; return that tensor."""
        result = self.tensor(f"{stem}/{op}_output")
        node = gs.Node(op, self.node_name(f"{stem}/{op}_in"), attrs, [source, *operands], [result])
        self.graph.nodes.append(node)
        return result


def _fused_inputs(
    fused: FusedNode, name: str, own: list[gs.Constant], emitter: _Emitter
) -> list[gs.Tensor]:
    """The fused node's input tensors; trailing Nones are dropped, and an array becomes the
    site's own initializer (`own`) holding exactly it (same type, shape and bytes: a weight is
    never copied), else a new constant."""
    values = list(fused.inputs)
    while values and values[-1] is None:
        values.pop()
    inputs = []
    for index, value in enumerate(values):
        if value is None:
            inputs.append(gs.Variable.empty())
        elif isinstance(value, np.ndarray):
            inputs.append(_constant(value, f"{name}/input{index}", own, emitter))
        else:
            inputs.append(value)
    return inputs


# A constant of at least this many bytes (onnx's external-data threshold) that the site's own
# initializer holds in another shape is read through a Reshape of it, never copied.
RESHAPE_RATHER_THAN_COPY = 1024


def _constant(value: np.ndarray, stem: str, own: list[gs.Constant], emitter: _Emitter) -> gs.Tensor:
    """The initializer of `own` holding exactly `value`; else, for a large `value`, one holding
    its elements in another shape (a [1, H] scale), read through a Reshape, so a weight is never
    copied into the graph or a body; else a constant the emitter made for another site or a new
    one."""
    same = next((c for c in own if _holds_exactly(c, value, emitter.reader)), None)
    if same is not None:
        return same
    if value.nbytes >= RESHAPE_RATHER_THAN_COPY:
        other = next((c for c in own if _holds_exactly(c, value, emitter.reader, True)), None)
        if other is not None:
            target = emitter.constant(f"{stem}/shape", np.array(value.shape, np.int64))
            return emitter.fed_by(other, "Reshape", {}, stem, (target,))
    return emitter.constant(stem, value)


def _site_initializers(nodes: list[gs.Node]) -> list[gs.Constant]:
    """The initializers the site's `nodes` read (inline or external: an external one stays
    external when the fused node reads it)."""
    return [tensor for node in nodes for tensor in node.inputs if isinstance(tensor, gs.Constant)]


def _holds_exactly(
    constant: gs.Constant, value: np.ndarray, reader: Constants, any_shape: bool = False
) -> bool:
    """Whether `constant` is `value`: the same element type, shape (or, with `any_shape`, element
    count) and bytes in order, its values read through the scope's reader, which already read
    them for the site's checks."""
    shape = tuple(constant.shape)
    if constant.dtype != value.dtype or (shape != value.shape and not any_shape):
        return False
    if int(np.prod(shape, dtype=np.int64)) != value.size:
        return False
    held = reader.value(constant)
    return held is not None and held.tobytes() == np.ascontiguousarray(value).tobytes()


def _unique(name: str, taken) -> str:
    candidate, index = name, 1
    while candidate in taken:
        candidate, index = f"{name}_{index}", index + 1
    return candidate
