"""One writer per stack: `up`, `down` and `bench` of a stack hold its lock for as long as they
change it, so two of them never start the same services twice or stop what the other is
starting. A second one is refused at once with who holds it ("stack cpu-1p1d is being changed
by PID 4242 (up cpu-1p1d) since 18:52:03"), rather than waiting behind an `up` that may take
minutes.

The lock is ``flock`` on ``.cache/locks/<stack>.lock``: the kernel releases it when its holder
ends, however it ends, so no stale lock is ever left to clear by hand. The file also says who
holds it (read back bounded, for the message only: the lock itself is the kernel's). Within
one process the same stack may be taken again (`bench` brings its stack up): the inner hold is
a no-op.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from generator.errors import XpydError
from generator.owned import owned_dir, read_bounded

__all__ = ["LOCKS_DIR", "holding"]

LOCKS_DIR = PurePosixPath(".cache/locks")
_HOLDER_MAX_BYTES = 4096
_held: dict[str, int] = {}  # stacks this process holds: their lock's descriptor


@contextlib.contextmanager
def holding(root: Path, stack: str, doing: str) -> Iterator[None]:
    """Hold ``stack``'s lock (in the workspace ``root``) while the block runs; ``doing`` says
    what for (shown to whoever is refused)."""
    if stack in _held:
        yield
        return
    path = owned_dir(root, LOCKS_DIR) / f"{stack}.lock"
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        descriptor = os.open(path, flags, 0o644)
    except OSError as exc:
        raise XpydError(
            f"cannot open the lock of stack {stack} ({path}): {exc.strerror}",
            hint=f"move {path} away if it is a link or not a file",
        ) from exc
    try:
        _take(descriptor, path, stack)
        _say_who(descriptor, doing)
        _held[stack] = descriptor
        try:
            yield
        finally:
            del _held[stack]
    finally:
        os.close(descriptor)  # releases the lock


def _take(descriptor: int, path: Path, stack: str) -> None:
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise
        raise XpydError(
            f"stack {stack} is being changed by {_holder(path)}",
            hint="wait for it to end (or stop it: Ctrl+C in its shell), then run this again",
        ) from exc


def _say_who(descriptor: int, doing: str) -> None:
    holder = {"pid": os.getpid(), "doing": doing[:200], "since": time.strftime("%H:%M:%S")}
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, json.dumps(holder).encode(), 0)


def _holder(path: Path) -> str:
    """Who holds the lock, as its file says (for the message; "another process" if unclear)."""
    with contextlib.suppress(ValueError, TypeError, KeyError, RecursionError):
        holder = json.loads(read_bounded(path, max_bytes=_HOLDER_MAX_BYTES) or "")
        doing, since = _printable(holder["doing"]), _printable(holder["since"])
        return f"PID {int(holder['pid'])} ({doing}) since {since}"
    return "another process"


def _printable(value: object) -> str:
    return "".join(c for c in str(value)[:200] if c.isprintable())
