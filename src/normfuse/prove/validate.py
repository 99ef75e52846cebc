"""Prove a rewrite: the original and the candidate on the same inputs, per provider and level, and
each fused site on its own with adversarial rows.

Whole-model runs use ONNX Runtime with graph optimisations disabled (comparing the graphs
themselves) and again at its default level. A float64 run of the original serves as a reference
where the model can be converted (weights in memory, float16/float32 only).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import onnx

from normfuse.errors import NormfuseError, first_line, runtime_message
from normfuse.facts.shapes import TensorType, tensor_types
from normfuse.io.columns import aligned, middle, wrap
from normfuse.match.records import Site
from normfuse.prove import sessions
from normfuse.prove.compare import OutputComparison, compare_output
from normfuse.prove.float64_reference import float64_runner
from normfuse.prove.inputs import input_hint, make_inputs
from normfuse.prove.profiles import profiled_feeds
from normfuse.prove.site_inputs import isolate

WHOLE_MODEL_LEVELS = ("disable", "all")
NUMBER_COLUMNS = ("max abs", "max rel", "orig-f64", "cand-f64")
OUTPUT_NAME_WIDTH = 24  # an output's name in the validation table, unless --wide


@dataclass(frozen=True)
class ValidationOptions:
    """How to validate: providers (short names), inputs, tolerances (None: dtype defaults)."""

    providers: tuple[str, ...] = ("cpu",)
    dims: dict[str, int] = field(default_factory=dict)
    seed: int = 0
    npz: str | None = None
    atol: float | None = None
    rtol: float | None = None


@dataclass(frozen=True)
class RunComparison:
    """Every output compared on one provider at one optimisation level."""

    provider: str
    level: str
    outputs: tuple[OutputComparison, ...]
    profile: str = "normal"  # the input profile (`profiles.PROFILES`) both models ran on

    @property
    def passed(self) -> bool:
        """True when every output is within tolerance."""
        return all(output.passed for output in self.outputs)

    def as_dict(self) -> dict:
        """The JSON form."""
        return {
            "provider": self.provider,
            "level": self.level,
            "profile": self.profile,
            "passed": self.passed,
            "outputs": [output.as_dict() for output in self.outputs],
        }


@dataclass(frozen=True)
class SiteCheck:
    """One fused site run alone against its original subgraph on one provider."""

    output: str
    kind: str
    provider: str
    comparison: OutputComparison | None
    note: str = ""
    # Not run alone, but its output is checked as part of a larger site (a norm absorbed into a
    # residual Skip* site).
    covered: bool = False

    @property
    def passed(self) -> bool:
        """True when the site matched alone, or is covered by a larger site that did; a site
        that could not be checked at all fails (and is rolled back)."""
        return self.comparison.passed if self.comparison is not None else self.covered

    def as_dict(self) -> dict:
        """The JSON form."""
        return {
            "output": self.output,
            "kind": self.kind,
            "provider": self.provider,
            "passed": self.passed,
            "comparison": None if self.comparison is None else self.comparison.as_dict(),
            "note": self.note,
        }


@dataclass
class ValidationReport:
    """Whole-model comparisons, per-site checks, and notes on inputs and references."""

    runs: list[RunComparison]
    sites: list[SiteCheck] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    rolled_back: list[str] = field(default_factory=list)
    # Set with --refuse-repairs: an output repaired (differing, nearer float64) then fails.
    repairs_refused: bool = False

    @property
    def repaired(self) -> int:
        """Elements that differ from the original's beyond tolerance, nearer float64."""
        return sum(out.repaired for run in self.runs for out in run.outputs)

    @property
    def passed(self) -> bool:
        """True when every run passed and every site kept in the model passed alone (and,
        where repairs are refused, no output was repaired)."""
        kept_sites = [site for site in self.sites if site.output not in self.rolled_back]
        if self.repairs_refused and self.repaired:
            return False
        return all(run.passed for run in self.runs) and all(site.passed for site in kept_sites)

    def as_dict(self) -> dict:
        """The JSON form (the report's `validation`)."""
        return {
            "passed": self.passed,
            "runs": [run.as_dict() for run in self.runs],
            "sites": [site.as_dict() for site in self.sites],
            "rolled_back": list(self.rolled_back),
            "notes": list(self.notes),
        }

    def table(self, wide: bool = False) -> str:
        """One line per provider, level and output with the tolerance it was held to and each
        model's distance from the float64 reference; then failing sites and notes. Within 100
        columns unless `wide`: provider and level share a column, long output names are cut in
        the middle, a tolerance every row shares is said once below, and a long result continues
        on the next line."""
        tolerances = {_tolerance_text(out) for run in self.runs for out in run.outputs}
        shared = None if wide or len(tolerances) != 1 else tolerances.pop()
        rows, further = [_table_header(wide, shared is None)], []
        for run in self.runs:
            for out in run.outputs:
                verdict = "ok" if out.passed else f"FAIL {out.detail}"
                if out.passed and out.repaired:
                    verdict = f"repair: {out.repaired} beyond tolerance, nearer float64"
                if _further_from_float64(out):
                    verdict += ", further from float64"
                    further.append(out)
                where = [run.provider, run.level] if wide else [f"{run.provider}/{run.level}"]
                rows.append(
                    [
                        *where,
                        run.profile,
                        out.output if wide else middle(out.output, OUTPUT_NAME_WIDTH),
                        f"{out.max_abs:.3g}",
                        f"{out.max_rel:.3g}",
                        *([_tolerance_text(out)] if shared is None else []),
                        _error_text(out.reference_error_original),
                        _error_text(out.reference_error_candidate),
                        verdict,
                    ]
                )
        right = {index for index, name in enumerate(rows[0]) if name in NUMBER_COLUMNS}
        said = [] if shared is None else [f"tolerance (atol/rtol): {shared} for every output"]
        for site in self.sites:
            if not site.passed:
                action = "rolled back" if site.output in self.rolled_back else "FAIL"
                said.append(
                    f"site {site.output!r} ({site.kind}) on {site.provider}: {action}: "
                    f"{site.comparison.detail if site.comparison is not None else site.note}"
                )
        checked = sum(1 for site in self.sites if site.comparison is not None)
        if self.sites:
            said.append(f"sites checked alone: {checked} of {len(self.sites)} (site x provider)")
        said.append(
            "an element passes when |cand - orig| <= atol + rtol * |orig| (max rel is large where "
            "orig is near 0)\norig-f64, cand-f64: each model's max abs error against the original "
            "run in float64 (-: no float64 run)"
        )
        if further:
            worst = max(further, key=lambda out: out.reference_error_candidate or 0.0)
            said.append(
                f"note: the candidate is further from float64 than the original on {len(further)} "
                f"output run(s); worst {worst.output!r}: "
                f"{worst.reference_error_candidate:.3g} vs {worst.reference_error_original:.3g}"
            )
        if self.repairs_refused and self.repaired:
            said.append(
                f"FAILED: {self.repaired} element(s) repaired (beyond tolerance, nearer float64) "
                "and repairs are refused (--refuse-repairs)"
            )
        said.extend(f"note: {note}" for note in self.notes)
        return "\n".join([*aligned(rows, right, wide), *(wrap(line, wide) for line in said)])


def _table_header(wide: bool, tolerance: bool) -> list[str]:
    """The validation table's column names (`tolerance`: with the atol/rtol column)."""
    return [
        *(["provider", "level"] if wide else ["prov/level"]),
        "inputs",
        "output",
        "max abs",
        "max rel",
        *(["atol/rtol"] if tolerance else []),
        "orig-f64",
        "cand-f64",
        "result",
    ]


def _tolerance_text(out: OutputComparison) -> str:
    """`1e-4/1e-4` (atol/rtol) for a float output, `exact` for one compared exactly."""
    if out.atol == 0 and out.rtol == 0:
        return "exact"
    return f"{_short(out.atol)}/{_short(out.rtol)}"


def _short(value: float) -> str:
    """A tolerance in few characters: `0.01`, `1e-4`, `1.5e-4`."""
    if value == 0 or value >= 1e-3:
        return f"{value:.3g}"
    mantissa, exponent = f"{value:.2e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def _error_text(error: float | None) -> str:
    return "-" if error is None else f"{error:.3g}"


def _further_from_float64(out: OutputComparison) -> bool:
    """True when the candidate's max abs error against the float64 reference exceeds the
    original's (both known and finite)."""
    before, after = out.reference_error_original, out.reference_error_candidate
    if before is None or after is None or not np.isfinite(before) or not np.isfinite(after):
        return False
    return after > before


def compare_models(
    original: onnx.ModelProto,
    candidate: onnx.ModelProto,
    options: ValidationOptions,
    original_dir: Path | None = None,
    candidate_dir: Path | None = None,
) -> ValidationReport:
    """Run both models on the same inputs on each provider and level, the given or generated
    inputs (`normal`) and the other input profiles made from them (`profiles`: what the output
    guard runs too); compare every output, judged against a float64 evaluation of the original
    where one runs. A profile the original does not run on is noted and skipped."""
    _check_same_signature(original, candidate)
    feeds, notes = make_inputs(original, options.dims, options.seed, options.npz)
    names = [info.name for info in original.graph.output]
    hint = input_hint(options.dims, options.npz)
    compute_dtype = narrowest_float_type(original)
    profiled = {
        profile: sets[0] for profile, sets in profiled_feeds(feeds, original, options.seed).items()
    }
    if len(profiled) == 1:
        notes.append("inputs: the normal profile only (no float input to vary: ids, masks)")
    run64, how = float64_runner(original, original_dir)
    references = {
        profile: _float64_reference(run64, how, profile_feeds)
        for profile, profile_feeds in profiled.items()
    }
    notes.append(references["normal"][1])
    references = {profile: reference for profile, (reference, _) in references.items()}
    runs = []
    for provider in options.providers:
        for level in sessions.levels_for(provider, WHOLE_MODEL_LEVELS):
            try:
                before = sessions.create(original, provider, level, original_dir)
                expected = _run(before, provider, level, feeds, hint)
            except NormfuseError as error:
                if level == "disable":
                    raise
                notes.append(f"level {level} on {provider} skipped: {error}")
                continue
            try:
                after = sessions.create(candidate, provider, level, candidate_dir)
            except Exception as error:  # the candidate fails where the original loads: a failure
                runs.append(RunComparison(provider, level, _not_run(names, error)))
                continue
            for profile, profile_feeds in profiled.items():
                if profile != "normal":
                    try:
                        expected = before.run(None, profile_feeds)
                    except Exception:  # an input the model rejects proves nothing
                        notes.append(f"the {profile} inputs do not run in the original: skipped")
                        continue
                try:
                    actual = after.run(None, profile_feeds)
                except Exception as error:  # the candidate fails where the original runs
                    runs.append(RunComparison(provider, level, _not_run(names, error), profile))
                    continue
                reference = references[profile]
                outputs = tuple(
                    compare_output(
                        name,
                        e,
                        a,
                        options.atol,
                        options.rtol,
                        None if reference is None else reference[index],
                        compute_dtype,
                    )
                    for index, (name, e, a) in enumerate(zip(names, expected, actual, strict=True))
                )
                runs.append(RunComparison(provider, level, outputs, profile))
    return ValidationReport(runs, notes=list(dict.fromkeys(notes)))


def _run(session, provider: str, level: str, feeds: dict, hint: str) -> list:
    """The original's outputs; `NormfuseError` when it cannot run on these inputs (a model the
    user must give other inputs or dims for, not a failed check): ORT's message, then `hint`."""
    try:
        return session.run(None, feeds)
    except Exception as error:
        raise NormfuseError(
            f"the original does not run on the validation inputs ({provider}, level {level}): "
            f"{runtime_message(error)} ({hint})"
        ) from None


def _not_run(names: list[str], error: Exception) -> tuple[OutputComparison, ...]:
    detail = f"the candidate failed to run: {type(error).__name__}: {first_line(error)}"
    inf = float("inf")
    return tuple(OutputComparison(n, "", inf, inf, inf, 0, 0, False, detail) for n in names)


_NARROW_FIRST = {
    onnx.TensorProto.BFLOAT16: "bfloat16",
    onnx.TensorProto.FLOAT16: "float16",
    onnx.TensorProto.FLOAT: "float32",
}


def narrowest_float_type(model: onnx.ModelProto) -> str | None:
    """The narrowest float type the model computes in (inputs, outputs, initializers, Casts)."""
    graph = model.graph
    found = {info.type.tensor_type.elem_type for info in [*graph.input, *graph.output]}
    found |= {tensor.data_type for tensor in graph.initializer}
    found |= {
        a.i
        for node in graph.node
        if node.op_type == "Cast"
        for a in node.attribute
        if a.name == "to"
    }
    return next((name for elem_type, name in _NARROW_FIRST.items() if elem_type in found), None)


def _check_same_signature(original: onnx.ModelProto, candidate: onnx.ModelProto) -> None:
    for field_name in ("input", "output"):
        before = [info.name for info in getattr(original.graph, field_name)]
        after = [info.name for info in getattr(candidate.graph, field_name)]
        if before != after:
            raise NormfuseError(
                f"the models' graph {field_name}s differ: {', '.join(before) or '(none)'} in the "
                f"original, {', '.join(after) or '(none)'} in the candidate"
            )


def _float64_reference(run, how: str, feeds: dict[str, np.ndarray]) -> tuple[list | None, str]:
    """The float64 evaluation's outputs on `feeds` (`float64_runner`'s `run` and `how`), and the
    note that says how, or why there is none."""
    if run is None:
        return None, f"no float64 reference: {how}"
    try:
        return list(run(feeds)), f"float64 reference: {how}"
    except Exception as error:
        return None, f"no float64 reference ({how} failed): {runtime_message(error, 200)}"


def check_sites(
    original: onnx.ModelProto,
    candidate: onnx.ModelProto,
    sites: list[Site],
    options: ValidationOptions,
    base_dir: Path | None = None,
    types: dict[str, TensorType] | None = None,
    function_types: dict[tuple[str, str], dict[str, TensorType]] | None = None,
) -> list[SiteCheck]:
    """Run each fused site and its original subgraph alone, on random and adversarial rows, with
    the types of the site's own scope (`types`: main graph and bodies; `function_types`: per
    model-local function). A branch no model input takes is still proved this way. A site that
    cannot be cut out or whose run fails is a failed check, unless a larger site with the same
    output was checked."""
    types = tensor_types(original) if types is None else types
    checks = []
    for site in sites:
        scope_types = (function_types or {}).get(site.function, {}) if site.function else types
        for provider in options.providers:
            checks.append(
                _check_site(site, original, candidate, scope_types, options, provider, base_dir)
            )
    checked = {check.output for check in checks if check.comparison is not None}
    return [
        replace(check, covered=True, note=f"{check.note}; checked within a larger site")
        if check.comparison is None and check.output in checked
        else check
        for check in checks
    ]


def _check_site(
    site: Site,
    original: onnx.ModelProto,
    candidate: onnx.ModelProto,
    types: dict[str, TensorType],
    options: ValidationOptions,
    provider: str,
    base_dir: Path | None,
) -> SiteCheck:
    try:
        pair = isolate(site, original, candidate, types, options.dims, options.seed, base_dir)
        if isinstance(pair, str):
            return SiteCheck(site.output, site.kind, provider, None, pair)
        expected = sessions.create(pair.before, provider).run(None, pair.feeds)[0]
        actual = sessions.create(pair.after, provider).run(None, pair.feeds)[0]
        reference = _site_reference(pair.before, pair.feeds)
    except Exception as error:  # a site that cannot be run alone is not proved
        note = f"the site could not be run alone: {type(error).__name__}: {first_line(error)}"
        return SiteCheck(site.output, site.kind, provider, None, note)
    comparison = compare_output(
        site.output, expected, actual, options.atol, options.rtol, reference
    )
    return SiteCheck(site.output, site.kind, provider, comparison)


def _site_reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray | None:
    """The original subgraph evaluated in float64 (None where it cannot be)."""
    reference, _ = _float64_reference(*float64_runner(model), feeds)
    return None if reference is None else reference[0]
