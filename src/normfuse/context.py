"""What a check may consult (`Context`): the scope's constant reader, derived tensor types and
their conflicts, the target and its emissions, the exclusions, and the `--tune-for` form timer.

Its own module so that the modules checks use (shapes, static values, the final check) need not
import the driver to name it. The form timer is seen only through `SkipFormChooser`, the two
things a check asks of it, so this module imports nothing above the constant reader and the
targets."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from normfuse.constants import ConstantReader
from normfuse.targets import Emission, Target


class SkipChoice(Protocol):
    """A timed decision between a `Skip*` op and `Add` + norm (`forms.FormChoice`)."""

    use_skip: bool

    def reason(self) -> str:
        """The near-miss reason code when the `Skip*` form was not chosen."""

    def detail(self, skip_op: str, norm_op: str) -> str:
        """The near-miss text when the `Skip*` form was not chosen."""


class SkipFormChooser(Protocol):
    """What the driver and checks ask of `forms.FormChooser`: its provider (checks), and the
    `Skip*` decision (the driver, after the checks: `rewrite._timed_form`)."""

    provider: str

    def choose(
        self,
        family: str,
        shape: tuple,
        elem_type: int,
        bias: bool,
        tensors: tuple = (),
        reader: ConstantReader | None = None,
    ) -> SkipChoice:
        """Whether the `Skip*` form beats `Add` + norm for a site of `shape`."""


@dataclass(frozen=True)
class Context:
    """What a check may consult: constants, inferred tensor types and shapes, the target."""

    reader: ConstantReader
    types: dict[str, tuple[int, tuple[int | str | None, ...] | None]]
    target: Target
    emissions: dict[str, Emission | None]
    # Site outputs to leave decomposed (failed validation, measured slower): output ->
    # (reason, detail) of the near-miss reported instead.
    excluded: dict[str, tuple[str, str]] = field(default_factory=dict)
    # Times equivalent fused forms at each site's shape (optimize --tune-for); None: not asked.
    form_chooser: SkipFormChooser | None = None
    # Tensors whose declared type contradicts the derived one: sites touching them are left.
    conflicts: frozenset[str] = frozenset()
    # Opsets the model may not be raised to -> why (the near-miss of a site that needs one).
    opset_blockers: dict[int, str] = field(default_factory=dict)

    def shape(self, tensor: gs.Tensor) -> tuple[int | str | None, ...] | None:
        """The shape of `tensor` (ints for static dims) when known."""
        if isinstance(tensor, gs.Constant):
            return tuple(tensor.shape)
        known = self.types.get(tensor.name)
        return None if known is None else known[1]

    def elem_type(self, tensor: gs.Tensor) -> int | None:
        """The ONNX element type of `tensor` when known."""
        if isinstance(tensor, gs.Constant):
            return onnx.helper.np_dtype_to_tensor_dtype(np.dtype(tensor.dtype))
        known = self.types.get(tensor.name)
        return None if known is None else known[0]
