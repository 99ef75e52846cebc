"""The ops that only move values. A float16 norm fused as the float32 kernel between Casts lifts
its input Cast over such moves where ONNX Runtime reads them unrounded
(`fused_sites.float16_input_moves`, `float16_partition`)."""

from __future__ import annotations

# Ops that only move values; ONNX Runtime's CPU provider has float16 kernels for them.
MOVERS = frozenset(
    {
        "Concat", "DepthToSpace", "Expand", "Flatten", "Gather", "GatherElements", "Identity",
        "Pad", "Reshape", "Slice", "SpaceToDepth", "Split", "Squeeze", "Tile", "Transpose",
        "Unsqueeze",
    }
)  # fmt: skip


# Of those, the ones whose only float16 input is their first (the data): the fused node's input
# Cast can be taken above them, and copies of them then move the float32 values.
LIFTABLE = MOVERS - {"Concat", "Pad", "Split"}
