"""The planted faults of `run.py`: each a wrong rewrite or a wrong decision at a semantic point,
and the default-suite tests of the pass it touches, which must catch it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    """Replace `old` (exactly one occurrence) with `new` in `path`; `tests` must then fail."""

    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]
    fault: str


LAYER = ("tests/test_layer_norm.py",)
RMS = ("tests/test_rms_norm.py",)
GROUP = ("tests/test_group_norm.py",)
SKIP = ("tests/test_skip_norm.py",)
CHECKS = "src/normfuse/match/norm_checks.py"

MUTANTS = (
    Mutant(
        "eps-x10-layer-norm",
        "passes/layer_norm.py",
        "KIND, match, context, io, axes[0], eps, (scale, bias), extra_outputs=extra",
        "KIND, match, context, io, axes[0], eps * 10, (scale, bias), extra_outputs=extra",
        LAYER,
        "the fused LayerNormalization carries epsilon x10",
    ),
    Mutant(
        "eps-x10-rms-norm",
        "passes/rms_norm.py",
        "return fused_sites.fused_site(KIND, match, context, io, axes[0], eps, (scale,))",
        "return fused_sites.fused_site(KIND, match, context, io, axes[0], eps * 10, (scale,))",
        RMS,
        "the fused RMS norm carries epsilon x10",
    ),
    Mutant(
        "eps-x10-group-norm",
        "passes/group_norm.py",
        "context, io, axes[0], eps, (scale, None))",
        "context, io, axes[0], eps * 10, (scale, None))",
        GROUP,
        "the fused group-norm statistics carry epsilon x10",
    ),
    Mutant(
        "eps-x10-skip-norm",
        "passes/skip_norm.py",
        'fused = FusedNode(op, MS_DOMAIN, {"epsilon": epsilon}, inputs, extra_outputs=extra)',
        'fused = FusedNode(op, MS_DOMAIN, {"epsilon": epsilon * 10}, inputs, extra_outputs=extra)',
        SKIP,
        "the Skip* node carries epsilon x10",
    ),
    Mutant(
        "scale-bias-swapped",
        "passes/layer_norm.py",
        "KIND, match, context, io, axes[0], eps, (scale, bias), extra_outputs=extra",
        "KIND, match, context, io, axes[0], eps, "
        "(scale, bias) if bias is None else (bias, scale), extra_outputs=extra",
        LAYER,
        "the fused LayerNormalization takes the bias as scale and the scale as bias",
    ),
    Mutant(
        "skip-scale-dropped",
        "passes/skip_norm.py",
        '    inputs = (match["input"], match["skip"], gamma)\n',
        '    inputs = (match["input"], match["skip"], np.ones_like(gamma))\n',
        SKIP,
        "the Skip* node normalises with a unit scale: the model's gamma is lost",
    ),
    Mutant(
        "axis-off-by-one",
        "src/normfuse/match/fused_sites.py",
        '{"axis": axis, "epsilon": eps, "stash_type": stash_type}',
        '{"axis": axis - 1 if axis < 0 else axis, "epsilon": eps, "stash_type": stash_type}',
        LAYER,
        "every fused norm normalises from one axis earlier than its statistics",
    ),
    Mutant(
        "mismatched-axes-accepted",
        CHECKS,
        "    if len(set(found)) > 1:\n",
        "    if False:\n",
        LAYER,
        "a check skipped: mean and variance (or the two reductions) may reduce other axes",
    ),
    Mutant(
        "unbiased-variance-accepted",
        CHECKS,
        "        exact = effective == count\n",
        "        exact = effective in (count, count - 1)\n",
        LAYER,
        "a variance divided by d - 1 is fused as if divided by d",
    ),
    Mutant(
        "epsilon-outside-sqrt-accepted",
        "passes/layer_norm.py",
        '        "std_plus_epsilon", "epsilon-outside-sqrt",',
        '        "std_plus_epsilon_never_bound", "epsilon-outside-sqrt",',
        LAYER,
        "sqrt(var) + eps is fused as sqrt(var + eps)",
    ),
    Mutant(
        "reason-code-changed",
        CHECKS,
        '            "batch-axis",\n',
        '            "non-trailing-axes",\n',
        LAYER,
        "statistics over the batch axis are reported as non-trailing axes",
    ),
    Mutant(
        "overridable-initializer-read-as-constant",
        "src/normfuse/ir/graph_import.py",
        "if tensor.name in overridable_names and isinstance(tensor, gs.Constant):",
        "if False and isinstance(tensor, gs.Constant):",
        ("tests/test_soundness.py",),
        "an initializer the caller may override (a graph input too) is read as a constant",
    ),
    Mutant(
        "output-cast-dropped",
        "src/normfuse/rewrite/emit.py",
        "    if fused.output_cast is not None:\n",
        "    if False:\n",
        LAYER,
        "the Cast back to float16 after a float32 fused node is not emitted",
    ),
    Mutant(
        "skip-bias-reassociated",
        "passes/skip_norm.py",
        'Op("Add", Var("input"), Var("skip"), name="residual"), Const("skip_bias"), name="sum"',
        'Var("input"), Op("Add", Var("skip"), Const("skip_bias"), name="residual"), name="sum"',
        SKIP,
        "x + (skip + b) is fused as the kernel's (x + skip) + b",
    ),
    Mutant(
        "rms-epsilon-in-sum-unscaled",
        "passes/rms_norm.py",
        "        eps = eps / count",
        "        eps = eps",
        RMS,
        "sqrt((sum + e) / d) is fused with epsilon e instead of e / d",
    ),
    Mutant(
        "skip-axis-check-skipped",
        "passes/skip_norm.py",
        'if norm.attrs.get("axis", -1) not in (-1, rank - 1) or norm.attrs.get("stash_type", 1) '
        "!= 1:",
        'if norm.attrs.get("stash_type", 1) != 1:',
        SKIP,
        "a norm over the last two axes is fused into a Skip* op (which normalises the last)",
    ),
    Mutant(
        "group-statistics-axes-check-skipped",
        "passes/group_norm.py",
        "    if found != axes:\n",
        "    if False:\n",
        GROUP,
        "group statistics over other axes than the group's are fused",
    ),
    Mutant(
        "group-reshape-back-any-source",
        "passes/group_norm.py",
        "    return entry[0] is x or _shape_root(entry[0]) is _shape_root(x)\n",
        "    return True\n",
        GROUP,
        "a Reshape back to the Shape of any tensor (another input, a Transpose) counts as x's",
    ),
    Mutant(
        "shape-slice-window-off-by-one",
        "src/normfuse/facts/static_values.py",
        "    return entries[start:end]\n",
        "    return entries[start : end + 1]\n",
        GROUP,
        "Slice(Shape(x), 0, 1) read as two dims of x: the grouping target's batch misread",
    ),
    Mutant(
        "copied-target-ignores-allowzero",
        "src/normfuse/facts/shapes.py",
        '        or reader.attrs.get("allowzero", 0)\n',
        "",
        ("tests/test_recent_norms.py",),
        "a target copying its input's dims read as [0, 0, G, -1] under allowzero=1 (0 is 0)",
    ),
    Mutant(
        "shape-only-source-any-reader",
        "src/normfuse/prove/subgraph.py",
        'shape_only = all(readers.get(name) and readers[name] <= {"Shape", "Size"} for name in '
        "sources)",
        "shape_only = True",
        ("tests/test_validate.py",),
        "--validate feeds zeros for tensors read for their values, or for the site's own output",
    ),
    Mutant(
        "integer-mod-takes-the-dividends-sign",
        "src/normfuse/facts/folding.py",
        "    if not fmod:\n        return a % b\n",
        "    if False:\n        return a % b\n",
        ("tests/test_folder_differential.py",),
        "integer Mod with fmod=0 folded as C's remainder (-33 mod 17 read as -16, not 1)",
    ),
    Mutant(
        "float-to-int-cast-rounds",
        "src/normfuse/facts/folding.py",
        "truncated = np.trunc(value.astype(np.float64))",
        "truncated = np.round(value.astype(np.float64))",
        ("tests/test_folder_differential.py",),
        "Cast float -> int folded by rounding (16.9 read as 17), not toward zero",
    ),
    Mutant(
        "every-pass-disabled",
        "src/normfuse/rewrite/rounds.py",
        "        for pass_index, fusion_pass in enumerate(passes):\n",
        "        for pass_index, fusion_pass in enumerate(()):\n",
        ("tests/test_adversarial.py",),
        "no pass runs: nothing is fused and no near-miss is reported (the corpus pins outcomes)",
    ),
)
