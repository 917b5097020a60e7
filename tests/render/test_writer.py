"""Rendering is all-or-nothing, stale files disappear, and drift is reported per file."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest

from generator.errors import RenderError
from generator.paths import Workspace
from generator.plan import make_plan
from generator.render import RenderedStack, render_stack
from generator.render.writer import diff_rendered, write_rendered
from generator.spec import load_spec


def cpu_stack(workspace: Workspace) -> RenderedStack:
    return render_stack(make_plan(load_spec(workspace.stack_file("cpu-1p1d"))), workspace)


def test_write_then_no_drift_then_stale_file_is_drift(workspace: Workspace, tmp_path: Path) -> None:
    rendered = cpu_stack(workspace)
    written = write_rendered(rendered, tmp_path)
    assert tmp_path / "compose/cpu-1p1d/compose.yaml" in written
    assert diff_rendered(rendered, tmp_path) == []
    (tmp_path / "compose/cpu-1p1d/leftover.yaml").write_text("x: 1\n")
    (tmp_path / "images/cpu-1p1d/router.Dockerfile").write_text("FROM scratch\n")
    problems = diff_rendered(rendered, tmp_path)
    assert problems[0] == "compose/cpu-1p1d/leftover.yaml: not rendered any more (stale)"
    assert problems[1].startswith("images/cpu-1p1d/router.Dockerfile: differs\n--- committed/")


def test_rewrite_removes_stale_files(workspace: Workspace, tmp_path: Path) -> None:
    rendered = cpu_stack(workspace)
    write_rendered(rendered, tmp_path)
    stale = tmp_path / "compose/cpu-1p1d/old-host/compose.yaml"
    stale.parent.mkdir()
    stale.write_text("{}\n")
    write_rendered(rendered, tmp_path)
    assert not stale.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["compose", "images"]
    assert not any(p.name.startswith(".") for p in (tmp_path / "compose").iterdir())


def test_failure_while_staging_writes_nothing(workspace: Workspace, tmp_path: Path) -> None:
    good = cpu_stack(workspace)
    write_rendered(good, tmp_path)
    before = (tmp_path / "compose/cpu-1p1d/compose.yaml").read_text()
    # The second owned folder cannot be staged: a file sits where its parent must be.
    (tmp_path / "images").rename(tmp_path / "images-moved")
    (tmp_path / "images").write_text("not a folder")
    broken = RenderedStack(
        good.stack,
        {**good.files, PurePosixPath("compose/cpu-1p1d/compose.yaml"): "changed: true\n"},
        good.owned_dirs,
        good.images,
        good.projects,
    )
    with pytest.raises(RenderError, match="could not write cpu-1p1d"):
        write_rendered(broken, tmp_path)
    assert (tmp_path / "compose/cpu-1p1d/compose.yaml").read_text() == before
    assert [p.name for p in (tmp_path / "compose").iterdir()] == ["cpu-1p1d"]
