"""Real KV-cache decoder exports committed in models/real/kv (models/export_kv.py: optimum's
merged and with-past decoders, dynamo exports with past_key_values inputs): every norm site the
PyTorch modules have is fused, in every scope; outputs match the original at ORT_DISABLE_ALL at a
decode step (sequence 1, past 32) and a prefill (sequence 8, past 0: a merged decoder's other
branch) on the adversarial input profiles; every fused site matches its subgraph alone on the
site_inputs rows; the file grows by at most what the fused nodes add, and no initializer moves
into a branch. Needs no torch: only the committed files and manifest.json."""

from __future__ import annotations

import functools
import json
from collections import Counter
from pathlib import Path

import onnx
import pytest
from helpers import FLOAT32_ATOL, assert_same_numerics

import normfuse
from models.kv_feeds import export_feeds
from normfuse.facts import model_view
from normfuse.ir.placement import graphs_by_scope, initializer_scopes
from normfuse.measure import bench
from normfuse.prove.validate import ValidationOptions, check_sites

MODELS_DIR = Path(__file__).resolve().parent.parent / "models"
MANIFEST = json.loads((MODELS_DIR / "manifest.json").read_text())
ENTRIES = [entry for entry in MANIFEST["kv_decoders"] if "export_error" not in entry]
IDS = [Path(entry["file"]).stem for entry in ENTRIES]
# (sequence, past) of a decode step and a prefill.
STEPS = {"decode": (1, 32), "prefill": (8, 0)}
# As tests/test_real_models.py: fused float16 exports stay within 4e-3 x max(1, max|y|).
FLOAT16_RTOL = 4e-3
FUSED = {"LayerNormalization", "SimplifiedLayerNormalization", "RMSNormalization"}


@functools.cache
def optimized(file: str) -> normfuse.OptimizeResult:
    """`normfuse.optimize` of a committed export, once per run (the tests share it)."""
    return normfuse.optimize(MODELS_DIR / file)


def _ops(model: onnx.ModelProto) -> Counter:
    """Node op types over the main graph and every body."""
    return Counter(node.op_type for _, graph in graphs_by_scope(model.graph) for node in graph.node)


def test_manifest_covers_the_families_and_forms() -> None:
    forms = {(entry["architecture"], entry["exporter"], entry["form"]) for entry in ENTRIES}
    for family in ("llama", "gpt2", "qwen3", "phi3", "gemma2", "whisper"):
        wanted = {("optimum", "merged"), ("optimum", "with_past"), ("dynamo", "with_past")}
        assert {(family, *form) for form in wanted} <= forms
    # T5 (v1.0) and Flan-T5 (v1.1; mT5's graphs are the same): optimum only.
    assert {("t5", "optimum", "merged"), ("t5", "optimum", "with_past")} <= forms
    assert ("flan_t5", "optimum", "with_past") in forms
    assert any(entry["dtype"] == "float16" for entry in ENTRIES)


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_fuses_every_norm_site_in_every_scope(entry: dict) -> None:
    original = onnx.load(MODELS_DIR / entry["file"])
    result = optimized(entry["file"])
    assert not result.report.near_misses
    kinds = Counter(site.kind for site in result.report.sites)
    before, after = _ops(original), _ops(result.model)
    # An exporter's own LayerNormalization (dynamo at opset 18) counts as already fused.
    assert kinds["layer-norm"] == entry["layer_norm_sites"] - before["LayerNormalization"]
    assert kinds["rms-norm"] == entry["rms_norm_sites"] - before["RMSNormalization"]
    assert sum(after[op] for op in FUSED) == entry["layer_norm_sites"] + entry["rms_norm_sites"]
    if entry["form"] == "merged":  # half the sites in each branch, none in the main graph
        scopes = Counter(
            scope
            for scope, graph in graphs_by_scope(result.model.graph)
            for node in graph.node
            if node.op_type in FUSED
        )
        assert None not in scopes and sorted(scopes.values()) == [kinds.total() // 2] * 2


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_same_numerics_at_decode_step_and_prefill(entry: dict, step: str) -> None:
    """Both If branches of a merged decoder: use_cache_branch is true at the decode step only."""
    original = onnx.load(MODELS_DIR / entry["file"])
    sequence, past = STEPS[step]
    feeds = export_feeds(original, sequence, past, entry["int_input_high"])
    rtol = FLOAT32_ATOL if entry["dtype"] == "float32" else FLOAT16_RTOL
    assert_same_numerics(original, optimized(entry["file"]).model, rtol=rtol, base=feeds)


MERGED = [entry for entry in ENTRIES if entry["form"] == "merged"]
# T5 decoders: the attention output added to the residual comes through a Reshape whose dims
# are not proved (symbolic heads and lengths), so no Skip* site proves input and skip one shape.
NO_PROVED_SKIP = ("t5", "flan_t5")


@pytest.mark.parametrize("entry", MERGED, ids=[Path(e["file"]).stem for e in MERGED])
def test_residual_fusion_keeps_both_branches_exact(entry: dict) -> None:
    """With skip-norm too: optimum's merged decoders declare input_ids and attention_mask (where
    there is one) with the same symbol (`sequence_length`) although they differ at a decode step;
    the residual fusion's shape proof must not lean on that. Both branches stay exact; an RMS
    family gets Skip* sites."""
    original = onnx.load(MODELS_DIR / entry["file"])
    passes = ["layer-norm", "rms-norm", "skip-norm"]
    result = normfuse.optimize(MODELS_DIR / entry["file"], passes=passes)
    if entry["rms_norm_sites"] and entry["architecture"] not in NO_PROVED_SKIP:
        assert any(site.kind == "skip-norm" for site in result.report.sites)
    elif entry["architecture"] in NO_PROVED_SKIP:  # the residual's shape is not proved: left
        reasons = {miss.reason for miss in result.report.near_misses}
        assert "skip-shape" in reasons, reasons
    for sequence, past in STEPS.values():
        feeds = export_feeds(original, sequence, past, entry["int_input_high"])
        assert_same_numerics(original, result.model, base=feeds)


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_every_fused_site_matches_its_subgraph_alone(entry: dict) -> None:
    """With the types of each site's own scope, as `optimize(validation=...)` checks them."""
    path = MODELS_DIR / entry["file"]
    view, result = model_view.build(onnx.load(path), path.parent), optimized(entry["file"])
    checks = check_sites(
        view.model, result.model, result.report.sites, ValidationOptions(), path.parent, view.types
    )
    assert len(checks) == len(result.report.sites)
    assert all(check.passed for check in checks), [c.as_dict() for c in checks if not c.passed]


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_size_on_disk_and_weights_stay_in_place(entry: dict, tmp_path: Path) -> None:
    path = MODELS_DIR / entry["file"]
    original, result = onnx.load(path), optimized(entry["file"])
    before, after = initializer_scopes(original.graph), initializer_scopes(result.model.graph)
    assert {t: s for t, s in after.items() if t in before} == {
        t: s for t, s in before.items() if t in after
    }
    added = {name for name, scope in after.items() if name not in before}
    tensors = {t.name: t for _, g in graphs_by_scope(result.model.graph) for t in g.initializer}
    if entry["form"] == "merged":  # optimum keeps every weight in the main graph
        assert all(scope is None for name, scope in after.items() if tensors[name].dims)
    names = {n.name for _, g in graphs_by_scope(original.graph) for n in g.node}
    new_nodes = [
        n for _, g in graphs_by_scope(result.model.graph) for n in g.node if n.name not in names
    ]
    growth = sum(n.ByteSize() for n in new_nodes) + sum(tensors[t].ByteSize() for t in added)
    out = tmp_path / "fused.onnx"
    normfuse.save(result, out)
    assert out.stat().st_size <= path.stat().st_size + growth


def test_committed_kv_fixtures_stay_small() -> None:
    """Each KV fixture at most 400 KB, all of them at most 4 MiB; every file is listed."""
    files = list((MODELS_DIR / "real" / "kv").glob("*.onnx"))
    assert max(f.stat().st_size for f in files) <= 400 * 1024
    assert sum(f.stat().st_size for f in files) <= 4 * 1024 * 1024
    assert set(files) == {MODELS_DIR / entry["file"] for entry in MANIFEST["kv_decoders"]}


def test_pipeline_benchmark_says_when_the_optimizer_output_does_not_run(monkeypatch) -> None:
    """tests/benchmarks/kv_pipelines.py on a merged decoder, with an optimizer that writes what
    ONNX Runtime's writes for one (the graph emptied, outputs kept): the table says it does not
    load, normfuse after it is refused, and normfuse alone is recommended (no timing asserted)."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent / "benchmarks"))
    import kv_pipelines

    def emptying_optimizer(source: Path, out: Path, architecture: str) -> dict:
        model = onnx.load(source)
        del model.graph.node[:]
        del model.graph.initializer[:]
        onnx.save(model, out)
        return {}

    monkeypatch.setattr(kv_pipelines, "ort_transformers_optimize", emptying_optimizer)
    entry = next(e for e in ENTRIES if e["file"].endswith("llama_optimum_merged_opset17.onnx"))
    options = bench.BenchOptions(levels=("all",), runs=2, warmup=1, threads=1, sessions=1)
    row = kv_pipelines.measure(entry, options, bench.configure_threads(1))
    assert row["optimizer"]["runs"].startswith("empty graph (no node); does not load")
    assert row["optimizer>normfuse"]["runs"].startswith("normfuse failed")
    assert row["optimizer"]["difference"] is None and "ratio" not in row["optimizer"]
    assert row["normfuse"]["runs"] == "yes" and row["normfuse"]["left"] == 0
    assert row["normfuse"]["difference"] <= FLOAT32_ATOL
    assert row["recommended"].startswith("normfuse alone")
