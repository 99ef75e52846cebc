"""Run normfuse over ONNX's own backend test cases (the generators shipped in the onnx wheel).

`cases()` collects them (a deterministic subset by default, every case with
`NORMFUSE_BACKEND=full`); `check_case` optimises one case in one configuration and says what went
wrong, if anything: an exception other than `NormfuseError`, a changed input `ModelProto`, changed
graph inputs or outputs, a model ONNX Runtime cannot run, or outputs that differ from the
original's. Run as a script (`python tests/backend_sweep.py`) it prints every outcome and the
fused-site coverage.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import pkgutil
import re
import sys
import tempfile
import traceback
import warnings
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

import normfuse

# The three configurations every case is optimised in: keyword arguments to `normfuse.optimize`.
CONFIGS: dict[str, dict] = {
    "default": {},
    "onnx": {"target": "onnx"},
    "skip-norm": {"passes": "layer-norm,rms-norm,skip-norm"},
}
# Also with validation on the case's own inputs (an .npz of its tensor inputs): see check_case.
VALIDATE = "validate"
CONFIGS[VALIDATE] = {}

# Ops whose cases are always in the default run: reductions and normalisations.
NORM_OPS = re.compile(r"^(Reduce\w*|\w*Normalization)$")
# Every SAMPLE_EVERY-th other case (sorted by name) is in the default run too.
SAMPLE_EVERY = 10
# Modules whose generators take most of the collection time (pooling references computed in numpy);
# none of their cases holds a normalisation, so the default run does not import them.
SLOW_MODULES = frozenset({"averagepool", "lppool", "maxpool"})

# float64: any two orders of a float64 reduction agree far below 1e-10 at these sizes.
FLOAT_TOLERANCE = {np.float16: 1e-2, np.float32: 1e-4, np.float64: 1e-10}
RANDOM_OPS = re.compile(r"^(Random\w*|Bernoulli|Multinomial|Dropout)$")

# NormfuseError messages accepted as "this model is out of normfuse's scope" (judged by hand;
# anything else on a model ONNX Runtime runs is a failure).
OUT_OF_SCOPE: tuple[re.Pattern, ...] = (
    # Validation feeds tensors only: a sequence or optional graph input cannot be fed.
    re.compile(r"^input '.*' is not a tensor; normfuse feeds tensors only$"),
)


def full_run() -> bool:
    """True when every case should run (`NORMFUSE_BACKEND=full`)."""
    return os.environ.get("NORMFUSE_BACKEND", "") == "full"


def _all_ops(model: onnx.ModelProto) -> set[str]:
    """The op types of the model's nodes, its functions' nodes and every subgraph's nodes."""
    ops: set[str] = set()

    def visit(nodes) -> None:
        for node in nodes:
            ops.add(node.op_type)
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    visit(attr.g.node)
                for graph in attr.graphs:
                    visit(graph.node)

    visit(model.graph.node)
    for function in model.functions:
        visit(function.node)
    return ops


def _collect_node_cases(full: bool) -> list:
    """ONNX's node test cases; the slow pooling modules only when `full`."""
    import onnx.backend.test.case.node as node_cases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        if full:
            return list(node_cases.collect_testcases())
        prefix = f"{node_cases.__name__}."
        for module in pkgutil.walk_packages(node_cases.__path__, prefix):
            if module.name.rsplit(".", 1)[-1] not in SLOW_MODULES:
                importlib.import_module(module.name)
        return list(node_cases._NodeTestCases)


def _all_model_cases() -> list:
    """ONNX's model test cases."""
    import onnx.backend.test.case.model as model_cases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return list(model_cases.collect_testcases())


def _collect_model_cases() -> list:
    """ONNX's model test cases that hold an in-memory model."""
    return [case for case in _all_model_cases() if case.model is not None]


def downloaded_cases() -> list[str]:
    """The names of ONNX's model cases whose model is a download (model zoo): not run here."""
    return sorted(case.name for case in _all_model_cases() if case.model is None)


def is_norm_case(case) -> bool:
    """True when the case's ops include a reduction or a normalisation."""
    return any(NORM_OPS.match(op) for op in _all_ops(case.model))


def is_unusual_case(case) -> bool:
    """True when the case imports a non-default domain or has a non-tensor graph input or output
    (sequence, optional, map): the shapes of model a fuser most easily mishandles."""
    graph = case.model.graph
    values = list(graph.input) + list(graph.output)
    return any(opset.domain not in ("", "ai.onnx") for opset in case.model.opset_import) or any(
        not info.type.HasField("tensor_type") for info in values
    )


def is_expanded_norm(name: str) -> bool:
    """True for ONNX's expanded (function-body) normalisation cases."""
    return "_expanded" in name and bool(re.search(r"normalization|mvn|instancenorm", name))


def _first_output_only(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` with only its first graph output, and the nodes it no longer needs
    removed (for plain graphs: the expanded norm cases have no subgraphs)."""
    pruned = onnx.ModelProto.FromString(model.SerializeToString())
    del pruned.graph.output[1:]
    needed = {pruned.graph.output[0].name}
    kept = []
    for node in reversed(pruned.graph.node):
        if needed.intersection(node.output):
            kept.append(node)
            needed.update(node.input)
    del pruned.graph.node[:]
    pruned.graph.node.extend(reversed(kept))
    return pruned


def one_output_variants(collected: list) -> list:
    """For each expanded norm case with several outputs (LayerNormalization's Mean and InvStdDev),
    the same case keeping only the normalised output: the form a fuser should fuse."""
    return [
        dataclasses.replace(case, name=f"{case.name}_y_only", model=_first_output_only(case.model))
        for case in collected
        if is_expanded_norm(case.name) and len(case.model.graph.output) > 1
    ]


def cases() -> list:
    """The cases to run, sorted by name: all of them when `full_run()`, else every norm case,
    every unusual one and every SAMPLE_EVERY-th other one; plus one_output_variants."""
    full = full_run()
    collected = _collect_node_cases(full) + _collect_model_cases()
    collected = sorted(collected + one_output_variants(collected), key=lambda c: c.name)
    if full:
        return collected
    always = {case.name for case in collected if is_norm_case(case) or is_unusual_case(case)}
    others = [case for case in collected if case.name not in always]
    sample = {case.name for case in others[::SAMPLE_EVERY]}
    return [case for case in collected if case.name in always or case.name in sample]


def _to_feed(value):
    """A data-set value as ONNX Runtime takes it (arrays, lists for sequences)."""
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list):
        return [_to_feed(item) for item in value]
    return value


def feeds(case) -> dict:
    """The case's first data set as a feed dict for its graph inputs."""
    inputs = case.data_sets[0][0]
    initializers = {tensor.name for tensor in case.model.graph.initializer}
    names = [info.name for info in case.model.graph.input if info.name not in initializers]
    return {name: _to_feed(value) for name, value in zip(names, inputs, strict=False)}


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    """A CPU session at ORT_DISABLE_ALL."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def _last_line(error: BaseException) -> str:
    """The exception's type and the last line of its message."""
    lines = str(error).strip().splitlines() or [""]
    return f"{type(error).__name__}: {lines[-1][:300]}"


def original_outputs(case) -> tuple[list | None, str | None]:
    """The original model's ORT outputs on the case's inputs, or (None, why it cannot run).
    Outputs are None (not compared) when the model is random and two runs differ."""
    try:
        outputs = session(case.model).run(None, feeds(case))
    except Exception as error:  # ORT cannot run the original: the case is skipped
        return None, f"ORT cannot run the original: {_last_line(error)}"
    if any(RANDOM_OPS.match(op) for op in _all_ops(case.model)):
        again = session(case.model).run(None, feeds(case))
        if compare_outputs(outputs, again) is not None:
            return None, "the original is random (two ORT runs differ)"
    return outputs, None


def _compare_one(expected, actual, label: str) -> str | None:
    """None when `actual` matches `expected`, else what differs."""
    if isinstance(expected, list) or isinstance(actual, list):
        if not (isinstance(expected, list) and isinstance(actual, list)):
            return f"{label}: sequence vs non-sequence"
        if len(expected) != len(actual):
            return f"{label}: sequence length {len(actual)} != {len(expected)}"
        for index, (x, y) in enumerate(zip(expected, actual, strict=True)):
            problem = _compare_one(x, y, f"{label}[{index}]")
            if problem:
                return problem
        return None
    if expected is None or actual is None:
        return None if expected is None and actual is None else f"{label}: optional presence"
    expected, actual = np.asarray(expected), np.asarray(actual)
    if expected.dtype != actual.dtype:
        return f"{label}: dtype {actual.dtype} != {expected.dtype}"
    if expected.shape != actual.shape:
        return f"{label}: shape {actual.shape} != {expected.shape}"
    tolerance = FLOAT_TOLERANCE.get(expected.dtype.type)
    if tolerance is None:
        if not np.array_equal(expected, actual):
            return f"{label}: {expected.dtype} values differ"
        return None
    x, y = expected.astype(np.float64), actual.astype(np.float64)
    if not np.array_equal(np.isnan(x), np.isnan(y)):
        return (
            f"{label}: NaN positions differ ({int(np.isnan(x).sum())} vs {int(np.isnan(y).sum())})"
        )
    finite = ~np.isnan(x)
    with np.errstate(all="ignore"):
        close = np.isclose(x[finite], y[finite], rtol=tolerance, atol=tolerance)
        if not close.all():
            diff = np.abs(x[finite] - y[finite])
            wrong = int((~close).sum())
            return f"{label}: max abs diff {float(np.nanmax(diff)):.3g} ({wrong} elements)"
    return None


def compare_outputs(expected: list, actual: list) -> str | None:
    """None when every output matches (NaN where NaN, float tolerance), else the first mismatch."""
    return _compare_one(list(expected), list(actual), "output")


def adversarial(x: np.ndarray) -> dict[str, np.ndarray]:
    """Hard values for a normalised input: constant rows (zero variance), zeros, underflowing
    squares, overflowing squares, a NaN, +inf and -inf, all negative. (A large common offset is
    left out: ONNX's function computes the variance as E[x^2] - E[x]^2, so the original itself is
    off by more than the tolerance there.)"""
    with np.errstate(all="ignore"):
        variants = {
            "zeros": np.zeros_like(x),
            "constant": np.full_like(x, 3.5),
            "tiny": (x * 1e-20).astype(x.dtype),
            "huge": (x * 1e18).astype(x.dtype),
            "negative": -np.abs(x),
        }
    for name, index, value in (("nan", 0, np.nan), ("inf", 0, np.inf), ("neginf", -1, -np.inf)):
        variants[name] = x.copy()
        variants[name].flat[index] = value
    return variants


def _interface(graph: onnx.GraphProto) -> tuple:
    """The graph's inputs and outputs: names and serialized types, in order."""
    return (
        [(info.name, info.type.SerializeToString()) for info in graph.input],
        [(info.name, info.type.SerializeToString()) for info in graph.output],
    )


def _checker_error(model: onnx.ModelProto, full_check: bool) -> str | None:
    """onnx.checker's complaint about `model` (last line), or None when it passes."""
    try:
        onnx.checker.check_model(model, full_check=full_check)
    except Exception as error:  # the checker raises several types
        return _last_line(error)
    return None


def _passes_checker(model: onnx.ModelProto, full_check: bool) -> bool:
    """True when onnx.checker accepts `model`."""
    return _checker_error(model, full_check) is None


def out_of_scope(message: str) -> bool:
    """True when a NormfuseError message is one judged out of scope (see OUT_OF_SCOPE)."""
    return any(pattern.search(message) for pattern in OUT_OF_SCOPE)


@dataclass
class Outcome:
    """What happened to one case in one configuration."""

    status: str  # "ok", "fail", "skip" (the original cannot run), "scoped" (out-of-scope error)
    problems: list[str] = field(default_factory=list)
    sites: list[str] = field(default_factory=list)  # "kind:op" per fused site
    near_misses: list[str] = field(default_factory=list)  # "reason: detail"


def _options(case, config: str, folder: str) -> dict:
    """The keyword arguments to `normfuse.optimize` for `config`; for VALIDATE, validation on the
    case's tensor inputs, written to an .npz in `folder`."""
    if config != VALIDATE:
        return CONFIGS[config]
    # Object (string) arrays cannot be read without pickle: normfuse draws those itself.
    tensors = {
        name: value
        for name, value in feeds(case).items()
        if isinstance(value, np.ndarray) and value.dtype != object
    }
    path = os.path.join(folder, "inputs.npz")
    np.savez(path, **tensors)
    return {"validation": normfuse.ValidationOptions(npz=path)}


def check_case(case, config: str, expected: list | None) -> Outcome:
    """Optimise `case.model` in `config` and check everything a caller relies on. `expected` is
    the original's ORT outputs (None: do not compare values)."""
    if config != VALIDATE:
        return _check(case, config, expected, CONFIGS[config])
    with tempfile.TemporaryDirectory() as folder:
        return _check(case, config, expected, _options(case, config, folder))


def _second_pass(fused: onnx.ModelProto, options: dict) -> list[str]:
    """What is wrong with optimising an optimised model again: it should fuse nothing and give
    identical bytes (docs/targets.md: a model where nothing is fused is returned unchanged)."""
    again = normfuse.optimize(onnx.ModelProto.FromString(fused.SerializeToString()), **options)
    problems = []
    if again.report.sites:
        problems.append(f"a second optimize fused {len(again.report.sites)} more sites")
    elif again.model.SerializeToString() != fused.SerializeToString():
        problems.append("a second optimize changed the optimised model")
    return problems


def _check(case, config: str, expected: list | None, options: dict) -> Outcome:
    """check_case with the optimize keyword arguments decided."""
    before = case.model.SerializeToString()
    model = onnx.ModelProto.FromString(before)
    try:
        result = normfuse.optimize(model, **options)
    except normfuse.NormfuseError as error:
        message = _last_line(error)
        if out_of_scope(str(error)):
            return Outcome("scoped", [message])
        return Outcome("fail", [f"refused: {message}"])
    except Exception as error:  # any other exception is a crash
        frames = traceback.extract_tb(error.__traceback__)
        where = f" at {frames[-1].filename.split('/')[-1]}:{frames[-1].lineno}" if frames else ""
        return Outcome("fail", [f"crash: {_last_line(error)}{where}"])
    problems = []
    if model.SerializeToString() != before:
        problems.append("the input ModelProto was changed")
    outcome = Outcome(
        "ok",
        sites=[f"{site.kind}:{site.op}" for site in result.report.sites],
        near_misses=[f"{miss.reason}: {miss.detail}" for miss in result.report.near_misses],
    )
    if _interface(result.model.graph) != _interface(case.model.graph):
        problems.append("graph inputs/outputs changed")
    if not result.report.sites and result.model.SerializeToString() != before:
        problems.append("nothing was fused but the model came back changed")
    if result.report.sites:
        problems.extend(_second_pass(result.model, options))
    full_check = config == "onnx"
    checked = not result.report.ort_only and _passes_checker(case.model, full_check)
    complaint = _checker_error(result.model, full_check) if checked else None
    if complaint:
        problems.append(f"onnx.checker rejects the output: {complaint}")
    if config == "onnx":
        domains = {node.domain for node in result.model.graph.node}
        domains -= {node.domain for node in case.model.graph.node} | {"", "ai.onnx"}
        if domains:
            problems.append(f"target=onnx wrote non-standard domains {sorted(domains)}")
    try:
        actual = session(result.model).run(None, feeds(case))
    except Exception as error:  # the optimised model does not run
        problems.append(f"ORT cannot run the output: {_last_line(error)}")
    else:
        if expected is not None:
            mismatch = compare_outputs(expected, actual)
            if mismatch:
                problems.append(f"outputs differ: {mismatch}")
    if problems:
        outcome.status = "fail"
        outcome.problems = problems
    return outcome


@dataclass
class Tally:
    """What a sweep saw: outcomes per configuration, fused sites per case, and the expanded norm
    cases left unfused with their near-miss reasons (default configuration)."""

    counts: dict[str, Counter] = field(default_factory=lambda: {c: Counter() for c in CONFIGS})
    fused: dict[str, dict[str, list[str]]] = field(default_factory=lambda: {c: {} for c in CONFIGS})
    unfused_expanded: dict[str, list[str]] = field(default_factory=dict)

    def record(self, name: str, config: str, outcome: Outcome) -> None:
        """Count one case x configuration."""
        self.counts[config][outcome.status] += 1
        if outcome.sites:
            self.fused[config][name] = outcome.sites
        elif config == "default" and outcome.status == "ok" and is_expanded_norm(name):
            self.unfused_expanded[name] = outcome.near_misses

    def as_dict(self) -> dict:
        """Plain data (for a pytest-xdist worker to hand to the controller)."""
        counts = {config: dict(counter) for config, counter in self.counts.items()}
        return {"counts": counts, "fused": self.fused, "unfused": self.unfused_expanded}

    def merge(self, data: dict) -> None:
        """Add what another process's tally saw (`as_dict`)."""
        for config, counter in data["counts"].items():
            self.counts[config].update(counter)
        for config, fused in data["fused"].items():
            self.fused[config].update(fused)
        self.unfused_expanded.update(data["unfused"])

    def lines(self) -> list[str]:
        """The summary: counts and fused sites per configuration, then the fused cases and the
        unfused expanded norm cases of the default configuration."""
        lines = []
        for config in CONFIGS:
            if not self.counts[config]:
                continue
            sites = sum(len(found) for found in self.fused[config].values())
            counts = ", ".join(f"{n} {k}" for k, n in sorted(self.counts[config].items()))
            lines.append(
                f"[{config}] {counts}; {sites} sites fused in {len(self.fused[config])} cases"
            )
        for name, sites in sorted(self.fused["default"].items()):
            lines.append(f"  fused {name}: {', '.join(sites)}")
        for name, misses in sorted(self.unfused_expanded.items()):
            reasons = "; ".join(miss[:110] for miss in misses) or "no near-miss"
            lines.append(f"  not fused {name}: {reasons}")
        return lines


TALLY = Tally()


def _main() -> None:
    """Print every failing case x configuration and the fused-site coverage."""
    selected = cases()
    print(f"{len(selected)} cases ({'full' if full_run() else 'default subset'})", flush=True)
    for case in selected:
        expected, why = original_outputs(case)
        if why and not why.startswith("the original is random"):
            for config in CONFIGS:
                TALLY.record(case.name, config, Outcome("skip", [why]))
            continue
        for config in CONFIGS:
            outcome = check_case(case, config, expected)
            TALLY.record(case.name, config, outcome)
            if outcome.status != "ok":
                problems = "; ".join(outcome.problems)
                print(f"{outcome.status.upper()} {case.name} [{config}]: {problems}")
        sys.stdout.flush()
    print("\n".join(TALLY.lines()))


if __name__ == "__main__":
    _main()
