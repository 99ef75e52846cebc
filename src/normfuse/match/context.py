"""What a check may consult (`Context`): the scope's facts (`facts.ScopeFacts`: constants,
derived types, conflicts) and, apart from them, the driver's policy for the scope (`Policy`: the
target and its emissions, the exclusions, the `--tune-for` form timer, blocked opsets, the
providers the output is for).

Its own module so that the modules checks use (the final check, the passes) need not import the
driver to name it. The form timer is seen only through `SkipFormChooser`, the two things a check
asks of it, so this module imports nothing above the facts and the targets."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from normfuse.facts.constants import Constants
from normfuse.facts.facts import ScopeFacts
from normfuse.target.targets import Emission, Target


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
        reader: Constants | None = None,
    ) -> SkipChoice:
        """Whether the `Skip*` form beats `Add` + norm for a site of `shape`."""


@dataclass(frozen=True)
class Policy:
    """What the driver decides for one scope, beyond the facts: the target and the op each
    family emits there, the exclusions, the `--tune-for` form timer, the blocked opsets, the
    providers the output is for."""

    target: Target
    emissions: dict[str, Emission | None]
    # Site outputs to leave decomposed (failed validation, measured slower): output ->
    # (reason, detail) of the near-miss reported instead.
    excluded: dict[str, tuple[str, str]] = field(default_factory=dict)
    # Times equivalent fused forms at each site's shape (optimize --tune-for); None: not asked.
    form_chooser: SkipFormChooser | None = None
    # Opsets the model may not be raised to -> why (the near-miss of a site that needs one).
    opset_blockers: dict[int, str] = field(default_factory=dict)
    # The execution providers the output is for (short names), as asked, never as installed:
    # a fused op with a known kernel hazard on one of them is refused (`kernel_hazards`).
    providers: tuple[str, ...] = ("cpu",)


@dataclass(frozen=True)
class Context:
    """What a check may consult: the scope's facts, and the driver's policy for it."""

    facts: ScopeFacts
    policy: Policy
