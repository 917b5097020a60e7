"""Process groups on this machine: how the process runtime starts a service (its own
session), tells whether a process is still the one it started, reads its ports and CPU time,
and ends it with everything it started.

A state entry names a process by its PID, its start time and the marker `up` put into its
environment (``process_state.MARKER_ENV``). A process is the entry's only while it still has
that PID and start (PIDs are reused), leads its own session (each service is started as one)
and carries the marker in the environment it was started with (``/proc/PID/environ``: the
group's leader is a shell, which never rewrites it). Anything else is someone else's: never
signalled, never shown as the service."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil

from generator.errors import StackError
from generator.runtimes.process_state import MARKER_ENV, ServiceEntry

__all__ = [
    "alive",
    "cpu_seconds",
    "create_time",
    "group_of",
    "listening",
    "spawn",
    "spawn_service",
    "stop_group",
]

_STOP_POLL_S = 0.2
_ENVIRON_MAX_BYTES = 1 << 20  # the kernel's limit on argv + environment is 2 MiB


# posix_spawn has no working directory of its own: a shell changes into it, then becomes the
# command (exec keeps the pid).
_IN_FOLDER = 'cd "$1" || exit 125; shift; exec "$@"'


def spawn_service(argv: list[str], env: dict[str, str], cwd: Path, log: int) -> int:
    """Start a service that outlives this process (and `up` itself), in a session of its own
    (down and Ctrl+C end the whole group), its output appended to the descriptor ``log``; its
    pid. No Popen object is kept for it (none would be waited for); ``alive`` reaps it once it
    ended."""
    command = ["/bin/sh", "-c", _IN_FOLDER, "xpyd-cd", str(cwd), *argv]
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_DUP2, log, 1),
        (os.POSIX_SPAWN_DUP2, log, 2),
    ]
    try:
        return os.posix_spawn(command[0], command, env, file_actions=actions, setsid=True)
    except OSError as exc:
        raise StackError(f"cannot start {argv[0]}: {exc}") from exc


def spawn(
    argv: list[str], env: dict[str, str], cwd: Path, *, stdout: int, stderr: int
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


def _process(entry: ServiceEntry) -> psutil.Process | None:
    """The entry's process, if it still is that one (see the module's docstring)."""
    _reap(entry.pid)
    try:
        process = psutil.Process(entry.pid)
        if process.create_time() != entry.started or os.getsid(entry.pid) != entry.pid:
            return None
        if process.status() == psutil.STATUS_ZOMBIE or not _carries(entry):
            return None
        return process
    except (psutil.Error, OSError):
        return None


def _carries(entry: ServiceEntry) -> bool:
    """Whether the process was started with the entry's marker in its environment."""
    wanted = f"{MARKER_ENV}={entry.marker}".encode()
    try:
        with open(f"/proc/{entry.pid}/environ", "rb") as environ:
            return wanted in environ.read(_ENVIRON_MAX_BYTES).split(b"\0")
    except OSError:
        return False


def alive(entry: ServiceEntry) -> bool:
    return _process(entry) is not None


def group_of(entry: ServiceEntry) -> list[psutil.Process]:
    """Every process of the entry's session (its group leader and all it started)."""
    leader = _process(entry)
    if leader is None:
        return []
    members = [leader]
    with contextlib.suppress(psutil.Error):
        members += leader.children(recursive=True)
    return members


def listening(entry: ServiceEntry) -> tuple[str, ...]:
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


def stop_group(entry: ServiceEntry, *, grace_s: float) -> None:
    """SIGTERM to the group, SIGKILL to whatever is left after ``grace_s``: the group only
    while its leader is proven the entry's (a live leader keeps its group's id from reuse),
    each member by psutil (which checks it is still the process it listed)."""
    leader = _process(entry)
    if leader is None:
        return
    members = group_of(entry)
    _signal_group(leader, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_running(m) for m in members):
        time.sleep(_STOP_POLL_S)
    _signal_group(leader, signal.SIGKILL)
    for member in members:  # a child that left the group (setsid) goes too
        with contextlib.suppress(psutil.Error):
            member.kill()
    psutil.wait_procs(members, timeout=5)


def _signal_group(leader: psutil.Process, signum: int) -> None:
    if _running(leader):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(leader.pid, signum)


def _running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
