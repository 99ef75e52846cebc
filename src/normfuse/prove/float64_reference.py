"""A float64 evaluation of a model, the judge of every difference the proof finds.

The model is widened to float64 (`subgraph.as_float64`: weights, types, Casts, the statistics'
`stash_type`) and run by ONNX Runtime's CPU provider; where ONNX Runtime has no double kernel for
one of its ops (`Erf`, `Resize`, ...), by onnx's reference evaluator instead (`onnx.reference`,
exact NumPy in float64), for a model up to `REFERENCE_BYTES` (it is slow on large ones).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx

from normfuse.errors import runtime_message
from normfuse.io.model_io import external_length, external_tensors
from normfuse.prove import sessions
from normfuse.prove.subgraph import as_float64, with_weights_loaded

REFERENCE_BYTES = 16 * 2**20
# External weights read into a float64 evaluation (twice that in memory once widened).
EXTERNAL_BYTES = 512 * 2**20
# GridSample's modes before opset 20, by their later names (the same interpolation).
_GRID_MODES = {"bilinear": "linear", "bicubic": "cubic"}
Runner = Callable[[dict[str, np.ndarray]], list]


def float64_runner(
    model: onnx.ModelProto, base_dir: Path | None = None
) -> tuple[Runner | None, str]:
    """A function running `model` in float64 on feeds (cast to float64 where they are float),
    and how ("ONNX Runtime", "onnx.reference"); None and why where neither can. Weights in
    external data (read from `base_dir`) are read into the float64 copy, up to
    `EXTERNAL_BYTES`."""
    external = list(external_tensors(model))
    if external:
        size = sum(map(external_length, external))
        if base_dir is None or size > EXTERNAL_BYTES:
            why = "its folder is unknown" if base_dir is None else f"{size} bytes is over the limit"
            return None, f"weights are in external data ({why})"
        model = with_weights_loaded(model, base_dir)
    wide = as_float64(_inlined(model))
    try:
        session = sessions.create(wide, "cpu", "disable")
    except Exception as error:
        why = runtime_message(error, 200)
        if wide.ByteSize() > REFERENCE_BYTES:
            return (
                None,
                f"ONNX Runtime cannot run it in float64 ({why}); too large for onnx.reference",
            )
        try:
            from onnx.reference import ReferenceEvaluator

            evaluator = ReferenceEvaluator(wide, new_ops=list(_exact_kernels()))
        except Exception as reference_error:
            return (
                None,
                f"ONNX Runtime cannot run it in float64 ({why}), nor onnx.reference "
                f"({runtime_message(reference_error, 200)})",
            )
        return lambda feeds: _quietly(evaluator.run, _wide(feeds)), "onnx.reference"
    return lambda feeds: session.run(None, _wide(feeds)), "ONNX Runtime"


def _inlined(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with its local functions inlined (a constant a caller sets through an attribute
    is then a plain constant, widened like the rest); as it is where onnx cannot inline it."""
    if not model.functions:
        return model
    try:
        from onnx.inliner import inline_local_functions

        return inline_local_functions(model)
    except Exception:  # the widened copy of the model as it is
        return model


def _exact_kernels() -> tuple[type, ...]:
    """Kernels onnx's reference evaluator (1.23) lacks or gets wrong here: GatherElements by
    `np.take_along_axis` (its own fails on indices shaped unlike the data: a [1, 4] gather from
    BERT's [1, 512] token types), LayerNormalization with the float64 statistics the widened
    model asks for (its own refuses any `stash_type` but float), GridSample's modes before
    opset 20 (`bilinear`, `bicubic`), Erf in float64 (its own rounds to float32), and
    com.microsoft's Gelu (exact, by erf)."""
    from onnx.reference.op_run import OpRun
    from onnx.reference.ops.op_grid_sample import GridSample as ReferenceGridSample

    class GatherElements(OpRun):
        def _run(self, data, indices, axis=None):
            axis = 0 if axis is None else axis
            wrapped = np.where(indices < 0, indices + data.shape[axis], indices)
            return (np.take_along_axis(data, wrapped, axis=axis),)

    class LayerNormalization(OpRun):
        def _run(self, x, scale, bias=None, axis=None, epsilon=None, stash_type=None):
            axis = -1 if axis is None else axis
            axes = tuple(range(axis % x.ndim, x.ndim))
            mean = x.mean(axis=axes, keepdims=True)
            inv_std = 1.0 / np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True) + epsilon)
            y = (x - mean) * inv_std * scale + (0 if bias is None else bias)
            return (y.astype(x.dtype), mean, inv_std)

    class GridSample(ReferenceGridSample):
        def _run(self, x, grid, mode=None, padding_mode=None, align_corners=None):
            mode = _GRID_MODES.get(mode or self.mode, mode or self.mode)
            return super()._run(
                x, grid, mode=mode, padding_mode=padding_mode, align_corners=align_corners
            )

    class Erf(OpRun):
        def _run(self, x):
            return (_erf(x),)

    class Gelu(OpRun):
        op_domain = "com.microsoft"

        def _run(self, x, approximate=None):
            return (0.5 * x * (1.0 + _erf(x / np.sqrt(2.0))),)

    return GatherElements, LayerNormalization, GridSample, Erf, Gelu


def _erf(values: np.ndarray) -> np.ndarray:
    """erf in the values' own precision (onnx's reference Erf computes it in float32)."""
    return np.vectorize(math.erf, otypes=[np.float64])(values).astype(values.dtype)


def _quietly(run: Callable, feeds: dict[str, np.ndarray]) -> list:
    """`run(None, feeds)` with NumPy's floating-point warnings (an exp that overflows to inf, as
    the model's own float math may) kept off the user's terminal: inf is a value here."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        return run(None, feeds)


def _wide(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {
        name: value.astype(np.float64) if np.issubdtype(value.dtype, np.floating) else value
        for name, value in feeds.items()
    }
