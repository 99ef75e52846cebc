"""Which fused operator to emit for a target runtime and the model's opset.

`--target ort` may emit anything ONNX Runtime runs; `--target onnx` only standard operators valid
at the model's opset. `LayerNormalization` became standard at opset 17, `RMSNormalization` at 23;
for ONNX Runtime, RMS normalisation is emitted as its `SimplifiedLayerNormalization`. Below 17, for
ONNX Runtime, the model's opset is raised to 17 when every operator it uses means the same at 17
(the operator versions in between only added types or attributes whose defaults keep the old
behaviour); otherwise `LayerNormalization` is emitted in the default domain at the old opset, which
ONNX Runtime accepts but `onnx.checker` does not (the report then says the model is ORT-only).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum

import onnx
import onnx.defs

LAYER_NORM_OPSET = 17
RMS_NORM_OPSET = 23
LOWEST_RAISABLE_OPSET = 13
# The standard operator of each kind and the opset that introduced it.
STANDARD_OPS = {
    "layer-norm": ("LayerNormalization", LAYER_NORM_OPSET),
    "rms-norm": ("RMSNormalization", RMS_NORM_OPSET),
}

# Operator versions from 14 to 23 that only widened types or added attributes and inputs whose
# defaults keep the old meaning (ONNX operator changelog; checked against the schemas: same
# attributes, inputs, outputs and text unless noted). RoiAlign-16, which changed a default, and
# ReduceMax/ReduceMin-20, GroupNormalization-21, Resize-18/19, the pooling and quantisation
# changes are absent: a model using them is not raised past them.
_TYPES_ONLY_22 = [
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
    "HardSigmoid",
    "HardSwish",
    "InstanceNormalization",
    "LpNormalization",
    "MaxRoiPool",
    "MaxUnpool",
    "Mish",
    "Multinomial",
    "NegativeLogLikelihoodLoss",
    "RandomNormal",
    "RandomNormalLike",
    "RandomUniform",
    "RandomUniformLike",
    "Round",
    "Selu",
    "Sin",
    "Sinh",
    "Softplus",
    "Softsign",
    "Tan",
    "ThresholdedRelu",
]
_REDUCE_18 = [
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "ReduceProd",
    "ReduceSumSquare",
]
_MEANING_PRESERVING_VERSIONS: dict[str, frozenset[int]] = {
    name: frozenset(versions)
    for name, versions in {
        "Add": {14},
        "Sub": {14},
        "Mul": {14},
        "Div": {14},
        "Relu": {14},
        "CumSum": {14},
        "Reshape": {14, 19, 21, 23},
        "GRU": {14, 22},
        "LSTM": {14, 22},
        "RNN": {14, 22},
        "Identity": {14, 16, 19, 21, 23},
        # 14 dropped the training outputs: only single-output (inference) nodes, see below.
        "BatchNormalization": {14, 15},
        "Pow": {15},
        "Shape": {15, 19, 21, 23},
        "Size": {19, 21, 23},
        "GreaterOrEqual": {16},
        "LessOrEqual": {16},
        "If": {16, 19, 21, 23},
        "Loop": {16, 19, 21, 23},
        "Scan": {16, 19, 21, 23},
        "LeakyRelu": {16},
        "PRelu": {16},
        "ScatterElements": {16, 18},  # 18 added reduction modes
        "ScatterND": {16, 18},
        "Where": {16},
        "Cast": {19, 21, 23},  # 19 added `saturate`, which only float8 targets read
        "CastLike": {19, 21, 23},
        "Constant": {19, 21, 23},
        "ConstantOfShape": {20, 21, 23},
        "Equal": {19},
        "Flatten": {21, 23},
        "IsInf": {20},
        "IsNaN": {20},
        "Pad": {18, 19, 21, 23},  # 18 added the optional `axes` input, 19 the `wrap` mode
        "QLinearMatMul": {21},
        "Split": {18},  # 18 added `num_outputs`
        "Squeeze": {21, 23},
        "Transpose": {21, 23},
        "Unsqueeze": {21, 23},
        **{name: {22} for name in _TYPES_ONLY_22},
        # 18 moved `axes` from an attribute to an input: only nodes without the attribute.
        **{name: {18} for name in _REDUCE_18},
    }.items()
}


class Target(str, Enum):
    """The runtime the optimised model is for."""

    ORT = "ort"
    ONNX = "onnx"


@dataclass(frozen=True)
class Emission:
    """How to emit a fused op: type, domain, the opset the model must import, ORT-only or not."""

    op: str
    domain: str
    opset: int
    ort_only: bool


def default_opset(model: onnx.ModelProto) -> int:
    """The model's opset for the default ONNX domain; 0 when it imports none (an ai.onnx.ml-only
    model: nothing to fuse, and nothing can be emitted)."""
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return entry.version
    return 0


def layer_norm_emission(model: onnx.ModelProto, target: Target) -> Emission | None:
    """How `LayerNormalization` is emitted for `model` and `target`; None when it cannot be."""
    opset = default_opset(model)
    raisable = opset < LAYER_NORM_OPSET and can_raise_opset(model, LAYER_NORM_OPSET)
    return _layer_norm(opset, target, raisable)


def rms_norm_emission(model: onnx.ModelProto, target: Target) -> Emission | None:
    """How RMS normalisation is emitted: ONNX Runtime's `SimplifiedLayerNormalization` (registered
    in the default domain at every opset) for ORT; standard `RMSNormalization` from opset 23,
    raising the model's opset to 23 where that changes no other operator's meaning."""
    opset = default_opset(model)
    raisable = (
        target is Target.ONNX and opset < RMS_NORM_OPSET and can_raise_opset(model, RMS_NORM_OPSET)
    )
    return _rms_norm(opset, target, raisable)


def _layer_norm(opset: int, target: Target, raisable: bool) -> Emission | None:
    if opset >= LAYER_NORM_OPSET:
        return Emission("LayerNormalization", "", opset, ort_only=False)
    if raisable:
        return Emission("LayerNormalization", "", LAYER_NORM_OPSET, ort_only=False)
    if target is Target.ONNX:
        return None
    return Emission("LayerNormalization", "", opset, ort_only=True)


def _rms_norm(opset: int, target: Target, raisable: bool = False) -> Emission | None:
    if target is Target.ORT:
        return Emission("SimplifiedLayerNormalization", "", opset, ort_only=True)
    if opset >= RMS_NORM_OPSET:
        return Emission("RMSNormalization", "", opset, ort_only=False)
    if raisable:
        return Emission("RMSNormalization", "", RMS_NORM_OPSET, ort_only=False)
    return None


def emissions(model: onnx.ModelProto, target: Target) -> dict[str, Emission | None]:
    """The emission of each normalisation kind for `model` and `target`."""
    layer_norm = layer_norm_emission(model, target)
    return {
        "layer-norm": layer_norm,
        "rms-norm": rms_norm_emission(model, target),
        **_group(layer_norm),
    }


def _group(layer_norm: Emission | None) -> dict[str, Emission | None]:
    """Group norm's statistics are emitted as `LayerNormalization` over the grouped tensor: ONNX
    Runtime's CPU provider has no kernel for `GroupNormalization`-18/21 (it runs their function
    body, measured slower) nor for `com.microsoft.GroupNorm` (see passes/group_norm.py)."""
    return {"group-norm": layer_norm}


def can_raise_opset(model: onnx.ModelProto, new_opset: int) -> bool:
    """True if raising the default-domain opset to `new_opset` changes no node's meaning, in the
    graph and in every model-local function (they are raised with it: a model imports one
    version of each domain)."""
    old_opset = default_opset(model)
    if old_opset < LOWEST_RAISABLE_OPSET:
        return False
    nodes = list(_default_domain_nodes(model.graph))
    for function in model.functions:
        if _function_opset(function) not in (None, old_opset):
            return False
        nodes.extend(_default_domain_nodes(function))
    return all(_keeps_meaning(node, old_opset, new_opset) for node in nodes)


def _keeps_meaning(node: onnx.NodeProto, old_opset: int, new_opset: int) -> bool:
    try:
        versions = _versions_between(node.op_type, old_opset, new_opset)
    except onnx.defs.SchemaError:
        return False
    if not versions <= _MEANING_PRESERVING_VERSIONS.get(node.op_type, frozenset()):
        return False
    if node.op_type == "BatchNormalization" and 14 in versions:
        return len([name for name in node.output if name]) == 1  # the training form is gone
    if node.op_type in _REDUCE_18 and 18 in versions:
        return not any(attribute.name == "axes" for attribute in node.attribute)
    return True


def _function_opset(function: onnx.FunctionProto) -> int | None:
    return next((e.version for e in function.opset_import if e.domain in ("", "ai.onnx")), None)


def _versions_between(op: str, old_opset: int, new_opset: int) -> set[int]:
    """The versions of `op` introduced after `old_opset`, up to `new_opset`."""
    versions = set()
    opset = new_opset
    while opset > old_opset:
        since = onnx.defs.get_schema(op, opset, "").since_version
        if since <= old_opset:
            break
        versions.add(since)
        opset = since - 1
    return versions


def _default_domain_nodes(
    graph: onnx.GraphProto | onnx.FunctionProto,
) -> Iterator[onnx.NodeProto]:
    for node in graph.node:
        if node.domain in ("", "ai.onnx"):
            yield node
        for attribute in node.attribute:
            subgraphs = [attribute.g] if attribute.HasField("g") else []
            for subgraph in [*subgraphs, *attribute.graphs]:
                yield from _default_domain_nodes(subgraph)


def set_default_opset(model: onnx.ModelProto, opset: int) -> None:
    """Import `opset` for the default domain, in the model and in its local functions (which
    must import the model's version), raising the IR version if that opset needs it."""
    imports = [*model.opset_import]
    for function in model.functions:
        imports += list(function.opset_import)
    for entry in imports:
        if entry.domain in ("", "ai.onnx"):
            entry.version = opset
    needed = onnx.helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True)
    model.ir_version = max(model.ir_version, needed)


def import_domain(model: onnx.ModelProto, domain: str, version: int = 1) -> None:
    """Import operator set `domain` (e.g. com.microsoft for ONNX Runtime's ops) if not yet under
    that exact spelling (nodes in domain "" need "" itself; an "ai.onnx" import does not serve)."""
    if not any(entry.domain == domain for entry in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid(domain, version))


def function_emissions(
    function: onnx.FunctionProto, model: onnx.ModelProto, target: Target
) -> dict[str, Emission | None]:
    """Emissions inside a model-local function. A function importing the model's own opset is
    raised with the model, so it gets the model's emissions (a site there may ask for the raise);
    one importing another opset keeps it and is never raised (its emissions ask nothing of the
    model's opset import: `opset` 0)."""
    opset = _function_opset(function) or 0
    if opset == default_opset(model):
        return emissions(model, target)
    layer_norm = _layer_norm(opset, target, False)
    found = {"layer-norm": layer_norm, "rms-norm": _rms_norm(opset, target), **_group(layer_norm)}
    return {kind: e and dataclasses.replace(e, opset=0) for kind, e in found.items()}
