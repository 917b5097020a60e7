"""The process runtime against hostile or damaged files (issue 33, classes 1-4): a state that
names processes it never started makes it signal nothing and show nothing; state and plan
files that are not what it writes are one clear error and no action; nothing is written or
removed through a link; files that name processes go with them; one writer per stack.

Signals in the property test go to recorders (``os.killpg``, ``psutil.Process.kill``), never to
the kernel: the states it forges name this test process, its parent, PID 1 and a stand-in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from generator.errors import XpydError
from generator.runtimes.process import ProcessStack, rendered_process_stack
from generator.runtimes.process_state import plan_digest
from generator.serializers.process_file import load_process_project
from generator.spec import Isolation
from generator.stack_lock import holding
from tests.runtimes.test_process_runtime import (
    PYTHONS,
    project,
    script_service,
    wait_for,
    written_project,
)

SLEEPER = script_service("sleeper", "import time; time.sleep(600)", max_restarts=1)


@pytest.fixture(scope="module")
def standin() -> Iterator[subprocess.Popen[bytes]]:
    """A process this test started in a session of its own: not the stack's."""
    process = subprocess.Popen(["sleep", "600"], start_new_session=True)
    yield process
    process.kill()
    process.wait()


def _state_text(pid: int, started: float, marker: str) -> str:
    entry = {"pid": pid, "started": started, "marker": marker}
    plan = plan_digest(project(SLEEPER).text)  # the plan's own: only the processes are forged
    return json.dumps({"version": 2, "plan": plan, "services": {"sleeper": entry}})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_state_naming_other_processes_makes_no_signal_and_shows_nothing_running(
    data: st.DataObject, tmp_path_factory: pytest.TempPathFactory, standin: subprocess.Popen[bytes]
) -> None:
    root = tmp_path_factory.mktemp("root")
    stack = ProcessStack(project(SLEEPER), root, PYTHONS)
    pid = data.draw(st.sampled_from([1, os.getpid(), os.getppid(), standin.pid]))
    real_start = psutil.Process(pid).create_time()
    started = data.draw(st.sampled_from([real_start, real_start + 1, 1.0]))
    marker = data.draw(st.text("0123456789abcdef", min_size=32, max_size=32))
    stack.state_dir.mkdir(parents=True)
    (stack.state_dir / "state.json").write_text(_state_text(pid, started, marker))
    with (
        mock.patch("os.killpg") as killpg,
        mock.patch.object(psutil.Process, "kill") as kill,
        mock.patch.object(psutil.Process, "send_signal") as send,
    ):
        if pid == 1:  # refused as a state it never writes
            with pytest.raises(XpydError, match="unreadable"):
                stack.down()
        else:
            assert all(state.status == "exited" for state in stack.ps())
            stack.down()
    assert (killpg.call_count, kill.call_count, send.call_count) == (0, 0, 0)


HOSTILE_STATES = {
    "a list": "[]",
    "not json": "{",
    "nested": "[" * 100_000 + "]" * 100_000,
    "pid text": _state_text(1, 1.0, "a" * 32).replace('"pid": 1', '"pid": "12"'),
    "pid huge": _state_text(1, 1.0, "a" * 32).replace('"pid": 1', '"pid": 99999999999999'),
    "pid 0": _state_text(0, 1.0, "a" * 32),
    "pid -1": _state_text(-1, 1.0, "a" * 32),
    "no start": _state_text(5, 1.0, "a" * 32).replace('"started": 1.0, ', ""),
    "start null": _state_text(5, 1.0, "a" * 32).replace('"started": 1.0', '"started": null'),
    "old fields": json.dumps({"isolation": "bogus", "services": {}, "pythons": {}}),
    "exit file": _state_text(5, 1.0, "a" * 32).replace("}}}", ', "exit_file": "/dev/zero"}}}'),
    "bad name": _state_text(5, 1.0, "a" * 32).replace('"sleeper"', '"../../x"'),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_STATES))
def test_a_damaged_state_is_one_clear_error_and_no_action(tmp_path: Path, name: str) -> None:
    stack = ProcessStack(project(SLEEPER), tmp_path, PYTHONS)
    stack.state_dir.mkdir(parents=True)
    (stack.state_dir / "state.json").write_text(HOSTILE_STATES[name])
    for act in (stack.ps, stack.down):
        with pytest.raises(XpydError) as caught:
            act()
        assert str(caught.value).startswith("state of xpyd-test is unreadable: ")
        assert "remove " in caught.value.hint
        assert "after checking that nothing of xpyd-test runs" in caught.value.hint


@pytest.mark.parametrize("kind", ["fifo", "zero", "huge"])
def test_a_state_that_is_no_small_regular_file_is_refused(tmp_path: Path, kind: str) -> None:
    stack = ProcessStack(project(SLEEPER), tmp_path, PYTHONS)
    stack.state_dir.mkdir(parents=True)
    state = stack.state_dir / "state.json"
    if kind == "fifo":
        os.mkfifo(state)  # a plain open would block for ever
    elif kind == "zero":
        state.symlink_to("/dev/zero")
    else:
        state.write_text(" " * (2 << 20))
    with pytest.raises(XpydError, match="state of xpyd-test is unreadable"):
        stack.ps()


def _plan_text(root: Path, edit: str, to: str) -> Path:
    written = written_project(root, SLEEPER)
    path = root / written.plan_file
    assert edit in path.read_text(), edit
    path.write_text(path.read_text().replace(edit, to, 1))
    return path


@pytest.mark.parametrize(
    ("edit", "to"),
    [
        ("name: xpyd-test", "name: ../../x"),
        ("state: .cache/process/xpyd-test", "state: ../../elsewhere"),
        ("  sleeper:", "  ../sleeper:"),
        ("stop_grace_s: 2", "stop_grace_s: two"),
        ("stop_grace_s: 2", "stop_grace_s: 2\n    unknown: 1"),
        ("runtime: process", "runtime: compose"),
        ("restarts: 1", "restarts: 1\n    registered_at: file:///etc/passwd"),
        ("python: engine", "python: /usr/bin/python3"),
    ],
)
def test_an_edited_plan_is_one_clear_error(tmp_path: Path, edit: str, to: str) -> None:
    path = _plan_text(tmp_path, edit, to)
    with pytest.raises(XpydError, match="is not a process plan render wrote") as caught:
        load_process_project(path, tmp_path)
    assert "render the stack again" in caught.value.hint


def test_a_plan_with_a_path_out_of_the_workspace_is_refused(tmp_path: Path) -> None:
    service = script_service("sleeper", "pass", paths={"/etc/xpyd/x.yaml": "../../etc/x.yaml"})
    written = written_project(tmp_path, service)
    with pytest.raises(XpydError, match="climbs out of the workspace"):
        load_process_project(tmp_path / written.plan_file, tmp_path)


def test_a_plan_bomb_is_refused(tmp_path: Path) -> None:
    written = written_project(tmp_path, SLEEPER)
    path = tmp_path / written.plan_file
    path.write_text("a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(9)
    ))  # fmt: skip
    with pytest.raises(XpydError, match="is not a process plan render wrote"):
        load_process_project(path, tmp_path)


def test_status_runs_no_health_check_of_a_plan_edited_since_up(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    probe = f"import pathlib; pathlib.Path({str(marker)!r}).touch()"
    service = script_service("sleeper", "import time; time.sleep(600)", health=("python3", "-c",
                             "pass"))  # fmt: skip
    written = written_project(tmp_path, service)
    ProcessStack(written, tmp_path, PYTHONS).up(["sleeper"])
    path = tmp_path / written.plan_file
    path.write_text(path.read_text().replace("- pass", f"- {json.dumps(probe)}"))
    other = rendered_process_stack(path, tmp_path, PYTHONS, Isolation.PLAIN)
    try:
        with pytest.raises(XpydError, match="changed since up started"):
            other.ps()
        assert not marker.exists()
    finally:
        other.down()  # the state alone says what runs: down still works
    assert not (other.state_dir / "state.json").exists()


def test_down_removes_every_file_that_named_a_process(tmp_path: Path) -> None:
    stack = ProcessStack(project(SLEEPER), tmp_path, PYTHONS)
    stack.up(["sleeper"])
    record = stack.state_dir / "sleeper.pid"
    wait_for(lambda: record.exists() and record.read_text())
    stack.down()
    left = sorted(p.name for p in stack.state_dir.iterdir() if p.is_file())
    assert left == []


def test_links_in_the_state_folder_are_never_written_through(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    targets = {name: outside / name for name in ("pid", "exit", "restarts", "state")}
    for target in targets.values():
        target.write_text("theirs")
    stack = ProcessStack(project(SLEEPER), tmp_path / "root", PYTHONS)
    stack.state_dir.mkdir(parents=True)
    for suffix in ("pid", "exit", "restarts"):
        (stack.state_dir / f"sleeper.{suffix}").symlink_to(targets[suffix])
    (stack.state_dir / "state.json").symlink_to(targets["state"])
    for act in (stack.ps, lambda: stack.up(["sleeper"])):
        with pytest.raises(XpydError, match="symbolic link"):
            act()  # a state that is a link is no state of ours
    (stack.state_dir / "state.json").unlink()
    stack.up(["sleeper"])
    try:
        record = stack.state_dir / "sleeper.pid"
        wait_for(lambda: record.exists() and record.read_text())
    finally:
        stack.down()
    assert all(target.read_text() == "theirs" for target in targets.values())


def test_a_linked_log_or_state_folder_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    stack = ProcessStack(project(SLEEPER), tmp_path / "root", PYTHONS)
    (stack.state_dir).mkdir(parents=True)
    (stack.state_dir / "logs").symlink_to(outside)
    with pytest.raises(XpydError, match="symbolic link"):
        stack.up(["sleeper"])
    assert list(outside.iterdir()) == []


def test_down_volumes_never_deletes_through_a_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep")
    stack = ProcessStack(project(SLEEPER), tmp_path / "root", PYTHONS)
    stack.state_dir.mkdir(parents=True)
    (stack.state_dir / "vllm-cache").symlink_to(outside)
    with pytest.raises(XpydError, match="symbolic link"):
        stack.down(volumes=True)
    assert (outside / "precious").read_text() == "keep"


def test_status_reads_a_huge_log_by_its_tail(tmp_path: Path) -> None:
    stack = ProcessStack(project(SLEEPER), tmp_path, PYTHONS)
    logs = stack.logs_dir
    logs.mkdir(parents=True)
    with (logs / "sleeper.log").open("w") as log:
        log.write("old line\n" * 2_000_000)  # 18 MB
        log.write("xpyd: sleeper exited with 3\nthe last line\n")
    tail = stack.logs("sleeper", tail=2)
    assert tail == "xpyd: sleeper exited with 3\nthe last line\n"
    assert stack._last_exit("sleeper", running=False) == "sleeper exited with 3"


def test_a_second_writer_of_a_stack_is_refused_with_who_holds_it(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time, pathlib; from generator.stack_lock import holding\n"
         f"with holding(pathlib.Path({str(tmp_path)!r}), 'cpu-1p1d', 'up cpu-1p1d'):\n"
         "    print('held', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        with (
            pytest.raises(
                XpydError,
                match=rf"stack cpu-1p1d is being changed by PID {holder.pid} "
                r"\(up cpu-1p1d\) since \d\d:\d\d:\d\d",
            ),  # fmt: skip
            holding(tmp_path, "cpu-1p1d", "up cpu-1p1d"),
        ):
            pass
        with holding(tmp_path, "cpu-2host", "up cpu-2host"):
            pass  # another stack is free
    finally:
        holder.kill()
        holder.communicate()
    with holding(tmp_path, "cpu-1p1d", "down cpu-1p1d"), holding(tmp_path, "cpu-1p1d", "nested"):
        pass  # free once its holder is gone, and taken again within one process


@pytest.mark.parametrize("kind", ["bomb", "fifo", "huge", "not yaml"])
def test_a_damaged_rendered_compose_file_is_one_clear_error(tmp_path: Path, kind: str) -> None:
    """What `status`, `logs` and `down` read first: the rendered compose files."""
    from generator.paths import Workspace
    from generator.workbench import rendered_projects

    folder = tmp_path / "compose" / "s"
    folder.mkdir(parents=True)
    (folder / "plan.json").write_text(json.dumps({"hosts": [], "profile": "cpu"}))
    compose = folder / "compose.yaml"
    if kind == "bomb":
        compose.write_text("a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n"
            for i in range(9)
        ))  # fmt: skip
    elif kind == "fifo":
        os.mkfifo(compose)
    elif kind == "huge":
        compose.write_text("x: 1\n" * (4 << 20))
    else:
        compose.write_text("{")
    with pytest.raises(XpydError, match="is not a compose file render wrote"):
        rendered_projects("s", Workspace(tmp_path))
