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

from normfuse.constants import reduce_axes, written_axes
from normfuse.context import Context
from normfuse.final_check import check_attribute_values
from normfuse.float16_moves import LIFTABLE, MOVERS
from normfuse.folding import schema
from normfuse.pattern import Match
from normfuse.records import INTERMEDIATE_USED_ELSEWHERE, FusedNode, Reject, Site, node_label
from normfuse.targets import STANDARD_OPS, Target

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
    return FusedIO(x, x_type, FLOAT_TYPES[x_type], output_cast, (*identity, *kept))


def _known_type(tensor: gs.Tensor, context: Context) -> int:
    elem_type = context.facts.elem_type(tensor)
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
    if "scale" not in match or "bias" in match or _affine_after_downcast(match):
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


def fused_site(
    kind: str,
    match: Match,
    context: Context,
    io: FusedIO,
    axis: int,
    eps: float,
    params: tuple,
    layout: tuple[tuple[int, ...], tuple[int, ...]] | None = None,
    extra_outputs: tuple[tuple[int, gs.Tensor], ...] = (),
    scale_after: np.ndarray | None = None,
) -> Site:
    """The site for `match`: one node computing `kind` on `io.x` with `params` (scale[, bias]),
    also producing `extra_outputs` (LayerNormalization's Mean and InvStdDev), and followed by a
    Mul by `scale_after` before any cast back (see `scale_kept_after`)."""
    _check_output_type(match.root, io, context)
    shape = known_shape(match["x"], context)
    _check_constant_ranks(match, len(shape), context)
    # Every pass's patterns bind exponents whose value is checked after matching; the net for
    # all of them is here, so a pass that forgets its own check cannot emit a wrong site.
    check_exponents(match, context)
    check_square_exponent(match, context, shape)
    if any(getattr(param, "size", 1) == 0 for param in params):
        # The fused kernels need at least one element to normalise (ONNX Runtime: "Size of
        # X.shape[axis:] must be at least 1"), while the decomposed form runs on empty groups.
        raise Reject("empty-normalised-axes", "the normalised axes hold no element")
    emission = context.policy.emissions[kind]
    if emission is None:
        raise Reject("opset-too-low", _opset_too_low(kind, context))
    stash_type, ort_only = _stash_type(emission.op, io, context)
    if io.elem_type == onnx.TensorProto.DOUBLE:  # computed in double: epsilon must be exact
        exact_float32(eps, "epsilon")
    input_cast, output_cast, kernel_dtype = None, io.output_cast, io.dtype
    after_cast: tuple = (None, None)
    # A kept scale multiplies the float32 result before the cast back, as the model does: always
    # the float32 kernel for a float16 norm (the float16 one would round before the Mul).
    kept_scale = scale_after is not None and io.elem_type == onnx.TensorProto.FLOAT16
    if (kept_scale and io.output_cast is None) or widened_float16(io, context, params):
        input_cast, output_cast = onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16
        kernel_dtype = np.float32
        # LLaMA's spelling: the affine in float16, after. Not with a layout: the kernel's
        # channels-last [C] parameters would broadcast along the wrong axis after the Transpose.
        if layout is None and scale_after is None and _affine_after_downcast(match):
            # The model's own scale (negated with a negated numerator: exact either side of a
            # rounding) moves after the Cast; without one, the kernel keeps its +-1.
            scale, bias = (*params, None)[:2]
            if "scale" in match:
                after_cast, params = (scale, None), (np.ones(scale.shape, scale.dtype), *params[1:])
            if "bias" in match:
                after_cast, params = (after_cast[0], bias), (params[0], None)
            after_cast = tuple(None if p is None else p.astype(io.dtype) for p in after_cast)
    input_moves = float16_input_moves(io.x, match, context) if input_cast is not None else ()
    params = tuple(p.astype(kernel_dtype) if isinstance(p, np.ndarray) else p for p in params)
    fused = FusedNode(
        emission.op,
        emission.domain,
        {"axis": axis, "epsilon": eps, "stash_type": stash_type},
        (io.x, *params),
        output_cast,
        extra_outputs=extra_outputs,
        layout=layout,
        input_cast=input_cast,
        input_moves=input_moves,
        moved_input=input_moves[0].inputs[0] if input_moves else None,
        after_cast=after_cast,
        scale_after=None if scale_after is None else scale_after.astype(kernel_dtype),
    )
    rewired = {id(tensor) for _, tensor in extra_outputs}
    # Nodes whose outputs the fused node takes over die too (a Reciprocal of the std).
    matched = {id(node) for node in match.nodes}
    taken_over = [
        tensor.inputs[0]
        for _, tensor in extra_outputs
        if tensor.inputs and id(tensor.inputs[0]) not in matched
    ]
    inside = matched | {id(node) for node in taken_over}
    kept = {id(node) for node in io.kept}
    kept.update(
        id(node)
        for node in match.nodes
        if any(
            id(user) not in inside
            for tensor in node.outputs
            if id(tensor) not in rewired
            for user in tensor.outputs
        )
        and node is not match.root.inputs[0]
    )
    _keep_producers(match, kept)
    removed = tuple(
        node_label(node) for node in [*match.nodes, *taken_over] if id(node) not in kept
    )
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
        emission.ort_only or ort_only,
        frozenset(id(node) for node in match.nodes),
    )


def float16_input_moves(x: gs.Tensor, match: Match, context: Context) -> tuple[gs.Node, ...]:
    """For a float16 norm computed in float16 throughout and fused as the float32 kernel between
    Casts: the value-moving nodes (top first) the input Cast must be taken above, so that the
    fused node reads `x` rounded exactly where the original's norm does.

    Where the original rounds is asked of ONNX Runtime (`float16_partition`: the graph its CPU
    provider runs after its float32 fallback), not modelled: a move between two ops without a
    float16 kernel runs in float32 only when nothing else keeps it float16 (a second move, a
    second reader, a graph output, an explicit Cast). Where the norm reads `x` rounded, the
    input Cast stays at `x` (the moves round it as in the original); where it reads it
    unrounded through moves, the Cast is taken above them and copies move the float32 values
    (the same values under ONNX's semantics: a move commutes with a widening Cast); where a
    move cannot be copied (Concat, Pad, Split), or where ONNX Runtime's graph does not show the
    read (a model-local function, which it inlines under other names), the site is refused
    (`float16-rounding`)."""
    chain, tensor = [], x
    while tensor.inputs and tensor.inputs[0].op in MOVERS:
        chain.append(tensor.inputs[0])
        tensor = tensor.inputs[0].inputs[0]
    source = tensor.inputs[0] if tensor.inputs else None
    if not chain or source is None or source.op == "Constant":
        return ()  # x is float16 in the original too: a graph input, a constant
    rounded = _norm_reads_rounded(x, match, context)
    if rounded:
        return ()  # the moves round x in the original; the Cast at x rounds it the same
    if rounded is None:
        raise Reject(
            "float16-rounding",
            f"the float16 input comes through {chain[0].op} from {source.op}, and whether ONNX "
            "Runtime's CPU provider rounds it there cannot be read from the graph it runs (a "
            "model-local function or a graph it does not load)",
        )
    unliftable = sorted({node.op for node in chain if node.op not in LIFTABLE})
    if unliftable:
        raise Reject(
            "float16-rounding",
            f"the float16 input comes through {', '.join(unliftable)} from {source.op}, which "
            "ONNX Runtime's CPU provider keeps in float32 here: the fused node's input Cast "
            "would round it to float16 where the original does not",
        )
    return tuple(reversed(chain))


def _norm_reads_rounded(x: gs.Tensor, match: Match, context: Context) -> bool | None:
    """Whether ONNX Runtime reads `x` rounded into the matched nodes that read it (None: not
    known, or the readers disagree)."""
    lookup = context.facts.float16_rounded
    readers = [node for node in match.nodes if node.outputs and any(t is x for t in node.inputs)]
    if lookup is None or not readers:
        return None
    found = {lookup(node.outputs[0].name, x.name) for node in readers}
    return found.pop() if len(found) == 1 else None


def widened_float16(io: FusedIO, context: Context, params: tuple) -> bool:
    """Whether a float16 norm is emitted as the float32 kernel between Casts (x to float32, the
    result back to float16; float16 scale and bias widened exactly), rather than the float16
    kernel: everywhere except when tuning for CUDA. ONNX Runtime's CPU provider has no float16
    kernels for the decomposed ops (Mul, Pow, ReduceMean, ...) nor for most neighbours (MatMul):
    it runs them in float32 and removes the Cast pairs between them, so the original's norm output
    reaches a float32 neighbour unrounded. The float16 kernel rounds it to float16 (fused LLaMA,
    Gemma, Qwen2 measured 1.3-2.5x the original's distance to a float64 evaluation); the float32
    kernel's trailing Cast is removed by the same rule, so the rounding is the original's. Both
    kernels compute in float32 and round once, so the result is the same where it is rounded.
    A scale or bias that float16 cannot hold exactly (Gemma's `1 + w`, computed in float32
    inside the casts) always takes the float32 kernel: rounding it would change the model."""
    if io.elem_type != onnx.TensorProto.FLOAT16 or io.output_cast is not None:
        return False
    chooser = context.policy.form_chooser
    if chooser is None or chooser.provider != "cuda":
        return True
    return any(
        isinstance(p, np.ndarray) and not np.array_equal(p.astype(np.float16), p, equal_nan=True)
        for p in params
    )


def _affine_after_downcast(match: Match) -> bool:
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


def _keep_producers(match: Match, kept: set[int]) -> None:
    """Add to `kept` every matched node a kept node reads from (it stays alive for it)."""
    producers = {id(tensor): tensor.inputs[0] for node in match.nodes for tensor in node.outputs}
    pending = [node for node in match.nodes if id(node) in kept]
    while pending:
        node = pending.pop()
        for tensor in node.inputs:
            producer = producers.get(id(tensor))
            if producer is not None and id(producer) not in kept:
                kept.add(id(producer))
                pending.append(producer)


def _check_constant_ranks(match: Match, rank: int, context: Context) -> None:
    """No constant in the subgraph may have more dims than x: it would broadcast the result to a
    higher rank than the fused node's output."""
    for name, tensor in match.tensors.items():
        if context.facts.is_constant(tensor):
            value = context.facts.value(tensor)
            shape = context.facts.shape(tensor) if value is None else value.shape
            if shape is not None and len(shape) > rank:
                raise Reject(
                    "broadcast-shape",
                    f"constant {name} of rank {len(shape)} broadcasts a rank-{rank} input",
                )


# Matched statistics that may be used outside a layer norm (the pass lists them as shared): the
# inverse std becomes LayerNormalization's optional InvStdDev output where its type and shape are
# the spec's, and so does the output of a `Reciprocal` that is the std's only outside use (ONNX's
# own function body); a mean used outside stays the model's own ReduceMean where the same
# conditions hold (and where another norm of x also centres with it).
STATISTICS = (
    (1, "mean", "mean_unsqueezed"),
    (2, "inv_std", "variance_reduce_unsqueezed"),
    (2, "std", "variance_reduce_unsqueezed"),
)


def statistics_outputs(
    match: Match,
    context: Context,
    io: FusedIO,
    layout: tuple | None,
    shape: tuple,
    axes: tuple[int, ...] | None,
) -> tuple[tuple[int, gs.Tensor], ...]:
    """The InvStdDev (2) output the fused `LayerNormalization` over `axes` of an input of `shape`
    provides for the matched statistics (of the spec's shape: the input's, reduced axes set to
    1); raises `Reject` where a statistic used outside can neither be provided nor stay."""
    inside = {id(node) for node in match.nodes}
    extra: dict[int, gs.Tensor] = {}
    for index, name, unsqueezed in STATISTICS:
        if name not in match:
            continue
        tensor = match[name]
        outside = [user for user in tensor.outputs if id(user) not in inside]
        if name == "mean" and outside and all(_centers(user, match) for user in outside):
            continue  # another norm of x centres with it: the ReduceMean stays for that norm
        if name == "std":
            if not outside or all(_divides_a_deviation(user, tensor, match) for user in outside):
                continue  # another norm of x divides by it: the std stays for that norm
            if _used_outside(match, "inv_std", inside):  # two tensors would both be InvStdDev
                raise _escaping(tensor, outside)
            tensor = _reciprocal(tensor, outside)
        expected = None if axes is None else reduced_shape(shape, axes)
        if (
            layout is None
            and unsqueezed not in match
            and context.facts.elem_type(tensor) == onnx.TensorProto.FLOAT
            and io.elem_type != onnx.TensorProto.DOUBLE
            and _spec_shape(context.facts.shape(tensor), expected)
        ):
            if name != "mean":
                extra[index] = tensor
            # The mean stays the model's own ReduceMean: ONNX Runtime's LayerNormalization gives
            # Mean = NaN for a row holding +-inf, where ReduceMean gives +-inf.
        elif outside:
            raise _escaping(match[name], outside)
    return tuple(sorted(extra.items(), key=lambda item: item[0]))


def _used_outside(match: Match, name: str, inside: set[int]) -> bool:
    return name in match and any(id(user) not in inside for user in match[name].outputs)


def _reciprocal(std: gs.Tensor, outside: list[gs.Node]) -> gs.Tensor:
    """The output of the one `Reciprocal` that is `std`'s only use outside the match."""
    user = outside[0]
    if len(outside) != 1 or user.op != "Reciprocal" or user.domain not in ("", "ai.onnx"):
        raise _escaping(std, outside)
    if len(user.inputs) != 1 or len(user.outputs) != 1:
        raise _escaping(std, outside)
    return user.outputs[0]


def _spec_shape(shape: tuple | None, expected: tuple | None) -> bool:
    """True when `shape` is the statistics' shape `expected`: the same rank, and every dim static
    in both equal (a reduced axis is 1)."""
    if shape is None or expected is None or len(shape) != len(expected):
        return False
    pairs = zip(shape, expected, strict=True)
    return all(a == b for a, b in pairs if isinstance(a, int) and isinstance(b, int))


def _centers(user: gs.Node, match: Match) -> bool:
    """`user` is `x - mean` or `mean - x` of the matched x (or its upcast)."""
    sources = {id(match["x"])} | ({id(match["upcast"])} if "upcast" in match else set())
    return user.op == "Sub" and any(id(tensor) in sources for tensor in user.inputs)


def _divides_a_deviation(user: gs.Node, std: gs.Tensor, match: Match) -> bool:
    """`user` is `Div(x - mean, std)` or `Div(mean - x, std)` of the matched x: another norm's
    numerator over the same std (the second norm of `(mean - x) / std` sharing it)."""
    if user.op != "Div" or user.domain not in (None, "", "ai.onnx") or len(user.inputs) != 2:
        return False
    numerator, divisor = user.inputs
    producers = numerator.inputs
    return divisor is std and len(producers) == 1 and _centers(producers[0], match)


def _escaping(tensor: gs.Tensor, users: list[gs.Node]) -> Reject:
    names = ", ".join(user.name or user.op for user in users)
    return Reject(INTERMEDIATE_USED_ELSEWHERE, f"{tensor.name!r} is also used by {names}")


def _opset_too_low(kind: str, context: Context) -> str:
    standard = STANDARD_OPS.get(kind)
    if standard is None:
        return f"no standard operator for {kind} at this opset (--target onnx)"
    op, opset = standard
    why = context.policy.opset_blockers.get(opset, "another operator's meaning would change")
    return (
        f"{op} needs opset {opset} and the model's opset cannot be raised to it: {why} "
        "(--target onnx; --target ort fuses it without the raise)"
    )


def _stash_type(op: str, io: FusedIO, context: Context) -> tuple[int, bool]:
    """The fused node's `stash_type` (the precision of its statistics) and whether the result is
    then ONNX Runtime-only. In double: `RMSNormalization` computes in double with stash_type=11;
    ONNX Runtime's CPU `LayerNormalization` implements double only with stash_type=1 (and then
    computes in double, measured), which the standard reads as float32 statistics."""
    if io.elem_type != onnx.TensorProto.DOUBLE:
        return onnx.TensorProto.FLOAT, False
    if op == "RMSNormalization":
        return onnx.TensorProto.DOUBLE, False
    if op == "LayerNormalization":
        if context.policy.target is Target.ONNX:
            raise Reject(
                "float64-stash-type",
                "standard LayerNormalization in double needs stash_type=11, which ONNX Runtime's "
                "CPU provider does not implement; stash_type=1 means float32 statistics",
            )
        return onnx.TensorProto.FLOAT, True
    return onnx.TensorProto.FLOAT, False


def _check_output_type(root: gs.Tensor, io: FusedIO, context: Context) -> None:
    """A safety net: where inference knows the output's type and shape, the fused node must produce
    the same element type and rank (a one-element constant of higher rank would broadcast)."""
    expected_type = io.output_cast or io.elem_type
    actual_type = context.facts.elem_type(root)
    if actual_type is not None and actual_type != expected_type:
        raise Reject(
            "cast-types",
            f"output is {_type_name(actual_type)}, fused node would give "
            f"{_type_name(expected_type)}",
        )
    input_shape, output_shape = context.facts.shape(io.x), context.facts.shape(root)
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
