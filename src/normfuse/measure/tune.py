"""Find the fastest ONNX Runtime session settings for a model, by measurement.

Candidates: ORT levels basic, extended and all, and level all with each normalisation-related
fusion of ORT's disabled by name. ORT ignores names it does not know, so a fusion is a candidate
only if disabling it changes the graph ORT saves for this model (it touches the model's norm
sites). All candidates are timed side by side (see `measure.bench`) against ORT's default, level
all. A candidate wins only if its whole confidence interval lies below 0.99 (ratios within 1% of
1 read as equal: `bench.EQUAL_WITHIN`); of those, the one with the lowest median. Otherwise the
default stands.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from normfuse.errors import NormfuseError
from normfuse.io.columns import wrap
from normfuse.measure import bench
from normfuse.prove import openvino_runtime, sessions

# Names ORT's graph transformers have carried for norm fusions (used only where they have effect).
NORM_FUSIONS = (
    "LayerNormFusion",
    "LayerNormFusionL1",
    "LayerNormFusionL2",
    "SimplifiedLayerNormFusion",
    "SkipLayerNormFusion",
    "SkipSimplifiedLayerNormFusion",
    "BiasSkipLayerNormFusion",
    "EmbedLayerNormFusion",
)
DEFAULT_LEVEL = "all"
LEVEL_CONSTANTS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}


@dataclass(frozen=True)
class SessionConfig:
    """One candidate: an ORT level and optimizers disabled by name."""

    level: str
    disabled: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """`all`, `extended`, `all -SkipLayerNormFusion`, ..."""
        return " ".join([self.level, *(f"-{name}" for name in self.disabled)])

    def snippet(self, model_path: str, provider: str, wide: bool = True) -> str:
        """Python that creates a session with these settings; unless `wide`, the session's
        arguments one per line (within 100 columns for a path that fits)."""
        arguments = [repr(model_path), "options", f"providers=[{sessions.PROVIDERS[provider]!r}]"]
        if self.disabled:
            arguments.append(f"disabled_optimizers={list(self.disabled)!r}")
        call = f"session = ort.InferenceSession({', '.join(arguments)})"
        if not wide:
            call = "\n".join(
                ["session = ort.InferenceSession(", *(f"    {a}," for a in arguments), ")"]
            )
        lines = [
            "import onnxruntime as ort",
            "options = ort.SessionOptions()",
            "options.graph_optimization_level = "
            f"ort.GraphOptimizationLevel.{LEVEL_CONSTANTS[self.level]}",
            call,
        ]
        return "\n".join(lines)


@dataclass
class TuneResult:
    """Per provider: the timings of every candidate, and the chosen one."""

    provider: str
    timings: list[bench.Timing]
    configs: list[SessionConfig]
    best: SessionConfig
    beats_default: bool

    def as_dict(self, model_path: str) -> dict:
        """The JSON form."""
        best_timing = self.timings[self.configs.index(self.best)]
        return {
            "provider": self.provider,
            "candidates": [
                {"config": config.label, **timing.as_dict()}
                for config, timing in zip(self.configs, self.timings, strict=True)
            ],
            "best": self.best.label,
            "beats_default": self.beats_default,
            "ratio_to_default": best_timing.ratio,
            "ratio_interval_95": list(best_timing.ratio_interval),
            "snippet": self.best.snippet(model_path, self.provider),
        }


@dataclass
class TuneReport:
    """Every provider's result and notes."""

    results: list[TuneResult]
    threads: str
    notes: list[str] = field(default_factory=list)

    def as_dict(self, model_path: str) -> dict:
        """The JSON form."""
        return {
            "threads": self.threads,
            "results": [result.as_dict(model_path) for result in self.results],
            "notes": list(self.notes),
        }

    def text(self, model_path: str, wide: bool = False) -> str:
        """The table and the verdict for each provider, within 100 columns unless `wide`."""
        lines = [
            bench.BenchReport(
                [t for r in self.results for t in r.timings], self.threads, self.notes
            ).table("configuration", wide)
        ]
        for result in self.results:
            best = result.timings[result.configs.index(result.best)]
            low, high = best.ratio_interval
            if result.beats_default:
                lines += [
                    "",
                    wrap(
                        f"{result.provider}: fastest is '{result.best.label}': {best.ratio:.3f}x "
                        f"ORT's default [{low:.3f}, {high:.3f}]. Create the session with:",
                        wide,
                    ),
                    result.best.snippet(model_path, result.provider, wide),
                ]
            else:
                lines += [
                    "",
                    f"{result.provider}: nothing beats ORT's default (level all) by more than "
                    f"{bench.EQUAL_WITHIN:.0%} beyond noise; keep the default.",
                ]
        return "\n".join(lines)


def candidate_configs(
    model: bench.BenchModel, provider: str, options: bench.BenchOptions
) -> list[SessionConfig]:
    """ORT's default first, then other levels, then level all minus each effective norm fusion."""
    configs = [SessionConfig(DEFAULT_LEVEL), SessionConfig("extended"), SessionConfig("basic")]
    baseline = _saved_graph_signature(model, provider, SessionConfig(DEFAULT_LEVEL), options)
    for name in NORM_FUSIONS:
        config = SessionConfig(DEFAULT_LEVEL, (name,))
        if _saved_graph_signature(model, provider, config, options) != baseline:
            configs.append(config)
    return configs


def _saved_graph_signature(model, provider, config: SessionConfig, options) -> tuple:
    variant = dataclasses.replace(model, level=config.level, disabled_optimizers=config.disabled)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "optimized.onnx"
        bench.save_optimized(variant, provider, options, path)
        saved = onnx.load(path, load_external_data=False)
    return tuple(sorted(Counter(node.op_type for node in saved.graph.node).items()))


def tune(model: bench.BenchModel, options: bench.BenchOptions) -> TuneReport:
    """Time every candidate configuration on every provider; choose per provider."""
    if openvino_runtime.NAME in options.providers:
        raise NormfuseError("tune chooses ONNX Runtime session settings: use cpu or cuda")
    threading = bench.configure_threads(options.threads)
    results, notes, threads = [], [], threading.label
    for provider in options.providers:
        configs = candidate_configs(model, provider, options)
        variants = [
            dataclasses.replace(
                model, name=config.label, level=config.level, disabled_optimizers=config.disabled
            )
            for config in configs
        ]
        budget = options.time_budget and options.time_budget / len(options.providers)
        single = dataclasses.replace(
            options, providers=(provider,), levels=(DEFAULT_LEVEL,), time_budget=budget
        )
        report = bench.run(variants, single, threading)
        threads, notes = report.threads, report.notes
        results.append(choose(provider, configs, report.timings))
    return TuneReport(results, threads, notes)


def choose(provider: str, configs: list[SessionConfig], timings: list[bench.Timing]) -> TuneResult:
    """Of the configurations faster than the default (the first) beyond noise and beyond 1% (the
    whole interval below 0.99), the one with the lowest median; else the default."""
    faster = [index for index in range(1, len(timings)) if timings[index].verdict() == "faster"]
    if not faster:
        return TuneResult(provider, timings, configs, configs[0], False)
    best = min(faster, key=lambda index: timings[index].stats_ms()["median"])
    return TuneResult(provider, timings, configs, configs[best], True)
