"""Checks shared by the normalisation passes. Each returns what it proved or raises `Reject`.

They decide the questions every normalisation family asks: which axes the statistics reduce, what
the divisor is, where epsilon sits and whether it is positive, whether scale and bias vary only
along the normalised axes, and which dtypes the fused node's input and output have once
mixed-precision casts are absorbed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from normfuse.constants import reduce_axes
from normfuse.pattern import Match
from normfuse.rewrite import (
    Context,
    FusedNode,
    Reject,
    Site,
    check_attribute_values,
    node_label,
)

FLOAT_TYPES = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.FLOAT16: np.float16,
}
# Types a model may upcast to float32 for the statistics (bfloat16 has no NumPy dtype here).
UPCAST_SOURCES = {onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.FLOAT}
DOWNCAST_TARGETS = {onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}


@dataclass(frozen=True)
class FusedIO:
    """The fused node's input, its element type and dtype, the type to cast its output to (None:
    no cast), and matched nodes that must stay."""

    x: gs.Tensor
    elem_type: int
    dtype: type
    output_cast: int | None
    kept: tuple[gs.Node, ...]


def fused_io(match: Match, context: Context) -> FusedIO:
    """Resolve the casts a mixed-precision export puts around the statistics.

    `Cast(x -> float32) ... Cast(back to x's type)`: the fused node reads and writes x's own type
    (it computes in float32 itself), so both casts go. A float32 x whose result is cast down to
    float16/bfloat16: the fused node works in float32 and one Cast follows it. An upcast with no
    cast back: the fused node reads the upcast tensor, and the upcast stays.
    """
    x = match["x"]
    x_type = _known_type(x, context)
    upcast = match.node("upcast") if "upcast" in match else None
    downcast = match.node("downcast") if "downcast" in match else None
    if upcast is not None and downcast is None and upcast.attrs.get("to") in FLOAT_TYPES:
        # Statistics of a Cast's output (an integer or wide input made float): the fused node
        # reads the Cast's output, and the Cast stays.
        x = match["upcast"]
        return FusedIO(x, upcast.attrs["to"], FLOAT_TYPES[upcast.attrs["to"]], None, (upcast,))
    if upcast is not None and (
        upcast.attrs.get("to") != onnx.TensorProto.FLOAT or x_type not in UPCAST_SOURCES
    ):
        to = _type_name(upcast.attrs.get("to"))
        raise Reject("cast-types", f"statistics cast {_type_name(x_type)} to {to}")
    kept, output_cast = (), None
    if downcast is not None and downcast.attrs.get("to") != x_type:
        if x_type != onnx.TensorProto.FLOAT or downcast.attrs.get("to") not in DOWNCAST_TARGETS:
            to = _type_name(downcast.attrs.get("to"))
            raise Reject("cast-types", f"output cast to {to}, input is {_type_name(x_type)}")
        output_cast = downcast.attrs["to"]
    if upcast is not None and downcast is None:
        x, x_type, kept = match["upcast"], onnx.TensorProto.FLOAT, (upcast,)
    if x_type not in FLOAT_TYPES:
        name = _type_name(x_type)
        raise Reject("unsupported-dtype", f"{x.name!r} is {name}; fused for float32/float16")
    return FusedIO(x, x_type, FLOAT_TYPES[x_type], output_cast, kept)


def _known_type(tensor: gs.Tensor, context: Context) -> int:
    elem_type = context.elem_type(tensor)
    if elem_type is None:
        raise Reject("unknown-dtype", f"the element type of {tensor.name!r} is not known")
    return elem_type


def _type_name(elem_type: int | None) -> str:
    try:
        return onnx.TensorProto.DataType.Name(elem_type)
    except (ValueError, TypeError):
        return f"unknown ({elem_type})"


def known_shape(tensor: gs.Tensor, context: Context) -> tuple:
    """The shape of `tensor`, which the checks need (rank and normalised dims)."""
    shape = context.shape(tensor)
    if shape is None:
        raise Reject("unknown-rank", f"the rank of {tensor.name!r} is not known")
    return shape


def reduction_axes(
    nodes: list[gs.Node], rank: int, context: Context, channel_first: bool = False
) -> tuple[int, ...]:
    """The axes all `nodes` reduce (as negative indices): the same trailing axes, never axis 0;
    with `channel_first`, axis 1 alone of a rank-4 (NCHW) tensor is accepted too."""
    for node in nodes:
        check_attribute_values(node)
        if not node.attrs.get("keepdims", 1):
            raise Reject("keepdims", f"{node.name!r} drops the reduced axes (keepdims=0)")
    found = [reduce_axes(node, rank, context.reader) for node in nodes]
    if any(axes is None for axes in found):
        raise Reject("unknown-axes", "reduction axes are not constant")
    if len(set(found)) > 1:
        raise Reject(
            "mismatched-axes",
            " vs ".join(f"{n.op} over {a}" for n, a in zip(nodes, found, strict=True)),
        )
    axes = found[0]
    if -rank in axes:
        raise Reject("batch-axis", f"axes {axes} of a rank-{rank} tensor include the first axis")
    if channel_first and is_channel_first(axes, rank):
        return axes
    if axes != tuple(range(-len(axes), 0)):
        raise Reject("non-trailing-axes", f"axes {axes} are not the trailing axes")
    return axes


def is_channel_first(axes: tuple[int, ...], rank: int) -> bool:
    """Statistics over axis 1 alone of an NCHW tensor (ConvNeXt's channels-first layer norm)."""
    return rank == 4 and axes == (1 - rank,)


def normalised_shape(shape: tuple, axes: tuple[int, ...]) -> tuple[int, ...]:
    """The static dims of the normalised axes."""
    dims = tuple(shape[len(shape) + axes[0] :])
    if not all(isinstance(dim, int) for dim in dims):
        raise Reject("unknown-shape", f"normalised dims {dims} are not all static")
    return dims


def check_divisor(match: Match, context: Context, count: int) -> None:
    """A `Div(ReduceSum(.), n)` or `Mul(ReduceMean(.), c)` statistic must be a mean over d items."""
    if "divisor" in match:
        effective = context.reader.scalar(match["divisor"])
    elif "correction" in match:
        correction = context.reader.scalar(match["correction"])
        effective = None if not correction else count / correction
    else:
        return
    if effective is not None and np.isclose(effective, count, rtol=1e-6):
        return
    if effective is not None and count > 1 and np.isclose(effective, count - 1, rtol=1e-6):
        raise Reject("unbiased-variance", f"divides by d-1 = {count - 1}, not d = {count}")
    raise Reject("variance-divisor", f"divides by {effective}, not d = {count}")


def epsilon(match: Match, context: Context) -> float:
    """Epsilon: a positive, finite one-element true constant (an initializer the caller may
    override is a value, not a constant)."""
    tensor = match["epsilon"]
    if not context.reader.is_constant(tensor):
        raise Reject(
            "epsilon-not-constant",
            f"epsilon {tensor.name!r} is computed or fed at run time (a graph input, or an "
            "initializer the caller may override), so it cannot be baked into the fused node",
        )
    value = context.reader.scalar(tensor)
    if value is None:
        raise Reject("epsilon-not-scalar", "epsilon is not a one-element constant")
    if not (value > 0 and np.isfinite(value)):
        raise Reject("epsilon-not-positive", f"epsilon is {value}")
    return value


def affine(
    match: Match, name: str, context: Context, dims: tuple[int, ...], rank: int
) -> np.ndarray | None:
    """The bound constant `name` (scale or bias) expanded to `dims`; None when not in the match."""
    if name not in match:
        return None
    value = context.reader.value(match[name])
    expanded = None if value is None else affine_parameter(value, dims, rank)
    if expanded is None:
        reason = "gamma-shape" if name == "scale" else "beta-shape"
        shape = None if value is None else value.shape
        raise Reject(
            reason, f"{name} of shape {shape} does not broadcast along the normalised axes only"
        )
    return expanded


def channel_affine(
    match: Match, name: str, context: Context, channels: int, rank: int
) -> np.ndarray | None:
    """Scale or bias of a channel-first norm ([C, 1, 1] for NCHW): varying along axis 1 only,
    flattened to [C]; None when not in the match."""
    if name not in match:
        return None
    value = context.reader.value(match[name])
    if value is not None and value.ndim <= rank:
        full = value.reshape((1,) * (rank - value.ndim) + value.shape)
        others = [dim for axis, dim in enumerate(full.shape) if axis != 1]
        if all(dim == 1 for dim in others) and full.shape[1] in (1, channels):
            return np.broadcast_to(full.reshape(-1), (channels,)).copy()
    reason = "gamma-shape" if name == "scale" else "beta-shape"
    shape = None if value is None else value.shape
    raise Reject(reason, f"{name} of shape {shape} does not vary along the channel axis only")


def affine_parameter(
    value: np.ndarray, dims: tuple[int, ...], input_rank: int
) -> np.ndarray | None:
    """`value` expanded to `dims` if it varies only along the normalised axes.

    Leading dims before the normalised axes must be 1, and `value` may not have more dims than the
    input (the product would then broadcast to a larger shape than the input's).
    """
    count = len(dims)
    if value.ndim > input_rank or any(
        dim != 1 for dim in value.shape[: max(value.ndim - count, 0)]
    ):
        return None
    trailing = (1,) * max(count - value.ndim, 0) + tuple(value.shape[-count:] if value.ndim else ())
    if any(dim not in (1, full) for dim, full in zip(trailing, dims, strict=True)):
        return None
    return np.broadcast_to(value.reshape(trailing), dims).copy()


def fused_site(
    kind: str,
    match: Match,
    context: Context,
    io: FusedIO,
    axis: int,
    eps: float,
    params: tuple,
    layout: tuple[tuple[int, ...], tuple[int, ...]] | None = None,
) -> Site:
    """The site for `match`: one node computing `kind` on `io.x` with `params` (scale[, bias])."""
    _check_output_type(match.root, io, context)
    _check_constant_ranks(match, len(known_shape(match["x"], context)), context)
    emission = context.emissions[kind]
    if emission is None:
        raise Reject(
            "opset-too-low", f"no standard operator for {kind} at this opset (--target onnx)"
        )
    fused = FusedNode(
        emission.op,
        emission.domain,
        {"axis": axis, "epsilon": eps, "stash_type": 1},
        (io.x, *params),
        io.output_cast,
        layout=layout,
    )
    inside = {id(node) for node in match.nodes}
    kept = {id(node) for node in io.kept}
    kept.update(
        id(node)
        for node in match.nodes
        if any(id(user) not in inside for tensor in node.outputs for user in tensor.outputs)
        and node is not match.root.inputs[0]
    )
    removed = tuple(node_label(node) for node in match.nodes if id(node) not in kept)
    return Site(
        kind,
        emission.op,
        emission.domain,
        axis,
        eps,
        io.x.name,
        match.root.name,
        removed,
        fused,
        emission.opset,
        emission.ort_only,
        frozenset(id(node) for node in match.nodes),
    )


def _check_constant_ranks(match: Match, rank: int, context: Context) -> None:
    """No constant in the subgraph may have more dims than x: it would broadcast the result to a
    higher rank than the fused node's output."""
    for name, tensor in match.tensors.items():
        if context.reader.is_constant(tensor):
            value = context.reader.value(tensor)
            shape = context.shape(tensor) if value is None else value.shape
            if shape is not None and len(shape) > rank:
                raise Reject(
                    "broadcast-shape",
                    f"constant {name} of rank {len(shape)} broadcasts a rank-{rank} input",
                )


def _check_output_type(root: gs.Tensor, io: FusedIO, context: Context) -> None:
    """A safety net: where inference knows the output's type and shape, the fused node must produce
    the same element type and rank (a one-element constant of higher rank would broadcast)."""
    expected_type = io.output_cast or io.elem_type
    actual_type = context.elem_type(root)
    if actual_type is not None and actual_type != expected_type:
        raise Reject(
            "cast-types",
            f"output is {_type_name(actual_type)}, fused node would give "
            f"{_type_name(expected_type)}",
        )
    input_shape, output_shape = context.shape(io.x), context.shape(root)
    if (
        input_shape is not None
        and output_shape is not None
        and len(input_shape) != len(output_shape)
    ):
        raise Reject(
            "broadcast-shape",
            f"output rank {len(output_shape)} differs from input rank "
            f"{len(input_shape)}: a constant broadcasts the result",
        )
