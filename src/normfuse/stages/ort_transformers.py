"""ONNX Runtime's transformers optimizer as a stage before normfuse's passes, under its proof.

`optimize_model` (python fusions only, `opt_level` 0, so the output does not depend on a
provider) is run on a copy of the model; everything it writes is untrusted. Its output must load
on every target provider (an op with no kernel there fails) and pass the output guard against
the original (signature, structure, the input profiles, the float64 judge), exactly as a
rewrite of normfuse's own does. Where it fails (or the optimizer raises), the fusion options
responsible are found by bisection over the enabled `FusionOptions` flags
(`option_bisection`) and turned off, each with the failure that convicted it; the optimizer is
rerun without them. Nothing is turned off silently: the stage's record says what it fused, what
was turned off and why, the repairs it kept, or why it was skipped.

Fixed choices, not flags: `enable_gelu_approximation` stays off (an approximation is never a
proof's to accept) and the attention mask stays raw (`MaskIndexEnd`, BERT's default, assumes
right padding, which no input profile can show).
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import io
import logging
import os
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import onnx

from normfuse.errors import NormfuseError, first_line
from normfuse.io.model_io import external_tensors
from normfuse.ir.scopes import all_graphs
from normfuse.prove import sessions
from normfuse.prove.guard import Failure, OutputGuard
from normfuse.stages.model_type import infer_model_type
from normfuse.stages.option_bisection import options_to_turn_off

NAME = "ort-transformers"
# Flags that are not fusions, or that stay off whatever the user asks (module docstring).
NOT_BISECTED = frozenset({"enable_shape_inference", "enable_gelu_approximation"})
INSTALL = "pip install 'normfuse[ort-transformers]' (it needs sympy)"


@dataclass(frozen=True)
class StageSpec:
    """A stage as named on the command line: `ort-transformers[:MODEL_TYPE]`."""

    name: str
    model_type: str | None = None


def parse_stage(text: str) -> StageSpec:
    """`ort-transformers` or `ort-transformers:bert`, checked, sympy (which the optimizer needs)
    installed (a NormfuseError where not)."""
    name, _, model_type = text.strip().partition(":")
    if name != NAME:
        raise NormfuseError(f"unknown stage {text!r}; stages: {NAME}[:MODEL_TYPE]")
    if importlib.util.find_spec("sympy") is None:
        raise NormfuseError(f"--with {NAME} needs sympy: {INSTALL}")
    if not model_type:
        return StageSpec(name)
    known = model_types()
    if model_type not in known:
        raise NormfuseError(
            f"unknown model type {model_type!r} for {NAME}; the optimizer's types: "
            f"{', '.join(sorted(known))}"
        )
    return StageSpec(name, model_type)


def model_types() -> tuple[str, ...]:
    """The `model_type`s ONNX Runtime's transformers optimizer knows."""
    from onnxruntime.transformers.optimizer import MODEL_TYPES

    return tuple(MODEL_TYPES)


@dataclass
class StageRecord:
    """What a stage did: its model type and why, the ops it added (by count: its fusions), the
    options turned off with the failure that convicted each, the repairs kept, or why it was
    skipped."""

    name: str
    model_type: str
    model_type_source: str
    status: str = "applied"
    ops_added: dict[str, int] = field(default_factory=dict)
    turned_off: list[dict] = field(default_factory=list)
    kept_options: list[str] = field(default_factory=list)
    repairs: list[dict] = field(default_factory=list)
    detail: str = ""
    nodes_before: int = 0
    nodes_after: int = 0

    def as_dict(self) -> dict:
        """The JSON form."""
        return {
            "stage": self.name,
            "model_type": self.model_type,
            "model_type_source": self.model_type_source,
            "status": self.status,
            "ops_added": dict(self.ops_added),
            "turned_off": list(self.turned_off),
            "options_kept": list(self.kept_options),
            "repairs": list(self.repairs),
            "detail": self.detail,
            "nodes": {"before": self.nodes_before, "after": self.nodes_after},
        }

    def lines(self) -> list[str]:
        """The table's lines: the ops it added, each option turned off and why, or why it was
        skipped."""
        head = f"stage {self.name} (model_type {self.model_type}, {self.model_type_source})"
        if self.status != "applied":
            return [f"{head}: skipped: {self.detail}"]
        added = ", ".join(f"{op} {n}" for op, n in self.ops_added.items()) or "nothing"
        lines = [f"{head}: added {added}; nodes {self.nodes_before} -> {self.nodes_after}"]
        lines += [
            f"stage {self.name}: turned off {off['option']}: {off['reason']}: {off['detail']}"
            for off in self.turned_off
        ]
        lines += [
            f"stage {self.name}: repair: {repair['output']!r} on the {repair['profile']} inputs, "
            f"{_short(repair['rewrite_to_float64'])} from float64 against the original's "
            f"{_short(repair['original_to_float64'])}"
            for repair in self.repairs
        ]
        return lines


def _short(value: float | None) -> str:
    return "inf (NaN or Inf)" if value is None else f"{value:.3g}"


@dataclass(frozen=True)
class Attempt:
    """One run of the optimizer with `off` turned off: its output, or why there is none."""

    off: frozenset[str]
    model: onnx.ModelProto | None
    failure: Failure | None


def run_stage(
    model: onnx.ModelProto,
    spec: StageSpec,
    guards: Sequence[OutputGuard],
    providers: Sequence[str] = ("cpu",),
) -> tuple[onnx.ModelProto, StageRecord]:
    """The optimizer's output of `model` that every guard of `guards` (built on `model`, each
    running it at its own sizes) accepts and every provider of `providers` loads, with the
    options it needed turned off; `model` itself where the stage is skipped. Always with the
    stage's record."""
    output_guard = guards[0]
    model_type, source = spec.model_type, "given"
    if model_type is None:
        model_type, evidence = infer_model_type(model)
        source = f"inferred: {evidence}"
    record = StageRecord(spec.name, model_type, source, nodes_before=len(model.graph.node))
    why_not = _unprovable(model, output_guard)
    if why_not is not None:
        return _skipped(model, record, why_not)
    flags = fusion_flags(model_type)
    attempts: dict[frozenset[str], Attempt] = {}
    verdicts: dict[frozenset[str], Failure | None] = {}

    def check(off: frozenset[str]) -> Failure | None:
        if off not in verdicts:
            attempts[off] = run_optimizer(model, model_type, off)
            verdicts[off] = _check(attempts[off], model, guards, providers)
        return verdicts[off]

    if check(frozenset()) is not None:
        baseline = check(frozenset(flags))
        if baseline is not None:
            why = f"its output fails with every fusion off: {baseline.reason}: {baseline.detail}"
            return _skipped(model, record, why)
    off = options_to_turn_off(flags, check)
    return _applied(model, attempts[frozenset(off)], record, off, flags, output_guard)


def fusion_flags(model_type: str) -> list[str]:
    """The `FusionOptions` flags on by default for `model_type`, in the optimizer's order, that
    the bisection may turn off (`NOT_BISECTED` aside)."""
    options = _options(model_type, frozenset())
    return [
        name
        for name, value in vars(options).items()
        if name.startswith("enable_") and value is True and name not in NOT_BISECTED
    ]


def _options(model_type: str, off: frozenset[str]):
    """`FusionOptions(model_type)` with `off` turned off, the mask raw and no approximation."""
    from onnxruntime.transformers.fusion_options import AttentionMaskFormat, FusionOptions

    options = FusionOptions(model_type)
    options.attention_mask_format = AttentionMaskFormat.AttentionMask
    options.enable_gelu_approximation = False
    for name in off:
        setattr(options, name, False)
    return options


def run_optimizer(model: onnx.ModelProto, model_type: str, off: frozenset[str]) -> Attempt:
    """The optimizer on a copy of `model` (it rewrites its input in place), saved and read back
    as the optimizer writes it, its logging and printing kept off the user's terminal; a crash
    is the attempt's failure."""
    from onnxruntime.transformers.optimizer import optimize_model

    options = _options(model_type, off)
    # Its modules log under their own top-level names (`onnx_model_mmdit`): all are silenced.
    silenced = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with contextlib.redirect_stdout(io.StringIO()), tempfile.TemporaryDirectory() as folder:
            optimized = optimize_model(
                copy.deepcopy(model),
                model_type=model_type,
                opt_level=0,
                use_gpu=False,
                optimization_options=options,
            )
            path = os.path.join(folder, "optimized.onnx")
            optimized.save_model_to_file(path)  # its own save: domains imported, sorted
            return Attempt(off, onnx.load(path), None)
    except Exception as error:  # the optimizer is untrusted: whatever it raises is its failure
        detail = f"the optimizer raised {type(error).__name__}: {first_line(error)}"
        return Attempt(off, None, Failure("optimizer-crashed", detail))
    finally:
        logging.disable(silenced)


def _check(
    attempt: Attempt,
    model: onnx.ModelProto,
    guards: Sequence[OutputGuard],
    providers: Sequence[str],
) -> Failure | None:
    """Why the attempt's output may not stand in for the original: the optimizer crashed,
    changed a nested body (an If branch, a Loop or Scan body, a function) that no run can cover
    on every path, a provider has no kernel for one of its ops (it does not load there), or a
    guard refuses it (its CPU load and runs, at that guard's sizes, included)."""
    if attempt.failure is not None:
        return attempt.failure
    changed = _nested_changes(model, attempt.model)
    if changed:
        return Failure(
            "stage-changed-body",
            f"it changed {changed} inside nested bodies (If/Loop/Scan, functions), where generated "
            "inputs cannot reach every path",
        )
    for provider in providers:
        if provider == "cpu":  # the guard's own load and runs are on the CPU provider
            continue
        try:
            sessions.create(attempt.model, provider, "disable", guards[0].base_dir)
        except NormfuseError as error:
            return Failure("output-does-not-load", f"on {provider}: {error}")
    for output_guard in guards:
        failure = output_guard.failure(attempt.model, ort_only=True)
        if failure is not None:
            return failure
    return None


def _nested_changes(model: onnx.ModelProto, optimised: onnx.ModelProto) -> str:
    """The op counts by which the nested bodies of `optimised` differ from `model`'s ("" where
    they hold the same ops)."""
    before, after = _nested_ops(model), _nested_ops(optimised)
    if before == after:
        return ""
    added, removed = after - before, before - after
    parts = [f"+{count} {op}" for op, count in sorted(added.items())]
    parts += [f"-{count} {op}" for op, count in sorted(removed.items())]
    return ", ".join(parts)


def _nested_ops(model: onnx.ModelProto) -> Counter:
    """The ops of every nested body and model-local function of `model`."""
    found: Counter = Counter()
    for graph in list(all_graphs(model.graph))[1:]:
        found.update(node.op_type for node in graph.node)
    for function in model.functions:
        found.update(node.op_type for node in function.node)
    return found


def _unprovable(model: onnx.ModelProto, output_guard: OutputGuard) -> str | None:
    """Why the stage's output could not be proved by running it, or None."""
    if any(True for _ in external_tensors(model)):
        return "its weights are in external data (the stage runs on models that hold them)"
    if not output_guard.runs():
        return (
            "the output guard cannot run it on generated inputs (too large, or it does not run), "
            "so nothing the optimizer writes could be proved"
        )
    return None


def _skipped(
    model: onnx.ModelProto, record: StageRecord, why: str
) -> tuple[onnx.ModelProto, StageRecord]:
    record.status, record.detail = "skipped", why
    record.nodes_after = record.nodes_before
    return model, record


def _applied(
    model: onnx.ModelProto,
    attempt: Attempt,
    record: StageRecord,
    off: dict[str, Failure],
    flags: list[str],
    output_guard: OutputGuard,
) -> tuple[onnx.ModelProto, StageRecord]:
    """The accepted attempt, its record filled in: new ops, options off and why, repairs."""
    optimised = attempt.model
    record.ops_added = dict(sorted((_ops(optimised) - _ops(model)).items()))
    record.turned_off = [
        {"option": flag, "reason": why.reason, "detail": why.detail} for flag, why in off.items()
    ]
    record.kept_options = [flag for flag in flags if flag not in off]
    repairs = output_guard.repair_failure(optimised, ort_only=True)
    record.repairs = list(repairs.evidence) if repairs is not None else []
    record.nodes_after = len(optimised.graph.node)
    return optimised, record


def _ops(model: onnx.ModelProto) -> Counter:
    """The ops of `model`, nested bodies and functions included."""
    return Counter(node.op_type for node in model.graph.node) + _nested_ops(model)


def uses_contrib_ops(model: onnx.ModelProto) -> bool:
    """Whether `model`'s main graph holds an op outside the standard domain."""
    return any(node.domain not in ("", "ai.onnx") for node in model.graph.node)
