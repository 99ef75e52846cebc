"""One fused site on its own: its original subgraph and its fused form cut out as two small
models, and inputs for them (adversarial rows for the main input: a constant row, very large and
very small magnitudes, one outlier; random values for the others)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from normfuse.facts.shapes import TensorType
from normfuse.match.records import Site
from normfuse.prove.subgraph import extract, shape_only_sources

SITE_ROWS = 8


@dataclass(frozen=True)
class IsolatedSite:
    """A site's subgraph before and after fusion, as models, and inputs to run both on."""

    before: onnx.ModelProto
    after: onnx.ModelProto
    feeds: dict[str, np.ndarray]


def isolate(
    site: Site,
    original: onnx.ModelProto,
    candidate: onnx.ModelProto,
    types: dict[str, TensorType],
    dims: dict[str, int],
    seed: int,
    base_dir: Path | None,
) -> IsolatedSite | str:
    """The site cut out of both models, or why it could not be (`types`: those of the site's
    scope, a function's own for a site inside a model-local function)."""
    feeds = site_feeds(site, types, dims, seed)
    moved = site.fused.moved_output  # the fused model's result is cast where its moves end
    output = site.output if moved is None else moved.name
    output_type = types.get(output, (None,))[0]
    if feeds is None or output_type is None:
        return "input or output type unknown"
    for _ in range(2):
        inputs = {name: (types[name][0], list(value.shape)) for name, value in feeds.items()}
        before = extract(original, inputs, output, output_type, base_dir, site.function)
        after = extract(candidate, inputs, output, output_type, base_dir, site.function)
        if before is not None and after is not None:
            return IsolatedSite(before, after, feeds)
        shaped = _shape_feeds(site, original, candidate, set(feeds), output, types, dims)
        if shaped is None:
            break
        feeds = {**feeds, **shaped}
    return "could not isolate the site"


def _shape_feeds(
    site: Site,
    original: onnx.ModelProto,
    candidate: onnx.ModelProto,
    fed: set[str],
    output: str,
    types: dict[str, TensorType],
    dims: dict[str, int],
) -> dict[str, np.ndarray] | None:
    """Zeros for the tensors the site's output depends on only through `Shape` (or `Size`) in
    both models (a Reshape back to `Shape(x)`, output moves to `Shape(z)`: ADV7-04), each of its
    derived shape, symbolic dims at `dims` (1 where not given); None where there are none, or
    one's type or shape is not known."""
    found = [
        shape_only_sources(model, fed, output, site.function) for model in (original, candidate)
    ]
    names = sorted({name for names in found if names is not None for name in names})
    if not names or any(name not in types or types[name][1] is None for name in names):
        return None
    feeds = {}
    for name in names:
        elem_type, shape = types[name]
        concrete = [dim if isinstance(dim, int) else dims.get(dim, 1) for dim in shape]
        feeds[name] = np.zeros(concrete, onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    return feeds


def site_feeds(site: Site, types: dict, dims: dict[str, int], seed: int) -> dict | None:
    """Adversarial rows for the site's first input, random ones of the same shape for the rest.
    A site whose input Cast was lifted over value moves (`FusedNode.input_moves`) is fed where
    the moves start, in both models (the fused one no longer reads the moved tensor)."""
    names = site.input_names()
    if site.fused.moved_input is not None:
        names = (site.fused.moved_input.name, *names[1:])
    if any(name not in types or types[name][1] is None for name in names):
        return None
    elem_type, shape = types[names[0]]
    known = _normalised_dims(site, len(shape))
    concrete = [
        dim if isinstance(dim, int) else known.get(axis) or dims.get(dim, 1)
        for axis, dim in enumerate(shape)
    ]
    dtype = onnx.helper.tensor_dtype_to_np_dtype(elem_type)
    first = site_rows(concrete, site.axis, dtype, seed)
    rng = np.random.default_rng(seed + 1)
    feeds = {names[0]: first}
    for name in names[1:]:
        other = onnx.helper.tensor_dtype_to_np_dtype(types[name][0])
        feeds[name] = rng.normal(0.0, 1.0, first.shape).astype(other)
    return feeds


def _normalised_dims(site: Site, rank: int) -> dict[int, int]:
    """Axis -> size of the normalised dims the fused node's constant scale fixes (its shape is
    X.shape[axis:], checked before emit), so a symbolic dim there is fed at the size the site
    was fused for: a group norm's C/G * H * W behind a symbolic batch. Empty with a layout or a
    grouping (the scale then follows another tensor) or no constant scale."""
    fused = site.fused
    inputs = fused.inputs
    scale = inputs[2 if fused.op.startswith("Skip") else 1] if len(inputs) > 1 else None
    if fused.layout is not None or fused.grouping is not None or fused.input_moves:
        return {}  # the node reads a transposed, regrouped or moved tensor, not the site's input
    if isinstance(scale, gs.Variable) or scale is None:
        return {}
    axis = site.axis % rank if rank else 0
    sizes = [int(dim) for dim in scale.shape]
    if len(sizes) != rank - axis:
        return {}
    return {axis + k: size for k, size in enumerate(sizes) if size > 1}


def site_rows(shape: list[int], axis: int, dtype: np.dtype, seed: int) -> np.ndarray:
    """Inputs for one site: random rows plus adversarial ones (constant, large, small, outlier).

    Leading dims are enlarged so there are at least `SITE_ROWS` rows to fill. Statistics over
    every axis leave one group: random values with one outlier.
    """
    rng = np.random.default_rng(seed)
    leading, normalised = list(shape[:axis]), list(shape[axis:])
    if not leading:
        values = rng.normal(1.0, 2.0, int(np.prod(normalised)))
        values[rng.integers(values.size)] = 100.0 * np.abs(values).max()
        return values.reshape(normalised).astype(dtype)
    count = int(np.prod(leading)) if leading else 1
    if count < SITE_ROWS:
        leading[0] *= -(-SITE_ROWS // count)
    rows = rng.normal(1.0, 2.0, (int(np.prod(leading)), int(np.prod(normalised))))
    large = 50.0 if dtype == np.float16 else 1e3
    rows[0] = 0.5  # constant row: zero variance
    rows[1] *= large
    rows[2] *= 1e-3
    rows[3, rng.integers(rows.shape[1])] = 100.0 * np.abs(rows[3]).max()  # one outlier
    return rows.reshape(leading + normalised).astype(dtype)
