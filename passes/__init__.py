"""The fusion passes, one module per pattern family, in the order the driver runs them."""

from __future__ import annotations

from normfuse.passes.group_norm import GroupNormPass
from normfuse.passes.layer_norm import LayerNormPass
from normfuse.passes.rms_norm import RmsNormPass
from normfuse.passes.skip_norm import SkipNormPass

from normfuse.match.pass_names import DEFAULT_PASS_NAMES, PASS_NAMES

# Group norm first: its statistics are a layer norm's, which the layer-norm pass refuses inside a
# group norm (`group-norm`). Layer norm before RMS norm: a bias-free layer norm must not become
# Sub + RMS norm. Residual fusion last, on the fused norms.
ALL_PASSES = (GroupNormPass(), LayerNormPass(), RmsNormPass(), SkipNormPass())
__all__ = ["ALL_PASSES", "DEFAULT_PASS_NAMES", "PASS_NAMES", "select"]


def select(names: str | list[str] | tuple[str, ...] | None):
    """The passes named in `names` (comma-separated or a list), in driver order; the default ones
    when None."""
    if names is None:
        names = DEFAULT_PASS_NAMES
    if isinstance(names, str):
        names = [name.strip() for name in names.split(",") if name.strip()]
    unknown = sorted(set(names) - set(PASS_NAMES))
    if unknown:
        raise ValueError(
            f"unknown pass {', '.join(unknown)}; known passes: {', '.join(PASS_NAMES)}"
        )
    return tuple(fusion_pass for fusion_pass in ALL_PASSES if fusion_pass.name in names)
