"""Which fused operator to emit for a target runtime and the model's opset.

`--target ort` may emit anything ONNX Runtime runs; `--target onnx` only standard operators valid
at the model's opset. `LayerNormalization` became standard at opset 17, `RMSNormalization` at 23;
for ONNX Runtime, RMS normalisation is emitted as its `SimplifiedLayerNormalization`. A model below
the opset a fused node needs is raised to it when every node that survives the rewrite means the
same there, once respelled (see opset_raise.py); the rewrite first assumes the raise, and is redone
without it (`blocked`) when the survivors forbid it. Unraised, for ONNX Runtime,
`LayerNormalization` is emitted in the default domain at the old opset, which ONNX Runtime
accepts but `onnx.checker` does not (the report then says the model is ORT-only).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

import onnx

from normfuse.errors import NormfuseError
from normfuse.facts.folding import default_opset
from normfuse.target import opset_raise

LAYER_NORM_OPSET = 17
RMS_NORM_OPSET = 23
LOWEST_RAISABLE_OPSET = 13
# The standard operator of each kind and the opset that introduced it.
STANDARD_OPS = {
    "layer-norm": ("LayerNormalization", LAYER_NORM_OPSET),
    "rms-norm": ("RMSNormalization", RMS_NORM_OPSET),
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


def layer_norm_emission(
    model: onnx.ModelProto, target: Target, blocked: Mapping[int, str] | None = None
) -> Emission | None:
    """How `LayerNormalization` is emitted for `model` and `target`; None when it cannot be.
    `blocked` maps each opset the model may not be raised to to why (see `raise_blockers`)."""
    opset = default_opset(model)
    raisable = opset < LAYER_NORM_OPSET and LAYER_NORM_OPSET not in (blocked or {})
    return _layer_norm(opset, target, raisable)


def rms_norm_emission(
    model: onnx.ModelProto, target: Target, blocked: Mapping[int, str] | None = None
) -> Emission | None:
    """How RMS normalisation is emitted: ONNX Runtime's `SimplifiedLayerNormalization` (registered
    in the default domain at every opset) for ORT; standard `RMSNormalization` from opset 23,
    raising the model's opset to 23 unless `blocked` forbids it."""
    opset = default_opset(model)
    raisable = (
        target is Target.ONNX and opset < RMS_NORM_OPSET and RMS_NORM_OPSET not in (blocked or {})
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


def emissions(
    model: onnx.ModelProto, target: Target, blocked: Mapping[int, str] | None = None
) -> dict[str, Emission | None]:
    """The emission of each normalisation kind for `model` and `target`, raising the opset only
    to opsets not in `blocked`."""
    layer_norm = layer_norm_emission(model, target, blocked)
    return {
        "layer-norm": layer_norm,
        "rms-norm": rms_norm_emission(model, target, blocked),
        **_group(layer_norm),
    }


def _group(layer_norm: Emission | None) -> dict[str, Emission | None]:
    """Group norm's statistics are emitted as `LayerNormalization` over the grouped tensor: ONNX
    Runtime's CPU provider has no kernel for `GroupNormalization`-18/21 (it runs their function
    body, measured slower) nor for `com.microsoft.GroupNorm` (see passes/group_norm.py)."""
    return {"group-norm": layer_norm}


def fixed_blockers(model: onnx.ModelProto) -> dict[int, str]:
    """The opsets `model` can never be raised to, whatever the rewrite removes, with why."""
    opset = default_opset(model)
    if opset < LOWEST_RAISABLE_OPSET:
        why = f"opset {opset} is below {LOWEST_RAISABLE_OPSET}, the lowest this tool raises"
        return {LAYER_NORM_OPSET: why, RMS_NORM_OPSET: why}
    return {}


# Above every opset any site asks for: the range a ceiling blocks.
_HIGHEST_OPSET = 40


def ceiling_blockers(max_opset: int | None) -> dict[int, str]:
    """Every opset above `max_opset` (the deployment runtime's), blocked with why."""
    if max_opset is None:
        return {}
    why = f"capped by --max-opset {max_opset}"
    return dict.fromkeys(range(max_opset + 1, _HIGHEST_OPSET), why)


def check_max_opset(model: onnx.ModelProto, max_opset: int | None) -> None:
    """Refuse a ceiling below the model's own opset (the output keeps at least that) or above
    the newest opset this onnx knows (a typo, such as 99, would cap nothing)."""
    newest = onnx.defs.onnx_opset_version()
    if max_opset is not None and max_opset > newest:
        raise NormfuseError(f"--max-opset {max_opset} is above the newest opset, {newest}")
    if max_opset is not None and default_opset(model) > max_opset:
        raise NormfuseError(
            f"--max-opset {max_opset} is below the model's own opset {default_opset(model)}: "
            "normfuse never lowers an opset"
        )


def raise_blockers(
    model: onnx.ModelProto, new_opset: int, fused_ops: frozenset[str] = frozenset()
) -> list[str]:
    """Why raising `model`'s default-domain opset to `new_opset` would change what one of its
    nodes computes (in the graph, bodies and every model-local function, raised with it); empty
    when the raise is exact once `opset_raise.adapt` has respelled the nodes. Nodes of
    `fused_ops` (written for `new_opset`) are not judged."""
    fixed = fixed_blockers(model).get(new_opset)
    if fixed is not None:
        return [fixed]
    return opset_raise.blockers(model, default_opset(model), new_opset, fused_ops)


def can_raise_opset(model: onnx.ModelProto, new_opset: int) -> bool:
    """True if raising the default-domain opset to `new_opset` changes no node's meaning."""
    return not raise_blockers(model, new_opset)


def raise_opset(
    model: onnx.ModelProto, new_opset: int, fused_ops: frozenset[str] = frozenset()
) -> None:
    """Raise `model` (in place) to `new_opset`, respelling the nodes whose signature moved but
    those of `fused_ops`; call only when `raise_blockers` found nothing."""
    opset_raise.adapt(model, default_opset(model), new_opset, fused_ops)
    set_default_opset(model, new_opset)


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
    function: onnx.FunctionProto,
    model: onnx.ModelProto,
    target: Target,
    blocked: Mapping[int, str] | None = None,
) -> dict[str, Emission | None]:
    """Emissions inside a model-local function. A function importing the model's own opset is
    raised with the model, so it gets the model's emissions (a site there may ask for the raise);
    one importing another opset keeps it and is never raised (its emissions ask nothing of the
    model's opset import: `opset` 0)."""
    opset = opset_raise.default_domain(function.opset_import) or 0
    if opset == default_opset(model):
        return emissions(model, target, blocked)
    layer_norm = _layer_norm(opset, target, False)
    found = {"layer-norm": layer_norm, "rms-norm": _rms_norm(opset, target), **_group(layer_norm)}
    return {kind: e and dataclasses.replace(e, opset=0) for kind, e in found.items()}
