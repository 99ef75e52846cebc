"""Batch-one latency of several models, timed side by side.

Sessions are created once per model, provider and level (creation is timed too). After a warm-up,
models are timed in interleaved rounds (A B C, B C A, C A B, ...: each model takes each position
equally often) so that drift on a shared machine hits them alike. Each model's median is compared
with the first model's, with a bootstrap confidence interval over rounds. On CUDA, inputs and
outputs stay on the device through I/O binding. With more than one intra-op thread, sessions share
ONNX Runtime's global thread pool (idle per-session pools spin and inflate the others' timings); if
the pool cannot be set up any more in this process, spinning is turned off instead and the report
says so.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from normfuse import sessions
from normfuse.errors import NormfuseError
from normfuse.inputs import graph_inputs, make_inputs

NORM_OPS = (
    "LayerNormalization",
    "SimplifiedLayerNormalization",
    "RMSNormalization",
    "SkipLayerNormalization",
    "SkipSimplifiedLayerNormalization",
    "GroupNormalization",
    "InstanceNormalization",
    "GroupNorm",
)
BOOTSTRAP_RESAMPLES = 2000


@dataclass(frozen=True)
class BenchModel:
    """A model to time: a display name, the model, the folder of its external data, and optionally
    its own ORT level and disabled ORT optimizers (overriding the options')."""

    name: str
    model: onnx.ModelProto
    base_dir: Path | None = None
    level: str | None = None
    disabled_optimizers: tuple[str, ...] = ()


@dataclass(frozen=True)
class BenchOptions:
    """What to time and how."""

    providers: tuple[str, ...] = ("cpu",)
    levels: tuple[str, ...] = ("all",)
    warmup: int = 20
    runs: int = 200
    threads: int | None = None
    dims: dict[str, int] = field(default_factory=dict)
    seed: int = 0
    npz: str | None = None
    disabled_optimizers: tuple[str, ...] = ()
    progress: bool = False
    clock: Callable[[], float] = time.perf_counter


@dataclass
class Timing:
    """One model on one provider at one level: per-round latencies (seconds) and what ORT fused."""

    model: str
    provider: str
    level: str
    samples: np.ndarray
    session_seconds: float
    norm_ops_after_ort: dict[str, int]
    ratio: float = 1.0
    ratio_interval: tuple[float, float] = (1.0, 1.0)

    def stats_ms(self) -> dict[str, float]:
        """Median, p90, p99, mean, min and standard deviation in milliseconds."""
        ms = self.samples * 1e3
        return {
            "median": float(np.median(ms)),
            "p90": float(np.percentile(ms, 90)),
            "p99": float(np.percentile(ms, 99)),
            "mean": float(ms.mean()),
            "min": float(ms.min()),
            "std": float(ms.std(ddof=1)) if ms.size > 1 else 0.0,
        }

    def as_dict(self) -> dict:
        """The JSON form (latencies in milliseconds)."""
        return {
            "model": self.model,
            "provider": self.provider,
            "level": self.level,
            **{f"{key}_ms": value for key, value in self.stats_ms().items()},
            "session_seconds": self.session_seconds,
            "ratio_to_first": self.ratio,
            "ratio_interval_95": list(self.ratio_interval),
            "norm_ops_after_ort": self.norm_ops_after_ort,
            "runs": int(self.samples.size),
        }


@dataclass
class BenchReport:
    """Every timing, the threads used, and notes."""

    timings: list[Timing]
    threads: str
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        """The JSON form."""
        return {
            "threads": self.threads,
            "timings": [timing.as_dict() for timing in self.timings],
            "notes": list(self.notes),
        }

    def table(self) -> str:
        """One row per model, provider and level."""
        lines = [
            f"intra-op threads: {self.threads}",
            f"{'model':<28}{'prov':<6}{'level':<9}{'median':>9}{'p90':>9}{'p99':>9}{'min':>9}"
            f"{'std':>8}{'session':>9}  {'ratio [95% CI]':<32}norm ops after ORT",
        ]
        for t in self.timings:
            s = t.stats_ms()
            low, high = t.ratio_interval
            verdict = "" if low <= 1.0 <= high else (" faster" if high < 1.0 else " slower")
            ops = ", ".join(f"{op} {n}" for op, n in t.norm_ops_after_ort.items()) or "none"
            lines.append(
                f"{t.model[:27]:<28}{t.provider:<6}{t.level:<9}{s['median']:>8.3f}m{s['p90']:>8.3f}m"
                f"{s['p99']:>8.3f}m{s['min']:>8.3f}m{s['std']:>7.3f}m{t.session_seconds:>8.2f}s  "
                f"{f'{t.ratio:.3f} [{low:.3f}, {high:.3f}]{verdict}':<32}{ops}"
            )
        lines.append("ratio: median / first model's median; an interval containing 1 is noise")
        lines.extend(f"note: {note}" for note in self.notes)
        return "\n".join(lines)


def run(
    models: list[BenchModel], options: BenchOptions, threading: Threading | None = None
) -> BenchReport:
    """Time `models` side by side on every provider and level (`threading`: from
    `configure_threads`, when the caller created sessions of its own first)."""
    first_inputs = [info.name for info in graph_inputs(models[0].model)]
    for model in models[1:]:
        if [info.name for info in graph_inputs(model.model)] != first_inputs:
            raise NormfuseError(f"{model.name} has other inputs than {models[0].name}")
    feeds, input_notes = make_inputs(models[0].model, options.dims, options.seed, options.npz)
    return run_with_feeds(models, options, feeds, threading, input_notes)


def run_with_feeds(
    models: list[BenchModel],
    options: BenchOptions,
    feeds: dict[str, np.ndarray],
    threading: Threading | None = None,
    notes: list[str] | None = None,
) -> BenchReport:
    """`run` with the inputs given."""
    threading = threading or configure_threads(options.threads)
    notes = [*threading.notes, *(notes or [])]
    timings = []
    for provider in options.providers:
        for level in options.levels:
            timings.extend(
                _time_group(models, provider, level, feeds, options, threading.global_pool)
            )
    return BenchReport(timings, threading.label, notes)


@dataclass(frozen=True)
class Threading:
    """Whether sessions share ORT's global thread pool, a label for reports, and notes."""

    global_pool: bool
    label: str
    notes: tuple[str, ...] = ()


def configure_threads(threads: int | None) -> Threading:
    """Share ORT's global pool when sessions may use several threads; it can only be set up
    before this process creates its first session (else: per-session pools without spinning)."""
    if threads == 1:
        return Threading(False, "1")
    try:
        ort.capi._pybind_state.set_global_thread_pool_sizes(threads or 0, 1)
    except Exception:  # the ORT environment already exists in this process
        note = "per-session thread pools with spinning disabled (global pool unavailable)"
        return Threading(False, f"{threads or 'ORT default'} per session, no spinning", (note,))
    return Threading(True, f"{threads or 'ORT default (one per physical core)'}, global pool")


def _session(
    model: BenchModel,
    provider: str,
    level: str,
    options: BenchOptions,
    global_pool: bool,
    save_to: Path | None = None,
) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.graph_optimization_level = sessions.LEVELS[model.level or level]
    so.log_severity_level = 4  # errors come back as exceptions; none printed
    if global_pool:
        so.use_per_session_threads = False
    else:
        if options.threads:
            so.intra_op_num_threads = options.threads
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if model.base_dir is not None:
        so.add_session_config_entry(sessions.EXTERNAL_FOLDER_KEY, str(model.base_dir))
    if save_to is not None:
        so.optimized_model_filepath = str(save_to)
        so.add_session_config_entry(
            "session.optimized_model_external_initializers_file_name", save_to.name + ".data"
        )
    disabled = model.disabled_optimizers or options.disabled_optimizers
    return sessions.create_with_options(model.model, provider, so, disabled)


def _time_group(
    models: list[BenchModel],
    provider: str,
    level: str,
    feeds: dict,
    options: BenchOptions,
    global_pool: bool,
) -> list[Timing]:
    runners, created, ort_ops = [], [], []
    for model in models:
        start = time.perf_counter()
        session = _session(model, provider, level, options, global_pool)
        created.append(time.perf_counter() - start)
        runners.append(_runner(session, provider, feeds))
        ort_ops.append(norm_ops_after_ort(model, provider, level, options, global_pool))
    samples = np.zeros((len(models), options.runs))
    total = options.warmup + options.runs
    count = len(runners)
    for round_index in range(total):
        # Rotate the order each round so that no model always runs first (a position bias of
        # about 2% was measured here with a fixed order).
        for position in range(count):
            index = (position + round_index) % count
            start = options.clock()
            runners[index]()
            elapsed = options.clock() - start
            if round_index >= options.warmup:
                samples[index, round_index - options.warmup] = elapsed
        if options.progress and round_index % 10 == 0:
            print(f"\r{provider}/{level}: round {round_index + 1}/{total}", end="", file=sys.stderr)
    if options.progress:
        print("\r" + " " * 40 + "\r", end="", file=sys.stderr)
    timings = []
    for index, model in enumerate(models):
        ratio, interval = ratio_with_interval(samples[0], samples[index], options.seed)
        timings.append(
            Timing(
                model.name,
                provider,
                model.level or level,
                samples[index],
                created[index],
                ort_ops[index],
                ratio,
                interval,
            )
        )
    return timings


def _runner(session: ort.InferenceSession, provider: str, feeds: dict):
    """A no-argument callable running one inference; on CUDA with device-resident I/O."""
    if provider != "cuda":
        return lambda: session.run(None, feeds)
    binding = session.io_binding()
    for name, value in feeds.items():
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(value, "cuda", 0))
    for output in session.get_outputs():
        binding.bind_output(output.name, "cuda", 0)

    def run_bound() -> None:
        session.run_with_iobinding(binding)
        binding.synchronize_outputs()

    return run_bound


def ratio_with_interval(
    base: np.ndarray, other: np.ndarray, seed: int = 0
) -> tuple[float, tuple[float, float]]:
    """median(other) / median(base), and a 95% bootstrap interval resampling paired rounds."""
    ratio = float(np.median(other) / np.median(base))
    if base is other or np.array_equal(base, other):
        return 1.0, (1.0, 1.0)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, base.size, (BOOTSTRAP_RESAMPLES, base.size))
    ratios = np.median(other[picks], axis=1) / np.median(base[picks], axis=1)
    low, high = np.percentile(ratios, [2.5, 97.5])
    return ratio, (float(low), float(high))


def norm_ops_after_ort(
    model: BenchModel, provider: str, level: str, options: BenchOptions, global_pool: bool
) -> dict:
    """Normalisation ops in the graph ORT's session optimiser saves at `level` (what ORT fused)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "optimized.onnx"
        save_optimized(model, provider, options, path, level, global_pool)
        saved = onnx.load(path, load_external_data=False)
    counts = Counter(node.op_type for node in saved.graph.node if node.op_type in NORM_OPS)
    return dict(sorted(counts.items()))


def save_optimized(
    model: BenchModel,
    provider: str,
    options: BenchOptions,
    path: Path,
    level: str = "all",
    global_pool: bool = False,
) -> None:
    """Let ORT optimise `model` as a session would and save the resulting graph to `path`."""
    _session(model, provider, level, options, global_pool, save_to=path)
