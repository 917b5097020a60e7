"""Runs one service's command so that its runtime's restart policy sees every exit it should.

    python3 /opt/xpyd/supervise.py SERVICE -- COMMAND...
    python3 generator/supervise.py --restarts N SERVICE -- COMMAND...
    python3 /opt/xpyd/supervise.py --needs-registered URL SERVICE -- COMMAND...
    python3 /opt/xpyd/supervise.py --restarts-with URL [--restarts-with URL] SERVICE -- COMMAND...
    python3 /opt/xpyd/supervise.py --signal KILL|TERM|STOP|CONT SERVICE [--tree|--under]

A server exits only when it is asked to. vLLM's API server exits 0 when its engine core dies,
and Docker's bounded policy (``on-failure:N``) restarts only a non-zero exit; so an exit that
nobody asked for is reported as 1 (with a line that says why), and one that was asked for
(SIGTERM or SIGINT, forwarded to the command) keeps its own code. The command's exit or
signal is written on stderr, where `logs` and `status` find it.

With ``--restarts N`` (the process runtime, which has no restart policy of its own) the
supervisor is the policy: it runs the command again after each exit nobody asked for, at most
N times, waiting as Docker does between tries (0.1 s, doubling, at most 30 s; back to 0.1 s
after a run of 10 s), writes the count so far and why the last run ended to
``$XPYD_RESTARTS_FILE`` where that is set,
and says so on stderr; after the N-th it gives up and exits as the command did. The command
runs in a session of its own, and whatever it leaves running when it ends (a killed vLLM API
server's engine core) is killed before it starts again.

With ``--needs-registered URL`` (a nixl-mp engine: its LMCache server's /status) it also
watches the engine's KV store: an engine registers its KV buffers with its `lmcache server`
once, at start, so a server that restarted answers without it (``registered_gpu_ids`` and
``registered_non_cuda_instance_ids`` empty) and every request to the engine hangs. Once the
engine was seen registered, two such answers in a row make the supervisor end the command as
a crash (exit 1, with a line saying why), and the runtime's policy starts it again.

With ``--restarts-with URL`` (an lmcache-pd prefiller: each decoder's /metrics) it watches a
peer's process: a sender keeps its connection to each decoder it met and never makes a new
one, so after that decoder restarts every send to it fails. When a peer's
``process_start_time_seconds`` moves past the one first seen, the command is ended as a crash
and starts again with fresh connections.

The last form is how `bench --fault` hurts a service from inside its container (`docker
exec`), or beside its process (the process runtime names the PID file, ``$XPYD_PID_FILE``): it
signals the supervised command (``--tree``: and every process under it, so that a
stopped engine stops whole; ``--under``: only the processes under it, so that a vLLM engine's
core stops while its API server still answers /health, as a wedged engine does), never the
supervisor, so the runtime sees a crash and not a stop
it was asked for (`docker kill` counts as asked: Docker would not restart it).

Standard library only: it runs in every image (engines, LMCache servers, the router) and in
the process runtime's Pythons.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Literal, Protocol

__all__ = [
    "IN_IMAGE",
    "LINE_PREFIX",
    "PID_FILE_ENV",
    "SOURCE",
    "Reach",
    "exit_code",
    "last_said",
    "main",
    "watch_options",
]

LINE_PREFIX = "xpyd: "  # its lines on stderr, which `status` looks for
SOURCE = "generator/supervise.py"  # copied into every image (images/templates)
IN_IMAGE = "/opt/xpyd/supervise.py"
PID_FILE_ENV = "XPYD_PID_FILE"
_FORWARDED = (signal.SIGTERM, signal.SIGINT)
UNASKED_EXIT = 1
_FIRST_WAIT_S, _LONGEST_WAIT_S, _RAN_WELL_S = 0.1, 30.0, 10.0
# How often the KV store is asked (XPYD_WATCH_EVERY_S: tests), and how many answers without
# the engine in a row end it.
_WATCH_EVERY_S = float(os.environ.get("XPYD_WATCH_EVERY_S", "5"))
_WATCH_MISSES = 2
_STATUS_MAX_BYTES = 4 << 20  # a /status larger than this is not one to trust: unparsable
_RESTARTING = "restarting ("  # its announcement of the next run: "SERVICE restarting (1 of 5)"
# --signal's reach: the command alone, with every process under it, or only those under it.
Reach = Literal["command", "tree", "under"]
_REACH_OPTIONS: dict[tuple[str, ...], Reach] = {
    (): "command",
    ("--tree",): "tree",
    ("--under",): "under",
}
_SAME_START_S = 1.0  # a process's start time, as its page gives it, is rounded


def last_said(log: str) -> str | None:
    """The supervisor's last line in a service's log, without its prefix (anywhere in a line:
    a command's last words may end without a newline), less its own restart announcements:
    why the command stopped is the line before them."""
    said = [
        line[line.index(LINE_PREFIX) + len(LINE_PREFIX) :]
        for line in log.splitlines()
        if LINE_PREFIX in line
    ]
    said = [line for line in said if f" {_RESTARTING}" not in line]
    return said[-1] if said else None


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
    """Where the supervisor of ``service`` writes its command's PID: ``$XPYD_PID_FILE`` where
    the runtime names one (processes: two stacks on one machine may both have a decode-0),
    else the temporary folder (one per container)."""
    named = os.environ.get(PID_FILE_ENV)
    return Path(named) if named else Path(tempfile.gettempdir()) / f"xpyd-supervised-{service}.pid"


def _tree(pid: int) -> list[int]:
    pids, index = [pid], 0
    while index < len(pids):
        pids += _children(pids[index])
        index += 1
    return pids


def send(signame: str, service: str, reach: Reach = "command") -> int:
    signum = signal.Signals[f"SIG{signame}"]
    try:
        command = int(pid_file(service).read_text(encoding="ascii"))
    except (OSError, ValueError):
        print(f"{LINE_PREFIX}no supervised {service} here", file=sys.stderr)
        return 1
    pids = [command] if reach == "command" else _tree(command)[1 if reach == "under" else 0 :]
    if not pids:
        print(f"{LINE_PREFIX}{service} runs no process under its command", file=sys.stderr)
        return 1
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)
            print(f"{LINE_PREFIX}sent {signum.name} to {service} (pid {pid})", flush=True)
    return 0


def watch_options(registered_at: str | None, restarts_with: Sequence[str]) -> list[str]:
    """A service's watches as this supervisor's options (both runtimes pass them)."""
    registration = ["--needs-registered", registered_at] if registered_at else []
    return registration + [part for url in restarts_with for part in ("--restarts-with", url)]


def main(argv: list[str]) -> int:
    if argv[:1] == ["--signal"] and len(argv) in (3, 4) and tuple(argv[3:]) in _REACH_OPTIONS:
        return send(argv[1], argv[2], _REACH_OPTIONS[tuple(argv[3:])])
    restarts, watches = 0, list[Callable[[], _Watch]]()
    while argv[:1] in (["--restarts"], ["--needs-registered"], ["--restarts-with"]):
        if len(argv) < 2 or (argv[0] == "--restarts" and not argv[1].isdigit()):
            break
        option, value, argv = argv[0], argv[1], argv[2:]
        if option == "--restarts":
            restarts = int(value)
        elif option == "--needs-registered":
            watches.append(functools.partial(_Registration, value))
        else:
            watches.append(functools.partial(_PeerStart, value))
    if len(argv) < 3 or argv[1] != "--":
        print(
            "usage: supervise.py [--restarts N] [--needs-registered URL] [--restarts-with URL]..."
            " SERVICE -- COMMAND...",
            file=sys.stderr,
        )
        return 2
    return _Supervisor(argv[0], argv[2:], restarts, watches).run()


class _Supervisor:
    def __init__(
        self,
        service: str,
        command: list[str],
        restarts: int,
        watches: Sequence[Callable[[], _Watch]] = (),
    ) -> None:
        self.service, self.command, self.restarts = service, command, restarts
        self.watches = watches  # fresh ones for each run of the command
        self.asked: list[int] = []
        self.child: subprocess.Popen[bytes] | None = None

    def forward(self, signum: int, _: FrameType | None) -> None:
        self.asked.append(signum)
        if self.child is not None:
            self.child.send_signal(signum)

    def run(self) -> int:
        # Handled before the command starts, so the command gets them at their default: one
        # ignored where the supervisor started (a background shell ignores SIGINT) would stay
        # ignored in the command (exec keeps an ignored signal ignored), and no trap there helps.
        for signum in _FORWARDED:
            signal.signal(signum, self.forward)
        done, wait_s = 0, _FIRST_WAIT_S
        while True:
            started = time.monotonic()
            returncode = self._run_once()
            asked = bool(self.asked)
            said = describe(self.service, returncode, asked_to_stop=asked)
            print(said, file=sys.stderr, flush=True)
            code = exit_code(returncode, asked_to_stop=asked)
            if asked or done >= self.restarts:
                if done and not asked:
                    self._say(f"gave up after {done} restart(s)")
                return code
            wait_s = _FIRST_WAIT_S if time.monotonic() - started >= _RAN_WELL_S else wait_s
            done += 1
            self._say(f"{_RESTARTING}{done} of {self.restarts}) in {wait_s:g} s")
            _write_count(done, said.removeprefix(LINE_PREFIX))
            if not self._sleep(wait_s):
                return 128 + self.asked[-1]
            wait_s = min(wait_s * 2, _LONGEST_WAIT_S)

    def _say(self, what: str) -> None:
        print(f"{LINE_PREFIX}{self.service} {what}", file=sys.stderr, flush=True)

    def _run_once(self) -> int:
        # A session of its own: whatever the command starts stays in its group, and goes
        # with it (_end_leftovers).
        child = self.child = subprocess.Popen(self.command, start_new_session=True)
        if self.asked:  # asked to stop while the command was starting
            child.send_signal(self.asked[-1])
        pid_file(self.service).write_text(str(child.pid), encoding="ascii")
        done = threading.Event()
        if self.watches:
            watches = [new() for new in self.watches]
            watcher = threading.Thread(target=self._watch, args=(child, done, watches))
            watcher.daemon = True
            watcher.start()
        returncode = child.wait()
        done.set()
        _end_leftovers(child.pid)
        self.child = None
        return returncode

    def _watch(
        self, child: subprocess.Popen[bytes], done: threading.Event, watches: list[_Watch]
    ) -> None:
        """Ends ``child`` as a crash once a watch says why it must start again."""
        while not done.wait(_WATCH_EVERY_S):
            if (reason := next(filter(None, (watch.look() for watch in watches)), None)) is None:
                continue
            self._say(f"{reason}: ending it")
            _end(child)
            return

    def _sleep(self, seconds: float) -> bool:
        """False when asked to stop meanwhile."""
        deadline = time.monotonic() + seconds
        while not self.asked and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, 0.1))
        return not self.asked


def registered_at(url: str) -> bool | None:
    """Whether the LMCache server's /status at ``url`` lists any engine (None: no answer)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            status = json.loads(answer.read(_STATUS_MAX_BYTES))
    except (OSError, ValueError):
        return None
    keys = ("registered_gpu_ids", "registered_non_cuda_instance_ids")
    return any(status.get(key) for key in keys) if isinstance(status, dict) else None


class _Watch(Protocol):
    def look(self) -> str | None:
        """Why the command must start again (None: no reason yet)."""
        ...


class _Registration:
    """Two answers in a row without the engine registered, after it was seen registered (a
    store that does not answer may be restarting: wait)."""

    def __init__(self, url: str) -> None:
        self.url, self.seen, self.misses = url, False, 0

    def look(self) -> str | None:
        registered = registered_at(self.url)
        if registered:
            self.seen, self.misses = True, 0
        elif registered is not None and self.seen:
            self.misses += 1
        if self.misses < _WATCH_MISSES:
            return None
        return f"lost its registration at {self.url} (the store restarted)"


class _PeerStart:
    """The peer's process started after the one first seen (a peer that does not answer may be
    restarting: wait for its new start)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.first: float | None = None

    def look(self) -> str | None:
        started = started_at(self.url)
        if started is None:
            return None
        if self.first is None:
            self.first = started
        if started <= self.first + _SAME_START_S:
            return None
        return f"saw its peer at {self.url} restart (what it keeps of that peer is stale)"


def started_at(url: str) -> float | None:
    """``process_start_time_seconds`` of the Prometheus page at ``url`` (None: no answer)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return start_time(answer.read(_STATUS_MAX_BYTES).decode("utf-8", "replace"))
    except OSError:
        return None


def start_time(page: str) -> float | None:
    for line in page.splitlines():
        name, _, value = line.partition(" ")
        if name == "process_start_time_seconds":
            with contextlib.suppress(ValueError, IndexError):
                return float(value.split()[0])
    return None


def _end(child: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 30 s: not a stop the runtime asked for, so it counts as a
    crash (exit code 1 or the signal's) and the policy restarts the service."""
    with contextlib.suppress(ProcessLookupError):
        child.terminate()
    try:
        child.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            child.kill()


def _end_leftovers(group: int) -> None:
    """What the command started and left running when it ended: a killed vLLM API server
    leaves its engine core behind, holding its NIXL port (the next start then fails on
    "Address already in use") and, on a GPU, its memory. In a container the runtime ends them
    with the container; processes have only this."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGKILL)


def _write_count(done: int, why: str) -> None:
    """The restarts so far and why the last run ended, for the process runtime's `status`
    (a busy service's log soon buries the line)."""
    target = os.environ.get("XPYD_RESTARTS_FILE")
    if target:
        Path(target).write_text(f"{done}\n{why}\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
