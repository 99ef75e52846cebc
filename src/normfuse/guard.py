"""The output guard: a rewritten model is proved usable before anyone may write it.

It must have the original's signature (graph inputs and outputs: names, types, order; every
overridable initializer still there), be structurally sound, pass strict shape inference wherever
the original does, satisfy `onnx.checker` wherever the original does (for standard-operator
output), and, where its weights are small and in memory, load in ONNX Runtime. External weights
are never read here: for large models, inference and the emitted ops' contracts are the proof.
"""

from __future__ import annotations

from pathlib import Path

import onnx

from normfuse.errors import NormfuseError
from normfuse.model_io import external_tensors
from normfuse.structure import check_structure
from normfuse.targets import Target

SESSION_CHECK_MAX_BYTES = 256 * 1024 * 1024


def check_output(
    original: onnx.ModelProto,
    optimised: onnx.ModelProto,
    base_dir: Path | None,
    ort_only: bool,
    target: Target,
) -> None:
    """Raise `NormfuseError` when `optimised` would not stand in for `original`."""
    _same_signature(original, optimised)
    try:
        check_structure(optimised)
    except NormfuseError as error:
        raise _refused(str(error)) from None
    if not ort_only:
        _checker_where_original_passes(original, optimised, full=target is Target.ONNX)
    _inference_where_original_passes(original, optimised)
    if next(external_tensors(optimised), None) is None:
        _loads_in_ort(original, optimised)


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


def _checker_where_original_passes(
    original: onnx.ModelProto, optimised: onnx.ModelProto, full: bool
) -> None:
    if _checker_error(original, full=False) is not None:
        return
    error = _checker_error(optimised, full=False)
    if error is not None:
        raise _refused(f"onnx.checker: {error}")


def _checker_error(model: onnx.ModelProto, full: bool) -> str | None:
    try:
        onnx.checker.check_model(model, full_check=full)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as error:
        return str(error).splitlines()[0] if str(error) else type(error).__name__
    except Exception as error:  # the checker itself tripped over the model
        return f"{type(error).__name__}: {error}"
    return None


def _inference_where_original_passes(original: onnx.ModelProto, optimised: onnx.ModelProto) -> None:
    """Strict shape inference on both (declared value_info set aside: it may be stale in the
    original already); the output must pass wherever the original passes."""
    if _inference_error(original) is not None:
        return
    error = _inference_error(optimised)
    if error is not None:
        raise _refused(f"strict shape inference: {error}")


def _inference_error(model: onnx.ModelProto) -> str | None:
    stripped = onnx.ModelProto()
    stripped.CopyFrom(model)
    del stripped.graph.value_info[:]
    try:
        onnx.shape_inference.infer_shapes(stripped, check_type=True, strict_mode=True)
    except Exception as error:
        return str(error).splitlines()[0] if str(error) else type(error).__name__
    return None


def _loads_in_ort(original: onnx.ModelProto, optimised: onnx.ModelProto) -> None:
    """Create an ONNX Runtime session for the output (weights in memory only, small models);
    a failure counts only where the original loads."""
    if optimised.ByteSize() > SESSION_CHECK_MAX_BYTES:
        return
    error = _session_error(optimised)
    if error is not None and _session_error(original) is None:
        raise _refused(f"ONNX Runtime cannot load it: {error}")


def _session_error(model: onnx.ModelProto) -> str | None:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4
    try:
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception as error:
        text = str(error).strip().splitlines()
        return text[0][:300] if text else type(error).__name__
    return None
