"""Issue 8 at the CLI boundary: bad files and options end as a red message and exit 1 (usage
errors 2), never a traceback or a hang; error and help text keep their square brackets."""

from __future__ import annotations

import codecs
from pathlib import Path
from typing import Any

import pytest
import typer
from rich.text import Text

from generator.cli import app, main
from generator.errors import XpydError
from generator.paths import Workspace
from generator.planner import make_plan
from generator.stack import load_spec
from generator.workbench import rendered_projects
from generator.workflow.context import RunOptions
from generator.workflow.report import RecordingReporter
from generator.workflow.run import make_context
from tests.tools import run_cli

ROOT = Path(__file__).resolve().parents[2]
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(9)
)


def bad_file(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / f"{kind}.yaml"
    if kind == "utf16":
        path.write_bytes(codecs.BOM_UTF16_LE + "name: x\n".encode("utf-16-le"))
    elif kind == "binary":
        path.write_bytes(bytes(range(256)) * 4)
    elif kind == "bomb":
        path.write_text(BOMB)
    elif kind == "folder":
        path.mkdir()
    elif kind == "loop":
        path.symlink_to(path)
    return path


@pytest.mark.parametrize("kind", ["utf16", "binary", "bomb", "folder", "loop"])
def test_bad_files_exit_1_without_a_traceback(tmp_path: Path, kind: str) -> None:
    result = run_cli("validate", str(bad_file(tmp_path, kind)), root=ROOT, timeout_s=30)
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("error: ")
    assert "Traceback" not in result.stderr
    assert "fix:" in result.stderr


def test_messages_keep_square_brackets(tmp_path: Path) -> None:
    spec = tmp_path / "[bold]odd[red].yaml"
    spec.write_text(
        "name: x\ntopology: nixl-mp\nmodel: {id: '[red]m[/red]'}\nhosts: [{name: h, gpus: [0]}]\n"
    )
    result = run_cli("validate", str(spec), "--set", "router.policy=[x]", root=ROOT)
    assert result.returncode == 1
    assert "[bold]odd[red].yaml" in result.stderr
    assert "(got '[red]m[/red]')" in result.stderr
    assert "Traceback" not in result.stderr


def test_set_values_that_are_not_yaml_exit_1() -> None:
    result = run_cli("plan", "xpyd", "--set", "decode.count={", root=ROOT)
    assert result.returncode == 1
    assert "--set decode.count={: is not valid YAML" in result.stderr
    assert "Traceback" not in result.stderr


def _help_texts(command: Any) -> list[str]:
    texts = [command.help or ""]
    texts += [getattr(param, "help", None) or "" for param in command.params]
    for sub in getattr(command, "commands", {}).values():
        texts += _help_texts(sub)
    return texts


def test_help_text_keeps_its_square_brackets() -> None:
    """Help is rich markup: a literal '[' must be escaped or it vanishes ([default: ...])."""
    texts = _help_texts(typer.main.get_command(app))
    assert len(texts) > 40
    for text in texts[1:]:  # the app's own help uses [bold] on purpose
        assert Text.from_markup(text).plain == text.replace("\\[", "["), text


def test_a_bug_shows_one_line_and_the_traceback_only_with_debug(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken() -> None:
        raise RuntimeError("[red]boom[/red]")

    monkeypatch.setattr("generator.cli.app", broken)
    monkeypatch.setattr("sys.argv", ["xpyd"])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert "internal error: RuntimeError: [red]boom[/red]" in err
    assert "rerun with --debug" in err
    monkeypatch.setattr("sys.argv", ["xpyd", "--debug"])
    with pytest.raises(RuntimeError):
        main()


@pytest.mark.parametrize("stack", ["../..", "../compose", "/etc", "a b"])
def test_down_status_logs_take_only_stack_names(stack: str, workspace: Workspace) -> None:
    with pytest.raises(XpydError):
        rendered_projects(stack, workspace)


@pytest.mark.parametrize("run_id", ["../escape", "a/b", ".hidden", "x" * 200, "a\nb"])
def test_run_ids_are_plain_folder_names(run_id: str, workspace: Workspace) -> None:
    plan = make_plan(load_spec(workspace.stack_file("cpu-1p1d")))
    with pytest.raises(XpydError, match="is not a plain folder name"):
        make_context(plan, workspace, RunOptions(), run_id, RecordingReporter())
