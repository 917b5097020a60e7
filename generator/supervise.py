"""Runs one service's command so that its runtime's restart policy sees every exit it should.

    python3 /opt/xpyd/supervise.py SERVICE -- COMMAND...
    python3 /opt/xpyd/supervise.py --signal KILL|TERM|STOP|CONT SERVICE [--tree]

A server exits only when it is asked to. vLLM's API server exits 0 when its engine core dies,
and Docker's bounded policy (``on-failure:N``) restarts only a non-zero exit; so an exit that
nobody asked for is reported as 1 (with a line that says why), and one that was asked for
(SIGTERM or SIGINT, forwarded to the command) keeps its own code. The command's exit or
signal is written on stderr, where `logs` and `status` find it.

The second form is how `bench --fault` hurts a service from inside its container (`docker
exec`): it signals the supervised command (``--tree``: and every process under it, so that a
stopped engine stops whole), never the supervisor, so the runtime sees a crash and not a stop
it was asked for (`docker kill` counts as asked: Docker would not restart it).

Standard library only: it runs in every image (engines, LMCache servers, the router) and in
the process runtime's Pythons.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from types import FrameType

__all__ = ["IN_IMAGE", "LINE_PREFIX", "SOURCE", "exit_code", "main"]

LINE_PREFIX = "xpyd: "  # its lines on stderr, which `status` looks for
SOURCE = "generator/supervise.py"  # copied into every image (images/templates)
IN_IMAGE = "/opt/xpyd/supervise.py"
_FORWARDED = (signal.SIGTERM, signal.SIGINT)
UNASKED_EXIT = 1


def exit_code(returncode: int, *, asked_to_stop: bool) -> int:
    """What the supervisor exits with, given its command's ``returncode`` (negative: killed
    by that signal, as subprocess reports it)."""
    code = 128 - returncode if returncode < 0 else returncode
    if code == 0 and not asked_to_stop:
        return UNASKED_EXIT
    return code


def describe(service: str, returncode: int, *, asked_to_stop: bool) -> str:
    if returncode < 0:
        how = f"was killed by {signal.Signals(-returncode).name}"
    else:
        how = f"exited with {returncode}"
    if asked_to_stop:
        return f"{LINE_PREFIX}{service} {how} after it was asked to stop"
    if returncode == 0:
        return f"{LINE_PREFIX}{service} {how} without being asked to: reported as {UNASKED_EXIT}"
    return f"{LINE_PREFIX}{service} {how}"


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as file:
            return [int(child) for child in file.read().split()]
    except OSError:
        return []


def pid_file(service: str) -> Path:
    """Where the supervisor of ``service`` writes its command's PID (per container, or per
    machine for processes)."""
    return Path(tempfile.gettempdir()) / f"xpyd-supervised-{service}.pid"


def _tree(pid: int) -> list[int]:
    pids, index = [pid], 0
    while index < len(pids):
        pids += _children(pids[index])
        index += 1
    return pids


def send(signame: str, service: str, *, tree: bool) -> int:
    signum = signal.Signals[f"SIG{signame}"]
    try:
        command = int(pid_file(service).read_text(encoding="ascii"))
    except (OSError, ValueError):
        print(f"{LINE_PREFIX}no supervised {service} here", file=sys.stderr)
        return 1
    for pid in _tree(command) if tree else [command]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)
            print(f"{LINE_PREFIX}sent {signum.name} to {service} (pid {pid})", flush=True)
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--signal"] and len(argv) in (3, 4):
        return send(argv[1], argv[2], tree=argv[3:] == ["--tree"])
    if len(argv) < 3 or argv[1] != "--":
        print("usage: supervise.py SERVICE -- COMMAND...", file=sys.stderr)
        return 2
    service, command = argv[0], argv[2:]
    asked: list[int] = []
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, _: FrameType | None) -> None:
        asked.append(signum)
        if child is not None:
            child.send_signal(signum)

    # Handled before the command starts, so the command gets them at their default: one
    # ignored where the supervisor started (a background shell ignores SIGINT) would stay
    # ignored in the command (exec keeps an ignored signal ignored), and no trap there helps.
    for signum in _FORWARDED:
        signal.signal(signum, forward)
    child = subprocess.Popen(command)
    if asked:  # asked to stop while the command was starting
        child.send_signal(asked[-1])
    pid_file(service).write_text(str(child.pid), encoding="ascii")
    returncode = child.wait()
    print(describe(service, returncode, asked_to_stop=bool(asked)), file=sys.stderr, flush=True)
    return exit_code(returncode, asked_to_stop=bool(asked))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
