"""Group norm in diffusion models as deployed: a small diffusers UNet and VAE decoder at real
channel counts, exported at run time (never committed), on ONNX Runtime's CPU provider.

Subjects (random weights, norms given a random affine; batch one):
- `unet`: `UNet2DModel` with block_out_channels (128, 256), one layer per block, 4-channel
  32x32 latents (group norms at 128 and 256 channels, 32 groups);
- `vae_decoder`: `AutoencoderKL`'s decoder with block_out_channels (128, 256), one layer per
  block, a 4-channel 32x32 latent to a 64x64 image (group norms at 128-256 channels);
- `<subject>_gn`: the subject's group norms alone: one `nn.GroupNorm` per distinct
  (channels, groups, epsilon, input shape) the subject calls, in one model, side by side.
Each is exported by TorchScript (opset 17) and by dynamo (opset 21, where `nn.GroupNorm` is one
`GroupNormalization`-21 node).

Pipelines: the original; normfuse (`normfuse.optimize`); ONNX Runtime's transformers optimizer
(`optimize_model`, opt_level 0, model_type 'unet' for both); the optimizer then normfuse. Per
pipeline: the group norms fused (normfuse's group-norm sites; the com.microsoft GroupNorm /
SkipGroupNorm nodes the optimizer wrote), normfuse's group-norm near-miss reasons, the largest
absolute output difference from the original at ORT_DISABLE_ALL, and the ratio of medians to the
original (`measure.bench`: ORT CPU, one intra-op thread, level all, a 95% bootstrap interval).
A pipeline whose output does not load or run on CPU is reported with its error and not timed.

Run on demand (not a test; needs the `models` and `benchmarks` extras), from the repository root:

    PYTHONPATH=. python tests/benchmarks/diffusion.py [--runs 30] [--subjects unet]
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from ort_optimizer import ort_transformers_optimize

import normfuse
from normfuse.measure import bench
from normfuse.prove import sessions
from normfuse.prove.inputs import make_inputs

EXPORTERS = (("torchscript", 17), ("dynamo", 21))
ORIGINAL, NF, OPT, OPT_NF = "original", "normfuse", "optimizer", "optimizer>normfuse"
PIPELINES = (ORIGINAL, NF, OPT, OPT_NF)
# The optimizer's model_type 'unet' for both subjects (ort_optimizer.ORT_MODEL_TYPES).
ARCHITECTURES = {"unet": "unet_block", "vae_decoder": "unet_block"}
GROUP_NORM_OPS = ("GroupNorm", "SkipGroupNorm")
NUMPY_TYPES = {torch.float32: np.float32, torch.float16: np.float16}
SHOWN_OPS = ("GroupNormalization", "InstanceNormalization", "LayerNormalization", *GROUP_NORM_OPS)


class _UNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        from diffusers import UNet2DModel

        self.model = UNet2DModel(
            sample_size=32,
            in_channels=4,
            out_channels=4,
            block_out_channels=(128, 256),
            layers_per_block=1,
            down_block_types=("DownBlock2D", "AttnDownBlock2D"),
            up_block_types=("AttnUpBlock2D", "UpBlock2D"),
            norm_num_groups=32,
        )

    def forward(self, sample: torch.Tensor, timestep: torch.Tensor) -> torch.Tensor:
        return self.model(sample, timestep, return_dict=False)[0]


class _Decoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        from diffusers import AutoencoderKL

        self.model = AutoencoderKL(
            in_channels=3,
            out_channels=3,
            down_block_types=("DownEncoderBlock2D",) * 2,
            up_block_types=("UpDecoderBlock2D",) * 2,
            block_out_channels=(128, 256),
            layers_per_block=1,
            latent_channels=4,
            norm_num_groups=32,
        )

    def forward(self, latent: torch.Tensor) -> torch.Tensor:
        return self.model.decode(latent, return_dict=False)[0]


class _GroupNorms(torch.nn.Module):
    """The given group norms side by side: input i goes through norm i."""

    def __init__(self, norms: list[torch.nn.GroupNorm]) -> None:
        super().__init__()
        self.norms = torch.nn.ModuleList(norms)

    def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(norm(x) for norm, x in zip(self.norms, inputs, strict=True))


def subject(name: str) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """A subject's module (eval, random norm affines) and its inputs."""
    torch.manual_seed(0)
    if name == "unet":
        model, inputs = _UNet(), {"sample": torch.randn(1, 4, 32, 32), "timestep": torch.ones(1)}
    else:
        model, inputs = _Decoder(), {"latent": torch.randn(1, 4, 32, 32)}
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.GroupNorm):
                module.weight.uniform_(0.5, 1.5)
                module.bias.normal_(0.0, 0.5)
    return model.eval(), inputs


def group_norms_alone(
    model: torch.nn.Module, inputs: dict[str, torch.Tensor]
) -> tuple[torch.nn.Module, dict[str, torch.Tensor], int]:
    """One model of the distinct group norms `model` calls (and their input shapes), random
    inputs for them, and how many group-norm calls `model` makes."""
    seen: dict[tuple, torch.nn.GroupNorm] = {}
    calls = 0

    def hook(module: torch.nn.GroupNorm, args: tuple) -> None:
        nonlocal calls
        calls += 1
        key = (module.num_channels, module.num_groups, module.eps, tuple(args[0].shape))
        seen.setdefault(key, module)

    norms = [m for m in model.modules() if isinstance(m, torch.nn.GroupNorm)]
    handles = [norm.register_forward_pre_hook(hook) for norm in norms]
    with torch.no_grad():
        model(*inputs.values())
    for handle in handles:
        handle.remove()
    alone = _GroupNorms(list(seen.values())).eval()
    feeds = {f"x{index}": torch.randn(*key[3]) for index, key in enumerate(seen)}
    return alone, feeds, calls


def export(model: torch.nn.Module, inputs: dict, exporter: str, opset: int, path: Path) -> None:
    """Export with static shapes; dynamo's per-node metadata dropped."""
    with torch.no_grad():
        torch.onnx.export(
            model,
            tuple(inputs.values()),
            str(path),
            dynamo=exporter == "dynamo",
            opset_version=opset,
            input_names=list(inputs),
            **({"external_data": False} if exporter == "dynamo" else {}),
        )
    saved = onnx.load(path)
    for node in saved.graph.node:
        del node.metadata_props[:]
    onnx.save(saved, path)


def build(source: Path, architecture: str, folder: Path) -> dict[str, dict]:
    """Every pipeline's output for `source`: its path, or the error that stopped it, and its
    group-norm counts."""
    built: dict[str, dict] = {ORIGINAL: {"path": source}}
    result = normfuse.optimize(source)
    normfuse.save(result, folder / "nf.onnx")
    built[NF] = {"path": folder / "nf.onnx", **_normfuse_counts(result)}
    try:
        ort_transformers_optimize(source, folder / "opt.onnx", architecture)
        built[OPT] = {"path": folder / "opt.onnx", "optimizer_gn": _optimizer_gn(folder)}
        after = normfuse.optimize(folder / "opt.onnx")
        normfuse.save(after, folder / "opt_nf.onnx")
        built[OPT_NF] = {"path": folder / "opt_nf.onnx", **_normfuse_counts(after)}
        built[OPT_NF]["optimizer_gn"] = built[OPT]["optimizer_gn"]
    except Exception as error:  # the optimizer's failure is a result, not hidden
        built.setdefault(OPT, {"error": _short(error)})
        built.setdefault(OPT_NF, {"error": _short(error)})
    return built


def _normfuse_counts(result: normfuse.OptimizeResult) -> dict:
    sites = sum(site.kind == "group-norm" for site in result.report.sites)
    reasons = Counter(m.reason for m in result.report.near_misses if m.kind == "group-norm")
    return {"normfuse_gn": sites, "reasons": dict(reasons)}


def _optimizer_gn(folder: Path) -> int:
    """The optimizer's group norms: com.microsoft GroupNorm / SkipGroupNorm nodes it wrote."""
    nodes = onnx.load(folder / "opt.onnx", load_external_data=False).graph.node
    return sum(node.op_type in GROUP_NORM_OPS and node.domain == "com.microsoft" for node in nodes)


def _short(error: Exception) -> str:
    """The error's first line; for a kernel ORT lacks, just that."""
    text = str(error).splitlines()[0] if str(error) else ""
    missing = re.search(r"Could not find an implementation for \S+", text)
    return missing.group(0) if missing else f"{type(error).__name__}: {text}"[:160]


def check_runs(built: dict[str, dict]) -> dict[str, np.ndarray | None]:
    """Run every pipeline's output at ORT_DISABLE_ALL on the same inputs; its largest absolute
    difference from the original (an error recorded where it does not load or run)."""
    reference_model = onnx.load(built[ORIGINAL]["path"])
    feeds, _ = make_inputs(reference_model, {}, 0)
    outputs = {}
    for name, item in built.items():
        if "error" in item:
            continue
        try:
            model = onnx.load(item["path"])
            item["model"] = model
            item["ops"] = _ops(model)
            session = sessions.create(model, "cpu", "disable", None)
            outputs[name] = session.run(None, feeds)
        except Exception as error:
            item["error"] = f"does not run on CPU: {_short(error)}"
            item.pop("model", None)
    reference = outputs[ORIGINAL]
    for name, values in outputs.items():
        built[name]["max_diff"] = max(
            float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
            for a, b in zip(reference, values, strict=True)
        )
    return feeds


def _ops(model: onnx.ModelProto) -> dict[str, int]:
    counts = Counter(node.op_type for node in model.graph.node)
    return {op: counts[op] for op in SHOWN_OPS if counts[op]}


def time_models(built: dict[str, dict], options: bench.BenchOptions, threading) -> None:
    """Ratio of medians to the original for every pipeline that runs (level all)."""
    runnable = [n for n in PIPELINES if "model" in built[n]]
    models = [bench.BenchModel(name, built[name]["model"]) for name in runnable]
    report = bench.run(models, options, threading)
    for timing in report.timings:
        item = built[timing.model]
        item["ms"] = float(np.median(timing.samples)) * 1e3
        item["ratio"] = (timing.ratio, timing.ratio_interval)


def row(label: str, built: dict[str, dict]) -> str:
    """One markdown row: per pipeline, group norms fused, max diff, latency ratio."""
    cells = []
    for name in PIPELINES:
        item = built[name]
        if "error" in item:
            gn = f"; opt GN {item['optimizer_gn']}" if "optimizer_gn" in item else ""
            ops = " ".join(f"{op} {n}" for op, n in item.get("ops", {}).items())
            cells.append(f"not run: {item['error']}{gn}" + (f"; ops: {ops}" if ops else ""))
            continue
        fused = []
        if "optimizer_gn" in item:
            fused.append(f"opt GN {item['optimizer_gn']}")
        if "normfuse_gn" in item:
            reasons = ", ".join(f"{r} {n}" for r, n in item["reasons"].items())
            left = f" (left: {reasons})" if reasons else ""
            fused.append(f"nf GN {item['normfuse_gn']}{left}")
        ops = " ".join(f"{op} {n}" for op, n in item["ops"].items()) or "-"
        timing = "-"
        if "ratio" in item:
            ratio, (low, high) = item["ratio"]
            timing = f"{ratio:.3f} [{low:.3f}, {high:.3f}]"
            timing = f"{item['ms']:.2f} ms" if name == ORIGINAL else timing
        diff = "" if name == ORIGINAL else f"; diff {item['max_diff']:.1e}"
        cells.append(f"{timing}; {'; '.join(fused) or 'fused -'}{diff}; ops: {ops}")
    return f"| {label} | " + " | ".join(cells) + " |"


def float64_distances(name: str, dtype: torch.dtype, seeds: int) -> list[str]:
    """The dynamo (opset 21) export of `name` in `dtype`, original and normfuse's output, each
    run at ORT_DISABLE_ALL on `seeds` standard-normal inputs, against the module in float64 (its
    weights first rounded to `dtype`, as the export holds them): per seed, the largest absolute
    error of each, their ratio, the mean absolute errors, and on how many elements normfuse's
    output is nearer and further than the original's."""
    model, inputs = subject(name)
    model = model.to(dtype)
    reference = copy.deepcopy(model).double()
    lines = [
        f"{name} dynamo opset 21 {dtype}: seed, max error original / normfuse (ratio), "
        "mean error original / normfuse, elements nearer / further"
    ]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.onnx"
        export(model, {k: v.to(dtype) for k, v in inputs.items()}, "dynamo", 21, path)
        result = normfuse.optimize(path)
        normfuse.save(result, Path(folder) / "nf.onnx")
        runs = [
            sessions.create(str(p), "cpu", "disable", None)
            for p in (path, Path(folder) / "nf.onnx")
        ]
        for seed in range(seeds):
            rng = np.random.default_rng(seed)
            feeds = {
                key: (rng.normal(0, 1, value.shape) if key != "timestep" else np.ones(value.shape))
                for key, value in inputs.items()
            }
            feeds = {key: value.astype(NUMPY_TYPES[dtype]) for key, value in feeds.items()}
            with torch.no_grad():
                exact = reference(*(torch.from_numpy(v.astype(np.float64)) for v in feeds.values()))
            errors = [
                np.abs(run.run(None, feeds)[0].astype(np.float64) - exact.numpy()) for run in runs
            ]
            before, after = (float(np.max(e)) for e in errors)
            lines.append(
                f"{seed}: {before:.2e} / {after:.2e} ({after / before:.3f}), "
                f"{errors[0].mean():.3e} / {errors[1].mean():.3e}, "
                f"{int((errors[1] < errors[0]).sum())} / {int((errors[1] > errors[0]).sum())}"
            )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subjects", default="unet,vae_decoder")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--sessions", type=int, default=3)
    parser.add_argument(
        "--distances",
        type=int,
        metavar="SEEDS",
        help="only the float64 distances (float32 and float16 dynamo exports) over this many seeds",
    )
    args = parser.parse_args()
    if args.distances:
        for name in args.subjects.split(","):
            for dtype in (torch.float32, torch.float16):
                print("\n".join(float64_distances(name, dtype, args.distances)))
        return 0
    options = bench.BenchOptions(
        levels=("all",), runs=args.runs, warmup=args.warmup, threads=1, sessions=args.sessions
    )
    threading = bench.configure_threads(1)
    lines = [
        f"onnxruntime {ort.__version__}, torch {torch.__version__}, CPU provider, one intra-op "
        f"thread, level all, {args.runs} rounds in {args.sessions} session sets; cells: original "
        "median ms, else median / original's [95% interval]; group norms fused; max abs diff "
        "from the original at ORT_DISABLE_ALL; the ops in the output",
        "",
        "| model | " + " | ".join(PIPELINES) + " |",
        "| --- |" + " --- |" * len(PIPELINES),
    ]
    for name in args.subjects.split(","):
        model, inputs = subject(name)
        alone, alone_inputs, calls = group_norms_alone(model, inputs)
        for exporter, opset in EXPORTERS:
            for suffix, module, feeds in (("", model, inputs), ("_gn", alone, alone_inputs)):
                label = f"{name}{suffix} {exporter} opset {opset}"
                with tempfile.TemporaryDirectory() as folder:
                    path = Path(folder) / "model.onnx"
                    try:
                        export(module, feeds, exporter, opset, path)
                    except Exception as error:
                        lines.append(f"| {label} | export failed: {_short(error)} |||")
                        continue
                    built = build(path, ARCHITECTURES[name], Path(folder))
                    check_runs(built)
                    time_models(built, options, threading)
                    label += "" if suffix else f" ({calls} group-norm calls)"
                    lines.append(row(label, built))
                print(lines[-1], file=sys.stderr, flush=True)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
