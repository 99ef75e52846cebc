"""Residual fusion (ONNX Runtime only): `Add(input, skip)` feeding a fused norm becomes ONNX
Runtime's `SkipLayerNormalization` / `SkipSimplifiedLayerNormalization` (`com.microsoft`)::

    input, skip ──> Add ──> sum ──> LayerNormalization(scale[, bias]) ──> y
        =>  input, skip ──> SkipLayerNormalization(scale[, bias]) ──> y  [, sum]

When `sum` is also used downstream (the pre-norm residual stream), it becomes the op's fourth
output. Exact or absent, after ONNX Runtime's kernels (contrib_ops/cpu/skip_layer_norm.cc,
contrib_ops/cuda/bert/skip_layer_norm_impl.cu; docs/residual-fusion.md):

- The op's own bias input is never used: the CPU kernel sums `(input + skip) + bias`, the CUDA
  kernel `(input + bias) + skip`, and float addition does not associate, so no folded bias is
  the model's sum on both. A bias added to an operand first, `(a + b) + s`, keeps its Add (its
  output is the op's input); one added after the residual sum is `skip-bias-order`.
- The kernel returns `input`'s shape and reads `skip` by offset, so input and skip must be
  proved the same shape (`normfuse.facts.same_shape`, symbolic dims included), of rank 2 or 3 (the
  kernel's contract).
- float32 only: for float16 the CPU kernel adds input and skip in float32 where the model rounds
  the sum to float16 (`skip-float16-sum`); ONNX Runtime has no `Skip*` kernel for float64. Where
  CUDA is a provider the output is for, a float16 site is refused first by the table of known
  kernel hazards (`kernel_hazards.RULES`: the CUDA kernels sum the squares in float16).

Runs after the layer-norm and RMS-norm passes, on their output and on norms exporters wrote
themselves. Only for `--target ort`, and not by default: ONNX Runtime's CPU `Skip*` kernels
were measured slower than `Add` + norm, and on rows with a large offset further from a float64
evaluation, so the form is either asked for by name (`--passes ...,skip-norm`) or chosen per
site by timing and accuracy (`optimize --tune-for`).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from normfuse.facts.same_shape import format_shape, same_shape
from normfuse.match import norm_checks as checks
from normfuse.match.context import Context
from normfuse.match.kernel_hazards import refuse_hazards
from normfuse.match.pattern import Const, Match, Op, Var
from normfuse.match.records import FormQuestion, FusedNode, Site, node_label
from normfuse.target.targets import Target

KIND = "skip-norm"
MS_DOMAIN = "com.microsoft"
SKIP_OPS = {
    "LayerNormalization": "SkipLayerNormalization",
    "SimplifiedLayerNormalization": "SkipSimplifiedLayerNormalization",
    # Standard RMS normalisation (opset 23): the same statistics over the axes from `axis`.
    "RMSNormalization": "SkipSimplifiedLayerNormalization",
}

# Measured (ORT 1.32 CPU, rows of 1000 + 1e-3·N(0,1)): SkipLayerNormalization's statistics differ
# from Add + LayerNormalization's by up to 0.027 and are 3-8x further from a float64 evaluation
# (docs/residual-fusion.md, adversary 3's ADV3-05). The RMS form has no mean to cancel and agrees.
_LESS_ACCURATE = (
    "ONNX Runtime's SkipLayerNormalization computes the statistics less accurately than Add + "
    "LayerNormalization (up to 0.027 apart on rows of 1000 + 1e-3·N(0,1)); kept Add + "
    "LayerNormalization"
)
_sum = Op("Add", Var("input"), Var("skip"), name="sum")
# A bias added after the residual sum: matched to say why it is left (`skip-bias-order`). A bias
# added to an operand first, (input + b) + skip, needs no pattern: that Add is the op's input.
_sum_biased = Op(
    "Add", Op("Add", Var("input"), Var("skip"), name="residual"), Const("skip_bias"), name="sum"
)
# A Cast to the sum's own type (T5's `.to(float32)` on a float32 stream) is the identity: it goes.
PATTERNS = tuple(
    pattern
    for added in (_sum_biased, _sum)
    for summed in (added, Op("Cast", added, name="cast"))
    for pattern in (
        Op("LayerNormalization", summed, Var("scale"), Var("bias"), name="y"),
        Op("LayerNormalization", summed, Var("scale"), name="y"),
        Op("SimplifiedLayerNormalization", summed, Var("scale"), name="y"),
        Op("RMSNormalization", summed, Var("scale"), name="y"),
    )
)


class SkipNormPass:
    """Fuses a residual `Add` into the norm after it, where that form is wanted."""

    name = "skip-norm"
    kind = KIND
    patterns = PATTERNS
    shared_names = ("sum", "cast")

    def site_key(self, match: Match) -> gs.Node:
        """The norm node identifies the site."""
        return match.node("y")

    def check(self, match: Match, context: Context) -> Site | None:
        """A `Site` when the residual form applies and is wanted; raises `Reject` otherwise."""
        return _check(match, context)


# Bindings whose presence alone refuses the site, checked once the Add is a residual sum.
_REFUSALS = (
    checks.Refusal(
        "skip_bias",
        "skip-bias-order",
        "a bias added after the residual sum: ONNX Runtime's CPU kernel adds "
        "(input + skip) + bias, its CUDA kernel (input + bias) + skip; folded, the sum "
        "would be the model's on one provider only",
    ),
)


def _check(match: Match, context: Context) -> Site:
    if context.policy.target is not Target.ORT:
        raise checks.Reject("ort-only-form", "Skip* ops exist only in ONNX Runtime (--target ort)")
    norm = match.node("y")
    first, second = match["input"], match["skip"]
    if context.facts.is_constant(first) or context.facts.is_constant(second):
        raise checks.Reject("not-residual", "one operand of the Add is a constant (a bias)")
    checks.refuse_bindings(match, _REFUSALS)
    shape = _residual_shape(first, second, context)
    rank = len(shape)
    if "cast" in match and match.node("cast").attrs.get("to") != context.facts.elem_type(first):
        raise checks.Reject("skip-cast", "the residual sum is cast to another type before the norm")
    if norm.attrs.get("axis", -1) not in (-1, rank - 1) or norm.attrs.get("stash_type", 1) != 1:
        raise checks.Reject("skip-axis", "Skip* ops normalise the last axis in float32 only")
    elem_type = context.facts.elem_type(first)
    refuse_hazards(context.policy.providers, SKIP_OPS[norm.op], elem_type)
    if elem_type == onnx.TensorProto.FLOAT16:
        raise checks.Reject(
            "skip-float16-sum",
            "ONNX Runtime's Skip* kernels add input and skip in float32; the model rounds the "
            "sum to float16 before the norm, so the fused op would normalise another value",
        )
    if elem_type != onnx.TensorProto.FLOAT:
        name = "unknown" if elem_type is None else onnx.TensorProto.DataType.Name(elem_type)
        raise checks.Reject(
            "unsupported-dtype", f"ONNX Runtime has no exact Skip* kernel for {name.lower()}"
        )
    hidden = shape[-1]
    if not isinstance(hidden, int):
        raise checks.Reject(
            "skip-shape", f"the normalised axis of {format_shape(shape)} has no static size"
        )
    if norm.op == "LayerNormalization":
        raise checks.Reject("skip-less-accurate", _LESS_ACCURATE)
    if _given(match, "scale"):  # only an RMS norm gets here: no bias
        _gamma(match, context, hidden, rank=rank)
    family = "layer-norm" if norm.op == "LayerNormalization" else "rms-norm"
    tensors = (match["sum"], first, second)  # all of the proved shape
    question = FormQuestion(family, shape, elem_type, False, tensors, norm.op)
    return _site(match, norm, context, hidden, question)


def _residual_shape(first: gs.Tensor, second: gs.Tensor, context: Context) -> tuple:
    """The one shape input and skip are proved to have, of a rank the kernel takes."""
    shapes = [context.facts.shape(first), context.facts.shape(second)]
    if not same_shape(first, second, context.facts.types, context.facts):
        raise checks.Reject(
            "skip-shape",
            f"input {format_shape(shapes[0])} and skip {format_shape(shapes[1])} are not "
            "proved to have one shape; the Skip* op returns input's shape and never broadcasts",
        )
    shape = shapes[0]
    if shape is None or len(shape) not in (2, 3):
        raise checks.Reject(
            "skip-rank",
            f"input and skip {format_shape(shape)}: Skip* kernels take rank 2 or 3 only",
        )
    return shape


def _given(match: Match, name: str) -> bool:
    """`name` is bound to a present input (an empty input name means the input is omitted)."""
    return name in match and bool(match[name].name)


def _gamma(
    match: Match, context: Context, hidden: int, dtype=None, rank: int | None = None
) -> np.ndarray | gs.Tensor:
    """The kernel's contract: gamma is 1-D, one value per feature. A constant shaped
    [1, ..., 1, hidden] of at most the input's `rank` where given (the op's output has the
    input's rank) is that vector (as `dtype`); a tensor computed or fed at run time must be
    declared 1-D [hidden] of x's type (ONNX Runtime enforces static input dims), and is passed
    as it is; anything else stays."""
    tensor = match["scale"]
    if not context.facts.is_constant(tensor):
        shape, elem_type = context.facts.shape(tensor), context.facts.elem_type(tensor)
        if shape != (hidden,) or elem_type != context.facts.elem_type(match["input"]):
            raise checks.Reject(
                "gamma-shape",
                f"scale of shape {format_shape(shape)}: Skip* ops need 1-D [{hidden}] of x's type",
            )
        return tensor
    value = context.facts.value(tensor)
    if value is None or value.size != hidden or any(dim != 1 for dim in value.shape[:-1]):
        shape = None if value is None else tuple(value.shape)
        raise checks.Reject(
            "gamma-shape", f"scale of shape {format_shape(shape)}: Skip* ops need 1-D [{hidden}]"
        )
    if rank is not None and value.ndim > rank:
        raise checks.Reject(
            "gamma-shape",
            f"scale of shape {format_shape(tuple(value.shape))} has a higher rank than the "
            f"rank-{rank} input; the Skip* op returns rank {rank}",
        )
    value = value.reshape(-1)
    return value if dtype is None else value.astype(dtype)


def _site(
    match: Match, norm: gs.Node, context: Context, hidden: int, question: FormQuestion
) -> Site:
    dtype = checks.FLOAT_TYPES[context.facts.elem_type(match["input"])]
    gamma = _gamma(match, context, hidden, dtype)
    inputs = (match["input"], match["skip"], gamma)
    extra = ((3, match["sum"]),)  # kept by the driver only where the sum is used downstream
    epsilon = float(norm.attrs.get("epsilon", 1e-5))
    op = SKIP_OPS[norm.op]
    fused = FusedNode(op, MS_DOMAIN, {"epsilon": epsilon}, inputs, extra_outputs=extra)
    removed = tuple(node_label(node) for node in match.nodes)
    return Site(
        KIND,
        op,
        MS_DOMAIN,
        -1,
        epsilon,
        match["input"].name,
        match.root.name,
        removed,
        fused,
        0,
        ort_only=True,
        node_ids=frozenset(id(node) for node in match.nodes),
        form_question=question,
    )
