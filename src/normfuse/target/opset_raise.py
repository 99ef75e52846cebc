"""Raising a model's default-domain opset: which operator versions in between change meaning, and
exact adapters for those that only moved a spelling.

Every operator version of the default domain from 14 to 23 is classified (tests check that none is
missing): its change keeps the old meaning as it is (new types, or new attributes and inputs whose
defaults keep the old behaviour), keeps it once the node is respelled (an adapter below), or
changes it (the raise is refused, naming the operator, its versions and what changes). onnx's own
`version_converter` was measured and not used: it drops model-local functions and leaves
`GroupNormalization`-18 unchanged at 21, where its per-group scale is read per channel
(docs/targets.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import onnx
import onnx.defs

# Operator versions whose change never alters a node's meaning: new types, or new attributes and
# optional inputs whose defaults keep the old behaviour (ONNX operator changelog, checked against
# each schema's attributes, inputs and text).
_TYPES_ONLY_22 = (
    "Acos",
    "Acosh",
    "Asin",
    "Asinh",
    "Atan",
    "Atanh",
    "Bernoulli",
    "Conv",
    "ConvTranspose",
    "Cos",
    "Cosh",
    "DeformConv",
    "Det",
    "Dropout",
    "Elu",
    "EyeLike",
    "GlobalAveragePool",
    "GlobalLpPool",
    "GlobalMaxPool",
    "GRU",
    "HardSigmoid",
    "HardSwish",
    "InstanceNormalization",
    "LpNormalization",
    "LpPool",
    "LSTM",
    "MaxRoiPool",
    "MaxUnpool",
    "Mish",
    "Multinomial",
    "NegativeLogLikelihoodLoss",
    "RandomNormal",
    "RandomNormalLike",
    "RandomUniform",
    "RandomUniformLike",
    "RNN",
    "RoiAlign",
    "Round",
    "Selu",
    "Sin",
    "Sinh",
    "Softplus",
    "Softsign",
    "Tan",
    "ThresholdedRelu",
    "GridSample",
)
_SAME_LISTED: dict[str, tuple[int, ...]] = {
    "Add": (14,),
    "Sub": (14,),
    "Mul": (14,),
    "Div": (14,),
    "Relu": (14,),
    "CumSum": (14,),
    "GRU": (14,),  # `layout` defaults to the old one
    "LSTM": (14,),
    "RNN": (14,),
    "Reshape": (14, 19, 21, 23),  # 14: `allowzero` defaults to 0, the old behaviour
    "Identity": (14, 16, 19, 21, 23),
    "BatchNormalization": (15,),
    "CastLike": (19, 21, 23),
    "Pow": (15,),
    "Shape": (15, 19, 21, 23),  # 15: `start`/`end` default to the whole shape
    "Size": (19, 21, 23),
    "GreaterOrEqual": (16,),
    "LessOrEqual": (16,),
    "If": (16, 19, 21, 23),
    "Loop": (16, 19, 21, 23),
    "Scan": (16, 19, 21, 23),
    "LeakyRelu": (16,),
    "PRelu": (16,),
    "ScatterElements": (16, 18),  # `reduction` defaults to none; 18 added max/min
    "ScatterND": (16, 18),
    "Where": (16,),
    "OptionalGetElement": (18,),
    "OptionalHasElement": (18,),
    "LpPool": (18,),  # `ceil_mode` and `dilations` default to the old behaviour
    "AveragePool": (19,),  # `dilations` defaults to 1
    "Cast": (19, 21, 23),  # 19: `saturate` is read only for float8 targets
    "Constant": (19, 21, 23),
    "ConstantOfShape": (20, 21, 23),
    "Equal": (19,),
    "IsInf": (20,),
    "IsNaN": (20,),
    "ReduceMax": (20,),  # booleans added
    "ReduceMin": (20,),
    "Resize": (18, 19),  # new attributes and modes; the defaults keep the old behaviour
    "Pad": (18, 19, 21, 23),  # 18: optional `axes` input; 19: the `wrap` mode
    "Flatten": (21, 23),
    "QLinearMatMul": (21,),
    "QuantizeLinear": (19, 21, 23),  # new attributes whose defaults keep the old behaviour
    "DequantizeLinear": (19, 21, 23),
    "Squeeze": (21, 23),
    "Transpose": (21, 23),
    "Unsqueeze": (21, 23),
    "DFT": (20,),  # the `axis` attribute moved to an input (adapter below)
    "GridSample": (20,),  # modes renamed (adapter below)
    "RoiAlign": (16,),  # its old default made explicit (adapter below)
    "Split": (18,),  # `num_outputs` (adapter below)
}
_SAME: dict[str, tuple[int, ...]] = {
    name: (*_SAME_LISTED.get(name, ()), *((22,) if name in _TYPES_ONLY_22 else ()))
    for name in {*_SAME_LISTED, *_TYPES_ONLY_22}
}
REDUCE_18 = (
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "ReduceProd",
    "ReduceSumSquare",
)


def _changes_if(condition: Callable[[onnx.NodeProto], bool], what: str):
    return lambda node: what if condition(node) else None


def _int_attribute(node: onnx.NodeProto, name: str, default: int = 0) -> int:
    found = next((a for a in node.attribute if a.name == name), None)
    return default if found is None else found.i


# Operator versions that change the meaning of some or every node: a rule gives what changes for
# `node`, or None when this node is not affected.
_MEANING: dict[tuple[str, int], Callable[[onnx.NodeProto], str | None]] = {
    ("BatchNormalization", 14): _changes_if(
        lambda node: len([name for name in node.output if name]) > 1,
        "drops the training outputs (mean, var, saved_mean, saved_var)",
    ),
    ("GroupNormalization", 21): lambda node: "takes scale and bias per channel, not per group",
    **{
        (op, 22): _changes_if(
            lambda node: _int_attribute(node, "ceil_mode") == 1,
            "drops ceil_mode windows that start in the right padding (the output shape changes)",
        )
        for op in ("AveragePool", "MaxPool")
    },
}


@dataclass(frozen=True)
class Blocker:
    """A node whose meaning changes between its version and `version`."""

    op: str
    since: int
    version: int
    change: str

    def __str__(self) -> str:
        return f"{self.op}-{self.since} -> {self.version} {self.change}"


def default_domain(entries) -> int | None:
    """The version a list of opset imports gives the default domain; None when absent."""
    return next((e.version for e in entries if e.domain in ("", "ai.onnx")), None)


def blockers(
    model: onnx.ModelProto, old: int, new: int, fused_ops: frozenset[str] = frozenset()
) -> list[str]:
    """Why raising `model` from opset `old` to `new` would change what it computes (empty when
    it would not, once `adapt` has respelled its nodes): in the graph, bodies and local functions
    (each importing the model's opset is raised with it). Nodes of `fused_ops` (the fused nodes,
    written for `new`) are not judged."""
    found: list[str] = []
    for function in model.functions:
        opset = default_domain(function.opset_import)
        if opset not in (None, old):
            found.append(f"local function {function.name} imports opset {opset}, not {old}")
    seen: set[str] = set()
    for node in _raised_nodes(model, old):
        if node.op_type in fused_ops:
            continue
        blocker = _blocker(node, old, new)
        if blocker is not None and str(blocker) not in seen:
            seen.add(str(blocker))
            found.append(str(blocker))
    return found


def _blocker(node: onnx.NodeProto, old: int, new: int) -> Blocker | None:
    try:
        since = onnx.defs.get_schema(node.op_type, old, "").since_version
        versions = sorted(versions_between(node.op_type, old, new))
    except onnx.defs.SchemaError:
        return Blocker(node.op_type, old, new, f"is not an operator at opset {old}")
    references = sorted(a.name for a in node.attribute if a.ref_attr_name)
    if references and versions:  # a value each call gives: neither judged nor respelled here
        return Blocker(
            node.op_type,
            since,
            max(versions),
            f"takes {', '.join(references)} from the calling node (an attribute reference), "
            "so what it means there is not known inside the function",
        )
    for version in versions:
        rule = _MEANING.get((node.op_type, version))
        change = rule(node) if rule is not None else None
        if change is None and rule is None and version not in _known(node.op_type):
            change = "is not reviewed for this raise"
        if change is not None:
            return Blocker(node.op_type, since, version, change)
    return None


def _known(op: str) -> tuple[int, ...]:
    return (18, *_SAME.get(op, ())) if op in REDUCE_18 else _SAME.get(op, ())


def classified(op: str, version: int) -> bool:
    """True if the change at `version` of `op` is classified (kept, adapted or refused)."""
    return version in _known(op) or (op, version) in _MEANING


def versions_between(op: str, old: int, new: int) -> set[int]:
    """The versions of `op` introduced after opset `old`, up to `new`."""
    versions = set()
    opset = new
    while opset > old:
        since = onnx.defs.get_schema(op, opset, "").since_version
        if since <= old:
            break
        versions.add(since)
        opset = since - 1
    return versions


def adapt(
    model: onnx.ModelProto, old: int, new: int, fused_ops: frozenset[str] = frozenset()
) -> None:
    """Respell, in place, every node whose signature moves between opsets `old` and `new` while
    its meaning stays (call only when `blockers` found nothing; `fused_ops` are left alone)."""
    names = _Names(model)
    _adapt_nodes(model.graph.node, (old, new), names, fused_ops)
    for function in model.functions:
        if default_domain(function.opset_import) == old:
            _adapt_nodes(function.node, (old, new), names, fused_ops)


def _adapt_nodes(nodes, opsets: tuple[int, int], names: _Names, fused_ops: frozenset[str]) -> None:
    """Adapt `nodes` (a repeated NodeProto field) and their bodies, inserting the constants the
    respelled nodes read just before them."""
    rewritten: list[onnx.NodeProto] = []
    for original in nodes:
        node = onnx.NodeProto()
        node.CopyFrom(original)
        for attribute in node.attribute:
            for body in _bodies(attribute):
                _adapt_nodes(body.node, opsets, names, fused_ops)
        if node.domain in ("", "ai.onnx") and node.op_type not in fused_ops:
            versions = versions_between(node.op_type, *opsets)
            for version in sorted(versions):
                adapter = _ADAPTERS.get((node.op_type, version))
                if adapter is not None:
                    rewritten.extend(adapter(node, names))
        rewritten.append(node)
    del nodes[:]
    nodes.extend(rewritten)


def _bodies(attribute: onnx.AttributeProto) -> list[onnx.GraphProto]:
    return [*([attribute.g] if attribute.HasField("g") else []), *attribute.graphs]


def _raised_nodes(model: onnx.ModelProto, old: int) -> Iterator[onnx.NodeProto]:
    yield from _default_domain_nodes(model.graph.node)
    for function in model.functions:
        if default_domain(function.opset_import) == old:
            yield from _default_domain_nodes(function.node)


def _default_domain_nodes(nodes) -> Iterator[onnx.NodeProto]:
    for node in nodes:
        if node.domain in ("", "ai.onnx"):
            yield node
        for attribute in node.attribute:
            for body in _bodies(attribute):
                yield from _default_domain_nodes(body.node)


class _Names:
    """Fresh tensor names, unique across the model's graphs and functions."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.used: set[str] = set()
        for function in model.functions:
            self.used.update([*function.input, *function.output])
        graphs: list = [model.graph, *model.functions]
        while graphs:
            graph = graphs.pop()
            if isinstance(graph, onnx.GraphProto):
                for field in ("input", "output", "value_info", "initializer", "sparse_initializer"):
                    self.used.update(_name(item) for item in getattr(graph, field))
            for node in graph.node:
                self.used.update(node.input)
                self.used.update(node.output)
                for attribute in node.attribute:
                    graphs.extend(_bodies(attribute))

    def fresh(self, stem: str) -> str:
        name, index = stem, 0
        while name in self.used:
            index += 1
            name = f"{stem}_{index}"
        self.used.add(name)
        return name


def _name(item) -> str:
    """The name of a value info or initializer (a sparse one is named by its values)."""
    return item.values.name if isinstance(item, onnx.SparseTensorProto) else item.name


def _pop_attribute(node: onnx.NodeProto, name: str) -> onnx.AttributeProto | None:
    for index, attribute in enumerate(node.attribute):
        if attribute.name == name:
            found = onnx.AttributeProto()
            found.CopyFrom(attribute)
            del node.attribute[index]
            return found
    return None


def _constant_input(
    node: onnx.NodeProto, position: int, tensor: onnx.TensorProto, names: _Names
) -> onnx.NodeProto:
    """A Constant node for `tensor`, wired to `node`'s input `position` (padding skipped optional
    inputs with empty names)."""
    output = names.fresh(f"{node.output[0]}_{tensor.name}")
    while len(node.input) < position:
        node.input.append("")
    if len(node.input) == position:
        node.input.append(output)
    else:
        node.input[position] = output
    return onnx.helper.make_node("Constant", [], [output], value=tensor)


def _axes_to_input(node: onnx.NodeProto, names: _Names) -> list[onnx.NodeProto]:
    """Reduce-18: the `axes` attribute becomes the constant second input (same axes; without
    either, both versions reduce every axis)."""
    axes = _pop_attribute(node, "axes")
    if axes is None:
        return []
    tensor = onnx.helper.make_tensor("axes", onnx.TensorProto.INT64, [len(axes.ints)], axes.ints)
    return [_constant_input(node, 1, tensor, names)]


def _split_count(node: onnx.NodeProto, names: _Names) -> list[onnx.NodeProto]:
    """Split-18: an even split without `split` must say its number of outputs."""
    if len(node.input) < 2 or not node.input[1]:
        node.attribute.append(onnx.helper.make_attribute("num_outputs", len(node.output)))
    return []


def _roi_align_mode(node: onnx.NodeProto, names: _Names) -> list[onnx.NodeProto]:
    """RoiAlign-16 changed the default coordinate mode: the old default is written out."""
    if all(a.name != "coordinate_transformation_mode" for a in node.attribute):
        node.attribute.append(
            onnx.helper.make_attribute("coordinate_transformation_mode", "output_half_pixel")
        )
    return []


_GRID_SAMPLE_MODES = {b"bilinear": b"linear", b"bicubic": b"cubic"}


def _grid_sample_mode(node: onnx.NodeProto, names: _Names) -> list[onnx.NodeProto]:
    """GridSample-20 renamed `bilinear` to `linear` and `bicubic` to `cubic` (same sampling)."""
    for attribute in node.attribute:
        if attribute.name == "mode":
            attribute.s = _GRID_SAMPLE_MODES.get(attribute.s, attribute.s)
    return []


def _dft_axis(node: onnx.NodeProto, names: _Names) -> list[onnx.NodeProto]:
    """DFT-20: the `axis` attribute (default 1) becomes the scalar third input."""
    axis = _pop_attribute(node, "axis")
    value = 1 if axis is None else axis.i
    tensor = onnx.helper.make_tensor("axis", onnx.TensorProto.INT64, [], [value])
    return [_constant_input(node, 2, tensor, names)]


_ADAPTERS: dict[tuple[str, int], Callable[[onnx.NodeProto, _Names], list[onnx.NodeProto]]] = {
    **{(op, 18): _axes_to_input for op in REDUCE_18},
    ("Split", 18): _split_count,
    ("RoiAlign", 16): _roi_align_mode,
    ("GridSample", 20): _grid_sample_mode,
    ("DFT", 20): _dft_axis,
}
