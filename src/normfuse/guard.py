"""The output guard: a rewritten model is proved usable before anyone may write it.

It must have the original's signature (graph inputs and outputs: names, types, order; every
overridable initializer still there), be structurally sound, pass strict shape inference wherever
the original does, satisfy `onnx.checker` wherever the original does (for standard-operator
output), and load in ONNX Runtime wherever the original does. All three run on weightless
skeletons (large and external initializers as typed inputs): no weight is read or copied.
"""

from __future__ import annotations

import onnx

from normfuse import sessions
from normfuse.errors import NormfuseError, first_line
from normfuse.skeleton import skeleton
from normfuse.structure import check_structure


def check_output(
    original: onnx.ModelProto,
    optimised: onnx.ModelProto,
    ort_only: bool,
) -> None:
    """Raise `NormfuseError` when `optimised` would not stand in for `original`."""
    _same_signature(original, optimised)
    try:
        check_structure(optimised)
    except NormfuseError as error:
        raise _refused(str(error)) from None
    before, after = skeleton(original), skeleton(optimised)
    if not ort_only:
        _unless_original_fails(_checker_error, before, after, "onnx.checker")
    _unless_original_fails(_inference_error, before, after, "strict shape inference")
    _unless_original_fails(_session_error, before, after, "session")


def _refused(why: str) -> NormfuseError:
    return NormfuseError(f"the rewritten model was refused by the output guard: {why}")


def _same_signature(original: onnx.ModelProto, optimised: onnx.ModelProto) -> None:
    for field in ("input", "output"):
        before = [info.SerializeToString() for info in getattr(original.graph, field)]
        after = [info.SerializeToString() for info in getattr(optimised.graph, field)]
        if before != after:
            raise _refused(f"its graph {field}s differ from the original's")
    inputs = {info.name for info in original.graph.input}
    defaults = {t.name for t in original.graph.initializer if t.name in inputs}
    kept = {t.name for t in optimised.graph.initializer}
    if not defaults <= kept:
        missing = sorted(defaults - kept)[0]
        raise _refused(f"the default value of graph input {missing!r} was lost")


def _unless_original_fails(check, before: onnx.ModelProto, after: onnx.ModelProto, what: str):
    """Refuse when `check` finds an error in the output that it does not find in the original
    (a model that was already stale or odd is not made worse by being rewritten)."""
    error = check(after)
    if error is not None and check(before) is None:
        raise _refused(f"{what}: {error}")


def _checker_error(model: onnx.ModelProto) -> str | None:
    try:
        onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as error:
        return first_line(error)
    except Exception as error:  # the checker itself tripped over the model
        return f"{type(error).__name__}: {first_line(error)}"
    return None


def _inference_error(model: onnx.ModelProto) -> str | None:
    """Strict inference with declared value_info set aside (it may be stale in the original)."""
    stripped = onnx.ModelProto()
    stripped.CopyFrom(model)
    del stripped.graph.value_info[:]
    try:
        onnx.shape_inference.infer_shapes(stripped, check_type=True, strict_mode=True)
    except Exception as error:
        return first_line(error)
    return None


def _session_error(model: onnx.ModelProto) -> str | None:
    """Why ONNX Runtime's CPU provider cannot load `model` (graph optimisations off), or None."""
    try:
        sessions.create(model, "cpu", "disable")
    except NormfuseError as error:
        return str(error)
    return None
