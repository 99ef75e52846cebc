"""Float16 hazards of GPU runtimes, named per fused site: where the original subgraph overflows
when every op rounds to float16, and what the fused node computes on the same rows.

ONNX Runtime's CPU provider runs most float16 ops in float32, so a decomposed float16 norm whose
squares overflow on a GPU runtime's float16 kernels (|x - mean| >= 256 squares past 65504) looks
fine on the CPU. Each site whose input is float16 is cut out of both models (`site_inputs`) and
evaluated in strict float16 (`strict_float16`) on the probe: float16 rows of ±`PROBE_SPREAD`
alternating along every axis, so a row or group along any axes has mean 0 (or about 0, for an
odd count) and |x - mean| = 300: values a float16 activation holds exactly. Where a tensor of
the original holds inf or NaN there, the site gets a record: the first such tensor, the largest
spread at which every tensor is finite (by bisection over float16 values from 1 to 300), both
models' max abs error from a float64 evaluation of the original on the probe, and whether the
fused node (statistics in float32: `stash_type=1`) stays finite. A site that cannot be cut out
or evaluated gets no record; one whose fused form cannot be cut out (its output is the end of
value moves) is probed on the original alone, its record's `fused_finite` None."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx

from normfuse.facts.shapes import TensorType
from normfuse.io.columns import middle
from normfuse.match.records import Site
from normfuse.prove.site_inputs import isolate, site_feeds
from normfuse.prove.strict_float16 import Program, Values
from normfuse.prove.subgraph import extract

PROBE_SPREAD = 300.0
LOWEST_SPREAD = 1.0
NOTE = (
    "note: float16 hazards: ops rounded to float16 as GPU kernels do; fused stats float32 "
    "(stash_type=1)"
)


def annotate(
    sites: list[Site],
    original: onnx.ModelProto,
    candidate: onnx.ModelProto,
    types: dict[str, TensorType],
    function_types: dict[tuple[str, str], dict[str, TensorType]],
    dims: dict[str, int],
    base_dir: Path | None,
) -> list[Site]:
    """`sites`, each float16 one whose original overflows in strict float16 carrying its
    `float16_hazard` record (`types`: the main graph's; `function_types`: per local function)."""
    annotated = []
    for site in sites:
        scope_types = function_types.get(site.function, {}) if site.function else types
        record = site_hazard(site, original, candidate, scope_types, dims, base_dir)
        annotated.append(dataclasses.replace(site, float16_hazard=record) if record else site)
    return annotated


def site_hazard(
    site: Site,
    original: onnx.ModelProto,
    candidate: onnx.ModelProto,
    types: dict[str, TensorType],
    dims: dict[str, int],
    base_dir: Path | None,
) -> dict | None:
    """The site's hazard record; None where its input is not float16, its original stays
    finite on the probe, or it cannot be cut out or evaluated."""
    if types.get(site.input, (None,))[0] != onnx.TensorProto.FLOAT16:
        return None
    try:
        pair = isolate(site, original, candidate, types, dims, 0, base_dir)
        if isinstance(pair, str):
            alone = _original_alone(site, original, types, dims, base_dir)
            return None if alone is None else _hazard(Program(alone[0]), None, alone[1])
        return _hazard(Program(pair.before), Program(pair.after), pair.feeds)
    except Exception:  # a probe that cannot run names no hazard; the rewrite is proved apart
        return None


def _original_alone(
    site: Site,
    original: onnx.ModelProto,
    types: dict[str, TensorType],
    dims: dict[str, int],
    base_dir: Path | None,
) -> tuple[onnx.ModelProto, Values] | None:
    """The original subgraph up to the site's own output, and its feeds, where the pair cannot
    be cut out (the fused model computes that tensor only as the end of value moves)."""
    feeds = site_feeds(site, types, dims, 0)
    if feeds is None or site.output not in types:
        return None
    inputs = {name: (types[name][0], list(value.shape)) for name, value in feeds.items()}
    before = extract(original, inputs, site.output, types[site.output][0], base_dir, site.function)
    return None if before is None else (before, feeds)


def _hazard(before: Program, after: Program | None, feeds: Values) -> dict | None:
    """The record for one cut-out site (`after`: None where the fused form could not be cut
    out); None where the original is finite on the probe."""
    name = next(iter(feeds))
    probe = {**feeds, name: probe_rows(feeds[name].shape, PROBE_SPREAD)}
    strict = before.run(probe)
    overflowing = non_finite(before.model, strict)
    if not overflowing:
        return None
    output = before.model.graph.output[0].name
    reference = before.run(probe, exact=True)[output]
    op, tensor = overflowing[0]
    record = {
        "probe_spread": PROBE_SPREAD,
        "first_non_finite": {"op": op, "tensor": tensor},
        "non_finite_ops": [op for op, _ in overflowing],
        "max_finite_spread": max_finite_spread(before, feeds),
        "original_output_finite": bool(np.isfinite(strict[output]).all()),
        "original_error": _error(strict[output], reference),
        "fused_finite": None,
        "fused_error": None,
    }
    if after is not None:
        fused = after.run(probe)
        record["fused_finite"] = not non_finite(after.model, fused)
        record["fused_error"] = _error(fused[output], reference)
    return record


def probe_rows(shape: tuple[int, ...], spread: float) -> np.ndarray:
    """Float16 values ±`spread` alternating along every axis (a checkerboard)."""
    signs = np.where(np.indices(shape).sum(axis=0) % 2 == 0, 1.0, -1.0)
    return (spread * signs).astype(np.float16)


def non_finite(model: onnx.ModelProto, values: Values) -> list[tuple[str, str]]:
    """(op, tensor) of each float tensor the model's nodes compute that holds inf or NaN, in
    node order."""
    return [
        (node.op_type, name)
        for node in model.graph.node
        for name in node.output
        if name in values
        and np.issubdtype(values[name].dtype, np.floating)
        and not np.isfinite(values[name]).all()
    ]


def max_finite_spread(program: Program, feeds: Values) -> float | None:
    """The largest float16 spread in [1, `PROBE_SPREAD`] at which every tensor `program`
    computes is finite (by bisection: the overflow grows with the spread); None where even
    spread 1 overflows."""
    name = next(iter(feeds))

    def finite(bits: int) -> bool:
        spread = float(np.uint16(bits).view(np.float16))
        probe = {**feeds, name: probe_rows(feeds[name].shape, spread)}
        return not non_finite(program.model, program.run(probe))

    low, high = (int(np.float16(value).view(np.uint16)) for value in (LOWEST_SPREAD, PROBE_SPREAD))
    if not finite(low):
        return None
    while high - low > 1:  # low is finite, high is not
        middle = (low + high) // 2
        low, high = (middle, high) if finite(middle) else (low, middle)
    return float(np.uint16(low).view(np.float16))


def _error(values: np.ndarray, reference: np.ndarray) -> float | None:
    """Max abs difference from the float64 `reference`; None where `values` holds inf or NaN."""
    if not np.isfinite(values).all():
        return None
    return float(np.max(np.abs(values.astype(np.float64) - reference), initial=0.0))


def hazard_line(site: Site) -> str:
    """The table's line for a site with a hazard record, at most 100 characters (a long tensor
    name loses its middle)."""
    record = site.float16_hazard or {}
    limit = record["max_finite_spread"]
    fused = {True: "finite", False: "NOT finite", None: "not cut out"}[record["fused_finite"]]
    tail = (
        f": {record['first_non_finite']['op']} inf at ±{record['probe_spread']:g}, finite to "
        f"|x-mean| {'?' if limit is None else f'{limit:g}'}; fused: {fused}"
    )
    head = "float16 hazard "
    room = max(100 - len(head) - len(tail) - 2, 8)
    return f"{head}{middle(site.output, room)!r}{tail}"
