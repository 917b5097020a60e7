"""Files and folders the tool owns (state, logs, run records, environments): made, written,
replaced and removed without ever following a symbolic link, and read back bounded.

Everything below a trusted *root* (the workspace, or a folder the user named) is checked part
by part: a link or a file where a folder should be stops the write with one clear error, so a
link planted in ``.cache/`` or ``runs/`` can never send a write or a delete into its target.
The root itself may be a link: the user chose it. Files are replaced whole (written to a fresh
temporary file beside them, then renamed over them, which replaces a link rather than writing
through it); logs are appended to with ``O_NOFOLLOW``.

Files read back (state, PID records, exit codes, logs) are opened without following a link
and without blocking (a FIFO planted there would hang a plain open), must be regular files,
and are read only up to a bound.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from pathlib import Path, PurePath

from generator.errors import XpydError

__all__ = [
    "append_descriptor",
    "check_no_links",
    "owned_dir",
    "read_bounded",
    "read_from",
    "read_tail",
    "remove_file",
    "remove_tree",
    "write_text",
]


def _relative(root: Path, path: Path | PurePath) -> PurePath:
    path = Path(path)
    if not path.is_absolute():
        return PurePath(path)
    try:
        return path.relative_to(root)
    except ValueError:
        raise XpydError(
            f"{path} lies outside {root}: the tool writes only below it",
            hint="this is a bug in xpyd-stacks, or the path was edited: report it",
        ) from None


def check_no_links(root: Path, path: Path | PurePath, *, make: bool = False) -> Path:
    """``root/path`` with every part below ``root`` a real folder (made where missing with
    ``make``); a link, a file or ``..`` on the way is refused. The path, absolute."""
    relative = _relative(root, path)
    if ".." in relative.parts:
        raise XpydError(f"{relative} climbs out of {root}", hint="use a path below it")
    if make:
        root.mkdir(parents=True, exist_ok=True)  # the trusted root: made as asked
    place = root
    for part in relative.parts:
        place = place / part
        try:
            info = os.lstat(place)
        except FileNotFoundError:
            if not make:
                continue  # nothing there: nothing to follow
            with contextlib.suppress(FileExistsError):  # made meanwhile: checked next
                os.mkdir(place)
            info = os.lstat(place)
        if stat.S_ISLNK(info.st_mode):
            raise _link_refused(place)
        if not stat.S_ISDIR(info.st_mode):
            raise XpydError(
                f"{place} is a file where the tool keeps a folder",
                hint=f"move {place} away",
            )
    return place


def owned_dir(root: Path, path: Path | PurePath) -> Path:
    """The folder ``root/path``, made where missing, no link on the way."""
    return check_no_links(root, path, make=True)


def _link_refused(place: Path) -> XpydError:
    return XpydError(
        f"{place} is a symbolic link (to {os.readlink(place)}): the tool never writes or "
        "deletes through a link",
        hint=f"replace {place} with a real folder (move the link away)",
    )


def write_text(root: Path, path: Path | PurePath, text: str) -> Path:
    """``text`` as the whole new content of ``root/path`` (its folders made): readers in other
    shells see the old file or the new one, never half of one, and a link there is replaced."""
    target = root / _relative(root, path)
    folder = owned_dir(root, target.parent.relative_to(root))
    descriptor, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=folder)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return target


def append_descriptor(root: Path, path: Path | PurePath) -> int:
    """A descriptor appending to ``root/path`` (made where missing), never through a link."""
    target = root / _relative(root, path)
    owned_dir(root, target.parent.relative_to(root))
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        descriptor = os.open(target, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _link_refused(target) from exc
        raise XpydError(f"cannot write {target}: {exc.strerror}") from exc
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise XpydError(f"{target} is not a regular file", hint=f"move {target} away")
    return descriptor


def remove_file(root: Path, path: Path | PurePath) -> None:
    """Removes ``root/path`` if it is there (a link there is removed, never followed)."""
    target = check_no_links(root, _relative(root, path).parent) / Path(path).name
    with contextlib.suppress(FileNotFoundError):
        if os.path.isdir(target) and not os.path.islink(target):
            raise XpydError(f"{target} is a folder where the tool keeps a file")
        os.unlink(target)


def remove_tree(root: Path, path: Path | PurePath) -> None:
    """Removes the folder ``root/path`` and what it holds; a link on the way (or the folder
    itself a link) is refused, links inside are removed, never followed (``shutil.rmtree``
    works through descriptors on Linux for that reason)."""
    target = check_no_links(root, path)
    if os.path.lexists(target):
        shutil.rmtree(target)


def _open_regular(path: Path) -> int | None:
    """A descriptor on the regular file ``path`` (None: absent); a link, FIFO, device or folder
    is refused without blocking."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        what = "a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        raise ValueError(f"{path} cannot be read: {what}") from exc
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise ValueError(f"{path} is not a regular file")
    return descriptor


def read_bounded(path: Path, *, max_bytes: int) -> str | None:
    """The UTF-8 text of the regular file ``path`` (None: absent). ValueError: a link, not a
    regular file, larger than ``max_bytes``, or not UTF-8; callers say what that means."""
    descriptor = _open_regular(path)
    if descriptor is None:
        return None
    with os.fdopen(descriptor, "rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"{path} is larger than {max_bytes} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not UTF-8 text") from exc


def read_from(path: Path, offset: int | None, *, max_bytes: int) -> tuple[str, int]:
    """What a log holds from ``offset`` on (None: its last ``max_bytes``), at most
    ``max_bytes`` of it (lossy UTF-8), and the offset to read on from."""
    try:
        descriptor = _open_regular(path)
    except ValueError:
        descriptor = None
    if descriptor is None:
        return "", offset or 0
    with os.fdopen(descriptor, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        start = max(0, size - max_bytes) if offset is None else min(offset, size)
        handle.seek(start)
        data = handle.read(max_bytes)
    return data.decode("utf-8", errors="replace"), start + len(data)


def read_tail(path: Path, *, max_bytes: int) -> tuple[str, int]:
    """The last ``max_bytes`` of a log (lossy UTF-8, starting at a line) and how many bytes
    before them were left out; ("", 0) where there is no such regular file."""
    try:
        descriptor = _open_regular(path)
    except ValueError:
        return "", 0
    if descriptor is None:
        return "", 0
    with os.fdopen(descriptor, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        skipped = max(0, size - max_bytes)
        handle.seek(skipped)
        data = handle.read(max_bytes)
    if skipped:
        cut = data.find(b"\n")
        data, skipped = data[cut + 1 :], skipped + cut + 1
    return data.decode("utf-8", errors="replace"), skipped
