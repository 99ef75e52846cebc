"""The output guard: a rewritten model is proved usable before anyone may write it.

It must have the original's signature (graph inputs and outputs: names, types, order; every
overridable initializer still there), be structurally sound, pass strict shape inference wherever
the original does, satisfy `onnx.checker` wherever the original does (for standard-operator
output), load in ONNX Runtime wherever the original does, and, where the original is small enough
(`MAX_RUN_BYTES`, no external data) and runs on generated inputs (`inputs.probe_dims`: 1 for
batch-like symbolic dims, `inputs.PROBE_DIM` for the others), run once on those inputs and give
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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np
import onnx
from onnx.external_data_helper import uses_external_data

from normfuse import inputs, sessions
from normfuse.errors import NormfuseError, first_line
from normfuse.float16_partition import Float16Reads, has_float16, read_float16
from normfuse.skeleton import skeleton
from normfuse.structure import check_structure

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
    one-line `detail`."""

    reason: str
    detail: str


class OutputGuard:
    """Checks rewrites of one original model; what is asked of the original is done once."""

    def __init__(self, original: onnx.ModelProto) -> None:
        self.original = original
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
        if self._threaded and self._early is None and runnable(self.original):
            self._early = _Worker(lambda: _Reference.of(self.original))

    def close(self) -> None:
        """Wait for an early run (nothing of it outlives the `optimize` call)."""
        if self._early is not None:
            self._early.join()

    def failure(self, optimised: onnx.ModelProto, ort_only: bool) -> Failure | None:
        """Why `optimised` would not stand in for the original, or None."""
        why = _signature_error(self.original, optimised)
        if why is not None:
            return Failure("output-signature", why)
        try:
            check_structure(optimised)
        except NormfuseError as error:
            return Failure("output-structure", str(error))
        rounding = self._rounding_failure(optimised)
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
        return ran if run is not None else reference.failure(optimised)

    def _rounding_failure(self, optimised: onnx.ModelProto) -> Failure | None:
        """Where ONNX Runtime's CPU provider rounds a float16 value that a node of both models
        reads in one and not the other (`float16_partition`: read from the graphs it runs)."""
        if not self._float16:
            original = has_float16(self.original)
            self._float16.append(read_float16(self.original) if original else None)
        before = self._float16[0]
        if before is None:
            return None
        after = read_float16(optimised)
        if after is None:  # the load check below says why
            return None
        differences = before.differences(after)
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
            reference = _Reference.of(self.original) if early is None else early.wait()
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


@dataclass(frozen=True)
class _Reference:
    """The original's one run: the generated feeds and its outputs."""

    feeds: dict[str, np.ndarray]
    names: tuple[str, ...]
    outputs: tuple

    @staticmethod
    def of(original: onnx.ModelProto) -> _Reference | None:
        """The original's run, or None where it is too large or does not load or run on
        generated inputs (then only the weightless checks apply)."""
        if not runnable(original):
            return None
        try:
            feeds, _ = inputs.make_inputs(original, inputs.probe_dims(original))
            session = sessions.create(original, "cpu", "disable")
            outputs = session.run(None, feeds)
        except Exception:  # whatever stops the original's run, the run is not a check
            return None
        names = tuple(info.name for info in original.graph.output)
        return _Reference(feeds, names, tuple(outputs))

    def failure(self, optimised: onnx.ModelProto) -> Failure | None:
        """The rewrite's run on the same feeds: loads, runs, same output shapes and types."""
        try:
            session = sessions.create(optimised, "cpu", "disable")
        except NormfuseError as error:
            return Failure("output-does-not-load", str(error))
        try:
            outputs = session.run(None, self.feeds)
        except Exception as error:  # ORT raises its own exception types
            return Failure("output-does-not-run", f"ONNX Runtime: {first_line(error)}")
        for name, before, after in zip(self.names, self.outputs, outputs, strict=True):
            changed = _changed(before, after)
            if changed is not None:
                return Failure("output-shape-changed", f"output {name!r}: {changed}")
        return None


def runnable(model: onnx.ModelProto) -> bool:
    """True when the guard runs `model`: no external data, at most `MAX_RUN_BYTES` serialized."""
    if any(uses_external_data(tensor) for tensor in model.graph.initializer):
        return False
    return model.ByteSize() <= MAX_RUN_BYTES


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
