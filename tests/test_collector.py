"""The cyclic garbage collector is paused while `optimize` runs and restored as it was."""

from __future__ import annotations

import gc

import pytest

import normfuse
from models import builders
from normfuse.driver import collector
from normfuse.rewrite import rounds as rewrite
from tests.helpers import assert_same_numerics


@pytest.fixture
def spy(monkeypatch):
    """Records, for each `rewrite.run` call, whether the collector was enabled then."""
    seen: list[bool] = []
    original = rewrite.run

    def recording(*args, **kwargs):
        seen.append(gc.isenabled())
        return original(*args, **kwargs)

    monkeypatch.setattr(rewrite, "run", recording)
    return seen


def _model():
    return builders.norm_model(builders.LayerNormSpec(), shape=(2, 4, 8), layers=2)


def test_optimize_pauses_the_collector_and_restores_it(spy):
    assert gc.isenabled()
    model = _model()
    result = normfuse.optimize(model)
    assert spy == [False]
    assert gc.isenabled()
    assert [site.kind for site in result.report.sites] == ["layer-norm", "layer-norm"]
    assert_same_numerics(model, result.model)


def test_a_disabled_collector_stays_disabled(spy):
    gc.disable()
    try:
        normfuse.optimize(_model())
        assert not gc.isenabled()
    finally:
        gc.enable()
    assert spy == [False]


def test_the_collector_is_restored_when_the_block_raises():
    with pytest.raises(ValueError), collector.paused():
        assert not gc.isenabled()
        raise ValueError("inside")
    assert gc.isenabled()
