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

PROFILES = ("normal", "offset", "float16-limits", "constant-rows", "outliers")


def profiled_feeds(feeds: dict[str, np.ndarray], seed: int = 0) -> dict[str, dict[str, np.ndarray]]:
    """Each profile's feeds, built from `feeds` (the `normal` ones); only `normal` where no
    input is a float tensor."""
    floats = [name for name, value in feeds.items() if _is_float(value)]
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
