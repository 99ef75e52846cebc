"""The route of a model through `optimize`: load, view (every fact, derived once), the stages
(`--with`), the rounds of passes, export, the output guard's proof with rollback, validation and
repairs, and the report. `normfuse.optimize`, `inspect`, `validate` and `save` are here."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import onnx

from normfuse import __version__
from normfuse.driver import collector, stages
from normfuse.driver.report import Report
from normfuse.errors import NormfuseError, guard_rewrite
from normfuse.facts import model_view
from normfuse.io import model_io
from normfuse.ir.structure import check_structure
from normfuse.match import records
from normfuse.match.context import Context, Policy
from normfuse.measure.forms import FormChooser
from normfuse.passes import DEFAULT_PASS_NAMES
from normfuse.prove import float16_hazards, guard, inputs, openvino_runtime, rollback, sessions
from normfuse.prove import validate as validate_module
from normfuse.prove.sessions import parse_providers
from normfuse.prove.validate import ValidationOptions
from normfuse.rewrite import model_export
from normfuse.rewrite import rounds as rewrite
from normfuse.target import targets
from normfuse.target.targets import Target

ModelLike = onnx.ModelProto | str | os.PathLike


@dataclass(frozen=True)
class OptimizeResult:
    """The optimised model, its report, and the folder its external data is read from."""

    model: onnx.ModelProto
    report: Report
    base_dir: Path | None


@collector.paused()  # a large model's objects are not walked again and again
def optimize(
    model: ModelLike,
    target: str = "ort",
    passes: str | list[str] | None = None,
    base_dir: str | os.PathLike | None = None,
    validation: ValidationOptions | None = None,
    tune_for: str | None = None,
    dims: dict[str, int] | None = None,
    refuse_repairs: bool = False,
    max_opset: int | None = None,
    with_stages: Sequence[str] = (),
    stage_providers: Sequence[str] = ("cpu",),
    providers: Sequence[str] = (),
) -> OptimizeResult:
    """Fuse every normalisation subgraph of `model` (a `ModelProto` or a path).

    `target` is "ort" (ONNX Runtime, the default) or "onnx" (standard operators only); `passes`
    names the passes to run (default: group-norm, layer-norm, rms-norm; `skip-norm` on request).
    For a `ModelProto` whose weights are in external data, `base_dir` is the folder they are
    in. With `validation`, each fused site is run alone against its original subgraph, failing
    sites are left decomposed (near-miss
    `failed-validation`), and the whole model is compared with the original; the outcome is
    `report.validation` (its `dims` and `npz` are checked against the model before any work).
    With `tune_for` ("cpu" or "cuda"), residual fusion is added and each site's form (Skip* or
    not, fused or decomposed) is chosen by timing it on that provider (`report.tuning`), at the
    shapes the model has with the symbolic dimension sizes `dims`
    (batch-like dims default to 1; any other unknown one is an error). The input is never
    modified.

    The output guard runs both models on several input profiles (`profiles.PROFILES`) where the
    model is small enough; a site after which an output differs beyond tolerance and further
    from a float64 evaluation is left decomposed (`output-differs`), and one after which it
    differs but is no nearer the original than float64 is kept as a *repair* (the site's
    `repair` evidence), or, with `refuse_repairs`, left decomposed (`repair-refused`).
    `max_opset` caps the default-domain opset the output may be raised to (the deployment
    runtime's); a site that needs more is left (`opset-too-low`, naming the cap).

    A float16 site whose original subgraph overflows when every op rounds to float16 (a GPU
    runtime's float16 kernels; ONNX Runtime's CPU provider runs them in float32) carries a
    `float16_hazard` record: what overflows, from which spread, and the fused node's float32
    statistics evaluated on the same rows (`prove.float16_hazards`, at the shapes `dims` gives).

    `with_stages` names tools run before the passes, each proved against the original like a
    site and with its failing options turned off (`ort_stage`: "ort-transformers", or
    "ort-transformers:MODEL_TYPE"); `stage_providers` are the providers a stage's output must
    load on. Their records are `report.stages`.

    The output is for the execution providers `providers` names, `stage_providers`,
    `validation`'s and `tune_for` (short names; CPU when none is named): a fused op whose kernel
    on one of them has a known hazard is not emitted (`match.kernel_hazards`: on "cuda", no
    float16 Skip* op). The rule follows what is asked; nothing runs on a provider named only here.
    """
    loaded = _load(model, base_dir)
    targets.check_max_opset(loaded.model, max_opset)
    specs = stages.stage_specs(with_stages, target)
    if validation is not None:  # a `dims` typo or a wrong `.npz` is refused before any work
        inputs.check_inputs(loaded.model, validation.dims, validation.npz)
    staged, stage_records = stages.run_stages(loaded, specs, refuse_repairs, stage_providers)
    output_guard = guard.OutputGuard(staged.model, refuse_repairs, staged.base_dir)
    if tune_for is None:  # timed forms share the CPU with nothing
        output_guard.start()  # a large original's run overlaps the rewrite
    try:
        result = _optimize_loaded(
            staged,
            model,
            target,
            passes,
            validation,
            tune_for,
            dims,
            output_guard,
            max_opset,
            original=loaded,
            providers=_target_providers(providers, stage_providers, validation, tune_for),
        )
    finally:
        output_guard.close()
    if stage_records:
        stages.with_stages(result.report, loaded.model, staged.model, stage_records)
    return result


def _optimize_loaded(
    loaded: model_io.LoadedModel,
    model: ModelLike,
    target: str,
    passes: str | list[str] | None,
    validation: ValidationOptions | None,
    tune_for: str | None,
    dims: dict[str, int] | None,
    output_guard: guard.OutputGuard,
    max_opset: int | None = None,
    original: model_io.LoadedModel | None = None,
    providers: tuple[str, ...] = ("cpu",),
) -> OptimizeResult:
    """`optimize` of the loaded model, its rewrites proved by `output_guard`; validation
    compares the result with `original` (default: `loaded`; a stage's input); the output is for
    `providers`."""
    with guard_rewrite():
        view = model_view.build(loaded.model, loaded.base_dir)  # every fact, derived once
    chooser = None
    if tune_for is not None:
        chooser = FormChooser(parse_providers(tune_for)[0], dims=dict(dims or {}), model=view.model)
        passes = passes if passes is not None else [*DEFAULT_PASS_NAMES, "skip-norm"]

    def build(excluded: dict[str, tuple[str, str]]) -> OptimizeResult:
        return _optimize(
            loaded, view, target, passes, excluded, _name(model), chooser, max_opset, providers
        )

    def rewrite_excluding(excluded: dict[str, tuple[str, str]]) -> OptimizeResult:
        return rollback.guarded(build, excluded, output_guard)

    excluded: dict[str, tuple[str, str]] = {}
    result = rewrite_excluding(excluded)
    if chooser is not None:
        slower = chooser.slower_fusions(
            view.model, result.model, result.report.sites, loaded.base_dir
        )
        if slower:
            excluded |= slower
            result = rewrite_excluding(excluded)
        result.report.tuning = chooser.records()
    hazard_dims = dict(dims or (validation.dims if validation else {}))
    if validation is None:
        result = _with_repairs(result, build, excluded, output_guard)
        return _with_float16_hazards(result, view, hazard_dims)
    checks = validate_module.check_sites(
        view.model,
        result.model,
        result.report.sites,
        validation,
        loaded.base_dir,
        view.types,
        view.function_types,
    )
    failed = sorted(check.output for check in checks if not check.passed)
    if failed:
        excluded |= {
            check.output: ("failed-validation", _failed_detail(check))
            for check in checks
            if not check.passed
        }
        result = rewrite_excluding(excluded)
    before = original or loaded
    report = validate_module.compare_models(
        before.model, result.model, validation, before.base_dir, loaded.base_dir
    )
    report.sites, report.rolled_back = checks, failed
    report.repairs_refused = output_guard.refuse_repairs
    result.report.validation = report
    result = _with_repairs(result, build, excluded, output_guard)
    return _with_float16_hazards(result, view, hazard_dims)


def _with_repairs(
    result: OptimizeResult,
    build: rollback.Build,
    excluded: dict[str, tuple[str, str]],
    output_guard: guard.OutputGuard,
) -> OptimizeResult:
    """`result` with each site that makes an output a repair carrying its evidence, the note
    every fused layer norm calls for (`ILL_CONDITIONED_NOTE`), and the note that the guard did
    not run the models where it could not (`NOT_RUN_NOTE`: no repair can be seen then)."""
    found = rollback.repaired_sites(build, excluded, result, output_guard)
    if found:
        result.report.sites = [
            dataclasses.replace(site, repair=found[site.output].evidence)
            if site.output in found
            else site
            for site in result.report.sites
        ]
    if any(site.kind in CENTRED_KINDS and not site.repair for site in result.report.sites):
        result.report.notes.append(ILL_CONDITIONED_NOTE)
    if result.report.sites and not output_guard.runs():
        result.report.notes.append(NOT_RUN_NOTE)
    return result


def _with_float16_hazards(
    result: OptimizeResult, view: model_view.ModelView, dims: dict[str, int]
) -> OptimizeResult:
    """`result` with each float16 site whose original overflows in strict float16 carrying its
    record (`float16_hazards`: sized for `dims`), and the note on how it was found."""
    sites = float16_hazards.annotate(
        result.report.sites,
        view.model,
        result.model,
        view.types,
        view.function_types,
        dims,
        result.base_dir,
    )
    result.report.sites = sites
    if any(site.float16_hazard for site in sites):
        result.report.notes.append(float16_hazards.NOTE)
    return result


# Layer and group norms: their kernels centre the rows in another order than the graph.
CENTRED_KINDS = ("layer-norm", "group-norm")


NOT_RUN_NOTE = (
    "note: the output guard did not run these models (too large, or no generated input runs "
    "the original): weightless checks only; --validate with --dims or --inputs runs them"
)
ILL_CONDITIONED_NOTE = (
    "note: fused layer norms match the graph except on rows of mean >= 1e3x spread "
    "(float32's limit; docs/limitations.md)"
)


def _target_providers(
    providers: Sequence[str],
    stage_providers: Sequence[str],
    validation: ValidationOptions | None,
    tune_for: str | None,
) -> tuple[str, ...]:
    """The providers the output is for, in order, each once: those named, the stages', the
    validation's and the tuned one (the command line's `--providers` reaches the last three).
    Their names are checked, not whether they are installed."""
    named = [*providers, *stage_providers, *(validation.providers if validation else ())]
    names = [name.strip().lower() for name in [*named, *([tune_for] if tune_for else [])]]
    unknown = [name for name in names if name not in KNOWN_PROVIDERS]
    if unknown:
        raise NormfuseError(f"unknown provider {', '.join(unknown)}; use cpu, cuda or openvino")
    return tuple(dict.fromkeys(names)) or ("cpu",)


KNOWN_PROVIDERS = (*sessions.PROVIDERS, openvino_runtime.NAME)


def _failed_detail(check: validate_module.SiteCheck) -> str:
    """Why `--validate` left a site decomposed: it differed when run alone, or it could not be
    run alone (never compared: not proved, so not kept)."""
    if check.comparison is None:
        return f"--validate could not check the site alone ({check.note}); left decomposed"
    return "the fused node differed from the subgraph when run alone; left decomposed"


def _optimize(
    loaded: model_io.LoadedModel,
    view: model_view.ModelView,
    target: str,
    passes: str | list[str] | None,
    excluded: dict[str, tuple[str, str]],
    name: str | None,
    chooser: FormChooser | None = None,
    max_opset: int | None = None,
    providers: tuple[str, ...] = ("cpu",),
) -> OptimizeResult:
    """One rewrite of `loaded` for `providers`: import, run the passes, export, set opsets,
    check, report."""
    from normfuse.passes import select

    try:
        chosen_target, chosen_passes = Target(target), select(passes)
    except ValueError as error:
        raise NormfuseError(str(error)) from None
    original = loaded.model
    # The raise is judged on the nodes that survive the rewrite: it is assumed, and the rewrite
    # redone without it when the survivors forbid it (at most once per standard opset).
    blocked = {**targets.fixed_blockers(original), **targets.ceiling_blockers(max_opset)}
    with guard_rewrite():
        while True:
            context, function_contexts = _contexts(
                view, chosen_target, excluded, chooser, blocked, providers
            )
            graph = view.import_graph()
            nodes_before = len(graph.nodes)
            if view.unsupported is None:
                result = rewrite.run(graph, chosen_passes, context, function_contexts)
            else:
                refused = records.NearMiss("model", "", "unsupported-scope", view.unsupported)
                result = rewrite.RunResult([], [refused])
            optimised, blocker = model_export.finalise(original, view, graph, result.sites)
            if blocker is None:
                break
            if blocker[0] in blocked:  # a site asked for an opset it was told is blocked
                raise NormfuseError(f"internal error: opset {blocker[0]} asked for again")
            blocked = {**blocked, blocker[0]: blocker[1]}
    report = Report(
        __version__,
        name,
        None,
        chosen_target.value,
        result.sites,
        [miss for miss in result.near_misses if miss.reason not in records.KEPT_AS_IS_REASONS],
        nodes_before,
        len(optimised.graph.node),
        targets.default_opset(original),
        targets.default_opset(optimised),
        any(site.ort_only for site in result.sites),
        tuning=[] if chooser is None else chooser.records(),
        kept=[miss for miss in result.near_misses if miss.reason in records.KEPT_AS_IS_REASONS],
    )
    return OptimizeResult(optimised, report, loaded.base_dir)


def _contexts(
    view: model_view.ModelView,
    target: Target,
    excluded: dict[str, tuple[str, str]],
    chooser: FormChooser | None,
    blocked: dict[int, str],
    providers: tuple[str, ...],
) -> tuple[Context, dict[tuple[str, str], Context]]:
    """The context for the main graph, and one per model-local function: the scope's facts
    (`ModelView.scope_facts`) and the policy, raising the opset to none of `blocked`, for
    `providers`."""
    original = view.model
    policy = Policy(
        target,
        targets.emissions(original, target, blocked),
        dict(excluded),
        chooser,
        dict(blocked),
        providers,
    )
    main_facts, function_facts = view.scope_facts()
    function_contexts = {
        (function.domain, function.name): Context(
            function_facts[(function.domain, function.name)],
            dataclasses.replace(
                policy,
                emissions=targets.function_emissions(function, original, target, blocked),
            ),
        )
        for function in original.functions
    }
    return Context(main_facts, policy), function_contexts


def validate(
    original: ModelLike, candidate: ModelLike, options: ValidationOptions | None = None
) -> validate_module.ValidationReport:
    """Compare `candidate` with `original` on the same inputs (see `ValidationOptions`)."""
    before, after = _load(original, None), _load(candidate, None)
    return validate_module.compare_models(
        before.model, after.model, options or ValidationOptions(), before.base_dir, after.base_dir
    )


def inspect(
    model: ModelLike,
    target: str = "ort",
    passes: str | list[str] | None = None,
    base_dir: str | os.PathLike | None = None,
    max_opset: int | None = None,
    providers: Sequence[str] = (),
) -> Report:
    """Report what `optimize` would fuse for `providers` (see `optimize`) and every near-miss,
    changing nothing."""
    return optimize(
        model, target, passes, base_dir, max_opset=max_opset, providers=providers
    ).report


def save(
    model: OptimizeResult | onnx.ModelProto,
    path: str | os.PathLike,
    base_dir: str | os.PathLike | None = None,
    reference_input_data: bool = False,
) -> str | None:
    """Write a model (or an `OptimizeResult`'s model) to `path` atomically. External weights go
    into `<path>.data` (a copy-on-write clone where the filesystem can make one), so the output
    never depends on the input's files; with `reference_input_data`, they are read from where
    they are (the output must then be beside them). Returns where the weights went, or None
    where the model holds them all."""
    if isinstance(model, OptimizeResult):
        model, base_dir = model.model, base_dir or model.base_dir
    return model_io.save(model, path, base_dir, reference=reference_input_data)


def _load(model: ModelLike, base_dir: str | os.PathLike | None) -> model_io.LoadedModel:
    if isinstance(model, onnx.ModelProto):
        loaded = model_io.LoadedModel(model, Path(base_dir).resolve() if base_dir else None)
        model_io.check_external_data(loaded.model, loaded.base_dir)
    elif isinstance(model, str | os.PathLike):
        loaded = model_io.load(model)
    else:
        raise NormfuseError(f"expected an onnx.ModelProto or a path, got {type(model).__name__}")
    check_structure(loaded.model)
    return loaded


def _name(model: ModelLike) -> str | None:
    return None if isinstance(model, onnx.ModelProto) else os.fspath(model)
