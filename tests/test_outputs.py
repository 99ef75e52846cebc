"""The output planner: destinations checked before any work, staged beside themselves, written
together on commit, and nothing left when the plan is abandoned."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from normfuse.errors import NormfuseError
from normfuse.io.outputs import OutputPlan


def test_stdout_is_not_a_file(tmp_path: Path) -> None:
    plan = OutputPlan()
    assert plan.add("-", "--report", allow_stdout=True) is None
    assert plan.add(tmp_path / "-", "-o") == tmp_path / "-"  # a file named "-" where no stdout


def test_nothing_is_written_before_commit_and_all_on_commit(tmp_path: Path) -> None:
    with OutputPlan([tmp_path / "in.onnx"]) as plan:
        first, second = plan.add(tmp_path / "a", "-o"), plan.add(tmp_path / "b", "--report")
        plan.stage_bytes(first, b"A")
        plan.stage_bytes(second, b"B")
        assert not first.exists() and not second.exists()
        assert sorted(plan.commit()) == [first, second]
    assert first.read_bytes() == b"A" and second.read_bytes() == b"B"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]


def test_an_error_leaves_no_temporary_file(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"old")
    with pytest.raises(RuntimeError), OutputPlan() as plan:
        plan.stage_bytes(plan.add(tmp_path / "a", "-o"), b"new")
        raise RuntimeError("work failed after staging")
    assert [p.name for p in tmp_path.iterdir()] == ["a"]
    assert (tmp_path / "a").read_bytes() == b"old"


def test_protected_and_duplicate_destinations_are_refused(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    model.write_bytes(b"model")
    os.symlink(model, tmp_path / "link")
    plan = OutputPlan([model])
    for path in (model, tmp_path / "link", tmp_path / "sub" / ".." / "m.onnx"):
        with pytest.raises(NormfuseError, match="input model"):
            plan.add(path, "--report")
    plan.add(tmp_path / "o.onnx", "-o")
    with pytest.raises(NormfuseError, match="same file as -o"):
        plan.add(tmp_path / "." / "o.onnx", "--report")


def test_a_plan_per_model_keeps_each_models_outputs_apart(tmp_path: Path) -> None:
    """Batch mode calls the planner once per model."""
    for name in ("a", "b"):
        with OutputPlan([tmp_path / f"{name}.onnx"]) as plan:
            plan.stage_bytes(plan.add(tmp_path / f"{name}.out", "-o"), name.encode())
            plan.commit()
    assert (tmp_path / "a.out").read_bytes() == b"a" and (tmp_path / "b.out").read_bytes() == b"b"


def test_in_place_keeps_the_mode_and_new_files_follow_the_umask(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    model.write_bytes(b"old")
    os.chmod(model, 0o640)
    previous = os.umask(0o022)
    try:
        with OutputPlan() as plan:
            plan.stage_bytes(plan.add_in_place(model), b"new")
            plan.stage_bytes(plan.add(tmp_path / "r.json", "--report"), b"{}")
            plan.commit()
    finally:
        os.umask(previous)
    assert stat.S_IMODE(model.stat().st_mode) == 0o640
    assert stat.S_IMODE((tmp_path / "r.json").stat().st_mode) == 0o644
