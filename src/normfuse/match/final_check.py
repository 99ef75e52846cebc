"""The one final check every site goes through before it is emitted, whatever pass built it.

A pass proves that its match computes a norm; this module proves that the node it would emit is
one ONNX Runtime's CPU provider accepts and that it stands in for the replaced output: a kernel
for the op and element type (`KERNELS`, measured with onnxruntime 1.32), scale and bias shaped as
the op's contract says (`X.shape[axis:]` for the norm ops, 1-D `[hidden]` for the `Skip*` ops),
the output's element type and shape the replaced output's, a finite epsilon greater than 0 (or
the one the replaced norm node already had). The driver turns a failure into a near-miss.
`check_attribute_values` (a node taking an attribute by reference inside a function body) is
the one scope fact both the driver and the shared checks ask of every matched node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from normfuse.facts.same_shape import format_shape, same_shape
from normfuse.match.records import Reject, node_label

if TYPE_CHECKING:  # a leaf module: the driver imports it, never the other way
    from normfuse.match.context import Context
    from normfuse.match.pattern import Match
    from normfuse.match.records import FusedNode, Site

FLOAT, FLOAT16, DOUBLE = onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE
MS_DOMAIN = "com.microsoft"
ATTRIBUTE_REFERENCE = "attribute-reference"
NORM_OPS = ("LayerNormalization", "SimplifiedLayerNormalization", "RMSNormalization")


@dataclass(frozen=True)
class Kernel:
    """What ONNX Runtime's CPU kernel of one op accepts. `params`: the reason code of each input
    after X (and, for `Skip*`, the skip); `same_type`: the params must have X's element type;
    `statistics`: the indices of its optional statistics outputs (shaped like X with the
    normalised axes 1, of the `stash_type`); a `Skip*` op's output 3 is the sum."""

    types: frozenset[int]
    params: tuple[str, ...]
    same_type: bool
    statistics: frozenset[int] = frozenset()
    skip: bool = False


ALL_FLOATS, NO_DOUBLE = frozenset({FLOAT, FLOAT16, DOUBLE}), frozenset({FLOAT, FLOAT16})
KERNELS = {
    ("", "LayerNormalization"): Kernel(
        ALL_FLOATS, ("gamma-shape", "beta-shape"), True, frozenset({1, 2})
    ),
    ("", "SimplifiedLayerNormalization"): Kernel(
        ALL_FLOATS, ("gamma-shape",), False, frozenset({1})
    ),
    ("", "RMSNormalization"): Kernel(ALL_FLOATS, ("gamma-shape",), False),
    # No float64 kernel ("Type 'tensor(double)' ... is invalid" at session creation).
    (MS_DOMAIN, "SkipLayerNormalization"): Kernel(
        NO_DOUBLE, ("gamma-shape", "beta-shape", "bias-shape"), True, skip=True
    ),
    (MS_DOMAIN, "SkipSimplifiedLayerNormalization"): Kernel(
        NO_DOUBLE, ("gamma-shape", "bias-shape"), True, skip=True
    ),
}


class Unfit(Exception):
    """The fused node would not stand in for the subgraph: `reason` (kebab-case), `detail`."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def problem(site: Site, found: Match, context: Context) -> tuple[str, str] | None:
    """(reason, detail) where `site`'s fused node (for the match `found`) breaks its op's kernel
    contract or would not produce what the replaced output `found.root` holds; else None."""
    try:
        _check_site(site, found, context)
    except Unfit as unfit:
        return unfit.reason, unfit.detail
    return None


def _check_site(site: Site, found: Match, context: Context) -> None:
    fused = site.fused
    domain = "" if fused.domain == "ai.onnx" else fused.domain
    kernel = KERNELS.get((domain, fused.op))
    if kernel is None:
        raise Unfit("unsupported-op", f"{domain or 'ai.onnx'}.{fused.op} is not a known kernel")
    x = fused.inputs[0]
    # The kernel reads x after the emitted input Cast, where there is one (a float16 norm run by
    # the float32 kernel).
    x_type = fused.input_cast if fused.input_cast is not None else _elem_type(x, context)
    if x_type not in kernel.types:
        name = "unknown" if x_type is None else onnx.TensorProto.DataType.Name(x_type)
        raise Unfit("unsupported-dtype", f"{fused.op} has no CPU kernel for {name} input")
    _check_epsilon(fused.attrs.get("epsilon", 1e-5), found)
    shape = _input_shape(x, fused.layout, context)
    if fused.grouping is not None:
        shape = _grouped_shape(shape, fused.grouping)
    _check_output(site, found.root, x_type, shape, context)
    params = fused.inputs[2:] if kernel.skip else fused.inputs[1:]
    if kernel.skip:
        _check_skip(x, fused.inputs[1], shape, x_type, context)
        axis = len(shape) - 1
    else:
        axis = _axis(fused.attrs.get("axis", -1), len(shape))
    if len(params) > len(kernel.params):
        raise Unfit("unsupported-op", f"{fused.op} takes {len(kernel.params)} parameters")
    for param, reason in zip(params, kernel.params, strict=False):
        if param is not None:
            same = x_type if kernel.same_type else None
            _check_param(param, reason, shape[axis:], same, context)
    _check_extra_outputs(fused, kernel, shape, axis, x_type, context)


def _check_extra_outputs(
    fused: FusedNode, kernel: Kernel, shape: tuple, axis: int, x_type: int, context: Context
) -> None:
    """Each further output the fused node provides is one the op has, of its shape and type."""
    for index, tensor in fused.extra_outputs:
        if kernel.skip and index == 3:  # input + skip (+ bias): X's shape and type
            _check_like(tensor, x_type, shape, "output-shape", context)
        elif index in kernel.statistics and fused.layout is None:
            reduced = shape[:axis] + (1,) * (len(shape) - axis)
            stash_type = fused.attrs.get("stash_type", FLOAT)
            _check_like(tensor, stash_type, reduced, "output-shape", context)
        else:
            raise Unfit("unsupported-op", f"{fused.op} gives no output {index} normfuse can use")


def _elem_type(value: gs.Tensor | np.ndarray, context: Context) -> int | None:
    if isinstance(value, np.ndarray):
        return onnx.helper.np_dtype_to_tensor_dtype(value.dtype)
    return context.facts.elem_type(value)


def _shape(value: gs.Tensor | np.ndarray, context: Context) -> tuple | None:
    return tuple(value.shape) if isinstance(value, np.ndarray) else context.facts.shape(value)


def _input_shape(x: gs.Tensor, layout: tuple | None, context: Context) -> tuple:
    """X's shape as the fused node sees it (after the Transpose before it, if any)."""
    shape = _shape(x, context)
    if shape is None:
        raise Unfit("unknown-shape", f"the shape of {x.name!r} is not known")
    if layout is not None:
        before = layout[0]
        if sorted(before) != list(range(len(shape))):
            raise Unfit("output-shape", f"perm {list(before)} does not fit rank {len(shape)}")
        shape = tuple(shape[axis] for axis in before)
    return shape


def _grouped_shape(shape: tuple, grouping: tuple[tuple[int, ...], tuple[int, ...]]) -> tuple:
    """X's shape [N, C, *S] as the node reads it after the grouping Reshape to [0, G, L] (0
    copies N), where the Reshape back [0, C, *S] restores X's shape exactly."""
    grouped, back = grouping
    rest = shape[1:]
    if not all(isinstance(dim, int) for dim in rest) or tuple(back[1:]) != tuple(rest):
        restored = f"a Reshape back to {list(back)} does not restore {list(shape)}"
        raise Unfit("output-shape", restored)
    if back[0] != 0 or grouped[0] != 0 or len(grouped) != 3:
        raise Unfit("output-shape", f"grouping {list(grouped)} does not keep the batch")
    if grouped[1] * grouped[2] != int(np.prod(rest)):
        raise Unfit("output-shape", f"grouping {list(grouped)} does not hold {list(shape)}")
    return (shape[0], grouped[1], grouped[2])


def _axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise Unfit("unknown-axes", f"axis {axis} is outside a rank-{rank} input")
    return axis % rank


def _check_epsilon(epsilon: float, found: Match) -> None:
    """Finite and > 0, unless the replaced norm node already had this epsilon."""
    if math.isfinite(epsilon) and epsilon > 0:
        return
    kept = any(
        node.op in NORM_OPS and float(node.attrs.get("epsilon", 1e-5)) == epsilon
        for node in found.nodes
    )
    if not (math.isfinite(epsilon) and kept):
        raise Unfit("epsilon-not-positive", f"the fused node's epsilon would be {epsilon}")


def _check_output(site: Site, root: gs.Tensor, x_type: int, shape: tuple, context: Context) -> None:
    """The fused output has the replaced output's element type and shape."""
    fused = site.fused
    produced = fused.output_cast if fused.output_cast is not None else x_type
    out_shape = shape
    if fused.layout is not None:
        out_shape = tuple(shape[axis] for axis in fused.layout[1])
    if fused.grouping is not None:
        out_shape = (shape[0], *fused.grouping[1][1:])
    _check_like(root, produced, out_shape, "output-shape", context)


def _check_like(
    tensor: gs.Tensor, elem_type: int, shape: tuple, reason: str, context: Context
) -> None:
    """`tensor` (as inference knows it) has `elem_type` and a shape that agrees with `shape`."""
    known_type = context.facts.elem_type(tensor)
    if known_type is not None and known_type != elem_type:
        raise Unfit(
            "output-type",
            f"{tensor.name!r} is {onnx.TensorProto.DataType.Name(known_type)}, the fused node "
            f"would give {onnx.TensorProto.DataType.Name(elem_type)}",
        )
    known = context.facts.shape(tensor)
    if known is not None and not _agree(known, shape):
        raise Unfit(reason, f"{tensor.name!r} is {list(known)}, the fused node gives {list(shape)}")


def _agree(a: tuple, b: tuple) -> bool:
    """Same rank, and equal where both dims are static."""
    return len(a) == len(b) and all(
        x == y for x, y in zip(a, b, strict=True) if isinstance(x, int) and isinstance(y, int)
    )


def _check_skip(
    x: gs.Tensor | np.ndarray, skip: gs.Tensor | None, shape: tuple, x_type: int, context: Context
) -> None:
    """The `Skip*` kernels take a 2-D or 3-D input with a static hidden size, and a skip proved
    to have the same shape (symbolic dims included: `same_shape`) and type."""
    if len(shape) not in (2, 3) or not isinstance(shape[-1], int):
        raise Unfit(
            "skip-shape",
            "Skip* ops need a 2-D or 3-D input with a static hidden size, got "
            f"{format_shape(shape)}",
        )
    if skip is None or isinstance(skip, np.ndarray) or isinstance(x, np.ndarray):
        raise Unfit("not-residual", "the input or skip is not a graph tensor")
    same = same_shape(x, skip, context.facts.types, context.facts)
    if not same or context.facts.elem_type(skip) != x_type:
        raise Unfit(
            "skip-shape",
            f"skip {format_shape(context.facts.shape(skip))} is not proved to have the shape "
            f"and type of the input {format_shape(shape)}",
        )


def _check_param(
    param: gs.Tensor | np.ndarray,
    reason: str,
    normalised: tuple,
    elem_type: int | None,
    context: Context,
) -> None:
    """A scale or bias has the rank of `normalised` and agrees with it where both dims are
    static (a constant's shape is always known: it must have exactly the normalised rank); of
    `elem_type` where given. A normalised dim inference cannot size is the pass's proof to
    give, and the guard's run checks it where the model is small enough."""
    if elem_type is not None and _elem_type(param, context) not in (None, elem_type):
        raise Unfit(reason, f"the {reason.split('-')[0]} has another element type than x")
    shape = _shape(param, context)
    constant = isinstance(param, np.ndarray | gs.Constant)
    if constant and shape is None:
        raise Unfit(reason, "a constant of unknown shape")
    if shape is not None and not _agree(shape, normalised):
        raise Unfit(reason, f"tensor of shape {list(shape)}; the op needs {list(normalised)}")


def check_attribute_values(node: gs.Node) -> None:
    """Raise `Reject` where `node` takes an attribute from a calling node (`@name` inside a
    model-local function): its value differs per call site."""
    refs = [key for key, value in node.attrs.items() if isinstance(value, gs.Node.AttributeRef)]
    if refs:
        raise Reject(
            ATTRIBUTE_REFERENCE,
            f"{node.op} {node_label(node)!r} takes {', '.join(refs)} from the calling node's "
            "attributes; not resolved inside a shared function body",
        )
