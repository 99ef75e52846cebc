"""The allow-list of operators whose shape inference ONNX Runtime agrees with.

onnx's shape inference and ONNX Runtime disagree on some operators (`MaxPool`/`AveragePool` with
`ceil_mode=1`: onnx says 4 where ONNX Runtime computes 3; `ConvTranspose` with `SAME_*` and
`output_padding`). A dim inferred through an operator that is not listed here is not trusted.
Each entry is checked by tests/test_ort_shape_agreement.py, which builds tiny models over the
operator's attribute space and compares onnx's inferred output shapes (with data propagation)
with the shapes ONNX Runtime produces; an operator enters this list only with such a sweep.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx

# Constant values by name, as far as they are known (small initializers, `Constant` nodes).
Values = dict[str, np.ndarray]


def _ops(names: str) -> frozenset[str]:
    return frozenset(names.split())


# Every dim of every output is trusted.
FULL = 1 << 30

# Output shape equals the first input's (the others are parameters): a partly trusted input
# gives a partly trusted output, dim for dim.
SAME_SHAPE = _ops(
    "Identity Cast Neg Abs Sqrt Reciprocal Exp Log Tanh Erf Sigmoid Relu LeakyRelu Elu Selu "
    "Softplus Softsign HardSigmoid HardSwish Gelu Floor Ceil Round Sign Not Sin Cos IsNaN "
    "IsInf Clip Softmax LogSoftmax Dropout"
)
BROADCAST = _ops(
    "Add Sub Mul Div Pow Max Min Sum Mean Equal Less Greater LessOrEqual GreaterOrEqual And "
    "Or Xor Where Mod CastLike"
)
SHAPE_OPS = _ops(
    "Constant Shape Size Reshape Transpose Unsqueeze Squeeze Concat Gather GatherElements GatherND "
    "Slice Flatten Expand Tile ConstantOfShape Range Split SpaceToDepth DepthToSpace"
)
REDUCE = _ops("ReduceMean ReduceSum ReduceMax ReduceMin ReduceProd ReduceSumSquare ReduceL2")
OTHER = _ops(
    "MatMul Gemm LayerNormalization InstanceNormalization BatchNormalization "
    "GlobalAveragePool GlobalMaxPool Pad"
)


def _full(_node: onnx.NodeProto) -> int:
    return FULL


def _attribute(node: onnx.NodeProto, name: str, default: object) -> object:
    for attribute in node.attribute:
        if attribute.name == name:
            return onnx.helper.get_attribute_value(attribute)
    return default


def _pool(node: onnx.NodeProto) -> int:
    """`ceil_mode=1`: onnx and ONNX Runtime round the last window differently; `auto_pad=SAME_*`
    with a dilation: onnx sizes the output as if undilated (ADV3-14). Batch and channel dims
    still agree."""
    if _attribute(node, "ceil_mode", 0) != 0:
        return 2
    same = _attribute(node, "auto_pad", b"NOTSET") in (b"SAME_UPPER", b"SAME_LOWER")
    if same and any(d != 1 for d in _attribute(node, "dilations", [])):
        return 2
    return FULL


def _conv_transpose(node: onnx.NodeProto) -> int:
    """`SAME_*` with `output_padding`: onnx adds the padding to a total size ONNX Runtime
    already reached (11 vs 10); `output_shape`: not swept. Batch and output channels agree."""
    auto_pad = _attribute(node, "auto_pad", b"NOTSET")
    padded = any(_attribute(node, "output_padding", []))
    if (auto_pad in (b"SAME_UPPER", b"SAME_LOWER") and padded) or _attribute(
        node, "output_shape", None
    ):
        return 2
    return FULL


def _resize(node: onnx.NodeProto, values: Values) -> int:
    """Output dims from `sizes`, or from `scales` (floor(dim * scale)): onnx multiplies in
    float64, ONNX Runtime in float32, so a product that is whole in one and not the other
    (10 * 0.7, 100 * 0.29) gives dims one apart: only integral scales are trusted, and the
    leading dims a fractional or unknown scale leaves at 1 (batch, channels). Swept over modes,
    coordinate transformations and scales; `tf_crop_and_resize` (sized by its roi), a
    `keep_aspect_ratio_policy` other than stretch (rounds a shared scale) and an `axes`
    attribute are not swept: the rank, batch and channels only."""
    cropped = _attribute(node, "coordinate_transformation_mode", b"") == b"tf_crop_and_resize"
    stretched = _attribute(node, "keep_aspect_ratio_policy", b"stretch") == b"stretch"
    if cropped or not stretched or _attribute(node, "axes", None) is not None:
        return 2
    if len(node.input) > 3 and node.input[3]:
        return FULL  # sizes
    scales = values.get(node.input[2]) if len(node.input) > 2 else None
    if scales is None:
        return 2
    scales = np.asarray(scales, np.float64).reshape(-1)
    if np.all(scales == np.round(scales)):
        return FULL
    leading = 0
    while leading < scales.size and scales[leading] == 1:
        leading += 1
    return leading


RULES: dict[str, Callable[[onnx.NodeProto], int]] = {
    **{op: _full for op in SAME_SHAPE | BROADCAST | SHAPE_OPS | REDUCE | OTHER},
    "MaxPool": _pool,
    "AveragePool": _pool,
    # Its output length is onnx's rule where ORT may round otherwise (`ceil_mode`, like the pools
    # above), not swept per configuration: the rank, batch and channels only (ADV3-15).
    "LpPool": lambda node: 2,
    "Conv": _full,
    "ConvTranspose": _conv_transpose,
}


def trusted_dims(node: onnx.NodeProto, values: Values | None = None) -> int | None:
    """How many leading dims of each output of `node` ONNX Runtime agrees with, given inputs it
    agrees with (`FULL`: all; a number: the rank and that many dims); None: not even the rank
    (an operator not on the allow-list, another domain, or an attribute referenced from a
    function's caller). `values`: the scope's constants by name (a Resize's scales)."""
    if node.domain not in ("", "ai.onnx"):
        return None
    if any(attribute.ref_attr_name for attribute in node.attribute):
        return None
    if node.op_type == "Resize":
        return _resize(node, values or {})
    rule = RULES.get(node.op_type)
    return None if rule is None else rule(node)


# Ops whose output rank is the length of a shape or axes input (all but the first): their rank
# is trusted only where that input's shape is.
RANK_FROM_LENGTH = _ops(
    "Reshape Expand ConstantOfShape Unsqueeze Squeeze ReduceMean ReduceSum ReduceMax ReduceMin "
    "ReduceProd ReduceSumSquare ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp"
)
# Ops whose output rank depends on run-time dims, not only on ranks and attributes.
RANK_FROM_VALUES = _ops("Squeeze NonZero Compress Loop Scan If Unique")


def rank_follows(node: onnx.NodeProto) -> bool:
    """Whether ONNX Runtime's output ranks of `node` are what onnx infers once its inputs'
    ranks are (swept on the zoo: tests/test_ort_shape_agreement.py): every standard op but
    those whose rank depends on values (`RANK_FROM_VALUES`; Squeeze with an `axes` attribute
    or input is fine), with no attribute referenced from a function's caller."""
    if node.domain not in ("", "ai.onnx"):
        return False
    if any(attribute.ref_attr_name for attribute in node.attribute):
        return False
    if node.op_type == "Squeeze":
        return len(node.input) > 1 or any(a.name == "axes" for a in node.attribute)
    return node.op_type not in RANK_FROM_VALUES
