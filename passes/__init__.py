"""The fusion passes, one module per pattern family, in the order the driver runs them."""

from __future__ import annotations

from normfuse.passes.layer_norm import LayerNormPass
from normfuse.passes.rms_norm import RmsNormPass

# Layer norm first: a bias-free layer norm must not become Sub + RMS norm.
ALL_PASSES = (LayerNormPass(), RmsNormPass())
PASS_NAMES = tuple(fusion_pass.name for fusion_pass in ALL_PASSES)


def select(names: str | list[str] | tuple[str, ...] | None):
    """The passes named in `names` (comma-separated or a list), in driver order; all when None."""
    if names is None:
        return ALL_PASSES
    if isinstance(names, str):
        names = [name.strip() for name in names.split(",") if name.strip()]
    unknown = sorted(set(names) - set(PASS_NAMES))
    if unknown:
        raise ValueError(
            f"unknown pass {', '.join(unknown)}; known passes: {', '.join(PASS_NAMES)}"
        )
    return tuple(fusion_pass for fusion_pass in ALL_PASSES if fusion_pass.name in names)
