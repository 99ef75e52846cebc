"""Batch-one latency of several models, timed side by side.

Timing runs in session sets: every model gets a fresh session in each set (its creation is timed
too), is warmed up, and is then timed in interleaved rounds (A B C, B C A, C A B, ...: each model
takes each position equally often) so that drift on a shared machine hits them alike. Sessions
differ in speed by where their memory landed: identical models created earlier in a process timed
up to ~10% slower than ones created later, beyond any round-to-round interval, and four identical
benches of one model read 0.95 to 1.055. So the order in which a set's sessions are created is
shuffled (seeded) and reversed in the next set, and the interval of each ratio (median / the
first model's median) is drawn over the sets' own ratios, not over rounds: where 95% of repeat
benches would put the ratio (Student's t on the spread of the sets' log ratios), widened where
needed to hold the ratio of each half of the sets (`half_of_each`). A word (`verdict`) says
`faster` or `slower` only when that interval lies beyond 1 ± 1% (EQUAL_WITHIN) and at least two
sets were timed: a claim a repeat would make too. On CUDA, inputs and outputs stay on the
device through I/O binding. Each session has its own intra-op thread pool (ONNX Runtime's
process-wide global pool is never set up: once it is, every later session in the process must
use it, a caller's own included); with more than one thread, spinning is turned off so that an
idle session's pool does not steal the CPU from the one being timed, and the report says so.
"""

from __future__ import annotations

import gc
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from normfuse.errors import NormfuseError
from normfuse.io.columns import (
    GAP,
    WIDTH,
    aligned,
    display_names,
    keyed_names,
    op_legend,
    short_op,
    wrap,
)
from normfuse.match.records import FUSED_NORM_OPS
from normfuse.measure.defaults import MIN_RUNS_PER_SET, RUNS, SESSION_SETS, WARMUP
from normfuse.measure.intervals import ratio_with_interval
from normfuse.measure.progress import Progress, format_seconds
from normfuse.prove import openvino_runtime, sessions
from normfuse.prove.inputs import graph_inputs, make_inputs

NORM_OPS = (*FUSED_NORM_OPS, "GroupNorm")  # and com.microsoft's GroupNorm
# Fewest session sets that can support `faster`, `slower` or `same` (one set measures no
# session-to-session variation).
MIN_SETS_FOR_VERDICT = 2
# Two identical models timed side by side differ by up to about 1%: read ratios within it as equal.
EQUAL_WITHIN = 0.01
# The words for a ratio's 95% interval against the band 1 ± EQUAL_WITHIN (see `verdict`).
FASTER, SLOWER, SAME, INCONCLUSIVE = "faster", "slower", "same", "inconclusive (more runs)"
# Fewest runs for a percentile to rest on at least ten samples beyond it (p90) or one (p99).
PERCENTILE_MIN_RUNS = {"p90": 10, "p99": 100}


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
    warmup: int = WARMUP
    runs: int = RUNS
    threads: int | None = None
    dims: dict[str, int] = field(default_factory=dict)
    seed: int = 0
    npz: str | None = None
    disabled_optimizers: tuple[str, ...] = ()
    progress: bool = False
    clock: Callable[[], float] = time.perf_counter
    sessions: int = SESSION_SETS  # session sets (fresh sessions for every model); at most `runs`
    # Seconds for the whole run (every provider and level): once the next session set would
    # pass its share, timing stops after the sets done (the first always runs). None: no limit.
    time_budget: float | None = None


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
    reference: bool = False  # the first model of its run: the others' ratios are to it
    blocks: np.ndarray | None = None  # the session set of each sample (None: one set)

    def stats_ms(self) -> dict[str, float | None]:
        """Median, p90, p99, mean, min and standard deviation in milliseconds; a percentile is None
        when there are too few runs to support it (`PERCENTILE_MIN_RUNS`)."""
        ms = self.samples * 1e3
        percentiles = {
            name: float(np.percentile(ms, int(name[1:]))) if ms.size >= least else None
            for name, least in PERCENTILE_MIN_RUNS.items()
        }
        return {
            "median": float(np.median(ms)),
            **percentiles,
            "mean": float(ms.mean()),
            "min": float(ms.min()),
            "std": float(ms.std(ddof=1)) if ms.size > 1 else 0.0,
        }

    def verdict(self) -> str:
        """The interval's word (`verdict`); `` for the reference, which the others are timed to,
        and `inconclusive` with fewer than `MIN_SETS_FOR_VERDICT` session sets."""
        if self.reference:
            return ""
        if session_sets(self.blocks) < MIN_SETS_FOR_VERDICT:
            return INCONCLUSIVE
        return verdict(self.ratio_interval)

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
            "verdict": self.verdict() or None,  # None for the reference
            "norm_ops_after_ort": self.norm_ops_after_ort,
            "runs": int(self.samples.size),
            "sessions": session_sets(self.blocks),
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

    def table(self, first_column: str = "model", wide: bool = False) -> str:
        """One row per model, provider and level, with distinct names (`first_column` heads
        them) and times with their units. Within 100 columns: the level, the median, the ratio
        with its interval and word, and ORT's norm ops abbreviated, long names keyed to a legend
        above the table; `wide`: every statistic the number of runs supports, the session
        creation time and full names, on one line each."""
        names, folder = display_names([t.model for t in self.timings], run_keys(self.timings))
        lines = [f"intra-op threads: {self.threads}"]
        if folder:
            lines.append(f"models in {folder}")
        if wide:
            rows, right = self._wide_rows(names, first_column)
        else:
            rows, right = self._rows(first_column)
            rest = max(len(line) for line in aligned([row[1:] for row in rows], right, wide=True))
            cells, legend = keyed_names(names, WIDTH - rest - len(GAP))
            for row, cell in zip(rows[1:], cells, strict=True):
                row[0] = cell
            lines += legend
        lines += aligned(rows, right, wide=True)
        sets = max((session_sets(t.blocks) for t in self.timings), default=1)
        footer = [f"ratio: median / first model's median {interval_text(sets)}", LABEL_LEGEND]
        if wide:
            footer += self._hidden_percentiles()
        else:
            ops = [op for t in self.timings for op in t.norm_ops_after_ort]
            footer += [f"norm ops after ORT: {op_legend(ops)}"] if op_legend(ops) else []
            footer.append("p90, p99, min, std and session creation time: --wide or --report")
        footer += [f"note: {note}" for note in self.notes]
        return "\n".join([*lines, *(wrap(line, wide) for line in footer)])

    def _rows(self, first_column: str) -> tuple[list[list[str]], set[int]]:
        """The narrow table's header and rows, their name cells left empty (to fill once the
        room for names is known), and its right-aligned columns."""
        several = len({t.provider for t in self.timings}) > 1
        rows = [[first_column, "level", "median", "ratio [95% interval]", "norm ops after ORT"]]
        for t in self.timings:
            low, high = t.ratio_interval
            word = t.verdict().split(" (")[0]  # `inconclusive`: the legend says what to do
            ops = ", ".join(f"{short_op(op)} {n}" for op, n in t.norm_ops_after_ort.items())
            rows.append(
                [
                    "",
                    f"{t.provider}/{t.level}" if several else t.level,
                    format_seconds(t.stats_ms()["median"] / 1e3),
                    f"{t.ratio:.3f} [{low:.3f}, {high:.3f}] {word}".rstrip(),
                    ops or "none",
                ]
            )
        return rows, {2}

    def _wide_rows(self, names: list[str], first_column: str) -> tuple[list[list[str]], set[int]]:
        """The wide table: every statistic the runs support, the session creation time and
        full op names."""
        columns = ["median", *self._shown_percentiles(), "min", "std"]
        rows = [[first_column, "prov", "level", *columns, "session", "ratio [95% interval]"]]
        rows[0].append("norm ops after ORT")
        for name, t in zip(names, self.timings, strict=True):
            stats = t.stats_ms()
            low, high = t.ratio_interval
            mark = f" {t.verdict()}" if t.verdict() else ""
            ops = ", ".join(f"{op} {n}" for op, n in t.norm_ops_after_ort.items()) or "none"
            rows.append(
                [
                    name,
                    t.provider,
                    t.level,
                    *(format_seconds(stats[column] / 1e3) for column in columns),
                    format_seconds(t.session_seconds),
                    f"{t.ratio:.3f} [{low:.3f}, {high:.3f}]{mark}",
                    ops,
                ]
            )
        return rows, set(range(3, 4 + len(columns)))

    def _runs(self) -> int:
        return min((t.samples.size for t in self.timings), default=0)

    def _shown_percentiles(self) -> list[str]:
        """The percentiles the number of runs supports (`PERCENTILE_MIN_RUNS`)."""
        return [name for name, least in PERCENTILE_MIN_RUNS.items() if self._runs() >= least]

    def _hidden_percentiles(self) -> list[str]:
        """A line naming the percentiles too few runs left out, if any."""
        hidden = [name for name in PERCENTILE_MIN_RUNS if name not in self._shown_percentiles()]
        if not hidden:
            return []
        return [
            f"{', '.join(hidden)} not shown: {self._runs()} runs are too few "
            f"(p90 needs {PERCENTILE_MIN_RUNS['p90']}, p99 {PERCENTILE_MIN_RUNS['p99']})"
        ]


def session_sets(blocks: np.ndarray | None) -> int:
    """How many session sets the samples were timed in."""
    return 1 if blocks is None or blocks.size == 0 else int(np.unique(blocks).size)


LABEL_LEGEND = (
    f"faster / slower: the whole interval lies beyond 1 ± {EQUAL_WITHIN:.0%}; same: it lies "
    f"inside; inconclusive: it crosses {1 - EQUAL_WITHIN:g} or {1 + EQUAL_WITHIN:g}, or fewer "
    f"than {MIN_SETS_FOR_VERDICT} session sets were timed (time more runs)"
)


def interval_text(sets: int) -> str:
    """What the table's intervals cover, for `sets` session sets."""
    if sets < MIN_SETS_FOR_VERDICT:
        return f"[interval: over the rounds of {sets} session set only, not between sessions]"
    return (
        f"[95% interval: where a repeat of this bench would put it, from the spread of the {sets} "
        "session sets' own ratios, widened to hold each half of the sets']"
    )


def verdict(interval: tuple[float, float]) -> str:
    """What a ratio's 95% interval says against the band 1 ± EQUAL_WITHIN: `faster` when it lies
    wholly below the band, `slower` wholly above, `same` wholly inside, and `inconclusive (more
    runs)` when it crosses an edge of the band (the data cannot tell which side it is on)."""
    low, high = interval
    if high < 1.0 - EQUAL_WITHIN:
        return FASTER
    if low > 1.0 + EQUAL_WITHIN:
        return SLOWER
    if low >= 1.0 - EQUAL_WITHIN and high <= 1.0 + EQUAL_WITHIN:
        return SAME
    return INCONCLUSIVE


def run_keys(timings: list[Timing]) -> list[int]:
    """For each timing, the number of the side-by-side run it belongs to (a run starts at its
    reference, the first model)."""
    keys, current = [], -1
    for timing in timings:
        current += timing.reference or current < 0
        keys.append(current)
    return keys


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
    groups = [
        (provider, level)
        for provider in options.providers
        for level in sessions.levels_for(provider, options.levels)
    ]
    for number, (provider, level) in enumerate(groups):
        later = len(groups) - number - 1
        group, note = _time_group(models, provider, level, feeds, options, later, len(groups))
        timings.extend(group)
        notes.extend([note] if note else [])
    return BenchReport(timings, threading.label, notes)


@dataclass(frozen=True)
class Threading:
    """How sessions are threaded, as a label for reports, and notes."""

    label: str
    notes: tuple[str, ...] = ()


def configure_threads(threads: int | None) -> Threading:
    """Per-session intra-op pools of `threads` (None: ORT's default, one per physical core); with
    more than one thread, spinning is off (see the module's docstring). Changes no process state."""
    if threads == 1:
        return Threading("1")
    count = threads or "ORT default (one per physical core)"
    note = (
        "thread pools do not spin between runs (an idle session's spinning pool would slow the "
        "one being timed); a lone session with spinning can be faster"
    )
    return Threading(f"{count} per session, spinning off", (note,))


def _session(
    model: BenchModel,
    provider: str,
    level: str,
    options: BenchOptions,
    save_to: Path | None = None,
) -> ort.InferenceSession | openvino_runtime.Session:
    if provider == openvino_runtime.NAME:
        return openvino_runtime.create(model.model, model.base_dir, options.threads)
    so = ort.SessionOptions()
    so.graph_optimization_level = sessions.LEVELS[model.level or level]
    so.log_severity_level = 4  # errors come back as exceptions; none printed
    if options.threads:
        so.intra_op_num_threads = options.threads
    if options.threads != 1:
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


@dataclass(frozen=True)
class SessionSet:
    """Fresh sessions for every model, created in `creation` order (model indices), then `warmup`
    untimed rounds and `runs` timed rounds."""

    creation: tuple[int, ...]
    warmup: int
    runs: int


def schedule(count: int, runs: int, warmup: int, sets: int, seed: int = 0) -> list[SessionSet]:
    """`runs` split over `sets` session sets (at most one per `MIN_RUNS_PER_SET` runs: fewer
    rounds per set leave each set's median, and so the interval, too coarse). The creation order
    is a seeded shuffle in even sets and its reverse in the next, so that over each pair every
    model is created, on average, in the middle (a drift with creation order cancels)."""
    sets = max(1, min(sets, runs // MIN_RUNS_PER_SET))
    rng = np.random.default_rng(seed)
    plan: list[SessionSet] = []
    for index in range(sets):
        if index % 2 == 0:
            creation = tuple(int(i) for i in rng.permutation(count))
        else:
            creation = plan[-1].creation[::-1]
        plan.append(SessionSet(creation, warmup, runs // sets + (index < runs % sets)))
    return plan


@dataclass
class Measured:
    """Timed samples (model x run, seconds), the session set of each run, and each model's
    session-creation seconds in each set."""

    samples: np.ndarray
    blocks: np.ndarray
    created: np.ndarray


def time_sets(
    plan: list[SessionSet],
    make_runner: Callable[[int], Callable[[], None]],
    clock: Callable[[], float],
    progress: Progress | None = None,
    budget: float | None = None,
) -> Measured:
    """Run `plan`: in each set, create every model's runner (`make_runner(index)`) in the set's
    order, warm up, time the rounds, and release the runners before the next set. Rounds rotate
    (in round r, counting every round of every set, position p runs model (p + r) % count).
    With a `budget` (in `clock` units), a set starts only when the sets so far, plus one more at
    their mean duration, fit in it; the first set always runs."""
    count = len(plan[0].creation)
    total = sum(item.runs for item in plan)
    samples, blocks = np.zeros((count, total)), np.zeros(total, dtype=int)
    created = np.zeros((count, len(plan)))
    column = round_index = 0
    begin = clock() if budget is not None else 0.0
    for number, item in enumerate(plan):
        if budget is not None and number:
            spent = clock() - begin
            if spent + spent / number > budget:
                return Measured(samples[:, :column], blocks[:column], created[:, :number])
        runners: dict[int, Callable[[], None]] = {}
        for index in item.creation:
            start = time.perf_counter()
            runners[index] = make_runner(index)
            created[index, number] = time.perf_counter() - start
        for round_in_set in range(item.warmup + item.runs):
            timed = round_in_set >= item.warmup
            for position in range(count):
                index = (position + round_index) % count
                start = clock()
                runners[index]()
                elapsed = clock() - start
                if timed:
                    samples[index, column] = elapsed
            round_index += 1
            if timed:
                blocks[column] = number
                column += 1
            if progress is not None:
                progress.update(column, None if timed else (round_in_set + 1, item.warmup))
        runners.clear()
        gc.collect()  # the next set's sessions start from memory this one freed
    return Measured(samples, blocks, created)


def _time_group(
    models: list[BenchModel],
    provider: str,
    level: str,
    feeds: dict,
    options: BenchOptions,
    later: int = 0,
    groups: int = 1,
) -> tuple[list[Timing], str]:
    """Time every model at one provider and level, and a note when the budget cut it short;
    `later`: how many such groups follow (for the progress line's estimate), `groups`: how many
    in all (each gets an equal share of a budget)."""
    ort_ops = [norm_ops_after_ort(model, provider, level, options) for model in models]
    plan = schedule(len(models), options.runs, options.warmup, options.sessions, options.seed)

    def make_runner(index: int) -> Callable[[], None]:
        return _runner(_session(models[index], provider, level, options), provider, feeds)

    share = None if options.time_budget is None else options.time_budget / groups
    label = f"{provider}/{level}"
    progress = Progress(label, options.runs, options.progress, later, share)
    measured = time_sets(plan, make_runner, options.clock, progress, share)
    progress.close()
    runs = measured.samples.shape[1]
    note = ""
    if runs < options.runs:
        note = (
            f"{label}: --time-budget stopped timing after {session_sets(measured.blocks)} of "
            f"{len(plan)} session set(s), {runs} of {options.runs} runs"
        )
    timings = []
    for index, model in enumerate(models):
        ratio, interval = ratio_with_interval(
            measured.samples[0], measured.samples[index], measured.blocks
        )
        timings.append(
            Timing(
                model.name,
                provider,
                model.level or level,
                measured.samples[index],
                float(np.median(measured.created[index])),
                ort_ops[index],
                ratio,
                interval,
                reference=index == 0,
                blocks=measured.blocks,
            )
        )
    return timings, note


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


def norm_ops_after_ort(model: BenchModel, provider: str, level: str, options: BenchOptions) -> dict:
    """Normalisation ops in the graph ORT's session optimiser saves at `level` (what ORT fused);
    on OpenVINO, its own normalisation operations in the compiled graph."""
    if provider == openvino_runtime.NAME:
        return _session(model, provider, level, options).norm_ops()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "optimized.onnx"
        save_optimized(model, provider, options, path, level)
        saved = onnx.load(path, load_external_data=False)
    counts = Counter(node.op_type for node in saved.graph.node if node.op_type in NORM_OPS)
    return dict(sorted(counts.items()))


def save_optimized(
    model: BenchModel,
    provider: str,
    options: BenchOptions,
    path: Path,
    level: str = "all",
) -> None:
    """Let ORT optimise `model` as a session would and save the resulting graph to `path`."""
    _session(model, provider, level, options, save_to=path)
