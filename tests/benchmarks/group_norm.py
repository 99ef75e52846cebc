"""Group norm on CPU: the decomposed spellings against every fused form, at diffusion shapes.

One group norm (32 groups, per-channel scale and bias) of x [1, C, *S] float32, written as:
- `decomposed`: Reshape [N, G, -1] -> ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div -> Reshape
  back -> Mul(gamma) -> Add(beta) (the statistics spelled out);
- `instance-norm`: the statistics as InstanceNormalization(ones, zeros) (PyTorch's TorchScript
  export, and dynamo's at opset 18);
- `layer-norm`: the statistics as LayerNormalization(axis=-1) of the [N, G, -1] tensor;
- `group-norm-21`: one GroupNormalization-21 node (a model at opset 21; what dynamo writes there);
- `normfuse`: what `normfuse.optimize` makes of `decomposed` (with --passes group-norm);
- `normfuse-gn21`: what it makes of `group-norm-21` (the layer-norm form, from the node).
`com.microsoft.GroupNorm` is not timed: the script shows that ORT cannot create a CPU session
for it.
Each form's error against float64 on groups with a large mean and on constant groups is printed
first. Timed side by side in interleaved
rounds (`normfuse.measure.bench`), ORT levels disable and all, one
intra-op thread by default. The first model of each group is the baseline of the ratios.

Run on demand (not part of the test suite):
    python tests/benchmarks/group_norm.py [--threads 1] [--runs 60] [--shapes 320x64x64,...]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

import normfuse
from models.builders import GraphBuilder, GroupNormSpec, add_group_norm
from normfuse.measure import bench

GROUPS = 32
# issue 26's shapes (batch one): three NCHW, one [N, C, L], one [N, C, D, H, W].
SHAPES = ((320, 64, 64), (128, 128, 128), (512, 32, 32), (256, 1024), (320, 8, 32, 32))
FLOAT = onnx.TensorProto.FLOAT


def _model(nodes, initializers, shape, opset) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "group_norm",
        [helper.make_tensor_value_info("x", FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", FLOAT, list(shape))],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def spelled(shape: tuple[int, ...], spelling: str) -> onnx.ModelProto:
    """The group norm as an exporter writes it (`decomposed` or `instance_norm`)."""
    b = GraphBuilder(17)
    add_group_norm(b, "x", shape, GroupNormSpec(GROUPS, spelling), np.random.default_rng(0))
    b.nodes[-1].output[0] = "y"  # the last Add writes y (no Identity to time)
    return _model(b.nodes, b.initializers, shape, 17)


def _params(channels: int) -> list[onnx.TensorProto]:
    rng = np.random.default_rng(0)
    gamma = rng.uniform(0.5, 1.5, channels).astype(np.float32)
    beta = rng.normal(0, 0.5, channels).astype(np.float32)
    return [numpy_helper.from_array(gamma, "gamma"), numpy_helper.from_array(beta, "beta")]


def _per_channel(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (shape[1], *(1,) * (len(shape) - 2))


def layer_norm_form(shape: tuple[int, ...]) -> onnx.ModelProto:
    """Reshape -> LayerNormalization(axis=-1) -> Reshape -> Mul -> Add."""
    channels = shape[1]
    inner = int(np.prod(shape[1:])) // GROUPS
    gamma, beta = (numpy_helper.to_array(p).reshape(_per_channel(shape)) for p in _params(channels))
    initializers = [
        numpy_helper.from_array(np.array([0, GROUPS, -1], np.int64), "grouped_shape"),
        numpy_helper.from_array(np.array(shape, np.int64), "shape"),
        numpy_helper.from_array(np.ones(inner, np.float32), "ones"),
        numpy_helper.from_array(gamma, "gamma"),
        numpy_helper.from_array(beta, "beta"),
    ]
    nodes = [
        helper.make_node("Reshape", ["x", "grouped_shape"], ["grouped"]),
        helper.make_node(
            "LayerNormalization", ["grouped", "ones"], ["normed"], axis=-1, epsilon=1e-5
        ),
        helper.make_node("Reshape", ["normed", "shape"], ["back"]),
        helper.make_node("Mul", ["back", "gamma"], ["scaled"]),
        helper.make_node("Add", ["scaled", "beta"], ["y"]),
    ]
    return _model(nodes, initializers, shape, 17)


def group_normalization_21(shape: tuple[int, ...]) -> onnx.ModelProto:
    """One GroupNormalization-21 node with per-channel scale and bias."""
    node = helper.make_node(
        "GroupNormalization", ["x", "gamma", "beta"], ["y"], num_groups=GROUPS, epsilon=1e-5
    )
    return _model([node], _params(shape[1]), shape, 21)


def microsoft_group_norm(shape: tuple[int, ...]) -> onnx.ModelProto:
    """ONNX Runtime's com.microsoft.GroupNorm (NHWC input, SiLU as `activation=1`)."""
    channels = shape[1]
    nhwc = (shape[0], *shape[2:], channels)
    node = helper.make_node(
        "GroupNorm",
        ["x", "gamma", "beta"],
        ["y"],
        domain="com.microsoft",
        groups=GROUPS,
        epsilon=1e-5,
        activation=0,
        channels_last=1,
    )
    model = _model([node], _params(channels), nhwc, 17)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


def cpu_support(model: onnx.ModelProto) -> str:
    """'runs', or ONNX Runtime's error when it cannot create a CPU session for `model`."""
    try:
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as error:  # ORT raises its own exception types
        return f"no CPU session: {str(error).splitlines()[0][:160]}"
    return "runs"


def forms(shape: tuple[int, ...]) -> list[bench.BenchModel]:
    """Every form of one group norm at `shape`, the decomposed spelling first."""
    decomposed = spelled(shape, "decomposed")
    fused = normfuse.optimize(decomposed, passes="group-norm").model
    node = group_normalization_21(shape)
    rewritten = normfuse.optimize(node, passes="group-norm").model
    return [
        bench.BenchModel("decomposed", decomposed),
        bench.BenchModel("instance-norm", spelled(shape, "instance_norm")),
        bench.BenchModel("layer-norm", layer_norm_form(shape)),
        bench.BenchModel("group-norm-21", node),
        bench.BenchModel("normfuse", fused),
        bench.BenchModel("normfuse-gn21", rewritten),
    ]


def accuracy_inputs(shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    """Rows that stress the statistics: every group with a large mean against its spread
    (1000 + N(0, 0.01)), and every group constant (a different value per group, zero variance)."""
    rng = np.random.default_rng(0)
    large = (1e3 + rng.normal(0, 1e-2, shape)).astype(np.float32)
    levels = rng.uniform(-1e3, 1e3, (shape[0], GROUPS, 1))
    flat = np.broadcast_to(levels, (shape[0], GROUPS, int(np.prod(shape[1:])) // GROUPS))
    return {"1000 + N(0, 0.01)": large, "constant groups": flat.reshape(shape).astype(np.float32)}


def _reference(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Group norm of `x` in float64 NumPy (two-pass statistics), with the benchmark's affine."""
    grouped = x.astype(np.float64).reshape(shape[0], GROUPS, -1)
    centered = grouped - grouped.mean(-1, keepdims=True)
    normed = (centered / np.sqrt(grouped.var(-1, keepdims=True) + 1e-5)).reshape(shape)
    gamma, beta = (numpy_helper.to_array(p).astype(np.float64) for p in _params(shape[1]))
    return normed * gamma.reshape(_per_channel(shape)) + beta.reshape(_per_channel(shape))


def accuracy(models: list[bench.BenchModel], shape: tuple[int, ...]) -> str:
    """Each form's largest error against float64 NumPy on each of `accuracy_inputs`, all run with
    ORT optimisations disabled (nan where the form's output has a NaN or inf)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    lines = []
    for label, x in accuracy_inputs(shape).items():
        reference = _reference(x, shape)
        errors = []
        for model in models:
            session = ort.InferenceSession(model.model.SerializeToString(), options)
            got = session.run(None, {"x": x})[0]
            error = np.max(np.abs(got - reference)) if np.all(np.isfinite(got)) else np.nan
            errors.append(f"{model.name} {error:.2e}")
        lines.append(f"max error vs float64 at {label}: " + ", ".join(errors))
    return "\n".join(lines)


def _shape(text: str) -> tuple[int, ...]:
    return (1, *(int(part) for part in text.split("x")))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES))
    args = parser.parse_args()
    options = bench.BenchOptions(
        levels=("disable", "all"), threads=args.threads, runs=args.runs, warmup=args.warmup
    )
    print(f"onnxruntime {ort.__version__}")
    print(f"com.microsoft.GroupNorm on CPU: {cpu_support(microsoft_group_norm(SHAPES[-1]))}")
    for text in args.shapes.split(","):
        shape = _shape(text)
        print(f"\n## x {list(shape)}, {GROUPS} groups")
        models = forms(shape)
        print(accuracy(models, shape))
        print(bench.run(models, options).table())
    return 0


if __name__ == "__main__":
    sys.exit(main())
