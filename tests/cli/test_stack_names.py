"""Issue 17 item 12: a bare stack name is the workspace's stack, wherever the command runs
(inside compose/ a folder of that name is the rendered output, not a spec)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from generator.paths import Workspace

ROOT = Path(__file__).resolve().parents[2]


def test_a_folder_named_like_a_stack_is_not_its_spec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "cpu-1p1d").mkdir()
    monkeypatch.chdir(tmp_path)
    assert Workspace(ROOT).stack_file("cpu-1p1d") == ROOT / "stacks/cpu-1p1d.yaml"


def test_a_bare_file_name_is_a_path_only_where_no_stack_has_that_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "mine").write_text("name: mine\n")
    (tmp_path / "xpyd").write_text("name: other\n")
    monkeypatch.chdir(tmp_path)
    workspace = Workspace(ROOT)
    assert workspace.stack_file("mine") == Path("mine")
    assert workspace.stack_file("xpyd") == ROOT / "stacks/xpyd.yaml"
    assert workspace.stack_file("./xpyd") == Path("./xpyd")  # a path, said so


def test_validate_inside_compose_reads_the_stack() -> None:
    env = {**os.environ, "XPYD_ROOT": str(ROOT), "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "generator", "validate", "cpu-1p1d"],
        cwd=ROOT / "compose",
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "cpu-1p1d: valid" in result.stdout + result.stderr
