"""The process runtime with real processes (small Python services, not vLLM): start, health,
logs, exit codes, a second shell's view, one-off runs, and `down` leaving nothing running,
grandchildren included. The real stacks under it: tests/integration/test_process_stacks.py."""

from __future__ import annotations

import socket
import sys
import time
from dataclasses import replace
from pathlib import Path, PurePosixPath

import psutil
import pytest

from generator.bench.faults import signal_service
from generator.runtimes.process import ProcessStack, Pythons, rendered_process_stack
from generator.serializers.process import ProcessProject, ProcessService
from generator.spec import Isolation
from generator.supervise import PidRecord

PYTHONS = Pythons(engine=Path(sys.executable), router=Path(sys.executable))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def http_service(name: str, port: int) -> ProcessService:
    probe = f"import urllib.request as u; u.urlopen('http://127.0.0.1:{port}/', timeout=2)"
    return ProcessService(
        name=name,
        role="prefill",
        interpreter="engine",
        command=("python3", "-m", "http.server", str(port), "--bind", "127.0.0.1"),
        env={"GREETING": "from the plan"},
        health=("python3", "-c", probe),
        stop_grace_s=5,
    )


def script_service(name: str, code: str, **fields: object) -> ProcessService:
    fields = {"stop_grace_s": 2} | fields
    return ProcessService(
        name=name, role="decode", interpreter="engine", command=("python3", "-c", code), env={},
        **fields,  # type: ignore[arg-type]
    )  # fmt: skip


def project(*services: ProcessService) -> ProcessProject:
    return ProcessProject("xpyd-test", "local", PurePosixPath("compose/t"), services, (), "")


def written_project(root: Path, *services: ProcessService) -> ProcessProject:
    """A process plan as render writes it, on disk under ``root`` (what another shell reads)."""
    from generator.serializers.process import _document, state_dir
    from generator.serializers.yaml_text import dump_yaml

    document = {
        "name": "xpyd-test",
        "x-xpyd": {"stack": "test", "host": "local", "runtime": "process"},
        "state": str(state_dir("xpyd-test")),
        "services": {service.name: _document(service) for service in services},
    }
    text = dump_yaml(document)
    made = replace(project(*services), text=text)
    (root / made.plan_file).parent.mkdir(parents=True, exist_ok=True)
    (root / made.plan_file).write_text(text)
    return made


def wait_for(condition: object, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise AssertionError("condition not met in time")


@pytest.fixture
def stack(tmp_path: Path) -> ProcessStack:
    return ProcessStack(project(http_service("web", free_port())), tmp_path, PYTHONS)


def state_of(stack: ProcessStack, name: str) -> tuple[str, str | None, int | None]:
    (state,) = [s for s in stack.ps() if s.service == name]
    return state.status, state.health, state.exit_code


def test_a_service_runs_becomes_healthy_and_logs(stack: ProcessStack) -> None:
    stack.up(["web"])
    try:
        wait_for(lambda: state_of(stack, "web")[1] == "healthy")
        assert state_of(stack, "web") == ("running", "healthy", None)
        stack.up(["web"])  # running: left alone
        assert len(stack.ps()) == 1
        wait_for(lambda: "GET / HTTP" in stack.logs("web"))  # http.server logs each probe
    finally:
        stack.down()
    assert stack.ps() == []


def test_up_replaces_a_running_service_whose_definition_changed(tmp_path: Path) -> None:
    """As compose recreates a changed service: a second `up` with another router (`--set`)
    must not leave the first one serving."""
    port = free_port()
    first = ProcessStack(project(http_service("web", port)), tmp_path, PYTHONS)
    first.up(["web"])
    try:
        wait_for(lambda: state_of(first, "web")[1] == "healthy")
        (before,) = first.ps()
        first.up(["web"])  # the same definition: left running
        assert [s.container for s in first.ps()] == [before.container]
        changed = replace(http_service("web", port), env={"GREETING": "from another plan"})
        second = ProcessStack(project(changed), tmp_path, PYTHONS)
        second.up(["web"])
        (after,) = second.ps()
        assert after.container != before.container
        assert not psutil.pid_exists(int(before.container.split()[1]))
        wait_for(lambda: state_of(second, "web")[1] == "healthy")
    finally:
        first.down()
    assert first.ps() == []


def test_restart_replaces_the_process_and_moves_its_start(stack: ProcessStack) -> None:
    stack.up(["web"])
    try:
        wait_for(lambda: state_of(stack, "web")[1] == "healthy")
        (before,) = stack.ps()
        assert before.started_at is not None
        time.sleep(0.05)  # create times have 10 ms steps
        stack.restart(["web"])
        (after,) = stack.ps()
        assert after.container != before.container  # another pid
        assert after.started_at is not None
        assert after.started_at > before.started_at
        wait_for(lambda: state_of(stack, "web")[1] == "healthy")
        assert not psutil.pid_exists(int(before.container.split()[1]))
    finally:
        stack.down()


def test_a_service_with_restarts_comes_back_and_says_why(tmp_path: Path) -> None:
    """recovery.max_restarts under the process runtime: the supervisor runs the command
    again; the service stays "running" (one pid for `down`), and ps counts the restart and
    says why the first run ended, also once the second run's log has buried that line (a
    restarted vLLM writes hundreds of lines)."""
    marker = tmp_path / "crashed-once"
    code = (
        "import pathlib, sys, time\n"
        f"marker = pathlib.Path({str(marker)!r})\n"
        "if not marker.exists():\n"
        "    marker.write_text('x'); sys.exit(5)\n"
        "print('starting\\n' * 500 + 'started', flush=True)\n"
        "time.sleep(600)\n"
    )
    stack = ProcessStack(project(script_service("flaky", code, max_restarts=2)), tmp_path, PYTHONS)
    stack.up(["flaky"])
    try:
        wait_for(lambda: stack.ps()[0].restarts == 1 and "started" in stack.logs("flaky", tail=1))
        (state,) = stack.ps()
        assert state.status == "running"
        assert state.last_exit == "flaky exited with 5"  # why, not the restart that followed
        assert "flaky exited with 5" in stack.logs("flaky")
        # Its start is the command's last, not its supervisor's (the fault drill asks whether
        # a peer started anew since the fault).
        supervisor = psutil.Process(int(state.container.split()[1])).create_time()
        assert state.started_at is not None
        assert state.started_at > supervisor
    finally:
        stack.down()
    assert stack.ps() == []
    assert not [
        p
        for p in psutil.process_iter(["cmdline"])
        if str(marker) in " ".join(p.info["cmdline"] or [])
    ]


def test_a_fault_hits_its_own_stacks_service_only(tmp_path: Path) -> None:
    """`bench --fault` on processes: the signal goes through the image's supervisor path (the
    package's supervise.py here) to the command of this stack's service, though another stack
    on the machine has a service of the same name."""
    stacks = [
        ProcessStack(
            project(script_service("decode-0", "import time; time.sleep(600)", max_restarts=1)),
            tmp_path / name,
            PYTHONS,
        )
        for name in ("hit", "beside")
    ]
    hit, beside = stacks
    for stack in stacks:
        stack.up(["decode-0"])
    try:
        records = [s.state_dir / "decode-0.pid" for s in stacks]
        wait_for(lambda: all(record.exists() and record.read_text() for record in records))
        commands = [PidRecord.parse(record.read_text()).pid for record in records]
        said = signal_service(hit, "decode-0", "KILL")
        assert f"sent SIGKILL to decode-0 (pid {commands[0]})" in said
        wait_for(lambda: hit.ps()[0].restarts == 1)
        assert hit.ps()[0].last_exit == "decode-0 was killed by SIGKILL"
        assert (beside.ps()[0].restarts, psutil.pid_exists(commands[1])) == (0, True)
    finally:
        for stack in stacks:
            stack.down()


def test_a_restarted_command_does_not_inherit_the_health_of_the_one_before(
    tmp_path: Path,
) -> None:
    """Its first run serves, the run after its crash never does: the look right after the
    restart must not be the first run's (cached) healthy."""
    port, marker = free_port(), tmp_path / "served-once"
    code = (
        "import http.server, pathlib, time\n"
        f"marker = pathlib.Path({str(marker)!r})\n"
        "if marker.exists():\n"
        "    time.sleep(600)\n"
        "marker.write_text('x')\n"
        f"address = ('127.0.0.1', {port})\n"
        "http.server.HTTPServer(address, http.server.SimpleHTTPRequestHandler).serve_forever()\n"
    )
    probe = f"import urllib.request as u; u.urlopen('http://127.0.0.1:{port}/', timeout=2)"
    service = script_service("web", code, max_restarts=1, health=("python3", "-c", probe))
    stack = ProcessStack(project(service), tmp_path, PYTHONS)
    stack.up(["web"])
    try:
        wait_for(lambda: state_of(stack, "web")[1] == "healthy")  # checked just now
        signal_service(stack, "web", "KILL")
        wait_for(lambda: stack.ps()[0].restarts == 1, timeout_s=4)  # within the check's pace
        assert state_of(stack, "web") == ("running", "starting", None)
    finally:
        stack.down()


def test_a_process_that_dies_is_exited_with_its_code(tmp_path: Path) -> None:
    crasher = script_service("crasher", "import sys; print('bye'); sys.exit(3)")
    stack = ProcessStack(project(crasher), tmp_path, PYTHONS)
    stack.up(["crasher"])
    wait_for(lambda: state_of(stack, "crasher")[0] == "exited")
    assert state_of(stack, "crasher") == ("exited", None, 3)
    assert stack.logs("crasher", tail=1) == "bye\n"
    stack.down()


def test_down_ends_the_whole_group_grandchildren_too(tmp_path: Path) -> None:
    code = (
        "import subprocess, time; subprocess.Popen(['sleep', '1000']); "
        "subprocess.Popen(['sh', '-c', 'trap \"\" TERM; sleep 1000']); time.sleep(1000)"
    )
    stack = ProcessStack(project(script_service("parent", code)), tmp_path, PYTHONS)
    stack.up(["parent"])
    wait_for(lambda: len(members(stack)) >= 5)  # sh, python, sleep, sh (ignores TERM), sleep
    found = members(stack)
    stack.down()
    assert not [p for p in found if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_down_marks_the_stack_stopping_while_it_stops_it(tmp_path: Path) -> None:
    """Supervisors watching a GPU peer (--ends-with) see the mark and restart nothing while
    the stack goes; it is gone once down is done."""
    saw = tmp_path / "saw"
    code = (
        "import os, pathlib, signal, sys, time\n"
        "here = pathlib.Path(os.environ['XPYD_PID_FILE']).parent\n"
        "def stop(*_):\n"
        f"    pathlib.Path({str(saw)!r}).write_text(str((here / 'stopping').exists()))\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "time.sleep(1000)\n"
    )
    stack = ProcessStack(project(script_service("watcher", code)), tmp_path, PYTHONS)
    stack.up(["watcher"])
    wait_for(lambda: state_of(stack, "watcher")[0] == "running")
    time.sleep(1.0)  # its handler is set
    stack.down()
    assert saw.read_text() == "True"
    assert not (stack.state_dir / "stopping").exists()


def members(stack: ProcessStack) -> list[psutil.Process]:
    import json

    state = json.loads((stack.state_dir / "state.json").read_text())
    leader = psutil.Process(state["services"]["parent"]["pid"])
    return [leader, *leader.children(recursive=True)]


def test_another_shell_sees_and_stops_what_up_started(tmp_path: Path) -> None:
    """status/logs/down read the rendered plan and the state: nothing in memory is shared."""
    service = http_service("web", free_port())
    written = written_project(tmp_path, service)
    first = ProcessStack(written, tmp_path, PYTHONS)
    first.up(["web"])
    try:
        other = rendered_process_stack(
            tmp_path / written.plan_file, tmp_path, PYTHONS, Isolation.PLAIN
        )
        wait_for(lambda: state_of(other, "web")[1] == "healthy")
    finally:
        other.down()
    assert first.ps() == []


def test_a_one_off_run_with_a_volume(tmp_path: Path) -> None:
    service = script_service("bench", "pass", on_demand=True, paths={"/results": "unused"})
    stack = ProcessStack(project(service), tmp_path, PYTHONS)
    results = tmp_path / "results"
    results.mkdir()
    code = "import sys; open(sys.argv[1] + '/out.json', 'w').write('{}'); print('done')"
    run = stack.start_oneoff(
        "bench",
        ["python3", "-c", code, "/results"],
        name="b1",
        env={},
        volumes=[(results, "/results")],
    )
    assert run.wait(30) == 0
    assert run.output()[0] == "done\n"
    assert (results / "out.json").read_text() == "{}"  # the volume wins over the plan's path
    run.remove()
    assert stack.ps() == []


_IGNORES_SIGTERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ignoring SIGTERM', flush=True); time.sleep(600)"
)


def test_down_stops_a_service_that_never_served_without_its_grace(tmp_path: Path) -> None:
    """A Ctrl+C during `up`: an engine still starting holds no request to let finish, and
    vLLM mid-start lets a SIGTERM wait, so its 30 s grace would be 30 s of nothing."""
    never = script_service("never", _IGNORES_SIGTERM, health=("false",), stop_grace_s=30)
    stack = ProcessStack(project(never), tmp_path, PYTHONS)
    stack.up(["never"])
    wait_for(lambda: "ignoring SIGTERM" in stack.logs("never"))
    assert state_of(stack, "never")[:2] == ("running", "starting")
    started = time.monotonic()
    stack.down()
    assert 4.0 <= time.monotonic() - started < 15.0  # SIGTERM, then SIGKILL after 5 s
    assert stack.ps() == []


def test_down_keeps_the_grace_of_a_service_that_served(tmp_path: Path) -> None:
    served = script_service("served", _IGNORES_SIGTERM, health=("true",), stop_grace_s=8)
    stack = ProcessStack(project(served), tmp_path, PYTHONS)
    stack.up(["served"])
    wait_for(lambda: "ignoring SIGTERM" in stack.logs("served"))
    wait_for(lambda: state_of(stack, "served")[1] == "healthy")
    started = time.monotonic()
    stack.down()
    assert time.monotonic() - started >= 8.0  # its grace, whole
    assert stack.ps() == []


def test_down_from_another_shell_keeps_every_grace(tmp_path: Path) -> None:
    """Only the stack that started a service knows it never served: another shell's `down`
    cannot tell a starting engine from one serving requests."""
    never = script_service("never", _IGNORES_SIGTERM, health=("false",), stop_grace_s=8)
    made = written_project(tmp_path, never)
    starter = ProcessStack(made, tmp_path, PYTHONS)
    starter.up(["never"])
    wait_for(lambda: "ignoring SIGTERM" in starter.logs("never"))
    other = rendered_process_stack(tmp_path / made.plan_file, tmp_path, PYTHONS, Isolation.PLAIN)
    started = time.monotonic()
    other.down()
    assert time.monotonic() - started >= 8.0
    assert other.ps() == []
