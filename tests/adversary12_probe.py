# ruff: noqa
# An adversary's standalone probe (never collected by pytest).
"""ADV12 probe: node order of outputs (reversed/shuffled inputs, long norm chains, If/Loop/functions)
and --dims/--inputs conflicts on optimize --validate and bench.

Run: .venv/bin/python tests/adversary12_probe.py [filter]
One line per case: name, outcome, max diff.
"""

import hashlib
import os
import random
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

NF = os.path.join(os.path.dirname(sys.executable), "normfuse")
ROOT = tempfile.mkdtemp(prefix="adv12_")
FILTER = sys.argv[1] if len(sys.argv) > 1 else ""
BAD = []


class B:
    def __init__(self, pre="", inits=None):
        self.nodes, self.inits, self.pre, self.n = [], [] if inits is None else inits, pre, 0

    def fresh(self, s):
        self.n += 1
        return f"{self.pre}{s}_{self.n}"

    def op(self, t, ins, out=None, **kw):
        o = out or self.fresh(t.lower())
        self.nodes.append(h.make_node(t, ins, [o], name=self.fresh("n_" + t), **kw))
        return o

    def c(self, v, s="c", dt=np.float32):
        name = self.fresh(s)
        self.inits.append(nh.from_array(np.asarray(v, dtype=dt), name))
        return name

    def cnode(self, v, s="k", dt=np.float32):  # Constant node (usable inside bodies)
        o = self.fresh(s)
        self.nodes.append(
            h.make_node(
                "Constant",
                [],
                [o],
                name=self.fresh("n_C"),
                value=nh.from_array(np.asarray(v, dtype=dt)),
            )
        )
        return o


def ln(b, x, D, const=None, eps=1e-5, affine=True):
    c = const or b.c
    m = b.op("ReduceMean", [x, c([-1], "ax", np.int64)], keepdims=1)
    d = b.op("Sub", [x, m])
    v = b.op("ReduceMean", [b.op("Mul", [d, d]), c([-1], "ax", np.int64)], keepdims=1)
    y = b.op("Div", [d, b.op("Sqrt", [b.op("Add", [v, c(eps, "eps")])])])
    if affine:
        y = b.op(
            "Add",
            [b.op("Mul", [y, c(np.linspace(0.5, 1.5, D), "g")]), c(np.linspace(-1, 1, D), "b")],
        )
    return y


def rms(b, x, D, const=None, eps=1e-6):
    c = const or b.c
    v = b.op("ReduceMean", [b.op("Mul", [x, x]), c([-1], "ax", np.int64)], keepdims=1)
    y = b.op("Div", [x, b.op("Sqrt", [b.op("Add", [v, c(eps, "eps")])])])
    return b.op("Mul", [y, c(np.linspace(0.7, 1.3, D), "g")])


def vi(n, shape, dt=T.FLOAT):
    return h.make_tensor_value_info(n, dt, shape)


def mk(nodes, inits, ins, outs, functions=(), order="rev", seed=0, extra_opsets=()):
    nodes = list(nodes)
    if order == "rev":
        nodes.reverse()
    elif order == "shuf":
        random.Random(seed).shuffle(nodes)
    g = h.make_graph(nodes, "g", ins, outs, inits)
    m = h.make_model(
        g, opset_imports=[h.make_opsetid("", 18), *extra_opsets], functions=list(functions)
    )
    m.ir_version = 9
    return m


def sess(path):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def topo_check(graph, outer=frozenset(), where="main"):
    """Return list of problems: node inputs not produced earlier in this graph or an enclosing scope."""
    probs = []
    known = set(outer) | {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    for i, n in enumerate(graph.node):
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                probs += topo_check(a.g, known, f"{where}/{n.name}.{a.name}")
            for sg in a.graphs:
                probs += topo_check(sg, known, f"{where}/{n.name}.{a.name}")
        for x in n.input:
            if x not in known:
                probs.append(f"{where}: node #{i} {n.op_type} {n.name} reads {x} before it is made")
                break
        known |= set(n.output)
    for o in graph.output:
        if o.name not in known:
            probs.append(f"{where}: output {o.name} unproduced")
    return probs


def topo_fn(f):
    known = set(f.input) | {""}
    for i, n in enumerate(f.node):
        for x in n.input:
            if x not in known:
                return [f"function {f.name}: node #{i} {n.op_type} reads {x} early"]
        known |= set(n.output)
    return []


def count_ops(m):
    ops = {}

    def walk(g):
        for n in g.node:
            ops[n.op_type] = ops.get(n.op_type, 0) + 1
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)

    walk(m.graph)
    for f in m.functions:
        for n in f.node:
            ops[n.op_type] = ops.get(n.op_type, 0) + 1
    return ops


def feeds_for(m, rng):
    outs = []
    for kind in ("rand", "offset", "tiny", "const", "neg"):
        f = {}
        for i in m.graph.input:
            shp = [d.dim_value if d.dim_value else 3 for d in i.type.tensor_type.shape.dim]
            et = i.type.tensor_type.elem_type
            if et == T.BOOL:
                f[i.name] = np.array(True)
                continue
            if et == T.INT64:
                f[i.name] = np.array(3, dtype=np.int64)
                continue
            a = rng.standard_normal(shp)
            if kind == "offset":
                a = a + 1e3
            elif kind == "tiny":
                a = a * 1e-4
            elif kind == "const":
                a = np.full(shp, 2.5)
            elif kind == "neg":
                a = -np.abs(a) * 10
            f[i.name] = a.astype(np.float32)
        outs.append((kind, f))
    return outs


def case(name, m, extra_args=(), bool_inputs=(), tol=1e-3):
    if FILTER and FILTER not in name:
        return
    inp = os.path.join(ROOT, name + ".onnx")
    onnx.save(m, inp)
    try:
        so = sess(inp)
    except Exception as e:
        print(f"{name:40s} SKIP original does not load: {str(e).splitlines()[0][:100]}")
        return
    digest = hashlib.sha256(open(inp, "rb").read()).hexdigest()
    for tgt in ("ort", "onnx"):
        out = os.path.join(ROOT, f"{name}.{tgt}.out.onnx")
        p = subprocess.run(
            [NF, "optimize", inp, "-o", out, "--target", tgt, *extra_args],
            capture_output=True,
            text=True,
            timeout=300,
        )
        tag = f"{name}[{tgt}]"
        if hashlib.sha256(open(inp, "rb").read()).hexdigest() != digest:
            BAD.append(tag)
            print(f"{tag:40s} WIN input changed")
        if p.returncode != 0:
            lines = p.stderr.strip().splitlines()
            kind = "TRACEBACK" if "Traceback" in p.stderr else "refused"
            BAD.append(tag)
            print(f"{tag:40s} {kind} rc={p.returncode} {lines[-1][:120] if lines else ''}")
            continue
        om = onnx.load(out)
        probs = topo_check(om.graph)
        try:
            onnx.checker.check_model(om, full_check=(tgt == "onnx"))
            chk = "chk-ok"
        except Exception as e:
            chk = "chk-FAIL:" + str(e).splitlines()[0][:60]
        try:
            onnx.checker.check_model(m)
            chk = "in-chk-ok/" + chk
        except Exception:
            chk = "in-chk-fail/" + chk
        for f in om.functions:
            probs += topo_fn(f)
        try:
            s2 = sess(out)
        except Exception as e:
            BAD.append(tag)
            print(f"{tag:40s} WIN output does not load: {str(e).splitlines()[0][:120]}")
            continue
        rng = np.random.default_rng(0)
        worst = 0.0
        combos = [()]
        for bname in bool_inputs:
            combos = [c + ((bname, v),) for c in combos for v in (True, False)]
        for kind, f in feeds_for(m, rng):
            for combo in combos:
                ff = dict(f)
                for bname, v in combo:
                    ff[bname] = np.array(v)
                a = so.run(None, ff)
                b = s2.run(None, ff)
                for x, y in zip(a, b):
                    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
                    if x.shape != y.shape:
                        worst = float("inf")
                        continue
                    d = np.abs(x - y) / (1 + np.abs(x))
                    d = np.nan_to_num(d, nan=0.0 if True else 1)
                    worst = max(worst, float(np.max(d)) if d.size else 0.0)
        ops = count_ops(om)
        fused = {k: v for k, v in ops.items() if "Norm" in k}
        outcome = "ok"
        if probs:
            outcome = "WIN not-topo: " + probs[0][:110]
        elif worst > tol:
            outcome = "WIN numerics"
        if outcome != "ok":
            BAD.append(tag)
        print(
            f"{tag:40s} {outcome} maxdiff={worst:.2e} fused={fused} nodes={len(om.graph.node)} {chk}"
        )


D = 8


def chain_model(n, order, kinds="ln"):
    b = B()
    x = "x"
    for i in range(n):
        k = kinds[i % len(kinds)] if kinds != "ln" else "l"
        x = ln(b, x, D) if k == "l" else rms(b, x, D)
    b.op("Identity", [x], "y")
    return mk(b.nodes, b.inits, [vi("x", [2, 3, D])], [vi("y", [2, 3, D])], order=order, seed=n)


def if_model(order, nested_norm=True):
    b = B()
    n1 = ln(b, "x", D)
    other = b.op("Mul", ["x", b.c(2.0, "two")])
    br = {}
    for which in ("then", "else"):
        bb = B(pre=which + "_")
        if which == "then":
            z = bb.op("Add", [n1, other])
            z = ln(bb, z, D, const=bb.cnode) if nested_norm else z
            z = bb.op("Add", [z, "x"])
        else:
            z = rms(bb, bb.op("Sub", [other, n1]), D, const=bb.cnode)
            z = bb.op("Mul", [z, n1])
        bb.op("Identity", [z], which + "_out")
        nodes = list(bb.nodes)
        br[which] = h.make_graph(nodes, which, [], [vi(which + "_out", None)])
    b.nodes.append(
        h.make_node(
            "If", ["cond"], ["ifo"], name="the_if", then_branch=br["then"], else_branch=br["else"]
        )
    )
    y = ln(b, "ifo", D)
    b.op("Add", [y, n1], "y")
    return mk(
        b.nodes,
        b.inits,
        [vi("x", [2, 3, D]), vi("cond", [], T.BOOL)],
        [vi("y", [2, 3, D])],
        order=order,
    )


def fn_model(order):
    fb = B(pre="f_")
    y = ln(fb, "fx", D, const=fb.cnode, affine=False)
    y = rms(fb, y, D, const=fb.cnode)
    fb.op("Identity", [y], "fy")
    fnodes = list(fb.nodes)
    f = h.make_function("local", "NormBlk", ["fx"], ["fy"], fnodes, [h.make_opsetid("", 18)])
    b = B()
    a = ln(b, "x", D)
    b.nodes.append(h.make_node("NormBlk", [a], ["c1"], name="call1", domain="local"))
    b.nodes.append(h.make_node("NormBlk", ["c1"], ["c2"], name="call2", domain="local"))
    b.op("Add", [ln(b, "c2", D), a], "y")
    return mk(
        b.nodes,
        b.inits,
        [vi("x", [2, 3, D])],
        [vi("y", [2, 3, D])],
        functions=[f],
        order=order,
        extra_opsets=[h.make_opsetid("local", 1)],
    )


def loop_model(order):
    b = B()
    pre = ln(b, "x", D)
    outer = b.op("Mul", [pre, b.c(0.5, "half")])
    lb = B(pre="L_")
    z = lb.op("Add", ["carry", outer])
    z = ln(lb, z, D, const=lb.cnode)
    z = lb.op("Add", [z, pre])
    lb.op("Identity", [z], "carry_out")
    lb.op("Identity", ["cond_in"], "cond_out")
    lnodes = list(lb.nodes)
    body = h.make_graph(
        lnodes,
        "body",
        [vi("i", [], T.INT64), vi("cond_in", [], T.BOOL), vi("carry", None)],
        [vi("cond_out", [], T.BOOL), vi("carry_out", None)],
    )
    b.nodes.append(h.make_node("Loop", ["trip", "", "x"], ["lo"], name="the_loop", body=body))
    b.op("Add", [ln(b, "lo", D), outer], "y")
    return mk(
        b.nodes,
        b.inits,
        [vi("x", [2, 3, D]), vi("trip", [], T.INT64)],
        [vi("y", [2, 3, D])],
        order=order,
    )


def diamond_model(order, seed):
    # norms whose outputs fan out and rejoin, all shuffled
    b = B()
    xs = ["x"]
    for i in range(30):
        src = xs[random.Random(seed + i).randrange(len(xs))]
        src2 = xs[random.Random(seed * 7 + i).randrange(len(xs))]
        y = ln(b, b.op("Add", [src, src2]), D) if i % 2 else rms(b, src, D)
        xs.append(y)
    acc = xs[0]
    for y in xs[1:]:
        acc = b.op("Add", [acc, y])
    b.op("Identity", [acc], "y")
    return mk(b.nodes, b.inits, [vi("x", [2, 3, D])], [vi("y", [2, 3, D])], order=order, seed=seed)


def part1():
    case("chain300_rev", chain_model(300, "rev"), tol=1e-2)
    case("chain300_shuf_mixed", chain_model(300, "shuf", "lr"), tol=1e-2)
    case("chain5_fwd", chain_model(5, "fwd"))
    case("diamond_shuf", diamond_model("shuf", 3), tol=1e-2)
    case("diamond_rev", diamond_model("rev", 4), tol=1e-2)
    for o in ("fwd", "rev", "shuf"):
        case(f"if_{o}", if_model(o), bool_inputs=("cond",))
        case(f"fn_{o}", fn_model(o))
        case(f"loop_{o}", loop_model(o))
    case("if_rev_validate", if_model("rev"), extra_args=("--validate",), bool_inputs=("cond",))


# ---------------------------------------------------------------- part 2: --dims / --inputs
def sym_model():
    b = B()
    y = ln(b, "x", D)
    b.op("Identity", [y], "y")
    return mk(
        b.nodes,
        b.inits,
        [vi("x", ["batch", "seq", D])],
        [vi("y", ["batch", "seq", D])],
        order="fwd",
    )


def cli(name, args, want_rc, want_note=False):
    if FILTER and FILTER not in name:
        return
    before = set(os.listdir(ROOT))
    p = subprocess.run([NF, *args], capture_output=True, text=True, timeout=300, cwd=ROOT)
    err = p.stderr.strip().splitlines()
    out = p.stdout + p.stderr
    ok = p.returncode == want_rc and "Traceback" not in p.stderr
    if want_rc == 2:
        ok = ok and len([l for l in err if l.strip() and not l.startswith("usage")]) <= 1
    if want_note:
        ok = ok and "note:" in out
    if not ok:
        BAD.append(name)
    print(
        f"{name:40s} {'ok' if ok else 'WIN'} rc={p.returncode} (want {want_rc}) {(err[-1] if err else '')[:110]}"
        + ("" if not want_note else f" note={'note:' in out}")
    )
    return p


def part2():
    m = sym_model()
    inp = os.path.join(ROOT, "sym.onnx")
    onnx.save(m, inp)
    npz = os.path.join(ROOT, "seq5.npz")
    np.savez(npz, x=np.random.default_rng(1).standard_normal((1, 5, D)).astype(np.float32))
    o = os.path.join(ROOT, "symo.onnx")
    base = ["optimize", inp, "-o", o, "--validate"]
    bench = ["bench", inp, "--runs", "2", "--warmup", "1"]
    for tag, pre in (("opt", base), ("bench", bench)):
        cli(f"{tag}_dims_same_twice_oneflag", pre + ["--dims", "seq=4,seq=4"], 0)
        cli(f"{tag}_dims_same_twice_twoflags", pre + ["--dims", "seq=4", "--dims", "seq=4"], 0)
        cli(f"{tag}_dims_diff_oneflag", pre + ["--dims", "seq=4,seq=6"], 2)
        cli(f"{tag}_dims_diff_twoflags", pre + ["--dims", "seq=4", "--dims", "seq=6"], 2)
        cli(
            f"{tag}_dims_diff_batch_twoflags",
            pre + ["--dims", "batch=1,seq=4", "--dims", "batch=2"],
            2,
        )
        cli(f"{tag}_dims_space_same", pre + ["--dims", "seq=4, seq=4"], 0)
        cli(f"{tag}_dims_0_vs_00", pre + ["--dims", "seq=4", "--dims", "seq=04"], 0)
        cli(f"{tag}_inputs_vs_dims", pre + ["--dims", "seq=4", "--inputs", npz], 0, want_note=True)
        cli(
            f"{tag}_inputs_vs_dims_batch",
            pre + ["--dims", "batch=3,seq=5", "--inputs", npz],
            0,
            want_note=True,
        )
    left = [f for f in os.listdir(ROOT) if f.startswith("symo") and f != "symo.onnx"]
    if left:
        BAD.append("leftovers")
        print(f"{'leftover_files':40s} WIN {left}")


if __name__ == "__main__":
    part1()
    part2()
    print(f"-- {len(BAD)} flagged: {BAD}")
