# ruff: noqa: E501
"""Adversary 9 probe: shared created constants and guard threads on large graphs.

Run: .venv/bin/python tests/adversary9_probe.py [case ...]. Not a pytest module (no test_
functions). Prints one line per case and a summary; exits 1 on any failure.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import normfuse

FAILS: list[str] = []
COUNTS: dict[str, int] = {"cases": 0, "numeric_checks": 0}
F32, F16 = TensorProto.FLOAT, TensorProto.FLOAT16
NORMFUSE = str(Path(sys.executable).with_name("normfuse"))


def ln_nodes(
    x: str, p: str, eps: str, two: str, axes: str | None, refused: bool = False
) -> tuple[list, str]:
    """Decomposed layer norm without affine on the last axis: (x-mean)/sqrt(var+eps).
    `refused`: epsilon outside the root, which must not fuse."""
    ax = [axes] if axes else []
    kw = {} if axes else {"axes": [-1]}
    n = [
        helper.make_node("ReduceMean", [x, *ax], [p + "m"], **kw),
        helper.make_node("Sub", [x, p + "m"], [p + "d"]),
        helper.make_node("Pow", [p + "d", two], [p + "q"]),
        helper.make_node("ReduceMean", [p + "q", *ax], [p + "v"], **kw),
    ]
    if refused:
        n += [
            helper.make_node("Sqrt", [p + "v"], [p + "s"]),
            helper.make_node("Add", [p + "s", eps], [p + "e"]),
        ]
    else:
        n += [
            helper.make_node("Add", [p + "v", eps], [p + "e"]),
            helper.make_node("Sqrt", [p + "e"], [p + "s"]),
        ]
    src = p + ("e" if refused else "s")
    n.append(helper.make_node("Div", [p + "d", src], [p + "y"]))
    return n, p + "y"


def consts(dtype: int, prefix: str = "") -> list:
    np_t = helper.tensor_dtype_to_np_dtype(dtype)
    return [
        numpy_helper.from_array(np.array(1e-5, np_t), prefix + "eps"),
        numpy_helper.from_array(np.array(2.0, np_t), prefix + "two"),
    ]


def model(
    nodes, inputs, outputs, inits, opset: int = 17, functions=(), extra_opsets=()
) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, inits)
    ops = [helper.make_opsetid("", opset), *extra_opsets]
    m = helper.make_model(g, opset_imports=ops, functions=list(functions))
    m.ir_version = 8 if opset < 21 else 10
    return m


def vi(name: str, dtype: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


# ---------------------------------------------------------------- checks


def sess(m: onnx.ModelProto | str) -> ort.InferenceSession:
    o = ort.SessionOptions()
    o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    src = m if isinstance(m, str) else m.SerializeToString()
    return ort.InferenceSession(src, o, providers=["CPUExecutionProvider"])


def feeds_for(m: onnx.ModelProto, dims: dict, seed: int) -> dict[str, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    base = {}
    for i in m.graph.input:
        t = i.type.tensor_type
        shape = [
            d.dim_value if d.HasField("dim_value") else dims.get(d.dim_param, 3)
            for d in t.shape.dim
        ]
        dt = helper.tensor_dtype_to_np_dtype(t.elem_type)
        if dt == np.bool_:
            base[i.name] = np.array(True)
        elif np.issubdtype(dt, np.integer):
            base[i.name] = np.array(3, dt).reshape(shape) if shape else np.array(3, dt)
        else:
            base[i.name] = rng.normal(0, 1, shape)
    out = {}

    def conv(fn):
        return {
            k: (
                fn(v).astype(helper.tensor_dtype_to_np_dtype(_et(m, k)))
                if v.dtype == np.float64
                else v
            )
            for k, v in base.items()
        }

    out["random"] = conv(lambda v: v * 2 + 1)
    out["offset1e3"] = conv(lambda v: 1e3 + 0.01 * v)
    out["tiny"] = conv(lambda v: 1e-4 * v)
    out["constant_rows"] = conv(
        lambda v: np.broadcast_to(v[..., :1], v.shape).copy() if v.ndim else v
    )
    if any(v.dtype == np.bool_ for v in base.values()):
        out["random/else-branch"] = {
            k: (np.array(False) if v.dtype == np.bool_ else v) for k, v in out["random"].items()
        }
        out["offset1e3/else-branch"] = {
            k: (np.array(False) if v.dtype == np.bool_ else v) for k, v in out["offset1e3"].items()
        }
    return out


def _et(m: onnx.ModelProto, name: str) -> int:
    return next(i.type.tensor_type.elem_type for i in m.graph.input if i.name == name)


def _to_double(m: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every float32 tensor made float64 (float16 ones stay)."""
    m = onnx.ModelProto.FromString(m.SerializeToString())

    def fix_t(t: onnx.TensorProto) -> None:
        if t.data_type == F32:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64), t.name))

    def fix_g(nodes, vis, inits) -> None:
        for v in vis:
            if v.type.tensor_type.elem_type == F32:
                v.type.tensor_type.elem_type = TensorProto.DOUBLE
        for t in inits:
            fix_t(t)
        for n in nodes:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.TENSOR:
                    fix_t(a.t)
                if a.type == onnx.AttributeProto.GRAPH:
                    fix_g(a.g.node, [*a.g.input, *a.g.output, *a.g.value_info], a.g.initializer)

    g = m.graph
    fix_g(g.node, [*g.input, *g.output, *g.value_info], g.initializer)
    for fn in m.functions:
        fix_g(fn.node, [], [])
    return m


def compare(
    case: str,
    orig: onnx.ModelProto,
    fused: onnx.ModelProto,
    dims: dict | None = None,
    seed: int = 0,
) -> float:
    """Max relative diff over feeds; a failure when outputs differ by more than tolerance and the
    fused model is further from a float64 evaluation of the original than the original is."""
    so, sf = sess(orig), sess(fused)
    s64 = sess(_to_double(orig))
    worst = 0.0
    for name, f in feeds_for(orig, dims or {}, seed).items():
        COUNTS["numeric_checks"] += 1
        a = so.run(None, f)
        b = sf.run(None, f)
        ref = (
            s64.run(
                None,
                {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in f.items()},
            )
            if s64
            else a
        )
        for x, y, r in zip(a, b, ref, strict=True):
            x64, y64 = x.astype(np.float64), y.astype(np.float64)
            sp = ~np.isfinite(x64)
            if not np.array_equal(x64[sp], y64[sp], equal_nan=True) or not np.all(
                np.isfinite(y64[~sp])
            ):
                FAILS.append(f"{case}/{name}: non-finite pattern differs")
                continue
            if (~sp).any():
                scale = max(1.0, float(np.max(np.abs(x64[~sp]))))
                d = float(np.max(np.abs(x64[~sp] - y64[~sp]))) / scale
                worst = max(worst, d)
                tol = 2e-2 if x.dtype == np.float16 else 1e-3
                e_orig = float(np.max(np.abs(x64[~sp] - r.astype(np.float64)[~sp])))
                e_fused = float(np.max(np.abs(y64[~sp] - r.astype(np.float64)[~sp])))
                if d > tol and (s64 is None or e_fused > 2 * e_orig + 1e-4):
                    FAILS.append(
                        f"{case}/{name}: rel diff {d:.3g} > {tol} (vs float64: original {e_orig:.3g}, "
                        f"fused {e_fused:.3g})"
                    )
    return worst


def full_check(case: str, m: onnx.ModelProto | str) -> None:
    try:
        onnx.checker.check_model(m, full_check=True)
    except Exception as e:
        FAILS.append(f"{case}: checker full_check failed: {str(e)[:300]}")
    try:
        sess(m)
    except Exception as e:
        FAILS.append(f"{case}: ORT load failed: {str(e)[:300]}")


def nfused(m: onnx.ModelProto) -> int:
    ops = ("LayerNormalization", "SimplifiedLayerNormalization", "RMSNormalization")
    c = sum(n.op_type in ops for n in m.graph.node)
    for n in m.graph.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                c += nfused(helper.make_model(a.g))
    for fn in m.functions:
        c += sum(n.op_type in ops for n in fn.node)
    return c


def created_inits(orig: onnx.ModelProto, fused: onnx.ModelProto) -> list[str]:
    before = {t.name for t in orig.graph.initializer}
    return [t.name for t in fused.graph.initializer if t.name not in before]


def run_case(
    case: str,
    m: onnx.ModelProto,
    expect: int | None,
    target: str = "ort",
    dims: dict | None = None,
    validate: bool = False,
) -> onnx.ModelProto | None:
    COUNTS["cases"] += 1
    snapshot = m.SerializeToString()
    try:
        onnx.checker.check_model(m, full_check=True)
        sess(m)
    except Exception as e:
        print(f"[{case}] BAD PROBE MODEL: {e}")
        FAILS.append(f"{case}: probe model itself invalid: {str(e)[:200]}")
        return None
    try:
        res = normfuse.optimize(
            m,
            target=target,
            validation=normfuse.ValidationOptions(dims=dims or {}) if validate else None,
        )
    except Exception as e:
        FAILS.append(f"{case}: optimize raised {type(e).__name__}: {str(e)[:300]}")
        return None
    if m.SerializeToString() != snapshot:
        FAILS.append(f"{case}: input ModelProto mutated")
    fused = res.model
    full_check(case, fused)
    k = nfused(fused)
    worst = compare(case, m, fused, dims)
    new = created_inits(m, fused)
    print(
        f"[{case}] fused={k} sites={len(res.report.sites)} near_misses="
        f"{sorted({x.reason for x in res.report.near_misses})} created={new} worst_rel={worst:.2e}"
    )
    if expect is not None and k != expect:
        FAILS.append(f"{case}: expected {expect} fused nodes, got {k}")
    return fused


# ---------------------------------------------------------------- cases


def case_main_if_loop() -> None:
    """Sites in the main graph, both If branches and a Loop body, same H, no affine."""
    H = 8
    nodes, y1 = ln_nodes("x", "a_", "eps", "two", None)
    n2, y2 = ln_nodes("x2", "b_", "eps", "two", None)
    nodes += n2
    tn, ty = ln_nodes("x", "t_", "eps", "two", None)
    en, ey = ln_nodes("x2", "e_", "eps", "two", None)
    then_g = helper.make_graph(tn, "then", [], [vi(ty, F32, [2, 3, H])])
    else_g = helper.make_graph(en, "else", [], [vi(ey, F32, [2, 3, H])])
    nodes.append(helper.make_node("If", ["c"], ["ify"], then_branch=then_g, else_branch=else_g))
    ln_, ly = ln_nodes("lc_in", "l_", "eps", "two", None)
    body = helper.make_graph(
        [*ln_, helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [
            vi("it", TensorProto.INT64, []),
            vi("cond_in", TensorProto.BOOL, []),
            vi("lc_in", F32, [2, 3, H]),
        ],
        [vi("cond_out", TensorProto.BOOL, []), vi(ly, F32, [2, 3, H])],
    )
    nodes.append(helper.make_node("Loop", ["trip", "", "x"], ["loopy"], body=body))
    m = model(
        nodes,
        [
            vi("x", F32, [2, 3, H]),
            vi("x2", F32, [2, 3, H]),
            vi("c", TensorProto.BOOL, []),
            vi("trip", TensorProto.INT64, []),
        ],
        [
            vi(y1, F32, [2, 3, H]),
            vi(y2, F32, [2, 3, H]),
            vi("ify", F32, [2, 3, H]),
            vi("loopy", F32, [2, 3, H]),
        ],
        consts(F32),
    )
    run_case("main+if+loop", m, 5)
    run_case("main+if+loop/validate", m, 5, validate=True)
    run_case("main+if+loop/onnx-opset17", m, 5, target="onnx")
    m13 = onnx.version_converter.convert_version(m, 13) if False else None
    del m13


def _fn(name: str, H: int, dtype: int) -> onnx.FunctionProto:
    np_t = helper.tensor_dtype_to_np_dtype(dtype)
    nodes = [
        helper.make_node(
            "Constant", [], ["eps"], value=numpy_helper.from_array(np.array(1e-5, np_t))
        ),
        helper.make_node(
            "Constant", [], ["two"], value=numpy_helper.from_array(np.array(2.0, np_t))
        ),
    ]
    n, y = ln_nodes("X", "f_", "eps", "two", None)
    nodes += n
    nodes.append(helper.make_node("Identity", [y], ["Y"]))
    return helper.make_function("local", name, ["X"], ["Y"], nodes, [helper.make_opsetid("", 17)])


def case_functions() -> None:
    """Two calls of one local function, and two functions, plus a main-graph site."""
    H = 8
    nodes = [
        helper.make_node("F1", ["x"], ["y1"], domain="local"),
        helper.make_node("F1", ["x2"], ["y2"], domain="local"),
        helper.make_node("F2", ["x"], ["y3"], domain="local"),
    ]
    n, y = ln_nodes("x2", "m_", "eps", "two", None)
    nodes += n
    m = model(
        nodes,
        [vi("x", F32, [2, 3, H]), vi("x2", F32, [2, 3, H])],
        [
            vi("y1", F32, [2, 3, H]),
            vi("y2", F32, [2, 3, H]),
            vi("y3", F32, [2, 3, H]),
            vi(y, F32, [2, 3, H]),
        ],
        consts(F32),
        functions=[_fn("F1", H, F32), _fn("F2", H, F32)],
        extra_opsets=[helper.make_opsetid("local", 1)],
    )
    run_case("functions", m, None)
    run_case("functions/validate", m, None, validate=True)
    run_case("functions/onnx", m, None, target="onnx")


def case_mixed_dtype() -> None:
    """float16 and float32 sites of the same hidden size side by side."""
    H = 16
    n1, y1 = ln_nodes("x", "a_", "eps", "two", None)
    n2, y2 = ln_nodes("h", "b_", "heps", "htwo", None)
    n3, y3 = ln_nodes("x", "c_", "eps", "two", None)
    n4, y4 = ln_nodes("h", "d_", "heps", "htwo", None)
    m = model(
        n1 + n2 + n3 + n4,
        [vi("x", F32, [2, 4, H]), vi("h", F16, [2, 4, H])],
        [
            vi(y1, F32, [2, 4, H]),
            vi(y2, F16, [2, 4, H]),
            vi(y3, F32, [2, 4, H]),
            vi(y4, F16, [2, 4, H]),
        ],
        consts(F32) + consts(F16, "h"),
    )
    run_case("f16+f32", m, None)
    run_case("f16+f32/validate", m, None, validate=True)
    run_case("f16+f32/onnx", m, None, target="onnx")


def case_adaln() -> None:
    """adaLN: LN without affine then x*(1+s)+b, s and b per sample [B,1,H]; two blocks."""
    H = 8
    nodes, y1 = ln_nodes("x", "a_", "eps", "two", None)
    nodes += [
        helper.make_node("Add", ["one", "s"], ["s1"]),
        helper.make_node("Mul", [y1, "s1"], ["ms"]),
        helper.make_node("Add", ["ms", "b"], ["out1"]),
    ]
    n2, y2 = ln_nodes("out1", "b_", "eps", "two", None)
    nodes += [
        *n2,
        helper.make_node("Mul", [y2, "s1"], ["ms2"]),
        helper.make_node("Add", ["ms2", "b"], ["out2"]),
    ]
    inits = [*consts(F32), numpy_helper.from_array(np.array(1.0, np.float32), "one")]
    m = model(
        nodes,
        [vi("x", F32, ["B", 5, H]), vi("s", F32, ["B", 1, H]), vi("b", F32, ["B", 1, H])],
        [vi("out1", F32, ["B", 5, H]), vi("out2", F32, ["B", 5, H])],
        inits,
    )
    run_case("adaln", m, 2, dims={"B": 3})
    run_case("adaln/validate", m, 2, dims={"B": 3}, validate=True)


def case_name_squat() -> None:
    """Original initializers named like the generated ones (learned from a first run)."""
    H = 8
    n1, y1 = ln_nodes("x", "a_", "eps", "two", None)
    n2, y2 = ln_nodes("x", "b_", "eps", "two", None)
    base = model(
        n1 + n2,
        [vi("x", F32, [2, 3, H])],
        [vi(y1, F32, [2, 3, H]), vi(y2, F32, [2, 3, H])],
        consts(F32),
    )
    fused = normfuse.optimize(base).model
    names = created_inits(base, fused)
    print(f"[name-squat] generated names: {names}")
    nodes = n1 + n2
    inits = consts(F32)
    outs = [vi(y1, F32, [2, 3, H]), vi(y2, F32, [2, 3, H])]
    for i, nm in enumerate(names):
        # same shape as the generated constant, different values; used by the graph
        gen = next(t for t in fused.graph.initializer if t.name == nm)
        arr = numpy_helper.to_array(gen)
        squat = (np.arange(arr.size).reshape(arr.shape) + 3).astype(arr.dtype)
        inits.append(numpy_helper.from_array(squat, nm))
        if arr.dtype.kind == "f":
            nodes.append(helper.make_node("Mul", [y1, nm], [f"sq{i}"]))
            outs.append(vi(f"sq{i}", F32, [2, 3, H]))
        else:
            nodes.append(helper.make_node("Identity", [nm], [f"sq{i}"]))
            outs.append(vi(f"sq{i}", helper.np_dtype_to_tensor_dtype(arr.dtype), list(arr.shape)))
    # also guessable variants
    for extra in ("ones", "ones_8", "normfuse_ones", "scale_ones", "unit_scale"):
        if extra not in names:
            inits.append(numpy_helper.from_array(np.full([H], 7.0, np.float32), extra))
            nodes.append(helper.make_node("Mul", [y2, extra], [f"x_{extra}"]))
            outs.append(vi(f"x_{extra}", F32, [2, 3, H]))
    m = model(nodes, [vi("x", F32, [2, 3, H])], outs, inits)
    run_case("name-squat", m, 2)
    # body-scope squat: If branch defines a value named like a generated constant
    if names:
        nm = names[0]
        tn, ty = ln_nodes("x", "t_", "eps", "two", None)
        gen = next(t for t in fused.graph.initializer if t.name == nm)
        arr = numpy_helper.to_array(gen)
        tn.append(
            helper.make_node(
                "Constant", [], [nm], value=numpy_helper.from_array((arr * 0 + 5).astype(arr.dtype))
            )
        )
        if arr.dtype.kind == "f":
            tn.append(helper.make_node("Mul", [ty, nm], ["tz"]))
        else:
            tn.append(helper.make_node("Identity", [ty], ["tz"]))
        en, ey = ln_nodes("x", "e_", "eps", "two", None)
        en.append(helper.make_node("Identity", [ey], ["ez"]))
        nodes2 = (
            n1
            + n2
            + [
                helper.make_node(
                    "If",
                    ["c"],
                    ["ify"],
                    then_branch=helper.make_graph(tn, "t", [], [vi("tz", F32, [2, 3, H])]),
                    else_branch=helper.make_graph(en, "e", [], [vi("ez", F32, [2, 3, H])]),
                )
            ]
        )
        m2 = model(
            nodes2,
            [vi("x", F32, [2, 3, H]), vi("c", TensorProto.BOOL, [])],
            [vi(y1, F32, [2, 3, H]), vi(y2, F32, [2, 3, H]), vi("ify", F32, [2, 3, H])],
            consts(F32),
        )
        run_case("name-squat/if-constant", m2, None)


def case_refused_mix() -> None:
    """Shared constant where some sites are refused (eps outside root) between fused ones."""
    H = 8
    nodes, outs = [], []
    for i in range(6):
        n, y = ln_nodes("x", f"s{i}_", "eps", "two", None, refused=(i % 2 == 1))
        nodes += n
        outs.append(vi(y, F32, [2, 3, H]))
    m = model(nodes, [vi("x", F32, [2, 3, H])], outs, consts(F32))
    run_case("refused-mix", m, 3)
    run_case("refused-mix/validate", m, 3, validate=True)


def case_opset_raise() -> None:
    """--target onnx on an opset-13 model (axes attribute), shared ones after raising."""
    H = 8
    n1, y1 = ln_nodes("x", "a_", "eps", "two", None)
    n2, y2 = ln_nodes("x", "b_", "eps", "two", None)
    tn, ty = ln_nodes("x", "t_", "eps", "two", None)
    en, ey = ln_nodes("x", "e_", "eps", "two", None)
    nodes = (
        n1
        + n2
        + [
            helper.make_node(
                "If",
                ["c"],
                ["ify"],
                then_branch=helper.make_graph(tn, "t", [], [vi(ty, F32, [2, 3, H])]),
                else_branch=helper.make_graph(en, "e", [], [vi(ey, F32, [2, 3, H])]),
            )
        ]
    )
    m = model(
        nodes,
        [vi("x", F32, [2, 3, H]), vi("c", TensorProto.BOOL, [])],
        [vi(y1, F32, [2, 3, H]), vi(y2, F32, [2, 3, H]), vi("ify", F32, [2, 3, H])],
        consts(F32),
        opset=13,
    )
    f = run_case("opset13/onnx", m, 4, target="onnx")
    if f is not None:
        print(f"   opset after: {[(o.domain, o.version) for o in f.opset_import]}")
    run_case("opset13/ort", m, 4)


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def case_external_data() -> None:
    """Weights external; save via API and CLI; inputs unchanged; output loads and matches."""
    H = 64
    nodes, outs = [], []
    inits = consts(F32)
    for i in range(4):
        n, y = ln_nodes("x", f"s{i}_", "eps", "two", None)
        nodes += n
        # affine with big weights so they go external
        g = numpy_helper.from_array(np.linspace(0.5, 1.5, H).astype(np.float32) + i, f"w{i}")
        inits.append(g)
        nodes.append(helper.make_node("Mul", [y, f"w{i}"], [f"o{i}"]))
        outs.append(vi(f"o{i}", F32, [2, 3, H]))
    # unaffine site too (needs created ones)
    n, y = ln_nodes("x", "u_", "eps", "two", None)
    nodes += n
    outs.append(vi(y, F32, [2, 3, H]))
    big = numpy_helper.from_array(
        np.random.default_rng(0).normal(size=(H, H)).astype(np.float32), "W"
    )
    inits.append(big)
    nodes.append(helper.make_node("MatMul", [y, "W"], ["mm"]))
    outs.append(vi("mm", F32, [2, 3, H]))
    m = model(nodes, [vi("x", F32, [2, 3, H])], outs, inits)
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        onnx.save(
            m,
            d / "in.onnx",
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location="in.onnx.data",
            size_threshold=0,
        )
        before = {p.name: sha(p) for p in d.iterdir()}
        COUNTS["cases"] += 1
        res = normfuse.optimize(str(d / "in.onnx"))
        normfuse.save(res, d / "api.onnx")
        r = subprocess.run(
            [
                NORMFUSE,
                "optimize",
                str(d / "in.onnx"),
                "-o",
                str(d / "cli.onnx"),
                "--validate",
                "--quiet",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if r.returncode != 0:
            FAILS.append(f"extdata: CLI rc={r.returncode} {r.stderr[:300]}")
        r2 = subprocess.run(
            [
                NORMFUSE,
                "optimize",
                str(d / "in.onnx"),
                "-o",
                str(d / "clionnx.onnx"),
                "--target",
                "onnx",
                "--quiet",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if r2.returncode != 0:
            FAILS.append(f"extdata/onnx: CLI rc={r2.returncode} {r2.stderr[:300]}")
        after = {p.name: sha(p) for p in d.iterdir() if p.name in before}
        if after != before:
            FAILS.append("extdata: input files changed")
        stray = sorted(
            p.name for p in d.iterdir() if p.name.endswith(".tmp") or p.name.startswith(".")
        )
        if stray:
            FAILS.append(f"extdata: stray files {stray}")
        (d / "sub").mkdir()
        r3 = subprocess.run(
            [
                NORMFUSE,
                "optimize",
                str(d / "in.onnx"),
                "-o",
                str(d / "sub" / "far.onnx"),
                "--quiet",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if r3.returncode != 0:
            FAILS.append(f"extdata/sub: CLI rc={r3.returncode} {r3.stderr[:300]}")
        print(f"   sub/: {sorted(p.name for p in (d / 'sub').iterdir())}")
        orig = onnx.load(d / "in.onnx")
        for out in ("api.onnx", "cli.onnx", "clionnx.onnx", "sub/far.onnx"):
            if not (d / out).exists():
                continue
            full_check(f"extdata/{out}", str(d / out))
            fm = onnx.load(d / out)
            w = compare(f"extdata/{out}", orig, fm)
            raw = onnx.load(d / out, load_external_data=False)
            ext = [
                (t.name, {e.key: e.value for e in t.external_data}.get("location"))
                for t in raw.graph.initializer
                if t.data_location == TensorProto.EXTERNAL
            ]
            print(
                f"[extdata/{out}] fused={nfused(fm)} files={sorted(p.name for p in d.iterdir())} "
                f"external={len(ext)}/{len(fm.graph.initializer)} {sorted({loc for _, loc in ext})} worst_rel={w:.2e}"
            )
            if len(ext) < 5:
                FAILS.append(
                    f"extdata/{out}: only {len(ext)} initializers external (5 weights were)"
                )
            if nfused(fm) != 5:
                FAILS.append(f"extdata/{out}: fused {nfused(fm)} != 5")


# ---------------------------------------------------------------- large graphs


def chain(
    n_sites: int, refuse_every: int = 0, H: int = 16, affine_every: int = 0
) -> onnx.ModelProto:
    nodes = []
    cur = "x"
    inits = consts(F32)
    for i in range(n_sites):
        refused = bool(refuse_every) and i % refuse_every == refuse_every - 1
        n, y = ln_nodes(cur, f"s{i}_", "eps", "two", None, refused=refused)
        nodes += n
        if affine_every and i % affine_every == 0:
            inits.append(
                numpy_helper.from_array(np.full([H], 1.0 + (i % 7) * 0.1, np.float32), f"g{i}")
            )
            nodes.append(helper.make_node("Mul", [y, f"g{i}"], [f"s{i}_g"]))
            y = f"s{i}_g"
        # keep numbers moving: add input back so every site sees fresh offsets
        nodes.append(helper.make_node("Add", [y, "x"], [f"s{i}_r"]))
        cur = f"s{i}_r"
    return model(nodes, [vi("x", F32, [2, 3, H])], [vi(cur, F32, [2, 3, H])], inits)


def case_large() -> None:
    for n_sites, refuse, affine in ((700, 0, 0), (700, 5, 3), (2500, 7, 4)):
        m = chain(n_sites, refuse, affine_every=affine)
        tag = f"chain{len(m.graph.node)}n/refuse{refuse}"
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            onnx.save(m, d / "in.onnx")
            h0 = sha(d / "in.onnx")
            outs = []
            for k in range(2):
                COUNTS["cases"] += 1
                t0 = time.time()
                r = subprocess.run(
                    [
                        NORMFUSE,
                        "optimize",
                        str(d / "in.onnx"),
                        "-o",
                        str(d / f"o{k}.onnx"),
                        "--quiet",
                        "--report",
                        str(d / f"r{k}.json"),
                    ],
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                dt = time.time() - t0
                if r.returncode != 0:
                    FAILS.append(f"{tag}: rc={r.returncode} {r.stderr[:300]}")
                    break
                outs.append((d / f"o{k}.onnx").read_bytes())
            if sha(d / "in.onnx") != h0:
                FAILS.append(f"{tag}: input changed")
            if len(outs) == 2 and outs[0] != outs[1]:
                FAILS.append(f"{tag}: two runs not byte-identical")
            if outs:
                fm = onnx.load_from_string(outs[0])
                expect = n_sites - (n_sites // refuse if refuse else 0)
                k = nfused(fm)
                full_check(tag, fm)
                w = compare(tag, m, fm)
                ones = [
                    t.name
                    for t in fm.graph.initializer
                    if t.name not in {x.name for x in m.graph.initializer}
                ]
                print(
                    f"[{tag}] fused={k} expect={expect} identical={len(outs) == 2 and outs[0] == outs[1]} "
                    f"created_inits={len(ones)} last_run={dt:.1f}s worst_rel={w:.2e}"
                )
                if k != expect:
                    FAILS.append(f"{tag}: fused {k} != {expect}")
            # validate once on the largest (one run)
            if n_sites == 700 and refuse:
                COUNTS["cases"] += 1
                t0 = time.time()
                r = subprocess.run(
                    [
                        NORMFUSE,
                        "optimize",
                        str(d / "in.onnx"),
                        "-o",
                        str(d / "v.onnx"),
                        "--quiet",
                        "--validate",
                    ],
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                print(
                    f"[{tag}/validate] rc={r.returncode} {time.time() - t0:.1f}s {r.stderr[-200:]!r}"
                )
                if r.returncode != 0:
                    FAILS.append(f"{tag}/validate: rc={r.returncode} {r.stderr[:300]}")
                elif (d / "v.onnx").read_bytes() != outs[0]:
                    print(
                        f"   note: --validate output differs from plain output (fused {nfused(onnx.load(d / 'v.onnx'))})"
                    )


def case_large_scopes() -> None:
    """A 5k+ node graph whose sites also sit in If branches, a Loop body and a local function,
    float16 and float32 side by side; run twice through the CLI (byte-identical), --target onnx."""
    H = 16
    big = chain(720, 9, H=H, affine_every=5)
    g = big.graph
    nodes = list(g.node)
    tn, ty = ln_nodes("x", "t_", "eps", "two", None)
    en, ey = ln_nodes("x", "e_", "eps", "two", None)
    nodes.append(
        helper.make_node(
            "If",
            ["c"],
            ["ify"],
            then_branch=helper.make_graph(tn, "t", [], [vi(ty, F32, [2, 3, H])]),
            else_branch=helper.make_graph(en, "e", [], [vi(ey, F32, [2, 3, H])]),
        )
    )
    nodes += [
        helper.make_node("F1", ["x"], ["fy1"], domain="local"),
        helper.make_node("F1", ["x"], ["fy2"], domain="local"),
    ]
    hn, hy = ln_nodes("h", "h_", "heps", "htwo", None)
    nodes += hn
    m = model(
        nodes,
        [*g.input, vi("c", TensorProto.BOOL, []), vi("h", F16, [2, 3, H])],
        [
            *g.output,
            vi("ify", F32, [2, 3, H]),
            vi("fy1", F32, [2, 3, H]),
            vi("fy2", F32, [2, 3, H]),
            vi(hy, F16, [2, 3, H]),
        ],
        list(g.initializer) + consts(F16, "h"),
        functions=[_fn("F1", H, F32)],
        extra_opsets=[helper.make_opsetid("local", 1)],
    )
    print(f"   nodes={len(m.graph.node)}")
    for target in ("ort", "onnx"):
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            onnx.save(m, d / "in.onnx")
            h0 = sha(d / "in.onnx")
            outs = []
            for k in range(2):
                COUNTS["cases"] += 1
                r = subprocess.run(
                    [
                        NORMFUSE,
                        "optimize",
                        str(d / "in.onnx"),
                        "-o",
                        str(d / f"o{k}.onnx"),
                        "--quiet",
                        "--target",
                        target,
                    ],
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                if r.returncode != 0:
                    FAILS.append(f"large-scopes/{target}: rc={r.returncode} {r.stderr[:300]}")
                    break
                outs.append((d / f"o{k}.onnx").read_bytes())
            if sha(d / "in.onnx") != h0:
                FAILS.append(f"large-scopes/{target}: input changed")
            if len(outs) == 2:
                fm = onnx.load_from_string(outs[0])
                full_check(f"large-scopes/{target}", fm)
                w = compare(f"large-scopes/{target}", m, fm)
                print(
                    f"[large-scopes/{target}] fused={nfused(fm)} expect={720 - 80 + 2 + 1 + 1} identical={outs[0] == outs[1]} "
                    f"created={created_inits(m, fm)} worst_rel={w:.2e}"
                )
                if outs[0] != outs[1]:
                    FAILS.append(f"large-scopes/{target}: two runs differ")
                if nfused(fm) != 720 - 80 + 4:
                    FAILS.append(f"large-scopes/{target}: fused {nfused(fm)} != {720 - 80 + 4}")


def case_if_fn_main() -> None:
    """Minimal: a main-graph site, an If node (no site needed in it) and a local-function call.
    Valid model (checker full_check, ORT loads); normfuse refuses it with 'nests too deeply'."""
    H = 8
    f = helper.make_function(
        "local",
        "F1",
        ["X"],
        ["Y"],
        [helper.make_node("Relu", ["X"], ["Y"])],
        [helper.make_opsetid("", 17)],
    )
    then_g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["ty"])], "t", [], [vi("ty", F32, [2, 3, H])]
    )
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["ey"])], "e", [], [vi("ey", F32, [2, 3, H])]
    )
    n, y = ln_nodes("x", "m_", "eps", "two", None)
    nodes = [
        helper.make_node("If", ["c"], ["y1"], then_branch=then_g, else_branch=else_g),
        helper.make_node("F1", ["x"], ["y2"], domain="local"),
        *n,
    ]
    m = model(
        nodes,
        [vi("x", F32, [2, 3, H]), vi("c", TensorProto.BOOL, [])],
        [vi("y1", F32, [2, 3, H]), vi("y2", F32, [2, 3, H]), vi(y, F32, [2, 3, H])],
        consts(F32),
        functions=[f],
        extra_opsets=[helper.make_opsetid("local", 1)],
    )
    run_case("if+fn+main-site", m, 1)


def case_signals() -> None:
    m = chain(2500, 7, affine_every=4)
    for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        for delay in (1.0, 3.0, 6.0, 7.5, 8.5):
            COUNTS["cases"] += 1
            with tempfile.TemporaryDirectory() as d:
                d = Path(d)
                onnx.save(m, d / "in.onnx")
                (d / "old.onnx").write_bytes(b"OLD")
                before = {p.name: sha(p) for p in d.iterdir()}
                p = subprocess.Popen(
                    [
                        NORMFUSE,
                        "optimize",
                        str(d / "in.onnx"),
                        "-o",
                        str(d / "old.onnx"),
                        "--report",
                        str(d / "rep.json"),
                        "--quiet",
                    ],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                time.sleep(delay)
                finished = p.poll() is not None
                if not finished:
                    os.kill(p.pid, sig)
                t_sig = time.time()
                try:
                    _out, err = p.communicate(timeout=60)
                except subprocess.TimeoutExpired:
                    os.kill(p.pid, signal.SIGKILL)
                    FAILS.append(f"signal {sig.name}@{delay}s: hang after signal")
                    continue
                names = sorted(x.name for x in d.iterdir())
                tb = "Traceback" in err
                print(
                    f"[signal {sig.name}@{delay}s] finished_before={finished} rc={p.returncode} exit_after={time.time() - t_sig:.2f}s files={names} "
                    f"stderr={err.strip()[-160:]!r}"
                )
                if finished:
                    continue
                if p.returncode != code:
                    FAILS.append(f"signal {sig.name}@{delay}s: rc={p.returncode} != {code}")
                if tb:
                    FAILS.append(f"signal {sig.name}@{delay}s: traceback on stderr")
                if (d / "rep.json").exists():
                    # the signal came after the commit: both outputs must be whole
                    onnx.checker.check_model(str(d / "old.onnx"), full_check=True)
                    json.loads((d / "rep.json").read_text())
                    FAILS.append(
                        f"signal {sig.name}@{delay}s: outputs committed (whole) but rc={p.returncode} "
                        f"and stderr {err.strip()[-80:]!r}"
                    )
                    continue
                if names != sorted(before):
                    FAILS.append(f"signal {sig.name}@{delay}s: files left {names}")
                if {x: sha(d / x) for x in before} != before:
                    FAILS.append(f"signal {sig.name}@{delay}s: existing file changed")


def case_signal_after_commit() -> None:
    """Signal sent the moment the committed outputs appear: they must be whole; records the exit
    code and message the run reports then."""
    m = chain(2500, 7, affine_every=4)
    for sig in (signal.SIGTERM, signal.SIGINT):
        COUNTS["cases"] += 1
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            onnx.save(m, d / "in.onnx")
            (d / "old.onnx").write_bytes(b"OLD")
            p = subprocess.Popen(
                [
                    NORMFUSE,
                    "optimize",
                    str(d / "in.onnx"),
                    "-o",
                    str(d / "old.onnx"),
                    "--report",
                    str(d / "rep.json"),
                    "--quiet",
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            while (
                p.poll() is None
                and not (d / "rep.json").exists()
                and (d / "old.onnx").read_bytes() == b"OLD"
            ):
                time.sleep(0.002)
            state = sorted(x.name for x in d.iterdir())
            sent = p.poll() is None
            if sent:
                os.kill(p.pid, sig)
            _, err = p.communicate(timeout=60)
            whole = True
            try:
                onnx.checker.check_model(str(d / "old.onnx"), full_check=True)
                json.loads((d / "rep.json").read_text())
            except Exception as e:
                whole = False
                FAILS.append(f"signal-after-commit {sig.name}: partial output {str(e)[:100]}")
            print(
                f"[signal-after-commit {sig.name}] sent={sent} files_when_sent={state} rc={p.returncode} "
                f"outputs_whole={whole} stderr={err.strip()[-120:]!r}"
            )
            if sent and p.returncode != 0:
                FAILS.append(
                    f"signal-after-commit {sig.name}: outputs committed but rc={p.returncode}, "
                    f"stderr {err.strip()[-80:]!r}"
                )


def case_large_error() -> None:
    """An error mid-run on a large graph must surface (exit 2, one line), no output."""
    m = chain(800, 0)
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    m.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    COUNTS["cases"] += 1
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        onnx.save(m, d / "in.onnx")
        r = subprocess.run(
            [
                NORMFUSE,
                "optimize",
                str(d / "in.onnx"),
                "-o",
                str(d / "o.onnx"),
                "--validate",
                "--dims",
                "nosuch=3",
                "--quiet",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        names = sorted(x.name for x in d.iterdir())
        print(
            f"[large-error/bad-dims] rc={r.returncode} files={names} stderr={r.stderr.strip()[:200]!r}"
        )
        if r.returncode != 2 or names != ["in.onnx"] or "Traceback" in r.stderr:
            FAILS.append(f"large-error/bad-dims: rc={r.returncode} files={names}")
        # an npz with wrong shape for validate
        (d / "o.onnx").unlink(missing_ok=True)
        np.savez(d / "bad.npz", x=np.zeros([4, 3, 5], np.float32))
        r = subprocess.run(
            [
                NORMFUSE,
                "optimize",
                str(d / "in.onnx"),
                "-o",
                str(d / "o.onnx"),
                "--validate",
                "--inputs",
                str(d / "bad.npz"),
                "--quiet",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        names = sorted(x.name for x in d.iterdir())
        print(
            f"[large-error/bad-npz] rc={r.returncode} files={names} stderr={r.stderr.strip()[:200]!r}"
        )
        if r.returncode != 2 or names != ["bad.npz", "in.onnx"] or "Traceback" in r.stderr:
            FAILS.append(f"large-error/bad-npz: rc={r.returncode} files={names}")


CASES = {
    "main_if_loop": case_main_if_loop,
    "functions": case_functions,
    "mixed_dtype": case_mixed_dtype,
    "adaln": case_adaln,
    "name_squat": case_name_squat,
    "refused_mix": case_refused_mix,
    "opset_raise": case_opset_raise,
    "external_data": case_external_data,
    "large": case_large,
    "large_error": case_large_error,
    "large_scopes": case_large_scopes,
    "if_fn_main": case_if_fn_main,
    "signals": case_signals,
    "signal_after_commit": case_signal_after_commit,
}


def main() -> int:
    chosen = sys.argv[1:] or list(CASES)
    for name in chosen:
        t0 = time.time()
        try:
            CASES[name]()
        except Exception as e:
            FAILS.append(f"{name}: probe crashed {type(e).__name__}: {str(e)[:300]}")
        print(f"-- {name} {time.time() - t0:.1f}s")
    print(
        f"\ncases={COUNTS['cases']} numeric_checks={COUNTS['numeric_checks']} failures={len(FAILS)}"
    )
    for f in FAILS:
        print("FAIL", f)
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
