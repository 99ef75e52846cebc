"""Building blocks for tests/corpora/foreign.py: a small graph builder, the layer-norm and RMS-norm
chains the foreign tests vary, the case record and its registry."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F32, F16, F64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE
NP_TYPES = {F32: np.float32, F16: np.float16, F64: np.float64}
SKIP_PASSES = "layer-norm,rms-norm,skip-norm"
CURRENT_OPSET = 23  # the newest default-domain opset ONNX Runtime 1.32 runs for these ops


class G:
    """A small graph builder: constants, nodes with generated names, a model at one opset."""

    def __init__(self, opset: int, seed: int = 0) -> None:
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.rng = np.random.default_rng(seed)
        self._count = 0

    def name(self, stem: str) -> str:
        self._count += 1
        return f"{stem}_{self._count}"

    def input(self, name: str, elem: int, shape) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem, shape))
        return name

    def const(self, value, elem: int = F32, stem: str = "c") -> str:
        array = np.asarray(value, dtype=NP_TYPES.get(elem) or _int_type(elem))
        name = self.name(stem)
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def rand(self, shape, elem: int = F32, stem: str = "w") -> str:
        return self.const(self.rng.uniform(-1.0, 1.0, shape), elem, stem)

    def op(self, op_type: str, *inputs: str, domain: str = "", outputs: int = 1, **attrs):
        names = [self.name(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(
            helper.make_node(op_type, list(inputs), names, self.name(op_type), domain, **attrs)
        )
        return names[0] if outputs == 1 else names

    def mean(self, x: str, axes, keepdims: int = 1) -> str:
        """ReduceMean over `axes`: an attribute below opset 18, an input from 18."""
        if self.opset >= 18:
            return self.op(
                "ReduceMean",
                x,
                self.const(list(axes), TensorProto.INT64, "axes"),
                keepdims=keepdims,
            )
        return self.op("ReduceMean", x, axes=list(axes), keepdims=keepdims)

    def cast(self, x: str, to: int) -> str:
        return self.op("Cast", x, to=to)

    def model(self, outputs: dict[str, tuple[int, object]], extra_opsets=()) -> onnx.ModelProto:
        """The model whose outputs are `outputs` (tensor -> (elem type, shape))."""
        out_infos = [helper.make_tensor_value_info(n, e, s) for n, (e, s) in outputs.items()]
        graph = helper.make_graph(self.nodes, "foreign", self.inputs, out_infos, self.inits)
        opsets = [helper.make_opsetid("", self.opset), *extra_opsets]
        m = helper.make_model(graph, opset_imports=opsets, producer_name="normfuse-foreign")
        m.ir_version = min(m.ir_version, 10)
        return m


def _int_type(elem: int):
    return helper.tensor_dtype_to_np_dtype(elem)


@dataclass(frozen=True)
class ForeignCase:
    """One rebuilt test case (see the module docstring)."""

    name: str
    project: str  # onnxruntime | onnxscript | openvino
    test: str  # their test (file :: name)
    theirs: str  # what their test expects their optimizer to do
    expect: str  # fuse | keep | either
    build: Callable[[], onnx.ModelProto]
    sites: dict = field(default_factory=dict)  # fuse: sites per kind (at least)
    reasons: frozenset = frozenset()  # keep: acceptable near-miss reasons
    passes: str | None = None
    target: str = "ort"  # the target their fusion corresponds to
    gap: str | None = None  # normfuse misses this exact fusion (xfail)
    note: str = ""
    dims: dict = field(default_factory=dict)  # sizes of symbolic dims for the numerics
    epsilon: float | None = None  # fuse: every fused site's epsilon, exactly


# ---------------------------------------------------------------- shared subgraphs


def layer_norm(
    g: G,
    x: str,
    axes=(-1,),
    var_axes=None,
    eps: str | None = None,
    square: str = "pow",
    divide: str = "div",
    two_subs: bool = False,
    cast_centered: int | None = None,
    cast_normed: int | None = None,
    gamma: str | None = None,
    beta: str | None = None,
    gamma_first: bool = False,
    beta_first: bool = False,
    eps_first: bool = False,
    exponent: str | None = None,
) -> str:
    """ReduceMean -> Sub -> [Cast] -> Pow/Mul -> ReduceMean -> Add(eps) -> Sqrt -> Div -> [Cast]
    -> Mul(gamma) -> Add(beta), with the options ONNX Runtime's tests vary."""
    mean = g.mean(x, axes)
    centered = g.op("Sub", x, mean)
    numerator = g.op("Sub", x, mean) if two_subs else centered
    if cast_centered is not None:
        centered = g.cast(centered, cast_centered)
        numerator = centered if not two_subs else g.cast(numerator, cast_centered)
    if square == "pow":
        squared = g.op("Pow", centered, exponent or g.const(2.0))
    else:
        squared = g.op("Mul", centered, centered)
    var = g.mean(squared, var_axes if var_axes is not None else axes)
    eps = eps or g.const(1e-5)
    shifted = g.op("Add", eps, var) if eps_first else g.op("Add", var, eps)
    std = g.op("Sqrt", shifted)
    if divide == "div":
        normed = g.op("Div", numerator, std)
    else:
        normed = g.op("Mul", numerator, g.op("Reciprocal", std))
    if cast_normed is not None:
        normed = g.cast(normed, cast_normed)
    if gamma is not None:
        normed = g.op("Mul", gamma, normed) if gamma_first else g.op("Mul", normed, gamma)
    if beta is not None:
        normed = g.op("Add", beta, normed) if beta_first else g.op("Add", normed, beta)
    return normed


def rms_norm(
    g: G,
    x: str,
    eps: str,
    exponent: str | None = None,
    divide: str = "div",
    gamma: str | None = None,
    gamma_first: bool = False,
    eps_first: bool = False,
    cast_normed: int | None = None,
) -> str:
    """Pow(x, 2) -> ReduceMean(-1) -> Add(eps) -> Sqrt -> Div / Mul(Reciprocal) -> Mul(gamma)."""
    squared = g.op("Pow", x, exponent or g.const(2.0))
    ms = g.mean(squared, (-1,))
    shifted = g.op("Add", eps, ms) if eps_first else g.op("Add", ms, eps)
    std = g.op("Sqrt", shifted)
    if divide == "div":
        normed = g.op("Div", x, std)
    elif divide == "reciprocal":
        normed = g.op("Mul", x, g.op("Reciprocal", std))
    else:
        raise ValueError(divide)
    if cast_normed is not None:
        normed = g.cast(normed, cast_normed)
    if gamma is not None:
        normed = g.op("Mul", gamma, normed) if gamma_first else g.op("Mul", normed, gamma)
    return normed


CASES: dict[str, ForeignCase] = {}


def case(name: str, project: str, test: str, theirs: str, expect: str, **more):
    """Register the decorated builder as case `name`."""

    def register(build: Callable[[], onnx.ModelProto]) -> Callable[[], onnx.ModelProto]:
        if name in CASES:
            raise ValueError(f"duplicate case {name}")
        more.setdefault("sites", {})
        more["reasons"] = frozenset(more.get("reasons", ()))
        CASES[name] = ForeignCase(name, project, test, theirs, expect, build, **more)
        return build

    return register


LN = {"layer-norm": 1}
RMS = {"rms-norm": 1}
