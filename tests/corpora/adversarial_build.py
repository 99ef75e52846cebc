"""Small graph-building helpers for the adversarial corpus (`tests/corpora/adversarial.py`).

Unlike `models.builders`, every tensor name can be chosen by the caller, so cases can reuse and
shadow names across scopes, and every constant can be swapped for an arbitrary tensor.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
F16 = TensorProto.FLOAT16
F64 = TensorProto.DOUBLE
I64 = TensorProto.INT64
I32 = TensorProto.INT32
BOOL = TensorProto.BOOL
SHAPE = (2, 5, 16)
NP = {F: np.float32, F16: np.float16, F64: np.float64, I64: np.int64, I32: np.int32, BOOL: np.bool_}


class G:
    """One graph (or body) under construction: nodes, initializers, fresh names with a prefix."""

    def __init__(self, prefix: str = "", opset: int = 17, dtype=np.float32, seed: int = 0):
        self.prefix = prefix
        self.opset = opset
        self.dtype = dtype
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0
        self.rng = np.random.default_rng(seed)

    def fresh(self, stem: str) -> str:
        self.count += 1
        return f"{self.prefix}{stem}_{self.count}"

    def op(self, op_type: str, inputs: Sequence[str], out: str | None = None, **attrs) -> str:
        out = out or self.fresh(op_type.lower())
        self.nodes.append(
            helper.make_node(op_type, list(inputs), [out], name=self.fresh(op_type), **attrs)
        )
        return out

    def init(self, value, name: str | None = None, dtype=None) -> str:
        name = name or self.fresh("c")
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype or self.dtype), name))
        return name

    def const_node(self, value, name: str | None = None, dtype=None) -> str:
        name = name or self.fresh("k")
        tensor = numpy_helper.from_array(np.asarray(value, dtype or self.dtype), name + "_t")
        self.nodes.append(helper.make_node("Constant", [], [name], value=tensor))
        return name

    def ref(self, value, stem: str, dtype=None) -> str:
        """A tensor name: `value` itself when it is a name, else a new initializer."""
        if isinstance(value, str):
            return value
        return self.init(value, self.fresh(stem), dtype)

    def reduce(self, op_type: str, x: str, axes, keepdims: int = 1, axes_input: bool | None = None):
        """ReduceMean/ReduceSum with axes as attribute or input, as the opset requires; `axes` may
        be the name of an existing int64 tensor (input form only)."""
        if axes_input is None:
            axes_input = self.opset >= 18 or (op_type == "ReduceSum" and self.opset >= 13)
        if axes_input:
            name = (
                axes
                if isinstance(axes, str)
                else self.init(list(axes), self.fresh("axes"), np.int64)
            )
            return self.op(op_type, [x, name], keepdims=keepdims)
        return self.op(op_type, [x], axes=list(axes), keepdims=keepdims)

    def random(self, shape, low=0.5, high=1.5):
        return self.rng.uniform(low, high, shape).astype(self.dtype)


def ln(
    g: G,
    x: str,
    *,
    axes=(-1,),
    var_axes=None,
    eps=1e-5,
    gamma="auto",
    beta="auto",
    exp=2.0,
    var="mean",
    divisor=None,
    divide="div",
    one=1.0,
    half=-0.5,
    shape=SHAPE,
    stat_src: str | None = None,
    keepdims: int = 1,
    eps_outside: bool = False,
    out: str | None = None,
    names: dict | None = None,
) -> str:
    """Append a decomposed layer norm of `x`; every constant may be a value or a tensor name.

    `exp`: the Pow exponent (a value, a name, or "mul" for Mul(d, d)); `var`: "mean" or "sum"
    (ReduceSum then Div by `divisor`, default d); `divide`: div | reciprocal | one_over | pow_half;
    `stat_src`: the tensor whose mean is subtracted (default x); `names`: explicit names of the
    intermediates (mean, centered, square, var, shifted, std, normed, scaled).
    """
    names = names or {}
    src = stat_src or x
    mean = g.reduce("ReduceMean", src, axes, keepdims)
    if "mean" in names:
        g.nodes[-1].output[0] = names["mean"]
        mean = names["mean"]
    centered = g.op("Sub", [x, mean], names.get("centered"))
    if isinstance(exp, str) and exp == "mul":
        square = g.op("Mul", [centered, centered], names.get("square"))
    else:
        square = g.op("Pow", [centered, g.ref(exp, "two")], names.get("square"))
    v_axes = var_axes if var_axes is not None else axes
    if var == "mean":
        variance = g.reduce("ReduceMean", square, v_axes, keepdims)
    else:
        total = g.reduce("ReduceSum", square, v_axes, keepdims)
        count = (
            divisor if divisor is not None else float(np.prod([shape[a] for a in dims_of(v_axes)]))
        )
        variance = g.op("Div", [total, g.ref(count, "divisor")])
    eps_name = g.ref(eps, "eps")
    if eps_outside:
        std = g.op("Add", [g.op("Sqrt", [variance]), eps_name])
        normed = g.op("Div", [centered, std], names.get("normed"))
    else:
        shifted = g.op("Add", [variance, eps_name], names.get("shifted"))
        normed = normalise(g, centered, shifted, divide, one, half, names.get("normed"))
    return affine(g, normed, gamma, beta, shape, axes, out)


def normalise(g: G, num: str, shifted: str, divide: str, one=1.0, half=-0.5, out=None) -> str:
    """num / sqrt(shifted) in one of the exported spellings."""
    if divide == "div":
        return g.op("Div", [num, g.op("Sqrt", [shifted])], out)
    if divide == "reciprocal":
        return g.op("Mul", [num, g.op("Reciprocal", [g.op("Sqrt", [shifted])])], out)
    if divide == "one_over":
        inv = g.op("Div", [g.ref(one, "one"), g.op("Sqrt", [shifted])])
        return g.op("Mul", [num, inv], out)
    if divide == "pow_half":
        return g.op("Mul", [num, g.op("Pow", [shifted, g.ref(half, "half")])], out)
    raise ValueError(divide)


def dims_of(axes) -> tuple:
    """The axes as a tuple (a tensor name stands for the last axis)."""
    return (-1,) if isinstance(axes, str) else tuple(axes)


def normalised_shape(shape, axes) -> tuple:
    axes = dims_of(axes)
    first = min(a if a >= 0 else a + len(shape) for a in axes)
    return tuple(shape[first:])


def affine(g: G, normed: str, gamma, beta, shape, axes, out=None) -> str:
    """Multiply by gamma, add beta (each: "auto" random, None, a name, or an array)."""
    dims = normalised_shape(shape, axes)
    result = normed
    if gamma is not None:
        gamma_value = g.random(dims) if isinstance(gamma, str) and gamma == "auto" else gamma
        last = beta is None
        result = g.op("Mul", [result, g.ref(gamma_value, "gamma")], out if last else None)
    if beta is not None:
        beta_value = g.random(dims, -0.5, 0.5) if isinstance(beta, str) and beta == "auto" else beta
        result = g.op("Add", [result, g.ref(beta_value, "beta")], out)
    if out and result != out:
        result = g.op("Identity", [result], out)
    return result


def rms(
    g: G,
    x: str,
    *,
    axes=(-1,),
    eps=1e-6,
    gamma="auto",
    exp=2.0,
    var="mean",
    divisor=None,
    divide="div",
    one=1.0,
    half=-0.5,
    shape=SHAPE,
    num: str | None = None,
    eps_outside: bool = False,
    out: str | None = None,
) -> str:
    """Append a decomposed RMS norm of `x` (`num`: the numerator, default x)."""
    if isinstance(exp, str) and exp == "mul":
        square = g.op("Mul", [x, x])
    else:
        square = g.op("Pow", [x, g.ref(exp, "two")])
    if var == "mean":
        mean_square = g.reduce("ReduceMean", square, axes)
    else:
        total = g.reduce("ReduceSum", square, axes)
        count = (
            divisor if divisor is not None else float(np.prod([shape[a] for a in dims_of(axes)]))
        )
        mean_square = g.op("Div", [total, g.ref(count, "divisor")])
    eps_name = g.ref(eps, "eps")
    numerator = num or x
    if eps_outside:
        normed = g.op("Div", [numerator, g.op("Add", [g.op("Sqrt", [mean_square]), eps_name])])
    else:
        shifted = g.op("Add", [mean_square, eps_name])
        normed = normalise(g, numerator, shifted, divide, one, half)
    return affine(g, normed, gamma, None, shape, axes, out)


def vi(name: str, elem: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, None if shape is None else list(shape))


def model(
    g: G,
    inputs=(("x", F, SHAPE),),
    outputs=(("y", F, SHAPE),),
    *,
    overridable: Sequence[str] = (),
    value_info=(),
    functions=(),
    opsets: dict | None = None,
    ir: int | None = None,
) -> onnx.ModelProto:
    """A model of `g`'s nodes; `overridable` initializers are also listed as graph inputs."""
    by_name = {t.name: t for t in g.inits}
    graph_inputs = [vi(*spec) for spec in inputs]
    for name in overridable:
        tensor = by_name[name]
        graph_inputs.append(vi(name, tensor.data_type, list(tensor.dims)))
    graph = helper.make_graph(
        g.nodes,
        "adversarial",
        graph_inputs,
        [vi(*spec) for spec in outputs],
        g.inits,
        value_info=[vi(*spec) for spec in value_info],
    )
    imports = {"": g.opset, **(opsets or {})}
    m = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid(d, v) for d, v in imports.items()],
        functions=list(functions),
    )
    m.ir_version = ir if ir is not None else (8 if g.opset < 18 else (9 if g.opset < 21 else 10))
    if g.opset >= 23:
        m.ir_version = max(m.ir_version, 11)
    return m


def body(g: G, inputs, outputs) -> onnx.GraphProto:
    """A subgraph (If/Loop/Scan body) of `g`'s nodes and initializers."""
    return helper.make_graph(
        g.nodes, g.prefix or "body", [vi(*s) for s in inputs], [vi(*s) for s in outputs], g.inits
    )
