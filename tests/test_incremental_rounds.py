"""A later round rescans a (pass, scope) only when something changed since that pass last
scanned it; a skipped scan's near-misses are still reported."""

from __future__ import annotations

import numpy as np
import pytest

import normfuse
from models import builders
from normfuse.rewrite import rounds as rewrite
from tests.helpers import assert_same_numerics


@pytest.fixture
def scans(monkeypatch):
    """The pass name of every `find_sites` call, in order."""
    seen: list[str] = []
    original = rewrite.find_sites

    def recording(graph, fusion_pass, context, shared=None):
        seen.append(fusion_pass.name)
        return original(graph, fusion_pass, context, shared)

    monkeypatch.setattr(rewrite, "find_sites", recording)
    return seen


def _layer_norm_then_rms_lookalike():
    """A layer norm feeding an RMS norm with epsilon after the square root (a near-miss)."""
    b = builders.GraphBuilder(17)
    rng, shape = np.random.default_rng(0), (2, 4, 8)
    y = builders.add_layer_norm(b, "x", shape, builders.LayerNormSpec(), rng)
    spec = builders.RmsNormSpec(epsilon_outside_sqrt=True)
    z = builders.add_rms_norm(b, y, shape, spec, rng)
    return builders._single_op_model(b, z, shape, "layer_norm_then_rms_lookalike")


def test_an_unchanged_scan_is_not_repeated_and_its_near_miss_stays(scans):
    model = _layer_norm_then_rms_lookalike()
    result = normfuse.optimize(model)
    # Round 1: layer-norm fuses. Round 2: group-norm and layer-norm scanned before that change
    # (or made it) and rescan; rms-norm scanned after it, nothing changed since: not rescanned.
    assert scans == ["group-norm", "layer-norm", "rms-norm", "group-norm", "layer-norm"]
    assert [site.kind for site in result.report.sites] == ["layer-norm"]
    misses = [(miss.kind, miss.reason) for miss in result.report.near_misses]
    assert misses == [("rms-norm", "epsilon-outside-sqrt")]
    assert_same_numerics(model, result.model)


def test_nothing_fused_means_one_round(scans):
    model = builders.norm_model(builders.LayerNormSpec(epsilon_outside_sqrt=True), (2, 4, 8))
    result = normfuse.optimize(model)
    assert scans == ["group-norm", "layer-norm", "rms-norm"]
    assert result.report.sites == []
    assert [miss.reason for miss in result.report.near_misses] == ["epsilon-outside-sqrt"]


def test_a_pattern_two_passes_share_is_matched_once_while_the_graph_is_unchanged(monkeypatch):
    """group-norm and layer-norm both have the statistics patterns: one match per tensor while
    nothing is rewritten (here nothing fuses), with the same verdicts as unshared scans."""
    from normfuse.passes import layer_norm

    shared_patterns = {id(layer_norm.STATISTICS), id(layer_norm.DOWNCAST_STATISTICS)}
    calls: list[tuple[int, int]] = []
    original = rewrite.match_first

    def counting(pattern, tensor, reader):
        if id(pattern) in shared_patterns:
            calls.append((id(pattern), id(tensor)))
        return original(pattern, tensor, reader)

    monkeypatch.setattr(rewrite, "match_first", counting)
    spec = builders.LayerNormSpec(epsilon_outside_sqrt=True)
    model = builders.norm_model(spec, (2, 4, 8), layers=3)
    result = normfuse.optimize(model, passes=["group-norm", "layer-norm"])
    assert calls and len(calls) == len(set(calls))
    assert result.report.sites == []
    reasons = [(miss.kind, miss.reason) for miss in result.report.near_misses]
    assert reasons == [("layer-norm", "epsilon-outside-sqrt")] * 3

    calls.clear()  # the same scans, each pass on its own: every shared match is made twice
    unshared = lambda self, pattern, tensor, facts: rewrite.match_first(pattern, tensor, facts)  # noqa: E731
    monkeypatch.setattr(rewrite.SharedMatches, "first", unshared)
    alone = normfuse.optimize(model, passes=["group-norm", "layer-norm"])
    assert len(calls) == 2 * len(set(calls))
    assert alone.report.near_misses == result.report.near_misses
