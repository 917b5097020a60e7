"""Process mode: run a command in what one container of the stack would see, without Docker.

The GPU test host has no Docker, yet the KV path depends on exactly what each engine's
container sees (docs/facts.md, "KV transfer between GPUs of one host"): a container in its own PID
namespace, or one that sees only its own /dev/nvidiaN, makes UCX fall back to TCP silently.
``view_command`` builds a util-linux ``unshare`` command line that reproduces that view:

- a new mount namespace whose /dev is a fresh tmpfs holding only the listed /dev/nvidiaN, the
  NVIDIA control nodes (nvidiactl and nvidia-uvm; nvidia-uvm-tools and nvidia-modeset where the
  host has them), null, zero, full, random, urandom, tty, the host's /dev/shm and /dev/pts, and
  /dev/infiniband when asked; then remounted read-only, because on a writable /dev the CUDA
  driver (running as root) re-creates the nodes it misses and nothing stays hidden;
- /proc/driver/nvidia/gpus showing only the listed GPUs' folders (as the NVIDIA container
  toolkit does), on a tmpfs that is read-only too;
- a private PID namespace (``--pid --fork --mount-proc``) unless the service has ``pid: host``.

Device nodes are bind-mounted from the host rather than made with mknod: a bind carries the
exact node (type, major/minor, owner, mode) with no numbers to get wrong, works the same for
the /dev/shm, /dev/pts and /dev/infiniband directories, and leaves one way of doing things.

GPUs are named by device minor, the N of /dev/nvidiaN, and matched to their
/proc/driver/nvidia/gpus/<PCI bus id> folders by the "Device Minor:" line of each folder's
``information`` file. That file comes from the driver itself (no nvidia-smi needed), is read
inside the view when it is built, and links exactly the two things the view mounts. The NVIDIA
container toolkit's ``device_ids`` are nvidia-smi indices, which equal the minors on ordinary
hosts; where they differ, ``nvidia-smi -q`` shows each GPU's "Minor Number".

The generated script is plain POSIX sh, receives the command as its arguments (never pasted
into the script) and ends with ``exec``, so the command's exit status is the view's; a view that
cannot be built exits with ``VIEW_FAILED`` (125, as ``docker run`` does) and says why on stderr.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from generator.errors import XpydError

__all__ = [
    "VIEW_FAILED",
    "ContainerView",
    "PidNamespace",
    "run_in_view",
    "view_command",
    "view_script",
]

VIEW_FAILED = 125
_REQUIRED_NODES = ("null", "zero", "full", "random", "urandom", "tty")
_GPU_NODES = ("nvidiactl", "nvidia-uvm")  # CUDA cannot start without them
_OPTIONAL_GPU_NODES = ("nvidia-uvm-tools", "nvidia-modeset")
_FD_LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0"}
_FD_LINKS |= {"stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"}
_MINOR_SED = r"s/^Device Minor:[[:space:]]*\([0-9]*\).*/\1/p"  # the driver's own minor -> bus id
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KILL_GRACE_S = 5.0


class PidNamespace(StrEnum):
    HOST = "host"  # compose `pid: host`: the host's processes are visible, as is cuda_ipc's peer
    PRIVATE = "private"  # Docker's default: the process is PID 1 of its own namespace


@dataclass(frozen=True, kw_only=True)
class ContainerView:
    """What one container sees of the host's devices and processes."""

    gpus: tuple[int, ...] = ()  # device minors: the N of each visible /dev/nvidiaN
    pid: PidNamespace = PidNamespace.PRIVATE
    environment: Mapping[str, str] = field(default_factory=dict)  # e.g. CUDA_VISIBLE_DEVICES
    infiniband: bool = False  # bind the host's /dev/infiniband (RDMA)
    dev_root: Path = Path("/dev")  # where the nodes come from; tests point it at a fake tree
    proc_root: Path = Path("/proc")  # whose driver/nvidia/gpus is filtered; the same for tests

    def __post_init__(self) -> None:
        if any(gpu < 0 for gpu in self.gpus) or len(set(self.gpus)) != len(self.gpus):
            raise ValueError(f"gpus must be distinct device minors >= 0, not {self.gpus}")
        bad = [name for name in self.environment if not _ENV_NAME.fullmatch(name)]
        if bad:
            raise ValueError(f"not environment variable names: {', '.join(bad)}")


def view_command(view: ContainerView, argv: Sequence[str]) -> list[str]:
    """``unshare ... /bin/sh -c SCRIPT xpyd-view ARGV...``: ARGV runs inside the view."""
    if not argv:
        raise ValueError("no command to run in the view")
    command = ["unshare", "--mount", "--propagation", "private"]
    if view.pid is PidNamespace.PRIVATE:
        # The forked child is the namespace's PID 1; --kill-child ends it (and so every process
        # of the namespace) when unshare itself is killed.
        command += ["--pid", "--fork", "--kill-child", "--mount-proc"]
    return [*command, "--", "/bin/sh", "-c", view_script(view), "xpyd-view", *argv]


def view_script(view: ContainerView) -> str:
    """The POSIX sh that builds the view, then runs its arguments with ``exec``."""
    lines = [*_PREAMBLE, *_dev(view)]
    if view.gpus:
        lines += _proc_gpus(view)
    lines += [f"export {name}={shlex.quote(value)}" for name, value in view.environment.items()]
    lines += ['rmdir "$stage"', "trap - EXIT", 'exec "$@"']
    return "\n".join(lines) + "\n"


# Each new tmpfs is filled in one staging directory, out of the way, then moved into place:
# its sources stay reachable until it covers them.
_PREAMBLE = (
    "set -eu",
    f'fail() {{ echo "xpyd view: $*" >&2; exit {VIEW_FAILED}; }}',
    'bind() { mount --bind "$1" "$2" || fail "cannot bind $1"; }',
    'need() { [ -e "$src/$1" ] || fail "$src/$1 does not exist${2:-}"; }',
    'node() { need "$1"; : > "$stage/$1"; bind "$src/$1" "$stage/$1"; }',
    'directory() { need "$@"; mkdir "$stage/$1"; bind "$src/$1" "$stage/$1"; }',
    'new_tmpfs() { mount -t tmpfs -o mode=755,size=1m "$1" "$stage" || fail "no tmpfs: $1"; }',
    "place_read_only() {",
    '  mount --move "$stage" "$1" || fail "cannot place the new $1"',
    '  mount -o remount,bind,ro "$1" || fail "cannot make $1 read-only"',
    "}",
    'stage=$(mktemp -d "${TMPDIR:-/tmp}/xpyd-view.XXXXXX") || fail "no staging directory"',
    'trap \'umount -l "$stage" 2>&- || :; rmdir "$stage" || :\' EXIT',
)


def _words(names: Sequence[str]) -> str:
    return " ".join(shlex.quote(name) for name in names)


def _proc_gpus(view: ContainerView) -> list[str]:
    """Bind the listed GPUs' folders, found by their Device Minor; every one must be found."""
    minors = " ".join(str(gpu) for gpu in view.gpus)
    return [
        "# /proc/driver/nvidia/gpus: the listed GPUs' folders only",
        f"gpus={shlex.quote(str(view.proc_root / 'driver/nvidia/gpus'))}",
        '[ -d "$gpus" ] || fail "$gpus does not exist: is the NVIDIA driver loaded?"',
        "new_tmpfs xpyd-gpus",
        'found=" "',
        'for folder in "$gpus"/*; do',
        '  [ -f "$folder/information" ] || continue',
        f'  minor=$(sed -n {shlex.quote(_MINOR_SED)} "$folder/information")',
        f'  case " {minors} " in *" $minor "*) ;; *) continue ;; esac',
        '  mkdir "$stage/${folder##*/}"',
        '  bind "$folder" "$stage/${folder##*/}"',
        '  found="$found$minor "',
        "done",
        f'for minor in {minors}; do case "$found" in *" $minor "*) ;; *)',
        '  fail "no GPU with Device Minor $minor under $gpus" ;; esac; done',
        'place_read_only "$gpus"',
    ]


def _dev(view: ContainerView) -> list[str]:
    """A new /dev holding the view's nodes; a missing required one fails the view."""
    lines = ["# /dev: only what the container gets", f"src={shlex.quote(str(view.dev_root))}"]
    lines += ["new_tmpfs xpyd-dev", f'for name in {_words(_REQUIRED_NODES)}; do node "$name"; done']
    if view.gpus:
        gpu_nodes = [f"nvidia{gpu}" for gpu in view.gpus] + list(_GPU_NODES)
        lines += [f'for name in {_words(gpu_nodes)}; do node "$name"; done']
        lines += [f"for name in {_words(_OPTIONAL_GPU_NODES)}; do"]
        lines += ['  if [ -e "$src/$name" ]; then node "$name"; fi; done']
    lines += ["directory shm", 'if [ -d "$src/pts" ]; then directory pts']
    lines += ['  ln -s pts/ptmx "$stage/ptmx"; fi']
    if view.infiniband:
        lines += ['directory infiniband " (no RDMA devices?)"']
    lines += [f'ln -s {target} "$stage/{name}"' for name, target in _FD_LINKS.items()]
    return [*lines, "place_read_only /dev"]


def run_in_view(
    view: ContainerView, argv: Sequence[str], *, timeout_s: float
) -> subprocess.CompletedProcess[str]:
    """Run ARGV in the view, output captured. Past ``timeout_s`` every process it started is
    killed and ``subprocess.TimeoutExpired`` raised (with what it printed). Status
    ``VIEW_FAILED`` means the view could not be built (the reason is on stderr)."""
    command = view_command(view, argv)
    try:
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # one process group: the timeout can end all of it
        )
    except FileNotFoundError as exc:
        raise XpydError(
            "process mode needs `unshare` (util-linux), which is not installed",
            hint="install util-linux, or use container mode on a host with Docker",
        ) from exc
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stdout, stderr = _kill(process)
        raise subprocess.TimeoutExpired(command, timeout_s, stdout, stderr) from None
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def _kill(process: subprocess.Popen[str]) -> tuple[str, str]:
    """SIGKILL to the whole group; what it printed, if its pipes close soon."""
    with contextlib.suppress(ProcessLookupError):  # it ended on its own meanwhile
        os.killpg(process.pid, signal.SIGKILL)
    try:
        return process.communicate(timeout=_KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        return "", ""  # a descendant left the group and holds the pipes: give up on output
