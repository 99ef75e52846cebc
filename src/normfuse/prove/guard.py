"""The output guard: a rewritten model is proved usable before anyone may write it.

It must have the original's signature (graph inputs and outputs: names, types, order; every
overridable initializer still there), be structurally sound, pass strict shape inference wherever
the original does, satisfy `onnx.checker` wherever the original does (for standard-operator
output), load in ONNX Runtime wherever the original does, and, where the original is small enough
(`MAX_RUN_BYTES`, no external data) and runs on generated inputs (`inputs.probe_dim_choices`:
1 for batch-like symbolic dims, `inputs.PROBE_DIM` for the others, declared sums summed), run
on them and give
outputs of the original's shapes and element types. The checker, inference and the load of a
large model run on weightless skeletons (large and external initializers as typed inputs): no
external weight is read or copied. A failure is a `Failure` with a stable reason; the caller
attributes it to sites (`__init__._guarded`).

On a large graph (`EARLY_NODES`) the two runs are overlapped with other work on a worker thread
(ONNX Runtime releases the GIL while it builds a session): the original's, which does not depend
on the rewrite, from `start` on, beside the rewrite; each rewrite's, beside the weightless
checks, whose verdict still comes first. The same runs and the same verdicts, in the same order.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

import numpy as np
import onnx
from onnx.external_data_helper import uses_external_data

from normfuse.errors import NormfuseError, first_line
from normfuse.facts.float16_partition import Float16Reads, has_float16, read_float16
from normfuse.io.model_io import external_length
from normfuse.io.skeleton import skeleton
from normfuse.ir.float16_moves import MOVERS
from normfuse.ir.structure import check_structure
from normfuse.match.records import Site
from normfuse.prove import inputs, sessions
from normfuse.prove.compare import compare_output, distance, nearness, typical_distances
from normfuse.prove.float64_reference import Runner, float64_runner
from normfuse.prove.profiles import OFFSETS, profiled_feeds
from normfuse.prove.validate import narrowest_float_type

# Models up to this serialized size, with no external data, are run once; above it only the
# weightless checks run (a run reads and copies every weight).
MAX_RUN_BYTES = 256 * 2**20
# Graphs of at least this many nodes (main graph) have the guard's runs on a worker thread: below
# it, building a session takes well under a second and a thread would only add cost.
EARLY_NODES = 5_000
THREAD_NAME = "normfuse guard"
T = TypeVar("T")


@dataclass(frozen=True)
class Failure:
    """Why a rewritten model may not stand in for the original: a kebab-case `reason` and a
    one-line `detail`; a repair's `evidence` (`Repair.as_dict`)."""

    reason: str
    detail: str
    evidence: tuple[dict, ...] = ()


@dataclass(frozen=True)
class Repair:
    """An output of the rewrite that differs from the original's beyond tolerance on one input
    profile, and is no further than it from a float64 evaluation of the original (within the
    output's tolerance: `compare.no_further`)."""

    profile: str
    output: str
    original_to_float64: float
    rewrite_to_float64: float
    # Where the rewrite is further at its largest distance but not at its typical one (RMS,
    # `compare.TYPICAL_ALLOWANCE`): (original's, rewrite's) typical distances; None otherwise.
    typical: tuple[float, float] | None = None

    def as_dict(self) -> dict:
        """The JSON form: the profile, the output, each model's distance to float64 (null:
        infinitely far, a NaN or Inf where float64 is finite), why."""
        return {
            "profile": self.profile,
            "output": self.output,
            "original_to_float64": _finite_or_none(self.original_to_float64),
            "rewrite_to_float64": _finite_or_none(self.rewrite_to_float64),
            **(
                {"typical_to_float64": [_finite_or_none(value) for value in self.typical]}
                if self.typical
                else {}
            ),
            "why": "the rewrite differs from the original beyond tolerance on these inputs and "
            "is no further from a float64 evaluation of the original (within tolerance)",
        }

    def sentence(self) -> str:
        """One line for the table and a failure's detail."""
        where = f"output {self.output!r} differs on the {self.profile} inputs: "
        if self.typical is not None:
            return (
                f"{where}typical (RMS) {_short(self.typical[1])} from float64 against the "
                f"original's {_short(self.typical[0])} (largest {_short(self.rewrite_to_float64)}"
                f" against {_short(self.original_to_float64)})"
            )
        return (
            f"{where}{_short(self.rewrite_to_float64)} from float64 against the original's "
            f"{_short(self.original_to_float64)}"
        )


def _finite_or_none(value: float) -> float | None:
    return value if np.isfinite(value) else None


def _short(value: float) -> str:
    return f"{value:.3g}"


class OutputGuard:
    """Checks rewrites of one original model; what is asked of the original is done once."""

    def __init__(
        self,
        original: onnx.ModelProto,
        refuse_repairs: bool = False,
        base_dir: Path | None = None,
        probe: inputs.ProbeSizes = inputs.SMALL_PROBE,
    ) -> None:
        self.original = original
        # The sizes (and masks) the models are run at.
        self.probe = probe
        # The folder of the original's external weights (which the rewrite reads too).
        self.base_dir = base_dir
        # With it, a repair is a failure (`repair-refused`) and its site is left decomposed.
        self.refuse_repairs = refuse_repairs
        # The last model checked and its repairs (asked again by `repair_failure`).
        self._repairs: tuple[onnx.ModelProto | None, tuple[Repair, ...]] = (None, ())
        self._before: onnx.ModelProto | None = None
        self._original_errors: dict[str, str | None] = {}
        self._reference: _Reference | None = None
        self._reference_tried = False
        self._threaded = len(original.graph.node) >= EARLY_NODES
        self._early: _Worker[_Reference | None] | None = None
        self._float16: list[Float16Reads | None] = []

    def start(self) -> None:
        """Start the original's run on a worker thread where the graph is large
        (`EARLY_NODES`) and the run would happen (`runnable`); `close` waits for it."""
        if self._threaded and self._early is None and runnable(self.original, self.base_dir):
            self._early = _Worker(lambda: _Reference.of(self.original, self.base_dir, self.probe))

    def runs(self) -> bool:
        """Whether a rewrite is proved by running it beside the original (the original is
        small enough and runs on generated inputs); otherwise only the weightless checks apply."""
        return self._run_reference() is not None

    def close(self) -> None:
        """Wait for an early run (nothing of it outlives the `optimize` call)."""
        if self._early is not None:
            self._early.join()

    def failure(
        self, optimised: onnx.ModelProto, ort_only: bool, sites: Sequence[Site] = ()
    ) -> Failure | None:
        """Why `optimised` (with its fused `sites`) would not stand in for the original, or
        None."""
        why = _signature_error(self.original, optimised)
        if why is not None:
            return Failure("output-signature", why)
        try:
            check_structure(optimised)
        except NormfuseError as error:
            return Failure("output-structure", str(error))
        rounding = self._rounding_failure(optimised, sites)
        if rounding is not None:
            return rounding
        reference = self._run_reference()
        run = None
        if reference is not None and self._threaded:  # its load overlaps the checks below
            run = _Worker(lambda: reference.failure(optimised))
        try:
            found = self._weightless_failure(optimised, ort_only, loads=reference is None)
        except BaseException:
            if run is not None:  # nothing of a check outlives it, not even on an error
                run.join()
            raise
        ran = None if run is None else run.wait()
        if found is not None or reference is None:
            return found
        outcome = ran if run is not None else reference.failure(optimised)
        if isinstance(outcome, Failure):
            return outcome
        self._repairs = (optimised, outcome)
        if outcome and self.refuse_repairs:
            return _repair_failure(outcome)
        return None

    def repair_failure(self, optimised: onnx.ModelProto, ort_only: bool) -> Failure | None:
        """The repairs in `optimised` (which `failure` accepted; `ort_only` as there) as a
        failure with their evidence, to find the sites they come from; None where there are
        none, or where the models are not run (no repair can be seen)."""
        if self._repairs[0] is not optimised:
            if self._run_reference() is None:
                return None
            failure = self.failure(optimised, ort_only)
            if failure is not None:
                return failure
        repairs = self._repairs[1] if self._repairs[0] is optimised else ()
        return _repair_failure(repairs) if repairs else None

    def _rounding_failure(
        self, optimised: onnx.ModelProto, sites: Sequence[Site]
    ) -> Failure | None:
        """Where ONNX Runtime's CPU provider rounds a float16 value that a node of both models
        reads in one and not the other, or a fused node's input that the original's norm reads
        otherwise (`float16_partition`: read from the graphs it runs)."""
        if not self._float16:
            original = has_float16(self.original)
            self._float16.append(read_float16(self.original) if original else None)
        before = self._float16[0]
        if before is None:
            return None
        after = read_float16(optimised)
        if after is None:  # the load check below says why
            return None
        differences = before.differences(after) + _site_input_differences(
            before, after, optimised, sites
        )
        if not differences:
            return None
        more = f" (and {len(differences) - 1} more)" if len(differences) > 1 else ""
        return Failure("float16-rounding", f"ONNX Runtime: {differences[0]}{more}")

    def _weightless_failure(
        self, optimised: onnx.ModelProto, ort_only: bool, loads: bool
    ) -> Failure | None:
        """The first check on `optimised`'s skeleton that it fails and the original passes:
        the checker (not for ORT-only output), strict inference, and, with `loads` (no run
        proves it), ONNX Runtime's load."""
        after = skeleton(optimised)
        checks: list[tuple[str, Callable, str]] = [
            ("output-fails-checker", _checker_error, "onnx.checker"),
            ("output-fails-inference", _inference_error, "strict shape inference"),
        ]
        if ort_only:
            checks = checks[1:]
        if loads:
            checks.append(("output-does-not-load", _session_error, "ONNX Runtime"))
        for reason, check, what in checks:
            error = check(after)
            if error is not None and self._original_error(check, what) is None:
                return Failure(reason, f"{what}: {error}")
        return None

    def _original_error(self, check: Callable, what: str) -> str | None:
        """`check` on the original's skeleton, computed once (a model that was already stale or
        odd is not made worse by being rewritten)."""
        if what not in self._original_errors:
            if self._before is None:
                self._before = skeleton(self.original)
            self._original_errors[what] = check(self._before)
        return self._original_errors[what]

    def _run_reference(self) -> _Reference | None:
        if not self._reference_tried:
            early = self._early
            if early is None:
                reference = _Reference.of(self.original, self.base_dir, self.probe)
            else:
                reference = early.wait()
            self._reference, self._reference_tried = reference, True
        return self._reference


class _Worker(Generic[T]):
    """`compute()` on a worker thread; `wait` returns its value, or raises what it raised."""

    def __init__(self, compute: Callable[[], T]) -> None:
        self._outcome: list[tuple[bool, T | BaseException]] = []

        def work() -> None:
            try:
                self._outcome.append((True, compute()))
            except BaseException as error:  # re-raised by `wait`, in the caller's thread
                self._outcome.append((False, error))

        self._thread = threading.Thread(target=work, name=THREAD_NAME)
        self._thread.start()

    def join(self) -> None:
        """Wait until the thread has finished."""
        self._thread.join()

    def wait(self) -> T:
        """The value, once the thread has finished."""
        self.join()
        done, value = self._outcome[0]
        if not done:
            raise value
        return value


def _site_input_differences(
    before: Float16Reads, after: Float16Reads, optimised: onnx.ModelProto, sites: Sequence[Site]
) -> list[str]:
    """Each site whose fused node (main graph) reads its float16 input rounded where the
    original's norm reads it unrounded, or the other way round: an integer Cast to float16
    that ONNX Runtime merges with its own Cast to float32 in the original is not merged with
    the fused node's input Cast."""
    by_name = {node.name: node for node in optimised.graph.node}
    producers = {out: node for node in optimised.graph.node for out in node.output}
    found = []
    for site in sites:
        fused = by_name.get(f"{site.output}/{site.op}")
        if fused is None or not fused.input or not fused.output:
            continue
        rewrite = _fused_input_rounded(fused, producers, after)
        original = {
            rounded
            for (reader, tensor), rounded in before.rounded.items()
            if tensor == site.input and reader not in after.ops
        }
        if rewrite is None or len(original) != 1 or original == {rewrite}:
            continue
        found.append(
            f"the norm reads {site.input!r} {'rounded' if not rewrite else 'unrounded'} in the "
            f"original, {'rounded' if rewrite else 'unrounded'} into its fused node"
        )
    return found


def _fused_input_rounded(
    fused: onnx.NodeProto, producers: dict, after: Float16Reads
) -> bool | None:
    """Whether the fused node's input, followed back through its moves to its input Cast, is
    read rounded by that Cast (None: no such Cast, or its read is not known)."""
    reader, tensor = fused.output[0], fused.input[0]
    for _ in range(len(producers) + 1):
        node = producers.get(tensor)
        if node is None or (node.op_type != "Cast" and node.op_type not in MOVERS):
            break
        if node.op_type == "Cast":
            return after.is_rounded(node.output[0], node.input[0])
        reader, tensor = node.output[0], node.input[0]
    return after.is_rounded(reader, tensor)


def _repair_failure(repairs: tuple[Repair, ...]) -> Failure:
    """The repairs as the failure they are where repairs are refused (and, to find their sites,
    where they are not)."""
    more = f" (and {len(repairs) - 1} more)" if len(repairs) > 1 else ""
    detail = f"{repairs[0].sentence()}{more}"
    return Failure("repair-refused", detail, tuple(repair.as_dict() for repair in repairs))


@dataclass(frozen=True)
class _ProfileRun:
    """The original's runs on one input profile's feed sets, and their float64 evaluations
    (None: none)."""

    profile: str
    feeds: tuple[dict[str, np.ndarray], ...]
    outputs: tuple[tuple, ...]
    float64: tuple[tuple, ...] | None


@dataclass(frozen=True)
class _Reference:
    """The original's runs on every input profile (`profiles`), with their float64 evaluations."""

    runs: tuple[_ProfileRun, ...]
    names: tuple[str, ...]
    compute_dtype: str | None
    base_dir: Path | None = None

    @staticmethod
    def of(
        original: onnx.ModelProto,
        base_dir: Path | None = None,
        probe: inputs.ProbeSizes = inputs.SMALL_PROBE,
    ) -> _Reference | None:
        """The original's runs, or None where it is too large or does not load or run on
        generated inputs (then only the weightless checks apply). A profile the original does
        not run on is left out."""
        if not runnable(original, base_dir):
            return None
        try:
            session = sessions.create(original, "cpu", "disable", base_dir)
        except Exception:  # whatever stops the original's run, the run is not a check
            return None
        found = _first_run(session, original, probe)
        if found is None:
            return None
        feeds, first = found
        wide, _ = float64_runner(original, base_dir)
        runs = []
        profiled = profiled_feeds(feeds, original, draws=len(OFFSETS))
        for profile, sets in profiled.items():
            try:
                outputs = [session.run(None, one) if one is not feeds else first for one in sets]
            except Exception:  # an input the model rejects (an index, a size) proves nothing
                continue
            if any(_changed(a, b) for run in outputs for a, b in zip(first, run, strict=True)):
                continue  # the values size the outputs: not the same computation
            wide_runs = [_float64(wide, one) for one in sets]
            float64 = None if any(run is None for run in wide_runs) else tuple(wide_runs)
            runs.append(_ProfileRun(profile, tuple(sets), tuple(map(tuple, outputs)), float64))
        names = tuple(info.name for info in original.graph.output)
        return _Reference(tuple(runs), names, narrowest_float_type(original), base_dir)

    def failure(self, optimised: onnx.ModelProto) -> Failure | tuple[Repair, ...]:
        """The rewrite's runs on the same feeds: it loads, runs, gives outputs of the same
        shapes and types, each within tolerance of the original's or no further from float64
        (a repair, returned), a profile's feed sets judged together; otherwise the failure."""
        try:
            session = sessions.create(optimised, "cpu", "disable", self.base_dir)
        except NormfuseError as error:
            return Failure("output-does-not-load", str(error))
        repairs: list[Repair] = []
        for run in self.runs:
            try:
                outputs = [session.run(None, one) for one in run.feeds]
            except Exception as error:  # ORT raises its own exception types
                where = f" (on the {run.profile} inputs)" if run.profile != "normal" else ""
                return Failure("output-does-not-run", f"ONNX Runtime{where}: {first_line(error)}")
            for index, name in enumerate(self.names):
                for before, after in zip(run.outputs, outputs, strict=True):
                    changed = _changed(before[index], after[index])
                    if changed is not None:
                        return Failure("output-shape-changed", f"output {name!r}: {changed}")
                before = _joined([one[index] for one in run.outputs])
                after = _joined([one[index] for one in outputs])
                reference = None
                if run.float64 is not None:
                    reference = _joined([one[index] for one in run.float64])
                judged = self._judge(run.profile, name, before, after, reference)
                if isinstance(judged, Failure):
                    return judged
                repairs += judged
        return tuple(repairs)

    def _judge(self, profile: str, name: str, before, after, reference) -> Failure | list[Repair]:
        """One output on one profile: equal within tolerance ([]), a repair, or a failure."""
        if not isinstance(before, np.ndarray):
            return []  # sequences and optional values: their kind and shapes are checked
        comparison = compare_output(name, before, after, compute_dtype=self.compute_dtype)
        if comparison.passed:
            return []
        where = f"output {name!r} on the {profile} inputs"
        if not isinstance(reference, np.ndarray) or reference.shape != before.shape:
            return Failure(
                "output-differs",
                f"{where}: {comparison.detail} (no float64 evaluation to judge it by)",
            )
        original, rewrite = distance(before, reference), distance(after, reference)
        how = nearness(after, before, reference, comparison.atol, comparison.rtol)
        if how is not None:
            typical = typical_distances(after, before, reference) if how == "typical" else None
            return [Repair(profile, name, original, rewrite, typical)]
        return Failure(
            "output-differs",
            f"{where}: {comparison.detail}; {_short(rewrite)} from float64 against the "
            f"original's {_short(original)}",
        )


def _joined(values: list):
    """One profile's values of an output over its feed sets, as one array (stacked); the value
    itself where there is one set or it is not an array."""
    if len(values) == 1 or not all(isinstance(value, np.ndarray) for value in values):
        return values[0]
    return np.stack(values)


def _float64(run: Runner | None, feeds: dict[str, np.ndarray]) -> tuple | None:
    if run is None:
        return None
    try:
        return tuple(run(feeds))
    except Exception:  # a float64 run that fails judges nothing
        return None


def runnable(model: onnx.ModelProto, base_dir: Path | None = None) -> bool:
    """True when the guard runs `model`: at most `MAX_RUN_BYTES`, its external weights (read
    from `base_dir`, which must be known) counted."""
    external = [t for t in model.graph.initializer if uses_external_data(t)]
    if external and base_dir is None:
        return False
    return model.ByteSize() + sum(map(external_length, external)) <= MAX_RUN_BYTES


def _changed(before, after) -> str | None:
    """How the value `after` differs from `before` in kind, shape or element type, or None."""
    if isinstance(before, np.ndarray) or isinstance(after, np.ndarray):
        if not (isinstance(before, np.ndarray) and isinstance(after, np.ndarray)):
            return f"{type(before).__name__} became {type(after).__name__}"
        if before.shape != after.shape or before.dtype != after.dtype:
            return f"{before.dtype}{list(before.shape)} became {after.dtype}{list(after.shape)}"
        return None
    if isinstance(before, list) and isinstance(after, list):
        if len(before) != len(after):
            return f"a sequence of {len(before)} became one of {len(after)}"
        found = (_changed(a, b) for a, b in zip(before, after, strict=True))
        return next((change for change in found if change is not None), None)
    if type(before) is not type(after):
        return f"{type(before).__name__} became {type(after).__name__}"
    return None


def _signature_error(original: onnx.ModelProto, optimised: onnx.ModelProto) -> str | None:
    for field in ("input", "output"):
        before = [info.SerializeToString() for info in getattr(original.graph, field)]
        after = [info.SerializeToString() for info in getattr(optimised.graph, field)]
        if before != after:
            return f"its graph {field}s differ from the original's"
    names = {info.name for info in original.graph.input}
    defaults = {t.name for t in original.graph.initializer if t.name in names}
    kept = {t.name for t in optimised.graph.initializer}
    if not defaults <= kept:
        missing = sorted(defaults - kept)[0]
        return f"the default value of graph input {missing!r} was lost"
    return None


def _checker_error(model: onnx.ModelProto) -> str | None:
    try:
        onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as error:
        return first_line(error)
    except Exception as error:  # the checker itself tripped over the model
        return f"{type(error).__name__}: {first_line(error)}"
    return None


def _inference_error(model: onnx.ModelProto) -> str | None:
    """Strict inference with declared value_info set aside (it may be stale in the original)."""
    stripped = onnx.ModelProto()
    stripped.CopyFrom(model)
    del stripped.graph.value_info[:]
    try:
        onnx.shape_inference.infer_shapes(stripped, check_type=True, strict_mode=True)
    except Exception as error:
        return first_line(error)
    return None


def _session_error(model: onnx.ModelProto) -> str | None:
    """Why ONNX Runtime's CPU provider cannot load `model` (graph optimisations off), or None."""
    try:
        sessions.create(model, "cpu", "disable")
    except NormfuseError as error:
        return str(error)
    return None


def _first_run(
    session, original: onnx.ModelProto, probe: inputs.ProbeSizes = inputs.SMALL_PROBE
) -> tuple[dict, list] | None:
    """The feeds of the first of `inputs.probe_dim_choices` the original runs on, and its
    outputs; None where it runs on none."""
    for dims in inputs.probe_dim_choices(original, probe):
        try:
            feeds, _ = inputs.make_inputs(original, dims)
            if probe.padded_masks:
                feeds = inputs.padded_masks(feeds)
            return feeds, session.run(None, feeds)
        except Exception:  # an input the model rejects: the next choice
            continue
    return None
