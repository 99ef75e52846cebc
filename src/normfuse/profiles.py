"""Input profiles the proof runs a model on, so that it sees what an adversary sees.

Generated N(0,1)-like inputs cannot show rounding: a decomposed norm and its fused kernel agree
on them even where one rounds a float16 value the other does not. Each profile transforms the
float inputs of one generated feed set (integer inputs, token ids and masks, are kept):

- `normal`: the generated inputs as they are;
- `offset`: rows of 100 + 0.05 * N(0,1) (a large mean, a tiny spread: float16 resolves 0.06
  at 100, so every rounding of such a row shows);
- `float16-limits`: values up to +-240 (squares and sums of squares near float16's 65504);
- `constant-rows`: every row along the last axis one value (zero variance);
- `outliers`: N(0,1) with one element in seven 300 times larger.
"""

from __future__ import annotations

import numpy as np
import onnx

from normfuse.scopes import all_graphs

PROFILES = ("normal", "offset", "float16-limits", "constant-rows", "outliers")


# Inputs that size or place a result rather than carry data: (op, input index).
_SIZING = {("Resize", 1), ("Resize", 2), ("Upsample", 1), ("Range", 0), ("Range", 1)}
_SIZING |= {("Range", 2), ("ConstantOfShape", 0), ("Tile", 1), ("Expand", 1), ("Reshape", 1)}


def profiled_feeds(
    feeds: dict[str, np.ndarray], model: onnx.ModelProto, seed: int = 0
) -> dict[str, dict[str, np.ndarray]]:
    """Each profile's feeds, built from `feeds` (the `normal` ones); only `normal` where no
    input is a float data tensor. A float input that sizes a result (a Resize's scales, a
    Range's bounds: `_SIZING`, in any scope) keeps its value."""
    sizing = {
        node.input[index]
        for graph in all_graphs(model.graph)
        for node in graph.node
        for index in range(len(node.input))
        if (node.op_type, index) in _SIZING
    }
    floats = [n for n, value in feeds.items() if _is_float(value) and n not in sizing]
    if not floats:
        return {"normal": feeds}
    rng = np.random.default_rng(seed)
    found = {"normal": feeds}
    for profile in PROFILES[1:]:
        found[profile] = {
            name: _profiled(value, profile, rng) if name in floats else value
            for name, value in feeds.items()
        }
    return found


def _is_float(value: object) -> bool:
    return isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.floating)


def _profiled(value: np.ndarray, profile: str, rng: np.random.Generator) -> np.ndarray:
    shape = value.shape
    if profile == "offset":
        made = 100.0 + 0.05 * rng.standard_normal(shape)
    elif profile == "float16-limits":
        made = rng.uniform(-240.0, 240.0, shape)
    elif profile == "constant-rows":
        rows = (*shape[:-1], 1) if shape else ()
        made = np.broadcast_to(3.0 * rng.standard_normal(rows), shape)
    else:  # outliers
        made = rng.standard_normal(shape)
        made.reshape(-1)[::7] *= 300.0
    return np.ascontiguousarray(made).astype(value.dtype)
