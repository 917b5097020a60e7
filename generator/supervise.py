"""Runs one service's command so that its runtime's restart policy sees every exit it should.

    python3 /opt/xpyd/supervise.py SERVICE -- COMMAND...

A server exits only when it is asked to. vLLM's API server exits 0 when its engine core dies,
and Docker's bounded policy (``on-failure:N``) restarts only a non-zero exit; so an exit that
nobody asked for is reported as 1 (with a line that says why), and one that was asked for
(SIGTERM or SIGINT, forwarded to the command) keeps its own code. The command's exit or
signal is written on stderr, where `logs` and `status` find it.

Standard library only: it runs in every image (engines, LMCache servers, the router) and in
the process runtime's Pythons.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from types import FrameType

__all__ = ["IN_IMAGE", "SOURCE", "exit_code", "main"]

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
        return f"xpyd: {service} {how} after it was asked to stop"
    if returncode == 0:
        return f"xpyd: {service} {how} without being asked to: reported as {UNASKED_EXIT}"
    return f"xpyd: {service} {how}"


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: supervise.py SERVICE -- COMMAND...", file=sys.stderr)
        return 2
    service, command = argv[0], argv[2:]
    child = subprocess.Popen(command)
    asked: list[int] = []

    def forward(signum: int, _: FrameType | None) -> None:
        asked.append(signum)
        child.send_signal(signum)

    for signum in _FORWARDED:
        signal.signal(signum, forward)
    returncode = child.wait()
    print(describe(service, returncode, asked_to_stop=bool(asked)), file=sys.stderr, flush=True)
    return exit_code(returncode, asked_to_stop=bool(asked))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
