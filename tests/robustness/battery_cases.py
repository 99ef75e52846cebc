"""The robustness battery's cases: bad and hostile inputs, tried as a hostile user would.

Each case is a function of a `Work` (the case's folder, with helpers that build models and odd
files in it) returning a `Run` (see battery_runner). `CASES` maps "class/name" to (function,
full): `full` cases (signals, large sparse files, another user, resource limits) run only with
NORMFUSE_ROBUSTNESS=full.
"""

from __future__ import annotations

import itertools
import os
import signal
import stat
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from battery_runner import Run
from onnx import TensorProto, helper

import normfuse
from models.builders import LayerNormSpec, local_function_model, norm_model

Case = Callable[["Work"], Run]
CASES: dict[str, tuple[Case, bool]] = {}


def case(klass: str, name: str, full: bool = False) -> Callable[[Case], Case]:
    def register(function: Case) -> Case:
        key = f"{klass}/{name}"
        assert key not in CASES, key
        CASES[key] = (function, full)
        return function

    return register


class Work:
    """A case's folder and builders for what goes in it."""

    def __init__(self, folder: Path, outside: Path) -> None:
        self.folder, self.outside = folder, outside

    def p(self, name: str) -> str:
        return str(self.folder / name)

    def model(self, name: str = "m.onnx", model: onnx.ModelProto | None = None) -> str:
        path = self.folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes((model or norm_model(LayerNormSpec())).SerializeToString())
        return str(path)

    def external(self, name: str = "m.onnx", location: str = "weights.bin") -> str:
        """A model whose initializers are all in `location` beside it."""
        path = self.folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        onnx.save(
            norm_model(LayerNormSpec(), layers=2),
            path,
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=location,
            size_threshold=0,
        )
        return str(path)

    def edit_external(self, name: str, **entries: str) -> str:
        """Rewrite the first external tensor's entries (key=value; value None drops the key)."""
        path = self.folder / name
        model = onnx.load(path, load_external_data=False)
        tensor = next(t for t in model.graph.initializer if t.external_data)
        values = {entry.key: entry.value for entry in tensor.external_data}
        values.update(entries)
        del tensor.external_data[:]
        for key, value in values.items():
            if value is not None:
                entry = tensor.external_data.add()
                entry.key, entry.value = key, value
        path.write_bytes(model.SerializeToString())
        return str(path)

    def file(self, name: str, payload: bytes = b"keep me\n") -> str:
        path = self.folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(payload)
        return str(path)

    def folder_(self, name: str) -> str:
        (self.folder / name).mkdir(parents=True, exist_ok=True)
        return self.p(name)

    def link(self, name: str, target: str) -> str:
        os.symlink(target, self.folder / name)
        return self.p(name)

    def device(self, name: str) -> str:
        """A character device node like /dev/null, inside the case folder (never the real one:
        a regression must not be able to replace system files)."""
        try:
            os.mknod(self.folder / name, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("creating a device node needs root")
        return self.p(name)

    def fifo(self, name: str) -> str:
        os.mkfifo(self.folder / name)
        return self.p(name)

    def npz(self, name: str, **arrays: np.ndarray) -> str:
        path = self.folder / name
        np.savez(path, **arrays)
        return str(path)


def x(batch: int = 2) -> np.ndarray:
    return np.zeros((batch, 7, 32), np.float32)


def _mode(name: str, expected: int) -> Callable[[Path], None]:
    def check(folder: Path) -> None:
        found = stat.S_IMODE((folder / name).stat().st_mode)
        assert found == expected, f"{name} has mode {found:o}, expected {expected:o}"

    return check


def _loads(name: str) -> Callable[[Path], None]:
    def check(folder: Path) -> None:
        model = onnx.load(folder / name)  # external data included: it must be where it says
        onnx.checker.check_model(model)

    return check


# --- outputs that would destroy inputs, or cannot be written ---------------------------------

REPORT_COMMANDS = {
    "optimize": lambda w, dest: ["optimize", w.model(), "-o", w.p("o.onnx"), "--report", dest],
    "validate": lambda w, dest: ["validate", w.model(), w.model("c.onnx"), "--report", dest],
    "bench": lambda w, dest: ["bench", w.model(), "--runs", "2", "--warmup", "0", "--json", dest],
    "tune": lambda w, dest: ["tune", w.model(), "--runs", "2", "--warmup", "0", "--json", dest],
}


def _destinations(w: Work) -> dict[str, tuple[Callable[[], str], str]]:
    """Bad report destinations: name -> (a function making the path, message)."""
    w.model()
    w.file("other.txt")
    return {
        "the-model": (lambda: w.p("m.onnx"), "input model"),
        "link-to-model": (lambda: w.link("l.json", w.p("m.onnx")), "input model"),
        "hardlink-to-model": (lambda: _hardlink(w, "m.onnx", "h.json"), "input model"),
        "a-directory": (lambda: w.folder_("d.json"), "directory"),
        "a-fifo": (lambda: w.fifo("f.json"), "FIFO"),
        "a-device": (lambda: w.device("null.json"), "device"),
        "link-to-device": (lambda: w.link("dev.json", w.device("zero")), "device"),
        "link-to-proc": (lambda: w.link("stdout.json", "/proc/self/fd/1"), "/proc"),
        "missing-folder": (lambda: w.p("nowhere/r.json"), "does not exist"),
        "folder-is-a-file": (lambda: w.p("other.txt/r.json"), "does not exist"),
        "name-too-long": (lambda: w.p("r" * 300 + ".json"), "longer than"),
        "in-sys": (lambda: "/sys/r.json", "/sys"),
        "dot": (lambda: w.p("."), "directory"),
    }


def _hardlink(w: Work, source: str, name: str) -> str:
    os.link(w.folder / source, w.folder / name)
    return w.p(name)


for _command, _build in REPORT_COMMANDS.items():
    for _dest in [
        "the-model",
        "link-to-model",
        "hardlink-to-model",
        "a-directory",
        "a-fifo",
        "a-device",
        "link-to-device",
        "missing-folder",
        "folder-is-a-file",
        "name-too-long",
        "in-sys",
        "link-to-proc",
        "dot",
    ]:

        def _report_case(w: Work, command=_command, build=_build, dest=_dest) -> Run:
            make, message = _destinations(w)[dest]
            return Run(build(w, make()), message=message)

        # /sys only in the full run: the default run writes nowhere outside its tmp folder,
        # even were the refusal to regress
        case("outputs", f"{_command}-report-{_dest}", full=_dest == "in-sys")(_report_case)


@case("outputs", "o-is-the-model")
def _(w: Work) -> Run:
    return Run(["optimize", w.model(), "-o", w.p("m.onnx")], message="--in-place")


@case("outputs", "o-is-the-external-data")
def _(w: Work) -> Run:
    return Run(["optimize", w.external(), "-o", w.p("weights.bin")], message="data files")


@case("outputs", "o-links-to-the-external-data")
def _(w: Work) -> Run:
    model = w.external()
    return Run(["optimize", model, "-o", w.link("o.onnx", w.p("weights.bin"))])


@case("outputs", "o-data-is-the-external-data")
def _(w: Work) -> Run:
    model = w.external("src/m.onnx", "w.bin")
    w.folder_("out")
    w.link("out/o.onnx.data", w.p("src/w.bin"))
    return Run(["optimize", model, "-o", w.p("out/o.onnx")], message="data files")


@case("outputs", "o-data-is-a-directory")
def _(w: Work) -> Run:
    model = w.external("src/m.onnx")
    w.folder_("out/o.onnx.data")
    return Run(["optimize", model, "-o", w.p("out/o.onnx")], message="directory")


@case("outputs", "report-is-the-o-data")
def _(w: Work) -> Run:
    model = w.external("src/m.onnx")
    w.folder_("out")
    argv = ["optimize", model, "-o", w.p("out/o.onnx"), "--report", w.p("out/o.onnx.data")]
    return Run(argv, message="same file")


@case("outputs", "report-is-the-external-data")
def _(w: Work) -> Run:
    model = w.external()
    return Run(["optimize", model, "-o", w.p("o.onnx"), "--report", w.p("weights.bin")])


@case("outputs", "report-links-to-the-external-data")
def _(w: Work) -> Run:
    model = w.external()
    link = w.link("r.json", w.p("weights.bin"))
    return Run(["optimize", model, "-o", w.p("o.onnx"), "--report", link])


@case("outputs", "report-is-o")
def _(w: Work) -> Run:
    return Run(["optimize", w.model(), "-o", w.p("o.onnx"), "--report", w.p("o.onnx")])


@case("outputs", "report-is-o-spelled-otherwise")
def _(w: Work) -> Run:
    w.folder_("sub")
    other = w.p("sub/../o.onnx")
    return Run(["optimize", w.model(), "-o", w.p("o.onnx"), "--report", other], message="same")


@case("outputs", "report-links-to-o")
def _(w: Work) -> Run:
    link = w.link("r.json", w.p("o.onnx"))
    return Run(["optimize", w.model(), "-o", w.p("o.onnx"), "--report", link], message="same")


@case("outputs", "validate-report-is-the-candidate")
def _(w: Work) -> Run:
    return Run(["validate", w.model(), w.model("c.onnx"), "--report", w.p("c.onnx")])


@case("outputs", "validate-report-is-the-candidate-data")
def _(w: Work) -> Run:
    original, candidate = w.model(), w.external("c/c.onnx", "cw.bin")
    return Run(["validate", original, candidate, "--report", w.p("c/cw.bin")])


@case("outputs", "bench-json-is-the-second-model")
def _(w: Work) -> Run:
    argv = ["bench", w.model(), w.model("b.onnx"), "--runs", "2", "--json", w.p("b.onnx")]
    return Run(argv)


@case("outputs", "in-place-with-o-elsewhere")
def _(w: Work) -> Run:
    return Run(["optimize", w.model(), "--in-place", "-o", w.p("o.onnx")], message="--in-place")


@case("outputs", "no-o")
def _(w: Work) -> Run:
    return Run(["optimize", w.model()], message="-o/--output")


for _name, _dest, _message in [
    ("o-is-a-directory", "d", "directory"),
    ("o-is-a-fifo", "f", "FIFO"),
    ("o-links-to-proc-stdout", "lstdout", "/proc"),
    ("o-is-a-device", "null", "device"),
    ("o-is-empty", "", "directory"),
    ("o-is-root", "/", "directory"),
    ("o-name-too-long", "o" * 300 + ".onnx", "longer than"),
    ("o-in-missing-folder", "nowhere/o.onnx", "does not exist"),
    ("o-under-a-file", "other.txt/o.onnx", "does not exist"),
    ("o-in-sys", "/sys/o.onnx", "/sys"),
    ("o-links-to-a-directory", "ld", "directory"),
]:

    def _o_case(w: Work, dest=_dest, message=_message) -> Run:
        w.folder_("d")
        w.fifo("f")
        w.file("other.txt")
        w.link("ld", w.p("d"))
        w.link("lstdout", "/proc/self/fd/1")
        if dest == "null":
            w.device("null")
        target = dest if dest.startswith("/") or not dest else w.p(dest)
        return Run(["optimize", w.model(), "-o", target], message=message)

    case("outputs", _name, full=_dest.startswith("/sys"))(_o_case)  # /sys: full run only


@case("outputs", "o-link-is-replaced-not-followed")
def _(w: Work) -> Run:
    w.file("target.onnx", b"precious")
    link = w.link("o.onnx", w.p("target.onnx"))

    def check(folder: Path) -> None:
        assert not (folder / "o.onnx").is_symlink()
        assert (folder / "target.onnx").read_bytes() == b"precious"

    return Run(["optimize", w.model(), "-o", link], code=0, writes=("o.onnx",), check=check)


@case("outputs", "report-link-is-replaced-not-followed")
def _(w: Work) -> Run:
    w.file("target.json", b"precious")
    link = w.link("r.json", w.p("target.json"))
    argv = ["optimize", w.model(), "-o", w.p("o.onnx"), "--report", link]
    return Run(argv, code=0, writes=("o.onnx", "r.json"), check=_loads("o.onnx"))


@case("outputs", "o-link-to-another-filesystem", full=True)  # writes into /dev/shm
def _(w: Work) -> Run:
    target = Path("/dev/shm") / f"normfuse-battery-{os.getpid()}-{w.folder.name}"
    target.write_bytes(b"precious")
    link = w.link("o.onnx", str(target))

    def check(folder: Path) -> None:
        assert target.read_bytes() == b"precious"
        assert not (folder / "o.onnx").is_symlink()

    argv = ["optimize", w.model(), "-o", link]
    return Run(argv, code=0, writes=("o.onnx",), check=check, cleanup=target.unlink)


@case("outputs", "o-dangling-link")
def _(w: Work) -> Run:
    link = w.link("o.onnx", w.p("nowhere/x.onnx"))
    return Run(["optimize", w.model(), "-o", link], code=0, writes=("o.onnx",))


@case("outputs", "o-link-with-external-data")
def _(w: Work) -> Run:
    model = w.external("src/m.onnx")
    w.folder_("out")
    w.file("elsewhere.onnx", b"precious")
    link = w.link("out/o.onnx", w.p("elsewhere.onnx"))
    writes = ("out/o.onnx", "out/o.onnx.data")
    return Run(["optimize", model, "-o", link], code=0, writes=writes, check=_loads("out/o.onnx"))


@case("outputs", "in-place-through-a-link-with-external-data")
def _(w: Work) -> Run:
    w.external("real/m.onnx")
    w.folder_("links")
    link = w.link("links/m.onnx", w.p("real/m.onnx"))

    def check(folder: Path) -> None:
        assert (folder / "links/m.onnx").is_symlink()
        _loads("real/m.onnx")(folder)
        assert not (folder / "links/m.onnx.data").exists()

    return Run(["optimize", link, "--in-place"], code=0, writes=("real/m.onnx",), check=check)


@case("outputs", "o-over-an-existing-file")
def _(w: Work) -> Run:
    w.file("o.onnx", b"old")
    argv = ["optimize", w.model(), "-o", w.p("o.onnx")]
    return Run(argv, code=0, writes=("o.onnx",), check=_loads("o.onnx"))


@case("outputs", "report-to-stdout")
def _(w: Work) -> Run:
    argv = ["optimize", w.model(), "-o", w.p("o.onnx"), "--report", "-"]
    return Run(argv, code=0, writes=("o.onnx",))


@case("outputs", "o-in-the-source-folder-with-external-data")
def _(w: Work) -> Run:
    model = w.external()
    return Run(
        ["optimize", model, "-o", w.p("o.onnx")],
        code=0,
        writes=("o.onnx", "o.onnx.data"),
        check=_loads("o.onnx"),
    )


@case("outputs", "o-in-the-source-folder-referencing-its-external-data")
def _(w: Work) -> Run:
    model = w.external()
    argv = ["optimize", model, "-o", w.p("o.onnx"), "--reference-input-data"]
    return Run(argv, code=0, writes=("o.onnx",), check=_loads("o.onnx"))


# --- half-finished work: whatever fails, nothing new remains ---------------------------------

for _name, _extra, _message in [
    ("plot-without-matplotlib-or-bad-format", ["--bench", "--plot", "p.xyz"], "--plot"),
    ("bench-runs-1", ["--bench", "--runs", "1"], "--runs"),
    ("bench-threads-0", ["--bench", "--threads", "0"], "--threads"),
    ("bench-threads-negative", ["--bench", "--threads", "-3"], "--threads"),
    ("bench-threads-100000", ["--bench", "--threads", "100000"], "--threads"),
    ("bench-runs-absurd", ["--bench", "--runs", "1000000000000"], "--runs"),
    ("bench-warmup-negative", ["--bench", "--warmup", "-1"], "--warmup"),
    ("bench-bad-inputs-file", ["--bench", "--inputs", "bad.npz"], "--inputs"),
    ("bench-report-missing-folder", ["--bench", "--report", "no/t.json"], "does not exist"),
    ("validate-bad-inputs-file", ["--validate", "--inputs", "bad.npz"], "--inputs"),
    ("validate-wrong-input-shape", ["--validate", "--inputs", "shape.npz"], "shape"),
    ("validate-unknown-dim", ["--validate", "--dims", "batch=x"], "--dims"),
    ("validate-negative-seed", ["--validate", "--seed", "-1"], "--seed"),
    ("validate-nan-atol", ["--validate", "--atol", "nan"], "--atol"),
    ("validate-negative-rtol", ["--validate", "--rtol", "-1"], "--rtol"),
    ("tune-for-bad-threads", ["--tune-for", "cpu", "--threads", "-1"], "--threads"),
    ("unknown-pass", ["--passes", "nope"], "unknown pass"),
    ("unknown-provider", ["--validate", "--providers", "tpu"], "provider"),
]:

    def _late_case(w: Work, extra=_extra, message=_message) -> Run:
        w.file("bad.npz", b"PK\x03\x04 not really a zip")
        w.npz("shape.npz", x=np.zeros((2, 7, 16), np.float32))
        w.file("o.onnx", b"old output stays")
        args = [w.p(a) if a in ("p.xyz", "bad.npz", "shape.npz", "no/t.json") else a for a in extra]
        return Run(["optimize", w.model(), "-o", w.p("o.onnx"), *args], message=message)

    case("half-finished", _name)(_late_case)


@case("half-finished", "existing-output-kept-on-error")
def _(w: Work) -> Run:
    w.file("o.onnx", b"old")
    return Run(["optimize", w.model("bad.onnx", _cyclic_function_model()), "-o", w.p("o.onnx")])


SIGNALLED = {
    # staged: the model's temporary file exists (the bench runs after staging) when it arrives
    "while-staged": (
        lambda w: [
            "optimize",
            w.external(),
            "-o",
            w.p("out/o.onnx"),
            "--report",
            w.p("out/r.json"),
            "--bench",
            "--runs",
            "1000000",
            "--warmup",
            "0",
        ],
        {"wait_for": "out/.o.onnx.*.tmp*"},
    ),
    "during-tune": (
        lambda w: [
            "tune",
            w.model(),
            "--json",
            w.p("out/t.json"),
            "--runs",
            "1000000",
            "--threads",
            "1",
        ],
        {"after": 10.0},
    ),
}

for _sig, _code in [(signal.SIGINT, 130), (signal.SIGTERM, 143)]:
    for _when, (_argv, _timing) in SIGNALLED.items():

        def _signal_case(w: Work, sig=_sig, code=_code, argv=_argv, timing=_timing) -> Run:
            w.folder_("out")
            return Run(argv(w), code=code, subprocess=True, signal=sig, **timing)

        case("half-finished", f"{signal.Signals(_sig).name.lower()}-{_when}", full=True)(
            _signal_case
        )


# --- file modes ------------------------------------------------------------------------------

for _umask, _expected in [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664), (0o027, 0o640)]:

    def _umask_case(w: Work, umask=_umask, expected=_expected) -> Run:
        argv = ["optimize", w.model(), "-o", w.p("o.onnx"), "--report", w.p("r.json")]

        def check(folder: Path) -> None:
            _mode("o.onnx", expected)(folder)
            _mode("r.json", expected)(folder)

        return Run(argv, code=0, writes=("o.onnx", "r.json"), umask=umask, check=check)

    case("modes", f"umask-{_umask:03o}")(_umask_case)

for _kept in (0o644, 0o640, 0o600, 0o755):

    def _in_place_case(w: Work, kept=_kept) -> Run:
        model = w.model()
        os.chmod(model, kept)
        return Run(
            ["optimize", model, "--in-place"],
            code=0,
            writes=("m.onnx",),
            umask=0o077,
            check=_mode("m.onnx", kept),
        )

    case("modes", f"in-place-keeps-{_kept:03o}")(_in_place_case)


@case("modes", "replaced-output-keeps-its-mode")
def _(w: Work) -> Run:
    os.chmod(w.file("o.onnx", b"old"), 0o640)
    argv = ["optimize", w.model(), "-o", w.p("o.onnx")]
    return Run(argv, code=0, writes=("o.onnx",), check=_mode("o.onnx", 0o640))


@case("modes", "external-data-follows-the-umask")
def _(w: Work) -> Run:
    model = w.external("src/m.onnx")
    w.folder_("out")
    argv = ["optimize", model, "-o", w.p("out/o.onnx")]
    return Run(
        argv,
        code=0,
        writes=("out/o.onnx", "out/o.onnx.data"),
        umask=0o022,
        check=_mode("out/o.onnx.data", 0o644),
    )


# --- bad model files: one line, exit 2 -------------------------------------------------------

_VALID = norm_model(LayerNormSpec()).SerializeToString()
for _name, _payload, _message in [
    ("empty", b"", "empty"),
    ("random-bytes", bytes(range(256)) * 8, "not an ONNX model"),
    ("truncated", _VALID[: len(_VALID) // 2], ""),
    ("a-tensor", helper.make_tensor("t", TensorProto.FLOAT, [1], [1.0]).SerializeToString(), ""),
    ("zeros", b"\0" * 1000, ""),
    ("text", b"this is not a model\n" * 10, ""),
]:

    def _bad_file_case(w: Work, payload=_payload, message=_message) -> Run:
        return Run(["optimize", w.file("bad.onnx", payload), "-o", w.p("o.onnx")], message=message)

    case("bad-model", _name)(_bad_file_case)

for _name, _message in [
    ("missing", "no such file"),
    ("a-directory", "not a regular file"),
    ("a-fifo", "not a regular file"),
    ("dev-zero", "not a regular file"),
    ("link-loop", ""),
    ("name-too-long", ""),
]:

    def _odd_model_case(w: Work, name=_name, message=_message) -> Run:
        paths = {
            "missing": lambda: w.p("missing.onnx"),
            "a-directory": lambda: w.folder_("d.onnx"),
            "a-fifo": lambda: w.fifo("f.onnx"),
            "dev-zero": lambda: "/dev/zero",
            "link-loop": lambda: w.link("loop.onnx", w.p("loop.onnx")),
            "name-too-long": lambda: w.p("m" * 300 + ".onnx"),
        }
        model = paths[name]()
        return Run(["optimize", model, "-o", w.p("o.onnx")], message=message)

    for _command in ("optimize", "inspect"):
        if _command == "optimize":
            case("bad-model", _name)(_odd_model_case)
        else:

            def _inspect_case(w: Work, build=_odd_model_case) -> Run:
                run = build(w)
                run.argv = ["inspect", run.argv[1]]
                return run

            case("bad-model", f"inspect-{_name}")(_inspect_case)


@case("bad-model", "over-2-gib-not-read", full=True)
def _(w: Work) -> Run:
    path = w.folder / "big.onnx"
    with path.open("wb") as file:
        file.truncate(3 * 2**30)  # sparse: refused by its size before a byte is read
    return Run(["inspect", str(path)], message="2 GiB")


def _model(nodes, inputs, outputs, initializers=(), functions=(), opset=17, domains=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    imports = [helper.make_opsetid("", opset), *[helper.make_opsetid(d, 1) for d in domains]]
    model = helper.make_model(graph, opset_imports=imports, functions=list(functions))
    model.ir_version = 8
    return model


def _vi(name: str, shape=(2, 7, 32), elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, list(shape))


def _identity_chain(length: int) -> onnx.ModelProto:
    nodes = [helper.make_node("Identity", [f"t{i}"], [f"t{i + 1}"]) for i in range(length)]
    nodes[0].input[0] = "x"
    nodes[-1].output[0] = "y"
    return _model(nodes, [_vi("x")], [_vi("y")])


def _scale_through_identities(length: int) -> onnx.ModelProto:
    """A layer norm whose scale reaches it through `length` Identity nodes (constant folding
    follows the chain)."""
    model = norm_model(LayerNormSpec())
    scale = next(t for t in model.graph.initializer if len(t.dims) == 1)
    names = [scale.name, *(f"id{i}" for i in range(length))]
    chain = [helper.make_node("Identity", [a], [b]) for a, b in itertools.pairwise(names)]
    for node in model.graph.node:
        for index, name in enumerate(node.input):
            if name == scale.name:
                node.input[index] = names[-1]
    nodes = [*chain, *model.graph.node]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def _function(name: str, calls: str | None) -> onnx.FunctionProto:
    op = calls or "Relu"
    domain = "local" if calls else ""
    node = helper.make_node(op, ["a"], ["b"], domain=domain)
    return helper.make_function(
        "local",
        name,
        ["a"],
        ["b"],
        [node],
        [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
    )


def _cyclic_function_model(names=("f", "g")) -> onnx.ModelProto:
    functions = [_function(name, names[(i + 1) % len(names)]) for i, name in enumerate(names)]
    call = helper.make_node(names[0], ["x"], ["y"], domain="local")
    return _model([call], [_vi("x")], [_vi("y")], functions=functions, domains=["local"])


def _shared_branches() -> onnx.ModelProto:
    """An If whose two branches are the same graph (same names), holding a layer norm."""
    body = norm_model(LayerNormSpec()).graph
    out = body.output[0].name
    branch = helper.make_graph(
        list(body.node), "branch", [], [body.output[0]], list(body.initializer)
    )
    cond = helper.make_tensor("cond", TensorProto.BOOL, [], [True])
    node = helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=branch)
    model = _model([node], [_vi("x", ("batch", 7, 32))], [_vi("y", ("batch", 7, 32))], [cond])
    model.graph.input.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    del model.graph.input[-1]
    assert out
    return model


def _absurd_dims() -> onnx.ModelProto:
    model = norm_model(LayerNormSpec(), shape=(2**40, 7, 32))
    return model


def _short_initializer() -> onnx.ModelProto:
    model = norm_model(LayerNormSpec())
    tensor = next(t for t in model.graph.initializer if len(t.dims) == 1)
    data = onnx.numpy_helper.to_array(tensor)
    tensor.ClearField("float_data")
    tensor.raw_data = data.tobytes()[:4]
    return model


def _bad_attribute() -> onnx.ModelProto:
    model = norm_model(LayerNormSpec(), opset=13)
    node = next(n for n in model.graph.node if n.op_type == "ReduceMean")
    del node.attribute[:]
    node.attribute.append(helper.make_attribute("axes", "minus one"))
    return model


def _bad_epsilon() -> onnx.ModelProto:
    model = norm_model(LayerNormSpec())
    for tensor in model.graph.initializer:
        if not tensor.dims:
            tensor.data_type = TensorProto.STRING
            tensor.ClearField("raw_data")
            tensor.string_data.append(b"eps")
    return model


def _wrong_rank_scale() -> onnx.ModelProto:
    model = norm_model(LayerNormSpec())
    for tensor in model.graph.initializer:
        if len(tensor.dims) == 1:
            tensor.dims[0] = 5  # data no longer matches its dims
    return model


MALFORMED = {
    "identity-chain-5000": (lambda: _identity_chain(5000), None),
    "identity-chain-200": (lambda: _identity_chain(200), 0),
    "scale-through-20000-identities": (lambda: _scale_through_identities(20000), None),
    "recursive-local-function": (lambda: _cyclic_function_model(("f",)), 2),
    "cyclic-local-functions": (lambda: _cyclic_function_model(("f", "g")), 2),
    "cyclic-local-functions-3": (lambda: _cyclic_function_model(("f", "g", "h")), 2),
    "subgraph-shared-by-two-branches": (_shared_branches, None),
    "absurd-declared-dims": (_absurd_dims, 0),
    "short-initializer": (_short_initializer, None),
    "string-axes-attribute": (_bad_attribute, None),
    "string-epsilon": (_bad_epsilon, None),
    "scale-dims-do-not-match-data": (_wrong_rank_scale, None),
    "local-function-model": (lambda: local_function_model(), 0),
}

for _name, (_build, _code) in MALFORMED.items():
    for _command in ("optimize", "inspect"):

        def _malformed_case(w: Work, build=_build, code=_code, command=_command) -> Run:
            model = w.model("bad.onnx", build())
            argv = [command, model] + (["-o", w.p("o.onnx")] if command == "optimize" else [])
            writes = ("o.onnx",) if command == "optimize" else ()
            return Run(argv, code=code if code is not None else -1, writes=writes)

        slow = _command == "inspect" and "identit" in _name  # seconds each; optimize covers it
        case("malformed-model", f"{_command}-{_name}", full=slow)(_malformed_case)


@case("malformed-model", "validate-absurd-declared-dims")
def _(w: Work) -> Run:
    model = w.model("big.onnx", _absurd_dims())
    return Run(["validate", model, model], message="GiB")


# --- external data: malformed entries and escapes --------------------------------------------

for _name, _entries, _message in [
    ("negative-offset", {"offset": "-4"}, "offset"),
    ("non-numeric-offset", {"offset": "four"}, "offset"),
    ("float-offset", {"offset": "1.5"}, "offset"),
    ("huge-offset", {"offset": "9" * 30}, "offset"),
    ("offset-past-the-end", {"offset": "99999999"}, "shorter"),
    ("negative-length", {"length": "-1"}, "length"),
    ("non-numeric-length", {"length": "x"}, "length"),
    ("unicode-digit-length", {"length": "\u0661\u0662"}, "length"),
    ("length-past-the-end", {"length": "99999999"}, "shorter"),
    ("nul-in-location", {"location": "weights\0.bin"}, "not a valid file name"),
    ("empty-location", {"location": ""}, "empty"),
    ("no-location", {"location": None}, "empty"),
    ("absolute-location", {"location": "/etc/passwd"}, "absolute"),
    ("dotdot-location", {"location": "../outside/secret.bin"}, ".."),
    ("deep-dotdot-location", {"location": "a/../../outside/secret.bin"}, ".."),
    ("missing-file", {"location": "nope.bin"}, "missing"),
    ("location-is-a-directory", {"location": "sub"}, "missing"),
    ("location-is-a-fifo", {"location": "pipe.bin"}, "missing"),
    ("link-out-of-the-folder", {"location": "out.bin"}, "symbolic link"),
    ("link-through-a-subfolder-out", {"location": "outdir/secret.bin"}, "symbolic link"),
    ("unknown-key", {"bogus": "1"}, "external data key 'bogus'"),
    ("basepath-key", {"basepath": "."}, "external data key 'basepath'"),
]:

    def _external_case(w: Work, entries=_entries, message=_message) -> Run:
        model = w.external()
        w.folder_("sub")
        w.fifo("pipe.bin")
        (w.outside / "secret.bin").write_bytes(b"s" * 100000)
        w.link("out.bin", str(w.outside / "secret.bin"))
        w.link("outdir", str(w.outside))
        w.edit_external("m.onnx", **entries)
        return Run(["optimize", model, "-o", w.p("o.onnx")], message=message)

    case("external-data", _name)(_external_case)


@case("external-data", "non-utf8-location")
def _(w: Work) -> Run:
    model = w.external(location="weights.bin")
    path = Path(model)
    path.write_bytes(path.read_bytes().replace(b"weights.bin", b"weights\xff.bi"))
    return Run(["optimize", model, "-o", w.p("o.onnx")])


@case("external-data", "location-is-the-model")
def _(w: Work) -> Run:
    model = w.external()
    w.edit_external("m.onnx", location="m.onnx", offset="0", length="4")
    return Run(["optimize", model, "-o", w.p("o.onnx")], code=-1, writes=("o.onnx", "o.onnx.data"))


@case("external-data", "in-place-when-a-location-is-the-model")
def _(w: Work) -> Run:
    model = w.external()
    w.edit_external("m.onnx", location="m.onnx", offset="0", length="4")
    return Run(["optimize", model, "--in-place"], message="external-data")


@case("external-data", "symlinked-subfolder-inside")
def _(w: Work) -> Run:
    w.folder_("real")
    model = w.external("m.onnx", "real/weights.bin")
    w.link("alias", w.p("real"))
    w.edit_external("m.onnx", location="alias/weights.bin")
    w.folder_("out")
    return Run(["optimize", model, "-o", w.p("out/o.onnx")], message="symbolic link")


@case("external-data", "copied-to-another-folder")
def _(w: Work) -> Run:
    model = w.external("src/m.onnx")
    w.folder_("out")
    return Run(
        ["optimize", model, "-o", w.p("out/o.onnx")],
        code=0,
        writes=("out/o.onnx", "out/o.onnx.data"),
        check=_loads("out/o.onnx"),
    )


@case("external-data", "in-place-references-in-place")
def _(w: Work) -> Run:
    model = w.external()
    return Run(
        ["optimize", model, "--in-place"], code=0, writes=("m.onnx",), check=_loads("m.onnx")
    )


# --- --inputs files ---------------------------------------------------------------------------


def _zip(w: Work, name: str, members: dict[str, bytes], method=zipfile.ZIP_DEFLATED) -> str:
    path = w.folder / name
    with zipfile.ZipFile(path, "w", method) as archive:
        for member, payload in members.items():
            archive.writestr(member, payload)
    return str(path)


def _npy(array: np.ndarray) -> bytes:
    import io

    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, allow_pickle=True)
    return buffer.getvalue()


def _bomb(w: Work) -> str:
    """A member whose header says (2, 7, 32) float32 but which inflates to 32 MiB of zeros."""
    header = _npy(x())[: -x().nbytes]
    return _zip(w, "bomb.npz", {"x.npy": header + b"\0" * (32 * 2**20)})


def _huge_header(w: Work) -> str:
    header = _npy(np.zeros((1,), np.float32))[:-4].replace(b"(1,)", b"(9999999999999,)")
    return _zip(w, "huge.npz", {"x.npy": header})


for _name, _build, _message in [
    ("empty-file", lambda w: w.file("e.npz", b""), "--inputs"),
    ("npy-not-npz", lambda w: w.file("a.npy", _npy(x())), "--inputs"),
    ("corrupt-zip", lambda w: w.file("c.npz", b"PK\x03\x04" + b"\x01" * 200), "--inputs"),
    (
        "truncated-zip",
        lambda w: w.file("t.npz", Path(w.npz("g.npz", x=x())).read_bytes()[:300]),
        "--inputs",
    ),
    ("member-not-npy", lambda w: _zip(w, "n.npz", {"x.npy": b"hello"}), "--inputs"),
    (
        "pickled-object-array",
        lambda w: _zip(w, "p.npz", {"x.npy": _npy(np.array([{}], object))}),
        "--inputs",
    ),
    ("zip-bomb", _bomb, "too large"),
    ("absurd-shape-header", _huge_header, "shape"),
    ("truncated-member", lambda w: _zip(w, "tm.npz", {"x.npy": _npy(x())[:200]}), "--inputs"),
    ("unknown-input-name", lambda w: w.npz("u.npz", nope=x()), "unknown inputs"),
    ("wrong-dtype", lambda w: w.npz("d.npz", x=x().astype(np.float64)), "float64"),
    ("wrong-shape", lambda w: w.npz("s.npz", x=np.zeros((2, 7, 31), np.float32)), "shape"),
    ("wrong-rank", lambda w: w.npz("r.npz", x=np.zeros((7, 32), np.float32)), "shape"),
    ("a-directory", lambda w: w.folder_("dir.npz"), "no such file"),
    ("a-fifo", lambda w: w.fifo("fifo.npz"), "no such file"),
    ("missing", lambda w: w.p("missing.npz"), "no such file"),
]:
    for _command in ("validate", "optimize-validate"):

        def _inputs_case(w: Work, build=_build, message=_message, command=_command) -> Run:
            model, inputs = w.model(), build(w)
            if command == "validate":
                argv = ["validate", model, model, "--inputs", inputs]
            else:
                argv = ["optimize", model, "-o", w.p("o.onnx"), "--validate", "--inputs", inputs]
            return Run(argv, message=message)

        case("inputs-file", f"{_command}-{_name}")(_inputs_case)


@case("inputs-file", "good-npz-is-used")
def _(w: Work) -> Run:
    model = w.model()
    return Run(["validate", model, model, "--inputs", w.npz("g.npz", x=x())], code=0)


# --- option values --------------------------------------------------------------------------

for _name, _args, _message in [
    ("dims-arabic-digits", ["--dims", "batch=\u0664"], "--dims"),
    ("dims-fullwidth-digits", ["--dims", "batch=\uff14"], "--dims"),
    ("dims-superscript", ["--dims", "batch=\u00b2"], "--dims"),
    ("dims-negative", ["--dims", "batch=-1"], "--dims"),
    ("dims-absurd", ["--dims", "batch=99999999999999999999"], "--dims"),
    ("dims-huge-allocation", ["--dims", "batch=2000000000"], "GiB"),
    ("dims-no-value", ["--dims", "batch="], "--dims"),
    ("dims-no-name", ["--dims", "=3"], "--dims"),
    ("dims-no-equals", ["--dims", "batch"], "--dims"),
    ("seed-negative", ["--seed", "-5"], "--seed"),
    ("seed-huge", ["--seed", str(2**70)], "--seed"),
    ("seed-not-a-number", ["--seed", "one"], "--seed"),
    ("atol-inf", ["--atol", "inf"], "--atol"),
    ("rtol-text", ["--rtol", "tight"], "--rtol"),
    ("providers-unknown", ["--providers", "tpu"], "provider"),
    ("providers-cuda-without-gpu", ["--providers", "cuda"], ""),
]:

    def _option_case(w: Work, args=_args, message=_message) -> Run:
        model = w.model()
        return Run(["validate", model, model, *args], message=message)

    case("options", f"validate-{_name}")(_option_case)

for _name, _args, _message in [
    ("runs-0", ["--runs", "0"], "--runs"),
    ("runs-absurd", ["--runs", str(10**12)], "--runs"),
    ("warmup-absurd", ["--warmup", str(10**12)], "--warmup"),
    ("threads-0", ["--threads", "0"], "--threads"),
    ("threads-negative", ["--threads", "-3"], "--threads"),
    ("threads-100000", ["--threads", "100000"], "--threads"),
    ("threads-text", ["--threads", "many"], "--threads"),
    ("level-unknown", ["--level", "max"], "--level"),
    ("plot-without-matplotlib-or-bad-format", ["--plot", "p.xyz"], "--plot"),
    ("json-is-a-directory", ["--json", "."], "directory"),
    ("seed-negative", ["--seed", "-1"], "--seed"),
]:
    for _command in ("bench", "tune"):
        if _command == "tune" and _name.startswith(("level", "plot")):
            continue

        def _bench_case(w: Work, args=_args, message=_message, command=_command) -> Run:
            args = [w.p(a) if a in ("p.xyz", ".") else a for a in args]
            return Run([command, w.model(), *args], message=message)

        case("options", f"{_command}-{_name}")(_bench_case)

for _name, _argv, _message in [
    ("no-command", [], ""),
    ("unknown-command", ["frobnicate"], ""),
    ("unknown-option", ["optimize", "m.onnx", "--frobnicate"], ""),
    ("misspelled-option", ["optimize", "m.onnx", "--valdate"], ""),
    ("bad-target", ["optimize", "m.onnx", "-o", "o.onnx", "--target", "tpu"], ""),
    ("bad-tune-for", ["optimize", "m.onnx", "-o", "o.onnx", "--tune-for", "tpu"], ""),
    ("validate-one-model", ["validate", "m.onnx"], ""),
]:

    def _usage_case(w: Work, argv=_argv, message=_message) -> Run:
        w.model()
        return Run([w.p(a) if a.endswith(".onnx") else a for a in argv], message=message)

    case("usage", _name)(_usage_case)


# --- standard streams, limits, other users (subprocess) ------------------------------------


@case("streams", "stdout-closed")
def _(w: Work) -> Run:
    argv = ["optimize", w.model(), "-o", w.p("o.onnx")]
    return Run(argv, subprocess=True, stdout="closed", message="standard output")


@case("streams", "stdout-is-dev-full")
def _(w: Work) -> Run:
    argv = ["optimize", w.model(), "-o", w.p("o.onnx"), "--report", w.p("r.json")]
    return Run(argv, subprocess=True, stdout="full", message="space")


@case("streams", "stdout-broken-pipe", full=True)
def _(w: Work) -> Run:
    return Run(["inspect", w.model()], subprocess=True, stdout="broken", message="pipe")


@case("streams", "inspect-json-to-dev-full", full=True)
def _(w: Work) -> Run:
    return Run(["inspect", w.model(), "--json"], subprocess=True, stdout="full")


@case("limits", "file-size-limit-efbig", full=True)
def _(w: Work) -> Run:
    model = w.external("src/m.onnx")
    w.folder_("out")
    return Run(
        ["optimize", model, "-o", w.p("out/o.onnx")],
        subprocess=True,
        fsize=4096,
        message="too large",
    )


def _without_dac(w: Work) -> str | None:
    """A reason to skip when this process cannot drop its DAC capabilities (not root, or no
    capabilities to drop)."""
    if os.geteuid() != 0:
        return "needs root (to drop CAP_DAC_OVERRIDE and run as root meeting file modes)"
    import subprocess
    import sys

    from battery_runner import drop_dac_capabilities

    probe_file = w.folder / "probe"
    probe_file.write_bytes(b"")
    os.chmod(probe_file, 0)
    try:
        probe = subprocess.run(
            [sys.executable, "-c", f"open({str(probe_file)!r})"],
            preexec_fn=drop_dac_capabilities,
            capture_output=True,
            check=False,
        )
    except OSError:
        probe = None
    probe_file.unlink()
    if probe is None or probe.returncode == 0:
        return "dropping CAP_DAC_OVERRIDE did not make a mode-000 file unreadable here"
    return None


def _denied(w: Work, argv: list[str], message: str = "ermission") -> Run:
    return Run(
        argv, subprocess=True, user="root-without-dac", skip=_without_dac(w), message=message
    )


@case("users", "unreadable-model", full=True)
def _(w: Work) -> Run:
    model = w.model()
    os.chmod(model, 0)
    return _denied(w, ["inspect", model])


@case("users", "unreadable-model-optimize", full=True)
def _(w: Work) -> Run:
    model = w.model()
    os.chmod(model, 0)
    return _denied(w, ["optimize", model, "-o", w.p("o.onnx")])


@case("users", "unwritable-output-folder", full=True)
def _(w: Work) -> Run:
    model, out = w.model(), w.folder_("out")
    os.chmod(out, 0o555)
    return _denied(w, ["optimize", model, "-o", w.p("out/o.onnx")], "not writable")


@case("users", "unwritable-report-folder", full=True)
def _(w: Work) -> Run:
    model, out = w.model(), w.folder_("out")
    os.chmod(out, 0o555)
    argv = ["optimize", model, "-o", w.p("o.onnx"), "--report", w.p("out/r.json")]
    return _denied(w, argv, "not writable")


@case("users", "unwritable-in-place-folder", full=True)
def _(w: Work) -> Run:
    model = w.model("ro/m.onnx")
    os.chmod(w.folder / "ro", 0o555)
    return _denied(w, ["optimize", model, "--in-place"], "not writable")


@case("users", "unreadable-external-data", full=True)
def _(w: Work) -> Run:
    model = w.external()
    os.chmod(w.p("weights.bin"), 0)
    w.folder_("out")
    return _denied(w, ["optimize", model, "-o", w.p("out/o.onnx")], "cannot read")


@case("users", "unreadable-inputs-file", full=True)
def _(w: Work) -> Run:
    model, npz = w.model(), w.npz("g.npz", x=x())
    os.chmod(npz, 0)
    return _denied(w, ["validate", model, model, "--inputs", npz], "--inputs")


@case("users", "unsearchable-model-folder", full=True)
def _(w: Work) -> Run:
    model = w.model("locked/m.onnx")
    os.chmod(w.folder / "locked", 0o600)
    return _denied(w, ["inspect", model], "")


# --- the Python API: NormfuseError, the same checks as the CLI ------------------------------


def _loaded(path: str) -> onnx.ModelProto:
    return onnx.load(path, load_external_data=False)


def _escaping(w: Work, location: str = "../outside/secret.bin", **entries: str):
    w.external()
    (w.outside / "secret.bin").write_bytes(b"s" * 100000)
    return _loaded(w.edit_external("m.onnx", location=location, **entries))


def _api_cases() -> dict[str, Callable[[Work], Callable[[], object]]]:
    """name -> a function that prepares the case folder and returns the API call to make."""

    def optimize_escaping(w: Work, location: str = "../outside/secret.bin", **entries: str):
        model = _escaping(w, location, **entries)
        return lambda: normfuse.optimize(model, base_dir=w.folder)

    def link_out(w: Work):
        w.link("out.bin", str(w.outside / "secret.bin"))
        return optimize_escaping(w, "out.bin", offset="0")

    def without_base_dir(w: Work, call=normfuse.optimize):
        model = _loaded(w.external())
        return lambda: call(model) if call is normfuse.optimize else call(model, model)

    def save_to(w: Work, destination: Callable[[Work], str], external: bool = False):
        model = w.external() if external else w.model()
        path = destination(w)
        return lambda: normfuse.save(normfuse.optimize(model), path)

    def inspect_escaping(w: Work):
        model = _escaping(w)
        return lambda: normfuse.inspect(model, base_dir=w.folder)

    def validate_absurd(w: Work):
        model = w.model()
        options = normfuse.ValidationOptions(dims={"batch": 2**40})
        return lambda: normfuse.validate(model, model, options)

    return {
        "modelproto-escaping-location": optimize_escaping,
        "modelproto-absolute-location": lambda w: optimize_escaping(
            w, str(w.outside / "secret.bin")
        ),
        "modelproto-link-out": link_out,
        "modelproto-bad-offset": lambda w: optimize_escaping(w, "weights.bin", offset="-1"),
        "modelproto-external-without-base-dir": without_base_dir,
        "validate-modelproto-external-without-base-dir": lambda w: without_base_dir(
            w, normfuse.validate
        ),
        "inspect-modelproto-escaping": inspect_escaping,
        "not-a-model": lambda w: lambda: normfuse.optimize(42),
        "missing-path": lambda w: lambda: normfuse.optimize(w.p("missing.onnx")),
        "cyclic-functions": lambda w: lambda: normfuse.optimize(_cyclic_function_model()),
        "save-over-the-external-data": lambda w: save_to(w, lambda w: w.p("weights.bin"), True),
        "save-over-a-link-to-the-external-data": lambda w: save_to(
            w, lambda w: w.link("l.onnx", w.p("weights.bin")), True
        ),
        "save-to-a-directory": lambda w: save_to(w, lambda w: str(w.folder)),
        "save-to-missing-folder": lambda w: save_to(w, lambda w: w.p("no/o.onnx")),
        "save-to-a-fifo": lambda w: save_to(w, lambda w: w.fifo("f.onnx")),
        "validate-absurd-dims": validate_absurd,
    }


for _name in _api_cases():

    def _api_case(w: Work, name=_name) -> Run:
        return Run(call=_api_cases()[name](w))

    case("api", _name)(_api_case)


@case("api", "identity-chain")
def _(w: Work) -> Run:
    model = _identity_chain(5000)
    return Run(call=lambda: normfuse.optimize(model), code=-1)


@case("options", "validate-dims-a-real-model-cannot-run-with")
def _(w: Work) -> Run:
    bert = Path(__file__).resolve().parents[2] / "models" / "real" / "bert_opset14.onnx"
    model = w.file("bert.onnx", bert.read_bytes())
    # ORT logs to fd 2
    argv = ["validate", model, model, "--dims", "batch=0,sequence=4"]
    return Run(argv, message="does not run on the validation inputs", subprocess=True)
