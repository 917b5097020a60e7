"""Runs one service's command so that its runtime's restart policy sees every exit it should.

    python3 /opt/xpyd/supervise.py SERVICE -- COMMAND...
    python3 generator/supervise.py --restarts N SERVICE -- COMMAND...
    python3 /opt/xpyd/supervise.py --needs-registered URL SERVICE -- COMMAND...
    python3 /opt/xpyd/supervise.py --restarts-with URL [--restarts-with URL] SERVICE -- COMMAND...
    python3 generator/supervise.py --starts-alone-on gpu-0 --started-when URL SERVICE -- COMMAND...
    python3 /opt/xpyd/supervise.py --serves-page PORT --ends-with URL SERVICE -- COMMAND...
    python3 /opt/xpyd/supervise.py --signal KILL|TERM|STOP|CONT SERVICE [--tree|--under]

A server exits only when it is asked to. vLLM's API server exits 0 when its engine core dies,
and Docker's bounded policy (``on-failure:N``) restarts only a non-zero exit; so an exit that
nobody asked for is reported as 1 (with a line that says why), and one that was asked for
(SIGTERM or SIGINT, forwarded to the command) keeps its own code. The command's exit or
signal is written on stderr, where `logs` and `status` find it. A command that cannot be
started exits 127 (126: not executable), as a shell says.

With ``--restarts N`` (the process runtime, which has no restart policy of its own) the
supervisor is the policy: it runs the command again after each exit nobody asked for, at most
N times, waiting as Docker does between tries (0.1 s, doubling, at most 30 s; back to 0.1 s
after a run of 10 s), writes the count so far and why the last run ended to
``$XPYD_RESTARTS_FILE`` where that is set, and says so on stderr; after the N-th it gives up
and exits as the command did. The command runs in a session of its own, and whatever it
leaves running when it ends (a killed vLLM API server's engine core, or a process that made
a session of its own: the supervisor is their subreaper, so they become its children) is
killed before it starts again.

With ``--needs-registered URL`` (a nixl-mp engine: its LMCache server's /status) it also
watches the engine's KV store: an engine registers its KV buffers with its `lmcache server`
once, at start, so a server that restarted answers without it (its instance id missing from
``registered_gpu_ids`` and ``registered_non_cuda_instance_ids``) and every request to the
engine hangs. Once the engine was seen registered (an id the store did not list at the
watch's first answer), two answers in a row without it make the supervisor end the command as
a crash (exit 1, with a line saying why), and the runtime's policy starts it again.

With ``--restarts-with URL`` (an lmcache-pd prefiller: each decoder's /metrics) it watches a
peer's process: a sender keeps its connection to each decoder it met and never makes a new
one, so after that decoder restarts every send to it fails. When a peer's
``process_start_time_seconds`` moves past the one first seen, the command is ended as a crash
and starts again with fresh connections.

With ``--ends-with URL`` (a GPU process that maps a peer's GPU memory over CUDA IPC on one
host: a NIXL pusher the decoders' KV blocks) it does the same, and
also ends the command once that peer, seen before, refuses connections twice in a row: the
mapping keeps the dead peer's GPU memory taken until this process exits, so the peer cannot
start again before it does (measured on an H200: 41.87 of 139.8 GiB free at each restart).
A page that is slow to answer is no reason (vLLM binds its port before its engine starts but
listens only once it serves: a restarting engine refuses too). While the process runtime's
``down`` stops the stack (``STOPPING_FILE`` beside the PID record), a peer gone is no reason:
its services stop one after another, and the peer may go first. A NIXL push decoder ends with
its prefillers the same way: it keeps each one's agent and never replaces it.

With ``--starts-alone-on NAME`` (an engine that shares a GPU with others: NAME is the GPU) and
``--started-when URL`` (its own /health) each run of the command, restarts included, starts
only while no other engine of that name is starting: it takes a lock file named after it, in
``$XPYD_LOCK_DIR`` (else beside its PID record), before the command starts and lets it go once
the page answers 200, once the command has ended, or after an hour. vLLM sizes its KV cache
from the GPU memory it sees used while it profiles, so a neighbour loading meanwhile is counted
as its own (measured on an H100: a prefiller restarted while the decoder it had followed was
profiling found "No available memory for the cache blocks"). `up` starts such engines one after
another; this is the same order for the restarts that no workflow sees. Several names are taken
in sorted order, so two engines never wait on each other.

With ``--started-when URL`` (its own /health; alone or with ``--starts-alone-on``) each run
watches its peers (``--restarts-with``, ``--ends-with``) only once it serves: before, it has
met no peer, so a peer that ends or starts anew meanwhile leaves nothing stale. Measured on an
H100: a prefiller restarted at once after a kill saw its decoder, which ended with the killed
prefiller a second later, go, and ended itself; the pair started once more, 45 s later.

With ``--serves-page PORT`` (each node of an engine over several hosts) it answers on that
port, on every interface, for its command: ``/health`` 200 while a run of it lives (503
between runs), ``/metrics`` with that run's ``process_start_time_seconds``. A headless vLLM
node serves no page of its own, and a node whose peer died stays up without noticing (an idle
leader kept answering /health 200 after its follower's SIGKILL; a follower outlived its
leader: docs/facts.md). The engine's other nodes watch this page (``--ends-with``): a newer
start or a page gone ends them too, and the group starts again together. The page says when
the command started, not when vLLM serves: a leader waiting for its followers at the
rendezvous has no page of vLLM's to watch yet.

The last form is how `bench --fault` hurts a service from inside its container (`docker
exec`), or beside its process (the process runtime names the PID record, ``$XPYD_PID_FILE``):
it signals the supervised command (``--tree``: and every process under it, so that a
stopped engine stops whole; ``--under``: only the processes under it, so that a vLLM engine's
core stops while its API server still answers /health, as a wedged engine does), never the
supervisor, so the runtime sees a crash and not a stop it was asked for (`docker kill` counts
as asked: Docker would not restart it). A PID is signalled only when it is proven to be the
supervised command, by more than its number: the record holds the command's start time (as
/proc gives it, in clock ticks), and the process must still start then, lead its own session
and be the child of the supervisor that wrote the record (itself still alive, with its
recorded start). Processes under it are reached through their parents; each is pinned with a
pidfd before it is checked, so a PID reused meanwhile is never hit. PIDs 0 and 1 and negative
ones are never signalled. A signal that reached nothing exits 1.

Standard library only: it runs in every image (engines, LMCache servers, the router) and in
the process runtime's Pythons.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import functools
import http.server
import json
import math
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType
from typing import Literal, Protocol

__all__ = [
    "IN_IMAGE",
    "LINE_PREFIX",
    "LOCK_DIR_ENV",
    "PID_FILE_ENV",
    "SIGNALS",
    "SOURCE",
    "STOPPING_FILE",
    "PidRecord",
    "Reach",
    "alone_options",
    "exit_code",
    "last_said",
    "main",
    "page_options",
    "pid_file",
    "send",
    "watch_options",
]

LINE_PREFIX = "xpyd: "  # its lines on stderr, which `status` looks for
SOURCE = "generator/supervise.py"  # copied into every image (images/templates)
IN_IMAGE = "/opt/xpyd/supervise.py"
PID_FILE_ENV = "XPYD_PID_FILE"
# Where the start locks of shared GPUs live (every stack of the host: a GPU is the host's);
# unset: beside the PID record.
LOCK_DIR_ENV = "XPYD_LOCK_DIR"
STOPPING_FILE = "stopping"  # in the PID record's folder, while `down` stops the stack
SIGNALS = ("KILL", "TERM", "STOP", "CONT")  # what a fault sends
_FORWARDED = (signal.SIGTERM, signal.SIGINT)
UNASKED_EXIT = 1
_FIRST_WAIT_S, _LONGEST_WAIT_S, _RAN_WELL_S = 0.1, 30.0, 10.0
_MAX_RESTARTS = 1000
# How often the watches look (XPYD_WATCH_EVERY_S: tests), within bounds (0 would spin a core),
# and how many answers without the engine in a row end it.
_WATCH_EVERY_S, _WATCH_EVERY_BOUNDS_S = 5.0, (0.05, 3600.0)
_WATCH_MISSES = 2
_MANY_IDS = 4096  # engines a store may list (bounded: the answer is read like input)
_STATUS_MAX_BYTES = 4 << 20  # a /status larger than this is not one to trust: unparsable
_RECORD_MAX_BYTES = 4096
_RESTARTING = "restarting ("  # its announcement of the next run: "SERVICE restarting (1 of 5)"
# A service's name, as compose allows one: never a path.
_SERVICE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
_PID_MAX = 1 << 22  # Linux's PID_MAX_LIMIT
# --signal's reach: the command alone, with every process under it, or only those under it.
Reach = Literal["command", "tree", "under"]
_SAME_START_S = 1.0  # a process's start time, as its page gives it, is rounded
_LEFTOVERS_WAIT_S = 5.0
_PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
# A start that holds a GPU to itself lets it go at the latest after this long (a start that
# hangs must not keep its neighbours from ever starting again); how often it looks meanwhile.
_START_ALONE_LIMIT_S, _START_ALONE_LOOK_S = 3600.0, 0.5
_HOLDER_MAX_BYTES = 128  # the lock file names the service that holds it


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


def _say(text: str) -> None:
    print(f"{LINE_PREFIX}{text}", file=sys.stderr, flush=True)


# --- which processes are ours --------------------------------------------------------------


@dataclass(frozen=True)
class _Stat:
    state: str
    parent: int
    session: int
    start: int  # clock ticks after boot: with the pid, names one process for good


def _stat(pid: int) -> _Stat | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    after = text.rpartition(")")[2].split()  # the command's name may hold spaces and ')'
    try:
        return _Stat(after[0], int(after[1]), int(after[3]), int(after[19]))
    except (IndexError, ValueError):
        return None


def _children(pid: int) -> list[int]:
    """Children of every thread of ``pid`` (a thread that forks is the child's parent)."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError, ValueError):
                text = Path(f"/proc/{pid}/task/{task}/children").read_text(encoding="ascii")
                found += [int(child) for child in text.split()]
    return found


@dataclass(frozen=True)
class PidRecord:
    """What the supervisor writes of its running command: enough to prove later that a PID is
    still that command and ours (see the module's docstring)."""

    service: str
    pid: int
    start: int
    supervisor: int
    supervisor_start: int

    def text(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def parse(cls, text: str) -> PidRecord:
        """ValueError unless ``text`` is a record this supervisor wrote."""
        data = json.loads(text)
        names = ("service", "pid", "start", "supervisor", "supervisor_start")
        if not isinstance(data, dict) or sorted(data) != sorted(names):
            raise ValueError("it is not a PID record of this supervisor")
        numbers = [data[name] for name in names[1:]]
        if any(type(number) is not int or number < 0 for number in numbers):
            raise ValueError("its numbers are not counts")
        if not isinstance(data["service"], str) or not _SERVICE.fullmatch(data["service"]):
            raise ValueError("it names no service")
        if not all(1 < pid <= _PID_MAX for pid in (data["pid"], data["supervisor"])):
            raise ValueError("it names a PID no supervised command can have")
        return cls(data["service"], *numbers)

    def why_not_running(self) -> str | None:
        """None when the PID is still this record's command; else why it is not."""
        command, supervisor = _stat(self.pid), _stat(self.supervisor)
        if command is None or command.state in ("Z", "X"):
            return "has ended"
        problems = {
            "is another process now (it started at another time)": command.start != self.start,
            "leads no session of its own": command.session != self.pid,
            "has no living supervisor": supervisor is None
            or supervisor.start != self.supervisor_start,
            "is not its supervisor's child": command.parent != self.supervisor,
        }
        found = next((problem for problem, seen in problems.items() if seen), None)
        if found is None and not _supervises(self.supervisor, self.service):
            found = "has a parent that is no supervisor of it"
        return found


def _supervises(pid: int, service: str) -> bool:
    """Whether ``pid`` runs this script for ``service`` (its command line says so)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            arguments = file.read(1 << 20).split(b"\0")
    except OSError:
        return False
    script = Path(SOURCE).name.encode()
    named = any(os.path.basename(argument) == script for argument in arguments[:3])
    return named and service.encode() in arguments


def pid_file(service: str) -> Path:
    """Where the supervisor of ``service`` writes its command's record: ``$XPYD_PID_FILE``
    where the runtime names one (processes: two stacks on one machine may both have a
    decode-0), else the temporary folder (one per container)."""
    named = os.environ.get(PID_FILE_ENV)
    return Path(named) if named else Path(tempfile.gettempdir()) / f"xpyd-supervised-{service}.pid"


def _read_record(path: Path) -> PidRecord | None:
    """The record at ``path`` (None: none). ValueError: unreadable or not a record; never
    through a link, never blocking on a FIFO, never more than a record's size."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        descriptor = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ValueError(f"{path} cannot be read ({exc.strerror})") from exc
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise ValueError(f"{path} is not a regular file")
    with os.fdopen(descriptor, "rb") as handle:
        data = handle.read(_RECORD_MAX_BYTES + 1)
    if len(data) > _RECORD_MAX_BYTES:
        raise ValueError(f"{path} is larger than a PID record")
    try:
        return PidRecord.parse(data.decode("utf-8"))
    except (UnicodeDecodeError, RecursionError, ValueError) as exc:
        raise ValueError(f"{path} holds no PID record ({exc})") from exc


def _replace(path: Path, text: str) -> None:
    """``text`` as the whole of ``path``: a fresh file renamed over it (a link there is
    replaced, never written through)."""
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


# --- signals, only to what is proven ours ------------------------------------------------


def _deliver(pidfd: int | None, pid: int, signum: int) -> None:
    """The one place a signal leaves this module (tests record calls here)."""
    if pid <= 1:
        raise ValueError(f"refusing to signal PID {pid}")
    if pidfd is None:
        os.kill(pid, signum)
    else:
        signal.pidfd_send_signal(pidfd, signum)


@contextlib.contextmanager
def _pinned(pid: int) -> Iterator[int | None]:
    """A pidfd on ``pid``: whatever is checked about the process after this names the same
    one the signal reaches (None where the kernel has no pidfds: checked, then signalled)."""
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except ProcessLookupError:
        raise
    except (AttributeError, OSError):
        pidfd = None
    try:
        yield pidfd
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _signal_under(root: int, signum: int) -> list[int]:
    """Signals every process under ``root`` (parents before children), each checked to be
    the child of one already reached once pinned; the PIDs reached."""
    reached, parents = [], [root]
    while parents:
        parent = parents.pop(0)
        for child in _children(parent):
            with contextlib.suppress(ProcessLookupError), _pinned(child) as pidfd:
                found = _stat(child)
                if child <= 1 or found is None or found.parent != parent:
                    continue
                _deliver(pidfd, child, signum)
                reached.append(child)
                parents.append(child)
    return reached


def send(signame: str, service: str, reach: Reach = "command") -> int:
    signum = signal.Signals[f"SIG{signame}"]
    try:
        record = _read_record(pid_file(service))
    except ValueError as exc:
        _say(f"no supervised {service} here: {exc}")
        return 1
    if record is None or record.service != service:
        _say(f"no supervised {service} here")
        return 1
    try:
        with _pinned(record.pid) as pidfd:
            why = record.why_not_running()
            if why is not None:
                _say(f"{service} is not running here: pid {record.pid} {why}")
                return 1
            reached = [] if reach == "under" else [record.pid]
            if reach != "under":
                _deliver(pidfd, record.pid, signum)
            if reach != "command":
                reached += _signal_under(record.pid, signum)
    except ProcessLookupError:
        _say(f"{service} is not running here: pid {record.pid} has ended")
        return 1
    if not reached:
        _say(f"{service} runs no process under its command")
        return 1
    for pid in reached:
        print(f"{LINE_PREFIX}sent {signum.name} to {service} (pid {pid})", flush=True)
    return 0


# --- arguments -------------------------------------------------------------------------------

_USAGE = """\
supervise.py [--restarts N] [--needs-registered URL] [--restarts-with URL]... [--ends-with URL]...
                    [--starts-alone-on NAME...] [--started-when URL] SERVICE -- COMMAND...
       supervise.py --signal KILL|TERM|STOP|CONT SERVICE [--tree|--under]"""


def _parser(signal_mode: bool) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="supervise.py", usage=_USAGE, add_help=False)
    parser.add_argument("service", type=_service_name)
    if signal_mode:
        parser.add_argument("--signal", required=True, type=str.upper, choices=SIGNALS)
        reach = parser.add_mutually_exclusive_group()
        reach.add_argument("--tree", dest="reach", action="store_const", const="tree")
        reach.add_argument("--under", dest="reach", action="store_const", const="under")
        parser.set_defaults(reach="command")
    else:
        parser.add_argument("--restarts", type=_restart_count, default=0)
        parser.add_argument("--needs-registered", type=_url)
        parser.add_argument("--restarts-with", type=_url, action="append", default=[])
        parser.add_argument("--ends-with", type=_url, action="append", default=[])
        parser.add_argument("--starts-alone-on", type=_service_name, action="append", default=[])
        parser.add_argument("--started-when", type=_url)
        parser.add_argument("--serves-page", type=_page_port)
    return parser


def _service_name(text: str) -> str:
    if not _SERVICE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is no service name (letters, digits, _.-)")
    return text


def _page_port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (1-65535)")
    return int(text)


def _restart_count(text: str) -> int:
    if not text.isascii() or not text.isdigit() or int(text) > _MAX_RESTARTS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count from 0 to {_MAX_RESTARTS}")
    return int(text)


def _url(text: str) -> str:
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"{text!r} is not an http(s) URL")
    return text


def _watch_every_s() -> float:
    """XPYD_WATCH_EVERY_S, or the default; SystemExit(2) when it is out of bounds."""
    text = os.environ.get("XPYD_WATCH_EVERY_S")
    if text is None:
        return _WATCH_EVERY_S
    low, high = _WATCH_EVERY_BOUNDS_S
    with contextlib.suppress(ValueError):
        if low <= (value := float(text)) <= high:
            return value
    bounds = f"give seconds from {low:g} to {high:g}"
    print(f"supervise.py: XPYD_WATCH_EVERY_S={text!r}: {bounds}", file=sys.stderr)
    raise SystemExit(2)


def watch_options(
    registered_at: str | None, restarts_with: Sequence[str], ends_with: Sequence[str] = ()
) -> list[str]:
    """A service's watches as this supervisor's options (both runtimes pass them)."""
    registration = ["--needs-registered", registered_at] if registered_at else []
    peers = [part for url in restarts_with for part in ("--restarts-with", url)]
    return registration + peers + [part for url in ends_with for part in ("--ends-with", url)]


def page_options(port: int | None) -> list[str]:
    """The supervisor's own page of its command's start (``--serves-page``), as its options."""
    return [] if port is None else ["--serves-page", str(port)]


def alone_options(gpus: Sequence[int], started_when: str | None) -> list[str]:
    """Starting only while no other engine starts on ``gpus`` (until ``started_when``
    answers), and watching peers only once ``started_when`` answers, as this supervisor's
    options (both runtimes pass them)."""
    if started_when is None:
        return []
    names = [part for gpu in gpus for part in ("--starts-alone-on", f"gpu-{gpu}")]
    return [*names, "--started-when", started_when]


def in_image_command(service: str, command: Sequence[str], watch: Sequence[str]) -> list[str]:
    """``command`` under this supervisor, as an image runs it (compose, Kubernetes): restarts
    are the container runtime's, the watches (``watch_options``) its own."""
    return ["python3", IN_IMAGE, *watch, service, "--", *command]


def main(argv: list[str]) -> int:
    """Exit codes: the command's (see above); 1: a signal reached nothing; 2: a usage error,
    or a PID record that cannot be written (nothing is left running)."""
    if "--" not in argv:
        options = _parser(signal_mode=True).parse_args(argv)
        return send(options.signal, options.service, options.reach)
    split = argv.index("--")
    parser = _parser(signal_mode=False)
    options, command = parser.parse_args(argv[:split]), argv[split + 1 :]
    if not command:
        parser.error("give the command to run after --")
    watches: list[Callable[[], _Watch]] = []
    if options.needs_registered:
        watches.append(functools.partial(_Registration, options.needs_registered))
    watches += [functools.partial(_PeerStart, url) for url in options.restarts_with]
    watches += [functools.partial(_PeerGone, url) for url in options.ends_with]
    if options.starts_alone_on and not options.started_when:
        parser.error("--starts-alone-on needs --started-when (the page that says it serves)")
    supervisor = _Supervisor(options.service, command, options.restarts, watches)
    supervisor.started_when = options.started_when
    if options.starts_alone_on:
        supervisor.alone = _StartAlone(
            options.service, options.starts_alone_on, options.started_when
        )
    supervisor.watch_every_s = _watch_every_s()
    if options.serves_page is not None:
        try:
            _serve_page(supervisor, options.serves_page)
        except OSError as exc:
            _say(f"{options.service}: cannot serve its page on port {options.serves_page}: {exc}")
            return 2
    return supervisor.run()


def _serve_page(supervisor: _Supervisor, port: int) -> None:
    """Answers for the supervised command on ``port`` from a daemon thread (``--serves-page``)."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            started = supervisor.run_started
            pages = {"/health": "ok\n", "/metrics": f"process_start_time_seconds {started}\n"}
            body = pages.get(self.path)
            code = 404 if body is None else 503 if started is None else 200
            data = (body if body is not None and code == 200 else f"{code}\n").encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            return  # a request a second from each peer's watch: not for the service's log

    server = http.server.ThreadingHTTPServer(("0.0.0.0", port), Page)  # peers ask from their hosts
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()


# --- the supervisor ----------------------------------------------------------------------


class _RecordUnwritable(Exception):
    pass


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
        self.watch_every_s = _WATCH_EVERY_S
        self.asked: list[int] = []
        self.child: subprocess.Popen[bytes] | None = None
        self.record_path = pid_file(service)
        self.alone: _StartAlone | None = None  # the GPUs it starts on while no other engine does
        self.started_when: str | None = None  # its own page: 200 once a run serves
        self.held: _Held | None = None  # what this run holds of them
        self.run_started: float | None = None  # the running command's start (--serves-page)

    def forward(self, signum: int, _: FrameType | None) -> None:
        self.asked.append(signum)
        if self.child is not None:
            self.child.send_signal(signum)

    def run(self) -> int:
        try:  # before anything starts: a record it could not write would leave it unreachable
            _replace(self.record_path, "")
        except OSError as exc:
            _say(f"{self.service}: cannot write its PID record {self.record_path}: {exc}")
            return 2
        # Handled before the command starts, so the command gets them at their default: one
        # ignored where the supervisor started (a background shell ignores SIGINT) would stay
        # ignored in the command (exec keeps an ignored signal ignored), and no trap there helps.
        for signum in _FORWARDED:
            signal.signal(signum, self.forward)
        _become_subreaper()
        try:
            return self._loop()
        except _RecordUnwritable as exc:
            _say(f"{self.service}: {exc}: stopped it")
            return 2
        finally:  # whatever went wrong, nothing it started outlives it, nor its record
            if self.child is not None:
                _end_group(self.child.pid)
                self.child.kill()
                self.child.wait()
            _end_orphans()
            if self.held is not None:
                self.held.release()
            with contextlib.suppress(OSError):
                self.record_path.unlink()

    def _loop(self) -> int:
        done, wait_s = 0, _FIRST_WAIT_S
        while True:
            if self.alone is not None:
                self.held = self.alone.take(lambda: bool(self.asked))
                if self.held is None:
                    return 128 + self.asked[-1]  # asked to stop while it waited its turn
            started = time.monotonic()
            returncode = self._run_once()
            asked = bool(self.asked)
            said = describe(self.service, returncode, asked_to_stop=asked)
            print(said, file=sys.stderr, flush=True)
            code = exit_code(returncode, asked_to_stop=asked)
            if asked or done >= self.restarts:
                if done and not asked:
                    _say(f"{self.service} gave up after {done} restart(s)")
                return code
            wait_s = _FIRST_WAIT_S if time.monotonic() - started >= _RAN_WELL_S else wait_s
            done += 1
            _say(f"{self.service} {_RESTARTING}{done} of {self.restarts}) in {wait_s:g} s")
            _write_count(done, said.removeprefix(LINE_PREFIX))
            if not self._sleep(wait_s):
                return 128 + self.asked[-1]
            wait_s = min(wait_s * 2, _LONGEST_WAIT_S)

    def _run_once(self) -> int:
        # A session of its own: whatever the command starts stays in its group, and goes
        # with it (_end_group).
        try:
            child = self.child = subprocess.Popen(self.command, start_new_session=True)
        except OSError as exc:
            _say(f"{self.service} cannot start {self.command[0]}: {exc.strerror}")
            if self.held is not None:
                self.held.release()
            return 126 if isinstance(exc, PermissionError) else 127
        if self.asked:  # asked to stop while the command was starting
            child.send_signal(self.asked[-1])
        self.run_started = time.time()
        self._write_record(child.pid)
        done = threading.Event()
        if self.alone is not None and self.held is not None:
            releasing = (self.held, done)  # a daemon: a run that never ends must not hold exit
            threading.Thread(
                target=self.alone.release_once_started, args=releasing, daemon=True
            ).start()
        if self.watches:
            watches = [new() for new in self.watches]
            watcher = threading.Thread(target=self._watch, args=(child, done, watches))
            watcher.daemon = True
            watcher.start()
        _wait_unreaped(child)  # its PID, and so its group's id, stay its own meanwhile
        done.set()
        self.run_started = None
        if self.held is not None:
            self.held.release()  # ended before it served: the next start may go
        with contextlib.suppress(OSError):
            _replace(self.record_path, "")  # names no process now
        _end_group(child.pid)
        returncode = child.wait()
        self.child = None
        _end_orphans()
        return returncode

    def _write_record(self, pid: int) -> None:
        command, own = _stat(pid), _stat(os.getpid())
        record = PidRecord(
            self.service,
            pid,
            command.start if command else 0,  # 0: it ended already, and never matches
            os.getpid(),
            own.start if own else 0,
        )
        try:
            _replace(self.record_path, record.text())
        except OSError as exc:
            raise _RecordUnwritable(f"cannot write its PID record {self.record_path}") from exc

    def _watch(
        self, child: subprocess.Popen[bytes], done: threading.Event, watches: list[_Watch]
    ) -> None:
        """Ends ``child`` as a crash once a watch says why it must start again. Where the run's
        own page is known (``--started-when``), its peers count only once it serves: before, it
        has met no peer, so a peer that ends or starts anew meanwhile leaves nothing stale (a
        pair restarting on one GPU would otherwise end each other)."""
        serves = self.started_when
        later: list[_Watch] = [w for w in watches if isinstance(w, _PeerStart) and serves]
        active = [w for w in watches if w not in later]
        while not done.wait(self.watch_every_s):
            if later and serves is not None and _serves(serves):
                active, later = active + later, []
            if (reason := next(filter(None, (watch.look() for watch in active)), None)) is None:
                continue
            _say(f"{self.service} {reason}: ending it")
            _end(child)
            return

    def _sleep(self, seconds: float) -> bool:
        """False when asked to stop meanwhile."""
        deadline = time.monotonic() + seconds
        while not self.asked and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, 0.1))
        return not self.asked


def registrations_at(url: str) -> frozenset[str] | None:
    """The engine instances the LMCache server's /status at ``url`` lists (None: no answer)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            status = json.loads(answer.read(_STATUS_MAX_BYTES))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(status, dict):
        return None
    keys = ("registered_gpu_ids", "registered_non_cuda_instance_ids")
    lists = [status.get(key) for key in keys]
    return frozenset(str(i) for ids in lists if isinstance(ids, list) for i in ids[:_MANY_IDS])


class _Watch(Protocol):
    def look(self) -> str | None:
        """Why the command must start again (None: no reason yet)."""
        ...


class _Registration:
    """Two answers in a row without this run's engine registered, after it was seen
    registered (a store that does not answer may be restarting: wait). What the store listed
    at the first answer is an earlier run's engine (this one registers seconds to minutes
    after its start): the server keeps a killed engine listed until it reaps it (LMCache's
    ``--worker-reap-timeout-seconds``), and that reap is no loss of this run's registration
    (on an H100 it ended a restarted prefiller that was about to start)."""

    def __init__(self, url: str) -> None:
        self.url, self.misses = url, 0
        self.inherited: frozenset[str] | None = None
        self.own: set[str] = set()

    def look(self) -> str | None:
        listed = registrations_at(self.url)
        if listed is None:
            return None
        if self.inherited is None:
            self.inherited = listed
        if not self.own:  # this run's engine: the first id the store lists anew
            self.own = set(listed - self.inherited)
        if not self.own or listed & self.own:
            self.misses = 0
            return None
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
        if started is None or not self.restarted(started):
            return None
        return f"saw its peer at {self.url} restart (what it keeps of that peer is stale)"

    def restarted(self, started: float) -> bool:
        """Whether ``started`` is a newer process than the first one seen (kept here)."""
        if self.first is None:
            self.first = started
        return started > self.first + _SAME_START_S


class _PeerGone(_PeerStart):
    """A new start of the peer, or the peer, seen before, refusing connections (no process
    listens: it is gone) in that many looks in a row."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.seen, self.refused = False, 0

    def look(self) -> str | None:
        try:
            started = _page_start(self.url)
        except OSError as exc:
            self.refused = self.refused + 1 if _nobody_listens(exc) else 0
            if not self.seen or self.refused < _WATCH_MISSES or _stack_stopping():
                return None
            return f"saw its peer at {self.url} gone (it holds the peer's GPU memory or its agent)"
        self.seen, self.refused = True, 0
        if started is None or not self.restarted(started):
            return None
        return f"saw its peer at {self.url} restart (it holds the peer's GPU memory or its agent)"


def _stack_stopping() -> bool:
    named = os.environ.get(PID_FILE_ENV)
    return named is not None and os.path.lexists(Path(named).parent / STOPPING_FILE)


def _nobody_listens(exc: OSError) -> bool:
    """Refused, or (a container that is gone, on a compose network) a name nobody answers."""
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    return isinstance(reason, (ConnectionRefusedError, socket.gaierror))


def started_at(url: str) -> float | None:
    """``process_start_time_seconds`` of the Prometheus page at ``url`` (None: no answer)."""
    try:
        return _page_start(url)
    except OSError:
        return None


def _page_start(url: str) -> float | None:
    """OSError: no answer (a page without a start time is None)."""
    with urllib.request.urlopen(url, timeout=5) as answer:
        return start_time(answer.read(_STATUS_MAX_BYTES).decode("utf-8", "replace"))


def start_time(page: str) -> float | None:
    """The page's start time; None where it has none that is a moment (nan, inf: a broken
    page would otherwise look like a restart at every look)."""
    for line in page.splitlines():
        name, _, value = line.partition(" ")
        if name == "process_start_time_seconds":
            with contextlib.suppress(ValueError, IndexError):
                started = float(value.split()[0])
                return started if math.isfinite(started) else None
    return None


# --- one start at a time on a shared GPU -------------------------------------------------


class _StartAlone:
    """The lock files of the GPUs an engine shares (``start-alone-NAME.lock`` in
    ``$XPYD_LOCK_DIR``, else beside its PID record), held from before each run of its command
    until the run serves ``started_when`` (or ended, or the limit passed). flock: the kernel
    lets a lock go with the process that held it, so a supervisor killed while it held one
    blocks nobody."""

    def __init__(self, service: str, names: Sequence[str], started_when: str) -> None:
        self.service, self.started_when = service, started_when
        named = os.environ.get(LOCK_DIR_ENV)
        folder = Path(named) if named else pid_file(service).parent
        self.locks = [(name, folder / f"start-alone-{name}.lock") for name in sorted(set(names))]

    def take(self, asked_to_stop: Callable[[], bool]) -> _Held | None:
        """Every lock, in sorted order (two engines never hold one each and wait for the
        other's); None when asked to stop meanwhile (nothing held then)."""
        held = _Held()
        for name, path in self.locks:
            descriptor = _open_lock(path)
            said = False
            while not _try_lock(descriptor):
                if asked_to_stop():
                    os.close(descriptor)
                    held.release()
                    return None
                if not said:
                    holder = _holder(descriptor) or "another engine"
                    _say(f"{self.service} waits to start: {holder} is starting on {name}")
                    said = True
                time.sleep(_START_ALONE_LOOK_S)
            _name_holder(descriptor, self.service)
            held.descriptors.append(descriptor)
        return held

    def release_once_started(self, held: _Held, ended: threading.Event) -> None:
        """Lets ``held`` go once the run serves its page, once it ended, or after the limit."""
        deadline = time.monotonic() + _START_ALONE_LIMIT_S
        while not ended.wait(_START_ALONE_LOOK_S):
            if _serves(self.started_when):
                break
            if time.monotonic() > deadline:
                _say(f"{self.service} not serving {self.started_when} yet: lets the GPU go")
                break
        held.release()


class _Held:
    """The locks one run of the command holds; let go once, by whoever is first."""

    def __init__(self) -> None:
        self.descriptors: list[int] = []
        self.guard = threading.Lock()

    def release(self) -> None:
        with self.guard:
            descriptors, self.descriptors = self.descriptors, []
        for descriptor in descriptors:
            with contextlib.suppress(OSError):
                os.ftruncate(descriptor, 0)
            os.close(descriptor)  # closing lets the flock go


def _open_lock(path: Path) -> int:
    """The lock file, made if need be; never through a link, never a FIFO or a device.
    _RecordUnwritable where it cannot be (beside the PID record, which it could write)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        descriptor = os.open(path, flags, 0o600)
    except OSError as exc:
        raise _RecordUnwritable(f"cannot open its start lock {path} ({exc.strerror})") from exc
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise _RecordUnwritable(f"its start lock {path} is not a regular file")
    return descriptor


def _try_lock(descriptor: int) -> bool:
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _holder(descriptor: int) -> str | None:
    """The service the lock file names (read like input: bounded, a service name or None)."""
    with contextlib.suppress(OSError, UnicodeDecodeError):
        name = os.pread(descriptor, _HOLDER_MAX_BYTES, 0).decode("utf-8").strip()
        if _SERVICE.fullmatch(name):
            return name
    return None


def _name_holder(descriptor: int, service: str) -> None:
    with contextlib.suppress(OSError):  # the name is for messages only
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{service}\n".encode(), 0)


def _serves(url: str) -> bool:
    """Whether ``url`` answers 200 within 2 s."""
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return bool(answer.status == 200)
    except (OSError, ValueError):
        return False


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


def _wait_unreaped(child: subprocess.Popen[bytes]) -> None:
    """Until ``child`` ended, leaving it unreaped (a zombie keeps its PID from reuse)."""
    with contextlib.suppress(ChildProcessError):
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)


def _become_subreaper() -> None:
    """Orphans of the command (a process that made a session of its own, then lost its
    parent) become this supervisor's children rather than init's: still reachable, so
    _end_orphans ends them too."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _end_group(group: int) -> None:
    """What the command started and left running when it ended: a killed vLLM API server
    leaves its engine core behind, holding its NIXL port (the next start then fails on
    "Address already in use") and, on a GPU, its memory. In a container the runtime ends them
    with the container; processes have only this. Called while the command's process is
    unreaped, so the group's id is still its own."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGKILL)


def _end_orphans() -> None:
    """Every child this supervisor has once its command is reaped: processes of the command
    that left its group and lost their parent, which came to this subreaper (ours by birth;
    an unreaped child keeps its PID), each with what runs under it, until none is left
    (bounded)."""
    deadline = time.monotonic() + _LEFTOVERS_WAIT_S
    while (orphans := _children(os.getpid())) and time.monotonic() < deadline:
        for orphan in orphans:
            _signal_under(orphan, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                _deliver(None, orphan, signal.SIGKILL)
        time.sleep(0.05)
        for orphan in orphans:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(orphan, os.WNOHANG)


def _write_count(done: int, why: str) -> None:
    """The restarts so far and why the last run ended, for the process runtime's `status`
    (a busy service's log soon buries the line)."""
    target = os.environ.get("XPYD_RESTARTS_FILE")
    if target:
        with contextlib.suppress(OSError):
            _replace(Path(target), f"{done}\n{why}\n")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
