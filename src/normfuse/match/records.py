"""The records a pass and the driver exchange: `Site` (fuse this), `NearMiss` (why not),
`FusedNode` (what replaces a site), `FormQuestion` (a form only a timing can choose) and
`Reject` (a check's refusal). A leaf module: it imports
nothing of normfuse, so passes, checks, the final check and the guard can all use it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx_graphsurgeon as gs

INTERMEDIATE_USED_ELSEWHERE = "intermediate-used-elsewhere"


class Reject(Exception):
    """Raised by a pass's check: the match is not the family's function. `reason` is a stable
    kebab-case code; the driver reports it as a `NearMiss` at the site's key node."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class FormQuestion:
    """A site whose fused form is exact but may be slower than the decomposed one (a residual
    Add folded into a Skip* op): with `--tune-for` the driver times both forms after every check
    has passed, and keeps the site only if the fused form wins. Checks never time anything."""

    family: str  # "layer-norm" or "rms-norm": the norm the Skip* op replaces
    shape: tuple  # the proved shape of the residual sum (dims may be symbolic)
    elem_type: int
    bias: bool
    tensors: tuple[gs.Tensor, ...]  # tensors of that shape (sum, input, skip), for the dims
    replaced_op: str  # the norm op the Skip* op replaces, for the decision's detail


@dataclass(frozen=True)
class FusedNode:
    """The node that replaces a site: inputs are graph tensors, new constants, or None (absent);
    with `output_cast`, a Cast to that element type follows it and produces the site's output."""

    op: str
    domain: str
    attrs: dict
    inputs: tuple[gs.Tensor | np.ndarray | None, ...]
    output_cast: int | None = None
    # (output index, tensor): existing tensors the fused node also produces (a Skip op's sum),
    # where something outside the site still uses them.
    extra_outputs: tuple[tuple[int, gs.Tensor], ...] = ()
    # (perm before, perm after): Transposes around the node (channel-first layer norm).
    layout: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    # With `input_cast`, the first input is cast to that element type first (a float16 norm
    # computed by the float32 kernel: see `norm_checks.widened_float16`).
    input_cast: int | None = None
    # With `input_cast`: value-moving nodes (Reshape, Transpose, ...; top first) between the
    # first input's computing op and it. The Cast reads their first input instead, and copies of
    # them move the cast values (see `fused_sites.float16_input_moves`).
    input_moves: tuple[gs.Node, ...] = ()
    moved_input: gs.Tensor | None = None  # the first move's input (kept: cleanup detaches it)
    # With `input_cast` and `output_cast` (and nothing else after the node): the value-moving
    # nodes that alone read the result, one after another (set by the driver). Copies of them
    # move the float32 result and the output Cast produces their last output instead.
    output_moves: tuple[gs.Node, ...] = ()
    moved_output: gs.Tensor | None = None  # the last move's output (kept: emitting detaches it)
    # (scale, bias), either None: a Mul and then an Add after `output_cast`, where the original
    # applies its affine after casting the statistics' result back.
    after_cast: tuple[np.ndarray | None, np.ndarray | None] = (None, None)
    # (grouped shape, shape back): a Reshape of the first input before the node and one of its
    # output after it (inside the `after_cast` affine): a GroupNormalization node rewritten.
    grouping: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    # A Mul right after the node, before `output_cast`, in the kernel's type: the model's own scale
    # where it varies along axes that are not normalised too (Cohere's QK-norm weight [H, Dh]);
    # the node then normalises with a unit scale.
    scale_after: np.ndarray | None = None


@dataclass(frozen=True)
class Site:
    """One subgraph that will be (or was) fused."""

    kind: str
    op: str
    domain: str
    axis: int
    epsilon: float
    input: str
    output: str
    removed_nodes: tuple[str, ...]  # names, or `Op->output` for unnamed nodes
    fused: FusedNode = field(repr=False, compare=False)
    opset: int = 0
    ort_only: bool = False
    # Identities of the matched nodes (names may be empty or repeated): for overlap decisions.
    node_ids: frozenset[int] = field(default=frozenset(), repr=False, compare=False)
    # The matched output tensor itself (set by the driver): rewired by identity, never by name.
    root: gs.Tensor | None = field(default=None, repr=False, compare=False)
    # (domain, name) of the model-local function whose body holds the site; None: the main
    # graph or a body nested in it (set by the driver).
    function: tuple[str, str] | None = field(default=None, repr=False, compare=False)
    # Set by a pass whose form only a timing can choose (`FormQuestion`); None for the rest.
    form_question: FormQuestion | None = field(default=None, repr=False, compare=False)
    # Where the fused model differs from the original beyond tolerance, no further from float64
    # (the output guard's `Repair.as_dict`, one per output and input profile); (): nowhere.
    repair: tuple[dict, ...] = field(default=(), repr=False, compare=False)
    # Where the original subgraph overflows in strict float16 (a GPU runtime's float16 kernels)
    # and what the fused node computes there (`float16_hazards`); None: no overflow found.
    float16_hazard: dict | None = field(default=None, repr=False, compare=False)

    def input_names(self) -> tuple[str, ...]:
        """The graph tensors the fused node reads (its non-constant inputs), first one first."""
        return tuple(
            value.name
            for value in self.fused.inputs
            if isinstance(value, gs.Variable) and value.name
        )

    def as_dict(self) -> dict:
        """The JSON form of DESIGN.md's report."""
        return {
            "kind": self.kind,
            "op": self.op,
            "domain": self.domain,
            "axis": self.axis,
            "epsilon": self.epsilon,
            "input": self.input,
            "output": self.output,
            "removed_nodes": list(self.removed_nodes),
            **({"repair": list(self.repair)} if self.repair else {}),
            **({"float16_hazard": dict(self.float16_hazard)} if self.float16_hazard else {}),
        }


@dataclass(frozen=True)
class NearMiss:
    """A subgraph that looks like a normalisation but was not fused, and why."""

    kind: str
    node: str
    reason: str
    detail: str

    def as_dict(self) -> dict:
        """The JSON form of DESIGN.md's report."""
        return {"kind": self.kind, "node": self.node, "reason": self.reason, "detail": self.detail}


# Reasons for leaving a site that is already in its best exact form: not a look-alike, so not a
# near-miss; the report counts them (`Report.kept`).
KEPT_AS_IS_REASONS = frozenset({"no-faster-form"})


def node_label(node: gs.Node) -> str:
    """A node's name, or `Op->output` for an unnamed node."""
    return node.name or f"{node.op}->{node.outputs[0].name if node.outputs else ''}"


# Normalisation ops a model may already hold (the exporter's, or an earlier run's).
FUSED_NORM_OPS = (
    "LayerNormalization",
    "SimplifiedLayerNormalization",
    "RMSNormalization",
    "SkipLayerNormalization",
    "SkipSimplifiedLayerNormalization",
    "GroupNormalization",
    "InstanceNormalization",
)
