"""Which float16 values ONNX Runtime's CPU provider keeps in float32: the ops it has float16
kernels for (read from its kernel registry), and the ops that only move values. A float16 norm
fused as the float32 kernel between Casts lifts its input Cast over such moves
(`norm_checks.float16_input_moves`)."""

from __future__ import annotations

import functools

import onnx_graphsurgeon as gs

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


def runs_in_float32(node: gs.Node) -> bool:
    """Whether ONNX Runtime's CPU provider has no float16 kernel for `node`'s op (so it runs it
    in float32 in a float16 model); True where its kernel registry cannot be read."""
    if node.op == "Constant":
        return False
    ops = cpu_float16_ops()
    return ops is None or node.op not in ops


@functools.cache
def cpu_float16_ops() -> frozenset[str] | None:
    """The ops ONNX Runtime's CPU provider has a kernel for with a float16 type (any domain),
    read from its kernel registry; None where this onnxruntime does not expose it."""
    try:
        from onnxruntime.capi import _pybind_state

        kernels = _pybind_state.get_all_opkernel_def()
    except (ImportError, AttributeError):
        return None
    return frozenset(
        kernel.op_name
        for kernel in kernels
        if kernel.provider == "CPUExecutionProvider"
        and any("tensor(float16)" in types for types in kernel.type_constraints.values())
    )
