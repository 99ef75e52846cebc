"""The fused node of a proved site: its inputs and attributes (epsilon, axis, stash type), the
float16 Casts it absorbs or lifts over value moves, and the statistics outputs it also provides.
The checks it relies on are `norm_checks`'; each step returns what it proved or raises `Reject`."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from normfuse.ir.float16_moves import LIFTABLE, MOVERS
from normfuse.match.context import Context
from normfuse.match.norm_checks import (
    FusedIO,
    affine_after_downcast,
    check_exponents,
    check_square_exponent,
    exact_float32,
    known_shape,
    reduced_shape,
    type_name,
)
from normfuse.match.pattern import Match
from normfuse.match.records import INTERMEDIATE_USED_ELSEWHERE, FusedNode, Reject, Site, node_label
from normfuse.target.targets import STANDARD_OPS, Target


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
        if layout is None and scale_after is None and affine_after_downcast(match):
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
            f"output is {type_name(actual_type)}, fused node would give {type_name(expected_type)}",
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
