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

# Operator versions from 14 to 17 that only widened types or added attributes whose defaults keep
# the old meaning (ONNX operator changelog). RoiAlign-16, which changed a default, is absent.
_MEANING_PRESERVING_VERSIONS: dict[str, frozenset[int]] = {
    name: frozenset(versions)
    for name, versions in {
        "Add": {14},
        "Sub": {14},
        "Mul": {14},
        "Div": {14},
        "Relu": {14},
        "CumSum": {14},
        "Reshape": {14},
        "GRU": {14},
        "LSTM": {14},
        "RNN": {14},
        "Identity": {14, 16},
        "BatchNormalization": {14, 15},
        "Pow": {15},
        "Shape": {15},
        "GreaterOrEqual": {16},
        "LessOrEqual": {16},
        "If": {16},
        "Loop": {16},
        "Scan": {16},
        "LeakyRelu": {16},
        "PRelu": {16},
        "ScatterElements": {16},
        "ScatterND": {16},
        "Where": {16},
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
    """The model's opset for the default ONNX domain."""
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return entry.version
    raise ValueError("model imports no default-domain opset")


def layer_norm_emission(model: onnx.ModelProto, target: Target) -> Emission | None:
    """How `LayerNormalization` is emitted for `model` and `target`; None when it cannot be."""
    opset = default_opset(model)
    raisable = (
        opset < LAYER_NORM_OPSET
        and target is Target.ORT
        and can_raise_opset(model, LAYER_NORM_OPSET)
    )
    return _layer_norm(opset, target, raisable)


def rms_norm_emission(model: onnx.ModelProto, target: Target) -> Emission | None:
    """How RMS normalisation is emitted: ONNX Runtime's `SimplifiedLayerNormalization` (registered
    in the default domain at every opset) for ORT; standard `RMSNormalization` from opset 23."""
    return _rms_norm(default_opset(model), target)


def _layer_norm(opset: int, target: Target, raisable: bool) -> Emission | None:
    if opset >= LAYER_NORM_OPSET:
        return Emission("LayerNormalization", "", opset, ort_only=False)
    if target is Target.ONNX:
        return None
    if raisable:
        return Emission("LayerNormalization", "", LAYER_NORM_OPSET, ort_only=False)
    return Emission("LayerNormalization", "", opset, ort_only=True)


def _rms_norm(opset: int, target: Target) -> Emission | None:
    if target is Target.ORT:
        return Emission("SimplifiedLayerNormalization", "", opset, ort_only=True)
    if opset >= RMS_NORM_OPSET:
        return Emission("RMSNormalization", "", opset, ort_only=False)
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
    """True if raising the default-domain opset to `new_opset` changes no node's meaning."""
    old_opset = default_opset(model)
    if old_opset < LOWEST_RAISABLE_OPSET:
        return False
    for op in {node.op_type for node in _default_domain_nodes(model.graph)}:
        try:
            versions = _versions_between(op, old_opset, new_opset)
        except onnx.defs.SchemaError:
            return False
        if not versions <= _MEANING_PRESERVING_VERSIONS.get(op, frozenset()):
            return False
    return True


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


def _default_domain_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for node in graph.node:
        if node.domain in ("", "ai.onnx"):
            yield node
        for attribute in node.attribute:
            subgraphs = [attribute.g] if attribute.HasField("g") else []
            for subgraph in [*subgraphs, *attribute.graphs]:
                yield from _default_domain_nodes(subgraph)


def set_default_opset(model: onnx.ModelProto, opset: int) -> None:
    """Import `opset` for the default domain, raising the IR version if that opset needs it."""
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            entry.version = opset
    needed = onnx.helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True)
    model.ir_version = max(model.ir_version, needed)


def import_domain(model: onnx.ModelProto, domain: str, version: int = 1) -> None:
    """Import operator set `domain` (e.g. com.microsoft for ONNX Runtime's ops) if not yet under
    that exact spelling (nodes in domain "" need "" itself; an "ai.onnx" import does not serve)."""
    if not any(entry.domain == domain for entry in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid(domain, version))


def function_emissions(function: onnx.FunctionProto, target: Target) -> dict[str, Emission | None]:
    """Emissions inside a model-local function, at the function's own opset, which is never
    raised (their `opset` is 0: they ask nothing of the model's opset import)."""
    opset = next((e.version for e in function.opset_import if e.domain in ("", "ai.onnx")), 0)
    layer_norm = _layer_norm(opset, target, False)
    found = {"layer-norm": layer_norm, "rms-norm": _rms_norm(opset, target), **_group(layer_norm)}
    return {kind: e and dataclasses.replace(e, opset=0) for kind, e in found.items()}
