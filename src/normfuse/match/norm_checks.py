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

from normfuse.facts.constants import reduce_axes, written_axes
from normfuse.facts.folding import schema
from normfuse.match.context import Context
from normfuse.match.final_check import check_attribute_values
from normfuse.match.pattern import Match
from normfuse.match.records import Reject

FLOAT_TYPES = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.FLOAT16: np.float16,
    onnx.TensorProto.DOUBLE: np.float64,
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


@dataclass(frozen=True)
class Refusal:
    """A pattern binding whose presence alone refuses a site, with the reason code and detail
    the refusal reports (a row of a pass's table, applied by `refuse_bindings`)."""

    binding: str
    code: str
    detail: str


def refuse_bindings(match: Match, refusals: tuple[Refusal, ...]) -> None:
    """Raise `Reject` for the first row of `refusals`, in table order, whose binding `match` has."""
    for refusal in refusals:
        if refusal.binding in match:
            raise Reject(refusal.code, refusal.detail)


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
    identity: tuple[gs.Node, ...] = ()
    if upcast is not None and upcast.attrs.get("to") == x_type:
        # A Cast to x's own type (TorchScript's `.to(dtype)` of a tensor already of it, before a
        # float16 adaLN norm) is no upcast: the fused node reads its output, and it stays.
        x, identity, upcast = match["upcast"], (upcast,), None
    if upcast is not None and downcast is None and upcast.attrs.get("to") in FLOAT_TYPES:
        # Statistics of a Cast's output (an integer or wide input made float): the fused node
        # reads the Cast's output, and the Cast stays.
        x = match["upcast"]
        return FusedIO(x, upcast.attrs["to"], FLOAT_TYPES[upcast.attrs["to"]], None, (upcast,))
    if upcast is not None and (
        upcast.attrs.get("to") != onnx.TensorProto.FLOAT or x_type not in UPCAST_SOURCES
    ):
        to = type_name(upcast.attrs.get("to"))
        raise Reject("cast-types", f"statistics cast {type_name(x_type)} to {to}")
    kept, output_cast = (), None
    if downcast is not None and downcast.attrs.get("to") != x_type:
        if x_type != onnx.TensorProto.FLOAT or downcast.attrs.get("to") not in DOWNCAST_TARGETS:
            to = type_name(downcast.attrs.get("to"))
            raise Reject("cast-types", f"output cast to {to}, input is {type_name(x_type)}")
        output_cast = downcast.attrs["to"]
    if upcast is not None and downcast is None:
        x, x_type, kept = match["upcast"], onnx.TensorProto.FLOAT, (upcast,)
    if x_type not in FLOAT_TYPES:
        name = type_name(x_type)
        raise Reject("unsupported-dtype", f"{x.name!r} is {name}; fused for float32/float16")
    return FusedIO(x, x_type, FLOAT_TYPES[x_type], output_cast, (*identity, *kept))


def _known_type(tensor: gs.Tensor, context: Context) -> int:
    elem_type = context.facts.elem_type(tensor)
    if elem_type is None:
        raise Reject("unknown-dtype", f"the element type of {tensor.name!r} is not known")
    return elem_type


def type_name(elem_type: int | None) -> str:
    try:
        return onnx.TensorProto.DataType.Name(elem_type)
    except (ValueError, TypeError):
        return f"unknown ({elem_type})"


def known_shape(tensor: gs.Tensor, context: Context) -> tuple:
    """The shape of `tensor`, which the checks need (rank and normalised dims)."""
    shape = context.facts.shape(tensor)
    if shape is None:
        raise Reject("unknown-rank", f"the rank of {tensor.name!r} is not known")
    return shape


def reduction_axes(
    nodes: list[gs.Node],
    rank: int,
    context: Context,
    channel_first: bool = False,
    unsqueezed: dict[int, gs.Node] | None = None,
) -> tuple[int, ...]:
    """The axes all `nodes` reduce (as negative indices): the same axes, forming a trailing suffix
    of the shape (all axes of a rank-1 tensor, say); with `channel_first`, axis 1 alone of a
    rank-4 (NCHW) tensor is accepted too. `unsqueezed` maps a `keepdims=0` node (by id) to the
    `Unsqueeze` that restores exactly the dims it dropped."""
    for node in nodes:
        check_attribute_values(node)
    found = [_axes(node, rank, context) for node in nodes]
    if any(axes is None for axes in found):
        raise Reject("unknown-axes", _no_axes(nodes, context))
    for node, axes in zip(nodes, found, strict=True):
        _check_keepdims(node, axes, rank, context, (unsqueezed or {}).get(id(node)))
    if len(set(found)) > 1:
        raise Reject(
            "mismatched-axes",
            " vs ".join(f"{n.op} over {a}" for n, a in zip(nodes, found, strict=True)),
        )
    axes = found[0]
    if channel_first and is_channel_first(axes, rank):
        return axes
    if axes == tuple(range(-len(axes), 0)):
        return axes
    if -rank in axes:
        raise Reject(
            "batch-axis",
            f"axes {axes} of a rank-{rank} tensor include the first axis but not all trailing ones",
        )
    raise Reject("non-trailing-axes", f"axes {axes} are not the trailing axes")


def _no_axes(nodes: list[gs.Node], context: Context) -> str:
    """Why the axes of `nodes` are not known: the version of an op is not one at every opset the
    scope is read at (a function importing another opset than its model), or not constant."""
    opset = context.facts.opset
    unversioned = next((node.op for node in nodes if schema(node.op, opset) is None), None)
    if unversioned is not None and isinstance(opset, tuple):
        return (
            f"{unversioned} is another version at the function's opset {opset[0]} than at the "
            f"model's {opset[1]}, at which ONNX Runtime inlines the body"
        )
    return "reduction axes are not constant"


def _axes(node: gs.Node, rank: int, context: Context) -> tuple[int, ...] | None:
    """`reduce_axes`, or axes computed from static shapes (`Range(axis, Size(Shape(x)))`)."""
    try:
        return reduce_axes(node, rank, context.facts, context.facts.static_value)
    except (TypeError, ValueError):  # a malformed `axes` attribute
        return None


def _normalised_axes(value: np.ndarray, rank: int) -> tuple[int, ...] | None:
    if not np.issubdtype(value.dtype, np.integer):
        return None
    axes = [int(a) for a in value.reshape(-1)]
    if any(a < -rank or a >= rank for a in axes):
        return None
    normalised = tuple(sorted({a - rank if a >= 0 else a for a in axes}))
    return normalised if len(normalised) == len(axes) else None


def _check_keepdims(
    node: gs.Node, axes: tuple[int, ...], rank: int, context: Context, unsqueeze: gs.Node | None
) -> None:
    """keepdims=1, or keepdims=0 followed by an `Unsqueeze` of exactly the dropped axes."""
    keepdims = node.attrs.get("keepdims", 1)
    if keepdims and unsqueeze is None:
        return
    if keepdims:
        raise Reject("unsqueeze-axes", f"{node.name!r} keeps its dims and is unsqueezed after")
    if unsqueeze is None:
        raise Reject("keepdims", f"{node.name!r} drops the reduced axes (keepdims=0)")
    written = written_axes(unsqueeze, context.facts, context.facts.static_value)
    restored = _normalised_axes(np.array(written, np.int64), rank) if written else None
    if restored != axes:
        raise Reject(
            "unsqueeze-axes",
            f"{node.name!r} drops axes {axes}; the Unsqueeze after it restores {restored}",
        )


def unsqueezed_reducers(match: Match, names: tuple[str, ...]) -> dict[int, gs.Node]:
    """The `Unsqueeze` after each reducer bound to one of `names` (`<name>_unsqueezed`), by the
    reducer's id."""
    return {
        id(match.node(name)): match.node(f"{name}_unsqueezed")
        for name in names
        if f"{name}_unsqueezed" in match
    }


# Exponents a pattern binds loosely, so that a wrong one is reported: (name, value, reason).
EXPONENTS = (("half", 0.5, "root-exponent"), ("minus_one", -1.0, "reciprocal-exponent"))


def check_exponents(match: Match, context: Context) -> None:
    """`Pow(., half)` must be exactly a square root and `Pow(., minus_one)` exactly a reciprocal:
    one-element constants exactly equal to 0.5 and -1 in their own type."""
    for name, expected, reason in EXPONENTS:
        if name not in match:
            continue
        value = context.facts.value(match[name])
        if value is None or value.size != 1 or not np.issubdtype(value.dtype, np.floating):
            raise Reject(reason, f"the exponent {name!r} is not a one-element float constant")
        if value.reshape(()) != expected:
            raise Reject(reason, f"Pow(., {value.reshape(())}) where {expected} was needed")


def is_channel_first(axes: tuple[int, ...], rank: int) -> bool:
    """Statistics over axis 1 alone of an NCHW tensor (ConvNeXt's channels-first layer norm)."""
    return rank == 4 and axes == (1 - rank,)


def reduced_shape(shape: tuple, axes: tuple[int, ...]) -> tuple:
    """`shape` with the reduced `axes` (negative) kept as 1: the statistics' shape."""
    rank = len(shape)
    return tuple(1 if axis - rank in axes else dim for axis, dim in enumerate(shape))


def normalised_shape(shape: tuple, axes: tuple[int, ...]) -> tuple[int, ...]:
    """The static dims of the normalised axes."""
    dims = tuple(shape[len(shape) + axes[0] :])
    if not all(isinstance(dim, int) for dim in dims):
        why = (
            "a symbolic dim may be 0 at run time, where the fused kernels refuse to run, and a "
            "scale fed at run time may broadcast where theirs may not"
        )
        if any(dim is None for dim in dims):
            why = (
                "None: no size that ONNX Runtime is known to agree with (none inferred, or "
                "inferred through an op whose sizes ONNX Runtime may compute otherwise: "
                "docs/spellings-and-reasons.md)"
            )
        raise Reject("unknown-shape", f"normalised dims {dims} are not all static: {why}")
    return dims


def check_divisor(match: Match, context: Context, count: int) -> None:
    """A `Div(ReduceSum(.), n)`, `Mul(ReduceSum(.), r)` or `Mul(ReduceMean(.), c)` statistic must
    be a mean over d items: n exactly d (a constant, or folded from static shapes), r the nearest
    value to 1/d in its own type, c exactly 1."""
    if "divisor" in match:
        value = context.facts.static_value(match["divisor"])
        if value is None or value.size != 1 or not np.issubdtype(value.dtype, np.number):
            raise Reject("variance-divisor", "the divisor is not a one-element static value")
        effective = float(value.reshape(()))
        exact = effective == count
    elif "reciprocal_divisor" in match:
        value = context.facts.value(match["reciprocal_divisor"])
        if value is None or value.size != 1 or not np.issubdtype(value.dtype, np.floating):
            raise Reject("variance-divisor", "the factor is not a one-element float constant")
        factor = value.reshape(())
        exact = factor == factor.dtype.type(1.0 / count)
        effective = float(1.0 / factor) if factor else float("inf")
    elif "correction" in match:
        correction = context.facts.scalar(match["correction"])
        effective = None if not correction else count / correction
        exact = correction == 1.0
    else:
        return
    if exact:
        return
    if effective is not None and count > 1 and np.isclose(effective, count - 1, rtol=1e-6):
        raise Reject("unbiased-variance", f"divides by d-1 = {count - 1}, not d = {count}")
    raise Reject("variance-divisor", f"divides by {effective}, not d = {count}")


def epsilon(match: Match, context: Context, reduced_shape: tuple | None = None) -> float:
    """Epsilon: a positive, finite one-element true constant (an initializer the caller may
    override is a value, not a constant); with `reduced_shape` (the statistics' shape), also a
    tensor whose values are all equal and whose broadcast leaves that shape unchanged."""
    tensor = match["epsilon"]
    if not context.facts.is_constant(tensor):
        raise Reject(
            "epsilon-not-constant",
            f"epsilon {tensor.name!r} is computed or fed at run time (a graph input, or an "
            "initializer the caller may override), so it cannot be baked into the fused node",
        )
    value = context.facts.scalar(tensor)
    if value is None and reduced_shape is not None:
        value = uniform_value(tensor, context, reduced_shape)
    if value is None:
        raise Reject("epsilon-not-scalar", "epsilon is not a one-element constant")
    if not (value > 0 and np.isfinite(value)):
        raise Reject("epsilon-not-positive", f"epsilon is {value}")
    return value


def uniform_value(tensor: gs.Tensor, context: Context, shape: tuple) -> float | None:
    """The common value of a constant whose values are all equal and whose broadcast against a
    tensor of `shape` leaves that shape unchanged (every dim 1 or the same static dim); else
    None. Such a constant acts exactly as its one value."""
    value = context.facts.value(tensor)
    if value is None or value.size == 0 or value.ndim > len(shape):
        return None
    if not np.issubdtype(value.dtype, np.floating) or not np.all(value == value.flat[0]):
        return None
    trailing = shape[len(shape) - value.ndim :]
    if any(dim not in (1, full) for dim, full in zip(value.shape, trailing, strict=True)):
        return None
    return float(value.flat[0])


def check_square_exponent(match: Match, context: Context, shape: tuple) -> None:
    """A `Pow(., e)` squaring with e a tensor: every value exactly 2, broadcast-neutral."""
    if "square_exponent" not in match:
        return
    value = uniform_value(match["square_exponent"], context, shape)
    if value != 2.0:
        raise Reject(
            "square-exponent", "the exponent is not 2 (exactly, in every element, shape-neutral)"
        )


def exact_float32(value: float, what: str) -> float:
    """`value`, which must be exactly a float32 (what the fused node's `epsilon` attribute is)."""
    if float(np.float32(value)) != value:
        raise Reject(
            "epsilon-not-float32",
            f"{what} {value!r} is not exactly a float32, which the fused node's attribute is",
        )
    return value


def affine(
    match: Match, name: str, context: Context, dims: tuple[int, ...], rank: int
) -> np.ndarray | None:
    """The bound constant `name` (scale or bias) expanded to `dims`; None when not in the match."""
    if name not in match:
        return None
    value = context.facts.static_value(match[name])  # a constant, or a Flatten of one
    expanded = None if value is None else affine_parameter(value, dims, rank)
    if expanded is None:
        reason = "gamma-shape" if name == "scale" else "beta-shape"
        shape = None if value is None else value.shape
        raise Reject(
            reason, f"{name} of shape {shape} does not broadcast along the normalised axes only"
        )
    return expanded


def scale_kept_after(
    match: Match, context: Context, shape: tuple, dims: tuple[int, ...]
) -> np.ndarray | None:
    """The scale, where it spans the normalised axes and varies along others too but keeps x's
    shape (Cohere's QK-norm weight [H, Dh] on [N, S, H, Dh], normalised over Dh): the fused node
    then normalises with a unit scale and this Mul stays after it, on the same values in the same
    type, before any cast back (exact). None where the scale fits the fused op, is absent, would
    widen x or does not span the normalised axes (an instance norm's per-channel [C, 1, 1]: the
    group-norm pass's), where a bias follows it (it would have to stay too), or where the Mul
    follows the cast back (the fused node's float16 output would round first)."""
    if "scale" not in match or "bias" in match or affine_after_downcast(match):
        return None
    value = context.facts.value(match["scale"])
    rank = len(shape)
    if value is None or value.ndim > rank or affine_parameter(value, dims, rank) is not None:
        return None
    full = (1,) * (rank - value.ndim) + value.shape
    if any(dim != 1 and dim != size for dim, size in zip(full, shape, strict=True)):
        return None  # it would broadcast x to a larger shape (or a symbolic dim is unproved)
    return value if full[rank - len(dims) :] == tuple(dims) else None


def channel_affine(
    match: Match, name: str, context: Context, channels: int, rank: int
) -> np.ndarray | None:
    """Scale or bias of a channel-first norm ([C, 1, 1] for NCHW): varying along axis 1 only,
    flattened to [C]; None when not in the match."""
    if name not in match:
        return None
    value = context.facts.value(match[name])
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


def affine_after_downcast(match: Match) -> bool:
    """Whether every matched node reading the scale or bias follows the cast back (the affine
    is applied to the rounded result, in the input's type)."""
    if "downcast" not in match:
        return False
    inside = {id(node) for node in match.nodes}
    after: set[int] = set()
    frontier = [match.node("downcast")]
    while frontier:
        for tensor in frontier.pop().outputs:
            for user in tensor.outputs:
                if id(user) in inside and id(user) not in after:
                    after.add(id(user))
                    frontier.append(user)
    affine = [match[name] for name in ("scale", "bias") if name in match]
    readers = [user for tensor in affine for user in tensor.outputs if id(user) in inside]
    return bool(readers) and all(id(reader) in after for reader in readers)
