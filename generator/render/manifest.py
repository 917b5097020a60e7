"""Which files in a stack's folder a render wrote: ``.xpyd-rendered.json`` in each folder a
stack renders into (``compose/<stack>/``, ``images/<stack>/``). The next render deletes
only files listed there, so a user's ``.env`` or ``compose.override.yaml`` beside
``compose.yaml`` stays. Pure text in, text out; the writer does the disk work."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from generator.errors import RenderError

__all__ = ["MANIFEST_NAME", "manifest_text", "read_manifest"]

MANIFEST_NAME = ".xpyd-rendered.json"
_MAX_MANIFEST_BYTES = 1 << 20


def manifest_text(stack: str, files: Iterable[PurePosixPath]) -> str:
    body = {
        "rendered_by": "xpyd-stacks (python -m generator render): files it may replace or delete",
        "stack": stack,
        "files": sorted(str(path) for path in files),
    }
    return json.dumps(body, indent=2) + "\n"


def read_manifest(folder: Path) -> frozenset[PurePosixPath] | None:
    """The files a render wrote into ``folder``; None where no render wrote a manifest."""
    path = folder / MANIFEST_NAME
    if not path.exists() and not path.is_symlink():
        return None
    try:
        if not path.is_file() or path.stat().st_size > _MAX_MANIFEST_BYTES:
            raise ValueError("not a small regular file")
        entries = json.loads(path.read_text(encoding="utf-8"))["files"]
        if not isinstance(entries, list):
            raise TypeError("'files' is not a list")
        return frozenset(_entry(entry) for entry in entries)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RenderError(
            f"{path} is not a manifest render can trust ({exc})",
            hint=f"check {folder}: remove what render wrote there and {MANIFEST_NAME}, "
            "then render again",
        ) from exc


def _entry(entry: object) -> PurePosixPath:
    """A listed file must lie inside the folder: a manifest never sends a delete elsewhere."""
    if not isinstance(entry, str):
        raise TypeError(f"entry {entry!r} is not a path")
    path = PurePosixPath(entry)
    if path.is_absolute() or not path.parts or any(p in ("..", ".", "") for p in path.parts):
        raise ValueError(f"entry {entry!r} points outside the folder")
    if entry != str(path) or path.name == MANIFEST_NAME:
        raise ValueError(f"entry {entry!r} is not a plain relative path")
    return path
