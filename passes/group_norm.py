"""Group normalisation: x [N, C, *S] in G groups of C/G channels, each group normalised over its
channels and positions, then a per-channel scale and bias (`nn.GroupNorm`, diffusion UNets/VAEs).

What exporters write (an optional SiLU `y * Sigmoid(y)` often follows; it is never part of a site)::

    x ──> Reshape([0, G, -1]) ──> statistics ──> Reshape(Shape(x) | x's static shape) ──> back
    statistics: InstanceNormalization(ones[G], zeros[G])   (TorchScript; dynamo at opset 18)
              | the layer-norm statistics over the last axis, spelled out (hand-written)
              | Cast(float32) ──> those statistics ──> Cast(float16)  (diffusers, float16)
    back ──> Mul(gamma[C, 1, 1]) ──> Add(beta[C, 1, 1]) ──> y
    (dynamo at opset 21 writes GroupNormalization-21 itself: rewritten to the same form, the
    Reshapes and the affine emitted around the LayerNormalization; float16 between Casts;
    GroupNormalization-18's per-group scale and bias repeated per channel)

Instance norm with a per-channel affine (statistics over S of x itself, no Reshapes) is the G = C
case. What is emitted was decided by what ONNX Runtime's CPU provider runs and by measurement
(docs/group-norm.md, its benchmark): `GroupNormalization`-18/21 have no CPU kernel (ORT
inlines their function body, which computes the variance as E[x^2] - E[x]^2 and was timed slower
than the decomposed form; it gives NaN where a group's mean is large against its spread), and
`com.microsoft.GroupNorm` (NHWC) has no CPU kernel at all. So the spelled-out statistics become
one `LayerNormalization` over the last axis of the grouped tensor (over S for G = C), and the
Reshapes and the per-channel affine stay. The `InstanceNormalization` spelling is already that
fast and is reported, not rewritten (`no-faster-form`).

A site is fused only when the whole is exactly group normalisation: the first Reshape splits the
channels into G groups with G dividing C (or, with static spatial dims S, G dividing C·S: the
grouped tensor's rows straddle channels, and its last-axis layer norm is still exact), the second
restores x's shape, the statistics reduce the
last axis of the grouped tensor only, epsilon is positive and inside the square root, and the
affine after the Reshape back is per channel. Otherwise a near-miss says why.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from normfuse.passes.layer_norm import DOWNCAST_STATISTICS, STATISTICS

from normfuse.facts.constants import DEFAULT_DOMAINS, reduce_axes
from normfuse.facts.folding import resolved_attributes, schema
from normfuse.facts.same_shape import SAME_AS_INPUT
from normfuse.facts.static_values import ShapeEntry, shape_entries
from normfuse.match import fused_sites
from normfuse.match import norm_checks as checks
from normfuse.match.context import Context
from normfuse.match.pattern import AnyOf, Const, Match, Op, Var, match_first
from normfuse.match.records import INTERMEDIATE_USED_ELSEWHERE, FusedNode, Site, node_label

# The most producers a walk up a chain of Reshapes or shape-keeping ops takes (its own limit,
# no longer the shape folder's depth; the same 16).
MAX_WALK = 16

KIND = "group-norm"
# A GroupNormalization node's scale and bias that are not one float32 value per channel.
_AFFINE_REASONS = {"gn_scale": "gamma-shape", "gn_bias": "beta-shape"}

_INSTANCE_NORM = Op(
    "InstanceNormalization", Var("x"), Const("in_scale"), Const("in_bias"), name="instance_norm"
)
# PyTorch dynamo's `torch.var(unbiased=False)` in a hand-written group norm: the variance centres
# x on a mean of its own and reduces without keepdims, then a Reshape puts the axis back.
_mean = Op("ReduceMean", Var("x"), name="mean", extra_inputs=True)
_variance_centered = Op(
    "Sub",
    Var("x"),
    Op("ReduceMean", Var("x"), name="variance_mean", extra_inputs=True),
    name="variance_centered",
)
_reshaped_variance = Op(
    "Reshape",
    Op(
        "ReduceMean",
        Op("Mul", _variance_centered, _variance_centered),
        name="variance_reduce",
        extra_inputs=True,
    ),
    Const("variance_shape"),
)
_dynamo_centered = Op("Sub", Var("x"), _mean, name="centered")
_dynamo_std = Op("Sqrt", Op("Add", _reshaped_variance, Var("epsilon"), name="shifted"))
_DYNAMO_VAR = Op("Div", _dynamo_centered, _dynamo_std, name="normed")
# `(x - mean) * torch.rsqrt(var + eps)`: rsqrt as Reciprocal(Sqrt(.)) (dynamo) or 1 / Sqrt(.).
_DYNAMO_RSQRT = Op(
    "Mul",
    _dynamo_centered,
    AnyOf(Op("Reciprocal", _dynamo_std), Op("Div", Const("one", 1.0), _dynamo_std)),
    name="normed",
)
# One GroupNormalization node (dynamo's `nn.GroupNorm` at opset 21), which ONNX Runtime's CPU
# provider runs as the op's inlined one-pass function body.
# Scale and bias as variables: a node whose affine is no true constant (a graph input, an
# overridable initializer) is matched too, so that its near-miss says why it stays.
_GROUP_NORMALIZATION = Op(
    "GroupNormalization", Var("x"), Var("gn_scale"), Var("gn_bias"), name="group_normalization"
)
# The x types a GroupNormalization node is rewritten for, and the dtype of its scale and bias.
_GROUP_NORMALIZATION_TYPES = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.FLOAT16: np.float16,
}
# A float16 model's statistics in float32 (diffusers): Cast(x) ... Cast(back), between the Reshapes.
PATTERNS = (
    DOWNCAST_STATISTICS,
    STATISTICS,
    _DYNAMO_VAR,
    _DYNAMO_RSQRT,
    _INSTANCE_NORM,
    _GROUP_NORMALIZATION,
)
_RESHAPE = Op("Reshape", Var("ungrouped"), Var("grouped_shape"), name="grouped")
# An InstanceNormalization node between the Reshapes, once checked, is refused as it is.
_KEPT_AS_IS = (
    checks.Refusal(
        "instance_norm",
        "no-faster-form",
        "InstanceNormalization between the Reshapes is already the fastest form ONNX Runtime's "
        "CPU provider runs (no CPU kernel for GroupNormalization or com.microsoft.GroupNorm); "
        "left as is",
    ),
)
# Bindings whose presence alone refuses the statistics, checked first, in this order.
_STATISTICS_REFUSALS = (
    checks.Refusal(
        "std_plus_epsilon", "epsilon-outside-sqrt", "epsilon is added after Sqrt, not inside it"
    ),
    checks.Refusal("centered_cast", "cast-types", "x - mean is cast inside the statistics"),
)


class GroupNormPass:
    """Fuses the statistics of decomposed group normalisation into `LayerNormalization`."""

    name = "group-norm"
    kind = KIND
    patterns = PATTERNS
    shared_names = ("upcast",)

    def site_key(self, match: Match) -> gs.Node:
        """The mean's ReduceMean (or the InstanceNormalization or GroupNormalization node)
        identifies one group norm."""
        for name in ("instance_norm", "group_normalization"):
            if name in match:
                return match.node(name)
        return match.node("mean")

    def check(self, match: Match, context: Context) -> Site | None:
        """A `Site` if `match` is the statistics of exactly group normalisation; raises `Reject`
        with the reason. None for statistics that are not inside a group norm's structure (layer
        norms, instance norms without a per-channel affine: the layer-norm pass decides those)."""
        if "group_normalization" in match:
            return _group_normalization_site(match, context)
        reshape, result = _grouped_result(match, context)
        regrouped = [user for user in result.outputs if _is(user, "Reshape")]
        if reshape is None or not regrouped or len(regrouped) < len(result.outputs):
            site = _instance_norm_site(match, context)
            if site is None and reshape is not None and regrouped:
                others = [user for user in result.outputs if not _is(user, "Reshape")]
                raise checks.Reject(  # ADV11-02: said so, not left unreported
                    INTERMEDIATE_USED_ELSEWHERE,
                    f"the normalised grouped tensor {result.name!r} is reshaped back but also "
                    f"read by {node_label(others[0])}",
                )
            return site
        return _group_site(match, context, (reshape["ungrouped"], reshape.node("grouped")))


def _grouped_result(match: Match, context: Context) -> tuple[Match | None, gs.Tensor]:
    """The Reshape of x the statistics read (None: they read no Reshape), and their result after
    any constant scale or bias: a group norm when every reader of that result reshapes it back
    (to be checked); when only some do, its normalised grouped tensor escapes."""
    chain = _affine_chain(match.root, context)
    result = chain[-1].outputs[0] if chain else match.root
    return match_first(_RESHAPE, match["x"], context.facts), result


def _group_site(match: Match, context: Context, grouping: tuple[gs.Tensor, gs.Node]) -> Site:
    x, reshape = grouping
    x, shape, (channels, groups, inner, tail) = _grouped_layout(x, reshape, context)
    back = _reshape_back(match.root, x, shape, context)
    if "instance_norm" in match:
        _check_instance_norm(match, context, groups)
    _check_channel_affine(back, context, channels, len(shape))
    checks.refuse_bindings(match, _KEPT_AS_IS)
    if inner is None or tail is None:
        raise checks.Reject("unknown-shape", f"the spatial dims of {list(shape)} are not static")
    io = checks.fused_io(match, context)
    # The group's elements lie along every axis after the group axis ([N, G, C/G, H*W]: two).
    axes = tuple(range(-len(tail), 0))
    kept = (shape[0], groups, *(1,) * len(tail))
    _check_statistics(match, context, 2 + len(tail), axes, inner, kept)
    eps = checks.epsilon(match, context)
    scale = _unit_scale(match, tail, io)
    return fused_sites.fused_site(KIND, match, context, io, axes[0], eps, (scale, None))


def _unit_scale(match: Match, shape, io) -> np.ndarray:
    """The fused node's scale: ones, or minus ones for a `(mean - x) / std` numerator (exact:
    `(mean - x) / std == (x - mean) / std * -1`; the affine after it stays the model's)."""
    sign = -1 if "negated_numerator" in match else 1
    return np.full(shape, sign, io.dtype)


def _group_normalization_site(match: Match, context: Context) -> Site | None:
    """A `GroupNormalization`-18/21 node as Reshape [0, G, L] -> LayerNormalization(axis=-1) ->
    Reshape [0, C, *S] -> Mul(gamma) -> Add(beta): the op's definition (population variance per
    group, epsilon inside the root) with two-pass statistics, where ONNX Runtime's CPU provider
    has no kernel and runs the one-pass function body (slower; NaN where a group's mean is large
    against its spread). C and S static; float32, or float16 for -21 with its float32 stash
    type (the LayerNormalization between Casts, the affine in float16 after the Cast back, where
    the op applies it). -18's per-group scale and bias become per channel
    (`_group_normalization_affine`)."""
    node = match.node("group_normalization")
    found = schema("GroupNormalization", context.facts.opset)
    if found is None or found.since_version not in (18, 21):
        return None
    # num_groups or epsilon taken from a function's caller is read per call: before any read.
    checks.check_attribute_values(node)
    x = match["x"]
    elem_type = context.facts.elem_type(x)
    if elem_type not in _GROUP_NORMALIZATION_TYPES:
        shown = "unknown" if elem_type is None else onnx.TensorProto.DataType.Name(elem_type)
        raise checks.Reject(
            "unsupported-dtype", f"GroupNormalization of {shown} x (float32 and float16 only)"
        )
    if elem_type == onnx.TensorProto.FLOAT16 and found.since_version == 18:
        raise checks.Reject(
            "unsupported-dtype",
            "GroupNormalization-18 computes in float16 (no stash type): no kernel in that order",
        )
    shape = checks.known_shape(x, context)
    if len(shape) < 3 or not all(isinstance(dim, int) for dim in shape[1:]):
        raise checks.Reject("unknown-shape", f"the channel and spatial dims of {list(shape)}")
    attrs = resolved_attributes("GroupNormalization", context.facts.opset, node.attrs)
    if attrs is None or attrs.get("stash_type", 1) != onnx.TensorProto.FLOAT:
        raise checks.Reject("cast-types", "GroupNormalization computes in another stash type")
    channels, groups = shape[1], int(attrs["num_groups"])
    if groups <= 0 or channels % groups:
        raise checks.Reject(
            "groups-do-not-divide", f"{groups} groups do not divide {channels} channels"
        )
    eps = float(attrs.get("epsilon", 1e-5))
    if not (np.isfinite(eps) and eps > 0):
        raise checks.Reject("epsilon-not-positive", f"epsilon is {eps}")
    dtype = _GROUP_NORMALIZATION_TYPES[elem_type]
    affine = _group_normalization_affine(match, context, shape, groups, found.since_version, dtype)
    emission = context.policy.emissions[KIND]
    if emission is None:
        raise checks.Reject("opset-too-low", "no LayerNormalization at this opset")
    inner = int(np.prod(shape[1:])) // groups
    if inner == 0:
        # The kernel needs at least one element per row ("Size of X.shape[axis:] must be at
        # least 1"); the node runs on empty groups.
        raise checks.Reject("empty-normalised-axes", "the groups hold no element")
    # float16 (GroupNormalization-21's stash type float32): the op casts x to float32,
    # normalises in float32, casts the result back and applies the affine in float16.
    widened = elem_type == onnx.TensorProto.FLOAT16
    fused = FusedNode(
        emission.op,
        emission.domain,
        {"axis": -1, "epsilon": eps, "stash_type": onnx.TensorProto.FLOAT},
        (x, np.ones(inner, np.float32)),
        output_cast=onnx.TensorProto.FLOAT16 if widened else None,
        input_cast=onnx.TensorProto.FLOAT if widened else None,
        after_cast=affine,
        grouping=((0, groups, inner), (0, *shape[1:])),
    )
    return Site(
        KIND,
        emission.op,
        emission.domain,
        -1,
        eps,
        x.name,
        match.root.name,
        (node_label(node),),
        fused,
        emission.opset,
        emission.ort_only,
        frozenset({id(node)}),
    )


def _group_normalization_affine(
    match: Match, context: Context, shape: tuple, groups: int, version: int, dtype: type
) -> tuple[np.ndarray, np.ndarray]:
    """The node's scale and bias as per-channel constants [C, 1, ...]: GroupNormalization-21's
    are [C]; -18's are per group, [G], and channel c takes group c // (C/G)'s value (repeating
    each value C/G times: the same products and sums in the same order, exact)."""
    channels = shape[1]
    count = channels if version == 21 else groups
    per_channel = (channels, *(1,) * (len(shape) - 2))
    affine = []
    for name in ("gn_scale", "gn_bias"):
        value = context.facts.value(match[name])
        if value is None:
            raise checks.Reject(
                _AFFINE_REASONS[name],
                f"{name[3:]} is not a true constant (a graph input, an overridable initializer "
                "or a computed value): the rewrite needs its values; ONNX Runtime runs the "
                "node's one-pass function body",
            )
        if value.shape != (count,) or value.dtype != dtype:
            shown = f"{list(value.shape)} {value.dtype}"
            raise checks.Reject(
                _AFFINE_REASONS[name],
                f"{name[3:]} of {shown} is not [{count}] {np.dtype(dtype)} "
                f"(GroupNormalization-{version})",
            )
        if version == 18:
            value = np.repeat(value, channels // groups)
        affine.append(value.reshape(per_channel))
    return affine[0], affine[1]


def _instance_norm_site(match: Match, context: Context) -> Site | None:
    """G = C: statistics over the positions of x [N, C, *S] itself, then a per-channel affine
    (which the layer-norm pass refuses, `gamma-shape`). Statistics with no such affine after them
    are the layer-norm pass's."""
    if "instance_norm" in match or "variance_mean" in match:
        return None  # a plain InstanceNormalization node (already fused), or not a group norm
    shape = context.facts.shape(match["x"])
    users = match.root.outputs
    if shape is None or len(shape) < 3 or len(users) != 1 or not _is_affine(users[0], context):
        return None
    rank = len(shape)
    channels = shape[1]
    if not isinstance(channels, int) or _affine_is_layer_norm(users[0], context, shape):
        return None
    axes = tuple(range(2 - rank, 0))
    reducers = [match.node("mean"), match.node("variance_reduce")]
    if any(reduce_axes(node, rank, context.facts) != axes for node in reducers):
        return None  # not instance-norm statistics: the layer-norm pass's
    spatial = checks.normalised_shape(shape, axes)
    io = checks.fused_io(match, context)
    _check_statistics(match, context, rank, axes, int(np.prod(spatial)))
    _check_channel_affine(match.root, context, channels, rank)
    eps = checks.epsilon(match, context)
    scale = _unit_scale(match, spatial, io)
    return fused_sites.fused_site(KIND, match, context, io, 2 - rank, eps, (scale, None))


def _grouped_layout(
    x: gs.Tensor, reshape: gs.Node, context: Context
) -> tuple[gs.Tensor, tuple, tuple[int, int, int | None, tuple[int, ...] | None]]:
    """(x [N, C, *S], its shape, (C, G, C/G * prod(S), the group's dims)) for the tensor the
    grouping Reshape groups. That is the Reshape's input, or, where the input is itself reshaped
    from a tensor (ONNX's group-norm body: [N, C, *S] -> [N, G, C/G, *S] -> [N, G, -1]), the
    first tensor up the chain of Reshapes that the grouped tensor groups. A Reshape moves no
    element, so a chain is one Reshape to the grouped shape; with every dim but the first static
    on both ends and G * rest = C * prod(S), the first dims are equal too (the element counts
    are)."""
    try:
        shape = checks.known_shape(x, context)
        entries = shape_entries(reshape.inputs[1], context.facts)
        zero_copies = not reshape.attrs.get("allowzero", 0)
        return x, shape, _check_grouped_shape(shape, entries, x, zero_copies)
    except checks.Reject as direct:
        grouped = _static_tail(reshape.outputs[0], context)
        source = x
        for _ in range(MAX_WALK):
            producer = source.inputs[0] if len(source.inputs) == 1 else None
            if grouped is None or len(grouped) != 3 or producer is None:
                break
            if not _is(producer, "Reshape"):
                break
            source = producer.inputs[0]
            shape = _static_tail(source, context)
            if shape is None:
                break
            try:
                entries = [0, *grouped[1:]]  # the first dim is N: element counts (see above)
                return source, shape, _check_grouped_shape(shape, entries, source, True)
            except checks.Reject:
                continue
        raise direct from None


def _static_tail(tensor: gs.Tensor, context: Context) -> tuple | None:
    """The shape of `tensor` when every dim but the first is static."""
    shape = context.facts.shape(tensor)
    if shape is None or not shape or not all(isinstance(d, int) for d in shape[1:]):
        return None
    return shape


def _check_grouped_shape(
    shape: tuple,
    target: list[ShapeEntry] | None,
    x: gs.Tensor,
    zero_copies: bool,
) -> tuple[int, int, int | None, tuple[int, ...] | None]:
    """(C, G, C * prod(S) / G, the grouped tensor's dims after the group axis) when `target`
    (the grouped shape, as entries) turns x [N, C, *S] into [N, G, C * prod(S) / G], or into
    [N, G, *T] with static T (one -1 among them at most) of C * prod(S) / G elements (the
    channels-first Keras form [N, G, C/G, H*W]); the last two are None when S is not static
    (the Reshape must then infer the group: [N, G, -1]). A 0 in `target` copies x's dim where
    `zero_copies`."""
    if len(shape) < 3 or target is None or len(target) < 3:
        raise checks.Reject(
            "not-channel-groups", f"Reshape of a rank-{len(shape)} tensor to {target}"
        )
    channels, spatial = shape[1], shape[2:]
    if not isinstance(channels, int):
        raise checks.Reject("unknown-shape", f"the channel dim {channels!r} is not static")
    batch, groups, *rest = target
    batch_kept = batch == (x, 0) or (batch == 0 and zero_copies) or _static(batch, shape[0])
    if not batch_kept or not isinstance(groups, int) or groups <= 0:
        raise checks.Reject("not-channel-groups", f"Reshape to {_show(target)} of {shape}")
    inner = None
    if all(isinstance(dim, int) for dim in spatial):
        # G need not divide C: [N, G, C*S/G] normalised over its last axis is exactly a layer
        # norm of the grouped tensor wherever G divides C*S (the Reshape fails otherwise).
        total = channels * int(np.prod(spatial))
        inner = total // groups if total % groups == 0 else None
    if inner is None and channels % groups:
        raise checks.Reject(
            "groups-do-not-divide", f"{groups} groups do not divide {channels} channels"
        )
    if len(rest) == 1:
        if rest[0] != -1 and (inner is None or rest[0] != inner):
            raise checks.Reject("not-channel-groups", f"Reshape to {_show(target)} of {shape}")
        return channels, groups, inner, None if inner is None else (inner,)
    if inner is None:
        raise checks.Reject("unknown-shape", f"the spatial dims of {list(shape)} are not static")
    written = [dim for dim in rest if isinstance(dim, int) and dim > 0]
    count = int(np.prod(written))
    inferred = len(rest) - len(written)
    if inferred > 1 or any(dim != -1 for dim in rest if dim not in written):
        raise checks.Reject("not-channel-groups", f"Reshape to {_show(target)} of {shape}")
    if inner % count or (not inferred and count != inner):
        raise checks.Reject("not-channel-groups", f"Reshape to {_show(target)} of {shape}")
    return channels, groups, inner, tuple(inner // count if dim == -1 else dim for dim in rest)


def _reshape_back(normed: gs.Tensor, x: gs.Tensor, shape: tuple, context: Context) -> gs.Tensor:
    """The Reshape back to x's shape that must be the only user of the statistics."""
    chain = _affine_chain(normed, context)
    if chain and any(_is(user, "Reshape") for user in chain[-1].outputs[0].outputs):
        raise checks.Reject(
            "per-group-affine",
            "a scale or bias applied per group before the Reshape back, not per channel",
        )
    users = normed.outputs
    if len(users) != 1 or not _is(users[0], "Reshape"):
        raise checks.Reject("reshape-not-restored", "the grouped statistics are not reshaped back")
    back = users[0]
    target = shape_entries(back.inputs[1], context.facts, len(shape))
    if target is not None and len(target) == len(shape):
        grouped_shape = context.facts.shape(normed) or ()
        copies = not back.attrs.get("allowzero", 0)
        kept = [
            _dim_of(entry, x, axis)
            or _static(entry, shape[axis])
            or (entry == 0 and copies and axis < len(grouped_shape) and grouped_shape[axis] == dim)
            for axis, (entry, dim) in enumerate(zip(target, shape, strict=True))
        ]
        # One -1 among entries that restore every other dim is the remaining dim (the element
        # counts are equal): [N, C, -1, W] restores [N, C, H, W].
        inferred = [axis for axis, entry in enumerate(target) if entry == -1 and not kept[axis]]
        if all(ok or axis in inferred[:1] for axis, ok in enumerate(kept)) and len(inferred) <= 1:
            return back.outputs[0]
    raise checks.Reject(
        "reshape-not-restored", f"the Reshape back does not restore x's shape {list(shape)}"
    )


def _dim_of(entry: ShapeEntry, x: gs.Tensor, axis: int) -> bool:
    """Whether `entry` is dim `axis` of `x` or of a tensor of provably the same shape: one that
    `x` and it both derive from through ops keeping their input's shape (`Cast`, `Identity`,
    elementwise unary ops), e.g. `Shape` of the float16 input of diffusers' `Cast(x, f32)`."""
    if not isinstance(entry, tuple) or entry[1] != axis:
        return False
    return entry[0] is x or _shape_root(entry[0]) is _shape_root(x)


def _shape_root(tensor: gs.Tensor) -> gs.Tensor:
    """The first tensor up `tensor`'s producers not computed by a shape-keeping op (output 0 of
    a one-input default-domain op in `SAME_AS_INPUT`)."""
    for _ in range(MAX_WALK):
        node = tensor.inputs[0] if len(tensor.inputs) == 1 else None
        if node is None or node.domain not in DEFAULT_DOMAINS or node.op not in SAME_AS_INPUT:
            break
        if len(node.inputs) != 1 or node.outputs[0] is not tensor:
            break
        tensor = node.inputs[0]
    return tensor


def _static(entry: ShapeEntry, dim: int | str | None) -> bool:
    """A positive static entry equal to the static dim `dim`."""
    return isinstance(entry, int) and entry > 0 and entry == dim


def _show(entries: list[ShapeEntry]) -> list:
    return [e if isinstance(e, int) else f"dim {e[1]} of {e[0].name!r}" for e in entries]


def _check_instance_norm(match: Match, context: Context, groups: int) -> None:
    scale, bias = context.facts.value(match["in_scale"]), context.facts.value(match["in_bias"])
    node = match.node("instance_norm")
    if scale is None or bias is None or scale.shape != (groups,) or bias.shape != (groups,):
        raise checks.Reject("per-group-affine", "InstanceNormalization scale/bias not [G]")
    if not (np.all(scale == 1) and np.all(bias == 0)):
        raise checks.Reject(
            "per-group-affine", "InstanceNormalization applies a per-group scale or bias"
        )
    epsilon = node.attrs.get("epsilon", 1e-5)
    if not epsilon > 0:
        raise checks.Reject("epsilon-not-positive", f"epsilon is {epsilon}")


def _check_statistics(
    match: Match,
    context: Context,
    rank: int,
    axes: tuple[int, ...],
    count: int,
    kept_shape: tuple | None = None,
) -> None:
    """The layer-norm statistics of `match` reduce exactly `axes` with divisor `count`; a variance
    reduced without keepdims must be reshaped to `kept_shape` (the shape with keepdims)."""
    checks.refuse_bindings(match, _STATISTICS_REFUSALS)
    reducers = [match.node("mean"), match.node("variance_reduce")]
    if "variance_mean" in match:
        reducers[1] = match.node("variance_mean")
        _check_reshaped_variance(match, context, rank, kept_shape)
    found = checks.reduction_axes(reducers, rank, context)
    if found != axes:
        raise checks.Reject(
            "group-statistics-axes", f"statistics over axes {found}, not {axes} of the groups"
        )
    checks.check_divisor(match, context, count)


def _check_reshaped_variance(
    match: Match, context: Context, rank: int, kept_shape: tuple | None
) -> None:
    """The variance reduces the axes its mean does, and its Reshape restores the reduced axis."""
    reduce, mean = match.node("variance_reduce"), match.node("variance_mean")
    if reduce_axes(reduce, rank, context.facts) != reduce_axes(mean, rank, context.facts):
        raise checks.Reject("mismatched-axes", "the variance reduces other axes than its mean")
    target = context.facts.value(match["variance_shape"])
    if target is None or kept_shape is None or tuple(target.reshape(-1).tolist()) != kept_shape:
        raise checks.Reject(
            "reshape-not-restored", f"the variance is reshaped to {target}, not {kept_shape}"
        )


def _is(node: gs.Node, op: str) -> bool:
    return node.op == op and node.domain in DEFAULT_DOMAINS


def _is_affine(node: gs.Node, context: Context) -> bool:
    """A Mul or Add with one constant operand."""
    return (
        (_is(node, "Mul") or _is(node, "Add"))
        and len(node.inputs) == 2
        and sum(context.facts.is_constant(tensor) for tensor in node.inputs) == 1
    )


def _constant_operand(node: gs.Node, context: Context) -> np.ndarray | None:
    constant = next(t for t in node.inputs if context.facts.is_constant(t))
    return context.facts.value(constant)


def _affine_chain(start: gs.Tensor, context: Context) -> list[gs.Node]:
    """The Mul (scale) and then Add (bias) with constant operands that follow `start`."""
    chain, tensor = [], start
    for op in ("Mul", "Add"):
        users = tensor.outputs
        if len(users) == 1 and _is(users[0], op) and _is_affine(users[0], context):
            chain.append(users[0])
            tensor = users[0].outputs[0]
    return chain


def _check_channel_affine(start: gs.Tensor, context: Context, channels: int, rank: int) -> None:
    """The scale and bias after `start` (each optional) vary along the channel axis only."""
    for node in _affine_chain(start, context):
        value = _constant_operand(node, context)
        name = "scale" if node.op == "Mul" else "bias"
        if value is None or not _per_channel(value, channels, rank):
            reason = "gamma-shape" if name == "scale" else "beta-shape"
            shape = None if value is None else value.shape
            raise checks.Reject(reason, f"{name} of shape {shape} is not per channel")


def _per_channel(value: np.ndarray, channels: int, rank: int) -> bool:
    """`value` broadcasts against [N, C, *S] along the channel axis only ([C, 1, 1] for NCHW)."""
    if value.ndim > rank:
        return False
    full = (1,) * (rank - value.ndim) + value.shape
    return full[1] in (1, channels) and all(dim == 1 for axis, dim in enumerate(full) if axis != 1)


def _affine_is_layer_norm(node: gs.Node, context: Context, shape: tuple) -> bool:
    """True when the constant after the statistics varies only along the normalised positions
    (or is a scalar): a layer norm's affine, which the layer-norm pass fuses."""
    value = _constant_operand(node, context)
    if value is None:
        return False
    rank = len(shape)
    spatial = tuple(shape[2:])
    if not all(isinstance(dim, int) for dim in spatial):
        return False
    return checks.affine_parameter(value, spatial, rank) is not None
