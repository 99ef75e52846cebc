"""The Python API as the README shows it, and the package as installed."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import onnx
import pytest

ROOT = Path(__file__).resolve().parent.parent


def readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    found = re.search(r"<!-- api-example -->\s*```python\n(.*?)```", text, re.S)
    assert found, "README has no API example"
    return found.group(1)


def test_readme_api_example_runs(tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    for folder in ("models",):
        (tmp_path / folder).symlink_to(ROOT / folder)
    monkeypatch.chdir(tmp_path)
    exec(compile(readme_example(), "README.md", "exec"), {})
    printed = capsys.readouterr().out
    assert printed.startswith("5 sites fused")
    assert json.loads(printed[printed.index("{") :])["counts"]["layer-norm"] == 5
    assert [n.op_type for n in onnx.load("gpt2_fused.onnx").graph.node].count(
        "LayerNormalization"
    ) == 5


def test_passes_are_installed_as_normfuse_passes() -> None:
    import normfuse.passes

    assert normfuse.passes.PASS_NAMES == ("group-norm", "layer-norm", "rms-norm", "skip-norm")
    assert normfuse.passes.DEFAULT_PASS_NAMES == ("group-norm", "layer-norm", "rms-norm")
    assert Path(normfuse.passes.__file__).parent.name in ("passes",)
    assert os.path.basename(os.path.dirname(normfuse.__file__)) == "normfuse"


def test_targets_block_raising_the_opset_when_an_operator_changes_meaning() -> None:
    from models.builders import LayerNormSpec, norm_model, with_batch_norm
    from normfuse.target.targets import can_raise_opset, raise_blockers

    model = norm_model(LayerNormSpec(), opset=13)
    assert can_raise_opset(model, 17)
    model = with_batch_norm(model, training_outputs=True)
    assert not can_raise_opset(model, 17)
    assert raise_blockers(model, 17) == [
        "BatchNormalization-9 -> 14 drops the training outputs (mean, var, saved_mean, saved_var)"
    ]


def test_spelling_table_in_the_docs_matches_the_builders() -> None:
    from models.builders import spelling_table

    text = (ROOT / "docs" / "spellings-and-reasons.md").read_text()
    start = text.index("<!-- spellings:")
    body = text[text.index("\n", start) + 1 : text.index("<!-- /spellings -->")]
    assert body == spelling_table()


def test_bench_and_tune_are_reachable_from_the_package_in_a_fresh_interpreter() -> None:
    """issue 35: `normfuse.tune` raised AttributeError unless imported by hand."""
    import subprocess
    import sys

    code = (
        "import normfuse; from normfuse.bench import BenchModel; "
        "print(normfuse.tune.tune.__name__, normfuse.bench.run.__name__, BenchModel.__name__)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["tune", "run", "BenchModel"]


def test_the_documented_optimize_defaults_are_the_passes_run() -> None:
    from normfuse.passes import DEFAULT_PASS_NAMES

    import normfuse

    assert "group-norm, layer-norm, rms-norm" in normfuse.optimize.__doc__
    assert DEFAULT_PASS_NAMES == ("group-norm", "layer-norm", "rms-norm")


def test_every_example_in_the_python_api_page_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/python-api.md's examples run as written, from the repository root (issue 35: its
    bench example named undefined variables)."""
    root = Path(__file__).resolve().parent.parent
    text = (root / "docs" / "python-api.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    assert len(blocks) >= 2
    monkeypatch.chdir(root)
    for block in blocks:
        exec(compile(block, "docs/python-api.md", "exec"), {})


def test_the_light_pass_names_are_the_passes_in_driver_order() -> None:
    """`match.pass_names` (what `--help` reads without importing the passes) names exactly the
    passes, in the order the driver runs them."""
    from normfuse.passes import ALL_PASSES, PASS_NAMES

    assert tuple(fusion_pass.name for fusion_pass in ALL_PASSES) == PASS_NAMES
