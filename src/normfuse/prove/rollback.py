"""Sites the output guard refuses are rolled back, the rest kept: a rewrite that fails a check the
original passes is rebuilt with the failing sites left decomposed (near-miss with the guard's
reason); the model is never refused for one site. The failing sites are found by bisection."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

import onnx

from normfuse.errors import NormfuseError
from normfuse.match.records import Site
from normfuse.prove.guard import Failure, OutputGuard


class SiteList(Protocol):
    """What rollback reads of a report: its fused sites."""

    sites: list[Site]


class Rewrite(Protocol):
    """What rollback reads of one rewrite (the driver's `Rewrite`)."""

    model: onnx.ModelProto
    report: SiteList


Excluded = dict[str, tuple[str, str]]
# Rebuilds the search for the sites behind a repair may take (a repair is kept either way; past
# this, a group is named whole): 2·log2(n) per site, so 2 sites among 64. A rewrite of more
# sites than `MAX_ATTRIBUTED_SITES` is not searched: each rebuild costs a whole rewrite.
MAX_REPAIR_BUILDS = 24
MAX_ATTRIBUTED_SITES = 64
Build = Callable[[Excluded], Rewrite]
TRIAL = ("output-guard-trial", "left decomposed while the output guard looks for a failing site")


def guarded(build: Build, excluded: Excluded, output_guard: OutputGuard) -> Rewrite:
    """`build(excluded)` once `output_guard` accepts it. The sites each failure is attributed to
    (`culprits`) are added to `excluded` (the caller's dict: later rebuilds keep them out) and
    the model is rebuilt. Every round leaves at least one more site decomposed, and a rewrite
    with no site fused is the original itself, which the guard does not check."""
    while True:
        result = build(excluded)
        failure = failure_of(result, output_guard)
        if failure is None:
            return result
        outputs = [site.output for site in result.report.sites]
        check = lambda trial: failure_of(trial, output_guard)  # noqa: E731
        found = culprits(build, excluded, outputs, failure, check)
        if set(found) <= set(excluded):  # an exclusion that did not take: never loop
            raise NormfuseError(f"the output guard refused the rewrite: {failure.detail}")
        excluded |= {
            output: (why.reason, f"{why.detail}; left decomposed") for output, why in found.items()
        }


def repaired_sites(
    build: Build, excluded: Excluded, result: Rewrite, output_guard: OutputGuard
) -> dict[str, Failure]:
    """The sites of `result` (which the guard accepted) whose fusion makes an output differ
    from the original's as a repair, each with its evidence (`Failure.evidence`); found by the
    same bisection as the sites that fail."""
    if not result.report.sites:
        return {}
    repairs = output_guard.repair_failure(result.model, _ort_only(result))
    if repairs is None:
        return {}

    def check(trial: Rewrite) -> Failure | None:
        if not trial.report.sites:
            return None
        return output_guard.repair_failure(trial.model, _ort_only(trial))

    outputs = [site.output for site in result.report.sites]
    budget = MAX_REPAIR_BUILDS if len(outputs) <= MAX_ATTRIBUTED_SITES else 0
    return culprits(build, excluded, outputs, repairs, check, budget)


def failure_of(result: Rewrite, output_guard: OutputGuard) -> Failure | None:
    """The guard's verdict on `result` (None where nothing was fused)."""
    sites = result.report.sites
    if not sites:
        return None
    return output_guard.failure(result.model, _ort_only(result), sites)


def _ort_only(result: Rewrite) -> bool:
    """Whether any fused site of `result` is an ONNX Runtime-only operator."""
    return any(site.ort_only for site in result.report.sites)


def culprits(
    build: Build,
    excluded: Excluded,
    outputs: list[str],
    failure: Failure,
    check: Callable[[Rewrite], Failure | None],
    max_builds: int | None = None,
) -> dict[str, Failure]:
    """The sites (by output) among `outputs` that make the rewrite fail `check`, each with its
    failure. A failing group is split and each half fused alone (the other sites left
    decomposed); a site that fails alone is a culprit, reported with its own failure. Where
    neither half fails alone, the failure needs sites together and the whole group is named.
    About 2·log2(n) rebuilds per failing site; none for a rewrite of one site. With
    `max_builds`, a group still unsplit when the rebuilds run out is named whole, and says so."""
    builds = [0]

    def alone(group: list[str]) -> Failure | None:
        builds[0] += 1
        others = {output: TRIAL for output in outputs if output not in group}
        return check(build(excluded | others))

    def unattributed(group: list[str], why: Failure) -> dict[str, Failure]:
        detail = f"{why.detail} (one of {len(group)} sites, not attributed further)"
        evidence = tuple({**entry, "among_sites": len(group)} for entry in why.evidence)
        return dict.fromkeys(group, replace(why, detail=detail, evidence=evidence))

    def search(group: list[str], why: Failure) -> dict[str, Failure]:
        if len(group) == 1:
            return {group[0]: why}
        if max_builds is not None and builds[0] >= max_builds:
            return unattributed(group, why)
        found: dict[str, Failure] = {}
        for half in (group[: len(group) // 2], group[len(group) // 2 :]):
            if max_builds is not None and builds[0] >= max_builds:
                found |= unattributed(half, why)  # not run: named, never left out
                continue
            half_failure = alone(half)
            if half_failure is not None:
                found |= search(half, half_failure)
        together = replace(why, detail=f"{why.detail} (with {len(group)} sites together)")
        return found or dict.fromkeys(group, together)

    return search(outputs, failure)
