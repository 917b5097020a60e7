"""The runner's boundary: only an XpydError is a task failure; a bug is recorded in run.json,
the run winds down as after a failure, and the bug itself reaches the caller (the CLI's
internal-error path), never a TaskFailure with an empty hint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from generator.errors import StackError
from generator.paths import Workspace
from generator.workflow.context import RunContext
from generator.workflow.graph import Graph
from generator.workflow.runner import TaskFailure, run_graph
from generator.workflow.task import Task
from tests.workflow.test_runner import context, states


def _misread(_: RunContext) -> str:
    counts: dict[str, int] = {}
    return str(counts["decode-0"])  # the bug: a key nobody wrote


def _fails_as_expected(_: RunContext) -> str:
    raise StackError("engine exited", hint="read its log")


def test_a_bug_is_recorded_then_raised_as_itself(workspace: Workspace, tmp_path: Path) -> None:
    ran: list[str] = []

    def remove(_: RunContext) -> str:
        ran.append("down")
        return "removed"

    buggy, after = Task("buggy", _misread), Task("after", lambda _: "never")
    down = Task("down", remove, teardown=True)
    buggy >> after >> down
    ctx = context(workspace, tmp_path)
    with pytest.raises(KeyError, match="decode-0"):
        run_graph(Graph([buggy, after, down]), ctx, selected={"buggy", "after", "down"})
    assert states(ctx) == {"buggy": "failed", "after": "upstream_failed", "down": "success"}
    assert ran == ["down"]
    record = json.loads((tmp_path / "run-1/run.json").read_text())
    assert record["status"] == "failed"
    task = record["tasks"]["buggy"]
    assert task["error"] == "bug: KeyError: 'decode-0'"
    assert "_misread" in task["bug"]
    assert task["bug"].splitlines()[-1] == "KeyError: 'decode-0'"
    assert "bug" not in record["tasks"]["after"]


def test_a_bug_outranks_an_earlier_expected_failure(workspace: Workspace, tmp_path: Path) -> None:
    expected = Task("expected", _fails_as_expected)
    buggy = Task("buggy", _misread)
    expected >> buggy
    down = Task("down", _misread, teardown=True)
    ctx = context(workspace, tmp_path)
    with pytest.raises(KeyError):
        run_graph(Graph([expected, buggy, down]), ctx, selected={"expected", "buggy", "down"})
    assert states(ctx) == {"expected": "failed", "buggy": "upstream_failed", "down": "failed"}


def test_an_expected_failure_keeps_its_hint_and_records_no_bug(
    workspace: Workspace, tmp_path: Path
) -> None:
    ctx = context(workspace, tmp_path)
    with pytest.raises(TaskFailure) as caught:
        run_graph(Graph([Task("fail", _fails_as_expected)]), ctx, selected={"fail"})
    assert caught.value.hint == "read its log"
    assert isinstance(caught.value.__cause__, StackError)
    record = json.loads((tmp_path / "run-1/run.json").read_text())
    assert "bug" not in record["tasks"]["fail"]
