"""Input profiles the proof runs a model on, so that it sees what an adversary sees.

Generated N(0,1)-like inputs cannot show rounding: a decomposed norm and its fused kernel agree
on them even where one rounds a float16 value the other does not. Each profile transforms the
float inputs of one generated feed set (integer inputs, token ids and masks, are kept):

- `normal`: the generated inputs as they are;
- `offset`: values of a large mean and a tiny spread, one draw each of 100 + 0.05 * N(0,1),
  1000 + 0.01 * N(0,1) and -300 + 0.1 * N(0,1) (`OFFSETS`; float16 resolves 0.06 at 100, so
  every rounding of such a row shows; float32's order of operations shows at 1000), judged
  together; the whole tensor in one regime, whatever the axes a norm reduces (a group norm's
  groups span rows);
- `float16-limits`: values up to +-240 (squares and sums of squares near float16's 65504);
- `constant-rows`: every row along the last axis one value (zero variance);
- `outliers`: N(0,1) with one element in seven 300 times larger.
"""

from __future__ import annotations

import numpy as np
import onnx

from normfuse.ir.scopes import all_graphs

PROFILES = ("normal", "offset", "float16-limits", "constant-rows", "outliers")
# The offset profile's draws: (mean, spread) of each.
OFFSETS = ((100.0, 0.05), (1000.0, 0.01), (-300.0, 0.1))


# Inputs that size or place a result rather than carry data: (op, input index).
_SIZING = {("Resize", 1), ("Resize", 2), ("Upsample", 1), ("Range", 0), ("Range", 1)}
_SIZING |= {("Range", 2), ("ConstantOfShape", 0), ("Tile", 1), ("Expand", 1), ("Reshape", 1)}


def profiled_feeds(
    feeds: dict[str, np.ndarray], model: onnx.ModelProto, seed: int = 0, draws: int = 1
) -> dict[str, list[dict[str, np.ndarray]]]:
    """Each profile's feed sets, built from `feeds` (the one `normal` set): the first `draws`
    of the offset profile's `OFFSETS`, one set of each other profile; only `normal` where no
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
    found = {"normal": [feeds]}
    if not floats:
        return found
    rng = np.random.default_rng(seed)
    for profile in PROFILES[1:]:
        found[profile] = [
            {
                name: _profiled(value, profile, rng, draw) if name in floats else value
                for name, value in feeds.items()
            }
            for draw in range(min(draws, len(OFFSETS)) if profile == "offset" else 1)
        ]
    return found


def _is_float(value: object) -> bool:
    return isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.floating)


def _profiled(
    value: np.ndarray, profile: str, rng: np.random.Generator, draw: int = 0
) -> np.ndarray:
    shape = value.shape
    rows = (*shape[:-1], 1) if shape else ()
    if profile == "offset":
        mean, spread = OFFSETS[draw]
        made = mean + spread * rng.standard_normal(shape)
    elif profile == "float16-limits":
        made = rng.uniform(-240.0, 240.0, shape)
    elif profile == "constant-rows":
        made = np.broadcast_to(3.0 * rng.standard_normal(rows), shape)
    else:  # outliers
        made = rng.standard_normal(shape)
        made.reshape(-1)[::7] *= 300.0
    return np.ascontiguousarray(made).astype(value.dtype)
