"""Shared test helpers: random inputs, running models in ONNX Runtime, comparing outputs."""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from normfuse.measure import bench

FLOAT32_ATOL = 1e-4


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    """A CPU session with every graph optimisation disabled, so ORT's fusions cannot hide bugs."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def random_inputs(
    model: onnx.ModelProto, dims: dict | None = None, seed: int = 0, int_high: int = 16
) -> dict[str, np.ndarray]:
    """Inputs for every graph input: symbolic dims from `dims` (default 2), floats ~ N(0, 2) + 1,
    integer masks all ones, other integers uniform in [0, int_high)."""
    rng = np.random.default_rng(seed)
    initializers = {tensor.name for tensor in model.graph.initializer}
    feeds = {}
    for info in model.graph.input:
        if info.name in initializers:
            continue
        tensor_type = info.type.tensor_type
        shape = [
            dim.dim_value if dim.HasField("dim_value") else (dims or {}).get(dim.dim_param, 2)
            for dim in tensor_type.shape.dim
        ]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
        if np.issubdtype(dtype, np.floating):
            feeds[info.name] = (rng.normal(1.0, 2.0, shape)).astype(dtype)
        elif "mask" in info.name:
            feeds[info.name] = np.ones(shape, dtype)
        else:
            feeds[info.name] = rng.integers(0, int_high, shape).astype(dtype)
    return feeds


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Every output of `model` on `feeds`, with ORT at ORT_DISABLE_ALL."""
    return session(model).run(None, feeds)


def max_abs_diff(a: onnx.ModelProto, b: onnx.ModelProto, feeds: dict) -> float:
    """The largest absolute difference over all outputs of two models on the same inputs."""
    diffs = [
        float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64))))
        for x, y in zip(run(a, feeds), run(b, feeds), strict=True)
    ]
    return max(diffs)


def op_types(model: onnx.ModelProto) -> list[str]:
    """The op types of the model's nodes, in order."""
    return [node.op_type for node in model.graph.node]


def op_counts(model: onnx.ModelProto) -> Counter:
    """How many nodes of each op type the model has."""
    return Counter(op_types(model))


def adversarial_inputs(
    model: onnx.ModelProto,
    dims: dict | None = None,
    seed: int = 0,
    base: dict[str, np.ndarray] | None = None,
) -> dict[str, dict[str, np.ndarray]]:
    """Named input sets that stress a norm's statistics: random, large (x 1e4), tiny (x 1e-4),
    constant rows (every value along the last axis equal), all negative, and outliers (one
    value per row 1e3 times the rest), each a transform of the float inputs of `base`
    (default: `random_inputs`)."""
    base = random_inputs(model, dims, seed) if base is None else base
    rng = np.random.default_rng(seed + 1)
    cases: dict[str, dict[str, np.ndarray]] = {}
    transforms = {
        "random": lambda x: x,
        "large": lambda x: x * 1e4,
        "tiny": lambda x: x * 1e-4,
        "constant_rows": lambda x: np.broadcast_to(x[..., :1], x.shape).copy(),
        "negative": lambda x: -np.abs(x) - 5.0,
        "outliers": lambda x: _with_outliers(x, rng),
    }
    for name, transform in transforms.items():
        with np.errstate(over="ignore"):  # float16 inputs x 1e4 may overflow: inf is a case too
            cases[name] = {
                key: transform(value).astype(value.dtype)
                if np.issubdtype(value.dtype, np.floating)
                else value
                for key, value in base.items()
            }
    return cases


def _with_outliers(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    out = x.copy()
    if out.ndim == 0 or out.shape[-1] == 0:
        return out
    index = rng.integers(0, out.shape[-1], out.shape[:-1])
    np.put_along_axis(
        out, index[..., None], np.take_along_axis(out, index[..., None], -1) * 1e3, -1
    )
    return out


def assert_same_numerics(
    original: onnx.ModelProto,
    fused: onnx.ModelProto,
    dims: dict | None = None,
    seed: int = 0,
    rtol: float = FLOAT32_ATOL,
    base: dict[str, np.ndarray] | None = None,
) -> None:
    """`fused` computes what `original` does on every adversarial input set (ORT_DISABLE_ALL;
    transforms of `base` when given): the same NaNs and infinities, and elsewhere the largest
    difference at most `rtol` times the largest finite output magnitude (at least 1). One session
    per model serves every set."""
    sessions = session(original), session(fused)
    for name, feeds in adversarial_inputs(original, dims, seed, base).items():
        outputs = [model_session.run(None, feeds) for model_session in sessions]
        for expected, actual in zip(*outputs, strict=True):
            expected, actual = expected.astype(np.float64), actual.astype(np.float64)
            special = ~np.isfinite(expected)
            assert np.array_equal(expected[special], actual[special], equal_nan=True), name
            assert np.all(np.isfinite(actual[~special])), name
            finite = expected[~special]
            error = np.max(np.abs(finite - actual[~special]), initial=0.0)
            magnitude = max(1.0, np.max(np.abs(finite), initial=0.0))
            assert error <= rtol * magnitude, f"{name}: {error} > {rtol} * {magnitude}"


DECOMPOSED_STATISTICS = {"ReduceMean", "ReduceSum", "Pow", "Sqrt", "Div", "Reciprocal", "Sub"}


def assert_float32_kernel_between_casts(model: onnx.ModelProto, op: str, count: int) -> None:
    """`count` `op` nodes, each the float32 kernel of a float16 norm: it reads a Cast to float32,
    its result is cast back to float16 (then maybe a float16 Mul/Add: the original's affine after
    its cast back), and no op of the decomposed statistics is left."""
    producers = {output: node for node in model.graph.node for output in node.output}
    users: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for name in node.input:
            users.setdefault(name, []).append(node)
    fused = [node for node in model.graph.node if node.op_type == op]
    assert len(fused) == count
    for node in fused:
        upcast = producers[node.input[0]]
        assert (upcast.op_type, upcast.attribute[0].i) == ("Cast", onnx.TensorProto.FLOAT)
        (downcast,) = users[node.output[0]]
        assert (downcast.op_type, downcast.attribute[0].i) == ("Cast", onnx.TensorProto.FLOAT16)
    assert not DECOMPOSED_STATISTICS & set(op_types(model))


class ScriptedClock:
    """A clock read twice per timed run; a run of model m takes durations[m] (+ relative jitter).
    Rounds rotate: in round r, position p runs model (p + r) % n, as `measure.bench` does."""

    def __init__(self, durations: list[float], jitter: float = 0.01, seed: int = 0) -> None:
        self.durations = durations
        self.rng = np.random.default_rng(seed)
        self.jitter = jitter
        self.now = 0.0
        self.calls = 0

    def __call__(self) -> float:
        if self.calls % 2 == 1:
            run, count = self.calls // 2, len(self.durations)
            model = (run % count + run // count) % count
            self.now += self.durations[model] * (1 + self.jitter * self.rng.standard_normal())
        self.calls += 1
        return self.now


def script_bench_clock(
    monkeypatch: pytest.MonkeyPatch, durations: list[float], jitter: float = 0.001
) -> None:
    """Every `bench.BenchOptions` built while the test runs times on a fresh `ScriptedClock`:
    the models still run in ONNX Runtime, but the measured durations are `durations`."""
    real = bench.BenchOptions

    def options(**kwargs) -> bench.BenchOptions:
        return real(**kwargs, clock=ScriptedClock(durations, jitter))

    monkeypatch.setattr(bench, "BenchOptions", options)


# Warning categories a fresh `python -m normfuse` does not print (Python's default filters).
UNPRINTED_WARNINGS = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)


@dataclass
class CliRun:
    """What one command line did: its exit status and what it wrote to stdout and stderr."""

    returncode: int
    stdout: str
    stderr: str


def run_cli(capfd: pytest.CaptureFixture, *args: str) -> CliRun:
    """`normfuse ARGS` in this process, as `python -m normfuse` runs it (`SystemExit(main())`): the
    exit status (argparse's SystemExit included), and stdout and stderr captured at the file
    descriptors (ONNX Runtime's native log too), with every warning raised that a fresh
    interpreter would print appended to stderr. An uncaught exception propagates (a traceback
    fails the test)."""
    from normfuse.cli.main import main

    capfd.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            code = main(list(args))
        except SystemExit as stop:
            code = stop.code
    out, err = capfd.readouterr()
    shown = [w for w in caught if not issubclass(w.category, UNPRINTED_WARNINGS)]
    err += "".join(
        warnings.formatwarning(w.message, w.category, w.filename, w.lineno) for w in shown
    )
    return CliRun(0 if code is None else code, out, err)


def odd_scopes_model() -> onnx.ModelProto:
    """A model with what a real export rarely has: If bodies reading outer values, a model-local
    function, an unnamed node, an empty domain, a tensor attribute and a sparse initializer."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    branch = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["b"]), helper.make_node("Neg", ["b"], ["out"])],
        "branch",
        [],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 3])],
    )
    value = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "c")
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([1.0], dtype=np.float32), "s"),
        numpy_helper.from_array(np.array([4], dtype=np.int64), "s_i"),
        [2, 3],
    )
    nodes = [
        helper.make_node("Constant", [], ["k"], value=value),
        helper.make_node("Add", ["x", "k"], ["a"], name="", domain=""),
        helper.make_node("Add", ["a", "s"], ["a2"], name="sparse_add"),
        helper.make_node("ReduceSum", ["a2"], ["r"], keepdims=1),
        helper.make_node("Cast", ["r"], ["flag"], to=TensorProto.BOOL),
        helper.make_node("Squeeze", ["flag"], ["cond"]),
        helper.make_node("If", ["cond"], ["i"], then_branch=branch, else_branch=branch),
        helper.make_node("Twice", ["i"], ["y"], domain="local"),
    ]
    body = [helper.make_node("Add", ["t", "t"], ["u"], name="twice_add")]
    function = helper.make_function(
        "local", "Twice", ["t"], ["u"], body, [helper.make_opsetid("", 17)]
    )
    graph = helper.make_graph(nodes, "odd", [x], [y], sparse_initializer=[sparse], doc_string="d")
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]
    return helper.make_model(graph, opset_imports=opsets, functions=[function])
