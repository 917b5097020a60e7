"""Process groups on this machine: how the process runtime starts a service (its own
session), tells whether it is still the process it started (pid and start time: pids are
reused), reads its exit status, ports and CPU time, and ends it with everything it started."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psutil

from generator.errors import StackError

__all__ = [
    "alive",
    "cpu_seconds",
    "create_time",
    "exit_code",
    "group_of",
    "listening",
    "spawn",
    "spawn_service",
    "stop_group",
]

_STOP_POLL_S = 0.2


# posix_spawn has no working directory of its own: a shell changes into it, then becomes the
# command (exec keeps the pid).
_IN_FOLDER = 'cd "$1" || exit 125; shift; exec "$@"'


def spawn_service(argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> int:
    """Start a service that outlives this process (and `up` itself), in a session of its own
    (down and Ctrl+C end the whole group), its output appended to ``log``; its pid. No Popen
    object is kept for it (none would be waited for); ``alive`` reaps it once it ended."""
    command = ["/bin/sh", "-c", _IN_FOLDER, "xpyd-cd", str(cwd), *argv]
    descriptor = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        actions = [
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, descriptor, 1),
            (os.POSIX_SPAWN_DUP2, descriptor, 2),
        ]
        return os.posix_spawn(command[0], command, env, file_actions=actions, setsid=True)
    except OSError as exc:
        raise StackError(f"cannot start {argv[0]}: {exc}") from exc
    finally:
        os.close(descriptor)


def spawn(
    argv: list[str], env: dict[str, str], cwd: Path, *, stdout: Any, stderr: Any
) -> subprocess.Popen[bytes]:
    """A one-off run that the caller waits for (the benchmark), in a session of its own."""
    try:
        return subprocess.Popen(
            argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
            start_new_session=True,
        )  # fmt: skip
    except OSError as exc:
        raise StackError(f"cannot start {argv[0]}: {exc}") from exc


def _reap(pid: int) -> None:
    """Collect the exit of a service this process started, if it ended (else a zombie stays
    until this process exits); a process started elsewhere is not ours to reap."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def create_time(pid: int) -> float | None:
    with contextlib.suppress(psutil.Error):
        return float(psutil.Process(pid).create_time())
    return None


def _process(entry: Mapping[str, Any]) -> psutil.Process | None:
    """The entry's process if it is still that one (a pid can be reused)."""
    _reap(int(entry["pid"]))
    try:
        process = psutil.Process(int(entry["pid"]))
        if entry.get("started") is not None and process.create_time() != entry["started"]:
            return None
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        return process
    except psutil.Error:
        return None


def alive(entry: Mapping[str, Any]) -> bool:
    return _process(entry) is not None


def exit_code(entry: Mapping[str, Any]) -> int | None:
    path = entry.get("exit_file")
    with contextlib.suppress(OSError, ValueError):
        return int(Path(path).read_text(encoding="ascii").strip()) if path else None
    return None  # ended by a signal, or by down: no status was written


def group_of(entry: Mapping[str, Any]) -> list[psutil.Process]:
    """Every process of the entry's session (its group leader and all it started)."""
    leader = _process(entry)
    if leader is None:
        return []
    members = [leader]
    with contextlib.suppress(psutil.Error):
        members += leader.children(recursive=True)
    return members


def listening(entry: Mapping[str, Any]) -> tuple[str, ...]:
    """The TCP ports the entry's processes listen on (what compose shows as published)."""
    found = set()
    for member in group_of(entry):
        with contextlib.suppress(psutil.Error):
            for connection in member.net_connections(kind="tcp"):
                if connection.status == psutil.CONN_LISTEN and connection.laddr:
                    found.add(
                        (connection.laddr.port, f"{connection.laddr.ip}:{connection.laddr.port}")
                    )
    return tuple(address for _, address in sorted(found))


def cpu_seconds(members: list[psutil.Process]) -> float:
    total = 0.0
    for member in members:
        with contextlib.suppress(psutil.Error):
            times = member.cpu_times()
            total += times.user + times.system
    return total


def stop_group(entry: Mapping[str, Any], *, grace_s: float) -> None:
    """SIGTERM to the group, SIGKILL to whatever is left after ``grace_s``."""
    leader = _process(entry)
    if leader is None:
        return
    members = group_of(entry)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(leader.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_running(m) for m in members):
        time.sleep(_STOP_POLL_S)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(leader.pid, signal.SIGKILL)
    for member in members:  # a child that left the group (setsid) goes too
        with contextlib.suppress(psutil.Error):
            member.kill()
    psutil.wait_procs(members, timeout=5)


def _running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
